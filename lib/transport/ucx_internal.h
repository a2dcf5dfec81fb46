/*
 * Internals of the UCX host transport shared by its files: ucx.c (the hot
 * path: requests, sends, receives, waits), ucx_wireup.c (creation,
 * endpoints), ucx_diagnose.c (failure diagnosis), ucx_shm.c (small messages
 * through shared-memory rings), ucx_teardown.c (quiesce, abort, teardown;
 * endpoint transport names, byte counts). Not for other layers: they use
 * ucx.h.
 */
#ifndef ZPP_TRANSPORT_UCX_INTERNAL_H_
#define ZPP_TRANSPORT_UCX_INTERNAL_H_

#include <stdatomic.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "busy_poll.h"
#include "shm_ring.h"
#include "ucx.h"
#include "clock.h"

#define TAG_CONTROL (1ull << 63)
/* Control messages: the lowest bit tells an error notice (0) from a wake-up
 * of a rank asleep with shared-memory rings to watch (1). */
#define TAG_CONTROL_WAKE 1ull
#define TAG_SPACE_SHIFT 61
#define TAG_SPACE_MASK (3ull << TAG_SPACE_SHIFT)
#define TAG_SRC_SHIFT 44
#define TAG_SRC_BITS 17
#define TAG_SEQ_SHIFT 28
#define TAG_STEP_SHIFT 20
#define TAG_SRC_MASK (((1ull << TAG_SRC_BITS) - 1) << TAG_SRC_SHIFT)
#define TAG_SEQ_MASK (0xffffull << TAG_SEQ_SHIFT)
/* A receive matches control bit, source, sequence and step; not the
 * signature, which is compared after the match (see ucx.h). */
#define TAG_MATCH_MASK (~(uint64_t)ZPP_UCX_SIG_MASK)

/* How often a wait checks that the local peers it waits on still run. */
#define LIVENESS_PERIOD_SEC 0.2
/* Automatic ZPP_UCX_BUSY_POLL_US when every rank of the machine has a core:
 * long enough to cover a small message's round trip through shared memory
 * and a peer's per-call work, short enough not to matter to a compute thread
 * that shares the core. */
#define DEFAULT_BUSY_POLL_US 20
/* Progress calls between two looks at the clock and the requests while
 * polling without yielding. */
#define BUSY_POLLS_PER_CHECK 32
/* A wait first polls this many times before its bookkeeping, UCX only at
 * one poll in FIRST_POLLS_PER_UCX (the rings are where small messages
 * arrive; a UCX progress call costs twice a look at them). */
#define FIRST_POLLS 128
#define FIRST_POLLS_PER_UCX 8
/* Longest single sleep on the event fd: bounds how late a timeout or an
 * abort that did not come through the wake fd is seen. */
#define MAX_SLEEP_MS 100
/* Longest sleep while a send waits for a free ring slot, or when a wake-up
 * may be missed. */
#define QUEUED_SEND_SLEEP_MS 1
/* Largest ZPP_SHM_SMALL_BYTES: ring slots are this big. */
#define ZPP_SHM_SMALL_BYTES_MAX (1 << 20)
/* zppUcxCheckLeftovers looks into the rings at one call in this many (it
 * always asks UCX): a look touches the slot the peer is writing its next
 * message into, which cost about 10% of a 2-rank 64-byte all-gather. A
 * leftover in a ring is also found whenever a receive from that peer meets
 * it (ucx_shm.c), which costs nothing. */
#define LEFTOVER_RING_PERIOD 16
/* Longest a wake-up message is pushed before the sender goes on. */
#define WAKE_SEND_WAIT_SEC 0.002
/* Bound on telling the other ranks about an error and on closing endpoints. */
#define NOTICE_WAIT_SEC 0.5
#define CLOSE_WAIT_SEC 2.0
/* The same at the destroy of a broken communicator, before dropping. */
#define BROKEN_CLOSE_WAIT_SEC 0.2
/* After an error, how long to wait for cancelled transfers to let go. A send
 * to a dead peer over shared memory never does (no error handling there);
 * its request stays with the worker until destroy, harmlessly. */
#define QUIESCE_WAIT_SEC 0.3

typedef struct {
  uint32_t fullLen; /* worker address, every transport */
  uint32_t netLen;  /* worker address, network transports only */
  int32_t pid;
  int32_t shmMax;    /* ZPP_SHM_SMALL_BYTES; 0: no inbox (shmName empty) */
  int32_t asymFence; /* zppShmAsymFenceRegister() worked */
  int32_t pad;
  uint64_t startTime; /* /proc/<pid>/stat field 22: tells a reused pid apart */
  uint64_t pidNs;     /* inode of /proc/self/ns/pid */
  char bootId[40];
  /* The CPUs this process may run on (sched_getaffinity), as a bitmap: the
   * union over the ranks of one machine says whether they outnumber its
   * cores. */
  uint64_t cpuMask[16];
  char shmName[ZPP_SHM_NAME_LEN]; /* this rank's inbox (shm_ring.h) */
} rankInfo_t;

typedef enum { EP_NONE = 0, EP_OK, EP_FAILED, EP_CLOSED } epState_t;

typedef struct {
  struct zppUcx* ucx;
  int rank;
  int sameNode; /* same topology node: shared-memory endpoint */
  int watchPid; /* same machine and pid namespace: liveness by pid */
  epState_t state;
  ucs_status_t failStatus;
  int left; /* EP_FAILED by its farewell: it aborted its communicator */
  ucp_ep_h ep;
  rankInfo_t info;
  const ucp_address_t* addr; /* the address this rank connects with */
  /* Small messages through shared-memory rings (ucx_shm.c), when shmMax > 0:
   * both ways up to shmMax bytes, the same on both sides. */
  size_t shmMax;
  int shmFence;             /* fence before looking whether it sleeps */
  zppShmInbox_t shmBox;     /* the peer's inbox, mapped */
  zppShmRing_t shmIn;       /* its ring in this rank's inbox */
  zppShmRing_t shmOut;      /* this rank's ring in its inbox */
  struct zppP2pReq* posted; /* receives waiting for a message, in post order */
  struct zppP2pReq* postedTail;
  struct shmMsg* unexpected; /* messages taken off the ring before their receive */
  struct shmMsg* unexpectedTail;
  struct zppP2pReq* queued; /* sends waiting for a free slot, in send order */
  struct zppP2pReq* queuedTail;
} peer_t;

struct zppP2pReq {
  struct zppP2pReq* next;
  struct zppP2pReq* prev;
  void* ucpReq; /* UCX's request while in flight */
  int peer;
  int isRecv;
  int done;
  ucs_status_t status;
  size_t bytes;
  size_t gotBytes;
  uint64_t gotTag;
  uint32_t seq;
  uint32_t wantSig;
  int space;   /* zppMsgId_t's: collectives' checks skip the other spaces */
  int haveTag; /* gotTag is valid */
  /* Through a shared-memory ring (ucx_shm.c) instead of UCX. */
  int viaShm;
  void* buf;           /* receive buffer */
  const void* sendBuf; /* a queued send's data */
  uint64_t tag;
  struct zppP2pReq* shmNext; /* in the peer's posted or queued list */
};

/* An error notice: rank `rank` failed with `code` for `reason`, and the
 * communicator is broken. A farewell (left = 1) only says that rank aborted
 * its healthy communicator: the calls that need it fail, the others go on. */
typedef struct {
  int32_t rank;
  int32_t code;
  int32_t left;
  char reason[244];
} notice_t;

struct zppUcx {
  struct zppComm* comm;
  int rank;
  int nranks;
  int useShm;
  double spinSec;        /* ZPP_UCX_SPIN_US: yielding polls before sleeping */
  zppBusyPoll_t busy;    /* polling without yielding (busy_poll.h) */
  int64_t connectAllMax; /* ZPP_UCX_CONNECT_ALL */
  int64_t busyPollUs;    /* ZPP_UCX_BUSY_POLL_US: -1 automatic */
  int ranksShareCores;   /* some machine has more ranks than CPUs */
  ucp_context_h ctx;
  ucp_worker_h worker;
  int efd;    /* the worker's event fd */
  int wakeFd; /* eventfd written by zppUcxAbort */
  _Atomic int aborted;
  int closing;
  /* A quiesce left a send queued in UCX (to a dead peer): UCX 1.13 would
   * pack it from the caller's buffer, long freed, at the next progress of
   * the worker, and no close or drain takes it out (a segfault in
   * uct_mm_ep_process_pending, test_comm_lost_node). So the worker is never
   * progressed again, and at destroy it is kept, untouched, until the
   * process exits (zppUcxDestroy). */
  int abandoned;
  char* addrBlob; /* every rank's addresses */
  peer_t* peers;
  zppUcxReq_t live; /* list head of requests in flight */
  zppUcxReq_t* freeList;
  void** chunks; /* request pool allocations */
  int nChunks;
  zppUcxReq_t* noticeRecv;
  zppUcxReq_t* wakeRecv; /* takes wake-ups (TAG_CONTROL_WAKE) off the worker */
  char wakeByte;
  int64_t shmMaxParam;      /* ZPP_SHM_SMALL_BYTES */
  unsigned leftoverChecks;  /* calls of zppUcxCheckLeftovers */
  double lastProbeLiveness; /* zppUcxProbe's last look at its peer's process */
  zppShmInbox_t shmInbox;   /* this rank's (shm_ring.h) */
  int shmAsymFence;         /* sleeps with membarrier (zppShmAsymFenceRegister) */
  int* shmPeers;            /* ranks with rings to and from this one */
  int nShmPeers;
  notice_t noticeIn;
  notice_t noticeOut;
  int noticeGot;
  int noticeSent;
  zppSigFormatter_t sigFormatter;
  /* Bytes sent per operation kind, [0] inside the node, [1] across nodes.
   * One writer (whoever runs the operations), read by others; a reset moves
   * bytesBase instead of writing bytes, so the writer needs no locked add. */
  _Atomic uint64_t bytes[zppNumOpKinds][2];
  _Atomic uint64_t bytesBase[zppNumOpKinds][2];
};

/* ---- the hot path (ucx.c) ----------------------------------------------- */

/* The tag of a message from src (see ucx.h for the layout). */
static inline uint64_t zppUcxMakeTag(int src, const zppMsgId_t* id) {
  return ((uint64_t)(id->space & 3) << TAG_SPACE_SHIFT) | ((uint64_t)(uint32_t)src << TAG_SRC_SHIFT) |
         ((uint64_t)(id->seq & 0xffffu) << TAG_SEQ_SHIFT) |
         ((uint64_t)(id->step & 0xffu) << TAG_STEP_SHIFT) | (uint64_t)(id->sig & ZPP_UCX_SIG_MASK);
}
/* Requests come from a pool and never move: UCX callbacks point at them. */
zppResult_t zppUcxReqAlloc(zppUcx_t* u, zppUcxReq_t** out);
void zppUcxReqRelease(zppUcx_t* u, zppUcxReq_t* r);
/* ucp_tag_send_nbx with r as the request UCX completes (done, status set,
 * UCX's request freed): NULL when done inline, else UCX's handle or error. */
void* zppUcxTagSend(ucp_ep_h ep, const void* buf, size_t bytes, uint64_t tag, zppUcxReq_t* r);
/* The error-notice or the wake-up receive: posted for the communicator's
 * life, never waited for. */
int zppUcxIsControlRecv(const zppUcx_t* u, const zppUcxReq_t* r);
/* Posts the error-notice receive (into noticeIn), at creation. */
zppResult_t zppUcxPostNoticeRecv(zppUcx_t* u);
/* Posts the wake-up receive, or again once it took a wake-up. */
zppResult_t zppUcxRepostWakeRecv(zppUcx_t* u);

/* ---- creation (ucx_wireup.c) -------------------------------------------- */

/* The endpoint to peer, made on first use (see ucx.h for which address). */
zppResult_t zppUcxGetEp(zppUcx_t* u, int peer, ucp_ep_h* out);

/* ---- failure diagnosis (ucx_diagnose.c) ---------------------------------- */

/* Records the cause on the communicator (logged if it is the first error)
 * and returns code. */
zppResult_t zppUcxFail(zppUcx_t* u, zppResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char* zppUcxHostOf(const zppUcx_t* u, int rank);
/* This process's identity (pid, start time, pid namespace, boot id) and its
 * CPUs, for the exchange at creation. */
void zppUcxFillRankInfo(rankInfo_t* info);
/* 1 while the peer's process runs (or cannot be watched). */
int zppUcxPeerAlive(const peer_t* p);
/* UCX's error callback of endpoints across nodes (arg: the peer_t). */
void zppUcxEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
/* The error another rank announced, once its notice arrived; a farewell
 * marks its rank failed (peer_t.left) and waits for the next notice. */
zppResult_t zppUcxCheckNotice(zppUcx_t* u);

/* The communicator's error for a call that needs `peer`, failed (EP_FAILED). */
zppResult_t zppUcxPeerFailedError(zppUcx_t* u, int peer);
/* Records a signature mismatch with peer (got: its, want: this rank's). */
zppResult_t zppUcxMismatchError(zppUcx_t* u, int peer, uint32_t got, uint32_t want);
/* The same for a point-to-point receive r, with both sides' byte counts. */
zppResult_t zppUcxP2pMismatchError(zppUcx_t* u, const zppUcxReq_t* r);
/* While r waits: a message of r's collective with another signature,
 * arrived unasked for, is proof of a mismatch. */
zppResult_t zppUcxProbeMismatch(zppUcx_t* u, const zppUcxReq_t* r);
/* For a receive that timed out: a hint for the error message (empty if
 * none) when a message of its tag waits on the other path. */
void zppUcxOtherPathHint(zppUcx_t* u, const zppUcxReq_t* r, char* buf, size_t len);

/* ---- teardown (ucx_teardown.c) ------------------------------------------ */

/* Progresses until no request but the control receives is live, or
 * limitSec passed; returns how many are still live. */
int zppUcxDrain(zppUcx_t* u, double limitSec);

/* ---- small messages through shared-memory rings (ucx_shm.c) ------------- */

/* Before the first bootstrap exchange: makes this rank's inbox (unless
 * ZPP_SHM_SMALL_BYTES or ZPP_UCX_SHM is 0, or it has no local peer) and
 * writes its name into mine. A failure only turns the rings off. */
void zppUcxShmCreateInbox(zppUcx_t* u, rankInfo_t* mine);
/* After it (collective): maps the inboxes of this node's ranks and agrees
 * with them which pairs use rings (peer_t.shmMax). */
zppResult_t zppUcxShmConnect(zppUcx_t* u, const rankInfo_t* infos);
/* Removes this rank's inbox's name (zppUcxShmConnect does once every rank
 * mapped it; again at destroy, first, for a creation that failed before). */
void zppUcxShmUnlink(zppUcx_t* u);
void zppUcxShmDestroy(zppUcx_t* u);

/* Whether a message of this size to or from peer goes through the rings. */
static inline int zppUcxShmCarries(const zppUcx_t* u, int peer, size_t bytes) {
  size_t max = u->peers[peer].shmMax;
  return max != 0 && bytes <= max;
}
/* Sends: done at once (*req NULL) unless the ring is full, then queued in
 * a new request. */
zppResult_t zppUcxShmSend(zppUcx_t* u, int peer, const void* buf, size_t bytes, uint64_t tag,
                          zppUcxReq_t** req);
/* Receives into r (allocated by the caller): done at once if the message
 * is already here, else posted. */
void zppUcxShmRecv(zppUcx_t* u, int peer, void* buf, size_t bytes, uint64_t tag, zppUcxReq_t* r);
/* Takes what the rings hold for posted receives (see ucx_shm.c) and pushes
 * queued sends; returns how many messages moved. */
int zppUcxShmProgress(zppUcx_t* u);
/* Only pushes queued sends. */
void zppUcxShmPushQueued(zppUcx_t* u);
/* The oldest message from src, kept as unexpected or still in its ring
 * (left there), whose tag matches tag under mask: 1 and its tag and length,
 * else 0. Mask 0: the oldest message not received yet. */
int zppUcxShmProbe(const zppUcx_t* u, int src, uint64_t tag, uint64_t mask, uint64_t* gotTag,
                   size_t* len);
/* Whether a message's tag carries a collective sequence number before seq
 * (16 bits, modular): a message every receive of that collective passed. */
static inline int zppUcxTagBefore(uint64_t tag, uint32_t seq) {
  if (tag & TAG_SPACE_MASK) return 0; /* point-to-point: no collective's */
  uint32_t d = (seq - (uint32_t)((tag & TAG_SEQ_MASK) >> TAG_SEQ_SHIFT)) & 0xffffu;
  return d != 0 && d < 0x8000u;
}
/* Records the error for a leftover message of an earlier collective from
 * src (tag is the message's) and returns it. */
zppResult_t zppUcxLeftoverError(zppUcx_t* u, int src, uint64_t tag, uint32_t lastSig);
/* Before and after an idle sleep: see zppShmInboxSetSleeping. Begin returns
 * 0 (and leaves the rank awake) when a ring already holds a message; it sets
 * *shortNap when a sender's wake-up may be missed (membarrier failed), so
 * that the sleep is a short nap. */
int zppUcxShmSleepBegin(zppUcx_t* u, int* shortNap);
void zppUcxShmSleepEnd(zppUcx_t* u);
/* Whether a send waits for a slot: the peer frees slots without waking
 * this rank, so such a wait sleeps in short naps only. */
int zppUcxShmSendsQueued(const zppUcx_t* u);
/* After an error: every posted receive and queued send ends cancelled, so
 * no user buffer is touched afterwards. */
void zppUcxShmCancel(zppUcx_t* u);

#endif /* ZPP_TRANSPORT_UCX_INTERNAL_H_ */
