/*
 * The reductions over n packed inputs at a stride (how an all-to-all's
 * receive buffer holds them):
 *   - zppDequantizeAccumulate: exactly the spec's fp32 sum in input order,
 *     from the test's own decoding of the bytes, with and without a prior
 *     acc;
 *   - zppDequantizeSum: exactly fl(sum / divisor) rounded to the output type
 *     (avg = sum / world size, a true division);
 *   - zppQuantReduceRequant: byte-identical to accumulate-then-quantize, and
 *     within the documented bound of the exact sum (double precision, checked
 *     to be exact);
 * with non-finite and huge input elements escaping (alone in one input, and
 * at the same element in every input), non-finite input blocks poisoning
 * only their own elements, and every implementation bit-identical to the
 * scalar one.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"
#include "quant_testlib.h"

static const char* gImpls[QT_MAX_IMPLS];
static int gNimpl;
static const zppDataType_t kTypes[3] = {zppFloat32, zppFloat16, zppBfloat16};

typedef struct {
  int n, bits, block;
  size_t count, size, stride;
  uint8_t* packed; /* n segments at stride */
} inputs_t;

/* n inputs of gradient-like data: each rank its own scale, a few outliers,
 * when `poison` one input with a NaN and one with an Inf (both escape), a
 * huge value at the same element of every input (escapes in every input),
 * and five NaN in one block of one input (marked where its group's table is
 * full). */
static void makeInputs(inputs_t* in, int n, size_t count, int bits, int block, int poison,
                       zppTestRng_t* rng) {
  in->n = n;
  in->bits = bits;
  in->block = block;
  in->count = count;
  in->size = zppQuantPackedSize(count, bits, block);
  in->stride = in->size + 48; /* a gap, as between receive slots */
  in->packed = malloc(in->stride * (size_t)n);
  REQUIRE(in->packed != NULL);
  memset(in->packed, 0x3c, in->stride * (size_t)n);
  float* x = malloc(count * sizeof(float) + 4);
  REQUIRE(x != NULL);
  qtUse("scalar");
  for (int k = 0; k < n; k++) {
    double sigma = ldexp(1.0, (int)(zppTestRngNext(rng) % 7) - 6);
    for (size_t i = 0; i < count; i++) {
      double v = zppTestRngNormal(rng) * sigma;
      if (zppTestRngNext(rng) % 1000 == 0) v *= 100.0;
      x[i] = (float)v;
    }
    if (poison && count > 2 * (size_t)block) {
      if (k == n - 1) x[block + 3] = NAN;
      if (k == 0) x[count - 1] = -INFINITY;
      x[block + 5] = 4096.0f * (float)(k + 1); /* huge, yet the double sums stay exact */
      if (k == n / 2 && count >= 4 * (size_t)block)
        for (size_t i = 3 * (size_t)block; i < 3 * (size_t)block + 5; i++) x[i] = NAN;
      /* Block 0 tiny in every input (sums below 2^-64: the scaled path),
       * block 2 zero in every input (a zero sum), where they exist whole. */
      for (size_t i = 0; i < (size_t)block; i++) x[i] = ldexpf(x[i], -80);
      if (count >= 3 * (size_t)block + 1)
        for (size_t i = 2 * (size_t)block; i < 3 * (size_t)block; i++) x[i] = 0.0f;
    }
    CHECK(zppQuantize(x, zppFloat32, count, bits, block, in->packed + (size_t)k * in->stride) ==
          zppSuccess);
  }
  free(x);
}

/* The spec's fp32 sum for element i, from the bytes: (start + y_0) + ...
 * + y_{n-1} over the packed values, then + e_k over the escaped values in
 * input order. */
static float refSum(const inputs_t* in, size_t i, float start) {
  float acc = start;
  for (int k = 0; k < in->n; k++) {
    const uint8_t* seg = in->packed + (size_t)k * in->stride;
    int marker = qtQ(seg, in->count, in->bits, in->block, i) == -qtQmax(in->bits) - 1;
    acc = acc + (marker ? NAN : qtDecoded(seg, in->count, in->bits, in->block, i));
  }
  for (int k = 0; k < in->n; k++) {
    float e;
    if (qtEscaped(in->packed + (size_t)k * in->stride, in->count, in->bits, in->block, i, &e))
      acc = acc + e;
  }
  return acc;
}

/* Exact sum of the decoded values in double, sum |y|, and the number of
 * terms of the fp32 sum (n plus the escapes); REQUIREs that the double
 * additions were exact (TwoSum error terms all zero). */
static double exactSum(const inputs_t* in, size_t i, double* absSum, int* terms) {
  double s = 0, a = 0;
  *terms = in->n;
  for (int k = 0; k < in->n; k++) {
    float e;
    *terms += qtEscaped(in->packed + (size_t)k * in->stride, in->count, in->bits, in->block, i, &e);
    double y = qtElement(in->packed + (size_t)k * in->stride, in->count, in->bits, in->block, i);
    double t = s + y, bb = t - s, err = (s - (t - bb)) + (y - bb);
    REQUIRE(err == 0.0); /* the reference must be exact, or the bound check means nothing */
    s = t;
    a += fabs(y);
  }
  *absSum = a;
  return s;
}

static int sameFloat(float a, float b) {
  return zppF32Bits(a) == zppF32Bits(b) || (isnan(a) && isnan(b));
}

static void checkAccumulate(const inputs_t* in, const char* what) {
  size_t count = in->count;
  float* acc[QT_MAX_IMPLS];
  for (int k = 0; k < gNimpl; k++) {
    qtUse(gImpls[k]);
    acc[k] = malloc(count * sizeof(float) + 4);
    REQUIRE(acc[k] != NULL);
    for (int pass = 0; pass < 2; pass++) {
      /* pass 0: acc = 0 + sum; pass 1: acc = prior + sum */
      for (size_t i = 0; i < count; i++) acc[k][i] = pass ? (float)i * 0.25f - 3.0f : 1e30f;
      acc[k][count] = 7.0f;
      CHECK(zppDequantizeAccumulate(in->packed, in->stride, in->n, count, in->bits, in->block, acc[k],
                                    pass) == zppSuccess);
      CHECK_MSG(acc[k][count] == 7.0f, "%s: wrote past acc", what);
      long bad = 0;
      for (size_t i = 0; i < count; i++) {
        float want = refSum(in, i, pass ? (float)i * 0.25f - 3.0f : 0.0f);
        if (!sameFloat(acc[k][i], want) && bad++ < 3)
          fprintf(stderr, "%s %s acc%d[%zu] = %a, want %a\n", gImpls[k], what, pass, i, acc[k][i],
                  want);
      }
      CHECK_MSG(bad == 0, "%s %s: accumulate (prior %d) differs from the spec's sum at %ld elements",
                gImpls[k], what, pass, bad);
    }
  }
  for (int k = 1; k < gNimpl; k++)
    CHECK_MSG(qtFirstDiff(acc[0], acc[k], zppFloat32, count) == (size_t)-1,
              "%s: %s and %s accumulate differ", what, gImpls[0], gImpls[k]);
  for (int k = 0; k < gNimpl; k++) free(acc[k]);
}

static void checkSum(const inputs_t* in, const char* what) {
  size_t count = in->count;
  /* powers of two take a multiply in the AVX2 code: it must be exact too */
  const float divisors[] = {1.0f, (float)in->n, 3.0f, 6.0f, 0.5f, 0x1p120f, 0x1p-100f, -4.0f};
  float* sums = malloc(count * sizeof(float) + 4);
  REQUIRE(sums != NULL);
  for (size_t i = 0; i < count; i++) sums[i] = refSum(in, i, 0.0f);
  for (size_t d = 0; d < sizeof divisors / sizeof divisors[0]; d++)
    for (int t = 0; t < 3; t++) {
      zppDataType_t T = kTypes[t];
      void* out[QT_MAX_IMPLS];
      for (int k = 0; k < gNimpl; k++) {
        qtUse(gImpls[k]);
        out[k] = malloc(count * 4 + 8);
        REQUIRE(out[k] != NULL);
        memset(out[k], 0x11, count * 4 + 8);
        CHECK(zppDequantizeSum(in->packed, in->stride, in->n, count, in->bits, in->block, divisors[d],
                               out[k], T) == zppSuccess);
        CHECK(((uint8_t*)out[k])[count * qtTypeSize(T)] == 0x11);
        long bad = 0;
        for (size_t i = 0; i < count; i++) {
          /* avg is exactly sum / divisor in fp32, then rounded to T */
          float q = sums[i] / divisors[d];
          uint8_t ref[4];
          qtSet(ref, T, 0, q);
          uint32_t got = qtBits(out[k], T, i), want = qtBits(ref, T, 0);
          if (got != want && !(isnan(q) && isnan(qtGet(out[k], T, i))) && bad++ < 3)
            fprintf(stderr, "%s %s sum/%g -> %s [%zu]: 0x%x, want 0x%x\n", gImpls[k], what,
                    (double)divisors[d], qtTypeName(T), i, got, want);
        }
        CHECK_MSG(bad == 0, "%s %s: sum / %g as %s wrong at %ld elements", gImpls[k], what,
                  (double)divisors[d], qtTypeName(T), bad);
      }
      for (int k = 1; k < gNimpl; k++)
        CHECK_MSG(qtFirstDiff(out[0], out[k], T, count) == (size_t)-1, "%s: %s and %s sums differ",
                  what, gImpls[0], gImpls[k]);
      for (int k = 0; k < gNimpl; k++) free(out[k]);
    }
  free(sums);
}

static void checkReduceRequant(const inputs_t* in, int bitsOut, int blockOut, const char* what) {
  size_t count = in->count;
  size_t size = zppQuantPackedSize(count, bitsOut, blockOut);
  uint8_t* out[QT_MAX_IMPLS];
  uint8_t* composed = malloc(size);
  float* sums = malloc(count * sizeof(float) + 4);
  REQUIRE(composed && sums);
  int Q = qtQmax(bitsOut);
  /* The spec's fp32 sums, and which of them escape (1) or are marked (2)
   * in the output. */
  float* ref = malloc(count * sizeof(float) + 4);
  char* escOut = malloc(count + 1);
  REQUIRE(ref && escOut);
  for (size_t i = 0; i < count; i++) ref[i] = refSum(in, i, 0.0f);
  qtExpectEscapes(ref, zppFloat32, count, bitsOut, blockOut, escOut);
  for (int k = 0; k < gNimpl; k++) {
    qtUse(gImpls[k]);
    out[k] = malloc(size + 16);
    REQUIRE(out[k] != NULL);
    memset(out[k], 0x99, size + 16);
    CHECK(zppQuantReduceRequant(in->packed, in->stride, in->n, count, in->bits, in->block, bitsOut,
                                blockOut, out[k]) == zppSuccess);
    CHECK_MSG(out[k][size] == 0x99, "%s: wrote past the output", what);
    /* The fused result is accumulate-then-quantize, byte for byte. */
    CHECK(zppDequantizeAccumulate(in->packed, in->stride, in->n, count, in->bits, in->block, sums, 0) ==
          zppSuccess);
    CHECK(zppQuantize(sums, zppFloat32, count, bitsOut, blockOut, composed) == zppSuccess);
    CHECK_MSG(memcmp(out[k], composed, size) == 0,
              "%s %s -> int%d/%d: fused differs from accumulate+quantize", gImpls[k], what, bitsOut,
              blockOut);
    /* Within the documented bound of the exact sum of the decoded inputs. */
    long bad = 0;
    for (size_t i = 0; i < count; i++) {
      float sOut = qtScale(out[k], count, blockOut, i / (size_t)blockOut);
      float r = qtElement(out[k], count, bitsOut, blockOut, i), e;
      if ((escOut[i] == 1) != qtEscaped(out[k], count, bitsOut, blockOut, i, &e) ||
          (escOut[i] == 1 && !sameFloat(r, ref[i])) || (escOut[i] == 3 && !isnan(r))) {
        /* An escaped sum travels exactly, a non-finite one decodes to NaN;
         * a candidate that found no slot (2) is bounded below like the
         * rest of its block. */
        if (bad++ < 3)
          fprintf(stderr, "%s %s: element %zu escape %d: %a, want %a\n", gImpls[k], what, i, escOut[i],
                  r, ref[i]);
        continue;
      }
      if (escOut[i] == 1 || escOut[i] == 3) continue;
      if (isnan(sOut) || !isfinite(ref[i])) {
        /* Every non-finite sum is a candidate: no block is non-finite. */
        if (bad++ < 3)
          fprintf(stderr, "%s %s: finite scale over a non-finite sum at %zu\n", gImpls[k], what, i);
        continue;
      }
      double absSum;
      int terms;
      double S = exactSum(in, i, &absSum, &terms);
      double bound =
          sOut / 2.0 + 0x1p-21 * Q * sOut + (terms - 1) * 0x1p-24 * absSum + (Q + 1) * 0x1p-150;
      if (!(fabs((double)r - S) <= bound) && bad++ < 3)
        fprintf(stderr, "%s %s: element %zu r %a exact sum %a (bound %a)\n", gImpls[k], what, i, r, S,
                bound);
    }
    CHECK_MSG(bad == 0, "%s %s -> int%d/%d: %ld elements outside the bound", gImpls[k], what, bitsOut,
              blockOut, bad);
  }
  for (int k = 1; k < gNimpl; k++)
    CHECK_MSG(memcmp(out[0], out[k], size) == 0, "%s: %s and %s fused outputs differ", what, gImpls[0],
              gImpls[k]);
  for (int k = 0; k < gNimpl; k++) free(out[k]);
  free(composed);
  free(sums);
  free(ref);
  free(escOut);
}

int main(void) {
  gNimpl = qtImpls(gImpls);
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 0x5eed0003);
  const int ns[] = {1, 2, 3, 5, 8};
  /* 32 and 64: the AVX2 reduce keeps a block in registers when the input
   * and output blocks are equal and at most 64 (qgZ: int4, 64). */
  const int blocksIn[] = {32, 64, 256, 4096};
  for (int bits = 8; bits >= 2; bits /= 2)
    for (int b = 0; b < 4; b++)
      for (int ni = 0; ni < 5; ni++) {
        int block = blocksIn[b], n = ns[ni];
        /* 1, odd tails, several of the implementations' 2048-element
         * chunks, a tail block, and block boundaries off chunk boundaries. */
        size_t counts[] = {1, 33, (size_t)block + 1, 10007, 3 * (size_t)block + 5};
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
          for (int poison = 0; poison < 2; poison++) {
            if (poison && counts[c] <= 2 * (size_t)block) continue;
            inputs_t in;
            makeInputs(&in, n, counts[c], bits, block, poison, &rng);
            char what[128];
            snprintf(what, sizeof what, "n=%d int%d block %d count %zu%s", n, bits, block, counts[c],
                     poison ? " (non-finite)" : "");
            checkAccumulate(&in, what);
            if (ni % 2 == 0 || poison) checkSum(&in, what);
            /* every width out of every width in (qgZ's hops may differ) */
            const int outs[][2] = {{4, 32},
                                   {4, 512},
                                   {8, 256},
                                   {8, 4096},
                                   {2, 64},
                                   {2, 1024},
                                   {bits, block},
                                   {bits == 2 ? 4 : 2, block},
                                   {bits == 8 ? 4 : 8, block}};
            for (int o = 0; o < 9; o++) checkReduceRequant(&in, outs[o][0], outs[o][1], what);
            free(in.packed);
          }
      }
  /* More inputs than the AVX-512 reductions keep tables for at once (16):
   * their sums continue from the buffer in a second batch. */
  for (int bits = 4; bits >= 2; bits -= 2)
    for (int n = 16; n <= 33; n += 17)
      for (int block = 32; block <= 64; block *= 2) {
        inputs_t in;
        makeInputs(&in, n, 10007, bits, block, 1, &rng);
        char what[64];
        snprintf(what, sizeof what, "n=%d int%d block %d count 10007", n, bits, block);
        checkAccumulate(&in, what);
        checkSum(&in, what);
        checkReduceRequant(&in, 4, 64, what);
        checkReduceRequant(&in, 8, 256, what);
        checkReduceRequant(&in, 2, 64, what);
        free(in.packed);
      }
  /* Scales no codec writes but a received segment may carry: -0 and +0
   * (q * scale is then -0 for some q, which the sum's leading +0 clears),
   * negative, subnormal and infinite ones, each in the same block of every
   * input (so that the test's double sums stay exact). Every implementation
   * must still compute the spec's sums. */
  for (int bits = 2; bits <= 8; bits *= 2) {
    const float odd[] = {-0.0f, 0.0f, -1.5f, 0x1p-140f, INFINITY, -INFINITY};
    inputs_t in;
    makeInputs(&in, 3, 10007, bits, 64, 0, &rng);
    for (int k = 0; k < 3; k++) {
      uint8_t* seg = in.packed + (size_t)k * in.stride;
      for (int j = 0; j < 6; j++)
        zppQuantStoreScale(seg + ZPP_QUANT_HEADER_BYTES, (size_t)(j * 9), odd[j]);
      /* No escapes: an exact value beside another input's subnormal scale
       * would make the test's double sums inexact. */
      for (size_t g = 0; g * ZPP_QUANT_ESC_GROUP < 10007; g++)
        for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++)
          zppQuantEscStoreSlot(seg + zppQuantEscOffset(10007, bits, 64) + g * ZPP_QUANT_ESC_TABLE_BYTES,
                               j, 0.0f, ZPP_QUANT_ESC_EMPTY);
    }
    char what[64];
    snprintf(what, sizeof what, "int%d odd scales", bits);
    checkAccumulate(&in, what);
    checkSum(&in, what);
    checkReduceRequant(&in, 4, 64, what);
    checkReduceRequant(&in, 8, 256, what);
    free(in.packed);
  }
  /* A large case: 2^20 + 3 elements, the qgZ shape (int4 in, int4 out, block 64). */
  {
    inputs_t in;
    makeInputs(&in, 4, ((size_t)1 << 20) + 3, 4, 64, 1, &rng);
    checkAccumulate(&in, "large");
    checkReduceRequant(&in, 4, 64, "large");
    checkReduceRequant(&in, 4, 256, "large");
    checkReduceRequant(&in, 8, 2048, "large");
    free(in.packed);
  }
  return zppTestExit("test_quant_reduce");
}
