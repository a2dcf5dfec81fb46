/*
 * The portable C codecs: the reference implementation of zpp_quant.h. Written
 * for clarity over speed; the AVX2 file must produce the same bits.
 */
#include <string.h>

#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

/* Widens n elements of dtype to fp32. */
static void scalarToFloat(const void* in, zppDataType_t dtype, size_t n, float* out) {
  if (dtype == zppFloat32) {
    memcpy(out, in, n * sizeof(float));
  } else if (dtype == zppFloat16) {
    const uint16_t* h = (const uint16_t*)in;
    for (size_t i = 0; i < n; i++) out[i] = zppHalfToFloat(h[i]);
  } else {
    const uint16_t* b = (const uint16_t*)in;
    for (size_t i = 0; i < n; i++) out[i] = zppBf16ToFloat(b[i]);
  }
}

/* Rounds n fp32 values to dtype. */
static void scalarFromFloat(const float* in, size_t n, void* out, zppDataType_t dtype) {
  if (dtype == zppFloat32) {
    memcpy(out, in, n * sizeof(float));
  } else if (dtype == zppFloat16) {
    uint16_t* h = (uint16_t*)out;
    for (size_t i = 0; i < n; i++) h[i] = zppFloatToHalf(in[i]);
  } else {
    uint16_t* b = (uint16_t*)out;
    for (size_t i = 0; i < n; i++) b[i] = zppFloatToBf16(in[i]);
  }
}

static void scalarQuantize(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                           uint8_t* packed, uint8_t* hints) {
  /* The reference leaves the escape pass to scan every group. */
  if (hints != NULL) memset(hints, 1, zppQuantNumGroups(count));
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  size_t esize = dtype == zppFloat32 ? 4 : 2;
  size_t nb = zppQuantNumBlocks(count, block);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * (size_t)block;
    size_t len = count - lo < (size_t)block ? count - lo : (size_t)block;
    zppQuantBlockRef((const uint8_t*)in + lo * esize, dtype, len, bits, scales, b, data, lo);
  }
}

/* Decodes elements [c0, c1) of a segment into dst[0 .. c1-c0). */
static void scalarDecodeRange(const uint8_t* seg, size_t count, int bits, int block, size_t c0,
                              size_t c1, float* dst, zppQuantDecodeMode_t mode) {
  const uint8_t* scales = zppQuantScalesPtr(seg);
  const uint8_t* data = seg + zppQuantDataOffset(count, block);
  size_t i = c0;
  while (i < c1) {
    size_t b = i / (size_t)block;
    size_t end = (b + 1) * (size_t)block;
    if (end > c1) end = c1;
    float s = zppQuantLoadScale(scales, b);
    for (size_t k = i; k < end; k++) {
      float y = (float)zppQuantGetQ(data, bits, k) * s;
      dst[k - c0] = zppQuantApply(dst[k - c0], y, mode);
    }
    i = end;
  }
}

static void scalarDequantize(const uint8_t* packed, size_t count, int bits, int block, void* out,
                             zppDataType_t dtype) {
  const uint8_t* scales = zppQuantScalesPtr(packed);
  size_t esize = dtype == zppFloat32 ? 4 : 2;
  float buf[ZPP_QUANT_MAX_BLOCK];
  size_t nb = zppQuantNumBlocks(count, block);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * (size_t)block;
    size_t len = count - lo < (size_t)block ? count - lo : (size_t)block;
    float s = zppQuantLoadScale(scales, b);
    if (s != s) {
      /* A NaN scale decodes to the output type's canonical NaN. */
      for (size_t i = 0; i < len; i++) buf[i] = zppF32FromBits(ZPP_QUANT_NAN_BITS);
    } else {
      scalarDecodeRange(packed, count, bits, block, lo, lo + len, buf, ZPP_DECODE_STORE);
    }
    scalarFromFloat(buf, len, (uint8_t*)out + lo * esize, dtype);
  }
}

static void scalarAccumulate(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                             int block, float* acc, int accumulate) {
  for (size_t c0 = 0; c0 < count; c0 += ZPP_QUANT_CHUNK) {
    size_t c1 = count - c0 < ZPP_QUANT_CHUNK ? count : c0 + ZPP_QUANT_CHUNK;
    for (int k = 0; k < n; k++) {
      zppQuantDecodeMode_t mode = (k == 0 && !accumulate) ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD;
      scalarDecodeRange(packed + (size_t)k * stride, count, bits, block, c0, c1, acc + c0, mode);
    }
  }
}

static void scalarSum(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                      float divisor, void* out, zppDataType_t dtype) {
  size_t esize = dtype == zppFloat32 ? 4 : 2;
  float buf[ZPP_QUANT_CHUNK];
  for (size_t c0 = 0; c0 < count; c0 += ZPP_QUANT_CHUNK) {
    size_t c1 = count - c0 < ZPP_QUANT_CHUNK ? count : c0 + ZPP_QUANT_CHUNK;
    for (int k = 0; k < n; k++)
      scalarDecodeRange(packed + (size_t)k * stride, count, bits, block, c0, c1, buf,
                        k == 0 ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD);
    if (divisor != 1.0f)
      for (size_t i = 0; i < c1 - c0; i++) buf[i] = buf[i] / divisor;
    scalarFromFloat(buf, c1 - c0, (uint8_t*)out + c0 * esize, dtype);
  }
}

static void scalarReduceRequant(const uint8_t* packed, size_t stride, int n, size_t count, int bits_in,
                                int block_in, int bits_out, int block_out, uint8_t* packed_out,
                                uint8_t* hints) {
  if (hints != NULL) memset(hints, 1, zppQuantNumGroups(count)); /* the escape pass scans */
  uint8_t* scales = packed_out + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed_out + zppQuantDataOffset(count, block_out);
  float buf[ZPP_QUANT_MAX_BLOCK];
  size_t nb = zppQuantNumBlocks(count, block_out);
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * (size_t)block_out;
    size_t hi = count - lo < (size_t)block_out ? count : lo + (size_t)block_out;
    for (int k = 0; k < n; k++)
      scalarDecodeRange(packed + (size_t)k * stride, count, bits_in, block_in, lo, hi, buf,
                        k == 0 ? ZPP_DECODE_ZERO_ADD : ZPP_DECODE_ADD);
    zppQuantBlockRef(buf, zppFloat32, hi - lo, bits_out, scales, b, data, lo);
  }
}

static void scalarAddResidual(const void* in, zppDataType_t dtype, zppQuantResid_t e, size_t n,
                              float* x) {
  if (in != (const void*)x) scalarToFloat(in, dtype, n, x); /* in == x: fp32, in place */
  for (size_t i = 0; i < n; i++) x[i] += zppQuantResidValue(e, i);
}

static void scalarNewResidual(const float* x, const float* y, zppQuantResid_t e, size_t n,
                              zppQuantResid_t out) {
  for (size_t lo = 0; lo < n; lo += ZPP_QUANT_RESID_BLOCK) {
    size_t len = n - lo < ZPP_QUANT_RESID_BLOCK ? n - lo : ZPP_QUANT_RESID_BLOCK;
    zppQuantNewResidBlockRef(x + lo, y + lo, zppQuantResidAt(e, lo), len, zppQuantResidAt(out, lo));
  }
}

const zppQuantImpl_t zppQuantImplScalar = {
    .name = "scalar",
    .quantize = scalarQuantize,
    .dequantize = scalarDequantize,
    .accumulate = scalarAccumulate,
    .sum = scalarSum,
    .reduceRequant = scalarReduceRequant,
    .toFloat = scalarToFloat,
    .fromFloat = scalarFromFloat,
    .addResidual = scalarAddResidual,
    .newResidual = scalarNewResidual,
};
