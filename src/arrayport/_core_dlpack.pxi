# Included by _core.pyx. DLPack import: a capsule consumed into a View (renamed only once
# every check passed; left unconsumed on failure, so its destructor frees it once), a
# producer's __dlpack__ asked with the consumer's stream and version, and from_dlpack's
# device= and copy= (the rules in arrayport/_import_rules.py, through a hook). DLPack
# export is the View's own (_core_view.pxi).
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_describe.pxi: _adopt, _plain_int
#   _core_exchange.pxi: _exchange_api_for, _view_via_exchange_api
#   _core_hooks.pxi: _from_dlpack_options_hook, _hook, _ndarray_fallback_hook
#   _core_numpy.pxi: _is_ndarray_type, _view_of_ndarray
#   _core_producers.pxi: _finish_import, NeedsCopy, _paddle_tracks_grad, _producer_failure,
#       _producer_kind, _producer_refusal, _refuse_masked, _refuse_unexportable,
#       _resolved_view, _torch_before_export
#   _core_streams.pxi: _dlpack_import_needs_streams, _note_dlpack_import, _stream_argument,
#       _stream_to_ask_producer
#   _core_view.pxi: View

cdef View _view_from_capsule(object capsule, object owner):
    """Consume a DLPack capsule into a View. On any failure the capsule is left unconsumed,
    so its own destructor frees the tensor exactly once — except for an unreadable major
    version, whose deleter is called here (the capsule is then marked used)."""
    cdef APDLManagedTensorVersioned* mv
    cdef APDLManagedTensor* ml
    cdef View v
    if PyCapsule_IsValid(capsule, APDL_CAPSULE_VERSIONED):
        mv = <APDLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, APDL_CAPSULE_VERSIONED)
        if mv.version.major != APDL_MAJOR_VERSION:
            PyCapsule_SetName(capsule, APDL_CAPSULE_VERSIONED_USED)
            _refuse_foreign_major(mv, "capsule")
        v = View.__new__(View)
        _adopt(v, &mv.dl_tensor, mv.flags, mv.version.minor < 2, "dlpack")
        PyCapsule_SetName(capsule, APDL_CAPSULE_VERSIONED_USED)
        v._managed = mv
        v._managed_versioned = True
    elif PyCapsule_IsValid(capsule, APDL_CAPSULE_LEGACY):
        ml = <APDLManagedTensor*>PyCapsule_GetPointer(capsule, APDL_CAPSULE_LEGACY)
        v = View.__new__(View)
        # A legacy capsule has no flags: it is writable, as its producer offered it for
        # writing (NumPy refuses to export read-only arrays this way).
        _adopt(v, &ml.dl_tensor, 0, True, "dlpack")
        PyCapsule_SetName(capsule, APDL_CAPSULE_LEGACY_USED)
        v._managed = ml
        v._managed_versioned = False
    else:
        _raise_bad_capsule(capsule)
    ap_counter_add(&ap_live_imported, 1)
    v._owner = owner
    v._protocol = "dlpack"
    _finish_import(v, owner)
    return v


cdef int _refuse_foreign_major(APDLManagedTensorVersioned* m, str what) except -1:
    """A tensor of another DLPack major version: call its deleter, read nothing else, and
    raise. The caller has already given up ownership (a capsule is marked used first)."""
    major, minor = m.version.major, m.version.minor
    if m.deleter != NULL:
        m.deleter(m)
    raise BufferError(f"dlpack: {what} has DLPack version {major}.{minor}; arrayport reads "
                      f"major version {APDL_MAJOR_VERSION} only")


cdef int _raise_bad_capsule(object capsule) except -1:
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"dlpack: expected a PyCapsule, got {type(capsule).__name__}")
    cdef const char* raw_name = PyCapsule_GetName(capsule)
    name = None if raw_name == NULL else raw_name.decode("utf-8", "replace")
    if name in ("used_dltensor", "used_dltensor_versioned"):
        raise BufferError(f"dlpack: capsule {name!r} was already consumed")
    hint = ("; it is an Arrow capsule: read it with arrayport.View.from_arrow"
            if name is not None and name.startswith("arrow_") else "")
    raise BufferError(f"dlpack: capsule named {name!r} is not a DLPack capsule (expected "
                      f"'dltensor_versioned' or 'dltensor'){hint}")




cdef object _request_capsule(x, stream):
    """x.__dlpack__(stream=..., max_version=(1, 3)), falling back to the legacy call only
    for a producer that rejects the max_version keyword. TypeError when ``x`` has no
    __dlpack__; whatever else the producer raises for an array it cannot export (pyarrow's
    ArrowTypeError for nulls, JAX's RuntimeError for a deleted array…) becomes a
    BufferError naming it — arrayport's own argument errors were raised before the call."""
    try:
        try:
            if stream is None:
                return ap_call_method_one_kw(x, _DLPACK_METHOD, _KW_MAX_VERSION,
                                             _OUR_MAX_VERSION)
            return x.__dlpack__(stream=stream, max_version=_OUR_MAX_VERSION)
        except TypeError as error:
            if not rejects_keywords(error, _KW_MAX_VERSION):
                raise
        return x.__dlpack__() if stream is None else x.__dlpack__(stream=stream)
    except BufferError as error:
        raise _producer_refusal(x, error)
    except AttributeError as error:
        if not hasattr(type(x), "__dlpack__"):
            raise TypeError(f"dlpack: {type(x).__module__}.{type(x).__qualname__} has no "
                            f"__dlpack__ method and is not a DLPack capsule") from None
        raise _producer_failure(x, "__dlpack__", error)
    except Exception as error:
        raise _producer_failure(x, "__dlpack__", error)


cdef View _dlpack_view(x, stream, bint exchange_tried=False):
    """A View of ``x`` through DLPack (the type's C exchange API when it has one, which
    names the producer's stream too, else __dlpack__), zero-copy, with the producer's quirks put back
    (_core_producers.pxi). ``stream``: the consumer's stream. ``exchange_tried``: the
    caller has already been through the exchange API (the data is on a device), or wants
    the protocol route: no fast path is taken."""
    cdef uintptr_t api
    cdef View v
    cdef int32_t gpu_type = 0
    if _dlpack_import_needs_streams(stream):
        stream = _stream_argument(stream)
        gpu_type = _check_stream_for_producer(x, stream)
        stream = _stream_to_ask_producer(stream, gpu_type)
    if exchange_tried:
        pass  # straight to __dlpack__
    elif stream is None and _is_ndarray_type(type(x)):
        v = _view_of_ndarray(x)
        if v is not None:
            return v
    else:
        api = _exchange_api_for(type(x))
        if api != 0:
            try:
                v = _view_via_exchange_api(x, api, stream)
            except NeedsCopy:
                raise  # the memory does not hold the values: no protocol can share them
            except BufferError as refusal:
                # The table refused or failed: __dlpack__ may still export; if it refuses
                # too, the table's reason stands (it names the call that failed).
                try:
                    return _dlpack_view(x, stream, True)
                except BufferError:
                    raise refusal from None
            if v is not None:
                return v
    cdef int kind = _producer_kind(type(x))
    cdef bint requires_grad = False
    source = x
    if kind == _MASKED:
        _refuse_masked(x)
    elif kind == _TORCH:
        # PyTorch's __dlpack__ refuses grad tensors and ignores the negative bit: export
        # the detached tensor (the same memory) read-only, and refuse lazy negation here.
        requires_grad = _torch_before_export(x, True)
        if requires_grad:
            source = x.detach()
    elif kind == _TENSORFLOW or kind == _PADDLE:
        _refuse_unexportable(x, kind)
        if kind == _PADDLE and _paddle_tracks_grad(x):
            # Paddle's __dlpack__ refuses such tensors (its exchange API does not): export
            # the detached tensor, the same memory, read-only as on the fast path.
            requires_grad = True
            source = x.detach()
    try:
        capsule = _request_capsule(source, stream)
    except BufferError:
        v = _fallback_import(x)
        if v is None:
            raise
        return v
    v = _view_from_capsule(capsule, x)
    if requires_grad:
        v._flags |= APDL_FLAG_READ_ONLY
    _note_dlpack_import(v, gpu_type, stream)
    return v


cdef View _dlpack_view_or_copy(x, stream, bint asked=False):
    """_dlpack_view, resolving a NeedsCopy refusal into a copy (callers allowing copies;
    ``asked``: the caller's copy=True)."""
    try:
        return _dlpack_view(x, stream)
    except NeedsCopy as refusal:
        return _resolved_view(refusal, stream, True, asked)


def dlpack_view(x, /, *, stream=None, copy=None, exchange_api=True):
    """A View of ``x`` through DLPack only (``from_dlpack`` without device/copy handling):
    zero-copy, or with ``copy`` not False, a resolved copy where the producer's memory does
    not hold its values as they are (NeedsCopy). ``exchange_api=False`` skips the type's C
    exchange API and asks ``__dlpack__`` (the protocol route the fast path must agree with:
    the differential tests compare the two)."""
    if PyCapsule_CheckExact(x):
        if stream is not None:
            raise ValueError("from_dlpack: a DLPack capsule was already produced; a "
                             "stream cannot apply to it")
        return _view_from_capsule(x, x)
    if not exchange_api:
        try:
            return _dlpack_view(x, stream, True)
        except NeedsCopy as refusal:
            if copy is False:
                raise
            return _resolved_view(refusal, stream, True, copy is True)
    if copy is False:
        return _dlpack_view(x, stream)
    return _dlpack_view_or_copy(x, stream, copy is True)


cdef int32_t _check_stream_for_producer(x, stream) except -1:
    """Validate ``stream`` against the device the producer says its data is on, before
    calling its __dlpack__: producers answer a bad stream in their own dialects (NumPy
    raises RuntimeError), the spec's answer is ValueError. Returns the device type when
    it is a stream-ordered GPU (CUDA, CUDA managed, ROCm), else 0."""
    device = getattr(x, "__dlpack_device__", None)
    if device is None:
        return 0
    answer = device()
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise BufferError(f"dlpack: {type(x).__qualname__}.__dlpack_device__() returned "
                          f"{answer!r}, not a (device_type, device_id) tuple")
    device_type = answer[0]
    if type(device_type) is not int and isinstance(device_type, int):
        device_type = _plain_int(device_type)
    if (isinstance(device_type, int) and 0 < device_type < len(_DEVICE_TYPES)
            and _DEVICE_TYPES[device_type] is not None):
        check_stream(stream, device_type)  # unknown devices: the producer judges
        if _stream_ordered(device_type):
            return device_type
    return 0


def rejects_keywords(error, names):
    """Whether a TypeError says the callee does not accept the keyword arguments ``names``
    (an old producer), rather than failing for some other reason."""
    message = str(error)
    if "keyword" not in message:
        return False
    # CPython: "got an unexpected keyword argument 'max_version'", "'copy' is an invalid
    # keyword argument for ...", "takes no keyword arguments".
    return "no keyword arguments" in message or any(f"'{name}'" in message for name in names)


def import_capsule(capsule, owner=None):
    """A View that consumes ``capsule`` (owner defaults to the capsule itself)."""
    return _view_from_capsule(capsule, capsule if owner is None else owner)


def from_dlpack(x, /, *, device=None, copy=None, stream=None):
    """A View of ``x`` through DLPack, with the array API standard's semantics.

    Parameters
    ----------
    x : object
        Any object with ``__dlpack__`` and ``__dlpack_device__``, or a DLPack capsule
        (``"dltensor"`` or ``"dltensor_versioned"``; consumed).
    device : Device, str or tuple, optional
        Where the data should be (``"cpu"``, ``"cuda:1"``, ``(2, 1)``); a copy when it
        lives elsewhere. ``None``: where it is.
    copy : bool, optional
        ``True`` always returns a new copy (``View.is_copy``); ``False`` never copies;
        ``None`` copies only when ``device`` asks for it.
    stream : int, optional
        The CUDA/ROCm stream the caller will use the data on (DLPack values), passed to the
        producer, which orders its pending work before it; a copy is made on it.

    Returns
    -------
    View

    Raises
    ------
    BufferError
        A copy would be needed with ``copy=False``, or the capsule is malformed, used, or of
        another DLPack major version.
    TypeError
        ``x`` has no ``__dlpack__``, or an argument has the wrong type.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> a = np.arange(4.0)
    >>> ap.from_dlpack(a).readonly
    False
    >>> c = ap.from_dlpack(a, copy=True)
    >>> c.is_copy, np.shares_memory(np.asarray(c), a)
    (True, False)
    """
    if device is None and copy is None:
        return dlpack_view(x, stream=stream)
    return _hook(_from_dlpack_options_hook, "from_dlpack_with_options")(x, device, copy, stream)


cdef View _fallback_import(x):
    """NumPy arrays whose dtype NumPy's own __dlpack__ refuses (ml_dtypes bfloat16, float8…)
    are read through their array interface instead; None when that does not apply."""
    return _hook(_ndarray_fallback_hook, "ndarray_dlpack_fallback")(x)
