/*
 * Faults and bad input on host collectives. Each case is its own ctest:
 *
 *   test_coll_faults kill      a rank dies in the middle of a collective
 *   test_coll_faults stall     a rank stops calling: the others time out
 *   test_coll_faults mismatch  other count / op / type / collective on one rank
 *   test_coll_faults abort     zppCommAbort from another thread unblocks a rank
 *   test_coll_faults leave     a rank aborts a healthy communicator: the others' calls
 *                              that need it, made before or after, fail at once naming
 *                              it; send/recv between the others goes on (2x2 in blocks
 *                              and in turn)
 *   test_coll_faults revoke    zppCommRevoke from another thread ends a blocked call, the
 *                              queued work and a stream synchronize, and frees nothing
 *   test_coll_faults args      bad arguments and streams, comm still usable after
 *   test_coll_faults roots     broadcasts, reduces, gathers, scatters whose ranks name
 *                              different roots fail in the call
 *   test_coll_faults vcounts   all-to-all-v whose send and receive counts disagree
 *
 * Every failure must reach every surviving rank as an error (never success
 * with wrong data) within the bound the test asserts.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll_testlib.h"
#include "testutil.h"
#include "perf/common/launch.h"

/* Shared with the forked ranks: what each saw. */
typedef struct {
  int result[16];
  double elapsed[16];
  char reason[16][256];
} outcome_t;
static outcome_t* shared;

static void record(int rank, zppComm_t comm, zppResult_t res, double t0) {
  shared->result[rank] = (int)res;
  shared->elapsed[rank] = zppClockNow() - t0;
  snprintf(shared->reason[rank], sizeof(shared->reason[rank]), "%s",
           res == zppSuccess ? "" : zppGetLastError(comm));
}

static int launch(int nranks, const char* layout, zppLaunchFn fn, void* arg, int* status) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = nranks;
  o.layout = layout;
  o.timeoutSec = 60;
  o.statusOut = status;
  o.quiet = status != NULL;
  memset(shared, 0, sizeof(*shared));
  for (int r = 0; r < 16; r++) shared->result[r] = -1;
  return zppLaunch(&o, fn, arg);
}

/* ---- a rank dies mid-collective ----------------------------------------- */

#define KILL_TIMEOUT 20.0
static const int victim = 3;

static int killBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = (int)KILL_TIMEOUT;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  size_t count = (size_t)4 << 20; /* 16 MiB of float: long enough to die inside */
  float* buf = calloc(count, sizeof(float));
  REQUIRE(buf);
  REQUIRE(zppAllReduce(buf, buf, 1024, zppFloat32, zppSum, comm, NULL) == zppSuccess);
  for (size_t i = 0; i < count; i++) buf[i] = 1.0f;
  if (rank == victim) {
    zppHostStream_t s;
    REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
    REQUIRE(zppAllReduce(buf, buf, count, zppFloat32, zppSum, comm, s) == zppSuccess);
    zppTestSleep(0.002); /* the call takes some 100 ms: die inside it */
    raise(SIGKILL);
  }
  double t0 = zppClockNow();
  zppResult_t res = zppAllReduce(buf, buf, count, zppFloat32, zppSum, comm, NULL);
  record(rank, comm, res, t0);
  /* Had the victim finished its part, success would be right, but only
   * with the right sums. */
  for (size_t i = 0; res == zppSuccess && i < count; i++)
    if (buf[i] != (float)nranks) shared->result[rank] = 100;
  zppCommDestroy(comm);
  free(buf);
  return 0;
}

static int testKill(void) {
  int status[4];
  /* 2x2: the victim has a peer on its node (shared memory, watched by pid)
   * and two on the other node (tcp, UCX's peer failure handling). */
  launch(4, "2x2", killBody, NULL, status);
  CHECK_EQ_INT(status[victim], 128 + SIGKILL);
  for (int r = 0; r < 4; r++) {
    if (r == victim) continue;
    CHECK_EQ_INT(status[r], 0);
    CHECK_MSG(shared->result[r] == zppRemoteError, "rank %d: result %d", r, shared->result[r]);
    CHECK_MSG(shared->elapsed[r] < KILL_TIMEOUT, "rank %d took %.1f s", r, shared->elapsed[r]);
    printf("kill: rank %d saw the error after %.2f s: %s\n", r, shared->elapsed[r], shared->reason[r]);
  }
  return 0;
}

/* ---- a rank stops calling ------------------------------------------------- */

#define STALL_TIMEOUT 3
static const int staller = 2;

static int stallBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = STALL_TIMEOUT;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  int32_t v[300];
  for (int i = 0; i < 300; i++) v[i] = rank;
  REQUIRE(zppAllReduce(v, v, 300, zppInt32, zppSum, comm, NULL) == zppSuccess);
  if (rank == staller) zppTestSleep(STALL_TIMEOUT + 2.0);
  double t0 = zppClockNow();
  zppResult_t res = zppAllGather(v + rank * 100, v, 100, zppInt32, comm, NULL);
  record(rank, comm, res, t0);
  zppCommDestroy(comm);
  return 0;
}

static int testStall(void) {
  int status[3];
  launch(3, NULL, stallBody, NULL, status);
  int named = 0;
  for (int r = 0; r < 3; r++) {
    CHECK_EQ_INT(status[r], 0);
    CHECK_MSG(shared->result[r] == zppRemoteError, "rank %d: result %d", r, shared->result[r]);
    printf("stall: rank %d: %d after %.2f s: %s\n", r, shared->result[r], shared->elapsed[r],
           shared->reason[r]);
    if (r == staller) {
      /* It comes back late and learns at once that the others gave up. */
      CHECK_MSG(shared->elapsed[r] < 1.0, "late rank took %.2f s", shared->elapsed[r]);
      continue;
    }
    CHECK_MSG(shared->elapsed[r] >= STALL_TIMEOUT - 0.5 && shared->elapsed[r] < STALL_TIMEOUT + 2.0,
              "rank %d gave up after %.2f s (timeout %d s)", r, shared->elapsed[r], STALL_TIMEOUT);
    /* A rank names the one it waited for, which may itself be waiting for
     * the staller; one of them names the staller. */
    CHECK_MSG(strstr(shared->reason[r], "timed out") != NULL, "rank %d's reason: %s", r,
              shared->reason[r]);
    named += strstr(shared->reason[r], "rank 2 ") != NULL;
  }
  CHECK_MSG(named > 0, "no rank named the rank that stopped calling");
  return 0;
}

/* ---- mismatched calls --------------------------------------------------- */

typedef enum {
  MIS_COUNT,
  MIS_OP,
  MIS_TYPE,
  MIS_COLL,
  MIS_ROOT,
  MIS_COUNT_LARGE,
  MIS_REDUCE_OP,
  MIS_REDUCE_COUNT,
  MIS_GATHER_COUNT,
  MIS_SCATTER_TYPE,
  MIS_LAST = MIS_SCATTER_TYPE
} mismatch_t;
static const char* misNames[] = {
    "count",         "op",        "type",         "collective",   "root",
    "count (large)", "reduce op", "reduce count", "gather count", "scatter type"};

static int mismatchBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  mismatch_t m = *(const mismatch_t*)arg;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 20;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  const int odd = 1; /* the rank that calls something else */
  size_t count = m == MIS_COUNT_LARGE ? 300000 : 100;
  int32_t* buf = calloc(count * (size_t)nranks + 8, sizeof(int32_t));
  REQUIRE(buf);
  double t0 = zppClockNow();
  zppResult_t res;
  switch (m) {
    case MIS_COUNT:
    case MIS_COUNT_LARGE:
      res = zppAllReduce(buf, buf, rank == odd ? count + 1 : count, zppInt32, zppSum, comm, NULL);
      break;
    case MIS_OP:
      res = zppAllReduce(buf, buf, count, zppInt32, rank == odd ? zppMax : zppSum, comm, NULL);
      break;
    case MIS_TYPE: /* same element size: only the signature tells them apart */
      res = zppAllReduce(buf, buf, count, rank == odd ? zppFloat32 : zppInt32, zppSum, comm, NULL);
      break;
    case MIS_COLL:
      res = rank == odd ? zppBroadcast(buf, buf, count, zppInt32, 0, comm, NULL)
                        : zppAllGather(buf + (size_t)rank * count, buf, count, zppInt32, comm, NULL);
      break;
    case MIS_REDUCE_OP:
      res = zppReduce(buf, buf, count, zppInt32, rank == odd ? zppMax : zppSum, 2, comm, NULL);
      break;
    case MIS_REDUCE_COUNT:
      res = zppReduce(buf, buf, rank == odd ? count - 1 : count, zppInt32, zppSum, 0, comm, NULL);
      break;
    case MIS_GATHER_COUNT:
      res = zppGather(buf + (size_t)rank * count, buf, rank == odd ? count + 3 : count, zppInt32, 3,
                      comm, NULL);
      break;
    case MIS_SCATTER_TYPE:
      res = zppScatter(buf, buf + (size_t)rank * count, count, rank == odd ? zppUint32 : zppInt32, 1,
                       comm, NULL);
      break;
    default: {
      int root = rank == odd ? 1 : 0;
      for (size_t i = 0; i < count; i++) buf[i] = rank == root ? 1000 + root : -1;
      res = zppBroadcast(buf, buf, count, zppInt32, root, comm, NULL);
      /* Success is acceptable only with the right data for this rank's call,
       * and the mismatch must come out by the next call. */
      for (size_t i = 0; res == zppSuccess && i < count; i++)
        if (buf[i] != 1000 + root) res = (zppResult_t)100;
      if (res == zppSuccess) res = zppAllReduce(buf, buf, count, zppInt32, zppSum, comm, NULL);
      break;
    }
  }
  record(rank, comm, res, t0);
  zppCommDestroy(comm);
  free(buf);
  return 0;
}

static int testMismatch(void) {
  for (mismatch_t m = MIS_COUNT; m <= MIS_LAST; m++) {
    int status[4];
    launch(4, "2x2", mismatchBody, &m, status);
    int named = 0, failed = 0;
    for (int r = 0; r < 4; r++) {
      CHECK_EQ_INT(status[r], 0);
      int ok = shared->result[r] == zppInvalidUsage || shared->result[r] == zppRemoteError;
      failed += shared->result[r] != zppSuccess;
      CHECK_MSG(ok, "mismatched %s: rank %d returned %d", misNames[m], r, shared->result[r]);
      CHECK_MSG(shared->elapsed[r] < 10.0, "mismatched %s: rank %d took %.1f s", misNames[m], r,
                shared->elapsed[r]);
      named += strstr(shared->reason[r], "mismatched") != NULL ||
               strstr(shared->reason[r], "different counts") != NULL;
    }
    CHECK_MSG(named > 0, "mismatched %s: no rank said why", misNames[m]);
    CHECK_MSG(failed > 0, "mismatched %s: every rank succeeded", misNames[m]);
    printf("mismatched %s: rank 0 after %.2f s: %s\n", misNames[m], shared->elapsed[0],
           shared->reason[0]);
  }
  return 0;
}

/* ---- broadcast roots that disagree ------------------------------------------ */

/* Two groups that each agree within (ranks 0,1 say root 0, ranks 2,3 say
 * root 2), or every rank its own root: no rank's receive meets the other
 * group's messages, and each group "succeeded" with its own root's data in
 * 20 of 20 runs until the broadcast checked that the roots agree. */
typedef struct {
  size_t count;
  int everyRankRoot;
  zppOpKind_t kind; /* broadcast, reduce, gather, scatter */
} rootsCase_t;

static int rootsBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const rootsCase_t* rc = arg;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 5;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  int32_t* buf = calloc(rc->count * (size_t)nranks, sizeof(int32_t));
  REQUIRE(buf);
  int root = rc->everyRankRoot ? rank : (rank < 2 ? 0 : 2);
  for (size_t i = 0; i < rc->count; i++) buf[i] = rank == root ? 1000 + root : -1;
  double t0 = zppClockNow();
  zppResult_t res;
  int32_t* own = buf + (size_t)rank * rc->count;
  switch (rc->kind) {
    case zppOpReduce: res = zppReduce(buf, buf, rc->count, zppInt32, zppSum, root, comm, NULL); break;
    case zppOpGather: res = zppGather(own, buf, rc->count, zppInt32, root, comm, NULL); break;
    case zppOpScatter: res = zppScatter(buf, own, rc->count, zppInt32, root, comm, NULL); break;
    default: res = zppBroadcast(buf, buf, rc->count, zppInt32, root, comm, NULL); break;
  }
  record(rank, comm, res, t0);
  zppCommDestroy(comm);
  free(buf);
  return 0;
}

static int testRoots(void) {
  const size_t counts[2] = {16, 1024};
  int bad = 0, runs = 0;
  const zppOpKind_t kinds[4] = {zppOpBroadcast, zppOpReduce, zppOpGather, zppOpScatter};
  for (int trial = 0; trial < 10; trial++)
    for (int k = 0; k < 16; k++) {
      /* Broadcast 10 times, the others (the same agreement round) twice,
       * once per layout, at 1024 elements: each launch costs up to a
       * second or two, most of it the ranks' start. */
      if (k >= 4 && (trial >= 2 || (k & 1) == 0)) continue;
      rootsCase_t rc = {counts[k & 1], (k >> 1) & 1, kinds[k >> 2]};
      const char* layout = trial & 1 ? "2x2" : NULL; /* flat inside a node, binomial across */
      int status[4];
      launch(4, layout, rootsBody, &rc, status);
      runs++;
      for (int r = 0; r < 4; r++) {
        int ok = status[r] == 0 &&
                 (shared->result[r] == zppInvalidUsage || shared->result[r] == zppRemoteError) &&
                 shared->elapsed[r] < 5.0 + 3.0;
        if (!ok) {
          printf("roots: %s %zu elements, %s, layout %s: rank %d: status %d result %d after %.2f s\n",
                 zppOpKindName(rc.kind), rc.count,
                 rc.everyRankRoot ? "every rank its own root" : "roots 0 and 2",
                 layout ? layout : "1 node", r, status[r], shared->result[r], shared->elapsed[r]);
          bad++;
        }
      }
    }
  printf("roots: %d launches, %d rank outcomes wrong; rank 0's last reason: %s\n", runs, bad,
         shared->reason[0]);
  CHECK_MSG(bad == 0, "%d rank outcomes wrong", bad);
  return 0;
}

/* ---- all-to-all-v counts that disagree ---------------------------------------- */

/* Rank `from` sends rank `to` one element more (trial even) or less than
 * `to` expects. Every rank must fail at once with zppInvalidUsage naming
 * both, move no data, and keep a usable communicator: a matching
 * all-to-all-v right after delivers the right data. */
static int vcountsBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const int trial = *(const int*)arg, from = trial % nranks, to = (trial + 1 + trial / nranks) % nranks;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 20;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  enum { C = 5 };
  size_t sc[16], sd[16], rc[16], rd[16];
  int32_t send[16 * (C + 1)], recv[16 * (C + 1)];
  for (int p = 0; p < nranks; p++) {
    sc[p] = rc[p] = C;
    sd[p] = rd[p] = (size_t)p * (C + 1);
    for (int i = 0; i < C + 1; i++) send[p * (C + 1) + i] = rank * 100 + p;
  }
  for (int i = 0; i < nranks * (C + 1); i++) recv[i] = -7;
  if (rank == from) sc[to] = trial % 2 ? C - 1 : C + 1;
  double t0 = zppClockNow();
  zppResult_t res = zppAllToAllv(send, sc, sd, recv, rc, rd, zppInt32, comm, NULL);
  record(rank, comm, res, t0);
  int untouched = 1;
  for (int i = 0; i < nranks * (C + 1); i++) untouched &= recv[i] == -7;
  if (rank == from) sc[to] = C;
  zppResult_t again = zppAllToAllv(send, sc, sd, recv, rc, rd, zppInt32, comm, NULL);
  int right = again == zppSuccess;
  for (int p = 0; p < nranks; p++)
    for (int i = 0; i < C; i++) right &= recv[p * (C + 1) + i] == p * 100 + rank;
  /* Outcome codes the parent reads: 1 untouched, 2 the next call right. */
  shared->result[8 + rank] = untouched + 2 * right;
  zppCommDestroy(comm);
  return 0;
}

static int testVcounts(void) {
  int bad = 0;
  for (int trial = 0; trial < 12; trial++) {
    int status[4];
    launch(4, trial & 2 ? "2x2" : NULL, vcountsBody, &trial, status);
    const int from = trial % 4, to = (trial + 1 + trial / 4) % 4;
    char want[64];
    snprintf(want, sizeof(want), "rank %d sends %d elements to rank %d", from, trial % 2 ? 4 : 6, to);
    for (int r = 0; r < 4; r++) {
      int ok = status[r] == 0 && shared->result[r] == zppInvalidUsage && shared->elapsed[r] < 5.0 &&
               strstr(shared->reason[r], want) != NULL && shared->result[8 + r] == 3;
      if (!ok) {
        printf("vcounts trial %d: rank %d: status %d result %d after %.2f s, after-call %d: %s\n",
               trial, r, status[r], shared->result[r], shared->elapsed[r], shared->result[8 + r],
               shared->reason[r]);
        bad++;
      }
    }
  }
  printf("vcounts: 12 launches, %d rank outcomes wrong; rank 0's last reason: %s\n", bad,
         shared->reason[0]);
  CHECK_MSG(bad == 0, "%d rank outcomes wrong", bad);
  return 0;
}

/* ---- abort from another thread -------------------------------------------- */

static void* aborter(void* arg) {
  zppTestSleep(0.5);
  zppCommAbort((zppComm_t)arg);
  return NULL;
}

static int abortBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 30;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  float v[64] = {0};
  if (rank == 1) {
    zppTestSleep(3.0); /* never joins while rank 0 waits */
    zppCommAbort(comm);
    return 0;
  }
  zppHostStream_t s;
  REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
  float w[64] = {0};
  REQUIRE(zppAllReduce(w, w, 64, zppFloat32, zppSum, comm, s) == zppSuccess); /* queued */
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, aborter, comm) == 0);
  double t0 = zppClockNow();
  /* Blocks behind the queued operation until the abort. */
  zppResult_t res = zppAllReduce(v, v, 64, zppFloat32, zppSum, comm, NULL);
  shared->result[0] = (int)res;
  shared->elapsed[0] = zppClockNow() - t0;
  pthread_join(th, NULL);
  /* The queued operation failed too, and the stream says so. */
  shared->result[1] = (int)zppHostStreamSynchronize(s);
  zppHostStreamDestroy(s);
  return 0;
}

static int testAbort(void) {
  int status[2];
  launch(2, NULL, abortBody, NULL, status);
  CHECK_EQ_INT(status[0], 0);
  CHECK_EQ_INT(status[1], 0);
  CHECK_MSG(shared->result[0] != zppSuccess && shared->result[0] >= 0, "blocked call returned %d",
            shared->result[0]);
  CHECK_MSG(shared->elapsed[0] > 0.4 && shared->elapsed[0] < 2.0, "abort took %.2f s to unblock",
            shared->elapsed[0]);
  CHECK_MSG(shared->result[1] != zppSuccess && shared->result[1] >= 0, "stream returned %d",
            shared->result[1]);
  printf("abort: the blocked call returned %d after %.2f s\n", shared->result[0], shared->elapsed[0]);
  return 0;
}

/* ---- a rank leaves: zppCommAbort of a healthy communicator ---------------- */

/* The leaver aborts LEAVE_AT s after a first call that all made; the others
 * call again before it (in the call when it leaves) or after (the notice is
 * waiting for them). Both must fail within LEAVE_BOUND s of the abort, far
 * from their 30 s timeout, and name the leaver and the abort. */
#define LEAVE_AT 0.3
#define LEAVE_BOUND 2.0

typedef struct {
  int leaver;
  int callLate; /* the others call 0.5 s after the abort */
} leaveArg_t;

static int leaveBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const leaveArg_t* a = arg;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 30;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  size_t count = (size_t)1 << 20;
  float* buf = calloc(count, sizeof(float));
  REQUIRE(buf);
  REQUIRE(zppAllReduce(buf, buf, count, zppFloat32, zppSum, comm, NULL) == zppSuccess);
  double start = zppClockNow();
  if (rank == a->leaver) {
    zppTestSleep(LEAVE_AT);
    REQUIRE(zppCommAbort(comm) == zppSuccess);
    free(buf);
    return 0;
  }
  if (a->callLate) zppTestSleep(LEAVE_AT + 0.5);
  /* Two of the others exchange 1 Mi floats, untouched by the leave (slot
   * 8 + rank: 1 when right). */
  int pair[2], np = 0;
  for (int r = 0; r < nranks && np < 2; r++)
    if (r != a->leaver) pair[np++] = r;
  if (rank == pair[0] || rank == pair[1]) {
    int other = rank == pair[0] ? pair[1] : pair[0];
    float* in = malloc(count * sizeof(float));
    REQUIRE(in);
    for (size_t i = 0; i < count; i++) buf[i] = (float)(rank * 1000 + (int)(i % 1000));
    REQUIRE(zppGroupStart() == zppSuccess);
    zppSend(buf, count, zppFloat32, other, comm, NULL);
    zppRecv(in, count, zppFloat32, other, comm, NULL);
    zppResult_t pr = zppGroupEnd();
    int right = pr == zppSuccess;
    for (size_t i = 0; right && i < count; i++)
      right = in[i] == (float)(other * 1000 + (int)(i % 1000));
    shared->result[8 + rank] = right;
    free(in);
  } else {
    /* The third calls the all-reduce once the pair is done: its failure
     * breaks the communicator for all, as any failed call does. */
    double end = zppClockNow() + 10.0;
    while ((shared->result[8 + pair[0]] < 0 || shared->result[8 + pair[1]] < 0) && zppClockNow() < end)
      zppTestSleep(0.001);
  }
  zppResult_t res = zppAllReduce(buf, buf, count, zppFloat32, zppSum, comm, NULL);
  record(rank, comm, res, start); /* elapsed: from LEAVE_AT before the abort */
  zppCommDestroy(comm);
  free(buf);
  return 0;
}

static int testLeave(void) {
  int bad = 0;
  double worst = 0.0;
  /* Each rank leaves in turn, the others calling before or after, on nodes
   * in blocks and then taken in turn (node0, node1, node0, node1). */
  for (int trial = 0; trial < 16; trial++) {
    leaveArg_t a = {.leaver = 3 - (trial % 8) / 2, .callLate = trial % 2};
    int status[4];
    launch(4, trial < 8 ? "2x2" : "2x2/cyclic", leaveBody, &a, status);
    char want[64];
    snprintf(want, sizeof(want), "rank %d (host", a.leaver);
    for (int r = 0, paired = 0; r < 4; r++) {
      if (r == a.leaver) {
        bad += status[r] != 0;
        continue;
      }
      if (paired++ < 2 && shared->result[8 + r] != 1) {
        printf("leave trial %d: rank %d: its send/recv with another survivor failed or was wrong\n",
               trial, r);
        bad++;
      }
      /* From the abort, or from the call when made after it. */
      double late = shared->elapsed[r] - (a.callLate ? LEAVE_AT + 0.5 : LEAVE_AT);
      int ok = status[r] == 0 && shared->result[r] == zppRemoteError && late < LEAVE_BOUND &&
               strstr(shared->reason[r], want) != NULL &&
               strstr(shared->reason[r], "zppCommAbort") != NULL;
      if (late > worst) worst = late;
      if (!ok || trial == 0 || getenv("ZPP_TEST_VERBOSE"))
        printf(
            "leave trial %d (rank %d leaves, others call %s): rank %d: %s, status %d, result %d "
            "%.2f s after the abort: %s\n",
            trial, a.leaver, a.callLate ? "after" : "before", r, ok ? "ok" : "WRONG", status[r],
            shared->result[r], late, shared->reason[r]);
      bad += !ok;
    }
  }
  printf("leave: 16 launches, %d rank outcomes wrong; slowest error %.2f s after the abort\n", bad,
         worst);
  CHECK_MSG(bad == 0, "%d rank outcomes wrong", bad);
  return 0;
}

/* ---- revoke from another thread ------------------------------------------- */

/* Ranks 2 and 3 stay alive but never join (hung peers: only a revoke or the
 * 30 s timeout ends a wait on them). Rank 0 blocks in a call behind a queued
 * stream operation, rank 1 in zppHostStreamSynchronize; a second thread
 * revokes after 0.5 s. Then each checks, in slots 4 + 4 * rank onwards: the
 * stream's result, a later call's result and time, and that the handle still
 * answers. */
#define REVOKE_AT 0.5

static void* revoker(void* arg) {
  zppTestSleep(REVOKE_AT);
  zppCommRevoke((zppComm_t)arg);
  return NULL;
}

static int revokeBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 30;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  float v[64] = {0}, w[64] = {0};
  REQUIRE(zppAllReduce(v, v, 64, zppFloat32, zppSum, comm, NULL) == zppSuccess);
  if (rank >= 2) {
    zppTestSleep(4.0); /* hung, as far as the others can tell */
    zppCommRevoke(comm);
    zppCommDestroy(comm);
    return 0;
  }
  int* slot = shared->result + 4 + 4 * rank;
  zppHostStream_t s;
  REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
  REQUIRE(zppAllReduce(w, w, 64, zppFloat32, zppSum, comm, s) == zppSuccess); /* queued */
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, revoker, comm) == 0);
  double t0 = zppClockNow();
  zppResult_t res =
      rank == 0 ? zppAllReduce(v, v, 64, zppFloat32, zppSum, comm, NULL) : zppHostStreamSynchronize(s);
  record(rank, comm, res, t0);
  pthread_join(th, NULL);
  /* The queued operation failed too (rank 1's synchronize above said so, and
   * a stream reports an error once). */
  slot[0] = rank == 0 ? (int)zppHostStreamSynchronize(s) : (int)res;
  /* A call after the revoke fails at once, with the same reason. */
  t0 = zppClockNow();
  res = zppAllGather(v, w, 4, zppFloat32, comm, NULL);
  double later = zppClockNow() - t0;
  slot[1] = (int)res;
  slot[2] = later < 0.5 && strstr(zppGetLastError(comm), "revoked") != NULL;
  /* Nothing was freed: the handle answers, a second revoke is harmless, and
   * destroy returns promptly although two peers never reached theirs. */
  int count = 0;
  zppResult_t async = zppSuccess;
  int ok = zppCommCount(comm, &count) == zppSuccess && count == nranks &&
           zppCommGetAsyncError(comm, &async) == zppSuccess && async != zppSuccess &&
           zppCommRevoke(comm) == zppSuccess;
  t0 = zppClockNow();
  ok = ok && zppCommDestroy(comm) == zppSuccess && zppClockNow() - t0 < 2.0;
  slot[3] = ok;
  zppHostStreamDestroy(s);
  return 0;
}

static int testRevoke(void) {
  int status[4];
  launch(4, "2x2", revokeBody, NULL, status);
  for (int r = 0; r < 4; r++) CHECK_EQ_INT(status[r], 0);
  for (int r = 0; r < 2; r++) {
    const int* slot = shared->result + 4 + 4 * r;
    printf("revoke: rank %d's %s returned %d after %.2f s: %s\n", r,
           r == 0 ? "blocked call" : "stream synchronize", shared->result[r], shared->elapsed[r],
           shared->reason[r]);
    CHECK_MSG(shared->result[r] != zppSuccess && shared->result[r] >= 0, "rank %d: returned %d", r,
              shared->result[r]);
    CHECK_MSG(strstr(shared->reason[r], "revoked") != NULL, "rank %d: the reason is not the revoke", r);
    CHECK_MSG(shared->elapsed[r] > REVOKE_AT - 0.1 && shared->elapsed[r] < REVOKE_AT + 1.5,
              "rank %d: the revoke took %.2f s to end the wait", r, shared->elapsed[r]);
    CHECK_MSG(slot[0] != zppSuccess, "rank %d: the queued operation succeeded", r);
    CHECK_MSG(slot[1] != zppSuccess && slot[2], "rank %d: a later call returned %d (fast, revoked: %d)",
              r, slot[1], slot[2]);
    CHECK_MSG(slot[3], "rank %d: the revoked handle did not answer, or destroy was slow", r);
  }
  return 0;
}

/* ---- bad arguments -------------------------------------------------------- */

static int argsBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  int32_t a[64] = {0}, b[64] = {0};
  CHECK_EQ_INT(zppAllReduce(NULL, b, 4, zppInt32, zppSum, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllReduce(a, NULL, 4, zppInt32, zppSum, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllReduce(a, b, 4, (zppDataType_t)42, zppSum, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllReduce(a, b, 4, zppInt32, (zppRedOp_t)9, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllGather(a, b, SIZE_MAX / 4, zppInt32, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllToAll(a, b, ((size_t)1 << 62) / 2, zppInt64, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppBroadcast(a, b, 4, zppInt32, nranks, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppBroadcast(a, b, 4, zppInt32, -1, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllReduce(a, b, 4, zppInt32, zppSum, NULL, NULL), zppInvalidArgument);
  /* Rooted calls: the root in range; the root's recvbuff (reduce, gather)
   * and sendbuff (scatter) must be there, the others' may be NULL. */
  CHECK_EQ_INT(zppReduce(a, b, 4, zppInt32, zppSum, nranks, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppReduce(a, b, 4, zppInt32, zppAvg + 1, 0, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppGather(a, b, 4, zppInt32, -1, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppScatter(a, b, 4, zppInt32, nranks + 3, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppReduce(a, NULL, 4, zppInt32, zppSum, rank, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppGather(a, NULL, 4, zppInt32, rank, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppScatter(NULL, b, 4, zppInt32, rank, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppGather(a, a + 1, 4, zppInt32, rank, comm, NULL), zppInvalidUsage);
  /* All-to-all-v: arrays, counts that overflow, overlapping buffers. */
  size_t ones[3] = {1, 1, 1}, displ[3] = {0, 1, 2}, huge[3] = {SIZE_MAX / 2, 1, 1};
  CHECK_EQ_INT(zppAllToAllv(a, NULL, displ, b, ones, displ, zppInt32, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllToAllv(a, ones, displ, b, ones, NULL, zppInt32, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllToAllv(a, huge, displ, b, ones, displ, zppInt32, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllToAllv(a, ones, displ, NULL, ones, displ, zppInt32, comm, NULL),
               zppInvalidArgument);
  CHECK_EQ_INT(zppAllToAllv(a, ones, displ, a + 2, ones, displ, zppInt32, comm, NULL), zppInvalidUsage);
  CHECK_EQ_INT(zppAllToAllv(a, ones, displ, b, ones, displ, (zppDataType_t)-1, comm, NULL),
               zppInvalidArgument);
  /* Overlapping, but not NCCL's in-place form. */
  CHECK_EQ_INT(zppAllReduce(a, a + 1, 4, zppInt32, zppSum, comm, NULL), zppInvalidUsage);
  CHECK_EQ_INT(zppAllGather(a + (rank == 0 ? 1 : 0), a, 4, zppInt32, comm, NULL), zppInvalidUsage);
  /* A stream that is not a host stream, and a destroyed one. */
  int notAStream = 0;
  CHECK_EQ_INT(zppAllReduce(a, b, 4, zppInt32, zppSum, comm, &notAStream), zppInvalidArgument);
  zppHostStream_t s;
  REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
  REQUIRE(zppHostStreamDestroy(s) == zppSuccess);
  CHECK_EQ_INT(zppAllReduce(a, b, 4, zppInt32, zppSum, comm, s), zppInvalidArgument);
  CHECK_EQ_INT(zppHostStreamSynchronize(NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppHostStreamDestroy(NULL), zppSuccess);
  /* Nothing to move: fine, even with NULL buffers (as NCCL). */
  CHECK_EQ_INT(zppAllReduce(NULL, NULL, 0, zppInt32, zppSum, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppGather(NULL, NULL, 0, zppInt32, 1, comm, NULL), zppSuccess);
  /* Non-roots pass NULL where only the root's buffer is used. */
  CHECK_EQ_INT(zppReduce(a, rank == 2 ? b : NULL, 4, zppInt32, zppSum, 2, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppScatter(rank == 0 ? a : NULL, b, 4, zppInt32, 0, comm, NULL), zppSuccess);
  size_t zeros[3] = {0, 0, 0};
  CHECK_EQ_INT(zppAllToAllv(NULL, zeros, zeros, NULL, zeros, zeros, zppInt32, comm, NULL), zppSuccess);
  /* Rejected calls left the communicator healthy. */
  for (int i = 0; i < 64; i++) a[i] = rank + i;
  CHECK_EQ_INT(zppAllReduce(a, b, 64, zppInt32, zppSum, comm, NULL), zppSuccess);
  int bad = 0;
  for (int i = 0; i < 64; i++) bad += b[i] != nranks * (nranks - 1) / 2 + nranks * i;
  CHECK_EQ_INT(bad, 0);
  zppResult_t async;
  CHECK(zppCommGetAsyncError(comm, &async) == zppSuccess && async == zppSuccess);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  return zppTestFailures ? 1 : 0;
}

static int testArgs(void) {
  CHECK_EQ_INT(launch(3, NULL, argsBody, NULL, NULL), 0);
  return 0;
}

int main(int argc, char** argv) {
  shared = mmap(NULL, sizeof(outcome_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  const char* which = argc > 1 ? argv[1] : "";
  double t0 = zppClockNow();
  if (strcmp(which, "kill") == 0)
    testKill();
  else if (strcmp(which, "stall") == 0)
    testStall();
  else if (strcmp(which, "mismatch") == 0)
    testMismatch();
  else if (strcmp(which, "abort") == 0)
    testAbort();
  else if (strcmp(which, "leave") == 0)
    testLeave();
  else if (strcmp(which, "revoke") == 0)
    testRevoke();
  else if (strcmp(which, "args") == 0)
    testArgs();
  else if (strcmp(which, "roots") == 0)
    testRoots();
  else if (strcmp(which, "vcounts") == 0)
    testVcounts();
  else {
    fprintf(stderr, "usage: %s kill|stall|mismatch|abort|leave|revoke|args|roots|vcounts\n", argv[0]);
    return 2;
  }
  printf("%s: %.1f s\n", which, zppClockNow() - t0);
  return zppTestExit(which);
}
