/*
 * The communicator object (internal). Created by lib/comm.c
 * (bootstrap, topology), completed by the transports (lib/transport/), used
 * by the collectives (collectives/).
 */
#ifndef ZPP_COMM_H_
#define ZPP_COMM_H_

#include <pthread.h>
#include <stdatomic.h>

#include "zpp.h"
#include "lib/bootstrap/bootstrap.h"
#include "topology/topo.h"
#include "lib/compress_settings.h"

struct zppTransports; /* lib/transport/: UCX host transport, NCCL device transport */

struct zppComm {
  int rank;
  int nranks;
  double timeoutSec; /* bound on every wait */
  char hostId[ZPP_HOSTID_MAX];
  char name[64]; /* for logs */
  zppBootstrap_t* bootstrap;
  zppTopo_t* topo;
  struct zppTransports* transports;
  _Atomic int asyncError; /* zppResult_t; zppSuccess while healthy */
  _Atomic int aborted;    /* set by zppCommAbort or zppCommRevoke, from any thread */
  /* zppCommAbort of a healthy communicator: its destroy tells the peers
   * this rank left, so that their calls fail at once instead of at their
   * timeout (lib/transport/ucx_teardown.c). */
  int farewell;
  pthread_mutex_t errorLock;
  char lastError[512];            /* reason for asyncError, for zppGetLastError */
  zppCompressSettings_t compress; /* ZeRO++ settings (lib/compress_settings.c) */
  /* Creation (lib/comm.c). built: 1 once bootstrap, topology and transports
   * are all there (only then are topo and transports read). blocking = 0
   * (config.blocking) builds them in the thread `creator`, and `creating`
   * is 1 while it works: the calls that need them answer zppInProgress. */
  int blocking;
  _Atomic int built;
  _Atomic int creating;
  int hasCreator;
  pthread_t creator;
};

/* The reason the communicator broke, or the last error logged anywhere
 * (zppGetLastError's answer). */
const char* zppCommStateLastError(const struct zppComm* comm);

/* Records the first error that broke the communicator and its reason; later
 * calls fail fast with it. Thread safe. */
void zppCommStateSetError(struct zppComm* comm, zppResult_t error, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* zppSuccess if comm is a live communicator, else logs and returns
 * zppInvalidArgument (NULL, destroyed) or its async error. */
zppResult_t zppCommStateCheckUsable(const struct zppComm* comm);

#endif /* ZPP_COMM_H_ */
