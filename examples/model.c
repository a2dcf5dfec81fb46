/* The character-level MLP: see model.h. */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The hot loops are built twice, for AVX2 and for any x86-64, and the loader
 * picks one (GCC's ifunc). -ffp-contract=off (top-level CMakeLists) keeps
 * both free of fused multiply-adds, and nothing here reassociates a sum, so
 * the two clones give identical bits: the loss curve does not depend on the
 * machine's vector width. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define MLP_HOT __attribute__((target_clones("avx2", "default")))
#else
#define MLP_HOT
#endif

/* Rows of W kept hot in cache while every sample of the slice uses them. */
#define MLP_ROW_BLOCK 32

static const char* const mlpNames[MLP_NLAYERS] = {"embedding", "hidden1", "hidden2", "output"};

const char* mlpLayerName(int layer) {
  return layer >= 0 && layer < MLP_NLAYERS ? mlpNames[layer] : "?";
}

/* in and out of a fully connected layer (the embedding has no such shape). */
static void mlpDims(const mlpShape_t* s, int layer, int* in, int* out) {
  switch (layer) {
    case MLP_FC1:
      *in = s->context * s->embed;
      *out = s->hidden;
      break;
    case MLP_FC2:
      *in = s->hidden;
      *out = s->hidden;
      break;
    case MLP_OUT:
      *in = s->hidden;
      *out = s->vocab;
      break;
    default:
      *in = s->vocab;
      *out = s->embed;
      break; /* the table: V rows of E */
  }
}

size_t mlpLayerParams(const mlpShape_t* s, int layer) {
  int in, out;
  mlpDims(s, layer, &in, &out);
  return (size_t)in * (size_t)out + (layer == MLP_EMB ? 0 : (size_t)out);
}

size_t mlpTotalParams(const mlpShape_t* s) {
  size_t n = 0;
  for (int l = 0; l < MLP_NLAYERS; l++) n += mlpLayerParams(s, l);
  return n;
}

uint64_t mlpRand64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in (0, 1]: never 0, so that log() below is finite. */
static double mlpUniform(uint64_t* st) {
  return ((double)(mlpRand64(st) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

void mlpInitLayer(const mlpShape_t* s, int layer, uint64_t seed, float* params) {
  int in, out;
  mlpDims(s, layer, &in, &out);
  uint64_t st = seed * 0x100000001b3ull + (uint64_t)layer * 0x9e3779b97f4a7c15ull;
  /* Embeddings of unit variance; weights of variance 1/fan_in so that tanh
   * starts in its linear part; the output layer 10x smaller so that the
   * first loss is close to log(V), the loss of a uniform guess. */
  double sd = layer == MLP_EMB ? 1.0 : 1.0 / sqrt((double)in);
  if (layer == MLP_OUT) sd *= 0.1;
  size_t nw = (size_t)in * (size_t)out;
  /* Draw i is element (o, k) = (i / in, i % in) of [out][in]; [in][out]
   * stores it at k * out + o. The table is [V][E] either way. */
  int transpose = s->weightInOut && layer != MLP_EMB;
  for (size_t i = 0; i < nw; i += 2) {
    double r = sqrt(-2.0 * log(mlpUniform(&st))), t = 6.283185307179586 * mlpUniform(&st);
    for (size_t j = i; j < i + 2 && j < nw; j++) {
      size_t at = transpose ? (j % (size_t)in) * (size_t)out + j / (size_t)in : j;
      params[at] = (float)(sd * r * (j == i ? cos(t) : sin(t)));
    }
  }
  if (layer != MLP_EMB) memset(params + nw, 0, (size_t)out * sizeof(float));
}

int mlpActsAlloc(mlpActs_t* a, const mlpShape_t* s, int cap) {
  memset(a, 0, sizeof *a);
  size_t ce = (size_t)s->context * s->embed, h = (size_t)s->hidden, v = (size_t)s->vocab;
  size_t wide = ce > h ? ce : h;
  if (v > wide) wide = v;
  size_t n = cap > 0 ? (size_t)cap : 1;
  a->cap = cap;
  a->x0 = malloc(n * ce * sizeof(float));
  a->h1 = malloc(n * h * sizeof(float));
  a->h2 = malloc(n * h * sizeof(float));
  a->p = malloc(n * v * sizeof(float));
  a->loss = malloc(n * sizeof(float));
  a->d_out = malloc(n * wide * sizeof(float));
  a->d_in = malloc(n * wide * sizeof(float));
  if (!a->x0 || !a->h1 || !a->h2 || !a->p || !a->loss || !a->d_out || !a->d_in) {
    mlpActsFree(a);
    return -1;
  }
  return 0;
}

void mlpActsFree(mlpActs_t* a) {
  free(a->x0);
  free(a->h1);
  free(a->h2);
  free(a->p);
  free(a->loss);
  free(a->d_out);
  free(a->d_in);
  memset(a, 0, sizeof *a);
}

/* ---- kernels ---------------------------------------------------------- */

static inline void mlpAxpy(float alpha, const float* restrict x, float* restrict y, int n) {
  for (int o = 0; o < n; o++) y[o] += alpha * x[o];
}

/* Eight partial sums in a fixed pattern, combined in a fixed order: a dot
 * product that vectorizes without -ffast-math and gives the same bits on
 * every call with the same inputs. */
static inline float mlpDot(const float* restrict a, const float* restrict b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int o = 0;
  for (; o + 8 <= n; o += 8)
    for (int k = 0; k < 8; k++) acc[k] += a[o + k] * b[o + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; o < n; o++) s += a[o] * b[o];
  return s;
}

/* W is stored [out][in] by default, as torch.nn.Linear keeps it: a
 * quantization block of a gradient then runs along one output's inputs,
 * whose gradients have one scale (d_out[o] times activations of one kind).
 * Stored [in][out] (--weight-layout in-out, the trainer's first layout), a
 * block runs across 64 outputs of very different scales (the frequent and
 * the rare characters of the output layer), which unrotated int4 blocks
 * flush to zero. Both compute the same model; only the order of the sums
 * inside a sample's dot products differs. */

/* Y[b][o] = bias[o] + X[b] . W[o]: a sample's output depends on that sample
 * and W only, whatever else is in the slice. */
MLP_HOT static void mlpLinear(const float* X, int n, int in, const float* W, const float* bias, int out,
                              float* Y) {
  for (int o0 = 0; o0 < out; o0 += MLP_ROW_BLOCK) {
    int o1 = o0 + MLP_ROW_BLOCK < out ? o0 + MLP_ROW_BLOCK : out;
    for (int b = 0; b < n; b++) {
      const float* x = X + (size_t)b * in;
      float* y = Y + (size_t)b * out;
      for (int o = o0; o < o1; o++) y[o] = bias[o] + mlpDot(x, W + (size_t)o * in, in);
    }
  }
}

/* dX[b] = sum_o dY[b][o] W[o], the sum over o in increasing order. */
MLP_HOT static void mlpLinearBackData(const float* dY, int n, int in, const float* W, int out,
                                      float* dX) {
  memset(dX, 0, (size_t)n * in * sizeof(float));
  for (int o0 = 0; o0 < out; o0 += MLP_ROW_BLOCK) {
    int o1 = o0 + MLP_ROW_BLOCK < out ? o0 + MLP_ROW_BLOCK : out;
    for (int b = 0; b < n; b++)
      for (int o = o0; o < o1; o++)
        mlpAxpy(dY[(size_t)b * out + o], W + (size_t)o * in, dX + (size_t)b * in, in);
  }
}

/* dW[o] = sum_b dY[b][o] X[b] and db = sum_b dY[b], samples in order: the
 * one place where the split of the batch over ranks changes the rounding. */
MLP_HOT static void mlpLinearBackWeights(const float* X, const float* dY, int n, int in, int out,
                                         float* dW, float* db) {
  memset(dW, 0, (size_t)in * out * sizeof(float));
  for (int o = 0; o < out; o++) {
    float* row = dW + (size_t)o * in;
    for (int b = 0; b < n; b++) mlpAxpy(dY[(size_t)b * out + o], X + (size_t)b * in, row, in);
  }
  memset(db, 0, (size_t)out * sizeof(float));
  for (int b = 0; b < n; b++) mlpAxpy(1.0f, dY + (size_t)b * out, db, out);
}

/* The same three on W stored [in][out]. */

/* Y[b] = bias + sum_i X[b][i] W[i], the sum over i in increasing order for
 * every element whatever the blocking. */
MLP_HOT static void mlpLinearIO(const float* X, int n, int in, const float* W, const float* bias,
                                int out, float* Y) {
  for (int b = 0; b < n; b++) memcpy(Y + (size_t)b * out, bias, (size_t)out * sizeof(float));
  for (int i0 = 0; i0 < in; i0 += MLP_ROW_BLOCK) {
    int i1 = i0 + MLP_ROW_BLOCK < in ? i0 + MLP_ROW_BLOCK : in;
    for (int b = 0; b < n; b++) {
      const float* x = X + (size_t)b * in;
      float* y = Y + (size_t)b * out;
      for (int i = i0; i < i1; i++) mlpAxpy(x[i], W + (size_t)i * out, y, out);
    }
  }
}

/* dX[b][i] = dY[b] . W[i]. */
MLP_HOT static void mlpLinearBackDataIO(const float* dY, int n, int in, const float* W, int out,
                                        float* dX) {
  for (int i0 = 0; i0 < in; i0 += MLP_ROW_BLOCK) {
    int i1 = i0 + MLP_ROW_BLOCK < in ? i0 + MLP_ROW_BLOCK : in;
    for (int b = 0; b < n; b++)
      for (int i = i0; i < i1; i++)
        dX[(size_t)b * in + i] = mlpDot(dY + (size_t)b * out, W + (size_t)i * out, out);
  }
}

/* dW[i] = sum_b X[b][i] dY[b] and db = sum_b dY[b], samples in order (the
 * same order per element as [out][in]). */
MLP_HOT static void mlpLinearBackWeightsIO(const float* X, const float* dY, int n, int in, int out,
                                           float* dW, float* db) {
  memset(dW, 0, (size_t)in * out * sizeof(float));
  for (int i = 0; i < in; i++) {
    float* row = dW + (size_t)i * out;
    for (int b = 0; b < n; b++) mlpAxpy(X[(size_t)b * in + i], dY + (size_t)b * out, row, out);
  }
  memset(db, 0, (size_t)out * sizeof(float));
  for (int b = 0; b < n; b++) mlpAxpy(1.0f, dY + (size_t)b * out, db, out);
}

/* The layer's weights in the shape's layout. */
static void mlpFc(const mlpShape_t* s, const float* X, int n, int in, const float* W, const float* bias,
                  int out, float* Y) {
  if (s->weightInOut)
    mlpLinearIO(X, n, in, W, bias, out, Y);
  else
    mlpLinear(X, n, in, W, bias, out, Y);
}

static void mlpFcBackData(const mlpShape_t* s, const float* dY, int n, int in, const float* W, int out,
                          float* dX) {
  if (s->weightInOut)
    mlpLinearBackDataIO(dY, n, in, W, out, dX);
  else
    mlpLinearBackData(dY, n, in, W, out, dX);
}

static void mlpFcBackWeights(const mlpShape_t* s, const float* X, const float* dY, int n, int in,
                             int out, float* dW, float* db) {
  if (s->weightInOut)
    mlpLinearBackWeightsIO(X, dY, n, in, out, dW, db);
  else
    mlpLinearBackWeights(X, dY, n, in, out, dW, db);
}

static void mlpTanh(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i]);
}

/* ---- layers ------------------------------------------------------------- */

void mlpForward(const mlpShape_t* s, int layer, const float* params, mlpActs_t* a) {
  int in, out;
  mlpDims(s, layer, &in, &out);
  const float* bias = params + (size_t)in * out;
  int E = s->embed, C = s->context, V = s->vocab, H = s->hidden;
  switch (layer) {
    case MLP_EMB:
      for (int b = 0; b < a->n; b++)
        for (int c = 0; c < C; c++)
          memcpy(a->x0 + ((size_t)b * C + c) * E, params + (size_t)a->ctx[b * C + c] * E,
                 (size_t)E * sizeof(float));
      break;
    case MLP_FC1:
      mlpFc(s, a->x0, a->n, in, params, bias, out, a->h1);
      mlpTanh(a->h1, (size_t)a->n * H);
      break;
    case MLP_FC2:
      mlpFc(s, a->h1, a->n, in, params, bias, out, a->h2);
      mlpTanh(a->h2, (size_t)a->n * H);
      break;
    case MLP_OUT:
      mlpFc(s, a->h2, a->n, in, params, bias, out, a->p);
      /* Softmax with its log-sum-exp loss, per sample. */
      for (int b = 0; b < a->n; b++) {
        float* z = a->p + (size_t)b * V;
        float mx = z[0];
        for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        float zt = z[a->tgt[b]] - mx, sum = 0.0f;
        for (int v = 0; v < V; v++) {
          z[v] = expf(z[v] - mx);
          sum += z[v];
        }
        for (int v = 0; v < V; v++) z[v] /= sum;
        a->loss[b] = logf(sum) - zt;
      }
      break;
  }
}

double mlpLoss(const mlpShape_t* s, const mlpActs_t* a) {
  double sum = 0.0;
  for (int b = 0; b < a->n; b++) sum += a->loss[b];
  return sum;
}

static void mlpSwapDeltas(mlpActs_t* a) {
  float* t = a->d_out;
  a->d_out = a->d_in;
  a->d_in = t;
}

void mlpBackward(const mlpShape_t* s, int layer, const float* params, mlpActs_t* a, float scale,
                 float* grad) {
  int in, out;
  mlpDims(s, layer, &in, &out);
  int n = a->n, E = s->embed, C = s->context, V = s->vocab, H = s->hidden;
  float* gw = grad;
  float* gb = grad + (size_t)in * out;
  switch (layer) {
    case MLP_OUT:
      /* d loss_b / d logits = p - onehot, times the batch's 1/B. */
      for (int b = 0; b < n; b++) {
        const float* p = a->p + (size_t)b * V;
        float* d = a->d_out + (size_t)b * V;
        for (int v = 0; v < V; v++) d[v] = (p[v] - (v == a->tgt[b] ? 1.0f : 0.0f)) * scale;
      }
      mlpFcBackWeights(s, a->h2, a->d_out, n, in, out, gw, gb);
      mlpFcBackData(s, a->d_out, n, in, params, out, a->d_in);
      mlpSwapDeltas(a);
      break;
    case MLP_FC2:
    case MLP_FC1: {
      const float* h = layer == MLP_FC2 ? a->h2 : a->h1;
      const float* x = layer == MLP_FC2 ? a->h1 : a->x0;
      for (size_t i = 0; i < (size_t)n * H; i++) a->d_out[i] *= 1.0f - h[i] * h[i];
      mlpFcBackWeights(s, x, a->d_out, n, in, out, gw, gb);
      mlpFcBackData(s, a->d_out, n, in, params, out, a->d_in);
      mlpSwapDeltas(a);
      break;
    }
    case MLP_EMB:
      /* Rows of characters that never occur stay exactly 0. */
      memset(grad, 0, (size_t)V * E * sizeof(float));
      for (int b = 0; b < n; b++)
        for (int c = 0; c < C; c++)
          mlpAxpy(1.0f, a->d_out + ((size_t)b * C + c) * E, grad + (size_t)a->ctx[b * C + c] * E, E);
      break;
  }
}
