# Included by _core.pyx. PyTorch's three bits that no DLPack export carries —
# requires_grad, the negative bit and the conjugate bit (_core_producers.pxi decides what
# they mean for a View) — read as cheaply as they can be read correctly.
#
# Two ways to read them, and this part owns the choice:
#   - PyTorch's own functions (the C functions behind torch.Tensor.requires_grad, is_neg()
#     and is_conj(), __torch_function__ handling included), called without the attribute
#     lookup. Always right, but is_neg() and is_conj() release and retake the GIL (several
#     hundred instructions each): on a small tensor they cost more than the import itself.
#   - For tensors whose type is exactly torch.Tensor, the tensor's own fields: the
#     TensorImpl the Python object points to holds the dispatch key set (the negative and
#     conjugate bits are two of its keys; is_neg()/is_conj() test exactly those) and the
#     autograd metadata pointer (NULL means requires_grad is False; otherwise — a view, a
#     tensor that requires grad or ever did — c10::TensorImpl::requires_grad() is called
#     directly where libc10 exports it and it answers as PyTorch's getter on every probe,
#     else that getter is asked: 262 instructions of warning handlers and
#     __torch_function__ checks around a 22-instruction answer, issue 53). Where these fields are is not a public ABI, so it is never assumed:
#     it is *measured* once, when PyTorch is first seen, on tensors made for the purpose
#     whose bits are known, and every candidate is held to PyTorch's own answers on all of
#     them. If any measurement is ambiguous or disagrees, the fields are never read and
#     PyTorch's functions are used — a slower path, never a wrong one. Reads stay within
#     the words measured (the object's own size; the first _IMPL_WORDS words of a
#     TensorImpl, fewer than it has).
#     tests/test_fast_path_truth.py holds both ways to each other on each kind of tensor.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):

from cpython.object cimport PyObject_GetAttr
from libc.stdint cimport uint64_t, uintptr_t

ctypedef object (*_getter_fn)(object, void*)
ctypedef object (*_noargs_fn)(object, object)

cdef extern from "Python.h":
    ctypedef struct _PyGetSetDef "PyGetSetDef":
        _getter_fn get
        void* closure
    ctypedef struct _PyGetSetDescrObject "PyGetSetDescrObject":
        _PyGetSetDef* d_getset
    ctypedef struct _PyMethodDef "PyMethodDef":
        void* ml_meth
        int ml_flags
    ctypedef struct _PyMethodDescrObject "PyMethodDescrObject":
        _PyMethodDef* d_method
    int METH_NOARGS


# ---- PyTorch's own functions ------------------------------------------------------------------

cdef _getter_fn _torch_requires_grad = NULL
cdef void* _torch_requires_grad_closure = NULL
cdef _noargs_fn _torch_is_neg = NULL
cdef _noargs_fn _torch_is_conj = NULL
cdef bint _torch_probes_loaded = False
# PyTorch's own C++ answers, called directly where measured (C++ bools, read as one byte):
# c10::TensorImpl::requires_grad() const, and at::impl::torch_function_mode_enabled() — a
# TorchFunctionMode may answer for a tensor otherwise than its fields, so while one is on,
# the fields are not read and PyTorch's functions (which ask the mode) are. Mangled names
# (Itanium C++ ABI: Linux, macOS), in the libraries PyTorch loaded from its lib folder.
ctypedef unsigned char (*_impl_flag_fn)(const void*) noexcept nogil
ctypedef unsigned char (*_flag_fn)() noexcept nogil
cdef _impl_flag_fn _impl_requires_grad = NULL
cdef _flag_fn _torch_function_mode_on = NULL
cdef tuple _IMPL_REQUIRES_GRAD = ("c10", "_ZNK3c1010TensorImpl13requires_gradEv")
cdef tuple _MODE_ENABLED = ("torch_cpu", "_ZN2at4impl27torch_function_mode_enabledEv")
cdef dict _LIBRARY_FILE = {"linux": "lib{}.so", "darwin": "lib{}.dylib"}
cdef str _REQUIRES_GRAD = "requires_grad"


cdef _noargs_fn _noargs_method(object base, str name):
    descriptor = base.__dict__.get(name)
    if type(descriptor).__name__ != "method_descriptor":
        return NULL
    cdef _PyMethodDef* definition = (<_PyMethodDescrObject*>descriptor).d_method
    if definition.ml_flags != METH_NOARGS:
        return NULL
    return <_noargs_fn>definition.ml_meth


cdef int _load_torch_probes(torch) except -1:
    global _torch_requires_grad, _torch_requires_grad_closure, _torch_is_neg
    global _torch_is_conj, _torch_probes_loaded
    if _torch_probes_loaded:
        return 0
    base = getattr(torch._C, "TensorBase", None)
    if isinstance(base, type):
        descriptor = base.__dict__.get(_REQUIRES_GRAD)
        if type(descriptor).__name__ == "getset_descriptor":
            _torch_requires_grad = (<_PyGetSetDescrObject*>descriptor).d_getset.get
            _torch_requires_grad_closure = (<_PyGetSetDescrObject*>descriptor).d_getset.closure
        _torch_is_neg = _noargs_method(base, "is_neg")
        _torch_is_conj = _noargs_method(base, "is_conj")
    _torch_probes_loaded = True
    try:
        _measure_torch_layout(torch)
    except Exception:
        _forget_torch_layout()   # a PyTorch that cannot make the probes: functions only
    return 0


cdef inline bint _asked_requires_grad(x) except -1:
    if _torch_requires_grad != NULL:
        return _torch_requires_grad(x, _torch_requires_grad_closure) is True
    return PyObject_GetAttr(x, _REQUIRES_GRAD) is True


cdef inline bint _asked_is_neg(x) except -1:
    if _torch_is_neg != NULL:
        return _torch_is_neg(x, None) is True
    return x.is_neg() is True


cdef inline bint _asked_is_conj(x) except -1:
    if _torch_is_conj != NULL:
        return _torch_is_conj(x, None) is True
    return x.is_conj() is True


# ---- the tensor's own fields, where measured --------------------------------------------------

cdef enum:
    # 176 bytes: PyTorch 2.x keeps the dispatch keys in the 22nd word of its TensorImpl,
    # and its bit fields in the words after them, so every word read is inside it
    _IMPL_WORDS = 22

cdef object _plain_tensor_type = None      # torch.Tensor exactly (subclasses: functions)
cdef Py_ssize_t _impl_at = -1              # bytes into the Python object: the TensorImpl*
cdef Py_ssize_t _keys_at = -1              # bytes into the TensorImpl: the dispatch key set
cdef uint64_t _negative_key = 0
cdef uint64_t _conjugate_key = 0
cdef Py_ssize_t _autograd_at = -1          # bytes into the TensorImpl: autograd metadata*


cdef void _forget_torch_layout() noexcept:
    global _plain_tensor_type, _impl_at, _keys_at, _negative_key, _conjugate_key
    global _autograd_at, _impl_requires_grad, _torch_function_mode_on
    _plain_tensor_type = None
    _impl_requires_grad = NULL
    _torch_function_mode_on = NULL
    _impl_at = _keys_at = _autograd_at = -1
    _negative_key = _conjugate_key = 0


cdef inline uint64_t _word(uintptr_t address, Py_ssize_t offset) noexcept:
    return (<uint64_t*>(address + offset))[0]


cdef inline uintptr_t _impl_of(x) noexcept:
    """The TensorImpl of ``x`` (exactly a torch.Tensor, layout measured), or 0 — 0 too
    while a TorchFunctionMode is on, where that is measured (PyTorch's functions ask it)."""
    if _impl_at < 0 or type(x) is not _plain_tensor_type:
        return 0
    if _torch_function_mode_on != NULL and _torch_function_mode_on() != 0:
        return 0
    return <uintptr_t>_word(<uintptr_t><void*>x, _impl_at)


cdef list _impl_words(tensor):
    cdef uintptr_t impl = <uintptr_t>tensor._cdata
    return [_word(impl, 8 * i) for i in range(_IMPL_WORDS)]


cdef Py_ssize_t _only(list candidates):
    return candidates[0] if len(candidates) == 1 else -1


cdef int _measure_torch_layout(torch) except -1:
    """Find where a plain tensor keeps its TensorImpl, dispatch keys and autograd metadata,
    on tensors whose answers PyTorch gives; leave every offset at -1 unless each is
    unambiguous and agrees with PyTorch on every probe."""
    global _plain_tensor_type, _impl_at, _keys_at, _negative_key, _conjugate_key
    global _autograd_at
    _forget_torch_layout()
    Tensor = torch.Tensor
    if not hasattr(Tensor, "_cdata") or not hasattr(torch, "_neg_view"):
        return 0
    real = torch.zeros(3)
    complex_ = torch.zeros(3, dtype=torch.complex64)
    probes = [real, torch.arange(4.0), torch.ones(2, dtype=torch.int32),
              torch.zeros((2, 2)).t(), torch.zeros(5)[1:], torch._neg_view(real),
              torch._neg_view(torch.ones(2, dtype=torch.int64)), complex_, complex_.conj(),
              complex_.conj().imag, torch.zeros(3, requires_grad=True),
              torch.zeros(3).requires_grad_(True).requires_grad_(False),
              torch.zeros(3, requires_grad=True) * 2, real.detach()]
    if any(type(p) is not Tensor for p in probes):
        return 0
    # The TensorImpl pointer: the one word of each object equal to its _cdata.
    cdef Py_ssize_t words = Tensor.__basicsize__ // 8
    cdef uintptr_t address
    impl_at = []
    for i in range(2, words):     # after the reference count and the type
        if all(_word(<uintptr_t><void*>p, 8 * i) == <uint64_t><uintptr_t>p._cdata
               for p in probes):
            impl_at.append(8 * i)
    table = [_impl_words(p) for p in probes]
    negative = [_asked_is_neg(p) for p in probes]
    conjugate = [_asked_is_conj(p) for p in probes]
    grad = [_asked_requires_grad(p) for p in probes]
    # The key set: the word in which the negative bit (real vs its _neg_view) and the
    # conjugate bit (complex vs its conj()) are each one bit, and those bits say is_neg()
    # and is_conj() of every probe.
    keys_at, bits = [], []
    for i in range(_IMPL_WORDS):
        neg_bit = table[0][i] ^ table[5][i]
        conj_bit = table[7][i] ^ table[8][i]
        if neg_bit == 0 or conj_bit == 0 or neg_bit & (neg_bit - 1) or conj_bit & (conj_bit - 1):
            continue
        if all(bool(row[i] & neg_bit) == n and bool(row[i] & conj_bit) == c
               for row, n, c in zip(table, negative, conjugate)):
            keys_at.append(8 * i)
            bits.append((neg_bit, conj_bit))
    # The autograd metadata: NULL in fresh tensors, set in every tensor that requires grad
    # or ever did.
    autograd_at = []
    for i in range(_IMPL_WORDS):
        if all(table[k][i] == 0 for k in (0, 1, 2, 13)) and all(
                row[i] != 0 for row, g in zip(table, grad) if g) and table[11][i] != 0:
            autograd_at.append(8 * i)
    _impl_at, _keys_at, _autograd_at = _only(impl_at), _only(keys_at), _only(autograd_at)
    if _impl_at < 0 or _keys_at < 0:
        _forget_torch_layout()
        return 0
    _negative_key, _conjugate_key = bits[0]
    _plain_tensor_type = Tensor
    _measure_torch_function_mode(torch)
    if _autograd_at >= 0 and _torch_function_mode_on != NULL:
        _measure_impl_requires_grad(torch)
    return 0


cdef uintptr_t _torch_native(torch, tuple where):
    """The address of C++ function ``where[1]`` in PyTorch's library ``where[0]`` — the copy
    PyTorch loaded (RTLD_NOLOAD: never a second one) — or 0."""
    pattern = _LIBRARY_FILE.get(_sys.platform)
    no_load = getattr(_os, "RTLD_NOLOAD", 0)
    if pattern is None or not no_load:
        return 0
    import ctypes
    try:
        library = ctypes.CDLL(_os.path.join(_os.path.dirname(torch.__file__), "lib",
                                            pattern.format(where[0])),
                              mode=no_load | _os.RTLD_LAZY)
        return ctypes.cast(getattr(library, where[1]), ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return 0


cdef int _measure_torch_function_mode(torch) except -1:
    """Use at::impl::torch_function_mode_enabled() where it says no outside a
    TorchFunctionMode and yes inside one."""
    global _torch_function_mode_on
    _torch_function_mode_on = NULL
    cdef _flag_fn candidate = <_flag_fn>_torch_native(torch, _MODE_ENABLED)
    mode_type = getattr(getattr(torch, "overrides", None), "TorchFunctionMode", None)
    if candidate == NULL or not isinstance(mode_type, type) or candidate() != 0:
        return 0
    with type("_ProbeMode", (mode_type,), {})():
        if candidate() == 0:
            return 0
    if candidate() == 0:
        _torch_function_mode_on = candidate
    return 0


cdef int _measure_impl_requires_grad(torch) except -1:
    """Use c10::TensorImpl::requires_grad() for tensors with autograd metadata where libc10
    exports it and it answers as PyTorch's getter on every probe — views above all (whose
    answer may come from their base, made to require grad after the view), leaves,
    results, detached tensors."""
    global _impl_requires_grad
    _impl_requires_grad = NULL
    cdef _impl_flag_fn candidate = <_impl_flag_fn>_torch_native(torch, _IMPL_REQUIRES_GRAD)
    if candidate == NULL:
        return 0
    base, later = torch.zeros(4), torch.zeros(4)
    leaf = torch.zeros(4, requires_grad=True)
    view_of_later = later[1:]
    later.requires_grad_(True)                  # the view requires grad through its base
    probes = [base[1:], base.reshape(2, 2), base.t(), leaf, leaf[1:], leaf * 2,
              leaf.detach(), leaf.detach()[1:], view_of_later, later,
              torch.zeros(3).requires_grad_(True).requires_grad_(False),
              torch.zeros(3, requires_grad=True).reshape(3, 1)]
    cdef uintptr_t impl
    cdef int with_metadata = 0
    for probe in probes:
        impl = <uintptr_t>probe._cdata
        if _word(impl, _autograd_at) == 0:
            continue
        with_metadata += 1
        if (candidate(<void*>impl) != 0) != _asked_requires_grad(probe):
            return 0
    if with_metadata >= 10:
        _impl_requires_grad = candidate
    return 0


# ---- what the rest of the core asks ------------------------------------------------------------

# Each bit of ``x`` given ``impl``, its _impl_of (asked once for all three: asking costs a
# call where modes are measured), or of ``x`` alone.

cdef inline uintptr_t _torch_impl_of(x) noexcept:
    return _impl_of(x)


cdef inline bint _torch_requires_grad_of(x) except -1:
    return _torch_requires_grad_in(x, _impl_of(x))


cdef inline bint _torch_is_neg_of(x) except -1:
    return _torch_is_neg_in(x, _impl_of(x))


cdef inline bint _torch_is_conj_of(x) except -1:
    return _torch_is_conj_in(x, _impl_of(x))


cdef inline bint _torch_requires_grad_in(x, uintptr_t impl) except -1:
    if impl != 0 and _autograd_at >= 0:
        if _word(impl, _autograd_at) == 0:
            return False    # no autograd metadata: PyTorch's requires_grad() is False
        if _impl_requires_grad != NULL:   # measured: PyTorch's own answer, called directly
            return _impl_requires_grad(<void*>impl) != 0
    return _asked_requires_grad(x)


cdef inline bint _torch_is_neg_in(x, uintptr_t impl) except -1:
    if impl != 0:
        return (_word(impl, _keys_at) & _negative_key) != 0
    return _asked_is_neg(x)


cdef inline bint _torch_is_conj_in(x, uintptr_t impl) except -1:
    if impl != 0:
        return (_word(impl, _keys_at) & _conjugate_key) != 0
    return _asked_is_conj(x)


def torch_bits_read_from_fields():
    """Which of PyTorch's bits this process reads from a tensor's own fields (for the
    tests and benchmarks): a dict of the measured offsets, or None when only PyTorch's
    functions are used."""
    _load_torch_probes(_sys.modules["torch"])
    if _impl_at < 0:
        return None
    return {"impl": _impl_at, "keys": _keys_at, "negative_key": _negative_key,
            "conjugate_key": _conjugate_key,
            "autograd": None if _autograd_at < 0 else _autograd_at,
            "requires_grad_called": _impl_requires_grad != NULL,
            "modes_seen": _torch_function_mode_on != NULL}


def torch_bits_by_functions(x):
    """(requires_grad, is_neg, is_conj) of ``x`` asked of PyTorch's own functions."""
    _load_torch_probes(_sys.modules["torch"])
    return (_asked_requires_grad(x), _asked_is_neg(x), _asked_is_conj(x))


def torch_bits(x):
    """(requires_grad, is_neg, is_conj) of ``x`` as the import paths read them."""
    _load_torch_probes(_sys.modules["torch"])
    return (_torch_requires_grad_of(x), _torch_is_neg_of(x), _torch_is_conj_of(x))
