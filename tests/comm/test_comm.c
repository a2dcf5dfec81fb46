/*
 * The communicator: init with node layouts emulated through ZPP_HOSTID,
 * settings precedence (config > environment > defaults), ZPP_TOPO_FILE,
 * argument and config validation, errors and queries, abort from another
 * thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/comm.h"
#include "core/log.h"
#include "testutil.h"
#include "perf/common/launch.h"
#include "clock.h"

/* ---- layouts: the topology every rank sees ----------------------------- */

typedef struct {
  const char* layout;
  int nodeOf[ZPP_LAUNCH_MAX_RANKS];
} layoutArg_t;

static int layoutBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const layoutArg_t* a = arg;
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  int n = -1, r = -1;
  CHECK(zppCommCount(comm, &n) == zppSuccess && n == nranks);
  CHECK(zppCommUserRank(comm, &r) == zppSuccess && r == rank);
  zppResult_t ae = zppInternalError;
  CHECK(zppCommGetAsyncError(comm, &ae) == zppSuccess && ae == zppSuccess);
  CHECK(zppCommStateCheckUsable(comm) == zppSuccess);

  int nNodes = 0, localRank = 0, localSize = 0, uniform = 1;
  int sizes[ZPP_LAUNCH_MAX_RANKS] = {0};
  for (int q = 0; q < nranks; q++) {
    if (a->nodeOf[q] + 1 > nNodes) nNodes = a->nodeOf[q] + 1;
    sizes[a->nodeOf[q]]++;
    if (a->nodeOf[q] == a->nodeOf[rank]) {
      if (q < rank) localRank++;
      localSize++;
    }
  }
  for (int k = 1; k < nNodes; k++) uniform &= sizes[k] == sizes[0];
  zppTopology_t t;
  memset(&t, 0xff, sizeof(t));
  REQUIRE(zppCommTopology(comm, &t) == zppSuccess);
  CHECK_MSG(t.nNodes == nNodes && t.node == a->nodeOf[rank] && t.localRank == localRank &&
                t.localSize == localSize && t.uniform == uniform,
            "layout %s rank %d: got nodes %d node %d local %d/%d uniform %d, want %d %d %d/%d %d",
            a->layout, rank, t.nNodes, t.node, t.localRank, t.localSize, t.uniform, nNodes,
            a->nodeOf[rank], localRank, localSize, uniform);
  char want[32];
  snprintf(want, sizeof(want), "node%d", a->nodeOf[rank]);
  CHECK(strcmp(comm->hostId, want) == 0);
  CHECK(comm->timeoutSec == 45.0); /* from ZPP_TIMEOUT */
  /* The communicator's bootstrap is usable by the layers above. */
  int* all = calloc((size_t)nranks, sizeof(int));
  all[rank] = rank * 3 + 1;
  CHECK(zppBootstrapAllGather(comm->bootstrap, all, sizeof(int)) == zppSuccess);
  for (int q = 0; q < nranks; q++) CHECK_EQ_INT(all[q], q * 3 + 1);
  free(all);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  return zppTestRankResult();
}

static void testLayouts(void) {
  static const char* const env[] = {"ZPP_TIMEOUT=45", NULL};
  const char* layouts[] = {"1x4", "2x2", "2x4", "3x2", "4x1", "3,1", "1,2,3", "1x1"};
  for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
    static layoutArg_t a;
    a.layout = layouts[i];
    REQUIRE(zppLaunchParseLayout(a.layout, a.nodeOf, ZPP_LAUNCH_MAX_RANKS) > 0);
    zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
    o.layout = layouts[i];
    o.env = env;
    o.timeoutSec = 90;
    double t0 = zppClockNow();
    CHECK_MSG(zppLaunch(&o, layoutBody, &a) == 0, "layout %s", layouts[i]);
    printf("layout %s: %.2f s\n", layouts[i], zppClockNow() - t0);
  }
}

/* ---- precedence: explicit config beats the environment ----------------- */

static int configBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppConfig_t config = ZPP_CONFIG_INITIALIZER;
  config.hostId = rank % 2 ? "odd" : "even"; /* beats ZPP_HOSTID from the 2x2 layout */
  config.timeoutSec = 7;                     /* beats ZPP_TIMEOUT=45 */
  config.commName = "cfgtest";
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &config) == zppSuccess);
  zppTopology_t t;
  REQUIRE(zppCommTopology(comm, &t) == zppSuccess);
  CHECK(t.nNodes == 2 && t.node == rank % 2 && t.localRank == rank / 2 && t.localSize == 2);
  CHECK(comm->timeoutSec == 7.0);
  CHECK(strcmp(comm->name, "cfgtest") == 0);
  CHECK(strcmp(comm->hostId, rank % 2 ? "odd" : "even") == 0);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

static void testConfigPrecedence(void) {
  static const char* const env[] = {"ZPP_TIMEOUT=45", NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.layout = "2x2";
  o.env = env;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, configBody, NULL) == 0);
}

/* ---- ZPP_TOPO_FILE overrides host names, and must agree --------------- */

static int topoFileBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  zppTopology_t t;
  REQUIRE(zppCommTopology(comm, &t) == zppSuccess);
  /* The file puts even ranks on A, odd on B, whatever ZPP_HOSTID said. */
  CHECK(t.nNodes == 2 && t.node == rank % 2 && t.localRank == rank / 2 && t.uniform == 1);
  CHECK(strcmp(comm->hostId, rank % 2 ? "B" : "A") == 0);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

static void onlyRank0(int rank, int nranks, void* arg) {
  if (rank != 0) unsetenv("ZPP_TOPO_FILE");
}

static int topoDisagreeBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = (zppComm_t)0x1;
  double t0 = zppClockNow();
  CHECK_EQ_INT(zppCommInitRank(&comm, nranks, *id, rank), zppInvalidUsage);
  CHECK(comm == (zppComm_t)0x1);
  CHECK(zppClockNow() - t0 < 10.0);
  CHECK_MSG(strstr(zppGetLastError(NULL), "ZPP_TOPO_FILE") != NULL, "%s", zppGetLastError(NULL));
  return zppTestRankResult();
}

static void testTopoFile(void) {
  char path[] = "/tmp/zpp_topo_comm_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const char* text = "0 A\n1 B\n2 A\n3 B\n";
  REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  char var[128];
  snprintf(var, sizeof(var), "ZPP_TOPO_FILE=%s", path);
  const char* env[] = {var, NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.layout = "1x4";
  o.env = env;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, topoFileBody, NULL) == 0);
  o.setupRank = onlyRank0;
  CHECK(zppLaunch(&o, topoDisagreeBody, NULL) == 0);
  unlink(path);
}

/* ---- arguments and config validation (no network reached) ------------- */

static void testArgs(void) {
  zppUniqueId id;
  memset(&id, 0, sizeof(id));
  zppComm_t comm = (zppComm_t)0x1;
  CHECK_EQ_INT(zppCommInitRank(NULL, 2, id, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommInitRank(&comm, 0, id, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommInitRank(&comm, 2, id, -1), zppInvalidArgument);
  CHECK_EQ_INT(zppCommInitRank(&comm, 2, id, 2), zppInvalidArgument);
  CHECK_MSG(strstr(zppGetLastError(NULL), "rank 2 out of range") != NULL, "%s", zppGetLastError(NULL));
  CHECK_EQ_INT(zppCommInitRank(&comm, 1, id, 0), zppInvalidArgument); /* not an id */

  zppConfig_t c = ZPP_CONFIG_INITIALIZER;
  c.magic = 0x12345678;
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  CHECK(strstr(zppGetLastError(NULL), "ZPP_CONFIG_INITIALIZER") != NULL);
  c = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  c.version = 0;
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  c.version = ZPP_VERSION_CODE + 1;
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidUsage);
  CHECK(strstr(zppGetLastError(NULL), "newer") != NULL);
  c = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  c.size = sizeof(zppConfig_t) - 8;
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  c.size = sizeof(zppConfig_t) + 8;
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  c = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  c.timeoutSec = 0;
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  c.timeoutSec = -5;
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  c = (zppConfig_t)ZPP_CONFIG_INITIALIZER;
  c.hostId = "two words";
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  c.hostId = "";
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);
  c.hostId = "0123456789012345678901234567890123456789012345678901234567890123456789";
  CHECK_EQ_INT(zppCommInitRankConfig(&comm, 1, id, 0, &c), zppInvalidArgument);

  setenv("ZPP_TIMEOUT", "soon", 1);
  CHECK_EQ_INT(zppCommInitRank(&comm, 1, id, 0), zppInvalidArgument);
  CHECK(strstr(zppGetLastError(NULL), "ZPP_TIMEOUT") != NULL);
  zppUniqueId id2;
  CHECK_EQ_INT(zppGetUniqueId(&id2), zppInvalidArgument);
  setenv("ZPP_TIMEOUT", "0", 1);
  CHECK_EQ_INT(zppCommInitRank(&comm, 1, id, 0), zppInvalidArgument);
  unsetenv("ZPP_TIMEOUT");
  setenv("ZPP_HOSTID", "has space", 1);
  CHECK_EQ_INT(zppCommInitRank(&comm, 1, id, 0), zppInvalidArgument);
  CHECK(strstr(zppGetLastError(NULL), "ZPP_HOSTID") != NULL);
  unsetenv("ZPP_HOSTID");
  /* Collective settings are checked when the communicator is made, naming
   * the variable: a bad ZPP_ALGO_BROADCAST once failed the first qgZ call. */
  const char* bad[][2] = {{"ZPP_ALGO_BROADCAST", "tree"},
                          {"ZPP_ALGO_ALLREDUCE", "bruck"},
                          {"ZPP_ALLGATHER_SMALL_BYTES", "big"},
                          {"ZPP_PIPELINE_DEPTH", "0"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    setenv(bad[i][0], bad[i][1], 1);
    CHECK_EQ_INT(zppCommInitRank(&comm, 1, id, 0), zppInvalidArgument);
    CHECK_MSG(strstr(zppGetLastError(NULL), bad[i][0]) != NULL, "%s=%s: %s", bad[i][0], bad[i][1],
              zppGetLastError(NULL));
    unsetenv(bad[i][0]);
  }
  CHECK(comm == (zppComm_t)0x1); /* never written on failure */

  CHECK_EQ_INT(zppGetUniqueId(NULL), zppInvalidArgument);
  int n = 0;
  zppTopology_t t;
  zppResult_t e;
  CHECK_EQ_INT(zppCommCount(NULL, &n), zppInvalidArgument);
  CHECK_EQ_INT(zppCommUserRank(NULL, &n), zppInvalidArgument);
  CHECK_EQ_INT(zppCommTopology(NULL, &t), zppInvalidArgument);
  CHECK_EQ_INT(zppCommGetAsyncError(NULL, &e), zppInvalidArgument);
  CHECK_EQ_INT(zppCommStateCheckUsable(NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppCommDestroy(NULL), zppSuccess);
  CHECK_EQ_INT(zppCommAbort(NULL), zppSuccess);
  CHECK(zppGetLastError(NULL) != NULL);
}

/* ---- one rank in this process: queries and the async error ----------- */

static void testSingleRank(void) {
  zppUniqueId id;
  REQUIRE(zppGetUniqueId(&id) == zppSuccess);
  zppConfig_t c = ZPP_CONFIG_INITIALIZER;
  c.timeoutSec = 20;
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRankConfig(&comm, 1, id, 0, &c) == zppSuccess);
  zppTopology_t t;
  REQUIRE(zppCommTopology(comm, &t) == zppSuccess);
  CHECK(t.nNodes == 1 && t.node == 0 && t.localRank == 0 && t.localSize == 1 && t.uniform == 1);
  CHECK_EQ_INT(zppCommTopology(comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppCommCount(comm, NULL), zppInvalidArgument);

  zppCommStateSetError(comm, zppRemoteError, "peer %d went away", 7);
  zppCommStateSetError(comm, zppSystemError, "a later error"); /* the first one stays */
  zppResult_t e = zppSuccess;
  CHECK(zppCommGetAsyncError(comm, &e) == zppSuccess && e == zppRemoteError);
  CHECK(strcmp(zppGetLastError(comm), "peer 7 went away") == 0);
  CHECK_EQ_INT(zppCommStateCheckUsable(comm), zppRemoteError);
  CHECK(zppCommDestroy(comm) == zppSuccess);
}

/* ---- abort from another thread ---------------------------------------- */

typedef struct {
  zppComm_t comm;
} abortArg_t;

static void* abortLater(void* p) {
  zppTestSleep(0.3);
  zppCommAbort(((abortArg_t*)p)->comm);
  return NULL;
}

static int abortBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  if (rank == 0) {
    /* Stuck: rank 1 does not join this barrier for seconds. */
    abortArg_t a = {comm};
    zppBootstrap_t* bs = comm->bootstrap;
    pthread_t th;
    pthread_create(&th, NULL, abortLater, &a);
    double t0 = zppClockNow();
    zppResult_t res = zppBootstrapBarrier(bs);
    double dt = zppClockNow() - t0;
    pthread_join(th, NULL); /* the abort freed the communicator */
    CHECK(res != zppSuccess);
    CHECK_MSG(dt >= 0.25 && dt < 3.0, "unblocked after %.2f s", dt);
  } else {
    zppTestSleep(1.5);
    double t0 = zppClockNow();
    CHECK(zppBootstrapBarrier(comm->bootstrap) != zppSuccess); /* rank 0 is gone */
    CHECK(zppClockNow() - t0 < 3.0);
    zppCommDestroy(comm);
  }
  return zppTestRankResult();
}

static void testAbort(void) {
  static const char* const env[] = {"ZPP_TIMEOUT=60", NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.env = env;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, abortBody, NULL) == 0);
}

/* ---- the root made by zppGetUniqueId follows the ranks' config timeout -- */

/* zppGetUniqueId has no config: its root took ZPP_TIMEOUT (1 s here) and
 * gave up on a rank 2 s late although every rank's config said 10 s. */
static int rootTimeoutBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  if (rank == nranks - 1) {
    struct timespec ts = {2, 0};
    nanosleep(&ts, NULL);
  }
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 10;
  zppComm_t comm;
  zppResult_t res = zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg);
  CHECK_MSG(res == zppSuccess, "rank %d: init returned %d: %s", rank, (int)res, zppGetLastError(NULL));
  if (res == zppSuccess) zppCommDestroy(comm);
  return zppTestRankResult();
}

static void testRootTimeout(void) {
  static const char* const env[] = {"ZPP_TIMEOUT=1", NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 3;
  o.env = env;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, rootTimeoutBody, NULL) == 0);
}

int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : NULL;
#define RUN(name, fn) ZPP_TEST_RUN(only, name, fn)
  RUN("args", testArgs);
  RUN("layouts", testLayouts);
  RUN("config", testConfigPrecedence);
  RUN("topofile", testTopoFile);
  RUN("abort", testAbort);
  RUN("roottimeout", testRootTimeout);
  /* Last: the only one that runs a comm (and its threads) in this process,
   * and a fork after threads have run is not safe under every allocator. */
  RUN("single", testSingleRank);
  return zppTestExit("test_comm");
}
