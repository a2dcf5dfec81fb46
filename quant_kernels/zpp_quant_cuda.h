/*
 * CUDA versions of the block codecs in zpp_quant.h. Internal API (not
 * installed), callable from C. Only built when ZPP_HAVE_CUDA.
 *
 * Same arguments as the CPU functions, plus the caller's stream; the result
 * is byte-for-byte what the CPU path writes (zpp_quant.h is the spec: layout,
 * nibble order, the exact fp32 operations), NaN payloads excepted.
 *
 * - All data pointers (in, out, acc, packed) are device pointers (or managed
 *   / mapped memory the device can reach).
 * - Stream-ordered and asynchronous: every call only validates its
 *   arguments and enqueues kernels on `stream`; nothing allocates, nothing
 *   synchronizes, so the calls may be captured in a CUDA graph. The return
 *   code covers argument errors and launch errors; faults while a kernel
 *   runs surface later, on the stream, as for any CUDA work.
 * - Alignment: element pointers need their natural alignment (4 bytes for
 *   fp32, 2 for fp16 / bf16); 16-byte aligned ones take the vectorized path.
 *   Packed pointers and strides must be multiples of 4 bytes. Segments are
 *   multiples of 16 bytes long, so any whole number of segments laid end to
 *   end in a cudaMalloc buffer qualifies.
 * - Headers: the CPU functions check a segment's header on the host and
 *   refuse a mismatch (zppInvalidUsage). A kernel cannot return an error
 *   without the host waiting for it, so the decoding kernels check every
 *   input header on the device instead and decode a segment whose header
 *   does not match (count, bits, block) as all NaN: a mismatched compression
 *   setting across ranks then shows up as NaN where a trainer looks
 *   (overflow check, loss) rather than as silently wrong numbers. Its
 *   escape table is ignored then, and the header's markers flag is the one
 *   bit of the header that may differ.
 * - Escapes and markers (zpp_quant.h, "Escapes") are written and decoded as
 *   the CPU does, within the same contract: every encoding call enqueues one
 *   more kernel that writes the escape tables (a scan of the packed data;
 *   a group holding an outlier is re-encoded by one thread, slowly, and such
 *   groups are expected to be rare). zppQuantTakeEscapeCounts does not count
 *   these calls' escapes: that would need a device counter read back.
 */
#ifndef ZPP_QUANT_CUDA_H_
#define ZPP_QUANT_CUDA_H_

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "zpp_quant.h"

zppResult_t zppQuantizeCuda(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                            void* packed, cudaStream_t stream);

/* zppQuantizeEx and zppDequantizeEx on the device (zpp_quant.h, "Rotation";
 * quant_rotate_cuda.cu): flags 0 or ZPP_QUANT_ROTATE; the decoder takes
 * segments of either kind, rotated or plain. The plain decoders and
 * reductions here decode a rotated segment as all NaN (its header does not
 * match theirs); the Ex reductions below take both kinds. */
zppResult_t zppQuantizeExCuda(const void* in, zppDataType_t dtype, size_t count, int bits, int block,
                              unsigned flags, void* packed, cudaStream_t stream);
zppResult_t zppDequantizeExCuda(const void* packed, size_t count, int bits, int block, void* out,
                                zppDataType_t dtype, cudaStream_t stream);

/* zppDequantizeSumEx and zppQuantReduceRequantEx on the device (zpp_quant.h,
 * "Reductions of rotated segments"; quant_rotate_reduce_cuda.cu): inputs of
 * either kind, rotated or plain, summed in the order qgZ uses
 * (ZPP_QUANT_SUM_QGZ), byte for byte the host's; flags_out 0 or
 * ZPP_QUANT_ROTATE. The Order variants take the order as the host's
 * zppDequantizeSumOrder / zppQuantReduceRequantOrder do. */
zppResult_t zppDequantizeSumExCuda(const void* packed, size_t stride, int n, size_t count, int bits,
                                   int block, float divisor, void* out, zppDataType_t dtype,
                                   cudaStream_t stream);
zppResult_t zppQuantReduceRequantExCuda(const void* packed, size_t stride, int n, size_t count,
                                        int bits_in, int block_in, int bits_out, int block_out,
                                        unsigned flags_out, void* packed_out, cudaStream_t stream);
zppResult_t zppDequantizeSumOrderCuda(const void* packed, size_t stride, int n, size_t count, int bits,
                                      int block, float divisor, void* out, zppDataType_t dtype,
                                      zppQuantSumOrder_t order, cudaStream_t stream);
zppResult_t zppQuantReduceRequantOrderCuda(const void* packed, size_t stride, int n, size_t count,
                                           int bits_in, int block_in, int bits_out, int block_out,
                                           unsigned flags_out, zppQuantSumOrder_t order,
                                           void* packed_out, cudaStream_t stream);

zppResult_t zppDequantizeCuda(const void* packed, size_t count, int bits, int block, void* out,
                              zppDataType_t dtype, cudaStream_t stream);

zppResult_t zppDequantizeAccumulateCuda(const void* packed, size_t stride, int n, size_t count,
                                        int bits, int block, float* acc, int accumulate,
                                        cudaStream_t stream);

zppResult_t zppDequantizeSumCuda(const void* packed, size_t stride, int n, size_t count, int bits,
                                 int block, float divisor, void* out, zppDataType_t dtype,
                                 cudaStream_t stream);

zppResult_t zppQuantReduceRequantCuda(const void* packed, size_t stride, int n, size_t count,
                                      int bits_in, int block_in, int bits_out, int block_out,
                                      void* packed_out, cudaStream_t stream);

zppResult_t zppQuantizeReorderedCuda(const void* in, zppDataType_t dtype, size_t part_count,
                                     size_t part_stride, int nparts, int local_size, int bits,
                                     int block, void* packed, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_QUANT_CUDA_H_ */
