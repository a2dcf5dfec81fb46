/*
 * One test on one rank: make the communicator of the test's ranks, pick the
 * size if asked, time the trials, check every result exactly, and say what
 * happened. Nothing here waits longer than the communicator's timeout
 * without progress: every zpp call is bounded by it.
 *
 * Data: uint32 with sum, because integer addition modulo 2^32 is exact in
 * any order (a ring, a tree, pipelined chunks) and any flipped bit changes
 * the sum; floats would let a flipped low bit vanish in rounding. Each
 * rank's all-gather block is a function of its rank, so a receiver knows
 * whose data was wrong; every trial uses other values, so a stale buffer
 * from the trial before is wrong too.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_math.h"
#include "zpp_health.h"

#define ZH_A 2654435761u
#define ZH_B 0x9e3779b9u
#define ZH_C 40503u
#define ZH_D 0x7f4a7c15u

static void zhFail(zhResultMsg_t* res, const char* fmt, ...) {
  if (res->status) return; /* the first failure is the cause */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->error, sizeof res->error, fmt, ap);
  va_end(ap);
  res->status = 1;
}

static void zhFailCall(zhResultMsg_t* res, zppComm_t comm, const char* call, zppResult_t r) {
  zhFail(res, "%s: %s: %s", call, zppGetErrorString(r), zppGetLastError(comm));
}

static inline uint32_t zhArInput(int g, size_t i, uint32_t trial) {
  return ZH_A * (uint32_t)i + ZH_B * (uint32_t)(g + 1) + ZH_C * trial;
}

static inline uint32_t zhAgValue(int g, size_t j, uint32_t trial) {
  return ((ZH_A * (uint32_t)j + ZH_D) ^ (ZH_B * (uint32_t)(g + 1))) + ZH_C * trial;
}

static void zhFillAllreduce(uint32_t* x, size_t count, int g, uint32_t trial) {
  for (size_t i = 0; i < count; i++) x[i] = zhArInput(g, i, trial);
}

/* The sum over n ranks of zhArInput, in closed form. */
static uint64_t zhCheckAllreduce(const uint32_t* y, size_t count, int n, uint32_t trial) {
  uint32_t un = (uint32_t)n;
  uint32_t ranksSum = (uint32_t)((uint64_t)n * (uint64_t)(n + 1) / 2);
  uint32_t base = ZH_B * ranksSum + un * ZH_C * trial;
  uint64_t wrong = 0;
  for (size_t i = 0; i < count; i++) wrong += y[i] != un * ZH_A * (uint32_t)i + base;
  return wrong;
}

static void zhFillAllgather(uint32_t* x, size_t count, int g, uint32_t trial) {
  for (size_t j = 0; j < count; j++) x[j] = zhAgValue(g, j, trial);
}

static uint64_t zhCheckAllgather(const uint32_t* y, size_t count, int n, uint32_t trial,
                                 uint32_t* wrongFrom) {
  uint64_t wrong = 0;
  for (int o = 0; o < n; o++) {
    uint32_t w = 0;
    const uint32_t* blk = y + (size_t)o * count;
    for (size_t j = 0; j < count; j++) w += blk[j] != zhAgValue(o, j, trial);
    wrongFrom[o] += w;
    wrong += w;
  }
  return wrong;
}

static zppResult_t zhBarrier(zppComm_t comm) {
  uint32_t one = 1, sum = 0;
  return zppAllReduce(&one, &sum, 1, zppUint32, zppSum, comm, NULL);
}

/* Doubles the all-reduce size from 1 MiB until one call of the slowest rank
 * takes targetSec. The decision is the same on every rank because the time
 * is the maximum over ranks, itself all-reduced. */
static size_t zhCalibrate(const zhTestMsg_t* m, zppComm_t comm, zhProgress_t* prog, zhResultMsg_t* res,
                          double deadline) {
  size_t bytes = (size_t)1 << 20, maxBytes = (size_t)m->maxBytes;
  if (maxBytes < bytes) maxBytes = bytes;
  uint32_t *x = NULL, *y = NULL;
  for (int first = 1;; first = 0) {
    size_t count = bytes / sizeof(uint32_t);
    uint32_t* nx = realloc(x, bytes);
    if (nx) x = nx;
    uint32_t* ny = nx ? realloc(y, bytes) : NULL;
    if (ny) y = ny;
    if (!nx || !ny) {
      zhFail(res, "out of memory for %zu-byte buffers", bytes);
      break;
    }
    zhFillAllreduce(x, count, m->groupRank, 0);
    zppResult_t r;
    /* The first call on a fresh communicator also connects the peers. */
    if (first && (r = zppAllReduce(x, y, count, zppUint32, zppSum, comm, NULL)) != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce", r);
      break;
    }
    if ((r = zhBarrier(comm)) != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce (barrier)", r);
      break;
    }
    double t0 = zppClockNow();
    if ((r = zppAllReduce(x, y, count, zppUint32, zppSum, comm, NULL)) != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce", r);
      break;
    }
    double mine = zppClockNow() - t0, slowest = 0;
    zhProgressTick(prog);
    if ((r = zppAllReduce(&mine, &slowest, 1, zppFloat64, zppMax, comm, NULL)) != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce (max)", r);
      break;
    }
    /* Stop early near the budget too (the same on every rank: slowest is). */
    if (slowest >= m->targetSec || bytes * 2 > maxBytes || slowest * 6 > deadline - zppClockNow()) break;
    bytes *= 2;
  }
  free(x);
  free(y);
  return bytes;
}

/* Warm-up and trials of one collective. */
static void zhRunColl(const zhTestMsg_t* m, int coll, size_t bytes, zppComm_t comm, zhProgress_t* prog,
                      zhResultMsg_t* res, uint32_t* wrongFrom, double deadline) {
  const int n = m->nGroup, g = m->groupRank, ag = coll == ZH_COLL_ALLGATHER;
  zppPerfCounts_t k;
  if (zppPerfCounts(ag ? ZPP_PERF_ALLGATHER : ZPP_PERF_ALLREDUCE, bytes, sizeof(uint32_t), n, &k) != 0 ||
      k.apiCount == 0) {
    zhFail(res, "size %zu is too small for %d ranks", bytes, n);
    return;
  }
  uint32_t* x = malloc(k.sendCount * sizeof(uint32_t));
  uint32_t* y = malloc(k.recvCount * sizeof(uint32_t));
  if (!x || !y) {
    zhFail(res, "out of memory for %zu-byte buffers", k.recvCount * sizeof(uint32_t));
    goto out;
  }
  int slot = ag ? 1 : 0;
  /* trial 0 is the warm-up, checked like the others: a bad sender shows at
   * once. */
  for (int t = 0; t <= m->trials && res->status == 0; t++) {
    if (t > 1 && zppClockNow() > deadline) break; /* the time limit: keep what we have */
    int iters = t == 0 ? m->warmup : m->iters;
    if (iters == 0) continue;
    uint32_t trial = (uint32_t)m->testId * 64u + (uint32_t)t;
    if (ag) zhFillAllgather(x, k.sendCount, g, trial);
    else zhFillAllreduce(x, k.sendCount, g, trial);
    memset(y, 0xa5, k.recvCount * sizeof(uint32_t));
    zppResult_t r = zhBarrier(comm);
    if (r != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce (barrier)", r);
      break;
    }
    double t0 = zppClockNow();
    for (int i = 0; i < iters && r == zppSuccess; i++) {
      r = ag ? zppAllGather(x, y, k.apiCount, zppUint32, comm, NULL)
             : zppAllReduce(x, y, k.apiCount, zppUint32, zppSum, comm, NULL);
      zhProgressTick(prog);
    }
    double dt = zppClockNow() - t0;
    if (r != zppSuccess) {
      zhFailCall(res, comm, ag ? "zppAllGather" : "zppAllReduce", r);
      break;
    }
    if (ag) res->wrongAllgather += zhCheckAllgather(y, k.apiCount, n, trial, wrongFrom);
    else res->wrongAllreduce += zhCheckAllreduce(y, k.apiCount, n, trial);
    if (t > 0) res->trialSec[slot][res->nTrials[slot]++] = dt;
  }
out:
  free(x);
  free(y);
}

void zhRunTest(const zhTestMsg_t* m, zhProgress_t* prog, zhResultMsg_t* res, uint32_t* wrongFrom) {
  res->testId = m->testId;
  res->nGroup = m->nGroup;
  res->groupRank = m->groupRank;
  res->bytes = m->bytes;
  memset(wrongFrom, 0, (size_t)m->nGroup * sizeof(uint32_t));
  double start = zppClockNow(), deadline = start + m->budgetSec;
  zhProgressBegin(prog, m->testId);
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  char name[48];
  snprintf(name, sizeof name, "zpp-health test %d", m->testId);
  cfg.commName = name;
  /* Exact data: ZPP_QWZ_BITS / ZPP_QGZ_BITS in the environment must not
   * turn the all-gather into a lossy one. The timeout comes from
   * ZPP_TIMEOUT, which zpp-health sets from --timeout. */
  cfg.qwzBits = 0;
  cfg.qgzBits = 0;
  zppComm_t comm = NULL;
  zppResult_t r = zppCommInitRankConfig(&comm, m->nGroup, m->id, m->groupRank, &cfg);
  res->initSec = zppClockNow() - start;
  if (r != zppSuccess) {
    zhFail(res, "creating the communicator of the test: %s: %s", zppGetErrorString(r),
           zppGetLastError(NULL));
    return;
  }
  zhProgressSetComm(prog, comm);
  size_t bytes = (size_t)m->bytes;
  if (m->calibrate) bytes = zhCalibrate(m, comm, prog, res, deadline);
  res->bytes = bytes;
  if (res->status == 0 && (m->colls & ZH_COLL_ALLREDUCE))
    zhRunColl(m, ZH_COLL_ALLREDUCE, bytes, comm, prog, res, wrongFrom, deadline);
  if (res->status == 0 && (m->colls & ZH_COLL_ALLGATHER))
    zhRunColl(m, ZH_COLL_ALLGATHER, bytes, comm, prog, res, wrongFrom, deadline);
  /* The heartbeat thread must not look at a communicator being freed. */
  zhProgressSetComm(prog, NULL);
  /* After a failure peers may be stuck mid-collective: abort, which does not
   * wait for them, rather than destroy, which would. */
  if (res->status) zppCommAbort(comm);
  else zppCommDestroy(comm);
  /* The caller ends the progress record after sending the result, so that
   * no heartbeat says "idle" before the result is on its way. */
}
