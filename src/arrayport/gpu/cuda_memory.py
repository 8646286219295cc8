"""CUDA memory as arrayport's copies use it: the part of ``CudaDriver`` that allocates and
frees device and pinned memory — from memory pools (``cuMemAllocAsync`` and kin, CUDA 11.2
and later; entry points declared on first use, so an older driver still serves everything
else) or not (``cuMemAlloc``, ``cuMemHostAlloc``).

The driver's frees do not wait for work still using the memory: ``cuMemFree`` "may"
synchronize, ``cuMemFreeHost`` promises nothing, and a pooled block freed with either "will
not perform any implicit synchronization" (cuda.h). So no memory is freed here on the belief
that the free waits: each free is ordered after the work that may use the memory — by the
stream it is freed on (``cuMemFreeAsync``), or by a synchronization of every device that may
read it (below).

Two kinds of memory, two promises (docs/devices.md, "Copies"):
- a copy's *staging* (``allocate_temporary``): only the copy's own stream touches it, so it is
  allocated and freed in that stream's order, from arrayport's pool on the device (else the
  device's default pool) — no host wait, and the next copy on the stream reuses the block;
- a copy's *result* (``allocate_result``): handed to consumers on streams arrayport never
  sees, and outliving the stream it was made on. Allocated in the copy stream's order from
  arrayport's own pool on the device (its blocks stay mapped up to a release threshold, so a
  steady stream of copies costs no ``cuMemAlloc``/``cuMemFree``). A block goes back to the
  pool only after all work in the primary context of every device that may read it (its
  own, and the peers the pool grants access) has finished — the wait ``cuMemFree`` makes —
  so no consumer's pending kernel can read a block the pool has given to someone else. That
  wait is paid once for many blocks: when a result's last View goes, its block is *held*
  (the host does not wait); when the blocks held reach a budget (``HELD_FRACTION`` of the
  device's memory), or an allocation from the pool fails for want of memory (which then
  waits for the returns under way and for the device, and tries again; then trims the pool
  and tries once more — staging allocations refused memory do the same with the pool), or
  the driver closes, one synchronization of those devices returns every held block to the
  pool. Where the pool cannot be made (a setup without pools), results keep ``cuMemAlloc``.

Memory from ``cuMemAlloc`` (results without a pool, staging on another device's stream),
managed memory and pinned memory (``cuMemHostAlloc``: results, the pinned ring) is held the
same way when its last View goes, beside the pools' blocks: any device may read it (peer
access, portable pinned memory), so its free (``cuMemFree``, ``cuMemFreeHost``) comes after
one synchronization of every device, paid once for many. What a dead result's copy read (its
source, when GPU memory) is kept alive until then too: the transfer may not have run.

Every allocation asks for room the same way (``_with_room``, the one place owning the rule):
refused for want of memory, the memory held on the device goes back and the device finishes
its work, then arrayport's pool is trimmed, trying again after each step.

What the pools keep (held blocks, and idle memory up to their release threshold) goes back
to the driver on request: ``release_cached_memory``, behind ``ap.release_device_memory()``.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import os
import threading
import time
import weakref

from arrayport import _core
from arrayport.gpu.library import OwnedMemory, c_address, c_handle, c_size

__all__ = ["CudaStreamOrderedMemory"]

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
_CU_MEM_ATTACH_GLOBAL = 0x1             # managed memory any stream may use
_CU_MEMHOSTALLOC_PORTABLE = 0x1         # pinned memory usable from every context
# What arrayport's pool keeps mapped when idle (its release threshold: the driver gives the
# rest back at the next synchronization, for other libraries' allocators): 256 MiB, or an
# eighth of a smaller device's memory; ARRAYPORT_POOL_KEEP_BYTES, in bytes, overrides it.
POOL_KEEP_BYTES = 256 << 20
_POOL_KEEPS_FRACTION = 8
POOL_KEEP_VARIABLE = "ARRAYPORT_POOL_KEEP_BYTES"
# How much of a device's memory dead results may hold before one synchronization returns
# them to the pool: a 64th (1.25 GB of an 80 GB H100; a loop of 1 MiB copies waits on the
# host once per 1,280 results instead of once per result).
HELD_FRACTION = 64
# What one held entry counts for at least, whatever its size (the driver's allocations take a
# page at least, and an entry costs the host too): tiny results are returned in thousands,
# not in millions; and the most entries held before a return.
_HELD_ENTRY_BYTES = 4096
_HELD_ENTRIES_MAX = 4096
# The budget of the holder of ordinary memory (cuMemAlloc, cuMemHostAlloc: page-locked host
# memory among it, which the device's size says nothing of).
_ORDINARY_HELD_BYTES = 64 << 20
_CUDA_ERROR_OUT_OF_MEMORY = 2
# How long an allocation refused for want of memory waits for another thread's return of
# held blocks (its wait for the devices' work, then its frees) before failing as it is.
_RETURN_WAIT_S = 10.0


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
    "cuCtxSynchronize": (ctypes.c_int, []),
    # CUDA 12.0: a context's id, new at each (re)creation (the kernel cache's key)
    "cuCtxGetId": (ctypes.c_int, [c_handle, ctypes.POINTER(ctypes.c_ulonglong)]),
    # whether a device's primary context is active, asked without retaining it
    "cuDevicePrimaryCtxGetState": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint),
                                                  ctypes.POINTER(ctypes.c_int)]),
}


def pool_keep_bytes(device_memory: int) -> int:
    """The release threshold of arrayport's pool on a device of ``device_memory`` bytes:
    ARRAYPORT_POOL_KEEP_BYTES where set (bytes, 0 to 2**64 - 1), else min(256 MiB, an
    eighth). A setting that is not such a number is a ValueError, asked before any pool is
    made (``_made_result_pool``)."""
    setting = os.environ.get(POOL_KEEP_VARIABLE, "").strip()
    if setting:
        value = int(setting) if setting.isdigit() else -1   # ASCII digits only
        if not 0 <= value < 2**64:
            raise ValueError(f"{POOL_KEEP_VARIABLE} must be a number of bytes from 0 to "
                             f"2**64 - 1, not {setting!r}")
        return value
    return min(POOL_KEEP_BYTES, device_memory // _POOL_KEEPS_FRACTION)


class _ResultPool:
    """arrayport's pool on one device: its handle, the devices that may read its blocks
    (its own first), the device's memory, and the blocks whose last View has gone but
    that have not gone back to the pool yet (see the module). With no handle (``None``):
    the holder of memory freed by the driver's ordinary frees (``cuMemFree``,
    ``cuMemFreeHost``), whose readers are every device.

    A held entry is (address, free, keep): ``free`` None for a pool block (it goes back
    with ``cuMemFreeAsync``), else the call that frees it; ``keep``, what stays alive until
    then (a dead result's source, which its copy may still be reading).

    ``hold`` runs in a finalizer — inside a garbage collection, on any thread, maybe while
    this thread is in ``hold`` or ``take`` already — so it takes no lock: the held blocks
    are a deque, whose append and popleft are atomic, and each block is popped by exactly
    one ``take``. The byte count only paces the returns: a race may make one come a little
    early or late, never return a block twice or lose one."""

    __slots__ = ("handle", "readers", "device_memory", "closed", "_held", "_held_bytes",
                 "_returning", "__weakref__")

    def __init__(self, handle: int, readers: tuple[int, ...], device_memory: int):
        self.handle, self.readers, self.device_memory = handle, readers, device_memory
        self.closed = False   # destroyed with the driver: a block dying later goes at once
        self._held: collections.deque[int] = collections.deque()
        self._held_bytes = 0
        # A token per return under way (taken, not yet freed), on any thread: a deque, for
        # the same reason as _held (no lock a finalizer could re-enter); tokens, so that a
        # waiter waits for the returns begun before it only.
        self._returning: collections.deque[object] = collections.deque()

    @property
    def ordinal(self) -> int:
        return self.readers[0]

    def hold(self, pointer: int, nbytes: int, free=None, keep=(),
             keep_bytes: int = 0) -> list[tuple]:
        """Hold a dead result's block (see the class for ``free`` and ``keep``;
        ``keep_bytes``, what ``keep`` holds allocated); the entries to return now (all of
        them) once what is held — each entry a page at least, and what it keeps — reaches
        the budget, or the entries their most, or the pool is closed; else none."""
        self._held.append((pointer, free, keep))
        self._held_bytes += max(nbytes, _HELD_ENTRY_BYTES) + keep_bytes
        if self.closed or self._held_bytes >= self.budget() \
                or len(self._held) >= _HELD_ENTRIES_MAX:
            return self.take()
        return []

    def budget(self) -> int:
        """The bytes held before a return: a share of a pool's device; for the ordinary
        holder (no handle), a fixed amount (it holds page-locked host memory too)."""
        return _ORDINARY_HELD_BYTES if self.handle is None else \
            self.device_memory // HELD_FRACTION

    def take(self) -> list[tuple]:
        """Every held entry, no longer held (the caller returns them: ``_return_held``)."""
        self._held_bytes = 0
        blocks = []
        while True:
            try:
                blocks.append(self._held.popleft())
            except IndexError:
                return blocks

    def held(self) -> int:
        return len(self._held)

    def entries(self) -> tuple:
        return tuple(self._held)

    @contextlib.contextmanager
    def returning(self):
        """Around a return of taken blocks: ``returns_under_way`` names it until it ends."""
        token = object()
        self._returning.append(token)
        try:
            yield
        finally:
            self._returning.remove(token)   # by identity: no Python code runs

    def returns_under_way(self) -> tuple[object, ...]:
        return tuple(self._returning)

    def wait_for_returns(self, returns: tuple[object, ...], timeout: float) -> None:
        """Until each of ``returns`` (from ``returns_under_way``) has ended, or ``timeout``
        seconds. Polls (a short sleep, doubling): a lock here could be re-entered by a
        finalizer's return on this thread."""
        deadline, pause = time.monotonic() + timeout, 0.0002
        while any(token in self._returning for token in returns) \
                and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(2 * pause, 0.005)


class CudaStreamOrderedMemory:
    """``CudaDriver``'s stream-ordered allocations (see the module). Expects the driver's
    ``library``, ``_call``, ``on_device``, ``allocate_device`` and ``stream_is_on``."""

    def _init_stream_ordered_memory(self) -> None:
        # Per library (tests swap the library for stand-ins): {ordinal: does it have pools},
        # {ordinal: arrayport's pool, or None where it has none}.
        self._memory_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._result_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._result_pools_lock = threading.Lock()
        # Every pool made, closed ones too (tests swap the table above): what is held
        self._pools_made: weakref.WeakSet = weakref.WeakSet()
        # Per library: the holder of memory the driver's ordinary frees release (see the
        # module), made on first use.
        self._ordinary_holders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def _optional(self, name: str):
        """Entry point ``name`` of ``_OPTIONAL_SIGNATURES``, declared; None where the driver
        is too old to have it."""
        entry = getattr(self.library.get(), name, None)
        # (a stand-in library's entry may be a Python function: nothing to declare)
        if entry is not None and getattr(entry, "argtypes", ()) is None:
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
        will touch — a copy's staging — allocated and freed in that stream's order
        (``cuMemFreeAsync`` on ``stream``, after the work that uses it): no host wait either
        way, and a block freed on the stream is reused by its next allocation. From
        arrayport's pool on the device where there is one (``cuMemAllocFromPoolAsync``: its
        release threshold keeps the block mapped across synchronizations, where the default
        pool's, 0, gives it back at each), else the device's default pool
        (``cuMemAllocAsync``). The free is enqueued when the returned memory goes, which
        must be while ``stream`` still exists (the caller's call). Devices without memory
        pools, and a stream of another device: an ordinary allocation (``allocate_device``:
        freed after every device's work)."""
        if not (self._has_memory_pools(ordinal) and self.stream_is_on(stream, ordinal)):
            return self.allocate_device(ordinal, nbytes)
        pool = self._result_pool(ordinal)
        address = c_address(0)
        with self.on_device(ordinal):
            if pool is not None:
                name, allocate = "cuMemAllocFromPoolAsync", self._optional(
                    "cuMemAllocFromPoolAsync")
                status = self._with_room(ordinal, lambda: allocate(
                    ctypes.byref(address), max(nbytes, 1), pool.handle, stream))
            else:
                name, allocate = "cuMemAllocAsync", self._optional("cuMemAllocAsync")
                status = self._with_room(ordinal, lambda: allocate(
                    ctypes.byref(address), max(nbytes, 1), stream))
            self.library.check(status, f"{name}({nbytes})")

        def release(pointer: int, keep=(), keep_bytes=0) -> None:
            with self.on_device(ordinal):
                self._call("cuMemFreeAsync", pointer, stream,
                           what=f"cuMemFreeAsync({pointer:#x})")
        return OwnedMemory(address.value, nbytes, release)

    def allocate_result(self, ordinal: int, nbytes: int, stream: int) -> OwnedMemory:
        """``nbytes`` of device memory for a copy's result, enqueued on ``stream`` (of device
        ``ordinal``): from arrayport's pool on that device, in ``stream``'s order, so no
        host wait; held when the last View on it goes, and back in the pool after all work
        of the devices that may read it has finished (the wait ``cuMemFree`` makes, paid
        once for many blocks: the module says when). Devices without pools, and a stream of
        another device: an ordinary allocation, with ``cuMemFree``."""
        pool = self._result_pool(ordinal) if self.stream_is_on(stream, ordinal) else None
        if pool is None:
            return self.allocate_device(ordinal, nbytes)
        allocate = self._optional("cuMemAllocFromPoolAsync")
        address = c_address(0)
        with self.on_device(ordinal):
            status = self._with_room(ordinal, lambda: allocate(
                ctypes.byref(address), max(nbytes, 1), pool.handle, stream))
            if status != 0 and pool.closed:   # the driver closed meanwhile (exit)
                return self.allocate_device(ordinal, nbytes)
            self.library.check(status, f"cuMemAllocFromPoolAsync({nbytes})")

        def release(pointer: int, keep=(), keep_bytes=0) -> None:
            self._give_back_block(pool, pointer, nbytes, keep, keep_bytes)
        return OwnedMemory(address.value, nbytes, release)

    def _give_back_block(self, pool: _ResultPool, pointer: int, nbytes: int, keep=(),
                         keep_bytes: int = 0) -> None:
        """A dead result's block of ``pool``: held, and returned with the others once the
        held reach their budget (see the module) — for the results made here and for the
        core's own copies (``_core_device_copy.pxi``), to which ``_result_pool`` publishes
        each pool with this."""
        self._return_held(pool, pool.hold(pointer, nbytes, None, keep, keep_bytes))

    def _room_for_core(self, ordinal: int, status: int, attempt) -> int:
        """``_with_room`` for an allocation of the core's own copies on device ``ordinal``,
        whose first ``attempt`` answered ``status``: room made as for any allocation."""
        with self.on_device(ordinal):
            return self._with_room(ordinal, attempt, status)

    def _publishes_pools(self) -> bool:
        """Whether this driver's pools are the ones the core's own copies take blocks from
        (the process's driver, over the floor's library: ``gpu.cuda``)."""
        return False

    def allocate_device(self, ordinal: int, nbytes: int, managed: bool = False) -> OwnedMemory:
        """``nbytes`` of device memory on device ``ordinal`` (``cuMemAlloc``; managed
        memory, ``cuMemAllocManaged``, where asked), room asked for as every allocation
        does; when the last View on it goes, held, and freed after every device's work (the
        module: ``cuMemFree`` does not wait for it)."""
        name = "cuMemAllocManaged" if managed else "cuMemAlloc_v2"
        entry = getattr(self.library.get(), name)
        address = c_address(0)
        with self.on_device(ordinal):
            status = self._with_room(ordinal, lambda: entry(
                ctypes.byref(address), max(nbytes, 1),
                *((_CU_MEM_ATTACH_GLOBAL,) if managed else ())))
            self.library.check(status, f"{name}({nbytes})")
        return self._ordinary_memory(address.value, nbytes, ordinal, "cuMemFree_v2")

    def allocate_pinned(self, nbytes: int) -> OwnedMemory:
        """``nbytes`` of page-locked host memory, portable (usable from every device),
        ``cuMemHostAlloc``; when the last View on it goes, held, and freed after every
        device's work (``cuMemFreeHost`` promises no wait)."""
        address = ctypes.c_void_p()
        entry = self.library.get().cuMemHostAlloc
        # Pinned allocations and their free need a current context (any: the memory is
        # portable), which a thread that never touched the GPU does not have.
        with self.on_device(0):
            status = self._with_room(None, lambda: entry(
                ctypes.byref(address), max(nbytes, 1), _CU_MEMHOSTALLOC_PORTABLE))
            self.library.check(status, f"cuMemHostAlloc({nbytes})")
        return self._ordinary_memory(address.value or 0, nbytes, 0, "cuMemFreeHost")

    def _ordinary_memory(self, address: int, nbytes: int, ordinal: int,
                         free_name: str) -> OwnedMemory:
        """OwnedMemory for ``address``, freed by ``free_name`` in device ``ordinal``'s
        context once held and returned (see the module)."""
        holder = self._ordinary_holder()

        def free(pointer: int) -> None:
            with self.on_device(ordinal):   # the driver frees in a context, and says so
                self._call(free_name, pointer, what=f"{free_name}({pointer:#x})")

        def release(pointer: int, keep=(), keep_bytes=0) -> None:
            self._return_held(holder, holder.hold(pointer, nbytes, free, keep, keep_bytes))
        return OwnedMemory(address, nbytes, release, free)

    def _ordinary_holder(self) -> _ResultPool:
        """The holder of memory freed by ``cuMemFree``/``cuMemFreeHost`` (per library):
        every device may read it, so every device finishes its work before it goes."""
        holder = self._ordinary_holders.get(self.library)
        if holder is None:
            with self._result_pools_lock:
                holder = self._ordinary_holders.get(self.library)
                if holder is None:
                    # every device (device 0 at least: a driver that answers has one)
                    holder = _ResultPool(None, tuple(range(max(self.device_count(), 1))),
                                         self._device_memory(0))
                    self._ordinary_holders[self.library] = holder
                    self._pools_made.add(holder)
        return holder

    def _return_held(self, pool: _ResultPool, blocks: list[tuple]) -> None:
        """Return held ``blocks`` (entries of ``pool``): every device that may read them
        (the pool's own, and the peers granted access; for the ordinary holder, every device
        at work: ``_devices_at_work``) finishes its work first — the one host wait — then
        each goes: a pool block back in the legacy stream's order, other memory by its own
        free; what they kept alive goes last. No blocks: nothing, no wait.

        A device whose synchronization fails (a fault, sticky in its context: its work is
        over) does not hold the others' frees back, and a free that fails does not stop the
        rest: every entry taken is dealt with, then the first error is raised. (An entry
        whose free failed went with its faulted context.)"""
        if not blocks:
            return
        failures = []
        with pool.returning():
            readers = pool.readers if pool.handle is not None else self._devices_at_work()
            for device in readers:
                try:
                    with self.on_device(device):
                        self._call("cuCtxSynchronize",
                                   what=f"cuCtxSynchronize (device {device}, before a free)")
                except BufferError as error:
                    failures.append(error)
            for pointer, free, _ in blocks:
                try:
                    if free is not None:
                        free(pointer)
                        continue
                    with self.on_device(pool.ordinal):
                        self._call("cuMemFreeAsync", pointer, _CU_STREAM_LEGACY,
                                   what=f"cuMemFreeAsync({pointer:#x})")
                except BufferError as error:
                    failures.append(error)
        if failures:
            raise failures[0]

    def _devices_at_work(self) -> tuple[int, ...]:
        """The devices whose work may read memory any device can address (the ordinary
        holder's: ``cuMemAlloc`` and pinned memory): those whose primary context is active —
        retained by arrayport or by another library — asked without retaining one
        (``cuDevicePrimaryCtxGetState``); where the driver cannot say, those arrayport
        retained. A device nobody uses is not woken for it."""
        ask = self._optional("cuDevicePrimaryCtxGetState")
        if ask is None:
            return tuple(sorted(self.retained_devices()))
        flags, active = ctypes.c_uint(0), ctypes.c_int(0)
        return tuple(device for device in range(self.device_count())
                     if ask(device, ctypes.byref(flags), ctypes.byref(active)) == 0
                     and active.value)

    def _with_room(self, ordinal: int | None, attempt, status: int | None = None) -> int:
        """``attempt()``'s driver status — an allocation on device ``ordinal`` (None: pinned
        host memory), its device current; where it is refused for want of memory, tried
        again after each step that makes room: the memory arrayport holds goes back and the
        frees run (``_make_room``), then arrayport's pool on the device gives its idle
        memory back to the driver (``_trim``: a request larger than any block the pool
        keeps needs memory the pool does not map). Host waits, on a path that was about to
        fail. Every allocation of device or pinned memory comes through here (``status``:
        the first attempt's, made already — by the core's own copies)."""
        if status is None:
            status = attempt()
        if status != _CUDA_ERROR_OUT_OF_MEMORY:
            return status
        pool = self._made_pool(ordinal) if ordinal is not None else None
        holders = [holder for holder in (pool, self._ordinary_holders.get(self.library))
                   if holder is not None and not holder.closed]
        if holders:
            self._make_room(holders)
            status = attempt()
        if status == _CUDA_ERROR_OUT_OF_MEMORY and pool is not None and not pool.closed:
            self._trim(pool)
            status = attempt()
        return status

    def _make_room(self, holders) -> None:
        """Room (the allocation's device current): each of ``holders``' held entries go back;
        the returns under way on other threads are waited for (up to _RETURN_WAIT_S); then
        the device finishes its work, so that every free enqueued, this thread's or
        another's, has run and its block is the pool's for any stream — a block freed in
        one stream's order is not another stream's until then: a retry at once failed
        again."""
        if isinstance(holders, _ResultPool):
            holders = [holders]
        for holder in holders:
            under_way = holder.returns_under_way()
            self._return_held(holder, holder.take())
            holder.wait_for_returns(under_way, _RETURN_WAIT_S)
        self._call("cuCtxSynchronize", what="cuCtxSynchronize (room in the pool)")

    def _trim(self, pool: _ResultPool) -> None:
        """``pool``'s idle memory back to the driver (its device current); what live
        results use stays (``cuMemPoolTrimTo``). After ``_make_room``: the frees have run."""
        trim = self._optional("cuMemPoolTrimTo")
        if trim is not None:
            self.library.check(trim(pool.handle, 0), "cuMemPoolTrimTo(0)")

    def _made_pool(self, ordinal: int) -> _ResultPool | None:
        """arrayport's pool on device ``ordinal`` if made and open, without making one."""
        pool = self._result_pools.get(self.library, {}).get(ordinal)
        return pool if pool is not None and not pool.closed else None

    def release_cached_memory(self) -> int:
        """Give back to the driver the memory arrayport's pools keep: each pool's held blocks
        returned (one synchronization of the devices that may read them), their frees run
        (a synchronization of the pool's device), then the pool trimmed to nothing
        (``cuMemPoolTrimTo``): what its results still use stays. Bytes the pools reserved
        before less after (0 where the driver cannot say; approximate while other threads
        copy meanwhile). Pools never made are not made. Holds the pools' lock throughout,
        so that the driver's close cannot destroy a pool under it (copies on other threads
        that need a pool wait for it too). A device that fails (a fault, sticky in its
        context) does not keep the others' memory: each is dealt with, then the first
        error is raised."""
        released, failures = 0, []
        holder = self._ordinary_holders.get(self.library)
        if holder is not None and not holder.closed:   # memory cuMemFree releases
            try:
                with self.on_device(holder.ordinal):
                    self._make_room([holder])
            except BufferError as error:   # a faulted device: the others' memory still goes
                failures.append(error)
        with self._result_pools_lock:
            for pool in self._result_pools.get(self.library, {}).values():
                if pool is None or pool.closed:
                    continue
                try:
                    before = self._reserved(pool)
                    with self.on_device(pool.ordinal):
                        self._make_room(pool)
                        self._trim(pool)
                    released += max(before - self._reserved(pool), 0)
                except BufferError as error:
                    failures.append(error)
        if failures:
            raise failures[0]
        return released

    def _reserved(self, pool: _ResultPool) -> int:
        """The bytes ``pool`` reserves from the driver, in use or not; 0 where the driver
        cannot say."""
        ask = self._optional("cuMemPoolGetAttribute")
        value = ctypes.c_uint64(0)
        if ask is None or ask(pool.handle, _CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                              ctypes.byref(value)) != 0:
            return 0
        return value.value

    def held_results(self) -> int:
        """How many allocations arrayport keeps alive on purpose until its next return: the
        held blocks (``held_blocks``) and the distinct objects their entries keep (a dead
        result's source, which its copy may still read) — memory the driver counts as
        allocated."""
        entries = [entry for pool in list(self._pools_made) for entry in pool.entries()]
        kept = {id(item): item for _, _, keep in entries for item in keep}
        # a kept View's memory counts once per allocation, and only while the driver still
        # has it (its owner may have freed it itself)
        return len(entries) + len({start for start in map(self._allocation_start, (
            item.ptr for item in kept.values())) if start})

    def _allocation_start(self, pointer: int) -> int:
        """Where the driver allocation holding ``pointer`` starts; 0 where it knows none."""
        start = c_address(0)
        attribute = (ctypes.c_int * 1)(_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        data = (ctypes.c_void_p * 1)(ctypes.addressof(start))
        with self.on_device(0):
            status = self.library.get().cuPointerGetAttributes(1, attribute, data, pointer)
        return start.value if status == 0 else 0

    def held_blocks(self) -> int:
        """How many dead results' blocks (and other memory arrayport freed) wait to go back
        to the driver, held until one synchronization returns many."""
        return sum(pool.held() for pool in list(self._pools_made))

    def _result_pool(self, ordinal: int) -> _ResultPool | None:
        """arrayport's memory pool on device ``ordinal``, made on first use; None where the
        device or the driver has no pools, or the pool could not be made (remembered: the
        copies keep ``cuMemAlloc``)."""
        with self._result_pools_lock:
            pools = self._result_pools.setdefault(self.library, {})
            if ordinal not in pools:
                usable = self._has_memory_pools(ordinal) and all(
                    self._optional(name) is not None for name in (
                        "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolSetAttribute",
                        "cuMemAllocFromPoolAsync", "cuCtxSynchronize"))
                pools[ordinal] = self._make_result_pool(ordinal) if usable else None
            pool = pools[ordinal]
            # The core's own copies take blocks of the pool this answers, and of no other:
            # published again whenever the core holds another (none, or one of a pool
            # table a test swapped in and out: __setattr__ in gpu/cuda.py forgets them).
            if pool is not None and self._publishes_pools() and \
                    _core.published_cuda_result_pool(ordinal) is not pool:
                _core.publish_cuda_result_pool(
                    ordinal, pool, functools.partial(self._give_back_block, pool),
                    functools.partial(self._room_for_core, ordinal))
            return pool

    def _make_result_pool(self, ordinal: int) -> _ResultPool | None:
        """A pool of ordinary memory on device ``ordinal`` that keeps at most
        ``pool_keep_bytes`` mapped when idle (the rest goes back to the driver at the next
        synchronization: the release threshold), readable by every peer device that can read
        this one's memory (as ``cuMemAlloc`` memory is, once peer access is on); with the
        devices that may read its blocks. None, leaving nothing made, where the driver
        refuses a step (a vGPU or MPS setup without pools)."""
        try:
            return self._made_result_pool(ordinal)
        except BufferError:
            return None

    def _made_result_pool(self, ordinal: int) -> _ResultPool:
        props = _MemPoolProps(allocType=_CU_MEM_ALLOCATION_TYPE_PINNED,
                              handleTypes=_CU_MEM_HANDLE_TYPE_NONE,
                              location=_MemLocation(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal))
        pool = _POOL()
        device_memory = self._device_memory(ordinal)
        keeps = pool_keep_bytes(device_memory)   # a bad setting refused before anything is made
        with self.on_device(ordinal):
            self._call("cuMemPoolCreate", ctypes.byref(pool), ctypes.byref(props),
                       what=f"cuMemPoolCreate(device {ordinal})")
            try:
                peers = self._configure_result_pool(pool, ordinal, keeps)
            except BaseException:
                self._optional("cuMemPoolDestroy")(pool)
                raise
        made = _ResultPool(pool.value, (ordinal, *peers), device_memory)
        self._pools_made.add(made)
        return made

    def _device_memory(self, ordinal: int) -> int:
        """Device ``ordinal``'s memory in bytes (8 GiB where the driver does not say)."""
        total = c_size(0)
        measure = self._optional("cuDeviceTotalMem_v2")
        if measure is not None and measure(ctypes.byref(total), ordinal) == 0 and total.value:
            return total.value
        return 8 << 30

    def _configure_result_pool(self, pool, ordinal: int, keeps: int) -> list[int]:
        """The new pool's release threshold (``keeps`` bytes) and peer access; the peers
        granted it."""
        threshold = ctypes.c_uint64(keeps)
        self._call("cuMemPoolSetAttribute", pool, _CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                   ctypes.byref(threshold), what="cuMemPoolSetAttribute(release threshold)")
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
        """Destroy arrayport's pools (at the driver's close), their held blocks returned
        first: their idle blocks go back at once; a block still in use goes when it is
        freed (the driver's rule)."""
        with self._result_pools_lock:   # not while release_cached_memory works on them
            pools = self._result_pools.pop(self.library, {})
            if self._publishes_pools():
                for ordinal in pools:   # the core's copies take no block of them any more
                    _core.publish_cuda_result_pool(ordinal, None, None, None)
            for pool in pools.values():
                if pool is not None:
                    pool.closed = True   # a result dying from now on is freed at once
                    try:
                        self._return_held(pool, pool.take())
                        self._optional("cuMemPoolDestroy")(pool.handle)
                    except Exception:   # at exit: the library may be gone
                        pass

    def _close_ordinary_holder(self) -> None:
        """At the driver's close, after everything that frees memory has let it go: the
        held memory freed (after every device's work); memory dying later is freed at once
        (after the same wait)."""
        holder = self._ordinary_holders.pop(self.library, None)
        if holder is not None:
            holder.closed = True
            try:
                self._return_held(holder, holder.take())
            except Exception:   # at exit: the library may be gone
                pass
