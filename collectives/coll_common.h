/*
 * The pieces the collective context (coll_ctx.c) is made of: the
 * node-ordered ring, the pipeline settings, the scratch pool and the
 * message signatures. Kept apart from the context so that each can be
 * tested alone.
 */
#ifndef ZPP_COLL_COMMON_H_
#define ZPP_COLL_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "core/trim.h"
#include "topology/topo.h"

/* Ranks in ring order, node by node (a ring visits each node once, so each
 * node's link carries one flow each way), and rank -> position. The caller
 * frees both. */
zppResult_t zppCollRingCreate(const zppTopo_t* topo, int nranks, int** ring, int** ringPos);

/* ZPP_PIPELINE_CHUNK_BYTES and ZPP_PIPELINE_DEPTH, range-checked. */
zppResult_t zppCollPipelineParams(size_t* chunkBytes, int* depth);

/* Scratch memory kept between calls of one communicator (executor thread
 * only). Slots grow on demand, 64-byte aligned (packed segments are 16-byte
 * multiples and the codecs' vector loads like aligned starts). */
#define ZPP_SCRATCH_POOL_SLOTS 4
typedef struct {
  void* buf[ZPP_SCRATCH_POOL_SLOTS];
  size_t bytes[ZPP_SCRATCH_POOL_SLOTS];
  size_t used[ZPP_SCRATCH_POOL_SLOTS]; /* the largest request since the last trim */
  zppTrimRule_t trim[ZPP_SCRATCH_POOL_SLOTS];
} zppScratchPool_t;

/* A slot of at least `bytes`; NULL when out of memory or the slot is out of
 * range. */
void* zppScratchPoolGet(zppScratchPool_t* pool, int slot, size_t bytes);
/* Called after every call: gives a slot back by core/trim.h's rule
 * (64 calls in a row that needed under a quarter of it). The slot is freed,
 * not shrunk: the next call that needs it allocates its own size. */
void zppScratchPoolTrim(zppScratchPool_t* pool);
void zppScratchPoolFree(zppScratchPool_t* pool);

/* Signature of a call (low 20 bits of a message tag): kind (4 bits), type
 * (4), op (3; none for calls without a reduction, op < 0) and a 9-bit hash
 * of the other values that must agree across ranks. */
#define ZPP_SIG_KIND_SHIFT 16
_Static_assert(zppNumOpKinds <= 16, "the signature holds the kind in 4 bits");
uint32_t zppCollSig(zppOpKind_t kind, zppDataType_t type, int op, const uint64_t* vals, int nvals);
static inline unsigned zppCollSigKind(uint32_t sig) { return (sig >> ZPP_SIG_KIND_SHIFT) & 15u; }
/* "AllReduce(float32, sum; #1a3)". */
void zppCollDescribeSig(uint32_t sig, char* buf, size_t len);
/* "<theirs> while this rank called <mine>", and when only the hash differs,
 * hashHint saying what the hash covers. */
void zppCollDescribeMismatch(uint32_t theirs, uint32_t mine, const char* hashHint, char* buf,
                             size_t len);

#endif /* ZPP_COLL_COMMON_H_ */
