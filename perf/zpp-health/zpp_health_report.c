/*
 * What zpp-health tells people: a progress line on a terminal while it
 * searches, a short summary whose last line is the verdict, and the same
 * in JSON for machines (-J).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf_math.h"
#include "zpp_health.h"

const char* zhVerdictName(int code) {
  switch (code) {
    case ZPP_HEALTH_EXIT_OK: return "healthy";
    case ZPP_HEALTH_EXIT_SLOW: return "slow";
    case ZPP_HEALTH_EXIT_USAGE: return "usage_error";
    case ZPP_HEALTH_EXIT_WRONG: return "wrong_data";
    case ZPP_HEALTH_EXIT_HUNG: return "hung_or_dead";
    default: return "error";
  }
}

/* GB/s with Gbit/s beside it: nccl-tests users think in the first, network
 * people in the second. */
void zhFormatRate(double gbps, char* buf, size_t len) {
  if (gbps * 8 >= 1.0)
    snprintf(buf, len, "%.4g GB/s (%.3g Gbit/s)", gbps, gbps * 8);
  else
    snprintf(buf, len, "%.4g GB/s (%.3g Mbit/s)", gbps, gbps * 8e3);
}

/* ---- progress line ---------------------------------------------------------------- */

void zhProgressLine(zhCoord_t* c, const char* what) {
  if (!c->progressOn) return;
  static double last;
  double now = zppClockNow();
  if (now - last < 0.25) return;
  last = now;
  fprintf(stderr, "\r\033[Kzpp-health [%5.1f/%.0f s] %s: %s, test %d, %d trials", now - c->t0,
          c->a->timeLimitSec, c->phase ? c->phase : "", what, c->nTests, c->trialsRun);
  fflush(stderr);
}

void zhProgressClear(zhCoord_t* c) {
  if (!c->progressOn) return;
  fprintf(stderr, "\r\033[K");
  fflush(stderr);
}

/* ---- summary -------------------------------------------------------------------------- */

static const char* zhProblemName(zhProblem_t p) {
  static const char* names[] = {"slow", "wrong data", "hung", "dead"};
  return names[p];
}

void zhPrintSummary(const zhCoord_t* c, FILE* f) {
  const zppHealthArgs_t* a = c->a;
  char r1[48], r2[48], size[32];
  if (!a->quiet) {
    const zhTest_t* w = c->worldTest > 0 ? c->tests[c->worldTest - 1] : NULL;
    zppPerfFormatSize(c->bytes, size, sizeof size);
    fprintf(
        f,
        "zpp-health %s: %d ranks on %d node%s; all-reduce of %s, %d trial%s per test, timeout %.0f s\n",
        ZPP_HEALTH_VERSION, c->nranks, c->nNodes, c->nNodes == 1 ? "" : "s", c->bytes ? size : "(none)",
        a->trials, a->trials == 1 ? "" : "s", a->timeoutSec);
    if (c->expect > 0) {
      zhFormatRate(c->expect, r1, sizeof r1);
      zhFormatRate(c->required, r2, sizeof r2);
      const char* given = c->haveBaseline                      ? a->baselinePath
                          : a->expectFrom == ZH_EXPECT_CMDLINE ? a->expectText
                                                               : "";
      fprintf(f, "  expected busbw  %s from %s%s%s%s; healthy at >= %.2f x = %s\n", r1, c->expectFrom,
              given[0] ? " (" : "", given, given[0] ? ")" : "", a->threshold, r2);
      zhFormatRate(c->requiredLocal, r2, sizeof r2);
      fprintf(f, "                  a node or link is named below %.2f x = %s\n", a->localizeThreshold,
              r2);
    }
    if (w && w->trials[0] > 0) {
      zhFormatRate(w->median[0], r1, sizeof r1);
      fprintf(f, "  all ranks       all-reduce busbw %s median, min %.4g GB/s", r1, w->min[0]);
      if (w->trials[1] > 0) fprintf(f, "; all-gather %.4g GB/s", w->median[1]);
      fprintf(f, "; %s\n", w->wrong ? "WRONG RESULTS" : "results exact");
    } else if (w && w->failed) {
      fprintf(f, "  all ranks       failed: %s\n", w->error);
    }
    for (int i = 0; i < c->nSus; i++) {
      const zhSuspect_t* s = &c->sus[i];
      char rate[48] = "";
      if (s->problem == ZH_PROB_SLOW && s->busbw > 0) zhFormatRate(s->busbw, rate, sizeof rate);
      if (s->kind == ZH_SUS_NODE) {
        fprintf(f, "  %s %s%s%s%s: ", zhProblemName(s->problem), c->unitsAreNodes ? "node " : "",
                zhUnitName(c, s->a), rate[0] ? " at " : "", rate);
      } else if (s->kind == ZH_SUS_LINK) {
        fprintf(f, "  %-4s link %s-%s%s%s: ", zhProblemName(s->problem), zhUnitName(c, s->a),
                zhUnitName(c, s->b), rate[0] ? " at " : "", rate);
      } else if (s->kind == ZH_SUS_RANK) {
        fprintf(f, "  %s rank %d (%s): ", zhProblemName(s->problem), s->a, c->ranks[s->a].hello.hostId);
      } else {
        fprintf(f, "  %s, %d nodes together: ", zhProblemName(s->problem), s->nSet);
      }
      fprintf(f, "%s\n", s->evidence);
    }
    for (int i = 0; i < c->nNotes; i++) fprintf(f, "  note: %s\n", c->notes[i]);
    fprintf(f, "  %d tests, %d trials, %.1f s%s\n", c->nTests, c->trialsRun, zppClockNow() - c->t0,
            c->incomplete ? " (stopped by the time limit)" : "");
  }
  fprintf(f, "zpp-health: %s\n", c->reason);
  fflush(f);
}

/* ---- JSON ------------------------------------------------------------------------- */

static void zhJsonStr(FILE* f, const char* s) {
  fputc('"', f);
  for (const unsigned char* p = (const unsigned char*)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void zhJsonNum(FILE* f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

static void zhJsonDoubles(FILE* f, const double* v, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    zhJsonNum(f, v[i]);
  }
  fputc(']', f);
}

static void zhJsonUnitNames(FILE* f, const zhCoord_t* c, const int* units, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    zhJsonStr(f, zhUnitName(c, units[i]));
  }
  fputc(']', f);
}

static void zhJsonInts(FILE* f, const int* v, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", v[i]);
  fputc(']', f);
}

static void zhJsonTest(FILE* f, const zhCoord_t* c, const zhTest_t* t) {
  fprintf(f, "    {\"id\": %d, \"kind\": ", t->id);
  zhJsonStr(f, t->kind);
  fputs(", \"nodes\": ", f);
  if (t->nUnits > 0)
    zhJsonUnitNames(f, c, t->units, t->nUnits);
  else
    fputs("[]", f);
  fputs(", \"ranks\": ", f);
  zhJsonInts(f, t->ranks, t->nRanks);
  fprintf(f, ", \"bytes\": %zu, \"allreduce_busbw_gbps\": ", t->bytes);
  zhJsonDoubles(f, t->busbw[0], t->trials[0]);
  fputs(", \"allgather_busbw_gbps\": ", f);
  zhJsonDoubles(f, t->busbw[1], t->trials[1]);
  fputs(", \"required_gbps\": ", f);
  zhJsonNum(f, t->judged ? t->required : NAN);
  fputs(", \"median_gbps\": ", f);
  zhJsonNum(f, t->trials[0] ? t->median[0] : NAN);
  fputs(", \"min_gbps\": ", f);
  zhJsonNum(f, t->trials[0] ? t->min[0] : NAN);
  fprintf(f, ", \"pass\": %s, \"failed\": %s, \"wrong_elements\": %llu, \"seconds\": ",
          t->judged ? (t->pass ? "true" : "false") : "null", t->failed ? "true" : "false",
          (unsigned long long)t->wrong);
  zhJsonNum(f, t->seconds);
  fputs(", \"error\": ", f);
  zhJsonStr(f, t->error);
  fputc('}', f);
}

static void zhJsonSuspect(FILE* f, const zhCoord_t* c, const zhSuspect_t* s) {
  static const char* kinds[] = {"node", "link", "rank", "set"};
  static const char* probs[] = {"slow", "wrong_data", "hung", "dead"};
  /* On one node the units of the search are ranks: a slow "node" is then a rank. */
  int unitIsRank = !c->unitsAreNodes && s->kind == ZH_SUS_NODE;
  fprintf(f, "    {\"kind\": \"%s\", \"problem\": \"%s\"", unitIsRank ? "rank" : kinds[s->kind],
          probs[s->problem]);
  if (unitIsRank) {
    fprintf(f, ", \"rank\": %d, \"node\": ", c->units[s->a].ranks[0]);
    zhJsonStr(f, c->ranks[c->units[s->a].ranks[0]].hello.hostId);
  } else if (s->kind == ZH_SUS_NODE) {
    fputs(", \"node\": ", f);
    zhJsonStr(f, zhUnitName(c, s->a));
    fputs(", \"ranks\": ", f);
    zhJsonInts(f, c->units[s->a].ranks, c->units[s->a].nRanks);
  } else if (s->kind == ZH_SUS_LINK) {
    int u[2] = {s->a, s->b};
    fputs(", \"nodes\": ", f);
    zhJsonUnitNames(f, c, u, 2);
  } else if (s->kind == ZH_SUS_RANK) {
    fprintf(f, ", \"rank\": %d, \"node\": ", s->a);
    zhJsonStr(f, c->ranks[s->a].hello.hostId);
    fprintf(f, ", \"pid\": %d, \"host\": ", c->ranks[s->a].hello.pid);
    zhJsonStr(f, c->ranks[s->a].hello.hostname);
  } else {
    fputs(", \"nodes\": ", f);
    if (s->set)
      zhJsonUnitNames(f, c, s->set, s->nSet);
    else
      fputs("[]", f);
  }
  if (s->problem == ZH_PROB_SLOW) {
    fputs(", \"busbw_gbps\": ", f);
    zhJsonNum(f, s->busbw);
    fputs(", \"gbit_per_s\": ", f);
    zhJsonNum(f, s->busbw * 8);
  }
  fputs(", \"tests\": ", f);
  zhJsonInts(f, s->tests, s->nTests);
  fputs(", \"evidence\": ", f);
  zhJsonStr(f, s->evidence);
  fputc('}', f);
}

int zhWriteJson(const zhCoord_t* c, const char* path, char* err, size_t errLen) {
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    snprintf(err, errLen, "cannot write %s", path);
    return -1;
  }
  const zppHealthArgs_t* a = c->a;
  const zhTest_t* w = c->worldTest > 0 ? c->tests[c->worldTest - 1] : NULL;
  int ver = 0;
  zppGetVersion(&ver);
  fprintf(f, "{\n  \"tool\": \"zpp-health\", \"version\": \"%s\", \"zpp_version\": \"%d.%d.%d\",\n",
          ZPP_HEALTH_VERSION, ver / 10000, ver / 100 % 100, ver % 100);
  fprintf(f, "  \"verdict\": \"%s\", \"exit_code\": %d, \"reason\": ", zhVerdictName(c->verdict),
          c->verdict);
  zhJsonStr(f, c->reason);
  fprintf(f, ",\n  \"ranks\": %d, \"nodes\": %d, \"units\": \"%s\", \"complete\": %s,\n", c->nranks,
          c->nNodes, c->unitsAreNodes ? "nodes" : "ranks", c->incomplete ? "false" : "true");
  fputs("  \"elapsed_s\": ", f);
  zhJsonNum(f, zppClockNow() - c->t0);
  fprintf(f, ", \"time_limit_s\": %g, \"timeout_s\": %g, \"tests_run\": %d, \"trials_run\": %d,\n",
          a->timeLimitSec, a->timeoutSec, c->nTests, c->trialsRun);
  fprintf(f,
          "  \"bytes\": %zu, \"trials_per_test\": %d, \"iters_per_trial\": %d, \"threshold\": %g, "
          "\"localize_threshold\": %g,\n",
          c->bytes, a->trials, a->iters, a->threshold, a->localizeThreshold);
  fputs("  \"expected\": {\"source\": ", f);
  zhJsonStr(f, c->expectFrom);
  fputs(", \"busbw_gbps\": ", f);
  zhJsonNum(f, c->expect > 0 ? c->expect : NAN);
  fputs(", \"required_busbw_gbps\": ", f);
  zhJsonNum(f, c->required > 0 ? c->required : NAN);
  fputs(", \"localize_busbw_gbps\": ", f);
  zhJsonNum(f, c->requiredLocal > 0 ? c->requiredLocal : NAN);
  fputs("},\n  \"measured\": {", f);
  if (w) {
    fputs("\"allreduce_busbw_gbps\": ", f);
    zhJsonNum(f, w->trials[0] ? w->median[0] : NAN);
    fputs(", \"allreduce_min_gbps\": ", f);
    zhJsonNum(f, w->trials[0] ? w->min[0] : NAN);
    fputs(", \"allgather_busbw_gbps\": ", f);
    zhJsonNum(f, w->trials[1] ? w->median[1] : NAN);
    fprintf(f, ", \"wrong_elements\": %llu, \"test\": %d", (unsigned long long)w->wrong, w->id);
  }
  fputs("},\n  \"suspects\": [", f);
  for (int i = 0; i < c->nSus; i++) {
    fputs(i ? ",\n" : "\n", f);
    zhJsonSuspect(f, c, &c->sus[i]);
  }
  fputs(c->nSus ? "\n  ],\n  \"node_list\": [" : "],\n  \"node_list\": [", f);
  for (int u = 0; u < c->nUnits; u++) {
    fprintf(f, "%s{\"name\": ", u ? ", " : "");
    zhJsonStr(f, c->units[u].name);
    fputs(", \"ranks\": ", f);
    zhJsonInts(f, c->units[u].ranks, c->units[u].nRanks);
    fputc('}', f);
  }
  fputs("],\n  \"tests\": [", f);
  for (int i = 0; i < c->nTests; i++) {
    fputs(i ? ",\n" : "\n", f);
    zhJsonTest(f, c, c->tests[i]);
  }
  fputs(c->nTests ? "\n  ],\n  \"notes\": [" : "],\n  \"notes\": [", f);
  for (int i = 0; i < c->nNotes; i++) {
    if (i) fputs(", ", f);
    zhJsonStr(f, c->notes[i]);
  }
  fputs("],\n  \"fault_injection\": ", f);
  const char* fault = getenv("ZPP_FAULT");
  if (fault && fault[0])
    zhJsonStr(f, fault);
  else
    fputs("null", f);
  fputs("\n}\n", f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    snprintf(err, errLen, "writing %s failed", path);
    return -1;
  }
  return 0;
}

int zhWriteFallbackJson(const zppHealthArgs_t* a, int nranks, const char* problem, const char* why,
                        double elapsed) {
  FILE* f = fopen(a->jsonPath, "w");
  if (f == NULL) return -1;
  fprintf(f,
          "{\n  \"tool\": \"zpp-health\", \"version\": \"%s\", \"verdict\": \"hung_or_dead\", "
          "\"exit_code\": %d, \"reason\": ",
          ZPP_HEALTH_VERSION, ZPP_HEALTH_EXIT_HUNG);
  char reason[600];
  snprintf(reason, sizeof reason, "%s: rank 0 (the coordinator): %s", problem, why);
  zhJsonStr(f, reason);
  fprintf(f, ",\n  \"ranks\": %d, \"complete\": false, \"elapsed_s\": %.3f, \"written_by_rank\": 1,\n",
          nranks, elapsed);
  fprintf(f, "  \"suspects\": [{\"kind\": \"rank\", \"problem\": \"%s\", \"rank\": 0, \"evidence\": ",
          strcmp(problem, "died") == 0 ? "dead" : "hung");
  zhJsonStr(f, why);
  fputs("}],\n  \"tests\": []\n}\n", f);
  return fclose(f);
}
