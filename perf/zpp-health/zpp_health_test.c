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
 *
 * --device: the same data and checks, with the collectives on device
 * buffers and a CUDA stream (NCCL between the GPUs, as a GPU job uses
 * them). The host buffers are filled and checked; their device copies are
 * what the calls get. A trial's time runs until the stream is done.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_device.h"
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

/* A test's buffers: x and y on the host, filled and checked; with --device
 * also their device copies dx, dy and the stream the calls run on. */
typedef struct {
  uint32_t *x, *y;
  void *dx, *dy;
  void* stream; /* NULL: host buffers */
  size_t cap;   /* bytes of each */
} zhBufs_t;

static int zhBufsReserve(zhBufs_t* b, size_t bytes, zhResultMsg_t* res) {
  if (bytes <= b->cap) return 0;
  uint32_t* nx = realloc(b->x, bytes);
  if (nx) b->x = nx;
  uint32_t* ny = nx ? realloc(b->y, bytes) : NULL;
  if (ny) b->y = ny;
  if (!nx || !ny) {
    zhFail(res, "out of memory for %zu-byte buffers", bytes);
    return -1;
  }
  if (b->stream) {
    zppPerfDeviceFree(b->dx);
    zppPerfDeviceFree(b->dy);
    b->dx = zppPerfDeviceAlloc(bytes);
    b->dy = b->dx ? zppPerfDeviceAlloc(bytes) : NULL;
    if (!b->dx || !b->dy) {
      zhFail(res, "out of device memory for %zu-byte buffers", bytes);
      return -1;
    }
  }
  b->cap = bytes;
  return 0;
}

static void zhBufsFree(zhBufs_t* b) {
  free(b->x);
  free(b->y);
  zppPerfDeviceFree(b->dx);
  zppPerfDeviceFree(b->dy);
  memset(b, 0, sizeof *b);
}

/* The buffers zpp's calls get. */
static void* zhIn(const zhBufs_t* b) { return b->stream ? b->dx : (void*)b->x; }
static void* zhOut(const zhBufs_t* b) { return b->stream ? b->dy : (void*)b->y; }

/* Host -> device (x and, for the sentinel, y) before the calls. */
static int zhUpload(const zhBufs_t* b, size_t xBytes, size_t yBytes, zhResultMsg_t* res) {
  char err[256];
  if (!b->stream) return 0;
  if (zppPerfDeviceCopy(b->dx, b->x, xBytes, 1, err, sizeof err) == 0 &&
      (yBytes == 0 || zppPerfDeviceCopy(b->dy, b->y, yBytes, 1, err, sizeof err) == 0))
    return 0;
  zhFail(res, "--device: %s", err);
  return -1;
}

/* Waits for the calls queued on the stream (nothing for host buffers). */
static int zhWait(const zhBufs_t* b, zhResultMsg_t* res) {
  char err[256];
  if (!b->stream || zppPerfDeviceSync(b->stream, err, sizeof err) == 0) return 0;
  zhFail(res, "--device: %s", err);
  return -1;
}

/* Device -> host of y, to check it. */
static int zhDownload(const zhBufs_t* b, size_t yBytes, zhResultMsg_t* res) {
  char err[256];
  if (!b->stream || zppPerfDeviceCopy(b->y, b->dy, yBytes, 0, err, sizeof err) == 0) return 0;
  zhFail(res, "--device: %s", err);
  return -1;
}

static zppResult_t zhBarrier(zppComm_t comm) {
  uint32_t one = 1, sum = 0;
  return zppAllReduce(&one, &sum, 1, zppUint32, zppSum, comm, NULL);
}

/* Doubles the all-reduce size from 1 MiB until one call of the slowest rank
 * takes targetSec. The decision is the same on every rank because the time
 * is the maximum over ranks, itself all-reduced. */
static size_t zhCalibrate(const zhTestMsg_t* m, zppComm_t comm, zhBufs_t* b, zhProgress_t* prog,
                          zhResultMsg_t* res, double deadline) {
  size_t bytes = (size_t)1 << 20, maxBytes = (size_t)m->maxBytes;
  if (maxBytes < bytes) maxBytes = bytes;
  for (int first = 1;; first = 0) {
    size_t count = bytes / sizeof(uint32_t);
    if (zhBufsReserve(b, bytes, res) != 0) break;
    zhFillAllreduce(b->x, count, m->groupRank, 0);
    if (zhUpload(b, bytes, 0, res) != 0) break;
    zppResult_t r;
    /* The first call on a fresh communicator also connects the peers. */
    if (first && ((r = zppAllReduce(zhIn(b), zhOut(b), count, zppUint32, zppSum, comm, b->stream)) !=
                      zppSuccess ||
                  zhWait(b, res) != 0)) {
      if (r != zppSuccess) zhFailCall(res, comm, "zppAllReduce", r);
      break;
    }
    if ((r = zhBarrier(comm)) != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce (barrier)", r);
      break;
    }
    double t0 = zppClockNow();
    if ((r = zppAllReduce(zhIn(b), zhOut(b), count, zppUint32, zppSum, comm, b->stream)) !=
        zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce", r);
      break;
    }
    if (zhWait(b, res) != 0) break;
    double mine = zppClockNow() - t0, slowest = 0;
    zhProgressTick(prog);
    if ((r = zppAllReduce(&mine, &slowest, 1, zppFloat64, zppMax, comm, NULL)) != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce (max)", r);
      break;
    }
    /* Stop early near the budget too (the same on every rank: slowest is). */
    if (slowest >= m->targetSec || bytes * 2 > maxBytes || slowest * 6 > deadline - zppClockNow())
      break;
    bytes *= 2;
  }
  return bytes;
}

/* Warm-up and trials of one collective. */
static void zhRunColl(const zhTestMsg_t* m, int coll, size_t bytes, zppComm_t comm, zhBufs_t* b,
                      zhProgress_t* prog, zhResultMsg_t* res, uint32_t* wrongFrom, double deadline) {
  const int n = m->nGroup, g = m->groupRank, ag = coll == ZH_COLL_ALLGATHER;
  zppPerfCounts_t k;
  if (zppPerfCounts(ag ? ZPP_PERF_ALLGATHER : ZPP_PERF_ALLREDUCE, bytes, sizeof(uint32_t), n, &k) !=
          0 ||
      k.apiCount == 0) {
    zhFail(res, "size %zu is too small for %d ranks", bytes, n);
    return;
  }
  size_t xBytes = k.sendCount * sizeof(uint32_t), yBytes = k.recvCount * sizeof(uint32_t);
  if (zhBufsReserve(b, xBytes > yBytes ? xBytes : yBytes, res) != 0) return;
  uint32_t *x = b->x, *y = b->y;
  int slot = ag ? 1 : 0;
  /* trial 0 is the warm-up, checked like the others: a bad sender shows at
   * once. */
  for (int t = 0; t <= m->trials && res->status == 0; t++) {
    if (t > 1 && zppClockNow() > deadline) break; /* the time limit: keep what we have */
    int iters = t == 0 ? m->warmup : m->iters;
    if (iters == 0) continue;
    uint32_t trial = (uint32_t)m->testId * 64u + (uint32_t)t;
    if (ag)
      zhFillAllgather(x, k.sendCount, g, trial);
    else
      zhFillAllreduce(x, k.sendCount, g, trial);
    memset(y, 0xa5, yBytes);
    if (zhUpload(b, xBytes, yBytes, res) != 0) break;
    zppResult_t r = zhBarrier(comm);
    if (r != zppSuccess) {
      zhFailCall(res, comm, "zppAllReduce (barrier)", r);
      break;
    }
    double t0 = zppClockNow();
    for (int i = 0; i < iters && r == zppSuccess; i++) {
      r = ag ? zppAllGather(zhIn(b), zhOut(b), k.apiCount, zppUint32, comm, b->stream)
             : zppAllReduce(zhIn(b), zhOut(b), k.apiCount, zppUint32, zppSum, comm, b->stream);
      zhProgressTick(prog);
    }
    if (r != zppSuccess) {
      zhFailCall(res, comm, ag ? "zppAllGather" : "zppAllReduce", r);
      break;
    }
    if (zhWait(b, res) != 0) break;
    double dt = zppClockNow() - t0;
    if (zhDownload(b, yBytes, res) != 0) break;
    if (ag)
      res->wrongAllgather += zhCheckAllgather(y, k.apiCount, n, trial, wrongFrom);
    else
      res->wrongAllreduce += zhCheckAllreduce(y, k.apiCount, n, trial);
    if (t > 0) res->trialSec[slot][res->nTrials[slot]++] = dt;
  }
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
  zhBufs_t b;
  memset(&b, 0, sizeof b);
  if (m->device) {
    zppTopology_t topo;
    char err[256];
    if ((r = zppCommTopology(comm, &topo)) != zppSuccess)
      zhFailCall(res, comm, "zppCommTopology", r);
    else if (zppPerfDeviceOpen(comm, topo.localRank, &b.stream, err, sizeof err) != 0)
      zhFail(res, "--device: %s", err);
  }
  size_t bytes = (size_t)m->bytes;
  if (res->status == 0 && m->calibrate) bytes = zhCalibrate(m, comm, &b, prog, res, deadline);
  res->bytes = bytes;
  if (res->status == 0 && (m->colls & ZH_COLL_ALLREDUCE))
    zhRunColl(m, ZH_COLL_ALLREDUCE, bytes, comm, &b, prog, res, wrongFrom, deadline);
  if (res->status == 0 && (m->colls & ZH_COLL_ALLGATHER))
    zhRunColl(m, ZH_COLL_ALLGATHER, bytes, comm, &b, prog, res, wrongFrom, deadline);
  zppPerfDeviceClose(b.stream);
  zhBufsFree(&b);
  /* The heartbeat thread must not look at a communicator being freed. */
  zhProgressSetComm(prog, NULL);
  /* After a failure peers may be stuck mid-collective: abort, which does not
   * wait for them, rather than destroy, which would. */
  if (res->status)
    zppCommAbort(comm);
  else
    zppCommDestroy(comm);
  /* The caller ends the progress record after sending the result, so that
   * no heartbeat says "idle" before the result is on its way. */
}
