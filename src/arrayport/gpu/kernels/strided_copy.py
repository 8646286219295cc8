"""The host side of ``strided_copy.cu``: its parameter struct, the layout reduced for it, and
its launch. ``gpu.copies`` asks ``launch`` first for a strided copy within one device and
keeps its 2-D DMA plan where this answers False.

The reduction (the kernel's source says why it wants it): dimensions of extent 1 dropped;
the element split into units, the widest of 16, 8, 4, 2, 1 bytes dividing the element size,
every stride and both addresses, with the split as one more innermost dimension; neighbours
contiguous with each other merged. A layout still deeper than the kernel's parameter struct
holds (more than ``MAX_DIMS`` dimensions that cannot merge) is left to DMA.
"""

from __future__ import annotations

import ctypes

MAX_DIMS = 64               # AP_STRIDED_COPY_MAX_DIMS in strided_copy.cu
BLOCK = 256                 # threads per block
MAX_BLOCKS = 1 << 16        # each thread loops over the rest (a grid-stride loop)
_UNITS = (16, 8, 4, 2, 1)


class Params(ctypes.Structure):
    """``ap_strided_copy_params`` (strided_copy.cu), field for field; its size is checked
    against the PTX's parameter space by the simulator at every load, and by a test."""
    _fields_ = [("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("count", ctypes.c_int64),
                ("extents", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS),
                ("ndim", ctypes.c_uint32), ("unit", ctypes.c_uint32)]


def plan(shape, byte_strides, itemsize: int, src: int, dst: int) -> Params | None:
    """The kernel's parameters copying the layout (``shape``, ``byte_strides`` from ``src``)
    into C order at ``dst``; None when there is nothing to copy or the layout is too deep."""
    dims = [(extent, stride) for extent, stride in zip(shape, byte_strides) if extent != 1]
    if any(extent == 0 for extent, _ in dims):
        return None
    unit = next(u for u in _UNITS if itemsize % u == 0 and src % u == 0 and dst % u == 0
                and all(stride % u == 0 for _, stride in dims))
    if itemsize > unit:
        dims.append((itemsize // unit, unit))
    merged: list[tuple[int, int]] = []
    for extent, stride in dims:
        if merged and merged[-1][1] == stride * extent:
            merged[-1] = (merged[-1][0] * extent, stride)
        else:
            merged.append((extent, stride))
    if len(merged) > MAX_DIMS:
        return None
    params = Params(dst=dst, src=src, ndim=len(merged), unit=unit)
    count = 1
    for axis, (extent, stride) in enumerate(reversed(merged)):   # innermost first
        params.extents[axis] = extent
        params.strides[axis] = stride
        count *= extent
    params.count = count
    return params


def launch(driver, ordinal: int, dst: int, view, stream: int) -> bool:
    """Copy ``view`` (strided memory of device ``ordinal``) into C order at ``dst`` (same
    device), one kernel launch on ``stream``. False, launching nothing, where the kernel is
    not at hand (HIP, an older driver, a layout too deep): the caller copies by DMA."""
    params = plan(view.shape, view.strides, view.itemsize, view.ptr, dst)
    if params is None:
        return False
    grid = max(1, min(MAX_BLOCKS, -(-params.count // BLOCK)))
    return driver.launch_kernel(ordinal, "strided_copy", "arrayport_strided_copy", grid, BLOCK,
                                params, stream)
