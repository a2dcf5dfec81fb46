/*
 * Error feedback for qgZ (zppGrad*, zppQgzReduceScatterEF), on a node layout:
 *
 *   test_qgz_ef LAYOUT      e.g. 2x2, 1x4, 4x1, 3x2, 2x2/cyclic
 *
 * 1. What error feedback promises (docs/zeropp.md, "Error feedback"), for
 *    int2, int4 and int8: the
 *    same fp32 gradient g_r on every rank for T = 30 steps. Without it each
 *    step makes the same error and the sum of the outputs drifts T times the
 *    one-step error away from T * target; with it the drift stays within the
 *    residuals the last step left, so at every step
 *      |sum_t out_t - T * target| <= 1.16 * G * bound + fp32 rounding,
 *    where bound is qgZ's documented one-call bound for g (ztQgzExpect): the
 *    residuals are one quantization error of g + e each, and as e rounds
 *    with g, |e| <= (a + |e|) / 2Q (a the block's largest |g|, Q the
 *    codec's largest level) settles at a / (2Q - 1): G = 2Q / (2Q - 1)
 *    times the one-call error a / 2Q (int8 1.004, int4 1.077, int2 2); 1.16
 *    covers the two stages' sums in fp32. Residuals are kept in 8 bits,
 *    which loses up to 1/254 of a residual block's largest value per step
 *    (at most 0.12 of it over 30 steps, if every loss had one sign); the
 *    allowance leaves that no room of its own, and the largest ratios seen
 *    (0.55-0.82, printed) show it does not need any. The same run
 *    without error feedback must break that bound by step 30 (else the test
 *    could not tell them apart). Uneven shards: rc is not a multiple of the
 *    block.
 * 2. Undo: a step, zppGradUndo, the same step again: byte-identical output
 *    (the residuals were put back); a second undo, or one on a new handle,
 *    is zppInvalidUsage.
 * 3. Save and load: after 3 steps the state goes into a new handle; both
 *    give byte-identical next steps. A buffer of another size, a state of
 *    another handle shape (also one of the same bytes) or one of fp32
 *    residuals (an older build's) is refused. With rotation, a state of
 *    another block's rotated residuals loads back in the original domain.
 * 4. A NaN in rank 0's input: that output element is NaN (its escape), the
 *    next step with a finite input is finite everywhere (the NaN never
 *    entered a residual) and within the bound of 1.
 * 5. bf16 input: one step within the one-call bound (bf16 output rounding
 *    added).
 * 7. The coalesced form (zppQgzReduceScatterCoalescedEF), int2 and int4:
 *    every tensor's output equals its own call's, byte for byte, 3 steps;
 *    a handle shared by two tensors or handles of two widths are refused.
 * 6. Bad use: another count, type or communicator: zppInvalidArgument,
 *    nothing run; then every rank but 0 calls plain qgZ while rank 0 calls
 *    with error feedback: every rank fails (mismatched call), none hangs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "perf/common/launch.h"
#include "zeropp_testlib.h"

#define STEPS 30
/* Per partition: not a multiple of any block. A second argument sets
 * another (2x2 rotated runs one of two whole escape groups and 1000 more,
 * so that the rotated domain's groups run beside the short tail's). */
static size_t rc = 1000;

typedef struct {
  const char* layout;
} arg_t;

/* Every rank's input (W * rc), for the expectations. */
static char** allInputs(zppDataType_t t, int W, int seed) {
  char** in = calloc((size_t)W, sizeof(char*));
  REQUIRE(in);
  for (int r = 0; r < W; r++) {
    in[r] = malloc((size_t)W * rc * zppTypeSize(t));
    REQUIRE(in[r]);
    ztFill(in[r], t, (size_t)W * rc, seed, r);
  }
  return in;
}

static void freeInputs(char** in, int W) {
  for (int r = 0; r < W; r++) free(in[r]);
  free(in);
}

/* Part 1: the drift of the summed outputs, with (ef 1) or without. Returns
 * the number of elements whose drift broke the bound at the last step, and
 * reports the largest drift / bound ratio seen at any step in *worst. */
static int drift(zppComm_t comm, int rank, int W, const int* nodeOf, int bits, int ef, double* worst) {
  const zppDataType_t t = zppFloat32;
  const int block = ztBlock(bits);
  const double Q = bits == 8 ? 127 : bits == 4 ? 7 : 1, G = 2 * Q / (2 * Q - 1);
  char** in = allInputs(t, W, 11);
  float* out = malloc(rc * sizeof(float));
  double* sum = calloc(rc, sizeof(double));
  double* bound = malloc(rc * sizeof(double));
  double* target = malloc(rc * sizeof(double));
  float* expect = malloc(rc * sizeof(float));
  REQUIRE(out && sum && bound && target && expect);
  ztQgzExpect((const void* const*)in, t, rc, rank, W, nodeOf, bits, block, zppSum, ZT_CHUNK_BYTES,
              expect, bound, target);
  zppGrad_t g = NULL;
  if (ef) REQUIRE(zppGradCreate(comm, rc, t, bits, &g) == zppSuccess);
  int broken = 0;
  *worst = 0.0;
  for (int step = 1; step <= STEPS; step++) {
    zppResult_t res = ef ? zppQgzReduceScatterEF(in[rank], out, rc, t, zppSum, g, comm, NULL)
                         : zppQgzReduceScatter(in[rank], out, rc, t, zppSum, bits, comm, NULL);
    REQUIRE(res == zppSuccess);
    /* Plain qgZ is what the expectation models, byte for byte (error
     * feedback's first step sums in fp32 before it requantizes, which the
     * fused requantization need not match bit for bit: the bound covers it). */
    if (step == 1 && !ef)
      CHECK_MSG(memcmp(out, expect, rc * sizeof(float)) == 0,
                "rank %d: plain qgZ's first step differs from the expectation", rank);
    broken = 0;
    for (size_t i = 0; i < rc; i++) {
      sum[i] += out[i];
      double d = fabs(sum[i] - step * target[i]);
      double allowed = 1.16 * G * bound[i] + 1e-6 * step * (fabs(target[i]) + bound[i]);
      if (d / allowed > *worst) *worst = d / allowed;
      broken += d > allowed;
    }
    if (ef && broken) {
      CHECK_MSG(0, "rank %d: int%d with error feedback: %d elements drifted past the bound at step %d",
                rank, bits, broken, step);
      break;
    }
  }
  zppGradDestroy(g);
  freeInputs(in, W);
  free(out);
  free(sum);
  free(bound);
  free(target);
  free(expect);
  return broken;
}

/* Part 2: undo. */
static void undo(zppComm_t comm, int rank, int W) {
  const zppDataType_t t = zppFloat32;
  char** in = allInputs(t, W, 12);
  float *a = malloc(rc * sizeof(float)), *b = malloc(rc * sizeof(float));
  REQUIRE(a && b);
  zppGrad_t g;
  REQUIRE(zppGradCreate(comm, rc, t, 4, &g) == zppSuccess);
  CHECK_EQ_INT(zppGradUndo(g), zppInvalidUsage); /* nothing yet */
  REQUIRE(zppQgzReduceScatterEF(in[rank], a, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  REQUIRE(zppQgzReduceScatterEF(in[rank], a, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  CHECK_EQ_INT(zppGradUndo(g), zppSuccess);
  CHECK_EQ_INT(zppGradUndo(g), zppInvalidUsage); /* once */
  REQUIRE(zppQgzReduceScatterEF(in[rank], b, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  CHECK_MSG(memcmp(a, b, rc * sizeof(float)) == 0, "rank %d: the step done again after an undo differs",
            rank);
  zppGradDestroy(g);
  freeInputs(in, W);
  free(a);
  free(b);
}

/* Part 3: save and load. */
static void saveLoad(zppComm_t comm, int rank, int W, const int* nodeOf) {
  const zppDataType_t t = zppFloat32;
  char** in = allInputs(t, W, 13);
  float *a = malloc(rc * sizeof(float)), *b = malloc(rc * sizeof(float));
  REQUIRE(a && b);
  zppGrad_t g, h;
  REQUIRE(zppGradCreate(comm, rc, t, 4, &g) == zppSuccess);
  REQUIRE(zppGradCreate(comm, rc, t, 4, &h) == zppSuccess);
  for (int i = 0; i < 3; i++)
    REQUIRE(zppQgzReduceScatterEF(in[rank], a, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  size_t bytes = 0;
  REQUIRE(zppGradStateBytes(g, &bytes) == zppSuccess);
  char* state = malloc(bytes);
  REQUIRE(state);
  CHECK_EQ_INT(zppGradSaveState(g, state, bytes - 1), zppInvalidArgument);
  REQUIRE(zppGradSaveState(g, state, bytes) == zppSuccess);
  CHECK_EQ_INT(zppGradLoadState(h, state, bytes - 1), zppInvalidArgument);
  REQUIRE(zppGradLoadState(h, state, bytes) == zppSuccess);
  CHECK_EQ_INT(zppGradUndo(h), zppInvalidUsage); /* a load is not a step */
  REQUIRE(zppQgzReduceScatterEF(in[rank], a, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  REQUIRE(zppQgzReduceScatterEF(in[rank], b, rc, t, zppSum, h, comm, NULL) == zppSuccess);
  CHECK_MSG(memcmp(a, b, rc * sizeof(float)) == 0, "rank %d: the loaded handle's step differs", rank);
  /* Another shape: half the count. */
  zppGrad_t other;
  REQUIRE(zppGradCreate(comm, rc / 2, t, 4, &other) == zppSuccess);
  size_t otherBytes = 0;
  REQUIRE(zppGradStateBytes(other, &otherBytes) == zppSuccess);
  CHECK_EQ_INT(zppGradLoadState(other, state, bytes), zppInvalidArgument);
  zppGradDestroy(other);
  /* One element fewer: rows of the same residual blocks, so the same bytes;
   * the header's count tells them apart. */
  REQUIRE(zppGradCreate(comm, rc - 1, t, 4, &other) == zppSuccess);
  REQUIRE(zppGradStateBytes(other, &otherBytes) == zppSuccess);
  CHECK_EQ_INT((long long)otherBytes, (long long)bytes);
  CHECK_EQ_INT(zppGradLoadState(other, state, bytes), zppInvalidArgument);
  zppGradDestroy(other);
  /* With rotation: a state whose rotated values are of another block (a
   * job that ran with another ZPP_QUANT_BLOCK) comes back in the original
   * domain: saved again, no send scale has its sign bit (the rotated mark)
   * and the header holds this communicator's block. The header (zpp_EF_3):
   * magic, count, then int32 type, bits, nranks, nNodes, hasReduce,
   * rotBlock; the send residual's scales (W rows) follow it, then its
   * values, then the reduce residual's scales (N rows, on N nodes of more
   * than one rank each). */
  int N = 0;
  for (int r = 0; r < W; r++) N = nodeOf[r] + 1 > N ? nodeOf[r] + 1 : N;
  const size_t hdr = 40, row = (rc + 31) / 32 * 32;
  const size_t sendScales = (size_t)W * row / 32,
               reduceScales = W > N && N > 1 ? (size_t)N * row / 32 : 0;
  const size_t reduceAt = hdr + 4 * sendScales + (size_t)W * row;
  int32_t rotBlock;
  memcpy(&rotBlock, state + 36, 4);
  CHECK_EQ_INT(memcmp(state, "zpp_EF_3", 8), 0);
  if (ztQuantFlags() != 0) { /* rotation */
    CHECK(rotBlock == ztBlock(4));
    uint32_t marked = 0, markedReduce = 0;
    for (size_t k = 0; k < sendScales; k++) {
      uint32_t u;
      memcpy(&u, state + hdr + 4 * k, 4);
      marked += u >> 31;
    }
    for (size_t k = 0; k < reduceScales; k++) {
      uint32_t u;
      memcpy(&u, state + reduceAt + 4 * k, 4);
      markedReduce += u >> 31;
    }
    CHECK_MSG(rc < 4096 || marked > 0, "rank %d: no rotated residual block after 4 steps", rank);
    CHECK_MSG(rc < 4096 || reduceScales == 0 || markedReduce > 0,
              "rank %d: no rotated node-sum residual block after 4 steps", rank);
    int32_t foreign = rotBlock == 32 ? 64 : 32;
    memcpy(state + 36, &foreign, 4);
    REQUIRE(zppGradLoadState(h, state, bytes) == zppSuccess);
    char* again = malloc(bytes);
    REQUIRE(again);
    REQUIRE(zppGradSaveState(h, again, bytes) == zppSuccess);
    int32_t saved;
    memcpy(&saved, again + 36, 4);
    CHECK_EQ_INT(saved, rotBlock);
    marked = 0;
    for (size_t k = 0; k < sendScales + reduceScales; k++) {
      uint32_t u;
      memcpy(&u, again + (k < sendScales ? hdr + 4 * k : reduceAt + 4 * (k - sendScales)), 4);
      marked += u >> 31;
    }
    CHECK_MSG(marked == 0, "rank %d: %u residual blocks still rotated after loading another block's",
              rank, marked);
    free(again);
  } else {
    CHECK_EQ_INT(rotBlock, 0);
  }
  /* A state of fp32 residuals (magic "zpp_EF_1", before 8-bit residuals). */
  memcpy(state, "zpp_EF_1", 8);
  CHECK_EQ_INT(zppGradLoadState(h, state, bytes), zppInvalidArgument);
  zppGradDestroy(g);
  zppGradDestroy(h);
  free(state);
  freeInputs(in, W);
  free(a);
  free(b);
}

/* Part 4: a NaN. */
static void nanInput(zppComm_t comm, int rank, int W, const int* nodeOf) {
  const zppDataType_t t = zppFloat32;
  char** in = allInputs(t, W, 14);
  const size_t at = (size_t)(W - 1) * rc + 17; /* the last partition's element 17 */
  ((float*)in[0])[at] = NAN;                   /* rank 0's, on every rank */
  float* out = malloc(rc * sizeof(float));
  REQUIRE(out);
  zppGrad_t g;
  REQUIRE(zppGradCreate(comm, rc, t, 4, &g) == zppSuccess);
  REQUIRE(zppQgzReduceScatterEF(in[rank], out, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  for (size_t i = 0; i < rc; i++) {
    int nan = rank == W - 1 && i == 17;
    CHECK_MSG(nan ? isnan(out[i]) : isfinite(out[i]), "rank %d: element %zu is %g", rank, i, out[i]);
  }
  /* Finite inputs now: finite outputs within the one-call bound of the
   * residuals left, as in part 1 after one step. */
  ((float*)in[0])[at] = 0.5f;
  double* bound = malloc(rc * sizeof(double));
  double* target = malloc(rc * sizeof(double));
  float* expect = malloc(rc * sizeof(float));
  REQUIRE(bound && target && expect);
  ztQgzExpect((const void* const*)in, t, rc, rank, W, nodeOf, 4, ztBlock(4), zppSum, ZT_CHUNK_BYTES,
              expect, bound, target);
  REQUIRE(zppQgzReduceScatterEF(in[rank], out, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  int bad = 0;
  for (size_t i = 0; i < rc; i++)
    bad += !isfinite(out[i]) || fabs(out[i] - target[i]) > 3.0 * bound[i] + 1e-6 * fabs(target[i]);
  CHECK_MSG(bad == 0, "rank %d: %d elements after the NaN step not finite or off", rank, bad);
  zppGradDestroy(g);
  freeInputs(in, W);
  free(out);
  free(bound);
  free(target);
  free(expect);
}

/* Part 5: bf16 input, one step. */
static void bf16Step(zppComm_t comm, int rank, int W, const int* nodeOf) {
  const zppDataType_t t = zppBfloat16;
  char** in = allInputs(t, W, 15);
  uint16_t* out = malloc(rc * sizeof(uint16_t));
  double* bound = malloc(rc * sizeof(double));
  double* target = malloc(rc * sizeof(double));
  uint16_t* expect = malloc(rc * sizeof(uint16_t));
  REQUIRE(out && bound && target && expect);
  ztQgzExpect((const void* const*)in, t, rc, rank, W, nodeOf, 4, ztBlock(4), zppSum, ZT_CHUNK_BYTES,
              expect, bound, target);
  zppGrad_t g;
  REQUIRE(zppGradCreate(comm, rc, t, 4, &g) == zppSuccess);
  REQUIRE(zppQgzReduceScatterEF(in[rank], out, rc, t, zppSum, g, comm, NULL) == zppSuccess);
  int bad = 0;
  for (size_t i = 0; i < rc; i++) {
    double v = ztGet(out, t, i);
    bad += fabs(v - target[i]) > bound[i] + fabs(target[i]) * (1.0 / 256) + 1e-30;
  }
  CHECK_MSG(bad == 0, "rank %d: bf16: %d elements outside the bound", rank, bad);
  zppGradDestroy(g);
  freeInputs(in, W);
  free(out);
  free(bound);
  free(target);
  free(expect);
}

/* Part 7: the coalesced form. Tensors of 300, 0, 1 and 2100 elements, 3
 * steps: each output byte-identical to the single-tensor call's on a handle
 * of its own (every tensor is compensated as a call of its own); then two
 * tensors sharing one handle, and handles of two widths, are refused. */
static void coalesced(zppComm_t comm, int rank, int W, int bits) {
  enum { T = 4, STEPS3 = 3 };
  const zppDataType_t t = zppBfloat16;
  const size_t counts[T] = {300, 0, 1, 2100}, ts = 2;
  const void* sends[T];
  void *recvs[T], *singles[T];
  zppGrad_t gc[T], gs[T];
  for (int k = 0; k < T; k++) {
    void* in = malloc(counts[k] * ts * (size_t)W + 1);
    REQUIRE(in);
    ztFill(in, t, counts[k] * (size_t)W, 300 + k, rank);
    sends[k] = in;
    recvs[k] = malloc(counts[k] * ts + 1);
    singles[k] = malloc(counts[k] * ts + 1);
    REQUIRE(recvs[k] && singles[k]);
    REQUIRE(zppGradCreate(comm, counts[k], t, bits, &gc[k]) == zppSuccess);
    REQUIRE(zppGradCreate(comm, counts[k], t, bits, &gs[k]) == zppSuccess);
  }
  for (int step = 0; step < STEPS3; step++) {
    for (int k = 0; k < T; k++)
      REQUIRE(zppQgzReduceScatterEF(sends[k], singles[k], counts[k], t, zppAvg, gs[k], comm, NULL) ==
              zppSuccess);
    REQUIRE(zppQgzReduceScatterCoalescedEF(T, sends, recvs, counts, t, zppAvg, gc, comm, NULL) ==
            zppSuccess);
    for (int k = 0; k < T; k++)
      CHECK_MSG(memcmp(recvs[k], singles[k], counts[k] * ts) == 0,
                "rank %d: int%d step %d: coalesced tensor %d differs from its own call", rank, bits,
                step, k);
  }
  zppGrad_t twice[2] = {gc[0], gc[0]};
  const size_t c2[2] = {counts[0], counts[0]};
  const void* s2[2] = {sends[0], sends[0]};
  void* r2[2] = {recvs[0], singles[0]};
  CHECK_EQ_INT(zppQgzReduceScatterCoalescedEF(2, s2, r2, c2, t, zppAvg, twice, comm, NULL),
               zppInvalidArgument);
  zppGrad_t other;
  REQUIRE(zppGradCreate(comm, counts[0], t, bits == 8 ? 4 : 8, &other) == zppSuccess);
  zppGrad_t mixed[2] = {gc[0], other};
  CHECK_EQ_INT(zppQgzReduceScatterCoalescedEF(2, s2, r2, c2, t, zppAvg, mixed, comm, NULL),
               zppInvalidArgument);
  CHECK_EQ_INT(zppQgzReduceScatterCoalescedEF(2, s2, r2, c2, t, zppAvg, NULL, comm, NULL),
               zppInvalidArgument);
  CHECK_EQ_INT(zppQgzReduceScatterCoalescedEF(2, s2, r2, NULL, t, zppAvg, mixed, comm, NULL),
               zppInvalidArgument);
  zppGradDestroy(other);
  for (int k = 0; k < T; k++) {
    zppGradDestroy(gc[k]);
    zppGradDestroy(gs[k]);
    free((void*)sends[k]);
    free(recvs[k]);
    free(singles[k]);
  }
}

/* Part 6: bad use. */
static void badUse(zppComm_t comm, int rank, int W) {
  const zppDataType_t t = zppFloat32;
  float* in = calloc((size_t)W * rc, sizeof(float));
  float* out = calloc(rc, sizeof(float));
  REQUIRE(in && out);
  zppGrad_t g;
  REQUIRE(zppGradCreate(comm, rc, t, 4, &g) == zppSuccess);
  CHECK_EQ_INT(zppQgzReduceScatterEF(in, out, rc - 1, t, zppSum, g, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppQgzReduceScatterEF(in, out, rc, zppFloat16, zppSum, g, comm, NULL),
               zppInvalidArgument);
  zppComm_t twin;
  REQUIRE(zppCommSplit(comm, 0, rank, &twin, NULL) == zppSuccess);
  CHECK_EQ_INT(zppQgzReduceScatterEF(in, out, rc, t, zppSum, g, twin, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppQgzReduceScatterEF(in, out, rc, t, zppMax, g, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppQgzReduceScatterEF(in, out, rc, t, zppSum, NULL, comm, NULL), zppInvalidArgument);
  /* Still in step after the refusals: a good call on both. */
  CHECK_EQ_INT(zppQgzReduceScatterEF(in, out, rc, t, zppSum, g, comm, NULL), zppSuccess);
  /* Rank 0 with error feedback, the others without: a mismatch, seen by a
   * rank (zppInvalidUsage) and passed on to the others (zppRemoteError). */
  zppGrad_t gt = NULL;
  if (rank == 0) REQUIRE(zppGradCreate(twin, rc, t, 4, &gt) == zppSuccess);
  zppResult_t res = rank == 0 ? zppQgzReduceScatterEF(in, out, rc, t, zppSum, gt, twin, NULL)
                              : zppQgzReduceScatter(in, out, rc, t, zppSum, 4, twin, NULL);
  CHECK_MSG(res == zppInvalidUsage || res == zppRemoteError,
            "rank %d: a call with error feedback beside ones without returned %s", rank,
            zppGetErrorString(res));
  if (rank == 0) printf("mismatch: %s\n", zppGetLastError(twin));
  zppGradDestroy(gt);
  zppCommAbort(twin);
  zppGradDestroy(g);
  CHECK_EQ_INT(zppGradDestroy(g), zppInvalidArgument); /* twice */
  free(in);
  free(out);
}

static int body(int rank, int nranks, const zppUniqueId* id, void* argp) {
  (void)argp;
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  zppTopology_t topo;
  REQUIRE(zppCommTopology(comm, &topo) == zppSuccess);
  int nodeOf[64];
  REQUIRE(nranks <= 64);
  REQUIRE(zppAllGather(&topo.node, nodeOf, 1, zppInt32, comm, NULL) == zppSuccess);
  static const int widths[] = {2, 4, 8};
  for (int wi = 0; wi < 3; wi++) {
    const int bits = widths[wi];
    double withEf, without;
    drift(comm, rank, nranks, nodeOf, bits, 1, &withEf);
    int broken = drift(comm, rank, nranks, nodeOf, bits, 0, &without);
    CHECK_MSG(broken > 0,
              "rank %d: int%d without error feedback stayed within the bound: the test "
              "cannot tell",
              rank, bits);
    if (rank == 0)
      printf("int%d: largest drift / bound over %d steps: %.3f with error feedback, %.2f without\n",
             bits, STEPS, withEf, without);
  }
  undo(comm, rank, nranks);
  saveLoad(comm, rank, nranks, nodeOf);
  nanInput(comm, rank, nranks, nodeOf);
  bf16Step(comm, rank, nranks, nodeOf);
  coalesced(comm, rank, nranks, 2);
  coalesced(comm, rank, nranks, 4);
  badUse(comm, rank, nranks);
  zppCommDestroy(comm);
  return zppTestFailures ? 1 : 0;
}

int main(int argc, char** argv) {
  arg_t a = {argc > 1 ? argv[1] : "2x2"};
  if (argc > 2) rc = strtoul(argv[2], NULL, 10);
  REQUIRE(rc >= 100);
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.layout = a.layout;
  o.timeoutSec = 240;
  int status = zppLaunch(&o, body, &a);
  printf("test_qgz_ef %s: %s\n", a.layout, status == 0 ? "passed" : "FAILED");
  return status;
}
