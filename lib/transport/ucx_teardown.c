/* UCX host transport: errors, abort, teardown and diagnostics; see ucx.h. */
#include <errno.h>
#include <pthread.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ucx_internal.h"

#include "check.h"
#include "lib/comm.h"

/* ---- errors, abort, teardown ------------------------------------------- */

/* Progresses until no request but the control receive is live, or the time
 * is up. */
int zppUcxDrain(zppUcx_t* u, double limitSec) {
  if (u->abandoned) return 0;
  double end = zppClockNow() + limitSec;
  for (;;) {
    zppUcxShmProgress(u);
    while (ucp_worker_progress(u->worker)) {
    }
    int live = 0;
    for (zppUcxReq_t* r = u->live.next; r != &u->live; r = r->next)
      if (!zppUcxIsControlRecv(u, r) && !r->done) live++;
    if (live == 0 || zppClockNow() > end) return live;
    sched_yield();
  }
}

/* Sends this rank's error notice to every peer it has an endpoint to; the
 * requests still in flight go into sent[] (nranks slots): returns how many. */
static int sendNotices(zppUcx_t* u, zppUcxReq_t** sent) {
  int n = 0;
  u->noticeOut.rank = u->rank;
  u->noticeOut.code = atomic_load(&u->comm->asyncError);
  u->noticeOut.left = u->comm->farewell;
  /* The communicator's own reason: at its destroy its handle is gone, and
   * zppCommStateLastError would answer with the log's last error. */
  snprintf(u->noticeOut.reason, sizeof(u->noticeOut.reason), "%.*s",
           (int)sizeof(u->noticeOut.reason) - 1, u->comm->lastError);
  for (int p = 0; p < u->nranks; p++) {
    /* Existing endpoints only: making one now means a tcp connect, which
     * UCX 1.13 does blocking: to a node whose link is down it would hang
     * for the kernel's SYN retries (measured: 70 s). */
    if (p == u->rank || u->peers[p].state != EP_OK) continue;
    if (u->noticeGot && p == u->noticeIn.rank) continue; /* it knows */
    ucp_ep_h ep = u->peers[p].ep;
    zppUcxReq_t* r;
    if (zppUcxReqAlloc(u, &r) != zppSuccess) return n;
    r->peer = p;
    void* h = zppUcxTagSend(ep, &u->noticeOut, sizeof(notice_t),
                            TAG_CONTROL | ((uint64_t)u->rank << TAG_SRC_SHIFT), r);
    if (UCS_PTR_IS_PTR(h)) {
      r->ucpReq = h;
      sent[n++] = r;
    } else {
      r->done = 1;
    }
  }
  return n;
}

/* Progresses until the notices have left or the time is up. Only them: the
 * failed call's own transfers (a receive from the dead peer) end by the
 * cancel that follows, and waiting for them here held every failed call
 * for the whole limit (0.5 s between a SIGKILL and the survivors' errors). */
static void drainNotices(zppUcx_t* u, zppUcxReq_t** sent, int n, double limitSec) {
  double end = zppClockNow() + limitSec;
  for (;;) {
    while (ucp_worker_progress(u->worker)) {
    }
    int left = 0;
    for (int i = 0; i < n; i++) left += !sent[i]->done;
    if (left == 0 || zppClockNow() > end) return;
    sched_yield();
  }
}

/*
 * UCX 1.13's tcp transport says goodbye even when an endpoint is dropped:
 * uct_tcp_ep_destroy (reached from a force-close or ucp_worker_destroy)
 * sends a 9-byte CONN_FIN with ucs_socket_send, which retries a
 * non-blocking send() in a loop until it goes through. On a connection
 * whose peer stopped acknowledging (its link is down) the send buffer stays
 * full, send() says EAGAIN, and the loop spins a core until the link is back
 * and the kernel's retransmission backoff lets the queue drain: zppCommDestroy
 * after a link-down error took 55 to 80+ s. shutdown(SHUT_WR) ends the spin:
 * send() then fails with EPIPE and UCX destroys the endpoint. Data already
 * queued still leaves (the peer gets our error notice if it can), and the
 * kernel drops the orphaned connection later on its own.
 *
 * UCX does not give out its sockets, so they are found through the worker's
 * event fd: an epoll set that holds each tcp interface's epoll set, which
 * holds the sockets of its endpoints (Linux lists an epoll set's members as
 * "tfd:" lines in /proc/self/fdinfo). Only tcp sockets with unacknowledged
 * bytes are shut down: a connection whose queue is empty takes the FIN at
 * once. Nothing found (another UCX, no /proc): the old behaviour. Called only
 * where the endpoints are dropped anyway. Returns how many were shut down.
 */
static int shutStuckSockets(int epfd, int depth) {
  if (epfd < 0 || depth > 3) return 0;
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
  FILE* f = fopen(path, "re");
  if (f == NULL) return 0;
  int n = 0;
  char line[256];
  while (fgets(line, sizeof(line), f)) {
    int fd;
    if (sscanf(line, "tfd: %d", &fd) != 1 || fd < 0 || fd == epfd) continue;
    struct stat st;
    if (fstat(fd, &st) != 0) continue;
    if (!S_ISSOCK(st.st_mode)) {
      char target[64] = "";
      snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
      ssize_t len = readlink(path, target, sizeof(target) - 1);
      if (len > 0 && (target[len] = '\0', strcmp(target, "anon_inode:[eventpoll]") == 0))
        n += shutStuckSockets(fd, depth + 1);
      continue;
    }
    int proto = 0, outq = 0;
    socklen_t plen = sizeof(proto);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &plen) != 0 || proto != IPPROTO_TCP) continue;
    if (ioctl(fd, SIOCOUTQ, &outq) != 0 || outq <= 0) continue;
    if (shutdown(fd, SHUT_WR) == 0) n++;
  }
  fclose(f);
  return n;
}

static void shutStuck(zppUcx_t* u) {
  int n = shutStuckSockets(u->efd, 0);
  if (n > 0)
    ZPP_INFO(NET,
             "%s: rank %d: %d tcp connection(s) with unacknowledged data shut down before "
             "dropping their endpoints",
             u->comm->name, u->rank, n);
}

static void closeEps(zppUcx_t* u, unsigned mode, double limitSec) {
  if (mode == UCP_EP_CLOSE_FLAG_FORCE) shutStuck(u);
  void** closing = calloc((size_t)u->nranks, sizeof(void*));
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof(prm));
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  prm.flags = mode;
  for (int p = 0; p < u->nranks; p++) {
    peer_t* pe = &u->peers[p];
    if (pe->ep == NULL || pe->state == EP_CLOSED) continue;
    void* h = ucp_ep_close_nbx(pe->ep, &prm);
    pe->state = EP_CLOSED;
    pe->ep = NULL;
    if (UCS_PTR_IS_PTR(h)) {
      if (closing)
        closing[p] = h;
      else
        ucp_request_free(h);
    }
  }
  if (closing == NULL) return;
  double end = zppClockNow() + limitSec;
  for (;;) {
    ucp_worker_progress(u->worker);
    int left = 0;
    for (int p = 0; p < u->nranks; p++) {
      if (closing[p] == NULL) continue;
      if (ucp_request_check_status(closing[p]) == UCS_INPROGRESS) {
        left++;
      } else {
        ucp_request_free(closing[p]);
        closing[p] = NULL;
      }
    }
    if (left == 0) break;
    if (zppClockNow() > end) {
      /* A flush that does not finish (peer gone): fall back to dropping. */
      if (mode == UCP_EP_CLOSE_FLAG_FORCE) {
        /* Released to UCX, which frees them when they end: ucp_worker_destroy
         * asserts that no request of an endpoint is still ours. */
        for (int p = 0; p < u->nranks; p++)
          if (closing[p]) ucp_request_free(closing[p]);
        break;
      }
      shutStuck(u);
      for (int p = 0; p < u->nranks; p++)
        if (closing[p]) ucp_request_cancel(u->worker, closing[p]);
      mode = UCP_EP_CLOSE_FLAG_FORCE;
      end = zppClockNow() + limitSec;
    }
    sched_yield();
  }
  free(closing);
}

static int sendsLive(zppUcx_t* u) {
  for (zppUcxReq_t* r = u->live.next; r != &u->live; r = r->next)
    if (!r->isRecv && !r->done) return 1;
  return 0;
}

/* Sends the notices once, and waits for them to leave (NOTICE_WAIT_SEC). */
static void announce(zppUcx_t* u) {
  if (u->noticeSent) return;
  u->noticeSent = 1;
  zppUcxReq_t** sent = calloc((size_t)u->nranks, sizeof(*sent));
  if (sent != NULL) drainNotices(u, sent, sendNotices(u, sent), NOTICE_WAIT_SEC);
  free(sent);
}

void zppUcxQuiesce(zppUcx_t* u) {
  if (u == NULL) return;
  /* Tell the others, also when one of them told us (then all but that
   * one): they may be waiting on a rank that waits on us, and would only
   * see a timeout. Notices go over existing endpoints only, so the rank
   * that failed first may have none to some survivor (endpoints are made
   * on first use; test_comm_shrink dead 2x2/cyclic); passed on by every
   * rank once, it reaches each rank that some chain of endpoints
   * reaches. */
  if (!atomic_load(&u->aborted)) announce(u);
  zppUcxShmCancel(u);
  for (zppUcxReq_t* r = u->live.next; r != &u->live; r = r->next)
    if (r->isRecv && !r->done && r->ucpReq && !zppUcxIsControlRecv(u, r))
      ucp_request_cancel(u->worker, r->ucpReq);
  /* Sends cannot be cancelled. Most end by themselves, and soon: a queued
   * eager send to a live peer once that peer's worker makes room. Only the
   * ones left then (to a dead peer, or a rendezvous whose receiver
   * cancelled) go with their endpoints, by a forced close: UCX 1.13 does
   * not purge every queued send of a forced shared-memory endpoint, and
   * one it later packed read the caller's freed buffer (a segfault in
   * uct_mm_ep_process_pending, test_comm_lost_node). */
  int left = zppUcxDrain(u, QUIESCE_WAIT_SEC);
  if (sendsLive(u)) {
    u->closing = 1;
    closeEps(u, UCP_EP_CLOSE_FLAG_FORCE, QUIESCE_WAIT_SEC);
    left = zppUcxDrain(u, QUIESCE_WAIT_SEC);
  }
  if (sendsLive(u)) {
    u->abandoned = 1;
    ZPP_INFO(NET,
             "%s: rank %d: a send to a failed peer is still queued in UCX: this communicator's "
             "worker is not progressed again, and is kept until the process exits",
             u->comm->name, u->rank);
  } else if (left != 0) {
    ZPP_INFO(NET, "%s: rank %d: %d transfers to failed peers left to the worker", u->comm->name,
             u->rank, left);
  }
  /* Completed but never waited for: release. */
  zppUcxReq_t* r = u->live.next;
  while (r != &u->live) {
    zppUcxReq_t* next = r->next;
    if (r->done && !zppUcxIsControlRecv(u, r)) zppUcxReqRelease(u, r);
    r = next;
  }
}

void zppUcxAbort(zppUcx_t* u) {
  if (u == NULL) return;
  atomic_store(&u->aborted, 1);
  uint64_t one = 1;
  if (u->wakeFd >= 0) (void)!write(u->wakeFd, &one, sizeof(one));
}

/* Abandoned workers (see zppUcx_t.abandoned), reachable until the process
 * exits: never freed, so nothing reads freed memory, and not reported as
 * leaks either. */
static pthread_mutex_t keptLock = PTHREAD_MUTEX_INITIALIZER;
static zppUcx_t** kept;
static int nKept;

void zppUcxDestroy(zppUcx_t* u) {
  if (u == NULL) return;
  /* First: UCX 1.13 may abort in the teardown below (ucp_worker_destroy). */
  zppUcxShmUnlink(u);
  /* A rank that aborts a healthy communicator says so (a notice marked
   * left): its peers' calls that need it fail at once, "rank R (host h)
   * left: ...", where they waited for their timeout (how a torchft replica
   * that shuts down looks to the others; gloo's peers see its sockets
   * close). No call runs on the worker any more. A notice that cannot leave
   * (a peer hung without our knowing) is a queued send like quiesce's. */
  if (u->worker && u->comm->farewell && !u->abandoned) {
    announce(u);
    if (sendsLive(u)) {
      u->closing = 1;
      closeEps(u, UCP_EP_CLOSE_FLAG_FORCE, QUIESCE_WAIT_SEC);
      zppUcxDrain(u, QUIESCE_WAIT_SEC);
      u->abandoned = sendsLive(u);
    }
  }
  if (u->abandoned) {
    pthread_mutex_lock(&keptLock);
    zppUcx_t** more = realloc(kept, (size_t)(nKept + 1) * sizeof(*kept));
    if (more != NULL) {
      kept = more;
      kept[nKept++] = u;
    }
    pthread_mutex_unlock(&keptLock);
    return;
  }
  if (u->worker) {
    u->closing = 1;
    zppUcxReq_t* control[2] = {u->noticeRecv, u->wakeRecv};
    for (int i = 0; i < 2; i++)
      if (control[i] && control[i]->ucpReq && !control[i]->done)
        ucp_request_cancel(u->worker, control[i]->ucpReq);
    /* Flush what is still queued so the last messages reach their peers.
     * A broken communicator flushes too, only shorter, before it drops what
     * is left: a force close purges what UCX still owes a peer, and UCX 1.13
     * aborts on an assertion when that is a wireup reply (ucp_request.c:684
     * "got REP message"; seen once in a parallel run of the comm suite, in
     * test_coll_faults mismatch, where the peers are alive and a flush
     * sends it). */
    int healthy = !atomic_load(&u->aborted) && atomic_load(&u->comm->asyncError) == zppSuccess;
    closeEps(u, 0, healthy ? CLOSE_WAIT_SEC : BROKEN_CLOSE_WAIT_SEC);
    zppUcxDrain(u, 0.2);
    /* Endpoints without peer error handling (not force-closable) go here. */
    if (!healthy) shutStuck(u);
    ucp_worker_destroy(u->worker);
  }
  if (u->ctx) ucp_cleanup(u->ctx);
  zppUcxShmDestroy(u);
  if (u->wakeFd >= 0) close(u->wakeFd);
  for (int i = 0; i < u->nChunks; i++) free(u->chunks[i]);
  free(u->chunks);
  free(u->peers);
  free(u->addrBlob);
  free(u);
}

/* ---- diagnostics -------------------------------------------------------- */

zppResult_t zppUcxPeerTransports(zppUcx_t* u, int peer, char* buf, size_t len) {
  ZPP_ARGCHECK(peer >= 0 && peer < u->nranks && peer != u->rank && buf && len > 0,
               "zppUcxPeerTransports: bad peer %d", peer);
  peer_t* p = &u->peers[peer];
  ZPP_USAGECHECK(p->state == EP_OK, "no live endpoint to rank %d yet: exchange a message first", peer);
  char* text = NULL;
  size_t textLen = 0;
  FILE* f = open_memstream(&text, &textLen);
  if (f == NULL) ZPP_FAIL(zppSystemError, NET, "open_memstream: %s", strerror(errno));
  ucp_ep_print_info(p->ep, f);
  fclose(f);
  /* Lane lines read "lane[0]:  3:sysv/memory.0 md[2] -> ...": keep the
   * transport names, once each. */
  buf[0] = '\0';
  for (char* line = strstr(text, "lane["); line; line = strstr(line + 1, "lane[")) {
    char* colon = strchr(line, ':');
    if (colon == NULL) break;
    char* name = strchr(colon + 1, ':');
    char* slash = name ? strchr(name, '/') : NULL;
    char* eol = strchr(line, '\n');
    if (name == NULL || slash == NULL || (eol && slash > eol)) continue;
    char tl[32];
    size_t n = (size_t)(slash - name - 1);
    if (n >= sizeof(tl)) n = sizeof(tl) - 1;
    memcpy(tl, name + 1, n);
    tl[n] = '\0';
    if (strstr(buf, tl)) continue;
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%s", used ? "," : "", tl);
  }
  ZPP_DBG(NET, "rank %d -> rank %d endpoint:\n%s", u->rank, peer, text);
  free(text);
  return zppSuccess;
}

void zppUcxGetBytes(const zppUcx_t* u, uint64_t* intra, uint64_t* inter, int nKinds) {
  for (int k = 0; k < nKinds && k < zppNumOpKinds; k++) {
    intra[k] = atomic_load_explicit(&u->bytes[k][0], memory_order_relaxed) -
               atomic_load_explicit(&u->bytesBase[k][0], memory_order_relaxed);
    inter[k] = atomic_load_explicit(&u->bytes[k][1], memory_order_relaxed) -
               atomic_load_explicit(&u->bytesBase[k][1], memory_order_relaxed);
  }
}

void zppUcxResetBytes(zppUcx_t* u) {
  for (int k = 0; k < zppNumOpKinds; k++)
    for (int i = 0; i < 2; i++)
      atomic_store_explicit(&u->bytesBase[k][i],
                            atomic_load_explicit(&u->bytes[k][i], memory_order_relaxed),
                            memory_order_relaxed);
}
