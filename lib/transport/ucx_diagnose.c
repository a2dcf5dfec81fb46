/*
 * UCX host transport, failure diagnosis: what a rank concludes when
 * something went wrong, and the message it gives. The error's cause recorded
 * on the communicator; whether a local peer's process still runs (shared
 * memory reports no dead peer, so its pid and start time are watched); UCX's
 * error callback for endpoints across nodes; an error another rank
 * announced; and the proofs that ranks called different collectives
 * (another signature, a leftover message, a message of the awaited step on
 * the other path). The hot path (ucx.c) calls in here only when a wait finds
 * something wrong, or once every LIVENESS_PERIOD_SEC while it waits.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "check.h"
#include "lib/comm.h"

#include "ucx_internal.h"

/* Records the cause on the communicator, which logs it if it is the first
 * error; a consequence of an earlier error is only traced. */
zppResult_t zppUcxFail(zppUcx_t* u, zppResult_t code, const char* fmt, ...) {
  char reason[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  if (atomic_load(&u->comm->asyncError) != zppSuccess)
    ZPP_INFO(NET, "%s", reason);
  else
    zppCommStateSetError(u->comm, code, "%s", reason);
  return code;
}

const char* zppUcxHostOf(const zppUcx_t* u, int rank) {
  const char* h = zppBootstrapHostId(u->comm->bootstrap, rank);
  return h ? h : "?";
}

/* ---- process identity, for the liveness of local peers ------------------ */

/* State letter and start time of a process, from /proc/<pid>/stat. Returns 0
 * when the process does not exist. */
static int procStat(int pid, char* state, uint64_t* startTime) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* The command name may hold spaces and parentheses: fields start after the
   * last ')'. Field 3 is the state, field 22 the start time. */
  char* p = strrchr(buf, ')');
  if (p == NULL) return 0;
  p += 2;
  *state = *p;
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p, ' ');
    if (p) p++;
  }
  *startTime = p ? strtoull(p, NULL, 10) : 0;
  return 1;
}

void zppUcxFillRankInfo(rankInfo_t* info) {
  char state;
  info->pid = (int32_t)getpid();
  if (!procStat(info->pid, &state, &info->startTime)) info->startTime = 0;
  struct stat st;
  info->pidNs = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (fgets(info->bootId, sizeof(info->bootId), f) == NULL) info->bootId[0] = '\0';
    fclose(f);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) CPU_SET(0, &set); /* count one, at least */
  for (int c = 0; c < 64 * 16 && c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) info->cpuMask[c / 64] |= 1ull << (c % 64);
}

/* 1 while the peer's process runs (or cannot be watched). */
int zppUcxPeerAlive(const peer_t* p) {
  if (!p->watchPid) return 1;
  char state = '?';
  uint64_t start = 0;
  if (!procStat(p->info.pid, &state, &start)) return 0;
  if (state == 'Z' || state == 'X') return 0;
  return start == p->info.startTime;
}

/* ---- errors UCX and other ranks report ---------------------------------- */

void zppUcxEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  peer_t* p = arg;
  zppUcx_t* u = p->ucx;
  if (p->state == EP_FAILED || p->state == EP_CLOSED) return;
  p->state = EP_FAILED;
  p->failStatus = status;
  if (u->closing) return; /* peers closing their side at destroy */
  /* A notice that came in the same progress says why: a rank that aborts
   * says so before its endpoints go (then only the calls that need it
   * fail), and one that failed names its error. */
  const zppUcxReq_t* n = u->noticeRecv;
  if (n != NULL && n->done && n->status == UCS_OK) {
    if (!u->noticeIn.left) {
      (void)zppUcxCheckNotice(u);
      return;
    }
    if (u->noticeIn.rank == p->rank) {
      p->left = 1;
      return;
    }
  }
  zppUcxFail(u, zppRemoteError, "%s: rank %d lost rank %d (host %s): %s", u->comm->name, u->rank,
             p->rank, zppUcxHostOf(u, p->rank), ucs_status_string(status));
}

zppResult_t zppUcxCheckNotice(zppUcx_t* u) {
  zppUcxReq_t* r = u->noticeRecv;
  if (r == NULL || !r->done) return zppSuccess;
  u->noticeRecv = NULL;
  ucs_status_t st = r->status;
  zppUcxReqRelease(u, r);
  if (st != UCS_OK) return zppSuccess; /* cancelled at destroy */
  int from = u->noticeIn.rank;
  if (u->noticeIn.left && from >= 0 && from < u->nranks && from != u->rank) {
    peer_t* p = &u->peers[from];
    if (p->state != EP_CLOSED) p->state = EP_FAILED;
    p->left = 1;
    ZPP_INFO(NET, "%s: rank %d: rank %d (host %s) left: it aborted its communicator", u->comm->name,
             u->rank, from, zppUcxHostOf(u, from));
    return zppUcxPostNoticeRecv(u); /* for the next rank that leaves, or fails */
  }
  u->noticeGot = 1;
  u->noticeIn.reason[sizeof(u->noticeIn.reason) - 1] = '\0';
  zppResult_t code = u->noticeIn.code == zppInvalidUsage ? zppInvalidUsage : zppRemoteError;
  return zppUcxFail(u, code, "%s: rank %d (host %s) failed: %s", u->comm->name, u->noticeIn.rank,
                    zppUcxHostOf(u, u->noticeIn.rank), u->noticeIn.reason);
}

zppResult_t zppUcxPeerFailedError(zppUcx_t* u, int peer) {
  const peer_t* p = &u->peers[peer];
  if (p->left)
    return zppUcxFail(u, zppRemoteError,
                      "%s: rank %d: rank %d (host %s) left: it aborted its communicator "
                      "(zppCommAbort)",
                      u->comm->name, u->rank, peer, zppUcxHostOf(u, peer));
  return zppUcxFail(u, zppRemoteError, "%s: rank %d: rank %d (host %s) failed: %s", u->comm->name,
                    u->rank, peer, zppUcxHostOf(u, peer), ucs_status_string(p->failStatus));
}

/* ---- mismatched collectives --------------------------------------------- */

zppResult_t zppUcxMismatchError(zppUcx_t* u, int peer, uint32_t got, uint32_t want) {
  char what[400];
  if (u->sigFormatter)
    u->sigFormatter(got, want, what, sizeof(what));
  else
    snprintf(what, sizeof(what), "signature 0x%05x while this rank called 0x%05x", got, want);
  return zppUcxFail(u, zppInvalidUsage,
                    "%s: rank %d: mismatched collectives: rank %d (host %s) called %s", u->comm->name,
                    u->rank, peer, zppUcxHostOf(u, peer), what);
}

zppResult_t zppUcxP2pMismatchError(zppUcx_t* u, const zppUcxReq_t* r) {
  uint32_t got = (uint32_t)(r->gotTag & ZPP_UCX_SIG_MASK);
  char what[400];
  if (u->sigFormatter)
    u->sigFormatter(got, r->wantSig, what, sizeof(what));
  else
    snprintf(what, sizeof(what), "signature 0x%05x while this rank called 0x%05x", got, r->wantSig);
  return zppUcxFail(u, zppInvalidUsage,
                    "%s: rank %d: point-to-point mismatch: rank %d (host %s) sent %zu bytes as %s, "
                    "into this rank's receive of %zu bytes",
                    u->comm->name, u->rank, r->peer, zppUcxHostOf(u, r->peer), r->gotBytes, what,
                    r->bytes);
}

/* Ranks in different collectives may never exchange a message this rank
 * waits for (each waits on a third rank): look at what arrived unasked
 * for. A message of this collective (same sequence number) with another
 * signature is proof of a mismatch. */
zppResult_t zppUcxProbeMismatch(zppUcx_t* u, const zppUcxReq_t* r) {
  /* Point-to-point numbers are per pair: no other rank's message tells. */
  if (r->space != ZPP_MSG_COLL) return zppSuccess;
  zppMsgId_t id = {r->seq, 0, 0, 0, ZPP_MSG_COLL};
  const uint64_t seqMask = TAG_CONTROL | TAG_SPACE_MASK | TAG_SRC_MASK | TAG_SEQ_MASK;
  for (int src = 0; src < u->nranks; src++) {
    if (src == u->rank) continue;
    ucp_tag_recv_info_t info;
    ucp_tag_message_h m = ucp_tag_probe_nb(u->worker, zppUcxMakeTag(src, &id), seqMask, 0, &info);
    uint32_t got = (uint32_t)(info.sender_tag & ZPP_UCX_SIG_MASK);
    if (m != NULL && got != r->wantSig) return zppUcxMismatchError(u, src, got, r->wantSig);
    uint64_t tag;
    size_t len;
    if (zppUcxShmProbe(u, src, zppUcxMakeTag(src, &id), seqMask, &tag, &len) &&
        (uint32_t)(tag & ZPP_UCX_SIG_MASK) != r->wantSig)
      return zppUcxMismatchError(u, src, (uint32_t)(tag & ZPP_UCX_SIG_MASK), r->wantSig);
  }
  return zppSuccess;
}

/* For a receive that timed out: a message of its tag waits on the other
 * path (rings or UCX), so the sender sent another length. Only a hint: once
 * the 8-bit step wraps, a later message of the same tag may also have come
 * first on the other path, so this is no proof while the wait goes on. The
 * ranks' signatures differ for different counts (found at once) unless
 * their hashes collide. */
void zppUcxOtherPathHint(zppUcx_t* u, const zppUcxReq_t* r, char* buf, size_t len) {
  buf[0] = '\0';
  if (!r->isRecv || r->peer < 0 || u->peers[r->peer].shmMax == 0) return;
  ucp_tag_recv_info_t info;
  uint64_t tag;
  size_t bytes = 0;
  int other = 0;
  if (r->viaShm) {
    other = ucp_tag_probe_nb(u->worker, r->tag, TAG_MATCH_MASK, 0, &info) != NULL;
    bytes = info.length;
  } else {
    other = zppUcxShmProbe(u, r->peer, r->tag, TAG_MATCH_MASK, &tag, &bytes);
  }
  if (other)
    snprintf(buf, len,
             "; a %zu-byte message of this step from that rank is here: the ranks "
             "probably called collectives with different counts",
             bytes);
}

/* Every message of a collective goes to a receive of the same collective
 * when all ranks made the same call; one still waiting after it completed
 * means they did not (e.g. two broadcast roots: the data paths need not
 * cross, and each side may finish "successfully"). */
zppResult_t zppUcxCheckLeftovers(zppUcx_t* u, uint32_t seq, uint32_t sig) {
  zppMsgId_t id = {seq, 0, 0, 0, ZPP_MSG_COLL};
  /* Point-to-point messages may wait for their receive across collectives. */
  const uint64_t seqMask = TAG_CONTROL | TAG_SPACE_MASK | TAG_SEQ_MASK;
  ucp_tag_recv_info_t info;
  uint64_t tag = 0;
  uint32_t lastSig = sig & ZPP_UCX_SIG_MASK;
  if (ucp_tag_probe_nb(u->worker, zppUcxMakeTag(0, &id), seqMask, 0, &info) != NULL) {
    tag = info.sender_tag;
  } else {
    /* A rank sends in collective order, so of what a ring peer sent and this
     * rank has not received, the oldest says it all: a message of this or an
     * earlier collective is a leftover. One look per peer, however far ahead
     * the peer is (a broadcast root may be thousands of calls ahead), and
     * only every LEFTOVER_RING_PERIOD calls (see there). */
    if (u->leftoverChecks++ % LEFTOVER_RING_PERIOD != 0) return zppSuccess;
    int found = 0;
    size_t len;
    for (int i = 0; i < u->nShmPeers && !found; i++)
      found = zppUcxShmProbe(u, u->shmPeers[i], 0, TAG_SPACE_MASK, &tag, &len) &&
              zppUcxTagBefore(tag, seq + 1);
    if (!found) return zppSuccess;
    /* The signature compares only with a message of the last collective. */
    if (((tag ^ zppUcxMakeTag(0, &id)) & TAG_SEQ_MASK) != 0) lastSig = UINT32_MAX;
  }
  return zppUcxLeftoverError(u, (int)((tag & TAG_SRC_MASK) >> TAG_SRC_SHIFT), tag, lastSig);
}

zppResult_t zppUcxLeftoverError(zppUcx_t* u, int src, uint64_t tag, uint32_t lastSig) {
  uint32_t got = (uint32_t)(tag & ZPP_UCX_SIG_MASK);
  uint32_t seq = (uint32_t)((tag & TAG_SEQ_MASK) >> TAG_SEQ_SHIFT);
  if (lastSig != UINT32_MAX && got != lastSig) return zppUcxMismatchError(u, src, got, lastSig);
  return zppUcxFail(
      u, zppInvalidUsage,
      "%s: rank %d: mismatched collectives: rank %d (host %s) sent a message in collective "
      "#%u that this rank did not expect (different broadcast roots?)",
      u->comm->name, u->rank, src, zppUcxHostOf(u, src), seq);
}
