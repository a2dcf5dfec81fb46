/* The checks tests/comm/comm_exercise.h describes. */
#include "comm_exercise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Every kind of call on comm, results checked: all-reduce, all-gather, reduce-scatter, broadcast
 * from the last rank, qgZ's reduce-scatter, qwZ's all-gather (within its bound: 8-bit blocks of
 * 1..2 in 2^-7), and hpZ's gathers. */
int zppExerciseComm(zppComm_t comm, int tag) {
  int n = 0, me = 0, bad = 0;
  REQUIRE(zppCommCount(comm, &n) == zppSuccess && zppCommUserRank(comm, &me) == zppSuccess);
  enum { C = 1000 };
  float* a = calloc((size_t)C * n, sizeof(float));
  float* b = calloc((size_t)C * n, sizeof(float));
  REQUIRE(a && b);
  for (int i = 0; i < C; i++) a[i] = (float)(me + 1) + (float)(i % 7);
  if (zppAllReduce(a, b, C, zppFloat32, zppSum, comm, NULL) != zppSuccess) bad++;
  for (int i = 0; i < C && !bad; i++) bad += b[i] != (float)(n * (n + 1) / 2) + (float)(n * (i % 7));
  if (zppAllGather(a, b, C, zppFloat32, comm, NULL) != zppSuccess) bad++;
  for (int r = 0; r < n && !bad; r++)
    for (int i = 0; i < C; i++) bad += b[(size_t)r * C + i] != (float)(r + 1) + (float)(i % 7);
  for (size_t i = 0; i < (size_t)C * n; i++) a[i] = (float)(me + 1);
  if (zppReduceScatter(a, b, C, zppFloat32, zppSum, comm, NULL) != zppSuccess) bad++;
  for (int i = 0; i < C && !bad; i++) bad += b[i] != (float)(n * (n + 1) / 2);
  /* qgZ: on nodes of different sizes the plain reduce-scatter (exact, counted as a fallback),
   * else int4 (blocks of one value: within 1e-3 of the sum). */
  zppTopology_t topo;
  zppCommStats_t before, after;
  REQUIRE(zppCommTopology(comm, &topo) == zppSuccess && zppCommGetStats(comm, &before) == zppSuccess);
  if (zppQgzReduceScatter(a, b, C, zppFloat32, zppSum, 4, comm, NULL) != zppSuccess) bad++;
  REQUIRE(zppCommGetStats(comm, &after) == zppSuccess);
  bad += after.qgzPlainFallbacks - before.qgzPlainFallbacks != (topo.uniform ? 0u : 1u);
  const float sum = (float)(n * (n + 1) / 2), tol = topo.uniform ? sum * 1e-3f : 0.0f;
  for (int i = 0; i < C && !bad; i++) bad += fabsf(b[i] - sum) > tol;
  for (int i = 0; i < C; i++) a[i] = me == n - 1 ? (float)(tag + i) : -1.0f;
  if (zppBroadcast(a, a, C, zppFloat32, n - 1, comm, NULL) != zppSuccess) bad++;
  for (int i = 0; i < C && !bad; i++) bad += a[i] != (float)(tag + i);
  for (int i = 0; i < C; i++) a[i] = 1.0f + (float)((i * 37 + me * 11) % 64) / 64.0f;
  if (zppQwzAllGather(a, b, C, zppFloat32, 8, comm, NULL) != zppSuccess) bad++;
  for (int r = 0; r < n && !bad; r++)
    for (int i = 0; i < C; i++) {
      float want = 1.0f + (float)((i * 37 + r * 11) % 64) / 64.0f;
      float err = b[(size_t)r * C + i] - want;
      bad += err > 2.0f / 127 || err < -2.0f / 127;
    }
  /* hpZ: a parameter's forward gather (qwZ 8-bit) keeps the node's secondary partition; its
   * backward gather, from there, is bit for bit the forward one. */
  zppParam_t param = NULL;
  float* c = calloc((size_t)C * n, sizeof(float));
  REQUIRE(c);
  if (zppParamCreate(comm, C, zppFloat32, 8, &param) != zppSuccess ||
      zppParamGatherForward(param, a, b, NULL) != zppSuccess ||
      zppParamGatherBackward(param, a, c, NULL) != zppSuccess)
    bad++;
  else
    bad += memcmp(b, c, (size_t)C * n * sizeof(float)) != 0;
  zppParamDestroy(param);
  free(c);
  free(a);
  free(b);
  if (bad)
    fprintf(stderr, "rank %d of %d: %d wrong results (tag %d): %s\n", me, n, bad, tag,
            zppGetLastError(comm));
  return bad;
}
