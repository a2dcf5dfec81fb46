/*
 * GPU half of zpp-bench-kernels: the CUDA codecs, each beside a
 * cudaMemcpyAsync device-to-device of the same bytes in the same run.
 *
 * Timing: CUDA events around each launch on one non-blocking stream
 * (UseManualTime), so the numbers are device time, not host launch overhead.
 * Every iteration times the kernel and then a copy of the same bytes, back to
 * back, so both see the same clocks and the same memory state; the ratio is
 * the number to read (DESIGN.md: compare side by side, never one absolute
 * time).
 *
 * Reported per row:
 *   bytes_per_second  the row's bytes / kernel time
 *   copy_GBps         the same bytes / copy time (GB = 1e9)
 *   vs_copy           copy time / kernel time: 1.0 is copy speed, the
 *                     target is >= 0.8 at large sizes
 * The bytes: quantize and dequantize count the uncompressed tensor
 * (count * size of the fp32/fp16/bf16 type), the size the codec stands in
 * for; the reductions count their packed inputs (n segments).
 *
 * Without a usable CUDA device nothing here is registered, so the binary runs
 * its CPU benchmarks alone (CI, laptops). Select these with
 * --benchmark_filter=cuda (the copies: d2d_copy).
 *
 * Host code only (the kernels are quant_kernels/quant_cuda.cu); a .cu file so
 * that it is compiled only where nvcc is and perf/CMakeLists.txt adds it to
 * zpp-bench-kernels exactly when CUDA is on.
 */
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_names.h"
#include "names.h"
#include "quant_kernels/zpp_half.h"
#include "quant_kernels/zpp_quant_cuda.h"

namespace {

using benchnames::RotOrder;
using benchnames::RotSuffix;
using benchnames::SizeName;

const char* typeName(zppDataType_t t) { return zppDtypeShortName(t); }

size_t typeSize(zppDataType_t t) { return t == zppFloat32 ? 4 : 2; }

cudaStream_t benchStream() {
  static cudaStream_t s = [] {
    cudaStream_t st = nullptr;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) st = nullptr;
    return st;
  }();
  return s;
}

/* Device memory that frees itself when a benchmark run ends. */
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  bool alloc(size_t bytes) { return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess; }
  uint8_t* b() const { return static_cast<uint8_t*>(p); }
};

bool ok(benchmark::State& st, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::string msg = std::string(what) + ": " + cudaGetErrorString(e);
  st.SkipWithError(msg.c_str());
  return false;
}

bool ok(benchmark::State& st, zppResult_t r, const char* what) {
  if (r == zppSuccess) return true;
  std::string msg = std::string(what) + ": " + zppGetErrorString(r);
  st.SkipWithError(msg.c_str());
  return false;
}

/* Normal values of spread-out magnitudes (one scale per 32 elements, like
 * real activations/gradients), generated on the host for 1M elements and
 * repeated on the device: the codecs' speed does not depend on the values
 * beyond "finite, non-zero". */
cudaError_t fillRandom(void* d, zppDataType_t dt, size_t count) {
  const size_t chunk = count < ((size_t)1 << 20) ? count : ((size_t)1 << 20);
  const size_t es = typeSize(dt);
  std::vector<uint8_t> h(chunk * es);
  std::mt19937_64 gen(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float scale = 1.0f;
  for (size_t i = 0; i < chunk; i++) {
    if (i % 32 == 0) scale = std::ldexp(1.0f, (int)(gen() % 16) - 8);
    float v = nd(gen) * scale;
    if (dt == zppFloat32) {
      std::memcpy(&h[4 * i], &v, 4);
    } else {
      uint16_t b = dt == zppFloat16 ? zppFloatToHalf(v) : zppFloatToBf16(v);
      std::memcpy(&h[2 * i], &b, 2);
    }
  }
  cudaStream_t s = benchStream();
  cudaError_t e = cudaMemcpyAsync(d, h.data(), chunk * es, cudaMemcpyHostToDevice, s);
  for (size_t done = chunk; e == cudaSuccess && done < count;) {
    size_t n = done < count - done ? done : count - done;
    e = cudaMemcpyAsync(static_cast<uint8_t*>(d) + done * es, d, n * es, cudaMemcpyDeviceToDevice, s);
    done += n;
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return e;
}

/* The timed loop: enqueue() launches the kernel under test on the stream;
 * a copy of `bytes` follows it in every iteration. */
template <class Enqueue>
void timedAgainstCopy(benchmark::State& st, size_t bytes, Enqueue&& enqueue) {
  cudaStream_t s = benchStream();
  DevBuf src, dst;
  if (!s) {
    st.SkipWithError("cannot create a CUDA stream");
    return;
  }
  if (!ok(st, src.alloc(bytes) ? cudaSuccess : cudaErrorMemoryAllocation, "cudaMalloc") ||
      !ok(st, dst.alloc(bytes) ? cudaSuccess : cudaErrorMemoryAllocation, "cudaMalloc") ||
      !ok(st, cudaMemsetAsync(src.p, 0x3c, bytes, s), "cudaMemset"))
    return;
  cudaEvent_t e0, e1, e2;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventCreate(&e2);
  /* warm-up: first-launch costs (module load, TLB) stay out of the numbers */
  bool good = ok(st, enqueue(), "kernel") &&
              ok(st, cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, s), "copy") &&
              ok(st, cudaStreamSynchronize(s), "warm-up");
  double kernelMs = 0, copyMs = 0;
  if (good) {
    for (auto _ : st) {
      cudaEventRecord(e0, s);
      zppResult_t r = enqueue();
      cudaEventRecord(e1, s);
      cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, s);
      cudaEventRecord(e2, s);
      if (!ok(st, r, "kernel") || !ok(st, cudaEventSynchronize(e2), "kernel run")) break;
      float k = 0, c = 0;
      cudaEventElapsedTime(&k, e0, e1);
      cudaEventElapsedTime(&c, e1, e2);
      st.SetIterationTime(k / 1e3);
      kernelMs += k;
      copyMs += c;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  if (st.error_occurred() || st.iterations() == 0 || kernelMs <= 0 || copyMs <= 0) return;
  const double iters = (double)st.iterations();
  st.SetBytesProcessed((int64_t)(bytes * st.iterations()));
  st.counters["copy_GBps"] = bytes * iters / (copyMs / 1e3) / 1e9;
  st.counters["vs_copy"] = copyMs / kernelMs;
}

/* ---- the benchmarks ------------------------------------------------------------- */

void BM_Copy(benchmark::State& st, size_t bytes) {
  cudaStream_t s = benchStream();
  DevBuf a, b;
  if (!s || !a.alloc(bytes) || !b.alloc(bytes)) {
    st.SkipWithError("cudaMalloc");
    return;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaMemsetAsync(a.p, 0x3c, bytes, s);
  cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s);
  for (auto _ : st) {
    cudaEventRecord(e0, s);
    cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s);
    cudaEventRecord(e1, s);
    if (!ok(st, cudaEventSynchronize(e1), "copy")) break;
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    st.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  st.SetBytesProcessed((int64_t)(bytes * st.iterations()));
}

/* flags: 0, or ZPP_QUANT_ROTATE for the rotated codec (zppQuantizeExCuda). */
void BM_Quantize(benchmark::State& st, zppDataType_t dt, int bits, int block, size_t count,
                 unsigned flags) {
  DevBuf in, pk;
  if (!in.alloc(count * typeSize(dt)) || !pk.alloc(zppQuantPackedSize(count, bits, block)) ||
      !ok(st, fillRandom(in.p, dt, count), "fill")) {
    if (!st.error_occurred()) st.SkipWithError("cudaMalloc");
    return;
  }
  timedAgainstCopy(st, count * typeSize(dt), [&] {
    return zppQuantizeExCuda(in.p, dt, count, bits, block, flags, pk.p, benchStream());
  });
}

void BM_Dequantize(benchmark::State& st, zppDataType_t dt, int bits, int block, size_t count,
                   unsigned flags) {
  DevBuf in, pk, out;
  if (!in.alloc(count * 4) || !pk.alloc(zppQuantPackedSize(count, bits, block)) ||
      !out.alloc(count * typeSize(dt)) || !ok(st, fillRandom(in.p, zppFloat32, count), "fill") ||
      !ok(st, zppQuantizeExCuda(in.p, zppFloat32, count, bits, block, flags, pk.p, benchStream()),
          "quantize")) {
    if (!st.error_occurred()) st.SkipWithError("cudaMalloc");
    return;
  }
  timedAgainstCopy(st, count * typeSize(dt), [&] {
    return flags ? zppDequantizeExCuda(pk.p, count, bits, block, out.p, dt, benchStream())
                 : zppDequantizeCuda(pk.p, count, bits, block, out.p, dt, benchStream());
  });
}

/* n packed inputs laid end to end, as an all-to-all receives them; rotated
 * ones (zppQuantizeExCuda) when rot is not 0. */
bool makeInputs(benchmark::State& st, DevBuf& pk, int n, size_t count, int bits, int block,
                int rot = 0) {
  const size_t P = zppQuantPackedSize(count, bits, block);
  DevBuf x;
  if (!x.alloc(count * 4) || !pk.alloc(P * n)) {
    st.SkipWithError("cudaMalloc");
    return false;
  }
  if (!ok(st, fillRandom(x.p, zppFloat32, count), "fill")) return false;
  for (int k = 0; k < n; k++)
    if (!ok(st,
            zppQuantizeExCuda(x.p, zppFloat32, count, bits, block, rot ? ZPP_QUANT_ROTATE : 0u,
                              pk.b() + k * P, benchStream()),
            "quantize"))
      return false;
  return ok(st, cudaStreamSynchronize(benchStream()), "quantize");
}

/* rot: the inputs, as the CPU half names them (bench_names.h, RotSuffix);
 * rotated ones go through the Order entry points with a rotated output. */
void BM_ReduceRequant(benchmark::State& st, int n, int bitsIn, int bitsOut, int block, size_t count,
                      int rot = 0) {
  DevBuf pk, out;
  if (!makeInputs(st, pk, n, count, bitsIn, block, rot)) return;
  if (!out.alloc(zppQuantPackedSize(count, bitsOut, block))) {
    st.SkipWithError("cudaMalloc");
    return;
  }
  const size_t P = zppQuantPackedSize(count, bitsIn, block);
  timedAgainstCopy(st, P * n, [&] {
    return rot ? zppQuantReduceRequantOrderCuda(pk.p, P, n, count, bitsIn, block, bitsOut, block,
                                                ZPP_QUANT_ROTATE, RotOrder(rot), out.p, benchStream())
               : zppQuantReduceRequantCuda(pk.p, P, n, count, bitsIn, block, bitsOut, block, out.p,
                                           benchStream());
  });
}

/* qgZ's alternative: int8 between the hops, int4 out, each at its default
 * block size. */
void BM_ReduceRequant8to4(benchmark::State& st, int n, size_t count) {
  const int bIn = zppQuantDefaultBlock(8), bOut = zppQuantDefaultBlock(4);
  DevBuf pk, out;
  if (!makeInputs(st, pk, n, count, 8, bIn)) return;
  if (!out.alloc(zppQuantPackedSize(count, 4, bOut))) {
    st.SkipWithError("cudaMalloc");
    return;
  }
  const size_t P = zppQuantPackedSize(count, 8, bIn);
  timedAgainstCopy(st, P * n, [&] {
    return zppQuantReduceRequantCuda(pk.p, P, n, count, 8, bIn, 4, bOut, out.p, benchStream());
  });
}

void BM_DequantizeSum(benchmark::State& st, int n, int bits, int block, zppDataType_t dt, size_t count,
                      int rot = 0) {
  DevBuf pk, out;
  if (!makeInputs(st, pk, n, count, bits, block, rot)) return;
  if (!out.alloc(count * typeSize(dt))) {
    st.SkipWithError("cudaMalloc");
    return;
  }
  const size_t P = zppQuantPackedSize(count, bits, block);
  timedAgainstCopy(st, P * n, [&] {
    return rot ? zppDequantizeSumOrderCuda(pk.p, P, n, count, bits, block, (float)n, out.p, dt,
                                           RotOrder(rot), benchStream())
               : zppDequantizeSumCuda(pk.p, P, n, count, bits, block, (float)n, out.p, dt,
                                      benchStream());
  });
}

void BM_QuantizeReordered(benchmark::State& st, zppDataType_t dt, int bits, int block, int W, int L,
                          size_t count) {
  const size_t part = count / W;
  DevBuf in, pk;
  if (!in.alloc(count * typeSize(dt)) || !pk.alloc(zppQuantPackedSize(part, bits, block) * W) ||
      !ok(st, fillRandom(in.p, dt, count), "fill")) {
    if (!st.error_occurred()) st.SkipWithError("cudaMalloc");
    return;
  }
  timedAgainstCopy(st, part * W * typeSize(dt), [&] {
    return zppQuantizeReorderedCuda(in.p, dt, part, part, W, L, bits, block, pk.p, benchStream());
  });
}

/* ---- registration ------------------------------------------------------------------ */

/* Names follow bench_kernels.cpp's scheme with "cuda" as the implementation,
 * and each row's label "vs=<baseline>" names its device copy, so that the
 * CPU half's end-of-run summary pairs them too (its ratio compares separate
 * runs; vs_copy above compares within each iteration). */
std::string copyName(size_t bytes) { return "d2d_copy/" + SizeName(bytes); }

void addCopy(size_t bytes) {
  static std::set<size_t> done;
  if (!done.insert(bytes).second) return;
  benchmark::RegisterBenchmark(copyName(bytes).c_str(),
                               [bytes](benchmark::State& st) { BM_Copy(st, bytes); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

template <class F>
void add(const std::string& name, size_t baselineBytes, F&& fn) {
  addCopy(baselineBytes);
  const std::string label = "vs=" + copyName(baselineBytes);
  benchmark::RegisterBenchmark(name.c_str(),
                               [fn, label](benchmark::State& st) {
                                 fn(st);
                                 st.SetLabel(label);
                               })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

void registerAll() {
  const zppDataType_t types[] = {zppFloat32, zppFloat16, zppBfloat16};
  /* tensor bytes: 4 MiB stays in the H100's 50 MB L2; 256 MiB is memory-bound */
  const size_t sizes[] = {(size_t)4 << 20, (size_t)64 << 20, (size_t)256 << 20};
  for (size_t bytes : sizes) {
    for (zppDataType_t dt : types) {
      const size_t count = bytes / typeSize(dt);
      for (int bits : {8, 4}) {
        const int block = zppQuantDefaultBlock(bits);
        const std::string tail =
            std::string("cuda/") + typeName(dt) + "/int" + std::to_string(bits) + "/" + SizeName(bytes);
        add("quantize/" + tail, bytes,
            [=](benchmark::State& st) { BM_Quantize(st, dt, bits, block, count, 0); });
        add("dequantize/" + tail, bytes,
            [=](benchmark::State& st) { BM_Dequantize(st, dt, bits, block, count, 0); });
        /* the rotated codec beside it (docs/codecs.md, "Rotation", "CUDA") */
        add("quantize-rotated/" + tail, bytes,
            [=](benchmark::State& st) { BM_Quantize(st, dt, bits, block, count, ZPP_QUANT_ROTATE); });
        add("dequantize-rotated/" + tail, bytes,
            [=](benchmark::State& st) { BM_Dequantize(st, dt, bits, block, count, ZPP_QUANT_ROTATE); });
      }
    }
    /* the block-size extremes: 2..4 threads per block (32) and a whole CTA
     * of 256 or 512 threads per block (4096) */
    for (int block : {32, 4096}) {
      for (zppDataType_t dt : {zppFloat32, zppFloat16}) {
        const size_t count = bytes / typeSize(dt);
        const std::string tail =
            "cuda-b" + std::to_string(block) + "/" + typeName(dt) + "/int8/" + SizeName(bytes);
        add("quantize/" + tail, bytes,
            [=](benchmark::State& st) { BM_Quantize(st, dt, 8, block, count, 0); });
        add("dequantize/" + tail, bytes,
            [=](benchmark::State& st) { BM_Dequantize(st, dt, 8, block, count, 0); });
      }
    }
    /* qgZ's steps on a bf16 gradient of `bytes`: the reordered int4
     * quantization, the fused reduce between the hops (n int4 inputs), the
     * final sum / average into bf16 or fp32 */
    const size_t count = bytes / 2;
    const int b4 = zppQuantDefaultBlock(4);
    add("quantize_reordered/cuda/bf16/int4/W16L8/" + SizeName(bytes), bytes,
        [=](benchmark::State& st) { BM_QuantizeReordered(st, zppBfloat16, 4, b4, 16, 8, count); });
    /* and the same on rotated inputs (docs/codecs.md, "CUDA reductions of
     * rotated segments"), in each order */
    for (int rot = 0; rot <= 3; rot++) {
      for (int n : {2, 8}) {
        const size_t inBytes = zppQuantPackedSize(count, 4, b4) * n;
        const std::string tail = std::string("cuda/int4x") + std::to_string(n);
        add(std::string("reduce_requant") + RotSuffix(rot) + tail + "/" + SizeName(bytes), inBytes,
            [=](benchmark::State& st) { BM_ReduceRequant(st, n, 4, 4, b4, count, rot); });
        if (rot == 3) continue; /* the direct order differs only in the requantization */
        add(std::string("dequantize_sum") + RotSuffix(rot) + tail + "-bf16/" + SizeName(bytes), inBytes,
            [=](benchmark::State& st) { BM_DequantizeSum(st, n, 4, b4, zppBfloat16, count, rot); });
      }
    }
    const size_t in8 = zppQuantPackedSize(count, 8, zppQuantDefaultBlock(8)) * 8;
    add("reduce_requant/cuda/int8x8-int4/" + SizeName(bytes), in8,
        [=](benchmark::State& st) { BM_ReduceRequant8to4(st, 8, count); });
  }
}

/* Registration happens before main (the CPU half owns main): only when a
 * device answers. cudaGetDeviceCount may leave its output unset when it
 * fails (no driver: error 35), hence the 0. */
struct GpuRegistrar {
  GpuRegistrar() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
      (void)cudaGetLastError(); /* leave no sticky error behind */
      return;
    }
    if (cudaSetDevice(0) != cudaSuccess) return;
    registerAll();
  }
} gpuRegistrar;

}  // namespace
