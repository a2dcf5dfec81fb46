/* Point-to-point on device buffers (p2p.h): NCCL's own ncclSend/ncclRecv
 * inside one ncclGroupStart/ncclGroupEnd, on the caller's streams. NCCL
 * matches them in issue order per pair, as the host path does. */
#include "p2p.h"

#include <stdlib.h>

#include "check.h"
#include "zpp_build_config.h"

#if ZPP_HAVE_NCCL
#include <nccl.h>
#include <stdint.h>

#include "names.h"
#include "lib/comm.h"
#include "lib/stats.h"
#include "lib/transport/nccl.h"
#include "lib/transport/transports.h"

zppResult_t zppDeviceP2pIssue(struct zppComm* const* comms, const zppP2pOp_t* ops, void* const* streams,
                              int n) {
  ncclComm_t* nc = calloc((size_t)(n > 0 ? n : 1), sizeof(*nc));
  if (nc == NULL) ZPP_FAIL(zppSystemError, CUDA, "out of memory for %d device operations", n);
  zppResult_t res = zppSuccess;
  /* Every communicator's NCCL side first (its creation is collective). */
  for (int i = 0; i < n && res == zppSuccess; i++) {
    struct zppNccl* nccl = NULL;
    res = zppTransportsGetNccl(comms[i], &nccl);
    if (res == zppSuccess) nc[i] = (ncclComm_t)zppNcclHandle(nccl);
    if (res == zppSuccess && nc[i] == NULL)
      ZPP_FAILGOTO(zppInvalidUsage, res, out, CUDA, "%s: its NCCL communicator was aborted",
                   comms[i]->name);
  }
  if (res != zppSuccess) goto out;
  ncclResult_t nr = ncclGroupStart();
  if (nr != ncclSuccess)
    ZPP_FAILGOTO((zppResult_t)nr, res, out, CUDA, "ncclGroupStart failed: %s", ncclGetErrorString(nr));
  for (int i = 0; i < n; i++) {
    const zppP2pOp_t* o = &ops[i];
    /* zpp's data types are NCCL's, value for value (zpp.h). */
    nr = o->isSend ? ncclSend(o->sendbuff, o->count, (ncclDataType_t)o->type, o->peer, nc[i],
                              (cudaStream_t)streams[i])
                   : ncclRecv(o->recvbuff, o->count, (ncclDataType_t)o->type, o->peer, nc[i],
                              (cudaStream_t)streams[i]);
    if (nr != ncclSuccess) {
      (void)ncclGroupEnd();
      ZPP_FAILGOTO((zppResult_t)nr, res, out, CUDA, "%s: %s of %zu elements %s rank %d failed: %s",
                   comms[i]->name, o->isSend ? "ncclSend" : "ncclRecv", o->count,
                   o->isSend ? "to" : "from", o->peer, ncclGetErrorString(nr));
    }
  }
  nr = ncclGroupEnd();
  if (nr != ncclSuccess && nr != ncclInProgress)
    ZPP_FAILGOTO((zppResult_t)nr, res, out, CUDA,
                 "ncclGroupEnd of %d point-to-point operations failed: %s", n, ncclGetErrorString(nr));
  for (int i = 0; i < n; i++) /* exact: each send's bytes (lib/stats.h) */
    if (ops[i].isSend)
      zppStatsCountDevice(comms[i], zppOpSendRecv, ops[i].peer,
                          (uint64_t)ops[i].count * zppDtypeSize(ops[i].type));
out:
  free(nc);
  return res;
}

#else /* a build without NCCL: device buffers are refused (api_check.c says so first) */

zppResult_t zppDeviceP2pIssue(struct zppComm* const* comms, const zppP2pOp_t* ops, void* const* streams,
                              int n) {
  (void)comms, (void)ops, (void)streams, (void)n;
  ZPP_FAIL(zppInvalidUsage, ALL, "device buffers need NCCL, and this zpp was built without it");
}

#endif
