#include "quant_testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "quant_kernels/zpp_half.h"

int qtImpls(const char* names[QT_MAX_IMPLS]) {
  static const char* vector[] = {"avx2", "avx512"};
  static int noted = 0;
  int n = 0;
  names[n++] = "scalar";
  for (size_t k = 0; k < sizeof vector / sizeof vector[0]; k++) {
    if (zppQuantImplGet(vector[k]) != NULL)
      names[n++] = vector[k];
    else if (!noted)
      printf("note: no %s codecs on this CPU or build: not compared\n", vector[k]);
  }
  noted = 1;
  return n;
}

void qtUse(const char* name) { REQUIRE(zppQuantImplSelect(name) == zppSuccess); }

int qtRotImpls(const char* names[QT_MAX_IMPLS]) {
  static const char* all[] = {"scalar", "avx2", "avx512"};
  const char* was = zppQuantRotImplName();
  int n = 0;
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
    if (zppQuantRotImplSelect(all[k]) == zppSuccess)
      names[n++] = all[k];
    else
      printf("note: no rotated %s kernels on this CPU or build: not compared\n", all[k]);
  REQUIRE(zppQuantRotImplSelect(was) == zppSuccess);
  return n;
}

void qtUseRot(const char* name) {
  qtUse(zppQuantImplGet(name) ? name : zppQuantImplGet("avx2") ? "avx2" : "scalar");
  REQUIRE(zppQuantRotImplSelect(name) == zppSuccess);
}

size_t qtTypeSize(zppDataType_t dtype) { return dtype == zppFloat32 ? 4 : 2; }

const char* qtTypeName(zppDataType_t dtype) { return zppDtypeShortName(dtype); }

uint32_t qtBits(const void* buf, zppDataType_t dtype, size_t i) {
  if (dtype == zppFloat32) {
    uint32_t u;
    memcpy(&u, (const uint8_t*)buf + 4 * i, 4);
    return u;
  }
  uint16_t h;
  memcpy(&h, (const uint8_t*)buf + 2 * i, 2);
  return h;
}

double qtGet(const void* buf, zppDataType_t dtype, size_t i) {
  uint32_t u = qtBits(buf, dtype, i);
  if (dtype == zppFloat32) {
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
  }
  /* 16-bit formats from their definition: sign, biased exponent, fraction. */
  int ebits = dtype == zppFloat16 ? 5 : 8, mbits = dtype == zppFloat16 ? 10 : 7;
  int bias = (1 << (ebits - 1)) - 1;
  int sign = (u >> 15) & 1;
  int e = (int)(u >> mbits) & ((1 << ebits) - 1);
  int m = (int)u & ((1 << mbits) - 1);
  double v;
  if (e == (1 << ebits) - 1)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp((double)m, 1 - bias - mbits);
  else
    v = ldexp((double)((1 << mbits) + m), e - bias - mbits);
  return sign ? -v : v;
}

void qtSet(void* buf, zppDataType_t dtype, size_t i, float v) {
  if (dtype == zppFloat32) {
    memcpy((uint8_t*)buf + 4 * i, &v, 4);
    return;
  }
  uint16_t h = dtype == zppFloat16 ? zppFloatToHalf(v) : zppFloatToBf16(v);
  memcpy((uint8_t*)buf + 2 * i, &h, 2);
}

qtHeader_t qtReadHeader(const uint8_t* seg) {
  qtHeader_t h;
  h.magic = (uint32_t)seg[0] | (uint32_t)seg[1] << 8 | (uint32_t)seg[2] << 16 | (uint32_t)seg[3] << 24;
  h.bits = seg[4];
  h.blockLog2 = seg[5];
  h.reserved = seg[6] | seg[7] << 8;
  h.count = 0;
  for (int i = 7; i >= 0; i--) h.count = (h.count << 8) | seg[8 + i];
  return h;
}

float qtScale(const uint8_t* seg, size_t count, int block, size_t b) {
  (void)count;
  const uint8_t* p = seg + 16 + 4 * b;
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  float f;
  memcpy(&f, &u, 4);
  (void)block;
  return f;
}

int qtQmax(int bits) { return bits == 8 ? 127 : bits == 4 ? 7 : 1; }
int qtEscLog2(int bits) { return bits == 8 ? 8 : bits == 4 ? 5 : 3; }
size_t qtDataBytes(size_t count, int bits) {
  return bits == 8 ? count : bits == 4 ? (count + 1) / 2 : (count + 3) / 4;
}

int qtQ(const uint8_t* seg, size_t count, int bits, int block, size_t i) {
  size_t nblocks = (count + (size_t)block - 1) / (size_t)block;
  const uint8_t* data = seg + 16 + 4 * nblocks;
  if (bits == 8) return (int8_t)data[i];
  if (bits == 2) { /* element 4j + f at bits 2f, 2f + 1 of byte j */
    int v = (data[i / 4] >> (2 * (i % 4))) & 3;
    return v >= 2 ? v - 4 : v;
  }
  int nib = (i % 2 == 0) ? (data[i / 2] & 0x0f) : (data[i / 2] >> 4);
  return nib >= 8 ? nib - 16 : nib;
}

float qtDecoded(const uint8_t* seg, size_t count, int bits, int block, size_t i) {
  return (float)qtQ(seg, count, bits, block, i) * qtScale(seg, count, block, i / (size_t)block);
}

/* Where the escape tables start: the first multiple of 4 after the data. */
static size_t escOffset(size_t count, int bits, int block) {
  size_t nblocks = (count + (size_t)block - 1) / (size_t)block;
  size_t end = 16 + 4 * nblocks + qtDataBytes(count, bits);
  return (end + 3) / 4 * 4;
}

size_t qtUsedBytes(size_t count, int bits, int block) {
  return escOffset(count, bits, block) + 48 * ((count + 4095) / 4096);
}

uint32_t qtEscSlotBits(const uint8_t* seg, size_t count, int bits, int block, size_t g, int j) {
  const uint8_t* p = seg + escOffset(count, bits, block) + 48 * g + 4 * j;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

unsigned qtEscSlotIndex(const uint8_t* seg, size_t count, int bits, int block, size_t g, int j) {
  const uint8_t* p = seg + escOffset(count, bits, block) + 48 * g + 32 + 2 * j;
  return (unsigned)p[0] | (unsigned)p[1] << 8;
}

int qtEscaped(const uint8_t* seg, size_t count, int bits, int block, size_t i, float* v) {
  size_t g = i / 4096;
  for (int j = 0; j < 8; j++) {
    unsigned idx = qtEscSlotIndex(seg, count, bits, block, g, j);
    if (idx == 0xffff) return 0;
    if (g * 4096 + idx == i) {
      uint32_t u = qtEscSlotBits(seg, count, bits, block, g, j);
      memcpy(v, &u, 4);
      return 1;
    }
  }
  return 0;
}

float qtElement(const uint8_t* seg, size_t count, int bits, int block, size_t i) {
  float v;
  if (qtEscaped(seg, count, bits, block, i, &v)) return v;
  if (qtQ(seg, count, bits, block, i) == -qtQmax(bits) - 1) return NAN; /* a marker */
  return qtDecoded(seg, count, bits, block, i);
}

/* |x| as fp32 bits: the spec's order of magnitudes (NaN > Inf > finite). */
static uint32_t magBits(const void* in, zppDataType_t dtype, size_t i) {
  float x = (float)qtGet(in, dtype, i);
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) u = 0x7fc00000u; /* any NaN ranks above Inf; its payload does not matter here */
  return u & 0x7fffffffu;
}

long qtExpectEscapes(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                     char* marks) {
  enum { E = 4, SLOTS = 8, GROUP = 4096 };
  double twoK = exp2(qtEscLog2(bits));
  long overflows = 0;
  memset(marks, 0, count);
  int used = 0;
  for (size_t lo = 0; lo < count; lo += (size_t)block) {
    if (lo % GROUP == 0) used = 0;
    size_t len = count - lo < (size_t)block ? count - lo : (size_t)block;
    /* r: the (E+1)-th largest non-zero finite magnitude (or the smallest of
     * at most E + 1): top[] keeps the E + 1 largest so far, in descending
     * order, duplicates included. */
    uint32_t top[E + 1];
    int kept = 0;
    for (size_t i = 0; i < len; i++) {
      uint32_t b = magBits(in, dtype, lo + i);
      if (b == 0 || b >= 0x7f800000u) continue;
      if (kept == E + 1 && b <= top[E]) continue;
      int k = kept < E + 1 ? kept++ : E;
      for (; k > 0 && top[k - 1] < b; k--) top[k] = top[k - 1];
      top[k] = b;
    }
    uint32_t r = kept > 0 ? top[kept - 1] : 0;
    float rf;
    memcpy(&rf, &r, 4);
    int nc = 0;
    for (size_t i = 0; i < len; i++) {
      double x = fabs(qtGet(in, dtype, lo + i));
      if (!isfinite(x))
        marks[lo + i] = 3; /* a marker, always */
      else if (r > 0 && x > twoK * (double)rf)
        nc++;
    }
    if (nc == 0) continue;
    int fits = used + nc <= SLOTS;
    if (fits)
      used += nc;
    else
      overflows++;
    for (size_t i = 0; i < len; i++) {
      double x = fabs(qtGet(in, dtype, lo + i));
      if (isfinite(x) && r > 0 && x > twoK * (double)rf) marks[lo + i] = fits ? 1 : 2;
    }
  }
  return overflows;
}

double qtBound(double x, double s, int bits, zppDataType_t outType) {
  double Q = qtQmax(bits);
  double u = outType == zppFloat32 ? 0.0 : outType == zppFloat16 ? 0x1p-11 : 0x1p-8;
  double m = outType == zppFloat32 ? 0.0 : outType == zppFloat16 ? 0x1p-25 : 0x1p-134;
  return s / 2 + 0x1p-21 * Q * s + u * (fabs(x) + s) + m + (Q + 1) * 0x1p-150;
}

const char* qtDistName(qtDist_t d) {
  static const char* names[] = {"normal", "uniform", "wide", "tiny"};
  return d < QT_NDIST ? names[d] : "?";
}

/* log2 magnitude ranges of the wide and tiny distributions per type: wide
 * spans most of the type's normal range, tiny sits where scales become
 * subnormal (fp32, bf16) or inputs are subnormal (fp16). */
static void distRange(qtDist_t dist, zppDataType_t dtype, double* lo, double* hi) {
  if (dist == QT_WIDE) {
    *lo = dtype == zppFloat16 ? -22 : -100;
    *hi = dtype == zppFloat16 ? 15 : 100;
  } else {
    *lo = dtype == zppFloat16 ? -24 : -149;
    *hi = dtype == zppFloat16 ? -14 : -112;
  }
}

void qtFill(void* buf, zppDataType_t dtype, size_t count, qtDist_t dist, zppTestRng_t* rng) {
  double lo = 0, hi = 0;
  if (dist == QT_WIDE || dist == QT_TINY) distRange(dist, dtype, &lo, &hi);
  for (size_t i = 0; i < count; i++) {
    double v;
    switch (dist) {
      case QT_NORMAL: v = zppTestRngNormal(rng) * 0.02; break;
      case QT_UNIFORM: v = zppTestRngUniform(rng, -3.0, 3.0); break;
      default: {
        double sign = (zppTestRngNext(rng) & 1) ? -1.0 : 1.0;
        v = sign * exp2(zppTestRngUniform(rng, lo, hi));
        break;
      }
    }
    qtSet(buf, dtype, i, (float)v);
  }
}

void qtFillSparse(void* buf, zppDataType_t dtype, size_t count, int block, int bits, int nz,
                  int pattern, zppTestRng_t* rng) {
  const double step = exp2(qtEscLog2(bits) + 1); /* 2^(K+1): a candidate's gap and more */
  for (size_t i = 0; i < count; i++) qtSet(buf, dtype, i, 0.0f);
  for (size_t lo = 0; lo < count; lo += (size_t)block) {
    size_t len = count - lo < (size_t)block ? count - lo : (size_t)block;
    int n = nz < (int)len ? nz : (int)len;
    size_t at[8];
    for (int k = 0; k < n; k++) { /* distinct places */
      int again;
      do {
        at[k] = (size_t)(zppTestRngNext(rng) % len);
        again = 0;
        for (int j = 0; j < k; j++) again |= at[j] == at[k];
      } while (again);
    }
    /* fp16 holds 2^-14 .. 2^15 as normals: the scales below stay inside. */
    double base = exp2(zppTestRngUniform(rng, -4.0, 0.0)) * (dtype == zppFloat16 ? 0x1p-6 : 1.0);
    for (int k = 0; k < n; k++) {
      double m = base;
      if (pattern == 1 && k == 0) m = base * step;
      if (pattern == 2) m = base * pow(step, dtype == zppFloat16 ? (k > 2 ? 2 : k) : k);
      if (pattern == 3)
        m = exp2(zppTestRngUniform(rng, dtype == zppFloat16 ? -12.0 : -20.0,
                                   dtype == zppFloat16 ? 12.0 : 20.0));
      double sign = (zppTestRngNext(rng) & 1) ? -1.0 : 1.0;
      qtSet(buf, dtype, lo + at[k], (float)(sign * m * (1.0 + 0.5 * zppTestRngUniform(rng, 0, 1))));
    }
  }
}

void qtFillSpikes(void* buf, zppDataType_t dtype, size_t count, int block, int ratioLog2,
                  zppTestRng_t* rng) {
  const double base = dtype == zppFloat16 ? 0x1p-10 : 1.0;
  for (size_t i = 0; i < count; i++) qtSet(buf, dtype, i, (float)(zppTestRngNormal(rng) * base));
  for (size_t lo = 0; lo < count; lo += (size_t)block) {
    size_t len = count - lo < (size_t)block ? count - lo : (size_t)block;
    int n = 1 + (int)(zppTestRngNext(rng) % 4);
    for (int k = 0; k < n && (size_t)k < len; k++) {
      double sign = (zppTestRngNext(rng) & 1) ? -1.0 : 1.0;
      double v = sign * base * exp2(ratioLog2 + zppTestRngUniform(rng, 0.0, 0.9));
      qtSet(buf, dtype, lo + (size_t)(zppTestRngNext(rng) % len), (float)v);
    }
  }
}

void qtExactInverse(double* v, size_t len) {
  for (size_t h = 1; h < len; h *= 2)
    for (size_t i = 0; i < len; i += 2 * h)
      for (size_t j = i; j < i + h; j++) {
        double a = v[j], c = v[j + h];
        v[j] = a + c;
        v[j + h] = a - c;
      }
  for (size_t i = 0; i < len; i++) v[i] = (zppQuantRotSignMask(i) ? -v[i] : v[i]) / (double)len;
}

size_t qtFirstDiff(const void* a, const void* b, zppDataType_t dtype, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t x = qtBits(a, dtype, i), y = qtBits(b, dtype, i);
    if (x == y) continue;
    if (isnan(qtGet(a, dtype, i)) && isnan(qtGet(b, dtype, i))) continue;
    return i;
  }
  return (size_t)-1;
}
