/*
 * --device: zpp's own calls on device buffers (cudaMalloc) and a CUDA
 * stream, so that zpp-perf measures the device path (the CUDA codecs and
 * NCCL) the way a GPU trainer uses it. The host buffers stay the ones that
 * are filled and checked: the input is copied up before a row, the checked
 * call's output copied back; every timed call is followed by a
 * cudaStreamSynchronize, so a time is the call's until its stream is done.
 *
 * Without CUDA the flag is refused at parse time; without a GPU every rank
 * says so and stops (a measurement that was asked for must not silently run
 * on host buffers instead).
 */
#include "zpp_perf.h"
#include "zpp_build_config.h"

#if ZPP_HAVE_NCCL
#include <cuda_runtime.h>

int zppPerfDeviceAvailable(void) { return 1; }

static zppResult_t zppPerfDeviceFail(const zppPerfEnv_t* env, const char* what, cudaError_t e) {
  fprintf(stderr, "zpp-perf: rank %d: --device: %s: %s\n", env->rank, what, cudaGetErrorString(e));
  return zppUnhandledCudaError;
}

zppResult_t zppPerfDeviceInit(const zppPerfEnv_t* env, void** stream) {
  /* cudaGetDeviceCount leaves its output unset on failure. */
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) ndev = 0;
  /* Every rank must agree before any of them touches a device buffer. */
  double mine = ndev, fewest = 0;
  zppResult_t res = zppAllReduce(&mine, &fewest, 1, zppFloat64, zppMin, env->comm, NULL);
  if (res != zppSuccess) {
    zppPerfLibError(env, "agreeing on GPUs (allreduce)", res);
    return res;
  }
  if (fewest < 1) {
    if (ndev < 1)
      fprintf(stderr, "zpp-perf: rank %d: --device needs a CUDA GPU and none was found (%s)\n",
              env->rank, e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return zppInvalidUsage;
  }
  /* One GPU per local rank, round robin (several ranks share one when there
   * are fewer GPUs: NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1). */
  if ((e = cudaSetDevice(env->topo.localRank % ndev)) != cudaSuccess)
    return zppPerfDeviceFail(env, "cudaSetDevice", e);
  cudaStream_t s = NULL;
  if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess)
    return zppPerfDeviceFail(env, "cudaStreamCreate", e);
  *stream = s;
  return zppSuccess;
}

void zppPerfDeviceFinish(void* stream) {
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

zppResult_t zppPerfDeviceCopy(const zppPerfEnv_t* env, void* dst, const void* src, size_t bytes,
                              int toDevice) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, toDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? zppSuccess : zppPerfDeviceFail(env, "cudaMemcpy", e);
}

zppResult_t zppPerfDeviceSync(const zppPerfEnv_t* env, void* stream) {
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
  return e == cudaSuccess ? zppSuccess : zppPerfDeviceFail(env, "cudaStreamSynchronize", e);
}

#else /* !ZPP_HAVE_NCCL: --device is refused when the arguments are parsed */

int zppPerfDeviceAvailable(void) { return 0; }
zppResult_t zppPerfDeviceInit(const zppPerfEnv_t* env, void** stream) {
  (void)env;
  (void)stream;
  return zppInvalidUsage;
}
void zppPerfDeviceFinish(void* stream) { (void)stream; }
void* zppPerfDeviceAlloc(size_t bytes) {
  (void)bytes;
  return NULL;
}
void zppPerfDeviceFree(void* p) { (void)p; }
zppResult_t zppPerfDeviceCopy(const zppPerfEnv_t* env, void* dst, const void* src, size_t bytes,
                              int toDevice) {
  (void)env, (void)dst, (void)src, (void)bytes, (void)toDevice;
  return zppInvalidUsage;
}
zppResult_t zppPerfDeviceSync(const zppPerfEnv_t* env, void* stream) {
  (void)env;
  (void)stream;
  return zppInvalidUsage;
}
#endif
