/*
 * Helpers shared by the collective tests: exact inputs and expected values
 * for every data type and reduction, and small launch utilities.
 *
 * Inputs are small integers (|v| <= 6; products of +-1 and 2), so that every
 * summation order gives the same, exactly representable result in every
 * type (int8 and bf16 included) for up to 8 ranks; results are compared
 * bit for bit.
 */
#ifndef ZPP_COLL_TESTLIB_H_
#define ZPP_COLL_TESTLIB_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"
#include "clock.h"

int collTestIsSigned(zppDataType_t t);
const char* collTestTypeName(zppDataType_t t);
const char* collTestOpName(zppRedOp_t op);

/* The value rank r contributes at index i for op (seed varies per call). */
int64_t collTestValue(zppDataType_t t, zppRedOp_t op, int r, size_t i, int seed);
/* Writes value v (a small integer) in type t. */
void collTestEncode(zppDataType_t t, int64_t v, void* dst);
/* Writes op over the n values contributed at index i (ranks 0..n-1,
 * element index i of the full input) in type t, as zpp must produce it. */
void collTestExpect(zppDataType_t t, zppRedOp_t op, int n, size_t i, int seed, void* dst);
/* Fills count elements of rank r's input starting at element index first. */
void collTestFill(zppDataType_t t, zppRedOp_t op, int r, size_t first, size_t count, int seed,
                  void* dst);

#endif /* ZPP_COLL_TESTLIB_H_ */
