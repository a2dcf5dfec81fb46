/*
 * zppCommGrow: new processes join a communicator. Each case is its own ctest:
 *
 *   test_comm_grow replace [TRIALS [cyclic]]
 *                      ranks 0-3 on 2x2 (cyclic: nodes taken in turn), rank 3 killed: the survivors
 * shrink to 3 (nodes of 2 and 1), then a replacement process on rank 3's node joins them by grow (nodes
 * of 2 and 2 again: qgZ runs quantized, not as its plain fallback), gets its state by broadcast, and a
 * second newcomer grows the result to 5; every kind of call is checked on each communicator; a used
 * grow id fails at once; TRIALS times test_comm_grow bad every member fails alike, none gets a
 * communicator, and the parent works on: a newcomer that claims a rank of the communicator, one with
 * another nranks; an id whose rendezvous timed out fails at once; bad arguments
 *
 * The processes pass ids to each other through shared memory, as a job would through its
 * launcher or store.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "testutil.h"
#include "comm_exercise.h"
#include "perf/common/launch.h"

enum { MAXP = 8, SLOTS = 6 };
/* Shared with the forked processes. */
typedef struct {
  zppUniqueId ids[SLOTS];
  _Atomic int idReady[SLOTS];
  int result[MAXP];
  double elapsed[MAXP];
  int checks[MAXP]; /* failed checks per process */
  char reason[MAXP][256];
} shared_t;
static shared_t* shared;

static void publishId(int slot, const zppUniqueId* id) {
  shared->ids[slot] = *id;
  atomic_store(&shared->idReady[slot], 1);
}

static zppUniqueId awaitId(int slot) {
  double until = zppClockNow() + 60;
  while (!atomic_load(&shared->idReady[slot])) {
    REQUIRE(zppClockNow() < until);
    zppTestSleep(0.002);
  }
  return shared->ids[slot];
}

static zppConfig_t config(int timeoutSec) {
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = timeoutSec;
  return cfg;
}

/* Processes 0..n-1 make an n-rank communicator (slot 0's id, from process 0). */
static zppComm_t initFirst(int proc, int n, int timeoutSec) {
  zppUniqueId id;
  if (proc == 0) {
    REQUIRE(zppGetUniqueId(&id) == zppSuccess);
    publishId(0, &id);
  }
  id = awaitId(0);
  zppConfig_t cfg = config(timeoutSec);
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRankConfig(&comm, n, id, proc, &cfg) == zppSuccess);
  return comm;
}

static void record(int proc, zppResult_t res, double t0) {
  shared->result[proc] = (int)res;
  shared->elapsed[proc] = zppClockNow() - t0;
  snprintf(shared->reason[proc], sizeof(shared->reason[proc]), "%s",
           res == zppSuccess ? "" : zppGetLastError(NULL));
}

/* rank, size, nodes and node uniformity of comm, as expected */
static int shapeIs(zppComm_t comm, int rank, int size, int nNodes, int uniform) {
  int n = -1, me = -1;
  zppTopology_t t;
  if (zppCommCount(comm, &n) != zppSuccess || zppCommUserRank(comm, &me) != zppSuccess ||
      zppCommTopology(comm, &t) != zppSuccess)
    return 1;
  if (n == size && me == rank && t.nNodes == nNodes && t.uniform == uniform) return 0;
  fprintf(stderr, "rank %d of %d on %d nodes (uniform %d); expected rank %d of %d on %d (%d)\n", me, n,
          t.nNodes, t.uniform, rank, size, nNodes, uniform);
  return 1;
}

/* The state a newcomer needs, from rank 0: a broadcast, checked. */
static int handState(zppComm_t comm, int step) {
  int me = 0;
  REQUIRE(zppCommUserRank(comm, &me) == zppSuccess);
  enum { N = 4096 };
  static float w[N];
  for (int i = 0; i < N; i++) w[i] = me == 0 ? (float)(step * N + i) : -1.0f;
  if (zppBroadcast(w, w, N, zppFloat32, 0, comm, NULL) != zppSuccess) return 1;
  int bad = 0;
  for (int i = 0; i < N; i++) bad += w[i] != (float)(step * N + i);
  return bad != 0;
}

/* ---- a lost rank replaced, then one more -------------------------------------------------- */

/* Processes: 0-3 the first 2x2 (3 dies), 4 the replacement on node 1, 5 a newcomer on node 0. */
static int replaceBody(int proc, int nproc, const zppUniqueId* unused, void* arg) {
  int fails = 0;
  zppComm_t c3 = NULL, c4 = NULL, c5 = NULL;
  if (proc <= 3) {
    zppComm_t comm = initFirst(proc, 4, 20);
    fails += zppExerciseComm(comm, 10);
    if (proc == 3) zppTestSleep(0.3), raise(SIGKILL);
    float x[256] = {0};
    fails += zppAllReduce(x, x, 256, zppFloat32, zppSum, comm, NULL) == zppSuccess;
    int lost[1] = {3};
    fails += zppCommShrink(comm, lost, 1, &c3, NULL, ZPP_SHRINK_ABORT) != zppSuccess;
    zppCommDestroy(comm);
    if (c3 == NULL) goto done;
    fails += shapeIs(c3, proc, 3, 2, 0) + zppExerciseComm(c3, 20);
    /* Any rank may make the grow id; the last one does here. */
    if (proc == 2) {
      zppUniqueId g;
      fails += zppCommGetGrowId(c3, &g) != zppSuccess;
      publishId(1, &g);
    }
    zppUniqueId g = awaitId(1);
    double tg = zppClockNow();
    zppResult_t res = zppCommGrow(c3, 4, &g, -1, &c4, NULL);
    record(proc, res, tg);
    fails += res != zppSuccess;
  } else if (proc == 4) {
    zppUniqueId g = awaitId(1);
    zppConfig_t cfg = config(20);
    double tg = zppClockNow();
    zppResult_t res = zppCommGrow(NULL, 4, &g, 3, &c4, &cfg);
    record(proc, res, tg);
    fails += res != zppSuccess;
    /* The id is spent: a second use fails at once, naming why. */
    zppComm_t again = NULL;
    double t1 = zppClockNow();
    fails += zppCommGrow(NULL, 4, &g, 3, &again, &cfg) != zppInvalidUsage || again != NULL;
    fails += zppClockNow() - t1 > 2.0;
    fails += strstr(zppGetLastError(NULL), "good for one group") == NULL;
  }
  if (proc <= 4) {
    if (c4 == NULL) goto done;
    int rank = proc == 4 ? 3 : proc;
    fails += shapeIs(c4, rank, 4, 2, 1) + handState(c4, 1) + zppExerciseComm(c4, 30);
    if (rank == 0) {
      zppUniqueId g;
      fails += zppCommGetGrowId(c4, &g) != zppSuccess;
      publishId(2, &g);
    }
    zppUniqueId g = awaitId(2);
    fails += zppCommGrow(c4, 5, &g, rank, &c5, NULL) != zppSuccess;
    if (c5 == NULL) goto done;
    fails += shapeIs(c5, rank, 5, 2, 0);
  } else {
    zppUniqueId g = awaitId(2);
    zppConfig_t cfg = config(20);
    fails += zppCommGrow(NULL, 5, &g, 4, &c5, &cfg) != zppSuccess;
    if (c5 == NULL) goto done;
    fails += shapeIs(c5, 4, 5, 2, 0);
  }
  fails += handState(c5, 2) + zppExerciseComm(c5, 40);
  /* The communicators are independent: the older ones still run, once the ones that joined later
   * are gone from them. */
  if (c4) fails += zppExerciseComm(c4, 50);
done:
  zppCommDestroy(c5);
  zppCommDestroy(c4);
  zppCommDestroy(c3);
  shared->checks[proc] = fails;
  return 0;
}

static void launch(zppLaunchFn body, int nproc, const char* layout, int* status) {
  memset(shared, 0, sizeof(*shared));
  for (int p = 0; p < MAXP; p++) shared->result[p] = -1;
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = nproc;
  o.layout = layout;
  o.timeoutSec = 90;
  o.idMode = ZPP_LAUNCH_ID_NONE;
  o.statusOut = status;
  o.quiet = 1;
  zppLaunch(&o, body, NULL);
}

/* Processes 0-3 on two nodes, contiguous or in turn; the replacement (4) on the node of the rank
 * that dies (3), the second newcomer (5) on the other. The expected shapes hold for both. */
static int testReplace(int trials, int cyclic) {
  const char* layout = cyclic ? "@0,1,0,1,1,0" : "@0,0,1,1,1,0";
  for (int trial = 0; trial < trials; trial++) {
    int status[6];
    launch(replaceBody, 6, layout, status);
    CHECK_EQ_INT(status[3], 128 + SIGKILL);
    for (int p = 0; p < 6; p++) {
      if (p == 3) continue;
      CHECK_EQ_INT(status[p], 0);
      if (p <= 4)
        printf("replace %s trial %d: process %d: grow to 4 returned %d in %.3f s%s%s\n", layout, trial,
               p, shared->result[p], shared->elapsed[p], shared->reason[p][0] ? ": " : "",
               shared->reason[p]);
      CHECK_MSG(shared->checks[p] == 0, "process %d: %d checks failed", p, shared->checks[p]);
    }
  }
  return 0;
}

/* ---- bad use: every member fails alike ------------------------------------------------------- */

#define BAD_TIMEOUT 4

/* Processes 0-2 a communicator; 3 and 4 newcomers. Round 1: newcomer 3 claims rank 1 (taken).
 * Round 2: newcomer 3 says 5 ranks where the others say 4. Round 3: rank 1 stays out and
 * newcomers take ranks 1 and 3 (the root sees a full table; the members' check refuses it).
 * Then an id left to time out. */
static int badBody(int proc, int nproc, const zppUniqueId* unused, void* arg) {
  int fails = 0;
  zppComm_t comm = NULL, c = NULL;
  zppConfig_t cfg = config(BAD_TIMEOUT);
  zppUniqueId g;
  if (proc <= 2) comm = initFirst(proc, 3, BAD_TIMEOUT);
  for (int round = 1; round <= 3; round++) {
    double t0 = zppClockNow();
    if (proc == 0) {
      fails += zppCommGetGrowId(comm, &g) != zppSuccess;
      publishId(round, &g);
    }
    g = awaitId(round);
    const int takesPart = round == 3 ? proc != 1 : proc <= 3;
    zppResult_t res = zppSuccess;
    if (takesPart && proc <= 2)
      res = zppCommGrow(comm, 4, &g, -1, &c, NULL);
    else if (takesPart)
      res = zppCommGrow(NULL, round == 2 ? 5 : 4, &g, round == 1 || proc == 3 ? 1 : 3, &c, &cfg);
    if (takesPart) {
      if (round == 1 || round == 3) record(proc, res, t0); /* round 3's overwrite 1's */
      fails += res == zppSuccess || c != NULL;
      fails += zppClockNow() - t0 > BAD_TIMEOUT + 3.0;
    }
    zppCommDestroy(c);
    c = NULL;
    if (comm) fails += zppExerciseComm(comm, 10 * round); /* the parent is unharmed */
  }
  /* Round 3: a grow id whose rendezvous timed out fails at once for a late newcomer. */
  if (proc == 0) {
    fails += zppCommGetGrowId(comm, &g) != zppSuccess;
    publishId(4, &g);
  }
  if (proc == 4) {
    g = awaitId(4);
    zppTestSleep(BAD_TIMEOUT + 1.5);
    double t0 = zppClockNow();
    zppResult_t res = zppCommGrow(NULL, 4, &g, 3, &c, &cfg);
    record(proc, res, t0);
    fails += res != zppInvalidUsage || c != NULL || zppClockNow() - t0 > 1.0;
  }
  if (proc <= 2) {
    /* Bad arguments: local errors, the communicator untouched. */
    g = awaitId(4);
    fails += zppCommGrow(comm, 3, &g, -1, &c, NULL) != zppInvalidArgument; /* not more ranks */
    fails += zppCommGrow(comm, 4, &g, (proc + 1) % 3, &c, NULL) != zppInvalidArgument;
    fails += zppCommGrow(comm, 4, NULL, -1, &c, NULL) != zppInvalidArgument;
    fails += zppCommGrow(comm, 4, &g, -1, NULL, NULL) != zppInvalidArgument;
    fails += zppCommGetGrowId(comm, NULL) != zppInvalidArgument;
    fails += zppCommGetGrowId(NULL, &g) != zppInvalidArgument;
    fails += c != NULL;
    fails += zppExerciseComm(comm, 40);
  }
  if (proc == 3) {
    fails += zppCommGrow(NULL, 4, &shared->ids[4], 0, &c, &cfg) != zppInvalidArgument; /* rank 0 */
    fails += zppCommGrow(NULL, 4, &shared->ids[4], 4, &c, &cfg) != zppInvalidArgument;
    fails += zppCommGrow(NULL, 1, &shared->ids[4], 0, &c, &cfg) != zppInvalidArgument;
  }
  zppCommDestroy(comm);
  shared->checks[proc] = fails;
  return 0;
}

static int testBad(void) {
  int status[5];
  launch(badBody, 5, "@0,0,1,1,1", status);
  for (int p = 0; p < 5; p++) {
    CHECK_EQ_INT(status[p], 0);
    printf("bad: process %d: %s returned %d after %.2f s: %s\n", p,
           p == 1   ? "a grow with a newcomer on rank 1"
           : p == 4 ? "a late use of a timed-out id"
                    : "a grow where newcomers took ranks 1 and 3",
           shared->result[p], shared->elapsed[p], shared->reason[p]);
    CHECK_MSG(shared->checks[p] == 0, "process %d: %d checks failed", p, shared->checks[p]);
  }
  return 0;
}

int main(int argc, char** argv) {
  shared = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  const char* which = argc > 1 ? argv[1] : "";
  double t0 = zppClockNow();
  if (strcmp(which, "replace") == 0)
    testReplace(argc > 2 ? atoi(argv[2]) : 1, argc > 3 && strcmp(argv[3], "cyclic") == 0);
  else if (strcmp(which, "bad") == 0)
    testBad();
  else {
    fprintf(stderr, "usage: %s replace [TRIALS [cyclic]] | bad\n", argv[0]);
    return 2;
  }
  printf("%s: %.1f s\n", which, zppClockNow() - t0);
  return zppTestExit(which);
}
