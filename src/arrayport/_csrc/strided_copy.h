/*
 * strided_copy.h — arrayport's host copy kernel: any strided array (byte strides, any
 * sign) into a new C-contiguous block. Plain C, with SSE2 (the x86-64 baseline) for 4- and
 * 8-byte elements; no Python, no allocation, safe to run without the GIL.
 *
 * Why our own: the copies that matter (a transposed matrix, a permuted 3-d block) read
 * the source across its rows. An element-by-element loop in destination order touches a
 * new cache line — and for power-of-two row lengths the same cache set — on every read,
 * and runs at a tenth of memory bandwidth. This kernel
 *   1. drops size-1 dimensions and merges dimensions contiguous with each other, so the
 *      copy is described by as few, as long, dimensions as possible;
 *   2. copies a destination-contiguous innermost dimension as one memcpy per row;
 *   3. otherwise pairs the destination's innermost dimension with the dimension the
 *      source moves through fastest, and copies that plane in blocks of one cache line by
 *      one cache line (16 x 16 four-byte or 8 x 8 eight-byte elements): each source line
 *      is read whole, transposed in SSE registers into a small staging block, and each
 *      destination line is written whole — with non-temporal stores when the result is
 *      larger than the caches, as memcpy itself does, so writing costs no reads;
 *   4. walks the blocks in the order the memory system likes: long destination rows in
 *      bands of 8 blocks (so the source pages a band reads stay in the TLB) with the
 *      source lines of the block 4 blocks ahead prefetched into L2; short destination
 *      rows down each column of blocks, prefetching 4 blocks down.
 * Memory for results comes from ap_host_alloc (huge pages for large blocks).
 * Measured in benchmarks/bench_copy.py (figures in the issue notes and docs).
 */
#ifndef ARRAYPORT_STRIDED_COPY_H
#define ARRAYPORT_STRIDED_COPY_H

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#include <xmmintrin.h>
#define AP_COPY_SSE2 1
#endif

/* The most dimensions a copy (and a View) may have: NumPy's limit. */
#define AP_COPY_MAX_NDIM 64

/* Results at least this large are written with non-temporal stores: they would evict
 * everything else from the caches anyway, and streaming stores skip reading the
 * destination lines first. Smaller results stay in cache for whoever reads them next. */
#define AP_COPY_STREAMING_BYTES ((int64_t)8 << 20)

/* Blocks are walked in bands of this many block columns: all rows of a band, then the
 * next band. A band's source rows (8 blocks of 16: 128 rows, a page each when rows are
 * 4 KiB or more apart) stay within the TLB while every one of its blocks is read. */
#define AP_COPY_BAND_BLOCKS 8

/* dst[r][k] = src[r * src_row + k * src_col] for a rows x cols block whose destination
 * rows are dst_row bytes apart with contiguous elements: the general element loop. */
static void ap_copy_elements(char *dst, int64_t dst_row, const char *src, int64_t src_row,
                             int64_t src_col, int64_t rows, int64_t cols, int64_t itemsize) {
    for (int64_t r = 0; r < rows; r++) {
        char *d = dst + r * dst_row;
        const char *s = src + r * src_row;
        switch (itemsize) {  /* fixed sizes let the compiler inline each memcpy as one move */
#define AP_COPY_ROW(N) \
        case N: for (int64_t k = 0; k < cols; k++) memcpy(d + k * N, s + k * src_col, N); break;
        AP_COPY_ROW(1)
        AP_COPY_ROW(2)
        AP_COPY_ROW(4)
        AP_COPY_ROW(8)
        AP_COPY_ROW(16)
#undef AP_COPY_ROW
        default:
            for (int64_t k = 0; k < cols; k++)
                memcpy(d + k * itemsize, s + k * src_col, (size_t)itemsize);
        }
    }
}

#ifdef AP_COPY_SSE2
/* One 64-byte line from ``line`` to ``dst`` (16-byte aligned when streaming). */
static inline void ap_copy_line(char *dst, const char *line, int streaming) {
    __m128i a = _mm_loadu_si128((const __m128i *)line);
    __m128i b = _mm_loadu_si128((const __m128i *)(line + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(line + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(line + 48));
    if (streaming) {
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), e);
    } else {
        _mm_storeu_si128((__m128i *)dst, a);
        _mm_storeu_si128((__m128i *)(dst + 16), b);
        _mm_storeu_si128((__m128i *)(dst + 32), c);
        _mm_storeu_si128((__m128i *)(dst + 48), e);
    }
}

/* A 16 x 16 block of 4-byte elements whose source is contiguous down the block's rows
 * (src_row == 4): 4 x 4 register transposes into a staging block, then 16 whole lines.
 * Moves and shuffles only, so every bit pattern (NaN payloads too) is copied exactly. */
static inline void ap_copy_block4(char *dst, int64_t dst_row, const char *src,
                                  int64_t src_col, int streaming) {
    float staged[16][16];
    for (int c = 0; c < 16; c += 4) {
        const char *s = src + c * src_col;
        for (int r = 0; r < 16; r += 4) {
            __m128 a = _mm_loadu_ps((const float *)(s + r * 4));
            __m128 b = _mm_loadu_ps((const float *)(s + src_col + r * 4));
            __m128 e = _mm_loadu_ps((const float *)(s + 2 * src_col + r * 4));
            __m128 f = _mm_loadu_ps((const float *)(s + 3 * src_col + r * 4));
            _MM_TRANSPOSE4_PS(a, b, e, f);
            _mm_storeu_ps(&staged[r][c], a);
            _mm_storeu_ps(&staged[r + 1][c], b);
            _mm_storeu_ps(&staged[r + 2][c], e);
            _mm_storeu_ps(&staged[r + 3][c], f);
        }
    }
    for (int r = 0; r < 16; r++) ap_copy_line(dst + r * dst_row, (const char *)staged[r], streaming);
}

/* The same for an 8 x 8 block of 8-byte elements (src_row == 8), 2 x 2 transposes. */
static inline void ap_copy_block8(char *dst, int64_t dst_row, const char *src,
                                  int64_t src_col, int streaming) {
    uint64_t staged[8][8];
    for (int c = 0; c < 8; c += 2) {
        const char *s = src + c * src_col;
        for (int r = 0; r < 8; r += 2) {
            __m128i a = _mm_loadu_si128((const __m128i *)(s + r * 8));
            __m128i b = _mm_loadu_si128((const __m128i *)(s + src_col + r * 8));
            _mm_storeu_si128((__m128i *)&staged[r][c], _mm_unpacklo_epi64(a, b));
            _mm_storeu_si128((__m128i *)&staged[r + 1][c], _mm_unpackhi_epi64(a, b));
        }
    }
    for (int r = 0; r < 8; r++) ap_copy_line(dst + r * dst_row, (const char *)staged[r], streaming);
}
#endif

/* One block at ``src`` (4- or 8-byte elements), prefetching first, unless ``ahead`` is
 * NULL, the source lines of the block at ``ahead`` (a few blocks further on) into L2 —
 * not L1: rows a multiple of 4 KiB apart share one L1 set, and would evict the lines
 * being read. The hardware prefetchers cannot guess these patterns. */
static inline void ap_copy_block(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                 int64_t itemsize, int streaming, const char *ahead) {
    int64_t edge = 64 / itemsize;
    if (ahead != NULL)
        for (int64_t k = 0; k < edge; k++) _mm_prefetch(ahead + k * src_col, _MM_HINT_T1);
    if (itemsize == 4)
        ap_copy_block4(dst, dst_row, src, src_col, streaming);
    else
        ap_copy_block8(dst, dst_row, src, src_col, streaming);
}

/* A rows x cols plane: destination rows dst_row bytes apart (elements contiguous), source
 * src_row bytes per row and src_col per column. Blocks of one line by one line, walked
 * row of blocks by row of blocks so the destination is written as a few long streams. */
static void ap_copy_plane(char *dst, int64_t dst_row, const char *src, int64_t src_row,
                          int64_t src_col, int64_t rows, int64_t cols, int64_t itemsize,
                          int streaming) {
    int64_t edge = itemsize >= 16 ? 4 : 64 / itemsize;
    int64_t r0 = 0;
#ifdef AP_COPY_SSE2
    if ((itemsize == 4 || itemsize == 8) && src_row == itemsize) {
        streaming = streaming && ((uintptr_t)dst % 16 == 0) && dst_row % 16 == 0;
        int64_t full_rows = rows - rows % edge, full_cols = cols - cols % edge;
        if (cols * itemsize <= 4096) {
            /* Short destination rows (the source's rows are the long, sequential runs):
             * down each band of 16 source rows, which the hardware prefetcher follows. */
            for (int64_t c0 = 0; c0 < full_cols; c0 += edge)
                for (r0 = 0; r0 < full_rows; r0 += edge) {
                    const char *s = src + r0 * src_row + c0 * src_col;
                    ap_copy_block(dst + r0 * dst_row + c0 * itemsize, dst_row, s, src_col,
                                  itemsize, streaming,
                                  r0 + 5 * edge <= full_rows ? s + 4 * 64 : NULL);
                }
        } else {
            for (int64_t band = 0; band < full_cols; band += AP_COPY_BAND_BLOCKS * edge) {
                int64_t band_end = band + AP_COPY_BAND_BLOCKS * edge < full_cols
                                   ? band + AP_COPY_BAND_BLOCKS * edge : full_cols;
                for (r0 = 0; r0 < full_rows; r0 += edge)
                    for (int64_t c0 = band; c0 < band_end; c0 += edge) {
                        const char *s = src + r0 * src_row + c0 * src_col;
                        ap_copy_block(dst + r0 * dst_row + c0 * itemsize, dst_row, s, src_col,
                                      itemsize, streaming,
                                      c0 + 5 * edge <= band_end ? s + 4 * edge * src_col : NULL);
                    }
            }
        }
        for (r0 = 0; r0 < full_rows; r0 += edge)
            ap_copy_elements(dst + r0 * dst_row + full_cols * itemsize, dst_row,
                             src + r0 * src_row + full_cols * src_col, src_row, src_col, edge,
                             cols - full_cols, itemsize);
        r0 = full_rows;
    }
#else
    (void)streaming;
#endif
    /* Everything else (and the rows the blocks left), in blocks of scalar moves. */
    for (; r0 < rows; r0 += edge) {
        int64_t height = rows - r0 < edge ? rows - r0 : edge;
        for (int64_t c0 = 0; c0 < cols; c0 += edge)
            ap_copy_elements(dst + r0 * dst_row + c0 * itemsize, dst_row,
                             src + r0 * src_row + c0 * src_col, src_row, src_col, height,
                             cols - c0 < edge ? cols - c0 : edge, itemsize);
    }
}

/* Copy ``shape``/``byte_strides`` at ``src`` into C-contiguous ``dst``. */
static void ap_copy_strided_to_contiguous(char *dst, const char *src, int ndim,
                                          const int64_t *shape, const int64_t *byte_strides,
                                          int64_t itemsize) {
    int64_t dims[AP_COPY_MAX_NDIM], strides[AP_COPY_MAX_NDIM];
    int64_t total_bytes = itemsize;
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) return;  /* nothing to copy */
        total_bytes *= shape[i];
        if (shape[i] == 1) continue;
        if (n > 0 && strides[n - 1] == byte_strides[i] * shape[i]) {
            dims[n - 1] *= shape[i];          /* merge with the previous (outer) dimension */
            strides[n - 1] = byte_strides[i];
        } else {
            dims[n] = shape[i];
            strides[n] = byte_strides[i];
            n++;
        }
    }
    if (n == 0) { memcpy(dst, src, (size_t)itemsize); return; }

    /* The destination's strides (C order over the merged dimensions). */
    int64_t dst_strides[AP_COPY_MAX_NDIM];
    dst_strides[n - 1] = itemsize;
    for (int d = n - 2; d >= 0; d--) dst_strides[d] = dst_strides[d + 1] * dims[d + 1];

    /* Work in planes (inner, fast) when the source moves faster along some outer
     * dimension than along the innermost one; otherwise row by row. */
    const int inner = n - 1;
    int fast = -1;
    int64_t fast_step = strides[inner] < 0 ? -strides[inner] : strides[inner];
    for (int d = 0; d < inner; d++) {
        int64_t step = strides[d] < 0 ? -strides[d] : strides[d];
        if (step < fast_step) { fast = d; fast_step = step; }
    }
    const int streaming = total_bytes >= AP_COPY_STREAMING_BYTES;

    /* Walk every other dimension, odometer style. */
    int64_t index[AP_COPY_MAX_NDIM] = {0};
    const char *s = src;
    char *t = dst;
    for (;;) {
        if (fast >= 0)
            ap_copy_plane(t, dst_strides[fast], s, strides[fast], strides[inner], dims[fast],
                          dims[inner], itemsize, streaming);
        else if (strides[inner] == itemsize)
            memcpy(t, s, (size_t)(dims[inner] * itemsize));
        else
            ap_copy_elements(t, 0, s, 0, strides[inner], 1, dims[inner], itemsize);
        int d = inner - 1;
        for (; d >= 0; d--) {
            if (d == fast) continue;
            s += strides[d];
            t += dst_strides[d];
            if (++index[d] < dims[d]) break;
            s -= strides[d] * dims[d];
            t -= dst_strides[d] * dims[d];
            index[d] = 0;
        }
        if (d < 0) break;
    }
#ifdef AP_COPY_SSE2
    if (streaming) _mm_sfence();  /* make the streamed stores visible before returning */
#endif
}

#endif  /* ARRAYPORT_STRIDED_COPY_H */
