/*
 * The device path's byte counter (lib/stats.h, zppStatsCountDevice) without
 * a GPU: on 2 nodes x 2 ranks, bytes for every other rank and for single
 * peers land in zppCommGetStats as intra- or inter-node bytes by the peer's
 * node, under their kind only, nothing for this rank itself, added to the
 * host transport's bytes of the same kind, and zppCommResetStats clears
 * them. (The device calls that use it run where a GPU is: test_coll_gpu,
 * test_zeropp_gpu.)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "perf/common/launch.h"
#include "lib/stats.h"

static void expectBytes(zppComm_t comm, int rank, const char* what, zppOpKind_t kind, uint64_t intra,
                        uint64_t inter) {
  zppCommStats_t s;
  REQUIRE(zppCommGetStats(comm, &s) == zppSuccess);
  CHECK_MSG(s.intraNodeBytes[kind] == intra && s.interNodeBytes[kind] == inter,
            "rank %d: %s: intra %llu inter %llu, want %llu and %llu", rank, what,
            (unsigned long long)s.intraNodeBytes[kind], (unsigned long long)s.interNodeBytes[kind],
            (unsigned long long)intra, (unsigned long long)inter);
  for (int k = 0; k < zppNumOpKinds; k++)
    CHECK_MSG(k == (int)kind || (s.intraNodeBytes[k] == 0 && s.interNodeBytes[k] == 0),
              "rank %d: %s: %s has bytes too", rank, what, zppOpKindName((zppOpKind_t)k));
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  zppTopology_t topo;
  REQUIRE(zppCommTopology(comm, &topo) == zppSuccess);
  REQUIRE(nranks == 4 && topo.nNodes == 2 && topo.localSize == 2 && topo.node == rank / 2);
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  expectBytes(comm, rank, "after a reset", zppOpQwZ, 0, 0);
  /* Every other rank: one on this node, two on the other. */
  zppStatsCountDevice(comm, zppOpQwZ, ZPP_STATS_EVERY_PEER, 1000);
  zppStatsCountDevice(comm, zppOpQwZ, ZPP_STATS_EVERY_PEER, 7);
  expectBytes(comm, rank, "every peer", zppOpQwZ, 1007, 2014);
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  /* Each rank by itself (this one: nothing), as qgZ's sends count. */
  for (int p = 0; p < nranks; p++) zppStatsCountDevice(comm, zppOpQgZ, p, 100 + (uint64_t)p);
  uint64_t intra = 0, inter = 0;
  for (int p = 0; p < nranks; p++)
    if (p != rank) *(p / 2 == rank / 2 ? &intra : &inter) += 100 + (uint64_t)p;
  expectBytes(comm, rank, "one peer at a time", zppOpQgZ, intra, inter);
  REQUIRE(zppCommResetStats(comm) == zppSuccess);
  expectBytes(comm, rank, "after the second reset", zppOpQgZ, 0, 0);
  /* Added to the host transport's bytes of the same kind: a host
   * all-gather, then device bytes under its kind. */
  char mine[64], all[4 * 64];
  memset(mine, rank, sizeof mine);
  REQUIRE(zppAllGather(mine, all, sizeof mine, zppUint8, comm, NULL) == zppSuccess);
  zppCommStats_t host;
  REQUIRE(zppCommGetStats(comm, &host) == zppSuccess);
  CHECK(host.intraNodeBytes[zppOpAllGather] + host.interNodeBytes[zppOpAllGather] > 0);
  zppStatsCountDevice(comm, zppOpAllGather, ZPP_STATS_EVERY_PEER, 5);
  expectBytes(comm, rank, "host and device", zppOpAllGather, host.intraNodeBytes[zppOpAllGather] + 5,
              host.interNodeBytes[zppOpAllGather] + 10);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  return zppTestFailures ? 1 : 0;
}

int main(int argc, char** argv) {
  (void)argc;
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.layout = "2x2";
  o.timeoutSec = 60;
  int rc = zppLaunch(&o, body, NULL);
  CHECK_MSG(rc == 0, "ranks failed (launcher result %d)", rc);
  return zppTestExit(argv[0]);
}
