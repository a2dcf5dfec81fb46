/*
 * Overlap on a GPU (label gpu; exit 77 without one): the ZeRO++ device calls
 * are stream-ordered and never block the host.
 *
 *   returns: with a 200 ms kernel queued first on the gather's stream, the
 *            zppQwzAllGather call returns to the host long before that kernel
 *            ends, and the gather's end event is not reached at return;
 *   overlap: a 200 ms "compute" kernel on one stream and a gather issued on
 *            another right after it: the gather ends (event) before the
 *            compute kernel does, so the two ran at the same time.
 * One rank: the device path still quantizes, all-gathers through NCCL and
 * decodes.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "zpp.h"

#define CU(call) REQUIRE((call) == cudaSuccess)

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

static float elapsedMs(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CU(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

int main(int argc, char** argv) {
  (void)argc;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("SKIP: no CUDA device\n");
    return ZPP_TEST_SKIP;
  }
  CU(cudaSetDevice(0));
  int khz = 0;
  CU(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const long long spinCycles = (long long)khz * 200; /* 200 ms at the base clock, or more */
  zppUniqueId id;
  zppComm_t comm;
  REQUIRE(zppGetUniqueId(&id) == zppSuccess);
  REQUIRE(zppCommInitRank(&comm, 1, id, 0) == zppSuccess);
  const size_t count = (size_t)32 << 20; /* 64 MiB of bf16 */
  void *send, *recv;
  CU(cudaMalloc(&send, count * 2));
  CU(cudaMalloc(&recv, count * 2));
  CU(cudaMemset(send, 0x3c, count * 2)); /* bf16 1.17: finite, not zero */
  cudaStream_t compute, comms;
  CU(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&comms, cudaStreamNonBlocking));
  cudaEvent_t c0, c1, g0, g1;
  CU(cudaEventCreate(&c0));
  CU(cudaEventCreate(&c1));
  CU(cudaEventCreate(&g0));
  CU(cudaEventCreate(&g1));
  /* Warm-up: NCCL's communicator, the work set, the kernels' first load. */
  CHECK(zppQwzAllGather(send, recv, count, zppBfloat16, 8, comm, comms) == zppSuccess);
  CU(cudaStreamSynchronize(comms));

  /* returns: the gather queued behind a 200 ms kernel on its own stream. */
  spin<<<1, 1, 0, comms>>>(spinCycles);
  CU(cudaGetLastError());
  double t0 = zppClockNow();
  CHECK(zppQwzAllGather(send, recv, count, zppBfloat16, 8, comm, comms) == zppSuccess);
  double callMs = (zppClockNow() - t0) * 1e3;
  CU(cudaEventRecord(g1, comms));
  cudaError_t q = cudaEventQuery(g1);
  CHECK_MSG(q == cudaErrorNotReady, "the gather was done when the call returned (%s)",
            cudaGetErrorString(q));
  CHECK_MSG(callMs < 50, "zppQwzAllGather took %.1f ms to return behind a 200 ms kernel", callMs);
  CU(cudaStreamSynchronize(comms));
  printf("returns: the call took %.2f ms on the host, its stream %.1f ms\n", callMs,
         (zppClockNow() - t0) * 1e3);

  /* overlap: compute on one stream, the gather on another. */
  CU(cudaEventRecord(c0, compute));
  spin<<<1, 1, 0, compute>>>(spinCycles);
  CU(cudaGetLastError());
  CU(cudaEventRecord(c1, compute));
  CU(cudaEventRecord(g0, comms));
  CHECK(zppQwzAllGather(send, recv, count, zppBfloat16, 8, comm, comms) == zppSuccess);
  CU(cudaEventRecord(g1, comms));
  CU(cudaDeviceSynchronize());
  float computeMs = elapsedMs(c0, c1), gatherEnd = elapsedMs(c0, g1), gatherMs = elapsedMs(g0, g1);
  printf("overlap: compute %.1f ms; the gather took %.2f ms and ended %.1f ms after compute began\n",
         computeMs, gatherMs, gatherEnd);
  CHECK_MSG(gatherEnd < computeMs,
            "the gather ended %.1f ms after compute began, compute took %.1f ms: "
            "they did not overlap",
            gatherEnd, computeMs);

  CHECK(zppCommDestroy(comm) == zppSuccess);
  cudaFree(send);
  cudaFree(recv);
  return zppTestExit(argv[0]);
}
