/*
 * ZeRO++ operations on host buffers as the API layer issues them: each call
 * becomes one job on the communicator's host executor (in issue order with
 * the plain collectives; blocking with stream NULL, queued with a
 * zppHostStream_t). Arguments are validated by the caller (api/zeropp_api.c).
 */
#ifndef ZPP_ZEROPP_HOST_H_
#define ZPP_ZEROPP_HOST_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "zeropp.h"

struct zppComm;

typedef struct {
  const void* send;
  void* recv;
  size_t count; /* per rank */
  zppDataType_t type;
  int bits;
  int block;
  unsigned flags;   /* codec flags: 0 or ZPP_QUANT_ROTATE */
  zppOpKind_t kind; /* what the bytes count as (zppOpQwZ) */
} zppQwzCall_t;

zppResult_t zppZeroppIssueQwz(struct zppComm* comm, const zppQwzCall_t* call, zppHostStream_t stream);

/* The arrays are copied: the caller's may go away once this returns.
 * grads: NULL, or error feedback with one handle per tensor (distinct, of
 * that tensor's count): their residuals are chosen when the job runs, and a
 * job that succeeds makes its output residuals the current ones. */
struct zppGrad;
zppResult_t zppZeroppIssueQgz(struct zppComm* comm, const zppQgzArgs_t* args,
                              struct zppGrad* const* grads, zppHostStream_t stream);

/* ---- error feedback for qgZ (api/zeropp_api.c makes them) ----------------- */

/* Residuals are double-buffered: a call reads buf[cur] and writes
 * buf[cur ^ 1], then (when it succeeded) flips cur, so that zppGradUndo can
 * flip it back once. */
struct zppGrad {
  struct zppComm* comm;
  size_t count; /* recvcount: elements per rank */
  zppDataType_t type;
  int bits;
  int nRanks;
  int nNodes;
  int hasReduce; /* a second quantization between the hops: residual reduce[] */
  /* zppQgzArgs_t's residual layout, each in one buffer (zppQuantResidIn):
   * send: nranks rows, reduce: nNodes rows (NULL without hasReduce). */
  void* send[2];
  void* reduce[2];
  _Atomic int cur; /* written by the job, read by the caller once it synchronized */
  _Atomic int undoable;
  _Atomic int inFlight;       /* calls issued, not yet run or dropped */
  zppHostStream_t lastStream; /* of the last call issued */
  _Atomic uint64_t calls;     /* calls that succeeded */
};

/* Elements and bytes of a handle's send or reduce residual. */
static inline size_t zppGradResidElems(const struct zppGrad* g, int reduce) {
  return zppQgzResidRow(g->count) * (size_t)(reduce ? g->nNodes : g->nRanks);
}
static inline size_t zppGradResidBytes(const struct zppGrad* g, int reduce) {
  return zppQuantResidBytes(zppGradResidElems(g, reduce));
}

/* ---- hpZ partitioned parameters (hpz.c) ---------------------------------- */

#define ZPP_PARAM_NO_VERSION UINT64_MAX

struct zppParam {
  struct zppComm* comm;
  size_t count; /* shard elements */
  zppDataType_t type;
  int bits; /* 0: plain gathers, the secondary holds raw shards */
  int block;
  zppQwzLayout_t layout; /* bits != 0 */
  size_t shardBytes;     /* one shard as the secondary holds it (packed or raw) */
  int groupSize;         /* ranks of the hpZ group; 0: no usable group (global fallback) */
  int groupsOfOne;       /* a delta parameter whose hpzGroupSize divides no node: groups of one */
  int groupPos;          /* this rank's position in it */
  int* members;          /* [groupSize] ranks of the group */
  int shardLo;           /* first shard this rank's secondary holds */
  int shardCnt;
  void* secondary;
  size_t secondaryBytes;
  _Atomic uint64_t version;    /* bumped by zppParamInvalidate (caller's thread) */
  _Atomic uint64_t secVersion; /* version the secondary was gathered at, or NO_VERSION */
  uint64_t fingerprint;        /* of the local shard at the forward gather (executor thread) */
  /* ZPP_PARAM_DELTA (qwz_delta.c): the reference replaces the secondary. */
  int delta;
  zppQwzLayout_t deltaLayout; /* the differences' qwZ: fp32 input */
  void* ref;                  /* [count * nranks] of type, the last forward's result */
  int refValid;               /* executor thread */
  uint64_t refGen;            /* executor thread: references built so far */
  _Atomic uint64_t drops;     /* bumped by zppParamDropReference (caller's thread) */
  uint64_t dropsSeen;         /* executor thread */
};

zppResult_t zppHpzCreate(struct zppComm* comm, size_t count, zppDataType_t type, int bits, int delta,
                         struct zppParam** out);

/* The forward gather of a delta parameter (qwz_delta.c, executor thread):
 * exact while the reference is invalid, differences after; full receives
 * the new reference. On failure the reference is dropped. */
zppResult_t zppQwzDeltaGather(zppCollCtx_t* c, struct zppParam* p, const void* shard, void* full);
/* backward 0: the global gather that refreshes the secondary; 1: from the
 * secondaries inside the group (or the global fallback when invalid). */
zppResult_t zppHpzIssueGather(struct zppParam* p, const void* shard, void* full, int backward,
                              zppHostStream_t stream);
/* Waits for the operations issued before (on the executor), then frees. */
void zppHpzDestroy(struct zppParam* p);

#endif /* ZPP_ZEROPP_HOST_H_ */
