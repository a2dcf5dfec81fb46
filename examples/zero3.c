/* ZeRO-3 over zero_comm for the example MLP: see zero3.h. */
#include "zero3.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define Z3_MAX_SLOTS (Z3_MAX_PREFETCH + 1)

typedef struct {
  size_t count;  /* parameters of the layer */
  size_t padded; /* count rounded up to a multiple of the rank count */
  size_t shard;  /* padded / nranks: this rank's part */
  float* master; /* shard: fp32 master weights */
  float* m;      /* shard: Adam's first moment */
  float* v;      /* shard: Adam's second moment */
  void* wshard;  /* shard in the communication type (== master for fp32) */
  void* gshard;  /* shard of the averaged gradient, communication type */
  float* gfull;  /* padded: this rank's full gradient, fp32 */
  void* gsend;   /* padded: the same in the communication type (== gfull for fp32) */
  zcParam_t param;
  zcGrad_t grad; /* gshard's error-feedback residuals (ZeRO++ with qgzEF) */
} z3Layer_t;

struct z3Trainer {
  z3Config_t cfg;
  zcComm_t comm;
  int rank, nranks, slice;
  size_t tsize;
  z3Layer_t layer[MLP_NLAYERS];
  int slots;                    /* prefetch + 1 */
  void* gathered[Z3_MAX_SLOTS]; /* gathered weights: the layer computing, those arriving */
  float* work;                  /* the gathered weights as fp32 (bf16 only) */
  zcStream_t gatherStream[Z3_MAX_SLOTS];
  zcStream_t rsStream[MLP_NLAYERS]; /* one per bucket: each bucket's optimizer step waits
                                     * for that bucket only */
  mlpActs_t acts;
  mlpActs_t evalActs;
  long adamStep;
};

static double z3Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint16_t z3FloatToBf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float z3Bf16ToFloat(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static void z3ToComm(const z3Trainer_t* t, const float* src, void* dst, size_t n) {
  if (t->cfg.type == zppFloat32) {
    if (dst != src) memcpy(dst, src, n * sizeof(float));
    return;
  }
  uint16_t* d = dst;
  for (size_t i = 0; i < n; i++) d[i] = z3FloatToBf16(src[i]);
}

static void z3FromComm(const z3Trainer_t* t, const void* src, float* dst, size_t n) {
  if (t->cfg.type == zppFloat32) {
    if (dst != src) memcpy(dst, src, n * sizeof(float));
    return;
  }
  const uint16_t* s = src;
  for (size_t i = 0; i < n; i++) dst[i] = z3Bf16ToFloat(s[i]);
}

static void z3Err(char* err, size_t len, const char* fmt, ...) {
  if (err == NULL || len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

void z3Destroy(z3Trainer_t* t) {
  if (t == NULL) return;
  for (int i = 0; i < Z3_MAX_SLOTS; i++) {
    zcStreamDestroy(t->gatherStream[i]);
    free(t->gathered[i]);
  }
  for (int i = 0; i < MLP_NLAYERS; i++) zcStreamDestroy(t->rsStream[i]);
  for (int l = 0; l < MLP_NLAYERS; l++) {
    z3Layer_t* L = &t->layer[l];
    zcParamDestroy(L->param);
    zcGradDestroy(L->grad);
    if (L->wshard != L->master) free(L->wshard);
    if (L->gsend != L->gfull) free(L->gsend);
    free(L->master);
    free(L->m);
    free(L->v);
    free(L->gshard);
    free(L->gfull);
  }
  free(t->work);
  mlpActsFree(&t->acts);
  mlpActsFree(&t->evalActs);
  free(t);
}

zppResult_t z3Create(z3Trainer_t** out, const z3Config_t* cfg, zcComm_t comm, int rank, int nranks,
                     char* err, size_t errlen) {
  if (cfg->type != zppFloat32 && cfg->type != zppBfloat16) {
    z3Err(err, errlen, "communication type must be fp32 or bf16");
    return zppInvalidArgument;
  }
  if (cfg->prefetch < 0 || cfg->prefetch > Z3_MAX_PREFETCH) {
    z3Err(err, errlen, "prefetch %d: from 0 to %d layers ahead", cfg->prefetch, Z3_MAX_PREFETCH);
    return zppInvalidArgument;
  }
  if (cfg->batch % nranks != 0) {
    z3Err(err, errlen, "batch %d does not divide by %d ranks: each rank takes an equal slice",
          cfg->batch, nranks);
    return zppInvalidArgument;
  }
  z3Trainer_t* t = calloc(1, sizeof *t);
  if (t == NULL) goto oom;
  t->cfg = *cfg;
  t->comm = comm;
  t->rank = rank;
  t->nranks = nranks;
  t->slice = cfg->batch / nranks;
  t->tsize = zppTypeSize(cfg->type);
  size_t maxPadded = 0;
  zppResult_t res;
  for (int l = 0; l < MLP_NLAYERS; l++) {
    z3Layer_t* L = &t->layer[l];
    L->count = mlpLayerParams(&cfg->shape, l);
    L->padded = (L->count + (size_t)nranks - 1) / (size_t)nranks * (size_t)nranks;
    L->shard = L->padded / (size_t)nranks;
    if (L->padded > maxPadded) maxPadded = L->padded;
    L->master = malloc(L->shard * sizeof(float));
    L->m = calloc(L->shard, sizeof(float));
    L->v = calloc(L->shard, sizeof(float));
    L->gshard = malloc(L->shard * t->tsize);
    L->gfull = calloc(L->padded, sizeof(float));
    L->wshard = cfg->type == zppFloat32 ? (void*)L->master : malloc(L->shard * t->tsize);
    L->gsend = cfg->type == zppFloat32 ? (void*)L->gfull : malloc(L->padded * t->tsize);
    if (!L->master || !L->m || !L->v || !L->gshard || !L->gfull || !L->wshard || !L->gsend) goto oom;
    /* Every rank draws the whole layer, so the model is the same for any
     * rank count; only this rank's part is kept. */
    float* full = calloc(L->padded, sizeof(float));
    if (full == NULL) goto oom;
    mlpInitLayer(&cfg->shape, l, cfg->seed, full);
    memcpy(L->master, full + (size_t)rank * L->shard, L->shard * sizeof(float));
    free(full);
    z3ToComm(t, L->master, L->wshard, L->shard);
    res = zcParamCreate(comm, L->shard, cfg->type, &L->param);
    if (res == zppSuccess) res = zcGradCreate(comm, L->shard, cfg->type, &L->grad);
    if (res != zppSuccess) {
      z3Err(err, errlen, "creating the parameter of layer %s: %s", mlpLayerName(l),
            zppGetErrorString(res));
      z3Destroy(t);
      return res;
    }
  }
  /* Without overlap nothing is in flight while a layer computes: one slot. */
  t->slots = cfg->overlap ? cfg->prefetch + 1 : 1;
  for (int i = 0; i < t->slots; i++)
    if ((t->gathered[i] = malloc(maxPadded * t->tsize)) == NULL) goto oom;
  if (cfg->type != zppFloat32 && (t->work = malloc(maxPadded * sizeof(float))) == NULL) goto oom;
  if (mlpActsAlloc(&t->acts, &cfg->shape, t->slice) != 0) goto oom;
  res = zppSuccess;
  for (int i = 0; i < t->slots && res == zppSuccess; i++)
    res = zcStreamCreate(comm, &t->gatherStream[i]);
  for (int i = 0; i < MLP_NLAYERS && res == zppSuccess; i++)
    res = zcStreamCreate(comm, &t->rsStream[i]);
  if (res != zppSuccess) {
    z3Err(err, errlen, "creating streams: %s", zppGetErrorString(res));
    z3Destroy(t);
    return res;
  }
  *out = t;
  return zppSuccess;
oom:
  z3Err(err, errlen, "out of memory for the model's shards and buffers");
  z3Destroy(t);
  return zppSystemError;
}

/* ---- the state, for the elastic trainer -------------------------------------------------- */

static size_t z3ShardOf(const mlpShape_t* s, int l, int nranks) {
  return (mlpLayerParams(s, l) + (size_t)nranks - 1) / (size_t)nranks;
}

size_t z3StateLength(const mlpShape_t* s) {
  size_t n = 0;
  for (int l = 0; l < MLP_NLAYERS; l++) n += 3 * mlpLayerParams(s, l);
  return n;
}

size_t z3PackLength(const mlpShape_t* s, int nranks) {
  size_t n = 0;
  for (int l = 0; l < MLP_NLAYERS; l++) n += 3 * z3ShardOf(s, l, nranks);
  return n;
}

void z3StatePack(const z3Trainer_t* t, float* pack) {
  for (int l = 0; l < MLP_NLAYERS; l++) {
    const z3Layer_t* L = &t->layer[l];
    const float* parts[3] = {L->master, L->m, L->v};
    for (int k = 0; k < 3; k++, pack += L->shard) memcpy(pack, parts[k], L->shard * sizeof(float));
  }
}

void z3StateUnpack(const mlpShape_t* s, int rank, int nranks, const float* pack, float* state) {
  for (int l = 0; l < MLP_NLAYERS; l++) {
    size_t count = mlpLayerParams(s, l), shard = z3ShardOf(s, l, nranks);
    size_t lo = (size_t)rank * shard, n = lo >= count ? 0 : (count - lo < shard ? count - lo : shard);
    for (int k = 0; k < 3; k++, pack += shard, state += count)
      memcpy(state + lo, pack, n * sizeof(float));
  }
}

zppResult_t z3StateLoad(z3Trainer_t* t, const float* state, long adamStep) {
  for (int l = 0; l < MLP_NLAYERS; l++) {
    z3Layer_t* L = &t->layer[l];
    size_t lo = (size_t)t->rank * L->shard, n = lo >= L->count ? 0 : L->count - lo;
    if (n > L->shard) n = L->shard;
    float* parts[3] = {L->master, L->m, L->v};
    for (int k = 0; k < 3; k++, state += L->count) {
      memset(parts[k], 0, L->shard * sizeof(float)); /* the padding stays 0 */
      memcpy(parts[k], state + lo, n * sizeof(float));
    }
    z3ToComm(t, L->master, L->wshard, L->shard);
    zppResult_t res = zcParamInvalidate(L->param);
    if (res != zppSuccess) return res;
  }
  t->adamStep = adamStep;
  return zppSuccess;
}

long z3AdamStep(const z3Trainer_t* t) { return t->adamStep; }

size_t z3SecondaryBytes(const z3Trainer_t* t) {
  size_t b = 0;
  for (int l = 0; l < MLP_NLAYERS; l++) b += zcParamSecondaryBytes(t->layer[l].param);
  return b;
}

size_t z3ModelBytes(const z3Trainer_t* t) {
  size_t b = 0;
  for (int l = 0; l < MLP_NLAYERS; l++) b += t->layer[l].padded * t->tsize;
  return b;
}

/* ---- the gather sequence ------------------------------------------------ */

/* Use k of a step: k < 4 the forward of layer k, then the backward of
 * layers 3..0. Evaluation uses the first four only. */
static void z3Use(int k, int* layer, int* backward) {
  *backward = k >= MLP_NLAYERS;
  *layer = *backward ? 2 * MLP_NLAYERS - 1 - k : k;
}

static zppResult_t z3IssueGather(z3Trainer_t* t, int k, int slot) {
  int layer, backward;
  z3Use(k, &layer, &backward);
  z3Layer_t* L = &t->layer[layer];
  return backward ? zcParamGatherBackward(L->param, L->wshard, t->gathered[slot], t->gatherStream[slot])
                  : zcParamGatherForward(L->param, L->wshard, t->gathered[slot], t->gatherStream[slot]);
}

/* The gathered weights of a slot, as fp32 for the kernels. */
static const float* z3Weights(z3Trainer_t* t, int slot, int layer) {
  if (t->cfg.type == zppFloat32) return t->gathered[slot];
  z3FromComm(t, t->gathered[slot], t->work, t->layer[layer].count);
  return t->work;
}

/* Runs uses [0, nuse): the gathers of uses k+1 .. k+prefetch are in flight
 * while use k computes (each into its own slot), or, without overlap, each
 * gather is waited for right after it is issued. zpp runs them one after
 * the other in issue order, so prefetching deeper than one layer only
 * helps when a layer's compute is shorter than the next layer's gather:
 * the link keeps busy with the layer after. */
typedef void (*z3ComputeFn)(z3Trainer_t* t, int k, int layer, const float* w, void* arg);
typedef zppResult_t (*z3AfterFn)(z3Trainer_t* t, int k, int layer, void* arg);

static zppResult_t z3RunUses(z3Trainer_t* t, int nuse, z3ComputeFn compute, z3AfterFn after, void* arg,
                             double* computeTime) {
  zppResult_t res = zppSuccess;
  int ahead = t->slots - 1, issued = 0;
  for (int k = 0; k < nuse; k++) {
    int slot = k % t->slots, layer, backward;
    z3Use(k, &layer, &backward);
    /* Slot (k + ahead) % slots last held use k-1, which is done. */
    for (; issued < nuse && issued <= k + ahead; issued++)
      if ((res = z3IssueGather(t, issued, issued % t->slots)) != zppSuccess) return res;
    if ((res = zcStreamSynchronize(t->gatherStream[slot])) != zppSuccess) return res;
    double t0 = z3Now();
    compute(t, k, layer, z3Weights(t, slot, layer), arg);
    if (computeTime) *computeTime += z3Now() - t0;
    if (after && (res = after(t, k, layer, arg)) != zppSuccess) return res;
  }
  return res;
}

/* ---- training ------------------------------------------------------------ */

typedef struct {
  mlpActs_t* acts;
  double lossSum;
  float scale;
  /* the bucket being filled, in backward order */
  int n;
  size_t bytes;
  const void* send[MLP_NLAYERS];
  void* recv[MLP_NLAYERS];
  size_t counts[MLP_NLAYERS];
  zcGrad_t grads[MLP_NLAYERS];
  /* buckets issued: bucketOf[layer], and how many */
  int nbuckets;
  int bucketOf[MLP_NLAYERS];
} z3StepCtx_t;

static void z3ComputeTrain(z3Trainer_t* t, int k, int layer, const float* w, void* arg) {
  z3StepCtx_t* c = arg;
  if (k < MLP_NLAYERS) {
    mlpForward(&t->cfg.shape, layer, w, c->acts);
    if (layer == MLP_OUT) c->lossSum = mlpLoss(&t->cfg.shape, c->acts);
    return;
  }
  z3Layer_t* L = &t->layer[layer];
  mlpBackward(&t->cfg.shape, layer, w, c->acts, c->scale, L->gfull);
  /* gfull's padding stays 0 from allocation: the padded elements' gradient
   * is exactly 0 on every rank, so their Adam update is 0 too. */
  z3ToComm(t, L->gfull, L->gsend, L->padded);
}

static zppResult_t z3AfterTrain(z3Trainer_t* t, int k, int layer, void* arg) {
  z3StepCtx_t* c = arg;
  if (k < MLP_NLAYERS) return zppSuccess;
  z3Layer_t* L = &t->layer[layer];
  c->bucketOf[layer] = c->nbuckets;
  c->send[c->n] = L->gsend;
  c->recv[c->n] = L->gshard;
  c->counts[c->n] = L->shard;
  c->grads[c->n] = L->grad;
  c->n++;
  c->bytes += L->padded * t->tsize;
  if (c->bytes < t->cfg.bucketBytes && layer != 0) return zppSuccess;
  /* avg: the mean over ranks of the per-rank mean over their slices, i.e.
   * the gradient of the mean loss over the global batch. */
  zcStream_t st = t->rsStream[c->nbuckets++];
  zppResult_t res = zcReduceScatterCoalesced(c->n, c->send, c->recv, c->counts, t->cfg.type, zppAvg,
                                             c->grads, t->comm, st);
  c->n = 0;
  c->bytes = 0;
  if (res == zppSuccess && !t->cfg.overlap) res = zcStreamSynchronize(st);
  return res;
}

static void z3Adam(z3Trainer_t* t, z3Layer_t* L) {
  const z3Config_t* c = &t->cfg;
  float bc1 = (float)(1.0 - pow((double)c->beta1, (double)t->adamStep));
  float bc2 = (float)(1.0 - pow((double)c->beta2, (double)t->adamStep));
  float* g = t->cfg.type == zppFloat32 ? (float*)L->gshard : L->gfull; /* gfull is free now */
  z3FromComm(t, L->gshard, g, L->shard);
  for (size_t i = 0; i < L->shard; i++) {
    L->m[i] = c->beta1 * L->m[i] + (1.0f - c->beta1) * g[i];
    L->v[i] = c->beta2 * L->v[i] + (1.0f - c->beta2) * g[i] * g[i];
    float mh = L->m[i] / bc1, vh = L->v[i] / bc2;
    L->master[i] -= c->lr * mh / (sqrtf(vh) + c->eps);
  }
  /* gfull was borrowed as scratch: its padding must be 0 again. */
  if (g == L->gfull) memset(L->gfull, 0, L->padded * sizeof(float));
  z3ToComm(t, L->master, L->wshard, L->shard);
}

zppResult_t z3Step(z3Trainer_t* t, const int* ctx, const int* tgt, z3StepInfo_t* info) {
  z3StepCtx_t c;
  memset(&c, 0, sizeof c);
  c.acts = &t->acts;
  c.acts->n = t->slice;
  c.acts->ctx = ctx;
  c.acts->tgt = tgt;
  c.scale = 1.0f / (float)t->slice;
  double compute = 0;
  zppResult_t res = z3RunUses(t, 2 * MLP_NLAYERS, z3ComputeTrain, z3AfterTrain, &c, &compute);
  if (res != zppSuccess) return res;
  t->adamStep++;
  /* Bucket by bucket in the order they were issued (output layer first):
   * the optimizer step of a finished bucket runs while the later ones are
   * still being reduce-scattered. */
  for (int b = 0; b < c.nbuckets; b++) {
    if ((res = zcStreamSynchronize(t->rsStream[b])) != zppSuccess) return res;
    double t0 = z3Now();
    for (int l = MLP_NLAYERS - 1; l >= 0; l--) {
      if (c.bucketOf[l] != b) continue;
      z3Adam(t, &t->layer[l]);
      /* Every rank wrote its shard: every rank's hpZ secondary is stale. */
      if ((res = zcParamInvalidate(t->layer[l].param)) != zppSuccess) return res;
    }
    compute += z3Now() - t0;
  }
  if (info) {
    info->lossSum = c.lossSum;
    info->compute = compute;
  }
  return zppSuccess;
}

/* ---- evaluation and full weights ----------------------------------------- */

static void z3ComputeEval(z3Trainer_t* t, int k, int layer, const float* w, void* arg) {
  z3StepCtx_t* c = arg;
  mlpForward(&t->cfg.shape, layer, w, c->acts);
  if (layer == MLP_OUT) c->lossSum = mlpLoss(&t->cfg.shape, c->acts);
}

zppResult_t z3Eval(z3Trainer_t* t, const int* ctx, const int* tgt, int n, double* lossSum) {
  if (n > t->cfg.evalCap) return zppInvalidArgument;
  if (t->evalActs.cap == 0 && mlpActsAlloc(&t->evalActs, &t->cfg.shape, t->cfg.evalCap) != 0)
    return zppSystemError;
  z3StepCtx_t c;
  memset(&c, 0, sizeof c);
  c.acts = &t->evalActs;
  c.acts->n = n;
  c.acts->ctx = ctx;
  c.acts->tgt = tgt;
  zppResult_t res = z3RunUses(t, MLP_NLAYERS, z3ComputeEval, NULL, &c, NULL);
  if (res == zppSuccess) *lossSum = c.lossSum;
  return res;
}

zppResult_t z3GatherAll(z3Trainer_t* t, float* const* full) {
  for (int l = 0; l < MLP_NLAYERS; l++) {
    z3Layer_t* L = &t->layer[l];
    zppResult_t res = zcParamGatherForward(L->param, L->wshard, t->gathered[0], NULL);
    if (res != zppSuccess) return res;
    z3FromComm(t, t->gathered[0], full[l], L->count);
  }
  return zppSuccess;
}
