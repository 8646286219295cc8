"""``arrayport.explain(x, target, **options)``: what a conversion would do, without doing it.

The answer comes from the conversion itself, not from a second copy of its rules: the
converter runs as ``arrayport.to(x, target, **options)`` would, with unasked copies
stopped where they are decided (``copy_watch.unasked_copy`` raises ``WouldCopy`` under
explain, before any data moves) — except a producer's own ``NeedsCopy`` that offers a
stand-in (a lazy conjugate tensor: its memory without the bit, of the copy's type and
layout), which the target judges instead of the copy, so that its own checks still speak
(a complex tensor for Arrow: refused, not "a copy"); no data moves either way. So

- a conversion that reaches its end shares the producer's memory ("zero-copy"; its result,
  made over that memory, is dropped);
- one stopped at an unasked copy would copy, for the reason the converter gives;
- one that raises is refused, with the converter's error;
- ``copy=True`` is explained as the ``copy=None`` conversion (whether it would have to copy
  anyway, or copies only because it is asked to).

The route is the protocol arrayport reads ``x`` through — the matrix's words: ``dlpack``,
``array_interface``, ``buffer``, ``__array__``, ``cuda_array_interface``, ``arrow`` —
and the stream ordering is what the core's stream rules do for it on a GPU. ``x`` is viewed
as ``arrayport.view`` views it (no data moves; a DLPack capsule, which can be consumed once,
is explained by consuming it).
"""

from __future__ import annotations

from dataclasses import dataclass

from arrayport import _core
from arrayport.copy_watch import WouldCopy, _Explaining, resolved_reason, told
from arrayport.errors import TypeNotHeld

__all__ = ["Explanation", "explain"]

# View.protocol -> the matrix's name for the route
_ROUTE_NAMES = {"array": "__array__"}


@dataclass(frozen=True)
class Explanation:
    """What ``arrayport.to(x, target, **options)`` would do. ``str()`` is one sentence."""

    target: str
    route: str          # the protocol x is read through (the matrix's words)
    copies: bool        # the conversion copies the data (False when it shares, or refuses)
    reason: str         # why it copies, shares or refuses
    refused: bool = False
    ordering: str = ""  # the stream ordering on a GPU, where there is any

    def __str__(self) -> str:
        outcome = "refused" if self.refused else "a copy" if self.copies else "zero-copy"
        text = f"{self.target}: {outcome} (read through {self.route}): {self.reason}"
        return f"{text}; {self.ordering}" if self.ordering else text


def explain(x, target: str = "numpy", /, **options) -> Explanation:
    """What converting ``x`` to ``target`` with ``options`` would do, without moving data.

    Parameters
    ----------
    x : object
        Anything ``arrayport.view`` accepts.
    target : str
        An ``arrayport.to`` target (``"numpy"``, ``"torch"``, ``"jax"``, …).
    **options
        The converter's options (``copy``, ``readonly``, ``device``, ``stream``).

    Returns
    -------
    Explanation
        ``route``, ``copies`` and ``reason`` (and ``refused``, ``ordering``); its ``str()``
        is a readable sentence.

    Examples
    --------
    >>> import numpy as np, arrayport as ap
    >>> frozen = np.arange(3.0)
    >>> frozen.flags.writeable = False
    >>> print(ap.explain(frozen, "numpy"))
    numpy: zero-copy (read through dlpack): numpy holds the data as it is, sharing its memory
    """
    from arrayport.convert import to
    asked = options.get("copy")
    dry = {**options, "copy": None} if asked is True else options
    route, view = _route_of(x)
    ordering = _ordering(view, options.get("stream"))
    resolved = None
    try:
        with _Explaining():
            try:
                to(x, target, **dry)
            finally:
                resolved = resolved_reason()
            said = "".join(f"; it warns: {warning}" for warning in told())
    except WouldCopy as would:
        return Explanation(target, route, True, resolved or would.why, ordering=ordering)
    except (BufferError, TypeError, ValueError) as refusal:
        if asked is True and isinstance(refusal, BufferError) \
                and not isinstance(refusal, TypeNotHeld):
            # refused without a copy (a lazy array, device memory for NumPy): the asked
            # copy is what makes it
            return Explanation(target, route, True, f"copy=True makes the copy this needs "
                                                    f"({refusal})", ordering=ordering)
        return Explanation(target, route, False, str(refusal), refused=True)
    if resolved is not None:
        return Explanation(target, route, True, resolved + said, ordering=ordering)
    if asked is True:
        return Explanation(target, route, True, "copy=True asks for a copy (the target could "
                                                "share the data as it is)", ordering=ordering)
    return Explanation(target, route, False, f"{target} holds the data as it is, sharing its "
                                             f"memory{said}", ordering=ordering)


def _route_of(x):
    """(the route's name, the View arrayport reads, or None where it cannot)."""
    if type(x).__name__ == "PyCapsule":
        return "dlpack (a capsule)", None
    try:
        view = _core.view(x)
    except _core.NeedsCopy as refusal:
        protocol = str(refusal).partition(":")[0]
        return _ROUTE_NAMES.get(protocol, protocol), None
    except (BufferError, TypeError, ValueError):
        return "none arrayport reads", None
    return _ROUTE_NAMES.get(view.protocol, view.protocol), view


def _ordering(view, stream) -> str:
    """The stream ordering a conversion of ``view`` does on a GPU (the core's rule: an
    event the consumer's stream waits for, never a host wait), or "" for host memory."""
    if view is None or view.device.type.is_host_accessible:
        return ""
    pending = _core.pending_stream(view)
    if pending is None:
        return f"no work is pending on the {view.device} data"
    consumer = "the default stream" if stream is None else f"stream {stream}"
    return (f"{consumer} waits on the GPU for the work pending on stream {pending} (an event; "
            f"the host does not wait)")
