/*
 * ZeRO++ algorithms on host buffers (internal): qwZ (qwz.c), qgZ (qgz.c),
 * hpZ (hpz.c), the group exchanges they share (group_alltoall.c) and the
 * executor jobs (zeropp_host.c).
 *
 * Every algorithm runs inside one operation of the collective context (see
 * coll.h), as the plain collectives do: this call's sequence number and
 * signature go into every tag, so
 * ranks that disagree on the call, its type, count, bits, block or rotation
 * (the codec flags) get an
 * error instead of mixed data; the packed segments' headers are checked
 * again when they are decoded. Messages carry zppOpQwZ / zppOpHpZ /
 * zppOpQgZ, which is how the transport's byte counters attribute them.
 */
#ifndef ZPP_ZEROPP_H_
#define ZPP_ZEROPP_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "coll.h"
#include "quant_kernels/zpp_quant.h"

struct zppComm;

/* Scratch slots of the collective context that ZeRO++ uses. */
enum { ZPP_ZSCRATCH_PACKED = 0, ZPP_ZSCRATCH_PIPE = 1, ZPP_ZSCRATCH_AUX = 2, ZPP_ZSCRATCH_SLOTS = 3 };

/* ---- group exchanges (group_alltoall.c) ---------------------------------- */

/* Posts an all-to-all among `n` ranks `members` (this rank is members[me]):
 * member j gets `bytes` from send + j * sendStride, and this rank receives
 * member i's into recv + i * recvStride. The own slot moves nothing (the
 * caller put its data there). reqs: 2n entries, waited by the caller. */
zppResult_t zppGroupAllToAllPost(zppCollCtx_t* c, const int* members, int n, int me, const void* send,
                                 size_t sendStride, void* recv, size_t recvStride, size_t bytes,
                                 uint32_t step, zppP2pReq_t** reqs);
/* Each member sends the same `bytes` to every other member; member i's
 * lands at recvs[i] with recvBytes[i]. onRecv(arg, i) runs as each arrives
 * (in order of distance from this rank), so decoding overlaps the rest. */
typedef zppResult_t (*zppGroupRecvFn)(void* arg, int member);
zppResult_t zppGroupAllGatherV(zppCollCtx_t* c, const int* members, int n, int me, const void* mine,
                               size_t myBytes, void* const* recvs, const size_t* recvBytes,
                               uint32_t step, zppGroupRecvFn onRecv, void* arg);

/* ---- qwZ (qwz.c) ------------------------------------------------------------ */

/* How one rank's shard is cut into chunks and packed: nChunks segments of
 * chunkElems elements (the last one shorter), laid end to end. */
typedef struct {
  size_t count; /* elements of one shard */
  zppDataType_t type;
  int bits;
  int block;
  unsigned flags; /* codec flags: 0 or ZPP_QUANT_ROTATE */
  size_t chunkElems;
  int nChunks;
  size_t chunkPacked; /* bytes of a full chunk's segment */
  size_t shardPacked; /* bytes of a whole packed shard */
} zppQwzLayout_t;

zppResult_t zppCollQwzLayout(size_t count, zppDataType_t type, int bits, int block, unsigned flags,
                             size_t chunkElems, zppQwzLayout_t* l);
/* Quantized all-gather over the node-ordered ring. packedAll (nranks *
 * shardPacked bytes) receives every rank's packed shard; recv the decoded
 * result in l->type. send may be the in-place block of recv. */
zppResult_t zppCollQwzRun(zppCollCtx_t* c, const zppQwzLayout_t* l, const void* send, void* recv,
                          void* packedAll);
/* Decodes one packed shard into out (l->count elements). */
zppResult_t zppCollQwzDecodeShard(const zppQwzLayout_t* l, const void* packedShard, void* out);

/* ---- qgZ (qgz.c) ------------------------------------------------------------ */

typedef struct {
  int ntensors;
  const void* const* send; /* [ntensors], each counts[t] * nranks elements */
  void* const* recv;       /* [ntensors], each counts[t] elements */
  const size_t* counts;
  zppDataType_t type;
  zppRedOp_t op; /* zppSum or zppAvg */
  int bits;
  int block;
  unsigned flags; /* codec flags: 0 or ZPP_QUANT_ROTATE */
  /* Error feedback, NULL without: per tensor, what this rank's
   * quantizations dropped, read from the In residuals and written to the
   * Out ones, in 8 bits (zpp_quant.h, "error feedback's residuals"), in rows
   * of zppQgzResidRow(counts[t]) elements so that each starts on a residual
   * block. send[t]: nranks rows, row p partition p of send's layout, for the
   * sender's quantization; reduce[t]: nNodes rows, row n the partition this
   * rank sums for node n, for the requantization between the hops (the
   * arrays NULL where there is none: one node, or one rank per node). */
  const zppQuantResid_t* efSendIn;
  const zppQuantResid_t* efSendOut;
  const zppQuantResid_t* efReduceIn;
  const zppQuantResid_t* efReduceOut;
} zppQgzArgs_t;

/* Elements of one row of a residual of qgZ (zppQgzArgs_t): count rounded up
 * to whole residual blocks. */
static inline size_t zppQgzResidRow(size_t count) {
  return (count + ZPP_QUANT_RESID_BLOCK - 1) / ZPP_QUANT_RESID_BLOCK * ZPP_QUANT_RESID_BLOCK;
}

/* Hierarchical quantized reduce-scatter; needs nodes of equal size. */
zppResult_t zppCollQgzRun(zppCollCtx_t* c, const zppQgzArgs_t* a);

#endif /* ZPP_ZEROPP_H_ */
