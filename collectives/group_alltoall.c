/* Exchanges inside a group of ranks (a node, the ranks of one local rank
 * across nodes, an hpZ group): the building blocks of qgZ's two hops and of
 * hpZ's backward gather. Direct sends to every member: the groups are small
 * (ranks per node, or nodes), and each pair carries exactly what it must. */
#include <stdlib.h>

#include "zeropp.h"

#include "check.h"

zppResult_t zppGroupAllToAllPost(zppCollCtx_t* c, const int* members, int n, int me, const void* send,
                                 size_t sendStride, void* recv, size_t recvStride, size_t bytes,
                                 uint32_t step, zppP2pReq_t** reqs) {
  zppMsgId_t id = zppCollMsg(c, step);
  for (int i = 0; i < 2 * n; i++) reqs[i] = NULL;
  /* Receives first, so that data arriving early lands in place; then the
   * sends, starting with the next member, so that no member is everyone's
   * first destination. */
  for (int d = 1; d < n; d++) {
    int i = (me - d + n) % n;
    ZPPCHECK(zppP2pIrecv(c->p2p, members[i], (char*)recv + (size_t)i * recvStride, bytes, &id,
                         &reqs[2 * i]));
  }
  for (int d = 1; d < n; d++) {
    int j = (me + d) % n;
    ZPPCHECK(zppP2pIsend(c->p2p, members[j], (const char*)send + (size_t)j * sendStride, bytes, &id,
                         &reqs[2 * j + 1]));
  }
  return zppSuccess;
}

zppResult_t zppGroupAllGatherV(zppCollCtx_t* c, const int* members, int n, int me, const void* mine,
                               size_t myBytes, void* const* recvs, const size_t* recvBytes,
                               uint32_t step, zppGroupRecvFn onRecv, void* arg) {
  if (n <= 1) return zppSuccess;
  zppResult_t res = zppSuccess;
  zppMsgId_t id = zppCollMsg(c, step);
  zppP2pReq_t** reqs = calloc(2 * (size_t)n, sizeof(*reqs));
  if (reqs == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory");
  for (int d = 1; d < n; d++) {
    int i = (me - d + n) % n;
    ZPPCHECKGOTO(zppP2pIrecv(c->p2p, members[i], recvs[i], recvBytes[i], &id, &reqs[2 * i]), res, out);
  }
  for (int d = 1; d < n; d++) {
    int j = (me + d) % n;
    ZPPCHECKGOTO(zppP2pIsend(c->p2p, members[j], mine, myBytes, &id, &reqs[2 * j + 1]), res, out);
  }
  /* The member d places back sent first to us: wait in that order, decode
   * each while the later ones are still moving. */
  for (int d = 1; d < n; d++) {
    int i = (me - d + n) % n;
    ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, &reqs[2 * i], 1), res, out);
    if (onRecv) ZPPCHECKGOTO(onRecv(arg, i), res, out);
  }
  ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, reqs, 2 * n), res, out);
out:
  /* On error the live requests stay with the transport until the caller's
   * quiesce; only the array goes. */
  free(reqs);
  return res;
}
