/* Reductions over segments of either kind, rotated or plain: qgZ's sums
 * when rotation is on (zpp_quant.h, "Reductions of rotated segments").
 *
 * Two orders, both block by block into a tile of one escape group (4096
 * fp32 on the stack), so that no call allocates:
 *   - the simple order: each input's block decoded in full (inverse
 *     transform, signs, escapes in their places, markers as NaN, exactly as
 *     zppDequantizeEx), then added in input order;
 *   - the rotated-domain order: for a block that every input stores rotated,
 *     the inputs' rotated values q * s are added in input order, one inverse
 *     transform of the sum follows, then the escaped values in input order;
 *     other blocks take the simple order.
 * The sums of a group are then divided and stored (zppDequantizeSumOrder)
 * or quantized again as one group of the output (zppQuantReduceRequantOrder;
 * a group is encoded on its own, so this is byte for byte zppQuantizeEx of
 * all the sums). The direct order (requantization only) quantizes the
 * rotated-domain sums r of a block straight into the rotated output where
 * every input stores it rotated with no escape and r is finite (no inverse,
 * no forward transform); its other blocks are the rotated-domain order's,
 * encoded by zppQuantizeEx with the direct blocks' sums at +0. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant_kernels/zpp_quant.h"

#include "check.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

/* A packed segment of one escape group at the largest size (int8, block 32). */
#define GROUP_SEG_BYTES                                                                             \
  (ZPP_QUANT_HEADER_BYTES + 4 * (ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK) + ZPP_QUANT_ESC_GROUP + \
   ZPP_QUANT_ESC_TABLE_BYTES + 16)

/* y = D (H y) * 2^-L, the inverse transform of one full block in place. */
static void inverseBlock(float* y, size_t len) {
  zppQuantRotHadamardRef(y, len);
  const float invB = zppF32FromBits((uint32_t)(127 - zppQuantLog2((int)len)) << 23);
  const uint32_t* sign = zppQuantRotSignMasks();
  for (size_t i = 0; i < len; i++) y[i] = zppF32FromBits(zppF32Bits(y[i] * invB) ^ sign[i]);
}

/* dst[i] = (k == 0 ? 0 + v_i : dst[i] + v_i), v_i = (float)q_i * s for the
 * elements [lo, lo + len) of a segment's data (lo on a byte): the loops the
 * compiler vectorizes (the same operations as zppQuantGetQ's). */
static void addScaled(const uint8_t* data, int bits, size_t lo, size_t len, float s, float* dst,
                      int first) {
  if (bits == 8) {
    const int8_t* q = (const int8_t*)(data + lo);
    if (first)
      for (size_t i = 0; i < len; i++) dst[i] = 0.0f + (float)q[i] * s;
    else
      for (size_t i = 0; i < len; i++) dst[i] = dst[i] + (float)q[i] * s;
    return;
  }
  if (bits == 2) {
    const uint8_t* b = data + lo / 4;
    for (size_t j = 0; j < len / 4; j++)
      for (int f = 0; f < 4; f++) {
        float v = (float)((int8_t)(uint8_t)(b[j] << (6 - 2 * f)) >> 6) * s;
        dst[4 * j + f] = first ? 0.0f + v : dst[4 * j + f] + v;
      }
    return;
  }
  const uint8_t* b = data + lo / 2;
  if (first)
    for (size_t j = 0; j < len / 2; j++) {
      dst[2 * j] = 0.0f + (float)((int8_t)(uint8_t)(b[j] << 4) >> 4) * s;
      dst[2 * j + 1] = 0.0f + (float)((int8_t)b[j] >> 4) * s;
    }
  else
    for (size_t j = 0; j < len / 2; j++) {
      dst[2 * j] = dst[2 * j] + (float)((int8_t)(uint8_t)(b[j] << 4) >> 4) * s;
      dst[2 * j + 1] = dst[2 * j + 1] + (float)((int8_t)b[j] >> 4) * s;
    }
}

static int segRotated(const uint8_t* seg) { return (seg[6] & ZPP_QUANT_FLAG_ROTATED) != 0; }

/* 1 when block b of a segment is stored rotated (and decodes as such). */
static int blockRotated(const uint8_t* seg, size_t b, size_t len, int block) {
  if (!segRotated(seg) || len != (size_t)block) return 0;
  uint32_t sb = zppF32Bits(zppQuantLoadScale(zppQuantScalesPtr(seg), b));
  return !(sb & 0x80000000u) && (sb & 0x7f800000u) != 0x7f800000u;
}

/* Calls f(k, index relative to the block, value) for the escaped elements
 * of block [lo, lo + len) of segment seg (input k), in slot order: what
 * zppDequantizeEx (rotated segments) and zppDequantize (plain: a slot past
 * the group's end ends the table) store. */
typedef struct {
  const uint8_t* seg;
  size_t count;
  int bits, block;
} segInfo_t;

static int blockEscape(const segInfo_t* si, size_t lo, size_t len, int j, size_t* at, float* v) {
  size_t g = lo / ZPP_QUANT_ESC_GROUP, base = g * ZPP_QUANT_ESC_GROUP;
  size_t glen = si->count - base < ZPP_QUANT_ESC_GROUP ? si->count - base : ZPP_QUANT_ESC_GROUP;
  const uint8_t* t =
      si->seg + zppQuantEscOffset(si->count, si->bits, si->block) + g * ZPP_QUANT_ESC_TABLE_BYTES;
  for (; j < ZPP_QUANT_ESC_SLOTS; j++) {
    unsigned idx = zppQuantEscIndex(t, j);
    if (idx == ZPP_QUANT_ESC_EMPTY || idx >= glen) return -1;
    if (base + idx >= lo && base + idx < lo + len) {
      *at = base + idx - lo;
      *v = zppQuantEscValue(t, j);
      return j;
    }
  }
  return -1;
}

/* y[0..len) = block [lo, lo + len) of one input decoded to fp32, bit for
 * bit what zppDequantizeEx writes there. */
static void decodeBlock(const segInfo_t* si, size_t b, size_t lo, size_t len, float* y) {
  const uint8_t* seg = si->seg;
  const uint8_t* data = seg + zppQuantDataOffset(si->count, si->block);
  const int bits = si->bits;
  float s = zppQuantLoadScale(zppQuantScalesPtr(seg), b);
  const float nan = zppF32FromBits(ZPP_QUANT_NAN_BITS);
  if (!segRotated(seg)) {
    if (s != s)
      for (size_t i = 0; i < len; i++) y[i] = nan;
    else
      for (size_t i = 0; i < len; i++) y[i] = (float)zppQuantGetQ(data, bits, lo + i) * s;
  } else if (blockRotated(seg, b, len, si->block)) {
    const zppQuantRotImpl_t* rk = zppQuantRotImplFor(bits);
    if (rk != NULL) /* bit-identical by contract */
      rk->decodeBlock(data + zppQuantByteOf(lo, bits), bits, 0, len, s, y, zppFloat32);
    else {
      for (size_t i = 0; i < len; i++) y[i] = (float)zppQuantGetQ(data, bits, lo + i) * s;
      inverseBlock(y, len);
    }
  } else {
    float sa = zppF32FromBits(zppF32Bits(s) & 0x7fffffffu);
    for (size_t i = 0; i < len; i++)
      y[i] = zppQuantIsMarker(data, bits, lo + i) || zppQuantNonFinite(sa)
                 ? nan
                 : (float)zppQuantGetQ(data, bits, lo + i) * sa;
  }
  size_t at;
  float v;
  for (int j = blockEscape(si, lo, len, 0, &at, &v); j >= 0;
       j = blockEscape(si, lo, len, j + 1, &at, &v))
    y[at] = v;
  if (!segRotated(seg) && (seg[6] & ZPP_QUANT_FLAG_MARKERS))
    for (size_t i = 0; i < len; i++)
      if (zppQuantIsMarker(data, bits, lo + i)) y[i] = nan;
}

/* 1 when input k may have an escape in the group at hand: escMask holds
 * a bit per input below 64 whose table is not empty (others: always). */
static int mayEscape(uint64_t escMask, int k) { return k >= 64 || ((escMask >> k) & 1); }

/* acc[0..len) = the sums of block b (elements [lo, lo + len)) of the n
 * inputs, in `order`; y is scratch of len floats; rk: the vector kernels
 * in use, or NULL (bit-identical by contract). */
static void sumBlock(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                     zppQuantSumOrder_t order, size_t b, size_t lo, size_t len, float* acc, float* y,
                     const zppQuantRotImpl_t* rk, uint64_t escMask) {
  int allRotated = order == ZPP_QUANT_SUM_ROTATED_DOMAIN;
  for (int k = 0; k < n && allRotated; k++)
    allRotated = blockRotated(packed + (size_t)k * stride, b, len, block);
  if (allRotated) {
    const size_t dataOff = zppQuantDataOffset(count, block);
    if (rk != NULL)
      rk->sumBlock(packed, stride, n, dataOff, bits, b, lo, len, acc);
    else {
      for (int k = 0; k < n; k++) {
        const uint8_t* seg = packed + (size_t)k * stride;
        const uint8_t* data = seg + dataOff;
        addScaled(data, bits, lo, len, zppQuantLoadScale(zppQuantScalesPtr(seg), b), acc, k == 0);
      }
      inverseBlock(acc, len);
    }
    for (int k = 0; k < n; k++) {
      if (!mayEscape(escMask, k)) continue;
      segInfo_t si = {packed + (size_t)k * stride, count, bits, block};
      size_t at;
      float v;
      for (int j = blockEscape(&si, lo, len, 0, &at, &v); j >= 0;
           j = blockEscape(&si, lo, len, j + 1, &at, &v))
        acc[at] = acc[at] + v;
    }
    return;
  }
  for (int k = 0; k < n; k++) {
    segInfo_t si = {packed + (size_t)k * stride, count, bits, block};
    decodeBlock(&si, b, lo, len, k == 0 ? acc : y);
    if (k == 0)
      for (size_t i = 0; i < len; i++) acc[i] = 0.0f + acc[i];
    else
      for (size_t i = 0; i < len; i++) acc[i] = acc[i] + y[i];
  }
}

/* Where zppDequantizeSumOrder's results go: sum / divisor as dtype at out
 * (div: 0 a divisor of 1, 1 a power of two, multiplied by its reciprocal
 * recip, 2 divided). */
typedef struct {
  void* out;
  zppDataType_t dtype;
  int div;
  float divisor, recip;
} sumOut_t;

/* acc[0..len) / divisor stored at element at of the output. */
static void storeSums(const sumOut_t* so, float* acc, size_t at, size_t len) {
  if (so->div == 1)
    for (size_t i = 0; i < len; i++) acc[i] = acc[i] * so->recip;
  else if (so->div == 2)
    for (size_t i = 0; i < len; i++) acc[i] = acc[i] / so->divisor;
  /* The implementation's conversion (bit-identical to zppQuantStoreOne). */
  zppQuantImplActive()->fromFloat(acc, len, (uint8_t*)so->out + at * (so->dtype == zppFloat32 ? 4 : 2),
                                  so->dtype);
}

/* Bit k set: input k has an escape somewhere in group g (k < 64; mayEscape
 * answers for the others). A table whose slot 0 is empty is empty (slots
 * fill in order), so the inputs without one skip the escape scan. */
static uint64_t groupEscMask(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                             int block, size_t g) {
  const size_t escOff = zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES;
  uint64_t escMask = 0;
  for (int k = 0; k < n && k < 64; k++)
    if (zppQuantEscIndex(packed + (size_t)k * stride + escOff, 0) != ZPP_QUANT_ESC_EMPTY)
      escMask |= (uint64_t)1 << k;
  return escMask;
}

/* The sums of escape group g into acc[0..glen), or, with so, stored as its
 * results (acc then scratch). */
static void sumGroup(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                     zppQuantSumOrder_t order, size_t g, float* acc, const sumOut_t* so) {
  float y[ZPP_QUANT_MAX_BLOCK];
  size_t base = g * ZPP_QUANT_ESC_GROUP;
  size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  const zppQuantRotImpl_t* rk = zppQuantRotImplFor(bits);
  const uint64_t escMask = groupEscMask(packed, stride, n, count, bits, block, g);
  /* Without escapes, a rotated-domain block goes from the inputs to the
   * output in one vector pass (the same operations, in the same order). */
  const int fuse =
      so != NULL && rk != NULL && order == ZPP_QUANT_SUM_ROTATED_DOMAIN && escMask == 0 && n <= 64;
  const size_t dataOff = zppQuantDataOffset(count, block);
  /* b counts blocks beside r: a division per block showed in profiles. */
  for (size_t r = 0, b = base / (size_t)block; r < glen; r += (size_t)block, b++) {
    size_t len = glen - r < (size_t)block ? glen - r : (size_t)block;
    if (fuse) {
      int allRotated = 1;
      for (int k = 0; k < n && allRotated; k++)
        allRotated = blockRotated(packed + (size_t)k * stride, b, len, block);
      if (allRotated) {
        rk->sumStore(packed, stride, n, dataOff, bits, b, base + r, len, so->div,
                     so->div == 1 ? so->recip : so->divisor, so->out, so->dtype);
        continue;
      }
    }
    sumBlock(packed, stride, n, count, bits, block, order, b, base + r, len, acc + r, y, rk, escMask);
    if (so != NULL) storeSums(so, acc + r, base + r, len);
  }
}

/* 1 when no input has an escape in block [lo, lo + len). */
static int noEscape(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                    uint64_t escMask, size_t lo, size_t len) {
  for (int k = 0; k < n; k++) {
    if (!mayEscape(escMask, k)) continue;
    segInfo_t si = {packed + (size_t)k * stride, count, bits, block};
    size_t at;
    float v;
    if (blockEscape(&si, lo, len, 0, &at, &v) >= 0) return 0;
  }
  return 1;
}

/* The direct requantization of one block from its sums r in acc[0..len)
 * (zpp_quant.h, "Reductions of rotated segments", the direct order): w = r
 * quantized as the rotated encoder quantizes its w, into block b of the
 * output po. Returns 0, writing nothing, when some r is not finite. */
static int directBlockRef(const float* r, size_t len, int bits_out, uint8_t* po, size_t dataOut,
                          size_t b, size_t lo) {
  uint32_t amax = 0;
  for (size_t i = 0; i < len; i++) {
    uint32_t m = zppF32Bits(r[i]) & 0x7fffffffu;
    if (m >= 0x7f800000u) return 0;
    if (m > amax) amax = m;
  }
  const int Q = zppQuantQmax(bits_out);
  zppQuantBlockParams_t bp = zppQuantBlockSetup(amax, Q);
  zppQuantStoreScale(po + ZPP_QUANT_HEADER_BYTES, b, bp.scale);
  if (bp.kind != ZPP_QBLOCK_NORMAL)
    memset(po + dataOut + zppQuantByteOf(lo, bits_out), 0, zppQuantDataBytes(len, bits_out));
  else
    zppQuantEncodeSpanRef(r, 0, len, &bp, bits_out, po + dataOut, lo);
  return 1;
}

/* Escape group g of a requantization in the direct order (block_in ==
 * block_out, output rotated): each block that every input stores rotated,
 * without an escape in any input, whose sums r are finite, is quantized
 * from r into po (direct[k] = 1, acc +0 there); the others' sums, in the
 * rotated-domain order, go to acc (direct[k] = 0) for zppQuantizeEx.
 * Returns the number of those others. */
static size_t directGroup(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                          int block, int bits_out, size_t g, float* acc, uint8_t* po, uint8_t* direct) {
  float y[ZPP_QUANT_MAX_BLOCK];
  const size_t base = g * ZPP_QUANT_ESC_GROUP;
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  /* Kernels that implement both widths, or the reference. */
  const zppQuantRotImpl_t* rk = zppQuantRotImplFor(bits);
  if (rk != NULL && !zppQuantRotImplHas(rk, bits_out)) rk = NULL;
  const uint64_t escMask = groupEscMask(packed, stride, n, count, bits, block, g);
  const size_t dataIn = zppQuantDataOffset(count, block), dataOut = zppQuantDataOffset(count, block);
  size_t nfall = 0;
  const size_t nb = zppQuantNumBlocks(glen, block), b0 = base / (size_t)block;
  for (size_t k = 0; k < nb; k++) { /* which blocks may be direct */
    size_t lo = base + k * (size_t)block, len = glen - k * (size_t)block;
    int ok = len >= (size_t)block;
    for (int i = 0; i < n && ok; i++)
      ok = blockRotated(packed + (size_t)i * stride, b0 + k, (size_t)block, block);
    if (ok && escMask != 0)
      ok = noEscape(packed, stride, n, count, bits, block, escMask, lo, (size_t)block);
    direct[k] = (uint8_t)ok;
  }
  if (rk != NULL) /* clears direct[k] where r is not finite */
    rk->sumRequantGroup(packed, stride, n, dataIn, bits, block, b0, nb, bits_out,
                        po + ZPP_QUANT_HEADER_BYTES, po + dataOut, direct);
  for (size_t k = 0; k < nb; k++) {
    const size_t r = k * (size_t)block, b = b0 + k;
    size_t len = glen - r < (size_t)block ? glen - r : (size_t)block;
    int ok = direct[k];
    if (ok && rk == NULL) {
      for (int i = 0; i < n; i++) {
        const uint8_t* seg = packed + (size_t)i * stride;
        addScaled(seg + dataIn, bits, base + r, len, zppQuantLoadScale(zppQuantScalesPtr(seg), b),
                  acc + r, i == 0);
      }
      ok = directBlockRef(acc + r, len, bits_out, po, dataOut, b, base + r);
    }
    direct[k] = (uint8_t)ok;
    if (ok) continue;
    nfall++;
    sumBlock(packed, stride, n, count, bits, block, ZPP_QUANT_SUM_ROTATED_DOMAIN, b, base + r, len,
             acc + r, y, rk, escMask);
  }
  /* For zppQuantizeEx, the direct blocks' sums are +0 (nothing to do when
   * every block is direct). */
  for (size_t k = 0; nfall > 0 && k < nb; k++)
    if (direct[k]) memset(acc + k * (size_t)block, 0, (size_t)block * sizeof(float));
  return nfall;
}

static zppResult_t checkInputs(const char* fn, const void* packed, size_t stride, int n, size_t count,
                               int bits, int block, zppQuantSumOrder_t order) {
  if (!zppQuantValidParams(bits, block))
    ZPP_FAIL(zppInvalidArgument, QUANT,
             "%s: bits %d / block %d: expected 2, 4 or 8 and a power of two in [%d, %d]", fn, bits,
             block, ZPP_QUANT_MIN_BLOCK, ZPP_QUANT_MAX_BLOCK);
  if (order != ZPP_QUANT_SUM_SIMPLE && order != ZPP_QUANT_SUM_ROTATED_DOMAIN &&
      order != ZPP_QUANT_SUM_ROTATED_DIRECT)
    ZPP_FAIL(zppInvalidArgument, QUANT,
             "%s: order %d: expected ZPP_QUANT_SUM_SIMPLE, ZPP_QUANT_SUM_ROTATED_DOMAIN or "
             "ZPP_QUANT_SUM_ROTATED_DIRECT",
             fn, (int)order);
  if (n < 1) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: n %d: at least one input", fn, n);
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: packed is NULL", fn);
  size_t seg = zppQuantPackedSize(count, bits, block);
  if (seg == 0) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: count %zu too large", fn, count);
  if (n > 1 && stride < seg)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: stride %zu is below the segment size %zu", fn, stride,
             seg);
  for (int k = 0; k < n; k++) {
    const uint8_t* p = (const uint8_t*)packed + (size_t)k * stride;
    uint8_t hdr[ZPP_QUANT_HEADER_BYTES];
    memcpy(hdr, p, sizeof hdr);
    hdr[6] &= (uint8_t)~ZPP_QUANT_FLAG_ROTATED;
    zppResult_t res = zppQuantCheckHeader(hdr, count, bits, block);
    if (res != zppSuccess)
      ZPP_FAIL(res, QUANT, "%s: input %d of %d: its segment does not decode (see above)", fn, k, n);
    if (!segRotated(p)) continue;
    /* What zppDequantizeEx refuses in a rotated segment: a slot past the end. */
    const uint8_t* tables = p + zppQuantEscOffset(count, bits, block);
    for (size_t g = 0; g < zppQuantNumGroups(count); g++)
      for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
        unsigned idx = zppQuantEscIndex(tables + g * ZPP_QUANT_ESC_TABLE_BYTES, j);
        if (idx == ZPP_QUANT_ESC_EMPTY) break;
        if (g * ZPP_QUANT_ESC_GROUP + idx >= count)
          ZPP_FAIL(zppInvalidUsage, QUANT,
                   "%s: input %d of %d: escape slot %d of group %zu points at element %zu of %zu", fn,
                   k, n, j, g, g * ZPP_QUANT_ESC_GROUP + idx, count);
      }
  }
  return zppSuccess;
}

zppResult_t zppDequantizeSumOrder(const void* packed, size_t stride, int n, size_t count, int bits,
                                  int block, float divisor, void* out, zppDataType_t dtype,
                                  zppQuantSumOrder_t order) {
  const char* fn = "zppDequantizeSumEx";
  ZPP_ARGCHECK(dtype == zppFloat32 || dtype == zppFloat16 || dtype == zppBfloat16,
               "%s: dtype %d: expected fp32, fp16 or bf16", fn, (int)dtype);
  ZPP_ARGCHECK(out != NULL || count == 0, "%s: out is NULL with count %zu", fn, count);
  ZPP_ARGCHECK(isfinite(divisor) && divisor != 0.0f, "%s: divisor %g must be finite and non-zero", fn,
               (double)divisor);
  ZPPCHECK(checkInputs(fn, packed, stride, n, count, bits, block, order));
  float acc[ZPP_QUANT_ESC_GROUP];
  /* A divisor 2^k (|k| <= 126) divides as its reciprocal multiplies: both
   * round the same real number once (subnormal results too); 1 is none. */
  const uint32_t db = zppF32Bits(divisor) & 0x7fffffffu;
  const int pow2 = (db & 0x7fffffu) == 0 && db >= 1u << 23 && db <= 253u << 23;
  sumOut_t so = {
      out, dtype,
      divisor == 1.0f ? 0
      : pow2          ? 1
                      : 2,
      divisor, pow2 ? zppF32FromBits((zppF32Bits(divisor) & 0x80000000u) | ((254u << 23) - db)) : 0.0f};
  /* The direct order differs only in its requantization. */
  const zppQuantSumOrder_t sums = order == ZPP_QUANT_SUM_SIMPLE ? order : ZPP_QUANT_SUM_ROTATED_DOMAIN;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++)
    sumGroup((const uint8_t*)packed, stride, n, count, bits, block, sums, g, acc, &so);
  return zppSuccess;
}

zppResult_t zppQuantReduceRequantOrder(const void* packed, size_t stride, int n, size_t count,
                                       int bits_in, int block_in, int bits_out, int block_out,
                                       unsigned flags_out, zppQuantSumOrder_t order, void* packed_out) {
  const char* fn = "zppQuantReduceRequantEx";
  ZPP_ARGCHECK(packed_out != NULL, "%s: packed_out is NULL", fn);
  ZPP_ARGCHECK((flags_out & ~(unsigned)ZPP_QUANT_ROTATE) == 0,
               "%s: flags_out 0x%x unknown (0 or ZPP_QUANT_ROTATE)", fn, flags_out);
  ZPPCHECK(checkInputs(fn, packed, stride, n, count, bits_in, block_in, order));
  ZPP_ARGCHECK(zppQuantValidParams(bits_out, block_out),
               "%s: bits_out %d / block_out %d: expected 2, 4 or 8 and a power of two in [%d, %d]", fn,
               bits_out, block_out, ZPP_QUANT_MIN_BLOCK, ZPP_QUANT_MAX_BLOCK);
  /* The output is written group by group while inputs are still read: an
   * output that overlaps the inputs is refused, as by zppQuantReduceRequant. */
  uintptr_t inLo = (uintptr_t)packed;
  uintptr_t inHi = inLo + (size_t)(n - 1) * stride + zppQuantPackedSize(count, bits_in, block_in);
  uintptr_t outLo = (uintptr_t)packed_out;
  uintptr_t outHi = outLo + zppQuantPackedSize(count, bits_out, block_out);
  ZPP_ARGCHECK(!(outLo < inHi && inLo < outHi), "%s: packed_out overlaps the inputs", fn);
  float acc[ZPP_QUANT_ESC_GROUP];
  ZPPCHECK(zppQuantFrame(fn, acc, zppFloat32, count, bits_out, block_out, packed_out));
  uint8_t* po = (uint8_t*)packed_out;
  if (flags_out & ZPP_QUANT_ROTATE) po[6] |= ZPP_QUANT_FLAG_ROTATED;
  uint8_t tmp[GROUP_SEG_BYTES];
  uint8_t direct[ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK];
  const size_t dataOut = zppQuantDataOffset(count, block_out);
  const size_t escOut = zppQuantEscOffset(count, bits_out, block_out);
  /* The direct order: blocks quantized from r where it applies. */
  const int useDirect =
      order == ZPP_QUANT_SUM_ROTATED_DIRECT && (flags_out & ZPP_QUANT_ROTATE) && block_in == block_out;
  const zppQuantSumOrder_t sums = order == ZPP_QUANT_SUM_SIMPLE ? order : ZPP_QUANT_SUM_ROTATED_DOMAIN;
  const size_t nbOut = (size_t)block_out;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++) {
    size_t base = g * ZPP_QUANT_ESC_GROUP;
    size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
    size_t nb = zppQuantNumBlocks(glen, block_out), nfall = nb;
    if (useDirect) {
      nfall = directGroup((const uint8_t*)packed, stride, n, count, bits_in, block_in, bits_out, g, acc,
                          po, direct);
      if (nfall == 0) { /* every block direct: no escape, an empty table */
        zppQuantEscClearTable(po + escOut + g * ZPP_QUANT_ESC_TABLE_BYTES);
        continue;
      }
    } else {
      sumGroup((const uint8_t*)packed, stride, n, count, bits_in, block_in, sums, g, acc, NULL);
    }
    /* Groups encode independently (blocks, tables): one group's segment
     * (the direct blocks are +0 in acc: no escape, no marker, overwritten). */
    ZPPCHECK(zppQuantizeEx(acc, zppFloat32, glen, bits_out, block_out, flags_out, tmp));
    po[6] |= (uint8_t)(tmp[6] & ZPP_QUANT_FLAG_MARKERS);
    if (nfall == nb) {
      memcpy(po + ZPP_QUANT_HEADER_BYTES + 4 * (base / nbOut), tmp + ZPP_QUANT_HEADER_BYTES, 4 * nb);
      memcpy(po + dataOut + zppQuantByteOf(base, bits_out), tmp + zppQuantDataOffset(glen, block_out),
             zppQuantDataBytes(glen, bits_out));
    } else {
      const size_t bytes = zppQuantDataBytes(nbOut, bits_out);
      for (size_t k = 0; k < nb; k++) {
        if (direct[k]) continue;
        size_t at = base + k * nbOut; /* a short last block: its bytes are the segment's last */
        size_t len = glen - k * nbOut < nbOut ? glen - k * nbOut : nbOut;
        memcpy(po + ZPP_QUANT_HEADER_BYTES + 4 * (at / nbOut), tmp + ZPP_QUANT_HEADER_BYTES + 4 * k, 4);
        memcpy(po + dataOut + zppQuantByteOf(at, bits_out),
               tmp + zppQuantDataOffset(glen, block_out) + bytes * k, zppQuantDataBytes(len, bits_out));
      }
    }
    memcpy(po + escOut + g * ZPP_QUANT_ESC_TABLE_BYTES,
           tmp + zppQuantEscOffset(glen, bits_out, block_out), ZPP_QUANT_ESC_TABLE_BYTES);
  }
  return zppSuccess;
}

zppResult_t zppDequantizeSumEx(const void* packed, size_t stride, int n, size_t count, int bits,
                               int block, float divisor, void* out, zppDataType_t dtype) {
  return zppDequantizeSumOrder(packed, stride, n, count, bits, block, divisor, out, dtype,
                               ZPP_QUANT_SUM_QGZ);
}

zppResult_t zppQuantReduceRequantEx(const void* packed, size_t stride, int n, size_t count, int bits_in,
                                    int block_in, int bits_out, int block_out, unsigned flags_out,
                                    void* packed_out) {
  return zppQuantReduceRequantOrder(packed, stride, n, count, bits_in, block_in, bits_out, block_out,
                                    flags_out, ZPP_QUANT_SUM_QGZ, packed_out);
}
