/*
 * Internal interface between the codec front end (quant_common.c: argument
 * checks, headers, padding, dispatch) and the CPU implementations
 * (quant_scalar.c, the reference; quant_avx2.c; quant_avx512.c). Kernels
 * receive validated arguments only: pointers non-NULL where count > 0, bits 2,
 * 4 or 8, block a power of two in [32, 4096], dtype fp32/fp16/bf16, headers
 * already checked.
 * They write the scales and data of a segment; the front end writes header
 * and padding.
 *
 * Tests and benchmarks reach a given implementation by name through
 * zppQuantImplGet / zppQuantImplSelect, to compare scalar against the
 * vector implementations.
 */
#ifndef ZPP_QUANT_IMPL_H_
#define ZPP_QUANT_IMPL_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant_kernels/zpp_quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "zpp's packed codec layout is little endian; big-endian hosts are not supported"
#endif

/* The helpers here and in quant_ref.h are static inline; under nvcc also
 * __host__ __device__, so that the CUDA codecs run the same reference code
 * (quant_cuda.cu's escape fix-ups) rather than a second copy. */
#if defined(__CUDACC__)
#define ZPP_QUANT_INL static __host__ __device__ __forceinline__
#else
#define ZPP_QUANT_INL static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char* name;

  /* Scales and data of one segment of `count` elements (header and padding
   * are the caller's). `packed` points at the segment start. `hints`: NULL,
   * or one byte per escape group (zppQuantNumGroups(count)), set to 0 when
   * every block of the group is known to have a finite scale and either a
   * zero scale or more than E non-zero q (then it has no candidate and no
   * non-finite element: zpp_quant.h, "Why 2^K"), else to 1. 1 is always
   * right: the escape pass then scans the group itself. */
  void (*quantize)(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                   uint8_t* packed, uint8_t* hints);

  /* Decode one segment into dtype. */
  void (*dequantize)(const uint8_t* packed, size_t count, int bits, int block, void* out,
                     zppDataType_t dtype);

  /* acc = (accumulate ? acc : 0) + y_0 + ... + y_{n-1}, inputs at packed + k * stride. */
  void (*accumulate)(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                     float* acc, int accumulate);

  /* (0 + y_0 + ... + y_{n-1}) / divisor, written as dtype. */
  void (*sum)(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
              float divisor, void* out, zppDataType_t dtype);

  /* The sum of n inputs quantized into one segment (scales and data).
   * hints: as quantize's, for the sums of the packed values (which are the
   * spec's sums wherever no input has an escape or a marker: the escape
   * pass redoes the other groups anyway). The vector codecs hint for int2
   * outputs and set 1 for the others. */
  void (*reduceRequant)(const uint8_t* packed, size_t stride, int n, size_t count, int bits_in,
                        int block_in, int bits_out, int block_out, uint8_t* packed_out, uint8_t* hints);

  /* Element-wise conversions with this implementation's vector code, so that
   * tests can check them exhaustively against zpp_half.h. */
  void (*toFloat)(const void* in, zppDataType_t dtype, size_t n, float* out);
  void (*fromFloat)(const float* in, size_t n, void* out, zppDataType_t dtype);

  /* Error feedback's steps (zppQuantAddResidual, zppQuantNewResidual;
   * zpp_quant.h, "error feedback's residuals"), bit-identical in every
   * implementation: the same IEEE operations per element, the int8 codec's
   * arithmetic per residual block. */
  void (*addResidual)(const void* in, zppDataType_t dtype, zppQuantResid_t e, size_t n, float* x);
  void (*newResidual)(const float* x, const float* y, zppQuantResid_t e, size_t n, zppQuantResid_t out);
} zppQuantImpl_t;

extern const zppQuantImpl_t zppQuantImplScalar;
#if defined(ZPP_QUANT_HAVE_AVX2)
extern const zppQuantImpl_t zppQuantImplAvx2;
#endif
#if defined(ZPP_QUANT_HAVE_AVX512)
/* fp16/bf16 quantize and dequantize, and the sums of int4 and int2 segments
 * (zppDequantizeSum, zppQuantReduceRequant), with AVX-512 (F, BW, VL, VBMI,
 * VBMI2, BF16); everything else is the AVX2 implementation's. */
extern const zppQuantImpl_t zppQuantImplAvx512;
#endif

/* The int2 escape hint (zpp_quant.h, "Why 2^K"). With Q = 1 few elements of
 * a block quantize to q != 0 (those above half its max), so "more than E
 * non-zero q" rarely holds and says little. The vector encoders count
 * instead, in a block with a finite non-zero scale, elements whose t =
 * (x p) inv has |t| >= ZPP_QUANT_INT2_WIDE_T = 2^-3 (1 + 2^-20) ("wide").
 * t = (x / a)(1 + d1)(1 + d2), |d| <= 2^-24, so a wide element has |x| 2^K
 * > a (K = 3): any count of wide elements is <= c of
 * zppQuantEscHasCandidate, which decreases in c, so E + 1 of them prove
 * that the block has no candidate. Quantizing a tensor, they count half of
 * each block's lanes (cheaper, and ordinary blocks have plenty); the fused
 * requantization counts all of them and the non-zero ones too, nz, for
 * zppQuantEscHasCandidate(wide, nz) = 0 also proves it when every non-zero
 * element is wide, as in sums of equal ternary inputs. */
#define ZPP_QUANT_INT2_WIDE_T 0x1.00001p-3f

/* Escapes (zpp_quant.h, "Escapes"), applied by the front end around every
 * CPU implementation, which itself encodes as if escapes did not exist:
 * after a quantize, zppQuantEscEncode re-encodes, with the reference code,
 * every escape group that may hold an escape (skipping without a scan the
 * groups whose hint, from the quantize, is 0; hints may be NULL); after a decode, the other
 * functions add the escaped values. quant_escape.c. */
void zppQuantEscEncode(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                       uint8_t* packed, const uint8_t* hints);
void zppQuantEscRequant(const uint8_t* packed, size_t stride, int n, size_t count, int bits_in,
                        int block_in, int bits_out, int block_out, uint8_t* packed_out,
                        const uint8_t* hints);
void zppQuantEscDequantize(const uint8_t* packed, size_t count, int bits, int block, void* out,
                           zppDataType_t dtype);
void zppQuantEscAccumulate(const uint8_t* packed, size_t stride, int n, size_t count, int bits,
                           int block, float* acc);
void zppQuantEscSum(const uint8_t* packed, size_t stride, int n, size_t count, int bits, int block,
                    float divisor, void* out, zppDataType_t dtype);

/* One escape group of a segment's scales, data and table; returns the
 * marker flag. For a group that a faster path cannot encode (the rotated
 * codec's). quant_escape.c. */
int zppQuantEscEncodeGroup(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                           uint8_t* packed, size_t g);

/* The rotated codec's reference for escape group g (quant_rotate.c): after
 * the plain encoding of the group (zppQuantEscEncodeGroup), re-encodes its
 * blocks that are rotated. */
void zppQuantRotateGroupRef(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                            uint8_t* packed, size_t g);

/* Decodes escape group g of a rotated-flag segment (blocks and escapes)
 * into out, at the group's own elements (out[g * 4096 ...]). quant_rotate.c. */
zppResult_t zppQuantDecodeGroupEx(const uint8_t* packed, size_t count, int bits, int block, size_t g,
                                  float* out);

/* zppQuantize's argument checks under the name fn, then the header and the
 * padding of the segment (nothing else): for encoders that write the
 * scales, data and tables themselves. quant_common.c. */
zppResult_t zppQuantFrame(const char* fn, const void* in, zppDataType_t dtype, size_t count, int bits,
                          int block, void* packed);

#if defined(ZPP_QUANT_HAVE_AVX2)
/* The AVX2 sums of rotated segments (quant_rotate_avx2.c), the AVX2 table's
 * entries (zppQuantRotImpl_t below), bit-identical to
 * quant_rotate_reduce.c's. */
/* The rotated-domain sums of block b (elements [lo, lo + len), len the
 * block size) of the n segments at packed + k * stride (each storing the
 * block rotated; data at dataOff), inverse transformed, into acc[0..len):
 * bit for bit quant_rotate_reduce.c's sums before the escapes are added. */
void zppQuantRotSumBlockAvx2(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits,
                             size_t b, size_t lo, size_t len, float* acc);
/* The same sums, for a block without escapes in any input, divided (div:
 * 0 not at all, 1 multiplied by divisor, the reciprocal of a power of two,
 * 2 divided by divisor) and stored as dtype at elements [lo, lo + len) of
 * out: bit for bit zppDequantizeSumOrder's. */
void zppQuantRotSumStoreAvx2(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits,
                             size_t b, size_t lo, size_t len, int div, float divisor, void* out,
                             zppDataType_t dtype);
/* The direct order's blocks of one escape group: for each block b0 + k
 * (k < nb, full blocks of `block`) with ok[k] set, the sums r as
 * zppQuantRotSumBlockAvx2 forms them, before any transform, quantized
 * straight into that block of an output segment (scales at scalesOut,
 * data at dataOut; bits_out, the same block size) as the rotated encoder
 * quantizes its w (zpp_quant.h, "Reductions of rotated segments"). ok[k]
 * is cleared, and nothing written, where some r is not finite. */
void zppQuantRotSumRequantGroupAvx2(const uint8_t* packed, size_t stride, int n, size_t dataOff,
                                    int bits, int block, size_t b0, size_t nb, int bits_out,
                                    uint8_t* scalesOut, uint8_t* dataOut, uint8_t* ok);
#endif

/* The rotated codec's vector kernels (zpp_quant.h, "Rotation"), one table
 * per instruction set, each bit-identical to quant_rotate.c's reference,
 * which runs where none is in use:
 * - encodeGroup writes escape group g (scales, data, an empty table) when
 *   every block of it is full, finite, has no candidate and a finite w,
 *   and returns 1; else returns 0 and the caller encodes the group with the
 *   reference;
 * - encodeGroupFeedback: the same for zppQuantizeExFeedback's groups of
 *   step 2 whose residual blocks are each rotated or zero (scale +0),
 *   writing also the group's run of out; else returns 0 and the caller
 *   takes quant_rotate_ef.c's reference, which writes the whole group
 *   again (a kernel may have written some of it: out never overlaps e);
 * - decodeBlock decodes a rotated block (scale s >= 0, finite; len = the
 *   block size) at elements [lo, lo + len) into out;
 * - decodeRun: decodeBlock over the blocks from element lo (a block start)
 *   while they are full and rotated (scale >= 0, finite); returns the
 *   element where it stopped;
 * - sumBlock, sumStore, sumRequantGroup: quant_rotate_reduce.c's sums, as
 *   zppQuantRotSumBlockAvx2 & co. below;
 * each for the bit widths in `widths` (segments of others take the
 * reference: zppQuantRotImplFor). */
typedef struct {
  const char* name;
  unsigned widths; /* the bit widths it implements: bit b set for int b */
  int (*encodeGroup)(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                     uint8_t* packed, size_t g);
  /* NULL where the table has none */
  int (*encodeGroupFeedback)(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                             zppQuantResid_t e, zppQuantResid_t out, uint8_t* packed, size_t g);
  void (*decodeBlock)(const uint8_t* data, int bits, size_t lo, size_t len, float s, void* out,
                      zppDataType_t dtype);
  size_t (*decodeRun)(const uint8_t* scales, const uint8_t* data, int bits, int block, size_t lo,
                      size_t count, void* out, zppDataType_t dtype);
  void (*sumBlock)(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits, size_t b,
                   size_t lo, size_t len, float* acc);
  void (*sumStore)(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits, size_t b,
                   size_t lo, size_t len, int div, float divisor, void* out, zppDataType_t dtype);
  void (*sumRequantGroup)(const uint8_t* packed, size_t stride, int n, size_t dataOff, int bits,
                          int block, size_t b0, size_t nb, int bits_out, uint8_t* scalesOut,
                          uint8_t* dataOut, uint8_t* ok);
} zppQuantRotImpl_t;

#if defined(ZPP_QUANT_HAVE_AVX2)
extern const zppQuantRotImpl_t zppQuantRotImplAvx2;
#endif
#if defined(ZPP_QUANT_HAVE_ROT_AVX512)
/* AVX-512 F, BW and DQ (quant_rotate_avx512.c): encode, decode and the sums.
 * Needs less than quant_avx512.c (no VBMI, VBMI2, BF16), so it also runs on
 * CPUs where the plain codecs are AVX2's. */
extern const zppQuantRotImpl_t zppQuantRotImplAvx512;
#endif

/* The rotated kernels in use, or NULL for the reference. They follow the
 * plain choice (ZPP_QUANT_IMPL, zppQuantImplSelect: scalar, avx2, avx512),
 * except that auto and avx512 take the AVX-512 table wherever the CPU runs
 * it, even where the plain codecs could not be AVX-512's. */
const zppQuantRotImpl_t* zppQuantRotImplActive(void);

/* The rotated kernels for segments of `bits`: zppQuantRotImplActive(), or
 * NULL (the reference, quant_rotate.c) where that table does not implement
 * the width (its `widths`). */
const zppQuantRotImpl_t* zppQuantRotImplFor(int bits);

/* 1 where the kernels rk (not NULL) implement segments of `bits`. */
ZPP_QUANT_INL int zppQuantRotImplHas(const zppQuantRotImpl_t* rk, int bits) {
  return (int)(rk->widths >> bits & 1u);
}

/* Makes `name` ("scalar", "avx2", "avx512") the rotated kernels in use,
 * whatever the plain codecs are, until the next zppQuantImplSelect (which
 * sets both). For tests and benchmarks, as zppQuantImplSelect;
 * zppInvalidArgument for an unknown name, zppInvalidUsage when this CPU or
 * build cannot run it. */
zppResult_t zppQuantRotImplSelect(const char* name);

/* The implementation called `name` ("scalar", "avx2", "avx512"), or NULL
 * when it is not built in or this CPU cannot run it. */
const zppQuantImpl_t* zppQuantImplGet(const char* name);

/* Makes `name` the implementation the public functions use, overriding
 * ZPP_QUANT_IMPL. For tests and benchmarks: not safe while other threads run
 * codecs. zppInvalidArgument for an unknown name, zppInvalidUsage when the
 * CPU cannot run it. */
zppResult_t zppQuantImplSelect(const char* name);

/* The implementation in use (chosen from ZPP_QUANT_IMPL and cpuid on first
 * call). */
const zppQuantImpl_t* zppQuantImplActive(void);

/* ---- layout helpers shared by the implementations -------------------------- */

ZPP_QUANT_INL size_t zppQuantNumBlocks(size_t count, int block) {
  return (count + (size_t)block - 1) / (size_t)block;
}

ZPP_QUANT_INL int zppQuantLog2(int block) {
  int l = 0;
  while ((1 << l) < block) l++;
  return l;
}

/* Scales start right after the header; data right after the scales. */
ZPP_QUANT_INL const uint8_t* zppQuantScalesPtr(const uint8_t* packed) {
  return packed + ZPP_QUANT_HEADER_BYTES;
}
ZPP_QUANT_INL size_t zppQuantDataOffset(size_t count, int block) {
  return ZPP_QUANT_HEADER_BYTES + 4 * zppQuantNumBlocks(count, block);
}

/* log2 of the elements one data byte holds: 0 (int8), 1 (int4), 2 (int2). */
ZPP_QUANT_INL int zppQuantPerByteLog2(int bits) { return bits == 8 ? 0 : bits == 4 ? 1 : 2; }

/* The data byte where element i starts, i a multiple of 8 / bits (every
 * block start is: blocks hold at least 32 elements). */
ZPP_QUANT_INL size_t zppQuantByteOf(size_t i, int bits) { return i >> zppQuantPerByteLog2(bits); }

/* Data bytes of `len` elements starting on a byte; the unused fields of the
 * last byte are 0. */
ZPP_QUANT_INL size_t zppQuantDataBytes(size_t len, int bits) {
  const int l = zppQuantPerByteLog2(bits);
  return (len + ((size_t)1 << l) - 1) >> l;
}

/* Escape tables start at the first multiple of 4 after the data, one per
 * group of ZPP_QUANT_ESC_GROUP elements (zpp_quant.h). */
ZPP_QUANT_INL size_t zppQuantNumGroups(size_t count) {
  return (count + ZPP_QUANT_ESC_GROUP - 1) / ZPP_QUANT_ESC_GROUP;
}
ZPP_QUANT_INL size_t zppQuantEscOffset(size_t count, int bits, int block) {
  size_t end = zppQuantDataOffset(count, block) + zppQuantDataBytes(count, bits);
  return (end + 3) & ~(size_t)3;
}

/* The rotated decode's scale cases, for a block of 2^L elements whose scale
 * has the bits sb (sign clear, finite). Folds: s 2^-L is normal and
 * B Q s < 2^119, so that 2^-L folds into s exactly and no value of the
 * transform overflows (quant_rotate_avx2.c's decodeSmallT says why the
 * result is the same). MayOverflow: B Q s >= 2^119, where a sum of the
 * transform may reach Inf and the decode takes the spec's subtraction. */
ZPP_QUANT_INL int zppQuantRotFolds(uint32_t sb, int L) {
  return sb >= (uint32_t)(L + 1) << 23 && sb < (uint32_t)(246 - L) << 23;
}
ZPP_QUANT_INL int zppQuantRotMayOverflow(uint32_t sb, int L) { return sb >= (uint32_t)(246 - L) << 23; }

/* Slot j of an escape table: value and group-relative index. */
ZPP_QUANT_INL float zppQuantEscValue(const uint8_t* table, int j) {
  float v;
  memcpy(&v, table + 4 * j, sizeof v);
  return v;
}
ZPP_QUANT_INL unsigned zppQuantEscIndex(const uint8_t* table, int j) {
  const uint8_t* p = table + 4 * ZPP_QUANT_ESC_SLOTS + 2 * j;
  return (unsigned)p[0] | ((unsigned)p[1] << 8);
}
ZPP_QUANT_INL void zppQuantEscStoreSlot(uint8_t* table, int j, float v, unsigned index) {
  memcpy(table + 4 * j, &v, sizeof v);
  uint8_t* p = table + 4 * ZPP_QUANT_ESC_SLOTS + 2 * j;
  p[0] = (uint8_t)index;
  p[1] = (uint8_t)(index >> 8);
}
/* An escape table with no escape (every slot empty). */
ZPP_QUANT_INL void zppQuantEscClearTable(uint8_t* table) {
  for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++)
    zppQuantEscStoreSlot(table, j, 0.0f, ZPP_QUANT_ESC_EMPTY);
}

/* Scales may sit at any 4-byte offset of a caller's buffer: access them
 * through memcpy, which compiles to one plain load or store. */
ZPP_QUANT_INL float zppQuantLoadScale(const uint8_t* scales, size_t b) {
  float s;
  memcpy(&s, scales + 4 * b, sizeof s);
  return s;
}
ZPP_QUANT_INL void zppQuantStoreScale(uint8_t* scales, size_t b, float s) {
  memcpy(scales + 4 * b, &s, sizeof s);
}

/* Q for a bit width: the symmetric clamp limit (zpp_quant.h: int2 is
 * ternary, q in {-1, 0, 1}). */
ZPP_QUANT_INL int zppQuantQmax(int bits) { return bits == 8 ? 127 : bits == 4 ? 7 : 1; }

/* Runs CALL(BITS, DT) with the bit width and the output type as constants,
 * one branch per pair, so that each always-inline kernel is compiled for the
 * nine pairs the codec has (the rotated vector files); the one copy of that
 * ladder. */
#define ZPP_QUANT_SPECIALIZE(bits, dtype, CALL) \
  do {                                          \
    if ((bits) == 8) {                          \
      ZPP_QUANT_SPECIALIZE_DT_(8, dtype, CALL); \
    } else if ((bits) == 4) {                   \
      ZPP_QUANT_SPECIALIZE_DT_(4, dtype, CALL); \
    } else {                                    \
      ZPP_QUANT_SPECIALIZE_DT_(2, dtype, CALL); \
    }                                           \
  } while (0)
#define ZPP_QUANT_SPECIALIZE_DT_(BITS, dtype, CALL) \
  do {                                              \
    if ((dtype) == zppFloat32) {                    \
      CALL(BITS, zppFloat32);                       \
    } else if ((dtype) == zppFloat16) {             \
      CALL(BITS, zppFloat16);                       \
    } else {                                        \
      CALL(BITS, zppBfloat16);                      \
    }                                               \
  } while (0)

/* Runs CALL(BI, BO) with an input and an output bit width as constants:
 * the nine pairs of a reduce-requantize (the rotated vector files). */
#define ZPP_QUANT_SPECIALIZE_WIDTHS(bits_in, bits_out, CALL) \
  do {                                                       \
    if ((bits_in) == 8) {                                    \
      ZPP_QUANT_SPECIALIZE_OUT_(8, bits_out, CALL);          \
    } else if ((bits_in) == 4) {                             \
      ZPP_QUANT_SPECIALIZE_OUT_(4, bits_out, CALL);          \
    } else {                                                 \
      ZPP_QUANT_SPECIALIZE_OUT_(2, bits_out, CALL);          \
    }                                                        \
  } while (0)
#define ZPP_QUANT_SPECIALIZE_OUT_(BI, bits_out, CALL) \
  do {                                                \
    if ((bits_out) == 8) {                            \
      CALL(BI, 8);                                    \
    } else if ((bits_out) == 4) {                     \
      CALL(BI, 4);                                    \
    } else {                                          \
      CALL(BI, 2);                                    \
    }                                                 \
  } while (0)

/* Chunk (elements) of fp32 scratch the reductions keep on the stack: small
 * enough for L1 beside the inputs, a multiple of every block size's
 * alignment (32) so chunks start on even elements (whole int4 bytes). */
#define ZPP_QUANT_CHUNK 2048

/* A fused reduce-requantize works in chunks of whole output blocks, at least
 * ZPP_QUANT_CHUNK elements, whose fp32 sums fit ZPP_QUANT_REDUCE_BUF floats. */
#define ZPP_QUANT_REDUCE_BUF \
  (ZPP_QUANT_CHUNK > ZPP_QUANT_MAX_BLOCK ? ZPP_QUANT_CHUNK : ZPP_QUANT_MAX_BLOCK)
ZPP_QUANT_INL size_t zppQuantReduceChunk(int block_out) {
  return (size_t)block_out > ZPP_QUANT_CHUNK ? (size_t)block_out : ZPP_QUANT_CHUNK;
}

#ifdef __cplusplus
}
#endif

#endif /* ZPP_QUANT_IMPL_H_ */
