# Included by _core.pyx. The hot halves of arrayport.to_torch and arrayport.to_numpy; the
# option handling and the other targets live in convert.py.
#
# to_torch hands PyTorch a managed tensor through PyTorch's own exchange API
# (managed_tensor_to_py_object_no_sync), skipping torch.from_dlpack's Python layers. That
# function does no stream synchronization, so it is used for CPU memory only; device
# memory goes through torch.from_dlpack, which passes PyTorch's current stream to our
# __dlpack__. Ownership: the managed tensor is stolen by PyTorch, success or failure.

from cpython.ref cimport Py_DECREF

cdef object _torch_tensor_type = None
cdef uintptr_t _torch_to_py_object = 0   # PyTorch's managed_tensor_to_py_object_no_sync
cdef object _numpy_from_dlpack = None


cdef int _load_torch() except -1:
    global _torch_tensor_type, _torch_to_py_object
    import torch
    _torch_tensor_type = torch.Tensor
    cdef uintptr_t api = _exchange_api_for(torch.Tensor)
    if api != 0:
        _torch_to_py_object = <uintptr_t>(
            (<APDLPackExchangeAPI*>api).managed_tensor_to_py_object_no_sync)
    return 0


def torch_tensor_of(View v):
    """A torch.Tensor sharing ``v``'s memory, exactly as it is: callers have already
    ruled out what PyTorch cannot hold (negative strides abort the process)."""
    if _torch_tensor_type is None:
        _load_torch()
    cdef APDLManagedTensorVersioned* m
    cdef void* out = NULL
    if _torch_to_py_object != 0 and v._t.device.device_type == 1:
        m = v._export_managed(v._flags & APDL_FLAG_IS_COPIED)
        if (<APDLManagedTensorToPyObjectNoSyncFn>_torch_to_py_object)(m, &out) != 0:
            _exchange_failed("managed_tensor_to_py_object_no_sync")
        tensor = <object>out
        Py_DECREF(tensor)  # adopt the new reference PyTorch returned
        return tensor
    import torch
    return torch.from_dlpack(v)


cdef bint _has_negative_stride(View v) noexcept:
    for i in range(v._t.ndim):
        if v._t.strides[i] < 0 and v._t.shape[i] > 1:
            return True
    return False


def has_negative_stride(View v):
    """Whether stepping through ``v`` ever goes backwards in memory."""
    return _has_negative_stride(v)


def numpy_array_of(View v):
    """A NumPy array sharing ``v``'s memory, for the types NumPy reads through DLPack."""
    global _numpy_from_dlpack
    if _numpy_from_dlpack is None:
        import numpy
        _numpy_from_dlpack = numpy.from_dlpack
    return _numpy_from_dlpack(v)


def legacy_capsule_for_immutable_consumer(View v, stream=None):
    """A legacy ("dltensor") capsule of ``v`` even when ``v`` is read-only. Only for
    consumers whose arrays are immutable (JAX), which ask for legacy capsules and never
    write through them."""
    check_stream(stream, v._t.device.device_type)
    return v._export_legacy_writable_or_immutable()
