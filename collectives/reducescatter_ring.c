/* Reduce-scatter, ring, pipelined in chunks.
 *
 * n-1 steps: in step s a rank sends the partial sum of block sendBlock(s)
 * to the next rank and receives the partial sum of block recvBlock(s) =
 * sendBlock(s+1) from the previous one; it adds its own input for that block
 * and sends it on in step s+1. After the last step it holds the full sum of
 * its own block. Bandwidth-optimal like the ring all-gather.
 *
 * Every block is cut into the same number K of chunks, and the work runs
 * chunk by chunk, all steps of chunk 0, then of chunk 1...: message
 * (k, s) is number k*(n-1) + s on both ends. Receives are posted `depth`
 * messages ahead into scratch slots; a slot is reduced in place and sent on
 * from there, and reused once that send completed. Receiving, reducing and
 * sending of neighbouring chunks thus overlap.
 *
 * Why chunk-major and at least two slots: rank r reuses the slot of
 * message m for message m + depth once m's forward has left, that is once
 * rank r+1 posted its receive for message m + 1; rank r+1 posts that when
 * its slot is free, once rank r+2 posted message m + 2 - depth; and so on.
 * The index changes by 1 - depth per hop: with depth >= 2 it decreases
 * along the ring, so the waits cannot close a cycle. Step-major order (all
 * of step 0 first) shifts it by a whole block's chunks instead and
 * deadlocks once a block has more chunks than there are slots. */
#include <stdlib.h>

#include "coll.h"
#include "reduce_ops.h"

#include "check.h"

zppResult_t zppReduceScatterRing(zppCollCtx_t* c, const void* in, void* out, size_t total,
                                 zppDataType_t type, zppRedOp_t op) {
  const int n = c->nranks;
  const size_t ts = zppTypeSize(type);
  const int pos = c->ringPos[c->rank];
  const int next = c->ring[(pos + 1) % n];
  const int prev = c->ring[(pos + n - 1) % n];
  const int depth = c->depth >= 2 ? c->depth : 2;
  const size_t chunkElems = c->chunkBytes / ts ? c->chunkBytes / ts : 1;
  /* Block 0 is the largest (blocks differ by at most one element). */
  const size_t maxBlock = zppBlockCount(total, n, 0);
  const size_t nChunks = maxBlock ? (maxBlock + chunkElems - 1) / chunkElems : 1;
  const size_t slotElems = (maxBlock + nChunks - 1) / nChunks;
  const int steps = n - 1;
  const size_t nMsgs = nChunks * (size_t)steps;
  const char* inp = in;
  zppResult_t res = zppSuccess;

  char* slots = zppCollScratch(c, 0, (size_t)depth * slotElems * ts);
  zppUcxReq_t** reqs = calloc(2 * (size_t)depth, sizeof(*reqs)); /* [slot] recv, [depth+slot] send */
  if (slots == NULL || reqs == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, COLL, "out of memory for reduce-scatter buffers");

  /* Message m is chunk m / steps of step m % steps. */
#define BLOCK_OF_STEP(s) c->ring[(pos - (s) - 2 + 2 * n) % n] /* the block received in step s */
#define CHUNK_OFF(b, k) (zppBlockOffset(total, n, (b)) + zppBlockOffset(zppBlockCount(total, n, (b)), (int)nChunks, (int)(k)))
#define CHUNK_LEN(b, k) zppBlockCount(zppBlockCount(total, n, (b)), (int)nChunks, (int)(k))

  size_t posted = 0;
  for (size_t k = 0; k < nChunks; k++) {
    /* Step 0 sends this rank's own input: no slot, no reduction. */
    int b0 = c->ring[(pos - 1 + n) % n];
    zppUcxReq_t* first = NULL;
    zppMsgId_t id0 = zppCollMsg(c, (uint32_t)(k * (size_t)steps));
    ZPPCHECKGOTO(zppUcxIsend(c->ucx, next, inp + CHUNK_OFF(b0, k) * ts, CHUNK_LEN(b0, k) * ts, &id0,
                             &first),
                 res, out);
    for (int s = 0; s < steps; s++) {
      size_t m = k * (size_t)steps + (size_t)s;
      while (posted < nMsgs && posted < m + (size_t)depth) {
        int slot = (int)(posted % (size_t)depth);
        /* The slot's previous message must have been forwarded first. */
        ZPPCHECKGOTO(zppUcxWaitAll(c->ucx, &reqs[depth + slot], 1), res, out);
        int pb = BLOCK_OF_STEP((int)(posted % (size_t)steps));
        size_t pk = posted / (size_t)steps;
        zppMsgId_t id = zppCollMsg(c, (uint32_t)posted);
        ZPPCHECKGOTO(zppUcxIrecv(c->ucx, prev, slots + (size_t)slot * slotElems * ts,
                                 CHUNK_LEN(pb, pk) * ts, &id, &reqs[slot]),
                     res, out);
        posted++;
      }
      int slot = (int)(m % (size_t)depth);
      ZPPCHECKGOTO(zppUcxWaitAll(c->ucx, &reqs[slot], 1), res, out);
      int b = BLOCK_OF_STEP(s);
      size_t len = CHUNK_LEN(b, k);
      const char* mine = inp + CHUNK_OFF(b, k) * ts;
      char* buf = slots + (size_t)slot * slotElems * ts;
      if (s == steps - 1) {
        /* The last step brings this rank's own block: sum into the output. */
        zppReduce((char*)out + zppBlockOffset(zppBlockCount(total, n, b), (int)nChunks, (int)k) * ts,
                  buf, mine, len, type, op);
      } else {
        zppReduce(buf, buf, mine, len, type, op);
        zppMsgId_t id = zppCollMsg(c, (uint32_t)(m + 1));
        ZPPCHECKGOTO(zppUcxIsend(c->ucx, next, buf, len * ts, &id, &reqs[depth + slot]), res, out);
      }
    }
    ZPPCHECKGOTO(zppUcxWaitAll(c->ucx, &first, 1), res, out);
  }
  ZPPCHECKGOTO(zppUcxWaitAll(c->ucx, reqs, 2 * depth), res, out);
#undef BLOCK_OF_STEP
#undef CHUNK_OFF
#undef CHUNK_LEN
out:
  free(reqs);
  return res;
}
