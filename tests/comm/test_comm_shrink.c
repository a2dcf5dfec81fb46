/*
 * zppCommShrink: the survivors go on without a lost rank. Each case is its own ctest:
 *
 *   test_comm_shrink dead [LAYOUT [TRIALS]]
 *                              2x2 (or 2x2/cyclic: nodes interleaved), rank 3 killed: the survivors
 *                              see the error, shrink with ZPP_SHRINK_ABORT to 3 ranks (nodes of 2
 *                              and 1), run every kind of call on it, shrink again to 2 and then
 *                              to 1; TRIALS times (a fault seen once in five needs repeats)
 *   test_comm_shrink hung      rank 3 alive but silent (it never calls): the survivors shrink
 *                              around it, and it is refused when it calls shrink at last
 *   test_comm_shrink disagree  two survivors exclude rank 3, the third excludes rank 1: every
 *                              survivor's shrink fails, within twice the timeout (the meeting's
 *                              wait), and none gets a communicator
 *   test_comm_shrink args      bad lists and flags, on one rank
 *
 * Survivors keep their order; the new communicator's results are checked element for element.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "testutil.h"
#include "comm_exercise.h"
#include "perf/common/launch.h"

/* Shared with the forked ranks. */
typedef struct {
  int result[8];
  double elapsed[8];
  int checks[8]; /* failed checks per rank */
  char reason[8][256];
} outcome_t;
static outcome_t* shared;

static zppComm_t initComm(int rank, int nranks, const zppUniqueId* id, int timeoutSec) {
  zppComm_t comm = NULL;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = timeoutSec;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  return comm;
}

/* Four ranks as 2x2 (or `layout`), each one's exit status in status[4] (some are killed on
 * purpose); the shared outcomes reset. */
static const char* layout = "2x2";

static void launch2x2(zppLaunchFn body, int* status) {
  memset(shared, 0, sizeof(*shared));
  for (int r = 0; r < 8; r++) shared->result[r] = -1;
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 4;
  o.layout = layout;
  o.timeoutSec = 90;
  o.statusOut = status;
  o.quiet = 1;
  zppLaunch(&o, body, NULL);
}

/* ---- a dead rank: shrink, and shrink again down to one ---------------------------------- */

static int deadBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = initComm(rank, nranks, id, 20);
  int fails = zppExerciseComm(comm, 10);
  /* Not at once: a call returning here does not mean the others have this
   * rank's last message yet, and a death drops what is still in flight. */
  if (rank == 3) zppTestSleep(0.3), raise(SIGKILL);
  /* The survivors learn of it as a trainer would: the next call fails. */
  float x[256] = {0};
  double t0 = zppClockNow();
  zppResult_t res = zppAllReduce(x, x, 256, zppFloat32, zppSum, comm, NULL);
  fails += res == zppSuccess;
  int lost[1] = {3};
  zppComm_t c3 = NULL;
  res = zppCommShrink(comm, lost, 1, &c3, NULL, ZPP_SHRINK_ABORT);
  shared->result[rank] = (int)res;
  shared->elapsed[rank] = zppClockNow() - t0;
  if (res != zppSuccess) {
    snprintf(shared->reason[rank], sizeof(shared->reason[rank]), "%s", zppGetLastError(NULL));
    shared->checks[rank] = 100;
    return 0;
  }
  int n = 0, me = -1;
  zppTopology_t topo;
  fails += zppCommCount(c3, &n) != zppSuccess || n != 3;
  fails += zppCommUserRank(c3, &me) != zppSuccess || me != rank; /* order kept */
  fails += zppCommTopology(c3, &topo) != zppSuccess || topo.nNodes != 2 || topo.uniform != 0;
  fails += zppExerciseComm(c3, 20);
  zppCommDestroy(comm); /* the parent goes on its own */
  fails += zppExerciseComm(c3, 30);
  /* Again: old rank 2 leaves (alive: it just stops), then rank 1. */
  if (rank == 2) {
    zppCommDestroy(c3);
    shared->checks[rank] = fails;
    return 0;
  }
  int lost2[1] = {2};
  zppComm_t c2 = NULL;
  fails += zppCommShrink(c3, lost2, 1, &c2, NULL, ZPP_SHRINK_DEFAULT) != zppSuccess;
  if (c2) {
    fails += zppCommCount(c2, &n) != zppSuccess || n != 2;
    fails += zppExerciseComm(c2, 40);
  }
  zppCommDestroy(c3);
  if (rank == 1) {
    zppCommDestroy(c2);
    shared->checks[rank] = fails;
    return 0;
  }
  int lost1[1] = {1};
  zppComm_t c1 = NULL;
  fails += c2 == NULL || zppCommShrink(c2, lost1, 1, &c1, NULL, ZPP_SHRINK_DEFAULT) != zppSuccess;
  if (c1) {
    fails += zppCommCount(c1, &n) != zppSuccess || n != 1;
    fails += zppExerciseComm(c1, 50);
    /* One shrink per communicator. */
    zppComm_t again = NULL;
    fails += zppCommShrink(c2, lost1, 1, &again, NULL, ZPP_SHRINK_DEFAULT) != zppInvalidUsage;
  }
  zppCommDestroy(c2);
  zppCommDestroy(c1);
  shared->checks[rank] = fails;
  return 0;
}

static int testDead(int trials) {
  for (int trial = 0; trial < trials; trial++) {
    int status[4];
    launch2x2(deadBody, status);
    CHECK_EQ_INT(status[3], 128 + SIGKILL);
    for (int r = 0; r < 3; r++) {
      CHECK_EQ_INT(status[r], 0);
      printf(
          "dead %s trial %d: rank %d: error, then shrink to 3 returned %d, %.2f s after the failed "
          "call%s%s\n",
          layout, trial, r, shared->result[r], shared->elapsed[r], shared->reason[r][0] ? ": " : "",
          shared->reason[r]);
      CHECK_MSG(shared->result[r] == zppSuccess, "rank %d: shrink returned %d", r, shared->result[r]);
      CHECK_MSG(shared->checks[r] == 0, "rank %d: %d checks failed", r, shared->checks[r]);
    }
  }
  return 0;
}

/* ---- a hung rank: shrunk around; refused when it calls at last ---------------------------- */

static int hungBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = initComm(rank, nranks, id, 20);
  int fails = zppExerciseComm(comm, 10);
  zppComm_t c = NULL;
  double t0 = zppClockNow();
  if (rank == 3) {
    zppTestSleep(3.0); /* silent while the others shrink */
    int none[1] = {0};
    /* It does not know it was excluded: its list (rank 0) differs. */
    zppResult_t res = zppCommShrink(comm, none, 1, &c, NULL, ZPP_SHRINK_ABORT);
    shared->result[rank] = (int)res;
    shared->elapsed[rank] = zppClockNow() - t0;
    snprintf(shared->reason[rank], sizeof(shared->reason[rank]), "%s", zppGetLastError(NULL));
    fails += c != NULL;
  } else {
    int lost[1] = {3};
    zppResult_t res = zppCommShrink(comm, lost, 1, &c, NULL, ZPP_SHRINK_ABORT);
    shared->result[rank] = (int)res;
    shared->elapsed[rank] = zppClockNow() - t0;
    if (res == zppSuccess) {
      fails += zppExerciseComm(c, 20);
      /* Stay until rank 3 has knocked: its refusal must not disturb us. */
      zppTestSleep(3.5);
      fails += zppExerciseComm(c, 30);
    }
    zppCommDestroy(c);
  }
  zppCommDestroy(comm);
  shared->checks[rank] = fails;
  return 0;
}

static int testHung(void) {
  int status[4];
  launch2x2(hungBody, status);
  for (int r = 0; r < 4; r++) {
    CHECK_EQ_INT(status[r], 0);
    printf("hung: rank %d: shrink returned %d after %.2f s%s%s\n", r, shared->result[r],
           shared->elapsed[r], shared->reason[r][0] ? ": " : "", shared->reason[r]);
    CHECK_MSG(shared->checks[r] == 0, "rank %d: %d checks failed", r, shared->checks[r]);
  }
  for (int r = 0; r < 3; r++) {
    CHECK_MSG(shared->result[r] == zppSuccess, "rank %d: shrink returned %d", r, shared->result[r]);
    CHECK_MSG(shared->elapsed[r] < 2.0, "rank %d: shrink took %.2f s", r, shared->elapsed[r]);
  }
  CHECK_MSG(shared->result[3] != zppSuccess, "the excluded rank got a communicator");
  return 0;
}

/* ---- survivors that disagree: every one fails ------------------------------------------------ */

#define DISAGREE_TIMEOUT 4

static int disagreeBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = initComm(rank, nranks, id, DISAGREE_TIMEOUT);
  int fails = zppExerciseComm(comm, 10);
  if (rank == 3) {
    zppCommDestroy(comm); /* leaves; the others do not wait for it below */
    shared->checks[rank] = fails;
    return 0;
  }
  int list[1] = {rank == 2 ? 1 : 3};
  zppComm_t c = NULL;
  double t0 = zppClockNow();
  zppResult_t res = zppCommShrink(comm, list, 1, &c, NULL, ZPP_SHRINK_ABORT);
  shared->result[rank] = (int)res;
  shared->elapsed[rank] = zppClockNow() - t0;
  snprintf(shared->reason[rank], sizeof(shared->reason[rank]), "%s", zppGetLastError(NULL));
  fails += c != NULL;
  zppCommDestroy(c);
  zppCommDestroy(comm);
  shared->checks[rank] = fails;
  return 0;
}

static int testDisagree(void) {
  int status[4];
  launch2x2(disagreeBody, status);
  for (int r = 0; r < 4; r++) CHECK_EQ_INT(status[r], 0);
  for (int r = 0; r < 3; r++) {
    printf("disagree: rank %d: shrink returned %d after %.2f s: %s\n", r, shared->result[r],
           shared->elapsed[r], shared->reason[r]);
    CHECK_MSG(shared->result[r] != zppSuccess && shared->result[r] > 0, "rank %d: shrink returned %d",
              r, shared->result[r]);
    CHECK_MSG(shared->elapsed[r] < 2 * DISAGREE_TIMEOUT + 3.0, "rank %d: took %.2f s", r,
              shared->elapsed[r]);
    CHECK_MSG(shared->checks[r] == 0, "rank %d: %d checks failed", r, shared->checks[r]);
  }
  return 0;
}

/* ---- bad arguments ----------------------------------------------------------------------------- */

static int argsBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm = initComm(rank, nranks, id, 10);
  zppComm_t c = NULL;
  int self[1] = {rank}, out[1] = {nranks}, neg[1] = {-1}, twice[2] = {1, 1}, other = (rank + 1) % 3;
  int all[3] = {0, 1, 2};
  CHECK_EQ_INT(zppCommShrink(comm, &other, 1, NULL, NULL, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommShrink(NULL, &other, 1, &c, NULL, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommShrink(comm, self, 1, &c, NULL, 0), zppInvalidUsage);
  CHECK_EQ_INT(zppCommShrink(comm, out, 1, &c, NULL, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommShrink(comm, neg, 1, &c, NULL, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommShrink(comm, twice, 2, &c, NULL, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommShrink(comm, all, 3, &c, NULL, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommShrink(comm, NULL, 1, &c, NULL, 0), zppInvalidArgument);
  CHECK_EQ_INT(zppCommShrink(comm, &other, 1, &c, NULL, 7), zppInvalidArgument);
  CHECK(c == NULL);
  /* Refused calls left the communicator healthy and its standby unused: an
   * empty list gives a copy of it. */
  CHECK_EQ_INT(zppExerciseComm(comm, 10), 0);
  CHECK_EQ_INT(zppCommShrink(comm, NULL, 0, &c, NULL, ZPP_SHRINK_DEFAULT), zppSuccess);
  int n = 0;
  CHECK(c != NULL && zppCommCount(c, &n) == zppSuccess && n == nranks);
  if (c) CHECK_EQ_INT(zppExerciseComm(c, 20), 0);
  CHECK_EQ_INT(zppExerciseComm(comm, 30), 0);
  zppCommDestroy(c);
  zppCommDestroy(comm);
  return zppTestFailures ? 1 : 0;
}

static int testArgs(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 3;
  o.timeoutSec = 60;
  CHECK_EQ_INT(zppLaunch(&o, argsBody, NULL), 0);
  return 0;
}

int main(int argc, char** argv) {
  shared = mmap(NULL, sizeof(outcome_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  memset(shared, 0, sizeof(*shared));
  for (int r = 0; r < 8; r++) shared->result[r] = -1;
  const char* which = argc > 1 ? argv[1] : "";
  double t0 = zppClockNow();
  if (argc > 2) layout = argv[2];
  if (strcmp(which, "dead") == 0)
    testDead(argc > 3 ? atoi(argv[3]) : 1);
  else if (strcmp(which, "hung") == 0)
    testHung();
  else if (strcmp(which, "disagree") == 0)
    testDisagree();
  else if (strcmp(which, "args") == 0)
    testArgs();
  else {
    fprintf(stderr, "usage: %s dead|hung|disagree|args [LAYOUT [TRIALS]]\n", argv[0]);
    return 2;
  }
  printf("%s: %.1f s\n", which, zppClockNow() - t0);
  return zppTestExit(which);
}
