/* Gather, flat: every rank sends its block to the root, which receives them
 * all, in batches that bound the requests in flight. One step of latency;
 * the root's link carries (n-1)/n of the result, as any gather's must. The
 * root posts its receives staggered from its own rank, so that ranks are
 * not all served in the same order. */
#include "coll.h"

#include "check.h"

zppResult_t zppCollGatherFlat(zppCollCtx_t* c, const void* mine, void* recv, size_t total,
                              size_t elemBytes, int root) {
  const int n = c->nranks, r = c->rank;
  zppMsgId_t id = zppCollMsg(c, 0);
  if (r != root)
    return zppP2pSendRecv(c->p2p, root, mine, zppBlockCount(total, n, r) * elemBytes, -1, NULL, 0, &id);
  enum { BATCH = 16 };
  zppP2pReq_t* reqs[BATCH];
  char* base = recv;
  for (int first = 1; first < n; first += BATCH) {
    int k = 0;
    for (int i = first; i < n && k < BATCH; i++, k++) {
      int p = (root + i) % n;
      ZPPCHECK(zppP2pIrecv(c->p2p, p, base + zppBlockOffset(total, n, p) * elemBytes,
                           zppBlockCount(total, n, p) * elemBytes, &id, &reqs[k]));
    }
    ZPPCHECK(zppP2pWaitAll(c->p2p, reqs, k));
  }
  return zppSuccess;
}
