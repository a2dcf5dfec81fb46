/* Names and sizes of zpp's enumerations (names.h). */
#include "names.h"

#include <string.h>
#include <strings.h>

static const struct {
  const char* name;
  const char* shortName;
  size_t size;
} dtypes[zppNumTypes] = {
    [zppInt8] = {"int8", "int8", 1},       [zppUint8] = {"uint8", "uint8", 1},
    [zppInt32] = {"int32", "int32", 4},    [zppUint32] = {"uint32", "uint32", 4},
    [zppInt64] = {"int64", "int64", 8},    [zppUint64] = {"uint64", "uint64", 8},
    [zppFloat16] = {"float16", "fp16", 2}, [zppFloat32] = {"float32", "fp32", 4},
    [zppFloat64] = {"float64", "fp64", 8}, [zppBfloat16] = {"bfloat16", "bf16", 2},
};

/* The C and NCCL names beside ours. */
static const struct {
  const char* name;
  zppDataType_t type;
} dtypeAliases[] = {{"char", zppInt8},
                    {"int", zppInt32},
                    {"half", zppFloat16},
                    {"float", zppFloat32},
                    {"double", zppFloat64}};

static int validType(zppDataType_t t) { return (int)t >= 0 && t < zppNumTypes; }

size_t zppDtypeSize(zppDataType_t type) { return validType(type) ? dtypes[type].size : 0; }
const char* zppDtypeName(zppDataType_t type) { return validType(type) ? dtypes[type].name : "?"; }
const char* zppDtypeShortName(zppDataType_t type) {
  return validType(type) ? dtypes[type].shortName : "?";
}

int zppDtypeParse(const char* text, zppDataType_t* type) {
  if (text == NULL) return -1;
  for (int t = 0; t < zppNumTypes; t++)
    if (strcasecmp(text, dtypes[t].name) == 0 || strcasecmp(text, dtypes[t].shortName) == 0) {
      *type = (zppDataType_t)t;
      return 0;
    }
  for (size_t i = 0; i < sizeof(dtypeAliases) / sizeof(dtypeAliases[0]); i++)
    if (strcasecmp(text, dtypeAliases[i].name) == 0) {
      *type = dtypeAliases[i].type;
      return 0;
    }
  return -1;
}

static const char* const redOps[zppNumOps] = {"sum", "prod", "max", "min", "avg"};

const char* zppRedOpName(zppRedOp_t op) { return (int)op >= 0 && op < zppNumOps ? redOps[op] : "?"; }

int zppRedOpParse(const char* text, zppRedOp_t* op) {
  if (text == NULL) return -1;
  for (int o = 0; o < zppNumOps; o++)
    if (strcasecmp(text, redOps[o]) == 0) {
      *op = (zppRedOp_t)o;
      return 0;
    }
  return -1;
}

static const struct {
  const char* name;
  const char* call;
} kinds[zppNumOpKinds] = {
    [zppOpAllGather] = {"allgather", "AllGather"},
    [zppOpReduceScatter] = {"reducescatter", "ReduceScatter"},
    [zppOpAllReduce] = {"allreduce", "AllReduce"},
    [zppOpAllToAll] = {"alltoall", "AllToAll"},
    [zppOpBroadcast] = {"broadcast", "Broadcast"},
    [zppOpQwZ] = {"qwz", "QwZ"},
    [zppOpHpZ] = {"hpz", "HpZ"},
    [zppOpQgZ] = {"qgz", "QgZ"},
    [zppOpReduce] = {"reduce", "Reduce"},
    [zppOpGather] = {"gather", "Gather"},
    [zppOpScatter] = {"scatter", "Scatter"},
    [zppOpAllToAllv] = {"alltoallv", "AllToAllv"},
    [zppOpSendRecv] = {"sendrecv", "SendRecv"},
};

static int validKind(zppOpKind_t k) { return (int)k >= 0 && k < zppNumOpKinds; }

const char* zppOpKindString(zppOpKind_t kind) { return validKind(kind) ? kinds[kind].name : "unknown"; }
const char* zppOpKindCallName(zppOpKind_t kind) { return validKind(kind) ? kinds[kind].call : "?"; }

const char* zppResultString(zppResult_t result) {
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
