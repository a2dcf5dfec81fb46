/* The collective entry points: validate, then dispatch (host buffers to the
 * host executor and the collectives, device buffers to the collectives'
 * device branch). Nothing else happens here. */
#include <stdatomic.h>
#include <stdint.h>

#include "zpp.h"
#include "check.h"
#include "names.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"
#include "collectives/coll_device.h"
#include "collectives/coll_host.h"
#include "api/api_check.h"
#include "api/zeropp_api.h"

/* What a call asks for, in one place for validation and dispatch. */
typedef struct {
  const char* name;
  zppHostColl_t c;
  size_t sendBytes; /* bytes read from sendbuff (0: not read on this rank) */
  size_t recvBytes; /* bytes written to recvbuff */
  int inPlace;      /* NCCL's in-place form for this collective */
  int reduction;
} call_t;

static zppResult_t validate(struct zppComm* comm, call_t* k) {
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  const zppHostColl_t* c = &k->c;
  const int n = comm->nranks, r = comm->rank;
  ZPP_ARGCHECK((int)c->type >= 0 && c->type < zppNumTypes, "%s: invalid datatype %d", k->name,
               (int)c->type);
  if (k->reduction)
    ZPP_ARGCHECK((int)c->op >= 0 && c->op < zppNumOps, "%s: invalid reduction op %d", k->name,
                 (int)c->op);
  if (c->kind == zppOpBroadcast || c->kind == zppOpReduce || c->kind == zppOpGather ||
      c->kind == zppOpScatter)
    ZPP_ARGCHECK(c->root >= 0 && c->root < n, "%s: root %d is not a rank of this %d-rank communicator",
                 k->name, c->root, n);
  ZPPCHECK(zppApiCheckCount(k->name, c->count, c->type, n));
  size_t ts = zppDtypeSize(c->type);
  size_t bytes = c->count * ts, all = bytes * (size_t)n;
  switch (c->kind) {
    case zppOpAllGather:
      k->sendBytes = bytes;
      k->recvBytes = all;
      k->inPlace = (const char*)c->sendbuff == (const char*)c->recvbuff + (size_t)r * bytes;
      break;
    case zppOpReduceScatter:
      k->sendBytes = all;
      k->recvBytes = bytes;
      k->inPlace = (const char*)c->recvbuff == (const char*)c->sendbuff + (size_t)r * bytes;
      break;
    case zppOpAllReduce:
      k->sendBytes = k->recvBytes = bytes;
      k->inPlace = c->sendbuff == c->recvbuff;
      break;
    case zppOpAllToAll:
      k->sendBytes = k->recvBytes = all;
      k->inPlace = c->sendbuff == c->recvbuff;
      break;
    case zppOpReduce: /* only the root writes recvbuff */
      k->sendBytes = bytes;
      k->recvBytes = r == c->root ? bytes : 0;
      k->inPlace = r == c->root && c->sendbuff == c->recvbuff;
      break;
    case zppOpGather:
      k->sendBytes = bytes;
      k->recvBytes = r == c->root ? all : 0;
      k->inPlace =
          r == c->root && (const char*)c->sendbuff == (const char*)c->recvbuff + (size_t)r * bytes;
      break;
    case zppOpScatter:
      k->sendBytes = r == c->root ? all : 0;
      k->recvBytes = bytes;
      k->inPlace =
          r == c->root && (const char*)c->recvbuff == (const char*)c->sendbuff + (size_t)r * bytes;
      break;
    default: /* broadcast: only the root reads sendbuff */
      k->sendBytes = r == c->root ? bytes : 0;
      k->recvBytes = bytes;
      k->inPlace = c->sendbuff == c->recvbuff;
      break;
  }
  if (c->count == 0) return zppSuccess;
  ZPP_ARGCHECK(k->sendBytes == 0 || c->sendbuff != NULL, "%s: sendbuff is NULL with count %zu", k->name,
               c->count);
  ZPP_ARGCHECK(k->recvBytes == 0 || c->recvbuff != NULL, "%s: recvbuff is NULL with count %zu%s",
               k->name, c->count, k->recvBytes < bytes * (size_t)n ? "" : " on the root");
  if (!k->inPlace && zppApiOverlaps(c->sendbuff, k->sendBytes, c->recvbuff, k->recvBytes))
    ZPP_FAIL(zppInvalidUsage, ALL,
             "%s: sendbuff and recvbuff overlap but are not the in-place form (see NCCL's in-place "
             "rules)",
             k->name);
  return zppSuccess;
}

static zppResult_t dispatch(struct zppComm* comm, call_t* k, zppStream_t stream) {
  ZPPCHECK_READY(validate(comm, k));
  const zppHostColl_t* c = &k->c;
  int device = -1;
  ZPPCHECK(zppApiCheckWhere(k->name, k->sendBytes ? c->sendbuff : NULL,
                            k->recvBytes ? c->recvbuff : NULL, stream, &device));
  if (c->count != 0) {
    /* Compression settings may make this a ZeRO++ call (it counts itself),
     * on host and device buffers alike. */
    int taken = 0;
    zppResult_t res = zppZeroppTryPlain(comm, c, stream, device, &taken);
    if (taken) return res;
  }
  atomic_fetch_add_explicit(&comm->transports->calls[c->kind], 1, memory_order_relaxed);
  if (c->count == 0) return zppSuccess; /* like NCCL: nothing moves */
  if (device) return zppDeviceCollIssue(comm, c, k->inPlace, stream);
  return zppHostCollIssue(comm, c, (zppHostStream_t)stream);
}

zppResult_t zppAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, zppDataType_t datatype,
                         zppComm_t comm, zppStream_t stream) {
  call_t k = {.name = "zppAllGather",
              .c = {zppOpAllGather, sendbuff, recvbuff, sendcount, datatype, zppSum, 0}};
  return dispatch(comm, &k, stream);
}

zppResult_t zppReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                             zppDataType_t datatype, zppRedOp_t op, zppComm_t comm,
                             zppStream_t stream) {
  call_t k = {.name = "zppReduceScatter",
              .c = {zppOpReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0},
              .reduction = 1};
  return dispatch(comm, &k, stream);
}

zppResult_t zppAllReduce(const void* sendbuff, void* recvbuff, size_t count, zppDataType_t datatype,
                         zppRedOp_t op, zppComm_t comm, zppStream_t stream) {
  call_t k = {.name = "zppAllReduce",
              .c = {zppOpAllReduce, sendbuff, recvbuff, count, datatype, op, 0},
              .reduction = 1};
  return dispatch(comm, &k, stream);
}

zppResult_t zppAllToAll(const void* sendbuff, void* recvbuff, size_t count, zppDataType_t datatype,
                        zppComm_t comm, zppStream_t stream) {
  call_t k = {.name = "zppAllToAll",
              .c = {zppOpAllToAll, sendbuff, recvbuff, count, datatype, zppSum, 0}};
  return dispatch(comm, &k, stream);
}

zppResult_t zppBroadcast(const void* sendbuff, void* recvbuff, size_t count, zppDataType_t datatype,
                         int root, zppComm_t comm, zppStream_t stream) {
  call_t k = {.name = "zppBroadcast",
              .c = {zppOpBroadcast, sendbuff, recvbuff, count, datatype, zppSum, root}};
  return dispatch(comm, &k, stream);
}

zppResult_t zppReduce(const void* sendbuff, void* recvbuff, size_t count, zppDataType_t datatype,
                      zppRedOp_t op, int root, zppComm_t comm, zppStream_t stream) {
  call_t k = {.name = "zppReduce",
              .c = {zppOpReduce, sendbuff, recvbuff, count, datatype, op, root},
              .reduction = 1};
  return dispatch(comm, &k, stream);
}

zppResult_t zppGather(const void* sendbuff, void* recvbuff, size_t sendcount, zppDataType_t datatype,
                      int root, zppComm_t comm, zppStream_t stream) {
  call_t k = {.name = "zppGather",
              .c = {zppOpGather, sendbuff, recvbuff, sendcount, datatype, zppSum, root}};
  return dispatch(comm, &k, stream);
}

zppResult_t zppScatter(const void* sendbuff, void* recvbuff, size_t recvcount, zppDataType_t datatype,
                       int root, zppComm_t comm, zppStream_t stream) {
  call_t k = {.name = "zppScatter",
              .c = {zppOpScatter, sendbuff, recvbuff, recvcount, datatype, zppSum, root}};
  return dispatch(comm, &k, stream);
}

/* The end of the parts one side of an all-to-all-v touches, in elements;
 * names the first part whose count and displacement overflow. */
static zppResult_t extentOf(const char* side, const size_t* counts, const size_t* displs, int n,
                            size_t ts, size_t* extent) {
  size_t end = 0;
  for (int p = 0; p < n; p++) {
    if (counts[p] == 0) continue;
    ZPP_ARGCHECK(
        displs[p] <= (size_t)PTRDIFF_MAX / ts && counts[p] <= (size_t)PTRDIFF_MAX / ts - displs[p],
        "zppAllToAllv: %scounts[%d] %zu at %sdispls[%d] %zu overflows", side, p, counts[p],
        side[0] == 's' ? "s" : "r", p, displs[p]);
    if (displs[p] + counts[p] > end) end = displs[p] + counts[p];
  }
  *extent = end;
  return zppSuccess;
}

zppResult_t zppAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                         void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                         zppDataType_t datatype, zppComm_t comm, zppStream_t stream) {
  static const char name[] = "zppAllToAllv";
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  ZPP_ARGCHECK((int)datatype >= 0 && datatype < zppNumTypes, "%s: invalid datatype %d", name,
               (int)datatype);
  ZPP_ARGCHECK(sendcounts != NULL && sdispls != NULL && recvcounts != NULL && rdispls != NULL,
               "%s: sendcounts, sdispls, recvcounts and rdispls must not be NULL", name);
  const int n = comm->nranks;
  const size_t ts = zppDtypeSize(datatype);
  size_t sendEnd, recvEnd;
  ZPPCHECK(extentOf("send", sendcounts, sdispls, n, ts, &sendEnd));
  ZPPCHECK(extentOf("recv", recvcounts, rdispls, n, ts, &recvEnd));
  ZPP_ARGCHECK(sendEnd == 0 || sendbuff != NULL, "%s: sendbuff is NULL with %zu elements to send", name,
               sendEnd);
  ZPP_ARGCHECK(recvEnd == 0 || recvbuff != NULL, "%s: recvbuff is NULL with %zu elements to receive",
               name, recvEnd);
  if (zppApiOverlaps(sendbuff, sendEnd * ts, recvbuff, recvEnd * ts))
    ZPP_FAIL(zppInvalidUsage, ALL,
             "%s: sendbuff and recvbuff overlap (all-to-all-v has no in-place form)", name);
  int device = -1;
  ZPPCHECK(zppApiCheckWhere(name, sendbuff, recvbuff, stream, &device));
  zppHostColl_t c = {zppOpAllToAllv, sendbuff, recvbuff,   0,      datatype, zppSum, 0,
                     sendcounts,     sdispls,  recvcounts, rdispls};
  atomic_fetch_add_explicit(&comm->transports->calls[c.kind], 1, memory_order_relaxed);
  /* Even with nothing to move on this rank, the call takes part: its peers
   * compare counts with it. */
  if (device) return zppDeviceCollIssue(comm, &c, 0, stream);
  return zppHostCollIssue(comm, &c, (zppHostStream_t)stream);
}
