/* The host streams' public calls: check the handle, then ask the executor
 * (lib/executor.c), which owns what a stream is. */
#include "zpp.h"
#include "check.h"
#include "lib/executor.h"

zppResult_t zppHostStreamCreate(zppHostStream_t* stream) {
  ZPP_ARGCHECK(stream != NULL, "zppHostStreamCreate: stream pointer is NULL");
  return zppExecStreamCreate(stream);
}

zppResult_t zppHostStreamSynchronize(zppHostStream_t stream) {
  ZPP_ARGCHECK(zppExecStreamIsValid(stream), "zppHostStreamSynchronize: %p is not a live host stream",
               (void*)stream);
  return zppExecStreamSynchronize(stream);
}

zppResult_t zppHostStreamQuery(zppHostStream_t stream) {
  ZPP_ARGCHECK(zppExecStreamIsValid(stream), "zppHostStreamQuery: %p is not a live host stream",
               (void*)stream);
  return zppExecStreamQuery(stream);
}

zppResult_t zppHostStreamDestroy(zppHostStream_t stream) {
  if (stream == NULL) return zppSuccess;
  /* Checked again by the executor as it unregisters it: of two destroys
   * racing, exactly one frees it. */
  ZPP_ARGCHECK(zppExecStreamIsValid(stream), "zppHostStreamDestroy: %p is not a live host stream",
               (void*)stream);
  return zppExecStreamDestroy(stream);
}
