/* The accounting's public calls (lib/stats.c counts). */
#include "zpp.h"
#include "check.h"
#include "lib/comm_internal.h"
#include "lib/stats.h"

zppResult_t zppCommGetStats(const zppComm_t comm, zppCommStats_t* stats) {
  ZPPCHECK_READY(zppCommStateCheckBuilt(comm, "zppCommGetStats"));
  ZPP_ARGCHECK(stats != NULL, "zppCommGetStats: stats is NULL");
  zppStatsRead(comm, stats);
  return zppSuccess;
}

zppResult_t zppCommResetStats(zppComm_t comm) {
  ZPPCHECK_READY(zppCommStateCheckBuilt(comm, "zppCommResetStats"));
  zppStatsReset(comm);
  return zppSuccess;
}
