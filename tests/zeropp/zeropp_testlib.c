/* ZeRO++ test helpers; see zeropp_testlib.h. */
#include "zeropp_testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int ztBlock(int bits) {
  return bits == 4 ? ZPP_QUANT_DEFAULT_BLOCK_INT4 : ZPP_QUANT_DEFAULT_BLOCK_INT8;
}

size_t ztChunkElems(zppDataType_t t, int block) { return ztChunkElemsFor(ZT_CHUNK_BYTES, t, block); }

size_t ztChunkElemsFor(size_t bytes, zppDataType_t t, int block) {
  size_t e = bytes / zppTypeSize(t);
  e -= e % (size_t)block;
  return e < (size_t)block ? (size_t)block : e;
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

int ztQwzExpect(const void* shard, zppDataType_t t, size_t count, int bits, int block, void* out) {
  size_t size = zppQuantPackedSize(count, bits, block);
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

/* One quantization's error for a finite input in a block with scale s,
 * decoded in fp32 (docs/codecs.md; no output-type term). */
static double stageErr(double s, int bits) {
  double Q = bits == 8 ? 127.0 : 7.0;
  return s / 2 + 0x1p-21 * Q * s + (Q + 1) * 0x1p-150;
}

void ztQgzExpect(const void* const* inputs, zppDataType_t t, size_t rc, int p, int W, const int* nodeOf,
                 int bits, int block, zppRedOp_t op, size_t chunkBytes, void* out, double* bound,
                 double* target) {
  /* The ranks in node order, each node's in rank order: the order in which
   * the library sums (nodes numbered by their lowest rank, as the topology
   * numbers them, whatever the placement). */
  int N = 0;
  for (int r = 0; r < W; r++)
    if (nodeOf[r] + 1 > N) N = nodeOf[r] + 1;
  const int L = W / N;
  int* byNode = malloc((size_t)W * sizeof(int));
  REQUIRE(byNode != NULL);
  int filled = 0;
  for (int n = 0; n < N; n++)
    for (int r = 0; r < W; r++)
      if (nodeOf[r] == n) byNode[filled++] = r;
  REQUIRE(filled == W && N * L == W);
  const size_t ts = zppTypeSize(t), ce = ztChunkElemsFor(chunkBytes, t, block);
  const float d = op == zppAvg ? (float)W : 1.0f;
  const double uT = t == zppFloat32 ? 0.0 : t == zppFloat16 ? 0x1p-11 : 0x1p-8;
  const double mT = t == zppFloat32 ? 0.0 : t == zppFloat16 ? 0x1p-25 : 0x1p-134;
  const int twoStage = N > 1 && L > 1;
  for (size_t off = 0; off < rc; off += ce) {
    size_t len = rc - off < ce ? rc - off : ce;
    size_t P = zppQuantPackedSize(len, bits, block);
    uint8_t* segs = malloc((size_t)W * P);
    uint8_t* rr = malloc((size_t)N * P);
    float* v32 = malloc(len * sizeof(float));
    /* Elements saturated in some stage (an outlier whose block found its
     * escape table full): the documented bound does not hold for them. */
    char* sat = calloc(len + 1, 1);
    char* marks = malloc(len + 1);
    REQUIRE(segs && rr && v32 && sat && marks);
    for (int k = 0; k < W; k++) {
      const char* in = (const char*)inputs[byNode[k]] + ((size_t)p * rc + off) * ts;
      REQUIRE(zppQuantize(in, t, len, bits, block, segs + (size_t)k * P) == zppSuccess);
      qtExpectEscapes(in, t, len, bits, block, marks);
      for (size_t i = 0; i < len; i++) sat[i] |= marks[i] == 2;
    }
    const uint8_t* last = segs;
    int nLast = W;
    if (twoStage) {
      for (int n = 0; n < N; n++) {
        REQUIRE(zppQuantReduceRequant(segs + (size_t)n * L * P, P, L, len, bits, block, bits, block,
                                      rr + (size_t)n * P) == zppSuccess);
        REQUIRE(zppDequantizeAccumulate(segs + (size_t)n * L * P, P, L, len, bits, block, v32, 0) ==
                zppSuccess);
        qtExpectEscapes(v32, zppFloat32, len, bits, block, marks);
        for (size_t i = 0; i < len; i++) sat[i] |= marks[i] == 2;
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
      bound[off + i] = sat[i] ? INFINITY : e / (double)d + div + uT * v + mT;
      target[off + i] = x / (double)d;
    }
    free(segs);
    free(rr);
    free(v32);
    free(sat);
    free(marks);
  }
  free(byNode);
}
