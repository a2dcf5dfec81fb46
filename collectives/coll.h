/*
 * Collectives on host buffers, over the host transport's tagged
 * send/receive (lib/transport/p2p.h: an interface, not UCX's type). One
 * algorithm per file; the job files (coll_host.c for the plain ones,
 * zeropp_host.c and hpz.c for ZeRO++) pick one per call and run it on the
 * communicator's host executor.
 *
 * Every algorithm runs inside one operation of the collective context
 * (coll_ctx.c), the same road for plain and ZeRO++ calls:
 *
 *   zppCollBegin   health and leftover checks, the next sequence number
 *   zppCollSign    the call's signature (goes into every message tag)
 *   ... the algorithm: zppCollScratch, zppCollProgress, zppCollChunkElems
 *   zppCollEnd     remembered as the last operation; on failure the
 *                  communicator is broken and the transport quiesced
 *
 * Algorithms never return with a transfer in flight on success; on error
 * zppCollEnd quiesces the transport (zppCollStepFailed earlier, where a step
 * receives into memory of its own).
 */
#ifndef ZPP_COLL_H_
#define ZPP_COLL_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "lib/transport/p2p.h"

struct zppComm;
struct zppCollState;

typedef struct {
  struct zppComm* comm;
  struct zppCollState* state; /* the communicator's context (coll_ctx.c) */
  zppP2p_t* p2p;              /* NULL on one rank */
  int rank;
  int nranks;
  const int* ring;     /* ranks in ring order: node by node, so that each node link carries one flow */
  const int* ringPos;  /* rank -> position in ring */
  zppMsgId_t id;       /* seq, sig and kind of this call; step is set per message */
  size_t chunkBytes;   /* pipelining unit */
  int depth;           /* chunks in flight per pipeline */
  int ranksShareCores; /* zppP2pRanksShareCores: the same on every rank */
} zppCollCtx_t;

/* ---- the collective context (coll_ctx.c) --------------------------------- */

/* Opens one operation of kind on the executor thread: fails with the
 * communicator's error if it is broken, with a peer's if one gave up, with a
 * mismatch if the last operation left messages behind; else takes the next
 * sequence number. Every Begin that succeeds is closed by one zppCollEnd. */
zppResult_t zppCollBegin(struct zppComm* comm, zppOpKind_t kind, zppCollCtx_t* c);
/* The signature: kind, type, op (< 0: none) and a hash of vals and the
 * pipeline chunk, the values that must agree across ranks. */
void zppCollSign(zppCollCtx_t* c, zppDataType_t type, int op, const uint64_t* vals, int nvals);
/* Closes it: remembered as the last operation; on failure (unless every
 * rank involved agreed on it, `agreed`) the communicator is marked broken
 * and the transport quiesced; big scratch is trimmed. Returns res. */
zppResult_t zppCollEnd(zppCollCtx_t* c, zppResult_t res, int agreed);
/* A failed step may leave transfers posted on its buffers (a receive from a
 * dead peer, a ring send still queued), which the transport fills or reads
 * until it is quiesced. Scratch and the caller's buffers outlive that
 * (zppCollEnd quiesces before it trims); a step that brought memory of its
 * own (heap, stack) calls this before it lets go of it. On failure (res not
 * zppSuccess) it breaks the communicator and quiesces the transport, as
 * zppCollEnd would; returns res. */
zppResult_t zppCollStepFailed(zppCollCtx_t* c, zppResult_t res);

/* Scratch kept between calls of the communicator: slots 0..3 (see
 * ZPP_ZSCRATCH_* for the ZeRO++ ones); NULL when out of memory. */
void* zppCollScratch(const zppCollCtx_t* c, int slot, size_t bytes);
/* Lets the transport move data between compute steps (sends progress only
 * when the worker is progressed). */
void zppCollProgress(const zppCollCtx_t* c);
/* Elements per pipeline chunk for a type and block: the pipeline chunk's
 * bytes of input shared among `fanIn` flows, rounded down to whole blocks
 * (at least one block), so that chunked quantization is the same as
 * quantizing the whole buffer.
 *
 * fanIn: how many peers send into one node's link at once, each with a
 * chunk's message per pipeline slot (qwZ's ring: 1; qgZ's inter-node
 * all-to-all: nodes - 1). Splitting the chunk among them keeps the bytes in
 * flight towards one switch port near one chunk's worth whatever the node
 * count: on 4x1 at 100 Mbit/s with a 5 ms switch queue, whole 256 KiB chunks
 * to three peers at once lost 4% of their packets there and ran qgZ at
 * 0.84-0.90 of its wire; split, at 0.93-0.95 (docs/zeropp.md). Never below
 * ZPP_COLL_MIN_SPLIT_CHUNK bytes (unless the pipeline chunk itself is):
 * many nodes would otherwise cut messages down to their per-message cost. */
#define ZPP_COLL_MIN_SPLIT_CHUNK 16384
size_t zppCollChunkElems(const zppCollCtx_t* c, zppDataType_t type, int block, int fanIn);
/* The same for a chunk size of one's own (before any operation runs). */
size_t zppCollChunkElemsFor(size_t chunkBytes, zppDataType_t type, int block, int fanIn);
/* elems rounded down to whole escape groups (ZPP_QUANT_ESC_GROUP, or block
 * where larger), at least one: every pipeline cut of a quantized call. */
size_t zppCollCutUnits(size_t elems, int block);

/* The plain collectives' algorithm for a kind (ZPP_ALGO_*) and the size
 * below which its latency algorithm runs (ZPP_*_SMALL_BYTES). SMALL: all-gather
 * recursive doubling (power of two ranks, else Bruck), reduce-scatter direct,
 * all-reduce recursive doubling, broadcast binomial. SMALL_ALT: all-gather
 * Bruck, reduce-scatter recursive doubling, broadcast flat. */
typedef enum {
  ZPP_COLL_ALGO_AUTO = 0,
  ZPP_COLL_ALGO_BANDWIDTH = 1,
  ZPP_COLL_ALGO_SMALL = 2,
  ZPP_COLL_ALGO_SMALL_ALT = 3
} zppCollAlgo_t;
zppResult_t zppCollAlgoSetting(zppOpKind_t kind, zppCollAlgo_t* algo, int64_t* smallBytes);
/* The same, read at the kind's first call on this communicator and kept. */
zppResult_t zppCollAlgoFor(const zppCollCtx_t* c, zppOpKind_t kind, zppCollAlgo_t* algo,
                           int64_t* smallBytes);
/* Every setting the context reads, checked (communicator creation calls it,
 * so a typo fails there, naming the variable). */
zppResult_t zppCollSettingsCheck(void);

static inline zppMsgId_t zppCollMsg(const zppCollCtx_t* c, uint32_t step) {
  zppMsgId_t id = c->id;
  id.step = step;
  return id;
}

/* nblocks blocks over count elements, as even as possible: the first
 * count % nblocks blocks hold one element more. */
static inline size_t zppBlockCount(size_t count, int nblocks, int b) {
  return count / (size_t)nblocks + ((size_t)b < count % (size_t)nblocks ? 1 : 0);
}
static inline size_t zppBlockOffset(size_t count, int nblocks, int b) {
  size_t rem = count % (size_t)nblocks;
  return (size_t)b * (count / (size_t)nblocks) + ((size_t)b < rem ? (size_t)b : rem);
}

/* ---- all-gather: recv holds every rank's block; this rank's is in place --- */
/* Block r: count elements of elemBytes at recv + offset(r) (zppBlock* with
 * total elements `total`; equal blocks when total = nranks * count). */
zppResult_t zppCollAllGatherRing(zppCollCtx_t* c, void* recv, size_t total, size_t elemBytes,
                                 uint32_t stepBase);
zppResult_t zppCollAllGatherBruck(zppCollCtx_t* c, void* recv, size_t blockBytes);
/* Power-of-two rank counts only. */
zppResult_t zppCollAllGatherRecDoubling(zppCollCtx_t* c, void* recv, size_t blockBytes);

/* ---- reduce-scatter: in holds nranks blocks (zppBlock* over total), out
 * receives this rank's reduced block (may alias in's own block). zppAvg is
 * left as a sum: the caller divides. */
zppResult_t zppCollReduceScatterRing(zppCollCtx_t* c, const void* in, void* out, size_t total,
                                     zppDataType_t type, zppRedOp_t op);
zppResult_t zppCollReduceScatterDirect(zppCollCtx_t* c, const void* in, void* out, size_t total,
                                       zppDataType_t type, zppRedOp_t op);
zppResult_t zppCollReduceScatterRecDoubling(zppCollCtx_t* c, const void* in, void* out, size_t total,
                                            zppDataType_t type, zppRedOp_t op);

/* ---- all-reduce (avg divided inside) --------------------------------------- */
zppResult_t zppCollAllReduceRing(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                 zppDataType_t type, zppRedOp_t op);
zppResult_t zppCollAllReduceRecDoubling(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                        zppDataType_t type, zppRedOp_t op);

/* ---- all-to-all: blockBytes to each peer; in == out allowed --------------- */
zppResult_t zppCollAllToAllPairwise(zppCollCtx_t* c, const void* in, void* out, size_t blockBytes);

/* Where each peer's part of a buffer lies: bytes[p] at displ[p], or, with
 * bytes NULL, `block` bytes at p * block. */
typedef struct {
  const size_t* bytes;
  const size_t* displ;
  size_t block;
} zppCollLayout_t;
static inline size_t zppCollPartBytes(const zppCollLayout_t* l, int p) {
  return l->bytes ? l->bytes[p] : l->block;
}
static inline size_t zppCollPartDispl(const zppCollLayout_t* l, int p) {
  return l->bytes ? l->displ[p] : (size_t)p * l->block;
}
/* The pairwise exchange both all-to-alls run (alltoall_pairwise.c): the
 * part of in for p goes to p, p's part for this rank lands in out's part
 * for p; this rank's own part is copied. in and out must not overlap. */
zppResult_t zppCollPairwiseExchange(zppCollCtx_t* c, const void* in, const zppCollLayout_t* send,
                                    void* out, const zppCollLayout_t* recv);
/* ---- all-to-all-v: per-peer counts and displacements in bytes. First every
 * pair compares what one sends with what the other expects (both ranks of
 * a pair see it, every rank hears of the first bad pair): a mismatch is
 * zppInvalidUsage on every rank, with no data moved and the communicator
 * still usable (*agreed = 1). The check alone: zppCollAllToAllvCheck (the
 * device path runs it before handing the data to NCCL). */
zppResult_t zppCollAllToAllvCheck(zppCollCtx_t* c, const zppCollLayout_t* send,
                                  const zppCollLayout_t* recv, size_t elemBytes, int* agreed);
zppResult_t zppCollAllToAllvPairwise(zppCollCtx_t* c, const void* in, const zppCollLayout_t* send,
                                     void* out, const zppCollLayout_t* recv, size_t elemBytes,
                                     int* agreed);

/* ---- rooted collectives: blocks in zppBlock* layout over `total` elements
 * of elemBytes (equal blocks when total = nranks * count). */
/* Gather: root receives every other rank's block into recv (its own block
 * is copied there by the caller); mine is this rank's block. */
zppResult_t zppCollGatherFlat(zppCollCtx_t* c, const void* mine, void* recv, size_t total,
                              size_t elemBytes, int root);
/* Scatter: root sends every other rank its block of send; mine receives
 * this rank's block (root copies its own). */
zppResult_t zppCollScatterFlat(zppCollCtx_t* c, const void* send, void* mine, size_t total,
                               size_t elemBytes, int root);
/* Reduce: out (count elements, root only; may alias in) receives the
 * reduction of every rank's in. zppAvg is left as a sum: the caller divides. */
zppResult_t zppCollReduceBinomial(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                  zppDataType_t type, zppRedOp_t op, int root);
/* The same as a reduce-scatter ring and a gather of the blocks to root:
 * for large counts, where the binomial tree's log2(n) full messages into
 * the root cost more than (n-1)/n of the data twice. */
zppResult_t zppCollReduceScatterGather(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                       zppDataType_t type, zppRedOp_t op, int root);

/* The end of a rooted call: a dissemination round of tiny messages that
 * carry the call's signature (which hashes the root), so that ranks that
 * passed different roots fail instead of each "succeeding" with its own
 * (see coll_ctx.c). ceil(log2 n) exchanges. With word != NULL, each round
 * also carries `bytes` of word and merge(word, theirs) folds the peer's
 * into this rank's: after the round every rank has folded every rank's
 * (merge must be idempotent, like min or or). */
zppResult_t zppCollAgree(zppCollCtx_t* c, void* word, size_t bytes,
                         void (*merge)(void* word, const void* theirs));

/* ---- broadcast: buf holds root's data at root (copied there by the caller) */
zppResult_t zppCollBroadcastPipeline(zppCollCtx_t* c, void* buf, size_t bytes, int root);
zppResult_t zppCollBroadcastBinomial(zppCollCtx_t* c, void* buf, size_t bytes, int root);
zppResult_t zppCollBroadcastFlat(zppCollCtx_t* c, void* buf, size_t bytes, int root);

#endif /* ZPP_COLL_H_ */
