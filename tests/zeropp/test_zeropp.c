/*
 * qwZ, qgZ and hpZ on host buffers, multi-rank:
 *
 *   test_zeropp LAYOUT SUITE     LAYOUT as zpp_launch's ("2x2", "3x2", "1x4")
 *   test_zeropp env SUITE        one rank of a launcher's job (torchrun-style
 *                                environment; emucluster.sh for label netns)
 *
 * SUITE core: qwZ equals the codec's decoded shards byte for byte and is
 *   within the codec bound of the exact gather (fp32/fp16/bf16, int8/int4,
 *   odd counts, several pipeline chunks, in place, on a host stream); qgZ
 *   equals the two-stage computation done here with the codecs byte for byte
 *   and is within its documented bound of the exact sum/average; avg is
 *   exactly sum / world size in fp32; coalesced equals per-tensor; Inf/NaN in
 *   one rank's data shows up as non-finite in the owner's shard.
 * SUITE hpz: the backward gather equals the forward gather and moves no
 *   inter-node byte; invalidation falls back to the global gather and never
 *   returns stale weights; a missed invalidation (disagreeing group, or a
 *   shard written behind our back) is an error, not data.
 * SUITE counters: the bytes qwZ and qgZ send, intra and inter node, exactly
 *   as the packed sizes say, and their ratio to plain 16-bit collectives.
 * SUITE wrap: hundreds of pipeline chunks (tag steps wrap around), and a
 *   bucket of 60 small tensors sharing chunks equals 60 separate calls.
 * SUITE config: plain zppAllGather / zppReduceScatter on a communicator whose
 *   config turns qwZ and qgZ on give what the explicit calls give.
 * SUITE outliers: a huge value, an Inf, a NaN in one element of one rank's
 *   qgZ input or qwZ shard leave the other elements of its block within the
 *   bound of ordinary data (escapes), and garbage in the padding of a
 *   DeepSpeed-style flat reduce-scatter spoils no gradient.
 * SUITE split (run with ZPP_PIPELINE_CHUNK_BYTES=SPLIT_CHUNK_BYTES): qgZ's
 *   inter-node all-to-all shares the chunk among its N - 1 peers; its results
 *   stay exact over many split chunks, and the bytes it sends show that the
 *   split is in effect (each chunk is a segment with its own header).
 * Every suite runs on any placement of ranks on nodes (LAYOUT "2x2/cyclic",
 * "3x2/shuffle:1", ...): expectations follow each rank's node and local rank
 * as the topology gives them, never arithmetic on rank numbers.
 * Runs with ZPP_PIPELINE_CHUNK_BYTES=ZT_CHUNK_BYTES (set by ctest), except
 * SUITE split.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "perf/common/launch.h"
#include "zeropp_testlib.h"
#include "../quant/quant_testlib.h"
#include "quant_kernels/zpp_quant.h"

/* The launcher's layout (NULL under an outside launcher). */
static const char* gLayout;

typedef struct {
  zppComm_t comm;
  int rank, W, N, L, node, lr;
  int* nodeOf;  /* [W] every rank's node, as the topology numbers them */
  int ringNext; /* the next rank of the node-ordered ring (plain rings, qwZ) */
  const char* suite;
  size_t qgzChunkBytes; /* qgZ's pipeline chunk per peer (0: ZT_CHUNK_BYTES) */
} ctx_t;

static const zppDataType_t floatTypes[] = {zppFloat32, zppFloat16, zppBfloat16};

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  REQUIRE(p != NULL);
  return p;
}

/* ---- qwZ ------------------------------------------------------------------- */

/* Every rank's shard and the decoded gather every rank must hold. */
static void qwzExpectAll(const ctx_t* c, zppDataType_t t, size_t count, int bits, int seed,
                         void* want) {
  size_t ts = zppTypeSize(t);
  char* shard = xmalloc(count * ts);
  for (int r = 0; r < c->W; r++) {
    ztFill(shard, t, count, seed, r);
    int bad = ztQwzExpect(shard, t, count, bits, ztBlock(bits), (char*)want + (size_t)r * count * ts);
    CHECK_MSG(bad == 0, "qwZ %s int%d: %d elements outside the codec bound", ztTypeName(t), bits, bad);
  }
  free(shard);
}

static void testQwz(const ctx_t* c, zppDataType_t t, int bits, size_t count, int inPlace, int async,
                    int seed) {
  size_t ts = zppTypeSize(t), all = count * ts * (size_t)c->W;
  char* recv = xmalloc(all);
  char* want = xmalloc(all);
  char* send = inPlace ? recv + (size_t)c->rank * count * ts : xmalloc(count * ts);
  memset(recv, 0x7b, all);
  ztFill(send, t, count, seed, c->rank);
  qwzExpectAll(c, t, count, bits, seed, want);
  zppResult_t res;
  if (async) {
    zppHostStream_t s;
    REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
    res = zppQwzAllGather(send, recv, count, t, bits, c->comm, s);
    /* "Compute" while the gather runs; then wait. */
    volatile double acc = 0;
    for (int i = 0; i < 100000; i++) acc += sqrt((double)i);
    if (res == zppSuccess) res = zppHostStreamSynchronize(s);
    REQUIRE(zppHostStreamDestroy(s) == zppSuccess);
  } else {
    res = zppQwzAllGather(send, recv, count, t, bits, c->comm, NULL);
  }
  CHECK_MSG(res == zppSuccess, "qwZ %s int%d count %zu: %s", ztTypeName(t), bits, count,
            zppGetErrorString(res));
  long d = ztFirstDiff(recv, want, t, count * (size_t)c->W);
  CHECK_MSG(d < 0, "qwZ %s int%d count %zu%s: element %ld (shard %ld) differs from the decoded shards",
            ztTypeName(t), bits, count, inPlace ? " in place" : "", d, d / (long)(count ? count : 1));
  if (!inPlace) free(send);
  free(recv);
  free(want);
}

/* ---- qgZ ------------------------------------------------------------------- */

static void** qgzInputs(const ctx_t* c, zppDataType_t t, size_t rc, int seed) {
  void** in = xmalloc((size_t)c->W * sizeof(void*));
  for (int r = 0; r < c->W; r++) {
    in[r] = xmalloc(rc * (size_t)c->W * zppTypeSize(t));
    ztFill(in[r], t, rc * (size_t)c->W, seed, r);
  }
  return in;
}

static void freeInputs(const ctx_t* c, void** in) {
  for (int r = 0; r < c->W; r++) free(in[r]);
  free(in);
}

/* Checks got (this rank's shard) against the expectation and the bound. */
static void checkQgz(const ctx_t* c, void* const* in, zppDataType_t t, size_t rc, int bits,
                     zppRedOp_t op, const void* got, const char* what) {
  char* want = xmalloc(rc * zppTypeSize(t));
  double* bound = xmalloc(rc * sizeof(double));
  double* target = xmalloc(rc * sizeof(double));
  ztQgzExpect((const void* const*)in, t, rc, c->rank, c->W, c->nodeOf, bits, ztBlock(bits), op,
              c->qgzChunkBytes ? c->qgzChunkBytes : ZT_CHUNK_BYTES, want, bound, target);
  long d = ztFirstDiff(got, want, t, rc);
  CHECK_MSG(d < 0, "%s %s int%d %s rc %zu: element %ld is %g, the codec computation gives %g", what,
            ztTypeName(t), bits, op == zppAvg ? "avg" : "sum", rc, d,
            d >= 0 ? ztGet(got, t, (size_t)d) : 0.0, d >= 0 ? ztGet(want, t, (size_t)d) : 0.0);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < rc; i++) {
    double y = ztGet(got, t, i);
    if (!isfinite(y) && !isfinite(target[i])) continue;
    if (!(fabs(y - target[i]) <= bound[i]) && bad++ == 0) first = i;
  }
  CHECK_MSG(
      bad == 0,
      "%s %s int%d: %zu elements outside the two-stage bound, first %zu: got %g exact %g bound %g",
      what, ztTypeName(t), bits, bad, first, ztGet(got, t, first), target[first], bound[first]);
  free(want);
  free(bound);
  free(target);
}

static void testQgz(const ctx_t* c, zppDataType_t t, int bits, zppRedOp_t op, size_t rc, int inPlace,
                    int async, int seed) {
  size_t ts = zppTypeSize(t);
  void** in = qgzInputs(c, t, rc, seed);
  char* send = xmalloc(rc * ts * (size_t)c->W);
  memcpy(send, in[c->rank], rc * ts * (size_t)c->W);
  char* recv = inPlace ? send + (size_t)c->rank * rc * ts : xmalloc(rc * ts);
  zppResult_t res;
  if (async) {
    zppHostStream_t s;
    REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
    res = zppQgzReduceScatter(send, recv, rc, t, op, bits, c->comm, s);
    if (res == zppSuccess) res = zppHostStreamSynchronize(s);
    REQUIRE(zppHostStreamDestroy(s) == zppSuccess);
  } else {
    res = zppQgzReduceScatter(send, recv, rc, t, op, bits, c->comm, NULL);
  }
  CHECK_MSG(res == zppSuccess, "qgZ %s int%d rc %zu: %s", ztTypeName(t), bits, rc,
            zppGetErrorString(res));
  if (res == zppSuccess)
    checkQgz(c, in, t, rc, bits, op, recv,
             inPlace ? "qgZ in place"
             : async ? "qgZ on a host stream"
                     : "qgZ");
  if (!inPlace) free(recv);
  free(send);
  freeInputs(c, in);
}

/* avg is sum / world size exactly (fp32), not sum / node count. */
static void testAvgIsSumOverWorld(const ctx_t* c, size_t rc) {
  void** in = qgzInputs(c, zppFloat32, rc, 91);
  float* sum = xmalloc(rc * sizeof(float));
  float* avg = xmalloc(rc * sizeof(float));
  CHECK(zppQgzReduceScatter(in[c->rank], sum, rc, zppFloat32, zppSum, 4, c->comm, NULL) == zppSuccess);
  CHECK(zppQgzReduceScatter(in[c->rank], avg, rc, zppFloat32, zppAvg, 4, c->comm, NULL) == zppSuccess);
  size_t bad = 0;
  for (size_t i = 0; i < rc; i++) {
    float q = sum[i] / (float)c->W;
    if (memcmp(&q, &avg[i], sizeof(float)) != 0) bad++;
  }
  CHECK_MSG(bad == 0, "qgZ avg != sum / %d (world size) at %zu of %zu elements", c->W, bad, rc);
  free(sum);
  free(avg);
  freeInputs(c, in);
}

static void testCoalesced(const ctx_t* c, zppDataType_t t, int bits) {
  enum { T = 4 };
  const size_t counts[T] = {300, 0, 1, 2100};
  size_t ts = zppTypeSize(t);
  const void* sends[T];
  void* recvs[T];
  void* singles[T];
  for (int k = 0; k < T; k++) {
    void* s = xmalloc(counts[k] * ts * (size_t)c->W);
    ztFill(s, t, counts[k] * (size_t)c->W, 200 + k, c->rank);
    sends[k] = s;
    recvs[k] = xmalloc(counts[k] * ts);
    singles[k] = xmalloc(counts[k] * ts);
    CHECK(zppQgzReduceScatter(sends[k], singles[k], counts[k], t, zppSum, bits, c->comm, NULL) ==
          zppSuccess);
  }
  CHECK(zppQgzReduceScatterCoalesced(T, sends, recvs, counts, t, zppSum, bits, c->comm, NULL) ==
        zppSuccess);
  for (int k = 0; k < T; k++) {
    CHECK_MSG(memcmp(recvs[k], singles[k], counts[k] * ts) == 0,
              "coalesced tensor %d (%zu elements) differs from its own qgZ call", k, counts[k]);
    free((void*)sends[k]);
    free(recvs[k]);
    free(singles[k]);
  }
}

/* An overflow in one rank's data must reach the owner as non-finite. */
static void testNonFinite(const ctx_t* c, zppDataType_t t) {
  const size_t rc = 700;
  size_t ts = zppTypeSize(t);
  char* send = xmalloc(rc * ts * (size_t)c->W);
  char* recv = xmalloc(rc * ts);
  ztFill(send, t, rc * (size_t)c->W, 31, c->rank);
  /* The last rank: +Inf in rank 0's partition; rank 0: NaN in the last
   * rank's partition. */
  if (c->rank == c->W - 1) ztSet(send, t, 5, INFINITY);
  if (c->rank == 0) ztSet(send, t, (size_t)(c->W - 1) * rc + 7, NAN);
  CHECK(zppQgzReduceScatter(send, recv, rc, t, zppSum, 4, c->comm, NULL) == zppSuccess);
  if (c->rank == 0)
    CHECK_MSG(!isfinite(ztGet(recv, t, 5)), "qgZ hid rank %d's Inf from its owner", c->W - 1);
  if (c->rank == c->W - 1)
    CHECK_MSG(!isfinite(ztGet(recv, t, 7)), "qgZ hid rank 0's NaN from its owner");
  free(recv);
  /* qwZ: every rank sees rank 0's Inf. */
  char* all = xmalloc(rc * ts * (size_t)c->W);
  ztFill(send, t, rc, 32, c->rank);
  if (c->rank == 0) ztSet(send, t, 3, -INFINITY);
  CHECK(zppQwzAllGather(send, all, rc, t, 8, c->comm, NULL) == zppSuccess);
  CHECK_MSG(!isfinite(ztGet(all, t, 3)), "qwZ hid rank 0's -Inf");
  free(all);
  free(send);
}

/* Plain and ZeRO++ calls interleaved while the ranks drift apart (rank 0
 * lags): every call needs its own sequence number across both kinds, or a
 * fast rank's next call looks like a mismatch to a slow one. */
static void testInterleaved(const ctx_t* c) {
  float in[64], out[64 * 8], g[64 * 8];
  for (int i = 0; i < 64; i++) in[i] = (float)(c->rank + i);
  for (int it = 0; it < 30; it++) {
    if (c->rank == 0 && it % 3 == 0) {
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
    CHECK(zppAllReduce(in, out, 64, zppFloat32, zppSum, c->comm, NULL) == zppSuccess);
    CHECK(zppQwzAllGather(in, g, 64, zppFloat32, 8, c->comm, NULL) == zppSuccess);
    CHECK(zppAllGather(in, out, 64, zppFloat32, c->comm, NULL) == zppSuccess);
    CHECK(zppQgzReduceScatter(g, out, 64, zppFloat32, zppSum, 4, c->comm, NULL) == zppSuccess);
  }
}

static void suiteCore(const ctx_t* c) {
  testInterleaved(c);
  static const size_t qwzCounts[] = {1, 333, 2500};
  int seed = 1;
  for (size_t ti = 0; ti < 3; ti++)
    for (int bits = 8; bits >= 4; bits -= 4)
      for (size_t k = 0; k < sizeof(qwzCounts) / sizeof(qwzCounts[0]); k++)
        testQwz(c, floatTypes[ti], bits, qwzCounts[k], 0, 0, seed++);
  testQwz(c, zppBfloat16, 8, 2500, 1, 0, seed++);
  testQwz(c, zppBfloat16, 8, 1000, 0, 1, seed++);

  static const size_t rcs[] = {1, 77, 1100};
  for (size_t ti = 0; ti < 3; ti++)
    for (int bits = 4; bits <= 8; bits += 4)
      for (size_t k = 0; k < sizeof(rcs) / sizeof(rcs[0]); k++)
        testQgz(c, floatTypes[ti], bits, (k + ti) % 2 ? zppAvg : zppSum, rcs[k], 0, 0, seed++);
  testQgz(c, zppBfloat16, 4, zppAvg, 1500, 0, 0, seed++);
  testQgz(c, zppBfloat16, 4, zppSum, 500, 1, 0, seed++);
  testQgz(c, zppFloat16, 8, zppAvg, 900, 0, 1, seed++);
  /* The ternary codec (qgZ's alone): every type, uneven partitions. */
  for (size_t ti = 0; ti < 3; ti++)
    testQgz(c, floatTypes[ti], 2, ti % 2 ? zppAvg : zppSum, ti == 1 ? 77 : 1100, 0, 0, seed++);
  testAvgIsSumOverWorld(c, 1300);
  testCoalesced(c, zppBfloat16, 4);
  testCoalesced(c, zppFloat32, 2);
  testCoalesced(c, zppFloat32, 8);
  testNonFinite(c, zppBfloat16);
  testNonFinite(c, zppFloat16);
}

/* The plain calls on a communicator whose config turns qwZ (int8) and qgZ
 * (int4) on for every size: the same results as the explicit calls, checked
 * against the same codec computations. */
static void suiteConfig(const ctx_t* c) {
  const size_t count = 1234;
  for (size_t ti = 0; ti < 3; ti++) {
    zppDataType_t t = floatTypes[ti];
    size_t ts = zppTypeSize(t);
    char* want = xmalloc(count * ts * (size_t)c->W);
    char* got = xmalloc(count * ts * (size_t)c->W);
    char* shard = xmalloc(count * ts);
    ztFill(shard, t, count, 700 + (int)ti, c->rank);
    qwzExpectAll(c, t, count, 8, 700 + (int)ti, want);
    CHECK(zppAllGather(shard, got, count, t, c->comm, NULL) == zppSuccess);
    CHECK_MSG(ztFirstDiff(got, want, t, count * (size_t)c->W) < 0,
              "zppAllGather %s under qwzBits=8 differs from the decoded shards", ztTypeName(t));
    free(want);
    free(got);
    free(shard);

    void** in = qgzInputs(c, t, count, 710 + (int)ti);
    char* recv = xmalloc(count * ts);
    zppRedOp_t op = ti % 2 ? zppSum : zppAvg;
    CHECK(zppReduceScatter(in[c->rank], recv, count, t, op, c->comm, NULL) == zppSuccess);
    checkQgz(c, in, t, count, 4, op, recv, "zppReduceScatter under qgzBits=4");
    free(recv);
    freeInputs(c, in);
  }
}

/* Many pipeline chunks: tag steps wrap (mod 256) many times over, and a
 * bucket of many small tensors shares chunks. */
static void suiteWrap(const ctx_t* c) {
  testQwz(c, zppFloat32, 8, 300 * 1024 + 5, 0, 0, 501);
  testQgz(c, zppFloat32, 4, zppSum, 140 * 1024 + 3, 0, 0, 502);
  enum { T = 60 };
  size_t counts[T];
  const void* sends[T];
  void* recvs[T];
  void* singles[T];
  for (int k = 0; k < T; k++) {
    counts[k] = (size_t)(k * 37 % 101);
    void* s = xmalloc(counts[k] * 2 * (size_t)c->W);
    ztFill(s, zppBfloat16, counts[k] * (size_t)c->W, 600 + k, c->rank);
    sends[k] = s;
    recvs[k] = xmalloc(counts[k] * 2);
    singles[k] = xmalloc(counts[k] * 2);
    CHECK(zppQgzReduceScatter(sends[k], singles[k], counts[k], zppBfloat16, zppAvg, 8, c->comm, NULL) ==
          zppSuccess);
  }
  CHECK(zppQgzReduceScatterCoalesced(T, sends, recvs, counts, zppBfloat16, zppAvg, 8, c->comm, NULL) ==
        zppSuccess);
  for (int k = 0; k < T; k++) {
    CHECK_MSG(memcmp(recvs[k], singles[k], counts[k] * 2) == 0, "bucket tensor %d differs", k);
    free((void*)sends[k]);
    free(recvs[k]);
    free(singles[k]);
  }
}

/* ---- hpZ ------------------------------------------------------------------- */

static void statsDelta(const ctx_t* c, zppCommStats_t* s) {
  REQUIRE(zppCommGetStats(c->comm, s) == zppSuccess);
  REQUIRE(zppCommResetStats(c->comm) == zppSuccess);
}

static void hpzCase(const ctx_t* c, zppDataType_t t, int bits, size_t count) {
  size_t ts = zppTypeSize(t), all = count * ts * (size_t)c->W;
  char* shard = xmalloc(count * ts);
  char* fwd = xmalloc(all);
  char* bwd = xmalloc(all);
  char* want = xmalloc(all);
  zppParam_t p = NULL;
  REQUIRE(zppParamCreate(c->comm, count, t, bits, &p) == zppSuccess);
  int g = c->L, pos = c->lr;
  size_t per = bits ? ztQwzShardPacked(count, t, bits, ztBlock(bits)) : count * ts;
  size_t held = (size_t)(c->W / g + (pos < c->W % g ? 1 : 0));
  size_t secBytes = 0;
  CHECK(zppParamSecondaryBytes(p, &secBytes) == zppSuccess);
  CHECK_EQ_INT(secBytes, held * per);

  ztFill(shard, t, count, 41, c->rank);
  if (bits) {
    qwzExpectAll(c, t, count, bits, 41, want);
  } else {
    for (int r = 0; r < c->W; r++) ztFill(want + (size_t)r * count * ts, t, count, 41, r);
  }
  zppCommStats_t st;
  statsDelta(c, &st);
  int valid = -1;
  CHECK(zppParamIsValid(p, &valid) == zppSuccess && valid == 0);
  CHECK(zppParamGatherForward(p, shard, fwd, NULL) == zppSuccess);
  CHECK(zppParamIsValid(p, &valid) == zppSuccess && valid == 1);
  CHECK_MSG(ztFirstDiff(fwd, want, t, count * (size_t)c->W) < 0, "hpZ forward != the gathered weights");
  /* The prefetch pattern: start the gather on a host stream, compute, wait. */
  zppHostStream_t hs;
  REQUIRE(zppHostStreamCreate(&hs) == zppSuccess);
  memset(bwd, 0, all);
  CHECK(zppParamGatherForward(p, shard, bwd, hs) == zppSuccess);
  volatile double acc = 0;
  for (int i = 0; i < 20000; i++) acc += sqrt((double)i);
  CHECK(zppHostStreamSynchronize(hs) == zppSuccess);
  CHECK(zppHostStreamDestroy(hs) == zppSuccess);
  CHECK_MSG(memcmp(bwd, fwd, all) == 0, "hpZ forward on a host stream differs");
  statsDelta(c, &st);
  CHECK(zppParamGatherBackward(p, shard, bwd, NULL) == zppSuccess);
  statsDelta(c, &st);
  CHECK_MSG(memcmp(bwd, fwd, all) == 0, "hpZ backward %s int%d != forward", ztTypeName(t), bits);
  /* No weight bytes across nodes: only the handshake's 24-byte summaries,
   * one to each other group (the stale check covers every group's copy). */
  const uint64_t handshakeBytes = 24 * (uint64_t)c->W;
  CHECK_MSG(st.interNodeBytes[zppOpHpZ] <= handshakeBytes, "hpZ backward sent %llu bytes across nodes",
            (unsigned long long)st.interNodeBytes[zppOpHpZ]);
  CHECK_EQ_INT(st.calls[zppOpHpZ], 1);
  if (g > 1) CHECK(st.intraNodeBytes[zppOpHpZ] >= (uint64_t)(g - 1) * secBytes);

  /* Weights change (optimizer step): invalidate, then the backward gather
   * must return the new weights, through the global fallback. */
  ztFill(shard, t, count, 42, c->rank);
  if (bits) {
    qwzExpectAll(c, t, count, bits, 42, want);
  } else {
    for (int r = 0; r < c->W; r++) ztFill(want + (size_t)r * count * ts, t, count, 42, r);
  }
  CHECK(zppParamInvalidate(p) == zppSuccess);
  CHECK(zppParamIsValid(p, &valid) == zppSuccess && valid == 0);
  CHECK(zppParamGatherBackward(p, shard, bwd, NULL) == zppSuccess);
  statsDelta(c, &st);
  CHECK_MSG(ztFirstDiff(bwd, want, t, count * (size_t)c->W) < 0,
            "hpZ backward after invalidation returned stale weights");
  /* It was the global gather: the ring crosses nodes after the last local rank. */
  int nextInter = c->nodeOf[c->ringNext] != c->node;
  CHECK_EQ_INT(st.interNodeBytes[zppOpHpZ] > handshakeBytes, nextInter);
  CHECK(zppParamIsValid(p, &valid) == zppSuccess && valid == 1);
  memset(bwd, 0, all);
  CHECK(zppParamGatherBackward(p, shard, bwd, NULL) == zppSuccess);
  statsDelta(c, &st);
  CHECK_MSG(ztFirstDiff(bwd, want, t, count * (size_t)c->W) < 0, "hpZ backward (refreshed) wrong");
  CHECK(st.interNodeBytes[zppOpHpZ] <= handshakeBytes);

  /* A weight write without zppParamInvalidate, on rank 0 only: detected by
   * every rank, not only by rank 0's group (every group holds a copy of
   * rank 0's shard), and no rank's output is touched. */
  if (c->rank == 0) ztFill(shard, t, count, 43, c->rank);
  memset(bwd, 0x5a, all);
  zppResult_t res = zppParamGatherBackward(p, shard, bwd, NULL);
  CHECK_MSG(res == zppInvalidUsage, "hpZ backward after an unreported write: %s",
            zppGetErrorString(res));
  for (size_t i = 0; i < all; i++)
    if (((unsigned char*)bwd)[i] != 0x5a) {
      CHECK_MSG(0, "hpZ backward that failed wrote its output (byte %zu)", i);
      break;
    }
  ztFill(shard, t, count, 43, c->rank);
  /* The communicator is still in step: a forward gather works. */
  CHECK(zppParamGatherForward(p, shard, fwd, NULL) == zppSuccess);

  if (g > 0) {
    /* Rank 0 alone invalidates: every rank errs, no data moved (with one
     * rank per node, rank 0 fell back to the global gather and timed out
     * with part of its output overwritten while the others succeeded). */
    if (c->rank == 0) CHECK(zppParamInvalidate(p) == zppSuccess);
    memset(bwd, 0x5a, all);
    res = zppParamGatherBackward(p, shard, bwd, NULL);
    CHECK_MSG(res == zppInvalidUsage, "hpZ ranks disagreeing on validity: %s", zppGetErrorString(res));
    CHECK_MSG(((unsigned char*)bwd)[0] == 0x5a && ((unsigned char*)bwd)[all - 1] == 0x5a,
              "hpZ backward that failed wrote its output");
    /* The others catch up: all invalid, one version: global fallback. */
    if (c->rank != 0) CHECK(zppParamInvalidate(p) == zppSuccess);
    CHECK(zppParamGatherBackward(p, shard, bwd, NULL) == zppSuccess);
    if (bits)
      qwzExpectAll(c, t, count, bits, 43, want);
    else
      for (int r = 0; r < c->W; r++) ztFill(want + (size_t)r * count * ts, t, count, 43, r);
    CHECK(ztFirstDiff(bwd, want, t, count * (size_t)c->W) < 0);
  }
  /* Overlapping shard and output: refused. */
  CHECK(zppParamGatherForward(p, fwd, fwd, NULL) == zppInvalidUsage);
  CHECK(zppParamDestroy(p) == zppSuccess);
  free(shard);
  free(fwd);
  free(bwd);
  free(want);
}

static void suiteHpz(const ctx_t* c) {
  hpzCase(c, zppBfloat16, 8, 1500);
  hpzCase(c, zppFloat16, 4, 333);
  hpzCase(c, zppFloat32, 0, 257); /* plain gathers, raw secondary */
}

/* ---- delta parameters (ZPP_PARAM_DELTA) ------------------------------------ */

/* Every rank's weights after `steps` updates: the seed-41 weights plus, per
 * step, 1/64 of fresh weight-like noise, rounded to t each time (an
 * optimizer writing t weights). */
static void deltaWeights(const ctx_t* c, zppDataType_t t, size_t count, int steps, void* x) {
  size_t ts = zppTypeSize(t);
  float* noise = xmalloc(count * sizeof(float));
  for (int r = 0; r < c->W; r++) {
    char* xr = (char*)x + (size_t)r * count * ts;
    ztFill(xr, t, count, 41, r);
    for (int s = 1; s <= steps; s++) {
      ztFill(noise, zppFloat32, count, 100 + s, r);
      for (size_t i = 0; i < count; i++) ztSet(xr, t, i, (float)ztGet(xr, t, i) + noise[i] / 64.0f);
    }
  }
  free(noise);
}

/* The reference after one gather of differences, as qwz_delta.c specifies
 * it: d = x - R (fp32), its qwZ decode d' (every rank's codec, checked
 * against the codec's bound on d), R = round_t(R + d'). */
static void deltaModel(const ctx_t* c, zppDataType_t t, size_t count, int bits, const void* x,
                       void* ref) {
  size_t ts = zppTypeSize(t), n = count * (size_t)c->W;
  float* d = xmalloc(n * sizeof(float));
  float* dq = xmalloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) d[i] = (float)ztGet(x, t, i) - (float)ztGet(ref, t, i);
  for (int r = 0; r < c->W; r++) {
    size_t o = (size_t)r * count;
    int bad = ztQwzExpect(d + o, zppFloat32, count, bits, ztBlock(bits), dq + o);
    CHECK_MSG(bad == 0, "delta qwZ int%d: %d differences outside the codec bound", bits, bad);
  }
  for (size_t i = 0; i < n; i++) ztSet(ref, t, i, (float)ztGet(ref, t, i) + dq[i]);
  (void)ts;
  free(d);
  free(dq);
}

static double rmsDiff(const void* a, const void* b, zppDataType_t t, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) {
    double v = ztGet(a, t, i) - ztGet(b, t, i);
    e += v * v;
  }
  return sqrt(e / (double)(n ? n : 1));
}

/* A delta parameter over several steps: the first gather exact, later
 * ones the model above byte for byte (the same on every rank), the
 * backward gather the reference with no weight bytes across nodes, a
 * dropped reference an exact gather again. lastOfComm: also the rank that
 * alone drops its reference, which fails the gather on every rank as a
 * mismatched call and leaves the communicator broken. */
static void deltaCase(const ctx_t* c, zppDataType_t t, int bits, size_t count, int lastOfComm) {
  const int steps = 6;
  size_t ts = zppTypeSize(t), n = count * (size_t)c->W, all = n * ts;
  char* x = xmalloc(all);
  char* ref = xmalloc(all);
  char* full = xmalloc(all);
  char* bwd = xmalloc(all);
  char* stateless = xmalloc(all);
  zppParam_t p = NULL;
  CHECK(zppParamCreateEx(c->comm, count, t, bits, 7, &p) == zppInvalidArgument);
  REQUIRE(zppParamCreateEx(c->comm, count, t, bits, ZPP_PARAM_DELTA, &p) == zppSuccess);
  size_t held = 0;
  CHECK(zppParamSecondaryBytes(p, &held) == zppSuccess);
  CHECK_EQ_INT(held, all);
  zppCommStats_t st;
  statsDelta(c, &st);
  for (int s = 0; s <= steps; s++) {
    deltaWeights(c, t, count, s, x);
    if (s == 0)
      memcpy(ref, x, all); /* the first gather is exact */
    else
      deltaModel(c, t, count, bits, x, ref);
    CHECK(zppParamGatherForward(p, x + (size_t)c->rank * count * ts, full, NULL) == zppSuccess);
    CHECK_MSG(ztFirstDiff(full, ref, t, n) < 0, "delta %s int%d step %d: element %ld != the model",
              ztTypeName(t), bits, s, ztFirstDiff(full, ref, t, n));
    /* Backward at the same version: the reference, no weights across nodes. */
    statsDelta(c, &st);
    memset(bwd, 0, all);
    CHECK(zppParamGatherBackward(p, x + (size_t)c->rank * count * ts, bwd, NULL) == zppSuccess);
    statsDelta(c, &st);
    CHECK_MSG(memcmp(bwd, full, all) == 0, "delta backward != forward at step %d", s);
    CHECK_MSG(st.interNodeBytes[zppOpHpZ] <= 24 * (uint64_t)c->W,
              "delta backward sent %llu bytes across nodes",
              (unsigned long long)st.interNodeBytes[zppOpHpZ]);
    CHECK(zppParamInvalidate(p) == zppSuccess); /* the optimizer step comes */
  }
  /* What it is for: the gathered weights are far closer to the true ones
   * than a stateless qwZ of them. */
  for (int r = 0; r < c->W; r++)
    (void)ztQwzExpect(x + (size_t)r * count * ts, t, count, bits, ztBlock(bits),
                      stateless + (size_t)r * count * ts);
  double eDelta = rmsDiff(full, x, t, n), eStateless = rmsDiff(stateless, x, t, n);
  CHECK_MSG(eDelta < eStateless / 8, "delta %s int%d: RMS error %g, stateless qwZ %g", ztTypeName(t),
            bits, eDelta, eStateless);
  if (c->rank == 0)
    printf("delta %s int%d: RMS error after %d steps %.3g, stateless qwZ %.3g\n", ztTypeName(t), bits,
           steps, eDelta, eStateless);
  /* A backward gather after a weight write: refreshes through differences. */
  deltaWeights(c, t, count, steps + 1, x);
  deltaModel(c, t, count, bits, x, ref);
  CHECK(zppParamGatherBackward(p, x + (size_t)c->rank * count * ts, bwd, NULL) == zppSuccess);
  CHECK_MSG(ztFirstDiff(bwd, ref, t, n) < 0, "delta backward after invalidation != the model");
  /* Dropped on every rank: the next gather, a backward one here, is exact;
   * then a forward one sends differences of zero, exact too. */
  CHECK(zppParamDropReference(p) == zppSuccess);
  CHECK(zppParamGatherBackward(p, x + (size_t)c->rank * count * ts, full, NULL) == zppSuccess);
  CHECK_MSG(ztFirstDiff(full, x, t, n) < 0,
            "delta %s int%d: the gather after zppParamDropReference differs at element %ld",
            ztTypeName(t), bits, ztFirstDiff(full, x, t, n));
  memset(full, 0, all);
  CHECK(zppParamGatherForward(p, x + (size_t)c->rank * count * ts, full, NULL) == zppSuccess);
  CHECK_MSG(memcmp(full, x, all) == 0, "delta %s int%d: differences of zero changed the weights",
            ztTypeName(t), bits);
  if (lastOfComm && c->W > 1) {
    /* Every rank past the exact gather first: rank 0 finds the mismatch of
     * the next call and fails the communicator, which would also end a
     * rank still finishing this one. Once a rank leaves this all-reduce,
     * every rank has entered it; its own result is not what is tested. */
    int32_t one = 1, sum = 0;
    (void)zppAllReduce(&one, &sum, 1, zppInt32, zppSum, c->comm, NULL);
    if (c->rank == 0) CHECK(zppParamDropReference(p) == zppSuccess);
    zppResult_t res = zppParamGatherForward(p, x + (size_t)c->rank * count * ts, full, NULL);
    CHECK_MSG(res != zppSuccess, "rank %d: delta gather with rank 0 alone dropping succeeded", c->rank);
  }
  (void)zppParamDestroy(p);
  free(x);
  free(ref);
  free(full);
  free(bwd);
  free(stateless);
}

static void suiteDelta(const ctx_t* c) {
  zppParam_t p = NULL;
  CHECK(zppParamCreateEx(c->comm, 64, zppFloat32, 0, ZPP_PARAM_DELTA, &p) == zppInvalidArgument);
  CHECK(zppParamCreate(c->comm, 64, zppFloat32, 8, &p) == zppSuccess);
  CHECK(zppParamDropReference(p) == zppInvalidArgument);
  CHECK(zppParamDestroy(p) == zppSuccess);
  deltaCase(c, zppFloat32, 4, 5000, 0);
  deltaCase(c, zppFloat16, 8, 333, 0);
  deltaCase(c, zppBfloat16, 4, 9000, 1);
}

/* ---- counters -------------------------------------------------------------- */

static uint64_t sumAll(const ctx_t* c, uint64_t v) {
  uint64_t out = 0;
  REQUIRE(zppAllReduce(&v, &out, 1, zppUint64, zppSum, c->comm, NULL) == zppSuccess);
  return out;
}

static void suiteCounters(const ctx_t* c) {
  const zppDataType_t t = zppBfloat16;
  const size_t count = 6000, ts = 2;
  const int nextInter = c->nodeOf[c->ringNext] != c->node;
  char* send = xmalloc(count * ts * (size_t)c->W);
  char* recv = xmalloc(count * ts * (size_t)c->W);
  ztFill(send, t, count * (size_t)c->W, 5, c->rank);
  zppCommStats_t s;
  statsDelta(c, &s);

  /* qwZ int8 against the plain ring all-gather (ZPP_ALGO_ALLGATHER=ring). */
  CHECK(zppAllGather(send, recv, count, t, c->comm, NULL) == zppSuccess);
  statsDelta(c, &s);
  uint64_t plainInter = s.interNodeBytes[zppOpAllGather];
  CHECK_EQ_INT(plainInter, nextInter ? (uint64_t)(c->W - 1) * count * ts : 0);
  CHECK(zppQwzAllGather(send, recv, count, t, 8, c->comm, NULL) == zppSuccess);
  statsDelta(c, &s);
  uint64_t packed = ztQwzShardPacked(count, t, 8, ztBlock(8));
  CHECK_EQ_INT(s.interNodeBytes[zppOpQwZ], nextInter ? (uint64_t)(c->W - 1) * packed : 0);
  CHECK_EQ_INT(s.intraNodeBytes[zppOpQwZ], nextInter ? 0 : (uint64_t)(c->W - 1) * packed);
  CHECK_EQ_INT(s.calls[zppOpQwZ], 1);
  uint64_t qInterAll = sumAll(c, s.interNodeBytes[zppOpQwZ]), pInterAll = sumAll(c, plainInter);
  statsDelta(c, &s);
  if (c->N > 1) {
    double ratio = (double)qInterAll / (double)pInterAll;
    /* Half the bytes, plus one fp32 scale per 256 elements, and per chunk a
     * 16-byte header, a 48-byte escape table and up to 15 + 3 bytes of
     * padding: exactly the packed size's ratio. */
    double want = (double)packed / (double)(count * ts);
    double perChunk = (16.0 + 48.0 + 18.0) / ZT_CHUNK_BYTES;
    CHECK_MSG(fabs(ratio - want) < 1e-12 && ratio > 0.5 && ratio < 0.5 * (1 + 4.0 / 256) + perChunk,
              "qwZ/plain inter-node bytes %.4f, packed ratio %.4f", ratio, want);
    if (c->rank == 0) printf("qwZ int8 inter-node bytes / plain bf16 all-gather: %.4f\n", ratio);
  }

  /* qgZ int4 against the plain ring reduce-scatter (ZPP_ALGO_REDUCESCATTER=ring). */
  CHECK(zppReduceScatter(send, recv, count, t, zppSum, c->comm, NULL) == zppSuccess);
  statsDelta(c, &s);
  plainInter = s.interNodeBytes[zppOpReduceScatter];
  CHECK(zppQgzReduceScatter(send, recv, count, t, zppSum, 4, c->comm, NULL) == zppSuccess);
  statsDelta(c, &s);
  uint64_t run = ztQgzRunBytes(count, t, 4, ztBlock(4));
  CHECK_EQ_INT(s.interNodeBytes[zppOpQgZ], (uint64_t)(c->N - 1) * run);
  CHECK_EQ_INT(s.intraNodeBytes[zppOpQgZ], (uint64_t)(c->L - 1) * (uint64_t)c->N * run);
  qInterAll = sumAll(c, s.interNodeBytes[zppOpQgZ]);
  pInterAll = sumAll(c, plainInter);
  statsDelta(c, &s);
  if (c->N > 1) {
    double ratio = (double)qInterAll / (double)pInterAll;
    /* A quarter (4 bits of 16), plus one scale per 64 elements, headers,
     * escape tables and padding per chunk, times W(N-1) / (N(W-1)) <= 1: the
     * hierarchical all-to-all sends each partition across once per remote
     * node, the ring (W-1)/W of all. */
    double packedRatio = (double)run / (double)(count * ts);
    double want = packedRatio * (double)(c->W * (c->N - 1)) / (double)(c->N * (c->W - 1));
    double perChunk = (16.0 + 48.0 + 18.0) / ZT_CHUNK_BYTES;
    CHECK_MSG(fabs(ratio - want) < 1e-9 && ratio <= packedRatio &&
                  packedRatio < 0.25 * (1 + 8.0 / 64) + perChunk,
              "qgZ/plain inter-node bytes %.4f, expected %.4f", ratio, want);
    if (c->rank == 0) printf("qgZ int4 inter-node bytes / plain bf16 reduce-scatter: %.4f\n", ratio);
  }
  free(send);
  free(recv);
}

/* The pipeline chunk SUITE split runs with: large enough that 64 KiB / (N - 1)
 * stays above the 16 KiB floor (collectives/zeropp.h) on 3 and 4 nodes. */
#define SPLIT_CHUNK_BYTES 65536

static void suiteSplit(const ctx_t* cAll) {
  ctx_t cSplit = *cAll;
  const ctx_t* c = &cSplit;
  /* qgZ's elements per chunk: the pipeline chunk over N - 1 peers, at least
   * 16 KiB, whole escape groups (the rule of zppCollChunkElems, restated). */
  size_t bytes = c->N > 2 ? SPLIT_CHUNK_BYTES / (size_t)(c->N - 1) : SPLIT_CHUNK_BYTES;
  if (bytes < 16384) bytes = 16384;
  cSplit.qgzChunkBytes = bytes;
  const zppDataType_t t = zppBfloat16;
  const int bits = 4, block = ztBlock(4);
  size_t ce = ztChunkElemsFor(bytes, t, block);
  const size_t rc = 5 * ce + 77; /* several split chunks and a short one */

  zppCommStats_t s;
  statsDelta(c, &s);
  testQgz(c, t, bits, zppSum, rc, 0, 0, 801);
  statsDelta(c, &s);
  uint64_t run = ztPackedInChunks(rc, bits, block, ce);
  CHECK_EQ_INT(s.interNodeBytes[zppOpQgZ], (uint64_t)(c->N - 1) * run);
  if (c->N > 2) /* the unsplit cut would send fewer headers */
    CHECK(run != ztPackedInChunks(rc, bits, block, ztChunkElemsFor(SPLIT_CHUNK_BYTES, t, block)));

  testQgz(c, zppFloat32, 8, zppAvg, 3 * ce + 5, 0, 0, 802);
  testQgz(c, t, bits, zppAvg, rc, 1, 0, 803);
  testQgz(c, zppFloat16, 4, zppSum, rc, 0, 1, 804);
  testCoalesced(c, t, bits);
}

/* ---- outliers: one element never spoils its block ----------------------------- */

/* What ordinary data's two-stage bound stays under: ztFill's values are at
 * most 2^4 * 4 = 64, so sums over W <= 8 ranks stay below 512 and a block's
 * scale below 512 / 7. A block scaled to a 1e30 outlier would give ~1e29. */
#define ORDINARY_BOUND 1e3 /* also above the DeepSpeed case's Gaussian gradients'; int2: 7x */

static const float kOutliers[] = {1e30f, INFINITY, NAN, -3e38f};

/* qgZ with one outlier in one element of one rank's input (each kind in its
 * own call, in every rank's partition in turn): the result equals the codec
 * computation, every other element (its block-mates included) is within
 * the two-stage bound, and that bound is ordinary data's, not the
 * outlier's; the escapes are counted. */
static void testQgzOutlier(const ctx_t* c, zppDataType_t t, int bits) {
  const size_t rc = 1000;
  size_t ts = zppTypeSize(t);
  for (size_t o = 0; o < sizeof kOutliers / sizeof kOutliers[0]; o++) {
    if (t == zppFloat16 && isfinite(kOutliers[o])) continue; /* beyond fp16: Inf already */
    void** in = qgzInputs(c, t, rc, 60 + (int)o);
    int src = (int)o % c->W;
    size_t at = 37; /* inside a block, in every partition */
    for (int p = 0; p < c->W; p++) ztSet(in[src], t, (size_t)p * rc + at, kOutliers[o]);
    char* recv = xmalloc(rc * ts);
    zppCommStats_t s;
    statsDelta(c, &s);
    CHECK(zppQgzReduceScatter(in[c->rank], recv, rc, t, zppSum, bits, c->comm, NULL) == zppSuccess);
    statsDelta(c, &s);
    char what[64];
    snprintf(what, sizeof what, "qgZ outlier %g", (double)kOutliers[o]);
    checkQgz(c, in, t, rc, bits, zppSum, recv, what);
    char* want = xmalloc(rc * ts);
    double* bound = xmalloc(rc * sizeof(double));
    double* target = xmalloc(rc * sizeof(double));
    ztQgzExpect((const void* const*)in, t, rc, c->rank, c->W, c->nodeOf, bits, ztBlock(bits), zppSum,
                ZT_CHUNK_BYTES, want, bound, target);
    /* int2's levels are 7 times int4's: its ordinary bound too. */
    const double ordinary = bits == 2 ? 7 * ORDINARY_BOUND : ORDINARY_BOUND;
    size_t loose = 0;
    for (size_t i = 0; i < rc; i++)
      if (i != at && !(bound[i] < ordinary)) loose++;
    CHECK_MSG(loose == 0, "%s %s int%d: %zu elements beside the outlier have a bound as loose as it",
              what, ztTypeName(t), bits, loose);
    /* Its own element: non-finite stays so (NaN: the codecs mark Inf and
     * NaN alike; a finite one is within the bound, checked above). A
     * finite outlier escapes, and is counted. */
    double y = ztGet(recv, t, at);
    if (!isfinite(kOutliers[o])) CHECK_MSG(isnan(y), "%s: came back as %g", what, y);
    if (isfinite(kOutliers[o]))
      CHECK_MSG(sumAll(c, s.quantEscapes) > 0 && sumAll(c, s.quantEscapeOverflows) == 0,
                "%s: escape not counted", what);
    free(want);
    free(bound);
    free(target);
    free(recv);
    freeInputs(c, in);
  }
}

/* Under rotation: an upper bound of the scale of block [b0, b0 + B) with
 * element `at` escaped (+0): max |H D x'| / Q computed here in double, with
 * room for the fp32 stages' rounding (zpp_quant.h, "Rotation"). */
static double rotatedFitScale(const void* shard, zppDataType_t t, size_t b0, size_t B, size_t at,
                              int bits) {
  float* w = xmalloc(B * sizeof(float));
  for (size_t i = 0; i < B; i++) {
    float x = b0 + i == at ? 0.0f : (float)ztGet(shard, t, b0 + i);
    w[i] = zppQuantRotSignMask(i) ? -x : x;
  }
  zppQuantRotHadamardRef(w, B);
  double m = 0;
  for (size_t i = 0; i < B; i++)
    if (fabs((double)w[i]) > m) m = fabs((double)w[i]);
  free(w);
  return m / (bits == 8 ? 127 : 7) * (1 + 0x1p-20);
}

/* The rotated bound of zpp_quant.h for scale s and block maximum M, decoded
 * to t. */
static double rotatedBound(double x, double s, double M, int B, int bits, zppDataType_t t) {
  double Q = bits == 8 ? 127.0 : 7.0, L = log2((double)B);
  double E = s / 2 + 0x1p-21 * Q * s + 0x1p-22 * B * M + 0x1p-23 * L * Q * s + (Q + 3) * 0x1p-150;
  double uT = ztRoundRel(t);
  double mT = ztRoundAbs(t);
  return E + uT * (fabs(x) + E) + mT;
}

/* qwZ with one outlier in one rank's shard: every rank decodes it exactly
 * (Inf and NaN as NaN), and the other elements of its block within the
 * codec's bound of a scale fitted to them. */
static void testQwzOutlier(const ctx_t* c, zppDataType_t t, int bits) {
  const size_t count = 1000, at = 300;
  size_t ts = zppTypeSize(t);
  for (size_t o = 0; o < sizeof kOutliers / sizeof kOutliers[0]; o++) {
    if (t == zppFloat16 && isfinite(kOutliers[o])) continue;
    int src = (int)(o + 1) % c->W;
    char* shard = xmalloc(count * ts);
    char* all = xmalloc(count * ts * (size_t)c->W);
    char* want = xmalloc(count * ts * (size_t)c->W);
    double stored = 0; /* the outlier as the shard's type holds it */
    for (int r = 0; r < c->W; r++) {
      ztFill(shard, t, count, 70 + (int)o, r);
      if (r == src) {
        ztSet(shard, t, at, kOutliers[o]);
        stored = ztGet(shard, t, at);
      }
      char* w = want + (size_t)r * count * ts;
      CHECK(ztQwzExpect(shard, t, count, bits, ztBlock(bits), w) == 0);
      /* Block-mates within the bound of a scale fitted to them: the
       * outlier replaced by 0 and the rest of the block quantized alone. */
      if (r == src) {
        size_t b0 = at / (size_t)ztBlock(bits) * (size_t)ztBlock(bits);
        double amax = 0;
        for (size_t i = b0; i < b0 + (size_t)ztBlock(bits) && i < count; i++)
          if (i != at && fabs(ztGet(shard, t, i)) > amax) amax = fabs(ztGet(shard, t, i));
        double sFit = amax / (bits == 8 ? 127 : 7) * (1 + 0x1p-23);
        size_t B = (size_t)ztBlock(bits);
        int rotated = ztQuantFlags() && isfinite(kOutliers[o]) && b0 + B <= count;
        if (rotated) sFit = rotatedFitScale(shard, t, b0, B, at, bits);
        for (size_t i = b0; i < b0 + B && i < count; i++) {
          double x = ztGet(shard, t, i);
          double bnd =
              rotated ? rotatedBound(x, sFit, amax, (int)B, bits, t) : qtBound(x, sFit, bits, t);
          if (i != at)
            CHECK_MSG(fabs(ztGet(w, t, i) - x) <= bnd,
                      "qwZ outlier %g: element %zu of its block outside the fitted bound",
                      (double)kOutliers[o], i);
        }
      }
      if (r == c->rank) memcpy(all + (size_t)r * count * ts, shard, count * ts);
    }
    char* mine = xmalloc(count * ts);
    memcpy(mine, all + (size_t)c->rank * count * ts, count * ts);
    CHECK(zppQwzAllGather(mine, all, count, t, bits, c->comm, NULL) == zppSuccess);
    long d = ztFirstDiff(all, want, t, count * (size_t)c->W);
    CHECK_MSG(d < 0, "qwZ outlier %g %s int%d: element %ld differs from the codec computation",
              (double)kOutliers[o], ztTypeName(t), bits, d);
    double y = ztGet(all, t, (size_t)src * count + at);
    CHECK_MSG(!isfinite(stored) ? isnan(y) : y == stored, "qwZ outlier %g came back as %g",
              (double)kOutliers[o], y);
    free(mine);
    free(shard);
    free(all);
    free(want);
  }
}

/* One call's escape counts, summed over the ranks, against the spec's
 * (each rank's share of the model). */
static void checkEscapeCounts(const ctx_t* c, const zppCommStats_t* s, uint64_t wantEsc,
                              uint64_t wantOvf, const char* what) {
  uint64_t esc = sumAll(c, s->quantEscapes), ovf = sumAll(c, s->quantEscapeOverflows);
  uint64_t we = sumAll(c, wantEsc), wo = sumAll(c, wantOvf);
  CHECK_MSG(esc == we && ovf == wo,
            "%s: %llu escapes and %llu overflowing blocks counted, the spec says %llu and %llu", what,
            (unsigned long long)esc, (unsigned long long)ovf, (unsigned long long)we,
            (unsigned long long)wo);
}

/* DeepSpeed's ZeRO-3 reduce-scatter (reduce_scatter_coalesced): every
 * tensor is cut into W chunks of ceil(numel / W), the short chunks padded
 * with torch.empty (garbage), all laid out rank by rank in one flat buffer
 * that is reduce-scattered. Here the padding holds what uninitialized
 * memory held in the runs that found the problem (7.49e25, 5.8e35, NaN,
 * Inf, denormal junk): the real elements of every rank's result stay within
 * the two-stage bound of ordinary data. */
static void testDeepSpeedPadding(const ctx_t* c, zppDataType_t t) {
  const size_t numels[] = {4099, 1001, 8193, 3, 2050, 777, 6151};
  enum { T = sizeof numels / sizeof numels[0] };
  const float garbage[] = {7.49e25f, 5.8e35f, NAN, -INFINITY, 1.4e-42f, -2.2e30f, 3.3e18f};
  size_t chunk[T], rc = 0;
  for (int k = 0; k < T; k++) {
    chunk[k] = (numels[k] + (size_t)c->W - 1) / (size_t)c->W;
    rc += chunk[k];
  }
  size_t ts = zppTypeSize(t);
  void** in = xmalloc((size_t)c->W * sizeof(void*));
  char* real = xmalloc(rc * (size_t)c->W); /* 1 where the flat element is a gradient */
  for (int r = 0; r < c->W; r++) {
    /* Gradients: Gaussian, each tensor its own scale (as a layer's are). */
    in[r] = xmalloc(rc * (size_t)c->W * ts);
    zppTestRng_t rng;
    zppTestRngSeed(&rng, 9000u + (uint64_t)r);
    size_t pos = 0;
    int g = r;
    for (int p = 0; p < c->W; p++)
      for (int k = 0; k < T; k++) {
        size_t lo = (size_t)p * chunk[k];
        size_t have = lo >= numels[k] ? 0 : numels[k] - lo < chunk[k] ? numels[k] - lo : chunk[k];
        double sigma = ldexp(1.0, -3 - 2 * k);
        for (size_t i = 0; i < chunk[k]; i++) {
          real[pos + i] = i < have;
          ztSet(in[r], t, pos + i,
                i < have ? (float)(zppTestRngNormal(&rng) * sigma) : garbage[g++ % 7]);
        }
        pos += chunk[k];
      }
  }
  char* recv = xmalloc(rc * ts);
  zppCommStats_t s;
  statsDelta(c, &s);
  CHECK(zppQgzReduceScatter(in[c->rank], recv, rc, t, zppAvg, 4, c->comm, NULL) == zppSuccess);
  statsDelta(c, &s);
  char* want = xmalloc(rc * ts);
  double* bound = xmalloc(rc * sizeof(double));
  double* target = xmalloc(rc * sizeof(double));
  ztQgzExpect((const void* const*)in, t, rc, c->rank, c->W, c->nodeOf, 4, ztBlock(4), zppAvg,
              ZT_CHUNK_BYTES, want, bound, target);
  long d = ztFirstDiff(recv, want, t, rc);
  CHECK_MSG(d < 0, "DeepSpeed padding %s: element %ld differs from the codec computation",
            ztTypeName(t), d);
  /* Where the padding of several tensors shares an escape group past its 8
   * slots, the garbage stays in its block (nothing is saturated), and that
   * block's gradients keep only the bound of the garbage's scale: those,
   * and only those, may be loose; the plain codec's model says which. */
  const int plain = ztQuantFlags() == 0;
  char* overflowed = xmalloc(rc + 1);
  uint64_t wantEsc = 0, wantOvf = 0;
  if (plain) /* the model follows the plain codec's second stage only */
    ztQgzEscapeModel((const void* const*)in, t, rc, c->rank, c->W, c->nodeOf, 4, ztBlock(4),
                     ZT_CHUNK_BYTES, &wantEsc, &wantOvf, overflowed);
  size_t bad = 0, loose = 0, realCount = 0;
  for (size_t i = 0; i < rc; i++) {
    if (!real[(size_t)c->rank * rc + i]) continue;
    realCount++;
    double y = ztGet(recv, t, i);
    int within = fabs(y - target[i]) <= bound[i];
    int ordinary = bound[i] < ORDINARY_BOUND;
    loose += within && !ordinary;
    if ((!within || (!ordinary && plain && !overflowed[i])) && bad++ < 3)
      fprintf(stderr, "rank %d: DeepSpeed padding: gradient %zu: %g, exact %g, bound %g\n", c->rank, i,
              y, target[i], bound[i]);
  }
  CHECK_MSG(bad == 0, "DeepSpeed padding %s: %zu of %zu gradients outside their bound or spoiled",
            ztTypeName(t), bad, realCount);
  uint64_t escapes = sumAll(c, s.quantEscapes), overflows = sumAll(c, s.quantEscapeOverflows);
  uint64_t looseAll = sumAll(c, loose);
  CHECK(escapes > 0);
  CHECK_MSG(looseAll == 0 || overflows > 0, "DeepSpeed padding %s: %llu loose gradients, no overflow",
            ztTypeName(t), (unsigned long long)looseAll);
  if (plain) checkEscapeCounts(c, &s, wantEsc, wantOvf, "DeepSpeed padding");
  if (c->rank == 0)
    printf("DeepSpeed padding %s: %llu escapes, %llu blocks over their slots, %llu gradients there\n",
           ztTypeName(t), (unsigned long long)escapes, (unsigned long long)overflows,
           (unsigned long long)looseAll);
  free(overflowed);
  free(want);
  free(bound);
  free(target);
  free(recv);
  free(real);
  freeInputs(c, in);
}

/* Real data whose outliers overflow the escape tables (issue 43): in every
 * block 1 to 4 spikes 2^ratio above Gaussian data (quant_testlib's
 * qtFillSpikes), seeded by rank, ratio and salt. */
static void fillSpiky(void* buf, zppDataType_t t, size_t n, int bits, int ratio, int rank, int salt) {
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 4300u + 1000u * (uint64_t)salt + 50u * (uint64_t)ratio + (uint64_t)rank);
  qtFillSpikes(buf, t, n, ztBlock(bits), ratio, &rng);
}

/* qwZ, hpZ's forward and backward gathers and qgZ on spiky data: the
 * spikes that find no slot stay in their blocks (nothing is saturated), so
 * the results are byte for byte the codec computation with every element
 * within its documented bound, none excepted; and the escape counts are
 * what the spec predicts (qgZ: on the plain codec, whose second stage's
 * selection the model follows). */
static void testSpikes(const ctx_t* c, zppDataType_t t, int bits, int ratio) {
  const size_t count = 2 * 4096 + 333, rc = 4096 + 777, ts = zppTypeSize(t);
  const size_t all = count * ts * (size_t)c->W;
  char what[64];
  snprintf(what, sizeof what, "spikes 2^%d %s int%d", ratio, ztTypeName(t), bits);
  char* mine = xmalloc(count * ts);
  char* shard = xmalloc(count * ts);
  char* want = xmalloc(all);
  char* got = xmalloc(all);
  char* bwd = xmalloc(all);
  uint64_t wantEsc = 0, wantOvf = 0;
  for (int r = 0; r < c->W; r++) {
    fillSpiky(shard, t, count, bits, ratio, r, 1);
    CHECK_MSG(ztQwzExpect(shard, t, count, bits, ztBlock(bits), want + (size_t)r * count * ts) == 0,
              "%s: the codec's decode of shard %d is outside its bound", what, r);
    if (r == c->rank) {
      memcpy(mine, shard, count * ts);
      ztQwzEscapeModel(shard, t, count, bits, ztBlock(bits), &wantEsc, &wantOvf);
    }
  }
  zppCommStats_t s;
  statsDelta(c, &s);
  CHECK(zppQwzAllGather(mine, got, count, t, bits, c->comm, NULL) == zppSuccess);
  statsDelta(c, &s);
  CHECK_MSG(ztFirstDiff(got, want, t, count * (size_t)c->W) < 0, "%s: qwZ differs", what);
  checkEscapeCounts(c, &s, wantEsc, wantOvf, what);
  zppParam_t p = NULL;
  REQUIRE(zppParamCreate(c->comm, count, t, bits, &p) == zppSuccess);
  CHECK(zppParamGatherForward(p, mine, got, NULL) == zppSuccess);
  CHECK(zppParamGatherBackward(p, mine, bwd, NULL) == zppSuccess);
  CHECK_MSG(ztFirstDiff(got, want, t, count * (size_t)c->W) < 0 &&
                ztFirstDiff(bwd, want, t, count * (size_t)c->W) < 0,
            "%s: hpZ's gathers differ", what);
  CHECK(zppParamDestroy(p) == zppSuccess);

  void** in = xmalloc((size_t)c->W * sizeof(void*));
  for (int r = 0; r < c->W; r++) {
    in[r] = xmalloc(rc * (size_t)c->W * ts);
    fillSpiky(in[r], t, rc * (size_t)c->W, bits, ratio, r, 2);
  }
  char* recv = xmalloc(rc * ts);
  statsDelta(c, &s);
  CHECK(zppQgzReduceScatter(in[c->rank], recv, rc, t, zppSum, bits, c->comm, NULL) == zppSuccess);
  statsDelta(c, &s);
  checkQgz(c, in, t, rc, bits, zppSum, recv, what);
  if (ztQuantFlags() == 0) {
    ztQgzEscapeModel((const void* const*)in, t, rc, c->rank, c->W, c->nodeOf, bits, ztBlock(bits),
                     ZT_CHUNK_BYTES, &wantEsc, &wantOvf, NULL);
    checkEscapeCounts(c, &s, wantEsc, wantOvf, what);
  }
  /* At 2^8 the spikes are candidates of int4 blocks only (K = 5; int8's
   * K = 8 puts them near the rest's largest); from 2^16 on, of both. */
  if (ratio >= 16 || bits == 4)
    CHECK_MSG(sumAll(c, s.quantEscapeOverflows) > 0, "%s: no table overflowed", what);
  free(recv);
  freeInputs(c, in);
  free(mine);
  free(shard);
  free(want);
  free(got);
  free(bwd);
}

/* A flat gradient buffer (issue 43): tensors whose scales differ by 2^20
 * laid end to end, so that blocks, escape groups and partitions cut them at
 * odd offsets, reduce-scattered through qgZ: byte for byte the codec
 * computation, every element within its two-stage bound. */
static void testFlatScales(const ctx_t* c, zppDataType_t t, int bits) {
  const size_t numels[] = {1237, 3001, 517, 4099, 2050, 65, 777, 1, 333};
  enum { T = sizeof numels / sizeof numels[0] };
  size_t total = 0;
  for (int k = 0; k < T; k++) total += numels[k];
  const size_t rc = (total + (size_t)c->W - 1) / (size_t)c->W, ts = zppTypeSize(t);
  void** in = xmalloc((size_t)c->W * sizeof(void*));
  for (int r = 0; r < c->W; r++) {
    in[r] = xmalloc(rc * (size_t)c->W * ts);
    zppTestRng_t rng;
    zppTestRngSeed(&rng, 4400u + (uint64_t)r);
    size_t pos = 0;
    for (int k = 0; k < T; k++)
      for (size_t i = 0; i < numels[k]; i++)
        ztSet(in[r], t, pos++, (float)(zppTestRngNormal(&rng) * ((k & 1) ? 0x1p-20 : 1.0)));
    for (; pos < rc * (size_t)c->W; pos++) ztSet(in[r], t, pos, 0.0f); /* the caller's padding */
  }
  char* recv = xmalloc(rc * ts);
  CHECK(zppQgzReduceScatter(in[c->rank], recv, rc, t, zppAvg, bits, c->comm, NULL) == zppSuccess);
  char what[64];
  snprintf(what, sizeof what, "flat buffer, scales 2^20 apart");
  checkQgz(c, in, t, rc, bits, zppAvg, recv, what);
  free(recv);
  freeInputs(c, in);
}

static void suiteOutliers(const ctx_t* c) {
  for (size_t ti = 0; ti < 3; ti++) {
    for (int bits = 4; bits <= 8; bits += 4) {
      testQgzOutlier(c, floatTypes[ti], bits);
      testQwzOutlier(c, floatTypes[ti], bits);
    }
    testQgzOutlier(c, floatTypes[ti], 2);
  }
  testDeepSpeedPadding(c, zppFloat32);
  testDeepSpeedPadding(c, zppBfloat16);
  static const int ratios[] = {8, 16, 17, 24, 40};
  for (int bits = 4; bits <= 8; bits += 4) {
    for (size_t ri = 0; ri < sizeof ratios / sizeof ratios[0]; ri++) {
      testSpikes(c, zppFloat32, bits, ratios[ri]);
      if (ratios[ri] <= 17) testSpikes(c, zppFloat16, bits, ratios[ri]); /* sums within fp16 */
    }
    testSpikes(c, zppBfloat16, bits, 40);
    testFlatScales(c, zppFloat32, bits);
    testFlatScales(c, zppBfloat16, bits);
  }
}

/* ---- rotation against plain: whole calls (suite "rotation") ----------------- */

/* The three kinds of data: Gaussian, Student's t with 3 degrees of
 * freedom, Gaussian with one element in 64 at 100x. */
enum { EK_GAUSS, EK_T3, EK_SPIKES, EK_N };
static const char* const kErrKind[EK_N] = {"Gaussian", "Student t(3)", "Gaussian + 1/64 at x100"};

static void errFill(float* x, size_t n, int kind, int rank) {
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 4242u + 977u * (uint64_t)kind + 31u * (uint64_t)rank);
  for (size_t i = 0; i < n; i++) {
    double v = zppTestRngNormal(&rng);
    if (kind == EK_T3) {
      double c = 0;
      for (int k = 0; k < 3; k++) {
        double g = zppTestRngNormal(&rng);
        c += g * g;
      }
      v = v / sqrt(c / 3);
    }
    if (kind == EK_SPIKES && zppTestRngNext(&rng) % 64 == 0) v *= 100;
    x[i] = (float)v;
  }
}

typedef struct {
  double rms;   /* RMS error / RMS of the exact values */
  double worst; /* largest |error| / the largest |exact| of its block */
} errStat_t;

/* qwZ (zppAllGather under qwzBits) of fp32 shards of n elements: every rank
 * knows every shard (seeded), so every rank measures the whole result. */
static errStat_t measureQwz(zppComm_t comm, int W, int rank, int kind, int bits, size_t n) {
  float* shard = xmalloc(n * sizeof(float));
  float* out = xmalloc(n * (size_t)W * sizeof(float));
  float* x = xmalloc(n * sizeof(float));
  errFill(shard, n, kind, rank);
  REQUIRE(zppQwzAllGather(shard, out, n, zppFloat32, bits, comm, NULL) == zppSuccess);
  const size_t B = (size_t)ztBlock(bits);
  double se = 0, sx = 0, worst = 0;
  for (int r = 0; r < W; r++) {
    errFill(x, n, kind, r);
    for (size_t b0 = 0; b0 < n; b0 += B) {
      double m = 0;
      for (size_t i = b0; i < b0 + B && i < n; i++) m = fmax(m, fabs((double)x[i]));
      for (size_t i = b0; i < b0 + B && i < n; i++) {
        double e = (double)out[(size_t)r * n + i] - (double)x[i];
        se += e * e;
        sx += (double)x[i] * x[i];
        if (m > 0) worst = fmax(worst, fabs(e) / m);
      }
    }
  }
  free(shard);
  free(out);
  free(x);
  errStat_t st = {sqrt(se / sx), worst};
  return st;
}

/* qgZ sum of fp32 inputs of W * rc elements: each rank measures its own
 * partition against the exact sum, then the ranks combine. */
static errStat_t measureQgz(zppComm_t comm, zppComm_t plain, int W, int rank, int kind, int bits,
                            size_t rc) {
  float* in = xmalloc(rc * (size_t)W * sizeof(float));
  float* out = xmalloc(rc * sizeof(float));
  double* exact = calloc(rc, sizeof(double));
  REQUIRE(exact != NULL);
  errFill(in, rc * (size_t)W, kind, rank);
  REQUIRE(zppQgzReduceScatter(in, out, rc, zppFloat32, zppSum, bits, comm, NULL) == zppSuccess);
  for (int r = 0; r < W; r++) {
    errFill(in, rc * (size_t)W, kind, r);
    for (size_t i = 0; i < rc; i++) exact[i] += (double)in[(size_t)rank * rc + i];
  }
  const size_t B = (size_t)ztBlock(bits);
  double v[2] = {0, 0}, worst = 0, tot[2];
  for (size_t b0 = 0; b0 < rc; b0 += B) {
    double m = 0;
    for (size_t i = b0; i < b0 + B && i < rc; i++) m = fmax(m, fabs(exact[i]));
    for (size_t i = b0; i < b0 + B && i < rc; i++) {
      double e = (double)out[i] - exact[i];
      v[0] += e * e;
      v[1] += exact[i] * exact[i];
      if (m > 0) worst = fmax(worst, fabs(e) / m);
    }
  }
  double w = 0;
  REQUIRE(zppAllReduce(v, tot, 2, zppFloat64, zppSum, plain, NULL) == zppSuccess);
  REQUIRE(zppAllReduce(&worst, &w, 1, zppFloat64, zppMax, plain, NULL) == zppSuccess);
  free(in);
  free(out);
  free(exact);
  errStat_t st = {sqrt(tot[0] / tot[1]), w};
  return st;
}

/* Whole qwZ and qgZ calls, plain and rotated communicators side by side, on
 * the three kinds of data, int8 and int4: prints the table (docs/codecs.md)
 * and checks what rotation is for: on heavy tails (t(3)) int4's RMS error
 * goes down, for qwZ and for qgZ's two stages. */
static void suiteRotation(zppComm_t plain, zppComm_t rotated, int rank, int W) {
  const size_t n = 16384;
  if (rank == 0)
    printf(
        "| call | bits | data | rel. RMS plain | rel. RMS rotated | worst / block max, plain | "
        "worst / block max, rotated |\n|---|---|---|---|---|---|---|\n");
  for (int call = 0; call < 2; call++)
    for (int bits = 8; bits >= 4; bits -= 4)
      for (int kind = 0; kind < EK_N; kind++) {
        errStat_t p, r;
        if (call == 0) {
          p = measureQwz(plain, W, rank, kind, bits, n);
          r = measureQwz(rotated, W, rank, kind, bits, n);
        } else {
          p = measureQgz(plain, plain, W, rank, kind, bits, n);
          r = measureQgz(rotated, plain, W, rank, kind, bits, n);
        }
        if (rank == 0)
          printf("| %s | int%d | %s | %.3e | %.3e | %.3e | %.3e |\n", call ? "qgZ sum" : "qwZ", bits,
                 kErrKind[kind], p.rms, r.rms, p.worst, r.worst);
        if (bits == 4 && kind == EK_T3)
          CHECK_MSG(r.rms < p.rms, "%s int4 t(3): rotated RMS %g not below plain %g",
                    call ? "qgZ" : "qwZ", r.rms, p.rms);
      }
}

/* ---- launch ---------------------------------------------------------------- */

static void runSuite(zppComm_t comm, const char* suite) {
  ctx_t c = {.comm = comm, .suite = suite};
  REQUIRE(zppCommUserRank(comm, &c.rank) == zppSuccess);
  REQUIRE(zppCommCount(comm, &c.W) == zppSuccess);
  zppTopology_t topo;
  REQUIRE(zppCommTopology(comm, &topo) == zppSuccess);
  c.N = topo.nNodes;
  c.L = topo.localSize;
  c.node = topo.node;
  c.lr = topo.localRank;
  /* Placement is the layout's business (blocks, in turn, shuffled): the
   * expectations follow every rank's node as the library sees it. */
  c.nodeOf = xmalloc((size_t)c.W * sizeof(int));
  int32_t mine = c.node;
  REQUIRE(zppAllGather(&mine, c.nodeOf, 1, zppInt32, comm, NULL) == zppSuccess);
  if (gLayout != NULL) {
    /* The nodes the library sees are the layout's, renumbered by their
     * lowest rank: the placement under test really is the one asked for. */
    int want[ZPP_LAUNCH_MAX_RANKS], renum[ZPP_LAUNCH_MAX_RANKS], next = 0;
    REQUIRE(zppLaunchParseLayout(gLayout, want, ZPP_LAUNCH_MAX_RANKS) == c.W);
    for (int r = 0; r < c.W; r++) renum[r] = -1;
    for (int r = 0; r < c.W; r++) {
      if (renum[want[r]] < 0) renum[want[r]] = next++;
      CHECK_MSG(c.nodeOf[r] == renum[want[r]], "layout %s: rank %d on node %d, the topology says %d",
                gLayout, r, renum[want[r]], c.nodeOf[r]);
    }
  }
  /* The ring: nodes in order, each node's ranks in rank order. */
  int* ring = xmalloc((size_t)c.W * sizeof(int));
  int k = 0, me = 0;
  for (int n = 0; n < c.N; n++)
    for (int r = 0; r < c.W; r++)
      if (c.nodeOf[r] == n) {
        if (r == c.rank) me = k;
        ring[k++] = r;
      }
  REQUIRE(k == c.W);
  c.ringNext = ring[(me + 1) % c.W];
  free(ring);
  if (strcmp(suite, "core") == 0)
    suiteCore(&c);
  else if (strcmp(suite, "hpz") == 0)
    suiteHpz(&c);
  else if (strcmp(suite, "counters") == 0)
    suiteCounters(&c);
  else if (strcmp(suite, "wrap") == 0)
    suiteWrap(&c);
  else if (strcmp(suite, "config") == 0)
    suiteConfig(&c);
  else if (strcmp(suite, "split") == 0)
    suiteSplit(&c);
  else if (strcmp(suite, "outliers") == 0)
    suiteOutliers(&c);
  else if (strcmp(suite, "delta") == 0)
    suiteDelta(&c);
  else
    REQUIRE(!"unknown suite");
  if (c.rank == 0) printf("rank 0: %ld checks, %d failed\n", zppTestChecks, zppTestFailures);
  free(c.nodeOf);
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  if (strcmp(arg, "config") == 0) {
    cfg.qwzBits = 8;
    cfg.qgzBits = 4;
    cfg.compressMinBytes = 0;
  }
  if (strcmp(arg, "rotation") == 0) cfg.quantRotate = 0;
  if (zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) != zppSuccess) return 1;
  if (strcmp(arg, "rotation") == 0) {
    /* A second communicator, rotating: its id goes out over the first. */
    zppUniqueId id2;
    memset(&id2, 0, sizeof id2);
    if (rank == 0) REQUIRE(zppGetUniqueId(&id2) == zppSuccess);
    REQUIRE(zppBroadcast(&id2, &id2, sizeof id2, zppUint8, 0, comm, NULL) == zppSuccess);
    zppConfig_t rc = cfg;
    rc.quantRotate = 1;
    zppComm_t rot;
    REQUIRE(zppCommInitRankConfig(&rot, nranks, id2, rank, &rc) == zppSuccess);
    suiteRotation(comm, rot, rank, nranks);
    CHECK(zppCommDestroy(rot) == zppSuccess);
    CHECK(zppCommDestroy(comm) == zppSuccess);
    return zppTestRankResult();
  }
  runSuite(comm, arg);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  return zppTestRankResult();
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr,
            "usage: %s LAYOUT|env core|hpz|delta|counters|wrap|config|split|outliers|rotation\n",
            argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "env") == 0) {
    /* One rank of a job started by a launcher (perf/emucluster/emucluster.sh: every
     * node its own network namespace, links shaped). */
    zppComm_t comm;
    REQUIRE(zppCommInitFromEnv(&comm, NULL) == zppSuccess);
    runSuite(comm, argv[2]);
    CHECK(zppCommDestroy(comm) == zppSuccess);
    return zppTestExit(argv[0]);
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.layout = argv[1];
  gLayout = argv[1];
  o.timeoutSec = 240;
  int rc = zppLaunch(&o, body, argv[2]);
  CHECK_MSG(rc == 0, "ranks failed (launcher result %d)", rc);
  return zppTestExit(argv[0]);
}
