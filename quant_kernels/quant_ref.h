/*
 * The per-block and per-element arithmetic of zpp_quant.h, written once.
 * quant_scalar.c is built from these; quant_avx2.c and quant_avx512.c use
 * them for block setup and for the few elements their vector loops leave
 * over, so that all follow the exact same sequence of fp32 operations and
 * agree bit for bit. Everything here is static inline: the vector files
 * compile this header with -mavx2 or -mavx512*, and a non-static inline copy
 * could leak such code into callers on CPUs without it.
 */
#ifndef ZPP_QUANT_REF_H_
#define ZPP_QUANT_REF_H_

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant_kernels/quant_impl.h"
#include "quant_kernels/zpp_half.h"

/* The shifter rounding below needs each fp32 operation rounded to fp32 (no
 * x87 excess precision). */
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "zpp's codecs need FLT_EVAL_METHOD == 0 (SSE math on x86)"
#endif

/* 2^-64 as fp32 bits: blocks whose max |x| is below it are scaled by 2^64
 * before the reciprocal, which would otherwise overflow. */
#define ZPP_QUANT_TINY_BITS (63u << 23)
#define ZPP_QUANT_NAN_BITS 0x7fc00000u
#define ZPP_QUANT_HALF_NAN 0x7e00u
#define ZPP_QUANT_BF16_NAN 0x7fc0u

typedef enum {
  ZPP_QBLOCK_NORMAL = 0,
  ZPP_QBLOCK_ZERO = 1,     /* max |x| == 0: scale 0, q 0 */
  ZPP_QBLOCK_NONFINITE = 2 /* an Inf or NaN: scale NaN, q 0 */
} zppQuantBlockKind_t;

typedef struct {
  zppQuantBlockKind_t kind;
  float scale; /* what goes on the wire */
  float inv;   /* Q / (a * p) */
  float p;     /* 1 or 2^64 */
} zppQuantBlockParams_t;

/* Block parameters from the largest |x| of the block given as fp32 bits
 * (|x| bits order like the values, NaN above Inf above every finite). */
ZPP_QUANT_INL zppQuantBlockParams_t zppQuantBlockSetup(uint32_t amaxBits, int Q) {
  zppQuantBlockParams_t bp;
  bp.inv = 0.0f;
  bp.p = 1.0f;
  if (amaxBits >= 0x7f800000u) {
    bp.kind = ZPP_QBLOCK_NONFINITE;
    bp.scale = zppF32FromBits(ZPP_QUANT_NAN_BITS);
    return bp;
  }
  if (amaxBits == 0) {
    bp.kind = ZPP_QBLOCK_ZERO;
    bp.scale = 0.0f;
    return bp;
  }
  float a = zppF32FromBits(amaxBits);
  float qf = (float)Q;
  bp.kind = ZPP_QBLOCK_NORMAL;
  bp.p = amaxBits < ZPP_QUANT_TINY_BITS ? 0x1p64f : 1.0f;
  bp.scale = a / qf;
  bp.inv = qf / (a * bp.p);
  return bp;
}

/* Round to nearest even for |t| < 2^22 through the 1.5 * 2^23 shifter: the
 * add rounds to an integer in the default rounding mode, the subtraction is
 * exact. The same result as cvtps2dq (AVX2) and __float2int_rn (CUDA). */
ZPP_QUANT_INL int zppQuantRne(float t) {
  float r = (t + 0x1.8p23f) - 0x1.8p23f; /* not folded: no -ffast-math here */
  return (int)r;
}

/* q for one element: clamp(rne((x * p) * inv), -Q, Q). */
ZPP_QUANT_INL int zppQuantEncodeOne(float x, const zppQuantBlockParams_t* bp, int Q) {
  int q = zppQuantRne((x * bp->p) * bp->inv);
  return q > Q ? Q : (q < -Q ? -Q : q);
}

/* Signed nibble: 0..15 -> -8..7. */
ZPP_QUANT_INL int zppQuantNibble(uint8_t byte, size_t i) {
  int v = (i & 1) ? (byte >> 4) : (byte & 0x0f);
  return (v ^ 8) - 8;
}

/* Signed 2-bit field: element 4i + j at bits 2j..2j+1 of byte i; 0..3 ->
 * 0, 1, -2, -1. */
ZPP_QUANT_INL int zppQuantCrumb(uint8_t byte, size_t i) {
  int v = (byte >> (2 * (i & 3))) & 3;
  return (v ^ 2) - 2;
}

/* q of element i of a segment's data. */
ZPP_QUANT_INL int zppQuantGetQ(const uint8_t* data, int bits, size_t i) {
  if (bits == 8) return (int8_t)data[i];
  if (bits == 2) return zppQuantCrumb(data[i >> 2], i);
  return zppQuantNibble(data[i >> 1], i);
}

/* How decoded values land in a destination. */
typedef enum {
  ZPP_DECODE_STORE = 0,    /* dst = y (a plain decode) */
  ZPP_DECODE_ZERO_ADD = 1, /* dst = 0 + y (first term of a sum: -0 becomes +0) */
  ZPP_DECODE_ADD = 2       /* dst = dst + y */
} zppQuantDecodeMode_t;

ZPP_QUANT_INL float zppQuantApply(float dst, float y, zppQuantDecodeMode_t mode) {
  if (mode == ZPP_DECODE_STORE) return y;
  if (mode == ZPP_DECODE_ZERO_ADD) return 0.0f + y;
  return dst + y;
}

/* Scalar decode of elements [lo, hi) of one block with scale s. */
ZPP_QUANT_INL void zppQuantDecodeSpanRef(const uint8_t* data, int bits, size_t lo, size_t hi, float s,
                                         float* dst, zppQuantDecodeMode_t mode) {
  for (size_t i = lo; i < hi; i++) {
    float y = (float)zppQuantGetQ(data, bits, i) * s;
    dst[i - lo] = zppQuantApply(dst[i - lo], y, mode);
  }
}

/* Scalar encode of elements [lo, hi) of a block (lo + base on a byte: even
 * for int4, a multiple of 4 for int2), relative indices into x, absolute
 * into data. Writes whole bytes; the fields of the last byte past hi are 0. */
ZPP_QUANT_INL void zppQuantEncodeSpanRef(const float* x, size_t lo, size_t hi,
                                         const zppQuantBlockParams_t* bp, int bits, uint8_t* data,
                                         size_t base) {
  int Q = zppQuantQmax(bits);
  if (bits == 8) {
    for (size_t i = lo; i < hi; i++) data[base + i] = (uint8_t)(int8_t)zppQuantEncodeOne(x[i], bp, Q);
    return;
  }
  if (bits == 2) {
    for (size_t i = lo; i < hi; i += 4) {
      unsigned byte = 0;
      for (size_t j = 0; j < 4 && i + j < hi; j++)
        byte |= ((unsigned)zppQuantEncodeOne(x[i + j], bp, Q) & 3u) << (2 * j);
      data[(base + i) >> 2] = (uint8_t)byte;
    }
    return;
  }
  for (size_t i = lo; i < hi; i += 2) {
    int q0 = zppQuantEncodeOne(x[i], bp, Q);
    int q1 = i + 1 < hi ? zppQuantEncodeOne(x[i + 1], bp, Q) : 0;
    data[(base + i) >> 1] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
  }
}

/* One element of dtype widened exactly, or rounded from fp32 into dtype: for
 * the few elements a vector loop leaves over. */
ZPP_QUANT_INL float zppQuantLoadOne(const void* in, zppDataType_t dtype, size_t i) {
  if (dtype == zppFloat32) return ((const float*)in)[i];
  uint16_t h = ((const uint16_t*)in)[i];
  return dtype == zppFloat16 ? zppHalfToFloat(h) : zppF32FromBits((uint32_t)h << 16);
}

ZPP_QUANT_INL void zppQuantStoreOne(void* out, zppDataType_t dtype, size_t i, float y) {
  if (dtype == zppFloat32)
    ((float*)out)[i] = y;
  else if (dtype == zppFloat16)
    ((uint16_t*)out)[i] = zppFloatToHalf(y);
  else
    ((uint16_t*)out)[i] = zppFloatToBf16(y);
}

/* Scalar encode of x[0..len) of dtype (a block, or the rest of one, starting
 * at element `base`, even), 32 elements at a time through fp32: the vector
 * codes' path for blocks with max |x| < 2^-64 and for short last blocks. */
ZPP_QUANT_INL void zppQuantEncodeDtypeRef(const void* x, zppDataType_t dtype, size_t len,
                                          const zppQuantBlockParams_t* bp, int bits, uint8_t* data,
                                          size_t base) {
  for (size_t i = 0; i < len; i += 32) {
    float tmp[32];
    size_t n = len - i < 32 ? len - i : 32;
    for (size_t k = 0; k < n; k++) tmp[k] = zppQuantLoadOne(x, dtype, i + k);
    zppQuantEncodeSpanRef(tmp, 0, n, bp, bits, data, base + i);
  }
}

/* Scale and data of one block x[0..len) of dtype (len <= ZPP_QUANT_MAX_BLOCK),
 * element by element: the reference's block step, and the vector codes'
 * path for a segment's last, short block. 16-bit input is widened once, into
 * a block of fp32 that both passes read (the scalar codecs' only copy). */
ZPP_QUANT_INL void zppQuantBlockRef(const void* x, zppDataType_t dtype, size_t len, int bits,
                                    uint8_t* scales, size_t b, uint8_t* data, size_t base) {
  float buf[ZPP_QUANT_MAX_BLOCK];
  const float* f = (const float*)x;
  if (dtype != zppFloat32) {
    for (size_t i = 0; i < len; i++) buf[i] = zppQuantLoadOne(x, dtype, i);
    f = buf;
  }
  uint32_t amax = 0;
  for (size_t i = 0; i < len; i++) {
    uint32_t m = zppF32Bits(f[i]) & 0x7fffffffu;
    if (m > amax) amax = m;
  }
  zppQuantBlockParams_t bp = zppQuantBlockSetup(amax, zppQuantQmax(bits));
  zppQuantStoreScale(scales, b, bp.scale);
  if (bp.kind != ZPP_QBLOCK_NORMAL) {
    memset(data + zppQuantByteOf(base, bits), 0, zppQuantDataBytes(len, bits));
    return;
  }
  zppQuantEncodeSpanRef(f, 0, len, &bp, bits, data, base);
}

/* ---- escapes (zpp_quant.h, "Escapes") --------------------------------------- */

/* Escape counts of the codec calls one thread made (quant_escape.c). */
typedef struct {
  uint64_t escapes;   /* elements that travelled in a slot */
  uint64_t overflows; /* blocks whose candidates found no free slots: they stayed */
} zppQuantEscCounts_t;

/* The reference magnitude r of a block f[0..len) (zpp_quant.h, "Escapes"):
 * among its non-zero finite magnitudes (as |x| bits), the (E+1)-th largest,
 * or the smallest when there are at most E + 1 of them; 0 when there are
 * none (then the block has no candidate). */
ZPP_QUANT_INL uint32_t zppQuantEscReference(const float* f, size_t len) {
  enum { E = ZPP_QUANT_ESC_PER_BLOCK };
  uint32_t top[E + 1]; /* the E + 1 largest, largest first */
  int ntop = 0;
  for (size_t i = 0; i < len; i++) {
    uint32_t m = zppF32Bits(f[i]) & 0x7fffffffu;
    if (m == 0 || m >= 0x7f800000u || (ntop == E + 1 && m <= top[E])) continue;
    int j = ntop < E + 1 ? ntop++ : E;
    while (j > 0 && top[j - 1] < m) {
      top[j] = top[j - 1];
      j--;
    }
    top[j] = m;
  }
  return ntop > 0 ? top[ntop - 1] : 0;
}

/* 1 if a block has a candidate, from two counts over its finite elements:
 * nz, the non-zero ones, and c, those with |x| 2^K >= a, a being their
 * largest magnitude. r is the min(E + 1, nz)-th largest non-zero magnitude;
 * r < a 2^-K (so that the largest element is a candidate) iff fewer than
 * min(E + 1, nz) non-zero magnitudes reach a 2^-K, i.e. c < min(E + 1, nz).
 * With nz = 0 there is none (and c counts every zero). For kernels that
 * count in parallel and run the exact test only where this says so. */
ZPP_QUANT_INL int zppQuantEscHasCandidate(int c, int nz) {
  return c < (nz < ZPP_QUANT_ESC_PER_BLOCK + 1 ? nz : ZPP_QUANT_ESC_PER_BLOCK + 1);
}

/* 1 if the finite x is above 2^k r (r > 0), compared exactly in double. */
ZPP_QUANT_INL int zppQuantEscAbove(float x, uint32_t r, int k) {
  uint32_t m = zppF32Bits(x) & 0x7fffffffu;
  return m < 0x7f800000u && r > 0 &&
         (double)zppF32FromBits(m) > (double)zppF32FromBits(r) * (double)((uint64_t)1 << k);
}

/* 1 if x is non-finite. */
ZPP_QUANT_INL int zppQuantNonFinite(float x) { return (zppF32Bits(x) & 0x7fffffffu) >= 0x7f800000u; }

/* ---- error feedback's residuals (zpp_quant.h) ----------------------------------- */

/* The stored value of residual element i of a run. */
ZPP_QUANT_INL float zppQuantResidValue(zppQuantResid_t e, size_t i) {
  /* The scale's sign bit marks a rotated-domain block (zpp_quant.h). */
  return (float)e.q[i] * zppF32FromBits(zppF32Bits(e.scale[i / ZPP_QUANT_RESID_BLOCK]) & 0x7fffffffu);
}

/* One residual block r[0..len) (len <= ZPP_QUANT_RESID_BLOCK, finite) into
 * its int8 values and its scale, by the int8 codec's block step. */
ZPP_QUANT_INL void zppQuantResidBlockRef(const float* r, size_t len, int8_t* q, float* scale) {
  zppQuantBlockRef(r, zppFloat32, len, 8, (uint8_t*)scale, 0, (uint8_t*)q, 0);
}

/* A residual scale's sign bit: the block holds rotated-domain values
 * (zpp_quant.h, "error feedback in the rotated domain"). */
#define ZPP_QUANT_RESID_ROTATED 0x80000000u

/* 1 where element i's residual block holds rotated-domain values. */
ZPP_QUANT_INL int zppQuantResidIsRotated(zppQuantResid_t e, size_t i) {
  return (zppF32Bits(e.scale[i / ZPP_QUANT_RESID_BLOCK]) & ZPP_QUANT_RESID_ROTATED) != 0;
}

/* 1 where every residual block of the n elements from element at (both
 * multiples of 32) is rotated or zero (scale +0): the groups the vector
 * feedback kernels take (zpp_quant.h, "error feedback in the rotated
 * domain"). */
ZPP_QUANT_INL int zppQuantResidRotatedOrZero(zppQuantResid_t e, size_t at, size_t n) {
  for (size_t k = at / ZPP_QUANT_RESID_BLOCK; k < (at + n) / ZPP_QUANT_RESID_BLOCK; k++) {
    uint32_t b = zppF32Bits(e.scale[k]);
    if (b != 0 && !(b & ZPP_QUANT_RESID_ROTATED)) return 0;
  }
  return 1;
}

/* Error feedback's rotated-domain residual of a codec block whose max |w|
 * is below 2^-64 (zero, or the scaled path): r = w - (float)q * s element
 * by element (q from the block's data at element at), stored by the int8
 * block step per residual block, marked rotated. */
ZPP_QUANT_INL void zppQuantResidTinyRotatedRef(const float* w, size_t bs, int bits, const uint8_t* data,
                                               float s, size_t at, zppQuantResid_t out) {
  float r[ZPP_QUANT_RESID_BLOCK];
  for (size_t lo = 0; lo < bs; lo += ZPP_QUANT_RESID_BLOCK) {
    for (size_t i = 0; i < ZPP_QUANT_RESID_BLOCK; i++)
      r[i] = w[lo + i] - (float)zppQuantGetQ(data, bits, at + lo + i) * s;
    float* scale = out.scale + (at + lo) / ZPP_QUANT_RESID_BLOCK;
    zppQuantResidBlockRef(r, ZPP_QUANT_RESID_BLOCK, out.q + at + lo, scale);
    *scale = zppF32FromBits(zppF32Bits(*scale) | ZPP_QUANT_RESID_ROTATED);
  }
}

/* The new residual of the block of n (<= ZPP_QUANT_RESID_BLOCK) elements
 * at x, y, e, out: x - y, or e's stored value where that is not finite. */
ZPP_QUANT_INL void zppQuantNewResidBlockRef(const float* x, const float* y, zppQuantResid_t e, size_t n,
                                            zppQuantResid_t out) {
  float r[ZPP_QUANT_RESID_BLOCK];
  for (size_t i = 0; i < n; i++) {
    float d = x[i] - y[i];
    r[i] = zppQuantNonFinite(d) ? zppQuantResidValue(e, i) : d;
  }
  zppQuantResidBlockRef(r, n, out.q, out.scale);
}

/* Writes q (-8..7 for int4, -2..1 for int2) into element i of a segment's
 * data. */
ZPP_QUANT_INL void zppQuantSetQ(uint8_t* data, int bits, size_t i, int q) {
  if (bits == 8) {
    data[i] = (uint8_t)(int8_t)q;
  } else if (bits == 2) {
    const int sh = 2 * (int)(i & 3);
    data[i >> 2] = (uint8_t)((data[i >> 2] & ~(3u << sh)) | (((unsigned)q & 3u) << sh));
  } else {
    uint8_t b = data[i >> 1], n = (uint8_t)(q & 0x0f);
    data[i >> 1] = (i & 1) ? (uint8_t)((b & 0x0f) | (n << 4)) : (uint8_t)((b & 0xf0) | n);
  }
}

/* Writes the in-band marker q = -(Q+1) (int8 0x80, int4 nibble 0x8, int2
 * field 0b10) for
 * element i of a segment's data. */
ZPP_QUANT_INL void zppQuantSetMarker(uint8_t* data, int bits, size_t i) {
  zppQuantSetQ(data, bits, i, -zppQuantQmax(bits) - 1);
}

/* 1 if element i of a segment's data holds the marker. */
ZPP_QUANT_INL int zppQuantIsMarker(const uint8_t* data, int bits, size_t i) {
  return zppQuantGetQ(data, bits, i) == -zppQuantQmax(bits) - 1;
}

/* One block's encoding when it holds a candidate or a non-finite element:
 * b[0..len) its fp32 elements (modified: what leaves the block becomes +0),
 * lo its first element relative to its escape group (base the group's first
 * in the segment), r its reference magnitude, slot its first table slot
 * when its candidates escape (all of them, in element order), -1 when they
 * overflow the table (then they stay in the block, whose scale they set:
 * nothing is saturated). What becomes +0 for the scale: escaped candidates
 * and non-finite elements, which wait for their marker as -0 (a value the
 * block no longer holds: its -0 become +0 first, which quantize alike). No
 * per-element side table: the CUDA escape kernel runs this in one thread
 * per block, where a large frame costs every resident thread. Writes only
 * this block's scale, data and slots. Returns 1 when it wrote a marker. */
ZPP_QUANT_INL int zppQuantEscBlockRef(float* b, size_t len, size_t lo, size_t base, int bits, int block,
                                      uint32_t r, int slot, uint8_t* scales, uint8_t* data,
                                      uint8_t* table) {
  const int K = ZPP_QUANT_ESC_LOG2(bits);
  const int escape = slot >= 0;
  int used = slot, marked = 0;
  for (size_t i = 0; i < len; i++) {
    if (b[i] == 0.0f) {
      b[i] = 0.0f;
    } else if (zppQuantNonFinite(b[i])) {
      b[i] = -0.0f;
    } else if (escape && zppQuantEscAbove(b[i], r, K)) {
      zppQuantEscStoreSlot(table, used++, b[i], (unsigned)(lo + i));
      b[i] = 0.0f;
    }
  }
  zppQuantBlockRef(b, zppFloat32, len, bits, scales, (base + lo) / (size_t)block, data, base + lo);
  for (size_t i = 0; i < len; i++)
    if (zppF32Bits(b[i]) == 0x80000000u) {
      zppQuantSetMarker(data, bits, base + lo + i);
      marked = 1;
    }
  return marked;
}

/* Scales, data and escape table of one escape group, from its elements in
 * fp32: x[0..glen) are the segment's elements [base, base + glen), base a
 * multiple of ZPP_QUANT_ESC_GROUP. The reference of every implementation's
 * encoding, escapes included. x is modified (candidates become +0).
 * Returns 1 when it wrote a marker (the segment's header flag). */
ZPP_QUANT_INL int zppQuantEncodeGroupRef(float* x, size_t glen, size_t base, int bits, int block,
                                         uint8_t* scales, uint8_t* data, uint8_t* table,
                                         zppQuantEscCounts_t* counts) {
  const int K = ZPP_QUANT_ESC_LOG2(bits);
  int used = 0, marked = 0;
  for (size_t lo = 0; lo < glen; lo += (size_t)block) {
    size_t len = glen - lo < (size_t)block ? glen - lo : (size_t)block;
    float* b = x + lo;
    uint32_t r = zppQuantEscReference(b, len);
    int nc = 0, nonfinite = 0;
    for (size_t i = 0; i < len; i++) {
      nc += zppQuantEscAbove(b[i], r, K);
      nonfinite += zppQuantNonFinite(b[i]);
    }
    int escape = nc > 0 && used + nc <= ZPP_QUANT_ESC_SLOTS;
    if (nc > 0 && !escape) counts->overflows++;
    if (!escape && nonfinite == 0 && nc == 0) {
      zppQuantBlockRef(b, zppFloat32, len, bits, scales, (base + lo) / (size_t)block, data, base + lo);
      continue;
    }
    /* zppQuantEscAbove is false for non-finite elements: an escaping block
     * stores exactly its nc candidates. */
    marked |=
        zppQuantEscBlockRef(b, len, lo, base, bits, block, r, escape ? used : -1, scales, data, table);
    if (escape) {
      used += nc;
      counts->escapes += (uint64_t)nc;
    }
  }
  for (int j = used; j < ZPP_QUANT_ESC_SLOTS; j++)
    zppQuantEscStoreSlot(table, j, 0.0f, ZPP_QUANT_ESC_EMPTY);
  return marked;
}

/* ---- rotation (zpp_quant.h, "Rotation") ---------------------------------- */

/* Sign word k (elements 64k .. 64k+63 of a block): splitmix64's k-th output
 * for the documented seed. Bit j set: element 64k + j is negated. */
ZPP_QUANT_INL uint64_t zppQuantRotSignWord(size_t k) {
  uint64_t z = ZPP_QUANT_ROT_SEED + (uint64_t)(k + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#endif /* ZPP_QUANT_REF_H_ */
