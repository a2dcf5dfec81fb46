/*
 * The rendezvous root: one background thread that accepts a connection per
 * rank, refuses any that does not present the secret, collects every rank's
 * listening address and host id, and sends the table back to all.
 *
 * One poll loop over every connection: a peer that connects and then says
 * nothing (or says it slowly) never delays the others. Once something is
 * wrong for the job as a whole (nranks mismatch, a rank twice, a rank that
 * left, the timeout), every rank that joined or joins later is told why,
 * so that no rank waits out its timeout for an answer that cannot come.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "socket.h"
#include "wire.h"

/* Roots of this process that failed and are still there to tell ranks why. */
static _Atomic int rootsTelling;

int zppBootRootsTelling(void) { return atomic_load(&rootsTelling); }

/* Connections that have not yet presented the secret are held only briefly
 * and in bounded number: a real rank sends its hello right after connecting,
 * so one that has said nothing (or not all) after ROOT_HELLO_SEC is dropped,
 * and when ROOT_MAX_PENDING wait at once the oldest makes room for the new
 * one. Thousands of idle connections then cost the job nothing (they filled
 * a fixed table that never expired, and the last real rank was turned away). */
#define ROOT_MAX_PENDING 256
#define ROOT_HELLO_SEC 2.0
/* Refused connections are reported at most this often (one WARN per probe
 * made 2,698 lines for 3,000 probes). */
#define ROOT_DROP_REPORT_SEC 5.0
/* When accept() finds no free file descriptor and nothing can be dropped to
 * make one, the listening socket is left alone this long (it stays
 * readable: polling it again at once spun a core). */
#define ROOT_FD_PAUSE_SEC 0.05

typedef struct {
  int fd;
  int rank;     /* -1 until its hello is accepted */
  double since; /* when accepted */
  size_t got;
  unsigned char hello[ZPP_HELLO_BYTES];
  struct sockaddr_in from;
} rootConn_t;

typedef struct {
  int listenFd;
  char addrStr[ZPP_SOCKADDR_STRLEN];
  unsigned char secret[ZPP_SECRET_BYTES];
  int nranks;     /* -1 until the first rank says */
  int nranksFrom; /* the rank that said it, -1: the root's creator */
  double timeoutSec, deadline;
  int deadlineFromRanks; /* the deadline is the earliest a joined rank announced */
  rootConn_t* conns;
  int nconns, capConns, pending; /* pending: connections without a hello yet */
  struct pollfd* pfds;           /* capConns + 1 */
  double acceptPausedUntil;
  /* Dropped connections not yet reported, by reason. */
  int dropIdle, dropEvicted, dropGarbage, dropSecret, dropFdLimit;
  double lastDropReport;
  int* connOfRank;        /* [nranks] index into conns, -1 */
  unsigned char* entries; /* [nranks] ZPP_ENTRY_BYTES each */
  int joined;
  zppResult_t failed;
  char failMsg[ZPP_BOOT_ERRMSG_MAX];
  int told; /* ranks told of the failure */
} root_t;

static void rootFree(root_t* r) {
  if (r == NULL) return;
  for (int i = 0; i < r->nconns; i++) zppSockClose(&r->conns[i].fd);
  zppSockClose(&r->listenFd);
  free(r->conns);
  free(r->pfds);
  free(r->connOfRank);
  free(r->entries);
  free(r);
}

/* One WARN for what was dropped since the last one; `force`: now, else at
 * most every ROOT_DROP_REPORT_SEC. */
static void rootReportDrops(root_t* r, int force) {
  int n = r->dropIdle + r->dropEvicted + r->dropGarbage + r->dropSecret + r->dropFdLimit;
  if (n == 0) return;
  double now = zppClockNow();
  if (!force && now - r->lastDropReport < ROOT_DROP_REPORT_SEC) return;
  ZPP_WARN(BOOT,
           "bootstrap root at %s: dropped %d connection%s in the last %.0f s: %d silent past %.0f s, "
           "%d evicted (over %d waiting for a hello), %d not a zpp peer, %d with a wrong secret, "
           "%d for want of a file descriptor",
           r->addrStr, n, n == 1 ? "" : "s", now - r->lastDropReport, r->dropIdle, ROOT_HELLO_SEC,
           r->dropEvicted, ROOT_MAX_PENDING, r->dropGarbage, r->dropSecret, r->dropFdLimit);
  r->dropIdle = r->dropEvicted = r->dropGarbage = r->dropSecret = r->dropFdLimit = 0;
  r->lastDropReport = now;
}

/* Closes a connection that has not said hello. */
static void rootDrop(root_t* r, rootConn_t* c, int* counter) {
  zppSockClose(&c->fd);
  r->pending--;
  (*counter)++;
}

/* Best effort: a small reply fits the socket buffer, and a peer that cannot
 * take it is gone anyway. */
static void rootSendReply(root_t* r, rootConn_t* c, zppResult_t status, const void* payload, size_t len,
                          double waitSec) {
  /* Header and a short payload in one send: a message cut in two by the
   * end of this process would read as a broken connection. */
  unsigned char buf[ZPP_REPLY_BYTES + ZPP_BOOT_ERRMSG_MAX];
  zppPut32(buf, ZPP_MAGIC_REPLY);
  zppPut32(buf + 4, (uint32_t)status);
  zppPut32(buf + 8, (uint32_t)r->nranks);
  zppPut32(buf + 12, (uint32_t)len);
  size_t first = ZPP_REPLY_BYTES;
  if (len <= ZPP_BOOT_ERRMSG_MAX) {
    memcpy(buf + first, payload, len);
    first += len;
  }
  zppSockWait_t w = {zppClockNow() + waitSec, waitSec, -1, 0};
  char doing[96];
  snprintf(doing, sizeof(doing), "sending the root's reply to rank %d", c->rank);
  if (zppSockSendAll(c->fd, buf, first, &w, doing) == zppSuccess && first == ZPP_REPLY_BYTES && len)
    (void)zppSockSendAll(c->fd, payload, len, &w, doing);
}

static void rootTell(root_t* r, rootConn_t* c) {
  rootSendReply(r, c, r->failed, r->failMsg, strlen(r->failMsg), 1.0);
  zppSockClose(&c->fd);
  r->told++;
}

/* Something is wrong for the whole job: log it once here, tell every rank
 * that joined (and `offender`, not yet joined); later ranks are told as
 * they arrive. */
static void rootFail(root_t* r, rootConn_t* offender, zppResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void rootFail(root_t* r, rootConn_t* offender, zppResult_t code, const char* fmt, ...) {
  char msg[ZPP_BOOT_ERRMSG_MAX - 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  snprintf(r->failMsg, sizeof(r->failMsg), "bootstrap root at %s: %s", r->addrStr, msg);
  r->failed = code;
  ZPP_ERR(BOOT, "%s", r->failMsg);
  atomic_fetch_add(&rootsTelling, 1); /* until the thread ends */
  for (int i = 0; i < r->nconns; i++)
    if (r->conns[i].rank >= 0 && r->conns[i].fd >= 0) rootTell(r, &r->conns[i]);
  if (offender && offender->fd >= 0) rootTell(r, offender);
}

static const char* nranksSource(const root_t* r, char* buf, size_t len) {
  if (r->nranksFrom >= 0)
    snprintf(buf, len, "rank %d", r->nranksFrom);
  else
    snprintf(buf, len, "the root (created for %d ranks)", r->nranks);
  return buf;
}

static void rootHello(root_t* r, rootConn_t* c) {
  char from[ZPP_SOCKADDR_STRLEN], other[ZPP_SOCKADDR_STRLEN], src[64];
  zppSockAddrStr(&c->from, from);
  const unsigned char* h = c->hello;
  int rank = (int)zppGet32(h + 40), nranks = (int)zppGet32(h + 44);
  r->pending--; /* answered or accepted below: no longer waiting for its hello */
  if (zppGet32(h) != ZPP_MAGIC_HELLO) {
    ZPP_DBG(BOOT, "bootstrap root at %s: refused a connection from %s: not a zpp bootstrap peer",
            r->addrStr, from);
    r->dropGarbage++;
    zppSockClose(&c->fd);
    return;
  }
  if (!zppSecretEqual(h + 8, r->secret)) {
    ZPP_DBG(BOOT,
            "bootstrap root at %s: refused a connection from %s claiming rank %d: wrong secret "
            "(a unique id from another job?)",
            r->addrStr, from, rank);
    r->dropSecret++;
    char msg[ZPP_BOOT_ERRMSG_MAX];
    snprintf(msg, sizeof(msg),
             "refused by the bootstrap root at %s: wrong secret (is the unique id from this job?)",
             r->addrStr);
    rootSendReply(r, c, zppInvalidUsage, msg, strlen(msg), 1.0);
    zppSockClose(&c->fd);
    return;
  }
  /* Authenticated from here: what this peer says can fail the job. */
  if (r->failed != zppSuccess) {
    rootTell(r, c);
    return;
  }
  uint32_t proto = zppGet32(h + 4);
  if (proto != ZPP_BOOT_PROTO) {
    rootFail(r, c, zppInvalidUsage,
             "rank %d (%s) speaks bootstrap protocol %u, the root %u: mixed zpp versions", rank, from,
             proto, ZPP_BOOT_PROTO);
    return;
  }
  if (nranks < 1 || nranks > ZPP_BOOT_MAX_RANKS) {
    rootFail(r, c, zppInvalidUsage, "rank %d (%s) announced nranks=%d (must be 1..%d)", rank, from,
             nranks, ZPP_BOOT_MAX_RANKS);
    return;
  }
  if (r->nranks < 0) {
    r->connOfRank = malloc((size_t)nranks * sizeof(int));
    r->entries = calloc((size_t)nranks, ZPP_ENTRY_BYTES);
    if (r->connOfRank == NULL || r->entries == NULL) {
      rootFail(r, c, zppSystemError, "out of memory for %d ranks", nranks);
      return;
    }
    for (int i = 0; i < nranks; i++) r->connOfRank[i] = -1;
    r->nranks = nranks;
    r->nranksFrom = rank;
  } else if (nranks != r->nranks) {
    rootFail(r, c, zppInvalidUsage, "nranks mismatch: rank %d (%s) says nranks=%d but %s says %d", rank,
             from, nranks, nranksSource(r, src, sizeof(src)), r->nranks);
    return;
  }
  if (rank < 0 || rank >= r->nranks) {
    rootFail(r, c, zppInvalidUsage, "rank %d (%s) out of range 0..%d", rank, from, r->nranks - 1);
    return;
  }
  if (r->connOfRank[rank] >= 0) {
    rootFail(r, c, zppInvalidUsage, "rank %d joined twice (from %s and from %s)", rank,
             zppSockAddrStr(&r->conns[r->connOfRank[rank]].from, other), from);
    return;
  }
  if (!zppHostIdValid(h + 56)) {
    rootFail(r, c, zppInvalidUsage, "rank %d (%s) sent an empty or unterminated host id", rank, from);
    return;
  }
  c->rank = rank;
  r->connOfRank[rank] = (int)(c - r->conns);
  unsigned char* e = r->entries + (size_t)rank * ZPP_ENTRY_BYTES;
  memcpy(e, h + 48, 6); /* listening ip + port, as sent */
  memcpy(e + 8, h + 56, ZPP_HOSTID_MAX);
  r->joined++;
  /* The root gives up when the first rank would (its answer, naming the
   * missing ranks, must come before that rank's own timeout), whatever
   * timeout the root was made with. */
  unsigned waitSec = ((unsigned)h[54] << 8) | h[55];
  if (waitSec > 0) {
    double d = zppClockNow() + waitSec;
    if (!r->deadlineFromRanks || d < r->deadline) {
      r->deadline = d;
      r->timeoutSec = waitSec;
    }
    r->deadlineFromRanks = 1;
  }
  ZPP_DBG(BOOT, "bootstrap root: rank %d/%d joined from %s (%d of %d)", rank, r->nranks, from,
          r->joined, r->nranks);
}

static void rootReadable(root_t* r, rootConn_t* c) {
  if (c->rank >= 0) {
    /* A joined rank has nothing more to say: this is its end of file. */
    char from[ZPP_SOCKADDR_STRLEN];
    zppSockClose(&c->fd); /* nobody there to tell */
    r->told++;
    rootFail(r, NULL, zppRemoteError, "rank %d (%s) disconnected before all ranks joined", c->rank,
             zppSockAddrStr(&c->from, from));
    return;
  }
  ssize_t n = recv(c->fd, c->hello + c->got, ZPP_HELLO_BYTES - c->got, MSG_DONTWAIT);
  if (n > 0) {
    c->got += (size_t)n;
    if (c->got == ZPP_HELLO_BYTES) rootHello(r, c);
  } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    zppSockClose(&c->fd); /* a peer that left before saying hello */
    r->pending--;
  }
}

/* The longest-waiting connection without a hello, or NULL. */
static rootConn_t* rootOldestPending(root_t* r) {
  rootConn_t* oldest = NULL;
  for (int i = 0; i < r->nconns; i++) {
    rootConn_t* c = &r->conns[i];
    if (c->fd >= 0 && c->rank < 0 && (oldest == NULL || c->since < oldest->since)) oldest = c;
  }
  return oldest;
}

/* Drops connections silent past ROOT_HELLO_SEC; returns the time left until
 * the next one would be. */
static double rootExpire(root_t* r, double now) {
  double next = ROOT_HELLO_SEC;
  for (int i = 0; i < r->nconns; i++) {
    rootConn_t* c = &r->conns[i];
    if (c->fd < 0 || c->rank >= 0) continue;
    double left = c->since + ROOT_HELLO_SEC - now;
    if (left <= 0)
      rootDrop(r, c, &r->dropIdle);
    else if (left < next)
      next = left;
  }
  return next;
}

static int rootGrow(root_t* r) {
  if (r->nconns < r->capConns) return 1;
  int cap = r->capConns * 2;
  rootConn_t* conns = realloc(r->conns, (size_t)cap * sizeof(*conns));
  if (conns == NULL) return 0;
  r->conns = conns;
  struct pollfd* pfds = realloc(r->pfds, (size_t)(cap + 1) * sizeof(*pfds));
  if (pfds == NULL) return 0;
  r->pfds = pfds;
  r->capConns = cap;
  return 1;
}

static void rootAccept(root_t* r) {
  for (;;) {
    struct sockaddr_in from;
    socklen_t len = sizeof(from);
    int fd = accept4(r->listenFd, (struct sockaddr*)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) return;
      /* Out of descriptors: the oldest silent connection gives its own up;
       * with none to drop, wait before trying again. */
      rootConn_t* victim = rootOldestPending(r);
      if (victim == NULL) {
        r->dropFdLimit++;
        r->acceptPausedUntil = zppClockNow() + ROOT_FD_PAUSE_SEC;
        return;
      }
      rootDrop(r, victim, &r->dropFdLimit);
      continue;
    }
    rootConn_t* oldest = r->pending >= ROOT_MAX_PENDING ? rootOldestPending(r) : NULL;
    if (oldest != NULL) rootDrop(r, oldest, &r->dropEvicted);
    if (!rootGrow(r)) {
      close(fd);
      r->dropFdLimit++;
      return;
    }
    rootConn_t* c = &r->conns[r->nconns++];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->rank = -1;
    c->since = zppClockNow();
    c->from = from;
    r->pending++;
  }
}

/* Drops closed connections, keeping connOfRank right. */
static void rootCompact(root_t* r) {
  int k = 0;
  for (int i = 0; i < r->nconns; i++) {
    if (r->conns[i].fd < 0) {
      if (r->conns[i].rank >= 0) r->connOfRank[r->conns[i].rank] = -1;
      continue;
    }
    if (k != i) r->conns[k] = r->conns[i];
    if (r->conns[k].rank >= 0) r->connOfRank[r->conns[k].rank] = k;
    k++;
  }
  r->nconns = k;
}

static void rootSendTable(root_t* r) {
  size_t len = (size_t)r->nranks * ZPP_ENTRY_BYTES;
  for (int rank = 0; rank < r->nranks; rank++) {
    rootConn_t* c = &r->conns[r->connOfRank[rank]];
    /* The table can outgrow a socket buffer: give each rank a full timeout. */
    rootSendReply(r, c, zppSuccess, r->entries, len, r->timeoutSec);
    zppSockClose(&c->fd);
  }
  ZPP_INFO(BOOT, "bootstrap root at %s: all %d ranks joined", r->addrStr, r->nranks);
}

static void missingRanks(const root_t* r, char* buf, size_t len) {
  size_t o = 0;
  int listed = 0, missing = 0;
  buf[0] = '\0';
  for (int i = 0; i < r->nranks; i++) {
    if (r->connOfRank[i] >= 0) continue;
    missing++;
    if (listed < 16 && o + 16 < len) {
      o += (size_t)snprintf(buf + o, len - o, "%s%d", listed ? ", " : "", i);
      listed++;
    }
  }
  if (missing > listed && o + 24 < len) snprintf(buf + o, len - o, " and %d more", missing - listed);
}

static void* rootMain(void* arg) {
  root_t* r = arg;
  r->lastDropReport = zppClockNow();
  for (;;) {
    struct pollfd* pfds = r->pfds; /* may move when rootAccept grows it */
    if (r->failed != zppSuccess && r->nranks > 0 && r->told >= r->nranks) break;
    double left = r->deadline - zppClockNow();
    if (left <= 0) {
      if (r->failed == zppSuccess) {
        char miss[160] = "all (no rank connected)";
        if (r->nranks > 0) missingRanks(r, miss, sizeof(miss));
        char total[16] = "?";
        if (r->nranks > 0) snprintf(total, sizeof(total), "%d", r->nranks);
        rootFail(r, NULL, zppRemoteError,
                 "timed out after %.1f s (ZPP_TIMEOUT) with %d of %s ranks joined; missing: %s",
                 r->timeoutSec, r->joined, total, miss);
      }
      break;
    }
    double now = zppClockNow();
    double expiry = rootExpire(r, now);
    rootCompact(r);
    rootReportDrops(r, 0);
    if (expiry < left) left = expiry;
    int paused = now < r->acceptPausedUntil;
    if (paused && r->acceptPausedUntil - now < left) left = r->acceptPausedUntil - now;
    /* A negative fd is skipped by poll: the listener while accepting pauses. */
    pfds[0] = (struct pollfd){.fd = paused ? -1 : r->listenFd, .events = POLLIN};
    for (int i = 0; i < r->nconns; i++)
      pfds[i + 1] = (struct pollfd){.fd = r->conns[i].fd, .events = POLLIN};
    int nfds = r->nconns + 1;
    int ms = (int)(left * 1e3) + 1;
    int rc = poll(pfds, (nfds_t)nfds, ms);
    if (rc < 0 && errno != EINTR) {
      rootFail(r, NULL, zppSystemError, "poll: %s", strerror(errno));
      break;
    }
    if (rc <= 0) continue;
    /* Connections first: rootAccept may append to conns past nfds - 1. */
    for (int i = 0; i < nfds - 1; i++)
      if (pfds[i + 1].revents && r->conns[i].fd >= 0) rootReadable(r, &r->conns[i]);
    if (pfds[0].revents) rootAccept(r);
    rootCompact(r);
    if (r->failed == zppSuccess && r->nranks > 0 && r->joined == r->nranks) {
      rootSendTable(r);
      break;
    }
  }
  rootReportDrops(r, 1);
  int failed = r->failed != zppSuccess;
  rootFree(r);
  if (failed) atomic_fetch_sub(&rootsTelling, 1);
  return NULL;
}

zppResult_t zppBootRootStart(int listenFd, const struct sockaddr_in* addr, const unsigned char* secret,
                             int nranks, double timeoutSec) {
  zppResult_t res = zppSuccess;
  root_t* r = NULL;
  ZPP_CALLOC(r, 1);
  r->listenFd = -1;
  r->capConns = 64;
  ZPP_CALLOCGOTO(r->conns, r->capConns, res, err_free);
  ZPP_CALLOCGOTO(r->pfds, r->capConns + 1, res, err_free);
  zppSockAddrStr(addr, r->addrStr);
  memcpy(r->secret, secret, ZPP_SECRET_BYTES);
  r->nranks = -1;
  r->nranksFrom = -1;
  r->timeoutSec = timeoutSec;
  r->deadline = zppClockNow() + timeoutSec;
  if (nranks > 0) {
    ZPP_CALLOCGOTO(r->connOfRank, nranks, res, err_free);
    ZPP_CALLOCGOTO(r->entries, (size_t)nranks * ZPP_ENTRY_BYTES, res, err_free);
    for (int i = 0; i < nranks; i++) r->connOfRank[i] = -1;
    r->nranks = nranks;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  r->listenFd = listenFd; /* owned by the thread from here on */
  int rc = pthread_create(&thread, &attr, rootMain, r);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    r->listenFd = -1; /* still the caller's on failure */
    ZPP_FAILGOTO(zppSystemError, res, err_free, BOOT, "bootstrap: cannot start the root thread: %s",
                 strerror(rc));
  }
  return zppSuccess;
err_free:
  rootFree(r);
  return res;
}
