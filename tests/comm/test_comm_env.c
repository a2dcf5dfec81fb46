/*
 * zppCommInitFromEnv in forked ranks: torchrun's variables (rank 0 opening
 * the root at MASTER_PORT + 1, started last), ZPP_ROOT, OpenMPI's
 * variables, ZPP_SECRET; srun's variables with the root and the node
 * identities Slurm gives (tests/slurm runs them under a real srun); and
 * missing or garbled variables, each an error that names the variable.
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/comm.h"
#include "core/launcher_env.h"
#include "core/log.h"
#include "testutil.h"
#include "perf/common/launch.h"
#include "clock.h"

static int envInt(const char* name) {
  const char* v = getenv(name);
  return v ? atoi(v) : -1;
}

/* Checks a communicator against the launcher's own numbers. */
static void checkComm(zppComm_t comm, int rank, int nranks, int localRank, int localSize) {
  int n = -1, r = -1;
  CHECK(zppCommCount(comm, &n) == zppSuccess && n == nranks);
  CHECK(zppCommUserRank(comm, &r) == zppSuccess && r == rank);
  zppTopology_t t;
  REQUIRE(zppCommTopology(comm, &t) == zppSuccess);
  CHECK_MSG(t.localRank == localRank && t.localSize == localSize, "rank %d: local %d/%d, want %d/%d",
            rank, t.localRank, t.localSize, localRank, localSize);
  int* all = calloc((size_t)nranks, sizeof(int));
  all[rank] = 1000 + rank;
  CHECK(zppBootstrapAllGather(comm->bootstrap, all, sizeof(int)) == zppSuccess);
  for (int q = 0; q < nranks; q++) CHECK_EQ_INT(all[q], 1000 + q);
  free(all);
}

/* ---- torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT ---------- */

static void rank0Late(int rank, int nranks, void* arg) {
  /* The others start first and must retry until rank 0 opens the root. */
  if (rank == 0) zppTestSleep(0.5);
}

static int torchrunBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitFromEnv(&comm, NULL) == zppSuccess);
  checkComm(comm, rank, nranks, envInt("LOCAL_RANK"), envInt("LOCAL_WORLD_SIZE"));
  CHECK(comm->timeoutSec == 30.0);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

static void testTorchrun(void) {
  static const char* const env[] = {"ZPP_TIMEOUT=30", NULL};
  const char* layouts[] = {"2x2", "3", "1,2"};
  for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
    zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
    o.layout = layouts[i];
    o.idMode = ZPP_LAUNCH_ID_NONE;
    o.torchrunEnv = 1;
    o.env = env;
    o.setupRank = rank0Late;
    o.timeoutSec = 60;
    double t0 = zppClockNow();
    CHECK_MSG(zppLaunch(&o, torchrunBody, NULL) == 0, "layout %s", layouts[i]);
    printf("torchrun env, layout %s: %.2f s\n", layouts[i], zppClockNow() - t0);
  }
}

/* ---- OpenMPI's variables with ZPP_ROOT, and a config ------------------ */

static int rootPort;

static void ompiEnv(int rank, int nranks, void* arg) {
  char v[64];
  snprintf(v, sizeof(v), "%d", rank);
  setenv("OMPI_COMM_WORLD_RANK", v, 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", v, 1);
  snprintf(v, sizeof(v), "%d", nranks);
  setenv("OMPI_COMM_WORLD_SIZE", v, 1);
  snprintf(v, sizeof(v), "127.0.0.1:%d", rootPort);
  setenv("ZPP_ROOT", v, 1);
  setenv("ZPP_SECRET", "ompi-test", 1); /* what a user exports before mpirun */
  unsetenv("RANK");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
}

static int ompiBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppConfig_t c = ZPP_CONFIG_INITIALIZER;
  c.timeoutSec = 25;
  c.hostId = "samehost";
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitFromEnv(&comm, &c) == zppSuccess);
  checkComm(comm, rank, nranks, rank, nranks);
  CHECK(comm->timeoutSec == 25.0);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

static void testOmpi(void) {
  rootPort = zppLaunchFreePort();
  REQUIRE(rootPort > 0);
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 3;
  o.idMode = ZPP_LAUNCH_ID_NONE;
  o.setupRank = ompiEnv;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, ompiBody, NULL) == 0);
}

/* ---- srun: SLURM_PROCID/NTASKS/LOCALID, the root from the step -------- */

static char slurmJob[32];

static int portFree(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  int ok = bind(fd, (struct sockaddr*)&a, sizeof(a)) == 0;
  close(fd);
  return ok;
}

/* What srun gives a task of `srun -N 2 -n 4` (block), with node names of
 * which only the first must resolve: task 0's, where the root is. */
static void slurmEnv(int rank, int nranks, void* arg) {
  static const char* const clear[] = {"RANK",        "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                      "MASTER_PORT", "ZPP_ROOT",   "ZPP_HOSTID", NULL};
  for (const char* const* v = clear; *v; v++) unsetenv(*v);
  char v[64];
  snprintf(v, sizeof(v), "%d", rank);
  setenv("SLURM_PROCID", v, 1);
  snprintf(v, sizeof(v), "%d", rank % 2);
  setenv("SLURM_LOCALID", v, 1);
  snprintf(v, sizeof(v), "%d", nranks);
  setenv("SLURM_NTASKS", v, 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_JOB_ID", slurmJob, 1);
  setenv("SLURM_STEP_NODELIST", "127.0.0.1,zppnode2", 1);
  setenv("SLURMD_NODENAME", rank < 2 ? "127.0.0.1" : "zppnode2", 1);
  setenv("ZPP_SECRET", "what-the-user-exported-before-srun", 1);
}

static int slurmBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitFromEnv(&comm, NULL) == zppSuccess);
  /* Two nodes of two from SLURMD_NODENAME alone: one host name here. */
  checkComm(comm, rank, nranks, rank % 2, 2);
  CHECK_MSG(strcmp(comm->hostId, rank < 2 ? "127.0.0.1" : "zppnode2") == 0, "host id %s", comm->hostId);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

static void testSlurm(void) {
  /* A job id whose derived port is free now. */
  int job = (int)getpid() * 7;
  for (int tries = 0; tries < 50; tries++, job++) {
    snprintf(slurmJob, sizeof(slurmJob), "%d", job);
    if (portFree(zppSlurmPort(slurmJob, "0"))) break;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 4;
  o.idMode = ZPP_LAUNCH_ID_NONE;
  o.setupRank = slurmEnv;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, slurmBody, NULL) == 0);
}

/* One task (srun -n 1, srun --pty bash): no rendezvous, so no secret. */
static int oneTaskBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  unsetenv("ZPP_SECRET");
  unsetenv("SLURM_STEP_NODELIST");
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitFromEnv(&comm, NULL) == zppSuccess);
  checkComm(comm, 0, 1, 0, 1);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

static void testSlurmOneTask(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 1;
  o.idMode = ZPP_LAUNCH_ID_NONE;
  o.setupRank = slurmEnv;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, oneTaskBody, NULL) == 0);
}

/* ---- ZPP_SECRET: a rank with another secret is refused --------------- */

static void secretEnv(int rank, int nranks, void* arg) {
  setenv("ZPP_SECRET", rank == 2 ? "not-the-password" : "the-password", 1);
}

static int secretBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = NULL;
  double t0 = zppClockNow();
  zppResult_t res = zppCommInitFromEnv(&comm, NULL);
  double dt = zppClockNow() - t0;
  CHECK(res != zppSuccess);
  if (rank == 2) {
    CHECK_EQ_INT(res, zppInvalidUsage);
    CHECK_MSG(strstr(zppGetLastError(NULL), "wrong secret") != NULL, "%s", zppGetLastError(NULL));
    CHECK_MSG(dt < 2.0, "refused after %.2f s", dt);
  } else {
    /* The others wait for rank 2 until the timeout (3 s), then fail. */
    CHECK_MSG(dt >= 2.5 && dt < 10.0, "rank %d failed after %.2f s", rank, dt);
  }
  return zppTestRankResult();
}

static void testSecret(void) {
  static const char* const env[] = {"ZPP_TIMEOUT=3", NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 4;
  o.idMode = ZPP_LAUNCH_ID_NONE;
  o.torchrunEnv = 1;
  o.env = env;
  o.setupRank = secretEnv;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, secretBody, NULL) == 0);
}

/* ---- no ZPP_SECRET, accepted with ZPP_UNAUTHENTICATED_RENDEZVOUS=1 ----- */

static void unauthenticatedEnv(int rank, int nranks, void* arg) {
  unsetenv("ZPP_SECRET"); /* the launcher's own */
  setenv("ZPP_UNAUTHENTICATED_RENDEZVOUS", "1", 1);
}

static int unauthenticatedBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  REQUIRE(zppCommInitFromEnv(&comm, NULL) == zppSuccess);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  return zppTestRankResult();
}

static void testUnauthenticated(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.idMode = ZPP_LAUNCH_ID_NONE;
  o.torchrunEnv = 1;
  o.timeoutSec = 60;
  o.setupRank = unauthenticatedEnv;
  CHECK(zppLaunch(&o, unauthenticatedBody, NULL) == 0);
}

/* ---- missing or garbled variables: an error naming the variable ------- */

static const char* allVars[] = {"RANK",
                                "WORLD_SIZE",
                                "LOCAL_RANK",
                                "MASTER_ADDR",
                                "MASTER_PORT",
                                "OMPI_COMM_WORLD_RANK",
                                "OMPI_COMM_WORLD_SIZE",
                                "OMPI_COMM_WORLD_LOCAL_RANK",
                                "PMI_RANK",
                                "PMI_SIZE",
                                "ZPP_ROOT",
                                "ZPP_SECRET",
                                "ZPP_MASTER_PORT_OFFSET",
                                "ZPP_UNAUTHENTICATED_RENDEZVOUS",
                                "SLURM_PROCID",
                                "SLURM_NTASKS",
                                "SLURM_LOCALID",
                                "SLURM_STEP_ID",
                                "SLURM_JOB_ID",
                                "SLURM_STEP_NODELIST",
                                "SLURM_DISTRIBUTION",
                                "SLURMD_NODENAME",
                                NULL};

static void expectEnvError(const char* settings, const char* named) {
  for (const char** v = allVars; *v; v++) unsetenv(*v);
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", settings);
  char* save = NULL;
  for (char* kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
    char* eq = strchr(kv, '=');
    *eq = '\0';
    setenv(kv, eq + 1, 1);
  }
  zppComm_t comm = (zppComm_t)0x1;
  zppResult_t res = zppCommInitFromEnv(&comm, NULL);
  CHECK_MSG(res == zppInvalidArgument, "[%s]: %d", settings, (int)res);
  CHECK_MSG(comm == (zppComm_t)0x1, "[%s]: output written", settings);
  CHECK_MSG(strstr(zppGetLastError(NULL), named) != NULL, "[%s]: the error does not name %s: %s",
            settings, named, zppGetLastError(NULL));
}

static void testBadEnv(void) {
  expectEnvError("", "RANK");
  expectEnvError("RANK=abc WORLD_SIZE=2", "RANK='abc'");
  expectEnvError("RANK=0", "WORLD_SIZE");
  expectEnvError("RANK=0 WORLD_SIZE=two", "WORLD_SIZE='two'");
  expectEnvError("RANK=2 WORLD_SIZE=2", "RANK=2");
  expectEnvError("RANK=0 WORLD_SIZE=0", "WORLD_SIZE=0");
  expectEnvError("RANK=0 WORLD_SIZE=2 LOCAL_RANK=x", "LOCAL_RANK");
  expectEnvError("RANK=0 WORLD_SIZE=2", "MASTER_ADDR");
  expectEnvError("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1", "MASTER_PORT");
  expectEnvError("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=99999", "MASTER_PORT");
  expectEnvError("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=65535", "MASTER_PORT");
  expectEnvError("RANK=1 WORLD_SIZE=2 ZPP_ROOT=127.0.0.1", "ZPP_ROOT");
  expectEnvError("RANK=1 WORLD_SIZE=2 ZPP_ROOT=:80", "ZPP_ROOT");
  expectEnvError("RANK=1 WORLD_SIZE=2 ZPP_ROOT=127.0.0.1:http", "ZPP_ROOT");
  expectEnvError("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE");
  expectEnvError("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=1", "OMPI_COMM_WORLD_RANK=1");
  /* No secret: refused (one derived from the address, port and job id is
   * computable by anyone who can reach the root), unless accepted. */
  expectEnvError("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29400", "ZPP_SECRET");
  expectEnvError(
      "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29400 "
      "ZPP_UNAUTHENTICATED_RENDEZVOUS=0",
      "ZPP_UNAUTHENTICATED_RENDEZVOUS=1");
  /* srun: bad or missing variables, the batch script that is no task. */
  expectEnvError("SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_JOB_ID=7", "SLURM_STEP_ID");
  expectEnvError("SLURM_PROCID=z SLURM_NTASKS=4 SLURM_STEP_ID=0", "SLURM_PROCID='z'");
  expectEnvError("SLURM_PROCID=1 SLURM_STEP_ID=0", "SLURM_NTASKS");
  expectEnvError("SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=7", "SLURM_STEP_NODELIST");
  expectEnvError(
      "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=7 "
      "SLURM_STEP_NODELIST=n[01-",
      "SLURM_STEP_NODELIST='n[01-'");
  expectEnvError("SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_STEP_NODELIST=n1",
                 "SLURM_JOB_ID");
  expectEnvError(
      "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=7 "
      "SLURM_STEP_NODELIST=n[1-2] SLURMD_NODENAME=n2",
      "SLURMD_NODENAME");
  expectEnvError(
      "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=7 "
      "SLURM_STEP_NODELIST=n[1-2] SLURM_DISTRIBUTION=arbitrary",
      "SLURM_DISTRIBUTION");
  /* Slurm hands out no secret either. */
  expectEnvError(
      "SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=7 "
      "SLURM_STEP_NODELIST=n[1-2]",
      "ZPP_SECRET");
  for (const char** v = allVars; *v; v++) unsetenv(*v);
  CHECK_EQ_INT(zppCommInitFromEnv(NULL, NULL), zppInvalidArgument);
}

int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : NULL;
#define RUN(name, fn) ZPP_TEST_RUN(only, name, fn)
  RUN("badenv", testBadEnv);
  RUN("torchrun", testTorchrun);
  RUN("ompi", testOmpi);
  RUN("secret", testSecret);
  RUN("unauthenticated", testUnauthenticated);
  RUN("slurm", testSlurm);
  RUN("slurm-one-task", testSlurmOneTask);
  return zppTestExit("test_comm_env");
}
