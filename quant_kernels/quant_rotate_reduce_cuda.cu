/*
 * Reductions of rotated segments (zpp_quant.h, "Reductions of rotated
 * segments") as CUDA kernels: zppDequantizeSumExCuda and
 * zppQuantReduceRequantExCuda, byte for byte the host's zppDequantizeSumEx
 * and zppQuantReduceRequantEx (quant_rotate_reduce.c), in any of the three
 * orders (the Ex functions: ZPP_QUANT_SUM_QGZ, the order qgZ uses).
 *
 * Layout: one CTA of 256 threads per escape group (4096 elements), the
 * host's own unit: the reference forms a group's sums in a 4096-float tile
 * and encodes the group on its own, and so does this kernel, in shared
 * memory (x: the sums; y: one input's decoded block, simple order). Thread t
 * owns the elements [16 t, 16 t + 16) of the tile, always inside one block
 * (blocks are >= 32): its loads, sums, escapes, divisions and stores, and
 * its share of each block's maximum (a shared atomicMax of |x| bit patterns:
 * an integer max, in any order). The Walsh-Hadamard transforms run over the
 * whole tile at once: stage h pairs (j, j + h) with (j & h) == 0, 2048 pairs
 * split over the threads, which for h < B are exactly the pairs of every
 * block of B elements; a per-block flag in shared memory says which blocks
 * take part, the others keep their values. Every thread reaches every
 * barrier (the loops over stages and inputs are CTA-uniform; the emulator
 * checks it), so blocks that take another order just idle through.
 *
 * Why it is the host's arithmetic, step by step (same fp32 operations, same
 * order, no FMA: the file is built with --fmad=false and spells every step
 * with __f*_rn intrinsics or quant_ref.h's shared host+device code):
 *   - per input block, "stored rotated" is the host's blockRotated (header
 *     flag, full block, scale sign clear and finite); the rotated-domain
 *     order takes a block that every input stores rotated: r_j = 0 + v_0j
 *     + ... + v_(n-1)j in input order (v = (float)q * s), the stages, * 2^-L,
 *     the signs, then the escaped values added in input order (each input's
 *     slots in slot order, each thread for its own elements);
 *   - every other block takes the simple order: input k's block decoded as
 *     zppDequantizeEx decodes it (rotated: q s, stages, 2^-L, signs; stored
 *     plain: markers and non-finite |s| as NaN; a plain segment: q s, a NaN
 *     scale as NaN; then its escaped values stored; then a plain segment's
 *     markers as NaN), added as (0 + y_0) + y_1 + ...;
 *   - the sum's division is one __fdiv_rn: the host multiplies by the
 *     reciprocal of a power of two, which rounds the same real number;
 *   - requantization (zppQuantReduceRequantOrder): the direct order's blocks
 *     (block_in == block_out, output rotated, every input storing the block
 *     rotated, no escape in any input, every r finite) are quantized from r
 *     by quant_ref.h's block setup and encoder; the group's other sums, the
 *     direct blocks' at +0, are then encoded as zppQuantizeEx(fp32, flags_out)
 *     encodes a group: the plain block codec and the escape rules (stage B of
 *     quant_cuda.cu's escapeKernel decides, exactly, which blocks may hold a
 *     candidate or a non-finite element; those are encoded again by one
 *     thread each with the reference's zppQuantEscBlockRef after thread 0
 *     hands out the slots in block order), then, with ZPP_QUANT_ROTATE, the
 *     rotation of each full block without a non-finite element (its
 *     escaped elements already +0: zppQuantEscBlockRef zeroes them and turns
 *     -0 into +0, which changes no transformed non-zero value and no q),
 *     stored plain (scale sign set) where w is not finite. The direct
 *     blocks are skipped by that encoding: at +0 they have no candidate, no
 *     marker and no slot, as on the host.
 * A header that does not match (count, bits, block) is not refused here (a
 * kernel cannot return an error; zpp_quant_cuda.h): that input decodes as
 * NaN in every block, which then takes the simple order, and its escape
 * table is ignored. A slot past the group's end ends a table, as on the
 * host.
 *
 * Where the time goes (not yet measured on a GPU): every input's packed
 * block is read once per CTA (a rotated-domain block) and the q are
 * unpacked a byte at a time; a block that needs the simple order costs n
 * tile transforms (log2(B) barriers each) instead of one; the escape scan
 * reads each input's 48-byte table per group. The requantization adds one
 * tile transform for a rotated output and a second write of the data of
 * rotated blocks (the plain encoding first, as the escape rules need it).
 * The kernel is small-grid for small counts (one CTA per 4096 elements):
 * qgZ's chunks are several MiB, hundreds of groups. Shared memory: 37 KiB
 * per CTA.
 */
#include "quant_kernels/quant_cuda_dev.cuh"

namespace {
namespace rotred {

constexpr int kThreads = 256;
constexpr int kTile = ZPP_QUANT_ESC_GROUP;
constexpr int kPer = kTile / kThreads;  // elements a thread owns
constexpr int kMaxBlk = kTile / ZPP_QUANT_MIN_BLOCK;
constexpr uint32_t kExp = 0x7f800000u;
static_assert(kPer <= ZPP_QUANT_MIN_BLOCK && kPer % 2 == 0, "a thread's elements lie in one block");

/* n packed inputs of `count` elements (bits, 2^blockLog2), at packed + k * stride. */
struct Inputs {
  const uint8_t* packed;
  size_t stride, count;
  int n, bits, blockLog2;
};

struct Smem {
  float x[kTile];           // the sums (then what is encoded)
  float y[kTile];           // one input decoded (simple order)
  uint8_t rot[kMaxBlk];     // input block: every input stores it rotated
  uint8_t esc[kMaxBlk];     // input block: some input has an escape in it
  uint8_t kr[kMaxBlk];      // input block: input k stores it rotated (simple order)
  uint8_t dir[kMaxBlk];     // block: direct (requantized from r)
  uint8_t rotOut[kMaxBlk];  // output block: rotated by the encoding
  uint32_t amax[kMaxBlk];   // block: max |x| bits (finite ones, output blocks)
  uint32_t wmax[kMaxBlk];   // output block: max |w| bits
  uint32_t refr[kMaxBlk];   // output block: the reference magnitude r
  int stat[kMaxBlk];        // output block: c << 16 | nz, then the candidates
  uint32_t info[kMaxBlk];   // output block: 1 non-finite, 2 goes on
  int first[kMaxBlk];       // output block: its first slot, -1 none
  int used;                 // slots handed out
};

__device__ __forceinline__ const uint8_t* segOf(const Inputs& in, int k) {
  return in.packed + (size_t)k * in.stride;
}

/* Header flags of input k, -1 when the header does not match. */
__device__ __forceinline__ int inFlags(const Inputs& in, int k) {
  return headerFlags(segOf(in, k), in.count, in.bits, in.blockLog2, kMarkersFlag | kRotatedFlag);
}

/* 1 when a segment (flags fl) stores block b of len elements rotated: the
 * host's blockRotated. */
__device__ __forceinline__ bool storesRotated(const uint8_t* seg, int fl, size_t b, size_t len,
                                              int block) {
  if (fl < 0 || !(fl & ZPP_QUANT_FLAG_ROTATED) || len != (size_t)block) return false;
  const uint32_t sb = __float_as_uint(zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, b));
  return !(sb & 0x80000000u) && (sb & kExp) != kExp;
}

/* The tile's unnormalised Walsh-Hadamard transform, blocks of 2^bl, over
 * the blocks whose flag in `active` is set (an entry for every block of the
 * tile). Every thread calls it: the barriers are the CTA's. */
__device__ void tileHadamard(float* v, int bl, const uint8_t* active) {
  const int B = 1 << bl;
  for (int h = 1; h < B; h <<= 1) {
    __syncthreads();
    for (int p = (int)threadIdx.x; p < kTile / 2; p += kThreads) {
      const int j = ((p & ~(h - 1)) << 1) | (p & (h - 1));
      if (!active[j >> bl]) continue;
      const float a = v[j], b = v[j + h];
      v[j] = __fadd_rn(a, b);
      v[j + h] = __fsub_rn(a, b);
    }
  }
  __syncthreads();
}

/* v[i] = D (v[i] * 2^-L) for this thread's elements [i0, i1) of one block
 * (the inverse transform's last steps). */
__device__ __forceinline__ void scaleSigns(float* v, int i0, int i1, int bl) {
  const float invB = __uint_as_float((uint32_t)(127 - bl) << 23);
  for (int i = i0; i < i1; i++)
    v[i] = __uint_as_float(__float_as_uint(__fmul_rn(v[i], invB)) ^
                           zppRotSignMaskDev(i & ((1 << bl) - 1)));
}

/* Adds (add) or stores the escaped values of input k (header flags fl) that
 * fall in this thread's elements [i0, i1) of the group's tile v. */
__device__ __forceinline__ void inputEscapes(const Inputs& in, int k, int fl, size_t grp, size_t glen,
                                             int i0, int i1, bool add, float* v) {
  if (fl < 0) return;
  const uint8_t* table = segOf(in, k) + zppQuantEscOffset(in.count, in.bits, 1 << in.blockLog2) +
                         grp * ZPP_QUANT_ESC_TABLE_BYTES;
  for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
    const unsigned idx = zppQuantEscIndex(table, j);
    if (idx == ZPP_QUANT_ESC_EMPTY || idx >= glen) return;
    if (idx < (unsigned)i0 || idx >= (unsigned)i1) continue;
    const float e = zppQuantEscValue(table, j);
    v[idx] = add ? __fadd_rn(v[idx], e) : e;
  }
}

/* The sums of escape group grp into sm.x[0..glen), in `order`. With
 * direct (a requantization in the direct order into bits_out at out), the
 * blocks that qualify are quantized from r into out and their sums left
 * at +0 (sm.dir says which). */
__device__ void sumGroup(Smem& sm, const Inputs& in, int order, size_t grp, size_t glen, bool direct,
                         int bitsOut, uint8_t* out) {
  const int bl = in.blockLog2, B = 1 << bl;
  const size_t base = grp * ZPP_QUANT_ESC_GROUP;
  const int nbTile = kTile >> bl, nb = (int)((glen + (size_t)B - 1) >> bl);
  const size_t dataOff = zppQuantDataOffset(in.count, B);
  const int i0 = (int)threadIdx.x * kPer;
  const int i1 = (size_t)(i0 + kPer) < glen ? i0 + kPer : (int)(glen < (size_t)i0 ? i0 : glen);
  const int myB = i0 >> bl;
  const size_t gb = (base >> bl) + (size_t)myB;  // this thread's block in the segment

  // Which blocks take the rotated-domain order; which hold escapes.
  for (int b = (int)threadIdx.x; b < nbTile; b += kThreads) {
    const size_t len = b >= nb                                ? 0
                       : glen - ((size_t)b << bl) < (size_t)B ? glen - ((size_t)b << bl)
                                                              : B;
    bool all = b < nb && order != ZPP_QUANT_SUM_SIMPLE;
    for (int k = 0; k < in.n && all; k++)
      all = storesRotated(segOf(in, k), inFlags(in, k), (base >> bl) + (size_t)b, len, B);
    sm.rot[b] = all;
    sm.esc[b] = 0;
    sm.dir[b] = 0;
    sm.amax[b] = 0;
  }
  __syncthreads();
  if (direct)
    for (int k = (int)threadIdx.x; k < in.n; k += kThreads) {
      const int fl = inFlags(in, k);
      if (fl < 0) continue;
      const uint8_t* table =
          segOf(in, k) + zppQuantEscOffset(in.count, in.bits, B) + grp * ZPP_QUANT_ESC_TABLE_BYTES;
      for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
        const unsigned idx = zppQuantEscIndex(table, j);
        if (idx == ZPP_QUANT_ESC_EMPTY || idx >= glen) break;
        sm.esc[idx >> bl] = 1;  // the same value from any thread
      }
    }
  __syncthreads();

  // The rotated-domain sums r of this thread's elements.
  const bool mine = i0 < i1 && sm.rot[myB];
  if (mine) {
    float r[kPer];
    for (int k = 0; k < in.n; k++) {
      const uint8_t* seg = segOf(in, k);
      const float s = zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, gb);
      for (int i = 0; i < kPer; i++) {
        const float v =
            __fmul_rn(__int2float_rn(zppQuantGetQ(seg + dataOff, in.bits, base + i0 + i)), s);
        r[i] = __fadd_rn(k == 0 ? 0.0f : r[i], v);
      }
    }
    for (int i = 0; i < kPer; i++) sm.x[i0 + i] = r[i];
  }
  if (direct) {
    // The direct blocks: r quantized as the rotated encoder's w, if finite.
    const bool cand = mine && !sm.esc[myB];
    if (cand) {
      uint32_t m = 0;
      for (int i = i0; i < i1; i++) m = max(m, __float_as_uint(sm.x[i]) & 0x7fffffffu);
      atomicMax(&sm.amax[myB], m);
    }
    __syncthreads();
    if (cand && sm.amax[myB] < kExp) {
      const zppQuantBlockParams_t bp = zppQuantBlockSetup(sm.amax[myB], zppQuantQmax(bitsOut));
      if ((i0 & (B - 1)) == 0) zppQuantStoreScale(out + ZPP_QUANT_HEADER_BYTES, gb, bp.scale);
      zppQuantEncodeSpanRef(sm.x + i0, 0, (size_t)(i1 - i0), &bp, bitsOut,
                            out + zppQuantDataOffset(in.count, B), base + (size_t)i0);
      for (int i = i0; i < i1; i++) sm.x[i] = 0.0f;
    }
    __syncthreads();  // every thread has read amax
    for (int b = (int)threadIdx.x; b < nb; b += kThreads)
      sm.dir[b] = sm.rot[b] && !sm.esc[b] && sm.amax[b] < kExp;
    __syncthreads();
    for (int b = (int)threadIdx.x; b < nbTile; b += kThreads) sm.rot[b] = sm.rot[b] && !sm.dir[b];
  }
  // The inverse transform of r, then the escaped values in input order.
  tileHadamard(sm.x, bl, sm.rot);
  if (i0 < i1 && sm.rot[myB]) {
    scaleSigns(sm.x, i0, i1, bl);
    for (int k = 0; k < in.n; k++) inputEscapes(in, k, inFlags(in, k), grp, glen, i0, i1, true, sm.x);
  }

  // The simple order, input by input, for the blocks that take it.
  const bool simple = i0 < i1 && !sm.rot[myB] && !sm.dir[myB];
  if (!__syncthreads_or(simple)) return;
  const float qnan = __uint_as_float(ZPP_QUANT_NAN_BITS);
  for (int k = 0; k < in.n; k++) {
    const uint8_t* seg = segOf(in, k);
    const int fl = inFlags(in, k);
    for (int b = (int)threadIdx.x; b < nbTile; b += kThreads) {
      const size_t len = b >= nb                                ? 0
                         : glen - ((size_t)b << bl) < (size_t)B ? glen - ((size_t)b << bl)
                                                                : B;
      sm.kr[b] = b < nb && !sm.rot[b] && !sm.dir[b] &&
                 storesRotated(seg, fl, (base >> bl) + (size_t)b, len, B);
    }
    __syncthreads();
    const bool plainSeg = fl >= 0 && !(fl & ZPP_QUANT_FLAG_ROTATED);
    if (simple) {
      const float s = zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, gb);
      const float sa = __uint_as_float(__float_as_uint(s) & 0x7fffffffu);
      const uint8_t* data = seg + dataOff;
      for (int i = i0; i < i1; i++) {
        const int q = fl >= 0 ? zppQuantGetQ(data, in.bits, base + (size_t)i) : 0;
        float v;
        if (fl < 0)
          v = qnan;
        else if (plainSeg)
          v = s != s ? qnan : __fmul_rn(__int2float_rn(q), s);
        else if (sm.kr[myB])
          v = __fmul_rn(__int2float_rn(q), s);
        else
          v = q == -zppQuantQmax(in.bits) - 1 || zppQuantNonFinite(sa)
                  ? qnan
                  : __fmul_rn(__int2float_rn(q), sa);
        sm.y[i] = v;
      }
    }
    tileHadamard(sm.y, bl, sm.kr);
    if (simple) {
      if (sm.kr[myB]) scaleSigns(sm.y, i0, i1, bl);
      inputEscapes(in, k, fl, grp, glen, i0, i1, false, sm.y);
      if (plainSeg && (fl & ZPP_QUANT_FLAG_MARKERS))
        for (int i = i0; i < i1; i++)
          if (zppQuantIsMarker(seg + dataOff, in.bits, base + (size_t)i)) sm.y[i] = qnan;
      for (int i = i0; i < i1; i++) sm.x[i] = __fadd_rn(k == 0 ? 0.0f : sm.x[i], sm.y[i]);
    }
    __syncthreads();  // kr and y are written again for the next input
  }
}

/* zppDequantizeSumOrder: one CTA per escape group. */
__global__ void __launch_bounds__(kThreads)
    sumKernel(Inputs in, int order, float divisor, void* out, zppDataType_t dtype) {
  __shared__ Smem sm;
  const size_t grp = blockIdx.x, base = grp * ZPP_QUANT_ESC_GROUP;
  const size_t glen = in.count - base < (size_t)kTile ? in.count - base : (size_t)kTile;
  sumGroup(sm, in, order, grp, glen, false, 8, nullptr);
  for (size_t i = (size_t)threadIdx.x * kPer; i < (size_t)(threadIdx.x + 1) * kPer && i < glen; i++)
    zppQuantStoreOne(out, dtype, base + i, __fdiv_rn(sm.x[i], divisor));
}

/* Header and zero padding of the requantized segment (the markers flag is
 * OR-ed in by the groups' CTAs after this kernel). */
__global__ void __launch_bounds__(32)
    headerKernel(uint8_t* seg, size_t count, int bits, int blockLog2, bool rotated) {
  const unsigned t = threadIdx.x;
  const int block = 1 << blockLog2;
  if (t < 4) {
    const uint32_t w = t == 0   ? ZPP_QUANT_MAGIC
                       : t == 1 ? headerWord1(bits, blockLog2) | (rotated ? kRotatedFlag : 0u)
                       : t == 2 ? (uint32_t)(uint64_t)count
                                : (uint32_t)((uint64_t)count >> 32);
    reinterpret_cast<uint32_t*>(seg)[t] = w;
  }
  const size_t dataEnd = zppQuantDataOffset(count, block) + zppQuantDataBytes(count, bits);
  const size_t escOff = zppQuantEscOffset(count, bits, block);
  const size_t tablesEnd = escOff + ZPP_QUANT_ESC_TABLE_BYTES * zppQuantNumGroups(count);
  const size_t segEnd = (tablesEnd + 15) & ~(size_t)15;
  for (size_t at = dataEnd + t; at < escOff; at += 32) seg[at] = 0;
  for (size_t at = tablesEnd + t; at < segEnd; at += 32) seg[at] = 0;
}

/* zppQuantReduceRequantOrder: one CTA per escape group (of the inputs and
 * of the output alike), after headerKernel. */
__global__ void __launch_bounds__(kThreads)
    requantKernel(Inputs in, int order, int bitsOut, int blOut, unsigned flagsOut, uint8_t* out) {
  __shared__ Smem sm;
  const size_t grp = blockIdx.x, base = grp * ZPP_QUANT_ESC_GROUP;
  const size_t glen = in.count - base < (size_t)kTile ? in.count - base : (size_t)kTile;
  const bool rotate = (flagsOut & ZPP_QUANT_ROTATE) != 0;
  const bool direct = order == ZPP_QUANT_SUM_ROTATED_DIRECT && rotate && blOut == in.blockLog2;
  sumGroup(sm, in, order, grp, glen, direct, bitsOut, out);
  __syncthreads();  // x complete; dir final

  // zppQuantizeEx(x, fp32, glen, bitsOut, 2^blOut, flagsOut) for the group,
  // every block but the direct ones (whose x is +0: nothing escapes there).
  const int Bo = 1 << blOut, Q = zppQuantQmax(bitsOut), K = ZPP_QUANT_ESC_LOG2(bitsOut);
  const int nbTile = kTile >> blOut, nb = (int)((glen + (size_t)Bo - 1) >> blOut);
  const int i0 = (int)threadIdx.x * kPer;
  const int i1 = (size_t)(i0 + kPer) < glen ? i0 + kPer : (int)(glen < (size_t)i0 ? i0 : glen);
  const int myB = i0 >> blOut;
  const size_t gb = (base >> blOut) + (size_t)myB;
  uint8_t* scales = out + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = out + zppQuantDataOffset(in.count, Bo);
  uint8_t* table = out + zppQuantEscOffset(in.count, bitsOut, Bo) + grp * ZPP_QUANT_ESC_TABLE_BYTES;
  // (sm.dir is indexed by input blocks, which are the output blocks when
  // direct; otherwise it is all 0.)
  for (int b = (int)threadIdx.x; b < nbTile; b += kThreads) {
    sm.amax[b] = 0;
    sm.wmax[b] = 0;
    sm.stat[b] = 0;
    sm.info[b] = 0;
    sm.first[b] = -1;
    if (!direct) sm.dir[b] = 0;
  }
  __syncthreads();
  // Stage B of escapeKernel: which blocks may hold a candidate or a
  // non-finite element (exact; its comment has the proof).
  if (i0 < i1) {
    uint32_t mx = 0;
    bool nonfinite = false;
    for (int i = i0; i < i1; i++) {
      const uint32_t m = __float_as_uint(sm.x[i]) & 0x7fffffffu;
      if (m >= kExp)
        nonfinite = true;
      else
        mx = max(mx, m);
    }
    atomicMax(&sm.amax[myB], mx);
    if (nonfinite) atomicOr(&sm.info[myB], 1u);
  }
  __syncthreads();
  if (i0 < i1) {
    const double a = (double)__uint_as_float(sm.amax[myB]);
    int c = 0, nz = 0;
    for (int i = i0; i < i1; i++) {
      const uint32_t m = __float_as_uint(sm.x[i]) & 0x7fffffffu;
      if (m >= kExp) continue;
      nz += m != 0;
      c += (double)__uint_as_float(m) * (double)(1u << K) >= a;
    }
    if (c | nz) atomicAdd(&sm.stat[myB], (c << 16) | nz);
  }
  __syncthreads();
  // Stage C: the reference magnitude and the candidates of those blocks,
  // one thread per block (rare blocks only).
  for (int b = (int)threadIdx.x; b < nb; b += kThreads) {
    const size_t l0 = (size_t)b << blOut;
    const size_t len = glen - l0 < (size_t)Bo ? glen - l0 : (size_t)Bo;
    int nc = 0;
    if ((sm.info[b] & 1u) || zppQuantEscHasCandidate(sm.stat[b] >> 16, sm.stat[b] & 0xffff)) {
      const uint32_t r = zppQuantEscReference(sm.x + l0, len);
      for (size_t i = 0; i < len; i++) nc += zppQuantEscAbove(sm.x[l0 + i], r, K);
      sm.refr[b] = r;
      sm.info[b] |= 2u;
    }
    sm.stat[b] = nc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the slots, in block order (the overflow rule)
    int used = 0;
    for (int b = 0; b < nb; b++) {
      const int nc = sm.stat[b];
      if (nc > 0 && used + nc <= ZPP_QUANT_ESC_SLOTS) {
        sm.first[b] = used;
        used += nc;
      }
    }
    sm.used = used;
  }
  __syncthreads();
  // The blocks: ordinary ones in parallel, the others by the reference.
  if (i0 < i1 && !(sm.info[myB] & 2u) && !sm.dir[myB]) {
    const zppQuantBlockParams_t bp = zppQuantBlockSetup(sm.amax[myB], Q);
    if ((i0 & (Bo - 1)) == 0) zppQuantStoreScale(scales, gb, bp.scale);
    zppQuantEncodeSpanRef(sm.x + i0, 0, (size_t)(i1 - i0), &bp, bitsOut, data, base + (size_t)i0);
  }
  int marked = 0;
  for (int b = (int)threadIdx.x; b < nb; b += kThreads) {
    if (!(sm.info[b] & 2u)) continue;
    const size_t l0 = (size_t)b << blOut;
    const size_t len = glen - l0 < (size_t)Bo ? glen - l0 : (size_t)Bo;
    for (size_t i = 0; i < len; i++) sm.y[l0 + i] = sm.x[l0 + i];  // for the rotation
    marked |= zppQuantEscBlockRef(sm.x + l0, len, l0, base, bitsOut, Bo, sm.refr[b], sm.first[b],
                                  scales, data, table);
  }
  if (threadIdx.x >= (unsigned)sm.used && threadIdx.x < ZPP_QUANT_ESC_SLOTS)
    zppQuantEscStoreSlot(table, (int)threadIdx.x, 0.0f, ZPP_QUANT_ESC_EMPTY);
  if (marked) atomicOr(reinterpret_cast<unsigned*>(out + 4), kMarkersFlag);
  if (!rotate) return;  // no barrier follows
  __syncthreads();

  // Rotation: every full block without a non-finite element, as the
  // reference (quant_rotate.c's rotateGroup) decides it.
  for (int b = (int)threadIdx.x; b < nbTile; b += kThreads) {
    const size_t l0 = (size_t)b << blOut;
    const bool whole = b < nb && glen - l0 >= (size_t)Bo;
    sm.rotOut[b] = whole && !(sm.info[b] & 1u) && !sm.dir[b];
    if (b < nb && !sm.rotOut[b] && !sm.dir[b]) markPlainScale(scales, (base >> blOut) + (size_t)b);
  }
  __syncthreads();
  const bool mine = i0 < i1 && sm.rotOut[myB];
  if (mine && (sm.info[myB] & 2u))  // the block before zppQuantEscBlockRef, escaped elements +0
    for (int i = i0; i < i1; i++)
      sm.x[i] = sm.first[myB] >= 0 && zppQuantEscAbove(sm.y[i], sm.refr[myB], K) ? 0.0f : sm.y[i];
  if (mine)
    for (int i = i0; i < i1; i++)
      sm.x[i] = __uint_as_float(__float_as_uint(sm.x[i]) ^ zppRotSignMaskDev(i & (Bo - 1)));
  tileHadamard(sm.x, blOut, sm.rotOut);
  if (mine) {
    uint32_t m = 0;
    for (int i = i0; i < i1; i++) m = max(m, __float_as_uint(sm.x[i]) & 0x7fffffffu);
    atomicMax(&sm.wmax[myB], m);
  }
  __syncthreads();
  if (!mine) return;
  const bool first = (i0 & (Bo - 1)) == 0;
  if (sm.wmax[myB] >= kExp) {  // w not finite: the plain block stays
    if (first) markPlainScale(scales, gb);
    return;
  }
  const zppQuantBlockParams_t bp = zppQuantBlockSetup(sm.wmax[myB], Q);
  if (first) zppQuantStoreScale(scales, gb, bp.scale);
  zppQuantEncodeSpanRef(sm.x + i0, 0, (size_t)(i1 - i0), &bp, bitsOut, data, base + (size_t)i0);
}

zppResult_t checkInputs(const char* fn, const void* packed, size_t stride, int n, size_t count,
                        int bits, int block, int order) {
  QC_ARG(validParams(bits, block), "%s: invalid bits %d / block %d", fn, bits, block);
  QC_ARG(order == ZPP_QUANT_SUM_SIMPLE || order == ZPP_QUANT_SUM_ROTATED_DOMAIN ||
             order == ZPP_QUANT_SUM_ROTATED_DIRECT,
         "%s: order %d: expected ZPP_QUANT_SUM_SIMPLE, _ROTATED_DOMAIN or _ROTATED_DIRECT", fn, order);
  QC_ARG(n >= 1, "%s: n = %d inputs, need at least 1", fn, n);
  QC_ARG(packed != NULL, "%s: packed is NULL", fn);
  QC_ARG(aligned(packed, 4) && stride % 4 == 0, "%s: packed %p / stride %zu not 4-byte aligned", fn,
         packed, stride);
  const size_t seg = zppQuantPackedSize(count, bits, block);
  QC_ARG(seg != 0, "%s: count %zu too large", fn, count);
  QC_ARG(n <= 1 || stride >= seg, "%s: stride %zu smaller than a segment (%zu bytes)", fn, stride, seg);
  QC_ARG(zppQuantNumGroups(count) <= 0x7fffffffu, "%s: count %zu too large", fn, count);
  return zppSuccess;
}

}  // namespace rotred
}  // namespace

/* ---- the C API ------------------------------------------------------------ */

extern "C" zppResult_t zppDequantizeSumOrderCuda(const void* packed, size_t stride, int n, size_t count,
                                                 int bits, int block, float divisor, void* out,
                                                 zppDataType_t dtype, zppQuantSumOrder_t order,
                                                 cudaStream_t stream) {
  const char* fn = "zppDequantizeSumExCuda";
  const int dt = dtypeIndex(dtype);
  QC_ARG(dt >= 0, "%s: unsupported dtype %d", fn, (int)dtype);
  ZPPCHECK(rotred::checkInputs(fn, packed, stride, n, count, bits, block, (int)order));
  QC_ARG(count == 0 || out != NULL, "%s: out is NULL", fn);
  QC_ARG(aligned(out, elemSize(dt)), "%s: out %p misaligned", fn, out);
  QC_ARG(isfinite(divisor) && divisor != 0.0f, "%s: divisor %g must be finite and non-zero", fn,
         (double)divisor);
  if (count == 0) return zppSuccess;
  const rotred::Inputs in = {
      static_cast<const uint8_t*>(packed), stride, count, n, bits, blockLog2Of(block)};
  ZPP_CUDA_LAUNCH((rotred::sumKernel), (unsigned)zppQuantNumGroups(count), rotred::kThreads, stream, in,
                  (int)order, divisor, out, dtype);
  CUDALAUNCHCHECK("zpp rotated sum");
  return zppSuccess;
}

extern "C" zppResult_t zppQuantReduceRequantOrderCuda(const void* packed, size_t stride, int n,
                                                      size_t count, int bits_in, int block_in,
                                                      int bits_out, int block_out, unsigned flags_out,
                                                      zppQuantSumOrder_t order, void* packed_out,
                                                      cudaStream_t stream) {
  const char* fn = "zppQuantReduceRequantExCuda";
  ZPPCHECK(rotred::checkInputs(fn, packed, stride, n, count, bits_in, block_in, (int)order));
  QC_ARG(validParams(bits_out, block_out), "%s: invalid bits_out %d / block_out %d", fn, bits_out,
         block_out);
  QC_ARG((flags_out & ~(unsigned)ZPP_QUANT_ROTATE) == 0,
         "%s: flags_out 0x%x unknown (0 or ZPP_QUANT_ROTATE)", fn, flags_out);
  QC_ARG(packed_out != NULL, "%s: packed_out is NULL", fn);
  QC_ARG(aligned(packed_out, 4), "%s: packed_out %p not 4-byte aligned", fn, packed_out);
  {
    // CTAs write the output while others still read the inputs.
    const uintptr_t inLo = reinterpret_cast<uintptr_t>(packed);
    const uintptr_t inHi =
        inLo + (size_t)(n - 1) * stride + zppQuantPackedSize(count, bits_in, block_in);
    const uintptr_t outLo = reinterpret_cast<uintptr_t>(packed_out);
    const uintptr_t outHi = outLo + zppQuantPackedSize(count, bits_out, block_out);
    QC_ARG(!(outLo < inHi && inLo < outHi), "%s: packed_out overlaps the inputs", fn);
  }
  uint8_t* po = static_cast<uint8_t*>(packed_out);
  const int blOut = blockLog2Of(block_out);
  ZPP_CUDA_LAUNCH((rotred::headerKernel), 1u, 32, stream, po, count, bits_out, blOut,
                  (flags_out & ZPP_QUANT_ROTATE) != 0);
  CUDALAUNCHCHECK("zpp rotated reduce-requantize header");
  if (count == 0) return zppSuccess;
  const rotred::Inputs in = {
      static_cast<const uint8_t*>(packed), stride, count, n, bits_in, blockLog2Of(block_in)};
  ZPP_CUDA_LAUNCH((rotred::requantKernel), (unsigned)zppQuantNumGroups(count), rotred::kThreads, stream,
                  in, (int)order, bits_out, blOut, flags_out, po);
  CUDALAUNCHCHECK("zpp rotated reduce-requantize");
  return zppSuccess;
}

extern "C" zppResult_t zppDequantizeSumExCuda(const void* packed, size_t stride, int n, size_t count,
                                              int bits, int block, float divisor, void* out,
                                              zppDataType_t dtype, cudaStream_t stream) {
  return zppDequantizeSumOrderCuda(packed, stride, n, count, bits, block, divisor, out, dtype,
                                   ZPP_QUANT_SUM_QGZ, stream);
}

extern "C" zppResult_t zppQuantReduceRequantExCuda(const void* packed, size_t stride, int n,
                                                   size_t count, int bits_in, int block_in,
                                                   int bits_out, int block_out, unsigned flags_out,
                                                   void* packed_out, cudaStream_t stream) {
  return zppQuantReduceRequantOrderCuda(packed, stride, n, count, bits_in, block_in, bits_out,
                                        block_out, flags_out, ZPP_QUANT_SUM_QGZ, packed_out, stream);
}
