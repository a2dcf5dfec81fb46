/*
 * zpp-perf's checking, without any communication: the collectives are
 * simulated here in the element type (one rounding per operation, integer
 * wrap-around), in more than one reduction order, and the checker must
 * accept every one of them with a bound of 0 (that is the point of its
 * inputs: exact whatever the order) while catching a single corrupted
 * element, an unwritten output, swapped blocks and a NaN.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf_check.h"
#include "testutil.h"

enum { ORDER_FORWARD, ORDER_REVERSE, ORDER_PAIRWISE };

/* a op b in the element type: exact in double, then one rounding. */
static double typeOp(zppDataType_t t, zppRedOp_t op, double a, double b) {
  double r;
  switch (op) {
    case zppProd: r = a * b; break;
    case zppMax: r = a > b ? a : b; break;
    case zppMin: r = a < b ? a : b; break;
    default: r = a + b; break;
  }
  uint64_t tmp = 0;
  zppPerfStore(t, &tmp, 0, r);
  return zppPerfLoad(t, &tmp, 0);
}

static double roundTo(zppDataType_t t, double v) {
  uint64_t tmp = 0;
  zppPerfStore(t, &tmp, 0, v);
  return zppPerfLoad(t, &tmp, 0);
}

/* The reduction of x[0..n) in one of three orders; avg either divides the
 * sum (premul = 0) or sums terms premultiplied by a rounded 1/n. */
static double reduce(zppDataType_t t, zppRedOp_t op, const double* x, int n, int order, int premul) {
  double v[64] = {0};
  zppRedOp_t base = op == zppAvg ? zppSum : op;
  for (int k = 0; k < n; k++) {
    v[k] = x[k];
    if (op == zppAvg && premul && zppPerfTypeIsFloat(t)) v[k] = roundTo(t, x[k] * roundTo(t, 1.0 / n));
  }
  double acc;
  if (order == ORDER_PAIRWISE) {
    int m = n;
    while (m > 1) {
      for (int k = 0; k < m / 2; k++) v[k] = typeOp(t, base, v[2 * k], v[2 * k + 1]);
      if (m % 2) v[m / 2] = v[m - 1];
      m = (m + 1) / 2;
    }
    acc = v[0];
  } else {
    acc = order == ORDER_FORWARD ? v[0] : v[n - 1];
    for (int k = 1; k < n; k++)
      acc = typeOp(t, base, acc, order == ORDER_FORWARD ? v[k] : v[n - 1 - k]);
  }
  if (op == zppAvg && !(premul && zppPerfTypeIsFloat(t))) {
    if (zppPerfTypeIsFloat(t))
      acc = roundTo(t, acc / n);
    else
      acc = roundTo(t, trunc(acc / n));
  }
  return acc;
}

/* Simulates the collective for rank `rank` into recv (dtype elements). */
static void simulate(const zppPerfCheckSpec_t* s, void* recv, int order, int premul) {
  size_t c = s->apiCount;
  int n = s->nranks;
  zppPerfCheckSpec_t src = *s;
  double x[64];
  switch (s->coll) {
    case ZPP_PERF_ALLGATHER:
    case ZPP_PERF_GATHER: /* the root's result; other ranks' is not read */
      for (int p = 0; p < n; p++)
        for (size_t j = 0; j < c; j++)
          zppPerfStore(s->dtype, recv, p * c + j, zppPerfInputValue(&src, p, j));
      break;
    case ZPP_PERF_ALLTOALL:
      for (int p = 0; p < n; p++)
        for (size_t j = 0; j < c; j++)
          zppPerfStore(s->dtype, recv, p * c + j, zppPerfInputValue(&src, p, (size_t)s->rank * c + j));
      break;
    case ZPP_PERF_BROADCAST:
      for (size_t j = 0; j < c; j++)
        zppPerfStore(s->dtype, recv, j, zppPerfInputValue(&src, s->root, j));
      break;
    case ZPP_PERF_SCATTER:
      for (size_t j = 0; j < c; j++)
        zppPerfStore(s->dtype, recv, j, zppPerfInputValue(&src, s->root, (size_t)s->rank * c + j));
      break;
    case ZPP_PERF_ALLTOALLV: {
      /* Written out from the rule (+c/2 to the next rank, -c/2 to the
       * previous), not from perf_check.h's helpers. */
      size_t at = 0;
      for (int p = 0; p < n; p++) {
        size_t part = c, from = 0;
        if (n >= 3 && s->rank == (p + 1) % n) part = c + c / 2;
        if (n >= 3 && s->rank == (p + n - 1) % n) part = c - c / 2;
        for (int q = 0; q < s->rank; q++)
          from += n < 3 ? c : q == (p + 1) % n ? c + c / 2 : q == (p + n - 1) % n ? c - c / 2 : c;
        for (size_t j = 0; j < part; j++)
          zppPerfStore(s->dtype, recv, at + j, zppPerfInputValue(&src, p, from + j));
        at += part;
      }
      break;
    }
    case ZPP_PERF_SENDRECV: {
      int partner = (s->rank ^ 1) < n ? s->rank ^ 1 : s->rank;
      for (size_t j = 0; j < c; j++)
        zppPerfStore(s->dtype, recv, j, zppPerfInputValue(&src, partner, j));
      break;
    }
    default: {
      size_t off = s->coll == ZPP_PERF_REDUCESCATTER ? (size_t)s->rank * c : 0;
      for (size_t j = 0; j < c; j++) {
        for (int p = 0; p < n; p++) x[p] = zppPerfInputValue(&src, p, off + j);
        zppPerfStore(s->dtype, recv, j, reduce(s->dtype, s->redop, x, n, order, premul));
      }
    }
  }
}

static size_t recvCount(const zppPerfCheckSpec_t* s) {
  int all = s->coll == ZPP_PERF_ALLGATHER || s->coll == ZPP_PERF_ALLTOALL ||
            s->coll == ZPP_PERF_GATHER || s->coll == ZPP_PERF_ALLTOALLV;
  return all ? s->apiCount * s->nranks : s->apiCount;
}

static void testEveryCase(void) {
  static const int ranks[] = {1, 2, 3, 4, 7, 16};
  const size_t count = 37; /* odd, not a multiple of anything */
  void* recv = malloc(count * 16 * 8);
  long cases = 0;
  for (int coll = 0; coll < ZPP_PERF_NUM_COLLS; coll++)
    for (int t = 0; t < zppNumTypes; t++)
      for (int op = 0; op < zppNumOps; op++) {
        int reduces =
            coll == ZPP_PERF_REDUCESCATTER || coll == ZPP_PERF_ALLREDUCE || coll == ZPP_PERF_REDUCE;
        if (!reduces && op > 0) continue;
        for (size_t ri = 0; ri < sizeof ranks / sizeof *ranks; ri++) {
          int n = ranks[ri];
          for (int order = ORDER_FORWARD; order <= ORDER_PAIRWISE; order++) {
            int rank = (n - 1) / 2 + order % 2; /* not always rank 0 */
            if (rank >= n) rank = n - 1;
            zppPerfCheckSpec_t s = {
                (zppPerfColl_t)coll, (zppDataType_t)t, (zppRedOp_t)op, n, rank, n - 1, count};
            simulate(&s, recv, order, 0);
            zppPerfCheckResult_t r;
            zppPerfCheckRecv(&s, recv, recvCount(&s), NULL, NULL, &r);
            CHECK_MSG(r.wrong == 0,
                      "coll %d type %d op %d n %d order %d: %llu wrong (first %ld), max error %g", coll,
                      t, op, n, order, (unsigned long long)r.wrong, r.firstWrong, r.maxError);
            /* Only avg is rounded by design. */
            if (!(op == zppAvg && reduces))
              CHECK_MSG(r.maxError == 0.0 && r.maxBound == 0.0,
                        "coll %d type %d op %d n %d: error %g bound %g", coll, t, op, n, r.maxError,
                        r.maxBound);
            cases++;
          }
        }
      }
  CHECK(cases > 1000);
  free(recv);
}

/* avg by premultiplying with a rounded 1/n (as NCCL does for floats) stays
 * within the documented bound; an error ten bounds wide does not. */
static void testAvgBound(void) {
  const size_t count = 101;
  float recv[101];
  for (int n = 2; n <= 16; n++) {
    zppPerfCheckSpec_t s = {ZPP_PERF_ALLREDUCE, zppFloat32, zppAvg, n, 0, 0, count};
    simulate(&s, recv, ORDER_FORWARD, 1);
    zppPerfCheckResult_t r;
    zppPerfCheckRecv(&s, recv, count, NULL, NULL, &r);
    CHECK_MSG(r.wrong == 0 && r.maxError <= r.maxBound, "n %d: %llu wrong, error %g bound %g", n,
              (unsigned long long)r.wrong, r.maxError, r.maxBound);
    double bound;
    double e = zppPerfExpected(&s, 5, &bound);
    CHECK(bound > 0);
    recv[5] = (float)(e + 10 * bound + 1e-3);
    zppPerfCheckRecv(&s, recv, count, NULL, NULL, &r);
    CHECK_EQ_INT(r.wrong, 1);
    CHECK_EQ_INT(r.firstWrong, 5);
  }
}

static void testCatchesFaults(void) {
  const size_t c = 64;
  float recv[64 * 4];
  zppPerfCheckSpec_t s = {ZPP_PERF_ALLGATHER, zppFloat32, zppSum, 4, 1, 0, c};
  zppPerfCheckResult_t r;

  simulate(&s, recv, ORDER_FORWARD, 0);
  zppPerfCorrupt(zppFloat32, recv, 77);
  zppPerfCheckRecv(&s, recv, 4 * c, NULL, NULL, &r);
  CHECK_EQ_INT(r.wrong, 1);
  CHECK_EQ_INT(r.firstWrong, 77);
  CHECK(r.maxError > 0);

  /* Corrupting twice in a row still changes the element (17 <-> 19). */
  zppPerfCorrupt(zppFloat32, recv, 77);
  zppPerfCheckRecv(&s, recv, 4 * c, NULL, NULL, &r);
  CHECK_EQ_INT(r.wrong, 1);

  /* Nothing written at all. */
  zppPerfFillSentinel(zppFloat32, recv, 4 * c);
  zppPerfCheckRecv(&s, recv, 4 * c, NULL, NULL, &r);
  CHECK_EQ_INT(r.wrong, 4 * c);

  /* Blocks of ranks 0 and 1 swapped. */
  simulate(&s, recv, ORDER_FORWARD, 0);
  float tmp[64];
  memcpy(tmp, recv, sizeof tmp);
  memcpy(recv, recv + c, sizeof tmp);
  memcpy(recv + c, tmp, sizeof tmp);
  zppPerfCheckRecv(&s, recv, 4 * c, NULL, NULL, &r);
  CHECK_MSG(r.wrong > c, "%llu wrong", (unsigned long long)r.wrong);

  /* A NaN is wrong whatever the bound. */
  simulate(&s, recv, ORDER_FORWARD, 0);
  recv[3] = NAN;
  zppPerfCheckRecv(&s, recv, 4 * c, NULL, NULL, &r);
  CHECK_EQ_INT(r.wrong, 1);
  CHECK(isinf(r.maxError));

  /* Reduce-scatter: the wrong rank's shard is wrong. */
  zppPerfCheckSpec_t rs = {ZPP_PERF_REDUCESCATTER, zppBfloat16, zppSum, 4, 2, 0, c};
  uint16_t shard[64];
  zppPerfCheckSpec_t other = rs;
  other.rank = 1;
  simulate(&other, shard, ORDER_FORWARD, 0);
  zppPerfCheckRecv(&rs, shard, c, NULL, NULL, &r);
  CHECK(r.wrong > 0);
}

/* A compressed mode's bound widens what is accepted, element by element. */
static double halfAllowance(const zppPerfCheckSpec_t* s, size_t i, double exact, void* arg) {
  return *(const double*)arg;
}

static void testExtraBound(void) {
  const size_t c = 16;
  float recv[16];
  zppPerfCheckSpec_t s = {ZPP_PERF_ALLREDUCE, zppFloat32, zppSum, 3, 0, 0, c};
  simulate(&s, recv, ORDER_FORWARD, 0);
  recv[4] += 0.25f;
  zppPerfCheckResult_t r;
  zppPerfCheckRecv(&s, recv, c, NULL, NULL, &r);
  CHECK_EQ_INT(r.wrong, 1);
  double allow = 0.5;
  zppPerfCheckRecv(&s, recv, c, halfAllowance, &allow, &r);
  CHECK_EQ_INT(r.wrong, 0);
  CHECK(r.maxError == 0.25 && r.maxBound == 0.5);
  allow = 0.125;
  zppPerfCheckRecv(&s, recv, c, halfAllowance, &allow, &r);
  CHECK_EQ_INT(r.wrong, 1);
}

static void testLoadStore(void) {
  uint64_t b = 0;
  zppPerfStore(zppInt8, &b, 0, 128);
  CHECK(zppPerfLoad(zppInt8, &b, 0) == -128); /* wraps like the collectives' int8 */
  zppPerfStore(zppUint8, &b, 0, -1);
  CHECK(zppPerfLoad(zppUint8, &b, 0) == 255);
  zppPerfStore(zppFloat16, &b, 0, 65536);
  CHECK(isinf(zppPerfLoad(zppFloat16, &b, 0)));
  zppPerfStore(zppBfloat16, &b, 0, 257); /* not representable: rounds to even */
  CHECK(zppPerfLoad(zppBfloat16, &b, 0) == 256);
  zppPerfStore(zppFloat16, &b, 0, -2048);
  CHECK(zppPerfLoad(zppFloat16, &b, 0) == -2048);
  /* Every generated input is exact in its type. */
  for (int t = 0; t < zppNumTypes; t++)
    for (int op = 0; op < zppNumOps; op++) {
      zppPerfCheckSpec_t s = {ZPP_PERF_ALLREDUCE, (zppDataType_t)t, (zppRedOp_t)op, 4, 0, 0, 1000};
      int exact = 1;
      for (int r = 0; r < 4; r++)
        for (size_t i = 0; i < 1000; i++) {
          double v = zppPerfInputValue(&s, r, i);
          if (roundTo((zppDataType_t)t, v) != v) exact = 0;
        }
      CHECK_MSG(exact, "type %d op %d", t, op);
    }
}

int main(void) {
  testLoadStore();
  testEveryCase();
  testAvgBound();
  testCatchesFaults();
  testExtraBound();
  return zppTestExit("test_perf_check");
}
