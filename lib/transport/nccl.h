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

/* 1 when ptr is device or managed memory; any CUDA error means host. */
int zppNcclIsDevicePtr(const void* ptr);

zppResult_t zppNcclCreate(struct zppComm* comm, zppNccl_t** out);
/* Thread safe: stops NCCL work in flight (ncclCommAbort). */
void zppNcclAbort(zppNccl_t* nccl);
void zppNcclDestroy(zppNccl_t* nccl);

/* The ncclComm_t (NULL after an abort), for the ZeRO++ device path
 * (collectives/zeropp_device.c), which composes grouped sends and receives
 * with the CUDA codecs on the caller's stream. */
void* zppNcclHandle(zppNccl_t* nccl);

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

#endif /* ZPP_TRANSPORT_NCCL_H_ */
