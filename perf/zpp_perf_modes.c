/*
 * The mode table. Adding a ZeRO++ mode is adding its run function (and, if
 * it needs one, setup/teardown) and its codec bound to its row below; the
 * timing, checking, JSON, picture and exit code need no change.
 *
 * For the compressed rows, when their calls land in zpp.h:
 *   qwz  run: the explicit quantized all-gather on call->send/recv (the
 *        result has allgather's layout). bound: the codec bound of
 *        quant_kernels/zpp_quant.h for the block of the source rank's shard
 *        the element came from: the block's scale s = amax/Q, amax recomputed
 *        from zppPerfInputValue(spec, srcRank, j) over that block (every
 *        rank's input is a pure function, so no communication is needed).
 *   hpz  setup: create the partitioned parameter from call->send and run the
 *        forward gather once (it fills the secondary shards); run: the
 *        backward gather from the secondaries; teardown: destroy. bound: 0
 *        (or qwz's if the forward gather was quantized): the backward gather
 *        must return exactly what the forward one did.
 *   qgz  run: the quantized reduce-scatter (sum/avg). bound: the documented
 *        two-stage bound (quantize, intra-node reduce and requantize,
 *        inter-node reduce) from the exact inputs of every rank.
 */
#include <strings.h>

#include "zpp_perf.h"

static zppResult_t zppPerfRunAllGather(const zppPerfCall_t* c) {
  return zppAllGather(c->send, c->recv, c->apiCount, c->dtype, c->comm, NULL);
}

static zppResult_t zppPerfRunReduceScatter(const zppPerfCall_t* c) {
  return zppReduceScatter(c->send, c->recv, c->apiCount, c->dtype, c->redop, c->comm, NULL);
}

static zppResult_t zppPerfRunAllReduce(const zppPerfCall_t* c) {
  return zppAllReduce(c->send, c->recv, c->apiCount, c->dtype, c->redop, c->comm, NULL);
}

static zppResult_t zppPerfRunAllToAll(const zppPerfCall_t* c) {
  return zppAllToAll(c->send, c->recv, c->apiCount, c->dtype, c->comm, NULL);
}

static zppResult_t zppPerfRunBroadcast(const zppPerfCall_t* c) {
  return zppBroadcast(c->send, c->recv, c->apiCount, c->dtype, c->root, c->comm, NULL);
}

static const zppPerfMode_t zppPerfModes[] = {
    {"plain", ZPP_PERF_ALLGATHER, 0, zppOpAllGather, "zppAllGather", zppPerfRunAllGather,
     NULL, NULL, NULL},
    {"plain", ZPP_PERF_REDUCESCATTER, 0, zppOpReduceScatter, "zppReduceScatter",
     zppPerfRunReduceScatter, NULL, NULL, NULL},
    {"plain", ZPP_PERF_ALLREDUCE, 0, zppOpAllReduce, "zppAllReduce", zppPerfRunAllReduce, NULL,
     NULL, NULL},
    {"plain", ZPP_PERF_ALLTOALL, 0, zppOpAllToAll, "zppAllToAll", zppPerfRunAllToAll, NULL, NULL,
     NULL},
    {"plain", ZPP_PERF_BROADCAST, 0, zppOpBroadcast, "zppBroadcast", zppPerfRunBroadcast, NULL,
     NULL, NULL},
    {"qwz", ZPP_PERF_ALLGATHER, 1, zppOpQwZ, "quantized weight all-gather (ZeRO++ qwZ)", NULL,
     NULL, NULL, NULL},
    {"hpz", ZPP_PERF_ALLGATHER, 1, zppOpHpZ, "backward gather from secondary shards (hpZ)", NULL,
     NULL, NULL, NULL},
    {"qgz", ZPP_PERF_REDUCESCATTER, 1, zppOpQgZ, "quantized gradient reduce-scatter (qgZ)", NULL,
     NULL, NULL, NULL},
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
