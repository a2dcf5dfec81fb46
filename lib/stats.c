/* Per-communicator accounting (zppCommGetStats, api/stats_api.c): calls
 * counted by the API layer, bytes by the host transport as it sends, codec
 * escapes by the collectives' context (collectives/coll_ctx.c).
 * Device-buffer operations count calls only: NCCL does not say what it sent. */
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
#if ZPP_HAVE_UCX
    if (t->ucx) zppUcxGetBytes(t->ucx, s.intraNodeBytes, s.interNodeBytes, zppNumOpKinds);
#endif
  }
  *stats = s;
}

void zppStatsReset(struct zppComm* comm) {
  struct zppTransports* t = comm->transports;
  if (t) {
    for (int k = 0; k < zppNumOpKinds; k++)
      atomic_store_explicit(&t->calls[k], 0, memory_order_relaxed);
    atomic_store_explicit(&t->quantEscapes, 0, memory_order_relaxed);
    atomic_store_explicit(&t->quantEscapeOverflows, 0, memory_order_relaxed);
#if ZPP_HAVE_UCX
    if (t->ucx) zppUcxResetBytes(t->ucx);
#endif
  }
}
