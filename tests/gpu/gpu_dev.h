/*
 * What test_quant_cuda.c needs from "the device", behind one small C
 * interface with two implementations:
 *   gpu_dev_cuda.c    a real GPU through the CUDA runtime (test_quant_cuda,
 *                     label gpu: exits 77 without a usable device);
 *   quant_cuda_emu.cpp the kernels run by tests/gpu/cuda_emu.h on the CPU,
 *                     "device memory" being host memory (test_quant_cuda_emu,
 *                     label quant: runs everywhere CUDA headers exist).
 * The same test source drives both, so what CI checks without a GPU is what
 * a GPU machine checks for real.
 *
 * In the emulated build (ZPP_TEST_EMU) the CUDA codec entry points are
 * renamed, so that the emulated copies never clash with the real ones in
 * libzpp_static.
 */
#ifndef ZPP_TEST_GPU_DEV_H_
#define ZPP_TEST_GPU_DEV_H_

#include <stddef.h>

#ifdef ZPP_TEST_EMU
#define zppQuantizeCuda zppEmuQuantizeCuda
#define zppDequantizeCuda zppEmuDequantizeCuda
#define zppDequantizeAccumulateCuda zppEmuDequantizeAccumulateCuda
#define zppDequantizeSumCuda zppEmuDequantizeSumCuda
#define zppQuantReduceRequantCuda zppEmuQuantReduceRequantCuda
#define zppQuantizeReorderedCuda zppEmuQuantizeReorderedCuda
#define zppQuantizeExCuda zppEmuQuantizeExCuda
#define zppDequantizeExCuda zppEmuDequantizeExCuda
#define zppDequantizeSumExCuda zppEmuDequantizeSumExCuda
#define zppQuantReduceRequantExCuda zppEmuQuantReduceRequantExCuda
#define zppDequantizeSumOrderCuda zppEmuDequantizeSumOrderCuda
#define zppQuantReduceRequantOrderCuda zppEmuQuantReduceRequantOrderCuda
#endif

#include "quant_kernels/zpp_quant_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a device can be used; otherwise 0 and why in `reason`. */
int tdevInit(char* reason, size_t len);
/* "emulated" or the GPU's name. */
const char* tdevName(void);
/* 1 in the emulated build (tests shrink their largest sizes there). */
int tdevIsEmulated(void);
/* The stream every test call runs on (a created, non-default one). */
cudaStream_t tdevStream(void);
/* Failures of these abort the test (exit 1): they are not what is tested. */
void* tdevMalloc(size_t bytes);
void tdevFree(void* p);
void tdevMemset(void* d, int byte, size_t bytes);
void tdevToDevice(void* d, const void* h, size_t bytes);
void tdevToHost(void* h, const void* d, size_t bytes);
/* Waits for the stream; a kernel fault shows up here and fails the test. */
void tdevSync(void);
void tdevShutdown(void);

/* Asynchrony checks (real GPU only; 0 = not available, e.g. emulated).
 * tdevHoldStream parks the stream behind a host function that waits for
 * tdevReleaseStream (at most 20 s): a call made in between that waited for
 * the stream, or for the device, would stall until then.
 * tdevReleaseStream returns 1 when the gate was still closed (nothing waited
 * for it) and the stream has drained, 0 if it timed out. */
int tdevHoldStream(void);
int tdevReleaseStream(void);
/* Stream capture into a CUDA graph: begin, then end + instantiate + launch
 * + wait. 1 on success. Calls that allocate or synchronize fail capture. */
int tdevCaptureBegin(void);
int tdevCaptureEndAndRun(void);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_TEST_GPU_DEV_H_ */
