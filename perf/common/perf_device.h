/*
 * Device buffers for the tools' --device flag (zpp-perf, zpp-health): see
 * perf_device.c. Functions returning int give 0, or -1 with a one-line
 * reason in err.
 */
#ifndef ZPP_PERF_DEVICE_H_
#define ZPP_PERF_DEVICE_H_

#include <stddef.h>

#include "zpp.h"

/* 1 when built with CUDA and NCCL. */
int zppPerfDeviceAvailable(void);
/* Collective over comm (an all-reduce on host memory): fails on every rank
 * unless every rank has a GPU. Takes GPU localRank % GPUs for this process
 * and makes the stream the calls run on. */
int zppPerfDeviceOpen(zppComm_t comm, int localRank, void** stream, char* err, size_t errLen);
void zppPerfDeviceClose(void* stream);
void* zppPerfDeviceAlloc(size_t bytes); /* NULL on failure */
void zppPerfDeviceFree(void* p);        /* NULL is fine */
int zppPerfDeviceCopy(void* dst, const void* src, size_t bytes, int toDevice, char* err, size_t errLen);
int zppPerfDeviceSync(void* stream, char* err, size_t errLen);

#endif /* ZPP_PERF_DEVICE_H_ */
