/* ZeRO++ on host buffers: the executor jobs of qwZ and qgZ, each one
 * operation of the collective context (coll.h). hpZ's jobs live with its
 * object in hpz.c. See zeropp.h, zeropp_host.h. */
#include "zeropp_host.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_common.h"
#include "zeropp.h"

#include "check.h"
#include "params.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"

/* ---- qwZ job ------------------------------------------------------------------ */

static zppResult_t qwzJob(struct zppComm* comm, void* arg) {
  const zppQwzCall_t* a = arg;
  zppCollCtx_t c;
  uint64_t vals[4] = {a->count, (uint64_t)a->bits, (uint64_t)a->block, (uint64_t)a->flags};
  ZPPCHECK(zppCollBegin(comm, a->kind, &c));
  zppCollSign(&c, a->type, -1, vals, 4);
  zppQwzLayout_t l;
  zppResult_t res = zppCollQwzLayout(a->count, a->type, a->bits, a->block, a->flags,
                                     zppCollChunkElems(&c, a->type, a->block, 1), &l);
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
  return zppCollEnd(&c, res, 0);
}

zppResult_t zppZeroppIssueQwz(struct zppComm* comm, const zppQwzCall_t* call, zppHostStream_t stream) {
  return zppExecutorSubmit(comm->transports->exec, qwzJob, NULL, call, sizeof(*call), stream);
}

/* ---- qgZ job ------------------------------------------------------------------ */

/* The arguments with their own copy of the caller's arrays (the call may
 * return before the job runs). The job frees it when it ran, the executor's
 * drop callback when it never will (communicator aborted or destroyed). */
typedef struct {
  zppQgzArgs_t a;
  const void** send;
  void** recv;
  size_t* counts;
  struct zppGrad** grads;    /* [ntensors] error feedback, or NULL */
  zppQuantResid_t* efSendIn; /* [ntensors] each, with grads: the residuals the job uses */
  zppQuantResid_t* efSendOut;
  zppQuantResid_t* efReduceIn;
  zppQuantResid_t* efReduceOut;
} qgzBlock_t;

static void qgzSettle(qgzBlock_t* b, int succeeded) {
  if (b->grads == NULL) return;
  for (int t = 0; t < b->a.ntensors; t++) {
    struct zppGrad* g = b->grads[t];
    /* A call that failed changed nothing the next one reads. */
    if (succeeded) {
      atomic_store(&g->cur, atomic_load(&g->cur) ^ 1);
      atomic_store(&g->undoable, 1);
      atomic_fetch_add(&g->calls, 1);
    }
    atomic_fetch_sub(&g->inFlight, 1);
  }
}

static void qgzDrop(void* arg) {
  qgzBlock_t* b = *(qgzBlock_t**)arg;
  qgzSettle(b, 0);
  free(b);
}

static zppResult_t qgzJob(struct zppComm* comm, void* arg) {
  qgzBlock_t* b = *(qgzBlock_t**)arg;
  zppQgzArgs_t* a = &b->a;
  if (b->grads) {                           /* the residuals as the calls before this one left them */
    int hasReduce = b->grads[0]->hasReduce; /* the topology's: alike for every handle */
    for (int t = 0; t < a->ntensors; t++) {
      struct zppGrad* g = b->grads[t];
      int cur = atomic_load(&g->cur);
      size_t nSend = zppGradResidElems(g, 0);
      b->efSendIn[t] = zppQuantResidIn(g->send[cur], nSend);
      b->efSendOut[t] = zppQuantResidIn(g->send[cur ^ 1], nSend);
      if (hasReduce) {
        size_t nReduce = zppGradResidElems(g, 1);
        b->efReduceIn[t] = zppQuantResidIn(g->reduce[cur], nReduce);
        b->efReduceOut[t] = zppQuantResidIn(g->reduce[cur ^ 1], nReduce);
      }
    }
    a->efSendIn = b->efSendIn;
    a->efSendOut = b->efSendOut;
    a->efReduceIn = hasReduce ? b->efReduceIn : NULL;
    a->efReduceOut = hasReduce ? b->efReduceOut : NULL;
  }
  /* Every tensor's count must agree: fold them into the signature, and
   * error feedback too (ranks that disagree on it fail as a mismatch). */
  uint64_t h = 1469598103934665603ull;
  for (int t = 0; t < a->ntensors; t++) h = (h ^ (uint64_t)a->counts[t]) * 1099511628211ull;
  uint64_t vals[6] = {(uint64_t)a->ntensors, h,
                      (uint64_t)a->bits,     (uint64_t)a->block,
                      (uint64_t)a->flags,    (uint64_t)(b->grads != NULL)};
  zppCollCtx_t c;
  zppResult_t res = zppCollBegin(comm, zppOpQgZ, &c);
  if (res == zppSuccess) {
    zppCollSign(&c, a->type, (int)a->op, vals, 6);
    res = zppCollEnd(&c, zppCollQgzRun(&c, a), 0);
  }
  qgzSettle(b, res == zppSuccess);
  free(b);
  return res;
}

zppResult_t zppZeroppIssueQgz(struct zppComm* comm, const zppQgzArgs_t* args,
                              struct zppGrad* const* grads, zppHostStream_t stream) {
  size_t n = (size_t)args->ntensors;
  size_t perTensor =
      2 * sizeof(void*) + sizeof(size_t) + (grads ? sizeof(void*) + 4 * sizeof(zppQuantResid_t) : 0);
  qgzBlock_t* b = calloc(1, sizeof(*b) + n * perTensor);
  if (b == NULL) ZPP_FAIL(zppSystemError, COLL, "qgZ: out of memory for %zu tensors", n);
  void** ptrs = (void**)(b + 1); /* the pointer arrays, the counts, then the residuals */
  b->send = (const void**)ptrs;
  b->recv = ptrs + n;
  b->counts = (size_t*)(ptrs + (grads ? 3 : 2) * n);
  if (grads) {
    b->grads = (struct zppGrad**)(ptrs + 2 * n);
    b->efSendIn = (zppQuantResid_t*)(b->counts + n);
    b->efSendOut = b->efSendIn + n;
    b->efReduceIn = b->efSendIn + 2 * n;
    b->efReduceOut = b->efSendIn + 3 * n;
  }
  for (size_t t = 0; t < n; t++) {
    b->send[t] = args->send[t];
    b->recv[t] = args->recv[t];
    b->counts[t] = args->counts[t];
    if (grads) {
      b->grads[t] = grads[t];
      atomic_fetch_add(&grads[t]->inFlight, 1);
    }
  }
  b->a = *args;
  b->a.send = b->send;
  b->a.recv = b->recv;
  b->a.counts = b->counts;
  return zppExecutorSubmit(comm->transports->exec, qgzJob, qgzDrop, &b, sizeof(b), stream);
}
