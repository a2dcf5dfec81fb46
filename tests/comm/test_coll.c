/*
 * Every plain collective x every data type x every reduction (and every
 * root of the rooted ones on small counts), on host
 * buffers, in place and out of place, small and large sizes, odd counts,
 * for the rank count and node layout given on the command line:
 *
 *   test_coll NRANKS [LAYOUT]     LAYOUT as zpp_launch's ("2x2", "2,1")
 *
 * Results are compared bit for bit with values computed here (see
 * coll_testlib.h). The algorithm thresholds and ZPP_ALGO_* come from the
 * environment (ctest runs variants that force each algorithm).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_testlib.h"
#include "testutil.h"
#include "perf/common/launch.h"

static const zppDataType_t allTypes[] = {zppInt8,   zppUint8,   zppInt32,   zppUint32,  zppInt64,
                                         zppUint64, zppFloat16, zppFloat32, zppFloat64, zppBfloat16};
#define NTYPES (sizeof(allTypes) / sizeof(allTypes[0]))

static int seedCounter = 1;

/* Compares count elements at got with the expectation for indices
 * first.. ; reports the first mismatch. */
static void expectRange(const char* what, zppDataType_t t, const void* got, size_t count,
                        const void* want) {
  size_t ts = zppTypeSize(t);
  for (size_t k = 0; k < count; k++) {
    if (memcmp((const char*)got + k * ts, (const char*)want + k * ts, ts) != 0) {
      CHECK_MSG(0, "%s %s: element %zu of %zu differs", what, collTestTypeName(t), k, count);
      return;
    }
  }
  CHECK(1);
}

static void testAllGather(zppComm_t comm, int rank, int n, zppDataType_t t, size_t count, int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* recv = malloc(bytes * (size_t)n + 1);
  char* send = inPlace ? recv + (size_t)rank * bytes : malloc(bytes + 1);
  char* want = malloc(bytes * (size_t)n + 1);
  REQUIRE(recv && send && want);
  memset(recv, 0x5a, bytes * (size_t)n);
  collTestFill(t, zppSum, rank, 0, count, seed, send);
  for (int r = 0; r < n; r++) collTestFill(t, zppSum, r, 0, count, seed, want + (size_t)r * bytes);
  zppResult_t res = zppAllGather(send, recv, count, t, comm, NULL);
  CHECK_MSG(res == zppSuccess, "allgather %s count %zu: %s", collTestTypeName(t), count,
            zppGetErrorString(res));
  expectRange(inPlace ? "allgather in place" : "allgather", t, recv, count * (size_t)n, want);
  if (!inPlace) free(send);
  free(recv);
  free(want);
}

static void testReduceScatter(zppComm_t comm, int rank, int n, zppDataType_t t, zppRedOp_t op,
                              size_t count, int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* send = malloc(bytes * (size_t)n + 1);
  char* recv = inPlace ? send + (size_t)rank * bytes : malloc(bytes + 1);
  char* want = malloc(bytes + 1);
  REQUIRE(send && recv && want);
  collTestFill(t, op, rank, 0, count * (size_t)n, seed, send);
  if (!inPlace) memset(recv, 0x5a, bytes);
  for (size_t i = 0; i < count; i++)
    collTestExpect(t, op, n, (size_t)rank * count + i, seed, want + i * ts);
  zppResult_t res = zppReduceScatter(send, recv, count, t, op, comm, NULL);
  CHECK_MSG(res == zppSuccess, "reducescatter %s %s count %zu: %s", collTestTypeName(t),
            collTestOpName(op), count, zppGetErrorString(res));
  char what[64];
  snprintf(what, sizeof(what), "reducescatter %s%s", collTestOpName(op), inPlace ? " in place" : "");
  expectRange(what, t, recv, count, want);
  if (!inPlace) free(recv);
  free(send);
  free(want);
}

static void testAllReduce(zppComm_t comm, int rank, int n, zppDataType_t t, zppRedOp_t op, size_t count,
                          int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* send = malloc(bytes + 1);
  char* recv = inPlace ? send : malloc(bytes + 1);
  char* want = malloc(bytes + 1);
  REQUIRE(send && recv && want);
  collTestFill(t, op, rank, 0, count, seed, send);
  if (!inPlace) memset(recv, 0x5a, bytes);
  for (size_t i = 0; i < count; i++) collTestExpect(t, op, n, i, seed, want + i * ts);
  zppResult_t res = zppAllReduce(send, recv, count, t, op, comm, NULL);
  CHECK_MSG(res == zppSuccess, "allreduce %s %s count %zu: %s", collTestTypeName(t), collTestOpName(op),
            count, zppGetErrorString(res));
  char what[64];
  snprintf(what, sizeof(what), "allreduce %s%s", collTestOpName(op), inPlace ? " in place" : "");
  expectRange(what, t, recv, count, want);
  if (!inPlace) free(recv);
  free(send);
  free(want);
}

static void testAllToAll(zppComm_t comm, int rank, int n, zppDataType_t t, size_t count, int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* send = malloc(bytes * (size_t)n + 1);
  char* recv = inPlace ? send : malloc(bytes * (size_t)n + 1);
  char* want = malloc(bytes * (size_t)n + 1);
  REQUIRE(send && recv && want);
  /* Rank r's block for p holds r's values at indices p*count.. */
  collTestFill(t, zppSum, rank, 0, count * (size_t)n, seed, send);
  if (!inPlace) memset(recv, 0x5a, bytes * (size_t)n);
  for (int p = 0; p < n; p++)
    collTestFill(t, zppSum, p, (size_t)rank * count, count, seed, want + (size_t)p * bytes);
  zppResult_t res = zppAllToAll(send, recv, count, t, comm, NULL);
  CHECK_MSG(res == zppSuccess, "alltoall %s count %zu: %s", collTestTypeName(t), count,
            zppGetErrorString(res));
  expectRange(inPlace ? "alltoall in place" : "alltoall", t, recv, count * (size_t)n, want);
  if (!inPlace) free(recv);
  free(send);
  free(want);
}

static void testBroadcast(zppComm_t comm, int rank, int n, zppDataType_t t, size_t count, int root,
                          int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* recv = malloc(bytes + 1);
  char* send = NULL;
  char* want = malloc(bytes + 1);
  REQUIRE(recv && want);
  memset(recv, 0x5a, bytes);
  if (rank == root) {
    send = inPlace ? recv : malloc(bytes + 1);
    REQUIRE(send);
    collTestFill(t, zppSum, root, 0, count, seed, send);
  }
  collTestFill(t, zppSum, root, 0, count, seed, want);
  /* Non-roots pass NULL or their recvbuff, as NCCL allows. */
  const void* sb = rank == root ? send : (inPlace ? recv : NULL);
  zppResult_t res = zppBroadcast(sb, recv, count, t, root, comm, NULL);
  CHECK_MSG(res == zppSuccess, "broadcast %s count %zu root %d: %s", collTestTypeName(t), count, root,
            zppGetErrorString(res));
  expectRange(inPlace ? "broadcast in place" : "broadcast", t, recv, count, want);
  if (rank == root && !inPlace) free(send);
  free(recv);
  free(want);
}

static void testReduce(zppComm_t comm, int rank, int n, zppDataType_t t, zppRedOp_t op, size_t count,
                       int root, int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* send = malloc(bytes + 1);
  char* recv = rank != root ? NULL : inPlace ? send : malloc(bytes + 1);
  char* want = malloc(bytes + 1);
  REQUIRE(send && want && (rank != root || recv));
  collTestFill(t, op, rank, 0, count, seed, send);
  if (rank == root && !inPlace) memset(recv, 0x5a, bytes);
  for (size_t i = 0; i < count; i++) collTestExpect(t, op, n, i, seed, want + i * ts);
  /* Non-roots pass recvbuff NULL, as NCCL allows. */
  zppResult_t res = zppReduce(send, recv, count, t, op, root, comm, NULL);
  CHECK_MSG(res == zppSuccess, "reduce %s %s count %zu root %d: %s", collTestTypeName(t),
            collTestOpName(op), count, root, zppGetErrorString(res));
  if (rank == root) {
    char what[64];
    snprintf(what, sizeof(what), "reduce %s root %d%s", collTestOpName(op), root,
             inPlace ? " in place" : "");
    expectRange(what, t, recv, count, want);
  }
  if (rank == root && !inPlace) free(recv);
  free(send);
  free(want);
}

static void testGather(zppComm_t comm, int rank, int n, zppDataType_t t, size_t count, int root,
                       int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* recv = rank == root ? malloc(bytes * (size_t)n + 1) : NULL;
  char* send = rank == root && inPlace ? recv + (size_t)root * bytes : malloc(bytes + 1);
  char* want = malloc(bytes * (size_t)n + 1);
  REQUIRE(send && want && (rank != root || recv));
  if (rank == root) memset(recv, 0x5a, bytes * (size_t)n);
  collTestFill(t, zppSum, rank, 0, count, seed, send);
  for (int r = 0; r < n; r++) collTestFill(t, zppSum, r, 0, count, seed, want + (size_t)r * bytes);
  zppResult_t res = zppGather(send, recv, count, t, root, comm, NULL);
  CHECK_MSG(res == zppSuccess, "gather %s count %zu root %d: %s", collTestTypeName(t), count, root,
            zppGetErrorString(res));
  if (rank == root)
    expectRange(inPlace ? "gather in place" : "gather", t, recv, count * (size_t)n, want);
  if (!(rank == root && inPlace)) free(send);
  free(recv);
  free(want);
}

static void testScatter(zppComm_t comm, int rank, int n, zppDataType_t t, size_t count, int root,
                        int inPlace) {
  size_t ts = zppTypeSize(t), bytes = count * ts;
  int seed = seedCounter++;
  char* send = rank == root ? malloc(bytes * (size_t)n + 1) : NULL;
  char* recv = rank == root && inPlace ? send + (size_t)root * bytes : malloc(bytes + 1);
  char* want = malloc(bytes + 1);
  REQUIRE(recv && want && (rank != root || send));
  /* The root's block for rank p holds the root's values at indices p*count.. */
  if (rank == root) collTestFill(t, zppSum, root, 0, count * (size_t)n, seed, send);
  if (!(rank == root && inPlace)) memset(recv, 0x5a, bytes);
  collTestFill(t, zppSum, root, (size_t)rank * count, count, seed, want);
  zppResult_t res = zppScatter(send, recv, count, t, root, comm, NULL);
  CHECK_MSG(res == zppSuccess, "scatter %s count %zu root %d: %s", collTestTypeName(t), count, root,
            zppGetErrorString(res));
  expectRange(inPlace ? "scatter in place" : "scatter", t, recv, count, want);
  if (!(rank == root && inPlace)) free(recv);
  free(send);
  free(want);
}

/* Uneven all-to-all: rank r sends rank p (r + 2p + scale) % 5 * scale
 * elements (zeros included), its parts in reverse peer order with a gap of
 * one element between them, so that displacements are not prefix sums. */
static size_t vCount(int from, int to, size_t scale) {
  return (size_t)((from + 2 * to + (int)scale) % 5) * scale;
}

static void testAllToAllv(zppComm_t comm, int rank, int n, zppDataType_t t, size_t scale) {
  size_t ts = zppTypeSize(t);
  int seed = seedCounter++;
  size_t *sc = calloc((size_t)n, sizeof(size_t)), *sd = calloc((size_t)n, sizeof(size_t));
  size_t *rc = calloc((size_t)n, sizeof(size_t)), *rd = calloc((size_t)n, sizeof(size_t));
  REQUIRE(sc && sd && rc && rd);
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = n - 1; p >= 0; p--) {
    sc[p] = vCount(rank, p, scale);
    sd[p] = sendTotal;
    sendTotal += sc[p] + 1;
  }
  for (int p = 0; p < n; p++) {
    rc[p] = vCount(p, rank, scale);
    rd[p] = recvTotal;
    recvTotal += rc[p] + 1;
  }
  char* send = malloc(sendTotal * ts + 1);
  char* recv = malloc(recvTotal * ts + 1);
  char* want = malloc(recvTotal * ts + 1);
  REQUIRE(send && recv && want);
  memset(recv, 0x5a, recvTotal * ts);
  memset(want, 0x5a, recvTotal * ts);
  /* The part for p holds rank's values at indices p * 1000.. */
  for (int p = 0; p < n; p++) {
    collTestFill(t, zppSum, rank, (size_t)p * 1000, sc[p], seed, send + sd[p] * ts);
    collTestFill(t, zppSum, p, (size_t)rank * 1000, rc[p], seed, want + rd[p] * ts);
  }
  zppResult_t res = zppAllToAllv(send, sc, sd, recv, rc, rd, t, comm, NULL);
  CHECK_MSG(res == zppSuccess, "alltoallv %s scale %zu: %s", collTestTypeName(t), scale,
            zppGetErrorString(res));
  /* The gaps stay untouched too. */
  expectRange("alltoallv", t, recv, recvTotal, want);
  free(send);
  free(recv);
  free(want);
  free(sc);
  free(sd);
  free(rc);
  free(rd);
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  /* Small (latency algorithms), odd, around the thresholds, and large. */
  const size_t counts[] = {1, 7, 1001, 40000};
  for (size_t ti = 0; ti < NTYPES; ti++) {
    zppDataType_t t = allTypes[ti];
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
      size_t count = counts[ci];
      for (int inPlace = 0; inPlace < 2; inPlace++) {
        testAllGather(comm, rank, nranks, t, count, inPlace);
        testAllToAll(comm, rank, nranks, t, count, inPlace);
        testBroadcast(comm, rank, nranks, t, count, (int)(ci + ti) % nranks, inPlace);
        /* Rooted calls: every root on small and odd counts, one on the large. */
        for (int root = 0; root < nranks; root++) {
          if (count > 1001 && root != (int)(ci + ti) % nranks) continue;
          testGather(comm, rank, nranks, t, count, root, inPlace);
          testScatter(comm, rank, nranks, t, count, root, inPlace);
        }
        for (int op = 0; op < zppNumOps; op++) {
          /* Every op on small and odd counts; the large ones with sum and avg. */
          if (count > 1001 && op != zppSum && op != zppAvg) continue;
          testReduceScatter(comm, rank, nranks, t, (zppRedOp_t)op, count, inPlace);
          testAllReduce(comm, rank, nranks, t, (zppRedOp_t)op, count, inPlace);
          testReduce(comm, rank, nranks, t, (zppRedOp_t)op, count, (op + (int)ci) % nranks, inPlace);
        }
      }
    }
    testAllToAllv(comm, rank, nranks, t, 1);
    testAllToAllv(comm, rank, nranks, t, 333);
  }
  /* Reduce from every root, every op, on an odd count. */
  for (int root = 0; root < nranks; root++)
    for (int op = 0; op < zppNumOps; op++)
      testReduce(comm, rank, nranks, zppInt32, (zppRedOp_t)op, 7, root, root % 2);
  /* A few MiB: the pipelined paths with many chunks. */
  size_t big = (size_t)3 << 18; /* 768 Ki elements: 3 MiB of float32 */
  testAllReduce(comm, rank, nranks, zppFloat32, zppSum, big, 0);
  testAllReduce(comm, rank, nranks, zppBfloat16, zppAvg, big + 3, 1);
  testReduceScatter(comm, rank, nranks, zppFloat32, zppSum, big / (size_t)nranks, 1);
  testAllGather(comm, rank, nranks, zppBfloat16, big / (size_t)nranks + 1, 0);
  testBroadcast(comm, rank, nranks, zppUint8, big * 4 + 5, nranks - 1, 0);
  testAllToAll(comm, rank, nranks, zppFloat32, big / (size_t)nranks / 2, 0);
  testReduce(comm, rank, nranks, zppFloat32, zppSum, big + 1, nranks - 1, 0);
  testReduce(comm, rank, nranks, zppBfloat16, zppAvg, big, 0, 1);
  testGather(comm, rank, nranks, zppFloat32, big / (size_t)nranks + 1, nranks / 2, 0);
  testScatter(comm, rank, nranks, zppFloat32, big / (size_t)nranks + 1, nranks / 2, 1);
  testAllToAllv(comm, rank, nranks, zppFloat32, 40001);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  if (rank == 0) printf("rank 0: %ld checks, %d failed\n", zppTestChecks, zppTestFailures);
  return zppTestFailures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s NRANKS [LAYOUT]\n", argv[0]);
    return 2;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = atoi(argv[1]);
  o.layout = argc > 2 ? argv[2] : NULL;
  o.timeoutSec = 240;
  double t0 = zppClockNow();
  int rc = zppLaunch(&o, body, NULL);
  printf("test_coll %d ranks%s%s: %s in %.1f s\n", o.nranks, o.layout ? " layout " : "",
         o.layout ? o.layout : "", rc == 0 ? "passed" : "FAILED", zppClockNow() - t0);
  return rc;
}
