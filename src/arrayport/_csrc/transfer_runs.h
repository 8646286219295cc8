/*
 * transfer_runs.h — the 2-D transfers that copy a strided layout into C order where no
 * kernel can (HIP cannot load arrayport's PTX; a CUDA driver without the kernels): rows of
 * contiguous bytes, a pitch apart in the source, back to back in the destination. The
 * plan's one owner: gpu/copies.py's plan_runs asks it through the core, and the core's own
 * ROCm copies (_core_hip_copy.pxi) walk it from C.
 *
 * From the merged layout (merged_dims.h): the innermost run as long as the layout allows
 * (contiguous elements make one wide row, else one element a row); the two innermost
 * dimensions make one transfer, outer ones one transfer each. A pitch a transfer cannot use
 * — negative, smaller than a row (overlapping or broadcast memory), or larger than the
 * device's largest (`max_pitch`; negative: no limit) — becomes one transfer per row. A
 * transfer of one row has no pitch: its caller makes it a plain (1-D) transfer, which no
 * pitch limit bounds however wide the row.
 */
#ifndef ARRAYPORT_TRANSFER_RUNS_H
#define ARRAYPORT_TRANSFER_RUNS_H

#include <stdint.h>

#include "merged_dims.h"

#define AP_TRANSFER_MAX_DIMS 128

typedef struct {
    int64_t width;    /* bytes a row */
    int64_t rows;     /* rows a transfer */
    int64_t pitch;    /* bytes from one row's start to the next's, in the source */
    int outer;        /* dimensions walked one transfer each, outermost first */
    int64_t extents[AP_TRANSFER_MAX_DIMS], strides[AP_TRANSFER_MAX_DIMS];
    int64_t index[AP_TRANSFER_MAX_DIMS];
    int64_t source, written;   /* the next transfer's source and destination offsets */
    int done;
} ap_transfer_runs;

/* Plan the transfers of (`shape`, `byte_strides`: `ndim` <= AP_TRANSFER_MAX_DIMS) of
 * `itemsize`-byte elements. 0, or -1 where there is nothing to transfer (no element, or a
 * layout too deep). Then ap_transfer_runs_next gives them in order. */
static int ap_transfer_runs_start(ap_transfer_runs *plan, int ndim, const int64_t *shape,
                                  const int64_t *byte_strides, int64_t itemsize,
                                  int64_t max_pitch) {
    if (ndim < 0 || ndim > AP_TRANSFER_MAX_DIMS) return -1;
    int n = ap_merge_dims(ndim, shape, byte_strides, plan->extents, plan->strides);
    if (n < 0) return -1;
    if (n > 0 && plan->strides[n - 1] == itemsize) {   /* contiguous elements: one row */
        plan->width = plan->extents[n - 1] * itemsize;
        n--;
    } else {
        plan->width = itemsize;
    }
    if (n > 0) {
        plan->rows = plan->extents[n - 1];
        plan->pitch = plan->strides[n - 1];
        n--;
    } else {
        plan->rows = 1;
        plan->pitch = plan->width;
    }
    if (plan->pitch < plan->width
            || (max_pitch >= 0 && plan->rows > 1 && plan->pitch > max_pitch)) {
        n++;   /* the rows, walked one by one (their extent and stride are still there) */
        plan->rows = 1;
        plan->pitch = plan->width;
    }
    plan->outer = n;
    for (int d = 0; d < n; d++) plan->index[d] = 0;
    plan->source = plan->written = 0;
    plan->done = 0;
    return 0;
}

/* The next transfer: its source and destination offsets (bytes from the layout's first
 * element, from the destination's start); its width, rows and pitch are the plan's. 1, or
 * 0 once every transfer was given. */
static int ap_transfer_runs_next(ap_transfer_runs *plan, int64_t *source, int64_t *destination) {
    if (plan->done) return 0;
    *source = plan->source;
    *destination = plan->written;
    plan->written += plan->rows * plan->width;
    int d = plan->outer - 1;
    for (; d >= 0; d--) {   /* the odometer: the innermost outer dimension first */
        plan->source += plan->strides[d];
        if (++plan->index[d] < plan->extents[d]) break;
        plan->source -= plan->strides[d] * plan->extents[d];
        plan->index[d] = 0;
    }
    if (d < 0) plan->done = 1;
    return 1;
}

#endif /* ARRAYPORT_TRANSFER_RUNS_H */
