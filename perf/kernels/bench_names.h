// What zpp-bench-kernels' two halves (bench_kernels.cpp, the CPU codecs, and
// bench_kernels_gpu.cu, the CUDA ones, in the same binary) name alike, so
// that a row of one has the same name as the other's with "cuda" for the
// implementation.
#ifndef ZPP_PERF_BENCH_NAMES_H_
#define ZPP_PERF_BENCH_NAMES_H_

#include <cstddef>
#include <cstdio>
#include <string>

#include "quant_kernels/zpp_quant.h"

namespace benchnames {

// 4MiB, 256KiB, 1000B.
inline std::string SizeName(size_t bytes) {
  char buf[32];
  if (bytes % (1 << 20) == 0)
    std::snprintf(buf, sizeof buf, "%zuMiB", bytes >> 20);
  else if (bytes % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%zuKiB", bytes >> 10);
  else
    std::snprintf(buf, sizeof buf, "%zuB", bytes);
  return buf;
}

// The reductions' inputs (qgZ's steps over n int4 segments), rot: 0 plain;
// 1 or 2 rotated, summed in the simple order (one inverse per input) or in
// the rotated domain (one per block of the sum); 3 (requant only) the direct
// order (the sums r quantized as the output's w, no transform): zpp_quant.h,
// "Reductions of rotated segments" (the output rotated too).
// What follows "reduce_requant" or "dequantize_sum" in the row's name:
inline const char* RotSuffix(int rot) {
  static const char* const kSuffix[4] = {"/", "-rot-simple/", "-rot-rdomain/", "-rot-direct/"};
  return kSuffix[rot];
}

// The order the rotated rows pass to the Order entry points.
inline zppQuantSumOrder_t RotOrder(int rot) {
  return rot == 3   ? ZPP_QUANT_SUM_ROTATED_DIRECT
         : rot == 2 ? ZPP_QUANT_SUM_ROTATED_DOMAIN
                    : ZPP_QUANT_SUM_SIMPLE;
}

}  // namespace benchnames

#endif  // ZPP_PERF_BENCH_NAMES_H_
