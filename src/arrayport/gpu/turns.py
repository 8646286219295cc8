"""One thread at a time does a slow piece of work for a key (mapping a block another process
shares, importing its pool: a socket round trip, a ``flock``, driver calls), while the
registry it fills stays unlocked: threads wanting the same key wait for that one's turn to
end, and threads wanting other keys are not held up at all. ``gpu.ipc`` (mappings) and
``gpu.ipc_pool`` (imported pools) each keep one ``Turns`` beside their registry's lock.

The protocol, with the registry's lock held for each step::

    try:
        with registry_lock:
            found = registry.get(key)
            waiting = None if found else turns.take(key)
        if waiting is not None:
            waiting.wait(); look again
        elif found is None:
            make it (unlocked); with registry_lock: register it
    finally:
        with registry_lock:
            turns.end_mine(key)

``end_mine`` in a ``finally`` around the ``take`` itself: whatever interrupts the thread
(an exception, KeyboardInterrupt between two steps), its turn ends, and no key is left
waited on for ever.
"""

from __future__ import annotations

import threading

__all__ = ["Turns"]


class Turns:
    """The keys whose work is under way, each with the event set when it ends and the
    thread whose turn it is."""

    __slots__ = ("_under_way",)

    def __init__(self):
        self._under_way: dict = {}

    def take(self, key) -> threading.Event | None:
        """None: the caller's turn (ended by ``end_mine``); else the turn under way, to wait
        for without the registry's lock and then look again. Caller holds that lock."""
        turn, me = self._under_way.get(key), threading.get_ident()
        if turn is not None and turn[1] == me:   # its own, never ended (interrupted in the
            turn[0].set()                        # finally that ends it): taken afresh
            turn = None
        if turn is None:
            self._under_way[key] = (threading.Event(), me)
            return None
        return turn[0]

    def end_mine(self, key) -> None:
        """The calling thread's turn for ``key``, if it holds it, is over (whether it made
        the thing or failed): those waiting look again. Caller holds the registry's lock."""
        turn = self._under_way.get(key)
        if turn is not None and turn[1] == threading.get_ident():
            del self._under_way[key]
            turn[0].set()

    def clear(self) -> None:
        """A fork's child: no thread of its parent works for it."""
        self._under_way.clear()
