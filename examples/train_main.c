/*
 * zpp-train: arguments, and how the ranks come to be (as zpp-perf does):
 *   -N RANKS   the trainer forks them (perf/common/launch.h), --layout NxL sets
 *              ZPP_HOSTID per rank so that one machine plays N nodes;
 *   mpirun     with MPI built in, the unique id goes out by MPI_Bcast;
 *              without, OMPI_COMM_WORLD_* and MASTER_ADDR/PORT;
 *   RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, perf/emucluster/emucluster.sh);
 *   srun       SLURM_PROCID/SLURM_NTASKS, the root from the step;
 *   nothing    one rank.
 * The launchers' variables are read by the library's one table of them
 * (core/launcher_env.h), as zppCommInitFromEnv reads them.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/launcher_env.h"
#include "perf/common/launch.h"
#include "train.h"
#include "train_mpi.h"
#include "zero3.h"

#ifndef ZPP_EXAMPLE_DATA
#define ZPP_EXAMPLE_DATA "examples/data/corpus.txt"
#endif

/* The default text: an installed zpp-train finds it at this path relative to
 * its own directory (bin/ -> share/zpp/, cmake/install.cmake), wherever the
 * prefix has moved; a zpp-train in the build tree finds none there and takes
 * the source tree's. */
static const char* trDefaultData(void) {
#ifdef ZPP_EXAMPLE_DATA_FROM_BIN
  static char path[PATH_MAX];
  static int looked = 0;
  if (!looked) {
    looked = 1;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
      exe[n] = '\0';
      char* slash = strrchr(exe, '/');
      if (slash) *slash = '\0';
      int len = snprintf(path, sizeof path, "%s/%s", exe, ZPP_EXAMPLE_DATA_FROM_BIN);
      if (len <= 0 || (size_t)len >= sizeof path || access(path, R_OK) != 0) path[0] = '\0';
    }
  }
  if (path[0]) return path;
#endif
  return ZPP_EXAMPLE_DATA;
}

/* Out of reach: the trainer's own waits are bounded by ZPP_TIMEOUT. */
#define TR_LAUNCH_DEADLINE_SEC 2.0e6

static int trSilent = 0; /* ranks other than 0 of a launcher: one message, not N */

static void trUsage(FILE* f) {
  fprintf(f,
          "Usage: zpp-train [options]\n"
          "\n"
          "Trains a character-level language model (an MLP over a window of embedded\n"
          "characters) with ZeRO-3 data parallelism on zpp, and prints the loss curve.\n"
          "\n"
          "Ranks:\n"
          "  -N, --ranks N         fork N ranks on this machine (else: mpirun, or RANK/\n"
          "                        WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or one rank)\n"
          "      --layout NxL      N nodes of L ranks (ZPP_HOSTID per rank); alone, forks\n"
          "                        N*L ranks; under a launcher, names the nodes of its ranks\n"
          "      --timeout S       bound on every wait inside zpp (ZPP_TIMEOUT)\n"
          "      --elastic         survive lost ranks (with -N or --layout): the survivors\n"
          "                        shrink, go back to the last step every rank has a copy\n"
          "                        of, and grow back with replacement processes\n"
          "      --kill-node K --kill-step S\n"
          "                        with --elastic: node K's ranks kill themselves (SIGKILL)\n"
          "                        during step S, to see the recovery\n"
          "Communication:\n"
          "      --zeropp          qwZ + hpZ + qgZ (the default)\n"
          "      --plain           plain all-gather and reduce-scatter\n"
          "      --compare         plain and ZeRO++ from the same seed, in one run, taking\n"
          "                        turns of --interleave steps (default 10; 0: one after\n"
          "                        the other)\n"
          "      --compare-overlap the same, each with and without overlap: four runs\n"
          "      --qwz-bits B      bits of the weight gathers: 8 (default), 4, or 0 (plain)\n"
          "      --qgz-bits B      bits of the gradient reduce-scatter: 4 (default), 8, 2, or 0\n"
          "      --error-feedback  qgZ keeps what it rounded away and adds it to the next step's\n"
          "                        gradient (zppGradCreate; 8 bytes per gradient element)\n"
          "      --no-hpz          backward gathers go across nodes like the forward ones\n"
          "      --rotate          rotate each codec block (random signs, Walsh-Hadamard) before\n"
          "                        quantizing: qwZ, hpZ and qgZ (ZPP_QUANT_ROTATE; off by default)\n"
          "      --qwz-delta       weight gathers send each shard's change since the last gather\n"
          "                        (ZPP_PARAM_DELTA: every rank keeps the full weights; the\n"
          "                        backward gathers copy them)\n"
          "      --dtype T         weights and gradients on the wire: bf16 (default) or fp32\n"
          "      --bucket-mb MB    gradient bucket for one reduce-scatter call (default 4)\n"
          "      --prefetch N      weight gathers in flight ahead of the computing layer\n"
          "                        (default 2; each holds a buffer of the largest layer)\n"
          "      --no-overlap      wait for every collective right after issuing it\n"
          "Model and training:\n"
          "      --data FILE       text to train on (default %s)\n"
          "      --steps N         training steps (default 200)\n"
          "      --batch B         global batch, a multiple of the rank count (default 64)\n"
          "      --context C       characters of context (default 16)\n"
          "      --embed E         embedding width (default 32)\n"
          "      --hidden H        width of both hidden layers (default 512)\n"
          "      --weight-layout L how the weight matrices are stored: out-in (default, as\n"
          "                        torch.nn.Linear) or in-out; the same model either way, but\n"
          "                        the codec's 64-element gradient blocks then run along one\n"
          "                        output's inputs (out-in) or across 64 outputs (in-out)\n"
          "      --lr LR           Adam's learning rate (default 0.002)\n"
          "      --seed S          weights and batches (default 1)\n"
          "      --eval-every K    held-out loss every K steps (default 0: at the end only)\n"
          "      --eval-samples N  held-out windows (default 1024)\n"
          "      --sample N        print N characters generated by the trained model\n"
          "Output:\n"
          "      --json FILE       the loss curves and timings as JSON\n"
          "      --svg FILE        the picture (default: FILE of --json with .svg)\n"
          "      --print-every K   a line every K steps (default: 1 up to 50 steps, else 10)\n"
          "  -q, --quiet           only the summary\n"
          "  -h, --help\n"
          "\n"
          "Exit: 0 ok, 1 error (a rank failed, the loss diverged), 2 bad arguments.\n",
          trDefaultData());
}

static int trBad(const char* fmt, const char* a, const char* b) {
  if (!trSilent) {
    fprintf(stderr, "zpp-train: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\nzpp-train: try 'zpp-train --help'\n");
  }
  return TR_EXIT_USAGE;
}

static int trInt(const char* opt, const char* v, long lo, long hi, int* out) {
  char* end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end != '\0' || x < lo || x > hi) {
    if (!trSilent)
      fprintf(stderr,
              "zpp-train: %s '%s': expected an integer from %ld to %ld\n"
              "zpp-train: try 'zpp-train --help'\n",
              opt, v, lo, hi);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int trDouble(const char* opt, const char* v, double lo, double hi, double* out) {
  char* end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end != '\0' || !isfinite(x) || x < lo || x > hi) {
    if (!trSilent)
      fprintf(stderr,
              "zpp-train: %s '%s': expected a number from %g to %g\n"
              "zpp-train: try 'zpp-train --help'\n",
              opt, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

/* allow2: the gradients' width may be 2 too. */
static int trBits(const char* opt, const char* v, int allow2, int* out) {
  int b;
  if (trInt(opt, v, 0, 8, &b) != 0) return -1;
  if (b != 0 && b != 4 && b != 8 && !(allow2 && b == 2)) {
    trBad(allow2 ? "%s '%s': bits are 8, 4, 2 or 0 (plain)" : "%s '%s': bits are 8, 4 or 0 (plain)",
          opt, v);
    return -1;
  }
  *out = b;
  return 0;
}

enum {
  O_LAYOUT = 256,
  O_TIMEOUT,
  O_ZEROPP,
  O_PLAIN,
  O_COMPARE,
  O_COMPAREOV,
  O_QWZ,
  O_QGZ,
  O_NOHPZ,
  O_ROTATE,
  O_QWZDELTA,
  O_EF,
  O_DTYPE,
  O_BUCKET,
  O_NOOVERLAP,
  O_PREFETCH,
  O_INTERLEAVE,
  O_DATA,
  O_STEPS,
  O_BATCH,
  O_CONTEXT,
  O_EMBED,
  O_HIDDEN,
  O_WLAYOUT,
  O_LR,
  O_SEED,
  O_EVALEVERY,
  O_EVALN,
  O_SAMPLE,
  O_JSON,
  O_SVG,
  O_PRINTEVERY,
  O_ELASTIC,
  O_KILLNODE,
  O_KILLSTEP
};

/* 0 to run, -1 after --help, else the exit code. */
static int trParseArgs(int argc, char** argv, trArgs_t* a) {
  static const struct option opts[] = {{"ranks", required_argument, 0, 'N'},
                                       {"layout", required_argument, 0, O_LAYOUT},
                                       {"timeout", required_argument, 0, O_TIMEOUT},
                                       {"zeropp", no_argument, 0, O_ZEROPP},
                                       {"plain", no_argument, 0, O_PLAIN},
                                       {"compare", no_argument, 0, O_COMPARE},
                                       {"compare-overlap", no_argument, 0, O_COMPAREOV},
                                       {"qwz-bits", required_argument, 0, O_QWZ},
                                       {"qgz-bits", required_argument, 0, O_QGZ},
                                       {"no-hpz", no_argument, 0, O_NOHPZ},
                                       {"rotate", no_argument, 0, O_ROTATE},
                                       {"qwz-delta", no_argument, 0, O_QWZDELTA},
                                       {"error-feedback", no_argument, 0, O_EF},
                                       {"dtype", required_argument, 0, O_DTYPE},
                                       {"bucket-mb", required_argument, 0, O_BUCKET},
                                       {"no-overlap", no_argument, 0, O_NOOVERLAP},
                                       {"prefetch", required_argument, 0, O_PREFETCH},
                                       {"interleave", required_argument, 0, O_INTERLEAVE},
                                       {"data", required_argument, 0, O_DATA},
                                       {"steps", required_argument, 0, O_STEPS},
                                       {"batch", required_argument, 0, O_BATCH},
                                       {"context", required_argument, 0, O_CONTEXT},
                                       {"embed", required_argument, 0, O_EMBED},
                                       {"hidden", required_argument, 0, O_HIDDEN},
                                       {"weight-layout", required_argument, 0, O_WLAYOUT},
                                       {"lr", required_argument, 0, O_LR},
                                       {"seed", required_argument, 0, O_SEED},
                                       {"eval-every", required_argument, 0, O_EVALEVERY},
                                       {"eval-samples", required_argument, 0, O_EVALN},
                                       {"sample", required_argument, 0, O_SAMPLE},
                                       {"json", required_argument, 0, O_JSON},
                                       {"svg", required_argument, 0, O_SVG},
                                       {"print-every", required_argument, 0, O_PRINTEVERY},
                                       {"elastic", no_argument, 0, O_ELASTIC},
                                       {"kill-node", required_argument, 0, O_KILLNODE},
                                       {"kill-step", required_argument, 0, O_KILLSTEP},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  memset(a, 0, sizeof *a);
  a->qwzBits = 8;
  a->qgzBits = 4;
  a->hpz = 1;
  a->overlap = 1;
  a->prefetch = 2;
  a->interleave = 10;
  a->type = zppBfloat16;
  a->data = trDefaultData();
  a->steps = 200;
  a->batch = 64;
  a->context = 16;
  a->embed = 32;
  a->hidden = 512;
  a->lr = 0.002;
  a->seed = 1;
  a->bucketMB = 4;
  a->evalSamples = 1024;
  a->printEvery = -1;
  a->killNode = -1;
  int zeroppKnobs = 0;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":N:qh", opts, NULL)) != -1) {
    const char* v = optarg;
    double d;
    switch (ch) {
      case 'N':
        if (trInt("-N", v, 1, ZPP_LAUNCH_MAX_RANKS, &a->forkRanks)) return TR_EXIT_USAGE;
        break;
      case O_LAYOUT: {
        int n = 0, l = 0, used = 0;
        if (sscanf(v, "%dx%d%n", &n, &l, &used) != 2 || v[used] != '\0' || n < 1 || l < 1 ||
            (long)n * l > ZPP_LAUNCH_MAX_RANKS)
          return trBad("--layout '%s': expected NxL, N nodes of L ranks (e.g. 2x2), at most %s ranks",
                       v, "256");
        a->layoutNodes = n;
        a->layoutPerNode = l;
        break;
      }
      case O_TIMEOUT:
        if (trInt("--timeout", v, 1, 86400, &a->timeoutSec)) return TR_EXIT_USAGE;
        break;
      case O_ZEROPP: a->zeropp = 1; break;
      case O_PLAIN: a->plain = 1; break;
      case O_COMPARE: a->compare = 1; break;
      case O_COMPAREOV: a->compare = a->compareOverlap = 1; break;
      case O_QWZ:
        if (trBits("--qwz-bits", v, 0, &a->qwzBits)) return TR_EXIT_USAGE;
        zeroppKnobs = 1;
        break;
      case O_QGZ:
        if (trBits("--qgz-bits", v, 1, &a->qgzBits)) return TR_EXIT_USAGE;
        zeroppKnobs = 1;
        break;
      case O_ROTATE:
        a->rotate = 1;
        zeroppKnobs = 1;
        break;
      case O_NOHPZ:
        a->hpz = 0;
        zeroppKnobs = 1;
        break;
      case O_EF:
        a->errorFeedback = 1;
        zeroppKnobs = 1;
        break;
      case O_QWZDELTA:
        a->qwzDelta = 1;
        zeroppKnobs = 1;
        break;
      case O_DTYPE:
        if (strcmp(v, "bf16") == 0 || strcmp(v, "bfloat16") == 0)
          a->type = zppBfloat16;
        else if (strcmp(v, "fp32") == 0 || strcmp(v, "float32") == 0)
          a->type = zppFloat32;
        else
          return trBad("--dtype '%s': expected bf16 or fp32%s", v, "");
        break;
      case O_BUCKET:
        if (trDouble("--bucket-mb", v, 0, 1e6, &a->bucketMB)) return TR_EXIT_USAGE;
        break;
      case O_NOOVERLAP: a->overlap = 0; break;
      case O_INTERLEAVE:
        if (trInt("--interleave", v, 0, INT_MAX, &a->interleave)) return TR_EXIT_USAGE;
        break;
      case O_PREFETCH:
        if (trInt("--prefetch", v, 0, Z3_MAX_PREFETCH, &a->prefetch)) return TR_EXIT_USAGE;
        break;
      case O_DATA: a->data = v; break;
      case O_STEPS:
        if (trInt("--steps", v, 1, 10000000, &a->steps)) return TR_EXIT_USAGE;
        break;
      case O_BATCH:
        if (trInt("--batch", v, 1, 1 << 20, &a->batch)) return TR_EXIT_USAGE;
        break;
      case O_CONTEXT:
        if (trInt("--context", v, 1, 1024, &a->context)) return TR_EXIT_USAGE;
        break;
      case O_EMBED:
        if (trInt("--embed", v, 1, 4096, &a->embed)) return TR_EXIT_USAGE;
        break;
      case O_HIDDEN:
        if (trInt("--hidden", v, 1, 16384, &a->hidden)) return TR_EXIT_USAGE;
        break;
      case O_WLAYOUT:
        if (strcmp(v, "out-in") == 0)
          a->weightInOut = 0;
        else if (strcmp(v, "in-out") == 0)
          a->weightInOut = 1;
        else
          return trBad(
              "--weight-layout '%s': expected out-in (weights [out][in], the default) or "
              "in-out (weights [in][out])%s",
              v, "");
        break;
      case O_LR:
        if (trDouble("--lr", v, 1e-9, 10, &a->lr)) return TR_EXIT_USAGE;
        break;
      case O_SEED:
        if (trDouble("--seed", v, 0, 9007199254740992.0, &d) || d != floor(d))
          return d != floor(d) ? trBad("--seed '%s': expected a whole number%s", v, "") : TR_EXIT_USAGE;
        a->seed = (uint64_t)d;
        break;
      case O_EVALEVERY:
        if (trInt("--eval-every", v, 0, INT_MAX, &a->evalEvery)) return TR_EXIT_USAGE;
        break;
      case O_EVALN:
        if (trInt("--eval-samples", v, 1, 1 << 20, &a->evalSamples)) return TR_EXIT_USAGE;
        break;
      case O_SAMPLE:
        if (trInt("--sample", v, 0, 100000, &a->sample)) return TR_EXIT_USAGE;
        break;
      case O_JSON: a->json = v; break;
      case O_SVG: a->svg = v; break;
      case O_PRINTEVERY:
        if (trInt("--print-every", v, 1, INT_MAX, &a->printEvery)) return TR_EXIT_USAGE;
        break;
      case O_ELASTIC: a->elastic = 1; break;
      case O_KILLNODE:
        if (trInt("--kill-node", v, 0, ZPP_LAUNCH_MAX_RANKS - 1, &a->killNode)) return TR_EXIT_USAGE;
        break;
      case O_KILLSTEP:
        if (trInt("--kill-step", v, 1, 10000000, &a->killStep)) return TR_EXIT_USAGE;
        break;
      case 'q': a->quiet = 1; break;
      case 'h': trUsage(stdout); return -1;
      case ':': return trBad("%s needs a value%s", argv[optind - 1], "");
      default: return trBad("unknown option '%s'%s", argv[optind - 1], "");
    }
  }
  if (optind < argc) return trBad("unexpected argument '%s'%s", argv[optind], "");
  if (a->plain + a->zeropp + a->compare > 1)
    return trBad("--plain, --zeropp and --compare exclude each other: choose one%s%s", "", "");
  if (a->compareOverlap && !a->overlap)
    return trBad("--compare-overlap runs both with and without overlap: drop --no-overlap%s%s", "", "");
  if (a->plain && zeroppKnobs)
    return trBad(
        "--qwz-bits, --qgz-bits, --rotate, --qwz-delta, --error-feedback and --no-hpz set ZeRO++; "
        "they make no sense "
        "with "
        "--plain%s%s",
        "", "");
  if (a->qwzDelta && a->qwzBits == 0)
    return trBad("--qwz-delta sends quantized weight differences: it needs --qwz-bits 8 or 4%s%s", "",
                 "");
  if (a->errorFeedback && a->qgzBits == 0)
    return trBad("--error-feedback compensates qgZ's rounding: it needs --qgz-bits 8, 4 or 2%s%s", "",
                 "");
  if (a->errorFeedback && a->elastic)
    return trBad(
        "--error-feedback with --elastic: the residuals belong to the communicator that a "
        "shrink replaces, and the trainer does not carry them over yet%s%s",
        "", "");
  if (!a->plain && !a->compare) a->zeropp = 1;
  if ((a->killNode >= 0 || a->killStep > 0) && !a->elastic)
    return trBad("--kill-node and --kill-step test --elastic: add it%s%s", "", "");
  if ((a->killNode >= 0) != (a->killStep > 0))
    return trBad("--kill-node and --kill-step go together%s%s", "", "");
  if (a->elastic && (a->compare || a->layoutNodes < 2))
    return trBad(
        "--elastic runs one mode (not --compare) on ranks it forks on two nodes or more (--layout "
        "NxL, N >= 2): each node's state is copied to the next%s%s",
        "", "");
  if (a->killNode >= a->layoutNodes) {
    char k[16];
    snprintf(k, sizeof k, "%d", a->killNode);
    return trBad("--kill-node %s: the layout has no such node%s", k, "");
  }
  if (a->layoutNodes > 0 && a->forkRanks > 0) {
    int n = a->layoutNodes * a->layoutPerNode;
    if (a->forkRanks != n) {
      char x[32], y[32];
      snprintf(x, sizeof x, "%d", a->forkRanks);
      snprintf(y, sizeof y, "%d", n);
      return trBad("-N %s does not match --layout (%s ranks)", x, y);
    }
  }
  if (a->printEvery < 0) a->printEvery = a->steps <= 50 ? 1 : 10;
  return 0;
}

/* ---- per rank ---------------------------------------------------------------- */

static zppConfig_t trCommConfig(const trArgs_t* a) {
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  /* Compression only where the trainer asks for it by an explicit call: a
   * ZPP_QWZ_BITS in the environment must not turn the plain run lossy. */
  cfg.qwzBits = 0;
  cfg.qgzBits = 0;
  cfg.qgzErrorFeedback = 0; /* the ZeRO++ run passes its handles: a plain run needs none */
  /* Only the explicit ZeRO++ calls quantize, so rotation touches the
   * ZeRO++ run alone (the plain run of --compare stays exact). */
  cfg.quantRotate = a->rotate;
  cfg.commName = "zpp-train";
  if (a->timeoutSec > 0) cfg.timeoutSec = a->timeoutSec;
  return cfg;
}

static void trApplyLayout(const trArgs_t* a, int rank) {
  if (a->layoutNodes <= 0 || rank < 0) return;
  char host[32];
  snprintf(host, sizeof host, "node%d", rank / a->layoutPerNode);
  setenv("ZPP_HOSTID", host, 1);
}

static int trRankMain(const trArgs_t* a, trEnv_t* env) {
  zppResult_t res = zppCommTopology(env->comm, &env->topo);
  int code = TR_EXIT_OK;
  if (res != zppSuccess) {
    trLibError(env, "zppCommTopology", res);
    code = TR_EXIT_ERROR;
  } else if (a->batch % env->nranks != 0) {
    if (env->rank == 0)
      fprintf(stderr,
              "zpp-train: --batch %d does not divide by %d ranks: every rank takes an "
              "equal slice of the batch\n",
              a->batch, env->nranks);
    code = TR_EXIT_USAGE;
  } else if (a->layoutNodes > 0 && a->layoutNodes * a->layoutPerNode != env->nranks) {
    if (env->rank == 0)
      fprintf(stderr, "zpp-train: --layout %dx%d is %d ranks, but the job has %d\n", a->layoutNodes,
              a->layoutPerNode, a->layoutNodes * a->layoutPerNode, env->nranks);
    code = TR_EXIT_USAGE;
  } else if ((a->zeropp || a->compare) && a->qgzBits != 0 && !env->topo.uniform) {
    if (env->rank == 0)
      fprintf(stderr,
              "zpp-train: qgZ needs nodes with equal numbers of ranks, and these differ; "
              "use --qgz-bits 0 (plain reduce-scatter) or another layout\n");
    code = TR_EXIT_USAGE;
  }
  trRun_t runs[TR_MAX_RUNS];
  trSession_t* sess[TR_MAX_RUNS] = {NULL};
  int nruns = 0;
  memset(runs, 0, sizeof runs);
  if (code == TR_EXIT_OK) {
    zcOptions_t modes[TR_MAX_RUNS];
    int overlap[TR_MAX_RUNS];
    zcOptions_t plain = ZC_OPTIONS_PLAIN, zpp = {zcModeZeroPP, a->qwzBits,  a->qgzBits,      a->hpz,
                                                 a->rotate,    a->qwzDelta, a->errorFeedback};
    for (int pass = 0; pass < (a->compareOverlap ? 2 : 1); pass++) {
      int ov = a->compareOverlap ? !pass : a->overlap;
      if (a->plain || a->compare) overlap[nruns] = ov, modes[nruns++] = plain;
      if (a->zeropp || a->compare) overlap[nruns] = ov, modes[nruns++] = zpp;
    }
    /* All runs start from the same seed. With --interleave K they take
     * turns of K steps, so that a busy machine slows them alike and the
     * ratios of their step times mean something; the losses are the same
     * as one after the other (each run only sees its own state). */
    int sequential = nruns == 1 || a->interleave == 0;
    for (int i = 0; i < nruns && code == TR_EXIT_OK; i++) {
      if (sequential && i > 0) {
        code = trSessionClose(a, env, sess[i - 1]); /* one after the other */
        sess[i - 1] = NULL;
        if (code != TR_EXIT_OK) break;
      }
      code = trSessionOpen(a, env, &modes[i], overlap[i], &runs[i], &sess[i]);
      if (code == TR_EXIT_OK && sequential)
        code = a->elastic ? trElasticSteps(a, env, sess[i]) : trSessionSteps(a, env, sess[i], a->steps);
    }
    for (int done = 0; code == TR_EXIT_OK && !sequential && done < a->steps; done += a->interleave)
      for (int i = 0; i < nruns && code == TR_EXIT_OK; i++)
        code = trSessionSteps(a, env, sess[i], a->interleave);
    for (int i = 0; i < nruns && code == TR_EXIT_OK; i++)
      if (sess[i] != NULL) code = trSessionClose(a, env, sess[i]);
  }
  if (code == TR_EXIT_OK && env->rank == 0) {
    trPrintSummary(a, env, runs, nruns);
    if (a->json != NULL && trWriteJson(a->json, a, env, runs, nruns) != 0) code = TR_EXIT_ERROR;
    char svg[4096];
    const char* svgPath = a->svg;
    if (svgPath == NULL && a->json != NULL) {
      size_t len = strlen(a->json);
      if (len >= 5 && strcmp(a->json + len - 5, ".json") == 0)
        snprintf(svg, sizeof svg, "%.*s.svg", (int)(len - 5), a->json);
      else
        snprintf(svg, sizeof svg, "%s.svg", a->json);
      svgPath = svg;
    }
    if (svgPath != NULL && trWriteSvg(svgPath, a, env, runs, nruns) != 0) code = TR_EXIT_ERROR;
  }
  for (int i = 0; i < TR_MAX_RUNS; i++) trRunFree(&runs[i]);
  if (env->comm != NULL) { /* a failed run aborted it already */
    if (code == TR_EXIT_ERROR)
      zppCommAbort(env->comm);
    else
      zppCommDestroy(env->comm);
  }
  env->comm = NULL;
  return code;
}

typedef struct {
  const trArgs_t* args;
  const tdCorpus_t* corpus;
  mlpShape_t shape;
} trForkCtx_t;

static int trForkChild(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const trForkCtx_t* fc = arg;
  trEnv_t env;
  memset(&env, 0, sizeof env);
  env.rank = rank;
  env.nranks = nranks;
  env.launcher = "fork";
  env.corpus = *fc->corpus; /* the parent's copy, inherited through fork */
  env.shape = fc->shape;
  zppConfig_t cfg = trCommConfig(fc->args);
  zppResult_t res = zppCommInitRankConfig(&env.comm, nranks, *id, rank, &cfg);
  if (res != zppSuccess) {
    trLibError(&env, "zppCommInitRankConfig", res);
    return TR_EXIT_ERROR;
  }
  return trRankMain(fc->args, &env);
}

static int trForkRun(const trArgs_t* a, const tdCorpus_t* corpus, const mlpShape_t* shape) {
  char layout[32];
  int status[ZPP_LAUNCH_MAX_RANKS];
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = a->forkRanks;
  if (a->layoutNodes > 0) {
    snprintf(layout, sizeof layout, "%dx%d", a->layoutNodes, a->layoutPerNode);
    o.layout = layout;
  }
  o.timeoutSec = TR_LAUNCH_DEADLINE_SEC;
  o.statusOut = status;
  o.quiet = 1; /* our own report below */
  for (int r = 0; r < a->forkRanks; r++) status[r] = TR_EXIT_ERROR;
  trForkCtx_t fc = {a, corpus, *shape};
  int rc = zppLaunch(&o, trForkChild, &fc);
  if (rc == 2) return TR_EXIT_ERROR; /* the launcher said why */
  int worst = TR_EXIT_OK;
  for (int r = 0; r < a->forkRanks; r++) {
    int s = status[r];
    if (s > 128)
      fprintf(stderr, "zpp-train: rank %d died: signal %d\n", r, s - 128);
    else if (s < 0)
      fprintf(stderr, "zpp-train: rank %d killed at the launcher's deadline\n", r);
    int code = (s == TR_EXIT_OK || s == TR_EXIT_USAGE) ? s : TR_EXIT_ERROR;
    if (code == TR_EXIT_ERROR || (code == TR_EXIT_USAGE && worst == TR_EXIT_OK)) worst = code;
  }
  return worst;
}

int main(int argc, char** argv) {
  int envRank = zppLauncherEnvRank();
  const char* envLauncher = "env";
  int envRanks = zppLauncherEnvRanks(&envLauncher);
  /* A one-task srun step is a shell (srun --pty bash), not a launch of ranks. */
  int launched = envRanks != 0 && !(envRanks == 1 && strcmp(envLauncher, "srun") == 0);
  int mpi = 0;
  if (trMpiAvailable() && trMpiLaunched()) {
    if (trMpiInit(&argc, &argv) != 0) return TR_EXIT_ERROR;
    mpi = 1;
  }
  trSilent = envRank > 0;
  trArgs_t a;
  int code = trParseArgs(argc, argv, &a);
  /* --layout alone forks its ranks; under a launcher it only names nodes. */
  if (code == 0 && a.layoutNodes > 0 && a.forkRanks == 0 && !mpi && !launched)
    a.forkRanks = a.layoutNodes * a.layoutPerNode;
  if (code == 0 && a.forkRanks > 0 && (mpi || launched)) {
    if (!trSilent)
      fprintf(stderr,
              "zpp-train: -N forks the ranks here: do not combine it with mpirun, srun or "
              "RANK/WORLD_SIZE (the launcher already made the ranks)\n");
    code = TR_EXIT_USAGE;
  }
  if (code != 0) {
    if (mpi) trMpiFinalize();
    return code < 0 ? TR_EXIT_OK : code;
  }
  if (a.timeoutSec > 0) {
    char t[16];
    snprintf(t, sizeof t, "%d", a.timeoutSec);
    setenv("ZPP_TIMEOUT", t, 1);
  }
  tdCorpus_t corpus;
  char err[512];
  if (tdLoad(a.data, (size_t)a.context + 2, &corpus, err, sizeof err) != 0) {
    if (!trSilent) fprintf(stderr, "zpp-train: %s\n", err);
    if (mpi) trMpiFinalize();
    return TR_EXIT_USAGE;
  }
  mlpShape_t shape = {corpus.vocab, a.context, a.embed, a.hidden, a.weightInOut};
  if (a.forkRanks > 0) {
    code = a.elastic ? trElasticForkRun(&a, &corpus, &shape, trCommConfig(&a), trRankMain)
                     : trForkRun(&a, &corpus, &shape);
    tdFree(&corpus);
    return code;
  }
  trEnv_t env;
  memset(&env, 0, sizeof env);
  env.corpus = corpus;
  env.shape = shape;
  env.rank = envRank > 0 ? envRank : 0;
  env.nranks = 1;
  zppConfig_t cfg = trCommConfig(&a);
  zppResult_t res;
  if (mpi) {
    env.launcher = "mpirun";
    code = trMpiRankSize(&env.rank, &env.nranks) != 0 ? TR_EXIT_ERROR : TR_EXIT_OK;
    trApplyLayout(&a, env.rank);
    zppUniqueId id;
    memset(&id, 0, sizeof id);
    res = zppSuccess;
    if (code == TR_EXIT_OK && env.rank == 0 && (res = zppGetUniqueId(&id)) != zppSuccess)
      trLibError(&env, "zppGetUniqueId", res);
    if (code == TR_EXIT_OK && !trMpiBcastId(&id, res == zppSuccess)) {
      if (env.rank != 0) fprintf(stderr, "zpp-train: rank %d: no unique id from rank 0\n", env.rank);
      code = TR_EXIT_ERROR;
    }
    if (code == TR_EXIT_OK &&
        (res = zppCommInitRankConfig(&env.comm, env.nranks, id, env.rank, &cfg)) != zppSuccess) {
      trLibError(&env, "zppCommInitRankConfig", res);
      code = TR_EXIT_ERROR;
    }
  } else if (envRanks != 0) {
    env.launcher = envLauncher;
    trApplyLayout(&a, envRank);
    if ((res = zppCommInitFromEnv(&env.comm, &cfg)) != zppSuccess) {
      trLibError(&env, "zppCommInitFromEnv (the launcher's environment)", res);
      code = TR_EXIT_ERROR;
    } else {
      zppCommUserRank(env.comm, &env.rank);
      zppCommCount(env.comm, &env.nranks);
    }
  } else {
    env.launcher = "single";
    trApplyLayout(&a, 0);
    zppUniqueId id;
    if ((res = zppGetUniqueId(&id)) != zppSuccess ||
        (res = zppCommInitRankConfig(&env.comm, 1, id, 0, &cfg)) != zppSuccess) {
      trLibError(&env, "creating a one-rank communicator", res);
      code = TR_EXIT_ERROR;
    }
  }
  if (code == TR_EXIT_OK) code = trRankMain(&a, &env);
  tdFree(&env.corpus);
  if (mpi) trMpiFinalize();
  return code;
}
