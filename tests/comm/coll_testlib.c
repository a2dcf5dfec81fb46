#include "coll_testlib.h"

#include <string.h>
#include <time.h>

#include "collectives/reduce_ops.h"
#include "names.h"
#include "quant_kernels/zpp_half.h"

int collTestIsSigned(zppDataType_t t) { return t != zppUint8 && t != zppUint32 && t != zppUint64; }

const char* collTestTypeName(zppDataType_t t) { return zppDtypeName(t); }

const char* collTestOpName(zppRedOp_t op) { return zppRedOpName(op); }

int64_t collTestValue(zppDataType_t t, zppRedOp_t op, int r, size_t i, int seed) {
  uint64_t h = (uint64_t)r * 7u + (uint64_t)i * 13u + (uint64_t)seed * 5u + (i >> 10);
  if (op == zppProd) {
    /* At most 2 of 8 ranks contribute a 2 at any index: |product| <= 4. */
    int64_t v = ((uint64_t)r + i + (uint64_t)seed) % 4u == 0 ? 2 : 1;
    if (collTestIsSigned(t) && (h % 5u) == 0) v = -v;
    return v;
  }
  int64_t v = (int64_t)(h % 7u);
  return collTestIsSigned(t) ? v - 3 : v;
}

void collTestEncode(zppDataType_t t, int64_t v, void* dst) {
  switch (t) {
    case zppInt8: {
      int8_t x = (int8_t)v;
      memcpy(dst, &x, 1);
      break;
    }
    case zppUint8: {
      uint8_t x = (uint8_t)v;
      memcpy(dst, &x, 1);
      break;
    }
    case zppInt32: {
      int32_t x = (int32_t)v;
      memcpy(dst, &x, 4);
      break;
    }
    case zppUint32: {
      uint32_t x = (uint32_t)v;
      memcpy(dst, &x, 4);
      break;
    }
    case zppInt64: memcpy(dst, &v, 8); break;
    case zppUint64: {
      uint64_t x = (uint64_t)v;
      memcpy(dst, &x, 8);
      break;
    }
    case zppFloat16: {
      uint16_t x = zppFloatToHalf((float)v);
      memcpy(dst, &x, 2);
      break;
    }
    case zppFloat32: {
      float x = (float)v;
      memcpy(dst, &x, 4);
      break;
    }
    case zppFloat64: {
      double x = (double)v;
      memcpy(dst, &x, 8);
      break;
    }
    case zppBfloat16: {
      uint16_t x = zppFloatToBf16((float)v);
      memcpy(dst, &x, 2);
      break;
    }
    default: break;
  }
}

void collTestExpect(zppDataType_t t, zppRedOp_t op, int n, size_t i, int seed, void* dst) {
  int64_t acc = collTestValue(t, op, 0, i, seed);
  for (int r = 1; r < n; r++) {
    int64_t v = collTestValue(t, op, r, i, seed);
    switch (op) {
      case zppProd: acc *= v; break;
      case zppMax: acc = v > acc ? v : acc; break;
      case zppMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  if (op != zppAvg) {
    collTestEncode(t, acc, dst);
    return;
  }
  /* The division as the library does it: once, at the end, in the type. */
  switch (t) {
    case zppFloat16: {
      uint16_t x = zppFloatToHalf((float)acc / (float)n);
      memcpy(dst, &x, 2);
      break;
    }
    case zppBfloat16: {
      uint16_t x = zppFloatToBf16((float)acc / (float)n);
      memcpy(dst, &x, 2);
      break;
    }
    case zppFloat32: {
      float x = (float)acc / (float)n;
      memcpy(dst, &x, 4);
      break;
    }
    case zppFloat64: {
      double x = (double)acc / (double)n;
      memcpy(dst, &x, 8);
      break;
    }
    default: collTestEncode(t, acc / n, dst); break; /* C truncation, like the library */
  }
}

void collTestFill(zppDataType_t t, zppRedOp_t op, int r, size_t first, size_t count, int seed,
                  void* dst) {
  size_t ts = zppTypeSize(t);
  for (size_t k = 0; k < count; k++)
    collTestEncode(t, collTestValue(t, op, r, first + k, seed), (char*)dst + k * ts);
}
