/*
 * zpp-health's verdict for fleets: Prometheus metrics in the text exposition
 * format, for node_exporter's textfile collector (--prometheus FILE).
 *
 * Every value is a gauge in base units (bytes per second, seconds), as
 * Prometheus names them. The file is written beside its final name and
 * renamed into place, so the collector, which reads the folder at any
 * moment, never sees half a run. What the series mean is in
 * docs/zpp-health.md; the JSON (-J) stays the whole story.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zpp_health.h"

/* Label values escape backslash, double quote and newline; nothing else. */
static void zhPromLabel(FILE* f, const char* name, const char* value, int first) {
  fprintf(f, "%s%s=\"", first ? "" : ",", name);
  for (const char* p = value ? value : ""; *p; p++) {
    if (*p == '\\' || *p == '"')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void zhPromHead(FILE* f, const char* name, const char* help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

/* A sample without labels; a value that was never measured is left out
 * rather than written as NaN, which alert rules would compare as "false". */
static void zhPromValue(FILE* f, const char* name, const char* help, double v) {
  if (!isfinite(v)) return;
  zhPromHead(f, name, help);
  fprintf(f, "%s %.15g\n", name, v);
}

static double zhWallClock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The verdict two ways: the exit code (what a prolog acts on) and one series
 * per verdict name, 1 for this run's, so that an alert can name the state. */
static void zhPromVerdict(FILE* f, int code) {
  static const int codes[] = {ZPP_HEALTH_EXIT_OK,   ZPP_HEALTH_EXIT_SLOW,  ZPP_HEALTH_EXIT_WRONG,
                              ZPP_HEALTH_EXIT_HUNG, ZPP_HEALTH_EXIT_ERROR, ZPP_HEALTH_EXIT_USAGE};
  zhPromValue(
      f, "zpp_health_exit_code",
      "Exit code of the last run: 0 healthy, 1 slow, 2 usage, 3 wrong data, 4 hung or dead, 5 error.",
      code);
  zhPromHead(f, "zpp_health_verdict", "1 for the verdict of the last run, 0 for the others.");
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    fputs("zpp_health_verdict{", f);
    zhPromLabel(f, "verdict", zhVerdictName(codes[i]), 1);
    fprintf(f, "} %d\n", codes[i] == code);
  }
}

/* What every file says, the full report and rank 1's when rank 0 was lost. */
static void zhPromCommon(FILE* f, int code, int complete, int nranks) {
  zhPromVerdict(f, code);
  zhPromValue(f, "zpp_health_complete",
              "1 when the last run finished its search, 0 when it was cut short (time limit, lost "
              "coordinator).",
              complete);
  zhPromValue(f, "zpp_health_ranks", "Ranks in the last run.", nranks);
  zhPromValue(f, "zpp_health_last_run_timestamp_seconds",
              "When the last run ended, in seconds since the epoch.", zhWallClock());
}

/* The two units of a two-unit test, smaller index first. */
static int zhPairOf(const zhTest_t* t, int* a, int* b) {
  if (t->nUnits != 2 || t->trials[0] == 0 || t->failed) return 0;
  *a = t->units[0] < t->units[1] ? t->units[0] : t->units[1];
  *b = t->units[0] < t->units[1] ? t->units[1] : t->units[0];
  return 1;
}

/* Each node's best all-reduce rate with any one peer: a node that is slow is
 * slow with every peer, while one bad link leaves its nodes a good pair.
 * Each link's rate is its latest measurement (a confirming test follows a
 * failed one). */
static void zhPromUnits(FILE* f, const zhCoord_t* c) {
  int any = 0;
  for (int u = 0; u < c->nUnits; u++) {
    double best = NAN;
    for (int i = 0; i < c->nTests; i++) {
      int a, b;
      if (zhPairOf(c->tests[i], &a, &b) && (a == u || b == u) && !(c->tests[i]->median[0] <= best))
        best = c->tests[i]->median[0];
    }
    if (!isfinite(best)) continue;
    if (!any++)
      zhPromHead(f, "zpp_health_node_busbw_bytes_per_second",
                 "Best all-reduce busbw of a node with any one peer in the last run (units are ranks "
                 "on one node).");
    fputs("zpp_health_node_busbw_bytes_per_second{", f);
    zhPromLabel(f, "node", zhUnitName(c, u), 1);
    fprintf(f, "} %.15g\n", best * 1e9);
  }
  any = 0;
  for (int i = 0; i < c->nTests; i++) {
    int a, b, later = 0;
    if (!zhPairOf(c->tests[i], &a, &b)) continue;
    for (int j = i + 1; j < c->nTests && !later; j++) {
      int a2, b2;
      later = zhPairOf(c->tests[j], &a2, &b2) && a2 == a && b2 == b;
    }
    if (later) continue;
    if (!any++)
      zhPromHead(f, "zpp_health_link_busbw_bytes_per_second",
                 "All-reduce busbw between two nodes, their latest test in the last run.");
    fputs("zpp_health_link_busbw_bytes_per_second{", f);
    zhPromLabel(f, "node_a", zhUnitName(c, a), 1);
    zhPromLabel(f, "node_b", zhUnitName(c, b), 0);
    fprintf(f, "} %.15g\n", c->tests[i]->median[0] * 1e9);
  }
}

static void zhPromSuspectRow(FILE* f, const char* kind, const char* problem, const char* target) {
  fputs("zpp_health_suspect{", f);
  zhPromLabel(f, "kind", kind, 1);
  zhPromLabel(f, "problem", problem, 0);
  zhPromLabel(f, "target", target, 0);
  fputs("} 1\n", f);
}

/* One series per suspect, named as the summary names it. */
static void zhPromSuspects(FILE* f, const zhCoord_t* c) {
  static const char* kinds[] = {"node", "link", "rank", "set"};
  static const char* probs[] = {"slow", "wrong_data", "hung", "dead"};
  if (c->nSus == 0) return;
  zhPromHead(f, "zpp_health_suspect",
             "1 for each node, link, rank or node set the last run named, with its problem.");
  for (int i = 0; i < c->nSus; i++) {
    const zhSuspect_t* s = &c->sus[i];
    char target[512] = "";
    const char* kind = kinds[s->kind];
    if (s->kind == ZH_SUS_NODE && !c->unitsAreNodes) { /* on one node the units are ranks */
      kind = "rank";
      snprintf(target, sizeof target, "%d", c->units[s->a].ranks[0]);
    } else if (s->kind == ZH_SUS_NODE) {
      snprintf(target, sizeof target, "%s", zhUnitName(c, s->a));
    } else if (s->kind == ZH_SUS_LINK) {
      snprintf(target, sizeof target, "%s-%s", zhUnitName(c, s->a), zhUnitName(c, s->b));
    } else if (s->kind == ZH_SUS_RANK) {
      snprintf(target, sizeof target, "%d", s->a);
    } else {
      size_t len = 0;
      for (int k = 0; k < s->nSet && len < sizeof target; k++)
        len += (size_t)snprintf(target + len, sizeof target - len, "%s%s", k ? "," : "",
                                zhUnitName(c, s->set[k]));
    }
    zhPromSuspectRow(f, kind, probs[s->problem], target);
  }
}

/* Writes through a temporary file in the same folder and renames it. */
typedef void (*zhPromBody_t)(FILE* f, const void* arg);

static int zhPromWriteFile(const char* path, zhPromBody_t body, const void* arg, char* err,
                           size_t errLen) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
    snprintf(err, errLen, "--prometheus path is too long");
    return -1;
  }
  FILE* f = fopen(tmp, "w");
  if (f == NULL) {
    snprintf(err, errLen, "cannot write %s: %s", tmp, strerror(errno));
    return -1;
  }
  body(f, arg);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    snprintf(err, errLen, "writing %s failed", tmp);
    unlink(tmp);
    return -1;
  }
  if (rename(tmp, path) != 0) {
    snprintf(err, errLen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

static void zhPromRun(FILE* f, const void* arg) {
  const zhCoord_t* c = arg;
  const zhTest_t* w = c->worldTest > 0 ? c->tests[c->worldTest - 1] : NULL;
  zhPromCommon(f, c->verdict, !c->incomplete, c->nranks);
  zhPromValue(f, "zpp_health_nodes", "Nodes in the last run.", c->nNodes);
  zhPromValue(f, "zpp_health_duration_seconds", "How long the last run took.", zppClockNow() - c->t0);
  if (w && w->trials[0]) {
    zhPromValue(
        f, "zpp_health_allreduce_busbw_bytes_per_second",
        "All-reduce busbw of all ranks together (median of the trials), nccl-tests' definition.",
        w->median[0] * 1e9);
    zhPromValue(f, "zpp_health_allreduce_min_busbw_bytes_per_second",
                "Slowest all-reduce trial of all ranks together.", w->min[0] * 1e9);
  }
  if (w && w->trials[1])
    zhPromValue(f, "zpp_health_allgather_busbw_bytes_per_second",
                "All-gather busbw of all ranks together (median of the trials).", w->median[1] * 1e9);
  if (w)
    zhPromValue(f, "zpp_health_wrong_elements", "Wrong elements in the all-ranks results.",
                (double)w->wrong);
  if (c->expect > 0) {
    zhPromHead(f, "zpp_health_expected_busbw_bytes_per_second",
               "The busbw the run expected, and where from.");
    fputs("zpp_health_expected_busbw_bytes_per_second{", f);
    zhPromLabel(f, "source", c->expectFrom, 1);
    fprintf(f, "} %.15g\n", c->expect * 1e9);
  }
  if (c->required > 0)
    zhPromValue(f, "zpp_health_required_busbw_bytes_per_second",
                "The busbw below which the run calls the cluster slow (threshold x expectation).",
                c->required * 1e9);
  zhPromUnits(f, c);
  zhPromSuspects(f, c);
}

int zhWritePrometheus(const zhCoord_t* c, const char* path, char* err, size_t errLen) {
  return zhPromWriteFile(path, zhPromRun, c, err, errLen);
}

typedef struct {
  int nranks;
  const char* problem;
} zhPromLost_t;

static void zhPromCoordinatorLost(FILE* f, const void* arg) {
  const zhPromLost_t* l = arg;
  zhPromCommon(f, ZPP_HEALTH_EXIT_HUNG, 0, l->nranks);
  zhPromHead(f, "zpp_health_suspect",
             "1 for each node, link, rank or node set the last run named, with its problem.");
  zhPromSuspectRow(f, "rank", strcmp(l->problem, "died") == 0 ? "dead" : "hung", "0");
}

int zhWriteFallbackPrometheus(const char* path, int nranks, const char* problem, char* err,
                              size_t errLen) {
  zhPromLost_t l = {nranks, problem};
  return zhPromWriteFile(path, zhPromCoordinatorLost, &l, err, errLen);
}
