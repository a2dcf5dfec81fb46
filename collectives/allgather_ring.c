/* All-gather, ring: n-1 steps, each forwarding to the next rank the block
 * received in the step before. Bandwidth-optimal: every rank sends and
 * receives (n-1)/n of the data once. The ring runs node by node (see
 * coll.h), so each node's links carry one flow in and one out. */
#include "coll.h"

#include "check.h"

zppResult_t zppCollAllGatherRing(zppCollCtx_t* c, void* recv, size_t total, size_t elemBytes,
                                 uint32_t stepBase) {
  const int n = c->nranks;
  const int pos = c->ringPos[c->rank];
  const int next = c->ring[(pos + 1) % n];
  const int prev = c->ring[(pos + n - 1) % n];
  char* base = recv;
  for (int s = 0; s < n - 1; s++) {
    /* Step s sends the block that started s hops back along the ring. */
    int sb = c->ring[(pos - s + n) % n];
    int rb = c->ring[(pos - s - 1 + 2 * n) % n];
    zppMsgId_t id = zppCollMsg(c, stepBase + (uint32_t)s);
    ZPPCHECK(zppP2pSendRecv(c->p2p, next, base + zppBlockOffset(total, n, sb) * elemBytes,
                            zppBlockCount(total, n, sb) * elemBytes, prev,
                            base + zppBlockOffset(total, n, rb) * elemBytes,
                            zppBlockCount(total, n, rb) * elemBytes, &id));
  }
  return zppSuccess;
}
