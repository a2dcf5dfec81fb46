/*
 * zpp-health's command line and its baseline files. Everything a user can
 * get wrong is refused here, before any rank starts, with one line that
 * says what and where (exit code 2).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "perf_device.h"
#include "perf_math.h"
#include "zpp_health.h"

static void zhUsage(FILE* f) {
  fprintf(f,
          "Usage: zpp-health [options]\n"
          "\n"
          "Checks that a cluster gives the all-reduce bandwidth it should before a job\n"
          "starts; when it does not, finds the slow nodes and links, the ranks that\n"
          "return wrong data and the ranks that hang or die. Run it as one rank per\n"
          "process like any zpp program (mpirun, srun, torchrun-style environment), or\n"
          "let it fork its ranks here with -N.\n"
          "\n"
          "Launch:\n"
          "  -N, --nranks N          fork N ranks on this machine (no launcher needed)\n"
          "      --layout NxL        emulate N nodes of L ranks (ZPP_HOSTID=node<k> in rank k*L..);\n"
          "                          with -N or under a launcher on one machine\n"
          "      --ctl-port P        port of rank 0's control connection (default: the\n"
          "                          rendezvous port zppCommInitFromEnv would use:\n"
          "                          ZPP_ROOT's, else MASTER_PORT + ZPP_MASTER_PORT_OFFSET;\n"
          "                          under srun without them, one derived from the job id)\n"
          "Measurement:\n"
          "  -s, --size SIZE         all-reduce size in bytes (K/M/G = 2^10..) or 'auto'\n"
          "                          (default: doubled from 1 MiB until one all-reduce of all\n"
          "                          ranks takes --target-time, at most --max-size)\n"
          "      --target-time S     auto size: seconds one all-reduce should take (0.2)\n"
          "      --max-size SIZE     auto size: the largest size tried (256M)\n"
          "      --trials K          timed trials per test (3); any trial below the\n"
          "                          threshold fails the test, so a node that is only\n"
          "                          sometimes slow is still caught\n"
          "  -n, --iters I           all-reduces per trial (1)\n"
          "  -w, --warmup W          untimed all-reduces before the trials of a test (1)\n"
          "      --device            the trials on device buffers: one GPU per local rank,\n"
          "                          NCCL between them, as a GPU job uses them (needs CUDA)\n"
          "Expectation (what busbw a healthy cluster gives):\n"
          "      --expect-busbw BW   all-reduce busbw as a number and unit: GB/s (bytes,\n"
          "                          1e9/s, nccl-tests' unit; the default for a bare\n"
          "                          number), MB/s, Gbit/s or Mbit/s; e.g. 11.5, 92Gbit/s\n"
          "      --baseline FILE     the busbw saved by --save-baseline in a healthy run\n"
          "      --save-baseline FILE  save this run's busbw as a baseline (healthy runs only)\n"
          "                          (neither: the rate it measures point-to-point between\n"
          "                          pairs of nodes, the best pair being what every link\n"
          "                          should give)\n"
          "      --threshold F       healthy when busbw >= F x expectation (0.8)\n"
          "      --localize-threshold F  the search names a node or link whose tests fall\n"
          "                          below F x expectation (0.5): clearly slower than its\n"
          "                          peers, beyond what small sets vary by\n"
          "      --p2p-rounds R      rounds of pairs for the measured expectation (3)\n"
          "Localization:\n"
          "      --no-localize       stop at the verdict\n"
          "      --parallel          test disjoint node sets at the same time (the default\n"
          "                          unless all ranks run on one machine, whose CPUs the\n"
          "                          emulated nodes share)\n"
          "      --serial            one test at a time\n"
          "Bounds:\n"
          "      --timeout S         every wait inside a test (ZPP_TIMEOUT); a rank without\n"
          "                          progress for longer is named hung (30)\n"
          "      --time-limit S      bound on the whole run; localization stops in time (600)\n"
          "Output:\n"
          "  -J, --json FILE         the report as JSON\n"
          "      --prometheus FILE   the verdict and every measured rate as Prometheus\n"
          "                          metrics (node_exporter textfile collector: FILE in its\n"
          "                          folder, named *.prom), replaced whole at the end\n"
          "  -q, --quiet             only the verdict line\n"
          "  -v, --verbose           one line per test; the library's own log as configured\n"
          "      --progress, --no-progress  the progress line (default: on a terminal)\n"
          "  -h, --help\n"
          "\n"
          "Exit: 0 healthy, 1 slow, 2 usage or bad baseline, 3 wrong data, 4 a rank hung,\n"
          "died or never joined, 5 the check could not run. See docs/zpp-health.md.\n");
}

static int zhBad(const char* fmt, const char* v) {
  fprintf(stderr, "zpp-health: ");
  fprintf(stderr, fmt, v);
  fprintf(stderr, " (see zpp-health --help)\n");
  return ZPP_HEALTH_EXIT_USAGE;
}

/* The folder a report goes to must take a new file: found before the run,
 * not after minutes of measuring. */
static int zhFolderWritable(const char* path) {
  char dir[4096];
  const char* slash = strrchr(path, '/');
  if (slash == NULL) return access(".", W_OK);
  if ((size_t)(slash - path) >= sizeof dir) return -1;
  snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  return access(dir, W_OK);
}

static int zhParseInt(const char* s, long lo, long hi, int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int zhParseSeconds(const char* s, double lo, double* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v < lo) return -1;
  *out = v;
  return 0;
}

int zppHealthParseBandwidth(const char* text, double* gbps) {
  char* end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno != 0 || !isfinite(v) || !(v > 0)) return -1;
  while (*end == ' ') end++;
  /* Bits must say "bit" or "b/s", bytes "B/s": "Gbps" is refused because
   * half the world reads it as bytes. */
  static const struct {
    const char* unit;
    double toGBps;
  } units[] = {{"", 1.0},         {"GB/s", 1.0},     {"MB/s", 1e-3},    {"TB/s", 1e3},
               {"Gbit/s", 0.125}, {"Gbit", 0.125},   {"Gb/s", 0.125},   {"Mbit/s", 1.25e-4},
               {"Mbit", 1.25e-4}, {"Mb/s", 1.25e-4}, {"Tbit/s", 125.0}, {"Tb/s", 125.0}};
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    if (strcmp(end, units[i].unit) == 0) {
      *gbps = v * units[i].toGBps;
      return 0;
    }
  }
  return -1;
}

int zppHealthParseArgs(int argc, char** argv, zppHealthArgs_t* a, int* exitNow) {
  memset(a, 0, sizeof(*a));
  a->targetSec = 0.2;
  a->maxAutoBytes = (size_t)256 << 20;
  a->trials = 3;
  a->iters = 1;
  a->warmup = 1;
  a->threshold = 0.8;
  a->localizeThreshold = 0.5;
  a->p2pRounds = 3;
  a->localize = 1;
  a->parallel = -1;
  a->timeoutSec = 0; /* unset: ZPP_TIMEOUT, else 30 (resolved in main) */
  a->timeLimitSec = 600;
  a->progress = -1;
  *exitNow = -1;
  enum {
    O_LAYOUT = 1000,
    O_CTLPORT,
    O_TARGET,
    O_MAXSIZE,
    O_TRIALS,
    O_EXPECT,
    O_BASELINE,
    O_SAVE,
    O_THRESHOLD,
    O_LTHRESHOLD,
    O_P2P,
    O_NOLOC,
    O_PAR,
    O_SER,
    O_TIMEOUT,
    O_LIMIT,
    O_PROG,
    O_NOPROG,
    O_DEVICE,
    O_PROM
  };
  static const struct option longOpts[] = {{"nranks", required_argument, 0, 'N'},
                                           {"layout", required_argument, 0, O_LAYOUT},
                                           {"ctl-port", required_argument, 0, O_CTLPORT},
                                           {"size", required_argument, 0, 's'},
                                           {"target-time", required_argument, 0, O_TARGET},
                                           {"max-size", required_argument, 0, O_MAXSIZE},
                                           {"trials", required_argument, 0, O_TRIALS},
                                           {"iters", required_argument, 0, 'n'},
                                           {"warmup", required_argument, 0, 'w'},
                                           {"expect-busbw", required_argument, 0, O_EXPECT},
                                           {"baseline", required_argument, 0, O_BASELINE},
                                           {"save-baseline", required_argument, 0, O_SAVE},
                                           {"threshold", required_argument, 0, O_THRESHOLD},
                                           {"p2p-rounds", required_argument, 0, O_P2P},
                                           {"localize-threshold", required_argument, 0, O_LTHRESHOLD},
                                           {"no-localize", no_argument, 0, O_NOLOC},
                                           {"parallel", no_argument, 0, O_PAR},
                                           {"serial", no_argument, 0, O_SER},
                                           {"timeout", required_argument, 0, O_TIMEOUT},
                                           {"time-limit", required_argument, 0, O_LIMIT},
                                           {"json", required_argument, 0, 'J'},
                                           {"quiet", no_argument, 0, 'q'},
                                           {"verbose", no_argument, 0, 'v'},
                                           {"progress", no_argument, 0, O_PROG},
                                           {"no-progress", no_argument, 0, O_NOPROG},
                                           {"device", no_argument, 0, O_DEVICE},
                                           {"prometheus", required_argument, 0, O_PROM},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":N:s:n:w:J:qvh", longOpts, NULL)) != -1) {
    const char* v = optarg;
    switch (ch) {
      case 'N':
        if (zhParseInt(v, 2, ZH_MAX_RANKS, &a->forkRanks))
          return zhBad("-N '%s': a rank count of at least 2", v);
        break;
      case O_LAYOUT: {
        char extra;
        if (sscanf(v, "%dx%d%c", &a->layoutNodes, &a->layoutPerNode, &extra) != 2 ||
            a->layoutNodes < 1 || a->layoutPerNode < 1)
          return zhBad("--layout '%s': NODESxRANKS, e.g. 4x1", v);
        break;
      }
      case O_CTLPORT:
        if (zhParseInt(v, 1, 65535, &a->ctlPort)) return zhBad("--ctl-port '%s': a TCP port", v);
        break;
      case 's':
        if (strcmp(v, "auto") == 0)
          a->sizeBytes = 0;
        else if (zppPerfParseSize(v, &a->sizeBytes) || a->sizeBytes < 1024)
          return zhBad("--size '%s': bytes (at least 1K, K/M/G suffixes) or auto", v);
        break;
      case O_TARGET:
        if (zhParseSeconds(v, 0.001, &a->targetSec)) return zhBad("--target-time '%s': seconds", v);
        break;
      case O_MAXSIZE:
        if (zppPerfParseSize(v, &a->maxAutoBytes) || a->maxAutoBytes < ((size_t)1 << 20))
          return zhBad("--max-size '%s': bytes, at least 1M", v);
        break;
      case O_TRIALS:
        if (zhParseInt(v, 1, ZH_MAX_TRIALS, &a->trials)) return zhBad("--trials '%s': 1 to 32", v);
        break;
      case 'n':
        if (zhParseInt(v, 1, 1000, &a->iters)) return zhBad("-n '%s': 1 to 1000 iterations", v);
        break;
      case 'w':
        if (zhParseInt(v, 0, 1000, &a->warmup)) return zhBad("-w '%s': 0 to 1000 iterations", v);
        break;
      case O_EXPECT:
        if (zppHealthParseBandwidth(v, &a->expectGBps))
          return zhBad(
              "--expect-busbw '%s': a positive number with GB/s (the default), MB/s, Gbit/s "
              "or Mbit/s ('Gbps' is ambiguous: write Gbit/s or GB/s)",
              v);
        a->expectFrom = ZH_EXPECT_CMDLINE;
        snprintf(a->expectText, sizeof a->expectText, "%s", v);
        break;
      case O_BASELINE:
        a->baselinePath = v;
        a->expectFrom = ZH_EXPECT_BASELINE;
        break;
      case O_SAVE: a->saveBaselinePath = v; break;
      case O_THRESHOLD:
        if (zhParseSeconds(v, 0.0, &a->threshold) || !(a->threshold > 0 && a->threshold <= 1))
          return zhBad("--threshold '%s': a fraction in (0, 1], e.g. 0.8", v);
        break;
      case O_LTHRESHOLD:
        if (zhParseSeconds(v, 0.0, &a->localizeThreshold) ||
            !(a->localizeThreshold > 0 && a->localizeThreshold <= 1))
          return zhBad("--localize-threshold '%s': a fraction in (0, 1], e.g. 0.5", v);
        break;
      case O_P2P:
        if (zhParseInt(v, 1, 1000, &a->p2pRounds)) return zhBad("--p2p-rounds '%s': at least 1", v);
        break;
      case O_NOLOC: a->localize = 0; break;
      case O_PAR: a->parallel = 1; break;
      case O_SER: a->parallel = 0; break;
      case O_TIMEOUT: {
        /* Whole seconds: it becomes ZPP_TIMEOUT, an integer parameter. */
        int sec = 0;
        if (zhParseInt(v, 1, 86400, &sec)) return zhBad("--timeout '%s': whole seconds, 1 to 86400", v);
        a->timeoutSec = sec;
        break;
      }
      case O_LIMIT:
        if (zhParseSeconds(v, 1.0, &a->timeLimitSec))
          return zhBad("--time-limit '%s': seconds, at least 1", v);
        break;
      case 'J': a->jsonPath = v; break;
      case O_PROM: a->promPath = v; break;
      case 'q': a->quiet = 1; break;
      case 'v': a->verbose = 1; break;
      case O_PROG: a->progress = 1; break;
      case O_DEVICE: a->device = 1; break;
      case O_NOPROG: a->progress = 0; break;
      case 'h':
        zhUsage(stdout);
        *exitNow = 0;
        return 0;
      case ':': return zhBad("option '%s' needs a value", argv[optind - 1]);
      default: return zhBad("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return zhBad("unexpected argument '%s'", argv[optind]);
  if (a->expectGBps > 0 && a->baselinePath)
    return zhBad("%s--expect-busbw and --baseline both give the expectation: choose one", "");
  if (a->layoutNodes > 0 && a->forkRanks > 0) {
    if (a->forkRanks != a->layoutNodes * a->layoutPerNode) {
      char msg[64];
      snprintf(msg, sizeof msg, "%dx%d", a->layoutNodes, a->layoutPerNode);
      return zhBad("--layout %s does not make the -N rank count", msg);
    }
  }
  if (a->device && !zppPerfDeviceAvailable())
    return zhBad("--device: this zpp-health was built without CUDA and NCCL%s", "");
  if (a->jsonPath && a->saveBaselinePath && strcmp(a->jsonPath, a->saveBaselinePath) == 0)
    return zhBad("-J and --save-baseline name the same file '%s'", a->jsonPath);
  if (a->promPath && ((a->jsonPath && strcmp(a->promPath, a->jsonPath) == 0) ||
                      (a->saveBaselinePath && strcmp(a->promPath, a->saveBaselinePath) == 0)))
    return zhBad("--prometheus names the same file as -J or --save-baseline: '%s'", a->promPath);
  if (a->promPath && zhFolderWritable(a->promPath) != 0)
    return zhBad("--prometheus '%s': its folder does not exist or is not writable", a->promPath);
  return 0;
}

/* ---- baseline files ------------------------------------------------------------
 * Plain "key value" lines, so that an operator can read and edit one:
 *
 *   zpp-health-baseline 1
 *   created 2026-11-21T19:40:00Z
 *   ranks 4
 *   nodes 4
 *   bytes 16777216
 *   allreduce_busbw_gbps 0.0951
 *   ...
 */

#define ZH_BASELINE_MAGIC "zpp-health-baseline"

int zppHealthLoadBaseline(const char* path, zppHealthBaseline_t* b, char* err, size_t errLen) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, errLen, "cannot read baseline file '%s': %s", path, strerror(errno));
    return -1;
  }
  zppHealthBaseline_t v;
  memset(&v, 0, sizeof v);
  char line[512];
  int lineNo = 0, sawMagic = 0, have = 0, rc = -1;
  enum { H_RANKS = 1, H_NODES = 2, H_BYTES = 4, H_AR = 8 };
  while (fgets(line, sizeof line, f)) {
    lineNo++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      snprintf(err, errLen, "%s:%d: line too long: not a zpp-health baseline", path, lineNo);
      goto out;
    }
    char key[64], val[256], extra[8];
    int n = sscanf(line, " %63s %255s %7s", key, val, extra);
    if (n <= 0 || key[0] == '#') continue;
    if (!sawMagic) {
      if (n != 2 || strcmp(key, ZH_BASELINE_MAGIC) != 0) {
        snprintf(err, errLen,
                 "%s:%d: not a zpp-health baseline (the first line must be '%s 1'; make one "
                 "with --save-baseline)",
                 path, lineNo, ZH_BASELINE_MAGIC);
        goto out;
      }
      if (strcmp(val, "1") != 0) {
        snprintf(err, errLen, "%s:%d: baseline format version %s, this zpp-health reads version 1",
                 path, lineNo, val);
        goto out;
      }
      sawMagic = 1;
      continue;
    }
    if (n != 2) {
      snprintf(err, errLen, "%s:%d: expected 'key value', got '%.*s'", path, lineNo,
               (int)strcspn(line, "\n"), line);
      goto out;
    }
    char* end = NULL;
    errno = 0;
    double d = strtod(val, &end);
    int isNum = end != val && *end == '\0' && errno == 0 && isfinite(d);
    int bit = 0;
    if (strcmp(key, "created") == 0) {
      snprintf(v.created, sizeof v.created, "%.39s", val);
      continue;
    } else if (strcmp(key, "ranks") == 0 && isNum && d >= 1 && d == floor(d) && d <= ZH_MAX_RANKS) {
      v.ranks = (int)d, bit = H_RANKS;
    } else if (strcmp(key, "nodes") == 0 && isNum && d >= 1 && d == floor(d) && d <= ZH_MAX_RANKS) {
      v.nodes = (int)d, bit = H_NODES;
    } else if (strcmp(key, "bytes") == 0 && isNum && d >= 1024 && d == floor(d) && d < 1e15) {
      v.bytes = (size_t)d, bit = H_BYTES;
    } else if (strcmp(key, "allreduce_busbw_gbps") == 0 && isNum && d > 0) {
      v.allreduceBusbw = d, bit = H_AR;
    } else if (strcmp(key, "allgather_busbw_gbps") == 0 && isNum && d > 0) {
      v.allgatherBusbw = d;
      continue;
    } else if (strcmp(key, "p2p_busbw_gbps") == 0 && isNum && d > 0) {
      v.p2pBusbw = d;
      continue;
    } else {
      static const char* known[] = {
          "ranks", "nodes", "bytes", "allreduce_busbw_gbps", "allgather_busbw_gbps", "p2p_busbw_gbps"};
      int isKnown = 0;
      for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) isKnown |= strcmp(key, known[i]) == 0;
      if (isKnown)
        snprintf(err, errLen, "%s:%d: bad value for %s: '%s'", path, lineNo, key, val);
      else
        snprintf(err, errLen, "%s:%d: unknown key '%s'", path, lineNo, key);
      goto out;
    }
    if (have & bit) {
      snprintf(err, errLen, "%s:%d: %s given twice", path, lineNo, key);
      goto out;
    }
    have |= bit;
  }
  if (ferror(f)) {
    snprintf(err, errLen, "cannot read baseline file '%s': %s", path, strerror(errno));
    goto out;
  }
  if (!sawMagic) {
    snprintf(err, errLen, "%s: empty: not a zpp-health baseline (make one with --save-baseline)", path);
    goto out;
  }
  if ((have & (H_RANKS | H_NODES | H_BYTES | H_AR)) != (H_RANKS | H_NODES | H_BYTES | H_AR)) {
    snprintf(err, errLen, "%s: incomplete baseline: missing %s", path,
             !(have & H_AR)      ? "allreduce_busbw_gbps"
             : !(have & H_BYTES) ? "bytes"
             : !(have & H_RANKS) ? "ranks"
                                 : "nodes");
    goto out;
  }
  *b = v;
  rc = 0;
out:
  fclose(f);
  return rc;
}

int zppHealthSaveBaseline(const char* path, const zppHealthBaseline_t* b, char* err, size_t errLen) {
  /* Written whole to a temporary name and renamed, so that a baseline is
   * never half a file. */
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (f == NULL) {
    snprintf(err, errLen, "cannot write baseline file '%s': %s", tmp, strerror(errno));
    return -1;
  }
  fprintf(f, "# zpp-health baseline: the busbw of a healthy run, the expectation of later runs\n");
  fprintf(f, "# (zpp-health --baseline FILE); GB/s = 1e9 bytes per second, nccl-tests' busbw\n");
  fprintf(f, "%s 1\n", ZH_BASELINE_MAGIC);
  fprintf(f, "created %s\n", b->created[0] ? b->created : "unknown");
  fprintf(f, "ranks %d\nnodes %d\nbytes %zu\n", b->ranks, b->nodes, b->bytes);
  fprintf(f, "allreduce_busbw_gbps %.6g\n", b->allreduceBusbw);
  if (b->allgatherBusbw > 0) fprintf(f, "allgather_busbw_gbps %.6g\n", b->allgatherBusbw);
  if (b->p2pBusbw > 0) fprintf(f, "p2p_busbw_gbps %.6g\n", b->p2pBusbw);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    snprintf(err, errLen, "cannot write baseline file '%s': %s", path, strerror(errno));
    remove(tmp);
    return -1;
  }
  return 0;
}
