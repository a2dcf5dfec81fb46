/* qgZ: quantized gradient reduce-scatter as a hierarchical all-to-all, on
 * host buffers, pipelined.
 *
 * With N nodes of L ranks (W = N * L), partition p owned by rank p, and
 * owner(n, j) the rank with local rank j on node n (the topology's, whatever
 * the numbering of ranks across nodes), per chunk of every partition:
 *   1. quantize (tensor-slice reordering): the N partitions that local rank
 *      j's column owns (owner(n, j), n = 0..N-1) become one contiguous run of
 *      segments, the message to local rank j;
 *   2. intra-node all-to-all: local rank j receives, from every local peer,
 *      its N segments;
 *   3. fused dequantize-reduce-requantize per destination node n: the sum
 *      over the node's L ranks of partition owner(n, j), one segment per node;
 *   4. inter-node all-to-all among the ranks of local rank j: the segment for
 *      node n goes to rank (n, j);
 *   5. dequantize-sum of the N node sums, divided by 1 (sum) or by W (avg:
 *      the world size, not the node count), into the caller's type.
 * Rotation (a->flags ZPP_QUANT_ROTATE): every quantization is rotated and
 * the reductions are the Ex ones (zpp_quant.h, "Reductions of rotated
 * segments": each input decoded in full, then summed).
 * One node: step 3's sum is the result (no second quantization, no inter
 * hop). One rank per node: no intra hop, the segments go straight across.
 *
 * Partitions are found through the topology, never by arithmetic on p: with
 * ranks placed on nodes in turn (mpirun --map-by node, Slurm cyclic),
 * owner(n, j) is n + j * N, not n * L + j, and arithmetic on p would hand
 * ranks each other's partitions.
 *
 * Any count: a partition's last block is just shorter; nothing is padded or
 * dropped. Needs nodes of equal size (checked by the API layer).
 *
 * Error feedback (a->efSendIn set; docs/zeropp.md, "Error feedback"): step
 * 1 quantizes x = g + e (g the caller's partition, e what this rank's last
 * quantization of it dropped) and keeps e' = x - decode(quantized x); with
 * rotation, the same in the rotated domain (zppQuantizeExFeedback: e added
 * after the rotation, e' = z - Q(z), nothing decoded). Step 3 sums the
 * node's inputs in fp32, adds its own residual, quantizes that and keeps
 * what it dropped (with rotation, zppQuantizeExFeedback on the sum). An
 * element whose x is not finite travels as its escape and keeps its old
 * residual.
 *
 * Pipelining: each partition is cut into chunks of whole blocks; a bucket of
 * tensors (the coalesced call) is cut the same way per tensor, so every
 * tensor is quantized exactly as a call of its own would, and small
 * tensors share a chunk. Iteration t quantizes chunk t and posts its intra
 * hop, then finishes chunk t-1's intra hop, reduces it and posts its inter
 * hop, then finishes chunk t-2: quantization, the intra-node hop and the
 * inter-node hop of three chunks overlap. Three buffer slots rotate.
 * Tag steps: 2t (intra) and 2t+1 (inter), mod 256; at most two chunks per
 * hop are in flight between any pair.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zeropp.h"

#include "check.h"
#include "names.h"
#include "lib/comm.h"
#include "quant_kernels/zpp_half.h"
#include "quant_kernels/zpp_quant.h"

#define NSLOTS 3

typedef struct {
  int t;        /* tensor */
  size_t off;   /* first element within each partition */
  size_t len;   /* elements */
  size_t bytes; /* one packed segment of len elements */
  size_t pre;   /* bytes of the chunk's earlier pieces, per segment run */
} piece_t;

typedef struct {
  int k0, k1; /* pieces [k0, k1) */
  size_t sum; /* bytes of one segment of every piece: one node's run */
} chunk_t;

typedef struct {
  zppCollCtx_t* c;
  const zppQgzArgs_t* a;
  int N, L, node, lr;
  size_t ts;
  float divisor;
  const int* intra;        /* the node's ranks, local order */
  int* inter;              /* [N] the ranks of this local rank, node order */
  const int* const* owner; /* [N][L] the rank of local rank j on node n */
  piece_t* pieces;
  chunk_t* chunks;
  int nChunks;
  size_t s1max;                   /* largest N * chunk.sum */
  char* q[NSLOTS];                /* L * s1max: quantized, by destination local rank */
  char* a1[NSLOTS];               /* L * s1max: received from each local peer */
  char* r[NSLOTS];                /* N * sum: reduced, by destination node */
  char* a2[NSLOTS];               /* N * sum: received from each node */
  zppP2pReq_t** reqIntra[NSLOTS]; /* 2L */
  zppP2pReq_t** reqInter[NSLOTS]; /* 2N */
  float* efX; /* error feedback's scratch, a piece's elements each: x, or the node's sum */
  float* efD; /* x's decode, or (2 of them) zppQuantizeExFeedback's scratch for the sum */
} qgz_t;

static zppResult_t planChunks(qgz_t* g, size_t ce) {
  const zppQgzArgs_t* a = g->a;
  size_t np = 0;
  for (int t = 0; t < a->ntensors; t++) np += (a->counts[t] + ce - 1) / ce;
  if (np > (size_t)1 << 26)
    ZPP_FAIL(zppInvalidArgument, COLL, "qgZ: %zu pipeline pieces: raise ZPP_PIPELINE_CHUNK_BYTES", np);
  g->pieces = calloc(np ? np : 1, sizeof(piece_t));
  g->chunks = calloc(np ? np : 1, sizeof(chunk_t));
  if (g->pieces == NULL || g->chunks == NULL) ZPP_FAIL(zppSystemError, COLL, "qgZ: out of memory");
  int k = 0;
  size_t fill = 0; /* elements in the open chunk */
  chunk_t* open = NULL;
  for (int t = 0; t < a->ntensors; t++) {
    for (size_t off = 0; off < a->counts[t]; off += ce) {
      piece_t* p = &g->pieces[k];
      p->t = t;
      p->off = off;
      p->len = a->counts[t] - off < ce ? a->counts[t] - off : ce;
      p->bytes = zppQuantPackedSize(p->len, a->bits, a->block);
      if (p->bytes == 0)
        ZPP_FAIL(zppInvalidArgument, COLL, "qgZ: %zu elements too many to pack", p->len);
      if (open == NULL || fill + p->len > ce) {
        open = &g->chunks[g->nChunks++];
        open->k0 = k;
        open->sum = 0;
        fill = 0;
      }
      p->pre = open->sum;
      open->sum += p->bytes;
      open->k1 = k + 1;
      fill += p->len;
      size_t s1 = (size_t)g->N * open->sum;
      if (s1 > g->s1max) g->s1max = s1;
      k++;
    }
  }
  return zppSuccess;
}

static const char* sendAt(const qgz_t* g, const piece_t* p, size_t partition) {
  return (const char*)g->a->send[p->t] + (partition * g->a->counts[p->t] + p->off) * g->ts;
}

/* Error feedback's quantization of the len values x in efX (the residual
 * added) into dst: eOut = x - decode(dst), except where that is not finite
 * (x was: its escape carries it): there the old residual eIn stays. */
static zppResult_t quantizeWithFeedback(const qgz_t* g, zppQuantResid_t eIn, zppQuantResid_t eOut,
                                        size_t len, char* dst) {
  const zppQgzArgs_t* a = g->a;
  ZPPCHECK(zppQuantizeEx(g->efX, zppFloat32, len, a->bits, a->block, a->flags, dst));
  ZPPCHECK(zppDequantizeEx(dst, len, a->bits, a->block, g->efD, zppFloat32));
  zppQuantNewResidual(g->efX, g->efD, eIn, len, eOut);
  return zppSuccess;
}

/* The run of a residual (zppQgzArgs_t) for piece p of row `row`. */
static zppQuantResid_t residualOf(const zppQuantResid_t* r, const piece_t* p, const size_t* counts,
                                  size_t row) {
  return zppQuantResidAt(r[p->t], row * zppQgzResidRow(counts[p->t]) + p->off);
}

/* Step 1 for one segment: partition `partition` of piece p into dst. */
static zppResult_t quantizePiece(const qgz_t* g, const piece_t* p, size_t partition, char* dst) {
  const zppQgzArgs_t* a = g->a;
  const char* in = sendAt(g, p, partition);
  if (a->efSendIn == NULL) return zppQuantizeEx(in, a->type, p->len, a->bits, a->block, a->flags, dst);
  zppQuantResid_t eIn = residualOf(a->efSendIn, p, a->counts, partition);
  zppQuantResid_t eOut = residualOf(a->efSendOut, p, a->counts, partition);
  if (a->flags & ZPP_QUANT_ROTATE) /* the residual kept in the rotated domain */
    return zppQuantizeExFeedback(in, a->type, p->len, a->bits, a->block, eIn, eOut, dst, g->efX);
  zppQuantAddResidual(in, a->type, eIn, p->len, g->efX);
  return quantizeWithFeedback(g, eIn, eOut, p->len, dst);
}

/* Quantize chunk t and post its first hop. */
static zppResult_t stage1(qgz_t* g, int t) {
  const chunk_t* ch = &g->chunks[t];
  const int s = t % NSLOTS, N = g->N, L = g->L;
  const size_t s1 = (size_t)N * ch->sum, s2 = ch->sum;
  if (L > 1 || N == 1) {
    for (int j = 0; j < L; j++) {
      char* dst = (j == g->lr ? g->a1[s] : g->q[s]) + (size_t)j * s1;
      for (int k = ch->k0; k < ch->k1; k++) {
        const piece_t* p = &g->pieces[k];
        /* Local rank j's partitions, one per node in node order, as one run:
         * segment n of the piece is the partition of owner(n, j). */
        for (int n = 0; n < N; n++)
          ZPPCHECK(quantizePiece(g, p, (size_t)g->owner[n][j],
                                 dst + (size_t)N * p->pre + (size_t)n * p->bytes));
      }
      zppCollProgress(g->c);
    }
    if (L > 1)
      ZPPCHECK(zppGroupAllToAllPost(g->c, g->intra, L, g->lr, g->q[s], s1, g->a1[s], s1, s1,
                                    (uint32_t)(2 * t), g->reqIntra[s]));
    return zppSuccess;
  }
  /* One rank per node: each partition straight into its node's run. */
  for (int n = 0; n < N; n++) {
    char* dst = (n == g->node ? g->a2[s] : g->r[s]) + (size_t)n * s2;
    for (int k = ch->k0; k < ch->k1; k++) {
      const piece_t* p = &g->pieces[k];
      ZPPCHECK(quantizePiece(g, p, (size_t)g->owner[n][0], dst + p->pre));
    }
  }
  return zppGroupAllToAllPost(g->c, g->inter, N, g->node, g->r[s], s2, g->a2[s], s2, s2,
                              (uint32_t)(2 * t + 1), g->reqInter[s]);
}

static zppResult_t finish(qgz_t* g, const chunk_t* ch, const char* in, size_t stride, int n) {
  const zppQgzArgs_t* a = g->a;
  for (int k = ch->k0; k < ch->k1; k++) {
    const piece_t* p = &g->pieces[k];
    char* out = (char*)a->recv[p->t] + p->off * g->ts;
    if (a->flags & ZPP_QUANT_ROTATE)
      ZPPCHECK(zppDequantizeSumEx(in + p->pre, stride, n, p->len, a->bits, a->block, g->divisor, out,
                                  a->type));
    else
      ZPPCHECK(zppDequantizeSum(in + p->pre, stride, n, p->len, a->bits, a->block, g->divisor, out,
                                a->type));
  }
  return zppSuccess;
}

/* Finish chunk t's intra hop; reduce per node and post the inter hop (or,
 * on one node, write the result). */
static zppResult_t stage2(qgz_t* g, int t) {
  const zppQgzArgs_t* a = g->a;
  const chunk_t* ch = &g->chunks[t];
  const int s = t % NSLOTS, N = g->N, L = g->L;
  const size_t s1 = (size_t)N * ch->sum, s2 = ch->sum;
  if (L == 1 && N > 1) return zppSuccess; /* no intra hop */
  if (L > 1) ZPPCHECK(zppP2pWaitAll(g->c->p2p, g->reqIntra[s], 2 * L));
  if (N == 1) return finish(g, ch, g->a1[s], s1, L);
  for (int n = 0; n < N; n++) {
    char* dst = (n == g->node ? g->a2[s] : g->r[s]) + (size_t)n * s2;
    for (int k = ch->k0; k < ch->k1; k++) {
      const piece_t* p = &g->pieces[k];
      /* Inputs: every local peer's segment of this piece for node n. */
      const char* in = g->a1[s] + (size_t)N * p->pre + (size_t)n * p->bytes;
      if (a->efReduceIn != NULL) {
        /* The node's sum in fp32, into efX. */
        float* sum = g->efX;
        if (a->flags & ZPP_QUANT_ROTATE)
          ZPPCHECK(zppDequantizeSumEx(in, s1, L, p->len, a->bits, a->block, 1.0f, sum, zppFloat32));
        else
          ZPPCHECK(zppDequantizeSum(in, s1, L, p->len, a->bits, a->block, 1.0f, sum, zppFloat32));
        zppQuantResid_t eIn = residualOf(a->efReduceIn, p, a->counts, (size_t)n);
        zppQuantResid_t eOut = residualOf(a->efReduceOut, p, a->counts, (size_t)n);
        if (a->flags & ZPP_QUANT_ROTATE) { /* as the sender's, in the rotated domain */
          ZPPCHECK(zppQuantizeExFeedback(sum, zppFloat32, p->len, a->bits, a->block, eIn, eOut,
                                         dst + p->pre, g->efD));
        } else {
          zppQuantAddResidual(sum, zppFloat32, eIn, p->len, sum);
          ZPPCHECK(quantizeWithFeedback(g, eIn, eOut, p->len, dst + p->pre));
        }
      } else if (a->flags & ZPP_QUANT_ROTATE)
        ZPPCHECK(zppQuantReduceRequantEx(in, s1, L, p->len, a->bits, a->block, a->bits, a->block,
                                         a->flags, dst + p->pre));
      else
        ZPPCHECK(zppQuantReduceRequant(in, s1, L, p->len, a->bits, a->block, a->bits, a->block,
                                       dst + p->pre));
    }
    zppCollProgress(g->c);
  }
  return zppGroupAllToAllPost(g->c, g->inter, N, g->node, g->r[s], s2, g->a2[s], s2, s2,
                              (uint32_t)(2 * t + 1), g->reqInter[s]);
}

/* Finish chunk t's inter hop and write the result. */
static zppResult_t stage3(qgz_t* g, int t) {
  if (g->N == 1) return zppSuccess;
  const int s = t % NSLOTS;
  ZPPCHECK(zppP2pWaitAll(g->c->p2p, g->reqInter[s], 2 * g->N));
  return finish(g, &g->chunks[t], g->a2[s], g->chunks[t].sum, g->N);
}

zppResult_t zppCollQgzRun(zppCollCtx_t* c, const zppQgzArgs_t* a) {
  const zppTopo_t* topo = c->comm->topo;
  if (!topo->uniform) ZPP_FAIL(zppInvalidUsage, COLL, "qgZ needs nodes of equal size");
  zppResult_t res = zppSuccess;
  qgz_t g;
  memset(&g, 0, sizeof(g));
  g.c = c;
  g.a = a;
  g.N = topo->nNodes;
  g.node = topo->nodeOf[c->rank];
  g.L = topo->nodeSize[g.node];
  g.lr = topo->localRankOf[c->rank];
  g.ts = zppDtypeSize(a->type);
  g.divisor = a->op == zppAvg ? (float)c->nranks : 1.0f;
  g.intra = topo->nodeRanks[g.node];
  g.owner = (const int* const*)topo->nodeRanks;
  zppP2pReq_t** reqs = NULL;
  ZPP_CALLOCGOTO(g.inter, (size_t)g.N, res, out);
  for (int n = 0; n < g.N; n++) g.inter[n] = topo->nodeRanks[n][g.lr];
  /* The inter-node all-to-all sends to N - 1 nodes at once: they share the
   * chunk (zppCollChunkElems). */
  size_t ce = zppCollChunkElems(c, a->type, a->block, g.N - 1);
  ZPPCHECKGOTO(planChunks(&g, ce), res, out);
  if (g.nChunks == 0) goto out;
  if (a->efSendIn != NULL) { /* a piece is at most ce elements; kept between calls */
    g.efX = zppCollScratch(c, ZPP_ZSCRATCH_AUX, 3 * ce * sizeof(float));
    if (g.efX == NULL)
      ZPP_FAILGOTO(zppSystemError, res, out, COLL, "qgZ: out of memory for error feedback's %zu bytes",
                   3 * ce * sizeof(float));
    g.efD = g.efX + ce;
  }

  ZPP_CALLOCGOTO(reqs, (size_t)NSLOTS * 2 * (size_t)(g.L + g.N), res, out);
  const size_t qBytes = (size_t)g.L * g.s1max, rBytes = g.s1max; /* N * sum <= s1max */
  const size_t slotBytes = 2 * qBytes + 2 * rBytes;
  char* base = zppCollScratch(c, ZPP_ZSCRATCH_PIPE, NSLOTS * slotBytes);
  if (base == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, COLL, "qgZ: out of memory for %zu bytes of buffers",
                 NSLOTS * slotBytes);
  for (int s = 0; s < NSLOTS; s++) {
    char* b = base + (size_t)s * slotBytes;
    g.q[s] = b;
    g.a1[s] = b + qBytes;
    g.r[s] = b + 2 * qBytes;
    g.a2[s] = b + 2 * qBytes + rBytes;
    g.reqIntra[s] = reqs + (size_t)s * 2 * (size_t)(g.L + g.N);
    g.reqInter[s] = g.reqIntra[s] + 2 * g.L;
  }
  for (int t = 0; t < g.nChunks + 2; t++) {
    if (t < g.nChunks) ZPPCHECKGOTO(stage1(&g, t), res, out);
    if (t >= 1 && t - 1 < g.nChunks) ZPPCHECKGOTO(stage2(&g, t - 1), res, out);
    if (t >= 2) ZPPCHECKGOTO(stage3(&g, t - 2), res, out);
  }
out:
  /* On error the requests still live belong to the transport until the
   * caller's quiesce; only the arrays go. */
  free(reqs);
  free(g.inter);
  free(g.pieces);
  free(g.chunks);
  return res;
}
