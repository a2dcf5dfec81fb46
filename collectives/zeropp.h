/*
 * ZeRO++ algorithms on host buffers (internal): qwZ (qwz.c), qgZ (qgz.c),
 * hpZ (hpz.c), the group exchanges they share (group_alltoall.c) and the
 * per-communicator state and executor plumbing (zeropp_host.c).
 *
 * Every algorithm runs inside one executor job with a zppCollCtx_t (see
 * coll.h): this call's sequence number and signature go into every tag, so
 * ranks that disagree on the call, its type, count, bits or block get an
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

struct zppComm;

/* ---- per-communicator state and jobs (zeropp_host.c) --------------------- */

/* Scratch slots of the ZeRO++ state (kept between calls up to a limit). */
enum { ZPP_ZSCRATCH_PACKED = 0, ZPP_ZSCRATCH_PIPE = 1, ZPP_ZSCRATCH_AUX = 2, ZPP_ZSCRATCH_SLOTS = 3 };

/* Opens one operation: the next sequence number, a signature over kind, type,
 * op and the values that must agree across ranks, the node-ordered ring, the
 * pipelining parameters and scratch. Runs on the executor thread. */
zppResult_t zppZeroppBegin(struct zppComm* comm, zppOpKind_t kind, zppDataType_t type, int op,
                           const uint64_t* vals, int nvals, zppCollCtx_t* c);
/* Closes it: on failure marks the communicator broken (unless the failure
 * was agreed by every rank involved, see `agreed`) and quiesces the
 * transport; trims big scratch. Returns res. */
zppResult_t zppZeroppEnd(zppCollCtx_t* c, zppResult_t res, int agreed);
/* Lets UCX move data between compute steps (sends progress only when the
 * worker is progressed). */
void zppZeroppProgress(const zppCollCtx_t* c);
/* Elements per pipeline chunk for a type and block: ZPP_PIPELINE_CHUNK_BYTES
 * of input shared among `fanIn` flows, rounded down to whole blocks (at least
 * one block), so that chunked quantization is the same as quantizing the
 * whole buffer.
 *
 * fanIn: how many peers send into one node's link at once, each with a
 * chunk's message per pipeline slot (qwZ's ring: 1; qgZ's inter-node
 * all-to-all: nodes - 1). Splitting the chunk among them keeps the bytes in
 * flight towards one switch port near one chunk's worth whatever the node
 * count: on 4x1 at 100 Mbit/s with a 5 ms switch queue, whole 256 KiB chunks
 * to three peers at once lost 4% of their packets there and ran qgZ at
 * 0.84-0.90 of its wire; split, at 0.93-0.95 (docs/zeropp.md). Never below
 * ZPP_ZEROPP_MIN_SPLIT_CHUNK bytes (unless the pipeline chunk itself is):
 * many nodes would otherwise cut messages down to their per-message cost. */
#define ZPP_ZEROPP_MIN_SPLIT_CHUNK 16384
size_t zppZeroppChunkElems(const zppCollCtx_t* c, zppDataType_t type, int block, int fanIn);
/* The transport's mismatch formatter (a zppSigFormatter_t) for plain and
 * ZeRO++ signatures alike. */
void zppZeroppDescribeMismatch(uint32_t theirs, uint32_t mine, char* buf, size_t len);
/* Frees the state (comm destroy, after the executor stopped). */
void zppZeroppFree(struct zppComm* comm);

/* ---- group exchanges (group_alltoall.c) ---------------------------------- */

/* Posts an all-to-all among `n` ranks `members` (this rank is members[me]):
 * member j gets `bytes` from send + j * sendStride, and this rank receives
 * member i's into recv + i * recvStride. The own slot moves nothing (the
 * caller put its data there). reqs: 2n entries, waited by the caller. */
zppResult_t zppGroupAllToAllPost(zppCollCtx_t* c, const int* members, int n, int me,
                                 const void* send, size_t sendStride, void* recv,
                                 size_t recvStride, size_t bytes, uint32_t step,
                                 zppP2pReq_t** reqs);
/* Each member sends the same `bytes` to every other member; member i's
 * lands at recvs[i] with recvBytes[i]. onRecv(arg, i) runs as each arrives
 * (in order of distance from this rank), so decoding overlaps the rest. */
typedef zppResult_t (*zppGroupRecvFn)(void* arg, int member);
zppResult_t zppGroupAllGatherV(zppCollCtx_t* c, const int* members, int n, int me,
                               const void* mine, size_t myBytes, void* const* recvs,
                               const size_t* recvBytes, uint32_t step, zppGroupRecvFn onRecv,
                               void* arg);

/* ---- qwZ (qwz.c) ------------------------------------------------------------ */

/* How one rank's shard is cut into chunks and packed: nChunks segments of
 * chunkElems elements (the last one shorter), laid end to end. */
typedef struct {
  size_t count;       /* elements of one shard */
  zppDataType_t type;
  int bits;
  int block;
  size_t chunkElems;
  int nChunks;
  size_t chunkPacked; /* bytes of a full chunk's segment */
  size_t shardPacked; /* bytes of a whole packed shard */
} zppQwzLayout_t;

zppResult_t zppCollQwzLayout(size_t count, zppDataType_t type, int bits, int block, size_t chunkElems,
                         zppQwzLayout_t* l);
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
} zppQgzArgs_t;

/* Hierarchical quantized reduce-scatter; needs nodes of equal size. */
zppResult_t zppCollQgzRun(zppCollCtx_t* c, const zppQgzArgs_t* a);

#endif /* ZPP_ZEROPP_H_ */
