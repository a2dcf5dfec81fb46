/*
 * The host transport as the collectives see it: tagged point-to-point
 * messages between the ranks of a communicator.
 *
 * An interface, a table of functions, so that the algorithms in collectives/
 * know no transport's type: the UCX transport implements it (ucx_p2p.c
 * adapts lib/transport/ucx.h), and another transport would fill the same
 * table. The contract is the one ucx.h spells out in full: a receive
 * matches on source, sequence number and step, the sender's signature is
 * then compared with the receiver's, a wrong length is an error, every
 * wait is bounded by the communicator's timeout, and after an error
 * quiesce() leaves no buffer in use.
 *
 * Threads: one thread at a time (the communicator's host executor).
 */
#ifndef ZPP_TRANSPORT_P2P_H_
#define ZPP_TRANSPORT_P2P_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

/* Message spaces: a message only ever matches a receive of its own space.
 * Collectives number their messages with the collective sequence number,
 * which every rank advances in step; point-to-point messages
 * (collectives/p2p.c) with numbers of their own, per pair of ranks or per
 * tag, that the collectives' leftover and mismatch checks never look at. */
#define ZPP_MSG_COLL 0
#define ZPP_MSG_P2P 1    /* zppSend/zppRecv, in issue order per pair */
#define ZPP_MSG_TAGGED 2 /* zppSendTagged/zppRecvTagged, by tag and count */

/* Where a message belongs; the transport encodes it into its tag. */
typedef struct {
  uint32_t seq;  /* collective sequence number (low 16 bits used) */
  uint32_t step; /* step inside the collective (low 8 bits used; wraps: messages
                    between two ranks with the same tag match in send order) */
  uint32_t sig;  /* signature of the call (low 20 bits used) */
  int opKind;    /* zppOpKind_t, for the byte counters */
  int space;     /* ZPP_MSG_*: 0 (the collectives') unless set */
} zppMsgId_t;

/* Describes a mismatch for error messages, as "<theirs> while this rank
 * called <mine>" (set by the layer that makes the signatures); writes at
 * most len bytes into buf. */
typedef void (*zppSigFormatter_t)(uint32_t theirs, uint32_t mine, char* buf, size_t len);

typedef struct zppP2p zppP2p_t;
/* A send or receive in flight; defined by the transport that made it. */
typedef struct zppP2pReq zppP2pReq_t;

typedef struct {
  /* Posts a send or a receive. The buffer must stay valid until a wait has
   * completed the request (or quiesce ran after an error). */
  zppResult_t (*isend)(zppP2p_t* t, int peer, const void* buf, size_t bytes, const zppMsgId_t* id,
                       zppP2pReq_t** req);
  zppResult_t (*irecv)(zppP2p_t* t, int peer, void* buf, size_t bytes, const zppMsgId_t* id,
                       zppP2pReq_t** req);
  /* Waits for the n requests (NULL entries are skipped); completed ones are
   * released and their entries set to NULL. On error the reason is logged,
   * recorded on the communicator, and the remaining requests stay live
   * until quiesce. */
  zppResult_t (*waitAll)(zppP2p_t* t, zppP2pReq_t** reqs, int n);
  /* One blocking exchange; a peer of -1 leaves that side out. */
  zppResult_t (*sendRecv)(zppP2p_t* t, int sendPeer, const void* sendBuf, size_t sendBytes,
                          int recvPeer, void* recvBuf, size_t recvBytes, const zppMsgId_t* id);
  /* Progresses and reports an error another rank announced, if any. */
  zppResult_t (*poll)(zppP2p_t* t);
  /* *found = 1 when a message of id from peer has arrived and waits for its
   * receive (nothing is taken); an error when peer is known dead. For
   * receives from any rank: the caller polls, probes, then receives. */
  zppResult_t (*probe)(zppP2p_t* t, int peer, const zppMsgId_t* id, int* found);
  /* Errors if a message of the completed collective (seq, sig) was left
   * unreceived: a sign that the ranks made different calls. */
  zppResult_t (*checkLeftovers)(zppP2p_t* t, uint32_t seq, uint32_t sig);
  /* After an error: tells the other ranks, cancels every live request. */
  void (*quiesce)(zppP2p_t* t);
  void (*setSigFormatter)(zppP2p_t* t, zppSigFormatter_t fn);
} zppP2pOps_t;

struct zppP2p {
  const zppP2pOps_t* ops;
  /* 1 when some machine of the communicator has more ranks than CPUs: the
   * same on every rank, so that every rank picks the same algorithm. */
  int ranksShareCores;
};

static inline zppResult_t zppP2pIsend(zppP2p_t* t, int peer, const void* buf, size_t bytes,
                                      const zppMsgId_t* id, zppP2pReq_t** req) {
  return t->ops->isend(t, peer, buf, bytes, id, req);
}
static inline zppResult_t zppP2pIrecv(zppP2p_t* t, int peer, void* buf, size_t bytes,
                                      const zppMsgId_t* id, zppP2pReq_t** req) {
  return t->ops->irecv(t, peer, buf, bytes, id, req);
}
static inline zppResult_t zppP2pWaitAll(zppP2p_t* t, zppP2pReq_t** reqs, int n) {
  return t->ops->waitAll(t, reqs, n);
}
static inline zppResult_t zppP2pSendRecv(zppP2p_t* t, int sendPeer, const void* sendBuf,
                                         size_t sendBytes, int recvPeer, void* recvBuf,
                                         size_t recvBytes, const zppMsgId_t* id) {
  return t->ops->sendRecv(t, sendPeer, sendBuf, sendBytes, recvPeer, recvBuf, recvBytes, id);
}
static inline zppResult_t zppP2pPoll(zppP2p_t* t) { return t->ops->poll(t); }
static inline zppResult_t zppP2pProbe(zppP2p_t* t, int peer, const zppMsgId_t* id, int* found) {
  return t->ops->probe(t, peer, id, found);
}
static inline zppResult_t zppP2pCheckLeftovers(zppP2p_t* t, uint32_t seq, uint32_t sig) {
  return t->ops->checkLeftovers(t, seq, sig);
}
static inline void zppP2pQuiesce(zppP2p_t* t) { t->ops->quiesce(t); }
static inline void zppP2pSetSigFormatter(zppP2p_t* t, zppSigFormatter_t fn) {
  t->ops->setSigFormatter(t, fn);
}
static inline int zppP2pRanksShareCores(const zppP2p_t* t) { return t->ranksShareCores; }

#endif /* ZPP_TRANSPORT_P2P_H_ */
