/*
 * channels_ssse3.h — the host copy kernel's (strided_copy.h) SSSE3 byte shuffles for
 * images: 16 pixels of 3 or 4 interleaved uint8 channels split into channel planes
 * (HWC -> CHW) and joined back (CHW -> HWC). Compiled for SSSE3 alone and run only when
 * the CPU has it (ap_copy_config.path).
 */
#ifndef ARRAYPORT_CHANNELS_SSSE3_H
#define ARRAYPORT_CHANNELS_SSSE3_H
#ifdef AP_COPY_SSSE3
/* The byte shuffles (pshufb masks; -1 zeroes a byte) that move 16 three-byte pixels
 * between three interleaved loads and three channel registers. Apart (``interleave`` 0),
 * pick[c][load]: channel c's byte i is interleaved byte 3i + c, in load (3i + c) / 16.
 * Together (1), pick[part][c]: output byte j of part p is channel (16p + j) % 3's byte
 * (16p + j) / 3. */
static void ap_rgb_shuffles(__m128i pick[3][3], int interleave) {
    for (int x = 0; x < 3; x++)
        for (int y = 0; y < 3; y++) {
            int8_t m[16];
            for (int i = 0; i < 16; i++) {
                int at = interleave ? 16 * x + i : 3 * i + x;
                if (interleave) m[i] = (int8_t)(at % 3 == y ? at / 3 : -1);
                else m[i] = (int8_t)(at / 16 == y ? at % 16 : -1);
            }
            pick[x][y] = _mm_loadu_si128((const __m128i *)m);
        }
}

/* 16 pixels of 3 (or 4) interleaved bytes -> 16 bytes per channel, and back: byte shuffles
 * (pshufb) picking each channel's bytes out of the three (four) 16-byte loads. */
AP_TARGET_SSSE3
static void ap_deinterleave_u8_ssse3(char *dst, int64_t dst_row, const char *src,
                                     int64_t channels, int64_t pixels) {
    int64_t k = 0;
    if (channels == 3) {
        __m128i pick[3][3];  /* [channel][load] */
        ap_rgb_shuffles(pick, 0);
        for (; k + 16 <= pixels; k += 16) {
            const char *s = src + 3 * k;
            __m128i a = _mm_loadu_si128((const __m128i *)s);
            __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i e = _mm_loadu_si128((const __m128i *)(s + 32));
            for (int c = 0; c < 3; c++) {
                __m128i v = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, pick[c][0]),
                                                      _mm_shuffle_epi8(b, pick[c][1])),
                                         _mm_shuffle_epi8(e, pick[c][2]));
                _mm_storeu_si128((__m128i *)(dst + c * dst_row + k), v);
            }
        }
    } else {  /* 4 channels: group each load's bytes by channel, then a 4 x 4 transpose */
        const __m128i group = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14,
                                            3, 7, 11, 15);
        for (; k + 16 <= pixels; k += 16) {
            const char *s = src + 4 * k;
            __m128 q0 = _mm_castsi128_ps(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)s), group));
            __m128 q1 = _mm_castsi128_ps(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 16)), group));
            __m128 q2 = _mm_castsi128_ps(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 32)), group));
            __m128 q3 = _mm_castsi128_ps(_mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + 48)), group));
            _MM_TRANSPOSE4_PS(q0, q1, q2, q3);
            _mm_storeu_si128((__m128i *)(dst + k), _mm_castps_si128(q0));
            _mm_storeu_si128((__m128i *)(dst + dst_row + k), _mm_castps_si128(q1));
            _mm_storeu_si128((__m128i *)(dst + 2 * dst_row + k), _mm_castps_si128(q2));
            _mm_storeu_si128((__m128i *)(dst + 3 * dst_row + k), _mm_castps_si128(q3));
        }
    }
    for (; k < pixels; k++)
        for (int64_t c = 0; c < channels; c++) dst[c * dst_row + k] = src[channels * k + c];
}

AP_TARGET_SSSE3
static void ap_interleave_u8_ssse3(char *dst, const char *src, int64_t src_col,
                                   int64_t channels, int64_t pixels) {
    int64_t k = 0;
    if (channels == 3) {
        __m128i pick[3][3];  /* [output part][channel] */
        ap_rgb_shuffles(pick, 1);
        for (; k + 16 <= pixels; k += 16) {
            __m128i r = _mm_loadu_si128((const __m128i *)(src + k));
            __m128i g = _mm_loadu_si128((const __m128i *)(src + src_col + k));
            __m128i b = _mm_loadu_si128((const __m128i *)(src + 2 * src_col + k));
            for (int part = 0; part < 3; part++) {
                __m128i v = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(r, pick[part][0]),
                                                      _mm_shuffle_epi8(g, pick[part][1])),
                                         _mm_shuffle_epi8(b, pick[part][2]));
                _mm_storeu_si128((__m128i *)(dst + 3 * k + 16 * part), v);
            }
        }
    } else {  /* 4 channels: two unpack stages */
        for (; k + 16 <= pixels; k += 16) {
            __m128i r = _mm_loadu_si128((const __m128i *)(src + k));
            __m128i g = _mm_loadu_si128((const __m128i *)(src + src_col + k));
            __m128i b = _mm_loadu_si128((const __m128i *)(src + 2 * src_col + k));
            __m128i a = _mm_loadu_si128((const __m128i *)(src + 3 * src_col + k));
            __m128i rg_lo = _mm_unpacklo_epi8(r, g), rg_hi = _mm_unpackhi_epi8(r, g);
            __m128i ba_lo = _mm_unpacklo_epi8(b, a), ba_hi = _mm_unpackhi_epi8(b, a);
            char *d = dst + 4 * k;
            _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi16(rg_lo, ba_lo));
            _mm_storeu_si128((__m128i *)(d + 16), _mm_unpackhi_epi16(rg_lo, ba_lo));
            _mm_storeu_si128((__m128i *)(d + 32), _mm_unpacklo_epi16(rg_hi, ba_hi));
            _mm_storeu_si128((__m128i *)(d + 48), _mm_unpackhi_epi16(rg_hi, ba_hi));
        }
    }
    for (; k < pixels; k++)
        for (int64_t c = 0; c < channels; c++) dst[channels * k + c] = src[c * src_col + k];
}
#endif  /* AP_COPY_SSSE3 */
#endif  /* ARRAYPORT_CHANNELS_SSSE3_H */
