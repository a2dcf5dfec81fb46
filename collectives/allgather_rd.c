/* All-gather, recursive doubling, for a power-of-two rank count: log2 n
 * steps; in step k a rank swaps the 2^k blocks it holds (an aligned run of
 * them) with rank ^ 2^k. Same step count as Bruck, but each step is a
 * pairwise exchange in place in the output: no scratch, no final rotation,
 * and a step waits on one partner only, not on a chain of ranks, which
 * matters when ranks share cores (a partner pair makes progress as soon as
 * both of its ranks run). Other rank counts use Bruck. */
#include "coll.h"

#include "check.h"

zppResult_t zppCollAllGatherRecDoubling(zppCollCtx_t* c, void* recv, size_t blockBytes) {
  const int n = c->nranks, r = c->rank;
  if (n & (n - 1))
    ZPP_FAIL(zppInternalError, COLL, "recursive-doubling all-gather on %d ranks (not a power of two)",
             n);
  char* out = recv;
  uint32_t step = 0;
  for (int k = 1; k < n; k <<= 1, step++) {
    const int peer = r ^ k;
    const size_t mine = (size_t)(r & ~(k - 1)) * blockBytes; /* first block held */
    const size_t theirs = (size_t)(peer & ~(k - 1)) * blockBytes;
    zppMsgId_t id = zppCollMsg(c, step);
    ZPPCHECK(zppP2pSendRecv(c->p2p, peer, out + mine, (size_t)k * blockBytes, peer, out + theirs,
                            (size_t)k * blockBytes, &id));
  }
  return zppSuccess;
}
