/*
 * zpp-perf: bandwidth of zpp's collectives, the way nccl-tests measures
 * NCCL's, with the ZeRO++ modes and a baseline beside every row. See
 * zpp_perf.h for the files and zpp-perf -h for the flags.
 *
 * How the ranks come to be, in order of precedence:
 *   -N RANKS       the tool forks them (zpp_perf_launch.c);
 *   mpirun         with MPI built in: MPI_Init, rank 0's unique id goes out
 *                  by MPI_Bcast (and --baseline mpi becomes possible);
 *                  without MPI: OMPI_COMM_WORLD_* plus MASTER_ADDR/PORT;
 *   torchrun-style RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
 *   srun           SLURM_PROCID, SLURM_NTASKS; the root from the step
 *                  (core/launcher_env.h reads all of these);
 *   nothing        one rank.
 */
#include <stdlib.h>
#include <string.h>

#include "core/launcher_env.h"
#include "zpp_perf.h"

static int zppPerfOmpiEnv(void) { return getenv("OMPI_COMM_WORLD_SIZE") != NULL; }

/* Communicator from the launcher's environment, without MPI in between. */
static int zppPerfInitFromEnv(const zppPerfArgs_t* a, zppPerfEnv_t* env) {
  zppPerfApplyLayout(a, zppLauncherEnvRank());
  zppResult_t res = zppCommInitFromEnv(&env->comm, NULL);
  if (res != zppSuccess) {
    env->rank = zppLauncherEnvRank();
    zppPerfLibError(env, "zppCommInitFromEnv (the launcher's environment)", res);
    return ZPP_PERF_EXIT_ERROR;
  }
  zppCommUserRank(env->comm, &env->rank);
  zppCommCount(env->comm, &env->nranks);
  return ZPP_PERF_EXIT_OK;
}

static int zppPerfInitMpi(const zppPerfArgs_t* a, zppPerfEnv_t* env) {
  if (zppPerfMpiRankSize(&env->rank, &env->nranks) != 0) return ZPP_PERF_EXIT_ERROR;
  zppPerfApplyLayout(a, env->rank);
  zppUniqueId id;
  memset(&id, 0, sizeof id);
  zppResult_t res = zppSuccess;
  if (env->rank == 0 && (res = zppGetUniqueId(&id)) != zppSuccess)
    zppPerfLibError(env, "zppGetUniqueId", res);
  if (!zppPerfMpiBcastId(&id, res == zppSuccess)) {
    if (env->rank != 0)
      fprintf(stderr, "zpp-perf: rank %d: rank 0 could not create the unique id\n", env->rank);
    return ZPP_PERF_EXIT_ERROR;
  }
  res = zppCommInitRank(&env->comm, env->nranks, id, env->rank);
  if (res != zppSuccess) {
    zppPerfLibError(env, "zppCommInitRank", res);
    return ZPP_PERF_EXIT_ERROR;
  }
  return ZPP_PERF_EXIT_OK;
}

static int zppPerfInitSingle(zppPerfEnv_t* env) {
  zppUniqueId id;
  zppResult_t res = zppGetUniqueId(&id);
  if (res == zppSuccess) res = zppCommInitRank(&env->comm, 1, id, 0);
  if (res != zppSuccess) {
    zppPerfLibError(env, "creating a one-rank communicator", res);
    return ZPP_PERF_EXIT_ERROR;
  }
  return ZPP_PERF_EXIT_OK;
}

int main(int argc, char** argv) {
  int envRank = zppLauncherEnvRank();
  const char* envLauncher = "env";
  int envRanks = zppLauncherEnvRanks(&envLauncher);
  int mpi = 0;
  if (zppPerfMpiAvailable() && (zppPerfMpiLaunched() || zppPerfOmpiEnv())) {
    if (zppPerfMpiInit(&argc, &argv) != 0) return ZPP_PERF_EXIT_ERROR;
    mpi = 1;
  }
  zppPerfArgsSetSilent(envRank > 0);
  zppPerfArgs_t args;
  int rc = zppPerfParseArgs(argc, argv, &args);
  if (rc != 0) {
    if (mpi) zppPerfMpiFinalize();
    return rc < 0 ? ZPP_PERF_EXIT_OK : rc;
  }
  if (args.timeoutSec > 0) {
    char t[16];
    snprintf(t, sizeof t, "%d", args.timeoutSec);
    setenv("ZPP_TIMEOUT", t, 1);
  }
  if (args.quantBlock > 0) {
    /* The library reads the block from here too, so that its scales and
     * the bound the checker computes are about the same blocks. */
    char b[16];
    snprintf(b, sizeof b, "%d", args.quantBlock);
    setenv("ZPP_QUANT_BLOCK", b, 1);
  }
  /* --rotate: the library reads the switch from here (every rank, before
   * its communicator is made); ZPP_QUANT_ROTATE=0 keeps a caller's env off. */
  setenv("ZPP_QUANT_ROTATE", args.quantRotate ? "1" : "0", 1);
  if (args.forkRanks > 0) {
    /* A one-task srun step is a shell (srun --pty bash), not a launch of ranks. */
    if (mpi || (envRanks != 0 && !(envRanks == 1 && strcmp(envLauncher, "srun") == 0))) {
      if (envRank <= 0)
        fprintf(stderr,
                "zpp-perf: -N forks the ranks itself: do not combine it with mpirun, srun "
                "or RANK/WORLD_SIZE\n");
      if (mpi) zppPerfMpiFinalize();
      return ZPP_PERF_EXIT_USAGE;
    }
    return zppPerfForkRun(&args);
  }
  if (args.baseline == ZPP_PERF_BASELINE_MPI && !mpi) {
    fprintf(stderr, "zpp-perf: --baseline mpi needs the ranks started by mpirun\n");
    return ZPP_PERF_EXIT_USAGE;
  }

  zppPerfEnv_t env;
  memset(&env, 0, sizeof env);
  env.rank = envRank > 0 ? envRank : 0;
  env.nranks = 1;
  env.mpiActive = mpi;
  if (mpi) {
    env.launcher = "mpirun";
    rc = zppPerfInitMpi(&args, &env);
  } else if (envRanks != 0) {
    env.launcher = envLauncher;
    rc = zppPerfInitFromEnv(&args, &env);
  } else {
    env.launcher = "single";
    zppPerfApplyLayout(&args, 0);
    rc = zppPerfInitSingle(&env);
  }
  if (rc == ZPP_PERF_EXIT_OK) rc = zppPerfRankMain(&args, &env);
  if (mpi) zppPerfMpiFinalize();
  return rc;
}
