/*
 * Where a buffer lives: the runtime asks CUDA, whichever transport moves the
 * data. A build with CUDA but without NCCL still knows a device pointer when
 * it sees one (and the API layer refuses it for want of NCCL) instead of
 * taking it for host memory.
 */
#ifndef ZPP_MEMTYPE_H_
#define ZPP_MEMTYPE_H_

/* 1 for device or managed memory; 0 for host memory, NULL, or a build or
 * machine without CUDA devices. */
int zppMemIsDevice(const void* ptr);

/* 1 when this build can tell device memory at all (it was built with CUDA). */
int zppMemKnowsDevices(void);

#endif /* ZPP_MEMTYPE_H_ */
