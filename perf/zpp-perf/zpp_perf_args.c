/*
 * zpp-perf's command line. The size, iteration, check, type, op and root
 * flags are nccl-tests' (same letters, same meaning), so its users feel at
 * home. One difference is forced: nccl-tests' -t is a thread count and its
 * --op the reduction; here -t/--coll picks the collectives (a comma list, so
 * that one run measures several) and -o/--op stays the reduction.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "names.h"
#include "perf/common/launch.h"
#include "zpp_perf.h"

static const char* const zppPerfCollNames[ZPP_PERF_NUM_COLLS] = {
    "allgather", "reducescatter", "allreduce", "alltoall", "broadcast",
    "sendrecv",  "reduce",        "gather",    "scatter",  "alltoallv"};

const char* zppPerfCollName(zppPerfColl_t coll) {
  return (coll >= 0 && coll < ZPP_PERF_NUM_COLLS) ? zppPerfCollNames[coll] : "?";
}

int zppPerfCollReduces(zppPerfColl_t coll) {
  return coll == ZPP_PERF_REDUCESCATTER || coll == ZPP_PERF_ALLREDUCE || coll == ZPP_PERF_REDUCE;
}

int zppPerfCollRooted(zppPerfColl_t coll) {
  return coll == ZPP_PERF_BROADCAST || coll == ZPP_PERF_REDUCE || coll == ZPP_PERF_GATHER ||
         coll == ZPP_PERF_SCATTER;
}

typedef struct {
  const char* name;
  int value;
} zppPerfName_t;

/* Types are printed with nccl-tests' names (its output and ours read
 * alike); any spelling core/names.h knows is accepted. */
static const char* const zppPerfTypeNames[zppNumTypes] = {
    [zppInt8] = "int8",      [zppUint8] = "uint8",      [zppInt32] = "int32",  [zppUint32] = "uint32",
    [zppInt64] = "int64",    [zppUint64] = "uint64",    [zppFloat16] = "half", [zppFloat32] = "float",
    [zppFloat64] = "double", [zppBfloat16] = "bfloat16"};

static const zppPerfName_t zppPerfCollAliases[] = {{"allgather", ZPP_PERF_ALLGATHER},
                                                   {"all_gather", ZPP_PERF_ALLGATHER},
                                                   {"ag", ZPP_PERF_ALLGATHER},
                                                   {"reducescatter", ZPP_PERF_REDUCESCATTER},
                                                   {"reduce_scatter", ZPP_PERF_REDUCESCATTER},
                                                   {"rs", ZPP_PERF_REDUCESCATTER},
                                                   {"allreduce", ZPP_PERF_ALLREDUCE},
                                                   {"all_reduce", ZPP_PERF_ALLREDUCE},
                                                   {"ar", ZPP_PERF_ALLREDUCE},
                                                   {"alltoall", ZPP_PERF_ALLTOALL},
                                                   {"all_to_all", ZPP_PERF_ALLTOALL},
                                                   {"a2a", ZPP_PERF_ALLTOALL},
                                                   {"broadcast", ZPP_PERF_BROADCAST},
                                                   {"bcast", ZPP_PERF_BROADCAST},
                                                   {"sendrecv", ZPP_PERF_SENDRECV},
                                                   {"send_recv", ZPP_PERF_SENDRECV},
                                                   {"p2p", ZPP_PERF_SENDRECV},
                                                   {"reduce", ZPP_PERF_REDUCE},
                                                   {"gather", ZPP_PERF_GATHER},
                                                   {"scatter", ZPP_PERF_SCATTER},
                                                   {"alltoallv", ZPP_PERF_ALLTOALLV},
                                                   {"a2av", ZPP_PERF_ALLTOALLV},
                                                   {NULL, 0}};

static int zppPerfLookup(const zppPerfName_t* table, const char* name, int* value) {
  for (const zppPerfName_t* t = table; t->name != NULL; t++) {
    if (strcasecmp(t->name, name) == 0) {
      *value = t->value;
      return 0;
    }
  }
  return -1;
}

const char* zppPerfTypeName(zppDataType_t dtype) {
  return (int)dtype >= 0 && dtype < zppNumTypes ? zppPerfTypeNames[dtype] : "?";
}
const char* zppPerfRedOpName(zppRedOp_t op) { return zppRedOpName(op); }

void zppPerfUsage(FILE* f) {
  fprintf(f,
          "usage: zpp-perf [options]\n"
          "Bandwidth of zpp's collectives, nccl-tests style, with optional baselines.\n"
          "\n"
          "sizes and iterations (nccl-tests' flags):\n"
          "  -b, --minbytes SIZE     smallest size (default 32M); K/M/G = 2^10/2^20/2^30\n"
          "  -e, --maxbytes SIZE     largest size (default 32M)\n"
          "  -f, --stepfactor F      multiply the size by F each step (used when > 1)\n"
          "  -i, --stepbytes SIZE    else add SIZE each step (default 1M)\n"
          "  -n, --iters N           timed iterations per size (default 20)\n"
          "  -w, --warmup_iters N    untimed iterations first (default 5)\n"
          "  -c, --check 0|1         verify every element of one extra call (default 1)\n"
          "  -d, --datatype LIST     int8 uint8 int32 uint32 int64 uint64 half float double\n"
          "                          bfloat16, comma separated or 'all' (default float)\n"
          "  -o, --op LIST           sum prod max min avg, or 'all' (default sum)\n"
          "  -r, --root N|rotate     root of broadcast, reduce, gather, scatter (default\n"
          "                          0); rotate: call i has root\n"
          "                          i %% ranks, so calls cannot overlap (latency)\n"
          "\n"
          "what to measure:\n"
          "  -t, --coll LIST         (also --operation) allgather reducescatter allreduce\n"
          "                          alltoall broadcast, sendrecv (point-to-point: pairs\n"
          "                          0<->1, 2<->3, ... exchange both ways at once),\n"
          "                          reduce gather scatter, alltoallv (uneven: 1.5x to\n"
          "                          the next rank, 0.5x to the previous one),\n"
          "                          'all' (the collectives), a compressed mode name\n"
          "                          (qwz hpz qgz), or\n"
          "                          COLL:MODE (default allgather,reducescatter)\n"
          "  -m, --mode LIST         modes for the collectives named in -t (default plain)\n"
          "      --qwz-bits 8|4      codec bits of qwz (default 8), --qgz-bits (default 4;\n"
          "                          also 2),\n"
          "      --hpz-bits 8|4|0    --hpz-bits of hpz's forward gather (default 8, 0 exact)\n"
          "      --block N           elements per scale (sets ZPP_QUANT_BLOCK; default the\n"
          "                          codec's: 256 for 8 bits, 64 for 4, 256 for 2)\n"
          "      --rotate            the compressed modes rotate each block before quantizing\n"
          "                          (sets ZPP_QUANT_ROTATE=1; default ZPP_QUANT_ROTATE, else off)\n"
          "      --error-feedback    qgz reduces through a residual handle (zppGradCreate,\n"
          "                          zppQgzReduceScatterEF): each call adds what the last one\n"
          "                          rounded away; -c checks the first call, whose residual is 0\n"
          "      --baseline mpi|nccl the same operation through MPI (under mpirun) or NCCL\n"
          "                          (device buffers, needs a GPU), beside our rows\n"
          "      --rounds R          split each row's -n iterations into R rounds that\n"
          "                          alternate ours and the baseline's, so both see the\n"
          "                          same conditions (default 5 with --baseline, at most\n"
          "                          -n; 1: all of ours, then all of the baseline's)\n"
          "\n"
          "output:\n"
          "  -J, --json FILE         one JSON record per row; the picture goes to FILE\n"
          "                          with .svg in place of .json\n"
          "      --svg FILE          the picture somewhere else\n"
          "  -q, --quiet             no progress line on stderr\n"
          "\n"
          "launch (mpirun, srun and torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT\n"
          "are detected from the environment; without any, one rank):\n"
          "  -N, --ranks N           fork N ranks on this machine\n"
          "      --device            zpp's calls on device buffers and a CUDA stream (one GPU\n"
          "                          per local rank, round robin); needs CUDA and NCCL\n"
          "      --layout LAYOUT     sets ZPP_HOSTID per rank: NxL (N nodes of L ranks, in\n"
          "                          blocks), NxL/cyclic (nodes taken in turn),\n"
          "                          NxL/shuffle:SEED, a,b,c or @n0,n1,...\n"
          "      --timeout SEC       bound on every wait (sets ZPP_TIMEOUT)\n"
          "  -h, --help, -V, --version\n"
          "\n"
          "modes:\n");
  for (int i = 0; i < zppPerfModeCount(); i++) {
    const zppPerfMode_t* m = zppPerfModeAt(i);
    fprintf(f, "  %-6s %-14s %s%s\n", m->name, zppPerfCollName(m->coll), m->summary,
            m->run ? "" : " (not available yet)");
  }
  fprintf(f,
          "\n"
          "Time is the median over iterations of the slowest rank's time per call.\n"
          "algbw = bytes / time; busbw = algbw * (n-1)/n (allgather, reducescatter,\n"
          "alltoall, gather, scatter, alltoallv), * 2(n-1)/n (allreduce), * 1 (broadcast,\n"
          "reduce, sendrecv: bytes one way);\n"
          "GB = 1e9 bytes.\n"
          "Exit: 0 ok, 1 runtime error, 2 bad arguments, 3 a result past its bound.\n"
          "ZPP_PERF_INJECT_ERROR=RANK:ELEM corrupts that output element after every\n"
          "checked call (to test the checking itself).\n");
}

/* Under a launcher every rank parses the same command line: only the one
 * that will become rank 0 explains what is wrong with it. */
static int zppPerfArgsSilent;
void zppPerfArgsSetSilent(int silent) { zppPerfArgsSilent = silent; }

#define ZPP_PERF_STR2(x) #x
#define ZPP_PERF_STR(x) ZPP_PERF_STR2(x)

static int zppPerfUsageError(const char* fmt, const char* what) {
  if (zppPerfArgsSilent) return ZPP_PERF_EXIT_USAGE;
  fprintf(stderr, "zpp-perf: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\n\n");
  zppPerfUsage(stderr);
  return ZPP_PERF_EXIT_USAGE;
}

/* Splits a comma list in place; calls fn on every item; stops at an error. */
typedef int (*zppPerfItemFn)(const char* item, zppPerfArgs_t* args);

static int zppPerfForEachItem(const char* list, zppPerfItemFn fn, zppPerfArgs_t* args) {
  char buf[512];
  if (strlen(list) >= sizeof buf) return zppPerfUsageError("list too long: %s", list);
  strcpy(buf, list);
  char* save = NULL;
  int any = 0;
  for (char* tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    any = 1;
    int rc = fn(tok, args);
    if (rc != 0) return rc;
  }
  if (!any) return zppPerfUsageError("empty list: '%s'", list);
  return 0;
}

static int zppPerfAddDtype(const char* item, zppPerfArgs_t* a) {
  if (strcasecmp(item, "all") == 0) {
    a->nDtypes = 0;
    for (int t = 0; t < zppNumTypes; t++) a->dtypes[a->nDtypes++] = (zppDataType_t)t;
    return 0;
  }
  zppDataType_t v;
  if (zppDtypeParse(item, &v) != 0) return zppPerfUsageError("unknown data type '%s'", item);
  if (a->nDtypes >= ZPP_PERF_MAX_LIST) return zppPerfUsageError("too many data types at '%s'", item);
  a->dtypes[a->nDtypes++] = v;
  return 0;
}

static int zppPerfAddRedop(const char* item, zppPerfArgs_t* a) {
  if (strcasecmp(item, "all") == 0) {
    a->nRedops = 0;
    for (int o = 0; o < zppNumOps; o++) a->redops[a->nRedops++] = (zppRedOp_t)o;
    return 0;
  }
  zppRedOp_t v;
  if (zppRedOpParse(item, &v) != 0)
    return zppPerfUsageError("unknown reduction op '%s' (sum, prod, max, min, avg)", item);
  if (a->nRedops >= ZPP_PERF_MAX_LIST) return zppPerfUsageError("too many ops at '%s'", item);
  a->redops[a->nRedops++] = v;
  return 0;
}

/* -t and -m are collected as text and combined at the end, since -m may come
 * after -t on the command line. */
typedef struct {
  char colls[512];
  char modes[256];
} zppPerfTaskText_t;

static int zppPerfAddTask(zppPerfArgs_t* a, zppPerfColl_t coll, const zppPerfMode_t* mode) {
  for (int i = 0; i < a->nTasks; i++)
    if (a->tasks[i].coll == coll && a->tasks[i].mode == mode) return 0; /* duplicate */
  if (mode->run == NULL) {
    char what[96];
    snprintf(what, sizeof what, "%s of %s", mode->name, zppPerfCollName(coll));
    return zppPerfUsageError("mode %s is not available yet: the library has no such call", what);
  }
  if (a->nTasks >= ZPP_PERF_MAX_LIST) return zppPerfUsageError("too many collectives%s", "");
  a->tasks[a->nTasks].coll = coll;
  a->tasks[a->nTasks].mode = mode;
  a->nTasks++;
  return 0;
}

static int zppPerfBuildTasks(zppPerfArgs_t* a, const zppPerfTaskText_t* tt) {
  const char* modeList[ZPP_PERF_MAX_LIST];
  char modeBuf[256];
  int nModes = 0;
  strcpy(modeBuf, tt->modes);
  char* save = NULL;
  for (char* m = strtok_r(modeBuf, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save)) {
    if (!zppPerfModeNameKnown(m)) return zppPerfUsageError("unknown mode '%s'", m);
    if (nModes < ZPP_PERF_MAX_LIST) modeList[nModes++] = m;
  }
  if (nModes == 0) return zppPerfUsageError("empty mode list%s", "");

  char collBuf[512];
  strcpy(collBuf, tt->colls);
  save = NULL;
  int any = 0;
  for (char* tok = strtok_r(collBuf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    any = 1;
    char* colon = strchr(tok, ':');
    const char* explicitMode = NULL;
    if (colon != NULL) {
      *colon = '\0';
      explicitMode = colon + 1;
    }
    int first = 0, last = -1, v;
    if (strcasecmp(tok, "all") == 0) {
      /* The collectives; point-to-point (sendrecv) only when named. */
      first = 0;
      last = ZPP_PERF_BROADCAST;
    } else if (zppPerfLookup(zppPerfCollAliases, tok, &v) == 0) {
      first = last = v;
    } else if (explicitMode == NULL && zppPerfModeNameKnown(tok)) {
      /* A compressed mode alone names its collective: "-t qwz". */
      for (int i = 0; i < zppPerfModeCount(); i++) {
        const zppPerfMode_t* m = zppPerfModeAt(i);
        if (strcasecmp(m->name, tok) == 0) {
          int rc = zppPerfAddTask(a, m->coll, m);
          if (rc != 0) return rc;
        }
      }
      continue;
    } else {
      return zppPerfUsageError("unknown collective '%s'", tok);
    }
    for (int c = first; c <= last; c++) {
      int added = 0;
      int n = explicitMode ? 1 : nModes;
      for (int k = 0; k < n; k++) {
        const char* mn = explicitMode ? explicitMode : modeList[k];
        const zppPerfMode_t* m = zppPerfModeFind(mn, (zppPerfColl_t)c);
        if (m == NULL) {
          if (explicitMode != NULL || !zppPerfModeNameKnown(mn))
            return zppPerfUsageError("no mode '%s' for this collective", mn);
          continue; /* -m qwz,qgz applies each to its own collective */
        }
        int rc = zppPerfAddTask(a, (zppPerfColl_t)c, m);
        if (rc != 0) return rc;
        added = 1;
      }
      if (!added && first == last)
        return zppPerfUsageError("none of the modes in -m applies to %s",
                                 zppPerfCollName((zppPerfColl_t)c));
    }
  }
  if (!any || a->nTasks == 0) return zppPerfUsageError("nothing to measure%s", "");
  return 0;
}

static int zppPerfParseInt(const char* text, long lo, long hi, long* out) {
  char* end = NULL;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int zppPerfParseInject(zppPerfArgs_t* a) {
  const char* spec = getenv("ZPP_PERF_INJECT_ERROR");
  a->injectSpec = NULL;
  a->injectRank = -1;
  a->injectElem = -1;
  if (spec == NULL || spec[0] == '\0') return 0;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", spec);
  char* colon = strchr(buf, ':');
  long r, e;
  if (colon == NULL) return zppPerfUsageError("ZPP_PERF_INJECT_ERROR='%s': expected RANK:ELEM", spec);
  *colon = '\0';
  if (zppPerfParseInt(buf, 0, 1 << 20, &r) != 0 || zppPerfParseInt(colon + 1, 0, 1L << 40, &e) != 0)
    return zppPerfUsageError("ZPP_PERF_INJECT_ERROR='%s': expected RANK:ELEM", spec);
  a->injectSpec = spec;
  a->injectRank = (int)r;
  a->injectElem = e;
  return 0;
}

int zppPerfParseArgs(int argc, char** argv, zppPerfArgs_t* a) {
  memset(a, 0, sizeof *a);
  a->minBytes = a->maxBytes = 32u << 20;
  a->stepBytes = 1u << 20;
  a->stepFactor = 1.0;
  a->iters = 20;
  a->warmup = 5;
  a->check = 1;
  a->root = 0;
  zppPerfTaskText_t tt;
  snprintf(tt.colls, sizeof tt.colls, "allgather,reducescatter");
  snprintf(tt.modes, sizeof tt.modes, "plain");

  size_t pos = 0;
  for (int i = 0; i < argc && pos + 1 < sizeof a->cmdline; i++)
    pos += (size_t)snprintf(a->cmdline + pos, sizeof a->cmdline - pos, "%s%s", i ? " " : "", argv[i]);

  a->qwzBits = 8;
  a->qgzBits = 4;
  a->hpzBits = 8;
  const char* envBlock = getenv("ZPP_QUANT_BLOCK");
  a->quantBlock = envBlock != NULL ? atoi(envBlock) : 0;
  const char* envRotate = getenv("ZPP_QUANT_ROTATE");
  a->quantRotate = envRotate != NULL && strcmp(envRotate, "1") == 0;

  enum {
    OPT_BASELINE = 1000,
    OPT_LAYOUT,
    OPT_SVG,
    OPT_TIMEOUT,
    OPT_QWZ_BITS,
    OPT_QGZ_BITS,
    OPT_HPZ_BITS,
    OPT_BLOCK,
    OPT_ROTATE,
    OPT_EF,
    OPT_ROUNDS,
    OPT_DEVICE
  };
  static const struct option longOpts[] = {{"minbytes", required_argument, 0, 'b'},
                                           {"maxbytes", required_argument, 0, 'e'},
                                           {"stepfactor", required_argument, 0, 'f'},
                                           {"stepbytes", required_argument, 0, 'i'},
                                           {"iters", required_argument, 0, 'n'},
                                           {"warmup_iters", required_argument, 0, 'w'},
                                           {"check", required_argument, 0, 'c'},
                                           {"datatype", required_argument, 0, 'd'},
                                           {"op", required_argument, 0, 'o'},
                                           {"root", required_argument, 0, 'r'},
                                           {"coll", required_argument, 0, 't'},
                                           {"collective", required_argument, 0, 't'},
                                           {"operation", required_argument, 0, 't'},
                                           {"mode", required_argument, 0, 'm'},
                                           {"json", required_argument, 0, 'J'},
                                           {"ranks", required_argument, 0, 'N'},
                                           {"quiet", no_argument, 0, 'q'},
                                           {"help", no_argument, 0, 'h'},
                                           {"version", no_argument, 0, 'V'},
                                           {"baseline", required_argument, 0, OPT_BASELINE},
                                           {"layout", required_argument, 0, OPT_LAYOUT},
                                           {"svg", required_argument, 0, OPT_SVG},
                                           {"timeout", required_argument, 0, OPT_TIMEOUT},
                                           {"qwz-bits", required_argument, 0, OPT_QWZ_BITS},
                                           {"qgz-bits", required_argument, 0, OPT_QGZ_BITS},
                                           {"hpz-bits", required_argument, 0, OPT_HPZ_BITS},
                                           {"block", required_argument, 0, OPT_BLOCK},
                                           {"rotate", no_argument, 0, OPT_ROTATE},
                                           {"error-feedback", no_argument, 0, OPT_EF},
                                           {"rounds", required_argument, 0, OPT_ROUNDS},
                                           {"device", no_argument, 0, OPT_DEVICE},
                                           {0, 0, 0, 0}};
  int bSet = 0, eSet = 0, fSet = 0;
  long v;
  int opt, rc;
  optind = 1;
  opterr = 0; /* our own message, then the usage */
  while ((opt = getopt_long(argc, argv, ":b:e:f:i:n:w:c:d:o:r:t:m:J:N:qhV", longOpts, NULL)) != -1) {
    switch (opt) {
      case 'b':
        if (zppPerfParseSize(optarg, &a->minBytes) != 0)
          return zppPerfUsageError("bad size -b %s", optarg);
        bSet = 1;
        break;
      case 'e':
        if (zppPerfParseSize(optarg, &a->maxBytes) != 0)
          return zppPerfUsageError("bad size -e %s", optarg);
        eSet = 1;
        break;
      case 'i':
        if (zppPerfParseSize(optarg, &a->stepBytes) != 0)
          return zppPerfUsageError("bad size -i %s", optarg);
        break;
      case 'f': {
        char* end = NULL;
        a->stepFactor = strtod(optarg, &end);
        if (end == optarg || *end != '\0' || !(a->stepFactor >= 1.0) || a->stepFactor > 1024.0)
          return zppPerfUsageError("bad step factor -f %s (1 to 1024)", optarg);
        fSet = 1;
        break;
      }
      case 'n':
        if (zppPerfParseInt(optarg, 1, 1000000, &v) != 0)
          return zppPerfUsageError("bad iteration count -n %s", optarg);
        a->iters = (int)v;
        break;
      case 'w':
        if (zppPerfParseInt(optarg, 0, 1000000, &v) != 0)
          return zppPerfUsageError("bad warm-up count -w %s", optarg);
        a->warmup = (int)v;
        break;
      case 'c':
        if (zppPerfParseInt(optarg, 0, 1, &v) != 0)
          return zppPerfUsageError("-c takes 0 or 1, not %s", optarg);
        a->check = (int)v;
        break;
      case 'd':
        a->nDtypes = 0;
        if ((rc = zppPerfForEachItem(optarg, zppPerfAddDtype, a)) != 0) return rc;
        break;
      case 'o':
        a->nRedops = 0;
        if ((rc = zppPerfForEachItem(optarg, zppPerfAddRedop, a)) != 0) return rc;
        break;
      case 'r':
        if (strcmp(optarg, "rotate") == 0) {
          a->root = ZPP_PERF_ROOT_ROTATE;
          break;
        }
        if (zppPerfParseInt(optarg, 0, 1 << 20, &v) != 0)
          return zppPerfUsageError("bad root -r %s (a rank, or rotate)", optarg);
        a->root = (int)v;
        break;
      case 't':
        if (strlen(optarg) >= sizeof tt.colls) return zppPerfUsageError("-t list too long%s", "");
        snprintf(tt.colls, sizeof tt.colls, "%s", optarg);
        break;
      case 'm':
        if (strlen(optarg) >= sizeof tt.modes) return zppPerfUsageError("-m list too long%s", "");
        snprintf(tt.modes, sizeof tt.modes, "%s", optarg);
        break;
      case 'J': a->jsonPath = optarg; break;
      case OPT_SVG: a->svgPath = optarg; break;
      case OPT_DEVICE: a->device = 1; break;
      case 'N':
        if (zppPerfParseInt(optarg, 1, ZPP_LAUNCH_MAX_RANKS, &v) != 0)
          return zppPerfUsageError("bad rank count -N %s (1 to " ZPP_PERF_STR(ZPP_LAUNCH_MAX_RANKS) ")",
                                   optarg);
        a->forkRanks = (int)v;
        break;
      case OPT_LAYOUT: {
        int n = zppLaunchParseLayout(optarg, a->layoutNodeOf, ZPP_LAUNCH_MAX_RANKS);
        if (n < 1)
          return zppPerfUsageError(
              "bad layout --layout %s (want NxL, NxL/cyclic, NxL/shuffle:SEED, "
              "a,b,c or @n0,n1,...; e.g. 2x2)",
              optarg);
        a->layout = optarg;
        a->layoutRanks = n;
        break;
      }
      case OPT_BASELINE:
        if (strcasecmp(optarg, "mpi") == 0)
          a->baseline = ZPP_PERF_BASELINE_MPI;
        else if (strcasecmp(optarg, "nccl") == 0)
          a->baseline = ZPP_PERF_BASELINE_NCCL;
        else if (strcasecmp(optarg, "none") == 0)
          a->baseline = ZPP_PERF_BASELINE_NONE;
        else
          return zppPerfUsageError("unknown baseline '%s' (mpi, nccl)", optarg);
        break;
      case OPT_TIMEOUT:
        if (zppPerfParseInt(optarg, 1, 86400, &v) != 0)
          return zppPerfUsageError("bad timeout --timeout %s", optarg);
        a->timeoutSec = (int)v;
        break;
      case OPT_QWZ_BITS:
      case OPT_QGZ_BITS:
      case OPT_HPZ_BITS:
        if (zppPerfParseInt(optarg, 0, 8, &v) != 0 ||
            !(v == 4 || v == 8 || (v == 0 && opt == OPT_HPZ_BITS) || (v == 2 && opt == OPT_QGZ_BITS)))
          return zppPerfUsageError("bits must be 4 or 8 (--hpz-bits also 0, --qgz-bits also 2), not %s",
                                   optarg);
        if (opt == OPT_QWZ_BITS)
          a->qwzBits = (int)v;
        else if (opt == OPT_QGZ_BITS)
          a->qgzBits = (int)v;
        else
          a->hpzBits = (int)v;
        break;
      case OPT_BLOCK:
        if (zppPerfParseInt(optarg, 32, 4096, &v) != 0 || (v & (v - 1)) != 0)
          return zppPerfUsageError("--block must be a power of two from 32 to 4096, not %s", optarg);
        a->quantBlock = (int)v;
        break;
      case OPT_ROTATE: a->quantRotate = 1; break;
      case OPT_EF: a->errorFeedback = 1; break;
      case OPT_ROUNDS:
        if (zppPerfParseInt(optarg, 1, 1000000, &v) != 0)
          return zppPerfUsageError("bad round count --rounds %s (a whole number, 1 or more)", optarg);
        a->rounds = (int)v;
        break;
      case 'q': a->quiet = 1; break;
      case 'h': zppPerfUsage(stdout); return -1;
      case 'V':
        printf("zpp-perf %s (zpp %d.%d.%d)\n", ZPP_PERF_VERSION, ZPP_MAJOR, ZPP_MINOR, ZPP_PATCH);
        return -1;
      case ':': return zppPerfUsageError("option %s needs a value", argv[optind - 1]);
      default: return zppPerfUsageError("unknown option %s", argv[optind - 1]);
    }
  }
  if (optind < argc) return zppPerfUsageError("unexpected argument '%s'", argv[optind]);

  /* nccl-tests' -b alone measures one size: -e follows -b unless given. */
  if (bSet && !eSet && a->maxBytes < a->minBytes) a->maxBytes = a->minBytes;
  if (eSet && !bSet && a->minBytes > a->maxBytes) a->minBytes = a->maxBytes;
  if (a->minBytes == 0 || a->maxBytes == 0) return zppPerfUsageError("sizes must be > 0%s", "");
  if (a->minBytes > a->maxBytes) return zppPerfUsageError("-b is larger than -e%s", "");
  if (!fSet || a->stepFactor <= 1.0) {
    a->stepFactor = 1.0;
    if (a->stepBytes == 0) return zppPerfUsageError("-i must be > 0 when -f is 1%s", "");
  }
  long nSizes = zppPerfSizeSeq(a->minBytes, a->maxBytes, a->stepBytes, a->stepFactor, NULL, 0);
  if (nSizes < 1 || nSizes > 4096)
    return zppPerfUsageError("-b/-e/-i/-f make too many sizes (%s 4096 at most)",
                             nSizes > 0 ? "" : "or none,");
  if (a->nDtypes == 0) a->dtypes[a->nDtypes++] = zppFloat32;
  if (a->nRedops == 0) a->redops[a->nRedops++] = zppSum;
  if ((rc = zppPerfBuildTasks(a, &tt)) != 0) return rc;

  if (a->layout != NULL && a->forkRanks > 0 && a->layoutRanks != a->forkRanks)
    return zppPerfUsageError("--layout does not multiply out to -N %s", "");
  if (a->forkRanks > 0 && a->root >= a->forkRanks)
    return zppPerfUsageError("-r is not a rank of -N%s", "");
  if (a->baseline == ZPP_PERF_BASELINE_MPI) {
    if (!zppPerfMpiAvailable())
      return zppPerfUsageError("--baseline mpi: this zpp-perf was built without MPI%s", "");
    if (a->forkRanks > 0)
      return zppPerfUsageError("--baseline mpi needs the ranks started by mpirun, not -N%s", "");
  }
  if (a->baseline == ZPP_PERF_BASELINE_NCCL && !zppPerfNcclAvailable())
    return zppPerfUsageError("--baseline nccl: this zpp-perf was built without CUDA and NCCL%s", "");
  if (a->device) {
    if (!zppPerfDeviceAvailable())
      return zppPerfUsageError("--device: this zpp-perf was built without CUDA and NCCL%s", "");
    if (a->baseline == ZPP_PERF_BASELINE_MPI)
      return zppPerfUsageError(
          "--device with --baseline mpi: MPI's baseline runs on host buffers; "
          "compare device buffers with --baseline nccl%s",
          "");
    for (int t = 0; t < a->nTasks; t++)
      if (strcmp(a->tasks[t].mode->name, "hpz") == 0)
        return zppPerfUsageError(
            "--device: hpz takes host buffers only (device hpZ is not built "
            "yet)%s",
            "");
  }
  if (a->errorFeedback) {
    int qgz = 0;
    for (int t = 0; t < a->nTasks; t++) qgz |= strcmp(a->tasks[t].mode->name, "qgz") == 0;
    if (!qgz) return zppPerfUsageError("--error-feedback applies to qgz: add it (-m qgz)%s", "");
    if (a->device)
      return zppPerfUsageError(
          "--error-feedback: the library's error feedback takes host buffers "
          "only (its device path is not built yet)%s",
          "");
  }
  /* Rounds alternate ours with the baseline: without one there is nothing
   * to alternate with, and one round is the same measurement. More rounds
   * than iterations would leave rounds empty, so -n caps them. */
  if (a->baseline == ZPP_PERF_BASELINE_NONE)
    a->rounds = 1;
  else if (a->rounds == 0)
    a->rounds = ZPP_PERF_DEFAULT_ROUNDS;
  if (a->rounds > a->iters) a->rounds = a->iters;
  return zppPerfParseInject(a);
}
