/*
 * zpp-perf's table (nccl-tests' columns first, in its order, so that a
 * reader of nccl-tests output finds size, count, type, redop, root, time,
 * algbw, busbw, #wrong where they expect them) and its JSON.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "zpp_perf.h"

void zppPerfPrintBanner(FILE* f, const zppPerfRunInfo_t* info, const zppPerfArgs_t* a) {
  char lo[32], hi[32];
  zppPerfFormatSize(a->minBytes, lo, sizeof lo);
  zppPerfFormatSize(a->maxBytes, hi, sizeof hi);
  fprintf(f, "# zpp-perf %s, zpp %d.%d.%d: %d rank%s on %d node%s (%s), launched by %s, host %s, %s\n",
          ZPP_PERF_VERSION, info->zppVersion / 10000, info->zppVersion / 100 % 100,
          info->zppVersion % 100, info->ranks, info->ranks == 1 ? "" : "s", info->nodes,
          info->nodes == 1 ? "" : "s", info->layout, info->launcher, info->host, info->date);
  if (a->stepFactor > 1.0)
    fprintf(f, "# sizes %s to %s, factor %g; ", lo, hi, a->stepFactor);
  else
    fprintf(f, "# sizes %s to %s, step %zu B; ", lo, hi, a->stepBytes);
  fprintf(f, "%d timed iterations after %d warm-up", a->iters, a->warmup);
  if (a->baseline != ZPP_PERF_BASELINE_NONE) {
    const char* b = a->baseline == ZPP_PERF_BASELINE_MPI ? "mpi" : "nccl";
    if (a->rounds > 1)
      fprintf(f, ", in %d rounds alternating ours and %s's", a->rounds, b);
    else
      fprintf(f, ", in 1 round: all of ours, then all of %s's", b);
  } else {
    fprintf(f, ", in 1 round");
  }
  fprintf(f, "; check %s\n", a->check ? "on" : "off");
  fprintf(f,
          "# time: median over iterations of the slowest rank, us; algbw, busbw: GB/s (1e9 B/s);"
          " inter: bytes sent across nodes per call, all ranks\n");
  /* NCCL does not report its traffic: the library counts the device path's
   * bytes by its own rules (zpp.h, zppCommStats_t; docs/gpu.md). */
  if (a->device)
    fprintf(f,
            "# --device: inter counts what zpp sends as ncclSend/ncclRecv exactly, and for NCCL's "
            "collectives the logical bytes (a direct exchange's), not NCCL's wire bytes\n");
}

static const char* zppPerfRedopLabel(const zppPerfRecord_t* r) {
  return zppPerfCollReduces(r->coll) ? zppPerfRedOpName(r->redop) : "none";
}

static const char* zppPerfRootLabel(const zppPerfRecord_t* r, char* buf, size_t len) {
  if (zppPerfCollRooted(r->coll) && r->root == ZPP_PERF_ROOT_ROTATE) return "rot";
  snprintf(buf, len, "%d", zppPerfCollRooted(r->coll) ? r->root : -1);
  return buf;
}

void zppPerfPrintSectionHeader(FILE* f, const zppPerfRecord_t* r, int baseline) {
  fprintf(f, "#\n# %s %s, %s", zppPerfCollName(r->coll), r->mode, zppPerfTypeName(r->dtype));
  if (zppPerfCollReduces(r->coll)) fprintf(f, ", %s", zppPerfRedOpName(r->redop));
  if (r->compressed) {
    if (r->bits)
      fprintf(f, ", int%d, block %d%s%s", r->bits, r->block, r->rotated ? ", rotated" : "",
              r->errorFeedback ? ", error feedback" : "");
    else
      fprintf(f, ", unquantized");
  }
  fprintf(f, "\n");
  fprintf(f, "#%11s  %12s  %8s  %6s  %5s  %10s  %8s  %8s  %7s  %13s", "size", "count", "type", "redop",
          "root", "time", "algbw", "busbw", "#wrong", "inter");
  if (r->compressed) fprintf(f, "  %8s  %9s  %9s", "effbw", "maxerr", "bound");
  if (baseline) fprintf(f, "  %10s  %8s  %7s", "base time", "busbw", "ratio");
  fprintf(f, "\n#%11s  %12s  %8s  %6s  %5s  %10s  %8s  %8s  %7s  %13s", "(B)", "(elements)", "", "", "",
          "(us)", "(GB/s)", "(GB/s)", "", "(B/call)");
  if (r->compressed) fprintf(f, "  %8s  %9s  %9s", "(GB/s)", "", "");
  if (baseline) fprintf(f, "  %10s  %8s  %7s", "(us)", "(GB/s)", "ours/b");
  fprintf(f, "\n");
}

void zppPerfPrintSkipped(FILE* f, size_t sizeBytes) {
  fprintf(f, "%12zu  # skipped: less than one element per rank\n", sizeBytes);
}

static void zppPerfFmtNum(char* buf, size_t len, const char* fmt, double v) {
  if (isnan(v))
    snprintf(buf, len, "n/a");
  else
    snprintf(buf, len, fmt, v);
}

void zppPerfPrintRow(FILE* f, const zppPerfRecord_t* r) {
  char inter[32];
  zppPerfFmtNum(inter, sizeof inter, "%.0f", r->wireInter);
  char wrong[24];
  if (r->checked)
    snprintf(wrong, sizeof wrong, "%llu", (unsigned long long)r->wrong);
  else
    snprintf(wrong, sizeof wrong, "n/a");
  char root[16];
  fprintf(f, "%12zu  %12zu  %8s  %6s  %5s  %10.2f  %8.3f  %8.3f  %7s  %13s", r->counts.bytes,
          r->counts.totalCount, zppPerfTypeName(r->dtype), zppPerfRedopLabel(r),
          zppPerfRootLabel(r, root, sizeof root), r->timeUs, r->algbw, r->busbw, wrong, inter);
  if (r->compressed) {
    char err[24], bound[24];
    zppPerfFmtNum(err, sizeof err, "%.3g", r->maxError);
    zppPerfFmtNum(bound, sizeof bound, "%.3g", r->bound);
    fprintf(f, "  %8.3f  %9s  %9s", r->effBusbw, err, bound);
  }
  if (r->base.present) {
    char ratio[24];
    zppPerfFmtNum(ratio, sizeof ratio, "%.2f", r->base.ratio);
    fprintf(f, "  %10.2f  %8.3f  %7s", r->base.timeUs, r->base.busbw, ratio);
    if (r->base.wrong > 0)
      fprintf(f, "  (%s: %llu wrong)", r->base.name, (unsigned long long)r->base.wrong);
  }
  fprintf(f, "\n");
}

/* Same section = same collective, mode, type and reduction. */
static int zppPerfSameSection(const zppPerfRecord_t* a, const zppPerfRecord_t* b) {
  return a->coll == b->coll && strcmp(a->mode, b->mode) == 0 && a->dtype == b->dtype &&
         (!zppPerfCollReduces(a->coll) || a->redop == b->redop);
}

/* The speed-ups at a section's largest size, where a bandwidth test means
 * most: against the plain mode of the same collective, type and reduction
 * (compressed sections only) and against the baseline, both in effective
 * busbw. NAN when there is nothing to compare with. */
typedef struct {
  size_t at; /* index of the section's largest row */
  double vsPlain, vsBase;
} zppPerfSpeedup_t;

static zppPerfSpeedup_t zppPerfSectionSpeedup(const zppPerfRecord_t* recs, size_t n, size_t i,
                                              size_t j) {
  zppPerfSpeedup_t sp = {i, NAN, NAN};
  for (size_t k = i; k < j; k++)
    if (recs[k].counts.bytes > recs[sp.at].counts.bytes) sp.at = k;
  const zppPerfRecord_t* r = &recs[sp.at];
  if (r->base.present) sp.vsBase = r->base.ratio;
  if (r->compressed) {
    for (size_t k = 0; k < n; k++) {
      const zppPerfRecord_t* p = &recs[k];
      if (!p->compressed && p->coll == r->coll && p->dtype == r->dtype &&
          (!zppPerfCollReduces(r->coll) || p->redop == r->redop) &&
          p->counts.bytes == r->counts.bytes && p->effBusbw > 0)
        sp.vsPlain = r->effBusbw / p->effBusbw;
    }
  }
  return sp;
}

static size_t zppPerfSectionEnd(const zppPerfRecord_t* recs, size_t n, size_t i) {
  size_t j = i;
  while (j < n && zppPerfSameSection(&recs[i], &recs[j])) j++;
  return j;
}

void zppPerfPrintSummary(FILE* f, const zppPerfRecord_t* recs, size_t n) {
  uint64_t wrong = 0;
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    wrong += recs[i].wrong + (recs[i].base.present ? recs[i].base.wrong : 0);
    sum += recs[i].effBusbw;
  }
  fprintf(f, "#\n");
  /* Per section, then nccl-tests' two closing lines over every row of ours
   * (effective busbw, which is busbw for the plain modes). */
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double s = 0.0, sb = 0.0;
    int haveBase = recs[i].base.present;
    while (j < n && zppPerfSameSection(&recs[i], &recs[j])) {
      s += recs[j].effBusbw;
      sb += recs[j].base.present ? recs[j].base.busbw : 0.0;
      j++;
    }
    double k = (double)(j - i);
    fprintf(f, "# %-14s %-6s %-9s %-5s avg busbw %8.3f GB/s", zppPerfCollName(recs[i].coll),
            recs[i].mode, zppPerfTypeName(recs[i].dtype), zppPerfRedopLabel(&recs[i]), s / k);
    if (haveBase)
      fprintf(f, "   %s %8.3f GB/s, ratio %.2f", recs[i].base.name, sb / k, sb > 0 ? s / sb : NAN);
    fprintf(f, "\n");
    i = j;
  }
  for (size_t i = 0; i < n;) {
    size_t j = zppPerfSectionEnd(recs, n, i);
    zppPerfSpeedup_t sp = zppPerfSectionSpeedup(recs, n, i, j);
    if (!isnan(sp.vsPlain) || !isnan(sp.vsBase)) {
      char sz[32];
      zppPerfFormatSize(recs[sp.at].counts.bytes, sz, sizeof sz);
      fprintf(f, "# at %s: %s %s %s%s%s:", sz, zppPerfCollName(recs[i].coll), recs[i].mode,
              zppPerfTypeName(recs[i].dtype), zppPerfCollReduces(recs[i].coll) ? " " : "",
              zppPerfCollReduces(recs[i].coll) ? zppPerfRedOpName(recs[i].redop) : "");
      if (!isnan(sp.vsPlain)) fprintf(f, " %.2fx plain", sp.vsPlain);
      if (!isnan(sp.vsBase))
        fprintf(f, "%s %.2fx %s", isnan(sp.vsPlain) ? "" : ",", sp.vsBase, recs[sp.at].base.name);
      fprintf(f, " (effective busbw)\n");
    }
    i = j;
  }
  fprintf(f, "# Out of bounds values : %llu %s\n", (unsigned long long)wrong, wrong ? "ERROR" : "OK");
  fprintf(f, "# Avg bus bandwidth    : %g\n#\n", n ? sum / (double)n : 0.0);
}

/* ---------------------------------------------------------------------------
 * JSON. Written by hand (no library): strings are escaped, non-finite
 * numbers become null (JSON has no NaN), integers stay integers.
 * ------------------------------------------------------------------------- */
static void zppPerfJsonString(FILE* f, const char* s) {
  fputc('"', f);
  for (const unsigned char* p = (const unsigned char*)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p == '\t')
      fputs("\\t", f);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

static void zppPerfJsonNumber(FILE* f, double v) {
  if (isfinite(v))
    fprintf(f, "%.9g", v);
  else
    fputs("null", f);
}

static void zppPerfJsonKey(FILE* f, const char* key, int* first) {
  fprintf(f, "%s\n    ", *first ? "" : ",");
  *first = 0;
  zppPerfJsonString(f, key);
  fputs(": ", f);
}

static void zppPerfJsonRecord(FILE* f, const zppPerfRecord_t* r, const zppPerfRunInfo_t* info) {
  int first = 1;
  fputs("{", f);
  zppPerfJsonKey(f, "op", &first);
  zppPerfJsonString(f, zppPerfCollName(r->coll));
  zppPerfJsonKey(f, "mode", &first);
  zppPerfJsonString(f, r->mode);
  zppPerfJsonKey(f, "compressed", &first);
  fputs(r->compressed ? "true" : "false", f);
  zppPerfJsonKey(f, "dtype", &first);
  zppPerfJsonString(f, zppPerfTypeName(r->dtype));
  zppPerfJsonKey(f, "redop", &first);
  if (zppPerfCollReduces(r->coll))
    zppPerfJsonString(f, zppPerfRedOpName(r->redop));
  else
    fputs("null", f);
  zppPerfJsonKey(f, "root", &first);
  if (zppPerfCollRooted(r->coll))
    fprintf(f, "%d", r->root);
  else
    fputs("null", f);
  zppPerfJsonKey(f, "ranks", &first);
  fprintf(f, "%d", info->ranks);
  zppPerfJsonKey(f, "nodes", &first);
  fprintf(f, "%d", info->nodes);
  zppPerfJsonKey(f, "bytes", &first);
  fprintf(f, "%zu", r->counts.bytes);
  zppPerfJsonKey(f, "count", &first);
  fprintf(f, "%zu", r->counts.totalCount);
  zppPerfJsonKey(f, "api_count", &first);
  fprintf(f, "%zu", r->counts.apiCount);
  zppPerfJsonKey(f, "time_us", &first);
  zppPerfJsonNumber(f, r->timeUs);
  zppPerfJsonKey(f, "time_us_mean", &first);
  zppPerfJsonNumber(f, r->timeUsMean);
  zppPerfJsonKey(f, "time_us_min", &first);
  zppPerfJsonNumber(f, r->timeUsMin);
  zppPerfJsonKey(f, "time_us_steady", &first);
  zppPerfJsonNumber(f, r->timeUsSteady);
  zppPerfJsonKey(f, "timed_from", &first);
  fprintf(f, "%.3f", r->timedFrom);
  zppPerfJsonKey(f, "timed_to", &first);
  fprintf(f, "%.3f", r->timedTo);
  zppPerfJsonKey(f, "algbw", &first);
  zppPerfJsonNumber(f, r->algbw);
  zppPerfJsonKey(f, "busbw", &first);
  zppPerfJsonNumber(f, r->busbw);
  zppPerfJsonKey(f, "effective_busbw", &first);
  zppPerfJsonNumber(f, r->effBusbw);
  zppPerfJsonKey(f, "wire_bytes_inter", &first);
  zppPerfJsonNumber(f, r->wireInter);
  zppPerfJsonKey(f, "wire_bytes_intra", &first);
  zppPerfJsonNumber(f, r->wireIntra);
  zppPerfJsonKey(f, "checked", &first);
  fputs(r->checked ? "true" : "false", f);
  zppPerfJsonKey(f, "max_error", &first);
  zppPerfJsonNumber(f, r->maxError);
  zppPerfJsonKey(f, "bound", &first);
  zppPerfJsonNumber(f, r->bound);
  zppPerfJsonKey(f, "wrong", &first);
  fprintf(f, "%llu", (unsigned long long)r->wrong);
  if (r->compressed) {
    zppPerfJsonKey(f, "bits", &first);
    fprintf(f, "%d", r->bits);
    zppPerfJsonKey(f, "block", &first);
    fprintf(f, "%d", r->block);
    zppPerfJsonKey(f, "rotated", &first);
    fprintf(f, "%s", r->rotated ? "true" : "false");
    zppPerfJsonKey(f, "error_feedback", &first);
    fprintf(f, "%s", r->errorFeedback ? "true" : "false");
  }
  if (r->base.present) {
    zppPerfJsonKey(f, "baseline", &first);
    zppPerfJsonString(f, r->base.name);
    zppPerfJsonKey(f, "baseline_time_us", &first);
    zppPerfJsonNumber(f, r->base.timeUs);
    zppPerfJsonKey(f, "baseline_time_us_mean", &first);
    zppPerfJsonNumber(f, r->base.timeUsMean);
    zppPerfJsonKey(f, "baseline_algbw", &first);
    zppPerfJsonNumber(f, r->base.algbw);
    zppPerfJsonKey(f, "baseline_busbw", &first);
    zppPerfJsonNumber(f, r->base.busbw);
    zppPerfJsonKey(f, "baseline_wrong", &first);
    fprintf(f, "%llu", (unsigned long long)r->base.wrong);
    zppPerfJsonKey(f, "baseline_max_error", &first);
    zppPerfJsonNumber(f, r->base.maxError);
    zppPerfJsonKey(f, "ratio", &first);
    zppPerfJsonNumber(f, r->base.ratio);
  }
  fputs("\n  }", f);
}

int zppPerfWriteJson(const char* path, const zppPerfRunInfo_t* info, const zppPerfRecord_t* recs,
                     size_t n) {
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "zpp-perf: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  uint64_t wrong = 0;
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    wrong += recs[i].wrong + (recs[i].base.present ? recs[i].base.wrong : 0);
    sum += recs[i].effBusbw;
  }
  char ver[32];
  snprintf(ver, sizeof ver, "%d.%d.%d", info->zppVersion / 10000, info->zppVersion / 100 % 100,
           info->zppVersion % 100);
  fprintf(f, "{\n  \"header\": {\n    \"tool\": \"zpp-perf\",\n    \"version\": ");
  zppPerfJsonString(f, ZPP_PERF_VERSION);
  fprintf(f, ",\n    \"zpp_version\": ");
  zppPerfJsonString(f, ver);
  fprintf(f, ",\n    \"ranks\": %d,\n    \"nodes\": %d,\n    \"layout\": ", info->ranks, info->nodes);
  zppPerfJsonString(f, info->layout);
  fprintf(f, ",\n    \"date\": ");
  zppPerfJsonString(f, info->date);
  fprintf(f, ",\n    \"host\": ");
  zppPerfJsonString(f, info->host);
  fprintf(f, ",\n    \"launcher\": ");
  zppPerfJsonString(f, info->launcher);
  fprintf(f, ",\n    \"iters\": %d,\n    \"rounds\": %d,\n    \"warmup\": %d,\n    \"check\": %s,\n",
          info->iters, info->rounds, info->warmup, info->check ? "true" : "false");
  fprintf(f, "    \"time_statistic\": \"median over iterations of the slowest rank\",\n");
  fprintf(f,
          "    \"units\": {\"time\": \"us\", \"bandwidth\": \"GB/s (1e9 bytes/s)\", "
          "\"wire_bytes\": \"bytes per call, all ranks together\"},\n");
  fprintf(f, "    \"command\": ");
  zppPerfJsonString(f, info->cmdline);
  fprintf(f, "\n  },\n  \"records\": [");
  for (size_t i = 0; i < n; i++) {
    fputs(i ? ", " : "\n  ", f);
    zppPerfJsonRecord(f, &recs[i], info);
  }
  fprintf(f,
          "\n  ],\n  \"summary\": {\n    \"rows\": %zu,\n    \"wrong\": %llu,\n    \"avg_busbw\": ", n,
          (unsigned long long)wrong);
  zppPerfJsonNumber(f, n ? sum / (double)n : 0.0);
  fprintf(f, ",\n    \"speedups\": [");
  int firstSp = 1;
  for (size_t i = 0; i < n;) {
    size_t j = zppPerfSectionEnd(recs, n, i);
    zppPerfSpeedup_t sp = zppPerfSectionSpeedup(recs, n, i, j);
    if (!isnan(sp.vsPlain) || !isnan(sp.vsBase)) {
      const zppPerfRecord_t* r = &recs[sp.at];
      fprintf(f, "%s\n      {\"op\": ", firstSp ? "" : ",");
      firstSp = 0;
      zppPerfJsonString(f, zppPerfCollName(r->coll));
      fprintf(f, ", \"mode\": ");
      zppPerfJsonString(f, r->mode);
      fprintf(f, ", \"dtype\": ");
      zppPerfJsonString(f, zppPerfTypeName(r->dtype));
      fprintf(f, ", \"redop\": ");
      if (zppPerfCollReduces(r->coll))
        zppPerfJsonString(f, zppPerfRedOpName(r->redop));
      else
        fputs("null", f);
      fprintf(f, ", \"bytes\": %zu, \"vs_plain\": ", r->counts.bytes);
      zppPerfJsonNumber(f, sp.vsPlain);
      fprintf(f, ", \"vs_baseline\": ");
      zppPerfJsonNumber(f, sp.vsBase);
      fputs("}", f);
    }
    i = j;
  }
  fprintf(f, "%s]\n  }\n}\n", firstSp ? "" : "\n    ");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    fprintf(stderr, "zpp-perf: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}
