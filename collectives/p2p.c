/*
 * Point-to-point on host buffers (p2p.h): zppSend / zppRecv matched in issue
 * order per pair, the tagged forms by tag and count, and groups of them.
 *
 * Cost: one message per send, count * typesize bytes, and nothing else: no
 * header message, no copy (self-sends: one memcpy). The transport's tag
 * carries the match, in message spaces of their own that collectives never
 * see (lib/transport/p2p.h): for plain calls a number per pair and
 * direction, for tagged ones a 24-bit hash of tag and count. Its signature
 * (type, count, tag) is compared once a message is received, so a send
 * matched with a receive of another count or type is an error on the
 * receiver that names both sides, and the receiver's error notice breaks
 * the sender's communicator too (its call fails, or its next one). A group
 * posts every receive, then every send, and only then waits: any pattern
 * completes (a ring shift, both directions of a pair, many messages in
 * flight). A tagged receive from any rank probes the peers for a message of
 * its tag and count (first its own group's self-sends), then receives the
 * first one found: a probe per peer per round, yielding, then napping.
 *
 * Two tagged messages from one rank whose (tag, count) pairs hash alike
 * match each other's receives only if their 9-bit signature hashes collide
 * too (33 bits in all): then a type or count check still fails unless both
 * agree. Plain calls match exactly.
 */
#include "p2p.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_common.h"

#include "check.h"
#include "clock.h"
#include "log.h"
#include "names.h"
#include "lib/comm.h"
#include "lib/executor.h"
#include "lib/transport/transports.h"

/* Probing rounds for an any-source receive that yield before it naps. */
#define ANY_SOURCE_YIELDS 200
#define ANY_SOURCE_NAP_NS 50000
/* Operations per job held on the stack. */
#define SMALL_GROUP 8

/* Per communicator, on the executor's point-to-point slot: the number of
 * the next plain send to and receive from each peer. */
typedef struct {
  int nranks;
  uint32_t* sendNext;
  uint32_t* recvNext;
} p2pState_t;

typedef struct {
  zppP2pOp_t* ops;
  int n;
} p2pJob_t;

static void stateFree(void* p) {
  p2pState_t* st = p;
  if (st == NULL) return;
  free(st->sendNext);
  free(st->recvNext);
  free(st);
}

/* Until a collective sets the collectives' formatter, mismatches of
 * point-to-point calls are described by this one. */
static void describeMismatch(uint32_t theirs, uint32_t mine, char* buf, size_t len) {
  zppCollDescribeMismatch(theirs, mine, "count and tag", buf, len);
}

static zppResult_t stateGet(struct zppComm* comm, p2pState_t** out) {
  zppExecutor_t* exec = comm->transports->exec;
  p2pState_t* st = zppExecutorGetP2pState(exec);
  if (st != NULL) {
    *out = st;
    return zppSuccess;
  }
  zppResult_t res = zppSuccess;
  ZPP_CALLOCGOTO(st, 1, res, fail);
  st->nranks = comm->nranks;
  ZPP_CALLOCGOTO(st->sendNext, (size_t)comm->nranks, res, fail);
  ZPP_CALLOCGOTO(st->recvNext, (size_t)comm->nranks, res, fail);
  if (comm->transports->p2p && zppExecutorGetState(exec) == NULL)
    zppP2pSetSigFormatter(comm->transports->p2p, describeMismatch);
  zppExecutorSetP2pState(exec, st, stateFree);
  *out = st;
  return zppSuccess;
fail:
  stateFree(st);
  return res;
}

static size_t bytesOf(const zppP2pOp_t* o) { return o->count * zppDtypeSize(o->type); }

static uint32_t sigOf(const zppP2pOp_t* o) {
  uint64_t vals[2] = {(uint64_t)o->count, o->tagged ? (uint64_t)(uint32_t)o->tag : UINT64_MAX};
  return zppCollSig(zppOpSendRecv, o->type, -1, vals, 2);
}

static zppMsgId_t plainId(const zppP2pOp_t* o, uint32_t number) {
  zppMsgId_t id = {number & 0xffffu, (number >> 16) & 0xffu, sigOf(o), zppOpSendRecv, ZPP_MSG_P2P};
  return id;
}

static zppMsgId_t taggedId(const zppP2pOp_t* o) {
  uint64_t h = ((uint64_t)(uint32_t)o->tag + 1) * 0x9e3779b97f4a7c15ull;
  h = (h ^ (uint64_t)o->count) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  uint32_t m = (uint32_t)(h ^ (h >> 32)) & 0xffffffu;
  zppMsgId_t id = {m & 0xffffu, m >> 16, sigOf(o), zppOpSendRecv, ZPP_MSG_TAGGED};
  return id;
}

/* A zero-count message still travels (it matches a receive); the
 * transport wants a valid pointer all the same. */
static char emptyMessage[1];
static const void* sendPtr(const zppP2pOp_t* o) { return o->sendbuff ? o->sendbuff : emptyMessage; }
static void* recvPtr(const zppP2pOp_t* o) { return o->recvbuff ? o->recvbuff : emptyMessage; }

static zppResult_t selfMismatch(struct zppComm* comm, const zppP2pOp_t* s, const zppP2pOp_t* r) {
  ZPP_FAIL(zppInvalidUsage, COLL,
           "%s: rank %d: point-to-point mismatch: its send to itself of %zu %s does not fit its "
           "receive from itself of %zu %s",
           comm->name, comm->rank, s->count, zppDtypeName(s->type), r->count, zppDtypeName(r->type));
}

static int taggedFits(const zppP2pOp_t* s, const zppP2pOp_t* r) {
  return s->tagged && s->tag == r->tag && s->count == r->count;
}

/* Self-sends of the group go to its self-receives (plain: in order; tagged:
 * by tag and count; any-source receives take what is left over), by memcpy.
 * done[i] marks what this settled; a self-send left without its receive is
 * an error (nothing could ever receive it). */
static zppResult_t matchSelf(struct zppComm* comm, zppP2pOp_t* ops, int n, char* done) {
  const int me = comm->rank;
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < n; i++) {
      zppP2pOp_t* r = &ops[i];
      if (r->isSend || done[i]) continue;
      if (pass == 0 ? r->peer != me : r->peer != ZPP_ANY_SOURCE) continue;
      for (int j = 0; j < n; j++) {
        zppP2pOp_t* s = &ops[j];
        if (!s->isSend || s->peer != me || done[j] || s->tagged != r->tagged) continue;
        if (r->tagged && !taggedFits(s, r)) continue;
        if (s->type != r->type || s->count != r->count) return selfMismatch(comm, s, r);
        if (bytesOf(s) && s->sendbuff != r->recvbuff) memcpy(r->recvbuff, s->sendbuff, bytesOf(s));
        if (r->source) *r->source = me;
        done[i] = done[j] = 1;
        break;
      }
    }
  }
  for (int i = 0; i < n; i++) {
    const zppP2pOp_t* o = &ops[i];
    if (done[i] || o->peer != me) continue;
    ZPP_FAIL(zppInvalidUsage, COLL,
             "%s: rank %d: a %s %s itself (%zu %s%s) has no matching %s in its group: a rank reaches "
             "itself only inside one zppGroupStart/zppGroupEnd",
             comm->name, me, o->isSend ? "send" : "receive", o->isSend ? "to" : "from", o->count,
             zppDtypeName(o->type), o->tagged ? ", tagged" : "", o->isSend ? "receive" : "send");
  }
  return zppSuccess;
}

/* Probes every other rank for a message of r's tag and count until one has
 * arrived; then *from is its sender. Bounded by the communicator's timeout. */
static zppResult_t probeAny(struct zppComm* comm, zppP2p_t* p2p, const zppP2pOp_t* r, int* from) {
  const int n = comm->nranks, me = comm->rank;
  const double timeout = comm->timeoutSec > 0 ? comm->timeoutSec : 1e9;
  const zppMsgId_t id = taggedId(r);
  double start = zppClockNow();
  for (int round = 0;; round++) {
    ZPPCHECK(zppP2pPoll(p2p));
    for (int k = 1; k < n; k++) {
      int q = (me + k) % n, found = 0;
      ZPPCHECK(zppP2pProbe(p2p, q, &id, &found));
      if (found) {
        *from = q;
        return zppSuccess;
      }
    }
    double now = zppClockNow();
    if (now - start > timeout)
      ZPP_FAIL(zppRemoteError, COLL,
               "%s: rank %d timed out after %.1f s in zppRecvTagged from any rank (tag %d, %zu %s): "
               "no rank sent such a message (ZPP_TIMEOUT)",
               comm->name, me, now - start, r->tag, r->count, zppDtypeName(r->type));
    if (round < ANY_SOURCE_YIELDS) {
      sched_yield();
    } else {
      struct timespec ts = {0, ANY_SOURCE_NAP_NS};
      nanosleep(&ts, NULL);
    }
  }
}

static zppResult_t runOps(struct zppComm* comm, zppP2p_t* p2p, p2pState_t* st, zppP2pOp_t* ops, int n,
                          char* done, zppP2pReq_t** reqs, int* from) {
  ZPPCHECK(matchSelf(comm, ops, n, done));
  if (p2p == NULL) return zppSuccess; /* one rank: every operation was a self one */
  /* Receives first: a message that finds its receive posted needs no
   * unexpected copy. */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < n; i++) {
      zppP2pOp_t* o = &ops[i];
      if (done[i] || o->isSend != pass || o->peer == ZPP_ANY_SOURCE) continue;
      zppMsgId_t id = o->tagged
                          ? taggedId(o)
                          : plainId(o, o->isSend ? st->sendNext[o->peer]++ : st->recvNext[o->peer]++);
      from[i] = o->peer;
      if (o->isSend)
        ZPPCHECK(zppP2pIsend(p2p, o->peer, sendPtr(o), bytesOf(o), &id, &reqs[i]));
      else
        ZPPCHECK(zppP2pIrecv(p2p, o->peer, recvPtr(o), bytesOf(o), &id, &reqs[i]));
    }
  }
  for (int i = 0; i < n; i++) {
    zppP2pOp_t* o = &ops[i];
    if (done[i] || o->peer != ZPP_ANY_SOURCE) continue;
    ZPPCHECK(probeAny(comm, p2p, o, &from[i]));
    zppMsgId_t id = taggedId(o);
    ZPPCHECK(zppP2pIrecv(p2p, from[i], recvPtr(o), bytesOf(o), &id, &reqs[i]));
  }
  ZPPCHECK(zppP2pWaitAll(p2p, reqs, n));
  for (int i = 0; i < n; i++)
    if (!done[i] && !ops[i].isSend && ops[i].source) *ops[i].source = from[i];
  return zppSuccess;
}

static zppResult_t p2pRun(struct zppComm* comm, zppP2pOp_t* ops, int n) {
  zppResult_t res = (zppResult_t)atomic_load(&comm->asyncError);
  if (res != zppSuccess) return res; /* reported when it happened */
  zppP2p_t* p2p = comm->transports->p2p;
  if (comm->nranks > 1 && p2p == NULL)
    ZPP_FAIL(zppInvalidUsage, COLL, "%s: no host transport (built without UCX)", comm->name);
  p2pState_t* st = NULL;
  ZPPCHECK(stateGet(comm, &st));
  /* A call or a small group (the latency-bound case) allocates nothing. */
  char doneSmall[SMALL_GROUP];
  zppP2pReq_t* reqsSmall[SMALL_GROUP];
  int fromSmall[SMALL_GROUP];
  int small = n <= SMALL_GROUP;
  char* done = small ? doneSmall : calloc((size_t)n, 1);
  zppP2pReq_t** reqs = small ? reqsSmall : calloc((size_t)n, sizeof(*reqs));
  int* from = small ? fromSmall : calloc((size_t)n, sizeof(*from));
  if (done == NULL || reqs == NULL || from == NULL) {
    free(done), free(reqs), free(from);
    ZPP_FAIL(zppSystemError, COLL, "%s: out of memory for %d point-to-point operations", comm->name, n);
  }
  if (small) {
    memset(doneSmall, 0, sizeof(doneSmall));
    memset(reqsSmall, 0, sizeof(reqsSmall));
    memset(fromSmall, 0, sizeof(fromSmall));
  }
  /* Another rank may have given up already: say why rather than fail on a
   * consequence. */
  if (p2p) res = zppP2pPoll(p2p);
  if (res == zppSuccess) res = runOps(comm, p2p, st, ops, n, done, reqs, from);
  if (res != zppSuccess) {
    /* Numbers per pair no longer agree (and a peer may wait on this rank):
     * the communicator is broken, as after a failed collective. */
    if (atomic_load(&comm->asyncError) == zppSuccess) {
      /* The reason, logged on this thread where it was found. */
      char why[400];
      snprintf(why, sizeof(why), "%s", zppLogLastError());
      zppCommStateSetError(comm, res, "%s", why[0] ? why : zppResultString(res));
    }
    if (p2p) zppP2pQuiesce(p2p);
  }
  if (!small) free(done), free(reqs), free(from);
  return res;
}

static zppResult_t p2pJob(struct zppComm* comm, void* arg) {
  p2pJob_t* j = arg;
  zppResult_t res = p2pRun(comm, j->ops, j->n);
  free(j->ops);
  j->ops = NULL;
  return res;
}

static void p2pDrop(void* arg) {
  p2pJob_t* j = arg;
  free(j->ops);
  j->ops = NULL;
}

zppResult_t zppHostP2pIssue(struct zppComm* comm, zppP2pOp_t* ops, int n, zppHostStream_t stream) {
  p2pJob_t j = {ops, n};
  return zppExecutorSubmit(comm->transports->exec, p2pJob, p2pDrop, &j, sizeof(j), stream);
}
