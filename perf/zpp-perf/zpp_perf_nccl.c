/*
 * --baseline nccl: the same operation through NCCL directly, on device
 * buffers holding the same verifiable input (copied up once per row), timed
 * per call up to the stream's completion, checked after a copy back; in the
 * rounds that alternate with ours (prepare, time per round, finish:
 * zpp_perf.h). The
 * NCCL unique id travels over our own communicator (a zpp broadcast), so no
 * MPI is needed. zpp's data type and reduction codes are NCCL's by design,
 * so they pass through unchanged. All-to-all is NCCL's grouped send/recv
 * (what nccl-tests does), which every NCCL version has.
 *
 * Without a GPU (this project's CI machines) the request fails with a clear
 * message on every rank: a baseline that was asked for and cannot run must
 * not silently vanish from the table.
 */
#include "zpp_perf.h"
#include "zpp_build_config.h"

#if ZPP_HAVE_NCCL
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

static ncclComm_t zppPerfNccl;
static cudaStream_t zppPerfNcclStream;
static void* zppPerfDevSend;
static void* zppPerfDevRecv;
static size_t zppPerfDevCap;

int zppPerfNcclAvailable(void) { return 1; }

static zppResult_t zppPerfCudaFail(int rank, const char* what, cudaError_t e) {
  fprintf(stderr, "zpp-perf: rank %d: NCCL baseline: %s: %s\n", rank, what, cudaGetErrorString(e));
  return zppUnhandledCudaError;
}

static zppResult_t zppPerfNcclFail(int rank, const char* what, ncclResult_t r) {
  fprintf(stderr, "zpp-perf: rank %d: NCCL baseline: %s: %s\n", rank, what, ncclGetErrorString(r));
  return zppInternalError;
}

zppResult_t zppPerfNcclInit(const zppPerfEnv_t* env, const zppPerfArgs_t* a) {
  (void)a;
  /* Every rank must agree on having a GPU before any of them starts NCCL. */
  char err[256];
  void* stream = NULL;
  if (zppPerfDeviceOpen(env->comm, env->topo.localRank, &stream, err, sizeof err) != 0) {
    fprintf(stderr, "zpp-perf: rank %d: --baseline nccl: %s\n", env->rank, err);
    return zppInvalidUsage;
  }
  zppPerfNcclStream = (cudaStream_t)stream;
  ncclUniqueId uid;
  memset(&uid, 0, sizeof uid);
  ncclResult_t nr;
  if (env->rank == 0 && (nr = ncclGetUniqueId(&uid)) != ncclSuccess)
    return zppPerfNcclFail(env->rank, "ncclGetUniqueId", nr);
  zppResult_t res = zppBroadcast(&uid, &uid, sizeof uid, zppUint8, 0, env->comm, NULL);
  if (res != zppSuccess) {
    zppPerfLibError(env, "sending the NCCL id (broadcast)", res);
    return res;
  }
  if ((nr = ncclCommInitRank(&zppPerfNccl, env->nranks, uid, env->rank)) != ncclSuccess)
    return zppPerfNcclFail(env->rank, "ncclCommInitRank", nr);
  return zppSuccess;
}

void zppPerfNcclFinalize(void) {
  if (zppPerfNccl != NULL) ncclCommDestroy(zppPerfNccl);
  zppPerfDeviceClose(zppPerfNcclStream);
  cudaFree(zppPerfDevSend);
  cudaFree(zppPerfDevRecv);
  zppPerfNccl = NULL;
  zppPerfNcclStream = NULL;
  zppPerfDevSend = zppPerfDevRecv = NULL;
  zppPerfDevCap = 0;
}

static ncclResult_t zppPerfNcclOnce(const zppPerfCall_t* c) {
  ncclDataType_t dt = (ncclDataType_t)c->dtype;
  ncclRedOp_t op = (ncclRedOp_t)c->redop;
  size_t n = c->apiCount;
  switch (c->coll) {
    case ZPP_PERF_ALLGATHER:
      return ncclAllGather(zppPerfDevSend, zppPerfDevRecv, n, dt, zppPerfNccl, zppPerfNcclStream);
    case ZPP_PERF_REDUCESCATTER:
      return ncclReduceScatter(zppPerfDevSend, zppPerfDevRecv, n, dt, op, zppPerfNccl,
                               zppPerfNcclStream);
    case ZPP_PERF_ALLREDUCE:
      return ncclAllReduce(zppPerfDevSend, zppPerfDevRecv, n, dt, op, zppPerfNccl, zppPerfNcclStream);
    case ZPP_PERF_BROADCAST:
      return ncclBroadcast(zppPerfDevSend, zppPerfDevRecv, n, dt, c->root, zppPerfNccl,
                           zppPerfNcclStream);
    case ZPP_PERF_ALLTOALL: {
      size_t bytes = n * zppTypeSize(c->dtype);
      ncclResult_t r = ncclGroupStart();
      for (int p = 0; p < c->nranks && r == ncclSuccess; p++) {
        r = ncclSend((const char*)zppPerfDevSend + (size_t)p * bytes, n, dt, p, zppPerfNccl,
                     zppPerfNcclStream);
        if (r == ncclSuccess)
          r = ncclRecv((char*)zppPerfDevRecv + (size_t)p * bytes, n, dt, p, zppPerfNccl,
                       zppPerfNcclStream);
      }
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    }
    case ZPP_PERF_REDUCE:
      return ncclReduce(zppPerfDevSend, zppPerfDevRecv, n, dt, op, c->root, zppPerfNccl,
                        zppPerfNcclStream);
    case ZPP_PERF_GATHER:
    case ZPP_PERF_SCATTER:
    case ZPP_PERF_ALLTOALLV: {
      /* Grouped ncclSend/ncclRecv, as NCCL's own tests do them: the root
       * with every rank (gather, scatter), or every pair (alltoallv). */
      const size_t ts = zppTypeSize(c->dtype);
      const int gather = c->coll == ZPP_PERF_GATHER, me = c->rank, nr = c->nranks;
      ncclResult_t r = ncclGroupStart();
      for (int p = 0; p < nr && r == ncclSuccess; p++) {
        size_t sc = n, so = (size_t)p * n, rc = n, ro = (size_t)p * n;
        int send = 1, recv = 1;
        if (c->coll == ZPP_PERF_ALLTOALLV) {
          sc = zppPerfVCount(n, me, p, nr);
          so = zppPerfVSendDispl(n, me, p, nr);
          rc = zppPerfVCount(n, p, me, nr);
          ro = zppPerfVRecvDispl(n, p, me, nr);
        } else if (me != c->root) {
          send = gather && p == c->root;
          recv = !gather && p == c->root;
          so = ro = 0;
        } else {
          send = !gather;
          recv = gather;
        }
        if (send)
          r = ncclSend((const char*)zppPerfDevSend + so * ts, sc, dt, p, zppPerfNccl,
                       zppPerfNcclStream);
        if (recv && r == ncclSuccess)
          r = ncclRecv((char*)zppPerfDevRecv + ro * ts, rc, dt, p, zppPerfNccl, zppPerfNcclStream);
      }
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    }
    case ZPP_PERF_SENDRECV: {
      int peer = zppPerfPartner(c->rank, c->nranks);
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(zppPerfDevSend, n, dt, peer, zppPerfNccl, zppPerfNcclStream);
      if (r == ncclSuccess) r = ncclRecv(zppPerfDevRecv, n, dt, peer, zppPerfNccl, zppPerfNcclStream);
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    }
    default: return ncclInvalidArgument;
  }
}

/* One call to completion. */
static zppResult_t zppPerfNcclCall(const zppPerfCall_t* c) {
  ncclResult_t nr = zppPerfNcclOnce(c);
  if (nr != ncclSuccess) return zppPerfNcclFail(c->rank, zppPerfCollName(c->coll), nr);
  cudaError_t e = cudaStreamSynchronize(zppPerfNcclStream);
  if (e != cudaSuccess) return zppPerfCudaFail(c->rank, "cudaStreamSynchronize", e);
  return zppSuccess;
}

zppResult_t zppPerfNcclPrepare(zppPerfBaseRow_t* row) {
  const zppPerfArgs_t* a = row->args;
  const zppPerfCall_t* c = row->call;
  const zppPerfCounts_t* counts = row->counts;
  zppPerfCheckResult_t none = {0, 0.0, 0.0, -1};
  row->present = 0;
  row->chk = none;
  size_t tsize = zppTypeSize(c->dtype);
  size_t need = (counts->sendCount > counts->recvCount ? counts->sendCount : counts->recvCount) * tsize;
  cudaError_t e;
  if (need > zppPerfDevCap) {
    cudaFree(zppPerfDevSend);
    cudaFree(zppPerfDevRecv);
    zppPerfDevSend = zppPerfDevRecv = NULL;
    zppPerfDevCap = 0;
    if ((e = cudaMalloc(&zppPerfDevSend, need)) != cudaSuccess ||
        (e = cudaMalloc(&zppPerfDevRecv, need)) != cudaSuccess)
      return zppPerfCudaFail(c->rank, "cudaMalloc", e);
    zppPerfDevCap = need;
  }
  /* Once per row: the device buffers are the baseline's alone, so our rounds
   * in between leave the input in place. */
  if ((e = cudaMemcpy(zppPerfDevSend, c->send, counts->sendCount * tsize, cudaMemcpyHostToDevice)) !=
      cudaSuccess)
    return zppPerfCudaFail(c->rank, "cudaMemcpy to device", e);
  zppPerfCheckSpec_t spec = {c->coll, c->dtype, c->redop, c->nranks, c->rank, c->root, c->apiCount};
  zppResult_t res;
  if (a->check) {
    if ((e = cudaMemset(zppPerfDevRecv, 0xa5, counts->recvCount * tsize)) != cudaSuccess)
      return zppPerfCudaFail(c->rank, "cudaMemset", e);
    if ((res = zppPerfNcclCall(c)) != zppSuccess) return res;
    /* c->recv is ours to overwrite: our own row has checked its result, and
     * its timed calls only write it. */
    if ((e = cudaMemcpy(c->recv, zppPerfDevRecv, counts->recvCount * tsize, cudaMemcpyDeviceToHost)) !=
        cudaSuccess)
      return zppPerfCudaFail(c->rank, "cudaMemcpy to host", e);
    zppPerfCheckRecv(&spec, c->recv, counts->recvCount, NULL, NULL, &row->chk);
  }
  zppPerfCall_t at = *c;
  for (int i = 0; i < a->warmup; i++) {
    zppPerfCallAt(&at, i);
    if ((res = zppPerfNcclCall(&at)) != zppSuccess) return res;
  }
  row->present = 1;
  return zppSuccess;
}

zppResult_t zppPerfNcclTime(const zppPerfBaseRow_t* row, double* times, int n) {
  zppPerfCall_t at = *row->call;
  for (int i = 0; i < n; i++) {
    zppPerfCallAt(&at, i);
    double t0 = zppClockNow();
    zppResult_t res = zppPerfNcclCall(&at);
    times[i] = zppClockNow() - t0;
    if (res != zppSuccess) return res;
  }
  return zppSuccess;
}

zppResult_t zppPerfNcclFinish(const zppPerfBaseRow_t* row, const double* times, int n,
                              zppPerfBaseResult_t* base) {
  const zppPerfEnv_t* env = row->env;
  const zppPerfCall_t* c = row->call;
  memset(base, 0, sizeof *base);
  /* The times and the check's worst error in one max-reduction. */
  double* buf = malloc(((size_t)n + 1) * 2 * sizeof *buf);
  if (buf == NULL) {
    fprintf(stderr, "zpp-perf: rank %d: out of memory\n", c->rank);
    return zppSystemError;
  }
  double* t = buf;
  double* tmax = buf + n + 1;
  memcpy(t, times, (size_t)n * sizeof *t);
  t[n] = row->chk.maxError;
  double wrongIn = (double)row->chk.wrong, wrongOut = 0;
  zppResult_t res;
  if ((res = zppAllReduce(t, tmax, (size_t)n + 1, zppFloat64, zppMax, env->comm, NULL)) != zppSuccess ||
      (res = zppAllReduce(&wrongIn, &wrongOut, 1, zppFloat64, zppSum, env->comm, NULL)) != zppSuccess) {
    zppPerfLibError(env, "reducing NCCL timings (allreduce)", res);
    free(buf);
    return res;
  }
  zppPerfBaseFill(row, "nccl", tmax, n, wrongOut, tmax[n], base);
  free(buf);
  return zppSuccess;
}

#else /* !ZPP_HAVE_NCCL */

int zppPerfNcclAvailable(void) { return 0; }
zppResult_t zppPerfNcclInit(const zppPerfEnv_t* env, const zppPerfArgs_t* a) {
  if (env->rank == 0) fprintf(stderr, "zpp-perf: this build has no NCCL\n");
  return zppInvalidUsage;
}
void zppPerfNcclFinalize(void) {}
zppResult_t zppPerfNcclPrepare(zppPerfBaseRow_t* row) { return zppInvalidUsage; }
zppResult_t zppPerfNcclTime(const zppPerfBaseRow_t* row, double* times, int n) {
  return zppInvalidUsage;
}
zppResult_t zppPerfNcclFinish(const zppPerfBaseRow_t* row, const double* times, int n,
                              zppPerfBaseResult_t* base) {
  return zppInvalidUsage;
}

#endif
