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
  struct zppGrad* grad; /* error feedback, or NULL */
} qgzBlock_t;

static void qgzDrop(void* arg) {
  qgzBlock_t* b = *(qgzBlock_t**)arg;
  if (b->grad) atomic_fetch_sub(&b->grad->inFlight, 1);
  free(b);
}

static zppResult_t qgzJob(struct zppComm* comm, void* arg) {
  qgzBlock_t* b = *(qgzBlock_t**)arg;
  zppQgzArgs_t* a = &b->a;
  struct zppGrad* grad = b->grad;
  if (grad) { /* the residuals as the calls before this one left them */
    int cur = atomic_load(&grad->cur);
    a->efSendIn = grad->send[cur];
    a->efSendOut = grad->send[cur ^ 1];
    a->efReduceIn = grad->hasReduce ? grad->reduce[cur] : NULL;
    a->efReduceOut = grad->hasReduce ? grad->reduce[cur ^ 1] : NULL;
  }
  /* Every tensor's count must agree: fold them into the signature, and
   * error feedback too (ranks that disagree on it fail as a mismatch). */
  uint64_t h = 1469598103934665603ull;
  for (int t = 0; t < a->ntensors; t++) h = (h ^ (uint64_t)a->counts[t]) * 1099511628211ull;
  uint64_t vals[6] = {(uint64_t)a->ntensors, h,
                      (uint64_t)a->bits,     (uint64_t)a->block,
                      (uint64_t)a->flags,    (uint64_t)(grad != NULL)};
  zppCollCtx_t c;
  zppResult_t res = zppCollBegin(comm, zppOpQgZ, &c);
  if (res == zppSuccess) {
    zppCollSign(&c, a->type, (int)a->op, vals, 6);
    res = zppCollEnd(&c, zppCollQgzRun(&c, a), 0);
  }
  if (grad) {
    /* A call that failed changed nothing the next one reads. */
    if (res == zppSuccess) {
      atomic_store(&grad->cur, atomic_load(&grad->cur) ^ 1);
      atomic_store(&grad->undoable, 1);
      atomic_fetch_add(&grad->calls, 1);
    }
    atomic_fetch_sub(&grad->inFlight, 1);
  }
  free(b);
  return res;
}

zppResult_t zppZeroppIssueQgz(struct zppComm* comm, const zppQgzArgs_t* args, struct zppGrad* grad,
                              zppHostStream_t stream) {
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
  b->grad = grad;
  if (grad) atomic_fetch_add(&grad->inFlight, 1);
  return zppExecutorSubmit(comm->transports->exec, qgzJob, qgzDrop, &b, sizeof(b), stream);
}
