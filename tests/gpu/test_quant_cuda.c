/*
 * The CUDA codecs against the CPU codecs, byte for byte (zpp_quant.h: every
 * implementation performs the same fp32 operations, so packed segments are
 * identical and decoded values equal bit for bit, NaN payloads excepted).
 *
 * Built twice from this one source (see gpu_dev.h):
 *   test_quant_cuda      on a real GPU (label gpu; exit 77 without one);
 *   test_quant_cuda_emu  the same kernels emulated on the CPU (label quant),
 *                        so CI without a GPU runs every check below.
 *
 * Options: --quick (fewer and smaller cases: the compute-sanitizer run),
 * --probe (exit 0 if a device is usable, 77 otherwise; checks nothing),
 * --rotated-reduce (only the reductions of rotated segments).
 *
 * Every device output buffer is pre-filled with 0xA5 and surrounded by guard
 * bytes, and every CPU output with 0x5A: a byte either side forgets to write
 * (padding, a tail) differs, and a write out of bounds shows in the guards.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_dev.h"
#include "log.h"
#include "names.h"
#include "quant_kernels/zpp_half.h"
#include "quant_kernels/zpp_quant.h"
#include "testutil.h"

#define GUARD 64
#define DEV_FILL 0xA5
#define CPU_FILL 0x5A

static const zppDataType_t kTypes[] = {zppFloat32, zppFloat16, zppBfloat16};
static const int kBits[] = {8, 4, 2};
#define NBITS 3

/* The emulator runs every thread as a fiber: there int2, the third width,
 * takes every other block size of a sweep (case k), so that the test's time
 * stays near what two widths took. A real device runs every case. */
static int emuThin(int bits, size_t k) { return bits == 2 && k % 2 && tdevIsEmulated(); }
static const int kBlocks[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};

static int quick;
static zppTestRng_t rng;

/* 0, or ZPP_QUANT_ROTATE while the rotated sweeps run: compareCodec then
 * compares zppQuantizeEx / zppDequantizeEx with their CUDA twins. */
static unsigned quantFlags;
/* Blocks of the rotated segments compared so far, rotated and stored plain
 * (scale sign set): both kinds must have been seen. */
static size_t rotBlocks, rotPlainBlocks;

static const char* typeName(zppDataType_t t) { return zppDtypeShortName(t); }

static uint64_t rnd(void) { return zppTestRngNext(&rng); }
static size_t rndBelow(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---- element access ----------------------------------------------------------- */

static uint32_t bitsAt(const void* buf, zppDataType_t dt, size_t i) {
  if (dt == zppFloat32) {
    uint32_t u;
    memcpy(&u, (const uint8_t*)buf + 4 * i, 4);
    return u;
  }
  uint16_t h;
  memcpy(&h, (const uint8_t*)buf + 2 * i, 2);
  return h;
}

static void putBits(void* buf, zppDataType_t dt, size_t i, uint32_t bits) {
  if (dt == zppFloat32) {
    memcpy((uint8_t*)buf + 4 * i, &bits, 4);
  } else {
    uint16_t h = (uint16_t)bits;
    memcpy((uint8_t*)buf + 2 * i, &h, 2);
  }
}

/* Stores v rounded to nearest even in dt (the reference conversions). */
static void putF(void* buf, zppDataType_t dt, size_t i, float v) {
  uint32_t b = dt == zppFloat32   ? zppF32Bits(v)
               : dt == zppFloat16 ? zppFloatToHalf(v)
                                  : zppFloatToBf16(v);
  putBits(buf, dt, i, b);
}

static int isNaNBits(zppDataType_t dt, uint32_t b) {
  if (dt == zppFloat32) return (b & 0x7fffffffu) > 0x7f800000u;
  if (dt == zppFloat16) return (b & 0x7fffu) > 0x7c00u;
  return (b & 0x7fffu) > 0x7f80u;
}

/* ---- inputs ---------------------------------------------------------------------- */

enum {
  PAT_NORMAL,
  PAT_ZERO,
  PAT_NEGZERO,
  PAT_INF,
  PAT_NAN,
  PAT_TINY,
  PAT_DENORMAL,
  PAT_TIES,
  PAT_HUGE,
  PAT_SPARSE,
  PAT_COUNT
};

static float normalScaled(zppDataType_t dt) {
  /* Exponents across most of each format's range (fp16 results may round to
   * subnormals or zero, which is wanted). */
  int lo = dt == zppFloat32 ? -60 : dt == zppFloat16 ? -22 : -120;
  int hi = dt == zppFloat32 ? 60 : dt == zppFloat16 ? 12 : 120;
  int e = lo + (int)rndBelow((size_t)(hi - lo + 1));
  return (float)ldexp(zppTestRngNormal(&rng), e);
}

static void fillBlock(void* buf, zppDataType_t dt, size_t b0, size_t len, int pat, int bits) {
  const int Q = bits == 8 ? 127 : bits == 4 ? 7 : 1;
  for (size_t i = 0; i < len; i++) {
    size_t at = b0 + i;
    switch (pat) {
      case PAT_ZERO: putF(buf, dt, at, 0.0f); break;
      case PAT_NEGZERO: putF(buf, dt, at, -0.0f); break;
      case PAT_TINY: {
        /* Below 2^-64 (the 2^64 prescale), subnormals included; fp16 cannot
         * go there, so it gets its own subnormals. */
        uint32_t sign = (uint32_t)(rnd() & 1);
        if (dt == zppFloat16) {
          putBits(buf, dt, at, (sign << 15) | (uint32_t)(rnd() & 0x3ffu));
        } else {
          uint32_t f = (sign << 31) | ((uint32_t)rndBelow(63) << 23) | (uint32_t)(rnd() & 0x7fffffu);
          putBits(buf, dt, at, dt == zppFloat32 ? f : f >> 16);
        }
        break;
      }
      case PAT_DENORMAL: {
        /* Below 2^-121 the reciprocal Q / a overflows without the 2^64
         * prescale: fp32 / bf16 subnormals and the smallest normals. */
        uint32_t sign = (uint32_t)(rnd() & 1);
        if (dt == zppFloat16) {
          putBits(buf, dt, at, (sign << 15) | (uint32_t)(rnd() & 0x3fu));
        } else {
          uint32_t f = (sign << 31) | ((uint32_t)rndBelow(3) << 23) | (uint32_t)(rnd() & 0x7fffffu);
          putBits(buf, dt, at, dt == zppFloat32 ? f : f >> 16);
        }
        break;
      }
      case PAT_TIES: {
        /* scale and its reciprocal are powers of two, so x * inv = k + 0.5
         * exactly: round-half-even is what decides q. */
        int k = -Q + (int)rndBelow((size_t)(2 * Q));
        putF(buf, dt, at, (float)ldexp(k + 0.5, (int)rndBelow(3)));
        break;
      }
      case PAT_HUGE: {
        uint32_t sign = (uint32_t)(rnd() & 1);
        if (dt == zppFloat16) {
          putBits(buf, dt, at, (sign << 15) | (30u << 10) | (uint32_t)(rnd() & 0x3ffu));
        } else {
          uint32_t f =
              (sign << 31) | ((253u + (uint32_t)(rnd() & 1)) << 23) | (uint32_t)(rnd() & 0x7fffffu);
          putBits(buf, dt, at, dt == zppFloat32 ? f : f >> 16);
        }
        break;
      }
      case PAT_SPARSE: putF(buf, dt, at, 0.0f); break;
      default: putF(buf, dt, at, normalScaled(dt)); break;
    }
  }
  size_t pos = rndBelow(len);
  if (pat == PAT_INF) {
    putF(buf, dt, b0 + pos, (rnd() & 1) ? INFINITY : -INFINITY);
  } else if (pat == PAT_NAN) {
    /* Assorted NaNs: quiet and signalling, either sign, various payloads. */
    uint32_t payload = (uint32_t)rnd();
    uint32_t b = dt == zppFloat32   ? 0x7f800000u | ((payload & 0x7fffffu) | 1u)
                 : dt == zppFloat16 ? 0x7c00u | ((payload & 0x3ffu) | 1u)
                                    : 0x7f80u | ((payload & 0x7fu) | 1u);
    if (rnd() & 1) b |= dt == zppFloat32 ? 0x80000000u : 0x8000u;
    putBits(buf, dt, b0 + pos, b);
  } else if (pat == PAT_TIES) {
    putF(buf, dt, b0 + pos, (float)((rnd() & 1) ? Q : -Q)); /* the block max: scale 1 */
  } else if (pat == PAT_SPARSE) {
    putF(buf, dt, b0 + pos, normalScaled(dt));
  } else if (pat == PAT_NEGZERO && (rnd() & 1)) {
    putF(buf, dt, b0 + pos, -ldexpf(1.0f, -10));
  }
}

/* Fills count elements; with mix, about one block in three gets a special
 * pattern (zeros, Inf, NaN, tiny, ties, huge, sparse). */
static void fill(void* buf, zppDataType_t dt, size_t count, int block, int bits, int mix) {
  for (size_t b0 = 0; b0 < count; b0 += (size_t)block) {
    size_t len = count - b0 < (size_t)block ? count - b0 : (size_t)block;
    int pat = mix && rndBelow(3) == 0 ? (int)rndBelow(PAT_COUNT) : PAT_NORMAL;
    fillBlock(buf, dt, b0, len, pat, bits);
  }
}

/* ---- device buffers with guards ------------------------------------------------ */

typedef struct {
  uint8_t* base; /* allocation: GUARD + off + bytes + GUARD */
  uint8_t* p;    /* the region under test, `off` bytes past a 256-aligned start */
  size_t off, bytes;
} devbuf_t;

static devbuf_t dbAlloc(size_t bytes, size_t off) {
  devbuf_t b;
  b.off = off;
  b.bytes = bytes;
  b.base = tdevMalloc(256 + off + bytes + GUARD);
  b.p = b.base + 256 + off;
  tdevMemset(b.base, DEV_FILL, 256 + off + bytes + GUARD);
  return b;
}

static void dbFree(devbuf_t* b) { tdevFree(b->base); }

static void dbUpload(devbuf_t* b, const void* h) { tdevToDevice(b->p, h, b->bytes); }

/* Copies the region back and checks that the guards on both sides held. */
static void dbDownload(const devbuf_t* b, void* h, const char* what) {
  size_t total = 256 + b->off + b->bytes + GUARD;
  uint8_t* all = malloc(total);
  REQUIRE(all != NULL);
  tdevToHost(all, b->base, total);
  memcpy(h, all + 256 + b->off, b->bytes);
  size_t bad = 0;
  for (size_t i = 0; i < 256 + b->off; i++) bad += all[i] != DEV_FILL;
  for (size_t i = 256 + b->off + b->bytes; i < total; i++) bad += all[i] != DEV_FILL;
  CHECK_MSG(bad == 0, "%s: %zu guard bytes around the output were overwritten", what, bad);
  free(all);
}

static void* hAlloc(size_t bytes, int fillByte) {
  void* p = malloc(bytes ? bytes : 1);
  REQUIRE(p != NULL);
  memset(p, fillByte, bytes ? bytes : 1);
  return p;
}

/* ---- comparisons ----------------------------------------------------------------- */

static void comparePacked(const char* what, const uint8_t* cpu, const uint8_t* gpu, size_t count,
                          int bits, int block) {
  size_t size = zppQuantPackedSize(count, bits, block);
  size_t i = 0;
  while (i < size && cpu[i] == gpu[i]) i++;
  if (i == size) {
    CHECK(1);
    return;
  }
  size_t nb = (count + (size_t)block - 1) / (size_t)block;
  size_t dataOff = ZPP_QUANT_HEADER_BYTES + 4 * nb;
  size_t dataEnd = dataOff + (bits == 8 ? count : bits == 4 ? (count + 1) / 2 : (count + 3) / 4);
  size_t escOff = (dataEnd + 3) & ~(size_t)3;
  size_t escEnd =
      escOff + ZPP_QUANT_ESC_TABLE_BYTES * ((count + ZPP_QUANT_ESC_GROUP - 1) / ZPP_QUANT_ESC_GROUP);
  const char* region = i < ZPP_QUANT_HEADER_BYTES ? "header"
                       : i < dataOff              ? "scales"
                       : i < dataEnd              ? "data"
                       : i < escOff               ? "padding"
                       : i < escEnd               ? "escape tables"
                                                  : "padding";
  size_t diffs = 0;
  for (size_t k = 0; k < size; k++) diffs += cpu[k] != gpu[k];
  CHECK_MSG(0, "%s: packed differs in %zu of %zu bytes, first at byte %zu (%s): cpu 0x%02x gpu 0x%02x",
            what, diffs, size, i, region, cpu[i], gpu[i]);
  if (i >= ZPP_QUANT_HEADER_BYTES && i < dataOff) {
    size_t b = (i - ZPP_QUANT_HEADER_BYTES) / 4;
    uint32_t sc, sg;
    memcpy(&sc, cpu + ZPP_QUANT_HEADER_BYTES + 4 * b, 4);
    memcpy(&sg, gpu + ZPP_QUANT_HEADER_BYTES + 4 * b, 4);
    fprintf(stderr, "  block %zu scale: cpu 0x%08x gpu 0x%08x\n", b, sc, sg);
  }
  if (i >= escOff && i < escEnd)
    fprintf(stderr, "  escape table of group %zu\n", (i - escOff) / ZPP_QUANT_ESC_TABLE_BYTES);
}

/* Equal bit patterns, or both NaN (payloads may differ). */
static void compareValues(const char* what, const void* cpu, const void* gpu, zppDataType_t dt,
                          size_t count) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; i++) {
    uint32_t a = bitsAt(cpu, dt, i), b = bitsAt(gpu, dt, i);
    if (a == b || (isNaNBits(dt, a) && isNaNBits(dt, b))) continue;
    if (bad++ == 0) first = i;
  }
  CHECK_MSG(bad == 0, "%s: %zu of %zu %s values differ, first at %zu: cpu 0x%08x gpu 0x%08x", what, bad,
            count, typeName(dt), first, bad ? bitsAt(cpu, dt, first) : 0,
            bad ? bitsAt(gpu, dt, first) : 0);
}

/* ---- quantize and dequantize ------------------------------------------------------ */

/* Escape table of group g of a segment (zpp_quant.h's layout, computed here
 * independently of the codecs' helpers). */
static const uint8_t* escTable(const uint8_t* seg, size_t count, int bits, int block, size_t g) {
  size_t nb = (count + (size_t)block - 1) / (size_t)block;
  size_t dataEnd = ZPP_QUANT_HEADER_BYTES + 4 * nb +
                   (bits == 8   ? count
                    : bits == 4 ? (count + 1) / 2
                                : (count + 3) / 4);
  return seg + ((dataEnd + 3) & ~(size_t)3) + g * ZPP_QUANT_ESC_TABLE_BYTES;
}

static unsigned escIndex(const uint8_t* table, int j) {
  const uint8_t* p = table + 4 * ZPP_QUANT_ESC_SLOTS + 2 * j;
  return (unsigned)p[0] | ((unsigned)p[1] << 8);
}

/* Used slots of a segment's escape tables. */
static size_t countEscapes(const uint8_t* seg, size_t count, int bits, int block) {
  size_t n = 0;
  for (size_t g = 0; g * ZPP_QUANT_ESC_GROUP < count; g++)
    for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++)
      n += escIndex(escTable(seg, count, bits, block, g), j) != ZPP_QUANT_ESC_EMPTY;
  return n;
}

/* Every escaped element of `seg` (the input `in` quantized) must decode, in
 * the device's fp32 output `out`, to its input value exactly. */
static void checkEscapedExact(const char* what, const void* in, zppDataType_t dt, const uint8_t* seg,
                              size_t count, int bits, int block, const float* out) {
  size_t bad = 0, first = 0;
  for (size_t g = 0; g * ZPP_QUANT_ESC_GROUP < count; g++) {
    const uint8_t* table = escTable(seg, count, bits, block, g);
    for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
      unsigned idx = escIndex(table, j);
      if (idx == ZPP_QUANT_ESC_EMPTY) break;
      size_t i = g * ZPP_QUANT_ESC_GROUP + idx;
      uint32_t b = bitsAt(in, dt, i);
      float x = dt == zppFloat32   ? zppF32FromBits(b)
                : dt == zppFloat16 ? zppHalfToFloat((uint16_t)b)
                                   : zppBf16ToFloat((uint16_t)b);
      int ok = i < count && (isnan(x) ? isnan(out[i]) : zppF32Bits(x) == zppF32Bits(out[i]));
      if (!ok && bad++ == 0) first = i;
    }
  }
  CHECK_MSG(bad == 0, "%s: %zu escaped elements do not decode to their input, first at %zu", what, bad,
            first);
}

/* inOff in elements, pkOff in bytes (a multiple of 4): misaligned starts take
 * the kernels' scalar and 4-byte paths. */
static void compareCodec(const char* tag, const void* hin, zppDataType_t dt, int bits, int block,
                         size_t count, size_t inOff, size_t pkOff) {
  char what[240];
  snprintf(what, sizeof what, "%squantize %s int%d block %d count %zu (offsets %zu, %zu)", tag,
           typeName(dt), bits, block, count, inOff, pkOff);
  size_t es = zppTypeSize(dt);
  size_t P = zppQuantPackedSize(count, bits, block);

  uint8_t* cpuPk = hAlloc(P, CPU_FILL);
  if (quantFlags)
    CHECK_EQ_INT(zppQuantizeEx(hin, dt, count, bits, block, quantFlags, cpuPk), zppSuccess);
  else
    CHECK_EQ_INT(zppQuantize(hin, dt, count, bits, block, cpuPk), zppSuccess);
  if (quantFlags) {
    CHECK_MSG(cpuPk[6] & ZPP_QUANT_FLAG_ROTATED, "%s: the CPU segment is not rotated", what);
    for (size_t b = 0; b * (size_t)block < count; b++) {
      uint32_t sb;
      memcpy(&sb, cpuPk + ZPP_QUANT_HEADER_BYTES + 4 * b, 4);
      if (sb & 0x80000000u)
        rotPlainBlocks++;
      else
        rotBlocks++;
    }
  }

  devbuf_t din = dbAlloc(count * es, inOff * es);
  dbUpload(&din, hin);
  devbuf_t dpk = dbAlloc(P, pkOff);
  if (quantFlags)
    CHECK_EQ_INT(zppQuantizeExCuda(din.p, dt, count, bits, block, quantFlags, dpk.p, tdevStream()),
                 zppSuccess);
  else
    CHECK_EQ_INT(zppQuantizeCuda(din.p, dt, count, bits, block, dpk.p, tdevStream()), zppSuccess);
  uint8_t* gpuPk = hAlloc(P, 0);
  dbDownload(&dpk, gpuPk, what);
  comparePacked(what, cpuPk, gpuPk, count, bits, block);

  /* Decode the CPU's bytes on both sides, so a quantize mismatch above is
   * not reported again here. */
  dbUpload(&dpk, cpuPk);
  for (size_t t = 0; t < sizeof kTypes / sizeof kTypes[0]; t++) {
    zppDataType_t odt = kTypes[t];
    size_t oes = zppTypeSize(odt);
    snprintf(what, sizeof what, "%sdequantize int%d block %d count %zu -> %s (offset %zu)", tag, bits,
             block, count, typeName(odt), inOff);
    void* cpuOut = hAlloc(count * oes, CPU_FILL);
    devbuf_t dout = dbAlloc(count * oes, inOff * oes);
    if (quantFlags) {
      CHECK_EQ_INT(zppDequantizeEx(cpuPk, count, bits, block, cpuOut, odt), zppSuccess);
      CHECK_EQ_INT(zppDequantizeExCuda(dpk.p, count, bits, block, dout.p, odt, tdevStream()),
                   zppSuccess);
    } else {
      CHECK_EQ_INT(zppDequantize(cpuPk, count, bits, block, cpuOut, odt), zppSuccess);
      CHECK_EQ_INT(zppDequantizeCuda(dpk.p, count, bits, block, dout.p, odt, tdevStream()), zppSuccess);
    }
    void* gpuOut = hAlloc(count * oes, 0);
    dbDownload(&dout, gpuOut, what);
    compareValues(what, cpuOut, gpuOut, odt, count);
    if (odt == zppFloat32) checkEscapedExact(what, hin, dt, cpuPk, count, bits, block, gpuOut);
    free(cpuOut);
    free(gpuOut);
    dbFree(&dout);
  }
  free(cpuPk);
  free(gpuPk);
  dbFree(&din);
  dbFree(&dpk);
}

static void testCodec(zppDataType_t dt, int bits, int block, size_t count, size_t inOff, size_t pkOff) {
  void* hin = hAlloc(count * zppTypeSize(dt), 0);
  fill(hin, dt, count, block, bits, 1);
  compareCodec("", hin, dt, bits, block, count, inOff, pkOff);
  free(hin);
}

/* ---- reductions ------------------------------------------------------------------- */

/* Every reduction of the n segments hpk + k * stride on both sides; tag
 * names the inputs in messages. */
static void compareReductions(const char* tag, const uint8_t* hpk, size_t stride, int n, size_t count,
                              int bits, int block) {
  char what[240];
  size_t extra = stride - zppQuantPackedSize(count, bits, block);
  devbuf_t dpk = dbAlloc((size_t)n * stride, 0);
  dbUpload(&dpk, hpk);

  /* accumulate into fp32, from scratch and onto existing values */
  for (int accumulate = 0; accumulate <= 1; accumulate++) {
    snprintf(what, sizeof what, "%saccumulate(%d) int%d block %d count %zu n %d stride +%zu", tag,
             accumulate, bits, block, count, n, extra);
    float* acc0 = hAlloc(count * 4, 0);
    for (size_t i = 0; i < count; i++) acc0[i] = (float)zppTestRngNormal(&rng);
    float* cpuAcc = hAlloc(count * 4, 0);
    memcpy(cpuAcc, acc0, count * 4);
    CHECK_EQ_INT(zppDequantizeAccumulate(hpk, stride, n, count, bits, block, cpuAcc, accumulate),
                 zppSuccess);
    devbuf_t dacc = dbAlloc(count * 4, 0);
    dbUpload(&dacc, acc0);
    CHECK_EQ_INT(zppDequantizeAccumulateCuda(dpk.p, stride, n, count, bits, block, (float*)dacc.p,
                                             accumulate, tdevStream()),
                 zppSuccess);
    float* gpuAcc = hAlloc(count * 4, 0);
    dbDownload(&dacc, gpuAcc, what);
    compareValues(what, cpuAcc, gpuAcc, zppFloat32, count);
    free(acc0);
    free(cpuAcc);
    free(gpuAcc);
    dbFree(&dacc);
  }

  /* sum / divisor into every dtype */
  const float divisors[] = {1.0f, (float)n, 3.0f};
  for (size_t d = 0; d < 3; d++) {
    for (size_t t = 0; t < sizeof kTypes / sizeof kTypes[0]; t++) {
      zppDataType_t odt = kTypes[t];
      size_t oes = zppTypeSize(odt);
      snprintf(what, sizeof what, "%ssum/%g int%d block %d count %zu n %d -> %s", tag,
               (double)divisors[d], bits, block, count, n, typeName(odt));
      void* cpuOut = hAlloc(count * oes, CPU_FILL);
      CHECK_EQ_INT(zppDequantizeSum(hpk, stride, n, count, bits, block, divisors[d], cpuOut, odt),
                   zppSuccess);
      devbuf_t dout = dbAlloc(count * oes, 0);
      CHECK_EQ_INT(zppDequantizeSumCuda(dpk.p, stride, n, count, bits, block, divisors[d], dout.p, odt,
                                        tdevStream()),
                   zppSuccess);
      void* gpuOut = hAlloc(count * oes, 0);
      dbDownload(&dout, gpuOut, what);
      compareValues(what, cpuOut, gpuOut, odt, count);
      free(cpuOut);
      free(gpuOut);
      dbFree(&dout);
    }
  }

  /* fused reduce-requantize, into every width and several block sizes */
  const int blocksOut[] = {32, block, 512, 4096};
  for (int bo = 0; bo < NBITS; bo++) {
    for (size_t b = 0; b < 4; b++) {
      int bitsOut = kBits[bo], blockOut = blocksOut[b];
      if (b > 0 && blockOut == blocksOut[0]) continue;
      if (quick && b >= 2) continue;
      if ((bits == 2) != (bitsOut == 2) && emuThin(2, b)) continue; /* to or from int2 */
      snprintf(what, sizeof what, "%sreduce-requant int%d/%d -> int%d/%d count %zu n %d", tag, bits,
               block, bitsOut, blockOut, count, n);
      size_t PO = zppQuantPackedSize(count, bitsOut, blockOut);
      uint8_t* cpuOut = hAlloc(PO, CPU_FILL);
      CHECK_EQ_INT(zppQuantReduceRequant(hpk, stride, n, count, bits, block, bitsOut, blockOut, cpuOut),
                   zppSuccess);
      devbuf_t dout = dbAlloc(PO, 4 * (size_t)b);
      CHECK_EQ_INT(zppQuantReduceRequantCuda(dpk.p, stride, n, count, bits, block, bitsOut, blockOut,
                                             dout.p, tdevStream()),
                   zppSuccess);
      uint8_t* gpuOut = hAlloc(PO, 0);
      dbDownload(&dout, gpuOut, what);
      comparePacked(what, cpuOut, gpuOut, count, bitsOut, blockOut);
      free(cpuOut);
      free(gpuOut);
      dbFree(&dout);
    }
  }
  dbFree(&dpk);
}

static void testReduce(int bits, int block, size_t count, int n, size_t extra) {
  size_t P = zppQuantPackedSize(count, bits, block);
  size_t stride = P + extra;
  uint8_t* hpk = hAlloc((size_t)n * stride, 0x77); /* gaps between segments: junk */
  float* x = hAlloc(count * 4, 0);
  for (int k = 0; k < n; k++) {
    fill(x, zppFloat32, count, block, bits, 1);
    CHECK_EQ_INT(zppQuantize(x, zppFloat32, count, bits, block, hpk + (size_t)k * stride), zppSuccess);
  }
  compareReductions("", hpk, stride, n, count, bits, block);
  free(hpk);
  free(x);
}

/* ---- escapes (zpp_quant.h, "Escapes") ---------------------------------------------- */

/* Ordinary data: magnitudes in [0.5, 1.5), so that nothing escapes except
 * what a test plants. */
static void fillMild(void* buf, zppDataType_t dt, size_t count) {
  for (size_t i = 0; i < count; i++)
    putF(buf, dt, i, (float)zppTestRngUniform(&rng, 0.5, 1.5) * ((rnd() & 1) ? 1.0f : -1.0f));
}

enum { OUT_HUGE, OUT_INF, OUT_NAN, OUT_SPIKE, OUT_KINDS };

/* One outlier: garbage-sized (DeepSpeed's uninitialized padding held 7.49e25),
 * Inf, a NaN with a payload (signalling or quiet, either sign), or a spike
 * far enough above mild data to escape in every width (2^K * 1.5 is 384 for
 * int8, 48 for int4, 12 for int2). */
static void putOutlier(void* buf, zppDataType_t dt, size_t i, int kind) {
  float sign = (rnd() & 1) ? 1.0f : -1.0f;
  switch (kind) {
    case OUT_HUGE: putF(buf, dt, i, sign * (dt == zppFloat16 ? 60000.0f : 7.49e25f)); break;
    case OUT_INF: putF(buf, dt, i, sign * INFINITY); break;
    case OUT_NAN: {
      uint32_t payload = (uint32_t)rnd() | 1u;
      uint32_t b = dt == zppFloat32   ? 0x7f800000u | (payload & 0x7fffffu)
                   : dt == zppFloat16 ? 0x7c00u | (payload & 0x3ffu)
                                      : 0x7f80u | (payload & 0x7fu);
      if (sign < 0) b |= dt == zppFloat32 ? 0x80000000u : 0x8000u;
      putBits(buf, dt, i, b);
      break;
    }
    default: putF(buf, dt, i, sign * 1000.0f); break;
  }
}

enum {
  SC_SINGLE,    /* one outlier of each kind, each in its own block */
  SC_FIVE,      /* 5 equal outliers in a block (no candidate), 5 Inf in one, 4 of 4 kinds in one */
  SC_OVERFLOW,  /* 4 finite outliers in each of 3 blocks of one group: the third finds no slots */
  SC_NONFINITE, /* 12 Inf and NaN in one group: more than its slots, markers */
  SC_EDGES,     /* outliers at group boundaries and the last element */
  SC_SPARSE,    /* a group of blocks with 1 to 5 non-zero elements, some 2^10 apart */
  SC_COUNT
};

static const char* const kScenario[] = {"single", "five", "overflow", "nonfinite", "edges", "sparse"};

/* Plants scenario sc into mild data; returns 0 where count or block leave no
 * room for it. */
static int plant(void* buf, zppDataType_t dt, size_t count, int block, int sc) {
  size_t B = (size_t)block;
  switch (sc) {
    case SC_SINGLE:
      for (int k = 0; k < OUT_KINDS; k++)
        if ((size_t)k * B < count)
          putOutlier(buf, dt, k * B + rndBelow(count - k * B < B ? count - k * B : B), k);
      return 1;
    case SC_FIVE:
      if (count < 3 * B) return 0;
      for (size_t i = 0; i < 5; i++) putF(buf, dt, 7 * i, dt == zppFloat16 ? 60000.0f : 7.49e25f);
      for (size_t i = 0; i < 5; i++) putF(buf, dt, B + 3 * i + 1, INFINITY);
      for (size_t i = 0; i < 4; i++) putOutlier(buf, dt, 2 * B + 5 * i + 2, (int)i);
      return 1;
    case SC_OVERFLOW:
      if (count < 3 * B || 3 * B > ZPP_QUANT_ESC_GROUP) return 0;
      for (size_t b = 0; b < 3; b++)
        for (size_t i = 0; i < 4; i++)
          putOutlier(buf, dt, b * B + 2 * i + b, (b + i) % 2 ? OUT_SPIKE : OUT_HUGE);
      return 1;
    case SC_NONFINITE: {
      /* 331 is prime: 12 distinct positions below any m >= 12 */
      size_t m = count < ZPP_QUANT_ESC_GROUP ? count : ZPP_QUANT_ESC_GROUP;
      for (size_t i = 0; i < 12; i++) putOutlier(buf, dt, (i * 331) % m, i % 2 ? OUT_INF : OUT_NAN);
      /* and a finite one that escapes (or overflows) beside them */
      putOutlier(buf, dt, (12 * 331) % m, OUT_HUGE);
      return 1;
    }
    case SC_SPARSE: {
      /* Zeros take no part in the reference magnitude (zpp_quant.h): block
       * b holds 1 + b % 5 non-zero elements, in odd blocks the first one
       * 2^10 above the others (a candidate in int8 and int4), in even
       * blocks all of one magnitude (none). */
      if (count < 2 * B || 2 * B > ZPP_QUANT_ESC_GROUP) return 0; /* an odd block in the group */
      size_t m = count < ZPP_QUANT_ESC_GROUP ? count : ZPP_QUANT_ESC_GROUP;
      for (size_t i = 0; i < m; i++) putF(buf, dt, i, 0.0f);
      for (size_t b = 0; b * B < m; b++)
        for (size_t k = 0; k <= b % 5 && b * B + 3 * k < m; k++) {
          float v = (float)zppTestRngUniform(&rng, 0.5, 1.0) * ((rnd() & 1) ? 1.0f : -1.0f);
          putF(buf, dt, b * B + 3 * k,
               k == 0 && b % 2 ? v * 1024.0f : v * (dt == zppFloat16 ? 0.01f : 1.0f));
        }
      return 1;
    }
    default:
      if (count < ZPP_QUANT_ESC_GROUP + 2) return 0;
      putOutlier(buf, dt, ZPP_QUANT_ESC_GROUP - 1, OUT_NAN);
      putOutlier(buf, dt, ZPP_QUANT_ESC_GROUP, OUT_HUGE);
      putOutlier(buf, dt, count - 1, OUT_INF);
      putOutlier(buf, dt, count - 2, OUT_SPIKE);
      return 1;
  }
}

/* Quantize and every decode of planted outliers, against the CPU; and the
 * CPU must have escaped (and, for SC_OVERFLOW, overflowed), or the
 * comparison would prove nothing about escapes. */
static void testEscapeCodec(zppDataType_t dt, int bits, int block, size_t count, int sc, size_t pkOff) {
  void* hin = hAlloc(count * zppTypeSize(dt), 0);
  fillMild(hin, dt, count);
  if (!plant(hin, dt, count, block, sc)) {
    free(hin);
    return;
  }
  char tag[64];
  snprintf(tag, sizeof tag, "escapes (%s): ", kScenario[sc]);
  size_t P = zppQuantPackedSize(count, bits, block);
  uint8_t* pk = hAlloc(P, CPU_FILL);
  uint64_t escapes = 0, overflows = 0;
  zppQuantTakeEscapeCounts(NULL, NULL);
  CHECK_EQ_INT(zppQuantize(hin, dt, count, bits, block, pk), zppSuccess);
  zppQuantTakeEscapeCounts(&escapes, &overflows);
  CHECK_MSG((escapes > 0 || sc == SC_NONFINITE) && countEscapes(pk, count, bits, block) == escapes,
            "%s%s int%d block %d count %zu: %llu escapes, %zu used slots", tag, typeName(dt), bits,
            block, count, (unsigned long long)escapes, countEscapes(pk, count, bits, block));
  if (sc == SC_OVERFLOW)
    CHECK_MSG(overflows > 0, "%s%s int%d block %d: no overflow", tag, typeName(dt), bits, block);
  if (sc == SC_NONFINITE)
    CHECK_MSG(pk[6] & ZPP_QUANT_FLAG_MARKERS, "%s%s int%d block %d: no markers", tag, typeName(dt),
              bits, block);
  compareCodec(tag, hin, dt, bits, block, count, 0, pkOff);
  free(pk);
  free(hin);
}

/* Reductions of n inputs with escapes, several at the same element: a
 * garbage value in every input; +Inf and -Inf (a NaN sum); a NaN in one; two
 * outliers that cancel; and the planted scenario in input 0. */
static void testEscapeReduce(int bits, int block, size_t count, int n, int sc) {
  size_t P = zppQuantPackedSize(count, bits, block);
  size_t stride = P + 16;
  uint8_t* hpk = hAlloc((size_t)n * stride, 0x77);
  float* x = hAlloc(count * 4, 0);
  uint64_t escapes = 0;
  zppQuantTakeEscapeCounts(NULL, NULL);
  for (int k = 0; k < n; k++) {
    fillMild(x, zppFloat32, count);
    if (k == 0) plant(x, zppFloat32, count, block, sc);
    x[count / 2] = 7.49e25f * (float)(k + 1);
    if (count > 7) x[7] = k == 0 ? INFINITY : k == 1 ? -INFINITY : x[7];
    if (k == n - 1) putOutlier(x, zppFloat32, count - 1, OUT_NAN);
    if (count > (size_t)block + 3 && k < 2) x[block + 3] = k == 0 ? 1e20f : -1e20f;
    CHECK_EQ_INT(zppQuantize(x, zppFloat32, count, bits, block, hpk + (size_t)k * stride), zppSuccess);
  }
  zppQuantTakeEscapeCounts(&escapes, NULL);
  CHECK_MSG(escapes >= (uint64_t)n, "reduce escapes int%d block %d count %zu: only %llu escapes", bits,
            block, count, (unsigned long long)escapes);
  char tag[64];
  snprintf(tag, sizeof tag, "escapes (%s in input 0): ", kScenario[sc]);
  compareReductions(tag, hpk, stride, n, count, bits, block);
  free(hpk);
  free(x);
}

static const int kEscBlocks[] = {32, 64, 256, 1024, 4096};

static void runEscapeCodecSweep(void) {
  const size_t counts[] = {100, 2 * ZPP_QUANT_ESC_GROUP + 333, ZPP_QUANT_ESC_GROUP + 1};
  for (size_t t = 0; t < sizeof kTypes / sizeof kTypes[0]; t++)
    for (int b = 0; b < NBITS; b++)
      for (size_t k = 0; k < sizeof kEscBlocks / sizeof kEscBlocks[0]; k++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
          for (int sc = 0; sc < SC_COUNT; sc++) {
            if (quick && (k + c + (size_t)sc) % 3 != 0) continue;
            if (emuThin(kBits[b], k + c)) continue;
            testEscapeCodec(kTypes[t], kBits[b], kEscBlocks[k], counts[c], sc,
                            4 * ((c + (size_t)sc) % 4));
          }
}

static void runEscapeSweep(void) {
  const int* blocks = kEscBlocks;
  runEscapeCodecSweep();
  for (int b = 0; b < NBITS; b++)
    for (size_t k = 0; k < sizeof kEscBlocks / sizeof kEscBlocks[0]; k++)
      for (int sc = 0; sc < SC_COUNT; sc++) {
        if (quick && (k + (size_t)sc) % 2) continue;
        if (emuThin(kBits[b], k + (size_t)sc)) continue;
        size_t count = sc == SC_EDGES ? 2 * ZPP_QUANT_ESC_GROUP + 333 : 3 * (size_t)blocks[k] + 101;
        testEscapeReduce(kBits[b], blocks[k], count, 2 + (sc + (int)k) % 4, sc);
      }
}

/* ---- tensor-slice reordering ------------------------------------------------------ */

static void testReordered(zppDataType_t dt, int bits, int block, int W, int L, size_t partCount,
                          size_t strideExtra) {
  char what[200];
  snprintf(what, sizeof what, "reordered %s int%d block %d W %d L %d part %zu stride +%zu",
           typeName(dt), bits, block, W, L, partCount, strideExtra);
  size_t es = zppTypeSize(dt);
  size_t partStride = partCount + strideExtra;
  size_t nin = (size_t)W * partStride;
  size_t P = zppQuantPackedSize(partCount, bits, block);
  void* hin = hAlloc(nin * es, 0);
  fill(hin, dt, nin, block, bits, 1);
  uint8_t* cpuOut = hAlloc((size_t)W * P, CPU_FILL);
  CHECK_EQ_INT(zppQuantizeReordered(hin, dt, partCount, partStride, W, L, bits, block, cpuOut),
               zppSuccess);
  devbuf_t din = dbAlloc(nin * es, 0);
  dbUpload(&din, hin);
  devbuf_t dout = dbAlloc((size_t)W * P, 0);
  CHECK_EQ_INT(zppQuantizeReorderedCuda(din.p, dt, partCount, partStride, W, L, bits, block, dout.p,
                                        tdevStream()),
               zppSuccess);
  uint8_t* gpuOut = hAlloc((size_t)W * P, 0);
  dbDownload(&dout, gpuOut, what);
  for (int k = 0; k < W; k++) {
    char seg[240];
    snprintf(seg, sizeof seg, "%s segment %d", what, k);
    comparePacked(seg, cpuOut + (size_t)k * P, gpuOut + (size_t)k * P, partCount, bits, block);
  }
  /* And the order itself, independently of the CPU's reordering: segment
   * k = j * N + n is partition p = n * L + j quantized alone. */
  int N = W / L;
  uint8_t* one = hAlloc(P, CPU_FILL);
  for (int k = 0; k < W; k++) {
    int j = k / N, node = k % N;
    size_t p = (size_t)node * (size_t)L + (size_t)j;
    CHECK_EQ_INT(
        zppQuantize((const uint8_t*)hin + p * partStride * es, dt, partCount, bits, block, one),
        zppSuccess);
    CHECK_MSG(memcmp(one, gpuOut + (size_t)k * P, P) == 0, "%s: segment %d is not partition %zu", what,
              k, p);
  }
  free(one);
  free(hin);
  free(cpuOut);
  free(gpuOut);
  dbFree(&din);
  dbFree(&dout);
}

/* ---- header checks on the device ---------------------------------------------------- */

static int allNaN(const void* buf, zppDataType_t dt, size_t count) {
  for (size_t i = 0; i < count; i++)
    if (!isNaNBits(dt, bitsAt(buf, dt, i))) return 0;
  return 1;
}

/* A segment decoded with settings other than its header's decodes to NaN
 * (the device cannot refuse it the way the CPU path does). */
static void testHeaderMismatch(void) {
  const size_t count = 1000;
  const int bits = 8, block = 128;
  size_t P = zppQuantPackedSize(count, bits, block);
  float* x = hAlloc(count * 4, 0);
  fill(x, zppFloat32, count, block, bits, 0);
  x[5] = 7.49e25f; /* an escape: its table must not be applied under a mismatch either */
  uint8_t* hpk = hAlloc(P, 0);
  CHECK_EQ_INT(zppQuantize(x, zppFloat32, count, bits, block, hpk), zppSuccess);
  CHECK(countEscapes(hpk, count, bits, block) > 0);
  devbuf_t dpk = dbAlloc(P, 0);
  dbUpload(&dpk, hpk);
  float* out = hAlloc(count * 4, 0);
  devbuf_t dout = dbAlloc(count * 4, 0);

  /* count one short: the header says 1000 */
  CHECK_EQ_INT(zppDequantizeCuda(dpk.p, count - 1, bits, block, dout.p, zppFloat32, tdevStream()),
               zppSuccess);
  tdevToHost(out, dout.p, (count - 1) * 4);
  CHECK_MSG(allNaN(out, zppFloat32, count - 1), "count mismatch must decode to NaN");

  /* block 64 instead of 128: the same byte size of data, other scales */
  CHECK_EQ_INT(zppDequantizeCuda(dpk.p, count, bits, 64, dout.p, zppFloat32, tdevStream()), zppSuccess);
  tdevToHost(out, dout.p, count * 4);
  CHECK_MSG(allNaN(out, zppFloat32, count), "block mismatch must decode to NaN");

  /* int4 reading an int8 segment, through the fused path: NaN sums, which
   * are all candidates and overflow every table: markers throughout (every
   * element decodes to NaN), a valid header with the markers flag */
  size_t PO = zppQuantPackedSize(count, 8, 128);
  devbuf_t dreq = dbAlloc(PO, 0);
  CHECK_EQ_INT(zppQuantReduceRequantCuda(dpk.p, P, 1, count, 4, block, 8, 128, dreq.p, tdevStream()),
               zppSuccess);
  uint8_t* req = hAlloc(PO, 0);
  tdevToHost(req, dreq.p, PO);
  CHECK_EQ_INT(zppQuantCheckHeader(req, count, 8, 128), zppSuccess);
  CHECK(req[6] & ZPP_QUANT_FLAG_MARKERS);
  float* reqOut = hAlloc(count * 4, 0);
  CHECK_EQ_INT(zppDequantize(req, count, 8, 128, reqOut, zppFloat32), zppSuccess);
  CHECK_MSG(allNaN(reqOut, zppFloat32, count), "a mismatched input must make every sum NaN");
  free(reqOut);

  /* and the correct settings decode finite values again */
  CHECK_EQ_INT(zppDequantizeCuda(dpk.p, count, bits, block, dout.p, zppFloat32, tdevStream()),
               zppSuccess);
  tdevToHost(out, dout.p, count * 4);
  size_t nan = 0;
  for (size_t i = 0; i < count; i++) nan += isnan(out[i]);
  CHECK_EQ_INT(nan, 0);
  CHECK(out[5] == 7.49e25f);

  free(x);
  free(hpk);
  free(out);
  free(req);
  dbFree(&dpk);
  dbFree(&dout);
  dbFree(&dreq);
}

/* ---- argument checks ----------------------------------------------------------------- */

static void testArguments(void) {
  cudaStream_t s = tdevStream();
  devbuf_t din = dbAlloc(4096 * 4, 0);
  devbuf_t dpk = dbAlloc(zppQuantPackedSize(4096, 8, 32) * 4, 0);
  uint8_t* in = din.p;
  uint8_t* pk = dpk.p;
  size_t P = zppQuantPackedSize(100, 8, 32);
  zppLogLevel_t level = zppLogLevel();
  zppLogSetLevel(ZPP_LOG_NONE); /* the expected failures would log errors */
  CHECK_EQ_INT(zppQuantizeCuda(in, zppFloat32, 100, 5, 32, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in, zppFloat32, 100, 8, 48, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in, zppFloat32, 100, 8, 16, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in, zppFloat32, 100, 8, 8192, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in, zppInt32, 100, 8, 32, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(NULL, zppFloat32, 100, 8, 32, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in, zppFloat32, 100, 8, 32, NULL, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in + 2, zppFloat32, 100, 8, 32, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in + 1, zppFloat16, 100, 8, 32, pk, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeCuda(in, zppFloat32, 100, 8, 32, pk + 2, s), zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeCuda(pk, 100, 8, 32, in, zppFloat64, s), zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeCuda(pk + 1, 100, 8, 32, in, zppFloat32, s), zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeCuda(pk, 100, 8, 32, NULL, zppFloat32, s), zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeAccumulateCuda(pk, P, 0, 100, 8, 32, (float*)in, 0, s), zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeAccumulateCuda(pk, P - 16, 2, 100, 8, 32, (float*)in, 0, s),
               zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeAccumulateCuda(pk, P + 2, 2, 100, 8, 32, (float*)in, 0, s),
               zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeSumCuda(pk, P, 1, 100, 8, 32, 0.0f, in, zppFloat32, s), zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeSumCuda(pk, P, 1, 100, 8, 32, NAN, in, zppFloat32, s), zppInvalidArgument);
  CHECK_EQ_INT(zppQuantReduceRequantCuda(pk, P, 2, 100, 8, 32, 4, 64, pk + P, s),
               zppInvalidArgument); /* output overlaps the second input */
  CHECK_EQ_INT(zppQuantReduceRequantCuda(pk, P, 1, 100, 8, 32, 3, 64, pk + 2 * P, s),
               zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeReorderedCuda(in, zppFloat32, 10, 10, 6, 4, 8, 32, pk, s),
               zppInvalidArgument); /* 6 partitions, nodes of 4 */
  CHECK_EQ_INT(zppQuantizeReorderedCuda(in, zppFloat32, 10, 9, 4, 2, 8, 32, pk, s),
               zppInvalidArgument); /* stride < count */
  CHECK_EQ_INT(zppQuantizeReorderedCuda(in, zppFloat32, 10, 10, 0, 1, 8, 32, pk, s),
               zppInvalidArgument);
  zppLogSetLevel(level);
  tdevSync();
  dbFree(&din);
  dbFree(&dpk);
}

/* ---- asynchrony: no call waits for the stream or the device ---------------------- */

/* Runs one of each call: quantize into `pk` (n copies at stride P), then
 * decode, accumulate, sum, reduce-requantize and a reordered quantize. */
static void enqueueAll(const void* din, float* dacc, void* dout, uint8_t* dpk, uint8_t* dreq,
                       uint8_t* dreord, size_t count, size_t P, int n) {
  cudaStream_t s = tdevStream();
  for (int k = 0; k < n; k++)
    CHECK_EQ_INT(zppQuantizeCuda(din, zppFloat32, count, 4, 64, dpk + (size_t)k * P, s), zppSuccess);
  CHECK_EQ_INT(zppDequantizeCuda(dpk, count, 4, 64, dout, zppBfloat16, s), zppSuccess);
  CHECK_EQ_INT(zppDequantizeAccumulateCuda(dpk, P, n, count, 4, 64, dacc, 0, s), zppSuccess);
  CHECK_EQ_INT(zppDequantizeSumCuda(dpk, P, n, count, 4, 64, (float)n, dout, zppFloat16, s),
               zppSuccess);
  CHECK_EQ_INT(zppQuantReduceRequantCuda(dpk, P, n, count, 4, 64, 8, 256, dreq, s), zppSuccess);
  CHECK_EQ_INT(zppQuantizeReorderedCuda(din, zppFloat32, count / 4, count / 4, 4, 2, 4, 64, dreord, s),
               zppSuccess);
}

/* The results of enqueueAll against the CPU (the last writes of dout are the
 * fp16 sum). */
static void checkAll(const float* x, const float* dacc, const void* dout, const uint8_t* dreq,
                     const uint8_t* dreord, size_t count, size_t P, int n, const char* what) {
  uint8_t* pk = hAlloc(P * (size_t)n, 0);
  for (int k = 0; k < n; k++)
    CHECK_EQ_INT(zppQuantize(x, zppFloat32, count, 4, 64, pk + (size_t)k * P), zppSuccess);
  float* acc = hAlloc(count * 4, 0);
  float* gacc = hAlloc(count * 4, 0);
  CHECK_EQ_INT(zppDequantizeAccumulate(pk, P, n, count, 4, 64, acc, 0), zppSuccess);
  tdevToHost(gacc, dacc, count * 4);
  compareValues(what, acc, gacc, zppFloat32, count);
  uint16_t* sum = hAlloc(count * 2, 0);
  uint16_t* gsum = hAlloc(count * 2, 0);
  CHECK_EQ_INT(zppDequantizeSum(pk, P, n, count, 4, 64, (float)n, sum, zppFloat16), zppSuccess);
  tdevToHost(gsum, dout, count * 2);
  compareValues(what, sum, gsum, zppFloat16, count);
  size_t PR = zppQuantPackedSize(count, 8, 256);
  uint8_t* req = hAlloc(PR, 0);
  uint8_t* greq = hAlloc(PR, 0);
  CHECK_EQ_INT(zppQuantReduceRequant(pk, P, n, count, 4, 64, 8, 256, req), zppSuccess);
  tdevToHost(greq, dreq, PR);
  comparePacked(what, req, greq, count, 8, 256);
  size_t PO = zppQuantPackedSize(count / 4, 4, 64) * 4;
  uint8_t* ro = hAlloc(PO, 0);
  uint8_t* gro = hAlloc(PO, 0);
  CHECK_EQ_INT(zppQuantizeReordered(x, zppFloat32, count / 4, count / 4, 4, 2, 4, 64, ro), zppSuccess);
  tdevToHost(gro, dreord, PO);
  CHECK_MSG(memcmp(ro, gro, PO) == 0, "%s: reordered output differs", what);
  free(pk);
  free(acc);
  free(gacc);
  free(sum);
  free(gsum);
  free(req);
  free(greq);
  free(ro);
  free(gro);
}

/* Every call must only enqueue: behind a stream that a host function holds
 * closed, each returns at once (one that waited would stall until the gate's
 * 20 s timeout, which the release reports), and the same calls can be
 * captured into a CUDA graph (capture fails on allocation or sync). */
static void testAsync(void) {
  const size_t count = 40000;
  const int n = 3;
  size_t P = zppQuantPackedSize(count, 4, 64);
  float* x = hAlloc(count * 4, 0);
  fill(x, zppFloat32, count, 64, 4, 1);
  uint8_t* din = tdevMalloc(count * 4);
  float* dacc = tdevMalloc(count * 4);
  void* dout = tdevMalloc(count * 4);
  uint8_t* dpk = tdevMalloc(P * n);
  uint8_t* dreq = tdevMalloc(zppQuantPackedSize(count, 8, 256));
  uint8_t* dreord = tdevMalloc(zppQuantPackedSize(count / 4, 4, 64) * 4);
  tdevToDevice(din, x, count * 4);

  /* Not under --quick, the sanitizers' run: they slow the enqueueing host
   * past the gate's 20 s, which then reads as a call that waited. */
  if (!quick && tdevHoldStream()) {
    enqueueAll(din, dacc, dout, dpk, dreq, dreord, count, P, n);
    CHECK_MSG(tdevReleaseStream(), "a codec call waited for its stream");
    checkAll(x, dacc, dout, dreq, dreord, count, P, n, "calls behind a held stream");
  } else {
    printf("stream-hold check: %s\n", quick ? "skipped under --quick" : "not available on this device");
    enqueueAll(din, dacc, dout, dpk, dreq, dreord, count, P, n);
    tdevSync();
    checkAll(x, dacc, dout, dreq, dreord, count, P, n, "calls in sequence");
  }

  if (tdevCaptureBegin()) {
    enqueueAll(din, dacc, dout, dpk, dreq, dreord, count, P, n);
    CHECK_MSG(tdevCaptureEndAndRun(), "the codec calls could not be captured into a graph");
    checkAll(x, dacc, dout, dreq, dreord, count, P, n, "calls replayed from a CUDA graph");
  } else {
    printf("graph capture check: not available on this device (%s)\n", tdevName());
  }
  free(x);
  tdevFree(din);
  tdevFree(dacc);
  tdevFree(dout);
  tdevFree(dpk);
  tdevFree(dreq);
  tdevFree(dreord);
}

/* ---- the rotated codec (zpp_quant.h, "Rotation") ------------------------------------ */

/* A plain segment decoded by zppDequantizeExCuda (which takes both kinds)
 * equals the CPU's zppDequantizeEx; a rotated segment decodes to NaN through
 * the plain decoder (its header does not match) and through the Ex decoder
 * under another count; bad arguments are refused by name. */
static void testRotatedExtras(void) {
  const size_t count = 3 * 256 + 77;
  const int bits = 4, block = 256;
  size_t P = zppQuantPackedSize(count, bits, block);
  float* x = hAlloc(count * 4, 0);
  fill(x, zppFloat32, count, block, bits, 1);
  x[300] = 7.49e25f; /* an escape */
  uint8_t* plain = hAlloc(P, 0);
  uint8_t* rot = hAlloc(P, 0);
  CHECK_EQ_INT(zppQuantize(x, zppFloat32, count, bits, block, plain), zppSuccess);
  CHECK_EQ_INT(zppQuantizeEx(x, zppFloat32, count, bits, block, ZPP_QUANT_ROTATE, rot), zppSuccess);
  devbuf_t dpk = dbAlloc(P, 0);
  float* cpuOut = hAlloc(count * 4, 0);
  float* gpuOut = hAlloc(count * 4, 0);
  devbuf_t dout = dbAlloc(count * 4, 0);

  dbUpload(&dpk, plain);
  CHECK_EQ_INT(zppDequantizeEx(plain, count, bits, block, cpuOut, zppFloat32), zppSuccess);
  CHECK_EQ_INT(zppDequantizeExCuda(dpk.p, count, bits, block, dout.p, zppFloat32, tdevStream()),
               zppSuccess);
  dbDownload(&dout, gpuOut, "plain segment through zppDequantizeExCuda");
  compareValues("plain segment through zppDequantizeExCuda", cpuOut, gpuOut, zppFloat32, count);
  CHECK(gpuOut[300] == 7.49e25f);

  dbUpload(&dpk, rot);
  CHECK_EQ_INT(zppDequantizeCuda(dpk.p, count, bits, block, dout.p, zppFloat32, tdevStream()),
               zppSuccess);
  tdevToHost(gpuOut, dout.p, count * 4);
  CHECK_MSG(allNaN(gpuOut, zppFloat32, count), "a rotated segment through the plain decoder: not NaN");
  CHECK_EQ_INT(zppDequantizeExCuda(dpk.p, count - 1, bits, block, dout.p, zppFloat32, tdevStream()),
               zppSuccess);
  tdevToHost(gpuOut, dout.p, (count - 1) * 4);
  CHECK_MSG(allNaN(gpuOut, zppFloat32, count - 1), "a count mismatch must decode to NaN");
  CHECK_EQ_INT(zppDequantizeExCuda(dpk.p, count, 8, block, dout.p, zppFloat32, tdevStream()),
               zppSuccess);
  tdevToHost(gpuOut, dout.p, count * 4);
  CHECK_MSG(allNaN(gpuOut, zppFloat32, count), "a bits mismatch must decode to NaN");

  cudaStream_t st = tdevStream();
  zppLogLevel_t level = zppLogLevel();
  zppLogSetLevel(ZPP_LOG_NONE);
  CHECK_EQ_INT(zppQuantizeExCuda(dout.p, zppFloat32, count, bits, block, 2u, dpk.p, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeExCuda(dout.p, zppFloat32, count, bits, 48, ZPP_QUANT_ROTATE, dpk.p, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppQuantizeExCuda(NULL, zppFloat32, count, bits, block, ZPP_QUANT_ROTATE, dpk.p, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeExCuda(dpk.p, count, 5, block, dout.p, zppFloat32, st), zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeExCuda(dpk.p + 2, count, bits, block, dout.p, zppFloat32, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeExCuda(dpk.p, count, bits, block, NULL, zppFloat32, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeExCuda(dpk.p, count, bits, block, dout.p, zppInt32, st),
               zppInvalidArgument);
  zppLogSetLevel(level);
  tdevSync();
  free(x);
  free(plain);
  free(rot);
  free(cpuOut);
  free(gpuOut);
  dbFree(&dpk);
  dbFree(&dout);
}

/* ---- reductions of rotated segments (zpp_quant.h, "Reductions of rotated segments") --- */

/* How the inputs of a rotated reduction are made: mild data (no escapes:
 * every full block qualifies for the direct order), the codec sweep's mixed
 * patterns (Inf, NaN, huge, tiny blocks: stored plain), the same with every
 * other input a plain segment, planted escapes (garbage, Inf, NaN at the
 * same element in several inputs, overflowing tables), and a first block
 * whose rotated sums overflow (each input's w is (2e38, 0, ..., 0): finite;
 * their sum is not, so the direct order must fall back). */
enum { RIN_MILD, RIN_MIXED, RIN_SOME_PLAIN, RIN_ESCAPES, RIN_OVERFLOW, RIN_COUNT };
static const char* const kRinName[] = {"mild", "mixed", "some plain", "escapes", "r overflows"};

/* Coverage of the rotated reductions: blocks that every input stores
 * rotated without an escape (direct-order candidates), and the others. */
static size_t rotQualBlocks, rotOtherBlocks, rotOverflowCases;

static void makeRotInputs(int mode, int bits, int block, size_t count, int n, uint8_t* hpk,
                          size_t stride) {
  float* x = hAlloc(count * 4, 0);
  for (int k = 0; k < n; k++) {
    unsigned flags = ZPP_QUANT_ROTATE;
    switch (mode) {
      case RIN_MILD: fillMild(x, zppFloat32, count); break;
      case RIN_MIXED: fill(x, zppFloat32, count, block, bits, 1); break;
      case RIN_SOME_PLAIN:
        fill(x, zppFloat32, count, block, bits, 1);
        if (k % 2) flags = 0;
        break;
      case RIN_ESCAPES:
        fillMild(x, zppFloat32, count);
        plant(x, zppFloat32, count, block, k % SC_COUNT);
        x[count / 2] = 7.49e25f * (float)(k + 1);
        if (count > 7) x[7] = k == 0 ? INFINITY : k == 1 ? -INFINITY : x[7];
        if (k == n - 1) putOutlier(x, zppFloat32, count - 1, OUT_NAN);
        break;
      default: {
        fillMild(x, zppFloat32, count);
        const float c = 2e38f / (float)block;
        for (size_t i = 0; i < count && i < (size_t)block; i++) x[i] = zppQuantRotSignMask(i) ? -c : c;
        break;
      }
    }
    CHECK_EQ_INT(zppQuantizeEx(x, zppFloat32, count, bits, block, flags, hpk + (size_t)k * stride),
                 zppSuccess);
  }
  free(x);
}

static void countRotBlocks(const uint8_t* hpk, size_t stride, int n, size_t count, int bits,
                           int block) {
  size_t nb = (count + (size_t)block - 1) / (size_t)block;
  for (size_t b = 0; b < nb; b++) {
    int qual = (b + 1) * (size_t)block <= count;
    size_t g = b * (size_t)block / ZPP_QUANT_ESC_GROUP,
           rlo = b * (size_t)block - g * ZPP_QUANT_ESC_GROUP;
    for (int k = 0; k < n && qual; k++) {
      const uint8_t* seg = hpk + (size_t)k * stride;
      uint32_t sb;
      memcpy(&sb, seg + ZPP_QUANT_HEADER_BYTES + 4 * b, 4);
      qual =
          (seg[6] & ZPP_QUANT_FLAG_ROTATED) && !(sb & 0x80000000u) && (sb & 0x7f800000u) != 0x7f800000u;
      const uint8_t* t = escTable(seg, count, bits, block, g);
      for (int j = 0; j < ZPP_QUANT_ESC_SLOTS && qual; j++) {
        unsigned idx = escIndex(t, j);
        if (idx == ZPP_QUANT_ESC_EMPTY) break;
        qual = !(idx >= rlo && idx < rlo + (size_t)block);
      }
    }
    if (qual)
      rotQualBlocks++;
    else
      rotOtherBlocks++;
  }
}

/* zppDequantizeSumOrder and zppQuantReduceRequantOrder against their CUDA
 * twins, in every order, for the n segments hpk + k * stride; then the Ex
 * entry points (the order qgZ uses). */
static void compareRotReductions(const char* tag, const uint8_t* hpk, size_t stride, int n,
                                 size_t count, int bits, int block, int cs) {
  char what[240];
  devbuf_t dpk = dbAlloc((size_t)n * stride, 0);
  dbUpload(&dpk, hpk);
  static const char* const orderName[] = {"simple", "rotated-domain", "direct"};
  /* The emulator (every barrier a fiber switch per thread) takes one output
   * type per order and three of the eight requantizations per case, in
   * turn over the cases; a GPU takes all. */
  const int emu = tdevIsEmulated();
  for (int order = 0; order <= 2; order++) {
    for (size_t t = 0; t < sizeof kTypes / sizeof kTypes[0]; t++) {
      if (emu && t != ((size_t)cs + (size_t)order) % 3) continue;
      zppDataType_t odt = kTypes[t];
      const float divisors[] = {1.0f, (float)n, 3.0f};
      float div = divisors[((size_t)cs + t) % 3];
      size_t oes = zppTypeSize(odt);
      snprintf(what, sizeof what, "%s%s sum/%g int%d block %d count %zu n %d -> %s", tag,
               orderName[order], (double)div, bits, block, count, n, typeName(odt));
      void* cpuOut = hAlloc(count * oes, CPU_FILL);
      CHECK_EQ_INT(zppDequantizeSumOrder(hpk, stride, n, count, bits, block, div, cpuOut, odt,
                                         (zppQuantSumOrder_t)order),
                   zppSuccess);
      devbuf_t dout = dbAlloc(count * oes, 0);
      CHECK_EQ_INT(zppDequantizeSumOrderCuda(dpk.p, stride, n, count, bits, block, div, dout.p, odt,
                                             (zppQuantSumOrder_t)order, tdevStream()),
                   zppSuccess);
      void* gpuOut = hAlloc(count * oes, 0);
      dbDownload(&dout, gpuOut, what);
      compareValues(what, cpuOut, gpuOut, odt, count);
      free(cpuOut);
      free(gpuOut);
      dbFree(&dout);
    }
    const int blocksOut[] = {block, block == 32 ? 256 : 32};
    for (int bo = 0; bo < NBITS; bo++)
      for (int b = 0; b < 2; b++)
        for (unsigned fo = 0; fo <= ZPP_QUANT_ROTATE; fo++) {
          int bitsOut = kBits[bo], blockOut = blocksOut[b];
          if (quick && (bo + b + (int)fo + cs) % 2) continue;
          if (emu && (4 * bo + 2 * b + (int)fo + 3 * cs + order) % 8 >= 3) continue;
          snprintf(what, sizeof what, "%s%s reduce-requant int%d/%d -> int%d/%d%s count %zu n %d", tag,
                   orderName[order], bits, block, bitsOut, blockOut, fo ? " rotated" : "", count, n);
          size_t PO = zppQuantPackedSize(count, bitsOut, blockOut);
          uint8_t* cpuOut = hAlloc(PO, CPU_FILL);
          CHECK_EQ_INT(zppQuantReduceRequantOrder(hpk, stride, n, count, bits, block, bitsOut, blockOut,
                                                  fo, (zppQuantSumOrder_t)order, cpuOut),
                       zppSuccess);
          devbuf_t dout = dbAlloc(PO, 4 * (size_t)((cs + b) % 4));
          CHECK_EQ_INT(
              zppQuantReduceRequantOrderCuda(dpk.p, stride, n, count, bits, block, bitsOut, blockOut,
                                             fo, (zppQuantSumOrder_t)order, dout.p, tdevStream()),
              zppSuccess);
          uint8_t* gpuOut = hAlloc(PO, 0);
          dbDownload(&dout, gpuOut, what);
          comparePacked(what, cpuOut, gpuOut, count, bitsOut, blockOut);
          free(cpuOut);
          free(gpuOut);
          dbFree(&dout);
        }
  }
  /* The Ex entry points: qgZ's order, qgZ's shapes. */
  zppDataType_t odt = kTypes[cs % 3];
  size_t oes = zppTypeSize(odt);
  snprintf(what, sizeof what, "%sEx sum int%d block %d count %zu n %d -> %s", tag, bits, block, count,
           n, typeName(odt));
  void* cpuOut = hAlloc(count * oes, CPU_FILL);
  CHECK_EQ_INT(zppDequantizeSumEx(hpk, stride, n, count, bits, block, (float)n, cpuOut, odt),
               zppSuccess);
  devbuf_t dout = dbAlloc(count * oes, 0);
  CHECK_EQ_INT(
      zppDequantizeSumExCuda(dpk.p, stride, n, count, bits, block, (float)n, dout.p, odt, tdevStream()),
      zppSuccess);
  void* gpuOut = hAlloc(count * oes, 0);
  dbDownload(&dout, gpuOut, what);
  compareValues(what, cpuOut, gpuOut, odt, count);
  free(cpuOut);
  free(gpuOut);
  dbFree(&dout);
  snprintf(what, sizeof what, "%sEx reduce-requant int%d block %d count %zu n %d", tag, bits, block,
           count, n);
  size_t P = zppQuantPackedSize(count, bits, block);
  uint8_t* cpuPk = hAlloc(P, CPU_FILL);
  CHECK_EQ_INT(
      zppQuantReduceRequantEx(hpk, stride, n, count, bits, block, bits, block, ZPP_QUANT_ROTATE, cpuPk),
      zppSuccess);
  devbuf_t dreq = dbAlloc(P, 0);
  CHECK_EQ_INT(zppQuantReduceRequantExCuda(dpk.p, stride, n, count, bits, block, bits, block,
                                           ZPP_QUANT_ROTATE, dreq.p, tdevStream()),
               zppSuccess);
  uint8_t* gpuPk = hAlloc(P, 0);
  dbDownload(&dreq, gpuPk, what);
  comparePacked(what, cpuPk, gpuPk, count, bits, block);
  free(cpuPk);
  free(gpuPk);
  dbFree(&dreq);
  dbFree(&dpk);
}

static void testRotReduce(int mode, int bits, int block, size_t count, int n, size_t extra, int cs) {
  size_t P = zppQuantPackedSize(count, bits, block);
  size_t stride = P + extra;
  uint8_t* hpk = hAlloc((size_t)n * stride, 0x77); /* gaps between segments: junk */
  makeRotInputs(mode, bits, block, count, n, hpk, stride);
  countRotBlocks(hpk, stride, n, count, bits, block);
  if (mode == RIN_OVERFLOW && n > 1 && count >= (size_t)block) {
    /* The CPU's direct order must have met a non-finite r: the first
     * block's sums are NaN, marked in the output. */
    uint8_t* po = hAlloc(P, 0);
    CHECK_EQ_INT(zppQuantReduceRequantOrder(hpk, stride, n, count, bits, block, bits, block,
                                            ZPP_QUANT_ROTATE, ZPP_QUANT_SUM_ROTATED_DIRECT, po),
                 zppSuccess);
    CHECK_MSG(po[6] & ZPP_QUANT_FLAG_MARKERS, "r overflows int%d block %d n %d: no markers", bits,
              block, n);
    rotOverflowCases++;
    free(po);
  }
  char tag[64];
  snprintf(tag, sizeof tag, "rotated (%s): ", kRinName[mode]);
  compareRotReductions(tag, hpk, stride, n, count, bits, block, cs);
  free(hpk);
}

/* The sweep: every width, every block size, short last blocks and counts
 * over several escape groups, n = 1..8, every input kind above. */
static void runRotatedReduceSweep(size_t unused) {
  (void)unused;
  int cs = 0;
  rotQualBlocks = rotOtherBlocks = rotOverflowCases = 0;
  for (int b = 0; b < NBITS; b++)
    for (size_t k = 0; k < sizeof kBlocks / sizeof kBlocks[0]; k++) {
      int B = kBlocks[k];
      size_t counts[] = {(size_t)B + 1, 3 * (size_t)B + 7, 2 * (size_t)ZPP_QUANT_ESC_GROUP + 333};
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int mode = 0; mode < RIN_COUNT; mode++, cs++) {
          if (quick && cs % 3) continue;
          if (c == 2 && (k + (size_t)mode) % 2) continue; /* the large count: half the cases */
          if (emuThin(kBits[b], k + (size_t)mode)) continue;
          int n = 1 + cs % 8;
          if (mode == RIN_OVERFLOW && n == 1) n = 2;
          testRotReduce(mode, kBits[b], B, counts[c], n, cs % 2 ? 16 : 0, cs);
        }
    }
  printf("rotated reduce sweep: %zu blocks qualify for the direct order, %zu do not; %zu r overflows\n",
         rotQualBlocks, rotOtherBlocks, rotOverflowCases);
  CHECK_MSG(rotQualBlocks > 0 && rotOtherBlocks > 0 && rotOverflowCases > 0,
            "rotated reduce sweep: %zu qualifying, %zu other blocks, %zu overflows", rotQualBlocks,
            rotOtherBlocks, rotOverflowCases);
}

/* Bad arguments are refused by name; a mismatched input header sums to NaN. */
static void testRotReduceExtras(void) {
  const size_t count = 2 * 256 + 9;
  const int bits = 8, block = 256, n = 2;
  size_t P = zppQuantPackedSize(count, bits, block);
  uint8_t* hpk = hAlloc(2 * P, 0);
  makeRotInputs(RIN_MILD, bits, block, count, n, hpk, P);
  devbuf_t dpk = dbAlloc(2 * P, 0);
  dbUpload(&dpk, hpk);
  devbuf_t dout = dbAlloc(count * 4, 0);
  devbuf_t dreq = dbAlloc(P, 0);
  float* gpuOut = hAlloc(count * 4, 0);
  cudaStream_t st = tdevStream();
  CHECK_EQ_INT(
      zppDequantizeSumExCuda(dpk.p, P, n, count - 1, bits, block, 1.0f, dout.p, zppFloat32, st),
      zppSuccess);
  tdevSync();
  tdevToHost(gpuOut, dout.p, (count - 1) * 4);
  CHECK_MSG(allNaN(gpuOut, zppFloat32, count - 1), "rotated sum, count mismatch: not all NaN");
  zppLogLevel_t level = zppLogLevel();
  zppLogSetLevel(ZPP_LOG_NONE);
  CHECK_EQ_INT(zppDequantizeSumOrderCuda(dpk.p, P, n, count, bits, block, 1.0f, dout.p, zppFloat32,
                                         (zppQuantSumOrder_t)3, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeSumExCuda(dpk.p, P, n, count, bits, block, 0.0f, dout.p, zppFloat32, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeSumExCuda(dpk.p, P, 0, count, bits, block, 1.0f, dout.p, zppFloat32, st),
               zppInvalidArgument);
  CHECK_EQ_INT(
      zppDequantizeSumExCuda(dpk.p, P - 16, n, count, bits, block, 1.0f, dout.p, zppFloat32, st),
      zppInvalidArgument);
  CHECK_EQ_INT(zppDequantizeSumExCuda(dpk.p, P, n, count, bits, block, 1.0f, NULL, zppFloat32, st),
               zppInvalidArgument);
  CHECK_EQ_INT(
      zppQuantReduceRequantExCuda(dpk.p, P, n, count, bits, block, bits, block, 2u, dreq.p, st),
      zppInvalidArgument);
  CHECK_EQ_INT(zppQuantReduceRequantExCuda(dpk.p, P, n, count, bits, block, bits, 48, ZPP_QUANT_ROTATE,
                                           dreq.p, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppQuantReduceRequantExCuda(dpk.p, P, n, count, bits, block, bits, block,
                                           ZPP_QUANT_ROTATE, dpk.p + P, st),
               zppInvalidArgument);
  CHECK_EQ_INT(zppQuantReduceRequantExCuda(dpk.p, P, n, count, bits, block, bits, block,
                                           ZPP_QUANT_ROTATE, dreq.p + 2, st),
               zppInvalidArgument);
  zppLogSetLevel(level);
  tdevSync();
  free(hpk);
  free(gpuOut);
  dbFree(&dpk);
  dbFree(&dout);
  dbFree(&dreq);
}

static void runCodecSweep(size_t large);

/* Every case of the codec sweep again, rotated: all dtypes, every width,
 * every block size, odd and short counts, Inf, NaN, tiny and huge blocks
 * (w overflows: stored plain), escapes, overflows. */
static void runRotatedCodecSweep(size_t large) {
  quantFlags = ZPP_QUANT_ROTATE;
  rotBlocks = rotPlainBlocks = 0;
  runCodecSweep(large);
  quantFlags = 0;
  printf("rotated codec sweep: %zu blocks rotated, %zu stored plain\n", rotBlocks, rotPlainBlocks);
  CHECK_MSG(rotBlocks > 0 && rotPlainBlocks > 0, "rotated sweep: %zu rotated, %zu plain blocks",
            rotBlocks, rotPlainBlocks);
}

/* The planted outliers of the escape sweep (each case checks its own
 * escapes), rotated. */
static void runRotatedEscapeSweep(void) {
  quantFlags = ZPP_QUANT_ROTATE;
  runEscapeCodecSweep();
  quantFlags = 0;
}

/* ---- driver ------------------------------------------------------------------------------ */

static void runCodecSweep(size_t large) {
  for (size_t t = 0; t < sizeof kTypes / sizeof kTypes[0]; t++) {
    for (int b = 0; b < NBITS; b++) {
      for (size_t k = 0; k < sizeof kBlocks / sizeof kBlocks[0]; k++) {
        int B = kBlocks[k];
        if (quick && k % 3 != 0) continue;
        if (emuThin(kBits[b], k)) continue;
        size_t counts[] = {0,
                           1,
                           2,
                           (size_t)B - 1,
                           (size_t)B,
                           (size_t)B + 1,
                           2 * (size_t)B + 3,
                           5 * (size_t)B + (size_t)B / 2 + 1};
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
          if (quick && c % 2) continue;
          /* alternate aligned and misaligned placements */
          size_t inOff = c % 3 == 1 ? 1 : c % 3 == 2 ? 3 : 0;
          size_t pkOff = 4 * (c % 4);
          testCodec(kTypes[t], kBits[b], B, counts[c], inOff, pkOff);
        }
      }
      /* large: many CTAs, the vector paths, both extreme block sizes */
      testCodec(kTypes[t], kBits[b], 32, large, 0, 0);
      testCodec(kTypes[t], kBits[b], 4096, large + 3, 1, 4);
      if (!quick) testCodec(kTypes[t], kBits[b], 256, large, 0, 8);
    }
  }
}

static void runReduceSweep(size_t large) {
  for (int b = 0; b < NBITS; b++) {
    for (size_t k = 0; k < sizeof kBlocks / sizeof kBlocks[0]; k++) {
      int B = kBlocks[k];
      if (quick && k % 3 != 0) continue;
      if (emuThin(kBits[b], k)) continue;
      size_t counts[] = {1, (size_t)B - 1, (size_t)B + 1, 3 * (size_t)B + 7};
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        if (quick && c % 2) continue;
        int n = c == 0 ? 1 : c == 1 ? 2 : c == 2 ? 3 : 5;
        testReduce(kBits[b], B, counts[c], n, c % 2 ? 16 : 0);
      }
    }
    testReduce(kBits[b], 256, large, 4, 32);
  }
}

static void runReorderSweep(size_t unused) {
  (void)unused;
  static const int shapes[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {6, 3}, {8, 4}, {8, 8}, {12, 4}};
  int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  for (int s = 0; s < nshapes; s++) {
    if (quick && s % 2) continue;
    int W = shapes[s][0], L = shapes[s][1];
    zppDataType_t dt = kTypes[s % 3];
    int bits = kBits[(s + s / 3) % NBITS]; /* every width beside every dtype */
    int block = kBlocks[(s * 3) % 8];
    testReordered(dt, bits, block, W, L, 0, 0);
    testReordered(dt, bits, block, W, L, 1, 3);
    testReordered(dt, bits, block, W, L, (size_t)block * 3 + 17, 0);
    testReordered(dt, bits, block, W, L, (size_t)block * 2 + 1, 5);
  }
}

/* Runs a sweep of random inputs, which must have made the CPU escape and
 * (with needOverflow) overflow somewhere, or its comparisons would prove
 * nothing about those paths. */
static void runSweep(const char* name, void (*sweep)(size_t), size_t large, int needOverflow) {
  uint64_t escapes = 0, overflows = 0;
  zppQuantTakeEscapeCounts(NULL, NULL);
  sweep(large);
  zppQuantTakeEscapeCounts(&escapes, &overflows);
  printf("%s sweep: the CPU escaped %llu elements, %llu escape overflows\n", name,
         (unsigned long long)escapes, (unsigned long long)overflows);
  CHECK_MSG(escapes > 0 && (overflows > 0 || !needOverflow), "%s sweep: %llu escapes, %llu overflows",
            name, (unsigned long long)escapes, (unsigned long long)overflows);
}

int main(int argc, char** argv) {
  int probe = 0, onlyRotReduce = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--probe"))
      probe = 1;
    else if (!strcmp(argv[i], "--rotated-reduce"))
      onlyRotReduce = 1;
    else {
      fprintf(stderr, "usage: %s [--quick] [--probe] [--rotated-reduce]\n", argv[0]);
      return 2;
    }
  }
  char reason[256] = "";
  if (!tdevInit(reason, sizeof reason)) {
    printf("SKIP: %s\n", reason);
    return ZPP_TEST_SKIP;
  }
  if (probe) {
    tdevShutdown();
    return 0;
  }
  printf("device: %s; CPU codec: %s%s\n", tdevName(), zppQuantImplName(), quick ? "; quick" : "");
  zppTestRngSeed(&rng, 0x7a707031ull);

  /* The emulator runs every thread as a fiber: keep its large cases modest. */
  size_t large = tdevIsEmulated() ? 20011 : quick ? 100003 : (size_t)3 << 20 | 5;
  if (onlyRotReduce) {
    runSweep("rotated reduce", runRotatedReduceSweep, 0, 1);
    testRotReduceExtras();
    tdevSync();
    tdevShutdown();
    return zppTestExit(argv[0]);
  }
  testArguments();
  testHeaderMismatch();
  testAsync();
  runSweep("codec", runCodecSweep, large, 1);
  runSweep("reduce", runReduceSweep, large, 1);
  runEscapeSweep();
  runSweep("reorder", runReorderSweep, 0, 0);
  runSweep("rotated codec", runRotatedCodecSweep, large, 1);
  runRotatedEscapeSweep();
  testRotatedExtras();
  runSweep("rotated reduce", runRotatedReduceSweep, 0, 1);
  testRotReduceExtras();
  tdevSync();
  tdevShutdown();
  return zppTestExit(argv[0]);
}
