/* zpp-perf's verifiable inputs and exact results; see perf_check.h. */
#include "perf_check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"

int zppPerfTypeValid(zppDataType_t dtype) { return dtype >= 0 && dtype < zppNumTypes; }

int zppPerfTypeIsFloat(zppDataType_t dtype) {
  return dtype == zppFloat16 || dtype == zppFloat32 || dtype == zppFloat64 || dtype == zppBfloat16;
}

static int zppPerfTypeIsSigned(zppDataType_t dtype) {
  return dtype == zppInt8 || dtype == zppInt32 || dtype == zppInt64 || zppPerfTypeIsFloat(dtype);
}

double zppPerfTypeUnitRoundoff(zppDataType_t dtype) {
  switch (dtype) {
    case zppFloat16: return 0x1p-11;
    case zppBfloat16: return 0x1p-8;
    case zppFloat32: return 0x1p-24;
    case zppFloat64: return 0x1p-53;
    default: return 0.0;
  }
}

double zppPerfLoad(zppDataType_t dtype, const void* buf, size_t i) {
  switch (dtype) {
    case zppInt8: return ((const int8_t*)buf)[i];
    case zppUint8: return ((const uint8_t*)buf)[i];
    case zppInt32: return ((const int32_t*)buf)[i];
    case zppUint32: return ((const uint32_t*)buf)[i];
    case zppInt64: return (double)((const int64_t*)buf)[i];
    case zppUint64: return (double)((const uint64_t*)buf)[i];
    case zppFloat16: return zppHalfToFloat(((const uint16_t*)buf)[i]);
    case zppBfloat16: return zppBf16ToFloat(((const uint16_t*)buf)[i]);
    case zppFloat32: return ((const float*)buf)[i];
    case zppFloat64: return ((const double*)buf)[i];
    default: return NAN;
  }
}

void zppPerfStore(zppDataType_t dtype, void* buf, size_t i, double v) {
  /* Integers wrap through the unsigned type of their width, as the
   * collectives' own arithmetic does: (int64) first keeps negatives. */
  int64_t iv = isfinite(v) ? (int64_t)v : 0;
  switch (dtype) {
    case zppInt8: ((int8_t*)buf)[i] = (int8_t)(uint8_t)iv; break;
    case zppUint8: ((uint8_t*)buf)[i] = (uint8_t)iv; break;
    case zppInt32: ((int32_t*)buf)[i] = (int32_t)(uint32_t)iv; break;
    case zppUint32: ((uint32_t*)buf)[i] = (uint32_t)iv; break;
    case zppInt64: ((int64_t*)buf)[i] = iv; break;
    case zppUint64: ((uint64_t*)buf)[i] = (uint64_t)iv; break;
    /* Through fp32 first: exact for every value the tool stores (small
     * integers, powers of two), so no double rounding can occur. */
    case zppFloat16: ((uint16_t*)buf)[i] = zppFloatToHalf((float)v); break;
    case zppBfloat16: ((uint16_t*)buf)[i] = zppFloatToBf16((float)v); break;
    case zppFloat32: ((float*)buf)[i] = (float)v; break;
    case zppFloat64: ((double*)buf)[i] = v; break;
    default: break;
  }
}

/* The value the type makes of v (overflow to Inf, integer wrap-around). */
static double zppPerfRoundToType(zppDataType_t dtype, double v) {
  uint64_t tmp = 0;
  zppPerfStore(dtype, &tmp, 0, v);
  return zppPerfLoad(dtype, &tmp, 0);
}

/* Largest |partial sum| that stays exact: the integer range for 8-bit
 * types, the last exactly representable integer of the float formats. */
static double zppPerfSumLimit(zppDataType_t dtype) {
  switch (dtype) {
    case zppInt8: return 127;
    case zppUint8: return 255;
    case zppFloat16: return 2048;
    case zppBfloat16: return 256;
    default: return 1 << 20;
  }
}

/* A cheap avalanche of (rank, index) so that neighbouring elements and ranks
 * differ: a misplaced block or a shifted offset then shows up as wrong. */
static uint32_t zppPerfMix(int rank, size_t index) {
  uint64_t x = (uint64_t)index * 0x9e3779b97f4a7c15ull + (uint64_t)(rank + 1) * 0xc2b2ae3d27d4eb4full;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return (uint32_t)(x >> 16);
}

typedef enum { ZPP_PERF_GEN_WIDE, ZPP_PERF_GEN_SUM, ZPP_PERF_GEN_PROD } zppPerfGen_t;

static zppPerfGen_t zppPerfGenKind(const zppPerfCheckSpec_t* s) {
  if (s->coll != ZPP_PERF_REDUCESCATTER && s->coll != ZPP_PERF_ALLREDUCE && s->coll != ZPP_PERF_REDUCE)
    return ZPP_PERF_GEN_WIDE;
  switch (s->redop) {
    case zppSum:
    case zppAvg: return ZPP_PERF_GEN_SUM;
    case zppProd: return ZPP_PERF_GEN_PROD;
    default: return ZPP_PERF_GEN_WIDE;
  }
}

double zppPerfInputValue(const zppPerfCheckSpec_t* s, int rank, size_t index) {
  uint32_t h = zppPerfMix(rank, index);
  int sgn = zppPerfTypeIsSigned(s->dtype);
  switch (zppPerfGenKind(s)) {
    case ZPP_PERF_GEN_SUM: {
      /* n values of magnitude <= K sum to at most the exact limit. */
      long k = (long)(zppPerfSumLimit(s->dtype) / s->nranks);
      if (k < 1) k = 1;
      if (sgn) return (double)((long)(h % (uint32_t)(2 * k + 1)) - k);
      return (double)(h % (uint32_t)(k + 1));
    }
    case ZPP_PERF_GEN_PROD: {
      /* Powers of two: every partial product is exact until it overflows,
       * and an overflow is then an Inf (or a wrap) in any order. 2 only
       * while 2^n fits the 32-bit integer types. */
      double mag = (s->nranks <= 24 && h % 4 == 0) ? 2.0 : 1.0;
      if (sgn && (h >> 8) % 3 == 0) mag = -mag;
      return mag;
    }
    default:
      if (sgn) return (double)((long)(h % 201) - 100);
      return (double)(h % 201);
  }
}

void zppPerfFillSend(const zppPerfCheckSpec_t* s, void* send, size_t sendCount) {
  for (size_t i = 0; i < sendCount; i++)
    zppPerfStore(s->dtype, send, i, zppPerfInputValue(s, s->rank, i));
}

void zppPerfFillSentinel(zppDataType_t dtype, void* buf, size_t count) {
  /* 0xa5 bytes: a tiny non-integer in every float format and a huge value
   * in the wide integers, so never a generated value there; for the 8-bit
   * types one generated value in ~200 matches, still enough to catch a block
   * the collective left unwritten. */
  memset(buf, 0xa5, count * (zppTypeSize(dtype) ? zppTypeSize(dtype) : 1));
}

/* The reduction of element `index` of every rank's send buffer. */
static double zppPerfReduceAt(const zppPerfCheckSpec_t* s, size_t index, double* bound) {
  int n = s->nranks;
  double acc = zppPerfInputValue(s, 0, index);
  double absSum = fabs(acc);
  for (int k = 1; k < n; k++) {
    double x = zppPerfInputValue(s, k, index);
    absSum += fabs(x);
    switch (s->redop) {
      case zppProd: acc *= x; break;
      case zppMax: acc = x > acc ? x : acc; break;
      case zppMin: acc = x < acc ? x : acc; break;
      default: acc += x; break; /* sum, avg */
    }
  }
  *bound = 0.0;
  if (s->redop != zppAvg) return zppPerfRoundToType(s->dtype, acc);
  double e = acc / n;
  if (zppPerfTypeIsFloat(s->dtype)) {
    double u = zppPerfTypeUnitRoundoff(s->dtype);
    *bound = u * (fabs(e) + (double)(n + 2) * absSum / n);
  } else {
    /* The integers next to e are at most (n-1)/n away, every other one at
     * least 1: anything in between separates them without depending on how
     * e itself rounded. */
    *bound = (n - 0.5) / n;
  }
  return e;
}

double zppPerfExpected(const zppPerfCheckSpec_t* s, size_t i, double* bound) {
  size_t c = s->apiCount;
  *bound = 0.0;
  switch (s->coll) {
    case ZPP_PERF_ALLGATHER: /* block p came from rank p's send[0..c) */
      return zppPerfInputValue(s, (int)(i / c), i % c);
    case ZPP_PERF_ALLTOALL: /* block p is what rank p sent to us: its block `rank` */
      return zppPerfInputValue(s, (int)(i / c), (size_t)s->rank * c + i % c);
    case ZPP_PERF_REDUCESCATTER: return zppPerfReduceAt(s, (size_t)s->rank * c + i, bound);
    case ZPP_PERF_ALLREDUCE: return zppPerfReduceAt(s, i, bound);
    case ZPP_PERF_BROADCAST: return zppPerfInputValue(s, s->root, i);
    case ZPP_PERF_SENDRECV: return zppPerfInputValue(s, zppPerfPartner(s->rank, s->nranks), i);
    case ZPP_PERF_REDUCE: return zppPerfReduceAt(s, i, bound);
    case ZPP_PERF_GATHER: return zppPerfInputValue(s, (int)(i / c), i % c);
    case ZPP_PERF_SCATTER: return zppPerfInputValue(s, s->root, (size_t)s->rank * c + i);
    case ZPP_PERF_ALLTOALLV: {
      const int n = s->nranks;
      size_t at = 0;
      for (int p = 0; p < n; p++) {
        size_t part = zppPerfVCount(c, p, s->rank, n);
        if (i < at + part) return zppPerfInputValue(s, p, zppPerfVSendDispl(c, p, s->rank, n) + i - at);
        at += part;
      }
      return NAN;
    }
    default: return NAN;
  }
}

void zppPerfCheckRecv(const zppPerfCheckSpec_t* s, const void* recv, size_t recvCount,
                      zppPerfBoundFn extra, void* arg, zppPerfCheckResult_t* out) {
  memset(out, 0, sizeof *out);
  out->firstWrong = -1;
  /* Reduce and gather write nothing on the other ranks. */
  if ((s->coll == ZPP_PERF_REDUCE || s->coll == ZPP_PERF_GATHER) && s->rank != s->root) recvCount = 0;
  for (size_t i = 0; i < recvCount; i++) {
    double bound;
    double e = zppPerfExpected(s, i, &bound);
    if (extra != NULL) bound += extra(s, i, e, arg);
    double got = zppPerfLoad(s->dtype, recv, i);
    double err;
    if (got == e)
      err = 0.0; /* also equal infinities */
    else if (isnan(got))
      err = INFINITY;
    else
      err = fabs(got - e);
    if (err > out->maxError) out->maxError = err;
    if (bound > out->maxBound) out->maxBound = bound;
    if (err > bound) {
      if (out->wrong == 0) out->firstWrong = (long)i;
      out->wrong++;
    }
  }
}

void zppPerfCorrupt(zppDataType_t dtype, void* buf, size_t i) {
  /* 17 and 19 are exact in every type; whichever the element is not. */
  double v = zppPerfLoad(dtype, buf, i);
  zppPerfStore(dtype, buf, i, v == 17.0 ? 19.0 : 17.0);
}

/* ---------------------------------------------------------------------------
 * Codec bounds (see perf_check.h for the derivation).
 * ------------------------------------------------------------------------- */
static double zppPerfHalfSubnormal(zppDataType_t dtype) {
  switch (dtype) {
    case zppFloat16: return 0x1p-25;
    case zppBfloat16: return 0x1p-134;
    default: return 0.0;
  }
}

static int zppPerfLevels(int bits) { return bits == 4 ? 7 : bits == 8 ? 127 : bits == 2 ? 1 : 0; }

/* The codec's one-round-trip bound for scale s and input x, decoded to T. */
static double zppPerfRoundTrip(zppDataType_t dtype, int q, double s, double x) {
  double u = dtype == zppFloat32 ? 0.0 : zppPerfTypeUnitRoundoff(dtype);
  return s / 2 + 0x1p-21 * q * s + u * (fabs(x) + s) + zppPerfHalfSubnormal(dtype) + (q + 1) * 0x1p-150;
}

void zppPerfCodecBoundFree(zppPerfCodecBound_t* b) {
  free(b->amax);
  free(b->e1);
  b->amax = b->e1 = NULL;
}

/* The extra terms of the rotated bound for scale s and block max m. */
static double zppPerfRotExtra(int q, int block, double s, double m) {
  int L = 0;
  while ((1 << L) < block) L++;
  return 0x1p-22 * block * m + 0x1p-23 * L * q * s + 2 * 0x1p-150;
}

int zppPerfQwzBoundPrepare(const zppPerfCheckSpec_t* s, int bits, int block, zppPerfCodecBound_t* b) {
  return zppPerfQwzBoundPrepareRot(s, bits, block, 0, b);
}

int zppPerfQwzBoundPrepareRot(const zppPerfCheckSpec_t* s, int bits, int block, int rotated,
                              zppPerfCodecBound_t* b) {
  memset(b, 0, sizeof *b);
  if (zppPerfLevels(bits) == 0 || block < 1) return -1;
  size_t c = s->apiCount;
  b->bits = bits;
  b->block = block;
  b->rotated = rotated;
  b->nblocks = (c + (size_t)block - 1) / (size_t)block;
  b->amax = calloc((size_t)s->nranks * (b->nblocks ? b->nblocks : 1), sizeof *b->amax);
  if (b->amax == NULL) return -1;
  for (int p = 0; p < s->nranks; p++)
    for (size_t j = 0; j < c; j++) {
      double* a = &b->amax[(size_t)p * b->nblocks + j / (size_t)block];
      double v = fabs(zppPerfInputValue(s, p, j));
      if (v > *a) *a = v;
    }
  return 0;
}

double zppPerfQwzBound(const zppPerfCheckSpec_t* s, size_t i, double exact, void* arg) {
  const zppPerfCodecBound_t* b = arg;
  size_t c = s->apiCount;
  size_t p = i / c, j = i % c;
  int q = zppPerfLevels(b->bits);
  /* The scale exactly as the codec computes it: fp32 amax / Q. */
  double m = b->amax[p * b->nblocks + j / (size_t)b->block];
  float scale = (float)m / (float)q;
  if (!b->rotated) return zppPerfRoundTrip(s->dtype, q, scale, exact);
  double sr = (double)b->block * m / q * (1 + 0x1p-20);
  double e = zppPerfRoundTrip(zppFloat32, q, sr, 0.0) + zppPerfRotExtra(q, b->block, sr, m);
  double u = zppPerfTypeUnitRoundoff(s->dtype);
  return e + (s->dtype == zppFloat32 ? 0.0 : u * (fabs(exact) + e)) + zppPerfHalfSubnormal(s->dtype);
}

int zppPerfQgzBoundPrepare(const zppPerfCheckSpec_t* s, int bits, zppPerfCodecBound_t* b) {
  return zppPerfQgzBoundPrepareRot(s, bits, 0, 0, b);
}

int zppPerfQgzBoundPrepareRot(const zppPerfCheckSpec_t* s, int bits, int block, int rotated,
                              zppPerfCodecBound_t* b) {
  memset(b, 0, sizeof *b);
  int q = zppPerfLevels(bits);
  if (q == 0 || (rotated && block < 1)) return -1;
  b->bits = bits;
  b->block = block;
  b->rotated = rotated;
  /* Rotated: every scale grows by up to B (see perf_check.h). */
  const double grow = rotated ? (double)block * (1 + 0x1p-20) : 1.0;
  b->amax = calloc((size_t)s->nranks, sizeof *b->amax);
  b->e1 = calloc((size_t)s->nranks, sizeof *b->e1);
  if (b->amax == NULL || b->e1 == NULL) {
    zppPerfCodecBoundFree(b);
    return -1;
  }
  size_t c = s->apiCount, off = (size_t)s->rank * c;
  const double scaleRound = 1.0 + 0x1p-23;
  double s2 = 0.0;
  for (int k = 0; k < s->nranks; k++) {
    double a = 0.0;
    for (size_t j = 0; j < c; j++) {
      double v = fabs(zppPerfInputValue(s, k, off + j));
      if (v > a) a = v;
    }
    b->amax[k] = a;
    /* fp32 stages: the first round trip decodes into fp32 accumulators */
    double s1 = a / q * scaleRound * grow;
    b->e1[k] = zppPerfRoundTrip(zppFloat32, q, s1, 0.0);
    if (rotated) b->e1[k] += zppPerfRotExtra(q, block, s1, a);
    b->sumE1 += b->e1[k];
    s2 += (a + b->e1[k]) / q * scaleRound;
  }
  b->e2 = s2 * grow * (0.5 + 0x1p-21 * q) + s->nranks * (q + 1) * 0x1p-150;
  if (rotated) b->e2 += zppPerfRotExtra(q, block, s2 * grow, s2 * q) + s->nranks * 2 * 0x1p-150;
  return 0;
}

double zppPerfQgzBound(const zppPerfCheckSpec_t* s, size_t i, double exact, void* arg) {
  const zppPerfCodecBound_t* b = arg;
  size_t idx = (size_t)s->rank * s->apiCount + i;
  double y = 0.0, sum = 0.0;
  for (int k = 0; k < s->nranks; k++) {
    double x = zppPerfInputValue(s, k, idx);
    y += fabs(x) + b->e1[k];
    sum += x;
  }
  double bsum = b->sumE1 + b->e2 + 2.0 * (s->nranks - 1) * 0x1p-24 * (y + b->e2);
  double d = s->redop == zppAvg ? s->nranks : 1.0;
  double u = zppPerfTypeUnitRoundoff(s->dtype);
  (void)exact;
  return bsum / d + (0x1p-24 + u) * (fabs(sum) + bsum) / d + zppPerfHalfSubnormal(s->dtype);
}
