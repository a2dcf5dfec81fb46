/*
 * zppCommSplit: ranks, keys and colors, collectives on the new
 * communicators, splits of splits, NOCOLOR, bad colors and destroy order.
 *
 *   test_comm_split NRANKS LAYOUT      e.g. 6 3x2 (ranks 2k, 2k+1 on node k)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "perf/common/launch.h"

/* Every collective kind once on comm, checked: members are the parent
 * ranks of the new ranks (members[r]). */
static void exercise(zppComm_t comm, const int* members, const char* what) {
  int n = 0, r = -1;
  REQUIRE(zppCommCount(comm, &n) == zppSuccess && zppCommUserRank(comm, &r) == zppSuccess);
  int sum = 0;
  for (int i = 0; i < n; i++) sum += members[i];
  int32_t v[5], all[64], got[64];
  for (int i = 0; i < 5; i++) v[i] = members[r];
  CHECK_EQ_INT(zppAllReduce(v, v, 5, zppInt32, zppSum, comm, NULL), zppSuccess);
  CHECK_MSG(v[0] == sum && v[4] == sum, "%s: allreduce gave %d, want %d", what, v[0], sum);
  int root = n - 1;
  int32_t mine = members[r];
  CHECK_EQ_INT(zppGather(&mine, all, 1, zppInt32, root, comm, NULL), zppSuccess);
  for (int i = 0; r == root && i < n; i++)
    CHECK_MSG(all[i] == members[i], "%s: gather slot %d holds %d, want %d", what, i, all[i],
              members[i]);
  int32_t red = 0;
  CHECK_EQ_INT(zppReduce(&mine, &red, 1, zppInt32, zppMax, 0, comm, NULL), zppSuccess);
  if (r == 0) {
    int mx = 0;
    for (int i = 0; i < n; i++) mx = members[i] > mx ? members[i] : mx;
    CHECK_MSG(red == mx, "%s: reduce max %d, want %d", what, red, mx);
  }
  /* Uneven all-to-all: new rank a sends b (a + b) % 3 elements a*10+b. */
  size_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = (size_t)((r + p) % 3);
    rc[p] = (size_t)((p + r) % 3);
    sd[p] = so;
    rd[p] = ro;
    for (size_t i = 0; i < sc[p]; i++) all[so + i] = r * 10 + p;
    so += sc[p];
    ro += rc[p];
  }
  CHECK_EQ_INT(zppAllToAllv(all, sc, sd, got, rc, rd, zppInt32, comm, NULL), zppSuccess);
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < rc[p]; i++)
      CHECK_MSG(got[rd[p] + i] == p * 10 + r, "%s: alltoallv from %d: %d", what, p, got[rd[p] + i]);
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  zppComm_t world;
  REQUIRE(zppCommInitRank(&world, nranks, *id, rank) == zppSuccess);
  zppTopology_t wt;
  REQUIRE(zppCommTopology(world, &wt) == zppSuccess);

  /* 1. Two colors by parity, keys reversed: new rank order is descending. */
  zppComm_t half = NULL;
  CHECK_EQ_INT(zppCommSplit(world, rank % 2, -rank, &half, NULL), zppSuccess);
  REQUIRE(half != NULL);
  int hn = 0, hr = -1, members[64], m = 0;
  for (int r = nranks - 1; r >= 0; r--)
    if (r % 2 == rank % 2) members[m++] = r;
  CHECK(zppCommCount(half, &hn) == zppSuccess && hn == m);
  CHECK(zppCommUserRank(half, &hr) == zppSuccess && hr >= 0 && hr < m && members[hr] == rank);
  /* Nodes come from the parent's: count the parent nodes of the members. */
  zppTopology_t ht;
  REQUIRE(zppCommTopology(half, &ht) == zppSuccess);
  int32_t nodeOf[64] = {0};
  nodeOf[rank] = wt.node;
  REQUIRE(zppAllGather(&nodeOf[rank], nodeOf, 1, zppInt32, world, NULL) == zppSuccess);
  int seen[64] = {0}, nodes = 0, mates = 0;
  for (int i = 0; i < m; i++) {
    nodes += !seen[nodeOf[members[i]]];
    seen[nodeOf[members[i]]] = 1;
    mates += nodeOf[members[i]] == wt.node;
  }
  CHECK_MSG(ht.nNodes == nodes, "split by parity: %d nodes, want %d", ht.nNodes, nodes);
  CHECK_MSG(ht.localSize == mates, "split by parity: %d on this node, want %d", ht.localSize, mates);
  exercise(half, members, "parity split");

  /* 2. Equal keys: ties go by parent rank; one color for all. */
  zppComm_t same = NULL;
  CHECK_EQ_INT(zppCommSplit(world, 7, 0, &same, NULL), zppSuccess);
  int sr = -1;
  CHECK(same && zppCommUserRank(same, &sr) == zppSuccess && sr == rank);
  int ident[64];
  for (int i = 0; i < nranks; i++) ident[i] = i;
  if (same) exercise(same, ident, "one color");

  /* 3. A split of a split: the first two new ranks of each half, the
   * others NOCOLOR (NULL), with a config of their own. */
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.commName = "pair";
  cfg.timeoutSec = 30;
  zppComm_t pair = (zppComm_t)&cfg; /* must be overwritten with NULL */
  CHECK_EQ_INT(zppCommSplit(half, hr < 2 ? 0 : ZPP_SPLIT_NOCOLOR, hr, &pair, &cfg), zppSuccess);
  if (hr < 2) {
    REQUIRE(pair != NULL);
    int pn = 0;
    CHECK(zppCommCount(pair, &pn) == zppSuccess && pn == (m < 2 ? m : 2));
    exercise(pair, members, "split of a split");
  } else {
    CHECK_MSG(pair == NULL, "NOCOLOR: newcomm not NULL");
  }

  /* 4. A bad color on one rank fails every rank, naming it; the parent
   * stays usable. */
  zppComm_t bad = NULL;
  const int badRank = nranks > 1 ? 1 : 0;
  char want[64];
  snprintf(want, sizeof(want), "rank %d passed color -5", badRank);
  CHECK_EQ_INT(zppCommSplit(world, rank == badRank ? -5 : 0, 0, &bad, NULL), zppInvalidArgument);
  CHECK(bad == NULL);
  CHECK_MSG(strstr(zppGetLastError(NULL), want) != NULL, "bad color: %s", zppGetLastError(NULL));
  int32_t one = 1;
  CHECK_EQ_INT(zppAllReduce(&one, &one, 1, zppInt32, zppSum, world, NULL), zppSuccess);
  CHECK_EQ_INT(one, nranks);
  CHECK_EQ_INT(zppCommSplit(world, 0, 0, NULL, NULL), zppInvalidArgument); /* local, no exchange */

  /* 5. Destroy order: the parent first; the children keep working. */
  CHECK_EQ_INT(zppCommDestroy(world), zppSuccess);
  exercise(half, members, "parity split after the parent's destroy");
  if (pair) {
    CHECK_EQ_INT(zppCommDestroy(half), zppSuccess); /* a split's parent, before its child */
    exercise(pair, members, "split of a split after its parent's destroy");
    CHECK_EQ_INT(zppCommDestroy(pair), zppSuccess);
  } else {
    CHECK_EQ_INT(zppCommDestroy(half), zppSuccess);
  }
  CHECK_EQ_INT(zppCommDestroy(same), zppSuccess);
  if (rank == 0) printf("rank 0: %ld checks, %d failed\n", zppTestChecks, zppTestFailures);
  return zppTestFailures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s NRANKS [LAYOUT]\n", argv[0]);
    return 2;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = atoi(argv[1]);
  o.layout = argc > 2 ? argv[2] : NULL;
  o.timeoutSec = 120;
  int rc = zppLaunch(&o, body, NULL);
  printf("test_comm_split %d ranks%s%s: %s\n", o.nranks, o.layout ? " layout " : "",
         o.layout ? o.layout : "", rc == 0 ? "passed" : "FAILED");
  return rc;
}
