/*
 * zppCommGrow: a communicator of an existing one's ranks and new processes.
 *
 * One rank of the communicator opens a rendezvous root of its own, in the
 * background, and its id is the grow id (zppCommGetGrowId): the caller hands
 * it to the other ranks and to the new processes, out of band. Every member
 * then joins that root and the new communicator is built as any other
 * (bootstrap, topology from the members' node identities, transports). The
 * id is marked as one whose root was already listening: once the group has
 * formed (or the timeout passed) the root is gone and a late or second use
 * of the id fails at once, never joins another group.
 *
 * The root checks what it can alone (one nranks, no rank twice, the
 * secret). What it cannot know is which member is old and which is new;
 * so the members all-gather the size of the communicator each came from (0
 * for a new process) and all check the same table: the old ranks are
 * exactly 0 .. size-1 of one communicator, every other rank is new. A table
 * that breaks that fails on every member alike.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "log.h"
#include "lib/comm.h"
#include "lib/comm_internal.h"

zppResult_t zppCommStateGetGrowId(struct zppComm* comm, zppUniqueId* id) {
  ZPPCHECK(zppBootstrapCreateRoot(id, NULL, 0, -1, NULL, 0, comm->timeoutSec));
  zppBootstrapIdMarkRootStarted(id);
  ZPP_INFO(INIT, "comm %s rank %d: grow id made (its root waits %.0f s for the members)", comm->name,
           comm->rank, comm->timeoutSec);
  return zppSuccess;
}

/* Every member's table of where each came from (its parent's size, 0 when
 * new), checked the same way on all. */
static zppResult_t checkMembers(const struct zppComm* grown, const int32_t* from) {
  const int n = grown->nranks;
  int32_t oldSize = 0;
  for (int r = 0; r < n; r++)
    if (from[r] > oldSize) oldSize = from[r];
  if (oldSize == 0)
    ZPP_FAIL(zppInvalidUsage, INIT,
             "comm %s: zppCommGrow: no rank of an existing communicator took part (its ranks call "
             "zppCommGrow with it; for processes alone use zppCommInitRank)",
             grown->name);
  if (oldSize >= n)
    ZPP_FAIL(zppInvalidUsage, INIT,
             "comm %s: zppCommGrow: nranks %d is not more than the %d ranks of the communicator "
             "grown",
             grown->name, n, oldSize);
  for (int r = 0; r < n; r++) {
    if (from[r] != 0 && from[r] != oldSize)
      ZPP_FAIL(zppInvalidUsage, INIT,
               "comm %s: zppCommGrow: rank %d comes from a %d-rank communicator, others from a "
               "%d-rank one: one communicator grows at a time",
               grown->name, r, from[r], oldSize);
    if (r < oldSize && from[r] == 0)
      ZPP_FAIL(zppInvalidUsage, INIT,
               "comm %s: zppCommGrow: a new process joined as rank %d, which is a rank of the "
               "communicator grown (new ranks are %d..%d)",
               grown->name, r, oldSize, n - 1);
  }
  /* r >= oldSize with from[r] == oldSize cannot happen: an old rank keeps
   * its rank, which is below its parent's size. */
  return zppSuccess;
}

zppResult_t zppCommStateGrowCheck(struct zppComm* grown, int fromSize) {
  int32_t* from = calloc((size_t)grown->nranks, sizeof(*from));
  if (from == NULL) ZPP_FAIL(zppSystemError, INIT, "out of memory");
  from[grown->rank] = fromSize;
  zppResult_t res = zppBootstrapAllGather(grown->bootstrap, from, sizeof(*from));
  if (res == zppSuccess) res = checkMembers(grown, from);
  free(from);
  return res;
}

zppResult_t zppCommStateGrow(struct zppComm* parent, int nranks, const zppUniqueId* id, int rank,
                             const zppConfig_t* config, zppComm_t* out) {
  zppCommSettings_t s;
  if (parent != NULL) {
    ZPPCHECK(zppCommStateChildSettings(parent, config, &s));
    rank = parent->rank;
  } else {
    ZPPCHECK(zppCommStateResolveSettings(config, &s));
    s.announcedHostIds = 1; /* nodes from what the members say, as the parent's ranks do */
  }
  s.grow = 1;
  s.growFromSize = parent != NULL ? parent->nranks : 0;
  const char* parentName = parent != NULL ? parent->name : s.name;
  ZPP_INFO(INIT, "comm %s: grow to %d ranks: %s rank %d", parentName, nranks,
           parent != NULL ? "keeps" : "joins as", rank);
  zppResult_t res = zppCommStateInitWithSettings(out, nranks, id, rank, &s);
  if (res != zppSuccess && res != zppInProgress) {
    char why[512];
    snprintf(why, sizeof(why), "%s", zppLogLastError()); /* the log rewrites it below */
    ZPP_ERR(INIT, "comm %s rank %d: zppCommGrow to %d ranks failed: %s", parentName, rank, nranks, why);
  }
  return res;
}
