/*
 * The bootstrap: rendezvous, ring all-gather / broadcast / barrier with
 * 1..8 ranks, and its failures: wrong secret, unreachable root, nranks
 * mismatch, a rank that never comes, a rank that dies, mismatched calls,
 * abort from another thread. Every failure must reach every rank within
 * the timeout, and the tests assert the time.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lib/bootstrap/bootstrap.h"
#include "lib/bootstrap/wire.h"
#include "core/log.h"
#include "testutil.h"
#include "perf/common/launch.h"
#include "clock.h"

static unsigned char tag(int rank, size_t i, int salt) {
  return (unsigned char)(rank * 131 + (int)(i * 7) + salt * 17 + (int)(i >> 8));
}

/* ---- 1..8 ranks: every operation, data checked byte for byte ---------- */

static int ringBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  char host[32];
  snprintf(host, sizeof(host), "host%d", rank % 3);
  zppBootstrap_t* bs = NULL;
  REQUIRE(zppBootstrapInit(id, rank, nranks, host, 30.0, &bs) == zppSuccess);
  CHECK_EQ_INT(zppBootstrapRank(bs), rank);
  CHECK_EQ_INT(zppBootstrapSize(bs), nranks);
  for (int r = 0; r < nranks; r++) {
    char want[32];
    snprintf(want, sizeof(want), "host%d", r % 3);
    CHECK(strcmp(zppBootstrapHostId(bs, r), want) == 0);
  }
  /* Small and larger than any socket buffer (the ring must not deadlock). */
  size_t sizes[] = {1, 8, 1000, (size_t)1 << 20};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    size_t b = sizes[k];
    unsigned char* d = malloc(b * (size_t)nranks);
    REQUIRE(d != NULL);
    memset(d, 0xee, b * (size_t)nranks);
    for (size_t i = 0; i < b; i++) d[(size_t)rank * b + i] = tag(rank, i, (int)k);
    CHECK(zppBootstrapAllGather(bs, d, b) == zppSuccess);
    size_t bad = 0;
    for (int r = 0; r < nranks; r++)
      for (size_t i = 0; i < b; i++) bad += d[(size_t)r * b + i] != tag(r, i, (int)k);
    CHECK_MSG(bad == 0, "allgather of %zu bytes/rank: %zu wrong bytes", b, bad);
    free(d);
  }
  for (int root = 0; root < nranks; root++) {
    size_t b = root % 2 ? 100000 : 3;
    unsigned char* d = malloc(b);
    REQUIRE(d != NULL);
    for (size_t i = 0; i < b; i++) d[i] = rank == root ? tag(root, i, 99) : 0;
    CHECK(zppBootstrapBroadcast(bs, d, b, root) == zppSuccess);
    size_t bad = 0;
    for (size_t i = 0; i < b; i++) bad += d[i] != tag(root, i, 99);
    CHECK_MSG(bad == 0, "broadcast from %d: %zu wrong bytes", root, bad);
    free(d);
  }
  CHECK(zppBootstrapBroadcast(bs, NULL, 0, nranks - 1) == zppSuccess);
  CHECK(zppBootstrapAllGather(bs, NULL, 0) == zppSuccess);
  for (int i = 0; i < 3; i++) CHECK(zppBootstrapBarrier(bs) == zppSuccess);
  CHECK(zppBootstrapBroadcast(bs, &rank, sizeof(rank), nranks) == zppInvalidArgument);
  zppBootstrapDestroy(bs);
  return zppTestRankResult();
}

static void testRanks(void) {
  for (int n = 1; n <= 8; n++) {
    zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
    o.nranks = n;
    o.timeoutSec = 60;
    double t0 = zppClockNow();
    CHECK_MSG(zppLaunch(&o, ringBody, NULL) == 0, "%d ranks", n);
    printf("bootstrap with %d ranks: %.2f s\n", n, zppClockNow() - t0);
  }
}

/* ---- wrong secret: refused, the others unharmed ------------------------ */

static int secretBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const int realRanks = 3;
  if (rank == realRanks) {
    /* The intruder: first a connection that never says anything, then a
     * peer with the address right and the secret wrong, claiming rank 1. */
    struct sockaddr_in root;
    zppGetAddr((const unsigned char*)id->internal + ZPP_ID_OFF_IP, &root);
    int silent = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(connect(silent, (struct sockaddr*)&root, sizeof(root)) == 0);
    zppUniqueId bad = *id;
    bad.internal[ZPP_ID_OFF_SECRET + 5] ^= 0x40;
    zppBootstrap_t* bs = NULL;
    double t0 = zppClockNow();
    zppResult_t res = zppBootstrapInit(&bad, 1, realRanks, "intruder", 20.0, &bs);
    double dt = zppClockNow() - t0;
    CHECK_EQ_INT(res, zppInvalidUsage);
    CHECK(bs == NULL);
    CHECK_MSG(dt < 5.0, "refusal took %.2f s", dt);
    CHECK_MSG(strstr(zppLogLastError(), "wrong secret") != NULL, "last error: %s", zppLogLastError());
    zppTestSleep(1.0);
    close(silent);
    return zppTestRankResult();
  }
  zppTestSleep(0.3); /* let the intruder go first */
  zppBootstrap_t* bs = NULL;
  REQUIRE(zppBootstrapInit(id, rank, realRanks, "h", 20.0, &bs) == zppSuccess);
  int v[3] = {0, 0, 0};
  v[rank] = rank + 10;
  CHECK(zppBootstrapAllGather(bs, v, sizeof(int)) == zppSuccess);
  for (int r = 0; r < realRanks; r++) CHECK_EQ_INT(v[r], r + 10);
  zppBootstrapDestroy(bs);
  return zppTestRankResult();
}

static void testWrongSecret(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 4; /* 3 ranks and an intruder */
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, secretBody, NULL) == 0);
}

/* ---- unreachable root: an error naming the address, in time ----------- */

static void unreachable(const char* host, int port, double timeout, double grace) {
  zppUniqueId id;
  unsigned char secret[32] = {1};
  REQUIRE(zppBootstrapMakeId(&id, host, port, secret, sizeof(secret)) == zppSuccess);
  zppBootstrap_t* bs = NULL;
  double t0 = zppClockNow();
  zppResult_t res = zppBootstrapInit(&id, 0, 2, "h", timeout, &bs);
  double dt = zppClockNow() - t0;
  CHECK_EQ_INT(res, zppRemoteError);
  CHECK(bs == NULL);
  CHECK_MSG(dt >= timeout - 0.1 && dt < timeout + grace + 3.0,
            "%s:%d: error after %.2f s, timeout %.1f", host, port, dt, timeout);
  char where[64];
  snprintf(where, sizeof(where), "%s:%d", host, port);
  CHECK_MSG(strstr(zppLogLastError(), where) != NULL, "the error does not name %s: %s", where,
            zppLogLastError());
  printf("unreachable root %s: error after %.2f s: %s\n", where, dt, zppLogLastError());
}

static void testUnreachable(void) {
  int port = zppLaunchFreePort(); /* nobody listens there now */
  REQUIRE(port > 0);
  unreachable("127.0.0.1", port, 2.0, 0.0);
  /* A root that accepts (its backlog does) but never answers: a hung root
   * process. The rank gives the root one second of grace for its answer. */
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(bind(s, (struct sockaddr*)&a, sizeof(a)) == 0 && listen(s, 4) == 0);
  REQUIRE(getsockname(s, (struct sockaddr*)&a, &len) == 0);
  unreachable("127.0.0.1", ntohs(a.sin_port), 2.0, 1.0);
  close(s);
}

/* ---- nranks mismatch: every rank told -------------------------------- */

static int mismatchBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  int claim = rank == 2 ? nranks + 1 : nranks;
  zppBootstrap_t* bs = NULL;
  double t0 = zppClockNow();
  zppResult_t res = zppBootstrapInit(id, rank, claim, "h", 20.0, &bs);
  double dt = zppClockNow() - t0;
  CHECK_EQ_INT(res, zppInvalidUsage);
  CHECK_MSG(dt < 5.0, "rank %d: mismatch reported after %.2f s", rank, dt);
  CHECK_MSG(strstr(zppLogLastError(), "nranks mismatch") != NULL, "rank %d: %s", rank,
            zppLogLastError());
  return zppTestRankResult();
}

static void testNranksMismatch(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 3;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, mismatchBody, NULL) == 0);
}

/* ---- a rank that never comes: all others fail at the timeout ---------- */

static int missingBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const double timeout = 2.0;
  if (rank == 2) return 0; /* never joins */
  zppBootstrap_t* bs = NULL;
  double t0 = zppClockNow();
  zppResult_t res = zppBootstrapInit(id, rank, nranks, "h", timeout, &bs);
  double dt = zppClockNow() - t0;
  CHECK_EQ_INT(res, zppRemoteError);
  CHECK_MSG(dt >= timeout - 0.5 && dt < timeout + 4.0, "rank %d: error after %.2f s", rank, dt);
  CHECK_MSG(strstr(zppLogLastError(), "missing: 2") != NULL, "rank %d: %s", rank, zppLogLastError());
  return zppTestRankResult();
}

static void testMissingRank(void) {
  /* The root (in rank 0) has the same timeout, and names who is missing. */
  static const char* const env[] = {"ZPP_TIMEOUT=2", NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.env = env;
  o.nranks = 4;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, missingBody, NULL) == 0);
}

/* ---- a rank that dies after init: the others fail fast ---------------- */

static int deathBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppBootstrap_t* bs = NULL;
  REQUIRE(zppBootstrapInit(id, rank, nranks, "h", 60.0, &bs) == zppSuccess);
  if (rank == 2) _exit(0); /* dies without a word; the kernel closes its sockets */
  zppTestSleep(0.2);
  int v[5] = {0};
  double t0 = zppClockNow();
  zppResult_t res = zppBootstrapAllGather(bs, v, sizeof(int));
  double dt = zppClockNow() - t0;
  CHECK_EQ_INT(res, zppRemoteError);
  /* Through closed connections, not the 60 s timeout. */
  CHECK_MSG(dt < 5.0, "rank %d: error after %.2f s", rank, dt);
  CHECK(zppBootstrapBarrier(bs) == zppRemoteError); /* broken for good */
  zppBootstrapDestroy(bs);
  return zppTestRankResult();
}

static void testRankDies(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 5;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, deathBody, NULL) == 0);
}

/* ---- mismatched calls: an error on every rank, never wrong data ------- */

static int callMismatchBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppBootstrap_t* bs = NULL;
  REQUIRE(zppBootstrapInit(id, rank, nranks, "h", 60.0, &bs) == zppSuccess);
  unsigned char d[64 * 4] = {0};
  double t0 = zppClockNow();
  zppResult_t res = zppBootstrapAllGather(bs, d, rank == 1 ? 64 : 32);
  double dt = zppClockNow() - t0;
  CHECK(res != zppSuccess);
  CHECK_MSG(dt < 5.0, "rank %d: error after %.2f s", rank, dt);
  zppBootstrapDestroy(bs);
  return zppTestRankResult();
}

static void testCallMismatch(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 4;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, callMismatchBody, NULL) == 0);
}

/* ---- abort from another thread unblocks a wait ------------------------ */

static void* abortLater(void* arg) {
  zppTestSleep(0.5);
  zppBootstrapAbort(arg);
  return NULL;
}

static int abortBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  zppBootstrap_t* bs = NULL;
  REQUIRE(zppBootstrapInit(id, rank, nranks, "h", 60.0, &bs) == zppSuccess);
  int v[2] = {rank, rank};
  if (rank == 0) {
    /* Rank 1 is busy elsewhere: this all-gather would wait 60 s. */
    pthread_t t;
    pthread_create(&t, NULL, abortLater, bs);
    double t0 = zppClockNow();
    zppResult_t res = zppBootstrapAllGather(bs, v, sizeof(int));
    double dt = zppClockNow() - t0;
    pthread_join(t, NULL);
    CHECK_EQ_INT(res, zppRemoteError);
    CHECK_MSG(dt >= 0.4 && dt < 3.0, "abort took effect after %.2f s", dt);
    CHECK(zppBootstrapBarrier(bs) == zppRemoteError);
  } else {
    zppTestSleep(2.0);
    /* The aborted rank closed its side: this fails at once. */
    double t0 = zppClockNow();
    CHECK(zppBootstrapAllGather(bs, v, sizeof(int)) == zppRemoteError);
    CHECK(zppClockNow() - t0 < 3.0);
  }
  zppBootstrapDestroy(bs);
  return zppTestRankResult();
}

static void testAbort(void) {
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, abortBody, NULL) == 0);
}

/* ---- ZPP_SOCKET_IFNAME picks the interface ----------------------------- */

static int ifnameBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  struct sockaddr_in root;
  zppGetAddr((const unsigned char*)id->internal + ZPP_ID_OFF_IP, &root);
  CHECK_MSG(root.sin_addr.s_addr == htonl(INADDR_LOOPBACK), "root on %s, not loopback",
            inet_ntoa(root.sin_addr));
  zppBootstrap_t* bs = NULL;
  REQUIRE(zppBootstrapInit(id, rank, nranks, "h", 20.0, &bs) == zppSuccess);
  CHECK(zppBootstrapBarrier(bs) == zppSuccess);
  zppBootstrapDestroy(bs);
  return zppTestRankResult();
}

static void testIfname(void) {
  static const char* const env[] = {"ZPP_SOCKET_IFNAME=lo", NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 3;
  o.env = env;
  o.timeoutSec = 60;
  CHECK(zppLaunch(&o, ifnameBody, NULL) == 0);

  setenv("ZPP_SOCKET_IFNAME", "nosuchif", 1);
  zppUniqueId id;
  CHECK_EQ_INT(zppBootstrapCreateRoot(&id, NULL, 0, -1, NULL, 0, 5.0), zppInvalidArgument);
  CHECK_MSG(strstr(zppLogLastError(), "ZPP_SOCKET_IFNAME=nosuchif") != NULL, "%s", zppLogLastError());
  unsetenv("ZPP_SOCKET_IFNAME");
}

/* ---- a root port held for a moment is waited for ----------------------- */

static void* releaseLater(void* arg) {
  zppTestSleep(0.5);
  close(*(int*)arg);
  return NULL;
}

static void testBindRetry(void) {
  /* Another socket has the port (as a rank's connecting socket may, for a
   * moment, when the port is in the ephemeral range). */
  int port = zppLaunchFreePort();
  REQUIRE(port > 0);
  int holder = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  REQUIRE(bind(holder, (struct sockaddr*)&a, sizeof(a)) == 0);
  pthread_t t;
  pthread_create(&t, NULL, releaseLater, &holder);
  zppUniqueId id;
  double t0 = zppClockNow();
  CHECK_EQ_INT(zppBootstrapCreateRoot(&id, "0.0.0.0", port, 1, NULL, 0, 10.0), zppSuccess);
  double dt = zppClockNow() - t0;
  pthread_join(t, NULL);
  CHECK_MSG(dt >= 0.4 && dt < 3.0, "root listening after %.2f s", dt);
  zppBootstrap_t* bs = NULL;
  zppUniqueId viaName;
  CHECK(zppBootstrapMakeId(&viaName, "127.0.0.1", port, NULL, 0) == zppSuccess);
  memcpy(viaName.internal + ZPP_ID_OFF_SECRET, id.internal + ZPP_ID_OFF_SECRET, ZPP_SECRET_BYTES);
  CHECK(zppBootstrapInit(&viaName, 0, 1, "h", 10.0, &bs) == zppSuccess);
  zppBootstrapDestroy(bs);
}

/* ---- arguments -------------------------------------------------------- */

static void testArgs(void) {
  zppUniqueId id;
  memset(&id, 0, sizeof(id));
  zppBootstrap_t* bs = (zppBootstrap_t*)0x1;
  CHECK_EQ_INT(zppBootstrapInit(&id, 0, 1, "h", 1.0, &bs), zppInvalidArgument); /* not an id */
  CHECK(bs == (zppBootstrap_t*)0x1); /* outputs untouched on failure */
  unsigned char s[4] = {1, 2, 3, 4};
  REQUIRE(zppBootstrapMakeId(&id, "127.0.0.1", 5000, s, sizeof(s)) == zppSuccess);
  CHECK_EQ_INT(zppBootstrapInit(&id, 2, 2, "h", 1.0, &bs), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapInit(&id, -1, 2, "h", 1.0, &bs), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapInit(&id, 0, 0, "h", 1.0, &bs), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapInit(&id, 0, 1, "", 1.0, &bs), zppInvalidArgument);
  char longId[100];
  memset(longId, 'a', sizeof(longId) - 1);
  longId[sizeof(longId) - 1] = '\0';
  CHECK_EQ_INT(zppBootstrapInit(&id, 0, 1, longId, 1.0, &bs), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapInit(&id, 0, 1, "h", 0.0, &bs), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapMakeId(&id, "127.0.0.1", 0, s, 4), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapMakeId(&id, "no-such-host.invalid", 5000, s, 4), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapCreateRoot(&id, NULL, 0, 0, NULL, 0, 1.0), zppInvalidArgument);
  CHECK_EQ_INT(zppBootstrapCreateRoot(&id, NULL, 0, 2, NULL, 0, -1.0), zppInvalidArgument);
  CHECK(bs == (zppBootstrap_t*)0x1);
  zppBootstrapDestroy(NULL);
  zppBootstrapAbort(NULL);
  CHECK_EQ_INT(zppBootstrapAllGather(NULL, s, 1), zppInvalidArgument);
}

int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : NULL;
#define RUN(name, fn) ZPP_TEST_RUN(only, name, fn)
  RUN("args", testArgs);
  RUN("ranks", testRanks);
  RUN("secret", testWrongSecret);
  RUN("unreachable", testUnreachable);
  RUN("mismatch", testNranksMismatch);
  RUN("missing", testMissingRank);
  RUN("dies", testRankDies);
  RUN("calls", testCallMismatch);
  RUN("abort", testAbort);
  RUN("ifname", testIfname);
  RUN("bindretry", testBindRetry);
  return zppTestExit("test_bootstrap");
}
