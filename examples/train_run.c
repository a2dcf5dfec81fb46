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
  fprintf(stderr, "zpp-train: rank %d: %s failed: %s (%s)\n", env->rank, what,
          zppGetErrorString(res), zppGetLastError(env->comm));
}

void trRunFree(trRun_t* run) {
  free(run->loss);
  free(run->time);
  free(run->busy);
  free(run->waited);
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
static zppResult_t trEval(const trArgs_t* a, trEnv_t* env, z3Trainer_t* t, zcComm_t zc,
                          double* loss) {
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
  run->waited = calloc(n, sizeof(double));
  run->compute = calloc(n, sizeof(double));
  run->evalStep = calloc(n + 1, sizeof(int));
  run->evalLoss = calloc(n + 1, sizeof(double));
  return run->loss && run->time && run->busy && run->waited && run->compute && run->evalStep &&
                 run->evalLoss
             ? 0
             : -1;
}

/* Everything at the end of a run, reduced over the ranks in one call. */
static zppResult_t trSummarize(trEnv_t* env, zcComm_t zc, trRun_t* run, const zppCommStats_t* st) {
  int n = run->nsteps;
  enum { F_BUSY, F_WAIT, F_COMP, F_BYTES };
  double sums[F_BYTES + 2 * zppNumOpKinds];
  double busy = 0, waited = 0, comp = 0;
  for (int i = 0; i < n; i++) {
    busy += run->busy[i];
    waited += run->waited[i];
    comp += run->compute[i];
  }
  sums[F_BUSY] = busy;
  sums[F_WAIT] = waited;
  sums[F_COMP] = comp;
  for (int k = 0; k < zppNumOpKinds; k++) {
    sums[F_BYTES + k] = (double)st->intraNodeBytes[k];
    sums[F_BYTES + zppNumOpKinds + k] = (double)st->interNodeBytes[k];
  }
  int nsum = F_BYTES + 2 * zppNumOpKinds;
  zppResult_t res = zcAllReduce(sums, sums, (size_t)nsum, zppFloat64, zppSum, zc, NULL);
  /* A step lasts as long as its slowest rank. */
  if (res == zppSuccess && n > 0)
    res = zcAllReduce(run->time, run->time, (size_t)n, zppFloat64, zppMax, zc, NULL);
  if (res != zppSuccess) return res;
  double per = n > 0 ? 1.0 / ((double)n * env->nranks) : 0;
  run->busyMean = sums[F_BUSY] * per;
  run->waitedMean = sums[F_WAIT] * per;
  run->computeMean = sums[F_COMP] * per;
  run->hiddenShare = sums[F_BUSY] > 0 ? (sums[F_BUSY] - sums[F_WAIT]) / sums[F_BUSY] : 0;
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

int trRunMode(const trArgs_t* a, trEnv_t* env, const zcOptions_t* opt, trRun_t* run) {
  memset(run, 0, sizeof *run);
  run->mode = opt->mode == zcModePlain ? "plain" : "zeropp";
  run->opt = *opt;
  if (trAllocRun(run, a->steps) != 0) {
    fprintf(stderr, "zpp-train: rank %d: out of memory\n", env->rank);
    return TR_EXIT_ERROR;
  }
  zcComm_t zc = NULL;
  z3Trainer_t* t = NULL;
  zppResult_t res = zcCommInit(&zc, env->comm, opt);
  if (res != zppSuccess) {
    trLibError(env, "creating the communication layer", res);
    return TR_EXIT_ERROR;
  }
  run->opt = *zcCommOptions(zc);
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
  cfg.overlap = a->overlap;
  cfg.prefetch = a->prefetch;
  cfg.seed = a->seed;
  cfg.evalCap = TR_EVAL_CHUNK;
  char err[256];
  res = z3Create(&t, &cfg, zc, env->rank, env->nranks, err, sizeof err);
  if (res != zppSuccess) {
    fprintf(stderr, "zpp-train: rank %d: %s\n", env->rank, err);
    zcCommDestroy(zc);
    return res == zppInvalidArgument ? TR_EXIT_USAGE : TR_EXIT_ERROR;
  }
  run->secondaryBytes = 0;
  if (env->rank == 0 && !a->quiet) trPrintHeader(a, env, run);

  int slice = a->batch / env->nranks;
  int* ctx = malloc((size_t)slice * (size_t)a->context * sizeof(int));
  int* tgt = malloc((size_t)slice * sizeof(int));
  int code = TR_EXIT_OK;
  if (ctx == NULL || tgt == NULL) {
    fprintf(stderr, "zpp-train: rank %d: out of memory\n", env->rank);
    code = TR_EXIT_ERROR;
    goto out;
  }
  zppCommResetStats(env->comm);
  for (int s = 0; s < a->steps; s++) {
    tdTrainBatch(&env->corpus, a->context, a->seed, s, env->rank * slice, slice, ctx, tgt);
    zcTimes_t before, after;
    zcCommTimes(zc, &before);
    double t0 = trNow();
    z3StepInfo_t info;
    res = z3Step(t, ctx, tgt, &info);
    double global = 0;
    if (res == zppSuccess) res = zcAllReduce(&info.lossSum, &global, 1, zppFloat64, zppSum, zc, NULL);
    if (res != zppSuccess) {
      trLibError(env, "a training step", res);
      code = TR_EXIT_ERROR;
      goto out;
    }
    run->time[s] = trNow() - t0;
    zcCommTimes(zc, &after);
    run->loss[s] = global / a->batch;
    run->busy[s] = after.busy - before.busy;
    run->waited[s] = after.waited - before.waited;
    run->compute[s] = info.compute;
    run->nsteps = s + 1;
    if (!isfinite(run->loss[s])) {
      if (env->rank == 0)
        fprintf(stderr, "zpp-train: %s: the loss is %g at step %d: training diverged\n", run->mode,
                run->loss[s], s + 1);
      code = TR_EXIT_ERROR;
      goto out;
    }
    if (env->rank == 0 && !a->quiet) trPrintStep(a, run, s);
    if (a->evalEvery > 0 && (s + 1) % a->evalEvery == 0 && s + 1 < a->steps) {
      if ((res = trEval(a, env, t, zc, &run->evalLoss[run->nevals])) != zppSuccess) {
        trLibError(env, "an evaluation", res);
        code = TR_EXIT_ERROR;
        goto out;
      }
      run->evalStep[run->nevals++] = s + 1;
    }
  }
  zppCommStats_t st;
  zppCommGetStats(env->comm, &st);
  run->secondaryBytes = z3SecondaryBytes(t);
  if ((res = trEval(a, env, t, zc, &run->evalLoss[run->nevals])) != zppSuccess) {
    trLibError(env, "the final evaluation", res);
    code = TR_EXIT_ERROR;
    goto out;
  }
  run->evalStep[run->nevals++] = a->steps;
  if ((res = trSummarize(env, zc, run, &st)) != zppSuccess) {
    trLibError(env, "summing up the run", res);
    code = TR_EXIT_ERROR;
    goto out;
  }
  if (a->sample > 0 && (res = trSample(a, env, t, run)) != zppSuccess) {
    trLibError(env, "gathering the weights for sampling", res);
    code = TR_EXIT_ERROR;
    goto out;
  }
out:
  free(ctx);
  free(tgt);
  if (code != TR_EXIT_OK) {
    /* Peers may be stuck in a collective this rank will never join: abort
     * (it fails their operations) instead of waiting in a destroy. */
    zppCommAbort(env->comm);
    env->comm = NULL;
    return code;
  }
  z3Destroy(t);
  zcCommDestroy(zc);
  return code;
}
