/* Version, result strings and type sizes: the parts of the public API that
 * need no communicator. */
#include "zpp.h"

zppResult_t zppGetVersion(int* version) {
  if (version == NULL) return zppInvalidArgument;
  *version = ZPP_VERSION_CODE;
  return zppSuccess;
}

const char* zppGetErrorString(zppResult_t result) {
  switch (result) {
    case zppSuccess: return "no error";
    case zppUnhandledCudaError: return "unhandled cuda error (run with ZPP_DEBUG=INFO for details)";
    case zppSystemError: return "unhandled system error (run with ZPP_DEBUG=INFO for details)";
    case zppInternalError: return "internal error - please report this issue to the zpp developers";
    case zppInvalidArgument: return "invalid argument (run with ZPP_DEBUG=WARN for details)";
    case zppInvalidUsage: return "invalid usage (run with ZPP_DEBUG=WARN for details)";
    case zppRemoteError: return "remote process exited, timed out or there was a network error";
    case zppInProgress: return "zpp operation in progress";
    default: return "unknown result code";
  }
}

size_t zppTypeSize(zppDataType_t datatype) {
  switch (datatype) {
    case zppInt8:
    case zppUint8: return 1;
    case zppFloat16:
    case zppBfloat16: return 2;
    case zppInt32:
    case zppUint32:
    case zppFloat32: return 4;
    case zppInt64:
    case zppUint64:
    case zppFloat64: return 8;
    default: return 0;
  }
}
