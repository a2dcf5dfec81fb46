/* All-reduce, ring: reduce-scatter then all-gather, both rings over blocks
 * as even as the count allows (any count, any rank count). Each rank sends
 * 2(n-1)/n of the data: bandwidth-optimal for large messages. Averages are
 * divided on the owner's block between the two phases, so every rank ends
 * with identical values. */
#include "coll.h"
#include "reduce_ops.h"

#include "check.h"
#include "names.h"

/* The all-gather's messages are numbered after the reduce-scatter's (tags
 * would also match in order, but distinct steps read better in traces). */
#define ALLGATHER_STEP_BASE 128u

zppResult_t zppCollAllReduceRing(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                 zppDataType_t type, zppRedOp_t op) {
  const int n = c->nranks, r = c->rank;
  const size_t ts = zppDtypeSize(type);
  char* mine = (char*)out + zppBlockOffset(count, n, r) * ts;
  ZPPCHECK(zppCollReduceScatterRing(c, in, mine, count, type, op));
  if (op == zppAvg) zppRedFinishAvg(mine, zppBlockCount(count, n, r), type, n);
  ZPPCHECK(zppCollAllGatherRing(c, out, count, ts, ALLGATHER_STEP_BASE));
  return zppSuccess;
}
