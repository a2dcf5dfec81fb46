/*
 * Exact conversions between fp32 and the two 16-bit float formats, one value
 * at a time. The reference that every codec implementation must match bit for
 * bit: the AVX2 path (F16C for fp16, integer SIMD for bf16) and the CUDA
 * kernels mirror these functions.
 *
 *   widening (fp16/bf16 -> fp32): exact for every value; a NaN comes back
 *     quiet with its sign and payload.
 *   narrowing (fp32 -> fp16/bf16): round to nearest, ties to even, with
 *     subnormal results and overflow to Inf; a NaN becomes a quiet NaN with
 *     its sign and the top payload bits, which is what F16C's vcvtps2ph does,
 *     so scalar and AVX2 agree even on NaN bits.
 *
 * Integer arithmetic only, except one exact float multiply for fp16
 * subnormals: no dependence on the FPU's flush-to-zero or rounding mode, and
 * the same code reads naturally in CUDA (the ZPP_HALF_FN qualifiers make
 * these usable from device code when this header is compiled by nvcc).
 * bf16 is its own format (8 exponent bits, fp32's range): it is never read
 * through the fp16 path.
 */
#ifndef ZPP_HALF_H_
#define ZPP_HALF_H_

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define ZPP_HALF_FN static __host__ __device__ __forceinline__
#else
#define ZPP_HALF_FN static inline
#endif

ZPP_HALF_FN uint32_t zppF32Bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

ZPP_HALF_FN float zppF32FromBits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* fp16 -> fp32, exact. */
ZPP_HALF_FN float zppHalfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) {
    /* Inf, or NaN made quiet (bit 22) so that no signalling NaN leaks. */
    return zppF32FromBits(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
  }
  if (exp == 0) {
    /* Zero or subnormal: man * 2^-24 is exact in fp32 (at most 10 significant
     * bits, result >= 2^-24, far above fp32's subnormal range). */
    float mag = (float)man * 0x1p-24f;
    return zppF32FromBits(sign | zppF32Bits(mag));
  }
  /* Normal: rebias the exponent from 15 to 127. */
  return zppF32FromBits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* fp32 -> fp16, round to nearest even. */
ZPP_HALF_FN uint16_t zppFloatToHalf(float f) {
  uint32_t bits = zppF32Bits(f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) /* NaN: quiet, top 9 payload bits kept */
    return (uint16_t)(sign | 0x7e00u | ((mag >> 13) & 0x1ffu));
  if (mag >= 0x477ff000u) /* >= 65520, halfway past the largest fp16 (65504): Inf */
    return (uint16_t)(sign | 0x7c00u);
  if (mag >= 0x38800000u) {
    /* Normal fp16 range [2^-14, 65520): round the 13 dropped mantissa bits to
     * nearest even; a carry into the exponent is the correct result. */
    uint32_t r = mag + 0xfffu + ((mag >> 13) & 1u);
    return (uint16_t)(sign | ((r - (112u << 23)) >> 13));
  }
  /* Subnormal fp16 (units of 2^-24), or zero. Value = m * 2^(e-150), so in
   * units of 2^-24 it is m >> (126 - e) plus a remainder to round. Below
   * e = 102 the value is under 2^-25, half the smallest subnormal: zero. */
  uint32_t e = mag >> 23;
  if (e < 102u) return (uint16_t)sign;
  uint32_t m = (mag & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e; /* 1..24 */
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint16_t)(sign | q); /* q == 0x400 is the smallest normal: right */
}

/* bf16 -> fp32, exact: bf16 is the top half of an fp32. */
ZPP_HALF_FN float zppBf16ToFloat(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u; /* NaN: quiet */
  return zppF32FromBits(u);
}

/* fp32 -> bf16, round to nearest even (subnormals and overflow included:
 * the carry of the rounding add is the correct result in every case). */
ZPP_HALF_FN uint16_t zppFloatToBf16(float f) {
  uint32_t bits = zppF32Bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

#endif /* ZPP_HALF_H_ */
