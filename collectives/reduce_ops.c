/* Element-wise reductions; see reduce_ops.h. */
#include "reduce_ops.h"

#include <stdint.h>
#include <string.h>

#include "quant_kernels/zpp_half.h"

/* fp16 and bf16 go through quant_kernels/zpp_half.h, the one copy of the
 * conversions (the codecs match it bit for bit): static inline there, so the
 * loops below inline and vectorize them. */
/* ---- loops ----------------------------------------------------------------- */

#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
/* NaN wins: an a that is NaN is kept, and a NaN b fails both tests. */
#define OP_MAX(a, b) (((a) > (b) || (a) != (a)) ? (a) : (b))
#define OP_MIN(a, b) (((a) < (b) || (a) != (a)) ? (a) : (b))

/* Integers: arithmetic on the unsigned type, so overflow wraps instead of
 * being undefined. */
#define INT_LOOPS(T, U)                                                             \
  static void reduce_##T(T* dst, const T* a, const T* b, size_t n, zppRedOp_t op) { \
    switch (op) {                                                                   \
      case zppSum:                                                                  \
      case zppAvg:                                                                  \
        for (size_t i = 0; i < n; i++) dst[i] = (T)((U)a[i] + (U)b[i]);             \
        break;                                                                      \
      case zppProd:                                                                 \
        for (size_t i = 0; i < n; i++) dst[i] = (T)((U)a[i] * (U)b[i]);             \
        break;                                                                      \
      case zppMax:                                                                  \
        for (size_t i = 0; i < n; i++) dst[i] = a[i] > b[i] ? a[i] : b[i];          \
        break;                                                                      \
      default:                                                                      \
        for (size_t i = 0; i < n; i++) dst[i] = a[i] < b[i] ? a[i] : b[i];          \
        break;                                                                      \
    }                                                                               \
  }

INT_LOOPS(int8_t, uint8_t)
INT_LOOPS(uint8_t, uint8_t)
INT_LOOPS(int32_t, uint32_t)
INT_LOOPS(uint32_t, uint32_t)
INT_LOOPS(int64_t, uint64_t)
INT_LOOPS(uint64_t, uint64_t)

#define FLOAT_LOOPS(T)                                                              \
  static void reduce_##T(T* dst, const T* a, const T* b, size_t n, zppRedOp_t op) { \
    switch (op) {                                                                   \
      case zppSum:                                                                  \
      case zppAvg:                                                                  \
        for (size_t i = 0; i < n; i++) dst[i] = OP_SUM(a[i], b[i]);                 \
        break;                                                                      \
      case zppProd:                                                                 \
        for (size_t i = 0; i < n; i++) dst[i] = OP_PROD(a[i], b[i]);                \
        break;                                                                      \
      case zppMax:                                                                  \
        for (size_t i = 0; i < n; i++) dst[i] = OP_MAX(a[i], b[i]);                 \
        break;                                                                      \
      default:                                                                      \
        for (size_t i = 0; i < n; i++) dst[i] = OP_MIN(a[i], b[i]);                 \
        break;                                                                      \
    }                                                                               \
  }

FLOAT_LOOPS(float)
FLOAT_LOOPS(double)

/* 16-bit formats: through fp32, one rounding per element and step.
 * Blocks of HALF_BLOCK elements go through local arrays: dst may be a or b,
 * and with private copies the compiler can vectorize the conversions without
 * alias checks (a ring reduce-scatter of bf16 gradients spends its CPU time
 * here). Element-wise, so vectorizing changes no result. */
#define HALF_BLOCK 64
#define HALF_LOOPS(NAME, TO_F, FROM_F)                                                            \
  static void reduce_##NAME(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n,        \
                            zppRedOp_t op) {                                                      \
    uint16_t ta[HALF_BLOCK] = {0}, tb[HALF_BLOCK] = {0}, td[HALF_BLOCK];                          \
    for (size_t i = 0; i < n; i += HALF_BLOCK) {                                                  \
      size_t m = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;                                         \
      if (m == HALF_BLOCK) { /* constant size: inlined copies */                                  \
        memcpy(ta, a + i, sizeof(ta));                                                            \
        memcpy(tb, b + i, sizeof(tb));                                                            \
      } else {                                                                                    \
        memcpy(ta, a + i, m * sizeof(uint16_t));                                                  \
        memcpy(tb, b + i, m * sizeof(uint16_t));                                                  \
      }                                                                                           \
      switch (op) {                                                                               \
        case zppSum:                                                                              \
        case zppAvg:                                                                              \
          for (int j = 0; j < HALF_BLOCK; j++) td[j] = FROM_F(OP_SUM(TO_F(ta[j]), TO_F(tb[j])));  \
          break;                                                                                  \
        case zppProd:                                                                             \
          for (int j = 0; j < HALF_BLOCK; j++) td[j] = FROM_F(OP_PROD(TO_F(ta[j]), TO_F(tb[j]))); \
          break;                                                                                  \
        case zppMax:                                                                              \
          for (int j = 0; j < HALF_BLOCK; j++) td[j] = FROM_F(OP_MAX(TO_F(ta[j]), TO_F(tb[j])));  \
          break;                                                                                  \
        default:                                                                                  \
          for (int j = 0; j < HALF_BLOCK; j++) td[j] = FROM_F(OP_MIN(TO_F(ta[j]), TO_F(tb[j])));  \
          break;                                                                                  \
      }                                                                                           \
      if (m == HALF_BLOCK)                                                                        \
        memcpy(dst + i, td, sizeof(td));                                                          \
      else                                                                                        \
        memcpy(dst + i, td, m * sizeof(uint16_t));                                                \
    }                                                                                             \
  }

HALF_LOOPS(fp16, zppHalfToFloat, zppFloatToHalf)
HALF_LOOPS(bf16, zppBf16ToFloat, zppFloatToBf16)

void zppRedApply(void* dst, const void* a, const void* b, size_t n, zppDataType_t type, zppRedOp_t op) {
  switch (type) {
    case zppInt8: reduce_int8_t(dst, a, b, n, op); break;
    case zppUint8: reduce_uint8_t(dst, a, b, n, op); break;
    case zppInt32: reduce_int32_t(dst, a, b, n, op); break;
    case zppUint32: reduce_uint32_t(dst, a, b, n, op); break;
    case zppInt64: reduce_int64_t(dst, a, b, n, op); break;
    case zppUint64: reduce_uint64_t(dst, a, b, n, op); break;
    case zppFloat16: reduce_fp16(dst, a, b, n, op); break;
    case zppFloat32: reduce_float(dst, a, b, n, op); break;
    case zppFloat64: reduce_double(dst, a, b, n, op); break;
    case zppBfloat16: reduce_bf16(dst, a, b, n, op); break;
    default: break; /* validated by the API layer */
  }
}

/* W: a type wide enough for nranks (an int8 cannot hold 200 ranks). */
#define DIV_LOOP(T, W)                                              \
  do {                                                              \
    T* p = buf;                                                     \
    for (size_t i = 0; i < n; i++) p[i] = (T)((W)p[i] / (W)nranks); \
  } while (0)

void zppRedFinishAvg(void* buf, size_t n, zppDataType_t type, int nranks) {
  if (nranks <= 1) return;
  switch (type) {
    case zppInt8: DIV_LOOP(int8_t, int64_t); break;
    case zppUint8: DIV_LOOP(uint8_t, uint64_t); break;
    case zppInt32: DIV_LOOP(int32_t, int64_t); break;
    case zppUint32: DIV_LOOP(uint32_t, uint64_t); break;
    case zppInt64: DIV_LOOP(int64_t, int64_t); break;
    case zppUint64: DIV_LOOP(uint64_t, uint64_t); break;
    case zppFloat32: DIV_LOOP(float, float); break;
    case zppFloat64: DIV_LOOP(double, double); break;
    case zppFloat16: {
      uint16_t* p = buf;
      for (size_t i = 0; i < n; i++) p[i] = zppFloatToHalf(zppHalfToFloat(p[i]) / (float)nranks);
      break;
    }
    case zppBfloat16: {
      uint16_t* p = buf;
      for (size_t i = 0; i < n; i++) p[i] = zppFloatToBf16(zppBf16ToFloat(p[i]) / (float)nranks);
      break;
    }
    default: break;
  }
}
