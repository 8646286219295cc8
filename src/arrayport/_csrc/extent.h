/*
 * extent.h — the one place arrayport does arithmetic on layouts it did not make.
 *
 * Every importer (DLPack capsules, the exchange API, the C API, buffers, both interface
 * dicts), every export (buffer len), every copy and every allocation takes its element
 * count, byte count, byte span and pointer sums from these routines, and every product and
 * sum is computed with overflow checks (__builtin_*_overflow). A layout whose numbers do
 * not fit is refused by the caller; nothing downstream of a View ever re-derives a size.
 *
 * The rule a View obeys once it exists (so that no later computation can wrap):
 *   - size    = product of the shape; the product of its non-zero extents, in elements and
 *               in bytes, fits in int64 (NumPy's own limit: it refuses arrays whose byte
 *               count does not fit in intp, broadcasts and empty arrays included);
 *   - nbytes  = ceil(size * storage_bits / 8), so it fits in int64 too;
 *   - the bytes the strides reach, [first + low, first + high), lie inside the address
 *     space, low <= 0 < high, both fitting in int64.
 * Strides count elements (DLPack's convention); storage_bits is one element's size in bits
 * (padded sub-byte types count 8 bits, and lanes multiply).
 */
#ifndef ARRAYPORT_EXTENT_H
#define ARRAYPORT_EXTENT_H

#include <stdint.h>

enum {
    AP_EXTENT_OK = 0,
    AP_EXTENT_NEGATIVE_SHAPE = 1,   /* a shape entry is negative */
    AP_EXTENT_SIZE_OVERFLOW = 2,    /* the element count does not fit in int64 */
    AP_EXTENT_NBYTES_OVERFLOW = 3,  /* size * storage_bits does not fit in int64 */
    AP_EXTENT_SPAN_OVERFLOW = 4,    /* the bytes the strides reach do not fit in int64 */
    AP_EXTENT_ADDRESS_WRAPS = 5,    /* data + byte_offset, or the reached range, wraps */
    AP_EXTENT_SUBBYTE_START = 6     /* a packed sub-byte View would start inside a byte */
};

typedef struct {
    int64_t size;    /* elements */
    int64_t nbytes;  /* bytes the elements occupy (packed sub-byte types round up) */
    int64_t low;     /* first byte reached, relative to the first element (<= 0) */
    int64_t high;    /* one past the last byte reached, relative to the first element */
} APExtent;

/* The bytes `n` elements of `storage_bits` bits occupy, refusing overflow: whole-byte types
 * multiply bytes (so the limit is NumPy's, nbytes <= INT64_MAX), packed sub-byte types
 * multiply bits and round up. */
static inline int ap_nbytes_of(int64_t n, int64_t storage_bits, int64_t *nbytes_out) {
    int64_t bits;
    if (n < 0 || storage_bits <= 0) return AP_EXTENT_NBYTES_OVERFLOW;
    if (storage_bits % 8 == 0)
        return __builtin_mul_overflow(n, storage_bits / 8, nbytes_out)
            ? AP_EXTENT_NBYTES_OVERFLOW : AP_EXTENT_OK;
    if (__builtin_mul_overflow(n, storage_bits, &bits) || bits > INT64_MAX - 7)
        return AP_EXTENT_NBYTES_OVERFLOW;
    *nbytes_out = (bits + 7) / 8;
    return AP_EXTENT_OK;
}

/* The element count of `shape` (0 when any extent is 0), refusing negative entries and
 * shapes whose non-zero extents multiply past int64, in elements or in bytes of
 * `storage_bits` elements — NumPy's rule, which refuses (0, 2**62) float32 too, so every
 * host View arrayport accepts is one NumPy can hold. */
static inline int ap_element_count(int ndim, const int64_t *shape, int64_t storage_bits,
                                   int64_t *size_out) {
    int64_t product = 1, ignored;
    int empty = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return AP_EXTENT_NEGATIVE_SHAPE;
        if (shape[i] == 0) {
            empty = 1;
            continue;
        }
        if (__builtin_mul_overflow(product, shape[i], &product)) return AP_EXTENT_SIZE_OVERFLOW;
    }
    if (ap_nbytes_of(product, storage_bits, &ignored) != AP_EXTENT_OK)
        return AP_EXTENT_NBYTES_OVERFLOW;
    *size_out = empty ? 0 : product;
    return AP_EXTENT_OK;
}

/* Everything about a strided layout that later code needs, checked: see the file's rule.
 * `data` may be NULL only for a layout with no elements (the caller refuses otherwise). */
static int ap_layout_extent(int ndim, const int64_t *shape, const int64_t *strides,
                            int64_t storage_bits, uintptr_t data, uint64_t byte_offset,
                            APExtent *out) {
    int problem = ap_element_count(ndim, shape, storage_bits, &out->size);
    if (problem != AP_EXTENT_OK) return problem;
    problem = ap_nbytes_of(out->size, storage_bits, &out->nbytes);
    if (problem != AP_EXTENT_OK) return problem;
    uintptr_t first;
    if (byte_offset > (uint64_t)INT64_MAX || __builtin_add_overflow(data, (uintptr_t)byte_offset, &first))
        return AP_EXTENT_ADDRESS_WRAPS;
    out->low = 0;
    out->high = 0;
    if (out->size == 0) return AP_EXTENT_OK;
    /* Element offsets of the lowest and highest elements reached. */
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < ndim; i++) {
        int64_t span;
        if (__builtin_mul_overflow(strides[i], shape[i] - 1, &span)) return AP_EXTENT_SPAN_OVERFLOW;
        if (span < 0 ? __builtin_add_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi))
            return AP_EXTENT_SPAN_OVERFLOW;
    }
    /* Bytes below the first element (rounded away from it) and up to one past the last. */
    int64_t hi_plus_one, below;
    if (lo == INT64_MIN || __builtin_add_overflow(hi, 1, &hi_plus_one) ||
        ap_nbytes_of(-lo, storage_bits, &below) != AP_EXTENT_OK ||
        ap_nbytes_of(hi_plus_one, storage_bits, &out->high) != AP_EXTENT_OK)
        return AP_EXTENT_SPAN_OVERFLOW;
    out->low = -below;
    uintptr_t end;
    if ((uint64_t)(-out->low) > first || __builtin_add_overflow(first, (uintptr_t)out->high, &end))
        return AP_EXTENT_ADDRESS_WRAPS;
    return AP_EXTENT_OK;
}

/* A derived View's start: `byte_offset` moved by `element_shift` elements of `storage_bits`
 * bits (negative moves back), refusing overflow and packed starts inside a byte. Layout
 * operations (slicing, indexing) move starts only within their base's checked extent, so a
 * refusal here means a corrupted View; it is checked all the same. */
static inline int ap_shifted_offset(int64_t byte_offset, int64_t element_shift,
                                    int64_t storage_bits, int64_t *offset_out) {
    int64_t shift;
    if (storage_bits <= 0) return AP_EXTENT_NBYTES_OVERFLOW;
    if (storage_bits % 8 == 0) {
        if (__builtin_mul_overflow(element_shift, storage_bits / 8, &shift))
            return AP_EXTENT_SPAN_OVERFLOW;
    } else {
        int64_t bits;
        if (__builtin_mul_overflow(element_shift, storage_bits, &bits))
            return AP_EXTENT_SPAN_OVERFLOW;
        if (bits % 8) return AP_EXTENT_SUBBYTE_START;
        shift = bits / 8;
    }
    return __builtin_add_overflow(byte_offset, shift, offset_out) ? AP_EXTENT_SPAN_OVERFLOW
                                                                   : AP_EXTENT_OK;
}

/* Whether the bytes `extent` reaches from `first` lie inside [buffer, buffer + length). */
static inline int ap_extent_within(uintptr_t first, const APExtent *extent, uintptr_t buffer,
                                   int64_t length) {
    if (extent->size == 0) return 1;
    if (length < 0 || first < buffer) return 0;
    uintptr_t start = first - buffer;  /* the first element's offset in the buffer */
    if (start > (uintptr_t)length) return 0;
    int64_t begin, end;
    if (__builtin_add_overflow((int64_t)start, extent->low, &begin) ||
        __builtin_add_overflow((int64_t)start, extent->high, &end))
        return 0;
    return begin >= 0 && end <= length;
}

#endif  /* ARRAYPORT_EXTENT_H */
