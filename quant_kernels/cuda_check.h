/*
 * CUDA members of the check-macro family (see core/check.h): the call
 * that sees a CUDA error logs it once under the CUDA subsystem with the
 * runtime's own message and returns zppUnhandledCudaError, as NCCL's
 * CUDACHECK does. Usable from C and from CUDA C++ (log.h has no C++ linkage
 * guard of its own, so it is wrapped here).
 */
#ifndef ZPP_CUDA_CHECK_H_
#define ZPP_CUDA_CHECK_H_

#include <errno.h>
#include <string.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "check.h"
#ifdef __cplusplus
}
#endif

#define CUDACHECK(cmd)                                                              \
  do {                                                                              \
    cudaError_t zppCudaErr_ = (cmd);                                                \
    if (zppCudaErr_ != cudaSuccess) {                                               \
      ZPP_FAIL(zppUnhandledCudaError, CUDA, "CUDA call '%s' failed: %s (%d)", #cmd, \
               cudaGetErrorString(zppCudaErr_), (int)zppCudaErr_);                  \
    }                                                                               \
  } while (0)

#define CUDACHECKGOTO(cmd, res, label)                                                              \
  do {                                                                                              \
    cudaError_t zppCudaErr_ = (cmd);                                                                \
    if (zppCudaErr_ != cudaSuccess) {                                                               \
      ZPP_FAILGOTO(zppUnhandledCudaError, res, label, CUDA, "CUDA call '%s' failed: %s (%d)", #cmd, \
                   cudaGetErrorString(zppCudaErr_), (int)zppCudaErr_);                              \
    }                                                                                               \
  } while (0)

/* After a <<<...>>> launch: a launch reports bad configurations (too many
 * threads, no kernel image for this GPU) only through cudaGetLastError. */
#define CUDALAUNCHCHECK(what)                                                             \
  do {                                                                                    \
    cudaError_t zppCudaErr_ = cudaGetLastError();                                         \
    if (zppCudaErr_ != cudaSuccess) {                                                     \
      ZPP_FAIL(zppUnhandledCudaError, CUDA, "kernel launch '%s' failed: %s (%d)", (what), \
               cudaGetErrorString(zppCudaErr_), (int)zppCudaErr_);                        \
    }                                                                                     \
  } while (0)

#endif /* ZPP_CUDA_CHECK_H_ */
