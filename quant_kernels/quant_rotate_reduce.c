/* Reductions over segments of either kind, rotated or plain: qgZ's sums
 * when rotation is on (zpp_quant.h, "Reductions of rotated segments").
 *
 * Each input is decoded in full to fp32 (zppDequantizeEx: the inverse
 * transform, the signs, the escapes in their places), then the inputs are
 * added element by element in input order, then the sum is divided and
 * stored (zppDequantizeSumEx) or quantized again (zppQuantReduceRequantEx,
 * rotated when asked). One inverse per input, not one per sum: this is the
 * simple order, kept as the reference that a rotated-domain sum (one inverse
 * at the end) must be measured against. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "quant_kernels/zpp_quant.h"

#include "check.h"
#include "quant_kernels/quant_impl.h"
#include "quant_kernels/quant_ref.h"

static zppResult_t checkCommon(const char* fn, const void* packed, size_t stride, int n, size_t count,
                               int bits, int block) {
  if (!zppQuantValidParams(bits, block))
    ZPP_FAIL(zppInvalidArgument, QUANT,
             "%s: bits %d / block %d: expected 4 or 8 and a power of two in [%d, %d]", fn, bits, block,
             ZPP_QUANT_MIN_BLOCK, ZPP_QUANT_MAX_BLOCK);
  if (n < 1) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: n %d: at least one input", fn, n);
  if (packed == NULL) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: packed is NULL", fn);
  size_t seg = zppQuantPackedSize(count, bits, block);
  if (seg == 0) ZPP_FAIL(zppInvalidArgument, QUANT, "%s: count %zu too large", fn, count);
  if (n > 1 && stride < seg)
    ZPP_FAIL(zppInvalidArgument, QUANT, "%s: stride %zu is below the segment size %zu", fn, stride,
             seg);
  return zppSuccess;
}

/* acc = ((0 + y_0) + y_1) + ... + y_{n-1}, y_k input k decoded to fp32. */
static zppResult_t sumInputs(const char* fn, const void* packed, size_t stride, int n, size_t count,
                             int bits, int block, float** accOut) {
  *accOut = NULL;
  float* acc = calloc(count ? count : 1, sizeof(float));
  float* y = malloc((count ? count : 1) * sizeof(float));
  if (acc == NULL || y == NULL) {
    free(acc);
    free(y);
    ZPP_FAIL(zppSystemError, QUANT, "%s: out of memory for %zu elements", fn, count);
  }
  for (int k = 0; k < n; k++) {
    zppResult_t res =
        zppDequantizeEx((const uint8_t*)packed + (size_t)k * stride, count, bits, block, y, zppFloat32);
    if (res != zppSuccess) {
      free(acc);
      free(y);
      ZPP_FAIL(res, QUANT, "%s: input %d of %d: its segment does not decode (see above)", fn, k, n);
    }
    for (size_t i = 0; i < count; i++) acc[i] = acc[i] + y[i];
  }
  free(y);
  *accOut = acc;
  return zppSuccess;
}

zppResult_t zppDequantizeSumEx(const void* packed, size_t stride, int n, size_t count, int bits,
                               int block, float divisor, void* out, zppDataType_t dtype) {
  const char* fn = "zppDequantizeSumEx";
  ZPP_ARGCHECK(dtype == zppFloat32 || dtype == zppFloat16 || dtype == zppBfloat16,
               "%s: dtype %d: expected fp32, fp16 or bf16", fn, (int)dtype);
  ZPP_ARGCHECK(out != NULL || count == 0, "%s: out is NULL with count %zu", fn, count);
  ZPP_ARGCHECK(isfinite(divisor) && divisor != 0.0f, "%s: divisor %g must be finite and non-zero", fn,
               (double)divisor);
  ZPPCHECK(checkCommon(fn, packed, stride, n, count, bits, block));
  float* acc = NULL;
  ZPPCHECK(sumInputs(fn, packed, stride, n, count, bits, block, &acc));
  for (size_t i = 0; i < count; i++) zppQuantStoreOne(out, dtype, i, acc[i] / divisor);
  free(acc);
  return zppSuccess;
}

zppResult_t zppQuantReduceRequantEx(const void* packed, size_t stride, int n, size_t count, int bits_in,
                                    int block_in, int bits_out, int block_out, unsigned flags_out,
                                    void* packed_out) {
  const char* fn = "zppQuantReduceRequantEx";
  ZPP_ARGCHECK(packed_out != NULL, "%s: packed_out is NULL", fn);
  ZPPCHECK(checkCommon(fn, packed, stride, n, count, bits_in, block_in));
  /* Every input is decoded before the output is written: an output that
   * overlaps the inputs is still refused, as by zppQuantReduceRequant. */
  uintptr_t inLo = (uintptr_t)packed;
  uintptr_t inHi = inLo + (size_t)(n - 1) * stride + zppQuantPackedSize(count, bits_in, block_in);
  uintptr_t outLo = (uintptr_t)packed_out;
  uintptr_t outHi = outLo + zppQuantPackedSize(count, bits_out, block_out);
  ZPP_ARGCHECK(!(outLo < inHi && inLo < outHi), "%s: packed_out overlaps the inputs", fn);
  float* acc = NULL;
  ZPPCHECK(sumInputs(fn, packed, stride, n, count, bits_in, block_in, &acc));
  zppResult_t res = zppQuantizeEx(acc, zppFloat32, count, bits_out, block_out, flags_out, packed_out);
  free(acc);
  return res;
}
