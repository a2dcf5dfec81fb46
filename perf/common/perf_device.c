/*
 * Device buffers for the tools (zpp-perf --device, zpp-health --device): a
 * GPU per local rank, a stream, buffers, copies and synchronization, with
 * CUDA's errors turned into one-line messages. The tools keep host buffers
 * for filling and checking; these are the copies zpp's calls run on.
 *
 * Without CUDA the functions report that this build has none (the tools
 * refuse --device when they parse their arguments).
 */
#include "perf_device.h"

#include <stdio.h>

#include "zpp_build_config.h"

#if ZPP_HAVE_NCCL
#include <cuda_runtime.h>

int zppPerfDeviceAvailable(void) { return 1; }

static int zppPerfDeviceFail(char* err, size_t errLen, const char* what, cudaError_t e) {
  (void)cudaGetLastError();
  snprintf(err, errLen, "%s: %s", what, cudaGetErrorString(e));
  return -1;
}

int zppPerfDeviceOpen(zppComm_t comm, int localRank, void** stream, char* err, size_t errLen) {
  /* cudaGetDeviceCount leaves its output unset on failure. */
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) ndev = 0;
  /* Every rank must agree before any of them touches a device buffer: a
   * rank without a GPU must not leave the others in a device collective. */
  double mine = ndev, fewest = 0;
  zppResult_t res = zppAllReduce(&mine, &fewest, 1, zppFloat64, zppMin, comm, NULL);
  if (res != zppSuccess) {
    snprintf(err, errLen, "agreeing on GPUs (allreduce): %s", zppGetErrorString(res));
    return -1;
  }
  if (fewest < 1) {
    if (ndev < 1)
      snprintf(err, errLen, "needs a CUDA GPU and none was found (%s)",
               e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    else
      snprintf(err, errLen, "another rank has no CUDA GPU");
    (void)cudaGetLastError();
    return -1;
  }
  /* One GPU per local rank, round robin (several ranks share one when there
   * are fewer GPUs: NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1). */
  if ((e = cudaSetDevice(localRank % ndev)) != cudaSuccess)
    return zppPerfDeviceFail(err, errLen, "cudaSetDevice", e);
  cudaStream_t s = NULL;
  if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
    return zppPerfDeviceFail(err, errLen, "cudaStreamCreate", e);
  *stream = s;
  return 0;
}

void zppPerfDeviceClose(void* stream) {
  if (stream) (void)cudaStreamDestroy((cudaStream_t)stream);
}

void* zppPerfDeviceAlloc(size_t bytes) {
  void* p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

void zppPerfDeviceFree(void* p) {
  if (p) (void)cudaFree(p);
}

int zppPerfDeviceCopy(void* dst, const void* src, size_t bytes, int toDevice, char* err,
                      size_t errLen) {
  cudaError_t e =
      cudaMemcpy(dst, src, bytes, toDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? 0 : zppPerfDeviceFail(err, errLen, "cudaMemcpy", e);
}

int zppPerfDeviceSync(void* stream, char* err, size_t errLen) {
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
  return e == cudaSuccess ? 0 : zppPerfDeviceFail(err, errLen, "cudaStreamSynchronize", e);
}

#else /* !ZPP_HAVE_NCCL */

static int zppPerfNoDevice(char* err, size_t errLen) {
  snprintf(err, errLen, "this build has no CUDA and NCCL");
  return -1;
}

int zppPerfDeviceAvailable(void) { return 0; }
int zppPerfDeviceOpen(zppComm_t comm, int localRank, void** stream, char* err, size_t errLen) {
  (void)comm, (void)localRank, (void)stream;
  return zppPerfNoDevice(err, errLen);
}
void zppPerfDeviceClose(void* stream) { (void)stream; }
void* zppPerfDeviceAlloc(size_t bytes) {
  (void)bytes;
  return NULL;
}
void zppPerfDeviceFree(void* p) { (void)p; }
int zppPerfDeviceCopy(void* dst, const void* src, size_t bytes, int toDevice, char* err,
                      size_t errLen) {
  (void)dst, (void)src, (void)bytes, (void)toDevice;
  return zppPerfNoDevice(err, errLen);
}
int zppPerfDeviceSync(void* stream, char* err, size_t errLen) {
  (void)stream;
  return zppPerfNoDevice(err, errLen);
}
#endif
