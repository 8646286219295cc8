/*
 * transpose_neon.h — the host copy kernel's (strided_copy.h) block transposes on ARM64,
 * where NEON is the baseline (no run-time check): the blocks of transpose_sse2.h — one
 * cache line by one cache line, read line by line, transposed in registers into a staging
 * block, written line by line — with NEON's transposes (trn1/trn2 at 2-, 4- and 8-byte
 * granularity, zip1/zip2 to pair bytes). NEON has no non-temporal store intrinsic, so
 * results are written with ordinary stores. Tested bit for bit under qemu-aarch64
 * (tests/test_host_copy.py, the cross-compiled kernel check).
 */
#ifndef ARRAYPORT_TRANSPOSE_NEON_H
#define ARRAYPORT_TRANSPOSE_NEON_H
#ifdef AP_COPY_NEON

/* One 64-byte staging line to the destination. */
static inline void ap_copy_line_neon(char *dst, const char *line) {
    vst1q_u8((uint8_t *)dst, vld1q_u8((const uint8_t *)line));
    vst1q_u8((uint8_t *)dst + 16, vld1q_u8((const uint8_t *)line + 16));
    vst1q_u8((uint8_t *)dst + 32, vld1q_u8((const uint8_t *)line + 32));
    vst1q_u8((uint8_t *)dst + 48, vld1q_u8((const uint8_t *)line + 48));
}

#define AP_U16(v) vreinterpretq_u16_u8(v)
#define AP_U32(v) vreinterpretq_u32_u8(v)
#define AP_U64(v) vreinterpretq_u64_u8(v)
#define AP_BYTES16(v) vreinterpretq_u8_u16(v)
#define AP_BYTES32(v) vreinterpretq_u8_u32(v)
#define AP_BYTES64(v) vreinterpretq_u8_u64(v)

/* Eight rows of eight 2-byte units, x[j] holding row j, transposed in place (x[k] then
 * holds column k): transposes of 2-byte pairs, then of 4-byte pairs, then of halves. */
static inline void ap_transpose8x8_u16_neon(uint8x16_t x[8]) {
    uint8x16_t t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = AP_BYTES16(vtrn1q_u16(AP_U16(x[2 * i]), AP_U16(x[2 * i + 1])));
        t[2 * i + 1] = AP_BYTES16(vtrn2q_u16(AP_U16(x[2 * i]), AP_U16(x[2 * i + 1])));
    }
    for (int i = 0; i < 2; i++) {  /* rows 4i..4i+3: u[4i + m] holds columns m and m + 4 */
        u[4 * i] = AP_BYTES32(vtrn1q_u32(AP_U32(t[4 * i]), AP_U32(t[4 * i + 2])));
        u[4 * i + 1] = AP_BYTES32(vtrn1q_u32(AP_U32(t[4 * i + 1]), AP_U32(t[4 * i + 3])));
        u[4 * i + 2] = AP_BYTES32(vtrn2q_u32(AP_U32(t[4 * i]), AP_U32(t[4 * i + 2])));
        u[4 * i + 3] = AP_BYTES32(vtrn2q_u32(AP_U32(t[4 * i + 1]), AP_U32(t[4 * i + 3])));
    }
    for (int m = 0; m < 4; m++) {
        x[m] = AP_BYTES64(vtrn1q_u64(AP_U64(u[m]), AP_U64(u[4 + m])));
        x[m + 4] = AP_BYTES64(vtrn2q_u64(AP_U64(u[m]), AP_U64(u[4 + m])));
    }
}

#define AP_LOAD16(p) vld1q_u8((const uint8_t *)(p))
#define AP_STORE16(p, v) vst1q_u8((uint8_t *)(p), (v))

/* 16 x 16 four-byte elements (src_row == 4), 4 x 4 transposes. */
static inline void ap_copy_block4_neon(char *dst, int64_t dst_row, const char *src,
                                       int64_t src_col) {
    uint32_t staged[16][16];
    for (int c = 0; c < 16; c += 4) {
        const char *s = src + c * src_col;
        for (int r = 0; r < 16; r += 4) {
            uint32x4_t a = AP_U32(AP_LOAD16(s + r * 4)), b = AP_U32(AP_LOAD16(s + src_col + r * 4));
            uint32x4_t e = AP_U32(AP_LOAD16(s + 2 * src_col + r * 4));
            uint32x4_t f = AP_U32(AP_LOAD16(s + 3 * src_col + r * 4));
            uint64x2_t t0 = vreinterpretq_u64_u32(vtrn1q_u32(a, b));
            uint64x2_t t1 = vreinterpretq_u64_u32(vtrn2q_u32(a, b));
            uint64x2_t t2 = vreinterpretq_u64_u32(vtrn1q_u32(e, f));
            uint64x2_t t3 = vreinterpretq_u64_u32(vtrn2q_u32(e, f));
            AP_STORE16(&staged[r][c], AP_BYTES64(vtrn1q_u64(t0, t2)));
            AP_STORE16(&staged[r + 1][c], AP_BYTES64(vtrn1q_u64(t1, t3)));
            AP_STORE16(&staged[r + 2][c], AP_BYTES64(vtrn2q_u64(t0, t2)));
            AP_STORE16(&staged[r + 3][c], AP_BYTES64(vtrn2q_u64(t1, t3)));
        }
    }
    for (int r = 0; r < 16; r++) ap_copy_line_neon(dst + r * dst_row, (const char *)staged[r]);
}

/* 8 x 8 eight-byte elements (src_row == 8), 2 x 2 transposes. */
static inline void ap_copy_block8_neon(char *dst, int64_t dst_row, const char *src,
                                       int64_t src_col) {
    uint64_t staged[8][8];
    for (int c = 0; c < 8; c += 2) {
        const char *s = src + c * src_col;
        for (int r = 0; r < 8; r += 2) {
            uint64x2_t a = AP_U64(AP_LOAD16(s + r * 8)), b = AP_U64(AP_LOAD16(s + src_col + r * 8));
            AP_STORE16(&staged[r][c], AP_BYTES64(vtrn1q_u64(a, b)));
            AP_STORE16(&staged[r + 1][c], AP_BYTES64(vtrn2q_u64(a, b)));
        }
    }
    for (int r = 0; r < 8; r++) ap_copy_line_neon(dst + r * dst_row, (const char *)staged[r]);
}

/* 4 x 4 sixteen-byte elements (src_row == 16): one register each, moved in order. */
static inline void ap_copy_block16_neon(char *dst, int64_t dst_row, const char *src,
                                        int64_t src_col) {
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            AP_STORE16(dst + r * dst_row + c * 16, AP_LOAD16(src + c * src_col + r * 16));
}

/* 32 x 32 two-byte elements (src_row == 2), 8 x 8 transposes. */
static inline void ap_copy_block2_neon(char *dst, int64_t dst_row, const char *src,
                                       int64_t src_col) {
    uint16_t staged[32][32];
    uint8x16_t x[8];
    for (int c = 0; c < 32; c += 8)
        for (int r = 0; r < 32; r += 8) {
            for (int j = 0; j < 8; j++) x[j] = AP_LOAD16(src + (c + j) * src_col + r * 2);
            ap_transpose8x8_u16_neon(x);
            for (int k = 0; k < 8; k++) AP_STORE16(&staged[r + k][c], x[k]);
        }
    for (int r = 0; r < 32; r++) ap_copy_line_neon(dst + r * dst_row, (const char *)staged[r]);
}

/* 64 x 64 bytes (src_row == 1), 16 x 16 transposes: bytes of rows 2i and 2i+1 zipped
 * into 2-byte units, then two 8 x 8 unit transposes (columns 0-7, then 8-15). */
static inline void ap_copy_block1_neon(char *dst, int64_t dst_row, const char *src,
                                       int64_t src_col) {
    uint8_t staged[64][64];
    uint8x16_t lo[8], hi[8];
    for (int c = 0; c < 64; c += 16)
        for (int r = 0; r < 64; r += 16) {
            for (int i = 0; i < 8; i++) {
                uint8x16_t a = AP_LOAD16(src + (c + 2 * i) * src_col + r);
                uint8x16_t b = AP_LOAD16(src + (c + 2 * i + 1) * src_col + r);
                lo[i] = vzip1q_u8(a, b);
                hi[i] = vzip2q_u8(a, b);
            }
            ap_transpose8x8_u16_neon(lo);
            ap_transpose8x8_u16_neon(hi);
            for (int k = 0; k < 8; k++) {
                AP_STORE16(&staged[r + k][c], lo[k]);
                AP_STORE16(&staged[r + 8 + k][c], hi[k]);
            }
        }
    for (int r = 0; r < 64; r++) ap_copy_line_neon(dst + r * dst_row, (const char *)staged[r]);
}

#undef AP_LOAD16
#undef AP_STORE16
#undef AP_U16
#undef AP_U32
#undef AP_U64
#undef AP_BYTES16
#undef AP_BYTES32
#undef AP_BYTES64
#endif  /* AP_COPY_NEON */
#endif  /* ARRAYPORT_TRANSPOSE_NEON_H */
