/* qwZ of weight differences: the forward gather of a ZPP_PARAM_DELTA
 * parameter (include/zpp.h), on host buffers.
 *
 * Why. A 4-bit qwZ puts a fresh rounding error of about a tenth of a block's
 * largest weight into every gather (docs/codecs.md); in training that noise
 * lands in every forward pass and costs accuracy (docs/pytorch.md, "Accuracy
 * of the 4-bit codecs in FSDP2"). Weights move little per step, so sending
 * the change instead shrinks that error by the ratio of a step's update to
 * the weights themselves.
 *
 * How. Every rank keeps the reference R: the full weights as the last
 * forward gather returned them, bit-identical everywhere (every rank decodes
 * the same bytes, its own shard's included, and rounds the same way).
 *   - No reference (the first gather, or after zppParamDropReference): the
 *     plain ring gathers the shards exactly; R = the result.
 *   - Else rank k sends d_k = x_k - R_k (fp32: x and R widened, one
 *     subtraction) through qwZ's ring (qwz.c, with an fp32 layout of its
 *     own); then every rank sets R_j = round_T((float)R_j + d'_j) for every
 *     element j of the full weights, d'_j the decoded difference, and
 *     returns R.
 * The difference is taken against R, not against the previous shard, so
 * the error of a gathered weight is the codec's error on this gather's d
 * plus T's rounding of the sum: what the earlier gathers left out is in d,
 * and is sent again. Nothing builds up.
 *
 * Agreement. Whether R is valid, and how many references the parameter has
 * built, are part of the call's signature (hpz.c's gatherJob): ranks that
 * disagree (one dropped its reference and the others did not, or one failed
 * a gather the others completed) fail the call as a mismatched one, never
 * mix an exact gather with differences. A failed gather drops the reference
 * on the rank that failed.
 */
#include <string.h>

#include "coll_common.h"
#include "zeropp_host.h"

#include "check.h"
#include "names.h"
#include "lib/comm.h"
#include "quant_kernels/zpp_half.h"

/* dst[i] = (float)x[i] - (float)r[i]. */
static void difference(float* dst, const void* x, const void* r, size_t n, zppDataType_t t) {
  switch (t) {
    case zppFloat32: {
      const float *a = x, *b = r;
      for (size_t i = 0; i < n; i++) dst[i] = a[i] - b[i];
      break;
    }
    case zppFloat16: {
      const uint16_t *a = x, *b = r;
      for (size_t i = 0; i < n; i++) dst[i] = zppHalfToFloat(a[i]) - zppHalfToFloat(b[i]);
      break;
    }
    default: {
      const uint16_t *a = x, *b = r;
      for (size_t i = 0; i < n; i++) dst[i] = zppBf16ToFloat(a[i]) - zppBf16ToFloat(b[i]);
      break;
    }
  }
}

/* r[i] = round_T((float)r[i] + d[i]); out[i] = r[i]. */
static void apply(void* r, void* out, const float* d, size_t n, zppDataType_t t) {
  switch (t) {
    case zppFloat32: {
      float *a = r, *o = out;
      for (size_t i = 0; i < n; i++) o[i] = a[i] = a[i] + d[i];
      break;
    }
    case zppFloat16: {
      uint16_t *a = r, *o = out;
      for (size_t i = 0; i < n; i++) o[i] = a[i] = zppFloatToHalf(zppHalfToFloat(a[i]) + d[i]);
      break;
    }
    default: {
      uint16_t *a = r, *o = out;
      for (size_t i = 0; i < n; i++) o[i] = a[i] = zppFloatToBf16(zppBf16ToFloat(a[i]) + d[i]);
      break;
    }
  }
}

static zppResult_t exactGather(zppCollCtx_t* c, struct zppParam* p, const void* shard, void* full) {
  const size_t ts = zppDtypeSize(p->type), bytes = p->count * ts;
  memcpy((char*)p->ref + (size_t)c->rank * bytes, shard, bytes);
  if (c->nranks > 1) ZPPCHECK(zppCollAllGatherRing(c, p->ref, p->count * (size_t)c->nranks, ts, 0));
  memcpy(full, p->ref, bytes * (size_t)c->nranks);
  return zppSuccess;
}

static zppResult_t deltaGather(zppCollCtx_t* c, struct zppParam* p, const void* shard, void* full) {
  const size_t ts = zppDtypeSize(p->type), total = p->count * (size_t)c->nranks;
  /* Every rank's decoded difference, fp32, then this rank's own d in the
   * AUX slot; the packed shards in PACKED, as qwZ's. */
  float* all = zppCollScratch(c, ZPP_ZSCRATCH_PIPE, total * sizeof(float));
  float* mine = zppCollScratch(c, ZPP_ZSCRATCH_AUX, p->count * sizeof(float));
  char* packed = zppCollScratch(c, ZPP_ZSCRATCH_PACKED, (size_t)c->nranks * p->deltaLayout.shardPacked);
  if (all == NULL || mine == NULL || packed == NULL)
    ZPP_FAIL(zppSystemError, COLL, "%s: qwZ of differences: out of memory for %zu elements",
             c->comm->name, total);
  difference(mine, shard, (const char*)p->ref + (size_t)c->rank * p->count * ts, p->count, p->type);
  ZPPCHECK(zppCollQwzRun(c, &p->deltaLayout, mine, all, packed));
  apply(p->ref, full, all, total, p->type);
  return zppSuccess;
}

zppResult_t zppQwzDeltaGather(zppCollCtx_t* c, struct zppParam* p, const void* shard, void* full) {
  zppResult_t res = p->refValid ? deltaGather(c, p, shard, full) : exactGather(c, p, shard, full);
  if (res == zppSuccess && !p->refValid) {
    p->refValid = 1;
    p->refGen++;
  }
  /* A reference some elements of which took this gather's differences and
   * others not is nobody's: the next gather must rebuild it (the others, if
   * they completed, then fail it as a mismatched call). */
  if (res != zppSuccess) p->refValid = 0;
  return res;
}
