"""CUDA IPC's driver calls: ``CudaDriver``'s sharing floor. Single driver calls and what
they make once per process (an interprocess event per device, the stream received Views
wait on), deciding nothing: what is shared, kept, leased and closed is ``gpu.ipc``'s (the
policy), which asks only these methods of the driver interface (``gpu.interface``).

Declared when sharing first asks (``_OPTIONAL_SIGNATURES``), not when the library opens: a
driver without them (a test's stand-in library) serves everything else, and sharing says
which call it lacks.
"""

from __future__ import annotations

import ctypes
import os
import threading

from arrayport.gpu.cuda_memory import _MemAccessDesc, _MemLocation, _MemPoolProps
from arrayport.gpu.library import c_address, c_handle, c_size

# CUDA driver API facts (cuda.h).
_CU_EVENT_INTERPROCESS = 0x4        # "CU_EVENT_DISABLE_TIMING must be set" with it
_CU_EVENT_DISABLE_TIMING = 0x2
_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1   # "must be specified" to cuIpcOpenMemHandle
_CU_STREAM_NON_BLOCKING = 0x1
_CU_STREAM_DEFAULT = 0x0            # blocking: ordered after the legacy stream's work
_CUDA_ERROR_INVALID_VALUE = 1
_CUDA_ERROR_NOT_SUPPORTED = 801     # memory of the virtual memory API (cuMemCreate)
_CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES = 119
_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1
_CU_MEM_ALLOCATION_TYPE_PINNED = 1
_CU_MEM_LOCATION_TYPE_DEVICE = 1
_CU_MEM_ACCESS_FLAGS_PROT_READ = 1
_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3


class IpcHandle(ctypes.Structure):
    """CUipcMemHandle / CUipcEventHandle: 64 opaque bytes, passed by value."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


class PointerExport(ctypes.Structure):
    """CUmemPoolPtrExportData: 64 opaque bytes."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


_OPTIONAL_SIGNATURES = {
    "cuIpcGetMemHandle": (ctypes.c_int, [ctypes.POINTER(IpcHandle), c_address]),
    "cuIpcOpenMemHandle_v2": (ctypes.c_int, [ctypes.POINTER(c_address), IpcHandle,
                                             ctypes.c_uint]),
    "cuIpcCloseMemHandle": (ctypes.c_int, [c_address]),
    "cuIpcGetEventHandle": (ctypes.c_int, [ctypes.POINTER(IpcHandle), c_handle]),
    "cuIpcOpenEventHandle": (ctypes.c_int, [ctypes.POINTER(c_handle), IpcHandle]),
    "cuStreamCreate": (ctypes.c_int, [ctypes.POINTER(c_handle), ctypes.c_uint]),
    "cuStreamDestroy_v2": (ctypes.c_int, [c_handle]),
    "cuDeviceGetUuid": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int]),
    "cuMemPoolCreate": (ctypes.c_int, [ctypes.POINTER(c_handle), ctypes.POINTER(_MemPoolProps)]),
    "cuMemPoolDestroy": (ctypes.c_int, [c_handle]),
    "cuMemPoolExportToShareableHandle": (ctypes.c_int, [ctypes.c_void_p, c_handle, ctypes.c_int,
                                                        ctypes.c_ulonglong]),
    "cuMemPoolImportFromShareableHandle": (ctypes.c_int, [ctypes.POINTER(c_handle),
                                                          ctypes.c_void_p, ctypes.c_int,
                                                          ctypes.c_ulonglong]),
    "cuMemPoolSetAccess": (ctypes.c_int, [c_handle, ctypes.POINTER(_MemAccessDesc), c_size]),
    "cuMemPoolExportPointer": (ctypes.c_int, [ctypes.POINTER(PointerExport), c_address]),
    "cuMemPoolImportPointer": (ctypes.c_int, [ctypes.POINTER(c_address), c_handle,
                                              ctypes.POINTER(PointerExport)]),
    "cuMemFree_v2": (ctypes.c_int, [c_address]),
}


class CudaIpcFloor:
    """``CudaDriver``'s sharing floor (see the module). Expects the driver's ``library``,
    ``on_device``, ``on_stream_context``, ``device_count`` and ``check``."""

    def _init_ipc_floor(self) -> None:
        self._ipc_lock = threading.Lock()   # what is made once, made once
        # device -> (the interprocess event, its handle, the sharing stream it is recorded on)
        self._ipc_events: dict[int, tuple[int, bytes, int]] = {}
        self._ipc_streams: dict[int, int] = {}    # device -> the receiving stream
        # device -> (its sharing pool, or None where none can be made; the pool's descriptor;
        # the pool's serial in this process: a new pool is told from an old one by it)
        self._sharing_pools: dict[int, tuple[int | None, int | None, int]] = {}
        self._sharing_pools_made = 0
        self._imported_pools: list[int] = []      # destroyed at the driver's close
        self._uuids: dict[tuple, bytes] = {}      # (library, device) -> its UUID

    def _ipc(self, name: str):
        """Entry point ``name``, declared; BufferError naming it where the driver lacks it."""
        entry = getattr(self.library.get(), name, None)
        if entry is None:
            raise BufferError(f"share: this CUDA driver has no {name}: device memory cannot "
                              f"be shared with other processes here")
        if getattr(entry, "argtypes", ()) is None:
            entry.restype, entry.argtypes = _OPTIONAL_SIGNATURES[name]
        return entry

    def device_uuid(self, ordinal: int) -> bytes:
        """Device ``ordinal``'s UUID (16 bytes): the same GPU whatever a process numbers it
        (asked once: a device's UUID and number do not change while the driver is open)."""
        library = self.library              # the library opened: a test may swap it
        uuid = self._uuids.get((library, ordinal))
        if uuid is None:
            found = ctypes.create_string_buffer(16)
            self.check(self._ipc("cuDeviceGetUuid")(found, ordinal), "cuDeviceGetUuid")
            uuid = self._uuids[(library, ordinal)] = found.raw
        return uuid

    def export_allocation(self, ordinal: int, pointer: int) -> tuple[bytes, int, int] | None:
        """(the CUDA IPC handle of the allocation ``pointer`` lies in, the pointer's offset
        in it, the allocation's bytes): ``cuMemGetAddressRange`` then ``cuIpcGetMemHandle``
        of its base. None where CUDA cannot export it so (a memory pool's block:
        CUDA_ERROR_INVALID_VALUE); BufferError for any other failure."""
        base, size, handle = c_address(0), c_size(0), IpcHandle()
        with self.on_device(ordinal):
            self.check(self.library.get().cuMemGetAddressRange_v2(
                ctypes.byref(base), ctypes.byref(size), pointer), "cuMemGetAddressRange")
            status = self._ipc("cuIpcGetMemHandle")(ctypes.byref(handle), base.value)
        if status in (_CUDA_ERROR_INVALID_VALUE, _CUDA_ERROR_NOT_SUPPORTED):
            return None
        self.check(status, "cuIpcGetMemHandle")
        return bytes(handle), pointer - base.value, size.value

    def _sharing(self, ordinal: int) -> tuple[int, bytes, int]:
        """Device ``ordinal``'s (interprocess event, its handle, sharing stream), made once:
        ``CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING``, and a blocking stream."""
        with self._ipc_lock:
            made = self._ipc_events.get(ordinal)
            if made is None:
                event, handle, sharing = c_handle(), IpcHandle(), c_handle()
                with self.on_device(ordinal):
                    # blocking: a View whose data is ready in the legacy stream's order (no
                    # stream known: CuPy's null stream, a producer that made stream 1 wait)
                    # is shared after that work too
                    self.check(self._ipc("cuStreamCreate")(ctypes.byref(sharing),
                                                           _CU_STREAM_DEFAULT),
                               "cuStreamCreate")
                    self.check(self.library.get().cuEventCreate(
                        ctypes.byref(event), _CU_EVENT_INTERPROCESS | _CU_EVENT_DISABLE_TIMING),
                        "cuEventCreate")
                    self.check(self._ipc("cuIpcGetEventHandle")(ctypes.byref(handle), event),
                               "cuIpcGetEventHandle")
                made = (event.value, bytes(handle), sharing.value)
                self._ipc_events[ordinal] = made
        return made

    def sharing_stream(self, ordinal: int) -> int:
        """Device ``ordinal``'s sharing stream: where every share of the process records its
        interprocess event, so that each record comes after everything every earlier one
        was ordered after (a receiver waiting on the latest record never waits for less
        than its own View's work). Who orders it after what is the stream rules' (the
        core's)."""
        return self._sharing(ordinal)[2]

    def record_interprocess_event(self, ordinal: int, stream: int) -> bytes:
        """Record device ``ordinal``'s interprocess event on ``stream`` (its sharing stream)
        now; the event's handle."""
        event, handle, _ = self._sharing(ordinal)
        with self.on_device(ordinal):
            self.check(self.library.get().cuEventRecord(event, stream), "cuEventRecord")
        return handle

    def open_allocation(self, ordinal: int, memory: bytes) -> tuple[int, int]:
        """Another process's allocation (its CUDA IPC handle ``memory``) mapped into device
        ``ordinal``'s context: (the pointer, the allocation's bytes). BufferError where CUDA
        cannot open it (freed, its process gone, or this process's own)."""
        pointer = c_address(0)
        with self.on_device(ordinal):
            status = self._ipc("cuIpcOpenMemHandle_v2")(
                ctypes.byref(pointer), IpcHandle.from_buffer_copy(memory),
                _CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        if status != 0:
            raise BufferError(f"from_shared: CUDA could not open the exporter's memory "
                              f"(cuIpcOpenMemHandle: CUDA error {status}; freed, or its "
                              f"process gone?)")
        return pointer.value, self.allocation_bytes(ordinal, pointer.value)

    def close_allocation(self, ordinal: int, pointer: int) -> None:
        """Unmap what ``open_allocation`` mapped (``cuIpcCloseMemHandle``)."""
        with self.on_device(ordinal):
            self.check(self._ipc("cuIpcCloseMemHandle")(pointer), "cuIpcCloseMemHandle")

    def wait_for_exporter(self, ordinal: int, event: bytes) -> int:
        """This process's stream for received Views of device ``ordinal`` (made once,
        non-blocking), made to wait on the GPU for the exporter's interprocess event
        (``event``, its handle; opened once) as last recorded; the stream."""
        library = self.library.get()
        with self.on_device(ordinal):
            with self._ipc_lock:
                stream = self._ipc_streams.get(ordinal)
                if stream is None:
                    made = c_handle()
                    self.check(self._ipc("cuStreamCreate")(ctypes.byref(made),
                                                           _CU_STREAM_NON_BLOCKING),
                               "cuStreamCreate")
                    stream = self._ipc_streams[ordinal] = made.value
            # Opened for this wait, closed after it: the wait keeps the record it captured
            # (an event may be destroyed with work still waiting on it), and a receiver of
            # many exporters keeps no event of each.
            opened = c_handle()
            self.check(self._ipc("cuIpcOpenEventHandle")(
                ctypes.byref(opened), IpcHandle.from_buffer_copy(event)), "cuIpcOpenEventHandle")
            try:
                self.check(library.cuStreamWaitEvent(stream, opened, 0), "cuStreamWaitEvent")
            finally:
                library.cuEventDestroy_v2(opened)
        return stream

    # ---- the descriptor route: memory pools made with POSIX file-descriptor handles -------

    def _sharing_pool(self, ordinal: int) -> tuple[int | None, int | None, int]:
        """Device ``ordinal``'s (sharing pool, its descriptor, its serial), made once: a pool
        of ordinary device memory whose blocks other processes import through the descriptor
        (``CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR``); (None, None, 0) where the device or
        the driver has no such pools."""
        with self._ipc_lock:
            made = self._sharing_pools.get(ordinal)
            if made is None:
                pool, descriptor = self._make_sharing_pool(ordinal)
                if pool is not None:
                    os.set_inheritable(descriptor, False)   # no child inherits the pool
                    self._sharing_pools_made += 1
                made = self._sharing_pools[ordinal] = (
                    pool, descriptor, self._sharing_pools_made if pool is not None else 0)
        return made

    def _make_sharing_pool(self, ordinal: int) -> tuple[int | None, int | None]:
        library = self.library.get()
        types = ctypes.c_int(0)
        if (library.cuDeviceGetAttribute(ctypes.byref(types),
                                         _CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
                                         ordinal) != 0
                or not types.value & _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                or not self.has_memory_pools(ordinal)
                or any(getattr(library, name, None) is None for name in (
                    "cuMemPoolCreate", "cuMemPoolExportToShareableHandle",
                    "cuMemPoolExportPointer", "cuMemAllocFromPoolAsync"))):
            return None, None
        props = _MemPoolProps(allocType=_CU_MEM_ALLOCATION_TYPE_PINNED,
                              handleTypes=_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                              location=_MemLocation(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal))
        pool, descriptor = c_handle(), ctypes.c_int(-1)
        with self.on_device(ordinal):
            if self._ipc("cuMemPoolCreate")(ctypes.byref(pool), ctypes.byref(props)) != 0:
                return None, None
            status = self._ipc("cuMemPoolExportToShareableHandle")(
                ctypes.byref(descriptor), pool, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
            if status != 0:
                self._ipc("cuMemPoolDestroy")(pool)
                return None, None
        return pool.value, descriptor.value

    def drop_sharing_pools(self, busy: set[int]) -> int:
        """Destroy the sharing pools of the devices not in ``busy`` (their blocks all freed
        or being freed: CUDA releases the pool once none is outstanding), their descriptors
        closed; the next ``allocate_shareable`` makes a new one. The bytes they reserved."""
        with self._ipc_lock:
            idle = {ordinal: made for ordinal, made in self._sharing_pools.items()
                    if ordinal not in busy}
            for ordinal in idle:
                del self._sharing_pools[ordinal]
        released = 0
        for ordinal, (pool, descriptor, _) in idle.items():
            if pool is None:
                continue
            released += self.pool_reserved(pool)
            os.close(descriptor)
            with self.on_device(ordinal):
                self._ipc("cuMemPoolDestroy")(pool)
        return released

    def allocate_shareable(self, ordinal: int, nbytes: int, stream: int):
        """(``nbytes`` of device ``ordinal``'s sharing pool, in ``stream``'s order — an
        ``OwnedMemory``, given back as arrayport's memory policy gives back ordinary memory
        —, the pool's serial); None where the device has no sharing pool."""
        pool, _, serial = self._sharing_pool(ordinal)
        if pool is None:
            return None
        return self.memory.allocate_shareable(ordinal, pool, nbytes, stream), serial

    def pool_descriptor(self, ordinal: int) -> tuple[int, int]:
        """(a duplicate of the descriptor of device ``ordinal``'s sharing pool, the caller's
        to close — the pool's own stays open until the pool goes —, the pool's serial)."""
        with self._ipc_lock:
            _, descriptor, serial = self._sharing_pools.get(ordinal, (None, None, 0))
            if descriptor is None:
                raise BufferError(f"share: device {ordinal} has no sharing pool")
            return os.dup(descriptor), serial

    def export_pool_block(self, ordinal: int, pointer: int) -> bytes | None:
        """What another process imports block ``pointer`` (the start of a block of a pool
        made with file-descriptor handles) by: ``cuMemPoolExportPointer``'s 64 bytes; None
        where the memory is no such block."""
        data = PointerExport()
        with self.on_device(ordinal):
            status = self._ipc("cuMemPoolExportPointer")(ctypes.byref(data), pointer)
        return bytes(data) if status == 0 else None

    def import_pool(self, ordinal: int, descriptor: int) -> int:
        """Another process's pool (its descriptor, received) imported into device
        ``ordinal``'s context, no device granted access yet (``grant_pool_access``);
        destroyed by ``drop_imported_pool``, or at the driver's close."""
        pool = c_handle()
        with self.on_device(ordinal):
            status = self._ipc("cuMemPoolImportFromShareableHandle")(
                ctypes.byref(pool), descriptor, _CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
        if status != 0:
            raise BufferError(f"from_shared: CUDA could not import the exporter's pool "
                              f"(cuMemPoolImportFromShareableHandle: CUDA error {status})")
        with self._ipc_lock:
            self._imported_pools.append(pool.value)
        return pool.value

    def grant_pool_access(self, ordinal: int, pool: int, readonly: bool) -> bool:
        """Device ``ordinal`` granted read access (``readonly``) or read-write access to an
        imported ``pool``'s blocks, those imported already too: whether the grant is
        read-only — False where the driver refused a read-only grant and read-write was
        granted instead."""
        grants = ([_CU_MEM_ACCESS_FLAGS_PROT_READ] if readonly else []) + \
            [_CU_MEM_ACCESS_FLAGS_PROT_READWRITE]
        with self.on_device(ordinal):
            for flags in grants:
                access = _MemAccessDesc(_MemLocation(_CU_MEM_LOCATION_TYPE_DEVICE, ordinal),
                                        flags)
                status = self._ipc("cuMemPoolSetAccess")(pool, ctypes.byref(access), 1)
                if status == 0:
                    return flags == _CU_MEM_ACCESS_FLAGS_PROT_READ
        self.check(status, "cuMemPoolSetAccess")
        return False

    def drop_imported_pool(self, pool: int) -> None:
        """Destroy an imported ``pool`` none of whose blocks is imported any more."""
        with self._ipc_lock:
            if pool not in self._imported_pools:
                return
            self._imported_pools.remove(pool)
        self._ipc("cuMemPoolDestroy")(pool)

    def import_pool_block(self, ordinal: int, pool: int, block: bytes) -> int:
        """The block ``block`` (``export_pool_block``'s bytes) of an imported ``pool``, mapped
        here: its pointer. BufferError where CUDA cannot import it (freed, its process gone)."""
        pointer = c_address(0)
        with self.on_device(ordinal):
            status = self._ipc("cuMemPoolImportPointer")(
                ctypes.byref(pointer), pool, ctypes.byref(PointerExport.from_buffer_copy(block)))
        if status != 0:
            raise BufferError(f"from_shared: CUDA could not import the exporter's block "
                              f"(cuMemPoolImportPointer: CUDA error {status}; freed, or its "
                              f"process gone?)")
        return pointer.value

    def free_imported(self, ordinal: int, pointer: int) -> None:
        """Unmap what ``import_pool_block`` mapped (``cuMemFree``)."""
        with self.on_device(ordinal):
            self.check(self._ipc("cuMemFree_v2")(pointer), "cuMemFree(imported block)")

    def sharing_kept(self) -> tuple[int, int]:
        """(events, streams) kept for sharing until the driver closes: an interprocess event
        and a sharing stream per device exported from, a receiving stream per device
        received on."""
        return len(self._ipc_events), len(self._ipc_events) + len(self._ipc_streams)

    def _close_ipc_floor(self) -> None:
        """Destroy the events, streams and pools of sharing (at the driver's close)."""
        self._uuids.clear()
        if not (self._ipc_events or self._ipc_streams or self._sharing_pools
                or self._imported_pools):
            return                       # nothing made: the library need not be opened
        library = self.library.get()
        with self._ipc_lock:
            events, self._ipc_events = self._ipc_events, {}
            streams, self._ipc_streams = self._ipc_streams, {}
            pools, self._sharing_pools = self._sharing_pools, {}
            imported, self._imported_pools = self._imported_pools, []
        for pool in imported:
            self._ipc("cuMemPoolDestroy")(pool)
        for ordinal, (pool, descriptor, _) in pools.items():
            if pool is not None:
                os.close(descriptor)
                with self.on_device(ordinal):
                    self._ipc("cuMemPoolDestroy")(pool)
        sharing = {ordinal: made[2] for ordinal, made in events.items()}
        for stream_of in (sharing, streams):     # their work done first: the last records
            for ordinal, stream in stream_of.items():   # complete before the event goes
                with self.on_device(ordinal):
                    library.cuStreamSynchronize(stream)
                    self._ipc("cuStreamDestroy_v2")(stream)
        for ordinal, (event, _, _) in events.items():
            with self.on_device(ordinal):
                library.cuEventDestroy_v2(event)
