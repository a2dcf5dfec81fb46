/*
 * The one table of names and sizes of zpp's enumerations: data types,
 * reduction ops, collective kinds and result codes. The library's messages,
 * the public zppTypeSize / zppGetErrorString / zppOpKindName (api/) and the
 * tools' parsers all read these, so a name is written once.
 */
#ifndef ZPP_CORE_NAMES_H_
#define ZPP_CORE_NAMES_H_

#include <stddef.h>

#include "zpp.h"

#ifdef __cplusplus
extern "C" { /* the C++ benchmarks and the CUDA tests read it too */
#endif

/* Bytes of one element; 0 for a value that is not a zppDataType_t. */
size_t zppDtypeSize(zppDataType_t type);
/* "bfloat16", as NCCL spells its types; "?" for an invalid value. */
const char* zppDtypeName(zppDataType_t type);
/* "bf16", "fp16", "fp32", "fp64"; the integer types as zppDtypeName. */
const char* zppDtypeShortName(zppDataType_t type);
/* Any spelling people use: "bfloat16", "bf16", "half", "fp16", "float",
 * "fp32", "double", "int"... 0 on success, -1 when unknown. */
int zppDtypeParse(const char* text, zppDataType_t* type);

/* "sum", "prod", "max", "min", "avg"; "?" for an invalid value. */
const char* zppRedOpName(zppRedOp_t op);
int zppRedOpParse(const char* text, zppRedOp_t* op);

/* "allgather" ... "qgz" (zppOpKindName's), and "AllGather" ... "QgZ" (how
 * a call is named in messages); "unknown" / "?" for an invalid value. */
const char* zppOpKindString(zppOpKind_t kind);
const char* zppOpKindCallName(zppOpKind_t kind);

/* zppGetErrorString's text. */
const char* zppResultString(zppResult_t result);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_CORE_NAMES_H_ */
