/*
 * A dead or stopped peer, many times over (issue 19): a failure that
 * happens in one trial of five needs enough trials to show.
 *
 *   test_coll_deadpeer kill BYTES LAYOUT TRIALS
 *       4 ranks loop an all-reduce of BYTES; rank 3 is SIGKILLed at a random
 *       moment. Every survivor must return an error (never crash, never
 *       succeed with wrong sums) within ZPP_TIMEOUT + a margin of the kill.
 *   test_coll_deadpeer stop BYTES LAYOUT TRIALS
 *       The same, but rank 3 is SIGSTOPped; the survivors must time out with
 *       an error, destroy and exit; then rank 3 is resumed and must get an
 *       error too (UCX 1.13 aborted it in 3 of 4 runs at 4 MiB: its cma
 *       reads of the exited peers' memory failed on an endpoint without
 *       error handling).
 *
 * A 5th argument runs reduce, gather, scatter or alltoallv instead of the
 * all-reduce (roots rotate call by call, so the victim is sometimes root).
 *
 * LAYOUT is "1" (one node: shared memory) or a launcher layout ("2x2": two
 * emulated nodes, tcp between them). The timeout comes from ZPP_TIMEOUT
 * (default here 2 s).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll_testlib.h"
#include "testutil.h"
#include "perf/common/launch.h"

enum { NRANKS = 4, VICTIM = 3 };

typedef struct {
  volatile int result[NRANKS];
  volatile double errorAt[NRANKS]; /* zppClockNow() when the call returned its error */
  volatile int calls[NRANKS];
  volatile double faultAt; /* when the victim was killed or stopped */
  volatile double resumedAt;
  volatile int survivorsGone; /* survivors that destroyed their communicator */
  volatile int victimPid;
  volatile int victimLooping;
  char reason[NRANKS][200];
} shared_t;
static shared_t* sh;

typedef enum { C_ALLREDUCE, C_REDUCE, C_GATHER, C_SCATTER, C_ALLTOALLV } collKind_t;
static const char* const collNames[] = {"allreduce", "reduce", "gather", "scatter", "alltoallv"};

typedef struct {
  collKind_t coll;
  int stop; /* 0: SIGKILL, 1: SIGSTOP then SIGCONT */
  size_t bytes;
  double delaySec; /* after the victim's first call */
  int timeoutSec;
} trial_t;

/* A child of the victim that stops it, waits until every survivor has
 * destroyed its communicator (and the UCX worker whose memory the victim's
 * transfers point into), then resumes it. A separate process because a
 * stopped process cannot resume itself. */
static void stopper(const trial_t* t) {
  pid_t victim = getppid();
  while (!sh->victimLooping) zppTestSleep(0.0005);
  zppTestSleep(t->delaySec);
  sh->faultAt = zppClockNow();
  kill(victim, SIGSTOP);
  double giveUp = zppClockNow() + 3.0 * t->timeoutSec + 20.0;
  while (sh->survivorsGone < NRANKS - 1 && zppClockNow() < giveUp) zppTestSleep(0.01);
  zppTestSleep(0.1); /* let the survivors' processes exit */
  sh->resumedAt = zppClockNow();
  kill(victim, SIGCONT);
  _exit(0);
}

static void* killer(void* arg) {
  const trial_t* t = arg;
  zppTestSleep(t->delaySec);
  sh->faultAt = zppClockNow();
  raise(SIGKILL);
  return NULL;
}

/* Elements rank `from` sends rank `to` in the all-to-all-v: uneven, about
 * `count` in all. */
static size_t vPart(size_t count, int from, int to, int nranks) {
  return count / (size_t)(2 * nranks) + (size_t)((from * nranks + to) % 3);
}

/* One call of the trial's collective (roots rotate with it), its result
 * checked: 100 for success with wrong data. buf holds count * nranks + 64. */
static zppResult_t oneCall(const trial_t* t, zppComm_t comm, int rank, int nranks, int it, int32_t* buf,
                           int32_t* out, size_t count) {
  const int root = it % nranks;
  const size_t all = count * (size_t)nranks;
  zppResult_t res;
  switch (t->coll) {
    case C_REDUCE:
      for (size_t i = 0; i < count; i++) buf[i] = rank + 1;
      res = zppReduce(buf, out, count, zppInt32, zppSum, root, comm, NULL);
      if (res != zppSuccess || rank != root) return res;
      for (size_t i = 0; i < count; i++)
        if (out[i] != nranks * (nranks + 1) / 2) return (zppResult_t)100;
      return res;
    case C_GATHER:
      for (size_t i = 0; i < count; i++) buf[i] = rank + 1;
      res = zppGather(buf, out, count, zppInt32, root, comm, NULL);
      if (res != zppSuccess || rank != root) return res;
      for (size_t i = 0; i < all; i++)
        if (out[i] != (int32_t)(i / count) + 1) return (zppResult_t)100;
      return res;
    case C_SCATTER:
      for (size_t i = 0; i < all; i++) buf[i] = (int32_t)(i / count) + 1;
      res = zppScatter(buf, out, count, zppInt32, root, comm, NULL);
      for (size_t i = 0; res == zppSuccess && i < count; i++)
        if (out[i] != rank + 1) return (zppResult_t)100;
      return res;
    case C_ALLTOALLV: {
      size_t sc[NRANKS], sd[NRANKS], rc[NRANKS], rd[NRANKS], so = 0, ro = 0;
      for (int p = 0; p < nranks; p++) {
        sc[p] = vPart(count, rank, p, nranks);
        rc[p] = vPart(count, p, rank, nranks);
        sd[p] = so;
        rd[p] = ro;
        for (size_t i = 0; i < sc[p]; i++) buf[so + i] = rank * 16 + p;
        so += sc[p];
        ro += rc[p];
      }
      res = zppAllToAllv(buf, sc, sd, out, rc, rd, zppInt32, comm, NULL);
      for (int p = 0; res == zppSuccess && p < nranks; p++)
        for (size_t i = 0; i < rc[p]; i++)
          if (out[rd[p] + i] != p * 16 + rank) return (zppResult_t)100;
      return res;
    }
    default:
      for (size_t i = 0; i < count; i++) buf[i] = rank + 1;
      res = zppAllReduce(buf, buf, count, zppInt32, zppSum, comm, NULL);
      for (size_t i = 0; res == zppSuccess && i < count; i++)
        if (buf[i] != nranks * (nranks + 1) / 2) return (zppResult_t)100; /* success, wrong data */
      return res;
  }
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const trial_t* t = arg;
  pid_t helper = -1;
  if (rank == VICTIM) {
    sh->victimPid = (int)getpid();
    if (t->stop) {
      helper = fork();
      if (helper == 0) stopper(t);
    }
  }
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = t->timeoutSec;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  /* Rooted calls move BYTES per rank, so that the root's link carries the
   * same as an all-reduce's. */
  size_t count = t->bytes / sizeof(int32_t);
  if (t->coll != C_ALLREDUCE && t->coll != C_REDUCE) count = count / (size_t)nranks + 1;
  int32_t* buf = malloc((count * (size_t)nranks + 64) * sizeof(int32_t));
  int32_t* out = malloc((count * (size_t)nranks + 64) * sizeof(int32_t));
  REQUIRE(buf && out);
  zppResult_t res = zppSuccess;
  /* Loop until the fault: the kill lands at a random point of a call. */
  for (int it = 0; it < 1000000; it++) {
    if (rank == VICTIM && it == 1) {
      if (!t->stop) {
        /* Die from a timer: the main thread is somewhere inside a call. */
        sh->victimLooping = 1;
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, killer, (void*)t) == 0);
      } else {
        sh->victimLooping = 1;
      }
    }
    res = oneCall(t, comm, rank, nranks, it, buf, out, count);
    sh->calls[rank] = it + 1;
    if (res != zppSuccess) break;
  }
  sh->errorAt[rank] = zppClockNow();
  sh->result[rank] = (int)res;
  snprintf(sh->reason[rank], sizeof(sh->reason[rank]), "%s", zppGetLastError(comm));
  zppCommDestroy(comm);
  free(buf);
  free(out);
  if (rank != VICTIM) __sync_fetch_and_add(&sh->survivorsGone, 1);
  if (helper > 0) waitpid(helper, NULL, 0);
  return 0;
}

static int runTrial(const trial_t* t, const char* layout, int trial, double* worst) {
  memset((void*)sh, 0, sizeof(*sh));
  for (int r = 0; r < NRANKS; r++) sh->result[r] = -1;
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = NRANKS;
  o.layout = strcmp(layout, "1") == 0 ? NULL : layout;
  o.timeoutSec = 4.0 * t->timeoutSec + 30.0;
  int status[NRANKS];
  o.statusOut = status;
  o.quiet = 1;
  double start = zppClockNow();
  zppLaunch(&o, body, (void*)t);
  if (getenv("DEADPEER_VERBOSE"))
    printf("  trial %d: %.2f s; fault at +%.2f, resumed at +%.2f, victim's error at +%.2f\n", trial,
           zppClockNow() - start, sh->faultAt - start, sh->resumedAt - start,
           sh->errorAt[VICTIM] - start);
  int bad = 0, named = 0;
  for (int r = 0; r < NRANKS; r++) {
    /* A survivor may name the rank it waited for, itself waiting for the
     * victim, or relay another's error: one of them must name the victim. */
    if (r != VICTIM && strstr(sh->reason[r], "rank 3 ") != NULL) named++;
    const char* what = r == VICTIM ? (t->stop ? "resumed rank" : "victim") : "survivor";
    if (r == VICTIM && !t->stop) {
      if (status[r] != 128 + SIGKILL) {
        printf("  trial %d: victim ended with status %d, not killed\n", trial, status[r]);
        bad = 1;
      }
      continue;
    }
    double since = r == VICTIM ? sh->errorAt[r] - sh->resumedAt : sh->errorAt[r] - sh->faultAt;
    int ok = status[r] == 0 && (sh->result[r] == zppRemoteError || sh->result[r] == zppSystemError);
    /* Survivors: within the timeout and a margin for a loaded 2-core
     * machine. The resumed rank's own deadline passed while it was stopped. */
    double bound = r == VICTIM ? 5.0 : t->timeoutSec + 4.0;
    if (ok && since > bound) ok = 0;
    if (!ok) {
      printf("  trial %d: %s %d: status %d result %d after %.2f s (bound %.1f) calls %d: %s\n", trial,
             what, r, status[r], sh->result[r], since, bound, sh->calls[r], sh->reason[r]);
      bad = 1;
    } else if (r != VICTIM && since > *worst) {
      *worst = since;
    }
  }
  /* Only for a kill: a stopped rank is alive, and each survivor names the
   * rank it waited for; when a survivor that waited on another survivor
   * times out first, its error reaches the rest and nobody names the
   * stopped rank (3 of 20 stop trials). Known gap, docs/transports.md. */
  if (named == 0 && !t->stop) {
    printf("  trial %d: no survivor named rank %d: %s\n", trial, VICTIM, sh->reason[0]);
    bad = 1;
  }
  return bad;
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr,
            "usage: %s kill|stop BYTES LAYOUT TRIALS [allreduce|reduce|gather|scatter|alltoallv]\n",
            argv[0]);
    return 2;
  }
  trial_t t;
  t.coll = C_ALLREDUCE;
  for (int k = 0; argc == 6 && k <= C_ALLTOALLV; k++)
    if (strcmp(argv[5], collNames[k]) == 0) t.coll = (collKind_t)k;
  if (argc == 6 && strcmp(argv[5], collNames[t.coll]) != 0) {
    fprintf(stderr, "%s: unknown collective '%s'\n", argv[0], argv[5]);
    return 2;
  }
  sh = mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(sh != MAP_FAILED);
  t.stop = strcmp(argv[1], "stop") == 0;
  t.bytes = (size_t)strtoull(argv[2], NULL, 10);
  const char* layout = argv[3];
  int trials = atoi(argv[4]);
  const char* env = getenv("ZPP_TIMEOUT");
  t.timeoutSec = env ? atoi(env) : 2;
  if (t.timeoutSec < 1) t.timeoutSec = 1;
  /* One all-reduce of 4 MiB takes some 10-40 ms here, one of 4 KiB some
   * 50 us: spread the fault over a few calls either way. */
  double span = t.bytes >= ((size_t)1 << 20) ? 0.08 : 0.005;
  unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
  srand(seed);
  int failed = 0;
  double worst = 0, t0 = zppClockNow();
  for (int i = 0; i < trials; i++) {
    t.delaySec = span * (double)rand() / RAND_MAX;
    failed += runTrial(&t, layout, i, &worst);
  }
  printf(
      "%s %s %zu bytes layout %s: %d of %d trials failed; survivors' slowest error %.2f s after "
      "the fault (timeout %d s); %.1f s in all (seed %u)\n",
      argv[1], collNames[t.coll], t.bytes, layout, failed, trials, worst, t.timeoutSec,
      zppClockNow() - t0, seed);
  CHECK_MSG(failed == 0, "%d of %d trials failed", failed, trials);
  return zppTestExit(argv[1]);
}
