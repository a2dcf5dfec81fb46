/*
 * -N: zpp-perf starts its own ranks, so that a measurement needs no
 * launcher: the project's fork launcher (perf/common/launch.h) runs N children,
 * rank 0 makes the unique id and hands it over a pipe, --layout becomes
 * ZPP_HOSTID=node<k> per rank. Each child builds its communicator and runs
 * the whole measurement; the parent only waits and merges exit codes.
 *
 * Never hang: every child dies with the parent (the launcher sets
 * PR_SET_PDEATHSIG), a child whose rank 0 died reads EOF instead of the id,
 * and every wait inside the library is bounded by ZPP_TIMEOUT (--timeout).
 * The launcher's own deadline is set out of reach: a large sweep on a slow
 * link legitimately runs for a long time.
 */
#include <stdlib.h>
#include <string.h>

#include "perf/common/launch.h"
#include "zpp_perf.h"

/* Under INT_MAX milliseconds, which the launcher's poll() takes. */
#define ZPP_PERF_LAUNCH_DEADLINE_SEC 2.0e6

void zppPerfApplyLayout(const zppPerfArgs_t* a, int rank) {
  if (a->layout == NULL || rank >= a->layoutRanks) return; /* a count mismatch is reported later */
  char host[32];
  snprintf(host, sizeof host, "node%d", a->layoutNodeOf[rank]);
  setenv("ZPP_HOSTID", host, 1);
}

int zppPerfRankMain(const zppPerfArgs_t* a, zppPerfEnv_t* env) {
  zppResult_t res = zppCommTopology(env->comm, &env->topo);
  int code;
  if (res != zppSuccess) {
    zppPerfLibError(env, "zppCommTopology", res);
    code = ZPP_PERF_EXIT_ERROR;
  } else {
    code = zppPerfRunAll(a, env);
  }
  /* A rank that failed may leave peers mid-collective: abort rather than
   * destroy, which would wait for operations that will never complete. */
  if (code == ZPP_PERF_EXIT_ERROR)
    zppCommAbort(env->comm);
  else
    zppCommDestroy(env->comm);
  env->comm = NULL;
  return code;
}

static int zppPerfForkChild(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const zppPerfArgs_t* a = arg;
  zppPerfEnv_t env;
  memset(&env, 0, sizeof env);
  env.rank = rank;
  env.nranks = nranks;
  env.launcher = "fork";
  zppResult_t res = zppCommInitRank(&env.comm, nranks, *id, rank);
  if (res != zppSuccess) {
    zppPerfLibError(&env, "zppCommInitRank", res);
    return ZPP_PERF_EXIT_ERROR;
  }
  return zppPerfRankMain(a, &env);
}

static int zppPerfSeverity(int code) {
  switch (code) {
    case ZPP_PERF_EXIT_OK: return 0;
    case ZPP_PERF_EXIT_WRONG: return 1;
    case ZPP_PERF_EXIT_USAGE: return 2;
    default: return 3; /* ZPP_PERF_EXIT_ERROR and anything unexpected */
  }
}

static int zppPerfWorse(int a, int b) {
  int w = zppPerfSeverity(a) >= zppPerfSeverity(b) ? a : b;
  return zppPerfSeverity(w) == 3 ? ZPP_PERF_EXIT_ERROR : w;
}

int zppPerfForkRun(const zppPerfArgs_t* a) {
  int n = a->forkRanks;
  if (n > ZPP_LAUNCH_MAX_RANKS) {
    fprintf(stderr, "zpp-perf: -N %d: at most %d ranks on one machine\n", n, ZPP_LAUNCH_MAX_RANKS);
    return ZPP_PERF_EXIT_USAGE;
  }
  int status[ZPP_LAUNCH_MAX_RANKS];
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = n;
  o.layout = a->layout;
  o.timeoutSec = ZPP_PERF_LAUNCH_DEADLINE_SEC;
  o.statusOut = status;
  o.quiet = 1; /* our own report below: a wrong result is not a crash */
  for (int r = 0; r < n; r++) status[r] = ZPP_PERF_EXIT_ERROR;
  int rc = zppLaunch(&o, zppPerfForkChild, (void*)a);
  if (rc == 2) return ZPP_PERF_EXIT_ERROR; /* the launch itself failed; it said why */
  int worst = ZPP_PERF_EXIT_OK;
  for (int r = 0; r < n; r++) {
    if (status[r] > 128) {
      fprintf(stderr, "zpp-perf: rank %d died: signal %d\n", r, status[r] - 128);
    } else if (status[r] < 0) {
      fprintf(stderr, "zpp-perf: rank %d killed at the launcher's deadline\n", r);
    }
    worst = zppPerfWorse(worst, status[r] < 0 || status[r] > 128 ? ZPP_PERF_EXIT_ERROR : status[r]);
  }
  return worst;
}
