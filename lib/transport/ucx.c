/* UCX host transport; see ucx.h for the design. */
#include "ucx.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "check.h"
#include "params.h"
#include "lib/comm.h"
#include "lib/fault.h"

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

static void fillRankInfo(rankInfo_t* info) {
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

/* The ranks on rank r's machine (same kernel boot id, whatever the emulated
 * node), and the CPUs in the union of their affinity masks; marks those
 * ranks in seen when given. */
static void machineLoad(const rankInfo_t* infos, int nranks, int r, int* ranks, int* cpus,
                        unsigned char* seen) {
  const rankInfo_t* mine = &infos[r];
  uint64_t mask[16] = {0};
  *ranks = *cpus = 0;
  for (int q = 0; q < nranks; q++) {
    if (mine->bootId[0] == '\0' ? q != r : strcmp(infos[q].bootId, mine->bootId) != 0) continue;
    (*ranks)++;
    if (seen) seen[q] = 1;
    for (int w = 0; w < 16; w++) mask[w] |= infos[q].cpuMask[w];
  }
  for (int w = 0; w < 16; w++) *cpus += __builtin_popcountll(mask[w]);
}

/* The most an idle wait polls without yielding. Polling finds a message a
 * few hundred ns sooner than a sched_yield round trip, but only while the
 * rank it waits for runs on another core: measured here, 4 ranks on 2 cores
 * ran small all-gathers 2x slower with even 5 us of it, because the poller
 * holds the core the rank it waits for needs. Ranks that outnumber the
 * machine's cores never poll so; others still may share a core (other load,
 * the scheduler pulling two ranks that wake each other together), which
 * zppBusyPollUpdate finds out wait by wait. */
static void chooseBusyPoll(zppUcx_t* u, const rankInfo_t* infos) {
  int ranksHere = 0, cpusHere = 0;
  machineLoad(infos, u->nranks, u->rank, &ranksHere, &cpusHere, NULL);
  /* The same on every rank (every rank has every info): algorithms may be
   * chosen by it. One look per machine, not per rank: n * machines string
   * compares. Without memory for the marks, every rank's machine. */
  unsigned char* seen = calloc((size_t)u->nranks, 1);
  for (int r = 0; r < u->nranks && !u->ranksShareCores; r++) {
    if (seen && seen[r]) continue;
    int ranks, cpus;
    machineLoad(infos, u->nranks, r, &ranks, &cpus, seen);
    u->ranksShareCores = ranks > cpus;
  }
  free(seen);
  int64_t us = u->busyPollUs;
  if (us < 0) us = ranksHere <= cpusHere ? DEFAULT_BUSY_POLL_US : 0;
  zppBusyPollInit(&u->busy, (double)us * 1e-6);
  ZPP_INFO(NET,
           "%s: rank %d: %d ranks on %d cores of this machine: idle waits poll up to %lld us "
           "without yielding%s",
           u->comm->name, u->rank, ranksHere, cpusHere, (long long)us,
           u->busyPollUs < 0 ? "" : " (ZPP_UCX_BUSY_POLL_US)");
}

/* 1 while the peer's process runs (or cannot be watched). */
static int peerAlive(const peer_t* p) {
  if (!p->watchPid) return 1;
  char state = '?';
  uint64_t start = 0;
  if (!procStat(p->info.pid, &state, &start)) return 0;
  if (state == 'Z' || state == 'X') return 0;
  return start == p->info.startTime;
}

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

/* ---- endpoints ---------------------------------------------------------- */

static void epError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  peer_t* p = arg;
  zppUcx_t* u = p->ucx;
  if (p->state == EP_FAILED || p->state == EP_CLOSED) return;
  p->state = EP_FAILED;
  p->failStatus = status;
  if (u->closing) return; /* peers closing their side at destroy */
  zppUcxFail(u, zppRemoteError, "%s: rank %d lost rank %d (host %s): %s", u->comm->name, u->rank,
           p->rank, zppUcxHostOf(u, p->rank), ucs_status_string(status));
}

zppResult_t zppUcxGetEp(zppUcx_t* u, int peer, ucp_ep_h* out) {
  peer_t* p = &u->peers[peer];
  if (p->state == EP_OK) {
    *out = p->ep;
    return zppSuccess;
  }
  if (p->state != EP_NONE)
    return zppUcxFail(u, zppRemoteError, "%s: rank %d cannot reach rank %d (host %s): %s",
                    u->comm->name, u->rank, peer, zppUcxHostOf(u, peer),
                    p->state == EP_FAILED ? ucs_status_string(p->failStatus) : "endpoint closed");
  ucp_ep_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = p->addr;
  if (p->sameNode) {
    /* Shared memory has no peer-failure handler in UCX 1.13: asking for one
     * would silently move local traffic to tcp over loopback. */
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  } else {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = epError;
    params.err_handler.arg = p;
  }
  ucs_status_t st = ucp_ep_create(u->worker, &params, &p->ep);
  if (st != UCS_OK) {
    p->state = EP_FAILED;
    p->failStatus = st;
    return zppUcxFail(u, zppRemoteError, "%s: rank %d cannot create an endpoint to rank %d (host %s): %s",
                    u->comm->name, u->rank, peer, zppUcxHostOf(u, peer), ucs_status_string(st));
  }
  p->state = EP_OK;
  ZPP_DBG(NET, "rank %d: endpoint to rank %d (%s address)", u->rank, peer,
          p->sameNode ? "full" : "network-only");
  *out = p->ep;
  return zppSuccess;
}

/* ---- creation ----------------------------------------------------------- */

static zppResult_t readParams(zppUcx_t* u) {
  int64_t spinUs = 0;
  ZPPCHECK(zppEnvGetInt("ZPP_UCX_SPIN_US", &spinUs));
  ZPPCHECK(zppEnvGetInt("ZPP_UCX_BUSY_POLL_US", &u->busyPollUs));
  ZPPCHECK(zppEnvGetInt("ZPP_UCX_CONNECT_ALL", &u->connectAllMax));
  ZPPCHECK(zppEnvGetBool("ZPP_UCX_SHM", &u->useShm));
  ZPPCHECK(zppEnvGetInt("ZPP_SHM_SMALL_BYTES", &u->shmMaxParam));
  if (u->shmMaxParam < 0 || u->shmMaxParam > ZPP_SHM_SMALL_BYTES_MAX)
    ZPP_FAIL(zppInvalidArgument, NET, "ZPP_SHM_SMALL_BYTES=%lld: must be 0 (off) to %d",
             (long long)u->shmMaxParam, ZPP_SHM_SMALL_BYTES_MAX);
  u->spinSec = spinUs < 0 ? 0 : (double)spinUs * 1e-6;
  return zppSuccess;
}

static zppResult_t openWorker(zppUcx_t* u) {
  zppResult_t res = zppSuccess;
  ucp_config_t* config = NULL;
  ucs_status_t st = ucp_config_read(NULL, NULL, &config);
  if (st != UCS_OK) ZPP_FAIL(zppSystemError, NET, "ucp_config_read: %s", ucs_status_string(st));
  const char* devices = zppEnvGetString("ZPP_UCX_NET_DEVICES");
  if (devices[0] != '\0') {
    st = ucp_config_modify(config, "NET_DEVICES", devices);
    if (st != UCS_OK)
      ZPP_FAILGOTO(zppInvalidArgument, res, out, NET, "ZPP_UCX_NET_DEVICES='%s': %s", devices,
                   ucs_status_string(st));
  }
  int keepRndv = 0;
  ZPPCHECKGOTO(zppEnvGetBool("ZPP_UCX_RNDV", &keepRndv), res, out);
  if (!keepRndv) {
    /* Rendezvous inside a node reads the sender's memory with cma, and UCX
     * 1.13 treats a failed cma read on an endpoint without peer-failure
     * handling (all shared-memory endpoints: sysv/posix have none) as fatal:
     * a rank killed mid-transfer aborted a neighbour in 1 trial of 5. Eager
     * messages over shared memory never fail, so a dead local peer is left
     * to the pid watch. */
    st = ucp_config_modify(config, "RNDV_THRESH", "inf");
    if (st != UCS_OK)
      ZPP_FAILGOTO(zppSystemError, res, out, NET, "UCX: cannot turn rendezvous off: %s",
                   ucs_status_string(st));
  }
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = (size_t)u->nranks;
  st = ucp_init(&params, config, &u->ctx);
  if (st != UCS_OK)
    ZPP_FAILGOTO(zppSystemError, res, out, NET, "ucp_init: %s", ucs_status_string(st));

  ucp_worker_params_t wparams;
  memset(&wparams, 0, sizeof(wparams));
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  /* One thread at a time (the executor), but not always the same one:
   * creation and destruction happen on the caller's thread. */
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucp_worker_create(u->ctx, &wparams, &u->worker);
  if (st != UCS_OK)
    ZPP_FAILGOTO(zppSystemError, res, out, NET, "ucp_worker_create: %s", ucs_status_string(st));
  st = ucp_worker_get_efd(u->worker, &u->efd);
  if (st != UCS_OK)
    ZPP_FAILGOTO(zppSystemError, res, out, NET, "ucp_worker_get_efd: %s", ucs_status_string(st));
out:
  ucp_config_release(config);
  return res;
}

static zppResult_t queryAddress(zppUcx_t* u, unsigned flags, ucp_address_t** addr, size_t* len) {
  ucp_worker_attr_t attr;
  memset(&attr, 0, sizeof(attr));
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
  attr.address_flags = flags;
  ucs_status_t st = ucp_worker_query(u->worker, &attr);
  if (st != UCS_OK)
    ZPP_FAIL(zppSystemError, NET, "ucp_worker_query(address flags %u): %s", flags,
             ucs_status_string(st));
  *addr = attr.address;
  *len = attr.address_length;
  return zppSuccess;
}

/* Two bootstrap all-gathers: the fixed-size identity records, then the
 * addresses in slots as large as the largest. */
static zppResult_t exchangeAddresses(zppUcx_t* u) {
  zppResult_t res = zppSuccess;
  ucp_address_t *full = NULL, *net = NULL;
  size_t fullLen = 0, netLen = 0;
  rankInfo_t* infos = NULL;
  ZPPCHECKGOTO(queryAddress(u, 0, &full, &fullLen), res, out);
  ZPPCHECKGOTO(queryAddress(u, UCP_WORKER_ADDRESS_FLAG_NET_ONLY, &net, &netLen), res, out);

  ZPP_CALLOCGOTO(infos, (size_t)u->nranks, res, out);
  rankInfo_t* mine = &infos[u->rank];
  fillRankInfo(mine);
  mine->fullLen = (uint32_t)fullLen;
  mine->netLen = (uint32_t)netLen;
  zppUcxShmCreateInbox(u, mine);
  ZPPCHECKGOTO(zppBootstrapAllGather(u->comm->bootstrap, infos, sizeof(rankInfo_t)), res, out);
  chooseBusyPoll(u, infos);

  size_t slot = 0;
  for (int r = 0; r < u->nranks; r++) {
    size_t need = (size_t)infos[r].fullLen + infos[r].netLen;
    if (need > slot) slot = need;
  }
  ZPP_CALLOCGOTO(u->addrBlob, slot * (size_t)u->nranks, res, out);
  memcpy(u->addrBlob + slot * (size_t)u->rank, full, fullLen);
  memcpy(u->addrBlob + slot * (size_t)u->rank + fullLen, net, netLen);
  ZPPCHECKGOTO(zppBootstrapAllGather(u->comm->bootstrap, u->addrBlob, slot), res, out);

  const zppTopo_t* topo = u->comm->topo;
  for (int r = 0; r < u->nranks; r++) {
    peer_t* p = &u->peers[r];
    p->ucx = u;
    p->rank = r;
    p->info = infos[r];
    p->sameNode = u->useShm && topo->nodeOf[r] == topo->nodeOf[u->rank];
    char* base = u->addrBlob + slot * (size_t)r;
    p->addr = (const ucp_address_t*)(p->sameNode ? base : base + infos[r].fullLen);
    p->watchPid = r != u->rank && infos[r].pidNs == mine->pidNs && mine->pidNs != 0 &&
                  strcmp(infos[r].bootId, mine->bootId) == 0 && mine->bootId[0] != '\0';
  }
  ZPPCHECKGOTO(zppUcxShmConnect(u, infos), res, out);
out:
  if (full) ucp_worker_release_address(u->worker, full);
  if (net) ucp_worker_release_address(u->worker, net);
  free(infos);
  return res;
}

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
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  prm.cb.recv = recvDone;
  prm.user_data = r;
  void* h = ucp_tag_recv_nbx(u->worker, buf, bytes, TAG_CONTROL | kind,
                             TAG_CONTROL | TAG_CONTROL_WAKE, &prm);
  if (UCS_PTR_IS_ERR(h)) {
    zppUcxReqRelease(u, r);
    *slot = NULL;
    ZPP_FAIL(zppSystemError, NET, "posting a control receive: %s",
             ucs_status_string(UCS_PTR_STATUS(h)));
  }
  r->ucpReq = h;
  return zppSuccess;
}

static zppResult_t postNoticeRecv(zppUcx_t* u) {
  return postControlRecv(u, 0, &u->noticeIn, sizeof(notice_t), &u->noticeRecv);
}

/* Wake-ups only make the worker's event fd fire; the receive takes them off
 * the worker and is posted again. */
static zppResult_t repostWakeRecv(zppUcx_t* u) {
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

/* ---- the end of creation: every endpoint wired up on every rank ---------- */

/* Between progress calls while waiting on other ranks (milliseconds): leaves
 * the core to them. */
static void pauseBriefly(void) {
  struct timespec ts = {0, 100000};
  nanosleep(&ts, NULL);
}

/* Until every endpoint's flush completed. UCX completes a flush only once the
 * endpoint is wired up: its lanes connected (tcp connects some of them during
 * progress, after ucp_ep_create returned) and the wireup replies it owes sent. */
static zppResult_t flushEps(zppUcx_t* u, double deadline) {
  zppResult_t res = zppSuccess;
  void** reqs = NULL;
  ZPP_CALLOCGOTO(reqs, (size_t)u->nranks, res, out);
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof(prm));
  for (int p = 0; p < u->nranks; p++) {
    if (u->peers[p].state != EP_OK) continue;
    void* h = ucp_ep_flush_nbx(u->peers[p].ep, &prm);
    if (UCS_PTR_IS_ERR(h))
      ZPP_FAILGOTO(zppRemoteError, res, out, NET, "%s: rank %d cannot connect to rank %d (host %s): %s",
                   u->comm->name, u->rank, p, zppUcxHostOf(u, p), ucs_status_string(UCS_PTR_STATUS(h)));
    reqs[p] = h;
  }
  double nextWatch = zppClockNow() + 0.2;
  for (int left = 1; left;) {
    while (ucp_worker_progress(u->worker)) {
    }
    int watch = zppClockNow() > nextWatch;
    if (watch) nextWatch = zppClockNow() + 0.2;
    left = 0;
    for (int p = 0; p < u->nranks; p++) {
      if (reqs[p] == NULL) continue;
      ucs_status_t st = ucp_request_check_status(reqs[p]);
      if (st == UCS_INPROGRESS) {
        /* Shared memory reports no dead peer: watch its process. */
        if (watch && !peerAlive(&u->peers[p]))
          ZPP_FAILGOTO(zppRemoteError, res, out, NET, "%s: rank %d: rank %d (host %s) died while connecting",
                       u->comm->name, u->rank, p, zppUcxHostOf(u, p));
        left++;
        continue;
      }
      ucp_request_free(reqs[p]);
      reqs[p] = NULL;
      if (st != UCS_OK)
        ZPP_FAILGOTO(zppRemoteError, res, out, NET, "%s: rank %d cannot connect to rank %d (host %s): %s",
                     u->comm->name, u->rank, p, zppUcxHostOf(u, p), ucs_status_string(st));
    }
    if (left && zppClockNow() > deadline)
      ZPP_FAILGOTO(zppRemoteError, res, out, NET,
                   "%s: rank %d: %d endpoints not connected after %.0f s", u->comm->name, u->rank,
                   left, u->comm->timeoutSec);
    if (left) pauseBriefly();
  }
out:
  if (reqs) {
    /* Left over after an error: UCX releases them when they end. */
    for (int p = 0; p < u->nranks; p++)
      if (reqs[p]) ucp_request_free(reqs[p]);
    free(reqs);
  }
  return res;
}

typedef struct {
  ucp_worker_h worker;
  atomic_int stop;
} progressJob_t;

static void* progressThread(void* arg) {
  progressJob_t* job = arg;
  while (!atomic_load(&job->stop))
    if (ucp_worker_progress(job->worker) == 0) pauseBriefly();
  return NULL;
}

/* A bootstrap barrier while a helper thread keeps progressing the worker (the
 * only thread touching it meanwhile, as UCS_THREAD_MODE_SERIALIZED asks): a
 * peer still wiring up its endpoint to this rank needs this rank's replies.
 * The barrier runs on the caller's thread, which keeps its error message. */
static zppResult_t progressingBarrier(zppUcx_t* u) {
  progressJob_t job = {u->worker, 0};
  pthread_t th;
  int started = pthread_create(&th, NULL, progressThread, &job) == 0;
  zppResult_t res = zppBootstrapBarrier(u->comm->bootstrap);
  if (started) {
    atomic_store(&job.stop, 1);
    pthread_join(th, NULL);
  }
  /* Wireup requests the others sent before they reached the barrier may have
   * arrived since the last progress: answer them now. */
  while (ucp_worker_progress(u->worker)) {
  }
  return res;
}

zppResult_t zppUcxCreate(struct zppComm* comm, zppUcx_t** out) {
  zppResult_t res = zppSuccess;
  zppUcx_t* u = NULL;
  ZPP_CALLOCGOTO(u, 1, res, fail);
  u->comm = comm;
  u->rank = comm->rank;
  u->nranks = comm->nranks;
  u->efd = -1;
  u->live.next = u->live.prev = &u->live;
  if (u->nranks > (1 << TAG_SRC_BITS))
    ZPP_FAILGOTO(zppInvalidArgument, res, fail, NET, "the UCX transport supports at most %d ranks",
                 1 << TAG_SRC_BITS);
  u->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (u->wakeFd < 0)
    ZPP_FAILGOTO(zppSystemError, res, fail, NET, "eventfd: %s", strerror(errno));
  ZPPCHECKGOTO(readParams(u), res, fail);
  ZPP_CALLOCGOTO(u->peers, (size_t)u->nranks, res, fail);
  ZPPCHECKGOTO(openWorker(u), res, fail);
  ZPPCHECKGOTO(exchangeAddresses(u), res, fail);
  ZPPCHECKGOTO(postNoticeRecv(u), res, fail);
  /* Every endpoint now, while every node is known to be reachable: UCX
   * 1.13 connects tcp endpoints with a blocking connect, so one made later
   * to a node whose link went down would hang for the kernel's SYN retries
   * (about two minutes), far past ZPP_TIMEOUT. */
  if (u->nranks <= u->connectAllMax) {
    for (int p = 0; p < u->nranks; p++) {
      ucp_ep_h ep;
      if (p != u->rank) ZPPCHECKGOTO(zppUcxGetEp(u, p, &ep), res, fail);
    }
  }
  /* No rank leaves creation before every rank's endpoints are wired up. One
   * that went ahead could fail its first collective (a mismatch is found
   * within a millisecond) and destroy its worker, a broken communicator
   * skipping the barrier at destroy, while a slower peer still connects to
   * it: UCX marks its System V segments removed as soon as it makes them, so
   * they vanish with the owner's detach and the peer's shmat fails (EINVAL,
   * "Shared memory error"); its tcp port is closed ("Connection refused",
   * "Endpoint timeout"); and UCX 1.13 aborts on an assertion when a worker is
   * destroyed with a wireup reply still pending. */
  ZPPCHECKGOTO(flushEps(u, zppClockNow() + comm->timeoutSec), res, fail);
  ZPPCHECKGOTO(progressingBarrier(u), res, fail);
  if (u->nShmPeers > 0) ZPPCHECKGOTO(repostWakeRecv(u), res, fail);
  ZPP_INFO(NET, "%s: UCX %s ready, rank %d of %d, shared memory inside the node %s",
           comm->name, ucp_get_version_string(), u->rank, u->nranks, u->useShm ? "on" : "off");
  *out = u;
  return zppSuccess;
fail:
  zppUcxDestroy(u);
  return res;
}

/* ---- sends, receives, waits -------------------------------------------- */

static uint64_t makeTag(int src, const zppMsgId_t* id) {
  return ((uint64_t)(uint32_t)src << TAG_SRC_SHIFT) | ((uint64_t)(id->seq & 0xffffu) << TAG_SEQ_SHIFT) |
         ((uint64_t)(id->step & 0xffu) << TAG_STEP_SHIFT) | (uint64_t)(id->sig & ZPP_UCX_SIG_MASK);
}

zppResult_t zppUcxIsend(zppUcx_t* u, int peer, const void* buf, size_t bytes, const zppMsgId_t* id,
                        zppUcxReq_t** req) {
  ucp_ep_h ep;
  ZPPCHECK(zppUcxGetEp(u, peer, &ep));
  /* FAULT INJECTION (ZPP_FAULT, lib/fault.h; off by default): the one place
   * where a rank is made slow, corrupt, hung or dead on purpose. */
  zppFaultOnSend(u->rank, buf, bytes, id->seq);
  zppUcxReq_t* r = NULL;
  if (zppUcxShmCarries(u, peer, bytes)) {
    ZPPCHECK(zppUcxShmSend(u, peer, buf, bytes, makeTag(u->rank, id), &r));
  } else {
    ZPPCHECK(zppUcxReqAlloc(u, &r));
    r->peer = peer;
    r->bytes = bytes;
    void* h = zppUcxTagSend(ep, buf, bytes, makeTag(u->rank, id), r);
    if (h == NULL) {
      /* Done already (a small message went out inline): nothing to wait for. */
      zppUcxReqRelease(u, r);
      r = NULL;
    } else if (UCS_PTR_IS_ERR(h)) {
      zppUcxReqRelease(u, r);
      return zppUcxFail(u, zppRemoteError, "%s: rank %d: send of %zu bytes to rank %d (host %s) failed: %s",
                      u->comm->name, u->rank, bytes, peer, zppUcxHostOf(u, peer),
                      ucs_status_string(UCS_PTR_STATUS(h)));
    } else {
      r->ucpReq = h;
    }
  }
  if (r) {
    r->seq = id->seq;
    r->wantSig = id->sig & ZPP_UCX_SIG_MASK;
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
  r->tag = makeTag(peer, id);
  if (zppUcxShmCarries(u, peer, bytes)) {
    zppUcxShmRecv(u, peer, buf, bytes, r->tag, r);
    *req = r;
    return zppSuccess;
  }
  ucp_request_param_t prm;
  memset(&prm, 0, sizeof(prm));
  /* Never completed inline: UCX 1.13 does not fill recv_info then, and the
   * sender's tag carries the signature to check. */
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
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

static zppResult_t mismatchError(zppUcx_t* u, int peer, uint32_t got, uint32_t want) {
  char what[400];
  if (u->sigFormatter)
    u->sigFormatter(got, want, what, sizeof(what));
  else
    snprintf(what, sizeof(what), "signature 0x%05x while this rank called 0x%05x", got, want);
  return zppUcxFail(u, zppInvalidUsage, "%s: rank %d: mismatched collectives: rank %d (host %s) called %s",
                  u->comm->name, u->rank, peer, zppUcxHostOf(u, peer), what);
}

/* Checks a completed request and releases it. */
static zppResult_t finishReq(zppUcx_t* u, zppUcxReq_t* r) {
  int peer = r->peer;
  zppResult_t res = zppSuccess;
  const char* name = u->comm->name;
  /* The signature first: it says what differs, a length only that something does. */
  if (r->isRecv && r->haveTag && (uint32_t)(r->gotTag & ZPP_UCX_SIG_MASK) != r->wantSig) {
    res = mismatchError(u, peer, (uint32_t)(r->gotTag & ZPP_UCX_SIG_MASK), r->wantSig);
  } else if (r->status == UCS_ERR_MESSAGE_TRUNCATED) {
    res = zppUcxFail(u, zppInvalidUsage,
                   "%s: rank %d received more than the %zu bytes it expected from rank %d (host %s): "
                   "the ranks called collectives with different counts",
                   name, u->rank, r->bytes, peer, zppUcxHostOf(u, peer));
  } else if (r->status != UCS_OK) {
    res = zppUcxFail(u, zppRemoteError, "%s: rank %d: %s of %zu bytes %s rank %d (host %s) failed: %s",
                   name, u->rank, r->isRecv ? "receive" : "send", r->bytes,
                   r->isRecv ? "from" : "to", peer, zppUcxHostOf(u, peer), ucs_status_string(r->status));
  } else if (r->isRecv && r->gotBytes != r->bytes) {
    res = zppUcxFail(u, zppInvalidUsage,
                   "%s: rank %d received %zu bytes from rank %d (host %s) where it expected %zu: "
                   "the ranks called collectives with different counts",
                   name, u->rank, r->gotBytes, peer, zppUcxHostOf(u, peer), r->bytes);
  }
  zppUcxReqRelease(u, r);
  return res;
}

static zppResult_t checkNotice(zppUcx_t* u) {
  zppUcxReq_t* r = u->noticeRecv;
  if (r == NULL || !r->done) return zppSuccess;
  u->noticeRecv = NULL;
  u->noticeGot = 1;
  ucs_status_t st = r->status;
  zppUcxReqRelease(u, r);
  if (st != UCS_OK) return zppSuccess; /* cancelled at destroy */
  u->noticeIn.reason[sizeof(u->noticeIn.reason) - 1] = '\0';
  zppResult_t code = u->noticeIn.code == zppInvalidUsage ? zppInvalidUsage : zppRemoteError;
  return zppUcxFail(u, code, "%s: rank %d (host %s) failed: %s", u->comm->name, u->noticeIn.rank,
                  zppUcxHostOf(u, u->noticeIn.rank), u->noticeIn.reason);
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

/* Ranks in different collectives may never exchange a message this rank
 * waits for (each waits on a third rank): look at what arrived unasked
 * for. A message of this collective (same sequence number) with another
 * signature is proof of a mismatch. */
static zppResult_t probeMismatch(zppUcx_t* u, const zppUcxReq_t* r) {
  zppMsgId_t id = {r->seq, 0, 0, 0};
  const uint64_t seqMask = TAG_CONTROL | TAG_SRC_MASK | TAG_SEQ_MASK;
  for (int src = 0; src < u->nranks; src++) {
    if (src == u->rank) continue;
    ucp_tag_recv_info_t info;
    ucp_tag_message_h m = ucp_tag_probe_nb(u->worker, makeTag(src, &id), seqMask, 0, &info);
    uint32_t got = (uint32_t)(info.sender_tag & ZPP_UCX_SIG_MASK);
    if (m != NULL && got != r->wantSig) return mismatchError(u, src, got, r->wantSig);
    uint64_t tag;
    size_t len;
    if (zppUcxShmProbe(u, src, makeTag(src, &id), seqMask, &tag, &len) &&
        (uint32_t)(tag & ZPP_UCX_SIG_MASK) != r->wantSig)
      return mismatchError(u, src, (uint32_t)(tag & ZPP_UCX_SIG_MASK), r->wantSig);
  }
  return zppSuccess;
}

/* For a receive that timed out: a message of its tag waits on the other
 * path (rings or UCX), so the sender sent another length. Only a hint: once
 * the 8-bit step wraps, a later message of the same tag may also have come
 * first on the other path, so this is no proof while the wait goes on. The
 * ranks' signatures differ for different counts (found at once) unless
 * their hashes collide. */
static void otherPathHint(zppUcx_t* u, const zppUcxReq_t* r, char* buf, size_t len) {
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
    snprintf(buf, len, "; a %zu-byte message of this step from that rank is here: the ranks "
             "probably called collectives with different counts", bytes);
}

/* Every message of a collective goes to a receive of the same collective
 * when all ranks made the same call; one still waiting after it completed
 * means they did not (e.g. two broadcast roots: the data paths need not
 * cross, and each side may finish "successfully"). */
zppResult_t zppUcxCheckLeftovers(zppUcx_t* u, uint32_t seq, uint32_t sig) {
  zppMsgId_t id = {seq, 0, 0, 0};
  const uint64_t seqMask = TAG_CONTROL | TAG_SEQ_MASK;
  ucp_tag_recv_info_t info;
  uint64_t tag = 0;
  uint32_t lastSig = sig & ZPP_UCX_SIG_MASK;
  if (ucp_tag_probe_nb(u->worker, makeTag(0, &id), seqMask, 0, &info) != NULL) {
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
      found = zppUcxShmProbe(u, u->shmPeers[i], 0, 0, &tag, &len) && zppUcxTagBefore(tag, seq + 1);
    if (!found) return zppSuccess;
    /* The signature compares only with a message of the last collective. */
    if (((tag ^ makeTag(0, &id)) & TAG_SEQ_MASK) != 0) lastSig = UINT32_MAX;
  }
  return zppUcxLeftoverError(u, (int)((tag & TAG_SRC_MASK) >> TAG_SRC_SHIFT), tag, lastSig);
}

zppResult_t zppUcxLeftoverError(zppUcx_t* u, int src, uint64_t tag, uint32_t lastSig) {
  uint32_t got = (uint32_t)(tag & ZPP_UCX_SIG_MASK);
  uint32_t seq = (uint32_t)((tag & TAG_SEQ_MASK) >> TAG_SEQ_SHIFT);
  if (lastSig != UINT32_MAX && got != lastSig) return mismatchError(u, src, got, lastSig);
  return zppUcxFail(u, zppInvalidUsage,
                  "%s: rank %d: mismatched collectives: rank %d (host %s) sent a message in collective "
                  "#%u that this rank did not expect (different broadcast roots?)",
                  u->comm->name, u->rank, src, zppUcxHostOf(u, src), seq);
}

zppResult_t zppUcxPoll(zppUcx_t* u) {
  /* Queued ring sends move on (compute between waits, in qwZ and qgZ); what
   * came in stays in the rings until a wait wants it. */
  zppUcxShmPushQueued(u);
  for (int k = 0; k < 64 && ucp_worker_progress(u->worker); k++) {
  }
  if (u->wakeRecv && u->wakeRecv->done) ZPPCHECK(repostWakeRecv(u));
  ZPPCHECK(checkNotice(u));
  return zppSuccess;
}

static int reqsDone(zppUcxReq_t* const* reqs, int n) {
  for (int i = 0; i < n; i++)
    if (reqs[i] != NULL && !reqs[i]->done) return 0;
  return 1;
}

zppResult_t zppUcxWaitAll(zppUcx_t* u, zppUcxReq_t** reqs, int n) {
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
    if (k % FIRST_POLLS_PER_UCX == FIRST_POLLS_PER_UCX - 1) moved += (int)ucp_worker_progress(u->worker);
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
      if (u->peers[r->peer].state == EP_FAILED)
        return zppUcxFail(u, zppRemoteError, "%s: rank %d: rank %d (host %s) failed: %s",
                        u->comm->name, u->rank, r->peer, zppUcxHostOf(u, r->peer),
                        ucs_status_string(u->peers[r->peer].failStatus));
      if (firstPending < 0) firstPending = i;
      pending++;
    }
    if (pending == 0) {
      if (idled) zppBusyPollUpdate(&u->busy, busy, yielded);
      return zppSuccess;
    }
    ZPPCHECK(checkNotice(u));
    ZPPCHECK(checkAborted(u));
    if (u->wakeRecv && u->wakeRecv->done) ZPPCHECK(repostWakeRecv(u));
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
      otherPathHint(u, r, hint, sizeof(hint));
      return zppUcxFail(u, zppRemoteError,
                      "%s: rank %d timed out after %.1f s waiting for rank %d (host %s) to %s %zu "
                      "bytes (ZPP_TIMEOUT): that rank stopped calling, hangs, or its link is down%s",
                      u->comm->name, u->rank, now - lastDone, r->peer, zppUcxHostOf(u, r->peer),
                      r->isRecv ? "send" : "receive", r->bytes, hint);
    }
    if (now - lastLiveness > LIVENESS_PERIOD_SEC) {
      lastLiveness = now;
      ZPPCHECK(probeMismatch(u, reqs[firstPending]));
      for (int i = 0; i < n; i++) {
        if (reqs[i] == NULL) continue;
        peer_t* p = &u->peers[reqs[i]->peer];
        if (!peerAlive(p)) {
          p->state = EP_FAILED;
          p->failStatus = UCS_ERR_CONNECTION_RESET;
          return zppUcxFail(u, zppRemoteError, "%s: rank %d: rank %d (pid %d on this machine, host %s) exited",
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

