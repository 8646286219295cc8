# Included by _core.pyx. The hot halves of arrayport.to_torch and arrayport.to_numpy; the
# option handling and the other targets live in convert.py.
#
# to_torch hands PyTorch a managed tensor through PyTorch's own exchange API
# (managed_tensor_to_py_object_no_sync), skipping torch.from_dlpack's Python layers, for CPU
# and GPU memory alike: that function orders nothing, so for a View with GPU work pending
# PyTorch's current stream (its table's current_work_stream) is first ordered after it
# (_object_via_exchange_api, issue 42). Pinned memory, a table without those functions, and
# GPU memory for a PyTorch built without CUDA or ROCm (whose table would take a tensor it
# cannot use) go through torch.from_dlpack, which passes PyTorch's current stream to our
# __dlpack__, or refuses.
# Ownership: the managed tensor is stolen by PyTorch, success or failure.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_exchange.pxi: _exchange_api_for, _object_of_managed, _object_via_exchange_api
#   _core_hooks.pxi: _hook, _to_numpy_general_hook, _to_torch_general_hook
#   _core_numpy.pxi: _is_ndarray_type, _ndarray_over_view
#   _core_producers.pxi: _view_or_copy
#   _core_streams.pxi: _order_after_pending
#   _core_view.pxi: View


cdef object _torch_tensor_type = None
cdef uintptr_t _torch_exchange = 0       # PyTorch's exchange table
cdef bint _torch_has_gpus = False        # built for CUDA or ROCm (a CPU build's table would
                                         # take a CUDA tensor it cannot use)


cdef int _load_torch() except -1:
    global _torch_tensor_type, _torch_exchange, _torch_has_gpus
    try:
        torch = __import__("torch")  # the builtin honours a None in sys.modules
    except ImportError as error:
        raise ImportError(f"to_torch: PyTorch cannot be imported: {error}") from error
    _torch_tensor_type = torch.Tensor
    version = getattr(torch, "version", None)
    _torch_has_gpus = bool(getattr(version, "cuda", None) or getattr(version, "hip", None))
    _torch_exchange = _exchange_api_for(torch.Tensor)
    return 0


def torch_tensor_of(View v):
    """A torch.Tensor sharing ``v``'s memory, exactly as it is: callers have already
    ruled out what PyTorch cannot hold (negative strides abort the process)."""
    return _torch_tensor_of(v)


cdef object _torch_tensor_of(View v):
    if _torch_tensor_type is None:
        _load_torch()
    if _torch_exchange != 0 and (v._t.device.device_type == APDL_CPU or _torch_has_gpus):
        tensor = _object_via_exchange_api(v, _torch_exchange)
        if tensor is not None:
            return tensor
    import torch
    return torch.from_dlpack(v)


cdef object _torch_tensor_taking(View v):
    """Like _torch_tensor_of, for a View made just now that nobody else holds: the
    producer's managed tensor (validated when the View was made) goes to PyTorch as it is,
    instead of a second one wrapping the View. The View is left owning nothing."""
    if _torch_exchange == 0 \
            or (<APDLPackExchangeAPI*>_torch_exchange).managed_tensor_to_py_object_no_sync == NULL \
            or v._managed == NULL or not v._managed_versioned \
            or v._t.device.device_type != APDL_CPU:
        return _torch_tensor_of(v)
    cdef APDLManagedTensorVersioned* m = <APDLManagedTensorVersioned*>v._managed
    v._managed = NULL
    ap_counter_add(&ap_live_imported, -1)
    return _object_of_managed(<APDLPackExchangeAPI*>_torch_exchange, m)


cdef bint _has_negative_stride(View v) noexcept:
    for i in range(v._t.ndim):
        if v._t.strides[i] < 0 and v._t.shape[i] > 1:
            return True
    return False


def has_negative_stride(View v):
    """Whether stepping through ``v`` ever goes backwards in memory."""
    return _has_negative_stride(v)


def numpy_array_of(View v):
    """A NumPy array sharing ``v``'s host memory (a type NumPy holds natively), based on
    ``v``: read-only when ``v`` is."""
    return _ndarray_over_view(v)


def legacy_capsule_for_immutable_consumer(View v, stream=None):
    """A legacy ("dltensor") capsule of ``v`` even when ``v`` is read-only. Only for
    consumers whose arrays are immutable (JAX), which ask for legacy capsules and never
    write through them."""
    _order_after_pending(v, check_stream(stream, v._t.device.device_type))  # as __dlpack__
    return v._export_legacy_writable_or_immutable()


# ---- the public converters' fast paths ----------------------------------------------------
# The common call (no options, data PyTorch/NumPy can hold as it is: to_torch's on any
# device, its tensor made by the same _torch_tensor_of the general path ends in, stream
# order and all) is decided here in C; everything else goes to arrayport.convert, which
# owns the rules and their messages.

def to_torch(x, *, device=None, copy=None, stream=None, readonly="copy"):
    """A ``torch.Tensor`` of ``x``, zero-copy when PyTorch can hold the data as it is.

    Parameters
    ----------
    x : object
        Anything ``arrayport.view`` accepts.
    device : str or torch.device, optional
        Where the tensor should live; a copy when the data is elsewhere.
    copy : bool, optional
        ``True`` always copies; ``False`` never does; ``None`` copies only when PyTorch
        cannot hold the data (negative strides, read-only memory, conjugate or negative bits).
    stream : int, optional
        The DLPack stream value the caller will use the tensor on.
    readonly : {"copy", "share"}
        What to do with read-only memory, which PyTorch cannot mark: ``"copy"`` (default)
        gives PyTorch a writable copy; ``"share"`` shares it and warns
        (``ReadOnlySharedWarning``), since nothing stops writes through the tensor.

    Returns
    -------
    torch.Tensor

    Raises
    ------
    BufferError
        A copy would be needed with ``copy=False``.
    ValueError
        ``readonly`` is neither ``"copy"`` nor ``"share"``.

    Examples
    --------
    >>> import numpy as np, torch, arrayport as ap
    >>> a = np.arange(6.0).reshape(2, 3)
    >>> t = ap.to_torch(a)
    >>> t[0, 0] = 9
    >>> float(a[0, 0])
    9.0
    >>> ap.to_torch(a[::-1]).tolist() == a[::-1].tolist()    # negative strides: a copy
    True
    """
    cdef View v
    if device is None and copy is None and stream is None and (
            readonly == "copy" or readonly == "share"):
        if _torch_tensor_type is None:
            _load_torch()
        if type(x) is _torch_tensor_type:
            return x
        v = x if type(x) is View else _view_or_copy(x, None)
        if (not (v._flags & APDL_FLAG_READ_ONLY) and _torch_holds(v._t.dtype)
                and not _has_negative_stride(v)):
            if v is x:
                return _torch_tensor_of(v)
            return _torch_tensor_taking(v)  # v is ours alone: hand over what it holds
        x = v
    return _hook(_to_torch_general_hook, "to_torch_general")(
        x, device=device, copy=copy, stream=stream,
                                       readonly=readonly)


def to_numpy(x, *, copy=None):
    """A NumPy array of ``x``, zero-copy unless ``copy=True``.

    Read-only memory stays read-only. bfloat16 and the float8/6/4 formats become
    ``ml_dtypes`` arrays. Pinned host memory is shared; device memory is copied to the host
    with ``copy=True`` and refused otherwise (never an implicit device-to-host copy).

    Parameters
    ----------
    x : object
        Anything ``arrayport.view`` accepts.
    copy : bool, optional
        ``True`` always copies; ``False`` never does; ``None`` copies only when the producer
        can only give a copy.

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    BufferError
        Device memory without ``copy=True``, or a copy needed with ``copy=False``.
    TypeError
        A type NumPy cannot hold (bfloat16 without ml_dtypes, packed sub-byte types).

    Examples
    --------
    >>> import torch, arrayport as ap
    >>> t = torch.arange(3, dtype=torch.int32)
    >>> a = ap.to_numpy(t)
    >>> a[0] = 5
    >>> t.tolist()
    [5, 1, 2]
    """
    cdef View v
    if copy is None:
        if _is_ndarray_type(type(x)):
            return x
        v = x if type(x) is View else _view_or_copy(x, None)
        if v._t.device.device_type == APDL_CPU and _numpy_reads(v._t.dtype):
            return _ndarray_over_view(v)
        x = v
    return _hook(_to_numpy_general_hook, "to_numpy_general")(x, copy=copy)
