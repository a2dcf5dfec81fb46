/*
 * zpp-train's reports: the loss curve on the terminal, as JSON, and as an
 * SVG picture (loss against step above, time per step below, one line per
 * run: plain and ZeRO++ side by side with --compare). The SVG is written
 * by hand so that the example needs no plotting package.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "names.h"
#include "train.h"
#include "zero3.h"

const char* trTypeName(zppDataType_t t) { return zppDtypeShortName(t); }

static void trModeLabel(const trRun_t* r, char* out, size_t len) {
  const char* ov = r->overlap ? "" : ", no overlap";
  if (r->opt.mode == zcModePlain) {
    snprintf(out, len, "plain%s", r->overlap ? "" : " (no overlap)");
    return;
  }
  char qw[40], qg[40];
  const char* rot = r->opt.rotate ? " rotated" : "";
  if (r->opt.qwzBits)
    snprintf(qw, sizeof qw, "qwZ int%d%s%s", r->opt.qwzBits, rot, r->opt.qwzDelta ? " delta" : "");
  else
    snprintf(qw, sizeof qw, "no qwZ");
  if (r->opt.qgzBits)
    snprintf(qg, sizeof qg, "qgZ int%d%s%s", r->opt.qgzBits, rot,
             r->opt.qgzEF ? " error feedback" : "");
  else
    snprintf(qg, sizeof qg, "no qgZ");
  snprintf(out, len, "ZeRO++ (%s, %s, %s%s)", qw, r->opt.hpz ? "hpZ" : "no hpZ", qg, ov);
}

/* The short name of a run in the step lines. */
static void trRunTag(const trRun_t* r, char* out, size_t len) {
  snprintf(out, len, "%s%s", r->mode, r->overlap ? "" : "-seq");
}

void trPrintHeader(const trArgs_t* a, const trEnv_t* env, const trRun_t* run) {
  char mode[128];
  trRun_t label = *run;
  label.overlap = 1; /* said at the end of the line */
  trModeLabel(&label, mode, sizeof mode);
  size_t params = mlpTotalParams(&env->shape);
  printf("zpp-train: %s, %d rank%s on %d node%s, %s weights and gradients, %s overlap\n", mode,
         env->nranks, env->nranks == 1 ? "" : "s", env->topo.nNodes, env->topo.nNodes == 1 ? "" : "s",
         trTypeName(a->type), run->overlap ? "with" : "without");
  printf(
      "zpp-train: char MLP V=%d C=%d E=%d H=%d, weights [%s]: %zu parameters (%.2f MB as %s), "
      "batch %d (%d per rank), %d steps, lr %g, seed %llu\n",
      env->shape.vocab, env->shape.context, env->shape.embed, env->shape.hidden,
      env->shape.weightInOut ? "in][out" : "out][in", params,
      (double)params * (double)zppTypeSize(a->type) / 1e6, trTypeName(a->type), a->batch,
      a->batch / env->nranks, a->steps, a->lr, (unsigned long long)a->seed);
  printf("%-11s %6s %12s %10s %12s %12s %12s\n", "run", "step", "loss", "ms/step", "comm busy ms",
         "exposed ms", "compute ms");
  fflush(stdout);
}

void trPrintStep(const trArgs_t* a, const trRun_t* r, int s) {
  int every = a->printEvery > 0 ? a->printEvery : 1;
  if ((s + 1) % every != 0 && s != 0 && s + 1 != a->steps) return;
  char tag[32];
  trRunTag(r, tag, sizeof tag);
  printf("%-11s %6d %12.6f %10.1f %12.1f %12.1f %12.1f\n", tag, s + 1, r->loss[s], 1e3 * r->time[s],
         1e3 * r->busy[s], 1e3 * r->exposed[s], 1e3 * r->compute[s]);
  fflush(stdout);
}

static double trInterTotal(const trRun_t* r) {
  double b = 0;
  for (int k = 0; k < zppNumOpKinds; k++) b += r->interBytes[k];
  return b;
}

void trPrintSummary(const trArgs_t* a, const trEnv_t* env, const trRun_t* runs, int nruns) {
  for (int i = 0; i < nruns; i++) {
    const trRun_t* r = &runs[i];
    char mode[128];
    trModeLabel(r, mode, sizeof mode);
    printf(
        "zpp-train: %s: final loss %.6f (step %d), held-out loss %.6f; step %.1f ms median "
        "(%.1f mean); communication per step %.1f ms busy, %.1f ms exposed: %.0f%% hidden; "
        "%.2f MB across nodes per step (all ranks)\n",
        mode, r->nsteps > 0 ? r->loss[r->nsteps - 1] : NAN, r->nsteps,
        r->nevals > 0 ? r->evalLoss[r->nevals - 1] : NAN, 1e3 * r->medianStep, 1e3 * r->meanStep,
        1e3 * r->busyMean, 1e3 * r->exposedMean, 100.0 * r->hiddenShare, trInterTotal(r) / 1e6);
    if (r->sampleText != NULL) printf("zpp-train: %s: sample: %s\n", r->mode, r->sampleText);
  }
  /* Runs come in pairs (plain, ZeRO++), with overlap first. */
  for (int i = 0; i + 1 < nruns; i += 2) {
    const trRun_t *p = &runs[i], *z = &runs[i + 1];
    if (!(z->medianStep > 0) || p->nsteps == 0 || z->nsteps == 0) continue;
    double l0 = p->loss[p->nsteps - 1], l1 = z->loss[z->nsteps - 1];
    double v0 = p->evalLoss[p->nevals - 1], v1 = z->evalLoss[z->nevals - 1];
    printf(
        "zpp-train: ZeRO++ against plain%s: step time %.2fx faster (median %.1f / %.1f ms); "
        "final loss %+.2f%%, held-out loss %+.2f%%\n",
        p->overlap ? "" : " without overlap", p->medianStep / z->medianStep, 1e3 * p->medianStep,
        1e3 * z->medianStep, 100.0 * (l1 - l0) / l0, 100.0 * (v1 - v0) / v0);
  }
  if (nruns == 4 && runs[0].medianStep > 0 && runs[1].medianStep > 0)
    printf("zpp-train: overlap against none: plain %.2fx, ZeRO++ %.2fx faster\n",
           runs[2].medianStep / runs[0].medianStep, runs[3].medianStep / runs[1].medianStep);
  fflush(stdout);
}

/* ---- JSON ----------------------------------------------------------------- */

static void trJsonString(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch == '\n')
      fputs("\\n", f);
    else if (ch < 0x20 || ch >= 0x7f)
      fprintf(f, "\\u%04x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

/* JSON has no NaN or Infinity: null stands for them. */
static void trJsonNum(FILE* f, double v) {
  if (isfinite(v))
    fprintf(f, "%.17g", v);
  else
    fputs("null", f);
}

static void trJsonRun(FILE* f, const trRun_t* r) {
  char mode[128];
  trModeLabel(r, mode, sizeof mode);
  fprintf(f, "    {\"mode\": \"%s\", \"overlap\": %s, \"label\": ", r->mode,
          r->overlap ? "true" : "false");
  trJsonString(f, mode);
  fprintf(f,
          ", \"qwz_bits\": %d, \"qgz_bits\": %d, \"hpz\": %s, \"qwz_delta\": %s, "
          "\"qgz_error_feedback\": %s,\n",
          r->opt.qwzBits, r->opt.qgzBits, r->opt.hpz ? "true" : "false",
          r->opt.qwzDelta ? "true" : "false", r->opt.qgzEF ? "true" : "false");
  fprintf(f, "     \"steps\": [\n");
  for (int s = 0; s < r->nsteps; s++) {
    fprintf(f, "       {\"step\": %d, \"loss\": ", s + 1);
    trJsonNum(f, r->loss[s]);
    fprintf(
        f,
        ", \"time_s\": %.6f, \"comm_busy_s\": %.6f, \"comm_exposed_s\": %.6f, \"compute_s\": %.6f}%s\n",
        r->time[s], r->busy[s], r->exposed[s], r->compute[s], s + 1 < r->nsteps ? "," : "");
  }
  fprintf(f, "     ],\n     \"evals\": [");
  for (int e = 0; e < r->nevals; e++) {
    fprintf(f, "%s{\"step\": %d, \"val_loss\": ", e ? ", " : "", r->evalStep[e]);
    trJsonNum(f, r->evalLoss[e]);
    fputc('}', f);
  }
  fprintf(f, "],\n     \"final_loss\": ");
  trJsonNum(f, r->nsteps > 0 ? r->loss[r->nsteps - 1] : NAN);
  fprintf(f, ", \"final_val_loss\": ");
  trJsonNum(f, r->nevals > 0 ? r->evalLoss[r->nevals - 1] : NAN);
  fprintf(f, ",\n     \"recoveries\": %d, \"steps_redone\": %d, \"recovery_s\": %.4f", r->recoveries,
          r->stepsRedone, r->recoverySec);
  fprintf(f, ",\n     \"median_step_s\": %.6f, \"mean_step_s\": %.6f,\n", r->medianStep, r->meanStep);
  fprintf(f,
          "     \"comm_busy_s_per_step\": %.6f, \"comm_exposed_s_per_step\": %.6f, "
          "\"compute_s_per_step\": %.6f, \"hidden_share\": %.4f,\n",
          r->busyMean, r->exposedMean, r->computeMean, r->hiddenShare);
  fprintf(
      f, "     \"secondary_bytes\": %zu,\n     \"bytes_per_step\": {\"inter_node\": %.0f, \"by_op\": {",
      r->secondaryBytes, trInterTotal(r));
  int first = 1;
  for (int k = 0; k < zppNumOpKinds; k++) {
    if (r->intraBytes[k] == 0 && r->interBytes[k] == 0) continue;
    fprintf(f, "%s\"%s\": {\"intra_node\": %.0f, \"inter_node\": %.0f}", first ? "" : ", ",
            zppOpKindName((zppOpKind_t)k), r->intraBytes[k], r->interBytes[k]);
    first = 0;
  }
  fprintf(f, "}}");
  if (r->sampleText != NULL) {
    fprintf(f, ",\n     \"sample\": ");
    trJsonString(f, r->sampleText);
  }
  fprintf(f, "}");
}

int trWriteJson(const char* path, const trArgs_t* a, const trEnv_t* env, const trRun_t* runs,
                int nruns) {
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "zpp-train: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  const mlpShape_t* s = &env->shape;
  fprintf(f, "{\n  \"tool\": \"zpp-train\", \"format\": 1,\n");
  fprintf(f,
          "  \"ranks\": %d, \"nodes\": %d, \"ranks_per_node\": %d, \"uniform\": %s, \"launcher\": "
          "\"%s\",\n",
          env->nranks, env->topo.nNodes, env->topo.localSize, env->topo.uniform ? "true" : "false",
          env->launcher);
  fprintf(f,
          "  \"model\": {\"kind\": \"char-mlp\", \"vocab\": %d, \"context\": %d, \"embed\": %d, "
          "\"hidden\": %d, \"weight_layout\": \"%s\", \"params\": %zu, \"layers\": [",
          s->vocab, s->context, s->embed, s->hidden, s->weightInOut ? "in-out" : "out-in",
          mlpTotalParams(s));
  for (int l = 0; l < MLP_NLAYERS; l++)
    fprintf(f, "%s{\"name\": \"%s\", \"params\": %zu}", l ? ", " : "", mlpLayerName(l),
            mlpLayerParams(s, l));
  fprintf(f, "]},\n  \"train\": {\"data\": ");
  trJsonString(f, a->data);
  fprintf(f,
          ", \"data_bytes\": %zu, \"steps\": %d, \"batch\": %d, \"lr\": %.9g, \"seed\": %llu, "
          "\"dtype\": \"%s\", \"bucket_mb\": %g, \"overlap\": %s, \"eval_samples\": %d},\n",
          env->corpus.n, a->steps, a->batch, a->lr, (unsigned long long)a->seed, trTypeName(a->type),
          a->bucketMB, a->overlap ? "true" : "false", a->evalSamples);
  fprintf(f, "  \"runs\": [\n");
  for (int i = 0; i < nruns; i++) {
    trJsonRun(f, &runs[i]);
    fprintf(f, "%s\n", i + 1 < nruns ? "," : "");
  }
  fprintf(f, "  ]");
  if (nruns >= 2 && runs[0].nsteps > 0 && runs[1].nsteps > 0) {
    double l0 = runs[0].loss[runs[0].nsteps - 1], l1 = runs[1].loss[runs[1].nsteps - 1];
    double v0 = runs[0].evalLoss[runs[0].nevals - 1], v1 = runs[1].evalLoss[runs[1].nevals - 1];
    fprintf(f, ",\n  \"comparison\": {\"speedup\": ");
    trJsonNum(f, runs[1].medianStep > 0 ? runs[0].medianStep / runs[1].medianStep : NAN);
    fprintf(f, ", \"final_loss_rel_diff\": ");
    trJsonNum(f, (l1 - l0) / l0);
    fprintf(f, ", \"val_loss_rel_diff\": ");
    trJsonNum(f, (v1 - v0) / v0);
    if (nruns == 4) {
      fprintf(f, ", \"speedup_no_overlap\": ");
      trJsonNum(f, runs[3].medianStep > 0 ? runs[2].medianStep / runs[3].medianStep : NAN);
      fprintf(f, ", \"overlap_gain_plain\": ");
      trJsonNum(f, runs[0].medianStep > 0 ? runs[2].medianStep / runs[0].medianStep : NAN);
      fprintf(f, ", \"overlap_gain_zeropp\": ");
      trJsonNum(f, runs[1].medianStep > 0 ? runs[3].medianStep / runs[1].medianStep : NAN);
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n}\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    fprintf(stderr, "zpp-train: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* ---- SVG ---------------------------------------------------------------- */

#define SVG_W 900
#define SVG_LEFT 80
#define SVG_RIGHT 24
#define SVG_PANEL_H 260
#define SVG_GAP 70
#define SVG_TOP 70

static const char* const trColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"};

#define TR_SMOOTH 10

/* Round axis limits: a step of 1, 2 or 5 times a power of ten. */
static double trNiceStep(double range) {
  if (!(range > 0)) return 1;
  double raw = range / 5, p = pow(10, floor(log10(raw)));
  double m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

typedef struct {
  int top;
  double y0, y1; /* value range */
  int steps;
} trPanel_t;

static double trX(const trPanel_t* p, double step) {
  double w = SVG_W - SVG_LEFT - SVG_RIGHT;
  return SVG_LEFT + (p->steps > 1 ? (step - 1) / (p->steps - 1) : 0.5) * w;
}

static double trY(const trPanel_t* p, double v) {
  if (!isfinite(v)) v = p->y1;
  if (v < p->y0) v = p->y0;
  if (v > p->y1) v = p->y1;
  return p->top + SVG_PANEL_H - (v - p->y0) / (p->y1 - p->y0) * SVG_PANEL_H;
}

static void trPanel(FILE* f, trPanel_t* p, const char* ylabel, const trRun_t* runs, int nruns,
                    int which) {
  double lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < nruns; i++)
    for (int s = 0; s < runs[i].nsteps; s++) {
      double v = which == 0 ? runs[i].loss[s] : 1e3 * runs[i].time[s];
      if (!isfinite(v)) continue;
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  if (!(hi >= lo)) lo = 0, hi = 1;
  if (which == 1) lo = 0; /* times from zero: ratios read right */
  double st = trNiceStep(hi - lo > 0 ? hi - lo : 1);
  p->y0 = floor(lo / st) * st;
  p->y1 = ceil(hi / st) * st;
  if (p->y1 <= p->y0) p->y1 = p->y0 + st;
  int pw = SVG_W - SVG_LEFT - SVG_RIGHT;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n",
          SVG_LEFT, p->top, pw, SVG_PANEL_H);
  for (double v = p->y0; v <= p->y1 + st * 1e-6; v += st) {
    double y = trY(p, v);
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", SVG_LEFT, y,
            SVG_LEFT + pw, y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", SVG_LEFT - 6, y + 4, v);
  }
  double xs = trNiceStep(p->steps > 1 ? p->steps - 1 : 1);
  for (double s = 1; s <= p->steps + 1e-9; s = (s == 1 && xs > 1) ? xs : s + xs) {
    double x = trX(p, s);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>\n", x, p->top, x,
            p->top + SVG_PANEL_H);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x,
            p->top + SVG_PANEL_H + 16, s);
  }
  fprintf(f, "<text transform=\"translate(24,%d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
          p->top + SVG_PANEL_H / 2, ylabel);
  for (int i = 0; i < nruns; i++) {
    /* The runs without overlap: the colour of their pair, dashed. */
    const char* colour = trColours[i % 2];
    const char* dash = runs[i].overlap ? "" : " stroke-dasharray=\"6,4\"";
    fprintf(f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s%s points=\"",
            which == 0 ? "loss" : "time", colour, which == 0 ? "1" : "1.5",
            which == 0 ? " stroke-opacity=\"0.35\"" : "", dash);
    for (int s = 0; s < runs[i].nsteps; s++) {
      double v = which == 0 ? runs[i].loss[s] : 1e3 * runs[i].time[s];
      fprintf(f, "%.1f,%.1f ", trX(p, s + 1), trY(p, v));
    }
    fprintf(f, "\"/>\n");
    if (which == 0) {
      /* One batch's loss is noisy: the mean of the last TR_SMOOTH steps
       * on top, where a difference between the runs shows. */
      fprintf(
          f, "<polyline class=\"loss-mean\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
          colour, dash);
      double sum = 0;
      for (int s = 0; s < runs[i].nsteps; s++) {
        sum += runs[i].loss[s];
        if (s >= TR_SMOOTH) sum -= runs[i].loss[s - TR_SMOOTH];
        fprintf(f, "%.1f,%.1f ", trX(p, s + 1), trY(p, sum / (s < TR_SMOOTH ? s + 1 : TR_SMOOTH)));
      }
      fprintf(f, "\"/>\n");
    }
    if (which == 0) /* held-out losses as dots on the same axis */
      for (int e = 0; e < runs[i].nevals; e++)
        fprintf(f,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"white\" stroke=\"%s\" "
                "stroke-width=\"2\"><title>held-out loss %.4f at step %d</title></circle>\n",
                trX(p, runs[i].evalStep[e]), trY(p, runs[i].evalLoss[e]), colour, runs[i].evalLoss[e],
                runs[i].evalStep[e]);
  }
}

int trWriteSvg(const char* path, const trArgs_t* a, const trEnv_t* env, const trRun_t* runs,
               int nruns) {
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "zpp-train: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  int steps = 1;
  for (int i = 0; i < nruns; i++) steps = runs[i].nsteps > steps ? runs[i].nsteps : steps;
  int legendH = 20 * nruns + 10;
  int h = SVG_TOP + 2 * SVG_PANEL_H + SVG_GAP + 40 + legendH;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n",
          SVG_W, h, SVG_W, h);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f,
          "<text x=\"%d\" y=\"24\" font-size=\"15\" font-weight=\"bold\">zpp-train: ZeRO-3 char MLP, "
          "%zu parameters, %d rank%s on %d node%s</text>\n",
          SVG_LEFT, mlpTotalParams(&env->shape), env->nranks, env->nranks == 1 ? "" : "s",
          env->topo.nNodes, env->topo.nNodes == 1 ? "" : "s");
  fprintf(f,
          "<text x=\"%d\" y=\"44\" fill=\"#555\">batch %d, %s communication, seed %llu; "
          "thin: loss of each batch, thick: mean of the last %d; circles: held-out loss%s</text>\n",
          SVG_LEFT, a->batch, trTypeName(a->type), (unsigned long long)a->seed, TR_SMOOTH,
          nruns == 4 ? "; dashed: without overlap (same losses)" : "");
  trPanel_t loss = {SVG_TOP, 0, 1, steps}, time = {SVG_TOP + SVG_PANEL_H + SVG_GAP, 0, 1, steps};
  trPanel(f, &loss, "training loss (nats)", runs, nruns, 0);
  trPanel(f, &time, "time per step (ms)", runs, nruns, 1);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n",
          SVG_LEFT + (SVG_W - SVG_LEFT - SVG_RIGHT) / 2, time.top + SVG_PANEL_H + 34);
  int ly = time.top + SVG_PANEL_H + 56;
  for (int i = 0; i < nruns; i++, ly += 20) {
    const trRun_t* r = &runs[i];
    char mode[128];
    trModeLabel(r, mode, sizeof mode);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
            SVG_LEFT, ly - 4, SVG_LEFT + 24, ly - 4, trColours[i % 2],
            r->overlap ? "" : " stroke-dasharray=\"6,4\"");
    fprintf(f,
            "<text x=\"%d\" y=\"%d\">%s: final loss %.4f, held-out %.4f, %.1f ms/step median, "
            "%.0f%% of communication hidden</text>\n",
            SVG_LEFT + 30, ly, mode, r->nsteps ? r->loss[r->nsteps - 1] : NAN,
            r->nevals ? r->evalLoss[r->nevals - 1] : NAN, 1e3 * r->medianStep, 100 * r->hiddenShare);
  }
  fprintf(f, "</svg>\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    fprintf(stderr, "zpp-train: writing %s failed: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}
