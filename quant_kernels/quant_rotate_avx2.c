/*
 * The rotated codec (zpp_quant.h, "Rotation") with AVX2: encode of an escape
 * group and decode of a rotated block, bit-identical to the reference in
 * quant_rotate.c. Compiled with -mavx2 -mf16c (this file only), called only
 * when the active implementation is a vector one (cpuid said yes).
 *
 * Encoding, per block: one pass loads the input, flips the signs (D) into an
 * fp32 buffer and takes max |x|; a second pass, per 64 elements in
 * registers, counts the elements with |x| * 2^K >= max |x| and runs the
 * butterfly stages h = 1, 2, 4 (shuffles: s + (+-v), which is the spec's
 * x_j + x_{j+h} and x_j - x_{j+h} exactly) and 8, 16, 32 (across vectors);
 * the stages from 64 on run across the buffer; the last pass quantizes w
 * as the plain codec does. A block is "ordinary" when it is finite and at
 * least E + 1 elements have |x| * 2^K >= max |x| (or it is zero): then its
 * reference r (the (E+1)-th largest magnitude) is >= max |x| / 2^K, so it
 * has no candidate, no escape and is rotated, as in the reference. A group
 * with any other block (or a short block, or a w that is not finite) is
 * left to the reference (the caller's fallback), so that escapes, markers
 * and unrotated blocks keep the reference's code.
 *
 * Decoding, per rotated block: q * s per 64 elements in registers with the
 * same stages, the later stages across the buffer, then * 2^-L, the signs,
 * and the output type's rounding in one pass.
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
static pthread_once_t gSignsOnce = PTHREAD_ONCE_INIT;
static void fillSigns(void) {
  for (size_t i = 0; i < ZPP_QUANT_MAX_BLOCK; i++) gSigns[i] = zppQuantRotSignMask(i);
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

/* Stages h = 8 .. 4n (n vectors of eight, n = 4 or 8) across the vectors. */
ROT_INLINE void stagesAcross(__m256* v, int n) {
#pragma GCC unroll 4
  for (int hv = 1; hv < n; hv *= 2)
#pragma GCC unroll 8
    for (int j = 0; j < n; j++)
      if ((j & hv) == 0) {
        __m256 a = v[j], b = v[j + hv];
        v[j] = _mm256_add_ps(a, b);
        v[j + hv] = _mm256_sub_ps(a, b);
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

/* x of one block (D applied) into buf; returns max |x| as fp32 bits. */
ROT_INLINE uint32_t loadSigned(const void* in, zppDataType_t dtype, size_t at, size_t len, float* buf) {
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  for (size_t i = 0; i < len; i += 16) {
    __m256 a = _mm256_xor_ps(avx2Load8(in, dtype, at + i), signs8(i));
    __m256 b = _mm256_xor_ps(avx2Load8(in, dtype, at + i + 8), signs8(i + 8));
    m0 = _mm256_max_epu32(m0, absBits(a));
    m1 = _mm256_max_epu32(m1, absBits(b));
    _mm256_store_ps(buf + i, a);
    _mm256_store_ps(buf + i + 8, b);
  }
  return avx2HmaxU32(_mm256_max_epu32(m0, m1));
}

/* The first stages of n * 8 elements at b in registers (n = 4 or 8, a
 * constant), counting on the way the elements with |x| * 2^K >= a (va). */
ROT_INLINE int chunkCount(float* b, int n, __m256 va, __m256 vk) {
  __m256 v[8];
  int c = 0;
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) {
    v[k] = _mm256_load_ps(b + 8 * k);
    __m256 t = _mm256_mul_ps(_mm256_castsi256_ps(absBits(v[k])), vk);
    c += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(t, va, _CMP_GE_OQ)));
    v[k] = stages124(v[k]);
  }
  stagesAcross(v, n);
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) _mm256_store_ps(b + 8 * k, v[k]);
  return c;
}

/* The stages below 64 over a block (a block of 32 has those below 32),
 * counting as chunkCount does. Returns the count. */
ROT_INLINE int stagesNarrowCount(float* buf, size_t len, __m256 va, __m256 vk) {
  if (len < 64) return chunkCount(buf, 4, va, vk);
  int c = 0;
  for (size_t i = 0; i < len; i += 64) c += chunkCount(buf + i, 8, va, vk);
  return c;
}

/* 32 values quantized to int8 bytes in element order. */
ROT_INLINE __m256i quant32v(__m256 w0, __m256 w1, __m256 w2, __m256 w3, __m256 vinv) {
  __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(w0, vinv));
  __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(w1, vinv));
  __m256i c = _mm256_cvtps_epi32(_mm256_mul_ps(w2, vinv));
  __m256i d = _mm256_cvtps_epi32(_mm256_mul_ps(w3, vinv));
  __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

ROT_INLINE __m256i quant32(const float* w, __m256 vinv) {
  return quant32v(_mm256_load_ps(w), _mm256_load_ps(w + 8), _mm256_load_ps(w + 16),
                  _mm256_load_ps(w + 24), vinv);
}

/* 32 int8 q stored as int8 (32 bytes) or int4 (16 bytes) at d. */
ROT_INLINE void store32(__m256i q, int bits, uint8_t* d) {
  if (bits == 8) {
    _mm256_storeu_si256((__m256i*)d, q);
    return;
  }
  __m256i n =
      _mm256_maddubs_epi16(_mm256_and_si256(q, _mm256_set1_epi8(0x0f)), _mm256_set1_epi16(0x1001));
  __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(n, n), 0xd8);
  _mm_storeu_si128((__m128i*)d, _mm256_castsi256_si128(p));
}

/* A block of 8n elements (n = 4 or 8: blocks of 32 and 64) in registers
 * from load to store. Returns 0 where encodeGroupT's block loop would. */
ROT_INLINE int encodeSmall(const void* in, zppDataType_t dtype, size_t at, int n, int bits, int Q,
                           __m256 vk, uint8_t* scales, size_t b, uint8_t* data) {
  __m256 v[8];
  __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) {
    v[k] = _mm256_xor_ps(avx2Load8(in, dtype, at + 8 * (size_t)k), signs8(8 * (size_t)k));
    m = _mm256_max_epu32(m, absBits(v[k]));
  }
  uint32_t a = avx2HmaxU32(m);
  if (a >= 0x7f800000u) return 0;
  if (a != 0) {
    const __m256 va = _mm256_castsi256_ps(_mm256_set1_epi32((int)a));
    int c = 0;
#pragma GCC unroll 8
    for (int k = 0; k < n; k++) {
      __m256 t = _mm256_mul_ps(_mm256_castsi256_ps(absBits(v[k])), vk);
      c += __builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_cmp_ps(t, va, _CMP_GE_OQ)));
    }
    if (c <= ZPP_QUANT_ESC_PER_BLOCK) return 0;
  }
  m = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) v[k] = stages124(v[k]);
  stagesAcross(v, n);
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) m = _mm256_max_epu32(m, absBits(v[k]));
  uint32_t wmax = avx2HmaxU32(m);
  if (wmax >= 0x7f800000u) return 0;
  zppQuantBlockParams_t bp = zppQuantBlockSetup(wmax, Q);
  zppQuantStoreScale(scales, b, bp.scale);
  uint8_t* d = data + (bits == 8 ? at : at / 2);
  const size_t len = 8 * (size_t)n;
  if (bp.kind != ZPP_QBLOCK_NORMAL) {
    memset(d, 0, zppQuantDataBytes(len, bits));
  } else if (bp.p != 1.0f) {
    float w[64] __attribute__((aligned(32)));
    for (int k = 0; k < n; k++) _mm256_store_ps(w + 8 * k, v[k]);
    zppQuantEncodeDtypeRef(w, zppFloat32, len, &bp, bits, data, at);
  } else {
    const __m256 vinv = _mm256_set1_ps(bp.inv);
    store32(quant32v(v[0], v[1], v[2], v[3], vinv), bits, d);
    if (n == 8) store32(quant32v(v[4], v[5], v[6], v[7], vinv), bits, d + (bits == 8 ? 32 : 16));
  }
  return 1;
}

/* w (len a multiple of 32) quantized as a plain normal block with p = 1: q
 * = rne(w * inv); |q| <= Q without a clamp, as in quant_avx2.c. */
ROT_INLINE void quantizeW(const float* w, size_t len, int bits, float inv, uint8_t* d) {
  const __m256 vinv = _mm256_set1_ps(inv);
  if (bits == 8) {
    for (size_t i = 0; i < len; i += 32) _mm256_storeu_si256((__m256i*)(d + i), quant32(w + i, vinv));
    return;
  }
  const __m256i lo = _mm256_set1_epi8(0x0f), mul = _mm256_set1_epi16(0x1001);
  for (size_t i = 0; i < len; i += 32) {
    __m256i n = _mm256_maddubs_epi16(_mm256_and_si256(quant32(w + i, vinv), lo), mul);
    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(n, n), 0xd8);
    _mm_storeu_si128((__m128i*)(d + i / 2), _mm256_castsi256_si128(p));
  }
}

ROT_INLINE int encodeGroupT(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                            uint8_t* packed, size_t g) {
  const size_t bs = (size_t)block, base = g * ZPP_QUANT_ESC_GROUP;
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  if (glen % bs != 0) return 0; /* a short last block: the reference's */
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  const int Q = zppQuantQmax(bits);
  const __m256 vk = _mm256_set1_ps((float)(1u << ZPP_QUANT_ESC_LOG2(bits)));
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32)));
  if (bs <= 64) {
    for (size_t lo = 0; lo < glen; lo += bs) {
      size_t at = base + lo;
      if (!(bs == 32 ? encodeSmall(in, dtype, at, 4, bits, Q, vk, scales, at / bs, data)
                     : encodeSmall(in, dtype, at, 8, bits, Q, vk, scales, at / bs, data)))
        return 0;
    }
  }
  for (size_t lo = 0; bs > 64 && lo < glen; lo += bs) {
    size_t at = base + lo, b = at / bs;
    uint32_t a = loadSigned(in, dtype, at, bs, buf);
    if (a >= 0x7f800000u) return 0; /* a non-finite element: markers */
    int c = stagesNarrowCount(buf, bs, _mm256_castsi256_ps(_mm256_set1_epi32((int)a)), vk);
    if (a != 0 && c <= ZPP_QUANT_ESC_PER_BLOCK) return 0; /* may have candidates */
    if (bs >= 128) stagesWide(buf, bs);
    __m256i m = _mm256_setzero_si256();
    for (size_t i = 0; i < bs; i += 8) m = _mm256_max_epu32(m, absBits(_mm256_load_ps(buf + i)));
    uint32_t wmax = avx2HmaxU32(m);
    if (wmax >= 0x7f800000u) return 0; /* w not finite: stored unrotated */
    zppQuantBlockParams_t bp = zppQuantBlockSetup(wmax, Q);
    zppQuantStoreScale(scales, b, bp.scale);
    uint8_t* d = data + (bits == 8 ? at : at / 2);
    if (bp.kind != ZPP_QBLOCK_NORMAL)
      memset(d, 0, zppQuantDataBytes(bs, bits));
    else if (bp.p != 1.0f)
      zppQuantEncodeDtypeRef(buf, zppFloat32, bs, &bp, bits, data, at);
    else
      quantizeW(buf, bs, bits, bp.inv, d);
  }
  uint8_t* table = packed + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES;
  for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++)
    zppQuantEscStoreSlot(table, j, 0.0f, ZPP_QUANT_ESC_EMPTY);
  return 1;
}

int zppQuantRotEncodeGroupAvx2(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                               uint8_t* packed, size_t g) {
  pthread_once(&gSignsOnce, fillSigns);
  if (dtype == zppFloat32)
    return bits == 8 ? encodeGroupT(in, zppFloat32, count, 8, block, packed, g)
                     : encodeGroupT(in, zppFloat32, count, 4, block, packed, g);
  if (dtype == zppFloat16)
    return bits == 8 ? encodeGroupT(in, zppFloat16, count, 8, block, packed, g)
                     : encodeGroupT(in, zppFloat16, count, 4, block, packed, g);
  return bits == 8 ? encodeGroupT(in, zppBfloat16, count, 8, block, packed, g)
                   : encodeGroupT(in, zppBfloat16, count, 4, block, packed, g);
}

/* ---- decode ----------------------------------------------------------------------- */

/* q * s of n * 8 elements from element i, the stages below 8n done, in v. */
ROT_INLINE void decodeStages(const uint8_t* data, int bits, size_t i, __m256 vs, __m256* v, int n) {
#pragma GCC unroll 8
  for (int k = 0; k < n; k++)
    v[k] = stages124(_mm256_mul_ps(avx2DecodeQ8(data, bits, i + 8 * (size_t)k), vs));
  stagesAcross(v, n);
}

/* The same, stored into b. */
ROT_INLINE void chunkDecode(const uint8_t* data, int bits, size_t i, __m256 vs, float* b, int n) {
  __m256 v[8];
  decodeStages(data, bits, i, vs, v, n);
#pragma GCC unroll 8
  for (int k = 0; k < n; k++) _mm256_store_ps(b + 8 * k, v[k]);
}

ROT_INLINE void decodeBlockT(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                             zppDataType_t dtype) {
  float buf[ZPP_QUANT_MAX_BLOCK] __attribute__((aligned(32)));
  const __m256 vs = _mm256_set1_ps(s);
  const __m256 invB = _mm256_castsi256_ps(_mm256_set1_epi32((127 - zppQuantLog2((int)len)) << 23));
  if (len <= 64) { /* in registers from load to store */
    const int n = len == 32 ? 4 : 8;
    __m256 v[8];
    decodeStages(data, bits, lo, vs, v, n);
#pragma GCC unroll 8
    for (int k = 0; k < n; k++)
      avx2Store8(out, dtype, lo + 8 * (size_t)k,
                 _mm256_xor_ps(_mm256_mul_ps(v[k], invB), signs8(8 * (size_t)k)));
    return;
  }
  for (size_t i = 0; i < len; i += 64) chunkDecode(data, bits, lo + i, vs, buf + i, 8);
  stagesWide(buf, len);
  for (size_t i = 0; i < len; i += 8)
    avx2Store8(out, dtype, lo + i,
               _mm256_xor_ps(_mm256_mul_ps(_mm256_load_ps(buf + i), invB), signs8(i)));
}

void zppQuantRotDecodeBlockAvx2(const uint8_t* data, int bits, size_t lo, size_t len, float s,
                                void* out, zppDataType_t dtype) {
  pthread_once(&gSignsOnce, fillSigns);
  if (bits == 8) {
    if (dtype == zppFloat32)
      decodeBlockT(data, 8, lo, len, s, out, zppFloat32);
    else if (dtype == zppFloat16)
      decodeBlockT(data, 8, lo, len, s, out, zppFloat16);
    else
      decodeBlockT(data, 8, lo, len, s, out, zppBfloat16);
  } else {
    if (dtype == zppFloat32)
      decodeBlockT(data, 4, lo, len, s, out, zppFloat32);
    else if (dtype == zppFloat16)
      decodeBlockT(data, 4, lo, len, s, out, zppFloat16);
    else
      decodeBlockT(data, 4, lo, len, s, out, zppBfloat16);
  }
}
