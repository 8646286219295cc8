/*
 * device_copy_plan.h — the plan of a strided copy on a GPU: a strided layout of one device's
 * memory into a C-contiguous buffer of the same device, as one launch of one of the two
 * kernels of gpu/kernels/strided_copy.cu, whose parameter structs (strided_copy_params.h)
 * this fills. The one owner of the plan: the core's own device copy (_core_device_copy.pxi)
 * launches it from C; gpu/kernels/strided_copy.py asks the core for it (its bytes) where
 * the Python driver launches.
 *
 * The reduction (the kernels' source says why they want it): the layout merged
 * (merged_dims.h); the innermost run of contiguous bytes — a row of a row slice, else one
 * element — split into units, the widest of 16, 8, 4, 2, 1 bytes dividing the run, every
 * other stride and both addresses, with the split as the innermost dimension. So a row
 * slice of float32 moves 16 bytes per thread, not 4. A layout still deeper than the structs
 * hold (more than AP_STRIDED_COPY_MAX_DIMS dimensions that cannot merge) has no plan: the
 * caller copies by DMA.
 *
 * The divisions: the plain kernel finds a unit's source from its index by dividing by each
 * extent in turn. A GPU has no integer divider (a 64-bit division is a subroutine of dozens
 * of instructions, a 32-bit one a reciprocal on the slow special-function unit), so where
 * the indices fit 32 bits (AP_PLAN_NARROW_COUNT) each extent comes with its divisor as a
 * multiplier and a shift (ap_plan_divisor), computed once per copy: a division is then a
 * multiply-high, an add and a shift. Past that count the kernel divides in 64 bits.
 *
 * The choice: where the source is contiguous along one axis (R) and the destination's
 * innermost axis (C) is another, both at least AP_PLAN_TILE_MIN long — a transpose, a
 * permuted plane of a batch — the tiled kernel reads and writes coalesced through shared
 * memory; everything else goes to the one-unit-per-thread kernel, whose writes coalesce.
 */
#ifndef ARRAYPORT_DEVICE_COPY_PLAN_H
#define ARRAYPORT_DEVICE_COPY_PLAN_H

#include <stdint.h>
#include <string.h>

#include "merged_dims.h"
#include "gpu/kernels/strided_copy_params.h"

#define AP_PLAN_BLOCK 256                   /* threads per block of the plain kernel */
#define AP_PLAN_MAX_BLOCKS (1 << 16)        /* its threads loop over the rest */
#define AP_PLAN_TILE_MIN 8                  /* both tiled axes at least this long */
#define AP_PLAN_MAX_GRID_YZ 65535           /* the driver's limit on a grid's y and z */
#define AP_PLAN_NARROW_COUNT 0xFFFFFFFFull  /* the most units the plain kernel indexes in 32 bits */

/* A layout reduced for the kernels: `n` dimensions, innermost first, of `unit` bytes. */
typedef struct {
    uint32_t unit;
    int n;
    int64_t extents[AP_STRIDED_COPY_MAX_DIMS];
    int64_t strides[AP_STRIDED_COPY_MAX_DIMS];
} ap_plan_layout;

/* Either kernel's parameters. */
typedef union {
    ap_strided_copy_params plain;
    ap_transpose_params tiles;
} ap_plan_params;

/* One launch: which kernel, its grid and block, its parameters. */
typedef struct {
    int tiled;                              /* arrayport_transpose_tiles, else _strided_copy */
    unsigned grid[3], block[3];
    ap_plan_params params;
} ap_plan_launch;

/* The kernels a plan launches, by ap_plan_launch.tiled (the floor's kernel slots too). */
#define AP_PLAN_KERNELS 2
static const char *const ap_plan_kernel_names[AP_PLAN_KERNELS] = {"arrayport_strided_copy",
                                                                  "arrayport_transpose_tiles"};

/* Reduce (`shape`, `byte_strides`, `itemsize`) read at `src`, written at `dst`: 0, or 1
 * where there is nothing to copy or the layout is too deep for the kernels. */
static int ap_plan_reduce(int ndim, const int64_t *shape, const int64_t *byte_strides,
                          int64_t itemsize, uint64_t src, uint64_t dst, ap_plan_layout *out) {
    int64_t extents[AP_STRIDED_COPY_MAX_DIMS + 1], strides[AP_STRIDED_COPY_MAX_DIMS + 1];
    if (ndim < 0 || ndim > AP_STRIDED_COPY_MAX_DIMS || itemsize <= 0) return 1;
    int n = ap_merge_dims(ndim, shape, byte_strides, extents, strides);
    if (n < 0) return 1;
    /* The innermost run of contiguous bytes: the innermost dimension where its elements
     * touch (merging made it as long as the layout allows), else one element. */
    int64_t run = itemsize;
    if (n > 0 && strides[n - 1] == itemsize) run = extents[--n] * itemsize;
    static const uint32_t units[5] = {16, 8, 4, 2, 1};
    uint32_t unit = 1;
    for (int u = 0; u < 5; u++) {
        int64_t size = units[u];
        int fits = run % size == 0 && src % (uint64_t)size == 0 && dst % (uint64_t)size == 0;
        for (int d = 0; fits && d < n; d++) fits = strides[d] % size == 0;
        if (fits) { unit = units[u]; break; }
    }
    if (run > (int64_t)unit) {
        extents[n] = run / unit;
        strides[n] = unit;
        n++;
    }
    if (n > AP_STRIDED_COPY_MAX_DIMS) return 1;
    out->unit = unit;
    out->n = n;
    for (int d = 0; d < n; d++) {   /* innermost first */
        out->extents[d] = extents[n - 1 - d];
        out->strides[d] = strides[n - 1 - d];
    }
    return 0;
}

/* (magic, shift) such that, for every 32-bit n, n / extent is
 * (((n * magic) >> 32) + n) >> shift (the multiply-high taken in 32 bits, the sum in 64):
 * the round-up method of Granlund and Montgomery, "Division by invariant integers using
 * multiplication" (PLDI 1994, section 4), for 1 <= extent < 2**32 (0 returned; else 1). The
 * kernel's ap_divide applies it. */
static int ap_plan_divisor(uint64_t extent, uint32_t *magic, uint32_t *shift) {
    if (extent < 1 || extent > AP_PLAN_NARROW_COUNT) return 1;
    uint32_t bits = 0;                                   /* ceil(log2(extent)) */
    while (bits < 64 && ((uint64_t)1 << bits) < extent) bits++;
    *shift = bits;
    *magic = (uint32_t)(((((uint64_t)1 << bits) - extent) << 32) / extent + 1);
    return 0;
}

/* The plain kernel's parameters for a reduced layout. */
static void ap_plan_plain(const ap_plan_layout *layout, uint64_t src, uint64_t dst,
                          ap_strided_copy_params *p) {
    memset(p, 0, sizeof *p);
    p->dst = dst;
    p->src = src;
    p->ndim = (ap_u32)layout->n;
    p->unit = layout->unit;
    int64_t count = 1;
    for (int d = 0; d < layout->n; d++) {
        p->extents[d] = layout->extents[d];
        p->strides[d] = layout->strides[d];
        count *= layout->extents[d];
    }
    p->count = count;
    p->narrow = (uint64_t)count <= AP_PLAN_NARROW_COUNT;
    if (p->narrow)   /* every extent divides a count that fits 32 bits: so do they */
        for (int d = 0; d < layout->n; d++)
            ap_plan_divisor((uint64_t)layout->extents[d], &p->magic[d], &p->shift[d]);
}

/* The tiled kernel's parameters for a reduced layout: 0, or 1 where it does not pay (the
 * source is contiguous along the destination's innermost axis already, or along no axis,
 * or one of the two axes is short). */
static int ap_plan_tiles(const ap_plan_layout *layout, uint64_t src, uint64_t dst,
                         ap_transpose_params *p) {
    int n = layout->n;
    int64_t unit = layout->unit;
    if (n == 0 || layout->strides[0] == unit) return 1;
    int rows_axis = -1;
    for (int d = 0; d < n; d++)
        if (layout->strides[d] == unit) { rows_axis = d; break; }
    if (rows_axis < 0 || layout->extents[rows_axis] < AP_PLAN_TILE_MIN
            || layout->extents[0] < AP_PLAN_TILE_MIN)
        return 1;
    int64_t dst_strides[AP_STRIDED_COPY_MAX_DIMS];
    dst_strides[0] = unit;
    for (int d = 1; d < n; d++) dst_strides[d] = dst_strides[d - 1] * layout->extents[d - 1];
    memset(p, 0, sizeof *p);
    p->dst = dst;
    p->src = src;
    p->rows = layout->extents[rows_axis];
    p->cols = layout->extents[0];
    p->src_col_stride = layout->strides[0];
    p->dst_row_stride = dst_strides[rows_axis];
    p->unit = (ap_u32)unit;
    int64_t batch = 1;
    ap_u32 slot = 0;
    for (int d = 1; d < n; d++) {
        if (d == rows_axis) continue;
        p->extents[slot] = layout->extents[d];
        p->src_strides[slot] = layout->strides[d];
        p->dst_strides[slot] = dst_strides[d];
        batch *= layout->extents[d];
        slot++;
    }
    p->ndim = slot;
    p->batch = batch;
    return 0;
}

/* The launch that copies the layout at `src` into C order at `dst`: 0, or 1 where there is
 * none (nothing to copy, too deep: the caller copies by DMA). */
static int ap_plan_device_copy(int ndim, const int64_t *shape, const int64_t *byte_strides,
                               int64_t itemsize, uint64_t src, uint64_t dst,
                               ap_plan_launch *out) {
    ap_plan_layout layout;
    if (ap_plan_reduce(ndim, shape, byte_strides, itemsize, src, dst, &layout) != 0) return 1;
    if (ap_plan_tiles(&layout, src, dst, &out->params.tiles) == 0) {
        const ap_transpose_params *t = &out->params.tiles;
        int64_t cols = (t->cols + AP_TILE - 1) / AP_TILE;
        out->tiled = 1;
        out->grid[0] = (unsigned)((t->rows + AP_TILE - 1) / AP_TILE);
        out->grid[1] = (unsigned)(cols < AP_PLAN_MAX_GRID_YZ ? cols : AP_PLAN_MAX_GRID_YZ);
        out->grid[2] = (unsigned)(t->batch < AP_PLAN_MAX_GRID_YZ ? t->batch
                                                                 : AP_PLAN_MAX_GRID_YZ);
        out->block[0] = AP_TILE;
        out->block[1] = AP_TILE_ROWS;
        out->block[2] = 1;
        return 0;
    }
    ap_plan_plain(&layout, src, dst, &out->params.plain);
    int64_t blocks = (out->params.plain.count + AP_PLAN_BLOCK - 1) / AP_PLAN_BLOCK;
    out->tiled = 0;
    out->grid[0] = (unsigned)(blocks < 1 ? 1 : blocks < AP_PLAN_MAX_BLOCKS ? blocks
                                                                          : AP_PLAN_MAX_BLOCKS);
    out->grid[1] = out->grid[2] = 1;
    out->block[0] = AP_PLAN_BLOCK;
    out->block[1] = out->block[2] = 1;
    return 0;
}

#endif /* ARRAYPORT_DEVICE_COPY_PLAN_H */
