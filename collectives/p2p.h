/*
 * Point-to-point (zppSend, zppRecv, the tagged forms) as the API layer
 * issues them: a group of operations, or one call outside a group, becomes
 * one job on the communicator's host executor (p2p.c) or one NCCL group
 * on the caller's stream (p2p_device.c).
 */
#ifndef ZPP_P2P_H_
#define ZPP_P2P_H_

#include <stddef.h>

#include "zpp.h"

struct zppComm;

typedef struct {
  int isSend;
  int tagged; /* zppSendTagged / zppRecvTagged */
  int peer;   /* a rank, or ZPP_ANY_SOURCE (tagged receives) */
  int tag;    /* tagged only, >= 0 */
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  zppDataType_t type;
  int* source; /* tagged receives: the sender, written once done (may be NULL) */
} zppP2pOp_t;

/* Issues the n operations at once on comm's host executor, arguments already
 * validated: receives and sends are all posted before any is waited for,
 * so no set of them can deadlock; self-sends are matched inside the set.
 * Takes ops (malloc'd), freed whatever happens. stream: NULL (returns when
 * all completed) or a host stream (queued as one operation). */
zppResult_t zppHostP2pIssue(struct zppComm* comm, zppP2pOp_t* ops, int n, zppHostStream_t stream);

/* Device buffers: the n operations (operation i on comms[i], streams[i],
 * untagged) between ncclGroupStart and ncclGroupEnd; stream-ordered, never
 * blocks the host. zppInvalidUsage in a build without NCCL. */
zppResult_t zppDeviceP2pIssue(struct zppComm* const* comms, const zppP2pOp_t* ops, void* const* streams,
                              int n);

#endif /* ZPP_P2P_H_ */
