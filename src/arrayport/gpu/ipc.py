"""CUDA device Views across processes (issue 55): ``View.share()`` of CUDA device memory
gives a ``CudaSharedHandle``; ``View.from_shared(handle)`` in another process of the same
machine gives a View of the same device memory — no byte travels, through the host or
otherwise. This module owns every rule of it (docs/processes.md says them to users):

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
  ``os.kill(pid, 0)``). A handle never opened is kept until ``handle.revoke()`` or the
  exporter's exit. A receiver maps an allocation once, however many Views it opens from
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
import contextlib
import ctypes
import fcntl
import mmap
import os
import secrets
import struct
import threading
import weakref

from arrayport import _core
from arrayport.gpu.cuda import IPC_SIGNATURES, IpcHandle as _IpcHandle
from arrayport.gpu.library import c_address, c_handle, c_size

__all__ = ["CudaSharedHandle", "share_device", "open_device", "reap", "live_exports", "kept"]

_CUDA = 2                       # DLPack's kCUDA
_LEGACY_STREAM = 1
_CU_EVENT_INTERPROCESS_UNTIMED = 0x4 | 0x2
_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
_CU_STREAM_NON_BLOCKING = 0x1
_CUDA_ERROR_INVALID_VALUE = 1
REAP_SECONDS = 0.05
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
        return (CudaSharedHandle, tuple(getattr(self, name) for name in self.__slots__))

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

    __slots__ = ("view", "descriptor")

    def __init__(self, view):
        self.view = view
        self.descriptor = os.memfd_create("arrayport-lease", os.MFD_CLOEXEC)
        os.ftruncate(self.descriptor, _LEASE_BYTES)

    def holders(self) -> tuple[bool, int]:
        """(whether any receiver ever opened it, how many live processes hold it); slots of
        processes that died are cleared."""
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
        self.view = None
        os.close(self.descriptor)


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
_events: dict[int, tuple[int, bytes]] = {}   # device -> (interprocess event, its handle)


def kept() -> tuple[int, int]:
    """(events, streams) this process keeps for sharing, for reuse until exit: an
    interprocess event per device exported from, each exporter event opened, a receiving
    stream per device."""
    return len(_events) + len(_opened_events), len(_ipc_streams)


def live_exports() -> int:
    """Exports this process still keeps for receivers."""
    with _exports_lock:
        return len(_exports)


def reap() -> int:
    """End every export that was opened and that no live process holds any more; the
    number ended. The exporter's daemon thread calls it every ``REAP_SECONDS``."""
    with _exports_lock:
        exports = list(_exports.items())
    ended = []
    for token, export in exports:
        opened, live = export.holders()
        if opened and live == 0:
            ended.append(token)
    with _exports_lock:
        gone = [_exports.pop(token) for token in ended if token in _exports]
    for export in gone:
        export.end()
    return len(gone)


def _reap_forever() -> None:
    import time
    while True:
        time.sleep(REAP_SECONDS)
        try:
            reap()
        except Exception:   # at interpreter exit
            return


def _start_reaper() -> None:
    global _reaper
    if _reaper is None or not _reaper.is_alive():
        _reaper = threading.Thread(target=_reap_forever, name="arrayport-ipc-reaper",
                                   daemon=True)
        _reaper.start()


def _library(driver):
    """The driver's library with its IPC calls declared (``gpu.cuda.IPC_SIGNATURES``);
    BufferError naming the call where this driver lacks one."""
    library = driver.library.get()
    for name, argtypes in IPC_SIGNATURES.items():
        entry = getattr(library, name, None)
        if entry is None:
            raise BufferError(f"share: this CUDA driver has no {name}: device memory cannot "
                              f"be shared with other processes here")
        if entry.argtypes != argtypes:
            entry.argtypes, entry.restype = argtypes, ctypes.c_int
    return library


def _device_uuid(driver, ordinal: int) -> bytes:
    uuid = ctypes.create_string_buffer(16)
    driver.library.check(_library(driver).cuDeviceGetUuid(uuid, ordinal), "cuDeviceGetUuid")
    return uuid.raw


def _interprocess_event(driver, ordinal: int) -> tuple[int, bytes]:
    """This process's interprocess event of device ``ordinal`` and its handle (made once)."""
    made = _events.get(ordinal)
    if made is None:
        library, event, handle = _library(driver), c_handle(), _IpcHandle()
        with driver.on_device(ordinal):
            driver.library.check(library.cuEventCreate(ctypes.byref(event),
                                                       _CU_EVENT_INTERPROCESS_UNTIMED),
                                 "cuEventCreate")
            driver.library.check(library.cuIpcGetEventHandle(ctypes.byref(handle), event),
                                 "cuIpcGetEventHandle")
        made = _events.setdefault(ordinal, (event.value, bytes(handle)))
    return made


def _exportable(driver, view, stream: int):
    """(the View to export, its allocation's IPC handle, its offset in it): ``view`` itself
    where CUDA exports its allocation, else a copy of it into memory that CUDA can export,
    made on ``stream`` on the GPU (None: ``view`` is not CUDA device memory)."""
    ordinal, library = view.device.id, _library(driver)
    base, size, handle = c_address(0), c_size(0), _IpcHandle()
    with driver.on_device(ordinal):
        status = driver.library.get().cuMemGetAddressRange_v2(ctypes.byref(base),
                                                              ctypes.byref(size), view.ptr)
        if status == 0:
            status = library.cuIpcGetMemHandle(ctypes.byref(handle), base.value)
    if status == 0:
        return view, bytes(handle), view.ptr - base.value
    if status != _CUDA_ERROR_INVALID_VALUE:
        driver.library.check(status, "cuIpcGetMemHandle")
    # A pool's block (or memory CUDA does not know as one allocation): one copy on the GPU.
    source = view if view.is_c_contiguous else view.copy(stream=stream)
    memory = driver.allocate_device(ordinal, max(source.nbytes, 1))
    if source.nbytes:
        driver.copy_async(ordinal, memory.address, source.ptr, source.nbytes, stream)
    copy = _core.view_from_pointer(memory.address, source.shape, None, source.dtype,
                                   readonly=False, owner=(memory, source), device=(_CUDA, ordinal),
                                   protocol="shared")
    with driver.on_device(ordinal):
        driver.library.check(library.cuIpcGetMemHandle(ctypes.byref(handle), memory.address),
                             "cuIpcGetMemHandle")
    return copy, bytes(handle), 0


def share_device(view, readonly=None) -> CudaSharedHandle:
    """``View.share()`` of CUDA device memory (see the module docstring)."""
    from arrayport.gpu import cuda
    if view.device.type != _CUDA:
        raise BufferError(f"share: {view.device} memory cannot be shared with other processes "
                          f"(CUDA device memory can; host memory through a segment); share a "
                          f"host copy: view.copy(device='cpu').share()")
    driver = cuda.driver
    ordinal = view.device.id
    stream = _core.pending_stream(view) or _LEGACY_STREAM
    exported, memory, offset = _exportable(driver, view, stream)
    event, event_handle = _interprocess_event(driver, ordinal)
    with driver.on_stream_context(stream, ordinal):
        driver.library.check(driver.library.get().cuEventRecord(event, stream), "cuEventRecord")
    readonly = view.readonly if readonly is None else bool(readonly)
    if view.readonly and not readonly:
        raise ValueError("share: the View is read-only; its handles are read-only too")
    dtype = exported.dtype
    export = _Export(exported)
    token = secrets.token_hex(16)
    with _exports_lock:
        _exports[token] = export
    _start_reaper()
    return CudaSharedHandle("cuda-ipc", memory, offset, event_handle,
                            (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded),
                            exported.shape, exported.strides, readonly,
                            _device_uuid(driver, ordinal), _boot_id(), os.getpid(),
                            export.descriptor, token)


# ---- the receiver ---------------------------------------------------------------------------

class _Mapping:
    """This process's mapping of another process's allocation: the owner of every View
    opened from it; closed (``cuIpcCloseMemHandle``) and its lease given back when the last
    of them goes."""

    __slots__ = ("pointer", "ordinal", "lease", "__weakref__")

    def __init__(self, pointer, ordinal, lease):
        self.pointer, self.ordinal, self.lease = pointer, ordinal, lease

    def __del__(self):
        try:
            from arrayport.gpu import cuda
            with cuda.driver.on_device(self.ordinal):
                _library(cuda.driver).cuIpcCloseMemHandle(self.pointer)
        except Exception:   # at exit: the driver may be gone
            pass
        _give_back(*self.lease)


_mappings: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_mappings_lock = threading.Lock()
_opened_events: dict[bytes, int] = {}    # exporter event handle -> this process's event
_ipc_streams: dict[int, int] = {}        # device -> the stream received Views wait on


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


def _ordinal_of(driver, uuid: bytes) -> int:
    for ordinal in range(driver.device_count()):
        if _device_uuid(driver, ordinal) == uuid:
            return ordinal
    raise BufferError("from_shared: the handle's GPU is not visible to this process "
                      "(CUDA_VISIBLE_DEVICES?)")


def _receiving_stream(driver, library, ordinal: int, event_handle: bytes) -> int:
    """This process's stream for received Views of device ``ordinal``, made to wait (on the
    GPU) for the exporter's event as it was recorded at share()."""
    event = _opened_events.get(event_handle)
    with driver.on_device(ordinal):
        if event is None:
            made = c_handle()
            driver.library.check(library.cuIpcOpenEventHandle(
                ctypes.byref(made), _IpcHandle.from_buffer_copy(event_handle)),
                "cuIpcOpenEventHandle")
            event = _opened_events.setdefault(event_handle, made.value)
        stream = _ipc_streams.get(ordinal)
        if stream is None:
            made = c_handle()
            driver.library.check(library.cuStreamCreate(ctypes.byref(made),
                                                        _CU_STREAM_NON_BLOCKING),
                                 "cuStreamCreate")
            stream = _ipc_streams.setdefault(ordinal, made.value)
        driver.library.check(driver.library.get().cuStreamWaitEvent(stream, event, 0),
                             "cuStreamWaitEvent")
    return stream


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
        source = export.view
        return _core.view_from_pointer(source.ptr, handle.shape, handle.strides,
                                       source.dtype, readonly=handle.readonly, owner=source,
                                       device=(_CUDA, source.device.id), protocol="shared")
    driver = cuda.driver
    library = _library(driver)
    ordinal = _ordinal_of(driver, handle.device)
    key = (handle.pid, handle.token)     # one lease per export; CUDA counts the opens
    with _mappings_lock:
        mapping = _mappings.get(key)
        if mapping is None:
            lease = _take_lease(handle)
            pointer = c_address(0)
            with driver.on_device(ordinal):
                status = library.cuIpcOpenMemHandle_v2(
                    ctypes.byref(pointer), _IpcHandle.from_buffer_copy(handle.memory),
                    _CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
            if status != 0:
                _give_back(*lease)
                raise BufferError(f"from_shared: CUDA could not open the exporter's memory "
                                  f"(cuIpcOpenMemHandle: CUDA error {status}; freed, or its "
                                  f"process gone?)")
            mapping = _Mapping(pointer.value, ordinal, lease)
            _mappings[key] = mapping
    stream = _receiving_stream(driver, library, ordinal, handle.event)
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
    """This process's events and streams of sharing, destroyed (at exit, before the driver
    closes)."""
    from arrayport.gpu import cuda
    try:
        library = cuda.driver.library.get()
    except BufferError:
        return
    for ordinal, (event, _) in list(_events.items()):
        with cuda.driver.on_device(ordinal):
            library.cuEventDestroy_v2(event)
    for event in _opened_events.values():
        library.cuEventDestroy_v2(event)
    for ordinal, stream in _ipc_streams.items():
        with cuda.driver.on_device(ordinal):
            library.cuStreamSynchronize(stream)
            library.cuStreamDestroy_v2(stream)
    _events.clear()
    _opened_events.clear()
    _ipc_streams.clear()


atexit.register(close)   # before the driver closes: registered after it, run first
