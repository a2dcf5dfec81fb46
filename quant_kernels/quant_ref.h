/*
 * The per-block and per-element arithmetic of zpp_quant.h, written once.
 * quant_scalar.c is built from these; quant_avx2.c uses them for block setup
 * and for the few elements its vector loops leave over, so that both follow
 * the exact same sequence of fp32 operations and agree bit for bit.
 * Everything here is static inline: the AVX2 file compiles this header with
 * -mavx2, and a non-static inline copy could leak AVX2 code into callers on
 * CPUs without it.
 */
#ifndef ZPP_QUANT_REF_H_
#define ZPP_QUANT_REF_H_

#include <float.h>
#include <stddef.h>
#include <stdint.h>

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
static inline zppQuantBlockParams_t zppQuantBlockSetup(uint32_t amaxBits, int Q) {
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
static inline int zppQuantRne(float t) {
  float r = (t + 0x1.8p23f) - 0x1.8p23f; /* not folded: no -ffast-math here */
  return (int)r;
}

/* q for one element: clamp(rne((x * p) * inv), -Q, Q). */
static inline int zppQuantEncodeOne(float x, const zppQuantBlockParams_t* bp, int Q) {
  int q = zppQuantRne((x * bp->p) * bp->inv);
  return q > Q ? Q : (q < -Q ? -Q : q);
}

/* Signed nibble: 0..15 -> -8..7. */
static inline int zppQuantNibble(uint8_t byte, size_t i) {
  int v = (i & 1) ? (byte >> 4) : (byte & 0x0f);
  return (v ^ 8) - 8;
}

/* q of element i of a segment's data. */
static inline int zppQuantGetQ(const uint8_t* data, int bits, size_t i) {
  if (bits == 8) return (int8_t)data[i];
  return zppQuantNibble(data[i >> 1], i);
}

/* How decoded values land in a destination. */
typedef enum {
  ZPP_DECODE_STORE = 0,    /* dst = y (a plain decode) */
  ZPP_DECODE_ZERO_ADD = 1, /* dst = 0 + y (first term of a sum: -0 becomes +0) */
  ZPP_DECODE_ADD = 2       /* dst = dst + y */
} zppQuantDecodeMode_t;

static inline float zppQuantApply(float dst, float y, zppQuantDecodeMode_t mode) {
  if (mode == ZPP_DECODE_STORE) return y;
  if (mode == ZPP_DECODE_ZERO_ADD) return 0.0f + y;
  return dst + y;
}

/* Scalar decode of elements [lo, hi) of one block with scale s. */
static inline void zppQuantDecodeSpanRef(const uint8_t* data, int bits, size_t lo, size_t hi,
                                         float s, float* dst, zppQuantDecodeMode_t mode) {
  for (size_t i = lo; i < hi; i++) {
    float y = (float)zppQuantGetQ(data, bits, i) * s;
    dst[i - lo] = zppQuantApply(dst[i - lo], y, mode);
  }
}

/* Scalar encode of elements [lo, hi) of a block (lo even for int4), relative
 * indices into x, absolute into data. Writes whole bytes; an odd hi writes
 * the last byte's high nibble as 0. */
static inline void zppQuantEncodeSpanRef(const float* x, size_t lo, size_t hi,
                                         const zppQuantBlockParams_t* bp, int bits, uint8_t* data,
                                         size_t base) {
  int Q = zppQuantQmax(bits);
  if (bits == 8) {
    for (size_t i = lo; i < hi; i++) data[base + i] = (uint8_t)(int8_t)zppQuantEncodeOne(x[i], bp, Q);
    return;
  }
  for (size_t i = lo; i < hi; i += 2) {
    int q0 = zppQuantEncodeOne(x[i], bp, Q);
    int q1 = i + 1 < hi ? zppQuantEncodeOne(x[i + 1], bp, Q) : 0;
    data[(base + i) >> 1] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
  }
}

/* Data bytes of `len` elements starting at an even element. */
static inline size_t zppQuantDataBytes(size_t len, int bits) {
  return bits == 8 ? len : (len + 1) / 2;
}

#endif /* ZPP_QUANT_REF_H_ */
