/* qwZ: quantized weight all-gather on host buffers.
 *
 * Every rank quantizes its shard blockwise; the packed shards go around the
 * node-ordered ring (each node link carries one flow, as in the plain ring);
 * every rank decodes every shard, its own included, so that all ranks hold
 * bit-identical weights (hpZ's backward gather relies on that).
 *
 * Pipelining: a shard travels in chunks of whole blocks (ZPP_PIPELINE_CHUNK_BYTES
 * of input), each its own packed segment (header, scales, data: one message,
 * never a second one for scales). Chunks start on block boundaries, so the
 * result is exactly that of quantizing the whole shard at once. A chunk is
 * forwarded as soon as it arrived and is decoded right after its forward is
 * posted, so decoding overlaps the transfers; every receive is posted up
 * front, so data lands in place.
 *
 * Message k = s * nChunks + c is ring step s, chunk c; its tag step is k mod
 * 256. Between two ranks, messages with equal tags are sent and their
 * receives posted in the same order, so UCX's ordered matching pairs them.
 */
#include <stdlib.h>
#include <string.h>

#include "zeropp.h"

#include "check.h"
#include "names.h"
#include "quant_kernels/zpp_quant.h"

zppResult_t zppCollQwzLayout(size_t count, zppDataType_t type, int bits, int block, unsigned flags,
                             size_t chunkElems, zppQwzLayout_t* l) {
  if (!zppQuantValidParams(bits, block) || chunkElems == 0 || chunkElems % (size_t)block != 0)
    ZPP_FAIL(zppInternalError, COLL, "qwZ layout: bits %d block %d chunk %zu", bits, block, chunkElems);
  memset(l, 0, sizeof(*l));
  l->count = count;
  l->type = type;
  l->bits = bits;
  l->block = block;
  l->flags = flags;
  l->chunkElems = chunkElems;
  size_t nChunks = count == 0 ? 0 : (count + chunkElems - 1) / chunkElems;
  if (nChunks > (size_t)1 << 24)
    ZPP_FAIL(zppInvalidArgument, COLL,
             "qwZ: %zu elements make %zu chunks: raise ZPP_PIPELINE_CHUNK_BYTES", count, nChunks);
  l->nChunks = (int)nChunks;
  l->chunkPacked = zppQuantPackedSize(chunkElems, bits, block);
  if (nChunks > 0) {
    size_t last = count - (nChunks - 1) * chunkElems;
    l->shardPacked = (nChunks - 1) * l->chunkPacked + zppQuantPackedSize(last, bits, block);
  }
  if (l->chunkPacked == 0 || (nChunks > 0 && l->shardPacked == 0))
    ZPP_FAIL(zppInvalidArgument, COLL, "qwZ: %zu elements are too many to pack", count);
  return zppSuccess;
}

static size_t chunkCount(const zppQwzLayout_t* l, int ch) {
  size_t first = (size_t)ch * l->chunkElems;
  size_t left = l->count - first;
  return left < l->chunkElems ? left : l->chunkElems;
}

static size_t chunkBytes(const zppQwzLayout_t* l, int ch) {
  return zppQuantPackedSize(chunkCount(l, ch), l->bits, l->block);
}

static char* segAt(const zppQwzLayout_t* l, void* packedAll, int shard, int ch) {
  return (char*)packedAll + (size_t)shard * l->shardPacked + (size_t)ch * l->chunkPacked;
}

static zppResult_t decodeChunk(const zppQwzLayout_t* l, const void* seg, void* recv, int shard,
                               int ch) {
  size_t ts = zppDtypeSize(l->type);
  char* out = (char*)recv + ((size_t)shard * l->count + (size_t)ch * l->chunkElems) * ts;
  return zppDequantizeEx(seg, chunkCount(l, ch), l->bits, l->block, out, l->type);
}

zppResult_t zppCollQwzDecodeShard(const zppQwzLayout_t* l, const void* packedShard, void* out) {
  for (int ch = 0; ch < l->nChunks; ch++)
    ZPPCHECK(decodeChunk(l, (const char*)packedShard + (size_t)ch * l->chunkPacked, out, 0, ch));
  return zppSuccess;
}

static zppResult_t quantizeChunk(const zppQwzLayout_t* l, const void* send, void* seg, int ch) {
  size_t ts = zppDtypeSize(l->type);
  const char* in = (const char*)send + (size_t)ch * l->chunkElems * ts;
  return zppQuantizeEx(in, l->type, chunkCount(l, ch), l->bits, l->block, l->flags, seg);
}

zppResult_t zppCollQwzRun(zppCollCtx_t* c, const zppQwzLayout_t* l, const void* send, void* recv,
                          void* packedAll) {
  const int n = c->nranks, C = l->nChunks, me = c->rank;
  if (C == 0) return zppSuccess;
  if (n == 1) {
    /* Still a round trip through the codec: the result must not depend on
     * the rank count (and hpZ keeps the packed shard). */
    for (int ch = 0; ch < C; ch++) {
      ZPPCHECK(quantizeChunk(l, send, segAt(l, packedAll, me, ch), ch));
      ZPPCHECK(decodeChunk(l, segAt(l, packedAll, me, ch), recv, me, ch));
    }
    return zppSuccess;
  }
  const int pos = c->ringPos[me];
  const int next = c->ring[(pos + 1) % n];
  const int prev = c->ring[(pos + n - 1) % n];
  const size_t K = (size_t)(n - 1) * (size_t)C;
  zppResult_t res = zppSuccess;
  zppP2pReq_t** rreq = calloc(K, sizeof(*rreq));
  zppP2pReq_t** sreq = calloc(K, sizeof(*sreq));
  if (rreq == NULL || sreq == NULL) {
    free(rreq);
    free(sreq);
    ZPP_FAIL(zppSystemError, COLL, "qwZ: out of memory for %zu requests", 2 * K);
  }
  for (size_t k = 0; k < K; k++) {
    int s = (int)(k / (size_t)C), ch = (int)(k % (size_t)C);
    int rb = c->ring[(pos - s - 1 + 2 * n) % n];
    zppMsgId_t id = zppCollMsg(c, (uint32_t)k);
    ZPPCHECKGOTO(
        zppP2pIrecv(c->p2p, prev, segAt(l, packedAll, rb, ch), chunkBytes(l, ch), &id, &rreq[k]), res,
        out);
  }
  for (size_t k = 0; k < K; k++) {
    int s = (int)(k / (size_t)C), ch = (int)(k % (size_t)C);
    /* Step s forwards the shard that started s hops back along the ring. */
    int sb = c->ring[(pos - s + n) % n];
    char* seg = segAt(l, packedAll, sb, ch);
    if (s == 0)
      ZPPCHECKGOTO(quantizeChunk(l, send, seg, ch), res, out);
    else
      ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &rreq[k - (size_t)C], 1), res, out);
    zppMsgId_t id = zppCollMsg(c, (uint32_t)k);
    ZPPCHECKGOTO(zppP2pIsend(c->p2p, next, seg, chunkBytes(l, ch), &id, &sreq[k]), res, out);
    /* Decoding after the forward is posted: the bytes leave while we work.
     * In place, the own chunk is overwritten only after it was quantized. */
    ZPPCHECKGOTO(decodeChunk(l, seg, recv, sb, ch), res, out);
    zppCollProgress(c);
  }
  /* The last step's chunks are not forwarded: decode them as they come. */
  for (size_t k = K - (size_t)C; k < K; k++) {
    int s = (int)(k / (size_t)C), ch = (int)(k % (size_t)C);
    int rb = c->ring[(pos - s - 1 + 2 * n) % n];
    ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &rreq[k], 1), res, out);
    ZPPCHECKGOTO(decodeChunk(l, segAt(l, packedAll, rb, ch), recv, rb, ch), res, out);
  }
  for (size_t k = 0; k < K; k += (size_t)1 << 20) {
    size_t m = K - k < ((size_t)1 << 20) ? K - k : ((size_t)1 << 20);
    ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &sreq[k], (int)m), res, out);
  }
out:
  /* On error the requests still live belong to the transport until the
   * caller's quiesce; only the arrays go. */
  free(rreq);
  free(sreq);
  return res;
}
