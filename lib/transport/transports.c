/* The communicator's transports: transport.h for the communicator,
 * transports.h for the layers above. */
#include "transports.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zpp_build_config.h"
#include "lib/comm.h"
#include "lib/transport/ucx.h"
#if ZPP_HAVE_NCCL
#include "lib/transport/nccl.h"
#endif

zppResult_t zppTransportsInit(struct zppComm* comm) {
  zppResult_t res = zppSuccess;
  struct zppTransports* t = NULL;
  ZPP_CALLOC(t, 1);
  pthread_mutex_init(&t->ncclLock, NULL);
  comm->transports = t;
  if (comm->nranks > 1) {
#if ZPP_HAVE_UCX
    ZPPCHECKGOTO(zppUcxCreate(comm, &t->ucx), res, out);
    ZPPCHECKGOTO(zppUcxP2pCreate(t->ucx, &t->p2p), res, out);
#else
    ZPP_WARN(NET, "%s: built without UCX: collectives on host buffers will fail", comm->name);
#endif
  }
  ZPPCHECKGOTO(zppExecutorCreate(comm, &t->exec), res, out);
out:
  /* On failure the communicator calls zppTransportsDestroy. */
  return res;
}

void zppTransportsAbort(struct zppComm* comm) {
  struct zppTransports* t = comm ? comm->transports : NULL;
  if (t == NULL) return;
  zppExecutorAbort(t->exec);
#if ZPP_HAVE_UCX
  zppUcxAbort(t->ucx);
#endif
#if ZPP_HAVE_NCCL
  /* Not under ncclLock: a thread may hold it while NCCL init hangs, and
   * ncclCommAbort is what unblocks it. */
  zppNcclAbort(t->nccl);
#endif
}

void zppTransportsDestroy(struct zppComm* comm) {
  struct zppTransports* t = comm ? comm->transports : NULL;
  if (t == NULL) return;
  /* Operations already issued finish first (or fail, after an abort). */
  zppExecutorDestroy(t->exec);
  t->exec = NULL;
#if ZPP_HAVE_UCX
  zppUcxP2pDestroy(t->p2p);
  if (t->ucx) {
    /* A rank that closes its endpoints while others still talk to it would
     * look to them like a failed peer: wait until every rank is done. */
    int healthy = !atomic_load(&comm->aborted) && atomic_load(&comm->asyncError) == zppSuccess;
    /* One that fails means a peer is gone: recorded, so that UCX closes as
     * on a broken communicator instead of waiting out a goodbye from the
     * dead (CLOSE_WAIT_SEC per endpoint state; 4 s seen with one dead peer
     * and one hung: torch_errors_abort). */
    if (healthy && comm->bootstrap && zppBootstrapBarrier(comm->bootstrap) != zppSuccess)
      zppCommStateSetError(comm, zppRemoteError,
                           "%s: rank %d: the other ranks did not all reach zppCommDestroy", comm->name,
                           comm->rank);
    zppUcxDestroy(t->ucx);
  }
#endif
#if ZPP_HAVE_NCCL
  zppNcclDestroy(t->nccl);
#endif
  pthread_mutex_destroy(&t->ncclLock);
  free(t);
  comm->transports = NULL;
}

zppResult_t zppTransportsGetNccl(struct zppComm* comm, struct zppNccl** out) {
#if ZPP_HAVE_NCCL
  struct zppTransports* t = comm->transports;
  zppResult_t res = zppSuccess;
  pthread_mutex_lock(&t->ncclLock);
  if (t->nccl == NULL) {
    if (t->ncclFailed) {
      res = zppInvalidUsage;
      ZPP_ERR(CUDA, "%s: the NCCL communicator could not be created earlier", comm->name);
    } else if ((res = zppNcclCreate(comm, &t->nccl)) != zppSuccess) {
      t->ncclFailed = 1;
      t->nccl = NULL;
    }
  }
  *out = t->nccl;
  pthread_mutex_unlock(&t->ncclLock);
  return res;
#else
  (void)comm;
  (void)out;
  ZPP_FAIL(zppInvalidUsage, CUDA, "device buffers need NCCL, and this zpp was built without it");
#endif
}

typedef struct {
  int peer;
  char* buf;
  size_t len;
} peerQuery_t;

static zppResult_t peerTransportsJob(struct zppComm* comm, void* arg) {
  peerQuery_t* q = arg;
#if ZPP_HAVE_UCX
  if (comm->transports->ucx)
    return zppUcxPeerTransports(comm->transports->ucx, q->peer, q->buf, q->len);
#endif
  ZPP_FAIL(zppInvalidUsage, NET, "no UCX transport on this communicator");
}

zppResult_t zppTransportsPeerTransports(struct zppComm* comm, int peer, char* buf, size_t len) {
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  peerQuery_t q = {peer, buf, len};
  return zppExecutorSubmit(comm->transports->exec, peerTransportsJob, NULL, &q, sizeof(q), NULL);
}
