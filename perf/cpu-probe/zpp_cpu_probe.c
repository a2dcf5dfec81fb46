/*
 * zpp-cpu-probe: how fast this machine's CPUs run zpp's codec right now.
 *
 * A shared virtual machine's CPUs are not always its own: another guest on
 * the same host (a hyperthread sibling, a busy socket) can halve what a vCPU
 * does, for seconds at a time, with no steal time to show for it. A
 * measurement whose ranks share cores and spend their time in the codec (2x2
 * qgZ on a 2-core VM) then measures the host as much as zpp. This tool says
 * when that happened: it runs a fixed codec workload on every CPU it may use,
 * all at once (one pinned thread per CPU, so that each sees its siblings
 * busy, as in a collective), and reports each thread's throughput over its
 * own CPU time. CPU time, not wall time: a probe that shares its CPU with
 * busy ranks gets fewer time slices but the same work per slice, so only a
 * slower CPU lowers the figure.
 *
 * One JSON object per line, per sample (docs/main-job.md, "Host CPU").
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant_kernels/zpp_quant.h"

/* The workload: int4 blocks of 64 (the int4 default) over 128 Ki bf16
 * values, 256 KiB in, 72 KiB out: in L2 on the CPUs this runs on, so the
 * figure is the core's, not the memory bus's. */
enum { kProbeCount = 128 * 1024, kProbeBits = 4, kProbeBlock = 64 };

typedef struct {
  int cpu;
  uint16_t* in;
  void* packed;
  double workNs;    /* CPU time to spend per sample */
  double gbps;      /* result: bytes in per CPU second / 1e9 */
  const char* fail; /* set where the thread could not run the probe */
} probeThread_t;

static volatile sig_atomic_t gStop = 0;
static void onSignal(int sig) {
  (void)sig;
  gStop = 1;
}

static double nowNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* bf16 values of a fixed Gaussian-like spread (sum of uniforms): the codec's
 * usual path, no escapes, no zero blocks. */
static void fillInput(uint16_t* in, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; i++) {
    float s = 0.0f;
    for (int k = 0; k < 4; k++) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      s += (float)(x >> 8) / 16777216.0f - 0.5f;
    }
    uint32_t bits;
    memcpy(&bits, &s, sizeof bits);
    in[i] = (uint16_t)(bits >> 16);
  }
}

static void* probeMain(void* arg) {
  probeThread_t* t = (probeThread_t*)arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(t->cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    t->fail = "cannot pin a thread to it";
    return NULL;
  }
  const double start = nowNs(CLOCK_THREAD_CPUTIME_ID);
  double used = 0.0;
  size_t calls = 0;
  do {
    if (zppQuantize(t->in, zppBfloat16, kProbeCount, kProbeBits, kProbeBlock, t->packed) !=
        zppSuccess) {
      t->fail = "zppQuantize failed";
      return NULL;
    }
    calls++;
    used = nowNs(CLOCK_THREAD_CPUTIME_ID) - start;
  } while (used < t->workNs);
  t->gbps = (double)calls * kProbeCount * sizeof(uint16_t) / used;
  return NULL;
}

/* count samples (0: until a signal), every seconds apart (0: back to back),
 * one line each to out. 0, or 1 after saying why. */
static int runSamples(probeThread_t* th, pthread_t* tid, int ncpu, long count, double every,
                      double workMs, FILE* out) {
  double next = nowNs(CLOCK_MONOTONIC);
  for (long s = 0; !gStop && (count == 0 || s < count); s++) {
    const double t = nowNs(CLOCK_REALTIME) / 1e9;
    int started = 0;
    for (; started < ncpu; started++) {
      th[started].fail = NULL;
      if (pthread_create(&tid[started], NULL, probeMain, &th[started]) != 0) break;
    }
    for (int k = 0; k < started; k++) pthread_join(tid[k], NULL);
    if (started < ncpu) {
      fprintf(stderr, "zpp-cpu-probe: cannot start a thread\n");
      return 1;
    }
    for (int k = 0; k < ncpu; k++)
      if (th[k].fail != NULL) {
        fprintf(stderr, "zpp-cpu-probe: CPU %d: %s\n", th[k].cpu, th[k].fail);
        return 1;
      }
    fprintf(
        out,
        "{\"tool\": \"zpp-cpu-probe\", \"t\": %.3f, \"codec\": \"%s\", \"work_ms\": %g, \"cpus\": [", t,
        zppQuantImplName(), workMs);
    for (int k = 0; k < ncpu; k++) fprintf(out, "%s%d", k ? ", " : "", th[k].cpu);
    fprintf(out, "], \"gbps\": [");
    for (int k = 0; k < ncpu; k++) fprintf(out, "%s%.3f", k ? ", " : "", th[k].gbps);
    fprintf(out, "]}\n");
    fflush(out);
    if (every == 0.0) continue;
    next += every * 1e9;
    const double wait = next - nowNs(CLOCK_MONOTONIC);
    if (wait > 0 && (count == 0 || s + 1 < count)) {
      struct timespec ts = {(time_t)(wait / 1e9), (long)((int64_t)wait % 1000000000)};
      nanosleep(&ts, NULL); /* a signal ends it early; the loop then stops */
    }
  }
  return 0;
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: zpp-cpu-probe [--every SECONDS] [--count N] [--work-ms MS] [-o FILE]\n"
          "  Runs zpp's CPU codec (bf16 to int4, 256 KiB in L2) on every CPU this process\n"
          "  may use, all at once, one pinned thread each, and prints one JSON line per\n"
          "  sample with each CPU's throughput over that thread's own CPU time:\n"
          "    {\"tool\": \"zpp-cpu-probe\", \"t\": 1795000000.123, \"codec\": \"avx2\",\n"
          "     \"work_ms\": 20, \"cpus\": [0, 1], \"gbps\": [6.91, 7.02]}\n"
          "  A slower figure than the machine's usual one means the CPUs themselves ran\n"
          "  slower (another guest on a shared host), not that they were busy.\n"
          "  --every S    a sample every S seconds (0.1..3600) until --count samples or\n"
          "               SIGTERM/SIGINT (then it exits 0); default: one sample\n"
          "  --count N    samples to take (default 1; with --every, 0 means no limit)\n"
          "  --work-ms MS CPU time each thread spends per sample (1..10000, default 20)\n"
          "  -o FILE      write the lines to FILE (truncated first), not stdout\n");
}

static int parseDouble(const char* s, double lo, double hi, double* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= lo && v <= hi)) return 0;
  *out = v;
  return 1;
}

int main(int argc, char** argv) {
  double every = 0.0, workMs = 20.0, countD = 1.0;
  const char* outPath = NULL;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--every") == 0 || strcmp(a, "--count") == 0 || strcmp(a, "--work-ms") == 0 ||
        strcmp(a, "-o") == 0) {
      if (v == NULL) {
        fprintf(stderr, "zpp-cpu-probe: %s needs a value (try --help)\n", a);
        return 2;
      }
      i++;
      int ok = 1;
      if (strcmp(a, "--every") == 0)
        ok = parseDouble(v, 0.1, 3600.0, &every);
      else if (strcmp(a, "--count") == 0)
        ok = parseDouble(v, 0.0, (double)INT_MAX, &countD) && countD == (double)(long)countD;
      else if (strcmp(a, "--work-ms") == 0)
        ok = parseDouble(v, 1.0, 10000.0, &workMs);
      else
        outPath = v;
      if (!ok) {
        fprintf(stderr, "zpp-cpu-probe: bad value '%s' for %s (try --help)\n", v, a);
        return 2;
      }
      continue;
    }
    fprintf(stderr, "zpp-cpu-probe: unknown argument '%s' (try --help)\n", a);
    return 2;
  }
  long count = (long)countD;
  if (count == 0 && every == 0.0) {
    fprintf(stderr, "zpp-cpu-probe: --count 0 (no limit) needs --every\n");
    return 2;
  }

  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    perror("zpp-cpu-probe: sched_getaffinity");
    return 1;
  }
  const int ncpu = CPU_COUNT(&allowed);
  int rc = 1;
  FILE* out = stdout;
  probeThread_t* th = calloc((size_t)ncpu, sizeof *th);
  pthread_t* tid = calloc((size_t)ncpu, sizeof *tid);
  if (th == NULL || tid == NULL) {
    fprintf(stderr, "zpp-cpu-probe: out of memory\n");
    goto done;
  }
  for (int c = 0, k = 0; k < ncpu; c++) {
    if (!CPU_ISSET(c, &allowed)) continue;
    th[k].cpu = c;
    th[k].workNs = workMs * 1e6;
    th[k].in = malloc(kProbeCount * sizeof(uint16_t));
    th[k].packed = malloc(zppQuantPackedSize(kProbeCount, kProbeBits, kProbeBlock));
    if (th[k].in == NULL || th[k].packed == NULL) {
      fprintf(stderr, "zpp-cpu-probe: out of memory\n");
      goto done;
    }
    fillInput(th[k].in, kProbeCount, (uint32_t)k + 1u);
    k++;
  }
  if (outPath != NULL && (out = fopen(outPath, "w")) == NULL) {
    fprintf(stderr, "zpp-cpu-probe: cannot write %s: %s\n", outPath, strerror(errno));
    out = stdout;
    goto done;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = onSignal; /* no SA_RESTART: the sleep between samples ends at once */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  rc = runSamples(th, tid, ncpu, count, every, workMs, out);

done:
  if (out != stdout && fclose(out) != 0 && rc == 0) {
    fprintf(stderr, "zpp-cpu-probe: cannot write %s: %s\n", outPath, strerror(errno));
    rc = 1;
  }
  for (int k = 0; th != NULL && k < ncpu; k++) {
    free(th[k].in);
    free(th[k].packed);
  }
  free(th);
  free(tid);
  return rc;
}
