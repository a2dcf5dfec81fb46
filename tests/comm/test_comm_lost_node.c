/*
 * A lost node, again and again. Processes on emulated nodes run one kind of call in a loop; a
 * supervisor (this program's main process) kills a node's processes (SIGKILL) or hangs them
 * (SIGSTOP) while they call; the survivors see the error, revoke, shrink, check every kind of call
 * on the shrunk communicator, and grow it back with replacement processes on the lost node, which
 * the next trial may lose in turn. Issue 44's matrix, and the times docs/fault-tolerance.md reports.
 *
 *   test_comm_lost_node LAYOUT kill|stop|twice TRIALS [OPS] [SIZES] [timeout=SEC]
 *
 *     LAYOUT   2x2, 3x2, 4x1, 4x4, 2x2/cyclic, ... (the layouts of perf/common/launch.h)
 *     kill     a node's processes SIGKILLed during a call
 *     stop     SIGSTOPped instead: hung, found by the timeout (2 s unless timeout=SEC)
 *     twice    a node SIGKILLed, then one more rank, of another node, during a call on the shrunk
 *              communicator; one grow replaces all of them
 *     TRIALS   failures, each shrunk and grown back: trial t kills during op t % nOps at size
 *              (t / nOps) % nSizes, on a node that varies from trial to trial
 *     OPS      comma list of allreduce, allgather, reducescatter, qwz, hpz, qgz (default: all six)
 *     SIZES    small (4 Ki floats in the full buffer), large (1 Mi floats), both (default)
 *
 * Every call's result is checked: exact for the plain collectives, within the codec's bound for
 * qwZ/hpZ (8-bit) and qgZ (4-bit; exact where it runs plain, on nodes of different sizes). The
 * supervisor counts hangs (a step that did not come within 60 s), survivors lost (one that did not
 * end with 0) and wrong results; any is a failure. It prints one line per trial, the median and
 * largest of each time over the trials, and a JSON line (`{"lost_node": ...}`):
 *   detect  from the kill to the failed call's return, on the last survivor to see it
 *   revoke  zppCommRevoke on the survivors (largest)
 *   shrink  zppCommShrink, from the first survivor's call to the last one's return
 *   grow    zppCommGrow, from the first member's call to the last one's return
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "comm_exercise.h"
#include "perf/common/launch.h"

enum { MAXP = 32, MAXT = 1024, NOPS = 6, STEP_DEADLINE = 60 };
typedef enum { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_QWZ, OP_HPZ, OP_QGZ } op_t;
static const char* const opNames[NOPS] = {"allreduce", "allgather", "reducescatter",
                                          "qwz",       "hpz",       "qgz"};
typedef enum { MODE_KILL, MODE_STOP, MODE_TWICE } mode_t_;

/* The run's settings, the same in every process (set before the first fork). */
static struct {
  int nranks, nNodes, nodeOf[MAXP];
  mode_t_ mode;
  int trials, timeoutSec;
  int nOps, ops[NOPS];
  int nSizes;
  size_t sizes[2];
} opt;

/* One process slot: a rank's process, then its replacement's. */
typedef struct {
  _Atomic int pid;
  _Atomic int phase;       /* the communicator it calls on in a loop (numbered as the members count) */
  _Atomic long iters;      /* calls completed there */
  _Atomic int rank;        /* its rank there */
  int joinTrial, joinRank; /* a replacement: the trial whose grow it joins, at this rank */
  int checks;              /* failed checks, when it ended */
} slot_t;

/* Shared between the supervisor and every process. Times are zppClockNow() (CLOCK_MONOTONIC: one
 * clock for all processes). */
typedef struct {
  int lost[MAXT][2][MAXP], nLost[MAXT][2]; /* ranks excluded at failure f of trial t */
  double killAt[MAXT][2];
  zppUniqueId growId[MAXT];
  _Atomic int growReady[MAXT];
  int growPhase[MAXT];
  double failedAt[MAXT][2][MAXP], revokeSec[MAXT][2][MAXP]; /* by rank before the failure */
  double shrinkFrom[MAXT][2][MAXP], shrinkTo[MAXT][2][MAXP];
  double growFrom[MAXT][MAXP], growTo[MAXT][MAXP]; /* by rank in the grown communicator */
  slot_t slot[MAXP];
} shared_t;
static shared_t* shared;

static op_t opOf(int t) { return (op_t)opt.ops[t % opt.nOps]; }
static size_t sizeOf(int t) { return opt.sizes[(t / opt.nOps) % opt.nSizes]; }
static int failuresPerTrial(void) { return opt.mode == MODE_TWICE ? 2 : 1; }
/* The node lost at trial t: varied, so that each node (the one of rank 0 too) is lost while each
 * kind of call runs. */
static int victimNode(int t) { return (int)((unsigned)(t * 7 + t / opt.nOps) % (unsigned)opt.nNodes); }

static zppConfig_t config(void) {
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = opt.timeoutSec;
  return cfg;
}

/* ---- the calls, and their checks ---------------------------------------------------------- */

/* Exactly representable values, so that plain sums are exact in any order. */
static float plainValue(int rank, size_t i) {
  return (float)((i * 7 + (size_t)rank * 3) % 16 + (size_t)rank);
}
/* qwZ/hpZ data: within [1, 2), where 8-bit blocks are within 2/127. */
static float qwzValue(int rank, size_t i) {
  return 1.0f + (float)((i * 37 + (size_t)rank * 11) % 64) / 64.0f;
}

typedef struct {
  op_t op;
  size_t count; /* per rank: the full buffer holds count * n (all-reduce: count) */
  int n, me;
  float *send, *recv, *recv2;
  zppParam_t param;
} call_t;

static void callSetup(call_t* c, zppComm_t comm, op_t op, size_t full) {
  memset(c, 0, sizeof(*c));
  REQUIRE(zppCommCount(comm, &c->n) == zppSuccess && zppCommUserRank(comm, &c->me) == zppSuccess);
  c->op = op;
  c->count = op == OP_ALLREDUCE ? full : full / (size_t)c->n;
  size_t all = c->count * (size_t)c->n;
  c->send = calloc(all, sizeof(float));
  c->recv = calloc(all, sizeof(float));
  c->recv2 = calloc(all, sizeof(float));
  REQUIRE(c->send && c->recv && c->recv2);
  for (size_t i = 0; i < all; i++) {
    switch (op) {
      case OP_ALLREDUCE:
      case OP_ALLGATHER:
      case OP_REDUCESCATTER: c->send[i] = plainValue(c->me, i); break;
      case OP_QWZ:
      case OP_HPZ: c->send[i] = qwzValue(c->me, i); break;
      case OP_QGZ: c->send[i] = (float)(c->me + 1); break; /* blocks of one value */
    }
  }
  if (op == OP_HPZ) REQUIRE(zppParamCreate(comm, c->count, zppFloat32, 8, &c->param) == zppSuccess);
}

static void callFree(call_t* c) {
  zppParamDestroy(c->param);
  free(c->send);
  free(c->recv);
  free(c->recv2);
}

static zppResult_t callRun(call_t* c, zppComm_t comm) {
  switch (c->op) {
    case OP_ALLREDUCE: return zppAllReduce(c->send, c->recv, c->count, zppFloat32, zppSum, comm, NULL);
    case OP_ALLGATHER: return zppAllGather(c->send, c->recv, c->count, zppFloat32, comm, NULL);
    case OP_REDUCESCATTER:
      return zppReduceScatter(c->send, c->recv, c->count, zppFloat32, zppSum, comm, NULL);
    case OP_QWZ: return zppQwzAllGather(c->send, c->recv, c->count, zppFloat32, 8, comm, NULL);
    case OP_HPZ: {
      zppResult_t r = zppParamGatherForward(c->param, c->send, c->recv, NULL);
      return r != zppSuccess ? r : zppParamGatherBackward(c->param, c->send, c->recv2, NULL);
    }
    case OP_QGZ:
      return zppQgzReduceScatter(c->send, c->recv, c->count, zppFloat32, zppSum, 4, comm, NULL);
  }
  return zppInternalError;
}

/* Wrong elements of the last result (0: right). */
static long callCheck(const call_t* c, zppComm_t comm) {
  long bad = 0;
  const int n = c->n;
  const size_t k = c->count;
  switch (c->op) {
    case OP_ALLREDUCE:
      for (size_t i = 0; i < k; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += plainValue(r, i);
        bad += c->recv[i] != want;
      }
      break;
    case OP_ALLGATHER:
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < k; i++) bad += c->recv[(size_t)r * k + i] != plainValue(r, i);
      break;
    case OP_REDUCESCATTER:
      for (size_t i = 0; i < k; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += plainValue(r, (size_t)c->me * k + i);
        bad += c->recv[i] != want;
      }
      break;
    case OP_HPZ:
      bad += memcmp(c->recv, c->recv2, k * (size_t)n * sizeof(float)) != 0; /* fall through */
    case OP_QWZ:
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < k; i++) {
          float err = c->recv[(size_t)r * k + i] - qwzValue(r, i);
          bad += err > 2.0f / 127 || err < -2.0f / 127;
        }
      break;
    case OP_QGZ: {
      zppTopology_t topo;
      REQUIRE(zppCommTopology(comm, &topo) == zppSuccess);
      const float sum = (float)(n * (n + 1) / 2), tol = topo.uniform ? sum * 1e-3f : 0.0f;
      for (size_t i = 0; i < k; i++) bad += c->recv[i] - sum > tol || sum - c->recv[i] > tol;
      break;
    }
  }
  return bad;
}

/* ---- a member's life ----------------------------------------------------------------------- */

static void announce(int slot, zppComm_t comm, int phase) {
  int me = -1;
  REQUIRE(zppCommUserRank(comm, &me) == zppSuccess);
  atomic_store(&shared->slot[slot].iters, 0);
  atomic_store(&shared->slot[slot].rank, me);
  atomic_store(&shared->slot[slot].phase, phase);
}

/* Trial t's call on comm, over and over, checked, until one fails (the supervisor kills someone
 * meanwhile): returns that time, or -1 when none failed by the deadline. */
static double callUntilFailure(int slot, zppComm_t comm, int phase, int t, int* fails) {
  call_t c;
  callSetup(&c, comm, opOf(t), sizeOf(t));
  announce(slot, comm, phase);
  double deadline = zppClockNow() + STEP_DEADLINE, failed = -1;
  while (zppClockNow() < deadline) {
    if (callRun(&c, comm) != zppSuccess) {
      failed = zppClockNow();
      break;
    }
    long bad = callCheck(&c, comm);
    if (bad) {
      fprintf(stderr, "slot %d, trial %d: %s: %ld wrong elements\n", slot, t, opNames[c.op], bad);
      (*fails)++;
    }
    atomic_fetch_add(&shared->slot[slot].iters, 1);
  }
  if (failed < 0) {
    fprintf(stderr, "slot %d, trial %d: no call failed in %d s\n", slot, t, STEP_DEADLINE);
    (*fails)++;
  }
  callFree(&c);
  return failed;
}

/* Every op at every size, once, checked. */
static int callEach(zppComm_t comm, int slot) {
  int fails = 0;
  for (int o = 0; o < opt.nOps; o++)
    for (int s = 0; s < opt.nSizes; s++) {
      call_t c;
      callSetup(&c, comm, (op_t)opt.ops[o], opt.sizes[s]);
      zppResult_t res = callRun(&c, comm);
      long bad = res == zppSuccess ? callCheck(&c, comm) : -1;
      if (bad) {
        fprintf(stderr, "slot %d: %s of %zu: %s\n", slot, opNames[c.op], opt.sizes[s],
                bad < 0 ? zppGetLastError(comm) : "wrong elements");
        fails++;
      }
      callFree(&c);
    }
  return fails;
}

static int shapeIs(zppComm_t comm, int rank, int size) {
  int n = -1, me = -1;
  if (zppCommCount(comm, &n) != zppSuccess || zppCommUserRank(comm, &me) != zppSuccess) return 1;
  if (n == size && me == rank) return 0;
  fprintf(stderr, "rank %d of %d, expected %d of %d\n", me, n, rank, size);
  return 1;
}

/* The survivors of failure f of trial t, on comm (which failed): revoke, shrink, check. Returns
 * the shrunk communicator, or NULL. */
static zppComm_t survive(zppComm_t comm, int t, int f, double failedAt, int* fails) {
  int me = -1, n = 0;
  REQUIRE(zppCommUserRank(comm, &me) == zppSuccess && zppCommCount(comm, &n) == zppSuccess);
  shared->failedAt[t][f][me] = failedAt;
  double t0 = zppClockNow();
  if (zppCommRevoke(comm) != zppSuccess) (*fails)++;
  shared->revokeSec[t][f][me] = zppClockNow() - t0;
  const int* lost = shared->lost[t][f];
  int nLost = shared->nLost[t][f], below = 0;
  for (int i = 0; i < nLost; i++) below += lost[i] < me;
  zppComm_t shrunk = NULL;
  shared->shrinkFrom[t][f][me] = zppClockNow();
  zppResult_t res = zppCommShrink(comm, lost, nLost, &shrunk, NULL, ZPP_SHRINK_DEFAULT);
  shared->shrinkTo[t][f][me] = zppClockNow();
  if (res != zppSuccess) {
    fprintf(stderr, "rank %d, trial %d: shrink: %s\n", me, t, zppGetLastError(NULL));
    (*fails)++;
    return NULL;
  }
  *fails += shapeIs(shrunk, me - below, n - nLost) + zppExerciseComm(shrunk, t);
  return shrunk;
}

/* State for the newcomers, from rank 0, checked. */
static int handState(zppComm_t comm, int t) {
  enum { N = 1024 };
  float w[N];
  int me = 0;
  REQUIRE(zppCommUserRank(comm, &me) == zppSuccess);
  for (int i = 0; i < N; i++) w[i] = me == 0 ? (float)(t * N + i) : -1.0f;
  if (zppBroadcast(w, w, N, zppFloat32, 0, comm, NULL) != zppSuccess) return 1;
  for (int i = 0; i < N; i++)
    if (w[i] != (float)(t * N + i)) return 1;
  return 0;
}

static void grown(int t, int me, double from, zppResult_t res, int* fails) {
  shared->growFrom[t][me] = from;
  shared->growTo[t][me] = zppClockNow();
  if (res != zppSuccess) {
    fprintf(stderr, "rank %d, trial %d: grow: %s\n", me, t, zppGetLastError(NULL));
    (*fails)++;
  }
}

/* A member from trial t on, on comm (phase: its number); returns its exit code. */
static int memberFrom(int slot, zppComm_t comm, int t, int phase) {
  int fails = 0;
  for (; t < opt.trials && comm != NULL; t++) {
    zppComm_t old[3] = {comm, NULL, NULL};
    zppComm_t cur = comm;
    for (int f = 0; f < failuresPerTrial() && cur != NULL; f++) {
      double failedAt = callUntilFailure(slot, cur, phase, t, &fails);
      if (failedAt < 0) break;
      cur = old[f + 1] = survive(cur, t, f, failedAt, &fails);
      phase++;
    }
    comm = NULL;
    if (cur != NULL) {
      int me = -1;
      REQUIRE(zppCommUserRank(cur, &me) == zppSuccess);
      if (me == 0) {
        REQUIRE(zppCommGetGrowId(cur, &shared->growId[t]) == zppSuccess);
        shared->growPhase[t] = phase + 1;
        atomic_store(&shared->growReady[t], 1);
      }
      while (!atomic_load(&shared->growReady[t])) zppTestSleep(0.001);
      double from = zppClockNow();
      zppResult_t res = zppCommGrow(cur, opt.nranks, &shared->growId[t], -1, &comm, NULL);
      grown(t, me, from, res, &fails);
      phase++;
    }
    for (int i = 0; i < 3; i++) zppCommDestroy(old[i]);
    if (comm != NULL) {
      int me = -1;
      REQUIRE(zppCommUserRank(comm, &me) == zppSuccess);
      fails += handState(comm, t) + zppExerciseComm(comm, t);
    }
  }
  if (comm != NULL) {
    fails += callEach(comm, slot);
    zppCommDestroy(comm);
  } else if (t < opt.trials || opt.trials == 0) {
    fails++;
  }
  shared->slot[slot].checks = fails;
  return fails ? 1 : 0;
}

static int firstMember(void* arg) {
  int slot = (int)(intptr_t)arg;
  zppUniqueId* id = &shared->growId[MAXT - 1]; /* the first communicator's id, from slot 0 */
  if (slot == 0) {
    REQUIRE(zppGetUniqueId(id) == zppSuccess);
    atomic_store(&shared->growReady[MAXT - 1], 1);
  }
  while (!atomic_load(&shared->growReady[MAXT - 1])) zppTestSleep(0.001);
  zppConfig_t cfg = config();
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRankConfig(&comm, opt.nranks, *id, slot, &cfg) == zppSuccess);
  int fails = zppExerciseComm(comm, 0);
  if (fails) return 1;
  return memberFrom(slot, comm, 0, 0);
}

/* A replacement: joins the grow of the trial, at the rank, that the supervisor gave it. */
static int newMember(void* arg) {
  int slot = (int)(intptr_t)arg, fails = 0;
  int t = shared->slot[slot].joinTrial, rank = shared->slot[slot].joinRank;
  zppConfig_t cfg = config();
  zppComm_t comm = NULL;
  double from = zppClockNow();
  zppResult_t res = zppCommGrow(NULL, opt.nranks, &shared->growId[t], rank, &comm, &cfg);
  grown(t, rank, from, res, &fails);
  if (comm == NULL) return 1;
  fails += shapeIs(comm, rank, opt.nranks) + handState(comm, t) + zppExerciseComm(comm, t);
  if (fails) return 1;
  return memberFrom(slot, comm, t + 1, shared->growPhase[t]);
}

/* ---- the supervisor ------------------------------------------------------------------------ */

static struct {
  int alive[MAXP], node[MAXP];
  int hangs, lostSurvivors;
} sv;

/* The exit status of pid (128 + signal when killed) once it ends before deadline; -1 if not. */
static int reap(int pid, double deadline) {
  do {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    zppTestSleep(0.001);
  } while (zppClockNow() < deadline);
  return -1;
}

/* Until cond(slot) holds for every live slot: 1, or 0 when a slot ended or the deadline passed
 * first (counted, and said). */
static int awaitAll(int (*cond)(int slot, int arg), int arg, int t, const char* what) {
  double deadline = zppClockNow() + STEP_DEADLINE;
  for (int p = 0; p < opt.nranks; p++) {
    while (sv.alive[p] && !cond(p, arg)) {
      int st = reap(atomic_load(&shared->slot[p].pid), zppClockNow() + 0.001);
      if (st >= 0) {
        fprintf(stderr, "trial %d: slot %d ended (status %d) before %s\n", t, p, st, what);
        sv.alive[p] = 0;
        sv.lostSurvivors++;
        return 0;
      }
      if (zppClockNow() > deadline) {
        fprintf(stderr, "trial %d: slot %d: no %s after %d s\n", t, p, what, STEP_DEADLINE);
        sv.hangs++;
        return 0;
      }
    }
  }
  return 1;
}

static int isCalling(int p, int phase) {
  return atomic_load(&shared->slot[p].phase) == phase && atomic_load(&shared->slot[p].iters) >= 2;
}
/* Every member's grow has returned (its times are in). */
static int allGrown(int p, int t) {
  (void)p;
  for (int r = 0; r < opt.nranks; r++)
    if (shared->growTo[t][r] == 0) return 0;
  return 1;
}

/* The slots lost at failure f of trial t: the victim node's, or (the second) the highest rank. */
static int pickVictims(int t, int f, const int* rankOf, int* out) {
  int n = 0;
  for (int p = 0; p < opt.nranks; p++) {
    if (!sv.alive[p]) continue;
    if (f == 0 && sv.node[p] == victimNode(t)) out[n++] = p;
    if (f == 1 && (n == 0 || rankOf[p] > rankOf[out[0]])) out[(n = 1) - 1] = p;
  }
  return n;
}

static void killSlots(const int* slots, int n, int sig) {
  for (int i = 0; i < n; i++) kill(atomic_load(&shared->slot[slots[i]].pid), sig);
}

typedef struct {
  double v[MAXT * 2];
  int n;
} series_t;
static series_t detectS, revokeS, shrinkS, growS;

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}
static double median(series_t* s) {
  qsort(s->v, (size_t)s->n, sizeof(double), cmpDouble);
  return s->n ? s->v[s->n / 2] : 0;
}
static double largest(const series_t* s) {
  double m = 0;
  for (int i = 0; i < s->n; i++) m = s->v[i] > m ? s->v[i] : m;
  return m;
}

/* The earliest start to the latest end, over the ranks that took part. */
static double span(const double* from, const double* to, const int* part, int n) {
  double lo = 1e300, hi = 0;
  for (int r = 0; r < n; r++)
    if (part[r]) lo = from[r] < lo ? from[r] : lo, hi = to[r] > hi ? to[r] : hi;
  return hi > lo ? hi - lo : 0;
}

/* Trial t's times, added to the series and printed. */
static void report(int t) {
  char line[512];
  int len = snprintf(line, sizeof(line), "trial %d: %s of %zu, node %d", t, opNames[opOf(t)], sizeOf(t),
                     victimNode(t));
  int n = opt.nranks, part[MAXP];
  for (int f = 0; f < failuresPerTrial(); f++) {
    double detect = 0, revoke = 0;
    for (int r = 0; r < n; r++) {
      part[r] = shared->failedAt[t][f][r] > 0;
      for (int i = 0; i < shared->nLost[t][f]; i++) part[r] &= shared->lost[t][f][i] != r;
      if (!part[r]) continue;
      double d = shared->failedAt[t][f][r] - shared->killAt[t][f];
      detect = d > detect ? d : detect;
      revoke = shared->revokeSec[t][f][r] > revoke ? shared->revokeSec[t][f][r] : revoke;
    }
    double shrink = span(shared->shrinkFrom[t][f], shared->shrinkTo[t][f], part, n);
    detectS.v[detectS.n++] = detect;
    revokeS.v[revokeS.n++] = revoke;
    shrinkS.v[shrinkS.n++] = shrink;
    len += snprintf(line + len, sizeof(line) - (size_t)len,
                    "%s: detect %.3f s, revoke %.4f s, shrink %.3f s", f ? "; a rank more" : "", detect,
                    revoke, shrink);
    n -= shared->nLost[t][f];
  }
  for (int r = 0; r < opt.nranks; r++) part[r] = 1;
  double grow = span(shared->growFrom[t], shared->growTo[t], part, opt.nranks);
  growS.v[growS.n++] = grow;
  printf("%s; grow %.3f s\n", line, grow);
  fflush(stdout);
}

/* Runs the trials; 1 when every one went right. */
static int supervise(void) {
  for (int p = 0; p < opt.nranks; p++) {
    sv.node[p] = opt.nodeOf[p];
    sv.alive[p] = 1;
    atomic_store(&shared->slot[p].phase, -1);
    atomic_store(&shared->slot[p].rank, p);
    int pid = zppLaunchSpawn(sv.node[p], firstMember, (void*)(intptr_t)p);
    REQUIRE(pid > 0);
    atomic_store(&shared->slot[p].pid, pid);
  }
  const int sig = opt.mode == MODE_STOP ? SIGSTOP : SIGKILL;
  int phase = 0, ok = 1, wrong = 0;
  for (int t = 0; t < opt.trials && ok; t++) {
    int victims[MAXP], nv = 0;
    for (int f = 0; f < failuresPerTrial() && ok; f++, phase++) {
      ok = awaitAll(isCalling, phase, t, "calls on its communicator");
      if (!ok) break;
      int rankOf[MAXP];
      for (int p = 0; p < opt.nranks; p++) rankOf[p] = atomic_load(&shared->slot[p].rank);
      int k = pickVictims(t, f, rankOf, victims + nv);
      shared->nLost[t][f] = k;
      for (int i = 0; i < k; i++) shared->lost[t][f][i] = rankOf[victims[nv + i]];
      /* While they call: at a random moment within about one call. */
      zppTestSleep((double)(rand() % 1000) * (sizeOf(t) > 65536 ? 3e-5 : 2e-6));
      shared->killAt[t][f] = zppClockNow();
      killSlots(victims + nv, k, sig);
      for (int i = 0; i < k; i++) sv.alive[victims[nv + i]] = 0;
      nv += k;
    }
    if (!ok) break;
    double deadline = zppClockNow() + STEP_DEADLINE;
    while (!atomic_load(&shared->growReady[t]) && zppClockNow() < deadline) zppTestSleep(0.001);
    if (!atomic_load(&shared->growReady[t])) {
      fprintf(stderr, "trial %d: no grow id after %d s: the survivors did not shrink\n", t,
              STEP_DEADLINE);
      sv.hangs++;
      ok = 0;
      break;
    }
    /* The lost processes go for good (the hung ones too); replacements join on their nodes, at
     * the ranks after the survivors'. */
    killSlots(victims, nv, SIGKILL);
    for (int i = 0; i < nv; i++) {
      int p = victims[i];
      if (reap(atomic_load(&shared->slot[p].pid), zppClockNow() + 10) < 0) sv.hangs++;
      shared->slot[p].checks = 0;
      shared->slot[p].joinTrial = t;
      shared->slot[p].joinRank = opt.nranks - nv + i;
      atomic_store(&shared->slot[p].rank, opt.nranks - nv + i);
      atomic_store(&shared->slot[p].phase, -1);
      int pid = zppLaunchSpawn(sv.node[p], newMember, (void*)(intptr_t)p);
      REQUIRE(pid > 0);
      atomic_store(&shared->slot[p].pid, pid);
      sv.alive[p] = 1;
    }
    phase++; /* the grown communicator */
    ok = awaitAll(allGrown, t, t, "grow");
    if (ok) report(t);
  }
  /* The end: every live process finishes its checks and exits. */
  for (int p = 0; p < opt.nranks; p++) {
    if (!sv.alive[p]) continue;
    int pid = atomic_load(&shared->slot[p].pid);
    if (!ok) kill(pid, SIGKILL);
    int st = reap(pid, zppClockNow() + STEP_DEADLINE);
    if (st < 0) {
      fprintf(stderr, "slot %d did not finish within %d s\n", p, STEP_DEADLINE);
      kill(pid, SIGKILL);
      sv.hangs++;
      continue;
    }
    wrong += shared->slot[p].checks;
    if (st != 0 && ok) {
      fprintf(stderr, "slot %d ended with %d (%d failed checks)\n", p, st, shared->slot[p].checks);
      sv.lostSurvivors++;
    }
  }
  printf("%d trials: %d hangs, %d survivors lost, %d wrong results\n", opt.trials, sv.hangs,
         sv.lostSurvivors, wrong);
  return ok && sv.hangs == 0 && sv.lostSurvivors == 0 && wrong == 0;
}

static const char* const modeNames[] = {"kill", "stop", "twice"};

static int usage(const char* why) {
  fprintf(stderr,
          "test_comm_lost_node: %s\n"
          "usage: test_comm_lost_node LAYOUT kill|stop|twice TRIALS [OPS] [SIZES] [timeout=SEC]\n"
          "  OPS: comma list of allreduce,allgather,reducescatter,qwz,hpz,qgz (default all)\n"
          "  SIZES: small, large or both (default)\n",
          why);
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 4) return usage("missing arguments");
  const char* layout = argv[1];
  opt.nranks = zppLaunchParseLayout(layout, opt.nodeOf, MAXP);
  if (opt.nranks < 2) return usage("bad layout (2 to 32 ranks)");
  for (int r = 0; r < opt.nranks; r++)
    opt.nNodes = opt.nodeOf[r] >= opt.nNodes ? opt.nodeOf[r] + 1 : opt.nNodes;
  int m = 0;
  while (m < 3 && strcmp(argv[2], modeNames[m]) != 0) m++;
  if (m == 3) return usage("mode: kill, stop or twice");
  opt.mode = (mode_t_)m;
  opt.trials = atoi(argv[3]);
  if (opt.trials < 0 || opt.trials > MAXT - 1) return usage("TRIALS: 0 to 1023");
  opt.timeoutSec = opt.mode == MODE_STOP ? 2 : 20;
  opt.nOps = NOPS;
  for (int o = 0; o < NOPS; o++) opt.ops[o] = o;
  opt.nSizes = 2;
  opt.sizes[0] = 4096;
  opt.sizes[1] = 1u << 20;
  for (int a = 4; a < argc; a++) {
    if (strncmp(argv[a], "timeout=", 8) == 0) {
      opt.timeoutSec = atoi(argv[a] + 8);
      if (opt.timeoutSec < 1) return usage("timeout: 1 s or more");
    } else if (strcmp(argv[a], "small") == 0 || strcmp(argv[a], "large") == 0) {
      opt.nSizes = 1;
      opt.sizes[0] = argv[a][0] == 's' ? 4096 : 1u << 20;
    } else if (strcmp(argv[a], "both") != 0) {
      char list[128];
      snprintf(list, sizeof(list), "%s", argv[a]);
      opt.nOps = 0;
      for (char* tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int o = 0;
        while (o < NOPS && strcmp(tok, opNames[o]) != 0) o++;
        if (o == NOPS || opt.nOps == NOPS) return usage("unknown op");
        opt.ops[opt.nOps++] = o;
      }
    }
  }
  /* A node must be left, and at the second failure a rank beside the one that stays. */
  int largestNode = 0;
  for (int k = 0; k < opt.nNodes; k++) {
    int c = 0;
    for (int r = 0; r < opt.nranks; r++) c += opt.nodeOf[r] == k;
    largestNode = c > largestNode ? c : largestNode;
  }
  if (opt.nNodes < 2 || opt.nranks - largestNode < (opt.mode == MODE_TWICE ? 2 : 1))
    return usage("the layout leaves no survivors to go on with");
  shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  srand(44);
  printf("%s, %d ranks on %d nodes, %s, %d trials, timeout %d s\n", layout, opt.nranks, opt.nNodes,
         modeNames[opt.mode], opt.trials, opt.timeoutSec);
  double t0 = zppClockNow();
  int pass = supervise();
  printf(
      "median / largest: detect %.3f / %.3f s, revoke %.4f / %.4f s, shrink %.3f / %.3f s, grow %.3f / "
      "%.3f s; %.1f s in all\n",
      median(&detectS), largest(&detectS), median(&revokeS), largest(&revokeS), median(&shrinkS),
      largest(&shrinkS), median(&growS), largest(&growS), zppClockNow() - t0);
  printf(
      "{\"lost_node\": {\"layout\": \"%s\", \"ranks\": %d, \"mode\": \"%s\", \"trials\": %d, "
      "\"pass\": %s, \"detect_s\": [%.4f, %.4f], \"revoke_s\": [%.5f, %.5f], \"shrink_s\": [%.4f, "
      "%.4f], "
      "\"grow_s\": [%.4f, %.4f]}}\n",
      layout, opt.nranks, modeNames[opt.mode], opt.trials, pass ? "true" : "false", median(&detectS),
      largest(&detectS), median(&revokeS), largest(&revokeS), median(&shrinkS), largest(&shrinkS),
      median(&growS), largest(&growS));
  return pass ? 0 : 1;
}
