/* The parameters of arrayport's strided-copy kernels (strided_copy.cu): each kernel's one
 * by-value struct, and the sizes its code is unrolled for. Declared once, here, for every
 * compiler that reads them: NVRTC (the PTX), the simulator's C build of the kernels, and the
 * core's planner (_csrc/device_copy_plan.h), which fills them for a launch from C or hands
 * their bytes to gpu/kernels/strided_copy.py for a launch through the Python driver. The
 * simulator checks each struct's size against the PTX's parameter space at every load. */
#ifndef ARRAYPORT_STRIDED_COPY_PARAMS_H
#define ARRAYPORT_STRIDED_COPY_PARAMS_H

#include "kernel_types.h"

#define AP_STRIDED_COPY_MAX_DIMS 64   /* arrayport's largest rank (AP_COPY_MAX_NDIM) */
#define AP_TILE 32                    /* a tile's side, in units */
#define AP_TILE_ROWS 8                /* a block is AP_TILE x AP_TILE_ROWS threads */

/* arrayport_strided_copy: one unit per thread, any layout. */
typedef struct {
    ap_u64 dst;                                   /* the C-contiguous destination */
    ap_u64 src;                                   /* the source's first unit */
    ap_i64 count;                                 /* units to copy */
    ap_i64 extents[AP_STRIDED_COPY_MAX_DIMS];     /* innermost first; ndim of them used */
    ap_i64 strides[AP_STRIDED_COPY_MAX_DIMS];     /* the source's, in bytes, innermost first */
    ap_u32 magic[AP_STRIDED_COPY_MAX_DIMS];       /* extents[d] as a multiplier ... */
    ap_u32 shift[AP_STRIDED_COPY_MAX_DIMS];       /* ... and a shift (see ap_divide) */
    ap_u32 ndim;
    ap_u32 unit;                                  /* bytes per unit: 1, 2, 4, 8 or 16 */
    ap_u32 narrow;                                /* count fits 32 bits: magic, shift set */
    ap_u32 pad;
} ap_strided_copy_params;

/* arrayport_transpose_tiles: tiles through shared memory, a source contiguous along another
 * axis than the destination's. */
typedef struct {
    ap_u64 dst;                                   /* the C-contiguous destination */
    ap_u64 src;                                   /* the source's first unit */
    ap_i64 rows;                                  /* along R, the source's contiguous axis */
    ap_i64 cols;                                  /* along C, the destination's */
    ap_i64 src_col_stride;                        /* bytes between source units along C */
    ap_i64 dst_row_stride;                        /* bytes between destination units along R */
    ap_i64 batch;                                 /* the other dimensions' element count */
    ap_i64 extents[AP_STRIDED_COPY_MAX_DIMS];     /* the other dimensions, innermost first */
    ap_i64 src_strides[AP_STRIDED_COPY_MAX_DIMS];
    ap_i64 dst_strides[AP_STRIDED_COPY_MAX_DIMS];
    ap_u32 ndim;                                  /* how many other dimensions */
    ap_u32 unit;
} ap_transpose_params;

#endif
