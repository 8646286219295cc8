/*
 * transpose_avx2.h — the host copy kernel's (strided_copy.h) AVX2 block transposes for
 * 1- and 2-byte elements, the sizes SSE2 leaves compute-bound: the same unpack networks
 * as transpose_sse2.h on 256-bit registers, whose two lanes transpose two neighbouring
 * groups of source rows at once (half the instructions). Each lane's result goes to its
 * own staging row, and whole staging lines are written out as on the SSE2 path. 4- and
 * 8-byte blocks stay on SSE2 there: they were already memory-bound (docs/devices.md).
 * Compiled for AVX2 alone and run only when the CPU has it (ap_copy_config.path).
 */
#ifndef ARRAYPORT_TRANSPOSE_AVX2_H
#define ARRAYPORT_TRANSPOSE_AVX2_H
#ifdef AP_COPY_AVX2
#include "unpack_networks.h"

/* A register's two 16-byte lanes into staging rows ``low`` and ``high``. */
#define AP_STORE_LANES256(low, high, v) do {                                    \
    _mm_storeu_si128((__m128i *)(low), _mm256_castsi256_si128(v));              \
    _mm_storeu_si128((__m128i *)(high), _mm256_extracti128_si256((v), 1));      \
} while (0)

/* A 64 x 64 block of bytes (src_row == 1): each 16 source lines' 32 bytes hold two
 * 16 x 16 transposes, rows r..r+15 in the low lane and r+16..r+31 in the high one. */
AP_TARGET_AVX2
static void ap_copy_block1_avx2(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                int streaming) {
    uint8_t staged[64][64];
    __m256i lo[8], hi[8];
    for (int c = 0; c < 64; c += 16)
        for (int r = 0; r < 64; r += 32) {
#define AP_LOAD_ROW(j) _mm256_loadu_si256((const __m256i *)(src + (c + (j)) * src_col + r))
            AP_TRANSPOSE16X16_U8(_mm256, __m256i, AP_LOAD_ROW, lo, hi);
#undef AP_LOAD_ROW
            for (int k = 0; k < 8; k++) {
                AP_STORE_LANES256(&staged[r + k][c], &staged[r + 16 + k][c], lo[k]);
                AP_STORE_LANES256(&staged[r + 8 + k][c], &staged[r + 24 + k][c], hi[k]);
            }
        }
    for (int r = 0; r < 64; r++) ap_copy_line(dst + r * dst_row, (const char *)staged[r], streaming);
}

/* A 32 x 32 block of 2-byte elements (src_row == 2): each 8 source lines' 32 bytes hold
 * two 8 x 8 transposes, rows r..r+7 in the low lane and r+8..r+15 in the high one. */
AP_TARGET_AVX2
static void ap_copy_block2_avx2(char *dst, int64_t dst_row, const char *src, int64_t src_col,
                                int streaming) {
    uint16_t staged[32][32];
    __m256i x[8];
    for (int c = 0; c < 32; c += 8)
        for (int r = 0; r < 32; r += 16) {
            for (int j = 0; j < 8; j++)
                x[j] = _mm256_loadu_si256((const __m256i *)(src + (c + j) * src_col + r * 2));
            AP_TRANSPOSE8X8_U16(_mm256, __m256i, x);
            for (int k = 0; k < 8; k++)
                AP_STORE_LANES256(&staged[r + k][c], &staged[r + 8 + k][c], x[k]);
        }
    for (int r = 0; r < 32; r++) ap_copy_line(dst + r * dst_row, (const char *)staged[r], streaming);
}

#endif  /* AP_COPY_AVX2 */
#endif  /* ARRAYPORT_TRANSPOSE_AVX2_H */
