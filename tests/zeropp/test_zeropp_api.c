/*
 * ZeRO++ entry points, multi-rank:
 *
 *   test_zeropp_api CASE
 *
 * CASE settings: config beats environment beats defaults for the
 *   compression fields (observed through what the plain calls compute and
 *   how they are counted), the size threshold, bits 0 = the communicator's
 *   setting, invalid values refused at init.
 * CASE args: bad arguments (types, bits, ops, NULL, overlap, streams,
 *   handles) fail with the right code, count 0 moves nothing.
 * CASE uneven: nodes of 2 and 1 ranks: qwZ and hpZ work; qgZ, explicit
 *   (single and coalesced) or configured, runs as the plain reduce-scatter
 *   (exact), counted in qgzPlainFallbacks.
 * CASE mismatch: ranks with different bits, block or compression switch get
 *   an error, never data.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "perf/common/launch.h"
#include "zeropp_testlib.h"

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  REQUIRE(p != NULL);
  return p;
}

/* A plain communicator that outlives the ones under test: it hands each of
 * them a fresh unique id (one id makes one communicator). */
static zppComm_t ctl;

static zppResult_t initWith(int rank, int n, const zppUniqueId* unused, zppConfig_t* cfg,
                            zppComm_t* comm) {
  (void)unused;
  zppUniqueId id;
  memset(&id, 0, sizeof(id));
  if (rank == 0) REQUIRE(zppGetUniqueId(&id) == zppSuccess);
  REQUIRE(zppBroadcast(&id, &id, sizeof(id), zppUint8, 0, ctl, NULL) == zppSuccess);
  return zppCommInitRankConfig(comm, n, id, rank, cfg);
}

/* zppAllGather of bf16 under the comm's settings: 1 if the result equals
 * qwZ with (bits, block), 0 if it is the exact gather; the call is counted
 * accordingly. */
static int gatherKind(zppComm_t comm, int rank, int n, int bits, int block, size_t count) {
  const zppDataType_t t = zppBfloat16;
  char* send = xmalloc(count * 2);
  char* recv = xmalloc(count * 2 * (size_t)n);
  char* want = xmalloc(count * 2 * (size_t)n);
  ztFill(send, t, count, 7, rank);
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  REQUIRE(zppAllGather(send, recv, count, t, comm, NULL) == zppSuccess);
  zppCommStats_t s;
  REQUIRE(zppCommGetStats(comm, &s) == zppSuccess);
  int kind = -1;
  for (int r = 0; r < n; r++) ztFill(want + (size_t)r * count * 2, t, count, 7, r);
  if (memcmp(recv, want, count * 2 * (size_t)n) == 0 && s.calls[zppOpAllGather] == 1) kind = 0;
  if (bits) {
    char* shard = xmalloc(count * 2);
    for (int r = 0; r < n; r++) {
      ztFill(shard, t, count, 7, r);
      ztQwzExpect(shard, t, count, bits, block, want + (size_t)r * count * 2);
    }
    free(shard);
    if (memcmp(recv, want, count * 2 * (size_t)n) == 0 && s.calls[zppOpQwZ] == 1) kind = 1;
  }
  free(send);
  free(recv);
  free(want);
  return kind;
}

static int caseSettings(int rank, int n, const zppUniqueId* id) {
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  /* ctest sets ZPP_QWZ_BITS=4 and ZPP_COMPRESS_MIN_BYTES=0 for this case. */
  REQUIRE(initWith(rank, n, id, NULL, &comm) == zppSuccess);
  CHECK_MSG(gatherKind(comm, rank, n, 4, 64, 999) == 1, "env ZPP_QWZ_BITS=4 not applied");
  /* bits 0 in the explicit call: the communicator's (int4). */
  char* send = xmalloc(999 * 2);
  char* recv = xmalloc(999 * 2 * (size_t)n);
  char* want = xmalloc(999 * 2 * (size_t)n);
  ztFill(send, zppBfloat16, 999, 7, rank);
  CHECK(zppQwzAllGather(send, recv, 999, zppBfloat16, 0, comm, NULL) == zppSuccess);
  for (int r = 0; r < n; r++) {
    ztFill(send, zppBfloat16, 999, 7, r);
    ztQwzExpect(send, zppBfloat16, 999, 4, 64, want + (size_t)r * 999 * 2);
  }
  CHECK_MSG(memcmp(recv, want, 999 * 2 * (size_t)n) == 0, "qwZ bits 0 did not use the comm's int4");
  CHECK(zppCommDestroy(comm) == zppSuccess);

  cfg.qwzBits = 8; /* config beats env */
  REQUIRE(initWith(rank, n, id, &cfg, &comm) == zppSuccess);
  CHECK_MSG(gatherKind(comm, rank, n, 8, 256, 999) == 1, "config qwzBits=8 did not beat the env");
  CHECK(zppCommDestroy(comm) == zppSuccess);

  cfg.quantBlock = 128;
  cfg.compressMinBytes = 999 * 2 * (size_t)n + 1; /* one byte more than the call */
  REQUIRE(initWith(rank, n, id, &cfg, &comm) == zppSuccess);
  CHECK_MSG(gatherKind(comm, rank, n, 8, 128, 999) == 0,
            "a call under compressMinBytes was compressed");
  CHECK_MSG(gatherKind(comm, rank, n, 8, 128, 1000) == 1, "config quantBlock=128 not applied");
  CHECK(zppCommDestroy(comm) == zppSuccess);

  /* qgZ through zppReduceScatter (config), and ops it does not take. */
  zppConfig_t cg = ZPP_CONFIG_INITIALIZER;
  cg.qwzBits = 0;
  cg.qgzBits = 8;
  cg.compressMinBytes = 0;
  REQUIRE(initWith(rank, n, id, &cg, &comm) == zppSuccess);
  const size_t rc = 500;
  float* in = xmalloc(rc * (size_t)n * sizeof(float));
  float* out = xmalloc(rc * sizeof(float));
  float* exp = xmalloc(rc * sizeof(float));
  double* bound = xmalloc(rc * sizeof(double));
  double* target = xmalloc(rc * sizeof(double));
  void** all = xmalloc((size_t)n * sizeof(void*));
  for (int r = 0; r < n; r++) {
    all[r] = xmalloc(rc * (size_t)n * sizeof(float));
    ztFill(all[r], zppFloat32, rc * (size_t)n, 9, r);
  }
  memcpy(in, all[rank], rc * (size_t)n * sizeof(float));
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  CHECK(zppReduceScatter(in, out, rc, zppFloat32, zppAvg, comm, NULL) == zppSuccess);
  int* oneNode = xmalloc((size_t)n * sizeof(int));
  memset(oneNode, 0, (size_t)n * sizeof(int));
  ztQgzExpect((const void* const*)all, zppFloat32, rc, rank, n, oneNode, 8, 256, zppAvg, ZT_CHUNK_BYTES,
              exp, bound, target);
  free(oneNode);
  CHECK_MSG(memcmp(out, exp, rc * sizeof(float)) == 0, "config qgzBits=8: not qgZ int8 avg");
  CHECK(zppReduceScatter(in, out, rc, zppFloat32, zppMax, comm, NULL) == zppSuccess);
  for (size_t i = 0; i < rc; i++) {
    float m = -INFINITY;
    for (int r = 0; r < n; r++) m = fmaxf(m, ((float*)all[r])[(size_t)rank * rc + i]);
    if (out[i] != m) {
      CHECK_MSG(0, "zppReduceScatter max under qgZ settings is not exact at %zu", i);
      break;
    }
  }
  zppCommStats_t s;
  REQUIRE(zppCommGetStats(comm, &s) == zppSuccess);
  CHECK_EQ_INT(s.calls[zppOpQgZ], 1);
  CHECK_EQ_INT(s.calls[zppOpReduceScatter], 1);
  for (int r = 0; r < n; r++) free(all[r]);
  free(all);
  free(in);
  free(out);
  free(exp);
  free(bound);
  free(target);
  free(send);
  free(recv);
  free(want);
  CHECK(zppCommDestroy(comm) == zppSuccess);

  /* Invalid settings are refused at init, before any rendezvous. */
  zppConfig_t bad = ZPP_CONFIG_INITIALIZER;
  bad.qwzBits = 5;
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, &bad) == zppInvalidArgument);
  bad = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  bad.quantBlock = 100;
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, &bad) == zppInvalidArgument);
  bad = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  bad.hpzGroupSize = -2;
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, &bad) == zppInvalidArgument);
  bad = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  bad.quantRotate = 2;
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, &bad) == zppInvalidArgument);
  setenv("ZPP_QUANT_ROTATE", "3", 1);
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, NULL) == zppInvalidArgument);
  unsetenv("ZPP_QUANT_ROTATE");
  setenv("ZPP_QGZ_BITS", "6", 1);
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, NULL) == zppInvalidArgument);
  bad = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  bad.qwzBits = 2; /* 2 bits is qgZ's alone */
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, &bad) == zppInvalidArgument);
  bad = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  bad.qgzErrorFeedback = 2;
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, &bad) == zppInvalidArgument);
  setenv("ZPP_QGZ_ERROR_FEEDBACK", "yes", 1);
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, NULL) == zppInvalidArgument);
  unsetenv("ZPP_QGZ_ERROR_FEEDBACK");
  setenv("ZPP_QGZ_BITS", "x", 1);
  CHECK(zppCommInitRankConfig(&comm, n, *id, rank, NULL) == zppInvalidArgument);
  unsetenv("ZPP_QGZ_BITS");
  return zppTestRankResult();
}

static int caseArgs(int rank, int n, const zppUniqueId* id) {
  zppComm_t comm;
  REQUIRE(initWith(rank, n, id, NULL, &comm) == zppSuccess);
  float a[64], b[64 * 8];
  int ia[64], ib[64 * 8];
  CHECK(zppQwzAllGather(ia, ib, 8, zppInt32, 8, comm, NULL) == zppInvalidArgument);
  CHECK(zppQwzAllGather(a, b, 8, zppFloat32, 3, comm, NULL) == zppInvalidArgument);
  CHECK(zppQwzAllGather(a, NULL, 8, zppFloat32, 8, comm, NULL) == zppInvalidArgument);
  CHECK(zppQwzAllGather(a, b, 8, zppFloat32, 8, NULL, NULL) == zppInvalidArgument);
  CHECK(zppQwzAllGather(b + 1, b, 8, zppFloat32, 8, comm, NULL) == zppInvalidUsage);
  CHECK(zppQwzAllGather(a, b, 8, zppFloat32, 8, comm, (zppStream_t)a) == zppInvalidArgument);
  CHECK(zppQwzAllGather(a, b, (size_t)1 << 62, zppFloat32, 8, comm, NULL) == zppInvalidArgument);
  CHECK(zppQgzReduceScatter(b, a, 8, zppFloat32, zppMax, 4, comm, NULL) == zppInvalidArgument);
  CHECK(zppQgzReduceScatter(b, a, 8, zppInt8, zppSum, 4, comm, NULL) == zppInvalidArgument);
  CHECK(zppQgzReduceScatter(b, a, 8, zppFloat32, zppSum, 3, comm, NULL) == zppInvalidArgument);
  CHECK(zppQwzAllGather(a, b, 8, zppFloat32, 2, comm, NULL) == zppInvalidArgument);
  CHECK(zppQgzReduceScatter(b, b + 1, 8, zppFloat32, zppSum, 4, comm, NULL) == zppInvalidUsage);
  CHECK(zppQgzReduceScatterCoalesced(-1, NULL, NULL, NULL, zppFloat32, zppSum, 4, comm, NULL) ==
        zppInvalidArgument);
  CHECK(zppQgzReduceScatterCoalesced(2, NULL, NULL, NULL, zppFloat32, zppSum, 4, comm, NULL) ==
        zppInvalidArgument);
  zppParam_t p = NULL;
  CHECK(zppParamCreate(comm, 8, zppInt32, 8, &p) == zppInvalidArgument && p == NULL);
  CHECK(zppParamCreate(comm, 8, zppFloat32, 8, NULL) == zppInvalidArgument);
  CHECK(zppParamCreate(NULL, 8, zppFloat32, 8, &p) == zppInvalidArgument);
  CHECK(zppParamGatherForward(NULL, a, b, NULL) == zppInvalidArgument);
  CHECK(zppParamInvalidate(NULL) == zppInvalidArgument);
  CHECK(zppParamDestroy(NULL) == zppSuccess);
  /* An int32 plain parameter is fine (no quantization). */
  CHECK(zppParamCreate(comm, 8, zppInt32, 0, &p) == zppSuccess);
  for (int i = 0; i < 8; i++) ia[i] = rank * 100 + i;
  CHECK(zppParamGatherForward(p, ia, ib, NULL) == zppSuccess);
  CHECK(zppParamGatherBackward(p, ia, ib, NULL) == zppSuccess);
  for (int r = 0; r < n; r++)
    for (int i = 0; i < 8; i++) CHECK(ib[r * 8 + i] == r * 100 + i);
  int valid = 0;
  CHECK(zppParamIsValid(p, &valid) == zppSuccess && valid == 1);
  CHECK(zppParamIsValid(p, NULL) == zppInvalidArgument);
  CHECK(zppParamDestroy(p) == zppSuccess);
  /* Count 0: nothing moves, still counted. */
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  CHECK(zppQwzAllGather(NULL, NULL, 0, zppFloat32, 8, comm, NULL) == zppSuccess);
  CHECK(zppQgzReduceScatter(NULL, NULL, 0, zppFloat32, zppSum, 4, comm, NULL) == zppSuccess);
  zppCommStats_t s;
  REQUIRE(zppCommGetStats(comm, &s) == zppSuccess);
  CHECK(s.calls[zppOpQwZ] == 1 && s.calls[zppOpQgZ] == 1 && s.intraNodeBytes[zppOpQwZ] == 0);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  /* After destroy the handle is refused (the memory is gone: only the
   * magic check of a recycled block could tell, so no call here). */
  return zppTestRankResult();
}

static int caseUneven(int rank, int n, const zppUniqueId* id) {
  zppComm_t comm;
  /* ctest sets ZPP_QGZ_BITS=4, ZPP_COMPRESS_MIN_BYTES=0. */
  REQUIRE(initWith(rank, n, id, NULL, &comm) == zppSuccess);
  const size_t rc = 300;
  float* in = xmalloc(rc * (size_t)n * sizeof(float));
  float* out = xmalloc(rc * sizeof(float));
  for (size_t i = 0; i < rc * (size_t)n; i++) in[i] = (float)(rank + 1) * (float)(i % 7);
  /* Nothing to move (no tensors, or counts of 0): success, counted as qgZ. */
  CHECK_EQ_INT(zppQgzReduceScatterCoalesced(0, NULL, NULL, NULL, zppFloat32, zppSum, 4, comm, NULL),
               zppSuccess);
  CHECK_EQ_INT(zppQgzReduceScatter(NULL, NULL, 0, zppFloat32, zppSum, 4, comm, NULL), zppSuccess);
  /* qgZ explicit, coalesced (a second tensor, avg, in place) and configured:
   * each the plain reduce-scatter, exact. */
  float tri = (float)(n * (n + 1) / 2);
  float* in2 = xmalloc(rc * (size_t)n * sizeof(float));
  for (size_t i = 0; i < rc * (size_t)n; i++) in2[i] = (float)(rank + 1) * (float)(i % 5);
  for (int form = 0; form < 3; form++) {
    memset(out, 0xff, rc * sizeof(float));
    if (form == 0) {
      CHECK_EQ_INT(zppQgzReduceScatter(in, out, rc, zppFloat32, zppSum, 4, comm, NULL), zppSuccess);
    } else if (form == 1) {
      const void* sends[2] = {in, in2};
      void* recvs[2] = {out, in2 + (size_t)rank * rc};
      size_t counts[2] = {rc, rc};
      CHECK_EQ_INT(
          zppQgzReduceScatterCoalesced(2, sends, recvs, counts, zppFloat32, zppAvg, 8, comm, NULL),
          zppSuccess);
      for (size_t i = 0; i < rc; i++) out[i] *= (float)n; /* avg of small integers: exact */
      for (size_t i = 0; i < rc; i++)
        if (in2[(size_t)rank * rc + i] * (float)n != tri * (float)(((size_t)rank * rc + i) % 5)) {
          CHECK_MSG(0, "coalesced qgZ on uneven nodes: tensor 1 wrong at %zu", i);
          break;
        }
    } else {
      CHECK_EQ_INT(zppReduceScatter(in, out, rc, zppFloat32, zppSum, comm, NULL), zppSuccess);
    }
    for (size_t i = 0; i < rc; i++)
      if (out[i] != tri * (float)(((size_t)rank * rc + i) % 7)) {
        CHECK_MSG(0, "qgZ form %d on uneven nodes wrong at %zu", form, i);
        break;
      }
  }
  zppCommStats_t st;
  REQUIRE(zppCommGetStats(comm, &st) == zppSuccess);
  CHECK_MSG(st.qgzPlainFallbacks == 3 && st.calls[zppOpReduceScatter] == 4 && st.calls[zppOpQgZ] == 2,
            "fallbacks %llu, reduce-scatters %llu, qgZ %llu: want 3, 4, 2",
            (unsigned long long)st.qgzPlainFallbacks, (unsigned long long)st.calls[zppOpReduceScatter],
            (unsigned long long)st.calls[zppOpQgZ]);
  free(in2);
  /* qwZ: any world size. */
  char* g = xmalloc(rc * 2 * (size_t)n);
  char* want = xmalloc(rc * 2 * (size_t)n);
  char* shard = xmalloc(rc * 2);
  ztFill(shard, zppBfloat16, rc, 3, rank);
  CHECK(zppQwzAllGather(shard, g, rc, zppBfloat16, 8, comm, NULL) == zppSuccess);
  char* tmp = xmalloc(rc * 2);
  for (int r = 0; r < n; r++) {
    ztFill(tmp, zppBfloat16, rc, 3, r);
    ztQwzExpect(tmp, zppBfloat16, rc, 8, 256, want + (size_t)r * rc * 2);
  }
  CHECK(memcmp(g, want, rc * 2 * (size_t)n) == 0);
  /* hpZ with the node as the group: works on uneven nodes. */
  zppParam_t p;
  REQUIRE(zppParamCreate(comm, rc, zppBfloat16, 8, &p) == zppSuccess);
  char* g2 = xmalloc(rc * 2 * (size_t)n);
  CHECK(zppParamGatherForward(p, shard, g, NULL) == zppSuccess);
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  CHECK(zppParamGatherBackward(p, shard, g2, NULL) == zppSuccess);
  zppCommStats_t s;
  REQUIRE(zppCommGetStats(comm, &s) == zppSuccess);
  CHECK(memcmp(g, g2, rc * 2 * (size_t)n) == 0 && memcmp(g, want, rc * 2 * (size_t)n) == 0);
  /* Across nodes only the handshake's 24-byte summaries, no weights. */
  CHECK(s.interNodeBytes[zppOpHpZ] <= 24 * (uint64_t)n);
  CHECK(zppParamDestroy(p) == zppSuccess);
  free(g);
  free(g2);
  free(want);
  free(shard);
  free(tmp);
  free(in);
  free(out);
  CHECK(zppCommDestroy(comm) == zppSuccess);

  /* An hpZ group size that does not divide every node: loud global fallback. */
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.hpzGroupSize = 2;
  REQUIRE(initWith(rank, n, id, &cfg, &comm) == zppSuccess);
  REQUIRE(zppParamCreate(comm, rc, zppFloat32, 8, &p) == zppSuccess);
  size_t bytes = 1;
  CHECK(zppParamSecondaryBytes(p, &bytes) == zppSuccess && bytes == 0);
  float* f = xmalloc(rc * sizeof(float));
  float* full = xmalloc(rc * sizeof(float) * (size_t)n);
  float* full2 = xmalloc(rc * sizeof(float) * (size_t)n);
  ztFill(f, zppFloat32, rc, 4, rank);
  CHECK(zppParamGatherForward(p, f, full, NULL) == zppSuccess);
  CHECK(zppParamGatherBackward(p, f, full2, NULL) == zppSuccess);
  CHECK(memcmp(full, full2, rc * sizeof(float) * (size_t)n) == 0);
  CHECK(zppParamDestroy(p) == zppSuccess);
  free(f);
  free(full);
  free(full2);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  return zppTestRankResult();
}

/* Every rank must fail (any error), none may return data. */
static void expectAllFail(zppResult_t res, const char* what) {
  CHECK_MSG(res != zppSuccess, "%s: a rank got success", what);
}

/* After expectAllFail: some rank's error names `setting` (the rank that
 * saw the other's message explains the mismatch; the rest see a broken
 * communicator). */
static void expectSomeoneNames(zppComm_t comm, const char* setting, const char* what) {
  const char* err = zppGetLastError(comm);
  int mine = err != NULL && strstr(err, setting) != NULL, any = 0;
  REQUIRE(zppAllReduce(&mine, &any, 1, zppInt32, zppSum, ctl, NULL) == zppSuccess);
  CHECK_MSG(any > 0, "%s: no rank's error names %s (this rank's: %s)", what, setting,
            err ? err : "(none)");
}

/* Tears down a communicator broken on purpose once every rank has returned
 * from its failed call: a rank still telling the others about the error
 * would otherwise connect to a worker already gone, which UCX 1.13's tcp
 * transport answers with an assertion (a crash, not an error). */
static void abortTogether(zppComm_t comm) {
  int one = 1, sum = 0;
  REQUIRE(zppAllReduce(&one, &sum, 1, zppInt32, zppSum, ctl, NULL) == zppSuccess);
  zppCommAbort(comm);
}

static int caseMismatch(int rank, int n, const zppUniqueId* id) {
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 30;
  const size_t count = 2000;
  char* send = xmalloc(count * 2 * (size_t)n);
  char* recv = xmalloc(count * 2 * (size_t)n);
  ztFill(send, zppBfloat16, count * (size_t)n, 1, rank);

  /* Different bits. */
  REQUIRE(initWith(rank, n, id, &cfg, &comm) == zppSuccess);
  expectAllFail(zppQwzAllGather(send, recv, count, zppBfloat16, rank == 0 ? 4 : 8, comm, NULL),
                "qwZ with int4 on rank 0, int8 elsewhere");
  abortTogether(comm);
  REQUIRE(initWith(rank, n, id, &cfg, &comm) == zppSuccess);
  expectAllFail(
      zppQgzReduceScatter(send, recv, count, zppBfloat16, zppSum, rank == n - 1 ? 8 : 4, comm, NULL),
      "qgZ with int8 on the last rank, int4 elsewhere");
  abortTogether(comm);

  /* Different blocks (config). */
  zppConfig_t c2 = cfg;
  if (rank == 1) c2.quantBlock = 128;
  REQUIRE(initWith(rank, n, id, &c2, &comm) == zppSuccess);
  expectAllFail(zppQwzAllGather(send, recv, count, zppBfloat16, 8, comm, NULL),
                "qwZ with block 128 on rank 1");
  abortTogether(comm);

  /* Compression on for one rank only: its zppAllGather is qwZ, the others'
   * plain. */
  zppConfig_t c3 = cfg;
  c3.compressMinBytes = 0;
  if (rank == 0) c3.qwzBits = 8;
  REQUIRE(initWith(rank, n, id, &c3, &comm) == zppSuccess);
  expectAllFail(zppAllGather(send, recv, count, zppBfloat16, comm, NULL),
                "zppAllGather compressed on rank 0 only");
  abortTogether(comm);

  /* Rotation on one rank only (config on rank 1, the environment on rank
   * 2: both routes), for qwZ, qgZ and hpZ's forward gather: the first
   * compressed call fails and names the setting. */
  zppConfig_t c4 = cfg;
  if (rank == 1) c4.quantRotate = 1;
  if (rank == 2) setenv("ZPP_QUANT_ROTATE", "1", 1);
  REQUIRE(initWith(rank, n, id, &c4, &comm) == zppSuccess);
  expectAllFail(zppQwzAllGather(send, recv, count, zppBfloat16, 4, comm, NULL),
                "qwZ rotated on ranks 1 and 2");
  expectSomeoneNames(comm, "ZPP_QUANT_ROTATE", "qwZ rotated on ranks 1 and 2");
  abortTogether(comm);
  REQUIRE(initWith(rank, n, id, &c4, &comm) == zppSuccess);
  expectAllFail(zppQgzReduceScatter(send, recv, count, zppBfloat16, zppSum, 4, comm, NULL),
                "qgZ rotated on ranks 1 and 2");
  expectSomeoneNames(comm, "ZPP_QUANT_ROTATE", "qgZ rotated on ranks 1 and 2");
  abortTogether(comm);
  REQUIRE(initWith(rank, n, id, &c4, &comm) == zppSuccess);
  zppParam_t prm = NULL;
  REQUIRE(zppParamCreate(comm, count, zppBfloat16, 8, &prm) == zppSuccess);
  expectAllFail(zppParamGatherForward(prm, send, recv, NULL), "hpZ rotated on ranks 1 and 2");
  expectSomeoneNames(comm, "ZPP_QUANT_ROTATE", "hpZ rotated on ranks 1 and 2");
  REQUIRE(zppParamDestroy(prm) == zppSuccess);
  abortTogether(comm);
  unsetenv("ZPP_QUANT_ROTATE");

  /* Error feedback on one rank only (the environment): it reduces through
   * its handle, the others without one; the first call fails on every rank
   * and names the setting. On that rank a call without a handle is refused
   * before anything moves. */
  if (rank == 1) setenv("ZPP_QGZ_ERROR_FEEDBACK", "1", 1);
  REQUIRE(initWith(rank, n, id, &cfg, &comm) == zppSuccess);
  zppGrad_t ef = NULL;
  REQUIRE(zppGradCreate(comm, count, zppBfloat16, 2, &ef) == zppSuccess);
  if (rank == 1)
    CHECK(zppQgzReduceScatter(send, recv, count, zppBfloat16, zppSum, 2, comm, NULL) ==
          zppInvalidUsage);
  expectAllFail(rank == 1
                    ? zppQgzReduceScatterEF(send, recv, count, zppBfloat16, zppSum, ef, comm, NULL)
                    : zppQgzReduceScatter(send, recv, count, zppBfloat16, zppSum, 2, comm, NULL),
                "qgZ error feedback on rank 1 only");
  expectSomeoneNames(comm, "ZPP_QGZ_ERROR_FEEDBACK", "qgZ error feedback on rank 1 only");
  REQUIRE(zppGradDestroy(ef) == zppSuccess);
  abortTogether(comm);
  unsetenv("ZPP_QGZ_ERROR_FEEDBACK");
  free(send);
  free(recv);
  return zppTestRankResult();
}

typedef int (*caseFn)(int, int, const zppUniqueId*);

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  /* The control communicator is plain whatever the environment says. */
  zppConfig_t plain = ZPP_CONFIG_INITIALIZER;
  plain.qwzBits = plain.qgzBits = 0;
  if (zppCommInitRankConfig(&ctl, nranks, *id, rank, &plain) != zppSuccess) return 1;
  int rc = ((caseFn)arg)(rank, nranks, id);
  CHECK(zppCommDestroy(ctl) == zppSuccess);
  return rc ? rc : zppTestRankResult();
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s settings|args|uneven|mismatch\n", argv[0]);
    return 2;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.timeoutSec = 180;
  caseFn fn = NULL;
  if (strcmp(argv[1], "settings") == 0) {
    fn = caseSettings;
    o.layout = "1x2";
  } else if (strcmp(argv[1], "args") == 0) {
    fn = caseArgs;
    o.layout = "2x1";
  } else if (strcmp(argv[1], "uneven") == 0) {
    fn = caseUneven;
    o.layout = "2,1";
  } else if (strcmp(argv[1], "mismatch") == 0) {
    fn = caseMismatch;
    o.layout = "2x2";
  } else {
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
  }
  int rc = zppLaunch(&o, body, (void*)fn);
  CHECK_MSG(rc == 0, "ranks failed (launcher result %d)", rc);
  return zppTestExit(argv[0]);
}
