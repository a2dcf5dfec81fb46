/* Per-communicator accounting (zppCommGetStats, api/stats_api.c): calls
 * counted by the API layer, bytes by the host transport as it sends and by
 * the device path through zppStatsCountDevice (its rules: stats.h), codec
 * escapes by the collectives' context (collectives/coll_ctx.c). */
#include <stdatomic.h>
#include <string.h>

#include "zpp.h"
#include "check.h"
#include "zpp_build_config.h"
#include "lib/comm.h"
#include "lib/stats.h"
#include "lib/transport/transports.h"
#include "lib/transport/ucx.h"

void zppStatsRead(const struct zppComm* comm, zppCommStats_t* stats) {
  zppCommStats_t s;
  memset(&s, 0, sizeof(s));
  struct zppTransports* t = comm->transports;
  if (t) {
    for (int k = 0; k < zppNumOpKinds; k++)
      s.calls[k] = atomic_load_explicit(&t->calls[k], memory_order_relaxed);
    s.quantEscapes = atomic_load_explicit(&t->quantEscapes, memory_order_relaxed);
    s.quantEscapeOverflows = atomic_load_explicit(&t->quantEscapeOverflows, memory_order_relaxed);
    s.qgzPlainFallbacks = atomic_load_explicit(&t->qgzPlainFallbacks, memory_order_relaxed);
#if ZPP_HAVE_UCX
    if (t->ucx) zppUcxGetBytes(t->ucx, s.intraNodeBytes, s.interNodeBytes, zppNumOpKinds);
#endif
    for (int k = 0; k < zppNumOpKinds; k++) {
      s.intraNodeBytes[k] += atomic_load_explicit(&t->deviceBytes[k][0], memory_order_relaxed);
      s.interNodeBytes[k] += atomic_load_explicit(&t->deviceBytes[k][1], memory_order_relaxed);
    }
  }
  *stats = s;
}

void zppStatsReset(struct zppComm* comm) {
  struct zppTransports* t = comm->transports;
  if (t) {
    for (int k = 0; k < zppNumOpKinds; k++) {
      atomic_store_explicit(&t->calls[k], 0, memory_order_relaxed);
      atomic_store_explicit(&t->deviceBytes[k][0], 0, memory_order_relaxed);
      atomic_store_explicit(&t->deviceBytes[k][1], 0, memory_order_relaxed);
    }
    atomic_store_explicit(&t->quantEscapes, 0, memory_order_relaxed);
    atomic_store_explicit(&t->quantEscapeOverflows, 0, memory_order_relaxed);
    atomic_store_explicit(&t->qgzPlainFallbacks, 0, memory_order_relaxed);
#if ZPP_HAVE_UCX
    if (t->ucx) zppUcxResetBytes(t->ucx);
#endif
  }
}

void zppStatsCountDevice(struct zppComm* comm, zppOpKind_t kind, int peer, uint64_t bytes) {
  struct zppTransports* t = comm->transports;
  if (t == NULL || bytes == 0 || (int)kind < 0 || (int)kind >= zppNumOpKinds) return;
  const zppTopo_t* topo = comm->topo;
  const int node = topo->nodeOf[comm->rank];
  uint64_t intra = 0, inter = 0;
  if (peer == ZPP_STATS_EVERY_PEER) {
    intra = (uint64_t)(topo->nodeSize[node] - 1) * bytes;
    inter = (uint64_t)(comm->nranks - topo->nodeSize[node]) * bytes;
  } else if (peer >= 0 && peer < comm->nranks && peer != comm->rank) {
    if (topo->nodeOf[peer] == node)
      intra = bytes;
    else
      inter = bytes;
  }
  /* Device calls may come from several threads at once: atomic adds (they
   * are per call or per chunk, not per message as the host transport's). */
  if (intra) atomic_fetch_add_explicit(&t->deviceBytes[kind][0], intra, memory_order_relaxed);
  if (inter) atomic_fetch_add_explicit(&t->deviceBytes[kind][1], inter, memory_order_relaxed);
}
