/*
 * Escapes (zpp_quant.h, "Escapes"), for every CPU implementation at once.
 *
 * The implementations encode and decode as if escapes did not exist; this
 * file then fixes up what escapes change, with the reference code of
 * quant_ref.h. Escapes are rare (garbage, overflow, a lone spike), so the
 * fix-ups cost a scan on ordinary data:
 * - encoding: a block that may hold a candidate has a NaN scale (a
 *   non-finite element) or at most E non-zero q (zpp_quant.h says why); an
 *   escape group with such a block is encoded again from its input. The
 *   scan stops at the (E+1)-th non-zero q, a few bytes into most blocks;
 *   the vector implementations count the non-zero q while they encode and
 *   hint which groups cannot hold such a block, so that their scan is
 *   skipped (the packed data is not read again).
 * - decoding: the escaped elements decode to 0 in the packed data; their
 *   values are added from the tables, after the packed values, in input
 *   order, which is the order the spec defines. Markers (only in segments
 *   whose header flag says so) decode to NaN.
 * - the fused reduce-requantize: an output group whose inputs have escapes
 *   or markers, or whose blocks may hold a candidate, is summed and encoded
 *   again.
 */
#include <stdatomic.h>
#include <string.h>

#include "log.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_quant.h"

static _Thread_local zppQuantEscCounts_t threadCounts;

void zppQuantTakeEscapeCounts(uint64_t* escapes, uint64_t* overflows) {
  if (escapes) *escapes += threadCounts.escapes;
  if (overflows) *overflows += threadCounts.overflows;
  threadCounts.escapes = 0;
  threadCounts.overflows = 0;
}

/* Adds a call's counts to the thread's, saying once per process what an
 * overflow means. */
static void addCounts(const zppQuantEscCounts_t* c) {
  static atomic_int warned;
  threadCounts.escapes += c->escapes;
  threadCounts.overflows += c->overflows;
  if (c->overflows > 0 && atomic_exchange(&warned, 1) == 0)
    ZPP_WARN(QUANT,
             "a block had more outliers (elements 2^K above the rest of it) than the %d escape "
             "slots of its %d elements had room for: they stayed in their block and set its "
             "scale, so its smaller elements kept only the precision of that scale (within the "
             "codec's bound; counted as escape overflows in the statistics; said once)",
             ZPP_QUANT_ESC_SLOTS, ZPP_QUANT_ESC_GROUP);
}

/* 1 when block b of a segment may hold a candidate or a non-finite element:
 * its scale is NaN, or it is non-zero with at most E non-zero q. */
static int blockMayEscape(const uint8_t* scales, const uint8_t* data, size_t count, int bits, int block,
                          size_t b) {
  float s = zppQuantLoadScale(scales, b);
  if (s != s) return 1;
  if (s == 0.0f) return 0;
  size_t lo = b * (size_t)block;
  size_t hi = count - lo < (size_t)block ? count : lo + (size_t)block;
  /* Bytes of the block's q values, 8 at a time: a non-zero byte (int8),
   * nibble (int4) or 2-bit field (int2) leaves one bit of its lane set after
   * the OR-folds. */
  const uint8_t* p = data + zppQuantByteOf(lo, bits);
  size_t nbytes = zppQuantDataBytes(hi - lo, bits);
  const uint64_t lanes = bits == 8   ? 0x0101010101010101ull
                         : bits == 4 ? 0x1111111111111111ull
                                     : 0x5555555555555555ull;
  int nonzero = 0;
  for (size_t k = 0; k < nbytes; k += 8) {
    uint64_t w = 0;
    if (nbytes - k >= 8)
      memcpy(&w, p + k, 8); /* a constant size: one load, no call */
    else
      memcpy(&w, p + k, nbytes - k);
    w |= w >> 1;
    if (bits != 2) w |= w >> 2;
    if (bits == 8) w |= w >> 4;
    /* The lanes' bits summed without a popcount instruction (baseline
     * x86-64 has none): int4 and int2 lanes add up into bytes first. */
    w &= lanes;
    if (bits == 2) w = (w + (w >> 2)) & 0x3333333333333333ull;
    if (bits != 8) w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0full;
    nonzero += (int)((w * 0x0101010101010101ull) >> 56);
    if (nonzero > ZPP_QUANT_ESC_PER_BLOCK) return 0;
  }
  return 1;
}

static int groupMayEscape(const uint8_t* scales, const uint8_t* data, size_t count, int bits, int block,
                          size_t g) {
  size_t b0 = g * (ZPP_QUANT_ESC_GROUP / (size_t)block);
  size_t b1 = zppQuantNumBlocks(count, block);
  if (b1 > b0 + ZPP_QUANT_ESC_GROUP / (size_t)block) b1 = b0 + ZPP_QUANT_ESC_GROUP / (size_t)block;
  for (size_t b = b0; b < b1; b++)
    if (blockMayEscape(scales, data, count, bits, block, b)) return 1;
  return 0;
}

static size_t groupLen(size_t count, size_t g) {
  size_t lo = g * ZPP_QUANT_ESC_GROUP;
  return count - lo < ZPP_QUANT_ESC_GROUP ? count - lo : ZPP_QUANT_ESC_GROUP;
}

/* The header's flag bit: the segment holds markers. */
static int hasMarkers(const uint8_t* seg) { return seg[6] & ZPP_QUANT_FLAG_MARKERS; }

/* Slot j of a group's table, when used: its element (relative to the
 * group) and value. A used slot past its group (a corrupt table behind a
 * valid header) ends the table rather than reach outside the output. */
static int slotAt(const uint8_t* table, int j, size_t glen, size_t* rel, float* v) {
  if (j >= ZPP_QUANT_ESC_SLOTS) return 0;
  unsigned idx = zppQuantEscIndex(table, j);
  if (idx == ZPP_QUANT_ESC_EMPTY || idx >= glen) return 0;
  *rel = idx;
  *v = zppQuantEscValue(table, j);
  return 1;
}

/* The first marked element in [i, end), or end: at once when the header
 * says the segment has no markers. */
static size_t nextMarker(const uint8_t* seg, size_t count, int bits, int block, size_t i, size_t end) {
  if (!hasMarkers(seg)) return end;
  const uint8_t* data = seg + zppQuantDataOffset(count, block);
  while (i < end && !zppQuantIsMarker(data, bits, i)) i++;
  return i;
}

/* 1 when group g of a segment holds a marker. */
static int groupHasMarker(const uint8_t* seg, size_t count, int bits, int block, size_t g) {
  size_t end = g * ZPP_QUANT_ESC_GROUP + groupLen(count, g);
  return nextMarker(seg, count, bits, block, g * ZPP_QUANT_ESC_GROUP, end) < end;
}

void zppQuantEscEncode(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                       uint8_t* packed, const uint8_t* hints) {
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  uint8_t* tables = packed + zppQuantEscOffset(count, bits, block);
  zppQuantEscCounts_t counts = {0, 0};
  int marked = 0;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++) {
    uint8_t* table = tables + g * ZPP_QUANT_ESC_TABLE_BYTES;
    if ((hints != NULL && hints[g] == 0) || !groupMayEscape(scales, data, count, bits, block, g)) {
      zppQuantEscClearTable(table);
      continue;
    }
    float x[ZPP_QUANT_ESC_GROUP];
    size_t base = g * ZPP_QUANT_ESC_GROUP, glen = groupLen(count, g);
    for (size_t i = 0; i < glen; i++) x[i] = zppQuantLoadOne(in, dtype, base + i);
    marked |= zppQuantEncodeGroupRef(x, glen, base, bits, block, scales, data, table, &counts);
  }
  if (marked) packed[6] |= ZPP_QUANT_FLAG_MARKERS;
  addCounts(&counts);
}

int zppQuantEscEncodeGroup(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                           uint8_t* packed, size_t g) {
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  uint8_t* table = packed + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES;
  zppQuantEscCounts_t counts = {0, 0};
  float x[ZPP_QUANT_ESC_GROUP];
  size_t base = g * ZPP_QUANT_ESC_GROUP, glen = groupLen(count, g);
  for (size_t i = 0; i < glen; i++) x[i] = zppQuantLoadOne(in, dtype, base + i);
  int marked = zppQuantEncodeGroupRef(x, glen, base, bits, block, scales, data, table, &counts);
  addCounts(&counts);
  return marked;
}

/* 1 when the group's table has a used slot. */
static int tableUsed(const uint8_t* table) { return zppQuantEscIndex(table, 0) != ZPP_QUANT_ESC_EMPTY; }

static const uint8_t* groupTable(const uint8_t* seg, size_t count, int bits, int block, size_t g) {
  return seg + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES;
}

/* The spec's sum of element i over n inputs: the packed values in input
 * order from 0 (a marker is NaN), then the escaped values in input order. */
static float sumOne(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                    size_t i) {
  float sum = 0.0f;
  for (int k = 0; k < n; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    const uint8_t* data = seg + zppQuantDataOffset(count, block);
    float s = zppQuantLoadScale(zppQuantScalesPtr(seg), i / (size_t)block);
    int q = zppQuantGetQ(data, bits, i);
    sum = sum + (q == -zppQuantQmax(bits) - 1 ? zppF32FromBits(ZPP_QUANT_NAN_BITS) : (float)q * s);
  }
  size_t g = i / ZPP_QUANT_ESC_GROUP;
  size_t at = i - g * ZPP_QUANT_ESC_GROUP, rel;
  float v;
  for (int k = 0; k < n; k++) {
    const uint8_t* table = groupTable(packed + (size_t)k * stride, count, bits, block, g);
    for (int j = 0; slotAt(table, j, groupLen(count, g), &rel, &v); j++)
      if (rel == at) sum = sum + v;
  }
  return sum;
}

void zppQuantEscRequant(const uint8_t* packed, size_t stride, int n, size_t count, int bits_in,
                        int block_in, int bits_out, int block_out, uint8_t* packed_out,
                        const uint8_t* hints) {
  uint8_t* scales = packed_out + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed_out + zppQuantDataOffset(count, block_out);
  uint8_t* tables = packed_out + zppQuantEscOffset(count, bits_out, block_out);
  zppQuantEscCounts_t counts = {0, 0};
  int marked = 0;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++) {
    uint8_t* table = tables + g * ZPP_QUANT_ESC_TABLE_BYTES;
    int redo =
        (hints == NULL || hints[g] != 0) && groupMayEscape(scales, data, count, bits_out, block_out, g);
    for (int k = 0; k < n && !redo; k++) {
      const uint8_t* seg = packed + (size_t)k * stride;
      redo = tableUsed(groupTable(seg, count, bits_in, block_in, g)) ||
             groupHasMarker(seg, count, bits_in, block_in, g);
    }
    if (!redo) {
      zppQuantEscClearTable(table);
      continue;
    }
    float x[ZPP_QUANT_ESC_GROUP];
    size_t base = g * ZPP_QUANT_ESC_GROUP, glen = groupLen(count, g);
    for (size_t i = 0; i < glen; i++)
      x[i] = sumOne(packed, stride, n, count, bits_in, block_in, base + i);
    marked |= zppQuantEncodeGroupRef(x, glen, base, bits_out, block_out, scales, data, table, &counts);
  }
  if (marked) packed_out[6] |= ZPP_QUANT_FLAG_MARKERS;
  addCounts(&counts);
}

void zppQuantEscDequantize(const uint8_t* packed, size_t count, int bits, int block, void* out,
                           zppDataType_t dtype) {
  size_t rel;
  float v;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++) {
    const uint8_t* table = groupTable(packed, count, bits, block, g);
    for (int j = 0; slotAt(table, j, groupLen(count, g), &rel, &v); j++)
      zppQuantStoreOne(out, dtype, g * ZPP_QUANT_ESC_GROUP + rel, v);
  }
  for (size_t i = nextMarker(packed, count, bits, block, 0, count); i < count;
       i = nextMarker(packed, count, bits, block, i + 1, count))
    zppQuantStoreOne(out, dtype, i, zppF32FromBits(ZPP_QUANT_NAN_BITS));
}

void zppQuantEscAccumulate(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                           int block, float* acc) {
  size_t rel;
  float v;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++)
    for (int k = 0; k < n; k++) {
      const uint8_t* table = groupTable(packed + (size_t)k * stride, count, bits, block, g);
      for (int j = 0; slotAt(table, j, groupLen(count, g), &rel, &v); j++)
        acc[g * ZPP_QUANT_ESC_GROUP + rel] = acc[g * ZPP_QUANT_ESC_GROUP + rel] + v;
    }
  /* A marker makes its element's sum NaN, whatever the order. */
  for (int k = 0; k < n; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    for (size_t i = nextMarker(seg, count, bits, block, 0, count); i < count;
         i = nextMarker(seg, count, bits, block, i + 1, count))
      acc[i] = zppF32FromBits(ZPP_QUANT_NAN_BITS);
  }
}

void zppQuantEscSum(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                    float divisor, void* out, zppDataType_t dtype) {
  size_t rel;
  float v;
  for (size_t g = 0; g < zppQuantNumGroups(count); g++)
    for (int k = 0; k < n; k++) {
      const uint8_t* table = groupTable(packed + (size_t)k * stride, count, bits, block, g);
      for (int j = 0; slotAt(table, j, groupLen(count, g), &rel, &v); j++) {
        /* Recomputed whole: the implementation stored the quotient of the
         * packed values only. An element escaped in several inputs is
         * recomputed once per input, to the same value. */
        size_t i = g * ZPP_QUANT_ESC_GROUP + rel;
        float sum = sumOne(packed, stride, n, count, bits, block, i);
        if (divisor != 1.0f) sum = sum / divisor;
        zppQuantStoreOne(out, dtype, i, sum);
      }
    }
  for (int k = 0; k < n; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    for (size_t i = nextMarker(seg, count, bits, block, 0, count); i < count;
         i = nextMarker(seg, count, bits, block, i + 1, count))
      zppQuantStoreOne(out, dtype, i, zppF32FromBits(ZPP_QUANT_NAN_BITS));
  }
}
