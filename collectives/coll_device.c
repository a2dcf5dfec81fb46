/* The device branch of every collective (coll_device.h). */
#include "coll_device.h"

#include "check.h"
#include "zpp_build_config.h"

#if ZPP_HAVE_NCCL
#include <stdint.h>

#include "names.h"
#include "lib/comm.h"
#include "lib/stats.h"
#include "lib/transport/nccl.h"
#include "lib/transport/transports.h"
#include "zeropp_device.h"

int zppDeviceCollAvailable(void) { return 1; }

/* The bytes a queued plain call hands over, by lib/stats.h's rules (exact
 * for the ones nccl.c runs as grouped ncclSend/ncclRecv, logical for NCCL's
 * own collectives). */
static void countPlain(struct zppComm* comm, const zppHostColl_t* c) {
  const uint64_t s = zppDtypeSize(c->type), n = c->count;
  const int W = comm->nranks, me = comm->rank;
  switch (c->kind) {
    case zppOpAllGather:
    case zppOpReduceScatter:
    case zppOpAllToAll: zppStatsCountDevice(comm, c->kind, ZPP_STATS_EVERY_PEER, n * s); break;
    case zppOpAllReduce: {
      const uint64_t base = n / (uint64_t)W, extra = n % (uint64_t)W;
      const uint64_t mine = base + ((uint64_t)me < extra);
      for (int p = 0; p < W; p++)
        zppStatsCountDevice(comm, c->kind, p, (base + ((uint64_t)p < extra) + mine) * s);
      break;
    }
    case zppOpBroadcast:
    case zppOpScatter:
      if (me == c->root) zppStatsCountDevice(comm, c->kind, ZPP_STATS_EVERY_PEER, n * s);
      break;
    case zppOpReduce:
    case zppOpGather: zppStatsCountDevice(comm, c->kind, c->root, n * s); break;
    case zppOpAllToAllv:
      for (int p = 0; p < W; p++) zppStatsCountDevice(comm, c->kind, p, c->sendcounts[p] * s);
      break;
    default: break;
  }
}

static zppResult_t issuePlain(struct zppComm* comm, struct zppNccl* nccl, const zppHostColl_t* c,
                              void* stream) {
  switch (c->kind) {
    case zppOpAllGather:
      return zppNcclAllGather(nccl, c->sendbuff, c->recvbuff, c->count, c->type, stream);
    case zppOpReduceScatter:
      return zppNcclReduceScatter(nccl, c->sendbuff, c->recvbuff, c->count, c->type, c->op, stream);
    case zppOpAllReduce:
      return zppNcclAllReduce(nccl, c->sendbuff, c->recvbuff, c->count, c->type, c->op, stream);
    case zppOpAllToAll:
      return zppNcclAllToAll(nccl, c->sendbuff, c->recvbuff, c->count, c->type, stream);
    case zppOpBroadcast:
      return zppNcclBroadcast(nccl, c->sendbuff, c->recvbuff, c->count, c->type, c->root, stream);
    case zppOpReduce:
      return zppNcclReduce(nccl, c->sendbuff, c->recvbuff, c->count, c->type, c->op, c->root, stream);
    case zppOpGather:
      return zppNcclGather(nccl, c->sendbuff, c->recvbuff, c->count, c->type, c->root, stream);
    case zppOpScatter:
      return zppNcclScatter(nccl, c->sendbuff, c->recvbuff, c->count, c->type, c->root, stream);
    case zppOpAllToAllv:
      /* Counts that do not match would leave NCCL waiting: compared first,
       * on the host (a round trip before the call is queued). */
      ZPPCHECK(zppHostCollCheckCounts(comm, c));
      return zppNcclAllToAllv(nccl, c->sendbuff, c->sendcounts, c->sdispls, c->recvbuff, c->recvcounts,
                              c->rdispls, c->type, stream);
    default: ZPP_FAIL(zppInternalError, CUDA, "device collective of unknown kind %d", (int)c->kind);
  }
}

zppResult_t zppDeviceCollIssue(struct zppComm* comm, const zppHostColl_t* c, int inPlace,
                               void* stream) {
  struct zppNccl* nccl = NULL;
  if (c->kind == zppOpAllToAll && inPlace)
    ZPP_FAIL(zppInvalidUsage, CUDA,
             "zppAllToAll: in-place all-to-all is not supported on device buffers");
  ZPPCHECK(zppTransportsGetNccl(comm, &nccl));
  ZPPCHECK(issuePlain(comm, nccl, c, stream));
  countPlain(comm, c);
  return zppSuccess;
}

zppResult_t zppDeviceQwzIssue(struct zppComm* comm, const void* send, void* recv, size_t count,
                              zppDataType_t type, int bits, int block, unsigned flags, void* stream) {
  return zppZeroppDeviceQwz(comm, send, recv, count, type, bits, block, flags, stream);
}

zppResult_t zppDeviceQgzIssue(struct zppComm* comm, const zppQgzArgs_t* args, void* stream) {
  return zppZeroppDeviceQgz(comm, args, stream);
}

#else /* a build without NCCL: device buffers are refused, never taken for host memory */

int zppDeviceCollAvailable(void) { return 0; }

static zppResult_t noDevicePath(void) {
  ZPP_FAIL(zppInvalidUsage, ALL, "device buffers need NCCL, and this zpp was built without it");
}

zppResult_t zppDeviceCollIssue(struct zppComm* comm, const zppHostColl_t* c, int inPlace,
                               void* stream) {
  (void)comm, (void)c, (void)inPlace, (void)stream;
  return noDevicePath();
}

zppResult_t zppDeviceQwzIssue(struct zppComm* comm, const void* send, void* recv, size_t count,
                              zppDataType_t type, int bits, int block, unsigned flags, void* stream) {
  (void)comm, (void)send, (void)recv, (void)count, (void)type, (void)bits, (void)block, (void)flags;
  (void)stream;
  return noDevicePath();
}

zppResult_t zppDeviceQgzIssue(struct zppComm* comm, const zppQgzArgs_t* args, void* stream) {
  (void)comm, (void)args, (void)stream;
  return noDevicePath();
}

#endif
