"""CUDA's memory floor: the driver calls arrayport's memory policy (``gpu.held_memory``)
makes on CUDA, each one fact or one call, deciding nothing (``gpu.interface.MemoryFloor``;
the calls CUDA shares with HIP are ``gpu.vendor``'s). Memory pools (``cuMemPoolCreate``,
``cuMemAllocFromPoolAsync`` and kin, CUDA 11.2 and later) are declared on first use, so an
older driver still serves everything else.

CUDA's facts the policy asks for: its ordinary frees do not wait for work still using the
memory (``cuMemFree`` "may" synchronize, ``cuMemFreeHost`` promises nothing, and a pooled
block freed with either "will not perform any implicit synchronization": cuda.h); a free in
the legacy default stream's order comes after the device's work queued so far; the devices
at work are those whose primary context is active.
"""

from __future__ import annotations

import ctypes
import weakref

from arrayport import _core
from arrayport.gpu.library import c_address, c_handle, c_size

__all__ = ["CudaMemoryFloor"]

# CUDA driver API facts (cuda.h).
_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115
_CU_MEM_ALLOCATION_TYPE_PINNED = 1      # CUmemAllocationType: ordinary device memory
_CU_MEM_HANDLE_TYPE_NONE = 0            # CUmemAllocationHandleType: not exportable
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
_CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5
_CU_STREAM_LEGACY = 1
_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11


class _MemLocation(ctypes.Structure):
    """CUmemLocation."""
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _MemPoolProps(ctypes.Structure):
    """CUmemPoolProps (88 bytes; the tail — maxSize, usage, reserved — left zero: defaults)."""
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int),
                ("location", _MemLocation), ("win32SecurityAttributes", ctypes.c_void_p),
                ("reserved", ctypes.c_ubyte * 64)]


class _MemAccessDesc(ctypes.Structure):
    """CUmemAccessDesc."""
    _fields_ = [("location", _MemLocation), ("flags", ctypes.c_int)]


_POOL = c_handle
_OPTIONAL_SIGNATURES = {
    "cuMemAllocAsync": (ctypes.c_int, [ctypes.POINTER(c_address), c_size, c_handle]),
    "cuMemFreeAsync": (ctypes.c_int, [c_address, c_handle]),
    "cuMemPoolCreate": (ctypes.c_int, [ctypes.POINTER(_POOL), ctypes.POINTER(_MemPoolProps)]),
    "cuMemPoolDestroy": (ctypes.c_int, [_POOL]),
    "cuMemPoolSetAttribute": (ctypes.c_int, [_POOL, ctypes.c_int, ctypes.c_void_p]),
    "cuMemPoolGetAttribute": (ctypes.c_int, [_POOL, ctypes.c_int, ctypes.c_void_p]),
    "cuMemPoolTrimTo": (ctypes.c_int, [_POOL, c_size]),
    "cuMemPoolSetAccess": (ctypes.c_int, [_POOL, ctypes.POINTER(_MemAccessDesc), c_size]),
    "cuMemAllocFromPoolAsync": (ctypes.c_int, [ctypes.POINTER(c_address), c_size, _POOL,
                                               c_handle]),
    "cuDeviceCanAccessPeer": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                             ctypes.c_int]),
    "cuDeviceTotalMem_v2": (ctypes.c_int, [ctypes.POINTER(c_size), ctypes.c_int]),
    # CUDA 12.0: a context's id, new at each (re)creation (the kernel cache's key)
    "cuCtxGetId": (ctypes.c_int, [c_handle, ctypes.POINTER(ctypes.c_ulonglong)]),
    # whether a device's primary context is active, asked without retaining it
    "cuDevicePrimaryCtxGetState": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint),
                                                  ctypes.POINTER(ctypes.c_int)]),
}



class CudaMemoryFloor:
    """``CudaDriver``'s memory floor, beyond the calls ``VendorDriver`` shares (see the
    module). Expects the driver's ``library``, ``_call``, ``on_device``, ``device_count``,
    ``retained_devices`` and ``_publishes_pools``."""

    def _init_memory_floor(self) -> None:
        # Per library (tests swap the library for stand-ins): {ordinal: does it have pools}.
        self._memory_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _optional(self, name: str):
        """Entry point ``name`` of ``_OPTIONAL_SIGNATURES``, declared; None where the driver
        is too old to have it."""
        entry = getattr(self.library.get(), name, None)
        # (a stand-in library's entry may be a Python function: nothing to declare)
        if entry is not None and getattr(entry, "argtypes", ()) is None:
            entry.restype, entry.argtypes = _OPTIONAL_SIGNATURES[name]
        return entry

    def has_memory_pools(self, ordinal: int) -> bool:
        """Whether device ``ordinal`` allocates in stream order (``cuMemAllocAsync``,
        ``cuMemFreeAsync``: its default pool), asked once per library and device; whether
        a pool of arrayport's own can be made there, ``create_pool`` answers."""
        pools = self._memory_pools.setdefault(self.library, {})
        if ordinal not in pools:
            value = ctypes.c_int(0)
            status = self.library.get().cuDeviceGetAttribute(
                ctypes.byref(value), _CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, ordinal)
            pools[ordinal] = (status == 0 and value.value == 1
                              and self._optional("cuMemAllocAsync") is not None
                              and self._optional("cuMemFreeAsync") is not None)
        return pools[ordinal]

    def device_memory(self, ordinal: int) -> int:
        """Device ``ordinal``'s memory in bytes (8 GiB where the driver does not say)."""
        total = c_size(0)
        measure = self._optional("cuDeviceTotalMem_v2")
        if measure is not None and measure(ctypes.byref(total), ordinal) == 0 and total.value:
            return total.value
        return 8 << 30

    def devices_at_work(self) -> tuple[int, ...]:
        """The devices whose work may read memory any device can address: those whose
        primary context is active — retained by arrayport or by another library — asked
        without retaining one (``cuDevicePrimaryCtxGetState``); where the driver cannot
        say, those arrayport retained. A device nobody uses is not woken for it."""
        ask = self._optional("cuDevicePrimaryCtxGetState")
        if ask is None:
            return tuple(sorted(self.retained_devices()))
        flags, active = ctypes.c_uint(0), ctypes.c_int(0)
        return tuple(device for device in range(self.device_count())
                     if ask(device, ctypes.byref(flags), ctypes.byref(active)) == 0
                     and active.value)

    def allocation_start(self, pointer: int) -> int:
        """Where the driver allocation holding ``pointer`` starts; 0 where it knows none."""
        start = c_address(0)
        attribute = (ctypes.c_int * 1)(_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        data = (ctypes.c_void_p * 1)(ctypes.addressof(start))
        with self.on_device(0):
            status = self.library.get().cuPointerGetAttributes(1, attribute, data, pointer)
        return start.value if status == 0 else 0

    def peers_reading(self, ordinal: int) -> tuple[int, ...]:
        """The other devices that can read device ``ordinal``'s memory (peer access)."""
        ask = self._optional("cuDeviceCanAccessPeer")
        if ask is None or self._optional("cuMemPoolSetAccess") is None:
            return ()
        answer = ctypes.c_int(0)
        return tuple(peer for peer in range(self.device_count())
                     if peer != ordinal and ask(ctypes.byref(answer), peer, ordinal) == 0
                     and answer.value == 1)

    def create_pool(self, ordinal: int, keep_bytes: int, peers: tuple[int, ...]) -> int:
        """A pool of ordinary memory on device ``ordinal`` keeping ``keep_bytes`` mapped
        when idle (its release threshold), readable by ``peers`` too; nothing left made
        where a step fails (BufferError)."""
        props = _MemPoolProps(allocType=_CU_MEM_ALLOCATION_TYPE_PINNED,
                              handleTypes=_CU_MEM_HANDLE_TYPE_NONE,
                              location=_MemLocation(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal))
        missing = [name for name in ("cuMemPoolCreate", "cuMemPoolDestroy",
                                     "cuMemPoolSetAttribute", "cuMemAllocFromPoolAsync")
                   if self._optional(name) is None]
        if missing:
            raise self.unavailable(f"cuda: this driver has no {', '.join(missing)}")
        pool = _POOL()
        with self.on_device(ordinal):
            self._call("cuMemPoolCreate", ctypes.byref(pool), ctypes.byref(props),
                       what=f"cuMemPoolCreate(device {ordinal})")
            try:
                self._configure_pool(pool, keep_bytes, peers)
            except BaseException:
                self._optional("cuMemPoolDestroy")(pool)
                raise
        return pool.value

    def _configure_pool(self, pool, keep_bytes: int, peers: tuple[int, ...]) -> None:
        threshold = ctypes.c_uint64(keep_bytes)
        self._call("cuMemPoolSetAttribute", pool, _CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                   ctypes.byref(threshold), what="cuMemPoolSetAttribute(release threshold)")
        if peers:
            access = (_MemAccessDesc * len(peers))(*(
                _MemAccessDesc(_MemLocation(_CU_MEM_LOCATION_TYPE_DEVICE, peer),
                               _CU_MEM_ACCESS_FLAGS_PROT_READWRITE) for peer in peers))
            self._call("cuMemPoolSetAccess", pool, access, len(peers),
                       what="cuMemPoolSetAccess(peers)")

    def destroy_pool(self, pool: int) -> None:
        self._optional("cuMemPoolDestroy")(c_handle(pool))

    def trim_pool(self, ordinal: int, pool: int) -> None:
        """``pool``'s idle memory back to the driver; what live allocations use stays
        (``cuMemPoolTrimTo``; nothing where the driver lacks it)."""
        trim = self._optional("cuMemPoolTrimTo")
        if trim is not None:
            with self.on_device(ordinal):
                self.library.check(trim(c_handle(pool), 0), "cuMemPoolTrimTo(0)")

    def pool_reserved(self, pool: int) -> int:
        """The bytes ``pool`` reserves from the driver, in use or not; 0 where the driver
        cannot say."""
        ask = self._optional("cuMemPoolGetAttribute")
        value = ctypes.c_uint64(0)
        if ask is None or ask(c_handle(pool), _CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                              ctypes.byref(value)) != 0:
            return 0
        return value.value

    def allocate_in_stream_order(self, ordinal: int, pool: int | None, nbytes: int,
                                 stream: int) -> tuple[int, int, str]:
        """``nbytes`` from ``pool`` (``cuMemAllocFromPoolAsync``), or the device's default
        pool (None: ``cuMemAllocAsync``), in ``stream``'s order."""
        address = c_address(0)
        with self.on_device(ordinal):
            if pool is not None:
                name = "cuMemAllocFromPoolAsync"
                status = self._optional(name)(ctypes.byref(address), max(nbytes, 1),
                                              c_handle(pool), stream)
            else:
                name = "cuMemAllocAsync"
                status = self._optional(name)(ctypes.byref(address), max(nbytes, 1), stream)
        return status, address.value or 0, f"{name}({nbytes})"

    def free_in_stream_order(self, ordinal: int, pointer: int, stream: int | None) -> None:
        """``cuMemFreeAsync`` of ``pointer`` on ``stream``; None: in the legacy default
        stream's order, after the device's work queued so far."""
        with self.on_device(ordinal):
            self._call("cuMemFreeAsync", pointer,
                       _CU_STREAM_LEGACY if stream is None else stream,
                       what=f"cuMemFreeAsync({pointer:#x})")

    def publish_pool(self, ordinal: int, pool, release, room) -> None:
        """Tell the core's own copies (``_core_device_copy.pxi``) that ``pool`` serves device
        ``ordinal`` (None: no pool; ordinal -1: none of any device), a block given back by
        ``release``, room made by ``room`` — only the process's driver over the floor's
        library, and only when the core holds another. (Forgetting every pool, ordinal -1,
        is the process's driver's to ask whatever its library: a test's pool table.)"""
        if ordinal == -1 and pool is None:
            if self._owns_floor:
                _core.publish_cuda_result_pool(-1, None, None, None)
        elif self._publishes_pools() and (
                pool is None or _core.published_cuda_result_pool(ordinal) is not pool):
            _core.publish_cuda_result_pool(ordinal, pool, release, room)
