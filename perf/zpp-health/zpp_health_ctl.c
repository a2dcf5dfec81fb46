/*
 * zpp-health's control plane: a TCP star from every rank to rank 0, which
 * coordinates. It is deliberately not a zpp communicator: the thing under
 * test must not carry the messages that report on it. A rank stuck inside a
 * collective (or a broken communicator) leaves its control connection and
 * its heartbeat thread working, which is how rank 0 tells a hung rank (no
 * progress) from the ranks merely waiting for it (they time out and report).
 *
 * Messages: a 12-byte header (magic with version, type, payload length) and
 * a fixed-layout payload (zpp_health.h). All ranks run the same binary, so
 * the structs are sent as they are; the magic catches a stranger.
 *
 * The heartbeat thread also is the watchdog that makes "nothing hangs" hold
 * for this process: it exits the process when rank 0 has gone away and the
 * main thread does not finish by itself, and at the hard deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "zpp_health.h"

#define ZH_MAGIC 0x7a680002u /* "zh", protocol version 2 (2: QUIT is acknowledged) */
#define ZH_MAX_MSG (1u << 20)
#define ZH_WATCHDOG_GRACE 2.0

typedef struct {
  uint32_t magic, type, len;
} zhHdr_t;

static int zhMsLeft(double deadline) {
  double left = deadline - zppClockNow();
  if (left <= 0) return 0;
  return left > 1e6 ? 1000000000 : (int)(left * 1e3) + 1;
}

static void zhConnInit(zhConn_t* k, int fd, int rank) {
  memset(k, 0, sizeof(*k));
  k->fd = fd;
  k->rank = rank;
  pthread_mutex_init(&k->wlock, NULL);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Called by the reader (the main thread) or at shutdown. The heartbeat
 * thread may be sending on this connection at the same moment: the fd is
 * closed under the write lock, so a send never lands on a descriptor number
 * that the process has meanwhile reused for something else. */
static void zhConnClose(zhConn_t* k) {
  if (k->fd >= 0) { /* fd >= 0: zhConnInit ran, the lock exists */
    pthread_mutex_lock(&k->wlock);
    close(k->fd);
    k->fd = -1;
    atomic_store(&k->closed, 1);
    pthread_mutex_unlock(&k->wlock);
  }
  atomic_store(&k->closed, 1);
  free(k->rbuf);
  k->rbuf = NULL;
  k->rlen = k->rcap = 0;
}

int zhCtlSend(zhConn_t* k, uint32_t type, const void* payload, uint32_t len) {
  /* Checked before the lock too: a connection that never opened is marked
   * closed and has no initialized lock. fd itself is read under the lock
   * only: the main thread may close it. */
  if (atomic_load(&k->closed) || atomic_load(&k->sendErr)) return -1;
  zhHdr_t h = {ZH_MAGIC, type, len};
  char* buf = malloc(sizeof h + len);
  if (buf == NULL) return -1;
  memcpy(buf, &h, sizeof h);
  if (len) memcpy(buf + sizeof h, payload, len);
  size_t total = sizeof h + len, done = 0;
  /* A peer that stops reading fills its buffer only after hours of
   * heartbeats; 10 s without room means it is gone. */
  double deadline = zppClockNow() + 10.0;
  int rc = 0;
  pthread_mutex_lock(&k->wlock);
  if (atomic_load(&k->closed) || atomic_load(&k->sendErr) || k->fd < 0) done = total, rc = -1;
  while (done < total) {
    ssize_t w = send(k->fd, buf + done, total - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      done += (size_t)w;
      continue;
    }
    int err = w < 0 ? errno : EIO;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      struct pollfd p = {.fd = k->fd, .events = POLLOUT};
      int pr = poll(&p, 1, zhMsLeft(deadline));
      if (pr > 0 || (pr < 0 && errno == EINTR)) continue; /* room, or an error the next send returns */
      err = pr == 0 ? ETIMEDOUT : errno;
    }
    rc = -1;
    /* A half-sent message breaks the framing: no more sends. The read side
     * stays open on purpose. This is often the heartbeat thread's send
     * meeting a peer that has just exited (EPIPE, ECONNRESET); the reader
     * then finds the EOF or the reset itself, which is how rank 0 tells a
     * dead rank from a hung one. Marking the whole connection closed here
     * made the reader skip it, so a dead rank's EOF was never read and it
     * was named hung 10 s later, for want of heartbeats. */
    atomic_store(&k->sendErr, err);
    break;
  }
  pthread_mutex_unlock(&k->wlock);
  free(buf);
  return rc;
}

/* A whole message in rbuf? Then hands it out. -1: garbage. */
static int zhTakeMessage(zhConn_t* k, uint32_t* type, void** payload, uint32_t* len) {
  if (k->rlen < sizeof(zhHdr_t)) return 0;
  zhHdr_t h;
  memcpy(&h, k->rbuf, sizeof h);
  if (h.magic != ZH_MAGIC || h.len > ZH_MAX_MSG) return -1;
  if (k->rlen < sizeof h + h.len) return 0;
  void* p = malloc(h.len ? h.len : 1);
  if (p == NULL) return -1;
  memcpy(p, k->rbuf + sizeof h, h.len);
  memmove(k->rbuf, k->rbuf + sizeof h + h.len, k->rlen - sizeof h - h.len);
  k->rlen -= sizeof h + h.len;
  *type = h.type;
  *payload = p;
  *len = h.len;
  return 1;
}

int zhCtlRecv(zhConn_t* k, double deadline, uint32_t* type, void** payload, uint32_t* len) {
  for (;;) {
    int got = zhTakeMessage(k, type, payload, len);
    if (got != 0) {
      if (got < 0) zhConnClose(k);
      return got;
    }
    if (atomic_load(&k->closed) || k->fd < 0) return -1;
    struct pollfd p = {.fd = k->fd, .events = POLLIN};
    int r = poll(&p, 1, zhMsLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return 0;
    if (k->rcap - k->rlen < 65536) {
      size_t cap = k->rcap ? k->rcap * 2 : 131072;
      char* nb = realloc(k->rbuf, cap);
      if (nb == NULL) return -1;
      k->rbuf = nb;
      k->rcap = cap;
    }
    ssize_t n = recv(k->fd, k->rbuf + k->rlen, k->rcap - k->rlen, MSG_DONTWAIT);
    if (n > 0) {
      k->rlen += (size_t)n;
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK)) {
      zhConnClose(k);
      return -1;
    }
  }
}

int zhCtlListen(zhCtl_t* c, int port, char* err, size_t errLen) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errLen, "socket: %s", strerror(errno));
    return -1;
  }
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t slen;
  if (v6) {
    /* Both families on one socket: ranks may reach rank 0 by either. */
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    struct sockaddr_in6* a = (struct sockaddr_in6*)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons((uint16_t)port);
    slen = sizeof *a;
  } else {
    struct sockaddr_in* a = (struct sockaddr_in*)&ss;
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons((uint16_t)port);
    slen = sizeof *a;
  }
  double deadline = zppClockNow() + 5.0;
  /* A port held a moment ago by an earlier run may still be in TIME_WAIT
   * elsewhere; retry a little, as the bootstrap root does. */
  while (bind(fd, (struct sockaddr*)&ss, slen) != 0) {
    if (errno != EADDRINUSE || zppClockNow() > deadline) {
      snprintf(err, errLen,
               "cannot listen on port %d for the control connections: %s (choose "
               "another with --ctl-port)",
               port, strerror(errno));
      close(fd);
      return -1;
    }
    usleep(100000);
  }
  if (listen(fd, 512) != 0) {
    snprintf(err, errLen, "listen on port %d: %s", port, strerror(errno));
    close(fd);
    return -1;
  }
  c->listenFd = fd;
  return 0;
}

static void zhWelcome(zhConn_t* k, int ok, const char* reason) {
  zhWelcome_t w;
  memset(&w, 0, sizeof w);
  w.ok = ok;
  snprintf(w.reason, sizeof w.reason, "%s", reason);
  zhCtlSend(k, ZH_MSG_WELCOME, &w, sizeof w);
}

int zhCtlAcceptAll(zhCtl_t* c, zhHello_t* hellos, double deadline, char* err, size_t errLen) {
  int n = c->nranks, missing = n - 1;
  c->conns = calloc((size_t)n, sizeof(zhConn_t));
  zhConn_t* pending = calloc((size_t)n + 64, sizeof(zhConn_t));
  struct pollfd* pfd = calloc((size_t)n + 65, sizeof(struct pollfd));
  if (!c->conns || !pending || !pfd) {
    snprintf(err, errLen, "out of memory");
    free(pending);
    free(pfd);
    return -1;
  }
  c->nConns = n;
  for (int r = 0; r < n; r++) c->conns[r].fd = -1, atomic_store(&c->conns[r].closed, 1);
  int nPending = 0;
  while (missing > 0 && zppClockNow() < deadline) {
    pfd[0].fd = c->listenFd;
    pfd[0].events = POLLIN;
    for (int i = 0; i < nPending; i++)
      pfd[1 + i] = (struct pollfd){.fd = pending[i].fd, .events = POLLIN};
    int ms = zhMsLeft(deadline);
    if (poll(pfd, (nfds_t)(1 + nPending), ms > 200 ? 200 : ms) <= 0) continue;
    if ((pfd[0].revents & POLLIN) && nPending < n + 63) {
      int fd = accept4(c->listenFd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) zhConnInit(&pending[nPending++], fd, -1);
    }
    for (int i = 0; i < nPending; i++) {
      if (!(pfd[1 + i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      zhConn_t* k = &pending[i];
      uint32_t type = 0, len = 0;
      void* p = NULL;
      /* The hello is small: once its first bytes are here, the rest follows. */
      int got = zhCtlRecv(k, zppClockNow() + 2.0, &type, &p, &len);
      const zhHello_t* h = p;
      char why[200] = "";
      if (got == 1 && type == ZH_MSG_HELLO && len == sizeof(zhHello_t)) {
        if (h->nranks != n)
          snprintf(why, sizeof why, "rank %d says the job has %d ranks, rank 0 says %d", h->rank,
                   h->nranks, n);
        else if (h->rank < 1 || h->rank >= n)
          snprintf(why, sizeof why, "rank %d is out of range 1..%d", h->rank, n - 1);
        else if (hellos[h->rank].pid != 0)
          snprintf(why, sizeof why, "rank %d connected twice (pids %d and %d)", h->rank,
                   hellos[h->rank].pid, h->pid);
      } else {
        snprintf(why, sizeof why, "not a zpp-health hello");
      }
      if (why[0] == '\0') {
        hellos[h->rank] = *h;
        hellos[h->rank].hostId[ZH_HOSTID_LEN - 1] = hellos[h->rank].hostname[ZH_HOSTID_LEN - 1] = '\0';
        hellos[h->rank].bootId[sizeof(h->bootId) - 1] = '\0';
        c->conns[h->rank] = *k;
        c->conns[h->rank].rank = h->rank;
        pthread_mutex_init(&c->conns[h->rank].wlock, NULL);
        zhWelcome(&c->conns[h->rank], 1, "");
        missing--;
      } else {
        fprintf(stderr, "zpp-health: rank 0: refused a control connection: %s\n", why);
        if (got == 1) zhWelcome(k, 0, why);
        zhConnClose(k);
      }
      free(p);
      pending[i] = pending[--nPending];
      pfd[1 + i] = pfd[1 + nPending];
      i--;
    }
  }
  for (int i = 0; i < nPending; i++) zhConnClose(&pending[i]);
  free(pending);
  free(pfd);
  return missing;
}

int zhCtlConnect(zhCtl_t* c, const char* host, int port, const zhHello_t* me, double deadline,
                 char* err, size_t errLen) {
  char portText[16];
  snprintf(portText, sizeof portText, "%d", port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  const char* lastErr = "no answer";
  c->conns = calloc(1, sizeof(zhConn_t));
  if (c->conns == NULL) {
    snprintf(err, errLen, "out of memory");
    return -1;
  }
  c->nConns = 1;
  /* Rank 0 may not listen yet: retry until the deadline, as the ranks of a
   * rendezvous do. */
  while (zppClockNow() < deadline) {
    int gai = getaddrinfo(host, portText, &hints, &res);
    if (gai != 0) {
      snprintf(err, errLen, "cannot resolve rank 0's address '%s': %s", host, gai_strerror(gai));
      return -1;
    }
    for (struct addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
      if (fd < 0) continue;
      int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        rc = poll(&p, 1, 1000) > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
                     soerr == 0
                 ? 0
                 : -1;
        if (soerr) errno = soerr;
      }
      if (rc != 0) {
        lastErr = strerror(errno);
        close(fd);
        continue;
      }
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      zhConnInit(&c->conns[0], fd, 0);
      freeaddrinfo(res);
      if (zhCtlSend(&c->conns[0], ZH_MSG_HELLO, me, sizeof *me) != 0) {
        snprintf(err, errLen, "sending the hello to rank 0 at %s:%d failed", host, port);
        return -1;
      }
      uint32_t type = 0, len = 0;
      void* p = NULL;
      int got = zhCtlRecv(&c->conns[0], deadline + 5.0, &type, &p, &len);
      if (got != 1 || type != ZH_MSG_WELCOME || len != sizeof(zhWelcome_t)) {
        snprintf(err, errLen, "rank 0 at %s:%d did not answer the hello%s", host, port,
                 got == 0 ? " in time" : " (is another program listening on that port? --ctl-port)");
        free(p);
        return -1;
      }
      zhWelcome_t* w = p;
      w->reason[sizeof w->reason - 1] = '\0';
      int ok = w->ok;
      if (!ok) snprintf(err, errLen, "rank 0 refused this rank: %s", w->reason);
      free(p);
      return ok ? 0 : -1;
    }
    freeaddrinfo(res);
    res = NULL;
    usleep(100000);
  }
  snprintf(err, errLen,
           "cannot reach rank 0's control port %s:%d: %s (rank 0 not started, or a "
           "firewall?)",
           host, port, lastErr);
  return -1;
}

/* ---- progress and heartbeats ------------------------------------------------ */

void zhProgressBegin(zhProgress_t* p, int testId) {
  pthread_mutex_lock(&p->mu);
  p->testId = testId;
  p->comm = NULL;
  p->since = zppClockNow();
  p->lastBytes = 0;
  pthread_mutex_unlock(&p->mu);
}

void zhProgressSetComm(zhProgress_t* p, zppComm_t comm) {
  pthread_mutex_lock(&p->mu);
  p->comm = comm;
  p->since = zppClockNow();
  p->lastBytes = 0;
  pthread_mutex_unlock(&p->mu);
}

void zhProgressTick(zhProgress_t* p) {
  pthread_mutex_lock(&p->mu);
  p->since = zppClockNow();
  pthread_mutex_unlock(&p->mu);
}

void zhProgressEnd(zhProgress_t* p) {
  pthread_mutex_lock(&p->mu);
  p->testId = -1;
  p->comm = NULL;
  pthread_mutex_unlock(&p->mu);
}

/* Bytes the transport has sent count as progress: a rank whose sends
 * advance is working, however slowly. */
static void zhHeartbeatFill(zhCtl_t* c, zhHbMsg_t* hb) {
  zhProgress_t* p = &c->progress;
  memset(hb, 0, sizeof *hb);
  hb->rank = c->rank;
  pthread_mutex_lock(&p->mu);
  hb->testId = p->testId;
  double now = zppClockNow();
  if (p->testId >= 0) {
    if (p->comm) {
      zppCommStats_t st;
      if (zppCommGetStats(p->comm, &st) == zppSuccess) {
        uint64_t b = 0;
        for (int k = 0; k < zppNumOpKinds; k++) b += st.intraNodeBytes[k] + st.interNodeBytes[k];
        if (b != p->lastBytes) {
          p->lastBytes = b;
          p->since = now;
        }
      }
    }
    hb->stalledSec = now - p->since;
    hb->bytesSent = p->lastBytes;
  }
  pthread_mutex_unlock(&p->mu);
}

/* Heartbeat thread: nothing can be said to this peer any more. Under the
 * write lock, for the fd (the main thread may close it). */
static int zhPeerGone(zhConn_t* k) {
  if (atomic_load(&k->closed) || atomic_load(&k->sendErr)) return 1;
  pthread_mutex_lock(&k->wlock);
  int gone = 1;
  if (k->fd >= 0) {
    struct pollfd p = {.fd = k->fd, .events = POLLRDHUP};
    gone = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }
  pthread_mutex_unlock(&k->wlock);
  return gone;
}

static void* zhHeartbeatMain(void* arg) {
  zhCtl_t* c = arg;
  double goneSince = 0;
  while (!atomic_load(&c->hbStop)) {
    zhHbMsg_t hb;
    zhHeartbeatFill(c, &hb);
    int gone = 1;
    if (c->rank == 0) {
      for (int r = 1; r < c->nConns; r++) {
        zhConn_t* k = &c->conns[r];
        if (!atomic_load(&k->closed)) zhCtlSend(k, ZH_MSG_HB, &hb, sizeof hb);
        gone &= zhPeerGone(k);
      }
    } else {
      zhCtlSend(&c->conns[0], ZH_MSG_HB, &hb, sizeof hb);
      gone = zhPeerGone(&c->conns[0]);
    }
    double now = zppClockNow();
    if (!atomic_load(&c->mainDone)) {
      /* Everyone this rank talks to has left and the main thread is still
       * inside a test: it is stuck (a hung collective), and no one will ever
       * tell it to stop. (An idle main thread sees the closed connection
       * itself and says why.) */
      if (!gone || hb.testId < 0)
        goneSince = 0;
      else if (goneSince == 0)
        goneSince = now;
      else if (now - goneSince > ZH_WATCHDOG_GRACE) {
        fprintf(stderr, "zpp-health: rank %d: %s gone and this rank is still inside a test: exiting\n",
                c->rank, c->rank == 0 ? "every other rank is" : "rank 0 (the coordinator) is");
        _exit(atomic_load(&c->exitCode));
      }
      if (c->hardDeadline > 0 && now > c->hardDeadline) {
        fprintf(stderr, "zpp-health: rank %d: past the time limit (+ --timeout): exiting\n", c->rank);
        _exit(atomic_load(&c->exitCode));
      }
    }
    struct timespec ts = {0, (long)(ZH_HB_PERIOD * 1e9)};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

int zhCtlStartHeartbeat(zhCtl_t* c) {
  if (pthread_create(&c->hbThread, NULL, zhHeartbeatMain, c) != 0) return -1;
  c->hbStarted = 1;
  return 0;
}

void zhCtlClose(zhCtl_t* c) {
  atomic_store(&c->mainDone, 1);
  if (c->hbStarted) {
    atomic_store(&c->hbStop, 1);
    pthread_join(c->hbThread, NULL);
    c->hbStarted = 0;
  }
  for (int i = 0; i < c->nConns; i++) zhConnClose(&c->conns[i]);
  free(c->conns);
  c->conns = NULL;
  c->nConns = 0;
  if (c->listenFd >= 0) close(c->listenFd);
  c->listenFd = -1;
}
