/*
 * AVX2 + F16C codecs. Compiled with -mavx2 -mf16c (this file only) and
 * called only after cpuid said yes. Bit-identical to quant_scalar.c: the same
 * fp32 operations in the same order (no FMA: the build has -ffp-contract=off
 * and no -mfma), cvtps2dq rounding to nearest even like the scalar shifter,
 * and the scalar reference (quant_ref.h) for the few elements a vector loop
 * leaves over.
 *
 * Speed: quantize reads each block twice, once for max |x| and once to
 * encode. Blocks go in groups of at most 16 KiB of input, so the second read
 * hits L1 and memory sees one pass; the group's scales come out of one vector
 * division (no per-block dependency chain), and the next group is prefetched
 * while this one is encoded, so memory keeps streaming during the compute.
 * The loops are specialised per (dtype, bits) by always_inline helpers
 * called with constants. Per eight elements the work is a handful of
 * operations on the two or three vector ports, so for L2-resident data the
 * 16-bit types are compute-bound below memcpy speed; from L3 or DRAM the
 * codecs move fewer bytes than memcpy and keep up with it.
 */
#include <immintrin.h>
#include <string.h>

#include "quant_kernels/quant_avx2_vec.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

ZPP_AVX2_INLINE uint32_t avx2HmaxU16(__m256i v) {
  __m128i m = _mm_max_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu16(m, _mm_srli_si128(m, 8));
  m = _mm_max_epu16(m, _mm_srli_si128(m, 4));
  m = _mm_max_epu16(m, _mm_srli_si128(m, 2));
  return (uint32_t)_mm_extract_epi16(m, 0) & 0xffffu;
}

/* ---- quantize ---------------------------------------------------------------------- */

/* max |x| of x[0..len) as fp32 bits, by integer max of the magnitude bits
 * (which order like the values, NaN above Inf above every finite value). */
ZPP_AVX2_INLINE uint32_t avx2AbsMaxBits(const void* x, zppDataType_t dtype, size_t len) {
  size_t i = 0;
  if (dtype == zppFloat32) {
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    const float* f = (const float*)x;
    for (; i + 32 <= len; i += 32) {
      m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(f + i)), mask));
      m1 =
          _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(f + i + 8)), mask));
      m2 = _mm256_max_epu32(m2,
                            _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(f + i + 16)), mask));
      m3 = _mm256_max_epu32(m3,
                            _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(f + i + 24)), mask));
    }
    for (; i + 8 <= len; i += 8)
      m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(f + i)), mask));
    uint32_t amax = avx2HmaxU32(_mm256_max_epu32(_mm256_max_epu32(m0, m1), _mm256_max_epu32(m2, m3)));
    for (; i < len; i++) {
      uint32_t b = zppF32Bits(f[i]) & 0x7fffffffu;
      if (b > amax) amax = b;
    }
    return amax;
  }
  /* 16-bit formats: the max of the magnitude bits, widened afterwards. */
  const __m256i mask = _mm256_set1_epi16(0x7fff);
  __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
  const uint16_t* h = (const uint16_t*)x;
  for (; i + 64 <= len; i += 64) {
    m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i)), mask));
    m1 = _mm256_max_epu16(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i + 16)), mask));
    m2 = _mm256_max_epu16(m2, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i + 32)), mask));
    m3 = _mm256_max_epu16(m3, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i + 48)), mask));
  }
  for (; i + 16 <= len; i += 16)
    m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i)), mask));
  uint32_t amax = avx2HmaxU16(_mm256_max_epu16(_mm256_max_epu16(m0, m1), _mm256_max_epu16(m2, m3)));
  for (; i < len; i++) {
    uint32_t b = h[i] & 0x7fffu;
    if (b > amax) amax = b;
  }
  return dtype == zppFloat16 ? zppF32Bits(zppHalfToFloat((uint16_t)amax)) : amax << 16;
}

/* A vector whose lanes' max is the block's max |x| as integer bits: fp32
 * magnitude bits, or fp16/bf16 magnitude bits in 32-bit lanes. Integer max
 * works because magnitude bits order like the values, NaN above Inf above
 * every finite value. len: a multiple of 16. */
ZPP_AVX2_INLINE __m256i avx2BlockMaxVec(const void* x, zppDataType_t dtype, size_t len) {
  size_t i = 0;
  if (dtype == zppFloat32) {
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    const float* f = (const float*)x;
    __m256i m0 = _mm256_setzero_si256(), m1 = m0;
    for (; i + 16 <= len; i += 16) {
      m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(f + i)), mask));
      m1 =
          _mm256_max_epu32(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(f + i + 8)), mask));
    }
    return _mm256_max_epu32(m0, m1);
  }
  const __m256i mask = _mm256_set1_epi16(0x7fff);
  const uint16_t* h = (const uint16_t*)x;
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  for (; i + 32 <= len; i += 32) {
    m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i)), mask));
    m1 = _mm256_max_epu16(m1, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i + 16)), mask));
  }
  if (i < len)
    m0 = _mm256_max_epu16(m0, _mm256_and_si256(_mm256_loadu_si256((const __m256i*)(h + i)), mask));
  __m256i m = _mm256_max_epu16(m0, m1);
  return _mm256_max_epu32(_mm256_and_si256(m, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(m, 16));
}

/* Lane k of the result = max over the lanes of m[k]: eight blocks' maxima
 * in one vector, by a transpose-and-max network (no scalar horizontal max
 * per block, and no dependency chain from one block to the next). */
ZPP_AVX2_INLINE __m256i avx2TransposeMax8(const __m256i m[8]) {
  __m256i t0 = _mm256_max_epu32(_mm256_unpacklo_epi32(m[0], m[1]), _mm256_unpackhi_epi32(m[0], m[1]));
  __m256i t1 = _mm256_max_epu32(_mm256_unpacklo_epi32(m[2], m[3]), _mm256_unpackhi_epi32(m[2], m[3]));
  __m256i t2 = _mm256_max_epu32(_mm256_unpacklo_epi32(m[4], m[5]), _mm256_unpackhi_epi32(m[4], m[5]));
  __m256i t3 = _mm256_max_epu32(_mm256_unpacklo_epi32(m[6], m[7]), _mm256_unpackhi_epi32(m[6], m[7]));
  /* per 128-bit half: [m0, m1, m2, m3] reduced over that half's lanes */
  __m256i u = _mm256_max_epu32(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1));
  __m256i w = _mm256_max_epu32(_mm256_unpacklo_epi64(t2, t3), _mm256_unpackhi_epi64(t2, t3));
  return _mm256_max_epu32(_mm256_permute2x128_si256(u, w, 0x20), _mm256_permute2x128_si256(u, w, 0x31));
}

/* Eight blocks' max |x| as fp32 bits. */
ZPP_AVX2_INLINE __m256i avx2MaxBitsF32(__m256i a, zppDataType_t dtype) {
  if (dtype == zppFloat32) return a;
  if (dtype == zppBfloat16) return _mm256_slli_epi32(a, 16);
  /* fp16: widen exactly with F16C (magnitudes: Inf stays Inf, NaN stays NaN). */
  __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, a), 0x08);
  return _mm256_castps_si256(_mm256_cvtph_ps(_mm256_castsi256_si128(p)));
}

/* Set lanes of four compare results: packed to bytes, one movemask. */
ZPP_AVX2_INLINE int avx2CountMask32(__m256 m0, __m256 m1, __m256 m2, __m256 m3) {
  __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(_mm256_castps_si256(m0), _mm256_castps_si256(m1)),
                                 _mm256_packs_epi32(_mm256_castps_si256(m2), _mm256_castps_si256(m3)));
  return __builtin_popcount((unsigned)_mm256_movemask_epi8(w));
}
/* The int2 hint's counts (quant_impl.h, ZPP_QUANT_INT2_WIDE_T) of 32
 * elements x[0..3] and their t = x * inv, added to cnt[0] (wide) and cnt[1]
 * (non-zero). */
ZPP_AVX2_INLINE void avx2Int2Counts32(const __m256 x[4], const __m256 t[4], int* cnt) {
  const __m256 sign = _mm256_set1_ps(-0.0f), thr = _mm256_set1_ps(ZPP_QUANT_INT2_WIDE_T);
  const __m256 zero = _mm256_setzero_ps();
  __m256 w[4], n[4];
  for (int k = 0; k < 4; k++) {
    w[k] = _mm256_cmp_ps(_mm256_andnot_ps(sign, t[k]), thr, _CMP_GE_OQ);
    n[k] = _mm256_cmp_ps(x[k], zero, _CMP_NEQ_UQ);
  }
  cnt[0] += avx2CountMask32(w[0], w[1], w[2], w[3]);
  cnt[1] += avx2CountMask32(n[0], n[1], n[2], n[3]);
}

/* 32 elements quantized to int8, in element order. No clamp: |q| <= Q holds
 * without it (|x| <= a, so |x * inv| <= Q(1 + 2^-24), which rounds to at
 * most Q + 2^-17 < Q + 1/2), so the reference's clamp never changes a value.
 * cnt (int2; NULL otherwise): adds the hint's counts. For sums (the fused
 * requantization, whose sums may be exactly ternary) all of them: wide ones
 * to cnt[0], non-zero ones to cnt[1]; for a tensor, where counting is what
 * an in-cache int2 quantize spends most on, the wide ones among 16 of the
 * 32 (lanes of t[0] and t[2]) to cnt[0]: still a lower bound of c. */
ZPP_AVX2_INLINE __m256i avx2Quant32(const void* x, zppDataType_t dtype, size_t i, __m256 vinv, int* cnt,
                                    int sums) {
  const __m256 in[4] = {avx2Load8(x, dtype, i), avx2Load8(x, dtype, i + 8), avx2Load8(x, dtype, i + 16),
                        avx2Load8(x, dtype, i + 24)};
  const __m256 t[4] = {_mm256_mul_ps(in[0], vinv), _mm256_mul_ps(in[1], vinv),
                       _mm256_mul_ps(in[2], vinv), _mm256_mul_ps(in[3], vinv)};
  if (cnt != NULL && sums) {
    avx2Int2Counts32(in, t, cnt);
  } else if (cnt != NULL) {
    const __m256 sign = _mm256_set1_ps(-0.0f), thr = _mm256_set1_ps(ZPP_QUANT_INT2_WIDE_T);
    int w0 = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, t[0]), thr, _CMP_GE_OQ));
    int w2 = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, t[2]), thr, _CMP_GE_OQ));
    cnt[0] += __builtin_popcount((unsigned)(w0 | w2 << 8));
  }
  return avx2RoundInt8x32(t[0], t[1], t[2], t[3]);
}

/* int8 values of elements 2i, 2i+1 -> the byte (lo nibble, hi nibble), one
 * per 16-bit lane: lo + 16 * hi of the masked bytes. */
ZPP_AVX2_INLINE __m256i avx2Nibbles(__m256i v) {
  return _mm256_maddubs_epi16(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), _mm256_set1_epi16(0x1001));
}

/* 64 int8 q (-1, 0 or 1: int2) as 16 bytes of 2-bit fields, element 4k + j
 * in bits 2j..2j+1 of byte k: the fields paired into nibbles (a + 4 b per
 * 16-bit lane), the nibbles packed to bytes, paired into bytes (c + 16 d),
 * packed again; the 128-bit lanes leave the four dwords in the order 0, 2,
 * 1, 3, which one permute undoes. */
ZPP_AVX2_INLINE __m128i avx2Crumbs64(__m256i q0, __m256i q1) {
  const __m256i three = _mm256_set1_epi8(3);
  __m256i n0 = _mm256_maddubs_epi16(_mm256_and_si256(q0, three), _mm256_set1_epi16(0x0401));
  __m256i n1 = _mm256_maddubs_epi16(_mm256_and_si256(q1, three), _mm256_set1_epi16(0x0401));
  __m256i b = _mm256_maddubs_epi16(_mm256_packus_epi16(n0, n1), _mm256_set1_epi16(0x1001));
  __m256i r = _mm256_packus_epi16(b, b);
  return _mm256_castsi256_si128(
      _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
}

/* Prefetches the 32 elements at element i of pf (NULL: none). */
ZPP_AVX2_INLINE void avx2Prefetch32(const uint8_t* pf, zppDataType_t dtype, size_t i) {
  if (pf == NULL) return;
  if (dtype == zppFloat32) {
    _mm_prefetch((const char*)(pf + 4 * i), _MM_HINT_T0);
    _mm_prefetch((const char*)(pf + 4 * i + 64), _MM_HINT_T0);
  } else {
    _mm_prefetch((const char*)(pf + 2 * i), _MM_HINT_T0);
  }
}

/* How many of the 32 int8 q in v are not zero: the escape hint's count
 * (movemask and popcnt run on ports the vector work leaves idle). */
ZPP_AVX2_INLINE int avx2NonZero32(__m256i v) {
  unsigned zero = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_setzero_si256()));
  return 32 - __builtin_popcount(zero);
}

/* Encodes x[0..len) (a block starting at element `base`) with 1/step inv,
 * prefetching the same span of pf meanwhile: the next group's input, so
 * that memory keeps streaming while this group is computed from L1.
 * Returns the block's escape hint (quant_impl.h): for int8 and int4 0 when
 * more than E q are non-zero (those of a short block's scalar tail not
 * counted), for int2 from its counts (avx2Quant32; 1 for a short block).
 * sums: x is a fused requantization's sums. */
ZPP_AVX2_INLINE int avx2EncodeBlock(const void* x, zppDataType_t dtype, size_t len, int bits,
                                    const zppQuantBlockParams_t* bp, uint8_t* data, size_t base,
                                    const uint8_t* pf, int sums) {
  const __m256 vinv = _mm256_set1_ps(bp->inv);
  size_t i = 0;
  int nz = 0, cnt[2] = {0, 0};
  if (bits == 8) {
    for (; i + 32 <= len; i += 32) {
      avx2Prefetch32(pf, dtype, i);
      __m256i q = avx2Quant32(x, dtype, i, vinv, NULL, 0);
      nz += avx2NonZero32(q);
      _mm256_storeu_si256((__m256i*)(data + base + i), q);
    }
  } else if (bits == 2) {
    uint8_t* d = data + base / 4;
    for (; i + 64 <= len; i += 64) {
      avx2Prefetch32(pf, dtype, i);
      avx2Prefetch32(pf, dtype, i + 32);
      __m256i q0 = avx2Quant32(x, dtype, i, vinv, cnt, sums);
      __m256i q1 = avx2Quant32(x, dtype, i + 32, vinv, cnt, sums);
      _mm_storeu_si128((__m128i*)(d + i / 4), avx2Crumbs64(q0, q1));
    }
    if (i + 32 <= len) { /* a block of 32, or the rest of a short one */
      __m256i q0 = avx2Quant32(x, dtype, i, vinv, cnt, sums);
      _mm_storel_epi64((__m128i*)(d + i / 4), avx2Crumbs64(q0, _mm256_setzero_si256()));
      i += 32;
    }
  } else {
    uint8_t* d = data + base / 2;
    for (; i + 64 <= len; i += 64) {
      avx2Prefetch32(pf, dtype, i);
      avx2Prefetch32(pf, dtype, i + 32);
      __m256i q0 = avx2Quant32(x, dtype, i, vinv, NULL, 0);
      __m256i q1 = avx2Quant32(x, dtype, i + 32, vinv, NULL, 0);
      nz += avx2NonZero32(q0) + avx2NonZero32(q1);
      __m256i n0 = avx2Nibbles(q0);
      __m256i n1 = avx2Nibbles(q1);
      _mm256_storeu_si256((__m256i*)(d + i / 2),
                          _mm256_permute4x64_epi64(_mm256_packus_epi16(n0, n1), 0xd8));
    }
    for (; i + 32 <= len; i += 32) {
      __m256i q0 = avx2Quant32(x, dtype, i, vinv, NULL, 0);
      nz += avx2NonZero32(q0);
      __m256i n0 = avx2Nibbles(q0);
      __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(n0, n0), 0xd8);
      _mm_storeu_si128((__m128i*)(d + i / 2), _mm256_castsi256_si128(p));
    }
  }
  /* Only a segment's last, short block gets here. */
  if (i < len) {
    zppQuantEncodeDtypeRef((const uint8_t*)x + i * (dtype == zppFloat32 ? 4 : 2), dtype, len - i, bp,
                           bits, data, base + i);
    if (bits == 2) return 1; /* its tail is not counted, and non-zero ones must all be */
  }
  if (bits == 2)
    return sums ? zppQuantEscHasCandidate(cnt[0], cnt[1]) : cnt[0] <= ZPP_QUANT_ESC_PER_BLOCK;
  return nz <= ZPP_QUANT_ESC_PER_BLOCK;
}

/* Scales and data of a block whose parameters are known. Returns the
 * block's escape hint (quant_impl.h): 0 when it is zero or avx2EncodeBlock
 * says 0, else 1. */
ZPP_AVX2_INLINE int avx2EncodeWithParams(const void* x, zppDataType_t dtype, size_t len, int bits,
                                         const zppQuantBlockParams_t* bp, uint8_t* data, size_t base,
                                         const uint8_t* pf, int sums) {
  if (bp->kind != ZPP_QBLOCK_NORMAL) {
    memset(data + zppQuantByteOf(base, bits), 0, zppQuantDataBytes(len, bits));
    return bp->kind != ZPP_QBLOCK_ZERO;
  }
  if (bp->p != 1.0f) {
    /* max |x| < 2^-64: the x * 2^64 step of the reference. Such blocks are
     * rare enough to take the scalar path (and the escape scan). */
    zppQuantEncodeDtypeRef(x, dtype, len, bp, bits, data, base);
    return 1;
  }
  return avx2EncodeBlock(x, dtype, len, bits, bp, data, base, pf, sums);
}

/* One block of any length, on its own: the last, short block of a segment.
 * Returns its escape hint. */
ZPP_AVX2_INLINE int avx2QuantizeOneBlock(const void* x, zppDataType_t dtype, size_t len, int bits,
                                         uint8_t* scales, size_t b, uint8_t* data, size_t base,
                                         int sums) {
  zppQuantBlockParams_t bp = zppQuantBlockSetup(avx2AbsMaxBits(x, dtype, len), zppQuantQmax(bits));
  zppQuantStoreScale(scales, b, bp.scale);
  return avx2EncodeWithParams(x, dtype, len, bits, &bp, data, base, NULL, sums);
}

/* Whole blocks [b0, b0 + nb) of a segment, `in` pointing at block b0's first
 * element, in groups of up to eight: pass 1 over the group (from memory), all
 * eight scales and reciprocals with one vector division each (the same IEEE
 * operations as zppQuantBlockSetup), then pass 2 (from L1: a group is at most
 * 16 KiB of input). Each block's escape hint is ORed into hints[its escape
 * group] (hints: indexed from the segment's first group; NULL: none).
 * sums: in is a fused requantization's sums (avx2Quant32's counts). */
ZPP_AVX2_INLINE void avx2QuantizeBlocks(const void* in, zppDataType_t dtype, size_t b0, size_t nb,
                                        int bits, int block, uint8_t* scales, uint8_t* data,
                                        uint8_t* hints, int sums) {
  const size_t perGroupLog2 = (size_t)(zppQuantLog2(ZPP_QUANT_ESC_GROUP) - zppQuantLog2(block));
  const size_t esize = dtype == zppFloat32 ? 4 : 2;
  const size_t bs = (size_t)block;
  size_t group = 16384 / (bs * esize);
  group = group < 1 ? 1 : group > 8 ? 8 : group;
  const float qf = (float)zppQuantQmax(bits);
  for (size_t g0 = b0; g0 < b0 + nb; g0 += group) {
    size_t g = b0 + nb - g0 < group ? b0 + nb - g0 : group;
    const uint8_t* x = (const uint8_t*)in + (g0 - b0) * bs * esize;
    /* the next group, when it is a full one */
    int pfNext = g0 + 2 * group <= b0 + nb;
    __m256i m[8];
    for (size_t k = 0; k < 8; k++)
      m[k] = k < g ? avx2BlockMaxVec(x + k * bs * esize, dtype, bs) : _mm256_setzero_si256();
    __m256i abits = avx2MaxBitsF32(avx2TransposeMax8(m), dtype);
    __m256 a = _mm256_castsi256_ps(abits);
    __m256i nonfinite = _mm256_cmpgt_epi32(abits, _mm256_set1_epi32(0x7f7fffff));
    __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)ZPP_QUANT_TINY_BITS), abits);
    __m256i zero = _mm256_cmpeq_epi32(abits, _mm256_setzero_si256());
    __m256 p =
        _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(0x1p64f), _mm256_castsi256_ps(tiny));
    __m256 vq = _mm256_set1_ps(qf);
    __m256 scale = _mm256_div_ps(a, vq);
    __m256 inv = _mm256_div_ps(vq, _mm256_mul_ps(a, p));
    scale = _mm256_blendv_ps(scale, _mm256_castsi256_ps(_mm256_set1_epi32((int)ZPP_QUANT_NAN_BITS)),
                             _mm256_castsi256_ps(nonfinite));
    float sc[8], iv[8], pv[8];
    _mm256_storeu_ps(sc, scale);
    _mm256_storeu_ps(iv, inv);
    _mm256_storeu_ps(pv, p);
    memcpy(scales + 4 * g0, sc, 4 * g);
    int nfMask = _mm256_movemask_ps(_mm256_castsi256_ps(nonfinite));
    int zeroMask = _mm256_movemask_ps(_mm256_castsi256_ps(zero));
    for (size_t k = 0; k < g; k++) {
      zppQuantBlockParams_t bp;
      bp.kind = (nfMask >> k) & 1     ? ZPP_QBLOCK_NONFINITE
                : (zeroMask >> k) & 1 ? ZPP_QBLOCK_ZERO
                                      : ZPP_QBLOCK_NORMAL;
      bp.scale = sc[k];
      bp.inv = iv[k];
      bp.p = pv[k];
      int may = avx2EncodeWithParams(x + k * bs * esize, dtype, bs, bits, &bp, data, (g0 + k) * bs,
                                     pfNext ? x + (g + k) * bs * esize : NULL, sums);
      if (hints != NULL) hints[(g0 + k) >> perGroupLog2] |= (uint8_t)may;
    }
  }
}

ZPP_AVX2_INLINE void avx2QuantizeT(const void* in, zppDataType_t dtype, size_t count, int bits,
                                   int block, uint8_t* packed, uint8_t* hints) {
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  size_t esize = dtype == zppFloat32 ? 4 : 2;
  size_t full = count / (size_t)block;
  if (hints != NULL) memset(hints, 0, zppQuantNumGroups(count));
  avx2QuantizeBlocks(in, dtype, 0, full, bits, block, scales, data, hints, 0);
  size_t lo = full * (size_t)block;
  if (lo < count) {
    int may = avx2QuantizeOneBlock((const uint8_t*)in + lo * esize, dtype, count - lo, bits, scales,
                                   full, data, lo, 0);
    if (hints != NULL) hints[lo / ZPP_QUANT_ESC_GROUP] |= (uint8_t)may;
  }
}

/* The codecs' (dtype, bits) pairs as constants: CALL(DT, BITS) for each. */
#define AVX2_SPECIALIZE(dtype, bits, CALL) \
  do {                                     \
    if ((dtype) == zppFloat32) {           \
      AVX2_BITS(zppFloat32, bits, CALL);   \
    } else if ((dtype) == zppFloat16) {    \
      AVX2_BITS(zppFloat16, bits, CALL);   \
    } else {                               \
      AVX2_BITS(zppBfloat16, bits, CALL);  \
    }                                      \
  } while (0)
#define AVX2_BITS(dt, bits, CALL) \
  do {                            \
    if ((bits) == 8)              \
      CALL(dt, 8);                \
    else if ((bits) == 4)         \
      CALL(dt, 4);                \
    else                          \
      CALL(dt, 2);                \
  } while (0)

static void avx2Quantize(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                         uint8_t* packed, uint8_t* hints) {
#define AVX2_QUANTIZE(DT, BITS) avx2QuantizeT(in, DT, count, BITS, block, packed, hints)
  AVX2_SPECIALIZE(dtype, bits, AVX2_QUANTIZE);
#undef AVX2_QUANTIZE
}

/* ---- decode ------------------------------------------------------------------------ */

/* q of elements i..i+31 (i even) as four fp32 vectors. int4 splits all 32
 * nibbles with byte operations first, so that per eight elements only the
 * widening (a shuffle) and the conversion remain: fewer operations on the
 * two ports that also do the multiplies and adds. */
typedef struct {
  __m256 v0, v1, v2, v3;
} avx2Q32_t;

ZPP_AVX2_INLINE avx2Q32_t avx2DecodeQ32(const uint8_t* data, int bits, size_t i) {
  avx2Q32_t q;
  if (bits == 8) {
    q.v0 = avx2DecodeQ8(data, 8, i);
    q.v1 = avx2DecodeQ8(data, 8, i + 8);
    q.v2 = avx2DecodeQ8(data, 8, i + 16);
    q.v3 = avx2DecodeQ8(data, 8, i + 24);
    return q;
  }
  const __m128i m = _mm_set1_epi8(0x0f), e = _mm_set1_epi8(8);
  __m128i d = _mm_loadu_si128((const __m128i*)(data + i / 2));
  /* (n ^ 8) - 8: nibble n as a signed byte */
  __m128i lo = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(d, m), e), e);
  __m128i hi = _mm_sub_epi8(_mm_xor_si128(_mm_and_si128(_mm_srli_epi16(d, 4), m), e), e);
  __m128i b0 = _mm_unpacklo_epi8(lo, hi), b1 = _mm_unpackhi_epi8(lo, hi);
  q.v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b0));
  q.v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b0, b0)));
  q.v2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b1));
  q.v3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b1, b1)));
  return q;
}

ZPP_AVX2_INLINE void avx2Apply8(float* dst, __m256 y, zppQuantDecodeMode_t mode) {
  if (mode == ZPP_DECODE_STORE)
    _mm256_storeu_ps(dst, y);
  else if (mode == ZPP_DECODE_ZERO_ADD)
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_setzero_ps(), y));
  else
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), y));
}

/* int2 decodes by table: a field holds one of four values, so the block's
 * four products q * s (the very multiplies of the arithmetic path) sit in a
 * vector and vpermps/vpermd look eight elements up at once. Sixteen
 * elements' 32 data bits are broadcast to every dword, and a variable shift
 * brings field k to the low bits of dword k; the permutes read 3 index
 * bits, the next field's low bit among them, so the tables hold their four
 * entries twice. */
ZPP_AVX2_INLINE __m256i avx2Int2Load16(const uint8_t* data, size_t i) {
  int32_t w;
  memcpy(&w, data + i / 4, sizeof w);
  return _mm256_set1_epi32(w);
}
ZPP_AVX2_INLINE __m256i avx2Int2Index(__m256i w, int half) {
  return _mm256_srlv_epi32(w, half ? _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30)
                                   : _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
}
/* q * s for the field values 0..3 (q = 0, 1, -2, -1), twice. */
ZPP_AVX2_INLINE __m256 avx2Int2TableF32(float s) {
  return _mm256_mul_ps(_mm256_setr_ps(0, 1, -2, -1, 0, 1, -2, -1), _mm256_set1_ps(s));
}

/* Elements [lo, hi) of one block with scale s into dst[0 .. hi-lo). */
ZPP_AVX2_INLINE void avx2DecodeSpan(const uint8_t* data, int bits, size_t lo, size_t hi, float s,
                                    float* dst, zppQuantDecodeMode_t mode) {
  const __m256 vs = _mm256_set1_ps(s);
  size_t i = lo;
  if (bits == 2) {
    const __m256 tab = avx2Int2TableF32(s);
    for (; i + 16 <= hi; i += 16) {
      __m256i w = avx2Int2Load16(data, i);
      avx2Apply8(dst + (i - lo), _mm256_permutevar8x32_ps(tab, avx2Int2Index(w, 0)), mode);
      avx2Apply8(dst + (i - lo) + 8, _mm256_permutevar8x32_ps(tab, avx2Int2Index(w, 1)), mode);
    }
    zppQuantDecodeSpanRef(data, bits, i, hi, s, dst + (i - lo), mode);
    return;
  }
  for (; i + 32 <= hi; i += 32) {
    avx2Q32_t q = avx2DecodeQ32(data, bits, i);
    avx2Apply8(dst + (i - lo), _mm256_mul_ps(q.v0, vs), mode);
    avx2Apply8(dst + (i - lo) + 8, _mm256_mul_ps(q.v1, vs), mode);
    avx2Apply8(dst + (i - lo) + 16, _mm256_mul_ps(q.v2, vs), mode);
    avx2Apply8(dst + (i - lo) + 24, _mm256_mul_ps(q.v3, vs), mode);
  }
  for (; i + 8 <= hi; i += 8)
    avx2Apply8(dst + (i - lo), _mm256_mul_ps(avx2DecodeQ8(data, bits, i), vs), mode);
  zppQuantDecodeSpanRef(data, bits, i, hi, s, dst + (i - lo), mode);
}

/* Elements [c0, c1) of a segment (c0 even) into dst[0 .. c1-c0). */
ZPP_AVX2_INLINE void avx2DecodeRange(const uint8_t* seg, size_t count, int bits, int block, size_t c0,
                                     size_t c1, float* dst, zppQuantDecodeMode_t mode) {
  const uint8_t* scales = zppQuantScalesPtr(seg);
  const uint8_t* data = seg + zppQuantDataOffset(count, block);
  const int lg = zppQuantLog2(block); /* shifts, not a 64-bit division per block */
  size_t i = c0;
  while (i < c1) {
    size_t b = i >> lg;
    size_t end = (b + 1) << lg;
    if (end > c1) end = c1;
    avx2DecodeSpan(data, bits, i, end, zppQuantLoadScale(scales, b), dst + (i - c0), mode);
    i = end;
  }
}

/* Mode and bits as constants, so each combination gets its own loop. */
static void avx2DecodeRangeAny(const uint8_t* seg, size_t count, int bits, int block, size_t c0,
                               size_t c1, float* dst, zppQuantDecodeMode_t mode) {
#define AVX2_DECODE_RANGE(MODE, BITS) avx2DecodeRange(seg, count, BITS, block, c0, c1, dst, MODE)
  if (mode == ZPP_DECODE_ADD)
    AVX2_BITS(ZPP_DECODE_ADD, bits, AVX2_DECODE_RANGE);
  else if (mode == ZPP_DECODE_ZERO_ADD)
    AVX2_BITS(ZPP_DECODE_ZERO_ADD, bits, AVX2_DECODE_RANGE);
  else
    AVX2_BITS(ZPP_DECODE_STORE, bits, AVX2_DECODE_RANGE);
#undef AVX2_DECODE_RANGE
}

/* fp32 -> bf16 for values known not to be NaN (decoded q * scale with a
 * non-NaN scale): zppFloatToBf16 without its NaN case. */
ZPP_AVX2_INLINE __m256i avx2Bf16RoundNotNan(__m256 y) {
  __m256i u = _mm256_castps_si256(y);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
}

/* Sixteen decoded (non-NaN) values stored as dtype at element i. */
ZPP_AVX2_INLINE void avx2StoreDecoded16(void* out, zppDataType_t dtype, size_t i, __m256 y0,
                                        __m256 y1) {
  if (dtype == zppBfloat16) {
    __m256i r = _mm256_packus_epi32(avx2Bf16RoundNotNan(y0), avx2Bf16RoundNotNan(y1));
    _mm256_storeu_si256((__m256i*)((uint16_t*)out + i), _mm256_permute4x64_epi64(r, 0xd8));
  } else {
    avx2Store8(out, dtype, i, y0);
    avx2Store8(out, dtype, i + 8, y1);
  }
}

/* int4 -> fp16/bf16 by table: a block has 16 possible q, so its 16 possible
 * outputs (q * scale rounded to dtype, the very same operations as the
 * arithmetic path) go in two byte tables, low and high bytes, and vpshufb
 * looks 32 elements up at once. */
typedef struct {
  __m256i lo, hi;
} avx2Table16_t;

ZPP_AVX2_INLINE avx2Table16_t avx2MakeTable(float s, zppDataType_t dtype) {
  /* nibble n holds q = n for n < 8, n - 16 otherwise */
  const __m256 vs = _mm256_set1_ps(s);
  __m256 y0 = _mm256_mul_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), vs);
  __m256 y1 = _mm256_mul_ps(_mm256_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1), vs);
  __m256i t; /* the 16 outputs as 16-bit values, in nibble order */
  if (dtype == zppFloat16) {
    t = _mm256_set_m128i(_mm256_cvtps_ph(y1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                         _mm256_cvtps_ph(y0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    t = _mm256_permute4x64_epi64(_mm256_packus_epi32(avx2Bf16RoundNotNan(y0), avx2Bf16RoundNotNan(y1)),
                                 0xd8);
  }
  /* per 128-bit half: low bytes of its 8 entries, then their high bytes */
  t = _mm256_shuffle_epi8(t, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                                              2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  __m128i h0 = _mm256_castsi256_si128(t), h1 = _mm256_extracti128_si256(t, 1);
  avx2Table16_t tab;
  tab.lo = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(h0, h1));
  tab.hi = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(h0, h1));
  return tab;
}

/* Elements i..i+31 (i even) through the table, stored as 16-bit values. */
ZPP_AVX2_INLINE void avx2TableDecode32(const uint8_t* data, size_t i, const avx2Table16_t* tab,
                                       uint16_t* out) {
  __m128i d = _mm_loadu_si128((const __m128i*)(data + i / 2));
  __m128i lo = _mm_and_si128(d, _mm_set1_epi8(0x0f));
  __m128i hi = _mm_and_si128(_mm_srli_epi16(d, 4), _mm_set1_epi8(0x0f));
  __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  __m256i l = _mm256_shuffle_epi8(tab->lo, idx), h = _mm256_shuffle_epi8(tab->hi, idx);
  __m256i w0 = _mm256_unpacklo_epi8(l, h), w1 = _mm256_unpackhi_epi8(l, h);
  _mm256_storeu_si256((__m256i*)(out + i), _mm256_permute2x128_si256(w0, w1, 0x20));
  _mm256_storeu_si256((__m256i*)(out + i + 16), _mm256_permute2x128_si256(w0, w1, 0x31));
}

/* avx2Int2TableF32 rounded to fp16 or bf16 (not NaN: the scale is not), in
 * the low word of each dword. */
ZPP_AVX2_INLINE __m256i avx2Int2Table16(float s, zppDataType_t dtype) {
  __m256 y = avx2Int2TableF32(s);
  if (dtype == zppFloat16)
    return _mm256_cvtepu16_epi32(_mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return avx2Bf16RoundNotNan(y);
}

/* Sixteen int2 elements at i through the 16-bit table, stored at out + i. */
ZPP_AVX2_INLINE void avx2Int2Decode16(const uint8_t* data, size_t i, __m256i tab, uint16_t* out) {
  __m256i w = avx2Int2Load16(data, i);
  __m256i lo = _mm256_permutevar8x32_epi32(tab, avx2Int2Index(w, 0));
  __m256i hi = _mm256_permutevar8x32_epi32(tab, avx2Int2Index(w, 1));
  _mm256_storeu_si256((__m256i*)(out + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8));
}

ZPP_AVX2_INLINE void avx2DequantizeT(const uint8_t* packed, size_t count, int bits, int block,
                                     void* out, zppDataType_t dtype) {
  const uint8_t* scales = zppQuantScalesPtr(packed);
  const uint8_t* data = packed + zppQuantDataOffset(count, block);
  size_t nb = zppQuantNumBlocks(count, block);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * (size_t)block;
    size_t hi = count - lo < (size_t)block ? count : lo + (size_t)block;
    float s = zppQuantLoadScale(scales, b);
    size_t i = lo;
    if (s != s) {
      /* A NaN scale decodes to the output type's canonical NaN. */
      const __m256 vnan = _mm256_castsi256_ps(_mm256_set1_epi32((int)ZPP_QUANT_NAN_BITS));
      for (; i + 8 <= hi; i += 8) avx2Store8(out, dtype, i, vnan);
      for (; i < hi; i++) zppQuantStoreOne(out, dtype, i, zppF32FromBits(ZPP_QUANT_NAN_BITS));
      continue;
    }
    if (bits == 2 && dtype == zppFloat32) {
      const __m256 tab = avx2Int2TableF32(s);
      for (; i + 16 <= hi; i += 16) {
        __m256i w = avx2Int2Load16(data, i);
        _mm256_storeu_ps((float*)out + i, _mm256_permutevar8x32_ps(tab, avx2Int2Index(w, 0)));
        _mm256_storeu_ps((float*)out + i + 8, _mm256_permutevar8x32_ps(tab, avx2Int2Index(w, 1)));
      }
    } else if (bits == 2) {
      const __m256i tab = avx2Int2Table16(s, dtype);
      for (; i + 16 <= hi; i += 16) avx2Int2Decode16(data, i, tab, (uint16_t*)out);
    } else if (bits == 4 && dtype != zppFloat32) {
      avx2Table16_t tab = avx2MakeTable(s, dtype);
      for (; i + 32 <= hi; i += 32) avx2TableDecode32(data, i, &tab, (uint16_t*)out);
    } else {
      const __m256 vs = _mm256_set1_ps(s);
      for (; i + 32 <= hi; i += 32) {
        avx2Q32_t q = avx2DecodeQ32(data, bits, i);
        avx2StoreDecoded16(out, dtype, i, _mm256_mul_ps(q.v0, vs), _mm256_mul_ps(q.v1, vs));
        avx2StoreDecoded16(out, dtype, i + 16, _mm256_mul_ps(q.v2, vs), _mm256_mul_ps(q.v3, vs));
      }
    }
    for (; i < hi; i++) zppQuantStoreOne(out, dtype, i, (float)zppQuantGetQ(data, bits, i) * s);
  }
}

static void avx2Dequantize(const uint8_t* packed, size_t count, int bits, int block, void* out,
                           zppDataType_t dtype) {
#define AVX2_DEQUANTIZE(DT, BITS) avx2DequantizeT(packed, count, BITS, block, out, DT)
  AVX2_SPECIALIZE(dtype, bits, AVX2_DEQUANTIZE);
#undef AVX2_DEQUANTIZE
}

/* ---- reductions -------------------------------------------------------------------- */

static void avx2Accumulate(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                           int block, float* acc, int accumulate) {
  /* Chunks keep acc's slice in L1 while every input is added into it: acc
   * crosses memory once, not n times. Per element the order of additions is
   * the reference's. */
  for (size_t c0 = 0; c0 < count; c0 += ZPP_QUANT_CHUNK) {
    size_t c1 = count - c0 < ZPP_QUANT_CHUNK ? count : c0 + ZPP_QUANT_CHUNK;
    for (int k = 0; k < n; k++) {
      zppQuantDecodeMode_t mode = (k == 0 && !accumulate) ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD;
      avx2DecodeRangeAny(packed + (size_t)k * stride, count, bits, block, c0, c1, acc + c0, mode);
    }
  }
}

/* buf[0..len) / divisor rounded to dtype at element c0 of out. */
ZPP_AVX2_INLINE void avx2Finish(const float* buf, size_t len, float divisor, void* out,
                                zppDataType_t dtype, size_t c0) {
  const __m256 vd = _mm256_set1_ps(divisor);
  size_t i = 0;
  uint32_t db = zppF32Bits(divisor);
  if (divisor == 1.0f) {
    /* x / 1 == x exactly: skip the division. */
    for (; i + 8 <= len; i += 8) avx2Store8(out, dtype, c0 + i, _mm256_loadu_ps(buf + i));
    for (; i < len; i++) zppQuantStoreOne(out, dtype, c0 + i, buf[i]);
  } else if ((db & 0x007fffffu) == 0 && (db & 0x7f800000u) != 0) {
    /* A power of two (a world size of 8, 64, ...): 1 / divisor is exact, so
     * x * (1 / divisor) is the same real number as x / divisor, rounded
     * once the same way: identical, and far cheaper than a division. */
    const __m256 vr = _mm256_set1_ps(1.0f / divisor);
    for (; i + 8 <= len; i += 8)
      avx2Store8(out, dtype, c0 + i, _mm256_mul_ps(_mm256_loadu_ps(buf + i), vr));
    for (; i < len; i++) zppQuantStoreOne(out, dtype, c0 + i, buf[i] / divisor);
  } else {
    for (; i + 8 <= len; i += 8)
      avx2Store8(out, dtype, c0 + i, _mm256_div_ps(_mm256_loadu_ps(buf + i), vd));
    for (; i < len; i++) zppQuantStoreOne(out, dtype, c0 + i, buf[i] / divisor);
  }
}

static void avx2Sum(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                    float divisor, void* out, zppDataType_t dtype) {
  float buf[ZPP_QUANT_CHUNK];
  for (size_t c0 = 0; c0 < count; c0 += ZPP_QUANT_CHUNK) {
    size_t c1 = count - c0 < ZPP_QUANT_CHUNK ? count : c0 + ZPP_QUANT_CHUNK;
    for (int k = 0; k < n; k++)
      avx2DecodeRangeAny(packed + (size_t)k * stride, count, bits, block, c0, c1, buf,
                         k == 0 ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD);
    if (dtype == zppFloat32)
      avx2Finish(buf, c1 - c0, divisor, out, zppFloat32, c0);
    else if (dtype == zppFloat16)
      avx2Finish(buf, c1 - c0, divisor, out, zppFloat16, c0);
    else
      avx2Finish(buf, c1 - c0, divisor, out, zppBfloat16, c0);
  }
}

static void avx2ReduceRequant(const uint8_t* packed, size_t stride, int n, size_t count, int bits_in,
                              int block_in, int bits_out, int block_out, uint8_t* packed_out,
                              uint8_t* hints) {
  /* Sum a chunk of whole output blocks into an L1 buffer, then quantize the
   * chunk with the grouped block setup: small output blocks then cost no
   * more per element than large ones. */
  uint8_t* scales = packed_out + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed_out + zppQuantDataOffset(count, block_out);
  const size_t chunk = zppQuantReduceChunk(block_out);
  float buf[ZPP_QUANT_REDUCE_BUF];
  /* Hints for int2 only (quant_impl.h): the others keep the full scan. */
  uint8_t* h = bits_out == 2 ? hints : NULL;
  if (hints != NULL) memset(hints, h == NULL, zppQuantNumGroups(count));
  for (size_t c0 = 0; c0 < count; c0 += chunk) {
    size_t c1 = count - c0 < chunk ? count : c0 + chunk;
    for (int k = 0; k < n; k++)
      avx2DecodeRangeAny(packed + (size_t)k * stride, count, bits_in, block_in, c0, c1, buf,
                         k == 0 ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD);
    size_t b0 = c0 / (size_t)block_out, full = (c1 - c0) / (size_t)block_out;
#define AVX2_REQUANT(DT, BITS) \
  avx2QuantizeBlocks(buf, DT, b0, full, BITS, block_out, scales, data, BITS == 2 ? h : NULL, 1)
    AVX2_BITS(zppFloat32, bits_out, AVX2_REQUANT);
#undef AVX2_REQUANT
    size_t lo = c0 + full * (size_t)block_out;
    if (lo < c1) {
#define AVX2_REQUANT_LAST(DT, BITS) \
  may = avx2QuantizeOneBlock(buf + (lo - c0), DT, c1 - lo, BITS, scales, b0 + full, data, lo, 1)
      int may;
      AVX2_BITS(zppFloat32, bits_out, AVX2_REQUANT_LAST);
#undef AVX2_REQUANT_LAST
      if (h != NULL) h[lo / ZPP_QUANT_ESC_GROUP] |= (uint8_t)may;
    }
  }
}

/* ---- conversions (tested exhaustively against zpp_half.h) ---------------------------- */

static void avx2ToFloat(const void* in, zppDataType_t dtype, size_t n, float* out) {
  size_t i = 0;
  if (dtype == zppFloat32) {
    memcpy(out, in, n * sizeof(float));
    return;
  }
  if (dtype == zppFloat16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, avx2Load8(in, zppFloat16, i));
    for (; i < n; i++) out[i] = zppHalfToFloat(((const uint16_t*)in)[i]);
    return;
  }
  /* bf16: widen, and make NaNs quiet as zppBf16ToFloat does. */
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_castps_si256(avx2Load8(in, zppBfloat16, i));
    __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                       _mm256_set1_epi32(0x7f800000));
    u = _mm256_or_si256(u, _mm256_and_si256(isnan, quiet));
    _mm256_storeu_si256((__m256i*)(out + i), u);
  }
  for (; i < n; i++) out[i] = zppBf16ToFloat(((const uint16_t*)in)[i]);
}

static void avx2FromFloat(const float* in, size_t n, void* out, zppDataType_t dtype) {
  size_t i = 0;
  if (dtype == zppFloat32) {
    memcpy(out, in, n * sizeof(float));
    return;
  }
  if (dtype == zppFloat16) {
    for (; i + 8 <= n; i += 8) avx2Store8(out, zppFloat16, i, _mm256_loadu_ps(in + i));
  } else {
    for (; i + 8 <= n; i += 8) avx2Store8(out, zppBfloat16, i, _mm256_loadu_ps(in + i));
  }
  for (; i < n; i++) zppQuantStoreOne(out, dtype, i, in[i]);
}

/* ---- error feedback's element-wise steps ------------------------------------------- */

/* One pass: each input vector widened (avx2Load8: bf16 and fp16 NaNs come
 * out signalling where zppBf16ToFloat quiets them, but the add quiets them
 * alike, so x is the reference's bit for bit) and the residual added. */
static void avx2AddResidual(const void* in, zppDataType_t dtype, zppQuantResid_t e, size_t n,
                            float* x) {
  size_t i = 0;
  if (dtype == zppFloat32)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(x + i, _mm256_add_ps(avx2Load8(in, zppFloat32, i), avx2ResidValue8(e, i)));
  else if (dtype == zppFloat16)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(x + i, _mm256_add_ps(avx2Load8(in, zppFloat16, i), avx2ResidValue8(e, i)));
  else
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(x + i, _mm256_add_ps(avx2Load8(in, zppBfloat16, i), avx2ResidValue8(e, i)));
  for (; i < n; i++) x[i] = zppQuantLoadOne(in, dtype, i) + zppQuantResidValue(e, i);
}

/* Per block of 32: x - y (e's stored value where that is not finite), its
 * largest magnitude, and the int8 codec's encode (avx2RoundInt8x32, from
 * registers); tiny blocks (max < 2^-64, scaled by p) and a short last block
 * take the reference's path. */
static void avx2NewResidual(const float* x, const float* y, zppQuantResid_t e, size_t n,
                            zppQuantResid_t out) {
  const __m256i expo = _mm256_set1_epi32(0x7f800000), abs = _mm256_set1_epi32(0x7fffffff);
  size_t lo = 0;
  for (; lo + ZPP_QUANT_RESID_BLOCK <= n; lo += ZPP_QUANT_RESID_BLOCK) {
    __m256 r[4];
    __m256i amax = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
      size_t i = lo + 8 * (size_t)k;
      __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
      __m256i bad = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(d), expo), expo);
      r[k] = _mm256_blendv_ps(d, avx2ResidValue8(e, i), _mm256_castsi256_ps(bad));
      amax = _mm256_max_epu32(amax, _mm256_and_si256(_mm256_castps_si256(r[k]), abs));
    }
    zppQuantBlockParams_t bp = zppQuantBlockSetup(avx2HmaxU32(amax), 127);
    float* scale = out.scale + lo / ZPP_QUANT_RESID_BLOCK;
    if (bp.kind != ZPP_QBLOCK_NORMAL || bp.p != 1.0f) { /* zero, or tiny: the reference */
      float buf[ZPP_QUANT_RESID_BLOCK];
      for (int k = 0; k < 4; k++) _mm256_storeu_ps(buf + 8 * k, r[k]);
      zppQuantResidBlockRef(buf, ZPP_QUANT_RESID_BLOCK, out.q + lo, scale);
      continue;
    }
    *scale = bp.scale;
    const __m256 vinv = _mm256_set1_ps(bp.inv);
    _mm256_storeu_si256((__m256i*)(out.q + lo),
                        avx2RoundInt8x32(_mm256_mul_ps(r[0], vinv), _mm256_mul_ps(r[1], vinv),
                                         _mm256_mul_ps(r[2], vinv), _mm256_mul_ps(r[3], vinv)));
  }
  if (lo < n)
    zppQuantNewResidBlockRef(x + lo, y + lo, zppQuantResidAt(e, lo), n - lo, zppQuantResidAt(out, lo));
}

const zppQuantImpl_t zppQuantImplAvx2 = {
    .name = "avx2",
    .quantize = avx2Quantize,
    .dequantize = avx2Dequantize,
    .accumulate = avx2Accumulate,
    .sum = avx2Sum,
    .reduceRequant = avx2ReduceRequant,
    .toFloat = avx2ToFloat,
    .fromFloat = avx2FromFloat,
    .addResidual = avx2AddResidual,
    .newResidual = avx2NewResidual,
};
