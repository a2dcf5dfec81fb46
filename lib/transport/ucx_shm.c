/*
 * Small messages between ranks of one node through zpp's own shared-memory
 * rings (shm_ring.h) instead of UCX; the rest of the host transport does not
 * change: the same tags, requests, signature checks and waits (ucx.h).
 *
 * A pair of ranks uses the rings for messages of up to shmMax bytes, a value
 * both sides agree on at creation (the smaller of their ZPP_SHM_SMALL_BYTES),
 * so a sender and a receiver of the same message always pick the same path.
 * Larger messages, and every pair that could not map its inboxes, stay on
 * UCX.
 *
 * Matching: each ring is read in order. A message goes to the first receive
 * posted for its tag (source, sequence, step; the signature is checked
 * after, as with UCX), straight from its slot. One that no posted receive
 * wants stays in the ring while no receive from that peer is posted (a peer
 * ahead by a few collectives costs nothing then: no copy, no allocation,
 * and a full ring holds it back like a rendezvous would); while one is, it
 * is copied aside into a list of unexpected messages to reach the messages
 * behind it. Sends are done once copied into the ring; a full ring queues
 * them in order.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/comm.h"

#include "ucx_internal.h"

typedef struct shmMsg {
  struct shmMsg* next;
  uint64_t tag;
  size_t len;
  unsigned char data[];
} shmMsg_t;

/* ---- creation ------------------------------------------------------------ */

void zppUcxShmCreateInbox(zppUcx_t* u, rankInfo_t* mine) {
  mine->shmMax = 0;
  mine->shmName[0] = '\0';
  const zppTopo_t* topo = u->comm->topo;
  int localSize = topo->nodeSize[topo->nodeOf[u->rank]];
  if (!u->useShm || u->shmMaxParam <= 0 || localSize < 2) return;
  if (zppShmInboxCreate(&u->shmInbox, localSize, (size_t)u->shmMaxParam) != zppSuccess) {
    ZPP_WARN(NET,
             "%s: rank %d: no shared-memory rings: small messages inside the node go "
             "through UCX",
             u->comm->name, u->rank);
    return;
  }
  mine->shmMax = (int32_t)u->shmMaxParam;
  mine->asymFence = zppShmAsymFenceRegister();
  snprintf(mine->shmName, sizeof(mine->shmName), "%s", u->shmInbox.name);
}

zppResult_t zppUcxShmConnect(zppUcx_t* u, const rankInfo_t* infos) {
  zppResult_t res = zppSuccess;
  const zppTopo_t* topo = u->comm->topo;
  int node = topo->nodeOf[u->rank];
  int localSize = topo->nodeSize[node];
  const rankInfo_t* mine = &infos[u->rank];
  int32_t* ok = NULL;
  ZPP_CALLOCGOTO(ok, (size_t)u->nranks, res, out);
  ZPP_CALLOCGOTO(u->shmPeers, (size_t)localSize, res, out);

  /* Every local peer's inbox that exists mapped, or no ring used at all:
   * one bit per rank keeps the agreement a single exchange. */
  int mapped = mine->shmMax > 0;
  for (int i = 0; i < localSize && mapped; i++) {
    int r = topo->nodeRanks[node][i];
    if (r == u->rank) continue;
    /* No inbox there (turned off, or it could not make one), or another
     * kernel (a host id shared by two machines by mistake): that pair only
     * stays on UCX, as the peer sees too. */
    if (infos[r].shmMax <= 0 || strcmp(infos[r].bootId, mine->bootId) != 0) continue;
    peer_t* p = &u->peers[r];
    if (zppShmInboxOpen(&p->shmBox, infos[r].shmName) != zppSuccess ||
        p->shmBox.nRings != (uint32_t)localSize) {
      mapped = 0;
      break;
    }
  }
  ok[u->rank] = mapped;
  ZPPCHECKGOTO(zppBootstrapAllGather(u->comm->bootstrap, ok, sizeof(int32_t)), res, out);
  /* Every rank opened the inboxes it uses before it joined the exchange:
   * the name can go now, and a rank killed from here on leaves none behind. */
  zppShmInboxUnlink(&u->shmInbox);

  for (int i = 0; i < localSize; i++) {
    int r = topo->nodeRanks[node][i];
    if (r == u->rank) continue;
    peer_t* p = &u->peers[r];
    if (!(mapped && ok[r] && p->shmBox.base != NULL)) {
      zppShmInboxClose(&p->shmBox);
      continue;
    }
    p->shmMax = (size_t)(mine->shmMax < infos[r].shmMax ? mine->shmMax : infos[r].shmMax);
    p->shmFence = !(mine->asymFence && infos[r].asymFence);
    zppShmRingAttach(&p->shmIn, &u->shmInbox, topo->localRankOf[r]);
    zppShmRingAttach(&p->shmOut, &p->shmBox, topo->localRankOf[u->rank]);
    u->shmPeers[u->nShmPeers++] = r;
  }
  u->shmAsymFence = mine->asymFence;
  if (u->nShmPeers > 0)
    ZPP_INFO(NET,
             "%s: rank %d: messages of up to %d bytes to %d ranks of this node go through "
             "shared-memory rings of %u slots (sleep handshake: %s)",
             u->comm->name, u->rank, (int)mine->shmMax, u->nShmPeers, u->shmInbox.nSlots,
             mine->asymFence ? "membarrier" : "fences");
  else if (mine->shmMax > 0)
    ZPP_INFO(NET,
             "%s: rank %d: shared-memory rings unused: a rank of this node has none, or "
             "this rank could not map one",
             u->comm->name, u->rank);
out:
  free(ok);
  return res;
}

void zppUcxShmUnlink(zppUcx_t* u) { zppShmInboxUnlink(&u->shmInbox); }

void zppUcxShmDestroy(zppUcx_t* u) {
  for (int r = 0; u->peers && r < u->nranks; r++) {
    peer_t* p = &u->peers[r];
    while (p->unexpected) {
      shmMsg_t* m = p->unexpected;
      p->unexpected = m->next;
      free(m);
    }
    zppShmInboxClose(&p->shmBox);
  }
  zppShmInboxClose(&u->shmInbox);
  free(u->shmPeers);
  u->shmPeers = NULL;
  u->nShmPeers = 0;
}

/* ---- sends --------------------------------------------------------------- */

/* A peer asleep on its worker's event fd sees nothing of the rings: a UCX
 * control message wakes it (taken off by its wake-up receive). */
static void wakeIfAsleep(zppUcx_t* u, peer_t* p) {
  if (!zppShmInboxTakeSleeper(&p->shmBox, p->shmFence)) return;
  ucp_ep_h ep;
  if (zppUcxGetEp(u, p->rank, &ep) != zppSuccess) return; /* recorded there */
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof(prm));
  void* h = ucp_tag_send_nbx(
      ep, &u->wakeByte, 1, TAG_CONTROL | TAG_CONTROL_WAKE | ((uint64_t)u->rank << TAG_SRC_SHIFT), &prm);
  if (UCS_PTR_IS_PTR(h)) {
    /* Not out yet (the peer's queue is full?): push it now, briefly. This
     * rank may go off to compute next, and a wake-up that waits for its next
     * progress call leaves the peer asleep up to its sleep's bound. */
    double end = zppClockNow() + WAKE_SEND_WAIT_SEC;
    while (ucp_request_check_status(h) == UCS_INPROGRESS && zppClockNow() < end)
      ucp_worker_progress(u->worker);
    ucp_request_free(h); /* released by UCX once sent, if it is not yet */
  } else if (UCS_PTR_IS_ERR(h)) {
    ZPP_INFO(NET, "%s: rank %d: waking rank %d failed: %s", u->comm->name, u->rank, p->rank,
             ucs_status_string(UCS_PTR_STATUS(h)));
  }
}

zppResult_t zppUcxShmSend(zppUcx_t* u, int peer, const void* buf, size_t bytes, uint64_t tag,
                          zppUcxReq_t** req) {
  peer_t* p = &u->peers[peer];
  *req = NULL;
  if (p->queued == NULL && zppShmRingTryPush(&p->shmOut, tag, buf, bytes)) {
    wakeIfAsleep(u, p);
    return zppSuccess;
  }
  zppUcxReq_t* r;
  ZPPCHECK(zppUcxReqAlloc(u, &r));
  r->peer = peer;
  r->bytes = bytes;
  r->viaShm = 1;
  r->sendBuf = buf;
  r->tag = tag;
  if (p->queuedTail)
    p->queuedTail->shmNext = r;
  else
    p->queued = r;
  p->queuedTail = r;
  *req = r;
  return zppSuccess;
}

/* ---- receives ------------------------------------------------------------ */

static int tagsMatch(uint64_t a, uint64_t b) { return ((a ^ b) & TAG_MATCH_MASK) == 0; }

static void deliver(zppUcxReq_t* r, uint64_t tag, const void* data, size_t len) {
  /* As UCX does: a longer message fills the buffer and is a truncation. */
  memcpy(r->buf, data, len <= r->bytes ? len : r->bytes);
  r->gotTag = tag;
  r->gotBytes = len;
  r->haveTag = 1;
  r->status = len <= r->bytes ? UCS_OK : UCS_ERR_MESSAGE_TRUNCATED;
  r->done = 1;
}

void zppUcxShmRecv(zppUcx_t* u, int peer, void* buf, size_t bytes, uint64_t tag, zppUcxReq_t* r) {
  peer_t* p = &u->peers[peer];
  r->viaShm = 1;
  r->buf = buf;
  r->tag = tag;
  for (shmMsg_t *m = p->unexpected, *prev = NULL; m; prev = m, m = m->next) {
    if (!tagsMatch(m->tag, tag)) continue;
    deliver(r, m->tag, m->data, m->len);
    if (prev)
      prev->next = m->next;
    else
      p->unexpected = m->next;
    if (p->unexpectedTail == m) p->unexpectedTail = prev;
    free(m);
    return;
  }
  /* The usual case: the message is next in the ring. Only with no receive
   * posted before this one, which would come first for an equal tag. */
  uint64_t gotTag;
  size_t len;
  const void* data;
  if (p->posted == NULL && (data = zppShmRingPeek(&p->shmIn, &gotTag, &len)) != NULL) {
    if (tagsMatch(gotTag, tag)) {
      deliver(r, gotTag, data, len);
      zppShmRingPop(&p->shmIn);
      return;
    }
    /* Left over from an earlier collective: the ranks made different calls. */
    if (r->space == ZPP_MSG_COLL && zppUcxTagBefore(gotTag, r->seq))
      zppUcxLeftoverError(u, peer, gotTag, UINT32_MAX);
  }
  if (p->postedTail)
    p->postedTail->shmNext = r;
  else
    p->posted = r;
  p->postedTail = r;
}

/* The message first in peer p's ring, while a receive from p is posted: to
 * its receive, else kept aside. Returns 0 when it must stay in the ring (no
 * receive from p is posted). */
static int take(zppUcx_t* u, peer_t* p, uint64_t tag, const void* data, size_t len) {
  if (p->posted == NULL) return 0;
  /* Older than the collective the receives are for: nobody will take it. */
  if (p->posted->space == ZPP_MSG_COLL && zppUcxTagBefore(tag, p->posted->seq)) {
    zppUcxLeftoverError(u, p->rank, tag, UINT32_MAX);
    return 0;
  }
  for (zppUcxReq_t *r = p->posted, *prev = NULL; r; prev = r, r = r->shmNext) {
    if (!tagsMatch(r->tag, tag)) continue;
    if (prev)
      prev->shmNext = r->shmNext;
    else
      p->posted = r->shmNext;
    if (p->postedTail == r) p->postedTail = prev;
    deliver(r, tag, data, len);
    return 1;
  }
  shmMsg_t* m = malloc(sizeof(shmMsg_t) + len);
  if (m == NULL) {
    zppUcxFail(u, zppSystemError, "%s: rank %d: out of memory keeping a %zu-byte message of rank %d",
               u->comm->name, u->rank, len, p->rank);
    return 0;
  }
  m->next = NULL;
  m->tag = tag;
  m->len = len;
  memcpy(m->data, data, len);
  if (p->unexpectedTail)
    p->unexpectedTail->next = m;
  else
    p->unexpected = m;
  p->unexpectedTail = m;
  return 1;
}

static int pushQueued(zppUcx_t* u, peer_t* p) {
  int moved = 0;
  while (p->queued) {
    zppUcxReq_t* r = p->queued;
    if (!zppShmRingTryPush(&p->shmOut, r->tag, r->sendBuf, r->bytes)) break;
    p->queued = r->shmNext;
    if (p->queued == NULL) p->queuedTail = NULL;
    r->status = UCS_OK;
    r->done = 1;
    moved++;
    wakeIfAsleep(u, p);
  }
  return moved;
}

int zppUcxShmProgress(zppUcx_t* u) {
  int moved = 0;
  for (int i = 0; i < u->nShmPeers; i++) {
    peer_t* p = &u->peers[u->shmPeers[i]];
    uint64_t tag;
    size_t len;
    const void* data;
    while ((data = zppShmRingPeek(&p->shmIn, &tag, &len)) != NULL && take(u, p, tag, data, len)) {
      zppShmRingPop(&p->shmIn);
      moved++;
    }
    if (p->queued) moved += pushQueued(u, p);
  }
  return moved;
}

void zppUcxShmPushQueued(zppUcx_t* u) {
  for (int i = 0; i < u->nShmPeers; i++) {
    peer_t* p = &u->peers[u->shmPeers[i]];
    if (p->queued) pushQueued(u, p);
  }
}

int zppUcxShmProbe(const zppUcx_t* u, int src, uint64_t tag, uint64_t mask, uint64_t* gotTag,
                   size_t* len) {
  const peer_t* p = &u->peers[src];
  for (const shmMsg_t* m = p->unexpected; m; m = m->next) {
    if (((m->tag ^ tag) & mask) != 0) continue;
    *gotTag = m->tag;
    *len = m->len;
    return 1;
  }
  if (p->shmMax == 0) return 0;
  for (uint32_t k = 0; zppShmRingPeekAt(&p->shmIn, k, gotTag, len); k++)
    if (((*gotTag ^ tag) & mask) == 0) return 1;
  return 0;
}

/* ---- sleeping, errors ------------------------------------------------------ */

int zppUcxShmSleepBegin(zppUcx_t* u, int* shortNap) {
  if (u->nShmPeers == 0) return 1;
  *shortNap = !zppShmInboxSetSleeping(&u->shmInbox, 1, u->shmAsymFence);
  for (int i = 0; i < u->nShmPeers; i++) {
    const peer_t* p = &u->peers[u->shmPeers[i]];
    uint64_t tag;
    size_t len;
    /* Messages of a peer that no receive waits for stay in its ring: no
     * reason to stay awake for them. */
    if (p->posted && zppShmRingPeek(&p->shmIn, &tag, &len)) {
      zppShmInboxSetSleeping(&u->shmInbox, 0, 0);
      return 0;
    }
  }
  return 1;
}

void zppUcxShmSleepEnd(zppUcx_t* u) {
  if (u->nShmPeers > 0) zppShmInboxSetSleeping(&u->shmInbox, 0, 0);
}

int zppUcxShmSendsQueued(const zppUcx_t* u) {
  for (int i = 0; i < u->nShmPeers; i++)
    if (u->peers[u->shmPeers[i]].queued) return 1;
  return 0;
}

static void cancelList(zppUcxReq_t** head, zppUcxReq_t** tail) {
  for (zppUcxReq_t* r = *head; r; r = r->shmNext) {
    r->status = UCS_ERR_CANCELED;
    r->done = 1;
  }
  *head = *tail = NULL;
}

void zppUcxShmCancel(zppUcx_t* u) {
  for (int i = 0; i < u->nShmPeers; i++) {
    peer_t* p = &u->peers[u->shmPeers[i]];
    cancelList(&p->posted, &p->postedTail);
    cancelList(&p->queued, &p->queuedTail);
  }
}
