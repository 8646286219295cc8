"""A GPU vendor library (the CUDA driver, the HIP runtime) opened on first use, with ctypes.

Shared by ``gpu.cuda`` and ``gpu.hip`` (through ``gpu.vendor.VendorDriver``): both open their library lazily — importing
arrayport never loads one — once per process under a lock, declare the C signatures they
call, and turn a missing library or a failed initialisation into one remembered message,
raised (as the driver's ``…Unavailable`` error, a ``BufferError``) on every request. The
child of a fork refuses a library its parent had opened (``NativeLibrary._forked``).
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections.abc import Callable

# C types the drivers' signatures use.
c_handle = ctypes.c_void_p       # streams, events, contexts
c_address = ctypes.c_uint64      # CUdeviceptr; device addresses as integers
c_size = ctypes.c_size_t


class NativeLibrary:
    """A shared library (``description``, e.g. "the CUDA driver"), opened with the first
    name in ``names`` that loads; errors start with ``label:``.

    ``signatures``: {function: (restype, [argtypes])}, declared once. ``initialise(lib)``
    returns None when the library is usable, else a message saying why not."""

    def __init__(self, label: str, description: str, names: tuple[str, ...],
                 unavailable: type[BufferError], signatures: dict,
                 initialise: Callable[[ctypes.CDLL], str | None]):
        self.label = label
        self.description = description
        self._names = names
        self.unavailable = unavailable   # the vendor's DriverUnavailable subclass
        self._signatures = signatures
        self._initialise = initialise
        self._lock = threading.Lock()
        self._library: ctypes.CDLL | None = None
        self._failure: str | None = None
        self.forked = False   # a fork's child of a process that had opened it: never used
        _libraries.add(self)

    def get(self) -> ctypes.CDLL:
        """The initialised library; the ``unavailable`` error when there is none."""
        library = self._library
        if library is not None:
            return library
        with self._lock:
            if self._library is None and self._failure is None:
                self._library, self._failure = self._open()
        if self._library is None:
            raise self.unavailable(f"{self.label}: {self._failure}")
        return self._library

    def _open(self) -> tuple[ctypes.CDLL | None, str | None]:
        errors = []
        for name in self._names:
            try:
                library = ctypes.CDLL(name)
            except OSError as error:
                errors.append(str(error))
                continue
            try:
                for function, (restype, argtypes) in self._signatures.items():
                    entry = getattr(library, function)
                    entry.restype, entry.argtypes = restype, argtypes
            except AttributeError as error:
                return None, f"{name} is too old (it lacks {error})"
            problem = self._initialise(library)
            return (None, problem) if problem else (library, None)
        return None, (f"{self.description} ({' or '.join(self._names)}) cannot be loaded: "
                      f"{'; '.join(errors)}")

    def _forked(self) -> None:
        """In the child of a fork: a library the parent had opened is not this process's to
        use — CUDA's state does not survive a fork (any use is undefined; HIP's the same) —
        so every later request is refused, saying why and what to do. One the parent never
        opened the child may open as its own."""
        self._lock = threading.Lock()   # the parent's may have been held by another thread
        if self._library is not None:
            self.forked = True   # the drivers' close and finalizers leave it alone
            self._library = None
            self._failure = (f"this process is a fork of one that had already used "
                             f"{self.description}, which a forked child cannot use (its state "
                             f"does not survive a fork); start worker processes with "
                             f"multiprocessing's 'spawn' or 'forkserver' method")

    def check(self, status: int, call: str) -> None:
        """BufferError naming ``call`` when a driver call did not succeed."""
        if status != 0:
            raise BufferError(f"{self.label}: {call} failed with error {status}")


# Every vendor library made, so that a fork's child refuses the ones its parent had opened.
_libraries: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for library in list(_libraries):
        library._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class OwnedMemory:
    """Memory a driver allocated for arrayport (device or pinned host), released by
    ``release(address)`` when the last View on it goes — ``release(address, keep,
    keep_bytes)`` where ``keep`` (a tuple) was set: what must stay alive until the memory
    is really freed (a copy's source, which the copy's transfer may still read), and the
    bytes that keeps allocated (the whole allocation a small source View lies in), which
    count toward how much is held before a return.

    Releasing is not freeing at once: a free call does not promise to wait for work still
    using the memory (CUDA's ``cuMemFree`` "may" synchronize, ``cuMemFreeHost`` promises
    nothing), so each driver's ``release`` orders the free after that work — in a stream's
    order, or after a synchronization of the devices that may read it (``gpu.held_memory``);
    HIP's ``hipFree``/``hipHostFree`` document an implicit device synchronization."""

    def __init__(self, address: int, nbytes: int, release: Callable[..., None],
                 free: Callable[[int], None] | None = None):
        self.address, self.nbytes, self._release = address, nbytes, release
        self._free = free   # the driver's free itself, for free_now (None: release)
        self.keep: tuple = ()
        self.keep_bytes = 0

    def free_now(self) -> None:
        """Free the memory at once — for an owner that has itself waited for all the work
        using it (the pinned ring, after its transfers' events): nothing held, no wait."""
        if self.address:
            address, self.address, self.keep = self.address, 0, ()
            (self._free or self._release)(address)

    def __del__(self):
        if self.address:
            try:   # at interpreter exit the driver may be gone (and this module's globals)
                if self.keep:
                    self._release(self.address, self.keep, self.keep_bytes)
                else:
                    self._release(self.address)
            except Exception:
                pass
            self.address = 0
            self.keep = ()


class OwnedEvent:
    """An event a driver created and recorded for someone who waits on it later (an Arrow
    device export's sync event), destroyed by ``release(handle)`` when this goes.
    ``address`` is where the handle is stored: what a C API that wants a pointer to an
    event (Arrow's ``sync_event``, a ``CUevent*``) is given."""

    def __init__(self, handle: ctypes.c_void_p, release: Callable[[int], None]):
        self._handle, self._release = handle, release
        self.address = ctypes.addressof(handle)

    @property
    def handle(self) -> int:
        return self._handle.value or 0

    def __del__(self):
        if self._handle.value:
            try:   # at interpreter exit the driver may be gone (and this module's globals)
                self._release(self._handle.value)
            except Exception:
                pass
            self._handle.value = None
