/* Broadcast, binomial tree: ceil(log2 n) rounds, the number of ranks that
 * hold the data doubling each round. For small messages, where latency
 * dominates. Ranks are numbered relative to the root. */
#include "coll.h"

#include "check.h"

zppResult_t zppCollBroadcastBinomial(zppCollCtx_t* c, void* buf, size_t bytes, int root) {
  const int n = c->nranks;
  const int vr = (c->rank - root + n) % n;
  zppMsgId_t id = zppCollMsg(c, 0);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      int parent = (vr - mask + root) % n;
      ZPPCHECK(zppP2pSendRecv(c->p2p, -1, NULL, 0, parent, buf, bytes, &id));
      break;
    }
    mask <<= 1;
  }
  /* Children: vr + mask for every mask below the bit this rank received on. */
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) {
      int child = (vr + mask + root) % n;
      ZPPCHECK(zppP2pSendRecv(c->p2p, child, buf, bytes, -1, NULL, 0, &id));
    }
  }
  return zppSuccess;
}
