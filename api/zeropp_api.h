/*
 * The hook by which the plain entry points (api/coll_api.c) hand a call to
 * ZeRO++ when the communicator's compression settings ask for it.
 */
#ifndef ZPP_ZEROPP_API_H_
#define ZPP_ZEROPP_API_H_

#include "zpp.h"
#include "collectives/coll_host.h"

struct zppComm;

/* For a validated plain call on host buffers with count > 0: runs it as qwZ
 * (zppAllGather, comm qwzBits != 0) or qgZ (zppReduceScatter sum/avg, comm
 * qgzBits != 0) when the type is fp32/fp16/bf16, more than one rank takes
 * part and the call moves at least compressMinBytes (count * typesize *
 * nranks). Then *taken = 1, the call counts under zppOpQwZ/zppOpQgZ, and the
 * result is the call's. Otherwise *taken = 0 and the caller runs it plain.
 * qgZ on nodes of different sizes stays plain, said once at WARN. `device`:
 * the buffers are device memory (the call goes to the device path, on the
 * cudaStream_t `stream`), with the same rules as host buffers. */
zppResult_t zppZeroppTryPlain(struct zppComm* comm, const zppHostColl_t* call, zppStream_t stream,
                              int device, int* taken);

#endif /* ZPP_ZEROPP_API_H_ */
