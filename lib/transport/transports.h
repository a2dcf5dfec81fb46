/*
 * The communicator's transports, as the layers above (collectives, API)
 * reach them: the host transport through its interface (p2p.h) with the
 * host executor that owns it, and the NCCL device transport, made on the
 * first device-buffer call. The UCX type stays below (ucx.h).
 */
#ifndef ZPP_TRANSPORTS_H_
#define ZPP_TRANSPORTS_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "zpp.h"
#include "lib/executor.h"
#include "lib/transport/transport.h"
#include "lib/transport/p2p.h"

struct zppNccl;
struct zppUcx;

struct zppTransports {
  struct zppUcx* ucx;  /* NULL with one rank or without UCX */
  zppP2p_t* p2p;       /* ucx as the collectives see it; NULL when ucx is */
  zppExecutor_t* exec; /* runs host-buffer operations; owns ucx */
  pthread_mutex_t ncclLock;
  struct zppNccl* nccl;                  /* made lazily, under ncclLock */
  int ncclFailed;                        /* creation failed once: do not retry */
  _Atomic uint64_t calls[zppNumOpKinds]; /* collectives issued, by kind */
  _Atomic uint64_t quantEscapes;         /* the codecs' escapes (zppCommStats_t) */
  _Atomic uint64_t quantEscapeOverflows;
  _Atomic uint64_t qgzPlainFallbacks; /* zppCommStats_t */
  /* The device path's bytes by kind, [0] intra-node, [1] inter-node: NCCL
   * does not report what it sends, so zppStatsCountDevice counts them
   * (lib/stats.h says what, per call); the host transport counts its own. */
  _Atomic uint64_t deviceBytes[zppNumOpKinds][2];
};

/* The device transport, created on first use (collective: every rank's first
 * device-buffer operation makes it). zppInvalidUsage without NCCL. */
zppResult_t zppTransportsGetNccl(struct zppComm* comm, struct zppNccl** out);

/* Transport names of the UCX endpoint to peer (for tests): runs on the
 * executor after the operations issued before it. */
zppResult_t zppTransportsPeerTransports(struct zppComm* comm, int peer, char* buf, size_t len);

#endif /* ZPP_TRANSPORTS_H_ */
