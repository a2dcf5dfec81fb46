/* The communicator's public calls: check the arguments, then ask the
 * runtime (lib/comm.c, lib/comm_env.c). Creation also checks every
 * collective setting of the environment, so that a typo in ZPP_ALGO_* fails
 * here, naming it, not in some later call. */
#include <stdatomic.h>

#include "zpp.h"
#include "check.h"
#include "lib/comm.h"
#include "lib/comm_internal.h"
#include "collectives/coll.h"

zppResult_t zppGetUniqueId(zppUniqueId* uniqueId) {
  ZPP_ARGCHECK(uniqueId != NULL, "zppGetUniqueId: uniqueId is NULL");
  return zppCommStateNewUniqueId(uniqueId);
}

zppResult_t zppCommInitRankConfig(zppComm_t* comm, int nranks, zppUniqueId commId, int rank,
                                  zppConfig_t* config) {
  ZPP_ARGCHECK(comm != NULL, "zppCommInitRank: comm (the output) is NULL");
  ZPP_ARGCHECK(nranks >= 1, "zppCommInitRank: nranks=%d must be at least 1", nranks);
  ZPP_ARGCHECK(rank >= 0 && rank < nranks, "zppCommInitRank: rank %d out of range 0..%d", rank,
               nranks - 1);
  ZPPCHECK(zppCollSettingsCheck());
  zppCommSettings_t s;
  ZPPCHECK(zppCommStateResolveSettings(config, &s));
  return zppCommStateInitWithSettings(comm, nranks, &commId, rank, &s);
}

zppResult_t zppCommInitRank(zppComm_t* comm, int nranks, zppUniqueId commId, int rank) {
  return zppCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

zppResult_t zppCommInitFromEnv(zppComm_t* comm, zppConfig_t* config) {
  ZPP_ARGCHECK(comm != NULL, "zppCommInitFromEnv: comm (the output) is NULL");
  ZPPCHECK(zppCollSettingsCheck());
  return zppCommStateInitFromEnv(comm, config);
}

zppResult_t zppCommSplit(zppComm_t comm, int color, int key, zppComm_t* newcomm, zppConfig_t* config) {
  ZPP_ARGCHECK(newcomm != NULL, "zppCommSplit: newcomm (the output) is NULL");
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  ZPPCHECK(zppCollSettingsCheck());
  return zppCommStateSplit(comm, color, key, config, newcomm);
}

zppResult_t zppCommDestroy(zppComm_t comm) {
  if (comm == NULL) return zppSuccess;
  return zppCommStateDestroy(comm);
}

zppResult_t zppCommAbort(zppComm_t comm) {
  if (comm == NULL) return zppSuccess;
  return zppCommStateAbort(comm);
}

zppResult_t zppCommRevoke(zppComm_t comm) { return zppCommStateRevoke(comm); }

zppResult_t zppCommShrink(zppComm_t comm, const int* excludeRanks, int excludeCount, zppComm_t* newcomm,
                          zppConfig_t* config, int shrinkFlags) {
  ZPP_ARGCHECK(newcomm != NULL, "zppCommShrink: newcomm (the output) is NULL");
  *newcomm = NULL;
  /* Live, not usable: a broken or revoked communicator is what one shrinks. */
  ZPPCHECK_READY(zppCommStateCheckBuilt(comm, "zppCommShrink"));
  ZPPCHECK(zppCollSettingsCheck());
  return zppCommStateShrink(comm, excludeRanks, excludeCount, config, shrinkFlags, newcomm);
}

zppResult_t zppCommGetGrowId(zppComm_t comm, zppUniqueId* growId) {
  ZPP_ARGCHECK(growId != NULL, "zppCommGetGrowId: growId (the output) is NULL");
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  return zppCommStateGetGrowId(comm, growId);
}

zppResult_t zppCommGrow(zppComm_t comm, int nranks, const zppUniqueId* growId, int rank,
                        zppComm_t* newcomm, zppConfig_t* config) {
  ZPP_ARGCHECK(newcomm != NULL, "zppCommGrow: newcomm (the output) is NULL");
  *newcomm = NULL;
  ZPP_ARGCHECK(growId != NULL, "zppCommGrow: growId is NULL (zppCommGetGrowId makes it)");
  if (comm != NULL) {
    ZPPCHECK_READY(zppCommStateCheckUsable(comm));
    ZPP_ARGCHECK(nranks > comm->nranks,
                 "zppCommGrow: nranks %d must be more than the communicator's %d ranks", nranks,
                 comm->nranks);
    ZPP_ARGCHECK(rank == -1 || rank == comm->rank,
                 "zppCommGrow: rank %d: a rank of the communicator keeps its rank %d (pass -1)", rank,
                 comm->rank);
  } else {
    ZPP_ARGCHECK(nranks >= 2, "zppCommGrow: nranks=%d must be at least 2", nranks);
    ZPP_ARGCHECK(rank >= 1 && rank < nranks,
                 "zppCommGrow: a joining process's rank %d out of range 1..%d (it follows the "
                 "communicator's ranks)",
                 rank, nranks - 1);
  }
  ZPPCHECK(zppCollSettingsCheck());
  return zppCommStateGrow(comm, nranks, growId, rank, config, newcomm);
}

zppResult_t zppCommCount(const zppComm_t comm, int* count) {
  ZPPCHECK(zppCommStateCheckLive(comm, "zppCommCount"));
  ZPP_ARGCHECK(count != NULL, "zppCommCount: count is NULL");
  *count = comm->nranks;
  return zppSuccess;
}

zppResult_t zppCommUserRank(const zppComm_t comm, int* rank) {
  ZPPCHECK(zppCommStateCheckLive(comm, "zppCommUserRank"));
  ZPP_ARGCHECK(rank != NULL, "zppCommUserRank: rank is NULL");
  *rank = comm->rank;
  return zppSuccess;
}

zppResult_t zppCommGetAsyncError(zppComm_t comm, zppResult_t* asyncError) {
  ZPPCHECK(zppCommStateCheckLive(comm, "zppCommGetAsyncError"));
  ZPP_ARGCHECK(asyncError != NULL, "zppCommGetAsyncError: asyncError is NULL");
  *asyncError = zppCommStateAsyncError(comm);
  return zppSuccess;
}

const char* zppGetLastError(zppComm_t comm) { return zppCommStateLastError(comm); }

zppResult_t zppCommTopology(const zppComm_t comm, zppTopology_t* topology) {
  ZPPCHECK_READY(zppCommStateCheckBuilt(comm, "zppCommTopology"));
  ZPP_ARGCHECK(topology != NULL, "zppCommTopology: topology is NULL");
  const zppTopo_t* t = comm->topo;
  zppTopology_t out;
  out.nNodes = t->nNodes;
  out.node = t->nodeOf[comm->rank];
  out.localRank = t->localRankOf[comm->rank];
  out.localSize = t->nodeSize[out.node];
  out.uniform = t->uniform;
  *topology = out;
  return zppSuccess;
}
