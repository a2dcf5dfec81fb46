/*
 * AVX-512 codecs for fp16 and bf16 tensors. Compiled with -mavx512f
 * -mavx512bw -mavx512vl -mavx512vbmi -mavx512vbmi2 -mavx512bf16 -mavx2
 * -mf16c (this file only, never -mfma; the build has -ffp-contract=off) and
 * called only after cpuid said the CPU and OS run all of them.
 * Bit-identical to quant_scalar.c: the same fp32 operations in the same
 * order (x * inv rounded to nearest even by vcvtps2dq; q * scale rounded by
 * vcvtps2ph or the bf16 rounding), the block setup as vector divisions of
 * the very operations of zppQuantBlockSetup, and quant_ref.h for rare blocks
 * and short tails. fp32 tensors and the reductions are quant_avx2.c's
 * functions, reached through zppQuantImplAvx2: they were not made faster.
 *
 * Why this is faster than quant_avx2.c on Zen 4. That core runs a 512-bit
 * operation on its 256-bit pipes over two cycles, so plain element-wise
 * arithmetic costs the same per element in both widths; measured, it
 * sustains about two 512-bit operations per cycle, so what counts is the
 * number of operations per element. The gains are instructions that AVX2
 * lacks and that replace chains of several:
 *   - narrowing: vpermt2b gathers the low bytes of 32 dwords from two
 *     vectors in one shuffle (AVX2: vpackssdw, vpacksswb and vpermd);
 *   - int4 packing: vpmaddwd computes nibble(q_even) + 16 * q_odd for 16
 *     byte pairs at once, on the multiply pipes that the conversions leave
 *     idle (AVX2: and, vpmaddubsw, vpackuswb, vpermq after the pack chain);
 *   - bf16 widening in quantize: one 512-bit load holds 32 elements; a shift
 *     makes the even ones fp32, an and the odd ones (AVX2: vpmovzxwd and a
 *     shift per 8), and the even/odd split is exactly int4's pairing;
 *   - int4 to fp16/bf16 by table: vpmultishiftqb moves each nibble into the
 *     low bits of a 16-bit index, vpermw looks 32 elements up in the block's
 *     16 possible outputs: two shuffles per 32 elements (AVX2: about eleven);
 *   - int8 to bf16: vcvtne2ps2bf16 rounds 32 values in one instruction where
 *     the integer rounding takes about eight. It treats subnormal inputs as
 *     zero, which the spec does not, so it is used only for blocks whose
 *     scale is a normal number (then every q * scale is zero, normal or
 *     +-Inf); over all 2^32 - 2^25 + 4 such fp32 patterns it was checked to
 *     give zppFloatToBf16's bits, and other blocks take the integer path;
 *   - block maxima: sixteen blocks' max vectors go through a transpose-and-
 *     max network of mask blends and one shuffle per pair; then one vector
 *     division gives sixteen scales, another sixteen reciprocals.
 * What stays is what the spec fixes. In-cache fp16 quantize is bound by its
 * conversions (vcvtph2ps, vcvtps2dq: about 5.5 cycles per 32 elements with
 * the max pass, measured in registers), int8 to fp16 by vcvtdq2ps and
 * vcvtps2ph (about 5.7), and int4 quantize also by the per-block setup of
 * its 64-element blocks.
 */
#include <immintrin.h>
#include <string.h>

#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

#define ZPP_AVX512_INLINE static inline __attribute__((always_inline))

/* ---- quantize: block maxima ------------------------------------------------------- */

/* Dword k of the result = the max over the 32 words of m[k] (zero-extended).
 * Each level pairs two vectors: a mask blend keeps a's lanes in one half and
 * b's in the other, one shuffle brings the two other halves opposite them,
 * and a max halves each vector's share: 15 shuffles for 16 blocks. */
ZPP_AVX512_INLINE __m512i avx512TransposeMax16(const __m512i m[16]) {
  __m512i r[8], s[4], t[2];
  for (int j = 0; j < 8; j++) /* 256-bit halves: r[j] = (block 2j, block 2j+1) */
    r[j] = _mm512_max_epu16(_mm512_mask_blend_epi64(0xf0, m[2 * j], m[2 * j + 1]),
                            _mm512_shuffle_i64x2(m[2 * j], m[2 * j + 1], 0x4e));
  const __m512i swap128 = _mm512_setr_epi64(2, 3, 8, 9, 6, 7, 12, 13);
  for (int j = 0; j < 4; j++) /* 128-bit lanes: blocks 4j, 4j+2, 4j+1, 4j+3 */
    s[j] = _mm512_max_epu16(_mm512_mask_blend_epi64(0xcc, r[2 * j], r[2 * j + 1]),
                            _mm512_permutex2var_epi64(r[2 * j], swap128, r[2 * j + 1]));
  for (int j = 0; j < 2; j++) /* 64-bit */
    t[j] = _mm512_max_epu16(_mm512_mask_blend_epi64(0xaa, s[2 * j], s[2 * j + 1]),
                            _mm512_alignr_epi8(s[2 * j + 1], s[2 * j], 8));
  /* 32-bit: dword i now holds block bitrev4(i) (its even and odd words) */
  __m512i v =
      _mm512_max_epu16(_mm512_mask_blend_epi32(0xaaaa, t[0], t[1]), _mm512_shrdi_epi64(t[0], t[1], 32));
  v = _mm512_max_epu16(v, _mm512_srli_epi32(v, 16));
  v = _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
  return _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15), v);
}

/* ---- quantize: encoding ---------------------------------------------------------- */

/* x * inv rounded to nearest even (vcvtps2dq) for 32 elements at x, as two
 * vectors of dwords: fp16 in element order (a: 0..15, b: 16..31), bf16 split
 * into even (a) and odd (b) elements. No clamp: |q| <= Q holds without it
 * (|x| <= max |x| gives |x * inv| <= Q (1 + 2^-24), which rounds to Q). */
typedef struct {
  __m512i a, b;
} avx512Q32_t;

ZPP_AVX512_INLINE avx512Q32_t avx512Round32(const uint16_t* x, zppDataType_t dtype, __m512 vinv) {
  __m512 a, b;
  if (dtype == zppFloat16) {
    a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)x));
    b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(x + 16)));
  } else {
    /* a bf16 in the high half of a dword is that value as fp32 */
    __m512i v = _mm512_loadu_si512(x);
    a = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    b = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
  }
  avx512Q32_t q;
  q.a = _mm512_cvtps_epi32(_mm512_mul_ps(a, vinv));
  q.b = _mm512_cvtps_epi32(_mm512_mul_ps(b, vinv));
  return q;
}

/* vpermt2b/vpermt2w indices: the low byte of each dword of a then of b; the
 * low bytes of a and b interleaved; the low words of a then of b. */
ZPP_AVX512_INLINE __m512i avx512IdxLowBytes(void) {
  return _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x7c787470, 0x6c686460, 0x5c585450, 0x4c484440,
                          0x3c383430, 0x2c282420, 0x1c181410, 0x0c080400);
}
ZPP_AVX512_INLINE __m512i avx512IdxInterleavedBytes(void) {
  return _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x7c3c7838, 0x74347030, 0x6c2c6828, 0x64246020,
                          0x5c1c5818, 0x54145010, 0x4c0c4808, 0x44044000);
}
ZPP_AVX512_INLINE __m512i avx512IdxLowWords(void) {
  return _mm512_set_epi32(0x003e003c, 0x003a0038, 0x00360034, 0x00320030, 0x002e002c, 0x002a0028,
                          0x00260024, 0x00220020, 0x001e001c, 0x001a0018, 0x00160014, 0x00120010,
                          0x000e000c, 0x000a0008, 0x00060004, 0x00020000);
}

/* 32 elements as int8 bytes in element order (the low 32 bytes). */
ZPP_AVX512_INLINE __m256i avx512Int8x32(avx512Q32_t q, zppDataType_t dtype) {
  __m512i idx = dtype == zppFloat16 ? avx512IdxLowBytes() : avx512IdxInterleavedBytes();
  return _mm512_castsi512_si256(_mm512_permutex2var_epi8(q.a, idx, q.b));
}

/* 32 elements as 16 int4 bytes, one in the low byte of each dword: element
 * 2i in the low nibble, 2i+1 in the high one. The odd element times 16 plus
 * the even one's nibble, by vpmaddwd on (q_even & 15, q_odd) word pairs. */
ZPP_AVX512_INLINE __m512i avx512Int4x32(avx512Q32_t q, zppDataType_t dtype) {
  if (dtype == zppFloat16) {
    /* pairs are neighbouring dwords: their low words, in order, then the pair */
    __m512i w = _mm512_permutex2var_epi16(q.a, avx512IdxLowWords(), q.b);
    return _mm512_madd_epi16(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff000fu)),
                             _mm512_set1_epi32(0x00100001));
  }
  /* bf16: even and odd elements are already in matching lanes; q_odd's high
   * word is its sign extension, so vpmaddwd by (16, 0) is 16 * q_odd */
  __m512i hi = _mm512_madd_epi16(q.b, _mm512_set1_epi32(16));
  return _mm512_ternarylogic_epi32(q.a, hi, _mm512_set1_epi32(0x0f), 0xec); /* (a & 15) | hi */
}

/* max(m, magnitude bits of the 32 elements at h), per 16-bit lane. */
ZPP_AVX512_INLINE __m512i avx512Max32(__m512i m, const uint16_t* h) {
  return _mm512_max_epu16(m, _mm512_and_si512(_mm512_loadu_si512(h), _mm512_set1_epi16(0x7fff)));
}

/* The max vector of a whole block h[0..len). */
ZPP_AVX512_INLINE __m512i avx512BlockMax(const uint16_t* h, size_t len) {
  __m512i m0 = _mm512_setzero_si512(), m1 = m0;
  size_t i = 0;
  for (; i + 64 <= len; i += 64) {
    m0 = avx512Max32(m0, h + i);
    m1 = avx512Max32(m1, h + i + 32);
  }
  if (i < len) m0 = avx512Max32(m0, h + i);
  return _mm512_max_epu16(m0, m1);
}

/* Prefetches the line at p: into L1 for the streaming schedule (the group
 * is read next), into L2 for the cache one (read two groups later). */
ZPP_AVX512_INLINE void avx512Prefetch(const uint16_t* p, int streaming) {
  if (streaming)
    _mm_prefetch((const char*)p, _MM_HINT_T0);
  else
    _mm_prefetch((const char*)p, _MM_HINT_T1);
}

/* Encodes a whole block x[0..len) (len a multiple of 32) with 1/step inv into
 * d (the block's first data byte), prefetching the same span of pf. Unless
 * streaming, also returns the max vector (avx512Max32) of the same span of
 * nx, a block of a later group: that group's pass 1 rides along this pass 2,
 * its and and max on pipes that the conversions leave idle. */
ZPP_AVX512_INLINE __m512i avx512EncodeBlock(const uint16_t* x, zppDataType_t dtype, size_t len,
                                            int bits, float inv, uint8_t* d, const uint16_t* nx,
                                            const uint16_t* pf, int streaming) {
  const __m512 vinv = _mm512_set1_ps(inv);
  __m512i m = _mm512_setzero_si512();
  size_t i = 0;
  if (bits == 8) {
    for (; i < len; i += 32) {
      avx512Prefetch(pf + i, streaming);
      if (!streaming) m = avx512Max32(m, nx + i);
      _mm256_storeu_si256((__m256i*)(d + i), avx512Int8x32(avx512Round32(x + i, dtype, vinv), dtype));
    }
    return m;
  }
  for (; i + 64 <= len; i += 64) {
    avx512Prefetch(pf + i, streaming);
    avx512Prefetch(pf + i + 32, streaming);
    if (!streaming) m = avx512Max32(avx512Max32(m, nx + i), nx + i + 32);
    __m512i n0 = avx512Int4x32(avx512Round32(x + i, dtype, vinv), dtype);
    __m512i n1 = avx512Int4x32(avx512Round32(x + i + 32, dtype, vinv), dtype);
    _mm256_storeu_si256((__m256i*)(d + i / 2),
                        _mm512_castsi512_si256(_mm512_permutex2var_epi8(n0, avx512IdxLowBytes(), n1)));
  }
  if (i < len) { /* a block of 32 */
    avx512Prefetch(pf + i, streaming);
    if (!streaming) m = avx512Max32(m, nx + i);
    __m512i n0 = avx512Int4x32(avx512Round32(x + i, dtype, vinv), dtype);
    _mm_storeu_si128((__m128i*)(d + i / 2),
                     _mm512_castsi512_si128(_mm512_permutexvar_epi8(avx512IdxLowBytes(), n0)));
  }
  return m;
}

/* What encoding a group needs from its maxima. */
typedef struct {
  float inv[16];     /* Q / (a * p) per block */
  uint32_t amax[16]; /* max |x| as fp32 bits */
  unsigned special;  /* blocks that are zero, non-finite or below 2^-64 */
} avx512Group_t;

/* Scales and reciprocals of up to sixteen blocks from their max vectors:
 * the transpose network, then one vector division each, the same IEEE
 * operations as zppQuantBlockSetup. Stores the g scales. */
ZPP_AVX512_INLINE void avx512GroupSetup(const __m512i m[16], zppDataType_t dtype, int Q, size_t g,
                                        uint8_t* scales, avx512Group_t* gp) {
  const __m512 vq = _mm512_set1_ps((float)Q);
  __m512i v = avx512TransposeMax16(m);
  __m512i abits = dtype == zppFloat16 ? _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)))
                                      : _mm512_slli_epi32(v, 16);
  __m512 a = _mm512_castsi512_ps(abits);
  __mmask16 nonfinite = _mm512_cmpgt_epi32_mask(abits, _mm512_set1_epi32(0x7f7fffff));
  __mmask16 tiny = _mm512_cmplt_epi32_mask(abits, _mm512_set1_epi32((int)ZPP_QUANT_TINY_BITS));
  __m512 p = _mm512_mask_blend_ps(tiny, _mm512_set1_ps(1.0f), _mm512_set1_ps(0x1p64f));
  __m512 scale = _mm512_div_ps(a, vq);
  __m512 inv = _mm512_div_ps(vq, _mm512_mul_ps(a, p));
  scale = _mm512_mask_mov_ps(scale, nonfinite,
                             _mm512_castsi512_ps(_mm512_set1_epi32((int)ZPP_QUANT_NAN_BITS)));
  _mm512_mask_storeu_ps(scales, (__mmask16)((1u << g) - 1u), scale);
  _mm512_storeu_ps(gp->inv, inv);
  _mm512_storeu_si512(gp->amax, abits);
  gp->special = (unsigned)(nonfinite | tiny); /* tiny includes zero */
}

/* The max vectors of the n blocks at x (zero beyond them). */
ZPP_AVX512_INLINE void avx512GroupMax(const uint16_t* x, size_t n, size_t bs, __m512i m[16]) {
  for (size_t k = 0; k < 16; k++)
    m[k] = k < n ? avx512BlockMax(x + k * bs, bs) : _mm512_setzero_si512();
}

/* Pass 2 over the g blocks at x (the first one is block b0 of the segment),
 * prefetching the blocks at pf; unless streaming, also pass 1 over the nn
 * blocks at nx, whose max vectors go to mn. */
ZPP_AVX512_INLINE void avx512EncodeGroup(const uint16_t* x, size_t g, size_t b0,
                                         const avx512Group_t* gp, zppDataType_t dtype, int bits,
                                         size_t bs, uint8_t* data, const uint16_t* nx, size_t nn,
                                         const uint16_t* pf, int streaming, __m512i mn[16]) {
  const int Q = zppQuantQmax(bits);
  if (gp->special == 0 && (streaming || nn == g)) {
    /* the usual case, without the per-block checks below */
    uint8_t* d = data + (bits == 8 ? b0 * bs : b0 * bs / 2);
    for (size_t k = 0; k < g; k++)
      mn[k] =
          avx512EncodeBlock(x + k * bs, dtype, bs, bits, gp->inv[k],
                            d + (bits == 8 ? k * bs : k * bs / 2), nx + k * bs, pf + k * bs, streaming);
    for (size_t k = g; k < 16; k++) mn[k] = _mm512_setzero_si512();
    return;
  }
  for (size_t k = 0; k < 16; k++) {
    /* a block of the later group, or this one again when there is none */
    const uint16_t* nk = k < nn ? nx + k * bs : x + k * bs;
    if (k >= g) {
      mn[k] = k < nn && !streaming ? avx512BlockMax(nk, bs) : _mm512_setzero_si512();
      continue;
    }
    size_t base = (b0 + k) * bs;
    uint8_t* d = data + (bits == 8 ? base : base / 2);
    if ((gp->special >> k) & 1u) {
      /* zero, non-finite or max |x| < 2^-64: rare, the scalar path */
      zppQuantBlockParams_t bp = zppQuantBlockSetup(gp->amax[k], Q);
      if (bp.kind != ZPP_QBLOCK_NORMAL)
        memset(d, 0, zppQuantDataBytes(bs, bits));
      else
        zppQuantEncodeDtypeRef(x + k * bs, dtype, bs, &bp, bits, data, base);
      mn[k] = streaming ? _mm512_setzero_si512() : avx512BlockMax(nk, bs);
    } else {
      mn[k] = avx512EncodeBlock(x + k * bs, dtype, bs, bits, gp->inv[k], d, nk, pf + k * bs, streaming);
    }
    if (k >= nn) mn[k] = _mm512_setzero_si512();
  }
}

/* Blocks in the group that starts at block b (of full whole blocks). */
ZPP_AVX512_INLINE size_t avx512GroupN(size_t full, size_t group, size_t b) {
  return full - b < group ? full - b : group;
}

/* Whole blocks of a 16-bit tensor, in groups of up to sixteen blocks and 8
 * KiB of input: the group's maxima (pass 1), sixteen scales and reciprocals
 * with one vector division each, then pass 2 from L1. Two schedules,
 * measured against each other on this machine:
 *   - cache (inputs up to 8 MiB): software-pipelined so that nothing waits
 *     for a division. While group i is encoded, the maxima of group i+2 are
 *     taken in the same loop and group i+3 is prefetched into L2; the scales
 *     of group i+1 are computed from its maxima, independent of both.
 *   - streaming (larger inputs, and bf16 to int8, whose pass 2 is too light
 *     for the fused pass 1 to pay): pass 1 of a group right before its pass
 *     2, the next group prefetched into L1 meanwhile, as quant_avx2.c does.
 *     From DRAM the cache schedule ran at 0.75x of this one (int8, 11.3
 *     against 14.7 GB/s at 64 MiB); the cause was not found (not the
 *     stores, the prefetch distance or hint, the group size, the
 *     narrowing, 4K aliasing). In cache it is 8-15% faster, except for bf16
 *     to int8 (5% slower). */
ZPP_AVX512_INLINE void avx512QuantizeT(const uint16_t* in, zppDataType_t dtype, size_t count, int bits,
                                       int block, uint8_t* packed) {
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  const size_t bs = (size_t)block, full = count / bs;
  size_t group = 4096 / bs;
  group = group < 1 ? 1 : group > 16 ? 16 : group;
  const int Q = zppQuantQmax(bits);
  __m512i m[2][16];    /* cache: max vectors of groups i+1 and i+2 */
  avx512Group_t gp[2]; /* cache: parameters of groups i and i+1 */
  if (count > ((size_t)4 << 20) || (dtype == zppBfloat16 && bits == 8)) {
    for (size_t g0 = 0; g0 < full; g0 += group) {
      size_t g = avx512GroupN(full, group, g0);
      const uint16_t* x = in + g0 * bs;
      avx512GroupMax(x, g, bs, m[0]);
      avx512GroupSetup(m[0], dtype, Q, g, scales + 4 * g0, &gp[0]);
      /* the next group when it is a full one, else this one again */
      const uint16_t* pf = g0 + 2 * group <= full ? x + group * bs : x;
      avx512EncodeGroup(x, g, g0, &gp[0], dtype, bits, bs, data, x, 0, pf, 1, m[0]);
    }
  } else {
    avx512GroupMax(in, full < group ? full : group, bs, m[0]);
    if (full > group) avx512GroupMax(in + group * bs, avx512GroupN(full, group, group), bs, m[1]);
    if (full > 0) avx512GroupSetup(m[0], dtype, Q, avx512GroupN(full, group, 0), scales, &gp[0]);
    for (size_t i = 0, g0 = 0; g0 < full; i++, g0 += group) {
      size_t g = avx512GroupN(full, group, g0), g1 = g0 + group, g2 = g0 + 2 * group;
      if (g1 < full)
        avx512GroupSetup(m[(i + 1) & 1], dtype, Q, avx512GroupN(full, group, g1), scales + 4 * g1,
                         &gp[(i + 1) & 1]);
      const uint16_t* x = in + g0 * bs;
      /* group i+3 into L2 when it is a full one, else this one again */
      const uint16_t* pf = g0 + 4 * group <= full ? in + (g0 + 3 * group) * bs : x;
      avx512EncodeGroup(x, g, g0, &gp[i & 1], dtype, bits, bs, data, in + g2 * bs,
                        g2 < full ? avx512GroupN(full, group, g2) : 0, pf, 0, m[i & 1]);
    }
  }
  size_t lo = full * bs;
  if (lo < count) zppQuantBlockRef(in + lo, dtype, count - lo, bits, scales, full, data, lo);
}

/* The block size as a constant for the small blocks, whose loops then unroll
 * into straight code: per-block overhead is what limits them. */
ZPP_AVX512_INLINE void avx512QuantizeB(const uint16_t* in, zppDataType_t dtype, size_t count, int bits,
                                       int block, uint8_t* packed) {
  switch (block) {
    case 32: avx512QuantizeT(in, dtype, count, bits, 32, packed); break;
    case 64: avx512QuantizeT(in, dtype, count, bits, 64, packed); break;
    case 128: avx512QuantizeT(in, dtype, count, bits, 128, packed); break;
    case 256: avx512QuantizeT(in, dtype, count, bits, 256, packed); break;
    default: avx512QuantizeT(in, dtype, count, bits, block, packed); break;
  }
}

static void avx512Quantize(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                           uint8_t* packed) {
  const uint16_t* h = (const uint16_t*)in;
  if (dtype == zppFloat32 || (bits == 8 && count > ((size_t)16 << 20))) {
    /* fp32; and int8 beyond 32 MiB of input, from DRAM: there the AVX2 loop
     * measured about 10% faster than the streaming schedule (16.3 against
     * 14.7 GB/s at 64 MiB; equal at 32 MiB, slower below), both above a
     * memcpy's speed. */
    zppQuantImplAvx2.quantize(in, dtype, count, bits, block, packed);
  } else if (dtype == zppFloat16) {
    if (bits == 8)
      avx512QuantizeB(h, zppFloat16, count, 8, block, packed);
    else
      avx512QuantizeB(h, zppFloat16, count, 4, block, packed);
  } else {
    if (bits == 8)
      avx512QuantizeB(h, zppBfloat16, count, 8, block, packed);
    else
      avx512QuantizeB(h, zppBfloat16, count, 4, block, packed);
  }
}

/* ---- dequantize ------------------------------------------------------------------ */

/* fp32 -> bf16 for values known not to be NaN (q * scale with a non-NaN
 * scale): the integer rounding of zppFloatToBf16, result in the high word. */
ZPP_AVX512_INLINE __m512i avx512Bf16RoundHigh(__m512 y) {
  __m512i u = _mm512_castps_si512(y);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
}

/* 32 int8 q at data + i decoded with scale vs and stored as dtype at out + i.
 * normal: the scale is a normal number (not subnormal, zero, Inf or NaN), so
 * every q * scale is zero, normal or +-Inf. For exactly those inputs
 * vcvtne2ps2bf16 rounds like zppFloatToBf16 (RNE; it treats subnormal
 * inputs as zero, which the spec does not): checked on all 2^32 - 2^25 + 4
 * such bit patterns, no difference. One instruction for 32 values instead
 * of about eight. */
ZPP_AVX512_INLINE void avx512DecodeInt8x32(const uint8_t* data, size_t i, __m512 vs, uint16_t* out,
                                           zppDataType_t dtype, int normal) {
  __m512 y0 = _mm512_mul_ps(
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(data + i)))), vs);
  __m512 y1 = _mm512_mul_ps(
      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(data + i + 16)))), vs);
  if (dtype == zppBfloat16 && normal) {
    _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(y1, y0));
  } else if (dtype == zppFloat16) {
    _mm256_storeu_si256((__m256i*)(out + i),
                        _mm512_cvtps_ph(y0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_si256((__m256i*)(out + i + 16),
                        _mm512_cvtps_ph(y1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    /* the high words of both, in order: odd word indices */
    __m512i idx = _mm512_add_epi16(avx512IdxLowWords(), _mm512_set1_epi16(1));
    _mm512_storeu_si512(
        out + i, _mm512_permutex2var_epi16(avx512Bf16RoundHigh(y0), idx, avx512Bf16RoundHigh(y1)));
  }
}

/* A block's 16 possible outputs (q * scale for nibble 0..15, q = n for n < 8
 * and n - 16 otherwise, rounded to dtype: the same operations as decoding
 * each element), in words 0..15 and again in 16..31, so that vpermw, which
 * reads 5 index bits, can ignore bit 4. */
ZPP_AVX512_INLINE __m512i avx512Table(float s, zppDataType_t dtype) {
  __m512 y = _mm512_mul_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1),
                           _mm512_set1_ps(s));
  if (dtype == zppFloat16)
    return _mm512_broadcast_i64x4(_mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m512i hiWords = _mm512_set_epi32(
      0x001f001d, 0x001b0019, 0x00170015, 0x00130011, 0x000f000d, 0x000b0009, 0x00070005, 0x00030001,
      0x001f001d, 0x001b0019, 0x00170015, 0x00130011, 0x000f000d, 0x000b0009, 0x00070005, 0x00030001);
  return _mm512_permutexvar_epi16(hiWords, avx512Bf16RoundHigh(y));
}

/* 32 int4 elements at data + i/2 (i even) through the table into out + i:
 * each qword of the source holds the 16 data bits of its four elements
 * (two broadcasts and a blend, no shuffle), vpmultishiftqb puts nibble k of
 * the qword in the low bits of word k, vpermw looks them up. */
ZPP_AVX512_INLINE void avx512DecodeInt4x32(const uint8_t* data, size_t i, __m512i tab, uint16_t* out) {
  const __m512i ctrl = _mm512_setr_epi64(
      0x000c000800040000LL, 0x001c001800140010LL, 0x002c002800240020LL, 0x003c003800340030LL,
      0x000c000800040000LL, 0x001c001800140010LL, 0x002c002800240020LL, 0x003c003800340030LL);
  long long d0, d1;
  memcpy(&d0, data + i / 2, 8);
  memcpy(&d1, data + i / 2 + 8, 8);
  __m512i v = _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi64(d0), _mm512_set1_epi64(d1));
  _mm512_storeu_si512(out + i, _mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(ctrl, v), tab));
}

ZPP_AVX512_INLINE void avx512DequantizeT(const uint8_t* packed, size_t count, int bits, int block,
                                         uint16_t* out, zppDataType_t dtype) {
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
      uint16_t nan16 = dtype == zppFloat16 ? ZPP_QUANT_HALF_NAN : ZPP_QUANT_BF16_NAN;
      const __m512i vnan = _mm512_set1_epi16((short)nan16);
      for (; i + 32 <= hi; i += 32) _mm512_storeu_si512(out + i, vnan);
      for (; i < hi; i++) out[i] = nan16;
      continue;
    }
    if (bits == 4) {
      __m512i tab = avx512Table(s, dtype);
      for (; i + 32 <= hi; i += 32) avx512DecodeInt4x32(data, i, tab, out);
    } else {
      const __m512 vs = _mm512_set1_ps(s);
      uint32_t e = zppF32Bits(s) & 0x7f800000u;
      if (dtype == zppBfloat16 && e != 0 && e != 0x7f800000u)
        for (; i + 32 <= hi; i += 32) avx512DecodeInt8x32(data, i, vs, out, dtype, 1);
      else
        for (; i + 32 <= hi; i += 32) avx512DecodeInt8x32(data, i, vs, out, dtype, 0);
    }
    for (; i < hi; i++) zppQuantStoreOne(out, dtype, i, (float)zppQuantGetQ(data, bits, i) * s);
  }
}

static void avx512Dequantize(const uint8_t* packed, size_t count, int bits, int block, void* out,
                             zppDataType_t dtype) {
  uint16_t* h = (uint16_t*)out;
  if (dtype == zppFloat16) {
    if (bits == 8)
      avx512DequantizeT(packed, count, 8, block, h, zppFloat16);
    else
      avx512DequantizeT(packed, count, 4, block, h, zppFloat16);
  } else if (dtype == zppBfloat16) {
    if (bits == 8)
      avx512DequantizeT(packed, count, 8, block, h, zppBfloat16);
    else
      avx512DequantizeT(packed, count, 4, block, h, zppBfloat16);
  } else {
    zppQuantImplAvx2.dequantize(packed, count, bits, block, out, dtype);
  }
}

/* ---- the rest: the AVX2 functions ------------------------------------------------ */

static void avx512Accumulate(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                             int block, float* acc, int accumulate) {
  zppQuantImplAvx2.accumulate(packed, stride, n, count, bits, block, acc, accumulate);
}

static void avx512Sum(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                      float divisor, void* out, zppDataType_t dtype) {
  zppQuantImplAvx2.sum(packed, stride, n, count, bits, block, divisor, out, dtype);
}

static void avx512ReduceRequant(const uint8_t* packed, size_t stride, int n, size_t count, int bits_in,
                                int block_in, int bits_out, int block_out, uint8_t* packed_out) {
  zppQuantImplAvx2.reduceRequant(packed, stride, n, count, bits_in, block_in, bits_out, block_out,
                                 packed_out);
}

static void avx512ToFloat(const void* in, zppDataType_t dtype, size_t n, float* out) {
  zppQuantImplAvx2.toFloat(in, dtype, n, out);
}

static void avx512FromFloat(const float* in, size_t n, void* out, zppDataType_t dtype) {
  zppQuantImplAvx2.fromFloat(in, n, out, dtype);
}

const zppQuantImpl_t zppQuantImplAvx512 = {
    .name = "avx512",
    .quantize = avx512Quantize,
    .dequantize = avx512Dequantize,
    .accumulate = avx512Accumulate,
    .sum = avx512Sum,
    .reduceRequant = avx512ReduceRequant,
    .toFloat = avx512ToFloat,
    .fromFloat = avx512FromFloat,
};
