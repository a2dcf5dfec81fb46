/*
 * Round trips over every dtype, int8 and int4, every block size, the sizes
 * 0, 1, block-1, block, block+1, odd multi-block counts, 2^20+3 and (16-bit
 * types, implementations against each other only) 2^22+4133, and data
 * that is normal, uniform, wide in dynamic range, and tiny (subnormal
 * scales). For each segment:
 *   - the header, and every scale and q recomputed from the spec's formulas
 *     (the test's own arithmetic, rounding with nearbyintf) must match;
 *   - every decoded element must equal the spec decoding (q * scale rounded
 *     to the output type) and lie within the documented bound of its input;
 *   - every implementation must produce the same bytes and outputs.
 * Then zero blocks and non-finite elements among normal ones, and the extremes: the
 * largest values of each type, tiny blocks (the 2^64 prescale), and the
 * subnormal-scale case that the bound's last term exists for.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"
#include "quant_testlib.h"

static const char* gImpls[QT_MAX_IMPLS];
static int gNimpl;
static const zppDataType_t kTypes[3] = {zppFloat32, zppFloat16, zppBfloat16};

/* Max |x| of a block in double, escaped and marked elements (esc[i] 1 and
 * 3) left out: a candidate that found no slot (2) stays in; sets
 * *nonfinite. */
static double blockAmax(const void* in, zppDataType_t dtype, size_t lo, size_t hi, const char* esc,
                        int* nonfinite) {
  double a = 0;
  *nonfinite = 0;
  for (size_t i = lo; i < hi; i++) {
    if (esc[i] == 1 || esc[i] == 3) continue;
    double x = qtGet(in, dtype, i);
    if (!isfinite(x))
      *nonfinite = 1;
    else if (fabs(x) > a)
      a = fabs(x);
  }
  return a;
}

/* Checks the escape tables against the expected escapes: slots in index
 * order holding the input values, the rest unused. */
static long checkTables(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                        const uint8_t* seg, const char* esc, const char* what) {
  long bad = 0;
  for (size_t g = 0; g * 4096 < count; g++) {
    int j = 0;
    for (size_t i = g * 4096; i < count && i < (g + 1) * 4096; i++) {
      if (esc[i] != 1) continue;
      float x = (float)qtGet(in, dtype, i), v;
      uint32_t vb = qtEscSlotBits(seg, count, bits, block, g, j);
      memcpy(&v, &vb, 4);
      if (j >= 8 || qtEscSlotIndex(seg, count, bits, block, g, j) != i - g * 4096 ||
          !(isnan(x) ? isnan(v) : zppF32Bits(x) == vb)) {
        if (bad++ == 0) fprintf(stderr, "%s: element %zu (%a) not in escape slot %d\n", what, i, x, j);
      }
      j++;
    }
    for (; j < 8; j++)
      if (qtEscSlotIndex(seg, count, bits, block, g, j) != 0xffff ||
          qtEscSlotBits(seg, count, bits, block, g, j) != 0) {
        if (bad++ == 0) fprintf(stderr, "%s: group %zu slot %d should be unused\n", what, g, j);
      }
  }
  return bad;
}

/* Checks one segment against its input: header, scales and q from the
 * spec, escapes, padding. Returns the number of problems (reported once). */
static long checkEncoding(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                          const uint8_t* seg, const char* what) {
  long bad = 0;
  int Q = qtQmax(bits);
  qtHeader_t h = qtReadHeader(seg);
  char* esc = malloc(count + 1);
  REQUIRE(esc != NULL);
  /* The header's flag: markers present (non-finite candidates of blocks
   * that overflowed). */
  qtExpectEscapes(in, dtype, count, bits, block, esc);
  int flag = 0;
  for (size_t i = 0; i < count; i++) flag |= esc[i] == 3;
  if (h.magic != ZPP_QUANT_MAGIC || h.bits != bits || (1 << h.blockLog2) != block ||
      h.reserved != flag || h.count != count) {
    CHECK_MSG(0, "%s: bad header (flags 0x%x, want %d)", what, h.reserved, flag);
    free(esc);
    return 1;
  }
  bad += checkTables(in, dtype, count, bits, block, seg, esc, what);
  size_t nb = (count + block - 1) / block;
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * block, hi = lo + block < count ? lo + block : count;
    int nonfinite;
    float a = (float)blockAmax(in, dtype, lo, hi, esc, &nonfinite); /* exact: an input value */
    float s = qtScale(seg, count, block, b);
    float want;
    float p = 1.0f, inv = 0.0f;
    if (nonfinite) {
      want = zppF32FromBits(0x7fc00000u);
    } else if (a == 0.0f) {
      want = 0.0f;
    } else {
      p = a < 0x1p-64f ? 0x1p64f : 1.0f;
      want = a / (float)Q;
      inv = (float)Q / (a * p);
    }
    if (zppF32Bits(s) != zppF32Bits(want)) {
      if (bad++ == 0)
        fprintf(stderr, "%s: block %zu scale %a (0x%08x), want %a\n", what, b, s, zppF32Bits(s), want);
      continue;
    }
    for (size_t i = lo; i < hi; i++) {
      int q = qtQ(seg, count, bits, block, i);
      int wq = 0;
      if (esc[i] == 3) wq = -Q - 1; /* the marker */
      if (!nonfinite && a != 0.0f && (esc[i] == 0 || esc[i] == 2)) {
        float x = (float)qtGet(in, dtype, i);
        float t = (x * p) * inv;
        wq = (int)nearbyintf(t);
        wq = wq > Q ? Q : wq < -Q ? -Q : wq;
      }
      if (q != wq) {
        if (bad++ == 0) fprintf(stderr, "%s: element %zu q %d, want %d\n", what, i, q, wq);
        break;
      }
    }
  }
  /* An odd int4 count leaves the last high nibble 0, an int2 count that is
   * not a multiple of 4 the last byte's unused fields; the padding before
   * and after the escape tables is zero. */
  size_t dataEnd = 16 + 4 * nb + qtDataBytes(count, bits);
  size_t tables = (dataEnd + 3) / 4 * 4, used = qtUsedBytes(count, bits, block);
  size_t perByte = 8 / (size_t)bits, tail = count % perByte;
  if (tail != 0 && (seg[dataEnd - 1] >> (bits * tail)) != 0) {
    if (bad++ == 0) fprintf(stderr, "%s: unused fields of the last data byte not 0\n", what);
  }
  for (size_t i = dataEnd; i < zppQuantPackedSize(count, bits, block); i++)
    if ((i < tables || i >= used) && seg[i] != 0) {
      if (bad++ == 0) fprintf(stderr, "%s: padding byte %zu is 0x%02x\n", what, i, seg[i]);
      break;
    }
  free(esc);
  return bad;
}

/* Checks decoded output of type T against the segment and the input. */
static long checkDecoding(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                          const uint8_t* seg, const void* out, zppDataType_t T, const char* what) {
  long bad = 0;
  char* esc = malloc(count + 1);
  REQUIRE(esc != NULL);
  qtExpectEscapes(in, dtype, count, bits, block, esc);
  for (size_t i = 0; i < count; i++) {
    float s = qtScale(seg, count, block, i / block);
    double x = qtGet(in, dtype, i);
    double y = qtGet(out, T, i);
    uint32_t ybits = qtBits(out, T, i);
    int ok;
    float e;
    if (qtEscaped(seg, count, bits, block, i, &e)) {
      /* An escaped element decodes to itself, rounded to T. */
      uint8_t ref[4];
      qtSet(ref, T, 0, e);
      ok = isnan(x) ? isnan(y) : qtBits(ref, T, 0) == ybits && (double)e == x;
    } else if (isnan(s) || qtQ(seg, count, bits, block, i) == -qtQmax(bits) - 1) {
      /* A NaN scale or a marker: the output type's canonical NaN. */
      ok = ybits == (T == zppFloat32 ? 0x7fc00000u : T == zppFloat16 ? 0x7e00u : 0x7fc0u);
    } else {
      /* The spec's decoding, exactly... */
      uint8_t ref[4];
      qtSet(ref, T, 0, qtDecoded(seg, count, bits, block, i));
      ok = ybits == qtBits(ref, T, 0);
      /* ...within the documented bound of the input, every one of them
       * (also the candidates that found no slot), and a zero block decodes
       * to +0 exactly. */
      if (ok) ok = isfinite(y) && fabs(y - x) <= qtBound(x, s, bits, T);
      if (ok && s == 0.0f && x == 0.0) ok = ybits == 0;
    }
    if (!ok) {
      if (bad++ < 3)
        fprintf(stderr, "%s -> %s: element %zu x %a y %a (scale %a, bound %a)\n", what, qtTypeName(T),
                i, x, y, s, qtBound(x, s, bits, T));
    }
  }
  free(esc);
  return bad;
}

/* Output types to decode to, besides fp32 and the input's own type (the
 * others only when the data fits their range). */
#define OUT_FP16 2
#define OUT_BF16 4
#define OUT_ALL (OUT_FP16 | OUT_BF16)

static int wantOut(int o, zppDataType_t dtype, int outs) {
  if (kTypes[o] == zppFloat32 || kTypes[o] == dtype) return 1;
  return kTypes[o] == zppFloat16 ? (outs & OUT_FP16) != 0 : (outs & OUT_BF16) != 0;
}

/* The escape counts of the call just made (zppQuantTakeEscapeCounts, what
 * the communicator's statistics add up) against the spec's: the escaped
 * elements and the blocks that overflowed their table. */
static long checkCounts(const void* in, zppDataType_t dtype, size_t count, int bits, int block) {
  char* esc = malloc(count + 1);
  REQUIRE(esc != NULL);
  uint64_t wantOverflows = (uint64_t)qtExpectEscapes(in, dtype, count, bits, block, esc),
           wantEscapes = 0;
  for (size_t i = 0; i < count; i++) wantEscapes += esc[i] == 1;
  free(esc);
  uint64_t escapes = 0, overflows = 0;
  zppQuantTakeEscapeCounts(&escapes, &overflows);
  if (escapes == wantEscapes && overflows == wantOverflows) return 0;
  fprintf(stderr, "%llu escapes and %llu overflowing blocks counted, the spec says %llu and %llu\n",
          (unsigned long long)escapes, (unsigned long long)overflows, (unsigned long long)wantEscapes,
          (unsigned long long)wantOverflows);
  return 1;
}

/* Quantizes `in` with every implementation, checks each result, checks
 * that all implementations agree bit for bit. */
static void checkCase(const void* in, zppDataType_t dtype, size_t count, int bits, int block, int outs,
                      const char* label) {
  char what[160];
  size_t size = zppQuantPackedSize(count, bits, block);
  uint8_t* seg[QT_MAX_IMPLS];
  void* out[QT_MAX_IMPLS][3];
  for (int k = 0; k < gNimpl; k++) {
    seg[k] = malloc(size + 16);
    REQUIRE(seg[k] != NULL);
    memset(seg[k], 0xa5, size + 16);
    qtUse(gImpls[k]);
    snprintf(what, sizeof what, "%s %s %s int%d block %d count %zu", gImpls[k], label,
             qtTypeName(dtype), bits, block, count);
    zppQuantTakeEscapeCounts(NULL, NULL);
    CHECK_MSG(zppQuantize(in, dtype, count, bits, block, seg[k]) == zppSuccess, "%s", what);
    CHECK_MSG(seg[k][size] == 0xa5, "%s: wrote past the segment", what);
    CHECK_MSG(checkCounts(in, dtype, count, bits, block) == 0, "%s: escape counts", what);
    /* The spec's element by element checks on the first implementation (the
     * reference); every other one must equal its bytes and outputs bit for
     * bit (below), which holds it to the same. Checking each one again
     * found nothing more and cost most of this test's time (under ASan
     * 180 s, against 78 s now). */
    if (k == 0)
      CHECK_MSG(checkEncoding(in, dtype, count, bits, block, seg[k], what) == 0, "%s: encoding", what);
    for (int o = 0; o < 3; o++) {
      out[k][o] = malloc(count * 4 + 8);
      REQUIRE(out[k][o] != NULL);
      if (!wantOut(o, dtype, outs)) continue;
      memset(out[k][o], 0xee, count * 4 + 8);
      CHECK_MSG(zppDequantize(seg[k], count, bits, block, out[k][o], kTypes[o]) == zppSuccess, "%s",
                what);
      CHECK_MSG(((uint8_t*)out[k][o])[count * qtTypeSize(kTypes[o])] == 0xee,
                "%s: decode wrote past the end", what);
      if (k == 0)
        CHECK_MSG(checkDecoding(in, dtype, count, bits, block, seg[k], out[k][o], kTypes[o], what) == 0,
                  "%s: decoding to %s", what, qtTypeName(kTypes[o]));
    }
  }
  for (int k = 1; k < gNimpl; k++) {
    CHECK_MSG(memcmp(seg[0], seg[k], size) == 0, "%s: %s and %s packed bytes differ", what, gImpls[0],
              gImpls[k]);
    for (int o = 0; o < 3; o++) {
      if (!wantOut(o, dtype, outs)) continue;
      size_t d = qtFirstDiff(out[0][o], out[k][o], kTypes[o], count);
      CHECK_MSG(d == (size_t)-1, "%s: %s and %s decode to %s differently at %zu", what, gImpls[0],
                gImpls[k], qtTypeName(kTypes[o]), d);
    }
  }
  for (int k = 0; k < gNimpl; k++) {
    free(seg[k]);
    for (int o = 0; o < 3; o++) free(out[k][o]);
  }
}

static void checkRandom(zppTestRng_t* rng) {
  for (int t = 0; t < 3; t++)
    for (int bits = 8; bits >= 2; bits /= 2)
      for (int block = 32; block <= 4096; block *= 2) {
        size_t sizes[] = {
            0, 1, 2, (size_t)block - 1, (size_t)block, (size_t)block + 1, 3 * (size_t)block + 7};
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
          for (int d = 0; d < QT_NDIST; d++) {
            size_t count = sizes[si];
            void* in = malloc(count * 4 + 4);
            REQUIRE(in != NULL);
            qtFill(in, kTypes[t], count, (qtDist_t)d, rng);
            checkCase(in, kTypes[t], count, bits, block, d == QT_WIDE ? OUT_BF16 : OUT_ALL,
                      qtDistName((qtDist_t)d));
            free(in);
          }
      }
}

/* Blocks with 0 to E + 1 non-zero elements (issue 43): zeros take no part
 * in the reference magnitude, so an element 2^K above the block's other
 * non-zero ones escapes, a lone non-zero element does not, and two equal
 * ones do not; groups of such blocks overflow their tables. checkCase
 * holds every implementation to the spec's model (qtExpectEscapes) and
 * every element to its bound. */
static void checkFewNonZero(zppTestRng_t* rng) {
  for (int t = 0; t < 3; t++)
    for (int bits = 8; bits >= 2; bits /= 2)
      for (int block = 32; block <= 4096; block *= 2)
        for (int nz = 0; nz <= ZPP_QUANT_ESC_PER_BLOCK + 1; nz++)
          for (int pattern = 0; pattern < 4; pattern++) {
            if (pattern == 3 && block < 4096 && (nz + block) % 2) continue; /* half of them */
            size_t count = ZPP_QUANT_ESC_GROUP + (size_t)block / 2 + 1;     /* a short last block */
            void* in = malloc(count * 4);
            REQUIRE(in != NULL);
            qtFillSparse(in, kTypes[t], count, block, bits, nz, pattern, rng);
            char label[48];
            snprintf(label, sizeof label, "%d non-zero, pattern %d", nz, pattern);
            checkCase(in, kTypes[t], count, bits, block, kTypes[t] == zppFloat16 ? OUT_ALL : OUT_BF16,
                      label);
            free(in);
          }
  /* The conformance program's case: in a block of 64 zeros, 1.5 and
   * -3.66e-4 (int4). 1.5 escapes; -3.66e-4 is quantized alone (its own
   * scale, within 2^-21 Q s of itself); one escape counted. */
  float in[64] = {1.5f, -3.66210938e-4f};
  uint8_t seg[256];
  float y[64];
  REQUIRE(zppQuantPackedSize(64, 4, 64) <= sizeof seg);
  uint64_t escapes = 0, overflows = 0;
  zppQuantTakeEscapeCounts(NULL, NULL);
  CHECK(zppQuantize(in, zppFloat32, 64, 4, 64, seg) == zppSuccess);
  zppQuantTakeEscapeCounts(&escapes, &overflows);
  CHECK(zppDequantize(seg, 64, 4, 64, y, zppFloat32) == zppSuccess);
  float s = qtScale(seg, 64, 64, 0);
  CHECK_MSG(
      escapes == 1 && overflows == 0 && y[0] == 1.5f && zppF32Bits(s) == zppF32Bits(-in[1] / 7.0f) &&
          fabs((double)y[1] - (double)in[1]) <= qtBound(in[1], s, 4, zppFloat32),
      "1.5 beside -3.66e-4: %llu escapes, decoded %a %a", (unsigned long long)escapes, y[0], y[1]);
}

/* Groups whose outliers overflow their tables with real values (issue 43):
 * spikes 2^8 to 2^40 above Gaussian data in every block. Nothing is
 * saturated: the spikes that find no slot set their block's scale, and
 * checkCase holds every element, spikes included, to the bound of its
 * block's scale. */
static void checkSpikes(zppTestRng_t* rng) {
  static const int ratios[] = {8, 12, 16, 17, 24, 32, 40};
  const int blocks[] = {32, 64, 256, 4096};
  for (int t = 0; t < 3; t++)
    for (int bits = 8; bits >= 2; bits /= 2)
      for (int bi = 0; bi < 4; bi++)
        for (size_t ri = 0; ri < sizeof ratios / sizeof ratios[0]; ri++) {
          if (kTypes[t] == zppFloat16 && ratios[ri] > 24) continue; /* past fp16's range */
          size_t count = 2 * ZPP_QUANT_ESC_GROUP + 3 * (size_t)blocks[bi] / 2;
          void* in = malloc(count * 4);
          REQUIRE(in != NULL);
          qtFillSpikes(in, kTypes[t], count, blocks[bi], ratios[ri], rng);
          char label[48];
          snprintf(label, sizeof label, "spikes 2^%d", ratios[ri]);
          checkCase(in, kTypes[t], count, bits, blocks[bi], 0, label);
          free(in);
        }
}

static void checkLarge(zppTestRng_t* rng) {
  size_t count = ((size_t)1 << 20) + 3;
  void* in = malloc(count * 4);
  REQUIRE(in != NULL);
  const int blocks[] = {32, 256, 4096};
  for (int t = 0; t < 3; t++)
    for (int d = 0; d < 3; d += 2) { /* normal and wide */
      qtFill(in, kTypes[t], count, (qtDist_t)d, rng);
      for (int bits = 8; bits >= 2; bits /= 2)
        for (int b = 0; b < 3; b++)
          checkCase(in, kTypes[t], count, bits, blocks[b], d == QT_WIDE ? OUT_BF16 : OUT_ALL, "large");
    }
  free(in);
}

/* Segments past 4M 16-bit elements: the AVX-512 quantize switches to its
 * streaming schedule there. Every implementation's bytes and decoding must
 * still be the reference's, with zero, non-finite and (bf16) tiny blocks
 * among the normal ones. */
static void checkHuge(zppTestRng_t* rng) {
  size_t count = ((size_t)1 << 22) + 4096 + 37;
  const int blocks[] = {32, 64, 256, 4096};
  for (int t = 1; t < 3; t++) {
    zppDataType_t dt = kTypes[t];
    uint16_t* in = malloc(count * 2);
    uint16_t* y[QT_MAX_IMPLS];
    REQUIRE(in != NULL);
    qtFill(in, dt, count, QT_NORMAL, rng);
    for (int k = 0; k < 8192; k++)
      in[(size_t)3 << 20 | (size_t)k] = (k & 1) ? 0x8000 : 0; /* zero blocks */
    for (int k = 0; k < 4096; k++)
      in[((size_t)1 << 22) + (size_t)k] = (k & 1) ? 0x0001 : 0x8002; /* tiny (bf16) */
    qtSet(in, dt, 12345, NAN);
    qtSet(in, dt, ((size_t)1 << 21) + 777, INFINITY);
    qtSet(in, dt, count - 2, -INFINITY);
    for (int bits = 8; bits >= 2; bits /= 2)
      for (int bi = 0; bi < 4; bi++) {
        size_t size = zppQuantPackedSize(count, bits, blocks[bi]);
        uint8_t* seg[QT_MAX_IMPLS];
        for (int k = 0; k < gNimpl; k++) {
          seg[k] = malloc(size);
          y[k] = malloc(count * 2);
          REQUIRE(seg[k] != NULL && y[k] != NULL);
          qtUse(gImpls[k]);
          CHECK(zppQuantize(in, dt, count, bits, blocks[bi], seg[k]) == zppSuccess);
          CHECK(zppDequantize(seg[k], count, bits, blocks[bi], y[k], dt) == zppSuccess);
        }
        for (int k = 1; k < gNimpl; k++) {
          CHECK_MSG(memcmp(seg[0], seg[k], size) == 0,
                    "huge %s int%d block %d: %s and %s packed bytes differ", qtTypeName(dt), bits,
                    blocks[bi], gImpls[0], gImpls[k]);
          size_t d = qtFirstDiff(y[0], y[k], dt, count);
          CHECK_MSG(d == (size_t)-1, "huge %s int%d block %d: %s and %s decode differently at %zu",
                    qtTypeName(dt), bits, blocks[bi], gImpls[0], gImpls[k], d);
        }
        for (int k = 0; k < gNimpl; k++) {
          free(seg[k]);
          free(y[k]);
        }
      }
    free(in);
  }
}

/* Zero blocks (+0 and -0) and blocks with Inf or NaN among normal blocks.
 * Non-finite elements are marked: each decodes to NaN in its own element,
 * however many there are (block 6 has five), and the block's scale fits the
 * rest. */
static void checkSpecialBlocks(zppTestRng_t* rng) {
  const int blocks[] = {32, 64, 256, 4096};
  for (int t = 0; t < 3; t++)
    for (int bits = 8; bits >= 2; bits /= 2)
      for (int bi = 0; bi < 4; bi++) {
        int block = blocks[bi];
        size_t count = 7 * (size_t)block + 5;
        zppDataType_t dt = kTypes[t];
        void* in = malloc(count * 4);
        REQUIRE(in != NULL);
        qtFill(in, dt, count, QT_NORMAL, rng);
        for (int i = 0; i < block; i++) qtSet(in, dt, block + i, (i & 1) ? -0.0f : 0.0f); /* block 1 */
        size_t pos = (size_t)(zppTestRngNext(rng) % (uint64_t)block);
        size_t inf2 = 2 * block + pos, nan3 = 3 * block + block - 1 - pos;
        qtSet(in, dt, inf2, INFINITY);       /* block 2 */
        qtSet(in, dt, nan3, NAN);            /* block 3 */
        qtSet(in, dt, 4 * block, -INFINITY); /* block 4, first element */
        qtSet(in, dt, 4 * block + block - 1, NAN);
        for (int k = 0; k < 5; k++) qtSet(in, dt, 6 * block + 3 * k, k & 1 ? NAN : INFINITY); /* 6 */
        qtSet(in, dt, count - 1, -NAN); /* tail block, last element */
        checkCase(in, dt, count, bits, block, OUT_ALL, "special");
        /* The expectations checkCase verifies, spelled out once more. */
        uint8_t* seg = malloc(zppQuantPackedSize(count, bits, block));
        float* y = malloc(count * 4);
        REQUIRE(seg && y);
        CHECK(zppQuantize(in, dt, count, bits, block, seg) == zppSuccess);
        CHECK(zppDequantize(seg, count, bits, block, y, zppFloat32) == zppSuccess);
        CHECK(zppF32Bits(qtScale(seg, count, block, 1)) == 0);
        for (int b = 2; b <= 7; b++) CHECK(qtScale(seg, count, block, b) > 0.0f);
        CHECK(isnan(y[inf2]) && isnan(y[nan3]) && isnan(y[4 * block]));
        CHECK(isnan(y[4 * block + block - 1]) && isnan(y[count - 1]));
        for (size_t i = 0; i < count; i++) {
          int special = i == inf2 || i == nan3 || i == 4 * (size_t)block ||
                        i == 4 * (size_t)block + block - 1 || i == count - 1;
          if (i / block == 1) CHECK(zppF32Bits(y[i]) == 0); /* exact +0, even for -0 inputs */
          int special6 =
              i / block == 6 && (i - 6 * (size_t)block) % 3 == 0 && i < 6 * (size_t)block + 15;
          if (special6)
            CHECK(isnan(y[i]));
          else if (!special)
            CHECK(isfinite(y[i]));
        }
        free(seg);
        free(y);
        free(in);
      }
}

/* One fp32 block given explicitly, int8, int4 and int2, every implementation. */
static void checkBlock(const float* x, size_t n, int outs, const char* label) {
  for (int bits = 8; bits >= 2; bits /= 2) checkCase(x, zppFloat32, n, bits, 32, outs, label);
}

static void checkExtremes(void) {
  float x[40];
  /* The largest value of each type with values down to its smallest. */
  for (int i = 0; i < 40; i++) x[i] = (float)(i - 20) * 1e36f;
  x[7] = 0x1p-149f;
  /* FLT_MAX is the one finite input the bound does not cover in int8:
   * 127 * fl(FLT_MAX / 127) rounds past FLT_MAX to Inf (zpp_quant.h). */
  x[3] = FLT_MAX;
  x[5] = -FLT_MAX;
  for (int bits = 8; bits >= 2; bits /= 2) {
    uint8_t seg[128];
    float y[40];
    qtUse("scalar");
    CHECK(zppQuantize(x, zppFloat32, 40, bits, 32, seg) == zppSuccess);
    CHECK(zppDequantize(seg, 40, bits, 32, y, zppFloat32) == zppSuccess);
    if (bits == 8) {
      CHECK(y[3] == INFINITY && y[5] == -INFINITY);
    } else {
      CHECK(isfinite(y[3]) && fabs((double)y[3] - FLT_MAX) <=
                                  qtBound(FLT_MAX, qtScale(seg, 40, 32, 0), bits, zppFloat32));
    }
    for (int k = 1; k < gNimpl; k++) {
      uint8_t seg2[128];
      qtUse(gImpls[k]);
      CHECK(zppQuantize(x, zppFloat32, 40, bits, 32, seg2) == zppSuccess);
      CHECK(memcmp(seg, seg2, zppQuantPackedSize(40, bits, 32)) == 0);
    }
  }
  x[3] = nextafterf(FLT_MAX, 0.0f);
  x[5] = -x[3];
  checkBlock(x, 40, 0, "near FLT_MAX");
  /* fp16 and bf16 extremes in their own type. */
  {
    uint16_t h[70], b[70];
    for (int i = 0; i < 70; i++) {
      h[i] = (uint16_t)(i * 937);                   /* spans subnormals to 65504 and beyond */
      if ((h[i] & 0x7c00) == 0x7c00) h[i] = 0x7bff; /* keep them finite */
      b[i] = (uint16_t)(i * 937);
      if ((b[i] & 0x7f80) == 0x7f80) b[i] = 0xff7f;
    }
    h[33] = 0x7bff;
    b[33] = 0x7f7f;
    for (int bits = 8; bits >= 2; bits /= 2) {
      checkCase(h, zppFloat16, 70, bits, 32, OUT_ALL, "fp16 extremes");
      checkCase(b, zppBfloat16, 70, bits, 32, 0, "bf16 extremes");
    }
  }
  /* Tiny blocks: max |x| just above, at and just below 2^-64 (the 2^64
   * prescale starts below it), and far below. */
  const float tops[] = {0x1.000002p-64f, 0x1p-64f, 0x1.fffffep-65f, 0x1p-100f, 0x1p-126f, 0x1.8p-140f};
  for (size_t k = 0; k < sizeof tops / sizeof tops[0]; k++) {
    for (int i = 0; i < 40; i++) x[i] = tops[k] * ((float)(i % 23) - 11.0f) / 11.0f;
    x[11] = tops[k];
    checkBlock(x, 40, OUT_ALL, "tiny");
  }
  /* The subnormal-scale case: max |x| = 571 * 2^-149 gives scale
   * fl(571/127) = 4 units of 2^-149 (4.496 rounded down), so the element at
   * the max decodes to 127 * 4 = 508 units: off by 63 units, far more than
   * s/2 + 2^-148 = 4 units, within the documented (Q+1) * 2^-150 term. */
  for (int i = 0; i < 32; i++) x[i] = 0.0f;
  x[0] = 571 * 0x1p-149f;
  {
    uint8_t seg[128]; /* 112 bytes: header, scale, data, escape table */
    float y[32];
    qtUse("scalar");
    CHECK(zppQuantize(x, zppFloat32, 32, 8, 32, seg) == zppSuccess);
    CHECK(zppDequantize(seg, 32, 8, 32, y, zppFloat32) == zppSuccess);
    CHECK(qtScale(seg, 32, 32, 0) == 4 * 0x1p-149f);
    CHECK(y[0] == 508 * 0x1p-149f);
    double s = 4 * 0x1p-149, err = 63 * 0x1p-149;
    CHECK(err > s / 2 + 0x1p-21 * 127 * s + 0x1p-148); /* the earlier constant was too small */
    CHECK(err <= qtBound(x[0], s, 8, zppFloat32));
  }
  checkBlock(x, 32, OUT_ALL, "subnormal scale");
  /* A whole block of the smallest subnormal: scale rounds to 0, yet q is
   * +-127 (the prescaled reciprocal is finite): decodes to +-0. */
  for (int i = 0; i < 32; i++) x[i] = (i & 1) ? -0x1p-149f : 0x1p-149f;
  checkBlock(x, 32, OUT_ALL, "smallest subnormals");
}

/* The escape hints (quant_impl.h) at the E/E+1 boundary. Escape group k of
 * the input is made of blocks of one kind:
 *   0: E+1 non-zero q, the (E+1)-th at 0.6/Q of the max (q = 1): no
 *      candidate, and the vector codecs must hint 0 (the scan is skipped);
 *   1: as 0, but one block has exactly E non-zero q, the rest 1e-4 (q = 0):
 *      those E escape, found by the exact test after a hint of 1;
 *   2: as 0, but one block has E non-zero q and its (E+1)-th element at
 *      0.45/Q (q = 0): hint 1 (the exact test decides);
 *   3: as 0, but one block holds a NaN: hint 1;
 *   4: all zero: hint 0;
 * then a short tail. Every implementation must give the scalar's bytes
 * (checkCase), and the hints must say 0 exactly where stated. */
static void fillHintBlock(void* in, zppDataType_t dtype, size_t lo, int block, int bits, int kind) {
  const float Q = (float)qtQmax(bits);
  for (int i = 0; i < block; i++) {
    float v = 0.0f;
    if (kind == 4)
      v = 0.0f;
    else if (i < ZPP_QUANT_ESC_PER_BLOCK)
      v = (i & 1) ? -1.0f : 1.0f;
    else if (i == ZPP_QUANT_ESC_PER_BLOCK)
      v = kind == 0 ? 0.6f / Q : kind == 2 ? -0.45f / Q : kind == 3 ? NAN : 1e-4f;
    else
      v = kind == 1 ? 1e-4f : 0.0f;
    qtSet(in, dtype, lo + (size_t)((i * 7) % block), v); /* spread over the block */
  }
}

static void checkEscapeHints(void) {
  const int blocks[] = {32, 64, 256, 4096};
  const size_t G = ZPP_QUANT_ESC_GROUP;
  for (int t = 0; t < 3; t++)
    for (int bits = 8; bits >= 2; bits /= 2)
      for (int bi = 0; bi < 4; bi++) {
        int block = blocks[bi];
        size_t count = 5 * G + 40;
        void* in = calloc(count, 4);
        REQUIRE(in != NULL);
        for (size_t lo = 0; lo + (size_t)block <= 5 * G; lo += (size_t)block) {
          int kind = (int)(lo / G);
          /* kinds 1-3: the group's special block is its last; the rest as 0 */
          int last = lo + 2 * (size_t)block > (lo / G + 1) * G;
          fillHintBlock(in, kTypes[t], lo, block, bits, kind == 4 || last ? kind : 0);
        }
        for (size_t i = 5 * G; i < count; i++) qtSet(in, kTypes[t], i, (float)(i % 5) - 2.0f);
        char label[64];
        snprintf(label, sizeof label, "escape hints");
        checkCase(in, kTypes[t], count, bits, block, 0, label);
        for (int k = 1; k < gNimpl; k++) {
          const zppQuantImpl_t* impl = zppQuantImplGet(gImpls[k]);
          REQUIRE(impl != NULL);
          uint8_t* seg = malloc(zppQuantPackedSize(count, bits, block));
          uint8_t hints[6];
          REQUIRE(seg != NULL);
          memset(hints, 0xee, sizeof hints);
          impl->quantize(in, kTypes[t], count, bits, block, seg, hints);
          /* int2 counts |x| >= max / 8 rather than q != 0 (quant_impl.h,
           * ZPP_QUANT_INT2_WIDE_T), over part of each block when it
           * quantizes a tensor: kinds 0 and 2 (E + 1 such elements) may hint
           * either way (-1); a 0 must still be right, which checkCase's
           * comparison with the model checks. */
          const int want[5] = {bits == 2 ? -1 : 0, 1, bits == 2 ? -1 : 1, 1, 0};
          for (int g = 0; g < 5; g++)
            CHECK_MSG(want[g] < 0 ? hints[g] <= 1 : hints[g] == want[g],
                      "%s %s int%d block %d: hint of group %d is %d, expected %d", gImpls[k],
                      qtTypeName(kTypes[t]), bits, block, g, hints[g], want[g]);
          CHECK_MSG(hints[5] <= 1, "%s: hint of the tail group is %d", gImpls[k], hints[5]);
          free(seg);
        }
        /* kind 1's block: its E elements escaped (the exact path ran) */
        uint8_t* seg = malloc(zppQuantPackedSize(count, bits, block));
        REQUIRE(seg != NULL);
        CHECK(zppQuantize(in, kTypes[t], count, bits, block, seg) == zppSuccess);
        int used = 0;
        for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++)
          used += qtEscSlotIndex(seg, count, bits, block, 1, j) != 0xffff;
        CHECK_MSG(used == ZPP_QUANT_ESC_PER_BLOCK,
                  "%s int%d block %d: %d escapes in group 1, expected %d", qtTypeName(kTypes[t]), bits,
                  block, used, ZPP_QUANT_ESC_PER_BLOCK);
        for (int g = 0; g < 5; g++)
          if (g != 1 && !(g == 2 && bits == 8)) /* int8: 2^8 * 0.45/Q < 1, kind 2's E escape */
            CHECK_MSG(qtEscSlotIndex(seg, count, bits, block, (size_t)g, 0) == 0xffff,
                      "%s int%d block %d: an escape in group %d", qtTypeName(kTypes[t]), bits, block,
                      g);
        free(seg);
        free(in);
      }
}

int main(void) {
  gNimpl = qtImpls(gImpls);
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 0x5eed0002);
  checkRandom(&rng);
  checkSpecialBlocks(&rng);
  checkExtremes();
  checkEscapeHints();
  checkFewNonZero(&rng);
  checkSpikes(&rng);
  checkLarge(&rng);
  checkHuge(&rng);
  return zppTestExit("test_quant_roundtrip");
}
