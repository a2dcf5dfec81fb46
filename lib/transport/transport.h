/*
 * Transports, as the communicator sees them. The communicator calls these at
 * init, abort and destroy; the collectives reach the transports through
 * comm->transports (see the transport headers next to this one).
 */
#ifndef ZPP_TRANSPORT_H_
#define ZPP_TRANSPORT_H_

#include "zpp.h"

struct zppComm;

/* After bootstrap and topology exist: creates the host transport (UCX:
 * shared memory inside a node, network only between nodes) and prepares the
 * device transport (NCCL, created lazily on first device-buffer call).
 * Collective over the communicator's ranks. */
zppResult_t zppTransportsInit(struct zppComm* comm);
/* Makes every transfer in flight or to come fail at once; thread safe. */
void zppTransportsAbort(struct zppComm* comm);
/* Frees what Init made; accepts a half-built state. */
void zppTransportsDestroy(struct zppComm* comm);

#endif /* ZPP_TRANSPORT_H_ */
