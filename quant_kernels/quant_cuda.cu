/*
 * CUDA block codecs: the device twin of the CPU codecs, bit-identical to
 * them. zpp_quant.h is the spec (layout, nibble order, the exact fp32
 * operations); this file only chooses how to spread that work over threads.
 *
 * Exactness. Every arithmetic step is written with an explicit IEEE
 * round-to-nearest-even intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn,
 * __float2int_rn, __int2float_rn), which the compiler never contracts into an
 * FMA or replaces by an approximation; the file is also built with
 * --fmad=false -ftz=false -prec-div=true (quant_kernels/CMakeLists.txt) so
 * that nothing else slips through. Conversions: fp16 <-> fp32 through the
 * cvt.rn instructions (IEEE, subnormals kept); bf16 in integer arithmetic
 * (widening is a shift, narrowing is the usual RNE bias-and-truncate), which
 * is exact by construction on every architecture. Every NaN output is written
 * as the canonical NaN of its type: what the spec asks for a NaN scale; for
 * other NaNs (a sum of Inf and -Inf) only the class is specified, and the
 * GPU's own default NaN (0x7fffffff) would differ from the CPU's needlessly.
 *
 * Launch shape (all kernels are memory-bound streaming passes).
 * - One thread owns E consecutive elements, E = 32 bytes of the unpacked
 *   type (8 fp32 or 16 fp16/bf16): two independent 16-byte loads in flight
 *   per thread before any use. At the 30-56 registers these kernels take
 *   (ptxas -v), 1024+ threads fit on an SM: >= 4 MB in flight on an H100
 *   (132 SMs x 1024 x 32 B), above its bandwidth x latency (~2.5 MB).
 * - Quantization needs max |x| over a block, so one block of B elements is
 *   owned by T = B / E consecutive threads (2..512). For T <= 32 those
 *   threads are aligned lanes of one warp and the max is a butterfly of
 *   __shfl_xor_sync inside the group (no shared memory, no barrier); for
 *   T > 32 (B > 256 fp32 / 512 half) each warp reduces first and the T/32
 *   warp maxima meet in shared memory after one __syncthreads. The max is
 *   taken over the bit patterns of |x| as unsigned integers: for finite
 *   values their order is the order of the magnitudes, and Inf/NaN patterns
 *   are larger than every finite one, so one integer max also answers "is
 *   this block finite?".
 * - A CTA is 256 threads (512 when one fp32 block of 4096 needs 512 threads),
 *   always a whole number of blocks; one tile of blockDim*E elements per CTA, the
 *   grid covers the count, and gridDim.y walks the W segments of a
 *   reordered quantization (or the single segment of a plain one).
 * - Decoding needs no reduction: one thread per E elements, 256-thread CTAs,
 *   each thread reads its block's scale (a broadcast through the cache) and
 *   every one of the n inputs in order, so the fp32 sums follow the spec's
 *   order exactly.
 * - The 16-byte header and the zero padding of each output segment are
 *   written by the first CTA of that segment (threads 0..3 and 4..19), so a
 *   packed buffer is complete without a memset or a second kernel.
 * - Packed data starts at 16 + 4*nblocks bytes, i.e. only 4-byte aligned in
 *   general; loads and stores of packed words pick 16-, 8- or 4-byte
 *   accesses from the actual address (a branch that is uniform per segment).
 *   Escape tables are 4-byte aligned too, and are only read by bytes.
 *
 * Escapes (zpp_quant.h, "Escapes"), the same way as the CPU front end
 * (quant_escape.c): the kernels above encode as if escapes did not exist, and
 * one more kernel (escapeKernel, one CTA per escape group and segment) scans
 * what they wrote: a group whose blocks all have a zero scale or more than E
 * non-zero q holds no escape (zpp_quant.h says why) and gets an empty table.
 * The other groups load their input (or recompute their sums) into shared
 * memory and run the exact test of escapeKernel's comment, per block, in
 * parallel: ordinary data that only looked suspicious (sums of int8 inputs
 * requantized to int4 blocks of a few non-zero q: 217 of every 256 groups of
 * zpp-bench-kernels' data) stops there with an empty table. Only blocks with
 * a real candidate or a non-finite element are encoded again, one thread per
 * block, by the reference's own block step (zppQuantEscBlockRef), after one thread
 * hands out the group's slots in block order (the overflow rule); a marker
 * sets the header's flag bit with an atomic OR, as several groups' CTAs may.
 * The scan reads the packed data once more (1/4 to 1/8 of an fp32 input's
 * bytes); the reload and the re-encoding are meant to be rare. Decoding
 * needs no second kernel: each thread decodes markers as NaN where the
 * header's flag says there are any, and adds the escaped values of its
 * elements after the packed values, input by input (the spec's order),
 * which costs a cached 2-byte read per input when a table is empty. The
 * fused reduce-requantize adds the inputs' escapes to its sums the same way
 * before quantizing, then runs the escape kernel on its output. Escape
 * counts are not collected on the device (zppQuantTakeEscapeCounts counts
 * the CPU codecs only).
 */
#include "quant_kernels/quant_cuda_dev.cuh"

namespace {

enum { kModeDequant = 0, kModeAccumulate = 1, kModeSum = 2 };

constexpr int kThreads = 256;     // CTA size, unless one block needs more
constexpr int kMaxThreads = 512;  // fp32 block 4096 / 8 elements per thread
constexpr uint32_t kNaN32 = 0x7fc00000u;
constexpr uint16_t kNaN16 = 0x7e00u;
constexpr uint16_t kNaNBf16 = 0x7fc0u;
constexpr uint32_t kExpMask = 0x7f800000u;    // |x| bits >= this: Inf or NaN
constexpr uint32_t kTwoPowM64 = 0x1f800000u;  // 2^-64
constexpr uint32_t kTwoPow64 = 0x5f800000u;   // 2^64

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

template <int DT>
struct Elem {
  static constexpr int kSize = DT == kF32 ? 4 : 2;
  static constexpr int kPerThread = 32 / kSize;
};

/* ---- conversions -------------------------------------------------------- */

__device__ __forceinline__ float widen16(uint32_t h, int dt) {
  // Both widenings are exact; bf16 is the top half of an fp32 pattern.
  return dt == kF16 ? __half2float(__ushort_as_half((unsigned short)h)) : __uint_as_float(h << 16);
}

__device__ __forceinline__ uint32_t narrow16(float f, int dt) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > kExpMask) return dt == kF16 ? kNaN16 : kNaNBf16;
  if (dt == kF16) return __half_as_ushort(__float2half_rn(f));
  // RNE to the top 16 bits; a carry into the exponent gives the right
  // neighbour (up to Inf), subnormals round like any other pattern.
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}

__device__ __forceinline__ float canon32(float f) {
  return (__float_as_uint(f) & 0x7fffffffu) > kExpMask ? __uint_as_float(kNaN32) : f;
}

/* ---- packed segment geometry -------------------------------------------- */

struct Geom {
  size_t nblocks;
  size_t dataOff;  // byte offset of the quantized data in the segment
  size_t dataBytes;
  size_t escOff;  // the escape tables (4-byte aligned), one per group
  size_t ngroups;
  size_t segBytes;
};

/* The layout of zpp_quant.h, from quant_impl.h's helpers (zppQuantPackedSize
 * itself is host code). */
__host__ __device__ __forceinline__ Geom geom(size_t count, int bits, int blockLog2) {
  Geom g;
  g.nblocks = zppQuantNumBlocks(count, 1 << blockLog2);
  g.dataOff = zppQuantDataOffset(count, 1 << blockLog2);
  g.dataBytes = zppQuantDataBytes(count, bits);
  g.escOff = zppQuantEscOffset(count, bits, 1 << blockLog2);
  g.ngroups = zppQuantNumGroups(count);
  g.segBytes = (g.escOff + ZPP_QUANT_ESC_TABLE_BYTES * g.ngroups + 15) & ~(size_t)15;
  return g;
}

/* Header and zero padding of one segment (up to 3 bytes between the data and
 * the escape tables, up to 15 after them), by threads 0..23 of one CTA. The
 * tables are escapeKernel's. */
__device__ __forceinline__ void writeHeaderAndPadding(uint8_t* seg, size_t count, int bits,
                                                      int blockLog2, const Geom& g) {
  const unsigned t = threadIdx.x;
  if (t < 4) {
    uint32_t w = t == 0   ? ZPP_QUANT_MAGIC
                 : t == 1 ? headerWord1(bits, blockLog2)
                 : t == 2 ? (uint32_t)(uint64_t)count
                          : (uint32_t)((uint64_t)count >> 32);
    reinterpret_cast<uint32_t*>(seg)[t] = w;
  } else if (t < 8) {
    size_t at = g.dataOff + g.dataBytes + (t - 4);
    if (at < g.escOff) seg[at] = 0;
  } else if (t < 24) {
    size_t at = g.escOff + ZPP_QUANT_ESC_TABLE_BYTES * g.ngroups + (t - 8);
    if (at < g.segBytes) seg[at] = 0;
  }
}

/* The fp32 packed value q * scale; in a segment with markers, the marker
 * q = -(Q+1) is NaN (zpp_quant.h, "Escapes"). */
template <int BITS>
__device__ __forceinline__ float packedValue(int q, float scale, bool markers) {
  constexpr int kMarker = BITS == 8 ? -128 : BITS == 4 ? -8 : -2;
  return markers && q == kMarker ? __uint_as_float(kNaN32) : __fmul_rn(__int2float_rn(q), scale);
}

/* ---- packed words: widest access the address allows --------------------- */

template <int NW>
__device__ __forceinline__ void loadWords(const uint8_t* p, uint32_t (&w)[NW]) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (NW % 4 == 0 && (a & 15) == 0) {
#pragma unroll
    for (int i = 0; i < NW / 4; i++) {
      uint4 v = __ldcs(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  } else if (NW % 2 == 0 && (a & 7) == 0) {
#pragma unroll
    for (int i = 0; i < NW / 2; i++) {
      uint2 v = __ldcs(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x;
      w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < NW; i++) w[i] = __ldcs(reinterpret_cast<const unsigned int*>(p) + i);
  }
}

template <int NW>
__device__ __forceinline__ void storeWords(uint8_t* p, const uint32_t (&w)[NW]) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (NW % 4 == 0 && (a & 15) == 0) {
#pragma unroll
    for (int i = 0; i < NW / 4; i++)
      reinterpret_cast<uint4*>(p)[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
  } else if (NW % 2 == 0 && (a & 7) == 0) {
#pragma unroll
    for (int i = 0; i < NW / 2; i++)
      reinterpret_cast<uint2*>(p)[i] = make_uint2(w[2 * i], w[2 * i + 1]);
  } else {
#pragma unroll
    for (int i = 0; i < NW; i++) reinterpret_cast<uint32_t*>(p)[i] = w[i];
  }
}

/* ---- element loads and stores -------------------------------------------- */

/* x[j] = element e0 + j of `base` widened to fp32, 0 past `count` (a zero
 * never raises a block's max, so tail blocks need no special case). */
template <int DT>
__device__ __forceinline__ void loadElems(const void* base, size_t e0, size_t count,
                                          float (&x)[Elem<DT>::kPerThread]) {
  constexpr int E = Elem<DT>::kPerThread;
  const uint8_t* p = static_cast<const uint8_t*>(base) + e0 * Elem<DT>::kSize;
  if (e0 + E <= count && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    uint4 v0 = __ldcs(reinterpret_cast<const uint4*>(p));
    uint4 v1 = __ldcs(reinterpret_cast<const uint4*>(p) + 1);
    const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (int i = 0; i < 8; i++) {
      if (DT == kF32) {
        x[i] = __uint_as_float(w[i]);
      } else {
        x[2 * i] = widen16(w[i] & 0xffffu, DT);
        x[2 * i + 1] = widen16(w[i] >> 16, DT);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < E; j++) {
      if (e0 + j < count) {
        x[j] = DT == kF32 ? reinterpret_cast<const float*>(p)[j]
                          : widen16(reinterpret_cast<const uint16_t*>(p)[j], DT);
      } else {
        x[j] = 0.0f;
      }
    }
  }
}

template <int DT>
__device__ __forceinline__ void storeElems(void* base, size_t e0, size_t count,
                                           const float (&y)[Elem<DT>::kPerThread]) {
  constexpr int E = Elem<DT>::kPerThread;
  uint8_t* p = static_cast<uint8_t*>(base) + e0 * Elem<DT>::kSize;
  if (e0 + E <= count && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    uint32_t w[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
      if (DT == kF32)
        w[i] = __float_as_uint(canon32(y[i]));
      else
        w[i] = narrow16(y[2 * i], DT) | (narrow16(y[2 * i + 1], DT) << 16);
    }
    reinterpret_cast<uint4*>(p)[0] = make_uint4(w[0], w[1], w[2], w[3]);
    reinterpret_cast<uint4*>(p)[1] = make_uint4(w[4], w[5], w[6], w[7]);
  } else {
#pragma unroll
    for (int j = 0; j < E; j++) {
      if (e0 + j < count) {
        if (DT == kF32)
          reinterpret_cast<float*>(p)[j] = canon32(y[j]);
        else
          reinterpret_cast<uint16_t*>(p)[j] = (uint16_t)narrow16(y[j], DT);
      }
    }
  }
}

/* The packed words of elements e0 .. e0+E-1 of one segment's data (values
 * past `count` are undefined and never used). Whole words are read even at
 * the end: the data starts 4-byte aligned and the segment is padded to 16
 * bytes, so a word that starts inside the data ends inside the segment.
 * int2 with E = 8 has 2 bytes, 2-byte aligned: one half word, in w[0]. */
template <int BITS, int E>
struct QWords {
  static constexpr int kBytes = E * BITS / 8;
  static constexpr int kN = kBytes < 4 ? 1 : kBytes / 4;
  uint32_t w[kN];
};

template <int BITS, int E>
__device__ __forceinline__ void loadQWords(const uint8_t* data, size_t e0, size_t count,
                                           size_t dataBytes, QWords<BITS, E>& q) {
  constexpr int NW = QWords<BITS, E>::kN;
  const size_t boff = zppQuantByteOf(e0, BITS);
  const uint8_t* p = data + boff;
  if (QWords<BITS, E>::kBytes < 4) {
    // The half word ends inside the segment as a word would (above).
    q.w[0] = e0 < count ? __ldcs(reinterpret_cast<const unsigned short*>(p)) : 0u;
  } else if (e0 + E <= count) {
    loadWords<NW>(p, q.w);
  } else {
#pragma unroll
    for (int i = 0; i < NW; i++)
      q.w[i] = boff + 4 * i < dataBytes ? __ldcs(reinterpret_cast<const unsigned int*>(p) + i) : 0u;
  }
}

/* q of element e0 + j (j a constant after unrolling): int8 bytes; int4
 * element 2i in the low nibble, 2i+1 in the high one; int2 element 4i + f
 * in bits 2f..2f+1 of byte i; sign-extended. */
template <int BITS, int E>
__device__ __forceinline__ int qOf(const QWords<BITS, E>& q, int j) {
  if (BITS == 8) return (int)(q.w[j / 4] << (24 - 8 * (j % 4))) >> 24;
  if (BITS == 2) return (int)(q.w[j / 16] << (30 - 2 * (j % 16))) >> 30;
  return (int)(q.w[j / 8] << (28 - 4 * (j % 8))) >> 28;
}

/* Inputs whose loads a decoding thread issues before it adds any of them:
 * 4 x 4..16 bytes of packed data (plus a header and a scale, cache hits)
 * instead of one input's 4..16 bytes at a time, so that a thread has several
 * loads in flight even at int4 and 8 elements. */
constexpr int kInputsInFlight = 4;

/* The packed values (markers NaN) of elements e0 .. e0+E-1 of n segments,
 * handed to add(j, y) in input order: add sees exactly the sequence of the
 * one-input-at-a-time loop, only the loads of U inputs go first (U = 1 for a
 * plain decode, n = 1, which keeps its registers). A segment whose header
 * does not match gives NaN. */
template <int BITS, int E, int U = kInputsInFlight, class Add>
__device__ __forceinline__ void forPackedValues(const uint8_t* packed, size_t stride, int n,
                                                size_t count, int blockLog2, const Geom& g, size_t e0,
                                                Add add) {
  const size_t blk = e0 >> blockLog2;  // E divides every block size
  if constexpr (U == 1) {
    // One input after the other, the scale loaded only for a good header:
    // the plain decode's registers (ptxas: 8 fewer than the general loop).
    for (int k = 0; k < n; k++) {
      const uint8_t* seg = packed + (size_t)k * stride;
      const int hc = headerCheck(seg, count, BITS, blockLog2);
      float scale = __uint_as_float(kNaN32);
      if (hc != kHeaderBad)
        scale = __ldg(reinterpret_cast<const float*>(seg + ZPP_QUANT_HEADER_BYTES) + blk);
      QWords<BITS, E> q;
      loadQWords<BITS, E>(seg + g.dataOff, e0, count, g.dataBytes, q);
#pragma unroll
      for (int j = 0; j < E; j++)
        add(j, packedValue<BITS>(qOf<BITS, E>(q, j), scale, hc == kHeaderMarkers));
    }
  } else {
    for (int k0 = 0; k0 < n; k0 += U) {
      QWords<BITS, E> q[U];
      float scale[U];
      bool markers[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        scale[u] = __uint_as_float(kNaN32);
        markers[u] = false;
#pragma unroll
        for (int i = 0; i < QWords<BITS, E>::kN; i++) q[u].w[i] = 0u;
        if (k0 + u < n) {
          const uint8_t* seg = packed + (size_t)(k0 + u) * stride;
          const int hc = headerCheck(seg, count, BITS, blockLog2);
          // The scale and data are inside the caller's segment whatever the
          // header says (its geometry is the call's): load them unconditionally.
          const float sc = __ldg(reinterpret_cast<const float*>(seg + ZPP_QUANT_HEADER_BYTES) + blk);
          if (hc != kHeaderBad) scale[u] = sc;
          markers[u] = hc == kHeaderMarkers;
          loadQWords<BITS, E>(seg + g.dataOff, e0, count, g.dataBytes, q[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (k0 + u >= n) break;
#pragma unroll
        for (int j = 0; j < E; j++)
          add(j, packedValue<BITS>(qOf<BITS, E>(q[u], j), scale[u], markers[u]));
      }
    }
  }
}

/* ---- escaped values --------------------------------------------------------- */

/* The escaped values of one segment (header already checked) that fall in
 * elements e0 .. e0+E-1 (E divides the escape group): stored into v (a plain
 * decode) or added to it, in slot order. Each element escapes at most once
 * per segment, so adding input by input is the spec's order. A slot index
 * past the group only matches elements past `count`, which no caller stores. */
template <int E>
__device__ __forceinline__ void applyEscapes(const uint8_t* seg, const Geom& g, size_t e0, bool store,
                                             float (&v)[E]) {
  const size_t grp = e0 / ZPP_QUANT_ESC_GROUP;
  const uint8_t* table = seg + g.escOff + grp * ZPP_QUANT_ESC_TABLE_BYTES;
  if (zppQuantEscIndex(table, 0) == ZPP_QUANT_ESC_EMPTY) return;  // the usual case
  const size_t rel0 = e0 - grp * ZPP_QUANT_ESC_GROUP;
  for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
    const unsigned idx = zppQuantEscIndex(table, j);
    if (idx == ZPP_QUANT_ESC_EMPTY) break;
    if (idx < rel0 || idx >= rel0 + E) continue;
    const float e = zppQuantEscValue(table, j);
    // Constant indices only: v stays in registers.
#pragma unroll
    for (int t = 0; t < E; t++)
      if (idx == rel0 + t) v[t] = store ? e : __fadd_rn(v[t], e);
  }
}

/* s[j] = the spec's sum of elements e0 + j over n segments: the packed values
 * (markers NaN) in input order from 0, then the escaped values in input
 * order. A segment whose header does not match contributes NaN (and no
 * escapes). */
template <int BITS, int E>
__device__ __forceinline__ void sumInputs(const uint8_t* packed, size_t stride, int n, size_t count,
                                          int blockLog2, const Geom& g, size_t e0, float (&s)[E]) {
#pragma unroll
  for (int j = 0; j < E; j++) s[j] = 0.0f;
  forPackedValues<BITS, E>(packed, stride, n, count, blockLog2, g, e0,
                           [&](int j, float y) { s[j] = __fadd_rn(s[j], y); });
  for (int k = 0; k < n; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    if (headerCheck(seg, count, BITS, blockLog2) != kHeaderBad) applyEscapes<E>(seg, g, e0, false, s);
  }
}

/* ---- the quantization step shared by quantize and reduce-requantize ----- */

/* x: this thread's E values (0 past count). groupLog2 = log2(B / E), the
 * threads that share one block; smem holds one word per warp. Every thread
 * of the CTA must call this (shuffles and the barrier are CTA-wide). */
template <int BITS, int E>
__device__ __forceinline__ void quantizeStore(const float (&x)[E], size_t e0, size_t count,
                                              int blockLog2, int groupLog2, uint8_t* seg, const Geom& g,
                                              uint32_t* smem) {
  constexpr int Q = BITS == 8 ? 127 : BITS == 4 ? 7 : 1;

  uint32_t m = 0;
#pragma unroll
  for (int j = 0; j < E; j++) m = max(m, __float_as_uint(x[j]) & 0x7fffffffu);

  const int group = 1 << groupLog2;
  const int lanes = group < 32 ? group : 32;
  for (int off = lanes >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, off));
  if (group > 32) {
    const unsigned warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) smem[warp] = m;
    __syncthreads();
    const unsigned first = (threadIdx.x >> groupLog2) << (groupLog2 - 5);
    m = 0;
    for (int i = 0; i < (group >> 5); i++) m = max(m, smem[first + i]);
    __syncthreads();  // smem may be reused by the next segment
  }

  // The spec's arithmetic, step by step (zpp_quant.h, "Arithmetic").
  uint32_t scaleBits;
  int q[E];
  if (m >= kExpMask || m == 0) {
    scaleBits = m == 0 ? 0u : kNaN32;
#pragma unroll
    for (int j = 0; j < E; j++) q[j] = 0;
  } else {
    const float a = __uint_as_float(m);
    const float qf = (float)Q;
    const float p = m < kTwoPowM64 ? __uint_as_float(kTwoPow64) : 1.0f;
    scaleBits = __float_as_uint(__fdiv_rn(a, qf));
    const float inv = __fdiv_rn(qf, __fmul_rn(a, p));
#pragma unroll
    for (int j = 0; j < E; j++) {
      int v = __float2int_rn(__fmul_rn(__fmul_rn(x[j], p), inv));
      q[j] = min(max(v, -Q), Q);
    }
  }

  if (e0 >= count) return;  // past the end: nothing to store (reduction done)
  uint32_t* scales = reinterpret_cast<uint32_t*>(seg + ZPP_QUANT_HEADER_BYTES);
  if ((threadIdx.x & (group - 1)) == 0) scales[e0 >> blockLog2] = scaleBits;

  constexpr int NB = E * BITS / 8;         // data bytes of this thread
  constexpr int NW = NB < 4 ? 1 : NB / 4;  // int2, E = 8: one half word
  constexpr int PER = 32 / BITS;           // q per word
  uint32_t w[NW];
#pragma unroll
  for (int i = 0; i < NW; i++) {
    uint32_t v = 0;
#pragma unroll
    for (int b = 0; b < PER; b++)
      if (PER * i + b < E) v |= ((uint32_t)q[PER * i + b] & ((1u << BITS) - 1u)) << (BITS * b);
    w[i] = v;
  }
  uint8_t* data = seg + g.dataOff + zppQuantByteOf(e0, BITS);
  if (e0 + E <= count) {
    if (NB < 4)
      *reinterpret_cast<unsigned short*>(data) = (unsigned short)w[0];  // 2-byte aligned
    else
      storeWords<NW>(data, w);
  } else {
    // Tail: only the bytes that belong to the data (the unused fields of
    // the last byte are 0 because q = 0 past the end); the padding after
    // them is written with the header.
    const size_t nbytes = zppQuantDataBytes(count - e0, BITS);
#pragma unroll
    for (int b = 0; b < NB; b++)
      if ((size_t)b < nbytes) data[b] = (uint8_t)(w[b / 4] >> (8 * (b % 4)));
  }
}

/* ---- kernels -------------------------------------------------------------- */

/* Segment k = j * nodes + n of a reordered quantization holds partition
 * p = n * local + j (zpp_quant.h, "Tensor-slice reordering"). */
__host__ __device__ __forceinline__ size_t partitionOf(int k, int nodes, int local) {
  return (size_t)(k % nodes) * (size_t)local + (size_t)(k / nodes);
}

/* Quantize nseg segments. Segment k = j * nodes + n holds partition
 * p = n * local + j of the input (tensor-slice reordering; nodes = local = 1
 * for a plain quantization). */
template <int DT, int BITS>
__global__ void __launch_bounds__(kMaxThreads, 2)
    quantizeKernel(const void* __restrict__ in, size_t partStride, size_t count, int blockLog2,
                   int groupLog2, uint8_t* __restrict__ out, size_t segBytes, int nseg, int nodes,
                   int local) {
  constexpr int E = Elem<DT>::kPerThread;
  __shared__ uint32_t smem[kMaxThreads / 32];
  const Geom g = geom(count, BITS, blockLog2);
  const size_t e0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * E;
  for (int k = blockIdx.y; k < nseg; k += gridDim.y) {
    const size_t part = partitionOf(k, nodes, local);
    const void* src = static_cast<const uint8_t*>(in) + part * partStride * Elem<DT>::kSize;
    uint8_t* seg = out + (size_t)k * segBytes;
    if (blockIdx.x == 0) writeHeaderAndPadding(seg, count, BITS, blockLog2, g);
    float x[E];
    loadElems<DT>(src, e0, count, x);
    quantizeStore<BITS, E>(x, e0, count, blockLog2, groupLog2, seg, g, smem);
  }
}

/* Decode n segments (packed + k * stride) and, by MODE: write them in DT
 * (n = 1), add them to an fp32 accumulator, or sum, divide and write in DT. */
template <int DT, int BITS, int MODE>
__global__ void __launch_bounds__(kThreads)
    decodeKernel(const uint8_t* __restrict__ packed, size_t stride, int n, size_t count, int blockLog2,
                 void* out, int accumulate, float divisor) {
  constexpr int E = Elem<DT>::kPerThread;
  const size_t e0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * E;
  if (e0 >= count) return;  // no cross-thread work in decoding
  const Geom g = geom(count, BITS, blockLog2);

  float acc[E];
  if (MODE == kModeAccumulate && accumulate) {
    // The accumulator is read and written again: plain cached loads.
    const float* a = static_cast<const float*>(out) + e0;
    if (E % 4 == 0 && e0 + E <= count && aligned16(a)) {
#pragma unroll
      for (int i = 0; i < E / 4; i++) {
        float4 v = reinterpret_cast<const float4*>(a)[i];
        acc[4 * i] = v.x;
        acc[4 * i + 1] = v.y;
        acc[4 * i + 2] = v.z;
        acc[4 * i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < E; j++) acc[j] = e0 + j < count ? a[j] : 0.0f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < E; j++) acc[j] = 0.0f;
  }

  constexpr int U = MODE == kModeDequant ? 1 : kInputsInFlight;
  forPackedValues<BITS, E, U>(packed, stride, n, count, blockLog2, g, e0, [&](int j, float y) {
    acc[j] = MODE == kModeDequant ? y : __fadd_rn(acc[j], y);
  });
  for (int k = 0; k < n; k++) {
    const uint8_t* seg = packed + (size_t)k * stride;
    if (headerCheck(seg, count, BITS, blockLog2) != kHeaderBad)
      applyEscapes<E>(seg, g, e0, MODE == kModeDequant, acc);
  }
  if (MODE == kModeSum) {
#pragma unroll
    for (int j = 0; j < E; j++) acc[j] = __fdiv_rn(acc[j], divisor);
  }
  storeElems<DT>(out, e0, count, acc);
}

/* Sum n segments (bitsIn / blockIn) in fp32 and quantize the sums into one
 * segment (BITS_OUT / blockLog2Out); the CTA tiles follow the output blocks. */
template <int BITS_IN, int BITS_OUT>
__global__ void __launch_bounds__(kMaxThreads, 2)
    reduceRequantKernel(const uint8_t* __restrict__ packed, size_t stride, int n, size_t count,
                        int blockLog2In, int blockLog2Out, int groupLog2Out,
                        uint8_t* __restrict__ out) {
  constexpr int E = 8;
  __shared__ uint32_t smem[kMaxThreads / 32];
  const Geom gi = geom(count, BITS_IN, blockLog2In);
  const Geom go = geom(count, BITS_OUT, blockLog2Out);
  const size_t e0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * E;
  if (blockIdx.x == 0) writeHeaderAndPadding(out, count, BITS_OUT, blockLog2Out, go);

  float s[E];
#pragma unroll
  for (int j = 0; j < E; j++) s[j] = 0.0f;
  if (e0 < count) {
    sumInputs<BITS_IN, E>(packed, stride, n, count, blockLog2In, gi, e0, s);
    // Past the end the sums must stay 0 (a NaN header would make them NaN
    // and poison the tail block's max).
#pragma unroll
    for (int j = 0; j < E; j++)
      if (e0 + j >= count) s[j] = 0.0f;
  }
  quantizeStore<BITS_OUT, E>(s, e0, count, blockLog2Out, groupLog2Out, out, go, smem);
}

/* ---- escapes: the kernel after every encoding ---------------------------------- */

/* Non-zero q in one word of packed data. */
template <int BITS>
__device__ __forceinline__ int nonzeroQ(uint32_t w) {
  int n = 0;
#pragma unroll
  for (int i = 0; i < 32 / BITS; i++) n += ((w >> (BITS * i)) & ((1u << BITS) - 1u)) != 0;
  return n;
}

/* Where escapeKernel takes a group's fp32 elements from when it encodes the
 * group again: segment k's partition of a (reordered) quantization's input,
 * widened by quant_ref.h's loader, as the CPU does. */
struct QuantSrc {
  const uint8_t* in;
  size_t partStride;  // elements
  int nodes, local;
  zppDataType_t dtype;

  __device__ void load(int k, size_t base, size_t glen, float* x) const {
    const size_t esize = dtype == zppFloat32 ? 4 : 2;
    const void* src = in + partitionOf(k, nodes, local) * partStride * esize;
    for (size_t i = threadIdx.x; i < glen; i += blockDim.x)
      x[i] = zppQuantLoadOne(src, dtype, base + i);
  }
};

/* ... or the sums of a reduce-requantize's inputs (the same sums as its
 * kernel's). */
template <int BITS_IN>
struct SumSrc {
  const uint8_t* packed;
  size_t stride, count;
  int n, blockLog2;

  __device__ void load(int, size_t base, size_t glen, float* x) const {
    constexpr int E = 8;
    const Geom g = geom(count, BITS_IN, blockLog2);
    for (size_t r = (size_t)threadIdx.x * E; r < glen; r += (size_t)blockDim.x * E) {
      float s[E];
      sumInputs<BITS_IN, E>(packed, stride, n, count, blockLog2, g, base + r, s);
#pragma unroll
      for (int j = 0; j < E; j++)
        if (r + j < glen) x[r + j] = s[j];
    }
  }
};

/* The escape tables of nseg segments that an encoding kernel just wrote
 * (scales and data as if escapes did not exist): one CTA per escape group
 * (blockIdx.x) and segment (blockIdx.y, striding), in three stages, each
 * ending where the group turns out to need nothing more (empty table, the
 * kernel's scales and data kept: for a group without candidates and
 * non-finite elements the reference encodes every block plain).
 *  A. The packed data, no input: a block may hold a candidate or a
 *     non-finite element only if its scale is NaN, or non-zero with at most
 *     E non-zero q (zpp_quant.h, "Escapes", "Why 2^K").
 *  B. The group's fp32 input (or sums) in shared memory, and the exact test
 *     per block, in parallel: over its finite elements, a = max |x|,
 *     c = #{i : |x_i| 2^K >= a} and nz = #{i : x_i != 0}; the block has a
 *     candidate iff c < min(E + 1, nz) (quant_ref.h's
 *     zppQuantEscHasCandidate, which says why). (The comparison is exact in
 *     double, as zppQuantEscAbove's.) Blocks with a non-finite element always
 *     go on. Ordinary data whose blocks hold few non-zero q (sums of inputs
 *     quantized with a far larger scale) stop here.
 *  C. The blocks that go on, one thread each, in parallel: the reference
 *     magnitude and candidates (quant_ref.h's own functions); one thread
 *     hands out the table's slots in block order by the overflow rule (a
 *     block's candidates take the next slots only when all fit); then each
 *     such block is encoded again by zppQuantEscBlockRef, the reference's block step.
 * A block of 4096 elements is still one thread's work in C: only real
 * outliers get there. */
template <int BITS, class Src>
__global__ void __launch_bounds__(kThreads)
    escapeKernel(Src src, size_t count, int blockLog2, uint8_t* __restrict__ out, size_t segBytes,
                 int nseg) {
  constexpr int kMaxBlk = ZPP_QUANT_ESC_GROUP / ZPP_QUANT_MIN_BLOCK;
  constexpr int kPer = ZPP_QUANT_ESC_GROUP / kThreads;  // stage B: elements per thread
  static_assert(kPer <= ZPP_QUANT_MIN_BLOCK, "a thread's elements must lie in one block");
  constexpr int K = ZPP_QUANT_ESC_LOG2(BITS);
  __shared__ float x[ZPP_QUANT_ESC_GROUP];
  __shared__ int nonzero[kMaxBlk];    // A: non-zero q; C: first slot, -1 none
  __shared__ uint32_t amax[kMaxBlk];  // B: max finite |x| bits; C: r
  __shared__ int stat[kMaxBlk];       // B: c << 16 | nz (each <= 4096); C: nc
  __shared__ uint32_t info[kMaxBlk];  // bit 0: non-finite; bit 1: goes on to C
  __shared__ int usedAll;
  const Geom g = geom(count, BITS, blockLog2);
  const int block = 1 << blockLog2;
  const size_t grp = blockIdx.x;
  const size_t base = grp * ZPP_QUANT_ESC_GROUP;
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  const int nblk = (int)((glen + (size_t)block - 1) >> blockLog2);
  const size_t b0 = base >> blockLog2;
  // The group's data in chunks of 16 bytes (8 for int2 blocks of 32), each
  // inside one block: whole words up to the tables, the last one ending in
  // zero padding (and a last byte's zero fields), never in a table.
  const int blockBytes = (int)zppQuantDataBytes((size_t)block, BITS);
  const int chunk = blockBytes < 16 ? blockBytes : 16;
  const size_t lo = g.dataOff + zppQuantByteOf(base, BITS);
  const size_t groupBytes = zppQuantDataBytes(ZPP_QUANT_ESC_GROUP, BITS);
  const size_t hi = lo + groupBytes < g.escOff ? lo + groupBytes : g.escOff;
  // Stage B's share of this thread: kPer consecutive elements, one block's.
  const size_t i0 = (size_t)threadIdx.x * kPer;
  const size_t i1 = i0 + kPer < glen ? i0 + kPer : glen;
  const int myBlk = (int)(i0 >> blockLog2);
  for (int k = blockIdx.y; k < nseg; k += gridDim.y) {
    uint8_t* seg = out + (size_t)k * segBytes;
    uint8_t* table = seg + g.escOff + grp * ZPP_QUANT_ESC_TABLE_BYTES;
    // A.
    for (int b = threadIdx.x; b < nblk; b += blockDim.x) nonzero[b] = 0;
    __syncthreads();
    for (size_t c = lo + chunk * (size_t)threadIdx.x; c < hi; c += chunk * (size_t)blockDim.x) {
      int nz = 0;
#pragma unroll
      for (int w = 0; w < 4; w++)
        if (4 * w < chunk && c + 4 * w < hi)
          nz += nonzeroQ<BITS>(*reinterpret_cast<const uint32_t*>(seg + c + 4 * w));
      if (nz) atomicAdd(&nonzero[(c - lo) / (size_t)blockBytes], nz);
    }
    __syncthreads();
    int may = 0;
    for (int b = threadIdx.x; b < nblk; b += blockDim.x) {
      // Plain loads: this kernel rewrites scales (of its own group, later).
      const float sc = reinterpret_cast<const float*>(seg + ZPP_QUANT_HEADER_BYTES)[b0 + b];
      may |= sc != sc || (sc != 0.0f && nonzero[b] <= ZPP_QUANT_ESC_PER_BLOCK);
    }
    if (!__syncthreads_or(may)) {
      if (threadIdx.x < ZPP_QUANT_ESC_SLOTS)
        zppQuantEscStoreSlot(table, (int)threadIdx.x, 0.0f, ZPP_QUANT_ESC_EMPTY);
      continue;
    }
    // B.
    src.load(k, base, glen, x);
    for (int b = threadIdx.x; b < nblk; b += blockDim.x) {
      amax[b] = 0;
      stat[b] = 0;
      info[b] = 0;
    }
    __syncthreads();
    if (i0 < glen) {
      uint32_t mx = 0;
      bool nonfinite = false;
      for (size_t i = i0; i < i1; i++) {
        const uint32_t m = __float_as_uint(x[i]) & 0x7fffffffu;
        if (m >= kExpMask)
          nonfinite = true;
        else
          mx = max(mx, m);
      }
      atomicMax(&amax[myBlk], mx);
      if (nonfinite) atomicOr(&info[myBlk], 1u);
    }
    __syncthreads();
    if (i0 < glen) {
      const double a = (double)__uint_as_float(amax[myBlk]);
      int c = 0, nz = 0;
      for (size_t i = i0; i < i1; i++) {
        const uint32_t m = __float_as_uint(x[i]) & 0x7fffffffu;
        if (m >= kExpMask) continue;
        nz += m != 0;
        c += (double)__uint_as_float(m) * (double)(1u << K) >= a;
      }
      if (c | nz) atomicAdd(&stat[myBlk], (c << 16) | nz);
    }
    __syncthreads();
    int work = 0;
    for (int b = threadIdx.x; b < nblk; b += blockDim.x) {
      if ((info[b] & 1u) || zppQuantEscHasCandidate(stat[b] >> 16, stat[b] & 0xffff)) {
        info[b] |= 2u;
        work = 1;
      }
    }
    if (!__syncthreads_or(work)) {
      if (threadIdx.x < ZPP_QUANT_ESC_SLOTS)
        zppQuantEscStoreSlot(table, (int)threadIdx.x, 0.0f, ZPP_QUANT_ESC_EMPTY);
      continue;  // x and the arrays of B are written again only after A's barriers
    }
    // C.
    for (int b = threadIdx.x; b < nblk; b += blockDim.x) {
      int nc = 0;
      if (info[b] & 2u) {
        const size_t l0 = (size_t)b << blockLog2;
        const size_t len = glen - l0 < (size_t)block ? glen - l0 : (size_t)block;
        const uint32_t r = zppQuantEscReference(x + l0, len);
        for (size_t i = 0; i < len; i++) nc += zppQuantEscAbove(x[l0 + i], r, K);
        amax[b] = r;
      }
      stat[b] = nc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int used = 0;
      for (int b = 0; b < nblk; b++) {
        const int nc = stat[b];
        const bool escape = nc > 0 && used + nc <= ZPP_QUANT_ESC_SLOTS;
        nonzero[b] = escape ? used : -1;
        if (escape) used += nc;
      }
      usedAll = used;
    }
    __syncthreads();
    int marked = 0;
    for (int b = threadIdx.x; b < nblk; b += blockDim.x) {
      if (!(info[b] & 2u)) continue;
      const size_t l0 = (size_t)b << blockLog2;
      const size_t len = glen - l0 < (size_t)block ? glen - l0 : (size_t)block;
      marked |= zppQuantEscBlockRef(x + l0, len, l0, base, BITS, block, amax[b], nonzero[b],
                                    seg + ZPP_QUANT_HEADER_BYTES, seg + g.dataOff, table);
    }
    if (threadIdx.x >= (unsigned)usedAll && threadIdx.x < ZPP_QUANT_ESC_SLOTS)
      zppQuantEscStoreSlot(table, (int)threadIdx.x, 0.0f, ZPP_QUANT_ESC_EMPTY);
    if (marked) atomicOr(reinterpret_cast<unsigned*>(seg + 4), kMarkersFlag);  // other groups' CTAs too
    __syncthreads();  // x and the block arrays are reused by the next segment
  }
}

/* ---- host side -------------------------------------------------------------- */

/* Grid x for `count` elements at `perCta` elements per CTA; at least one CTA
 * so that an empty segment still gets its header. */
bool gridFor(size_t count, size_t perCta, unsigned* grid) {
  size_t g = (count + perCta - 1) / perCta;
  if (g == 0) g = 1;
  if (g > 0x7fffffffu) return false;
  *grid = (unsigned)g;
  return true;
}

zppResult_t checkDecodeArgs(const char* fn, const void* packed, size_t stride, int n, size_t count,
                            int bits, int block) {
  QC_ARG(validParams(bits, block), "%s: invalid bits %d / block %d", fn, bits, block);
  QC_ARG(n >= 1, "%s: n = %d inputs, need at least 1", fn, n);
  QC_ARG(packed != NULL, "%s: packed is NULL", fn);
  QC_ARG(aligned(packed, 4) && stride % 4 == 0, "%s: packed %p / stride %zu not 4-byte aligned", fn,
         packed, stride);
  QC_ARG(n <= 1 || stride >= geom(count, bits, blockLog2Of(block)).segBytes,
         "%s: stride %zu smaller than a segment", fn, stride);
  return zppSuccess;
}

/* The escape kernel after an encoding kernel wrote nseg segments. */
template <int BITS, class Src>
zppResult_t launchEscapes(const Src& src, size_t count, int blockLog2, uint8_t* out, size_t segBytes,
                          int nseg, cudaStream_t stream) {
  const size_t ngroups = zppQuantNumGroups(count);
  if (ngroups == 0) return zppSuccess;  // no elements, no tables
  if (ngroups > 0x7fffffffu) ZPP_FAIL(zppInvalidArgument, QUANT, "escapes: count %zu too large", count);
  dim3 grid((unsigned)ngroups, nseg < 65535 ? nseg : 65535);
  ZPP_CUDA_LAUNCH((escapeKernel<BITS, Src>), grid, kThreads, stream, src, count, blockLog2, out,
                  segBytes, nseg);
  CUDALAUNCHCHECK("zpp escapes");
  return zppSuccess;
}

template <int DT, int BITS>
zppResult_t launchQuantize(const void* in, size_t partStride, size_t count, int block, uint8_t* out,
                           size_t segBytes, int nseg, int nodes, int local, cudaStream_t stream) {
  constexpr int E = Elem<DT>::kPerThread;
  const int bl = blockLog2Of(block);
  const int groupLog2 = bl - (E == 8 ? 3 : 4);
  const int threads = (block / E) > kThreads ? block / E : kThreads;
  unsigned gx;
  if (!gridFor(count, (size_t)threads * E, &gx))
    ZPP_FAIL(zppInvalidArgument, QUANT, "quantize: count %zu too large", count);
  dim3 grid(gx, nseg < 65535 ? nseg : 65535);
  ZPP_CUDA_LAUNCH((quantizeKernel<DT, BITS>), grid, threads, stream, in, partStride, count, bl,
                  groupLog2, out, segBytes, nseg, nodes, local);
  CUDALAUNCHCHECK("zpp quantize");
  const zppDataType_t dtype = DT == kF32 ? zppFloat32 : DT == kF16 ? zppFloat16 : zppBfloat16;
  const QuantSrc src = {static_cast<const uint8_t*>(in), partStride, nodes, local, dtype};
  return launchEscapes<BITS>(src, count, bl, out, segBytes, nseg, stream);
}

zppResult_t quantizeDispatch(const void* in, int dt, size_t partStride, size_t count, int bits,
                             int block, uint8_t* out, size_t segBytes, int nseg, int nodes, int local,
                             cudaStream_t stream) {
#define QC_Q(D, B)                                                                               \
  if (dt == D && bits == B)                                                                      \
    return launchQuantize<D, B>(in, partStride, count, block, out, segBytes, nseg, nodes, local, \
                                stream);
  // clang-format off: one call per line (clang-format 14 rewraps these macro calls on every run)
  QC_Q(kF32, 8)
  QC_Q(kF32, 4)
  QC_Q(kF16, 8)
  QC_Q(kF16, 4)
  QC_Q(kBF16, 8)
  QC_Q(kBF16, 4)
  QC_Q(kF32, 2)
  QC_Q(kF16, 2)
  QC_Q(kBF16, 2)
  // clang-format on
#undef QC_Q
  ZPP_FAIL(zppInternalError, QUANT, "quantize: no kernel for dtype %d bits %d", dt, bits);
}

template <int DT, int BITS, int MODE>
zppResult_t launchDecode(const void* packed, size_t stride, int n, size_t count, int block, void* out,
                         int accumulate, float divisor, cudaStream_t stream) {
  constexpr int E = Elem<DT>::kPerThread;
  if (count == 0) return zppSuccess;
  unsigned gx;
  if (!gridFor(count, (size_t)kThreads * E, &gx))
    ZPP_FAIL(zppInvalidArgument, QUANT, "decode: count %zu too large", count);
  ZPP_CUDA_LAUNCH((decodeKernel<DT, BITS, MODE>), gx, kThreads, stream,
                  static_cast<const uint8_t*>(packed), stride, n, count, blockLog2Of(block), out,
                  accumulate, divisor);
  CUDALAUNCHCHECK("zpp decode");
  return zppSuccess;
}

template <int MODE>
zppResult_t decodeDispatch(const void* packed, size_t stride, int n, size_t count, int bits, int block,
                           void* out, int dt, int accumulate, float divisor, cudaStream_t stream) {
#define QC_D(D, B)          \
  if (dt == D && bits == B) \
    return launchDecode<D, B, MODE>(packed, stride, n, count, block, out, accumulate, divisor, stream);
  // The accumulator is fp32 only: for that mode the 16-bit slots name the
  // fp32 kernel again, so no useless kernels are instantiated (and the
  // dtype was already checked to be fp32).
  constexpr int F16 = MODE == kModeAccumulate ? kF32 : kF16;
  constexpr int BF16 = MODE == kModeAccumulate ? kF32 : kBF16;
  // clang-format off: one call per line (clang-format 14 rewraps these macro calls on every run)
  QC_D(kF32, 8)
  QC_D(kF32, 4)
  QC_D(F16, 8)
  QC_D(F16, 4)
  QC_D(BF16, 8)
  QC_D(BF16, 4)
  QC_D(kF32, 2)
  QC_D(F16, 2)
  QC_D(BF16, 2)
  // clang-format on
#undef QC_D
  ZPP_FAIL(zppInternalError, QUANT, "decode: no kernel for dtype %d bits %d", dt, bits);
}

}  // namespace

/* ---- the C API ------------------------------------------------------------------ */

extern "C" zppResult_t zppQuantizeCuda(const void* in, zppDataType_t dtype, size_t count, int bits,
                                       int block, void* packed, cudaStream_t stream) {
  const int dt = dtypeIndex(dtype);
  QC_ARG(dt >= 0, "zppQuantizeCuda: unsupported dtype %d", (int)dtype);
  QC_ARG(validParams(bits, block), "zppQuantizeCuda: invalid bits %d / block %d", bits, block);
  QC_ARG(count == 0 || in != NULL, "zppQuantizeCuda: in is NULL");
  QC_ARG(packed != NULL, "zppQuantizeCuda: packed is NULL");
  QC_ARG(aligned(in, elemSize(dt)), "zppQuantizeCuda: in %p misaligned for its dtype", in);
  QC_ARG(aligned(packed, 4), "zppQuantizeCuda: packed %p not 4-byte aligned", packed);
  const size_t segBytes = geom(count, bits, blockLog2Of(block)).segBytes;
  ZPPCHECK(quantizeDispatch(in, dt, 0, count, bits, block, static_cast<uint8_t*>(packed), segBytes, 1,
                            1, 1, stream));
  return zppSuccess;
}

extern "C" zppResult_t zppQuantizeReorderedCuda(const void* in, zppDataType_t dtype, size_t part_count,
                                                size_t part_stride, int nparts, int local_size,
                                                int bits, int block, void* packed,
                                                cudaStream_t stream) {
  const int dt = dtypeIndex(dtype);
  QC_ARG(dt >= 0, "zppQuantizeReorderedCuda: unsupported dtype %d", (int)dtype);
  QC_ARG(validParams(bits, block), "zppQuantizeReorderedCuda: invalid bits %d / block %d", bits, block);
  QC_ARG(nparts >= 1 && local_size >= 1 && nparts % local_size == 0,
         "zppQuantizeReorderedCuda: %d partitions do not split into nodes of %d ranks", nparts,
         local_size);
  QC_ARG(part_stride >= part_count, "zppQuantizeReorderedCuda: part_stride %zu < part_count %zu",
         part_stride, part_count);
  QC_ARG(part_count == 0 || in != NULL, "zppQuantizeReorderedCuda: in is NULL");
  QC_ARG(packed != NULL, "zppQuantizeReorderedCuda: packed is NULL");
  QC_ARG(aligned(in, elemSize(dt)), "zppQuantizeReorderedCuda: in %p misaligned", in);
  QC_ARG(aligned(packed, 4), "zppQuantizeReorderedCuda: packed %p not 4-byte aligned", packed);
  const size_t segBytes = geom(part_count, bits, blockLog2Of(block)).segBytes;
  ZPPCHECK(quantizeDispatch(in, dt, part_stride, part_count, bits, block, static_cast<uint8_t*>(packed),
                            segBytes, nparts, nparts / local_size, local_size, stream));
  return zppSuccess;
}

extern "C" zppResult_t zppDequantizeCuda(const void* packed, size_t count, int bits, int block,
                                         void* out, zppDataType_t dtype, cudaStream_t stream) {
  const int dt = dtypeIndex(dtype);
  QC_ARG(dt >= 0, "zppDequantizeCuda: unsupported dtype %d", (int)dtype);
  ZPPCHECK(checkDecodeArgs("zppDequantizeCuda", packed, 0, 1, count, bits, block));
  QC_ARG(count == 0 || out != NULL, "zppDequantizeCuda: out is NULL");
  QC_ARG(aligned(out, elemSize(dt)), "zppDequantizeCuda: out %p misaligned", out);
  ZPPCHECK(decodeDispatch<kModeDequant>(packed, 0, 1, count, bits, block, out, dt, 0, 1.0f, stream));
  return zppSuccess;
}

extern "C" zppResult_t zppDequantizeAccumulateCuda(const void* packed, size_t stride, int n,
                                                   size_t count, int bits, int block, float* acc,
                                                   int accumulate, cudaStream_t stream) {
  ZPPCHECK(checkDecodeArgs("zppDequantizeAccumulateCuda", packed, stride, n, count, bits, block));
  QC_ARG(count == 0 || acc != NULL, "zppDequantizeAccumulateCuda: acc is NULL");
  QC_ARG(aligned(acc, 4), "zppDequantizeAccumulateCuda: acc %p misaligned", (void*)acc);
  ZPPCHECK(decodeDispatch<kModeAccumulate>(packed, stride, n, count, bits, block, acc, kF32, accumulate,
                                           1.0f, stream));
  return zppSuccess;
}

extern "C" zppResult_t zppDequantizeSumCuda(const void* packed, size_t stride, int n, size_t count,
                                            int bits, int block, float divisor, void* out,
                                            zppDataType_t dtype, cudaStream_t stream) {
  const int dt = dtypeIndex(dtype);
  QC_ARG(dt >= 0, "zppDequantizeSumCuda: unsupported dtype %d", (int)dtype);
  ZPPCHECK(checkDecodeArgs("zppDequantizeSumCuda", packed, stride, n, count, bits, block));
  QC_ARG(count == 0 || out != NULL, "zppDequantizeSumCuda: out is NULL");
  QC_ARG(aligned(out, elemSize(dt)), "zppDequantizeSumCuda: out %p misaligned", out);
  QC_ARG(isfinite(divisor) && divisor != 0.0f,
         "zppDequantizeSumCuda: divisor %g must be finite and non-zero", (double)divisor);
  ZPPCHECK(
      decodeDispatch<kModeSum>(packed, stride, n, count, bits, block, out, dt, 0, divisor, stream));
  return zppSuccess;
}

extern "C" zppResult_t zppQuantReduceRequantCuda(const void* packed, size_t stride, int n, size_t count,
                                                 int bits_in, int block_in, int bits_out, int block_out,
                                                 void* packed_out, cudaStream_t stream) {
  ZPPCHECK(checkDecodeArgs("zppQuantReduceRequantCuda", packed, stride, n, count, bits_in, block_in));
  QC_ARG(validParams(bits_out, block_out), "zppQuantReduceRequantCuda: invalid bits %d / block %d",
         bits_out, block_out);
  QC_ARG(packed_out != NULL, "zppQuantReduceRequantCuda: packed_out is NULL");
  QC_ARG(aligned(packed_out, 4), "zppQuantReduceRequantCuda: packed_out %p not 4-byte aligned",
         packed_out);
  const int blIn = blockLog2Of(block_in), blOut = blockLog2Of(block_out);
  {
    // CTAs write output blocks while others still read inputs: overlap would
    // make the result depend on scheduling.
    const uintptr_t inLo = reinterpret_cast<uintptr_t>(packed);
    const uintptr_t inHi = inLo + (size_t)(n - 1) * stride + geom(count, bits_in, blIn).segBytes;
    const uintptr_t outLo = reinterpret_cast<uintptr_t>(packed_out);
    const uintptr_t outHi = outLo + geom(count, bits_out, blOut).segBytes;
    QC_ARG(!(outLo < inHi && inLo < outHi),
           "zppQuantReduceRequantCuda: packed_out overlaps the inputs");
  }
  const int threads = block_out / 8 > kThreads ? block_out / 8 : kThreads;
  unsigned gx;
  QC_ARG(gridFor(count, (size_t)threads * 8, &gx), "zppQuantReduceRequantCuda: count too large");
  const uint8_t* src = static_cast<const uint8_t*>(packed);
  uint8_t* dst = static_cast<uint8_t*>(packed_out);
#define QC_R(BI, BO)                                                                                 \
  if (bits_in == BI && bits_out == BO) {                                                             \
    ZPP_CUDA_LAUNCH((reduceRequantKernel<BI, BO>), gx, threads, stream, src, stride, n, count, blIn, \
                    blOut, blOut - 3, dst);                                                          \
    CUDALAUNCHCHECK("zpp reduce-requantize");                                                        \
    const SumSrc<BI> sums = {src, stride, count, n, blIn};                                           \
    return launchEscapes<BO>(sums, count, blOut, dst, 0, 1, stream);                                 \
  }
  // clang-format off: one call per line (clang-format 14 rewraps these macro calls on every run)
  QC_R(8, 8)
  QC_R(8, 4)
  QC_R(4, 8)
  QC_R(4, 4)
  QC_R(8, 2)
  QC_R(4, 2)
  QC_R(2, 8)
  QC_R(2, 4)
  QC_R(2, 2)
  // clang-format on
#undef QC_R
  ZPP_FAIL(zppInternalError, QUANT, "zppQuantReduceRequantCuda: no kernel for %d -> %d bits", bits_in,
           bits_out);
}
