/* One training run of zpp-train in one communication mode: see train.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train.h"
#include "zero3.h"

#define TR_EVAL_CHUNK 256

static double trNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void trLibError(const trEnv_t* env, const char* what, zppResult_t res) {
  fprintf(stderr, "zpp-train: rank %d: %s failed: %s (%s)\n", env->rank, what, zppGetErrorString(res),
          zppGetLastError(env->comm));
}

void trRunFree(trRun_t* run) {
  free(run->loss);
  free(run->time);
  free(run->busy);
  free(run->exposed);
  free(run->compute);
  free(run->evalStep);
  free(run->evalLoss);
  free(run->sampleText);
  memset(run, 0, sizeof *run);
}

static int trCompareDouble(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

static double trMedian(const double* v, int n) {
  if (n <= 0) return 0;
  double* s = malloc((size_t)n * sizeof *s);
  if (s == NULL) return v[0];
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, trCompareDouble);
  double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  free(s);
  return m;
}

/* Mean loss over the fixed held-out windows, this rank's share of them in
 * chunks (each chunk is a forward pass: four weight gathers). */
static zppResult_t trEval(const trArgs_t* a, trEnv_t* env, z3Trainer_t* t, zcComm_t zc, double* loss) {
  int total = a->evalSamples;
  int lo = (int)((long)total * env->rank / env->nranks);
  int hi = (int)((long)total * (env->rank + 1) / env->nranks);
  int maxChunk = (total + env->nranks - 1) / env->nranks;
  if (maxChunk > TR_EVAL_CHUNK) maxChunk = TR_EVAL_CHUNK;
  /* Every rank runs the same number of forward passes (collectives), even
   * one whose share is smaller or empty. */
  int chunks = (maxChunk > 0) ? ((total + env->nranks - 1) / env->nranks + maxChunk - 1) / maxChunk : 0;
  int* ctx = malloc((size_t)(maxChunk > 0 ? maxChunk : 1) * (size_t)a->context * sizeof(int));
  int* tgt = malloc((size_t)(maxChunk > 0 ? maxChunk : 1) * sizeof(int));
  if (ctx == NULL || tgt == NULL) {
    free(ctx);
    free(tgt);
    return zppSystemError;
  }
  double sum = 0;
  zppResult_t res = zppSuccess;
  for (int c = 0; c < chunks && res == zppSuccess; c++) {
    int first = lo + c * maxChunk;
    int n = first < hi ? (hi - first < maxChunk ? hi - first : maxChunk) : 0;
    if (n > 0) tdEvalBatch(&env->corpus, a->context, total, first, n, ctx, tgt);
    double part = 0;
    res = z3Eval(t, ctx, tgt, n, &part);
    sum += part;
  }
  free(ctx);
  free(tgt);
  double global = 0;
  if (res == zppSuccess) res = zcAllReduce(&sum, &global, 1, zppFloat64, zppSum, zc, NULL);
  if (res == zppSuccess) *loss = global / total;
  return res;
}

/* Generates text from the trained weights on rank 0 (every rank gathers). */
static zppResult_t trSample(const trArgs_t* a, trEnv_t* env, z3Trainer_t* t, trRun_t* run) {
  const mlpShape_t* s = &env->shape;
  float* full[MLP_NLAYERS] = {NULL};
  zppResult_t res = zppSuccess;
  for (int l = 0; l < MLP_NLAYERS; l++)
    if ((full[l] = malloc(mlpLayerParams(s, l) * sizeof(float))) == NULL) res = zppSystemError;
  if (res == zppSuccess) res = z3GatherAll(t, full);
  mlpActs_t acts;
  if (res == zppSuccess && env->rank == 0 && mlpActsAlloc(&acts, s, 1) == 0) {
    int* ctx = malloc((size_t)s->context * sizeof(int));
    run->sampleText = malloc((size_t)a->sample + 1);
    if (ctx != NULL && run->sampleText != NULL) {
      int tgt = 0;
      /* Seeded with the start of the held-out text, so the prompt is text
       * the model never trained on. */
      for (int k = 0; k < s->context; k++) ctx[k] = env->corpus.tokens[env->corpus.ntrain + (size_t)k];
      uint64_t st = a->seed ^ 0x243f6a8885a308d3ull;
      acts.n = 1;
      acts.ctx = ctx;
      acts.tgt = &tgt;
      for (int i = 0; i < a->sample; i++) {
        for (int l = 0; l < MLP_NLAYERS; l++) mlpForward(s, l, full[l], &acts);
        double u = (double)(mlpRand64(&st) >> 11) * (1.0 / 9007199254740992.0), acc = 0;
        int next = s->vocab - 1;
        for (int v = 0; v < s->vocab; v++) {
          acc += acts.p[v];
          if (u < acc) {
            next = v;
            break;
          }
        }
        run->sampleText[i] = (char)env->corpus.chars[next];
        memmove(ctx, ctx + 1, (size_t)(s->context - 1) * sizeof(int));
        ctx[s->context - 1] = next;
      }
      run->sampleText[a->sample] = '\0';
    }
    free(ctx);
    mlpActsFree(&acts);
  }
  for (int l = 0; l < MLP_NLAYERS; l++) free(full[l]);
  return res;
}

static int trAllocRun(trRun_t* run, int steps) {
  size_t n = (size_t)(steps > 0 ? steps : 1);
  run->loss = calloc(n, sizeof(double));
  run->time = calloc(n, sizeof(double));
  run->busy = calloc(n, sizeof(double));
  run->exposed = calloc(n, sizeof(double));
  run->compute = calloc(n, sizeof(double));
  run->evalStep = calloc(n + 1, sizeof(int));
  run->evalLoss = calloc(n + 1, sizeof(double));
  return run->loss && run->time && run->busy && run->exposed && run->compute && run->evalStep &&
                 run->evalLoss
             ? 0
             : -1;
}

/* Everything at the end of a run, reduced over the ranks in one call. */
static zppResult_t trSummarize(trEnv_t* env, zcComm_t zc, trRun_t* run) {
  int n = run->nsteps;
  enum { F_BUSY, F_EXPOSED, F_COMP, F_BYTES };
  double sums[F_BYTES + 2 * zppNumOpKinds];
  double busy = 0, exposed = 0, comp = 0;
  for (int i = 0; i < n; i++) {
    busy += run->busy[i];
    exposed += run->exposed[i];
    comp += run->compute[i];
  }
  sums[F_BUSY] = busy;
  sums[F_EXPOSED] = exposed;
  sums[F_COMP] = comp;
  for (int k = 0; k < zppNumOpKinds; k++) {
    sums[F_BYTES + k] = run->intraBytes[k];
    sums[F_BYTES + zppNumOpKinds + k] = run->interBytes[k];
  }
  int nsum = F_BYTES + 2 * zppNumOpKinds;
  zppResult_t res = zcAllReduce(sums, sums, (size_t)nsum, zppFloat64, zppSum, zc, NULL);
  /* A step lasts as long as its slowest rank. */
  if (res == zppSuccess && n > 0)
    res = zcAllReduce(run->time, run->time, (size_t)n, zppFloat64, zppMax, zc, NULL);
  if (res != zppSuccess) return res;
  double per = n > 0 ? 1.0 / ((double)n * env->nranks) : 0;
  run->busyMean = sums[F_BUSY] * per;
  run->exposedMean = sums[F_EXPOSED] * per;
  run->computeMean = sums[F_COMP] * per;
  run->hiddenShare = sums[F_BUSY] > 0 ? (sums[F_BUSY] - sums[F_EXPOSED]) / sums[F_BUSY] : 0;
  if (run->hiddenShare < 0) run->hiddenShare = 0;
  for (int k = 0; k < zppNumOpKinds; k++) {
    run->intraBytes[k] = n > 0 ? sums[F_BYTES + k] / n : 0;
    run->interBytes[k] = n > 0 ? sums[F_BYTES + zppNumOpKinds + k] / n : 0;
  }
  run->medianStep = trMedian(run->time, n);
  double total = 0;
  for (int i = 0; i < n; i++) total += run->time[i];
  run->meanStep = n > 0 ? total / n : 0;
  return zppSuccess;
}

/* One training run in progress: its communication layer, its ZeRO-3
 * state, its batch buffers. Two may be alive at once (--compare), taking
 * turns every few steps so that both see the same machine. */
struct trSession {
  trRun_t* run;
  zcComm_t zc;
  z3Trainer_t* t;
  int* ctx;
  int* tgt;
  int slice;
};

static void trSessionFree(trSession_t* s) {
  if (s == NULL) return;
  z3Destroy(s->t);
  zcCommDestroy(s->zc);
  free(s->ctx);
  free(s->tgt);
  free(s);
}

/* The session's communication layer, ZeRO-3 state (the initial one) and batch buffers, on
 * env->comm; the old ones, if any, freed first. */
static int trSessionBuild(const trArgs_t* a, trEnv_t* env, trSession_t* s) {
  z3Destroy(s->t);
  zcCommDestroy(s->zc);
  free(s->ctx);
  free(s->tgt);
  s->t = NULL;
  s->zc = NULL;
  s->ctx = s->tgt = NULL;
  s->slice = a->batch / env->nranks;
  zppResult_t res = zcCommInit(&s->zc, env->comm, &s->run->opt);
  if (res != zppSuccess) {
    trLibError(env, "creating the communication layer", res);
    return TR_EXIT_ERROR;
  }
  s->run->opt = *zcCommOptions(s->zc);
  z3Config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.shape = env->shape;
  cfg.batch = a->batch;
  cfg.type = a->type;
  cfg.lr = (float)a->lr;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.999f;
  cfg.eps = 1e-8f;
  cfg.bucketBytes = (size_t)(a->bucketMB * 1048576.0);
  cfg.overlap = s->run->overlap;
  cfg.prefetch = a->prefetch;
  cfg.seed = a->seed;
  cfg.evalCap = TR_EVAL_CHUNK;
  char err[256];
  res = z3Create(&s->t, &cfg, s->zc, env->rank, env->nranks, err, sizeof err);
  if (res != zppSuccess) {
    fprintf(stderr, "zpp-train: rank %d: %s\n", env->rank, err);
    return res == zppInvalidArgument ? TR_EXIT_USAGE : TR_EXIT_ERROR;
  }
  s->ctx = malloc((size_t)s->slice * (size_t)a->context * sizeof(int));
  s->tgt = malloc((size_t)s->slice * sizeof(int));
  if (s->ctx == NULL || s->tgt == NULL) {
    fprintf(stderr, "zpp-train: rank %d: out of memory\n", env->rank);
    return TR_EXIT_ERROR;
  }
  return TR_EXIT_OK;
}

int trSessionOpen(const trArgs_t* a, trEnv_t* env, const zcOptions_t* opt, int overlap, trRun_t* run,
                  trSession_t** out) {
  memset(run, 0, sizeof *run);
  run->mode = opt->mode == zcModePlain ? "plain" : "zeropp";
  run->opt = *opt;
  run->overlap = overlap;
  trSession_t* s = calloc(1, sizeof *s);
  if (s == NULL || trAllocRun(run, a->steps) != 0) {
    free(s);
    fprintf(stderr, "zpp-train: rank %d: out of memory\n", env->rank);
    return TR_EXIT_ERROR;
  }
  s->run = run;
  int code = trSessionBuild(a, env, s);
  if (code != TR_EXIT_OK) {
    trSessionFree(s);
    return code;
  }
  if (env->rank == 0 && !a->quiet) trPrintHeader(a, env, run);
  *out = s;
  return TR_EXIT_OK;
}

int trSessionRebuild(const trArgs_t* a, trEnv_t* env, trSession_t* s) {
  return trSessionBuild(a, env, s);
}

/* Peers may be stuck in a collective this rank will never join: abort the
 * communicator (it fails their operations) rather than wait in a destroy.
 * The sessions are left to the process's exit: they refer to it. */
static int trFail(trEnv_t* env, const char* what, zppResult_t res) {
  if (what != NULL) trLibError(env, what, res);
  zppCommAbort(env->comm);
  env->comm = NULL;
  return TR_EXIT_ERROR;
}

int trSessionStep(const trArgs_t* a, trEnv_t* env, trSession_t* s, zppResult_t* failed) {
  trRun_t* run = s->run;
  int k = run->nsteps;
  *failed = zppSuccess;
  tdTrainBatch(&env->corpus, a->context, a->seed, k, env->rank * s->slice, s->slice, s->ctx, s->tgt);
  zcTimes_t before, after;
  zppCommStats_t st0, st1;
  zcCommTimes(s->zc, &before);
  zppCommGetStats(env->comm, &st0);
  double t0 = trNow();
  z3StepInfo_t info;
  zppResult_t res = z3Step(s->t, s->ctx, s->tgt, &info);
  double global = 0;
  if (res == zppSuccess) res = zcAllReduce(&info.lossSum, &global, 1, zppFloat64, zppSum, s->zc, NULL);
  if (res != zppSuccess) {
    *failed = res;
    return TR_EXIT_ERROR;
  }
  run->time[k] = trNow() - t0;
  zcCommTimes(s->zc, &after);
  zppCommGetStats(env->comm, &st1);
  for (int o = 0; o < zppNumOpKinds; o++) {
    run->intraBytes[o] += (double)(st1.intraNodeBytes[o] - st0.intraNodeBytes[o]);
    run->interBytes[o] += (double)(st1.interNodeBytes[o] - st0.interNodeBytes[o]);
  }
  run->loss[k] = global / a->batch;
  run->busy[k] = after.busy - before.busy;
  run->exposed[k] = after.exposed - before.exposed;
  run->compute[k] = info.compute;
  run->nsteps = k + 1;
  if (!isfinite(run->loss[k])) {
    if (env->rank == 0)
      fprintf(stderr, "zpp-train: %s: the loss is %g at step %d: training diverged\n", run->mode,
              run->loss[k], k + 1);
    return TR_EXIT_ERROR;
  }
  if (env->rank == 0 && !a->quiet) trPrintStep(a, run, k);
  if (a->evalEvery > 0 && (k + 1) % a->evalEvery == 0 && k + 1 < a->steps) {
    /* An evaluation the elastic trainer repeats after a recovery counts once. */
    while (run->nevals > 0 && run->evalStep[run->nevals - 1] >= k + 1) run->nevals--;
    if ((res = trEval(a, env, s->t, s->zc, &run->evalLoss[run->nevals])) != zppSuccess) {
      *failed = res;
      return TR_EXIT_ERROR;
    }
    run->evalStep[run->nevals++] = k + 1;
  }
  return TR_EXIT_OK;
}

int trSessionSteps(const trArgs_t* a, trEnv_t* env, trSession_t* s, int count) {
  for (int i = 0; i < count && s->run->nsteps < a->steps; i++) {
    zppResult_t failed;
    if (trSessionStep(a, env, s, &failed) != TR_EXIT_OK)
      return trFail(env, failed != zppSuccess ? "a training step" : NULL, failed);
  }
  return TR_EXIT_OK;
}

z3Trainer_t* trSessionTrainer(trSession_t* s) { return s->t; }
zcComm_t trSessionComm(trSession_t* s) { return s->zc; }

int trSessionClose(const trArgs_t* a, trEnv_t* env, trSession_t* s) {
  trRun_t* run = s->run;
  zppResult_t res;
  run->secondaryBytes = z3SecondaryBytes(s->t);
  if ((res = trEval(a, env, s->t, s->zc, &run->evalLoss[run->nevals])) != zppSuccess)
    return trFail(env, "the final evaluation", res);
  run->evalStep[run->nevals++] = run->nsteps;
  if ((res = trSummarize(env, s->zc, run)) != zppSuccess) return trFail(env, "summing up the run", res);
  if (a->sample > 0 && (res = trSample(a, env, s->t, run)) != zppSuccess)
    return trFail(env, "gathering the weights for sampling", res);
  trSessionFree(s);
  return TR_EXIT_OK;
}

trRun_t* trSessionRun(trSession_t* s) { return s->run; }
