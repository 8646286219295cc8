"""Copies made visible (issue 45): the one owner of what happens when a conversion needs a
copy nobody asked for.

A converter (``to_numpy``, ``to_torch``, ``to``, ``from_dlpack`` with ``device=``, the core's
``view_or_copy``) copies under ``copy=None`` when its target cannot hold the data as it is
— read-only memory for an always-writable library, strides it cannot describe, a lazy
conjugate tensor, another device. Every such place calls ``unasked_copy(copy, who, why)``
before copying, which

- with ``copy=False`` raises the ``BufferError`` that refuses the copy (the message each
  caller has always given: ``refusal``, or "WHO: WHY, so this needs a copy, but copy=False");
- under ``arrayport.explain`` stops the conversion before any data moves (``WouldCopy``,
  caught there: the explanation's reason is ``why``);
- while copies are watched (``ARRAYPORT_WARN_COPIES=1``, or ``arrayport.warn_on_copies()``)
  warns ``CopyWarning("WHO copied the data: WHY")`` at the user's call;
- otherwise returns, and the caller copies.

Decided: Python values (a list for ``to_numpy``) are not announced — they hold no memory to
share, so converting them is a copy by nature, as ``numpy.asarray`` makes; a copy that
``copy=True`` asked for is not announced either.

A copy is announced only for a conversion that ends in a result: ``arrayport.to`` holds its
announcements (``held_announcements``) until the target has taken the data, and drops them
when the target refuses it (a complex tensor for Arrow) — the user sees the refusal, not a
copy for nothing. Under ``explain``, a producer's own ``NeedsCopy`` (its memory does not hold
its values as they are) with a stand-in (``NeedsCopy.stand_in``: that memory as it is, of
the copy's type and layout — a lazy conjugate tensor without its bit) is not resolved: the
target gets the stand-in, so that its own checks still speak (a complex tensor for Arrow:
refused, not "a copy"); the copy's reason is the explanation's when the conversion then
succeeds (``resolved_reason``). Every other unasked copy stops explain before any data
moves.

Under ``-W error::arrayport.CopyWarning``, the error of an ``arrayport.to`` conversion comes
at its end, once the target has taken the data (its copy made, then dropped with the
error); the other converters raise it where the copy is decided, before it is made.

The compiled core asks only when ``_core.copies_watched()`` is on (one flag, set here while
anyone watches or explains), so an unwatched process pays one C branch for it.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

from arrayport import _core
from arrayport.errors import CopyWarning

__all__ = ["CopyWarning", "WouldCopy", "announce", "caller_stacklevel", "explaining",
           "held_announcements", "resolved_reason", "told", "unasked_copy", "warn_on_copies",
           "watching"]


class WouldCopy(Exception):
    """Raised by ``unasked_copy`` under ``explain``: the conversion would copy here, and why."""

    def __init__(self, who: str, why: str):
        super().__init__(f"{who}: {why}")
        self.who, self.why = who, why


_lock = threading.Lock()
# Who wants the warnings: ARRAYPORT_WARN_COPIES=1 counts once; each warn_on_copies() switch
# or block once more, until it is undone — so blocks in two threads do not end each other.
_enablers = int(os.environ.get("ARRAYPORT_WARN_COPIES", "").strip().lower()
                in ("1", "true", "yes"))
_explaining = threading.local()      # .depth, .told, .resolved: explain() on this thread
_holding = threading.local()         # .messages: held_announcements() on this thread
_explains_running = 0                # on every thread (the core's flag covers all of them)


def _update_core_flag() -> None:
    _core.set_copies_watched(_enablers > 0 or _explains_running > 0)


def watching() -> bool:
    """Whether unasked copies are announced with a ``CopyWarning`` now."""
    return _enablers > 0


def explaining() -> bool:
    return getattr(_explaining, "depth", 0) > 0


def told() -> list[str]:
    """The warnings the conversion under explain (on this thread) would have given."""
    return list(getattr(_explaining, "told", []))


def unasked_copy(copy, who: str, why: str, refusal: str | None = None) -> None:
    """The rule of a copy the caller did not ask for (see the module): call it before
    copying, with ``why`` the target cannot hold the data as it is."""
    if copy is False:
        raise BufferError(refusal or f"{who}: {why}, so this needs a copy, but copy=False")
    if copy:
        return   # asked for
    if explaining():
        raise WouldCopy(who, why)
    if _enablers > 0:
        _warn(f"{who} copied the data: {why}", CopyWarning)


def _warn(message: str, category: type[Warning]) -> None:
    """At the user's call, or held while ``held_announcements`` runs on this thread."""
    held = getattr(_holding, "messages", None)
    if held is not None:
        held.append((message, category))
        return
    warnings.warn(message, category, stacklevel=caller_stacklevel())


class held_announcements:
    """``with held_announcements():`` — the warnings a conversion gives on this thread are
    held, and given at the block's end only if it ends without an exception (a refused
    conversion announces nothing). Nests: an inner block hands its warnings to the outer."""

    def __enter__(self):
        self._outer = getattr(_holding, "messages", None)
        _holding.messages = []
        return self

    def __exit__(self, kind, *exc):
        held, _holding.messages = _holding.messages, self._outer
        if kind is None:
            for message, category in held:
                _warn(message, category)


def resolved_reason():
    """Under explain: why the first producer's ``NeedsCopy`` resolved on this thread
    copied (None: none did)."""
    return getattr(_explaining, "resolved", None)


def announce(message: str, category: type[Warning]) -> None:
    """A warning of arrayport's about a conversion (``ReadOnlySharedWarning``): at the
    user's call — or, under ``explain``, told in its reason instead (the warnings module's
    filters are process-wide; explain touches none of them)."""
    if explaining():
        _explaining.told.append(f"{category.__name__}: {message}")
        return
    _warn(message, category)


def caller_stacklevel():
    """The stack level of the first frame outside arrayport (the user's call)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("arrayport"):
        frame, level = frame.f_back, level + 1
    return level


def unasked_core_copy(who: str, why: str, by_nature: bool = False,
                      stand_in: bool = False) -> bool:
    """The core's hook, called while copies are watched: it is about to copy under
    ``copy=None`` — a producer's ``NeedsCopy`` resolved for a converter, a ``__dlpack__``
    export to the device the consumer named, or (``by_nature``) Python values, which are
    explained but not announced (see the module). True, under explain, where the producer
    has a ``stand_in`` for the copy: the core hands the target the stand-in instead, so
    that the target's own checks still speak and no data moves."""
    if explaining() and stand_in:
        if getattr(_explaining, "resolved", None) is None:
            _explaining.resolved = why
        return True
    if by_nature and not explaining():
        return False
    unasked_copy(None, who, why)
    return False


class warn_on_copies:
    """Announce every unasked copy with a ``CopyWarning`` (``warn_on_copies()``), or stop
    (``warn_on_copies(False)``); as a context manager, for the block only::

        with arrayport.warn_on_copies():
            t = arrayport.to_torch(frozen)      # CopyWarning: to_torch copied the data: …

    Process-wide, as ``ARRAYPORT_WARN_COPIES=1`` (the initial state) is: the warnings are on
    while any switch or block wants them (blocks in two threads do not end each other);
    ``warn_on_copies(False)`` turns every one off (its block: until it ends). Turn the
    warnings into errors in a test suite with ``-W error::arrayport.CopyWarning``."""

    def __init__(self, enabled: bool = True):
        global _enablers
        with _lock:
            if enabled:
                _enablers += 1
                self._undo = 1       # on exit: one wish less
            else:
                self._undo, _enablers = -_enablers, 0   # on exit: the wishes back
            _update_core_flag()

    def __enter__(self) -> "warn_on_copies":
        return self

    def __exit__(self, *exc) -> None:
        global _enablers
        with _lock:
            _enablers = max(0, _enablers - self._undo)
            self._undo = 0
            _update_core_flag()


class _Explaining:
    """``with _Explaining():`` — unasked copies on this thread raise ``WouldCopy``."""

    def __enter__(self):
        global _explains_running
        # an explain inside a conversion another explain runs: its state comes back after
        self._outer = (getattr(_explaining, "told", None), getattr(_explaining, "resolved", None))
        _explaining.depth = getattr(_explaining, "depth", 0) + 1
        _explaining.told = []
        _explaining.resolved = None
        with _lock:
            _explains_running += 1
            _update_core_flag()
        return self

    def __exit__(self, *exc):
        global _explains_running
        _explaining.depth -= 1
        if _explaining.depth:
            _explaining.told, _explaining.resolved = self._outer
        with _lock:
            _explains_running -= 1
            _update_core_flag()


if _enablers:   # ARRAYPORT_WARN_COPIES=1: the core asks from the start
    _update_core_flag()
