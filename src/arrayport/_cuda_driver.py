"""The CUDA driver, opened at run time (``libcuda.so.1`` / ``nvcuda.dll``) with ctypes.

Decision: arrayport talks to the CUDA *driver* API directly rather than through a binding
package, so CUDA support needs nothing installed beyond the NVIDIA driver itself, and
importing arrayport never loads it. The library is opened on the first CUDA request; on a
machine without it every CUDA request raises ``CudaUnavailable`` (a ``BufferError``) saying
why, and CPU work never notices.

This module answers "where does this pointer live?" for the CUDA Array Interface and the
C API: which device, and whether the memory is device memory, pinned host memory
(``CUDAHost``) or managed memory (``CUDAManaged``).
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading

__all__ = ["CudaUnavailable", "current_device", "locate_pointer", "make_stream_wait"]

# CUDA driver API facts (cuda.h): pointer attributes and memory types.
_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_MEMORYTYPE_HOST = 1
_CU_MEMORYTYPE_DEVICE = 2
_CU_MEMORYTYPE_UNIFIED = 4
_CUDA_ERROR_INVALID_CONTEXT = 201
_CU_EVENT_DISABLE_TIMING = 0x2

# DLPack device types this module reports.
_KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 2, 3, 13


class CudaUnavailable(BufferError):
    """No usable CUDA driver: the library is missing, or it has no device."""


_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failure: str | None = None


def _library_name() -> str:
    return "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"


def _driver() -> ctypes.CDLL:
    """The initialised driver library, opened once; CudaUnavailable when there is none."""
    global _library, _failure
    if _library is not None:
        return _library
    with _lock:
        if _library is None and _failure is None:
            try:
                library = ctypes.CDLL(_library_name())
            except OSError as error:
                _failure = f"the CUDA driver ({_library_name()}) cannot be loaded: {error}"
            else:
                status = library.cuInit(0)
                if status != 0:
                    _failure = f"cuInit failed with CUDA error {status} (no usable GPU?)"
                else:
                    library.cuPointerGetAttributes.argtypes = [
                        ctypes.c_uint, ctypes.POINTER(ctypes.c_int),
                        ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64]
                    _library = library
    if _library is None:
        raise CudaUnavailable(f"cuda: {_failure}")
    return _library


def locate_pointer(ptr: int) -> tuple[int, int]:
    """(DLPack device type, device id) of the memory at ``ptr``, asked of the driver:
    CUDA device memory on its own device, pinned host memory as CUDAHost, managed memory as
    CUDAManaged. BufferError for an address CUDA does not know."""
    library = _driver()
    memory_type = ctypes.c_uint(0)
    is_managed = ctypes.c_uint(0)
    ordinal = ctypes.c_int(-1)
    attributes = (ctypes.c_int * 3)(_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    _CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                    _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
    outputs = (ctypes.c_void_p * 3)(ctypes.addressof(memory_type), ctypes.addressof(is_managed),
                                    ctypes.addressof(ordinal))
    # Unlike cuPointerGetAttribute, this call succeeds for pointers CUDA does not know and
    # leaves the outputs zero, so an unknown address is an answer, not an error.
    status = library.cuPointerGetAttributes(3, attributes, outputs, ptr)
    if status != 0:
        raise BufferError(f"cuda: cuPointerGetAttributes({ptr:#x}) failed with CUDA error "
                          f"{status}")
    if is_managed.value:
        return (_KDL_CUDA_MANAGED, 0)
    if memory_type.value == _CU_MEMORYTYPE_DEVICE:
        return (_KDL_CUDA, max(ordinal.value, 0))
    if memory_type.value == _CU_MEMORYTYPE_HOST:
        return (_KDL_CUDA_HOST, 0)
    if memory_type.value == _CU_MEMORYTYPE_UNIFIED:
        return (_KDL_CUDA_MANAGED, 0)
    raise BufferError(f"cuda: pointer {ptr:#x} is not memory CUDA knows (not device, pinned "
                      f"or managed memory)")


def current_device() -> int:
    """The device of the calling thread's current CUDA context, or 0 when none is current."""
    library = _driver()
    device = ctypes.c_int(0)
    status = library.cuCtxGetDevice(ctypes.byref(device))
    if status == _CUDA_ERROR_INVALID_CONTEXT:
        return 0
    if status != 0:
        raise BufferError(f"cuda: cuCtxGetDevice failed with CUDA error {status}")
    return device.value


def _check(status: int, call: str) -> None:
    if status != 0:
        raise BufferError(f"cuda: {call} failed with CUDA error {status}")


@contextlib.contextmanager
def _primary_context(library: ctypes.CDLL, ordinal: int):
    """Device ``ordinal``'s primary context (the one the CUDA runtime, and so PyTorch,
    CuPy and JAX, use) current on this thread for the duration."""
    device = ctypes.c_int(0)
    _check(library.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
    context = ctypes.c_void_p()
    _check(library.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
           "cuDevicePrimaryCtxRetain")
    try:
        _check(library.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
        try:
            yield
        finally:
            library.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        library.cuDevicePrimaryCtxRelease_v2(device)


def make_stream_wait(ordinal: int, consumer: int, producer: int) -> None:
    """Order ``consumer`` after the work queued on ``producer`` so far, on the GPU: record
    an event on the producer's stream and make the consumer's stream wait on it. The host
    never blocks. Stream values as the specs give them (1 legacy default, 2 per-thread
    default, otherwise a CUstream handle); equal streams need nothing."""
    if consumer == producer:
        return
    library = _driver()
    with _primary_context(library, ordinal):
        event = ctypes.c_void_p()
        _check(library.cuEventCreate(ctypes.byref(event), _CU_EVENT_DISABLE_TIMING),
               "cuEventCreate")
        try:
            _check(library.cuEventRecord(event, ctypes.c_void_p(producer)), "cuEventRecord")
            _check(library.cuStreamWaitEvent(ctypes.c_void_p(consumer), event, 0),
                   "cuStreamWaitEvent")
        finally:
            # Destroying an event with a pending wait is allowed: the driver frees it when
            # the wait has completed.
            library.cuEventDestroy_v2(event)
