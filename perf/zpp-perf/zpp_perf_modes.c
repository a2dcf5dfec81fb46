/*
 * The mode table. Adding a mode is adding its run function (and, if it needs
 * them, setup/teardown outside the timed loop) and its codec bound to its
 * row below; the timing, checking, JSON, picture and exit code need no
 * change.
 *
 * The ZeRO++ rows call the explicit entry points of zpp.h with the bits the
 * command line asks for, so that the bound knows them. A row whose run is
 * NULL is known but unavailable: asking for it says so (for modes whose
 * library call has not landed yet).
 *   qwz  zppQwzAllGather: allgather layout; bound: the codec's round trip for
 *        the block of the source rank's shard (perf_check.h).
 *   hpz  setup: zppParamCreate and the forward gather, which fills the
 *        secondary partitions; timed: zppParamGatherBackward (inside the
 *        node only); teardown: zppParamDestroy. Bound: qwz's when the forward
 *        gather is quantized (--hpz-bits), else exact: the backward gather
 *        must return exactly what the forward one did.
 *   qgz  zppQgzReduceScatter, sum and avg; bound: the two-stage bound.
 */
#include <stdlib.h>
#include <strings.h>

#include "quant_kernels/zpp_quant.h"
#include "zpp_perf.h"

static zppResult_t zppPerfRunAllGather(const zppPerfCall_t* c) {
  return zppAllGather(c->runSend, c->runRecv, c->apiCount, c->dtype, c->comm, c->stream);
}

static zppResult_t zppPerfRunReduceScatter(const zppPerfCall_t* c) {
  return zppReduceScatter(c->runSend, c->runRecv, c->apiCount, c->dtype, c->redop, c->comm, c->stream);
}

static zppResult_t zppPerfRunAllReduce(const zppPerfCall_t* c) {
  return zppAllReduce(c->runSend, c->runRecv, c->apiCount, c->dtype, c->redop, c->comm, c->stream);
}

static zppResult_t zppPerfRunAllToAll(const zppPerfCall_t* c) {
  return zppAllToAll(c->runSend, c->runRecv, c->apiCount, c->dtype, c->comm, c->stream);
}

static zppResult_t zppPerfRunBroadcast(const zppPerfCall_t* c) {
  return zppBroadcast(c->runSend, c->runRecv, c->apiCount, c->dtype, c->root, c->comm, c->stream);
}

/* Pair partners exchange in both directions at once: one group, so that
 * large messages (which wait for their receive) cannot deadlock. */
static zppResult_t zppPerfRunSendRecv(const zppPerfCall_t* c) {
  int peer = zppPerfPartner(c->rank, c->nranks);
  zppResult_t res = zppGroupStart();
  if (res != zppSuccess) return res;
  zppResult_t s = zppSend(c->runSend, c->apiCount, c->dtype, peer, c->comm, c->stream);
  zppResult_t r = zppRecv(c->runRecv, c->apiCount, c->dtype, peer, c->comm, c->stream);
  res = zppGroupEnd();
  return s != zppSuccess ? s : r != zppSuccess ? r : res;
}

static zppResult_t zppPerfRunReduce(const zppPerfCall_t* c) {
  return zppReduce(c->runSend, c->runRecv, c->apiCount, c->dtype, c->redop, c->root, c->comm,
                   c->stream);
}

static zppResult_t zppPerfRunGather(const zppPerfCall_t* c) {
  return zppGather(c->runSend, c->runRecv, c->apiCount, c->dtype, c->root, c->comm, c->stream);
}

static zppResult_t zppPerfRunScatter(const zppPerfCall_t* c) {
  return zppScatter(c->runSend, c->runRecv, c->apiCount, c->dtype, c->root, c->comm, c->stream);
}

/* alltoallv's counts and displacements (perf_check.h's uneven parts), made
 * once per row by the setup: the timed loop pays for the call only. */
static zppResult_t zppPerfSetupAllToAllv(zppPerfCall_t* c) {
  const int n = c->nranks;
  size_t* v = calloc(4 * (size_t)n, sizeof(size_t));
  if (v == NULL) return zppSystemError;
  for (int p = 0; p < n; p++) {
    v[p] = zppPerfVCount(c->apiCount, c->rank, p, n);
    v[n + p] = zppPerfVSendDispl(c->apiCount, c->rank, p, n);
    v[2 * n + p] = zppPerfVCount(c->apiCount, p, c->rank, n);
    v[3 * n + p] = zppPerfVRecvDispl(c->apiCount, p, c->rank, n);
  }
  c->modeState = v;
  return zppSuccess;
}

static void zppPerfTeardownAllToAllv(zppPerfCall_t* c) {
  free(c->modeState);
  c->modeState = NULL;
}

static zppResult_t zppPerfRunAllToAllv(const zppPerfCall_t* c) {
  const size_t* v = c->modeState;
  const size_t n = (size_t)c->nranks;
  return zppAllToAllv(c->runSend, v, v + n, c->runRecv, v + 2 * n, v + 3 * n, c->dtype, c->comm,
                      c->stream);
}

static zppResult_t zppPerfRunQwz(const zppPerfCall_t* c) {
  return zppQwzAllGather(c->runSend, c->runRecv, c->apiCount, c->dtype, c->bits, c->comm, c->stream);
}

static zppResult_t zppPerfRunQgz(const zppPerfCall_t* c) {
  if (c->modeState != NULL)
    return zppQgzReduceScatterEF(c->runSend, c->runRecv, c->apiCount, c->dtype, c->redop,
                                 (zppGrad_t)c->modeState, c->comm, c->stream);
  return zppQgzReduceScatter(c->runSend, c->runRecv, c->apiCount, c->dtype, c->redop, c->bits, c->comm,
                             c->stream);
}

/* --error-feedback: a fresh handle per row, so that -c's first call has zero
 * residuals and the plain qgZ bound applies to it. */
static zppResult_t zppPerfSetupQgz(zppPerfCall_t* c) {
  if (!c->errorFeedback) return zppSuccess;
  zppGrad_t g = NULL;
  zppResult_t res = zppGradCreate(c->comm, c->apiCount, c->dtype, c->bits, &g);
  if (res == zppSuccess) c->modeState = g;
  return res;
}

static void zppPerfTeardownQgz(zppPerfCall_t* c) {
  zppGradDestroy((zppGrad_t)c->modeState);
  c->modeState = NULL;
}

static zppResult_t zppPerfSetupHpz(zppPerfCall_t* c) {
  zppParam_t param = NULL;
  zppResult_t res = zppParamCreate(c->comm, c->apiCount, c->dtype, c->bits, &param);
  if (res != zppSuccess) return res;
  res = zppParamGatherForward(param, c->runSend, c->runRecv, NULL);
  if (res != zppSuccess) {
    zppParamDestroy(param);
    return res;
  }
  c->modeState = param;
  return zppSuccess;
}

static zppResult_t zppPerfRunHpz(const zppPerfCall_t* c) {
  return zppParamGatherBackward((zppParam_t)c->modeState, c->runSend, c->runRecv, NULL);
}

static void zppPerfTeardownHpz(zppPerfCall_t* c) {
  zppParamDestroy((zppParam_t)c->modeState);
  c->modeState = NULL;
}

static int zppPerfPrepareQwz(const zppPerfCheckSpec_t* s, const zppPerfCall_t* c,
                             zppPerfCodecBound_t* b) {
  if (c->bits == 0) return 1; /* hpZ with an exact forward gather */
  return zppPerfQwzBoundPrepareRot(s, c->bits, c->block, c->quantRotate, b);
}

static int zppPerfPrepareQgz(const zppPerfCheckSpec_t* s, const zppPerfCall_t* c,
                             zppPerfCodecBound_t* b) {
  return zppPerfQgzBoundPrepareRot(s, c->bits, c->block, c->quantRotate, b);
}

static const zppPerfMode_t zppPerfModes[] = {
    /* name, collective, compressed, stats kind, summary, run, setup, teardown,
     * bound, boundPrepare, floatOnly, sumAvgOnly */
    {"plain", ZPP_PERF_ALLGATHER, 0, zppOpAllGather, "zppAllGather", zppPerfRunAllGather, NULL, NULL,
     NULL, NULL, 0, 0},
    {"plain", ZPP_PERF_REDUCESCATTER, 0, zppOpReduceScatter, "zppReduceScatter",
     zppPerfRunReduceScatter, NULL, NULL, NULL, NULL, 0, 0},
    {"plain", ZPP_PERF_ALLREDUCE, 0, zppOpAllReduce, "zppAllReduce", zppPerfRunAllReduce, NULL, NULL,
     NULL, NULL, 0, 0},
    {"plain", ZPP_PERF_ALLTOALL, 0, zppOpAllToAll, "zppAllToAll", zppPerfRunAllToAll, NULL, NULL, NULL,
     NULL, 0, 0},
    {"plain", ZPP_PERF_BROADCAST, 0, zppOpBroadcast, "zppBroadcast", zppPerfRunBroadcast, NULL, NULL,
     NULL, NULL, 0, 0},
    {"plain", ZPP_PERF_SENDRECV, 0, zppOpSendRecv, "zppSend + zppRecv with the pair partner, grouped",
     zppPerfRunSendRecv, NULL, NULL, NULL, NULL, 0, 0},
    {"plain", ZPP_PERF_REDUCE, 0, zppOpReduce, "zppReduce", zppPerfRunReduce, NULL, NULL, NULL, NULL, 0,
     0},
    {"plain", ZPP_PERF_GATHER, 0, zppOpGather, "zppGather", zppPerfRunGather, NULL, NULL, NULL, NULL, 0,
     0},
    {"plain", ZPP_PERF_SCATTER, 0, zppOpScatter, "zppScatter", zppPerfRunScatter, NULL, NULL, NULL,
     NULL, 0, 0},
    {"plain", ZPP_PERF_ALLTOALLV, 0, zppOpAllToAllv, "zppAllToAllv, uneven counts", zppPerfRunAllToAllv,
     zppPerfSetupAllToAllv, zppPerfTeardownAllToAllv, NULL, NULL, 0, 0},
    {"qwz", ZPP_PERF_ALLGATHER, 1, zppOpQwZ, "quantized weight all-gather (ZeRO++ qwZ)", zppPerfRunQwz,
     NULL, NULL, zppPerfQwzBound, zppPerfPrepareQwz, 1, 0},
    {"hpz", ZPP_PERF_ALLGATHER, 1, zppOpHpZ, "backward gather from secondary shards (hpZ)",
     zppPerfRunHpz, zppPerfSetupHpz, zppPerfTeardownHpz, zppPerfQwzBound, zppPerfPrepareQwz, 1, 0},
    {"qgz", ZPP_PERF_REDUCESCATTER, 1, zppOpQgZ, "quantized gradient reduce-scatter (qgZ)",
     zppPerfRunQgz, zppPerfSetupQgz, zppPerfTeardownQgz, zppPerfQgzBound, zppPerfPrepareQgz, 1, 1},
};

int zppPerfModeCount(void) { return (int)(sizeof zppPerfModes / sizeof zppPerfModes[0]); }

const zppPerfMode_t* zppPerfModeAt(int index) {
  return (index >= 0 && index < zppPerfModeCount()) ? &zppPerfModes[index] : NULL;
}

const zppPerfMode_t* zppPerfModeFind(const char* name, zppPerfColl_t coll) {
  for (int i = 0; i < zppPerfModeCount(); i++)
    if (zppPerfModes[i].coll == coll && strcasecmp(zppPerfModes[i].name, name) == 0)
      return &zppPerfModes[i];
  return NULL;
}

int zppPerfModeNameKnown(const char* name) {
  for (int i = 0; i < zppPerfModeCount(); i++)
    if (strcasecmp(zppPerfModes[i].name, name) == 0) return 1;
  return 0;
}

int zppPerfModeApplies(const zppPerfMode_t* m, zppDataType_t dtype, zppRedOp_t redop) {
  if (m->floatOnly && dtype != zppFloat32 && dtype != zppFloat16 && dtype != zppBfloat16) return 0;
  if (m->sumAvgOnly && zppPerfCollReduces(m->coll) && redop != zppSum && redop != zppAvg) return 0;
  return 1;
}

void zppPerfModeParams(const zppPerfMode_t* m, const zppPerfArgs_t* a, int* bits, int* block) {
  *bits = 0;
  *block = 0;
  if (!m->compressed) return;
  if (strcasecmp(m->name, "qgz") == 0)
    *bits = a->qgzBits;
  else if (strcasecmp(m->name, "hpz") == 0)
    *bits = a->hpzBits;
  else
    *bits = a->qwzBits;
  /* The library's rule: ZPP_QUANT_BLOCK (which --block sets), else the
   * codec's default for the bit width. */
  *block = a->quantBlock > 0 ? a->quantBlock : zppQuantDefaultBlock(*bits);
}
