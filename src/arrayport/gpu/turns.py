"""One thread at a time does a slow piece of work for a key (mapping a block another process
shares, importing its pool: a socket round trip, a ``flock``, driver calls), while the
registry it fills stays unlocked: threads wanting the same key wait for that one's turn to
end, and threads wanting other keys are not held up at all. ``gpu.ipc`` (mappings) and
``gpu.ipc_pool`` (imported pools) each keep one ``Turns`` beside their registry's lock.

The protocol, with the registry's lock held for the first and last step only::

    with registry_lock:
        found = registry.get(key)
        waiting = None if found else turns.take(key)
    if waiting is not None:
        waiting.wait(); look again
    elif found is None:
        try: make it (unlocked)
        finally:
            with registry_lock: register it; turns.end(key)
"""

from __future__ import annotations

import threading

__all__ = ["Turns"]


class Turns:
    """The keys whose work is under way, each with the event set when it ends."""

    __slots__ = ("_under_way",)

    def __init__(self):
        self._under_way: dict = {}

    def take(self, key) -> threading.Event | None:
        """None: the caller's turn (it must ``end`` it); else the turn under way, to wait
        for without the registry's lock and then look again. Caller holds that lock."""
        turn = self._under_way.get(key)
        if turn is None:
            self._under_way[key] = threading.Event()
        return turn

    def end(self, key) -> None:
        """The caller's turn for ``key`` is over (whether it made the thing or failed):
        those waiting look again. Caller holds the registry's lock."""
        self._under_way.pop(key).set()

    def clear(self) -> None:
        """A fork's child: no thread of its parent works for it."""
        self._under_way.clear()
