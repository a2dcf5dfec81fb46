/*
 * The rotated codec (zpp_quant.h, "Rotation"): for every dtype, int8 and
 * int4, several block sizes, odd counts, Gaussian / Student-t(3) / spiky
 * data with escapes and non-finite elements placed in it:
 *   - every element within the documented bound (rotated blocks), the plain
 *     bound (blocks stored unrotated), its own value (escapes), NaN
 *     (non-finite inputs, the marker);
 *   - which blocks are rotated, from the scale's sign bit, against the rule;
 *   - every CPU implementation gives the same bytes and outputs;
 *   - the Hadamard stages are exact where they must be (H H x = B x);
 *   - a rotated segment is refused by the plain decoder, and
 *     zppDequantizeEx decodes a plain one like zppDequantize.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"
#include "quant_testlib.h"

static const char* gImpls[QT_MAX_IMPLS];
static int gNimpl;
static const zppDataType_t kTypes[3] = {zppFloat32, zppFloat16, zppBfloat16};

enum { D_GAUSS, D_STUDENT, D_SPIKES, D_NDATA };
static const char* kDataName[D_NDATA] = {"gaussian", "student-t3", "spikes"};

static double studentT3(zppTestRng_t* rng) {
  double z = zppTestRngNormal(rng), c = 0;
  for (int k = 0; k < 3; k++) {
    double g = zppTestRngNormal(rng);
    c += g * g;
  }
  return z / sqrt(c / 3);
}

static void fill(void* in, zppDataType_t dtype, size_t count, int block, int kind, int specials,
                 zppTestRng_t* rng) {
  for (size_t i = 0; i < count; i++) {
    double v = kind == D_STUDENT ? studentT3(rng) : zppTestRngNormal(rng);
    if (kind == D_SPIKES && zppTestRngNext(rng) % 64 == 0) v *= 100;
    qtSet(in, dtype, i, (float)v);
  }
  if (!specials) return;
  if (specials == 2) {
    /* Garbage (DeepSpeed's uninitialized padding) in clusters of E in the
     * first three blocks of each escape group: the first two take the
     * table's 8 slots, the third overflows: its garbage stays in it and is
     * rotated with it, every element within the rotated bound of that
     * block's (huge) scale. */
    for (size_t g0 = 0; g0 < count; g0 += 4096)
      for (size_t k = 0; k < 3; k++)
        for (size_t e = 0; e < 4; e++) {
          size_t i = g0 + k * (size_t)block + 7 * e + 3;
          if (i < count && (k + 1) * (size_t)block <= count - g0)
            qtSet(in, dtype, i, dtype == zppFloat16 ? 6.0e4f : (e & 1 ? -1e30f : 1e30f));
        }
    return;
  }
  /* A huge value (escapes), an Inf, a NaN, and a garbage-like 1e30 in
   * bf16/fp32 (escapes, or stays when its group's table is full) at fixed
   * places. */
  if (count > 5) qtSet(in, dtype, 5, 6.0e4f);
  if (count > 40) qtSet(in, dtype, 40, INFINITY);
  if (count > 41) qtSet(in, dtype, count - 2, NAN);
  if (count > 100 && dtype != zppFloat16) qtSet(in, dtype, 99, 1e30f);
}

static double uT(zppDataType_t t) {
  return t == zppFloat32 ? 0 : t == zppFloat16 ? ldexp(1, -11) : ldexp(1, -8);
}
static double mT(zppDataType_t t) {
  return t == zppFloat32 ? 0 : t == zppFloat16 ? ldexp(1, -25) : ldexp(1, -134);
}

/* Checks one encoded segment and its decode against the input; returns the
 * number of bad elements (the first printed). */
static long checkSegment(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                         const uint8_t* seg, const void* out, zppDataType_t otype, const char* what,
                         long* nrot) {
  long bad = 0;
  const int Q = qtQmax(bits), L = zppQuantLog2(block);
  char* marks = calloc(count + 1, 1);
  REQUIRE(marks);
  long overflowBlocks = qtExpectEscapes(in, dtype, count, bits, block, marks);
  (void)overflowBlocks;
  CHECK(qtReadHeader(seg).reserved & ZPP_QUANT_FLAG_ROTATED);
  for (size_t lo = 0; lo < count; lo += (size_t)block) {
    size_t hi = lo + (size_t)block < count ? lo + (size_t)block : count;
    float s = qtScale(seg, count, block, lo / (size_t)block);
    int stored_plain = signbit(s) != 0;
    /* The rule: unrotated iff short, non-finite inside, or w not finite
     * (not produced by this data: |x| <= 1e30 * B stays finite); a block
     * whose candidates overflowed the table is rotated with them. */
    int expect_plain = hi - lo < (size_t)block;
    double M = 0;
    for (size_t i = lo; i < hi; i++) {
      if (marks[i] == 3) expect_plain = 1;
      if ((marks[i] == 0 || marks[i] == 2) && fabs(qtGet(in, dtype, i)) > M)
        M = fabs(qtGet(in, dtype, i));
    }
    if (stored_plain != expect_plain && bad++ == 0)
      fprintf(stderr, "%s: block %zu stored %s, expected %s\n", what, lo / (size_t)block,
              stored_plain ? "plain" : "rotated", expect_plain ? "plain" : "rotated");
    *nrot += !stored_plain;
    double sa = fabs((double)s);
    for (size_t i = lo; i < hi; i++) {
      double x = qtGet(in, dtype, i), y = qtGet(out, otype, i);
      int ok;
      if (marks[i] == 3) {
        ok = isnan(y);
      } else if (marks[i] == 1) {
        ok = fabs(y - x) <= uT(otype) * fabs(x) + mT(otype) || (isinf(y) && otype != dtype);
      } else if (stored_plain) {
        ok = fabs(y - x) <= qtBound(x, sa, bits, otype);
      } else {
        double E = sa / 2 + ldexp(Q * sa, -21) + ldexp((double)block * M, -22) +
                   ldexp((double)L * Q * sa, -23) + (Q + 3) * ldexp(1, -150);
        ok = fabs(y - x) <= E + uT(otype) * (fabs(x) + E) + mT(otype);
      }
      if (!ok && bad++ == 0)
        fprintf(stderr, "%s: element %zu x=%a y=%a scale=%a mark=%d\n", what, i, x, y, s, marks[i]);
    }
  }
  free(marks);
  return bad;
}

/* Every rotated implementation on one input: each segment and its decodes
 * (fp32 and the input's own type) within the spec (checkSegment), and
 * their bytes and decodes equal to the scalar reference's. Adds the
 * rotated blocks seen to *nrot and the decodes checked to *nseg. */
static void checkImpls(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                       const char* label, long* nrot, long* nseg) {
  size_t sz = zppQuantPackedSize(count, bits, block);
  uint8_t* ref = malloc(sz);
  uint8_t* seg = malloc(sz);
  void* out = malloc(count * 4);
  void* out0[3] = {malloc(count * 4), malloc(count * 4), malloc(count * 4)};
  REQUIRE(ref && seg && out && out0[0] && out0[1] && out0[2]);
  char what[160];
  for (int k = 0; k < gNimpl; k++) {
    qtUseRot(gImpls[k]);
    CHECK(zppQuantizeEx(in, dtype, count, bits, block, ZPP_QUANT_ROTATE, seg) == zppSuccess);
    for (int oi = 0; oi < 3; oi++) {
      zppDataType_t ot = kTypes[oi];
      if (ot != dtype && ot != zppFloat32) continue;
      CHECK(zppDequantizeEx(seg, count, bits, block, out, ot) == zppSuccess);
      snprintf(what, sizeof what, "%s %s->%s int%d block %d count %zu %s", gImpls[k], qtTypeName(dtype),
               qtTypeName(ot), bits, block, count, label);
      CHECK_MSG(checkSegment(in, dtype, count, bits, block, seg, out, ot, what, nrot) == 0, "%s", what);
      (*nseg)++;
      if (k == 0) memcpy(out0[oi], out, count * qtTypeSize(ot));
      if (k > 0)
        CHECK_MSG(memcmp(out0[oi], out, count * qtTypeSize(ot)) == 0, "%s: decode differs from scalar",
                  what);
    }
    if (k == 0)
      memcpy(ref, seg, sz);
    else
      CHECK_MSG(memcmp(ref, seg, sz) == 0, "%s: bytes differ from scalar", what);
  }
  free(ref);
  free(seg);
  free(out);
  for (int oi = 0; oi < 3; oi++) free(out0[oi]);
  qtUse("scalar");
}

static void checkRandom(zppTestRng_t* rng) {
  /* every block size: the vector kernels run the stages from 64 on two at
   * a time, so 128, 512 and 2048 end with a single one */
  static const int blocks[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
  long nrot = 0, nseg = 0;
  for (int ti = 0; ti < 3; ti++)
    for (int bits = 2; bits <= 8; bits *= 2)
      for (int bi = 0; bi < 8; bi++)
        for (int kind = 0; kind < D_NDATA; kind++)
          for (int specials = 0; specials < 3; specials++) {
            zppDataType_t dtype = kTypes[ti];
            int block = blocks[bi];
            size_t counts[3] = {(size_t)block, 3 * (size_t)block + 17, 9000 + (size_t)block};
            for (int ci = 0; ci < 3; ci++) {
              size_t count = counts[ci];
              void* in = malloc(count * 4);
              REQUIRE(in);
              fill(in, dtype, count, block, kind, specials, rng);
              char label[64];
              snprintf(label, sizeof label, "%s%s", kDataName[kind],
                       specials == 1   ? " +specials"
                       : specials == 2 ? " +garbage"
                                       : "");
              checkImpls(in, dtype, count, bits, block, label, &nrot, &nseg);
              free(in);
            }
          }
  printf("rotate: %ld segment decodes checked, %ld rotated blocks\n", nseg, nrot);
  CHECK(nrot > 0);
}

/* Rotated blocks whose outliers overflow the table with real values (issue
 * 43): spikes 2^8 to 2^40 above Gaussian data, and blocks of 0 to E + 1
 * non-zero elements. The spikes that find no slot are rotated with their
 * block; every element, spikes included, is within the rotated bound of its
 * block, and every implementation gives the scalar's bytes. */
static void checkOverflowRotated(zppTestRng_t* rng) {
  static const int ratios[] = {8, 16, 17, 24, 40};
  const int blocks[] = {32, 64, 256, 4096};
  long nrot = 0, nseg = 0;
  for (int ti = 0; ti < 3; ti++)
    for (int bits = 2; bits <= 8; bits *= 2)
      for (int bi = 0; bi < 4; bi++)
        for (int v = 0; v < 8; v++) { /* 5 ratios, then 3 sparse fills */
          zppDataType_t dtype = kTypes[ti];
          int block = blocks[bi];
          if (v < 5 && dtype == zppFloat16 && ratios[v] > 24) continue;
          size_t count = 2 * ZPP_QUANT_ESC_GROUP + (size_t)block;
          void* in = malloc(count * 4);
          REQUIRE(in);
          if (v < 5)
            qtFillSpikes(in, dtype, count, block, ratios[v], rng);
          else
            qtFillSparse(in, dtype, count, block, bits, v - 3, v - 4, rng); /* 2..4 non-zero */
          char label[48];
          snprintf(label, sizeof label, "overflow case %d", v);
          checkImpls(in, dtype, count, bits, block, label, &nrot, &nseg);
          free(in);
        }
  CHECK(nrot > 0);
}

/* H H x = B x exactly for small integers; and the documented stage order on
 * a case where order matters (rounding) against a direct recomputation. */
static void checkHadamard(zppTestRng_t* rng) {
  for (size_t B = 32; B <= 4096; B *= 2) {
    float x[4096], y[4096];
    for (size_t i = 0; i < B; i++) x[i] = y[i] = (float)((int)(zppTestRngNext(rng) % 201) - 100);
    zppQuantRotHadamardRef(y, B);
    /* Exact check of one output against the definition: H_ij = (-1)^popcount(i & j). */
    for (size_t j = 0; j < B; j += B / 8 + 1) {
      double e = 0;
      for (size_t i = 0; i < B; i++) e += (__builtin_popcountll(i & j) & 1) ? -x[i] : x[i];
      CHECK_MSG(y[j] == (float)e, "H row %zu of B=%zu: %g vs %g", j, B, (double)y[j], e);
    }
    zppQuantRotHadamardRef(y, B);
    for (size_t i = 0; i < B; i++) CHECK(y[i] == (float)B * x[i]);
  }
  /* The sign sequence: roughly half negative, and fixed (first word). */
  int neg = 0;
  for (size_t i = 0; i < 4096; i++) neg += zppQuantRotSignMask(i) != 0;
  CHECK_MSG(neg > 1900 && neg < 2200, "sign sequence has %d of 4096 negative", neg);
}

/* The spec's signs, written here from zpp_quant.h ("Rotation"). */
static int specSignNeg(size_t i) {
  uint64_t z = ZPP_QUANT_ROT_SEED + (uint64_t)(i / 64 + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (int)((z >> (i % 64)) & 1);
}

/* Decodes rotated block k of a segment to fp32 by the spec's steps, with
 * this test's own butterfly (stage h, pairs (j, j+h) with (j & h) == 0). */
static void specDecodeBlock(const uint8_t* seg, size_t count, int bits, int block, size_t k, float* y) {
  float s = qtScale(seg, count, block, k);
  for (int i = 0; i < block; i++)
    y[i] = (float)qtQ(seg, count, bits, block, k * (size_t)block + (size_t)i) * s;
  for (int h = 1; h < block; h *= 2)
    for (int j = 0; j < block; j++)
      if (!(j & h)) {
        volatile float a = y[j], b = y[j + h];
        y[j] = a + b;
        y[j + h] = a - b;
      }
  float inv = 1.0f / (float)block;
  for (int i = 0; i < block; i++) {
    y[i] = y[i] * inv;
    if (specSignNeg((size_t)i)) y[i] = -y[i];
  }
}

/* zppDequantizeEx against the spec decode, bit for bit, on every rotated
 * block without escapes; and the sign sequence against the spec's. */
static void checkSpecDecode(zppTestRng_t* rng) {
  for (size_t i = 0; i < 4096; i++)
    CHECK_MSG((zppQuantRotSignMask(i) != 0) == specSignNeg(i), "sign %zu", i);
  static const int blocks[] = {32, 256, 4096};
  int compared = 0;
  for (int bi = 0; bi < 3; bi++)
    for (int bits = 2; bits <= 8; bits *= 2) {
      int block = blocks[bi];
      size_t count = 3 * (size_t)block, sz = zppQuantPackedSize(count, bits, block);
      float* in = malloc(count * 4);
      float* out = malloc(count * 4);
      float* y = malloc((size_t)block * 4);
      uint8_t* seg = malloc(sz);
      REQUIRE(in && out && y && seg);
      for (size_t i = 0; i < count; i++) in[i] = (float)studentT3(rng);
      CHECK(zppQuantizeEx(in, zppFloat32, count, bits, block, ZPP_QUANT_ROTATE, seg) == zppSuccess);
      CHECK(zppDequantizeEx(seg, count, bits, block, out, zppFloat32) == zppSuccess);
      for (size_t k = 0; k < 3; k++) {
        if (signbit(qtScale(seg, count, block, k))) continue;
        int esc = 0;
        float v;
        for (int i = 0; i < block; i++)
          esc |= qtEscaped(seg, count, bits, block, k * (size_t)block + (size_t)i, &v);
        if (esc) continue;
        specDecodeBlock(seg, count, bits, block, k, y);
        compared++;
        CHECK_MSG(memcmp(y, out + k * (size_t)block, (size_t)block * 4) == 0,
                  "spec decode of block %zu (block %d int%d) differs", k, block, bits);
      }
      free(in);
      free(out);
      free(y);
      free(seg);
    }
  printf("rotate: %d blocks decoded by the spec's steps\n", compared);
  CHECK(compared >= 6);
}

static void checkFormat(zppTestRng_t* rng) {
  size_t count = 1000;
  int bits = 4, block = 64;
  size_t sz = zppQuantPackedSize(count, bits, block);
  float in[1000], a[1000], b[1000];
  uint8_t* seg = malloc(sz);
  REQUIRE(seg);
  for (size_t i = 0; i < count; i++) in[i] = (float)zppTestRngNormal(rng);
  CHECK(zppQuantizeEx(in, zppFloat32, count, bits, block, ZPP_QUANT_ROTATE, seg) == zppSuccess);
  CHECK(zppDequantize(seg, count, bits, block, a, zppFloat32) == zppInvalidUsage);
  CHECK(zppQuantizeEx(in, zppFloat32, count, bits, block, 0, seg) == zppSuccess);
  CHECK(zppDequantize(seg, count, bits, block, a, zppFloat32) == zppSuccess);
  CHECK(zppDequantizeEx(seg, count, bits, block, b, zppFloat32) == zppSuccess);
  CHECK(memcmp(a, b, sizeof a) == 0);
  CHECK(zppQuantizeEx(in, zppFloat32, count, bits, block, 6, seg) == zppInvalidArgument);
  CHECK(zppDequantizeEx(seg, count + 1, bits, block, b, zppFloat32) == zppInvalidUsage);
  /* A short last block is never rotated; one whose scale says rotated (a
   * corrupt segment: sign bit cleared) decodes plain, q * |s|, in every
   * implementation, reading nothing past the segment (as the CUDA decoder,
   * which memcheck caught reading past it). */
  CHECK(zppQuantizeEx(in, zppFloat32, count, bits, block, ZPP_QUANT_ROTATE, seg) == zppSuccess);
  size_t last = count / (size_t)block, lo = last * (size_t)block;
  uint8_t* sp = seg + 16 + 4 * last;
  CHECK(sp[3] & 0x80); /* stored plain by the encoder */
  sp[3] &= 0x7f;
  float s = qtScale(seg, count, block, last);
  for (int k = 0; k < gNimpl; k++) {
    qtUseRot(gImpls[k]);
    CHECK(zppDequantizeEx(seg, count, bits, block, b, zppFloat32) == zppSuccess);
    int bad = 0;
    for (size_t i = lo; i < count; i++) {
      float v;
      if (qtEscaped(seg, count, bits, block, i, &v)) continue;
      bad += b[i] != (float)qtQ(seg, count, bits, block, i) * s;
    }
    CHECK_MSG(bad == 0, "%s: a short block marked rotated: %d elements not decoded plain", gImpls[k],
              bad);
  }
  qtUseRot(gImpls[0]);
  free(seg);
}

/* Implementation k decoding segk into every output type gives the same bytes
 * as the first implementation (scalar) decoding seg0. */
static void checkDecodesAgree(const uint8_t* seg0, const uint8_t* segk, int k, size_t count, int bits,
                              int block, const char* what) {
  for (int oi = 0; oi < 3; oi++) {
    size_t osz = count * qtTypeSize(kTypes[oi]);
    void* o0 = malloc(osz);
    void* o1 = malloc(osz);
    REQUIRE(o0 && o1);
    qtUseRot(gImpls[0]);
    CHECK(zppDequantizeEx(seg0, count, bits, block, o0, kTypes[oi]) == zppSuccess);
    qtUseRot(gImpls[k]);
    CHECK(zppDequantizeEx(segk, count, bits, block, o1, kTypes[oi]) == zppSuccess);
    CHECK_MSG(memcmp(o0, o1, osz) == 0, "%s: decode to %s differs from %s", what,
              qtTypeName(kTypes[oi]), gImpls[0]);
    free(o0);
    free(o1);
  }
}

/* The vector encoder's fast path at its edges (quant_rotate_avx2.c): a
 * block is encoded there only when at least E + 1 of its elements have
 * |x| * 2^K >= max |x|. Escape group 0 has blocks with E elements at +-1
 * and the (E+1)-th at exactly 2^-K (ordinary: rotated, no escape); group 1
 * the same but one block's (E+1)-th element just below 2^-K (its E
 * elements escape, the reference's path); group 2 (fp32) one block whose
 * w overflows (x = D * 3e38: stored unrotated). Group 3: in every block
 * the largest element 1 and all the others at +-2^-K, so that each lane's
 * maximum sits exactly at max |x| 2^-K (the AVX-512 encoder settles such
 * blocks at once by their least lane maximum: rotated, no escape); group
 * 4's first block the same with the others one step below (fp32: one ulp,
 * where that test could be off by one): only the largest passes, and it
 * escapes (the reference's path). Then an odd tail. Every implementation
 * must give the scalar's bytes and decodes, in all types. */
static void checkFastPathEdges(zppTestRng_t* rng) {
  static const int blocks[] = {32, 64, 128, 256, 512, 1024, 2048, 4096};
  const size_t G = ZPP_QUANT_ESC_GROUP;
  for (int ti = 0; ti < 3; ti++)
    for (int bits = 2; bits <= 8; bits *= 2)
      for (int bi = 0; bi < 8; bi++) {
        zppDataType_t dtype = kTypes[ti];
        int block = blocks[bi], K = ZPP_QUANT_ESC_LOG2(bits);
        size_t count = 5 * G + (size_t)block + 5, sz = zppQuantPackedSize(count, bits, block);
        void* in = malloc(count * 4);
        uint8_t* seg[QT_MAX_IMPLS];
        REQUIRE(in);
        fill(in, dtype, count, block, D_GAUSS, 0, rng);
        for (size_t lo = 0; lo + (size_t)block <= 2 * G; lo += (size_t)block) {
          int below = lo / G == 1 && lo + 2 * (size_t)block > 2 * G; /* group 1's last block */
          for (size_t i = 0; i < (size_t)block; i++) {
            float v = i < ZPP_QUANT_ESC_PER_BLOCK ? ((i & 1) ? -1.0f : 1.0f)
                      : i == ZPP_QUANT_ESC_PER_BLOCK
                          ? ldexpf(below ? 1.0f - 1.0f / 128 : 1.0f, -K)
                          : ldexpf((float)zppTestRngUniform(rng, -0.5, 0.5), -K - 2);
            qtSet(in, dtype, lo + (i * 5) % (size_t)block, v);
          }
        }
        if (dtype == zppFloat32)
          for (size_t i = 0; i < (size_t)block; i++)
            ((float*)in)[2 * G + i] = zppQuantRotSignMask(i) ? -3e38f : 3e38f;
        const float at = ldexpf(1.0f, -K);
        const float step = dtype == zppFloat32 ? nextafterf(at, 0.0f) : ldexpf(1.0f - 1.0f / 256, -K);
        for (size_t lo = 3 * G; lo <= 4 * G; lo += (size_t)block)
          for (size_t i = 0; i < (size_t)block; i++) {
            float m = lo == 4 * G ? step : at;
            qtSet(in, dtype, lo + i, i == 0 ? 1.0f : (zppTestRngUniform(rng, 0, 1) < 0.5 ? -m : m));
          }
        for (int k = 0; k < gNimpl; k++) {
          seg[k] = malloc(sz);
          REQUIRE(seg[k]);
          qtUseRot(gImpls[k]);
          char what[128];
          snprintf(what, sizeof what, "%s fast-path edges %s int%d block %d", gImpls[k],
                   qtTypeName(dtype), bits, block);
          CHECK_MSG(
              zppQuantizeEx(in, dtype, count, bits, block, ZPP_QUANT_ROTATE, seg[k]) == zppSuccess,
              "%s", what);
          if (k > 0) CHECK_MSG(memcmp(seg[0], seg[k], sz) == 0, "%s: bytes differ from scalar", what);
          int esc0 = 0, esc1 = 0, esc3 = 0, esc4 = 0;
          for (int j = 0; j < ZPP_QUANT_ESC_SLOTS; j++) {
            esc0 += qtEscSlotIndex(seg[k], count, bits, block, 0, j) != 0xffff;
            esc1 += qtEscSlotIndex(seg[k], count, bits, block, 1, j) != 0xffff;
            esc3 += qtEscSlotIndex(seg[k], count, bits, block, 3, j) != 0xffff;
            esc4 += qtEscSlotIndex(seg[k], count, bits, block, 4, j) != 0xffff;
          }
          CHECK_MSG(esc0 == 0 && esc1 == ZPP_QUANT_ESC_PER_BLOCK && esc3 == 0 && esc4 == 1,
                    "%s: %d, %d, %d and %d escapes in groups 0, 1, 3, 4", what, esc0, esc1, esc3, esc4);
          CHECK_MSG(!signbit(qtScale(seg[k], count, block, 0)), "%s: block 0 not rotated", what);
          CHECK_MSG(!signbit(qtScale(seg[k], count, block, 3 * G / (size_t)block)),
                    "%s: group 3's first block not rotated", what);
          if (dtype == zppFloat32)
            CHECK_MSG(signbit(qtScale(seg[k], count, block, 2 * G / (size_t)block)),
                      "%s: the overflowing block was rotated", what);
          if (k > 0) checkDecodesAgree(seg[0], seg[k], k, count, bits, block, what);
        }
        for (int k = 0; k < gNimpl; k++) free(seg[k]);
        free(in);
      }
  qtUse("scalar");
}

/* Every implementation against scalar over the whole exponent range, 2^-149
 * to 2^127, for each block size up to 256, from fp32 and from bf16 (whose
 * int4 encode has a path of its own in the AVX-512 file): the vector decode
 * folds 2^-L into s only where s 2^-L is normal and no value can overflow,
 * and takes the spec's subtraction where the transform may overflow
 * (Inf - Inf: the NaN keeps its sign); both edges sit inside this sweep, and
 * so do the encoders' tiny scales (max |w| below 2^-64, the reference's
 * scaled path). */
static void checkScaleSweep(zppTestRng_t* rng) {
  for (int bf = 0; bf <= 1; bf++)
    for (int bits = 2; bits <= 8; bits *= 2)
      for (int block = 32; block <= 256; block *= 2)
        for (int e = -149; e <= 127; e += 2) {
          size_t count = 4 * (size_t)block, sz = zppQuantPackedSize(count, bits, block);
          float* in = malloc(count * 4);
          uint16_t* inb = malloc(count * 2);
          uint8_t* seg[QT_MAX_IMPLS];
          REQUIRE(in && inb);
          for (size_t i = 0; i < count; i++) {
            in[i] = ldexpf((float)zppTestRngUniform(rng, -1.0, 1.0), e);
            inb[i] = zppFloatToBf16(in[i]);
          }
          for (int k = 0; k < gNimpl; k++) {
            seg[k] = malloc(sz);
            REQUIRE(seg[k]);
            qtUseRot(gImpls[k]);
            CHECK(zppQuantizeEx(bf ? (const void*)inb : (const void*)in, bf ? zppBfloat16 : zppFloat32,
                                count, bits, block, ZPP_QUANT_ROTATE, seg[k]) == zppSuccess);
            char what[96];
            snprintf(what, sizeof what, "%s scale sweep %s int%d block %d 2^%d", gImpls[k],
                     bf ? "bf16" : "fp32", bits, block, e);
            CHECK_MSG(k == 0 || memcmp(seg[0], seg[k], sz) == 0, "%s: bytes differ from scalar", what);
            /* seg[0] both times: the decoders, not the encoders, are compared here. */
            if (k > 0) checkDecodesAgree(seg[0], seg[0], k, count, bits, block, what);
          }
          for (int k = 0; k < gNimpl; k++) free(seg[k]);
          free(in);
          free(inb);
        }
  qtUse("scalar");
}

int main(void) {
  gNimpl = qtRotImpls(gImpls);
  zppTestRng_t rng;
  zppTestRngSeed(&rng, 0x5eed0027);
  checkHadamard(&rng);
  checkFormat(&rng);
  checkSpecDecode(&rng);
  checkRandom(&rng);
  checkOverflowRotated(&rng);
  checkFastPathEdges(&rng);
  checkScaleSweep(&rng);
  return zppTestExit("test_quant_rotate");
}
