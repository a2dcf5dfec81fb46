/*
 * The model of the example trainer: a character-level language model, an MLP
 * over a window of embedded characters (Bengio et al. 2003, the "makemore"
 * MLP):
 *
 *   x0 = concat(emb[c_1], ..., emb[c_C])        C * E
 *   h1 = tanh(x0 W1 + b1)                       H
 *   h2 = tanh(h1 W2 + b2)                       H
 *   p  = softmax(h2 W3 + b3)                    V, loss = -log p[next char]
 *
 * Four layers, each one flat parameter vector, which is the unit ZeRO-3
 * shards and gathers: the embedding table [V][E]; for the others the
 * weights [out][in] (as torch.nn.Linear keeps them, the default) or [in][out]
 * (weightInOut; the same model, but it matters for the quantization blocks of
 * qgZ: see model.c) then the bias [out]. This file
 * knows nothing of communication: it computes one layer forward or
 * backward on full weights.
 *
 * Determinism: every per-sample quantity (activations, deltas) is computed
 * from that sample and the weights alone, in a fixed order, so it is bit for
 * bit the same whichever rank and whichever batch slice computes it. Only the
 * sums over samples (the weight gradients) depend on how the batch is split.
 */
#ifndef ZPP_EXAMPLE_MODEL_H_
#define ZPP_EXAMPLE_MODEL_H_

#include <stddef.h>
#include <stdint.h>

enum { MLP_EMB = 0, MLP_FC1 = 1, MLP_FC2 = 2, MLP_OUT = 3, MLP_NLAYERS = 4 };

typedef struct {
  int vocab;       /* V: distinct characters of the corpus */
  int context;     /* C: characters of context */
  int embed;       /* E: embedding width */
  int hidden;      /* H: width of both hidden layers */
  int weightInOut; /* 1: weights stored [in][out]; 0: [out][in] (the default) */
} mlpShape_t;

/* Activations of one batch slice, kept from forward to backward. */
typedef struct {
  int cap;        /* samples the buffers hold */
  int n;          /* samples of the current slice */
  const int* ctx; /* n * C character ids */
  const int* tgt; /* n targets */
  float* x0;      /* n * C * E */
  float* h1;      /* n * H */
  float* h2;      /* n * H */
  float* p;       /* n * V: probabilities after the forward of MLP_OUT */
  float* loss;    /* n: -log p[target] per sample */
  float* d_out;   /* n * max(H, C*E): delta flowing backward (output side) */
  float* d_in;    /* n * max(H, C*E): delta flowing backward (input side) */
} mlpActs_t;

const char* mlpLayerName(int layer);
/* Parameters of a layer: weights then bias. */
size_t mlpLayerParams(const mlpShape_t* s, int layer);
size_t mlpTotalParams(const mlpShape_t* s);

/* Full initial parameters of one layer, the same for any rank count: a
 * stream of normal numbers seeded by (seed, layer), drawn in [out][in] order
 * and stored in the shape's layout, so both layouts start from one model. */
void mlpInitLayer(const mlpShape_t* s, int layer, uint64_t seed, float* params);

int mlpActsAlloc(mlpActs_t* a, const mlpShape_t* s, int cap);
void mlpActsFree(mlpActs_t* a);

/* Forward of one layer on a slice already attached to acts (ctx, tgt, n).
 * MLP_OUT also computes the softmax; mlpLoss then sums -log p[target]. */
void mlpForward(const mlpShape_t* s, int layer, const float* params, mlpActs_t* a);
/* Sum over the slice of the per-sample losses, in double (exact enough that
 * its rounding never matters next to the float computation it reports). */
double mlpLoss(const mlpShape_t* s, const mlpActs_t* a);

/* Backward of one layer: grad (mlpLayerParams floats, overwritten) receives
 * the sum over the slice of d(loss_b)/d(params) * scale, and the delta for
 * the layer below is left in acts. Call in order OUT, FC2, FC1, EMB. */
void mlpBackward(const mlpShape_t* s, int layer, const float* params, mlpActs_t* a, float scale,
                 float* grad);

/* splitmix64: the one generator of the example (init, batches). */
uint64_t mlpRand64(uint64_t* state);

#endif /* ZPP_EXAMPLE_MODEL_H_ */
