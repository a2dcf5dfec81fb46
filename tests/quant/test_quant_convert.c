/*
 * fp16 and bf16 conversions, exhaustively: every one of the 65536 patterns
 * of each format widened, checked against a value computed from the
 * format's definition in double; narrowing checked against a reference that
 * picks the nearest representable value by search (not by bit tricks), on
 * every value near every 16-bit value and rounding midpoint plus random
 * fp32 patterns. The same checks run on each implementation's vector
 * conversions, which must match zpp_half.h bit for bit (NaN: quiet, same
 * sign). bf16 read as fp16 would fail the very first checks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"
#include "quant_testlib.h"

/* Positive finite values of a 16-bit format in bit order, plus the value
 * one step past the largest finite one (2^(emax+1)), which is where
 * rounding to Inf begins halfway to. */
typedef struct {
  zppDataType_t dtype;
  int nfinite; /* patterns 0 .. nfinite-1 are the finite non-negative values */
  double* val; /* nfinite + 1 entries */
} fmt_t;

static void fmtInit(fmt_t* f, zppDataType_t dtype) {
  f->dtype = dtype;
  f->nfinite = dtype == zppFloat16 ? 0x7c00 : 0x7f80;
  f->val = malloc(sizeof(double) * (size_t)(f->nfinite + 1));
  REQUIRE(f->val != NULL);
  for (int k = 0; k < f->nfinite; k++) {
    uint16_t h = (uint16_t)k;
    f->val[k] = qtGet(&h, dtype, 0);
  }
  f->val[f->nfinite] = dtype == zppFloat16 ? 65536.0 : ldexp(1.0, 128);
}

/* The correctly rounded 16-bit pattern of v (finite double, exactly an
 * fp32), by binary search and an explicit midpoint comparison. */
static uint16_t refNarrow(const fmt_t* f, double v) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  int lo = 0, hi = f->nfinite; /* val[lo] <= a < val[hi] unless a >= top */
  if (a >= f->val[f->nfinite]) return sign | (uint16_t)f->nfinite;
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (f->val[mid] <= a)
      lo = mid;
    else
      hi = mid;
  }
  int k;
  if (f->val[lo] == a) {
    k = lo;
  } else {
    double m = (f->val[lo] + f->val[hi]) / 2; /* exact: both are short binary fractions */
    if (a < m)
      k = lo;
    else if (a > m)
      k = hi;
    else
      k = (lo & 1) ? hi : lo; /* tie: the even pattern */
  }
  return sign | (uint16_t)k; /* k == nfinite is Inf */
}

static int isNan16(zppDataType_t dtype, uint16_t h) {
  return dtype == zppFloat16 ? (h & 0x7fff) > 0x7c00 : (h & 0x7fff) > 0x7f80;
}

static uint16_t narrow(zppDataType_t dtype, float x) {
  return dtype == zppFloat16 ? zppFloatToHalf(x) : zppFloatToBf16(x);
}

static float widen(zppDataType_t dtype, uint16_t h) {
  return dtype == zppFloat16 ? zppHalfToFloat(h) : zppBf16ToFloat(h);
}

/* Every 16-bit pattern widened: scalar against the definition, then each
 * implementation's vector code against scalar. */
static void checkWiden(const fmt_t* f, const char** impls, int nimpl) {
  zppDataType_t dt = f->dtype;
  uint16_t* all = malloc(65536 * 2);
  float* out = malloc(65536 * 4);
  REQUIRE(all && out);
  for (int k = 0; k < 65536; k++) all[k] = (uint16_t)k;
  long bad = 0;
  for (int k = 0; k < 65536; k++) {
    double want = qtGet(all, dt, (size_t)k);
    float got = widen(dt, all[k]);
    uint32_t gb = zppF32Bits(got);
    if (isnan(want)) {
      /* NaN: stays NaN, quiet, same sign. */
      if (!(isnan(got) && (gb & 0x00400000u) && (gb >> 31) == (uint32_t)(k >> 15))) bad++;
    } else if ((double)got != want || !signbit(got) != !signbit(want)) {
      if (bad < 5) fprintf(stderr, "%s 0x%04x: widened to %a, want %a\n", qtTypeName(dt), k, got, want);
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "%s widening: %ld of 65536 wrong", qtTypeName(dt), bad);
  for (int i = 0; i < nimpl; i++) {
    const zppQuantImpl_t* impl = zppQuantImplGet(impls[i]);
    /* Odd offsets and lengths exercise the vector loop and its tail. */
    memset(out, 0, 65536 * 4);
    impl->toFloat(all + 3, dt, 65533, out + 3);
    impl->toFloat(all, dt, 3, out);
    long diff = 0;
    for (int k = 0; k < 65536; k++) {
      float want = widen(dt, all[k]);
      if (zppF32Bits(out[k]) != zppF32Bits(want)) diff++;
    }
    CHECK_MSG(diff == 0, "%s: %s widening differs from zpp_half.h on %ld patterns", impls[i],
              qtTypeName(dt), diff);
  }
  free(all);
  free(out);
}

/* fp32 inputs that matter for narrowing: every 16-bit value and its fp32
 * neighbours, every midpoint between neighbours and its neighbours, the
 * specials, and random patterns. */
static size_t narrowInputs(const fmt_t* f, float** out, zppTestRng_t* rng) {
  size_t cap = (size_t)f->nfinite * 14 + 2000000 + 64, n = 0;
  float* v = malloc(cap * sizeof(float));
  REQUIRE(v != NULL);
  for (int k = 0; k < f->nfinite; k++) {
    double pts[2] = {f->val[k], (f->val[k] + f->val[k + 1]) / 2};
    for (int p = 0; p < 2; p++) {
      float c = (float)pts[p]; /* exact for every format value and midpoint here */
      if (p == 1 && !isfinite(c)) continue;
      for (int d = -3; d <= 3; d++) {
        uint32_t b = zppF32Bits(c) + (uint32_t)d;
        if (d < 0 && zppF32Bits(c) < (uint32_t)-d) continue;
        v[n++] = zppF32FromBits(b);
      }
    }
  }
  const uint32_t specials[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x7f7fffff,
                               0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
                               0x7f800001, 0xff800001, 0x7fbfffff, 0x7fffffff, 0x477fefff,
                               0x477ff000, 0x33000000, 0x33000001, 0x7f7f8000, 0x7f7f7fff};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
    v[n++] = zppF32FromBits(specials[i]);
  for (int i = 0; i < 2000000; i++) v[n++] = zppF32FromBits((uint32_t)zppTestRngNext(rng));
  REQUIRE(n <= cap);
  *out = v;
  return n;
}

static void checkNarrow(const fmt_t* f, const char** impls, int nimpl, zppTestRng_t* rng) {
  zppDataType_t dt = f->dtype;
  float* in;
  size_t n = narrowInputs(f, &in, rng);
  uint16_t* ref = malloc(n * 2);
  uint16_t* got = malloc(n * 2);
  REQUIRE(ref && got);
  long bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint16_t h = narrow(dt, in[i]);
    ref[i] = h;
    if (isnan(in[i])) {
      /* Quiet NaN, same sign, top payload bits kept. */
      uint32_t b = zppF32Bits(in[i]);
      int shift = dt == zppFloat16 ? 13 : 16;
      uint16_t quiet = dt == zppFloat16 ? 0x0200 : 0x0040;
      uint16_t want = (uint16_t)((b >> 16 & 0x8000) | (dt == zppFloat16 ? 0x7c00 : 0x7f80) | quiet |
                                 ((b & 0x7fffff) >> shift));
      if (h != want || !isNan16(dt, h)) bad++;
      continue;
    }
    uint16_t want = refNarrow(f, (double)in[i]);
    if (h != want) {
      if (bad < 5)
        fprintf(stderr, "%s narrowing %a (0x%08x): got 0x%04x, want 0x%04x\n", qtTypeName(dt), in[i],
                zppF32Bits(in[i]), h, want);
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "%s narrowing: %ld of %zu inputs wrong", qtTypeName(dt), bad, n);
  for (int k = 0; k < nimpl; k++) {
    const zppQuantImpl_t* impl = zppQuantImplGet(impls[k]);
    memset(got, 0, n * 2);
    impl->fromFloat(in, 5, got, dt);
    impl->fromFloat(in + 5, n - 5, got + 5, dt);
    long diff = 0;
    for (size_t i = 0; i < n; i++)
      if (got[i] != ref[i]) {
        if (diff < 5)
          fprintf(stderr, "%s %s narrowing 0x%08x: 0x%04x, zpp_half.h 0x%04x\n", impls[k],
                  qtTypeName(dt), zppF32Bits(in[i]), got[i], ref[i]);
        diff++;
      }
    CHECK_MSG(diff == 0, "%s: %s narrowing differs from zpp_half.h on %ld of %zu", impls[k],
              qtTypeName(dt), diff, n);
  }
  free(in);
  free(ref);
  free(got);
}

/* Hand-picked values whose fp16 and bf16 readings differ, so that reading
 * one format as the other cannot pass. */
static void checkFormatsDistinct(void) {
  CHECK(zppBf16ToFloat(0x3f80) == 1.0f);
  CHECK(zppHalfToFloat(0x3c00) == 1.0f);
  CHECK(zppHalfToFloat(0x3f80) == 1.875f);
  CHECK(zppBf16ToFloat(0x4049) == 3.140625f);
  CHECK(zppBf16ToFloat(0x7f7f) == 0x1.fep127f);
  CHECK(zppHalfToFloat(0x7bff) == 65504.0f);
  CHECK(zppHalfToFloat(0x0001) == 0x1p-24f);
  CHECK(zppBf16ToFloat(0x0001) == 0x1p-133f);
  CHECK(zppFloatToBf16(1.0f) == 0x3f80);
  CHECK(zppFloatToHalf(1.0f) == 0x3c00);
  CHECK(zppFloatToHalf(65520.0f) == 0x7c00); /* halfway past 65504: even -> Inf */
  CHECK(zppFloatToHalf(65519.996f) == 0x7bff);
  CHECK(zppFloatToHalf(0x1p-25f) == 0x0000); /* tie between 0 and 2^-24: even */
  CHECK(zppFloatToHalf(0x1.000002p-25f) == 0x0001);
  CHECK(zppFloatToHalf(0x1.8p-24f) == 0x0002);  /* tie between 1 and 2 units: even */
  CHECK(zppFloatToBf16(0x1.fep127f) == 0x7f7f); /* the largest bf16 */
  CHECK(zppFloatToBf16(0x1.ffp127f) == 0x7f80); /* tie past it: even -> Inf */
  CHECK(zppFloatToBf16(0x1.fefffep127f) == 0x7f7f);
  CHECK(zppFloatToBf16(0x1.03p0f) == 0x3f82); /* tie between 1 and 2 steps: even */
  CHECK(zppFloatToBf16(0x1.01p0f) == 0x3f80); /* tie between 0 and 1 step: even */
  CHECK(zppFloatToBf16(0x1.010002p0f) == 0x3f81);
}

/* One residual block r[0..len) stored as the spec says (zpp_quant.h, "error
 * feedback's residuals": the int8 codec's arithmetic, written out here
 * again): a = max |r|, scale = a / 127, p = 2^64 for a < 2^-64,
 * q = clamp(rne((r p) (127 / (a p))), -127, 127); a == 0: all 0. */
static void expectResidBlock(const float* r, size_t len, int8_t* q, float* scale) {
  float a = 0.0f;
  for (size_t i = 0; i < len; i++) a = fabsf(r[i]) > a ? fabsf(r[i]) : a;
  *scale = a / 127.0f;
  float p = a < 0x1p-64f ? 0x1p64f : 1.0f, inv = a > 0.0f ? 127.0f / (a * p) : 0.0f;
  for (size_t i = 0; i < len; i++) {
    long v = a > 0.0f ? lrintf((r[i] * p) * inv) : 0;
    q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
  }
}

/* Error feedback's steps (zppQuantAddResidual, zppQuantNewResidual) in
 * every implementation against their definition, element by element, on
 * lengths that end in every vector tail and in short residual blocks, with
 * NaN, Inf, fp16/bf16 NaN patterns and signed zeros among the inputs, a
 * block of zero residuals and one of tiny ones (the p = 2^64 path); also in
 * place (in == x for fp32, out == e). The stored new residual is also held
 * to the bound it guarantees: within half a step (s / 2 + 2^-21 127 s, plus
 * 2^-149 127 for subnormal scales) of x - y. */
static void checkResidualSteps(const char** impls, int nimpl, zppTestRng_t* rng) {
  enum { N = 131, B = ZPP_QUANT_RESID_BLOCK, NB = (N + B - 1) / B };
  float g32[N], y[N], es[NB];
  int8_t eq[N];
  uint16_t g16[N];
  for (int i = 0; i < N; i++) {
    g32[i] = (float)zppTestRngNormal(rng) * 3.0f;
    y[i] = g32[i] + (float)zppTestRngNormal(rng) * 0.5f;
    g16[i] = (uint16_t)zppTestRngNext(rng);
    eq[i] = (int8_t)((int)(zppTestRngNext(rng) % 255) - 127);
  }
  for (int b = 0; b < NB; b++) es[b] = (float)(zppTestRngNext(rng) % 1000 + 1) * 1e-4f;
  g32[5] = NAN, g32[6] = INFINITY, g32[7] = -INFINITY, g32[8] = -0.0f, eq[8] = 0;
  g16[9] = 0x7f81, g16[10] = 0xffc1; /* bf16 signalling / negative NaNs; fp16: NaN, Inf-ish */
  /* fp32: a block of zero residuals, then one of tiny ones (max < 2^-64). */
  for (int i = 2 * B; i < 3 * B; i++) y[i] = g32[i], eq[i] = 0;
  for (int i = 3 * B; i < 4 * B; i++) g32[i] *= 0x1p-80f, y[i] = g32[i] * 0.5f, eq[i] = 0;
  zppQuantResid_t e = {eq, es};
  zppDataType_t types[3] = {zppFloat32, zppFloat16, zppBfloat16};
  for (int k = 0; k < nimpl; k++) {
    const zppQuantImpl_t* impl = zppQuantImplGet(impls[k]);
    for (int t = 0; t < 3; t++)
      for (size_t n = N - 40; n <= N; n++) {
        const void* in = types[t] == zppFloat32 ? (const void*)g32 : (const void*)g16;
        float x[N], r[N], outS[NB], wantS[NB];
        int8_t outQ[N], wantQ[N];
        impl->addResidual(in, types[t], e, n, x);
        long bad = 0, loose = 0;
        for (size_t i = 0; i < n; i++) {
          float w = (types[t] == zppFloat32   ? g32[i]
                     : types[t] == zppFloat16 ? zppHalfToFloat(g16[i])
                                              : zppBf16ToFloat(g16[i])) +
                    (float)eq[i] * es[i / B];
          bad += memcmp(&w, &x[i], 4) != 0;
          float d = x[i] - y[i];
          r[i] = isfinite(d) ? d : (float)eq[i] * es[i / B];
        }
        for (size_t lo = 0; lo < n; lo += B)
          expectResidBlock(r + lo, n - lo < B ? n - lo : B, wantQ + lo, &wantS[lo / B]);
        zppQuantResid_t out = {outQ, outS};
        impl->newResidual(x, y, e, n, out);
        bad += memcmp(outQ, wantQ, n) != 0 || memcmp(outS, wantS, (n + B - 1) / B * sizeof(float)) != 0;
        for (size_t i = 0; i < n; i++) {
          double s = outS[i / B], stored = (double)outQ[i] * s;
          loose += fabs(stored - r[i]) > s / 2 + 0x1p-21 * 127 * s + 0x1p-149 * 127;
        }
        memcpy(outQ, eq, sizeof outQ); /* out == e */
        memcpy(outS, es, sizeof outS);
        impl->newResidual(x, y, out, n, out);
        bad += memcmp(outQ, wantQ, n) != 0 || memcmp(outS, wantS, (n + B - 1) / B * sizeof(float)) != 0;
        if (types[t] == zppFloat32) { /* in == x */
          float xi[N];
          memcpy(xi, g32, sizeof xi);
          impl->addResidual(xi, zppFloat32, e, n, xi);
          bad += memcmp(xi, x, n * sizeof(float)) != 0;
        }
        CHECK_MSG(bad == 0, "%s: error feedback's steps, %s, n %zu: %ld differences", impls[k],
                  qtTypeName(types[t]), n, bad);
        CHECK_MSG(loose == 0, "%s: %s, n %zu: %ld stored residuals outside half a step", impls[k],
                  qtTypeName(types[t]), n, loose);
      }
  }
}

int main(void) {
  const char* impls[QT_MAX_IMPLS];
  int nimpl = qtImpls(impls);
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 0x5eed0001);
  checkFormatsDistinct();
  zppDataType_t types[2] = {zppFloat16, zppBfloat16};
  for (int t = 0; t < 2; t++) {
    fmt_t f;
    fmtInit(&f, types[t]);
    checkWiden(&f, impls, nimpl);
    checkNarrow(&f, impls, nimpl, &rng);
    free(f.val);
  }
  /* fp32 through the vector conversions is a copy. */
  for (int k = 0; k < nimpl; k++) {
    const zppQuantImpl_t* impl = zppQuantImplGet(impls[k]);
    float a[37], b[37], c[37];
    for (int i = 0; i < 37; i++) a[i] = (float)i * 0.37f - 5.0f;
    impl->toFloat(a, zppFloat32, 37, b);
    impl->fromFloat(b, 37, c, zppFloat32);
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(a, c, sizeof a) == 0);
  }
  checkResidualSteps(impls, nimpl, &rng);
  return zppTestExit("test_quant_convert");
}
