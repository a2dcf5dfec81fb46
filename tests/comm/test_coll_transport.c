/*
 * The host transport and executor seen from the API:
 *
 *   test_coll_transport net     2 emulated nodes x 2 ranks: endpoints to the
 *                               other node use the network only (tcp), never
 *                               System V / POSIX shared memory or CMA; those
 *                               inside the node use shared memory; the byte
 *                               counters split intra / inter node correctly
 *   test_coll_transport noshm   ZPP_UCX_SHM=0: every endpoint is tcp
 *   test_coll_transport stream  host streams: start, compute, wait; Query
 *                               says InProgress then Success; operations run
 *                               in issue order across streams and blocking
 *                               calls
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_testlib.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"
#include "testutil.h"
#include "perf/common/launch.h"

static int expectShm = 1;

static int hasShm(const char* tls) {
  return strstr(tls, "sysv") || strstr(tls, "posix") || strstr(tls, "cma") || strstr(tls, "xpmem") ||
         strstr(tls, "knem");
}

static int netBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  zppTopology_t topo;
  REQUIRE(zppCommTopology(comm, &topo) == zppSuccess);
  CHECK_EQ_INT(topo.nNodes, 2);
  /* An all-to-all connects every pair; count the bytes it sends. */
  const size_t count = 1000;
  int32_t* in = calloc(count * (size_t)nranks, sizeof(int32_t));
  int32_t* out = calloc(count * (size_t)nranks, sizeof(int32_t));
  REQUIRE(in && out);
  CHECK(zppCommResetStats(comm) == zppSuccess);
  CHECK(zppAllToAll(in, out, count, zppInt32, comm, NULL) == zppSuccess);
  zppCommStats_t st;
  REQUIRE(zppCommGetStats(comm, &st) == zppSuccess);
  CHECK_EQ_INT(st.calls[zppOpAllToAll], 1);
  CHECK_EQ_INT(st.intraNodeBytes[zppOpAllToAll], (topo.localSize - 1) * count * 4);
  CHECK_EQ_INT(st.interNodeBytes[zppOpAllToAll], (nranks - topo.localSize) * count * 4);
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    char tls[128] = "";
    CHECK(zppTransportsPeerTransports(comm, p, tls, sizeof(tls)) == zppSuccess);
    int sameNode = comm->topo->nodeOf[p] == comm->topo->nodeOf[rank];
    printf("rank %d -> rank %d (%s node): %s\n", rank, p, sameNode ? "same" : "other", tls);
    if (sameNode && expectShm) {
      CHECK_MSG(hasShm(tls) && !strstr(tls, "tcp"), "rank %d -> %d inside a node: %s", rank, p, tls);
    } else {
      CHECK_MSG(strstr(tls, "tcp") && !hasShm(tls), "rank %d -> %d across nodes: %s", rank, p, tls);
    }
  }
  CHECK(zppCommDestroy(comm) == zppSuccess);
  free(in);
  free(out);
  return zppTestFailures ? 1 : 0;
}

static int streamBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  const size_t count = 100000;
  float* mine = malloc(count * sizeof(float));
  float* all = malloc(count * (size_t)nranks * sizeof(float));
  float* sum = malloc(count * sizeof(float));
  REQUIRE(mine && all && sum);
  for (size_t i = 0; i < count; i++) mine[i] = (float)(rank + (int)(i % 5));
  zppHostStream_t s1, s2;
  REQUIRE(zppHostStreamCreate(&s1) == zppSuccess && zppHostStreamCreate(&s2) == zppSuccess);
  CHECK_EQ_INT(zppHostStreamQuery(s1), zppSuccess); /* nothing queued */
  /* The last rank starts late, so the others' operations are still running
   * when they ask. */
  if (rank == nranks - 1) zppTestSleep(0.3);
  double t0 = zppClockNow();
  CHECK(zppAllGather(mine, all, count, zppFloat32, comm, s1) == zppSuccess);
  /* Issued after the gather on another stream: runs after it, reads its output. */
  CHECK(zppAllReduce(all, sum, count, zppFloat32, zppSum, comm, s2) == zppSuccess);
  double issue = zppClockNow() - t0;
  CHECK_MSG(issue < 0.1, "issuing took %.3f s: it should not wait", issue);
  if (rank != nranks - 1) {
    CHECK_EQ_INT(zppHostStreamQuery(s1), zppInProgress);
    CHECK_EQ_INT(zppHostStreamQuery(s2), zppInProgress);
  }
  /* "Compute" meanwhile, then wait. */
  volatile double x = 0;
  for (int i = 0; i < 1000000; i++) x += i * 0.5;
  CHECK_EQ_INT(zppHostStreamSynchronize(s2), zppSuccess);
  CHECK_EQ_INT(zppHostStreamQuery(s2), zppSuccess);
  CHECK_EQ_INT(zppHostStreamSynchronize(s1), zppSuccess);
  CHECK_EQ_INT(zppHostStreamQuery(s1), zppSuccess);
  long bad = 0;
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < count; i++) bad += all[(size_t)r * count + i] != (float)(r + (int)(i % 5));
  /* The reduce read the gather's first block (rank 0's values) on every rank. */
  for (size_t i = 0; i < count; i++) bad += sum[i] != (float)(nranks * (int)(i % 5));
  CHECK_MSG(bad == 0, "%ld wrong values after the queued operations", bad);
  /* A blocking call after a queued one sees its result. */
  float v[16];
  for (int i = 0; i < 16; i++) v[i] = 1.0f;
  CHECK(zppAllReduce(v, v, 16, zppFloat32, zppSum, comm, s1) == zppSuccess);
  CHECK(zppBroadcast(v, v, 16, zppFloat32, 0, comm, NULL) == zppSuccess);
  CHECK(v[0] == (float)nranks && v[15] == (float)nranks);
  CHECK_EQ_INT(zppHostStreamQuery(s1), zppSuccess);
  CHECK(zppHostStreamDestroy(s1) == zppSuccess);
  CHECK(zppHostStreamDestroy(s2) == zppSuccess);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  free(mine);
  free(all);
  free(sum);
  return zppTestFailures ? 1 : 0;
}

int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "";
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.timeoutSec = 60;
  zppLaunchFn fn = NULL;
  static const char* noShmEnv[] = {"ZPP_UCX_SHM=0", NULL};
  if (strcmp(which, "net") == 0) {
    o.layout = "2x2";
    fn = netBody;
  } else if (strcmp(which, "noshm") == 0) {
    o.layout = "2x2";
    o.env = noShmEnv;
    expectShm = 0;
    fn = netBody;
  } else if (strcmp(which, "stream") == 0) {
    o.nranks = 3;
    fn = streamBody;
  } else {
    fprintf(stderr, "usage: %s net|noshm|stream\n", argv[0]);
    return 2;
  }
  double t0 = zppClockNow();
  int rc = zppLaunch(&o, fn, NULL);
  printf("%s: %s in %.1f s\n", which, rc == 0 ? "passed" : "FAILED", zppClockNow() - t0);
  return rc;
}
