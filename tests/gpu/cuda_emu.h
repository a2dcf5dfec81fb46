/*
 * A tiny CUDA execution emulator, for tests only: it runs the codec kernels
 * of quant_kernels/quant_cuda.cu on the CPU so that machines without a GPU
 * (CI, the development machines) still execute the kernels' index math,
 * packing, tail handling, header writing and in-CTA reductions, and compare
 * the result with the CPU codecs byte for byte.
 *
 * Model: a launch runs its CTAs one after another; the threads of a CTA are
 * fibers (ucontext stacks, switched by _setjmp/_longjmp) on one OS thread, resumed round-robin.
 * __syncthreads parks a fiber until every live fiber of the CTA has parked; a warp shuffle is a value
 * exchange between two such barriers (stronger than a warp-level sync, which is fine for kernels that
 * shuffle in CTA-uniform control flow, as ours do; the emulator aborts if some fibers wait at a barrier
 * while others have exited, which on a GPU would be a divergence bug).
 *
 * What it cannot show: the device's own numerics (the fp32 intrinsics are
 * IEEE by definition and map to the same host operations here), timing,
 * memory-model races between CTAs, or real addresses' alignment effects on
 * speed. compute-sanitizer on a real GPU covers the rest (ctest -L gpu).
 *
 * Include this before quant_cuda.cu, with ZPP_CUDA_EMU defined.
 */
#ifndef ZPP_CUDA_EMU_H_
#define ZPP_CUDA_EMU_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <ucontext.h>

#include <functional>
#include <memory>
#include <vector>

/* Keywords, defined before the CUDA headers so that theirs are not used. */
#define __host__
#define __device__
#define __global__
#define __shared__ static /* one copy shared by all fibers of the running CTA */
#define __launch_bounds__(...)

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <vector_types.h>

/* No device: launch errors cannot happen, and cudart must not be asked. */
#define cudaGetLastError() cudaSuccess

namespace zppemu {

struct Idx {
  unsigned x, y, z;
};

/* A thread of the running CTA. Fibers live across launches: each is started
 * once (makecontext: its own stack), then loops running the launch's body.
 * Switches between a fiber and the scheduler are _setjmp/_longjmp, which
 * save only the callee-saved registers; swapcontext also saves the signal
 * mask with a system call each time, and made this emulator spend 90% of
 * its time in the kernel. (_FORTIFY_SOURCE would turn _longjmp into
 * __longjmp_chk, which refuses a jump onto another stack: the test target
 * is built without it, see tests/gpu/CMakeLists.txt.) */
struct Fiber {
  ucontext_t start;
  jmp_buf resumeAt;
  std::vector<char> stack;
  bool started;
  bool done;
  bool parked;
};

inline Idx g_threadIdx, g_blockIdx, g_blockDim, g_gridDim;
inline jmp_buf g_sched;
inline std::vector<std::unique_ptr<Fiber>> g_fibers; /* stable addresses */
inline Fiber* g_cur;
inline const std::function<void()>* g_body;
inline std::vector<uint32_t> g_slots; /* shuffle exchange, one per thread */

/* From the running fiber back to the scheduler; returns when resumed. */
inline void toScheduler() {
  if (!_setjmp(g_cur->resumeAt)) _longjmp(g_sched, 1);
}

inline void fiberEntry() {
  for (;;) {
    (*g_body)();
    g_cur->done = true;
    toScheduler(); /* resumed by the next launch that needs this thread */
  }
}

/* From the scheduler into fiber f until it parks or finishes the body. */
inline void resume(Fiber& f) {
  g_cur = &f;
  if (_setjmp(g_sched)) return;
  if (f.started) _longjmp(f.resumeAt, 1);
  f.started = true;
  ucontext_t unused;
  swapcontext(&unused, &f.start); /* once per fiber; never returns here */
}

inline void park() {
  g_cur->parked = true;
  toScheduler();
}

inline void launch(unsigned gx, unsigned gy, unsigned threads, const std::function<void()>& body) {
  constexpr size_t kStack = 64 * 1024;
  while (g_fibers.size() < threads) {
    auto f = std::make_unique<Fiber>();
    f->stack.resize(kStack);
    getcontext(&f->start);
    f->start.uc_stack.ss_sp = f->stack.data();
    f->start.uc_stack.ss_size = f->stack.size();
    f->start.uc_link = nullptr; /* fiberEntry never returns */
    makecontext(&f->start, fiberEntry, 0);
    f->started = false;
    g_fibers.push_back(std::move(f));
  }
  g_slots.assign(threads, 0);
  g_body = &body;
  g_blockDim = {threads, 1, 1};
  g_gridDim = {gx, gy, 1};
  for (unsigned by = 0; by < gy; by++) {
    for (unsigned bx = 0; bx < gx; bx++) {
      g_blockIdx = {bx, by, 0};
      for (unsigned t = 0; t < threads; t++) {
        g_fibers[t]->done = false;
        g_fibers[t]->parked = false;
      }
      for (;;) {
        unsigned live = 0, parked = 0;
        for (unsigned t = 0; t < threads; t++) {
          Fiber& f = *g_fibers[t];
          if (f.done) continue;
          f.parked = false;
          g_threadIdx = {t, 0, 0};
          resume(f);
          if (!f.done) {
            live++;
            if (f.parked) parked++;
          }
        }
        if (live == 0) break;
        if (parked != threads) {
          fprintf(stderr, "cuda_emu: barrier reached by %u of %u threads (block %u,%u)\n", parked,
                  threads, bx, by);
          abort();
        }
      }
    }
  }
}

}  // namespace zppemu

#define threadIdx (zppemu::g_threadIdx)
#define blockIdx (zppemu::g_blockIdx)
#define blockDim (zppemu::g_blockDim)
#define gridDim (zppemu::g_gridDim)

#define ZPP_CUDA_UNPAREN(...) __VA_ARGS__
#define ZPP_CUDA_LAUNCH(kernel, grid, block, stream, ...)                                \
  do {                                                                                   \
    dim3 zppEmuGrid_(grid);                                                              \
    std::function<void()> zppEmuBody_ = [&]() { ZPP_CUDA_UNPAREN kernel(__VA_ARGS__); }; \
    zppemu::launch(zppEmuGrid_.x, zppEmuGrid_.y, (unsigned)(block), zppEmuBody_);        \
  } while (0)

static inline void __syncthreads() { zppemu::park(); }

/* A barrier that also ORs a value over the CTA: every fiber posts its value,
 * parks, reads them all, parks again (no slot is reused before all read). */
static inline int __syncthreads_or(int pred) {
  const unsigned t = threadIdx.x;
  zppemu::g_slots[t] = pred != 0;
  zppemu::park();
  int any = 0;
  for (unsigned i = 0; i < blockDim.x; i++) any |= zppemu::g_slots[i] != 0;
  zppemu::park();
  return any;
}

/* Fibers never run at the same time: an atomic is a plain update. */
static inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
static inline unsigned atomicMax(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old > v ? old : v;
  return old;
}
static inline unsigned atomicOr(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old | v;
  return old;
}

static inline unsigned __shfl_xor_sync(unsigned mask, unsigned v, int laneMask) {
  if (mask != 0xffffffffu) {
    fprintf(stderr, "cuda_emu: only full-warp shuffles are emulated\n");
    abort();
  }
  const unsigned t = threadIdx.x;
  zppemu::g_slots[t] = v;
  zppemu::park();
  const unsigned r = zppemu::g_slots[(t & ~31u) | ((t & 31u) ^ (unsigned)laneMask)];
  zppemu::park(); /* nobody overwrites a slot before its reader has read it */
  return r;
}

/* The fp32 intrinsics: IEEE round-to-nearest-even on the device; the host's
 * SSE arithmetic is the same (the tests are built with -ffp-contract=off). */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline float __int2float_rn(int i) { return (float)i; }
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return u;
}
template <class T>
static inline T __ldcs(const T* p) {
  return *p;
}
template <class T>
static inline T __ldg(const T* p) {
  return *p;
}
template <class T>
static inline T max(T a, T b) {
  return a > b ? a : b;
}
template <class T>
static inline T min(T a, T b) {
  return a < b ? a : b;
}

#endif /* ZPP_CUDA_EMU_H_ */
