/*
 * Rank 0, the coordinator: runs batches of tests over the control plane and
 * turns what comes back into evidence. The search itself (expectation,
 * bisection, pair tests, corruption) is in zpp_health_locate.c.
 *
 * Hung, dead, or waiting? Every rank's heartbeat says how long it has gone
 * without progress inside its test (bytes sent by its transport, finished
 * iterations). A rank waiting for a hung peer returns by itself within the
 * communicator's timeout T (the library bounds every wait), reports an
 * error and is merely a victim. A rank still without progress after
 * T + grace is stuck: hung. A rank whose control connection closes died. A
 * rank whose heartbeats stop altogether stopped answering (a stopped
 * process, a dead network). So a hung rank is named about T + grace after
 * the test that needs it started, and nothing waits for ever.
 *
 * Dead is proved (EOF or a reset on its connection), hung only inferred
 * from what did not come, so dead wins: the connection of every rank not
 * known dead is read until its EOF, whatever a send to it did, and is read
 * once more right before a rank is named hung.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>

#include "perf_math.h"
#include "zpp_health.h"

static double zhGrace(const zhCoord_t* c) { return 2.0 + 0.1 * c->a->timeoutSec; }
/* Heartbeats come every 0.5 s from a thread that never blocks on the test. */
static double zhSilenceLimit(const zhCoord_t* c) {
  return c->a->timeoutSec > 10 ? c->a->timeoutSec : 10.0;
}

void zhNote(zhCoord_t* c, const char* fmt, ...) {
  if (c->nNotes >= (int)(sizeof c->notes / sizeof c->notes[0])) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->notes[c->nNotes++], sizeof c->notes[0], fmt, ap);
  va_end(ap);
}

double zhRemaining(const zhCoord_t* c) { return c->limitAt - zppClockNow(); }

static zhTest_t* zhAllocTest(zhCoord_t* c) {
  if (c->nTests == c->capTests) {
    int cap = c->capTests ? c->capTests * 2 : 32;
    zhTest_t** t = realloc(c->tests, (size_t)cap * sizeof(zhTest_t*));
    if (t == NULL) return NULL;
    c->tests = t;
    c->capTests = cap;
  }
  zhTest_t* t = calloc(1, sizeof *t);
  if (t == NULL) return NULL;
  c->tests[c->nTests] = t;
  t->id = ++c->nTests;
  t->subject = -1;
  return t;
}

static int zhCmpInt(const void* x, const void* y) { return *(const int*)x - *(const int*)y; }

zhTest_t* zhNewRankTest(zhCoord_t* c, const char* kind, int nRanks, const int* ranks, int colls) {
  zhTest_t* t = zhAllocTest(c);
  if (t == NULL) return NULL;
  t->kind = kind;
  t->colls = colls;
  t->bytes = c->bytes;
  t->nRanks = nRanks;
  t->ranks = malloc((size_t)nRanks * sizeof(int));
  if (t->ranks == NULL) return NULL;
  memcpy(t->ranks, ranks, (size_t)nRanks * sizeof(int));
  qsort(t->ranks, (size_t)nRanks, sizeof(int), zhCmpInt);
  return t;
}

zhTest_t* zhNewTest(zhCoord_t* c, const char* kind, int nUnits, const int* units, int colls) {
  int n = 0;
  for (int i = 0; i < nUnits; i++) n += c->units[units[i]].nRanks;
  int* ranks = malloc((size_t)n * sizeof(int));
  if (ranks == NULL) return NULL;
  n = 0;
  for (int i = 0; i < nUnits; i++)
    for (int j = 0; j < c->units[units[i]].nRanks; j++) ranks[n++] = c->units[units[i]].ranks[j];
  zhTest_t* t = zhNewRankTest(c, kind, n, ranks, colls);
  free(ranks);
  if (t == NULL) return NULL;
  t->nUnits = nUnits;
  t->units = malloc((size_t)nUnits * sizeof(int));
  if (t->units)
    memcpy(t->units, units, (size_t)nUnits * sizeof(int));
  else
    t->nUnits = 0;
  return t;
}

void zhCoordFree(zhCoord_t* c) {
  for (int i = 0; i < c->nTests; i++) {
    free(c->tests[i]->units);
    free(c->tests[i]->ranks);
    free(c->tests[i]->wrongFrom);
    free(c->tests[i]);
  }
  free(c->tests);
  for (int i = 0; i < c->nSus; i++) free(c->sus[i].set);
  free(c->sus);
  for (int u = 0; c->units && u < c->nranks; u++) free(c->units[u].ranks);
  free(c->units);
  free(c->ranks);
  memset(c, 0, sizeof *c);
}

zhSuspect_t* zhAddSuspect(zhCoord_t* c, zhSuspectKind_t kind, zhProblem_t problem, int a, int b) {
  for (int i = 0; i < c->nSus; i++) /* once per culprit */
    if (c->sus[i].kind == kind && c->sus[i].problem == problem && c->sus[i].a == a && c->sus[i].b == b)
      return &c->sus[i];
  if (c->nSus == c->capSus) {
    int cap = c->capSus ? c->capSus * 2 : 8;
    zhSuspect_t* s = realloc(c->sus, (size_t)cap * sizeof(zhSuspect_t));
    if (s == NULL) return NULL;
    c->sus = s;
    c->capSus = cap;
  }
  zhSuspect_t* s = &c->sus[c->nSus++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->problem = problem;
  s->a = a;
  s->b = b;
  return s;
}

double zhEstimate(const zhCoord_t* c, const zhTest_t* t) {
  /* At the world's measured rate; a test of a slow set takes longer, which
   * the hard bound (time limit + timeout) covers. */
  double rate = 0;
  if (c->worldTest > 0) rate = c->tests[c->worldTest - 1]->median[0];
  if (!(rate > 0)) rate = c->expect > 0 ? c->expect : 0;
  int n = t->nRanks;
  double perIter = rate > 0 ? (double)t->bytes * 2.0 * (n - 1) / n / (rate * 1e9) : c->a->targetSec;
  int calls = c->a->warmup + c->a->trials * c->a->iters;
  if (t->colls & ZH_COLL_ALLGATHER) calls *= 2;
  return 0.5 + calls * perIter;
}

void zhJudge(zhCoord_t* c, zhTest_t* t) {
  for (int s = 0; s < 2; s++) {
    double v[ZH_MAX_TRIALS];
    int n = t->trials[s];
    if (n == 0) continue;
    memcpy(v, t->busbw[s], (size_t)n * sizeof(double));
    double mn = v[0];
    for (int i = 1; i < n; i++) mn = v[i] < mn ? v[i] : mn;
    t->min[s] = mn;
    t->median[s] = zppPerfMedian(v, (size_t)n);
  }
  if (t->failed || t->trials[0] == 0 || !(c->required > 0)) return;
  /* The verdict's test against --threshold; the search's sets and pairs
   * against --localize-threshold: they name nodes, which needs a margin
   * over how much a small set's rate varies from test to test (two-rank
   * all-reduces measured 0.7 to 1.2 of the best pair on the emulated
   * cluster). Any trial below fails a test: a node that is slow only now
   * and then must not hide behind a median; confirmation by a second test
   * keeps one low trial from naming a healthy node. */
  t->required = t->id == c->worldTest ? c->required : c->requiredLocal;
  t->judged = 1;
  t->pass = t->min[0] >= t->required;
}

/* ---- one batch ------------------------------------------------------------------- */

typedef struct {
  zhTest_t* t;
  zhResultMsg_t* res; /* [nRanks] */
  int* got;           /* [nRanks]: 1 result in, 2 lost (hung/dead) */
} zhRun_t;

static int zhFindSlot(const zhTest_t* t, int rank) {
  for (int i = 0; i < t->nRanks; i++)
    if (t->ranks[i] == rank) return i;
  return -1;
}

static void zhStoreResult(zhCoord_t* c, zhRun_t* run, int slot, const zhResultMsg_t* r,
                          const uint32_t* wf) {
  zhTest_t* t = run->t;
  run->res[slot] = *r;
  run->res[slot].error[sizeof r->error - 1] = '\0';
  run->got[slot] = 1;
  if (t->wrongFrom && wf)
    memcpy(t->wrongFrom + (size_t)slot * t->nRanks, wf, (size_t)t->nRanks * sizeof(uint32_t));
  (void)c;
}

static void zhMarkLost(zhCoord_t* c, int rank, zhRankState_t state, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void zhMarkLost(zhCoord_t* c, int rank, zhRankState_t state, const char* fmt, ...) {
  zhRankInfo_t* ri = &c->ranks[rank];
  if (ri->state != ZH_RANK_OK) return;
  ri->state = state;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ri->why, sizeof ri->why, fmt, ap);
  va_end(ap);
  c->broken = 1;
}

/* Reads everything rank r has sent so far, without waiting; stores results
 * of this batch. An EOF or a reset on its control connection is the one
 * definitive sign of death: the kernel closes a process's sockets as it
 * exits, however it was killed and whether or not it is reaped yet. */
static void zhReadRank(zhCoord_t* c, zhRun_t* runs, int nRuns, int* outstanding, int r, double now) {
  zhConn_t* k = &c->ctl->conns[r];
  if (atomic_load(&k->closed) || k->fd < 0) return;
  for (;;) {
    uint32_t type = 0, len = 0;
    void* p = NULL;
    int got = zhCtlRecv(k, now, &type, &p, &len);
    if (got == 0) break;
    if (got < 0) {
      const zhHello_t* h = &c->ranks[r].hello;
      zhMarkLost(c, r, ZH_RANK_DEAD,
                 "its process exited or its connection to rank 0 closed (pid %d on %s)", h->pid,
                 h->hostname);
      break;
    }
    c->ranks[r].lastHeard = now;
    if (type == ZH_MSG_HB && len == sizeof(zhHbMsg_t)) {
      c->ranks[r].hb = *(zhHbMsg_t*)p;
      c->ranks[r].haveHb = 1;
    } else if (type == ZH_MSG_RESULT && len >= sizeof(zhResultMsg_t)) {
      const zhResultMsg_t* res = p;
      for (int j = 0; j < nRuns; j++) {
        if (runs[j].t->id != res->testId) continue;
        int slot = zhFindSlot(runs[j].t, r);
        if (slot < 0 || runs[j].got[slot]) break;
        const uint32_t* wf = NULL;
        if (len == sizeof(zhResultMsg_t) + (size_t)runs[j].t->nRanks * sizeof(uint32_t))
          wf = (const uint32_t*)((const char*)p + sizeof(zhResultMsg_t));
        zhStoreResult(c, &runs[j], slot, res, wf);
        (*outstanding)--;
        break;
      }
    }
    free(p);
  }
}

/* Reads what the workers sent; stores results of this batch. Every
 * connection the reader has not seen end is polled, also one that a send
 * (the heartbeat thread's) has failed on: that failure is usually the very
 * death whose EOF is waiting here to be read. */
static void zhDrain(zhCoord_t* c, zhRun_t* runs, int nRuns, int* outstanding, int waitMs) {
  int n = c->nranks;
  struct pollfd* pfd = calloc((size_t)n, sizeof *pfd);
  int* who = calloc((size_t)n, sizeof(int));
  if (!pfd || !who) {
    free(pfd);
    free(who);
    return;
  }
  int np = 0;
  for (int r = 1; r < n; r++) {
    zhConn_t* k = &c->ctl->conns[r];
    if (atomic_load(&k->closed) || k->fd < 0) continue;
    pfd[np] = (struct pollfd){.fd = k->fd, .events = POLLIN};
    who[np++] = r;
  }
  int pending = 0;
  for (int i = 0; i < np; i++) pending |= c->ctl->conns[who[i]].rlen > 0;
  if (np > 0 && poll(pfd, (nfds_t)np, pending ? 0 : waitMs) < 0) np = 0;
  double now = zppClockNow();
  for (int i = 0; i < np; i++) {
    int r = who[i];
    if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) && c->ctl->conns[r].rlen == 0) continue;
    zhReadRank(c, runs, nRuns, outstanding, r, now);
  }
  free(pfd);
  free(who);
}

/* Whether rank r, still owing a result of test t, looks hung now; why in
 * buf. Only the absence of something (progress, a start, heartbeats) says
 * so, never a proof: the caller reads the connection once more first. */
static int zhLooksHung(const zhCoord_t* c, const zhRankInfo_t* ri, const zhTest_t* t, double batchStart,
                       double now, char* buf, size_t len) {
  double stuck = c->a->timeoutSec + zhGrace(c);
  if (ri->haveHb && ri->hb.testId >= 0 && ri->hb.stalledSec > stuck) {
    snprintf(buf, len,
             "no progress for %.1f s inside test %d (the others give up after --timeout %.0f s); "
             "%llu bytes sent by then",
             ri->hb.stalledSec, ri->hb.testId, c->a->timeoutSec, (unsigned long long)ri->hb.bytesSent);
    return 1;
  }
  if (ri->haveHb && ri->hb.testId < 0 && now - batchStart > stuck && ri->lastHeard > batchStart + 1.0) {
    snprintf(buf, len, "idle for %.1f s without starting test %d it was sent", now - batchStart, t->id);
    return 1;
  }
  if (now - ri->lastHeard > zhSilenceLimit(c)) {
    snprintf(buf, len,
             "stopped answering: no heartbeat for %.1f s (process stopped, or its network is down)",
             now - ri->lastHeard);
    return 1;
  }
  return 0;
}

/* Ranks of this batch that cannot answer any more: dead, hung, silent. */
static void zhCheckLost(zhCoord_t* c, zhRun_t* runs, int nRuns, int* outstanding, double batchStart) {
  for (int j = 0; j < nRuns; j++) {
    zhTest_t* t = runs[j].t;
    for (int s = 0; s < t->nRanks; s++) {
      if (runs[j].got[s]) continue;
      int r = t->ranks[s];
      zhRankInfo_t* ri = &c->ranks[r];
      char why[sizeof ri->why];
      if (ri->state == ZH_RANK_OK &&
          zhLooksHung(c, ri, t, batchStart, zppClockNow(), why, sizeof why)) {
        /* Dead beats hung: a closed connection is proof, a silence only a
         * guess, and the two can both be true of a dead rank (its last
         * heartbeat said "stalled", or no heartbeat came since). So read
         * what its connection holds right now before naming it: an EOF
         * there makes it dead, a result or a fresh heartbeat may clear it. */
        zhReadRank(c, runs, nRuns, outstanding, r, zppClockNow());
        if (runs[j].got[s]) continue;
        if (ri->state == ZH_RANK_OK &&
            zhLooksHung(c, ri, t, batchStart, zppClockNow(), why, sizeof why))
          zhMarkLost(c, r, ZH_RANK_HUNG, "%s", why);
      }
      if (ri->state != ZH_RANK_OK) {
        runs[j].got[s] = 2;
        (*outstanding)--;
      }
    }
  }
}

static void zhFinishTest(zhCoord_t* c, zhRun_t* run) {
  zhTest_t* t = run->t;
  int n = t->nRanks;
  t->seconds = zppClockNow() - t->start;
  for (int s = 0; s < n; s++) {
    const zhResultMsg_t* r = &run->res[s];
    if (run->got[s] != 1) {
      t->failed = 1;
      if (t->error[0] == '\0' || run->got[s] == 2)
        snprintf(t->error, sizeof t->error, "rank %d %s: %.300s", t->ranks[s],
                 c->ranks[t->ranks[s]].state == ZH_RANK_DEAD ? "died" : "hung",
                 c->ranks[t->ranks[s]].why);
      continue;
    }
    if (r->status != 0) {
      t->failed = 1;
      if (t->error[0] == '\0')
        snprintf(t->error, sizeof t->error, "rank %d: %s", t->ranks[s], r->error);
    }
    t->wrong += r->wrongAllreduce + r->wrongAllgather;
  }
  if (run->got[0] == 1) t->bytes = (size_t)run->res[0].bytes;
  /* What the others saw is evidence for a rank that hung or died: the
   * library's timeout names the peer a rank waited for. */
  for (int s = 0; s < n; s++) {
    zhRankInfo_t* ri = &c->ranks[t->ranks[s]];
    if (run->got[s] == 2 && ri->lostTest == 0) ri->lostTest = t->id;
    if (run->got[s] != 2 || ri->seen[0]) continue;
    char needle[48];
    snprintf(needle, sizeof needle, "waiting for rank %d ", t->ranks[s]);
    for (int o = 0; o < n; o++) {
      const char* at =
          run->got[o] == 1 && run->res[o].status ? strstr(run->res[o].error, needle) : NULL;
      if (at == NULL) continue;
      /* The sentence of the rank that timed out: errors of the others
       * quote it after their own. */
      const char *from = NULL, *p = run->res[o].error, *q;
      while ((q = strstr(p, "rank ")) != NULL && q < at) from = q, p = q + 1;
      snprintf(ri->seen, sizeof ri->seen, "seen by rank %d: %.*s", t->ranks[o], 200, from ? from : at);
      break;
    }
  }
  if (t->failed) return;
  /* A trial's time is the slowest rank's (nccl-tests' convention). */
  static const zppPerfColl_t coll[2] = {ZPP_PERF_ALLREDUCE, ZPP_PERF_ALLGATHER};
  for (int k = 0; k < 2; k++) {
    int trials = ZH_MAX_TRIALS;
    for (int s = 0; s < n; s++)
      trials = run->res[s].nTrials[k] < trials ? run->res[s].nTrials[k] : trials;
    zppPerfCounts_t counts;
    if (trials == 0 || zppPerfCounts(coll[k], t->bytes, sizeof(uint32_t), n, &counts) != 0) continue;
    for (int i = 0; i < trials; i++) {
      double worst = 0;
      for (int s = 0; s < n; s++)
        worst = run->res[s].trialSec[k][i] > worst ? run->res[s].trialSec[k][i] : worst;
      t->busbw[k][i] = zppPerfBusBw(coll[k], n, counts.bytes, worst / c->a->iters);
    }
    t->trials[k] = trials;
    c->trialsRun += trials;
  }
  zhJudge(c, t);
}

static const char* zhDescribe(const zhCoord_t* c, const zhTest_t* t, char* buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "%s ", t->kind);
  if (t->nUnits > 0 && t->nUnits <= 8) {
    for (int i = 0; i < t->nUnits && o < len; i++)
      o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "," : "", zhUnitName(c, t->units[i]));
  } else if (t->nUnits == 0 && t->nRanks <= 8) {
    for (int i = 0; i < t->nRanks && o < len; i++)
      o += (size_t)snprintf(buf + o, len - o, "%srank %d", i ? "," : "", t->ranks[i]);
  } else {
    snprintf(buf + o, len - o, "%d ranks", t->nRanks);
  }
  return buf;
}

int zhRunBatch(zhCoord_t* c, int n, zhTest_t** tests) {
  if (c->broken || n <= 0) return 0;
  zhRun_t* runs = calloc((size_t)n, sizeof *runs);
  if (runs == NULL) return 0;
  int outstanding = 0, selfRun = -1, ok = 1;
  zhTestMsg_t selfMsg;
  double start = zppClockNow();
  char what[160];
  zhProgressLine(c, zhDescribe(c, tests[0], what, sizeof what));
  for (int j = 0; j < n && ok; j++) {
    zhTest_t* t = tests[j];
    t->start = start;
    runs[j].t = t;
    runs[j].res = calloc((size_t)t->nRanks, sizeof(zhResultMsg_t));
    runs[j].got = calloc((size_t)t->nRanks, sizeof(int));
    t->wrongFrom = calloc((size_t)t->nRanks * (size_t)t->nRanks, sizeof(uint32_t));
    if (!runs[j].res || !runs[j].got || !t->wrongFrom) {
      ok = 0;
      break;
    }
    zhTestMsg_t m;
    memset(&m, 0, sizeof m);
    m.testId = t->id;
    m.colls = t->colls;
    m.bytes = t->bytes;
    m.warmup = c->a->warmup;
    m.trials = c->a->trials;
    m.iters = c->a->iters;
    if (strcmp(t->kind, "data") == 0) m.warmup = 0, m.trials = 1, m.iters = 1;
    m.calibrate = t->bytes == 0;
    m.maxBytes = c->a->maxAutoBytes;
    m.targetSec = c->a->targetSec;
    double left = zhRemaining(c);
    m.budgetSec = left > 1 ? left : 1;
    m.nGroup = t->nRanks;
    m.device = c->a->device;
    zppResult_t r = zppGetUniqueId(&m.id);
    if (r != zppSuccess) {
      snprintf(t->error, sizeof t->error, "zppGetUniqueId: %s", zppGetLastError(NULL));
      t->failed = 1;
      ok = 0;
      break;
    }
    for (int s = 0; s < t->nRanks; s++) {
      m.groupRank = s;
      int rank = t->ranks[s];
      outstanding++;
      if (rank == 0) {
        selfMsg = m;
        selfRun = j;
      } else if (zhCtlSend(&c->ctl->conns[rank], ZH_MSG_TEST, &m, sizeof m) != 0) {
        /* Why it failed is for the connection to say: an EOF or a reset
         * there is a process that exited; a peer that left no room for 10 s
         * is alive and not reading. */
        int none = 0, err = atomic_load(&c->ctl->conns[rank].sendErr);
        zhReadRank(c, NULL, 0, &none, rank, zppClockNow());
        const char* how = err == ETIMEDOUT ? "no room for 10 s" : err ? strerror(err) : "out of memory";
        zhMarkLost(c, rank, ZH_RANK_HUNG,
                   "does not read its control connection (sending test %d to it "
                   "failed: %s)",
                   t->id, how);
        runs[j].got[s] = 2;
        outstanding--;
      }
    }
  }
  if (ok && selfRun >= 0) {
    zhTest_t* t = runs[selfRun].t;
    zhResultMsg_t res;
    memset(&res, 0, sizeof res);
    res.rank = 0;
    uint32_t* wf = calloc((size_t)t->nRanks, sizeof(uint32_t));
    if (wf) {
      zhRunTest(&selfMsg, &c->ctl->progress, &res, wf);
      zhProgressEnd(&c->ctl->progress);
      zhStoreResult(c, &runs[selfRun], zhFindSlot(t, 0), &res, wf);
      outstanding--;
      free(wf);
    }
  }
  /* While rank 0 ran its own part the others' messages queued: what they
   * said then is old news, their silence is not. */
  double collectStart = zppClockNow();
  for (int r = 1; r < c->nranks; r++)
    if (c->ranks[r].lastHeard < collectStart) c->ranks[r].lastHeard = collectStart;
  double hardStop = c->limitAt + c->a->timeoutSec + zhGrace(c);
  while (ok && outstanding > 0) {
    zhDrain(c, runs, n, &outstanding, 100);
    if (outstanding > 0) zhCheckLost(c, runs, n, &outstanding, start);
    if (outstanding > 0 && zppClockNow() > hardStop) {
      c->incomplete = 1;
      zhNote(c, "stopped waiting for test %d at the time limit", tests[0]->id);
      break;
    }
    zhProgressLine(c, zhDescribe(c, tests[0], what, sizeof what));
  }
  int complete = 0;
  for (int j = 0; j < n; j++) {
    if (runs[j].t == NULL) continue;
    if (runs[j].res && runs[j].got) zhFinishTest(c, &runs[j]);
    complete += !runs[j].t->failed;
    if (runs[j].t->wrong) c->wrongSeen = 1;
    if (c->a->verbose) {
      zhTest_t* t = runs[j].t;
      zhProgressClear(c);
      if (t->failed)
        fprintf(stderr, "zpp-health: test %d %s: failed: %s\n", t->id,
                zhDescribe(c, t, what, sizeof what), t->error);
      else
        fprintf(stderr, "zpp-health: test %d %s: %zu B, busbw median %.4f min %.4f GB/s%s\n", t->id,
                zhDescribe(c, t, what, sizeof what), t->bytes, t->median[0], t->min[0],
                t->judged ? (t->pass ? " pass" : " FAIL") : "");
    }
    free(runs[j].res);
    free(runs[j].got);
  }
  free(runs);
  return complete;
}
