"""Views in POSIX shared memory: ``View.share()`` and ``View.from_shared(handle)``.

``view.share()`` copies the View's host data once into a new shared-memory segment and
returns a ``SharedHandle`` — a small picklable description (segment name, byte count, type,
shape, strides, read-only). ``View.from_shared(handle)``, in any process on the machine (the
sharing one too), maps the same pages: a zero-copy View whose writes every other mapping
sees, unless the handle is read-only (then every mapping is read-only).

Lifetime rules (docs/processes.md), decided here:
- The **creator owns the name**. The segment is unlinked when the creator calls
  ``handle.unlink()``, when the creator exits normally (``atexit``), or — if it is killed
  (``SIGKILL``) — by Python's multiprocessing resource tracker, a helper process that
  unlinks what a dead process registered. Nothing is left in ``/dev/shm`` either way.
- **Pages outlive the name**: a View already attached keeps its mapping (and the data)
  after the unlink, until it is garbage-collected. Attaching after the unlink fails with a
  ``BufferError`` saying the segment is gone — attach while the creator lives.
- Attaching processes never register the segment (Python 3.11's ``SharedMemory`` does, and
  then unlinks it under the creator's feet when they exit); they only map it.
- Names are ``/arrayport-`` plus 128 random bits (``secrets``); segments are created
  exclusively (``O_EXCL``) with mode ``0o600``: only the same user can attach.
- The handle's ``kind`` is "posix-shm"; a CUDA IPC handle (issue 16) will be another kind.
"""

from __future__ import annotations

import atexit
import mmap
import os
import re
import secrets
import threading

from arrayport import _core
from arrayport.dtypes import DType

__all__ = ["SharedHandle", "share", "from_shared"]

_NAME = re.compile(r"/arrayport-[0-9a-f]{32}")
_created: dict[str, int] = {}      # names this process created and has not unlinked: pid
_ever_created: set[str] = set()    # every name this process created (unlink is idempotent)
_created_lock = threading.Lock()


def _posix_shm():
    try:
        import _posixshmem
    except ImportError:
        raise BufferError("shared: POSIX shared memory is not available on this platform")
    return _posixshmem


class SharedHandle:
    """Where a shared View lives and how to read it; picklable, a few hundred bytes.
    ``View.from_shared(handle)`` maps it; ``handle.unlink()`` (creator only) removes the
    name early."""

    __slots__ = {
        "kind": "The sharing mechanism: \"posix-shm\" (CUDA IPC will be another kind).",
        "name": "The segment's name (``/arrayport-`` and 128 random bits).",
        "nbytes": "Bytes of data in the segment.",
        "item": "The element type as DLPack's (code, bits, lanes, padded).",
        "shape": "The View's shape.",
        "strides": "Byte strides, or None for C order.",
        "readonly": "Whether every mapping of the segment is read-only.",
    }

    def __init__(self, kind, name, nbytes, item, shape, strides, readonly):
        self.kind, self.name, self.nbytes = kind, name, nbytes
        self.item, self.shape, self.strides, self.readonly = item, shape, strides, readonly

    def __reduce__(self):
        return (SharedHandle, (self.kind, self.name, self.nbytes, self.item, self.shape,
                               self.strides, self.readonly))

    def __repr__(self):
        dtype = DType(*self.item[:3], padded=self.item[3])
        return (f"<arrayport.SharedHandle {dtype.name}{list(self.shape)} {self.nbytes} bytes "
                f"in {self.name}{' readonly' if self.readonly else ''}>")

    def unlink(self) -> None:
        """Remove the segment's name now (the creating process only; idempotent).

        Views already attached keep their pages; new ``View.from_shared`` calls fail.

        Returns
        -------
        None
        """
        with _created_lock:
            owner = _created.pop(self.name, None)
            created_here = self.name in _ever_created
        if not created_here:
            raise BufferError(f"shared: {self.name} was created by another process; only its "
                              f"creator unlinks it")
        if owner is not None:
            _unlink(self.name)


def _unlink(name: str) -> None:
    from multiprocessing import resource_tracker
    try:
        _posix_shm().shm_unlink(name)
    except FileNotFoundError:
        pass
    resource_tracker.unregister(name, "shared_memory")


@atexit.register
def _unlink_everything_created() -> None:
    with _created_lock:
        names = [name for name, pid in _created.items() if pid == os.getpid()]
        _created.clear()
    for name in names:
        try:
            _unlink(name)
        except Exception:   # at exit: the tracker may be gone; it cleans up on its own
            pass


def share(view, readonly=None) -> SharedHandle:
    """Copy ``view`` (host-readable memory) once into a new shared-memory segment; the
    handle's View is C-contiguous. ``readonly`` (default: the View's own flag) makes every
    mapping read-only."""
    if not view.device.type.is_host_accessible:
        raise BufferError(f"shared: the View is in {view.device} memory; share a host copy "
                          f"(view.copy(device='cpu').share()) — CUDA IPC is not supported yet")
    readonly = view.readonly if readonly is None else bool(readonly)
    dtype = view.dtype
    item = (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded)
    shm = _posix_shm()
    size = max(view.nbytes, 1)       # a segment cannot be empty; the View reads nbytes of it
    name = "/arrayport-" + secrets.token_hex(16)
    descriptor = shm.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    try:
        _register(name)
        os.ftruncate(descriptor, size)
        with mmap.mmap(descriptor, size) as pages:
            _core.copy_into_buffer(view, pages)
    except BaseException:
        os.close(descriptor)
        SharedHandle("posix-shm", name, 0, item, (), None, readonly).unlink()
        raise
    os.close(descriptor)
    return SharedHandle("posix-shm", name, view.nbytes, item, view.shape, None, readonly)


def _register(name: str) -> None:
    """The creator's claim: unlinked at its exit, or by the resource tracker if it dies."""
    from multiprocessing import resource_tracker
    with _created_lock:
        _created[name] = os.getpid()
        _ever_created.add(name)
    resource_tracker.register(name, "shared_memory")


def from_shared(handle) -> object:
    """A zero-copy View of the segment ``handle`` names, mapped into this process."""
    if not isinstance(handle, SharedHandle):
        raise TypeError(f"from_shared: expected an arrayport.SharedHandle, got "
                        f"{type(handle).__name__}")
    if handle.kind != "posix-shm":
        raise BufferError(f"from_shared: handles of kind {handle.kind!r} are not supported")
    if not isinstance(handle.name, str) or not _NAME.fullmatch(handle.name):
        raise ValueError(f"from_shared: {handle.name!r} is not the name of an arrayport "
                         f"segment")
    if type(handle.nbytes) is not int or handle.nbytes < 0:
        raise ValueError(f"from_shared: nbytes must be an int >= 0, got {handle.nbytes!r}")
    flags = os.O_RDONLY if handle.readonly else os.O_RDWR
    try:
        descriptor = _posix_shm().shm_open(handle.name, flags, mode=0o600)
    except FileNotFoundError:
        raise BufferError(f"from_shared: segment {handle.name} is gone (its creator unlinked "
                          f"it or exited)") from None
    try:
        size = os.fstat(descriptor).st_size
        if size != max(handle.nbytes, 1):
            raise BufferError(f"from_shared: segment {handle.name} holds {size} bytes, the "
                              f"handle says {handle.nbytes}")
        pages = mmap.mmap(descriptor, size, access=mmap.ACCESS_READ if handle.readonly
                          else mmap.ACCESS_WRITE)
    finally:
        os.close(descriptor)
    return _core.view_over_buffer(memoryview(pages)[:handle.nbytes], handle.item,
                                  handle.shape, handle.strides, bool(handle.readonly),
                                  "shared")
