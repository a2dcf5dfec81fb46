/* ZeRO++ on device buffers; see zeropp_device.h. NOT YET RUN ON A GPU.
 *
 * Streams: the caller's stream S, and the communicator's two internal
 * streams, K (codec kernels) and C (NCCL), made once and reused by every call
 * (lib/transport/nccl.h, zppNcclGetWork), like the events. K and C start
 * after what S holds (an event), and S continues after both (events), so the
 * call is one stream-ordered operation on S while its chunks overlap inside.
 * Scratch is the communicator's too (zppNcclScratch): stream-ordered on K,
 * where it grows and is trimmed; C waits for K at the start of every call,
 * so it never touches scratch that K has not finished with or reallocated.
 *
 * CUDA graph capture is refused: a captured call would bake the
 * communicator's scratch address and streams into the graph, and a replay
 * would race with (or read freed memory after) the calls made since.
 *
 * Hazards: every buffer a chunk uses is written on one stream and read on
 * the other only after an event recorded behind the write; a buffer slot
 * is reused (qgZ, three slots) only after the chunk that used it was
 * finished on K, which itself waited for C's last use of that slot.
 */
#include "zeropp_device.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "quant_kernels/cuda_check.h"
#include "quant_kernels/zpp_quant_cuda.h"

#include "check.h"
#include "coll.h"
#include "names.h"
#include "params.h"
#include "lib/comm.h"
#include "lib/stats.h"
#include "lib/transport/nccl.h"
#include "lib/transport/transports.h"

#define NCCLCHK(call)                                                                        \
  do {                                                                                       \
    ncclResult_t nres_ = (call);                                                             \
    if (nres_ != ncclSuccess && nres_ != ncclInProgress)                                     \
      ZPP_FAIL((zppResult_t)nres_, CUDA, "%s failed: %s", #call, ncclGetErrorString(nres_)); \
  } while (0)

/* Device chunks: at least this much input, so that NCCL's per-call cost is
 * amortized; cut where the host path may cut (zppCollCutUnits), so that
 * results equal the host path's, byte for byte. */
#define DEVICE_MIN_CHUNK_BYTES ((size_t)4 << 20)
#define NSLOTS 3

typedef struct {
  struct zppComm* comm;
  cudaStream_t caller, k, c;
  cudaEvent_t start, kDone, cDone;
  cudaEvent_t ev[2 * NSLOTS + 2];
  void* scratch;
} devCall_t;

_Static_assert(2 * NSLOTS + 2 + 3 <= ZPP_NCCL_WORK_EVENTS, "the work set has too few events");

static size_t deviceChunkElems(zppDataType_t type, int block) {
  int64_t chunk = 0;
  if (zppEnvGetInt("ZPP_PIPELINE_CHUNK_BYTES", &chunk) != zppSuccess || chunk < 1) chunk = 1;
  size_t bytes = (size_t)chunk < DEVICE_MIN_CHUNK_BYTES ? DEVICE_MIN_CHUNK_BYTES : (size_t)chunk;
  return zppCollCutUnits(bytes / zppDtypeSize(type), block);
}

static zppResult_t callOpen(struct zppComm* comm, devCall_t* d, void* stream, size_t scratchBytes) {
  memset(d, 0, sizeof(*d));
  d->comm = comm;
  d->caller = (cudaStream_t)stream;
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDACHECK(cudaStreamIsCapturing(d->caller, &capture));
  if (capture != cudaStreamCaptureStatusNone)
    ZPP_FAIL(zppInvalidUsage, CUDA,
             "%s: the ZeRO++ device calls cannot be captured in a CUDA graph (they reuse the "
             "communicator's scratch and streams across calls, which a replayed graph would race "
             "with): issue them outside the capture",
             comm->name);
  struct zppNccl* n = NULL;
  ZPPCHECK(zppTransportsGetNccl(comm, &n));
  zppNcclWork_t* w = NULL;
  ZPPCHECK(zppNcclGetWork(n, &w));
  d->k = (cudaStream_t)w->kernels;
  d->c = (cudaStream_t)w->comms;
  d->start = (cudaEvent_t)w->events[0];
  d->kDone = (cudaEvent_t)w->events[1];
  d->cDone = (cudaEvent_t)w->events[2];
  for (int i = 0; i < 2 * NSLOTS + 2; i++) d->ev[i] = (cudaEvent_t)w->events[3 + i];
  CUDACHECK(cudaEventRecord(d->start, d->caller));
  CUDACHECK(cudaStreamWaitEvent(d->k, d->start, 0));
  CUDACHECK(cudaStreamWaitEvent(d->c, d->start, 0));
  ZPPCHECK(zppNcclScratch(n, scratchBytes, &d->scratch));
  /* C uses the scratch too: after its (re)allocation and after everything
   * earlier calls queued on K. */
  CUDACHECK(cudaEventRecord(d->ev[0], d->k));
  CUDACHECK(cudaStreamWaitEvent(d->c, d->ev[0], 0));
  return zppSuccess;
}

/* Joins both internal streams back into the caller's: K after C (so that the
 * next call's K work, and a scratch reallocation, come after this call's C
 * work), S after K. Nothing is released: the work set is the communicator's. */
static zppResult_t callClose(devCall_t* d, zppResult_t res) {
  if (d->k && d->c) {
    if (cudaEventRecord(d->cDone, d->c) == cudaSuccess) (void)cudaStreamWaitEvent(d->k, d->cDone, 0);
    if (cudaEventRecord(d->kDone, d->k) == cudaSuccess)
      (void)cudaStreamWaitEvent(d->caller, d->kDone, 0);
  }
  return res;
}

/* `to` continues after what `from` holds now, through event e. */
static zppResult_t after(cudaStream_t to, cudaStream_t from, cudaEvent_t e) {
  CUDACHECK(cudaEventRecord(e, from));
  CUDACHECK(cudaStreamWaitEvent(to, e, 0));
  return zppSuccess;
}

static zppResult_t getNccl(struct zppComm* comm, ncclComm_t* out) {
  struct zppNccl* n = NULL;
  ZPPCHECK(zppTransportsGetNccl(comm, &n));
  *out = (ncclComm_t)zppNcclHandle(n);
  if (*out == NULL)
    ZPP_FAIL(zppInvalidUsage, CUDA, "%s: the NCCL communicator was aborted", comm->name);
  return zppSuccess;
}

/* ---- qwZ ------------------------------------------------------------------- */

static zppResult_t qwzIssue(devCall_t* d, ncclComm_t nc, int rank, int W, const char* send, char* recv,
                            const zppQwzLayout_t* l) {
  const size_t ts = zppDtypeSize(l->type);
  char* base = d->scratch;
  for (int ch = 0; ch < l->nChunks; ch++) {
    size_t off = (size_t)ch * l->chunkElems;
    size_t cnt = l->count - off < l->chunkElems ? l->count - off : l->chunkElems;
    size_t P = zppQuantPackedSize(cnt, l->bits, l->block);
    /* Chunk ch of every shard side by side: one in-place all-gather. */
    char* slab = base + (size_t)W * (size_t)ch * l->chunkPacked;
    ZPPCHECK(zppQuantizeExCuda(send + off * ts, l->type, cnt, l->bits, l->block, l->flags,
                               slab + (size_t)rank * P, d->k));
    ZPPCHECK(after(d->c, d->k, d->ev[1 + ch % NSLOTS]));
    NCCLCHK(ncclAllGather(slab + (size_t)rank * P, slab, P, ncclUint8, nc, d->c));
    zppStatsCountDevice(d->comm, zppOpQwZ, ZPP_STATS_EVERY_PEER, P); /* lib/stats.h: logical */
    ZPPCHECK(after(d->k, d->c, d->ev[1 + NSLOTS + ch % NSLOTS]));
    /* The rotated segments through the decoder that takes both kinds. */
    for (int r = 0; r < W; r++) {
      char* out = recv + ((size_t)r * l->count + off) * ts;
      if (l->flags & ZPP_QUANT_ROTATE)
        ZPPCHECK(zppDequantizeExCuda(slab + (size_t)r * P, cnt, l->bits, l->block, out, l->type, d->k));
      else
        ZPPCHECK(zppDequantizeCuda(slab + (size_t)r * P, cnt, l->bits, l->block, out, l->type, d->k));
    }
  }
  return zppSuccess;
}

zppResult_t zppZeroppDeviceQwz(struct zppComm* comm, const void* send, void* recv, size_t count,
                               zppDataType_t type, int bits, int block, unsigned flags, void* stream) {
  ncclComm_t nc;
  ZPPCHECK(getNccl(comm, &nc));
  zppQwzLayout_t l;
  ZPPCHECK(zppCollQwzLayout(count, type, bits, block, flags, deviceChunkElems(type, block), &l));
  devCall_t d;
  zppResult_t res = callOpen(comm, &d, stream, (size_t)comm->nranks * l.shardPacked);
  if (res == zppSuccess) res = qwzIssue(&d, nc, comm->rank, comm->nranks, send, recv, &l);
  return callClose(&d, res);
}

/* ---- qgZ ------------------------------------------------------------------- */

/* Partition owners, as the reordering kernel can express them: segment
 * k = j * N + n holds the partition of owner(n, j), the rank with local rank
 * j on node n. Ranks numbered in blocks of nodes (owner n * L + j) and in
 * turn across nodes (owner j * N + n, segment k is partition k) take one
 * launch each; any other placement one launch per partition. */
typedef enum { OWNERS_BLOCKS, OWNERS_IN_TURN, OWNERS_OTHER } owners_t;

typedef struct {
  devCall_t* d;
  ncclComm_t nc;
  const zppQgzArgs_t* a;
  int t; /* tensor */
  int N, L, node, lr;
  const int* intra;
  const int* const* nodeRanks;
  owners_t owners;
  size_t ts, ce, rc;
  int nChunks;
  size_t P; /* packed bytes of a full chunk (slot size unit) */
  char* q[NSLOTS];
  char* a1[NSLOTS];
  char* r[NSLOTS];
  char* a2[NSLOTS];
} qgzDev_t;

static size_t chunkLen(const qgzDev_t* g, int ch) {
  size_t off = (size_t)ch * g->ce;
  return g->rc - off < g->ce ? g->rc - off : g->ce;
}

/* Grouped exchange among `n` peers: region i of send to peer i, region i of
 * recv from peer i; the own region is copied on the same stream. */
static zppResult_t exchange(qgzDev_t* g, const int* peers, int n, int me, const char* send, char* recv,
                            size_t bytes) {
  CUDACHECK(cudaMemcpyAsync(recv + (size_t)me * bytes, send + (size_t)me * bytes, bytes,
                            cudaMemcpyDeviceToDevice, g->d->c));
  if (n == 1) return zppSuccess;
  NCCLCHK(ncclGroupStart());
  for (int i = 0; i < n; i++) {
    if (i == me) continue;
    ncclResult_t r1 = ncclSend(send + (size_t)i * bytes, bytes, ncclUint8, peers[i], g->nc, g->d->c);
    ncclResult_t r2 = ncclRecv(recv + (size_t)i * bytes, bytes, ncclUint8, peers[i], g->nc, g->d->c);
    if (r1 != ncclSuccess || r2 != ncclSuccess) {
      (void)ncclGroupEnd();
      ZPP_FAIL((zppResult_t)(r1 != ncclSuccess ? r1 : r2), CUDA,
               "qgZ: ncclSend/ncclRecv with rank %d failed", peers[i]);
    }
  }
  NCCLCHK(ncclGroupEnd());
  for (int i = 0; i < n; i++) /* exact: what went to each peer (the own region is a copy) */
    if (i != me) zppStatsCountDevice(g->d->comm, zppOpQgZ, peers[i], bytes);
  return zppSuccess;
}

static owners_t ownersOf(const qgzDev_t* g) {
  int blocks = 1, inTurn = 1;
  for (int n = 0; n < g->N; n++)
    for (int j = 0; j < g->L; j++) {
      blocks &= g->nodeRanks[n][j] == n * g->L + j;
      inTurn &= g->nodeRanks[n][j] == j * g->N + n;
    }
  return blocks ? OWNERS_BLOCKS : inTurn ? OWNERS_IN_TURN : OWNERS_OTHER;
}

/* Chunk ch: quantize (K), intra hop (C), reduce (K), inter hop (C), sum (K). */
static zppResult_t qgzStage1(qgzDev_t* g, int ch) {
  const zppQgzArgs_t* a = g->a;
  const int s = ch % NSLOTS, W = g->N * g->L;
  size_t len = chunkLen(g, ch), P = zppQuantPackedSize(len, a->bits, a->block);
  const char* in = (const char*)a->send[g->t] + (size_t)ch * g->ce * g->ts;
  /* W reordered segments: local rank j's N partitions contiguous. Rotated
   * (a->flags ZPP_QUANT_ROTATE): one rotated quantization per partition,
   * segment k = j * N + n holding owner(n, j)'s partition in any placement. */
  if (a->flags & ZPP_QUANT_ROTATE)
    for (int k = 0; k < W; k++) {
      int owner = g->nodeRanks[k % g->N][k / g->N];
      ZPPCHECK(zppQuantizeExCuda(in + (size_t)owner * g->rc * g->ts, a->type, len, a->bits, a->block,
                                 a->flags, g->q[s] + (size_t)k * P, g->d->k));
    }
  else if (g->owners == OWNERS_BLOCKS)
    ZPPCHECK(zppQuantizeReorderedCuda(in, a->type, len, g->rc, W, g->L, a->bits, a->block, g->q[s],
                                      g->d->k));
  else if (g->owners == OWNERS_IN_TURN) /* one "node" of W: segment k is partition k */
    ZPPCHECK(
        zppQuantizeReorderedCuda(in, a->type, len, g->rc, W, 1, a->bits, a->block, g->q[s], g->d->k));
  else
    for (int k = 0; k < W; k++) {
      int owner = g->nodeRanks[k % g->N][k / g->N];
      ZPPCHECK(zppQuantizeReorderedCuda(in + (size_t)owner * g->rc * g->ts, a->type, len, g->rc, 1, 1,
                                        a->bits, a->block, g->q[s] + (size_t)k * P, g->d->k));
    }
  ZPPCHECK(after(g->d->c, g->d->k, g->d->ev[1 + s]));
  if (g->L == 1 && g->N > 1) return zppSuccess; /* no intra hop: stage 2 sends q across */
  return exchange(g, g->intra, g->L, g->lr, g->q[s], g->a1[s], (size_t)g->N * P);
}

/* The last step: n segments summed, divided and written in the call's type
 * (the Ex sum takes rotated segments, in the order the host's qgZ uses). */
static zppResult_t sumSegments(qgzDev_t* g, const char* in, size_t stride, int n, size_t len,
                               float divisor, char* out) {
  const zppQgzArgs_t* a = g->a;
  if (a->flags & ZPP_QUANT_ROTATE)
    return zppDequantizeSumExCuda(in, stride, n, len, a->bits, a->block, divisor, out, a->type,
                                  g->d->k);
  return zppDequantizeSumCuda(in, stride, n, len, a->bits, a->block, divisor, out, a->type, g->d->k);
}

static zppResult_t qgzStage2(qgzDev_t* g, int ch) {
  const zppQgzArgs_t* a = g->a;
  const int s = ch % NSLOTS, N = g->N, L = g->L;
  size_t len = chunkLen(g, ch), P = zppQuantPackedSize(len, a->bits, a->block);
  float divisor = a->op == zppAvg ? (float)(N * L) : 1.0f;
  char* out = (char*)a->recv[g->t] + (size_t)ch * g->ce * g->ts;
  const char* across = g->q[s]; /* one rank per node: segment n is owner(n, 0)'s partition */
  if (L > 1 || N == 1) {
    ZPPCHECK(after(g->d->k, g->d->c, g->d->ev[1 + NSLOTS + s]));
    if (N == 1) return sumSegments(g, g->a1[s], P, L, len, divisor, out);
    for (int n = 0; n < N; n++) {
      const char* in = g->a1[s] + (size_t)n * P;
      if (a->flags & ZPP_QUANT_ROTATE) /* rotated sums, requantized rotated */
        ZPPCHECK(zppQuantReduceRequantExCuda(in, (size_t)N * P, L, len, a->bits, a->block, a->bits,
                                             a->block, a->flags, g->r[s] + (size_t)n * P, g->d->k));
      else
        ZPPCHECK(zppQuantReduceRequantCuda(in, (size_t)N * P, L, len, a->bits, a->block, a->bits,
                                           a->block, g->r[s] + (size_t)n * P, g->d->k));
    }
    ZPPCHECK(after(g->d->c, g->d->k, g->d->ev[1 + s]));
    across = g->r[s];
  }
  int peers[64];
  int* inter = N <= 64 ? peers : malloc((size_t)N * sizeof(int));
  if (inter == NULL) ZPP_FAIL(zppSystemError, COLL, "out of memory");
  for (int n = 0; n < N; n++) inter[n] = g->nodeRanks[n][g->lr];
  zppResult_t res = exchange(g, inter, N, g->node, across, g->a2[s], P);
  if (inter != peers) free(inter);
  return res;
}

static zppResult_t qgzStage3(qgzDev_t* g, int ch) {
  const zppQgzArgs_t* a = g->a;
  if (g->N == 1) return zppSuccess;
  const int s = ch % NSLOTS;
  size_t len = chunkLen(g, ch), P = zppQuantPackedSize(len, a->bits, a->block);
  ZPPCHECK(after(g->d->k, g->d->c, g->d->ev[1 + NSLOTS + s]));
  float divisor = a->op == zppAvg ? (float)(g->N * g->L) : 1.0f;
  char* out = (char*)a->recv[g->t] + (size_t)ch * g->ce * g->ts;
  return sumSegments(g, g->a2[s], P, g->N, len, divisor, out);
}

zppResult_t zppZeroppDeviceQgz(struct zppComm* comm, const zppQgzArgs_t* a, void* stream) {
  const zppTopo_t* topo = comm->topo;
  if (!topo->uniform) ZPP_FAIL(zppInvalidUsage, COLL, "qgZ needs nodes of equal size");
  ncclComm_t nc;
  ZPPCHECK(getNccl(comm, &nc));
  qgzDev_t g;
  memset(&g, 0, sizeof(g));
  g.nc = nc;
  g.a = a;
  g.N = topo->nNodes;
  g.node = topo->nodeOf[comm->rank];
  g.L = topo->nodeSize[g.node];
  g.lr = topo->localRankOf[comm->rank];
  g.intra = topo->nodeRanks[g.node];
  g.nodeRanks = (const int* const*)topo->nodeRanks;
  g.owners = ownersOf(&g);
  g.ts = zppDtypeSize(a->type);
  g.ce = deviceChunkElems(a->type, a->block);
  g.P = zppQuantPackedSize(g.ce, a->bits, a->block);
  const int W = g.N * g.L;
  /* Slot: q and a1 hold W segments, r and a2 N. */
  size_t slot = 2 * (size_t)W * g.P + 2 * (size_t)g.N * g.P;
  devCall_t d;
  zppResult_t res = callOpen(comm, &d, stream, NSLOTS * slot);
  g.d = &d;
  for (int s = 0; res == zppSuccess && s < NSLOTS; s++) {
    char* b = (char*)d.scratch + (size_t)s * slot;
    g.q[s] = b;
    g.a1[s] = b + (size_t)W * g.P;
    g.r[s] = b + 2 * (size_t)W * g.P;
    g.a2[s] = b + 2 * (size_t)W * g.P + (size_t)g.N * g.P;
  }
  /* Tensors one after the other, each pipelined; the slots rotate on. */
  for (int t = 0; res == zppSuccess && t < a->ntensors; t++) {
    g.t = t;
    g.rc = a->counts[t];
    g.nChunks = (int)((g.rc + g.ce - 1) / g.ce);
    for (int ch = 0; res == zppSuccess && ch < g.nChunks + 2; ch++) {
      if (ch < g.nChunks) res = qgzStage1(&g, ch);
      if (res == zppSuccess && ch >= 1 && ch - 1 < g.nChunks) res = qgzStage2(&g, ch - 1);
      if (res == zppSuccess && ch >= 2) res = qgzStage3(&g, ch - 2);
    }
  }
  return callClose(&d, res);
}
