"""The one reduction of a strided layout that arrayport's device copies plan from: the
2-D transfers (``gpu.copies.plan_runs``) and the strided-copy kernels
(``gpu.kernels.strided_copy``) both start here, so they agree on what "contiguous" means."""

from __future__ import annotations

__all__ = ["merged_dims"]


def merged_dims(shape, byte_strides) -> list[tuple[int, int]] | None:
    """[(extent, byte stride)] of a layout, outermost first, with dimensions of extent 1
    dropped and neighbours contiguous with each other merged into one (an outer stride that
    is the inner one times its extent); None when the layout holds no element."""
    dims: list[tuple[int, int]] = []
    for extent, stride in zip(shape, byte_strides):
        if extent == 0:
            return None
        if extent == 1:
            continue
        if dims and dims[-1][1] == stride * extent:
            dims[-1] = (dims[-1][0] * extent, stride)
        else:
            dims.append((extent, stride))
    return dims
