"""The HIP runtime (ROCm), opened at run time (``libamdhip64.so``) with ctypes.

The ROCm counterpart of ``gpu.cuda``: HIP's facts (constants, signatures, the
entry-point table) and the calls that differ from CUDA's; the calls both share are written
once in ``gpu.vendor.VendorDriver``. ``driver`` is the instance ``gpu.driver_for`` hands out
for ROCm memory. Written against the HIP 6 headers' facts (struct
layouts and enum values below) and reviewed against the DLPack stream rules for ROCm: 0 is
the default (null) stream, 1 and 2 are not streams (refused by ``check_stream`` before
anything reaches here), larger values are ``hipStream_t`` handles. No ROCm machine was at
hand: its facts are held to AMD's own bindings (tests/test_hip_facts.py), and it runs on
the HIP runtime simulator (tests/hipsim, tests/test_hipsim.py: devices, pointer
attributes, stream order, copies to a ROCm device and back, frees), never on an AMD GPU.

HIP has no primary-context dance: a call works on the calling thread's current device, so
``on_device`` switches it with hipSetDevice and restores it.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys

from arrayport import errors
from arrayport.devices import DeviceType
from arrayport.gpu.vendor import VendorDriver, VendorSymbols
from arrayport.gpu.library import NativeLibrary, c_address, c_handle, c_size

__all__ = ["HipUnavailable", "HipDriver", "driver"]

# HIP 6 facts (hip_runtime_api.h). HIP 5 numbered hipMemoryType differently (Host 0,
# Device 1, Managed 4), so older runtimes are refused rather than misread.
_HIP_MEMORY_TYPE_HOST = 1
_HIP_MEMORY_TYPE_DEVICE = 2
_HIP_MEMORY_TYPE_MANAGED = 3
_HIP_MEMORY_TYPE_UNIFIED = 11
_HIP_ERROR_INVALID_VALUE = 1
_HIP_ERROR_OUT_OF_MEMORY = 2   # HIP: an allocation refused for want of memory
_HIP_EVENT_DISABLE_TIMING = 0x2
_HIP_HOST_MALLOC_PORTABLE = 0x1
_HIP_MEMCPY_DEFAULT = 4
_HIP_DEVICE_ATTRIBUTE_MAX_PITCH = 58   # hipDeviceAttributeMaxPitch (HIP 6)
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
    "hipDeviceGetAttribute": (_INT, [ctypes.POINTER(_INT), _INT, _INT]),
    "hipPointerGetAttributes": (_INT, [ctypes.POINTER(_PointerAttributes), _VOIDP]),
    "hipEventCreateWithFlags": (_INT, [ctypes.POINTER(c_handle), ctypes.c_uint]),
    "hipEventRecord": (_INT, [c_handle, c_handle]),
    "hipEventDestroy": (_INT, [c_handle]),
    "hipStreamWaitEvent": (_INT, [c_handle, c_handle, ctypes.c_uint]),
    "hipStreamSynchronize": (_INT, [c_handle]),
    "hipDeviceSynchronize": (_INT, []),
    "hipEventSynchronize": (_INT, [c_handle]),
    # Device addresses as integers, as CUDA's: void* is 64 bits on every platform ROCm runs on.
    "hipMalloc": (_INT, [ctypes.POINTER(c_address), c_size]),
    "hipFree": (_INT, [c_address]),
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


# The runtime by its sonames, newest major first (ROCm 7 ships libamdhip64.so.7, ROCm 6
# .so.6; the unversioned name only comes with the development files): every major from HIP
# 6 keeps the facts above (tests/test_hip_facts.py holds them to the newest bindings).
_HIP_MAJORS = (7, 6)
_LIBRARY = NativeLibrary("rocm", "the HIP runtime",
                         tuple(f"amdhip64_{major}.dll" for major in _HIP_MAJORS)
                         if sys.platform == "win32"
                         else (*(f"libamdhip64.so.{major}" for major in _HIP_MAJORS),
                               "libamdhip64.so"), HipUnavailable, _SIGNATURES, _initialise)


_SYMBOLS = VendorSymbols(
    device_count="hipGetDeviceCount", event_create="hipEventCreateWithFlags",
    event_record="hipEventRecord", event_destroy="hipEventDestroy",
    stream_wait_event="hipStreamWaitEvent", stream_synchronize="hipStreamSynchronize",
    event_synchronize="hipEventSynchronize",
    allocate="hipMalloc", free="hipFree", host_allocate="hipHostMalloc",
    host_free="hipHostFree", copy="hipMemcpyAsync",
    device_attribute="hipDeviceGetAttribute", max_pitch_attribute=_HIP_DEVICE_ATTRIBUTE_MAX_PITCH,
    event_disable_timing=_HIP_EVENT_DISABLE_TIMING,
    host_allocate_portable=_HIP_HOST_MALLOC_PORTABLE, copy_kind=(_HIP_MEMCPY_DEFAULT,),
    default_streams=(0,), device_synchronize="hipDeviceSynchronize",
    out_of_memory=_HIP_ERROR_OUT_OF_MEMORY, frees_synchronize=True,
    no_managed_reason=" (DLPack has no ROCm managed device type to ask for one)")


class HipDriver(VendorDriver):
    """The HIP runtime: the shared calls of ``VendorDriver`` plus HIP's own — the current
    device, pointer attributes, the 2-D and peer copies. No managed allocations: DLPack has
    no ROCm managed device type to ask for one."""

    def locate_pointer(self, ptr: int) -> tuple[int, int]:
        """(DLPack device type, device id) of the memory at ``ptr``: device (and managed)
        memory as ROCm on its device, pinned host memory as ROCMHost. BufferError for an
        address HIP does not know."""
        attributes = _PointerAttributes()
        status = self.library.get().hipPointerGetAttributes(ctypes.byref(attributes), ptr)
        if status == _HIP_ERROR_INVALID_VALUE:
            kind = None  # HIP answers unregistered host memory with an error
        else:
            self.library.check(status, f"hipPointerGetAttributes({ptr:#x})")
            kind = attributes.type
        if kind in (_HIP_MEMORY_TYPE_DEVICE, _HIP_MEMORY_TYPE_MANAGED, _HIP_MEMORY_TYPE_UNIFIED) \
                or (kind is not None and attributes.isManaged):
            return (_KDL_ROCM, max(attributes.device, 0))
        if kind == _HIP_MEMORY_TYPE_HOST:
            return (_KDL_ROCM_HOST, 0)
        raise BufferError(f"rocm: pointer {ptr:#x} is not memory HIP knows (not device, "
                          f"pinned or managed memory)")

    def current_device(self) -> int:
        device = _INT(0)
        self._call("hipGetDevice", ctypes.byref(device))
        return device.value

    @contextlib.contextmanager
    def on_device(self, ordinal: int):
        """Device ``ordinal`` current on this thread for the duration (then the previous)."""
        previous = self.current_device()
        if previous != ordinal:
            self._call("hipSetDevice", ordinal)
        try:
            yield ordinal
        finally:
            if previous != ordinal:
                self.library.get().hipSetDevice(previous)

    def copy_2d_async(self, ordinal: int, dst: int, dst_pitch: int, src: int, src_pitch: int,
                      width: int, height: int, stream: int) -> None:
        with self.on_device(ordinal):
            self._call("hipMemcpy2DAsync", dst, dst_pitch, src, src_pitch, width, height,
                       _HIP_MEMCPY_DEFAULT, stream)

    def copy_peer_async(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int,
                        nbytes: int, stream: int) -> None:
        with self.on_device(dst_ordinal):
            self._call("hipMemcpyPeerAsync", dst, dst_ordinal, src, src_ordinal, nbytes, stream)


driver = HipDriver(_LIBRARY, _SYMBOLS)   # the one instance gpu.driver_for hands out
