/*
 * The compressed modes' bounds in zpp-perf (perf_check.h) against the codec
 * itself: qwZ and qgZ are simulated here with the CPU codec's own building
 * blocks (quantize, decode, fused reduce-requantize, decode-sum), on several
 * layouts, types, bit widths and block sizes; every element must be within
 * its bound, the bound must not be so loose that the worst error is a tiny
 * part of it, and known mistakes (avg over the node count, a wrong
 * partition, a corrupted element) must show up as wrong.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf_check.h"
#include "quant_kernels/zpp_quant.h"
#include "testutil.h"

static const zppDataType_t kTypes[] = {zppFloat32, zppFloat16, zppBfloat16};

/* qwZ: each rank's shard makes one round trip; the gather puts shard p at p*c. */
static void simulateQwz(const zppPerfCheckSpec_t* s, int bits, int block, void* recv) {
  size_t c = s->apiCount, ts = zppTypeSize(s->dtype);
  void* shard = malloc(c * ts);
  void* packed = malloc(zppQuantPackedSize(c, bits, block));
  for (int p = 0; p < s->nranks; p++) {
    zppPerfCheckSpec_t src = *s;
    src.rank = p;
    zppPerfFillSend(&src, shard, c);
    REQUIRE(zppQuantize(shard, s->dtype, c, bits, block, packed) == zppSuccess);
    REQUIRE(zppDequantize(packed, c, bits, block, (char*)recv + (size_t)p * c * ts, s->dtype) ==
            zppSuccess);
  }
  free(shard);
  free(packed);
}

static void testQwz(void) {
  static const int blocks[] = {32, 64, 256};
  const int n = 4;
  const size_t c = 1000; /* not a multiple of any block */
  for (size_t t = 0; t < 3; t++)
    for (int bits = 4; bits <= 8; bits += 4)
      for (size_t bi = 0; bi < 3; bi++) {
        int block = blocks[bi];
        zppPerfCheckSpec_t s = {ZPP_PERF_ALLGATHER, kTypes[t], zppSum, n, 1, 0, c};
        void* recv = malloc(c * n * zppTypeSize(kTypes[t]));
        simulateQwz(&s, bits, block, recv);
        zppPerfCodecBound_t b;
        REQUIRE(zppPerfQwzBoundPrepare(&s, bits, block, &b) == 0);
        zppPerfCheckResult_t r;
        zppPerfCheckRecv(&s, recv, c * n, zppPerfQwzBound, &b, &r);
        CHECK_MSG(r.wrong == 0,
                  "qwz type %d bits %d block %d: %llu wrong (first %ld), error %g bound %g", kTypes[t],
                  bits, block, (unsigned long long)r.wrong, r.firstWrong, r.maxError, r.maxBound);
        /* The bound is the codec's, per block: the worst error comes close. */
        CHECK_MSG(r.maxError >= 0.3 * r.maxBound, "qwz type %d bits %d block %d: error %g, bound %g",
                  kTypes[t], bits, block, r.maxError, r.maxBound);
        /* An element twice its bound off is caught. */
        double eb;
        double e = zppPerfExpected(&s, 17, &eb);
        zppPerfStore(s.dtype, recv, 17, e + 2.0 * zppPerfQwzBound(&s, 17, e, &b) + 1.0);
        zppPerfCheckRecv(&s, recv, c * n, zppPerfQwzBound, &b, &r);
        CHECK_EQ_INT(r.wrong, 1);
        zppPerfCodecBoundFree(&b);
        free(recv);
      }
  zppPerfCodecBound_t b;
  zppPerfCheckSpec_t s = {ZPP_PERF_ALLGATHER, zppFloat32, zppSum, 2, 0, 0, 10};
  CHECK(zppPerfQwzBoundPrepare(&s, 5, 64, &b) == -1);
  CHECK(zppPerfQwzBoundPrepare(&s, 8, 0, &b) == -1);
}

typedef enum { QGZ_RIGHT, QGZ_AVG_BY_NODES, QGZ_WRONG_PARTITION } qgzFault_t;

/* qgZ for rank s->rank on nodes of L ranks: round trip of every rank's slice
 * of the partition, fused sum-requantize per node, decode-sum over nodes. */
static void simulateQgz(const zppPerfCheckSpec_t* s, int L, int bits, int block, qgzFault_t fault,
                        void* recv) {
  int n = s->nranks, N = n / L;
  size_t c = s->apiCount, ts = zppTypeSize(s->dtype);
  size_t seg = zppQuantPackedSize(c, bits, block);
  int part = fault == QGZ_WRONG_PARTITION ? (s->rank + 1) % n : s->rank;
  void* in = malloc(c * n * ts);
  char* stage1 = malloc(seg * (size_t)n);
  char* stage2 = malloc(seg * (size_t)N);
  for (int k = 0; k < n; k++) {
    zppPerfCheckSpec_t src = *s;
    src.rank = k;
    zppPerfFillSend(&src, in, c * n);
    REQUIRE(zppQuantize((char*)in + (size_t)part * c * ts, s->dtype, c, bits, block,
                        stage1 + (size_t)k * seg) == zppSuccess);
  }
  for (int node = 0; node < N; node++)
    REQUIRE(zppQuantReduceRequant(stage1 + (size_t)node * L * seg, seg, L, c, bits, block, bits, block,
                                  stage2 + (size_t)node * seg) == zppSuccess);
  float divisor = s->redop != zppAvg ? 1.0f : fault == QGZ_AVG_BY_NODES ? (float)N : (float)n;
  REQUIRE(zppDequantizeSum(stage2, seg, N, c, bits, block, divisor, recv, s->dtype) == zppSuccess);
  free(in);
  free(stage1);
  free(stage2);
}

static void testQgz(void) {
  static const int layouts[][2] = {{1, 4}, {2, 2}, {4, 1}, {3, 2}, {2, 3}};
  const size_t c = 700;
  double worstRatio = 1.0;
  for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
    for (size_t t = 0; t < 3; t++)
      for (int bits = 4; bits <= 8; bits += 4)
        for (int op = 0; op < 2; op++) {
          int N = layouts[li][0], L = layouts[li][1], n = N * L;
          int block = bits == 4 ? 64 : 256;
          zppPerfCheckSpec_t s = {
              ZPP_PERF_REDUCESCATTER, kTypes[t], op ? zppAvg : zppSum, n, n - 1, 0, c};
          void* recv = malloc(c * zppTypeSize(kTypes[t]));
          zppPerfCodecBound_t b;
          REQUIRE(zppPerfQgzBoundPrepare(&s, bits, &b) == 0);
          zppPerfCheckResult_t r;
          simulateQgz(&s, L, bits, block, QGZ_RIGHT, recv);
          zppPerfCheckRecv(&s, recv, c, zppPerfQgzBound, &b, &r);
          CHECK_MSG(r.wrong == 0,
                    "qgz %dx%d type %d bits %d op %d: %llu wrong (first %ld), error %g bound %g", N, L,
                    kTypes[t], bits, op, (unsigned long long)r.wrong, r.firstWrong, r.maxError,
                    r.maxBound);
          double ratio = r.maxError / r.maxBound;
          if (ratio < worstRatio) worstRatio = ratio;

          simulateQgz(&s, L, bits, block, QGZ_WRONG_PARTITION, recv);
          zppPerfCheckRecv(&s, recv, c, zppPerfQgzBound, &b, &r);
          if (n > 1)
            CHECK_MSG(r.wrong > c / 4, "qgz %dx%d: a wrong partition gives only %llu wrong", N, L,
                      (unsigned long long)r.wrong);
          if (op == 1 && N > 1) {
            simulateQgz(&s, L, bits, block, QGZ_AVG_BY_NODES, recv);
            zppPerfCheckRecv(&s, recv, c, zppPerfQgzBound, &b, &r);
            if (L > 1)
              CHECK_MSG(r.wrong > c / 4,
                        "qgz %dx%d bits %d: avg over the node count gives only %llu wrong", N, L, bits,
                        (unsigned long long)r.wrong);
          }
          zppPerfCodecBoundFree(&b);
          free(recv);
        }
  /* Partition-wide amax makes the bound conservative, not meaningless. */
  printf("qgz: smallest worst-error / bound ratio %.3f\n", worstRatio);
  CHECK_MSG(worstRatio > 0.05, "qgz bound too loose: worst error only %.3f of it", worstRatio);
}

int main(void) {
  testQwz();
  testQgz();
  return zppTestExit("test_perf_bound");
}
