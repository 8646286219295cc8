"""Views in shared memory: ``View.share()``, ``View.from_shared(handle)`` and
``arrayport.empty_shared(shape, dtype)``.

``view.share()`` copies the View's host data once into a new shared-memory segment and
returns a ``SharedHandle`` — a small picklable description (where the segment is, byte
count, type, shape, read-only). ``View.from_shared(handle)``, in any process of the same
user on the machine (the sharing one too), maps the same pages: a zero-copy View whose
writes every other mapping sees, unless the segment is read-only. ``empty_shared`` makes
the segment first — a writable, zero-filled View of it to fill in place — and its
``share()`` hands out that segment without a copy.

Two kinds of segment; this module owns the choice (``_KIND``) and every rule below:

- **"memfd"** (Linux): an anonymous ``memfd_create`` file that the creator holds open;
  other processes open it as ``/proc/<pid>/fd/<fd>``. It is **sealed by the kernel** before
  the handle exists: never shrunk or grown (so no mapping can meet a truncated file and
  die of SIGBUS), and a read-only share is sealed against writes too — no process, root
  included, can map it writable or write it, whatever a handle says. The seals, not the
  handle's ``readonly`` field, are the truth: a handle that claims a sealed segment is
  writable is refused.
- **"posix-shm"** (elsewhere): a ``shm_open`` name. Read-only is enforced by the mode
  (``0o400`` once written), which its owner could change back; a reader whose segment is
  truncated by another process dies of SIGBUS. Both are documented in docs/processes.md.

Lifetime rules (docs/processes.md), decided here:
- The **creator owns the segment**. It goes when the creator calls ``handle.unlink()``
  or ends, however it ends: a memfd closes with its process (SIGKILL included); a
  posix-shm name is unlinked at exit (``atexit``) or by Python's multiprocessing resource
  tracker after a kill.
- **Pages outlive the segment's name**: a View already attached keeps its mapping (and the
  data) until it is garbage-collected. Attaching afterwards fails with a ``BufferError``
  saying the segment is gone — attach while the creator lives.
- Attaching processes never register or own the segment; they only map it.
- Names are ``/arrayport-`` plus 128 random bits (``secrets``); a memfd is found by the
  creator's pid and descriptor and must carry that name, so a stale or forged location
  (a reused pid or descriptor) is refused rather than mapped.
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import re
import secrets
import threading
from typing import NamedTuple

from arrayport import _core
from arrayport.dtypes import DType

try:
    import fcntl                     # the seals: imported with the module, not on first use
except ImportError:                  # (a process may drop privileges in between)
    fcntl = None

__all__ = ["SharedHandle", "SharedItem", "empty_shared", "share", "from_shared"]

_NAME = re.compile(r"/arrayport-[0-9a-f]{32}")
# The kind this machine creates: sealed memfds where the kernel has them.
_KIND = "memfd" if hasattr(os, "memfd_create") and hasattr(os, "MFD_ALLOW_SEALING") \
    and fcntl is not None else "posix-shm"
_KINDS = ("memfd", "posix-shm")

_created: dict[str, tuple[int, int | None]] = {}  # live segments made here: (pid, memfd)
_ever_created: set[str] = set()    # every name this process created (unlink is idempotent)
_created_lock = threading.Lock()


def _posix_shm():
    try:
        import _posixshmem
    except ImportError:
        raise BufferError("shared: POSIX shared memory is not available on this platform")
    return _posixshmem


class SharedItem(NamedTuple):
    """A shared View's element type, field by field as DLPack's ``DLDataType`` has it
    (``handle.dtype`` is the same as an ``arrayport.DType``)."""

    code: int        #: DLPack's type code (0 int, 1 uint, 2 float, 4 bfloat, 5 complex, ...)
    bits: int        #: bits per lane (64 for float64 and for complex64)
    lanes: int       #: vector lanes, 1 for every ordinary type
    padded: bool     #: sub-byte types (float4/float6) stored one per byte, not packed


class SharedHandle:
    """Where a shared View lives and how to read it; picklable, a few hundred bytes.
    ``View.from_shared(handle)`` maps it; ``handle.unlink()`` (creator only) removes the
    segment early."""

    __slots__ = {
        "kind": "The mechanism: \"memfd\" (Linux, kernel-sealed) or \"posix-shm\".",
        "name": "The segment's name (``/arrayport-`` and 128 random bits).",
        "nbytes": "Bytes of data in the segment.",
        "item": "The element type as a SharedItem(code, bits, lanes, padded), DLPack's "
                "DLDataType fields (``handle.dtype`` gives it as a DType).",
        "shape": "The View's shape.",
        "strides": "Byte strides, or None for C order.",
        "readonly": "Whether the segment is read-only (for a memfd, sealed by the kernel).",
        "pid": "The creating process (a memfd is opened through it), or None.",
        "fd": "The creator's descriptor of a memfd, or None.",
    }

    def __init__(self, kind, name, nbytes, item, shape, strides, readonly, pid=None,
                 fd=None):
        self.kind, self.name, self.nbytes = kind, name, nbytes
        self.item, self.shape, self.strides, self.readonly = item, shape, strides, readonly
        self.pid, self.fd = pid, fd

    def __reduce__(self):
        return (SharedHandle, (self.kind, self.name, self.nbytes, self.item, self.shape,
                               self.strides, self.readonly, self.pid, self.fd))

    @property
    def dtype(self) -> DType:
        """The element type, as an ``arrayport.DType``."""
        code, bits, lanes, padded = self.item
        return DType(code, bits, lanes, padded=padded)

    def __repr__(self):
        dtype = self.dtype
        return (f"<arrayport.SharedHandle {dtype.name}{list(self.shape)} {self.nbytes} bytes "
                f"in {self.kind} {self.name}{' readonly' if self.readonly else ''}>")

    def unlink(self) -> None:
        """Remove the segment now (the creating process only; idempotent).

        Views already attached keep their pages; new ``View.from_shared`` calls fail.

        Returns
        -------
        None
        """
        with _created_lock:
            created_here = self.name in _ever_created
            owner = _created.get(self.name)
            if owner is not None and owner[0] == os.getpid():
                del _created[self.name]
            else:
                owner = None
        if not created_here:
            raise BufferError(f"shared: {self.name} was created by another process; only its "
                              f"creator unlinks it")
        if owner is not None:
            _release(self.name, owner[1])


def _release(name: str, memfd: int | None) -> None:
    """The creator gives the segment up: closes its memfd, or unlinks its posix-shm name."""
    if memfd is not None:
        os.close(memfd)
        return
    from multiprocessing import resource_tracker
    try:
        _posix_shm().shm_unlink(name)
    except FileNotFoundError:
        pass
    resource_tracker.unregister(name, "shared_memory")


@atexit.register
def _release_everything_created() -> None:
    with _created_lock:
        owned = [(name, fd) for name, (pid, fd) in _created.items() if pid == os.getpid()]
        _created.clear()
    for name, fd in owned:
        try:
            _release(name, fd)
        except Exception:   # at exit: the tracker may be gone; it cleans up on its own
            pass


class _Segment(mmap.mmap):
    """This process's writable mapping of a segment ``empty_shared`` made: the owner of its
    View, and where ``share()`` finds the segment's handle (``handle``, ``address``)."""

    handle: SharedHandle
    address: int
    readonly_after: bool


def empty_shared(shape, dtype="float64", *, readonly_after: bool = False, device=None):
    """A writable, zero-filled host View in a new shared-memory segment, to fill in place;
    its ``share()`` hands out that segment — no copy.

    Parameters
    ----------
    shape : int or tuple of int
        The View's shape (C order).
    dtype : str, DType or numpy.dtype, optional
        Its element type (default float64); whole-byte or padded types.
    readonly_after : bool, optional
        ``True``: the handles ``share()`` gives are read-only — other processes map the
        segment for reading only — while this process keeps writing through its View.
        Advisory: the segment itself cannot be sealed against writes while this process
        holds a writable mapping, so a process that alters its handle maps it writable;
        for a read-only segment the kernel enforces, ``share()`` a copy (``v.copy()``).
    device : str, optional
        ``"cuda:N"``: a View of CUDA device memory that CUDA can export (``cuMemAlloc``), not
        zero-filled (as ``torch.empty``), whose ``share()`` needs no copy (gpu.ipc); None or
        ``"cpu"``: a host segment.

    Returns
    -------
    View
        Writable, ``protocol == "shared"``; the segment lives until ``handle.unlink()`` or
        this process ends, as ``share()``'s segments do.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> v = ap.empty_shared((2, 3), "float32")
    >>> np.asarray(v)[:] = 7                    # filled in place
    >>> handle = v.share()                      # the same segment, no copy
    >>> float(np.asarray(ap.View.from_shared(handle))[1, 2])
    7.0
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if device is not None and str(device) != "cpu":
        return _empty_on_device(shape, dtype, device)
    if not all(type(extent) is int and extent >= 0 for extent in shape):
        raise ValueError(f"empty_shared: shape must be non-negative ints, got {shape!r}")
    dtype = DType(dtype)
    if dtype.itemsize is None:
        raise ValueError(f"empty_shared: packed {dtype.name} has no whole-byte elements; "
                         f"use DType({dtype.name!r}, padded=True)")
    item = SharedItem(int(dtype.code), dtype.bits, dtype.lanes, dtype.padded)
    try:   # counted by the View's own rules, before any segment is made
        nbytes = _core.layout_nbytes(shape, tuple(item), "empty_shared")
    except BufferError as error:
        raise ValueError(str(error)) from None
    with _new_segment(max(nbytes, 1)) as (kind, name, descriptor, memfd):
        pages = _mapped(_Segment, descriptor, max(nbytes, 1))
        _seal(descriptor, kind, False)   # fixed size; never write-sealed: this process writes
    pages.handle = SharedHandle(kind, name, nbytes, item, shape, None, False,
                                os.getpid() if memfd is not None else None, memfd)
    pages.readonly_after = bool(readonly_after)
    view = _core.view_over_buffer(pages, tuple(item), shape, None, False, "shared")
    pages.address = view.ptr
    return view


def _empty_on_device(shape, dtype, device):
    """``empty_shared(..., device="cuda:N")``: device memory ``share()`` exports as it is
    (``gpu.ipc.empty_device``)."""
    from arrayport.devices import Device
    from arrayport.gpu import ipc
    target = Device(device)
    if int(target.type) != 2:
        raise ValueError(f"empty_shared: device must be 'cpu' or 'cuda:N', got {device!r}")
    if not all(type(extent) is int and extent >= 0 for extent in shape):
        raise ValueError(f"empty_shared: shape must be non-negative ints, got {shape!r}")
    dtype = DType(dtype)
    item = (int(dtype.code), dtype.bits, dtype.lanes, dtype.padded)
    try:
        nbytes = _core.layout_nbytes(shape, item, "empty_shared")
    except BufferError as error:
        raise ValueError(str(error)) from None
    return ipc.empty_device(shape, dtype, target.id, nbytes)


def _mapped(mapping, descriptor: int, size: int):
    """``mapping(descriptor, size)`` (an mmap), or MemoryError saying what could not be
    mapped (no room in memory or in the address space)."""
    try:
        return mapping(descriptor, size)
    except OSError as error:
        raise MemoryError(f"shared: cannot map {size} bytes of shared memory: "
                          f"{error.strerror}") from None


@contextlib.contextmanager
def _new_segment(size: int):
    """A new segment of ``size`` bytes of this machine's kind, registered as this process's,
    for the block to fill and seal: yields (kind, name, an open descriptor, the memfd kept
    open or None). A failure anywhere, the block's included, leaves nothing; after the
    block a posix-shm descriptor is closed (its name is the segment; a memfd stays open)."""
    name = "/arrayport-" + secrets.token_hex(16)
    kind = _KIND
    if kind == "memfd":
        descriptor = os.memfd_create(name[1:], os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    else:
        descriptor = _posix_shm().shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR,
                                           mode=0o600)
    memfd = descriptor if kind == "memfd" else None
    try:
        _register(name, memfd)
        os.ftruncate(descriptor, size)
        yield kind, name, descriptor, memfd
    except BaseException:
        if memfd is None:
            os.close(descriptor)
        SharedHandle(kind, name, 0, SharedItem(1, 8, 1, False), (), None, False).unlink()
        raise
    if memfd is None:
        os.close(descriptor)


def _segment_of(view, readonly):
    """The handle of the segment ``view`` is all of (an ``empty_shared`` View), as
    ``share(view, readonly)`` hands it out; None for any other View."""
    pages = view.owner
    if not isinstance(pages, _Segment):
        return None
    handle = pages.handle
    if (view.ptr != pages.address or not view.is_c_contiguous or view.shape != handle.shape
            or view.dtype != handle.dtype):
        return None                      # a part of it, or another view of it: copied
    with _created_lock:
        if handle.name not in _created:  # unlinked: no process can attach it any more
            return None                  # (a new segment, by a copy)
    if pages.readonly_after and readonly is False:
        raise ValueError("share: this View was made with empty_shared(readonly_after=True): "
                         "its handles are read-only")
    readonly = pages.readonly_after or view.readonly if readonly is None else bool(readonly)
    return SharedHandle(handle.kind, handle.name, handle.nbytes, handle.item, handle.shape,
                        None, readonly, handle.pid, handle.fd)


def share(view, readonly=None) -> SharedHandle:
    """Copy ``view`` (host-readable memory) once into a new shared-memory segment; the
    handle's View is C-contiguous. ``readonly`` (default: the View's own flag) makes the
    segment read-only for every process (sealed by the kernel on Linux). A View
    ``empty_shared`` made is its segment already: its handle, no copy (``readonly``: the
    handle maps read-only elsewhere, advisory; the segment stays writable here) — once
    unlinked, a new segment by a copy."""
    own = _segment_of(view, readonly)
    if own is not None:
        return own
    if not view.device.type.is_host_accessible:   # device memory: CUDA IPC (gpu.ipc)
        from arrayport.gpu.ipc import share_device
        return share_device(view, readonly)
    readonly = view.readonly if readonly is None else bool(readonly)
    dtype = view.dtype
    item = SharedItem(int(dtype.code), dtype.bits, dtype.lanes, dtype.padded)
    size = max(view.nbytes, 1)       # a segment cannot be empty; the View reads nbytes of it
    with _new_segment(size) as (kind, name, descriptor, memfd):
        pages = _mapped(mmap.mmap, descriptor, size)
        with pages:
            _core.copy_into_buffer(view, pages)
        _seal(descriptor, kind, readonly)
    return SharedHandle(kind, name, view.nbytes, item, view.shape, None, readonly,
                        os.getpid() if memfd is not None else None, memfd)


def _seal(descriptor: int, kind: str, readonly: bool) -> None:
    """Fix the segment's size for good and, when read-only, its contents — by the kernel
    for a memfd (seals cannot be removed), by the mode for posix-shm."""
    if kind == "memfd":
        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        if readonly:
            seals |= fcntl.F_SEAL_WRITE   # needs no writable mapping left: ours is closed
        fcntl.fcntl(descriptor, fcntl.F_ADD_SEALS, seals)
    elif readonly:
        os.fchmod(descriptor, 0o400)


def _register(name: str, memfd: int | None) -> None:
    """The creator's claim: released at its exit; a posix-shm name also by the resource
    tracker if the creator dies (a memfd closes with its process)."""
    with _created_lock:
        _created[name] = (os.getpid(), memfd)
        _ever_created.add(name)
    if memfd is None:
        from multiprocessing import resource_tracker
        resource_tracker.register(name, "shared_memory")


def _gone(handle) -> BufferError:
    return BufferError(f"from_shared: segment {handle.name} is gone (its creator unlinked it "
                       f"or exited)")


def _check_handle(handle) -> tuple:
    if not isinstance(handle, SharedHandle):
        raise TypeError(f"from_shared: expected an arrayport.SharedHandle, got "
                        f"{type(handle).__name__}")
    if handle.kind not in _KINDS:
        raise BufferError(f"from_shared: handles of kind {handle.kind!r} are not supported")
    if not isinstance(handle.name, str) or not _NAME.fullmatch(handle.name):
        raise ValueError(f"from_shared: {handle.name!r} is not the name of an arrayport "
                         f"segment")
    if type(handle.nbytes) is not int or handle.nbytes < 0:
        raise ValueError(f"from_shared: nbytes must be an int >= 0, got {handle.nbytes!r}")
    item = handle.item
    if type(item) is SharedItem:     # ours: its iteration and length are tuple's own
        item = tuple(item)
    if (type(item) is not tuple or len(item) != 4 or any(type(x) is not int for x in item[:3])
            or type(item[3]) is not bool):
        raise ValueError(f"from_shared: item must be DLPack's (code, bits, lanes, padded), got "
                         f"{item!r}")
    if type(handle.readonly) is not bool:
        raise ValueError(f"from_shared: readonly must be a bool, got {handle.readonly!r}")
    if handle.kind == "memfd":
        for field in ("pid", "fd"):
            value = getattr(handle, field)
            if type(value) is not int or value < (1 if field == "pid" else 0):
                raise ValueError(f"from_shared: a memfd handle's {field} must be a "
                                 f"{'process id' if field == 'pid' else 'descriptor'} "
                                 f"(an int), got {value!r}")
    if handle.kind == "memfd" and (fcntl is None or not hasattr(fcntl, "F_GET_SEALS")):
        raise BufferError("from_shared: memfd segments exist only on Linux")
    return item                      # the checked element type, as a plain tuple


def _open_memfd(handle) -> tuple[int, bool]:
    """A descriptor of the memfd ``handle`` locates, checked to be that segment, and
    whether it is sealed read-only."""
    try:
        descriptor = os.open(f"/proc/{handle.pid}/fd/{handle.fd}", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        raise _gone(handle) from None
    except PermissionError:
        raise BufferError(f"from_shared: segment {handle.name} belongs to a process this "
                          f"one may not read (another user's)") from None
    try:
        # The location may be stale (a reused pid or descriptor) or forged: the file must
        # be the memfd of that name, sealed as share() seals.
        if os.readlink(f"/proc/self/fd/{descriptor}") != f"/memfd:{handle.name[1:]} (deleted)":
            raise _gone(handle)
        seals = fcntl.fcntl(descriptor, fcntl.F_GET_SEALS)
        fixed = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
        if seals & fixed != fixed:
            raise _gone(handle)
        sealed_readonly = bool(seals & fcntl.F_SEAL_WRITE)
        if sealed_readonly and not handle.readonly:
            raise BufferError(f"from_shared: segment {handle.name} is sealed read-only, but "
                              f"the handle says writable (altered after share()?); the kernel "
                              f"refuses every write to it")
        if not handle.readonly:   # the same file, opened again for writing
            writable = os.open(f"/proc/self/fd/{descriptor}", os.O_RDWR | os.O_CLOEXEC)
            os.close(descriptor)
            descriptor = writable
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, sealed_readonly


def from_shared(handle) -> object:
    """A zero-copy View of the segment ``handle`` locates, mapped into this process (of the
    device memory, for a CUDA handle: gpu.ipc)."""
    if not isinstance(handle, SharedHandle) and \
            str(getattr(handle, "kind", "")).startswith("cuda-"):   # gpu.ipc's kinds
        from arrayport.gpu.ipc import open_device
        return open_device(handle)
    item = _check_handle(handle)
    readonly = handle.readonly
    if handle.kind == "memfd":
        # Read-only when the kernel says so, or when the handle asks for it of a writable
        # segment (the descriptor is then opened for reading only, and so is the mapping).
        descriptor, sealed_readonly = _open_memfd(handle)
        readonly = readonly or sealed_readonly
    else:
        flags = os.O_RDONLY if handle.readonly else os.O_RDWR
        try:
            descriptor = _posix_shm().shm_open(handle.name, flags, mode=0o600)
        except FileNotFoundError:
            raise _gone(handle) from None
        except PermissionError:
            raise BufferError(f"from_shared: segment {handle.name} is read-only, but the "
                              f"handle says writable") from None
    try:
        size = os.fstat(descriptor).st_size
        if size != max(handle.nbytes, 1):
            raise BufferError(f"from_shared: segment {handle.name} holds {size} bytes, the "
                              f"handle says {handle.nbytes}")
        pages = mmap.mmap(descriptor, size, access=mmap.ACCESS_READ if readonly
                          else mmap.ACCESS_WRITE)
    finally:
        os.close(descriptor)
    return _core.view_over_buffer(memoryview(pages)[:handle.nbytes], item,
                                  handle.shape, handle.strides, readonly, "shared")
