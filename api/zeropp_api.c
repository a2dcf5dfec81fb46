/* The ZeRO++ entry points (zppQwzAllGather, zppQgzReduceScatter[Coalesced],
 * zppParam*) and the routing of plain calls under compression settings:
 * validate, then dispatch to the host executor (collectives/zeropp_host.h).
 * Nothing else happens here.
 *
 * Device buffers: qwZ and qgZ go to the collectives' device branch
 * (collectives/coll_device.h: CUDA codecs and NCCL, not yet run on a GPU), also when the
 * communicator's settings compress a plain call; hpZ parameters take host
 * buffers only. */
#include "api/zeropp_api.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zpp.h"
#include "check.h"
#include "names.h"
#include "handles.h"
#include "lib/comm.h"
#include "lib/compress_settings.h"
#include "lib/transport/transports.h"
#include "collectives/coll_device.h"
#include "collectives/coll_host.h"
#include "collectives/zeropp_host.h"
#include "api/api_check.h"

static int isFloating(zppDataType_t t) {
  return t == zppFloat32 || t == zppFloat16 || t == zppBfloat16;
}

static zppResult_t checkType(const char* name, zppDataType_t t) {
  ZPP_ARGCHECK(isFloating(t), "%s: datatype %d: ZeRO++ quantizes fp32, fp16 or bf16 only", name,
               (int)t);
  return zppSuccess;
}

static zppResult_t checkQwzBits(const char* name, int bits) {
  ZPP_ARGCHECK(bits == 0 || bits == 4 || bits == 8,
               "%s: bits %d: expected 8, 4, or 0 (the communicator's setting)%s", name, bits,
               bits == 2 ? "; 2 bits is for gradients (qgZ, with error feedback)" : "");
  return zppSuccess;
}

static zppResult_t checkQgzBits(const char* name, int bits) {
  ZPP_ARGCHECK(bits == 0 || bits == 2 || bits == 4 || bits == 8,
               "%s: bits %d: expected 8, 4, 2, or 0 (the communicator's setting)", name, bits);
  return zppSuccess;
}

static void countCall(struct zppComm* comm, zppOpKind_t kind) {
  atomic_fetch_add_explicit(&comm->transports->calls[kind], 1, memory_order_relaxed);
}

/* ---- qwZ -------------------------------------------------------------------- */

static zppResult_t qwzValidate(const char* name, const void* sendbuff, void* recvbuff, size_t count,
                               zppDataType_t type, int bits, zppComm_t comm, zppStream_t stream,
                               int* device) {
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  ZPPCHECK(checkType(name, type));
  ZPPCHECK(checkQwzBits(name, bits));
  ZPPCHECK(zppApiCheckCount(name, count, type, comm->nranks));
  *device = -1;
  if (count == 0) return zppApiCheckWhere(name, NULL, NULL, stream, device);
  size_t bytes = count * zppDtypeSize(type);
  ZPP_ARGCHECK(sendbuff != NULL && recvbuff != NULL, "%s: NULL buffer with count %zu", name, count);
  int inPlace = (const char*)sendbuff == (const char*)recvbuff + (size_t)comm->rank * bytes;
  if (!inPlace && zppApiOverlaps(sendbuff, bytes, recvbuff, bytes * (size_t)comm->nranks))
    ZPP_FAIL(zppInvalidUsage, ALL,
             "%s: sendbuff and recvbuff overlap but are not the in-place form (sendbuff = "
             "recvbuff + rank * sendcount)",
             name);
  return zppApiCheckWhere(name, sendbuff, recvbuff, stream, device);
}

static zppResult_t qwzIssue(zppComm_t comm, const void* sendbuff, void* recvbuff, size_t count,
                            zppDataType_t type, int bits, zppStream_t stream, int device) {
  countCall(comm, zppOpQwZ);
  if (count == 0) return zppSuccess;
  int block = zppCompressBlock(&comm->compress, bits);
  unsigned flags = zppCompressQuantFlags(&comm->compress);
  if (device)
    return zppDeviceQwzIssue(comm, sendbuff, recvbuff, count, type, bits, block, flags, stream);
  zppQwzCall_t call = {sendbuff, recvbuff, count, type, bits, block, flags, zppOpQwZ};
  return zppZeroppIssueQwz(comm, &call, (zppHostStream_t)stream);
}

zppResult_t zppQwzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            zppDataType_t datatype, int bits, zppComm_t comm, zppStream_t stream) {
  int device = 0;
  ZPPCHECK_READY(qwzValidate("zppQwzAllGather", sendbuff, recvbuff, sendcount, datatype, bits, comm,
                             stream, &device));
  if (bits == 0) bits = comm->compress.qwzBits ? comm->compress.qwzBits : 8;
  return qwzIssue(comm, sendbuff, recvbuff, sendcount, datatype, bits, stream, device);
}

/* ---- qgZ -------------------------------------------------------------------- */

static zppResult_t qgzValidate(const char* name, int ntensors, const void* const* sendbuffs,
                               void* const* recvbuffs, const size_t* counts, zppDataType_t type,
                               zppRedOp_t op, int bits, zppComm_t comm, zppStream_t stream,
                               int* device) {
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  *device = -1;
  ZPPCHECK(checkType(name, type));
  ZPPCHECK(checkQgzBits(name, bits));
  ZPP_ARGCHECK(op == zppSum || op == zppAvg, "%s: reduction op %d: qgZ supports zppSum and zppAvg",
               name, (int)op);
  ZPP_ARGCHECK(ntensors >= 0, "%s: ntensors %d is negative", name, ntensors);
  ZPP_ARGCHECK(ntensors == 0 || (sendbuffs && recvbuffs && counts), "%s: NULL array with %d tensors",
               name, ntensors);
  size_t ts = zppDtypeSize(type);
  for (int t = 0; t < ntensors; t++) {
    size_t count = counts[t];
    ZPPCHECK(zppApiCheckCount(name, count, type, comm->nranks));
    if (count == 0) continue;
    size_t bytes = count * ts, all = bytes * (size_t)comm->nranks;
    ZPP_ARGCHECK(sendbuffs[t] != NULL && recvbuffs[t] != NULL,
                 "%s: tensor %d: NULL buffer with count %zu", name, t, count);
    int inPlace = (const char*)recvbuffs[t] == (const char*)sendbuffs[t] + (size_t)comm->rank * bytes;
    if (!inPlace && zppApiOverlaps(sendbuffs[t], all, recvbuffs[t], bytes))
      ZPP_FAIL(zppInvalidUsage, ALL,
               "%s: tensor %d: sendbuff and recvbuff overlap but are not the in-place form "
               "(recvbuff = sendbuff + rank * recvcount)",
               name, t);
    ZPPCHECK(zppApiCheckWhere(name, sendbuffs[t], recvbuffs[t], stream, device));
  }
  ZPPCHECK(zppApiCheckWhere(name, NULL, NULL, stream, device));
  return zppSuccess;
}

/* qgZ on nodes that hold different numbers of ranks (a shrunk communicator
 * that lost one rank of a node, say): its hierarchical all-to-all needs
 * equal nodes, and refusing would end a training that only lost a rank.
 * The tensors are reduce-scattered plain instead (exact, more bytes),
 * counted as zppOpReduceScatter and in qgzPlainFallbacks, said once per
 * process. Every rank sees the same topology, so all of them take this
 * path together. */
static zppResult_t qgzAsPlain(struct zppComm* comm, int ntensors, const void* const* sendbuffs,
                              void* const* recvbuffs, const size_t* counts, zppDataType_t type,
                              zppRedOp_t op, int bits, zppStream_t stream, int device) {
  static atomic_int warned = 0;
  if (atomic_exchange(&warned, 1) == 0)
    ZPP_WARN(COLL,
             "%s: qgZ (int%d) asked for, but the nodes hold different numbers of ranks (node 0: "
             "%d; ZPP_DEBUG=INFO TOPO lists them): reduce-scatters run plain (exact, "
             "uncompressed) on such communicators, counted in qgzPlainFallbacks; said once",
             comm->name, bits, comm->topo->nodeSize[0]);
  atomic_fetch_add_explicit(&comm->transports->qgzPlainFallbacks, 1, memory_order_relaxed);
  for (int t = 0; t < ntensors; t++) {
    if (counts[t] == 0) continue;
    zppHostColl_t c = {.kind = zppOpReduceScatter,
                       .sendbuff = sendbuffs[t],
                       .recvbuff = recvbuffs[t],
                       .count = counts[t],
                       .type = type,
                       .op = op};
    countCall(comm, zppOpReduceScatter);
    size_t bytes = counts[t] * zppDtypeSize(type);
    int inPlace = (const char*)recvbuffs[t] == (const char*)sendbuffs[t] + (size_t)comm->rank * bytes;
    ZPPCHECK(device ? zppDeviceCollIssue(comm, &c, inPlace, stream)
                    : zppHostCollIssue(comm, &c, (zppHostStream_t)stream));
  }
  return zppSuccess;
}

static zppResult_t qgzIssue(zppComm_t comm, int ntensors, const void* const* sendbuffs,
                            void* const* recvbuffs, const size_t* counts, zppDataType_t type,
                            zppRedOp_t op, int bits, struct zppGrad* const* grads, zppStream_t stream,
                            int device) {
  size_t total = 0;
  for (int t = 0; t < ntensors; t++) total += counts[t];
  /* A call that moves nothing succeeds as qgZ on any nodes (as NCCL's count 0).
   * Nodes of different sizes: plain and exact; error feedback's residuals
   * wait, as they are, for the next quantized call (after a grow, say). */
  if (total > 0 && !comm->topo->uniform)
    return qgzAsPlain(comm, ntensors, sendbuffs, recvbuffs, counts, type, op, bits, stream, device);
  countCall(comm, zppOpQgZ);
  if (total == 0) return zppSuccess;
  zppQgzArgs_t a = {ntensors,
                    sendbuffs,
                    recvbuffs,
                    counts,
                    type,
                    op,
                    bits,
                    zppCompressBlock(&comm->compress, bits),
                    zppCompressQuantFlags(&comm->compress),
                    NULL,
                    NULL,
                    NULL,
                    NULL};
  if (device) return zppDeviceQgzIssue(comm, &a, stream);
  return zppZeroppIssueQgz(comm, &a, grads, (zppHostStream_t)stream);
}

static int qgzBits(const struct zppComm* comm, int bits) {
  return bits ? bits : (comm->compress.qgzBits ? comm->compress.qgzBits : 4);
}

/* A qgZ call without a residual handle, on a communicator whose error
 * feedback is on: refused before anything moves, rather than run without it. */
static zppResult_t checkNoFeedback(const struct zppComm* comm, const char* name) {
  if (!comm->compress.qgzErrorFeedback) return zppSuccess;
  ZPP_FAIL(zppInvalidUsage, COLL,
           "%s: qgZ without a residual handle, but error feedback is on (%s=1): a call without "
           "one cannot tell which gradient its buffer holds. Reduce with zppQgzReduceScatterEF or "
           "zppQgzReduceScatterCoalescedEF (zppGradCreate), torch_zpp.fsdp.error_feedback in "
           "FSDP2, or turn it off",
           name, comm->compress.from[ZPP_COMPRESS_QGZ_EF]);
}

zppResult_t zppQgzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                zppDataType_t datatype, zppRedOp_t op, int bits, zppComm_t comm,
                                zppStream_t stream) {
  const void* sends[1] = {sendbuff};
  void* recvs[1] = {recvbuff};
  size_t counts[1] = {recvcount};
  int device = 0;
  ZPPCHECK_READY(qgzValidate("zppQgzReduceScatter", 1, sends, recvs, counts, datatype, op, bits, comm,
                             stream, &device));
  ZPPCHECK(checkNoFeedback(comm, "zppQgzReduceScatter"));
  return qgzIssue(comm, 1, sends, recvs, counts, datatype, op, qgzBits(comm, bits), NULL, stream,
                  device);
}

zppResult_t zppQgzReduceScatterCoalesced(int ntensors, const void* const* sendbuffs,
                                         void* const* recvbuffs, const size_t* recvcounts,
                                         zppDataType_t datatype, zppRedOp_t op, int bits,
                                         zppComm_t comm, zppStream_t stream) {
  int device = 0;
  ZPPCHECK_READY(qgzValidate("zppQgzReduceScatterCoalesced", ntensors, sendbuffs, recvbuffs, recvcounts,
                             datatype, op, bits, comm, stream, &device));
  ZPPCHECK(checkNoFeedback(comm, "zppQgzReduceScatterCoalesced"));
  return qgzIssue(comm, ntensors, sendbuffs, recvbuffs, recvcounts, datatype, op, qgzBits(comm, bits),
                  NULL, stream, device);
}

/* ---- error feedback ---------------------------------------------------------- */

static zppResult_t checkGrad(const struct zppGrad* g, const char* name) {
  ZPP_ARGCHECK(g != NULL, "%s: grad is NULL", name);
  ZPP_ARGCHECK(zppHandleIsLive(g, ZPP_HANDLE_GRAD),
               "%s: not a live gradient handle (destroyed, or not made by zppGradCreate)", name);
  return zppSuccess;
}

/* Undo, save, load and destroy read or replace what a pending call writes. */
static zppResult_t checkSettled(const struct zppGrad* g, const char* name) {
  int n = atomic_load(&g->inFlight);
  ZPP_USAGECHECK(n == 0,
                 "%s: %d call(s) on this handle not yet completed: synchronize their stream first",
                 name, n);
  return zppSuccess;
}

zppResult_t zppGradCreate(zppComm_t comm, size_t recvcount, zppDataType_t datatype, int bits,
                          zppGrad_t* grad) {
  const char* name = "zppGradCreate";
  ZPP_ARGCHECK(grad != NULL, "%s: grad is NULL", name);
  *grad = NULL;
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  ZPPCHECK(checkType(name, datatype));
  ZPPCHECK(checkQgzBits(name, bits));
  ZPPCHECK(zppApiCheckCount(name, recvcount, datatype, comm->nranks));
  const zppTopo_t* topo = comm->topo;
  struct zppGrad* g = calloc(1, sizeof(*g));
  if (g == NULL) ZPP_FAIL(zppSystemError, ALL, "%s: out of memory", name);
  g->comm = comm;
  g->count = recvcount;
  g->type = datatype;
  g->bits = qgzBits(comm, bits);
  g->nRanks = comm->nranks;
  g->nNodes = topo->nNodes;
  /* Nodes of different sizes run plain (qgzAsPlain): no second quantization. */
  g->hasReduce = topo->uniform && topo->nNodes > 1 && topo->nodeSize[0] > 1;
  /* Zero residuals: every scale 0, every value 0. */
  size_t nSend = zppGradResidBytes(g, 0), nReduce = zppGradResidBytes(g, 1);
  zppResult_t res = zppSuccess;
  for (int i = 0; i < 2; i++) {
    ZPP_CALLOCGOTO(g->send[i], nSend ? nSend : 1, res, fail);
    if (g->hasReduce) ZPP_CALLOCGOTO(g->reduce[i], nReduce ? nReduce : 1, res, fail);
  }
  res = zppHandleRegister(g, ZPP_HANDLE_GRAD);
  if (res != zppSuccess) goto fail;
  *grad = g;
  return zppSuccess;
fail:
  for (int i = 0; i < 2; i++) {
    free(g->send[i]);
    free(g->reduce[i]);
  }
  free(g);
  return res;
}

/* The handles of an error-feedback call against its tensors. */
static zppResult_t checkGrads(const char* name, int ntensors, const size_t* counts, zppDataType_t type,
                              zppGrad_t const* grads, zppComm_t comm, zppStream_t stream) {
  for (int t = 0; t < ntensors; t++) {
    const struct zppGrad* g = grads[t];
    ZPPCHECK(checkGrad(g, name));
    ZPP_ARGCHECK(comm == g->comm, "%s: tensor %d: the handle belongs to another communicator (%s)",
                 name, t, g->comm->name);
    ZPP_ARGCHECK(counts[t] == g->count, "%s: tensor %d: recvcount %zu, the handle's is %zu", name, t,
                 counts[t], g->count);
    ZPP_ARGCHECK(type == g->type, "%s: tensor %d: datatype %s, the handle's is %s", name, t,
                 zppDtypeName(type), zppDtypeName(g->type));
    ZPP_ARGCHECK(g->bits == grads[0]->bits,
                 "%s: tensor %d: its handle is int%d, tensor 0's int%d: one call, one bit width", name,
                 t, g->bits, grads[0]->bits);
    for (int u = 0; u < t; u++)
      ZPP_ARGCHECK(grads[u] != g, "%s: tensors %d and %d share one handle: each gradient has its own",
                   name, u, t);
    ZPP_USAGECHECK(atomic_load(&g->inFlight) == 0 || g->lastStream == (zppHostStream_t)stream,
                   "%s: tensor %d: a call on its handle is pending on another stream: one handle's "
                   "calls go in order on one stream",
                   name, t);
  }
  return zppSuccess;
}

static zppResult_t qgzEF(const char* name, int ntensors, const void* const* sendbuffs,
                         void* const* recvbuffs, const size_t* counts, zppDataType_t datatype,
                         zppRedOp_t op, zppGrad_t const* grads, zppComm_t comm, zppStream_t stream) {
  ZPP_ARGCHECK(ntensors >= 0, "%s: ntensors %d is negative", name, ntensors);
  ZPP_ARGCHECK(ntensors == 0 || grads != NULL, "%s: grads is NULL with %d tensors", name, ntensors);
  if (ntensors > 0) ZPPCHECK(checkGrad(grads[0], name)); /* its bits, for the validation */
  int bits = ntensors > 0 ? grads[0]->bits : 0, device = 0;
  ZPPCHECK_READY(qgzValidate(name, ntensors, sendbuffs, recvbuffs, counts, datatype, op, bits, comm,
                             stream, &device));
  ZPPCHECK(checkGrads(name, ntensors, counts, datatype, grads, comm, stream));
  ZPP_USAGECHECK(!device,
                 "%s: error feedback runs on host buffers only (its device path is not "
                 "written yet)",
                 name);
  for (int t = 0; t < ntensors; t++) grads[t]->lastStream = (zppHostStream_t)stream;
  return qgzIssue(comm, ntensors, sendbuffs, recvbuffs, counts, datatype, op, bits, grads, stream,
                  device);
}

zppResult_t zppQgzReduceScatterEF(const void* sendbuff, void* recvbuff, size_t recvcount,
                                  zppDataType_t datatype, zppRedOp_t op, zppGrad_t grad, zppComm_t comm,
                                  zppStream_t stream) {
  const void* sends[1] = {sendbuff};
  void* recvs[1] = {recvbuff};
  size_t counts[1] = {recvcount};
  zppGrad_t grads[1] = {grad};
  return qgzEF("zppQgzReduceScatterEF", 1, sends, recvs, counts, datatype, op, grads, comm, stream);
}

zppResult_t zppQgzReduceScatterCoalescedEF(int ntensors, const void* const* sendbuffs,
                                           void* const* recvbuffs, const size_t* recvcounts,
                                           zppDataType_t datatype, zppRedOp_t op,
                                           zppGrad_t const* grads, zppComm_t comm, zppStream_t stream) {
  return qgzEF("zppQgzReduceScatterCoalescedEF", ntensors, sendbuffs, recvbuffs, recvcounts, datatype,
               op, grads, comm, stream);
}

zppResult_t zppGradUndo(zppGrad_t grad) {
  ZPPCHECK(checkGrad(grad, "zppGradUndo"));
  ZPPCHECK(checkSettled(grad, "zppGradUndo"));
  ZPP_USAGECHECK(atomic_exchange(&grad->undoable, 0),
                 "zppGradUndo: nothing to undo (no call completed since the handle was made, "
                 "loaded or last undone)");
  atomic_store(&grad->cur, atomic_load(&grad->cur) ^ 1);
  return zppSuccess;
}

/* The saved state: this header, then the current send residual's buffer,
 * then the reduce one's (when the handle has them), as zppGrad holds them
 * (8-bit residuals). rotBlock: the codec block of the residuals'
 * rotated-domain values (zpp_quant.h, "error feedback in the rotated
 * domain"), 0 without rotation. Version 2 had no rotated values (its
 * place held 0); version 1 held fp32 residuals. */
typedef struct {
  uint64_t magic;
  uint64_t count;
  int32_t type, bits, nranks, nNodes, hasReduce, rotBlock;
} gradState_t;
#define GRAD_STATE_MAGIC 0x335f46455f70707aull /* "zpp_EF_3" */
#define GRAD_STATE_MAGIC_V2 0x325f46455f70707aull
#define GRAD_STATE_MAGIC_V1 0x315f46455f70707aull

/* The block of the rotated-domain values this handle's calls keep: its
 * communicator's qgZ block when it rotates, else 0. */
static int32_t gradRotBlock(const struct zppGrad* g) {
  const zppCompressSettings_t* s = &g->comm->compress;
  return (zppCompressQuantFlags(s) & ZPP_QUANT_ROTATE) ? zppCompressBlock(s, g->bits) : 0;
}

static size_t gradStateBytes(const struct zppGrad* g) {
  return sizeof(gradState_t) + zppGradResidBytes(g, 0) + (g->hasReduce ? zppGradResidBytes(g, 1) : 0);
}

zppResult_t zppGradStateBytes(zppGrad_t grad, size_t* bytes) {
  ZPPCHECK(checkGrad(grad, "zppGradStateBytes"));
  ZPP_ARGCHECK(bytes != NULL, "zppGradStateBytes: bytes is NULL");
  *bytes = gradStateBytes(grad);
  return zppSuccess;
}

zppResult_t zppGradSaveState(zppGrad_t grad, void* buf, size_t bytes) {
  ZPPCHECK(checkGrad(grad, "zppGradSaveState"));
  ZPPCHECK(checkSettled(grad, "zppGradSaveState"));
  ZPP_ARGCHECK(buf != NULL && bytes >= gradStateBytes(grad),
               "zppGradSaveState: %zu bytes at %p, it needs %zu (zppGradStateBytes)", bytes, buf,
               gradStateBytes(grad));
  gradState_t h = {GRAD_STATE_MAGIC,   grad->count,  (int32_t)grad->type, grad->bits,
                   grad->comm->nranks, grad->nNodes, grad->hasReduce,     gradRotBlock(grad)};
  char* p = buf;
  memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  int cur = atomic_load(&grad->cur);
  size_t nSend = zppGradResidBytes(grad, 0);
  memcpy(p, grad->send[cur], nSend);
  if (grad->hasReduce) memcpy(p + nSend, grad->reduce[cur], zppGradResidBytes(grad, 1));
  return zppSuccess;
}

zppResult_t zppGradLoadState(zppGrad_t grad, const void* buf, size_t bytes) {
  const char* name = "zppGradLoadState";
  ZPPCHECK(checkGrad(grad, name));
  ZPPCHECK(checkSettled(grad, name));
  gradState_t h = {0};
  if (buf != NULL && bytes >= sizeof(h)) {
    memcpy(&h, buf, sizeof(h));
    ZPP_ARGCHECK(h.magic != GRAD_STATE_MAGIC_V1,
                 "%s: a state of fp32 residuals, saved by a build from before residuals were kept in "
                 "8 bits; this one cannot read it: start from zero residuals (docs/zeropp.md, "
                 "\"Error feedback\")",
                 name);
  }
  ZPP_ARGCHECK(buf != NULL && bytes == gradStateBytes(grad),
               "%s: %zu bytes, this handle's state is %zu (zppGradStateBytes)", name, bytes,
               gradStateBytes(grad));
  ZPP_ARGCHECK(h.magic == GRAD_STATE_MAGIC || (h.magic == GRAD_STATE_MAGIC_V2 && h.rotBlock == 0),
               "%s: not a saved zppGrad state", name);
  ZPP_ARGCHECK(
      h.rotBlock == 0 || (h.rotBlock >= ZPP_QUANT_MIN_BLOCK && h.rotBlock <= ZPP_QUANT_MAX_BLOCK &&
                          (h.rotBlock & (h.rotBlock - 1)) == 0),
      "%s: the state's rotation block %d is not a codec block", name, h.rotBlock);
  ZPP_ARGCHECK(h.count == grad->count && h.type == (int32_t)grad->type && h.bits == grad->bits &&
                   h.nranks == grad->comm->nranks && h.nNodes == grad->nNodes &&
                   h.hasReduce == grad->hasReduce,
               "%s: saved for recvcount %llu, type %d, int%d, %d ranks on %d nodes; this handle: "
               "%zu, %d, int%d, %d ranks on %d nodes",
               name, (unsigned long long)h.count, h.type, h.bits, h.nranks, h.nNodes, grad->count,
               (int)grad->type, grad->bits, grad->comm->nranks, grad->nNodes);
  const char* p = (const char*)buf + sizeof(h);
  int cur = atomic_load(&grad->cur);
  size_t nSend = zppGradResidBytes(grad, 0);
  memcpy(grad->send[cur], p, nSend);
  if (grad->hasReduce) memcpy(grad->reduce[cur], p + nSend, zppGradResidBytes(grad, 1));
  if (h.rotBlock != 0 && h.rotBlock != gradRotBlock(grad)) {
    /* Rotated values of another block, or a communicator that does not
     * rotate: each row's back in the original domain, which every call
     * reads. */
    for (int reduce = 0; reduce <= grad->hasReduce; reduce++) {
      void* resid = reduce ? grad->reduce[cur] : grad->send[cur];
      zppQuantResid_t r = zppQuantResidIn(resid, zppGradResidElems(grad, reduce));
      for (int row = 0; row < (reduce ? grad->nNodes : grad->nRanks); row++)
        zppQuantResidUnrotate(zppQuantResidAt(r, (size_t)row * zppQgzResidRow(grad->count)),
                              grad->count, h.rotBlock);
    }
  }
  atomic_store(&grad->undoable, 0);
  return zppSuccess;
}

zppResult_t zppGradDestroy(zppGrad_t grad) {
  if (grad == NULL) return zppSuccess;
  /* Live first: a destroyed handle's memory is not read. */
  ZPPCHECK(checkGrad(grad, "zppGradDestroy"));
  ZPPCHECK(checkSettled(grad, "zppGradDestroy"));
  ZPP_ARGCHECK(zppHandleUnregister(grad, ZPP_HANDLE_GRAD),
               "zppGradDestroy: not a live gradient handle (destroyed, or not made by zppGradCreate)");
  for (int i = 0; i < 2; i++) {
    free(grad->send[i]);
    free(grad->reduce[i]);
  }
  free(grad);
  return zppSuccess;
}

/* ---- plain calls under compression settings ------------------------------ */

zppResult_t zppZeroppTryPlain(struct zppComm* comm, const zppHostColl_t* call, zppStream_t stream,
                              int device, int* taken) {
  *taken = 0;
  const zppCompressSettings_t* s = &comm->compress;
  if (comm->nranks < 2 || !isFloating(call->type)) return zppSuccess;
  size_t bytes = call->count * zppDtypeSize(call->type) * (size_t)comm->nranks;
  if (bytes < s->compressMinBytes) return zppSuccess;
  if (call->kind == zppOpAllGather && s->qwzBits) {
    *taken = 1;
    return qwzIssue(comm, call->sendbuff, call->recvbuff, call->count, call->type, s->qwzBits, stream,
                    device);
  }
  if (call->kind == zppOpReduceScatter && s->qgzBits && (call->op == zppSum || call->op == zppAvg)) {
    const void* sends[1] = {call->sendbuff};
    void* recvs[1] = {call->recvbuff};
    size_t counts[1] = {call->count};
    *taken = 1;
    ZPPCHECK(checkNoFeedback(comm, "zppReduceScatter"));
    return qgzIssue(comm, 1, sends, recvs, counts, call->type, call->op, s->qgzBits, NULL, stream,
                    device);
  }
  return zppSuccess;
}

/* ---- hpZ -------------------------------------------------------------------- */

static zppResult_t checkParam(const struct zppParam* p, const char* name) {
  ZPP_ARGCHECK(p != NULL, "%s: param is NULL", name);
  ZPP_ARGCHECK(zppHandleIsLive(p, ZPP_HANDLE_PARAM),
               "%s: not a live parameter (destroyed, or "
               "not made by zppParamCreate)",
               name);
  return zppSuccess;
}

zppResult_t zppParamCreate(zppComm_t comm, size_t shardcount, zppDataType_t datatype, int bits,
                           zppParam_t* param) {
  return zppParamCreateEx(comm, shardcount, datatype, bits, 0, param);
}

zppResult_t zppParamCreateEx(zppComm_t comm, size_t shardcount, zppDataType_t datatype, int bits,
                             unsigned flags, zppParam_t* param) {
  const char* name = flags ? "zppParamCreateEx" : "zppParamCreate";
  ZPP_ARGCHECK(param != NULL, "%s: param (the output) is NULL", name);
  ZPPCHECK_READY(zppCommStateCheckUsable(comm));
  ZPP_ARGCHECK((int)datatype >= 0 && datatype < zppNumTypes, "%s: invalid datatype %d", name,
               (int)datatype);
  ZPPCHECK(checkQwzBits(name, bits));
  if (bits == 0) bits = comm->compress.qwzBits;
  if (bits) ZPPCHECK(checkType(name, datatype));
  ZPP_ARGCHECK((flags & ~ZPP_PARAM_DELTA) == 0, "%s: flags 0x%x unknown (0 or ZPP_PARAM_DELTA)", name,
               flags);
  ZPP_ARGCHECK(!(flags & ZPP_PARAM_DELTA) || bits != 0,
               "%s: ZPP_PARAM_DELTA needs a quantized gather: bits 8 or 4 (bits 0 took the "
               "communicator's qwzBits, which is 0)",
               name);
  ZPPCHECK(zppApiCheckCount(name, shardcount, datatype, comm->nranks));
  struct zppParam* p = NULL;
  ZPPCHECK(zppHpzCreate(comm, shardcount, datatype, bits, (flags & ZPP_PARAM_DELTA) != 0, &p));
  zppResult_t res = zppHandleRegister(p, ZPP_HANDLE_PARAM);
  if (res != zppSuccess) {
    zppHpzDestroy(p);
    return res;
  }
  *param = p;
  return zppSuccess;
}

static zppResult_t paramGather(zppParam_t p, const void* shard, void* full, zppStream_t stream,
                               int backward) {
  const char* name = backward ? "zppParamGatherBackward" : "zppParamGatherForward";
  ZPPCHECK(checkParam(p, name));
  ZPPCHECK_READY(zppCommStateCheckUsable(p->comm));
  size_t bytes = p->count * zppDtypeSize(p->type);
  if (p->count) {
    ZPP_ARGCHECK(shard != NULL && full != NULL, "%s: NULL buffer with %zu elements per shard", name,
                 p->count);
    /* The shard is the primary copy of the weights: an in-place gather would
     * overwrite it with its quantized image. */
    if (zppApiOverlaps(shard, bytes, full, bytes * (size_t)p->comm->nranks))
      ZPP_FAIL(zppInvalidUsage, ALL, "%s: shard and full overlap: the gather needs its own output",
               name);
  }
  int device = -1;
  ZPPCHECK(zppApiCheckWhere(name, p->count ? shard : NULL, p->count ? full : NULL, stream, &device));
  if (device)
    ZPP_FAIL(zppInvalidUsage, ALL,
             "%s: hpZ parameters take host buffers in this version (device buffers: use "
             "zppQwzAllGather for the forward gather)",
             name);
  countCall(p->comm, backward ? zppOpHpZ : (p->bits ? zppOpQwZ : zppOpAllGather));
  if (p->count == 0) return zppSuccess;
  return zppHpzIssueGather(p, shard, full, backward, (zppHostStream_t)stream);
}

zppResult_t zppParamGatherForward(zppParam_t param, const void* shard, void* full, zppStream_t stream) {
  return paramGather(param, shard, full, stream, 0);
}

zppResult_t zppParamGatherBackward(zppParam_t param, const void* shard, void* full,
                                   zppStream_t stream) {
  return paramGather(param, shard, full, stream, 1);
}

zppResult_t zppParamInvalidate(zppParam_t param) {
  ZPPCHECK(checkParam(param, "zppParamInvalidate"));
  atomic_fetch_add(&param->version, 1);
  return zppSuccess;
}

zppResult_t zppParamIsValid(zppParam_t param, int* valid) {
  ZPPCHECK(checkParam(param, "zppParamIsValid"));
  ZPP_ARGCHECK(valid != NULL, "zppParamIsValid: valid is NULL");
  *valid = atomic_load(&param->secVersion) == atomic_load(&param->version);
  return zppSuccess;
}

zppResult_t zppParamSecondaryBytes(zppParam_t param, size_t* bytes) {
  ZPPCHECK(checkParam(param, "zppParamSecondaryBytes"));
  ZPP_ARGCHECK(bytes != NULL, "zppParamSecondaryBytes: bytes is NULL");
  *bytes = param->delta ? param->count * zppDtypeSize(param->type) * (size_t)param->comm->nranks
                        : param->secondaryBytes;
  return zppSuccess;
}

zppResult_t zppParamDropReference(zppParam_t param) {
  ZPPCHECK(checkParam(param, "zppParamDropReference"));
  ZPP_ARGCHECK(param->delta, "zppParamDropReference: not a delta parameter (ZPP_PARAM_DELTA)");
  atomic_fetch_add(&param->drops, 1);
  return zppSuccess;
}

zppResult_t zppParamDestroy(zppParam_t param) {
  if (param == NULL) return zppSuccess;
  /* Out of the registry first, atomically: a second destroy fails. */
  ZPP_ARGCHECK(zppHandleUnregister(param, ZPP_HANDLE_PARAM),
               "zppParamDestroy: not a live parameter (destroyed, or not made by zppParamCreate)");
  zppHpzDestroy(param);
  return zppSuccess;
}
