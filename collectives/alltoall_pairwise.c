/* All-to-all, pairwise exchange: in step s a rank sends to rank + s and
 * receives from rank - s, so every step is a permutation and no rank is
 * flooded. `depth` steps run at once to hide latency. In place (in == out)
 * the input is copied aside first. A step sends before it posts its
 * receive: the message is on its way sooner, and one that arrives first
 * costs UCX an eager copy at most (a rendezvous message waits for its
 * receive without one). n-1 steps; each rank sends and receives all but its
 * own part once. The exchange takes a layout per side, so that the uneven
 * all-to-all (alltoallv_pairwise.c) runs the same steps. */
#include <string.h>

#include "coll.h"

#include "check.h"

zppResult_t zppCollPairwiseExchange(zppCollCtx_t* c, const void* in, const zppCollLayout_t* send,
                                    void* out, const zppCollLayout_t* recv) {
  const int n = c->nranks, r = c->rank;
  const int depth = c->depth > 0 ? c->depth : 1;
  const char* src = in;
  char* dst = out;
  size_t own = zppCollPartBytes(send, r);
  if (own) memcpy(dst + zppCollPartDispl(recv, r), src + zppCollPartDispl(send, r), own);
  /* ZPP_PIPELINE_DEPTH is at most 64 (coll_common.c). */
  enum { MAX_DEPTH = 64 };
  zppP2pReq_t* reqs[2 * MAX_DEPTH] = {NULL};
  if (depth > MAX_DEPTH)
    ZPP_FAIL(zppInternalError, COLL, "all-to-all depth %d over %d", depth, MAX_DEPTH);
  for (int s = 1; s < n; s++) {
    int slot = s % depth;
    ZPPCHECK(zppP2pWaitAll(c->p2p, &reqs[2 * slot], 2));
    int to = (r + s) % n, from = (r - s + n) % n;
    zppMsgId_t id = zppCollMsg(c, (uint32_t)s);
    /* An empty part is no message: both sides agree on it (all-to-all-v
     * compares counts first), and its buffer may be NULL. */
    size_t sb = zppCollPartBytes(send, to), rb = zppCollPartBytes(recv, from);
    if (sb)
      ZPPCHECK(zppP2pIsend(c->p2p, to, src + zppCollPartDispl(send, to), sb, &id, &reqs[2 * slot + 1]));
    if (rb)
      ZPPCHECK(zppP2pIrecv(c->p2p, from, dst + zppCollPartDispl(recv, from), rb, &id, &reqs[2 * slot]));
  }
  return zppP2pWaitAll(c->p2p, reqs, 2 * depth);
}

zppResult_t zppCollAllToAllPairwise(zppCollCtx_t* c, const void* in, void* out, size_t blockBytes) {
  const int n = c->nranks;
  const zppCollLayout_t even = {NULL, NULL, blockBytes};
  if (in == out) {
    char* copy = zppCollScratch(c, 0, (size_t)n * blockBytes);
    if (copy == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory for in-place all-to-all");
    memcpy(copy, in, (size_t)n * blockBytes);
    in = copy;
  }
  return zppCollPairwiseExchange(c, in, &even, out, &even);
}
