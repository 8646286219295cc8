"""The one reduction of a strided layout that arrayport's copies plan from, as Python reads
it: the core's (``_csrc/merged_dims.h``), which the host copy kernel and the device kernels'
planner use too, so the 2-D transfers (``gpu.copies.plan_runs``) agree with them on what
"contiguous" means."""

from __future__ import annotations

from arrayport import _core

__all__ = ["merged_dims"]


def merged_dims(shape, byte_strides) -> list[tuple[int, int]] | None:
    """[(extent, byte stride)] of a layout, outermost first, with dimensions of extent 1
    dropped and neighbours contiguous with each other merged into one (an outer stride that
    is the inner one times its extent); None when the layout holds no element."""
    return _core.merged_dims(shape, byte_strides)
