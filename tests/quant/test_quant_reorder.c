/*
 * Tensor-slice reordering: segment k = j * N + n must hold partition
 * p = n * L + j, quantized exactly as zppQuantize would quantize it alone;
 * local rank j's send region [j*N, (j+1)*N) then holds only partitions with
 * p % L == j, in node order. Several (W, L), odd node counts (N = 3), L = 1
 * and L = W, strided partitions (part_stride > part_count), every
 * implementation bit-identical. Hand-written orders pin the formula.
 */
#include <stdlib.h>
#include <string.h>

#include "quant_testlib.h"

static const char* gImpls[QT_MAX_IMPLS];
static int gNimpl;

/* The order for a few shapes, written out by hand. */
static void checkHandOrders(void) {
  struct {
    int W, L;
    int order[9];
  } cases[] = {
      {6, 2, {0, 2, 4, 1, 3, 5}},          /* N = 3 */
      {6, 3, {0, 3, 1, 4, 2, 5}},          /* N = 2 */
      {9, 3, {0, 3, 6, 1, 4, 7, 2, 5, 8}}, /* N = 3 */
      {4, 1, {0, 1, 2, 3}},                /* one rank per node: identity */
      {4, 4, {0, 1, 2, 3}},                /* one node: identity */
      {3, 1, {0, 1, 2}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int W = cases[c].W, L = cases[c].L;
    enum { COUNT = 40 };
    float* in = malloc(sizeof(float) * COUNT * (size_t)W);
    REQUIRE(in != NULL);
    /* Partition p is all p + 1: its scale says which partition it is. */
    for (int p = 0; p < W; p++)
      for (int i = 0; i < COUNT; i++) in[p * COUNT + i] = (float)(p + 1);
    size_t seg = zppQuantPackedSize(COUNT, 8, 32);
    uint8_t* out = malloc(seg * (size_t)W);
    REQUIRE(out != NULL);
    CHECK(zppQuantizeReordered(in, zppFloat32, COUNT, COUNT, W, L, 8, 32, out) == zppSuccess);
    for (int k = 0; k < W; k++) {
      float s = qtScale(out + (size_t)k * seg, COUNT, 32, 0);
      int p = cases[c].order[k];
      CHECK_MSG(s == (float)(p + 1) / 127.0f, "W=%d L=%d: segment %d holds scale %g, want partition %d",
                W, L, k, (double)s, p);
    }
    free(in);
    free(out);
  }
}

static void checkShape(int W, int L, size_t partCount, size_t partStride, zppDataType_t dtype, int bits,
                       int block, zppTestRng_t* rng) {
  int N = W / L;
  size_t total = (size_t)(W - 1) * partStride + partCount;
  void* in = malloc(total * 4 + 4);
  REQUIRE(in != NULL);
  qtFill(in, dtype, total, QT_NORMAL, rng);
  /* Tag each partition by its size so that a swapped one cannot match. */
  for (int p = 0; p < W && partCount > 0; p++) qtSet(in, dtype, (size_t)p * partStride, (float)(p + 1));
  size_t seg = zppQuantPackedSize(partCount, bits, block);
  uint8_t* out[QT_MAX_IMPLS];
  uint8_t* alone = malloc(seg);
  REQUIRE(alone != NULL);
  char what[128];
  snprintf(what, sizeof what, "W=%d L=%d count %zu stride %zu %s int%d block %d", W, L, partCount,
           partStride, qtTypeName(dtype), bits, block);
  for (int k = 0; k < gNimpl; k++) {
    qtUse(gImpls[k]);
    out[k] = malloc(seg * (size_t)W + 16);
    REQUIRE(out[k] != NULL);
    memset(out[k], 0x6b, seg * (size_t)W + 16);
    CHECK_MSG(
        zppQuantizeReordered(in, dtype, partCount, partStride, W, L, bits, block, out[k]) == zppSuccess,
        "%s", what);
    CHECK_MSG(out[k][seg * (size_t)W] == 0x6b, "%s: wrote past the output", what);
    for (int s = 0; s < W; s++) {
      int j = s / N, n = s % N;
      int p = n * L + j;
      CHECK(p % L == j); /* local rank j's send region holds only its partitions */
      const uint8_t* src = (const uint8_t*)in + (size_t)p * partStride * qtTypeSize(dtype);
      CHECK(zppQuantize(partCount ? src : NULL, dtype, partCount, bits, block, alone) == zppSuccess);
      CHECK_MSG(memcmp(out[k] + (size_t)s * seg, alone, seg) == 0,
                "%s %s: segment %d is not partition %d", gImpls[k], what, s, p);
    }
  }
  for (int k = 1; k < gNimpl; k++)
    CHECK_MSG(memcmp(out[0], out[k], seg * (size_t)W) == 0, "%s: %s and %s differ", what, gImpls[0],
              gImpls[k]);
  for (int k = 0; k < gNimpl; k++) free(out[k]);
  free(alone);
  free(in);
}

int main(void) {
  gNimpl = qtImpls(gImpls);
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 0x5eed0004);
  qtUse("scalar");
  checkHandOrders();
  const int shapes[][2] = {{1, 1}, {3, 1}, {4, 1},  {4, 2}, {4, 4}, {6, 2},
                           {6, 3}, {9, 3}, {12, 4}, {8, 8}, {16, 4}};
  const size_t counts[] = {0, 1, 37, 300};
  const zppDataType_t types[3] = {zppFloat32, zppFloat16, zppBfloat16};
  int v = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
      for (int gap = 0; gap < 2; gap++, v++) {
        size_t stride = counts[c] + (gap ? 13 : 0);
        const int bits[3] = {8, 4, 2}; /* every dtype with every width */
        checkShape(shapes[s][0], shapes[s][1], counts[c], stride, types[v % 3], bits[(v / 3) % 3],
                   v % 4 < 2 ? 32 : 64, &rng);
      }
  return zppTestExit("test_quant_reorder");
}
