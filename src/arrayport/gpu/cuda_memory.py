"""CUDA's stream-ordered memory, as arrayport's copies use it: the part of ``CudaDriver``
that allocates from memory pools (``cuMemAllocAsync`` and kin, CUDA 11.2 and later; entry
points declared on first use, so an older driver still serves everything else).

Two kinds of memory, two promises (docs/devices.md, "Copies"):
- a copy's *staging* (``allocate_temporary``): only the copy's own stream touches it, so it is
  allocated and freed in that stream's order from the device's default pool — no host wait,
  and the next copy on the stream reuses the block;
- a copy's *result* (``allocate_result``): handed to consumers on streams arrayport never
  sees, and outliving the stream it was made on. Allocated in the copy stream's order from
  arrayport's own pool on the device (its blocks stay mapped up to a release threshold, so a
  steady stream of copies costs no ``cuMemAlloc``/``cuMemFree``); freed, when its last View
  goes, only after all work in the primary context of every device that may read it (its
  own, and the peers the pool grants access) has finished — the wait ``cuMemFree`` did — so
  no consumer's pending kernel can read a block the pool has given to someone else. Where
  the pool cannot be made (a setup without pools), results keep ``cuMemAlloc``.
"""

from __future__ import annotations

import ctypes
import threading
import weakref

from arrayport.gpu.library import OwnedMemory, c_address, c_handle, c_size

__all__ = ["CudaStreamOrderedMemory"]

# CUDA driver API facts (cuda.h).
_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115
_CU_MEM_ALLOCATION_TYPE_PINNED = 1      # CUmemAllocationType: ordinary device memory
_CU_MEM_HANDLE_TYPE_NONE = 0            # CUmemAllocationHandleType: not exportable
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
_CU_STREAM_LEGACY = 1
# What arrayport's pool keeps mapped when idle: an eighth of the device's memory (the rest
# goes back to the driver at the next synchronization, for other libraries' allocators).
_POOL_KEEPS_FRACTION = 8


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
    "cuMemPoolSetAccess": (ctypes.c_int, [_POOL, ctypes.POINTER(_MemAccessDesc), c_size]),
    "cuMemAllocFromPoolAsync": (ctypes.c_int, [ctypes.POINTER(c_address), c_size, _POOL,
                                               c_handle]),
    "cuDeviceCanAccessPeer": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                             ctypes.c_int]),
    "cuDeviceTotalMem_v2": (ctypes.c_int, [ctypes.POINTER(c_size), ctypes.c_int]),
    "cuCtxSynchronize": (ctypes.c_int, []),
}


class CudaStreamOrderedMemory:
    """``CudaDriver``'s stream-ordered allocations (see the module). Expects the driver's
    ``library``, ``_call``, ``on_device``, ``allocate_device`` and ``stream_is_on``."""

    def _init_stream_ordered_memory(self) -> None:
        # Per library (tests swap the library for stand-ins): {ordinal: does it have pools},
        # {ordinal: arrayport's pool, or None where it has none}.
        self._memory_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._result_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._result_pools_lock = threading.Lock()

    def _optional(self, name: str):
        """Entry point ``name`` of ``_OPTIONAL_SIGNATURES``, declared; None where the driver
        is too old to have it."""
        entry = getattr(self.library.get(), name, None)
        if entry is not None and entry.argtypes is None:
            entry.restype, entry.argtypes = _OPTIONAL_SIGNATURES[name]
        return entry

    def _has_memory_pools(self, ordinal: int) -> bool:
        pools = self._memory_pools.setdefault(self.library, {})
        if ordinal not in pools:
            value = ctypes.c_int(0)
            status = self.library.get().cuDeviceGetAttribute(
                ctypes.byref(value), _CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, ordinal)
            pools[ordinal] = (status == 0 and value.value == 1
                              and self._optional("cuMemAllocAsync") is not None
                              and self._optional("cuMemFreeAsync") is not None)
        return pools[ordinal]

    def allocate_temporary(self, ordinal: int, nbytes: int, stream: int) -> OwnedMemory:
        """``nbytes`` of device memory that only work on ``stream`` (of device ``ordinal``)
        will touch — a copy's staging — allocated and freed in that stream's order from
        the device's memory pool (``cuMemAllocAsync`` / ``cuMemFreeAsync``): no host wait
        either way, and a block freed on the stream is reused by its next allocation. The
        free is enqueued when the returned memory goes, which must be while ``stream``
        still exists (the caller's call). Devices without memory pools, and a stream of
        another device: an ordinary allocation."""
        if not (self._has_memory_pools(ordinal) and self.stream_is_on(stream, ordinal)):
            return self.allocate_device(ordinal, nbytes)
        address = c_address(0)
        with self.on_device(ordinal):
            self._call("cuMemAllocAsync", ctypes.byref(address), max(nbytes, 1), stream,
                       what=f"cuMemAllocAsync({nbytes})")

        def release(pointer: int) -> None:
            with self.on_device(ordinal):
                self._call("cuMemFreeAsync", pointer, stream,
                           what=f"cuMemFreeAsync({pointer:#x})")
        return OwnedMemory(address.value, nbytes, release)

    def allocate_result(self, ordinal: int, nbytes: int, stream: int) -> OwnedMemory:
        """``nbytes`` of device memory for a copy's result, enqueued on ``stream`` (of device
        ``ordinal``): from arrayport's pool on that device, in ``stream``'s order, so no
        host wait; freed when the last View on it goes, after all work in the device's
        primary context has finished (the wait ``cuMemFree`` makes: consumers' streams are
        not known), back into the pool. Devices without pools, and a stream of another
        device: an ordinary allocation, with ``cuMemFree``."""
        pool = self._result_pool(ordinal) if self.stream_is_on(stream, ordinal) else None
        if pool is None:
            return self.allocate_device(ordinal, nbytes)
        pool, readers = pool
        address = c_address(0)
        with self.on_device(ordinal):
            self._call("cuMemAllocFromPoolAsync", ctypes.byref(address), max(nbytes, 1), pool,
                       stream, what=f"cuMemAllocFromPoolAsync({nbytes})")

        def release(pointer: int) -> None:
            # every device that may read the block (its own, and the peers granted access)
            # has finished its work before the block goes back to the pool
            for device in readers:
                with self.on_device(device):
                    self._call("cuCtxSynchronize", what="cuCtxSynchronize (before a free)")
            with self.on_device(ordinal):
                self._call("cuMemFreeAsync", pointer, _CU_STREAM_LEGACY,
                           what=f"cuMemFreeAsync({pointer:#x})")
        return OwnedMemory(address.value, nbytes, release)

    def _result_pool(self, ordinal: int) -> tuple[int, tuple[int, ...]] | None:
        """(arrayport's memory pool on device ``ordinal``, the devices that may read its
        blocks), made on first use; None where the device or the driver has no pools, or
        the pool could not be made (remembered: the copies keep ``cuMemAlloc``)."""
        with self._result_pools_lock:
            pools = self._result_pools.setdefault(self.library, {})
            if ordinal not in pools:
                usable = self._has_memory_pools(ordinal) and all(
                    self._optional(name) is not None for name in (
                        "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolSetAttribute",
                        "cuMemAllocFromPoolAsync", "cuCtxSynchronize"))
                pools[ordinal] = self._make_result_pool(ordinal) if usable else None
            return pools[ordinal]

    def _make_result_pool(self, ordinal: int) -> tuple[int, tuple[int, ...]] | None:
        """A pool of ordinary memory on device ``ordinal`` that keeps an eighth of the
        device's memory mapped when idle, readable by every peer device that can read
        this one's memory (as ``cuMemAlloc`` memory is, once peer access is on); with the
        devices that may read its blocks. None, leaving nothing made, where the driver
        refuses a step (a vGPU or MPS setup without pools)."""
        try:
            return self._made_result_pool(ordinal)
        except BufferError:
            return None

    def _made_result_pool(self, ordinal: int) -> tuple[int, tuple[int, ...]]:
        props = _MemPoolProps(allocType=_CU_MEM_ALLOCATION_TYPE_PINNED,
                              handleTypes=_CU_MEM_HANDLE_TYPE_NONE,
                              location=_MemLocation(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal))
        pool = _POOL()
        with self.on_device(ordinal):
            self._call("cuMemPoolCreate", ctypes.byref(pool), ctypes.byref(props),
                       what=f"cuMemPoolCreate(device {ordinal})")
            try:
                peers = self._configure_result_pool(pool, ordinal)
            except BaseException:
                self._optional("cuMemPoolDestroy")(pool)
                raise
        return pool.value, (ordinal, *peers)

    def _configure_result_pool(self, pool, ordinal: int) -> list[int]:
        """The new pool's release threshold and peer access; the peers granted it."""
        total = c_size(0)
        measure = self._optional("cuDeviceTotalMem_v2")
        keeps = ctypes.c_uint64(total.value // _POOL_KEEPS_FRACTION
                                if measure is not None and measure(ctypes.byref(total),
                                                                   ordinal) == 0
                                else 1 << 30)
        self._call("cuMemPoolSetAttribute", pool, _CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                   ctypes.byref(keeps), what="cuMemPoolSetAttribute(release threshold)")
        peers = [peer for peer in range(self.device_count())
                 if peer != ordinal and self._peer_can_read(peer, ordinal)]
        if not peers or self._optional("cuMemPoolSetAccess") is None:
            return []
        access = (_MemAccessDesc * len(peers))(*(
            _MemAccessDesc(_MemLocation(_CU_MEM_LOCATION_TYPE_DEVICE, peer),
                           _CU_MEM_ACCESS_FLAGS_PROT_READWRITE) for peer in peers))
        self._call("cuMemPoolSetAccess", pool, access, len(peers),
                   what="cuMemPoolSetAccess(peers)")
        return peers

    def _peer_can_read(self, peer: int, ordinal: int) -> bool:
        ask = self._optional("cuDeviceCanAccessPeer")
        answer = ctypes.c_int(0)
        return ask is not None and ask(ctypes.byref(answer), peer, ordinal) == 0 \
            and answer.value == 1

    def _close_result_pools(self) -> None:
        """Destroy arrayport's pools (at the driver's close): their idle blocks go back at
        once; a block still in use goes when it is freed (the driver's rule)."""
        with self._result_pools_lock:
            pools = self._result_pools.pop(self.library, {})
        for made in pools.values():
            if made is not None:
                try:
                    self._optional("cuMemPoolDestroy")(made[0])
                except Exception:   # at exit: the library may be gone
                    pass
