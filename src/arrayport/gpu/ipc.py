"""CUDA device Views across processes (issue 55): ``View.share()`` of CUDA device memory
gives a ``CudaSharedHandle``; ``View.from_shared(handle)`` in another process of the same
machine gives a View of the same device memory — no byte travels, through the host or
otherwise. This module owns every rule of it (docs/processes.md says them to users); the
driver calls are the driver interface's (``gpu.interface``; CUDA's in ``gpu.cuda_ipc``):

- **What is exported**: memory arrayport allocated for sharing — a block of the device's
  sharing pool (``allocate_for_sharing``; made with POSIX file-descriptor handles: the
  descriptor route, ``gpu.ipc_pool``) — as ``cuMemPoolExportPointer``'s bytes, a
  ``"cuda-pool"`` handle; other ``cuMemAlloc`` memory as its whole allocation
  (``cuMemGetAddressRange``, then ``cuIpcGetMemHandle`` of its base), a ``"cuda-ipc"``
  handle; either way the View as an offset, layout and strides kept. Memory neither can
  export (a memory pool's block: PyTorch's and CuPy's pools made with ``cudaMallocAsync``,
  arrayport's own copies) is copied once, on the GPU, into the sharing pool (an ordinary
  allocation where the device has none) — a device-to-device copy, never through the host.
  ``arrayport.empty_shared(shape, dtype, device="cuda:0")`` makes exportable memory to fill
  in place.
- **Stream order, no host wait**: ``share()`` orders the exporter's sharing stream (one
  per device) after the work pending on the View, by the stream rules (the core's,
  ``_core_streams.pxi``: a copy's source rule), and records the process's interprocess
  event of the device there
  (``CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING``); the handle carries the event. A
  later share re-records it on the same stream, after everything the earlier one waited
  for: a receiver that waits on the latest record waits for a superset, never for less.
  The receiver opens the event, makes its own stream for received Views (one non-blocking
  stream per device) wait on it, and closes it; that stream is the received View's pending
  stream, so whoever reads the View is ordered after it by the one owner of stream order
  (``_core_streams.pxi``), on the GPU (``gpu.cuda_ipc`` makes these calls).
- **Lifetime, bounded**: the exporter keeps the View (and so its memory) while any receiver
  holds a View of it, and lets it go when the last one has, or died. Each export has a
  lease (``gpu.ipc_lease``: its format, and the rule of when an export ends); a daemon
  thread of the exporter settles its leases every ``REAP_SECONDS``. A share made for an
  engine that may open it again (pickle, Dask, Ray) lingers ``LINGER_SECONDS`` after its
  last holder; a handle nobody opens ends after ``UNOPENED_SECONDS``; ``handle.revoke()``
  stops new opens at once. A receiver maps an export once, however many Views it opens
  from it; when the last goes, its closer thread waits for every device's work so far,
  unmaps it, and only then gives its slot back. Opened in the exporting process, a handle
  gives back the exported memory itself (CUDA refuses a process its own handles). A fork's
  child owns nothing of its parent's: neither exports nor mappings.
- **Who may open it**: a CUDA IPC memory handle is a global name on a GPU machine — any
  process of the machine that reads the 64 bytes may map the memory, and sees the whole
  allocation (a caching allocator's segment holds other arrays too). A pool block's bytes
  open nothing without the pool's descriptor, which the exporter hands only to a holder of
  the export's lease (``gpu.ipc_pool``). The lease opens only through the exporter's
  descriptor (the same user, ``/proc`` access), and a receiver that cannot take a lease is
  refused before it maps anything; a receiver is trusted with the lease it opened. A
  read-only share arrives read-only; of a pool block, the driver enforces it (the receiver's
  import grants its device read access only, where the driver allows); of ``cuMemAlloc``
  memory it cannot (legacy IPC maps read-write): flagged, not enforced (docs/processes.md).
- **Where it opens**: the same machine (the handle carries the boot id; elsewhere a
  ``BufferError`` names the host route) and a device the receiver sees (found by UUID:
  ``CUDA_VISIBLE_DEVICES`` may number it differently).
"""


from __future__ import annotations

import atexit
import collections
import os
import secrets
import sys
import threading
import time
import weakref

from arrayport import _core
from arrayport.gpu import ipc_lease, ipc_pool, turns

__all__ = ["CudaSharedHandle", "share_device", "open_device", "empty_device", "reap",
           "live_exports", "kept"]

_CUDA = 2                       # DLPack's kCUDA
REAP_SECONDS = 0.05
# A share made for an engine that may open it again (a pickle loaded twice, a task retried,
# Ray's object store) lingers this long after its last holder let go.
LINGER_SECONDS = 300.0
# An export no process has opened this long ends: a handle pickled and never unpickled (an
# engine's retry, a message dropped) pins no memory for the exporter's life.
UNOPENED_SECONDS = 300.0


def _boot_id() -> str:
    """This machine, as long as it runs: a handle opens only where it was made."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as source:
            return source.read().strip()
    except OSError:
        return os.uname().nodename


class CudaSharedHandle:
    """A CUDA device View shared with other processes of this machine; picklable (a few
    hundred bytes, no device bytes). ``View.from_shared(handle)`` opens it; the exporter's
    ``handle.revoke()`` ends the export before any receiver has it."""

    __slots__ = {
        "kind": '"cuda-ipc" (a CUDA IPC memory handle: any process of the machine that '
                'reads it may map the allocation) or "cuda-pool" (a block of the exporter\'s '
                'sharing pool: it maps only through the pool\'s descriptor, which the exporter '
                'hands to a holder of the export\'s lease).',
        "memory": "The allocation's CUDA IPC memory handle, or the pool block's export data "
                  "(64 bytes).",
        "offset": "Where the View starts in the allocation, in bytes.",
        "event": "The exporter's interprocess event handle (64 bytes), recorded after the "
                 "work pending on the View.",
        "item": "The element type as DLPack's (code, bits, lanes, padded).",
        "shape": "The View's shape.",
        "strides": "Byte strides.",
        "readonly": "Whether receivers get a read-only View (for \"cuda-pool\", read-only in "
                    "the driver too while every share a receiver opened from that pool is "
                    "read-only; for \"cuda-ipc\", flagged only).",
        "device": "The device's UUID (16 bytes).",
        "machine": "The exporter's machine (its boot id).",
        "pid": "The exporting process.",
        "lease": "The exporter's descriptor of the export's lease.",
        "token": "The export, in the exporter's registry.",
        "socket": 'Where the exporter hands out its sharing pool\'s descriptor ("cuda-pool"; '
                  '"" for "cuda-ipc").',
        "pool": 'The exporter\'s sharing pool, by its serial there ("cuda-pool"; 0 for '
                '"cuda-ipc").',
    }

    def __init__(self, kind, memory, offset, event, item, shape, strides, readonly, device,
                 machine, pid, lease, token, socket="", pool=0):
        self.kind, self.memory, self.offset, self.event = kind, memory, offset, event
        self.item, self.shape, self.strides, self.readonly = item, shape, strides, readonly
        self.device, self.machine, self.pid, self.lease = device, machine, pid, lease
        self.token, self.socket, self.pool = token, socket, pool

    def __reduce__(self):
        return (CudaSharedHandle, self.fields())

    def fields(self) -> tuple:
        """The handle's fields, in order: bytes, ints, strings and tuples (what a Dask
        header carries)."""
        return tuple(getattr(self, name) for name in self.__slots__)

    @classmethod
    def from_fields(cls, fields) -> "CudaSharedHandle":
        """The handle ``fields()`` described, its sequences tuples again (a msgpack header
        makes them lists); ``View.from_shared`` checks every field."""
        if not isinstance(fields, (list, tuple)) or len(fields) != len(cls.__slots__):
            raise ValueError("from_shared: not the fields of a CUDA shared handle")
        values = [tuple(value) if isinstance(value, list) else value for value in fields]
        return cls(*values)

    @property
    def nbytes(self) -> int:
        """The bytes of the View's elements (shape times item size), as the host handle's
        ``nbytes`` counts them."""
        return _core.layout_nbytes(self.shape, tuple(self.item), "share")

    def __repr__(self):
        return (f"<arrayport.CudaSharedHandle {list(self.shape)} from process {self.pid}"
                f"{' readonly' if self.readonly else ''}>")

    def revoke(self) -> None:
        """No process opens this export any more (the exporting process only; idempotent);
        receivers that opened it keep their Views, and the exporter keeps the memory until
        the last of them lets go."""
        if self.pid != os.getpid():
            raise BufferError("share: only the exporting process revokes a handle")
        with _exports_lock:
            export = _exports.get(self.token)
        if export is not None:
            export.revoke()
            if export.lease.settle(0.0, 0.0):   # no holder: ended now (else by the reaper)
                with _exports_lock:
                    _exports.pop(self.token, None)
                export.end()


# ---- the exporter ---------------------------------------------------------------------------

class _Export:
    """One share(): the View kept alive for receivers, the allocation exported, its lease."""

    __slots__ = ("view", "base", "size", "linger", "lease", "revoked", "handle", "kind")

    def __init__(self, view, base: int, size: int, linger: float, token: str, kind: str):
        self.view, self.base, self.size, self.linger = view, base, size, linger
        self.kind = kind
        self.lease = ipc_lease.Lease(bytes.fromhex(token))
        self.revoked = False
        self.handle: CudaSharedHandle | None = None   # an engine's, handed out again

    def revoke(self) -> None:
        self.revoked = True
        self.lease.revoke()

    def end(self) -> None:
        self.lease.close()
        self.view = None


_exports: dict[str, _Export] = {}
_exports_lock = threading.Lock()
_reaper: threading.Thread | None = None


def kept() -> tuple[int, int]:
    """(events, streams) the CUDA driver keeps for sharing, for reuse until it closes: an
    interprocess event and a sharing stream per device exported from, a receiving stream
    per device received on (``gpu.cuda_ipc``)."""
    from arrayport.gpu import cuda
    return cuda.driver.sharing_kept()


def live_exports() -> int:
    """Exports this process still keeps for receivers."""
    with _exports_lock:
        return len(_exports)


def reap(linger: float | None = None, unopened_after: float | None = None) -> int:
    """Settle every export's lease and end those that ended (``gpu.ipc_lease``: no live
    holder, after the export's linger; never opened, after ``UNOPENED_SECONDS``); the number
    ended. ``linger``/``unopened_after``: other limits, this once (0: end every export no
    live process holds). The exporter's daemon thread calls it every ``REAP_SECONDS``."""
    unopened = UNOPENED_SECONDS if unopened_after is None else unopened_after
    with _exports_lock:
        exports = list(_exports.items())
    ended = []
    for token, export in exports:
        try:
            if export.lease.settle(export.linger if linger is None else linger, unopened):
                ended.append(token)
        except (OSError, BufferError):   # an altered lease: its export is kept, looked at again
            continue
    with _exports_lock:
        gone = [_exports[token] for token in ended if token in _exports]
    for export in gone:      # ended (their memory given back) before they leave the registry:
        export.end()         # an export counted live until then (``live_exports``)
    with _exports_lock:
        gone = [_exports.pop(token) for token in ended if token in _exports]
        for key in [key for key, token in _engine_exports.items() if token in ended]:
            del _engine_exports[key]
    return len(gone)


def _reap_forever() -> None:
    while not sys.is_finalizing():
        time.sleep(REAP_SECONDS)
        try:
            reap()
        except Exception:   # a lease that could not be read this time: looked at again
            pass


_threads_lock = threading.Lock()   # one reaper, one closer


def _start_reaper() -> None:
    """The reaper thread, and the reap at exit — registered now, after the driver's close
    (made before any export), so that it runs before the driver closes."""
    global _reaper
    with _threads_lock:
        if _reaper is None or not _reaper.is_alive():
            if _reaper is None:
                atexit.register(_end_unheld_exports)
            _reaper = threading.Thread(target=_reap_forever, name="arrayport-ipc-reaper",
                                       daemon=True)
            _reaper.start()


def _end_unheld_exports() -> None:
    """At exit: every export no live process holds (never opened, or lingering) ends while
    the driver is still open, its memory given back; those a receiver holds go with this
    process (CUDA frees its memory at its end)."""
    try:
        reap(0.0, 0.0)
    except Exception:   # the driver gone already: its memory went with it
        pass


# The blocks of the sharing pools alive in this process, made by ``allocate_for_sharing``:
# (device, address) -> (bytes, the pool's serial). Only these are exported by the descriptor
# route: a block of another library's exportable pool is not arrayport's to hand a
# descriptor of. Made and registered under the lock under which idle pools are destroyed.
_sharing_blocks: dict[tuple[int, int], tuple[int, int]] = {}
_sharing_lock = threading.Lock()


def allocate_for_sharing(driver, ordinal: int, nbytes: int, stream: int):
    """``nbytes`` of device ``ordinal`` memory another process can map, in ``stream``'s
    order: a block of the device's sharing pool (the descriptor route, ``gpu.ipc_pool``), or
    an ordinary allocation (CUDA IPC) where the device has no such pool."""
    with _sharing_lock:
        made = driver.allocate_shareable(ordinal, max(nbytes, 1), stream)
        if made is None:
            return driver.allocate_device(ordinal, max(nbytes, 1))
        memory, serial = made
        key = (ordinal, memory.address)
        _sharing_blocks[key] = (memory.nbytes, serial)
    weakref.finalize(memory, _sharing_blocks.pop, key, None)
    return memory


def release_idle_pools() -> int:
    """``ap.release_device_memory()``'s part: each device's sharing pool none of whose blocks
    is alive here is destroyed (CUDA never shrinks a pool exported by descriptor; the next
    share makes a new one, and receivers import that); the bytes it reserved."""
    from arrayport.gpu import cuda
    with _sharing_lock:
        busy = {ordinal for ordinal, _ in list(_sharing_blocks)}
        return cuda.driver.drop_sharing_pools(busy)


def _export_of(driver, ordinal: int, pointer: int):
    """(kind, what opens it: 64 bytes, ``pointer``'s offset in it, its bytes, the sharing
    pool's serial or 0) for memory another process can map as it is; None for any other."""
    for (device, address), (size, serial) in list(_sharing_blocks.items()):
        if device == ordinal and address <= pointer < address + size:
            block = driver.export_pool_block(ordinal, address)
            if block is not None:
                return "cuda-pool", block, pointer - address, size, serial
    exported = driver.export_allocation(ordinal, pointer)
    return None if exported is None else ("cuda-ipc", *exported, 0)


def _exportable(driver, view, stream: int):
    """(the View to export, then ``_export_of``'s four): ``view`` itself where its memory
    can be mapped by another process as it is, else a copy of it into memory that can (a
    block of the sharing pool where the device has one), made on ``stream`` on the GPU."""
    ordinal = view.device.id
    exported = _export_of(driver, ordinal, view.ptr)
    if exported is not None:
        return (view, *exported)
    source = view if view.is_c_contiguous else view.copy(stream=stream)
    memory = allocate_for_sharing(driver, ordinal, source.nbytes, stream)
    if source.nbytes:
        driver.copy_async(ordinal, memory.address, source.ptr, source.nbytes, stream)
    copy = _core.view_from_pointer(memory.address, source.shape, None, source.dtype,
                                   readonly=False, owner=(memory, source),
                                   device=(_CUDA, ordinal), protocol="shared")
    exported = _export_of(driver, ordinal, memory.address)
    if exported is None:
        raise BufferError("share: the driver cannot export the memory it allocated")
    return (copy, *exported)


def empty_device(shape, dtype, ordinal: int, nbytes: int):
    """``empty_shared(..., device="cuda:N")``: memory ``share()`` exports as it is (see
    ``allocate_for_sharing``), allocated in the sharing stream's order (the View's pending
    stream: its first readers and writers are ordered after the allocation)."""
    from arrayport.gpu import cuda
    driver = cuda.driver
    sharing = driver.sharing_stream(ordinal)
    memory = allocate_for_sharing(driver, ordinal, nbytes, sharing)
    view = _core.view_from_pointer(memory.address, shape, None, dtype, readonly=False,
                                   owner=memory, device=(_CUDA, ordinal), protocol="shared")
    _core.set_pending_stream(view, sharing)
    return view


def _descriptor_for(token: str, pid: int) -> tuple[int, int]:
    """(the sharing pool's descriptor, its serial) for process ``pid``, asking for export
    ``token`` (the descriptor server's question, ``gpu.ipc_pool``): only for an open export
    of a pool block that ``pid`` holds a lease of."""
    from arrayport.gpu import cuda
    with _exports_lock:
        export = _exports.get(token)
    view = export.view if export is not None else None
    if view is None or export.revoked or export.kind != "cuda-pool":
        raise BufferError("ended that export, or never made it")
    if not export.lease.held_by(pid):
        # the server says why it refused ("refused: …")
        raise BufferError(f"process {pid} holds no lease of that export")
    return cuda.driver.pool_descriptor(view.device.id)   # a duplicate: the server closes it


# Exports made for engines (lingering), by what they export: the same View sent again reuses
# its export while it is open — no new lease (a descriptor each), no new copy. Only exports
# of the View's own memory (no copy: a copy would hold the values of its own time); keyed by
# the address, which stays the View's while its export keeps the View alive.
_engine_exports: dict[tuple, str] = {}


def _reused(view, readonly: bool) -> CudaSharedHandle | None:
    """The open engine export of ``view`` as it is, handed out again; None if none."""
    key = (view.device.id, view.ptr, view.shape, view.strides, str(view.dtype), readonly)
    with _exports_lock:
        token = _engine_exports.get(key)
        export = _exports.get(token) if token is not None else None
        if export is None or export.revoked or export.handle is None:
            _engine_exports.pop(key, None)
            return None
    if not export.lease.refresh():          # ended meanwhile: a new export
        return None
    return export.handle


def share_device(view, readonly=None, linger: float = 0.0) -> CudaSharedHandle:
    """``View.share()`` of device memory (see the module docstring). ``linger``: seconds
    the export outlives its last holder (``LINGER_SECONDS`` for an engine that may open the
    same handle again)."""
    from arrayport.gpu import driver_for
    driver = driver_for(view.device.type)
    if driver is None:
        raise BufferError(f"share: {view.device} memory cannot be shared with other processes "
                          f"(CUDA device memory can; host memory through a segment); share a "
                          f"host copy: view.copy(device='cpu').share()")
    readonly = view.readonly if readonly is None else bool(readonly)
    if view.readonly and not readonly:
        raise ValueError("share: the View is read-only; its handles are read-only too")
    ordinal = view.device.id
    uuid = driver.device_uuid(ordinal)          # a vendor without sharing refuses here
    with driver.on_device(ordinal):   # current once for every call below (each then asks)
        return _export(driver, view, ordinal, uuid, readonly, linger)


def _export(driver, view, ordinal: int, uuid: bytes, readonly: bool,
            linger: float) -> CudaSharedHandle:
    """``share_device``'s work, with device ``ordinal`` current."""
    if linger:
        again = _reused(view, readonly)
        if again is not None:                   # the same memory: only the order is new
            sharing = driver.sharing_stream(ordinal)
            _core.order_copy_after_source(driver, view, ordinal, sharing)
            driver.record_interprocess_event(ordinal, sharing)
            return again
    # The sharing stream after the work pending on the View (the stream rules: the core's);
    # a copy, where one is needed, made there; then the event recorded there.
    sharing = driver.sharing_stream(ordinal)
    _core.order_copy_after_source(driver, view, ordinal, sharing)
    exported, kind, memory, offset, size, pool = _exportable(driver, view, sharing)
    if exported is not view:                   # later writes to the View wait for the copy
        _core.order_writers_after_copy(driver, view, ordinal, sharing)
    event = driver.record_interprocess_event(ordinal, sharing)
    dtype = exported.dtype
    token = secrets.token_hex(16)
    export = _Export(exported, exported.ptr - offset, size, linger, token, kind)
    server = ipc_pool.serve(_descriptor_for) if kind == "cuda-pool" else ""
    handle = CudaSharedHandle(kind, memory, offset, event,
                              (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded),
                              exported.shape, exported.strides, readonly, uuid, _boot_id(),
                              os.getpid(), export.lease.descriptor, token, server, pool)
    with _exports_lock:
        _exports[token] = export
        if linger and exported is view:
            export.handle = handle
            _engine_exports[(ordinal, view.ptr, view.shape, view.strides, str(view.dtype),
                             readonly)] = token
    _start_reaper()
    return handle


# ---- the receiver ---------------------------------------------------------------------------

class _Mapping:
    """This process's mapping of some memory: the owner of every View opened from it. When
    the last of them goes, the closer thread unmaps it after every device's work so far
    (work still queued may read it; a mapping closed under it is undefined behaviour) and
    gives its leases back: the weakref callback that notices never waits on the host. (A
    callback, not ``__del__``: a weak reference still answers during ``__del__``, and an
    open on another thread could take the mapping back then.)"""

    __slots__ = ("pointer", "ordinal", "leases", "size", "__weakref__")

    def __init__(self, pointer: int, ordinal: int, size: int):
        self.pointer, self.ordinal, self.size = pointer, ordinal, size
        self.leases: dict[str, tuple[int, int]] = {}   # the exports it was opened for


def _register(mapping: _Mapping, key: tuple, pool: tuple | None) -> None:
    """``mapping`` known under ``key`` (caller holds ``_mappings_lock``); an event, unset
    until it is unmapped, under the same key from now on (``_closed_events``), so that an
    open of the same memory after its last View went waits for the unmapping; the close
    queued when it goes (``pool``: a pool block's import, ``gpu.ipc_pool``, or None: CUDA
    IPC)."""
    closed = _closed_events[key] = threading.Event()
    _mappings[key] = mapping
    weakref.finalize(mapping, _mapping_gone, mapping.pointer, mapping.ordinal, mapping.leases,
                     pool, key, closed, os.getpid())


def _mapping_gone(pointer, ordinal, leases, pool, key, closed, pid) -> None:
    if pid != os.getpid():   # a fork's child: the parent's mapping, not its own
        return
    _closing.append((pointer, ordinal, tuple(leases.values()), pool, key, closed))
    with _closer_wakes:
        _closer_wakes.notify()


# Mappings whose last View went: (pointer, device, leases, a pool block's import or None, its
# key, the event set once it is closed), closed by the closer thread. A deque: a finalizer
# appends without a lock it could re-enter. A new open of memory whose mapping waits to be
# closed waits for that (CUDA imports a pool block once per process): ``_closed_events``.
_closing: "collections.deque[tuple]" = collections.deque()
_retry: "collections.deque[tuple]" = collections.deque()   # could not be closed yet
_closer_wakes = threading.Condition()
_closer: threading.Thread | None = None
_mappings: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_mappings_lock = threading.Lock()
_closed_events: dict[tuple, threading.Event] = {}
_turns = turns.Turns()          # the keys being mapped, each by one thread
_CLOSE_WAIT_SECONDS = 30.0


def _close_mappings() -> int:
    """Unmap every mapping waiting to be, after every device's work so far, and give its
    lease back; the number closed. A mapping that cannot be unmapped (a device whose work
    faulted, the driver gone at exit) keeps its lease: this process's end gives it back."""
    from arrayport.gpu import cuda
    waiting = []
    while _closing:
        waiting.append(_closing.popleft())
    if not waiting:
        return 0
    driver = cuda.driver
    at_work, settled = set(driver.devices_at_work()), set()
    for ordinal in at_work:
        try:
            driver.synchronize_device(ordinal)
            settled.add(ordinal)
        except Exception:
            pass
    closed = 0
    for item in waiting:
        pointer, ordinal, leases, pool, key, closed_event = item
        try:
            if settled != at_work:   # work that may read it could not be waited for
                raise BufferError("a device's work could not be waited for")
            if pool is not None:     # freed here before its exporter frees it (CUDA's rule)
                driver.free_imported(ordinal, pointer)
            else:
                driver.close_allocation(ordinal, pointer)
        except Exception:
            _retry.append(item)      # looked at again later; its leases kept meanwhile
            continue
        try:                         # unmapped: whatever fails next, the rest goes on
            if pool is not None:
                ipc_pool.release_pool(driver, pool)
        except Exception:
            pass
        for lease in leases:
            ipc_lease.give_back(*lease)   # never raises (its errors are the lease's end)
        with _mappings_lock:
            if _closed_events.get(key) is closed_event:
                del _closed_events[key]
        closed_event.set()
        closed += 1
    return closed


def _close_forever() -> None:
    while not sys.is_finalizing():
        with _closer_wakes:
            # mappings to close; those that could not be closed, again after a second
            _closer_wakes.wait_for(lambda: bool(_closing), timeout=1.0 if _retry else None)
        while _retry:
            _closing.append(_retry.popleft())
        try:
            _close_mappings()
        except Exception:   # the driver gone (at exit): this process's end frees its leases
            pass


def _start_closer() -> None:
    """The closer thread, and the close at exit — registered now, after the driver's own
    (made before any mapping), so that it runs before the driver closes."""
    global _closer
    with _threads_lock:
        if _closer is None or not _closer.is_alive():
            if _closer is None:
                atexit.register(_close_mappings)
            _closer = threading.Thread(target=_close_forever, name="arrayport-ipc-closer",
                                       daemon=True)
            _closer.start()


def _forget_after_fork() -> None:
    """A fork's child: nothing of its parent's sharing is its own (and no lock a parent's
    thread held is held)."""
    global _reaper, _closer, _exports_lock, _mappings_lock, _sharing_lock, _threads_lock
    _exports_lock, _mappings_lock = threading.Lock(), threading.Lock()
    _sharing_lock, _threads_lock = threading.Lock(), threading.Lock()
    _exports.clear()
    _engine_exports.clear()
    _sharing_blocks.clear()
    _closing.clear()
    _retry.clear()
    _turns.clear()
    _closed_events.clear()
    _mappings.clear()
    _reaper = None
    _closer = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _check(handle) -> None:
    if not isinstance(handle, CudaSharedHandle) or handle.kind not in ("cuda-ipc", "cuda-pool"):
        raise TypeError(f"from_shared: expected a CUDA shared handle, got "
                        f"{type(handle).__name__}")
    if type(handle.pool) is not int or handle.pool < 0 or \
            (handle.kind == "cuda-pool") != (handle.pool > 0):
        raise ValueError(f"from_shared: a CUDA handle's pool must be the exporter's sharing "
                         f"pool (an int > 0, a \"cuda-pool\" handle's only), got "
                         f"{handle.pool!r:.40}")
    if type(handle.socket) is not str or len(handle.socket) > 64 or \
            (handle.kind == "cuda-pool") != bool(handle.socket) or \
            any(not (c.isascii() and (c.isalnum() or c == "-")) for c in handle.socket):
        raise ValueError(f"from_shared: a CUDA handle's socket must name the exporter's "
                         f"descriptor server (a \"cuda-pool\" handle's only), got "
                         f"{handle.socket!r:.40}")
    for name, kind in (("memory", bytes), ("event", bytes), ("device", bytes)):
        value = getattr(handle, name)
        if type(value) is not kind or len(value) != (16 if name == "device" else 64):
            raise ValueError(f"from_shared: a CUDA handle's {name} must be "
                             f"{16 if name == 'device' else 64} bytes, got {value!r:.40}")
    for name in ("offset", "pid", "lease"):
        value = getattr(handle, name)
        if type(value) is not int or value < 0:
            raise ValueError(f"from_shared: a CUDA handle's {name} must be an int >= 0, got "
                             f"{value!r}")
    if type(handle.readonly) is not bool:
        raise ValueError(f"from_shared: readonly must be a bool, got {handle.readonly!r}")
    item, shape, strides = handle.item, handle.shape, handle.strides
    if (type(item) is not tuple or len(item) != 4 or any(type(x) is not int for x in item[:3])
            or type(item[3]) is not bool):
        raise ValueError(f"from_shared: item must be DLPack's (code, bits, lanes, padded), "
                         f"got {item!r}")
    for name, value in (("shape", shape), ("strides", strides)):
        if type(value) is not tuple or any(type(x) is not int for x in value):
            raise ValueError(f"from_shared: {name} must be a tuple of ints, got {value!r}")
    if len(strides) != len(shape) or any(extent < 0 for extent in shape):
        raise ValueError(f"from_shared: strides {strides!r} do not fit shape {shape!r}")
    if type(handle.machine) is not str:
        raise ValueError("from_shared: a CUDA handle's machine must be a str")
    if type(handle.token) is not str or len(handle.token) != 32 or \
            any(c not in "0123456789abcdef" for c in handle.token):
        raise ValueError("from_shared: a CUDA handle's token must be 32 hex digits")


def _within(handle, size: int) -> None:
    """BufferError where the handle's View reaches outside the ``size`` bytes of its
    allocation (a handle that lies: never a read outside it)."""
    first, end = _span(handle)
    if first < 0 or end > size:
        raise BufferError(f"from_shared: the handle's View reaches bytes [{first}, {end}) of "
                          f"an allocation of {size}")


def _span(handle) -> tuple[int, int]:
    """The bytes [first, end) of the allocation the handle's View reaches (end == first for
    an empty View)."""
    if 0 in handle.shape:
        return handle.offset, handle.offset
    itemsize = _dtype(handle.item).itemsize or 1
    first = handle.offset + sum(min(0, (n - 1) * stride)
                                for n, stride in zip(handle.shape, handle.strides))
    end = handle.offset + itemsize + sum(max(0, (n - 1) * stride)
                                         for n, stride in zip(handle.shape, handle.strides))
    return first, end


def _ordinal_of(driver, uuid: bytes) -> int:
    for ordinal in range(driver.device_count()):
        if driver.device_uuid(ordinal) == uuid:
            return ordinal
    raise BufferError("from_shared: the handle's GPU is not visible to this process "
                      "(CUDA_VISIBLE_DEVICES?)")


def open_device(handle):
    """``View.from_shared`` of a ``CudaSharedHandle`` (see the module docstring)."""
    from arrayport.gpu import cuda
    _check(handle)
    if handle.machine != _boot_id():
        raise BufferError("from_shared: this CUDA handle was made on another machine; device "
                          "memory is shared only on one machine — send host memory instead "
                          "(view.copy(device='cpu').share(), or pickle under "
                          "arrayport.device_pickling('host'))")
    dtype = _dtype(handle.item)
    if handle.pid == os.getpid():                  # CUDA refuses a process its own handles
        with _exports_lock:
            export = _exports.get(handle.token)
        source = None if export is None or export.revoked else export.view
        if source is None:
            raise BufferError("from_shared: this process ended that export")
        _within(handle, export.size)
        export.lease.last_held = time.monotonic()  # opened again: it lingers from now
        return _core.view_from_pointer(export.base + handle.offset, handle.shape,
                                       handle.strides, dtype, readonly=handle.readonly,
                                       owner=source, device=(_CUDA, source.device.id),
                                       protocol="shared")
    driver = cuda.driver
    ordinal = _ordinal_of(driver, handle.device)
    # One mapping per export of CUDA IPC memory (CUDA counts the opens); one per pool block,
    # whichever exports name it (a block is imported once in a process), with a lease of
    # each of them.
    key = ((handle.pid, handle.socket, handle.pool, handle.memory)
           if handle.kind == "cuda-pool" else (handle.pid, handle.token))
    with driver.on_device(ordinal):   # current once for every call below (each then asks)
        mapping = _mapping_for(driver, handle, ordinal, key)
        _within(handle, mapping.size)
        stream = driver.wait_for_exporter(ordinal, handle.event)
    received = _core.view_from_pointer(mapping.pointer + handle.offset, handle.shape,
                                       handle.strides, dtype, readonly=handle.readonly,
                                       owner=mapping, device=(_CUDA, ordinal), protocol="shared")
    _core.set_pending_stream(received, stream)
    return received


def _mapping_for(driver, handle, ordinal: int, key: tuple) -> _Mapping:
    """This process's mapping of the memory ``handle`` names (``key``), with a lease of the
    handle's export: the live one, or a new one — after the unmapping of the last one, where
    that is under way. The slow work (taking a lease: a ``flock`` another process may hold;
    mapping: a descriptor asked of the exporter, driver calls) is done by one thread per
    key, without ``_mappings_lock`` (``gpu.turns``): a slow exporter holds up no open of
    other memory."""
    while True:
        try:
            with _mappings_lock:
                mapping = _mappings.get(key)
                if mapping is not None and handle.token in mapping.leases:
                    return mapping
                closing = _closed_events.get(key) if mapping is None else None
                if closing is not None and not closing.is_set():
                    turn = None
                else:
                    turn, closing = _turns.take(key), None
            if closing is not None:
                if not closing.wait(_CLOSE_WAIT_SECONDS):
                    raise BufferError("from_shared: this process's last mapping of that "
                                      "memory could not be closed (a device's work could not "
                                      "be waited for)")
            elif turn is not None:
                turn.wait()
            else:
                return _lease_and_map(driver, handle, ordinal, key, mapping)
        finally:
            with _mappings_lock:
                _turns.end_mine(key)


def _lease_and_map(driver, handle, ordinal: int, key: tuple, mapping) -> _Mapping:
    """``_mapping_for``'s turn for ``key``: a lease of the handle's export, added to
    ``mapping`` (live) or to a new mapping of the memory, registered under ``key``."""
    lease = ipc_lease.take(handle.pid, handle.lease, bytes.fromhex(handle.token))
    fresh = mapping is None
    try:
        if fresh:
            mapping, pool = _map(driver, handle, ordinal)
    except BaseException:
        ipc_lease.give_back(*lease)
        raise
    with _mappings_lock:
        mapping.leases[handle.token] = lease
        if fresh:
            _register(mapping, key, pool)
    _start_closer()
    return mapping


def _map(driver, handle, ordinal: int) -> tuple[_Mapping, tuple | None]:
    """The memory ``handle`` names, mapped here on device ``ordinal`` (not registered, no
    lease yet): a pool block imported from its exporter's pool (``gpu.ipc_pool``; with the
    import's key), or a CUDA IPC allocation (None)."""
    if handle.kind != "cuda-pool":
        pointer, size = driver.open_allocation(ordinal, handle.memory)
        return _Mapping(pointer, ordinal, size), None
    pool_key, pool, _ = ipc_pool.acquire_pool(driver, handle.socket, handle.pool, handle.pid,
                                              handle.token, ordinal, handle.readonly)
    try:
        pointer = driver.import_pool_block(ordinal, pool, handle.memory)
    except BaseException:
        ipc_pool.release_pool(driver, pool_key)
        raise
    try:
        return _Mapping(pointer, ordinal, driver.allocation_bytes(ordinal, pointer)), pool_key
    except BaseException:
        driver.free_imported(ordinal, pointer)
        ipc_pool.release_pool(driver, pool_key)
        raise


def _dtype(item):
    from arrayport.dtypes import DType
    code, bits, lanes, padded = item
    try:
        return DType(code, bits, lanes, padded=padded)
    except (ValueError, TypeError, OverflowError) as error:
        raise ValueError(f"from_shared: the handle's type is not a DLPack type: {error}") \
            from None
