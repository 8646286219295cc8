# Included by _core.pyx. What a producer's DLPack export leaves out, put back — the same on
# every route (PyTorch's C exchange table, __dlpack__, the general plan), so that a fast
# path gives exactly what the protocol path gives, or the same refusal.
#
# Per producer type, decided once and cached (_producer_kind):
#   - JAX, Arrow and TensorFlow arrays are immutable, yet all export legacy capsules (no
#     READ_ONLY flag): their Views are read-only.
#   - PaddlePaddle tensors with stop_gradient=False take part in autograd: read-only, as
#     PyTorch's requires_grad.
#   - Dask arrays are lazy (no memory until computed) and their __array__ computes the
#     whole graph silently: refused with NeedsCopy, resolved by .compute() where the
#     caller allows copies; an xarray object is judged by the array in its .data.
#   - PyTorch tensors carry three facts no DLPack export holds:
#       requires_grad — writing through a View would bypass autograd: the View is read-only
#         (PyTorch's __dlpack__ refuses such tensors; arrayport exports x.detach() instead,
#         the same memory, so both routes give the same read-only View);
#       the negative bit (a lazy negation: torch._neg_view, x.conj().imag) and the
#         conjugate bit (x.conj() of a complex tensor) — the memory holds the values
#         *before* the negation or conjugation, so sharing it gives wrong numbers. PyTorch's
#         exchange table ignores both bits and its __dlpack__ ignores the negative one
#         (torch 2.13). Refused with NeedsCopy (a BufferError naming resolve_neg() /
#         resolve_conj()); where the caller allows copies (to_numpy, to_torch, to,
#         from_dlpack with copy=None/True) the tensor is resolved into a copy instead.
#   - every producer: an export that fails with anything but BufferError/TypeError/
#     ValueError (PyTorch's RuntimeError with a C++ trace for sparse, meta, nested and
#     quantized tensors; JAX's for a deleted array) becomes a BufferError naming the
#     producer, with the first line of its reason.
# And for every import, on every route (_finish_import): memory of an immutable producer is
# read-only, and a zero stride over an extent > 1 (a broadcast: many elements, one address)
# makes the View read-only, as NumPy makes broadcast arrays, unless the memory's owner is a
# writable numpy.ndarray (NumPy's own flag: the source saying otherwise).
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_dispatch.pxi: _view
#   _core_dlpack.pxi: _dlpack_view
#   _core_hooks.pxi: _copies_watched, _hook, _unasked_copy_hook
#   _core_numpy.pxi: _load_numpy
#   _core_torch_bits.pxi: _load_torch_probes, _torch_impl_of, _torch_is_conj_in,
#       _torch_is_conj_of, _torch_is_neg_in, _torch_requires_grad_in
#   _core_view.pxi: View

class NeedsCopy(BufferError):
    """The producer's memory does not hold the array's values as they are (PyTorch's lazy
    conjugation or negation; an ``__array__`` that can only copy): a zero-copy View would
    be wrong, so none is made. ``resolve()`` gives an object whose memory does hold them
    (a copy); arrayport's converters use it where the caller allows copies — or, when
    ``explicit`` (a lazy Dask array: resolving it computes a graph), only where the caller
    asked for a copy with ``copy=True``. ``stand_in``, where there is one: an object over
    memory that is there, of the copy's type and layout but not its values (a lazy
    conjugate tensor without its bit), on which ``arrayport.explain`` lets the target judge
    the copy without making it (None: explain stops at the copy)."""

    def __init__(self, message, resolve, copied=True, explicit=False, stand_in=None):
        super().__init__(message)
        self.resolve = resolve
        self.copied = copied
        self.explicit = explicit
        self.stand_in = stand_in


cdef enum _ProducerKind:
    _PLAIN = 0
    _IMMUTABLE = 1   # JAX, pyarrow: immutable arrays exported as legacy capsules
    _TORCH = 2
    _MASKED = 3      # numpy.ma.MaskedArray: its __dlpack__ (ndarray's) drops the mask
    _LAZY = 4        # Dask arrays: no memory until computed; __array__ computes silently
    _LABELLED = 5    # xarray DataArray / Variable: labels around an array in .data
    _PADDLE = 6      # PaddlePaddle tensors: stop_gradient=False is PyTorch's requires_grad
    _TENSORFLOW = 7  # TensorFlow tensors: immutable; string/variant/resource ones abort

# The quirk names of the library records (arrayport.libraries.QUIRKS), as kinds.
cdef dict _KIND_OF_QUIRK = {"immutable": _IMMUTABLE, "torch": _TORCH, "masked": _MASKED,
                            "lazy": _LAZY, "labelled": _LABELLED, "paddle": _PADDLE,
                            "tensorflow": _TENSORFLOW}
# {module root: kind}: which library's arrays need what, from its record (installed at import
# by arrayport._policy, like the hooks; the core names no library but where it has a fast
# path or a kind's own test below).
cdef dict _kind_by_root = {}
cdef dict _producer_kinds = {}


cdef class _TypeKind:
    """A type and its producer kind, in one object (the one-entry cache in front of the
    dict: replaced whole, never changed, so a thread never pairs one type with another's
    kind); the kind a C int, read without a conversion."""
    cdef object tp
    cdef int kind


cdef _TypeKind _type_kind(object tp, int kind):
    cdef _TypeKind entry = _TypeKind.__new__(_TypeKind)
    entry.tp, entry.kind = tp, kind
    return entry


cdef _TypeKind _last_producer_kind = _type_kind(None, _PLAIN)


def install_producer_quirks(dict quirks):
    """Install {module root: quirk name} (arrayport.libraries.producer_quirks())."""
    global _kind_by_root, _last_producer_kind
    kinds = {}
    for root, quirk in quirks.items():
        if quirk not in _KIND_OF_QUIRK:
            raise ValueError(f"install_producer_quirks: unknown quirk {quirk!r} for {root!r}")
        kinds[str(root)] = _KIND_OF_QUIRK[quirk]
    _kind_by_root = kinds
    _producer_kinds.clear()
    _last_producer_kind = _type_kind(None, _PLAIN)


cdef int _kind_of_type(object t) except -1:
    """The kind of a type not seen before: its library's (by module root), held to the
    kind's own test of which of the library's types are its arrays; a subclass of a torch
    tensor or a NumPy masked array, wherever it is defined, is one."""
    cdef int kind = _kind_by_root.get(t.__module__.partition(".")[0], _PLAIN)
    if kind == _LAZY and not (hasattr(t, "compute") and hasattr(t, "chunks")):
        kind = _PLAIN
    elif kind == _LABELLED and not isinstance(getattr(t, "data", None), property):
        kind = _PLAIN
    elif kind == _PADDLE and not hasattr(t, "stop_gradient"):
        kind = _PLAIN
    elif kind == _TORCH or kind == _MASKED:
        kind = _PLAIN                       # decided by the base classes below
    if kind != _PLAIN:
        return kind
    masked = getattr(_sys.modules.get("numpy.ma"), "MaskedArray", None)
    torch = _sys.modules.get("torch")
    if masked is not None and issubclass(t, masked):
        return _MASKED
    if torch is not None and issubclass(t, torch.Tensor):
        _load_torch_probes(torch)
        return _TORCH
    return _PLAIN


cdef int _producer_kind(object t) except -1:
    global _last_producer_kind
    cdef _TypeKind last = _last_producer_kind
    if last.tp is t:
        return last.kind
    cached = _producer_kinds.get(t)
    cdef int kind
    if cached is not None:
        kind = cached
    else:
        kind = _kind_of_type(t)
        if len(_producer_kinds) >= _TYPE_CACHE_LIMIT:
            _producer_kinds.clear()
        _producer_kinds[t] = kind
    _last_producer_kind = _type_kind(t, kind)
    return kind


def _resolved_torch_tensor(x):
    """A tensor holding ``x``'s values as they are meant (conjugation and negation applied
    into new memory)."""
    return x.resolve_conj().resolve_neg()


def _torch_without_lazy_bits(x):
    """``x``'s memory without its lazy bits — the type and layout of its resolved copy, not
    its values — a view, no data moved: the stand-in explain judges (NeedsCopy)."""
    if x.is_conj():
        x = x.conj()            # a lazy conjugation undone lazily: the same memory
    if x.is_neg():
        x = _sys.modules["torch"]._neg_view(x)
    return x


cdef int _refuse_lazy_torch(x, str bit, str operation, str method) except -1:
    raise NeedsCopy(
        f"dlpack: the PyTorch tensor has its {bit} bit set (a lazy {operation}: its memory "
        f"holds the values before it), which no DLPack export can carry, so sharing it "
        f"would give wrong values; call .{method}() first (a copy), or use "
        f"arrayport.to_numpy / arrayport.from_dlpack(copy=None), which resolve it",
        lambda: _resolved_torch_tensor(x), stand_in=lambda: _torch_without_lazy_bits(x))


cdef bint _torch_before_export(x, bint check_conj) except -1:
    """Refuse a negated (or, with ``check_conj``, conjugated) tensor before anything is
    exported; return whether it requires grad (its View must be read-only). A tensor whose
    flags cannot even be read (PyTorch raises for some sparse layouts) is refused."""
    cdef uintptr_t impl
    try:
        impl = _torch_impl_of(x)   # once, for the three bits
        if _torch_is_neg_in(x, impl):
            _refuse_lazy_torch(x, "negative", "negation", "resolve_neg")
        if check_conj and _torch_is_conj_in(x, impl):
            _refuse_lazy_torch(x, "conjugate", "conjugation", "resolve_conj")
        return _torch_requires_grad_in(x, impl)
    except BufferError:
        raise
    except Exception as error:
        raise _producer_failure(x, "its tensor flags", error)


cdef int _torch_after_import(x, View v, bint requires_grad) except -1:
    """The checks that need the exported type (only complex tensors can be conjugated)."""
    if requires_grad:
        v._flags |= APDL_FLAG_READ_ONLY
    if v._t.dtype.code == APDL_COMPLEX and _torch_is_conj_of(x):
        _refuse_lazy_torch(x, "conjugate", "conjugation", "resolve_conj")
    return 0


cdef int _refuse_masked(x) except -1:
    """A masked array with any masked element: every protocol would export the data without
    its mask (invalid elements as if valid), so it is refused."""
    if x.mask is not False and x.mask.any():
        raise TypeError("view: the masked array has masked (invalid) elements, which no "
                        "array protocol can carry; use .filled(value) or .data explicitly")
    return 0


cdef int _refuse_lazy(x, data) except -1:
    """A Dask array (``data``, alone or inside the xarray object ``x``) holds no values
    until computed, and its ``__array__`` computes the whole graph silently: refused with
    NeedsCopy; the converters (to_numpy, to_torch, to, require) compute it when asked
    for a copy with copy=True."""
    tp = type(x)
    raise NeedsCopy(
        f"view: {tp.__module__}.{tp.__qualname__} is backed by a lazy Dask array, whose "
        f"values exist only once computed; call .compute() first, or ask for a copy "
        f"(arrayport.to_numpy(x, copy=True), arrayport.to(x, target, copy=True)), which "
        f"computes it", lambda: data.compute(), True, True)


cdef int _refuse_lazy_labelled(x) except -1:
    """Refuse an xarray object whose .data is a lazy Dask array (its __array__ would
    compute it); one over memory goes on to __array__, which shares it."""
    data = x.data
    if _producer_kind(type(data)) == _LAZY:
        _refuse_lazy(x, data)
    return 0


cdef inline bint _paddle_tracks_grad(x) except -1:
    """Whether a PaddlePaddle tensor takes part in autograd: writing through a View would
    bypass it, so its View is read-only (as a PyTorch tensor that requires grad)."""
    return getattr(x, "stop_gradient", True) is False


cdef int _refuse_unexportable(x, int kind) except -1:
    """Refuse, before the producer is asked, what its export would kill the process on:
    TensorFlow's __dlpack__ aborts (``Check failed: DataTypeCanUseMemcpy``) on string,
    variant and resource tensors (2.21); PaddlePaddle's exports segfault on sparse tensors
    (3.3)."""
    tp = type(x)
    if kind == _TENSORFLOW:
        dtype = getattr(x, "dtype", None)
        if dtype is not None and getattr(dtype, "name", None) in ("string", "variant",
                                                                   "resource"):
            raise BufferError(f"dlpack: a TensorFlow {dtype.name} tensor has no memory "
                              f"layout DLPack can describe (TensorFlow's own export aborts "
                              f"the process on it)")
    elif kind == _PADDLE:
        is_sparse = getattr(x, "is_sparse", None)
        if is_sparse is not None and is_sparse():
            raise BufferError(f"dlpack: {tp.__module__}.{tp.__qualname__} is sparse, which "
                              f"no strided export can carry (PaddlePaddle's own export "
                              f"crashes the process on it); call .to_dense() first")
    return 0


# ---- errors from producers -------------------------------------------------------------------

cdef object _producer_failure(object x, str what, BaseException error):
    """A BufferError for a producer whose export raised something outside the DLPack
    contract (RuntimeError with a C++ trace…): arrayport's message, the producer's reason
    (its first line), the original chained."""
    reason = str(error).strip().splitlines()
    tp = type(x)
    failure = BufferError(f"dlpack: {tp.__module__}.{tp.__qualname__} could not export "
                          f"through {what}: {type(error).__name__}: "
                          f"{reason[0] if reason else '(no message)'}")
    failure.__cause__ = error
    return failure


cdef object _producer_refusal(object x, BaseException error):
    """A producer's own BufferError, in arrayport's words (``dlpack: …``) with its reason;
    one already in them (arrayport's own objects) is kept as it is."""
    if str(error).startswith("dlpack:"):
        return error
    tp = type(x)
    refusal = BufferError(f"dlpack: {tp.__module__}.{tp.__qualname__} refused to export: "
                          f"{error}")
    refusal.__cause__ = error
    return refusal


# ---- broadcasts --------------------------------------------------------------------------------

cdef inline bint _has_overlap(View v) noexcept:
    """A zero stride over an extent > 1: several elements at one address. An array with no
    elements has none (NumPy >= 2.3 exports empty arrays with zero strides)."""
    if v._size == 0:
        return False
    for i in range(v._t.ndim):
        if v._t.strides[i] == 0 and v._t.shape[i] > 1:
            return True
    return False


cdef int _finish_import(View v, object owner) except -1:
    """The rules every View constructor applies once the View describes its memory: a
    masked array with masked elements is refused; an immutable producer's memory (JAX,
    Arrow: whatever their export says) is read-only, and so is a broadcast unless a writable
    numpy.ndarray owns it."""
    return _finish_import_of_kind(v, owner,
                                  _PLAIN if owner is None else _producer_kind(type(owner)))


cdef int _finish_import_of_kind(View v, object owner, int kind) except -1:
    """``_finish_import`` where the owner's producer kind is known already."""
    if kind == _MASKED:
        _refuse_masked(owner)  # every constructor, not only view(): the mask is not exported
    if v._flags & APDL_FLAG_READ_ONLY:
        return 0
    if (kind == _IMMUTABLE or kind == _TENSORFLOW
            or (kind == _PADDLE and _paddle_tracks_grad(owner))):
        v._flags |= APDL_FLAG_READ_ONLY
        return 0
    if not _has_overlap(v):
        return 0
    numpy = _sys.modules.get("numpy")
    if numpy is not None and isinstance(owner, numpy.ndarray) and owner.flags.writeable:
        return 0
    v._flags |= APDL_FLAG_READ_ONLY
    return 0


# ---- copy-allowed entry points ----------------------------------------------------------------

# Python's own values (lists, tuples, numbers): where a copy is allowed — every converter
# and require — taken as numpy.asarray takes them; they hold no array memory to share, so
# under copy=False they are NeedsCopy. arrayport.view (never a copy) refuses them.
cdef tuple _PYTHON_VALUES = (list, tuple, int, float, complex, bool)


cdef View _view_of_python_values(x, dtype, copy, str who, str what):
    """A new host array of the Python values ``x`` (of ``dtype``; None: NumPy's choice),
    flagged ``is_copy``; ``NeedsCopy`` with ``copy=False``."""
    if copy is False:
        raise NeedsCopy(f"{who}: {what} is a Python {type(x).__name__}, which holds no array "
                        f"memory to share: taking it needs a copy (as numpy.asarray makes), "
                        f"but copy=False", lambda: _sys.modules["numpy"].asarray(x))
    if _copies_watched and copy is None:   # a copy by nature (copy_watch decides what it says)
        _hook(_unasked_copy_hook, "unasked_copy")(
            who, f"{what} is a Python {type(x).__name__}, which holds no array memory to "
                 f"share: a new array is made of it", True)
    _load_numpy()
    try:
        array = _sys.modules["numpy"].array(x, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as error:
        raise type(error)(f"{who}: {what} cannot become an array as numpy.asarray would "
                          f"make it: {error}") from None
    try:
        v = _view(array, None)
    except (BufferError, TypeError) as error:   # strings, objects, datetimes: no DLPack type
        raise TypeError(f"{who}: {what} is a Python {type(x).__name__} that numpy.asarray "
                        f"makes a {array.dtype} array, which no View can hold ({error})") \
            from None
    return mark_copied(v, None)


cdef View _resolved_view(refusal, stream, bint dlpack_only, bint asked=False):
    """The View of what ``refusal.resolve()`` gives, flagged as a copy when it is one;
    a copy nobody ``asked`` for first goes by copy_watch's rule (a warning, or explain's
    stop) while copies are watched."""
    cdef View v
    if _copies_watched and not asked and refusal.copied:
        if _hook(_unasked_copy_hook, "unasked_copy")("arrayport", str(refusal), False,
                                                      refusal.stand_in is not None):
            # explain: the target judges the stand-in (the copy's type and layout over
            # memory that is there); no copy is made
            stand_in = refusal.stand_in()
            v = _dlpack_view(stand_in, stream) if dlpack_only else _view(stand_in, stream)
            v._flags |= APDL_FLAG_IS_COPIED
            return v
    resolved = refusal.resolve()
    v = _dlpack_view(resolved, stream) if dlpack_only else _view(resolved, stream)
    if refusal.copied:
        v._flags |= APDL_FLAG_IS_COPIED
    return v


cdef View _view_or_copy(obj, stream, bint copy_asked=False):
    """``view(obj)``, or — where the producer's memory does not hold the values as they
    are (NeedsCopy) — a View of a resolved copy. For callers that allow copies; a refusal
    that wants an explicit copy (a lazy Dask array) stands unless ``copy_asked``."""
    try:
        return _view(obj, stream)
    except NeedsCopy as refusal:
        if refusal.explicit and not copy_asked:
            raise
        return _resolved_view(refusal, stream, False, copy_asked)
    except TypeError:
        if type(obj) not in _PYTHON_VALUES:
            raise
    return _view_of_python_values(obj, None, True if copy_asked else None, "arrayport",
                                  "the data")


def view_or_copy(obj, /, *, stream=None, copy=None):
    """``view(obj, stream=stream)`` for converters: with ``copy`` not False, a producer
    whose memory does not hold its values as they are (NeedsCopy) is resolved into a copy
    (``is_copy``) instead of refused (a lazy one only with ``copy=True``), and Python
    values (lists, tuples, numbers) become a new array as numpy.asarray makes it
    (NeedsCopy under ``copy=False``)."""
    if copy is False:
        if type(obj) in _PYTHON_VALUES:
            return _view_of_python_values(obj, None, False, "arrayport", "the data")
        return _view(obj, stream)
    return _view_or_copy(obj, stream, copy is True)
