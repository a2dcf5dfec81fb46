/*
 * zpp-train: a ZeRO-3 trainer of a character-level language model on zpp.
 * Files: train_main.c (arguments, how the ranks come to be), train_run.c
 * (one training run in one mode), train_report.c (terminal, JSON, SVG),
 * zero3.c (ZeRO-3), zero_comm.c (the NCCL-shaped layer), model.c (the
 * MLP), train_data.c (the corpus). docs/trainer.md tells the story.
 */
#ifndef ZPP_EXAMPLE_TRAIN_H_
#define ZPP_EXAMPLE_TRAIN_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"
#include "train_data.h"
#include "zero_comm.h"
#include "zpp.h"

#define TR_EXIT_OK 0
#define TR_EXIT_ERROR 1
#define TR_EXIT_USAGE 2
#define TR_MAX_RUNS 4

typedef struct {
  int forkRanks;                  /* -N: fork this many local ranks (0: launcher or one rank) */
  int layoutNodes, layoutPerNode; /* --layout NxL (0: none) */
  int plain, zeropp, compare;     /* which runs: plain, ZeRO++, or both */
  int compareOverlap;             /* both, each with and without overlap */
  int qwzBits, qgzBits, hpz;      /* ZeRO++ settings */
  int rotate;                     /* ZeRO++: rotated codec blocks (zppConfig_t.quantRotate) */
  int qwzDelta;                   /* ZeRO++: weight gathers send differences (ZPP_PARAM_DELTA) */
  int errorFeedback;              /* ZeRO++: qgZ with error feedback (zppGradCreate) */
  int overlap;
  int prefetch;
  zppDataType_t type;
  const char* data;
  int steps, batch, context, embed, hidden;
  int weightInOut; /* --weight-layout in-out (1) or out-in (0, the default) */
  double lr;
  uint64_t seed;
  double bucketMB;
  int evalEvery, evalSamples;
  const char* json;
  const char* svg;
  int sample;
  int printEvery;
  int interleave; /* --compare: steps per turn (0: one run after the other) */
  int quiet;
  int timeoutSec;
  int elastic;            /* --elastic: survive lost ranks (train_elastic.c) */
  int killNode, killStep; /* --kill-node K --kill-step S: node K's ranks die in step S (-1: none) */
} trArgs_t;

typedef struct {
  const char* mode; /* "plain" or "zeropp" */
  zcOptions_t opt;
  int overlap;
  int nsteps;
  double* loss;    /* global mean loss of each step's batch */
  double* time;    /* seconds per step, slowest rank */
  double* busy;    /* rank 0's communication busy time per step */
  double* exposed; /* rank 0's time inside communication calls per step */
  double* compute; /* rank 0's compute time per step */
  int nevals;
  int* evalStep;
  double* evalLoss;
  double medianStep, meanStep;
  /* means over ranks and steps */
  double busyMean, exposedMean, computeMean, hiddenShare;
  double intraBytes[zppNumOpKinds], interBytes[zppNumOpKinds]; /* per step, summed over ranks */
  size_t secondaryBytes;                                       /* rank 0 */
  char* sampleText;
  /* --elastic: recoveries from lost ranks, steps done again after them, and their seconds (from
   * the failed call to training again) */
  int recoveries, stepsRedone;
  double recoverySec;
} trRun_t;

typedef struct trElastic trElastic_t;

typedef struct {
  int rank, nranks;
  zppComm_t comm;
  zppTopology_t topo;
  const char* launcher;
  tdCorpus_t corpus;
  mlpShape_t shape;
  trElastic_t* elastic; /* --elastic: this rank's copies and buddies (train_elastic.c) */
} trEnv_t;

/* train_run.c: a run is opened, stepped (in turns with another under
 * --compare), and closed (final evaluation, sums over the ranks). On error
 * the communicator is aborted (env->comm becomes NULL) and the sessions are
 * left for the process's exit. */
typedef struct trSession trSession_t;
int trSessionOpen(const trArgs_t* a, trEnv_t* env, const zcOptions_t* opt, int overlap, trRun_t* run,
                  trSession_t** out);
/* Up to count more steps (fewer at the end). */
int trSessionSteps(const trArgs_t* a, trEnv_t* env, trSession_t* s, int count);
int trSessionClose(const trArgs_t* a, trEnv_t* env, trSession_t* s);
/* One step: TR_EXIT_OK, or TR_EXIT_ERROR with the failed call's result in *failed (zppSuccess when
 * the loss diverged); nothing is aborted, so that the elastic trainer can recover. */
int trSessionStep(const trArgs_t* a, trEnv_t* env, trSession_t* s, zppResult_t* failed);
struct z3Trainer* trSessionTrainer(trSession_t* s);
zcComm_t trSessionComm(trSession_t* s);
/* A new communication layer and ZeRO-3 trainer (in its initial state) on env->comm, which has
 * changed (env->rank and env->nranks with it); the run's record is kept. */
int trSessionRebuild(const trArgs_t* a, trEnv_t* env, trSession_t* s);
trRun_t* trSessionRun(trSession_t* s);
void trRunFree(trRun_t* run);

/* train_elastic.c: --elastic. The launcher (fork mode): forks the ranks, which run rankMain,
 * and replaces the ones that die. In a rank: the steps of the run, recovering from lost ranks. */
int trElasticForkRun(const trArgs_t* a, const tdCorpus_t* corpus, const mlpShape_t* shape,
                     zppConfig_t cfg, int (*rankMain)(const trArgs_t* a, trEnv_t* env));
int trElasticSteps(const trArgs_t* a, trEnv_t* env, trSession_t* s);

/* train_report.c */
void trPrintHeader(const trArgs_t* a, const trEnv_t* env, const trRun_t* run);
void trPrintStep(const trArgs_t* a, const trRun_t* run, int step);
void trPrintSummary(const trArgs_t* a, const trEnv_t* env, const trRun_t* runs, int nruns);
int trWriteJson(const char* path, const trArgs_t* a, const trEnv_t* env, const trRun_t* runs,
                int nruns);
int trWriteSvg(const char* path, const trArgs_t* a, const trEnv_t* env, const trRun_t* runs, int nruns);
const char* trTypeName(zppDataType_t t);

/* The rank's error, in one line with the library's reason. */
void trLibError(const trEnv_t* env, const char* what, zppResult_t res);

#endif /* ZPP_EXAMPLE_TRAIN_H_ */
