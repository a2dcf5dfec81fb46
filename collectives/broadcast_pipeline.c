/* Broadcast, pipelined chain: the ranks in ring order starting at the root
 * form a chain; the data flows down it in chunks, each rank forwarding a
 * chunk as soon as it arrived. Every link carries the data once, so for
 * large messages the time approaches size / link bandwidth whatever the
 * rank count. */
#include <stdlib.h>

#include "coll.h"

#include "check.h"

zppResult_t zppCollBroadcastPipeline(zppCollCtx_t* c, void* buf, size_t bytes, int root) {
  const int n = c->nranks;
  const int pos = c->ringPos[c->rank];
  const int chainPos = (pos - c->ringPos[root] + n) % n;
  const int prev = chainPos > 0 ? c->ring[(pos - 1 + n) % n] : -1;
  const int next = chainPos < n - 1 ? c->ring[(pos + 1) % n] : -1;
  const int depth = c->depth > 0 ? c->depth : 1;
  const size_t chunk = c->chunkBytes ? c->chunkBytes : bytes;
  const size_t nChunks = (bytes + chunk - 1) / chunk;
  char* data = buf;
  zppResult_t res = zppSuccess;
  zppP2pReq_t** reqs = calloc(2 * (size_t)depth, sizeof(*reqs)); /* [slot] recv, [depth+slot] send */
  if (reqs == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory");

  size_t posted = 0;
  for (size_t k = 0; k < nChunks; k++) {
    size_t len = bytes - k * chunk < chunk ? bytes - k * chunk : chunk;
    int slot = (int)(k % (size_t)depth);
    if (prev >= 0) {
      for (; posted < nChunks && posted < k + (size_t)depth; posted++) {
        size_t plen = bytes - posted * chunk < chunk ? bytes - posted * chunk : chunk;
        zppMsgId_t id = zppCollMsg(c, (uint32_t)posted);
        ZPPCHECKGOTO(
            zppP2pIrecv(c->p2p, prev, data + posted * chunk, plen, &id, &reqs[posted % (size_t)depth]),
            res, out);
      }
      ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &reqs[slot], 1), res, out);
    }
    if (next >= 0) {
      /* Bounds the sends in flight to `depth`. */
      ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &reqs[depth + slot], 1), res, out);
      zppMsgId_t id = zppCollMsg(c, (uint32_t)k);
      ZPPCHECKGOTO(zppP2pIsend(c->p2p, next, data + k * chunk, len, &id, &reqs[depth + slot]), res,
                   out);
    }
  }
  ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, reqs, 2 * depth), res, out);
out:
  free(reqs);
  return res;
}
