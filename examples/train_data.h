/*
 * The example trainer's data: a text file read as bytes, its distinct bytes
 * as the vocabulary, the first 90% for training and the rest held out.
 * Batches are drawn from (seed, step) alone, so every rank draws the same
 * global batch and takes its own slice, and a run on any number of ranks
 * sees the same samples.
 */
#ifndef ZPP_EXAMPLE_TRAIN_DATA_H_
#define ZPP_EXAMPLE_TRAIN_DATA_H_

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int vocab;                /* distinct bytes */
  unsigned char chars[256]; /* id -> byte, in byte order */
  int id[256];              /* byte -> id, -1 if absent */
  int* tokens;              /* the file as ids */
  size_t n;                 /* tokens */
  size_t ntrain;            /* tokens [0, ntrain) train, the rest held out */
} tdCorpus_t;

/* 0, or -1 with a reason in err. The file must hold at least minTokens
 * bytes in each of the two parts. */
int tdLoad(const char* path, size_t minTokens, tdCorpus_t* c, char* err, size_t errlen);
void tdFree(tdCorpus_t* c);

/* Samples [first, first + count) of the global training batch of step
 * `step`: ctx gets count * context ids, tgt count ids. */
void tdTrainBatch(const tdCorpus_t* c, int context, uint64_t seed, long step, int first, int count,
                  int* ctx, int* tgt);

/* Samples [first, first + count) of the fixed held-out set of total
 * windows, spread evenly over the held-out part. */
void tdEvalBatch(const tdCorpus_t* c, int context, int total, int first, int count, int* ctx, int* tgt);

#endif /* ZPP_EXAMPLE_TRAIN_DATA_H_ */
