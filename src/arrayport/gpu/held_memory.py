"""arrayport's device-memory policy, for every GPU vendor: which memory a copy takes, when a
block whose last View has gone is *held* and when held memory goes back, how an allocation
refused for want of memory makes room, what ``ap.release_device_memory()`` gives back.

It decides; the driver's memory floor (``gpu.interface.MemoryFloor``: CUDA's in
``gpu.cuda_memory``, the shared calls in ``gpu.vendor``) only states vendor facts and makes
single driver calls. This module names no vendor and makes no driver call of its own:
tests/test_architecture.py holds it to the floor's interface. Each driver has one
``DeviceMemory`` (``driver.memory``), behind the ``allocate_*`` and
``release_cached_memory`` calls of ``gpu.interface.GpuDriver``.

Why memory is held. A vendor's ordinary frees may not wait for work still using the memory
(CUDA: ``cuMemFree`` "may" synchronize, ``cuMemFreeHost`` promises nothing, and a pooled
block freed either way "will not perform any implicit synchronization"; HIP's frees
document a device synchronization: ``floor.frees_wait_for_work()``). So where they do not
wait, no memory is freed on the belief that the free waits: each free is ordered after the
work that may use the memory — by the stream it is freed on, or by a synchronization of
every device that may read it.

Two kinds of memory, two promises (docs/devices.md, "Copies"):
- a copy's *staging* (``allocate_temporary``): only the copy's own stream touches it, so it
  is allocated and freed in that stream's order, from arrayport's pool on the device (else
  the device's default pool) — no host wait, and the next copy on the stream reuses the
  block;
- a copy's *result* (``allocate_result``): handed to consumers on streams arrayport never
  sees, and outliving the stream it was made on. Allocated in the copy stream's order from
  arrayport's own pool on the device (its blocks stay mapped up to a release threshold, so a
  steady stream of copies costs no ordinary allocation or free). A block goes back to the
  pool only after all work of every device that may read it (its own, and the peers the
  pool grants access) has finished — the wait an ordinary free makes — so no consumer's
  pending kernel can read a block the pool has given to someone else. That wait is paid
  once for many blocks: when a result's last View goes, its block is held (the host does
  not wait); when the blocks held reach a budget (``HELD_FRACTION`` of the device's
  memory), or an allocation from the pool fails for want of memory, or the driver closes,
  one synchronization of those devices returns every held block to the pool. Where no pool
  can be made (a setup without pools), results are ordinary allocations.

Ordinary memory (results without a pool, staging on another device's stream), managed
memory and pinned memory (results, the pinned ring) is held the same way when its last View
goes, beside the pools' blocks: any device may read it (peer access, portable pinned
memory), so its free comes after one synchronization of every device at work, paid once for
many. What a dead result's copy read (its source, when GPU memory) is kept alive until then
too: the transfer may not have run.

Every allocation asks for room the same way (``with_room``, the one place owning the rule):
refused for want of memory, the memory held goes back and the device finishes its work,
then arrayport's pool is trimmed, trying again after each step.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import threading
import time
import weakref

from arrayport.gpu.library import OwnedMemory

__all__ = ["DeviceMemory", "ResultPool", "pool_keep_bytes"]

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
# The budget of the holder of ordinary memory (page-locked host memory among it, which the
# device's size says nothing of).
_ORDINARY_HELD_BYTES = 64 << 20
# How long an allocation refused for want of memory waits for another thread's return of
# held blocks (its wait for the devices' work, then its frees) before failing as it is.
_RETURN_WAIT_S = 10.0


def pool_keep_bytes(device_memory: int) -> int:
    """The release threshold of arrayport's pool on a device of ``device_memory`` bytes:
    ARRAYPORT_POOL_KEEP_BYTES where set (bytes, 0 to 2**64 - 1), else min(256 MiB, an
    eighth). A setting that is not such a number is a ValueError, asked before any pool is
    made (``DeviceMemory.result_pool``)."""
    setting = os.environ.get(POOL_KEEP_VARIABLE, "").strip()
    if setting:
        value = int(setting) if setting.isdigit() else -1   # ASCII digits only
        if not 0 <= value < 2**64:
            raise ValueError(f"{POOL_KEEP_VARIABLE} must be a number of bytes from 0 to "
                             f"2**64 - 1, not {setting!r}")
        return value
    return min(POOL_KEEP_BYTES, device_memory // _POOL_KEEPS_FRACTION)


class ResultPool:
    """arrayport's pool on one device: its handle, the devices that may read its blocks
    (its own first), the device's memory, and the blocks whose last View has gone but
    that have not gone back to the pool yet (see the module). With no handle (``None``):
    the holder of memory freed by the driver's ordinary frees, whose readers are every
    device.

    A held entry is (address, free, keep): ``free`` None for a pool block (it goes back in
    the device's stream order), else the call that frees it; ``keep``, what stays alive
    until then (a dead result's source, which its copy may still be reading).

    ``hold`` runs in a finalizer — inside a garbage collection, on any thread, maybe while
    this thread is in ``hold`` or ``take`` already — so it takes no lock: the held blocks
    are a deque, whose append and popleft are atomic, and each block is popped by exactly
    one ``take``. The byte count only paces the returns: a race may make one come a little
    early or late, never return a block twice or lose one."""

    __slots__ = ("handle", "readers", "device_memory", "closed", "_held", "_held_bytes",
                 "_returning", "__weakref__")

    def __init__(self, handle: int | None, readers: tuple[int, ...], device_memory: int):
        self.handle, self.readers, self.device_memory = handle, readers, device_memory
        self.closed = False   # destroyed with the driver: a block dying later goes at once
        self._held: collections.deque[tuple] = collections.deque()
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
        """Every held entry, no longer held (the caller returns them: ``return_held``)."""
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


class DeviceMemory:
    """One driver's device memory as arrayport's copies use it (see the module), over that
    driver's memory floor (``floor``: a ``gpu.interface.MemoryFloor``)."""

    def __init__(self, floor):
        self.floor = floor
        # Per floor key (tests swap the driver's library for stand-ins): {ordinal:
        # arrayport's pool, or None where it has none}; the holder of ordinary memory.
        self._result_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._result_pools_lock = threading.Lock()
        # Every pool made, closed ones too (tests swap the table above): what is held
        self._pools_made: weakref.WeakSet = weakref.WeakSet()
        self._ordinary_holders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __setattr__(self, name, value) -> None:
        object.__setattr__(self, name, value)
        if name == "_result_pools" and "floor" in vars(self):   # a test's own pool table:
            self._forget_published()                             # published anew on use

    def __delattr__(self, name) -> None:
        object.__delattr__(self, name)
        if name == "_result_pools":
            self._forget_published()

    def _forget_published(self) -> None:
        """The core's own copies take no pool, nor ordinary results, published so far."""
        self.floor.publish_pool(-1, None, None, None)
        self.floor.publish_ordinary_results(-1, None, False)

    # ---- what the driver's interface hands out ------------------------------------------

    def allocate_temporary(self, ordinal: int, nbytes: int, stream: int) -> OwnedMemory:
        """``nbytes`` of device memory that only work on ``stream`` (of device ``ordinal``)
        will touch — a copy's staging — allocated and freed in that stream's order: no host
        wait either way, and a block freed on the stream is reused by its next allocation.
        From arrayport's pool on the device where there is one (its release threshold keeps
        the block mapped across synchronizations, where the default pool gives it back at
        each), else the device's default pool. The free is enqueued when the returned memory
        goes, which must be while ``stream`` still exists (the caller's call). Devices
        without memory pools, and a stream of another device: an ordinary allocation
        (``allocate_device``)."""
        floor = self.floor
        if not (floor.has_memory_pools(ordinal) and floor.stream_is_on(stream, ordinal)):
            return self.allocate_device(ordinal, nbytes)
        pool = self.result_pool(ordinal)
        handle = pool.handle if pool is not None else None
        address = self._allocated(ordinal, nbytes, lambda: floor.allocate_in_stream_order(
            ordinal, handle, nbytes, stream))

        def release(pointer: int, keep=(), keep_bytes=0) -> None:
            floor.free_in_stream_order(ordinal, pointer, stream)
        return OwnedMemory(address, nbytes, release)

    def allocate_result(self, ordinal: int, nbytes: int, stream: int) -> OwnedMemory:
        """``nbytes`` of device memory for a copy's result, enqueued on ``stream`` (of device
        ``ordinal``): from arrayport's pool on that device, in ``stream``'s order, so no
        host wait; held when the last View on it goes, and back in the pool after all work
        of the devices that may read it has finished (paid once for many blocks: the module
        says when). Devices without pools, and a stream of another device: an ordinary
        allocation."""
        floor = self.floor
        pool = self.result_pool(ordinal) if floor.stream_is_on(stream, ordinal) else None
        if pool is None:
            if not floor.has_memory_pools(ordinal):   # the core's copies make them too
                floor.publish_ordinary_results(ordinal, functools.partial(
                    self._give_back_result, ordinal), floor.frees_wait_for_work())
            return self.allocate_device(ordinal, nbytes)
        address = self._allocated(ordinal, nbytes, lambda: floor.allocate_in_stream_order(
            ordinal, pool.handle, nbytes, stream), unless=lambda: pool.closed)
        if address is None:   # the driver closed meanwhile (exit)
            return self.allocate_device(ordinal, nbytes)

        def release(pointer: int, keep=(), keep_bytes=0) -> None:
            self.give_back_block(pool, pointer, nbytes, keep, keep_bytes)
        return OwnedMemory(address, nbytes, release)

    def allocate_device(self, ordinal: int, nbytes: int, managed: bool = False) -> OwnedMemory:
        """``nbytes`` of ordinary device memory on device ``ordinal`` (managed memory where
        asked), room asked for as every allocation does; when the last View on it goes,
        freed at once where the vendor's free waits for the device's work, else held and
        freed after every device's work."""
        floor = self.floor
        address = self._allocated(ordinal, nbytes, lambda: floor.allocate_ordinary(
            ordinal, nbytes, managed))
        return self._ordinary_memory(address, nbytes,
                                     functools.partial(floor.free_ordinary, ordinal))

    def allocate_shareable(self, ordinal: int, pool: int, nbytes: int,
                           stream: int) -> OwnedMemory:
        """``nbytes`` of ``pool`` (device ``ordinal``'s pool for sharing with other
        processes, ``gpu.ipc_pool``), in ``stream``'s order, room asked for as every
        allocation does; given back as ordinary memory is when its last View goes (other
        processes' work and this one's, on any stream, may read it until then: held, and
        freed after every device's work)."""
        floor = self.floor
        address = self._allocated(ordinal, nbytes, lambda: floor.allocate_in_stream_order(
            ordinal, pool, nbytes, stream))
        return self._ordinary_memory(address, nbytes, functools.partial(
            floor.free_in_stream_order, ordinal, stream=None))

    def allocate_pinned(self, nbytes: int) -> OwnedMemory:
        """``nbytes`` of page-locked host memory, portable (usable from every device); when
        the last View on it goes, freed as ordinary device memory is."""
        floor = self.floor
        address = self._allocated(None, nbytes, lambda: floor.allocate_host(nbytes))
        return self._ordinary_memory(address, nbytes, floor.free_host)

    def _allocated(self, ordinal: int | None, nbytes: int, allocate,
                   unless=None) -> int | None:
        """The address ``allocate()`` (a floor allocation: (status, address, the call made))
        gives, room asked for (``with_room``); BufferError naming the call where it is
        refused — or None where ``unless()`` then says the refusal is not to be raised."""
        answer = []

        def attempt() -> int:
            status, address, call = allocate()
            answer[:] = [address, call]
            return status
        status = self.with_room(ordinal, attempt)
        if status != 0 and unless is not None and unless():
            return None
        self.floor.check(status, answer[1])
        return answer[0]

    def _ordinary_memory(self, address: int, nbytes: int, free) -> OwnedMemory:
        """OwnedMemory for ``address``, given back by ``_ordinary_release``."""
        return OwnedMemory(address, nbytes, self._ordinary_release(free, nbytes), free)

    def _ordinary_release(self, free, nbytes: int):
        """How ordinary memory of ``nbytes``, freed by ``free(address)``, is given back when
        its last View goes: ``release(pointer, keep=(), keep_bytes=0)`` — freed at once
        where the vendor's frees wait for the work using the memory, else held and returned
        (see the module)."""
        if self.floor.frees_wait_for_work():
            return lambda pointer, keep=(), keep_bytes=0: free(pointer)
        holder = self.ordinary_holder()

        def release(pointer: int, keep=(), keep_bytes=0) -> None:
            self.return_held(holder, holder.hold(pointer, nbytes, free, keep, keep_bytes))
        return release

    def _give_back_result(self, ordinal: int, pointer: int, nbytes: int, keep=(),
                          keep_bytes: int = 0) -> None:
        """A dead result of the core's own copies, ordinary memory of device ``ordinal``
        (published by ``allocate_result``): given back as ``allocate_device``'s is — the
        core frees it itself, from C, where it was told the vendor's free is the rule."""
        free = functools.partial(self.floor.free_ordinary, ordinal)
        self._ordinary_release(free, nbytes)(pointer, keep, keep_bytes)

    def release_cached_memory(self) -> int:
        """Give back to the driver the memory arrayport keeps: the ordinary holder's held
        memory freed; each pool's held blocks returned (one synchronization of the devices
        that may read them), their frees run (a synchronization of the pool's device), then
        the pool trimmed to nothing: what its results still use stays. Bytes the pools
        reserved before less after (0 where the driver cannot say; approximate while other
        threads copy meanwhile). Pools never made are not made. Holds the pools' lock
        throughout, so that the driver's close cannot destroy a pool under it (copies on
        other threads that need a pool wait for it too). A device that fails (a fault,
        sticky in its context) does not keep the others' memory: each is dealt with, then
        the first error is raised."""
        floor = self.floor
        released, failures = 0, []
        holder = self._ordinary_holders.get(floor.memory_key)
        if holder is not None and not holder.closed:
            try:
                self.make_room([holder], holder.ordinal)
            except BufferError as error:   # a faulted device: the others' memory still goes
                failures.append(error)
        with self._result_pools_lock:
            for pool in self._result_pools.get(floor.memory_key, {}).values():
                if pool is None or pool.closed:
                    continue
                try:
                    before = floor.pool_reserved(pool.handle)
                    self.make_room([pool], pool.ordinal)
                    floor.trim_pool(pool.ordinal, pool.handle)
                    released += max(before - floor.pool_reserved(pool.handle), 0)
                except BufferError as error:
                    failures.append(error)
        if failures:
            raise failures[0]
        return released

    # ---- what is held, and its return ----------------------------------------------------

    def give_back_block(self, pool: ResultPool, pointer: int, nbytes: int, keep=(),
                        keep_bytes: int = 0) -> None:
        """A dead result's block of ``pool``: held, and returned with the others once the
        held reach their budget (see the module) — for the results made here and for the
        core's own copies, to which ``result_pool`` publishes each pool with this."""
        self.return_held(pool, pool.hold(pointer, nbytes, None, keep, keep_bytes))

    def return_held(self, pool: ResultPool, blocks: list[tuple]) -> None:
        """Return held ``blocks`` (entries of ``pool``): every device that may read them
        (the pool's own, and the peers granted access; for the ordinary holder, every device
        at work) finishes its work first — the one host wait — then each goes: a pool block
        back in its device's stream order, other memory by its own free; what they kept
        alive goes last. No blocks: nothing, no wait.

        A device whose synchronization fails (a fault, sticky in its context: its work is
        over) does not hold the others' frees back, and a free that fails does not stop the
        rest: every entry taken is dealt with, then the first error is raised. (An entry
        whose free failed went with its faulted context.)"""
        if not blocks:
            return
        floor = self.floor
        failures = []
        with pool.returning():
            readers = pool.readers if pool.handle is not None else floor.devices_at_work()
            for device in readers:
                try:
                    floor.synchronize_device(device)
                except BufferError as error:
                    failures.append(error)
            for pointer, free, _ in blocks:
                try:
                    if free is not None:
                        free(pointer)
                    else:
                        floor.free_in_stream_order(pool.ordinal, pointer, None)
                except BufferError as error:
                    failures.append(error)
        if failures:
            raise failures[0]

    def with_room(self, ordinal: int | None, attempt, status: int | None = None) -> int:
        """``attempt()``'s driver status — an allocation on device ``ordinal`` (None: pinned
        host memory); where it is refused for want of memory, tried again after each step
        that makes room: the memory arrayport holds goes back and the frees run
        (``make_room``), then arrayport's pool on the device gives its idle memory back to
        the driver (a request larger than any block the pool keeps needs memory the pool
        does not map). Host waits, on a path that was about to fail. Every allocation of
        device or pinned memory comes through here (``status``: the first attempt's, made
        already — by the core's own copies)."""
        floor = self.floor
        if status is None:
            status = attempt()
        if not floor.refused_for_memory(status):
            return status
        pool = self.made_pool(ordinal) if ordinal is not None else None
        holders = [holder for holder in (pool, self._ordinary_holders.get(floor.memory_key))
                   if holder is not None and not holder.closed]
        if holders:
            self.make_room(holders, 0 if ordinal is None else ordinal)
            status = attempt()
        if floor.refused_for_memory(status) and pool is not None and not pool.closed:
            floor.trim_pool(pool.ordinal, pool.handle)
            status = attempt()
        return status

    def make_room(self, holders, ordinal: int) -> None:
        """Room on device ``ordinal``: each of ``holders``' held entries go back; the
        returns under way on other threads are waited for (up to _RETURN_WAIT_S); then the
        device finishes its work, so that every free enqueued, this thread's or another's,
        has run and its block is the pool's for any stream — a block freed in one stream's
        order is not another stream's until then: a retry at once failed again."""
        for holder in holders:
            under_way = holder.returns_under_way()
            self.return_held(holder, holder.take())
            holder.wait_for_returns(under_way, _RETURN_WAIT_S)
        self.floor.synchronize_device(ordinal)

    def held_results(self) -> int:
        """How many allocations arrayport keeps alive on purpose until its next return: the
        held blocks (``held_blocks``) and the distinct objects their entries keep (a dead
        result's source, which its copy may still read) — memory the driver counts as
        allocated."""
        entries = [entry for pool in list(self._pools_made) for entry in pool.entries()]
        kept = {id(item): item for _, _, keep in entries for item in keep}
        # a kept View's memory counts once per allocation, and only while the driver still
        # has it (its owner may have freed it itself)
        return len(entries) + len({start for start in map(self.floor.allocation_start, (
            item.ptr for item in kept.values())) if start})

    def held_blocks(self) -> int:
        """How many dead results' blocks (and other memory arrayport freed) wait to go back
        to the driver, held until one synchronization returns many."""
        return sum(pool.held() for pool in list(self._pools_made))

    # ---- the pools and the holder --------------------------------------------------------

    def made_pool(self, ordinal: int) -> ResultPool | None:
        """arrayport's pool on device ``ordinal`` if made and open, without making one."""
        pool = self._result_pools.get(self.floor.memory_key, {}).get(ordinal)
        return pool if pool is not None and not pool.closed else None

    def result_pool(self, ordinal: int) -> ResultPool | None:
        """arrayport's memory pool on device ``ordinal``, made on first use; None where the
        device or the driver has no pools, or the pool could not be made (remembered: the
        copies keep ordinary allocations)."""
        floor = self.floor
        with self._result_pools_lock:
            pools = self._result_pools.setdefault(floor.memory_key, {})
            if ordinal not in pools:
                pools[ordinal] = self._make_result_pool(ordinal) \
                    if floor.has_memory_pools(ordinal) else None
            pool = pools[ordinal]
            # The core's own copies take blocks of the pool this answers, and of no other:
            # published again whenever the core holds another (none, or one of a pool
            # table a test swapped in and out: __setattr__ above forgets them).
            if pool is not None:
                floor.publish_pool(ordinal, pool, functools.partial(self.give_back_block, pool),
                                   functools.partial(self._room_for_core, ordinal))
            return pool

    def _room_for_core(self, ordinal: int, status: int, attempt) -> int:
        """``with_room`` for an allocation of the core's own copies on device ``ordinal``,
        whose first ``attempt`` answered ``status``: room made as for any allocation."""
        return self.with_room(ordinal, attempt, status)

    def _make_result_pool(self, ordinal: int) -> ResultPool | None:
        """A pool of ordinary memory on device ``ordinal`` that keeps at most
        ``pool_keep_bytes`` mapped when idle (the rest goes back to the driver at the next
        synchronization: the release threshold), readable by every peer device that can read
        this one's memory (as ordinary memory is, once peer access is on); with the devices
        that may read its blocks. None, leaving nothing made, where the driver refuses a
        step (a vGPU or MPS setup without pools)."""
        floor = self.floor
        device_memory = floor.device_memory(ordinal)
        keeps = pool_keep_bytes(device_memory)   # a bad setting refused before anything is made
        try:
            peers = floor.peers_reading(ordinal)
            handle = floor.create_pool(ordinal, keeps, peers)
        except BufferError:
            return None
        made = ResultPool(handle, (ordinal, *peers), device_memory)
        self._pools_made.add(made)
        return made

    def ordinary_holder(self) -> ResultPool:
        """The holder of memory the vendor's ordinary frees release (per floor key): every
        device may read it, so every device finishes its work before it goes."""
        floor = self.floor
        holder = self._ordinary_holders.get(floor.memory_key)
        if holder is None:
            with self._result_pools_lock:
                holder = self._ordinary_holders.get(floor.memory_key)
                if holder is None:
                    # every device (device 0 at least: a driver that answers has one)
                    holder = ResultPool(None, tuple(range(max(floor.device_count(), 1))),
                                        floor.device_memory(0))
                    self._ordinary_holders[floor.memory_key] = holder
                    self._pools_made.add(holder)
        return holder

    def close_pools(self) -> None:
        """Destroy arrayport's pools (at the driver's close), their held blocks returned
        first: their idle blocks go back at once; a block still in use goes when it is
        freed (the driver's rule)."""
        floor = self.floor
        floor.publish_ordinary_results(-1, None, False)   # nor ordinary results
        with self._result_pools_lock:   # not while release_cached_memory works on them
            pools = self._result_pools.pop(floor.memory_key, {})
            for ordinal in pools:   # the core's copies take no block of them any more
                floor.publish_pool(ordinal, None, None, None)
            for pool in pools.values():
                if pool is not None:
                    pool.closed = True   # a result dying from now on is freed at once
                    try:
                        self.return_held(pool, pool.take())
                        floor.destroy_pool(pool.handle)
                    except Exception:   # at exit: the library may be gone
                        pass

    def close_ordinary_holder(self) -> None:
        """At the driver's close, after everything that frees memory has let it go: the
        held memory freed (after every device's work); memory dying later is freed at once
        (after the same wait)."""
        holder = self._ordinary_holders.pop(self.floor.memory_key, None)
        if holder is not None:
            holder.closed = True
            try:
                self.return_held(holder, holder.take())
            except Exception:   # at exit: the library may be gone
                pass
