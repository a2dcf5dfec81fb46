/*
 * ZeRO++ on device buffers (internal; built with NCCL only): the CUDA codecs
 * and NCCL grouped sends/receives, stream-ordered on the caller's
 * cudaStream_t, with two internal streams (codec kernels, NCCL) and events so
 * that the chunks of one call overlap. Nothing blocks the host.
 *
 * NOT YET RUN ON A GPU: this path compiles in CI but no machine this was
 * written on had a GPU. The host path (zeropp_host.h) is the tested one.
 * Arguments are validated by the caller (api/zeropp_api.c).
 */
#ifndef ZPP_ZEROPP_DEVICE_H_
#define ZPP_ZEROPP_DEVICE_H_

#include <stddef.h>

#include "zpp.h"
#include "zeropp.h"

struct zppComm;

/* qwZ: chunks of whole blocks; per chunk, quantize the own chunk, one
 * in-place ncclAllGather of the packed chunks (data and scales in one
 * buffer), decode every rank's chunk. Bit-identical to the host path.
 * flags ZPP_QUANT_ROTATE: the rotated codec (zppQuantizeExCuda). */
zppResult_t zppZeroppDeviceQwz(struct zppComm* comm, const void* send, void* recv, size_t count,
                               zppDataType_t type, int bits, int block, unsigned flags, void* stream);

/* qgZ: per tensor, chunks through slice-reordered quantization, the
 * intra-node and inter-node all-to-alls (ncclSend/ncclRecv in groups) and
 * the fused reduce-requantize, pipelined over three buffer slots. Needs
 * nodes of equal size. Bit-identical to the host path. args->flags
 * ZPP_QUANT_ROTATE: each partition quantized rotated (zppQuantizeExCuda),
 * the reductions of rotated segments (zppQuantReduceRequantExCuda,
 * zppDequantizeSumExCuda) in the order the host path uses. */
zppResult_t zppZeroppDeviceQgz(struct zppComm* comm, const zppQgzArgs_t* args, void* stream);

#endif /* ZPP_ZEROPP_DEVICE_H_ */
