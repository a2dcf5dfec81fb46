/* Reduce as a reduce-scatter (the pipelined ring, reducescatter_ring.c)
 * followed by a gather of the reduced blocks to the root (gather_flat.c).
 * Each rank sends (n-1)/n of the data in the ring and 1/n to the root: the
 * root's link carries about 2(n-1)/n of the data instead of the binomial
 * tree's log2(n) full messages, for large counts. Blocks are uneven when n
 * does not divide count (zppBlock*); the root's own reduced block is
 * written in place in out. */
#include "coll.h"

#include "check.h"
#include "names.h"

zppResult_t zppCollReduceScatterGather(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                       zppDataType_t type, zppRedOp_t op, int root) {
  const int n = c->nranks, r = c->rank;
  const size_t ts = zppDtypeSize(type);
  char* mine;
  if (r == root) {
    mine = (char*)out + zppBlockOffset(count, n, r) * ts;
  } else {
    mine = zppCollScratch(c, 2, zppBlockCount(count, n, r) * ts + 1);
    if (mine == NULL)
      ZPP_FAIL(zppSystemError, COLL, "rank %d: out of memory for the reduce's block", r);
  }
  ZPPCHECK(zppCollReduceScatterRing(c, in, mine, count, type, op));
  return zppCollGatherFlat(c, mine, out, count, ts, root);
}
