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
  /* pairwise, flat: the only ones */
  if (a->kind == zppOpAllToAll || a->kind == zppOpAllToAllv || a->kind == zppOpGather ||
      a->kind == zppOpScatter)
    return zppSuccess;
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
  if ((a->kind == zppOpAllReduce || a->kind == zppOpReduce) && a->count < (size_t)nranks)
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

/* What a job holds: the call, and for all-to-all-v its parts in bytes
 * (sendBytes, sdispl, recvBytes, rdispl; nranks each, owned by the job). */
typedef struct {
  zppHostColl_t c;
  size_t* parts;
  int countsOnly; /* all-to-all-v: compare the counts, move nothing (device path) */
} hostJob_t;

static zppResult_t runLocal(const hostJob_t* j) {
  const zppHostColl_t* a = &j->c;
  if (a->kind == zppOpAllToAllv) {
    if (j->parts[0] != j->parts[2])
      ZPP_FAIL(zppInvalidUsage, ALL,
               "zppAllToAllv: rank 0 sends %zu elements to itself but expects %zu (sendcounts[0] "
               "and recvcounts[0] differ)",
               j->parts[0] / zppDtypeSize(a->type), j->parts[2] / zppDtypeSize(a->type));
    if (j->parts[0])
      memcpy((char*)a->recvbuff + j->parts[3], (const char*)a->sendbuff + j->parts[1], j->parts[0]);
    return zppSuccess;
  }
  /* One rank: every other collective is a copy (and avg divides by one). */
  size_t bytes = a->count * zppDtypeSize(a->type);
  if (a->sendbuff != a->recvbuff && bytes) memcpy(a->recvbuff, a->sendbuff, bytes);
  return zppSuccess;
}

static zppResult_t runAlgo(zppCollCtx_t* c, const hostJob_t* j, zppCollAlgo_t algo, int* agreed) {
  const zppHostColl_t* a = &j->c;
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
      if (a->op == zppAvg) zppRedFinishAvg(recv, a->count, a->type, n);
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
      return zppCollAgree(c, NULL, 0, NULL);
    case zppOpReduce:
      if (algo == ZPP_COLL_ALGO_SMALL)
        ZPPCHECK(zppCollReduceBinomial(c, a->sendbuff, recv, a->count, a->type, a->op, a->root));
      else
        ZPPCHECK(zppCollReduceScatterGather(c, a->sendbuff, recv, a->count, a->type, a->op, a->root));
      if (a->op == zppAvg && c->rank == a->root) zppRedFinishAvg(recv, a->count, a->type, n);
      return zppCollAgree(c, NULL, 0, NULL);
    case zppOpGather:
      if (c->rank == a->root) {
        char* own = recv + (size_t)a->root * bytes;
        if ((const char*)a->sendbuff != own) memcpy(own, a->sendbuff, bytes);
      }
      ZPPCHECK(zppCollGatherFlat(c, a->sendbuff, recv, a->count * (size_t)n, ts, a->root));
      return zppCollAgree(c, NULL, 0, NULL);
    case zppOpScatter:
      if (c->rank == a->root) {
        const char* own = (const char*)a->sendbuff + (size_t)a->root * bytes;
        if (own != recv) memcpy(recv, own, bytes);
      }
      ZPPCHECK(zppCollScatterFlat(c, a->sendbuff, recv, a->count * (size_t)n, ts, a->root));
      return zppCollAgree(c, NULL, 0, NULL);
    case zppOpAllToAllv: {
      const size_t* p = j->parts;
      zppCollLayout_t send = {p, p + n, 0}, rcv = {p + 2 * (size_t)n, p + 3 * (size_t)n, 0};
      if (j->countsOnly) return zppCollAllToAllvCheck(c, &send, &rcv, ts, agreed);
      return zppCollAllToAllvPairwise(c, a->sendbuff, &send, recv, &rcv, ts, agreed);
    }
    default: ZPP_FAIL(zppInternalError, COLL, "host collective of unknown kind %d", (int)a->kind);
  }
}

static int rooted(zppOpKind_t k) {
  return k == zppOpBroadcast || k == zppOpReduce || k == zppOpGather || k == zppOpScatter;
}

static int sigValsOf(const zppHostColl_t* a, zppCollAlgo_t algo, uint64_t vals[3]) {
  vals[0] = (uint64_t)a->count;
  vals[1] = (uint64_t)(rooted(a->kind) ? a->root : 0);
  vals[2] = (uint64_t)algo;
  return 3;
}

static void hostCollDrop(void* arg) {
  hostJob_t* j = arg;
  free(j->parts);
  j->parts = NULL;
}

static zppResult_t hostCollRun(struct zppComm* comm, const hostJob_t* j) {
  const zppHostColl_t* a = &j->c;
  zppResult_t res = (zppResult_t)atomic_load(&comm->asyncError);
  if (res != zppSuccess) return res; /* reported when it happened */
  if (comm->nranks == 1) return j->countsOnly ? zppSuccess : runLocal(j);
  zppCollCtx_t c;
  ZPPCHECK(zppCollBegin(comm, a->kind, &c));
  zppCollAlgo_t algo = ZPP_COLL_ALGO_BANDWIDTH;
  res = chooseAlgo(&c, a, comm->topo, &algo);
  uint64_t vals[3];
  int reduction = a->kind == zppOpReduceScatter || a->kind == zppOpAllReduce || a->kind == zppOpReduce;
  zppCollSign(&c, a->type, reduction ? (int)a->op : -1, vals, sigValsOf(a, algo, vals));
  int agreed = 0;
  if (res == zppSuccess) {
    ZPP_DBG(COLL, "%s: rank %d: %s seq %u count %zu algorithm %s", comm->name, comm->rank,
            zppOpKindString(a->kind), c.id.seq, a->count,
            algo == ZPP_COLL_ALGO_BANDWIDTH ? "bandwidth" : "latency");
    res = runAlgo(&c, j, algo, &agreed);
  }
  return zppCollEnd(&c, res, agreed);
}

static zppResult_t hostCollJob(struct zppComm* comm, void* arg) {
  hostJob_t* j = arg;
  zppResult_t res = hostCollRun(comm, j);
  hostCollDrop(j);
  return res;
}

static zppResult_t issue(struct zppComm* comm, const zppHostColl_t* coll, int countsOnly,
                         zppHostStream_t stream) {
  hostJob_t j = {.c = *coll, .countsOnly = countsOnly};
  if (coll->kind == zppOpAllToAllv) {
    /* The caller's arrays may be gone before a queued job runs: the job
     * keeps its own, in bytes. */
    const size_t n = (size_t)comm->nranks, ts = zppDtypeSize(coll->type);
    j.parts = malloc(4 * n * sizeof(size_t));
    if (j.parts == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory for all-to-all-v counts");
    for (size_t p = 0; p < n; p++) {
      j.parts[p] = coll->sendcounts[p] * ts;
      j.parts[n + p] = coll->sdispls[p] * ts;
      j.parts[2 * n + p] = coll->recvcounts[p] * ts;
      j.parts[3 * n + p] = coll->rdispls[p] * ts;
    }
    j.c.sendcounts = j.c.sdispls = j.c.recvcounts = j.c.rdispls = NULL;
  }
  return zppExecutorSubmit(comm->transports->exec, hostCollJob, hostCollDrop, &j, sizeof(j), stream);
}

zppResult_t zppHostCollIssue(struct zppComm* comm, const zppHostColl_t* coll, zppHostStream_t stream) {
  return issue(comm, coll, 0, stream);
}

zppResult_t zppHostCollCheckCounts(struct zppComm* comm, const zppHostColl_t* coll) {
  if (comm->transports->p2p == NULL) return zppSuccess; /* one rank, or no host transport */
  return issue(comm, coll, 1, NULL);
}
