/*
 * zpp: communication-compressing collectives for ZeRO-style sharded training.
 *
 * The one public header. The calls, result codes, data types and reduction
 * operations mirror NCCL's (same argument order, same numeric values), so that
 * a trainer written against NCCL changes a prefix, not its structure.
 */
#ifndef ZPP_H_
#define ZPP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZPP_MAJOR 0
#define ZPP_MINOR 1
#define ZPP_PATCH 0
/* Same encoding as NCCL_VERSION_CODE for 2.9+: major*10000 + minor*100 + patch. */
#define ZPP_VERSION(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define ZPP_VERSION_CODE ZPP_VERSION(ZPP_MAJOR, ZPP_MINOR, ZPP_PATCH)

#if defined(__GNUC__)
#define ZPP_API __attribute__((visibility("default")))
#else
#define ZPP_API
#endif

/* Result codes: numerically identical to ncclResult_t. */
typedef enum {
  zppSuccess = 0,
  zppUnhandledCudaError = 1,
  zppSystemError = 2,
  zppInternalError = 3,
  zppInvalidArgument = 4,
  zppInvalidUsage = 5,
  zppRemoteError = 6,
  zppInProgress = 7,
  zppNumResults = 8
} zppResult_t;

/* Data types: numerically identical to ncclDataType_t. */
typedef enum {
  zppInt8 = 0, zppChar = 0,
  zppUint8 = 1,
  zppInt32 = 2, zppInt = 2,
  zppUint32 = 3,
  zppInt64 = 4,
  zppUint64 = 5,
  zppFloat16 = 6, zppHalf = 6,
  zppFloat32 = 7, zppFloat = 7,
  zppFloat64 = 8, zppDouble = 8,
  zppBfloat16 = 9,
  zppNumTypes = 10
} zppDataType_t;

/* Reduction operations: numerically identical to ncclRedOp_t. */
typedef enum {
  zppSum = 0,
  zppProd = 1,
  zppMax = 2,
  zppMin = 3,
  zppAvg = 4,
  zppNumOps = 5
} zppRedOp_t;

/* Writes ZPP_VERSION_CODE of the library actually loaded (may differ from
 * the header the caller compiled against). */
ZPP_API zppResult_t zppGetVersion(int* version);

/* A static, human-readable description of a result code; never NULL. */
ZPP_API const char* zppGetErrorString(zppResult_t result);

/* Size in bytes of one element of a data type, 0 for an invalid type. */
ZPP_API size_t zppTypeSize(zppDataType_t datatype);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_H_ */
