/* Shared host-collective plumbing; see coll_common.h. */
#include "coll_common.h"

#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "names.h"
#include "params.h"

zppResult_t zppCollRingCreate(const zppTopo_t* topo, int nranks, int** ringOut, int** posOut) {
  zppResult_t res = zppSuccess;
  int* ring = NULL;
  int* pos = NULL;
  ZPP_CALLOCGOTO(ring, (size_t)nranks, res, fail);
  ZPP_CALLOCGOTO(pos, (size_t)nranks, res, fail);
  int p = 0;
  for (int node = 0; node < topo->nNodes; node++)
    for (int i = 0; i < topo->nodeSize[node] && p < nranks; i++) ring[p++] = topo->nodeRanks[node][i];
  if (p != nranks)
    ZPP_FAILGOTO(zppInternalError, res, fail, COLL, "topology covers %d of %d ranks", p, nranks);
  for (int i = 0; i < nranks; i++) pos[ring[i]] = i;
  *ringOut = ring;
  *posOut = pos;
  return zppSuccess;
fail:
  free(ring);
  free(pos);
  return res;
}

zppResult_t zppCollPipelineParams(size_t* chunkBytes, int* depth) {
  int64_t chunk = 0, d = 0;
  ZPPCHECK(zppEnvGetInt("ZPP_PIPELINE_CHUNK_BYTES", &chunk));
  ZPPCHECK(zppEnvGetInt("ZPP_PIPELINE_DEPTH", &d));
  if (chunk < 1024 || d < 1 || d > 64)
    ZPP_FAIL(zppInvalidArgument, ENV,
             "ZPP_PIPELINE_CHUNK_BYTES=%lld (>= 1024) or ZPP_PIPELINE_DEPTH=%lld (1..64) out of range",
             (long long)chunk, (long long)d);
  *chunkBytes = (size_t)chunk;
  *depth = (int)d;
  return zppSuccess;
}

/* Why not free large slots after every call: giving back and faulting in a
 * large buffer costs every call that needs it again. Freeing the 134 MB of a
 * 256 MiB qwZ on 4 ranks after each call cost it 4-5% at 1 Gbit/s (0.87-0.90
 * of the wire against 0.92-0.93 kept). */

void* zppScratchPoolGet(zppScratchPool_t* pool, int slot, size_t bytes) {
  if (slot < 0 || slot >= ZPP_SCRATCH_POOL_SLOTS) return NULL;
  if (bytes > pool->used[slot]) pool->used[slot] = bytes;
  if (pool->buf[slot] && bytes <= pool->bytes[slot]) return pool->buf[slot];
  free(pool->buf[slot]);
  size_t sz = (bytes + 63) & ~(size_t)63;
  pool->buf[slot] = aligned_alloc(64, sz ? sz : 64);
  pool->bytes[slot] = pool->buf[slot] ? bytes : 0;
  return pool->buf[slot];
}

void zppScratchPoolTrim(zppScratchPool_t* pool) {
  for (int i = 0; i < ZPP_SCRATCH_POOL_SLOTS; i++) {
    size_t used = pool->used[i], keep;
    pool->used[i] = 0;
    if (pool->buf[i] == NULL) {
      pool->trim[i] = (zppTrimRule_t){0};
    } else if (zppTrimAfterUse(&pool->trim[i], pool->bytes[i], used, &keep)) {
      free(pool->buf[i]);
      pool->buf[i] = NULL;
      pool->bytes[i] = 0;
    }
  }
}

void zppScratchPoolFree(zppScratchPool_t* pool) {
  for (int i = 0; i < ZPP_SCRATCH_POOL_SLOTS; i++) {
    free(pool->buf[i]);
    pool->buf[i] = NULL;
    pool->bytes[i] = 0;
  }
}

#define SIG_NO_OP 7u

uint32_t zppCollSig(zppOpKind_t kind, zppDataType_t type, int op, const uint64_t* vals, int nvals) {
  /* One multiply-xorshift round per value (FNV over every byte was a
   * visible share of a small call's time), folded to 10 bits. */
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < nvals; i++) {
    h = (h ^ vals[i]) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  h ^= h >> 32;
  h ^= h >> 16;
  uint32_t o = (op >= 0 && op < zppNumOps) ? (uint32_t)op : SIG_NO_OP;
  return ((uint32_t)kind << ZPP_SIG_KIND_SHIFT) | ((uint32_t)type << 12) | (o << 9) |
         (uint32_t)(h & 0x1ffu);
}

void zppCollDescribeSig(uint32_t sig, char* buf, size_t len) {
  unsigned kind = zppCollSigKind(sig), type = (sig >> 12) & 15u, op = (sig >> 9) & 7u;
  const char* kn = zppOpKindCallName((zppOpKind_t)kind);
  const char* tn = zppDtypeName((zppDataType_t)type);
  if (op < zppNumOps)
    snprintf(buf, len, "%s(%s, %s; #%03x)", kn, tn, zppRedOpName((zppRedOp_t)op), sig & 0x1ffu);
  else
    snprintf(buf, len, "%s(%s; #%03x)", kn, tn, sig & 0x1ffu);
}

void zppCollDescribeMismatch(uint32_t theirs, uint32_t mine, const char* hashHint, char* buf,
                             size_t len) {
  char a[96], b[96];
  zppCollDescribeSig(theirs, a, sizeof(a));
  zppCollDescribeSig(mine, b, sizeof(b));
  /* Same collective, type and op: only the hash of the rest differs. */
  int sameCall = (theirs >> 9) == (mine >> 9);
  snprintf(buf, len, "%s while this rank called %s%s%s%s", a, b, sameCall ? " (#: a hash of " : "",
           sameCall ? hashHint : "", sameCall ? ": these differ)" : "");
}
