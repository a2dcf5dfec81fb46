/*
 * zpp-health: the pre-job all-reduce check that finds the bad node.
 *
 * Shape of the program (docs/zpp-health.md has the user's view):
 *
 *   zpp_health.c         main, launch (-N fork, torchrun / mpirun env), a rank's life
 *   zpp_health_args.c    command line, expectation units, baseline files
 *   zpp_health_ctl.c     the control plane: TCP star to rank 0, heartbeats, watchdog
 *   zpp_health_test.c    one test on one rank: communicator, data, timing, checking
 *   zpp_health_coord.c   rank 0: runs batches of tests, tells hung and dead ranks apart
 *   zpp_health_locate.c  rank 0: expectation, bisection, pair tests
 *   zpp_health_run.c     rank 0: the run from start to verdict, wrong-data search, baseline
 *   zpp_health_report.c  summary, JSON, progress line
 *   zpp_health_prom.c    Prometheus metrics (--prometheus)
 *
 * Data moves only through zpp communicators made for each test among the
 * ranks it concerns (a unique id from rank 0, sent over the control plane),
 * so a test of a subset measures that subset's links. The control plane is
 * plain TCP and independent of the library: a rank that hangs inside a
 * collective, or a communicator that breaks, never takes the coordination
 * down with it.
 */
#ifndef ZPP_HEALTH_H_
#define ZPP_HEALTH_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>

#include "zpp.h"
#include "clock.h"

#define ZPP_HEALTH_VERSION "1.0"

/* Exit codes, for scheduler prologs (worst first when several apply:
 * hung/dead, wrong data, slow). */
#define ZPP_HEALTH_EXIT_OK 0    /* healthy */
#define ZPP_HEALTH_EXIT_SLOW 1  /* bandwidth below the expectation */
#define ZPP_HEALTH_EXIT_USAGE 2 /* bad arguments, bad baseline file */
#define ZPP_HEALTH_EXIT_WRONG 3 /* a rank returned or sent wrong data */
#define ZPP_HEALTH_EXIT_HUNG 4  /* a rank hung, died or never joined */
#define ZPP_HEALTH_EXIT_ERROR 5 /* the check itself could not run */

#define ZH_MAX_RANKS 4096
#define ZH_MAX_TRIALS 32
#define ZH_HOSTID_LEN 64

/* ---- arguments ------------------------------------------------------------ */

typedef enum { ZH_EXPECT_P2P = 0, ZH_EXPECT_CMDLINE = 1, ZH_EXPECT_BASELINE = 2 } zhExpectFrom_t;

typedef struct {
  int ranks, nodes;
  size_t bytes;
  double allreduceBusbw; /* GB/s */
  double allgatherBusbw; /* GB/s, 0 if absent */
  double p2pBusbw;       /* GB/s, 0 if absent */
  char created[40];
} zppHealthBaseline_t;

typedef struct {
  /* launch */
  int forkRanks; /* -N */
  int layoutNodes, layoutPerNode;
  int ctlPort;       /* 0: from the environment (env launch) or picked (-N) */
  char ctlHost[256]; /* rank 0's address as the others reach it ("" until known) */
  /* measurement */
  size_t sizeBytes; /* 0: auto */
  double targetSec; /* auto size: one iteration at least this long */
  size_t maxAutoBytes;
  int trials, iters, warmup;
  int device; /* --device: the trials on device buffers (GPUs and NCCL) */
  /* expectation */
  zhExpectFrom_t expectFrom;
  double expectGBps;   /* --expect-busbw, in GB/s */
  char expectText[64]; /* as given, for the report */
  const char* baselinePath;
  const char* saveBaselinePath;
  double threshold;
  double localizeThreshold; /* sets and pairs: named below this x expectation */
  int p2pRounds;
  /* localization */
  int localize;
  int parallel; /* -1 auto, 0 serial, 1 parallel */
  /* bounds */
  double timeoutSec;   /* every wait; stalled longer than this (+ grace) is hung */
  double timeLimitSec; /* total run time */
  /* output */
  const char* jsonPath;
  const char* promPath; /* --prometheus: textfile-collector metrics */
  int quiet, verbose;
  int progress; /* -1 auto (a terminal), 0 off, 1 on */
} zppHealthArgs_t;

/* Parses argv; returns 0, or ZPP_HEALTH_EXIT_USAGE after printing why (or
 * after --help, with *exitNow set to 0). */
int zppHealthParseArgs(int argc, char** argv, zppHealthArgs_t* a, int* exitNow);
/* "0.9", "0.9GB/s", "7.5 Gbit/s", "950Mbit/s" -> GB/s (1e9 bytes/s). -1 if bad. */
int zppHealthParseBandwidth(const char* text, double* gbps);
/* Reads a baseline file; on failure writes a one-line reason into err. */
int zppHealthLoadBaseline(const char* path, zppHealthBaseline_t* b, char* err, size_t errLen);
int zppHealthSaveBaseline(const char* path, const zppHealthBaseline_t* b, char* err, size_t errLen);

/* ---- control plane ---------------------------------------------------------- */

enum {
  ZH_MSG_HELLO = 1,   /* worker -> rank 0, first message */
  ZH_MSG_WELCOME = 2, /* rank 0 -> worker: accepted, or why not */
  ZH_MSG_TEST = 3,    /* rank 0 -> worker: run this test */
  ZH_MSG_RESULT = 4,  /* worker -> rank 0 */
  ZH_MSG_HB = 5,      /* both ways, every ZH_HB_PERIOD seconds */
  ZH_MSG_QUIT = 6,    /* rank 0 -> worker: exit with this code */
  ZH_MSG_QUIT_ACK = 7 /* worker -> rank 0: holds the code; exits when rank 0's connection closes */
};

#define ZH_HB_PERIOD 0.5

typedef struct {
  int32_t rank, nranks, pid;
  char hostId[ZH_HOSTID_LEN]; /* the library's node identity: ZPP_HOSTID, else the host name */
  char hostname[ZH_HOSTID_LEN];
  char bootId[40]; /* ranks of one machine: emulated nodes share its CPUs */
} zhHello_t;

typedef struct {
  int32_t ok;
  char reason[200];
} zhWelcome_t;

#define ZH_COLL_ALLREDUCE 1
#define ZH_COLL_ALLGATHER 2

typedef struct {
  int32_t testId;
  int32_t colls;  /* ZH_COLL_* */
  uint64_t bytes; /* nccl-tests bytes of the all-reduce (and the all-gather) */
  int32_t warmup, trials, iters;
  int32_t calibrate; /* 1: first pick the size (all-reduce doubling up to maxBytes) */
  uint64_t maxBytes;
  double targetSec;
  double budgetSec; /* stop starting trials after this long */
  int32_t nGroup, groupRank;
  int32_t device; /* 1: trials on device buffers (--device) */
  zppUniqueId id;
} zhTestMsg_t;

typedef struct {
  int32_t testId, rank, status; /* status 0 ok, else failed (error says why) */
  int32_t nGroup, groupRank;
  uint64_t bytes;     /* the size used (after calibration) */
  int32_t nTrials[2]; /* [0] all-reduce, [1] all-gather */
  double trialSec[2][ZH_MAX_TRIALS];
  uint64_t wrongAllreduce; /* elements of this rank's all-reduce results that were wrong */
  uint64_t wrongAllgather;
  double initSec; /* communicator creation */
  char error[320];
  /* followed by uint32_t wrongFrom[nGroup]: all-gather elements wrong per origin */
} zhResultMsg_t;

typedef struct {
  int32_t rank, testId; /* testId -1: idle */
  double stalledSec;    /* inside a test: seconds without progress */
  uint64_t bytesSent;
} zhHbMsg_t;

typedef struct {
  int32_t code;
  char reason[600];
} zhQuitMsg_t;

typedef struct {
  int fd;
  int rank;
  /* Set only by the reader (zhCtlRecv: EOF, a read error, garbage) or at
   * shutdown; then fd is closed. A failed send does not set it: the reader
   * must still see why (EOF or ECONNRESET from a process that exited, or
   * nothing from one that merely stopped reading), and what was queued before. */
  atomic_int closed;
  /* 0, or the errno of the send that failed (ETIMEDOUT: no room for 10 s).
   * No more sends after one: a half-sent message breaks the framing. */
  atomic_int sendErr;
  pthread_mutex_t wlock; /* main and heartbeat thread both write; held to send on fd or close it */
  char* rbuf;            /* bytes read but not yet a whole message */
  size_t rlen, rcap;
} zhConn_t;

/* What this rank is doing, for its heartbeats (written by the main thread,
 * read by the heartbeat thread). */
typedef struct {
  pthread_mutex_t mu;
  zppComm_t comm;
  int testId;
  double since; /* test start or last progress */
  uint64_t lastBytes;
} zhProgress_t;

typedef struct {
  int rank, nranks;
  int listenFd;
  zhConn_t* conns; /* rank 0: one per rank (conns[0] unused); others: conns[0] = rank 0 */
  int nConns;
  zhProgress_t progress;
  double hardDeadline;
  atomic_int mainDone; /* set when the rank finished normally */
  atomic_int exitCode; /* what the watchdog exits with */
  pthread_t hbThread;
  int hbStarted;
  atomic_int hbStop;
} zhCtl_t;

int zhCtlListen(zhCtl_t* c, int port, char* err, size_t errLen);
/* Rank 0: accepts the others' hellos until all arrived or the deadline;
 * hellos[r] filled, missing ranks have hellos[r].pid == 0. */
int zhCtlAcceptAll(zhCtl_t* c, zhHello_t* hellos, double deadline, char* err, size_t errLen);
/* Others: connects (retrying until the deadline) and says hello. */
int zhCtlConnect(zhCtl_t* c, const char* host, int port, const zhHello_t* me, double deadline,
                 char* err, size_t errLen);
/* 0 sent; -1 not (closed, or this or an earlier send failed: k->sendErr). */
int zhCtlSend(zhConn_t* k, uint32_t type, const void* payload, uint32_t len);
/* Reads one message if one arrives before the deadline: 1 got one, 0 timed
 * out, -1 connection closed or broken. *payload is malloc()ed. */
int zhCtlRecv(zhConn_t* k, double deadline, uint32_t* type, void** payload, uint32_t* len);
/* Starts the heartbeat/watchdog thread. */
int zhCtlStartHeartbeat(zhCtl_t* c);
void zhCtlClose(zhCtl_t* c);
void zhProgressBegin(zhProgress_t* p, int testId);
void zhProgressSetComm(zhProgress_t* p, zppComm_t comm);
void zhProgressTick(zhProgress_t* p);
void zhProgressEnd(zhProgress_t* p);

/* ---- one test, on one rank ----------------------------------------------------- */

/* Runs msg on this rank; fills res (and wrongFrom[nGroup]). Never blocks
 * longer than the communicator's timeout without progress. The caller ends
 * the progress record (zhProgressEnd) once the result is on its way. */
void zhRunTest(const zhTestMsg_t* msg, zhProgress_t* prog, zhResultMsg_t* res, uint32_t* wrongFrom);

/* ---- rank 0 --------------------------------------------------------------------- */

typedef enum { ZH_RANK_OK = 0, ZH_RANK_HUNG = 1, ZH_RANK_DEAD = 2, ZH_RANK_MISSING = 3 } zhRankState_t;

typedef struct {
  zhHello_t hello;
  int unit;
  zhRankState_t state;
  char why[400];  /* evidence for a hung or dead rank */
  char seen[240]; /* what another rank saw of it */
  int lostTest;   /* the test it hung or died in */
  double lastHeard;
  zhHbMsg_t hb;
  int haveHb;
} zhRankInfo_t;

typedef struct {
  char name[ZH_HOSTID_LEN];
  int nRanks;
  int* ranks;
} zhUnit_t;

typedef struct {
  int id;
  const char* kind; /* "world", "p2p", "half", "pair", "confirm", "link", "data" */
  int nUnits;
  int* units; /* units tested (empty for rank-level tests) */
  int nRanks;
  int* ranks; /* world ranks, ascending = group rank order */
  int colls;
  size_t bytes;
  int trials[2];
  double busbw[2][ZH_MAX_TRIALS];
  double median[2], min[2];
  int judged, pass; /* pass: every trial >= the required busbw (all-reduce) */
  double required;  /* what it was judged against: the world's or the local one */
  int subject;      /* pair stage: the candidate node tested (-1: none) */
  int failed;       /* a rank reported an error or did not answer */
  char error[400];
  uint64_t wrong;      /* wrong elements over all ranks */
  uint32_t* wrongFrom; /* [nRanks][nRanks]: receiver x origin, all-gather */
  double start, seconds;
} zhTest_t;

typedef enum { ZH_SUS_NODE = 0, ZH_SUS_LINK = 1, ZH_SUS_RANK = 2, ZH_SUS_SET = 3 } zhSuspectKind_t;
typedef enum { ZH_PROB_SLOW = 0, ZH_PROB_WRONG = 1, ZH_PROB_HUNG = 2, ZH_PROB_DEAD = 3 } zhProblem_t;

typedef struct {
  zhSuspectKind_t kind;
  zhProblem_t problem;
  int a, b; /* units (node, link) or rank (rank); b = -1 */
  int* set; /* ZH_SUS_SET: the units */
  int nSet;
  double busbw; /* slow: median rate measured */
  int tests[16];
  int nTests;
  char evidence[600];
} zhSuspect_t;

typedef struct {
  const zppHealthArgs_t* a;
  zhCtl_t* ctl;
  int nranks;
  zhRankInfo_t* ranks;
  int nUnits;
  zhUnit_t* units;
  int unitsAreNodes, nNodes;
  int oneMachine, parallel;
  double t0, limitAt;
  zppHealthBaseline_t baseline;
  int haveBaseline;
  double expect, required; /* GB/s: the expectation and threshold x expectation */
  double requiredLocal;    /* GB/s: localize-threshold x expectation, for sets and pairs */
  const char* expectFrom;
  size_t bytes;
  zhTest_t** tests; /* each allocated alone: pointers stay valid as tests are added */
  int nTests, capTests;
  int worldTest;
  zhSuspect_t* sus;
  int nSus, capSus;
  int trialsRun;
  int broken; /* a rank hung or died: no more tests */
  int wrongSeen;
  int incomplete; /* stopped by the time limit */
  char notes[6][240];
  int nNotes;
  int verdict;
  char reason[600];
  int progressOn;
  const char* phase;
} zhCoord_t;

/* zpp_health_coord.c */
void zhCoordFree(zhCoord_t* c);
/* Runs tests at once (their rank sets must be disjoint); returns the number
 * that completed on every rank. */
int zhRunBatch(zhCoord_t* c, int n, zhTest_t** tests);
zhTest_t* zhNewTest(zhCoord_t* c, const char* kind, int nUnits, const int* units, int colls);
zhTest_t* zhNewRankTest(zhCoord_t* c, const char* kind, int nRanks, const int* ranks, int colls);
zhSuspect_t* zhAddSuspect(zhCoord_t* c, zhSuspectKind_t kind, zhProblem_t problem, int a, int b);
void zhNote(zhCoord_t* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
double zhRemaining(const zhCoord_t* c);
/* Seconds a test of nUnits units is expected to take (for the time limit). */
double zhEstimate(const zhCoord_t* c, const zhTest_t* t);
void zhJudge(zhCoord_t* c, zhTest_t* t);

/* zpp_health_locate.c */
void zhMeasureExpectation(zhCoord_t* c);
void zhLocalizeSlow(zhCoord_t* c);
const char* zhUnitName(const zhCoord_t* c, int unit);
/* Runs the tests at once when parallel (their nodes are disjoint), else one
 * by one; skips what the time limit no longer allows. */
void zhRunAll(zhCoord_t* c, int n, zhTest_t** t);

/* zpp_health_run.c: the whole run of rank 0; returns the exit code */
int zhCoordRun(zhCoord_t* c);
void zhLocalizeWrong(zhCoord_t* c);

/* zpp_health_report.c */
void zhProgressLine(zhCoord_t* c, const char* what);
void zhProgressClear(zhCoord_t* c);
void zhPrintSummary(const zhCoord_t* c, FILE* f);
int zhWriteJson(const zhCoord_t* c, const char* path, char* err, size_t errLen);
/* Written by rank 1 when rank 0 (the coordinator) hung or died. */
int zhWriteFallbackJson(const zppHealthArgs_t* a, int nranks, const char* problem, const char* why,
                        double elapsed);
void zhFormatRate(double gbps, char* buf, size_t len);

/* zpp_health_prom.c: --prometheus, for node_exporter's textfile collector */
int zhWritePrometheus(const zhCoord_t* c, const char* path, char* err, size_t errLen);
/* Written by rank 1 when rank 0 (the coordinator) hung or died. */
int zhWriteFallbackPrometheus(const char* path, int nranks, const char* problem, char* err,
                              size_t errLen);
const char* zhVerdictName(int code);

#endif /* ZPP_HEALTH_H_ */
