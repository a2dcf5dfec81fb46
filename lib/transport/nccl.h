/*
 * NCCL device transport: device buffers go to NCCL on the caller's
 * cudaStream_t, so device collectives are stream-ordered and never block the
 * host. Only built with ZPP_HAVE_NCCL. The NCCL communicator is made on the
 * first device-buffer call (collective: its unique id travels over the
 * bootstrap) on the CUDA device current on the calling thread.
 */
#ifndef ZPP_TRANSPORT_NCCL_H_
#define ZPP_TRANSPORT_NCCL_H_

#include <stddef.h>

#include "zpp.h"

struct zppComm;
typedef struct zppNccl zppNccl_t;

zppResult_t zppNcclCreate(struct zppComm* comm, zppNccl_t** out);
/* Thread safe: stops NCCL work in flight (ncclCommAbort). */
void zppNcclAbort(zppNccl_t* nccl);
void zppNcclDestroy(zppNccl_t* nccl);

/* The ncclComm_t (NULL after an abort), for the ZeRO++ device path
 * (collectives/zeropp_device.c), which composes grouped sends and receives
 * with the CUDA codecs on the caller's stream. */
void* zppNcclHandle(zppNccl_t* nccl);

/* Device resources of the composed device calls (the ZeRO++ device path),
 * made on the first such call and reused by every later one instead of
 * being created and destroyed per call: two internal streams (codec kernels
 * and NCCL) and a fixed set of events. Calls on one communicator are issued
 * from one host thread at a time (as with NCCL), so no lock is needed. */
#define ZPP_NCCL_WORK_EVENTS 16
typedef struct {
  void* kernels;                      /* cudaStream_t: the codec kernels */
  void* comms;                        /* cudaStream_t: NCCL */
  void* events[ZPP_NCCL_WORK_EVENTS]; /* cudaEvent_t, timing disabled */
} zppNcclWork_t;
zppResult_t zppNcclGetWork(zppNccl_t* nccl, zppNcclWork_t** out);

/* Scratch device memory of at least `bytes`, valid until the next call of
 * this function: stream-ordered on the work's kernel stream, where it grows
 * (the old buffer freed behind everything queued there) and is trimmed once
 * ZPP_TRIM_CALLS calls in a row needed under a quarter of it
 * (core/trim.h). Callers order their other streams after the kernel
 * stream before using it. */
zppResult_t zppNcclScratch(zppNccl_t* nccl, size_t bytes, void** out);
/* Bytes of scratch held now (tests, zpp-perf). */
size_t zppNcclScratchBytes(const zppNccl_t* nccl);

zppResult_t zppNcclAllGather(zppNccl_t* nccl, const void* sendbuff, void* recvbuff, size_t sendcount,
                             zppDataType_t type, void* stream);
zppResult_t zppNcclReduceScatter(zppNccl_t* nccl, const void* sendbuff, void* recvbuff,
                                 size_t recvcount, zppDataType_t type, zppRedOp_t op, void* stream);
zppResult_t zppNcclAllReduce(zppNccl_t* nccl, const void* sendbuff, void* recvbuff, size_t count,
                             zppDataType_t type, zppRedOp_t op, void* stream);
zppResult_t zppNcclAllToAll(zppNccl_t* nccl, const void* sendbuff, void* recvbuff, size_t count,
                            zppDataType_t type, void* stream);
zppResult_t zppNcclBroadcast(zppNccl_t* nccl, const void* sendbuff, void* recvbuff, size_t count,
                             zppDataType_t type, int root, void* stream);
zppResult_t zppNcclReduce(zppNccl_t* nccl, const void* sendbuff, void* recvbuff, size_t count,
                          zppDataType_t type, zppRedOp_t op, int root, void* stream);
/* Gather, scatter and the uneven all-to-all as grouped ncclSend/ncclRecv;
 * counts and displacements in elements, nranks each. */
zppResult_t zppNcclGather(zppNccl_t* nccl, const void* sendbuff, void* recvbuff, size_t sendcount,
                          zppDataType_t type, int root, void* stream);
zppResult_t zppNcclScatter(zppNccl_t* nccl, const void* sendbuff, void* recvbuff, size_t recvcount,
                           zppDataType_t type, int root, void* stream);
zppResult_t zppNcclAllToAllv(zppNccl_t* nccl, const void* sendbuff, const size_t* sendcounts,
                             const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                             const size_t* rdispls, zppDataType_t type, void* stream);

#endif /* ZPP_TRANSPORT_NCCL_H_ */
