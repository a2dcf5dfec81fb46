/* Reduce-scatter, ring, pipelined in chunks.
 *
 * n-1 steps: in step s a rank sends the partial sum of one block to the next
 * rank and receives the partial sum of the following block from the
 * previous one; it adds its own input for that block and sends it on in step
 * s+1. After the last step it holds the full sum of its own block.
 * Bandwidth-optimal like the ring all-gather.
 *
 * Step-major, chunk-pipelined: every block is cut into the same number K of
 * chunks. A chunk of step s+1 goes out as soon as the same chunk of step s
 * has arrived and been reduced, so while the chain of reductions walks
 * around the ring, the link keeps carrying the other chunks of the step.
 * (An earlier chunk-major order - all steps of chunk 0, then of chunk 1 -
 * waited for each chunk's whole chain before starting the next one and left
 * the link idle for most of a chain: 0.65x of a 1 Gbit/s link on 4 emulated
 * nodes, and worse with larger chunks.)
 *
 * Receives land in two buffers of K chunk slots used in turn: step s
 * receives into buffer s%2, reduces there and sends from there in step s+1.
 * Slot k of buffer s%2 is posted for step s only once the send of step s-1 that
 * used that chunk (from the same buffer, two steps back) completed. That
 * send completes when the next rank posted its receive of step s-1, which
 * depends only on steps before s-1 further along the ring: the waits never
 * close a cycle, whatever K is.
 *
 * Messages between two neighbours go out in step-major, chunk-ascending
 * order and receives are posted in the same order, so tags that wrap (the
 * step field has 8 bits) still match the right message. */
#include <stdlib.h>

#include "coll.h"
#include "reduce_ops.h"

#include "check.h"
#include "names.h"

zppResult_t zppCollReduceScatterRing(zppCollCtx_t* c, const void* in, void* out, size_t total,
                                     zppDataType_t type, zppRedOp_t op) {
  const int n = c->nranks;
  const size_t ts = zppDtypeSize(type);
  const int pos = c->ringPos[c->rank];
  const int next = c->ring[(pos + 1) % n];
  const int prev = c->ring[(pos + n - 1) % n];
  const size_t chunkElems = c->chunkBytes / ts ? c->chunkBytes / ts : 1;
  /* Block 0 is the largest (blocks differ by at most one element). */
  const size_t maxBlock = zppBlockCount(total, n, 0);
  const int nChunks = maxBlock ? (int)((maxBlock + chunkElems - 1) / chunkElems) : 1;
  /* Chunk k of any block fits in a slot of slotElems: blocks differ by one
   * element, so their chunk boundaries differ by one too, and a buffer laid
   * out by one block's boundaries would let a receive of the next block
   * spill into a neighbouring chunk that may still be on its way out. */
  const size_t slotElems = maxBlock ? (maxBlock + (size_t)nChunks - 1) / (size_t)nChunks : 1;
  const int steps = n - 1;
  const char* inp = in;
  zppResult_t res = zppSuccess;

  char* bufs = zppCollScratch(c, 0, 2 * (size_t)nChunks * slotElems * ts);
  /* [parity][chunk]: receives and sends of the steps of that parity. */
  zppP2pReq_t** reqs = calloc(4 * (size_t)nChunks, sizeof(*reqs));
  if (bufs == NULL || reqs == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, COLL, "out of memory for reduce-scatter buffers");
  zppP2pReq_t** recvReq[2] = {reqs, reqs + nChunks};
  zppP2pReq_t** sendReq[2] = {reqs + 2 * (size_t)nChunks, reqs + 3 * (size_t)nChunks};

  /* Block sent in step s; the block received in step s is sent in s+1. */
#define SEND_BLOCK(s) c->ring[(pos - (s)-1 + 2 * n) % n]
#define RECV_BLOCK(s) c->ring[(pos - (s)-2 + 2 * n) % n]
#define CHUNK_OFF(b, k) zppBlockOffset(zppBlockCount(total, n, (b)), nChunks, (k))
#define CHUNK_LEN(b, k) zppBlockCount(zppBlockCount(total, n, (b)), nChunks, (k))
#define BUF(s, k) (bufs + ((size_t)((s) % 2) * (size_t)nChunks + (size_t)(k)) * slotElems * ts)

  /* Step 0: every receive posted, this rank's own input sent. */
  for (int k = 0; k < nChunks; k++) {
    int rb = RECV_BLOCK(0);
    zppMsgId_t id = zppCollMsg(c, (uint32_t)k);
    ZPPCHECKGOTO(zppP2pIrecv(c->p2p, prev, BUF(0, k), CHUNK_LEN(rb, k) * ts, &id, &recvReq[0][k]), res,
                 out);
  }
  for (int k = 0; k < nChunks; k++) {
    int sb = SEND_BLOCK(0);
    zppMsgId_t id = zppCollMsg(c, (uint32_t)k);
    ZPPCHECKGOTO(zppP2pIsend(c->p2p, next, inp + (zppBlockOffset(total, n, sb) + CHUNK_OFF(sb, k)) * ts,
                             CHUNK_LEN(sb, k) * ts, &id, &sendReq[0][k]),
                 res, out);
  }

  for (int s = 0; s < steps; s++) {
    const int p = s % 2, q = (s + 1) % 2;
    const int b = RECV_BLOCK(s);
    for (int k = 0; k < nChunks; k++) {
      ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &recvReq[p][k], 1), res, out);
      const size_t len = CHUNK_LEN(b, k);
      const char* mine = inp + (zppBlockOffset(total, n, b) + CHUNK_OFF(b, k)) * ts;
      char* buf = BUF(s, k);
      if (s == steps - 1) {
        /* The last step brings this rank's own block: sum into the output. */
        zppRedApply((char*)out + CHUNK_OFF(b, k) * ts, buf, mine, len, type, op);
        continue;
      }
      zppRedApply(buf, buf, mine, len, type, op);
      /* Step s+1 sends this chunk on, from where it was reduced. The slot's
       * previous send (step s-1, same parity) finished before step s's
       * receive into it was posted. */
      zppMsgId_t sid = zppCollMsg(c, (uint32_t)((s + 1) * nChunks + k));
      ZPPCHECKGOTO(zppP2pIsend(c->p2p, next, buf, len * ts, &sid, &sendReq[p][k]), res, out);
      /* Step s+1 receives into the other buffer, whose chunk k was sent in
       * step s: wait for that send, then post. */
      ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &sendReq[q][k], 1), res, out);
      const int nb = RECV_BLOCK(s + 1);
      zppMsgId_t rid = zppCollMsg(c, (uint32_t)((s + 1) * nChunks + k));
      ZPPCHECKGOTO(
          zppP2pIrecv(c->p2p, prev, BUF(s + 1, k), CHUNK_LEN(nb, k) * ts, &rid, &recvReq[q][k]), res,
          out);
    }
  }
  ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, reqs, 4 * nChunks), res, out);
#undef SEND_BLOCK
#undef RECV_BLOCK
#undef CHUNK_OFF
#undef CHUNK_LEN
#undef BUF
out:
  free(reqs);
  return res;
}
