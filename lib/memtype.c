/* Where a buffer lives (memtype.h). */
#include "lib/memtype.h"

#include "zpp_build_config.h"

#if ZPP_HAVE_CUDA
#include <pthread.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "check.h"

static pthread_once_t probeOnce = PTHREAD_ONCE_INIT;
static int haveDevice = 0;

/* Once per process: with no device every pointer is host memory, and
 * cudaPointerGetAttributes would only fail. */
static void probeDevices(void) {
  int n = 0; /* cudaGetDeviceCount leaves it unset on error */
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ZPP_INFO(CUDA, "no CUDA device (%s): every buffer is host memory", cudaGetErrorString(err));
    n = 0;
  }
  haveDevice = n > 0;
}

int zppMemIsDevice(const void* ptr) {
  pthread_once(&probeOnce, probeDevices);
  if (!haveDevice || ptr == NULL) return 0;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof(attr));
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError(); /* an unregistered host pointer on old CUDA */
    return 0;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

int zppMemKnowsDevices(void) { return 1; }

#else

int zppMemIsDevice(const void* ptr) {
  (void)ptr;
  return 0;
}

int zppMemKnowsDevices(void) { return 0; }

#endif
