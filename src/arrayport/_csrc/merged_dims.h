/*
 * merged_dims.h — the one reduction of a strided layout that arrayport's copies plan from:
 * dimensions of extent 1 dropped, and neighbours contiguous with each other (an outer
 * stride that is the inner one times its extent) merged into one. The host's strided copy
 * (strided_copy.h), the device kernels' planner (device_copy_plan.h) and the 2-D transfer
 * plan (transfer_runs.h) all start here, so they agree on what "contiguous" means.
 */
#ifndef ARRAYPORT_MERGED_DIMS_H
#define ARRAYPORT_MERGED_DIMS_H

#include <stdint.h>

/* The merged dimensions of (`shape`, `byte_strides`), `ndim` of them, written outermost
 * first into `extents` and `strides` (room for `ndim`): how many there are (0 for a single
 * element), or -1 when the layout holds no element (an extent of 0). */
static inline int ap_merge_dims(int ndim, const int64_t *shape, const int64_t *byte_strides,
                                int64_t *extents, int64_t *strides) {
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) return -1;
        if (shape[i] == 1) continue;
        int64_t span;
        if (n > 0 && !__builtin_mul_overflow(byte_strides[i], shape[i], &span)
                && strides[n - 1] == span) {
            extents[n - 1] *= shape[i];      /* the outer one absorbs this one */
            strides[n - 1] = byte_strides[i];
        } else {
            extents[n] = shape[i];
            strides[n] = byte_strides[i];
            n++;
        }
    }
    return n;
}

#endif /* ARRAYPORT_MERGED_DIMS_H */
