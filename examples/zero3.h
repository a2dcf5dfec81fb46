/*
 * ZeRO-3 for the example MLP, over the zero_comm layer.
 *
 * Every layer's parameters are one flat vector, padded with zeros to a
 * multiple of the rank count; rank r owns elements [r*S, (r+1)*S) of it
 * (S = padded / nranks): the fp32 master weights, Adam's m and v, the
 * gradient, and the copy of the weights in the communication type (bf16 or
 * fp32). Nothing else survives a step. Per step:
 *
 *   forward,  layer 0..3: gather the layer's weights (zcParamGatherForward),
 *                         compute; the buffer is reused two layers later;
 *   backward, layer 3..0: gather again (zcParamGatherBackward: hpZ keeps this
 *                         inside the node), compute the layer's full
 *                         gradient, and when a bucket of layers is complete,
 *                         reduce-scatter it (zcReduceScatterCoalesced, avg);
 *   step:                 Adam on the shard, new communication copy, and
 *                         zcParamInvalidate (the hpZ secondary is stale).
 *
 * Overlap: the eight gathers of a step are one sequence; the next ones
 * (--prefetch of them, each on its own stream into its own buffer) are
 * issued before the current layer computes; the reduce-scatters run behind
 * the backward computation, one stream per bucket, and each bucket's
 * optimizer step runs as soon as that bucket arrived.
 */
#ifndef ZPP_EXAMPLE_ZERO3_H_
#define ZPP_EXAMPLE_ZERO3_H_

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "zero_comm.h"

#define Z3_MAX_PREFETCH 7

typedef struct {
  mlpShape_t shape;
  int batch;          /* global batch: samples per step over all ranks */
  zppDataType_t type; /* communication type of weights and gradients: fp32 or bf16 */
  float lr, beta1, beta2, eps;
  size_t bucketBytes; /* gradients are reduce-scattered in buckets of at least this */
  int overlap;        /* 0: every collective is waited for right after it is issued */
  int prefetch; /* with overlap: gathers in flight ahead of the computing layer, 1..Z3_MAX_PREFETCH */
  uint64_t seed;
  int evalCap; /* most evaluation samples one rank computes at once */
} z3Config_t;

typedef struct z3Trainer z3Trainer_t;

typedef struct {
  double lossSum; /* this rank's sum of per-sample losses */
  double compute; /* seconds outside communication calls and waits */
} z3StepInfo_t;

/* Shards the initial weights (every rank builds the same full layers from
 * the seed and keeps its part). Writes a reason into err on failure. */
zppResult_t z3Create(z3Trainer_t** out, const z3Config_t* cfg, zcComm_t comm, int rank, int nranks,
                     char* err, size_t errlen);
void z3Destroy(z3Trainer_t* t);

/* One training step on this rank's slice (batch / nranks samples). */
zppResult_t z3Step(z3Trainer_t* t, const int* ctx, const int* tgt, z3StepInfo_t* info);

/* Forward only on n samples (at most evalCap): sum of their losses. */
zppResult_t z3Eval(z3Trainer_t* t, const int* ctx, const int* tgt, int n, double* lossSum);

/* Every layer's full weights as fp32 (forward gathers), for sampling text:
 * full[l] must hold mlpLayerParams(l) floats. */
zppResult_t z3GatherAll(z3Trainer_t* t, float* const* full);

/* The optimizer state, for a trainer that survives lost ranks (train_elastic.c).
 * The state vector: per layer, the fp32 master weights, Adam's m and v of its
 * parameters (z3StateLength floats; the same for any rank count). A rank's
 * pack: per layer, the master, m and v of its shard (z3PackLength floats for
 * nranks ranks, padding included). */
size_t z3StateLength(const mlpShape_t* s);
size_t z3PackLength(const mlpShape_t* s, int nranks);
/* This rank's pack. */
void z3StatePack(const z3Trainer_t* t, float* pack);
/* The part of the state that rank's pack (of nranks ranks) holds, written into state. */
void z3StateUnpack(const mlpShape_t* s, int rank, int nranks, const float* pack, float* state);
/* This rank's shard from a whole state vector, and Adam's step count: the trainer goes on as the one
 * that had that state (its weight copies and hpZ secondaries renewed). */
zppResult_t z3StateLoad(z3Trainer_t* t, const float* state, long adamStep);
long z3AdamStep(const z3Trainer_t* t);

/* Bytes of hpZ secondary partitions this rank holds, over all layers. */
size_t z3SecondaryBytes(const z3Trainer_t* t);
/* Bytes of the padded full model in the communication type. */
size_t z3ModelBytes(const z3Trainer_t* t);

/* Round to nearest even, NaN kept a NaN. */
uint16_t z3FloatToBf16(float f);
float z3Bf16ToFloat(uint16_t h);

#endif /* ZPP_EXAMPLE_ZERO3_H_ */
