/* The point-to-point entry points (zpp.h): zppSend, zppRecv, their tagged
 * forms and groups. Validate; inside a group record, outside issue at once:
 * host buffers to collectives/p2p.c on the communicator's executor, device
 * buffers to NCCL (collectives/p2p_device.c). The group is per thread, as
 * NCCL's is. */
#include <stdatomic.h>
#include <stdlib.h>

#include "zpp.h"
#include "check.h"
#include "names.h"
#include "lib/comm.h"
#include "lib/executor.h"
#include "lib/transport/transports.h"
#include "collectives/coll_device.h"
#include "collectives/p2p.h"
#include "api/api_check.h"
#include "api/p2p_api.h"

typedef struct {
  struct zppComm* comm;
  zppStream_t stream;
  int device;
  zppP2pOp_t op;
} rec_t;

/* The calling thread's group: depth of zppGroupStart nesting, the calls
 * recorded, and the first error met inside (the group then fails). */
static _Thread_local struct {
  int depth;
  rec_t* recs;
  int n, cap;
  zppResult_t err;
} group;

static void groupFail(zppResult_t res) {
  if (group.depth > 0 && res != zppSuccess && group.err == zppSuccess) group.err = res;
}

zppResult_t zppApiCheckNoGroup(const char* name) {
  if (group.depth == 0) return zppSuccess;
  groupFail(zppInvalidUsage);
  ZPP_FAIL(zppInvalidUsage, ALL,
           "%s: collectives inside zppGroupStart/zppGroupEnd are not supported (zpp's groups hold "
           "point-to-point calls only); the group fails at its zppGroupEnd",
           name);
}

static zppResult_t validate(const char* name, struct zppComm* comm, const zppP2pOp_t* o,
                            zppStream_t stream, int* device) {
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  const int n = comm->nranks, me = comm->rank;
  ZPP_ARGCHECK((int)o->type >= 0 && o->type < zppNumTypes, "%s: rank %d: invalid datatype %d", name, me,
               (int)o->type);
  int anyOk = o->tagged && !o->isSend;
  ZPP_ARGCHECK((o->peer >= 0 && o->peer < n) || (anyOk && o->peer == ZPP_ANY_SOURCE),
               "%s: rank %d: peer %d is not a rank of this %d-rank communicator%s", name, me, o->peer,
               n, anyOk ? " (nor ZPP_ANY_SOURCE)" : "");
  if (o->tagged) ZPP_ARGCHECK(o->tag >= 0, "%s: rank %d: tag %d is negative", name, me, o->tag);
  ZPPCHECK(zppApiCheckCount(name, o->count, o->type, 1));
  const void* buf = o->isSend ? o->sendbuff : (const void*)o->recvbuff;
  ZPP_ARGCHECK(o->count == 0 || buf != NULL, "%s: rank %d: %s is NULL with count %zu", name, me,
               o->isSend ? "sendbuff" : "recvbuff", o->count);
  if (buf != NULL) {
    *device = -1;
    ZPPCHECK(zppApiCheckWhereAny(name, buf, NULL, stream, device));
  } else {
    /* Nothing to look at (count 0): the stream says which side the
     * matching call is on. */
    *device = !(stream == NULL || zppExecStreamIsValid(stream));
    ZPP_USAGECHECK(!*device || zppDeviceCollAvailable(),
                   "%s: rank %d: stream %p is no zppHostStream_t, and this zpp has no device path",
                   name, me, stream);
  }
  ZPP_USAGECHECK(!(*device && o->tagged),
                 "%s: rank %d: tagged point-to-point takes host buffers only (this one is in device "
                 "memory)",
                 name, me);
  return zppSuccess;
}

static void countCalls(struct zppComm* comm, int n) {
  atomic_fetch_add_explicit(&comm->transports->calls[zppOpSendRecv], (uint64_t)n, memory_order_relaxed);
}

static zppResult_t issueNow(const char* name, struct zppComm* comm, const zppP2pOp_t* o,
                            zppStream_t stream, int device) {
  ZPP_USAGECHECK(o->peer != comm->rank,
                 "%s: rank %d: a send to or receive from itself outside a group would wait for a call "
                 "that cannot come: put both inside one zppGroupStart/zppGroupEnd",
                 name, comm->rank);
  countCalls(comm, 1);
  if (device) return zppDeviceP2pIssue(&comm, o, &stream, 1);
  zppP2pOp_t* ops = malloc(sizeof(*ops));
  if (ops == NULL) ZPP_FAIL(zppSystemError, ALL, "%s: out of memory", name);
  *ops = *o;
  return zppHostP2pIssue(comm, ops, 1, (zppHostStream_t)stream);
}

static zppResult_t record(struct zppComm* comm, const zppP2pOp_t* o, zppStream_t stream, int device) {
  if (group.n == group.cap) {
    int cap = group.cap ? 2 * group.cap : 16;
    rec_t* recs = realloc(group.recs, (size_t)cap * sizeof(*recs));
    if (recs == NULL) ZPP_FAIL(zppSystemError, ALL, "out of memory recording a group's call");
    group.recs = recs;
    group.cap = cap;
  }
  group.recs[group.n++] = (rec_t){comm, stream, device, *o};
  return zppSuccess;
}

static zppResult_t call(const char* name, struct zppComm* comm, const zppP2pOp_t* o,
                        zppStream_t stream) {
  int device = 0;
  zppResult_t res = validate(name, comm, o, stream, &device);
  if (res == zppSuccess)
    res = group.depth > 0 ? record(comm, o, stream, device) : issueNow(name, comm, o, stream, device);
  groupFail(res);
  return res;
}

zppResult_t zppSend(const void* sendbuff, size_t count, zppDataType_t datatype, int peer,
                    zppComm_t comm, zppStream_t stream) {
  zppP2pOp_t o = {.isSend = 1, .peer = peer, .sendbuff = sendbuff, .count = count, .type = datatype};
  return call("zppSend", comm, &o, stream);
}

zppResult_t zppRecv(void* recvbuff, size_t count, zppDataType_t datatype, int peer, zppComm_t comm,
                    zppStream_t stream) {
  zppP2pOp_t o = {.isSend = 0, .peer = peer, .recvbuff = recvbuff, .count = count, .type = datatype};
  return call("zppRecv", comm, &o, stream);
}

zppResult_t zppSendTagged(const void* sendbuff, size_t count, zppDataType_t datatype, int peer, int tag,
                          zppComm_t comm, zppStream_t stream) {
  zppP2pOp_t o = {.isSend = 1,
                  .tagged = 1,
                  .peer = peer,
                  .tag = tag,
                  .sendbuff = sendbuff,
                  .count = count,
                  .type = datatype};
  return call("zppSendTagged", comm, &o, stream);
}

zppResult_t zppRecvTagged(void* recvbuff, size_t count, zppDataType_t datatype, int peer, int tag,
                          int* source, zppComm_t comm, zppStream_t stream) {
  zppP2pOp_t o = {.isSend = 0,
                  .tagged = 1,
                  .peer = peer,
                  .tag = tag,
                  .recvbuff = recvbuff,
                  .count = count,
                  .type = datatype,
                  .source = source};
  return call("zppRecvTagged", comm, &o, stream);
}

zppResult_t zppGroupStart(void) {
  if (group.depth == 0) group.err = zppSuccess;
  group.depth++;
  return zppSuccess;
}

/* The group's host operations share one communicator and stream (they
 * become one executor job); device ones go to NCCL as one group. */
static zppResult_t issueGroup(rec_t* recs, int n) {
  int host = -1, nDevice = 0;
  for (int i = 0; i < n; i++) {
    if (recs[i].device) {
      nDevice++;
      continue;
    }
    if (host < 0) host = i;
    ZPP_USAGECHECK(recs[i].comm == recs[host].comm && recs[i].stream == recs[host].stream,
                   "zppGroupEnd: the host-buffer calls of one group must share one communicator and "
                   "one stream (call %d differs from call %d); nothing was issued",
                   i, host);
  }
  int nHost = n - nDevice;
  zppP2pOp_t* hostOps = NULL;
  if (nHost > 0 && (hostOps = malloc((size_t)nHost * sizeof(*hostOps))) == NULL)
    ZPP_FAIL(zppSystemError, ALL, "zppGroupEnd: out of memory for %d calls", nHost);
  if (nDevice > 0) {
    struct zppComm** comms = malloc((size_t)nDevice * sizeof(*comms));
    zppP2pOp_t* ops = malloc((size_t)nDevice * sizeof(*ops));
    void** streams = malloc((size_t)nDevice * sizeof(*streams));
    zppResult_t res = zppSuccess;
    if (comms == NULL || ops == NULL || streams == NULL) {
      res = zppSystemError;
      ZPP_ERR(ALL, "zppGroupEnd: out of memory for %d device calls", nDevice);
    } else {
      int k = 0;
      for (int i = 0; i < n; i++) {
        if (!recs[i].device) continue;
        comms[k] = recs[i].comm;
        ops[k] = recs[i].op;
        streams[k] = recs[i].stream;
        countCalls(recs[i].comm, 1);
        k++;
      }
      res = zppDeviceP2pIssue(comms, ops, streams, nDevice);
    }
    free(comms), free(ops), free(streams);
    if (res != zppSuccess) {
      free(hostOps);
      return res;
    }
  }
  if (nHost == 0) return zppSuccess;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!recs[i].device) hostOps[k++] = recs[i].op;
  countCalls(recs[host].comm, nHost);
  return zppHostP2pIssue(recs[host].comm, hostOps, nHost, (zppHostStream_t)recs[host].stream);
}

zppResult_t zppGroupEnd(void) {
  if (group.depth == 0)
    ZPP_FAIL(zppInvalidUsage, ALL, "zppGroupEnd: no zppGroupStart on this thread is open");
  if (--group.depth > 0) return zppSuccess;
  rec_t* recs = group.recs;
  int n = group.n;
  zppResult_t err = group.err;
  group.recs = NULL;
  group.n = group.cap = 0;
  group.err = zppSuccess;
  zppResult_t res = err;
  if (err != zppSuccess)
    ZPP_ERR(ALL,
            "zppGroupEnd: a call inside the group failed (%s, logged above); none of its %d "
            "recorded calls was issued",
            zppResultString(err), n);
  else
    res = issueGroup(recs, n);
  free(recs);
  return res;
}
