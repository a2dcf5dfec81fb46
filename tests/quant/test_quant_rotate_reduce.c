/*
 * The reductions over rotated segments (zppDequantizeSumEx,
 * zppQuantReduceRequantEx; zpp_quant.h, "Reductions of rotated segments"):
 *   - the documented order, bit for bit: each input decoded in full by
 *     zppDequantizeEx, summed in input order in fp32, divided, rounded; the
 *     requantized output is zppQuantizeEx of those sums, byte for byte;
 *   - inputs of both kinds mixed (rotated and plain segments), every dtype,
 *     int8 and int4, odd counts, an Inf and a NaN (NaN in the result);
 *   - the fp32 sum within gamma_{n-1} sum |y| of the exact sum;
 *   - bad arguments refused with zppInvalidArgument.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "quant_kernels/zpp_quant.h"
#include "quant_testlib.h"

static const zppDataType_t kTypes[3] = {zppFloat32, zppFloat16, zppBfloat16};

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  REQUIRE(p != NULL);
  return p;
}

static void fill(float* x, size_t n, zppTestRng_t* rng, int heavy) {
  for (size_t i = 0; i < n; i++) {
    double v = zppTestRngNormal(rng);
    if (heavy && zppTestRngNext(rng) % 64 == 0) v *= 100;
    x[i] = (float)v;
  }
}

/* One case: n inputs of count elements, input k rotated when k is even. */
static void checkCase(int n, size_t count, int bits, int block, zppDataType_t otype, int specials,
                      zppTestRng_t* rng) {
  const size_t P = zppQuantPackedSize(count, bits, block);
  uint8_t* segs = xmalloc((size_t)n * P);
  uint8_t* req = xmalloc(P);
  uint8_t* want = xmalloc(P);
  float* x = xmalloc(count * sizeof(float));
  float* y = xmalloc(count * sizeof(float));
  float* sum = xmalloc(count * sizeof(float));
  double* exact = xmalloc(count * sizeof(double));
  double* absy = xmalloc(count * sizeof(double));
  char* out = xmalloc(count * 4);
  char* ref = xmalloc(count * 4);
  char what[128];
  snprintf(what, sizeof what, "n %d count %zu int%d block %d -> %s%s", n, count, bits, block,
           qtTypeName(otype), specials ? " with Inf/NaN" : "");
  for (size_t i = 0; i < count; i++) sum[i] = 0.0f, exact[i] = 0.0, absy[i] = 0.0;
  for (int k = 0; k < n; k++) {
    fill(x, count, rng, k % 3 == 1);
    if (specials && k == n - 1 && count > 10) {
      x[3] = INFINITY;
      x[count - 2] = NAN;
    }
    REQUIRE(zppQuantizeEx(x, zppFloat32, count, bits, block, k % 2 == 0 ? ZPP_QUANT_ROTATE : 0u,
                          segs + (size_t)k * P) == zppSuccess);
    REQUIRE(zppDequantizeEx(segs + (size_t)k * P, count, bits, block, y, zppFloat32) == zppSuccess);
    for (size_t i = 0; i < count; i++) {
      sum[i] = sum[i] + y[i]; /* the documented order */
      exact[i] += (double)y[i];
      absy[i] += fabs((double)y[i]);
    }
  }
  const float divisor = n > 2 ? (float)n : 1.0f;
  CHECK_MSG(zppDequantizeSumEx(segs, P, n, count, bits, block, divisor, out, otype) == zppSuccess,
            "%s: sum", what);
  for (size_t i = 0; i < count; i++) qtSet(ref, otype, i, sum[i] / divisor);
  CHECK_MSG(qtFirstDiff(out, ref, otype, count) == (size_t)-1, "%s: sum differs from the spec's order",
            what);
  /* The fp32 sum against the exact sum of the decoded inputs. */
  const double u = 0x1p-24, g = (n - 1) * u / (1 - (n - 1) * u);
  long bad = 0;
  for (size_t i = 0; i < count; i++) {
    if (specials && count > 10 && (i == 3 || i == count - 2)) {
      CHECK_MSG(isnan(sum[i]) && isnan(qtGet(out, otype, i)), "%s: element %zu not NaN", what, i);
      continue;
    }
    if (!(fabs((double)sum[i] - exact[i]) <= g * absy[i])) bad++;
  }
  CHECK_MSG(bad == 0, "%s: %ld sums outside gamma_{n-1} sum |y|", what, bad);
  for (unsigned flags = 0; flags <= ZPP_QUANT_ROTATE; flags += ZPP_QUANT_ROTATE) {
    CHECK_MSG(
        zppQuantReduceRequantEx(segs, P, n, count, bits, block, bits, block, flags, req) == zppSuccess,
        "%s: requant flags %u", what, flags);
    REQUIRE(zppQuantizeEx(sum, zppFloat32, count, bits, block, flags, want) == zppSuccess);
    CHECK_MSG(memcmp(req, want, P) == 0, "%s: requant (flags %u) differs from quantizing the sums",
              what, flags);
  }
  free(segs);
  free(req);
  free(want);
  free(x);
  free(y);
  free(sum);
  free(exact);
  free(absy);
  free(out);
  free(ref);
}

static void checkArguments(void) {
  const size_t count = 100, P = zppQuantPackedSize(count, 8, 64);
  uint8_t* segs = xmalloc(2 * P + P);
  float x[100], out[100];
  for (int i = 0; i < 100; i++) x[i] = (float)i;
  REQUIRE(zppQuantizeEx(x, zppFloat32, count, 8, 64, ZPP_QUANT_ROTATE, segs) == zppSuccess);
  REQUIRE(zppQuantizeEx(x, zppFloat32, count, 8, 64, 0, segs + P) == zppSuccess);
  uint8_t* o = segs + 2 * P;
  CHECK(zppDequantizeSumEx(segs, P, 0, count, 8, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(NULL, P, 2, count, 8, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P - 1, 2, count, 8, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 0.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, NAN, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 1.0f, NULL, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 1.0f, out, zppInt32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 5, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  /* The header must match what the caller says: another count is refused. */
  CHECK(zppDequantizeSumEx(segs, P, 2, count - 1, 8, 64, 1.0f, out, zppFloat32) != zppSuccess);
  CHECK(zppQuantReduceRequantEx(segs, P, 2, count, 8, 64, 8, 64, ZPP_QUANT_ROTATE, NULL) ==
        zppInvalidArgument);
  CHECK(zppQuantReduceRequantEx(segs, P, 2, count, 8, 64, 8, 64, ZPP_QUANT_ROTATE, segs + P) ==
        zppInvalidArgument);
  CHECK(zppQuantReduceRequantEx(segs, P, 2, count, 8, 64, 8, 64, ZPP_QUANT_ROTATE, o) == zppSuccess);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 2.0f, out, zppFloat32) == zppSuccess);
  free(segs);
}

int main(void) {
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 2727);
  checkArguments();
  static const size_t counts[] = {1, 63, 64, 1001, 4096, 5000};
  for (int n = 1; n <= 5; n += 2)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (int bits = 8; bits >= 4; bits -= 4)
        for (int ti = 0; ti < 3; ti++) {
          int block = bits == 8 ? 256 : 64;
          checkCase(n, counts[c], bits, block, kTypes[ti], 0, &rng);
          if (counts[c] > 10 && ti == 0) checkCase(n, counts[c], bits, 32, kTypes[ti], 1, &rng);
        }
  return zppTestExit("test_quant_rotate_reduce");
}
