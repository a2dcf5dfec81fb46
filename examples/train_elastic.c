/*
 * zpp-train --elastic: training that survives a lost node (docs/trainer.md, "Elastic training").
 *
 * The launcher (this process, with --layout NxL, N >= 2) forks the ranks and watches them. A rank that
 * dies is reported to the others through a mailbox in shared memory, as a job's agent or store
 * would; once the survivors have shrunk their communicator, the launcher starts a replacement
 * process for each lost rank, on its node, which joins them by zppCommGrow.
 *
 * Every rank keeps, besides its ZeRO-3 shard, a copy of one other rank's shard: the rank with its
 * local index on the previous node (its buddy sends it after every step), so that a node's state
 * lives on in the next node. A step counts as done (committed) when every rank has its copy of it:
 * a last small all-reduce says so. Each rank keeps its last two committed steps, because a failure
 * can end that all-reduce on some ranks and not on others: the survivors then take the lower.
 *
 * Recovery, on every survivor: zppCommRevoke, the lost ranks from the mailbox, zppCommShrink
 * without them, the last step every survivor committed (an all-reduce with zppMin), zppCommGrow
 * with the replacements, and on the grown communicator the whole optimizer state put together by
 * one all-reduce (each part from its owner, or from the copy of an owner that was lost; zeros
 * elsewhere, so the sums are exact). Every rank then takes its new shard, and training goes on
 * from that step: the steps after it are done again (with the same batches, from the seed).
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perf/common/launch.h"
#include "train.h"
#include "zero3.h"

#define TR_EL_MAX ZPP_LAUNCH_MAX_RANKS
#define TR_EL_WAIT_SEC 60.0

/* Shared by the launcher and every rank process (mmap before the forks). */
typedef struct {
  zppUniqueId initId;
  _Atomic int initReady;
  _Atomic int slotRank[TR_EL_MAX]; /* each slot's rank on its current communicator */
  /* One failure at a time: the launcher writes the ranks lost (on the communicator that failed)
   * and bumps lostEpoch; the survivors' rank 0 writes the grow id and bumps growEpoch. */
  int lost[TR_EL_MAX], nLost;
  _Atomic int lostEpoch;
  zppUniqueId growId;
  _Atomic int growEpoch;
  int joinRank[TR_EL_MAX]; /* a replacement's rank, by slot */
} trMailbox_t;

static trMailbox_t* mailbox;

static double trElNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void trElSleep(double sec) {
  struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
  nanosleep(&ts, NULL);
}

/* ---- the rank's side ---------------------------------------------------------------------- */

/* The two last committed steps, this rank's pack and the copy it holds at each. */
typedef struct {
  int step[2];     /* -1: none */
  long adam[2];    /* Adam's step count then */
  int rank[2];     /* this rank's rank then */
  int nranks[2];   /* the communicator's size then */
  int heldRank[2]; /* whose pack held[] is */
  float* own[2];
  float* held[2];
  size_t cap; /* floats own[] and held[] have room for */
} trSnapshots_t;

struct trElastic {
  int slot, node, joining;
  int killStep; /* this process kills itself in that step (0: never) */
  trSnapshots_t snap;
  int buddyTo, buddyFrom; /* on the current communicator */
};

static void trElKillSoon(int signo) {
  (void)signo;
  kill(getpid(), SIGKILL);
}

/* SIGKILL for this process at a random moment of the next `within` seconds (the step's calls
 * run then: within is most of the last step's time). */
static void trElArmKill(double within) {
  signal(SIGALRM, trElKillSoon);
  struct itimerval it;
  memset(&it, 0, sizeof it);
  it.it_value.tv_usec = 1 + (suseconds_t)(within * 1e6 * (double)(rand() % 1000) / 1000.0);
  setitimer(ITIMER_REAL, &it, NULL);
}

/* The buddies on env->comm: the ranks with this rank's local index on the next node (to) and on
 * the previous one (from). */
static zppResult_t trElBuddies(trEnv_t* env, trElastic_t* e) {
  int n = env->nranks, mine[2] = {env->topo.node, env->topo.localRank};
  int* all = malloc((size_t)n * 2 * sizeof(int));
  if (all == NULL) return zppSystemError;
  zppResult_t res = zppAllGather(mine, all, 2, zppInt32, env->comm, NULL);
  e->buddyTo = e->buddyFrom = -1;
  int nodes = env->topo.nNodes;
  for (int r = 0; r < n && res == zppSuccess; r++) {
    if (all[2 * r + 1] != mine[1]) continue;
    if (all[2 * r] == (mine[0] + 1) % nodes) e->buddyTo = r;
    if (all[2 * r] == (mine[0] + nodes - 1) % nodes) e->buddyFrom = r;
  }
  free(all);
  if (res == zppSuccess && (e->buddyTo < 0 || e->buddyFrom < 0)) res = zppInvalidUsage;
  return res;
}

/* Packs this rank's state, trades packs with the buddies, and commits the step once every rank
 * has its copy. */
static zppResult_t trElCommit(trEnv_t* env, trSession_t* s, trElastic_t* e, int step) {
  trSnapshots_t* sn = &e->snap;
  z3Trainer_t* t = trSessionTrainer(s);
  size_t len = z3PackLength(&env->shape, env->nranks);
  int k = sn->step[0] <= sn->step[1] ? 0 : 1; /* the older slot */
  if (len > sn->cap) {
    for (int i = 0; i < 2; i++) {
      float* o = realloc(sn->own[i], len * sizeof(float));
      if (o) sn->own[i] = o;
      float* h = realloc(sn->held[i], len * sizeof(float));
      if (h) sn->held[i] = h;
      if (!o || !h) return zppSystemError;
    }
    sn->cap = len;
  }
  sn->step[k] = -1;
  z3StatePack(t, sn->own[k]);
  zppResult_t res = zppGroupStart();
  if (res == zppSuccess) {
    zppSend(sn->own[k], len, zppFloat32, e->buddyTo, env->comm, NULL);
    zppRecv(sn->held[k], len, zppFloat32, e->buddyFrom, env->comm, NULL);
    res = zppGroupEnd();
  }
  int one = 1, all = 0;
  if (res == zppSuccess) res = zppAllReduce(&one, &all, 1, zppInt32, zppSum, env->comm, NULL);
  if (res != zppSuccess) return res;
  sn->step[k] = step;
  sn->adam[k] = z3AdamStep(t);
  sn->rank[k] = env->rank;
  sn->nranks[k] = env->nranks;
  sn->heldRank[k] = e->buddyFrom;
  return zppSuccess;
}

static void trElSetComm(trEnv_t* env, trElastic_t* e, zppComm_t comm) {
  env->comm = comm;
  zppCommUserRank(comm, &env->rank);
  zppCommCount(comm, &env->nranks);
  zppCommTopology(comm, &env->topo);
  atomic_store(&mailbox->slotRank[e->slot], env->rank);
}

/* On the grown communicator (env->comm): every member, survivors (have = 1, with the step to go
 * back to) and replacements (have = 0), puts the state together, takes its shard, and commits it
 * again. */
static zppResult_t trElAdopt(const trArgs_t* a, trEnv_t* env, trSession_t* s, trElastic_t* e, int have,
                             int back, const unsigned char* lostOld, double* stateSec) {
  const mlpShape_t* shape = &env->shape;
  trSnapshots_t* sn = &e->snap;
  int k = have && sn->step[0] == back ? 0 : 1;
  /* What the survivors know, from the new rank 0 (always a survivor). */
  int64_t head[3] = {back, have ? sn->adam[k] : 0, have ? sn->nranks[k] : 0};
  zppResult_t res = zppBroadcast(head, head, 3, zppInt64, 0, env->comm, NULL);
  if (res != zppSuccess) return res;
  back = (int)head[0];
  int oldN = (int)head[2];
  size_t len = z3StateLength(shape);
  float* state = calloc(len, sizeof(float));
  int* covered = calloc((size_t)oldN, sizeof(int));
  if (state == NULL || covered == NULL) {
    free(state);
    free(covered);
    return zppSystemError;
  }
  double t0 = trElNow();
  if (have) {
    z3StateUnpack(shape, sn->rank[k], oldN, sn->own[k], state);
    covered[sn->rank[k]]++;
    if (lostOld[sn->heldRank[k]]) {
      z3StateUnpack(shape, sn->heldRank[k], oldN, sn->held[k], state);
      covered[sn->heldRank[k]]++;
    }
  }
  res = zppAllReduce(state, state, len, zppFloat32, zppSum, env->comm, NULL);
  if (res == zppSuccess)
    res = zppAllReduce(covered, covered, (size_t)oldN, zppInt32, zppSum, env->comm, NULL);
  *stateSec = trElNow() - t0;
  for (int r = 0; r < oldN && res == zppSuccess; r++)
    if (covered[r] != 1) {
      if (env->rank == 0)
        fprintf(stderr,
                "zpp-train: the state of rank %d was lost with the copy its buddy held (a node and "
                "the next one lost together): restart from a checkpoint\n",
                r);
      res = zppInvalidUsage;
    }
  int code = res == zppSuccess ? trSessionRebuild(a, env, s) : TR_EXIT_OK;
  if (code != TR_EXIT_OK) res = zppSystemError;
  if (res == zppSuccess) res = z3StateLoad(trSessionTrainer(s), state, head[1]);
  free(state);
  free(covered);
  if (res == zppSuccess) res = trElBuddies(env, e);
  if (res != zppSuccess) return res;
  sn->step[0] = sn->step[1] = -1;
  trSessionRun(s)->nsteps = back;
  return trElCommit(env, s, e, back);
}

/* A failed step on a survivor: revoke, shrink, agree where to go back to, grow, adopt. */
static zppResult_t trElRecover(const trArgs_t* a, trEnv_t* env, trSession_t* s, trElastic_t* e,
                               int* epoch, int failedStep, double failedAt) {
  zppComm_t old = env->comm, shrunk = NULL, grown = NULL;
  const int n = env->nranks;
  zppCommRevoke(old);
  double until = trElNow() + TR_EL_WAIT_SEC;
  while (atomic_load(&mailbox->lostEpoch) == *epoch && trElNow() < until) trElSleep(0.001);
  if (atomic_load(&mailbox->lostEpoch) == *epoch) {
    fprintf(stderr, "zpp-train: rank %d: a call failed, and the launcher names no lost rank\n",
            env->rank);
    return zppRemoteError;
  }
  (*epoch)++;
  unsigned char lostOld[TR_EL_MAX] = {0};
  for (int i = 0; i < mailbox->nLost; i++) lostOld[mailbox->lost[i]] = 1;
  double t0 = trElNow();
  zppResult_t res =
      zppCommShrink(old, mailbox->lost, mailbox->nLost, &shrunk, NULL, ZPP_SHRINK_DEFAULT);
  double shrinkSec = trElNow() - t0;
  int latest = e->snap.step[0] > e->snap.step[1] ? e->snap.step[0] : e->snap.step[1], back = latest;
  if (res == zppSuccess) res = zppAllReduce(&latest, &back, 1, zppInt32, zppMin, shrunk, NULL);
  int me = -1;
  if (res == zppSuccess) zppCommUserRank(shrunk, &me);
  if (res == zppSuccess && me == 0) {
    res = zppCommGetGrowId(shrunk, &mailbox->growId);
    if (res == zppSuccess) atomic_store(&mailbox->growEpoch, *epoch);
  }
  /* The others wait for that id: then the launcher starts the replacements too. */
  until = trElNow() + TR_EL_WAIT_SEC;
  while (res == zppSuccess && atomic_load(&mailbox->growEpoch) != *epoch && trElNow() < until)
    trElSleep(0.001);
  if (res == zppSuccess && atomic_load(&mailbox->growEpoch) != *epoch) res = zppRemoteError;
  double t1 = trElNow();
  if (res == zppSuccess) res = zppCommGrow(shrunk, n, &mailbox->growId, -1, &grown, NULL);
  double growSec = trElNow() - t1, stateSec = 0;
  if (res == zppSuccess) {
    trElSetComm(env, e, grown);
    res = trElAdopt(a, env, s, e, 1, back, lostOld, &stateSec);
  }
  /* The old communicator stays for the caller's abort when nothing replaced it. */
  if (res == zppSuccess)
    zppCommDestroy(shrunk);
  else
    zppCommAbort(shrunk);
  if (env->comm != old) zppCommDestroy(old);
  if (res != zppSuccess) {
    trLibError(env, "recovering from the lost ranks", res);
    return res;
  }
  trRun_t* run = trSessionRun(s);
  run->recoveries++;
  run->stepsRedone += failedStep - back;
  run->recoverySec += trElNow() - failedAt;
  if (env->rank == 0 && !a->quiet) {
    printf(
        "zpp-train: %d rank%s lost in step %d; shrink to %d ranks %.3f s; back to step %d (steps "
        "%d-%d done again); grown to %d ranks %.3f s; state %.1f MB in %.3f s; recovery %.2f s\n",
        mailbox->nLost, mailbox->nLost > 1 ? "s" : "", failedStep, n - mailbox->nLost, shrinkSec, back,
        back + 1, failedStep, n, growSec, (double)z3StateLength(&env->shape) * 4 / 1e6, stateSec,
        trElNow() - failedAt);
    fflush(stdout);
  }
  return zppSuccess;
}

int trElasticSteps(const trArgs_t* a, trEnv_t* env, trSession_t* s) {
  trElastic_t* e = env->elastic;
  trRun_t* run = trSessionRun(s);
  int epoch = atomic_load(&mailbox->lostEpoch);
  zppResult_t res;
  if (e->joining) {
    double unused;
    unsigned char none[TR_EL_MAX] = {0};
    res = trElAdopt(a, env, s, e, 0, 0, none, &unused);
  } else {
    res = trElBuddies(env, e);
    if (res == zppSuccess) res = trElCommit(env, s, e, 0);
  }
  if (res != zppSuccess)
    trLibError(env, e->joining ? "joining the training" : "the first copy of the state", res);
  while (res == zppSuccess && run->nsteps < a->steps) {
    int step = run->nsteps + 1;
    if (step == e->killStep) {
      e->killStep = 0;
      trElArmKill(step > 1 ? 0.8 * run->time[step - 2] : 0.002);
    }
    zppResult_t failed = zppSuccess;
    if (trSessionStep(a, env, s, &failed) == TR_EXIT_OK)
      failed = trElCommit(env, s, e, step);
    else if (failed == zppSuccess)
      res = zppInvalidUsage; /* the loss diverged: said */
    if (failed != zppSuccess) res = trElRecover(a, env, s, e, &epoch, step, trElNow());
  }
  if (res == zppSuccess) return TR_EXIT_OK;
  /* Peers may wait in a call this rank will not make: abort, as train_run.c does. */
  zppCommAbort(env->comm);
  env->comm = NULL;
  return TR_EXIT_ERROR;
}

/* ---- the launcher ------------------------------------------------------------------------- */

typedef struct {
  const trArgs_t* a;
  const tdCorpus_t* corpus;
  mlpShape_t shape;
  int nranks;
  int (*rankMain)(const trArgs_t* a, trEnv_t* env);
  zppConfig_t cfg;
  int slot;            /* in a rank process: its slot */
  int node[TR_EL_MAX]; /* each slot's node, from the layout */
} trElLaunch_t;

static trElLaunch_t launch;

static int trElRank(zppComm_t comm, int joining) {
  trElastic_t e;
  memset(&e, 0, sizeof e);
  e.slot = launch.slot;
  e.joining = joining;
  e.node = launch.node[launch.slot];
  /* Once: not in the steps done again after the recovery, nor in a replacement. */
  e.killStep = !joining && e.node == launch.a->killNode ? launch.a->killStep : 0;
  e.snap.step[0] = e.snap.step[1] = -1;
  srand((unsigned)getpid());
  trEnv_t env;
  memset(&env, 0, sizeof env);
  env.launcher = "fork";
  env.corpus = *launch.corpus;
  env.shape = launch.shape;
  env.elastic = &e;
  trElSetComm(&env, &e, comm);
  int code = launch.rankMain(launch.a, &env);
  for (int i = 0; i < 2; i++) free(e.snap.own[i]), free(e.snap.held[i]);
  return code;
}

static int trElFirst(void* arg) {
  (void)arg;
  if (launch.slot == 0) {
    if (zppGetUniqueId(&mailbox->initId) != zppSuccess) return TR_EXIT_ERROR;
    atomic_store(&mailbox->initReady, 1);
  }
  while (!atomic_load(&mailbox->initReady)) trElSleep(0.001);
  zppComm_t comm = NULL;
  zppResult_t res =
      zppCommInitRankConfig(&comm, launch.nranks, mailbox->initId, launch.slot, &launch.cfg);
  if (res != zppSuccess) {
    fprintf(stderr, "zpp-train: rank %d: zppCommInitRankConfig failed: %s\n", launch.slot,
            zppGetLastError(NULL));
    return TR_EXIT_ERROR;
  }
  return trElRank(comm, 0);
}

static int trElJoin(void* arg) {
  (void)arg;
  zppComm_t comm = NULL;
  int rank = mailbox->joinRank[launch.slot];
  zppResult_t res = zppCommGrow(NULL, launch.nranks, &mailbox->growId, rank, &comm, &launch.cfg);
  if (res != zppSuccess) {
    fprintf(stderr, "zpp-train: replacement for rank %d: zppCommGrow failed: %s\n", rank,
            zppGetLastError(NULL));
    return TR_EXIT_ERROR;
  }
  return trElRank(comm, 1);
}

int trElasticForkRun(const trArgs_t* a, const tdCorpus_t* corpus, const mlpShape_t* shape,
                     zppConfig_t cfg, int (*rankMain)(const trArgs_t* a, trEnv_t* env)) {
  const int n = a->forkRanks, perNode = a->layoutNodes > 0 ? a->layoutPerNode : n;
  mailbox = mmap(NULL, sizeof *mailbox, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mailbox == MAP_FAILED) {
    fprintf(stderr, "zpp-train: mmap for the launcher's mailbox failed\n");
    return TR_EXIT_ERROR;
  }
  launch = (trElLaunch_t){a, corpus, *shape, n, rankMain, cfg, 0, {0}};
  int pid[TR_EL_MAX], alive[TR_EL_MAX], status[TR_EL_MAX];
  int* node = launch.node;
  for (int r = 0; r < n; r++) {
    node[r] = r / perNode;
    alive[r] = 1;
    status[r] = -1;
    atomic_store(&mailbox->slotRank[r], r);
    launch.slot = r;
    pid[r] = zppLaunchSpawn(node[r], trElFirst, NULL);
    if (pid[r] < 0) {
      fprintf(stderr, "zpp-train: fork for rank %d failed\n", r);
      for (int q = 0; q < r; q++) kill(pid[q], SIGKILL);
      return TR_EXIT_ERROR;
    }
  }
  int running = n, worst = TR_EXIT_OK;
  while (running > 0) {
    int st = 0;
    pid_t w = waitpid(-1, &st, 0);
    if (w < 0) break;
    int slot = -1;
    for (int r = 0; r < n; r++)
      if (pid[r] == w) slot = r;
    if (slot < 0) continue;
    running--;
    alive[slot] = 0;
    if (WIFEXITED(st)) {
      status[slot] = WEXITSTATUS(st);
      int code =
          status[slot] == TR_EXIT_OK || status[slot] == TR_EXIT_USAGE ? status[slot] : TR_EXIT_ERROR;
      if (code == TR_EXIT_ERROR || (code == TR_EXIT_USAGE && worst == TR_EXIT_OK)) worst = code;
      continue;
    }
    /* A rank died: its node's others die with it (they go within the next moments). */
    int dead[TR_EL_MAX], nDead = 0;
    dead[nDead++] = slot;
    fprintf(stderr, "zpp-train: rank %d (node %d) died: signal %d\n", mailbox->slotRank[slot],
            node[slot], WTERMSIG(st));
    double until = trElNow() + 0.2;
    while (trElNow() < until) {
      w = waitpid(-1, &st, WNOHANG);
      if (w <= 0) {
        trElSleep(0.002);
        continue;
      }
      for (int r = 0; r < n; r++)
        if (pid[r] == w) {
          running--;
          alive[r] = 0;
          if (WIFSIGNALED(st)) {
            dead[nDead++] = r;
            fprintf(stderr, "zpp-train: rank %d (node %d) died: signal %d\n", mailbox->slotRank[r],
                    node[r], WTERMSIG(st));
          } else {
            status[r] = WEXITSTATUS(st);
            worst = TR_EXIT_ERROR;
          }
        }
    }
    if (running == 0) {
      worst = TR_EXIT_ERROR;
      break;
    }
    mailbox->nLost = nDead;
    for (int i = 0; i < nDead; i++) mailbox->lost[i] = atomic_load(&mailbox->slotRank[dead[i]]);
    int epoch = atomic_fetch_add(&mailbox->lostEpoch, 1) + 1;
    until = trElNow() + TR_EL_WAIT_SEC;
    while (atomic_load(&mailbox->growEpoch) != epoch && trElNow() < until) trElSleep(0.001);
    if (atomic_load(&mailbox->growEpoch) != epoch) {
      fprintf(stderr, "zpp-train: the survivors did not shrink within %.0f s\n", TR_EL_WAIT_SEC);
      worst = TR_EXIT_ERROR;
      break;
    }
    for (int i = 0; i < nDead; i++) {
      int r = dead[i];
      mailbox->joinRank[r] = n - nDead + i;
      launch.slot = r;
      pid[r] = zppLaunchSpawn(node[r], trElJoin, NULL);
      if (pid[r] < 0) {
        fprintf(stderr, "zpp-train: fork for a replacement of rank %d failed\n", mailbox->lost[i]);
        worst = TR_EXIT_ERROR;
        continue;
      }
      alive[r] = 1;
      running++;
    }
  }
  /* Whatever still runs after a failure that could not be recovered goes. */
  for (int r = 0; r < n; r++)
    if (alive[r]) kill(pid[r], SIGKILL), waitpid(pid[r], NULL, 0);
  munmap(mailbox, sizeof *mailbox);
  return worst;
}
