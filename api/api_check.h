/*
 * The argument rules every collective entry point shares (plain and ZeRO++),
 * written once: buffers that overlap, counts that overflow, and where the
 * buffers live with the stream that fits them.
 */
#ifndef ZPP_API_CHECK_H_
#define ZPP_API_CHECK_H_

#include <stddef.h>

#include "zpp.h"

/* 1 when [a, a+na) and [b, b+nb) share a byte. */
int zppApiOverlaps(const void* a, size_t na, const void* b, size_t nb);

/* count * typesize * nranks, the largest buffer a collective touches, must
 * fit in memory. */
zppResult_t zppApiCheckCount(const char* name, size_t count, zppDataType_t type, int nranks);

/* Where the buffers live, and the stream that fits: a cudaStream_t for
 * device memory (which needs a build with NCCL), NULL or a live
 * zppHostStream_t for host memory. NULL pointers say nothing (count 0).
 * *device: -1 on the first call of a call's buffers (nothing known yet),
 * then 1 device, 0 host; every buffer of a call must agree. */
zppResult_t zppApiCheckWhere(const char* name, const void* a, const void* b, zppStream_t stream,
                             int* device);
/* The same for point-to-point calls, which groups may hold; the
 * collectives' form above refuses to run inside a group (p2p_api.h). */
zppResult_t zppApiCheckWhereAny(const char* name, const void* a, const void* b, zppStream_t stream,
                                int* device);

#endif /* ZPP_API_CHECK_H_ */
