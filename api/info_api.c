/* The public calls that need no communicator: version, result strings, type
 * sizes, collective names (core/names.c holds the tables). */
#include "zpp.h"
#include "names.h"

zppResult_t zppGetVersion(int* version) {
  if (version == NULL) return zppInvalidArgument;
  *version = ZPP_VERSION_CODE;
  return zppSuccess;
}

const char* zppGetErrorString(zppResult_t result) { return zppResultString(result); }

size_t zppTypeSize(zppDataType_t datatype) { return zppDtypeSize(datatype); }

const char* zppOpKindName(zppOpKind_t kind) { return zppOpKindString(kind); }
