/*
 * zpp_launch: runs N ranks of a function on this machine, for tests and
 * tools (static library target zpp_launch; include "perf/common/launch.h").
 *
 * Usage:
 *
 *   static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
 *     zppComm_t comm;
 *     if (zppCommInitRank(&comm, nranks, *id, rank) != zppSuccess) return 1;
 *     ...                                  // check things; any exit code
 *     zppCommDestroy(comm);
 *     return 0;                            // 0 pass, 77 skip, else fail
 *   }
 *
 *   zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
 *   o.nranks = 4;
 *   o.layout = "2x2";            // optional: ZPP_HOSTID per rank, 2 nodes of 2
 *   o.timeoutSec = 60;           // every rank killed after this
 *   int rc = zppLaunch(&o, body, NULL);   // 0 when every rank returned 0
 *
 * Each rank is a fork()ed child: its own process, as in a real job, so that
 * a crash or a hang is one rank's, not the test's. Rank 0 calls
 * zppGetUniqueId and hands the id to the others through a pipe (the root
 * lives in rank 0, as with NCCL and MPI_Bcast); with ZPP_LAUNCH_ID_NONE
 * the ranks make their own rendezvous (e.g. zppCommInitFromEnv).
 * The launcher reports each rank that failed, was killed by a signal or
 * timed out, on stderr.
 */
#ifndef ZPP_TOOLS_LAUNCH_H_
#define ZPP_TOOLS_LAUNCH_H_

#include "zpp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*zppLaunchFn)(int rank, int nranks, const zppUniqueId* id, void* arg);

typedef enum {
  ZPP_LAUNCH_ID_RANK0 = 0, /* rank 0 calls zppGetUniqueId and passes the id on */
  ZPP_LAUNCH_ID_NONE = 1   /* no id: the ranks rendezvous by themselves */
} zppLaunchIdMode_t;

#define ZPP_LAUNCH_MAX_RANKS 256

typedef struct {
  int nranks; /* 0: taken from the layout */
  /* NULL, or the node of each rank, which sets ZPP_HOSTID=node<k> in it:
   *   "NxL"               N nodes of L ranks, in blocks (node k: ranks kL..kL+L-1)
   *   "NxL/cyclic"        the same nodes taken in turn (rank r on node r % N)
   *   "NxL/shuffle:SEED"  the block layout under a random permutation of ranks
   *   "a,b,c"             a ranks on node 0, then b on node 1, ... (blocks)
   *   "@n0,n1,..."        rank r on node n_r, explicitly */
  const char* layout;
  double timeoutSec; /* every rank still running after this is killed; <= 0: 120 s */
  zppLaunchIdMode_t idMode;
  /* torchrun-style environment in every rank: RANK, WORLD_SIZE, LOCAL_RANK,
   * LOCAL_WORLD_SIZE (from the layout), MASTER_ADDR=127.0.0.1 and a
   * MASTER_PORT whose root port (MASTER_PORT + ZPP_MASTER_PORT_OFFSET, 1) was
   * free when looked up. */
  int torchrunEnv;
  /* "NAME=VALUE" set in every rank, NULL-terminated; may be NULL. */
  const char* const* env;
  /* Called in each rank before fn, after the environment above, to set a
   * rank's own environment or state. May be NULL. */
  void (*setupRank)(int rank, int nranks, void* arg);
  /* Receives each rank's outcome: its exit code, 128 + signal when killed
   * by a signal, or -1 when killed at the timeout. May be NULL. */
  int* statusOut;
  int quiet; /* 1: report nothing, even failures (a test that expects them) */
} zppLaunchOpts_t;

#define ZPP_LAUNCH_OPTS_INIT \
  { 0, NULL, 0.0, ZPP_LAUNCH_ID_RANK0, 0, NULL, NULL, NULL, 0 }

/* Runs fn in opts->nranks processes and waits for all. Returns 0 when every
 * rank returned 0, 77 when every rank returned 0 or 77 and one returned 77
 * (skipped), 1 otherwise (a rank failed, crashed or timed out), 2 when the
 * launch itself failed (bad options, fork). */
int zppLaunch(const zppLaunchOpts_t* opts, zppLaunchFn fn, void* arg);

/* Parses a layout into per-rank node numbers: nodeOf[nranks], returns the
 * rank count (at most maxRanks), or -1 for a bad layout. */
int zppLaunchParseLayout(const char* layout, int* nodeOf, int maxRanks);

/* One more process, for a test or tool that starts processes as it goes (a
 * replacement for a lost rank, say): a fork()ed child that dies with its
 * parent, with ZPP_HOSTID=node<node> (node >= 0; < 0: inherited), runs
 * fn(arg) and exits with its return value. Returns the child's pid, or -1
 * (errno set) when fork failed. The caller reaps it (waitpid). */
typedef int (*zppLaunchSpawnFn)(void* arg);
int zppLaunchSpawn(int node, zppLaunchSpawnFn fn, void* arg);

/* A TCP port on 127.0.0.1 that was free when asked (0 on error). */
int zppLaunchFreePort(void);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_TOOLS_LAUNCH_H_ */
