/*
 * AVX-512 codecs for fp16 and bf16 tensors. Compiled with -mavx512f
 * -mavx512bw -mavx512vl -mavx512vbmi -mavx512vbmi2 -mavx512bf16 -mavx2
 * -mf16c (this file only, never -mfma; the build has -ffp-contract=off) and
 * called only after cpuid said the CPU and OS run all of them.
 * Bit-identical to quant_scalar.c: the same fp32 operations in the same
 * order (x * inv rounded to nearest even by vcvtps2dq; q * scale rounded by
 * vcvtps2ph or the bf16 rounding), the block setup as vector divisions of
 * the very operations of zppQuantBlockSetup, and quant_ref.h for rare blocks
 * and short tails. The int4 and int2 reductions (qgZ's steps between and
 * after its hops) are here too; fp32 tensors, int8 reductions and
 * accumulate are quant_avx2.c's functions, reached through
 * zppQuantImplAvx2: they were not made faster.
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

/* Dword k of the result = the max over all lanes of m[k]: its 32 words
 * (zero-extended) when `words`, else its 16 dwords (unsigned). Each level
 * pairs two vectors: a mask blend keeps a's lanes in one half and b's in the
 * other, one shuffle brings the two other halves opposite them, and a max
 * halves each vector's share: 15 shuffles for 16 blocks. */
ZPP_AVX512_INLINE __m512i avx512MaxLanes(__m512i a, __m512i b, int words) {
  return words ? _mm512_max_epu16(a, b) : _mm512_max_epu32(a, b);
}

ZPP_AVX512_INLINE __m512i avx512TransposeMax16(const __m512i m[16], int words) {
  __m512i r[8], s[4], t[2];
  for (int j = 0; j < 8; j++) /* 256-bit halves: r[j] = (block 2j, block 2j+1) */
    r[j] = avx512MaxLanes(_mm512_mask_blend_epi64(0xf0, m[2 * j], m[2 * j + 1]),
                          _mm512_shuffle_i64x2(m[2 * j], m[2 * j + 1], 0x4e), words);
  const __m512i swap128 = _mm512_setr_epi64(2, 3, 8, 9, 6, 7, 12, 13);
  for (int j = 0; j < 4; j++) /* 128-bit lanes: blocks 4j, 4j+2, 4j+1, 4j+3 */
    s[j] = avx512MaxLanes(_mm512_mask_blend_epi64(0xcc, r[2 * j], r[2 * j + 1]),
                          _mm512_permutex2var_epi64(r[2 * j], swap128, r[2 * j + 1]), words);
  for (int j = 0; j < 2; j++) /* 64-bit */
    t[j] = avx512MaxLanes(_mm512_mask_blend_epi64(0xaa, s[2 * j], s[2 * j + 1]),
                          _mm512_alignr_epi8(s[2 * j + 1], s[2 * j], 8), words);
  /* 32-bit: dword i now holds block bitrev4(i) (for words, its even and
   * odd words) */
  __m512i v = avx512MaxLanes(_mm512_mask_blend_epi32(0xaaaa, t[0], t[1]),
                             _mm512_shrdi_epi64(t[0], t[1], 32), words);
  if (words) {
    v = _mm512_max_epu16(v, _mm512_srli_epi32(v, 16));
    v = _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
  }
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

/* The int2 hint's counts (quant_impl.h, ZPP_QUANT_INT2_WIDE_T) of 32
 * elements (a, b) and their t = x * inv: the wide ones added to cnt[0], the
 * non-zero ones to cnt[1]. */
ZPP_AVX512_INLINE void avx512Int2Counts32(__m512 a, __m512 b, __m512 ta, __m512 tb, int* cnt) {
  const __m512 thr = _mm512_set1_ps(ZPP_QUANT_INT2_WIDE_T), zero = _mm512_setzero_ps();
  cnt[0] += __builtin_popcount((unsigned)_mm512_cmp_ps_mask(_mm512_abs_ps(ta), thr, _CMP_GE_OQ) |
                               (unsigned)_mm512_cmp_ps_mask(_mm512_abs_ps(tb), thr, _CMP_GE_OQ) << 16);
  cnt[1] += __builtin_popcount((unsigned)_mm512_cmp_ps_mask(a, zero, _CMP_NEQ_UQ) |
                               (unsigned)_mm512_cmp_ps_mask(b, zero, _CMP_NEQ_UQ) << 16);
}

/* cnt: NULL, or (int2) the hint's count: the wide elements among the 16 of
 * a (counting is what an in-cache int2 quantize spends most on, and these
 * are still a lower bound of c; quant_avx2.c's avx2Quant32) to cnt[0]. */
ZPP_AVX512_INLINE avx512Q32_t avx512Round32(const uint16_t* x, zppDataType_t dtype, __m512 vinv,
                                            int* cnt) {
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
  __m512 ta = _mm512_mul_ps(a, vinv), tb = _mm512_mul_ps(b, vinv);
  if (cnt != NULL)
    cnt[0] += __builtin_popcount((unsigned)_mm512_cmp_ps_mask(
        _mm512_abs_ps(ta), _mm512_set1_ps(ZPP_QUANT_INT2_WIDE_T), _CMP_GE_OQ));
  q.a = _mm512_cvtps_epi32(ta);
  q.b = _mm512_cvtps_epi32(tb);
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

/* 64 int2 q as 16 bytes of 2-bit fields (element 4k + j in bits 2j..2j+1
 * of byte k), from their int8 bytes in element order (two halves): the
 * fields paired into nibbles (a + 4 b per word, vpmaddubsw), the nibbles
 * into bytes (c + 16 d per dword, vpmaddwd), then narrowed. */
ZPP_AVX512_INLINE __m128i avx512Crumbs64(__m256i b0, __m256i b1) {
  __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1);
  __m512i n = _mm512_maddubs_epi16(_mm512_and_si512(b, _mm512_set1_epi8(3)), _mm512_set1_epi16(0x0401));
  return _mm512_cvtepi32_epi8(_mm512_madd_epi16(n, _mm512_set1_epi32(0x00100001)));
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

/* How many of the 32 q in q are not zero (the escape hint's count). */
ZPP_AVX512_INLINE int avx512NonZero32(avx512Q32_t q) {
  return __builtin_popcount((unsigned)_mm512_test_epi32_mask(q.a, q.a)) +
         __builtin_popcount((unsigned)_mm512_test_epi32_mask(q.b, q.b));
}

/* Encodes a whole block x[0..len) (len a multiple of 32) with 1/step inv into
 * d (the block's first data byte), prefetching the same span of pf. Unless
 * streaming, also returns the max vector (avx512Max32) of the same span of
 * nx, a block of a later group: that group's pass 1 rides along this pass 2,
 * its and and max on pipes that the conversions leave idle. *hint gets the
 * block's escape hint (quant_impl.h): for int8 and int4 0 when more than E
 * q are non-zero, for int2 from its counts. */
ZPP_AVX512_INLINE __m512i avx512EncodeBlock(const uint16_t* x, zppDataType_t dtype, size_t len,
                                            int bits, float inv, uint8_t* d, const uint16_t* nx,
                                            const uint16_t* pf, int streaming, int* hint) {
  const __m512 vinv = _mm512_set1_ps(inv);
  __m512i m = _mm512_setzero_si512();
  size_t i = 0;
  int n = 0, cnt[2] = {0, 0};
  if (bits == 8) {
    for (; i < len; i += 32) {
      avx512Prefetch(pf + i, streaming);
      if (!streaming) m = avx512Max32(m, nx + i);
      avx512Q32_t q = avx512Round32(x + i, dtype, vinv, NULL);
      n += avx512NonZero32(q);
      _mm256_storeu_si256((__m256i*)(d + i), avx512Int8x32(q, dtype));
    }
    *hint = n <= ZPP_QUANT_ESC_PER_BLOCK;
    return m;
  }
  if (bits == 2) {
    for (; i + 64 <= len; i += 64) {
      avx512Prefetch(pf + i, streaming);
      avx512Prefetch(pf + i + 32, streaming);
      if (!streaming) m = avx512Max32(avx512Max32(m, nx + i), nx + i + 32);
      avx512Q32_t q0 = avx512Round32(x + i, dtype, vinv, cnt);
      avx512Q32_t q1 = avx512Round32(x + i + 32, dtype, vinv, cnt);
      _mm_storeu_si128((__m128i*)(d + i / 4),
                       avx512Crumbs64(avx512Int8x32(q0, dtype), avx512Int8x32(q1, dtype)));
    }
    if (i < len) { /* a block of 32 */
      avx512Prefetch(pf + i, streaming);
      if (!streaming) m = avx512Max32(m, nx + i);
      avx512Q32_t q0 = avx512Round32(x + i, dtype, vinv, cnt);
      _mm_storel_epi64((__m128i*)(d + i / 4),
                       avx512Crumbs64(avx512Int8x32(q0, dtype), _mm256_setzero_si256()));
    }
    *hint = cnt[0] <= ZPP_QUANT_ESC_PER_BLOCK;
    return m;
  }
  for (; i + 64 <= len; i += 64) {
    avx512Prefetch(pf + i, streaming);
    avx512Prefetch(pf + i + 32, streaming);
    if (!streaming) m = avx512Max32(avx512Max32(m, nx + i), nx + i + 32);
    avx512Q32_t q0 = avx512Round32(x + i, dtype, vinv, NULL);
    avx512Q32_t q1 = avx512Round32(x + i + 32, dtype, vinv, NULL);
    n += avx512NonZero32(q0) + avx512NonZero32(q1);
    __m512i n0 = avx512Int4x32(q0, dtype);
    __m512i n1 = avx512Int4x32(q1, dtype);
    _mm256_storeu_si256((__m256i*)(d + i / 2),
                        _mm512_castsi512_si256(_mm512_permutex2var_epi8(n0, avx512IdxLowBytes(), n1)));
  }
  if (i < len) { /* a block of 32 */
    avx512Prefetch(pf + i, streaming);
    if (!streaming) m = avx512Max32(m, nx + i);
    avx512Q32_t q0 = avx512Round32(x + i, dtype, vinv, NULL);
    n += avx512NonZero32(q0);
    __m512i n0 = avx512Int4x32(q0, dtype);
    _mm_storeu_si128((__m128i*)(d + i / 2),
                     _mm512_castsi512_si128(_mm512_permutexvar_epi8(avx512IdxLowBytes(), n0)));
  }
  *hint = n <= ZPP_QUANT_ESC_PER_BLOCK;
  return m;
}

/* What encoding a group needs from its maxima. */
typedef struct {
  float inv[16];     /* Q / (a * p) per block */
  uint32_t amax[16]; /* max |x| as fp32 bits */
  unsigned special;  /* blocks that are zero, non-finite or below 2^-64 */
} avx512Group_t;

/* Scales and reciprocals of up to sixteen blocks from their max |x| as fp32
 * bits (lane k: block k), one vector division each, the same IEEE
 * operations as zppQuantBlockSetup. Stores the g scales. */
ZPP_AVX512_INLINE void avx512GroupSetupBits(__m512i abits, int Q, size_t g, uint8_t* scales,
                                            avx512Group_t* gp) {
  const __m512 vq = _mm512_set1_ps((float)Q);
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

/* The same from the max vectors of sixteen 16-bit blocks (avx512Max32). */
ZPP_AVX512_INLINE void avx512GroupSetup(const __m512i m[16], zppDataType_t dtype, int Q, size_t g,
                                        uint8_t* scales, avx512Group_t* gp) {
  __m512i v = avx512TransposeMax16(m, 1);
  __m512i abits = dtype == zppFloat16 ? _mm512_castps_si512(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)))
                                      : _mm512_slli_epi32(v, 16);
  avx512GroupSetupBits(abits, Q, g, scales, gp);
}

/* The max vectors of the n blocks at x (zero beyond them). */
ZPP_AVX512_INLINE void avx512GroupMax(const uint16_t* x, size_t n, size_t bs, __m512i m[16]) {
  for (size_t k = 0; k < 16; k++)
    m[k] = k < n ? avx512BlockMax(x + k * bs, bs) : _mm512_setzero_si512();
}

/* Pass 2 over the g blocks at x (the first one is block b0 of the segment),
 * prefetching the blocks at pf; unless streaming, also pass 1 over the nn
 * blocks at nx, whose max vectors go to mn. Returns 1 when a block of the
 * group may hold an escape (the hint, quant_impl.h), else 0. */
ZPP_AVX512_INLINE int avx512EncodeGroup(const uint16_t* x, size_t g, size_t b0, const avx512Group_t* gp,
                                        zppDataType_t dtype, int bits, size_t bs, uint8_t* data,
                                        const uint16_t* nx, size_t nn, const uint16_t* pf,
                                        int streaming, __m512i mn[16]) {
  const int Q = zppQuantQmax(bits);
  int may = 0, hint = 0;
  if (gp->special == 0 && (streaming || nn == g)) {
    /* the usual case, without the per-block checks below */
    uint8_t* d = data + zppQuantByteOf(b0 * bs, bits);
    for (size_t k = 0; k < g; k++) {
      mn[k] =
          avx512EncodeBlock(x + k * bs, dtype, bs, bits, gp->inv[k], d + zppQuantByteOf(k * bs, bits),
                            nx + k * bs, pf + k * bs, streaming, &hint);
      may |= hint;
    }
    for (size_t k = g; k < 16; k++) mn[k] = _mm512_setzero_si512();
    return may;
  }
  for (size_t k = 0; k < 16; k++) {
    /* a block of the later group, or this one again when there is none */
    const uint16_t* nk = k < nn ? nx + k * bs : x + k * bs;
    if (k >= g) {
      mn[k] = k < nn && !streaming ? avx512BlockMax(nk, bs) : _mm512_setzero_si512();
      continue;
    }
    size_t base = (b0 + k) * bs;
    uint8_t* d = data + zppQuantByteOf(base, bits);
    if ((gp->special >> k) & 1u) {
      /* zero, non-finite or max |x| < 2^-64: rare, the scalar path */
      zppQuantBlockParams_t bp = zppQuantBlockSetup(gp->amax[k], Q);
      if (bp.kind != ZPP_QBLOCK_NORMAL)
        memset(d, 0, zppQuantDataBytes(bs, bits));
      else
        zppQuantEncodeDtypeRef(x + k * bs, dtype, bs, &bp, bits, data, base);
      may |= bp.kind != ZPP_QBLOCK_ZERO; /* the escape pass scans these */
      mn[k] = streaming ? _mm512_setzero_si512() : avx512BlockMax(nk, bs);
    } else {
      mn[k] = avx512EncodeBlock(x + k * bs, dtype, bs, bits, gp->inv[k], d, nk, pf + k * bs, streaming,
                                &hint);
      may |= hint;
    }
    if (k >= nn) mn[k] = _mm512_setzero_si512();
  }
  return may;
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
                                       int block, uint8_t* packed, uint8_t* hints) {
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  const size_t bs = (size_t)block, full = count / bs;
  size_t group = 4096 / bs;
  group = group < 1 ? 1 : group > 16 ? 16 : group;
  const int Q = zppQuantQmax(bits);
  __m512i m[2][16];    /* cache: max vectors of groups i+1 and i+2 */
  avx512Group_t gp[2]; /* cache: parameters of groups i and i+1 */
  if (hints != NULL) memset(hints, 0, zppQuantNumGroups(count));
  if (count > ((size_t)4 << 20) || (dtype == zppBfloat16 && bits == 8)) {
    for (size_t g0 = 0; g0 < full; g0 += group) {
      size_t g = avx512GroupN(full, group, g0);
      const uint16_t* x = in + g0 * bs;
      avx512GroupMax(x, g, bs, m[0]);
      avx512GroupSetup(m[0], dtype, Q, g, scales + 4 * g0, &gp[0]);
      /* the next group when it is a full one, else this one again */
      const uint16_t* pf = g0 + 2 * group <= full ? x + group * bs : x;
      int may = avx512EncodeGroup(x, g, g0, &gp[0], dtype, bits, bs, data, x, 0, pf, 1, m[0]);
      if (hints != NULL) hints[g0 * bs / ZPP_QUANT_ESC_GROUP] |= (uint8_t)may;
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
      int may = avx512EncodeGroup(x, g, g0, &gp[i & 1], dtype, bits, bs, data, in + g2 * bs,
                                  g2 < full ? avx512GroupN(full, group, g2) : 0, pf, 0, m[i & 1]);
      if (hints != NULL) hints[g0 * bs / ZPP_QUANT_ESC_GROUP] |= (uint8_t)may;
    }
  }
  size_t lo = full * bs;
  if (lo < count) {
    zppQuantBlockRef(in + lo, dtype, count - lo, bits, scales, full, data, lo);
    if (hints != NULL) hints[lo / ZPP_QUANT_ESC_GROUP] = 1; /* not counted: the pass scans it */
  }
}

/* The block size as a constant for the small blocks, whose loops then unroll
 * into straight code: per-block overhead is what limits them. */
ZPP_AVX512_INLINE void avx512QuantizeB(const uint16_t* in, zppDataType_t dtype, size_t count, int bits,
                                       int block, uint8_t* packed, uint8_t* hints) {
  switch (block) {
    case 32: avx512QuantizeT(in, dtype, count, bits, 32, packed, hints); break;
    case 64: avx512QuantizeT(in, dtype, count, bits, 64, packed, hints); break;
    case 128: avx512QuantizeT(in, dtype, count, bits, 128, packed, hints); break;
    case 256: avx512QuantizeT(in, dtype, count, bits, 256, packed, hints); break;
    default: avx512QuantizeT(in, dtype, count, bits, block, packed, hints); break;
  }
}

/* The bit width as a constant: CALL(DT, BITS). */
#define AVX512_BITS(dt, bits, CALL) \
  do {                              \
    if ((bits) == 8)                \
      CALL(dt, 8);                  \
    else if ((bits) == 4)           \
      CALL(dt, 4);                  \
    else                            \
      CALL(dt, 2);                  \
  } while (0)

static void avx512Quantize(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                           uint8_t* packed, uint8_t* hints) {
  const uint16_t* h = (const uint16_t*)in;
  if (dtype == zppFloat32 || (bits == 8 && count > ((size_t)16 << 20))) {
    /* fp32; and int8 beyond 32 MiB of input, from DRAM: there the AVX2 loop
     * measured about 10% faster than the streaming schedule (16.3 against
     * 14.7 GB/s at 64 MiB; equal at 32 MiB, slower below), both above a
     * memcpy's speed. */
    zppQuantImplAvx2.quantize(in, dtype, count, bits, block, packed, hints);
  } else {
#define AVX512_QUANTIZE(DT, BITS) avx512QuantizeB(h, DT, count, BITS, block, packed, hints)
    if (dtype == zppFloat16)
      AVX512_BITS(zppFloat16, bits, AVX512_QUANTIZE);
    else
      AVX512_BITS(zppBfloat16, bits, AVX512_QUANTIZE);
#undef AVX512_QUANTIZE
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

/* q * s for the 16 nibbles (q = n for n < 8, n - 16 otherwise), or for
 * int2 the four fields (q = 0, 1, -2, -1) four times over: its lookups
 * read 4 or 5 index bits, of which the ones above the field's two belong
 * to the next field. For the first input of a sum, 0 + q * s: the spec's
 * sum starts from +0, which turns a -0 product into +0; adding it here
 * once per block is the same operation as adding it per element. */
ZPP_AVX512_INLINE __m512 avx512TableF32(float s, int first, int bits) {
  __m512 q = bits == 2 ? _mm512_setr_ps(0, 1, -2, -1, 0, 1, -2, -1, 0, 1, -2, -1, 0, 1, -2, -1)
                       : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
  __m512 y = _mm512_mul_ps(q, _mm512_set1_ps(s));
  return first ? _mm512_add_ps(_mm512_setzero_ps(), y) : y;
}

/* A block's 16 possible outputs (q * scale for nibble 0..15, q = n for n < 8
 * and n - 16 otherwise, rounded to dtype: the same operations as decoding
 * each element), in words 0..15 and again in 16..31, so that vpermw, which
 * reads 5 index bits, can ignore bit 4. */
ZPP_AVX512_INLINE __m512i avx512Table(float s, zppDataType_t dtype, int bits) {
  __m512 y = avx512TableF32(s, 0, bits);
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

/* 32 int2 elements at data + i/4 (i a multiple of 32) through the table
 * into out + i: the 64 data bits in every qword, vpmultishiftqb puts field
 * k (bits 2k..2k+1) in the low bits of word k, vpermw looks them up. */
ZPP_AVX512_INLINE void avx512DecodeInt2x32(const uint8_t* data, size_t i, __m512i tab, uint16_t* out) {
  const __m512i ctrl = _mm512_setr_epi64(
      0x0006000400020000LL, 0x000e000c000a0008LL, 0x0016001400120010LL, 0x001e001c001a0018LL,
      0x0026002400220020LL, 0x002e002c002a0028LL, 0x0036003400320030LL, 0x003e003c003a0038LL);
  long long d;
  memcpy(&d, data + i / 4, 8);
  __m512i v = _mm512_multishift_epi64_epi8(ctrl, _mm512_set1_epi64(d));
  _mm512_storeu_si512(out + i, _mm512_permutexvar_epi16(v, tab));
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
      __m512i tab = avx512Table(s, dtype, 4);
      for (; i + 32 <= hi; i += 32) avx512DecodeInt4x32(data, i, tab, out);
    } else if (bits == 2) {
      __m512i tab = avx512Table(s, dtype, 2);
      for (; i + 32 <= hi; i += 32) avx512DecodeInt2x32(data, i, tab, out);
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
#define AVX512_DEQUANTIZE(DT, BITS) avx512DequantizeT(packed, count, BITS, block, h, DT)
  if (dtype == zppFloat16) {
    AVX512_BITS(zppFloat16, bits, AVX512_DEQUANTIZE);
  } else if (dtype == zppBfloat16) {
    AVX512_BITS(zppBfloat16, bits, AVX512_DEQUANTIZE);
  } else {
    zppQuantImplAvx2.dequantize(packed, count, bits, block, out, dtype);
  }
#undef AVX512_DEQUANTIZE
}

/* ---- reductions of int4 segments ------------------------------------------------- */

/* qgZ's steps between and after its hops sum n int4 segments in fp32. A
 * segment's 32 elements at i (i a multiple of 32: never across a block)
 * are 16 bytes; vpmovzxbd puts byte j in dword j, vpermps looks the low
 * nibble of each dword up in the block's 16 possible values q * scale
 * (a 16-float table: exactly the products the arithmetic path computes),
 * and after a shift the high nibble. That gives the even elements in one
 * vector and the odd ones in another, and the sums stay in that order: an
 * int4 output pairs exactly those (even in the low nibble), int8 and the
 * dtype outputs interleave them with one shuffle. Per 32 elements and input
 * that is a load, a shift, two lookups and two adds, where the AVX2 decode
 * needs unpacking, conversion and multiplies, and the sums of a group stay
 * in registers across all inputs instead of crossing an L1 buffer each
 * time.
 *
 * The buffer of sums holds each 32-element group as its 16 even elements,
 * then its 16 odd ones. */

#define AVX512_SUM_BATCH 16 /* inputs whose tables sit in registers and L1 at once */

/* Sums over inputs [k0, k0 + kn) of the groups [c0, c1) (multiples of 32)
 * into buf (group g at buf + 32 g, even then odd elements). k0 == 0 starts
 * the sums, else they continue from buf. */
ZPP_AVX512_INLINE void avx512SumGroupsBatch(const uint8_t* packed, size_t stride, int k0, int kn,
                                            size_t count, int block, size_t c0, size_t c1, float* buf) {
  const int lg = zppQuantLog2(block);
  const size_t off = zppQuantDataOffset(count, block);
  __m512 tab[AVX512_SUM_BATCH];
  const uint8_t* data[AVX512_SUM_BATCH];
  for (int k = 0; k < kn; k++) data[k] = packed + (size_t)(k0 + k) * stride + off;
  for (size_t i = c0; i < c1;) {
    size_t b = i >> lg, end = (b + 1) << lg;
    if (end > c1) end = c1;
    for (int k = 0; k < kn; k++) {
      const uint8_t* seg = packed + (size_t)(k0 + k) * stride;
      tab[k] = avx512TableF32(zppQuantLoadScale(zppQuantScalesPtr(seg), b), k0 + k == 0, 4);
    }
    for (; i < end; i += 32) {
      float* dst = buf + (i - c0);
      __m512 e, o;
      int k = 0;
      if (k0 == 0) {
        __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(data[0] + i / 2)));
        e = _mm512_permutexvar_ps(d, tab[0]);
        o = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), tab[0]);
        k = 1;
      } else {
        e = _mm512_loadu_ps(dst);
        o = _mm512_loadu_ps(dst + 16);
      }
      for (; k < kn; k++) {
        __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(data[k] + i / 2)));
        e = _mm512_add_ps(e, _mm512_permutexvar_ps(d, tab[k]));
        o = _mm512_add_ps(o, _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), tab[k]));
      }
      _mm512_storeu_ps(dst, e);
      _mm512_storeu_ps(dst + 16, o);
    }
  }
}

/* The spec's sums of elements [c0, c1) of n int4 segments into buf: the
 * whole groups by table, a last partial group (only at the segment's end)
 * element by element, spread into the group layout with zeros after it. */
static void avx512SumInt4(const uint8_t* packed, size_t stride, int n, size_t count, int block,
                          size_t c0, size_t c1, float* buf) {
  size_t whole = c0 + ((c1 - c0) & ~(size_t)31);
  for (int k0 = 0; k0 < n; k0 += AVX512_SUM_BATCH) {
    int kn = n - k0 < AVX512_SUM_BATCH ? n - k0 : AVX512_SUM_BATCH;
    if (block == 64) /* qgZ's default: the block walk with a constant */
      avx512SumGroupsBatch(packed, stride, k0, kn, count, 64, c0, whole, buf);
    else
      avx512SumGroupsBatch(packed, stride, k0, kn, count, block, c0, whole, buf);
  }
  if (whole == c1) return;
  float tail[32] = {0};
  for (int k = 0; k < n; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    float s = zppQuantLoadScale(zppQuantScalesPtr(seg), whole / (size_t)block);
    zppQuantDecodeSpanRef(seg + zppQuantDataOffset(count, block), 4, whole, c1, s, tail,
                          k == 0 ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD);
  }
  float* g = buf + (whole - c0);
  for (size_t j = 0; j < 16; j++) {
    g[j] = tail[2 * j];
    g[16 + j] = tail[2 * j + 1];
  }
}

/* The int2 sums keep element order (an int2 output packs four neighbours
 * into a byte, and the dtype outputs need no shuffle): per 32 elements and
 * input, the 64 data bits go to every qword, two vpmultishiftqb put fields
 * 0..15 and 16..31 in the low bits of dwords 0..15, two vpermps look them
 * up in the block's products (avx512TableF32: period 4, the index bits
 * above a field's two being the next field's), two adds. Sums over inputs
 * [k0, k0 + kn) of the groups [c0, c1) into buf (element order); k0 == 0
 * starts them, else they continue from buf. */
ZPP_AVX512_INLINE void avx512SumInt2Batch(const uint8_t* packed, size_t stride, int k0, int kn,
                                          size_t count, int block, size_t c0, size_t c1, float* buf) {
  const __m512i ctrlLo = _mm512_setr_epi64(
      0x0000000200000000LL, 0x0000000600000004LL, 0x0000000a00000008LL, 0x0000000e0000000cLL,
      0x0000001200000010LL, 0x0000001600000014LL, 0x0000001a00000018LL, 0x0000001e0000001cLL);
  const __m512i ctrlHi = _mm512_add_epi64(ctrlLo, _mm512_set1_epi64(0x0000002000000020LL));
  const int lg = zppQuantLog2(block);
  const size_t off = zppQuantDataOffset(count, block);
  __m512 tab[AVX512_SUM_BATCH];
  const uint8_t* data[AVX512_SUM_BATCH];
  for (int k = 0; k < kn; k++) data[k] = packed + (size_t)(k0 + k) * stride + off;
  for (size_t i = c0; i < c1;) {
    size_t b = i >> lg, end = (b + 1) << lg;
    if (end > c1) end = c1;
    for (int k = 0; k < kn; k++) {
      const uint8_t* seg = packed + (size_t)(k0 + k) * stride;
      tab[k] = avx512TableF32(zppQuantLoadScale(zppQuantScalesPtr(seg), b), k0 + k == 0, 2);
    }
    for (; i < end; i += 32) {
      float* dst = buf + (i - c0);
      __m512 lo = _mm512_setzero_ps(), hi = lo; /* set by the first input below */
      int k = 0;
      if (k0 != 0) {
        lo = _mm512_loadu_ps(dst);
        hi = _mm512_loadu_ps(dst + 16);
      }
      for (; k < kn; k++) {
        long long d;
        memcpy(&d, data[k] + i / 4, 8);
        __m512i w = _mm512_set1_epi64(d);
        __m512 ylo = _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(ctrlLo, w), tab[k]);
        __m512 yhi = _mm512_permutexvar_ps(_mm512_multishift_epi64_epi8(ctrlHi, w), tab[k]);
        if (k0 == 0 && k == 0) { /* the table already holds 0 + q * s */
          lo = ylo;
          hi = yhi;
        } else {
          lo = _mm512_add_ps(lo, ylo);
          hi = _mm512_add_ps(hi, yhi);
        }
      }
      _mm512_storeu_ps(dst, lo);
      _mm512_storeu_ps(dst + 16, hi);
    }
  }
}

/* The spec's sums of elements [c0, c1) of n int2 segments into buf, in
 * element order: whole groups of 32 by table, a last partial group (only at
 * the segment's end, inside one block) element by element. */
static void avx512SumInt2(const uint8_t* packed, size_t stride, int n, size_t count, int block,
                          size_t c0, size_t c1, float* buf) {
  size_t whole = c0 + ((c1 - c0) & ~(size_t)31);
  for (int k0 = 0; k0 < n; k0 += AVX512_SUM_BATCH) {
    int kn = n - k0 < AVX512_SUM_BATCH ? n - k0 : AVX512_SUM_BATCH;
    avx512SumInt2Batch(packed, stride, k0, kn, count, block, c0, whole, buf);
  }
  for (int k = 0; k < n && whole < c1; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    float s = zppQuantLoadScale(zppQuantScalesPtr(seg), whole / (size_t)block);
    zppQuantDecodeSpanRef(seg + zppQuantDataOffset(count, block), 2, whole, c1, s, buf + (whole - c0),
                          k == 0 ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD);
  }
}

/* len elements of the group layout at buf back into element order. */
static void avx512Interleave(const float* buf, size_t len, float* out) {
  for (size_t i = 0; i < len; i++) out[i] = buf[(i & ~(size_t)31) + ((i & 31) >> 1) + 16 * (i & 1)];
}

/* The block max vector (magnitude bits, unsigned) of len elements at buf. */
ZPP_AVX512_INLINE __m512i avx512SumBlockMax(const float* buf, size_t len) {
  const __m512i mag = _mm512_set1_epi32(0x7fffffff);
  __m512i m0 = _mm512_setzero_si512(), m1 = m0;
  for (size_t i = 0; i < len; i += 32) {
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(buf + i), mag));
    m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(buf + i + 16), mag));
  }
  return _mm512_max_epu32(m0, m1);
}

/* How a buffer of sums holds each 32 elements, named by the quantize path
 * whose dword order it matches: the int4 sums' group layout (16 even, then
 * 16 odd elements: bf16's) or element order (the int2 sums: fp16's). */
#define AVX512_SUMS_GROUPED zppBfloat16
#define AVX512_SUMS_IN_ORDER zppFloat16

/* The same as avx512Round32 for 32 fp32 sums at x (layout-blind: lane k
 * of a and b are the sums at x + k and x + 16 + k). */
ZPP_AVX512_INLINE avx512Q32_t avx512RoundSums32(const float* x, __m512 vinv, int* cnt) {
  __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  __m512 ta = _mm512_mul_ps(a, vinv), tb = _mm512_mul_ps(b, vinv);
  if (cnt != NULL) avx512Int2Counts32(a, b, ta, tb, cnt);
  avx512Q32_t q;
  q.a = _mm512_cvtps_epi32(ta);
  q.b = _mm512_cvtps_epi32(tb);
  return q;
}

/* One block of sums (len a multiple of 32, in the layout `order`) encoded
 * into d, its first data byte: x * inv rounded by vcvtps2dq, as
 * avx512EncodeBlock. Returns, for int2, the block's escape hint (from its
 * counts, quant_impl.h), else 1. */
ZPP_AVX512_INLINE int avx512SumEncodeBlock(const float* buf, size_t len, int bits, float inv,
                                           uint8_t* d, zppDataType_t order) {
  const __m512 vinv = _mm512_set1_ps(inv);
  size_t i = 0;
  avx512Q32_t q[2];
  if (bits == 8) {
    for (; i < len; i += 32) {
      q[0].a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(buf + i), vinv));
      q[0].b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(buf + i + 16), vinv));
      _mm256_storeu_si256((__m256i*)(d + i), avx512Int8x32(q[0], order));
    }
    return 1;
  }
  if (bits == 2) {
    int cnt[2] = {0, 0};
    for (; i < len; i += 32) {
      q[0] = avx512RoundSums32(buf + i, vinv, cnt);
      if (i + 64 <= len) {
        q[1] = avx512RoundSums32(buf + i + 32, vinv, cnt);
        _mm_storeu_si128((__m128i*)(d + i / 4),
                         avx512Crumbs64(avx512Int8x32(q[0], order), avx512Int8x32(q[1], order)));
        i += 32;
      } else { /* a block of 32 */
        _mm_storel_epi64((__m128i*)(d + i / 4),
                         avx512Crumbs64(avx512Int8x32(q[0], order), _mm256_setzero_si256()));
      }
    }
    return zppQuantEscHasCandidate(cnt[0], cnt[1]);
  }
  for (; i + 64 <= len; i += 64) {
    for (int h = 0; h < 2; h++) {
      q[h].a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(buf + i + 32 * h), vinv));
      q[h].b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(buf + i + 32 * h + 16), vinv));
    }
    __m512i n0 = avx512Int4x32(q[0], order), n1 = avx512Int4x32(q[1], order);
    _mm256_storeu_si256((__m256i*)(d + i / 2),
                        _mm512_castsi512_si256(_mm512_permutex2var_epi8(n0, avx512IdxLowBytes(), n1)));
  }
  if (i < len) { /* a block of 32 */
    q[0].a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(buf + i), vinv));
    q[0].b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(buf + i + 16), vinv));
    _mm_storeu_si128((__m128i*)(d + i / 2), _mm512_castsi512_si128(_mm512_permutexvar_epi8(
                                                avx512IdxLowBytes(), avx512Int4x32(q[0], order))));
  }
  return 1;
}

/* Quantizes the sums of elements [c0, c1) (buf in the layout `order`; c0 a
 * multiple of the output block) into blocks c0 / block on: whole blocks
 * sixteen at a time (their maxima through the transpose network, one
 * division for the scales and one for the reciprocals), blocks with a zero,
 * non-finite or tiny max and a short last block through the reference.
 * hints (int2 only, else NULL): each block's escape hint ORed into its
 * group's byte. */
ZPP_AVX512_INLINE void avx512RequantSums(const float* buf, size_t c0, size_t c1, int bits, int block,
                                         uint8_t* scales, uint8_t* data, zppDataType_t order,
                                         uint8_t* hints) {
  const size_t bs = (size_t)block, full = (c1 - c0) / bs, b0 = c0 / bs;
  const int Q = zppQuantQmax(bits);
  float nat[ZPP_QUANT_MAX_BLOCK];
  for (size_t g0 = 0; g0 < full; g0 += 16) {
    size_t g = full - g0 < 16 ? full - g0 : 16;
    __m512i m[16];
    for (size_t k = 0; k < 16; k++)
      m[k] = k < g ? avx512SumBlockMax(buf + (g0 + k) * bs, bs) : _mm512_setzero_si512();
    avx512Group_t gp;
    avx512GroupSetupBits(avx512TransposeMax16(m, 0), Q, g, scales + 4 * (b0 + g0), &gp);
    for (size_t k = 0; k < g; k++) {
      size_t b = b0 + g0 + k, base = b * bs;
      const float* x = buf + (g0 + k) * bs;
      int may;
      if ((gp.special >> k) & 1u) {
        if (order == AVX512_SUMS_GROUPED) avx512Interleave(x, bs, nat);
        zppQuantBlockRef(order == AVX512_SUMS_GROUPED ? nat : x, zppFloat32, bs, bits, scales, b, data,
                         base);
        may = gp.amax[k] != 0; /* the escape pass scans all but zero blocks */
      } else {
        may = avx512SumEncodeBlock(x, bs, bits, gp.inv[k], data + zppQuantByteOf(base, bits), order);
      }
      if (hints != NULL) hints[base / ZPP_QUANT_ESC_GROUP] |= (uint8_t)may;
    }
  }
  size_t lo = c0 + full * bs;
  if (lo < c1) {
    const float* x = buf + (lo - c0);
    if (order == AVX512_SUMS_GROUPED) {
      avx512Interleave(x, c1 - lo, nat);
      x = nat;
    }
    zppQuantBlockRef(x, zppFloat32, c1 - lo, bits, scales, lo / bs, data, lo);
    if (hints != NULL) hints[lo / ZPP_QUANT_ESC_GROUP] = 1; /* not counted: the pass scans it */
  }
}

static void avx512ReduceRequant(const uint8_t* packed, size_t stride, int n, size_t count, int bits_in,
                                int block_in, int bits_out, int block_out, uint8_t* packed_out,
                                uint8_t* hints) {
  if (bits_in == 8) {
    zppQuantImplAvx2.reduceRequant(packed, stride, n, count, bits_in, block_in, bits_out, block_out,
                                   packed_out, hints);
    return;
  }
  /* Hints for int2 only (quant_impl.h): the others keep the full scan. */
  uint8_t* h = bits_out == 2 ? hints : NULL;
  if (hints != NULL) memset(hints, h == NULL, zppQuantNumGroups(count));
  /* Chunks of whole output blocks: the sums of one stay in L1 between the
   * two passes of the requantization. */
  uint8_t* scales = packed_out + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed_out + zppQuantDataOffset(count, block_out);
  const size_t chunk = zppQuantReduceChunk(block_out);
  float buf[ZPP_QUANT_REDUCE_BUF];
  for (size_t c0 = 0; c0 < count; c0 += chunk) {
    size_t c1 = count - c0 < chunk ? count : c0 + chunk;
    const zppDataType_t order = bits_in == 2 ? AVX512_SUMS_IN_ORDER : AVX512_SUMS_GROUPED;
    if (bits_in == 2)
      avx512SumInt2(packed, stride, n, count, block_in, c0, c1, buf);
    else
      avx512SumInt4(packed, stride, n, count, block_in, c0, c1, buf);
    if (bits_out == 8)
      avx512RequantSums(buf, c0, c1, 8, block_out, scales, data, order, NULL);
    else if (bits_out == 2)
      avx512RequantSums(buf, c0, c1, 2, block_out, scales, data, order, h);
    else if (block_out == 64)
      avx512RequantSums(buf, c0, c1, 4, 64, scales, data, order, NULL);
    else
      avx512RequantSums(buf, c0, c1, 4, block_out, scales, data, order, NULL);
  }
}

/* Sums of a group divided as zppDequantizeSum does: not at all for a
 * divisor of 1 (x / 1 is x), by the reciprocal for a power of two (exact,
 * so the product is the same correctly rounded quotient), else dividing. */
typedef enum { AVX512_DIV_NONE, AVX512_DIV_RECIP, AVX512_DIV_TRUE } avx512DivKind_t;

ZPP_AVX512_INLINE __m512 avx512Divide(__m512 x, avx512DivKind_t kind, __m512 v) {
  if (kind == AVX512_DIV_NONE) return x;
  return kind == AVX512_DIV_RECIP ? _mm512_mul_ps(x, v) : _mm512_div_ps(x, v);
}

/* fp32 -> bf16 with zppFloatToBf16's NaN case, the result in the high word. */
ZPP_AVX512_INLINE __m512i avx512Bf16RoundHighNan(__m512 y) {
  __m512i u = _mm512_castps_si512(y);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(avx512Bf16RoundHigh(y), nan, u, _mm512_set1_epi32(0x00400000));
}

/* A group's quotients (even elements e, odd o) stored in element order as
 * dtype at out + i. */
ZPP_AVX512_INLINE void avx512StoreGroup(__m512 e, __m512 o, void* out, zppDataType_t dtype, size_t i) {
  if (dtype == zppFloat32) {
    float* f = (float*)out + i;
    _mm512_storeu_ps(
        f, _mm512_permutex2var_ps(
               e, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), o));
    _mm512_storeu_ps(
        f + 16,
        _mm512_permutex2var_ps(
            e, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), o));
    return;
  }
  __m512i a, b, idx;
  if (dtype == zppFloat16) {
    a = _mm512_castsi256_si512(_mm512_cvtps_ph(e, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    b = _mm512_castsi256_si512(_mm512_cvtps_ph(o, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    idx = _mm512_set_epi32(0x002f000f, 0x002e000e, 0x002d000d, 0x002c000c, 0x002b000b, 0x002a000a,
                           0x00290009, 0x00280008, 0x00270007, 0x00260006, 0x00250005, 0x00240004,
                           0x00230003, 0x00220002, 0x00210001, 0x00200000); /* words j, 32 + j */
  } else {
    a = avx512Bf16RoundHighNan(e);
    b = avx512Bf16RoundHighNan(o);
    idx = _mm512_set_epi32(0x003f001f, 0x003d001d, 0x003b001b, 0x00390019, 0x00370017, 0x00350015,
                           0x00330013, 0x00310011, 0x002f000f, 0x002d000d, 0x002b000b, 0x00290009,
                           0x00270007, 0x00250005, 0x00230003, 0x00210001); /* high words */
  }
  _mm512_storeu_si512((uint16_t*)out + i, _mm512_permutex2var_epi16(a, idx, b));
}

/* 32 quotients in element order (a: the first 16) stored as dtype at out + i. */
ZPP_AVX512_INLINE void avx512StoreInOrder(__m512 a, __m512 b, void* out, zppDataType_t dtype,
                                          size_t i) {
  if (dtype == zppFloat32) {
    _mm512_storeu_ps((float*)out + i, a);
    _mm512_storeu_ps((float*)out + i + 16, b);
  } else if (dtype == zppFloat16) {
    uint16_t* h = (uint16_t*)out + i;
    _mm256_storeu_si256((__m256i*)h, _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_si256((__m256i*)(h + 16),
                        _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else {
    /* the high words of both, in order: odd word indices */
    __m512i idx = _mm512_add_epi16(avx512IdxLowWords(), _mm512_set1_epi16(1));
    _mm512_storeu_si512((uint16_t*)out + i, _mm512_permutex2var_epi16(avx512Bf16RoundHighNan(a), idx,
                                                                      avx512Bf16RoundHighNan(b)));
  }
}

ZPP_AVX512_INLINE void avx512SumT(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                                  int block, float divisor, void* out, zppDataType_t dtype,
                                  avx512DivKind_t kind) {
  const __m512 v = _mm512_set1_ps(kind == AVX512_DIV_RECIP ? 1.0f / divisor : divisor);
  float buf[ZPP_QUANT_CHUNK];
  for (size_t c0 = 0; c0 < count; c0 += ZPP_QUANT_CHUNK) {
    size_t c1 = count - c0 < ZPP_QUANT_CHUNK ? count : c0 + ZPP_QUANT_CHUNK;
    if (bits == 2)
      avx512SumInt2(packed, stride, n, count, block, c0, c1, buf);
    else
      avx512SumInt4(packed, stride, n, count, block, c0, c1, buf);
    size_t i = c0;
    for (; i + 32 <= c1; i += 32) {
      const float* g = buf + (i - c0);
      __m512 a = avx512Divide(_mm512_loadu_ps(g), kind, v);
      __m512 b = avx512Divide(_mm512_loadu_ps(g + 16), kind, v);
      if (bits == 2)
        avx512StoreInOrder(a, b, out, dtype, i);
      else
        avx512StoreGroup(a, b, out, dtype, i);
    }
    if (i < c1) {
      float nat[32];
      const float* x = buf + (i - c0);
      if (bits != 2) {
        avx512Interleave(x, c1 - i, nat);
        x = nat;
      }
      for (size_t j = 0; j < c1 - i; j++)
        zppQuantStoreOne(out, dtype, i + j, kind == AVX512_DIV_NONE ? x[j] : x[j] / divisor);
    }
  }
}

static void avx512Sum(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                      float divisor, void* out, zppDataType_t dtype) {
  if (bits == 8) {
    zppQuantImplAvx2.sum(packed, stride, n, count, bits, block, divisor, out, dtype);
    return;
  }
  uint32_t db = zppF32Bits(divisor);
  avx512DivKind_t kind = divisor == 1.0f                                      ? AVX512_DIV_NONE
                         : (db & 0x007fffffu) == 0 && (db & 0x7f800000u) != 0 ? AVX512_DIV_RECIP
                                                                              : AVX512_DIV_TRUE;
  /* dtype and divisor kind as constants: one loop each */
#define ZPP_AVX512_SUM_DT(dt, BITS)                                                          \
  do {                                                                                       \
    if (kind == AVX512_DIV_NONE)                                                             \
      avx512SumT(packed, stride, n, count, BITS, block, divisor, out, dt, AVX512_DIV_NONE);  \
    else if (kind == AVX512_DIV_RECIP)                                                       \
      avx512SumT(packed, stride, n, count, BITS, block, divisor, out, dt, AVX512_DIV_RECIP); \
    else                                                                                     \
      avx512SumT(packed, stride, n, count, BITS, block, divisor, out, dt, AVX512_DIV_TRUE);  \
  } while (0)
#define ZPP_AVX512_SUM_BITS(dt) \
  do {                          \
    if (bits == 2)              \
      ZPP_AVX512_SUM_DT(dt, 2); \
    else                        \
      ZPP_AVX512_SUM_DT(dt, 4); \
  } while (0)
  if (dtype == zppFloat32)
    ZPP_AVX512_SUM_BITS(zppFloat32);
  else if (dtype == zppFloat16)
    ZPP_AVX512_SUM_BITS(zppFloat16);
  else
    ZPP_AVX512_SUM_BITS(zppBfloat16);
#undef ZPP_AVX512_SUM_BITS
#undef ZPP_AVX512_SUM_DT
}

/* ---- the rest: the AVX2 functions ------------------------------------------------ */

static void avx512Accumulate(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                             int block, float* acc, int accumulate) {
  zppQuantImplAvx2.accumulate(packed, stride, n, count, bits, block, acc, accumulate);
}

static void avx512ToFloat(const void* in, zppDataType_t dtype, size_t n, float* out) {
  zppQuantImplAvx2.toFloat(in, dtype, n, out);
}

static void avx512FromFloat(const float* in, size_t n, void* out, zppDataType_t dtype) {
  zppQuantImplAvx2.fromFloat(in, n, out, dtype);
}

/* Memory-bound: AVX2's loops are as fast. */
static void avx512AddResidual(const void* in, zppDataType_t dtype, zppQuantResid_t e, size_t n,
                              float* x) {
  zppQuantImplAvx2.addResidual(in, dtype, e, n, x);
}

static void avx512NewResidual(const float* x, const float* y, zppQuantResid_t e, size_t n,
                              zppQuantResid_t out) {
  zppQuantImplAvx2.newResidual(x, y, e, n, out);
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
    .addResidual = avx512AddResidual,
    .newResidual = avx512NewResidual,
};
