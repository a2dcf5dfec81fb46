/*
 * Error feedback in the rotated domain (zpp_quant.h, zppQuantizeExFeedback),
 * over sequences of steps from zero residuals, for every dtype, int2, int4
 * and int8, blocks 32 to 512, segments of whole escape groups and with a
 * short tail:
 *   - conservation, the property error feedback rests on: per element,
 *     what was sent plus what is kept equals the input plus what was kept
 *     before, y + U(e') = g + U(e), U being a residual's values in the
 *     original domain (the rotated blocks' inverse transform computed here
 *     in double). Allowed: half a step of the 8-bit storage of e' (its
 *     block's scale / 2, spread by the exact inverse to at most that per
 *     element) and the fp32 roundings of the transforms (2^-22 B M, as the
 *     codec's bound). A residual dropped or applied twice is off by up to a
 *     codec step (about 127 times the allowance);
 *   - every implementation gives the same bytes (segment and residual);
 *   - groups with outliers, a non-finite element or a short block take the
 *     original domain (sign bits clear), the others the rotated one; a NaN
 *     travels in its own element and its residual waits (U unchanged);
 *   - the first step after zppQuantResidUnrotate (unrotated, non-zero
 *     residuals: the vector kernels hand those groups to the reference),
 *     and zppQuantResidUnrotate itself against U; a block whose residual
 *     blocks disagree on their domain (a foreign state) read as marked;
 *   - a NULL residual or scratch is refused.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"
#include "quant_testlib.h"

static const char* gImpls[QT_MAX_IMPLS];
static int gNimpl;
static const zppDataType_t kTypes[3] = {zppFloat32, zppFloat16, zppBfloat16};

#define STEPS 5
#define SIGN 0x80000000u

static uint32_t bitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static int rotatedAt(zppQuantResid_t e, size_t i) {
  return (bitsOf(e.scale[i / ZPP_QUANT_RESID_BLOCK]) & SIGN) != 0;
}

static double valueAt(zppQuantResid_t e, size_t i) {
  return (double)e.q[i] * fabs((double)e.scale[i / ZPP_QUANT_RESID_BLOCK]);
}

/* U(e) in double: each full block's rotated values through (1/B) D H, plus
 * the others as they are (the spec's step 3 u, without fp32 roundings). */
static void original(zppQuantResid_t e, size_t n, int block, double* u) {
  const size_t B = (size_t)block;
  double* v = malloc(B * sizeof(double));
  REQUIRE(v);
  for (size_t lo = 0; lo < n; lo += B) {
    size_t len = n - lo < B ? n - lo : B;
    int any = 0;
    for (size_t i = 0; i < len; i++) {
      int rot = len == B && rotatedAt(e, lo + i);
      any |= rot;
      v[i] = rot ? valueAt(e, lo + i) : 0.0;
      u[lo + i] = rot ? 0.0 : valueAt(e, lo + i);
    }
    if (!any) continue;
    qtExactInverse(v, B);
    for (size_t i = 0; i < len; i++) u[lo + i] += v[i];
  }
  free(v);
}

typedef struct {
  size_t count;
  int bits, block;
  zppDataType_t dtype;
  size_t segBytes, residBytes;
} case_t;

/* Step t's input: Gaussian, with outliers in group 1 at step 2, a NaN at
 * step 3 and an Inf at step 4 (in group 0). */
static void input(const case_t* c, int t, zppTestRng_t* rng, void* g) {
  for (size_t i = 0; i < c->count; i++) qtSet(g, c->dtype, i, (float)zppTestRngNormal(rng));
  if (t == 2 && c->count > 4096 + 8)
    for (int k = 0; k < 3; k++) qtSet(g, c->dtype, 4096 + 3 + 5 * (size_t)k, 3000.0f);
  if (t == 3) qtSet(g, c->dtype, 7, NAN);
  if (t == 4) qtSet(g, c->dtype, 9, INFINITY);
}

/* One step with implementation `impl`: e -> out, the segment into seg. */
static void step(const char* impl, const case_t* c, const void* g, zppQuantResid_t e,
                 zppQuantResid_t out, void* seg, float* scratch) {
  qtUseRot(impl);
  CHECK(zppQuantizeExFeedback(g, c->dtype, c->count, c->bits, c->block, e, out, seg, scratch) ==
        zppSuccess);
}

/* y + U(out) against g + U(e), element by element; the domains per group. */
static void checkConservation(const case_t* c, int t, const void* g, zppQuantResid_t e,
                              zppQuantResid_t out, const void* seg, const char* what) {
  const size_t n = c->count, B = (size_t)c->block;
  double* ue = malloc(n * sizeof(double));
  double* uo = malloc(n * sizeof(double));
  float* y = malloc(n * sizeof(float));
  REQUIRE(ue && uo && y);
  original(e, n, c->block, ue);
  original(out, n, c->block, uo);
  CHECK(zppDequantizeEx(seg, n, c->bits, c->block, y, zppFloat32) == zppSuccess);
  int bad = 0;
  double worst = 0;
  for (size_t lo = 0; lo < n; lo += B) {
    size_t len = n - lo < B ? n - lo : B;
    double mx = 0, mu = 0, half = 0;
    for (size_t i = lo; i < lo + len; i++) {
      double gi = qtGet(g, c->dtype, i);
      if (isfinite(gi)) mx = fmax(mx, fabs(gi) + fabs(ue[i]));
      mu = fmax(mu, fabs(uo[i]));
      half = fmax(half, fabs((double)out.scale[i / ZPP_QUANT_RESID_BLOCK]) / 2);
    }
    double tol = half * (1 + 0x1p-20) + 0x1p-22 * (double)B * (mx + mu) + 1e-37;
    for (size_t i = lo; i < lo + len; i++) {
      double gi = qtGet(g, c->dtype, i);
      double err;
      if (!isfinite(gi)) { /* in its own element; the residual waits */
        CHECK_MSG(isnan(y[i]) || y[i] == gi, "%s step %d: element %zu (%g) decodes to %g", what, t, i,
                  gi, (double)y[i]);
        err = fabs(uo[i] - ue[i]);
      } else {
        err = fabs(((double)y[i] + uo[i]) - (gi + ue[i]));
      }
      if (tol > 0) worst = fmax(worst, err / tol);
      if (!(err <= tol) && bad++ < 3)
        CHECK_MSG(0,
                  "%s step %d: element %zu: y %.9g + U(e') %.9g != g %.9g + U(e) %.9g (off %.3g, "
                  "allowed %.3g)",
                  what, t, i, (double)y[i], uo[i], gi, ue[i], err, tol);
    }
  }
  CHECK_MSG(bad == 0, "%s step %d: %d elements break conservation", what, t, bad);
  (void)worst;
  free(ue);
  free(uo);
  free(y);
}

/* Which groups the step put in which domain: rotated unless the group has
 * a short block, a non-finite element or the outliers of step 2. */
static void checkDomains(const case_t* c, int t, zppQuantResid_t out, const char* what) {
  for (size_t g = 0; g * 4096 < c->count; g++) {
    size_t base = g * 4096, glen = c->count - base < 4096 ? c->count - base : 4096;
    int expectRot = glen % (size_t)c->block == 0 && !(t == 2 && g == 1) && !(t >= 3 && g == 0);
    int allRot = 1, noneRot = 1;
    for (size_t i = base; i < base + glen; i += ZPP_QUANT_RESID_BLOCK) {
      allRot &= rotatedAt(out, i);
      noneRot &= !rotatedAt(out, i);
    }
    CHECK_MSG(expectRot ? allRot : noneRot, "%s step %d: group %zu %s the rotated domain", what, t, g,
              expectRot ? "not all in" : "partly in");
  }
}

static zppQuantResid_t residIn(void* buf, size_t n) { return zppQuantResidIn(buf, n); }

static void runCase(const case_t* c, zppTestRng_t* rng) {
  char what[160];
  snprintf(what, sizeof what, "%s int%d block %d count %zu", qtTypeName(c->dtype), c->bits, c->block,
           c->count);
  const size_t n = c->count;
  void* g = malloc(n * qtTypeSize(c->dtype));
  float* scratch = malloc(2 * n * sizeof(float));
  uint8_t* seg[QT_MAX_IMPLS];
  uint8_t* res[QT_MAX_IMPLS][2];
  REQUIRE(g && scratch);
  for (int k = 0; k < gNimpl; k++) {
    seg[k] = malloc(c->segBytes);
    res[k][0] = calloc(1, c->residBytes); /* zero residuals */
    res[k][1] = calloc(1, c->residBytes);
    REQUIRE(seg[k] && res[k][0] && res[k][1]);
  }
  for (int t = 0; t < STEPS + 1; t++) {
    if (t == STEPS) /* the last step after zppQuantResidUnrotate: unrotated non-zero residuals */
      for (int k = 0; k < gNimpl; k++) {
        zppQuantResid_t r = residIn(res[k][t & 1], n);
        double* u = malloc(n * sizeof(double));
        double* v = malloc(n * sizeof(double));
        REQUIRE(u && v);
        original(r, n, c->block, u);
        zppQuantResidUnrotate(r, n, c->block);
        original(r, n, c->block, v);
        /* Half a step of the new 8-bit storage, and the fp32 transform's
         * roundings (below 2^-18 of the block's largest value). */
        int bad = 0;
        for (size_t lo = 0; lo < n; lo += (size_t)c->block) {
          size_t len = n - lo < (size_t)c->block ? n - lo : (size_t)c->block;
          double mu = 0;
          for (size_t i = lo; i < lo + len; i++) mu = fmax(mu, fabs(u[i]));
          for (size_t i = lo; i < lo + len; i++) {
            double tol =
                fabs((double)r.scale[i / ZPP_QUANT_RESID_BLOCK]) / 2 * (1 + 0x1p-20) + 0x1p-18 * mu;
            bad += rotatedAt(r, i) || !(fabs(v[i] - u[i]) <= tol);
          }
        }
        CHECK_MSG(bad == 0, "%s: zppQuantResidUnrotate: %d elements flagged or off", what, bad);
        free(u);
        free(v);
      }
    if (t == 1 || t == 3) /* a foreign state: residual block 0 unmarked, its block now mixed */
      for (int k = 0; k < gNimpl; k++) {
        zppQuantResid_t r = residIn(res[k][t & 1], n);
        r.scale[0] = fabsf(r.scale[0]);
      }
    input(c, t, rng, g);
    for (int k = 0; k < gNimpl; k++) {
      zppQuantResid_t e = residIn(res[k][t & 1], n), out = residIn(res[k][(t + 1) & 1], n);
      step(gImpls[k], c, g, e, out, seg[k], scratch);
      if (k == 0) {
        checkConservation(c, t, g, e, out, seg[0], what);
        if (t < STEPS) checkDomains(c, t, out, what);
        continue;
      }
      CHECK_MSG(memcmp(seg[k], seg[0], c->segBytes) == 0, "%s step %d: %s's segment differs from %s's",
                what, t, gImpls[k], gImpls[0]);
      CHECK_MSG(memcmp(res[k][(t + 1) & 1], res[0][(t + 1) & 1], c->residBytes) == 0,
                "%s step %d: %s's residual differs from %s's", what, t, gImpls[k], gImpls[0]);
    }
  }
  for (int k = 0; k < gNimpl; k++) {
    free(seg[k]);
    free(res[k][0]);
    free(res[k][1]);
  }
  free(g);
  free(scratch);
}

static void checkArguments(void) {
  float g[64] = {0}, scratch[128];
  uint8_t seg[1024], rb[256];
  zppQuantResid_t r = zppQuantResidIn(rb, 64), none = {NULL, NULL};
  CHECK(zppQuantizeExFeedback(g, zppFloat32, 64, 2, 32, none, r, seg, scratch) == zppInvalidArgument);
  CHECK(zppQuantizeExFeedback(g, zppFloat32, 64, 2, 32, r, none, seg, scratch) == zppInvalidArgument);
  CHECK(zppQuantizeExFeedback(g, zppFloat32, 64, 2, 32, r, r, seg, NULL) == zppInvalidArgument);
  CHECK(zppQuantizeExFeedback(g, zppFloat32, 64, 3, 32, r, r, seg, scratch) == zppInvalidArgument);
}

int main(void) {
  gNimpl = qtRotImpls(gImpls);
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 0x5eed0045);
  const int kBits[3] = {2, 4, 8};
  const int kBlocks[4] = {32, 64, 256, 512};
  for (int d = 0; d < 3; d++)
    for (int bi = 0; bi < 3; bi++)
      for (int kb = 0; kb < 4; kb++)
        for (int tail = 0; tail < 2; tail++) {
          case_t c;
          c.dtype = kTypes[d];
          c.bits = kBits[bi];
          c.block = kBlocks[kb];
          c.count = 3 * 4096 + (tail ? 1000 : 0);
          c.segBytes = zppQuantPackedSize(c.count, c.bits, c.block);
          c.residBytes = zppQuantResidBytes(c.count);
          runCase(&c, &rng);
        }
  checkArguments();
  return zppTestExit("test_quant_rotate_ef");
}
