/*
 * The rotated codec (zpp_quant.h, "Rotation") with AVX2: encode of an escape
 * group and decode of a rotated block, bit-identical to the reference in
 * quant_rotate.c. Compiled with -mavx2 -mf16c (this file only), called only
 * when the active implementation is a vector one (cpuid said yes).
 *
 * Encoding, blocks of 32 and 64: pass 1, per block in registers, loads the
 * input, flips the signs (D), takes max |x|, tests that the block is
 * "ordinary" (below), runs the butterfly stages h = 1, 2, 4 (shuffles:
 * s + (+-v), which is the spec's x_j + x_{j+h} and x_j - x_{j+h} exactly)
 * and 8, 16, 32 (across vectors) and keeps w and max |w| for the group;
 * pass 2 scales and quantizes each w as the plain codec does. Blocks of 128
 * and more: per block, the input into an fp32 buffer, the stages below 64
 * per 64 elements in registers, the later ones across the buffer, then the
 * quantization. A block is "ordinary" when it is finite and at least E + 1
 * elements have |x| * 2^K >= max |x| (or it is zero): then its reference r
 * (the (E+1)-th largest magnitude) is >= max |x| / 2^K, so it has no
 * candidate, no escape and is rotated, as in the reference. A group with
 * any other block (or a short block, or a w that is not finite) is left to
 * the reference (the caller's fallback), so that escapes, markers and
 * unrotated blocks keep the reference's code.
 *
 * Decoding, per rotated block: q * s in registers with the same stages
 * (blocks of 128 and more: the later stages across a buffer), * 2^-L
 * (folded into s where that is exact), the signs, and the output type's
 * rounding. Where the transform may overflow, stages 1-4 use the spec's
 * subtraction itself, so that NaNs come out as the reference's.
 *
 * Sums of rotated segments (quant_rotate_reduce.c): the rotated-domain sums
 * of a block in registers, inverse transformed, then divided and stored
 * (zppQuantRotSumStoreAvx2) or kept for the escapes; and the direct order's
 * requantization (zppQuantRotSumRequantGroupAvx2), which quantizes the sums
 * r themselves, with no transform at all.
 */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "quant_kernels/quant_avx2_vec.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

#define ROT_INLINE static inline __attribute__((always_inline))

/* Sign masks (D) of a whole 4096 block, filled once. */
static uint32_t gSigns[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32)));
static uint16_t gSigns16[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32))); /* bf16's */
static pthread_once_t gSignsOnce = PTHREAD_ONCE_INIT;
static void fillSigns(void) {
  for (size_t i = 0; i < ZPP_QUANT_MAX_BLOCK; i++) {
    gSigns[i] = zppQuantRotSignMask(i);
    gSigns16[i] = (uint16_t)(gSigns[i] >> 16);
  }
}

ROT_INLINE __m256 signs8(size_t i) { return _mm256_load_ps((const float*)(const void*)(gSigns + i)); }

ROT_INLINE __m256i absBits(__m256 v) {
  return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7fffffff));
}

/* Stages h = 1, 2, 4 of one vector of eight. Lane j of stage h gets s + v'
 * with s the partner lane: for (j & h) == 0 that is x_{j+h} + x_j, and else
 * x_{j-h} + (-x_j) = x_{j-h} - x_j, the spec's two operations (IEEE a - b is
 * a + (-b); the adds commute). */
ROT_INLINE __m256 stages124(__m256 v) {
  const __m256 n1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, (int)0x80000000u, 0, (int)0x80000000u, 0,
                                                          (int)0x80000000u, 0, (int)0x80000000u));
  const __m256 n2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, (int)0x80000000u, (int)0x80000000u, 0,
                                                          0, (int)0x80000000u, (int)0x80000000u));
  const __m256 n4 = _mm256_castsi256_ps(_mm256_setr_epi32(
      0, 0, 0, 0, (int)0x80000000u, (int)0x80000000u, (int)0x80000000u, (int)0x80000000u));
  v = _mm256_add_ps(_mm256_permute_ps(v, 0xb1), _mm256_xor_ps(v, n1));
  v = _mm256_add_ps(_mm256_permute_ps(v, 0x4e), _mm256_xor_ps(v, n2));
  v = _mm256_add_ps(_mm256_permute2f128_ps(v, v, 0x01), _mm256_xor_ps(v, n4));
  return v;
}

/* The same with the spec's subtraction itself (a blend of the add and the
 * sub), one more operation per stage: where the transform can overflow,
 * Inf - Inf makes the default NaN, which a - b passes on as it is and
 * s + (-v) would pass on with its sign flipped. */
ROT_INLINE __m256 stages124Exact(__m256 v) {
  __m256 p = _mm256_permute_ps(v, 0xb1);
  v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xaa);
  p = _mm256_permute_ps(v, 0x4e);
  v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xcc);
  p = _mm256_permute2f128_ps(v, v, 0x01);
  return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xf0);
}

#define ROT_BFLY(p, q)            \
  do {                            \
    __m256 t_ = (p);              \
    (p) = _mm256_add_ps(t_, (q)); \
    (q) = _mm256_sub_ps(t_, (q)); \
  } while (0)

/* All stages below 8n of n groups of eight in v[0..n-1] (n = 4 or 8, a
 * constant): h = 1, 2, 4 inside each vector, then h = 8, 16, 32 across.
 * exact (a constant): stages124Exact, for a decode that may overflow. */
ROT_INLINE void stagesNarrow(__m256* v, int n, int exact) {
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) v[k] = exact ? stages124Exact(v[k]) : stages124(v[k]);
  ROT_BFLY(v[0], v[1]);
  ROT_BFLY(v[2], v[3]);
  if (n == 8) {
    ROT_BFLY(v[4], v[5]);
    ROT_BFLY(v[6], v[7]);
  }
  ROT_BFLY(v[0], v[2]);
  ROT_BFLY(v[1], v[3]);
  if (n == 8) {
    ROT_BFLY(v[4], v[6]);
    ROT_BFLY(v[5], v[7]);
    ROT_BFLY(v[0], v[4]);
    ROT_BFLY(v[1], v[5]);
    ROT_BFLY(v[2], v[6]);
    ROT_BFLY(v[3], v[7]);
  }
}

/* Stages h = 64 .. len/2 on buf (len >= 128), two stages per pass where
 * there are two left (each element still sees them in order). */
ROT_INLINE void stagesWide(float* buf, size_t len) {
  size_t h = 64;
  for (; 4 * h <= len; h *= 4)
    for (size_t i = 0; i < len; i += 4 * h)
      for (size_t j = i; j < i + h; j += 8) {
        __m256 a = _mm256_load_ps(buf + j), b = _mm256_load_ps(buf + j + h);
        __m256 c = _mm256_load_ps(buf + j + 2 * h), d = _mm256_load_ps(buf + j + 3 * h);
        __m256 ab0 = _mm256_add_ps(a, b), ab1 = _mm256_sub_ps(a, b);
        __m256 cd0 = _mm256_add_ps(c, d), cd1 = _mm256_sub_ps(c, d);
        _mm256_store_ps(buf + j, _mm256_add_ps(ab0, cd0));
        _mm256_store_ps(buf + j + 2 * h, _mm256_sub_ps(ab0, cd0));
        _mm256_store_ps(buf + j + h, _mm256_add_ps(ab1, cd1));
        _mm256_store_ps(buf + j + 3 * h, _mm256_sub_ps(ab1, cd1));
      }
  for (; h < len; h *= 2)
    for (size_t i = 0; i < len; i += 2 * h)
      for (size_t j = i; j < i + h; j += 8) {
        __m256 a = _mm256_load_ps(buf + j), b = _mm256_load_ps(buf + j + h);
        _mm256_store_ps(buf + j, _mm256_add_ps(a, b));
        _mm256_store_ps(buf + j + h, _mm256_sub_ps(a, b));
      }
}

/* ---- encode ----------------------------------------------------------------------- */

/* Prefetches the len elements of the next group that match the block at
 * hand (pf: the input, or NULL in the last group), so that memory keeps
 * streaming while this group is computed (as quant_avx2.c does). */
ROT_INLINE void prefetchBlock(const void* pf, zppDataType_t dtype, size_t at, size_t len) {
  if (pf == NULL) return;
  const size_t esize = dtype == zppFloat32 ? 4 : 2;
  const char* p = (const char*)pf + esize * (at + ZPP_QUANT_ESC_GROUP);
  for (size_t b = 0; b < esize * len; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

/* x of one block (D applied) into buf; returns max |x| as fp32 bits, and
 * in m the two vectors of lane-wise maxima (16 disjoint sets of elements).
 * With a residual e (error feedback): x^ = g + e where e's block is not
 * rotated (zero: the caller checked), g where it is. */
ROT_INLINE uint32_t loadSigned(const void* in, zppDataType_t dtype, size_t at, size_t len, float* buf,
                               __m256i* m, const zppQuantResid_t* e) {
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  for (size_t i = 0; i < len; i += 16) {
    __m256 a = avx2Load8(in, dtype, at + i), b = avx2Load8(in, dtype, at + i + 8);
    if (e != NULL && !zppQuantResidIsRotated(*e, at + i)) { /* i + 8: the same residual block */
      a = _mm256_add_ps(a, avx2ResidValue8(*e, at + i));
      b = _mm256_add_ps(b, avx2ResidValue8(*e, at + i + 8));
    }
    m0 = _mm256_max_epu32(m0, absBits(a));
    m1 = _mm256_max_epu32(m1, absBits(b));
    _mm256_store_ps(buf + i, _mm256_xor_ps(a, signs8(i)));
    _mm256_store_ps(buf + i + 8, _mm256_xor_ps(b, signs8(i + 8)));
  }
  m[0] = m0;
  m[1] = m1;
  return avx2HmaxU32(_mm256_max_epu32(m0, m1));
}

/* How many of the 8n elements in v have |x| * 2^K >= a (a: finite fp32
 * bits, not zero). |x| * 2^K is exact (or Inf), so the test is |x| >= a 2^-K
 * in the reals; where a 2^-K is a normal float t (a's exponent field above
 * K) that is an integer compare of the magnitude bits with t. Else the fp32
 * product, as the reference. */
ROT_INLINE int countAbove(const __m256* v, int n, uint32_t a, int K) {
  __m256i c = _mm256_setzero_si256();
  if (a >= ((uint32_t)K + 1u) << 23) {
    const __m256i t = _mm256_set1_epi32((int)(a - ((uint32_t)K << 23) - 1u));
#pragma GCC unroll 8
    for (int k = 0; k < n; k++) c = _mm256_sub_epi32(c, _mm256_cmpgt_epi32(absBits(v[k]), t));
  } else {
    const __m256 va = _mm256_castsi256_ps(_mm256_set1_epi32((int)a));
    const __m256 vk = _mm256_castsi256_ps(_mm256_set1_epi32((127 + K) << 23));
#pragma GCC unroll 8
    for (int k = 0; k < n; k++) {
      __m256 x = _mm256_mul_ps(_mm256_castsi256_ps(absBits(v[k])), vk);
      c = _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(x, va, _CMP_GE_OQ)));
    }
  }
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
  return _mm_cvtsi128_si32(h);
}

/* A shortcut for countAbove(...) > E: the lanes of m (the magnitude bits'
 * lane-wise maxima) are distinct elements, so E + 1 of them at or above
 * a 2^-K (where that is a normal float) already make the count. Usually
 * true (int4: one element in 32 of the max; int8: in 256); where it is
 * not, countAbove decides. */
ROT_INLINE int lanesAbove(__m256i m, uint32_t a, int K) {
  if (a < ((uint32_t)K + 1u) << 23) return 0;
  const __m256i t = _mm256_set1_epi32((int)(a - ((uint32_t)K << 23) - 1u));
  unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m, t)));
  return __builtin_popcount(mask) > ZPP_QUANT_ESC_PER_BLOCK;
}

/* lanesAbove over the 16 lanes of two such vectors (disjoint sets). */
ROT_INLINE int lanesAbove2(__m256i m0, __m256i m1, uint32_t a, int K) {
  if (a < ((uint32_t)K + 1u) << 23) return 0;
  const __m256i t = _mm256_set1_epi32((int)(a - ((uint32_t)K << 23) - 1u));
  unsigned k0 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m0, t)));
  unsigned k1 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m1, t)));
  return __builtin_popcount(k0) + __builtin_popcount(k1) > ZPP_QUANT_ESC_PER_BLOCK;
}

/* The stages below 64 of the 64 elements at b (in place),
 * returning countAbove of its input. */
ROT_INLINE int chunkCount(float* b, uint32_t a, int K) {
  __m256 v[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) v[k] = _mm256_load_ps(b + 8 * k);
  int c = a != 0 ? countAbove(v, 8, a, K) : 0;
  stagesNarrow(v, 8, 0);
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) _mm256_store_ps(b + 8 * k, v[k]);
  return c;
}

/* 32 values quantized and stored as int8 (32 bytes), int4 (16) or int2 (8)
 * at d. int2: the fields in pairs (a + 4 b, vpmaddubsw), the pairs in pairs
 * (c + 16 d, vpmaddwd), the low byte of each dword gathered per lane. */
ROT_INLINE void store32(__m256 w0, __m256 w1, __m256 w2, __m256 w3, __m256 vinv, int bits, uint8_t* d) {
  __m256i q = avx2RoundInt8x32(_mm256_mul_ps(w0, vinv), _mm256_mul_ps(w1, vinv),
                               _mm256_mul_ps(w2, vinv), _mm256_mul_ps(w3, vinv));
  if (bits == 8) {
    _mm256_storeu_si256((__m256i*)d, q);
    return;
  }
  if (bits == 2) {
    __m256i n =
        _mm256_maddubs_epi16(_mm256_and_si256(q, _mm256_set1_epi8(3)), _mm256_set1_epi16(0x0401));
    n = _mm256_shuffle_epi8(
        _mm256_madd_epi16(n, _mm256_set1_epi32(0x00100001)),
        _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                         -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    const uint32_t lo = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(n));
    const uint32_t hi = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(n, 1));
    memcpy(d, &lo, sizeof lo);
    memcpy(d + 4, &hi, sizeof hi);
    return;
  }
  __m256i n =
      _mm256_maddubs_epi16(_mm256_and_si256(q, _mm256_set1_epi8(0x0f)), _mm256_set1_epi16(0x1001));
  __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(n, n), 0xd8);
  _mm_storeu_si128((__m128i*)d, _mm256_castsi256_si128(p));
}

/* Pass 1 of a block of 8n elements (n = 4 or 8: blocks of 32 and 64), in
 * registers from load to w: its w into wb, max |w| (fp32 bits) returned, or
 * all ones where encodeGroupT gives the group to the reference. */
ROT_INLINE uint32_t rotateSmall(const void* in, zppDataType_t dtype, size_t at, int n, int K, float* wb,
                                const void* pf) {
  __m256 v[8];
  prefetchBlock(pf, dtype, at, 8 * (size_t)n);
  __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) {
    v[k] = _mm256_xor_ps(avx2Load8(in, dtype, at + 8 * (size_t)k), signs8(8 * (size_t)k));
    m = _mm256_max_epu32(m, absBits(v[k]));
  }
  uint32_t a = avx2HmaxU32(m);
  if (a >= 0x7f800000u) return UINT32_MAX;
  if (a != 0 && !lanesAbove(m, a, K) && countAbove(v, n, a, K) <= ZPP_QUANT_ESC_PER_BLOCK)
    return UINT32_MAX;
  stagesNarrow(v, n, 0);
  m = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) {
    m = _mm256_max_epu32(m, absBits(v[k]));
    _mm256_store_ps(wb + 8 * k, v[k]);
  }
  return avx2HmaxU32(m);
}

/* Pass 2: the block's w (at wb, max |w| wmax, finite) quantized as a plain
 * block: scale, then q. */
ROT_INLINE void quantizeSmall(const float* wb, uint32_t wmax, size_t at, size_t len, int bits, int Q,
                              uint8_t* scales, size_t b, uint8_t* data) {
  zppQuantBlockParams_t bp = zppQuantBlockSetup(wmax, Q);
  zppQuantStoreScale(scales, b, bp.scale);
  uint8_t* d = data + zppQuantByteOf(at, bits);
  if (bp.kind != ZPP_QBLOCK_NORMAL) {
    memset(d, 0, zppQuantDataBytes(len, bits));
  } else if (bp.p != 1.0f) {
    zppQuantEncodeDtypeRef(wb, zppFloat32, len, &bp, bits, data, at);
  } else {
    const __m256 vinv = _mm256_set1_ps(bp.inv);
    for (size_t k = 0; k < len; k += 32)
      store32(_mm256_load_ps(wb + k), _mm256_load_ps(wb + k + 8), _mm256_load_ps(wb + k + 16),
              _mm256_load_ps(wb + k + 24), vinv, bits, d + zppQuantByteOf(k, bits));
  }
}

/* w (len a multiple of 32) quantized as a plain normal block
 * with p = 1: q = rne(w * inv). */
ROT_INLINE void quantizeW(const float* w, size_t len, int bits, float inv, uint8_t* d) {
  const __m256 vinv = _mm256_set1_ps(inv);
  for (size_t i = 0; i < len; i += 32)
    store32(_mm256_load_ps(w + i), _mm256_load_ps(w + i + 8), _mm256_load_ps(w + i + 16),
            _mm256_load_ps(w + i + 24), vinv, bits, d + zppQuantByteOf(i, bits));
}

ROT_INLINE int encodeGroupT(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                            uint8_t* packed, size_t g) {
  const size_t bs = (size_t)block, base = g * ZPP_QUANT_ESC_GROUP;
  const int lb = __builtin_ctz((unsigned)block); /* shifts, not 64-bit divisions: they showed */
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  if (glen % bs != 0) return 0; /* a short last block: the reference's */
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  const int Q = zppQuantQmax(bits), K = ZPP_QUANT_ESC_LOG2(bits);
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32)));
  const void* pf = count - base > ZPP_QUANT_ESC_GROUP ? in : NULL; /* a next group */
  if (bs <= 64) { /* two passes, so that the blocks' latency chains overlap */
    uint32_t wmax[ZPP_QUANT_ESC_GROUP / 32];
    for (size_t lo = 0; lo < glen; lo += bs) {
      uint32_t m = bs == 32 ? rotateSmall(in, dtype, base + lo, 4, K, buf + lo, pf)
                            : rotateSmall(in, dtype, base + lo, 8, K, buf + lo, pf);
      if (m >= 0x7f800000u) return 0; /* UINT32_MAX, or w not finite */
      wmax[lo >> lb] = m;
    }
    for (size_t lo = 0; lo < glen; lo += bs)
      quantizeSmall(buf + lo, wmax[lo >> lb], base + lo, bs, bits, Q, scales, (base + lo) >> lb, data);
  }
  for (size_t lo = 0; bs > 64 && lo < glen; lo += bs) {
    size_t at = base + lo, b = at >> lb;
    prefetchBlock(pf, dtype, at, bs);
    __m256i lm[2];
    uint32_t a = loadSigned(in, dtype, at, bs, buf, lm, NULL);
    if (a >= 0x7f800000u) return 0;                       /* a non-finite element: markers */
    int fast = a != 0 && lanesAbove2(lm[0], lm[1], a, K); /* the count is > E */
    int c = 0;
    for (size_t i = 0; i < bs; i += 64) c += chunkCount(buf + i, fast ? 0 : a, K);
    if (a != 0 && !fast && c <= ZPP_QUANT_ESC_PER_BLOCK) return 0; /* may have candidates */
    stagesWide(buf, bs);
    __m256i m = _mm256_setzero_si256();
    for (size_t i = 0; i < bs; i += 8) m = _mm256_max_epu32(m, absBits(_mm256_load_ps(buf + i)));
    uint32_t wmax = avx2HmaxU32(m);
    if (wmax >= 0x7f800000u) return 0; /* w not finite: stored unrotated */
    zppQuantBlockParams_t bp = zppQuantBlockSetup(wmax, Q);
    zppQuantStoreScale(scales, b, bp.scale);
    uint8_t* d = data + zppQuantByteOf(at, bits);
    if (bp.kind != ZPP_QBLOCK_NORMAL) {
      memset(d, 0, zppQuantDataBytes(bs, bits));
    } else if (bp.p != 1.0f) {
      zppQuantEncodeDtypeRef(buf, zppFloat32, bs, &bp, bits, data, at);
    } else {
      quantizeW(buf, bs, bits, bp.inv, d);
    }
  }
  zppQuantEscClearTable(packed + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES);
  return 1;
}

static int encodeGroup(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                       uint8_t* packed, size_t g) {
  pthread_once(&gSignsOnce, fillSigns);
#define ENCODE_GROUP(BITS, DT) return encodeGroupT(in, DT, count, BITS, block, packed, g)
  ZPP_QUANT_SPECIALIZE(bits, dtype, ENCODE_GROUP);
#undef ENCODE_GROUP
  return 0; /* not reached */
}

/* ---- error feedback in the rotated domain (zppQuantizeExFeedback) ----------------- */

/* The rotated residual's values added after the stages; returns max |w|. */
ROT_INLINE uint32_t addRotated(float* buf, size_t at, size_t len, zppQuantResid_t e) {
  __m256i m = _mm256_setzero_si256();
  for (size_t i = 0; i < len; i += 8) {
    __m256 w = _mm256_load_ps(buf + i);
    if (zppQuantResidIsRotated(e, at + i)) w = _mm256_add_ps(w, avx2ResidValue8(e, at + i));
    _mm256_store_ps(buf + i, w);
    m = _mm256_max_epu32(m, absBits(w));
  }
  return avx2HmaxU32(m);
}

/* quantizeW for error feedback: the same q at d, and the residual r = w -
 * (float)q * s (the decode's first step, then a subtract) stored at rq as
 * rne(r * rinv) (zpp_quant.h, "error feedback in the rotated domain"). */
ROT_INLINE void quantizeWResid(const float* w, size_t len, int bits, float inv, float s, float rinv,
                               uint8_t* d, int8_t* rq) {
  const __m256 vinv = _mm256_set1_ps(inv), vs = _mm256_set1_ps(s), vrinv = _mm256_set1_ps(rinv);
  for (size_t i = 0; i < len; i += 32) {
    __m256 v[4], r[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      v[k] = _mm256_load_ps(w + i + 8 * (size_t)k);
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtps_epi32(_mm256_mul_ps(v[k], vinv)));
      r[k] = _mm256_mul_ps(_mm256_sub_ps(v[k], _mm256_mul_ps(q, vs)), vrinv);
    }
    store32(v[0], v[1], v[2], v[3], vinv, bits, d + zppQuantByteOf(i, bits));
    _mm256_storeu_si256((__m256i*)(void*)(rq + i), avx2RoundInt8x32(r[0], r[1], r[2], r[3]));
  }
}

/* A block of 64 or more, one at a time (the encoder's wide path): x^ loaded
 * and signed, the rule tested, the stages, the rotated residual added, and
 * the block quantized with its new residual; 0 where the group goes to the
 * reference (nothing of out written for this block). */
ROT_INLINE int encodeBlockFeedback(const void* in, zppDataType_t dtype, size_t at, size_t bs, int bits,
                                   int Q, int K, float* buf, const void* pf, zppQuantResid_t e,
                                   zppQuantResid_t out, uint8_t* scales, size_t b, uint8_t* data) {
  prefetchBlock(pf, dtype, at, bs);
  __m256i lm[2];
  const uint32_t a = loadSigned(in, dtype, at, bs, buf, lm, &e);
  if (a >= 0x7f800000u) return 0;
  const int fast = a != 0 && lanesAbove2(lm[0], lm[1], a, K);
  int c = 0;
  for (size_t i = 0; i < bs; i += 64) c += chunkCount(buf + i, fast ? 0 : a, K);
  if (a != 0 && !fast && c <= ZPP_QUANT_ESC_PER_BLOCK) return 0;
  stagesWide(buf, bs);
  const uint32_t wmax = addRotated(buf, at, bs, e);
  if (wmax >= 0x7f800000u) return 0;
  zppQuantBlockParams_t bp = zppQuantBlockSetup(wmax, Q);
  zppQuantStoreScale(scales, b, bp.scale);
  uint8_t* d = data + zppQuantByteOf(at, bits);
  if (wmax < ZPP_QUANT_TINY_BITS) { /* zero, or the scaled path: the reference's steps */
    if (bp.kind != ZPP_QBLOCK_NORMAL)
      memset(d, 0, zppQuantDataBytes(bs, bits));
    else
      zppQuantEncodeDtypeRef(buf, zppFloat32, bs, &bp, bits, data, at);
    zppQuantResidTinyRotatedRef(buf, bs, bits, data, bp.scale, at, out);
    return 1;
  }
  quantizeWResid(buf, bs, bits, bp.inv, bp.scale, 254.0f / bp.scale, d, out.q + at);
  const float t = zppF32FromBits(zppF32Bits(bp.scale / 254.0f) | ZPP_QUANT_RESID_ROTATED);
  for (size_t k = 0; k < bs; k += ZPP_QUANT_RESID_BLOCK)
    out.scale[(at + k) / ZPP_QUANT_RESID_BLOCK] = t;
  return 1;
}

/* zppQuantizeExFeedback's groups of blocks of 64 to 4096 whose residual
 * blocks are each rotated or zero; others (blocks of 32 among them) return
 * 0. A block that breaks the rule may follow blocks already written: the
 * reference then writes the whole group again (out never overlaps e). */
ROT_INLINE int encodeGroupFeedbackT(const void* in, zppDataType_t dtype, size_t count, int bits,
                                    int block, zppQuantResid_t e, zppQuantResid_t out, uint8_t* packed,
                                    size_t g) {
  const size_t bs = (size_t)block, base = g * ZPP_QUANT_ESC_GROUP;
  const int lb = __builtin_ctz((unsigned)block);
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  if (glen % bs != 0 || bs < 64 || !zppQuantResidRotatedOrZero(e, base, glen)) return 0;
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  const int Q = zppQuantQmax(bits), K = ZPP_QUANT_ESC_LOG2(bits);
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32)));
  const void* pf = count - base > ZPP_QUANT_ESC_GROUP ? in : NULL;
  for (size_t lo = 0; lo < glen; lo += bs)
    if (!encodeBlockFeedback(in, dtype, base + lo, bs, bits, Q, K, buf, pf, e, out, scales,
                             (base + lo) >> lb, data))
      return 0;
  zppQuantEscClearTable(packed + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES);
  return 1;
}

static int encodeGroupFeedback(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                               zppQuantResid_t e, zppQuantResid_t out, uint8_t* packed, size_t g) {
  pthread_once(&gSignsOnce, fillSigns);
#define ENCODE_GROUP(BITS, DT) \
  return encodeGroupFeedbackT(in, DT, count, BITS, block, e, out, packed, g)
  ZPP_QUANT_SPECIALIZE(bits, dtype, ENCODE_GROUP);
#undef ENCODE_GROUP
  return 0; /* not reached */
}

/* ---- decode ----------------------------------------------------------------------- */

/* q * s of n * 8 elements from element i, the stages below 8n done, in v. */
ROT_INLINE void decodeStages(const uint8_t* data, int bits, size_t i, __m256 vs, __m256* v, int n,
                             int exact) {
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) v[k] = _mm256_mul_ps(avx2DecodeQ8(data, bits, i + 8 * (size_t)k), vs);
  stagesNarrow(v, n, exact);
}

/* Groups j and j + 8 of a block (a, b) * 2^-L, signed, rounded to dtype and
 * stored at element at. bf16: the rounding comes before the sign, which it
 * commutes with (the carry never reaches the sign bit), and has no NaN case:
 * s and q are finite, so a NaN here can only be made by Inf - Inf, the
 * default NaN (or it with its sign flipped), whose low 22 bits are zero and
 * which the carry rounding keeps. Two groups pack at once (one pack, one
 * qword permute for 16 elements). */
ROT_INLINE void finish16(void* out, zppDataType_t dtype, size_t at, size_t j, __m256 a, __m256 b,
                         __m256 invB, int mulB) {
  if (mulB) {
    a = _mm256_mul_ps(a, invB);
    b = _mm256_mul_ps(b, invB);
  }
  if (dtype == zppBfloat16) {
    const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
    __m256i ua = _mm256_castps_si256(a);
    __m256i ub = _mm256_castps_si256(b);
    ua = _mm256_add_epi32(_mm256_add_epi32(ua, half), _mm256_and_si256(_mm256_srli_epi32(ua, 16), one));
    ub = _mm256_add_epi32(_mm256_add_epi32(ub, half), _mm256_and_si256(_mm256_srli_epi32(ub, 16), one));
    __m256i p = _mm256_packus_epi32(_mm256_srli_epi32(ua, 16), _mm256_srli_epi32(ub, 16));
    p = _mm256_permute4x64_epi64(p, 0xd8);
    p = _mm256_xor_si256(p, _mm256_load_si256((const __m256i*)(const void*)(gSigns16 + j)));
    _mm256_storeu_si256((__m256i*)((uint16_t*)out + at), p);
    return;
  }
  avx2Store8(out, dtype, at, _mm256_xor_ps(a, signs8(j)));
  avx2Store8(out, dtype, at + 8, _mm256_xor_ps(b, signs8(j + 8)));
}

/* A rotated block of 32 or 64 in registers from load to store. Where s 2^-L
 * is a normal float and B Q s < 2^119 (no value of the transform overflows),
 * 2^-L is folded into s: every product q s 2^-L is then exact, every sum of
 * the stages is the unscaled sum times 2^-L exactly (a normal result rounds
 * alike at both scales; a subnormal one is a sum of multiples of 2^-149
 * below 2^-126, exact at both), and so is the final multiply it replaces. */
ROT_INLINE void decodeSmallT(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                             zppDataType_t dtype) {
  const int n = len == 32 ? 4 : 8, L = len == 32 ? 5 : 6;
  const uint32_t sb = zppF32Bits(s);
  __m256 v[8];
  if (zppQuantRotFolds(sb, L)) {
    const __m256 one = _mm256_set1_ps(1.0f);
    decodeStages(data, bits, lo, _mm256_set1_ps(zppF32FromBits(sb - ((uint32_t)L << 23))), v, n, 0);
#pragma GCC unroll 4
    for (int k = 0; k < n; k += 2)
      finish16(out, dtype, lo + 8 * (size_t)k, 8 * (size_t)k, v[k], v[k + 1], one, 0);
    return;
  }
  const __m256 invB = _mm256_castsi256_ps(_mm256_set1_epi32((127 - L) << 23));
  decodeStages(data, bits, lo, _mm256_set1_ps(s), v, n, 1); /* rare: s tiny or huge */
#pragma GCC unroll 4
  for (int k = 0; k < n; k += 2)
    finish16(out, dtype, lo + 8 * (size_t)k, 8 * (size_t)k, v[k], v[k + 1], invB, 1);
}

/* A rotated block of 128 or more: 64 at a time through the stages below
 * 64 into an L1 buffer, the wide stages there, then the output. */
ROT_INLINE void decodeWideT(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                            zppDataType_t dtype) {
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32)));
  const __m256 vs = _mm256_set1_ps(s);
  const int L = zppQuantLog2((int)len);
  const __m256 invB = _mm256_castsi256_ps(_mm256_set1_epi32((127 - L) << 23));
  const int big = zppQuantRotMayOverflow(zppF32Bits(s), L);
  for (size_t i = 0; i < len; i += 64) {
    __m256 v[8];
    if (big)
      decodeStages(data, bits, lo + i, vs, v, 8, 1);
    else
      decodeStages(data, bits, lo + i, vs, v, 8, 0);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) _mm256_store_ps(buf + i + 8 * k, v[k]);
  }
  stagesWide(buf, len);
  for (size_t i = 0; i < len; i += 16)
    finish16(out, dtype, lo + i, i, _mm256_load_ps(buf + i), _mm256_load_ps(buf + i + 8), invB, 1);
}

static __attribute__((noinline)) void decodeWide(const uint8_t* data, int bits, size_t lo, size_t len,
                                                 float s, void* out, zppDataType_t dtype) {
#define DECODE_WIDE(BITS, DT) decodeWideT(data, BITS, lo, len, s, out, DT)
  ZPP_QUANT_SPECIALIZE(bits, dtype, DECODE_WIDE);
#undef DECODE_WIDE
}

static void decodeBlock(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                        zppDataType_t dtype) {
  pthread_once(&gSignsOnce, fillSigns);
  if (len > 64) {
    decodeWide(data, bits, lo, len, s, out, dtype);
    return;
  }
#define DECODE_SMALL(BITS, DT) decodeSmallT(data, BITS, lo, len, s, out, DT)
  ZPP_QUANT_SPECIALIZE(bits, dtype, DECODE_SMALL);
#undef DECODE_SMALL
}

/* Decodes the rotated blocks from element lo on, as long as they are full
 * and their scale is >= 0 and finite; returns the element where it
 * stopped (the caller's loop takes that block): one call and one dispatch
 * for a run of blocks instead of one per block. */
#define ROT_DECODE_RUN(BITS, DT)                                        \
  for (; lo + bs <= count; lo += bs) {                                  \
    float s = zppQuantLoadScale(scales, lo >> lb);                      \
    if (zppF32Bits(s) >= 0x7f800000u) break; /* sign set, Inf or NaN */ \
    if (bs > 64)                                                        \
      decodeWide(data, BITS, lo, bs, s, out, DT);                       \
    else                                                                \
      decodeSmallT(data, BITS, lo, bs, s, out, DT);                     \
  }

static size_t decodeRun(const uint8_t* scales, const uint8_t* data, int bits, int block, size_t lo,
                        size_t count, void* out, zppDataType_t dtype) {
  pthread_once(&gSignsOnce, fillSigns);
  const size_t bs = (size_t)block;
  const int lb = __builtin_ctz((unsigned)block);
  ZPP_QUANT_SPECIALIZE(bits, dtype, ROT_DECODE_RUN);
  return lo;
}

/* ---- sums in the rotated domain --------------------------------------------------- */

/* v[0..n) = r of the 8n elements from lo of block b of the nin inputs
 * (zpp_quant.h, "Reductions of rotated segments"): r = ((0 + v_0) + v_1)
 * + ... in input order, v_k = (float)q * s_k, the decoder's first step. */
ROT_INLINE void sumRotated(const uint8_t* packed, size_t stride, int nin, size_t dataOff, int bits,
                           size_t b, size_t lo, __m256* v, int n) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 vs = _mm256_set1_ps(zppQuantLoadScale(zppQuantScalesPtr(packed), b));
#pragma GCC unroll 8
  for (int j = 0; j < n; j++) /* input 0: 0 + v_0 (nin >= 1) */
    v[j] = _mm256_add_ps(zero,
                         _mm256_mul_ps(avx2DecodeQ8(packed + dataOff, bits, lo + 8 * (size_t)j), vs));
  for (int k = 1; k < nin; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    vs = _mm256_set1_ps(zppQuantLoadScale(zppQuantScalesPtr(seg), b));
#pragma GCC unroll 8
    for (int j = 0; j < n; j++)
      v[j] =
          _mm256_add_ps(v[j], _mm256_mul_ps(avx2DecodeQ8(seg + dataOff, bits, lo + 8 * (size_t)j), vs));
  }
}

/* z / divisor of 16 sums (a, b: H r, before 2^-L) stored as dtype at element
 * at, signs from j: div 0 none (z itself), 1 multiply by vd (the reciprocal
 * of a divisor 2^k: the same rounded quotient), 2 divide by vd. The signs
 * commute with the division (round to nearest is symmetric; a NaN keeps
 * its sign through it), so they come last, in finish16. */
ROT_INLINE void finishSum16(void* out, zppDataType_t dtype, size_t at, size_t j, __m256 a, __m256 b,
                            __m256 invB, int div, __m256 vd) {
  if (div == 0) {
    finish16(out, dtype, at, j, a, b, invB, 1);
    return;
  }
  a = _mm256_mul_ps(a, invB);
  b = _mm256_mul_ps(b, invB);
  if (div == 1) {
    a = _mm256_mul_ps(a, vd);
    b = _mm256_mul_ps(b, vd);
  } else {
    a = _mm256_div_ps(a, vd);
    b = _mm256_div_ps(b, vd);
  }
  finish16(out, dtype, at, j, a, b, invB, 0);
}

/* The sums of one block, then its inverse D ((H r) * 2^-L), divided as
 * finishSum16 says, into out (dtype) at element at: the decoder's stages,
 * with the spec's subtraction in stages 1-4 (a sum may overflow to Inf,
 * and Inf - Inf must give the reference's NaN). Blocks of 128 and more:
 * 64 at a time through the stages below 64 into an L1 buffer, the wide
 * stages there, then the multiply, the division and the signs. */
ROT_INLINE void sumBlockT(const uint8_t* packed, size_t stride, int nin, size_t dataOff, int bits,
                          size_t b, size_t lo, size_t len, void* out, size_t at, zppDataType_t dtype,
                          int div, float divisor) {
  const int L = __builtin_ctz((unsigned)len); /* len a power of two */
  const __m256 invB = _mm256_castsi256_ps(_mm256_set1_epi32((127 - L) << 23));
  const __m256 vd = _mm256_set1_ps(divisor);
  __m256 v[8];
  if (len <= 64) {
    const int n = len == 32 ? 4 : 8;
    if (n == 4) { /* n a constant in each call */
      sumRotated(packed, stride, nin, dataOff, bits, b, lo, v, 4);
      stagesNarrow(v, 4, 1);
    } else {
      sumRotated(packed, stride, nin, dataOff, bits, b, lo, v, 8);
      stagesNarrow(v, 8, 1);
    }
#pragma GCC unroll 4
    for (int k = 0; k < n; k += 2)
      finishSum16(out, dtype, at + 8 * (size_t)k, 8 * (size_t)k, v[k], v[k + 1], invB, div, vd);
    return;
  }
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32)));
  for (size_t i = 0; i < len; i += 64) {
    sumRotated(packed, stride, nin, dataOff, bits, b, lo + i, v, 8);
    stagesNarrow(v, 8, 1);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) _mm256_store_ps(buf + i + 8 * k, v[k]);
  }
  stagesWide(buf, len);
  for (size_t i = 0; i < len; i += 16)
    finishSum16(out, dtype, at + i, i, _mm256_load_ps(buf + i), _mm256_load_ps(buf + i + 8), invB, div,
                vd);
}

void zppQuantRotSumBlockAvx2(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits,
                             size_t b, size_t lo, size_t len, float* acc) {
  pthread_once(&gSignsOnce, fillSigns);
#define SUM_BLOCK(BITS, DT) sumBlockT(packed, stride, n, dataOff, BITS, b, lo, len, acc, 0, DT, 0, 1.0f)
  ZPP_QUANT_SPECIALIZE(bits, zppFloat32, SUM_BLOCK);
#undef SUM_BLOCK
}

void zppQuantRotSumStoreAvx2(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits,
                             size_t b, size_t lo, size_t len, int div, float divisor, void* out,
                             zppDataType_t dtype) {
  pthread_once(&gSignsOnce, fillSigns);
#define SUM_STORE(BITS, DT) \
  sumBlockT(packed, stride, n, dataOff, BITS, b, lo, len, out, lo, DT, div, divisor)
  ZPP_QUANT_SPECIALIZE(bits, dtype, SUM_STORE);
#undef SUM_STORE
}

/* The direct order over the blocks of one escape group (zpp_quant.h,
 * "Reductions of rotated segments"): pass 1, per block with ok[k] set, the
 * sums r into an L1 tile (the rotated-domain sums before any transform)
 * and max |r|; pass 2, the block setups eight blocks at a time with vector
 * divisions (the IEEE operations of zppQuantBlockSetup: a / Q, Q / (a p)),
 * so that no block waits on its own divisions; pass 3, the quantization of
 * each block as the encoder quantizes its w. ok[k] is cleared where some r
 * is not finite (nothing written for that block). */
ROT_INLINE void sumRequantGroupT(const uint8_t* packed, size_t stride, int nin, size_t dataOff,
                                 int bitsIn, size_t bs, size_t b0, size_t nb, int bitsOut,
                                 uint8_t* scales, uint8_t* data, uint8_t* ok) {
  float tile[ZPP_QUANT_ESC_GROUP] __attribute__((aligned(32)));
  uint32_t amax[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK] __attribute__((aligned(32)));
  __m256 v[8];
  for (size_t k = 0; k < nb; k++) {
    amax[k] = 0;
    if (!ok[k]) continue;
    const size_t lo = (b0 + k) * bs;
    float* t = tile + k * bs;
    __m256i m = _mm256_setzero_si256();
    if (bs == 32) {
      sumRotated(packed, stride, nin, dataOff, bitsIn, b0 + k, lo, v, 4);
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        m = _mm256_max_epu32(m, absBits(v[j]));
        _mm256_store_ps(t + 8 * j, v[j]);
      }
    } else {
      for (size_t i = 0; i < bs; i += 64) {
        sumRotated(packed, stride, nin, dataOff, bitsIn, b0 + k, lo + i, v, 8);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
          m = _mm256_max_epu32(m, absBits(v[j]));
          _mm256_store_ps(t + i + 8 * j, v[j]);
        }
      }
    }
    amax[k] = avx2HmaxU32(m);
    if (amax[k] >= 0x7f800000u) ok[k] = 0; /* r not finite: the fallback */
  }
  const int Q = zppQuantQmax(bitsOut);
  float sc[8] __attribute__((aligned(32))), inv[8] __attribute__((aligned(32)));
  const __m256 vq = _mm256_set1_ps((float)Q);
  const __m256i tiny = _mm256_set1_epi32((int)ZPP_QUANT_TINY_BITS);
  for (size_t k0 = 0; k0 < nb; k0 += 8) {
    const size_t kn = nb - k0 < 8 ? nb - k0 : 8;
    uint32_t a8[8] __attribute__((aligned(32))) = {0};
    memcpy(a8, amax + k0, kn * sizeof(uint32_t));
    const __m256i ai = _mm256_load_si256((const __m256i*)(const void*)a8);
    const __m256 a = _mm256_castsi256_ps(ai);
    /* p = 2^64 where a < 2^-64 (bits below ZPP_QUANT_TINY_BITS), else 1. */
    const __m256 p = _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(0x1p64f),
                                      _mm256_castsi256_ps(_mm256_cmpgt_epi32(tiny, ai)));
    _mm256_store_ps(sc, _mm256_div_ps(a, vq));
    _mm256_store_ps(inv, _mm256_div_ps(vq, _mm256_mul_ps(a, p)));
    for (size_t j = 0; j < kn; j++) {
      const size_t k = k0 + j, lo = (b0 + k) * bs;
      if (!ok[k]) continue;
      uint8_t* d = data + zppQuantByteOf(lo, bitsOut);
      if (amax[k] == 0) { /* ZPP_QBLOCK_ZERO: scale +0, every q 0 */
        zppQuantStoreScale(scales, b0 + k, 0.0f);
        memset(d, 0, zppQuantDataBytes(bs, bitsOut));
        continue;
      }
      zppQuantStoreScale(scales, b0 + k, sc[j]);
      if (amax[k] < ZPP_QUANT_TINY_BITS) { /* the reference's scaled path */
        zppQuantBlockParams_t bp = zppQuantBlockSetup(amax[k], Q);
        zppQuantEncodeDtypeRef(tile + k * bs, zppFloat32, bs, &bp, bitsOut, data, lo);
      } else {
        quantizeW(tile + k * bs, bs, bitsOut, inv[j], d);
      }
    }
  }
}

void zppQuantRotSumRequantGroupAvx2(const uint8_t* packed, size_t stride, int n, size_t dataOff,
                                    int bits, int block, size_t b0, size_t nb, int bits_out,
                                    uint8_t* scalesOut, uint8_t* dataOut, uint8_t* ok) {
#define SUM_REQUANT(BI, BO) \
  sumRequantGroupT(packed, stride, n, dataOff, BI, (size_t)block, b0, nb, BO, scalesOut, dataOut, ok)
  ZPP_QUANT_SPECIALIZE_WIDTHS(bits, bits_out, SUM_REQUANT);
#undef SUM_REQUANT
}

const zppQuantRotImpl_t zppQuantRotImplAvx2 = {
    .name = "avx2",
    .widths = 1u << 8 | 1u << 4 | 1u << 2,
    .encodeGroup = encodeGroup,
    .encodeGroupFeedback = encodeGroupFeedback,
    .decodeBlock = decodeBlock,
    .decodeRun = decodeRun,
    .sumBlock = zppQuantRotSumBlockAvx2,
    .sumStore = zppQuantRotSumStoreAvx2,
    .sumRequantGroup = zppQuantRotSumRequantGroupAvx2,
};
