/*
 * One reduce-scatter under two pipeline chunk sizes (2 nodes x 2 ranks):
 *
 *   test_qgz_chunk
 *
 * ZPP_PIPELINE_CHUNK_BYTES is read once per communicator, at its first
 * collective, so each rank sets it before splitting off a communicator
 * and calling it: "small" (1024 bytes: qgZ's pieces shrink to one 4096-element
 * escape group, so rc = 5 * 4096 + 1001 makes six pieces per partition) and
 * "large" (64 MiB: one piece). The same inputs through zppQgzReduceScatter
 * (bf16 and fp32, int4 and int8, sum and avg) and through the plain
 * zppReduceScatter must give byte-identical outputs on both (docs/codecs.md,
 * "Where a tensor is cut"; collectives/coll_ctx.c, zppCollCutUnits).
 *
 * The inputs make a cut visible: in two escape groups of every partition
 * (the first, and one that a piece boundary ends), twelve blocks hold one
 * outlier each (1000 among values within [-1, 1]: an escape candidate for
 * int4 and int8), more than the group's 8 escape slots. Uncut, the group
 * overflows; cut inside the group, each part has room for its own: other
 * bytes. The qgZ results are also checked against the codec's documented
 * bound (zeropp_testlib's ztQgzExpect), so two equal wrong answers fail too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "perf/common/launch.h"
#include "zeropp_testlib.h"

#define W 4
#define SMALL_CHUNK "1024"
#define LARGE_CHUNK "67108864"
#define GROUP 4096
static const size_t rc = 5 * GROUP + 1001; /* elements per partition */

/* Rank r's input: W partitions of rc elements, values in [-1, 1], and the
 * outliers above. The same on every rank that asks (the expectation needs
 * every rank's input). */
static void fillInput(void* buf, zppDataType_t t, int r, int seed) {
  zppTestRng_t rng;
  zppTestRngSeed(&rng, (uint64_t)seed * 1000003u + (uint64_t)r * 7919u + 5u);
  for (size_t i = 0; i < (size_t)W * rc; i++) ztSet(buf, t, i, (float)zppTestRngUniform(&rng, -1, 1));
  const size_t groups[2] = {0, 3 * GROUP}; /* the group before the boundary at 4 * GROUP */
  for (int p = 0; p < W; p++)
    for (int g = 0; g < 2; g++)
      for (size_t j = 0; j < 12; j++) {
        size_t at = (size_t)p * rc + groups[g] + j * 64 + (j * 13 + (size_t)r * 5) % 64;
        ztSet(buf, t, at, (j + (size_t)r) % 2 ? 1000.0f : -1000.0f);
      }
}

typedef struct {
  zppDataType_t t;
  int bits; /* 0: the plain zppReduceScatter */
  zppRedOp_t op;
} case_t;

static zppResult_t reduceScatter(zppComm_t comm, const case_t* c, const void* in, void* out) {
  if (c->bits == 0) return zppReduceScatter(in, out, rc, c->t, c->op, comm, NULL);
  return zppQgzReduceScatter(in, out, rc, c->t, c->op, c->bits, comm, NULL);
}

/* A communicator split off base whose collectives cut at chunkBytes. */
static zppComm_t commWithChunk(zppComm_t base, int rank, const char* chunkBytes) {
  REQUIRE(setenv("ZPP_PIPELINE_CHUNK_BYTES", chunkBytes, 1) == 0);
  zppComm_t comm;
  REQUIRE(zppCommSplit(base, 0, rank, &comm, NULL) == zppSuccess);
  /* Its first collective reads the setting; a barrier-like call so that it
   * is read now, while the environment holds it. */
  char one = 1, all[W];
  REQUIRE(zppAllGather(&one, all, 1, zppUint8, comm, NULL) == zppSuccess);
  return comm;
}

static void checkCase(int rank, zppComm_t small, zppComm_t large, const case_t* c, int seed) {
  const size_t ts = zppTypeSize(c->t);
  char* in[W];
  for (int r = 0; r < W; r++) {
    in[r] = malloc((size_t)W * rc * ts);
    REQUIRE(in[r] != NULL);
    fillInput(in[r], c->t, r, seed);
  }
  char* outSmall = malloc(rc * ts);
  char* outLarge = malloc(rc * ts);
  REQUIRE(outSmall && outLarge);
  memset(outSmall, 0xa5, rc * ts);
  memset(outLarge, 0x5a, rc * ts);
  char what[80];
  snprintf(what, sizeof what, "%s %s int%d %s", c->bits ? "qgZ" : "plain reduce-scatter",
           ztTypeName(c->t), c->bits, c->op == zppAvg ? "avg" : "sum");
  zppResult_t r1 = reduceScatter(small, c, in[rank], outSmall);
  zppResult_t r2 = reduceScatter(large, c, in[rank], outLarge);
  CHECK_MSG(r1 == zppSuccess && r2 == zppSuccess, "rank %d: %s: %s / %s", rank, what,
            zppGetErrorString(r1), zppGetErrorString(r2));
  long d = ztFirstDiff(outSmall, outLarge, c->t, rc);
  CHECK_MSG(memcmp(outSmall, outLarge, rc * ts) == 0,
            "rank %d: %s: chunk " SMALL_CHUNK " and " LARGE_CHUNK
            " bytes differ, first at element %ld (%g against %g)",
            rank, what, d, d < 0 ? 0.0 : ztGet(outSmall, c->t, (size_t)d),
            d < 0 ? 0.0 : ztGet(outLarge, c->t, (size_t)d));
  /* Not two equal wrong answers: the exact result within the documented
   * bound (qgZ), or equal to the exact one up to rounding (plain). */
  double* bound = malloc(rc * sizeof(double));
  double* target = malloc(rc * sizeof(double));
  char* expect = malloc(rc * ts);
  REQUIRE(bound && target && expect);
  int nodeOf[W] = {0, 0, 1, 1};
  size_t outside = 0, first = 0;
  if (c->bits) {
    ztQgzExpect((const void* const*)in, c->t, rc, rank, W, nodeOf, c->bits, ztBlock(c->bits), c->op,
                (size_t)atol(LARGE_CHUNK), expect, bound, target);
  } else {
    for (size_t i = 0; i < rc; i++) {
      double s = 0;
      for (int r = 0; r < W; r++) s += ztGet(in[r], c->t, (size_t)rank * rc + i);
      target[i] = c->op == zppAvg ? s / W : s;
      /* W - 1 additions of partial sums below W * 1000, each rounded to
       * fp32 (unit 2^-24) or to t, and the final rounding to t. */
      double u = ztRoundRel(c->t) + 0x1p-24;
      bound[i] = W * (W * 1000.0) * u + ztRoundAbs(c->t);
    }
  }
  for (size_t i = 0; i < rc; i++)
    if (!(fabs(ztGet(outLarge, c->t, i) - target[i]) <= bound[i])) first = outside++ ? first : i;
  CHECK_MSG(outside == 0,
            "rank %d: %s: %zu of %zu elements outside the bound, first %zu: %g, exact %g, bound %g",
            rank, what, outside, rc, first, ztGet(outLarge, c->t, first), target[first], bound[first]);
  free(expect);
  free(bound);
  free(target);
  free(outSmall);
  free(outLarge);
  for (int r = 0; r < W; r++) free(in[r]);
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  REQUIRE(nranks == W);
  zppComm_t base;
  REQUIRE(zppCommInitRank(&base, nranks, *id, rank) == zppSuccess);
  zppTopology_t topo;
  REQUIRE(zppCommTopology(base, &topo) == zppSuccess);
  REQUIRE(topo.nNodes == 2 && topo.localSize == 2 && topo.node == rank / 2);
  zppComm_t small = commWithChunk(base, rank, SMALL_CHUNK);
  zppComm_t large = commWithChunk(base, rank, LARGE_CHUNK);
  /* The small chunk cuts each partition into pieces; the large one not. */
  REQUIRE(ztChunkElemsFor((size_t)atol(SMALL_CHUNK), zppBfloat16, ztBlock(4)) == GROUP);
  REQUIRE(ztChunkElemsFor((size_t)atol(LARGE_CHUNK), zppFloat32, ztBlock(8)) >= rc);
  const case_t cases[] = {
      {zppBfloat16, 4, zppSum}, {zppBfloat16, 8, zppAvg}, {zppFloat32, 4, zppAvg},
      {zppFloat32, 8, zppSum},  {zppBfloat16, 0, zppSum}, {zppFloat32, 0, zppAvg},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    checkCase(rank, small, large, &cases[k], 11 + (int)k);
  CHECK(zppCommDestroy(small) == zppSuccess);
  CHECK(zppCommDestroy(large) == zppSuccess);
  CHECK(zppCommDestroy(base) == zppSuccess);
  if (rank == 0) printf("rank 0: %ld checks, %d failed\n", zppTestChecks, zppTestFailures);
  return zppTestFailures ? 1 : 0;
}

int main(int argc, char** argv) {
  (void)argc;
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.layout = "2x2";
  o.timeoutSec = 60;
  int rc0 = zppLaunch(&o, body, NULL);
  CHECK_MSG(rc0 == 0, "ranks failed (launcher result %d)", rc0);
  return zppTestExit(argv[0]);
}
