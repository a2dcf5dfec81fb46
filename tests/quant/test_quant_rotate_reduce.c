/*
 * The reductions over rotated segments (zppDequantizeSumEx,
 * zppQuantReduceRequantEx; zpp_quant.h, "Reductions of rotated segments"):
 *   - the simple order, bit for bit: each input decoded in full by
 *     zppDequantizeEx, summed in input order in fp32, divided, rounded; the
 *     requantized output is zppQuantizeEx of those sums, byte for byte;
 *   - inputs of both kinds mixed (rotated and plain segments), every dtype,
 *     int8 and int4, odd counts, an Inf and a NaN (NaN in the result);
 *   - the fp32 sum within gamma_{n-1} sum |y| of the exact sum;
 *   - the rotated-domain order (zppDequantizeSumOrder/...RequantOrder with
 *     ZPP_QUANT_SUM_ROTATED_DOMAIN) bit for bit against the spec written
 *     out here from the segments' bytes (one inverse per block of the sum,
 *     then the escapes in input order; the simple order in blocks that
 *     some input stores plain), and element by element within its bound of
 *     the exact sum T_i of the inputs' exact inverses plus escapes;
 *     all-rotated and mixed inputs, escapes, Inf/NaN, n = 1..8;
 *   - the direct order's requantization (ZPP_QUANT_SUM_ROTATED_DIRECT) bit
 *     for bit against the spec written out here (a block that every input
 *     stores rotated, without escapes, with finite r: r quantized as the
 *     encoder quantizes w, stored rotated; the others: the rotated-domain
 *     sums through zppQuantizeEx with the direct blocks at +0), its direct
 *     blocks' exact inverse within their bound of T_i, with mixed direct and
 *     fallback blocks in one group, block_in != block_out, 8 -> 4 bits,
 *     an unrotated output, sums that overflow;
 *   - bad arguments refused with zppInvalidArgument.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"
#include "quant_kernels/zpp_quant.h"
#include "quant_testlib.h"

static const zppDataType_t kTypes[3] = {zppFloat32, zppFloat16, zppBfloat16};
/* Blocks the direct order's spec took directly and not, over a run. */
static int gDirect, gFall;

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  REQUIRE(p != NULL);
  return p;
}

static void fill(float* x, size_t n, zppTestRng_t* rng, int heavy) {
  for (size_t i = 0; i < n; i++) {
    double v = zppTestRngNormal(rng);
    if (heavy && zppTestRngNext(rng) % 64 == 0) v *= 100;
    x[i] = (float)v;
  }
}

/* Block b of segment seg stored rotated: rotated segment, full block, the
 * scale's sign clear and finite. */
static int specRotated(const uint8_t* seg, size_t count, int block, size_t b) {
  if (!(seg[6] & ZPP_QUANT_FLAG_ROTATED) || (b + 1) * (size_t)block > count) return 0;
  uint32_t sb = zppF32Bits(zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, b));
  return !(sb & 0x80000000u) && (sb & 0x7f800000u) != 0x7f800000u;
}

/* Block b (elements lo..lo+len) of n rotated inputs: r[j] the fp32 sum of
 * v_k = q_k s_k in input order, t[j] the exact inverses of the v_k summed
 * (y: scratch). Returns sum_k sum_j |v_{k,j}|. */
static double blockSums(const uint8_t* segs, size_t P, int n, size_t dataOff, int bits, size_t b,
                        size_t lo, size_t len, float* r, double* y, double* t) {
  double A = 0.0;
  for (size_t j = 0; j < len; j++) t[j] = 0.0;
  for (int k = 0; k < n; k++) {
    const uint8_t* seg = segs + (size_t)k * P;
    float s = zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, b);
    for (size_t j = 0; j < len; j++) {
      float v = (float)zppQuantGetQ(seg + dataOff, bits, lo + j) * s;
      r[j] = k == 0 ? 0.0f + v : r[j] + v;
      y[j] = (double)v;
      A += fabs((double)v);
    }
    qtExactInverse(y, len);
    for (size_t j = 0; j < len; j++) t[j] += y[j];
  }
  return A;
}

/* The rotated-domain order written out from the spec into want[] (fp32
 * sums; simple[] holds the simple order's), and the bound of each element
 * of a rotated-domain block against T_i: returns the elements outside. */
static long specRotatedDomain(const uint8_t* segs, size_t P, int n, size_t count, int bits, int block,
                              const float* simple, float* want, int* nrotBlocks) {
  static float r[ZPP_QUANT_MAX_BLOCK];
  static double t[ZPP_QUANT_MAX_BLOCK], y[ZPP_QUANT_MAX_BLOCK], ae[ZPP_QUANT_MAX_BLOCK];
  static int m[ZPP_QUANT_MAX_BLOCK];
  const double u = 0x1p-24;
  const size_t dataOff = zppQuantDataOffset(count, block),
               escOff = zppQuantEscOffset(count, bits, block);
  const int L = zppQuantLog2(block);
  long bad = 0;
  for (size_t b = 0; b * (size_t)block < count; b++) {
    size_t lo = b * (size_t)block, len = count - lo < (size_t)block ? count - lo : (size_t)block;
    int all = 1;
    for (int k = 0; k < n; k++) all &= specRotated(segs + (size_t)k * P, count, block, b);
    if (!all) {
      memcpy(want + lo, simple + lo, len * sizeof(float));
      continue;
    }
    ++*nrotBlocks;
    for (size_t j = 0; j < len; j++) ae[j] = 0.0, m[j] = 0;
    double A = blockSums(segs, P, n, dataOff, bits, b, lo, len, r, y, t) / (double)len;
    double R = 0.0;
    for (size_t j = 0; j < len; j++) R = fmax(R, fabs((double)r[j]));
    zppQuantRotHadamardRef(r, len);
    const float invB = 1.0f / (float)len;
    for (size_t j = 0; j < len; j++)
      want[lo + j] = zppF32FromBits(zppF32Bits(r[j] * invB) ^ zppQuantRotSignMask(j));
    for (size_t j = 0; j < len; j++) y[j] = fabs((double)want[lo + j]); /* y: now |z_i| */
    for (int k = 0; k < n; k++) {
      const uint8_t* tab =
          segs + (size_t)k * P + escOff + (lo / ZPP_QUANT_ESC_GROUP) * ZPP_QUANT_ESC_TABLE_BYTES;
      size_t base = lo / ZPP_QUANT_ESC_GROUP * ZPP_QUANT_ESC_GROUP;
      for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
        unsigned idx = zppQuantEscIndex(tab, j);
        if (idx == ZPP_QUANT_ESC_EMPTY) break;
        if (base + idx < lo || base + idx >= lo + len) continue;
        float e = zppQuantEscValue(tab, j);
        size_t at = base + idx - lo;
        want[lo + at] = want[lo + at] + e;
        t[at] += (double)e;
        ae[at] += fabs((double)e);
        m[at]++;
      }
    }
    const double F = (n - 1) * u / (1 - (n - 1) * u) * A + u * L * R * (1 + 0x1p-20) + 0x1p-150;
    for (size_t j = 0; j < len; j++) {
      double gm = m[j] * u / (1 - m[j] * u);
      double bound = (1 + gm) * F + gm * (y[j] + ae[j]) + 0x1p-50 * (fabs(t[j]) + ae[j] + A);
      if (!(fabs((double)want[lo + j] - t[j]) <= bound)) bad++;
    }
  }
  return bad;
}

/* The direct order's requantized segment (bits_out, block_out, flags_out)
 * written out from the spec into want, from the segments' bytes and the
 * rotated-domain sums rsum (as specRotatedDomain wrote them); *ndirect
 * counts the direct blocks, *nfall the others. Returns the elements of
 * direct blocks outside the bound: the exact inverse of the output's block
 * against T_i (the exact inverses of the inputs summed), within
 * gamma_{n-1} A + s/2 + 2^-21 Q s + (Q + 1) 2^-150. */
static long specDirect(const uint8_t* segs, size_t P, int n, size_t count, int bits, int block,
                       const float* rsum, int bitsOut, int blockOut, unsigned flags, uint8_t* want,
                       int* ndirect, int* nfall) {
  static float r[ZPP_QUANT_MAX_BLOCK];
  static double t[ZPP_QUANT_MAX_BLOCK], y[ZPP_QUANT_MAX_BLOCK];
  const double u = 0x1p-24;
  const size_t dataOff = zppQuantDataOffset(count, block),
               escOff = zppQuantEscOffset(count, bits, block);
  const size_t nb = (count + (size_t)blockOut - 1) / (size_t)blockOut;
  float* tile = xmalloc(count * sizeof(float));
  char* direct = xmalloc(nb);
  float* scales = xmalloc(nb * sizeof(float));
  int* qs = xmalloc(count * sizeof(int));
  memcpy(tile, rsum, count * sizeof(float));
  long bad = 0;
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * (size_t)blockOut,
           len = count - lo < (size_t)blockOut ? count - lo : (size_t)blockOut;
    int ok = (flags & ZPP_QUANT_ROTATE) && blockOut == block && len == (size_t)block;
    for (int k = 0; k < n && ok; k++) {
      const uint8_t* seg = segs + (size_t)k * P;
      ok = specRotated(seg, count, block, b);
      const uint8_t* tab = seg + escOff + (lo / ZPP_QUANT_ESC_GROUP) * ZPP_QUANT_ESC_TABLE_BYTES;
      size_t base = lo / ZPP_QUANT_ESC_GROUP * ZPP_QUANT_ESC_GROUP;
      for (int j = 0; j < ZPP_QUANT_ESC_SLOTS && ok; j++) {
        unsigned idx = zppQuantEscIndex(tab, j);
        if (idx == ZPP_QUANT_ESC_EMPTY) break;
        ok = base + idx < lo || base + idx >= lo + len;
      }
    }
    double A = ok ? blockSums(segs, P, n, dataOff, bits, b, lo, len, r, y, t) : 0.0;
    float a = 0.0f;
    for (size_t j = 0; j < len && ok; j++) {
      ok = isfinite(r[j]);
      a = fmaxf(a, fabsf(r[j]));
    }
    direct[b] = (char)ok;
    if (!ok) {
      ++*nfall;
      continue;
    }
    ++*ndirect;
    for (size_t j = 0; j < len; j++) tile[lo + j] = 0.0f;
    /* w = r, quantized as a plain block: scale a / Q, q = rne((r p) inv). */
    const int Q = qtQmax(bitsOut);
    const float p = a < 0x1p-64f ? 0x1p64f : 1.0f;
    const float sc = a / (float)Q, inv = a == 0.0f ? 0.0f : (float)Q / (a * p);
    A /= (double)len;
    scales[b] = sc;
    for (size_t j = 0; j < len; j++) {
      int q = a == 0.0f ? 0 : (int)nearbyintf((r[j] * p) * inv);
      q = q > Q ? Q : q < -Q ? -Q : q;
      qs[lo + j] = q;
      y[j] = (double)q * (double)sc;
    }
    qtExactInverse(y, len);
    const double bound =
        (n - 1) * u / (1 - (n - 1) * u) * A + sc / 2.0 + 0x1p-21 * Q * (double)sc + (Q + 1) * 0x1p-150;
    for (size_t j = 0; j < len; j++)
      if (!(fabs(y[j] - t[j]) <= bound + 0x1p-50 * (fabs(t[j]) + A))) bad++;
  }
  REQUIRE(zppQuantizeEx(tile, zppFloat32, count, bitsOut, blockOut, flags, want) == zppSuccess);
  /* The direct blocks overwrite their own scale and data. */
  const size_t dataOut = zppQuantDataOffset(count, blockOut);
  for (size_t b = 0; b < nb; b++) {
    if (!direct[b]) continue;
    memcpy(want + ZPP_QUANT_HEADER_BYTES + 4 * b, &scales[b], 4);
    for (size_t j = b * (size_t)blockOut; j < (b + 1) * (size_t)blockOut; j++)
      zppQuantSetQ(want + dataOut, bitsOut, j, qs[j]);
  }
  free(tile);
  free(direct);
  free(scales);
  free(qs);
  return bad;
}

/* The direct order's requantization of one case's segments against the
 * spec, for each output (bits, block, flags) of interest. */
static void checkDirect(const uint8_t* segs, size_t P, int n, size_t count, int bits, int block,
                        const float* rsum, const char* what, int* ndirect, int* nfall) {
  /* the same width, another one (int4 -> int2, the others -> int4), another block */
  const int outs[3][2] = {{bits, block}, {bits == 4 ? 2 : 4, block}, {bits, block == 64 ? 32 : 64}};
  for (int o = 0; o < 3; o++) {
    const int bo = outs[o][0], blo = outs[o][1];
    const size_t PO = zppQuantPackedSize(count, bo, blo);
    uint8_t* req = xmalloc(PO);
    uint8_t* want = xmalloc(PO);
    for (unsigned flags = 0; flags <= ZPP_QUANT_ROTATE; flags += ZPP_QUANT_ROTATE) {
      CHECK_MSG(zppQuantReduceRequantOrder(segs, P, n, count, bits, block, bo, blo, flags,
                                           ZPP_QUANT_SUM_ROTATED_DIRECT, req) == zppSuccess,
                "%s: direct requant -> int%d block %d flags %u", what, bo, blo, flags);
      long bad = specDirect(segs, P, n, count, bits, block, rsum, bo, blo, flags, want, ndirect, nfall);
      CHECK_MSG(bad == 0, "%s: direct order -> int%d block %d: %ld elements outside the bound", what,
                bo, blo, bad);
      size_t at = 0;
      while (at < PO && req[at] == want[at]) at++;
      CHECK_MSG(
          at == PO,
          "%s: direct requant -> int%d block %d flags %u differs from the spec at byte %zu of %zu",
          what, bo, blo, flags, at, PO);
    }
    free(req);
    free(want);
  }
}

/* One case: n inputs of count elements, input k rotated when k is even (or
 * every input when allRot); a huge value escapes in inputs 2, 6, ...;
 * specials 1: an Inf and a NaN in the last input; 2: ordinary data only
 * (Gaussian, no escape: the sums' one-pass path). */
static void checkCase(int n, size_t count, int bits, int block, zppDataType_t otype, int specials,
                      int allRot, zppTestRng_t* rng) {
  const size_t P = zppQuantPackedSize(count, bits, block);
  uint8_t* segs = xmalloc((size_t)n * P);
  uint8_t* req = xmalloc(P);
  uint8_t* want = xmalloc(P);
  float* x = xmalloc(count * sizeof(float));
  float* y = xmalloc(count * sizeof(float));
  float* sum = xmalloc(count * sizeof(float));
  double* exact = xmalloc(count * sizeof(double));
  double* absy = xmalloc(count * sizeof(double));
  char* out = xmalloc(count * 4);
  char* ref = xmalloc(count * 4);
  char what[128];
  snprintf(what, sizeof what, "n %d count %zu int%d block %d -> %s%s%s", n, count, bits, block,
           qtTypeName(otype),
           specials == 1   ? " with Inf/NaN"
           : specials == 2 ? " ordinary"
           : specials == 3 ? " zero and tiny blocks"
                           : "",
           allRot ? ", all rotated" : "");
  for (size_t i = 0; i < count; i++) sum[i] = 0.0f, exact[i] = 0.0, absy[i] = 0.0;
  for (int k = 0; k < n; k++) {
    fill(x, count, rng, specials != 2 && k % 3 == 1);
    if (specials == 1 && k == n - 1 && count > 10) {
      x[3] = INFINITY;
      x[count - 2] = NAN;
    }
    if (specials != 2 && k % 4 == 2 && count > 10) x[7 + (size_t)k] = 3e6f;
    if (specials == 3) /* block 1 zero, block 2 tiny (max |r| below 2^-64) */
      for (size_t i = (size_t)block; i < 3 * (size_t)block && i < count; i++)
        x[i] = i < 2 * (size_t)block ? 0.0f : x[i] * 1e-22f;
    REQUIRE(zppQuantizeEx(x, zppFloat32, count, bits, block,
                          allRot || k % 2 == 0 ? ZPP_QUANT_ROTATE : 0u,
                          segs + (size_t)k * P) == zppSuccess);
    REQUIRE(zppDequantizeEx(segs + (size_t)k * P, count, bits, block, y, zppFloat32) == zppSuccess);
    for (size_t i = 0; i < count; i++) {
      sum[i] = sum[i] + y[i]; /* the documented order */
      exact[i] += (double)y[i];
      absy[i] += fabs((double)y[i]);
    }
  }
  const float divisor = n > 2 ? (float)n : 1.0f;
  CHECK_MSG(zppDequantizeSumOrder(segs, P, n, count, bits, block, divisor, out, otype,
                                  ZPP_QUANT_SUM_SIMPLE) == zppSuccess,
            "%s: sum", what);
  for (size_t i = 0; i < count; i++) qtSet(ref, otype, i, sum[i] / divisor);
  CHECK_MSG(qtFirstDiff(out, ref, otype, count) == (size_t)-1, "%s: sum differs from the spec's order",
            what);
  /* The fp32 sum against the exact sum of the decoded inputs. */
  const double u = 0x1p-24, g = (n - 1) * u / (1 - (n - 1) * u);
  long bad = 0;
  for (size_t i = 0; i < count; i++) {
    if (specials == 1 && count > 10 && (i == 3 || i == count - 2)) {
      CHECK_MSG(isnan(sum[i]) && isnan(qtGet(out, otype, i)), "%s: element %zu not NaN", what, i);
      continue;
    }
    if (!(fabs((double)sum[i] - exact[i]) <= g * absy[i])) bad++;
  }
  CHECK_MSG(bad == 0, "%s: %ld sums outside gamma_{n-1} sum |y|", what, bad);
  for (unsigned flags = 0; flags <= ZPP_QUANT_ROTATE; flags += ZPP_QUANT_ROTATE) {
    CHECK_MSG(zppQuantReduceRequantOrder(segs, P, n, count, bits, block, bits, block, flags,
                                         ZPP_QUANT_SUM_SIMPLE, req) == zppSuccess,
              "%s: requant flags %u", what, flags);
    REQUIRE(zppQuantizeEx(sum, zppFloat32, count, bits, block, flags, want) == zppSuccess);
    CHECK_MSG(memcmp(req, want, P) == 0, "%s: requant (flags %u) differs from quantizing the sums",
              what, flags);
  }
  /* The rotated-domain order: the spec, bit for bit, and its bound. */
  float* rsum = xmalloc(count * sizeof(float));
  int nrot = 0;
  bad = specRotatedDomain(segs, P, n, count, bits, block, sum, rsum, &nrot);
  CHECK_MSG(bad == 0, "%s: rotated-domain order: %ld sums outside the bound", what, bad);
  CHECK_MSG(allRot == 0 || n == 1 || count < 4 * (size_t)block || nrot > 0,
            "%s: no block in the rotated domain", what);
  CHECK_MSG(zppDequantizeSumOrder(segs, P, n, count, bits, block, divisor, out, otype,
                                  ZPP_QUANT_SUM_ROTATED_DOMAIN) == zppSuccess,
            "%s: rotated-domain sum", what);
  for (size_t i = 0; i < count; i++) qtSet(ref, otype, i, rsum[i] / divisor);
  CHECK_MSG(qtFirstDiff(out, ref, otype, count) == (size_t)-1,
            "%s: rotated-domain sum differs from the spec (first at %zu)", what,
            qtFirstDiff(out, ref, otype, count));
  for (unsigned flags = 0; flags <= ZPP_QUANT_ROTATE; flags += ZPP_QUANT_ROTATE) {
    CHECK_MSG(zppQuantReduceRequantOrder(segs, P, n, count, bits, block, bits, block, flags,
                                         ZPP_QUANT_SUM_ROTATED_DOMAIN, req) == zppSuccess,
              "%s: rotated-domain requant flags %u", what, flags);
    REQUIRE(zppQuantizeEx(rsum, zppFloat32, count, bits, block, flags, want) == zppSuccess);
    CHECK_MSG(memcmp(req, want, P) == 0,
              "%s: rotated-domain requant (flags %u) differs from quantizing the sums", what, flags);
  }
  /* The direct order: its sums are the rotated domain's; its requantization
   * the spec's. */
  CHECK_MSG(zppDequantizeSumOrder(segs, P, n, count, bits, block, divisor, out, otype,
                                  ZPP_QUANT_SUM_ROTATED_DIRECT) == zppSuccess,
            "%s: direct-order sum", what);
  for (size_t i = 0; i < count; i++) qtSet(ref, otype, i, rsum[i] / divisor);
  CHECK_MSG(qtFirstDiff(out, ref, otype, count) == (size_t)-1,
            "%s: direct-order sum differs from the rotated domain's", what);
  const int d0 = gDirect, f0 = gFall;
  checkDirect(segs, P, n, count, bits, block, rsum, what, &gDirect, &gFall);
  /* An escape in input 2 (block 0) beside ordinary blocks: one group holds
   * direct and fallback blocks. */
  CHECK_MSG(!(allRot && n >= 3 && count >= 4096 && specials != 2) || (gDirect > d0 && gFall > f0),
            "%s: no group with both direct and fallback blocks", what);
  /* The Ex functions: the order qgZ uses (ZPP_QUANT_SUM_QGZ), bit for bit. */
  CHECK_MSG(zppDequantizeSumEx(segs, P, n, count, bits, block, divisor, out, otype) == zppSuccess,
            "%s: Ex sum", what);
  for (size_t i = 0; i < count; i++)
    qtSet(ref, otype, i, (ZPP_QUANT_SUM_QGZ == ZPP_QUANT_SUM_SIMPLE ? sum : rsum)[i] / divisor);
  CHECK_MSG(qtFirstDiff(out, ref, otype, count) == (size_t)-1, "%s: Ex sum is not qgZ's order", what);
  REQUIRE(zppQuantReduceRequantEx(segs, P, n, count, bits, block, bits, block, ZPP_QUANT_ROTATE, req) ==
          zppSuccess);
  if (ZPP_QUANT_SUM_QGZ == ZPP_QUANT_SUM_ROTATED_DIRECT) {
    int nd = 0, nf = 0;
    (void)specDirect(segs, P, n, count, bits, block, rsum, bits, block, ZPP_QUANT_ROTATE, want, &nd,
                     &nf);
  } else {
    REQUIRE(zppQuantizeEx(ZPP_QUANT_SUM_QGZ == ZPP_QUANT_SUM_SIMPLE ? sum : rsum, zppFloat32, count,
                          bits, block, ZPP_QUANT_ROTATE, want) == zppSuccess);
  }
  CHECK_MSG(memcmp(req, want, P) == 0, "%s: Ex requant is not qgZ's order", what);
  free(rsum);
  free(segs);
  free(req);
  free(want);
  free(x);
  free(y);
  free(sum);
  free(exact);
  free(absy);
  free(out);
  free(ref);
}

static void checkArguments(void) {
  const size_t count = 100, P = zppQuantPackedSize(count, 8, 64);
  uint8_t* segs = xmalloc(2 * P + P);
  float x[100], out[100];
  for (int i = 0; i < 100; i++) x[i] = (float)i;
  REQUIRE(zppQuantizeEx(x, zppFloat32, count, 8, 64, ZPP_QUANT_ROTATE, segs) == zppSuccess);
  REQUIRE(zppQuantizeEx(x, zppFloat32, count, 8, 64, 0, segs + P) == zppSuccess);
  uint8_t* o = segs + 2 * P;
  CHECK(zppDequantizeSumEx(segs, P, 0, count, 8, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(NULL, P, 2, count, 8, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P - 1, 2, count, 8, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 0.0f, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, NAN, out, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 1.0f, NULL, zppFloat32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 1.0f, out, zppInt32) == zppInvalidArgument);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 5, 64, 1.0f, out, zppFloat32) == zppInvalidArgument);
  /* The header must match what the caller says: another count is refused. */
  CHECK(zppDequantizeSumEx(segs, P, 2, count - 1, 8, 64, 1.0f, out, zppFloat32) != zppSuccess);
  CHECK(zppQuantReduceRequantEx(segs, P, 2, count, 8, 64, 8, 64, ZPP_QUANT_ROTATE, NULL) ==
        zppInvalidArgument);
  CHECK(zppQuantReduceRequantEx(segs, P, 2, count, 8, 64, 8, 64, ZPP_QUANT_ROTATE, segs + P) ==
        zppInvalidArgument);
  CHECK(zppQuantReduceRequantEx(segs, P, 2, count, 8, 64, 8, 64, ZPP_QUANT_ROTATE, o) == zppSuccess);
  CHECK(zppDequantizeSumEx(segs, P, 2, count, 8, 64, 2.0f, out, zppFloat32) == zppSuccess);
  free(segs);
}

/* Sums that overflow: every input's block has w_2 = w_3 = W (x_j = D_j
 * (-1)^(j bit 1) 2W/B for even j, 0 for odd), so r_2 = r_3 = n W is Inf
 * for n >= 3, the first stage makes Inf - Inf at element 3, and the second
 * subtracts that NaN from a number (element 1): the NaNs and their signs
 * must be the spec's, bit for bit. */
static void checkOverflow(int bits, int block) {
  const int n = 4;
  const size_t count = 2 * (size_t)block, P = zppQuantPackedSize(count, bits, block);
  uint8_t* segs = xmalloc((size_t)n * P);
  static float x[2 * ZPP_QUANT_MAX_BLOCK], out[2 * ZPP_QUANT_MAX_BLOCK], ref[2 * ZPP_QUANT_MAX_BLOCK],
      want[2 * ZPP_QUANT_MAX_BLOCK];
  const float W = 0x1.8p126f;
  for (size_t i = 0; i < count; i++) {
    size_t j = i % (size_t)block;
    float v = j % 2 == 0 ? ((j & 2) ? -2.0f : 2.0f) * W / (float)block : 0.0f;
    x[i] = zppQuantRotSignMask(j) ? -v : v;
  }
  for (int k = 0; k < n; k++)
    REQUIRE(zppQuantizeEx(x, zppFloat32, count, bits, block, ZPP_QUANT_ROTATE, segs + (size_t)k * P) ==
            zppSuccess);
  const size_t dataOff = zppQuantDataOffset(count, block);
  int nanSeen = 0;
  for (size_t b = 0; b < 2; b++) {
    CHECK_MSG(specRotated(segs, count, block, b), "overflow int%d block %d: block %zu not rotated",
              bits, block, b);
    float* r = want + b * (size_t)block;
    for (int k = 0; k < n; k++) {
      const uint8_t* seg = segs + (size_t)k * P;
      float s = zppQuantLoadScale(seg + ZPP_QUANT_HEADER_BYTES, b);
      for (size_t j = 0; j < (size_t)block; j++) {
        float v = (float)zppQuantGetQ(seg + dataOff, bits, b * (size_t)block + j) * s;
        r[j] = k == 0 ? 0.0f + v : r[j] + v;
      }
    }
    zppQuantRotHadamardRef(r, (size_t)block);
    const float invB = 1.0f / (float)block;
    for (size_t j = 0; j < (size_t)block; j++) {
      r[j] = zppF32FromBits(zppF32Bits(r[j] * invB) ^ zppQuantRotSignMask(j));
      nanSeen += isnan(r[j]);
    }
  }
  CHECK_MSG(nanSeen > 0, "overflow int%d block %d: the sums made no NaN", bits, block);
  /* The direct order falls back where r is not finite. */
  int nd = 0, nf = 0;
  checkDirect(segs, P, n, count, bits, block, want, "overflow", &nd, &nf);
  CHECK_MSG(nd == 0 && nf > 0, "overflow int%d block %d: %d blocks direct, %d not", bits, block, nd,
            nf);
  /* Every output type and kind of divisor (none, 2^k, other). */
  static const float kDiv[4] = {1.0f, 4.0f, 8.0f, 3.0f};
  for (int ti = 0; ti < 3; ti++)
    for (int di = 0; di < 4; di++) {
      CHECK(zppDequantizeSumOrder(segs, P, n, count, bits, block, kDiv[di], out, kTypes[ti],
                                  ZPP_QUANT_SUM_ROTATED_DOMAIN) == zppSuccess);
      for (size_t i = 0; i < count; i++) qtSet(ref, kTypes[ti], i, want[i] / kDiv[di]);
      size_t diff = qtFirstDiff(out, ref, kTypes[ti], count);
      CHECK_MSG(diff == (size_t)-1, "overflow int%d block %d -> %s / %g: differs from the spec at %zu",
                bits, block, qtTypeName(kTypes[ti]), (double)kDiv[di], diff);
    }
  free(segs);
}

static void runAll(zppTestRng_t* rng) {
  static const size_t counts[] = {1, 63, 64, 1001, 4096, 5000, 8193};
  for (int n = 1; n <= 8; n++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (int bits = 8; bits >= 2; bits /= 2)
        for (int ti = 0; ti < 3; ti++) {
          int block = bits == 8 ? 256 : 64;
          checkCase(n, counts[c], bits, block, kTypes[ti], 0, ti != 1, rng);
          if (counts[c] > 10 && ti == 0) {
            checkCase(n, counts[c], bits, 32, kTypes[ti], 1, 1, rng);
            checkCase(n, counts[c], bits, 32, kTypes[ti], 1, 0, rng);
          }
        }
  /* Ordinary data, every divisor kind (n = 4, 8: 2^k; 3, 5..7: others). */
  for (int n = 1; n <= 8; n++)
    for (int ti = 0; ti < 3; ti++) {
      checkCase(n, 8193, 4, 64, kTypes[ti], 2, 1, rng);
      checkCase(n, 8193, 8, 256, kTypes[ti], 2, 1, rng);
      checkCase(n, 8193, 2, 256, kTypes[ti], 2, 1, rng);
      checkCase(n, 4096 + 128, 4, 32, kTypes[ti], 2, 1, rng);
    }
  /* A zero block and a tiny one (the scaled path, p = 2^64). */
  for (int n = 1; n <= 4; n++)
    for (int bits = 8; bits >= 2; bits /= 2)
      for (int block = 32; block <= 256; block *= 2)
        checkCase(n, 4096 + 64, bits, block, zppFloat32, 3, 1, rng);
  /* The largest block: one inverse over 4096 elements. */
  for (int n = 2; n <= 8; n += 3) checkCase(n, 3 * 4096 + 5, 4, 4096, zppFloat32, 1, 1, rng);
  for (int bits = 8; bits >= 2; bits /= 2)
    for (int block = 32; block <= 256; block *= 2) checkOverflow(bits, block);
}

int main(void) {
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 2727);
  checkArguments();
  /* Every implementation this CPU runs: the sums' vector code must be the
   * spec's, bit for bit, as the scalar code is. */
  const char* kImpls[QT_MAX_IMPLS];
  const int nimpl = qtRotImpls(kImpls);
  int ran = 0;
  for (int i = 0; i < nimpl; i++) {
    qtUseRot(kImpls[i]);
    printf("test_quant_rotate_reduce: implementation %s\n", kImpls[i]);
    gDirect = gFall = 0;
    runAll(&rng);
    printf("test_quant_rotate_reduce: %s: direct order: %d blocks direct, %d fallback\n", kImpls[i],
           gDirect, gFall);
    CHECK(gDirect > 0 && gFall > 0);
    ran++;
  }
  CHECK(ran >= 1);
  return zppTestExit("test_quant_rotate_reduce");
}
