/* The UCX transport behind the collectives' interface (lib/transport/p2p.h):
 * each entry forwards to ucx.h. A separate object rather than a table inside
 * zppUcx_t, so that ucx.c keeps its own signatures and its tests keep
 * calling them directly. */
#include <stddef.h>
#include <stdlib.h>

#include "check.h"
#include "lib/transport/ucx.h"

typedef struct {
  zppP2p_t base; /* first: the interface's pointer is this object's */
  zppUcx_t* ucx;
} ucxP2p_t;

static zppUcx_t* ucxOf(zppP2p_t* t) { return ((ucxP2p_t*)t)->ucx; }

static zppResult_t ucxIsend(zppP2p_t* t, int peer, const void* buf, size_t bytes, const zppMsgId_t* id,
                            zppP2pReq_t** req) {
  return zppUcxIsend(ucxOf(t), peer, buf, bytes, id, req);
}
static zppResult_t ucxIrecv(zppP2p_t* t, int peer, void* buf, size_t bytes, const zppMsgId_t* id,
                            zppP2pReq_t** req) {
  return zppUcxIrecv(ucxOf(t), peer, buf, bytes, id, req);
}
static zppResult_t ucxWaitAll(zppP2p_t* t, zppP2pReq_t** reqs, int n) {
  return zppUcxWaitAll(ucxOf(t), reqs, n);
}
static zppResult_t ucxSendRecv(zppP2p_t* t, int sendPeer, const void* sendBuf, size_t sendBytes,
                               int recvPeer, void* recvBuf, size_t recvBytes, const zppMsgId_t* id) {
  return zppUcxSendRecv(ucxOf(t), sendPeer, sendBuf, sendBytes, recvPeer, recvBuf, recvBytes, id);
}
static zppResult_t ucxPoll(zppP2p_t* t) { return zppUcxPoll(ucxOf(t)); }
static zppResult_t ucxProbe(zppP2p_t* t, int peer, const zppMsgId_t* id, int* found) {
  return zppUcxProbe(ucxOf(t), peer, id, found);
}
static zppResult_t ucxCheckLeftovers(zppP2p_t* t, uint32_t seq, uint32_t sig) {
  return zppUcxCheckLeftovers(ucxOf(t), seq, sig);
}
static void ucxQuiesce(zppP2p_t* t) { zppUcxQuiesce(ucxOf(t)); }
static void ucxSetSigFormatter(zppP2p_t* t, zppSigFormatter_t fn) {
  zppUcxSetSigFormatter(ucxOf(t), fn);
}

static const zppP2pOps_t ucxOps = {
    .isend = ucxIsend,
    .irecv = ucxIrecv,
    .waitAll = ucxWaitAll,
    .sendRecv = ucxSendRecv,
    .poll = ucxPoll,
    .probe = ucxProbe,
    .checkLeftovers = ucxCheckLeftovers,
    .quiesce = ucxQuiesce,
    .setSigFormatter = ucxSetSigFormatter,
};

zppResult_t zppUcxP2pCreate(zppUcx_t* ucx, zppP2p_t** out) {
  ucxP2p_t* p = NULL;
  ZPP_CALLOC(p, 1);
  p->base.ops = &ucxOps;
  p->base.ranksShareCores = zppUcxRanksShareCores(ucx);
  p->ucx = ucx;
  *out = &p->base;
  return zppSuccess;
}

void zppUcxP2pDestroy(zppP2p_t* p2p) { free(p2p); }
