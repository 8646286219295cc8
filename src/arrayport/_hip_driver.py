"""The HIP runtime (ROCm), opened at run time (``libamdhip64.so``) with ctypes.

The ROCm counterpart of ``_cuda_driver`` with the same functions, so ``arrayport.gpu`` can
hand either to the stream and copy code. Written against the HIP 6 headers' facts (struct
layouts and enum values below) and reviewed against the DLPack stream rules for ROCm: 0 is
the default (null) stream, 1 and 2 are not streams (refused by ``check_stream`` before
anything reaches here), larger values are ``hipStream_t`` handles. No ROCm machine was at
hand: the GPU test suite covers CUDA only.

HIP has no primary-context dance: a call works on the calling thread's current device, so
``on_device`` switches it with hipSetDevice and restores it.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys

from arrayport import errors
from arrayport.devices import DeviceType
from arrayport._gpu_library import NativeLibrary, OwnedMemory, c_handle, c_size

__all__ = ["HipUnavailable", "current_device", "locate_pointer", "make_stream_wait",
           "synchronize", "allocate_device", "allocate_pinned", "copy_async", "copy_2d_async",
           "copy_peer_async", "device_count"]

# HIP 6 facts (hip_runtime_api.h). HIP 5 numbered hipMemoryType differently (Host 0,
# Device 1, Managed 4), so older runtimes are refused rather than misread.
_HIP_MEMORY_TYPE_HOST = 1
_HIP_MEMORY_TYPE_DEVICE = 2
_HIP_MEMORY_TYPE_MANAGED = 3
_HIP_MEMORY_TYPE_UNIFIED = 11
_HIP_ERROR_INVALID_VALUE = 1
_HIP_EVENT_DISABLE_TIMING = 0x2
_HIP_HOST_MALLOC_PORTABLE = 0x1
_HIP_MEMCPY_DEFAULT = 4
_HIP_MINIMUM_VERSION = 60000000   # HIP_VERSION = major * 10^7 + minor * 10^5 + patch

# DLPack device types this module reports. ROCm managed memory has no DLPack type of its
# own; it is device memory the host may also read, reported as kDLROCM.
_KDL_ROCM, _KDL_ROCM_HOST = int(DeviceType.ROCM), int(DeviceType.ROCM_HOST)


HipUnavailable = errors.HipUnavailable  # public as arrayport.errors.HipUnavailable


class _PointerAttributes(ctypes.Structure):
    """hipPointerAttribute_t (HIP 6)."""
    _fields_ = [("type", ctypes.c_uint), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("isManaged", ctypes.c_int), ("allocationFlags", ctypes.c_uint)]


_INT = ctypes.c_int
_VOIDP = ctypes.c_void_p
_SIGNATURES = {
    "hipRuntimeGetVersion": (_INT, [ctypes.POINTER(_INT)]),
    "hipGetDeviceCount": (_INT, [ctypes.POINTER(_INT)]),
    "hipGetDevice": (_INT, [ctypes.POINTER(_INT)]),
    "hipSetDevice": (_INT, [_INT]),
    "hipPointerGetAttributes": (_INT, [ctypes.POINTER(_PointerAttributes), _VOIDP]),
    "hipEventCreateWithFlags": (_INT, [ctypes.POINTER(c_handle), ctypes.c_uint]),
    "hipEventRecord": (_INT, [c_handle, c_handle]),
    "hipEventDestroy": (_INT, [c_handle]),
    "hipStreamWaitEvent": (_INT, [c_handle, c_handle, ctypes.c_uint]),
    "hipStreamSynchronize": (_INT, [c_handle]),
    "hipMalloc": (_INT, [ctypes.POINTER(_VOIDP), c_size]),
    "hipFree": (_INT, [_VOIDP]),
    "hipHostMalloc": (_INT, [ctypes.POINTER(_VOIDP), c_size, ctypes.c_uint]),
    "hipHostFree": (_INT, [_VOIDP]),
    "hipMemcpyAsync": (_INT, [_VOIDP, _VOIDP, c_size, _INT, c_handle]),
    "hipMemcpy2DAsync": (_INT, [_VOIDP, c_size, _VOIDP, c_size, c_size, c_size, _INT, c_handle]),
    "hipMemcpyPeerAsync": (_INT, [_VOIDP, _INT, _VOIDP, _INT, c_size, c_handle]),
}


def _initialise(library: ctypes.CDLL) -> str | None:
    version = _INT(0)
    status = library.hipRuntimeGetVersion(ctypes.byref(version))
    if status != 0:
        return f"hipRuntimeGetVersion failed with HIP error {status}"
    if version.value < _HIP_MINIMUM_VERSION:
        return f"HIP {version.value} is older than HIP 6, whose memory types arrayport reads"
    count = _INT(0)
    status = library.hipGetDeviceCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return f"no ROCm device (hipGetDeviceCount: error {status}, {count.value} devices)"
    return None


_hip = NativeLibrary("rocm", "the HIP runtime", ("amdhip64_6.dll",) if sys.platform == "win32"
                     else ("libamdhip64.so.6", "libamdhip64.so"), HipUnavailable, _SIGNATURES,
                     _initialise)


def _runtime() -> ctypes.CDLL:
    return _hip.get()


def _check(status: int, call: str) -> None:
    _hip.check(status, call)


def device_count() -> int:
    count = _INT(0)
    _check(_runtime().hipGetDeviceCount(ctypes.byref(count)), "hipGetDeviceCount")
    return count.value


def locate_pointer(ptr: int) -> tuple[int, int]:
    """(DLPack device type, device id) of the memory at ``ptr``: device (and managed)
    memory as ROCm on its device, pinned host memory as ROCMHost. BufferError for an
    address HIP does not know."""
    attributes = _PointerAttributes()
    status = _runtime().hipPointerGetAttributes(ctypes.byref(attributes), ptr)
    if status == _HIP_ERROR_INVALID_VALUE:
        kind = None  # HIP answers unregistered host memory with an error
    else:
        _check(status, f"hipPointerGetAttributes({ptr:#x})")
        kind = attributes.type
    if kind in (_HIP_MEMORY_TYPE_DEVICE, _HIP_MEMORY_TYPE_MANAGED, _HIP_MEMORY_TYPE_UNIFIED) \
            or (kind is not None and attributes.isManaged):
        return (_KDL_ROCM, max(attributes.device, 0))
    if kind == _HIP_MEMORY_TYPE_HOST:
        return (_KDL_ROCM_HOST, 0)
    raise BufferError(f"rocm: pointer {ptr:#x} is not memory HIP knows (not device, pinned "
                      f"or managed memory)")


def current_device() -> int:
    device = _INT(0)
    _check(_runtime().hipGetDevice(ctypes.byref(device)), "hipGetDevice")
    return device.value


@contextlib.contextmanager
def on_device(ordinal: int):
    """Device ``ordinal`` current on this thread for the duration (then the previous one)."""
    library = _runtime()
    previous = current_device()
    if previous != ordinal:
        _check(library.hipSetDevice(ordinal), "hipSetDevice")
    try:
        yield ordinal
    finally:
        if previous != ordinal:
            library.hipSetDevice(previous)


def make_stream_wait(ordinal: int, consumer: int, producer: int) -> None:
    """Order ``consumer`` after ``producer``'s queued work with an event; no host wait."""
    if consumer == producer:
        return
    library = _runtime()
    with on_device(ordinal):
        event = c_handle()
        _check(library.hipEventCreateWithFlags(ctypes.byref(event), _HIP_EVENT_DISABLE_TIMING),
               "hipEventCreateWithFlags")
        try:
            _check(library.hipEventRecord(event, producer), "hipEventRecord")
            _check(library.hipStreamWaitEvent(consumer, event, 0), "hipStreamWaitEvent")
        finally:
            library.hipEventDestroy(event)  # released by HIP once the wait completes


def synchronize(ordinal: int, stream: int) -> None:
    with on_device(ordinal):
        _check(_runtime().hipStreamSynchronize(stream), "hipStreamSynchronize")


def allocate_device(ordinal: int, nbytes: int, managed: bool = False) -> OwnedMemory:
    """``nbytes`` of device memory on device ``ordinal`` (hipMalloc; hipFree later).
    ROCm managed memory has no DLPack device type of its own, so nothing asks for it."""
    if managed:
        raise HipUnavailable("hip: managed allocations are not implemented (DLPack has no "
                             "ROCm managed device type to ask for one)")
    address = _VOIDP()
    with on_device(ordinal):
        _check(_runtime().hipMalloc(ctypes.byref(address), max(nbytes, 1)),
               f"hipMalloc({nbytes})")

    def release(pointer: int) -> None:
        with on_device(ordinal):
            _runtime().hipFree(pointer)
    return OwnedMemory(address.value, nbytes, release)


def allocate_pinned(nbytes: int) -> OwnedMemory:
    """``nbytes`` of page-locked host memory, usable from every device."""
    address = _VOIDP()
    _check(_runtime().hipHostMalloc(ctypes.byref(address), max(nbytes, 1),
                                    _HIP_HOST_MALLOC_PORTABLE), f"hipHostMalloc({nbytes})")
    return OwnedMemory(address.value, nbytes, lambda pointer: _runtime().hipHostFree(pointer))


def copy_async(ordinal: int, dst: int, src: int, nbytes: int, stream: int) -> None:
    with on_device(ordinal):
        _check(_runtime().hipMemcpyAsync(dst, src, nbytes, _HIP_MEMCPY_DEFAULT, stream),
               "hipMemcpyAsync")


def copy_2d_async(ordinal: int, dst: int, dst_pitch: int, src: int, src_pitch: int,
                  width: int, height: int, stream: int) -> None:
    with on_device(ordinal):
        _check(_runtime().hipMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                           _HIP_MEMCPY_DEFAULT, stream), "hipMemcpy2DAsync")


def copy_peer_async(dst_ordinal: int, dst: int, src_ordinal: int, src: int, nbytes: int,
                    stream: int) -> None:
    with on_device(dst_ordinal):
        _check(_runtime().hipMemcpyPeerAsync(dst, dst_ordinal, src, src_ordinal, nbytes,
                                             stream), "hipMemcpyPeerAsync")
