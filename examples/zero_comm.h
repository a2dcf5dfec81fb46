/*
 * zero_comm: the trainer's thin communication layer, shaped like NCCL.
 *
 * A ZeRO-3 trainer written against NCCL makes three kinds of calls per
 * layer and step:
 *
 *   ncclAllGather(shard, full, shardcount, type, comm, stream)        forward
 *   ncclAllGather(shard, full, shardcount, type, comm, stream)        backward
 *   ncclReduceScatter(grad, gradShard, shardcount, type, ncclAvg, comm, stream)
 *
 * Here they are zcParamGatherForward, zcParamGatherBackward and
 * zcReduceScatterCoalesced, with the same argument order. With
 * zcModePlain they ARE zppAllGather and zppReduceScatter (an NCCL trainer
 * renamed: the prefix is the diff); with zcModeZeroPP the same calls become
 * ZeRO++: the forward gather is qwZ through an hpZ parameter, the backward
 * gather stays inside the node (hpZ), and the bucket goes through qgZ. One
 * flag, no change in the trainer's structure.
 *
 * Streams. A zcStream_t plays cudaStream_t: calls queue on it and return at
 * once; zcStreamSynchronize waits. Underneath, each call gets its own
 * zppHostStream_t from a pool, and a watcher thread waits for each in issue
 * order, so that the layer knows when every operation finished. zpp runs a
 * communicator's operations one at a time in issue order (zpp.h), so:
 *
 *   busy    = sum over operations of (finish - max(issue, previous finish)):
 *             the time the communicator spent on this trainer's operations;
 *   exposed = time the trainer's thread spent inside this layer's calls:
 *             issuing (what zpp does on the caller's thread) and waiting in
 *             zcStreamSynchronize (blocking calls included): communication
 *             the computation did not cover;
 *   hidden  = busy - exposed: communication that ran while the trainer
 *             computed. hidden / busy is the share of communication hidden.
 *
 * Without overlap (every call waited for at once) hidden is 0 up to the
 * watcher's delay, which is how the definition was checked.
 * A finish is seen when the watcher wakes, a few microseconds late at most;
 * on an oversubscribed machine a little later, which makes busy err low.
 */
#ifndef ZPP_EXAMPLE_ZERO_COMM_H_
#define ZPP_EXAMPLE_ZERO_COMM_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

typedef enum { zcModePlain = 0, zcModeZeroPP = 1 } zcMode_t;

typedef struct {
  zcMode_t mode;
  int qwzBits;  /* ZeRO++: bits of the weight gathers (8, 4; 0 = plain gathers) */
  int qgzBits;  /* ZeRO++: bits of the gradient reduce-scatter (4, 8; 0 = plain) */
  int hpz;      /* ZeRO++: 1 = backward gathers from the node's secondary partition */
  int rotate;   /* ZeRO++: the communicator's codec rotates its blocks (quantRotate) */
  int qwzDelta; /* ZeRO++: weight gathers send the change since the last one (ZPP_PARAM_DELTA) */
  int qgzEF;    /* ZeRO++: qgZ with error feedback, a residual handle per gradient (zppGradCreate) */
} zcOptions_t;

#define ZC_OPTIONS_PLAIN \
  { zcModePlain, 0, 0, 0, 0, 0, 0 }
#define ZC_OPTIONS_ZEROPP \
  { zcModeZeroPP, 8, 4, 1, 0, 0, 0 }

typedef struct zcComm* zcComm_t;
typedef struct zcStream* zcStream_t;
typedef struct zcParam* zcParam_t;
typedef struct zcGrad* zcGrad_t;

typedef struct {
  double busy;    /* seconds (see above) */
  double exposed; /* seconds */
  uint64_t ops;
} zcTimes_t;

/* Wraps comm (not owned: destroy the zcComm first). */
zppResult_t zcCommInit(zcComm_t* out, zppComm_t comm, const zcOptions_t* options);
/* Waits for every operation, then frees. NULL is a no-op. After
 * zppCommAbort of the underlying communicator, the operations still
 * queued finish with its error and this returns. */
zppResult_t zcCommDestroy(zcComm_t c);
void zcCommTimes(zcComm_t c, zcTimes_t* t);
void zcCommResetTimes(zcComm_t c);
const zcOptions_t* zcCommOptions(zcComm_t c);

zppResult_t zcStreamCreate(zcComm_t c, zcStream_t* out);
/* Waits for the stream's operations; the first error since the last call. */
zppResult_t zcStreamSynchronize(zcStream_t s);
zppResult_t zcStreamDestroy(zcStream_t s);

/* Stream NULL: the call returns when done (and its time counts as exposed). */
zppResult_t zcAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, zppDataType_t datatype,
                        zcComm_t comm, zcStream_t stream);
zppResult_t zcAllReduce(const void* sendbuff, void* recvbuff, size_t count, zppDataType_t datatype,
                        zppRedOp_t op, zcComm_t comm, zcStream_t stream);
/* A bucket of reduce-scatters, tensor t: sendbuffs[t] holds recvcounts[t] *
 * nranks elements. Plain: one zppReduceScatter per tensor (NCCL: a
 * group of ncclReduceScatter); ZeRO++: one zppQgzReduceScatterCoalesced,
 * or with qgzEF zppQgzReduceScatterCoalescedEF with grads[t], tensor t's
 * handle (grads is ignored otherwise and may be NULL). The arrays are
 * copied; the buffers must live until the stream is synchronized. */
zppResult_t zcReduceScatterCoalesced(int ntensors, const void* const* sendbuffs, void* const* recvbuffs,
                                     const size_t* recvcounts, zppDataType_t datatype, zppRedOp_t op,
                                     const zcGrad_t* grads, zcComm_t comm, zcStream_t stream);

/* A gradient's error-feedback residuals (ZeRO++ with qgzEF; otherwise an
 * empty handle): one per tensor that zcReduceScatterCoalesced reduces, of
 * its recvcount. */
zppResult_t zcGradCreate(zcComm_t comm, size_t recvcount, zppDataType_t datatype, zcGrad_t* out);
zppResult_t zcGradDestroy(zcGrad_t g);

/* A layer's sharded parameters. Plain: the gathers are zppAllGather. ZeRO++:
 * a zppParam_t (hpZ) or, without hpZ, zppQwzAllGather both ways. */
zppResult_t zcParamCreate(zcComm_t comm, size_t shardcount, zppDataType_t datatype, zcParam_t* out);
zppResult_t zcParamGatherForward(zcParam_t p, const void* shard, void* full, zcStream_t stream);
zppResult_t zcParamGatherBackward(zcParam_t p, const void* shard, void* full, zcStream_t stream);
/* After every write of the shard (an optimizer step, a checkpoint load). */
zppResult_t zcParamInvalidate(zcParam_t p);
/* Bytes of hpZ secondary partition held (0 without hpZ). */
size_t zcParamSecondaryBytes(zcParam_t p);
zppResult_t zcParamDestroy(zcParam_t p);

#endif /* ZPP_EXAMPLE_ZERO_COMM_H_ */
