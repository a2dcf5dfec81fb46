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
  zppRedOp_t redop;  /* ignored by allgather, alltoall, broadcast */
  int nranks;
  int rank;          /* whose receive buffer is checked */
  int root;          /* broadcast only */
  size_t apiCount;   /* the count argument of the call (perf_math.h) */
} zppPerfCheckSpec_t;

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
typedef double (*zppPerfBoundFn)(const zppPerfCheckSpec_t* spec, size_t i, double exact,
                                 void* arg);

typedef struct {
  uint64_t wrong;     /* elements whose error is past their bound (or NaN) */
  double maxError;    /* worst |got - exact| over finite elements */
  double maxBound;    /* largest bound over the elements */
  long firstWrong;    /* index of the first wrong element, -1 if none */
} zppPerfCheckResult_t;

/* Compares recvCount elements of `recv` (spec->rank's receive buffer) with
 * the exact result. extra may be NULL (plain collectives). */
void zppPerfCheckRecv(const zppPerfCheckSpec_t* spec, const void* recv, size_t recvCount,
                      zppPerfBoundFn extra, void* arg, zppPerfCheckResult_t* out);

/* The fault injection of the tool (not of the library): replaces element i
 * by a value that differs from what it held. */
void zppPerfCorrupt(zppDataType_t dtype, void* buf, size_t i);

#endif /* ZPP_PERF_CHECK_H_ */
