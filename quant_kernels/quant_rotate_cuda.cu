/*
 * The rotated codec (zpp_quant.h, "Rotation") as CUDA kernels, bit-identical
 * to the CPU reference (quant_rotate.c) and so to every CPU implementation.
 *
 * Encoding follows the reference's two steps. First the plain encoding with
 * escapes (zppQuantizeCuda: its quantize and escape kernels), which also
 * writes the header, the padding, the markers and the escape tables; then
 * rotateKernel, one CTA per block, re-encodes each block that is rotated:
 *   - the block's elements are widened into shared memory (fp32, exact);
 *   - the block is "ordinary" when its plain scale is finite, the group's
 *     table holds no escape inside it and it has more than E non-zero q
 *     (then it has neither a candidate nor a non-finite element: zpp_quant.h,
 *     "Why 2^K"); otherwise thread 0 repeats the exact test of the reference
 *     (quant_ref.h's zppQuantEscReference and zppQuantEscAbove, the same
 *     code): saturated elements keep the block plain. The elements that
 *     escaped are exactly the table's entries inside the block (a block's
 *     candidates escape all together or not at all), and become +0;
 *   - the short last block, a block with a non-finite element, a saturated
 *     block and a block whose w is not finite stay the plain codec's block,
 *     with the sign bit of the scale set;
 *   - otherwise: the sign flips of D (quant_ref.h's zppQuantRotSignWord),
 *     then the stages h = 1, 2, ..., B/2 in shared memory, one barrier after
 *     each; in stage h the pair (j, j + h) becomes (x_j + x_{j+h}, x_j -
 *     x_{j+h}) with __fadd_rn / __fsub_rn. The CTA's threads split the B/2
 *     pairs of a stage; nothing relies on warp-synchronous execution, so the
 *     emulator (tests/gpu/cuda_emu.h) runs exactly what a GPU runs;
 *   - w is quantized as a plain fp32 block by quant_ref.h's block setup and
 *     element encoding (the reference's own code, compiled for the device
 *     with --fmad=false: the same IEEE operations), its max taken over the
 *     |w| bit patterns.
 * Decoding (rotDecodeKernel, one CTA per block) reads the header (a
 * segment of either kind, rotated or plain; a header that does not match
 * decodes to NaN, as in quant_cuda.cu): a rotated block is q * s, the same
 * stages, * 2^-L, the signs; a block stored plain (scale sign set, or any
 * block of a plain segment) decodes as the plain codec does, markers as NaN;
 * escaped elements then take their value from the table; then each element
 * is rounded to the output type by quant_ref.h's store.
 *
 * Speed: one CTA per block of up to 4096 elements (shared memory sized for
 * 512 or 4096 elements), log2(B) barriers per block in each direction; the
 * re-encoding reads the input a second time. The point here is exactness;
 * a fused single-pass kernel is future work, once a GPU can time it.
 */
#include "quant_kernels/quant_cuda_dev.cuh"

namespace {

constexpr int kRotThreads = 256;  // CTA size for blocks of 512 elements and more
/* Blocks up to this size (the defaults: int4 64, int8 256) take kernels with
 * 2 KiB of shared memory for the block rather than 16 KiB, so that many
 * more CTAs fit on an SM. */
constexpr int kSmallBlock = 512;
constexpr uint32_t kExpBits = 0x7f800000u;

/* Threads of the CTA for one block of B elements: one pair per thread up to
 * B = 512. */
inline unsigned rotThreads(int block) {
  return block / 2 < kRotThreads ? (unsigned)(block / 2) : (unsigned)kRotThreads;
}

/* x <- D x for one block in shared memory (sign flips, exact). */
__device__ __forceinline__ void applySigns(float* x, int block) {
  for (int i = (int)threadIdx.x; i < block; i += (int)blockDim.x) {
    const uint32_t m = ((zppQuantRotSignWord((size_t)i >> 6) >> (i & 63)) & 1u) << 31;
    x[i] = __uint_as_float(__float_as_uint(x[i]) ^ m);
  }
}

/* The unnormalised Walsh-Hadamard transform of x[0..block) in shared memory,
 * in the spec's stage order; every thread of the CTA calls it. Barriers
 * before the first and after the last stage. */
__device__ __forceinline__ void hadamard(float* x, int block) {
  const int half = block / 2;
  for (int h = 1; h < block; h <<= 1) {
    __syncthreads();
    for (int p = (int)threadIdx.x; p < half; p += (int)blockDim.x) {
      const int j = ((p & ~(h - 1)) << 1) | (p & (h - 1));
      const float a = x[j], b = x[j + h];
      x[j] = __fadd_rn(a, b);
      x[j + h] = __fsub_rn(a, b);
    }
  }
  __syncthreads();
}

/* Sets the sign bit of block b's scale: "stored plain". */
__device__ __forceinline__ void markPlain(uint8_t* scales, size_t b) {
  const float s = zppQuantLoadScale(scales, b);
  zppQuantStoreScale(scales, b, __uint_as_float(__float_as_uint(s) | 0x80000000u));
}

/* Re-encodes block blockIdx.x of a segment that the plain codec just wrote
 * from `in` (see the file comment). */
template <int MAXB>
__global__ void __launch_bounds__(kRotThreads)
    rotateKernel(const void* __restrict__ in, zppDataType_t dtype, size_t count, int bits,
                 int blockLog2, uint8_t* __restrict__ seg) {
  __shared__ float x[MAXB];
  __shared__ uint32_t red[kRotThreads];
  __shared__ int shared[2];  // non-zero q; "saturated" from thread 0
  const int block = 1 << blockLog2;
  const int Q = zppQuantQmax(bits);
  const unsigned t = threadIdx.x;
  uint8_t* scales = seg + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = seg + zppQuantDataOffset(count, block);
  if (blockIdx.x == 0 && t == 0)
    reinterpret_cast<uint32_t*>(seg)[1] |= kRotatedFlag;  // the escape kernel has finished
  const size_t b = blockIdx.x;
  const size_t lo = b << blockLog2;
  if (lo >= count) return;  // count 0: the flag only
  if (count - lo < (size_t)block) {
    if (t == 0) markPlain(scales, b);  // the short last block
    return;
  }

  // The block in fp32, its non-finite elements and its plain encoding's q.
  if (t == 0) shared[0] = 0;
  int nonfinite = 0, nz = 0;
  for (int i = (int)t; i < block; i += (int)blockDim.x) {
    const float v = zppQuantLoadOne(in, dtype, lo + (size_t)i);
    x[i] = v;
    nonfinite |= zppQuantNonFinite(v);
    nz += zppQuantGetQ(data, bits, lo + (size_t)i) != 0;
  }
  __syncthreads();
  if (nz) atomicAdd(&shared[0], nz);
  nonfinite = __syncthreads_or(nonfinite);

  // The escapes inside the block: the group's table entries in its range.
  const size_t grp = lo / ZPP_QUANT_ESC_GROUP;
  const uint8_t* table = seg + zppQuantEscOffset(count, bits, block) + grp * ZPP_QUANT_ESC_TABLE_BYTES;
  const size_t rlo = lo - grp * ZPP_QUANT_ESC_GROUP;
  bool escaped = false;
  for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
    const unsigned idx = zppQuantEscIndex(table, j);
    if (idx == ZPP_QUANT_ESC_EMPTY) break;
    escaped |= idx >= rlo && idx < rlo + (size_t)block;
  }
  const float plainScale = zppQuantLoadScale(scales, b);
  const bool ordinary =
      !zppQuantNonFinite(plainScale) && !escaped && shared[0] > ZPP_QUANT_ESC_PER_BLOCK;
  if (t == 0) {
    // Saturated: candidates that overflowed the table and exceed 2^S r
    // (the reference's exact test; rare blocks only).
    int sat = 0;
    if (!ordinary && !escaped && !nonfinite) {
      const uint32_t r = zppQuantEscReference(x, (size_t)block);
      for (int i = 0; i < block && !sat; i++) sat = zppQuantEscAbove(x[i], r, ZPP_QUANT_SAT_LOG2);
    }
    shared[1] = sat;
    if (escaped && !nonfinite)
      for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
        const unsigned idx = zppQuantEscIndex(table, j);
        if (idx == ZPP_QUANT_ESC_EMPTY) break;
        if (idx >= rlo && idx < rlo + (size_t)block) x[idx - rlo] = 0.0f;
      }
  }
  __syncthreads();
  if (nonfinite || shared[1]) {
    if (t == 0) markPlain(scales, b);
    return;
  }

  applySigns(x, block);
  hadamard(x, block);

  // w finite? (all exponent bits set somewhere: |x| near FLT_MAX) and its max.
  uint32_t m = 0;
  int inf = 0;
  for (int i = (int)t; i < block; i += (int)blockDim.x) {
    const uint32_t a = __float_as_uint(x[i]) & 0x7fffffffu;
    inf |= a >= kExpBits;
    m = a > m ? a : m;
  }
  red[t] = m;
  if (__syncthreads_or(inf)) {
    if (t == 0) markPlain(scales, b);
    return;
  }
  if (t == 0) {
    uint32_t a = 0;
    for (unsigned i = 0; i < blockDim.x; i++) a = red[i] > a ? red[i] : a;
    red[0] = a;
  }
  __syncthreads();
  const zppQuantBlockParams_t bp = zppQuantBlockSetup(red[0], Q);
  if (t == 0) zppQuantStoreScale(scales, b, bp.scale);
  const bool normal = bp.kind == ZPP_QBLOCK_NORMAL;
  for (int p = (int)t; p < block / 2; p += (int)blockDim.x) {
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

/* Decodes block blockIdx.x of one segment of either kind into `out`. */
template <int MAXB>
__global__ void __launch_bounds__(kRotThreads)
    rotDecodeKernel(const uint8_t* __restrict__ seg, size_t count, int bits, int blockLog2, void* out,
                    zppDataType_t dtype) {
  __shared__ float y[MAXB];
  const int block = 1 << blockLog2;
  const unsigned t = threadIdx.x;
  const size_t b = blockIdx.x;
  const size_t lo = b << blockLog2;
  const int len = count - lo < (size_t)block ? (int)(count - lo) : block;
  const int flags =
      headerFlags(seg, count, bits, blockLog2, kMarkersFlag | kRotatedFlag);  // -1: mismatch
  const uint8_t* data = seg + zppQuantDataOffset(count, block);
  const float qnan = __uint_as_float(ZPP_QUANT_NAN_BITS);
  float s = qnan;
  if (flags >= 0) s = zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, b);
  const uint32_t sb = __float_as_uint(s);
  const bool rotated = flags >= 0 && (flags & ZPP_QUANT_FLAG_ROTATED) && !(sb & 0x80000000u) &&
                       !zppQuantNonFinite(s) &&
                       len == block;  // a short block is never rotated: decoded plain, as on the CPU
  if (!rotated) {
    const float sa = __uint_as_float(sb & 0x7fffffffu);
    const bool markers = flags >= 0 && (flags & ZPP_QUANT_FLAG_MARKERS);
    for (int i = (int)t; i < len; i += (int)blockDim.x) {
      // A header that does not match decodes to NaN without reading the data,
      // which a short or foreign segment may not hold (memcheck on an H100).
      const int q = flags >= 0 ? zppQuantGetQ(data, bits, lo + (size_t)i) : 0;
      y[i] = zppQuantNonFinite(sa) || (markers && q == -zppQuantQmax(bits) - 1)
                 ? qnan
                 : __fmul_rn(__int2float_rn(q), sa);
    }
  } else {
    // A rotated block is whole (len == block): D H (q s) * 2^-L.
    for (int i = (int)t; i < block; i += (int)blockDim.x)
      y[i] = __fmul_rn(__int2float_rn(zppQuantGetQ(data, bits, lo + (size_t)i)), s);
    hadamard(y, block);
    const float invB = __uint_as_float((uint32_t)(127 - blockLog2) << 23);
    for (int i = (int)t; i < block; i += (int)blockDim.x) y[i] = __fmul_rn(y[i], invB);
    applySigns(y, block);
  }
  __syncthreads();
  if (t == 0 && flags >= 0) {  // escaped elements: their own value replaces the decoded one
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
  for (int i = (int)t; i < len; i += (int)blockDim.x)
    zppQuantStoreOne(out, dtype, lo + (size_t)i, y[i]);
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
  const unsigned grid = nb ? (unsigned)nb : 1u;
  uint8_t* pk = static_cast<uint8_t*>(packed);
  if (block <= kSmallBlock)
    ZPP_CUDA_LAUNCH((rotateKernel<kSmallBlock>), grid, rotThreads(block), stream, in, dtype, count,
                    bits, blockLog2Of(block), pk);
  else
    ZPP_CUDA_LAUNCH((rotateKernel<ZPP_QUANT_MAX_BLOCK>), grid, rotThreads(block), stream, in, dtype,
                    count, bits, blockLog2Of(block), pk);
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
    ZPP_CUDA_LAUNCH((rotDecodeKernel<kSmallBlock>), (unsigned)nb, rotThreads(block), stream, pk, count,
                    bits, blockLog2Of(block), out, dtype);
  else
    ZPP_CUDA_LAUNCH((rotDecodeKernel<ZPP_QUANT_MAX_BLOCK>), (unsigned)nb, rotThreads(block), stream, pk,
                    count, bits, blockLog2Of(block), out, dtype);
  CUDALAUNCHCHECK("zpp rotated decode");
  return zppSuccess;
}
