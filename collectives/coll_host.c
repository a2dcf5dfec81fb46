/* Host-buffer collectives: algorithm choice and the executor jobs; see
 * coll_host.h. */
#include "coll_host.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "coll.h"
#include "coll_common.h"
#include "reduce_ops.h"

#include "check.h"
#include "names.h"
#include "params.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"

/* A small broadcast inside one node is flat up to this many ranks: the
 * root's sends are copies into shared-memory rings, cheaper than a tree
 * level (see broadcast_flat.c). */
#define FLAT_BROADCAST_MAX_RANKS 16

static zppResult_t chooseAlgo(const zppCollCtx_t* c, const zppHostColl_t* a, const zppTopo_t* topo,
                              zppCollAlgo_t* out) {
  const int nranks = c->nranks;
  *out = ZPP_COLL_ALGO_BANDWIDTH;
  if (a->kind == zppOpAllToAll) return zppSuccess; /* pairwise, the only one */
  zppCollAlgo_t algo;
  int64_t small;
  ZPPCHECK(zppCollAlgoFor(c, a->kind, &algo, &small));
  if (algo != ZPP_COLL_ALGO_AUTO) {
    *out = algo;
    return zppSuccess;
  }
  size_t ts = zppDtypeSize(a->type);
  size_t bytes = a->count * ts;
  if (a->kind == zppOpAllGather || a->kind == zppOpReduceScatter) bytes *= (size_t)nranks;
  if (a->kind == zppOpAllReduce && a->count < (size_t)nranks)
    *out = ZPP_COLL_ALGO_SMALL; /* fewer elements than ranks leaves ring blocks empty */
  else if (bytes >= (size_t)small)
    *out = ZPP_COLL_ALGO_BANDWIDTH;
  else if (a->kind == zppOpBroadcast && topo->nNodes == 1 && nranks <= FLAT_BROADCAST_MAX_RANKS)
    *out = ZPP_COLL_ALGO_SMALL_ALT;
  /* Measured on 2 cores, 64-512 B, ours/OpenMPI: 3 ranks 0.76 direct, 0.94
   * recursive doubling; direct is the faster one on 2, 4, 5, 6 and 8 ranks
   * (e.g. 5 ranks 1.96 against 1.44). Where each rank has a core, direct
   * takes one step to recursive doubling's three. */
  else if (a->kind == zppOpReduceScatter && nranks == 3 && c->ranksShareCores)
    *out = ZPP_COLL_ALGO_SMALL_ALT;
  else
    *out = ZPP_COLL_ALGO_SMALL;
  return zppSuccess;
}

/* ---- running one collective --------------------------------------------- */

static zppResult_t runLocal(const zppHostColl_t* a) {
  /* One rank: every collective is a copy (and avg divides by one). */
  size_t bytes = a->count * zppDtypeSize(a->type);
  if (a->sendbuff != a->recvbuff && bytes) memcpy(a->recvbuff, a->sendbuff, bytes);
  return zppSuccess;
}

/* Ranks that pass different roots to one broadcast can each "succeed" with
 * their own root's data: a rank that takes itself for the root receives
 * nothing, and the messages meant for it wait unreceived until some later
 * call. So a broadcast ends with a dissemination round of 1-byte messages
 * carrying the call's signature, which hashes the root: a rank that meets
 * another signature fails (and tells the others), and it stops sending, so
 * a rank that completed every round has heard, directly or through ranks
 * that agreed, from every other. ceil(log2 n) tiny exchanges. */
static zppResult_t broadcastAgree(zppCollCtx_t* c) {
  const int n = c->nranks;
  /* Its own step: the data phase is over on this rank, and on each path
   * (rings or the network) a peer's data messages precede its check message. */
  zppMsgId_t id = zppCollMsg(c, 255);
  unsigned char mine = 1, theirs = 0;
  for (int k = 1; k < n; k <<= 1)
    ZPPCHECK(
        zppP2pSendRecv(c->p2p, (c->rank + k) % n, &mine, 1, (c->rank - k + n) % n, &theirs, 1, &id));
  return zppSuccess;
}

static zppResult_t runAlgo(zppCollCtx_t* c, const zppHostColl_t* a, zppCollAlgo_t algo) {
  const int n = c->nranks;
  const size_t ts = zppDtypeSize(a->type);
  const size_t bytes = a->count * ts;
  char* recv = a->recvbuff;
  switch (a->kind) {
    case zppOpAllGather: {
      char* own = recv + (size_t)c->rank * bytes;
      if ((const char*)a->sendbuff != own) memcpy(own, a->sendbuff, bytes);
      if (algo == ZPP_COLL_ALGO_SMALL && (n & (n - 1)) == 0)
        return zppCollAllGatherRecDoubling(c, recv, bytes);
      if (algo == ZPP_COLL_ALGO_SMALL || algo == ZPP_COLL_ALGO_SMALL_ALT)
        return zppCollAllGatherBruck(c, recv, bytes);
      return zppCollAllGatherRing(c, recv, a->count * (size_t)n, ts, 0);
    }
    case zppOpReduceScatter: {
      size_t total = a->count * (size_t)n;
      if (algo == ZPP_COLL_ALGO_SMALL)
        ZPPCHECK(zppCollReduceScatterDirect(c, a->sendbuff, recv, total, a->type, a->op));
      else if (algo == ZPP_COLL_ALGO_SMALL_ALT)
        ZPPCHECK(zppCollReduceScatterRecDoubling(c, a->sendbuff, recv, total, a->type, a->op));
      else
        ZPPCHECK(zppCollReduceScatterRing(c, a->sendbuff, recv, total, a->type, a->op));
      if (a->op == zppAvg) zppReduceFinishAvg(recv, a->count, a->type, n);
      return zppSuccess;
    }
    case zppOpAllReduce:
      if (algo == ZPP_COLL_ALGO_SMALL)
        return zppCollAllReduceRecDoubling(c, a->sendbuff, recv, a->count, a->type, a->op);
      return zppCollAllReduceRing(c, a->sendbuff, recv, a->count, a->type, a->op);
    case zppOpAllToAll: return zppCollAllToAllPairwise(c, a->sendbuff, recv, bytes);
    case zppOpBroadcast:
      if (c->rank == a->root && a->sendbuff != recv) memcpy(recv, a->sendbuff, bytes);
      if (algo == ZPP_COLL_ALGO_SMALL)
        ZPPCHECK(zppCollBroadcastBinomial(c, recv, bytes, a->root));
      else if (algo == ZPP_COLL_ALGO_SMALL_ALT)
        ZPPCHECK(zppCollBroadcastFlat(c, recv, bytes, a->root));
      else
        ZPPCHECK(zppCollBroadcastPipeline(c, recv, bytes, a->root));
      return broadcastAgree(c);
    default: ZPP_FAIL(zppInternalError, COLL, "host collective of unknown kind %d", (int)a->kind);
  }
}

static int sigValsOf(const zppHostColl_t* a, zppCollAlgo_t algo, uint64_t vals[3]) {
  vals[0] = (uint64_t)a->count;
  vals[1] = (uint64_t)(a->kind == zppOpBroadcast ? a->root : 0);
  vals[2] = (uint64_t)algo;
  return 3;
}

static zppResult_t hostCollJob(struct zppComm* comm, void* arg) {
  const zppHostColl_t* a = arg;
  zppResult_t res = (zppResult_t)atomic_load(&comm->asyncError);
  if (res != zppSuccess) return res; /* reported when it happened */
  if (comm->nranks == 1) return runLocal(a);
  zppCollCtx_t c;
  ZPPCHECK(zppCollBegin(comm, a->kind, &c));
  zppCollAlgo_t algo = ZPP_COLL_ALGO_BANDWIDTH;
  res = chooseAlgo(&c, a, comm->topo, &algo);
  uint64_t vals[3];
  int reduction = a->kind == zppOpReduceScatter || a->kind == zppOpAllReduce;
  zppCollSign(&c, a->type, reduction ? (int)a->op : -1, vals, sigValsOf(a, algo, vals));
  if (res == zppSuccess) {
    ZPP_DBG(COLL, "%s: rank %d: %s seq %u count %zu algorithm %s", comm->name, comm->rank,
            zppOpKindString(a->kind), c.id.seq, a->count,
            algo == ZPP_COLL_ALGO_BANDWIDTH ? "bandwidth" : "latency");
    res = runAlgo(&c, a, algo);
  }
  return zppCollEnd(&c, res, 0);
}

zppResult_t zppHostCollIssue(struct zppComm* comm, const zppHostColl_t* coll, zppHostStream_t stream) {
  return zppExecutorSubmit(comm->transports->exec, hostCollJob, NULL, coll, sizeof(*coll), stream);
}
