/* ZeRO++ test helpers; see zeropp_testlib.h. */
#include "zeropp_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/quant_impl.h"
#include "quant_kernels/zpp_quant.h"
#include "../quant/quant_testlib.h"
#include "testutil.h"

double ztGet(const void* buf, zppDataType_t t, size_t i) { return qtGet(buf, t, i); }
void ztSet(void* buf, zppDataType_t t, size_t i, float v) { qtSet(buf, t, i, v); }
const char* ztTypeName(zppDataType_t t) { return qtTypeName(t); }

long ztFirstDiff(const void* a, const void* b, zppDataType_t t, size_t count) {
  size_t i = qtFirstDiff(a, b, t, count);
  return i == (size_t)-1 ? -1 : (long)i;
}

void ztFill(void* buf, zppDataType_t t, size_t count, int seed, int rank) {
  zppTestRng_t rng;
  zppTestRngSeed(&rng, (uint64_t)seed * 1000003u + (uint64_t)rank * 7919u + 17u);
  float scale = 1.0f;
  for (size_t i = 0; i < count; i++) {
    if (i % 32 == 0) scale = ldexpf(1.0f, (int)(zppTestRngNext(&rng) % 13) - 8);
    double v = (zppTestRngNext(&rng) & 1) ? zppTestRngNormal(&rng) : zppTestRngUniform(&rng, -2, 2);
    qtSet(buf, t, i, (float)(v * scale));
  }
}

int ztBlock(int bits) { return zppQuantDefaultBlock(bits); }

/* The codec's largest level Q (docs/codecs.md). */
static double ztQ(int bits) { return bits == 8 ? 127.0 : bits == 4 ? 7.0 : 1.0; }

size_t ztChunkElems(zppDataType_t t, int block) { return ztChunkElemsFor(ZT_CHUNK_BYTES, t, block); }

size_t ztChunkElemsFor(size_t bytes, zppDataType_t t, int block) {
  /* whole escape groups, as the library cuts (zppCollCutUnits) */
  size_t unit = (size_t)block > ZPP_QUANT_ESC_GROUP ? (size_t)block : ZPP_QUANT_ESC_GROUP;
  size_t e = bytes / zppTypeSize(t);
  e -= e % unit;
  return e < unit ? unit : e;
}

size_t ztPackedInChunks(size_t count, int bits, int block, size_t ce) {
  size_t total = 0;
  for (size_t off = 0; off < count; off += ce)
    total += zppQuantPackedSize(count - off < ce ? count - off : ce, bits, block);
  return total;
}

size_t ztQwzShardPacked(size_t count, zppDataType_t t, int bits, int block) {
  return ztPackedInChunks(count, bits, block, ztChunkElems(t, block));
}

size_t ztQgzRunBytes(size_t rc, zppDataType_t t, int bits, int block) {
  /* Pieces of a tensor are its chunks: the same cut as a qwZ shard. */
  return ztQwzShardPacked(rc, t, bits, block);
}

unsigned ztQuantFlags(void) {
  const char* v = getenv("ZPP_QUANT_ROTATE");
  return v != NULL && strcmp(v, "1") == 0 ? ZPP_QUANT_ROTATE : 0u;
}

/* One quantization's error for a finite input in a block with scale s,
 * decoded in fp32 (docs/codecs.md; no output-type term). */
static double stageErr(double s, int bits);

/* Per element, the bound of a segment's fp32 decode against its input (in,
 * count elements of t), by zpp_quant.h: 0 for an escape (exact in fp32)
 * and a marked element (non-finite: NaN, not bounded), the plain stage
 * bound in a block stored plain (scale sign bit set, or an unrotated
 * segment), else the rotated bound E with M the block's largest non-escaped
 * magnitude (candidates that found no slot included). */
static void segErr(const void* in, zppDataType_t t, size_t count, int bits, int block,
                   const uint8_t* seg, double* err) {
  char* marks = malloc(count + 1);
  REQUIRE(marks != NULL);
  qtExpectEscapes(in, t, count, bits, block, marks);
  const int rotated = (qtReadHeader(seg).reserved & ZPP_QUANT_FLAG_ROTATED) != 0;
  const double Q = ztQ(bits);
  int L = 0;
  while ((1 << L) < block) L++;
  for (size_t lo = 0; lo < count; lo += (size_t)block) {
    size_t hi = lo + (size_t)block < count ? lo + (size_t)block : count;
    float sf = qtScale(seg, count, block, lo / (size_t)block);
    double s = fabs((double)sf), M = 0;
    for (size_t i = lo; i < hi; i++)
      if ((marks[i] == 0 || marks[i] == 2) && fabs(qtGet(in, t, i)) > M) M = fabs(qtGet(in, t, i));
    double E = !rotated || signbit(sf) ? stageErr(s, bits)
                                       : s / 2 + ldexp(Q * s, -21) + ldexp((double)block * M, -22) +
                                             ldexp((double)L * Q * s, -23) + (Q + 3) * 0x1p-150;
    for (size_t i = lo; i < hi; i++) err[i] = marks[i] == 1 || marks[i] == 3 ? 0.0 : E;
  }
  free(marks);
}

/* Rounding an fp32 result to the output type t adds at most ztRoundRel(t)
 * times its magnitude plus ztRoundAbs(t) (half the smallest subnormal):
 * 0 for fp32, which is not rounded again. */
double ztRoundRel(zppDataType_t t) {
  return t == zppFloat32 ? 0.0 : t == zppFloat16 ? 0x1p-11 : 0x1p-8;
}

double ztRoundAbs(zppDataType_t t) {
  return t == zppFloat32 ? 0.0 : t == zppFloat16 ? 0x1p-25 : 0x1p-134;
}

int ztQwzExpect(const void* shard, zppDataType_t t, size_t count, int bits, int block, void* out) {
  size_t size = zppQuantPackedSize(count, bits, block);
  if (ztQuantFlags()) {
    uint8_t* seg = malloc(size);
    double* err = malloc((count + 1) * sizeof(double));
    REQUIRE(seg != NULL && err != NULL);
    REQUIRE(zppQuantizeEx(shard, t, count, bits, block, ztQuantFlags(), seg) == zppSuccess);
    REQUIRE(zppDequantizeEx(seg, count, bits, block, out, t) == zppSuccess);
    segErr(shard, t, count, bits, block, seg, err);
    const double uT = ztRoundRel(t);
    const double mT = ztRoundAbs(t);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
      double x = qtGet(shard, t, i), y = qtGet(out, t, i);
      if (!isfinite(x)) continue;
      if (!(fabs(y - x) <= err[i] + uT * (fabs(x) + err[i]) + mT) && bad++ == 0)
        fprintf(stderr, "rotated qwZ %s int%d: element %zu: %g for %g, bound %g\n", qtTypeName(t), bits,
                i, y, x, err[i]);
    }
    free(seg);
    free(err);
    return bad;
  }
  uint8_t* seg = malloc(size);
  REQUIRE(seg != NULL);
  REQUIRE(zppQuantize(shard, t, count, bits, block, seg) == zppSuccess);
  REQUIRE(zppDequantize(seg, count, bits, block, out, t) == zppSuccess);
  int bad = 0;
  for (size_t i = 0; i < count; i++) {
    double x = qtGet(shard, t, i), y = qtGet(out, t, i);
    if (!isfinite(x)) continue;
    double s = qtScale(seg, count, block, i / (size_t)block);
    if (!(fabs(y - x) <= qtBound(x, s, bits, t))) bad++;
  }
  free(seg);
  return bad;
}

/* fp32 summation of k terms: the relative factor of the standard bound. */
static double gammaK(int k) {
  double u = 0x1p-24;
  return (double)k * u / (1.0 - (double)k * u);
}

static double stageErr(double s, int bits) {
  double Q = ztQ(bits);
  return s / 2 + 0x1p-21 * Q * s + (Q + 1) * 0x1p-150;
}

/* The bound of one stage's fp32 sum of n segments (zpp_quant.h,
 * "Reductions of rotated segments", in the order qgZ uses) against the
 * exact sum of the values the segments stand for: src[k] (type st, count
 * len) is what segment k encodes, e[k * len + i] its decode bound (segErr),
 * y its decode, w the fp32 sum the stage computed. Blocks that every input
 * stores rotated are summed in the rotated domain when qgZ does so: each
 * input within its block's E everywhere (the noise at its escaped elements
 * stays in the sum), plus F and the escape additions; other blocks: the
 * simple order, gamma_{n-1} sum |y|. */
static void stageSumErr(const uint8_t* segs, size_t P, int n, const void* const* src, zppDataType_t st,
                        const double* e, const float* y, const float* w, size_t len, int bits,
                        int block, double* S) {
  const double Q = ztQ(bits);
  int L = 0;
  while ((1 << L) < block) L++;
  char* marks = malloc((size_t)n * len + 1);
  REQUIRE(marks != NULL);
  for (int k = 0; k < n; k++) qtExpectEscapes(src[k], st, len, bits, block, marks + (size_t)k * len);
  for (size_t lo = 0; lo < len; lo += (size_t)block) {
    size_t hi = lo + (size_t)block < len ? lo + (size_t)block : len;
    int allRot = ZPP_QUANT_SUM_QGZ != ZPP_QUANT_SUM_SIMPLE && hi - lo == (size_t)block;
    double sumQs = 0, sumE = 0;
    for (int k = 0; k < n && allRot; k++) {
      const uint8_t* seg = segs + (size_t)k * P;
      float sf = qtScale(seg, len, block, lo / (size_t)block);
      allRot = (qtReadHeader(seg).reserved & ZPP_QUANT_FLAG_ROTATED) && !signbit(sf) && isfinite(sf);
      sumQs += Q * (double)sf;
      double Eb = 0;
      for (size_t i = lo; i < hi; i++)
        if (e[(size_t)k * len + i] > Eb) Eb = e[(size_t)k * len + i];
      sumE += Eb;
    }
    if (!allRot) {
      for (size_t i = lo; i < hi; i++) {
        double err = 0, abs = 0;
        for (int k = 0; k < n; k++) {
          err += e[(size_t)k * len + i];
          abs += fabs((double)y[(size_t)k * len + i]);
        }
        S[i] = err + gammaK(n - 1) * abs;
      }
      continue;
    }
    /* |v| <= Q s per input, so A and R are at most (1 + gamma) sum Q s. */
    const double F =
        (gammaK(n - 1) + 0x1p-24 * L * (1 + 0x1p-20)) * (1 + gammaK(n - 1)) * sumQs + 0x1p-150;
    for (size_t i = lo; i < hi; i++) {
      int m = 0;
      double ea = 0;
      for (int k = 0; k < n; k++)
        if (marks[(size_t)k * len + i] == 1) m++, ea += fabs(qtGet(src[k], st, i));
      double z = (fabs((double)w[i]) + 2 * ea) * 1.001; /* above |z_i| */
      S[i] = sumE + (1 + gammaK(m)) * F + gammaK(m) * (z + ea);
    }
  }
  free(marks);
}

/* 1 when some input of the n segments has an escape in [lo, lo + block). */
static int anyEscape(const uint8_t* segs, size_t P, int n, size_t len, int bits, int block, size_t lo) {
  const size_t g = lo / ZPP_QUANT_ESC_GROUP, base = g * ZPP_QUANT_ESC_GROUP;
  const size_t off = zppQuantEscOffset(len, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES;
  for (int k = 0; k < n; k++)
    for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
      unsigned idx = zppQuantEscIndex(segs + (size_t)k * P + off, j);
      if (idx == ZPP_QUANT_ESC_EMPTY) break;
      if (base + idx >= lo && base + idx < lo + (size_t)block) return 1;
    }
  return 0;
}

/* The direct order (ZPP_QUANT_SUM_ROTATED_DIRECT): a block of the
 * requantized node sum rr taken from r (every input rotated, no escape,
 * rr's block rotated, the sums w finite) decodes within, of w,
 * s/2 + 2^-21 Q s (quantizing r) + 2^-23 L Q s (its decode's inverse) +
 * 2^-24 L Q s (1 + 2^-19) (the inverse that made w from r, R <= Q s (1 +
 * 2^-23)) + (Q + 4) 2^-150, on every element (no escape, no exact one):
 * replaces segErr's bound there, which assumed zppQuantizeEx of w. */
static void directErr(const uint8_t* ns, size_t P, int n, const uint8_t* rr, const float* w, size_t len,
                      int bits, int block, double* er) {
  const double Q = ztQ(bits);
  int L = 0;
  while ((1 << L) < block) L++;
  for (size_t lo = 0; lo + (size_t)block <= len; lo += (size_t)block) {
    const size_t b = lo / (size_t)block;
    int direct = (qtReadHeader(rr).reserved & ZPP_QUANT_FLAG_ROTATED) != 0;
    for (int k = 0; k < n && direct; k++) {
      float sf = qtScale(ns + (size_t)k * P, len, block, b);
      direct = (qtReadHeader(ns + (size_t)k * P).reserved & ZPP_QUANT_FLAG_ROTATED) && !signbit(sf) &&
               isfinite(sf);
    }
    float so = qtScale(rr, len, block, b);
    direct = direct && !signbit(so) && isfinite(so) && !anyEscape(ns, P, n, len, bits, block, lo);
    for (size_t i = lo; i < lo + (size_t)block && direct; i++) direct = isfinite(w[i]);
    if (!direct) continue;
    const double s = (double)so;
    const double E = s / 2 + ldexp(Q * s, -21) + ldexp((double)L * Q * s, -23) +
                     ldexp((double)L * Q * s, -24) * (1 + 0x1p-19) + (Q + 4) * 0x1p-150;
    for (size_t i = lo; i < lo + (size_t)block; i++) er[i] = E;
  }
}

/* ztQgzExpect under rotation: the library's order (zpp_quant.h,
 * "Reductions of rotated segments", ZPP_QUANT_SUM_QGZ), with the bound of
 * each decode (segErr) and of each stage's fp32 sum (stageSumErr). */
static void qgzExpectRot(const int* byNode, int N, int L, const void* const* inputs, zppDataType_t t,
                         size_t rc, int p, int W, int bits, int block, zppRedOp_t op, size_t chunkBytes,
                         void* out, double* bound, double* target) {
  const unsigned F = ztQuantFlags();
  const size_t ts = zppTypeSize(t), ce = ztChunkElemsFor(chunkBytes, t, block);
  const float d = op == zppAvg ? (float)W : 1.0f;
  const double uT = ztRoundRel(t);
  const double mT = ztRoundAbs(t);
  const int twoStage = N > 1 && L > 1;
  for (size_t off = 0; off < rc; off += ce) {
    size_t len = rc - off < ce ? rc - off : ce;
    size_t P = zppQuantPackedSize(len, bits, block);
    uint8_t* segs = malloc((size_t)W * P);
    uint8_t* rr = malloc((size_t)N * P);
    float* y = malloc((size_t)W * len * sizeof(float));  /* inputs decoded */
    float* yr = malloc((size_t)N * len * sizeof(float)); /* node sums decoded */
    float* vn = malloc((size_t)N * len * sizeof(float)); /* node sums, fp32 */
    float* v32 = malloc(len * sizeof(float));
    double* e = malloc((size_t)W * len * sizeof(double));
    double* er = malloc((size_t)N * len * sizeof(double));
    double* S = malloc((size_t)(N + 1) * len * sizeof(double));
    const void** src = malloc((size_t)W * sizeof(void*));
    REQUIRE(segs && rr && y && yr && vn && v32 && e && er && S && src);
    for (int k = 0; k < W; k++) {
      const char* in = (const char*)inputs[byNode[k]] + ((size_t)p * rc + off) * ts;
      src[k] = in;
      REQUIRE(zppQuantizeEx(in, t, len, bits, block, F, segs + (size_t)k * P) == zppSuccess);
      REQUIRE(zppDequantizeEx(segs + (size_t)k * P, len, bits, block, y + (size_t)k * len,
                              zppFloat32) == zppSuccess);
      segErr(in, t, len, bits, block, segs + (size_t)k * P, e + (size_t)k * len);
    }
    const uint8_t* last = segs;
    int nLast = W;
    if (twoStage) {
      for (int n = 0; n < N; n++) {
        const uint8_t* ns = segs + (size_t)n * L * P;
        REQUIRE(zppQuantReduceRequantEx(ns, P, L, len, bits, block, bits, block, F,
                                        rr + (size_t)n * P) == zppSuccess);
        /* The node's fp32 sum in the library's order: the requantized input
         * (the same sums, checked against the spec in test_quant_rotate_reduce). */
        float* w = vn + (size_t)n * len;
        REQUIRE(zppDequantizeSumEx(ns, P, L, len, bits, block, 1.0f, w, zppFloat32) == zppSuccess);
        stageSumErr(ns, P, L, src + (size_t)n * L, t, e + (size_t)n * L * len, y + (size_t)n * L * len,
                    w, len, bits, block, S + (size_t)(n + 1) * len);
        segErr(w, zppFloat32, len, bits, block, rr + (size_t)n * P, er + (size_t)n * len);
        if (ZPP_QUANT_SUM_QGZ == ZPP_QUANT_SUM_ROTATED_DIRECT && F == ZPP_QUANT_ROTATE)
          directErr(ns, P, L, rr + (size_t)n * P, w, len, bits, block, er + (size_t)n * len);
        REQUIRE(zppDequantizeEx(rr + (size_t)n * P, len, bits, block, yr + (size_t)n * len,
                                zppFloat32) == zppSuccess);
      }
      last = rr;
      nLast = N;
    }
    REQUIRE(zppDequantizeSumEx(last, P, nLast, len, bits, block, d, (char*)out + off * ts, t) ==
            zppSuccess);
    /* The last stage: its fp32 sum (before the division) and its bound. */
    REQUIRE(zppDequantizeSumEx(last, P, nLast, len, bits, block, 1.0f, v32, zppFloat32) == zppSuccess);
    if (twoStage) {
      const void* nsrc[64];
      REQUIRE(N <= 64);
      for (int n = 0; n < N; n++) nsrc[n] = vn + (size_t)n * len;
      stageSumErr(rr, P, N, nsrc, zppFloat32, er, yr, v32, len, bits, block, S);
    } else {
      stageSumErr(segs, P, W, src, t, e, y, v32, len, bits, block, S);
    }
    REQUIRE(zppDequantizeSumEx(last, P, nLast, len, bits, block, d, v32, zppFloat32) == zppSuccess);
    for (size_t i = 0; i < len; i++) {
      double x = 0, err = S[i];
      for (int k = 0; k < W; k++) x += qtGet(inputs[byNode[k]], t, (size_t)p * rc + off + i);
      if (twoStage)
        for (int n = 0; n < N; n++) err += S[(size_t)(n + 1) * len + i];
      double v = fabs((double)v32[i]);
      double div = d != 1.0f ? 0x1p-24 * v * (1 + 0x1p-23) + 0x1p-150 : 0.0;
      bound[off + i] = err / (double)d + div + uT * v + mT;
      target[off + i] = x / (double)d;
    }
    free(segs);
    free(rr);
    free(y);
    free(yr);
    free(vn);
    free(v32);
    free(e);
    free(er);
    free(S);
    free(src);
  }
}

/* The ranks in node order, each node's in rank order: the order in which
 * the library sums (nodes numbered by their lowest rank, as the topology
 * numbers them, whatever the placement). Returns them (malloc'ed) and the
 * node count. */
static int* ranksByNode(int W, const int* nodeOf, int* nodes) {
  int N = 0;
  for (int r = 0; r < W; r++)
    if (nodeOf[r] + 1 > N) N = nodeOf[r] + 1;
  int* byNode = malloc((size_t)W * sizeof(int));
  REQUIRE(byNode != NULL);
  int filled = 0;
  for (int n = 0; n < N; n++)
    for (int r = 0; r < W; r++)
      if (nodeOf[r] == n) byNode[filled++] = r;
  REQUIRE(filled == W && W % N == 0);
  *nodes = N;
  return byNode;
}

/* Adds the model's escapes of one segment's input x (len elements of t) to
 * the counts, and marks the blocks that overflowed. */
static void modelSegment(const void* x, zppDataType_t t, size_t len, int bits, int block,
                         uint64_t* escapes, uint64_t* overflows, char* overflowed) {
  char* marks = malloc(len + 1);
  REQUIRE(marks != NULL);
  *overflows += (uint64_t)qtExpectEscapes(x, t, len, bits, block, marks);
  for (size_t i = 0; i < len; i++) {
    *escapes += marks[i] == 1;
    if (marks[i] == 2 && overflowed != NULL) {
      size_t lo = i / (size_t)block * (size_t)block;
      for (size_t j = lo; j < lo + (size_t)block && j < len; j++) overflowed[j] = 1;
    }
  }
  free(marks);
}

void ztQwzEscapeModel(const void* shard, zppDataType_t t, size_t count, int bits, int block,
                      uint64_t* escapes, uint64_t* overflows) {
  /* Pipeline pieces are whole escape groups: the same as one segment. */
  *escapes = *overflows = 0;
  modelSegment(shard, t, count, bits, block, escapes, overflows, NULL);
}

void ztQgzEscapeModel(const void* const* inputs, zppDataType_t t, size_t rc, int p, int W,
                      const int* nodeOf, int bits, int block, size_t chunkBytes, uint64_t* escapes,
                      uint64_t* overflows, char* overflowed) {
  int N;
  int* byNode = ranksByNode(W, nodeOf, &N);
  const int L = W / N;
  const size_t ts = zppTypeSize(t), ce = ztChunkElemsFor(chunkBytes, t, block);
  *escapes = *overflows = 0;
  if (overflowed != NULL) memset(overflowed, 0, rc);
  for (size_t off = 0; off < rc; off += ce) {
    size_t len = rc - off < ce ? rc - off : ce;
    size_t P = zppQuantPackedSize(len, bits, block);
    uint8_t* segs = malloc((size_t)W * P);
    float* v32 = malloc(len * sizeof(float) + 4);
    REQUIRE(segs && v32);
    for (int k = 0; k < W; k++) {
      const char* in = (const char*)inputs[byNode[k]] + ((size_t)p * rc + off) * ts;
      modelSegment(in, t, len, bits, block, escapes, overflows, overflowed ? overflowed + off : NULL);
      REQUIRE(zppQuantize(in, t, len, bits, block, segs + (size_t)k * P) == zppSuccess);
    }
    /* The requantization quantizes the fp32 sums byte for byte as
     * accumulate-then-quantize does (test_quant_reduce). */
    for (int n = 0; N > 1 && L > 1 && n < N; n++) {
      REQUIRE(zppDequantizeAccumulate(segs + (size_t)n * L * P, P, L, len, bits, block, v32, 0) ==
              zppSuccess);
      modelSegment(v32, zppFloat32, len, bits, block, escapes, overflows,
                   overflowed ? overflowed + off : NULL);
    }
    free(segs);
    free(v32);
  }
  free(byNode);
}

void ztQgzExpect(const void* const* inputs, zppDataType_t t, size_t rc, int p, int W, const int* nodeOf,
                 int bits, int block, zppRedOp_t op, size_t chunkBytes, void* out, double* bound,
                 double* target) {
  int N;
  int* byNode = ranksByNode(W, nodeOf, &N);
  const int L = W / N;
  if (ztQuantFlags()) {
    qgzExpectRot(byNode, N, L, inputs, t, rc, p, W, bits, block, op, chunkBytes, out, bound, target);
    free(byNode);
    return;
  }
  const size_t ts = zppTypeSize(t), ce = ztChunkElemsFor(chunkBytes, t, block);
  const float d = op == zppAvg ? (float)W : 1.0f;
  const double uT = ztRoundRel(t);
  const double mT = ztRoundAbs(t);
  const int twoStage = N > 1 && L > 1;
  for (size_t off = 0; off < rc; off += ce) {
    size_t len = rc - off < ce ? rc - off : ce;
    size_t P = zppQuantPackedSize(len, bits, block);
    uint8_t* segs = malloc((size_t)W * P);
    uint8_t* rr = malloc((size_t)N * P);
    float* v32 = malloc(len * sizeof(float));
    REQUIRE(segs && rr && v32);
    for (int k = 0; k < W; k++) {
      const char* in = (const char*)inputs[byNode[k]] + ((size_t)p * rc + off) * ts;
      REQUIRE(zppQuantize(in, t, len, bits, block, segs + (size_t)k * P) == zppSuccess);
    }
    const uint8_t* last = segs;
    int nLast = W;
    if (twoStage) {
      for (int n = 0; n < N; n++) {
        REQUIRE(zppQuantReduceRequant(segs + (size_t)n * L * P, P, L, len, bits, block, bits, block,
                                      rr + (size_t)n * P) == zppSuccess);
      }
      last = rr;
      nLast = N;
    }
    REQUIRE(zppDequantizeSum(last, P, nLast, len, bits, block, d, (char*)out + off * ts, t) ==
            zppSuccess);
    REQUIRE(zppDequantizeSum(last, P, nLast, len, bits, block, d, v32, zppFloat32) == zppSuccess);
    for (size_t i = 0; i < len; i++) {
      /* Each stage's error (0 for an escaped element; the scale's bound
       * covers it), and the fp32 sums' over their terms: one per input, one
       * more per input where the element escaped (zpp_quant.h). */
      size_t b = i / (size_t)block;
      double x = 0, e = 0, sumAbsY = 0;
      int terms = W;
      float esc;
      for (int k = 0; k < W; k++) {
        const uint8_t* seg = segs + (size_t)k * P;
        x += qtGet(inputs[byNode[k]], t, (size_t)p * rc + off + i);
        e += stageErr(qtScale(seg, len, block, b), bits);
        sumAbsY += fabs((double)qtElement(seg, len, bits, block, i));
        terms += qtEscaped(seg, len, bits, block, i, &esc);
      }
      if (twoStage) {
        double sumAbsR = 0;
        int termsR = N;
        for (int n = 0; n < N; n++) {
          const uint8_t* seg = rr + (size_t)n * P;
          double nodeAbsY = 0;
          int termsY = L;
          for (int j = 0; j < L; j++) {
            const uint8_t* in = segs + (size_t)(n * L + j) * P;
            nodeAbsY += fabs((double)qtElement(in, len, bits, block, i));
            termsY += qtEscaped(in, len, bits, block, i, &esc);
          }
          e += stageErr(qtScale(seg, len, block, b), bits) + gammaK(termsY - 1) * nodeAbsY;
          sumAbsR += fabs((double)qtElement(seg, len, bits, block, i));
          termsR += qtEscaped(seg, len, bits, block, i, &esc);
        }
        e += gammaK(termsR - 1) * sumAbsR;
      } else {
        e += gammaK(terms - 1) * sumAbsY;
      }
      double v = fabs((double)v32[i]);
      double div = d != 1.0f ? 0x1p-24 * v * (1 + 0x1p-23) + 0x1p-150 : 0.0;
      bound[off + i] = e / (double)d + div + uT * v + mT;
      target[off + i] = x / (double)d;
    }
    free(segs);
    free(rr);
    free(v32);
  }
  free(byNode);
}
