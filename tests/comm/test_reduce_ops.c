/*
 * Reductions and 16-bit float conversions of collectives/reduce_ops.c:
 * fp16 against the CPU's F16C conversions (every half value, and many
 * floats), bf16 against a rounding done here another way, every type and op
 * against a scalar reference, NaN propagation, integer wrap-around.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "collectives/reduce_ops.h"
#include "quant_kernels/zpp_half.h"
#include "testutil.h"

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hwFloatToHalf(float f) {
  return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hwHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }
static int haveF16c(void) { return __builtin_cpu_supports("f16c"); }
#else
static uint16_t hwFloatToHalf(float f) {
  (void)f;
  return 0;
}
static float hwHalfToFloat(uint16_t h) {
  (void)h;
  return 0;
}
static int haveF16c(void) { return 0; }
#endif

static uint32_t bitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float floatOf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* bf16 by comparing distances in double: nearest, ties to the even one. */
static uint16_t refFloatToBf16(float f) {
  uint32_t u = bitsOf(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40u);
  uint16_t lo = (uint16_t)(u >> 16);
  uint16_t hi = (uint16_t)(lo + 1);
  double dlo = fabs((double)f - (double)floatOf((uint32_t)lo << 16));
  double dhi = isinf(floatOf((uint32_t)hi << 16)) && !isinf(f)
                   ? fabs((double)f - ldexp(copysign(1.0, f), 128)) /* the next step past max */
                   : fabs((double)f - (double)floatOf((uint32_t)hi << 16));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) ? hi : lo;
}

static void testHalf(void) {
  if (!haveF16c()) {
    printf("no F16C: fp16 conversions checked by round trip only\n");
  }
  long bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = zppHalfToFloat((uint16_t)h);
    if (haveF16c() && !(isnan(f) && isnan(hwHalfToFloat((uint16_t)h))) &&
        bitsOf(f) != bitsOf(hwHalfToFloat((uint16_t)h)))
      bad++;
    uint16_t back = zppFloatToHalf(f);
    if (isnan(f) ? !isnan(zppHalfToFloat(back)) : back != h) bad++;
  }
  CHECK_MSG(bad == 0, "%ld fp16 values convert wrongly", bad);
  if (!haveF16c()) return;
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 7);
  bad = 0;
  for (long i = 0; i < 2000000; i++) {
    /* All exponents, with many values near the half range and ties. */
    uint32_t u = (uint32_t)zppTestRngNext(&rng);
    if (i % 3 == 0) u = (u & 0x8001ffffu) | ((uint32_t)(100 + (i / 3) % 60) << 23);
    if (i % 5 == 0) u = (u & ~0x0fffu) | 0x1000u; /* exact ties */
    float f = floatOf(u);
    uint16_t a = zppFloatToHalf(f), b = hwFloatToHalf(f);
    if (isnan(f) ? !(isnan(zppHalfToFloat(a))) : a != b) {
      if (bad < 5) printf("fp16 of %a: 0x%04x, F16C 0x%04x\n", (double)f, a, b);
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "%ld floats round to fp16 unlike F16C", bad);
}

static void testBf16(void) {
  long bad = 0;
  for (uint32_t b = 0; b < 65536; b++) {
    float f = zppBf16ToFloat((uint16_t)b);
    /* Exact, except that a signalling NaN comes back quiet (zpp_half.h's
     * rule, the codecs' and F16C's): sign and payload kept, bit 22 set. */
    uint32_t want = b << 16;
    if ((want & 0x7fffffffu) > 0x7f800000u) want |= 0x00400000u;
    if (bitsOf(f) != want) bad++;
    uint16_t back = zppFloatToBf16(f);
    if (isnan(f) ? !isnan(zppBf16ToFloat(back)) : back != b) bad++;
  }
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 11);
  for (long i = 0; i < 2000000; i++) {
    uint32_t u = (uint32_t)zppTestRngNext(&rng);
    if (i % 4 == 0) u = (u & ~0xffffu) | 0x8000u; /* exact ties */
    float f = floatOf(u);
    uint16_t a = zppFloatToBf16(f), r = refFloatToBf16(f);
    if (isnan(f) ? !isnan(zppBf16ToFloat(a)) : a != r) {
      if (bad < 5) printf("bf16 of %a: 0x%04x, reference 0x%04x\n", (double)f, a, r);
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "%ld bf16 conversions wrong", bad);
}

/* Every type and op on values whose results are exact, against int64. */
static void testOps(void) {
  const zppDataType_t types[] = {zppInt8,   zppUint8,   zppInt32,   zppUint32,  zppInt64,
                                 zppUint64, zppFloat16, zppFloat32, zppFloat64, zppBfloat16};
  enum { N = 37 }; /* odd: vector loops with a tail */
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
    zppDataType_t t = types[ti];
    size_t ts = zppTypeSize(t);
    int isUnsigned = t == zppUint8 || t == zppUint32 || t == zppUint64;
    for (int op = 0; op < zppNumOps; op++) {
      unsigned char a[N * 8], b[N * 8], d[N * 8];
      int64_t va[N], vb[N];
      for (int i = 0; i < N; i++) {
        va[i] = (i * 7) % 11 - (isUnsigned ? 0 : 5);
        vb[i] = (i * 5 + 3) % 9 - (isUnsigned ? 0 : 4);
        int64_t x[2] = {va[i], vb[i]};
        for (int k = 0; k < 2; k++) {
          void* dst = (k ? b : a) + (size_t)i * ts;
          switch (t) {
            case zppInt8:
            case zppUint8: {
              int8_t v = (int8_t)x[k];
              memcpy(dst, &v, 1);
              break;
            }
            case zppInt32:
            case zppUint32: {
              int32_t v = (int32_t)x[k];
              memcpy(dst, &v, 4);
              break;
            }
            case zppInt64:
            case zppUint64: memcpy(dst, &x[k], 8); break;
            case zppFloat16: {
              uint16_t v = zppFloatToHalf((float)x[k]);
              memcpy(dst, &v, 2);
              break;
            }
            case zppBfloat16: {
              uint16_t v = zppFloatToBf16((float)x[k]);
              memcpy(dst, &v, 2);
              break;
            }
            case zppFloat32: {
              float v = (float)x[k];
              memcpy(dst, &v, 4);
              break;
            }
            default: {
              double v = (double)x[k];
              memcpy(dst, &v, 8);
              break;
            }
          }
        }
      }
      /* In place into a, as the collectives do. */
      memcpy(d, a, sizeof(d));
      zppRedApply(d, d, b, N, t, (zppRedOp_t)op);
      long bad = 0;
      for (int i = 0; i < N; i++) {
        int64_t e;
        switch (op) {
          case zppProd: e = va[i] * vb[i]; break;
          case zppMax: e = va[i] > vb[i] ? va[i] : vb[i]; break;
          case zppMin: e = va[i] < vb[i] ? va[i] : vb[i]; break;
          default: e = va[i] + vb[i]; break;
        }
        double got;
        const void* p = d + (size_t)i * ts;
        switch (t) {
          case zppInt8: {
            int8_t v;
            memcpy(&v, p, 1);
            got = v;
            break;
          }
          case zppUint8: {
            uint8_t v;
            memcpy(&v, p, 1);
            got = v;
            break;
          }
          case zppInt32: {
            int32_t v;
            memcpy(&v, p, 4);
            got = v;
            break;
          }
          case zppUint32: {
            uint32_t v;
            memcpy(&v, p, 4);
            got = v;
            break;
          }
          case zppInt64: {
            int64_t v;
            memcpy(&v, p, 8);
            got = (double)v;
            break;
          }
          case zppUint64: {
            uint64_t v;
            memcpy(&v, p, 8);
            got = (double)v;
            break;
          }
          case zppFloat16: {
            uint16_t v;
            memcpy(&v, p, 2);
            got = zppHalfToFloat(v);
            break;
          }
          case zppBfloat16: {
            uint16_t v;
            memcpy(&v, p, 2);
            got = zppBf16ToFloat(v);
            break;
          }
          case zppFloat32: {
            float v;
            memcpy(&v, p, 4);
            got = v;
            break;
          }
          default: {
            double v;
            memcpy(&v, p, 8);
            got = v;
            break;
          }
        }
        bad += got != (double)e;
      }
      CHECK_MSG(bad == 0, "type %d op %d: %ld wrong", (int)t, op, bad);
    }
  }
}

static void testSpecials(void) {
  /* Max and min keep a NaN from either side: an overflow stays visible. */
  float a[2] = {NAN, 1.0f}, b[2] = {2.0f, NAN}, d[2];
  zppRedApply(d, a, b, 2, zppFloat32, zppMax);
  CHECK(isnan(d[0]) && isnan(d[1]));
  zppRedApply(d, a, b, 2, zppFloat32, zppMin);
  CHECK(isnan(d[0]) && isnan(d[1]));
  uint16_t ha[1] = {0x7e00}, hb[1] = {0x3c00}, hd[1];
  zppRedApply(hd, hb, ha, 1, zppFloat16, zppMax);
  CHECK(isnan(zppHalfToFloat(hd[0])));
  /* fp16 sum overflows to Inf as fp16 arithmetic would. */
  ha[0] = 0x7bff; /* 65504 */
  zppRedApply(hd, ha, ha, 1, zppFloat16, zppSum);
  CHECK_EQ_INT(hd[0], 0x7c00);
  /* bf16 is not fp16: 0x3f80 is 1.0 in bf16. */
  uint16_t ba[1] = {0x3f80}, bd[1];
  zppRedApply(bd, ba, ba, 1, zppBfloat16, zppSum);
  CHECK_EQ_INT(bd[0], 0x4000);
  /* Integers wrap. */
  int8_t ia[1] = {120}, ib[1] = {10}, id[1];
  zppRedApply(id, ia, ib, 1, zppInt8, zppSum);
  CHECK_EQ_INT(id[0], -126);
  /* Averages divide once, in the type; more ranks than int8 can count. */
  int8_t s[2] = {-7, 100};
  zppRedFinishAvg(s, 2, zppInt8, 200);
  CHECK_EQ_INT(s[0], 0);
  CHECK_EQ_INT(s[1], 0);
  float f[1] = {7.0f};
  zppRedFinishAvg(f, 1, zppFloat32, 2);
  CHECK(f[0] == 3.5f);
}

int main(void) {
  testHalf();
  testBf16();
  testOps();
  testSpecials();
  return zppTestExit("test_reduce_ops");
}
