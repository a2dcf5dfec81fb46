/*
 * Element-wise reductions for every zpp data type. fp16 and bf16 are
 * widened to fp32, combined, and rounded back to nearest even (each its own
 * format: bf16 is never read as fp16). Integers wrap on overflow. Max and
 * min propagate NaN, so an overflow upstream stays visible.
 */
#ifndef ZPP_REDUCE_OPS_H_
#define ZPP_REDUCE_OPS_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

/* dst[i] = a[i] op b[i]; dst may be a or b (not a partial overlap). zppAvg
 * sums: the division comes once, at the end (zppRedFinishAvg). */
void zppRedApply(void* dst, const void* a, const void* b, size_t count, zppDataType_t type,
                 zppRedOp_t op);

/* buf[i] /= nranks (integer division for integer types). */
void zppRedFinishAvg(void* buf, size_t count, zppDataType_t type, int nranks);

#endif /* ZPP_REDUCE_OPS_H_ */
