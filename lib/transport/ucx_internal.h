/*
 * Internals of the UCX host transport shared by ucx.c (creation, endpoints,
 * transfers, waits) and ucx_teardown.c (errors, abort, teardown,
 * diagnostics). Not for other layers: they use ucx.h.
 */
#ifndef ZPP_TRANSPORT_UCX_INTERNAL_H_
#define ZPP_TRANSPORT_UCX_INTERNAL_H_

#include <stdatomic.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "busy_poll.h"
#include "ucx.h"

#define TAG_CONTROL (1ull << 63)
#define TAG_SRC_SHIFT 44
#define TAG_SRC_BITS 19
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
/* Longest single sleep on the event fd: bounds how late a timeout or an
 * abort that did not come through the wake fd is seen. */
#define MAX_SLEEP_MS 100
/* Bound on telling the other ranks about an error and on closing endpoints. */
#define NOTICE_WAIT_SEC 0.5
#define CLOSE_WAIT_SEC 2.0
/* After an error, how long to wait for cancelled transfers to let go. A send
 * to a dead peer over shared memory never does (no error handling there);
 * its request stays with the worker until destroy, harmlessly. */
#define QUIESCE_WAIT_SEC 0.3

typedef struct {
  uint32_t fullLen;  /* worker address, every transport */
  uint32_t netLen;   /* worker address, network transports only */
  int32_t pid;
  int32_t pad;
  uint64_t startTime; /* /proc/<pid>/stat field 22: tells a reused pid apart */
  uint64_t pidNs;     /* inode of /proc/self/ns/pid */
  char bootId[40];
  /* The CPUs this process may run on (sched_getaffinity), as a bitmap: the
   * union over the ranks of one machine says whether they outnumber its
   * cores. */
  uint64_t cpuMask[16];
} rankInfo_t;

typedef enum { EP_NONE = 0, EP_OK, EP_FAILED, EP_CLOSED } epState_t;

typedef struct {
  struct zppUcx* ucx;
  int rank;
  int sameNode;  /* same topology node: shared-memory endpoint */
  int watchPid;  /* same machine and pid namespace: liveness by pid */
  epState_t state;
  ucs_status_t failStatus;
  ucp_ep_h ep;
  rankInfo_t info;
  const ucp_address_t* addr; /* the address this rank connects with */
} peer_t;

struct zppUcxReq {
  struct zppUcxReq* next;
  struct zppUcxReq* prev;
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
  int haveTag; /* gotTag is valid */
};

typedef struct {
  int32_t rank;
  int32_t code;
  char reason[248];
} notice_t;

struct zppUcx {
  struct zppComm* comm;
  int rank;
  int nranks;
  int useShm;
  double spinSec;  /* ZPP_UCX_SPIN_US: yielding polls before sleeping */
  zppBusyPoll_t busy; /* polling without yielding (busy_poll.h) */
  int64_t connectAllMax; /* ZPP_UCX_CONNECT_ALL */
  int64_t busyPollUs;    /* ZPP_UCX_BUSY_POLL_US: -1 automatic */
  ucp_context_h ctx;
  ucp_worker_h worker;
  int efd;    /* the worker's event fd */
  int wakeFd; /* eventfd written by zppUcxAbort */
  _Atomic int aborted;
  int closing;
  char* addrBlob; /* every rank's addresses */
  peer_t* peers;
  zppUcxReq_t live;    /* list head of requests in flight */
  zppUcxReq_t* freeList;
  void** chunks;       /* request pool allocations */
  int nChunks;
  zppUcxReq_t* noticeRecv;
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

/* Monotonic seconds. */
double zppUcxNow(void);
/* Records the cause on the communicator (logged if it is the first error)
 * and returns code. */
zppResult_t zppUcxFail(zppUcx_t* u, zppResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char* zppUcxHostOf(const zppUcx_t* u, int rank);
/* Requests come from a pool and never move: UCX callbacks point at them. */
zppResult_t zppUcxReqAlloc(zppUcx_t* u, zppUcxReq_t** out);
void zppUcxReqRelease(zppUcx_t* u, zppUcxReq_t* r);
void zppUcxSendDone(void* request, ucs_status_t status, void* userData);
/* The endpoint to peer, made on first use (see ucx.h for which address). */
zppResult_t zppUcxGetEp(zppUcx_t* u, int peer, ucp_ep_h* out);
/* Progresses until no request but the control receive is live, or
 * limitSec passed; returns how many are still live. */
int zppUcxDrain(zppUcx_t* u, double limitSec);

#endif /* ZPP_TRANSPORT_UCX_INTERNAL_H_ */
