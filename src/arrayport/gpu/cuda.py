"""The CUDA driver, opened at run time (``libcuda.so.1`` / ``nvcuda.dll``) with ctypes.

Decision: arrayport talks to the CUDA *driver* API directly rather than through a binding
package, so CUDA support needs nothing installed beyond the NVIDIA driver itself, and
importing arrayport never loads it. The library is opened on the first CUDA request; on a
machine without it every CUDA request raises ``CudaUnavailable`` (a ``BufferError``) saying
why, and CPU work never notices.

What arrayport asks of it: where a pointer lives (CUDA Array Interface, C API imports),
ordering one stream after another with an event (never a host wait), device and pinned
allocations for copies, and the copies themselves, enqueued on the caller's stream. Every
call runs with the device's *primary* context current — the one the CUDA runtime, and so
PyTorch, CuPy, JAX and Numba, use — so memory and streams are shared with them.
Stream values are the DLPack ones, which are also the driver's handles: 1 is
``CU_STREAM_LEGACY``, 2 ``CU_STREAM_PER_THREAD``, anything larger a ``CUstream``.

This module holds CUDA's facts (constants, signatures, the entry-point table) and the calls
that differ from HIP; the calls both share are written once in ``gpu.vendor.VendorDriver``.
``driver`` is the instance ``gpu.driver_for`` hands out for CUDA memory. Under it, once the
library is open, the compiled floor (``_csrc/cuda_floor.h``, through the core) makes the
stream waits and owns what they use — each device's retained primary context, one reused
event per context — with no Python in between; the ctypes calls here serve the rest, and
every call where the floor is off (a stand-in library of the tests, another instance, a
fork's child).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import weakref

from arrayport import _core, errors
from arrayport.gpu.cuda_ipc import CudaIpcFloor
from arrayport.gpu.cuda_memory import CudaMemoryFloor
from arrayport.gpu.kernels import KernelCache
from arrayport.gpu.vendor import VendorDriver, VendorSymbols
from arrayport.gpu.library import NativeLibrary, c_address, c_handle, c_size

__all__ = ["CudaUnavailable", "CudaDriver", "driver"]

# CUDA driver API facts (cuda.h).
_CU_MEMORYTYPE_UNIFIED = 4
_CUDA_ERROR_INVALID_CONTEXT = 201
_CUDA_ERROR_OUT_OF_MEMORY = 2
_CU_MEM_ATTACH_GLOBAL = 0x1       # managed memory any stream may use
_CU_EVENT_DISABLE_TIMING = 0x2
_CU_MEMHOSTALLOC_PORTABLE = 0x1   # pinned memory usable from every context
_CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11


CudaUnavailable = errors.CudaUnavailable  # public as arrayport.errors.CudaUnavailable


class _Memcpy2D(ctypes.Structure):
    """CUDA_MEMCPY2D (v2). arrayport fills only the unified-addressing fields."""
    _fields_ = [
        ("srcXInBytes", c_size), ("srcY", c_size), ("srcMemoryType", ctypes.c_int),
        ("srcHost", ctypes.c_void_p), ("srcDevice", c_address), ("srcArray", ctypes.c_void_p),
        ("srcPitch", c_size),
        ("dstXInBytes", c_size), ("dstY", c_size), ("dstMemoryType", ctypes.c_int),
        ("dstHost", ctypes.c_void_p), ("dstDevice", c_address), ("dstArray", ctypes.c_void_p),
        ("dstPitch", c_size),
        ("WidthInBytes", c_size), ("Height", c_size),
    ]


_INT = ctypes.c_int
_SIGNATURES = {
    "cuInit": (_INT, [ctypes.c_uint]),
    "cuDeviceGetCount": (_INT, [ctypes.POINTER(_INT)]),
    "cuDeviceGet": (_INT, [ctypes.POINTER(_INT), _INT]),
    "cuDeviceGetAttribute": (_INT, [ctypes.POINTER(_INT), _INT, _INT]),
    "cuDevicePrimaryCtxRetain": (_INT, [ctypes.POINTER(c_handle), _INT]),
    "cuDevicePrimaryCtxRelease_v2": (_INT, [_INT]),
    "cuCtxPushCurrent_v2": (_INT, [c_handle]),
    "cuCtxPopCurrent_v2": (_INT, [ctypes.POINTER(c_handle)]),
    "cuCtxGetDevice": (_INT, [ctypes.POINTER(_INT)]),
    "cuCtxGetCurrent": (_INT, [ctypes.POINTER(c_handle)]),
    "cuStreamGetCtx": (_INT, [c_handle, ctypes.POINTER(c_handle)]),
    "cuPointerGetAttributes": (_INT, [ctypes.c_uint, ctypes.POINTER(_INT),
                                      ctypes.POINTER(ctypes.c_void_p), c_address]),
    "cuEventCreate": (_INT, [ctypes.POINTER(c_handle), ctypes.c_uint]),
    "cuEventRecord": (_INT, [c_handle, c_handle]),
    "cuEventDestroy_v2": (_INT, [c_handle]),
    "cuStreamWaitEvent": (_INT, [c_handle, c_handle, ctypes.c_uint]),
    "cuStreamSynchronize": (_INT, [c_handle]),
    "cuEventSynchronize": (_INT, [c_handle]),
    "cuMemAlloc_v2": (_INT, [ctypes.POINTER(c_address), c_size]),
    "cuMemFree_v2": (_INT, [c_address]),
    "cuMemAllocManaged": (_INT, [ctypes.POINTER(c_address), c_size, ctypes.c_uint]),
    "cuCtxSynchronize": (_INT, []),
    "cuMemHostAlloc": (_INT, [ctypes.POINTER(ctypes.c_void_p), c_size, ctypes.c_uint]),
    "cuMemFreeHost": (_INT, [ctypes.c_void_p]),
    "cuMemGetAddressRange_v2": (_INT, [ctypes.POINTER(c_address), ctypes.POINTER(c_size),
                                       c_address]),
    "cuMemcpyAsync": (_INT, [c_address, c_address, c_size, c_handle]),
    "cuMemcpy2DAsync_v2": (_INT, [ctypes.POINTER(_Memcpy2D), c_handle]),
    "cuMemcpyPeerAsync": (_INT, [c_address, c_handle, c_address, c_handle, c_size, c_handle]),
    "cuModuleLoadData": (_INT, [ctypes.POINTER(c_handle), ctypes.c_char_p]),
    "cuModuleUnload": (_INT, [c_handle]),
    "cuModuleGetFunction": (_INT, [ctypes.POINTER(c_handle), c_handle, ctypes.c_char_p]),
    "cuLaunchKernel": (_INT, [c_handle] + [ctypes.c_uint] * 7 +
                       [c_handle, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]),
}


def _initialise(library: ctypes.CDLL) -> str | None:
    status = library.cuInit(0)
    if status != 0:
        return f"cuInit failed with CUDA error {status} (no usable GPU?)"
    _install_floor(library)
    return None


def _install_floor(library: ctypes.CDLL) -> None:
    """The compiled floor's entry points, resolved through this library's
    ``cuGetProcAddress`` (12.0's ``_v2``, else 11.3's); where it cannot be (an older
    driver), the floor stays off and the ctypes calls serve."""
    for name, with_status in (("cuGetProcAddress_v2", True), ("cuGetProcAddress", False)):
        entry = getattr(library, name, None)
        if entry is not None:
            _core.install_cuda_floor(ctypes.cast(entry, ctypes.c_void_p).value, with_status)
            return


_LIBRARY = NativeLibrary("cuda", "the CUDA driver",
                         ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1",),
                         CudaUnavailable, _SIGNATURES, _initialise)


_SYMBOLS = VendorSymbols(
    device_count="cuDeviceGetCount", event_create="cuEventCreate", event_record="cuEventRecord",
    event_destroy="cuEventDestroy_v2", stream_wait_event="cuStreamWaitEvent",
    stream_synchronize="cuStreamSynchronize", event_synchronize="cuEventSynchronize",
    allocate="cuMemAlloc_v2", free="cuMemFree_v2",
    host_allocate="cuMemHostAlloc", host_free="cuMemFreeHost", copy="cuMemcpyAsync",
    device_attribute="cuDeviceGetAttribute", max_pitch_attribute=_CU_DEVICE_ATTRIBUTE_MAX_PITCH,
    event_disable_timing=_CU_EVENT_DISABLE_TIMING,
    host_allocate_portable=_CU_MEMHOSTALLOC_PORTABLE, default_streams=(0, 1, 2),
    device_synchronize="cuCtxSynchronize", out_of_memory=_CUDA_ERROR_OUT_OF_MEMORY,
    frees_synchronize=False, managed_allocate="cuMemAllocManaged",
    managed_attach_global=_CU_MEM_ATTACH_GLOBAL)


class CudaDriver(CudaIpcFloor, CudaMemoryFloor, VendorDriver):
    """The CUDA driver API: the shared calls of ``VendorDriver`` plus CUDA's own — primary
    contexts, pointer attributes, the 2-D copy descriptor, peer copies between contexts,
    managed memory, the memory pools (``gpu.cuda_memory``: the memory floor arrayport's
    policy, ``gpu.held_memory``, allocates over), CUDA IPC (``gpu.cuda_ipc``: the sharing
    floor ``gpu.ipc`` shares device Views across processes over)."""

    # What the core asks the floor itself, without this driver, while the process's driver
    # works over the floor's library with these methods (``FloorServed`` owns the rule).
    # (The core's own copies stand in for the copy calls, the kernels' and the pool's.)
    _FLOOR_SERVED = ("make_stream_wait", "locate_pointer", "current_device", "_on_floor",
                     "stream_is_on", "allocate_result", "allocate_temporary", "copy_async",
                     "allocation_bytes", "synchronize", "has_kernel", "launch_kernel")

    def __init__(self, library: NativeLibrary, symbols: VendorSymbols):
        super().__init__(library, symbols)
        # Primary contexts retained, per library (tests swap the library for stand-ins).
        self._contexts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._contexts_lock = threading.Lock()
        self.kernels = KernelCache(self)   # arrayport's device kernels, per context
        self._init_memory_floor()
        self._init_ipc_floor()

    def locate_pointer(self, ptr: int) -> tuple[int, int]:
        """(DLPack device type, device id) of the memory at ``ptr``, asked of the driver:
        CUDA device memory on its own device, pinned host memory as CUDAHost, managed memory
        as CUDAManaged. BufferError for an address CUDA does not know. The floor asks and
        reads the answer (``_csrc/cuda_floor.h``); without it, the same call over ctypes,
        its answer read by the floor's rule."""
        if self._on_floor():
            return _core.cuda_locate_pointer(ptr)
        memory_type = ctypes.c_uint(0)
        is_managed = ctypes.c_uint(0)
        ordinal = _INT(-1)
        attributes = (_INT * 3)(*_core.cuda_pointer_attributes())
        outputs = (ctypes.c_void_p * 3)(ctypes.addressof(memory_type),
                                        ctypes.addressof(is_managed), ctypes.addressof(ordinal))
        # Unlike cuPointerGetAttribute, this call succeeds for pointers CUDA does not know and
        # leaves the outputs zero, so an unknown address is an answer, not an error. It needs
        # a current context (any: addresses are unified); a thread that never touched CUDA
        # has none, and gets one only then.
        library = self.library.get()
        status = library.cuPointerGetAttributes(3, attributes, outputs, ptr)
        if status == _CUDA_ERROR_INVALID_CONTEXT:
            with self.on_device(0):
                status = library.cuPointerGetAttributes(3, attributes, outputs, ptr)
        return _core.cuda_pointer_location(status, memory_type.value, is_managed.value,
                                           ordinal.value, ptr)

    def allocation_bytes(self, ordinal: int, address: int) -> int:
        """The size of the whole allocation the memory of device ``ordinal`` at ``address``
        lies in (``cuMemGetAddressRange_v2``, in that device's context); 0 where it is not
        device memory the driver knows."""
        base, size = c_address(0), c_size(0)
        with self.on_device(ordinal):
            status = self.library.get().cuMemGetAddressRange_v2(ctypes.byref(base),
                                                                 ctypes.byref(size), address)
        return size.value if status == 0 else 0

    def current_device(self) -> int:
        """The device of the calling thread's current CUDA context, or 0 when none is
        current."""
        if self._on_floor():
            return _core.cuda_current_device()
        device = _INT(0)
        status = self.library.get().cuCtxGetDevice(ctypes.byref(device))
        if status == _CUDA_ERROR_INVALID_CONTEXT:
            return 0
        self.library.check(status, "cuCtxGetDevice")
        return device.value

    def primary_context(self, ordinal: int) -> c_handle:
        """Device ``ordinal``'s primary context, retained on first use and kept for the
        life of the process, as the CUDA runtime keeps it: the driver destroys a primary
        context — its memory, streams and events — when its last retain is released, so a
        retain around each call would free arrayport's own allocations the moment no other
        library (PyTorch, CuPy…) happened to hold the context."""
        # asked at every driver call: get first (setdefault would make a dict each time)
        contexts = self._contexts.get(self.library)
        if contexts is None:
            contexts = self._contexts.setdefault(self.library, {})
        context = contexts.get(ordinal)
        if context is None:
            # Retained outside the lock: a finalizer (a dead result's return, which makes
            # every device current) may run at any allocation here, on this thread, and
            # would wait for the lock for ever. Two retains racing keep one; the other's
            # retain is released.
            if self._on_floor():   # the floor's, retained once there
                made = c_handle(_core.cuda_primary_context(ordinal))
                with self._contexts_lock:
                    context = contexts.setdefault(ordinal, made)
                return context
            device, made = _INT(0), c_handle()
            self._call("cuDeviceGet", ctypes.byref(device), ordinal)
            self._call("cuDevicePrimaryCtxRetain", ctypes.byref(made), device)
            with self._contexts_lock:   # dict operations only: nothing a finalizer runs
                context = contexts.setdefault(ordinal, made)
            if context is not made:
                self._call("cuDevicePrimaryCtxRelease_v2", device)
        return context

    def _on_floor(self) -> bool:
        """Whether the compiled floor serves this driver's calls now: the process's driver,
        over the library the floor was installed from (opened here if it was not)."""
        if self.library is not self.floor_library():
            return False
        if not _core.cuda_floor_ready():
            try:
                self.library.get()   # opening it installs the floor
            except BufferError:      # no driver: the caller's ctypes path says so
                return False
        return _core.cuda_floor_ready()

    def make_stream_wait(self, ordinal: int, consumer: int, producer: int,
                         producer_ordinal: int | None = None) -> None:
        """``VendorDriver.make_stream_wait``, made by the compiled floor where it serves."""
        if self._on_floor():
            _core.cuda_stream_wait(ordinal, consumer, producer,
                                   ordinal if producer_ordinal is None else producer_ordinal)
            return
        self._record_and_wait(ordinal, consumer, producer, producer_ordinal)

    def cached_events(self) -> int:
        events = super().cached_events()
        return events + _core.cuda_floor_counts()[0] if self._on_floor() else events

    def retained_devices(self) -> list[int]:
        """The devices whose primary context arrayport retained (used)."""
        return list(self._contexts.get(self.library, {}))

    def _made_current(self, context: c_handle) -> "_MadeCurrent":
        """``context`` current on this thread for the duration: pushed on the thread's
        context stack and popped after, unless it is current already (one call instead of
        two: the thread of a CUDA user mostly has the right one)."""
        return _MadeCurrent(self.library, context)

    def on_device(self, ordinal: int):
        """Device ``ordinal``'s primary context current on this thread for the duration;
        yields that context."""
        return self._made_current(self.primary_context(ordinal))

    def close(self) -> None:
        if getattr(self.library, "forked", False):   # the parent's (VendorDriver.close)
            return
        floor = self.library is self.floor_library() and _core.cuda_floor_ready()
        if self._publishes_pools():   # the core launches none of the modules unloaded next
            _core.publish_cuda_kernel(-1, "", 0, 0, 0)
        self.kernels.close()   # modules and pools first: they live in the contexts
        try:
            self._close_ipc_floor()   # sharing's events and streams: in the contexts too
        except BufferError:
            pass
        super().close()   # the pools, the pinned ring, the events, the held memory
        with self._contexts_lock:
            contexts = self._contexts.pop(self.library, {})
        if floor:   # its events, then the contexts it retained
            _core.close_cuda_floor()
            return
        for ordinal in contexts:
            try:
                self.library.get().cuDevicePrimaryCtxRelease_v2(ordinal)
            except Exception:   # at exit: the library may be gone
                pass

    def _publishes_pools(self) -> bool:
        return self.library is self.floor_library()

    def publish_kernel(self, ordinal: int, kernel: str, context: int,
                       context_id: int | None, function: int) -> None:
        """Tell the core's own device copy (which launches from C, on the floor) that
        ``kernel`` is ``function`` on device ``ordinal``, its module loaded into ``context``
        while the context's id was ``context_id`` (``gpu.kernels`` says so when it finds a
        function). Only the process's driver over the floor's library publishes; a context
        without an id (an older driver) is not published (the floor would not know it made
        again)."""
        if context_id is not None and self._publishes_pools():
            _core.publish_cuda_kernel(ordinal, kernel, context, context_id, function)

    def _generation_of(self, key) -> object:
        return self.context_id(key)   # cuCtxGetId: new after a reset, as the floor keeps it

    def _context_of_event(self, key):
        """A cached event is keyed by its context's handle: that context, current."""
        return self._made_current(c_handle(key))

    def on_stream_context(self, stream: int, ordinal: int) -> "_MadeCurrent":
        """The context ``stream`` was created in, current for the duration; the default
        streams (1, 2) belong to the current context: device ``ordinal``'s primary one."""
        if self.is_default_stream(stream):
            return self.on_device(ordinal)
        return self._made_current(self._context_of_stream(stream))

    def _context_of_stream(self, stream: int) -> c_handle:
        """The context a stream handle (not a default stream value) was created in."""
        context = c_handle()
        self._call("cuStreamGetCtx", stream, ctypes.byref(context))
        return context

    def stream_is_on(self, stream: int, ordinal: int) -> bool:
        """Whether ``stream`` runs in device ``ordinal``'s primary context (the default
        streams do: they are the current context's)."""
        return self.is_default_stream(stream) or \
            self._context_of_stream(stream).value == self.primary_context(ordinal).value

    def copy_2d_async(self, ordinal: int, dst: int, dst_pitch: int, src: int, src_pitch: int,
                      width: int, height: int, stream: int) -> None:
        """``height`` rows of ``width`` bytes, rows ``src_pitch``/``dst_pitch`` bytes apart."""
        copy = _Memcpy2D(srcMemoryType=_CU_MEMORYTYPE_UNIFIED, srcDevice=src,
                         srcPitch=src_pitch, dstMemoryType=_CU_MEMORYTYPE_UNIFIED, dstDevice=dst,
                         dstPitch=dst_pitch, WidthInBytes=width, Height=height)
        with self.on_device(ordinal):
            self._call("cuMemcpy2DAsync_v2", ctypes.byref(copy), stream)

    def copy_peer_async(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int,
                        nbytes: int, stream: int) -> None:
        """``nbytes`` from device ``src_ordinal`` to device ``dst_ordinal``, enqueued on
        ``stream`` (a stream of the destination device)."""
        with self.on_device(src_ordinal) as src_context, \
                self.on_device(dst_ordinal) as dst_context:
            self._call("cuMemcpyPeerAsync", dst, dst_context, src, src_context, nbytes, stream)


    # Device kernels (the room is gpu.kernels; these are the driver calls it makes).

    def load_module(self, image: bytes) -> int:
        """A module loaded from ``image`` (PTX text) into the current context."""
        module = c_handle()
        self._call("cuModuleLoadData", ctypes.byref(module), image)
        return module.value

    def module_function(self, module: int, name: str) -> int:
        function = c_handle()
        self._call("cuModuleGetFunction", ctypes.byref(function), module, name.encode())
        return function.value

    def context_id(self, context: int) -> int | None:
        """``context``'s id (``cuCtxGetId``, CUDA 12.0): unique in the process and new each
        time the context is made again — after another library reset the device, the
        handle may be the same pointer, the id is not.
        None where the driver has no ids (older than the PTX the kernels need)."""
        ask = self._optional("cuCtxGetId")
        identity = ctypes.c_ulonglong(0)
        if ask is None or ask(c_handle(context), ctypes.byref(identity)) != 0:
            return None
        return identity.value

    def unload_module(self, context: int, module: int, context_id: int | None) -> None:
        """Unload ``module``, with its ``context`` current — only while the context is the
        one the module was loaded into (``context_id``): a module of a context destroyed
        since went with it, and its handle is no longer the driver's to take."""
        with self._made_current(c_handle(context)):
            if self.context_id(context) == context_id:
                self._call("cuModuleUnload", module)

    def has_kernel(self, ordinal: int, module: str, kernel: str) -> bool:
        """Whether ``kernel`` of arrayport's kernel module ``module`` can be launched on
        device ``ordinal`` (its module loads there: loaded now if it was not)."""
        return self.kernels.function(ordinal, module, kernel) is not None

    def launch_kernel(self, ordinal: int, module: str, kernel: str, grid: tuple, block: tuple,
                      params: ctypes.Structure, stream: int) -> bool:
        """Launch ``kernel`` of arrayport's kernel module ``module`` on ``stream`` (of
        device ``ordinal``): a grid of ``grid`` (x, y, z) blocks of ``block`` (x, y, z)
        threads, its one by-value parameter ``params``. False, launching nothing, where the module cannot
        be loaded on that device, or ``stream`` is another device's (the caller keeps its
        DMA path)."""
        arguments = (ctypes.c_void_p * 1)(ctypes.addressof(params))
        if not self.stream_is_on(stream, ordinal):
            # a stream of another device (a peer copy's destination): a kernel there could
            # not read this device's memory without peer access; DMA can
            return False
        with self.on_device(ordinal):   # once: the lookups below find it current
            # Looked up by the context's id: a context made again (another library reset
            # the device) loads its modules again, and no function of a destroyed module is
            # ever passed to the driver (undefined behaviour on a GPU).
            function = self.kernels.function(ordinal, module, kernel)
            if function is None:
                return False
            self.library.check(self.library.get().cuLaunchKernel(
                function, *grid, *block, 0, stream, arguments, None),
                f"cuLaunchKernel({kernel})")
            return True


class _MadeCurrent:
    """A CUDA context current on this thread inside a ``with`` block (``CudaDriver.
    _made_current``); yields the context. A class rather than a generator: every driver
    call of arrayport's enters one, and a generator's machinery cost more than the call."""

    __slots__ = ("_library", "_context", "_pushed")

    def __init__(self, library: NativeLibrary, context: c_handle):
        self._library, self._context, self._pushed = library, context, False

    def __enter__(self) -> c_handle:
        library = self._library.get()
        current = c_handle()
        if library.cuCtxGetCurrent(ctypes.byref(current)) == 0 and current.value and \
                current.value == self._context.value:
            return self._context
        self._library.check(library.cuCtxPushCurrent_v2(self._context), "cuCtxPushCurrent_v2")
        self._pushed = True
        return self._context

    def __exit__(self, *exc_info) -> None:
        if self._pushed:
            self._pushed = False
            self._library.get().cuCtxPopCurrent_v2(ctypes.byref(c_handle()))


driver = CudaDriver(_LIBRARY, _SYMBOLS)   # the one instance gpu.driver_for hands out
# the floor's, once opened: the core's stream waits go there
driver.own_floor(_LIBRARY, _core.set_cuda_floor_direct)
