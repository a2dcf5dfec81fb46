/*
 * The emulated side of gpu_dev.h: quant_kernels/quant_cuda.cu,
 * quant_rotate_cuda.cu and quant_rotate_reduce_cuda.cu compiled as host C++ over tests/gpu/cuda_emu.h,
 * "device" memory being host memory.
 */
#define ZPP_CUDA_EMU 1

/* Before cuda_fp16.h (in cuda_emu.h): a local `half` in zpp_half.h would
 * otherwise shadow CUDA's type of that name (-Wshadow). quant_cuda.cu reaches
 * it through quant_ref.h; the include guard makes that a no-op. */
#include "quant_kernels/zpp_half.h"

#include "cuda_emu.h"
#include "gpu_dev.h"

#include "quant_kernels/quant_cuda.cu"
#include "quant_kernels/quant_rotate_cuda.cu"
#include "quant_kernels/quant_rotate_reduce_cuda.cu"

extern "C" {

int tdevInit(char* reason, size_t len) {
  (void)reason;
  (void)len;
  return 1;
}
const char* tdevName(void) { return "emulated on the CPU (tests/gpu/cuda_emu.h)"; }
int tdevIsEmulated(void) { return 1; }
cudaStream_t tdevStream(void) { return nullptr; }

void* tdevMalloc(size_t bytes) {
  /* 256-byte aligned like cudaMalloc, so the vector paths are taken. */
  void* p = aligned_alloc(256, ((bytes ? bytes : 1) + 255) & ~(size_t)255);
  if (!p) {
    fprintf(stderr, "test device: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}
void tdevFree(void* p) { free(p); }
void tdevMemset(void* d, int byte, size_t bytes) { memset(d, byte, bytes); }
void tdevToDevice(void* d, const void* h, size_t bytes) { memcpy(d, h, bytes); }
void tdevToHost(void* h, const void* d, size_t bytes) { memcpy(h, d, bytes); }
void tdevSync(void) {}
void tdevShutdown(void) {}
/* No streams here: the emulated calls run to completion before returning. */
int tdevHoldStream(void) { return 0; }
int tdevReleaseStream(void) { return 0; }
int tdevCaptureBegin(void) { return 0; }
int tdevCaptureEndAndRun(void) { return 0; }

}  // extern "C"
