/*
 * The packed layout byte for byte: sizes, header, scales, int8 bytes, int4
 * nibble order, odd counts, zero padding, nothing written past the segment.
 * Hand-built expected bytes for tiny cases (blocks whose scale is exactly 1
 * or whose reciprocal is exact, so that every q, ties included, is known
 * without running the codec's arithmetic). Then every argument and header
 * check, each leaving the outputs untouched.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant_testlib.h"

static void checkSizes(void) {
  for (int bits = 0; bits <= 16; bits++)
    for (int block = -64; block <= 9000; block++) {
      int valid = (bits == 2 || bits == 4 || bits == 8) && block >= 32 && block <= 4096 &&
                  (block & (block - 1)) == 0;
      if (zppQuantValidParams(bits, block) != valid) {
        CHECK_MSG(0, "zppQuantValidParams(%d, %d) != %d", bits, block, valid);
        return;
      }
    }
  CHECK(zppQuantValidParams(8, 32) && zppQuantValidParams(4, 4096));
  CHECK(!zppQuantValidParams(8, 8192) && !zppQuantValidParams(6, 64) && !zppQuantValidParams(4, 96));
  CHECK(zppQuantValidParams(2, 32) && !zppQuantValidParams(1, 64) && !zppQuantValidParams(3, 64));
  CHECK_EQ_INT(zppQuantPackedSize(0, 8, 32), 16);
  CHECK_EQ_INT(zppQuantPackedSize(0, 4, 4096), 16);
  /* header + scales + data, to a multiple of 4, + 48 bytes of escape table
   * per 4096 elements, to a multiple of 16 */
  CHECK_EQ_INT(zppQuantPackedSize(1, 8, 32), 80);   /* 16 + 4 + 1 = 21 -> 24 + 48 = 72 -> 80 */
  CHECK_EQ_INT(zppQuantPackedSize(1, 4, 32), 80);   /* 16 + 4 + 1 */
  CHECK_EQ_INT(zppQuantPackedSize(64, 4, 32), 112); /* 16 + 8 + 32 = 56 + 48 = 104 -> 112 */
  CHECK_EQ_INT(zppQuantPackedSize(35, 8, 32), 112); /* 16 + 8 + 35 = 59 -> 60 + 48 -> 112 */
  CHECK_EQ_INT(zppQuantPackedSize(35, 4, 32), 96);  /* 16 + 8 + 18 = 42 -> 44 + 48 -> 96 */
  CHECK_EQ_INT(zppQuantPackedSize(35, 2, 32), 96);  /* 16 + 8 + 9 = 33 -> 36 + 48 -> 84 -> 96 */
  CHECK_EQ_INT(zppQuantPackedSize(1, 2, 32), 80);   /* 16 + 4 + 1 */
  CHECK_EQ_INT(zppQuantPackedSize(1 << 20, 2, 256), 16 + 4 * 4096 + (1 << 18) + 48 * 256);
  CHECK_EQ_INT(zppQuantPackedSize(4096, 8, 4096), 4176);
  CHECK_EQ_INT(zppQuantPackedSize(4097, 8, 4096), 4224); /* 16 + 8 + 4097 -> 4124 + 96 = 4220 */
  CHECK_EQ_INT(zppQuantPackedSize(1 << 20, 4, 256), 16 + 4 * 4096 + (1 << 19) + 48 * 256);
  CHECK_EQ_INT(zppQuantPackedSize(10, 5, 32), 0);
  CHECK_EQ_INT(zppQuantPackedSize(10, 8, 48), 0);
  CHECK_EQ_INT(zppQuantPackedSize(SIZE_MAX - 3, 8, 32), 0);
  for (size_t count = 0; count < 300; count++)
    for (int bits = 2; bits <= 8; bits *= 2)
      for (int block = 32; block <= 4096; block *= 2) {
        size_t raw = 16 + 4 * ((count + block - 1) / block) + qtDataBytes(count, bits);
        size_t want = ((raw + 3) / 4 * 4 + 48 * ((count + 4095) / 4096) + 15) / 16 * 16;
        if (zppQuantPackedSize(count, bits, block) != want) {
          CHECK_MSG(0, "size(%zu, %d, %d) = %zu, want %zu", count, bits, block,
                    zppQuantPackedSize(count, bits, block), want);
          return;
        }
      }
}

static const uint8_t kHeaderInt8[16] = {0x5a, 0x51, 0x50, 0x32, 8, 5, 0, 0, 35, 0, 0, 0, 0, 0, 0, 0};
static const uint8_t kHeaderInt4[16] = {0x5a, 0x51, 0x50, 0x32, 4, 5, 0, 0, 35, 0, 0, 0, 0, 0, 0, 0};

/* 35 fp32 elements, block 32: block 0 has max |x| = Q so scale = 1 and
 * inv = 1 (q = rne(x) exactly: ties to even); block 1 holds {2, -4, 1}, max
 * 4, whose inv Q/4 is exact too. */
static void buildInput(float* x, int Q) {
  const float head[10] = {(float)Q, (float)-Q, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.0f, -3.0f};
  for (int i = 0; i < 32; i++) x[i] = i < 10 ? head[i] : (float)((i % (2 * Q + 1)) - Q);
  x[32] = 2.0f;
  x[33] = -4.0f;
  x[34] = 1.0f;
}

static int expectedQ0(int i, int Q) {
  const int head[10] = {Q, -Q, 0, 2, 2, 0, -2, -2, 3, -3};
  return i < 10 ? head[i] : (i % (2 * Q + 1)) - Q;
}

static void checkHandBuilt(const char* impl, zppDataType_t dtype) {
  for (int bits = 8; bits >= 4; bits -= 4) {
    int Q = bits == 8 ? 127 : 7;
    float xf[35];
    buildInput(xf, Q);
    uint8_t in[35 * 4];
    for (int i = 0; i < 35; i++) qtSet(in, dtype, (size_t)i, xf[i]); /* all exact in fp16/bf16 */
    size_t size = zppQuantPackedSize(35, bits, 32);
    uint8_t want[112 + 16], got[112 + 16];
    memset(want, 0, sizeof want);
    memcpy(want, bits == 8 ? kHeaderInt8 : kHeaderInt4, 16);
    float s0 = 1.0f, s1 = 4.0f / (float)Q;
    memcpy(want + 16, &s0, 4);
    memcpy(want + 20, &s1, 4);
    int q1[3] = {bits == 8 ? 64 : 4, -Q, bits == 8 ? 32 : 2}; /* 2*Q/4: 63.5 -> 64, 3.5 -> 4 */
    uint8_t* data = want + 24;
    if (bits == 8) {
      for (int i = 0; i < 32; i++) data[i] = (uint8_t)(int8_t)expectedQ0(i, Q);
      for (int i = 0; i < 3; i++) data[32 + i] = (uint8_t)(int8_t)q1[i];
    } else {
      /* element 2i in the low nibble of byte i, 2i+1 in the high nibble */
      for (int i = 0; i < 32; i += 2)
        data[i / 2] = (uint8_t)((expectedQ0(i, Q) & 0xf) | ((expectedQ0(i + 1, Q) & 0xf) << 4));
      data[16] = (uint8_t)((q1[0] & 0xf) | ((q1[1] & 0xf) << 4));
      data[17] = (uint8_t)(q1[2] & 0xf); /* odd count: last high nibble 0 */
      /* The first bytes written out by hand, to pin the nibble order. */
      CHECK(data[0] == 0x97 && data[1] == 0x20 && data[2] == 0x02 && data[3] == 0xee &&
            data[4] == 0xd3);
      CHECK(data[16] == 0x94 && data[17] == 0x02);
    }
    /* One escape table (no escapes: 8 zero values, 8 indices 0xffff) at the
     * first multiple of 4 after the data: 60 (int8), 44 (int4). */
    uint8_t* table = want + (bits == 8 ? 60 : 44);
    memset(table + 32, 0xff, 16);
    memset(got, 0xaa, sizeof got);
    CHECK(zppQuantize(in, dtype, 35, bits, 32, got) == zppSuccess);
    CHECK_MSG(memcmp(got, want, size) == 0, "%s %s int%d: packed bytes differ from the hand-built ones",
              impl, qtTypeName(dtype), bits);
    for (size_t i = size; i < sizeof got; i++) CHECK(got[i] == 0xaa); /* nothing written past the end */
    if (memcmp(got, want, size) != 0)
      for (size_t i = 0; i < size; i++)
        if (got[i] != want[i]) fprintf(stderr, "  byte %zu: 0x%02x, want 0x%02x\n", i, got[i], want[i]);
    /* Decoding: q * scale, in every output type. */
    zppDataType_t outs[3] = {zppFloat32, zppFloat16, zppBfloat16};
    for (int o = 0; o < 3; o++) {
      uint8_t out[35 * 4 + 8];
      memset(out, 0xcd, sizeof out);
      CHECK(zppDequantize(got, 35, bits, 32, out, outs[o]) == zppSuccess);
      for (int i = 0; i < 35; i++) {
        float y = i < 32 ? (float)expectedQ0(i, Q) : (float)q1[i - 32] * s1;
        uint8_t ref[4];
        qtSet(ref, outs[o], 0, y);
        CHECK_MSG(qtBits(out, outs[o], (size_t)i) == qtBits(ref, outs[o], 0), "%s int%d element %d",
                  impl, bits, i);
      }
      CHECK(out[35 * qtTypeSize(outs[o])] == 0xcd);
    }
  }
}

/* int2, 35 fp32 elements, block 32: block 0 has max |x| = 1, so scale = 1,
 * inv = 1 and q = rne(x) (0.5 ties to 0); block 1 holds {2, -4, 1}, max 4,
 * inv 1/4 exact: q = rne(0.5) = 0, -1, rne(0.25) = 0. */
static void checkHandBuiltInt2(const char* impl, zppDataType_t dtype) {
  static const uint8_t kHeaderInt2[16] = {0x5a, 0x51, 0x50, 0x32, 2, 5, 0, 0, 35, 0, 0, 0, 0, 0, 0, 0};
  const float head[8] = {1.0f, -1.0f, 0.5f, -0.5f, 0.25f, -0.75f, 0.75f, 0.0f};
  const int headQ[8] = {1, -1, 0, 0, 0, -1, 1, 0};
  float xf[35];
  int q[35];
  for (int i = 0; i < 32; i++) {
    xf[i] = i < 8 ? head[i] : (float)((i % 3) - 1);
    q[i] = i < 8 ? headQ[i] : (i % 3) - 1;
  }
  xf[32] = 2.0f, xf[33] = -4.0f, xf[34] = 1.0f;
  q[32] = 0, q[33] = -1, q[34] = 0;
  uint8_t in[35 * 4];
  for (int i = 0; i < 35; i++) qtSet(in, dtype, (size_t)i, xf[i]); /* all exact in fp16/bf16 */
  size_t size = zppQuantPackedSize(35, 2, 32);
  uint8_t want[96 + 16], got[96 + 16];
  REQUIRE(size == 96);
  memset(want, 0, sizeof want);
  memcpy(want, kHeaderInt2, 16);
  float s0 = 1.0f, s1 = 4.0f;
  memcpy(want + 16, &s0, 4);
  memcpy(want + 20, &s1, 4);
  uint8_t* data = want + 24; /* element 4i + j at bits 2j, 2j + 1 of byte i */
  for (int i = 0; i < 35; i++) data[i / 4] |= (uint8_t)((q[i] & 3) << (2 * (i % 4)));
  /* The bytes written out by hand, to pin the field order: {1, -1, 0, 0}
   * is 01 11 00 00 from the low bits, 0x0d; {0, -1, 1, 0} 0x1c; the last
   * byte {0, -1, 0} with its unused field 0. */
  CHECK(data[0] == 0x0d && data[1] == 0x1c && data[8] == 0x0c);
  uint8_t* table = want + 36; /* the first multiple of 4 after 24 + 9 */
  memset(table + 32, 0xff, 16);
  memset(got, 0xaa, sizeof got);
  CHECK(zppQuantize(in, dtype, 35, 2, 32, got) == zppSuccess);
  CHECK_MSG(memcmp(got, want, size) == 0, "%s %s int2: packed bytes differ from the hand-built ones",
            impl, qtTypeName(dtype));
  for (size_t i = size; i < sizeof got; i++) CHECK(got[i] == 0xaa);
  if (memcmp(got, want, size) != 0)
    for (size_t i = 0; i < size; i++)
      if (got[i] != want[i]) fprintf(stderr, "  byte %zu: 0x%02x, want 0x%02x\n", i, got[i], want[i]);
  zppDataType_t outs[3] = {zppFloat32, zppFloat16, zppBfloat16};
  for (int o = 0; o < 3; o++) {
    uint8_t out[35 * 4 + 8];
    memset(out, 0xcd, sizeof out);
    CHECK(zppDequantize(got, 35, 2, 32, out, outs[o]) == zppSuccess);
    for (int i = 0; i < 35; i++) {
      uint8_t ref[4];
      qtSet(ref, outs[o], 0, (float)q[i] * (i < 32 ? s0 : s1));
      CHECK_MSG(qtBits(out, outs[o], (size_t)i) == qtBits(ref, outs[o], 0), "%s int2 element %d", impl,
                i);
    }
    CHECK(out[35 * qtTypeSize(outs[o])] == 0xcd);
  }
}

/* count 0: a header and nothing else; decoding it is valid. */
static void checkEmpty(void) {
  uint8_t seg[32];
  memset(seg, 0xaa, sizeof seg);
  CHECK(zppQuantize(NULL, zppFloat32, 0, 8, 256, seg) == zppSuccess);
  qtHeader_t h = qtReadHeader(seg);
  CHECK(h.magic == ZPP_QUANT_MAGIC && h.bits == 8 && h.blockLog2 == 8 && h.reserved == 0 &&
        h.count == 0);
  CHECK(seg[16] == 0xaa);
  CHECK(zppQuantCheckHeader(seg, 0, 8, 256) == zppSuccess);
  CHECK(zppDequantize(seg, 0, 8, 256, NULL, zppBfloat16) == zppSuccess);
  CHECK(zppDequantizeAccumulate(seg, 16, 1, 0, 8, 256, NULL, 1) == zppSuccess);
  CHECK(zppDequantizeSum(seg, 16, 1, 0, 8, 256, 2.0f, NULL, zppFloat16) == zppSuccess);
  uint8_t out[16];
  CHECK(zppQuantReduceRequant(seg, 16, 1, 0, 8, 256, 4, 32, out) == zppSuccess);
  CHECK(qtReadHeader(out).bits == 4 && qtReadHeader(out).count == 0);
  uint8_t segs[48];
  CHECK(zppQuantizeReordered(NULL, zppFloat16, 0, 0, 3, 1, 4, 64, segs) == zppSuccess);
  for (int k = 0; k < 3; k++) CHECK(qtReadHeader(segs + 16 * k).blockLog2 == 6);
}

/* A call that must fail with `want` and leave `buf` (n bytes) as it was. */
#define CHECK_FAILS(call, want, buf, n)                                              \
  do {                                                                               \
    uint8_t* copy_ = malloc(n);                                                      \
    REQUIRE(copy_ != NULL);                                                          \
    memcpy(copy_, (buf), (n));                                                       \
    zppResult_t r_ = (call);                                                         \
    CHECK_MSG(r_ == (want), "%s returned %d, want %d", #call, (int)r_, (int)(want)); \
    CHECK_MSG(memcmp(copy_, (buf), (n)) == 0, "%s changed its output", #call);       \
    free(copy_);                                                                     \
  } while (0)

static void checkHeaderMismatch(void) {
  enum { N = 100 };
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)i - 50.0f;
  size_t size = zppQuantPackedSize(N, 8, 64);
  uint8_t* two = malloc(2 * size);
  REQUIRE(two != NULL);
  CHECK(zppQuantize(x, zppFloat32, N, 8, 64, two) == zppSuccess);
  CHECK(zppQuantize(x, zppFloat32, N, 8, 64, two + size) == zppSuccess);
  CHECK(zppQuantCheckHeader(two, N, 8, 64) == zppSuccess);
  CHECK(zppQuantCheckHeader(two, N, 4, 64) == zppInvalidUsage);  /* bits */
  CHECK(zppQuantCheckHeader(two, N, 8, 128) == zppInvalidUsage); /* block */
  CHECK(zppQuantCheckHeader(two, N, 8, 32) == zppInvalidUsage);
  CHECK(zppQuantCheckHeader(two, N + 1, 8, 64) == zppInvalidUsage); /* count */
  CHECK(zppQuantCheckHeader(two, 0, 8, 64) == zppInvalidUsage);
  CHECK(zppQuantCheckHeader(two, N, 8, 48) == zppInvalidArgument); /* not a valid expectation */
  CHECK(zppQuantCheckHeader(NULL, N, 8, 64) == zppInvalidArgument);
  /* magic, bits, blockLog2, flags (bit 0, the markers flag, is valid), reserved, count */
  const int fields[] = {0, 3, 4, 5, 6, 7, 8, 15};
  for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
    uint8_t saved = two[fields[f]];
    two[fields[f]] ^= fields[f] == 6 ? 0x02 : 0x01;
    CHECK_MSG(zppQuantCheckHeader(two, N, 8, 64) == zppInvalidUsage, "header byte %d", fields[f]);
    two[fields[f]] = saved;
  }
  /* Decoders refuse a mismatched input, the second of two included, and
   * leave their outputs alone. */
  float out[N];
  for (int i = 0; i < N; i++) out[i] = 42.0f;
  CHECK_FAILS(zppDequantize(two, N, 4, 64, out, zppFloat32), zppInvalidUsage, out, sizeof out);
  two[size] ^= 0xff; /* magic of the second segment */
  CHECK_FAILS(zppDequantizeAccumulate(two, size, 2, N, 8, 64, out, 1), zppInvalidUsage, out,
              sizeof out);
  CHECK_FAILS(zppDequantizeSum(two, size, 2, N, 8, 64, 2.0f, out, zppFloat32), zppInvalidUsage, out,
              sizeof out);
  uint8_t rq[512];
  memset(rq, 0x77, sizeof rq);
  CHECK_FAILS(zppQuantReduceRequant(two, size, 2, N, 8, 64, 4, 32, rq), zppInvalidUsage, rq, sizeof rq);
  two[size] ^= 0xff;
  CHECK(zppDequantizeAccumulate(two, size, 2, N, 8, 64, out, 0) == zppSuccess);
  free(two);
}

static void checkInvalidArguments(void) {
  enum { N = 70 };
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)i;
  uint8_t seg[256];
  size_t size = zppQuantPackedSize(N, 8, 32);
  CHECK(zppQuantize(x, zppFloat32, N, 8, 32, seg) == zppSuccess);
  uint8_t out[1024];
  memset(out, 0x5c, sizeof out);
  /* zppQuantize */
  CHECK_FAILS(zppQuantize(NULL, zppFloat32, N, 8, 32, out), zppInvalidArgument, out, sizeof out);
  CHECK(zppQuantize(x, zppFloat32, N, 8, 32, NULL) == zppInvalidArgument);
  CHECK_FAILS(zppQuantize(x, zppFloat32, N, 6, 32, out), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppQuantize(x, zppFloat32, N, 8, 16, out), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppQuantize(x, zppFloat32, N, 8, 8192, out), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppQuantize(x, zppFloat32, N, 8, 100, out), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppQuantize(x, zppInt8, N, 8, 32, out), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppQuantize(x, zppFloat64, N, 8, 32, out), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppQuantize(x, (zppDataType_t)77, N, 8, 32, out), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppQuantize(x, zppFloat32, SIZE_MAX / 2, 8, 32, out), zppInvalidArgument, out,
              sizeof out);
  /* zppDequantize */
  CHECK(zppDequantize(seg, N, 8, 32, NULL, zppFloat32) == zppInvalidArgument);
  CHECK_FAILS(zppDequantize(NULL, N, 8, 32, out, zppFloat32), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppDequantize(seg, N, 8, 32, out, zppInt32), zppInvalidArgument, out, sizeof out);
  CHECK_FAILS(zppDequantize(seg, N, 3, 32, out, zppFloat32), zppInvalidArgument, out, sizeof out);
  /* zppDequantizeAccumulate */
  float* acc = (float*)out;
  CHECK(zppDequantizeAccumulate(seg, size, 1, N, 8, 32, NULL, 0) == zppInvalidArgument);
  CHECK_FAILS(zppDequantizeAccumulate(NULL, size, 1, N, 8, 32, acc, 0), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppDequantizeAccumulate(seg, size, 0, N, 8, 32, acc, 0), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppDequantizeAccumulate(seg, size, -1, N, 8, 32, acc, 0), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppDequantizeAccumulate(seg, size - 16, 2, N, 8, 32, acc, 0), zppInvalidArgument, out,
              sizeof out); /* segments would overlap */
  CHECK_FAILS(zppDequantizeAccumulate(seg, SIZE_MAX / 2, 3, N, 8, 32, acc, 0), zppInvalidArgument, out,
              sizeof out);
  CHECK(zppDequantizeAccumulate(seg, 0, 1, N, 8, 32, acc, 0) == zppSuccess); /* n = 1: stride unused */
  /* zppDequantizeSum */
  memset(out, 0x5c, sizeof out);
  CHECK_FAILS(zppDequantizeSum(seg, size, 1, N, 8, 32, 0.0f, out, zppFloat32), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppDequantizeSum(seg, size, 1, N, 8, 32, NAN, out, zppFloat32), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppDequantizeSum(seg, size, 1, N, 8, 32, INFINITY, out, zppFloat32), zppInvalidArgument,
              out, sizeof out);
  CHECK_FAILS(zppDequantizeSum(seg, size, 1, N, 8, 32, 2.0f, out, zppUint8), zppInvalidArgument, out,
              sizeof out);
  CHECK(zppDequantizeSum(seg, size, 1, N, 8, 32, 2.0f, NULL, zppFloat32) == zppInvalidArgument);
  CHECK_FAILS(zppDequantizeSum(seg, size, 0, N, 8, 32, 2.0f, out, zppFloat32), zppInvalidArgument, out,
              sizeof out);
  /* zppQuantReduceRequant */
  CHECK_FAILS(zppQuantReduceRequant(seg, size, 1, N, 8, 32, 5, 32, out), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppQuantReduceRequant(seg, size, 1, N, 8, 32, 4, 31, out), zppInvalidArgument, out,
              sizeof out);
  CHECK(zppQuantReduceRequant(seg, size, 1, N, 8, 32, 4, 32, NULL) == zppInvalidArgument);
  CHECK_FAILS(zppQuantReduceRequant(NULL, size, 1, N, 8, 32, 4, 32, out), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppQuantReduceRequant(seg, size, 0, N, 8, 32, 4, 32, out), zppInvalidArgument, out,
              sizeof out);
  {
    /* The output may not overlap an input. */
    uint8_t both[1024];
    memcpy(both, seg, size);
    CHECK_FAILS(zppQuantReduceRequant(both, size, 1, N, 8, 32, 8, 32, both + size - 16),
                zppInvalidArgument, both, sizeof both);
    CHECK(zppQuantReduceRequant(both, size, 1, N, 8, 32, 8, 32, both + size) == zppSuccess);
  }
  /* zppQuantizeReordered */
  memset(out, 0x5c, sizeof out);
  CHECK_FAILS(zppQuantizeReordered(x, zppFloat32, 10, 10, 6, 4, 8, 32, out), zppInvalidArgument, out,
              sizeof out); /* 6 partitions do not split into nodes of 4 */
  CHECK_FAILS(zppQuantizeReordered(x, zppFloat32, 10, 10, 6, 0, 8, 32, out), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppQuantizeReordered(x, zppFloat32, 10, 10, 0, 1, 8, 32, out), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppQuantizeReordered(x, zppFloat32, 10, 9, 6, 2, 8, 32, out), zppInvalidArgument, out,
              sizeof out); /* stride < count */
  CHECK_FAILS(zppQuantizeReordered(NULL, zppFloat32, 10, 10, 6, 2, 8, 32, out), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppQuantizeReordered(x, zppFloat64, 10, 10, 6, 2, 8, 32, out), zppInvalidArgument, out,
              sizeof out);
  CHECK_FAILS(zppQuantizeReordered(x, zppFloat32, 10, 10, 6, 2, 8, 33, out), zppInvalidArgument, out,
              sizeof out);
  CHECK(zppQuantizeReordered(x, zppFloat32, 10, 10, 6, 2, 8, 32, NULL) == zppInvalidArgument);
  /* Implementation choice. */
  CHECK(zppQuantImplSelect("sse9") == zppInvalidArgument);
  CHECK(zppQuantImplSelect(NULL) == zppInvalidArgument);
  CHECK(zppQuantImplGet("sse9") == NULL && zppQuantImplGet(NULL) == NULL);
}

int main(void) {
  const char* impls[QT_MAX_IMPLS];
  int nimpl = qtImpls(impls);
  checkSizes();
  for (int i = 0; i < nimpl; i++) {
    qtUse(impls[i]);
    checkHandBuilt(impls[i], zppFloat32);
    checkHandBuilt(impls[i], zppFloat16);
    checkHandBuilt(impls[i], zppBfloat16);
    checkHandBuiltInt2(impls[i], zppFloat32);
    checkHandBuiltInt2(impls[i], zppFloat16);
    checkHandBuiltInt2(impls[i], zppBfloat16);
    checkEmpty();
    checkHeaderMismatch();
  }
  checkInvalidArguments();
  return zppTestExit("test_quant_layout");
}
