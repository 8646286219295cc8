/* arrayport's strided copies on the GPU: any strided layout of one device's memory into a
 * C-contiguous buffer of the same device (View.copy: the core's _core_device_copy.pxi, or
 * gpu/copies.py, either launching it on the copy's stream; contiguous data stays a DMA
 * transfer). Two kernels, one module (one load per context):
 *
 * - arrayport_strided_copy, for every layout: each thread copies units i = its index, then
 *   i + the grid's thread count, …: the destination is written in order (coalesced); the
 *   source's address is the sum over the dimensions of (i's index along it) × (its stride),
 *   the indices found by dividing i by each extent in turn — by a multiply-high, an add and
 *   a shift where i fits 32 bits (the host's ``narrow``, with each extent's magic number
 *   and shift), by 64-bit division past that (the GPU has no integer divider: a division
 *   is a subroutine, the reason the 32-bit way exists);
 * - arrayport_transpose_tiles, for layouts whose source is contiguous along another axis
 *   than the destination (a transpose, a permuted plane of a batch): 32 × 32 tiles through
 *   shared memory, read along the source's contiguous axis and written along the
 *   destination's, so that both sides are coalesced; the other dimensions are the batch.
 *
 * The host side (the core's planner, _csrc/device_copy_plan.h) hands either kernel a
 * layout already reduced: dimensions of extent 1 dropped, neighbours that are contiguous with each other
 * merged, and the innermost run of contiguous bytes (a row slice's row, else an element)
 * split into units — the widest of 1, 2, 4, 8 or 16 bytes that divides the run, every
 * other stride and both addresses — with the split as the innermost dimension. So one
 * kernel serves every element size and every stride (negative and zero included: the
 * source is only read). Dimensions are stored innermost first and
 * the loops over them are unrolled, so every shape and stride is read from the parameter
 * space at a constant offset.
 */
#include "dialect.h"
#include "strided_copy_params.h"

/* One unit from ``from`` to ``to`` (both already addressable: shared, or AP_GLOBAL_BYTES). */
AP_DEVICE void ap_copy_unit(void *to, const void *from, ap_u32 unit) {
    switch (unit) {
    case 1: *(ap_u8 *)to = *(const ap_u8 *)from; break;
    case 2: *(ap_u16 *)to = *(const ap_u16 *)from; break;
    case 4: *(ap_u32 *)to = *(const ap_u32 *)from; break;
    case 8: *(ap_u64 *)to = *(const ap_u64 *)from; break;
    default: *(ap_u128 *)to = *(const ap_u128 *)from; break;
    }
}

/* n / d for every 32-bit n, given d's magic and shift (the host's divisor(), which says
 * where the method comes from): the multiply-high in 32 bits, the sum in 64 so that it
 * cannot overflow. */
AP_DEVICE ap_u32 ap_divide(ap_u32 n, ap_u32 magic, ap_u32 shift) {
    ap_u64 high = ((ap_u64)n * magic) >> 32;
    return (ap_u32)((high + n) >> shift);
}

AP_KERNEL(arrayport_strided_copy, ap_strided_copy_params, p) {
    AP_THREADS {
        ap_u64 step = (ap_u64)blockDim.x * gridDim.x;
        ap_u64 first = (ap_u64)blockIdx.x * blockDim.x + threadIdx.x;
        if (p.narrow) {
            for (ap_u64 i = first; i < (ap_u64)p.count; i += step) {
                ap_u32 rest = (ap_u32)i;
                ap_i64 offset = 0;
                AP_UNROLL
                for (int d = 0; d < AP_STRIDED_COPY_MAX_DIMS; d++) {
                    if ((ap_u32)d + 1 >= p.ndim) {   /* the outermost: rest is its index */
                        if ((ap_u32)d < p.ndim)
                            offset += (ap_i64)rest * p.strides[d];
                        break;
                    }
                    ap_u32 next = ap_divide(rest, p.magic[d], p.shift[d]);
                    offset += (ap_i64)(rest - next * (ap_u32)p.extents[d]) * p.strides[d];
                    rest = next;
                }
                ap_copy_unit(AP_GLOBAL_BYTES(p.dst + i * p.unit, p.unit),
                             AP_GLOBAL_BYTES(p.src + (ap_u64)offset, p.unit), p.unit);
            }
        } else {
            for (ap_i64 i = (ap_i64)first; i < p.count; i += (ap_i64)step) {
                ap_i64 rest = i, offset = 0;
                AP_UNROLL
                for (int d = 0; d < AP_STRIDED_COPY_MAX_DIMS; d++) {
                    if ((ap_u32)d >= p.ndim)
                        break;
                    offset += (rest % p.extents[d]) * p.strides[d];
                    rest /= p.extents[d];
                }
                ap_copy_unit(AP_GLOBAL_BYTES(p.dst + (ap_u64)i * p.unit, p.unit),
                             AP_GLOBAL_BYTES(p.src + (ap_u64)offset, p.unit), p.unit);
            }
        }
    }
}


/* Blocks of AP_TILE x AP_TILE_ROWS threads; grid (R tiles, C tiles, batch), the last two
 * looped over where they exceed the grid. The loops depend on the block only, so every
 * thread of a block reaches every barrier. */
AP_KERNEL(arrayport_transpose_tiles, ap_transpose_params, p) {
    /* unit-sized cells, AP_TILE + 1 to a row so that a column read spreads over the banks */
    AP_SHARED ap_u128 tile[AP_TILE * (AP_TILE + 1)];
    ap_i64 r0 = (ap_i64)blockIdx.x * AP_TILE;
    for (ap_i64 b = blockIdx.z; b < p.batch; b += gridDim.z) {
        ap_i64 rest = b, src_base = 0, dst_base = 0;
        AP_UNROLL
        for (int d = 0; d < AP_STRIDED_COPY_MAX_DIMS; d++) {
            if ((ap_u32)d < p.ndim) {
                ap_i64 index = rest % p.extents[d];
                rest /= p.extents[d];
                src_base += index * p.src_strides[d];
                dst_base += index * p.dst_strides[d];
            }
        }
        for (ap_i64 c0 = (ap_i64)blockIdx.y * AP_TILE; c0 < p.cols;
             c0 += (ap_i64)gridDim.y * AP_TILE) {
            AP_THREADS {   /* read: consecutive threads along R, the source's contiguous axis */
                for (int j = 0; j < AP_TILE; j += AP_TILE_ROWS) {
                    ap_i64 r = r0 + threadIdx.x, c = c0 + threadIdx.y + j;
                    if (r < p.rows && c < p.cols)
                        ap_copy_unit((ap_u8 *)tile + ((threadIdx.y + j) * (AP_TILE + 1) +
                                                      threadIdx.x) * p.unit,
                                     AP_GLOBAL_BYTES(p.src + (ap_u64)(src_base + r * p.unit +
                                                                      c * p.src_col_stride),
                                                     p.unit), p.unit);
                }
            }
            AP_BARRIER
            AP_THREADS {   /* write: consecutive threads along C, the destination's */
                for (int j = 0; j < AP_TILE; j += AP_TILE_ROWS) {
                    ap_i64 r = r0 + threadIdx.y + j, c = c0 + threadIdx.x;
                    if (r < p.rows && c < p.cols)
                        ap_copy_unit(AP_GLOBAL_BYTES(p.dst + (ap_u64)(dst_base +
                                                                      r * p.dst_row_stride +
                                                                      c * p.unit), p.unit),
                                     (ap_u8 *)tile + (threadIdx.x * (AP_TILE + 1) +
                                                      threadIdx.y + j) * p.unit, p.unit);
                }
            }
            AP_BARRIER
        }
    }
}
