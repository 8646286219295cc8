"""The HIP runtime (ROCm), opened at run time (``libamdhip64.so.7``, ``.so.6``) with ctypes.

The ROCm counterpart of ``gpu.cuda``: HIP's facts (constants, signatures, the
entry-point table) and the calls that differ from CUDA's; the calls both share are written
once in ``gpu.vendor.VendorDriver``. ``driver`` is the instance ``gpu.driver_for`` hands out
for ROCm memory. Written against the HIP 6 headers' facts (struct
layouts and enum values below) and reviewed against the DLPack stream rules for ROCm: 0 is
the default (null) stream, 1 and 2 are not streams (refused by ``check_stream`` before
anything reaches here), larger values are ``hipStream_t`` handles. No ROCm machine was at
hand: its facts are held to AMD's own bindings (tests/test_hip_facts.py), and it runs on
the HIP runtime simulator (tests/hipsim: its rules in tests/test_hipsim.py; the GPU suite's
shared rules, tests/test_gpu_vendors.py; hip-python as a peer), never on an AMD GPU.

HIP has no primary-context dance: a call works on the calling thread's current device, so
``on_device`` switches it with hipSetDevice and restores it. Once the process's runtime is
open, its stream waits, pointer locations and current-device questions go to the compiled
floor (``_csrc/hip_floor.h``), and so do the core's own copies (``_core_hip_copy.pxi``:
one transfer, or a strided layout's 2-D transfers — HIP cannot load the PTX kernels
arrayport ships); copies to another device or to pinned memory stay here.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys

from arrayport import _core, errors
from arrayport.gpu.vendor import VendorDriver, VendorSymbols
from arrayport.gpu.library import NativeLibrary, c_address, c_handle, c_size

__all__ = ["HipUnavailable", "HipDriver", "driver"]

# HIP 6 facts (hip_runtime_api.h). HIP 5 numbered hipMemoryType differently (Host 0,
# Device 1, Managed 4), so older runtimes are refused rather than misread. hipMemoryType,
# hipErrorInvalidValue, hipEventDisableTiming, hipMemcpyDefault and
# hipDeviceAttributeMaxPitch are stated once, by the compiled floor (_csrc/hip_floor.h,
# which reads pointer attributes and makes the core's copies for both paths).
_HIP_ERROR_OUT_OF_MEMORY = 2   # HIP: an allocation refused for want of memory
_FLOOR_FACTS = _core.hip_floor_facts()
_HIP_EVENT_DISABLE_TIMING = _FLOOR_FACTS["event_disable_timing"]
_HIP_HOST_MALLOC_PORTABLE = 0x1
_HIP_MEMCPY_DEFAULT = _FLOOR_FACTS["memcpy_default"]
_HIP_DEVICE_ATTRIBUTE_MAX_PITCH = _FLOOR_FACTS["device_attribute_max_pitch"]
_HIP_MINIMUM_VERSION = 60000000   # HIP_VERSION = major * 10^7 + minor * 10^5 + patch



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
    "hipStreamGetDevice": (_INT, [c_handle, ctypes.POINTER(_INT)]),
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


def _install_floor(library: ctypes.CDLL) -> None:
    """The compiled floor's entry points (``_csrc/hip_floor.h``), their addresses in this
    library; where one is missing the floor stays off and the ctypes calls serve."""
    addresses = []
    for name in _core.hip_floor_entry_points():
        entry = getattr(library, name, None)
        addresses.append(ctypes.cast(entry, ctypes.c_void_p).value if entry is not None else 0)
    _core.install_hip_floor(addresses)


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


def _initialise_process_runtime(library: ctypes.CDLL) -> str | None:
    """``_initialise``, then the compiled floor installed from this library: for the
    process's runtime (``_LIBRARY``) alone — a stand-in's (the tests') never installs it."""
    problem = _initialise(library)
    if problem is None:
        _install_floor(library)
    return problem


# The runtime by its sonames, newest major first (ROCm 7 ships libamdhip64.so.7, ROCm 6
# .so.6; the unversioned name only comes with the development files): every major from HIP
# 6 keeps the facts above (tests/test_hip_facts.py holds them to the newest bindings).
_HIP_MAJORS = (7, 6)
_LIBRARY = NativeLibrary("rocm", "the HIP runtime",
                         tuple(f"amdhip64_{major}.dll" for major in _HIP_MAJORS)
                         if sys.platform == "win32"
                         else (*(f"libamdhip64.so.{major}" for major in _HIP_MAJORS),
                               "libamdhip64.so"), HipUnavailable, _SIGNATURES,
                         _initialise_process_runtime)


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
    no ROCm managed device type to ask for one. The process's driver (``driver``) makes its
    stream waits, pointer locations and current-device questions on the compiled floor
    (``_csrc/hip_floor.h``) once the runtime is open; the core makes its stream waits there
    itself, without this class, while ``FloorServed`` says it may."""

    # What the core asks the floor itself, without this driver (FloorServed owns the rule);
    # the core's own copies (_core_hip_copy.pxi) stand in for the copy calls, the memory
    # floor's among them (a result's allocation and free).
    _FLOOR_SERVED = ("make_stream_wait", "locate_pointer", "current_device", "_on_floor",
                     "stream_is_on", "allocate_result", "allocate_device", "copy_async",
                     "copy_2d_async", "max_pitch", "synchronize", "allocate_ordinary",
                     "free_ordinary", "frees_wait_for_work")

    def _on_floor(self) -> bool:
        """Whether the compiled floor serves this driver's calls now: the process's driver,
        over the library the floor was installed from (opened here if it was not)."""
        if self.library is not self.floor_library():
            return False
        if not _core.hip_floor_ready():
            try:
                self.library.get()   # opening it installs the floor
            except BufferError:      # no runtime: the caller's ctypes path says so
                return False
        return _core.hip_floor_ready()

    def make_stream_wait(self, ordinal: int, consumer: int, producer: int,
                         producer_ordinal: int | None = None) -> None:
        """``VendorDriver.make_stream_wait``, made by the compiled floor where it serves. A
        negative ordinal: the memory names no device (pinned host memory), the producer's
        stream says which, and a null-stream consumer is that device's too."""
        if producer_ordinal is None:
            producer_ordinal = ordinal
        if self._on_floor():
            _core.hip_stream_wait(ordinal, consumer, producer, producer_ordinal)
            return
        if producer_ordinal < 0:
            producer_ordinal = ordinal = self.device_of_stream(producer)
        self._record_and_wait(ordinal, consumer, producer, producer_ordinal)

    def device_of_stream(self, stream: int) -> int:
        """The device ``stream`` belongs to (0, the null stream: the current device's)."""
        if stream == 0:
            return self.current_device()
        device = _INT(0)
        self._call("hipStreamGetDevice", stream, ctypes.byref(device))
        return device.value

    def publish_ordinary_results(self, ordinal: int, release, at_once: bool) -> None:
        """Tell the core's own copies (``_core_hip_copy.pxi``) how a result's memory on
        device ``ordinal`` is given back (``VendorDriver.publish_ordinary_results``) — only
        the process's driver over the floor's library, and only when the core holds nothing
        for the device yet. (Forgetting every device's, ordinal -1, is the process's
        driver's to ask whatever its library: a test's tables.)"""
        if release is None:
            if self.floor_library() is not None:
                _core.publish_hip_results(ordinal, None)
        elif (self.library is self.floor_library()
              and _core.published_hip_results(ordinal) is None):
            _core.publish_hip_results(ordinal, release, at_once)

    def cached_events(self) -> int:
        events = super().cached_events()
        return events + _core.hip_floor_counts()[0] if self._on_floor() else events

    def close(self) -> None:
        floor = (self.library is self.floor_library()
                 and not getattr(self.library, "forked", False) and _core.hip_floor_ready())
        super().close()
        if floor:   # its events
            _core.close_hip_floor()

    def locate_pointer(self, ptr: int) -> tuple[int, int]:
        """(DLPack device type, device id) of the memory at ``ptr``: device (and managed)
        memory as ROCm on its device, pinned host memory as ROCMHost. BufferError for an
        address HIP does not know. The floor asks and reads the answer; without it, the
        same call over ctypes, its answer read by the floor's rule."""
        if self._on_floor():
            return _core.hip_locate_pointer(ptr)
        attributes = _PointerAttributes()
        status = self.library.get().hipPointerGetAttributes(ctypes.byref(attributes), ptr)
        return _core.hip_pointer_location(status, attributes.type, attributes.isManaged,
                                          attributes.device, ptr)

    def current_device(self) -> int:
        if self._on_floor():
            return _core.hip_current_device()
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
# the floor's, once opened: the core's ROCm stream waits go there
driver.own_floor(_LIBRARY, _core.set_hip_floor_direct)
