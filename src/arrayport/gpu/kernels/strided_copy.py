"""The host side of ``strided_copy.cu``: its parameter structs as ctypes sees them, and the
launch through the Python driver. ``gpu.copies`` asks ``launch`` first for a strided copy
within one device and keeps its 2-D DMA plan where this answers False.

The plan — the layout reduced for the kernels, the choice between the two kernels, their
parameters and grid — is the core's alone (``_csrc/device_copy_plan.h``, whose header says
how it reduces, divides and chooses); the core's own device copy launches it from C, and
this module asks the core for the same plan where the Python driver launches. The functions
below hand out the core's answers in the shapes the tests and tools read: ctypes structs,
(unit, dims) pairs.
"""

from __future__ import annotations

import ctypes

from arrayport import _core

_LIMITS = _core.STRIDED_COPY_LIMITS
MAX_DIMS = _LIMITS["MAX_DIMS"]          # AP_STRIDED_COPY_MAX_DIMS (strided_copy_params.h)
BLOCK = _LIMITS["BLOCK"]                # threads per block of the one-unit-per-thread kernel
MAX_BLOCKS = _LIMITS["MAX_BLOCKS"]      # each thread loops over the rest (a grid-stride loop)
TILE, TILE_ROWS = _LIMITS["TILE"], _LIMITS["TILE_ROWS"]   # a tile's side, a tile block's rows
TILE_MIN = _LIMITS["TILE_MIN"]          # both tiled axes at least this long, else plain
MAX_GRID_YZ = _LIMITS["MAX_GRID_YZ"]    # the driver's limit on a grid's y and z
NARROW_COUNT = _LIMITS["NARROW_COUNT"]  # the most units the plain kernel indexes in 32 bits
_Dims = ctypes.c_int64 * MAX_DIMS
_Divisors = ctypes.c_uint32 * MAX_DIMS


class Params(ctypes.Structure):
    """``ap_strided_copy_params`` (strided_copy_params.h), field for field; its size is
    checked against the PTX's parameter space by the simulator at every load, and by a
    test."""
    _fields_ = [("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("count", ctypes.c_int64),
                ("extents", _Dims), ("strides", _Dims),
                ("magic", _Divisors), ("shift", _Divisors),
                ("ndim", ctypes.c_uint32), ("unit", ctypes.c_uint32),
                ("narrow", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]


class TileParams(ctypes.Structure):
    """``ap_transpose_params`` (strided_copy_params.h), field for field (checked as
    ``Params``)."""
    _fields_ = [("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("rows", ctypes.c_int64),
                ("cols", ctypes.c_int64), ("src_col_stride", ctypes.c_int64),
                ("dst_row_stride", ctypes.c_int64), ("batch", ctypes.c_int64),
                ("extents", _Dims), ("src_strides", _Dims), ("dst_strides", _Dims),
                ("ndim", ctypes.c_uint32), ("unit", ctypes.c_uint32)]


_STRUCTS = {"arrayport_strided_copy": Params, "arrayport_transpose_tiles": TileParams}


def reduce(shape, byte_strides, itemsize: int, src: int, dst: int):
    """(unit, [(extent, source stride)] innermost first) of the layout (``shape``,
    ``byte_strides`` from ``src``) copied into C order at ``dst``; None when there is
    nothing to copy or the layout is too deep for the kernels."""
    return _core.strided_copy_reduce(shape, byte_strides, itemsize, src, dst)


def divisor(extent: int) -> tuple[int, int]:
    """(magic, shift) such that, for every 32-bit ``n``, ``n // extent`` is
    ``(((n * magic) >> 32) + n) >> shift``; ValueError outside 1 to 2**32 - 1."""
    return _core.strided_copy_divisor(extent)


def plan(shape, byte_strides, itemsize: int, src: int, dst: int) -> Params | None:
    """The one-unit-per-thread kernel's parameters for the layout (see ``reduce``)."""
    reduced = reduce(shape, byte_strides, itemsize, src, dst)
    return None if reduced is None else _plain(*reduced, src, dst)


def _plain(unit, dims, src, dst) -> Params:
    return Params.from_buffer_copy(_core.strided_copy_params(unit, dims, src, dst, False))


def plan_tiles(unit, dims, src, dst) -> TileParams | None:
    """The tiled kernel's parameters for a reduced layout (innermost first), or None where
    it does not pay: the source is contiguous along the destination's innermost axis
    already, or along no axis, or one of the two axes is short."""
    raw = _core.strided_copy_params(unit, dims, src, dst, True)
    return None if raw is None else TileParams.from_buffer_copy(raw)


def available(driver, ordinal: int) -> bool:
    """Whether these kernels can run on device ``ordinal`` (CUDA, its module loaded)."""
    return driver.has_kernel(ordinal, "strided_copy", "arrayport_strided_copy")


def launch(driver, ordinal: int, dst: int, view, stream: int) -> bool:
    """Copy ``view`` (strided memory of device ``ordinal``) into C order at ``dst`` (same
    device), one kernel launch on ``stream``. False, launching nothing, where the kernels
    are not at hand (HIP, an older driver, a layout too deep): the caller copies by DMA.
    BufferError where the driver says ``view`` is not memory the device can read (the
    core's ``kernel_source_refusal``)."""
    if view.itemsize is None:   # packed sub-byte elements: no byte strides
        return False
    refusal = _core.kernel_source_refusal(view, ordinal)   # a wrong label would fault
    if refusal is not None:
        raise BufferError(refusal)
    planned = _core.strided_copy_launch(view.shape, view.strides, view.itemsize, view.ptr,
                                        dst)
    if planned is None:
        return False
    kernel, grid, block, raw = planned
    return driver.launch_kernel(ordinal, "strided_copy", kernel, grid, block,
                                _STRUCTS[kernel].from_buffer_copy(raw), stream)
