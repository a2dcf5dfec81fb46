/* Reduce-scatter through a recursive-doubling all-reduce of the whole
 * input, of which each rank keeps its own block. For small messages on
 * ranks that share cores: each of its log2 n steps waits on one partner,
 * where the direct algorithm waits on every rank at once, and a rank that
 * waits on many ranks sharing a core waits for all of them to be scheduled.
 * The messages carry the whole input instead of a block, which at these
 * sizes costs less than a scheduling round. */
#include <string.h>

#include "coll.h"

#include "check.h"
#include "names.h"

zppResult_t zppCollReduceScatterRecDoubling(zppCollCtx_t* c, const void* in, void* out, size_t total,
                                            zppDataType_t type, zppRedOp_t op) {
  const int n = c->nranks, r = c->rank;
  const size_t ts = zppDtypeSize(type);
  /* Slot 0 is the all-reduce's own. */
  char* all = zppCollScratch(c, 1, total * ts);
  if (all == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory for reduce-scatter scratch");
  /* avg: the sum here; the caller divides the block once. */
  ZPPCHECK(zppCollAllReduceRecDoubling(c, in, all, total, type, op == zppAvg ? zppSum : op));
  memcpy(out, all + zppBlockOffset(total, n, r) * ts, zppBlockCount(total, n, r) * ts);
  return zppSuccess;
}
