/*
 * Non-blocking creation (zppConfig_t.blocking = 0). Each case is its own ctest:
 *
 *   test_comm_nonblocking ready   2x2: init returns zppInProgress at once (three ranks come late);
 *                                 meanwhile zppCommGetAsyncError says zppInProgress, a collective,
 *                                 the topology and the stats answer zppInProgress and do nothing,
 *                                 the rank and size answer; then ready, every call checked; a
 *                                 split and a shrink made from it (inheriting blocking = 0) the
 *                                 same; a config of version 0.1.0 (no blocking field) blocks
 *   test_comm_nonblocking pending a member that never comes: zppCommAbort ends the creation at
 *                                 once; so do zppCommDestroy and zppCommRevoke (which leaves a
 *                                 handle that says "revoked"); left alone, it fails at its timeout
 *                                 naming the missing rank
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "comm_exercise.h"
#include "perf/common/launch.h"

static zppConfig_t nonBlocking(int timeoutSec) {
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = timeoutSec;
  cfg.blocking = 0;
  return cfg;
}

/* Polls comm until its creation ends; returns its outcome and how long that took. */
static zppResult_t waitReady(zppComm_t comm, double limitSec, double* took) {
  double t0 = zppClockNow();
  zppResult_t e = zppInProgress;
  while (zppCommGetAsyncError(comm, &e) == zppSuccess && e == zppInProgress &&
         zppClockNow() - t0 < limitSec)
    zppTestSleep(0.001);
  *took = zppClockNow() - t0;
  return e;
}

/* Calls on a communicator still being created: zppInProgress, nothing done. */
static int whilePending(zppComm_t comm, int rank, int nranks) {
  int fails = 0, n = -1, me = -1;
  zppResult_t e = zppSuccess;
  float x[16] = {0};
  zppTopology_t t;
  zppCommStats_t st;
  fails += zppCommGetAsyncError(comm, &e) != zppSuccess || e != zppInProgress;
  fails += zppAllReduce(x, x, 16, zppFloat32, zppSum, comm, NULL) != zppInProgress;
  fails += zppCommTopology(comm, &t) != zppInProgress;
  fails += zppCommGetStats(comm, &st) != zppInProgress;
  fails += zppCommCount(comm, &n) != zppSuccess || n != nranks;
  fails += zppCommUserRank(comm, &me) != zppSuccess || me != rank;
  if (fails) fprintf(stderr, "rank %d: %d wrong answers while pending\n", rank, fails);
  return fails;
}

/* ---- ready --------------------------------------------------------------------------------- */

static int readyBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  int fails = 0;
  double took = 0;
  zppConfig_t cfg = nonBlocking(30);
  if (rank != 0) zppTestSleep(0.5); /* rank 0 sees its creation pending */
  zppComm_t comm = NULL;
  double t0 = zppClockNow();
  fails += zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) != zppInProgress;
  fails += zppClockNow() - t0 > 0.2; /* returned at once */
  REQUIRE(comm != NULL);
  if (rank == 0) fails += whilePending(comm, rank, nranks);
  fails += waitReady(comm, 20, &took) != zppSuccess;
  if (rank == 0) printf("ready: rank 0's communicator ready %.2f s after its call returned\n", took);
  fails += zppExerciseComm(comm, 10);

  /* A split inherits blocking = 0: even ranks and odd ranks. */
  zppComm_t half = NULL;
  fails += zppCommSplit(comm, rank % 2, rank, &half, NULL) != zppInProgress || half == NULL;
  if (half) {
    fails += waitReady(half, 20, &took) != zppSuccess;
    fails += zppExerciseComm(half, 20);
  }
  /* A shrink too (an empty list: a copy). */
  zppComm_t copy = NULL;
  fails += zppCommShrink(comm, NULL, 0, &copy, NULL, ZPP_SHRINK_DEFAULT) != zppInProgress;
  if (copy) {
    fails += waitReady(copy, 20, &took) != zppSuccess;
    fails += zppExerciseComm(copy, 30);
  }
  fails += zppExerciseComm(comm, 40);
  zppCommDestroy(copy);
  zppCommDestroy(half);
  zppCommDestroy(comm);
  if (fails) fprintf(stderr, "rank %d: %d checks failed\n", rank, fails);
  return fails ? 1 : 0;
}

/* Programs compiled against older headers: 0.1.0's config ends before `blocking`, which then
 * keeps its default (blocking), whatever lies in memory past the struct it knew; 0.2.0's before
 * `qgzErrorFeedback` (an invalid 7 there would fail creation if it were read). */
static int oldConfigBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.version = ZPP_VERSION(0, 1, 0);
  cfg.size = offsetof(zppConfig_t, blocking);
  cfg.blocking = 0; /* past the end for that version: not read */
  zppComm_t comm = NULL;
  int fails = zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) != zppSuccess;
  if (comm) fails += zppExerciseComm(comm, 50);
  zppCommDestroy(comm);
  return fails ? 1 : 0;
}

static int config020Body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.version = ZPP_VERSION(0, 2, 0);
  cfg.size = offsetof(zppConfig_t, qgzErrorFeedback);
  cfg.qgzErrorFeedback = 7; /* past the end for that version: not read */
  zppComm_t comm = NULL;
  int fails = zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) != zppSuccess;
  if (comm) fails += zppExerciseComm(comm, 50);
  zppCommDestroy(comm);
  return fails ? 1 : 0;
}

static int testReady(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 4;
  o.layout = "2x2";
  o.timeoutSec = 90;
  CHECK_EQ_INT(zppLaunch(&o, readyBody, NULL), 0);
  CHECK_EQ_INT(zppLaunch(&o, oldConfigBody, NULL), 0);
  CHECK_EQ_INT(zppLaunch(&o, config020Body, NULL), 0);
  return 0;
}

/* ---- a creation that cannot finish ------------------------------------------------------------ */

#define PENDING_TIMEOUT 3 /* seconds; ZPP_TIMEOUT below says the same */

/* Rank 1 never calls; rank 0 tries four ways of ending its pending creation. */
static int pendingBody(int rank, int nranks, const zppUniqueId* unused, void* arg) {
  if (rank == 1) return 0;
  setenv("ZPP_TIMEOUT", "3", 1); /* the root's own wait (zppGetUniqueId's), as the config's */
  int fails = 0;
  zppConfig_t cfg = nonBlocking(PENDING_TIMEOUT);
  for (int way = 0; way < 4; way++) {
    zppUniqueId id;
    REQUIRE(zppGetUniqueId(&id) == zppSuccess);
    zppComm_t comm = NULL;
    fails += zppCommInitRankConfig(&comm, 2, id, 0, &cfg) != zppInProgress;
    REQUIRE(comm != NULL);
    zppTestSleep(0.3);
    fails += whilePending(comm, 0, 2);
    double t0 = zppClockNow(), took = 0;
    const char* what = "";
    zppResult_t e = zppSuccess;
    if (way == 0) {
      what = "zppCommAbort";
      fails += zppCommAbort(comm) != zppSuccess;
    } else if (way == 1) {
      what = "zppCommDestroy";
      fails += zppCommDestroy(comm) != zppSuccess;
    } else if (way == 2) {
      what = "zppCommRevoke";
      fails += zppCommRevoke(comm) != zppSuccess;
      e = waitReady(comm, 2, &took);
      fails += e != zppRemoteError || strstr(zppGetLastError(comm), "revoked") == NULL;
      fails += zppCommDestroy(comm) != zppSuccess;
    } else {
      what = "the timeout";
      e = waitReady(comm, PENDING_TIMEOUT + 5, &took);
      fails += e != zppRemoteError || strstr(zppGetLastError(comm), "missing: 1") == NULL;
      printf("pending: the timeout: %s\n", zppGetLastError(comm));
      fails += zppCommDestroy(comm) != zppSuccess;
    }
    double elapsed = zppClockNow() - t0;
    printf("pending: ended by %s in %.3f s\n", what, elapsed);
    fails += way < 3 ? elapsed > 0.5 : elapsed > PENDING_TIMEOUT + 2.0;
  }
  if (fails) fprintf(stderr, "rank 0: %d checks failed\n", fails);
  return fails ? 1 : 0;
}

static int testPending(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.timeoutSec = 90;
  o.idMode = ZPP_LAUNCH_ID_NONE;
  CHECK_EQ_INT(zppLaunch(&o, pendingBody, NULL), 0);
  return 0;
}

int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "";
  double t0 = zppClockNow();
  if (strcmp(which, "ready") == 0)
    testReady();
  else if (strcmp(which, "pending") == 0)
    testPending();
  else {
    fprintf(stderr, "usage: %s ready|pending\n", argv[0]);
    return 2;
  }
  printf("%s: %.1f s\n", which, zppClockNow() - t0);
  return zppTestExit(which);
}
