/*
 * zpp-perf's inputs and their checking, free of any communication so that a
 * test can feed it hand-made outputs.
 *
 * Every element of every rank's send buffer is a pure function of (rank,
 * index), so any rank can compute what every other rank sent and hence the
 * exact result of the collective. The values are small integers (or powers
 * of two for prod) picked so that every partial result of the reduction is
 * exactly representable in the data type: the exact result is then the same
 * whatever order the algorithm reduces in, and a plain collective must match
 * it bit for bit. Two cases are rounded by design and get a bound instead:
 *   - avg on floating types: the division (or a multiply by a rounded 1/n)
 *     rounds. Bound: u * (|e| + (n + 2) * sum_k |x_k| / n), with u the unit
 *     roundoff of the type: first-order error of n-1 additions, one scaling
 *     of each term or of the sum, and the final rounding.
 *   - avg on integer types: the quotient is not an integer; any integer next
 *     to it (truncated, floored, rounded) is accepted: those are within
 *     (n-1)/n, every other integer at least 1 away; bound (n - 1/2)/n.
 * Compressed modes add their codec's bound per element (zppPerfBoundFn).
 */
#ifndef ZPP_PERF_CHECK_H_
#define ZPP_PERF_CHECK_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "perf_math.h"

typedef struct {
  zppPerfColl_t coll;
  zppDataType_t dtype;
  zppRedOp_t redop; /* ignored by allgather, alltoall, broadcast */
  int nranks;
  int rank;        /* whose receive buffer is checked */
  int root;        /* broadcast, reduce, gather, scatter */
  size_t apiCount; /* the count argument of the call (perf_math.h) */
} zppPerfCheckSpec_t;

/* sendrecv's pairs: 0<->1, 2<->3, ...; with an odd rank count the last
 * rank sends to and receives from itself. */
static inline int zppPerfPartner(int rank, int nranks) { return (rank ^ 1) < nranks ? rank ^ 1 : rank; }

/* alltoallv's uneven parts, c the nominal per-peer count: rank `from`
 * sends c + c/2 elements to the next rank and c - c/2 to the previous one
 * (c to every other, and to both when n < 3), so that every rank sends
 * and receives c * n in all. Parts lie in peer order, without gaps. */
static inline size_t zppPerfVCount(size_t c, int from, int to, int n) {
  if (n < 3) return c;
  if (to == (from + 1) % n) return c + c / 2;
  if (to == (from + n - 1) % n) return c - c / 2;
  return c;
}
/* Where `to`'s part starts in `from`'s send buffer. */
static inline size_t zppPerfVSendDispl(size_t c, int from, int to, int n) {
  size_t d = 0;
  for (int p = 0; p < to; p++) d += zppPerfVCount(c, from, p, n);
  return d;
}
/* Where `from`'s part starts in `to`'s receive buffer. */
static inline size_t zppPerfVRecvDispl(size_t c, int from, int to, int n) {
  size_t d = 0;
  for (int p = 0; p < from; p++) d += zppPerfVCount(c, p, to, n);
  return d;
}

/* 1 for the data types zpp-perf knows (every zppDataType_t). */
int zppPerfTypeValid(zppDataType_t dtype);
int zppPerfTypeIsFloat(zppDataType_t dtype);
/* Unit roundoff of a floating type (2^-24 for fp32), 0 for integers. */
double zppPerfTypeUnitRoundoff(zppDataType_t dtype);

/* Element i of a buffer of dtype, as a double (exact for every value the
 * tool generates), and the reverse with the type's rounding (RNE; integers
 * wrap like a cast through the unsigned type of the same width). */
double zppPerfLoad(zppDataType_t dtype, const void* buf, size_t i);
void zppPerfStore(zppDataType_t dtype, void* buf, size_t i, double v);

/* Element `index` of rank `rank`'s send buffer. */
double zppPerfInputValue(const zppPerfCheckSpec_t* spec, int rank, size_t index);
/* Writes this rank's (spec->rank) send buffer of `sendCount` elements. */
void zppPerfFillSend(const zppPerfCheckSpec_t* spec, void* send, size_t sendCount);
/* Fills a receive buffer with a byte pattern no generated value has, so that
 * an element the collective forgot to write is caught. */
void zppPerfFillSentinel(zppDataType_t dtype, void* buf, size_t count);

/* Exact value of element i of spec->rank's receive buffer; *bound receives
 * the error the plain collective is allowed there (0 unless rounded by
 * design, see above). */
double zppPerfExpected(const zppPerfCheckSpec_t* spec, size_t i, double* bound);

/* A compressed mode's extra allowance for element i whose exact value is
 * `exact` (e.g. the codec bound for the block that element came from). */
typedef double (*zppPerfBoundFn)(const zppPerfCheckSpec_t* spec, size_t i, double exact, void* arg);

typedef struct {
  uint64_t wrong;  /* elements whose error is past their bound (or NaN) */
  double maxError; /* worst |got - exact| over finite elements */
  double maxBound; /* largest bound over the elements */
  long firstWrong; /* index of the first wrong element, -1 if none */
} zppPerfCheckResult_t;

/* Compares recvCount elements of `recv` (spec->rank's receive buffer) with
 * the exact result. extra may be NULL (plain collectives). */
void zppPerfCheckRecv(const zppPerfCheckSpec_t* spec, const void* recv, size_t recvCount,
                      zppPerfBoundFn extra, void* arg, zppPerfCheckResult_t* out);

/* The fault injection of the tool (not of the library): replaces element i
 * by a value that differs from what it held. */
void zppPerfCorrupt(zppDataType_t dtype, void* buf, size_t i);

/* ---------------------------------------------------------------------------
 * Codec bounds of the compressed modes, from the error bound that
 * quant_kernels/zpp_quant.h documents for one quantize-decode round trip of a
 * finite input x in a block of scale s (fp32 scale = amax / Q), decoded to T:
 *   |y - x| <= s/2 + 2^-21*Q*s + u_T*(|x| + s) + m_T + (Q+1)*2^-150
 * (u_T: T's unit roundoff, 0 for fp32; m_T: half T's smallest subnormal).
 *
 * qwZ (and hpZ's gathers when quantized): element j of rank p's shard comes
 * back from one round trip; its block is the one of `block` elements,
 * counted from the start of rank p's shard, that holds j. The bound is that
 * formula with the block's own scale: exact for the codec, nothing added.
 *
 * qgZ: two round trips with an fp32 reduction after each (quantize every
 * rank's partition; intra-node sum and requantize; inter-node sum; divide
 * for avg; round to T). The bound must not depend on how the algorithm
 * chunks or blocks the partition, nor on which rank sits on which node, so
 * each scale is bounded by the amax of the whole partition it belongs to
 * (a block's amax never exceeds it) and the sum of the nodes' second-stage
 * scales by the sum over ranks (a maximum of sums never exceeds the sum of
 * maxima). With A_k = max |x_k| over rank k's slice of the partition, Q the
 * levels of `bits`, e1_k = (A_k/Q)(1/2 + 2^-21 Q) and S2 = sum_k (A_k + e1_k)/Q,
 * for an element with exact sum S and Y = sum_k (|x_k| + e1_k):
 *   B = sum_k e1_k + E2 + 2(n-1) 2^-24 (Y + E2),   E2 = S2 (1/2 + 2^-21 Q)
 *   bound = B/d + (2^-24 + u_T) (|S| + B)/d + m_T   (d = n for avg, else 1)
 * (scales carry a factor 1 + 2^-23 for their own fp32 rounding). It assumes
 * every hop quantizes with `bits` or finer, which makes it an upper bound
 * for an int8 second hop too.
 *
 * Rotated codec (ZPP_QUANT_ROTATE; zpp_quant.h, "Rotation"): a rotated block's
 * scale is max |H D x'| / Q, which the tool does not compute; it bounds it
 * by B * M / Q (every |w_i| <= sum_j |x'_j| <= B M, M the block's amax), and
 * adds the rotated bound's terms 2^-22 B M + 2^-23 L Q s. qwZ: per block, M
 * its amax. qgZ: the formula above with each stage's scale multiplied by B
 * and those terms added per stage (M = A_k, then the node sums' bound). The
 * rotated reductions add each input's full decode in order (no escapes
 * after), which the 2(n-1) 2^-24 term covers. Looser than the plain bound
 * by up to B: a check for gross errors (wrong data, blocks or ranks), not
 * of the codec's accuracy, which tests/zeropp checks element by element.
 * ------------------------------------------------------------------------- */
typedef struct {
  int bits;     /* 8 or 4 */
  int block;    /* elements per scale (qwZ, hpZ) */
  double* amax; /* qwZ: [nranks][nblocks] block amax; qgZ: [nranks] partition amax */
  size_t nblocks;
  double sumE1, e2; /* qgZ: sum_k e1_k and E2 (the per-element parts come later) */
  double* e1;       /* qgZ: [nranks] */
  int rotated;      /* the rotated codec's bound (see above) */
} zppPerfCodecBound_t;

/* Prepare for spec (an allgather for qwZ/hpZ, a reducescatter for qgZ);
 * return 0, or -1 for bad bits/block or no memory. */
int zppPerfQwzBoundPrepare(const zppPerfCheckSpec_t* spec, int bits, int block, zppPerfCodecBound_t* b);
int zppPerfQgzBoundPrepare(const zppPerfCheckSpec_t* spec, int bits, zppPerfCodecBound_t* b);
/* The same for the rotated codec when rotated (qgZ needs the block then). */
int zppPerfQwzBoundPrepareRot(const zppPerfCheckSpec_t* spec, int bits, int block, int rotated,
                              zppPerfCodecBound_t* b);
int zppPerfQgzBoundPrepareRot(const zppPerfCheckSpec_t* spec, int bits, int block, int rotated,
                              zppPerfCodecBound_t* b);
void zppPerfCodecBoundFree(zppPerfCodecBound_t* b);
/* zppPerfBoundFn's with arg = the prepared zppPerfCodecBound_t. */
double zppPerfQwzBound(const zppPerfCheckSpec_t* spec, size_t i, double exact, void* arg);
double zppPerfQgzBound(const zppPerfCheckSpec_t* spec, size_t i, double exact, void* arg);

#endif /* ZPP_PERF_CHECK_H_ */
