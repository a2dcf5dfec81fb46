/* Broadcast, flat tree: the root sends to every other rank itself, and
 * every other rank waits for one message only. For small messages between
 * the ranks of one node, where a send is a copy into a shared-memory ring
 * (tens of ns) and the depth of a tree is what costs: every level is a rank
 * that must be running to forward, and ranks that share cores take turns
 * (4 ranks on 2 cores: see docs/collectives.md). */
#include "coll.h"

#include "check.h"

zppResult_t zppCollBroadcastFlat(zppCollCtx_t* c, void* buf, size_t bytes, int root) {
  const int n = c->nranks;
  zppMsgId_t id = zppCollMsg(c, 0);
  if (c->rank != root) return zppP2pSendRecv(c->p2p, -1, NULL, 0, root, buf, bytes, &id);
  /* The sends in flight together, in batches that bound the request slots
   * (on an error the transport's quiesce ends those still live). */
  enum { BATCH = 8 };
  zppP2pReq_t* reqs[BATCH];
  for (int first = 1; first < n; first += BATCH) {
    int k = 0;
    for (int i = first; i < n && k < BATCH; i++, k++)
      ZPPCHECK(zppP2pIsend(c->p2p, (root + i) % n, buf, bytes, &id, &reqs[k]));
    ZPPCHECK(zppP2pWaitAll(c->p2p, reqs, k));
  }
  return zppSuccess;
}
