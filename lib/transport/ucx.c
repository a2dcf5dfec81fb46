/*
 * UCX host transport, the hot path: the request pool and UCX's completion
 * callbacks, the standing control receives, sends, receives and waits
 * (progress, polling, yielding, sleeping on the event fd, the timeout).
 * Every message of a collective passes through here, so this file holds
 * nothing else: creation is in ucx_wireup.c, what a wait concludes when
 * something is wrong in ucx_diagnose.c, small messages inside a node in
 * ucx_shm.c, teardown in ucx_teardown.c. See ucx.h for the design.
 */
#include "ucx.h"

#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "check.h"
#include "lib/comm.h"
#include "lib/fault.h"

#include "ucx_internal.h"

/* ---- request pool ------------------------------------------------------- */

zppResult_t zppUcxReqAlloc(zppUcx_t* u, zppUcxReq_t** out) {
  if (u->freeList == NULL) {
    /* Requests never move: UCX callbacks hold pointers to them. */
    enum { PER_CHUNK = 64 };
    void** chunks = realloc(u->chunks, (size_t)(u->nChunks + 1) * sizeof(void*));
    if (chunks == NULL) ZPP_FAIL(zppSystemError, NET, "out of memory for request pool");
    u->chunks = chunks;
    zppUcxReq_t* block = calloc(PER_CHUNK, sizeof(zppUcxReq_t));
    if (block == NULL) ZPP_FAIL(zppSystemError, NET, "out of memory for request pool");
    u->chunks[u->nChunks++] = block;
    for (int i = 0; i < PER_CHUNK; i++) {
      block[i].next = u->freeList;
      u->freeList = &block[i];
    }
  }
  zppUcxReq_t* r = u->freeList;
  u->freeList = r->next;
  memset(r, 0, sizeof(*r));
  /* Into the live list. */
  r->next = u->live.next;
  r->prev = &u->live;
  u->live.next->prev = r;
  u->live.next = r;
  *out = r;
  return zppSuccess;
}

void zppUcxReqRelease(zppUcx_t* u, zppUcxReq_t* r) {
  r->prev->next = r->next;
  r->next->prev = r->prev;
  r->next = u->freeList;
  r->prev = NULL;
  u->freeList = r;
}

static void sendDone(void* request, ucs_status_t status, void* userData) {
  zppUcxReq_t* r = userData;
  r->status = status;
  r->done = 1;
  r->ucpReq = NULL;
  ucp_request_free(request);
}

void* zppUcxTagSend(ucp_ep_h ep, const void* buf, size_t bytes, uint64_t tag, zppUcxReq_t* r) {
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof(prm));
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  prm.cb.send = sendDone;
  prm.user_data = r;
  return ucp_tag_send_nbx(ep, buf, bytes, tag, &prm);
}

static void recvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                     void* userData) {
  zppUcxReq_t* r = userData;
  r->status = status;
  if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) {
    r->gotTag = info->sender_tag;
    r->gotBytes = info->length;
    r->haveTag = 1;
  }
  r->done = 1;
  r->ucpReq = NULL;
  ucp_request_free(request);
}

/* ---- control receives: error notices and wake-ups ----------------------- */

/* A receive for control messages of one kind (TAG_CONTROL_WAKE or not),
 * from any rank, into buf. */
static zppResult_t postControlRecv(zppUcx_t* u, uint64_t kind, void* buf, size_t bytes,
                                   zppUcxReq_t** slot) {
  ZPPCHECK(zppUcxReqAlloc(u, slot));
  zppUcxReq_t* r = *slot;
  r->isRecv = 1;
  r->peer = -1;
  r->bytes = bytes;
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof(prm));
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = recvDone;
  prm.user_data = r;
  void* h =
      ucp_tag_recv_nbx(u->worker, buf, bytes, TAG_CONTROL | kind, TAG_CONTROL | TAG_CONTROL_WAKE, &prm);
  if (UCS_PTR_IS_ERR(h)) {
    zppUcxReqRelease(u, r);
    *slot = NULL;
    ZPP_FAIL(zppSystemError, NET, "posting a control receive: %s",
             ucs_status_string(UCS_PTR_STATUS(h)));
  }
  r->ucpReq = h;
  return zppSuccess;
}

zppResult_t zppUcxPostNoticeRecv(zppUcx_t* u) {
  return postControlRecv(u, 0, &u->noticeIn, sizeof(notice_t), &u->noticeRecv);
}

/* Wake-ups only make the worker's event fd fire; the receive takes them off
 * the worker and is posted again. */
zppResult_t zppUcxRepostWakeRecv(zppUcx_t* u) {
  zppUcxReq_t* r = u->wakeRecv;
  if (r != NULL) {
    if (!r->done) return zppSuccess;
    u->wakeRecv = NULL;
    ucs_status_t st = r->status;
    zppUcxReqRelease(u, r);
    if (st == UCS_ERR_CANCELED) return zppSuccess; /* at destroy */
  }
  return postControlRecv(u, TAG_CONTROL_WAKE, &u->wakeByte, 1, &u->wakeRecv);
}

int zppUcxIsControlRecv(const zppUcx_t* u, const zppUcxReq_t* r) {
  return r == u->noticeRecv || r == u->wakeRecv;
}

/* ---- sends, receives, waits -------------------------------------------- */

/* A communicator whose worker was abandoned (zppUcx_t.abandoned) is broken:
 * its error, and nothing touches the worker. */
static zppResult_t abandonedError(zppUcx_t* u) {
  int err = atomic_load(&u->comm->asyncError);
  return err != zppSuccess ? (zppResult_t)err : zppRemoteError;
}

zppResult_t zppUcxIsend(zppUcx_t* u, int peer, const void* buf, size_t bytes, const zppMsgId_t* id,
                        zppUcxReq_t** req) {
  if (u->abandoned) return abandonedError(u);
  ucp_ep_h ep;
  ZPPCHECK(zppUcxGetEp(u, peer, &ep));
  /* FAULT INJECTION (ZPP_FAULT, lib/fault.h; off by default): the one place
   * where a rank is made slow, corrupt, hung or dead on purpose. */
  zppFaultOnSend(u->rank, buf, bytes, id->seq);
  zppUcxReq_t* r = NULL;
  if (zppUcxShmCarries(u, peer, bytes)) {
    ZPPCHECK(zppUcxShmSend(u, peer, buf, bytes, zppUcxMakeTag(u->rank, id), &r));
  } else {
    ZPPCHECK(zppUcxReqAlloc(u, &r));
    r->peer = peer;
    r->bytes = bytes;
    void* h = zppUcxTagSend(ep, buf, bytes, zppUcxMakeTag(u->rank, id), r);
    if (h == NULL) {
      /* Done already (a small message went out inline): nothing to wait for. */
      zppUcxReqRelease(u, r);
      r = NULL;
    } else if (UCS_PTR_IS_ERR(h)) {
      zppUcxReqRelease(u, r);
      return zppUcxFail(u, zppRemoteError,
                        "%s: rank %d: send of %zu bytes to rank %d (host %s) failed: %s", u->comm->name,
                        u->rank, bytes, peer, zppUcxHostOf(u, peer),
                        ucs_status_string(UCS_PTR_STATUS(h)));
    } else {
      r->ucpReq = h;
    }
  }
  if (r) {
    r->seq = id->seq;
    r->wantSig = id->sig & ZPP_UCX_SIG_MASK;
    r->space = id->space;
  }
  int kind = (id->opKind >= 0 && id->opKind < zppNumOpKinds) ? id->opKind : 0;
  int inter = u->comm->topo->nodeOf[peer] != u->comm->topo->nodeOf[u->rank];
  /* One writer (whoever runs this communicator's operations): a plain
   * relaxed update. A locked add is a full fence, and here it stalled until
   * the send's stores into the peer's shared memory had landed: 4% of a
   * small all-gather's time. */
  _Atomic uint64_t* counter = &u->bytes[kind][inter];
  atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + bytes,
                        memory_order_relaxed);
  *req = r;
  return zppSuccess;
}

zppResult_t zppUcxIrecv(zppUcx_t* u, int peer, void* buf, size_t bytes, const zppMsgId_t* id,
                        zppUcxReq_t** req) {
  if (u->abandoned) return abandonedError(u);
  /* An endpoint to the sender too: it is how a failed peer is noticed. */
  ucp_ep_h ep;
  ZPPCHECK(zppUcxGetEp(u, peer, &ep));
  zppUcxReq_t* r;
  ZPPCHECK(zppUcxReqAlloc(u, &r));
  r->peer = peer;
  r->isRecv = 1;
  r->bytes = bytes;
  r->seq = id->seq;
  r->wantSig = id->sig & ZPP_UCX_SIG_MASK;
  r->space = id->space;
  r->tag = zppUcxMakeTag(peer, id);
  if (zppUcxShmCarries(u, peer, bytes)) {
    zppUcxShmRecv(u, peer, buf, bytes, r->tag, r);
    *req = r;
    return zppSuccess;
  }
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof(prm));
  /* Never completed inline: UCX 1.13 does not fill recv_info then, and the
   * sender's tag carries the signature to check. */
  prm.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = recvDone;
  prm.user_data = r;
  void* h = ucp_tag_recv_nbx(u->worker, buf, bytes, r->tag, TAG_MATCH_MASK, &prm);
  if (UCS_PTR_IS_ERR(h)) {
    zppUcxReqRelease(u, r);
    return zppUcxFail(u, zppSystemError, "%s: rank %d: posting a receive from rank %d failed: %s",
                      u->comm->name, u->rank, peer, ucs_status_string(UCS_PTR_STATUS(h)));
  }
  r->ucpReq = h;
  *req = r;
  return zppSuccess;
}

/* Checks a completed request and releases it. */
static zppResult_t finishReq(zppUcx_t* u, zppUcxReq_t* r) {
  int peer = r->peer;
  zppResult_t res = zppSuccess;
  const char* name = u->comm->name;
  /* The signature first: it says what differs, a length only that something does. */
  if (r->isRecv && r->haveTag && (uint32_t)(r->gotTag & ZPP_UCX_SIG_MASK) != r->wantSig) {
    if (r->space != ZPP_MSG_COLL)
      res = zppUcxP2pMismatchError(u, r);
    else
      res = zppUcxMismatchError(u, peer, (uint32_t)(r->gotTag & ZPP_UCX_SIG_MASK), r->wantSig);
  } else if (r->status == UCS_ERR_MESSAGE_TRUNCATED) {
    res = zppUcxFail(u, zppInvalidUsage,
                     "%s: rank %d received more than the %zu bytes it expected from rank %d (host %s): "
                     "the ranks called collectives with different counts",
                     name, u->rank, r->bytes, peer, zppUcxHostOf(u, peer));
  } else if (r->status != UCS_OK) {
    res = zppUcxFail(u, zppRemoteError, "%s: rank %d: %s of %zu bytes %s rank %d (host %s) failed: %s",
                     name, u->rank, r->isRecv ? "receive" : "send", r->bytes, r->isRecv ? "from" : "to",
                     peer, zppUcxHostOf(u, peer), ucs_status_string(r->status));
  } else if (r->isRecv && r->gotBytes != r->bytes) {
    res = zppUcxFail(u, zppInvalidUsage,
                     "%s: rank %d received %zu bytes from rank %d (host %s) where it expected %zu: "
                     "the ranks called collectives with different counts",
                     name, u->rank, r->gotBytes, peer, zppUcxHostOf(u, peer), r->bytes);
  }
  zppUcxReqRelease(u, r);
  return res;
}

static zppResult_t checkAborted(zppUcx_t* u) {
  if (!atomic_load(&u->aborted)) return zppSuccess;
  /* Not logged as an error: the user asked for it. */
  ZPP_INFO(NET, "%s: rank %d: operation stopped by zppCommAbort", u->comm->name, u->rank);
  int err = atomic_load(&u->comm->asyncError);
  return err != zppSuccess ? (zppResult_t)err : zppInvalidUsage;
}

/* Nothing to do: poll for a moment if polling has paid off lately
 * (busy_poll.h), then yield the core for a while (other ranks may need
 * it), then sleep on the worker's event fd until something arrives. Returns
 * 1 when it gave the core away (yield or sleep). */
static int idleWait(zppUcx_t* u, double busy, double idleSince, double now, double deadline) {
  if (now - idleSince < busy) {
    /* Poll on its own for a while before the caller's bookkeeping (and its
     * clock read) again: a message is seen within one progress call. */
    for (int i = 0; i < BUSY_POLLS_PER_CHECK; i++)
      if (zppUcxShmProgress(u) + ucp_worker_progress(u->worker)) break;
    return 0;
  }
  if (u->busy.fellToZero) {
    u->busy.fellToZero = 0;
    zppBusyPollLeaveCore(&u->busy, u->rank);
  }
  if (now - idleSince < u->spinSec) {
    sched_yield();
    return 1;
  }
  /* A message in a shared-memory ring does not touch the event fd: its
   * sender wakes a rank that said it sleeps (zppUcxShmSleepBegin). */
  int shortNap = 0;
  if (!zppUcxShmSleepBegin(u, &shortNap)) return 0;
  ucs_status_t st = ucp_worker_arm(u->worker);
  if (st != UCS_OK) {
    zppUcxShmSleepEnd(u);
    if (st == UCS_ERR_BUSY) return 0; /* events arrived meanwhile: progress again */
    sched_yield();
    return 1;
  }
  int ms = (int)((deadline - now) * 1000.0) + 1;
  if (ms > MAX_SLEEP_MS) ms = MAX_SLEEP_MS;
  /* A receiver that frees ring slots does not wake the sender waiting for one. */
  if (ms > QUEUED_SEND_SLEEP_MS && (shortNap || zppUcxShmSendsQueued(u))) ms = QUEUED_SEND_SLEEP_MS;
  if (ms < 1) ms = 1;
  struct pollfd fds[2] = {{.fd = u->efd, .events = POLLIN}, {.fd = u->wakeFd, .events = POLLIN}};
  (void)poll(fds, 2, ms);
  zppUcxShmSleepEnd(u);
  return 1;
}

zppResult_t zppUcxPoll(zppUcx_t* u) {
  if (u->abandoned) return abandonedError(u);
  /* Queued ring sends move on (compute between waits, in qwZ and qgZ); what
   * came in stays in the rings until a wait wants it. */
  zppUcxShmPushQueued(u);
  for (int k = 0; k < 64 && ucp_worker_progress(u->worker); k++) {
  }
  if (u->wakeRecv && u->wakeRecv->done) ZPPCHECK(zppUcxRepostWakeRecv(u));
  ZPPCHECK(zppUcxCheckNotice(u));
  return zppSuccess;
}

zppResult_t zppUcxProbe(zppUcx_t* u, int peer, const zppMsgId_t* id, int* found) {
  if (u->abandoned) return abandonedError(u);
  ucp_ep_h ep;
  ZPPCHECK(zppUcxGetEp(u, peer, &ep));
  /* Ring messages for receives already posted move out of the way, so a
   * full ring cannot hide the message asked for behind them. */
  zppUcxShmProgress(u);
  peer_t* p = &u->peers[peer];
  uint64_t tag = zppUcxMakeTag(peer, id), gotTag;
  size_t len;
  ucp_tag_recv_info_t info;
  *found = (p->shmMax != 0 && zppUcxShmProbe(u, peer, tag, TAG_MATCH_MASK, &gotTag, &len)) ||
           ucp_tag_probe_nb(u->worker, tag, TAG_MATCH_MASK, 0, &info) != NULL;
  if (*found) return zppSuccess;
  /* A dead peer is only noticed by a wait, which a caller that probes
   * never enters: look at every peer now and then. */
  double now = zppClockNow();
  if (now - u->lastProbeLiveness > LIVENESS_PERIOD_SEC) {
    u->lastProbeLiveness = now;
    for (int i = 0; i < u->nranks; i++) {
      peer_t* q = &u->peers[i];
      if (i == u->rank || q->state == EP_FAILED || zppUcxPeerAlive(q)) continue;
      q->state = EP_FAILED;
      q->failStatus = UCS_ERR_CONNECTION_RESET;
    }
  }
  if (p->state == EP_FAILED) return zppUcxPeerFailedError(u, peer);
  return checkAborted(u);
}

static int reqsDone(zppUcxReq_t* const* reqs, int n) {
  for (int i = 0; i < n; i++)
    if (reqs[i] != NULL && !reqs[i]->done) return 0;
  return 1;
}

zppResult_t zppUcxWaitAll(zppUcx_t* u, zppUcxReq_t** reqs, int n) {
  if (u->abandoned) return abandonedError(u);
  const double timeout = u->comm->timeoutSec > 0 ? u->comm->timeoutSec : 1e9;
  const double busy = u->busy.sec;
  int idled = 0, yielded = 0;
  /* Set at the first look at the clock, which a wait that finds its
   * messages at once never takes (a read costs 40 ns in this VM). */
  double lastDone = -1.0, idleSince = 0.0, lastLiveness = 0.0;
  /* Requests done already (a ring send, a receive whose message was next in
   * its ring, an inline UCX send): no progress call. Looking at the rings
   * would touch the slot a peer is writing next, a cache miss of its own. */
  int allDone = reqsDone(reqs, n);
  /* A small message usually lands within a microsecond of its peer's call:
   * poll for it before any of the loop's bookkeeping (the first clock read
   * alone would delay seeing it by 45 ns in this VM). Only while polling
   * pays off (busy > 0): a rank that shares its core must yield instead. */
  for (int k = 0; !allDone && busy > 0.0 && k < FIRST_POLLS; k++) {
    int moved = zppUcxShmProgress(u);
    if (k % FIRST_POLLS_PER_UCX == FIRST_POLLS_PER_UCX - 1)
      moved += (int)ucp_worker_progress(u->worker);
    if (moved) allDone = reqsDone(reqs, n);
  }
  for (int i = 0; allDone && i < n; i++) {
    zppUcxReq_t* r = reqs[i];
    if (r == NULL) continue;
    reqs[i] = NULL;
    ZPPCHECK(finishReq(u, r));
  }
  if (allDone) return zppSuccess;
  for (;;) {
    int progressed = zppUcxShmProgress(u) > 0;
    for (int k = 0; k < 64 && ucp_worker_progress(u->worker); k++) progressed = 1;

    int pending = 0, completed = 0, firstPending = -1;
    for (int i = 0; i < n; i++) {
      zppUcxReq_t* r = reqs[i];
      if (r == NULL) continue;
      if (r->done) {
        reqs[i] = NULL;
        completed = 1;
        ZPPCHECK(finishReq(u, r));
        continue;
      }
      if (u->peers[r->peer].state == EP_FAILED) return zppUcxPeerFailedError(u, r->peer);
      if (firstPending < 0) firstPending = i;
      pending++;
    }
    if (pending == 0) {
      if (idled) zppBusyPollUpdate(&u->busy, busy, yielded);
      return zppSuccess;
    }
    ZPPCHECK(zppUcxCheckNotice(u));
    ZPPCHECK(checkAborted(u));
    if (u->wakeRecv && u->wakeRecv->done) ZPPCHECK(zppUcxRepostWakeRecv(u));
    int err = atomic_load(&u->comm->asyncError);
    if (err != zppSuccess) return (zppResult_t)err; /* logged where it was found */

    double now = zppClockNow();
    if (lastDone < 0.0) {
      lastDone = idleSince = now;
      /* The first health check comes early: a mismatch is best found fast. */
      lastLiveness = now - LIVENESS_PERIOD_SEC + 0.02;
    }
    if (completed || progressed) idleSince = now;
    if (completed) lastDone = now;
    if (now - lastDone > timeout) {
      zppUcxReq_t* r = reqs[firstPending];
      char hint[160];
      zppUcxOtherPathHint(u, r, hint, sizeof(hint));
      return zppUcxFail(u, zppRemoteError,
                        "%s: rank %d timed out after %.1f s waiting for rank %d (host %s) to %s %zu "
                        "bytes (ZPP_TIMEOUT): that rank stopped calling, hangs, or its link is down%s",
                        u->comm->name, u->rank, now - lastDone, r->peer, zppUcxHostOf(u, r->peer),
                        r->isRecv ? "send" : "receive", r->bytes, hint);
    }
    if (now - lastLiveness > LIVENESS_PERIOD_SEC) {
      lastLiveness = now;
      ZPPCHECK(zppUcxProbeMismatch(u, reqs[firstPending]));
      for (int i = 0; i < n; i++) {
        if (reqs[i] == NULL) continue;
        peer_t* p = &u->peers[reqs[i]->peer];
        if (!zppUcxPeerAlive(p)) {
          p->state = EP_FAILED;
          p->failStatus = UCS_ERR_CONNECTION_RESET;
          return zppUcxFail(
              u, zppRemoteError, "%s: rank %d: rank %d (pid %d on this machine, host %s) exited",
              u->comm->name, u->rank, p->rank, (int)p->info.pid, zppUcxHostOf(u, p->rank));
        }
      }
    }
    if (!progressed) {
      idled = 1;
      yielded |= idleWait(u, busy, idleSince, now, lastDone + timeout);
    }
  }
}

zppResult_t zppUcxSendRecv(zppUcx_t* u, int sendPeer, const void* sendBuf, size_t sendBytes,
                           int recvPeer, void* recvBuf, size_t recvBytes, const zppMsgId_t* id) {
  zppUcxReq_t* reqs[2] = {NULL, NULL};
  /* Through UCX the receive goes first, so that the message needs no
   * unexpected copy; a message to a ring goes first, to be on its way
   * sooner (nothing reads the rings before the wait). */
  int sendFirst = sendPeer >= 0 && zppUcxShmCarries(u, sendPeer, sendBytes);
  if (sendFirst) ZPPCHECK(zppUcxIsend(u, sendPeer, sendBuf, sendBytes, id, &reqs[1]));
  if (recvPeer >= 0) ZPPCHECK(zppUcxIrecv(u, recvPeer, recvBuf, recvBytes, id, &reqs[0]));
  if (sendPeer >= 0 && !sendFirst) ZPPCHECK(zppUcxIsend(u, sendPeer, sendBuf, sendBytes, id, &reqs[1]));
  return zppUcxWaitAll(u, reqs, 2);
}

void zppUcxSetSigFormatter(zppUcx_t* u, zppSigFormatter_t fn) { u->sigFormatter = fn; }

int zppUcxRanksShareCores(const zppUcx_t* u) { return u->ranksShareCores; }
