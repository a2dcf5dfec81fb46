/* NCCL device transport; see nccl.h. */
#include "nccl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "check.h"
#include "names.h"
#include "lib/comm.h"
#include "core/trim.h"

struct zppNccl {
  struct zppComm* comm;
  ncclComm_t nccl;
  int device;
  int haveWork;
  zppNcclWork_t work;
  void* scratch;
  size_t scratchBytes;
  zppTrimRule_t trim; /* when the scratch goes back (core/trim.h) */
};

/* Our result codes and data types are NCCL's, value for value. */
_Static_assert((int)zppRemoteError == (int)ncclRemoteError, "result codes differ from NCCL's");
_Static_assert((int)zppBfloat16 == (int)ncclBfloat16, "data types differ from NCCL's");
_Static_assert((int)zppAvg == (int)ncclAvg, "reduction ops differ from NCCL's");

#define NCCLCHECK(call)                                                                          \
  do {                                                                                           \
    ncclResult_t nres_ = (call);                                                                 \
    if (nres_ != ncclSuccess && nres_ != ncclInProgress)                                         \
      ZPP_FAIL((zppResult_t)nres_, CUDA, "%s failed: %s (%s)", #call, ncclGetErrorString(nres_), \
               ncclGetLastError(NULL));                                                          \
  } while (0)

/* Without a usable device every pointer is host memory; asked once, since a
 * machine without a GPU answers every CUDA call with an error. */
/* NCCL before 2.30 refuses two ranks on one GPU ("Duplicate GPU detected");
 * say so in our words before NCCL fails with its own. NCCL compares GPUs only
 * between ranks of one host, and takes its host from NCCL_HOSTID where that is
 * set: ranks given different NCCL_HOSTIDs (the fork launcher's
 * ZPP_LAUNCH_NCCL_HOST_PER_RANK) share a GPU through NCCL's network transport,
 * on any NCCL. */
static zppResult_t checkSharedGpu(zppNccl_t* n, int ncclVersion) {
  struct zppComm* comm = n->comm;
  typedef struct {
    char busId[32];
    char ncclHost[64]; /* NCCL_HOSTID, "" when unset */
    int node;
  } gpu_t;
  gpu_t* gpus = calloc((size_t)comm->nranks, sizeof(gpu_t));
  if (gpus == NULL) ZPP_FAIL(zppSystemError, CUDA, "out of memory");
  zppResult_t res = zppSuccess;
  if (cudaDeviceGetPCIBusId(gpus[comm->rank].busId, sizeof(gpus[0].busId), n->device) != cudaSuccess)
    (void)cudaGetLastError();
  gpus[comm->rank].node = comm->topo->nodeOf[comm->rank];
  const char* ncclHost = getenv("NCCL_HOSTID");
  snprintf(gpus[comm->rank].ncclHost, sizeof(gpus[0].ncclHost), "%s", ncclHost ? ncclHost : "");
  ZPPCHECKGOTO(zppBootstrapAllGather(comm->bootstrap, gpus, sizeof(gpu_t)), res, out);
  for (int r = 0; r < comm->nranks; r++) {
    if (r == comm->rank || gpus[r].node != gpus[comm->rank].node) continue;
    if (strcmp(gpus[r].busId, gpus[comm->rank].busId) != 0 || gpus[r].busId[0] == '\0') continue;
    if (strcmp(gpus[r].ncclHost, gpus[comm->rank].ncclHost) != 0) continue; /* hosts to NCCL */
    const char* enable = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
    if (ncclVersion < 23000)
      ZPP_FAILGOTO(zppInvalidUsage, res, out, CUDA,
                   "ranks %d and %d use the same GPU (%s); NCCL %d.%d refuses two ranks on one GPU "
                   "(NCCL 2.30+ allows it with NCCL_MULTI_RANK_GPU_ENABLE=1): give each rank its own "
                   "device with cudaSetDevice before the first device-buffer call",
                   comm->rank, r, gpus[r].busId, ncclVersion / 10000, (ncclVersion / 100) % 100);
    if (enable == NULL || strcmp(enable, "1") != 0)
      ZPP_WARN(CUDA, "ranks %d and %d share GPU %s: NCCL needs NCCL_MULTI_RANK_GPU_ENABLE=1 for that",
               comm->rank, r, gpus[r].busId);
    break;
  }
out:
  free(gpus);
  return res;
}

zppResult_t zppNcclCreate(struct zppComm* comm, zppNccl_t** out) {
  zppResult_t res = zppSuccess;
  zppNccl_t* n = calloc(1, sizeof(*n));
  if (n == NULL) ZPP_FAIL(zppSystemError, CUDA, "out of memory");
  n->comm = comm;
  cudaError_t cerr = cudaGetDevice(&n->device);
  if (cerr != cudaSuccess) {
    (void)cudaGetLastError();
    ZPP_FAILGOTO(zppUnhandledCudaError, res, fail, CUDA, "cudaGetDevice: %s", cudaGetErrorString(cerr));
  }
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) version = 0;
  ZPPCHECKGOTO(checkSharedGpu(n, version), res, fail);

  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (comm->rank == 0) {
    ncclResult_t nres = ncclGetUniqueId(&id);
    if (nres != ncclSuccess)
      ZPP_FAILGOTO((zppResult_t)nres, res, fail, CUDA, "ncclGetUniqueId: %s", ncclGetErrorString(nres));
  }
  ZPPCHECKGOTO(zppBootstrapBroadcast(comm->bootstrap, &id, sizeof(id), 0), res, fail);
  ncclResult_t nres = ncclCommInitRank(&n->nccl, comm->nranks, id, comm->rank);
  if (nres != ncclSuccess) {
    n->nccl = NULL;
    ZPP_FAILGOTO((zppResult_t)nres, res, fail, CUDA,
                 "ncclCommInitRank(rank %d of %d, device %d): %s (%s)", comm->rank, comm->nranks,
                 n->device, ncclGetErrorString(nres), ncclGetLastError(NULL));
  }
  ZPP_INFO(CUDA, "%s: NCCL %d communicator on device %d", comm->name, version, n->device);
  *out = n;
  return zppSuccess;
fail:
  zppNcclDestroy(n);
  return res;
}

void zppNcclAbort(zppNccl_t* n) {
  if (n == NULL || n->nccl == NULL) return;
  (void)ncclCommAbort(n->nccl);
  n->nccl = NULL;
}

/* Releases the work set: the scratch is freed behind the work queued on the
 * kernel stream, and the driver frees streams and events once their work is
 * done, so this never waits (a destroy after an abort must not hang on a
 * stream that NCCL stopped). */
static void releaseWork(zppNccl_t* n) {
  cudaStream_t k = (cudaStream_t)n->work.kernels;
  if (n->scratch && (k == NULL || cudaFreeAsync(n->scratch, k) != cudaSuccess)) {
    (void)cudaGetLastError();
    (void)cudaFree(n->scratch);
  }
  n->scratch = NULL;
  n->scratchBytes = 0;
  for (int i = 0; i < ZPP_NCCL_WORK_EVENTS; i++)
    if (n->work.events[i]) (void)cudaEventDestroy((cudaEvent_t)n->work.events[i]);
  if (n->work.kernels) (void)cudaStreamDestroy((cudaStream_t)n->work.kernels);
  if (n->work.comms) (void)cudaStreamDestroy((cudaStream_t)n->work.comms);
  (void)cudaGetLastError();
  memset(&n->work, 0, sizeof(n->work));
  n->haveWork = 0;
}

void zppNcclDestroy(zppNccl_t* n) {
  if (n == NULL) return;
  releaseWork(n);
  if (n->nccl) (void)ncclCommDestroy(n->nccl);
  free(n);
}

#define CUDAWORK(call)                                                      \
  do {                                                                      \
    cudaError_t cerr_ = (call);                                             \
    if (cerr_ != cudaSuccess) {                                             \
      (void)cudaGetLastError();                                             \
      ZPP_FAILGOTO(zppUnhandledCudaError, res, fail, CUDA, "%s: %s", #call, \
                   cudaGetErrorString(cerr_));                              \
    }                                                                       \
  } while (0)

zppResult_t zppNcclGetWork(zppNccl_t* n, zppNcclWork_t** out) {
  zppResult_t res = zppSuccess;
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
  if (device != n->device)
    ZPP_FAIL(zppInvalidUsage, CUDA,
             "%s: the current CUDA device is %d, but this communicator's NCCL communicator was made "
             "on device %d: call cudaSetDevice(%d) before its device-buffer calls",
             n->comm->name, device, n->device, n->device);
  if (n->haveWork) {
    *out = &n->work;
    return zppSuccess;
  }
  cudaStream_t k = NULL, c = NULL;
  CUDAWORK(cudaStreamCreateWithFlags(&k, cudaStreamNonBlocking));
  n->work.kernels = k;
  CUDAWORK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  n->work.comms = c;
  for (int i = 0; i < ZPP_NCCL_WORK_EVENTS; i++) {
    cudaEvent_t e = NULL;
    CUDAWORK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    n->work.events[i] = e;
  }
  n->haveWork = 1;
  ZPP_INFO(CUDA, "%s: device work set made (2 streams, %d events) on device %d", n->comm->name,
           ZPP_NCCL_WORK_EVENTS, n->device);
  *out = &n->work;
  return zppSuccess;
fail:
  releaseWork(n);
  return res;
}

zppResult_t zppNcclScratch(zppNccl_t* n, size_t bytes, void** out) {
  zppResult_t res = zppSuccess;
  if (!n->haveWork) ZPP_FAIL(zppInternalError, CUDA, "zppNcclScratch before zppNcclGetWork");
  cudaStream_t k = (cudaStream_t)n->work.kernels;
  if (bytes == 0) bytes = 16;
  size_t want = n->scratchBytes, keep = 0;
  if (bytes > n->scratchBytes) want = bytes;
  /* Trimmed to the largest recent need, never below this call's. */
  if (zppTrimAfterUse(&n->trim, n->scratchBytes, bytes, &keep)) want = keep;
  if (want != n->scratchBytes || n->scratch == NULL) {
    if (n->scratch) CUDAWORK(cudaFreeAsync(n->scratch, k));
    n->scratch = NULL;
    n->scratchBytes = 0;
    void* p = NULL;
    CUDAWORK(cudaMallocAsync(&p, want, k));
    n->scratch = p;
    n->scratchBytes = want;
    ZPP_DBG(CUDA, "%s: device scratch now %zu bytes", n->comm->name, want);
  }
  *out = n->scratch;
  return zppSuccess;
fail:
  return res;
}

size_t zppNcclScratchBytes(const zppNccl_t* n) { return n ? n->scratchBytes : 0; }

void* zppNcclHandle(zppNccl_t* n) { return n ? (void*)n->nccl : NULL; }

/* The average of one rank is its input, which the sum gives exactly: NCCL
 * 2.28.9 leaves the last count % 4 elements of a one-rank fp32 ncclAvg
 * unwritten (seen on an H100, docs/gpu.md), and NCCL's other averages are
 * untouched. */
static ncclRedOp_t ncclOp(const zppNccl_t* n, zppRedOp_t op) {
  return op == zppAvg && n->comm->nranks == 1 ? ncclSum : (ncclRedOp_t)op;
}

static zppResult_t usable(const zppNccl_t* n) {
  if (n->nccl == NULL) ZPP_FAIL(zppInvalidUsage, CUDA, "the NCCL communicator was aborted");
  return zppSuccess;
}

zppResult_t zppNcclAllGather(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t sendcount,
                             zppDataType_t type, void* stream) {
  ZPPCHECK(usable(n));
  NCCLCHECK(ncclAllGather(sendbuff, recvbuff, sendcount, (ncclDataType_t)type, n->nccl,
                          (cudaStream_t)stream));
  return zppSuccess;
}

zppResult_t zppNcclReduceScatter(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t recvcount,
                                 zppDataType_t type, zppRedOp_t op, void* stream) {
  ZPPCHECK(usable(n));
  NCCLCHECK(ncclReduceScatter(sendbuff, recvbuff, recvcount, (ncclDataType_t)type, ncclOp(n, op),
                              n->nccl, (cudaStream_t)stream));
  return zppSuccess;
}

zppResult_t zppNcclAllReduce(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t count,
                             zppDataType_t type, zppRedOp_t op, void* stream) {
  ZPPCHECK(usable(n));
  NCCLCHECK(ncclAllReduce(sendbuff, recvbuff, count, (ncclDataType_t)type, ncclOp(n, op), n->nccl,
                          (cudaStream_t)stream));
  return zppSuccess;
}

/* One peer's send and receive of a grouped exchange (NULL: that side left
 * out); on failure the group is closed and the peer named. */
static zppResult_t groupPair(zppNccl_t* n, const char* call, int peer, const void* sendPtr,
                             size_t sendCount, void* recvPtr, size_t recvCount, zppDataType_t type,
                             void* stream) {
  ncclResult_t r1 = ncclSuccess, r2 = ncclSuccess;
  if (sendPtr != NULL)
    r1 = ncclSend(sendPtr, sendCount, (ncclDataType_t)type, peer, n->nccl, (cudaStream_t)stream);
  if (recvPtr != NULL && r1 == ncclSuccess)
    r2 = ncclRecv(recvPtr, recvCount, (ncclDataType_t)type, peer, n->nccl, (cudaStream_t)stream);
  if (r1 == ncclSuccess && r2 == ncclSuccess) return zppSuccess;
  (void)ncclGroupEnd();
  ncclResult_t bad = r1 != ncclSuccess ? r1 : r2;
  ZPP_FAIL((zppResult_t)bad, CUDA, "%s: ncclSend/ncclRecv with rank %d: %s", call, peer,
           ncclGetErrorString(bad));
}

/* Grouped point-to-point rather than ncclAlltoAll, ncclGather and
 * ncclScatter, which NCCL only has since 2.28. Parts of `count` elements
 * at p * count, or (counts non-NULL) counts[p] at displs[p]. */
static zppResult_t exchange(zppNccl_t* n, const char* call, const void* sendbuff, const size_t* scounts,
                            const size_t* sdispls, void* recvbuff, const size_t* rcounts,
                            const size_t* rdispls, size_t count, zppDataType_t type, void* stream) {
  ZPPCHECK(usable(n));
  const size_t ts = zppDtypeSize(type);
  int nranks = n->comm->nranks;
  NCCLCHECK(ncclGroupStart());
  for (int p = 0; p < nranks; p++) {
    size_t sc = scounts ? scounts[p] : count, rc = rcounts ? rcounts[p] : count;
    size_t so = scounts ? sdispls[p] : (size_t)p * count, ro = rcounts ? rdispls[p] : (size_t)p * count;
    ZPPCHECK(groupPair(n, call, p, (const char*)sendbuff + so * ts, sc, (char*)recvbuff + ro * ts, rc,
                       type, stream));
  }
  NCCLCHECK(ncclGroupEnd());
  return zppSuccess;
}

zppResult_t zppNcclAllToAll(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t count,
                            zppDataType_t type, void* stream) {
  return exchange(n, "zppAllToAll", sendbuff, NULL, NULL, recvbuff, NULL, NULL, count, type, stream);
}

zppResult_t zppNcclAllToAllv(zppNccl_t* n, const void* sendbuff, const size_t* sendcounts,
                             const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                             const size_t* rdispls, zppDataType_t type, void* stream) {
  return exchange(n, "zppAllToAllv", sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, 0,
                  type, stream);
}

zppResult_t zppNcclReduce(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t count,
                          zppDataType_t type, zppRedOp_t op, int root, void* stream) {
  ZPPCHECK(usable(n));
  NCCLCHECK(ncclReduce(sendbuff, recvbuff, count, (ncclDataType_t)type, ncclOp(n, op), root, n->nccl,
                       (cudaStream_t)stream));
  return zppSuccess;
}

/* Gather (gather != 0) or scatter: the root's parts of `count` elements at
 * p * count; the root's own part is a copy on the stream (none in place). */
static zppResult_t rooted(zppNccl_t* n, int gather, const void* sendbuff, void* recvbuff, size_t count,
                          zppDataType_t type, int root, void* stream) {
  ZPPCHECK(usable(n));
  const char* call = gather ? "zppGather" : "zppScatter";
  const size_t bytes = count * zppDtypeSize(type);
  const int nranks = n->comm->nranks, me = n->comm->rank;
  if (me == root) {
    const char* from = gather ? sendbuff : (const char*)sendbuff + (size_t)root * bytes;
    char* to = gather ? (char*)recvbuff + (size_t)root * bytes : recvbuff;
    if (from != to) {
      cudaError_t e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
      if (e != cudaSuccess)
        ZPP_FAIL(zppUnhandledCudaError, CUDA, "%s: the root's own part: cudaMemcpyAsync: %s", call,
                 cudaGetErrorString(e));
    }
  }
  NCCLCHECK(ncclGroupStart());
  for (int p = 0; p < nranks; p++) {
    if (p == root && me == root) continue;
    if (me != root && p != root) continue;
    if (gather)
      ZPPCHECK(groupPair(n, call, p, me == root ? NULL : sendbuff, count,
                         me == root ? (char*)recvbuff + (size_t)p * bytes : NULL, count, type, stream));
    else
      ZPPCHECK(groupPair(n, call, p, me == root ? (const char*)sendbuff + (size_t)p * bytes : NULL,
                         count, me == root ? NULL : recvbuff, count, type, stream));
  }
  NCCLCHECK(ncclGroupEnd());
  return zppSuccess;
}

zppResult_t zppNcclGather(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t sendcount,
                          zppDataType_t type, int root, void* stream) {
  return rooted(n, 1, sendbuff, recvbuff, sendcount, type, root, stream);
}

zppResult_t zppNcclScatter(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t recvcount,
                           zppDataType_t type, int root, void* stream) {
  return rooted(n, 0, sendbuff, recvbuff, recvcount, type, root, stream);
}

zppResult_t zppNcclBroadcast(zppNccl_t* n, const void* sendbuff, void* recvbuff, size_t count,
                             zppDataType_t type, int root, void* stream) {
  ZPPCHECK(usable(n));
  NCCLCHECK(ncclBroadcast(sendbuff, recvbuff, count, (ncclDataType_t)type, root, n->nccl,
                          (cudaStream_t)stream));
  return zppSuccess;
}
