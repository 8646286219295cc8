"""CUDA device Views across processes (issue 55): ``View.share()`` of CUDA device memory
gives a ``CudaSharedHandle``; ``View.from_shared(handle)`` in another process of the same
machine gives a View of the same device memory — no byte travels, through the host or
otherwise. This module owns every rule of it (docs/processes.md says them to users); the
driver calls are the driver interface's (``gpu.interface``; CUDA's in ``gpu.cuda_ipc``):

- **What is exported**: the whole ``cuMemAlloc`` allocation the View lies in
  (``cuMemGetAddressRange``, then ``cuIpcGetMemHandle`` of its base), the View as an offset
  into it, layout and strides kept. Memory CUDA cannot export that way (a memory pool's
  block: PyTorch's and CuPy's pools made with ``cudaMallocAsync``, arrayport's own copies)
  is copied once, on the GPU, into an allocation that can be — a device-to-device copy,
  never through the host. ``arrayport.empty_shared(shape, dtype, device="cuda:0")`` makes
  exportable memory to fill in place.
- **Stream order, no host wait**: ``share()`` records this process's interprocess event
  (``CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING``, one per device, re-recorded at
  each share) on the stream with work pending on the View (the legacy stream where none is
  known), and the handle carries the event. The receiver opens the event once per exporter
  event and makes its own stream for shared memory (one non-blocking stream per device)
  wait on it; that stream is the received View's pending stream, so whoever reads the View
  is ordered after it by the one owner of stream order (``_core_streams.pxi``), on the GPU.
- **Lifetime, bounded**: the exporter keeps the View (and so its memory) while any receiver
  holds a View of it, and lets it go when the last one has, or died. Each export has a
  lease — a page in a memfd, one slot (pid, count) per receiving process, changed under
  ``flock`` — which a receiver opens through ``/proc/<exporter>/fd``; a daemon thread of the
  exporter looks at its leases every ``REAP_SECONDS`` and ends an export once it was opened
  and no live process holds it (a receiver that died without closing is found by its pid:
  ``os.kill(pid, 0)``). A handle never opened is kept ``UNOPENED_SECONDS`` (5 minutes),
  until ``handle.revoke()`` or the exporter's exit, whichever comes first. A receiver maps an allocation once, however many Views it opens from
  it (``cuIpcOpenMemHandle`` counts opens per context anyway), and closes it when the last
  View of it goes. Opened in the exporting process, a handle gives back the exported
  memory itself (CUDA refuses a process its own handles).
- **Who may open it**: a CUDA IPC memory handle is a global name on a GPU machine — any
  process of the machine that reads the 64 bytes may map the memory. The lease is not: it
  opens only through the exporter's descriptor (the same user, ``/proc`` access), and a
  receiver that cannot take a lease is refused. A read-only share is flagged in the handle
  and the received View is read-only, but the driver cannot enforce it for ``cuMemAlloc``
  memory (legacy IPC maps read-write): flagged, not enforced (docs/processes.md).
- **Where it opens**: the same machine (the handle carries the boot id; elsewhere a
  ``BufferError`` names the host route) and a device the receiver sees (found by UUID:
  ``CUDA_VISIBLE_DEVICES`` may number it differently).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import fcntl
import mmap
import os
import secrets
import struct
import sys
import threading
import time
import weakref

from arrayport import _core

__all__ = ["CudaSharedHandle", "share_device", "open_device", "reap", "live_exports", "kept"]

_CUDA = 2                       # DLPack's kCUDA
_LEGACY_STREAM = 1
REAP_SECONDS = 0.05
# An export no process has opened this long ends: a handle pickled and never unpickled (an
# engine's retry, a message dropped) pins no memory for the exporter's life.
UNOPENED_SECONDS = 300.0
_SLOTS = 128                    # receiving processes per export
_SLOT = struct.Struct("=ii")    # (pid, Views open)
_LEASE_BYTES = 8 + _SLOTS * _SLOT.size   # (ever opened, unused) then the slots


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
        "kind": 'Always "cuda-ipc".',
        "memory": "The allocation's CUDA IPC memory handle (64 bytes).",
        "offset": "Where the View starts in the allocation, in bytes.",
        "event": "The exporter's interprocess event handle (64 bytes), recorded after the "
                 "work pending on the View.",
        "item": "The element type as DLPack's (code, bits, lanes, padded).",
        "shape": "The View's shape.",
        "strides": "Byte strides.",
        "readonly": "Whether receivers get a read-only View (flagged, not enforced).",
        "device": "The device's UUID (16 bytes).",
        "machine": "The exporter's machine (its boot id).",
        "pid": "The exporting process.",
        "lease": "The exporter's descriptor of the export's lease.",
        "token": "The export, in the exporter's registry.",
    }

    def __init__(self, kind, memory, offset, event, item, shape, strides, readonly, device,
                 machine, pid, lease, token):
        self.kind, self.memory, self.offset, self.event = kind, memory, offset, event
        self.item, self.shape, self.strides, self.readonly = item, shape, strides, readonly
        self.device, self.machine, self.pid, self.lease = device, machine, pid, lease
        self.token = token

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
        """The bytes the View spans (its extent), as the host handle says."""
        return _core.layout_nbytes(self.shape, tuple(self.item), "share")

    def __repr__(self):
        return (f"<arrayport.CudaSharedHandle {list(self.shape)} from process {self.pid}"
                f"{' readonly' if self.readonly else ''}>")

    def revoke(self) -> None:
        """End this export now (the exporting process only): receivers that opened it keep
        their Views; the handle opens no more. Idempotent."""
        if self.pid != os.getpid():
            raise BufferError("share: only the exporting process revokes a handle")
        with _exports_lock:
            export = _exports.pop(self.token, None)
        if export is not None:
            export.end()


# ---- the exporter ---------------------------------------------------------------------------

class _Export:
    """One share(): the View kept alive for receivers, and its lease."""

    __slots__ = ("view", "descriptor", "base", "size", "made", "lock")

    def __init__(self, view, base: int, size: int):
        self.view, self.base, self.size = view, base, size   # the allocation exported
        self.made = time.monotonic()
        self.lock = threading.Lock()    # the descriptor is closed by end(), on any thread
        self.descriptor = os.memfd_create("arrayport-lease", os.MFD_CLOEXEC)
        os.ftruncate(self.descriptor, _LEASE_BYTES)

    def holders(self) -> tuple[bool, int]:
        """(whether any receiver ever opened it, how many live processes hold it); slots of
        processes that died are cleared. (False, 0) once ended."""
        with self.lock:
            if self.descriptor is None:
                return False, 0
            return self._holders()

    def _holders(self) -> tuple[bool, int]:
        with _locked(self.descriptor) as lease:
            opened = struct.unpack_from("=i", lease, 0)[0] != 0
            live = 0
            for slot in range(_SLOTS):
                pid, count = _SLOT.unpack_from(lease, 8 + slot * _SLOT.size)
                if pid == 0:
                    continue
                if count > 0 and _alive(pid):
                    live += 1
                else:
                    _SLOT.pack_into(lease, 8 + slot * _SLOT.size, 0, 0)
            return opened, live

    def end(self) -> None:
        with self.lock:
            if self.descriptor is not None:
                os.close(self.descriptor)
                self.descriptor = None
            self.view = None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive
        return True
    return True


_exports: dict[str, _Export] = {}
_exports_lock = threading.Lock()
_reaper: threading.Thread | None = None


def kept() -> tuple[int, int]:
    """(events, streams) the CUDA driver keeps for sharing, for reuse until it closes: an
    interprocess event per device exported from, each exporter event opened, a receiving
    stream per device (``gpu.cuda_ipc``)."""
    from arrayport.gpu import cuda
    return cuda.driver.sharing_kept()


def live_exports() -> int:
    """Exports this process still keeps for receivers."""
    with _exports_lock:
        return len(_exports)


def reap() -> int:
    """End every export that was opened and that no live process holds any more, and every
    export nobody opened for ``UNOPENED_SECONDS``; the number ended. The exporter's daemon
    thread calls it every ``REAP_SECONDS``."""
    with _exports_lock:
        exports = list(_exports.items())
    ended, now = [], time.monotonic()
    for token, export in exports:
        opened, live = export.holders()
        if (opened and live == 0) or (not opened and now - export.made > UNOPENED_SECONDS):
            ended.append(token)
    with _exports_lock:
        gone = [_exports.pop(token) for token in ended if token in _exports]
    for export in gone:
        export.end()
    return len(gone)


def _reap_forever() -> None:
    while not sys.is_finalizing():
        time.sleep(REAP_SECONDS)
        try:
            reap()
        except Exception:   # a lease that could not be read this time: looked at again
            pass


def _start_reaper() -> None:
    global _reaper
    if _reaper is None or not _reaper.is_alive():
        _reaper = threading.Thread(target=_reap_forever, name="arrayport-ipc-reaper",
                                   daemon=True)
        _reaper.start()


def _exportable(driver, view, stream: int):
    """(the View to export, its allocation's IPC handle, its offset in it, the allocation's
    bytes): ``view`` itself where the driver exports its allocation, else a copy of it into
    memory that it can export, made on ``stream`` on the GPU (a pool's block)."""
    ordinal = view.device.id
    exported = driver.export_allocation(ordinal, view.ptr)
    if exported is not None:
        return (view, *exported)
    source = view if view.is_c_contiguous else view.copy(stream=stream)
    memory = driver.allocate_device(ordinal, max(source.nbytes, 1))
    if source.nbytes:
        driver.copy_async(ordinal, memory.address, source.ptr, source.nbytes, stream)
    copy = _core.view_from_pointer(memory.address, source.shape, None, source.dtype,
                                   readonly=False, owner=(memory, source),
                                   device=(_CUDA, ordinal), protocol="shared")
    exported = driver.export_allocation(ordinal, memory.address)
    if exported is None:
        raise BufferError("share: the driver cannot export the memory it allocated")
    return (copy, *exported)


def share_device(view, readonly=None) -> CudaSharedHandle:
    """``View.share()`` of CUDA device memory (see the module docstring)."""
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
    stream = _core.pending_stream(view) or _LEGACY_STREAM
    exported, memory, offset, size = _exportable(driver, view, stream)
    event_handle = driver.record_interprocess_event(ordinal, stream)
    dtype = exported.dtype
    export = _Export(exported, exported.ptr - offset, size)
    token = secrets.token_hex(16)
    with _exports_lock:
        _exports[token] = export
    _start_reaper()
    return CudaSharedHandle("cuda-ipc", memory, offset, event_handle,
                            (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded),
                            exported.shape, exported.strides, readonly, uuid, _boot_id(),
                            os.getpid(),
                            export.descriptor, token)


# ---- the receiver ---------------------------------------------------------------------------

class _Mapping:
    """This process's mapping of another process's allocation: the owner of every View
    opened from it. When the last of them goes it is closed (``cuIpcCloseMemHandle``) and
    its lease given back — by the closer thread, after every device's work so far (work
    still queued may read it; a mapping closed under it is undefined behaviour): the
    finalizer that notices never waits on the host."""

    __slots__ = ("pointer", "ordinal", "lease", "size", "__weakref__")

    def __init__(self, pointer, ordinal, lease):
        self.pointer, self.ordinal, self.lease, self.size = pointer, ordinal, lease, 0

    def __del__(self):
        _closing.append((self.pointer, self.ordinal, self.lease))
        with _closer_wakes:
            _closer_wakes.notify()


# Mappings whose last View went: (pointer, device, lease), closed by the closer thread. A
# deque: a finalizer appends without a lock it could re-enter.
_closing: "collections.deque[tuple]" = collections.deque()
_closer_wakes = threading.Condition()
_closer: threading.Thread | None = None


def _close_mappings() -> int:
    """Close every mapping waiting to be closed, after every device's work so far; their
    leases given back. The number closed."""
    from arrayport.gpu import cuda
    waiting = []
    while _closing:
        waiting.append(_closing.popleft())
    if not waiting:
        return 0
    driver = cuda.driver
    try:
        for ordinal in driver.devices_at_work():
            driver.synchronize_device(ordinal)
        for pointer, ordinal, _ in waiting:
            driver.close_allocation(ordinal, pointer)
    except Exception:   # at exit: the driver may be gone; the leases still go back
        pass
    for _, _, lease in waiting:
        _give_back(*lease)
    return len(waiting)


def _close_forever() -> None:
    while not sys.is_finalizing():
        with _closer_wakes:
            _closer_wakes.wait_for(lambda: bool(_closing))
        try:
            _close_mappings()
        except Exception:   # the driver gone (at exit): its leases went back regardless
            pass


def _start_closer() -> None:
    global _closer
    if _closer is None or not _closer.is_alive():
        _closer = threading.Thread(target=_close_forever, name="arrayport-ipc-closer",
                                   daemon=True)
        _closer.start()


_mappings: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_mappings_lock = threading.Lock()


def _take_lease(handle) -> tuple[int, int]:
    """(the export's lease, opened here; this process's slot in it), its count one more;
    BufferError where the export is gone or this process may not open it."""
    try:
        descriptor = os.open(f"/proc/{handle.pid}/fd/{handle.lease}", os.O_RDWR | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        raise BufferError(f"from_shared: the exporting process {handle.pid} is gone or ended "
                          f"this export") from None
    except PermissionError:
        raise BufferError(f"from_shared: process {handle.pid} is another user's; its device "
                          f"memory is not this process's to open") from None
    try:
        if os.readlink(f"/proc/self/fd/{descriptor}") != "/memfd:arrayport-lease (deleted)":
            raise BufferError(f"from_shared: the handle's lease is not an arrayport export of "
                              f"process {handle.pid} (stale or forged)")
        with _locked(descriptor) as lease:
            me, free = os.getpid(), None
            for slot in range(_SLOTS):
                pid, count = _SLOT.unpack_from(lease, 8 + slot * _SLOT.size)
                if pid == me:
                    break
                if pid == 0 and free is None:
                    free = slot
            else:
                if free is None:
                    raise BufferError(f"from_shared: {_SLOTS} processes hold this export "
                                      f"already")
                slot, count = free, 0
            _SLOT.pack_into(lease, 8 + slot * _SLOT.size, me, count + 1)
            struct.pack_into("=i", lease, 0, 1)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, slot


@contextlib.contextmanager
def _locked(descriptor: int):
    """The lease of ``descriptor``, mapped and locked (``flock``) for the block."""
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    try:
        with mmap.mmap(descriptor, _LEASE_BYTES) as lease:
            yield lease
    finally:
        fcntl.flock(descriptor, fcntl.LOCK_UN)


def _give_back(descriptor: int, slot: int) -> None:
    """One View fewer in this process's slot of the lease; the lease closed here."""
    try:
        with _locked(descriptor) as lease:
            offset = 8 + slot * _SLOT.size
            pid, count = _SLOT.unpack_from(lease, offset)
            _SLOT.pack_into(lease, offset, pid, max(count - 1, 0))
    except (ValueError, OSError):
        pass
    finally:
        os.close(descriptor)


def _check(handle) -> None:
    if not isinstance(handle, CudaSharedHandle) or handle.kind != "cuda-ipc":
        raise TypeError(f"from_shared: expected a CUDA shared handle, got "
                        f"{type(handle).__name__}")
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
    for name in ("machine", "token"):
        if type(getattr(handle, name)) is not str:
            raise ValueError(f"from_shared: a CUDA handle's {name} must be a str")


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
    item = tuple(handle.item)
    if handle.pid == os.getpid():                  # CUDA refuses a process its own handles
        with _exports_lock:
            export = _exports.get(handle.token)
        if export is None or export.view is None:
            raise BufferError("from_shared: this process ended that export")
        _within(handle, export.size)
        source = export.view
        return _core.view_from_pointer(export.base + handle.offset, handle.shape,
                                       handle.strides, _dtype(item), readonly=handle.readonly,
                                       owner=source, device=(_CUDA, source.device.id),
                                       protocol="shared")
    driver = cuda.driver
    ordinal = _ordinal_of(driver, handle.device)
    key = (handle.pid, handle.token)     # one lease per export; CUDA counts the opens
    with _mappings_lock:
        mapping = _mappings.get(key)
        if mapping is None:
            lease = _take_lease(handle)
            try:
                pointer, size = driver.open_allocation(ordinal, handle.memory)
            except BaseException:
                _give_back(*lease)
                raise
            mapping = _Mapping(pointer, ordinal, lease)
            mapping.size = size
            _mappings[key] = mapping
            _start_closer()
    _within(handle, mapping.size)
    stream = driver.wait_for_exporter(ordinal, handle.event)
    received = _core.view_from_pointer(mapping.pointer + handle.offset, handle.shape,
                                       handle.strides, _dtype(item), readonly=handle.readonly,
                                       owner=mapping, device=(_CUDA, ordinal), protocol="shared")
    _core.set_pending_stream(received, stream)
    return received


def _dtype(item):
    from arrayport.dtypes import DType
    code, bits, lanes, padded = item
    return DType(code, bits, lanes, padded=padded)


def close() -> None:
    """The mappings waiting to be closed, closed (at exit, before the driver closes)."""
    _close_mappings()


atexit.register(close)   # registered after the driver's close, so run before it
