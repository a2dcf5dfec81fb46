/*
 * Per-communicator accounting, for zppCommGetStats / zppCommResetStats
 * (api/stats_api.c): calls per kind, and the host transport's bytes inside
 * and across nodes per kind.
 */
#ifndef ZPP_STATS_H_
#define ZPP_STATS_H_

#include "zpp.h"

struct zppComm;

void zppStatsRead(const struct zppComm* comm, zppCommStats_t* stats);
void zppStatsReset(struct zppComm* comm);

#endif /* ZPP_STATS_H_ */
