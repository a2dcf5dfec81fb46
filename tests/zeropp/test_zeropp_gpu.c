/*
 * ZeRO++ on device buffers (label gpu; exit 77 without a CUDA device). Every
 * rank checks for a device itself: the parent never touches CUDA, which must
 * not be initialised before fork.
 *
 * The host path is the reference: the same data through zppQwzAllGather and
 * zppQgzReduceScatter on host buffers (UCX) and on device buffers (the CUDA
 * codecs and NCCL) must agree byte for byte, since the codecs are
 * bit-identical and both paths sum in the same order. Checked:
 *   - qwZ and qgZ (sum, avg; fp32, fp16, bf16; int8, int4; several pipeline
 *     chunks, odd counts, in place), on blocks and on ranks placed on nodes in
 *     turn (when there are 4 ranks);
 *   - plain zppAllGather / zppReduceScatter on a communicator whose config
 *     compresses them: the same bytes as the explicit calls;
 *   - 200 calls in a row on the communicator's reused streams and scratch,
 *     alternating sizes (the scratch grows and is trimmed), still right;
 *   - a call inside CUDA graph capture: refused with zppInvalidUsage;
 *   - the byte counters (zppCommGetStats) of one-chunk bf16 calls: plain
 *     all-gather and reduce-scatter by the logical rule, qwZ int8 by the
 *     all-gather's rule on its packed chunk (about half of plain's), qgZ int4
 *     exactly (about a quarter of plain's inter-node bytes over the ranks per
 *     node): lib/stats.h, docs/gpu.md.
 * Ranks: one per device when there are several (up to 4), else 4 ranks on
 * one GPU: with NCCL 2.30+ through NCCL_MULTI_RANK_GPU_ENABLE=1, with an older
 * NCCL as hosts of their own to NCCL (ZPP_LAUNCH_NCCL_HOST_PER_RANK).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "testutil.h"
#include "perf/common/launch.h"
#include "zeropp_testlib.h"

#define CU(call) REQUIRE((call) == cudaSuccess)

typedef struct {
  int shareGpu;
  int ndev;
} run_t;

static int* seenDevices; /* device count seen by rank 0 of the probe run */

/* Runs fn on host copies and on device copies of the same input; compares
 * the outputs byte for byte. */
typedef zppResult_t (*pair_fn)(const void* send, void* recv, void* stream, zppComm_t comm, void* arg);

static void samePaths(zppComm_t comm, cudaStream_t stream, const char* what, pair_fn fn, void* arg,
                      const void* hin, size_t inBytes, size_t outBytes, size_t inPlaceOff) {
  char* hout = malloc(outBytes + 1);
  char* dcopy = malloc(outBytes + 1);
  char* hbuf = malloc(inBytes + outBytes + 1);
  REQUIRE(hout && dcopy && hbuf);
  void* dbuf = NULL;
  CU(cudaMalloc(&dbuf, inBytes + outBytes + 1));
  int inPlace = inPlaceOff != (size_t)-1;
  memcpy(hbuf, hin, inBytes);
  CU(cudaMemcpy(dbuf, hin, inBytes, cudaMemcpyHostToDevice));
  void* hrecv = inPlace ? hbuf + inPlaceOff : hbuf + inBytes;
  void* drecv = inPlace ? (char*)dbuf + inPlaceOff : (char*)dbuf + inBytes;
  zppResult_t rh = fn(hbuf, hrecv, NULL, comm, arg);
  zppResult_t rd = fn(dbuf, drecv, stream, comm, arg);
  CHECK_MSG(rh == zppSuccess && rd == zppSuccess, "%s: host %s, device %s", what, zppGetErrorString(rh),
            zppGetErrorString(rd));
  CU(cudaStreamSynchronize(stream));
  memcpy(hout, hrecv, outBytes);
  CU(cudaMemcpy(dcopy, drecv, outBytes, cudaMemcpyDeviceToHost));
  if (memcmp(hout, dcopy, outBytes) != 0) {
    /* Which bytes, and whether they still differ once the whole device is
     * idle (if not, the call's work was not ordered before the stream's end). */
    size_t first = 0, bad = 0;
    for (size_t i = 0; i < outBytes; i++)
      if (hout[i] != dcopy[i]) first = bad++ ? first : i;
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(dcopy, drecv, outBytes, cudaMemcpyDeviceToHost));
    CHECK_MSG(0,
              "%s: the device result differs from the host path's in %zu of %zu bytes, first at %zu "
              "(0x%02x, host 0x%02x); after a device-wide sync: %s",
              what, bad, outBytes, first, (unsigned char)dcopy[first], (unsigned char)hout[first],
              memcmp(hout, dcopy, outBytes) == 0 ? "equal" : "still different");
  } else {
    CHECK(1);
  }
  CU(cudaFree(dbuf));
  free(hout);
  free(dcopy);
  free(hbuf);
}

typedef struct {
  size_t count;
  zppDataType_t t;
  int bits;
  zppRedOp_t op;
  int plain; /* the plain call, compressed by the communicator's config */
} call_t;

static zppResult_t qwz(const void* send, void* recv, void* stream, zppComm_t comm, void* arg) {
  const call_t* c = arg;
  if (c->plain) return zppAllGather(send, recv, c->count, c->t, comm, stream);
  return zppQwzAllGather(send, recv, c->count, c->t, c->bits, comm, stream);
}

static zppResult_t qgz(const void* send, void* recv, void* stream, zppComm_t comm, void* arg) {
  const call_t* c = arg;
  if (c->plain) return zppReduceScatter(send, recv, c->count, c->t, c->op, comm, stream);
  return zppQgzReduceScatter(send, recv, c->count, c->t, c->op, c->bits, comm, stream);
}

/* Explicit calls (plain 0): int8 and int4 qwZ, int4 and int8 qgZ. Plain
 * calls compressed by the config (plain 1): its qwzBits 8 and qgzBits 4. */
static void suite(zppComm_t comm, int rank, int nranks, cudaStream_t stream, int plain) {
  const zppDataType_t types[] = {zppFloat32, zppFloat16, zppBfloat16};
  /* Several device chunks (4 MiB each) for the largest count. */
  const size_t counts[] = {1, 1001, (size_t)3 << 20};
  for (size_t ti = 0; ti < 3; ti++)
    for (size_t ci = 0; ci < 3; ci++)
      for (int bits = 8; bits >= (plain ? 8 : 4); bits -= 4) {
        zppDataType_t t = types[ti];
        size_t ts = zppTypeSize(t), n = counts[ci];
        zppRedOp_t op = (ti + ci) % 2 ? zppAvg : zppSum;
        call_t cw = {n, t, bits, op, plain}, cg = {n, t, plain ? 4 : 12 - bits, op, plain};
        char* in = malloc(n * ts * (size_t)nranks);
        REQUIRE(in);
        ztFill(in, t, n * (size_t)nranks, (int)(ti * 10 + ci), rank);
        char what[96];
        snprintf(what, sizeof what, "%s %s int%d count %zu", plain ? "zppAllGather (qwZ)" : "qwZ",
                 ztTypeName(t), cw.bits, n);
        samePaths(comm, stream, what, qwz, &cw, in, n * ts, n * ts * (size_t)nranks, (size_t)-1);
        snprintf(what, sizeof what, "%s %s int%d %s count %zu",
                 plain ? "zppReduceScatter (qgZ)" : "qgZ", ztTypeName(t), cg.bits,
                 op == zppAvg ? "avg" : "sum", n);
        samePaths(comm, stream, what, qgz, &cg, in, n * ts * (size_t)nranks, n * ts, (size_t)-1);
        if (!plain && ci == 1) {
          /* In place: recvbuff = sendbuff + rank * recvcount. */
          snprintf(what, sizeof what, "qgZ in place %s int%d", ztTypeName(t), cg.bits);
          samePaths(comm, stream, what, qgz, &cg, in, n * ts * (size_t)nranks, n * ts,
                    (size_t)rank * n * ts);
        }
        free(in);
      }
}

/* Many calls on the communicator's reused work set, sizes alternating so
 * that the scratch grows and is trimmed (ZPP_TRIM_CALLS = 64, core/trim.h). */
static void manyCalls(zppComm_t comm, int rank, int nranks, cudaStream_t stream) {
  for (int i = 0; i < 200; i++) {
    call_t c = {i % 70 == 0 ? (size_t)5 << 20 : 4099, zppBfloat16, 4, zppSum, 0};
    size_t ts = 2;
    char* in = malloc(c.count * ts * (size_t)nranks);
    REQUIRE(in);
    ztFill(in, c.t, c.count * (size_t)nranks, 100 + i, rank);
    if (i % 10 == 0 || c.count > 4099)
      samePaths(comm, stream, "qgZ, call after call", qgz, &c, in, c.count * ts * (size_t)nranks,
                c.count * ts, (size_t)-1);
    free(in);
  }
}

/* The counters of kind after the calls issued since the last reset, then a
 * reset: intra and inter node bytes as given, every other kind 0. */
static void checkBytes(zppComm_t comm, cudaStream_t stream, zppOpKind_t kind, const char* what,
                       uint64_t intra, uint64_t inter) {
  CU(cudaStreamSynchronize(stream));
  zppCommStats_t st;
  REQUIRE(zppCommGetStats(comm, &st) == zppSuccess);
  CHECK_MSG(st.intraNodeBytes[kind] == intra && st.interNodeBytes[kind] == inter,
            "%s: intra %llu inter %llu bytes, want %llu and %llu", what,
            (unsigned long long)st.intraNodeBytes[kind], (unsigned long long)st.interNodeBytes[kind],
            (unsigned long long)intra, (unsigned long long)inter);
  for (int k = 0; k < zppNumOpKinds; k++)
    CHECK_MSG(k == (int)kind || (st.intraNodeBytes[k] == 0 && st.interNodeBytes[k] == 0),
              "%s: %s has bytes too", what, zppOpKindName((zppOpKind_t)k));
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
}

/* One device chunk each (c elements of bf16, far below 4 MiB), on a
 * communicator that compresses nothing by itself. W ranks, L per node, N
 * nodes; P(bits) the packed size of c elements. Plain all-gather and
 * reduce-scatter: c * 2 bytes to each other rank. qwZ: P(8) to each other
 * rank. qgZ: N * P(4) to each other rank of the node, P(4) to each other
 * node. */
static void deviceBytes(zppComm_t comm, int rank, int nranks, cudaStream_t stream) {
  zppTopology_t topo;
  REQUIRE(zppCommTopology(comm, &topo) == zppSuccess);
  const uint64_t W = (uint64_t)nranks, L = (uint64_t)topo.localSize, N = (uint64_t)topo.nNodes;
  REQUIRE(N * L == W);
  const size_t c = 65536;
  const uint64_t plain = c * 2, p8 = ztPackedInChunks(c, 8, ztBlock(8), c),
                 p4 = ztPackedInChunks(c, 4, ztBlock(4), c);
  /* The promised ratios, for the reader of a failure: int8 about half the
   * bf16 bytes, int4 about a quarter (scales, headers and escape tables
   * above that). */
  CHECK_MSG(p8 * 100 > plain * 50 && p8 * 100 < plain * 53, "qwZ int8 packs %llu of %llu bytes",
            (unsigned long long)p8, (unsigned long long)plain);
  CHECK_MSG(p4 * 100 > plain * 25 && p4 * 100 < plain * 30, "qgZ int4 packs %llu of %llu bytes",
            (unsigned long long)p4, (unsigned long long)plain);
  char* in = malloc(c * 2 * W);
  REQUIRE(in);
  ztFill(in, zppBfloat16, c * W, 77, rank);
  void *dsend = NULL, *drecv = NULL;
  CU(cudaMalloc(&dsend, c * 2 * W));
  CU(cudaMalloc(&drecv, c * 2 * W));
  CU(cudaMemcpy(dsend, in, c * 2 * W, cudaMemcpyHostToDevice));
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  CHECK(zppAllGather(dsend, drecv, c, zppBfloat16, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpAllGather, "device all-gather", (L - 1) * plain, (W - L) * plain);
  CHECK(zppQwzAllGather(dsend, drecv, c, zppBfloat16, 8, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpQwZ, "device qwZ int8", (L - 1) * p8, (W - L) * p8);
  CHECK(zppReduceScatter(dsend, drecv, c, zppBfloat16, zppSum, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpReduceScatter, "device reduce-scatter", (L - 1) * plain,
             (W - L) * plain);
  CHECK(zppQgzReduceScatter(dsend, drecv, c, zppBfloat16, zppSum, 4, comm, stream) == zppSuccess);
  checkBytes(comm, stream, zppOpQgZ, "device qgZ int4", (L - 1) * N * p4, (N - 1) * p4);
  CU(cudaFree(dsend));
  CU(cudaFree(drecv));
  free(in);
}

static void captureRefused(zppComm_t comm, cudaStream_t stream) {
  void* d = NULL;
  CU(cudaMalloc(&d, 1 << 20));
  CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  zppResult_t res = zppQwzAllGather(d, d, 1024, zppFloat32, 8, comm, stream);
  cudaGraph_t g = NULL;
  CU(cudaStreamEndCapture(stream, &g));
  if (g) cudaGraphDestroy(g);
  CHECK_EQ_INT(res, zppInvalidUsage);
  CU(cudaFree(d));
}

/* A rotating communicator (quantRotate = 1) on device buffers: qwZ and qgZ
 * (explicit, and the plain all-gather / reduce-scatter compressed by the
 * config) run the rotated CUDA codec and the CUDA reductions of rotated
 * segments, and must equal the host path byte for byte: escapes and markers
 * among rotated blocks (an outlier and a NaN), sums and averages, several
 * device chunks, in place. */
static void rotateDevice(zppComm_t comm, int rank, int nranks, cudaStream_t stream) {
  const zppDataType_t types[] = {zppFloat32, zppFloat16, zppBfloat16};
  const size_t counts[] = {1, 1001, (size_t)3 << 20};
  for (size_t ti = 0; ti < 3; ti++)
    for (size_t ci = 0; ci < 3; ci++)
      for (int bits = 8; bits >= 4; bits -= 4) {
        zppDataType_t t = types[ti];
        size_t ts = zppTypeSize(t), n = counts[ci];
        call_t cw = {n, t, bits, zppSum, bits == 8 && ci == 1};
        char* in = malloc(n * ts);
        REQUIRE(in);
        ztFill(in, t, n, (int)(ti * 10 + ci + 50), rank);
        if (n > 600) { /* an outlier and a NaN: an escape and a marker among rotated blocks */
          /* 7.49e25 (fp32, bf16) or 60000 (fp16); the canonical quiet NaN */
          const uint32_t huge = t == zppFloat32 ? 0x6a77d2c5u : t == zppFloat16 ? 0x7b53u : 0x6a78u;
          const uint32_t qnan = t == zppFloat32 ? 0x7fc00000u : t == zppFloat16 ? 0x7e00u : 0x7fc0u;
          memcpy(in + 17 * ts, &huge, ts); /* little endian: the low bytes */
          memcpy(in + 500 * ts, &qnan, ts);
        }
        char what[96];
        snprintf(what, sizeof what, "rotated %s %s int%d count %zu", cw.plain ? "zppAllGather" : "qwZ",
                 ztTypeName(t), bits, n);
        samePaths(comm, stream, what, qwz, &cw, in, n * ts, n * ts * (size_t)nranks, (size_t)-1);
        free(in);
        /* qgZ: the reduce-scatter of n elements per rank, the same outliers
         * in every rank's partition 0 and the last one. */
        zppRedOp_t op = (ti + ci) % 2 ? zppAvg : zppSum;
        call_t cg = {n, t, bits == 8 && ci == 1 ? 4 : 12 - bits, op, bits == 8 && ci == 1};
        in = malloc(n * ts * (size_t)nranks);
        REQUIRE(in);
        ztFill(in, t, n * (size_t)nranks, (int)(ti * 10 + ci + 70), rank);
        if (n > 600)
          for (int p = 0; p<nranks; p += nranks> 1 ? nranks - 1 : 1) {
            const uint32_t huge = t == zppFloat32 ? 0x6a77d2c5u : t == zppFloat16 ? 0x7b53u : 0x6a78u;
            const uint32_t qnan = t == zppFloat32 ? 0x7fc00000u : t == zppFloat16 ? 0x7e00u : 0x7fc0u;
            memcpy(in + ((size_t)p * n + 17 + (size_t)rank) * ts, &huge, ts);
            if (rank == 0) memcpy(in + ((size_t)p * n + 500) * ts, &qnan, ts);
          }
        snprintf(what, sizeof what, "rotated %s %s int%d %s count %zu",
                 cg.plain ? "zppReduceScatter (qgZ)" : "qgZ", ztTypeName(t), cg.bits,
                 op == zppAvg ? "avg" : "sum", n);
        samePaths(comm, stream, what, qgz, &cg, in, n * ts * (size_t)nranks, n * ts, (size_t)-1);
        if (!cg.plain && ci == 1) {
          snprintf(what, sizeof what, "rotated qgZ in place %s int%d", ztTypeName(t), cg.bits);
          samePaths(comm, stream, what, qgz, &cg, in, n * ts * (size_t)nranks, n * ts,
                    (size_t)rank * n * ts);
        }
        free(in);
      }
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) return ZPP_TEST_SKIP;
  if (seenDevices) *seenDevices = ndev;
  const run_t* r = arg;
  if (r == NULL) return 0; /* the probe */
  CU(cudaSetDevice(r->shareGpu ? 0 : rank % ndev));
  cudaStream_t stream;
  CU(cudaStreamCreate(&stream));
  /* One id makes one communicator: the settings below are splits of it. */
  zppComm_t base;
  REQUIRE(zppCommInitRank(&base, nranks, *id, rank) == zppSuccess);
  for (int plain = 0; plain < 3; plain++) {
    zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
    if (plain) {
      cfg.qwzBits = 8;
      cfg.qgzBits = 4;
      cfg.compressMinBytes = 0;
    }
    if (plain == 2) cfg.quantRotate = 1;
    zppComm_t comm;
    REQUIRE(zppCommSplit(base, 0, rank, &comm, &cfg) == zppSuccess);
    if (plain == 2)
      rotateDevice(comm, rank, nranks, stream);
    else
      suite(comm, rank, nranks, stream, plain);
    if (!plain) {
      manyCalls(comm, rank, nranks, stream);
      deviceBytes(comm, rank, nranks, stream);
      captureRefused(comm, stream);
    }
    CHECK(zppCommDestroy(comm) == zppSuccess);
  }
  CHECK(zppCommDestroy(base) == zppSuccess);
  cudaStreamDestroy(stream);
  if (rank == 0) printf("rank 0: %ld checks, %d failed\n", zppTestChecks, zppTestFailures);
  return zppTestFailures ? 1 : 0;
}

static int run(int nranks, const char* layout, run_t* r) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = nranks;
  o.layout = layout;
  o.timeoutSec = 600;
  int rc = zppLaunch(&o, body, r);
  printf("%d rank(s)%s%s%s: %s\n", nranks, layout ? " layout " : "", layout ? layout : "",
         r && r->shareGpu ? " on one GPU" : "",
         rc == 0               ? "passed"
         : rc == ZPP_TEST_SKIP ? "skipped (no CUDA device)"
                               : "FAILED");
  return rc;
}

int main(void) {
  seenDevices = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(seenDevices != MAP_FAILED);
  *seenDevices = 0;
  int rc = run(1, NULL, NULL);
  if (rc != 0) return rc;
  run_t r = {0, *seenDevices};
  rc = run(1, NULL, &r);
  if (r.ndev >= 2) {
    int n = r.ndev >= 4 ? 4 : 2;
    rc |= run(n, n == 4 ? "2x2" : "2x1", &r);
    if (n == 4) rc |= run(n, "2x2/cyclic", &r);
    return rc;
  }
  int v = 0;
  ncclGetVersion(&v);
  if (v >= 23000) {
    /* Several ranks on the one GPU: NCCL 2.30+ with the variable set. */
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
    r.shareGpu = 1;
    rc |= run(4, "2x2", &r);
    rc |= run(4, "2x2/cyclic", &r);
  } else {
    /* Older NCCL: each rank a host of its own to NCCL (NCCL_HOSTID, set by
     * the launcher), connected through NCCL's network transport. */
    printf("one GPU and NCCL %d.%d: 4 ranks through NCCL's network transport (NCCL_HOSTID per rank)\n",
           v / 10000, (v / 100) % 100);
    setenv("ZPP_LAUNCH_NCCL_HOST_PER_RANK", "1", 1);
    r.shareGpu = 1;
    rc |= run(4, "2x2", &r);
    rc |= run(4, "2x2/cyclic", &r);
  }
  return rc;
}
