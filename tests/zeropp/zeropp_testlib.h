/*
 * Helpers of the ZeRO++ tests: deterministic test data for every rank, and
 * the expected results computed here with the codec functions, so that the
 * collectives can be compared byte for byte, plus the documented error
 * bounds (docs/zeropp.md) against the exact results in double precision.
 */
#ifndef ZPP_ZEROPP_TESTLIB_H_
#define ZPP_ZEROPP_TESTLIB_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

/* ZPP_PIPELINE_CHUNK_BYTES the tests run with (set in their environment):
 * small, so that modest counts make several pipeline chunks. */
#define ZT_CHUNK_BYTES 4096

/* The codec flags the tests expect the collectives to use: ZPP_QUANT_ROTATE
 * when the environment sets ZPP_QUANT_ROTATE=1 (the tests registered with
 * it), else 0. The expectations below follow it. */
unsigned ztQuantFlags(void);

/* Rank `rank`'s count values for `seed` in type t: normal and uniform
 * values with magnitudes that vary from block to block. */
void ztFill(void* buf, zppDataType_t t, size_t count, int seed, int rank);

/* Elements per pipeline chunk, as the library computes it (chunk bytes
 * ZT_CHUNK_BYTES, or `bytes`). */
size_t ztChunkElems(zppDataType_t t, int block);
size_t ztChunkElemsFor(size_t bytes, zppDataType_t t, int block);
/* Default block for bits (the codec's). */
int ztBlock(int bits);

/* qwZ: bytes of one packed shard (chunks of ztChunkElems laid end to end). */
size_t ztQwzShardPacked(size_t count, zppDataType_t t, int bits, int block);
/* Bytes of count elements packed in chunks of ce elements laid end to end. */
size_t ztPackedInChunks(size_t count, int bits, int block, size_t ce);
/* The decoded shard every rank must hold: quantize the whole shard, decode.
 * Returns the number of elements outside the codec's bound against the
 * input (0 expected). */
int ztQwzExpect(const void* shard, zppDataType_t t, size_t count, int bits, int block, void* out);

/* qgZ: expected result of partition p, given every rank's input (inputs[r]
 * holds W * rc elements) and every rank's node (nodeOf[r], the topology's
 * node numbers: nodes of equal size, numbered by their lowest rank, in any
 * placement), as the library computes it: out (rc elements of t) byte for
 * byte; bound[i] the documented two-stage bound and target[i] the exact sum
 * (or average) in double, for each element. chunkBytes: the bytes of
 * qgZ's pipeline chunk per peer (ZT_CHUNK_BYTES unless a test changed the
 * pipeline chunk): the segments are cut there, and where a block has more
 * outliers than its escape table can take, the result depends on the cut. */
void ztQgzExpect(const void* const* inputs, zppDataType_t t, size_t rc, int p, int W, const int* nodeOf,
                 int bits, int block, zppRedOp_t op, size_t chunkBytes, void* out, double* bound,
                 double* target);
/* The spec's escape counts (zpp_quant.h, "Escapes", by quant_testlib's
 * independent model) of the codec calls of one plain (unrotated) qgZ call
 * that quantize partition p's data: every rank's first-stage segments and,
 * on two stages, every node's requantized sums, cut as ztQgzExpect cuts
 * them. Summed over p they are the call's quantEscapes and
 * quantEscapeOverflows over all ranks. overflowed (rc elements, or NULL):
 * 1 where an element of partition p lies in a block whose candidates found
 * no slot in some stage (its scale then fits them). */
void ztQgzEscapeModel(const void* const* inputs, zppDataType_t t, size_t rc, int p, int W,
                      const int* nodeOf, int bits, int block, size_t chunkBytes, uint64_t* escapes,
                      uint64_t* overflows, char* overflowed);
/* The same for one rank's qwZ shard (and hpZ's forward gather). */
void ztQwzEscapeModel(const void* shard, zppDataType_t t, size_t count, int bits, int block,
                      uint64_t* escapes, uint64_t* overflows);
/* Bytes one rank's qgZ sends for a tensor of rc elements per rank: one
 * packed segment run (sum over pipeline pieces of their packed size). */
size_t ztQgzRunBytes(size_t rc, zppDataType_t t, int bits, int block);

/* Index of the first element where a and b differ (NaN equals NaN), or -1. */
long ztFirstDiff(const void* a, const void* b, zppDataType_t t, size_t count);
double ztGet(const void* buf, zppDataType_t t, size_t i);
void ztSet(void* buf, zppDataType_t t, size_t i, float v);
const char* ztTypeName(zppDataType_t t);

/* The error of rounding an fp32 result to t: relative and absolute part. */
double ztRoundRel(zppDataType_t t);
double ztRoundAbs(zppDataType_t t);

#endif /* ZPP_ZEROPP_TESTLIB_H_ */
