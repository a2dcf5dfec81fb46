/* Vector helpers shared by the AVX2 codecs (quant_avx2.c) and the AVX2
 * rotated codecs (quant_rotate_avx2.c): element loads and stores in the
 * codecs' arithmetic, packed q widened to fp32 (zpp_quant.h), one copy so both round alike. Include
 * only from files compiled with -mavx2 -mf16c (quant_kernels/CMakeLists.txt). */
#ifndef ZPP_QUANT_AVX2_VEC_H
#define ZPP_QUANT_AVX2_VEC_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant_kernels/zpp_quant.h"

#define ZPP_AVX2_INLINE static inline __attribute__((always_inline))

/* ---- element loads and stores ---------------------------------------------------- */

/* Eight elements of dtype starting at element i, widened exactly. */
ZPP_AVX2_INLINE __m256 avx2Load8(const void* in, zppDataType_t dtype, size_t i) {
  if (dtype == zppFloat32) return _mm256_loadu_ps((const float*)in + i);
  __m128i h = _mm_loadu_si128((const __m128i*)((const uint16_t*)in + i));
  if (dtype == zppFloat16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* fp32 -> bf16 bits in the low half of each 32-bit lane: round to nearest
 * even by the carry of an integer add; NaN kept quiet (zppFloatToBf16). */
ZPP_AVX2_INLINE __m256i avx2Bf16Round(__m256 y) {
  __m256i u = _mm256_castps_si256(y);
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  __m256i nanv = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(r, nanv, isnan);
}

/* Eight fp32 values rounded to dtype, stored at element i. */
ZPP_AVX2_INLINE void avx2Store8(void* out, zppDataType_t dtype, size_t i, __m256 y) {
  if (dtype == zppFloat32) {
    _mm256_storeu_ps((float*)out + i, y);
  } else if (dtype == zppFloat16) {
    _mm_storeu_si128((__m128i*)((uint16_t*)out + i),
                     _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    __m256i r = avx2Bf16Round(y);
    _mm_storeu_si128((__m128i*)((uint16_t*)out + i),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
}

/* 32 scaled values (x * inv) rounded (RNE) to int8 bytes in element order:
 * the int8 encode of a block (zpp_quant.h, "Arithmetic") for the vector
 * codes. No clamp: with inv = Q / max |x|, |x * inv| rounds to at most Q
 * (quant_avx2.c, avx2Quant32). packs work per 128-bit lane: the dwords come
 * out as a0 b0 c0 d0 | a1 b1 c1 d1 (4 bytes each), one permute puts them in
 * order. */
ZPP_AVX2_INLINE __m256i avx2RoundInt8x32(__m256 a, __m256 b, __m256 c, __m256 d) {
  __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b)),
                                 _mm256_packs_epi32(_mm256_cvtps_epi32(c), _mm256_cvtps_epi32(d)));
  return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* The stored values q * |scale| of error feedback's residual elements
 * i..i+7 (in one residual block; zpp_quant.h: the scale's sign bit marks
 * the domain). */
ZPP_AVX2_INLINE __m256 avx2ResidValue8(zppQuantResid_t e, size_t i) {
  __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(e.q + i))));
  uint32_t s;
  memcpy(&s, e.scale + i / ZPP_QUANT_RESID_BLOCK, sizeof s);
  return _mm256_mul_ps(q, _mm256_castsi256_ps(_mm256_set1_epi32((int)(s & 0x7fffffffu))));
}

ZPP_AVX2_INLINE uint32_t avx2HmaxU32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return (uint32_t)_mm_cvtsi128_si32(m);
}

/* q of elements i..i+7 as fp32 (i a multiple of 8 for int2, even for int4:
 * each starts on a byte). */
ZPP_AVX2_INLINE __m256 avx2DecodeQ8(const uint8_t* data, int bits, size_t i) {
  if (bits == 8)
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(data + i))));
  /* Four bytes hold eight nibbles, element j at bits 4j..4j+3: shift each
   * lane's nibble to the top, then arithmetic-shift it back down (sign). */
  if (bits == 2) { /* two bytes, element j at bits 2j..2j+1: the same, by 2 */
    uint16_t h;
    memcpy(&h, data + i / 4, sizeof h);
    __m256i v =
        _mm256_sllv_epi32(_mm256_set1_epi32(h), _mm256_setr_epi32(30, 28, 26, 24, 22, 20, 18, 16));
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 30));
  }
  int32_t w;
  memcpy(&w, data + i / 2, sizeof w);
  __m256i v = _mm256_sllv_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0));
  return _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 28));
}

#endif
