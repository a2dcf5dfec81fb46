/*
 * Point-to-point: zppSend, zppRecv, groups, tagged and any-source forms.
 *
 *   test_p2p basic NRANKS [LAYOUT]   every type, odd and zero counts, pairs,
 *                                    self-sends, a ring shift and both
 *                                    directions in a group, many messages in
 *                                    flight, host streams, tags and
 *                                    any-source, point-to-point between
 *                                    collectives; checked bit for bit
 *   test_p2p mismatch                a send and a receive of other type or
 *                                    count: an error on both ranks naming both
 *   test_p2p deadpeer LAYOUT TRIALS  a peer killed mid-call: an error within
 *                                    the timeout, never a hang
 *   test_p2p args                    bad arguments, each named
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll_testlib.h"
#include "testutil.h"
#include "perf/common/launch.h"

static const size_t kCounts[] = {0, 1, 7, 1023, 100003};
enum { NCOUNTS = sizeof(kCounts) / sizeof(kCounts[0]) };

/* The message `msg` from rank `from` to rank `to`: values every type holds exactly. */
static void fillMsg(zppDataType_t t, int from, int to, int msg, size_t count, void* dst) {
  collTestFill(t, zppSum, from, 0, count, msg * 61 + to, dst);
}

static int msgOk(zppDataType_t t, int from, int to, int msg, size_t count, const void* got) {
  size_t bytes = count * zppTypeSize(t);
  void* want = malloc(bytes ? bytes : 1);
  REQUIRE(want != NULL);
  fillMsg(t, from, to, msg, count, want);
  int ok = memcmp(want, got, bytes) == 0;
  free(want);
  return ok;
}

static void* xalloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  REQUIRE(p != NULL);
  memset(p, 0xa5, bytes ? bytes : 1);
  return p;
}

/* ---- basic ------------------------------------------------------------------ */

/* Pairs (2k, 2k+1) outside groups, one direction then the other. */
static void pairs(zppComm_t comm, int rank, int n) {
  int peer = rank ^ 1;
  if (peer >= n) return;
  for (int t = 0; t < zppNumTypes; t++) {
    for (int c = 0; c < NCOUNTS; c++) {
      size_t count = kCounts[c], bytes = count * zppTypeSize((zppDataType_t)t);
      void* buf = xalloc(bytes);
      for (int dir = 0; dir < 2; dir++) {
        int sender = (dir == 0) == (rank % 2 == 0);
        int msg = t * 16 + c * 2 + dir;
        if (sender) {
          fillMsg((zppDataType_t)t, rank, peer, msg, count, buf);
          CHECK_EQ_INT(zppSend(count ? buf : NULL, count, (zppDataType_t)t, peer, comm, NULL),
                       zppSuccess);
        } else {
          CHECK_EQ_INT(zppRecv(count ? buf : NULL, count, (zppDataType_t)t, peer, comm, NULL),
                       zppSuccess);
          CHECK_MSG(msgOk((zppDataType_t)t, peer, rank, msg, count, buf),
                    "rank %d: type %d count %zu from %d differs", rank, t, count, peer);
        }
      }
      free(buf);
    }
  }
}

/* Everyone sends right and receives left at once: deadlocks unless the
 * group posts both before it waits (large messages wait for their receive). */
static void ringShift(zppComm_t comm, int rank, int n, zppHostStream_t stream) {
  int right = (rank + 1) % n, left = (rank - 1 + n) % n;
  for (int t = 0; t < zppNumTypes; t++) {
    for (int c = 0; c < NCOUNTS; c++) {
      size_t count = kCounts[c], bytes = count * zppTypeSize((zppDataType_t)t);
      void* s = xalloc(bytes);
      void* r = xalloc(bytes);
      int msg = 1000 + t * 16 + c;
      fillMsg((zppDataType_t)t, rank, right, msg, count, s);
      CHECK_EQ_INT(zppGroupStart(), zppSuccess);
      CHECK_EQ_INT(zppSend(s, count, (zppDataType_t)t, right, comm, stream), zppSuccess);
      CHECK_EQ_INT(zppRecv(r, count, (zppDataType_t)t, left, comm, stream), zppSuccess);
      CHECK_EQ_INT(zppGroupEnd(), zppSuccess);
      if (stream) CHECK_EQ_INT(zppHostStreamSynchronize(stream), zppSuccess);
      CHECK_MSG(msgOk((zppDataType_t)t, left, rank, msg, count, r),
                "rank %d: ring shift type %d count %zu from %d differs", rank, t, count, left);
      free(s);
      free(r);
    }
  }
}

/* Both directions between a pair in one group (nested, as NCCL allows), and
 * a self-send in the same group. */
static void bothWays(zppComm_t comm, int rank, int n) {
  int peer = rank ^ 1;
  if (peer >= n) peer = rank; /* the odd one out talks to itself */
  const size_t count = 300001;
  float* s = xalloc(count * sizeof(float));
  float* r = xalloc(count * sizeof(float));
  int32_t selfOut[5] = {1, 2, 3, 4, 5}, selfIn[5] = {0};
  fillMsg(zppFloat32, rank, peer, 7, count, s);
  /* With peer == rank, sends and receives to itself pair in issue order:
   * the float32 ones, then the int32 ones. */
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  CHECK_EQ_INT(zppRecv(r, count, zppFloat32, peer, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppRecv(selfIn, 5, zppInt32, rank, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppGroupEnd(), zppSuccess);
  CHECK_EQ_INT(zppSend(s, count, zppFloat32, peer, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppSend(selfOut, 5, zppInt32, rank, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppGroupEnd(), zppSuccess);
  CHECK_MSG(msgOk(zppFloat32, peer, rank, 7, count, r), "rank %d: both ways from %d differs", rank,
            peer);
  CHECK(memcmp(selfIn, selfOut, sizeof(selfIn)) == 0);
  free(s);
  free(r);
}

/* Many messages to each neighbour in one group, of many sizes (some through
 * shared-memory rings, some through UCX), matched in issue order. */
static void manyInFlight(zppComm_t comm, int rank, int n) {
  enum { M = 96 };
  int right = (rank + 1) % n, left = (rank - 1 + n) % n;
  void* s[M];
  void* r[M];
  size_t cnt[M];
  for (int m = 0; m < M; m++) {
    cnt[m] = m % 7 == 6 ? 70000 + (size_t)m : (size_t)(m * 37 % 1500);
    s[m] = xalloc(cnt[m] * 2);
    r[m] = xalloc(cnt[m] * 2);
    fillMsg(zppBfloat16, rank, right, 2000 + m, cnt[m], s[m]);
  }
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  for (int m = 0; m < M; m++) {
    CHECK_EQ_INT(zppSend(s[m], cnt[m], zppBfloat16, right, comm, NULL), zppSuccess);
    CHECK_EQ_INT(zppRecv(r[m], cnt[m], zppBfloat16, left, comm, NULL), zppSuccess);
  }
  CHECK_EQ_INT(zppGroupEnd(), zppSuccess);
  int bad = 0;
  for (int m = 0; m < M; m++) bad += !msgOk(zppBfloat16, left, rank, 2000 + m, cnt[m], r[m]);
  CHECK_MSG(bad == 0, "rank %d: %d of %d messages from %d differ", rank, bad, M, left);
  for (int m = 0; m < M; m++) free(s[m]), free(r[m]);
}

/* Tags out of order from one peer, then any-source receives of small and
 * large messages from every other rank. */
static void tagged(zppComm_t comm, int rank, int n, zppHostStream_t stream) {
  if (n >= 2 && rank < 2) {
    int32_t a[10], b[12], c[10], got[12];
    if (rank == 0) {
      fillMsg(zppInt32, 0, 1, 1, 10, a);
      fillMsg(zppInt32, 0, 1, 2, 12, b);
      fillMsg(zppInt32, 0, 1, 3, 10, c);
      /* Small: each completes without its receive (eager). */
      CHECK_EQ_INT(zppSendTagged(a, 10, zppInt32, 1, 5, comm, NULL), zppSuccess);
      CHECK_EQ_INT(zppSendTagged(b, 12, zppInt32, 1, 5, comm, NULL), zppSuccess);
      CHECK_EQ_INT(zppSendTagged(c, 10, zppInt32, 1, 3, comm, NULL), zppSuccess);
    } else {
      int src = -7;
      /* Tag 3 first, then tag 5 with count 12 (the later of the two tag-5
       * sends), then the count-10 one. */
      CHECK_EQ_INT(zppRecvTagged(got, 10, zppInt32, 0, 3, &src, comm, NULL), zppSuccess);
      CHECK(msgOk(zppInt32, 0, 1, 3, 10, got));
      CHECK_EQ_INT(src, 0);
      CHECK_EQ_INT(zppRecvTagged(got, 12, zppInt32, ZPP_ANY_SOURCE, 5, &src, comm, NULL), zppSuccess);
      CHECK(msgOk(zppInt32, 0, 1, 2, 12, got));
      CHECK_EQ_INT(src, 0);
      CHECK_EQ_INT(zppRecvTagged(got, 10, zppInt32, 0, 5, NULL, comm, NULL), zppSuccess);
      CHECK(msgOk(zppInt32, 0, 1, 1, 10, got));
    }
  }
  /* Any-source into rank 0, small (eager) and large (rendezvous). A sender
   * whose send completed may send its next message before rank 0 received
   * the others' (that one matches as well): a barrier keeps rounds apart. */
  const size_t sizes[2] = {100, 200001};
  for (int k = 0; k < 2; k++) {
    size_t count = sizes[k];
    int32_t one = 1, all = 0;
    if (rank != 0) {
      double* s = xalloc(count * sizeof(double));
      fillMsg(zppFloat64, rank, 0, 50 + k, count, s);
      CHECK_EQ_INT(zppSendTagged(s, count, zppFloat64, 0, 9, comm, stream), zppSuccess);
      if (stream) CHECK_EQ_INT(zppHostStreamSynchronize(stream), zppSuccess);
      free(s);
      CHECK_EQ_INT(zppAllReduce(&one, &all, 1, zppInt32, zppSum, comm, NULL), zppSuccess);
      continue;
    }
    double* r = xalloc(count * sizeof(double));
    int seen[ZPP_LAUNCH_MAX_RANKS] = {0};
    for (int i = 1; i < n; i++) {
      int src = -7;
      CHECK_EQ_INT(zppRecvTagged(r, count, zppFloat64, ZPP_ANY_SOURCE, 9, &src, comm, stream),
                   zppSuccess);
      if (stream) {
        CHECK_EQ_INT(zppHostStreamSynchronize(stream), zppSuccess);
      }
      CHECK_MSG(src >= 1 && src < n && !seen[src], "any-source: source %d", src);
      if (src >= 1 && src < n) {
        seen[src] = 1;
        CHECK_MSG(msgOk(zppFloat64, src, 0, 50 + k, count, r), "any-source %zu from %d differs", count,
                  src);
      }
    }
    free(r);
    CHECK_EQ_INT(zppAllReduce(&one, &all, 1, zppInt32, zppSum, comm, NULL), zppSuccess);
  }
  /* Tagged self-send in a group, with an any-source receive. */
  int32_t out[3] = {7, 8, 9}, in[3] = {0}, src = -1;
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  CHECK_EQ_INT(zppRecvTagged(in, 3, zppInt32, ZPP_ANY_SOURCE, 1, &src, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppSendTagged(out, 3, zppInt32, rank, 1, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppGroupEnd(), zppSuccess);
  CHECK(memcmp(in, out, sizeof(in)) == 0);
  CHECK_EQ_INT(src, rank);
}

/* A point-to-point message waits unreceived while a collective runs: the
 * collectives' leftover checks must not take it for theirs. */
static void betweenCollectives(zppComm_t comm, int rank, int n, zppHostStream_t stream) {
  if (n == 1) return; /* a rank reaches itself only inside a group */
  int right = (rank + 1) % n, left = (rank - 1 + n) % n;
  for (int it = 0; it < 20; it++) {
    int32_t out[16], in[16], v = rank + 1, sum = 0;
    fillMsg(zppInt32, rank, right, 3000 + it, 16, out);
    CHECK_EQ_INT(zppSend(out, 16, zppInt32, right, comm, stream), zppSuccess);
    CHECK_EQ_INT(zppAllReduce(&v, &sum, 1, zppInt32, zppSum, comm, stream), zppSuccess);
    CHECK_EQ_INT(zppRecv(in, 16, zppInt32, left, comm, stream), zppSuccess);
    CHECK_EQ_INT(zppHostStreamSynchronize(stream), zppSuccess);
    CHECK_EQ_INT(sum, n * (n + 1) / 2);
    CHECK_MSG(msgOk(zppInt32, left, rank, 3000 + it, 16, in), "rank %d: iteration %d differs", rank,
              it);
  }
}

/* A collective inside a group is refused, and the group fails with nothing
 * issued, on every rank alike: the communicator still works afterwards. */
static void collectiveInGroup(zppComm_t comm, int rank, int n) {
  int32_t x = 1, y = 0;
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  CHECK_EQ_INT(zppSend(&x, 1, zppInt32, (rank + 1) % n, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppAllReduce(&x, &y, 1, zppInt32, zppSum, comm, NULL), zppInvalidUsage);
  CHECK_EQ_INT(zppGroupEnd(), zppInvalidUsage);
  CHECK_EQ_INT(zppAllReduce(&x, &y, 1, zppInt32, zppSum, comm, NULL), zppSuccess);
  CHECK_EQ_INT(y, n);
}

static int basicBody(int rank, int n, const zppUniqueId* id, void* arg) {
  (void)arg;
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, n, *id, rank) == zppSuccess);
  zppHostStream_t stream;
  REQUIRE(zppHostStreamCreate(&stream) == zppSuccess);
  pairs(comm, rank, n);
  ringShift(comm, rank, n, NULL);
  ringShift(comm, rank, n, stream);
  bothWays(comm, rank, n);
  manyInFlight(comm, rank, n);
  tagged(comm, rank, n, NULL);
  tagged(comm, rank, n, stream);
  betweenCollectives(comm, rank, n, stream);
  collectiveInGroup(comm, rank, n);
  zppCommStats_t st;
  CHECK_EQ_INT(zppCommGetStats(comm, &st), zppSuccess);
  CHECK(n == 1 || st.calls[zppOpSendRecv] > 0);
  zppResult_t async = zppSuccess;
  CHECK_EQ_INT(zppCommGetAsyncError(comm, &async), zppSuccess);
  CHECK_MSG(async == zppSuccess, "rank %d: %s", rank, zppGetLastError(comm));
  CHECK_EQ_INT(zppHostStreamDestroy(stream), zppSuccess);
  CHECK_EQ_INT(zppCommDestroy(comm), zppSuccess);
  return zppTestRankResult();
}

/* ---- mismatch ----------------------------------------------------------------- */

typedef struct {
  const char* what;
  int tagged;
  zppDataType_t sendType, recvType;
  size_t sendCount, recvCount;
} mismatch_t;

static int mismatchBody(int rank, int n, const zppUniqueId* id, void* arg) {
  const mismatch_t* m = arg;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 5;
  REQUIRE(zppCommInitRankConfig(&comm, n, *id, rank, &cfg) == zppSuccess);
  char buf[4096];
  memset(buf, 0, sizeof(buf));
  zppResult_t res;
  if (rank == 0)
    res = m->tagged ? zppSendTagged(buf, m->sendCount, m->sendType, 1, 4, comm, NULL)
                    : zppSend(buf, m->sendCount, m->sendType, 1, comm, NULL);
  else
    res = m->tagged ? zppRecvTagged(buf, m->recvCount, m->recvType, 0, 4, NULL, comm, NULL)
                    : zppRecv(buf, m->recvCount, m->recvType, 0, comm, NULL);
  /* The sender's send may have completed before the receiver looked: then
   * its next call fails (here: a receive the other rank never sends). */
  if (rank == 0 && res == zppSuccess) res = zppRecv(buf, 1, zppInt8, 1, comm, NULL);
  const char* why = zppGetLastError(comm);
  CHECK_MSG(res == zppInvalidUsage || (rank == 0 && res == zppRemoteError),
            "%s: rank %d: result %d (%s)", m->what, rank, (int)res, why);
  /* Both sides named: ranks 0 and 1, and their types. */
  CHECK_MSG(strstr(why, "rank 0") && strstr(why, "rank 1") && strstr(why, "mismatch"),
            "%s: rank %d: %s", m->what, rank, why);
  CHECK_MSG(strstr(why, "SendRecv(") != NULL, "%s: rank %d: %s", m->what, rank, why);
  printf("%s: rank %d: %s\n", m->what, rank, why);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

static void caseMismatch(void) {
  static const mismatch_t cases[] = {
      {"type", 0, zppFloat32, zppInt32, 16, 16},
      {"count", 0, zppFloat32, zppFloat32, 10, 12},
      {"count_large", 0, zppInt8, zppInt8, 4000, 3000},
      {"tagged_type", 1, zppFloat16, zppBfloat16, 8, 8},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    for (int rep = 0; rep < 3; rep++) {
      zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
      o.nranks = 2;
      o.layout = rep == 2 ? "2x1" : NULL;
      o.timeoutSec = 60;
      CHECK_MSG(zppLaunch(&o, mismatchBody, (void*)&cases[i]) == 0, "mismatch %s, repetition %d",
                cases[i].what, rep);
    }
  }
}

/* ---- a peer that dies --------------------------------------------------------- */

typedef struct {
  volatile int result[2];
  volatile double errorAt[2];
  volatile double faultAt;
  char reason[2][300];
} deadShared_t;
static deadShared_t* dsh;

typedef struct {
  double delaySec;
  int anySource;
} deadTrial_t;

static void* killer(void* arg) {
  const deadTrial_t* t = arg;
  struct timespec ts = {0, (long)(t->delaySec * 1e9)};
  nanosleep(&ts, NULL);
  dsh->faultAt = zppClockNow();
  raise(SIGKILL);
  return NULL;
}

static int deadBody(int rank, int n, const zppUniqueId* id, void* arg) {
  const deadTrial_t* t = arg;
  zppComm_t comm;
  zppConfig_t cfg = ZPP_CONFIG_INITIALIZER;
  cfg.timeoutSec = 2;
  REQUIRE(zppCommInitRankConfig(&comm, n, *id, rank, &cfg) == zppSuccess);
  const size_t count = 1 << 20;
  float* s = xalloc(count * sizeof(float));
  float* r = xalloc(count * sizeof(float));
  zppResult_t res = zppSuccess;
  for (int it = 0; it < 100000 && res == zppSuccess; it++) {
    if (rank == 1 && it == 1) {
      pthread_t th;
      REQUIRE(pthread_create(&th, NULL, killer, (void*)t) == 0);
    }
    if (t->anySource && rank == 0) {
      res = zppRecvTagged(r, count, zppFloat32, ZPP_ANY_SOURCE, 2, NULL, comm, NULL);
    } else if (t->anySource) {
      res = zppSendTagged(s, count, zppFloat32, 0, 2, comm, NULL);
    } else {
      zppGroupStart();
      zppSend(s, count, zppFloat32, 1 - rank, comm, NULL);
      zppRecv(r, count, zppFloat32, 1 - rank, comm, NULL);
      res = zppGroupEnd();
    }
  }
  dsh->errorAt[rank] = zppClockNow();
  dsh->result[rank] = (int)res;
  snprintf(dsh->reason[rank], sizeof(dsh->reason[rank]), "%s", zppGetLastError(comm));
  zppCommDestroy(comm);
  free(s);
  free(r);
  return 0;
}

static void caseDeadPeer(const char* layout, int trials) {
  dsh = mmap(NULL, sizeof(*dsh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(dsh != MAP_FAILED);
  srand((unsigned)time(NULL) ^ (unsigned)getpid());
  double worst = 0;
  for (int i = 0; i < trials; i++) {
    memset((void*)dsh, 0, sizeof(*dsh));
    dsh->result[0] = -1;
    deadTrial_t t = {0.002 + 0.05 * (double)rand() / RAND_MAX, i % 2};
    zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
    o.nranks = 2;
    o.layout = strcmp(layout, "1") == 0 ? NULL : layout;
    o.timeoutSec = 60;
    o.quiet = 1;
    int status[2];
    o.statusOut = status;
    zppLaunch(&o, deadBody, &t);
    double since = dsh->errorAt[0] - dsh->faultAt;
    int ok = status[0] == 0 && (dsh->result[0] == zppRemoteError || dsh->result[0] == zppSystemError) &&
             since < 2.0 + 4.0 && strstr(dsh->reason[0], "rank 1") != NULL;
    CHECK_MSG(ok, "trial %d (%s): survivor status %d result %d after %.2f s: %s", i,
              t.anySource ? "any-source" : "group", status[0], dsh->result[0], since, dsh->reason[0]);
    CHECK_MSG(status[1] == 128 + SIGKILL, "trial %d: victim status %d", i, status[1]);
    if (since > worst) worst = since;
  }
  printf("deadpeer %s: %d trials, survivor's slowest error %.2f s after the kill (timeout 2 s)\n",
         layout, trials, worst);
}

/* ---- bad arguments ------------------------------------------------------------- */

static int argsBody(int rank, int n, const zppUniqueId* id, void* arg) {
  (void)arg;
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, n, *id, rank) == zppSuccess);
  int32_t x[4] = {0};
  zppHostStream_t stream;
  REQUIRE(zppHostStreamCreate(&stream) == zppSuccess);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, n, comm, NULL), zppInvalidArgument);
  CHECK(strstr(zppGetLastError(NULL), "peer") != NULL);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, -1, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppRecv(x, 4, zppInt32, ZPP_ANY_SOURCE, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppSendTagged(x, 4, zppInt32, ZPP_ANY_SOURCE, 1, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppSendTagged(x, 4, zppInt32, 1 - rank, -3, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppSend(NULL, 4, zppInt32, 1 - rank, comm, NULL), zppInvalidArgument);
  CHECK(strstr(zppGetLastError(NULL), "sendbuff is NULL") != NULL);
  CHECK_EQ_INT(zppRecv(NULL, 4, zppInt32, 1 - rank, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppSend(x, 4, (zppDataType_t)99, 1 - rank, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, 1 - rank, NULL, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, 1 - rank, comm, (zppStream_t)x), zppInvalidArgument);
  CHECK_EQ_INT(zppGroupEnd(), zppInvalidUsage);
  CHECK(strstr(zppGetLastError(NULL), "zppGroupEnd") != NULL);
  /* A rank reaches itself only inside a group. */
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, rank, comm, NULL), zppInvalidUsage);
  /* A group's host calls share one stream; a bad call fails its group. */
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, 1 - rank, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppRecv(x, 4, zppInt32, 1 - rank, comm, stream), zppSuccess);
  CHECK_EQ_INT(zppGroupEnd(), zppInvalidUsage);
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, 1 - rank, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, n + 5, comm, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppGroupEnd(), zppInvalidArgument);
  /* Nothing was issued: the communicator still works. */
  int32_t v = 1, sum = 0;
  CHECK_EQ_INT(zppAllReduce(&v, &sum, 1, zppInt32, zppSum, comm, NULL), zppSuccess);
  CHECK_EQ_INT(sum, n);
  /* Last (it breaks the communicator): a self-send with no receive. */
  CHECK_EQ_INT(zppGroupStart(), zppSuccess);
  CHECK_EQ_INT(zppSend(x, 4, zppInt32, rank, comm, NULL), zppSuccess);
  CHECK_EQ_INT(zppGroupEnd(), zppInvalidUsage);
  CHECK(strstr(zppGetLastError(comm), "itself") != NULL);
  zppHostStreamDestroy(stream);
  zppCommDestroy(comm);
  return zppTestRankResult();
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.timeoutSec = 240;
  if (strcmp(mode, "basic") == 0 && argc >= 3) {
    o.nranks = atoi(argv[2]);
    o.layout = argc > 3 ? argv[3] : NULL;
    double t0 = zppClockNow();
    CHECK_EQ_INT(zppLaunch(&o, basicBody, NULL), 0);
    printf("basic on %d ranks (%s): %.2f s\n", o.nranks, o.layout ? o.layout : "one node",
           zppClockNow() - t0);
  } else if (strcmp(mode, "mismatch") == 0) {
    caseMismatch();
  } else if (strcmp(mode, "deadpeer") == 0 && argc == 4) {
    caseDeadPeer(argv[2], atoi(argv[3]));
  } else if (strcmp(mode, "args") == 0) {
    o.nranks = 2;
    CHECK_EQ_INT(zppLaunch(&o, argsBody, NULL), 0);
  } else {
    fprintf(stderr, "usage: %s basic NRANKS [LAYOUT] | mismatch | deadpeer LAYOUT TRIALS | args\n",
            argv[0]);
    return 2;
  }
  return zppTestExit("test_p2p");
}
