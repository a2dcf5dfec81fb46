/*
 * zpp-perf's measurement loop: one section per (collective, mode, type,
 * reduction), one row per size.
 *
 * Per row, every rank: fills its send buffer with the verifiable input
 * (perf_check.h); with -c 1 runs one untimed call and checks every element
 * of its own output; runs the warm-up calls; then times each of the -n calls
 * on its own (blocking calls, host buffers). The byte counters are read
 * around the timed calls only.
 *
 * With a baseline the -n calls are split into --rounds rounds that
 * alternate with the baseline's (ours, baseline, ours, ...), both checked
 * and warmed up before the first: on a small machine the state drifts over
 * a run (which ranks share a core, what else runs), and measuring all of
 * ours and then all of the baseline's lets that drift decide the ratio.
 * Interleaved, both sides sample the same conditions, and each side's
 * statistic is still over all its -n iterations. With one round the
 * baseline follows ours as a whole and a compressed mode reuses the plain
 * row's baseline (the cache below).
 *
 * One all-reduce (max) then gives, for every
 * iteration, the slowest rank's time, and the worst error; one more (sum)
 * the wrong elements and the bytes every rank sent. The printed time is the
 * median over iterations of those maxima: DESIGN.md asks for medians on
 * these noisy machines, and a median ignores the one iteration that a
 * scheduler hiccup stretched (nccl-tests prints the mean over the loop; the
 * mean is in the JSON as time_us_mean).
 *
 * The calls run back to back, and on a ring a rank waits only for its
 * predecessor: a rank held up in one call starts the next late, and its
 * successor waits for it in that next call, and so on around the ring. One
 * hiccup then stretches up to nranks consecutive per-iteration maxima (each
 * on another rank) while the loop as a whole lost it once, and when hiccups
 * come every few calls the median moves with them. So every rank also times
 * its whole loop (each round from a barrier): time_us_steady, the slowest
 * rank's loop time per call, is what a stream of calls costs, as a trainer
 * issuing them one after the other pays it.
 *
 * busbw: for plain modes nccl-tests' formula, and the effective busbw is the
 * same number. For compressed modes the effective busbw applies the formula
 * to the bytes the caller asked to move (the speed the trainer sees) while
 * busbw is what the links carried: the bytes every rank sent on average per
 * call (from the counters, packed data and scales) over the time, which for
 * a plain ring collective is exactly nccl-tests' busbw.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zpp_perf.h"

void zppPerfLibError(const zppPerfEnv_t* env, const char* what, zppResult_t res) {
  const char* last = env->comm != NULL ? zppGetLastError(env->comm) : NULL;
  fprintf(stderr, "zpp-perf: rank %d: %s failed: %s%s%s\n", env->rank, what, zppGetErrorString(res),
          last && last[0] ? ": " : "", last && last[0] ? last : "");
}

/* Sum of a counter over every operation kind: a compressed mode that the
 * library routes through another kind (config-driven qwZ inside
 * zppAllGather) is still counted, and nothing else runs in the timed loop. */
static void zppPerfStatsTotals(const zppCommStats_t* s, double* inter, double* intra) {
  *inter = *intra = 0.0;
  for (int k = 0; k < zppNumOpKinds; k++) {
    *inter += (double)s->interNodeBytes[k];
    *intra += (double)s->intraNodeBytes[k];
  }
}

typedef struct {
  const zppPerfArgs_t* args;
  zppPerfEnv_t* env;
  zppPerfRecord_t* recs;
  size_t nRecs, capRecs;
  long rowsDone, rowsTotal;
  int progress;
  double startTime;
  int anyWrong; /* on every rank: the counts come from an all-reduce */
  /* Baseline rows already measured: the compressed modes of a collective
   * share its baseline (MPI has one all-gather, whichever mode ours is), and
   * the baseline is often the slowest part of a run. Every rank runs the
   * same sequence, so every rank finds the same entries. Used with one
   * round only: interleaved, a baseline is measured in the rounds of the
   * row it is compared with, so it sees that row's conditions. */
  struct zppPerfBaseCache {
    zppPerfColl_t coll;
    zppDataType_t dtype;
    zppRedOp_t redop;
    size_t bytes;
    zppPerfBaseResult_t base;
  } * baseCache;
  size_t nBase, capBase;
  void* stream; /* --device: the CUDA stream zpp's calls run on */
} zppPerfRunState_t;

static int zppPerfAppend(zppPerfRunState_t* st, const zppPerfRecord_t* r) {
  if (st->nRecs == st->capRecs) {
    size_t cap = st->capRecs ? 2 * st->capRecs : 64;
    zppPerfRecord_t* p = realloc(st->recs, cap * sizeof *p);
    if (p == NULL) return -1;
    st->recs = p;
    st->capRecs = cap;
  }
  st->recs[st->nRecs++] = *r;
  return 0;
}

static void zppPerfProgress(zppPerfRunState_t* st, const zppPerfRecord_t* r) {
  if (!st->progress) return;
  char sz[32];
  zppPerfFormatSize(r->counts.bytes, sz, sizeof sz);
  fprintf(stderr, "\r\033[Kzpp-perf: [%ld/%ld] %s %s %s %s ... %.0f s", st->rowsDone + 1, st->rowsTotal,
          zppPerfCollName(r->coll), r->mode, zppPerfTypeName(r->dtype), sz,
          zppClockNow() - st->startTime);
  fflush(stderr);
}

static void zppPerfProgressClear(zppPerfRunState_t* st) {
  if (!st->progress) return;
  fprintf(stderr, "\r\033[K");
  fflush(stderr);
}

/* The baseline's three steps (zpp_perf.h), MPI's or NCCL's. */
typedef struct {
  zppResult_t (*prepare)(zppPerfBaseRow_t* row);
  zppResult_t (*time)(const zppPerfBaseRow_t* row, double* times, int n);
  zppResult_t (*finish)(const zppPerfBaseRow_t* row, const double* times, int n,
                        zppPerfBaseResult_t* base);
} zppPerfBaseOps_t;

static const zppPerfBaseOps_t zppPerfBaseMpi = {zppPerfMpiPrepare, zppPerfMpiTime, zppPerfMpiFinish};
static const zppPerfBaseOps_t zppPerfBaseNccl = {zppPerfNcclPrepare, zppPerfNcclTime,
                                                 zppPerfNcclFinish};

void zppPerfBaseFill(const zppPerfBaseRow_t* row, const char* name, double* tmax, int n, double wrong,
                     double maxError, zppPerfBaseResult_t* base) {
  const zppPerfCall_t* c = row->call;
  double med = zppPerfMedian(tmax, (size_t)n);
  memset(base, 0, sizeof *base);
  base->present = 1;
  base->name = name;
  base->timeUs = med * 1e6;
  base->timeUsMean = zppPerfMean(tmax, (size_t)n) * 1e6;
  base->algbw = zppPerfAlgBw(row->counts->bytes, med);
  base->busbw = zppPerfBusBw(c->coll, c->nranks, row->counts->bytes, med);
  base->wrong = (uint64_t)wrong;
  base->maxError = row->args->check ? maxError : NAN;
}

/* A barrier through our library, outside any timing. */
static zppResult_t zppPerfBarrier(zppPerfEnv_t* env) {
  int one = 1, sum = 0;
  zppResult_t res = zppAllReduce(&one, &sum, 1, zppInt32, zppSum, env->comm, NULL);
  if (res != zppSuccess) zppPerfLibError(env, "the barrier between rounds (allreduce)", res);
  return res;
}

/* Iterations in round r of `rounds`: n*(r+1)/R - n*r/R, so the rounds differ
 * by at most one and add up to n. */
static int zppPerfRoundIters(int iters, int rounds, int r) {
  long long n = iters;
  return (int)(n * (r + 1) / rounds - n * r / rounds);
}

static struct zppPerfBaseCache* zppPerfBaseCacheFind(zppPerfRunState_t* st, const zppPerfCall_t* call,
                                                     zppRedOp_t key, size_t bytes) {
  for (size_t k = 0; k < st->nBase; k++) {
    struct zppPerfBaseCache* e = &st->baseCache[k];
    if (e->coll == call->coll && e->dtype == call->dtype && e->redop == key && e->bytes == bytes)
      return e;
  }
  return NULL;
}

/* Remembers a measured baseline; without memory the next row measures its
 * own, which costs time but changes no result. */
static void zppPerfBaseCacheAdd(zppPerfRunState_t* st, const zppPerfCall_t* call, zppRedOp_t key,
                                size_t bytes, const zppPerfBaseResult_t* base) {
  if (st->nBase == st->capBase) {
    size_t cap = st->capBase ? 2 * st->capBase : 32;
    struct zppPerfBaseCache* p = realloc(st->baseCache, cap * sizeof *p);
    if (p == NULL) return;
    st->baseCache = p;
    st->capBase = cap;
  }
  struct zppPerfBaseCache e = {call->coll, call->dtype, key, bytes, *base};
  st->baseCache[st->nBase++] = e;
}

/* Measures one row; on rank 0 fills rec. Returns zppSuccess or the error
 * (already reported). */
static zppResult_t zppPerfRunRow(zppPerfRunState_t* st, const zppPerfMode_t* mode, zppPerfCall_t* call,
                                 zppPerfRecord_t* rec) {
  const zppPerfArgs_t* a = st->args;
  zppPerfEnv_t* env = st->env;
  zppResult_t res = zppSuccess;
  zppPerfCheckSpec_t spec = {call->coll, call->dtype, call->redop,   call->nranks,
                             call->rank, call->root,  call->apiCount};
  double* times = NULL;
  double* maxIn = NULL;
  double* maxOut = NULL;
  double* baseTimes = NULL;
  int setupDone = 0;

  const zppPerfBaseOps_t* bops = a->baseline == ZPP_PERF_BASELINE_MPI    ? &zppPerfBaseMpi
                                 : a->baseline == ZPP_PERF_BASELINE_NCCL ? &zppPerfBaseNccl
                                                                         : NULL;
  /* Interleaved: the baseline is prepared before our first round and timed
   * after each of ours; else it runs after our row as a whole (or comes
   * from the cache). */
  int interleave = bops != NULL && a->rounds > 1;
  int rounds = interleave ? a->rounds : 1;
  zppPerfBaseRow_t brow = {a, env, call, &rec->counts, 0, {0, 0.0, 0.0, -1}};

  zppPerfFillSend(&spec, (void*)call->send, rec->counts.sendCount);
  const size_t tsize = zppTypeSize(call->dtype);
  if (a->device && (res = zppPerfDeviceCopyChecked(env, (void*)call->runSend, call->send,
                                                   rec->counts.sendCount * tsize, 1)) != zppSuccess)
    return res;
  if (mode->setup != NULL) {
    if ((res = mode->setup(call)) != zppSuccess) {
      zppPerfLibError(env, "mode setup", res);
      return res;
    }
    setupDone = 1;
  }

  zppPerfCheckResult_t chk = {0, 0.0, 0.0, -1};
  if (a->check) {
    zppPerfFillSentinel(call->dtype, call->recv, rec->counts.recvCount);
    if (a->device && (res = zppPerfDeviceCopyChecked(env, call->runRecv, call->recv,
                                                     rec->counts.recvCount * tsize, 1)) != zppSuccess)
      goto out;
    if ((res = mode->run(call)) != zppSuccess) {
      zppPerfLibError(env, zppPerfCollName(call->coll), res);
      goto out;
    }
    if (a->device && ((res = zppPerfDeviceSyncChecked(env, call->stream)) != zppSuccess ||
                      (res = zppPerfDeviceCopyChecked(env, call->recv, call->runRecv,
                                                      rec->counts.recvCount * tsize, 0)) != zppSuccess))
      goto out;
    zppPerfCodecBound_t cb;
    int exact = 1;
    if (mode->boundPrepare != NULL) {
      int rc = mode->boundPrepare(&spec, call, &cb);
      if (rc < 0) {
        fprintf(stderr, "zpp-perf: rank %d: cannot prepare the %s bound (bits %d, block %d)\n",
                env->rank, mode->name, call->bits, call->block);
        res = zppInvalidArgument;
        goto out;
      }
      exact = rc == 1;
    }
    if (a->injectSpec != NULL && a->injectRank == env->rank &&
        (size_t)a->injectElem < rec->counts.recvCount) {
      /* Clearly past whatever bound the element has, lossy modes included. */
      size_t i = (size_t)a->injectElem;
      double eb;
      double e = zppPerfExpected(&spec, i, &eb);
      if (!exact) eb += mode->bound(&spec, i, e, &cb);
      zppPerfStore(call->dtype, call->recv, i, e + 4.0 * eb + 17.0);
    }
    zppPerfCheckRecv(&spec, call->recv, rec->counts.recvCount, exact ? NULL : mode->bound,
                     exact ? NULL : &cb, &chk);
    if (!exact) zppPerfCodecBoundFree(&cb);
    if (chk.wrong > 0 && !a->quiet)
      fprintf(stderr, "zpp-perf: rank %d: %s %s %s %zu B: %llu wrong, first at element %ld\n",
              env->rank, zppPerfCollName(call->coll), mode->name, zppPerfTypeName(call->dtype),
              rec->counts.bytes, (unsigned long long)chk.wrong, chk.firstWrong);
  }
  for (int i = 0; i < a->warmup; i++) {
    zppPerfCallAt(call, i);
    if ((res = mode->run(call)) != zppSuccess) {
      zppPerfLibError(env, zppPerfCollName(call->coll), res);
      goto out;
    }
    if (a->device && (res = zppPerfDeviceSyncChecked(env, call->stream)) != zppSuccess) goto out;
  }

  times = malloc((size_t)a->iters * sizeof *times);
  maxIn = malloc(((size_t)a->iters + 5) * sizeof *maxIn);
  maxOut = malloc(((size_t)a->iters + 5) * sizeof *maxOut);
  if (interleave) baseTimes = malloc((size_t)a->iters * sizeof *baseTimes);
  if (times == NULL || maxIn == NULL || maxOut == NULL || (interleave && baseTimes == NULL)) {
    fprintf(stderr, "zpp-perf: rank %d: out of memory\n", env->rank);
    res = zppSystemError;
    goto out;
  }
  /* After our check and warm-up, so that ours and the baseline start the
   * first round equally prepared. */
  if (interleave && (res = bops->prepare(&brow)) != zppSuccess) goto out;

  /* The counters are read around each of our rounds, so that nothing the
   * baseline does between them could be counted as ours. */
  double inter = 0, intra = 0;
  int haveStats = 1;
  int done = 0;
  double loopTime = 0;               /* this rank's timed loops, end to end */
  double timedFrom = 0, timedTo = 0; /* their span on the wall clock */
  for (int r = 0; r < rounds; r++) {
    int n = zppPerfRoundIters(a->iters, rounds, r);
    /* Every rank done with the warm-up or the baseline's round, and its
     * traffic out of the links (the barrier's messages queue behind it),
     * before our round: else our first call waits for the slowest rank of
     * what came before and is charged for it (a main job without it had
     * 64 MiB qgZ at 1.9x plain instead of 3-4.7x). The baseline's rounds
     * start with its own barrier. */
    if ((res = zppPerfBarrier(env)) != zppSuccess) goto out;
    zppCommStats_t s0, s1;
    haveStats = haveStats && zppCommGetStats(env->comm, &s0) == zppSuccess;
    double loopStart = zppClockNow();
    if (r == 0) timedFrom = zppClockEpoch();
    for (int i = done; i < done + n; i++) {
      zppPerfCallAt(call, i);
      double t0 = zppClockNow();
      res = mode->run(call);
      /* A device call returns once queued: its time runs to its stream's end. */
      if (res == zppSuccess && a->device) res = zppPerfDeviceSyncChecked(env, call->stream);
      times[i] = zppClockNow() - t0;
      if (res != zppSuccess) {
        zppPerfLibError(env, zppPerfCollName(call->coll), res);
        goto out;
      }
    }
    loopTime += zppClockNow() - loopStart;
    timedTo = zppClockEpoch();
    haveStats = haveStats && zppCommGetStats(env->comm, &s1) == zppSuccess;
    if (haveStats) {
      double inter0, intra0, inter1, intra1;
      zppPerfStatsTotals(&s0, &inter0, &intra0);
      zppPerfStatsTotals(&s1, &inter1, &intra1);
      inter += inter1 - inter0;
      intra += intra1 - intra0;
    }
    if (interleave && brow.present && (res = bops->time(&brow, baseTimes + done, n)) != zppSuccess)
      goto out;
    done += n;
  }
  if (setupDone && mode->teardown != NULL) mode->teardown(call);
  setupDone = 0;

  memcpy(maxIn, times, (size_t)a->iters * sizeof *times);
  maxIn[a->iters] = chk.maxError;
  maxIn[a->iters + 1] = chk.maxBound;
  maxIn[a->iters + 2] = loopTime / a->iters;
  maxIn[a->iters + 3] = -timedFrom; /* the max of -from: the earliest rank's start */
  maxIn[a->iters + 4] = timedTo;
  /* A rank without counters sends -1, which survives the sum as < 0. */
  double sumIn[4] = {(double)chk.wrong, haveStats ? inter : -1e300, haveStats ? intra : -1e300, 0.0};
  double sumOut[4];
  if ((res = zppAllReduce(maxIn, maxOut, (size_t)a->iters + 5, zppFloat64, zppMax, env->comm, NULL)) !=
          zppSuccess ||
      (res = zppAllReduce(sumIn, sumOut, 4, zppFloat64, zppSum, env->comm, NULL)) != zppSuccess) {
    zppPerfLibError(env, "reducing the results (allreduce)", res);
    goto out;
  }

  double tMed = zppPerfMedian(maxOut, (size_t)a->iters); /* sorts the maxima */
  rec->timeUs = tMed * 1e6;
  rec->timeUsMin = maxOut[0] * 1e6;
  rec->timeUsMean = zppPerfMean(maxOut, (size_t)a->iters) * 1e6;
  rec->timeUsSteady = maxOut[a->iters + 2] * 1e6;
  rec->timedFrom = -maxOut[a->iters + 3];
  rec->timedTo = maxOut[a->iters + 4];
  rec->algbw = zppPerfAlgBw(rec->counts.bytes, tMed);
  rec->effBusbw = zppPerfBusBw(call->coll, call->nranks, rec->counts.bytes, tMed);
  rec->checked = a->check;
  rec->wrong = (uint64_t)sumOut[0];
  rec->maxError = a->check ? maxOut[a->iters] : NAN;
  rec->bound = a->check ? maxOut[a->iters + 1] : NAN;
  rec->wireInter = sumOut[1] >= 0 ? sumOut[1] / a->iters : NAN;
  rec->wireIntra = sumOut[2] >= 0 ? sumOut[2] / a->iters : NAN;
  if (!mode->compressed) {
    rec->busbw = rec->effBusbw;
  } else {
    double perRank = (rec->wireInter + rec->wireIntra) / call->nranks;
    rec->busbw = isnan(perRank) || !(tMed > 0) ? NAN : perRank / 1e9 / tMed;
  }

  if (bops != NULL) {
    zppRedOp_t key = zppPerfCollReduces(call->coll) ? call->redop : zppSum;
    struct zppPerfBaseCache* hit =
        interleave ? NULL : zppPerfBaseCacheFind(st, call, key, rec->counts.bytes);
    if (hit != NULL) {
      rec->base = hit->base;
    } else if (interleave) {
      /* brow.present is the same on every rank (it follows from the counts). */
      if (brow.present && (res = bops->finish(&brow, baseTimes, a->iters, &rec->base)) != zppSuccess)
        goto out;
    } else {
      if ((res = bops->prepare(&brow)) != zppSuccess) goto out;
      if (brow.present) {
        baseTimes = malloc((size_t)a->iters * sizeof *baseTimes);
        if (baseTimes == NULL) {
          fprintf(stderr, "zpp-perf: rank %d: out of memory\n", env->rank);
          res = zppSystemError;
          goto out;
        }
        if ((res = bops->time(&brow, baseTimes, a->iters)) != zppSuccess ||
            (res = bops->finish(&brow, baseTimes, a->iters, &rec->base)) != zppSuccess)
          goto out;
      }
      zppPerfBaseCacheAdd(st, call, key, rec->counts.bytes, &rec->base);
    }
    double ours = mode->compressed ? rec->effBusbw : rec->busbw;
    rec->base.ratio = rec->base.busbw > 0 ? ours / rec->base.busbw : NAN;
  }

out:
  if (setupDone && mode->teardown != NULL) mode->teardown(call);
  free(times);
  free(maxIn);
  free(maxOut);
  free(baseTimes);
  return res;
}

static void* zppPerfAlloc(size_t count, zppDataType_t dtype) {
  size_t bytes = count * zppTypeSize(dtype);
  bytes = (bytes + 63) / 64 * 64;
  if (bytes == 0) bytes = 64;
  return aligned_alloc(64, bytes);
}

zppResult_t zppPerfDeviceInit(const zppPerfEnv_t* env, void** stream) {
  char err[256];
  if (zppPerfDeviceOpen(env->comm, env->topo.localRank, stream, err, sizeof err) == 0)
    return zppSuccess;
  fprintf(stderr, "zpp-perf: rank %d: --device: %s\n", env->rank, err);
  return zppInvalidUsage;
}

zppResult_t zppPerfDeviceCopyChecked(const zppPerfEnv_t* env, void* dst, const void* src, size_t bytes,
                                     int toDevice) {
  char err[256];
  if (zppPerfDeviceCopy(dst, src, bytes, toDevice, err, sizeof err) == 0) return zppSuccess;
  fprintf(stderr, "zpp-perf: rank %d: --device: %s\n", env->rank, err);
  return zppUnhandledCudaError;
}

zppResult_t zppPerfDeviceSyncChecked(const zppPerfEnv_t* env, void* stream) {
  char err[256];
  if (zppPerfDeviceSync(stream, err, sizeof err) == 0) return zppSuccess;
  fprintf(stderr, "zpp-perf: rank %d: --device: %s\n", env->rank, err);
  return zppUnhandledCudaError;
}

/* One (task, dtype, redop) section over every size. */
static zppResult_t zppPerfRunSection(zppPerfRunState_t* st, const zppPerfTask_t* task,
                                     zppDataType_t dtype, zppRedOp_t redop, const size_t* sizes,
                                     long nSizes) {
  const zppPerfArgs_t* a = st->args;
  zppPerfEnv_t* env = st->env;
  zppPerfCounts_t big;
  zppPerfCounts(task->coll, a->maxBytes, zppTypeSize(dtype), env->nranks, &big);
  void* send = zppPerfAlloc(big.sendCount, dtype);
  void* recv = zppPerfAlloc(big.recvCount, dtype);
  void* devSend = a->device ? zppPerfDeviceAlloc(big.sendCount * zppTypeSize(dtype)) : NULL;
  void* devRecv = a->device ? zppPerfDeviceAlloc(big.recvCount * zppTypeSize(dtype)) : NULL;
  zppResult_t res = zppSuccess;
  if (send == NULL || recv == NULL || (a->device && (devSend == NULL || devRecv == NULL))) {
    fprintf(stderr, "zpp-perf: rank %d: cannot allocate %zu bytes of %sbuffers\n", env->rank,
            (big.sendCount + big.recvCount) * zppTypeSize(dtype), a->device ? "host and device " : "");
    res = zppSystemError;
    goto out;
  }
  int headerDone = 0;
  for (long k = 0; k < nSizes; k++) {
    zppPerfRecord_t rec;
    memset(&rec, 0, sizeof rec);
    rec.coll = task->coll;
    rec.mode = task->mode->name;
    rec.compressed = task->mode->compressed;
    rec.dtype = dtype;
    rec.redop = redop;
    rec.root = a->root;
    zppPerfModeParams(task->mode, a, &rec.bits, &rec.block);
    rec.rotated = task->mode->compressed && rec.bits != 0 && a->quantRotate;
    rec.errorFeedback = a->errorFeedback && strcmp(task->mode->name, "qgz") == 0;
    zppPerfCounts(task->coll, sizes[k], zppTypeSize(dtype), env->nranks, &rec.counts);
    if (env->rank == 0 && !headerDone) {
      zppPerfPrintSectionHeader(stdout, &rec, a->baseline != ZPP_PERF_BASELINE_NONE);
      headerDone = 1;
    }
    if (rec.counts.apiCount == 0) {
      if (env->rank == 0) zppPerfPrintSkipped(stdout, sizes[k]);
      st->rowsDone++;
      continue;
    }
    int rotate = a->root == ZPP_PERF_ROOT_ROTATE;
    zppPerfCall_t call = {env->comm,
                          env->rank,
                          env->nranks,
                          task->coll,
                          dtype,
                          redop,
                          rotate ? 0 : a->root,
                          rec.counts.apiCount,
                          send,
                          recv,
                          a->device ? devSend : send,
                          a->device ? devRecv : recv,
                          st->stream,
                          rec.bits,
                          rec.block,
                          NULL,
                          rotate,
                          rec.rotated,
                          rec.errorFeedback};
    if (env->rank == 0) zppPerfProgress(st, &rec);
    res = zppPerfRunRow(st, task->mode, &call, &rec);
    st->rowsDone++;
    if (env->rank == 0) zppPerfProgressClear(st);
    if (res != zppSuccess) goto out;
    if (rec.wrong > 0 || (rec.base.present && rec.base.wrong > 0)) st->anyWrong = 1;
    if (env->rank == 0) {
      zppPerfPrintRow(stdout, &rec);
      fflush(stdout);
      if (zppPerfAppend(st, &rec) != 0) {
        fprintf(stderr, "zpp-perf: out of memory\n");
        res = zppSystemError;
        goto out;
      }
    }
  }
out:
  free(send);
  free(recv);
  zppPerfDeviceFree(devSend);
  zppPerfDeviceFree(devRecv);
  return res;
}

/* How ranks sit on nodes, from every rank's node (an all-gather): "" for
 * blocks of consecutive ranks, "/cyclic" for nodes taken in turn, "/mixed"
 * otherwise. The hierarchical algorithms must move the same bytes across
 * nodes whatever the placement, so a report says which one it measured. */
static zppResult_t zppPerfPlacement(const zppPerfEnv_t* env, const char** out) {
  int n = env->nranks, N = env->topo.nNodes;
  int32_t mine = env->topo.node;
  int32_t* nodes = malloc((size_t)n * sizeof *nodes);
  if (nodes == NULL) return zppSystemError;
  zppResult_t res = zppAllGather(&mine, nodes, 1, zppInt32, env->comm, NULL);
  int blocks = 1, inTurn = env->topo.uniform;
  for (int r = 0; res == zppSuccess && r < n; r++) {
    blocks &= r == 0 || nodes[r] >= nodes[r - 1]; /* nodes are numbered by their lowest rank */
    inTurn &= nodes[r] == r % N;
  }
  free(nodes);
  *out = blocks ? "" : inTurn ? "/cyclic" : "/mixed";
  return res;
}

/* The run's description for the JSON header and the banner. */
static zppResult_t zppPerfFillInfo(const zppPerfArgs_t* a, const zppPerfEnv_t* env,
                                   zppPerfRunInfo_t* info) {
  memset(info, 0, sizeof *info);
  info->ranks = env->nranks;
  info->nodes = env->topo.nNodes;
  const char* placement = "";
  zppResult_t res = zppPerfPlacement(env, &placement);
  if (res != zppSuccess) return res;
  if (env->topo.uniform)
    snprintf(info->layout, sizeof info->layout, "%dx%d%s", env->topo.nNodes,
             env->nranks / (env->topo.nNodes > 0 ? env->topo.nNodes : 1), placement);
  else
    snprintf(info->layout, sizeof info->layout, "%d nodes, uneven%s", env->topo.nNodes,
             *placement ? ", mixed" : "");
  time_t now = time(NULL);
  struct tm tmv;
  gmtime_r(&now, &tmv);
  strftime(info->date, sizeof info->date, "%Y-%m-%dT%H:%M:%SZ", &tmv);
  if (gethostname(info->host, sizeof info->host - 1) != 0) snprintf(info->host, sizeof info->host, "?");
  info->launcher = env->launcher;
  zppGetVersion(&info->zppVersion);
  info->iters = a->iters;
  info->rounds = a->rounds;
  info->warmup = a->warmup;
  info->check = a->check;
  info->cmdline = a->cmdline;
  return zppSuccess;
}

int zppPerfRunAll(const zppPerfArgs_t* a, zppPerfEnv_t* env) {
  zppPerfRunState_t st;
  memset(&st, 0, sizeof st);
  st.args = a;
  st.env = env;
  st.progress = env->rank == 0 && !a->quiet && isatty(STDERR_FILENO);
  st.startTime = zppClockNow();

  for (int t = 0; t < a->nTasks; t++) {
    if (zppPerfCollRooted(a->tasks[t].coll) && a->root >= env->nranks) {
      if (env->rank == 0)
        fprintf(stderr, "zpp-perf: -r %d is not a rank (there are %d)\n", a->root, env->nranks);
      return ZPP_PERF_EXIT_USAGE;
    }
  }
  if (a->layout != NULL && a->layoutRanks != env->nranks) {
    if (env->rank == 0)
      fprintf(stderr, "zpp-perf: --layout %s has %d ranks, not the %d ranks\n", a->layout,
              a->layoutRanks, env->nranks);
    return ZPP_PERF_EXIT_USAGE;
  }
  long nSizes = zppPerfSizeSeq(a->minBytes, a->maxBytes, a->stepBytes, a->stepFactor, NULL, 0);
  size_t* sizes = malloc((size_t)nSizes * sizeof *sizes);
  if (sizes == NULL) return ZPP_PERF_EXIT_ERROR;
  zppPerfSizeSeq(a->minBytes, a->maxBytes, a->stepBytes, a->stepFactor, sizes, nSizes);

  zppPerfRunInfo_t info;
  zppResult_t infoRes = zppPerfFillInfo(a, env, &info);
  if (infoRes != zppSuccess) {
    zppPerfLibError(env, "the placement all-gather", infoRes);
    free(sizes);
    return ZPP_PERF_EXIT_ERROR;
  }
  for (int t = 0; t < a->nTasks; t++) {
    const zppPerfTask_t* task = &a->tasks[t];
    for (int d = 0; d < a->nDtypes; d++)
      for (int o = 0; o < (zppPerfCollReduces(task->coll) ? a->nRedops : 1); o++)
        if (zppPerfModeApplies(task->mode, a->dtypes[d],
                               zppPerfCollReduces(task->coll) ? a->redops[o] : zppSum))
          st.rowsTotal += nSizes;
  }
  if (env->rank == 0) zppPerfPrintBanner(stdout, &info, a);

  int code = ZPP_PERF_EXIT_OK;
  zppResult_t res = zppSuccess;
  if (a->baseline == ZPP_PERF_BASELINE_NCCL && (res = zppPerfNcclInit(env, a)) != zppSuccess) {
    code = ZPP_PERF_EXIT_ERROR;
    goto out;
  }
  if (a->device && (res = zppPerfDeviceInit(env, &st.stream)) != zppSuccess) {
    code = ZPP_PERF_EXIT_ERROR;
    goto out;
  }
  for (int t = 0; t < a->nTasks && res == zppSuccess; t++) {
    const zppPerfTask_t* task = &a->tasks[t];
    int nOps = zppPerfCollReduces(task->coll) ? a->nRedops : 1;
    for (int d = 0; d < a->nDtypes && res == zppSuccess; d++)
      for (int o = 0; o < nOps && res == zppSuccess; o++) {
        zppRedOp_t op = zppPerfCollReduces(task->coll) ? a->redops[o] : zppSum;
        if (!zppPerfModeApplies(task->mode, a->dtypes[d], op)) {
          if (env->rank == 0)
            printf("#\n# %s %s, %s%s%s: skipped (%s)\n", zppPerfCollName(task->coll), task->mode->name,
                   zppPerfTypeName(a->dtypes[d]), zppPerfCollReduces(task->coll) ? ", " : "",
                   zppPerfCollReduces(task->coll) ? zppPerfRedOpName(op) : "",
                   task->mode->sumAvgOnly ? "float, half, bfloat16 with sum or avg only"
                                          : "float, half, bfloat16 only");
          continue;
        }
        res = zppPerfRunSection(&st, task, a->dtypes[d], op, sizes, nSizes);
      }
  }
  if (res != zppSuccess) {
    code = ZPP_PERF_EXIT_ERROR;
    goto out;
  }
  if (env->rank == 0) {
    zppPerfPrintSummary(stdout, st.recs, st.nRecs);
    fflush(stdout);
    if (a->jsonPath != NULL && zppPerfWriteJson(a->jsonPath, &info, st.recs, st.nRecs) != 0)
      code = ZPP_PERF_EXIT_ERROR;
    char svg[4096];
    const char* svgPath = a->svgPath;
    if (svgPath == NULL && a->jsonPath != NULL) {
      zppPerfSvgPathFor(a->jsonPath, svg, sizeof svg);
      svgPath = svg;
    }
    if (svgPath != NULL && zppPerfWriteSvg(svgPath, &info, st.recs, st.nRecs) != 0)
      code = ZPP_PERF_EXIT_ERROR;
  }
  /* Every rank got the same sums, so every rank exits with the same code. */
  if (code == ZPP_PERF_EXIT_OK && st.anyWrong) code = ZPP_PERF_EXIT_WRONG;
out:
  if (a->baseline == ZPP_PERF_BASELINE_NCCL) zppPerfNcclFinalize();
  zppPerfDeviceClose(st.stream);
  free(sizes);
  free(st.recs);
  free(st.baseCache);
  return code;
}
