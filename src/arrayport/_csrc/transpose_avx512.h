/*
 * transpose_avx512.h — the host copy kernel's (strided_copy.h) AVX-512 block transposes:
 * one source line is one 64-byte register. A block's lines are loaded whole, transposed
 * within each 128-bit lane by the unpack networks every x86 path shares
 * (unpack_networks.h), then the lanes themselves are transposed 4 x 4 (ap_lanes4x4), so
 * each destination line leaves in one register — no staging for 2- to 16-byte elements
 * (32 registers hold the whole block), a 4 KiB staging pass between the two stages for
 * bytes. Needs AVX-512 F, BW and VL; compiled for them alone and run only when the CPU
 * and the OS have them (ap_copy_config.path).
 */
#ifndef ARRAYPORT_TRANSPOSE_AVX512_H
#define ARRAYPORT_TRANSPOSE_AVX512_H
#ifdef AP_COPY_AVX512
#include "unpack_networks.h"

/* One destination line: streamed when asked (whole when 64-byte aligned, else as four
 * 16-byte pieces: streaming only promises 16), else an ordinary store. */
AP_TARGET_AVX512
static inline void ap_store_line512(char *d, __m512i v, int streaming) {
    if (!streaming) {
        _mm512_storeu_si512((void *)d, v);
    } else if (((uintptr_t)d & 63) == 0) {
        _mm512_stream_si512((void *)d, v);
    } else {
        _mm_stream_si128((__m128i *)d, _mm512_castsi512_si128(v));
        _mm_stream_si128((__m128i *)(d + 16), _mm512_extracti32x4_epi32(v, 1));
        _mm_stream_si128((__m128i *)(d + 32), _mm512_extracti32x4_epi32(v, 2));
        _mm_stream_si128((__m128i *)(d + 48), _mm512_extracti32x4_epi32(v, 3));
    }
}

/* Four registers' 128-bit lanes transposed: out[L]'s lane g is in[g]'s lane L. The
 * destination line of each lane index, written to d + L * step. */
AP_TARGET_AVX512
static inline void ap_lanes4x4_store(char *d, int64_t step, __m512i s0, __m512i s1,
                                     __m512i s2, __m512i s3, int streaming) {
    __m512i a0 = _mm512_shuffle_i32x4(s0, s1, 0x44);  /* s0.0 s0.1 s1.0 s1.1 */
    __m512i a1 = _mm512_shuffle_i32x4(s0, s1, 0xEE);  /* s0.2 s0.3 s1.2 s1.3 */
    __m512i a2 = _mm512_shuffle_i32x4(s2, s3, 0x44);
    __m512i a3 = _mm512_shuffle_i32x4(s2, s3, 0xEE);
    ap_store_line512(d, _mm512_shuffle_i32x4(a0, a2, 0x88), streaming);             /* lane 0s */
    ap_store_line512(d + step, _mm512_shuffle_i32x4(a0, a2, 0xDD), streaming);      /* lane 1s */
    ap_store_line512(d + 2 * step, _mm512_shuffle_i32x4(a1, a3, 0x88), streaming);  /* lane 2s */
    ap_store_line512(d + 3 * step, _mm512_shuffle_i32x4(a1, a3, 0xDD), streaming);  /* lane 3s */
}

/* A block's destination lines from 4 x ``group`` registers whose lane L of s[g * group + m]
 * holds destination line group * L + m (its part g): one lane transpose per m. A macro,
 * so that the registers stay registers (through a pointer they went to memory, and 8-byte
 * blocks ran a fifth slower in the caches). */
#define AP_STORE_LANE_GROUPS(dst, dst_row, s, group, streaming)                          \
    for (int m_ = 0; m_ < (group); m_++)                                                 \
        ap_lanes4x4_store((dst) + m_ * (dst_row), (group) * (dst_row), (s)[m_],            \
                          (s)[(group) + m_], (s)[2 * (group) + m_], (s)[3 * (group) + m_], \
                          (streaming))

#define AP_LINE512(j) _mm512_loadu_si512((const void *)(src + (j) * src_col))

/* 16 x 16 four-byte elements: a 4 x 4 transpose in every lane of each four lines, after
 * which s[4g + m]'s lane L is destination line 4L + m, columns 4g..4g+3. */
AP_TARGET_AVX512
static void ap_copy_block4_avx512(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                  int streaming) {
    __m512i s[16];
    for (int g = 0; g < 4; g++) {
        __m512i r0 = AP_LINE512(4 * g), r1 = AP_LINE512(4 * g + 1);
        __m512i r2 = AP_LINE512(4 * g + 2), r3 = AP_LINE512(4 * g + 3);
        __m512i t0 = _mm512_unpacklo_epi32(r0, r1), t1 = _mm512_unpackhi_epi32(r0, r1);
        __m512i t2 = _mm512_unpacklo_epi32(r2, r3), t3 = _mm512_unpackhi_epi32(r2, r3);
        s[4 * g] = _mm512_unpacklo_epi64(t0, t2);
        s[4 * g + 1] = _mm512_unpackhi_epi64(t0, t2);
        s[4 * g + 2] = _mm512_unpacklo_epi64(t1, t3);
        s[4 * g + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
    AP_STORE_LANE_GROUPS(dst, dst_row, s, 4, streaming);
}

/* 8 x 8 eight-byte elements: s[2g + m]'s lane L is destination line 2L + m. */
AP_TARGET_AVX512
static void ap_copy_block8_avx512(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                  int streaming) {
    __m512i s[8];
    for (int g = 0; g < 4; g++) {
        __m512i r0 = AP_LINE512(2 * g), r1 = AP_LINE512(2 * g + 1);
        s[2 * g] = _mm512_unpacklo_epi64(r0, r1);
        s[2 * g + 1] = _mm512_unpackhi_epi64(r0, r1);
    }
    AP_STORE_LANE_GROUPS(dst, dst_row, s, 2, streaming);
}

/* 4 x 4 sixteen-byte elements: one element per lane, so the lane transpose alone. */
AP_TARGET_AVX512
static void ap_copy_block16_avx512(char *dst, int64_t dst_row, const char *src,
                                   int64_t src_col, int streaming) {
    const __m512i s[4] = {AP_LINE512(0), AP_LINE512(1), AP_LINE512(2), AP_LINE512(3)};
    AP_STORE_LANE_GROUPS(dst, dst_row, s, 1, streaming);
}

/* 32 x 32 two-byte elements: an 8 x 8 transpose in every lane of each eight lines, after
 * which s[8g + m]'s lane L is destination line 8L + m, columns 8g..8g+7. */
AP_TARGET_AVX512
static void ap_copy_block2_avx512(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                  int streaming) {
    __m512i s[32];
    for (int g = 0; g < 4; g++) {
        __m512i *x = &s[8 * g];
        for (int j = 0; j < 8; j++) x[j] = AP_LINE512(8 * g + j);
        AP_TRANSPOSE8X8_U16(_mm512, __m512i, x);
    }
    AP_STORE_LANE_GROUPS(dst, dst_row, s, 8, streaming);
}

/* 64 x 64 bytes: a 16 x 16 transpose in every lane of each sixteen lines, staged (64
 * registers would not fit), after which staged[16g + m]'s lane L is destination line
 * 16L + m, columns 16g..16g+15. */
AP_TARGET_AVX512
static void ap_copy_block1_avx512(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                  int streaming) {
    __m512i staged[64];
    __m512i lo[8], hi[8];
    for (int g = 0; g < 4; g++) {
#define AP_LOAD_ROW(j) AP_LINE512(16 * g + (j))
        AP_TRANSPOSE16X16_U8(_mm512, __m512i, AP_LOAD_ROW, lo, hi);
#undef AP_LOAD_ROW
        for (int k = 0; k < 8; k++) {
            staged[16 * g + k] = lo[k];
            staged[16 * g + 8 + k] = hi[k];
        }
    }
    AP_STORE_LANE_GROUPS(dst, dst_row, staged, 16, streaming);
}

#undef AP_LINE512
#undef AP_STORE_LANE_GROUPS
#endif  /* AP_COPY_AVX512 */
#endif  /* ARRAYPORT_TRANSPOSE_AVX512_H */
