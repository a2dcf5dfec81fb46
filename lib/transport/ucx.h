/*
 * UCX host transport: tagged point-to-point messages between the ranks of a
 * communicator, over UCP's tag API.
 *
 * Endpoints: to a peer on the same node (same topology node) the endpoint is
 * made from the peer's full worker address, so UCX picks shared memory
 * (sysv/posix/cma); to a peer on another node it is made from the peer's
 * network-only address (UCP_WORKER_ADDRESS_FLAG_NET_ONLY), so System V or
 * POSIX shared memory can never carry inter-node traffic, even when the
 * "nodes" are network namespaces of one machine. Inter-node endpoints use
 * UCP_ERR_HANDLING_MODE_PEER (a dead peer fails its transfers at once). UCX
 * 1.13's shared-memory transports have no peer-failure handler, so
 * intra-node endpoints use no error handling and a dead local peer is found
 * by watching its process (pid and start time, exchanged at creation).
 *
 * Tags (64 bits): bit 63 marks control messages; bits 62..61 the message
 * space (p2p.h: collectives, point-to-point); 60..44 the source rank,
 * 43..28 the collective sequence number, 27..20 the step within the
 * collective (point-to-point spaces use these 24 bits for their own
 * numbering), 19..0 the call's signature. A receive matches on space,
 * source, sequence and step only; the sender's signature is then compared with the
 * receiver's, so ranks that called different collectives (or the same one
 * with another type, count, root or reduction) get an error instead of
 * silently mixing data. A message longer than the posted buffer is a
 * truncation error, a shorter one an error too: never wrong data.
 *
 * Threads: everything here except zppUcxAbort runs on one thread at a time
 * (the communicator's host executor). Every wait is bounded by the
 * communicator's timeout (measured from the last completed transfer) and
 * returns at once after an abort. Idle waits yield, then sleep on the
 * worker's event fd: ranks may outnumber cores.
 */
#ifndef ZPP_TRANSPORT_UCX_H_
#define ZPP_TRANSPORT_UCX_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "lib/transport/p2p.h"

struct zppComm;
typedef struct zppUcx zppUcx_t;
/* The UCX transport defines the interface's request (lib/transport/p2p.h). */
typedef struct zppP2pReq zppUcxReq_t;

#define ZPP_UCX_SIG_BITS 20
#define ZPP_UCX_SIG_MASK ((1u << ZPP_UCX_SIG_BITS) - 1u)

/* Collective over the communicator (uses its bootstrap and topology). */
zppResult_t zppUcxCreate(struct zppComm* comm, zppUcx_t** out);
/* Thread safe: makes every wait return at once with an error. */
void zppUcxAbort(zppUcx_t* ucx);
/* Closes endpoints (flushing what is in flight, bounded) and frees. NULL ok. */
void zppUcxDestroy(zppUcx_t* ucx);

void zppUcxSetSigFormatter(zppUcx_t* ucx, zppSigFormatter_t fn);
/* 1 when some machine of the communicator has more ranks than CPUs (their
 * affinity masks'): the same answer on every rank. */
int zppUcxRanksShareCores(const zppUcx_t* ucx);

/* Posts a send or a receive. The buffer must stay valid until a wait has
 * completed the request (or zppUcxQuiesce ran after an error). */
zppResult_t zppUcxIsend(zppUcx_t* ucx, int peer, const void* buf, size_t bytes, const zppMsgId_t* id,
                        zppUcxReq_t** req);
zppResult_t zppUcxIrecv(zppUcx_t* ucx, int peer, void* buf, size_t bytes, const zppMsgId_t* id,
                        zppUcxReq_t** req);
/* Waits for the n requests (NULL entries are skipped); completed ones are
 * released and their entries set to NULL. On error the reason is logged,
 * recorded on the communicator, and the remaining requests stay live until
 * zppUcxQuiesce. */
zppResult_t zppUcxWaitAll(zppUcx_t* ucx, zppUcxReq_t** reqs, int n);
/* Progresses and reports an error another rank announced, if any: a cheap
 * check before starting a collective. */
zppResult_t zppUcxPoll(zppUcx_t* ucx);
/* See the probe of lib/transport/p2p.h. */
zppResult_t zppUcxProbe(zppUcx_t* ucx, int peer, const zppMsgId_t* id, int* found);
/* Errors if a message of the completed collective (seq, sig) was left
 * unreceived: a sign that the ranks made different calls. */
zppResult_t zppUcxCheckLeftovers(zppUcx_t* ucx, uint32_t seq, uint32_t sig);
/* Posted sends and receives become a result of one blocking exchange. */
zppResult_t zppUcxSendRecv(zppUcx_t* ucx, int sendPeer, const void* sendBuf, size_t sendBytes,
                           int recvPeer, void* recvBuf, size_t recvBytes, const zppMsgId_t* id);

/* After an error: tells the other ranks (best effort, bounded), cancels every
 * live request and drops endpoints with sends in flight, so that no buffer
 * is touched after this returns. */
void zppUcxQuiesce(zppUcx_t* ucx);

/* Transport names of the endpoint to peer ("tcp", "sysv,cma", ...) after a
 * message exchange with it; for tests and diagnostics. */
zppResult_t zppUcxPeerTransports(zppUcx_t* ucx, int peer, char* buf, size_t len);

/* The interface the collectives use (lib/transport/p2p.h), over ucx: made
 * after zppUcxCreate, destroyed before zppUcxDestroy. */
zppResult_t zppUcxP2pCreate(zppUcx_t* ucx, zppP2p_t** out);
void zppUcxP2pDestroy(zppP2p_t* p2p);

/* Bytes sent, by operation kind and by whether the peer is on this node. */
void zppUcxGetBytes(const zppUcx_t* ucx, uint64_t* intra, uint64_t* inter, int nKinds);
void zppUcxResetBytes(zppUcx_t* ucx);

#endif /* ZPP_TRANSPORT_UCX_H_ */
