/* hpZ: partitioned parameters with a secondary partition inside a group of
 * ranks (the node, or hpzGroupSize ranks of it), on host buffers.
 *
 * Forward gather: the global gather (qwZ when bits != 0, else the plain ring)
 * of every rank's shard. With no extra traffic it keeps this rank's share of
 * what it received: the packed shards (qwZ) or raw shards (plain) of ranks
 * [shardLo, shardLo + shardCnt), its group position's share of the W shards.
 * Keeping the packed form rather than the decoded weights halves (int8) or
 * quarters (int4) the secondary memory and the backward traffic, and the
 * backward result is still bit for bit the forward one: decoding is
 * deterministic, and the forward decodes the very same bytes.
 *
 * Backward gather: the group members exchange their shares (intra-node only)
 * and every member decodes all W shards.
 *
 * Validity. zppParamInvalidate bumps a version on the caller's thread; each
 * gather captures the version when issued. The secondary is valid for a
 * backward gather issued at version v iff it was gathered by a forward issued
 * at v. The decision thus follows the caller's program order, identically on
 * every rank that invalidates at the same point. Before exchanging data all
 * ranks agree on (validity, version, shard-changed) through a small
 * handshake (inside the group, then one summary per group across groups:
 * see handshake()):
 *   - all valid, same version: the intra-group gather;
 *   - all invalid, same version: every rank falls back to the global gather
 *     (which refreshes the secondary) - never stale data;
 *   - ranks disagree: zppInvalidUsage on every rank, no data moved (someone
 *     missed a zppParamInvalidate);
 *   - a rank's shard changed since its forward gather although the version
 *     did not (a weight write nobody reported): zppInvalidUsage everywhere.
 * The shard check is a 64-bit fingerprint of the local shard's bytes, taken at
 * the forward gather and again at the backward gather (one pass over 1/W of
 * the weights each). An error rather than a fallback: a fallback taken by
 * some groups and not by others would leave ranks waiting on each other.
 *
 * Groups that do not divide every node (hpzGroupSize given and not a
 * divisor of some node's rank count) cannot hold a secondary: the parameter
 * then always gathers globally, said once at WARN when it is created. A
 * delta parameter takes groups of one rank instead (pickGroup).
 *
 * Delta parameters (ZPP_PARAM_DELTA, qwz_delta.c) keep the full weights of
 * the last forward gather instead of a secondary: their forward gather is
 * zppQwzDeltaGather, and a backward gather at a valid version (the same
 * handshake) copies that reference.
 *
 * Bytes: the forward gather counts as zppOpQwZ (or zppOpAllGather when plain),
 * the backward one as zppOpHpZ, fallbacks included (with the handshake's
 * 24-byte summaries to the other groups): beyond those, zppOpHpZ has no
 * inter-node bytes exactly when every backward gather stayed inside its group.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "coll_common.h"
#include "zeropp_host.h"

#include "check.h"
#include "names.h"
#include "handles.h"
#include "params.h"
#include "lib/comm.h"
#include "lib/transport/transports.h"

#define HANDSHAKE_MAGIC 0x7a70687au /* "zphz" */

typedef struct {
  uint32_t magic;
  uint32_t valid;
  uint32_t changed; /* shard fingerprint differs from the forward's */
  uint32_t pad;
  uint64_t version;
} handshake_t;

typedef struct {
  struct zppParam* p;
  const void* shard;
  void* full;
  uint64_t version; /* at issue */
  uint64_t drops;   /* zppParamDropReference calls at issue */
  int backward;
} gatherArgs_t;

/* 64-bit fingerprint of a byte range: four independent multiply-xor lanes
 * over 8-byte words (memory bound, unlike a byte-wise hash). */
static uint64_t fingerprint(const void* data, size_t bytes) {
  const unsigned char* p = data;
  uint64_t h[4] = {0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull,
                   0x2545f4914f6cdd1dull};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    for (int l = 0; l < 4; l++) {
      uint64_t w;
      memcpy(&w, p + i + 8 * (size_t)l, 8);
      h[l] = (h[l] ^ w) * 0x100000001b3ull;
      h[l] ^= h[l] >> 29;
    }
  }
  uint64_t r = (uint64_t)bytes;
  for (; i < bytes; i++) r = (r ^ p[i]) * 0x100000001b3ull;
  for (int l = 0; l < 4; l++) r = (r ^ h[l]) * 0x9e3779b97f4a7c15ull + (uint64_t)l;
  return r ^ (r >> 31);
}

/* ---- object --------------------------------------------------------------- */

/* The hpZ group of this rank: consecutive local ranks of its node. 0 when
 * the configured size does not divide every node, except for a delta
 * parameter: its group only agrees on the reference's validity in the
 * handshake (it holds no secondary), which groups of one rank do as well
 * (every rank's summary then goes to every rank), so that its backward
 * gathers still copy the reference. */
static int pickGroup(struct zppParam* p, int* groupIndex) {
  const struct zppComm* comm = p->comm;
  const zppTopo_t* topo = comm->topo;
  int node = topo->nodeOf[comm->rank], lr = topo->localRankOf[comm->rank];
  int g = comm->compress.hpzGroupSize;
  if (g > 0) {
    for (int n = 0; n < topo->nNodes; n++)
      if (topo->nodeSize[n] % g != 0) {
        if (!p->delta) return 0;
        p->groupsOfOne = 1;
        g = 1;
        break;
      }
  } else {
    g = topo->nodeSize[node];
  }
  *groupIndex = lr / g;
  p->groupPos = lr % g;
  return g;
}

zppResult_t zppHpzCreate(struct zppComm* comm, size_t count, zppDataType_t type, int bits, int delta,
                         struct zppParam** out) {
  zppResult_t res = zppSuccess;
  struct zppParam* p = NULL;
  ZPP_CALLOCGOTO(p, 1, res, fail);
  p->comm = comm;
  p->count = count;
  p->type = type;
  p->bits = bits;
  atomic_store(&p->version, 0);
  atomic_store(&p->secVersion, ZPP_PARAM_NO_VERSION);
  if (bits) {
    p->block = zppCompressBlock(&comm->compress, bits);
    /* The chunking the forward gather will use (fixed per communicator). */
    size_t chunkBytes = 0;
    int depth = 0;
    ZPPCHECKGOTO(zppCollPipelineParams(&chunkBytes, &depth), res, fail);
    ZPPCHECKGOTO(zppCollQwzLayout(count, type, bits, p->block, zppCompressQuantFlags(&comm->compress),
                                  zppCollChunkElemsFor(chunkBytes, type, p->block, 1), &p->layout),
                 res, fail);
    p->shardBytes = p->layout.shardPacked;
    if (delta) {
      /* The differences travel as fp32 (qwz_delta.c). */
      p->delta = 1;
      ZPPCHECKGOTO(
          zppCollQwzLayout(count, zppFloat32, bits, p->block, p->layout.flags,
                           zppCollChunkElemsFor(chunkBytes, zppFloat32, p->block, 1), &p->deltaLayout),
          res, fail);
      size_t refBytes = count * zppDtypeSize(type) * (size_t)comm->nranks;
      p->ref = malloc(refBytes ? refBytes : 1);
      if (p->ref == NULL)
        ZPP_FAILGOTO(zppSystemError, res, fail, COLL,
                     "qwZ of differences: out of memory for a %zu-byte reference", refBytes);
    }
  } else {
    p->shardBytes = count * zppDtypeSize(type);
  }
  int groupIndex = 0;
  p->groupSize = pickGroup(p, &groupIndex);
  if (p->groupSize == 0) {
    if (comm->rank == 0)
      ZPP_WARN(COLL,
               "%s: hpZ group size %d does not divide every node's rank count: this parameter "
               "keeps no secondary partition, its backward gathers are global",
               comm->name, comm->compress.hpzGroupSize);
  } else {
    const zppTopo_t* topo = comm->topo;
    const int* nodeRanks = topo->nodeRanks[topo->nodeOf[comm->rank]];
    ZPP_CALLOCGOTO(p->members, (size_t)p->groupSize, res, fail);
    for (int i = 0; i < p->groupSize; i++) p->members[i] = nodeRanks[groupIndex * p->groupSize + i];
    p->shardLo = (int)zppBlockOffset((size_t)comm->nranks, p->groupSize, p->groupPos);
    p->shardCnt = (int)zppBlockCount((size_t)comm->nranks, p->groupSize, p->groupPos);
    /* A delta parameter's reference holds every shard: no secondary. */
    p->secondaryBytes = p->delta ? 0 : (size_t)p->shardCnt * p->shardBytes;
    if (p->secondaryBytes) {
      p->secondary = malloc(p->secondaryBytes);
      if (p->secondary == NULL)
        ZPP_FAILGOTO(zppSystemError, res, fail, COLL, "hpZ: out of memory for a %zu-byte secondary",
                     p->secondaryBytes);
    }
  }
  ZPP_INFO(COLL,
           "%s: rank %d: hpZ parameter of %zu elements per shard, %d bits, group of %d, "
           "secondary holds shards %d..%d (%zu bytes)",
           comm->name, comm->rank, count, bits, p->groupSize, p->shardLo, p->shardLo + p->shardCnt - 1,
           p->secondaryBytes);
  *out = p;
  return zppSuccess;
fail:
  if (p) {
    free(p->ref);
    free(p->members);
    free(p);
  }
  return res;
}

static zppResult_t barrierJob(struct zppComm* comm, void* arg) { return zppSuccess; }

void zppHpzDestroy(struct zppParam* p) {
  /* Jobs run in issue order: once this one ran, none of the parameter's
   * gathers is queued or running. */
  if (zppHandleIsLive(p->comm, ZPP_HANDLE_COMM) && p->comm->transports)
    (void)zppExecutorSubmit(p->comm->transports->exec, barrierJob, NULL, NULL, 0, NULL);
  free(p->secondary);
  free(p->ref);
  free(p->members);
  free(p);
}

/* ---- gathers (executor thread) -------------------------------------------- */

/* The global gather; refreshes the secondary. */
static zppResult_t globalGather(zppCollCtx_t* c, struct zppParam* p, const void* shard, void* full) {
  const size_t ts = zppDtypeSize(p->type);
  const char* src = NULL;
  if (p->bits) {
    char* packed = zppCollScratch(c, ZPP_ZSCRATCH_PACKED, (size_t)c->nranks * p->shardBytes);
    if (packed == NULL) ZPP_FAIL(zppSystemError, COLL, "hpZ: out of memory for packed shards");
    ZPPCHECK(zppCollQwzRun(c, &p->layout, shard, full, packed));
    src = packed;
  } else {
    char* own = (char*)full + (size_t)c->rank * p->count * ts;
    memcpy(own, shard, p->count * ts);
    if (c->nranks > 1) ZPPCHECK(zppCollAllGatherRing(c, full, p->count * (size_t)c->nranks, ts, 0));
    src = full;
  }
  if (p->secondaryBytes)
    memcpy(p->secondary, src + (size_t)p->shardLo * p->shardBytes, p->secondaryBytes);
  return zppSuccess;
}

typedef struct {
  struct zppParam* p;
  void* full;
  void* packed; /* bits: where the members' packed shards land */
  int* lo;      /* [groupSize] first shard of each member */
  int* cnt;
} groupRecv_t;

/* A member's shares arrived: decode them (packed) into the full weights. */
static zppResult_t decodeMember(void* arg, int member) {
  groupRecv_t* r = arg;
  struct zppParam* p = r->p;
  if (!p->bits) return zppSuccess; /* raw shards landed in place */
  size_t ts = zppDtypeSize(p->type);
  for (int b = r->lo[member]; b < r->lo[member] + r->cnt[member]; b++)
    ZPPCHECK(zppCollQwzDecodeShard(&p->layout, (char*)r->packed + (size_t)b * p->shardBytes,
                                   (char*)r->full + (size_t)b * p->count * ts));
  return zppSuccess;
}

/* Every member's share, from the group only; own share from memory. */
static zppResult_t groupGather(zppCollCtx_t* c, struct zppParam* p, void* full) {
  const int g = p->groupSize;
  const size_t ts = zppDtypeSize(p->type);
  zppResult_t res = zppSuccess;
  groupRecv_t r = {.p = p, .full = full};
  void** recvs = NULL;
  size_t* recvBytes = NULL;
  ZPP_CALLOCGOTO(r.lo, (size_t)g, res, out);
  ZPP_CALLOCGOTO(r.cnt, (size_t)g, res, out);
  ZPP_CALLOCGOTO(recvs, (size_t)g, res, out);
  ZPP_CALLOCGOTO(recvBytes, (size_t)g, res, out);
  if (p->bits) {
    r.packed = zppCollScratch(c, ZPP_ZSCRATCH_PACKED, (size_t)c->nranks * p->shardBytes);
    if (r.packed == NULL) ZPP_FAILGOTO(zppSystemError, res, out, COLL, "hpZ: out of memory");
  }
  char* land = p->bits ? r.packed : full;
  for (int i = 0; i < g; i++) {
    r.lo[i] = (int)zppBlockOffset((size_t)c->nranks, g, i);
    r.cnt[i] = (int)zppBlockCount((size_t)c->nranks, g, i);
    recvs[i] = land + (size_t)r.lo[i] * p->shardBytes;
    recvBytes[i] = (size_t)r.cnt[i] * p->shardBytes;
  }
  ZPPCHECKGOTO(zppGroupAllGatherV(c, p->members, g, p->groupPos, p->secondary, p->secondaryBytes, recvs,
                                  recvBytes, 1, decodeMember, &r),
               res, out);
  /* Own share last: the peers' messages were already on their way. */
  if (p->bits) {
    for (int b = p->shardLo; b < p->shardLo + p->shardCnt; b++)
      ZPPCHECKGOTO(zppCollQwzDecodeShard(&p->layout,
                                         (char*)p->secondary + (size_t)(b - p->shardLo) * p->shardBytes,
                                         (char*)full + (size_t)b * p->count * ts),
                   res, out);
  } else if (p->secondaryBytes) {
    memcpy((char*)full + (size_t)p->shardLo * p->shardBytes, p->secondary, p->secondaryBytes);
  }
out:
  free(r.lo);
  free(r.cnt);
  free(recvs);
  free(recvBytes);
  return res;
}

/* Every group holds a copy of every shard, so every rank must know what any
 * rank knows: a shard written without zppParamInvalidate (only its own
 * group saw the fingerprint change, the other nodes' groups served its old
 * weights), or a rank whose version differs (4 nodes of 1 rank, rank 0 alone
 * invalidated: it fell back to the global gather and timed out with part of
 * its output overwritten while the others succeeded). So the handshake is
 * two exchanges of a few bytes: (valid, version, changed) inside the group
 * (intra-node, as before), then one summary per group among the ranks at
 * the same position of every group (one message per other group). Every
 * rank then decides from all summaries alike: all valid at one version: the
 * group gather; all invalid at one version: the global gather; anything
 * else: zppInvalidUsage everywhere, no data moved (*agreed = 1). */

/* A group's summary in a handshake_t: valid 1 (all), 0 (none), 2 (mixed or
 * versions differ); changed = 1 + the first member whose shard changed;
 * pad = 1 + the first member that differs from the first. */
static void summarize(const handshake_t* all, const int* members, int g, handshake_t* s) {
  *s = all[0];
  s->changed = 0;
  s->pad = 0;
  for (int i = 0; i < g; i++) {
    if (all[i].changed && !s->changed) s->changed = (uint32_t)members[i] + 1;
    if ((all[i].valid != all[0].valid || all[i].version != all[0].version) && !s->pad) {
      s->valid = 2;
      s->pad = (uint32_t)members[i] + 1;
    }
  }
}

static zppResult_t allGatherHandshakes(zppCollCtx_t* c, const int* members, int g, int pos,
                                       const handshake_t* mine, handshake_t* all, uint32_t step) {
  zppResult_t res = zppSuccess;
  void** recvs = calloc((size_t)g, sizeof(*recvs));
  size_t* bytes = calloc((size_t)g, sizeof(*bytes));
  if (recvs == NULL || bytes == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, COLL, "hpZ: out of memory");
  for (int i = 0; i < g; i++) {
    recvs[i] = &all[i];
    bytes[i] = sizeof(handshake_t);
  }
  all[pos] = *mine;
  ZPPCHECKGOTO(
      zppGroupAllGatherV(c, members, g, pos, mine, sizeof(*mine), recvs, bytes, step, NULL, NULL), res,
      out);
  for (int i = 0; i < g; i++)
    if (all[i].magic != HANDSHAKE_MAGIC)
      ZPP_FAILGOTO(zppInvalidUsage, res, out, COLL, "%s: hpZ: rank %d sent a malformed handshake",
                   c->comm->name, members[i]);
out:
  /* all belongs to the caller, which frees it on failure. */
  zppCollStepFailed(c, res);
  free(recvs);
  free(bytes);
  return res;
}

/* The group size of rank r's group (as in zppHpzCreate: hpzGroupSize, which
 * then divides every node, or r's node; 1 for a delta parameter's groups of
 * one). */
static int groupSizeOf(const struct zppParam* p, int r) {
  int g = p->groupsOfOne ? 1 : p->comm->compress.hpzGroupSize;
  return g > 0 ? g : p->comm->topo->nodeSize[p->comm->topo->nodeOf[r]];
}

static zppResult_t handshake(zppCollCtx_t* c, struct zppParam* p, const handshake_t* mine,
                             int* useGroup, int* agreed) {
  const int g = p->groupSize;
  const zppTopo_t* topo = c->comm->topo;
  const int n = c->comm->nranks;
  zppResult_t res = zppSuccess;
  handshake_t summary, *all = calloc((size_t)(g > n ? g : n), sizeof(*all));
  int* cross = calloc((size_t)n, sizeof(*cross));
  int* names = calloc((size_t)n, sizeof(*names));
  if (all == NULL || cross == NULL || names == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, COLL, "hpZ: out of memory");
  if (g > 1) {
    ZPPCHECKGOTO(allGatherHandshakes(c, p->members, g, p->groupPos, mine, all, 0), res, out);
    summarize(all, p->members, g, &summary);
  } else {
    summarize(mine, &c->comm->rank, 1, &summary);
  }
  /* One exchange per position q of the largest group, among the member at
   * position q % size of every group (nodes, hence groups, may differ in
   * size): this rank takes part for q = groupPos, groupPos + g, ..., and
   * the exchange at its own position brings it every group's summary. All
   * ranks go through q in the same order. */
  int maxG = 0;
  for (int r = 0; r < n; r++)
    if (groupSizeOf(p, r) > maxG) maxG = groupSizeOf(p, r);
  int nCross = 0;
  handshake_t* other = calloc((size_t)n, sizeof(*other));
  if (other == NULL) ZPP_FAILGOTO(zppSystemError, res, out, COLL, "hpZ: out of memory");
  for (int q = p->groupPos; q < maxG && res == zppSuccess; q += g) {
    int m = 0, pos = 0;
    for (int r = 0; r < n; r++) {
      int gr = groupSizeOf(p, r);
      if (topo->localRankOf[r] % gr != q % gr) continue;
      if (r == c->comm->rank) pos = m;
      cross[m++] = r;
    }
    handshake_t* into = q == p->groupPos ? all : other;
    if (m > 1)
      res = allGatherHandshakes(c, cross, m, pos, &summary, into, (uint32_t)(201 + q % 50));
    else
      into[0] = summary;
    if (q == p->groupPos) {
      nCross = m;
      memcpy(names, cross, (size_t)m * sizeof(*cross)); /* for the messages below */
    }
  }
  free(other);
  if (res != zppSuccess) goto out;
  *agreed = 1;
  for (int i = 0; i < nCross; i++)
    if (all[i].changed)
      ZPP_FAILGOTO(zppInvalidUsage, res, out, COLL,
                   "%s: hpZ backward gather: rank %u's shard changed since its forward gather but "
                   "zppParamInvalidate was not called: call it on every rank after every weight "
                   "write (optimizer step, checkpoint load, ...)",
                   c->comm->name, all[i].changed - 1);
  for (int i = 0; i < nCross; i++) {
    if (all[i].valid == 2)
      ZPP_FAILGOTO(zppInvalidUsage, res, out, COLL,
                   "%s: hpZ backward gather: the secondary partition is not the same on every rank: "
                   "rank %u's differs from its group's (zppParamInvalidate must be called on every "
                   "rank, the same number of times)",
                   c->comm->name, all[i].pad - 1);
    if (all[i].valid != all[0].valid || all[i].version != all[0].version)
      ZPP_FAILGOTO(zppInvalidUsage, res, out, COLL,
                   "%s: hpZ backward gather: the groups disagree on the secondary partition: rank "
                   "%d's group has it %s at version %llu, rank %d's %s at version %llu "
                   "(zppParamInvalidate must be called on every rank, the same number of times)",
                   c->comm->name, names[0], all[0].valid ? "valid" : "invalid",
                   (unsigned long long)all[0].version, names[i], all[i].valid ? "valid" : "invalid",
                   (unsigned long long)all[i].version);
  }
  *useGroup = all[0].valid == 1;
  /* Agreed is a refusal only: the data phase that follows can still fail on some ranks (a peer
   * dies), and that failure must break the communicator and quiesce the transport, whose
   * receives would otherwise stay posted on the caller's buffer. */
  *agreed = 0;
out:
  free(all);
  free(cross);
  free(names);
  return res;
}

/* The gather that refreshes what the backward gather serves: the global
 * gather (secondary), or the delta gather (reference). */
static zppResult_t refreshingGather(zppCollCtx_t* c, struct zppParam* p, const gatherArgs_t* a,
                                    size_t shardBytes) {
  uint64_t fp = fingerprint(a->shard, shardBytes);
  zppResult_t res =
      p->delta ? zppQwzDeltaGather(c, p, a->shard, a->full) : globalGather(c, p, a->shard, a->full);
  if (res == zppSuccess) {
    p->fingerprint = fp;
    atomic_store(&p->secVersion, p->groupSize ? a->version : ZPP_PARAM_NO_VERSION);
  } else if (p->delta) {
    /* The reference may hold part of this gather's differences. */
    atomic_store(&p->secVersion, ZPP_PARAM_NO_VERSION);
  }
  return res;
}

static zppResult_t gatherJob(struct zppComm* comm, void* arg) {
  const gatherArgs_t* a = arg;
  struct zppParam* p = a->p;
  const size_t shardBytes = p->count * zppDtypeSize(p->type);
  zppOpKind_t kind = a->backward ? zppOpHpZ : (p->bits ? zppOpQwZ : zppOpAllGather);
  if (p->delta && a->drops != p->dropsSeen) {
    p->dropsSeen = a->drops;
    p->refValid = 0;
  }
  /* A delta parameter signs its reference's state: ranks that disagree on
   * it fail the call as mismatched (qwz_delta.c, "Agreement"). */
  uint64_t vals[7] = {p->count,
                      (uint64_t)p->bits,
                      (uint64_t)p->block,
                      (uint64_t)a->backward,
                      (uint64_t)p->layout.flags,
                      (uint64_t)p->delta,
                      p->delta ? 2 * p->refGen + (uint64_t)p->refValid : 0};
  zppCollCtx_t c;
  ZPPCHECK(zppCollBegin(comm, kind, &c));
  zppCollSign(&c, p->type, -1, vals, 7);
  zppResult_t res = zppSuccess;
  int agreed = 0;
  if (!a->backward) return zppCollEnd(&c, refreshingGather(&c, p, a, shardBytes), 0);
  int valid =
      p->groupSize > 0 && atomic_load(&p->secVersion) == a->version && (!p->delta || p->refValid);
  int useGroup = valid;
  if (p->groupSize > 0) {
    handshake_t mine = {.magic = HANDSHAKE_MAGIC, .valid = (uint32_t)valid, .version = a->version};
    mine.changed = valid && fingerprint(a->shard, shardBytes) != p->fingerprint;
    res = handshake(&c, p, &mine, &useGroup, &agreed);
  }
  if (res == zppSuccess && useGroup && p->delta) {
    /* The reference is the forward's result, on every rank alike. */
    memcpy(a->full, p->ref, shardBytes * (size_t)comm->nranks);
  } else if (res == zppSuccess && useGroup) {
    /* One signature for every message of the call (the transport reads a
     * message of this call with another signature as a mismatch); the
     * handshake already proved that the group agrees on the version. */
    res = groupGather(&c, p, a->full);
  } else if (res == zppSuccess) {
    ZPP_INFO(COLL, "%s: rank %d: hpZ backward gather from an invalid secondary: global gather",
             comm->name, comm->rank);
    res = refreshingGather(&c, p, a, shardBytes);
  }
  return zppCollEnd(&c, res, agreed);
}

zppResult_t zppHpzIssueGather(struct zppParam* p, const void* shard, void* full, int backward,
                              zppHostStream_t stream) {
  gatherArgs_t a = {.p = p, .shard = shard, .full = full, .backward = backward};
  a.version = atomic_load(&p->version);
  a.drops = atomic_load(&p->drops);
  return zppExecutorSubmit(p->comm->transports->exec, gatherJob, NULL, &a, sizeof(a), stream);
}
