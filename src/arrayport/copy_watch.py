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

__all__ = ["CopyWarning", "WouldCopy", "caller_stacklevel", "explaining", "unasked_copy",
           "warn_on_copies", "watching"]


class WouldCopy(Exception):
    """Raised by ``unasked_copy`` under ``explain``: the conversion would copy here, and why."""

    def __init__(self, who: str, why: str):
        super().__init__(f"{who}: {why}")
        self.who, self.why = who, why


_lock = threading.Lock()
_warn = os.environ.get("ARRAYPORT_WARN_COPIES", "").strip().lower() in ("1", "true", "yes")
_explaining = threading.local()      # .depth: explain() calls running on this thread
_explains_running = 0                # on every thread (the core's flag covers all of them)


def _update_core_flag() -> None:
    _core.set_copies_watched(_warn or _explains_running > 0)


def watching() -> bool:
    """Whether unasked copies are announced with a ``CopyWarning`` now."""
    return _warn


def explaining() -> bool:
    return getattr(_explaining, "depth", 0) > 0


def unasked_copy(copy, who: str, why: str, refusal: str | None = None) -> None:
    """The rule of a copy the caller did not ask for (see the module): call it before
    copying, with ``why`` the target cannot hold the data as it is."""
    if copy is False:
        raise BufferError(refusal or f"{who}: {why}, so this needs a copy, but copy=False")
    if copy:
        return   # asked for
    if explaining():
        raise WouldCopy(who, why)
    if _warn:
        warnings.warn(f"{who} copied the data: {why}", CopyWarning,
                      stacklevel=caller_stacklevel())


def caller_stacklevel():
    """The stack level of the first frame outside arrayport (the user's call)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_globals.get("__name__", "").startswith("arrayport"):
        frame, level = frame.f_back, level + 1
    return level


def resolving(refusal) -> None:
    """The core's hook: a producer's ``NeedsCopy`` refusal is about to be resolved into a
    copy for a converter that allows one (``copy=None``)."""
    unasked_copy(None, "arrayport", str(refusal))


class warn_on_copies:
    """Announce every unasked copy with a ``CopyWarning`` (``warn_on_copies()``), or stop
    (``warn_on_copies(False)``); as a context manager, for the block only::

        with arrayport.warn_on_copies():
            t = arrayport.to_torch(frozen)      # CopyWarning: to_torch copied the data: …

    Process-wide, like ``ARRAYPORT_WARN_COPIES=1`` (the initial state). Turn the warnings
    into errors in a test suite with ``-W error::arrayport.CopyWarning``."""

    def __init__(self, enabled: bool = True):
        global _warn
        with _lock:
            self._previous, _warn = _warn, bool(enabled)
            _update_core_flag()

    def __enter__(self) -> "warn_on_copies":
        return self

    def __exit__(self, *exc) -> None:
        global _warn
        with _lock:
            _warn = self._previous
            _update_core_flag()


class _Explaining:
    """``with _Explaining():`` — unasked copies on this thread raise ``WouldCopy``."""

    def __enter__(self):
        global _explains_running
        _explaining.depth = getattr(_explaining, "depth", 0) + 1
        with _lock:
            _explains_running += 1
            _update_core_flag()
        return self

    def __exit__(self, *exc):
        global _explains_running
        _explaining.depth -= 1
        with _lock:
            _explains_running -= 1
            _update_core_flag()


_update_core_flag() if _warn else None
