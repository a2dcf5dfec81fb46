/*
 * The rotated codec (zpp_quant.h, "Rotation"): the portable reference.
 * Encoding runs the plain codec first (header, padding, escape tables,
 * markers, escape counts: the rotation changes none of them), then
 * re-encodes every block that is rotated: its escaped elements become +0,
 * it goes through x -> H D x in fp32 and is quantized as a plain block.
 * Decoding reads the flag and the per-block bit (the scale's sign).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

uint32_t zppQuantRotSignMask(size_t i) {
  return ((zppQuantRotSignWord(i / 64) >> (i % 64)) & 1) ? 0x80000000u : 0u;
}

/* The sign masks of a whole 4096 block, filled once. */
static uint32_t gSignMask[ZPP_QUANT_MAX_BLOCK];
static pthread_once_t gSignOnce = PTHREAD_ONCE_INIT;
static void fillSigns(void) {
  for (size_t i = 0; i < ZPP_QUANT_MAX_BLOCK; i++) gSignMask[i] = zppQuantRotSignMask(i);
}

const uint32_t* zppQuantRotSignMasks(void) {
  pthread_once(&gSignOnce, fillSigns);
  return gSignMask;
}

/* D: flips the sign bits (exact, also for zeros). */
static void applySigns(float* x, size_t len) {
  pthread_once(&gSignOnce, fillSigns);
  for (size_t i = 0; i < len; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    u ^= gSignMask[i];
    memcpy(&x[i], &u, 4);
  }
}

void zppQuantRotHadamardRef(float* x, size_t len) {
  /* Stages h = 1, 2, 4 within each group of 8 (the same pairs and the same
   * operations as the plain loop below, which does h >= 8 on contiguous
   * runs the compiler vectorizes). len >= 32. */
  for (size_t i = 0; i < len; i += 8) {
    float* v = x + i;
    float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
    float a4 = v[4] + v[5], a5 = v[4] - v[5], a6 = v[6] + v[7], a7 = v[6] - v[7];
    float b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
    float b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
    v[0] = b0 + b4;
    v[4] = b0 - b4;
    v[1] = b1 + b5;
    v[5] = b1 - b5;
    v[2] = b2 + b6;
    v[6] = b2 - b6;
    v[3] = b3 + b7;
    v[7] = b3 - b7;
  }
  for (size_t h = 8; h < len; h *= 2)
    for (size_t i = 0; i < len; i += 2 * h)
      for (size_t j = i; j < i + h; j++) {
        float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

/* Re-encodes the rotated blocks of escape group g (zpp_quant.h, "Rotation").
 * The plain encoding already made every choice the rotation depends on: its
 * table lists exactly the elements that escaped (a block's candidates
 * escape all together or stay all together), and a block with a
 * non-finite element is stored plain. */
void zppQuantRotateGroupRef(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                            uint8_t* packed, size_t g) {
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  const uint8_t* table = packed + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES;
  size_t base = g * ZPP_QUANT_ESC_GROUP;
  size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  int nrot = 0;
  float xg[ZPP_QUANT_ESC_GROUP];
  uint8_t rotated[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK];
  for (size_t lo = 0; lo < glen; lo += (size_t)block) {
    size_t len = glen - lo < (size_t)block ? glen - lo : (size_t)block;
    size_t b = (base + lo) / (size_t)block;
    float* x = xg + lo;
    if (dtype == zppFloat32)
      memcpy(x, (const float*)in + base + lo, len * sizeof(float));
    else
      for (size_t i = 0; i < len; i++) x[i] = zppQuantLoadOne(in, dtype, base + lo + i);
    int nonfinite = 0;
    for (size_t i = 0; i < len; i++) nonfinite |= zppQuantNonFinite(x[i]);
    int rotate = len == (size_t)block && !nonfinite;
    if (rotate) {
      for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) { /* the escaped elements become +0 */
        unsigned idx = zppQuantEscIndex(table, j);
        if (idx == ZPP_QUANT_ESC_EMPTY) break;
        if (idx >= lo && idx < lo + len) x[idx - lo] = 0.0f;
      }
      applySigns(x, len);
      zppQuantRotHadamardRef(x, len);
      uint32_t inf = 0; /* w not finite: all exponent bits set somewhere */
      for (size_t i = 0; i < len; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        inf |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
      }
      rotate = !inf;
    }
    rotated[lo / (size_t)block] = (uint8_t)rotate;
    nrot += rotate;
    if (!rotate) { /* the plain codec's block, marked by the scale's sign */
      float s = zppQuantLoadScale(scales, b);
      zppQuantStoreScale(scales, b, zppF32FromBits(zppF32Bits(s) | 0x80000000u));
      for (size_t i = 0; i < len; i++) x[i] = 0.0f; /* not used below */
    }
  }
  if (nrot == 0) return;
  /* The rotated blocks quantized as plain fp32 blocks by the implementation
   * in use (bit-identical to zppQuantBlockRef by contract), into a scratch
   * segment of the group's whole blocks; then copied into place. */
  size_t nb = zppQuantNumBlocks(glen, block);
  uint8_t tmp[ZPP_QUANT_HEADER_BYTES + 4 * (ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK) +
              ZPP_QUANT_ESC_GROUP];
  zppQuantImplActive()->quantize(xg, zppFloat32, glen, bits, block, tmp, NULL);
  const uint8_t* tdata = tmp + zppQuantDataOffset(glen, block);
  for (size_t k = 0; k < nb; k++) {
    if (!rotated[k]) continue;
    size_t b = base / (size_t)block + k;
    memcpy(scales + 4 * b, tmp + ZPP_QUANT_HEADER_BYTES + 4 * k, 4);
    size_t bytes = zppQuantDataBytes((size_t)block, bits);
    memcpy(data + zppQuantByteOf(base + k * (size_t)block, bits), tdata + bytes * k, bytes);
  }
}

zppResult_t zppQuantizeEx(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                          unsigned flags, void* packed) {
  if ((flags & ~(unsigned)ZPP_QUANT_ROTATE) != 0)
    ZPP_FAIL(zppInvalidArgument, QUANT, "zppQuantizeEx: flags 0x%x unknown (0 or ZPP_QUANT_ROTATE)",
             flags);
  const zppQuantRotImpl_t* rk = zppQuantRotImplFor(bits);
  if ((flags & ZPP_QUANT_ROTATE) && rk != NULL) {
    /* The vector kernels encode the ordinary groups in one pass; the
     * others take the plain reference encoding and zppQuantRotateGroupRef, as below. */
    ZPPCHECK(zppQuantFrame("zppQuantizeEx", in, dtype, count, bits, block, packed));
    uint8_t* p = (uint8_t*)packed;
    p[6] |= ZPP_QUANT_FLAG_ROTATED;
    for (size_t g = 0; g < zppQuantNumGroups(count); g++) {
      if (rk->encodeGroup(in, dtype, count, bits, block, p, g)) continue;
      if (zppQuantEscEncodeGroup(in, dtype, count, bits, block, p, g)) p[6] |= ZPP_QUANT_FLAG_MARKERS;
      zppQuantRotateGroupRef(in, dtype, count, bits, block, p, g);
    }
    return zppSuccess;
  }
  ZPPCHECK(zppQuantize(in, dtype, count, bits, block, packed));
  if (!(flags & ZPP_QUANT_ROTATE)) return zppSuccess;
  uint8_t* p = (uint8_t*)packed;
  p[6] |= ZPP_QUANT_FLAG_ROTATED;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++)
    zppQuantRotateGroupRef(in, dtype, count, bits, block, p, g);
  return zppSuccess;
}

/* y of one rotated block of scale s (sign clear): D H (q s) * 2^-log2(B). */
static void decodeRotatedBlock(const uint8_t* data, int bits, size_t lo, size_t len, float s,
                               float* y) {
  for (size_t i = 0; i < len; i++) y[i] = (float)zppQuantGetQ(data, bits, lo + i) * s;
  zppQuantRotHadamardRef(y, len);
  const float invB = zppF32FromBits((uint32_t)(127 - zppQuantLog2((int)len)) << 23);
  for (size_t i = 0; i < len; i++) y[i] = y[i] * invB;
  applySigns(y, len);
}

/* Decodes the blocks of elements [lo0, hi) (lo0 a block start; hi a block
 * start or count) of a rotated-flag segment into out, escapes not yet
 * applied. */
static void decodeBlocks(const uint8_t* scales, const uint8_t* data, int bits, int block, size_t lo0,
                         size_t hi, void* out, zppDataType_t dtype) {
  float y[ZPP_QUANT_MAX_BLOCK];
  const zppQuantRotImpl_t* rk = zppQuantRotImplFor(bits);
  for (size_t lo = lo0; lo < hi; lo += (size_t)block) {
    if (rk != NULL) { /* a run of rotated blocks in one call (bit-identical by contract) */
      lo = rk->decodeRun(scales, data, bits, block, lo, hi, out, dtype);
      if (lo >= hi) break;
    }
    size_t len = hi - lo < (size_t)block ? hi - lo : (size_t)block;
    float s = zppQuantLoadScale(scales, lo / (size_t)block);
    uint32_t sb = zppF32Bits(s);
    /* A short last block is never rotated (the encoder stores it plain);
     * a corrupt segment that says otherwise decodes it plain, as the
     * rotated sums do (quant_rotate_reduce.c, blockRotated). */
    if ((sb & 0x80000000u) || zppQuantNonFinite(s) || len != (size_t)block) {
      float sa = zppF32FromBits(sb & 0x7fffffffu);
      for (size_t i = 0; i < len; i++)
        y[i] = zppQuantIsMarker(data, bits, lo + i) || zppQuantNonFinite(sa)
                   ? zppF32FromBits(ZPP_QUANT_NAN_BITS)
                   : (float)zppQuantGetQ(data, bits, lo + i) * sa;
    } else {
      if (rk != NULL) {
        rk->decodeBlock(data, bits, lo, len, s, out, dtype);
        continue;
      }
      decodeRotatedBlock(data, bits, lo, len, s, y);
    }
    for (size_t i = 0; i < len; i++) zppQuantStoreOne(out, dtype, lo + i, y[i]);
  }
}

/* Escaped elements of group g decode to their own value (rotated blocks
 * hold noise at their positions: the value replaces it, it is not added). */
static zppResult_t applyEscapes(const uint8_t* tables, size_t g, size_t count, void* out,
                                zppDataType_t dtype) {
  const uint8_t* t = tables + g * ZPP_QUANT_ESC_TABLE_BYTES;
  size_t base = g * ZPP_QUANT_ESC_GROUP;
  for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
    unsigned idx = zppQuantEscIndex(t, j);
    if (idx == ZPP_QUANT_ESC_EMPTY) break;
    if (base + idx >= count)
      ZPP_FAIL(zppInvalidUsage, QUANT,
               "zppDequantizeEx: escape slot %d of group %zu points at element %zu of %zu", j, g,
               base + idx, count);
    zppQuantStoreOne(out, dtype, base + idx, zppQuantEscValue(t, j));
  }
  return zppSuccess;
}

zppResult_t zppQuantDecodeGroupEx(const uint8_t* packed, size_t count, int bits, int block, size_t g,
                                  float* out) {
  size_t base = g * ZPP_QUANT_ESC_GROUP;
  size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  decodeBlocks(zppQuantScalesPtr(packed), packed + zppQuantDataOffset(count, block), bits, block, base,
               base + glen, out, zppFloat32);
  return applyEscapes(packed + zppQuantEscOffset(count, bits, block), g, count, out, zppFloat32);
}

zppResult_t zppDequantizeEx(const void* packed, size_t count, int bits, int block, void* out,
                            zppDataType_t dtype) {
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "zppDequantizeEx: packed is NULL");
  if (!zppQuantValidParams(bits, block))
    return zppQuantCheckHeader(packed, count, bits, block); /* names the bad argument */
  const uint8_t* p = (const uint8_t*)packed;
  if (!(p[6] & ZPP_QUANT_FLAG_ROTATED)) return zppDequantize(packed, count, bits, block, out, dtype);
  uint8_t hdr[ZPP_QUANT_HEADER_BYTES];
  memcpy(hdr, p, sizeof hdr);
  hdr[6] &= (uint8_t)~ZPP_QUANT_FLAG_ROTATED;
  ZPPCHECK(zppQuantCheckHeader(hdr, count, bits, block));
  if (out == NULL && count > 0) ZPP_FAIL(zppInvalidArgument, QUANT, "zppDequantizeEx: out is NULL");
  if (dtype != zppFloat32 && dtype != zppFloat16 && dtype != zppBfloat16)
    ZPP_FAIL(zppInvalidArgument, QUANT,
             "zppDequantizeEx: data type %d unsupported (fp32, fp16 or bf16)", (int)dtype);
  decodeBlocks(zppQuantScalesPtr(p), p + zppQuantDataOffset(count, block), bits, block, 0, count, out,
               dtype);
  const uint8_t* tables = p + zppQuantEscOffset(count, bits, block);
  for (size_t g = 0; g < zppQuantNumGroups(count); g++)
    ZPPCHECK(applyEscapes(tables, g, count, out, dtype));
  return zppSuccess;
}
