"""Whether a process arrayport's device sharing recorded is still there. A pid alone names no
process for long: once a process ends, the kernel gives its pid to a later one. So a process
is recorded as (pid, start), its start time in clock ticks since boot (field 22 of
``/proc/<pid>/stat``), and it lives while a process of that pid started then runs; a zombie
(ended, not yet waited for by its parent) holds nothing and counts as gone.

The one owner of that rule for ``gpu.ipc_lease`` (a receiver holding an export, the asker of
a pool's descriptor) and ``gpu.ipc_pool`` (the exporter of a pool imported here).
"""

from __future__ import annotations

import os

__all__ = ["start_of", "alive", "me"]

_GONE = -1           # start_of: no such process, or one that has ended (a zombie)


def start_of(pid: int) -> int:
    """Process ``pid``'s start (clock ticks since boot); ``_GONE`` where there is no such
    process or it has ended; 0 where its start cannot be read (``/proc`` mounted with
    ``hidepid`` hides a live process as if it were gone: then the pid is all there is to
    go by)."""
    if pid <= 0:
        return _GONE
    line = _stat(pid)
    if line is None:  # none — or hidden (/proc mounted hidepid), or a process that has just
        if not _signalable(pid):        # been given the pid: looked at once more
            return _GONE
        line = _stat(pid)
        if line is None:                # hidden: the pid alone decides
            return 0
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; what follows the
    # last ")" is field 3 on
    fields = line[line.rfind(b")") + 2:].split()
    try:
        if fields[0] in (b"Z", b"X"):
            return _GONE
        return int(fields[19])
    except (IndexError, ValueError):
        return 0 if _signalable(pid) else _GONE


def alive(pid: int, start: int) -> bool:
    """Whether the process recorded as (``pid``, ``start``) still runs: not ended, and its pid
    not given to another since (a ``start`` of 0: recorded where starts could not be read;
    the pid alone decides)."""
    now = start_of(pid)
    return now != _GONE and (start == 0 or now == 0 or now == start)


_mine: tuple[int, int] = (0, 0)


def me() -> tuple[int, int]:
    """This process as (pid, start): what it records of itself (a fork's child is another
    process, with its own)."""
    global _mine
    pid = os.getpid()
    if _mine[0] != pid:
        _mine = (pid, max(start_of(pid), 0))
    return _mine


def _stat(pid: int) -> bytes | None:
    """``/proc/<pid>/stat``; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read()
    except OSError:
        return None


def _signalable(pid: int) -> bool:
    """Whether a process ``pid`` exists, by ``kill(pid, 0)`` (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
