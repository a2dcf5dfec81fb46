/*
 * Collectives on device buffers through NCCL (label gpu; exit 77 without a
 * CUDA device). Every rank checks for a device itself: the parent never
 * touches CUDA, which must not be initialised before fork.
 *
 *   1 rank on device 0, then one rank per device when there are several:
 *   every collective checked exactly, on the caller's cudaStream_t (reduce,
 *   gather, scatter and the uneven all-to-all too).
 *   With one device, two ranks on it: NCCL before 2.30 refuses that, and
 *   zpp says so (zppInvalidUsage) instead of hanging.
 *   zppSend/zppRecv: a ring shift in a group, checked exactly.
 *   Byte counters (zppCommGetStats) after each kind of call, by the device
 *   path's rules (lib/stats.h): exact for the grouped sends, logical for
 *   NCCL's collectives.
 *   Stream arguments: host buffers with a cudaStream_t, device buffers with a
 *   host stream, and mixed host/device buffers are refused.
 *   The device path after zppCommShrink: 4 ranks, the last one killed; the
 *   survivors shrink (ZPP_SHRINK_ABORT), all-reduce and all-gather device
 *   buffers on the new communicator (its NCCL communicator made anew),
 *   checked exactly; one more rank aborts, and the last two shrink again.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "coll_testlib.h"
#include "testutil.h"
#include "perf/common/launch.h"

static int* sharedDevices; /* device count seen by rank 0 of the first run */

#define CU(call) REQUIRE((call) == cudaSuccess)

static int checkDevice(const void* dev, zppDataType_t t, size_t count, const void* want,
                       const char* what) {
  size_t bytes = count * zppTypeSize(t);
  char* host = malloc(bytes + 1);
  REQUIRE(host);
  CU(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
  int ok = memcmp(host, want, bytes) == 0;
  size_t ts = zppTypeSize(t), bad = 0, first = (size_t)-1;
  for (size_t i = 0; !ok && i < count; i++)
    if (memcmp(host + i * ts, (const char*)want + i * ts, ts) != 0) {
      if (first == (size_t)-1) first = i;
      bad++;
    }
  uint64_t got = 0, exp = 0;
  if (!ok) {
    memcpy(&got, host + first * ts, ts);
    memcpy(&exp, (const char*)want + first * ts, ts);
  }
  CHECK_MSG(
      ok, "%s %s: wrong result in %zu of %zu elements, first at %zu: bits 0x%llx, expected 0x%llx",
      what, collTestTypeName(t), bad, count, first, (unsigned long long)got, (unsigned long long)exp);
  free(host);
  return ok;
}

/* After the calls since the last reset: kind's bytes to all peers total
 * `total` (up to `slack` more), of them inter-node `inter` (UINT64_MAX: not
 * checked), every other kind none; then a reset. */
static void checkBytesIn(zppComm_t comm, cudaStream_t stream, zppOpKind_t kind, uint64_t total,
                         uint64_t slack, uint64_t inter) {
  CU(cudaStreamSynchronize(stream));
  zppCommStats_t st;
  REQUIRE(zppCommGetStats(comm, &st) == zppSuccess);
  uint64_t in = st.interNodeBytes[kind], all = st.intraNodeBytes[kind] + in;
  CHECK_MSG(all >= total && all - total <= slack && (inter == UINT64_MAX || in == inter),
            "%s on device buffers: %llu bytes (%llu inter-node), want %llu (+%llu) (%llu)",
            zppOpKindName(kind), (unsigned long long)all, (unsigned long long)in,
            (unsigned long long)total, (unsigned long long)slack, (unsigned long long)inter);
  for (int k = 0; k < zppNumOpKinds; k++)
    CHECK_MSG(k == (int)kind || (st.intraNodeBytes[k] == 0 && st.interNodeBytes[k] == 0),
              "%s on device buffers: %s has bytes too", zppOpKindName(kind),
              zppOpKindName((zppOpKind_t)k));
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
}

static void checkBytes(zppComm_t comm, cudaStream_t stream, zppOpKind_t kind, uint64_t total,
                       uint64_t inter) {
  checkBytesIn(comm, stream, kind, total, 0, inter);
}

/* Every kind once (fp32, count elements), its bytes by lib/stats.h's rules:
 * b = count * 4 to each other rank for all-gather, reduce-scatter,
 * all-to-all and the roots of broadcast and scatter (inter-node: the ranks
 * off this node); b to the root for reduce and gather; all-reduce: a
 * reduce-scatter and an all-gather of W blocks, (count - mine) elements out
 * and mine to each of W - 1 peers; the uneven all-to-all and zppSend what
 * they send to others. */
static void deviceBytes(zppComm_t comm, int rank, int nranks, cudaStream_t stream, void* dsend,
                        void* drecv, size_t count) {
  zppTopology_t topo;
  REQUIRE(zppCommTopology(comm, &topo) == zppSuccess);
  const uint64_t W = (uint64_t)nranks, L = (uint64_t)topo.localSize, b = count * 4;
  const zppDataType_t t = zppFloat32;
  const int last = nranks - 1;
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  CHECK(zppAllGather(dsend, drecv, count, t, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpAllGather, (W - 1) * b, (W - L) * b);
  CHECK(zppReduceScatter(dsend, drecv, count, t, zppSum, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpReduceScatter, (W - 1) * b, (W - L) * b);
  CHECK(zppAllToAll(dsend, drecv, count, t, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpAllToAll, (W - 1) * b, (W - L) * b);
  CHECK(zppAllReduce(dsend, drecv, count, t, zppSum, comm, stream) == zppSuccess);
  uint64_t mine = count / W + ((uint64_t)rank < count % W);
  checkBytes(comm, stream, zppOpAllReduce, (count - mine + (W - 1) * mine) * 4,
             L == W ? 0 : UINT64_MAX);
  CHECK(zppBroadcast(dsend, drecv, count, t, last, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpBroadcast, rank == last ? (W - 1) * b : 0,
             rank == last ? (W - L) * b : 0);
  CHECK(zppReduce(dsend, rank == last ? drecv : NULL, count, t, zppSum, last, comm, stream) ==
        zppSuccess);
  checkBytes(comm, stream, zppOpReduce, rank == last ? 0 : b, L == W ? 0 : UINT64_MAX);
  CHECK(zppGather(dsend, rank == 0 ? drecv : NULL, count, t, 0, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpGather, rank == 0 ? 0 : b, L == W ? 0 : UINT64_MAX);
  CHECK(zppScatter(rank == 0 ? dsend : NULL, drecv, count, t, 0, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpScatter, rank == 0 ? (W - 1) * b : 0, rank == 0 ? (W - L) * b : 0);
  size_t sc[64], sd[64], rcv[64], rd[64], so = 0, ro = 0, unit = count / 4;
  uint64_t toOthers = 0;
  for (int p = 0; p < nranks; p++) {
    sc[p] = unit * (size_t)((rank + p) % 3 + 1);
    rcv[p] = unit * (size_t)((p + rank) % 3 + 1);
    sd[p] = so;
    rd[p] = ro;
    so += sc[p];
    ro += rcv[p];
    if (p != rank) toOthers += sc[p] * 4;
  }
  CHECK(zppAllToAllv(dsend, sc, sd, drecv, rcv, rd, t, comm, stream) == zppSuccess);
  /* Before it is queued, the counts are compared over the host transport,
   * whose few bytes per peer count under the same kind: at most 1 KiB per
   * peer on top of the payload (>= 100 KB to each). */
  checkBytesIn(comm, stream, zppOpAllToAllv, toOthers, 1024 * (W - 1), UINT64_MAX);
  if (nranks > 1) {
    CHECK_EQ_INT(zppGroupStart(), zppSuccess);
    CHECK_EQ_INT(zppSend(dsend, count, t, (rank + 1) % nranks, comm, stream), zppSuccess);
    CHECK_EQ_INT(zppRecv(drecv, count, t, (rank - 1 + nranks) % nranks, comm, stream), zppSuccess);
    CHECK_EQ_INT(zppGroupEnd(), zppSuccess);
    checkBytes(comm, stream, zppOpSendRecv, b, L == W ? 0 : UINT64_MAX);
  }
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) return ZPP_TEST_SKIP;
  if (rank == 0 && sharedDevices) *sharedDevices = ndev;
  /* 0: a GPU per rank; 1: two ranks on one GPU, refused by NCCL < 2.30;
   * 2: ranks on one GPU as hosts of their own to NCCL (NCCL_HOSTID per rank) */
  int shareGpu = *(const int*)arg;
  CU(cudaSetDevice(shareGpu ? 0 : rank % ndev));
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  cudaStream_t stream;
  CU(cudaStreamCreate(&stream));
  const size_t count = 100003;
  size_t maxBytes = count * 8 * (size_t)nranks;
  void *dsend, *drecv;
  CU(cudaMalloc(&dsend, maxBytes));
  CU(cudaMalloc(&drecv, maxBytes));
  char* hsend = malloc(maxBytes);
  char* want = malloc(maxBytes);
  REQUIRE(hsend && want);

  if (shareGpu == 1) {
    /* Two ranks, one GPU: refused with a reason before NCCL (< 2.30) could hang. */
    int v = 0;
    ncclGetVersion(&v);
    zppResult_t res = zppAllReduce(dsend, drecv, 16, zppFloat32, zppSum, comm, stream);
    if (v < 23000) CHECK_EQ_INT(res, zppInvalidUsage);
    printf("rank %d: two ranks on one GPU with NCCL %d: %s\n", rank, v, zppGetErrorString(res));
    zppCommAbort(comm);
    return zppTestFailures ? 1 : 0;
  }

  const zppDataType_t types[] = {zppInt8, zppInt32, zppFloat16, zppFloat32, zppFloat64, zppBfloat16};
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
    zppDataType_t t = types[ti];
    size_t ts = zppTypeSize(t), bytes = count * ts;
    for (int op = 0; op < zppNumOps; op++) {
      collTestFill(t, (zppRedOp_t)op, rank, 0, count * (size_t)nranks, op + 1, hsend);
      CU(cudaMemcpy(dsend, hsend, bytes * (size_t)nranks, cudaMemcpyHostToDevice));
      for (size_t i = 0; i < count; i++)
        collTestExpect(t, (zppRedOp_t)op, nranks, i, op + 1, want + i * ts);
      CHECK(zppAllReduce(dsend, drecv, count, t, (zppRedOp_t)op, comm, stream) == zppSuccess);
      CU(cudaStreamSynchronize(stream));
      char what[64];
      snprintf(what, sizeof what, "allreduce %s", collTestOpName((zppRedOp_t)op));
      checkDevice(drecv, t, count, want, what);
      for (size_t i = 0; i < count; i++)
        collTestExpect(t, (zppRedOp_t)op, nranks, (size_t)rank * count + i, op + 1, want + i * ts);
      CHECK(zppReduceScatter(dsend, drecv, count, t, (zppRedOp_t)op, comm, stream) == zppSuccess);
      CU(cudaStreamSynchronize(stream));
      snprintf(what, sizeof what, "reducescatter %s", collTestOpName((zppRedOp_t)op));
      checkDevice(drecv, t, count, want, what);
      /* Reduce to the last rank; the others pass recvbuff NULL. */
      for (size_t i = 0; i < count; i++)
        collTestExpect(t, (zppRedOp_t)op, nranks, i, op + 1, want + i * ts);
      int root = nranks - 1;
      CHECK(zppReduce(dsend, rank == root ? drecv : NULL, count, t, (zppRedOp_t)op, root, comm,
                      stream) == zppSuccess);
      CU(cudaStreamSynchronize(stream));
      snprintf(what, sizeof what, "reduce %s", collTestOpName((zppRedOp_t)op));
      if (rank == root) checkDevice(drecv, t, count, want, what);
    }
    collTestFill(t, zppSum, rank, 0, count, 9, hsend);
    CU(cudaMemcpy(dsend, hsend, bytes, cudaMemcpyHostToDevice));
    for (int r = 0; r < nranks; r++) collTestFill(t, zppSum, r, 0, count, 9, want + (size_t)r * bytes);
    CHECK(zppAllGather(dsend, drecv, count, t, comm, stream) == zppSuccess);
    CU(cudaStreamSynchronize(stream));
    checkDevice(drecv, t, count * (size_t)nranks, want, "allgather");
    CHECK(zppBroadcast(dsend, drecv, count, t, nranks - 1, comm, stream) == zppSuccess);
    CU(cudaStreamSynchronize(stream));
    collTestFill(t, zppSum, nranks - 1, 0, count, 9, want);
    checkDevice(drecv, t, count, want, "broadcast");
    collTestFill(t, zppSum, rank, 0, count * (size_t)nranks, 11, hsend);
    CU(cudaMemcpy(dsend, hsend, bytes * (size_t)nranks, cudaMemcpyHostToDevice));
    for (int p = 0; p < nranks; p++)
      collTestFill(t, zppSum, p, (size_t)rank * count, count, 11, want + (size_t)p * bytes);
    CHECK(zppAllToAll(dsend, drecv, count, t, comm, stream) == zppSuccess);
    CU(cudaStreamSynchronize(stream));
    checkDevice(drecv, t, count * (size_t)nranks, want, "alltoall");
    /* Gather to rank 0, then scatter from it, in place on the root. */
    collTestFill(t, zppSum, rank, 0, count, 13, hsend);
    CU(cudaMemcpy(dsend, hsend, bytes, cudaMemcpyHostToDevice));
    for (int r = 0; r < nranks; r++) collTestFill(t, zppSum, r, 0, count, 13, want + (size_t)r * bytes);
    CHECK(zppGather(dsend, rank == 0 ? drecv : NULL, count, t, 0, comm, stream) == zppSuccess);
    CU(cudaStreamSynchronize(stream));
    if (rank == 0) checkDevice(drecv, t, count * (size_t)nranks, want, "gather");
    collTestFill(t, zppSum, 0, 0, count * (size_t)nranks, 15, hsend);
    if (rank == 0) CU(cudaMemcpy(drecv, hsend, bytes * (size_t)nranks, cudaMemcpyHostToDevice));
    char* mine = (char*)drecv + (rank == 0 ? 0 : (size_t)rank * bytes);
    CHECK(zppScatter(rank == 0 ? drecv : NULL, mine, count, t, 0, comm, stream) == zppSuccess);
    CU(cudaStreamSynchronize(stream));
    collTestFill(t, zppSum, 0, (size_t)rank * count, count, 15, want);
    checkDevice(mine, t, count, want, "scatter");
    /* Uneven all-to-all: rank r sends p (r + p) % 3 + 1 blocks of count / 4. */
    size_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0, unit = count / 4;
    for (int p = 0; p < nranks; p++) {
      sc[p] = unit * (size_t)((rank + p) % 3 + 1);
      rc[p] = unit * (size_t)((p + rank) % 3 + 1);
      sd[p] = so;
      rd[p] = ro;
      so += sc[p];
      ro += rc[p];
    }
    collTestFill(t, zppSum, rank, 0, so, 17, hsend);
    CU(cudaMemcpy(dsend, hsend, so * ts, cudaMemcpyHostToDevice));
    size_t at = 0;
    for (int p = 0; p < nranks; p++) {
      size_t from = 0;
      for (int q = 0; q < rank; q++) from += unit * (size_t)((p + q) % 3 + 1);
      collTestFill(t, zppSum, p, from, rc[p], 17, want + at * ts);
      at += rc[p];
    }
    CHECK(zppAllToAllv(dsend, sc, sd, drecv, rc, rd, t, comm, stream) == zppSuccess);
    CU(cudaStreamSynchronize(stream));
    checkDevice(drecv, t, ro, want, "alltoallv");
  }

  /* Point-to-point: a ring shift on device buffers in one group (to itself
   * with one rank), then what the device path refuses. */
  {
    int right = (rank + 1) % nranks, left = (rank - 1 + nranks) % nranks;
    size_t bytes = count * sizeof(float);
    collTestFill(zppFloat32, zppSum, rank, 0, count, 21, hsend);
    CU(cudaMemcpy(dsend, hsend, bytes, cudaMemcpyHostToDevice));
    CHECK_EQ_INT(zppGroupStart(), zppSuccess);
    CHECK_EQ_INT(zppSend(dsend, count, zppFloat32, right, comm, stream), zppSuccess);
    CHECK_EQ_INT(zppRecv(drecv, count, zppFloat32, left, comm, stream), zppSuccess);
    CHECK_EQ_INT(zppGroupEnd(), zppSuccess);
    CU(cudaStreamSynchronize(stream));
    collTestFill(zppFloat32, zppSum, left, 0, count, 21, want);
    checkDevice(drecv, zppFloat32, count, want, "send/recv ring shift");
    CHECK_EQ_INT(zppSendTagged(dsend, 4, zppFloat32, right, 1, comm, stream), zppInvalidUsage);
    CHECK_EQ_INT(zppSend(dsend, 4, zppFloat32, rank, comm, stream), zppInvalidUsage);
  }

  deviceBytes(comm, rank, nranks, stream, dsend, drecv, count);

  /* Stream arguments. */
  float hbuf[16] = {0};
  zppHostStream_t hs;
  REQUIRE(zppHostStreamCreate(&hs) == zppSuccess);
  CHECK_EQ_INT(zppAllReduce(hbuf, hbuf, 16, zppFloat32, zppSum, comm, stream), zppInvalidArgument);
  CHECK_EQ_INT(zppAllReduce(dsend, drecv, 16, zppFloat32, zppSum, comm, hs), zppInvalidUsage);
  CHECK_EQ_INT(zppAllReduce(hbuf, drecv, 16, zppFloat32, zppSum, comm, stream), zppInvalidUsage);
  /* Host buffers still go over UCX in the same process. */
  for (int i = 0; i < 16; i++) hbuf[i] = 1.0f;
  CHECK(zppAllReduce(hbuf, hbuf, 16, zppFloat32, zppSum, comm, NULL) == zppSuccess);
  CHECK(hbuf[0] == (float)nranks);
  zppHostStreamDestroy(hs);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  cudaFree(dsend);
  cudaFree(drecv);
  cudaStreamDestroy(stream);
  free(hsend);
  free(want);
  return zppTestFailures ? 1 : 0;
}

/* ---- the device path after a shrink --------------------------------------- */

/* Device all-reduce (sum of r + 1 over the communicator's ranks r) and
 * all-gather (rank r's block filled with r + 1), checked exactly. */
static void deviceAfterShrink(zppComm_t comm, cudaStream_t stream, float* d, float* h, size_t count) {
  int rank, n;
  REQUIRE(zppCommUserRank(comm, &rank) == zppSuccess && zppCommCount(comm, &n) == zppSuccess);
  for (size_t i = 0; i < count; i++) h[i] = (float)(rank + 1);
  CU(cudaMemcpy(d, h, count * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(zppAllReduce(d, d, count, zppFloat32, zppSum, comm, stream) == zppSuccess);
  CU(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < count; i++) h[i] = (float)(n * (n + 1) / 2);
  checkDevice(d, zppFloat32, count, h, "all-reduce after the shrink");
  for (size_t i = 0; i < count; i++) h[i] = (float)(rank + 1);
  CU(cudaMemcpy(d, h, count * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(zppAllGather(d, d + count, count, zppFloat32, comm, stream) == zppSuccess);
  CU(cudaStreamSynchronize(stream));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < count; i++) h[(size_t)r * count + i] = (float)(r + 1);
  checkDevice(d + count, zppFloat32, (size_t)n * count, h, "all-gather after the shrink");
}

static int shrinkBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) return ZPP_TEST_SKIP;
  CU(cudaSetDevice(rank % ndev));
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  cudaStream_t stream;
  CU(cudaStreamCreate(&stream));
  const size_t count = (size_t)1 << 18;
  float* d;
  CU(cudaMalloc((void**)&d, count * sizeof(float) * (size_t)(nranks + 1)));
  float* h = malloc(count * sizeof(float) * (size_t)nranks);
  REQUIRE(h);
  deviceAfterShrink(comm, stream, d, h, count); /* its NCCL communicator is made here */
  int victim = nranks - 1;
  if (rank == victim) raise(SIGKILL);
  zppComm_t small;
  REQUIRE(zppCommShrink(comm, &victim, 1, &small, NULL, ZPP_SHRINK_ABORT) == zppSuccess);
  deviceAfterShrink(small, stream, d, h, count);
  /* Again: the next-to-last leaves (zppCommAbort), the others shrink. */
  int leaver = nranks - 2;
  if (rank == leaver) {
    zppCommAbort(small);
  } else {
    zppComm_t smaller;
    REQUIRE(zppCommShrink(small, &leaver, 1, &smaller, NULL, ZPP_SHRINK_ABORT) == zppSuccess);
    deviceAfterShrink(smaller, stream, d, h, count);
    CHECK(zppCommDestroy(smaller) == zppSuccess);
    CHECK(zppCommDestroy(small) == zppSuccess);
  }
  CHECK(zppCommDestroy(comm) == zppSuccess);
  cudaFree(d);
  free(h);
  cudaStreamDestroy(stream);
  printf("rank %d: device path after two shrinks: %s\n", rank, zppTestFailures ? "FAILED" : "ok");
  return zppTestFailures ? 1 : 0;
}

static int runShrink(int ndev) {
  int status[4];
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 4;
  o.timeoutSec = 300;
  o.statusOut = status;
  /* One GPU: the ranks are hosts of their own to NCCL, as in run(4, 2). */
  if (ndev < 4) setenv("ZPP_LAUNCH_NCCL_HOST_PER_RANK", "1", 1);
  zppLaunch(&o, shrinkBody, NULL);
  int rc = status[3] == 128 + SIGKILL ? 0 : 1;
  for (int r = 0; r < 3; r++) rc |= status[r] != 0;
  printf("device path after shrinks (4 ranks, the last killed): %s\n", rc ? "FAILED" : "passed");
  return rc;
}

static int run(int nranks, int shareGpu) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = nranks;
  o.timeoutSec = 300;
  int rc = zppLaunch(&o, body, &shareGpu);
  printf("%d rank(s)%s: %s\n", nranks,
         shareGpu == 2 ? " on one GPU, NCCL_HOSTID per rank"
         : shareGpu    ? " on one GPU"
                       : "",
         rc == 0               ? "passed"
         : rc == ZPP_TEST_SKIP ? "skipped (no CUDA device)"
                               : "FAILED");
  return rc;
}

int main(void) {
  sharedDevices = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(sharedDevices != MAP_FAILED);
  *sharedDevices = 0;
  int rc = run(1, 0);
  if (rc != 0) return rc;
  int ndev = *sharedDevices;
  if (ndev >= 2)
    rc |= run(ndev < 4 ? ndev : 4, 0);
  else {
    /* the refusal needs ranks that NCCL takes for one host's */
    unsetenv("ZPP_LAUNCH_NCCL_HOST_PER_RANK");
    unsetenv("NCCL_HOSTID");
    rc |= run(2, 1);
    setenv("ZPP_LAUNCH_NCCL_HOST_PER_RANK", "1", 1);
    rc |= run(4, 2);
  }
  rc |= runShrink(ndev);
  return rc;
}
