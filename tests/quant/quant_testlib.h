/*
 * Helpers shared by the codec tests: an independent reader of the packed
 * format (written from the spec, not from the codec's code), the documented
 * error bound in double precision, test data, and the list of CPU
 * implementations to run everything on.
 */
#ifndef ZPP_QUANT_TESTLIB_H_
#define ZPP_QUANT_TESTLIB_H_

#include <stddef.h>
#include <stdint.h>

#include "quant_kernels/quant_impl.h"
#include "quant_kernels/zpp_quant.h"
#include "testutil.h"

/* Implementations this machine runs: "scalar" always (first), "avx2" and
 * "avx512" when built and supported (a printed note otherwise). Returns how
 * many, at most QT_MAX_IMPLS. */
#define QT_MAX_IMPLS 3
int qtImpls(const char* names[QT_MAX_IMPLS]);

/* Makes `name` the implementation behind the public functions (REQUIREs). */
void qtUse(const char* name);

/* The rotated codec's implementations this CPU and build run, "scalar"
 * first, into names; returns how many. Its AVX-512 kernels need less than
 * the plain ones, so "avx512" may be here and not in qtImpls. */
int qtRotImpls(const char* names[QT_MAX_IMPLS]);

/* The rotated kernels `name`, beside the plain codecs of that name where
 * they run (else the best plain ones below it). */
void qtUseRot(const char* name);

size_t qtTypeSize(zppDataType_t dtype);
const char* qtTypeName(zppDataType_t dtype);

/* Element i of a dtype buffer, exactly, as a double (via ldexp, not through
 * the codec's conversion code). NaN stays NaN. */
double qtGet(const void* buf, zppDataType_t dtype, size_t i);
/* Writes v (exactly representable in fp32) into element i of a dtype buffer,
 * rounding with the conversion under test only for fp16/bf16. */
void qtSet(void* buf, zppDataType_t dtype, size_t i, float v);

/* Raw bits of element i (fp32: 32 bits; fp16/bf16: 16 bits). */
uint32_t qtBits(const void* buf, zppDataType_t dtype, size_t i);

/* The spec's constants per bit width (8, 4, 2), written out here rather
 * than taken from the library: Q, the marker -(Q+1), K of the escape test
 * (candidates above 2^K r), and the data bytes of count elements. */
int qtQmax(int bits);
int qtEscLog2(int bits);
size_t qtDataBytes(size_t count, int bits);

/* The spec's reading of a segment, from the bytes. */
typedef struct {
  uint32_t magic;
  int bits;
  int blockLog2;
  int reserved;
  uint64_t count;
} qtHeader_t;
qtHeader_t qtReadHeader(const uint8_t* seg);
float qtScale(const uint8_t* seg, size_t count, int block, size_t b);
int qtQ(const uint8_t* seg, size_t count, int bits, int block, size_t i);
/* y_i = (float)q_i * scale, the fp32 decoded value. */
float qtDecoded(const uint8_t* seg, size_t count, int bits, int block, size_t i);

/* Escapes, read from the bytes: 1 if element i travelled in a slot of its
 * group's table (its value in *v). qtElement is element i's fp32 decoded
 * value: the escaped value, NaN for a marker, else q * scale. */
int qtEscaped(const uint8_t* seg, size_t count, int bits, int block, size_t i, float* v);
float qtElement(const uint8_t* seg, size_t count, int bits, int block, size_t i);
/* Slot j of group g's table: value bits and index (0xffff: unused). */
uint32_t qtEscSlotBits(const uint8_t* seg, size_t count, int bits, int block, size_t g, int j);
unsigned qtEscSlotIndex(const uint8_t* seg, size_t count, int bits, int block, size_t g, int j);
/* Bytes from the segment start to the end of its last escape table. */
size_t qtUsedBytes(size_t count, int bits, int block);

/* The spec's escapes of an input (zpp_quant.h, "Escapes"), computed here
 * independently (by sorting): marks[i] = 1 for each element that escapes
 * into a slot, 2 for each candidate of a block whose candidates did not fit
 * the table (it stays in its block, quantized like the others), 3 for each
 * non-finite element (the marker). Returns the number of such overflowing
 * blocks. */
long qtExpectEscapes(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                     char* marks);

/* The documented bound for a finite input x, block scale s, decoded to T. */
double qtBound(double x, double s, int bits, zppDataType_t outType);

/* Test data. */
typedef enum { QT_NORMAL, QT_UNIFORM, QT_WIDE, QT_TINY, QT_NDIST } qtDist_t;
const char* qtDistName(qtDist_t d);
/* count values of a distribution, representable in dtype, as dtype. */
void qtFill(void* buf, zppDataType_t dtype, size_t count, qtDist_t dist, zppTestRng_t* rng);

/* Blocks of `block` elements with exactly nz (0..E+1) non-zero elements
 * each, at random places, the last block short when count says so. Their
 * magnitudes: pattern 0 all equal; 1 one of them 2^(K+1) above the rest; 2
 * each 2^(K+1) above the next; 3 log-uniform over 2^+-20. bits picks K. */
void qtFillSparse(void* buf, zppDataType_t dtype, size_t count, int block, int bits, int nz,
                  int pattern, zppTestRng_t* rng);
/* Real data whose outliers overflow the escape tables: Gaussian elements,
 * and in every block 1 to E spikes 2^ratioLog2 to 2^(ratioLog2 + 1) times
 * the bulk's scale (signs random), representable in dtype (fp16: ratioLog2
 * at most 24). */
void qtFillSpikes(void* buf, zppDataType_t dtype, size_t count, int block, int ratioLog2,
                  zppTestRng_t* rng);

/* Exact (double) inverse of one block of len rotated values v, in place:
 * (1/B) D H v (zpp_quant.h, "Rotation"), independent of the codec's fp32
 * transform. */
void qtExactInverse(double* v, size_t len);

/* NaN-aware equality of two dtype buffers (every NaN equals every NaN);
 * returns the first differing index or (size_t)-1. */
size_t qtFirstDiff(const void* a, const void* b, zppDataType_t dtype, size_t count);

#endif /* ZPP_QUANT_TESTLIB_H_ */
