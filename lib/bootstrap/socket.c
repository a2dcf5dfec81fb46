#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "params.h"

const char* zppSockAddrStr(const struct sockaddr_in* addr, char* buf) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &addr->sin_addr, ip, sizeof(ip));
  snprintf(buf, ZPP_SOCKADDR_STRLEN, "%s:%u", ip, (unsigned)ntohs(addr->sin_port));
  return buf;
}

zppResult_t zppSockResolve(const char* host, int port, struct sockaddr_in* out) {
  ZPP_ARGCHECK(host != NULL && host[0] != '\0', "bootstrap: empty host name");
  ZPP_ARGCHECK(port >= 0 && port <= 65535, "bootstrap: port %d out of range 0..65535", port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL)
    ZPP_FAIL(zppInvalidArgument, BOOT, "bootstrap: cannot resolve '%s' to an IPv4 address: %s", host,
             gai_strerror(rc));
  struct sockaddr_in a;
  memcpy(&a, res->ai_addr, sizeof(a));
  freeaddrinfo(res);
  a.sin_port = htons((uint16_t)port);
  *out = a;
  return zppSuccess;
}

/* Without ZPP_SOCKET_IFNAME: a running non-loopback interface that is not a
 * local bridge (containers and VMs add docker0 / virbr0, up but reaching
 * nothing beyond this host), else any up non-loopback one, else loopback. */
static int interfaceScore(const struct ifaddrs* i) {
  if (i->ifa_flags & IFF_LOOPBACK) return 1;
  int bridge = strncmp(i->ifa_name, "docker", 6) == 0 || strncmp(i->ifa_name, "virbr", 5) == 0;
  return (i->ifa_flags & IFF_RUNNING) && !bridge ? 3 : 2;
}

zppResult_t zppSockFindInterface(struct sockaddr_in* out, char* ifName, size_t ifNameLen) {
  const char* want = zppEnvGetString("ZPP_SOCKET_IFNAME");
  struct ifaddrs* list = NULL;
  SYSCHECK(getifaddrs(&list), "getifaddrs");
  const struct ifaddrs *exact = NULL, *prefix = NULL, *best = NULL;
  int bestScore = 0;
  char seen[256] = "";
  for (const struct ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    if (strlen(seen) + strlen(i->ifa_name) + 3 < sizeof(seen)) {
      if (seen[0]) strcat(seen, ", ");
      strcat(seen, i->ifa_name);
    }
    if (want[0]) {
      if (!exact && strcmp(i->ifa_name, want) == 0) exact = i;
      if (!prefix && strncmp(i->ifa_name, want, strlen(want)) == 0) prefix = i;
    } else if (interfaceScore(i) > bestScore) {
      best = i;
      bestScore = interfaceScore(i);
    }
  }
  const struct ifaddrs* pick = want[0] ? (exact ? exact : prefix) : best;
  if (pick == NULL) {
    freeifaddrs(list);
    if (want[0])
      ZPP_FAIL(zppInvalidArgument, BOOT,
               "ZPP_SOCKET_IFNAME=%s: no IPv4 interface that is up has that name (up: %s)", want,
               seen[0] ? seen : "none");
    ZPP_FAIL(zppSystemError, BOOT, "bootstrap: no IPv4 interface is up, not even loopback");
  }
  memcpy(out, pick->ifa_addr, sizeof(*out));
  out->sin_port = 0;
  if (ifName && ifNameLen) snprintf(ifName, ifNameLen, "%s", pick->ifa_name);
  freeifaddrs(list);
  return zppSuccess;
}

zppResult_t zppSockListen(const struct sockaddr_in* addr, int reuseAddr, int* fd,
                          struct sockaddr_in* bound) {
  char as[ZPP_SOCKADDR_STRLEN];
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  SYSCHECK(s, "socket");
  int one = 1;
  if (reuseAddr) setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  /* A well-known port can be held for a moment by a client socket that
   * happens to have it as its ephemeral port (e.g. a rank retrying its
   * connection to this very port before we listen): retry a little before
   * calling the port taken. */
  double until = zppClockNow() + (addr->sin_port ? 5.0 : 0.0), nap = 0.005;
  while (bind(s, (const struct sockaddr*)addr, sizeof(*addr)) != 0) {
    int e = errno;
    if (e == EADDRINUSE && zppClockNow() < until) {
      struct timespec ts = {0, (long)(nap * 1e9)};
      nanosleep(&ts, NULL);
      nap = nap * 2 > 0.2 ? 0.2 : nap * 2;
      continue;
    }
    close(s);
    ZPP_FAIL(zppSystemError, BOOT, "bootstrap: cannot listen on %s: %s", zppSockAddrStr(addr, as),
             strerror(e));
  }
  /* A large backlog: every rank of a big job may connect to the root at once. */
  if (listen(s, 16384) != 0) {
    int e = errno;
    close(s);
    ZPP_FAIL(zppSystemError, BOOT, "bootstrap: listen on %s: %s", zppSockAddrStr(addr, as),
             strerror(e));
  }
  struct sockaddr_in b;
  socklen_t len = sizeof(b);
  if (getsockname(s, (struct sockaddr*)&b, &len) != 0) {
    int e = errno;
    close(s);
    ZPP_FAIL(zppSystemError, BOOT, "bootstrap: getsockname: %s", strerror(e));
  }
  *fd = s;
  if (bound) *bound = b;
  return zppSuccess;
}

int zppSockPollMs(const zppSockWait_t* w) {
  double left = w->deadline - zppClockNow();
  if (left <= 0) return 0;
  double ms = ceil(left * 1e3);
  return ms > 1e9 ? 1000000000 : (int)ms;
}

int zppSockAborted(const zppSockWait_t* w) {
  if (w->abortFd < 0) return 0;
  struct pollfd p = {.fd = w->abortFd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

zppResult_t zppSockWaitFd(int fd, short events, const zppSockWait_t* w, const char* doing) {
  for (;;) {
    struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = w->abortFd, .events = POLLIN}};
    int np = w->abortFd >= 0 ? 2 : 1;
    int ms = zppSockPollMs(w);
    int rc = poll(p, (nfds_t)np, ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      ZPP_FAIL(zppSystemError, BOOT, "bootstrap: poll while %s: %s", doing, strerror(errno));
    }
    if (np == 2 && p[1].revents) ZPP_FAIL(zppRemoteError, BOOT, "bootstrap: aborted while %s", doing);
    if (p[0].revents) return zppSuccess;
    if (rc == 0 && ms == 0)
      ZPP_FAIL(zppRemoteError, BOOT, "bootstrap: timed out after %.1f s (ZPP_TIMEOUT) %s",
               w->timeoutSec, doing);
  }
}

/* Sleeps until min(deadline, now + sec), waking early on abort. */
static void sleepAbortable(double sec, const zppSockWait_t* w) {
  double until = zppClockNow() + sec;
  if (until > w->deadline) until = w->deadline;
  for (;;) {
    double left = until - zppClockNow();
    if (left <= 0) return;
    struct pollfd p = {.fd = w->abortFd, .events = POLLIN};
    int rc = poll(w->abortFd >= 0 ? &p : NULL, w->abortFd >= 0 ? 1 : 0, (int)ceil(left * 1e3));
    if (rc > 0) return;
  }
}

zppResult_t zppSockConnect(const struct sockaddr_in* to, const zppSockWait_t* w, const char* peerDesc,
                           int* fd) {
  char as[ZPP_SOCKADDR_STRLEN];
  zppSockAddrStr(to, as);
  double backoff = 0.005;
  int lastErr = 0, attempts = 0;
  for (;;) {
    if (zppSockAborted(w))
      ZPP_FAIL(zppRemoteError, BOOT, "bootstrap: aborted while connecting to %s at %s", peerDesc, as);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    SYSCHECK(s, "socket");
    attempts++;
    int rc = connect(s, (const struct sockaddr*)to, sizeof(*to));
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      /* Bounded by the deadline, not the kernel's SYN retry (minutes). */
      struct pollfd p[2] = {{.fd = s, .events = POLLOUT}, {.fd = w->abortFd, .events = POLLIN}};
      int np = w->abortFd >= 0 ? 2 : 1;
      int prc;
      do {
        prc = poll(p, (nfds_t)np, zppSockPollMs(w));
      } while (prc < 0 && errno == EINTR);
      if (prc > 0 && p[0].revents) {
        socklen_t len = sizeof(err);
        if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) {
      /* Connecting to a port on this host that nobody listens on can pick
       * that very port as our own and connect to ourselves (TCP
       * simultaneous open): not a peer, and it keeps the port from the
       * process that is about to listen there. */
      struct sockaddr_in mine, theirs;
      socklen_t l1 = sizeof(mine), l2 = sizeof(theirs);
      if (getsockname(s, (struct sockaddr*)&mine, &l1) == 0 &&
          getpeername(s, (struct sockaddr*)&theirs, &l2) == 0 && mine.sin_port == theirs.sin_port &&
          mine.sin_addr.s_addr == theirs.sin_addr.s_addr) {
        err = ECONNREFUSED;
      }
    }
    if (err == 0) {
      *fd = s;
      ZPP_DBG(BOOT, "bootstrap: connected to %s at %s after %d attempt(s)", peerDesc, as, attempts);
      return zppSuccess;
    }
    close(s);
    lastErr = err;
    if (err == ECONNREFUSED && w->refusalFinal)
      ZPP_FAIL(zppInvalidUsage, BOOT,
               "bootstrap: %s at %s refuses connections: it has ended (its id was used, or its "
               "timeout passed); an id of this kind is good for one group, once",
               peerDesc, as);
    /* Only an address we can never use is final; refusals and unreachable
     * networks are what a peer that has not started yet looks like. */
    if (err == EAFNOSUPPORT || err == EINVAL || err == EBADF || err == EACCES || err == EPERM) break;
    if (zppClockNow() >= w->deadline) break;
    sleepAbortable(backoff, w);
    backoff = backoff * 2 > 0.25 ? 0.25 : backoff * 2;
  }
  if (zppSockAborted(w))
    ZPP_FAIL(zppRemoteError, BOOT, "bootstrap: aborted while connecting to %s at %s", peerDesc, as);
  ZPP_FAIL(zppRemoteError, BOOT,
           "bootstrap: cannot reach %s at %s within %.1f s (ZPP_TIMEOUT), %d attempt(s), last "
           "error: %s",
           peerDesc, as, w->timeoutSec, attempts, strerror(lastErr));
}

zppResult_t zppSockAccept(int listenFd, const zppSockWait_t* w, const char* doing, int* fd,
                          struct sockaddr_in* from) {
  for (;;) {
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int s = accept4(listenFd, (struct sockaddr*)&a, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s >= 0) {
      *fd = s;
      if (from) *from = a;
      return zppSuccess;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      ZPP_FAIL(zppSystemError, BOOT, "bootstrap: accept while %s: %s", doing, strerror(errno));
    ZPPCHECK(zppSockWaitFd(listenFd, POLLIN, w, doing));
  }
}

zppResult_t zppSockSendAll(int fd, const void* buf, size_t len, const zppSockWait_t* w,
                           const char* doing) {
  const char* p = buf;
  size_t done = 0;
  while (done < len) {
    ssize_t n = send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      ZPPCHECK(zppSockWaitFd(fd, POLLOUT, w, doing));
      continue;
    }
    ZPP_FAIL(zppRemoteError, BOOT, "bootstrap: connection lost while %s: %s", doing,
             n < 0 ? strerror(errno) : "send returned 0");
  }
  return zppSuccess;
}

zppResult_t zppSockRecvAll(int fd, void* buf, size_t len, const zppSockWait_t* w, const char* doing) {
  char* p = buf;
  size_t done = 0;
  while (done < len) {
    ssize_t n = recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n == 0)
      ZPP_FAIL(zppRemoteError, BOOT, "bootstrap: the peer closed the connection while %s", doing);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      ZPPCHECK(zppSockWaitFd(fd, POLLIN, w, doing));
      continue;
    }
    ZPP_FAIL(zppRemoteError, BOOT, "bootstrap: connection lost while %s: %s", doing, strerror(errno));
  }
  return zppSuccess;
}

void zppSockSetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void zppSockClose(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}
