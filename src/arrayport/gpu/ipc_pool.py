"""The descriptor route of device sharing (``gpu.ipc``, issue 55): how a pool's file
descriptor reaches a receiver, and which imported pool a receiver maps a block from. This
module owns those two rules; what is shared, leased and closed stays ``gpu.ipc``'s, and the
driver calls are the driver interface's (CUDA's in ``gpu.cuda_ipc``).

Memory arrayport allocates for sharing (``empty_shared(device="cuda:N")``, and the copy
``share()`` makes of memory CUDA IPC cannot export) comes from a sharing pool per device,
made with POSIX file-descriptor handles. A block of it is exported by
``cuMemPoolExportPointer`` (64 bytes, which open nothing alone); the pool opens only through
its descriptor, and the exporter hands that out over a Unix socket of its own (Linux's
abstract namespace, named in the handle) to a process that:

- runs as the same user (``SO_PEERCRED``),
- names an export that is open (the token in its handle), and
- holds that export's lease already (``gpu.ipc_lease``: it opened the lease through
  ``/proc``, so it may read the exporter's descriptors).

Anyone else gets a refusal and no descriptor. What the descriptor then grants is the pool's,
not one block's: its holder may import any live block of the sharing pool, which holds only
memory made for sharing — never the application's other arrays (a CUDA IPC handle of a
caching allocator's segment, by contrast, maps the whole segment for any process that reads
its 64 bytes).

A receiver imports each pool of an exporter once per device (the handle names the pool by
its serial in the exporter), grants the device read-only access
(``CU_MEM_ACCESS_FLAGS_PROT_READ``: writes refused by the driver) while every share opened
from it was read-only, read-write from the first writable one on, and destroys the import
of an older pool of the exporter once none of its blocks is mapped.
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
import threading
import time

from arrayport.gpu import processes, turns

__all__ = ["serve", "socket_name", "fetch_descriptor", "acquire_pool", "release_pool",
           "imports"]

_CREDENTIALS = struct.Struct("=iII")     # struct ucred: pid, uid, gid
_REQUEST_SECONDS = 1.0                   # what a request may take the server
_ANSWER_SECONDS = 5.0                    # what the receiver waits for an answer
_ANSWERING_AT_ONCE = 64                  # requests answered at once; more are closed
_ATTEMPTS = 8      # a receiver asks a busy server this often, over 1.8 s: past the
                   # _REQUEST_SECONDS a silent asker may hold one of its answering slots
_OK = b"ok"

_server: "_DescriptorServer | None" = None
_server_lock = threading.Lock()


class _DescriptorServer:
    """The exporter's socket: one short request per connection (an export's token), answered
    with the pool's descriptor or a refusal (see the module). Each connection is answered on
    a thread of its own, its asker's user checked before anything is read: an asker that
    says nothing holds up nobody else."""

    def __init__(self, lookup):
        self.lookup = lookup
        self.pid = os.getpid()
        self.user = os.geteuid()              # the only user it answers (SO_PEERCRED's uid)
        # the exporter named as a process (pid and start, ``gpu.processes``): a receiver
        # knows when it has ended, whoever was given its pid since
        self.name = f"arrayport-{self.pid}-{processes.me()[1]}-{secrets.token_hex(8)}"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.socket.bind("\0" + self.name)
        self.socket.listen(64)
        self.answering = threading.BoundedSemaphore(_ANSWERING_AT_ONCE)
        self.thread = threading.Thread(target=self._serve, name="arrayport-ipc-descriptors",
                                       daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:                   # closed (a fork's child, or the end)
                return
            if not self.answering.acquire(blocking=False):
                connection.close()            # too many at once: the asker tries again
                continue
            try:
                threading.Thread(target=self._answer_once, args=(connection,), daemon=True,
                                 name="arrayport-ipc-descriptor").start()
            except Exception:                 # no thread to be had: this asker tries again
                self.answering.release()
                connection.close()

    def _answer_once(self, connection) -> None:
        try:
            with connection:
                self._answer(connection)
        except Exception:                     # whatever went wrong, the server goes on
            pass
        finally:
            self.answering.release()

    def _answer(self, connection) -> None:
        connection.settimeout(_REQUEST_SECONDS)
        pid, uid, _ = _CREDENTIALS.unpack(connection.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
        if uid != self.user:
            connection.sendall(b"refused: another user's process")
            return
        token = connection.recv(64).decode("ascii", "replace").strip()
        try:
            descriptor, serial = self.lookup(token, pid)   # a duplicate: closed once sent
        except Exception as refusal:               # noqa: BLE001 — said to the asker
            connection.sendall(f"refused: {refusal}".encode())
            return
        try:    # the pool's serial with it: the asker knows which pool it was given
            socket.send_fds(connection, [_OK + b" %d" % serial], [descriptor])
        finally:
            os.close(descriptor)


def serve(lookup) -> str:
    """This process's descriptor server, started once (``lookup(token, pid)``: (a duplicate
    of the descriptor to hand process ``pid`` for the export ``token``, which the server
    closes once sent; the pool's serial), or BufferError saying why not); its socket's
    name."""
    global _server
    with _server_lock:
        if _server is None or _server.pid != os.getpid() or not _server.thread.is_alive():
            _server = _DescriptorServer(lookup)
        return _server.name


def socket_name() -> str | None:
    """This process's descriptor server's name; None where it has none."""
    server = _server
    return server.name if server is not None and server.pid == os.getpid() else None


def fetch_descriptor(name: str, token: str, pid: int) -> tuple[int, int]:
    """(the pool descriptor exporter ``name`` — process ``pid``, this user's: checked, so
    that no other process answering under that name hands over memory of its own — hands
    this process for export ``token``, the caller's to close; that pool's serial).
    BufferError with the exporter's reason where it refuses; a server too busy to answer is
    asked again, a few times."""
    if not name.startswith(f"arrayport-{pid}-"):
        raise BufferError(f"from_shared: the handle's descriptor server {name!r} is not "
                          f"process {pid}'s")
    for attempt in range(_ATTEMPTS):
        message, descriptors = _ask(name, token, pid)
        if message or descriptors:
            break
        time.sleep(0.05 * (attempt + 1))    # closed unanswered: busy, asked again
    if not message.startswith(_OK + b" ") or len(descriptors) != 1:
        for descriptor in descriptors:
            os.close(descriptor)
        reason = message.decode("utf-8", "replace") or "did not answer (too busy?)"
        raise BufferError(f"from_shared: the exporting process {reason}")
    try:
        return descriptors[0], int(message[len(_OK) + 1:])
    except ValueError:
        os.close(descriptors[0])
        raise BufferError("from_shared: the exporting process answered with no pool "
                          "serial") from None


def _ask(name: str, token: str, pid: int) -> tuple[bytes, list[int]]:
    """One request to exporter ``name``'s server: its answer and the descriptors that came
    with it."""
    asker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    asker.settimeout(_ANSWER_SECONDS)
    try:
        with asker:
            asker.connect("\0" + name)
            server_pid, uid, _ = _CREDENTIALS.unpack(asker.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
            if server_pid != pid or uid != os.geteuid():
                raise BufferError(f"from_shared: the descriptor server {name!r} is process "
                                  f"{server_pid}'s, not the exporter's ({pid})")
            try:
                asker.sendall(token.encode("ascii") + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass     # a server refusing before it reads has closed: its answer is here
            try:
                message, descriptors, _, _ = socket.recv_fds(asker, 256, 1,
                                                             socket.MSG_CMSG_CLOEXEC)
            except ConnectionResetError:   # closed unread: too busy to answer (asked again)
                return b"", []
            return message, descriptors
    except OSError as error:
        raise BufferError(f"from_shared: the exporting process's descriptor server cannot "
                          f"be reached (gone?): {error.strerror or error}") from None


# ---- the receiver's imported pools ----------------------------------------------------------

class _Import:
    """One exporter's pool imported here for one device: the pool, whether the grant to the
    device is read-only, the Views' mappings using it."""

    __slots__ = ("pool", "readonly", "users")

    def __init__(self, pool: int, readonly: bool):
        self.pool, self.readonly, self.users = pool, readonly, 0


# (exporter's server, the exporter's pool serial, device) -> its import
_imported: dict[tuple[str, int, int], _Import] = {}
_imported_lock = threading.Lock()
_turns = turns.Turns()     # the pools being imported, each by one thread


def acquire_pool(driver, name: str, serial: int, pid: int, token: str, ordinal: int,
                 readonly: bool) -> tuple[tuple, int, bool]:
    """The pool ``serial`` of exporter ``name`` (process ``pid``) imported on device
    ``ordinal``, once, for one more mapping: (its key for ``release_pool``, the pool, whether
    the driver keeps this mapping read-only). The descriptor is asked for with ``token`` (an
    export this process holds a lease of). One import serves every share of that pool: it
    is granted read-only access while every share opened from it was read-only, and
    read-write from the first writable one on (the driver's grant is the pool's, not a
    block's: read-only Views opened before are then read-only by their flag only)."""
    key = (name, serial, ordinal)
    while True:
        try:
            with _imported_lock:
                made = _imported.get(key)
                if made is not None:
                    if made.readonly and not readonly:
                        made.readonly = driver.grant_pool_access(ordinal, made.pool, False)
                    return key, made.pool, _count(driver, key, made, readonly)
                turn = _turns.take(key)
            if turn is not None:   # another thread imports it: looked at again once it has
                turn.wait()
                continue
            # this thread's turn: the socket and the driver, unlocked
            made = _import(driver, name, serial, pid, token, ordinal, readonly)
            with _imported_lock:
                _imported[key] = made
                return key, made.pool, _count(driver, key, made, readonly)
        finally:
            with _imported_lock:
                _turns.end_mine(key)


def _import(driver, name: str, serial: int, pid: int, token: str, ordinal: int,
            readonly: bool) -> _Import:
    """``acquire_pool``'s turn: the pool's descriptor asked for, the pool imported and its
    device granted access (read-only where ``readonly``)."""
    descriptor, given = fetch_descriptor(name, token, pid)
    try:
        if given != serial:    # the exporter's pool now is another than the handle's
            raise BufferError(f"from_shared: the handle names the exporter's pool "
                              f"{serial}, which it no longer has (its pool is {given})")
        pool = driver.import_pool(ordinal, descriptor)
    finally:
        os.close(descriptor)
    try:
        return _Import(pool, driver.grant_pool_access(ordinal, pool, readonly))
    except BaseException:
        driver.drop_imported_pool(pool)
        raise


def _count(driver, key: tuple, made: _Import, readonly: bool) -> bool:
    """One more mapping of ``made``; whether the driver keeps it read-only. Caller holds
    ``_imported_lock``."""
    made.users += 1
    _drop_stale(driver, key[0], key[2])     # after counting this one: never dropped here
    return made.readonly and readonly


def release_pool(driver, key: tuple) -> None:
    """One mapping fewer of the import ``key`` (its block freed); an import of an older
    pool of the same exporter, or of an exporter that has ended, goes with its last
    mapping."""
    with _imported_lock:
        made = _imported.get(key)
        if made is None:
            return
        made.users -= 1
        if made.users <= 0 and not processes.alive(*_exporter(key[0])):
            del _imported[key]
            try:
                driver.drop_imported_pool(made.pool)
            except Exception:   # the driver closed meanwhile: it went with it
                pass
        _drop_stale(driver, key[0], key[2])


def _exporter(name: str) -> tuple[int, int]:
    """The process a descriptor server's ``name`` belongs to: (pid, start), from
    ``arrayport-<pid>-<start>-…`` ((0, 0): not such a name)."""
    try:
        _, pid, start, _ = name.split("-")
        return int(pid), int(start)
    except ValueError:
        return 0, 0


def _drop_stale(driver, name: str, ordinal: int) -> None:
    """Destroy the imports of exporter ``name``'s pools on device ``ordinal`` older than its
    newest, once none of their blocks is mapped (the exporter made a new pool: the old one
    serves no new share). Caller holds ``_imported_lock``."""
    serials = [serial for (server, serial, device) in _imported
               if server == name and device == ordinal]
    newest = max(serials, default=0)
    for serial in serials:
        made = _imported[(name, serial, ordinal)]
        if serial < newest and made.users <= 0:
            del _imported[(name, serial, ordinal)]
            try:
                driver.drop_imported_pool(made.pool)
            except Exception:   # the driver closed meanwhile: it went with it
                pass


def imports() -> int:
    """Pools this process keeps imported."""
    return len(_imported)


def _forget_after_fork() -> None:
    """A fork's child: neither the parent's server nor its imports are its own (and no lock
    a parent's thread held is held)."""
    global _server, _server_lock, _imported_lock
    _server_lock, _imported_lock = threading.Lock(), threading.Lock()
    server, _server = _server, None
    if server is not None:
        try:
            server.socket.close()
        except OSError:
            pass
    _imported.clear()
    _turns.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
