/*
 * zpp-quant-error-table: measured quantization error against wire overhead
 * for every block size, int8, int4 and int2, on data shaped like what the
 * codecs carry: weights (normal, std 0.02, as initialised) for qwZ's int8,
 * and gradients (heavy-tailed Student-t with 3 degrees of freedom, and
 * normal with rare 50x outliers) for qgZ's int4 and int2. Prints a Markdown table
 * (docs/codecs.md holds its output and the defaults chosen from it).
 *
 * The score ranks block sizes by rate and distortion together: wire bits
 * per element + log2(relative RMS error). One more bit per element halves a
 * uniform quantizer's error, so a smaller block is worth its scales exactly
 * when it cuts the error by more than its scales cost in bits. Lowest wins.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_quant.h"

/* splitmix64 and Box-Muller: deterministic, so the table reproduces. */
static uint64_t rngState = 0x7a7070717565ull;
static uint64_t rngNext(void) {
  uint64_t z = (rngState += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double rngUniform(void) { return ((double)(rngNext() >> 11) + 0.5) * 0x1.0p-53; }
static double rngNormal(void) {
  return sqrt(-2.0 * log(rngUniform())) * cos(6.283185307179586 * rngUniform());
}

/* The widths in the tables, and each one's default block and Q. */
enum { NBITS = 3 };
static const int kBits[NBITS] = {8, 4, 2};
static int defaultBlock(int bits) { return zppQuantDefaultBlock(bits); }
static double qmax(int bits) { return bits == 8 ? 127.0 : bits == 4 ? 7.0 : 1.0; }

typedef enum { DATA_WEIGHTS, DATA_GRAD_T3, DATA_GRAD_OUTLIERS, DATA_COUNT } dataKind_t;
static const char* kDataNames[DATA_COUNT] = {"weights N(0,0.02)", "gradients t(3)",
                                             "gradients N + 0.1% x50"};

static void fill(float* x, size_t n, dataKind_t kind) {
  for (size_t i = 0; i < n; i++) {
    double v;
    if (kind == DATA_WEIGHTS) {
      v = 0.02 * rngNormal();
    } else if (kind == DATA_GRAD_T3) {
      double z = rngNormal(), c = 0;
      for (int k = 0; k < 3; k++) {
        double g = rngNormal();
        c += g * g;
      }
      v = 1e-3 * z / sqrt(c / 3.0);
    } else {
      v = 1e-3 * rngNormal();
      if (rngNext() % 1000 == 0) v *= 50.0;
    }
    x[i] = (float)v;
  }
}

typedef struct {
  double relRms;  /* ||y - x|| / ||x|| */
  double meanRel; /* mean |y - x| / mean |x| */
  double maxRel;  /* max |y - x| / max |x| */
  double wireBpe; /* wire bytes per element */
  double score;   /* wire bits per element + log2(relRms) */
} stats_t;

static int measure(const float* x, size_t n, int bits, int block, float* y, void* packed, stats_t* st) {
  if (zppQuantize(x, zppFloat32, n, bits, block, packed) != zppSuccess) return -1;
  if (zppDequantize(packed, n, bits, block, y, zppFloat32) != zppSuccess) return -1;
  double se = 0, sx = 0, ae = 0, ax = 0, me = 0, mx = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)y[i] - (double)x[i]), a = fabs((double)x[i]);
    se += e * e;
    sx += a * a;
    ae += e;
    ax += a;
    if (e > me) me = e;
    if (a > mx) mx = a;
  }
  st->relRms = sqrt(se / sx);
  st->meanRel = ae / ax;
  st->maxRel = me / mx;
  st->wireBpe = (double)zppQuantPackedSize(n, bits, block) / (double)n;
  st->score = 8.0 * st->wireBpe + log2(st->relRms);
  return 0;
}

int main(int argc, char** argv) {
  size_t n = (size_t)1 << 22;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
      n = (size_t)strtoull(argv[++i], NULL, 0);
    } else {
      fprintf(stderr,
              "usage: zpp-quant-error-table [--count N]\n"
              "  quantization error and wire bytes per element for every block size, int8, int4 and\n"
              "  int2,\n"
              "  on weight-like and gradient-like data (N elements each, default 2^22)\n");
      return strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 0 : 2;
    }
  }
  if (n < 4096) n = 4096;
  float* x = malloc(n * sizeof(float));
  float* y = malloc(n * sizeof(float));
  void* packed = malloc(zppQuantPackedSize(n, 8, 32));
  if (!x || !y || !packed) {
    fprintf(stderr, "zpp-quant-error-table: out of memory\n");
    return 1;
  }
  printf("%zu elements per data set, fp32 in and out (quantization error only), codecs: %s\n\n", n,
         zppQuantImplName());
  int best[NBITS][DATA_COUNT];
  double bestScore[NBITS][DATA_COUNT];
  for (int bi = 0; bi < NBITS; bi++)
    for (int d = 0; d < DATA_COUNT; d++) bestScore[bi][d] = INFINITY;
  printf(
      "| bits | block | wire B/elem | data | rel. RMS error | mean rel. error | max err / max |x| | "
      "score |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (int d = 0; d < DATA_COUNT; d++) {
    rngState = 0x7a7070717565ull + (uint64_t)d;
    fill(x, n, (dataKind_t)d);
    for (int bi = 0; bi < NBITS; bi++) {
      int bits = kBits[bi];
      for (int block = ZPP_QUANT_MIN_BLOCK; block <= ZPP_QUANT_MAX_BLOCK; block *= 2) {
        stats_t st;
        if (measure(x, n, bits, block, y, packed, &st) != 0) {
          fprintf(stderr, "zpp-quant-error-table: codec call failed\n");
          return 1;
        }
        printf("| int%d | %d | %.4f | %s | %.3e | %.3e | %.3e | %.3f |\n", bits, block, st.wireBpe,
               kDataNames[d], st.relRms, st.meanRel, st.maxRel, st.score);
        if (st.score < bestScore[bi][d]) {
          bestScore[bi][d] = st.score;
          best[bi][d] = block;
        }
      }
    }
  }
  printf("\nlowest score (wire bits/elem + log2 rel. RMS error):\n");
  for (int bi = 0; bi < NBITS; bi++)
    for (int d = 0; d < DATA_COUNT; d++)
      printf("  int%d %-24s block %d (score %.3f)\n", kBits[bi], kDataNames[d], best[bi][d],
             bestScore[bi][d]);
  printf("compiled-in defaults: int8 block %d, int4 block %d, int2 block %d\n",
         ZPP_QUANT_DEFAULT_BLOCK_INT8, ZPP_QUANT_DEFAULT_BLOCK_INT4, ZPP_QUANT_DEFAULT_BLOCK_INT2);

  /* Would a 3-bit codec pay (docs/codecs.md, "int2")? No such codec exists:
   * a model of one, the codecs' rule in double (scale = max |x| / Q,
   * q = rne(x / scale), Q = 3, no escapes), beside the same model at
   * Q = 1, 7 (int2, int4) and the codecs themselves, all at block 64, with
   * the wire bits a 3-bit segment would have (3 bits per element, the scale
   * and table bytes of the others). */
  printf(
      "\nmodel of the codecs' rule in double at block 64 (Q = 1, 3, 7: 2, 3, 4 bits), no escapes:\n\n");
  printf("| bits | data | wire bits/elem | rel. RMS error, model | rel. RMS error, codec | score |\n");
  printf("|---|---|---|---|---|---|\n");
  for (int d = 0; d < DATA_COUNT; d++) {
    rngState = 0x7a7070717565ull + (uint64_t)d;
    fill(x, n, (dataKind_t)d);
    for (int bits = 2; bits <= 4; bits++) {
      const int block = 64;
      const double Q = (double)((1 << (bits - 1)) - 1);
      double se = 0, sx = 0;
      for (size_t lo = 0; lo < n; lo += block) {
        size_t hi = lo + block < n ? lo + block : n;
        double a = 0;
        for (size_t i = lo; i < hi; i++) a = fmax(a, fabs((double)x[i]));
        for (size_t i = lo; i < hi; i++) {
          double s = a / Q, yq = a > 0 ? nearbyint((double)x[i] / s) * s : 0.0;
          se += (yq - x[i]) * (yq - x[i]);
          sx += (double)x[i] * x[i];
        }
      }
      /* the wire: bits per element, 32 per block, the tables; the header */
      double wire = bits + 32.0 / block + 8.0 * ZPP_QUANT_ESC_TABLE_BYTES / ZPP_QUANT_ESC_GROUP;
      char codec[32] = "-";
      if (bits != 3) {
        stats_t st;
        if (measure(x, n, bits, block, y, packed, &st) != 0) return 1;
        snprintf(codec, sizeof codec, "%.3e", st.relRms);
      }
      printf("| %d | %s | %.3f | %.3e | %s | %.3f |\n", bits, kDataNames[d], wire, sqrt(se / sx), codec,
             wire + log2(sqrt(se / sx)));
    }
  }

  /* Escapes (docs/codecs.md, "Escapes") at the default blocks: how often
   * ordinary data takes a slot, and what spikes (one element in 64 at 100x,
   * the third kind), garbage (one element in 1024 at 1e30), sparse
   * gradients (1 in 16 non-zero) and a flat buffer of tensors whose scales
   * differ by 2^20 do. The non-garbage error leaves the 1e30 elements out
   * (they dominate ||x|| otherwise); worst / bound is the largest error of
   * a packed (not escaped) element over the codec's documented bound for
   * its block's scale: at most 1 when no element is saturated. */
  printf("\nescapes at the default blocks, per million elements:\n\n");
  printf(
      "| bits | block | data | escapes | overflowing blocks | rel. RMS error | rel. RMS error, "
      "non-garbage | worst error / bound |\n|---|---|---|---|---|---|---|---|\n");
  const char* kEscNames[] = {"weights N(0,0.02)", "gradients t(3)",     "gradients N + 0.1% x50",
                             "N + 1/64 at x100",  "N + 1/1024 at 1e30", "t(3), 1 in 16 non-zero",
                             "tensors 2^20 apart"};
  for (int d = 0; d < 7; d++) {
    rngState = 0x7a7070717565ull + (uint64_t)d;
    fill(x, n, d < DATA_COUNT ? (dataKind_t)d : d == 5 ? DATA_GRAD_T3 : DATA_WEIGHTS);
    if (d == 3 || d == 4)
      for (size_t i = 0; i < n; i++)
        if (rngNext() % (d == 3 ? 64 : 1024) == 0) x[i] = d == 3 ? x[i] * 100.0f : 1e30f;
    if (d == 5)
      for (size_t i = 0; i < n; i++)
        if (rngNext() % 16 != 0) x[i] = 0.0f;
    if (d == 6) /* tensors of 100 to 5000 elements, every other one 2^-20 of its neighbours */
      for (size_t i = 0, k = 0; i < n; k++) {
        size_t len = 100 + rngNext() % 4901;
        for (size_t j = 0; j < len && i < n; j++, i++) x[i] = (k & 1) ? x[i] * 0x1p-20f : x[i];
      }
    for (int bi = 0; bi < NBITS; bi++) {
      int bits = kBits[bi], block = defaultBlock(bits);
      uint64_t esc = 0, ovf = 0;
      zppQuantTakeEscapeCounts(NULL, NULL);
      stats_t st;
      if (measure(x, n, bits, block, y, packed, &st) != 0) return 1;
      zppQuantTakeEscapeCounts(&esc, &ovf);
      double Q = qmax(bits), se = 0, sx = 0, worst = 0;
      for (size_t i = 0; i < n; i++) {
        double e = fabs((double)y[i] - (double)x[i]);
        if (x[i] != 1e30f) {
          se += e * e;
          sx += (double)x[i] * (double)x[i];
        }
        if (e == 0) continue; /* escaped elements and exact ones */
        float sc;
        memcpy(&sc, (const char*)packed + ZPP_QUANT_HEADER_BYTES + 4 * (i / (size_t)block), 4);
        double bound = (double)sc / 2 + 0x1p-21 * Q * (double)sc + (Q + 1) * 0x1p-150;
        if (e / bound > worst) worst = e / bound;
      }
      printf("| int%d | %d | %s | %.1f | %.1f | %.3e | %.3e | %.4f |\n", bits, block, kEscNames[d],
             1e6 * (double)esc / (double)n, 1e6 * (double)ovf / (double)n, st.relRms, sqrt(se / sx),
             worst);
    }
  }

  /* Rotation (docs/codecs.md, "Rotation"): the same codecs with
   * ZPP_QUANT_ROTATE, on the three kinds of data. Worst error is
   * relative to the largest |x| of the element's own block. */
  printf("\nrotation (zppQuantizeEx ZPP_QUANT_ROTATE), fp32 in and out:\n\n");
  printf(
      "| bits | block | data | rel. RMS plain | rel. RMS rotated | worst / block max, plain | "
      "worst / block max, rotated |\n|---|---|---|---|---|---|---|\n");
  const char* kRotNames[] = {"Gaussian", "Student t(3)", "Gaussian + 1/64 at x100"};
  for (int d = 0; d < 3; d++) {
    rngState = 0x7a7070726f74ull + (uint64_t)d;
    fill(x, n, d == 1 ? DATA_GRAD_T3 : DATA_WEIGHTS);
    if (d == 2)
      for (size_t i = 0; i < n; i++)
        if (rngNext() % 64 == 0) x[i] *= 100.0f;
    for (int cfg = 0; cfg < 5; cfg++) {
      int bits = cfg == 0 ? 8 : cfg < 3 ? 4 : 2, block = cfg == 0 || cfg % 2 == 0 ? 256 : 64;
      double rms[2], worst[2];
      for (int rot = 0; rot < 2; rot++) {
        if (zppQuantizeEx(x, zppFloat32, n, bits, block, rot ? ZPP_QUANT_ROTATE : 0, packed) !=
                zppSuccess ||
            zppDequantizeEx(packed, n, bits, block, y, zppFloat32) != zppSuccess)
          return 1;
        double se = 0, sx = 0, w = 0;
        for (size_t lo = 0; lo < n; lo += (size_t)block) {
          size_t hi = lo + (size_t)block < n ? lo + (size_t)block : n;
          double bm = 0, be = 0;
          for (size_t i = lo; i < hi; i++) {
            double e = fabs((double)y[i] - (double)x[i]);
            se += e * e;
            sx += (double)x[i] * (double)x[i];
            if (fabs((double)x[i]) > bm) bm = fabs((double)x[i]);
            if (e > be) be = e;
          }
          if (bm > 0 && be / bm > w) w = be / bm;
        }
        rms[rot] = sqrt(se / sx);
        worst[rot] = w;
      }
      printf("| int%d | %d | %s | %.3e | %.3e | %.3e | %.3e |\n", bits, block, kRotNames[d], rms[0],
             rms[1], worst[0], worst[1]);
    }
  }
  free(x);
  free(y);
  free(packed);
  return 0;
}
