/* Reduce, binomial tree: ceil(log2 n) rounds; in round k the ranks whose
 * (root-relative) number has bit k set send their partial result to the
 * rank 2^k below and drop out, the others receive and reduce. Latency
 * log2(n) messages; the root receives log2(n) full messages, so large
 * counts take the reduce-scatter + gather instead (reduce_rsg.c). Every
 * rank reduces in a fixed order (its own, then children by rising
 * distance), so the result does not depend on arrival order. */
#include <string.h>

#include "coll.h"
#include "reduce_ops.h"

#include "check.h"
#include "names.h"

zppResult_t zppCollReduceBinomial(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                  zppDataType_t type, zppRedOp_t op, int root) {
  const int n = c->nranks;
  const int vr = (c->rank - root + n) % n;
  const size_t bytes = count * zppDtypeSize(type);
  zppMsgId_t id = zppCollMsg(c, 0);
  const char* acc = in; /* the partial result: in until a child's part came */
  char* accBuf = c->rank == root ? out : NULL;
  char* tmp = NULL;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      int parent = (vr - mask + root) % n;
      return zppP2pSendRecv(c->p2p, parent, acc, bytes, -1, NULL, 0, &id);
    }
    if (vr + mask >= n) continue;
    int child = (vr + mask + root) % n;
    if (tmp == NULL) {
      tmp = zppCollScratch(c, 0, bytes);
      if (accBuf == NULL) accBuf = zppCollScratch(c, 1, bytes);
      if (tmp == NULL || accBuf == NULL)
        ZPP_FAIL(zppSystemError, COLL, "rank %d: out of memory for reduce buffers (%zu bytes)", c->rank,
                 bytes);
    }
    ZPPCHECK(zppP2pSendRecv(c->p2p, -1, NULL, 0, child, tmp, bytes, &id));
    zppRedApply(accBuf, acc, tmp, count, type, op);
    acc = accBuf;
  }
  /* The root (vr 0) ends here; with one child or more acc is out already. */
  if (acc != out && bytes) memcpy(out, acc, bytes);
  return zppSuccess;
}
