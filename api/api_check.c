/* The argument rules the entry points share (api_check.h). */
#include "api/api_check.h"
#include "api/p2p_api.h"

#include <stdint.h>

#include "check.h"
#include "names.h"
#include "lib/executor.h"
#include "lib/memtype.h"
#include "collectives/coll_device.h"

int zppApiOverlaps(const void* a, size_t na, const void* b, size_t nb) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return na && nb && x < y + nb && y < x + na;
}

zppResult_t zppApiCheckCount(const char* name, size_t count, zppDataType_t type, int nranks) {
  size_t ts = zppDtypeSize(type);
  if (count > SIZE_MAX / ts / (size_t)nranks || count * ts * (size_t)nranks > (size_t)PTRDIFF_MAX)
    ZPP_FAIL(zppInvalidArgument, ALL, "%s: count %zu of %zu-byte elements on %d ranks overflows", name,
             count, ts, nranks);
  return zppSuccess;
}

zppResult_t zppApiCheckWhere(const char* name, const void* a, const void* b, zppStream_t stream,
                             int* device) {
  /* Every collective entry point passes here before it issues anything. */
  ZPPCHECK(zppApiCheckNoGroup(name));
  return zppApiCheckWhereAny(name, a, b, stream, device);
}

zppResult_t zppApiCheckWhereAny(const char* name, const void* a, const void* b, zppStream_t stream,
                                int* device) {
  int da = a ? zppMemIsDevice(a) : -1, db = b ? zppMemIsDevice(b) : -1;
  if (da < 0 && db < 0 && *device < 0) {
    /* Nothing to move and nothing known: any stream will do (NCCL's count 0). */
    *device = 0;
    return zppSuccess;
  }
  if (da >= 0 && db >= 0 && da != db)
    ZPP_FAIL(zppInvalidUsage, ALL, "%s: one buffer is device memory and the other host memory", name);
  int dev = da >= 0 ? da : (db >= 0 ? db : (*device > 0));
  if (*device >= 0 && dev != *device)
    ZPP_FAIL(zppInvalidUsage, ALL, "%s: some buffers are in device memory, others in host memory",
             name);
  int isHostStream = zppExecStreamIsValid(stream);
  if (dev) {
    ZPP_USAGECHECK(!isHostStream, "%s: device buffers need a cudaStream_t, not a zppHostStream_t",
                   name);
    ZPP_USAGECHECK(zppDeviceCollAvailable(),
                   "%s: device buffers need NCCL, and this zpp was built without it", name);
  } else {
    ZPP_ARGCHECK(stream == NULL || isHostStream,
                 "%s: host buffers need stream NULL or a zppHostStream_t (got %p: a cudaStream_t, or "
                 "a destroyed host stream?)",
                 name, stream);
  }
  *device = dev;
  return zppSuccess;
}
