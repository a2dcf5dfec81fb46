/*
 * Plain collectives on host buffers, over the host transport's tagged
 * send/receive (lib/transport/p2p.h: an interface, not UCX's type). One
 * algorithm per file; coll_host.c picks one per call and
 * runs it on the communicator's host executor.
 *
 * Every algorithm gets a context with this call's sequence number and
 * signature (they go into every message tag, see lib/transport/p2p.h), the
 * ring order of the ranks, and scratch memory. Algorithms never return with
 * a transfer in flight on success; on error the caller quiesces the
 * transport.
 */
#ifndef ZPP_COLL_H_
#define ZPP_COLL_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "lib/transport/p2p.h"

struct zppComm;

typedef struct {
  struct zppComm* comm;
  zppP2p_t* p2p;
  int rank;
  int nranks;
  const int* ring;    /* ranks in ring order: node by node, so that each node link carries one flow */
  const int* ringPos; /* rank -> position in ring */
  zppMsgId_t id;      /* seq, sig and kind of this call; step is set per message */
  size_t chunkBytes;  /* pipelining unit */
  int depth;          /* chunks in flight per pipeline */
  void* (*scratch)(void* owner, int slot, size_t bytes); /* NULL when out of memory */
  void* scratchOwner;
} zppCollCtx_t;


static inline zppMsgId_t zppCollMsg(const zppCollCtx_t* c, uint32_t step) {
  zppMsgId_t id = c->id;
  id.step = step;
  return id;
}

static inline void* zppCollScratch(const zppCollCtx_t* c, int slot, size_t bytes) {
  return c->scratch(c->scratchOwner, slot, bytes);
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

/* ---- broadcast: buf holds root's data at root (copied there by the caller) */
zppResult_t zppCollBroadcastPipeline(zppCollCtx_t* c, void* buf, size_t bytes, int root);
zppResult_t zppCollBroadcastBinomial(zppCollCtx_t* c, void* buf, size_t bytes, int root);
zppResult_t zppCollBroadcastFlat(zppCollCtx_t* c, void* buf, size_t bytes, int root);

#endif /* ZPP_COLL_H_ */
