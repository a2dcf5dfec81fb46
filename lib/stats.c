/* Per-communicator accounting (zppCommGetStats): calls counted by the API
 * layer, bytes by the host transport as it sends. Device-buffer operations
 * count calls only: NCCL does not say what it sent. */
#include <stdatomic.h>
#include <string.h>

#include "zpp.h"
#include "check.h"
#include "handles.h"
#include "zpp_build_config.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"
#include "lib/transport/ucx.h"

zppResult_t zppCommGetStats(const zppComm_t comm, zppCommStats_t* stats) {
  ZPP_ARGCHECK(zppHandleIsLive(comm, ZPP_HANDLE_COMM), "zppCommGetStats: not a live communicator");
  ZPP_ARGCHECK(stats != NULL, "zppCommGetStats: stats is NULL");
  zppCommStats_t s;
  memset(&s, 0, sizeof(s));
  struct zppTransports* t = comm->transports;
  if (t) {
    for (int k = 0; k < zppNumOpKinds; k++)
      s.calls[k] = atomic_load_explicit(&t->calls[k], memory_order_relaxed);
#if ZPP_HAVE_UCX
    if (t->ucx) zppUcxGetBytes(t->ucx, s.intraNodeBytes, s.interNodeBytes, zppNumOpKinds);
#endif
  }
  *stats = s;
  return zppSuccess;
}

zppResult_t zppCommResetStats(zppComm_t comm) {
  ZPP_ARGCHECK(zppHandleIsLive(comm, ZPP_HANDLE_COMM), "zppCommResetStats: not a live communicator");
  struct zppTransports* t = comm->transports;
  if (t) {
    for (int k = 0; k < zppNumOpKinds; k++) atomic_store_explicit(&t->calls[k], 0, memory_order_relaxed);
#if ZPP_HAVE_UCX
    if (t->ucx) zppUcxResetBytes(t->ucx);
#endif
  }
  return zppSuccess;
}

const char* zppOpKindName(zppOpKind_t kind) {
  static const char* names[zppNumOpKinds] = {"allgather", "reducescatter", "allreduce", "alltoall",
                                             "broadcast", "qwz",           "hpz",       "qgz"};
  return ((int)kind >= 0 && kind < zppNumOpKinds) ? names[kind] : "unknown";
}
