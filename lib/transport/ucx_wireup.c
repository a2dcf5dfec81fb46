/*
 * UCX host transport, creation (wireup): parameters, the UCP context and
 * worker, the exchange of identities and worker addresses through the
 * bootstrap, how long idle waits poll (from how many ranks share a machine's
 * cores), the endpoints, and the end of creation, which returns only once
 * every endpoint is wired up on every rank. Runs once per communicator, on
 * the caller's thread; UCX 1.13's hazards that shaped it (a blocking tcp
 * connect, wireup replies a peer still owes) are in docs/transports.md.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include "check.h"
#include "params.h"
#include "lib/comm.h"

#include "ucx_internal.h"

/* ---- how long idle waits poll ------------------------------------------- */

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

/* ---- endpoints ---------------------------------------------------------- */

zppResult_t zppUcxGetEp(zppUcx_t* u, int peer, ucp_ep_h* out) {
  peer_t* p = &u->peers[peer];
  if (p->state == EP_OK) {
    *out = p->ep;
    return zppSuccess;
  }
  if (p->state == EP_FAILED) return zppUcxPeerFailedError(u, peer);
  if (p->state != EP_NONE)
    return zppUcxFail(u, zppRemoteError, "%s: rank %d cannot reach rank %d (host %s): %s",
                      u->comm->name, u->rank, peer, zppUcxHostOf(u, peer), "endpoint closed");
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
    params.err_handler.cb = zppUcxEpError;
    params.err_handler.arg = p;
  }
  ucs_status_t st = ucp_ep_create(u->worker, &params, &p->ep);
  if (st != UCS_OK) {
    p->state = EP_FAILED;
    p->failStatus = st;
    return zppUcxFail(u, zppRemoteError,
                      "%s: rank %d cannot create an endpoint to rank %d (host %s): %s", u->comm->name,
                      u->rank, peer, zppUcxHostOf(u, peer), ucs_status_string(st));
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
  if (st != UCS_OK) ZPP_FAILGOTO(zppSystemError, res, out, NET, "ucp_init: %s", ucs_status_string(st));

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
  zppUcxFillRankInfo(mine);
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
        if (watch && !zppUcxPeerAlive(&u->peers[p]))
          ZPP_FAILGOTO(zppRemoteError, res, out, NET,
                       "%s: rank %d: rank %d (host %s) died while connecting", u->comm->name, u->rank,
                       p, zppUcxHostOf(u, p));
        left++;
        continue;
      }
      ucp_request_free(reqs[p]);
      reqs[p] = NULL;
      if (st != UCS_OK)
        ZPP_FAILGOTO(zppRemoteError, res, out, NET,
                     "%s: rank %d cannot connect to rank %d (host %s): %s", u->comm->name, u->rank, p,
                     zppUcxHostOf(u, p), ucs_status_string(st));
    }
    if (left && zppClockNow() > deadline)
      ZPP_FAILGOTO(zppRemoteError, res, out, NET,
                   "%s: rank %d: %d endpoints not connected after %.0f s", u->comm->name, u->rank, left,
                   u->comm->timeoutSec);
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
  u->wakeFd = -1; /* a failure before the eventfd must not close fd 0 */
  u->live.next = u->live.prev = &u->live;
  if (u->nranks > (1 << TAG_SRC_BITS))
    ZPP_FAILGOTO(zppInvalidArgument, res, fail, NET, "the UCX transport supports at most %d ranks",
                 1 << TAG_SRC_BITS);
  u->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (u->wakeFd < 0) ZPP_FAILGOTO(zppSystemError, res, fail, NET, "eventfd: %s", strerror(errno));
  ZPPCHECKGOTO(readParams(u), res, fail);
  ZPP_CALLOCGOTO(u->peers, (size_t)u->nranks, res, fail);
  ZPPCHECKGOTO(openWorker(u), res, fail);
  ZPPCHECKGOTO(exchangeAddresses(u), res, fail);
  ZPPCHECKGOTO(zppUcxPostNoticeRecv(u), res, fail);
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
  if (u->nShmPeers > 0) ZPPCHECKGOTO(zppUcxRepostWakeRecv(u), res, fail);
  ZPP_INFO(NET, "%s: UCX %s ready, rank %d of %d, shared memory inside the node %s", comm->name,
           ucp_get_version_string(), u->rank, u->nranks, u->useShm ? "on" : "off");
  *out = u;
  return zppSuccess;
fail:
  zppUcxDestroy(u);
  return res;
}
