/*
 * unpack_networks.h — the register transposes the host copy kernel's x86 block paths share
 * (transpose_sse2.h, transpose_avx2.h, transpose_avx512.h), written once for every
 * register width: ``P`` is the intrinsics' prefix (_mm, _mm256, _mm512) and ``V`` the
 * register type. x86 unpacks work inside each 128-bit lane, so a wider register runs
 * one independent transpose per lane. Moves and shuffles only: every bit is kept.
 * Statement macros rather than functions, so each expands inside a function compiled for
 * its instruction set (a target-attributed function cannot call an inline helper compiled
 * for less).
 */
#ifndef ARRAYPORT_UNPACK_NETWORKS_H
#define ARRAYPORT_UNPACK_NETWORKS_H

/* Eight rows of eight 2-byte units per lane, x[j] holding row j, transposed in place:
 * afterwards x[k] holds column k (row 0's unit k first). Three unpack stages. */
#define AP_TRANSPOSE8X8_U16(P, V, x) do {                                          \
    V t_[8], u_[8];                                                                \
    for (int i_ = 0; i_ < 4; i_++) {                                               \
        t_[2 * i_] = P##_unpacklo_epi16((x)[2 * i_], (x)[2 * i_ + 1]);             \
        t_[2 * i_ + 1] = P##_unpackhi_epi16((x)[2 * i_], (x)[2 * i_ + 1]);         \
    }                                                                              \
    for (int i_ = 0; i_ < 2; i_++) {  /* rows 4i..4i+3: columns 0-1, 2-3, 4-5, 6-7 */ \
        u_[4 * i_] = P##_unpacklo_epi32(t_[4 * i_], t_[4 * i_ + 2]);               \
        u_[4 * i_ + 1] = P##_unpackhi_epi32(t_[4 * i_], t_[4 * i_ + 2]);           \
        u_[4 * i_ + 2] = P##_unpacklo_epi32(t_[4 * i_ + 1], t_[4 * i_ + 3]);       \
        u_[4 * i_ + 3] = P##_unpackhi_epi32(t_[4 * i_ + 1], t_[4 * i_ + 3]);       \
    }                                                                              \
    for (int k_ = 0; k_ < 4; k_++) {                                               \
        (x)[2 * k_] = P##_unpacklo_epi64(u_[k_], u_[4 + k_]);                      \
        (x)[2 * k_ + 1] = P##_unpackhi_epi64(u_[k_], u_[4 + k_]);                  \
    }                                                                              \
} while (0)

/* Sixteen rows of sixteen bytes per lane, row j loaded by LOAD(j), transposed: lo[k]
 * holds column k and hi[k] column 8 + k. One byte-unpack stage pairs rows 2i and 2i+1
 * into 2-byte units, then two 8 x 8 unit transposes. */
#define AP_TRANSPOSE16X16_U8(P, V, LOAD, lo, hi) do {                              \
    for (int i_ = 0; i_ < 8; i_++) {                                               \
        V a_ = LOAD(2 * i_), b_ = LOAD(2 * i_ + 1);                                \
        (lo)[i_] = P##_unpacklo_epi8(a_, b_);                                      \
        (hi)[i_] = P##_unpackhi_epi8(a_, b_);                                      \
    }                                                                              \
    AP_TRANSPOSE8X8_U16(P, V, lo);                                                 \
    AP_TRANSPOSE8X8_U16(P, V, hi);                                                 \
} while (0)

#endif  /* ARRAYPORT_UNPACK_NETWORKS_H */
