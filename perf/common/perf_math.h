/*
 * zpp-perf's arithmetic, kept apart from everything that communicates so
 * that tests can check it against hand-computed cases: which byte count a
 * collective is credited with, algbw and busbw, the sequence of sizes, and
 * the statistics over iterations.
 *
 * The conventions are nccl-tests' (see ../shared/DESIGN.md, "How we
 * measure"): a size given with -b/-e is the `bytes` of the formula below,
 * i.e. the biggest buffer of the operation:
 *
 *   op             API count c            bytes            busbw / algbw
 *   allgather      sendcount = S/(t*n)    c * t * n        (n-1)/n
 *   reducescatter  recvcount = S/(t*n)    c * t * n        (n-1)/n
 *   alltoall       per-peer  = S/(t*n)    c * t * n        (n-1)/n
 *   allreduce      count     = S/t        c * t            2(n-1)/n
 *   broadcast      count     = S/t        c * t            1
 *   sendrecv       count     = S/t        c * t            1
 *   reduce         count     = S/t        c * t            1
 *   gather         sendcount = S/(t*n)    c * t * n        (n-1)/n
 *   scatter        recvcount = S/(t*n)    c * t * n        (n-1)/n
 *   alltoallv      per-peer  = S/(t*n)    c * t * n        (n-1)/n
 *
 * (alltoallv: uneven, each rank sends c + c/2 to the next rank and
 * c - c/2 to the previous one, c to the others (perf_check.h), so every
 * rank still sends and receives c * n in all; reduce's and gather's
 * result is on the root only)
 * (sendrecv: each rank sends c elements to its pair partner and receives c
 * from it, both at once; bytes is one direction's, as nccl-tests counts
 * its sendrecv)
 * with S the requested size, t the type size and n the ranks; c is rounded
 * down, so the bytes actually moved (what is printed) may be a little less
 * than S. algbw = bytes / time in GB/s with GB = 1e9.
 */
#ifndef ZPP_PERF_MATH_H_
#define ZPP_PERF_MATH_H_

#include <stddef.h>

typedef enum {
  ZPP_PERF_ALLGATHER = 0,
  ZPP_PERF_REDUCESCATTER = 1,
  ZPP_PERF_ALLREDUCE = 2,
  ZPP_PERF_ALLTOALL = 3,
  ZPP_PERF_BROADCAST = 4,
  ZPP_PERF_SENDRECV = 5, /* zppSend/zppRecv between pair partners (perf_check.h) */
  ZPP_PERF_REDUCE = 6,
  ZPP_PERF_GATHER = 7,
  ZPP_PERF_SCATTER = 8,
  ZPP_PERF_ALLTOALLV = 9, /* uneven counts (perf_check.h) */
  ZPP_PERF_NUM_COLLS = 10
} zppPerfColl_t;

/* The counts of one row of the table. */
typedef struct {
  size_t apiCount;   /* the count argument of the zpp/NCCL call */
  size_t totalCount; /* elements in `bytes` (the table's count column) */
  size_t bytes;      /* bytes credited by the formula (the table's size column) */
  size_t sendCount;  /* elements in this rank's send buffer */
  size_t recvCount;  /* elements in this rank's receive buffer */
} zppPerfCounts_t;

/* Counts for a requested size in bytes. apiCount is 0 when the size holds
 * less than one element per rank (the row is skipped). Returns 0, or -1 for
 * a bad collective, type size or rank count. */
int zppPerfCounts(zppPerfColl_t coll, size_t sizeBytes, size_t typeSize, int nranks,
                  zppPerfCounts_t* out);

/* busbw / algbw for the collective on n ranks (0 for n = 1 except broadcast,
 * as nccl-tests prints it: one rank moves nothing over any bus). */
double zppPerfBusFactor(zppPerfColl_t coll, int nranks);

/* GB/s (1e9 bytes per second); 0 when seconds <= 0. */
double zppPerfAlgBw(size_t bytes, double seconds);
double zppPerfBusBw(zppPerfColl_t coll, int nranks, size_t bytes, double seconds);

/* The sizes from minBytes to maxBytes inclusive: multiplied by stepFactor
 * when it is > 1, else incremented by stepBytes (nccl-tests' rule). Writes at
 * most `cap` sizes into out (out may be NULL to count) and returns how many
 * there are, or -1 when the arguments cannot make a sequence (min 0, min >
 * max, factor <= 1 with step 0). */
long zppPerfSizeSeq(size_t minBytes, size_t maxBytes, size_t stepBytes, double stepFactor, size_t* out,
                    long cap);

/* "32M", "1G", "4096", "64KiB": K/M/G/T are powers of 1024, an optional "B"
 * or "iB" may follow. Returns 0 and writes *bytes, or -1 on anything else
 * (empty, negative, trailing junk, overflow). */
int zppPerfParseSize(const char* text, size_t* bytes);

/* Median of n values (mean of the middle two for even n); sorts `v`. */
double zppPerfMedian(double* v, size_t n);
double zppPerfMean(const double* v, size_t n);

/* Human-friendly size for legends and progress ("64 MiB", "512 B"). */
void zppPerfFormatSize(size_t bytes, char* buf, size_t len);

#endif /* ZPP_PERF_MATH_H_ */
