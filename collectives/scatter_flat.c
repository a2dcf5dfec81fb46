/* Scatter, flat: the root sends every other rank its block, in batches that
 * bound the requests in flight; every other rank waits for one message.
 * One step of latency; the root's link carries (n-1)/n of its input, as
 * any scatter's must. */
#include "coll.h"

#include "check.h"

zppResult_t zppCollScatterFlat(zppCollCtx_t* c, const void* send, void* mine, size_t total,
                               size_t elemBytes, int root) {
  const int n = c->nranks, r = c->rank;
  zppMsgId_t id = zppCollMsg(c, 0);
  if (r != root)
    return zppP2pSendRecv(c->p2p, -1, NULL, 0, root, mine, zppBlockCount(total, n, r) * elemBytes, &id);
  enum { BATCH = 16 };
  zppP2pReq_t* reqs[BATCH];
  const char* base = send;
  for (int first = 1; first < n; first += BATCH) {
    int k = 0;
    for (int i = first; i < n && k < BATCH; i++, k++) {
      int p = (root + i) % n;
      ZPPCHECK(zppP2pIsend(c->p2p, p, base + zppBlockOffset(total, n, p) * elemBytes,
                           zppBlockCount(total, n, p) * elemBytes, &id, &reqs[k]));
    }
    ZPPCHECK(zppP2pWaitAll(c->p2p, reqs, k));
  }
  return zppSuccess;
}
