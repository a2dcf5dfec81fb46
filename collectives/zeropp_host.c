/* ZeRO++ on host buffers: the per-communicator state (sequence numbers,
 * ring, scratch), message signatures, and the executor jobs of qwZ and qgZ.
 * hpZ's jobs live with its object in hpz.c. See zeropp.h, zeropp_host.h. */
#include "zeropp_host.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_common.h"
#include "coll_host.h"
#include "zeropp.h"

#include "check.h"
#include "params.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"


struct zppZeropp {
  int formatterSet; /* ours describes plain and ZeRO++ signatures */
  int* ring;
  int* ringPos;
  zppScratchPool_t scratch;
  size_t chunkBytes;
  int depth;
};

/* ---- state ------------------------------------------------------------------ */

void zppZeroppFree(struct zppComm* comm) {
  if (comm == NULL || comm->zeropp == NULL) return;
  struct zppZeropp* st = comm->zeropp;
  zppScratchPoolFree(&st->scratch);
  free(st->ring);
  free(st->ringPos);
  free(st);
  comm->zeropp = NULL;
}

static zppResult_t stateGet(struct zppComm* comm, struct zppZeropp** out) {
  if (comm->zeropp) {
    *out = comm->zeropp;
    return zppSuccess;
  }
  zppResult_t res = zppSuccess;
  struct zppZeropp* st = NULL;
  ZPP_CALLOCGOTO(st, 1, res, fail);
  /* The plain collectives' ring (node by node) and pipeline settings. */
  ZPPCHECKGOTO(zppCollRingCreate(comm->topo, comm->nranks, &st->ring, &st->ringPos), res, fail);
  ZPPCHECKGOTO(zppCollPipelineParams(&st->chunkBytes, &st->depth), res, fail);
  comm->zeropp = st;
  comm->zeroppFree = zppZeroppFree;
  *out = st;
  return zppSuccess;
fail:
  if (st) {
    free(st->ring);
    free(st->ringPos);
    free(st);
  }
  return res;
}

/* ---- signatures ------------------------------------------------------------- */

/* Same layout as the plain collectives' (coll_host.c): kind, type, op, then
 * a 10-bit hash of what else must agree, so one formatter reads both. */
static uint32_t makeSig(zppOpKind_t kind, zppDataType_t type, int op, const uint64_t* vals,
                        int nvals, size_t chunkBytes) {
  uint64_t all[12];
  int n = 0;
  for (int i = 0; i < nvals && n < 11; i++) all[n++] = vals[i];
  all[n++] = (uint64_t)chunkBytes;
  return zppCollSig(kind, type, op, all, n);
}

void zppZeroppDescribeMismatch(uint32_t theirs, uint32_t mine, char* buf, size_t len) {
  unsigned k1 = (theirs >> 17) & 7u, k2 = (mine >> 17) & 7u;
  if (k1 < zppOpQwZ && k2 < zppOpQwZ) {
    zppHostCollDescribeMismatch(theirs, mine, buf, len);
    return;
  }
  zppCollDescribeMismatch(theirs, mine, "count, bits, block, pipeline chunk and forward or backward",
                          buf, len);
}

/* ---- one operation ------------------------------------------------------------ */

zppResult_t zppZeroppBegin(struct zppComm* comm, zppOpKind_t kind, zppDataType_t type, int op,
                           const uint64_t* vals, int nvals, zppCollCtx_t* c) {
  int err = atomic_load(&comm->asyncError);
  if (err != zppSuccess) return (zppResult_t)err; /* logged when it happened */
  struct zppZeropp* st = NULL;
  ZPPCHECK(stateGet(comm, &st));
  zppP2p_t* p2p = comm->transports->p2p;
  if (comm->nranks > 1 && p2p == NULL)
    ZPP_FAIL(zppInvalidUsage, COLL, "%s: no host transport (built without UCX)", comm->name);
  uint32_t seq = 0;
  if (p2p) {
    /* The plain collectives' sequence space and checks (health, leftovers
     * of the last operation): the transport tells calls apart by sequence
     * number, so every operation on the communicator needs its own. */
    ZPPCHECK(zppHostCollBeginOp(comm, &seq));
    if (!st->formatterSet) {
      zppP2pSetSigFormatter(p2p, zppZeroppDescribeMismatch);
      st->formatterSet = 1;
    }
  }
  memset(c, 0, sizeof(*c));
  c->comm = comm;
  c->p2p = p2p;
  c->rank = comm->rank;
  c->nranks = comm->nranks;
  c->ring = st->ring;
  c->ringPos = st->ringPos;
  c->id.seq = seq;
  c->id.step = 0;
  c->id.sig = makeSig(kind, type, op, vals, nvals, st->chunkBytes);
  c->id.opKind = kind;
  c->chunkBytes = st->chunkBytes;
  c->depth = st->depth;
  c->scratch = zppScratchPoolGet;
  c->scratchOwner = &st->scratch;
  ZPP_DBG(COLL, "%s: rank %d: %s seq %u sig 0x%05x", comm->name, comm->rank, zppOpKindName(kind), c->id.seq,
          c->id.sig);
  return zppSuccess;
}

zppResult_t zppZeroppEnd(zppCollCtx_t* c, zppResult_t res, int agreed) {
  struct zppComm* comm = c->comm;
  struct zppZeropp* st = comm->zeropp;
  if (c->p2p) zppHostCollEndOp(comm, c->id.seq, c->id.sig);
  if (res != zppSuccess && !agreed) {
    /* The ranks no longer agree on where they are: the communicator is
     * broken (the transport recorded why, unless the failure was local). */
    if (atomic_load(&comm->asyncError) == zppSuccess)
      zppCommStateSetError(comm, res, "%s: rank %d: %s failed locally (%s)", comm->name, comm->rank,
                      zppOpKindName((zppOpKind_t)c->id.opKind), zppGetErrorString(res));
    if (c->p2p) zppP2pQuiesce(c->p2p);
  }
  /* After the quiesce: until then a receive may still land in scratch. */
  if (st) zppScratchPoolTrim(&st->scratch);
  return res;
}

void zppZeroppProgress(const zppCollCtx_t* c) {
  /* An error found here is found again by the next wait. */
  if (c->p2p) (void)zppP2pPoll(c->p2p);
}

size_t zppZeroppChunkElems(const zppCollCtx_t* c, zppDataType_t type, int block, int fanIn) {
  size_t bytes = c->chunkBytes / (size_t)(fanIn > 1 ? fanIn : 1);
  if (bytes < ZPP_ZEROPP_MIN_SPLIT_CHUNK)
    bytes = c->chunkBytes < ZPP_ZEROPP_MIN_SPLIT_CHUNK ? c->chunkBytes : ZPP_ZEROPP_MIN_SPLIT_CHUNK;
  size_t e = bytes / zppTypeSize(type);
  e -= e % (size_t)block;
  return e < (size_t)block ? (size_t)block : e;
}

/* ---- qwZ job ------------------------------------------------------------------ */

static zppResult_t qwzJob(struct zppComm* comm, void* arg) {
  const zppQwzCall_t* a = arg;
  zppCollCtx_t c;
  uint64_t vals[3] = {a->count, (uint64_t)a->bits, (uint64_t)a->block};
  ZPPCHECK(zppZeroppBegin(comm, a->kind, a->type, -1, vals, 3, &c));
  zppQwzLayout_t l;
  zppResult_t res =
      zppCollQwzLayout(a->count, a->type, a->bits, a->block, zppZeroppChunkElems(&c, a->type, a->block, 1), &l);
  if (res == zppSuccess) {
    void* packed = zppCollScratch(&c, ZPP_ZSCRATCH_PACKED, (size_t)c.nranks * l.shardPacked);
    if (packed == NULL) {
      ZPP_ERR(COLL, "qwZ: out of memory for %zu bytes of packed shards",
              (size_t)c.nranks * l.shardPacked);
      res = zppSystemError;
    } else {
      res = zppCollQwzRun(&c, &l, a->send, a->recv, packed);
    }
  }
  return zppZeroppEnd(&c, res, 0);
}

zppResult_t zppZeroppIssueQwz(struct zppComm* comm, const zppQwzCall_t* call, zppHostStream_t stream) {
  return zppExecutorSubmit(comm->transports->exec, qwzJob, call, sizeof(*call), stream);
}

/* ---- qgZ job ------------------------------------------------------------------ */

/* The arguments with their own copy of the caller's arrays (the call may
 * return before the job runs). Freed by the job; a job the executor drops
 * unrun (communicator aborted or being destroyed) leaks it. */
typedef struct {
  zppQgzArgs_t a;
  const void** send;
  void** recv;
  size_t* counts;
} qgzBlock_t;

static zppResult_t qgzJob(struct zppComm* comm, void* arg) {
  qgzBlock_t* b = *(qgzBlock_t**)arg;
  const zppQgzArgs_t* a = &b->a;
  /* Every tensor's count must agree: fold them into the signature. */
  uint64_t h = 1469598103934665603ull;
  for (int t = 0; t < a->ntensors; t++) h = (h ^ (uint64_t)a->counts[t]) * 1099511628211ull;
  uint64_t vals[4] = {(uint64_t)a->ntensors, h, (uint64_t)a->bits, (uint64_t)a->block};
  zppCollCtx_t c;
  zppResult_t res = zppZeroppBegin(comm, zppOpQgZ, a->type, (int)a->op, vals, 4, &c);
  if (res == zppSuccess) res = zppZeroppEnd(&c, zppCollQgzRun(&c, a), 0);
  free(b);
  return res;
}

zppResult_t zppZeroppIssueQgz(struct zppComm* comm, const zppQgzArgs_t* args, zppHostStream_t stream) {
  size_t n = (size_t)args->ntensors;
  qgzBlock_t* b = calloc(1, sizeof(*b) + n * (2 * sizeof(void*) + sizeof(size_t)));
  if (b == NULL) ZPP_FAIL(zppSystemError, COLL, "qgZ: out of memory for %zu tensors", n);
  b->send = (const void**)(b + 1);
  b->recv = (void**)(b->send + n);
  b->counts = (size_t*)(b->recv + n);
  for (size_t t = 0; t < n; t++) {
    b->send[t] = args->send[t];
    b->recv[t] = args->recv[t];
    b->counts[t] = args->counts[t];
  }
  b->a = *args;
  b->a.send = b->send;
  b->a.recv = b->recv;
  b->a.counts = b->counts;
  return zppExecutorSubmit(comm->transports->exec, qgzJob, &b, sizeof(b), stream);
}
