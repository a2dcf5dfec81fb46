/*
 * What the CUDA codec files (quant_cuda.cu, quant_rotate_cuda.cu,
 * quant_rotate_reduce_cuda.cu) share: the launch seam for the emulator, the
 * header word and its device check, the rotation's sign masks and plain-block
 * mark, and the host-side argument helpers. Internal; included by .cu files only
 * (and, through them, by tests/gpu/quant_cuda_emu.cpp, which compiles them
 * into one translation unit: hence the include guard).
 */
#ifndef ZPP_QUANT_CUDA_DEV_CUH_
#define ZPP_QUANT_CUDA_DEV_CUH_

#include <stdint.h>

#ifndef ZPP_CUDA_EMU
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif
/* else: tests/gpu/cuda_emu.h, included before this file, runs these kernels
 * on the CPU (threads as fibers) so that CI without a GPU still executes
 * their indexing, packing and reductions against the CPU codecs. */

#include "cuda_check.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "zpp_quant_cuda.h"

/* Every launch goes through this macro: the one seam the emulator needs. The
 * kernel name comes in parentheses (it holds template commas). */
#ifndef ZPP_CUDA_LAUNCH
#define ZPP_CUDA_UNPAREN(...) __VA_ARGS__
#define ZPP_CUDA_LAUNCH(kernel, grid, block, stream, ...) \
  ZPP_CUDA_UNPAREN kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

#define QC_ARG(cond, ...)                                          \
  do {                                                             \
    if (!(cond)) ZPP_FAIL(zppInvalidArgument, QUANT, __VA_ARGS__); \
  } while (0)

namespace {

enum { kF32 = 0, kF16 = 1, kBF16 = 2 };

__host__ __device__ __forceinline__ uint32_t headerWord1(int bits, int blockLog2) {
  return (uint32_t)bits | ((uint32_t)blockLog2 << 8);  // reserved = 0
}

/* The header's flag bits (its second word): "the segment holds markers",
 * "rotated" (zpp_quant.h). */
constexpr uint32_t kMarkersFlag = (uint32_t)ZPP_QUANT_FLAG_MARKERS << 16;
constexpr uint32_t kRotatedFlag = (uint32_t)ZPP_QUANT_FLAG_ROTATED << 16;

/* The header's flag byte if the segment's header matches (count, bits,
 * block) with no flag outside `allowed` (bits of the second word), else -1.
 * One 16-byte load where the segment is 16-byte aligned, as segments laid
 * end to end in a cudaMalloc buffer are. */
__device__ __forceinline__ int headerFlags(const uint8_t* seg, size_t count, int bits, int blockLog2,
                                           uint32_t allowed) {
  uint4 h;
  if ((reinterpret_cast<uintptr_t>(seg) & 15) == 0) {
    h = __ldg(reinterpret_cast<const uint4*>(seg));
  } else {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(seg);
    h = make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
  }
  if (h.x != ZPP_QUANT_MAGIC || (h.y & ~allowed) != headerWord1(bits, blockLog2) ||
      h.z != (uint32_t)(uint64_t)count || h.w != (uint32_t)((uint64_t)count >> 32))
    return -1;
  return (int)((h.y >> 16) & 0xffu);
}

/* Every decoding thread of the plain codecs checks the header of each input
 * it reads (a cache hit after the first warp). Returns kHeaderBad when it
 * does not match (count, bits, block) or is rotated, else kHeaderOk or
 * kHeaderMarkers (its flag says the segment holds markers). */
enum { kHeaderBad = 0, kHeaderOk = 1, kHeaderMarkers = 2 };
__device__ __forceinline__ int headerCheck(const uint8_t* seg, size_t count, int bits, int blockLog2) {
  const int f = headerFlags(seg, count, bits, blockLog2, kMarkersFlag);
  if (f < 0) return kHeaderBad;
  return (f & ZPP_QUANT_FLAG_MARKERS) ? kHeaderMarkers : kHeaderOk;
}

/* ---- rotation (zpp_quant.h, "Rotation"): shared by quant_rotate_cuda.cu and
 * quant_rotate_reduce_cuda.cu ------------------------------------------------ */

/* The sign mask (0 or 0x80000000) of element i of a block: D's entry, from
 * quant_ref.h's sign words. */
__device__ __forceinline__ uint32_t zppRotSignMaskDev(int i) {
  return (uint32_t)((zppQuantRotSignWord((size_t)i >> 6) >> (i & 63)) & 1u) << 31;
}

/* Sets the sign bit of block b's scale: "stored plain". */
__device__ __forceinline__ void markPlainScale(uint8_t* scales, size_t b) {
  const float s = zppQuantLoadScale(scales, b);
  zppQuantStoreScale(scales, b, __uint_as_float(__float_as_uint(s) | 0x80000000u));
}

/* ---- host side ---------------------------------------------------------- */

inline int blockLog2Of(int block) {
  int l = 0;
  while ((1 << l) < block) l++;
  return l;
}

inline bool validParams(int bits, int block) {
  return (bits == 2 || bits == 4 || bits == 8) && block >= ZPP_QUANT_MIN_BLOCK &&
         block <= ZPP_QUANT_MAX_BLOCK && (block & (block - 1)) == 0;
}

inline int dtypeIndex(zppDataType_t dt) {
  switch (dt) {
    case zppFloat32: return kF32;
    case zppFloat16: return kF16;
    case zppBfloat16: return kBF16;
    default: return -1;
  }
}

inline int elemSize(int dt) { return dt == kF32 ? 4 : 2; }

inline bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

}  // namespace

#endif /* ZPP_QUANT_CUDA_DEV_CUH_ */
