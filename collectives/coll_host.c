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
#include "params.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"

/* SMALL: the latency algorithm (all-gather: recursive doubling on a power
 * of two ranks, else Bruck; reduce-scatter: direct; all-reduce: recursive
 * doubling; broadcast: binomial). SMALL_ALT: a second one, chosen by name
 * or by chooseAlgo (all-gather: Bruck on any count; broadcast: flat). */
enum { ALGO_AUTO = 0, ALGO_RING = 1, ALGO_SMALL = 2, ALGO_SMALL_ALT = 3 };
/* A small broadcast inside one node is flat up to this many ranks: the
 * root's sends are copies into shared-memory rings, cheaper than a tree
 * level (see broadcast_flat.c). */
#define FLAT_BROADCAST_MAX_RANKS 16

typedef struct {
  uint32_t seq;
  int* ring;
  int* ringPos;
  zppScratchPool_t scratch;
  size_t chunkBytes;
  int depth;
  int64_t small[zppNumOpKinds]; /* below: the latency algorithm */
  int algo[zppNumOpKinds];
  int ranksShareCores; /* zppP2pRanksShareCores: the same on every rank */
  int haveLast;     /* a collective ran: lastSeq and lastSig are set */
  uint32_t lastSeq;
  uint32_t lastSig;
} hostState_t;

void zppHostCollDescribeMismatch(uint32_t theirs, uint32_t mine, char* buf, size_t len) {
  zppCollDescribeMismatch(theirs, mine, "count, root and algorithm settings", buf, len);
}

static uint32_t makeSig(const zppHostColl_t* a, int algo, size_t chunkBytes) {
  uint64_t vals[4] = {(uint64_t)a->count, (uint64_t)(a->kind == zppOpBroadcast ? a->root : 0),
                      (uint64_t)algo, (uint64_t)chunkBytes};
  int reduction = a->kind == zppOpReduceScatter || a->kind == zppOpAllReduce;
  return zppCollSig(a->kind, a->type, reduction ? (int)a->op : -1, vals, 4);
}

/* ---- per-communicator state (executor thread only) ---------------------- */

static void stateFree(void* p) {
  hostState_t* st = p;
  if (st == NULL) return;
  zppScratchPoolFree(&st->scratch);
  free(st->ring);
  free(st->ringPos);
  free(st);
}

/* otherName: a second latency algorithm (ALGO_SMALL_ALT), or NULL. */
static zppResult_t readAlgo(const char* name, const char* smallName, const char* otherName,
                            int* algo) {
  const char* v = zppEnvGetString(name);
  const char* ring = strcmp(name, "ZPP_ALGO_BROADCAST") == 0 ? "pipeline" : "ring";
  if (v[0] == '\0' || strcasecmp(v, "auto") == 0)
    *algo = ALGO_AUTO;
  else if (strcasecmp(v, "ring") == 0 || strcasecmp(v, "pipeline") == 0)
    *algo = ALGO_RING;
  else if (strcasecmp(v, smallName) == 0)
    *algo = ALGO_SMALL;
  else if (otherName != NULL && strcasecmp(v, otherName) == 0)
    *algo = ALGO_SMALL_ALT;
  else if (otherName != NULL)
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s': expected auto, %s, %s or %s", name, v, ring,
             smallName, otherName);
  else
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s': expected auto, %s or %s", name, v, ring, smallName);
  return zppSuccess;
}

static zppResult_t stateCreate(struct zppComm* comm, hostState_t** out) {
  zppResult_t res = zppSuccess;
  hostState_t* st = NULL;
  ZPP_CALLOCGOTO(st, 1, res, fail);
  ZPPCHECKGOTO(zppCollRingCreate(comm->topo, comm->nranks, &st->ring, &st->ringPos), res, fail);
  st->ranksShareCores = comm->transports->p2p ? zppP2pRanksShareCores(comm->transports->p2p) : 0;
  ZPPCHECKGOTO(zppCollPipelineParams(&st->chunkBytes, &st->depth), res, fail);
  ZPPCHECKGOTO(zppEnvGetInt("ZPP_ALLGATHER_SMALL_BYTES", &st->small[zppOpAllGather]), res, fail);
  ZPPCHECKGOTO(zppEnvGetInt("ZPP_REDUCESCATTER_SMALL_BYTES", &st->small[zppOpReduceScatter]), res,
               fail);
  ZPPCHECKGOTO(zppEnvGetInt("ZPP_ALLREDUCE_SMALL_BYTES", &st->small[zppOpAllReduce]), res, fail);
  ZPPCHECKGOTO(zppEnvGetInt("ZPP_BROADCAST_SMALL_BYTES", &st->small[zppOpBroadcast]), res, fail);
  ZPPCHECKGOTO(readAlgo("ZPP_ALGO_ALLGATHER", "rd", "bruck", &st->algo[zppOpAllGather]), res, fail);
  ZPPCHECKGOTO(readAlgo("ZPP_ALGO_REDUCESCATTER", "direct", "rd", &st->algo[zppOpReduceScatter]), res, fail);
  ZPPCHECKGOTO(readAlgo("ZPP_ALGO_ALLREDUCE", "rd", NULL, &st->algo[zppOpAllReduce]), res, fail);
  ZPPCHECKGOTO(readAlgo("ZPP_ALGO_BROADCAST", "binomial", "flat", &st->algo[zppOpBroadcast]), res, fail);
  *out = st;
  return zppSuccess;
fail:
  stateFree(st);
  return res;
}

static int chooseAlgo(const hostState_t* st, const zppHostColl_t* a, const zppTopo_t* topo,
                      int nranks) {
  if (a->kind == zppOpAllToAll) return ALGO_RING; /* pairwise, the only one */
  if (st->algo[a->kind] != ALGO_AUTO) return st->algo[a->kind];
  size_t ts = zppTypeSize(a->type);
  size_t bytes = a->count * ts;
  if (a->kind == zppOpAllGather || a->kind == zppOpReduceScatter) bytes *= (size_t)nranks;
  /* Fewer elements than ranks leaves ring blocks empty: doubling does better. */
  if (a->kind == zppOpAllReduce && a->count < (size_t)nranks) return ALGO_SMALL;
  if (bytes >= (size_t)st->small[a->kind]) return ALGO_RING;
  if (a->kind == zppOpBroadcast && topo->nNodes == 1 && nranks <= FLAT_BROADCAST_MAX_RANKS)
    return ALGO_SMALL_ALT;
  /* Measured on 2 cores, 64-512 B, ours/OpenMPI: 3 ranks 0.76 direct, 0.94
   * recursive doubling; direct is the faster one on 2, 4, 5, 6 and 8 ranks
   * (e.g. 5 ranks 1.96 against 1.44). Where each rank has a core, direct
   * takes one step to recursive doubling's three. */
  if (a->kind == zppOpReduceScatter && nranks == 3 && st->ranksShareCores) return ALGO_SMALL_ALT;
  return ALGO_SMALL;
}

/* ---- running one collective --------------------------------------------- */

static zppResult_t runLocal(const zppHostColl_t* a) {
  /* One rank: every collective is a copy (and avg divides by one). */
  size_t bytes = a->count * zppTypeSize(a->type);
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
    ZPPCHECK(zppP2pSendRecv(c->p2p, (c->rank + k) % n, &mine, 1, (c->rank - k + n) % n, &theirs, 1,
                            &id));
  return zppSuccess;
}

static zppResult_t runAlgo(zppCollCtx_t* c, const zppHostColl_t* a, int algo) {
  const int n = c->nranks;
  const size_t ts = zppTypeSize(a->type);
  const size_t bytes = a->count * ts;
  char* recv = a->recvbuff;
  switch (a->kind) {
    case zppOpAllGather: {
      char* own = recv + (size_t)c->rank * bytes;
      if ((const char*)a->sendbuff != own) memcpy(own, a->sendbuff, bytes);
      if (algo == ALGO_SMALL && (n & (n - 1)) == 0) return zppCollAllGatherRecDoubling(c, recv, bytes);
      if (algo == ALGO_SMALL || algo == ALGO_SMALL_ALT) return zppCollAllGatherBruck(c, recv, bytes);
      return zppCollAllGatherRing(c, recv, a->count * (size_t)n, ts, 0);
    }
    case zppOpReduceScatter: {
      size_t total = a->count * (size_t)n;
      if (algo == ALGO_SMALL)
        ZPPCHECK(zppCollReduceScatterDirect(c, a->sendbuff, recv, total, a->type, a->op));
      else if (algo == ALGO_SMALL_ALT)
        ZPPCHECK(zppCollReduceScatterRecDoubling(c, a->sendbuff, recv, total, a->type, a->op));
      else
        ZPPCHECK(zppCollReduceScatterRing(c, a->sendbuff, recv, total, a->type, a->op));
      if (a->op == zppAvg) zppReduceFinishAvg(recv, a->count, a->type, n);
      return zppSuccess;
    }
    case zppOpAllReduce:
      if (algo == ALGO_SMALL)
        return zppCollAllReduceRecDoubling(c, a->sendbuff, recv, a->count, a->type, a->op);
      return zppCollAllReduceRing(c, a->sendbuff, recv, a->count, a->type, a->op);
    case zppOpAllToAll:
      return zppCollAllToAllPairwise(c, a->sendbuff, recv, bytes);
    case zppOpBroadcast:
      if (c->rank == a->root && a->sendbuff != recv) memcpy(recv, a->sendbuff, bytes);
      if (algo == ALGO_SMALL)
        ZPPCHECK(zppCollBroadcastBinomial(c, recv, bytes, a->root));
      else if (algo == ALGO_SMALL_ALT)
        ZPPCHECK(zppCollBroadcastFlat(c, recv, bytes, a->root));
      else
        ZPPCHECK(zppCollBroadcastPipeline(c, recv, bytes, a->root));
      return broadcastAgree(c);
    default:
      ZPP_FAIL(zppInternalError, COLL, "host collective of unknown kind %d", (int)a->kind);
  }
}

/* The state, and the checks every operation starts with. */
static zppResult_t beginOp(struct zppComm* comm, hostState_t** out) {
  struct zppTransports* t = comm->transports;
  hostState_t* st = zppExecutorGetState(t->exec);
  if (st == NULL) {
    ZPPCHECK(stateCreate(comm, &st));
    zppExecutorSetState(t->exec, st, stateFree);
    zppP2pSetSigFormatter(t->p2p, zppHostCollDescribeMismatch);
  }
  /* Another rank may have given up already: say why rather than fail on a
   * consequence. */
  zppResult_t res = zppP2pPoll(t->p2p);
  if (res == zppSuccess && st->haveLast) res = zppP2pCheckLeftovers(t->p2p, st->lastSeq, st->lastSig);
  if (res != zppSuccess) {
    zppP2pQuiesce(t->p2p);
    return res;
  }
  *out = st;
  return zppSuccess;
}

zppResult_t zppHostCollBeginOp(struct zppComm* comm, uint32_t* seq) {
  hostState_t* st = NULL;
  ZPPCHECK(beginOp(comm, &st));
  *seq = st->seq++;
  return zppSuccess;
}

void zppHostCollEndOp(struct zppComm* comm, uint32_t seq, uint32_t sig) {
  hostState_t* st = zppExecutorGetState(comm->transports->exec);
  if (st == NULL) return;
  st->haveLast = 1;
  st->lastSeq = seq;
  st->lastSig = sig;
}

static zppResult_t hostCollJob(struct zppComm* comm, void* arg) {
  const zppHostColl_t* a = arg;
  zppResult_t res = (zppResult_t)atomic_load(&comm->asyncError);
  if (res != zppSuccess) return res; /* reported when it happened */
  if (comm->nranks == 1) return runLocal(a);

  struct zppTransports* t = comm->transports;
  if (t->p2p == NULL)
    ZPP_FAIL(zppInvalidUsage, COLL, "%s: no host transport (built without UCX)", comm->name);
  hostState_t* st = NULL;
  ZPPCHECK(beginOp(comm, &st));
  int algo = chooseAlgo(st, a, comm->topo, comm->nranks);
  zppCollCtx_t c = {
      .comm = comm,
      .p2p = t->p2p,
      .rank = comm->rank,
      .nranks = comm->nranks,
      .ring = st->ring,
      .ringPos = st->ringPos,
      .id = {.seq = st->seq++, .step = 0, .sig = makeSig(a, algo, st->chunkBytes), .opKind = a->kind},
      .chunkBytes = st->chunkBytes,
      .depth = st->depth,
      .scratch = zppScratchPoolGet,
      .scratchOwner = &st->scratch,
  };
  ZPP_DBG(COLL, "%s: rank %d: %s seq %u count %zu algorithm %s", comm->name, comm->rank,
          zppOpKindName(a->kind), c.id.seq, a->count, algo == ALGO_RING ? "bandwidth" : "latency");
  res = runAlgo(&c, a, algo);
  st->haveLast = 1;
  st->lastSeq = c.id.seq;
  st->lastSig = c.id.sig;
  if (res != zppSuccess) {
    /* The ranks no longer agree on where they are: the communicator is
     * broken (the transport recorded why, unless the failure was local). */
    if (atomic_load(&comm->asyncError) == zppSuccess)
      zppCommStateSetError(comm, res, "%s: rank %d: %s failed locally (%s)", comm->name, comm->rank,
                      zppOpKindName(a->kind), zppGetErrorString(res));
    zppP2pQuiesce(t->p2p);
  }
  /* After the quiesce: until then a receive may still land in scratch. */
  zppScratchPoolTrim(&st->scratch);
  return res;
}

zppResult_t zppHostCollIssue(struct zppComm* comm, const zppHostColl_t* coll, zppHostStream_t stream) {
  return zppExecutorSubmit(comm->transports->exec, hostCollJob, coll, sizeof(*coll), stream);
}
