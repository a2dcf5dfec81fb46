/*
 * The rotated codec (zpp_quant.h, "Rotation") as CUDA kernels, bit-identical
 * to the CPU reference (quant_rotate.c) and so to every CPU implementation.
 *
 * Encoding follows the reference's two steps. First the plain encoding with
 * escapes (zppQuantizeCuda: its quantize and escape kernels), which also
 * writes the header, the padding, the markers and the escape tables; then
 * rotateKernel re-encodes each block that is rotated, one group of threads
 * per block (layout under "Speed"):
 *   - the block's elements are widened into shared memory (fp32, exact);
 *   - the elements that escaped are exactly the group's table entries
 *     inside the block (a block's candidates escape all together or stay
 *     all together: the plain encoding made that choice), and become +0;
 *   - the short last block, a block with a non-finite element and a block
 *     whose w is not finite stay the plain codec's block, with the sign bit
 *     of the scale set;
 *   - otherwise: the sign flips of D (quant_cuda_dev.cuh's zppRotSignMaskDev),
 *     then the stages h = 1, 2, ..., B/2 in shared memory, one barrier after
 *     each; in stage h the pair (j, j + h) becomes (x_j + x_{j+h}, x_j -
 *     x_{j+h}) with __fadd_rn / __fsub_rn. The group's threads split the B/2
 *     pairs of a stage; nothing relies on warp-synchronous execution, so the
 *     emulator (tests/gpu/cuda_emu.h) runs exactly what a GPU runs;
 *   - w is quantized as a plain fp32 block by quant_ref.h's block setup and
 *     element encoding (the reference's own code, compiled for the device
 *     with --fmad=false: the same IEEE operations), its max taken over the
 *     |w| bit patterns (a shuffle butterfly within each warp's share of the
 *     group, then the group's warp maxima: a max of integers, in any order).
 * Decoding (rotDecodeKernel, the same layout) reads the header (a
 * segment of either kind, rotated or plain; a header that does not match
 * decodes to NaN, as in quant_cuda.cu): a rotated block is q * s, the same
 * stages, * 2^-L, the signs; a block stored plain (scale sign set, or any
 * block of a plain segment) decodes as the plain codec does, markers as NaN;
 * escaped elements then take their value from the table; then each element
 * is rounded to the output type by quant_ref.h's store.
 *
 * Speed: every CTA has 256 threads. A block of B <= 512 elements is owned by
 * a group of B/2 threads (one pair per thread and stage), and a CTA holds
 * 512/B such groups, each with its own B floats of shared memory (2 KiB per
 * CTA for any B); blocks of 1024..4096 take the whole CTA (16 KiB), through
 * the same code. All groups of a CTA run the same stages, so they share each
 * stage's barrier (log2(B) + 1 per CTA for the stages, two to four others),
 * and nobody leaves before the last barrier: a group whose block is not
 * re-encoded (past the end, short, stored plain) idles through them; the
 * per-block non-finite flag is a shared array indexed by group. The first
 * layout, a CTA of B/2 threads per block, ran at 0.07-0.25x of a device
 * copy on an H100 (the
 * SM's CTA limit capped occupancy at 32-thread CTAs; docs/gpu.md); this one
 * is still to be timed on a GPU. The re-encoding reads the input a second
 * time; a fused single-pass kernel is future work.
 */
#include "quant_kernels/quant_cuda_dev.cuh"

namespace {

constexpr int kRotThreads = 256;  // every CTA of both kernels
/* Blocks up to this size (the defaults: int4 64, int8 256) share one CTA,
 * 512 / B of them, in 2 KiB of shared memory; larger blocks take one CTA each
 * and 16 KiB. */
constexpr int kSmallBlock = 512;
/* Groups per CTA at most: blocks of ZPP_QUANT_MIN_BLOCK elements. */
constexpr int kMaxGroups = kRotThreads / (ZPP_QUANT_MIN_BLOCK / 2);
constexpr uint32_t kExpBits = 0x7f800000u;

/* Threads that own one block of B elements (a "group"): one pair per thread
 * up to B = 512, kRotThreads beyond. kRotThreads / groupThreads(B) groups
 * make a CTA. */
__host__ __device__ inline int groupThreads(int block) {
  return block / 2 < kRotThreads ? block / 2 : kRotThreads;
}

/* CTAs for nb blocks (at least one: the encoder's flag). */
inline unsigned rotGrid(size_t nb, int block) {
  const size_t per = (size_t)(kRotThreads / groupThreads(block));
  return nb ? (unsigned)((nb + per - 1) / per) : 1u;
}

/* x <- D x for one block in shared memory (sign flips, exact); lt is the
 * thread's index in its group of gt threads. */
__device__ __forceinline__ void applySigns(float* x, int block, int lt, int gt) {
  for (int i = lt; i < block; i += gt)
    x[i] = __uint_as_float(__float_as_uint(x[i]) ^ zppRotSignMaskDev(i));
}

/* The unnormalised Walsh-Hadamard transform of x[0..block) in shared memory,
 * in the spec's stage order, by the group's gt threads when `active`. Every
 * thread of the CTA calls it, active or not: the barriers (before the first
 * stage, after each) are the CTA's, shared by all of its groups. */
__device__ __forceinline__ void hadamard(float* x, int block, int lt, int gt, bool active) {
  const int half = block / 2;
  for (int h = 1; h < block; h <<= 1) {
    __syncthreads();
    if (active)
      for (int p = lt; p < half; p += gt) {
        const int j = ((p & ~(h - 1)) << 1) | (p & (h - 1));
        const float a = x[j], b = x[j + h];
        x[j] = __fadd_rn(a, b);
        x[j + h] = __fsub_rn(a, b);
      }
  }
  __syncthreads();
}

/* Re-encodes the blocks of a segment that the plain codec just wrote from
 * `in` (see the file comment): group g of CTA c owns block c * G + g. No
 * thread leaves before the last barrier: a group whose block is not
 * re-encoded (past the end, short, non-finite) idles through them. */
template <int MAXB>
__global__ void __launch_bounds__(kRotThreads)
    rotateKernel(const void* __restrict__ in, zppDataType_t dtype, size_t count, int bits,
                 int blockLog2, uint8_t* __restrict__ seg) {
  __shared__ float xs[MAXB];
  __shared__ uint32_t red[kRotThreads / 32];  // warp maxima of |w| (groups above 32 threads)
  __shared__ unsigned nfs[kMaxGroups];        // per group: a non-finite element
  const int block = 1 << blockLog2;
  const int Q = zppQuantQmax(bits);
  const int gt = groupThreads(block);
  const int g = (int)threadIdx.x / gt, lt = (int)threadIdx.x % gt;
  float* x = xs + (size_t)g * (size_t)block;
  uint8_t* scales = seg + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = seg + zppQuantDataOffset(count, block);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    reinterpret_cast<uint32_t*>(seg)[1] |= kRotatedFlag;  // the escape kernel has finished
  const size_t b = (size_t)blockIdx.x * (size_t)(kRotThreads / gt) + (size_t)g;
  const size_t lo = b << blockLog2;
  const bool whole = lo < count && count - lo >= (size_t)block;    // else past the end or short
  if (lt == 0 && lo < count && !whole) markPlainScale(scales, b);  // the short last block

  // The block in fp32 and its non-finite elements.
  if (lt == 0) nfs[g] = 0;
  int nonfinite = 0;
  if (whole)
    for (int i = lt; i < block; i += gt) {
      const float v = zppQuantLoadOne(in, dtype, lo + (size_t)i);
      x[i] = v;
      nonfinite |= zppQuantNonFinite(v);
    }
  __syncthreads();
  if (nonfinite) atomicOr(&nfs[g], 1u);
  __syncthreads();
  const bool rot = whole && nfs[g] == 0;

  // The escapes inside the block, the group's table entries in its range,
  // become +0.
  if (lt == 0 && rot) {
    const size_t grp = lo / ZPP_QUANT_ESC_GROUP;
    const uint8_t* table =
        seg + zppQuantEscOffset(count, bits, block) + grp * ZPP_QUANT_ESC_TABLE_BYTES;
    const size_t rlo = lo - grp * ZPP_QUANT_ESC_GROUP;
    for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
      const unsigned idx = zppQuantEscIndex(table, j);
      if (idx == ZPP_QUANT_ESC_EMPTY) break;
      if (idx >= rlo && idx < rlo + (size_t)block) x[idx - rlo] = 0.0f;
    }
  }
  __syncthreads();
  if (lt == 0 && whole && !rot) markPlainScale(scales, b);

  if (rot) applySigns(x, block, lt, gt);
  hadamard(x, block, lt, gt, rot);

  // The max of the |w| bit patterns over the group (0 for an idle group):
  // a butterfly inside each warp (lanes of one group only), then, for groups
  // of several warps, their warp maxima. m >= kExpBits: w is not finite (all
  // exponent bits set somewhere: |x| near FLT_MAX).
  uint32_t m = 0;
  if (rot)
    for (int i = lt; i < block; i += gt) {
      const uint32_t a = __float_as_uint(x[i]) & 0x7fffffffu;
      m = a > m ? a : m;
    }
  const int lanes = gt < 32 ? gt : 32;
  for (int off = lanes >> 1; off > 0; off >>= 1) {
    const uint32_t o = __shfl_xor_sync(0xffffffffu, m, off);
    m = o > m ? o : m;
  }
  if (gt > 32) {  // the same for every thread of the CTA
    if ((threadIdx.x & 31u) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    const int first = (g * gt) >> 5;
    m = 0;
    for (int i = 0; i < (gt >> 5); i++) m = red[first + i] > m ? red[first + i] : m;
  }
  if (!rot) return;  // after the last barrier
  if (m >= kExpBits) {
    if (lt == 0) markPlainScale(scales, b);
    return;
  }
  const zppQuantBlockParams_t bp = zppQuantBlockSetup(m, Q);
  if (lt == 0) zppQuantStoreScale(scales, b, bp.scale);
  const bool normal = bp.kind == ZPP_QBLOCK_NORMAL;
  if (bits == 2) {  // a byte per thread step: four elements
    for (int p = lt; p < block / 4; p += gt) {
      unsigned v = 0;
      for (int j = 0; j < 4; j++)
        v |= ((unsigned)(normal ? zppQuantEncodeOne(x[4 * p + j], &bp, Q) : 0) & 3u) << (2 * j);
      data[(lo >> 2) + (size_t)p] = (uint8_t)v;
    }
    return;
  }
  for (int p = lt; p < block / 2; p += gt) {
    const int q0 = normal ? zppQuantEncodeOne(x[2 * p], &bp, Q) : 0;
    const int q1 = normal ? zppQuantEncodeOne(x[2 * p + 1], &bp, Q) : 0;
    if (bits == 8) {
      data[lo + 2 * (size_t)p] = (uint8_t)(int8_t)q0;
      data[lo + 2 * (size_t)p + 1] = (uint8_t)(int8_t)q1;
    } else {
      data[(lo >> 1) + (size_t)p] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
    }
  }
}

/* Decodes the blocks of one segment of either kind into `out`: group g of
 * CTA c owns block c * G + g; every thread reaches every barrier. */
template <int MAXB>
__global__ void __launch_bounds__(kRotThreads)
    rotDecodeKernel(const uint8_t* __restrict__ seg, size_t count, int bits, int blockLog2, void* out,
                    zppDataType_t dtype) {
  __shared__ float ys[MAXB];
  const int block = 1 << blockLog2;
  const int gt = groupThreads(block);
  const int g = (int)threadIdx.x / gt, lt = (int)threadIdx.x % gt;
  float* y = ys + (size_t)g * (size_t)block;
  const size_t b = (size_t)blockIdx.x * (size_t)(kRotThreads / gt) + (size_t)g;
  const size_t lo = b << blockLog2;
  const int len = lo >= count ? 0 : count - lo < (size_t)block ? (int)(count - lo) : block;
  const int flags =
      headerFlags(seg, count, bits, blockLog2, kMarkersFlag | kRotatedFlag);  // -1: mismatch
  const uint8_t* data = seg + zppQuantDataOffset(count, block);
  const float qnan = __uint_as_float(ZPP_QUANT_NAN_BITS);
  float s = qnan;
  if (flags >= 0 && len > 0) s = zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, b);
  const uint32_t sb = __float_as_uint(s);
  const bool rotated = flags >= 0 && (flags & ZPP_QUANT_FLAG_ROTATED) && !(sb & 0x80000000u) &&
                       !zppQuantNonFinite(s) &&
                       len == block;  // a short block is never rotated: decoded plain, as on the CPU
  if (!rotated) {
    const float sa = __uint_as_float(sb & 0x7fffffffu);
    const bool markers = flags >= 0 && (flags & ZPP_QUANT_FLAG_MARKERS);
    for (int i = lt; i < len; i += gt) {
      // A header that does not match decodes to NaN without reading the data,
      // which a short or foreign segment may not hold (memcheck on an H100).
      const int q = flags >= 0 ? zppQuantGetQ(data, bits, lo + (size_t)i) : 0;
      y[i] = zppQuantNonFinite(sa) || (markers && q == -zppQuantQmax(bits) - 1)
                 ? qnan
                 : __fmul_rn(__int2float_rn(q), sa);
    }
  } else {
    // A rotated block is whole (len == block): D H (q s) * 2^-L.
    for (int i = lt; i < block; i += gt)
      y[i] = __fmul_rn(__int2float_rn(zppQuantGetQ(data, bits, lo + (size_t)i)), s);
  }
  hadamard(y, block, lt, gt, rotated);  // every thread: the barriers are the CTA's
  if (rotated) {
    const float invB = __uint_as_float((uint32_t)(127 - blockLog2) << 23);
    for (int i = lt; i < block; i += gt) y[i] = __fmul_rn(y[i], invB);
    applySigns(y, block, lt, gt);
  }
  __syncthreads();
  if (lt == 0 && flags >= 0 && len > 0) {  // escaped elements: their own value replaces the decoded one
    const size_t grp = lo / ZPP_QUANT_ESC_GROUP;
    const uint8_t* table =
        seg + zppQuantEscOffset(count, bits, block) + grp * ZPP_QUANT_ESC_TABLE_BYTES;
    const size_t rlo = lo - grp * ZPP_QUANT_ESC_GROUP;
    for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
      const unsigned idx = zppQuantEscIndex(table, j);
      if (idx == ZPP_QUANT_ESC_EMPTY) break;
      if (idx >= rlo && idx < rlo + (size_t)len) y[idx - rlo] = zppQuantEscValue(table, j);
    }
  }
  __syncthreads();
  for (int i = lt; i < len; i += gt) zppQuantStoreOne(out, dtype, lo + (size_t)i, y[i]);
}

}  // namespace

/* ---- the C API ------------------------------------------------------------ */

extern "C" zppResult_t zppQuantizeExCuda(const void* in, zppDataType_t dtype, size_t count, int bits,
                                         int block, unsigned flags, void* packed, cudaStream_t stream) {
  QC_ARG((flags & ~(unsigned)ZPP_QUANT_ROTATE) == 0,
         "zppQuantizeExCuda: flags 0x%x unknown (0 or ZPP_QUANT_ROTATE)", flags);
  // The plain encoding, escapes included (and every argument check).
  ZPPCHECK(zppQuantizeCuda(in, dtype, count, bits, block, packed, stream));
  if (!(flags & ZPP_QUANT_ROTATE)) return zppSuccess;
  const size_t nb = zppQuantNumBlocks(count, block);
  QC_ARG(nb <= 0x7fffffffu, "zppQuantizeExCuda: count %zu too large", count);
  const unsigned grid = rotGrid(nb, block);
  uint8_t* pk = static_cast<uint8_t*>(packed);
  if (block <= kSmallBlock)
    ZPP_CUDA_LAUNCH((rotateKernel<kSmallBlock>), grid, kRotThreads, stream, in, dtype, count, bits,
                    blockLog2Of(block), pk);
  else
    ZPP_CUDA_LAUNCH((rotateKernel<ZPP_QUANT_MAX_BLOCK>), grid, kRotThreads, stream, in, dtype, count,
                    bits, blockLog2Of(block), pk);
  CUDALAUNCHCHECK("zpp rotate");
  return zppSuccess;
}

extern "C" zppResult_t zppDequantizeExCuda(const void* packed, size_t count, int bits, int block,
                                           void* out, zppDataType_t dtype, cudaStream_t stream) {
  const int dt = dtypeIndex(dtype);
  QC_ARG(dt >= 0, "zppDequantizeExCuda: unsupported dtype %d", (int)dtype);
  QC_ARG(validParams(bits, block), "zppDequantizeExCuda: invalid bits %d / block %d", bits, block);
  QC_ARG(packed != NULL, "zppDequantizeExCuda: packed is NULL");
  QC_ARG(aligned(packed, 4), "zppDequantizeExCuda: packed %p not 4-byte aligned", packed);
  QC_ARG(count == 0 || out != NULL, "zppDequantizeExCuda: out is NULL");
  QC_ARG(aligned(out, elemSize(dt)), "zppDequantizeExCuda: out %p misaligned", out);
  if (count == 0) return zppSuccess;
  const size_t nb = zppQuantNumBlocks(count, block);
  QC_ARG(nb <= 0x7fffffffu, "zppDequantizeExCuda: count %zu too large", count);
  const uint8_t* pk = static_cast<const uint8_t*>(packed);
  if (block <= kSmallBlock)
    ZPP_CUDA_LAUNCH((rotDecodeKernel<kSmallBlock>), rotGrid(nb, block), kRotThreads, stream, pk, count,
                    bits, blockLog2Of(block), out, dtype);
  else
    ZPP_CUDA_LAUNCH((rotDecodeKernel<ZPP_QUANT_MAX_BLOCK>), rotGrid(nb, block), kRotThreads, stream, pk,
                    count, bits, blockLog2Of(block), out, dtype);
  CUDALAUNCHCHECK("zpp rotated decode");
  return zppSuccess;
}
