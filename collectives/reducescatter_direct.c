/* Reduce-scatter, direct: every rank sends each peer its block at once and
 * sums what it receives, in rank order. One step of latency; each rank
 * moves (n-1)/n of the data like the ring, but as n-1 concurrent messages,
 * which suits small sizes. The sends go out before the receives are posted:
 * a message is on its way sooner, and at these sizes one that arrives
 * before its receive costs a small copy at most. */
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "reduce_ops.h"

#include "check.h"
#include "names.h"

zppResult_t zppCollReduceScatterDirect(zppCollCtx_t* c, const void* in, void* out, size_t total,
                                       zppDataType_t type, zppRedOp_t op) {
  const int n = c->nranks, r = c->rank;
  const size_t ts = zppDtypeSize(type);
  const size_t mine = zppBlockCount(total, n, r) * ts;
  const char* inp = in;
  zppResult_t res = zppSuccess;
  char* parts = zppCollScratch(c, 0, (size_t)n * mine);
  char* acc = zppCollScratch(c, 1, mine);
  /* Request slots on the stack for the usual rank counts: an allocation is
   * a noticeable part of a call this small. */
  enum { STACK_RANKS = 32 };
  zppP2pReq_t* stackReqs[2 * STACK_RANKS] = {NULL};
  zppP2pReq_t** reqs = n <= STACK_RANKS ? stackReqs : calloc(2 * (size_t)n, sizeof(*reqs));
  if (parts == NULL || acc == NULL || reqs == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, COLL, "out of memory for reduce-scatter buffers");
  zppMsgId_t id = zppCollMsg(c, 0);
  /* Staggered, so that not every rank sends to rank 0 first. */
  for (int i = 1; i < n; i++) {
    int p = (r + i) % n;
    ZPPCHECKGOTO(zppP2pIsend(c->p2p, p, inp + zppBlockOffset(total, n, p) * ts,
                             zppBlockCount(total, n, p) * ts, &id, &reqs[2 * p + 1]),
                 res, out);
  }
  for (int i = 1; i < n; i++) {
    int p = (r + i) % n;
    ZPPCHECKGOTO(zppP2pIrecv(c->p2p, p, parts + (size_t)p * mine, mine, &id, &reqs[2 * p]), res, out);
  }
  ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, reqs, 2 * n), res, out);
  /* Rank order, so that the result does not depend on arrival order. */
  const char* own = inp + zppBlockOffset(total, n, r) * ts;
  const size_t elems = zppBlockCount(total, n, r);
  memcpy(acc, r == 0 ? own : parts, mine);
  for (int q = 1; q < n; q++)
    zppRedApply(acc, acc, q == r ? own : parts + (size_t)q * mine, elems, type, op);
  memcpy(out, acc, mine);
out:
  if (reqs != stackReqs) free(reqs);
  return res;
}
