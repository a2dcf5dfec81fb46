/* All-reduce, recursive doubling: log2 steps of whole-buffer exchanges, for
 * small messages. Any rank count: with p2 the largest power of two <= n and
 * rem = n - p2, the first 2*rem ranks pair up (even into odd) before, and
 * get the result back after. In every exchange both partners combine the
 * lower rank's data first, so all ranks compute bit-identical results. */
#include <string.h>

#include "coll.h"
#include "reduce_ops.h"

#include "check.h"
#include "names.h"

zppResult_t zppCollAllReduceRecDoubling(zppCollCtx_t* c, const void* in, void* out, size_t count,
                                        zppDataType_t type, zppRedOp_t op) {
  const int n = c->nranks, r = c->rank;
  const size_t bytes = count * zppDtypeSize(type);
  char* tmp = zppCollScratch(c, 0, bytes);
  if (tmp == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory for all-reduce scratch");
  if (in != out) memcpy(out, in, bytes);
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;
  uint32_t step = 0;

  int vrank; /* rank among the p2 ranks of the doubling phase, -1 if folded away */
  zppMsgId_t id = zppCollMsg(c, step++);
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      ZPPCHECK(zppP2pSendRecv(c->p2p, r + 1, out, bytes, -1, NULL, 0, &id));
      vrank = -1;
    } else {
      ZPPCHECK(zppP2pSendRecv(c->p2p, -1, NULL, 0, r - 1, tmp, bytes, &id));
      zppRedApply(out, tmp, out, count, type, op);
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  for (int mask = 1; mask < p2; mask <<= 1) {
    id = zppCollMsg(c, step++);
    if (vrank < 0) continue;
    int vpeer = vrank ^ mask;
    int peer = vpeer < rem ? 2 * vpeer + 1 : vpeer + rem;
    ZPPCHECK(zppP2pSendRecv(c->p2p, peer, out, bytes, peer, tmp, bytes, &id));
    if (peer < r)
      zppRedApply(out, tmp, out, count, type, op);
    else
      zppRedApply(out, out, tmp, count, type, op);
  }
  id = zppCollMsg(c, step++);
  if (r < 2 * rem) {
    if (r % 2 == 1)
      ZPPCHECK(zppP2pSendRecv(c->p2p, r - 1, out, bytes, -1, NULL, 0, &id));
    else
      ZPPCHECK(zppP2pSendRecv(c->p2p, -1, NULL, 0, r + 1, out, bytes, &id));
  }
  if (op == zppAvg) zppRedFinishAvg(out, count, type, n);
  return zppSuccess;
}
