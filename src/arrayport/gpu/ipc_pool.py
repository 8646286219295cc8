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

A receiver imports each exporter's pool twice at most per device: once granted read-only
access (``CU_MEM_ACCESS_FLAGS_PROT_READ``: read-only shares, their writes refused by the
driver) and once read-write; each import is kept until the driver closes, and asked again
(a new descriptor) where the exporter made a new pool.
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
import threading

__all__ = ["serve", "socket_name", "fetch_descriptor", "imported_pool", "forget_pool"]

_CREDENTIALS = struct.Struct("=iII")     # struct ucred: pid, uid, gid
_TIMEOUT_SECONDS = 5.0                   # one request, either side
_OK = b"ok"

_server: "_DescriptorServer | None" = None
_server_lock = threading.Lock()


class _DescriptorServer:
    """The exporter's socket: one short request per connection (an export's token), answered
    with the pool's descriptor or a refusal (see the module)."""

    def __init__(self, lookup):
        self.lookup = lookup
        self.name = f"arrayport-{os.getpid()}-{secrets.token_hex(8)}"
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.socket.bind("\0" + self.name)
        self.socket.listen(64)
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._serve, name="arrayport-ipc-descriptors",
                                       daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:                   # closed (a fork's child, or the end)
                return
            with connection:
                try:
                    self._answer(connection)
                except OSError:               # the asker went away: nothing to answer
                    pass

    def _answer(self, connection) -> None:
        connection.settimeout(_TIMEOUT_SECONDS)
        pid, uid, _ = _CREDENTIALS.unpack(connection.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
        token = connection.recv(64).decode("ascii", "replace").strip()
        if uid != os.getuid():
            connection.sendall(b"refused: another user's process")
            return
        try:
            descriptor = self.lookup(token, pid)
        except BufferError as refusal:
            connection.sendall(f"refused: {refusal}".encode())
            return
        socket.send_fds(connection, [_OK], [descriptor])


def serve(lookup) -> str:
    """This process's descriptor server, started once (``lookup(token, pid)``: the
    descriptor to hand process ``pid`` for the export ``token``, or BufferError saying why
    not); its socket's name."""
    global _server
    with _server_lock:
        if _server is None or _server.pid != os.getpid():
            _server = _DescriptorServer(lookup)
        return _server.name


def socket_name() -> str | None:
    """This process's descriptor server's name; None where it has none."""
    server = _server
    return server.name if server is not None and server.pid == os.getpid() else None


def fetch_descriptor(name: str, token: str) -> int:
    """The pool descriptor exporter ``name`` hands this process for export ``token`` (the
    caller's to close); BufferError with the exporter's reason where it refuses."""
    asker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    asker.settimeout(_TIMEOUT_SECONDS)
    try:
        with asker:
            asker.connect("\0" + name)
            asker.sendall(token.encode("ascii") + b"\n")
            message, descriptors, _, _ = socket.recv_fds(asker, 256, 1)
    except OSError as error:
        raise BufferError(f"from_shared: the exporting process's descriptor server cannot "
                          f"be reached (gone?): {error.strerror or error}") from None
    if message != _OK or len(descriptors) != 1:
        for descriptor in descriptors:
            os.close(descriptor)
        reason = message.decode("utf-8", "replace") or "no answer"
        raise BufferError(f"from_shared: the exporting process {reason}")
    return descriptors[0]


# ---- the receiver's imported pools ----------------------------------------------------------

# (exporter's server, device, read-only) -> (imported pool, whether its grant is read-only)
_imported: dict[tuple[str, int, bool], tuple[int, bool]] = {}
_imported_lock = threading.Lock()


def imported_pool(driver, name: str, token: str, ordinal: int,
                  readonly: bool) -> tuple[int, bool]:
    """The pool of exporter ``name`` imported on device ``ordinal`` for ``readonly`` (or
    read-write) shares: (the pool, whether the driver enforces read-only), imported once;
    the descriptor asked for with ``token`` (an export this process holds)."""
    key = (name, ordinal, readonly)
    with _imported_lock:
        made = _imported.get(key)
        if made is None:
            descriptor = fetch_descriptor(name, token)
            try:
                made = _imported[key] = driver.import_pool(ordinal, descriptor, readonly)
            finally:
                os.close(descriptor)
    return made


def forget_pool(name: str, ordinal: int, readonly: bool) -> None:
    """The exporter's pool imported for this key is stale (a block would not import from
    it): asked for again next time. The stale import stays until the driver closes."""
    with _imported_lock:
        _imported.pop((name, ordinal, readonly), None)


def _forget_after_fork() -> None:
    """A fork's child: neither the parent's server nor its imports are its own."""
    global _server
    server, _server = _server, None
    if server is not None:
        try:
            server.socket.close()
        except OSError:
            pass
    _imported.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
