/*
 * The rotated codec (zpp_quant.h, "Rotation") with AVX-512 F, BW and DQ: encode
 * of an escape group and decode of rotated blocks, bit-identical to the
 * reference in quant_rotate.c. It follows quant_rotate_avx2.c (read its
 * header first) with 16 lanes and 32 registers:
 *
 * - Stages h = 1, 2, 4, 8 run inside a vector of 16 as fma(v, +-1, s), s the
 *   vector with the partner lanes swapped (`vpermilps`, `vshuff32x4`): the
 *   product v * (+-1) is exact, so the one rounding of the fused operation
 *   is the rounding of s + v or s - v, the spec's x_j + x_{j+h} and
 *   x_j - x_{j+h} (no other multiply-add is fused anywhere). Where the
 *   transform may overflow (the decode of a block with a huge scale), the
 *   spec's subtraction itself (an add, and a masked sub over it), as
 *   quant_rotate_avx2.c does, though the fused form would give the same
 *   default NaN for Inf - Inf (x86 negates no NaN by a multiply).
 * - Blocks of up to 256 (16 vectors) stay in registers from load to w;
 *   larger ones run 256 at a time into an L1 buffer, then the stages from
 *   256 on across it.
 * - The encode of blocks up to 256 takes two passes over an escape group:
 *   pass 1 keeps each block's lane-wise maxima of |x| and |w|; pass 2
 *   reduces them 16 blocks at a time, tests the rule below for every block
 *   before it writes anything, and quantizes.
 * - The decode of int4 looks q * s up in a 16-entry table per block
 *   (`vpermps` indexes by the low 4 bits of each lane: the nibble itself),
 *   the same products the reference forms; blocks up to 128 are decoded
 *   two at a time (their stages interleaved).
 * - Where int4 meets fp32 or bf16 (that decode, qgZ's int4 sums, the bf16
 *   encode into int4) the vectors hold a block's even and odd elements
 *   apart, the order the packed bytes and bf16 pairs already have ("even/odd
 *   order" below).
 *
 * Which groups it encodes, and why a group goes to the reference, is
 * quant_rotate_avx2.c's rule word for word: every block full, finite, with
 * more than E elements at or above max |x| 2^-K (or zero), and a finite w.
 * The sums of rotated segments (qgZ's steps) are quant_rotate_avx2.c's,
 * with the same primitives.
 *
 * Compiled with -mavx512f -mavx512bw -mavx512dq -mavx2 -mf16c (this file only); called
 * only when cpuid says the CPU runs them (quant_common.c).
 */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

#define R5_INLINE static inline __attribute__((always_inline))

/* Sign masks (D) of a whole 4096 block, filled once; and the same in the
 * even/odd order of the int4 decode (decodeEO32): per 32 elements, the 16
 * even ones' masks, then the 16 odd ones'. */
static uint32_t gSigns[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(64)));
static uint32_t gSignsEO[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(64)));
static float gUnitEO[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(64))); /* +-1 in that order */
/* Per chunk of 32, the bf16 sign bits of its 16 pairs (finishEO32). */
static uint32_t gSignsPairEO[ZPP_QUANT_MAX_BLOCK / 2] __attribute__((aligned(64)));
static pthread_once_t gSignsOnce = PTHREAD_ONCE_INIT;
static void fillSigns(void) {
  for (size_t i = 0; i < ZPP_QUANT_MAX_BLOCK; i++) gSigns[i] = zppQuantRotSignMask(i);
  for (size_t c = 0; c < ZPP_QUANT_MAX_BLOCK; c += 32)
    for (size_t l = 0; l < 16; l++) {
      gSignsEO[c + l] = zppQuantRotSignMask(c + 2 * l);
      gSignsEO[c + 16 + l] = zppQuantRotSignMask(c + 2 * l + 1);
    }
  for (size_t i = 0; i < ZPP_QUANT_MAX_BLOCK; i++) gUnitEO[i] = gSignsEO[i] ? -1.0f : 1.0f;
  for (size_t c = 0; c < ZPP_QUANT_MAX_BLOCK; c += 32)
    for (size_t l = 0; l < 16; l++)
      gSignsPairEO[c / 2 + l] = (gSignsEO[c + l] >> 16) | gSignsEO[c + 16 + l];
}

R5_INLINE __m512i signs16(size_t i) { return _mm512_load_si512((const void*)(gSigns + i)); }

R5_INLINE __m512 flip(__m512 v, size_t i) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), signs16(i)));
}

R5_INLINE __m512i absBits(__m512 v) {
  return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
}

/* Lane-wise max(|a|, |b|) with the sign cleared: one `vrangeps` (AVX-512
 * DQ), which selects one of its operands (no arithmetic), so the result is
 * the magnitude bits absBits would give; a NaN operand comes back as a
 * NaN, whose bits are above Inf's either way. */
R5_INLINE __m512 maxAbs2(__m512 a, __m512 b) { return _mm512_range_ps(a, b, 0x0b); }

/* The lane-wise maxima of |v[0..n)| (n a power of two, a constant): a tree
 * of n - 1 maxAbs2, where absBits and an integer max per vector took 2n. */
R5_INLINE __m512i maxAbsN(const __m512* v, int n) {
  if (n == 1) return absBits(v[0]);
  __m512 t[8];
#pragma GCC unroll 8
  for (int k = 0; k < n / 2; k++) t[k] = maxAbs2(v[2 * k], v[2 * k + 1]);
  for (int w = n / 4; w >= 1; w /= 2)
#pragma GCC unroll 8
    for (int k = 0; k < w; k++) t[k] = maxAbs2(t[2 * k], t[2 * k + 1]);
  return _mm512_castps_si512(t[0]);
}

/* Sixteen elements of dtype from element i, widened exactly. */
R5_INLINE __m512 load16(const void* in, zppDataType_t dtype, size_t i) {
  if (dtype == zppFloat32) return _mm512_loadu_ps((const float*)in + i);
  __m256i h = _mm256_loadu_si256((const __m256i*)((const uint16_t*)in + i));
  if (dtype == zppFloat16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ---- the stages -------------------------------------------------------------------- */

/* +1 where lane j has (j & h) == 0, -1 elsewhere; and the mask of the
 * latter lanes (the partners that take the subtraction). */
#define R5_PM(h)                                                                       \
  ((h) == 1   ? _mm512_setr_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1) \
   : (h) == 2 ? _mm512_setr_ps(1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1, -1) \
   : (h) == 4 ? _mm512_setr_ps(1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1, -1, -1, -1, -1) \
              : _mm512_setr_ps(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1))
#define R5_UPPER(h) ((h) == 1 ? 0xaaaa : (h) == 2 ? 0xcccc : (h) == 4 ? 0xf0f0 : 0xff00)

/* Lane j's partner j ^ h. */
R5_INLINE __m512 partner(__m512 v, int h) {
  switch (h) {
    case 1: return _mm512_permute_ps(v, 0xb1);
    case 2: return _mm512_permute_ps(v, 0x4e);
    case 4: return _mm512_shuffle_f32x4(v, v, 0xb1);
    default: return _mm512_shuffle_f32x4(v, v, 0x4e);
  }
}

/* Stage h (1, 2, 4, 8) of one vector. Lower lanes: v + s = x_j + x_{j+h};
 * upper lanes: s - v = x_{j-h} - x_j. exact: the sub itself (NaN from
 * Inf - Inf as the reference makes it); else the fused form, the same
 * rounding for finite operands. */
R5_INLINE __m512 stage(__m512 v, int h, int exact) {
  __m512 s = partner(v, h);
  if (exact) return _mm512_mask_sub_ps(_mm512_add_ps(v, s), (__mmask16)R5_UPPER(h), s, v);
  return _mm512_fmadd_ps(v, R5_PM(h), s);
}

R5_INLINE __m512 stagesIn(__m512 v, int exact) {
  v = stage(v, 1, exact);
  v = stage(v, 2, exact);
  v = stage(v, 4, exact);
  return stage(v, 8, exact);
}

#define R5_BFLY(p, q)             \
  do {                            \
    __m512 t_ = (p);              \
    (p) = _mm512_add_ps(t_, (q)); \
    (q) = _mm512_sub_ps(t_, (q)); \
  } while (0)

/* All stages below 16n of n vectors of 16 (n = 2, 4, 8 or 16, a constant):
 * h = 1 .. 8 inside each vector, then h = 16 .. 8n across them. */
R5_INLINE void stagesNarrow(__m512* v, int n, int exact) {
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) v[k] = stagesIn(v[k], exact);
  for (int d = 1; d < n; d *= 2)
#pragma GCC unroll 16
    for (int k = 0; k < n; k++)
      if ((k & d) == 0) R5_BFLY(v[k], v[k + d]);
}

/* Stages h = 256 .. len/2 on buf (len >= 512), two per pass where two are
 * left (each element still sees them in order). */
R5_INLINE void stagesWide(float* buf, size_t len) {
  size_t h = 256;
  for (; 4 * h <= len; h *= 4)
    for (size_t i = 0; i < len; i += 4 * h)
      for (size_t j = i; j < i + h; j += 16) {
        __m512 a = _mm512_load_ps(buf + j), b = _mm512_load_ps(buf + j + h);
        __m512 c = _mm512_load_ps(buf + j + 2 * h), d = _mm512_load_ps(buf + j + 3 * h);
        __m512 ab0 = _mm512_add_ps(a, b), ab1 = _mm512_sub_ps(a, b);
        __m512 cd0 = _mm512_add_ps(c, d), cd1 = _mm512_sub_ps(c, d);
        _mm512_store_ps(buf + j, _mm512_add_ps(ab0, cd0));
        _mm512_store_ps(buf + j + 2 * h, _mm512_sub_ps(ab0, cd0));
        _mm512_store_ps(buf + j + h, _mm512_add_ps(ab1, cd1));
        _mm512_store_ps(buf + j + 3 * h, _mm512_sub_ps(ab1, cd1));
      }
  for (; h < len; h *= 2)
    for (size_t i = 0; i < len; i += 2 * h)
      for (size_t j = i; j < i + h; j += 16) {
        __m512 a = _mm512_load_ps(buf + j), b = _mm512_load_ps(buf + j + h);
        _mm512_store_ps(buf + j, _mm512_add_ps(a, b));
        _mm512_store_ps(buf + j + h, _mm512_sub_ps(a, b));
      }
}

/* ---- even/odd order (int4) -------------------------------------------------------
 *
 * Where int4 meets fp32 or bf16, every 32 elements of a block sit in two
 * vectors, the 16 even ones (E) and the 16 odd ones (O), in order: a
 * packed byte holds an even element's nibble and the next odd one's, and
 * a bf16 pair loads as one 32-bit lane with the even element low. So one
 * zero-extension of 16 bytes and two table lookups (the low nibble, then
 * the high one) decode 32 elements, a shift and a mask widen 32 bf16, and
 * a ternary-logic op packs 32 nibbles or merges 32 rounded bf16, where the
 * natural order takes a widening or a narrowing per 16. Stage h = 1 pairs
 * E with O (a plain add and sub, no shuffle); stages 2, 4, 8, 16 pair
 * lanes inside E and inside O (stage() with lane distances 1, 2, 4, 8);
 * stages from 32 on pair whole vectors, as in stagesNarrow. Each element
 * sees the spec's stages in the spec's order: the same bits. fp32 output
 * interleaves E and O back with two two-source permutes. */

R5_INLINE __m512 flipEO(__m512 v, size_t i) {
  return _mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(v), _mm512_load_si512((const void*)(gSignsEO + i))));
}

/* The stages from h = 2 of n vectors in even/odd order (n / 2 chunks of 32
 * elements: v[2c] even, v[2c + 1] odd), all below 16n. */
R5_INLINE void stagesEOFrom2(__m512* v, int n, int exact) {
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) v[k] = stagesIn(v[k], exact); /* h = 2 .. 16 */
  for (int d = 2; d < n; d *= 2)                            /* h = 32 .. 8n */
#pragma GCC unroll 16
    for (int k = 0; k < n; k++)
      if ((k & d) == 0) R5_BFLY(v[k], v[k + d]);
}

/* All the stages below 16n: h = 1 pairs each chunk's even and odd vectors. */
R5_INLINE void stagesEO(__m512* v, int n, int exact) {
#pragma GCC unroll 16
  for (int k = 0; k < n; k += 2) R5_BFLY(v[k], v[k + 1]);
  stagesEOFrom2(v, n, exact);
}

/* ---- encode ------------------------------------------------------------------------ */

/* As quant_rotate_avx2.c's: the next group's elements of this block, into
 * L2: into L1 they evicted what the group still used (its own input and w's
 * buffer, 16 KiB each for fp32; fp32 int4 at 4 MiB 8.6 -> 9.2 GB/s). */
R5_INLINE void prefetchBlock(const void* pf, zppDataType_t dtype, size_t at, size_t len) {
  if (pf == NULL) return;
  const size_t esize = dtype == zppFloat32 ? 4 : 2;
  const char* p = (const char*)pf + esize * (at + ZPP_QUANT_ESC_GROUP);
  for (size_t b = 0; b < esize * len; b += 64) _mm_prefetch(p + b, _MM_HINT_T1);
}

/* |x| 2^K >= a as an integer compare of magnitude bits: where a >=
 * R5_ABOVE_MIN(K), a 2^-K is normal and exact, and the test is
 * bits(|x|) > a - R5_ABOVE_BIAS(K). One formula for countAbove, lanesAbove
 * and the encoder's lane-wise form of it. */
#define R5_ABOVE_MIN(K) (((uint32_t)(K) + 1u) << 23)
#define R5_ABOVE_BIAS(K) (((uint32_t)(K) << 23) + 1u)

/* 2^-L in every lane (L <= 12: a normal power of two). */
R5_INLINE __m512 pow2Neg(int L) { return _mm512_castsi512_ps(_mm512_set1_epi32((127 - L) << 23)); }

/* How many of the 16n elements in v have |x| * 2^K >= a (a: finite fp32
 * bits, not zero): quant_rotate_avx2.c's countAbove. */
R5_INLINE int countAbove(const __m512* v, int n, uint32_t a, int K) {
  int c = 0;
  if (a >= R5_ABOVE_MIN(K)) {
    const __m512i t = _mm512_set1_epi32((int)(a - R5_ABOVE_BIAS(K)));
#pragma GCC unroll 16
    for (int k = 0; k < n; k++) c += __builtin_popcount(_mm512_cmpgt_epu32_mask(absBits(v[k]), t));
  } else {
    const __m512 va = _mm512_castsi512_ps(_mm512_set1_epi32((int)a));
    const __m512 vk = _mm512_castsi512_ps(_mm512_set1_epi32((127 + K) << 23));
#pragma GCC unroll 16
    for (int k = 0; k < n; k++) {
      __m512 x = _mm512_mul_ps(_mm512_castsi512_ps(absBits(v[k])), vk);
      c += __builtin_popcount(_mm512_cmp_ps_mask(x, va, _CMP_GE_OQ));
    }
  }
  return c;
}

/* A shortcut for countAbove(...) > E: the lanes of m (lane-wise maxima of
 * the magnitude bits) are distinct elements (quant_rotate_avx2.c's
 * lanesAbove). */
R5_INLINE int lanesAbove(__m512i m, uint32_t a, int K) {
  if (a < R5_ABOVE_MIN(K)) return 0;
  const __m512i t = _mm512_set1_epi32((int)(a - R5_ABOVE_BIAS(K)));
  return __builtin_popcount(_mm512_cmpgt_epu32_mask(m, t)) > ZPP_QUANT_ESC_PER_BLOCK;
}

/* The stored values q * |scale| of residual elements i .. i + 15 (in one
 * residual block). */
R5_INLINE __m512 residValue16(zppQuantResid_t e, size_t i) {
  const __m512 q =
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(const void*)(e.q + i))));
  const uint32_t s = zppF32Bits(e.scale[i / ZPP_QUANT_RESID_BLOCK]) & 0x7fffffffu;
  return _mm512_mul_ps(q, _mm512_castsi512_ps(_mm512_set1_epi32((int)s)));
}

/* w (the n vectors v) into wb; returns the lane-wise maxima of |w|. */
R5_INLINE __m512i storeW(const __m512* v, int n, float* wb) {
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) _mm512_store_ps(wb + 16 * k, v[k]);
  return maxAbsN(v, n);
}

/* Pass 1 of a block of 16n elements (n <= 16), in registers from load to w:
 * its w into wb, and the lane-wise maxima of |x| and of |w| (magnitude
 * bits; 16 disjoint sets of elements) into *xm and *wm. No horizontal
 * reduction here: pass 2 reduces 16 blocks at once (reduce16), off the
 * blocks' dependency chains (the two reductions per block were a fifth of
 * the encode, and kept one block's chain from overlapping the next).
 * (Two blocks interleaved, as the decode does, measured no faster.)
 * With a residual e (error feedback), per vector a rotated residual
 * block's values are added after the stages, an unrotated one's (zero:
 * the caller checked) before them, as the reference's x^ = g + e; adding
 * -0 leaves any value as it is, so each vector takes one add on each
 * side. */
R5_INLINE void rotateBlock(const void* in, zppDataType_t dtype, size_t at, int n, float* wb,
                           const void* pf, const zppQuantResid_t* e, __m512i* xm, __m512i* wm) {
  __m512 v[16], post[16];
  prefetchBlock(pf, dtype, at, 16 * (size_t)n);
  const __m512 negZero = _mm512_set1_ps(-0.0f);
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) {
    const size_t i = at + 16 * (size_t)k;
    v[k] = load16(in, dtype, i);
    if (e != NULL) { /* error feedback (zppQuantizeExFeedback) */
      const __m512 val = residValue16(*e, i);
      const int rot = zppQuantResidIsRotated(*e, i);
      v[k] = _mm512_add_ps(v[k], rot ? negZero : val);
      post[k] = rot ? val : negZero;
    }
  }
  *xm = maxAbsN(v, n);
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) v[k] = flip(v[k], 16 * (size_t)k);
  stagesNarrow(v, n, 0);
  if (e != NULL)
#pragma GCC unroll 16
    for (int k = 0; k < n; k++) v[k] = _mm512_add_ps(v[k], post[k]);
  *wm = storeW(v, n, wb);
}

/* rotateBlock for bf16 into int4, in even/odd order (the section "even/odd
 * order" above says what that is): 32 bf16 load as 16 lanes of two,
 * the even element in the low half, so that a shift and a mask widen them
 * (where the natural order takes a widening per 16), and stage 1 pairs
 * the two vectors. w goes to wb in even/odd order. The lane maxima are
 * still maxima over 16 disjoint sets of elements, all lanesAbove needs.
 * Stage 1 takes the even element's sign as a fused multiply by +-1 (exact,
 * so each result rounds once, as the spec's d_j x_j + d_{j+1} x_{j+1} and
 * d_j x_j - d_{j+1} x_{j+1}): one operation less per 32 elements than
 * flipping both first. */
R5_INLINE void rotateBlockEO(const void* in, size_t at, int n, float* wb, const void* pf, __m512i* xm,
                             __m512i* wm) {
  __m512 v[16];
  prefetchBlock(pf, zppBfloat16, at, 16 * (size_t)n);
  const __m512i hiMask = _mm512_set1_epi32((int)0xffff0000u);
#pragma GCC unroll 8
  for (int c = 0; c < n / 2; c++) {
    const __m512i x = _mm512_loadu_si512((const void*)((const uint16_t*)in + at + 32 * (size_t)c));
    v[2 * c] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    v[2 * c + 1] = _mm512_castsi512_ps(_mm512_and_si512(x, hiMask));
  }
  *xm = maxAbsN(v, n);
#pragma GCC unroll 8
  for (int c = 0; c < n / 2; c++) {
    const __m512 d = _mm512_load_ps(gUnitEO + 32 * (size_t)c); /* the even elements' +-1 */
    const __m512 o = flipEO(v[2 * c + 1], 32 * (size_t)c + 16);
    v[2 * c + 1] = _mm512_fmsub_ps(v[2 * c], d, o);
    v[2 * c] = _mm512_fmadd_ps(v[2 * c], d, o);
  }
  stagesEOFrom2(v, n, 0);
  *wm = storeW(v, n, wb);
}

R5_INLINE __m512i maxOrMin(__m512i a, __m512i b, int least) {
  return least ? _mm512_min_epu32(a, b) : _mm512_max_epu32(a, b);
}

/* Lane j of the result: the largest lane of v[j] (unsigned; the least
 * where least), for 16 vectors: a tree of 128-bit, 64-bit and 32-bit
 * shuffles and maxima, 45 operations where 16 separate reductions take
 * about 130. The tree leaves block j in lane 4 (j % 4) + j / 4; reading v
 * in that transposed order puts it in lane j. */
R5_INLINE __m512i reduce16(const __m512i* v, int least) {
#define R5_T(k) v[((k) % 4) * 4 + (k) / 4]
  __m512i w[8], x[4], y[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++)
    w[i] = maxOrMin(_mm512_shuffle_i32x4(R5_T(2 * i), R5_T(2 * i + 1), 0x44),
                    _mm512_shuffle_i32x4(R5_T(2 * i), R5_T(2 * i + 1), 0xee), least);
#undef R5_T
#pragma GCC unroll 4
  for (int i = 0; i < 4; i++)
    x[i] = maxOrMin(_mm512_shuffle_i32x4(w[2 * i], w[2 * i + 1], 0x88),
                    _mm512_shuffle_i32x4(w[2 * i], w[2 * i + 1], 0xdd), least);
  for (int i = 0; i < 2; i++)
    y[i] = maxOrMin(_mm512_unpacklo_epi64(x[2 * i], x[2 * i + 1]),
                    _mm512_unpackhi_epi64(x[2 * i], x[2 * i + 1]), least);
  const __m512 a = _mm512_castsi512_ps(y[0]), b = _mm512_castsi512_ps(y[1]);
  return maxOrMin(_mm512_castps_si512(_mm512_shuffle_ps(a, b, 0x88)),
                  _mm512_castps_si512(_mm512_shuffle_ps(a, b, 0xdd)), least);
}

/* countAbove over the block of 16n elements at element at, from the input
 * again: where the lane maxima did not settle the count (rare). */
R5_INLINE int countAboveAt(const void* in, zppDataType_t dtype, size_t at, int n, uint32_t a, int K) {
  __m512 v[16];
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) v[k] = load16(in, dtype, at + 16 * (size_t)k); /* signs: |x| only */
  return countAbove(v, n, a, K);
}

/* rne(w * inv) of 32 values, stored as int8 (32 bytes), int4 (16) or int2
 * (8) at d. |q| <= Q without a clamp (quant_avx2.c). packs interleaves the
 * two vectors per 128-bit lane; the qword permute puts them back in order. */
R5_INLINE void store32Q(__m512i qa, __m512i qb, int bits, uint8_t* d) {
  __m512i q16 =
      _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packs_epi32(qa, qb));
  if (bits == 8) {
    _mm256_storeu_si256((__m256i*)d, _mm512_cvtepi16_epi8(q16));
    return;
  }
  if (bits == 2) {
    /* Fields paired per dword (f_2i + 4 f_2i+1, vpmaddwd), then the odd
     * dword of each qword shifted onto bits 4..7 of the even one. */
    __m512i x =
        _mm512_madd_epi16(_mm512_and_si512(q16, _mm512_set1_epi16(3)), _mm512_set1_epi32(0x00040001));
    x = _mm512_or_si512(x, _mm512_srli_epi64(x, 28));
    _mm_storel_epi64((__m128i*)(void*)d, _mm512_cvtepi64_epi8(x));
    return;
  }
  /* Element 2i's nibble low, 2i + 1's high, in the low byte of dword i. */
  __m512i x = _mm512_and_si512(q16, _mm512_set1_epi32(0x000f000f));
  x = _mm512_or_si512(x, _mm512_srli_epi32(x, 12));
  _mm_storeu_si128((__m128i*)d, _mm512_cvtepi32_epi8(x));
}
R5_INLINE void store32(__m512 w0, __m512 w1, __m512 vinv, int bits, uint8_t* d) {
  store32Q(_mm512_cvtps_epi32(_mm512_mul_ps(w0, vinv)), _mm512_cvtps_epi32(_mm512_mul_ps(w1, vinv)),
           bits, d);
}

/* The same for 64 values (int8: 64 bytes, int4: 32, int2: 16): two packs
 * to bytes and one dword permute, then for int4 the nibble pairs by a
 * multiply-add (even element * 1 + odd element * 16) and a truncating pack;
 * for int2 the fields in pairs (a + 4 b, vpmaddubsw), the pairs in pairs
 * (c + 16 d, vpmaddwd), then the pack. */
R5_INLINE void store64Q(__m512i qa, __m512i qb, __m512i qc, __m512i qd, int bits, uint8_t* d) {
  __m512i q8 = _mm512_packs_epi16(_mm512_packs_epi32(qa, qb), _mm512_packs_epi32(qc, qd));
  q8 = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                q8);
  if (bits == 8) {
    _mm512_storeu_si512((void*)d, q8);
    return;
  }
  if (bits == 2) {
    const __m512i n =
        _mm512_maddubs_epi16(_mm512_and_si512(q8, _mm512_set1_epi8(3)), _mm512_set1_epi16(0x0401));
    _mm_storeu_si128((__m128i*)(void*)d,
                     _mm512_cvtepi32_epi8(_mm512_madd_epi16(n, _mm512_set1_epi32(0x00100001))));
    return;
  }
  __m512i n =
      _mm512_maddubs_epi16(_mm512_and_si512(q8, _mm512_set1_epi8(0x0f)), _mm512_set1_epi16(0x1001));
  _mm256_storeu_si256((__m256i*)d, _mm512_cvtepi16_epi8(n));
}
R5_INLINE void store64(const float* w, __m512 vinv, int bits, uint8_t* d) {
  store64Q(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w), vinv)),
           _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w + 16), vinv)),
           _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w + 32), vinv)),
           _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w + 48), vinv)), bits, d);
}

/* Error feedback's residual of 16 values, r = w - (float)q * s (the
 * decode's first step, then a subtract), as the int32 of its 8-bit
 * storage, rne(r * rinv) (zpp_quant.h, "error feedback in the rotated
 * domain"). */
R5_INLINE __m512i residual16(__m512 w, __m512i q, __m512 vs, __m512 vrinv) {
  const __m512 r = _mm512_sub_ps(w, _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs));
  return _mm512_cvtps_epi32(_mm512_mul_ps(r, vrinv));
}

/* quantizeW for error feedback: the same q at d, and the residual's int8
 * values at rq, from registers (store64Q's and store32Q's int8 packing). */
R5_INLINE void quantizeWResid(const float* w, size_t len, int bits, float inv, float s, float rinv,
                              uint8_t* d, int8_t* rq) {
  const __m512 vinv = _mm512_set1_ps(inv), vs = _mm512_set1_ps(s), vrinv = _mm512_set1_ps(rinv);
  size_t i = 0;
  for (; i + 64 <= len; i += 64) {
    __m512 v[4];
    __m512i q[4], r[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      v[k] = _mm512_load_ps(w + i + 16 * k);
      q[k] = _mm512_cvtps_epi32(_mm512_mul_ps(v[k], vinv));
      r[k] = residual16(v[k], q[k], vs, vrinv);
    }
    store64Q(q[0], q[1], q[2], q[3], bits, d + zppQuantByteOf(i, bits));
    store64Q(r[0], r[1], r[2], r[3], 8, (uint8_t*)(rq + i));
  }
  if (i < len) { /* a block of 32 */
    const __m512 a = _mm512_load_ps(w + i), b = _mm512_load_ps(w + i + 16);
    const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, vinv));
    const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, vinv));
    store32Q(qa, qb, bits, d + zppQuantByteOf(i, bits));
    store32Q(residual16(a, qa, vs, vrinv), residual16(b, qb, vs, vrinv), 8, (uint8_t*)(rq + i));
  }
}

/* The chunk of even e and odd o stored in order, as 32 fp32 at f. */
R5_INLINE void storeNaturalEO(float* f, __m512 e, __m512 o) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  _mm512_storeu_ps(f, _mm512_permutex2var_ps(e, lo, o));
  _mm512_storeu_ps(f + 16, _mm512_permutex2var_ps(e, hi, o));
}

/* rne(w * inv) of a chunk of 32 in even/odd order (even e, odd o), as
 * int4 at d (16 bytes): each even element's nibble low, the next odd one's
 * high. Only the low byte of each lane is kept, so q_o << 4 needs no mask. */
R5_INLINE void store32EO(__m512 e, __m512 o, __m512 vinv, uint8_t* d) {
  const __m512i qe = _mm512_cvtps_epi32(_mm512_mul_ps(e, vinv));
  const __m512i qo = _mm512_cvtps_epi32(_mm512_mul_ps(o, vinv));
  const __m512i x = _mm512_ternarylogic_epi32(qe, _mm512_slli_epi32(qo, 4), _mm512_set1_epi32(0xf),
                                              0xec); /* (a & c) | b */
  _mm_storeu_si128((__m128i*)(void*)d, _mm512_cvtepi32_epi8(x));
}

/* w (len a multiple of 32) quantized as a plain normal block with p = 1. */
R5_INLINE void quantizeW(const float* w, size_t len, int bits, float inv, uint8_t* d) {
  const __m512 vinv = _mm512_set1_ps(inv);
  size_t i = 0;
  for (; i + 64 <= len; i += 64) store64(w + i, vinv, bits, d + zppQuantByteOf(i, bits));
  if (i < len) /* a block of 32 */
    store32(_mm512_load_ps(w + i), _mm512_load_ps(w + i + 16), vinv, bits, d + zppQuantByteOf(i, bits));
}

/* Pass 2: a block's w (max |w| wmax, finite) quantized as a plain block. */
R5_INLINE void quantizeBlock(const float* wb, uint32_t wmax, size_t at, size_t len, int bits, int Q,
                             uint8_t* scales, size_t b, uint8_t* data) {
  zppQuantBlockParams_t bp = zppQuantBlockSetup(wmax, Q);
  zppQuantStoreScale(scales, b, bp.scale);
  uint8_t* d = data + zppQuantByteOf(at, bits);
  if (bp.kind != ZPP_QBLOCK_NORMAL)
    memset(d, 0, zppQuantDataBytes(len, bits));
  else if (bp.p != 1.0f)
    zppQuantEncodeDtypeRef(wb, zppFloat32, len, &bp, bits, data, at);
  else
    quantizeW(wb, len, bits, bp.inv, d);
}

/* quantizeW and quantizeBlock for int4 from a w in even/odd order (w at
 * 32c the even elements of chunk c, at 32c + 16 the odd ones; len <= 256):
 * the nibbles packed straight from it; the reference's paths (a zero
 * block, p != 1) read w in order, so it is put back first. */
R5_INLINE void quantizeWEO(const float* w, size_t len, float inv, uint8_t* d) {
  const __m512 vinv = _mm512_set1_ps(inv);
  for (size_t c = 0; c < len; c += 32)
    store32EO(_mm512_load_ps(w + c), _mm512_load_ps(w + c + 16), vinv, d + c / 2);
}
R5_INLINE void quantizeBlockEO(const float* w, uint32_t wmax, size_t at, size_t len, int Q,
                               uint8_t* scales, size_t b, uint8_t* data) {
  float nat[256] __attribute__((aligned(64)));
  for (size_t c = 0; c < len; c += 32)
    storeNaturalEO(nat + c, _mm512_load_ps(w + c), _mm512_load_ps(w + c + 16));
  quantizeBlock(nat, wmax, at, len, 4, Q, scales, b, data);
}

/* Pass 2 over the nb blocks of 16n elements from element base (w at buf,
 * lane maxima in xm[], wm[]): 16 blocks at a time, max |x| and max |w| by
 * reduce16; the rule (finite x, more than E elements at or above
 * max |x| 2^-K, or zero; finite w), returning 0 before anything is written
 * where a block breaks it; the block setups with vector divisions (the
 * IEEE operations of zppQuantBlockSetup: a / Q; Q / (a p), p = 1 here:
 * blocks with a < 2^-64 take the reference's scaled path), so that no
 * block waits on its own two divisions; then each block's q. */
R5_INLINE int quantizeBlocks(const void* in, zppDataType_t dtype, const float* buf, __m512i* xm,
                             __m512i* wm, size_t nb, size_t base, int n, int K, int bits, int Q,
                             uint8_t* scales, uint8_t* data, int eo, const zppQuantResid_t* out) {
  const size_t bs = 16 * (size_t)n;
  const int lb = __builtin_ctz(16u * (unsigned)n);
  uint32_t wmax[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK] __attribute__((aligned(64)));
  float sc[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK] __attribute__((aligned(64)));
  float inv[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK] __attribute__((aligned(64)));
  uint32_t rsc[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK] __attribute__((aligned(64)));
  float rinv[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK] __attribute__((aligned(64)));
  const __m512 vq = _mm512_set1_ps((float)Q);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  for (size_t k0 = 0; k0 < nb; k0 += 16) {
    for (size_t k = nb; k < k0 + 16; k++) xm[k] = wm[k] = _mm512_setzero_si512(); /* pad */
    const __m512i a = reduce16(xm + k0, 0), w = reduce16(wm + k0, 0);
    if (_mm512_cmpge_epu32_mask(a, inf) | _mm512_cmpge_epu32_mask(w, inf)) return 0;
    uint32_t a16[16] __attribute__((aligned(64)));
    _mm512_store_si512((void*)a16, a);
    const size_t kn = nb - k0 < 16 ? nb - k0 : 16;
    /* Settled at once: a zero block (rotated, w = 0), and a block whose 16
     * lane maxima all pass lanesAbove's test (16 > E distinct elements at
     * or above max |x| 2^-K): one compare of their least lane for the 16
     * blocks, where a per-block lanesAbove (a broadcast, a compare, a
     * popcount and two branches each) was 6-9% of the encode. */
    const __m512i t = _mm512_sub_epi32(a, _mm512_set1_epi32((int)R5_ABOVE_BIAS(K)));
    const unsigned settled = _mm512_cmpeq_epi32_mask(a, _mm512_setzero_si512()) |
                             (_mm512_cmpge_epu32_mask(a, _mm512_set1_epi32((int)R5_ABOVE_MIN(K))) &
                              _mm512_cmpgt_epu32_mask(reduce16(xm + k0, 1), t));
    for (unsigned m = ~settled & ((1u << kn) - 1u); m != 0; m &= m - 1) {
      const size_t j = (size_t)__builtin_ctz(m);
      if (lanesAbove(xm[k0 + j], a16[j], K)) continue; /* the lanes settle it (usual) */
      if (countAboveAt(in, dtype, base + (k0 + j) * bs, n, a16[j], K) <= ZPP_QUANT_ESC_PER_BLOCK)
        return 0;
    }
    _mm512_store_si512((void*)(wmax + k0), w);
    const __m512 wf = _mm512_castsi512_ps(w);
    const __m512 s16 = _mm512_div_ps(wf, vq);
    _mm512_store_ps(sc + k0, s16);
    _mm512_store_ps(inv + k0, _mm512_div_ps(vq, wf)); /* Inf where w = 0: not used */
    if (out != NULL) { /* the residual's scale s / 254 (marked rotated) and 254 / s */
      const __m512 v254 = _mm512_set1_ps(254.0f);
      _mm512_store_si512((void*)(rsc + k0),
                         _mm512_or_si512(_mm512_castps_si512(_mm512_div_ps(s16, v254)),
                                         _mm512_set1_epi32((int)ZPP_QUANT_RESID_ROTATED)));
      _mm512_store_ps(rinv + k0, _mm512_div_ps(v254, s16));
    }
  }
  for (size_t k = 0; k < nb; k++) {
    const size_t at = base + k * bs;
    uint8_t* d = data + zppQuantByteOf(at, bits);
    if (wmax[k] < ZPP_QUANT_TINY_BITS) { /* zero (scale +0, q 0), or the scaled path */
      if (eo)
        quantizeBlockEO(buf + k * bs, wmax[k], at, bs, Q, scales, at >> lb, data);
      else
        quantizeBlock(buf + k * bs, wmax[k], at, bs, bits, Q, scales, at >> lb, data);
      if (out != NULL) /* the residual by the reference's steps */
        zppQuantResidTinyRotatedRef(buf + k * bs, bs, bits, data, zppQuantLoadScale(scales, at >> lb),
                                    at, *out);
      continue;
    }
    zppQuantStoreScale(scales, at >> lb, sc[k]);
    if (out != NULL) {
      quantizeWResid(buf + k * bs, bs, bits, inv[k], sc[k], rinv[k], d, out->q + at);
      uint32_t* rs = (uint32_t*)(void*)(out->scale + at / ZPP_QUANT_RESID_BLOCK);
      for (size_t j = 0; j < bs / ZPP_QUANT_RESID_BLOCK; j++) rs[j] = rsc[k];
    } else if (eo) {
      quantizeWEO(buf + k * bs, bs, inv[k], d);
    } else {
      quantizeW(buf + k * bs, bs, bits, inv[k], d);
    }
  }
  return 1;
}

/* A block of 512 or more: 256 at a time through the stages below 256 into
 * buf (each chunk's count of elements at or above a 2^-K taken first where
 * the lane maxima did not settle it), then the wide stages. Returns max |w|
 * or all ones as rotateBlock. */
R5_INLINE uint32_t rotateWide(const void* in, zppDataType_t dtype, size_t at, size_t len, int K,
                              float* buf, const void* pf) {
  prefetchBlock(pf, dtype, at, len);
  __m512i m0 = _mm512_setzero_si512(), m1 = m0;
  for (size_t i = 0; i < len; i += 32) {
    __m512 a = flip(load16(in, dtype, at + i), i);
    __m512 b = flip(load16(in, dtype, at + i + 16), i + 16);
    m0 = _mm512_max_epu32(m0, absBits(a));
    m1 = _mm512_max_epu32(m1, absBits(b));
    _mm512_store_ps(buf + i, a);
    _mm512_store_ps(buf + i + 16, b);
  }
  uint32_t a = _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
  if (a >= 0x7f800000u) return UINT32_MAX;
  int fast = a == 0 || lanesAbove(m0, a, K) || lanesAbove(m1, a, K);
  int c = 0;
  for (size_t i = 0; i < len; i += 256) {
    __m512 v[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) v[k] = _mm512_load_ps(buf + i + 16 * k);
    if (!fast) c += countAbove(v, 16, a, K);
    stagesNarrow(v, 16, 0);
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) _mm512_store_ps(buf + i + 16 * k, v[k]);
  }
  if (!fast && c <= ZPP_QUANT_ESC_PER_BLOCK) return UINT32_MAX;
  stagesWide(buf, len);
  __m512i m = _mm512_setzero_si512();
  for (size_t i = 0; i < len; i += 16) m = _mm512_max_epu32(m, absBits(_mm512_load_ps(buf + i)));
  return _mm512_reduce_max_epu32(m);
}

R5_INLINE int encodeGroupT(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                           const zppQuantResid_t* e, const zppQuantResid_t* out, uint8_t* packed,
                           size_t g) {
  const size_t bs = (size_t)block, base = g * ZPP_QUANT_ESC_GROUP;
  const int lb = __builtin_ctz((unsigned)block); /* shifts, not 64-bit divisions: they showed */
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  if (glen % bs != 0) return 0; /* a short last block: the reference's */
  if (e != NULL && (bs > 256 || !zppQuantResidRotatedOrZero(*e, base, glen))) return 0;
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  const int Q = zppQuantQmax(bits), K = ZPP_QUANT_ESC_LOG2(bits);
  float buf[ZPP_QUANT_ESC_GROUP] __attribute__((aligned(64)));
  const void* pf = count - base > ZPP_QUANT_ESC_GROUP ? in : NULL; /* a next group */
  if (bs <= 256) { /* two passes, so that the blocks' latency chains overlap */
    __m512i xm[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK + 15],
        wm[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK + 15];
    const size_t nb = glen >> lb;
    const int eo = e == NULL && dtype == zppBfloat16 && bits == 4; /* rotateBlockEO */
    for (size_t k = 0; k < nb; k++) {
      const size_t lo = k << lb;
      if (eo) {
        switch (bs) { /* n a constant in each call */
          case 32: rotateBlockEO(in, base + lo, 2, buf + lo, pf, xm + k, wm + k); break;
          case 64: rotateBlockEO(in, base + lo, 4, buf + lo, pf, xm + k, wm + k); break;
          case 128: rotateBlockEO(in, base + lo, 8, buf + lo, pf, xm + k, wm + k); break;
          default: rotateBlockEO(in, base + lo, 16, buf + lo, pf, xm + k, wm + k); break;
        }
        continue;
      }
      switch (bs) { /* n a constant in each call */
        case 32: rotateBlock(in, dtype, base + lo, 2, buf + lo, pf, e, xm + k, wm + k); break;
        case 64: rotateBlock(in, dtype, base + lo, 4, buf + lo, pf, e, xm + k, wm + k); break;
        case 128: rotateBlock(in, dtype, base + lo, 8, buf + lo, pf, e, xm + k, wm + k); break;
        default: rotateBlock(in, dtype, base + lo, 16, buf + lo, pf, e, xm + k, wm + k); break;
      }
    }
    int ok;
    switch (bs) {
      case 32:
        ok = quantizeBlocks(in, dtype, buf, xm, wm, nb, base, 2, K, bits, Q, scales, data, eo, out);
        break;
      case 64:
        ok = quantizeBlocks(in, dtype, buf, xm, wm, nb, base, 4, K, bits, Q, scales, data, eo, out);
        break;
      case 128:
        ok = quantizeBlocks(in, dtype, buf, xm, wm, nb, base, 8, K, bits, Q, scales, data, eo, out);
        break;
      default:
        ok = quantizeBlocks(in, dtype, buf, xm, wm, nb, base, 16, K, bits, Q, scales, data, eo, out);
        break;
    }
    if (!ok) return 0;
  } else {
    for (size_t lo = 0; lo < glen; lo += bs) {
      uint32_t m = rotateWide(in, dtype, base + lo, bs, K, buf, pf);
      if (m >= 0x7f800000u) return 0;
      quantizeBlock(buf, m, base + lo, bs, bits, Q, scales, (base + lo) >> lb, data);
    }
  }
  zppQuantEscClearTable(packed + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES);
  return 1;
}

static int encodeGroup(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                       uint8_t* packed, size_t g) {
  pthread_once(&gSignsOnce, fillSigns);
#define ENCODE_GROUP(BITS, DT) return encodeGroupT(in, DT, count, BITS, block, NULL, NULL, packed, g)
  ZPP_QUANT_SPECIALIZE(bits, dtype, ENCODE_GROUP);
#undef ENCODE_GROUP
  return 0; /* not reached */
}

/* ---- error feedback in the rotated domain (zppQuantizeExFeedback) ----------------- */

/* encodeGroupT with the residual: zppQuantizeExFeedback's groups of blocks
 * up to 256 whose residual blocks are each rotated or zero. A later batch
 * of 16 blocks that breaks the rule returns 0 after earlier ones were
 * written: the reference then writes the whole group again (out never
 * overlaps e). */
static int encodeGroupFeedback(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                               zppQuantResid_t e, zppQuantResid_t out, uint8_t* packed, size_t g) {
  pthread_once(&gSignsOnce, fillSigns);
#define ENCODE_GROUP(BITS, DT) return encodeGroupT(in, DT, count, BITS, block, &e, &out, packed, g)
  ZPP_QUANT_SPECIALIZE(bits, dtype, ENCODE_GROUP);
#undef ENCODE_GROUP
  return 0; /* not reached */
}

/* ---- decode ------------------------------------------------------------------------ */

/* q * s of elements i .. i + 15 (i a multiple of 16). int4 and int2: the
 * table t of the products q * s (qTable), indexed by the field (vpermps
 * reads the low 4 bits of each lane, so the upper bits need no mask: int2's
 * table repeats its four entries). */
R5_INLINE __m512 decodeQ16(const uint8_t* data, int bits, size_t i, __m512 vs, __m512 t) {
  if (bits == 8)
    return _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(data + i)))), vs);
  if (bits == 2) { /* the 32 data bits in every lane, field k shifted down in lane k */
    uint32_t u;
    memcpy(&u, data + i / 4, sizeof u);
    const __m512i idx =
        _mm512_srlv_epi32(_mm512_set1_epi32((int)u),
                          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30));
    return _mm512_permutexvar_ps(idx, t);
  }
  __m128i x = _mm_loadl_epi64((const __m128i*)(data + i / 2));
  __m128i y = _mm_unpacklo_epi8(x, _mm_srli_epi16(x, 4)); /* byte 2k: lo(b_k), 2k + 1: hi(b_k) */
  return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(y), t);
}

/* The int4 table for scale s: entry k = ((k ^ 8) - 8) * s. */
R5_INLINE __m512 nibbleTable(__m512 vs) {
  return _mm512_mul_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1), vs);
}

/* decodeQ16's table for a bit width: int4's, int2's (the fields 0, 1, 2, 3
 * are q = 0, 1, -2, -1; four times over), none (the scale) for int8. */
R5_INLINE __m512 qTable(int bits, __m512 vs) {
  if (bits == 4) return nibbleTable(vs);
  if (bits == 2)
    return _mm512_mul_ps(_mm512_setr_ps(0, 1, -2, -1, 0, 1, -2, -1, 0, 1, -2, -1, 0, 1, -2, -1), vs);
  return vs;
}

/* Rounds fp32 to bf16 in the upper half of each lane: the integer carry,
 * no NaN case (finish16 says why). */
R5_INLINE __m512i roundBf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
}

/* Sixteen results (times invB where mulB), signed, rounded to dtype and
 * stored at element at, signs from j. The sign commutes with each type's
 * rounding; bf16 rounds by the integer carry with no NaN case (as
 * quant_rotate_avx2.c's finish16: s and q are finite, so the only NaN is
 * Inf - Inf's default one, whose low bits the carry keeps). */
R5_INLINE void finish16(void* out, zppDataType_t dtype, size_t at, size_t j, __m512 v, __m512 invB,
                        int mulB) {
  if (mulB) v = _mm512_mul_ps(v, invB);
  v = flip(v, j);
  if (dtype == zppFloat32) {
    _mm512_storeu_ps((float*)out + at, v);
  } else if (dtype == zppFloat16) {
    _mm256_storeu_si256((__m256i*)((uint16_t*)out + at),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    _mm256_storeu_si256((__m256i*)((uint16_t*)out + at),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(roundBf16(v), 16)));
  }
}

/* q * s of 16n elements from element i with the stages below 16n, in v. */
R5_INLINE void decodeStages(const uint8_t* data, int bits, size_t i, __m512 vs, __m512* v, int n,
                            int exact) {
  const __m512 t = qTable(bits, vs);
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) v[k] = decodeQ16(data, bits, i + 16 * (size_t)k, vs, t);
  stagesNarrow(v, n, exact);
}

/* 1 when the m blocks of 2^L from block b are all rotated (scale sign
 * clear, finite) and fold (zppQuantRotFolds). */
R5_INLINE int multiFolds(const uint8_t* scales, size_t b, int m, int L) {
  int ok = 1;
  for (int j = 0; j < m; j++)
    ok &= zppQuantRotFolds(zppF32Bits(zppQuantLoadScale(scales, b + (size_t)j)), L);
  return ok;
}

/* The even/odd decode's tables for scale s (vs): int4's nibble table for
 * both (each lane holds a byte: its low nibble the even element, its high
 * one the odd); int2's, indexed by a nibble that holds a pair of fields
 * (the even element's low, the odd one's high): te[k] the even field's
 * q * s, to[k] the odd one's (fields 0, 1, 2, 3 are q = 0, 1, -2, -1). */
R5_INLINE void eoTables(int bits, __m512 vs, __m512* te, __m512* to) {
  if (bits == 4) {
    *te = *to = nibbleTable(vs);
    return;
  }
  *te = _mm512_mul_ps(_mm512_setr_ps(0, 1, -2, -1, 0, 1, -2, -1, 0, 1, -2, -1, 0, 1, -2, -1), vs);
  *to = _mm512_mul_ps(_mm512_setr_ps(0, 0, 0, 0, 1, 1, 1, 1, -2, -2, -2, -2, -1, -1, -1, -1), vs);
}

/* q * s of the 32 int4 or int2 elements from element i (a multiple of 32)
 * into *e (even) and *o (odd), te and to from eoTables. vpermps reads the
 * low 4 bits of each lane. int4: a byte per lane, its low nibble, then,
 * shifted, its high one. int2: a nibble (a pair of elements) per lane, the
 * bytes' low and high nibbles interleaved as decodeQ16 does for int4, both
 * elements looked up from the same index. */
R5_INLINE void decodeEO32(const uint8_t* data, int bits, size_t i, __m512 te, __m512 to, __m512* e,
                          __m512* o) {
  if (bits == 2) {
    const __m128i x = _mm_loadl_epi64((const __m128i*)(const void*)(data + i / 4));
    const __m512i y = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(x, _mm_srli_epi16(x, 4)));
    *e = _mm512_permutexvar_ps(y, te);
    *o = _mm512_permutexvar_ps(y, to);
    return;
  }
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(const void*)(data + i / 2)));
  *e = _mm512_permutexvar_ps(x, te);
  *o = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), to);
}

/* The 32 results of a chunk (even e, odd o; times invB where mulB), signed
 * from j (the chunk's place in its block), stored in order at element at. */
R5_INLINE void finishEO32(void* out, zppDataType_t dtype, size_t at, size_t j, __m512 e, __m512 o,
                          __m512 invB, int mulB) {
  if (mulB) {
    e = _mm512_mul_ps(e, invB);
    o = _mm512_mul_ps(o, invB);
  }
  if (dtype == zppFloat32) {
    storeNaturalEO((float*)out + at, flipEO(e, j), flipEO(o, j + 16));
    return;
  }
  /* bf16, lane l = e's in the low half, o's in the high half: roundBf16 on
   * the pair at once, in 16-bit lanes. hi: the upper halves (truncated),
   * lo: the lower ones; a half rounds up where lo + 0x7fff + lsb(hi) carries,
   * i.e. lo + lsb > 0x8000 (a saturating add: lo = 0xffff with lsb 1 still
   * counts). The signs go last, one XOR for both: the rounding reads only
   * magnitude bits, and no carry reaches bit 15 (|x| < 2^128, or the default
   * NaN, whose lo is 0). 9 operations per 32 where rounding each and
   * flipping each took 12. */
  const __m512i ue = _mm512_castps_si512(e), uo = _mm512_castps_si512(o);
  const __m512i hi = _mm512_ternarylogic_epi32(
      _mm512_srli_epi32(ue, 16), uo, _mm512_set1_epi32((int)0xffff0000u), 0xf8); /* a | (b & c) */
  const __m512i lo = _mm512_ternarylogic_epi32(ue, _mm512_slli_epi32(uo, 16), _mm512_set1_epi32(0xffff),
                                               0xec); /* (a & c) | b */
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi16(1));
  const __mmask32 up =
      _mm512_cmpgt_epu16_mask(_mm512_adds_epu16(lo, lsb), _mm512_set1_epi16((short)0x8000));
  const __m512i w = _mm512_xor_si512(_mm512_mask_add_epi16(hi, up, hi, _mm512_set1_epi16(1)),
                                     _mm512_load_si512((const void*)(gSignsPairEO + j / 2)));
  _mm512_storeu_si512((void*)((uint16_t*)out + at), w);
}

/* 1 where a block decodes in even/odd order: int4 and int2 into fp32 or
 * bf16 (fp16 would need a 16-bit interleave; int8 has no table). */
#define R5_EO(bits, dtype) (((bits) == 4 || (bits) == 2) && (dtype) != zppFloat16)

/* decodeSmallT's block in even/odd order; s already folded where fold. */
R5_INLINE void decodeSmallEO(const uint8_t* data, int bits, size_t lo, int n, __m512 vs, void* out,
                             zppDataType_t dtype, int fold, __m512 invB) {
  __m512 v[16], te, to;
  eoTables(bits, vs, &te, &to);
#pragma GCC unroll 8
  for (int c = 0; c < n / 2; c++)
    decodeEO32(data, bits, lo + 32 * (size_t)c, te, to, &v[2 * c], &v[2 * c + 1]);
  stagesEO(v, n, !fold);
#pragma GCC unroll 8
  for (int c = 0; c < n / 2; c++)
    finishEO32(out, dtype, lo + 32 * (size_t)c, 32 * (size_t)c, v[2 * c], v[2 * c + 1], invB, !fold);
}

/* A rotated block of 16n elements (n <= 16) in registers from load to
 * store, 2^-L folded into s where that is exact (quant_rotate_avx2.c's
 * decodeSmallT says why). */
R5_INLINE void decodeSmallT(const uint8_t* data, int bits, size_t lo, int n, float s, void* out,
                            zppDataType_t dtype) {
  const int L = __builtin_ctz(16u * (unsigned)n);
  const uint32_t sb = zppF32Bits(s);
  if (R5_EO(bits, dtype)) {
    const __m512 invB = pow2Neg(L);
    if (zppQuantRotFolds(sb, L))
      decodeSmallEO(data, bits, lo, n, _mm512_set1_ps(zppF32FromBits(sb - ((uint32_t)L << 23))), out,
                    dtype, 1, invB);
    else
      decodeSmallEO(data, bits, lo, n, _mm512_set1_ps(s), out, dtype, 0, invB);
    return;
  }
  __m512 v[16];
  if (zppQuantRotFolds(sb, L)) {
    decodeStages(data, bits, lo, _mm512_set1_ps(zppF32FromBits(sb - ((uint32_t)L << 23))), v, n, 0);
#pragma GCC unroll 16
    for (int k = 0; k < n; k++)
      finish16(out, dtype, lo + 16 * (size_t)k, 16 * (size_t)k, v[k], v[k], 0);
    return;
  }
  const __m512 invB = pow2Neg(L);
  decodeStages(data, bits, lo, _mm512_set1_ps(s), v, n, 1); /* rare: s tiny or huge */
#pragma GCC unroll 16
  for (int k = 0; k < n; k++) finish16(out, dtype, lo + 16 * (size_t)k, 16 * (size_t)k, v[k], invB, 1);
}

/* 16 / n rotated blocks of 16n elements (n <= 8: 8 blocks of 32, 4 of 64,
 * 2 of 128) from element lo (scales at scales), each with 2^-L folded into
 * its scale (the caller checked): their stages interleaved, so that the
 * blocks' latency chains overlap (two blocks: +20% for bf16 int4 against
 * one at a time; four of 64 against two, once the tables came off the
 * general registers: bf16 int4 +12%, fp32 +7.5%; before that, nothing). */
R5_INLINE void decodeMultiT(const uint8_t* data, int bits, size_t lo, int n, const uint8_t* scales,
                            void* out, zppDataType_t dtype) {
  const int m = 16 / n; /* blocks at once: 16 vectors */
  const uint32_t L = (uint32_t)__builtin_ctz(16u * (unsigned)n);
  __m512 v[16];
  if (R5_EO(bits, dtype)) {
#pragma GCC unroll 8
    for (int j = 0; j < m; j++) {
      /* q 2^-L (exact) times s: the folded product q (s 2^-L), one rounding
       * of the same real number, from a broadcast of s in memory. */
      __m512 te, to;
      eoTables(bits, pow2Neg((int)L), &te, &to);
      const __m512 vs = _mm512_set1_ps(zppQuantLoadScale(scales, (lo >> L) + (size_t)j));
      te = _mm512_mul_ps(te, vs);
      to = _mm512_mul_ps(to, vs);
#pragma GCC unroll 8
      for (int c = 0; c < n / 2; c++)
        decodeEO32(data, bits, lo + 16 * (size_t)(j * n + 2 * c), te, to, &v[j * n + 2 * c],
                   &v[j * n + 2 * c + 1]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < m; j++) stagesEO(v + j * n, n, 0);
#pragma GCC unroll 8
    for (int k = 0; k < m * n; k += 2)
      finishEO32(out, dtype, lo + 16 * (size_t)k, 16 * (size_t)(k % n), v[k], v[k + 1], v[k], 0);
    return;
  }
#pragma GCC unroll 8
  for (int j = 0; j < m; j++) {
    const __m512 vs = _mm512_mul_ps(_mm512_set1_ps(zppQuantLoadScale(scales, (lo >> L) + (size_t)j)),
                                    pow2Neg((int)L));
    const __m512 t = qTable(bits, vs);
#pragma GCC unroll 8
    for (int k = 0; k < n; k++)
      v[j * n + k] = decodeQ16(data, bits, lo + 16 * (size_t)(j * n + k), vs, t);
  }
#pragma GCC unroll 16
  for (int k = 0; k < m * n; k++) v[k] = stagesIn(v[k], 0);
  for (int d = 1; d < n; d *= 2)
#pragma GCC unroll 16
    for (int k = 0; k < m * n; k++)
      if ((k & d) == 0) R5_BFLY(v[k], v[k + d]);
#pragma GCC unroll 16
  for (int k = 0; k < m * n; k++)
    finish16(out, dtype, lo + 16 * (size_t)k, 16 * (size_t)(k % n), v[k], v[k], 0);
}

/* A rotated block of 512 or more: 256 at a time through the stages below
 * 256 into an L1 buffer, the wide stages there, then the output. */
R5_INLINE void decodeWideT(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                           zppDataType_t dtype) {
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(64)));
  const __m512 vs = _mm512_set1_ps(s);
  const int L = zppQuantLog2((int)len);
  const __m512 invB = pow2Neg(L);
  const int big = zppQuantRotMayOverflow(zppF32Bits(s), L);
  for (size_t i = 0; i < len; i += 256) {
    __m512 v[16];
    if (big)
      decodeStages(data, bits, lo + i, vs, v, 16, 1);
    else
      decodeStages(data, bits, lo + i, vs, v, 16, 0);
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) _mm512_store_ps(buf + i + 16 * k, v[k]);
  }
  stagesWide(buf, len);
  for (size_t i = 0; i < len; i += 16)
    finish16(out, dtype, lo + i, i, _mm512_load_ps(buf + i), invB, 1);
}

R5_INLINE void decodeBlockT(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                            zppDataType_t dtype) {
  switch (len) { /* n a constant in each call */
    case 32: decodeSmallT(data, bits, lo, 2, s, out, dtype); break;
    case 64: decodeSmallT(data, bits, lo, 4, s, out, dtype); break;
    case 128: decodeSmallT(data, bits, lo, 8, s, out, dtype); break;
    case 256: decodeSmallT(data, bits, lo, 16, s, out, dtype); break;
    default: decodeWideT(data, bits, lo, len, s, out, dtype); break;
  }
}

static void decodeBlock(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                        zppDataType_t dtype) {
  pthread_once(&gSignsOnce, fillSigns);
#define DECODE_ONE(BITS, DT) decodeBlockT(data, BITS, lo, len, s, out, DT)
  ZPP_QUANT_SPECIALIZE(bits, dtype, DECODE_ONE);
#undef DECODE_ONE
}

/* The rotated blocks from element lo on while they are full and their
 * scale is >= 0 and finite; returns the element where it stopped. */
#define DECODE_RUN(BITS, DT)                                                               \
  for (; lo + bs <= count; lo += bs) {                                                     \
    float s = zppQuantLoadScale(scales, lo >> lb);                                         \
    if (zppF32Bits(s) >= 0x7f800000u) break; /* sign set, Inf or NaN */                    \
    if (bs <= 128 && lo + mb * bs <= count && multiFolds(scales, lo >> lb, (int)mb, lb)) { \
      if (bs == 32)                                                                        \
        decodeMultiT(data, BITS, lo, 2, scales, out, DT);                                  \
      else if (bs == 64)                                                                   \
        decodeMultiT(data, BITS, lo, 4, scales, out, DT);                                  \
      else                                                                                 \
        decodeMultiT(data, BITS, lo, 8, scales, out, DT);                                  \
      lo += (mb - 1) * bs; /* the loop adds the last bs */                                 \
      continue;                                                                            \
    }                                                                                      \
    decodeBlockT(data, BITS, lo, bs, s, out, DT);                                          \
  }

static size_t decodeRun(const uint8_t* scales, const uint8_t* data, int bits, int block, size_t lo,
                        size_t count, void* out, zppDataType_t dtype) {
  pthread_once(&gSignsOnce, fillSigns);
  const size_t bs = (size_t)block;
  const size_t mb = 256 / bs; /* blocks per decodeMultiT (bs <= 128) */
  const int lb = __builtin_ctz((unsigned)block);
  ZPP_QUANT_SPECIALIZE(bits, dtype, DECODE_RUN);
  return lo;
}
#undef DECODE_RUN

/* ---- sums in the rotated domain (quant_rotate_avx2.c's, 16 lanes) ------------------ */

/* v[0..n) = r of the 16n elements from lo of block b of the nin inputs
 * (zpp_quant.h, "Reductions of rotated segments"): r = ((0 + v_0) + v_1)
 * + ... in input order, v_k = (float)q * s_k, the decoder's first step. */
R5_INLINE void sumRotated(const uint8_t* packed, size_t stride, int nin, size_t dataOff, int bits,
                          size_t b, size_t lo, __m512* v, int n) {
  const __m512 zero = _mm512_setzero_ps();
  for (int k = 0; k < nin; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    const __m512 vs = _mm512_set1_ps(zppQuantLoadScale(zppQuantScalesPtr(seg), b));
    const __m512 t = qTable(bits, vs);
#pragma GCC unroll 16
    for (int j = 0; j < n; j++)
      v[j] = _mm512_add_ps(k == 0 ? zero : v[j],
                           decodeQ16(seg + dataOff, bits, lo + 16 * (size_t)j, vs, t));
  }
}

/* sumRotated in even/odd order (int4 and int2: decodeEO32): v[2c], v[2c + 1] the
 * even and odd elements of chunk c, n vectors. */
R5_INLINE void sumRotatedEO(const uint8_t* packed, size_t stride, int nin, size_t dataOff, int bits,
                            size_t b, size_t lo, __m512* v, int n) {
  const __m512 zero = _mm512_setzero_ps();
  for (int k = 0; k < nin; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    __m512 te, to;
    eoTables(bits, _mm512_set1_ps(zppQuantLoadScale(zppQuantScalesPtr(seg), b)), &te, &to);
#pragma GCC unroll 8
    for (int c = 0; c < n / 2; c++) {
      __m512 e, o;
      decodeEO32(seg + dataOff, bits, lo + 32 * (size_t)c, te, to, &e, &o);
      v[2 * c] = _mm512_add_ps(k == 0 ? zero : v[2 * c], e);
      v[2 * c + 1] = _mm512_add_ps(k == 0 ? zero : v[2 * c + 1], o);
    }
  }
}

/* z / divisor of 16 sums (H r, before 2^-L) stored as dtype at element at,
 * signs from j: div 0 none, 1 multiply by vd (the reciprocal of a divisor
 * 2^k), 2 divide by vd; the signs last (quant_rotate_avx2.c's finishSum16
 * says why they commute with the division). */
R5_INLINE void finishSum16(void* out, zppDataType_t dtype, size_t at, size_t j, __m512 v, __m512 invB,
                           int div, __m512 vd) {
  if (div == 0) {
    finish16(out, dtype, at, j, v, invB, 1);
    return;
  }
  v = _mm512_mul_ps(v, invB);
  v = div == 1 ? _mm512_mul_ps(v, vd) : _mm512_div_ps(v, vd);
  finish16(out, dtype, at, j, v, invB, 0);
}

/* finishSum16 for a chunk of 32 in even/odd order. */
R5_INLINE void finishSumEO32(void* out, zppDataType_t dtype, size_t at, size_t j, __m512 e, __m512 o,
                             __m512 invB, int div, __m512 vd) {
  if (div == 0) {
    finishEO32(out, dtype, at, j, e, o, invB, 1);
    return;
  }
  e = _mm512_mul_ps(e, invB);
  o = _mm512_mul_ps(o, invB);
  e = div == 1 ? _mm512_mul_ps(e, vd) : _mm512_div_ps(e, vd);
  o = div == 1 ? _mm512_mul_ps(o, vd) : _mm512_div_ps(o, vd);
  finishEO32(out, dtype, at, j, e, o, invB, 0);
}

/* The sums of one block, inverse transformed with the spec's subtraction
 * (a sum may overflow to Inf), divided and stored (quant_rotate_avx2.c's
 * sumBlockT): blocks up to 256 in registers, larger ones 256 at a time
 * into an L1 buffer, then the wide stages. */
R5_INLINE void sumBlockT(const uint8_t* packed, size_t stride, int nin, size_t dataOff, int bits,
                         size_t b, size_t lo, size_t len, void* out, size_t at, zppDataType_t dtype,
                         int div, float divisor) {
  const int L = __builtin_ctz((unsigned)len);
  const __m512 invB = pow2Neg(L);
  const __m512 vd = _mm512_set1_ps(divisor);
  __m512 v[16];
  if (len <= 256 && R5_EO(bits, dtype)) {
    const int n = (int)len / 16;
    switch (n) { /* n a constant in each call */
      case 2:
        sumRotatedEO(packed, stride, nin, dataOff, bits, b, lo, v, 2);
        stagesEO(v, 2, 1);
        break;
      case 4:
        sumRotatedEO(packed, stride, nin, dataOff, bits, b, lo, v, 4);
        stagesEO(v, 4, 1);
        break;
      case 8:
        sumRotatedEO(packed, stride, nin, dataOff, bits, b, lo, v, 8);
        stagesEO(v, 8, 1);
        break;
      default:
        sumRotatedEO(packed, stride, nin, dataOff, bits, b, lo, v, 16);
        stagesEO(v, 16, 1);
        break;
    }
    for (int k = 0; k < n; k += 2)
      finishSumEO32(out, dtype, at + 16 * (size_t)k, 16 * (size_t)k, v[k], v[k + 1], invB, div, vd);
    return;
  }
  if (len <= 256) {
    const int n = (int)len / 16;
    switch (n) { /* n a constant in each call */
      case 2:
        sumRotated(packed, stride, nin, dataOff, bits, b, lo, v, 2);
        stagesNarrow(v, 2, 1);
        break;
      case 4:
        sumRotated(packed, stride, nin, dataOff, bits, b, lo, v, 4);
        stagesNarrow(v, 4, 1);
        break;
      case 8:
        sumRotated(packed, stride, nin, dataOff, bits, b, lo, v, 8);
        stagesNarrow(v, 8, 1);
        break;
      default:
        sumRotated(packed, stride, nin, dataOff, bits, b, lo, v, 16);
        stagesNarrow(v, 16, 1);
        break;
    }
    for (int k = 0; k < n; k++)
      finishSum16(out, dtype, at + 16 * (size_t)k, 16 * (size_t)k, v[k], invB, div, vd);
    return;
  }
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(64)));
  for (size_t i = 0; i < len; i += 256) {
    sumRotated(packed, stride, nin, dataOff, bits, b, lo + i, v, 16);
    stagesNarrow(v, 16, 1);
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) _mm512_store_ps(buf + i + 16 * k, v[k]);
  }
  stagesWide(buf, len);
  for (size_t i = 0; i < len; i += 16)
    finishSum16(out, dtype, at + i, i, _mm512_load_ps(buf + i), invB, div, vd);
}

static void sumBlock(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits, size_t b,
                     size_t lo, size_t len, float* acc) {
  pthread_once(&gSignsOnce, fillSigns);
#define SUM_BLOCK(BITS, DT) sumBlockT(packed, stride, n, dataOff, BITS, b, lo, len, acc, 0, DT, 0, 1.0f)
  ZPP_QUANT_SPECIALIZE(bits, zppFloat32, SUM_BLOCK);
#undef SUM_BLOCK
}

static void sumStore(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits, size_t b,
                     size_t lo, size_t len, int div, float divisor, void* out, zppDataType_t dtype) {
  pthread_once(&gSignsOnce, fillSigns);
#define SUM_STORE(BITS, DT) \
  sumBlockT(packed, stride, n, dataOff, BITS, b, lo, len, out, lo, DT, div, divisor)
  ZPP_QUANT_SPECIALIZE(bits, dtype, SUM_STORE);
#undef SUM_STORE
}

/* The direct order over the blocks of one escape group (quant_rotate_avx2.c's
 * sumRequantGroupT): pass 1, per block with ok[k] set, the sums r into an
 * L1 tile and max |r| (ok[k] cleared where some r is not finite); pass 2,
 * the block setups 16 at a time with vector divisions; pass 3, each block
 * quantized as the encoder quantizes its w. */
R5_INLINE void sumRequantGroupT(const uint8_t* packed, size_t stride, int nin, size_t dataOff,
                                int bitsIn, size_t bs, size_t b0, size_t nb, int bitsOut,
                                uint8_t* scales, uint8_t* data, uint8_t* ok) {
  float tile[ZPP_QUANT_ESC_GROUP] __attribute__((aligned(64)));
  uint32_t amax[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK + 16] __attribute__((aligned(64)));
  float sc[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK + 16] __attribute__((aligned(64)));
  float inv[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK + 16] __attribute__((aligned(64)));
  __m512 v[16];
  /* int4 to int4 in blocks up to 256: the tile in even/odd order, from the
   * decode to the nibble packing (decodeEO32, store32EO). */
  const int eo = bitsIn == 4 && bitsOut == 4 && bs <= 256;
  for (size_t k = 0; k < nb; k++) {
    amax[k] = 0;
    if (!ok[k]) continue;
    const size_t lo = (b0 + k) * bs;
    float* t = tile + k * bs;
    __m512i m = _mm512_setzero_si512();
    if (eo) {
      const int n = (int)bs / 16;
      switch (n) { /* n a constant in each call */
        case 2: sumRotatedEO(packed, stride, nin, dataOff, 4, b0 + k, lo, v, 2); break;
        case 4: sumRotatedEO(packed, stride, nin, dataOff, 4, b0 + k, lo, v, 4); break;
        case 8: sumRotatedEO(packed, stride, nin, dataOff, 4, b0 + k, lo, v, 8); break;
        default: sumRotatedEO(packed, stride, nin, dataOff, 4, b0 + k, lo, v, 16); break;
      }
      for (int j = 0; j < n; j++) {
        m = _mm512_max_epu32(m, absBits(v[j]));
        _mm512_store_ps(t + 16 * (size_t)j, v[j]);
      }
      amax[k] = _mm512_reduce_max_epu32(m);
      if (amax[k] >= 0x7f800000u) ok[k] = 0; /* r not finite: the fallback */
      continue;
    }
    for (size_t i = 0; i < bs; i += 256) {
      const int n = bs < 256 ? (int)bs / 16 : 16;
      switch (n) {
        case 2: sumRotated(packed, stride, nin, dataOff, bitsIn, b0 + k, lo + i, v, 2); break;
        case 4: sumRotated(packed, stride, nin, dataOff, bitsIn, b0 + k, lo + i, v, 4); break;
        case 8: sumRotated(packed, stride, nin, dataOff, bitsIn, b0 + k, lo + i, v, 8); break;
        default: sumRotated(packed, stride, nin, dataOff, bitsIn, b0 + k, lo + i, v, 16); break;
      }
      for (int j = 0; j < n; j++) {
        m = _mm512_max_epu32(m, absBits(v[j]));
        _mm512_store_ps(t + i + 16 * (size_t)j, v[j]);
      }
    }
    amax[k] = _mm512_reduce_max_epu32(m);
    if (amax[k] >= 0x7f800000u) ok[k] = 0; /* r not finite: the fallback */
  }
  for (size_t k = nb; k % 16 != 0; k++) amax[k] = 0; /* the last vector's padding */
  const int Q = zppQuantQmax(bitsOut);
  const __m512 vq = _mm512_set1_ps((float)Q);
  for (size_t k0 = 0; k0 < nb; k0 += 16) {
    const __m512 a = _mm512_load_ps((const float*)(const void*)(amax + k0));
    _mm512_store_ps(sc + k0, _mm512_div_ps(a, vq));
    _mm512_store_ps(inv + k0, _mm512_div_ps(vq, a)); /* Inf where a = 0: not used */
  }
  for (size_t k = 0; k < nb; k++) {
    const size_t lo = (b0 + k) * bs;
    if (!ok[k]) continue;
    uint8_t* d = data + zppQuantByteOf(lo, bitsOut);
    const float* t = tile + k * bs;
    if (amax[k] < ZPP_QUANT_TINY_BITS) { /* zero (scale +0, q 0), or the reference's scaled path */
      if (eo)
        quantizeBlockEO(t, amax[k], lo, bs, Q, scales, b0 + k, data);
      else
        quantizeBlock(t, amax[k], lo, bs, bitsOut, Q, scales, b0 + k, data);
      continue;
    }
    zppQuantStoreScale(scales, b0 + k, sc[k]);
    if (eo)
      quantizeWEO(t, bs, inv[k], d);
    else
      quantizeW(t, bs, bitsOut, inv[k], d);
  }
}

static void sumRequantGroup(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits,
                            int block, size_t b0, size_t nb, int bits_out, uint8_t* scalesOut,
                            uint8_t* dataOut, uint8_t* ok) {
  pthread_once(&gSignsOnce, fillSigns);
#define SUM_REQUANT(BI, BO) \
  sumRequantGroupT(packed, stride, n, dataOff, BI, (size_t)block, b0, nb, BO, scalesOut, dataOut, ok)
  ZPP_QUANT_SPECIALIZE_WIDTHS(bits, bits_out, SUM_REQUANT);
#undef SUM_REQUANT
}

const zppQuantRotImpl_t zppQuantRotImplAvx512 = {
    .name = "avx512",
    .widths = 1u << 8 | 1u << 4 | 1u << 2,
    .encodeGroup = encodeGroup,
    .encodeGroupFeedback = encodeGroupFeedback,
    .decodeBlock = decodeBlock,
    .decodeRun = decodeRun,
    .sumBlock = sumBlock,
    .sumStore = sumStore,
    .sumRequantGroup = sumRequantGroup,
};
