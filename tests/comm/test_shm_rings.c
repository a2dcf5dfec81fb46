/*
 * The host transport's shared-memory rings for small intra-node messages
 * (lib/transport/shm_ring.h, ucx_shm.c):
 *
 *   test_shm_rings ring        one process: a ring fills, refuses, drains,
 *                              wraps; an inbox's name is gone once unlinked
 *   test_shm_rings order       2 ranks: 200 messages, small ones through the
 *                              rings (more than a ring holds: sends queue)
 *                              and large ones through UCX, received in the
 *                              reverse order (unexpected ones kept), every
 *                              byte checked; the inboxes' names are gone
 *                              after creation
 *   test_shm_rings off         the same with ZPP_SHM_SMALL_BYTES=0: all UCX
 *   test_shm_rings wake        a receiver asleep on its event fd is woken by
 *                              a message in its ring (label timing)
 *   test_shm_rings wake_fences the same with the plain fence handshake
 *                              instead of membarrier (label timing)
 *   test_shm_rings wake_many   3 senders in turn wake one receiver
 *                              (label timing)
 *   test_shm_rings paths       a message on the rings where the receiver
 *                              expects a larger one through UCX, and the
 *                              reverse (same signature: a hash collision of
 *                              two counts): the timeout's error names the
 *                              message waiting on the other path, never a
 *                              hang
 *   test_shm_rings queued_error  a wait times out with sends queued for
 *                              ring slots: the quiesce after it ends them
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll_testlib.h"
#include "lib/comm.h"
#include "lib/transport/shm_ring.h"
#include "lib/transport/transports.h"
#include "lib/transport/ucx_internal.h"
#include "testutil.h"
#include "perf/common/launch.h"

static zppUcx_t* ucxOf(zppComm_t comm) { return comm->transports->ucx; }

static int nameGone(const char* name) {
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd < 0 && errno == ENOENT;
}

/* ---- ring: the ring alone -------------------------------------------------- */

static int ringCase(void) {
  zppShmInbox_t box;
  REQUIRE(zppShmInboxCreate(&box, 2, 100) == zppSuccess);
  CHECK(box.nSlots >= 2 && box.maxPayload == 100);
  char name[ZPP_SHM_NAME_LEN];
  snprintf(name, sizeof(name), "%s", box.name);
  /* A second mapping, as a peer would open it. */
  zppShmInbox_t peerView;
  REQUIRE(zppShmInboxOpen(&peerView, name) == zppSuccess);
  CHECK_EQ_INT(peerView.nSlots, box.nSlots);
  zppShmRing_t prod, cons;
  zppShmRingAttach(&prod, &peerView, 1);
  zppShmRingAttach(&cons, &box, 1);
  zppShmRing_t other;
  zppShmRingAttach(&other, &box, 0);

  unsigned char msg[100], got[100];
  uint64_t next = 0, taken = 0;
  for (int round = 0; round < 5; round++) {
    /* Fill until refused: exactly nSlots messages fit. */
    int pushed = 0;
    for (;;) {
      size_t len = (size_t)(next % 101);
      memset(msg, (int)(next & 0xff), len);
      if (!zppShmRingTryPush(&prod, 0x1000 + next, msg, len)) break;
      next++;
      pushed++;
    }
    CHECK_EQ_INT(pushed, round == 0 ? (int)box.nSlots : (int)box.nSlots - 1);
    uint64_t tag;
    size_t len;
    CHECK(zppShmRingPeek(&other, &tag, &len) == NULL); /* ring 0 stays empty */
    /* Take all but one: the ring keeps working across the wrap. */
    while (taken + 1 < next) {
      const void* data = zppShmRingPeek(&cons, &tag, &len);
      REQUIRE(data != NULL);
      CHECK_EQ_INT(tag, 0x1000 + taken);
      CHECK_EQ_INT(len, taken % 101);
      memcpy(got, data, len);
      memset(msg, (int)(taken & 0xff), len);
      CHECK(memcmp(got, msg, len) == 0);
      zppShmRingPop(&cons);
      taken++;
    }
  }
  CHECK(!nameGone(name));
  zppShmInboxUnlink(&box);
  CHECK_MSG(nameGone(name), "%s still exists after unlink", name);
  zppShmInboxClose(&peerView);
  zppShmInboxClose(&box);
  /* A name that is not an inbox is refused. */
  zppShmInbox_t bad;
  CHECK(zppShmInboxOpen(&bad, "/zpp-no-such-inbox") != zppSuccess);
  printf("ring: %llu messages through %u slots: %s\n", (unsigned long long)next, box.nSlots,
         zppTestFailures ? "FAILED" : "passed");
  return zppTestFailures ? 1 : 0;
}

/* ---- order: many messages, both paths, any order ----------------------------- */

enum { ORDER_MSGS = 200 };

static size_t orderBytes(int i) {
  static const size_t sizes[3] = {100, 8192, 20000}; /* rings, rings (the limit), UCX */
  return sizes[i % 3];
}

static void orderFill(unsigned char* buf, int i) {
  for (size_t k = 0; k < orderBytes(i); k++) buf[k] = (unsigned char)(i * 7 + k * 13);
}

static int orderBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  int expectRings = *(const int*)arg;
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  zppUcx_t* u = ucxOf(comm);
  CHECK_EQ_INT(u->nShmPeers, expectRings ? 1 : 0);
  if (expectRings) CHECK_MSG(nameGone(u->shmInbox.name), "inbox %s left in /dev/shm", u->shmInbox.name);
  int small = 0;
  for (int i = 0; i < ORDER_MSGS; i++) small += orderBytes(i) <= 8192;
  REQUIRE(small > (int)u->shmInbox.nSlots || !expectRings); /* the ring must overflow */

  unsigned char* bufs[ORDER_MSGS];
  zppUcxReq_t* reqs[ORDER_MSGS];
  for (int i = 0; i < ORDER_MSGS; i++) {
    bufs[i] = calloc(1, orderBytes(i));
    REQUIRE(bufs[i] != NULL);
  }
  if (rank == 0) {
    for (int i = 0; i < ORDER_MSGS; i++) {
      orderFill(bufs[i], i);
      zppMsgId_t mid = {7, (uint32_t)i, 0x123, 0, ZPP_MSG_COLL};
      REQUIRE(zppUcxIsend(u, 1, bufs[i], orderBytes(i), &mid, &reqs[i]) == zppSuccess);
    }
    CHECK(zppUcxWaitAll(u, reqs, ORDER_MSGS) == zppSuccess);
    CHECK_EQ_INT(u->peers[1].shmOut.pos, expectRings ? small : 0);
    /* Nothing more to rank 1 before it counted what it got. */
    char ack = 0;
    zppMsgId_t mid = {8, 0, 0x123, 0, ZPP_MSG_COLL};
    CHECK(zppUcxSendRecv(u, -1, NULL, 0, 1, &ack, 1, &mid) == zppSuccess);
  } else {
    /* Late and backwards: rank 0's ring fills and its sends queue, and
     * every message read off the ring first waits as unexpected. */
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int i = ORDER_MSGS - 1; i >= 0; i--) {
      zppMsgId_t mid = {7, (uint32_t)i, 0x123, 0, ZPP_MSG_COLL};
      REQUIRE(zppUcxIrecv(u, 0, bufs[i], orderBytes(i), &mid, &reqs[i]) == zppSuccess);
    }
    CHECK(zppUcxWaitAll(u, reqs, ORDER_MSGS) == zppSuccess);
    unsigned char* want = malloc(orderBytes(2));
    REQUIRE(want != NULL);
    for (int i = 0; i < ORDER_MSGS; i++) {
      orderFill(want, i);
      CHECK_MSG(memcmp(want, bufs[i], orderBytes(i)) == 0, "message %d (%zu bytes) differs", i,
                orderBytes(i));
    }
    free(want);
    CHECK_EQ_INT(u->peers[0].shmIn.pos, expectRings ? small : 0);
    char ack = 1;
    zppMsgId_t mid = {8, 0, 0x123, 0, ZPP_MSG_COLL};
    CHECK(zppUcxSendRecv(u, 0, &ack, 1, -1, NULL, 0, &mid) == zppSuccess);
  }
  for (int i = 0; i < ORDER_MSGS; i++) free(bufs[i]);
  /* And the communicator still works afterwards. */
  int32_t v = rank + 1, sum = 0;
  CHECK(zppAllReduce(&v, &sum, 1, zppInt32, zppSum, comm, NULL) == zppSuccess);
  CHECK_EQ_INT(sum, 3);
  REQUIRE(zppCommDestroy(comm) == zppSuccess);
  return zppTestFailures ? 1 : 0;
}

static int orderCase(int rings) {
  const char* env[] = {rings ? "ZPP_SHM_SMALL_BYTES=8192" : "ZPP_SHM_SMALL_BYTES=0", NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.timeoutSec = 60;
  o.env = env;
  int rc = zppLaunch(&o, orderBody, &rings);
  printf("%s: %d messages, %s: %s\n", rings ? "order" : "off", ORDER_MSGS,
         rings ? "small ones through the rings" : "all through UCX", rc == 0 ? "passed" : "FAILED");
  return rc;
}

/* ---- wake: a sleeping receiver ---------------------------------------------- */

enum { WAKE_ROUNDS = 9 };
#define WAKE_GAP_SEC 0.03
/* A lost wake-up leaves the receiver asleep until its poll's 100 ms end:
 * half of that on average. A working one costs a context switch. */
#define WAKE_MEDIAN_LIMIT_SEC 0.01

static int cmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

typedef struct {
  int fences;
  int nranks;
} wakeArg_t;

/* The last rank receives; each round it tells the others to go, then
 * waits for each in turn while they send one after the other, a gap apart:
 * it falls asleep before every message, and every sender must wake it. */
static int wakeBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const wakeArg_t* a = arg;
  const int recv = nranks - 1;
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  zppUcx_t* u = ucxOf(comm);
  if (u->nShmPeers == 0) {
    printf("wake: no shared-memory rings here (no /dev/shm?): skipped\n");
    zppCommDestroy(comm);
    return 77;
  }
  if (a->fences) {
    /* As if membarrier were missing: the sleeper fences only itself, so the
     * senders must fence before they look at the flag. */
    u->shmAsymFence = 0;
    for (int p = 0; p < nranks; p++) u->peers[p].shmFence = 1;
  }
  enum { MAX_LAT = WAKE_ROUNDS * 8 };
  double lat[MAX_LAT];
  int nLat = 0;
  for (int k = 0; k < WAKE_ROUNDS; k++) {
    zppMsgId_t go = {9, (uint32_t)(2 * k), 0x42, 0, ZPP_MSG_COLL};
    zppMsgId_t mid = {9, (uint32_t)(2 * k + 1), 0x42, 0, ZPP_MSG_COLL};
    char token = 1;
    double sent = 0.0;
    zppUcxReq_t* req = NULL;
    if (rank != recv) {
      REQUIRE(zppUcxSendRecv(u, -1, NULL, 0, recv, &token, 1, &go) == zppSuccess);
      struct timespec ts = {0, (long)(WAKE_GAP_SEC * 1e9) * (rank + 1)};
      nanosleep(&ts, NULL); /* the receiver spins 50 us, then sleeps */
      sent = zppClockNow();
      REQUIRE(zppUcxIsend(u, recv, &sent, sizeof(sent), &mid, &req) == zppSuccess);
      CHECK(zppUcxWaitAll(u, &req, 1) == zppSuccess);
    } else {
      for (int p = 0; p < recv; p++)
        REQUIRE(zppUcxSendRecv(u, p, &token, 1, -1, NULL, 0, &go) == zppSuccess);
      for (int p = 0; p < recv; p++) {
        REQUIRE(zppUcxIrecv(u, p, &sent, sizeof(sent), &mid, &req) == zppSuccess);
        CHECK(zppUcxWaitAll(u, &req, 1) == zppSuccess);
        if (nLat < MAX_LAT) lat[nLat++] = zppClockNow() - sent;
      }
    }
  }
  if (rank == recv) {
    for (int p = 0; p < recv; p++) CHECK_EQ_INT(u->peers[p].shmIn.pos, WAKE_ROUNDS);
    qsort(lat, (size_t)nLat, sizeof(double), cmpDouble);
    printf(
        "wake%s: %d messages from %d ranks to a receiver asleep for %.0f ms each: delivered "
        "after %.3f ms (median), %.3f ms (most)\n",
        a->fences ? " (fences)" : "", nLat, recv, WAKE_GAP_SEC * 1e3, lat[nLat / 2] * 1e3,
        lat[nLat - 1] * 1e3);
    CHECK_MSG(lat[nLat / 2] < WAKE_MEDIAN_LIMIT_SEC,
              "median %.1f ms: the receiver was not woken (it slept until its poll timed out)",
              lat[nLat / 2] * 1e3);
  }
  REQUIRE(zppCommDestroy(comm) == zppSuccess);
  return zppTestFailures ? 1 : 0;
}

static int wakeCase(int fences, int nranks) {
  wakeArg_t a = {fences, nranks};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = nranks;
  o.timeoutSec = 60;
  return zppLaunch(&o, wakeBody, &a);
}

/* ---- paths: one message, two lengths ----------------------------------------- */

/* Found only at the timeout: before it, a message of the same tag on the
 * other path may be a later one (the tag's step wraps), not proof. */
#define PATHS_TIMEOUT_SEC 2

typedef struct {
  size_t sendBytes, recvBytes;
} pathsArg_t;

static int pathsBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const pathsArg_t* a = arg;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  /* Rank 0 waits longer: the receiver's timeout, with its reason, comes first. */
  cfg.timeoutSec = rank == 1 ? PATHS_TIMEOUT_SEC : 5 * PATHS_TIMEOUT_SEC;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  zppUcx_t* u = ucxOf(comm);
  unsigned char* buf = calloc(1, a->sendBytes > a->recvBytes ? a->sendBytes : a->recvBytes);
  REQUIRE(buf != NULL);
  zppMsgId_t mid = {11, 1, 0x77, 0, ZPP_MSG_COLL};
  zppUcxReq_t* req = NULL;
  double t0 = zppClockNow();
  zppResult_t res;
  if (rank == 0) {
    REQUIRE(zppUcxIsend(u, 1, buf, a->sendBytes, &mid, &req) == zppSuccess);
    res = zppUcxWaitAll(u, &req, 1); /* may succeed: the message left */
    /* The receiver's notice reaches this rank at its next wait. */
    zppUcxReq_t* r2 = NULL;
    zppMsgId_t next = {12, 1, 0x77, 0, ZPP_MSG_COLL};
    if (res == zppSuccess && zppUcxIrecv(u, 1, buf, 8, &next, &r2) == zppSuccess)
      res = zppUcxWaitAll(u, &r2, 1);
    CHECK_MSG(res != zppSuccess, "the sender never heard of the receiver's error");
  } else {
    REQUIRE(zppUcxIrecv(u, 0, buf, a->recvBytes, &mid, &req) == zppSuccess);
    res = zppUcxWaitAll(u, &req, 1);
    CHECK_EQ_INT(res, zppRemoteError);
    const char* why = zppGetLastError(comm);
    char what[64];
    snprintf(what, sizeof(what), "a %zu-byte message", a->sendBytes);
    CHECK_MSG(strstr(why, "different counts") != NULL && strstr(why, what) != NULL, "error: %s", why);
    printf("paths: %zu bytes sent, %zu expected: %s\n", a->sendBytes, a->recvBytes, why);
  }
  double t = zppClockNow() - t0;
  CHECK_MSG(t < PATHS_TIMEOUT_SEC + 3.0, "rank %d took %.1f s to fail (timeout %d s)", rank, t,
            PATHS_TIMEOUT_SEC);
  zppUcxQuiesce(u);
  free(buf);
  zppCommDestroy(comm);
  return zppTestFailures ? 1 : 0;
}

static int pathsCase(void) {
  /* Small (rings) against large (UCX), then the reverse. */
  pathsArg_t cases[2] = {{100, 20000}, {20000, 100}};
  int rc = 0;
  for (int c = 0; c < 2; c++) {
    zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
    o.nranks = 2;
    o.timeoutSec = 60;
    if (zppLaunch(&o, pathsBody, &cases[c]) != 0) rc = 1;
  }
  return rc;
}

/* ---- queued_error: an error while sends wait for ring slots ------------------ */

enum { QUEUED_MSGS = 200 };
#define QUEUED_TIMEOUT_SEC 1

static int liveRequests(zppUcx_t* u) {
  int n = 0;
  for (zppUcxReq_t* r = u->live.next; r != &u->live; r = r->next) n += !zppUcxIsControlRecv(u, r);
  return n;
}

/* Rank 0 sends more small messages than a ring holds to rank 1, which never
 * receives them (it waits for rank 2, which waits for rank 1): rank 0's wait
 * times out with sends still queued, and the quiesce after it must end them
 * all (no buffer touched afterwards). */
static int queuedErrorBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = rank == 0 ? QUEUED_TIMEOUT_SEC : 5 * QUEUED_TIMEOUT_SEC;
  REQUIRE(zppCommInitRankConfig(&comm, nranks, *id, rank, &cfg) == zppSuccess);
  zppUcx_t* u = ucxOf(comm);
  if (u->nShmPeers == 0) {
    zppCommDestroy(comm);
    return 77;
  }
  static char bufs[QUEUED_MSGS][100];
  zppUcxReq_t* reqs[QUEUED_MSGS] = {NULL};
  double t0 = zppClockNow();
  zppResult_t res;
  if (rank == 0) {
    for (int i = 0; i < QUEUED_MSGS; i++) {
      zppMsgId_t mid = {13, (uint32_t)i, 0x55, 0, ZPP_MSG_COLL};
      REQUIRE(zppUcxIsend(u, 1, bufs[i], sizeof(bufs[i]), &mid, &reqs[i]) == zppSuccess);
    }
    CHECK_MSG(zppUcxShmSendsQueued(u), "the ring of %u slots took all %d messages", u->shmInbox.nSlots,
              QUEUED_MSGS);
    res = zppUcxWaitAll(u, reqs, QUEUED_MSGS);
    CHECK_EQ_INT(res, zppRemoteError);
    const char* why = zppGetLastError(comm);
    CHECK_MSG(strstr(why, "timed out") && strstr(why, "to receive 100 bytes"), "error: %s", why);
  } else {
    /* No receive from rank 0 posted: its messages stay in the ring. */
    char one;
    zppMsgId_t other = {14, 0, 0x55, 0, ZPP_MSG_COLL};
    REQUIRE(zppUcxIrecv(u, rank == 1 ? 2 : 1, &one, 1, &other, &reqs[0]) == zppSuccess);
    res = zppUcxWaitAll(u, reqs, 1);
    CHECK(res != zppSuccess); /* rank 0's notice, or this rank's own timeout */
  }
  double t = zppClockNow() - t0;
  CHECK_MSG(t < (rank == 0 ? 1 : 5) * QUEUED_TIMEOUT_SEC + 2.0, "rank %d took %.1f s to fail", rank, t);
  zppUcxQuiesce(u);
  CHECK_EQ_INT(zppUcxShmSendsQueued(u), 0);
  CHECK_MSG(liveRequests(u) == 0, "rank %d: %d requests live after the quiesce", rank, liveRequests(u));
  printf("queued_error: rank %d failed after %.2f s: %s\n", rank, t, zppGetLastError(comm));
  zppCommDestroy(comm);
  return zppTestFailures ? 1 : 0;
}

static int queuedErrorCase(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 3;
  o.timeoutSec = 60;
  return zppLaunch(&o, queuedErrorBody, NULL);
}

/* ---- a segment left by a rank killed while creating ---------------------- */

/* A rank killed between making its inbox and the unlink left its 2 MiB
 * /dev/shm/zpp-<pid>-* behind. The next inbox made on the machine removes
 * such a name when nobody holds its creator's lock and it is older than
 * 10 s; a name whose creator is alive (locked) stays. */
static int staleBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  zppCommDestroy(comm);
  return 0;
}

static int makeOld(const char* name, int lock) {
  int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 4096) == 0);
  if (lock) REQUIRE(flock(fd, LOCK_EX | LOCK_NB) == 0);
  char path[96];
  snprintf(path, sizeof(path), "/dev/shm%s", name);
  struct timeval old[2];
  gettimeofday(&old[0], NULL);
  old[0].tv_sec -= 60;
  old[1] = old[0];
  REQUIRE(utimes(path, old) == 0);
  if (!lock) close(fd);
  return fd;
}

static int staleCase(void) {
  char dead[64], alive[64], dpath[96], apath[96];
  snprintf(dead, sizeof(dead), "/zpp-%d-deadbeefdeadbeef", (int)getpid());
  snprintf(alive, sizeof(alive), "/zpp-%d-a11vea11vea11ve0", (int)getpid());
  snprintf(dpath, sizeof(dpath), "/dev/shm%s", dead);
  snprintf(apath, sizeof(apath), "/dev/shm%s", alive);
  makeOld(dead, 0);
  int held = makeOld(alive, 1);
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.timeoutSec = 60;
  CHECK_EQ_INT(zppLaunch(&o, staleBody, NULL), 0);
  CHECK_MSG(access(dpath, F_OK) != 0, "%s (nobody's, a minute old) is still there", dpath);
  CHECK_MSG(access(apath, F_OK) == 0, "%s (locked by a live process) was removed", apath);
  close(held);
  shm_unlink(alive);
  shm_unlink(dead);
  return zppTestExit("stale");
}

int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "";
  if (strcmp(which, "ring") == 0) return ringCase();
  if (strcmp(which, "stale") == 0) return staleCase();
  if (strcmp(which, "order") == 0) return orderCase(1);
  if (strcmp(which, "off") == 0) return orderCase(0);
  if (strcmp(which, "wake") == 0) return wakeCase(0, 2);
  if (strcmp(which, "wake_fences") == 0) return wakeCase(1, 2);
  if (strcmp(which, "wake_many") == 0) return wakeCase(0, 4);
  if (strcmp(which, "paths") == 0) return pathsCase();
  if (strcmp(which, "queued_error") == 0) return queuedErrorCase();
  fprintf(stderr,
          "usage: test_shm_rings ring|order|off|wake|wake_fences|wake_many|paths|queued_error\n");
  return 2;
}
