"""One GPU driver implementation, parameterised by the vendor's symbols.

The CUDA driver API and the HIP runtime match call for call where arrayport orders streams,
allocates and copies linearly: an event created without timing, recorded on one stream and
waited on by another; a stream synchronisation; a device allocation and its free; portable
pinned host memory and its free; an asynchronous linear copy. ``VendorDriver`` writes those
once; a ``VendorSymbols`` table names each vendor's entry points and flag values. What does
not match stays in the vendor's subclass (``gpu.cuda.CudaDriver``,
``gpu.hip.HipDriver``): how a device is made current (CUDA's primary contexts, HIP's
current device), how a pointer is located, the 2-D and peer copies, managed memory.

Every driver is an instance that ``gpu.driver_for`` hands out; it satisfies
``gpu.interface.GpuDriver``. Its library (a ``NativeLibrary``) opens on the first call.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import threading
import weakref
from typing import NamedTuple

from arrayport.gpu.held_memory import DeviceMemory
from arrayport.gpu.library import NativeLibrary, OwnedEvent, OwnedMemory, c_address, c_handle


class VendorSymbols(NamedTuple):
    """The entry points (names in the vendor's library) and flags of the calls both APIs
    share. ``copy_kind`` is inserted before the stream in the linear copy (HIP names the
    direction, CUDA infers it)."""
    device_count: str
    event_create: str
    event_record: str
    event_destroy: str
    stream_wait_event: str
    stream_synchronize: str
    event_synchronize: str
    allocate: str
    free: str
    host_allocate: str
    host_free: str
    copy: str
    device_attribute: str         # (int *value, attribute, device ordinal)
    event_disable_timing: int
    max_pitch_attribute: int      # the device attribute: the largest pitch of a 2-D copy
    host_allocate_portable: int
    device_synchronize: str       # (), the current device's (context's) work finished
    out_of_memory: int            # the status of an allocation refused for want of memory
    frees_synchronize: bool       # the ordinary frees wait for the device's work
    copy_kind: tuple = ()
    default_streams: tuple = ()   # stream values that name the current device's stream
    managed_allocate: str = ""    # (address *, size, flags); "" where there is none
    managed_attach_global: int = 0
    no_managed_reason: str = ""   # said where there is none


class _SaysWhetherDirect(type):
    """FloorServed's metaclass: a method the core may bypass, set on or deleted from a
    driver class (a test's stand-in), makes each floor-owning driver say again whether the
    core may."""

    def __setattr__(cls, name, value) -> None:
        super().__setattr__(name, value)
        cls._method_changed(name)

    def __delattr__(cls, name) -> None:
        super().__delattr__(name)
        cls._method_changed(name)


_floor_owners: list = []   # the process's drivers that own a compiled floor (own_floor)


class FloorServed(metaclass=_SaysWhetherDirect):
    """A driver some of whose calls the core makes on a compiled floor itself (CUDA's
    ``_csrc/cuda_floor.h``, HIP's ``_csrc/hip_floor.h``), without asking the driver: only
    while the process's driver works over the library the floor was installed from with
    its own ``_FLOOR_SERVED`` methods — the tests swap in stand-in libraries and methods, on
    the instance or on the class, and take them out again, and each change says again
    (through ``set_direct``, the core's switch) whether the core may go around. The one
    owner of that rule, for both vendors."""

    _FLOOR_SERVED: tuple = ()   # the methods the core's floor calls stand in for
    _owns_floor = False         # the process's driver, after own_floor

    @classmethod
    def _method_changed(cls, name: str) -> None:
        for driver in _floor_owners:   # (a base class's method is its subclasses' too)
            if name in driver._FLOOR_SERVED and isinstance(driver, cls):
                driver._say_whether_direct()

    def __setattr__(self, name, value) -> None:
        object.__setattr__(self, name, value)   # (reading stays a plain read: hot)
        if name == "library" or name in self._FLOOR_SERVED:
            self._say_whether_direct()

    def __delattr__(self, name) -> None:
        object.__delattr__(self, name)
        if name == "library" or name in self._FLOOR_SERVED:
            self._say_whether_direct()

    def own_floor(self, library: NativeLibrary, set_direct) -> None:
        """Make this the process's driver over ``library``'s floor: the core may go around
        it while it works over that library with the methods its class has now."""
        cls = type(self)
        methods = {name: getattr(cls, name) for name in self._FLOOR_SERVED}
        object.__setattr__(self, "_floor", (library, set_direct, methods))
        object.__setattr__(self, "_owns_floor", True)
        _floor_owners.append(self)
        self.library = library

    def _say_whether_direct(self) -> None:
        floor = self.__dict__.get("_floor")
        if floor is None:
            return
        library, set_direct, methods = floor
        cls = type(self)
        set_direct(self.__dict__.get("library") is library
                   and not set(self._FLOOR_SERVED) & vars(self).keys()
                   and all(getattr(cls, name) is methods[name] for name in self._FLOOR_SERVED))

    def floor_library(self) -> NativeLibrary | None:
        """The library this driver's floor is installed from (None: it owns none): its
        calls may go to the floor only while it works over that one."""
        floor = self.__dict__.get("_floor")
        return None if floor is None else floor[0]


class VendorDriver(FloorServed):
    """The shared half of a GPU driver. Subclasses provide ``current_device``,
    ``on_device`` (a context manager making a device current), ``locate_pointer``,
    ``copy_2d_async`` and ``copy_peer_async``. Its memory is arrayport's policy
    (``gpu.held_memory``, ``self.memory``) over the memory floor written below."""

    def __init__(self, library: NativeLibrary, symbols: VendorSymbols):
        self.library = library   # replaced by tests to play a machine without the driver
        self.symbols = symbols
        # One event per context (per library: tests swap it), created on first use and
        # reused by every stream wait; see make_stream_wait.
        self._events: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._events_lock = threading.Lock()
        self.memory = DeviceMemory(self)   # the memory policy, over this driver's floor
        atexit.register(self.close)

    def cached_events(self) -> int:
        """How many events this driver keeps for reuse (one per context it waited in)."""
        return len(self._events.get(self.library, {}))

    def close(self) -> None:
        """Give back what the driver keeps for the life of the process (its reused events;
        the CUDA driver's retained primary contexts too): at exit, so that the driver sees
        everything released. Never raises. Nothing in a fork's child of a process that had
        opened the driver: what it would release is the parent's, and the locks guarding it
        may have been held by the parent's other threads at the fork."""
        if getattr(self.library, "forked", False):
            return
        self.memory.close_pools()   # the pools first: they live in the contexts
        from arrayport.gpu import staging
        staging.release(self)   # the pinned ring, after the transfers that read it
        with self._events_lock:
            events = self._events.pop(self.library, {})
        for key, (generation, event) in events.items():
            try:
                if self._generation_of(key) != generation:
                    continue   # gone with its context
                with self._context_of_event(key):
                    getattr(self.library.get(), self.symbols.event_destroy)(event)
            except Exception:   # at exit: the library may be gone; nothing to save
                pass
        self.memory.close_ordinary_holder()   # after the pinned ring let its memory go

    def _context_of_event(self, key) -> contextlib.AbstractContextManager:
        """The context a cached event (keyed by ``make_stream_wait``) was made in."""
        return self.on_device(key)

    def _generation_of(self, key) -> object:
        """What changes when the context a cached event was made in (``key``) is made
        again, its events gone with the old one: None where the vendor says nothing (HIP's
        events belong to a device, which a reset keeps)."""
        return None

    @property
    def unavailable(self) -> type[BufferError]:
        """The vendor's ``DriverUnavailable`` subclass."""
        return self.library.unavailable

    def _call(self, symbol: str, *args, what: str | None = None) -> None:
        """Call ``symbol`` in the opened library; BufferError naming it on failure."""
        self.library.check(getattr(self.library.get(), symbol)(*args), what or symbol)

    def device_count(self) -> int:
        count = ctypes.c_int(0)
        self._call(self.symbols.device_count, ctypes.byref(count))
        return count.value

    def make_stream_wait(self, ordinal: int, consumer: int, producer: int,
                         producer_ordinal: int | None = None) -> None:
        """Order ``consumer`` (a stream of device ``ordinal``) after the work queued on
        ``producer`` (of device ``producer_ordinal``, default the same) so far, on the GPU:
        record an event on the producer's stream and make the consumer's stream wait on it.
        The host never blocks. The same stream of the same device needs nothing. A default
        stream value (CUDA's 1 and 2, HIP's 0) names that stream of whichever device is
        current, so each call runs with its stream's device current."""
        self._record_and_wait(ordinal, consumer, producer, producer_ordinal)

    def _record_and_wait(self, ordinal: int, consumer: int, producer: int,
                         producer_ordinal: int | None = None) -> None:
        """``make_stream_wait`` through ctypes (CUDA's compiled floor makes the same calls
        where it serves: ``gpu.cuda``)."""
        if producer_ordinal is None:
            producer_ordinal = ordinal
        if consumer == producer and ordinal == producer_ordinal:
            return
        names = self.symbols
        # The event belongs to the producer's stream's context, where it is recorded (the
        # driver refuses a record on another context's stream); the wait may cross. One
        # event per context serves every wait: a wait uses the event's state *at the time
        # of the call*, later records do not affect it (both vendors document this), so
        # record-then-wait under a lock can reuse it at once — no create and destroy per
        # exchange.
        # An event is kept with its context's generation: one whose context was reset or
        # made again since (another library's cudaDeviceReset) went with it — dropped, never
        # used or destroyed again, and a new one made.
        with self.on_stream_context(producer, producer_ordinal) as context, self._events_lock:
            events = self._events.setdefault(self.library, {})
            key = getattr(context, "value", context)
            generation = self._generation_of(key)
            cached = events.get(key)
            if cached is not None and cached[0] == generation:
                event = cached[1]
            else:
                event = c_handle()
                self._call(names.event_create, ctypes.byref(event), names.event_disable_timing)
                events[key] = (generation, event)
            self._call(names.event_record, event, producer)
            self.wait_for_event(ordinal, consumer, event)

    def wait_for_event(self, ordinal: int, stream: int, event: int) -> None:
        """Order ``stream`` (of device ``ordinal``) after ``event``, someone else's (an
        Arrow producer's sync event): the stream waits on the GPU, the host never blocks."""
        if self.is_default_stream(stream):   # a default stream: the device's own, current
            with self.on_device(ordinal):
                self._call(self.symbols.stream_wait_event, stream, event, 0)
        else:
            self._call(self.symbols.stream_wait_event, stream, event, 0)

    def record_event(self, ordinal: int, stream: int) -> OwnedEvent:
        """A new event recorded on ``stream`` (of device ``ordinal``) now, for a consumer
        that waits on it later (an Arrow device export's sync event). Its own, not the one
        ``make_stream_wait`` reuses (a later record would move that one); destroyed, in
        its stream's context, when the returned OwnedEvent goes."""
        names = self.symbols
        event = c_handle()
        with self.on_stream_context(stream, ordinal) as context:
            # The event's context, kept: the stream may be destroyed before the consumer
            # releases the event, and a destroyed stream has no context to ask.
            key = getattr(context, "value", context)
            self._call(names.event_create, ctypes.byref(event), names.event_disable_timing)
            try:
                self._call(names.event_record, event, stream)
            except BaseException:
                self._call(names.event_destroy, event)
                raise

        def destroy(handle: int) -> None:
            with self._context_of_event(key):
                self._call(names.event_destroy, handle)
        return OwnedEvent(event, destroy)

    def synchronize(self, ordinal: int, stream: int) -> None:
        """Block the host until ``stream``'s work so far is done: only where the host itself
        must read the data (a copy to host memory, a CPU export of pinned memory)."""
        with self.on_device(ordinal):
            self._call(self.symbols.stream_synchronize, stream)

    def synchronize_event(self, ordinal: int, event: int) -> None:
        """Block the host until ``event`` (someone else's, recorded on a stream of device
        ``ordinal``) has completed: only where arrayport itself must read host memory the
        event guards (a pinned Arrow validity bitmap, counted during the import)."""
        with self.on_device(ordinal):
            self._call(self.symbols.event_synchronize, event)

    # The GpuDriver's allocations: arrayport's memory policy decides (``gpu.held_memory``,
    # ``self.memory``), over this driver's memory floor (below).

    def allocate_device(self, ordinal: int, nbytes: int, managed: bool = False) -> OwnedMemory:
        """``nbytes`` of device memory on device ``ordinal`` (managed memory where asked and
        the vendor has it), freed on the same device when the last View on it goes
        (``gpu.held_memory`` says when)."""
        return self.memory.allocate_device(ordinal, nbytes, managed)

    def allocate_temporary(self, ordinal: int, nbytes: int, stream: int) -> OwnedMemory:
        """Device memory that only work on ``stream`` will touch (a copy's staging)."""
        return self.memory.allocate_temporary(ordinal, nbytes, stream)

    def allocate_result(self, ordinal: int, nbytes: int, stream: int) -> OwnedMemory:
        """Device memory for a copy's result, made on ``stream``."""
        return self.memory.allocate_result(ordinal, nbytes, stream)

    def allocate_pinned(self, nbytes: int) -> OwnedMemory:
        """``nbytes`` of page-locked host memory, portable: usable from every device."""
        return self.memory.allocate_pinned(nbytes)

    def allocation_bytes(self, ordinal: int, address: int) -> int:
        """The size of the whole allocation the memory of device ``ordinal`` at ``address``
        lies in, where the vendor says; 0 where it cannot (here: HIP's frees wait, so
        nothing is kept for it)."""
        return 0

    def release_cached_memory(self) -> int:
        """Give back to the driver the device memory arrayport keeps for reuse; the bytes
        given back."""
        return self.memory.release_cached_memory()

    def max_pitch(self, ordinal: int) -> int:
        """The largest row pitch, in bytes, a 2-D copy on device ``ordinal`` accepts (a
        device attribute; 2**31 - 1 on the GPUs of today)."""
        value = ctypes.c_int(0)
        self._call(self.symbols.device_attribute, ctypes.byref(value),
                   self.symbols.max_pitch_attribute, ordinal)
        return value.value

    def copy_async(self, ordinal: int, dst: int, src: int, nbytes: int, stream: int) -> None:
        """``nbytes`` from ``src`` to ``dst`` (any memory the driver can address: device,
        pinned, managed or pageable host) enqueued on ``stream`` of device ``ordinal``.
        From pageable host memory the call returns once the source has been read."""
        with self.on_device(ordinal):
            self._call(self.symbols.copy, dst, src, nbytes, *self.symbols.copy_kind, stream)

    # The memory floor (``gpu.interface.MemoryFloor``): what the policy asks, the calls
    # both vendors share; CUDA adds its pools (``gpu.cuda_memory``).

    @property
    def memory_key(self) -> NativeLibrary:
        return self.library

    def check(self, status: int, call: str) -> None:
        self.library.check(status, call)

    def refused_for_memory(self, status: int) -> bool:
        return status == self.symbols.out_of_memory

    def frees_wait_for_work(self) -> bool:
        """Whether the ordinary frees wait for the device's work (HIP's ``hipFree`` and
        ``hipHostFree`` document an implicit device synchronization; CUDA's do not)."""
        return self.symbols.frees_synchronize

    def device_memory(self, ordinal: int) -> int:
        """Device ``ordinal``'s memory in bytes (8 GiB where the vendor does not say)."""
        return 8 << 30

    def stream_is_on(self, stream: int, ordinal: int) -> bool:
        """Whether ``stream`` surely runs on device ``ordinal``: here, a default stream
        (the current device's); another, where the vendor cannot say, no."""
        return self.is_default_stream(stream)

    def devices_at_work(self) -> tuple[int, ...]:
        """The devices whose work may read memory any device can address: every device."""
        return tuple(range(self.device_count()))

    def synchronize_device(self, ordinal: int) -> None:
        """Block the host until device ``ordinal``'s work has finished."""
        with self.on_device(ordinal):
            self._call(self.symbols.device_synchronize,
                       what=f"{self.symbols.device_synchronize} (device {ordinal})")

    def allocate_ordinary(self, ordinal: int, nbytes: int,
                          managed: bool) -> tuple[int, int, str]:
        name = self.symbols.managed_allocate if managed else self.symbols.allocate
        if not name:
            raise self.unavailable(f"{self.library.label}: managed allocations are not "
                                   f"available{self.symbols.no_managed_reason}")
        address = c_address(0)
        with self.on_device(ordinal):
            status = getattr(self.library.get(), name)(
                ctypes.byref(address), max(nbytes, 1),
                *((self.symbols.managed_attach_global,) if managed else ()))
        return status, address.value or 0, f"{name}({nbytes})"

    def free_ordinary(self, ordinal: int, pointer: int) -> None:
        with self.on_device(ordinal):   # the driver frees in a context, and says so
            self._call(self.symbols.free, pointer, what=f"{self.symbols.free}({pointer:#x})")

    def allocate_host(self, nbytes: int) -> tuple[int, int, str]:
        names = self.symbols
        address = ctypes.c_void_p()
        # Pinned allocations and their free need a current context (any: the memory is
        # portable), which a thread that never touched the GPU does not have.
        with self.on_device(0):
            status = getattr(self.library.get(), names.host_allocate)(
                ctypes.byref(address), max(nbytes, 1), names.host_allocate_portable)
        return status, address.value or 0, f"{names.host_allocate}({nbytes})"

    def free_host(self, pointer: int) -> None:
        with self.on_device(0):
            self._call(self.symbols.host_free, pointer,
                       what=f"{self.symbols.host_free}({pointer:#x})")

    def allocation_start(self, pointer: int) -> int:
        """Where the driver allocation holding ``pointer`` starts; 0 where it knows none."""
        return 0

    def has_memory_pools(self, ordinal: int) -> bool:
        """Whether device ``ordinal`` has stream-ordered memory pools arrayport can make
        and allocate from (here: none, a vendor without them)."""
        return False

    def peers_reading(self, ordinal: int) -> tuple[int, ...]:
        return ()

    def create_pool(self, ordinal: int, keep_bytes: int, peers: tuple[int, ...]) -> int:
        raise self.unavailable(f"{self.library.label}: memory pools are not available")

    def destroy_pool(self, pool: int) -> None:
        raise self.unavailable(f"{self.library.label}: memory pools are not available")

    def trim_pool(self, ordinal: int, pool: int) -> None:
        raise self.unavailable(f"{self.library.label}: memory pools are not available")

    def pool_reserved(self, pool: int) -> int:
        return 0

    def allocate_in_stream_order(self, ordinal: int, pool: int | None, nbytes: int,
                                 stream: int) -> tuple[int, int, str]:
        raise self.unavailable(f"{self.library.label}: stream-ordered allocations are not "
                               f"available")

    def free_in_stream_order(self, ordinal: int, pointer: int, stream: int | None) -> None:
        raise self.unavailable(f"{self.library.label}: stream-ordered allocations are not "
                               f"available")

    def publish_pool(self, ordinal: int, pool, release, room) -> None:
        """Tell the core's own copies which pool serves device ``ordinal`` (here: the core
        has no copies of this vendor's)."""

    def publish_ordinary_results(self, ordinal: int, release, at_once: bool) -> None:
        """Tell the core's own copies that results on device ``ordinal`` (without pools)
        are ordinary memory given back by ``release(address, nbytes, keep, keep_bytes)`` —
        the vendor's free at once where ``at_once``; ``release`` None: no longer (ordinal
        -1: no device's). Here: the core has no such copies of this vendor's."""

    # The vendor's own half (see the class docstring).
    def current_device(self) -> int:
        raise NotImplementedError

    def on_device(self, ordinal: int) -> contextlib.AbstractContextManager:
        raise NotImplementedError

    def is_default_stream(self, stream: int) -> bool:
        """Whether ``stream`` is a default-stream value, which names a stream of whichever
        device is current rather than one stream."""
        return stream in self.symbols.default_streams

    def on_stream_context(self, stream: int, ordinal: int) -> contextlib.AbstractContextManager:
        """The context ``stream`` belongs to, current for the duration (device ``ordinal``
        for the default streams, which belong to whichever context is current)."""
        return self.on_device(ordinal)

    def locate_pointer(self, ptr: int) -> tuple[int, int]:
        raise NotImplementedError

    def copy_2d_async(self, ordinal: int, dst: int, dst_pitch: int, src: int, src_pitch: int,
                      width: int, height: int, stream: int) -> None:
        raise NotImplementedError

    def copy_peer_async(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int,
                        nbytes: int, stream: int) -> None:
        raise NotImplementedError

    def has_kernel(self, ordinal: int, module: str, kernel: str) -> bool:
        """Whether one of arrayport's device kernels can be launched on device ``ordinal``:
        never for this vendor (see ``launch_kernel``)."""
        return False

    def launch_kernel(self, ordinal: int, module: str, kernel: str, grid: tuple, block: tuple,
                      params, stream: int) -> bool:
        """Launch one of arrayport's device kernels (``gpu.kernels``); False, launching
        nothing, where this vendor or device cannot load them — HIP cannot load PTX, so its
        copies keep the DMA path (a capability, as managed memory is)."""
        return False

    # Sharing device memory with other processes (``gpu.ipc``): CUDA's (``gpu.cuda_ipc``);
    # a vendor without it refuses, naming the host route.
    def _no_sharing(self):
        return BufferError(f"share: device memory of {self.library.description} cannot be "
                           f"shared with other processes yet (CUDA's can); share a host "
                           f"copy: view.copy(device='cpu').share()")

    def device_uuid(self, ordinal: int) -> bytes:
        raise self._no_sharing()

    def export_allocation(self, ordinal: int, pointer: int) -> tuple[bytes, int, int] | None:
        raise self._no_sharing()

    def sharing_stream(self, ordinal: int) -> int:
        raise self._no_sharing()

    def record_interprocess_event(self, ordinal: int, stream: int) -> bytes:
        raise self._no_sharing()

    def open_allocation(self, ordinal: int, memory: bytes) -> tuple[int, int]:
        raise self._no_sharing()

    def close_allocation(self, ordinal: int, pointer: int) -> None:
        raise self._no_sharing()

    def wait_for_exporter(self, ordinal: int, event: bytes) -> int:
        raise self._no_sharing()

    def allocate_shareable(self, ordinal: int, nbytes: int, stream: int):
        raise self._no_sharing()

    def pool_descriptor(self, ordinal: int) -> tuple[int, int]:
        raise self._no_sharing()

    def drop_sharing_pools(self, busy: set[int]) -> int:
        return 0                        # none made

    def export_pool_block(self, ordinal: int, pointer: int) -> bytes | None:
        raise self._no_sharing()

    def import_pool(self, ordinal: int, descriptor: int) -> int:
        raise self._no_sharing()

    def grant_pool_access(self, ordinal: int, pool: int, readonly: bool) -> bool:
        raise self._no_sharing()

    def drop_imported_pool(self, pool: int) -> None:
        raise self._no_sharing()

    def import_pool_block(self, ordinal: int, pool: int, block: bytes) -> int:
        raise self._no_sharing()

    def free_imported(self, ordinal: int, pointer: int) -> None:
        raise self._no_sharing()

    def sharing_kept(self) -> tuple[int, int]:
        return 0, 0
