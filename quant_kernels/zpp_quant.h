/*
 * Blocked symmetric quantization: the codecs every compressed collective
 * rests on. Internal API (not installed); no communication in here.
 *
 * ---------------------------------------------------------------------------
 * Packed segment: one contiguous buffer holding a header, the scales and the
 * quantized data of `count` elements, so one message carries all of it.
 *
 *   offset 0   header, 16 bytes, little endian:
 *                uint32 magic      ZPP_QUANT_MAGIC ("ZQP2": version 2, with escapes)
 *                uint8  bits       2, 4 or 8
 *                uint8  blockLog2  5..12 (block = 32..4096 elements)
 *                uint8  flags      bit 0: the segment holds markers (see
 *                                  "Escapes"); bit 1: rotated (see
 *                                  "Rotation"); the other bits 0
 *                uint8  reserved   0
 *                uint64 count      elements in the segment
 *   offset 16  scales: nblocks = ceil(count / block) fp32 values
 *   then       data: int8: count bytes; int4: ceil(count / 2) bytes; int2:
 *              ceil(count / 4) bytes
 *   then       zero padding up to a multiple of 4 bytes
 *   then       escape tables: ngroups = ceil(count / 4096), 48 bytes each
 *   then       zero padding up to a multiple of 16 bytes
 *
 * zppQuantPackedSize(count, bits, block) is that total. Segments laid end to
 * end therefore stay 16-byte aligned.
 *
 * int4 nibble order: element 2i in the low nibble (bits 0..3) of byte i,
 * element 2i+1 in the high nibble (bits 4..7), each a two's complement value
 * in [-7, 7]. Blocks are even-sized, so each block starts on a byte. With an
 * odd count the last high nibble is 0.
 *
 * int2 field order: element 4i + j in bits 2j..2j+1 of byte i (j = 0 in the
 * low bits), each a two's complement value in [-1, 1]: 0b00 = 0, 0b01 = 1,
 * 0b11 = -1; 0b10 (-2) is the marker. Blocks hold a multiple of 4 elements,
 * so each block starts on a byte. When count is not a multiple of 4 the
 * last byte's unused fields are 0. int2 is ternary (Q = 1): a symmetric
 * level set with an exact zero keeps every rule below (escaped elements
 * and zeros are q = 0, the marker is -(Q+1)); docs/codecs.md, "int2",
 * says why not the four levels two bits could hold.
 *
 * Escape table (one per group of ZPP_QUANT_ESC_GROUP = 4096 elements; group g
 * covers elements [4096 g, min(4096 (g + 1), count)), a whole number of
 * blocks): ZPP_QUANT_ESC_SLOTS = 8 slots,
 *   offset 0    8 fp32 values
 *   offset 32   8 uint16 indices, relative to the group's first element
 * Used slots come first, in increasing index order; an unused slot has index
 * 0xffff and value bits 0. A used slot carries one input element exactly
 * (an "escape"): see "Escapes" below.
 *
 * ---------------------------------------------------------------------------
 * Arithmetic. Every implementation (portable C, AVX2/F16C, CUDA) performs
 * exactly these IEEE fp32 operations, round-to-nearest-even, no fused
 * multiply-add, no flush-to-zero, so their outputs are bit-identical (NaN
 * payloads excepted: every NaN counts as equal).
 *
 * Inputs are converted to fp32 exactly (fp16 and bf16 widen without loss).
 * For each block, escapes are taken out first (below: such an element is
 * replaced by +0 for what follows). Then, for the elements x_i of the block
 * (the last block may be shorter):
 *   - (no block is non-finite any more: Inf and NaN are candidates, below.
 *     A NaN scale in a received segment still decodes to all NaN.)
 *   - a = max |x_i|. If a == 0: scale = 0, every q_i = 0 (decodes to +0.0).
 *   - otherwise, with Q = 127 (int8), 7 (int4) or 1 (int2) and p = 2^64 if a < 2^-64
 *     else 1 (keeps the reciprocal finite for tiny blocks; exact scaling):
 *       scale = a / Q
 *       inv   = Q / (a * p)
 *       q_i   = clamp(rne((x_i * p) * inv), -Q, Q)
 * Decoding: y_i = (float)q_i * scale, then rounded to the output type (RNE).
 * A NaN scale decodes to the canonical NaN of the output type.
 *
 * Error bound (tested; see docs/codecs.md for the derivation). For a finite
 * input x_i in a finite block with scale s, decoding to type T gives y with
 *   |y - x| <= s/2 + 2^-21 * Q * s + u_T * (|x| + s) + m_T + (Q + 1) * 2^-150
 * where u_T is T's unit roundoff (fp32 0, since decoding already rounds in
 * fp32 and is covered by the 2^-21 term; fp16 2^-11; bf16 2^-8) and m_T half
 * T's smallest subnormal (fp32 0; fp16 2^-25; bf16 2^-134). The first term is
 * the half step; the rest are the roundings of the float formats. The last
 * one is for scales in fp32's subnormal range (max |x| < Q * 2^-126: fp32 and
 * bf16 inputs only): such a scale is rounded to a multiple of 2^-149, an
 * absolute error of up to 2^-150 that |q| <= Q multiplies. (This term was
 * 2^-148 at first, which those blocks exceed: max |x| = 571 * 2^-149 in int8
 * gives scale 4 * 2^-149 and an error of 63 * 2^-149 at the max element.)
 * For int2 (Q = 1) this reads s/2 + 2^-21 s + u_T (|x| + s) + m_T + 2^-149,
 * with s = max |x| exactly (a / 1 is exact, also for subnormal a): the
 * error of a ternary block is up to half its largest element.
 * An element that escaped decodes to itself rounded to T: |y - x| <= u_T |x|
 * + m_T (exact for T = fp32, and for any T no narrower than the input's).
 * One finite input is outside the bound: fp32 +-FLT_MAX in int8 decodes to
 * +-Inf, because 127 * fl(FLT_MAX / 127) rounds past FLT_MAX. The bound also
 * assumes x is within T's range when T is narrower than the input type.
 *
 * ---------------------------------------------------------------------------
 * Escapes: one element never spoils its block. Before a block is
 * quantized, some of its elements are taken out (replaced by +0, so that the
 * scale fits the others; a block's scale is never NaN):
 *   - every non-finite element: its q becomes the marker -(Q+1) (int8 0x80,
 *     int4 nibble 0x8, int2 field 0b10, a value the codec never writes
 *     otherwise), which
 *     decodes to NaN, and the header's flag bit is set;
 *   - the candidates, when they all fit the group's table: let r be the
 *     block's reference magnitude, among its non-zero finite magnitudes
 *     the (E+1)-th largest, E = ZPP_QUANT_ESC_PER_BLOCK = 4, or the smallest
 *     when there are at most E + 1 of them, 0 when there are none. The
 *     candidates are the finite elements with |x| > 2^K * r, r > 0 (exact
 *     comparison; K = ZPP_QUANT_ESC_LOG2: 8 for int8, 5 for int4, 3 for int2;
 *     at most E
 *     of them). Zeros take no part in r: they quantize exactly at any scale,
 *     so a block with at most E + 1 non-zero elements measures its outliers
 *     against its smallest non-zero one (a lone non-zero element has no
 *     candidate). Blocks are visited in order; when the table still has a
 *     free slot for every candidate of a block, each takes the next slot
 *     (its fp32 value, its index): it "escapes";
 *   - otherwise (an "escape overflow", counted) the candidates stay in the
 *     block and set its scale like any element: every element of the block
 *     keeps the error bound above, and none is saturated or altered.
 * Decoding: the packed value of an escaped element is 0 (q = 0, finite
 * scale); a plain decode gives the escaped value itself (rounded to the
 * output type); a marker decodes to the canonical NaN. Every sum below adds
 * the escaped values after the packed values: sum_i = S_i + e_{k1,i} +
 * e_{k2,i} + ... in input order k1 < k2, S_i being the sum of the packed
 * values (NaN where any input has a marker at i).
 * Why 2^K: a candidate exceeds 2^K times every element outside the top E
 * (or every element but itself and the other candidates, in a block of at
 * most E + 1 non-zero ones), and those quantize to q = 0 (Q * 2^-K < 1/2:
 * 127/256, 7/32, 1/8);
 * so a block quantized with the scale max |x| / Q of all its elements that
 * has more than E non-zero q and a finite scale has neither a candidate nor
 * a non-finite element, and implementations may skip the exact test for
 * such blocks. (A block's final encoding says less: a marker is a non-zero
 * q. The rotated encoder needs no such test: which elements escaped is in
 * the table, and a block with a non-finite element is stored plain.)
 *
 * ---------------------------------------------------------------------------
 * Rotation (zppQuantizeEx with ZPP_QUANT_ROTATE; flags bit 1). A block of
 * B = 2^L elements is quantized as w = H D x' instead of x, where
 *   - x' is the block with its escaped elements replaced by +0 (escapes are
 *     chosen on the unrotated block, by the rules of "Escapes": rotation
 *     would spread an outlier over the whole block);
 *   - D = diag(d), d_i = -1 where bit (i mod 64) of word floor(i / 64) is
 *     set, word k being splitmix64's output for state ZPP_QUANT_ROT_SEED +
 *     (k + 1) * 0x9e3779b97f4a7c15 (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9;
 *     z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31). The same for
 *     every block and rank: nothing is sent. Applying d flips sign bits
 *     (exact);
 *   - H the unnormalised Walsh-Hadamard transform, in place, stages h = 1,
 *     2, 4, ..., B/2; in stage h every pair (j, j + h) with (j & h) == 0
 *     becomes (x_j + x_{j+h}, x_j - x_{j+h}), each one fp32 add or subtract
 *     of that stage's inputs. (Within a stage the pairs are independent, so
 *     any vector order gives the same bits; each element sees the stages in
 *     this order, so the first stages may run per group of 8 or 16 in
 *     registers before the later ones run across the block.)
 * w is then quantized exactly as a plain block (scale = max |w| / Q, ...).
 * Decoding: v_i = (float)q_i * s; v = H v (the same stages); v_i = v_i *
 * 2^-L (fp32 multiply); y_i = d_i v_i; then rounded to the output type.
 * An escaped element decodes to its escaped value (it replaces y_i).
 * Blocks stored unrotated: a block holding a non-finite element (it keeps
 * the plain codec's markers, so Inf and NaN stay in their own element), the
 * short last block (len < B), and a block whose rotated w is not finite
 * (|x| near FLT_MAX). Such a block is the plain codec's block, with the
 * sign bit of its scale set (plain scales are never negative); its decode
 * uses |s|. Candidates that overflowed the table stay in their block and
 * are rotated with it.
 * The header flag bit 1 says "rotated"; zppDequantizeEx decodes both kinds.
 * The other decoders and the reductions above refuse a rotated segment
 * (header check: "flags ... expected 0 or 0x0001"); the Ex reductions
 * below take both kinds (in the simple order or in the rotated domain).
 * The vector implementations use quant_rotate_avx2.c and
 * quant_rotate_avx512.c (bit-identical), the scalar one the reference in
 * quant_rotate.c; the CUDA codecs quant_rotate_cuda.cu (zppQuantizeExCuda,
 * zppDequantizeExCuda) and quant_rotate_reduce_cuda.cu (zppDequantizeSumExCuda,
 * zppQuantReduceRequantExCuda: the reductions below).
 * Escape counts are those of the plain encoding (the same selection).
 *
 * Error bound of a rotated block (tested): for a finite, non-escaped input
 * x_i, with s the block's scale, M = max |x'|, decoding to T,
 *   |y - x| <= E + u_T * (|x| + E) + m_T,
 *   E = s/2 + 2^-21 * Q * s + 2^-22 * B * M + 2^-23 * L * Q * s
 *       + (Q + 3) * 2^-150.
 * Why: (1/B) D H is the exact inverse and maps a rotated-domain error of at
 * most e per element to at most e per element (each row: B terms of 1/B).
 * Quantization gives s/2 + 2^-21 Q s per element as in the plain bound.
 * The stages S_k commute and S_k^2 = 2I, so an error vector n introduced
 * by forward stage k reaches y as 2^-k S_k...S_1 n, at most max |n| <=
 * 2^-24 * 2^k * M (1 + 2^-24)^k per element: summed over k, below 2^-22 B M.
 * Inverse stage k rounds values of at most 2^k Q s (1 + 2^-24)^k; the later
 * stages and 2^-L give that error times 2^(L-k) / B: L terms of at most
 * 2^-24 Q s (1 + 2^-20). The subnormal roundings of q * s and * 2^-L add
 * at most 2^-149 beside the (Q + 1) 2^-150 of the plain bound.
 *
 * ---------------------------------------------------------------------------
 * Reductions. Several packed inputs with the same count, bits and block:
 *   sum_i = ((((0 + y_{0,i}) + y_{1,i}) + ...) + y_{n-1,i}) + e_{k1,i} + ...
 * in fp32, in input order, y being the fp32 packed values (0 where the
 * element escaped) and e the escaped values (before any type rounding).
 * Against the exact sum S_i of those m_i = n + (escapes at i) terms t, the
 * fused requantized result r_i (bits_out, block_out, scale s_out) satisfies
 *   |r_i - S_i| <= s_out/2 + 2^-21 * Q_out * s_out + (m_i-1) * 2^-24 * sum |t|
 *                  + (Q_out + 1) * 2^-150
 * and, when the sum itself escapes in the output, |r_i - S_i| <=
 * (m_i-1) * 2^-24 * sum |t| (the requantization is exact),
 * as long as the fp32 sum is finite (a sum that overflows is an Inf, which
 * escapes or is marked like any non-finite element).
 *
 * ---------------------------------------------------------------------------
 * Reductions of rotated segments (zppDequantizeSumOrder and
 * zppQuantReduceRequantOrder; zppDequantizeSumEx and zppQuantReduceRequantEx
 * are these in the order qgZ uses, ZPP_QUANT_SUM_QGZ; quant_rotate_reduce.c).
 * Inputs of either kind, rotated or plain, with the same count, bits and
 * block. No call allocates: the sums are formed one escape group (4096
 * elements) at a time in an fp32 tile on the stack, which changes no bit.
 * Two orders of the sums, per block, and a third for requantizing them:
 *   - the simple order (ZPP_QUANT_SUM_SIMPLE; every block in it, and in
 *     either order every block that some input stores unrotated: a plain
 *     segment, a short last block, a block with its scale's sign set, or a
 *     non-finite scale). Each input k's block is decoded as zppDequantizeEx
 *     does (inverse transform, signs, escaped values in their elements,
 *     markers as NaN): y_{k,i}. Then
 *       sum_i = ((((0 + y_{0,i}) + y_{1,i}) + ...) + y_{n-1,i})
 *     in fp32, in input order (the escaped values are inside the y).
 *   - the rotated-domain order (ZPP_QUANT_SUM_ROTATED_DOMAIN, for a block of
 *     B = 2^L elements that every input stores rotated). With v_{k,j} =
 *     (float)q_{k,j} * s_k (one fp32 multiply, the decoder's first step),
 *       r_j = ((((0 + v_{0,j}) + v_{1,j}) + ...) + v_{n-1,j})  in fp32,
 *       z = D ((H r) * 2^-L)   (the decoder's stages, multiply, signs, once),
 *       sum_i = ((z_i + e_{k1,i}) + e_{k2,i}) + ...
 *     the escaped values of element i added last, in input order k1 < k2
 *     (each input has at most one slot per element). An input's rotated
 *     block holds quantization noise at its escaped elements (they were +0
 *     when rotated): here that noise stays in z_i; the simple order
 *     replaces it by the escaped value.
 *   - the direct order (ZPP_QUANT_SUM_ROTATED_DIRECT; it changes only the
 *     requantization: zppDequantizeSumOrder sums as in the rotated-domain
 *     order). zppQuantReduceRequantOrder with block_out == block and
 *     flags_out ZPP_QUANT_ROTATE takes a block "direct" when every input
 *     stores it rotated (full, scale sign clear, finite), no input has an
 *     escape in it and every r_j above is finite. Its output block is r
 *     itself as the rotated encoder's w: a = max |r_j|, then the plain
 *     block's rules with bits_out (scale = a / Q, p, inv = Q / (a p),
 *     q_j = clamp(rne((r_j p) inv), -Q, Q)), stored rotated (scale sign
 *     clear), with no escape and no marker: the inverse of r and the
 *     encoder's forward transform of z are not run (H D D H r / B = r in
 *     exact arithmetic). Every other block (all of them when block_out !=
 *     block or flags_out is 0) is the rotated-domain order's: the sums z_i
 *     with their escapes added, encoded by zppQuantizeEx's rules (escape
 *     selection on the unrotated sums, such blocks stored plain, markers).
 *     Per escape group: the group's sums with every direct block's set to
 *     +0 are quantized as zppQuantizeEx would (flags_out), then each direct
 *     block's scale and data replace what that wrote for it. A +0 block
 *     has no candidate (its r is 0) and no non-finite element, so the
 *     group's escape table (its slots, their order), its
 *     markers, the header's marker flag and the escape counts are those of
 *     the fallback blocks alone: the group is well-formed, every slot
 *     pointing into a fallback block, and a direct block decodes as any
 *     rotated block without escapes. Outliers and "w not finite": a
 *     direct block has no candidates and none are looked for (an outlier
 *     in its sum can only come from cancellation, since no input had a
 *     candidate there; it stays in the block and is rotated with it); its
 *     w = r is finite by the condition, and a block
 *     whose r overflows falls back, its Inf or NaN sums marked as before.
 * zppDequantizeSumOrder stores sum_i / divisor (one fp32 division) rounded
 * to the output type; zppQuantReduceRequantOrder quantizes the fp32 sums as
 * zppQuantizeEx would with flags_out (rotated again with ZPP_QUANT_ROTATE),
 * byte for byte. A NaN or Inf input stays NaN in its element (its block is
 * stored plain: markers, then a NaN sum, which the requantization marks
 * again).
 * Bounds (tested; u = 2^-24, gamma_m = m u / (1 - m u)).
 *   Simple order, against the exact sum S_i of the y_{k,i}:
 *     |sum_i - S_i| <= gamma_{n-1} * sum_k |y_{k,i}|   (0 + y_0 is exact),
 *   each y_{k,i} within its own segment's bound of its input (the rotated
 *   bound E of its block, the plain bound for a block stored plain, exact
 *   for an escape).
 *   Rotated-domain order, against T_i = sum_k Y_{k,i} + sum_k e_{k,i}, Y_k
 *   = (1/B) D H v_k the exact inverse of input k's rotated values (each
 *   within E' of its input x'_k, E' being E without its inverse term
 *   2^-23 L Q s: one inverse of the sum replaces the n inverses), with
 *   A = (1/B) sum_j sum_k |v_{k,j}| (the block's mean), R = max_j |r_j|
 *   and m_i the escapes at i:
 *     |sum_i - T_i| <= (1 + gamma_{m_i}) * F + gamma_{m_i} * (|z_i| + sum_k |e_{k,i}|),
 *     F = gamma_{n-1} * A + 2^-24 * L * R * (1 + 2^-20) + 2^-150.
 *   Why: the error of r_j (at most gamma_{n-1} sum_k |v_{k,j}|) reaches z_i
 *   through the exact inverse, a row of B terms of 1/B: at most the block's
 *   mean. The inverse's roundings are those of the rotated bound with R in
 *   place of Q s (stage k rounds values of at most 2^k R (1 + u)^k, the
 *   later stages and 2^-L scale by 2^(L-k)/B); the multiply by 2^-L may
 *   round a subnormal by 2^-150; the escape additions are a sum of m_i + 1
 *   terms.
 *   Either way the requantized output adds the bound of its own block for
 *   the fp32 sums as input (rotated: E with M the block's largest
 *   non-escaped |sum|), except a direct block of the direct order:
 *   Direct order, a direct block, against T_i = sum_k Y_{k,i} (no escapes
 *   there), with Y_out = (1/B) D H (q s) the exact inverse of the output
 *   block (scale s, Q of bits_out) and A as above:
 *     |Y_out,i - T_i| <= gamma_{n-1} * A + s/2 + 2^-21 * Q * s
 *                        + (Q + 1) * 2^-150.
 *   Why: r_j is within gamma_{n-1} sum_k |v_{k,j}| of sum_k v_{k,j}, which
 *   the exact inverse turns into at most the block's mean; quantizing r_j
 *   is a plain block's quantization, within s/2 + 2^-21 Q s + (Q + 1)
 *   2^-150 of r_j per element (the plain bound without its decode
 *   rounding), and (1/B) D H maps a per-element error e to at most e per
 *   element (rows of B terms of 1/B). Decoding the output adds, as for any
 *   rotated block, the inverse's 2^-23 L Q s and 2^-149 (and the output
 *   type's rounding). Beside the rotated-domain order's F plus the
 *   output's E, the inverse of r (2^-24 L R (1 + 2^-20) + 2^-150) and the
 *   forward transform (2^-22 B M) are gone.
 *   Which order qgZ uses, and the measured errors of all three on whole
 *   qgZ calls: docs/codecs.md, "Reductions of rotated segments".
 *
 * ---------------------------------------------------------------------------
 * Tensor-slice reordering (qgZ). The input holds W partitions (partition p is
 * the part of the reduce-scatter that rank p owns), with W = N * L for N nodes
 * of L ranks numbered in blocks: rank p = node (p / L), local rank (p % L).
 * The intra-node all-to-all sends partition p to local rank p % L. The output
 * is W packed segments of equal size, segment k = j * N + n holding partition
 * p = n * L + j: all partitions for local rank 0 first (nodes in order), then
 * those for local rank 1, and so on. Local rank j's send region is thus the
 * contiguous segments [j*N, (j+1)*N). Ranks placed on nodes in turn (node
 * p % N, local rank p / N) need no reordering: local_size 1 copies the
 * partitions in order. Other placements are the caller's to map (the
 * collectives go through the topology, collectives/qgz.c).
 *
 * Packed pointers are host pointers for the CPU functions, at any alignment;
 * element buffers (in, out, acc) need their type's alignment. Strided inputs
 * (`packed + k * stride` for k < n) match the receive buffers of an
 * all-to-all, where each peer's segments land at a fixed stride.
 */
#ifndef ZPP_QUANT_H_
#define ZPP_QUANT_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZPP_QUANT_MAGIC 0x3250515au /* "ZQP2" as little-endian bytes */
#define ZPP_QUANT_HEADER_BYTES 16

/* Escapes (see above). */
#define ZPP_QUANT_ESC_GROUP 4096
#define ZPP_QUANT_ESC_SLOTS 8
#define ZPP_QUANT_ESC_TABLE_BYTES (ZPP_QUANT_ESC_SLOTS * 6)
#define ZPP_QUANT_ESC_PER_BLOCK 4
#define ZPP_QUANT_ESC_EMPTY 0xffffu
#define ZPP_QUANT_ESC_LOG2(bits) ((bits) == 8 ? 8 : (bits) == 4 ? 5 : 3)
#define ZPP_QUANT_FLAG_MARKERS 0x01
#define ZPP_QUANT_FLAG_ROTATED 0x02
/* Rotation (see above): the zppQuantizeEx flag and the sign sequence's seed. */
#define ZPP_QUANT_ROTATE 1u
#define ZPP_QUANT_ROT_SEED 0x7a70705f726f7431ull /* "zpp_rot1" */
#define ZPP_QUANT_MIN_BLOCK 32
#define ZPP_QUANT_MAX_BLOCK 4096

/* Default block sizes: picked from measured error against wire overhead,
 * see the table in docs/codecs.md ("Choosing the block size"), printed by
 * build/bin/zpp-quant-error-table. */
#define ZPP_QUANT_DEFAULT_BLOCK_INT8 256
#define ZPP_QUANT_DEFAULT_BLOCK_INT4 64
#define ZPP_QUANT_DEFAULT_BLOCK_INT2 256
/* The default block of a bit width (8, 4 or 2); 0 for another. */
int zppQuantDefaultBlock(int bits);

typedef struct {
  uint32_t magic;
  uint8_t bits;
  uint8_t blockLog2;
  uint16_t reserved;
  uint64_t count;
} zppQuantHeader_t;

/* Bytes of one packed segment; 0 for invalid bits/block. */
size_t zppQuantPackedSize(size_t count, int bits, int block);

/* 1 if bits is 2, 4 or 8 and block a power of two in [32, 4096]. */
int zppQuantValidParams(int bits, int block);

/* Reads and validates a segment header against what the caller expects
 * (count, bits, block): a mismatch is zppInvalidUsage with a logged reason,
 * which is how mismatched compression settings across ranks are caught. */
zppResult_t zppQuantCheckHeader(const void* packed, size_t count, int bits, int block);

/* Quantize `count` elements of dtype (fp32, fp16, bf16) into one segment. */
zppResult_t zppQuantize(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                        void* packed);

/* zppQuantize with options: flags 0 or ZPP_QUANT_ROTATE (see "Rotation"). */
zppResult_t zppQuantizeEx(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                          unsigned flags, void* packed);

/* ---- error feedback's residuals ---------------------------------------------------
 * qgZ keeps what its quantizations dropped (docs/zeropp.md, "Error feedback")
 * in 8 bits: blocks of ZPP_QUANT_RESID_BLOCK = 32 elements, each one fp32
 * scale and 32 int8 values, by the int8 codec's arithmetic ("Arithmetic"
 * above, Q = 127, no escapes: a residual is always finite). A residual of n
 * elements is q[0..n) and scale[0..ceil(n / 32)); the run from element `at`
 * (a multiple of 32) is zppQuantResidAt(r, at). The stored value of element i
 * is (float)q[i] * scale[i / 32]; storing r costs at most half a step,
 * max |r| of its block / 254 (plus the codec's roundings): 1.125 bytes an
 * element instead of fp32's 4, a quarter of the memory traffic.
 *
 * Error feedback's steps, with the active implementation's vector code:
 * zppQuantAddResidual: x = in + e, in of dtype converted exactly, e the
 *   stored residual (one fp32 multiply and one add per element);
 * zppQuantNewResidual: out = x - y (y the decoded x), stored in 8 bits,
 *   except where x - y is not finite (x was, and travels as its escape; or
 *   its decode overflowed): there out keeps e's stored value.
 * x and y may not overlap; out may be e (in place), and in may be x (fp32:
 * adds in place). n and the runs' starts: as above. */
#define ZPP_QUANT_RESID_BLOCK 32
typedef struct {
  int8_t* q;
  float* scale;
} zppQuantResid_t;

static inline zppQuantResid_t zppQuantResidAt(zppQuantResid_t r, size_t at) {
  zppQuantResid_t run = {r.q + at, r.scale + at / ZPP_QUANT_RESID_BLOCK};
  return run;
}

/* Bytes of the scales of a residual of n elements. */
static inline size_t zppQuantResidScaleBytes(size_t n) {
  return (n + ZPP_QUANT_RESID_BLOCK - 1) / ZPP_QUANT_RESID_BLOCK * sizeof(float);
}

/* Bytes of a residual of n elements stored as one buffer: its scales, then
 * its values (zppQuantResidIn). */
static inline size_t zppQuantResidBytes(size_t n) { return zppQuantResidScaleBytes(n) + n; }

/* The residual of n elements in a buffer of zppQuantResidBytes(n). */
static inline zppQuantResid_t zppQuantResidIn(void* buf, size_t n) {
  zppQuantResid_t r = {(int8_t*)buf + zppQuantResidScaleBytes(n), (float*)buf};
  return r;
}

void zppQuantAddResidual(const void* in, zppDataType_t dtype, zppQuantResid_t e, size_t n, float* x);
void zppQuantNewResidual(const float* x, const float* y, zppQuantResid_t e, size_t n,
                         zppQuantResid_t out);

/* ---- error feedback in the rotated domain ------------------------------------------
 * zppQuantizeExFeedback: qgZ's sender step with ZPP_QUANT_ROTATE, the
 * residual added after the rotation and kept there, so that nothing is
 * decoded or rotated back (docs/zeropp.md, "Error feedback"). The rotation
 * R = H D is orthogonal up to its factor B: what a rotated block's
 * quantization drops from x, x - D(Q(R x)), is R^-1 (z - Q(z)) for z = R x,
 * so keeping z - Q(z) and adding it to the next step's R g carries the same
 * error as adding R^-1 of it to g first.
 *
 * Domains: a residual block of 32 whose scale has its sign bit set holds
 * rotated-domain values (of the codec block of `block` elements that
 * contains it, counted from the run's start); otherwise it holds values of
 * the elements themselves. The stored value is q * |scale| either way.
 * zppQuantAddResidual and zppQuantNewResidual read and write the latter
 * kind only.
 *
 * Per escape group of in (g, count elements of dtype, converted exactly):
 *   1. x^_i = g_i where element i's residual block is rotated, else
 *      g_i + e_i (zppQuantAddResidual's arithmetic);
 *   2. the group is encoded in the rotated domain when every block is full
 *      (B = `block` elements), every x^_i finite, no block has a candidate
 *      for escape ("Escapes", on x^), and every z is finite, z being per
 *      block H D x^ (as "Rotation") plus, at the elements whose residual is
 *      rotated, e_i (one fp32 add after the stages). Then each block is
 *      quantized from z as the rotated encoder quantizes its w (scale
 *      max |z| / Q, q, sign clear; the group's table empty), and its new
 *      residual is r_i = z_i - (float)q_i * s (an fp32 multiply, then a
 *      subtract: exactly the decode's first step), stored in 8 bits with
 *      each scale's sign bit set: where the block's max |z| >= 2^-64, every
 *      residual block of it takes scale s / 254 and q = rne(r_i * (254 /
 *      s)) (two fp32 divisions per block, one multiply per element; |r_i|
 *      <= s/2 (1 + 2^-22), so |q| <= 127 without a clamp), the step the
 *      quantizer's own s fixes, so that nothing waits on a maximum of r;
 *      below 2^-64, by the int8 block step as above;
 *   3. otherwise the group is zppQuantizeEx's encoding of x = g + u, u being
 *      e in the original domain: per full block u = o + D H v * 2^-log2(B)
 *      (the decoder's arithmetic, then one fp32 add), o_i = e_i where i's
 *      residual is not rotated, else 0, and v_i = e_i where it is, else 0
 *      (in a short block u = e: nothing there is rotated); its new residual
 *      is zppQuantNewResidual's x - y, u_i where that is not finite, stored
 *      with the sign bits clear.
 * A NaN or Inf in g therefore travels in its own element (step 3's plain
 * block and marker) and the residual's values wait, in the original
 * domain, for the next step.
 * The packed segment is one any rotated decoder reads. scratch: 2 * count
 * floats (step 3's x and decode); e and out as in zppQuantNewResidual (runs
 * from a multiple of 32), out not overlapping e. The vector kernels encode
 * the step-2 groups whose residual blocks are each rotated or zero (scale
 * +0; AVX2: blocks of 64 and up); the others, and every group with the
 * scalar kernels, take the reference (quant_rotate_ef.c): the same bits. */
zppResult_t zppQuantizeExFeedback(const void* in, zppDataType_t dtype, size_t count, int bits,
                                  int block, zppQuantResid_t e, zppQuantResid_t out, void* packed,
                                  float* scratch);

/* The residual run r of n elements back in the original domain, in place:
 * every full block of `block` elements from its start whose values are
 * rotated (step 3's u, stored again in 8 bits with the sign bits clear).
 * For a residual kept with another block size or without rotation
 * (zppGradLoadState). */
void zppQuantResidUnrotate(zppQuantResid_t r, size_t n, int block);

/* Decodes a segment of either kind, rotated or not (header flag bit 1). */
zppResult_t zppDequantizeEx(const void* packed, size_t count, int bits, int block, void* out,
                            zppDataType_t dtype);

/* Rotation internals, for the tests and the vector codes: the sign mask
 * (0 or 0x80000000) of element i of a block, and the in-place fp32
 * Walsh-Hadamard transform of len = 2^L elements in the documented order. */
uint32_t zppQuantRotSignMask(size_t i);
/* The masks of a whole 4096 block, zppQuantRotSignMask(i) at [i], filled once. */
const uint32_t* zppQuantRotSignMasks(void);
void zppQuantRotHadamardRef(float* x, size_t len);

/* Decode one segment into `count` elements of dtype. */
zppResult_t zppDequantize(const void* packed, size_t count, int bits, int block, void* out,
                          zppDataType_t dtype);

/* acc[i] = (accumulate ? acc[i] : 0) + y_{0,i} + ... + y_{n-1,i} in fp32, the
 * inputs being packed + k * stride for k < n. */
zppResult_t zppDequantizeAccumulate(const void* packed, size_t stride, int n, size_t count, int bits,
                                    int block, float* acc, int accumulate);

/* Sum n inputs (as above), divide by `divisor` in fp32 (1 for sum, the world
 * size for avg: a division, not a multiply by a rounded reciprocal, so that
 * avg is exactly sum / world size) and write in dtype: the last step of qgZ. */
zppResult_t zppDequantizeSum(const void* packed, size_t stride, int n, size_t count, int bits,
                             int block, float divisor, void* out, zppDataType_t dtype);

/* Fused dequantize-reduce-requantize between qgZ's hops: the sum of n inputs
 * (bits_in/block_in) quantized again into one segment (bits_out/block_out). */
zppResult_t zppQuantReduceRequant(const void* packed, size_t stride, int n, size_t count, int bits_in,
                                  int block_in, int bits_out, int block_out, void* packed_out);

/* zppDequantizeSum and zppQuantReduceRequant for inputs of either kind,
 * rotated or plain, in one of the orders of "Reductions of rotated
 * segments"; flags_out: 0 or ZPP_QUANT_ROTATE for the requantized output.
 * The Ex functions use ZPP_QUANT_SUM_QGZ, the order qgZ uses. */
typedef enum {
  ZPP_QUANT_SUM_SIMPLE = 0,
  ZPP_QUANT_SUM_ROTATED_DOMAIN = 1,
  ZPP_QUANT_SUM_ROTATED_DIRECT = 2 /* requantization from r; sums as ROTATED_DOMAIN */
} zppQuantSumOrder_t;
/* A whole build (library, tools, tests alike) may define it otherwise, to
 * measure another order in qgZ (docs/codecs.md, "Which order qgZ uses"). */
#ifndef ZPP_QUANT_SUM_QGZ
#define ZPP_QUANT_SUM_QGZ ZPP_QUANT_SUM_ROTATED_DIRECT
#endif
zppResult_t zppDequantizeSumOrder(const void* packed, size_t stride, int n, size_t count, int bits,
                                  int block, float divisor, void* out, zppDataType_t dtype,
                                  zppQuantSumOrder_t order);
zppResult_t zppQuantReduceRequantOrder(const void* packed, size_t stride, int n, size_t count,
                                       int bits_in, int block_in, int bits_out, int block_out,
                                       unsigned flags_out, zppQuantSumOrder_t order, void* packed_out);
zppResult_t zppDequantizeSumEx(const void* packed, size_t stride, int n, size_t count, int bits,
                               int block, float divisor, void* out, zppDataType_t dtype);
zppResult_t zppQuantReduceRequantEx(const void* packed, size_t stride, int n, size_t count, int bits_in,
                                    int block_in, int bits_out, int block_out, unsigned flags_out,
                                    void* packed_out);

/* Quantize W = nparts partitions with tensor-slice reordering (see above).
 * Partition p starts at element p * part_stride of `in` and holds part_count
 * elements (part_stride >= part_count lets pipelined chunks pick a sub-range
 * of every partition). Output: nparts segments of
 * zppQuantPackedSize(part_count, bits, block) bytes each. */
zppResult_t zppQuantizeReordered(const void* in, zppDataType_t dtype, size_t part_count,
                                 size_t part_stride, int nparts, int local_size, int bits, int block,
                                 void* packed);

/* Adds the escapes and escape overflows of this thread's codec calls since
 * the last call to *escapes and *overflows (either may be NULL), and resets
 * them: how the collectives count escapes per communicator. */
void zppQuantTakeEscapeCounts(uint64_t* escapes, uint64_t* overflows);

/* The CPU implementation in use: "avx512", "avx2" or "scalar" (ZPP_QUANT_IMPL,
 * cpuid). */
const char* zppQuantImplName(void);

/* The rotated codec's kernels in use: "avx512", "avx2" or "scalar" (the
 * reference). They follow ZPP_QUANT_IMPL, except that auto and avx512 take
 * the AVX-512 kernels wherever the CPU has AVX-512 F, BW and DQ, which is less
 * than the plain AVX-512 codecs need. */
const char* zppQuantRotImplName(void);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_QUANT_H_ */
