# Included by _core.pyx. NumPy arrays without a DLPack round trip, through NumPy's C API
# (_csrc/numpy_arrays.h), loaded the first time arrayport meets NumPy:
#   - ndarray → View: read the array's own description (NumPy's DLPack export rules; what
#     those rules refuse goes the general way, with its messages);
#   - View → ndarray: a new array over the View's memory whose base is the View;
#   - the fast half of View.__array_ufunc__ (a plain call on host Views, NumPy arrays and
#     scalars); everything else is arrayport/numpy_dispatch.py.
# Ownership: a View of an ndarray holds the array (its owner); an ndarray of a View holds
# the View (its base). Neither holds the other, so no cycle is ever made.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _count_elements
#   _core_dispatch.pxi: _view
#   _core_hooks.pxi: _hook, _to_numpy_general_hook
#   _core_streams.pxi: _host_wait_for_pending
#   _core_view.pxi: View

from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM

cdef extern from "_csrc/numpy_arrays.h":
    int ap_numpy_load() except -1
    PyObject* ap_numpy_ndarray_type()
    bint ap_is_numpy_scalar(object obj)
    int ap_ndarray_ndim(object array)
    int ap_ndarray_describe(object array, APDLTensor* t, int* readonly, int64_t* size)
    bint ap_ndarray_is_exactly(object obj, const APDLTensor* t, int readonly, int64_t itemsize)
    object ap_ndarray_over(const APDLTensor* t, int readonly, object owner)

cdef object _numpy_ndarray = None   # numpy.ndarray, once NumPy's C API is loaded
cdef object _numpy_ufunc = None     # numpy.ufunc, likewise


cdef int _load_numpy() except -1:
    global _numpy_ndarray, _numpy_ufunc
    if _numpy_ndarray is None:
        ap_numpy_load()
        _numpy_ufunc = _sys.modules["numpy"].ufunc
        _numpy_ndarray = <object>ap_numpy_ndarray_type()
    return 0


cdef inline bint _is_ndarray_type(type tp):
    """Whether ``tp`` is numpy.ndarray itself (loading NumPy's C API when it is)."""
    if tp is _numpy_ndarray:
        return True
    if _numpy_ndarray is None and tp.__name__ == "ndarray" and tp.__module__ == "numpy":
        _load_numpy()
        return tp is _numpy_ndarray
    return False


cdef View _view_of_ndarray(array):
    """A View of the numpy.ndarray ``array``, read from NumPy's C API; None when NumPy's
    DLPack export would not carry it as it is (the caller then takes the general path)."""
    cdef int ndim = ap_ndarray_ndim(array)
    if ndim > AP_COPY_MAX_NDIM:
        return None
    cdef View v = View.__new__(View)
    cdef int readonly = 0
    cdef int64_t size = 0
    v._reserve_dims(ndim)
    if not ap_ndarray_describe(array, &v._t, &readonly, &size):
        return None
    v._flags = APDL_FLAG_READ_ONLY if readonly else 0
    # NumPy keeps size * itemsize within intp; counted again all the same, because every
    # View's counts come from one checked place (_count_elements).
    _count_elements(v, "dlpack")
    v._owner = array
    v._protocol = "dlpack"  # the facts and rules of NumPy's DLPack export, minus the capsule
    return v


cdef object _ndarray_over_view(View v):
    """A new ndarray over ``v``'s host memory (a NumPy-native type), based on ``v``."""
    _host_wait_for_pending(v)
    _load_numpy()
    return ap_ndarray_over(&v._t, (v._flags & APDL_FLAG_READ_ONLY) != 0, v)


cdef inline bint _numpy_computes_on(View v) noexcept:
    """Whether NumPy can compute on ``v`` as it is: CPU memory of a NumPy-native type."""
    return v._t.device.device_type == APDL_CPU and _numpy_reads(v._t.dtype)


cdef object _compute_operand(View v):
    cdef int64_t itemsize = v._t.dtype.bits // 8
    if ap_ndarray_is_exactly(v._owner, &v._t, (v._flags & APDL_FLAG_READ_ONLY) != 0,
                             itemsize):
        return v._owner
    return _ndarray_over_view(v)


def compute_operand(View v):
    """An ndarray over ``v``'s host memory for NumPy to compute on, never handed to the
    user: the ndarray ``v`` was made from when it still describes the same memory exactly,
    else a new one based on ``v``; pinned memory and ml_dtypes types as ``to_numpy`` gives
    them (shared all the same)."""
    if _numpy_computes_on(v):
        return _compute_operand(v)
    return _hook(_to_numpy_general_hook, "to_numpy_general")(v)


cdef object _wrap_result(result):
    tp = type(result)
    cdef View v
    if tp is _numpy_ndarray:
        v = _view_of_ndarray(result)
        if v is not None:
            return v
        try:
            return _view(result, None)
        except (BufferError, TypeError):
            return result
    if tp is tuple or tp is list:
        items = [_wrap_result(item) for item in result]
        return tuple(items) if tp is tuple else items
    if isinstance(result, tuple):  # a named tuple (np.linalg.svd, np.unique_all…)
        return tp(*[_wrap_result(item) for item in result])
    return result


def wrap_result(result):
    """A computation's result as the user gets it back: an ndarray as a View of it (an
    ndarray no View can describe — long double, datetime, object… — stays an ndarray);
    tuples, lists and named tuples element by element; anything else (scalars) as it is."""
    return _wrap_result(result)


# ---- the fast half of View.__array_ufunc__ / __array_function__ ------------------------------
# Host memory only, NumPy-native types only, operands NumPy takes as they are (Views,
# ndarrays, Python and NumPy scalars; for array functions also lists and tuples of them
# and anything without an override of its own). Anything else — device memory, ml_dtypes
# types, read-only out=, foreign overrides — is _NOT_FAST: numpy_dispatch.py decides it.

cdef object _NOT_FAST = object()
cdef frozenset _UFUNC_METHODS = frozenset({"__call__", "reduce", "reduceat", "accumulate",
                                           "outer", "at"})


cdef int _check_ufunc_call(ufunc, method, tuple inputs, dict kwargs) except -1:
    """Validate ``__array_ufunc__``'s arguments as NumPy's ufunc machinery makes them, for
    callers that call the method directly: a ufunc, one of its methods, at least one
    input, and ``out`` as a tuple (a single ``out=`` operand is wrapped, as NumPy does)."""
    _load_numpy()
    if not isinstance(ufunc, _numpy_ufunc):
        raise TypeError(f"__array_ufunc__: expected a numpy.ufunc, got {type(ufunc).__name__}")
    if type(method) is not str or method not in _UFUNC_METHODS:
        raise TypeError(f"__array_ufunc__: method must be one of {sorted(_UFUNC_METHODS)}, "
                        f"got {method!r}")
    if not inputs:
        raise TypeError(f"__array_ufunc__: {ufunc.__name__}.{method} needs at least one input")
    if "out" in kwargs:
        out = kwargs["out"]
        if out is None:
            del kwargs["out"]
        elif type(out) is not tuple:
            kwargs["out"] = (out,)
    return 0


cdef inline bint _plain_operand(x, type tp):
    """Whether NumPy takes ``x`` as it is, with no override of its own."""
    return (tp is _numpy_ndarray or tp is float or tp is int or tp is complex or tp is bool
            or ap_is_numpy_scalar(x))


cdef object _host_operands(tuple items, bint nested):
    """``items`` with every View replaced by its compute operand; None when any item is
    not fast-path material. ``nested``: look into lists and tuples (array functions)."""
    cdef Py_ssize_t n = len(items)
    cdef tuple operands = PyTuple_New(n)
    cdef Py_ssize_t i
    for i in range(n):
        x = items[i]
        tp = type(x)
        if tp is View:
            if not _numpy_computes_on(<View>x):
                return None
            x = _compute_operand(<View>x)
        elif nested and (tp is list or tp is tuple):
            x = _host_operands(tuple(x), True)
            if x is None:
                return None
            if tp is list:
                x = list(<tuple>x)
        elif not _plain_operand(x, tp):
            if not nested or hasattr(tp, "__array_function__") or hasattr(tp, "__array_ufunc__"):
                return None
        Py_INCREF(x)  # PyTuple_SET_ITEM steals it
        PyTuple_SET_ITEM(operands, i, x)
    return operands


cdef object _result_for_outputs(result, tuple given, tuple operands):
    """``result`` with each out= operand replaced by what the caller gave (the View)."""
    for i in range(len(operands)):
        if result is operands[i]:
            return given[i]
    if type(result) is tuple:
        return tuple([_result_for_outputs(item, given, operands) for item in <tuple>result])
    return _wrap_result(result)


cdef object _ufunc_fast(ufunc, str method, tuple inputs, dict kwargs):
    """``getattr(ufunc, method)(*inputs, **kwargs)`` on host memory, decided in C."""
    _load_numpy()
    operands = _host_operands(inputs, False)
    if operands is None:
        return _NOT_FAST
    if method == "at" and type(inputs[0]) is View and (<View>inputs[0])._flags & APDL_FLAG_READ_ONLY:
        return _NOT_FAST  # refused with a clear error by the general path
    given = None
    out_operands = None
    if kwargs:
        for name, value in kwargs.items():
            if name == "out":
                given = value  # NumPy always passes out= as a tuple here
                for target in <tuple>given:
                    if type(target) is View and (<View>target)._flags & APDL_FLAG_READ_ONLY:
                        return _NOT_FAST
                out_operands = _host_operands(<tuple>given, False)
                if out_operands is None:
                    return _NOT_FAST
            elif type(value) is View:
                return _NOT_FAST  # where=View
        kwargs = dict(kwargs)
        if out_operands is not None:
            kwargs["out"] = out_operands
    if method == "__call__":
        result = ufunc(*<tuple>operands, **kwargs) if kwargs else ufunc(*<tuple>operands)
    else:
        result = getattr(ufunc, method)(*<tuple>operands, **kwargs)
    if out_operands is not None:
        return _result_for_outputs(result, <tuple>given, <tuple>out_operands)
    return _wrap_result(result)


cdef object _array_function_fast(func, tuple types, tuple args, dict kwargs):
    """``func(*args, **kwargs)`` on host memory, decided in C (no out= or other View
    keywords: those go the general way)."""
    _load_numpy()
    for tp in types:
        if tp is not View and tp is not _numpy_ndarray:
            return _NOT_FAST
    for value in kwargs.values():  # out=View, where=View…: the general path
        tp = type(value)
        if tp is View:
            return _NOT_FAST
        if tp is list or tp is tuple:
            for item in value:
                if type(item) is View:
                    return _NOT_FAST
    operands = _host_operands(args, True)
    if operands is None:
        return _NOT_FAST
    return _wrap_result(func(*<tuple>operands, **kwargs))
