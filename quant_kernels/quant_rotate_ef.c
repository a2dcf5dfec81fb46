/*
 * Error feedback in the rotated domain (zpp_quant.h, "error feedback in the
 * rotated domain"): zppQuantizeExFeedback's reference, one escape group at
 * a time, and the vector kernels' entry. Step 2 (the usual group) rotates,
 * adds the rotated residual, quantizes and keeps z - q s; step 3 (a group
 * with a short block, a non-finite element, a candidate for escape or an
 * overflow) brings the residual back to the original domain and runs the
 * plain composition of error feedback: add, quantize, decode, subtract.
 */
#include <string.h>

#include "check.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"
#include "quant_kernels/zpp_half.h"

/* The residual values of the full block at element lo (len = B) in the
 * original domain, into u: the unrotated elements' own values (o) plus the
 * decode of the rotated ones (D H v * 2^-L, the decoder's arithmetic), one
 * add per element. (The encoder marks whole blocks; a mixed one comes only
 * from a foreign state, and is still read as what its marks say.) */
static void blockToOriginal(zppQuantResid_t e, size_t lo, size_t len, float* u) {
  const uint32_t* signs = zppQuantRotSignMasks();
  float v[ZPP_QUANT_MAX_BLOCK];
  int any = 0;
  for (size_t i = 0; i < len; i++) {
    int rot = zppQuantResidIsRotated(e, lo + i);
    any |= rot;
    v[i] = rot ? zppQuantResidValue(e, lo + i) : 0.0f;
    u[i] = rot ? 0.0f : zppQuantResidValue(e, lo + i);
  }
  if (!any) return;
  zppQuantRotHadamardRef(v, len);
  const float invB = zppF32FromBits((uint32_t)(127 - zppQuantLog2((int)len)) << 23);
  for (size_t i = 0; i < len; i++) {
    float t = v[i] * invB;
    u[i] = u[i] + zppF32FromBits(zppF32Bits(t) ^ signs[i]);
  }
}

/* u = e in the original domain over [lo, lo + len) (step 3's u). */
static void residToOriginal(zppQuantResid_t e, size_t lo, size_t len, int block, float* u) {
  for (size_t at = 0; at < len; at += (size_t)block) {
    size_t n = len - at < (size_t)block ? len - at : (size_t)block;
    if (n == (size_t)block) {
      blockToOriginal(e, lo + at, n, u + at);
      continue;
    }
    for (size_t i = 0; i < n; i++) u[at + i] = zppQuantResidValue(e, lo + at + i);
  }
}

/* r[0..n) stored into out's residual blocks from element lo (a multiple of
 * 32), in the original domain. */
static void storeResid(const float* r, size_t n, zppQuantResid_t out, size_t lo) {
  for (size_t at = 0; at < n; at += ZPP_QUANT_RESID_BLOCK) {
    size_t len = n - at < ZPP_QUANT_RESID_BLOCK ? n - at : ZPP_QUANT_RESID_BLOCK;
    zppQuantResidBlockRef(r + at, len, out.q + lo + at, out.scale + (lo + at) / ZPP_QUANT_RESID_BLOCK);
  }
}

/* 1 where the finite block f[0..len) has a candidate for escape. */
static int hasCandidate(const float* f, size_t len, int K) {
  uint32_t r = zppQuantEscReference(f, len);
  for (size_t i = 0; i < len; i++)
    if (zppQuantEscAbove(f[i], r, K)) return 1;
  return 0;
}

/* Step 2 for group g if it qualifies: returns 0, having written nothing,
 * where it does not. */
static int groupRotatedDomain(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                              zppQuantResid_t e, zppQuantResid_t out, uint8_t* packed, size_t g) {
  const size_t bs = (size_t)block, base = g * ZPP_QUANT_ESC_GROUP;
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  if (glen % bs != 0) return 0;
  const int K = ZPP_QUANT_ESC_LOG2(bits);
  const uint32_t* signs = zppQuantRotSignMasks();
  float z[ZPP_QUANT_ESC_GROUP];
  for (size_t lo = 0; lo < glen; lo += bs) {
    float* x = z + lo;
    for (size_t i = 0; i < bs; i++) {
      size_t k = base + lo + i;
      x[i] = zppQuantLoadOne(in, dtype, k);
      if (!zppQuantResidIsRotated(e, k)) x[i] += zppQuantResidValue(e, k);
      if (zppQuantNonFinite(x[i])) return 0;
    }
    if (hasCandidate(x, bs, K)) return 0;
    for (size_t i = 0; i < bs; i++) x[i] = zppF32FromBits(zppF32Bits(x[i]) ^ signs[i]);
    zppQuantRotHadamardRef(x, bs);
    for (size_t i = 0; i < bs; i++) {
      size_t k = base + lo + i;
      if (zppQuantResidIsRotated(e, k)) x[i] += zppQuantResidValue(e, k);
      if (zppQuantNonFinite(x[i])) return 0;
    }
  }
  uint8_t* scales = packed + ZPP_QUANT_HEADER_BYTES;
  uint8_t* data = packed + zppQuantDataOffset(count, block);
  for (size_t lo = 0; lo < glen; lo += bs) {
    size_t at = base + lo, b = at / bs;
    float* w = z + lo;
    uint32_t amax = 0;
    for (size_t i = 0; i < bs; i++) {
      uint32_t m = zppF32Bits(w[i]) & 0x7fffffffu;
      if (m > amax) amax = m;
    }
    zppQuantBlockRef(w, zppFloat32, bs, bits, scales, b, data, at);
    float s = zppQuantLoadScale(scales, b);
    if (amax < ZPP_QUANT_TINY_BITS) {
      zppQuantResidTinyRotatedRef(w, bs, bits, data, s, at, out);
      continue;
    }
    const float t = s / 254.0f, inv = 254.0f / s;
    for (size_t i = 0; i < bs; i++) {
      float r = w[i] - (float)zppQuantGetQ(data, bits, at + i) * s;
      out.q[at + i] = (int8_t)zppQuantRne(r * inv);
    }
    for (size_t k = 0; k < bs; k += ZPP_QUANT_RESID_BLOCK)
      out.scale[(at + k) / ZPP_QUANT_RESID_BLOCK] =
          zppF32FromBits(zppF32Bits(t) | ZPP_QUANT_RESID_ROTATED);
  }
  zppQuantEscClearTable(packed + zppQuantEscOffset(count, bits, block) + g * ZPP_QUANT_ESC_TABLE_BYTES);
  return 1;
}

/* Step 3 for group g: x = g + u encoded as zppQuantizeEx would, decoded,
 * and the new residual x - y (u where that is not finite). x and y: the
 * caller's scratch, at the group's own elements. Returns the marker flag. */
static zppResult_t groupOriginalDomain(const void* in, zppDataType_t dtype, size_t count, int bits,
                                       int block, zppQuantResid_t e, zppQuantResid_t out,
                                       uint8_t* packed, size_t g, float* x, float* y, int* markers) {
  const size_t base = g * ZPP_QUANT_ESC_GROUP;
  const size_t glen = count - base < ZPP_QUANT_ESC_GROUP ? count - base : ZPP_QUANT_ESC_GROUP;
  float u[ZPP_QUANT_ESC_GROUP];
  residToOriginal(e, base, glen, block, u);
  for (size_t i = 0; i < glen; i++) x[base + i] = zppQuantLoadOne(in, dtype, base + i) + u[i];
  *markers = zppQuantEscEncodeGroup(x, zppFloat32, count, bits, block, packed, g);
  zppQuantRotateGroupRef(x, zppFloat32, count, bits, block, packed, g);
  ZPPCHECK(zppQuantDecodeGroupEx(packed, count, bits, block, g, y));
  float r[ZPP_QUANT_ESC_GROUP];
  for (size_t i = 0; i < glen; i++) {
    float d = x[base + i] - y[base + i];
    r[i] = zppQuantNonFinite(d) ? u[i] : d;
  }
  storeResid(r, glen, out, base);
  return zppSuccess;
}

zppResult_t zppQuantizeExFeedback(const void* in, zppDataType_t dtype, size_t count, int bits,
                                  int block, zppQuantResid_t e, zppQuantResid_t out, void* packed,
                                  float* scratch) {
  const char* name = "zppQuantizeExFeedback";
  ZPPCHECK(zppQuantFrame(name, in, dtype, count, bits, block, packed));
  if (count > 0 &&
      (e.q == NULL || e.scale == NULL || out.q == NULL || out.scale == NULL || scratch == NULL))
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: a residual or the scratch is NULL", name);
  uint8_t* p = (uint8_t*)packed;
  p[6] |= ZPP_QUANT_FLAG_ROTATED;
  const zppQuantRotImpl_t* rk = zppQuantRotImplFor(bits);
  for (size_t g = 0; g < zppQuantNumGroups(count); g++) {
    if (rk != NULL && rk->encodeGroupFeedback != NULL &&
        rk->encodeGroupFeedback(in, dtype, count, bits, block, e, out, p, g))
      continue;
    if (groupRotatedDomain(in, dtype, count, bits, block, e, out, p, g)) continue;
    int markers = 0;
    ZPPCHECK(groupOriginalDomain(in, dtype, count, bits, block, e, out, p, g, scratch, scratch + count,
                                 &markers));
    if (markers) p[6] |= ZPP_QUANT_FLAG_MARKERS;
  }
  return zppSuccess;
}

void zppQuantResidUnrotate(zppQuantResid_t r, size_t n, int block) {
  float u[ZPP_QUANT_MAX_BLOCK];
  for (size_t lo = 0; lo + (size_t)block <= n; lo += (size_t)block) {
    int any = 0;
    for (size_t i = 0; i < (size_t)block; i += ZPP_QUANT_RESID_BLOCK)
      any |= zppQuantResidIsRotated(r, lo + i);
    if (!any) continue;
    blockToOriginal(r, lo, (size_t)block, u);
    storeResid(u, (size_t)block, r, lo);
  }
}
