/*
 * zpp-perf internals: the parsed arguments, the mode table, one result
 * record per table row, and the functions each file of the tool provides.
 *
 *   zpp_perf.c         main: parse, launch (fork / mpirun / env), run, exit code
 *   zpp_perf_args.c    command line, names of types, ops, collectives, usage
 *   zpp_perf_modes.c   the mode table (plain now, qwz/hpz/qgz rows later)
 *   zpp_perf_run.c     the timed loop, checking, reductions across ranks
 *   zpp_perf_launch.c  -N: forks the ranks, hands them the unique id
 *   zpp_perf_report.c  the table and the JSON
 *   zpp_perf_svg.c     the picture
 *   zpp_perf_mpi.c     MPI launch and the --baseline mpi rows
 *   zpp_perf_nccl.c    the --baseline nccl rows (device buffers)
 *
 * Exit codes: 0 all rows right, 1 runtime or library error, 2 bad command
 * line, 3 some result wrong (past its bound).
 */
#ifndef ZPP_PERF_H_
#define ZPP_PERF_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zpp.h"
#include "perf/common/launch.h"
#include "perf_check.h"
#include "perf_device.h"
#include "perf_math.h"
#include "clock.h"

/* 1.1: "rounds" in the JSON header; 1.2: root -1 (rotate); 1.3: timed_from, timed_to */
#define ZPP_PERF_VERSION "1.3"
#define ZPP_PERF_EXIT_OK 0
#define ZPP_PERF_EXIT_ERROR 1
#define ZPP_PERF_EXIT_USAGE 2
#define ZPP_PERF_EXIT_WRONG 3

#define ZPP_PERF_MAX_LIST 32
/* --rounds when a baseline is selected and no --rounds is given: enough
 * alternations that a drift of the machine's state over a run (which ranks
 * share a core) reaches ours and the baseline alike, few enough that every
 * round keeps many iterations at the usual -n. */
#define ZPP_PERF_DEFAULT_ROUNDS 5

typedef enum {
  ZPP_PERF_BASELINE_NONE = 0,
  ZPP_PERF_BASELINE_MPI = 1,
  ZPP_PERF_BASELINE_NCCL = 2
} zppPerfBaseline_t;

/* ---------------------------------------------------------------------------
 * Modes. A mode is one way of doing a collective: "plain" is the zpp call a
 * trainer makes; the ZeRO++ modes are rows of the same table, each bound to
 * the collective whose result it produces (qwz and hpz: allgather; qgz:
 * reducescatter), so the timing, checking and reporting code never changes
 * when a mode is added. A compressed mode supplies its codec's error bound
 * per element and reports its traffic under its own stats kind.
 * ------------------------------------------------------------------------- */

/* Everything one call of a collective needs. */
typedef struct {
  zppComm_t comm;
  int rank, nranks;
  zppPerfColl_t coll;
  zppDataType_t dtype;
  zppRedOp_t redop;
  int root;
  size_t apiCount;
  const void* send; /* host buffers: filled, checked, read by the baselines */
  void* recv;
  const void* runSend; /* what zpp's call gets: send and recv, or (--device) */
  void* runRecv;       /* their device copies */
  void* stream;        /* NULL, or --device's cudaStream_t */
  int bits, block;     /* compressed modes: codec bits (0: exact) and elements per scale */
  void* modeState;     /* from the mode's setup (e.g. hpZ's partitioned parameter) */
  int rotateRoot;      /* -r rotate: timed call i has root i % nranks (root is 0 otherwise) */
  int quantRotate;     /* --rotate: the compressed modes' codec rotates its blocks */
  int errorFeedback;   /* qgz under --error-feedback: its calls go through a zppGrad handle */
} zppPerfCall_t;

/* -r rotate: the broadcast root moves to the next rank every call, so that a
 * call cannot start before the previous one delivered to its root: back to
 * back calls then measure latency (like a ping-pong), not how fast a root
 * can queue messages that its receivers copy out later. */
#define ZPP_PERF_ROOT_ROTATE (-1)

/* The call for timed (or warm-up) iteration i: the root it has then. */
static inline void zppPerfCallAt(zppPerfCall_t* c, int i) {
  if (c->rotateRoot) c->root = i % c->nranks;
}

typedef struct zppPerfMode {
  const char* name;      /* as given to -m and printed */
  zppPerfColl_t coll;    /* whose semantics (and bandwidth formula) it has */
  int compressed;        /* lossy: effective busbw, wire bytes and bounds shown */
  zppOpKind_t statsKind; /* counter the library charges it to */
  const char* summary;   /* one line for the usage text */
  /* NULL while the library has no such call yet: selecting the mode is then
   * a usage error that says so. */
  zppResult_t (*run)(const zppPerfCall_t* call);
  /* Optional, per section (op, mode, dtype, size): builds and frees state the
   * timed loop must not pay for (hpZ's forward gather that fills the
   * secondary shards before the backward gathers are timed). */
  zppResult_t (*setup)(zppPerfCall_t* call);
  void (*teardown)(zppPerfCall_t* call);
  /* Allowed error per element beyond the exact result (NULL: exact), with
   * its preparation for one row: 0 ready, 1 exact after all (e.g. hpZ with
   * an unquantized forward gather), -1 failed. */
  zppPerfBoundFn bound;
  int (*boundPrepare)(const zppPerfCheckSpec_t* spec, const zppPerfCall_t* call,
                      zppPerfCodecBound_t* b);
  int floatOnly;  /* fp32, fp16, bf16 only */
  int sumAvgOnly; /* reductions: sum and avg only */
} zppPerfMode_t;

int zppPerfModeCount(void);
const zppPerfMode_t* zppPerfModeAt(int index);
/* The mode `name` for collective coll, or NULL. */
const zppPerfMode_t* zppPerfModeFind(const char* name, zppPerfColl_t coll);
/* 1 if any collective has a mode of that name (known, maybe unavailable). */
int zppPerfModeNameKnown(const char* name);
/* 1 if the mode measures this type and reduction (else the section is
 * skipped with a note). */
int zppPerfModeApplies(const zppPerfMode_t* mode, zppDataType_t dtype, zppRedOp_t redop);
struct zppPerfArgs;
/* The codec bits and block the mode runs with under these arguments. */
void zppPerfModeParams(const zppPerfMode_t* mode, const struct zppPerfArgs* args, int* bits,
                       int* block);

/* ---------------------------------------------------------------------------
 * Arguments
 * ------------------------------------------------------------------------- */
typedef struct {
  zppPerfColl_t coll;
  const zppPerfMode_t* mode;
} zppPerfTask_t;

typedef struct zppPerfArgs {
  size_t minBytes, maxBytes, stepBytes;
  double stepFactor;
  int iters, warmup, check;
  /* The -n iterations of a row in this many rounds, ours and the baseline's
   * alternating. Final after parsing: 1 without a baseline, else --rounds
   * (default ZPP_PERF_DEFAULT_ROUNDS), at most -n. */
  int rounds;
  zppDataType_t dtypes[ZPP_PERF_MAX_LIST];
  int nDtypes;
  zppRedOp_t redops[ZPP_PERF_MAX_LIST];
  int nRedops;
  int root; /* or ZPP_PERF_ROOT_ROTATE */
  zppPerfTask_t tasks[ZPP_PERF_MAX_LIST];
  int nTasks;
  zppPerfBaseline_t baseline;
  const char* jsonPath; /* -J; the SVG goes next to it */
  const char* svgPath;  /* --svg, overrides the derived path */
  int forkRanks;        /* -N, 0 when not forking */
  /* --layout, in the launcher's forms (perf/common/launch.h: NxL, NxL/cyclic,
   * NxL/shuffle:SEED, a,b,c, @n0,n1,...); NULL when not given. layoutNodeOf
   * holds each of its layoutRanks ranks' node. */
  const char* layout;
  int layoutRanks;
  int layoutNodeOf[ZPP_LAUNCH_MAX_RANKS];
  int quiet;
  int device;                    /* --device: zpp's calls on device buffers and a CUDA stream */
  int timeoutSec;                /* --timeout: sets ZPP_TIMEOUT for the library */
  int qwzBits, qgzBits, hpzBits; /* --qwz-bits (8), --qgz-bits (4), --hpz-bits (8; 0: exact forward) */
  int quantBlock;         /* --block, else ZPP_QUANT_BLOCK, else 0: the codec's default per bits */
  int quantRotate;        /* --rotate, else ZPP_QUANT_ROTATE=1: the rotated codec */
  int errorFeedback;      /* --error-feedback: qgz through a zppGrad handle */
  const char* injectSpec; /* ZPP_PERF_INJECT_ERROR, "rank:elem" */
  int injectRank;
  long injectElem;
  char cmdline[1024]; /* for the JSON header */
} zppPerfArgs_t;

/* Parses argv. Returns 0, or ZPP_PERF_EXIT_USAGE after printing the reason
 * and the usage to stderr; -h prints the usage to stdout and returns -1. */
int zppPerfParseArgs(int argc, char** argv, zppPerfArgs_t* args);
void zppPerfUsage(FILE* f);
/* Parse errors are not printed (a launcher's ranks other than 0). */
void zppPerfArgsSetSilent(int silent);

const char* zppPerfCollName(zppPerfColl_t coll);
const char* zppPerfTypeName(zppDataType_t dtype);
const char* zppPerfRedOpName(zppRedOp_t op);
/* 1 if the collective reduces (takes -o). */
int zppPerfCollReduces(zppPerfColl_t coll);
/* 1 if the collective has a root (takes -r). */
int zppPerfCollRooted(zppPerfColl_t coll);

/* ---------------------------------------------------------------------------
 * Results
 * ------------------------------------------------------------------------- */
typedef struct {
  int present;
  const char* name; /* "mpi", "nccl" */
  double timeUs;    /* median over iterations of the max over ranks */
  double timeUsMean;
  double algbw, busbw;
  uint64_t wrong;
  double maxError;
  /* ours / baseline in busbw (= baseline time / our time): above 1 zpp is
   * faster. For compressed modes it compares effective busbw, the speed the
   * trainer sees. */
  double ratio;
} zppPerfBaseResult_t;

typedef struct {
  zppPerfColl_t coll;
  const char* mode;
  int compressed;
  zppDataType_t dtype;
  zppRedOp_t redop; /* meaningful when the collective reduces */
  int root;         /* meaningful for broadcast; ZPP_PERF_ROOT_ROTATE */
  zppPerfCounts_t counts;
  double timeUs;     /* median over iterations of the max over ranks */
  double timeUsMean; /* mean of the same per-iteration maxima */
  double timeUsMin;
  double timeUsSteady;       /* the slowest rank's back-to-back loop time per call */
  double timedFrom, timedTo; /* wall clock (epoch s): first rank's start, last rank's end */
  double algbw, busbw;       /* busbw: see zpp_perf_run.c for compressed modes */
  double effBusbw;           /* from the bytes the caller asked to move */
  double wireInter;          /* bytes sent across nodes per call, all ranks together */
  double wireIntra;          /* bytes sent inside nodes per call, all ranks together */
  int checked;
  uint64_t wrong;
  double maxError, bound;
  int bits, block;   /* compressed modes */
  int rotated;       /* compressed modes under --rotate */
  int errorFeedback; /* qgz under --error-feedback */
  zppPerfBaseResult_t base;
} zppPerfRecord_t;

/* What the JSON header says about the run. */
typedef struct {
  int ranks, nodes;
  char layout[64]; /* "2x2", or "mixed:3,1" when nodes differ */
  char date[40];   /* UTC, ISO 8601 */
  char host[256];
  const char* launcher; /* "fork", "mpirun", "env", "single" */
  int zppVersion;
  int iters, warmup, check;
  int rounds;
  const char* cmdline;
} zppPerfRunInfo_t;

/* ---------------------------------------------------------------------------
 * Output (rank 0 only)
 * ------------------------------------------------------------------------- */
void zppPerfPrintBanner(FILE* f, const zppPerfRunInfo_t* info, const zppPerfArgs_t* args);
void zppPerfPrintSectionHeader(FILE* f, const zppPerfRecord_t* first, int baseline);
void zppPerfPrintRow(FILE* f, const zppPerfRecord_t* r);
void zppPerfPrintSkipped(FILE* f, size_t sizeBytes);
void zppPerfPrintSummary(FILE* f, const zppPerfRecord_t* recs, size_t n);
/* Writes the JSON file; returns 0 or -1 (with errno-based message printed). */
int zppPerfWriteJson(const char* path, const zppPerfRunInfo_t* info, const zppPerfRecord_t* recs,
                     size_t n);
/* Writes the SVG picture; returns 0 or -1. */
int zppPerfWriteSvg(const char* path, const zppPerfRunInfo_t* info, const zppPerfRecord_t* recs,
                    size_t n);
/* "results.json" -> "results.svg"; anything else gets ".svg" appended. */
void zppPerfSvgPathFor(const char* jsonPath, char* out, size_t len);

/* ---------------------------------------------------------------------------
 * Running
 * ------------------------------------------------------------------------- */
typedef struct {
  zppComm_t comm;
  int rank, nranks;
  zppTopology_t topo;
  const char* launcher;
  int mpiActive; /* MPI_Init was called: MPI baseline possible */
} zppPerfEnv_t;

/* Runs every task and prints (rank 0). Returns an exit code. */
int zppPerfRunAll(const zppPerfArgs_t* args, zppPerfEnv_t* env);

/* Prints a library error the way every path of the tool does. */
void zppPerfLibError(const zppPerfEnv_t* env, const char* what, zppResult_t res);

/* Monotonic seconds. */

/* -N: forks args->forkRanks ranks, each running zppPerfRankMain; returns the
 * worst exit code. */
int zppPerfForkRun(const zppPerfArgs_t* args);
/* One rank after its communicator exists: runs and destroys it. */
int zppPerfRankMain(const zppPerfArgs_t* args, zppPerfEnv_t* env);
/* Sets ZPP_HOSTID for `rank` from --layout (node<k>), if given. */
void zppPerfApplyLayout(const zppPerfArgs_t* args, int rank);

/* ---------------------------------------------------------------------------
 * Baselines. A row's baseline runs in three steps, so that its timed
 * iterations can alternate with ours (--rounds) instead of following them:
 *
 *   prepare  puts the row's input where the baseline reads it, runs the
 *            checked call (-c 1) and the warm-up; sets row->present (0: this
 *            row has no baseline, e.g. counts past MPI's int) and row->chk;
 *   time     times n calls, one at a time, into times[0..n) (this rank's
 *            seconds per call); called once per round;
 *   finish   reduces over ranks (per iteration the slowest rank, the worst
 *            error, the wrong elements) and fills base from the `n` times
 *            of every round together.
 *
 * Every rank makes the same calls in the same order. All return zppSuccess
 * or an error already reported. The call's host buffers hold the verifiable
 * input; its recv buffer may be overwritten (ours has checked its result
 * before the baseline's prepare).
 * ------------------------------------------------------------------------- */
typedef struct {
  const zppPerfArgs_t* args;
  const zppPerfEnv_t* env;
  const zppPerfCall_t* call;
  const zppPerfCounts_t* counts;
  int present;              /* set by prepare */
  zppPerfCheckResult_t chk; /* set by prepare: this rank's checked call */
} zppPerfBaseRow_t;

/* For the finish steps: fills base (named name) from tmax, the slowest
 * rank's seconds per iteration (n of them; sorted in place), the wrong
 * elements summed over ranks and the worst error over ranks. */
void zppPerfBaseFill(const zppPerfBaseRow_t* row, const char* name, double* tmax, int n, double wrong,
                     double maxError, zppPerfBaseResult_t* base);

int zppPerfMpiAvailable(void); /* built with MPI */
int zppPerfMpiLaunched(void);  /* mpirun's environment is present */
int zppPerfMpiInit(int* argc, char*** argv);
void zppPerfMpiFinalize(void);
/* Rank 0's id to everyone over MPI_COMM_WORLD, with whether rank 0 could
 * make one (so that a failure there does not leave the others waiting).
 * Returns rank 0's ok. */
int zppPerfMpiBcastId(zppUniqueId* id, int ok);
int zppPerfMpiRankSize(int* rank, int* size);
zppResult_t zppPerfMpiPrepare(zppPerfBaseRow_t* row);
zppResult_t zppPerfMpiTime(const zppPerfBaseRow_t* row, double* times, int n);
zppResult_t zppPerfMpiFinish(const zppPerfBaseRow_t* row, const double* times, int n,
                             zppPerfBaseResult_t* base);

int zppPerfNcclAvailable(void); /* built with NCCL */

/* --device: zpp's calls on device buffers (perf/common/perf_device.h);
 * these report a failure on stderr as every path of the tool does. */
zppResult_t zppPerfDeviceInit(const zppPerfEnv_t* env, void** stream);
zppResult_t zppPerfDeviceCopyChecked(const zppPerfEnv_t* env, void* dst, const void* src, size_t bytes,
                                     int toDevice);
zppResult_t zppPerfDeviceSyncChecked(const zppPerfEnv_t* env, void* stream);
zppResult_t zppPerfNcclInit(const zppPerfEnv_t* env, const zppPerfArgs_t* args);
void zppPerfNcclFinalize(void);
zppResult_t zppPerfNcclPrepare(zppPerfBaseRow_t* row);
zppResult_t zppPerfNcclTime(const zppPerfBaseRow_t* row, double* times, int n);
zppResult_t zppPerfNcclFinish(const zppPerfBaseRow_t* row, const double* times, int n,
                              zppPerfBaseResult_t* base);

#endif /* ZPP_PERF_H_ */
