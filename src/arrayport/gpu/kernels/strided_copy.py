"""The host side of ``strided_copy.cu``: its parameter structs, the layout reduced for it, the
choice between its two kernels, and the launch. ``gpu.copies`` asks ``launch`` first for a
strided copy within one device and keeps its 2-D DMA plan where this answers False.

The reduction (the kernels' source says why they want it): dimensions of extent 1 dropped
and neighbours contiguous with each other merged (``gpu.layouts``); the innermost run of
contiguous bytes — a row of a row slice, else one element — split into units, the widest of
16, 8, 4, 2, 1 bytes dividing the run, every other stride and both addresses, with the split
as the innermost dimension. So a row slice of float32 moves 16 bytes per thread, not 4. A
layout still deeper than the parameter structs hold (more than ``MAX_DIMS`` dimensions that
cannot merge) is left to DMA.

The divisions: the plain kernel finds a unit's source from its index by dividing by each
extent in turn. A GPU has no integer divider (a 64-bit division is a subroutine of dozens of
instructions, a 32-bit one a reciprocal on the slow special-function unit), so where the
indices fit 32 bits (``NARROW_COUNT``) each extent comes with its divisor as a multiplier
and a shift (``divisor``), computed here once per copy: a division is then a multiply-high,
an add and a shift. Past that count the kernel divides in 64 bits.

The choice: where the source is contiguous along one axis (R) and the destination's
innermost axis (C) is another, both at least ``TILE_MIN`` long — a transpose, a permuted
plane of a batch — the tiled kernel reads and writes coalesced through shared memory;
everything else goes to the one-unit-per-thread kernel, whose writes are coalesced.
"""

from __future__ import annotations

import ctypes

from arrayport.gpu.layouts import merged_dims

MAX_DIMS = 64               # AP_STRIDED_COPY_MAX_DIMS in strided_copy.cu
BLOCK = 256                 # threads per block of the one-unit-per-thread kernel
MAX_BLOCKS = 1 << 16        # each thread loops over the rest (a grid-stride loop)
TILE, TILE_ROWS = 32, 8     # AP_TILE, AP_TILE_ROWS: a tile's side, a tile block's rows
TILE_MIN = 8                # both tiled axes at least this long, else the plain kernel
MAX_GRID_YZ = 65535         # the driver's limit on a grid's y and z (the kernel loops)
NARROW_COUNT = (1 << 32) - 1  # the most units the plain kernel indexes in 32 bits
_UNITS = (16, 8, 4, 2, 1)
_Dims = ctypes.c_int64 * MAX_DIMS
_Divisors = ctypes.c_uint32 * MAX_DIMS


class Params(ctypes.Structure):
    """``ap_strided_copy_params`` (strided_copy.cu), field for field; its size is checked
    against the PTX's parameter space by the simulator at every load, and by a test."""
    _fields_ = [("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("count", ctypes.c_int64),
                ("extents", _Dims), ("strides", _Dims),
                ("magic", _Divisors), ("shift", _Divisors),
                ("ndim", ctypes.c_uint32), ("unit", ctypes.c_uint32),
                ("narrow", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]


class TileParams(ctypes.Structure):
    """``ap_transpose_params`` (strided_copy.cu), field for field (checked as ``Params``)."""
    _fields_ = [("dst", ctypes.c_uint64), ("src", ctypes.c_uint64), ("rows", ctypes.c_int64),
                ("cols", ctypes.c_int64), ("src_col_stride", ctypes.c_int64),
                ("dst_row_stride", ctypes.c_int64), ("batch", ctypes.c_int64),
                ("extents", _Dims), ("src_strides", _Dims), ("dst_strides", _Dims),
                ("ndim", ctypes.c_uint32), ("unit", ctypes.c_uint32)]


def reduce(shape, byte_strides, itemsize: int, src: int, dst: int):
    """(unit, [(extent, source stride)] innermost first) of the layout (``shape``,
    ``byte_strides`` from ``src``) copied into C order at ``dst``; None when there is
    nothing to copy or the layout is too deep for the kernels."""
    dims = merged_dims(shape, byte_strides)
    if dims is None:
        return None
    # The innermost run of contiguous bytes: the innermost dimension where its elements
    # touch (merging made it as long as the layout allows), else one element.
    run = dims.pop()[0] * itemsize if dims and dims[-1][1] == itemsize else itemsize
    unit = next(u for u in _UNITS if run % u == 0 and src % u == 0 and dst % u == 0
                and all(stride % u == 0 for _, stride in dims))
    if run > unit:
        dims.append((run // unit, unit))
    if len(dims) > MAX_DIMS:
        return None
    return unit, dims[::-1]


def divisor(extent: int) -> tuple[int, int]:
    """(magic, shift) such that, for every 32-bit ``n``, ``n // extent`` is
    ``(((n * magic) >> 32) + n) >> shift`` (the multiply-high taken in 32 bits, the sum in
    64): the round-up method of Granlund and Montgomery, "Division by invariant integers
    using multiplication" (PLDI 1994, section 4), for 1 <= extent < 2**32. The kernel's
    ``ap_divide`` applies it."""
    if not 1 <= extent <= NARROW_COUNT:
        raise ValueError(f"a 32-bit divisor is 1 to 2**32 - 1, not {extent}")
    shift = (extent - 1).bit_length()          # ceil(log2(extent))
    magic = (((1 << shift) - extent) << 32) // extent + 1
    return magic, shift


def plan(shape, byte_strides, itemsize: int, src: int, dst: int) -> Params | None:
    """The one-unit-per-thread kernel's parameters for the layout (see ``reduce``)."""
    reduced = reduce(shape, byte_strides, itemsize, src, dst)
    return None if reduced is None else _plain(*reduced, src, dst)


def _plain(unit, dims, src, dst) -> Params:
    params = Params(dst=dst, src=src, ndim=len(dims), unit=unit)
    count = 1
    for axis, (extent, stride) in enumerate(dims):
        params.extents[axis] = extent
        params.strides[axis] = stride
        count *= extent
    params.count = count
    params.narrow = count <= NARROW_COUNT
    if params.narrow:   # every extent divides a count that fits 32 bits: so do they
        for axis, (extent, _) in enumerate(dims):
            params.magic[axis], params.shift[axis] = divisor(extent)
    return params


def plan_tiles(unit, dims, src, dst) -> TileParams | None:
    """The tiled kernel's parameters for a reduced layout (innermost first), or None where
    it does not pay: the source is contiguous along the destination's innermost axis
    already, or along no axis, or one of the two axes is short."""
    if not dims or dims[0][1] == unit:
        return None
    rows_axis = next((axis for axis, (_, stride) in enumerate(dims) if stride == unit), None)
    if rows_axis is None or dims[rows_axis][0] < TILE_MIN or dims[0][0] < TILE_MIN:
        return None
    dst_strides = [unit]
    for extent, _ in dims[:-1]:
        dst_strides.append(dst_strides[-1] * extent)
    params = TileParams(dst=dst, src=src, rows=dims[rows_axis][0], cols=dims[0][0],
                        src_col_stride=dims[0][1], dst_row_stride=dst_strides[rows_axis],
                        unit=unit)
    batch = 1
    others = [axis for axis in range(1, len(dims)) if axis != rows_axis]
    for slot, axis in enumerate(others):
        params.extents[slot] = dims[axis][0]
        params.src_strides[slot] = dims[axis][1]
        params.dst_strides[slot] = dst_strides[axis]
        batch *= dims[axis][0]
    params.ndim, params.batch = len(others), batch
    return params


def available(driver, ordinal: int) -> bool:
    """Whether these kernels can run on device ``ordinal`` (CUDA, its module loaded)."""
    return driver.has_kernel(ordinal, "strided_copy", "arrayport_strided_copy")


def launch(driver, ordinal: int, dst: int, view, stream: int) -> bool:
    """Copy ``view`` (strided memory of device ``ordinal``) into C order at ``dst`` (same
    device), one kernel launch on ``stream``. False, launching nothing, where the kernels
    are not at hand (HIP, an older driver, a layout too deep): the caller copies by DMA."""
    reduced = reduce(view.shape, view.strides, view.itemsize, view.ptr, dst)
    if reduced is None:
        return False
    tiles = plan_tiles(*reduced, view.ptr, dst)
    if tiles is not None:
        grid = (-(-tiles.rows // TILE), min(MAX_GRID_YZ, -(-tiles.cols // TILE)),
                min(MAX_GRID_YZ, tiles.batch))
        return driver.launch_kernel(ordinal, "strided_copy", "arrayport_transpose_tiles", grid,
                                    (TILE, TILE_ROWS, 1), tiles, stream)
    params = _plain(*reduced, view.ptr, dst)
    grid = (max(1, min(MAX_BLOCKS, -(-params.count // BLOCK))), 1, 1)
    return driver.launch_kernel(ordinal, "strided_copy", "arrayport_strided_copy", grid,
                                (BLOCK, 1, 1), params, stream)
