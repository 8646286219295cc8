"""NumPy's dispatch protocols for ``arrayport.View``: ``np.exp(view)``, ``np.mean(view)``,
``np.concatenate([view, …])`` run without the user converting anything.

Where the work runs: on the library that owns the Views' device — NumPy for host memory,
CuPy for CUDA (and ROCm) memory when CuPy is installed — over zero-copy arrays of the
inputs. Array results come back as Views on the same device, scalars as scalars. ``out=``
Views are written in place and returned as themselves; a read-only one is refused.

When ``NotImplemented`` is returned (so NumPy tries the other operands, then raises its
usual TypeError): Views on different devices, device memory with no library to compute on
it (or CuPy absent), a host View beside device arrays or a device View beside host arrays
(never a silent copy between devices), and operands of types with their own override that
arrayport does not know (NEP 13/18: let them go first).

Mixed host operands follow NumPy's rules exactly: each View stands in as an ndarray over
its memory and NumPy does the rest (scalars, lists, ``__array__`` objects, priorities).

The hot case — a plain ufunc call on host Views, ndarrays and scalars — is decided in C
(_core_numpy.pxi) before this module is reached.
"""

from __future__ import annotations


from arrayport._core import View, compute_operand, wrap_result



class _Host:
    """NumPy computing on host memory."""

    def __init__(self):
        import numpy
        self._own_overrides = {
            "__array_ufunc__": (View.__array_ufunc__, numpy.ndarray.__array_ufunc__),
            "__array_function__": (View.__array_function__,
                                   numpy.ndarray.__array_function__),
        }

    def operand(self, view):
        return compute_operand(view)

    def accepts(self, x, protocol):
        """Whether NumPy may be handed ``x`` (not a View) beside host Views: anything but
        an object whose type brings its own override, which must get its turn."""
        override = getattr(type(x), protocol, None)
        return override is None or override in self._own_overrides[protocol]

    def accepts_type(self, tp):
        return getattr(tp, "__array_function__", None) in self._own_overrides[
            "__array_function__"]

    def wrap(self, result):
        return wrap_result(result)


_host = None  # the _Host backend, made on first use


def _backend_for(views):
    """The library that computes on ``views`` (all on one device), or None. No Views at
    all (the dunder called directly on other operands): NumPy, as ndarray's would."""
    device = views[0].device if views else None
    if any(v.device != device for v in views):
        return None
    if device is None or device.type.is_host_accessible:
        global _host
        if _host is None:
            _host = _Host()
        return _host
    from arrayport import libraries
    for library in libraries.LIBRARIES:      # the library its record names for this memory
        if device.type.name in library.computes_on:
            return library.get("numpy_backend")()
    return None


# ---- walking arguments ------------------------------------------------------------------------

def _views_in(obj, found):
    """Collect the Views in ``obj``, looking into (nested) lists and tuples as NumPy's
    dispatchers do."""
    if type(obj) is View:
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _views_in(item, found)
    return found


def _others_in(obj, found):
    """Collect the objects in ``obj`` that are neither Views nor containers."""
    if isinstance(obj, (list, tuple)):
        for item in obj:
            _others_in(item, found)
    elif type(obj) is not View and obj is not None:
        found.append(obj)
    return found


def _replace_views(obj, operand_of):
    if type(obj) is View:
        return operand_of(obj)
    if type(obj) is list:
        return [_replace_views(item, operand_of) for item in obj]
    if type(obj) is tuple:
        return tuple(_replace_views(item, operand_of) for item in obj)
    return obj


def _wrap_nested(result, backend, outputs):
    """``result`` with every array the backend made turned into a View; an array that is
    an ``out=`` operand becomes the View it stands for. Lists, tuples and named tuples
    (``np.linalg.svd``…) keep their type."""
    for operand, view in outputs:
        if result is operand:
            return view
    if isinstance(result, (list, tuple)):
        items = [_wrap_nested(item, backend, outputs) for item in result]
        if type(result) is list:
            return items
        if type(result) is tuple:
            return tuple(items)
        return type(result)(*items)  # a named tuple
    return backend.wrap(result)


def _writable_outputs(out, what):
    """Refuse read-only Views among the ``out=`` operands before anything runs."""
    for target in _views_in(out, []):
        if target.readonly:
            raise ValueError(f"{what}: out= is a read-only arrayport.View; a result cannot "
                             f"be written into it")


def _operands(backend):
    """A function turning each View into the backend's array, remembering which array
    stands for which View (so out= results can be handed back as the Views)."""
    made = []

    def operand_of(view):
        operand = backend.operand(view)
        made.append((operand, view))
        return operand
    return operand_of, made


# ---- __array_ufunc__ --------------------------------------------------------------------------

def array_ufunc(ufunc, method, inputs, kwargs):
    what = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
    out = kwargs.get("out", ())
    views = _views_in(inputs, []) + _views_in(out, [])
    where = kwargs.get("where")
    if type(where) is View:
        views.append(where)
    backend = _backend_for(views)
    if backend is None:
        return NotImplemented
    others = _others_in(inputs, []) + _others_in(out, [])
    if not all(backend.accepts(x, "__array_ufunc__") for x in others):
        return NotImplemented
    _writable_outputs(out, what)
    if method == "at" and type(inputs[0]) is View and inputs[0].readonly:
        raise ValueError(f"{what}: the first operand is a read-only arrayport.View; "
                         f"ufunc.at writes into it")

    operand_of, made = _operands(backend)
    operands = _replace_views(inputs, operand_of)
    call_kwargs = dict(kwargs)
    if out:
        call_kwargs["out"] = _replace_views(out, operand_of)
    if type(where) is View:
        call_kwargs["where"] = operand_of(where)
    result = getattr(ufunc, method)(*operands, **call_kwargs)
    outputs = [pair for pair in made if any(pair[1] is target for target in out)]
    return _wrap_nested(result, backend, outputs)


# ---- __array_function__ -----------------------------------------------------------------------

def array_function(func, types, args, kwargs):
    views = _views_in(args, [])
    for value in kwargs.values():  # out=, like=, where=…
        _views_in(value, views)
    if not views:
        # like=a_view: NumPy passes the function and its arguments but not the View, so
        # its device is unknown; the array is made on the host, as a View.
        return wrap_result(func(*args, **kwargs))
    backend = _backend_for(views)
    if backend is None or not all(tp is View or backend.accepts_type(tp) for tp in types):
        return NotImplemented
    if backend is not _host:    # a device library: host arrays beside it need a copy
        others = _others_in(args, [])
        for value in kwargs.values():
            _others_in(value, others)
        if any(_is_array_like(x) and not backend.accepts(x, "__array_function__")
               for x in others):
            return NotImplemented
    out = kwargs.get("out")
    if out is not None:
        _writable_outputs(out, getattr(func, "__name__", "function"))

    operand_of, made = _operands(backend)
    call_args = _replace_views(args, operand_of)
    call_kwargs = {name: _replace_views(value, operand_of) for name, value in kwargs.items()}
    result = func(*call_args, **call_kwargs)
    out_views = _views_in(out, []) if out is not None else []
    outputs = [pair for pair in made if any(pair[1] is target for target in out_views)]
    return _wrap_nested(result, backend, outputs)


def _is_array_like(x):
    """Whether ``x`` carries array data a device computation would have to copy."""
    tp = type(x)
    return any(hasattr(tp, name) for name in (
        "__array__", "__array_interface__", "__dlpack__", "__cuda_array_interface__"))
