/*
 * The device branch of every collective, in one place: plain calls go to
 * NCCL (lib/transport/nccl.h), qwZ and qgZ to the CUDA codecs with NCCL
 * (zeropp_device.c), all stream-ordered on the caller's cudaStream_t.
 * Arguments are validated by the API layer, which asks here and never
 * calls NCCL itself. A build without NCCL answers every call with a clear
 * zppInvalidUsage.
 */
#ifndef ZPP_COLL_DEVICE_H_
#define ZPP_COLL_DEVICE_H_

#include <stddef.h>

#include "zpp.h"
#include "coll_host.h"
#include "zeropp.h"

struct zppComm;

/* 1 when this build can run collectives on device buffers (NCCL). */
int zppDeviceCollAvailable(void);

/* A plain collective; inPlace: NCCL's in-place form of it. */
zppResult_t zppDeviceCollIssue(struct zppComm* comm, const zppHostColl_t* c, int inPlace, void* stream);
/* qwZ; flags: 0 or ZPP_QUANT_ROTATE (the rotated codec, zpp_quant.h). */
zppResult_t zppDeviceQwzIssue(struct zppComm* comm, const void* send, void* recv, size_t count,
                              zppDataType_t type, int bits, int block, unsigned flags, void* stream);
zppResult_t zppDeviceQgzIssue(struct zppComm* comm, const zppQgzArgs_t* args, void* stream);

#endif /* ZPP_COLL_DEVICE_H_ */
