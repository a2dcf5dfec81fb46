/*
 * zpp-coll-error-table: the error of whole qgZ and qwZ calls on 2x2 (two
 * nodes of two ranks, forked on this machine: perf/common/launch.h), int4
 * and int8, plain and rotated, on the three data kinds of docs/codecs.md
 * ("Rotation"): Gaussian, Student's t with 3 degrees of freedom, Gaussian
 * with one element in 64 at 100x.
 *
 * qgZ (reduce-scatter, sum) runs on a plain and a rotating communicator;
 * for the rotating one the three orders of zpp_quant.h ("Reductions of
 * rotated segments": simple, rotated-domain, direct) are also computed here with the codec functions,
 * stage by stage as qgZ does on 2x2 (each node's two segments reduced and requantized, then the two
 * node sums summed), and the order qgZ uses must match the real call bit for bit (else the tool fails).
 * qwZ (all-gather) runs on both communicators.
 *
 * Error of element i: |y_i - x_i| / max |x_j| over the codec block of i,
 * x the exact result (double: the sum of the four inputs for qgZ, the
 * shard for qwZ). Printed: the RMS and the largest of it over every
 * element of every rank's partition.
 *
 * Usage: zpp-coll-error-table [count per rank, default 65536]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/common/launch.h"
#include "quant_kernels/zpp_quant.h"
#include "zpp.h"

enum { W = 4, NN = 2, LL = 2, NKIND = 3 };
static const char* const kKind[NKIND] = {"Gaussian", "Student t3", "spikes 1/64 x100"};

static size_t gRc = 65536;

typedef struct {
  uint64_t s;
} rng_t;

static uint64_t next(rng_t* r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double unif(rng_t* r) { return ((double)(next(r) >> 11) + 0.5) * 0x1p-53; }
static double normal(rng_t* r) { return sqrt(-2.0 * log(unif(r))) * cos(6.283185307179586 * unif(r)); }

/* Rank k's send buffer (W * rc elements) for data kind `kind`. */
static void fill(float* x, size_t n, int kind, int k) {
  rng_t r = {0x5eed0000ull + (uint64_t)kind * 131 + (uint64_t)k};
  for (size_t i = 0; i < n; i++) {
    double v = normal(&r);
    if (kind == 1) {
      double a = normal(&r), b = normal(&r), c = normal(&r);
      v = v / sqrt((a * a + b * b + c * c) / 3.0);
    }
    x[i] = (float)v;
  }
  if (kind == 2)
    for (size_t i = 0; i + 64 <= n; i += 64) x[i + next(&r) % 64] *= 100.0f;
}

typedef struct {
  double sumsq, n, max;
} stat_t;

/* Adds the relative errors of y against the exact x (count elements). */
static void addErr(stat_t* st, const float* y, const double* x, size_t count, int block) {
  for (size_t lo = 0; lo < count; lo += (size_t)block) {
    double m = 0;
    for (size_t i = lo; i < lo + (size_t)block && i < count; i++) m = fmax(m, fabs(x[i]));
    if (m == 0) continue;
    for (size_t i = lo; i < lo + (size_t)block && i < count; i++) {
      double e = fabs((double)y[i] - x[i]) / m;
      if (isnan(e)) e = INFINITY;
      st->sumsq += e * e;
      st->n += 1;
      st->max = fmax(st->max, e);
    }
  }
}

/* qgZ's rotated result for partition p as qgZ computes it on 2x2, in `order`. */
static int emulate(float* const* in, size_t rc, int p, int bits, int block, zppQuantSumOrder_t order,
                   float* out) {
  size_t P = zppQuantPackedSize(rc, bits, block);
  uint8_t* segs = malloc((size_t)W * P);
  uint8_t* rr = malloc((size_t)NN * P);
  if (segs == NULL || rr == NULL) return 1;
  int bad = 0;
  for (int k = 0; k < W; k++)
    bad |= zppQuantizeEx(in[k] + (size_t)p * rc, zppFloat32, rc, bits, block, ZPP_QUANT_ROTATE,
                         segs + (size_t)k * P) != zppSuccess;
  for (int n = 0; n < NN; n++)
    bad |= zppQuantReduceRequantOrder(segs + (size_t)n * LL * P, P, LL, rc, bits, block, bits, block,
                                      ZPP_QUANT_ROTATE, order, rr + (size_t)n * P) != zppSuccess;
  bad |= zppDequantizeSumOrder(rr, P, NN, rc, bits, block, 1.0f, out, zppFloat32, order) != zppSuccess;
  free(segs);
  free(rr);
  return bad;
}

/* Rows: qgZ plain, qgZ rotated in the simple, rotated-domain and direct
 * orders, qwZ plain, qwZ rotated; per bits (4, 8) and data kind. */
enum { R_QGZ_PLAIN, R_QGZ_SIMPLE, R_QGZ_RDOM, R_QGZ_DIRECT, R_QWZ_PLAIN, R_QWZ_ROT, NROW };
#define NSTAT (2 * NKIND * NROW)

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  if (nranks != W) return 1;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.quantRotate = 0;
  cfg.compressMinBytes = 0;
  zppComm_t plain, rot;
  if (zppCommInitRankConfig(&plain, nranks, *id, rank, &cfg) != zppSuccess) return 1;
  zppUniqueId id2;
  memset(&id2, 0, sizeof id2);
  if (rank == 0 && zppGetUniqueId(&id2) != zppSuccess) return 1;
  if (zppBroadcast(&id2, &id2, sizeof id2, zppUint8, 0, plain, NULL) != zppSuccess) return 1;
  cfg.quantRotate = 1;
  if (zppCommInitRankConfig(&rot, nranks, id2, rank, &cfg) != zppSuccess) return 1;
  const size_t rc = gRc;
  float* in[W];
  for (int k = 0; k < W; k++) in[k] = malloc((size_t)W * rc * sizeof(float));
  float* y = malloc((size_t)W * rc * sizeof(float));
  float* e = malloc(rc * sizeof(float));
  double* x = malloc((size_t)(W + 1) * rc * sizeof(double));
  stat_t* st = calloc(NSTAT, sizeof(stat_t));
  double* all = malloc((size_t)W * NSTAT * 3 * sizeof(double));
  if (y == NULL || e == NULL || x == NULL || st == NULL || all == NULL) return 1;
  long mismatch = 0;
  int fail = 0;
  for (int kind = 0; kind < NKIND; kind++) {
    for (int k = 0; k < W; k++) {
      if (in[k] == NULL) return 1;
      fill(in[k], (size_t)W * rc, kind, k);
    }
    for (size_t i = 0; i < rc; i++) {
      double s = 0;
      for (int k = 0; k < W; k++) s += (double)in[k][(size_t)rank * rc + i];
      x[i] = s;
    }
    for (int bi = 0; bi < 2; bi++) {
      int bits = bi == 0 ? 4 : 8;
      int block = zppQuantDefaultBlock(bits);
      stat_t* row = st + (bi * NKIND + kind) * NROW;
      fail |= zppQgzReduceScatter(in[rank], y, rc, zppFloat32, zppSum, bits, plain, NULL) != zppSuccess;
      addErr(&row[R_QGZ_PLAIN], y, x, rc, block);
      fail |= zppQgzReduceScatter(in[rank], y, rc, zppFloat32, zppSum, bits, rot, NULL) != zppSuccess;
      for (int o = 0; o < 3; o++) {
        static const zppQuantSumOrder_t kOrder[3] = {ZPP_QUANT_SUM_SIMPLE, ZPP_QUANT_SUM_ROTATED_DOMAIN,
                                                     ZPP_QUANT_SUM_ROTATED_DIRECT};
        zppQuantSumOrder_t order = kOrder[o];
        fail |= emulate(in, rc, rank, bits, block, order, e);
        addErr(&row[R_QGZ_SIMPLE + o], e, x, rc, block);
        if (order == ZPP_QUANT_SUM_QGZ)
          for (size_t i = 0; i < rc; i++) mismatch += memcmp(&e[i], &y[i], sizeof(float)) != 0;
      }
      /* qwZ: every rank's first rc elements gathered. */
      for (int k = 0; k < W; k++)
        for (size_t i = 0; i < rc; i++) x[rc + (size_t)k * rc + i] = (double)in[k][i];
      for (int r = 0; r < 2; r++) {
        fail |= zppQwzAllGather(in[rank], y, rc, zppFloat32, bits, r ? rot : plain, NULL) != zppSuccess;
        for (int k = 0; k < W; k++)
          addErr(&row[r ? R_QWZ_ROT : R_QWZ_PLAIN], y + (size_t)k * rc, x + rc + (size_t)k * rc, rc,
                 block);
      }
    }
  }
  if (mismatch)
    fprintf(stderr, "rank %d: qgZ differs from its documented order in %ld elements\n", rank, mismatch);
  double mine[NSTAT * 3];
  for (int s = 0; s < NSTAT; s++)
    mine[3 * s] = st[s].sumsq, mine[3 * s + 1] = st[s].n, mine[3 * s + 2] = st[s].max;
  fail |= zppAllGather(mine, all, NSTAT * 3, zppFloat64, plain, NULL) != zppSuccess;
  if (rank == 0 && !fail) {
    static const char* const rowName[NROW] = {"qgZ plain",
                                              "qgZ rotated, simple order",
                                              "qgZ rotated, rotated-domain order",
                                              "qgZ rotated, direct order",
                                              "qwZ plain",
                                              "qwZ rotated"};
    printf("| call | bits | %s RMS | max | %s RMS | max | %s RMS | max |\n", kKind[0], kKind[1],
           kKind[2]);
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int rr = 0; rr < NROW; rr++)
      for (int bi = 0; bi < 2; bi++) {
        printf("| %s | int%d |", rowName[rr], bi == 0 ? 4 : 8);
        for (int kind = 0; kind < NKIND; kind++) {
          int s = (bi * NKIND + kind) * NROW + rr;
          double sq = 0, n = 0, mx = 0;
          for (int r = 0; r < W; r++) {
            const double* a = all + (size_t)r * NSTAT * 3 + 3 * s;
            sq += a[0], n += a[1], mx = fmax(mx, a[2]);
          }
          if (rr >= R_QWZ_PLAIN) sq /= W, n /= W; /* every rank holds the same gather */
          printf(" %.4e | %.4e |", sqrt(sq / n), mx);
        }
        printf("\n");
      }
    printf("(qgZ rotated uses the %s order: bit for bit the real call)\n",
           ZPP_QUANT_SUM_QGZ == ZPP_QUANT_SUM_SIMPLE           ? "simple"
           : ZPP_QUANT_SUM_QGZ == ZPP_QUANT_SUM_ROTATED_DOMAIN ? "rotated-domain"
                                                               : "direct");
  }
  for (int k = 0; k < W; k++) free(in[k]);
  free(y);
  free(e);
  free(x);
  free(st);
  free(all);
  zppCommDestroy(rot);
  zppCommDestroy(plain);
  return fail || mismatch ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (gRc = strtoul(argv[1], NULL, 10)) == 0)) {
    fprintf(stderr, "usage: %s [elements per rank, default 65536]\n", argv[0]);
    return 2;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.layout = "2x2";
  o.timeoutSec = 600;
  int rc = zppLaunch(&o, body, NULL);
  if (rc != 0) fprintf(stderr, "zpp-coll-error-table: ranks failed (%d)\n", rc);
  return rc != 0;
}
