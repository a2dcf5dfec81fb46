/* The real-GPU side of gpu_dev.h: the CUDA runtime on device 0. */
#include "gpu_dev.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

static cudaStream_t stream_;
static char name_[256] = "unknown GPU";

static void die(const char* what, cudaError_t e) {
  fprintf(stderr, "test device: %s failed: %s (%d)\n", what, cudaGetErrorString(e), (int)e);
  exit(1);
}

#define TDEV(call)                                     \
  do {                                                 \
    cudaError_t tdevErr_ = (call);                     \
    if (tdevErr_ != cudaSuccess) die(#call, tdevErr_); \
  } while (0)

int tdevInit(char* reason, size_t len) {
  /* Without a driver cudaGetDeviceCount fails (error 35 on our CI machines)
   * and may leave its output untouched: start from 0. */
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    snprintf(reason, len, "no usable CUDA device: cudaGetDeviceCount: %s (%d)", cudaGetErrorString(e),
             (int)e);
    return 0;
  }
  if (n <= 0) {
    snprintf(reason, len, "no CUDA device found");
    return 0;
  }
  e = cudaSetDevice(0);
  if (e == cudaSuccess) e = cudaFree(NULL); /* creates the context */
  if (e != cudaSuccess) {
    snprintf(reason, len, "CUDA device 0 cannot be used: %s (%d)", cudaGetErrorString(e), (int)e);
    return 0;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    snprintf(name_, sizeof name_, "%.200s (sm_%d%d)", prop.name, prop.major, prop.minor);
  TDEV(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  return 1;
}

const char* tdevName(void) { return name_; }
int tdevIsEmulated(void) { return 0; }
cudaStream_t tdevStream(void) { return stream_; }

void* tdevMalloc(size_t bytes) {
  void* p = NULL;
  TDEV(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

void tdevFree(void* p) {
  if (p) TDEV(cudaFree(p));
}

void tdevMemset(void* d, int byte, size_t bytes) { TDEV(cudaMemsetAsync(d, byte, bytes, stream_)); }

void tdevToDevice(void* d, const void* h, size_t bytes) {
  if (bytes) TDEV(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream_));
  TDEV(cudaStreamSynchronize(stream_));
}

void tdevToHost(void* h, const void* d, size_t bytes) {
  if (bytes) TDEV(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream_));
  TDEV(cudaStreamSynchronize(stream_));
}

void tdevSync(void) { TDEV(cudaStreamSynchronize(stream_)); }

void tdevShutdown(void) {
  if (stream_) TDEV(cudaStreamDestroy(stream_));
  stream_ = NULL;
}

static atomic_int gateOpen_;
static atomic_int gateTimedOut_;

static void CUDART_CB gateFn(void* arg) {
  (void)arg;
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 20000 && !atomic_load(&gateOpen_); i++) nanosleep(&ms, NULL);
  if (!atomic_load(&gateOpen_)) atomic_store(&gateTimedOut_, 1);
}

int tdevHoldStream(void) {
  atomic_store(&gateOpen_, 0);
  atomic_store(&gateTimedOut_, 0);
  TDEV(cudaLaunchHostFunc(stream_, gateFn, NULL));
  return 1;
}

int tdevReleaseStream(void) {
  int early = !atomic_load(&gateTimedOut_);
  atomic_store(&gateOpen_, 1);
  TDEV(cudaStreamSynchronize(stream_));
  return early && !atomic_load(&gateTimedOut_);
}

static cudaGraph_t graph_;

int tdevCaptureBegin(void) {
  return cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
}

int tdevCaptureEndAndRun(void) {
  cudaError_t e = cudaStreamEndCapture(stream_, &graph_);
  if (e != cudaSuccess) {
    fprintf(stderr, "test device: stream capture failed: %s\n", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return 0;
  }
  cudaGraphExec_t exec = NULL;
  e = cudaGraphInstantiate(&exec, graph_, 0);
  if (e == cudaSuccess) e = cudaGraphLaunch(exec, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (exec) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph_);
  if (e != cudaSuccess) {
    fprintf(stderr, "test device: graph run failed: %s\n", cudaGetErrorString(e));
    return 0;
  }
  return 1;
}
