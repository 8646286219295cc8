"""The lease of one device export (``gpu.ipc``): which processes hold it, and when it ends.
This module owns the lease's format and the rule of its end; ``gpu.ipc`` keeps one per
export and asks it.

A lease is a memfd of the exporter (``arrayport-lease``), read and written with
``pread``/``pwrite`` under ``flock`` (never mapped: a process that truncates it cannot make
another die of SIGBUS):
- a header: whether any receiver ever opened it, its state (open, revoked: no new opens,
  ended), and the export's token (a stale handle whose lease descriptor number now names
  another export is refused, not counted there);
- one slot per receiving process: (pid, mappings of the export it holds, its start: a pid
  and a start name one process, ``gpu.processes``).
A receiver opens it through ``/proc/<exporter pid>/fd/<n>`` — only a process allowed to read
the exporter's descriptors can — takes a slot when it maps the memory and gives it back
after it has unmapped it.

When an export ends (``Lease.settle``, decided and written under the same ``flock`` in
which a receiver takes its slot, so that no open slips in between): once opened, when no
live process holds it — at once, or after ``linger`` seconds without holders for an export
an engine may open again (a pickle loaded twice, Ray's object store); never opened, after
``unopened_after`` seconds; revoked, when no live process holds it. A receiver that died
holding it is found gone (``gpu.processes``: no process of its pid and start; a later process
given its pid is not it) and its slot cleared.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import time

from arrayport.gpu import processes

__all__ = ["Lease", "take", "give_back", "SLOTS"]

OPEN, REVOKED, ENDED = 0, 1, 2
_HEADER = struct.Struct("=ii16s")      # ever opened, state, the export's token
_SLOT = struct.Struct("=iiQ")          # (pid, mappings held, its start)
SLOTS = 128                            # receiving processes per export
_SLOTS_AT = 32
_BYTES = _SLOTS_AT + SLOTS * _SLOT.size
_NAME = "arrayport-lease"


@contextlib.contextmanager
def _locked(descriptor: int):
    """The lease's lock for the block."""
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(descriptor, fcntl.LOCK_UN)


def _read(descriptor: int) -> bytes:
    data = os.pread(descriptor, _BYTES, 0)
    if len(data) != _BYTES:
        raise BufferError("from_shared: the export's lease was altered (not a lease's size)")
    return data


class Lease:
    """The exporter's side of one export's lease."""

    def __init__(self, token: bytes):
        try:
            self.descriptor: int | None = os.memfd_create(_NAME, os.MFD_CLOEXEC)
        except OSError as error:   # out of descriptors: too many exports alive
            raise BufferError(f"share: no lease can be made for the export: {error.strerror} "
                              f"(exports alive: revoke what no one will open)") from None
        try:
            os.ftruncate(self.descriptor, _BYTES)
            os.pwrite(self.descriptor, _HEADER.pack(0, OPEN, token), 0)
        except OSError as error:
            os.close(self.descriptor)
            raise BufferError(f"share: no lease can be made for the export: "
                              f"{error.strerror}") from None
        self.lock = threading.Lock()     # the descriptor is closed by close(), on any thread
        self.made = self.last_held = time.monotonic()

    def settle(self, linger: float, unopened_after: float) -> bool:
        """Whether the export has ended: decided now (see the module) and, if so, written,
        under the lease's lock; dead receivers' slots cleared. A lease another process is
        changing right now is not waited for (a receiver stopped in a debugger would stall
        every export): False, settled next time."""
        with self.lock:
            if self.descriptor is None:
                return True
            try:
                fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            try:
                return self._settle(linger, unopened_after)
            finally:
                fcntl.flock(self.descriptor, fcntl.LOCK_UN)

    def _settle(self, linger: float, unopened_after: float) -> bool:
        """``settle`` with the lease locked."""
        data = _read(self.descriptor)
        opened, state, token = _HEADER.unpack_from(data, 0)
        if state == ENDED:
            return True
        live = 0
        for slot in range(SLOTS):
            offset = _SLOTS_AT + slot * _SLOT.size
            pid, count, start = _SLOT.unpack_from(data, offset)
            if pid == 0:
                continue
            if count > 0 and processes.alive(pid, start):
                live += 1
            else:
                os.pwrite(self.descriptor, _SLOT.pack(0, 0, 0), offset)
        now = time.monotonic()
        if live:
            self.last_held = now
            return False
        if state == REVOKED:
            ended = True
        elif opened:
            ended = now - self.last_held >= linger
        else:
            ended = now - self.made >= unopened_after
        if ended:
            os.pwrite(self.descriptor, _HEADER.pack(opened, ENDED, token), 0)
        return ended

    def refresh(self) -> bool:
        """The export handed out again: its linger and unopened times start over. False
        where it has ended (it cannot be handed out again)."""
        with self.lock:
            if self.descriptor is None:
                return False
            with _locked(self.descriptor):
                _, state, _ = _HEADER.unpack_from(_read(self.descriptor), 0)
                if state != OPEN:
                    return False
                self.made = self.last_held = time.monotonic()
                return True

    def held_by(self, pid: int) -> bool:
        """Whether process ``pid`` — the one running now, not an earlier one whose pid it was
        given — holds the export now (a slot with a mapping or more): the test the
        exporter's descriptor server makes of who asks (``gpu.ipc_pool``). Read
        without the lease's lock (a receiver holding it, stopped in a debugger, must not
        stall the server): a slot is written whole by one ``pwrite``."""
        with self.lock:
            if self.descriptor is None:
                return False
            data = _read(self.descriptor)
        for slot in range(SLOTS):
            taker, count, start = _SLOT.unpack_from(data, _SLOTS_AT + slot * _SLOT.size)
            if taker == pid and count > 0:
                return processes.alive(pid, start)
        return False

    def revoke(self) -> None:
        """No new opens; the export ends once no live process holds it."""
        with self.lock:
            if self.descriptor is None:
                return
            with _locked(self.descriptor):
                opened, state, token = _HEADER.unpack_from(_read(self.descriptor), 0)
                if state == OPEN:
                    os.pwrite(self.descriptor, _HEADER.pack(opened, REVOKED, token), 0)

    def close(self) -> None:
        with self.lock:
            if self.descriptor is not None:
                os.close(self.descriptor)
                self.descriptor = None


def take(pid: int, lease: int, token: bytes) -> tuple[int, int]:
    """A receiver's slot in the lease of process ``pid``'s descriptor ``lease``, one mapping
    more: (the lease, opened here; the slot). BufferError where the export is gone, ended,
    revoked or another one (a stale handle), or not this process's to open."""
    path = f"/proc/{pid}/fd/{lease}"
    try:
        if os.readlink(path) != f"/memfd:{_NAME} (deleted)":
            raise BufferError(f"from_shared: the handle's lease is not an arrayport export of "
                              f"process {pid} (stale or forged)")
        descriptor = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOCTTY)
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        raise BufferError(f"from_shared: the exporting process {pid} is gone or ended this "
                          f"export") from None
    except PermissionError:
        raise BufferError(f"from_shared: process {pid} is another user's; its device memory "
                          f"is not this process's to open") from None
    except OSError as error:
        raise BufferError(f"from_shared: the handle's lease cannot be opened: "
                          f"{error.strerror}") from None
    try:
        if os.readlink(f"/proc/self/fd/{descriptor}") != f"/memfd:{_NAME} (deleted)":
            raise BufferError(f"from_shared: the handle's lease is not an arrayport export "
                              f"of process {pid} (stale or forged)")
        return descriptor, _take_slot(descriptor, pid, token)
    except OSError as error:
        os.close(descriptor)
        raise BufferError(f"from_shared: the handle's lease cannot be read: "
                          f"{error.strerror}") from None
    except BaseException:
        os.close(descriptor)
        raise


def _take_slot(descriptor: int, pid: int, token: bytes) -> int:
    """This process's slot in the lease ``descriptor`` (of process ``pid``), one more."""
    with _locked(descriptor):
        data = _read(descriptor)
        _, state, owner = _HEADER.unpack_from(data, 0)
        if owner != token:
            raise BufferError(f"from_shared: process {pid} ended that export (its lease "
                              f"now belongs to another: a stale handle)")
        if state != OPEN:
            raise BufferError(f"from_shared: process {pid} ended that export"
                              f"{' (revoked)' if state == REVOKED else ''}")
        (me, started), free = processes.me(), None
        for slot in range(SLOTS):
            taker, count, start = _SLOT.unpack_from(data, _SLOTS_AT + slot * _SLOT.size)
            if taker == me:
                if start != started:   # an ended process's, whose pid this one was given
                    count = 0
                break
            if taker == 0 and free is None:
                free = slot
        else:
            if free is None:
                raise BufferError(f"from_shared: {SLOTS} processes hold this export "
                                  f"already")
            slot, count = free, 0
        os.pwrite(descriptor, _SLOT.pack(me, count + 1, started),
                  _SLOTS_AT + slot * _SLOT.size)
        os.pwrite(descriptor, _HEADER.pack(1, state, owner), 0)
    return slot


def give_back(descriptor: int, slot: int) -> None:
    """One mapping fewer in this process's slot (after it was unmapped); the lease closed
    here."""
    try:
        with _locked(descriptor):
            offset = _SLOTS_AT + slot * _SLOT.size
            data = os.pread(descriptor, _SLOT.size, offset)
            if len(data) == _SLOT.size:
                pid, count, start = _SLOT.unpack(data)
                if (pid, start) == processes.me():   # its own slot only (another may
                    # have written there)
                    os.pwrite(descriptor, _SLOT.pack(pid, max(count - 1, 0), start), offset)
    except OSError:
        pass
    finally:
        os.close(descriptor)
