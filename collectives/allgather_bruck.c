/* All-gather, Bruck: ceil(log2 n) steps for any n, so small gathers cost a
 * few latencies instead of n-1. In step k a rank sends everything it holds
 * (up to 2^k blocks) to rank - 2^k and appends what rank + 2^k sends. The
 * blocks collect rotated (this rank's first) in scratch and are put in
 * rank order at the end. */
#include <string.h>

#include "coll.h"

#include "check.h"

zppResult_t zppCollAllGatherBruck(zppCollCtx_t* c, void* recv, size_t blockBytes) {
  const int n = c->nranks, r = c->rank;
  char* out = recv;
  char* rot = zppCollScratch(c, 0, (size_t)n * blockBytes);
  if (rot == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory for all-gather scratch");
  memcpy(rot, out + (size_t)r * blockBytes, blockBytes);
  uint32_t step = 0;
  for (int k = 1; k < n; k <<= 1, step++) {
    int cnt = k < n - k ? k : n - k;
    zppMsgId_t id = zppCollMsg(c, step);
    ZPPCHECK(zppP2pSendRecv(c->p2p, (r - k + n) % n, rot, (size_t)cnt * blockBytes, (r + k) % n,
                            rot + (size_t)k * blockBytes, (size_t)cnt * blockBytes, &id));
  }
  for (int i = 1; i < n; i++)
    memcpy(out + (size_t)((r + i) % n) * blockBytes, rot + (size_t)i * blockBytes, blockBytes);
  return zppSuccess;
}
