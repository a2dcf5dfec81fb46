/*
 * The collective context: one per communicator, the one road every host
 * collective runs on, plain or ZeRO++ (see coll.h).
 *
 * It lives in the executor's state slot, so only executor jobs touch it and
 * it needs no lock. It owns what the two families used to keep a copy each
 * of: the node-ordered ring, the scratch pool, the pipeline settings, the
 * sequence space (the transport tells calls apart by sequence number, so
 * every operation of the communicator takes the next one) and the one
 * mismatch formatter that reads every kind of signature. The plain
 * collectives' algorithm settings are read here too, but each is only
 * checked when its own collective runs: a bad ZPP_ALGO_BROADCAST must not
 * fail a qgZ call (zppCollSettingsCheck lets the communicator's creation
 * refuse it up front instead).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "coll.h"
#include "coll_common.h"

#include "check.h"
#include "names.h"
#include "params.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"
#include "quant_kernels/zpp_quant.h"

struct zppCollState {
  uint32_t seq;
  int* ring;
  int* ringPos;
  zppScratchPool_t scratch;
  size_t chunkBytes;
  int depth;
  int ranksShareCores; /* zppP2pRanksShareCores: the same on every rank */
  int haveLast;        /* an operation ran: lastSeq and lastSig are set */
  /* Read at a kind's first call and kept: the environment is not read on a
   * latency-bound path. */
  int algoKnown[zppNumOpKinds];
  zppCollAlgo_t algo[zppNumOpKinds];
  int64_t small[zppNumOpKinds];
  uint32_t lastSeq;
  uint32_t lastSig;
};

/* ---- the plain collectives' algorithm settings -------------------------- */

static const struct {
  const char *algoVar, *smallVar, *bandwidth, *small, *alt;
} algoVars[zppNumOpKinds] = {
    [zppOpAllGather] = {"ZPP_ALGO_ALLGATHER", "ZPP_ALLGATHER_SMALL_BYTES", "ring", "rd", "bruck"},
    [zppOpReduceScatter] = {"ZPP_ALGO_REDUCESCATTER", "ZPP_REDUCESCATTER_SMALL_BYTES", "ring", "direct",
                            "rd"},
    [zppOpAllReduce] = {"ZPP_ALGO_ALLREDUCE", "ZPP_ALLREDUCE_SMALL_BYTES", "ring", "rd", NULL},
    [zppOpBroadcast] = {"ZPP_ALGO_BROADCAST", "ZPP_BROADCAST_SMALL_BYTES", "pipeline", "binomial",
                        "flat"},
    [zppOpReduce] = {"ZPP_ALGO_REDUCE", "ZPP_REDUCE_SMALL_BYTES", "rsg", "binomial", NULL},
};

zppResult_t zppCollAlgoSetting(zppOpKind_t kind, zppCollAlgo_t* algo, int64_t* smallBytes) {
  *algo = ZPP_COLL_ALGO_AUTO;
  *smallBytes = 0;
  if (kind < 0 || kind >= zppNumOpKinds || algoVars[kind].algoVar == NULL) return zppSuccess;
  const char* name = algoVars[kind].algoVar;
  const char* v = zppEnvGetString(name);
  if (v[0] == '\0' || strcasecmp(v, "auto") == 0)
    *algo = ZPP_COLL_ALGO_AUTO;
  else if (strcasecmp(v, algoVars[kind].bandwidth) == 0)
    *algo = ZPP_COLL_ALGO_BANDWIDTH;
  else if (strcasecmp(v, algoVars[kind].small) == 0)
    *algo = ZPP_COLL_ALGO_SMALL;
  else if (algoVars[kind].alt != NULL && strcasecmp(v, algoVars[kind].alt) == 0)
    *algo = ZPP_COLL_ALGO_SMALL_ALT;
  else if (algoVars[kind].alt != NULL)
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s': expected auto, %s, %s or %s", name, v,
             algoVars[kind].bandwidth, algoVars[kind].small, algoVars[kind].alt);
  else
    ZPP_FAIL(zppInvalidArgument, ENV, "%s='%s': expected auto, %s or %s", name, v,
             algoVars[kind].bandwidth, algoVars[kind].small);
  return zppEnvGetInt(algoVars[kind].smallVar, smallBytes);
}

zppResult_t zppCollSettingsCheck(void) {
  size_t chunkBytes;
  int depth;
  ZPPCHECK(zppCollPipelineParams(&chunkBytes, &depth));
  for (int k = 0; k < zppNumOpKinds; k++) {
    zppCollAlgo_t algo;
    int64_t small;
    ZPPCHECK(zppCollAlgoSetting((zppOpKind_t)k, &algo, &small));
  }
  return zppSuccess;
}

/* ---- the state ---------------------------------------------------------------- */

/* "AllReduce(float32, max; #1a3) while this rank called AllReduce(float32,
 * sum; #1a3)", for the plain kinds and ZeRO++'s alike: the hash covers
 * other values for each. */
static void describeMismatch(uint32_t theirs, uint32_t mine, char* buf, size_t len) {
  unsigned k1 = zppCollSigKind(theirs), k2 = zppCollSigKind(mine);
  int zeropp = (k1 >= zppOpQwZ && k1 <= zppOpQgZ) || (k2 >= zppOpQwZ && k2 <= zppOpQgZ);
  const char* hint = !zeropp ? "count, root and algorithm settings"
                             : "count, bits, block, rotation (quantRotate, ZPP_QUANT_ROTATE), "
                               "pipeline chunk, forward or backward, a delta parameter's "
                               "reference (zppParamDropReference), and qgZ's error feedback "
                               "(zppQgzReduceScatterEF, ZPP_QGZ_ERROR_FEEDBACK)";
  zppCollDescribeMismatch(theirs, mine, hint, buf, len);
}

static void stateFree(void* p) {
  struct zppCollState* st = p;
  if (st == NULL) return;
  zppScratchPoolFree(&st->scratch);
  free(st->ring);
  free(st->ringPos);
  free(st);
}

static zppResult_t stateGet(struct zppComm* comm, struct zppCollState** out) {
  struct zppTransports* t = comm->transports;
  struct zppCollState* st = zppExecutorGetState(t->exec);
  if (st != NULL) {
    *out = st;
    return zppSuccess;
  }
  zppResult_t res = zppSuccess;
  ZPP_CALLOCGOTO(st, 1, res, fail);
  ZPPCHECKGOTO(zppCollRingCreate(comm->topo, comm->nranks, &st->ring, &st->ringPos), res, fail);
  ZPPCHECKGOTO(zppCollPipelineParams(&st->chunkBytes, &st->depth), res, fail);
  st->ranksShareCores = t->p2p ? zppP2pRanksShareCores(t->p2p) : 0;
  if (t->p2p) zppP2pSetSigFormatter(t->p2p, describeMismatch);
  zppExecutorSetState(t->exec, st, stateFree);
  *out = st;
  return zppSuccess;
fail:
  stateFree(st);
  return res;
}

/* ---- one operation -------------------------------------------------------------- */

zppResult_t zppCollBegin(struct zppComm* comm, zppOpKind_t kind, zppCollCtx_t* c) {
  int err = atomic_load(&comm->asyncError);
  if (err != zppSuccess) return (zppResult_t)err; /* logged when it happened */
  zppP2p_t* p2p = comm->transports->p2p;
  if (comm->nranks > 1 && p2p == NULL)
    ZPP_FAIL(zppInvalidUsage, COLL, "%s: no host transport (built without UCX)", comm->name);
  struct zppCollState* st = NULL;
  ZPPCHECK(stateGet(comm, &st));
  if (p2p) {
    /* Another rank may have given up already, or left messages of the last
     * operation behind: say why rather than fail on a consequence. */
    zppResult_t res = zppP2pPoll(p2p);
    if (res == zppSuccess && st->haveLast) res = zppP2pCheckLeftovers(p2p, st->lastSeq, st->lastSig);
    if (res != zppSuccess) {
      zppP2pQuiesce(p2p);
      return res;
    }
  }
  memset(c, 0, sizeof(*c));
  /* Codec escapes are counted per thread; zppCollEnd adds what this call's
   * codecs counted to the communicator. */
  zppQuantTakeEscapeCounts(NULL, NULL);
  c->comm = comm;
  c->state = st;
  c->p2p = p2p;
  c->rank = comm->rank;
  c->nranks = comm->nranks;
  c->ring = st->ring;
  c->ringPos = st->ringPos;
  c->id.seq = st->seq++;
  c->id.opKind = kind;
  c->chunkBytes = st->chunkBytes;
  c->depth = st->depth;
  c->ranksShareCores = st->ranksShareCores;
  return zppSuccess;
}

void zppCollSign(zppCollCtx_t* c, zppDataType_t type, int op, const uint64_t* vals, int nvals) {
  /* The pipeline chunk decides how messages are cut: it must agree too. */
  uint64_t all[12];
  int n = 0;
  for (int i = 0; i < nvals && n < 11; i++) all[n++] = vals[i];
  all[n++] = (uint64_t)c->chunkBytes;
  c->id.sig = zppCollSig((zppOpKind_t)c->id.opKind, type, op, all, n);
  ZPP_DBG(COLL, "%s: rank %d: %s seq %u sig 0x%05x", c->comm->name, c->rank,
          zppOpKindString((zppOpKind_t)c->id.opKind), c->id.seq, c->id.sig);
}

zppResult_t zppCollEnd(zppCollCtx_t* c, zppResult_t res, int agreed) {
  struct zppComm* comm = c->comm;
  struct zppCollState* st = c->state;
  uint64_t escapes = 0, overflows = 0;
  zppQuantTakeEscapeCounts(&escapes, &overflows);
  if (comm->transports && (escapes | overflows)) {
    atomic_fetch_add_explicit(&comm->transports->quantEscapes, escapes, memory_order_relaxed);
    atomic_fetch_add_explicit(&comm->transports->quantEscapeOverflows, overflows, memory_order_relaxed);
  }
  st->haveLast = 1;
  st->lastSeq = c->id.seq;
  st->lastSig = c->id.sig;
  /* The ranks no longer agree on where they are: the communicator is broken. */
  if (!agreed) zppCollStepFailed(c, res);
  /* After the quiesce: until then a receive may still land in scratch. */
  zppScratchPoolTrim(&st->scratch);
  return res;
}

zppResult_t zppCollStepFailed(zppCollCtx_t* c, zppResult_t res) {
  if (res == zppSuccess) return res;
  struct zppComm* comm = c->comm;
  /* The transport recorded why, unless the failure was local. */
  if (atomic_load(&comm->asyncError) == zppSuccess)
    zppCommStateSetError(comm, res, "%s: rank %d: %s failed locally (%s)", comm->name, comm->rank,
                         zppOpKindString((zppOpKind_t)c->id.opKind), zppResultString(res));
  /* A second quiesce (zppCollEnd's) finds nothing left to cancel. */
  if (c->p2p) zppP2pQuiesce(c->p2p);
  return res;
}

/* ---- services of the context ---------------------------------------------------- */

void* zppCollScratch(const zppCollCtx_t* c, int slot, size_t bytes) {
  return zppScratchPoolGet(&c->state->scratch, slot, bytes);
}

void zppCollProgress(const zppCollCtx_t* c) {
  /* An error found here is found again by the next wait. */
  if (c->p2p) (void)zppP2pPoll(c->p2p);
}

/* Ranks that pass different roots to a rooted call can each "succeed" with
 * their own root's data: a rank that takes itself for the root receives
 * nothing, and the messages meant for it wait unreceived until some later
 * call. So such a call ends with a dissemination round of small messages
 * carrying the call's signature, which hashes the root: a rank that meets
 * another signature fails (and tells the others), and it stops sending, so
 * a rank that completed every round has heard, directly or through ranks
 * that agreed, from every other. */
zppResult_t zppCollAgree(zppCollCtx_t* c, void* word, size_t bytes,
                         void (*merge)(void* word, const void* theirs)) {
  const int n = c->nranks;
  enum { MAX_WORD = 64 };
  if (word != NULL && (bytes == 0 || bytes > MAX_WORD || merge == NULL))
    ZPP_FAIL(zppInternalError, COLL, "agreement word of %zu bytes", bytes);
  /* Its own step: the data phase is over on this rank, and on each path
   * (rings or the network) a peer's data messages precede its check message. */
  zppMsgId_t id = zppCollMsg(c, 255);
  unsigned char token = 1, theirs[MAX_WORD];
  const void* mine = word ? word : &token;
  size_t len = word ? bytes : 1;
  for (int k = 1; k < n; k <<= 1) {
    /* On this stack: nothing may be posted on it once this returns. */
    zppResult_t res =
        zppP2pSendRecv(c->p2p, (c->rank + k) % n, mine, len, (c->rank - k + n) % n, theirs, len, &id);
    if (res != zppSuccess) return zppCollStepFailed(c, res);
    if (word) merge(word, theirs);
  }
  return zppSuccess;
}

zppResult_t zppCollAlgoFor(const zppCollCtx_t* c, zppOpKind_t kind, zppCollAlgo_t* algo,
                           int64_t* smallBytes) {
  struct zppCollState* st = c->state;
  if (kind < 0 || kind >= zppNumOpKinds)
    ZPP_FAIL(zppInternalError, COLL, "algorithm setting of unknown kind %d", (int)kind);
  if (!st->algoKnown[kind]) {
    ZPPCHECK(zppCollAlgoSetting(kind, &st->algo[kind], &st->small[kind]));
    st->algoKnown[kind] = 1;
  }
  *algo = st->algo[kind];
  *smallBytes = st->small[kind];
  return zppSuccess;
}

size_t zppCollChunkElemsFor(size_t chunkBytes, zppDataType_t type, int block, int fanIn) {
  size_t bytes = chunkBytes / (size_t)(fanIn > 1 ? fanIn : 1);
  if (bytes < ZPP_COLL_MIN_SPLIT_CHUNK)
    bytes = chunkBytes < ZPP_COLL_MIN_SPLIT_CHUNK ? chunkBytes : ZPP_COLL_MIN_SPLIT_CHUNK;
  return zppCollCutUnits(bytes / zppDtypeSize(type), block);
}

size_t zppCollCutUnits(size_t elems, int block) {
  /* Whole escape groups: a segment counts its groups from its first element,
   * so cuts at multiples of the group leave every group, and so every
   * escape, where an uncut tensor has it: the result does not depend on
   * the pipeline chunk (host or device; docs/codecs.md, "Where a tensor is
   * cut"). */
  size_t unit = (size_t)block > ZPP_QUANT_ESC_GROUP ? (size_t)block : ZPP_QUANT_ESC_GROUP;
  elems -= elems % unit;
  return elems < unit ? unit : elems;
}

size_t zppCollChunkElems(const zppCollCtx_t* c, zppDataType_t type, int block, int fanIn) {
  return zppCollChunkElemsFor(c->chunkBytes, type, block, fanIn);
}
