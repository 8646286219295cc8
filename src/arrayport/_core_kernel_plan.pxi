# Included by _core.pyx. The plan of a strided copy on a GPU (_csrc/device_copy_plan.h: the
# layout reduced, the kernel chosen, its parameter struct filled, its grid), as the core's
# own device copy (_core_device_copy.pxi) and gpu/kernels/strided_copy.py ask it; the 2-D
# transfers where no kernel runs (_csrc/transfer_runs.h), as the core's ROCm copies
# (_core_hip_copy.pxi) and gpu/copies.py's plan_runs ask them — both from one merge of the
# layout (_csrc/merged_dims.h). The plans are C's alone: Python asks here for the bytes of
# a kernel's parameters and for the transfers, it computes none of them.
#
# Uses from other parts (every cross-part name, checked by tests/test_architecture.py):
#   _core_view.pxi: View

cdef extern from "_csrc/device_copy_plan.h":
    enum:
        AP_STRIDED_COPY_MAX_DIMS
        AP_TILE
        AP_TILE_ROWS
        AP_PLAN_BLOCK
        AP_PLAN_MAX_BLOCKS
        AP_PLAN_TILE_MIN
        AP_PLAN_MAX_GRID_YZ
        AP_PLAN_KERNELS
    unsigned long long AP_PLAN_NARROW_COUNT
    ctypedef struct ap_strided_copy_params:
        pass
    ctypedef struct ap_transpose_params:
        pass
    ctypedef union ap_plan_params:
        ap_strided_copy_params plain
        ap_transpose_params tiles
    ctypedef struct ap_plan_layout:
        uint32_t unit
        int n
        int64_t extents[64]
        int64_t strides[64]
    ctypedef struct ap_plan_launch:
        int tiled
        unsigned grid[3]
        unsigned block[3]
        ap_plan_params params
    const char* ap_plan_kernel_names[]
    int ap_merge_dims(int ndim, const int64_t* shape, const int64_t* byte_strides,
                      int64_t* extents, int64_t* strides) nogil
    int ap_plan_reduce(int ndim, const int64_t* shape, const int64_t* byte_strides,
                       int64_t itemsize, uint64_t src, uint64_t dst, ap_plan_layout* out) nogil
    int ap_plan_divisor(uint64_t extent, uint32_t* magic, uint32_t* shift) nogil
    void ap_plan_plain(const ap_plan_layout* layout, uint64_t src, uint64_t dst,
                       ap_strided_copy_params* p) nogil
    int ap_plan_tiles(const ap_plan_layout* layout, uint64_t src, uint64_t dst,
                      ap_transpose_params* p) nogil
    int ap_plan_device_copy(int ndim, const int64_t* shape, const int64_t* byte_strides,
                            int64_t itemsize, uint64_t src, uint64_t dst,
                            ap_plan_launch* out) nogil


cdef extern from "_csrc/transfer_runs.h":
    enum:
        AP_TRANSFER_MAX_DIMS
    ctypedef struct ap_transfer_runs:
        int64_t width
        int64_t rows
        int64_t pitch
    int ap_transfer_runs_start(ap_transfer_runs* plan, int ndim, const int64_t* shape,
                               const int64_t* byte_strides, int64_t itemsize,
                               int64_t max_pitch) nogil
    int ap_transfer_runs_next(ap_transfer_runs* plan, int64_t* source,
                              int64_t* destination) nogil


# The sizes the plan and the kernels are built for (gpu/kernels/strided_copy.py shows them).
STRIDED_COPY_LIMITS = {
    "MAX_DIMS": AP_STRIDED_COPY_MAX_DIMS, "TILE": AP_TILE, "TILE_ROWS": AP_TILE_ROWS,
    "TILE_MIN": AP_PLAN_TILE_MIN, "BLOCK": AP_PLAN_BLOCK, "MAX_BLOCKS": AP_PLAN_MAX_BLOCKS,
    "MAX_GRID_YZ": AP_PLAN_MAX_GRID_YZ, "NARROW_COUNT": AP_PLAN_NARROW_COUNT,
}


# The most dimensions a layout handed in from Python may have: twice what the kernels take
# (a View has at most that many; a deeper layout is the kernels' "too deep", not an error).
DEF _LAYOUT_ROOM = 128


cdef int _layout_arrays(shape, byte_strides, int64_t* extents, int64_t* strides) except -1:
    """``shape`` and ``byte_strides`` (sequences of one length, at most _LAYOUT_ROOM) into C
    arrays; their length."""
    cdef Py_ssize_t ndim = len(shape)
    if len(byte_strides) != ndim:
        raise ValueError(f"strided copy plan: {ndim} extents but {len(byte_strides)} strides")
    if ndim > _LAYOUT_ROOM:
        raise ValueError(f"strided copy plan: {ndim} dimensions; at most {_LAYOUT_ROOM}")
    for i in range(ndim):
        extents[i] = shape[i]
        strides[i] = byte_strides[i]
    return <int>ndim


def strided_copy_reduce(shape, byte_strides, int64_t itemsize, uint64_t src, uint64_t dst):
    """(unit, [(extent, source stride)] innermost first): the layout reduced for the
    kernels; None when there is nothing to copy or the layout is too deep for them."""
    cdef int64_t shape_c[_LAYOUT_ROOM]
    cdef int64_t strides_c[_LAYOUT_ROOM]
    cdef ap_plan_layout layout
    cdef int ndim = _layout_arrays(shape, byte_strides, shape_c, strides_c)
    if ap_plan_reduce(ndim, shape_c, strides_c, itemsize, src, dst, &layout) != 0:
        return None
    return layout.unit, [(layout.extents[d], layout.strides[d]) for d in range(layout.n)]


def strided_copy_params(unsigned unit, dims, uint64_t src, uint64_t dst, bint tiled):
    """The bytes of a kernel's parameter struct for a reduced layout (``dims`` innermost
    first, as ``strided_copy_reduce`` gives them): the tiled kernel's where ``tiled`` (None
    where it does not pay), else the plain kernel's."""
    cdef ap_plan_layout layout
    cdef ap_plan_params params
    if unit not in (1, 2, 4, 8, 16):
        raise ValueError(f"strided copy plan: a unit is 1, 2, 4, 8 or 16 bytes, not {unit}")
    if len(dims) > AP_STRIDED_COPY_MAX_DIMS:
        raise ValueError(f"strided copy plan: {len(dims)} dimensions; at most "
                         f"{AP_STRIDED_COPY_MAX_DIMS}")
    layout.unit, layout.n = unit, len(dims)
    for d, (extent, stride) in enumerate(dims):
        layout.extents[d], layout.strides[d] = extent, stride
    if tiled:
        if ap_plan_tiles(&layout, src, dst, &params.tiles) != 0:
            return None
        return (<char*>&params.tiles)[:sizeof(ap_transpose_params)]
    ap_plan_plain(&layout, src, dst, &params.plain)
    return (<char*>&params.plain)[:sizeof(ap_strided_copy_params)]


def strided_copy_divisor(uint64_t extent):
    """(magic, shift) such that, for every 32-bit n, n // extent is
    (((n * magic) >> 32) + n) >> shift (_csrc/device_copy_plan.h says whose method)."""
    cdef uint32_t magic = 0, shift = 0
    if ap_plan_divisor(extent, &magic, &shift) != 0:
        raise ValueError(f"a 32-bit divisor is 1 to 2**32 - 1, not {extent}")
    return magic, shift


cdef int _plan_view_copy(View v, uint64_t dst, ap_plan_launch* launch) except -1:
    """The launch copying ``v`` (of byte-addressed elements) into C order at ``dst``: 0, or
    1 where the kernels have none (nothing to copy, too deep, sub-byte elements)."""
    cdef int64_t bits = v._itembits()
    cdef int64_t byte_strides[AP_STRIDED_COPY_MAX_DIMS]
    if bits % 8 or v._t.ndim > AP_STRIDED_COPY_MAX_DIMS:
        return 1
    for i in range(v._t.ndim):
        byte_strides[i] = v._t.strides[i] * (bits // 8)
    return ap_plan_device_copy(v._t.ndim, v._t.shape, byte_strides, bits // 8,
                               <uintptr_t>v._t.data + v._t.byte_offset, dst, launch)


def strided_copy_launch(shape, byte_strides, int64_t itemsize, uint64_t src, uint64_t dst):
    """(kernel name, grid, block, parameter bytes) of the one launch that copies the layout
    (``shape``, ``byte_strides`` of ``itemsize``-byte elements at ``src``: one device's
    memory) into C order at ``dst``, on the same device; None where the kernels have none
    (the caller copies by DMA)."""
    cdef int64_t shape_c[_LAYOUT_ROOM]
    cdef int64_t strides_c[_LAYOUT_ROOM]
    cdef ap_plan_launch launch
    cdef int ndim = _layout_arrays(shape, byte_strides, shape_c, strides_c)
    if ap_plan_device_copy(ndim, shape_c, strides_c, itemsize, src, dst, &launch) != 0:
        return None
    size = sizeof(ap_transpose_params) if launch.tiled else sizeof(ap_strided_copy_params)
    return (ap_plan_kernel_names[launch.tiled].decode(),
            (launch.grid[0], launch.grid[1], launch.grid[2]),
            (launch.block[0], launch.block[1], launch.block[2]),
            (<char*>&launch.params)[:size])


def transfer_runs(shape, byte_strides, int64_t itemsize, max_pitch=None):
    """The 2-D transfers that copy the layout (``shape``, ``byte_strides`` of
    ``itemsize``-byte elements) into C order (_csrc/transfer_runs.h): [(source offset,
    destination offset, width, height, source pitch)] in bytes — ``height`` rows of
    ``width`` contiguous bytes, ``pitch`` apart in the source, back to back in the
    destination; a pitch larger than ``max_pitch`` (None: no limit) made row by row, and a
    one-row transfer made plain by its caller (no pitch to bound). Empty when the layout
    holds no element."""
    cdef int64_t shape_c[_LAYOUT_ROOM]
    cdef int64_t strides_c[_LAYOUT_ROOM]
    cdef ap_transfer_runs plan
    cdef int64_t source = 0, destination = 0
    cdef int ndim = _layout_arrays(shape, byte_strides, shape_c, strides_c)
    if ap_transfer_runs_start(&plan, ndim, shape_c, strides_c, itemsize,
                              -1 if max_pitch is None else max_pitch) != 0:
        return []
    runs = []
    while ap_transfer_runs_next(&plan, &source, &destination):
        runs.append((source, destination, plan.width, plan.rows, plan.pitch))
    return runs


cdef int _plan_view_transfers(View v, int64_t max_pitch, ap_transfer_runs* plan) except -1:
    """The 2-D transfers copying ``v`` (of byte-addressed elements) into C order: 0, or 1
    where there are none to make (nothing to copy, sub-byte elements)."""
    cdef int64_t bits = v._itembits()
    cdef int64_t byte_strides[AP_TRANSFER_MAX_DIMS]
    if bits % 8 or v._t.ndim > AP_TRANSFER_MAX_DIMS:
        return 1
    for i in range(v._t.ndim):
        byte_strides[i] = v._t.strides[i] * (bits // 8)
    return 1 if ap_transfer_runs_start(plan, v._t.ndim, v._t.shape, byte_strides, bits // 8,
                                       max_pitch) != 0 else 0
