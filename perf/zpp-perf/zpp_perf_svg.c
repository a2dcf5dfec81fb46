/*
 * zpp-perf's picture: bus bandwidth against size, both axes logarithmic,
 * one line per (collective, mode, type, reduction) and one dashed line in the
 * same colour for its baseline. Written as SVG by the tool itself so that the
 * main job needs no plotting package. Compressed modes are drawn with their
 * effective busbw: the figure of merit that compares them with the plain
 * modes.
 *
 * Why a log bandwidth axis: the reader compares modes, i.e. ratios, and on
 * a log axis a ratio is a fixed vertical distance wherever the lines lie. On
 * a linear axis hpZ's intra-node 1.5-4.8 GB/s squashed the 0.1-0.6 GB/s of
 * every other line (the ones compared) flat onto the floor.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "zpp_perf.h"

#define SVG_W 1000
#define SVG_H_MIN 560
#define SVG_LEGEND_STEP 18
#define SVG_LEFT 80
#define SVG_RIGHT 300
#define SVG_TOP 56
#define SVG_BOTTOM 72

void zppPerfSvgPathFor(const char* jsonPath, char* out, size_t len) {
  size_t n = strlen(jsonPath);
  if (n >= 5 && strcmp(jsonPath + n - 5, ".json") == 0)
    snprintf(out, len, "%.*s.svg", (int)(n - 5), jsonPath);
  else
    snprintf(out, len, "%s.svg", jsonPath);
}

static void zppPerfXml(FILE* f, const char* s) {
  for (; *s; s++) {
    if (*s == '&')
      fputs("&amp;", f);
    else if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '"')
      fputs("&quot;", f);
    else
      fputc(*s, f);
  }
}

static const double zppPerfSteps[] = {1.0, 2.0, 5.0};

/* A round axis maximum: 1, 2 or 5 times a power of ten at or above v. */
static double zppPerfNiceMax(double v) {
  if (!(v > 0)) return 1.0;
  double p = pow(10.0, floor(log10(v)));
  for (int k = 0; k < 3; k++)
    if (zppPerfSteps[k] * p >= v) return zppPerfSteps[k] * p;
  return 10.0 * p;
}

/* A round axis minimum: 1, 2 or 5 times a power of ten at or below v. */
static double zppPerfNiceMin(double v) {
  if (!(v > 0)) return 1.0;
  double p = pow(10.0, floor(log10(v)));
  for (int k = 2; k >= 0; k--)
    if (zppPerfSteps[k] * p <= v) return zppPerfSteps[k] * p;
  return p;
}

static int zppPerfSameSeries(const zppPerfRecord_t* a, const zppPerfRecord_t* b) {
  return a->coll == b->coll && strcmp(a->mode, b->mode) == 0 && a->dtype == b->dtype &&
         (!zppPerfCollReduces(a->coll) || a->redop == b->redop);
}

/* The compressed modes of a collective share its baseline: draw that line
 * once, with the first section of the same collective, type and reduction. */
static int zppPerfFirstBaseline(const zppPerfRecord_t* recs, size_t i) {
  for (size_t k = 0; k < i; k++)
    if (recs[k].base.present && recs[k].coll == recs[i].coll && recs[k].dtype == recs[i].dtype &&
        (!zppPerfCollReduces(recs[i].coll) || recs[k].redop == recs[i].redop))
      return 0;
  return 1;
}

typedef struct {
  double x0, x1; /* log2 bytes at the left and right edges */
  double y0, y1; /* log10 GB/s at the bottom and top edges */
  int h;         /* picture height: grows when the legend needs the room */
} zppPerfAxes_t;

static double zppPerfPx(const zppPerfAxes_t* ax, double bytes) {
  double w = SVG_W - SVG_LEFT - SVG_RIGHT;
  return SVG_LEFT + (log2(bytes) - ax->x0) / (ax->x1 - ax->x0) * w;
}

/* A bandwidth of 0 (nothing measured) sits on the bottom edge. */
static double zppPerfPy(const zppPerfAxes_t* ax, double bw) {
  double h = ax->h - SVG_TOP - SVG_BOTTOM;
  double l = bw > 0 ? log10(bw) : ax->y0;
  if (l < ax->y0) l = ax->y0;
  return SVG_TOP + h - (l - ax->y0) / (ax->y1 - ax->y0) * h;
}

static const char* const zppPerfColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                             "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

/* One polyline with markers; base selects the baseline's numbers. */
static void zppPerfSvgSeries(FILE* f, const zppPerfAxes_t* ax, const zppPerfRecord_t* r, size_t n,
                             int base, const char* colour) {
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", colour,
          base ? " stroke-dasharray=\"6,4\"" : "");
  for (size_t i = 0; i < n; i++) {
    double bw = base ? r[i].base.busbw : r[i].effBusbw;
    fprintf(f, "%.1f,%.1f ", zppPerfPx(ax, (double)r[i].counts.bytes), zppPerfPy(ax, bw));
  }
  fprintf(f, "\"/>\n");
  for (size_t i = 0; i < n; i++) {
    double bw = base ? r[i].base.busbw : r[i].effBusbw;
    fprintf(f,
            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%zu B: %.4g "
            "GB/s</title></circle>\n",
            zppPerfPx(ax, (double)r[i].counts.bytes), zppPerfPy(ax, bw), base ? "white" : colour,
            r[i].counts.bytes, bw);
  }
}

int zppPerfWriteSvg(const char* path, const zppPerfRunInfo_t* info, const zppPerfRecord_t* recs,
                    size_t n) {
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "zpp-perf: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  zppPerfAxes_t ax = {0, 1, 0, 1, SVG_H_MIN};
  double lo = INFINITY, hi = 0, top = 0, bottom = INFINITY;
  for (size_t i = 0; i < n; i++) {
    double b = (double)recs[i].counts.bytes;
    lo = b < lo ? b : lo;
    hi = b > hi ? b : hi;
    double bws[2] = {recs[i].effBusbw, recs[i].base.present ? recs[i].base.busbw : 0};
    for (int k = 0; k < 2; k++) {
      if (bws[k] > top) top = bws[k];
      if (bws[k] > 0 && bws[k] < bottom) bottom = bws[k];
    }
  }
  if (n == 0) lo = hi = 1;
  int entries = 0;
  for (size_t i = 0; i < n; i++) {
    if (i == 0 || !zppPerfSameSeries(&recs[i - 1], &recs[i]))
      entries += 1 + (recs[i].base.present && zppPerfFirstBaseline(recs, i) ? 1 : 0);
  }
  /* Names must not run off the bottom: the picture grows instead. */
  if (SVG_TOP + 8 + entries * SVG_LEGEND_STEP + SVG_BOTTOM > ax.h)
    ax.h = SVG_TOP + 8 + entries * SVG_LEGEND_STEP + SVG_BOTTOM;
  /* Half a doubling of room on each side, so end points are not on the frame. */
  ax.x0 = floor(log2(lo)) - 0.5;
  ax.x1 = ceil(log2(hi)) + 0.5;
  if (!(top > 0)) top = bottom = 1;
  ax.y1 = log10(zppPerfNiceMax(top * 1.05));
  ax.y0 = log10(zppPerfNiceMin(bottom / 1.05));
  if (ax.y1 - ax.y0 < 1) ax.y0 = ax.y1 - 1; /* at least a decade: small differences look small */

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
          SVG_W, ax.h, SVG_W, ax.h);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f,
          "<text x=\"%d\" y=\"24\" font-size=\"15\" font-weight=\"bold\">zpp-perf: bus bandwidth, "
          "%d rank%s on %d node%s (%s)</text>\n",
          SVG_LEFT, info->ranks, info->ranks == 1 ? "" : "s", info->nodes, info->nodes == 1 ? "" : "s",
          info->layout);
  fprintf(f, "<text x=\"%d\" y=\"42\" fill=\"#555\">", SVG_LEFT);
  zppPerfXml(f, info->host);
  fprintf(f,
          ", %s; median of %d iterations; compressed modes: effective busbw; dashed: baseline</text>\n",
          info->date, info->iters);

  int pw = SVG_W - SVG_LEFT - SVG_RIGHT, ph = ax.h - SVG_TOP - SVG_BOTTOM;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n",
          SVG_LEFT, SVG_TOP, pw, ph);
  /* x ticks on powers of two, thinned to at most ~12 labels. */
  int first = (int)ceil(ax.x0), last = (int)floor(ax.x1);
  int every = (last - first) / 12 + 1;
  for (int e = first; e <= last; e++) {
    if ((e - first) % every != 0) continue;
    double x = zppPerfPx(&ax, ldexp(1.0, e));
    char label[32];
    zppPerfFormatSize((size_t)ldexp(1.0, e), label, sizeof label);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n", x, SVG_TOP, x,
            SVG_TOP + ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, SVG_TOP + ph + 16,
            label);
  }
  /* y ticks at 1, 2 and 5 times each power of ten in range. */
  for (int e = (int)floor(ax.y0); e <= (int)ceil(ax.y1); e++)
    for (int k = 0; k < 3; k++) {
      double v = zppPerfSteps[k] * pow(10.0, e), l = log10(v);
      if (l < ax.y0 - 1e-9 || l > ax.y1 + 1e-9) continue;
      double y = zppPerfPy(&ax, v);
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/>\n", SVG_LEFT, y,
              SVG_LEFT + pw, y, k == 0 ? "#bbb" : "#e4e4e4");
      fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", SVG_LEFT - 6, y + 4, v);
    }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">size (bytes, log scale)</text>\n",
          SVG_LEFT + pw / 2, ax.h - 24);
  fprintf(f,
          "<text transform=\"translate(24,%d) rotate(-90)\" text-anchor=\"middle\">busbw (GB/s, log "
          "scale: equal heights, equal ratios)</text>\n",
          SVG_TOP + ph / 2);

  int series = 0;
  int ly = SVG_TOP + 8;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && zppPerfSameSeries(&recs[i], &recs[j])) j++;
    const char* colour = zppPerfColours[series % (int)(sizeof zppPerfColours / sizeof *zppPerfColours)];
    char name[128];
    snprintf(name, sizeof name, "%s %s %s%s%s", zppPerfCollName(recs[i].coll), recs[i].mode,
             zppPerfTypeName(recs[i].dtype), zppPerfCollReduces(recs[i].coll) ? " " : "",
             zppPerfCollReduces(recs[i].coll) ? zppPerfRedOpName(recs[i].redop) : "");
    zppPerfSvgSeries(f, &ax, &recs[i], j - i, 0, colour);
    int lx = SVG_LEFT + pw + 16;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n", lx,
            ly, lx + 24, ly, colour);
    fprintf(f, "<text x=\"%d\" y=\"%d\">", lx + 30, ly + 4);
    zppPerfXml(f, name);
    fprintf(f, "</text>\n");
    ly += SVG_LEGEND_STEP;
    if (recs[i].base.present && zppPerfFirstBaseline(recs, i)) {
      zppPerfSvgSeries(f, &ax, &recs[i], j - i, 1, colour);
      fprintf(f,
              "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\" "
              "stroke-dasharray=\"6,4\"/>\n",
              lx, ly, lx + 24, ly, colour);
      fprintf(f, "<text x=\"%d\" y=\"%d\">", lx + 30, ly + 4);
      zppPerfXml(f, recs[i].base.name);
      fputc(' ', f);
      zppPerfXml(f, zppPerfCollName(recs[i].coll));
      fputc(' ', f);
      zppPerfXml(f, zppPerfTypeName(recs[i].dtype));
      if (zppPerfCollReduces(recs[i].coll)) {
        fputc(' ', f);
        zppPerfXml(f, zppPerfRedOpName(recs[i].redop));
      }
      fprintf(f, "</text>\n"); /* dashed says baseline (subtitle) */
      ly += SVG_LEGEND_STEP;
    }
    series++;
    i = j;
  }
  fprintf(f, "</svg>\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    fprintf(stderr, "zpp-perf: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}
