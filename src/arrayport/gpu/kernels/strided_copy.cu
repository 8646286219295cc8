/* arrayport's strided copy on the GPU: any strided layout of one device's memory into a
 * C-contiguous buffer of the same device (View.copy, gpu/copies.py, which plans it and
 * launches it on the copy's stream; contiguous data stays a DMA transfer).
 *
 * The host side (gpu/kernels/strided_copy.py) hands the kernel a layout already reduced:
 * dimensions of extent 1 dropped, neighbours that are contiguous with each other merged,
 * and the element split into units — the widest of 1, 2, 4, 8 or 16 bytes that divides the
 * element size, every stride and both addresses — with the split as one more, innermost,
 * dimension. So one kernel serves every element size and every stride (negative and zero
 * included: the source is only read).
 *
 * Each thread copies units i = its index, then i + the grid's thread count, …: the
 * destination is written in order (coalesced); the source's address is the sum over the
 * dimensions of (i's index along it) × (its stride). Dimensions are stored innermost first
 * and the loop over them is unrolled, so every shape and stride is read from the parameter
 * space at a constant offset.
 */
#include "dialect.h"

#define AP_STRIDED_COPY_MAX_DIMS 64   /* arrayport's largest rank (AP_COPY_MAX_NDIM) */

typedef struct {
    ap_u64 dst;                                   /* the C-contiguous destination */
    ap_u64 src;                                   /* the source's first unit */
    ap_i64 count;                                 /* units to copy */
    ap_i64 extents[AP_STRIDED_COPY_MAX_DIMS];     /* innermost first; ndim of them used */
    ap_i64 strides[AP_STRIDED_COPY_MAX_DIMS];     /* the source's, in bytes, innermost first */
    ap_u32 ndim;
    ap_u32 unit;                                  /* bytes per unit: 1, 2, 4, 8 or 16 */
} ap_strided_copy_params;

AP_KERNEL(arrayport_strided_copy, ap_strided_copy_params, p) {
    AP_THREADS {
        ap_i64 step = (ap_i64)blockDim.x * gridDim.x;
        for (ap_i64 i = (ap_i64)blockIdx.x * blockDim.x + threadIdx.x; i < p.count; i += step) {
            ap_i64 rest = i, offset = 0;
            AP_UNROLL
            for (int d = 0; d < AP_STRIDED_COPY_MAX_DIMS; d++) {
                if ((ap_u32)d < p.ndim) {
                    offset += (rest % p.extents[d]) * p.strides[d];
                    rest /= p.extents[d];
                }
            }
            ap_u64 from = p.src + (ap_u64)offset, to = p.dst + (ap_u64)i * p.unit;
            switch (p.unit) {
            case 1: *AP_GLOBAL(ap_u8, to) = *AP_GLOBAL(const ap_u8, from); break;
            case 2: *AP_GLOBAL(ap_u16, to) = *AP_GLOBAL(const ap_u16, from); break;
            case 4: *AP_GLOBAL(ap_u32, to) = *AP_GLOBAL(const ap_u32, from); break;
            case 8: *AP_GLOBAL(ap_u64, to) = *AP_GLOBAL(const ap_u64, from); break;
            default: *AP_GLOBAL(ap_u128, to) = *AP_GLOBAL(const ap_u128, from); break;
            }
        }
    }
}
