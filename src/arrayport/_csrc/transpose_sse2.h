/*
 * transpose_sse2.h — the SSE2 block transposes of the host copy kernel (strided_copy.h):
 * one block of one cache line by one cache line (64 x 64 bytes, 32 x 32 two-byte,
 * 16 x 16 four-byte, 8 x 8 eight-byte or 4 x 4 sixteen-byte elements) whose source is
 * contiguous down the block's rows, read line by line, transposed in SSE registers by
 * unpack networks into a staging block (sixteen-byte elements need neither), and written
 * line by line. Moves and shuffles only, so every bit pattern
 * is copied exactly. SSE2 is the x86-64 baseline: these need no run-time check.
 */
#ifndef ARRAYPORT_TRANSPOSE_SSE2_H
#define ARRAYPORT_TRANSPOSE_SSE2_H
#ifdef AP_COPY_SSE2
#include "unpack_networks.h"
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

/* A 4 x 4 block of 16-byte elements (src_row == 16, complex128): each element is one
 * register, so the transpose is the order of the moves — no network, no staging. */
static inline void ap_copy_block16(char *dst, int64_t dst_row, const char *src,
                                   int64_t src_col, int streaming) {
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(src + c * src_col + r * 16));
            if (streaming) _mm_stream_si128((__m128i *)(dst + r * dst_row + c * 16), v);
            else _mm_storeu_si128((__m128i *)(dst + r * dst_row + c * 16), v);
        }
}

/* A 32 x 32 block of 2-byte elements (src_row == 2): 8 x 8 register transposes. */
static inline void ap_copy_block2(char *dst, int64_t dst_row, const char *src,
                                  int64_t src_col, int streaming) {
    uint16_t staged[32][32];
    __m128i x[8];
    for (int c = 0; c < 32; c += 8)
        for (int r = 0; r < 32; r += 8) {
            for (int j = 0; j < 8; j++)
                x[j] = _mm_loadu_si128((const __m128i *)(src + (c + j) * src_col + r * 2));
            AP_TRANSPOSE8X8_U16(_mm, __m128i, x);
            for (int k = 0; k < 8; k++) _mm_storeu_si128((__m128i *)&staged[r + k][c], x[k]);
        }
    for (int r = 0; r < 32; r++) ap_copy_line(dst + r * dst_row, (const char *)staged[r], streaming);
}

/* A 64 x 64 block of bytes (src_row == 1): 16 x 16 transposes, each one byte-unpack
 * stage (pairing rows 2i and 2i+1 into 2-byte units) and two 8 x 8 unit transposes —
 * columns 0-7 of all sixteen rows, then columns 8-15. */
static inline void ap_copy_block1(char *dst, int64_t dst_row, const char *src,
                                  int64_t src_col, int streaming) {
    uint8_t staged[64][64];
    __m128i lo[8], hi[8];
    for (int c = 0; c < 64; c += 16)
        for (int r = 0; r < 64; r += 16) {
#define AP_LOAD_ROW(j) _mm_loadu_si128((const __m128i *)(src + (c + (j)) * src_col + r))
            AP_TRANSPOSE16X16_U8(_mm, __m128i, AP_LOAD_ROW, lo, hi);
#undef AP_LOAD_ROW
            for (int k = 0; k < 8; k++) {
                _mm_storeu_si128((__m128i *)&staged[r + k][c], lo[k]);
                _mm_storeu_si128((__m128i *)&staged[r + 8 + k][c], hi[k]);
            }
        }
    for (int r = 0; r < 64; r++) ap_copy_line(dst + r * dst_row, (const char *)staged[r], streaming);
}

#endif  /* AP_COPY_SSE2 */
#endif  /* ARRAYPORT_TRANSPOSE_SSE2_H */
