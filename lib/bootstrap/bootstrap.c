/*
 * The rank side of the bootstrap: join the root, then a TCP ring among the
 * ranks for small collective exchanges.
 *
 * Failure is fail-stop: the first error in a ring operation shuts both ring
 * sockets down, so the neighbours see end-of-file at once and fail in turn;
 * an error goes round the ring in milliseconds instead of each rank waiting
 * out its own timeout.
 */
#include "bootstrap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "params.h"
#include "socket.h"
#include "wire.h"

enum { OP_ALLGATHER = 1, OP_BROADCAST = 2, OP_BARRIER = 3 };

struct zppBootstrap {
  int rank, nranks;
  double timeoutSec;
  double joinTimeoutSec; /* the wait for the root at join, when longer (zppBootstrapSetJoinTimeout) */
  unsigned char secret[ZPP_SECRET_BYTES];
  struct sockaddr_in root;
  int abortPipe[2];
  _Atomic int aborted;
  _Atomic int busy;   /* threads inside a call; destroy waits for them */
  _Atomic int joined; /* zppBootstrapJoin succeeded: the ring sockets are set */
  int broken;         /* an earlier ring operation failed */
  int nextFd, prevFd;
  int standbyFd; /* the ring's listening socket, kept for one later meeting (standby root) */
  uint64_t seq;
  struct sockaddr_in* addrs; /* [nranks] listening addresses */
  char (*hostIds)[ZPP_HOSTID_MAX];
};

static zppResult_t allGather(zppBootstrap_t* bs, uint32_t op, void* data, size_t bytesPerRank,
                             const zppSockWait_t* w);

static const char* opName(uint32_t op) {
  switch (op) {
    case OP_ALLGATHER: return "allgather";
    case OP_BROADCAST: return "broadcast";
    case OP_BARRIER: return "barrier";
    default: return "unknown";
  }
}

/* ------------------------------------------------------------------------
 * Unique ids and the root
 * ---------------------------------------------------------------------- */

static void encodeId(zppUniqueId* id, const struct sockaddr_in* addr, const unsigned char* secret) {
  unsigned char* p = (unsigned char*)id->internal;
  memset(p, 0, ZPP_UNIQUE_ID_BYTES);
  zppPut32(p + ZPP_ID_OFF_MAGIC, ZPP_MAGIC_ID);
  zppPut32(p + ZPP_ID_OFF_PROTO, ZPP_BOOT_PROTO);
  memcpy(p + ZPP_ID_OFF_IP, &addr->sin_addr.s_addr, 4);
  memcpy(p + ZPP_ID_OFF_PORT, &addr->sin_port, 2);
  memcpy(p + ZPP_ID_OFF_SECRET, secret, ZPP_SECRET_BYTES);
}

void zppBootstrapIdMarkRootStarted(zppUniqueId* id) {
  unsigned char* p = (unsigned char*)id->internal;
  zppPut32(p + ZPP_ID_OFF_FLAGS, zppGet32(p + ZPP_ID_OFF_FLAGS) | ZPP_ID_FLAG_ROOT_STARTED);
}

static zppResult_t decodeId(const zppUniqueId* id, struct sockaddr_in* addr, unsigned char* secret,
                            uint32_t* flags) {
  const unsigned char* p = (const unsigned char*)id->internal;
  ZPP_ARGCHECK(zppGet32(p + ZPP_ID_OFF_MAGIC) == ZPP_MAGIC_ID,
               "bootstrap: not a zpp unique id (was it made by zppGetUniqueId and passed intact?)");
  ZPP_USAGECHECK(zppGet32(p + ZPP_ID_OFF_PROTO) == ZPP_BOOT_PROTO,
                 "bootstrap: the unique id speaks bootstrap protocol %u, this library %u",
                 zppGet32(p + ZPP_ID_OFF_PROTO), ZPP_BOOT_PROTO);
  memset(addr, 0, sizeof(*addr));
  addr->sin_family = AF_INET;
  memcpy(&addr->sin_addr.s_addr, p + ZPP_ID_OFF_IP, 4);
  memcpy(&addr->sin_port, p + ZPP_ID_OFF_PORT, 2);
  memcpy(secret, p + ZPP_ID_OFF_SECRET, ZPP_SECRET_BYTES);
  *flags = zppGet32(p + ZPP_ID_OFF_FLAGS);
  return zppSuccess;
}

/* A secret of another length is folded into ours. Not a cryptographic hash:
 * the secret travels in clear text on the network anyway; it keeps stray
 * peers and other jobs out, not someone who can sniff the network. */
static void foldSecret(const unsigned char* in, size_t len, unsigned char* out) {
  if (len == ZPP_SECRET_BYTES) {
    memcpy(out, in, ZPP_SECRET_BYTES);
    return;
  }
  for (int w = 0; w < ZPP_SECRET_BYTES / 8; w++) {
    uint64_t h = 0xcbf29ce484222325ull ^ (0x9e3779b97f4a7c15ull * (uint64_t)(w + 1));
    for (size_t i = 0; i < len; i++) h = (h ^ in[i]) * 0x100000001b3ull;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    for (int b = 0; b < 8; b++) out[w * 8 + b] = (unsigned char)(h >> (8 * b));
  }
}

zppResult_t zppBootstrapMakeId(zppUniqueId* id, const char* host, int port, const unsigned char* secret,
                               size_t secretLen) {
  ZPP_ARGCHECK(id != NULL, "bootstrap: id is NULL");
  ZPP_ARGCHECK(port > 0 && port <= 65535, "bootstrap: root port %d out of range 1..65535", port);
  ZPP_ARGCHECK(secret != NULL || secretLen == 0, "bootstrap: secret is NULL");
  struct sockaddr_in addr;
  ZPPCHECK(zppSockResolve(host, port, &addr));
  unsigned char s[ZPP_SECRET_BYTES];
  foldSecret(secret, secretLen, s);
  encodeId(id, &addr, s);
  return zppSuccess;
}

zppResult_t zppBootstrapCreateRoot(zppUniqueId* id, const char* bindAddr, int port, int nranks,
                                   const unsigned char* secret, size_t secretLen, double timeoutSec) {
  ZPP_ARGCHECK(id != NULL, "bootstrap: id is NULL");
  ZPP_ARGCHECK(port >= 0 && port <= 65535, "bootstrap: root port %d out of range 0..65535", port);
  ZPP_ARGCHECK(nranks == -1 || (nranks >= 1 && nranks <= ZPP_BOOT_MAX_RANKS),
               "bootstrap: root for nranks=%d (must be -1 or 1..%d)", nranks, ZPP_BOOT_MAX_RANKS);
  ZPP_ARGCHECK(timeoutSec > 0, "bootstrap: timeout %.3f s must be positive", timeoutSec);
  unsigned char s[ZPP_SECRET_BYTES];
  if (secret) {
    foldSecret(secret, secretLen, s);
  } else {
    size_t got = 0;
    while (got < sizeof(s)) {
      ssize_t n = getrandom(s + got, sizeof(s) - got, 0);
      if (n < 0 && errno == EINTR) continue;
      SYSCHECK(n < 0 ? -1 : 0, "getrandom");
      got += (size_t)n;
    }
  }
  /* The id must carry an address the ranks can connect to: the chosen
   * interface unless the caller named one; a wildcard bind keeps the
   * interface address in the id. */
  char ifName[64] = "";
  struct sockaddr_in ifAddr, bindTo;
  ZPPCHECK(zppSockFindInterface(&ifAddr, ifName, sizeof(ifName)));
  if (bindAddr && bindAddr[0]) {
    ZPPCHECK(zppSockResolve(bindAddr, port, &bindTo));
  } else {
    bindTo = ifAddr;
    bindTo.sin_port = htons((uint16_t)port);
  }
  int fd = -1;
  struct sockaddr_in bound;
  ZPPCHECK(zppSockListen(&bindTo, port != 0, &fd, &bound));
  struct sockaddr_in idAddr = bound;
  if (bound.sin_addr.s_addr == htonl(INADDR_ANY)) idAddr.sin_addr = ifAddr.sin_addr;
  /* The root names itself in messages as bound ("0.0.0.0:port" when on
   * every interface): the ranks may know it by another address. */
  zppResult_t res = zppBootRootStart(fd, &bound, s, nranks, timeoutSec);
  if (res != zppSuccess) {
    close(fd);
    return res;
  }
  char as[ZPP_SOCKADDR_STRLEN];
  ZPP_INFO(BOOT, "bootstrap root listening on %s (interface %s) for %d ranks, timeout %.1f s",
           zppSockAddrStr(&idAddr, as), bindAddr && bindAddr[0] ? bindAddr : ifName, nranks,
           timeoutSec);
  encodeId(id, &idAddr, s);
  return zppSuccess;
}

/* ------------------------------------------------------------------------
 * Joining
 * ---------------------------------------------------------------------- */

static zppResult_t joinRoot(zppBootstrap_t* bs, const char* hostId, const zppSockWait_t* w,
                            int* listenFd) {
  zppResult_t res = zppSuccess;
  char rootStr[ZPP_SOCKADDR_STRLEN], doing[128];
  zppSockAddrStr(&bs->root, rootStr);
  int fd = -1;
  ZPPCHECK(zppSockConnect(&bs->root, w, "the bootstrap root", &fd));

  /* Our listening address: the one that reached the root is routable from
   * the others too, unless ZPP_SOCKET_IFNAME picks an interface. */
  struct sockaddr_in me;
  if (zppEnvGetString("ZPP_SOCKET_IFNAME")[0]) {
    ZPPCHECKGOTO(zppSockFindInterface(&me, NULL, 0), res, out);
  } else {
    socklen_t len = sizeof(me);
    SYSCHECKGOTO(getsockname(fd, (struct sockaddr*)&me, &len), "getsockname", res, out);
  }
  me.sin_port = 0;
  ZPPCHECKGOTO(zppSockListen(&me, 0, listenFd, &me), res, out);

  unsigned char hello[ZPP_HELLO_BYTES];
  memset(hello, 0, sizeof(hello));
  zppPut32(hello, ZPP_MAGIC_HELLO);
  zppPut32(hello + 4, ZPP_BOOT_PROTO);
  memcpy(hello + 8, bs->secret, ZPP_SECRET_BYTES);
  zppPut32(hello + 40, (uint32_t)bs->rank);
  zppPut32(hello + 44, (uint32_t)bs->nranks);
  zppPutAddr(hello + 48, &me);
  /* How long this rank will wait: a root made by zppGetUniqueId only knew
   * ZPP_TIMEOUT, not the config's timeout of the ranks. */
  /* Rounded up: the root must not give up before this rank does; it answers
   * within the second of grace the rank gives it (below). */
  double wait = ceil(w->deadline - zppClockNow());
  uint32_t waitSec = wait < 1 ? 1 : wait > 65535 ? 65535 : (uint32_t)wait;
  hello[54] = (unsigned char)(waitSec >> 8);
  hello[55] = (unsigned char)waitSec;
  snprintf((char*)hello + 56, ZPP_HOSTID_MAX, "%s", hostId);
  snprintf(doing, sizeof(doing), "sending hello to the bootstrap root at %s", rootStr);
  ZPPCHECKGOTO(zppSockSendAll(fd, hello, sizeof(hello), w, doing), res, out);

  /* The root answers by its own deadline, which began before ours (the id
   * existed before we started), and its answer names the ranks it misses:
   * one second of grace lets that answer, rather than our bare timeout,
   * be what the user reads. */
  zppSockWait_t replyW = *w;
  replyW.deadline += 1.0;
  unsigned char hdr[ZPP_REPLY_BYTES];
  snprintf(doing, sizeof(doing), "waiting for the other ranks at the bootstrap root %s", rootStr);
  ZPPCHECKGOTO(zppSockRecvAll(fd, hdr, sizeof(hdr), &replyW, doing), res, out);
  uint32_t status = zppGet32(hdr + 4), len = zppGet32(hdr + 12);
  int nranks = (int)zppGet32(hdr + 8);
  if (zppGet32(hdr) != ZPP_MAGIC_REPLY)
    ZPP_FAILGOTO(zppRemoteError, res, out, BOOT, "bootstrap: %s is not a zpp bootstrap root", rootStr);
  if (status != zppSuccess) {
    char msg[ZPP_BOOT_ERRMSG_MAX + 1] = "";
    if (len > ZPP_BOOT_ERRMSG_MAX || status >= zppNumResults || status == zppInProgress)
      ZPP_FAILGOTO(zppRemoteError, res, out, BOOT,
                   "bootstrap: malformed error reply from the root at %s (status %u, %u bytes)",
                   rootStr, status, len);
    snprintf(doing, sizeof(doing), "reading the error from the bootstrap root %s", rootStr);
    ZPPCHECKGOTO(zppSockRecvAll(fd, msg, len, &replyW, doing), res, out);
    msg[len] = '\0';
    ZPP_FAILGOTO((zppResult_t)status, res, out, BOOT, "bootstrap: rank %d: %s", bs->rank, msg);
  }
  if (nranks != bs->nranks || len != (uint64_t)nranks * ZPP_ENTRY_BYTES)
    ZPP_FAILGOTO(zppRemoteError, res, out, BOOT,
                 "bootstrap: malformed rank table from the root at %s (%d ranks, %u bytes; expected "
                 "%d ranks)",
                 rootStr, nranks, len, bs->nranks);
  unsigned char* table = malloc(len);
  if (table == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, BOOT, "out of memory for a %u-byte rank table", len);
  snprintf(doing, sizeof(doing), "reading the rank table from the bootstrap root %s", rootStr);
  res = zppSockRecvAll(fd, table, len, &replyW, doing);
  for (int r = 0; res == zppSuccess && r < nranks; r++) {
    const unsigned char* e = table + (size_t)r * ZPP_ENTRY_BYTES;
    if (!zppHostIdValid(e + 8)) {
      ZPP_ERR(BOOT, "bootstrap: the rank table from %s has a bad host id for rank %d", rootStr, r);
      res = zppRemoteError;
      break;
    }
    zppGetAddr(e, &bs->addrs[r]);
    memcpy(bs->hostIds[r], e + 8, ZPP_HOSTID_MAX);
  }
  free(table);
out:
  zppSockClose(&fd);
  return res;
}

/* Ring listeners hold strangers briefly and few at a time: a connection
 * gets RING_GREET_SEC to greet (the real previous rank greets right after
 * connecting), at most RING_MAX_PENDING wait at once (the oldest makes room),
 * and all are read side by side, so a silent connection delays nobody. (Read
 * one after another with 5 s each, four silent connections per listener
 * failed the whole job at its timeout.) */
#define RING_MAX_PENDING 16
#define RING_GREET_SEC 2.0

typedef struct {
  int fd;
  double since;
  size_t got;
  unsigned char g[ZPP_RING_HELLO_BYTES];
  struct sockaddr_in from;
} ringPending_t;

static int ringGreetingOk(const zppBootstrap_t* bs, const unsigned char* g, int prev) {
  return zppGet32(g) == ZPP_MAGIC_RING && zppSecretEqual(g + 8, bs->secret) &&
         zppGet32(g + 4) == ZPP_BOOT_PROTO && (int)zppGet32(g + 40) == prev &&
         (int)zppGet32(g + 44) == bs->nranks;
}

static zppResult_t acceptPrev(zppBootstrap_t* bs, int listenFd, int prev, const zppSockWait_t* w,
                              const char* doing) {
  zppResult_t res = zppSuccess;
  ringPending_t pend[RING_MAX_PENDING];
  struct pollfd pfds[RING_MAX_PENDING + 2];
  int n = 0, refused = 0, silent = 0;
  double acceptPausedUntil = 0;
  while (bs->prevFd < 0) {
    double now = zppClockNow();
    double left = w->deadline - now;
    int paused = now < acceptPausedUntil;
    if (paused && acceptPausedUntil - now < left) left = acceptPausedUntil - now;
    /* Expire the silent ones; the next expiry bounds the poll. */
    for (int i = 0; i < n; i++) {
      double l = pend[i].since + RING_GREET_SEC - now;
      if (l <= 0) {
        close(pend[i].fd);
        pend[i--] = pend[--n];
        silent++;
      } else if (l < left) {
        left = l;
      }
    }
    if (left <= 0 && now >= w->deadline)
      ZPP_FAILGOTO(zppRemoteError, res, out, BOOT,
                   "bootstrap: rank %d timed out after %.1f s (ZPP_TIMEOUT) %s (dropped %d silent "
                   "and %d wrong connections meanwhile)",
                   bs->rank, w->timeoutSec, doing, silent, refused);
    int np = 0;
    pfds[np++] = (struct pollfd){.fd = paused ? -1 : listenFd, .events = POLLIN};
    pfds[np++] = (struct pollfd){.fd = w->abortFd, .events = POLLIN}; /* -1: ignored */
    for (int i = 0; i < n; i++) pfds[np++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
    int rc = poll(pfds, (nfds_t)np, left <= 0 ? 0 : (int)(left * 1e3) + 1);
    if (rc < 0 && errno != EINTR)
      ZPP_FAILGOTO(zppSystemError, res, out, BOOT, "bootstrap: poll while %s: %s", doing,
                   strerror(errno));
    if (rc <= 0) continue;
    if (pfds[1].revents)
      ZPP_FAILGOTO(zppRemoteError, res, out, BOOT, "bootstrap: aborted while %s", doing);
    for (int i = n - 1; i >= 0; i--) {
      if (!pfds[i + 2].revents) continue;
      ringPending_t* c = &pend[i];
      ssize_t got = recv(c->fd, c->g + c->got, sizeof(c->g) - c->got, MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (got > 0) c->got += (size_t)got;
      if (got > 0 && c->got < sizeof(c->g)) continue;
      if (got > 0 && ringGreetingOk(bs, c->g, prev)) {
        bs->prevFd = c->fd;
        pend[i] = pend[--n];
        break;
      }
      if (got > 0) {
        char as[ZPP_SOCKADDR_STRLEN];
        /* At DEBUG each, in the timeout's message as a count: a flood of
         * them must not flood the log. */
        ZPP_DBG(BOOT,
                "bootstrap: rank %d refused a ring connection from %s: wrong secret or not "
                "rank %d",
                bs->rank, zppSockAddrStr(&c->from, as), prev);
        refused++;
      }
      close(c->fd);
      pend[i] = pend[--n];
    }
    if (bs->prevFd >= 0 || !pfds[0].revents) continue;
    for (;;) {
      struct sockaddr_in from;
      socklen_t len = sizeof(from);
      int fd = accept4(listenFd, (struct sockaddr*)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        /* Out of descriptors, the listener stays readable: polling it again
         * at once would spin until a pending one expires. */
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          acceptPausedUntil = zppClockNow() + 0.05;
        break;
      }
      if (n == RING_MAX_PENDING) {
        int oldest = 0;
        for (int i = 1; i < n; i++)
          if (pend[i].since < pend[oldest].since) oldest = i;
        close(pend[oldest].fd);
        pend[oldest] = pend[--n];
        silent++;
      }
      pend[n++] = (ringPending_t){.fd = fd, .since = zppClockNow(), .got = 0, .from = from};
    }
  }
  if (silent + refused > 0)
    ZPP_WARN(BOOT,
             "bootstrap: rank %d dropped %d silent and %d wrong connections to its ring "
             "listener before rank %d connected",
             bs->rank, silent, refused, prev);
out:
  for (int i = 0; i < n; i++) close(pend[i].fd);
  return res;
}

/* Connects to the next rank and accepts the previous one. Connect first:
 * the next rank's listening socket exists since before the table was sent,
 * so the connection completes in its backlog even before it accepts. */
static zppResult_t connectRing(zppBootstrap_t* bs, int listenFd, const zppSockWait_t* w) {
  int next = (bs->rank + 1) % bs->nranks, prev = (bs->rank - 1 + bs->nranks) % bs->nranks;
  char desc[96], as[ZPP_SOCKADDR_STRLEN], doing[128];
  snprintf(desc, sizeof(desc), "bootstrap ring peer rank %d", next);
  ZPPCHECK(zppSockConnect(&bs->addrs[next], w, desc, &bs->nextFd));
  unsigned char h[ZPP_RING_HELLO_BYTES];
  zppPut32(h, ZPP_MAGIC_RING);
  zppPut32(h + 4, ZPP_BOOT_PROTO);
  memcpy(h + 8, bs->secret, ZPP_SECRET_BYTES);
  zppPut32(h + 40, (uint32_t)bs->rank);
  zppPut32(h + 44, (uint32_t)bs->nranks);
  snprintf(doing, sizeof(doing), "greeting rank %d (%s)", next, zppSockAddrStr(&bs->addrs[next], as));
  ZPPCHECK(zppSockSendAll(bs->nextFd, h, sizeof(h), w, doing));

  snprintf(doing, sizeof(doing), "waiting for rank %d to connect", prev);
  ZPPCHECK(acceptPrev(bs, listenFd, prev, w, doing));
  zppSockSetNoDelay(bs->nextFd);
  zppSockSetNoDelay(bs->prevFd);
  return zppSuccess;
}

zppResult_t zppBootstrapCreate(int rank, int nranks, double timeoutSec, zppBootstrap_t** out) {
  ZPP_ARGCHECK(out != NULL, "bootstrap: output is NULL");
  ZPP_ARGCHECK(nranks >= 1 && nranks <= ZPP_BOOT_MAX_RANKS, "bootstrap: nranks=%d out of range 1..%d",
               nranks, ZPP_BOOT_MAX_RANKS);
  ZPP_ARGCHECK(rank >= 0 && rank < nranks, "bootstrap: rank %d out of range 0..%d", rank, nranks - 1);
  ZPP_ARGCHECK(timeoutSec > 0, "bootstrap: timeout %.3f s must be positive", timeoutSec);
  zppResult_t res = zppSuccess;
  zppBootstrap_t* bs = NULL;
  ZPP_CALLOC(bs, 1);
  bs->abortPipe[0] = bs->abortPipe[1] = bs->nextFd = bs->prevFd = bs->standbyFd = -1;
  bs->rank = rank;
  bs->nranks = nranks;
  bs->timeoutSec = timeoutSec;
  SYSCHECKGOTO(pipe2(bs->abortPipe, O_CLOEXEC | O_NONBLOCK), "pipe2", res, err_free);
  ZPP_CALLOCGOTO(bs->addrs, nranks, res, err_free);
  ZPP_CALLOCGOTO(bs->hostIds, nranks, res, err_free);
  *out = bs;
  return zppSuccess;
err_free:
  zppBootstrapDestroy(bs);
  return res;
}

zppResult_t zppBootstrapJoin(zppBootstrap_t* bs, const zppUniqueId* id, const char* hostId) {
  zppResult_t res = zppSuccess;
  ZPP_ARGCHECK(bs != NULL && id != NULL, "bootstrap: bootstrap or id is NULL");
  ZPP_ARGCHECK(hostId != NULL && hostId[0] != '\0' && strlen(hostId) < ZPP_HOSTID_MAX,
               "bootstrap: host id must be 1..%d characters", ZPP_HOSTID_MAX - 1);
  const int rank = bs->rank, nranks = bs->nranks;
  int listenFd = -1;
  uint32_t idFlags = 0;
  ZPPCHECK(decodeId(id, &bs->root, bs->secret, &idFlags));
  zppSockWait_t w = {zppClockNow() + bs->timeoutSec, bs->timeoutSec, bs->abortPipe[0], 0};
  zppSockWait_t rootWait = w;
  if (bs->joinTimeoutSec > bs->timeoutSec) {
    rootWait.deadline = zppClockNow() + bs->joinTimeoutSec;
    rootWait.timeoutSec = bs->joinTimeoutSec;
  }
  rootWait.refusalFinal = (idFlags & ZPP_ID_FLAG_ROOT_STARTED) != 0;
  ZPPCHECKGOTO(joinRoot(bs, hostId, &rootWait, &listenFd), res, err);
  /* The ring's own timeout starts now: the meeting at the root may have
   * taken longer than one (zppBootstrapSetJoinTimeout). */
  w.deadline = zppClockNow() + bs->timeoutSec;
  if (nranks > 1) {
    ZPPCHECKGOTO(connectRing(bs, listenFd, &w), res, err);
    /* Nobody returns before everyone is in the ring: a rank that returned
     * and exited at once could take the root (in its process) down while
     * the root still sends the table to others. One byte around the ring. */
    unsigned char* tokens = NULL;
    ZPP_CALLOCGOTO(tokens, nranks, res, err);
    res = allGather(bs, OP_BARRIER, tokens, 1, &w);
    free(tokens);
    bs->seq++;
    if (res != zppSuccess) goto err;
  }
  /* Kept, not closed: the standby root's socket (zppBootstrapStandbyRoot).
   * Every rank already knows its address from the table. */
  bs->standbyFd = listenFd;
  /* From here an abort may touch the ring sockets (zppBootstrapAbort). */
  atomic_store(&bs->joined, 1);
  char as[ZPP_SOCKADDR_STRLEN];
  ZPP_INFO(BOOT, "bootstrap: rank %d/%d joined the root at %s (host id '%s')", rank, nranks,
           zppSockAddrStr(&bs->root, as), hostId);
  return zppSuccess;
err:
  zppSockClose(&listenFd);
  bs->broken = 1;
  if (!atomic_load(&bs->aborted)) { /* an abort is asked for: at once */
    /* If this process hosts a root that failed, give it a moment to tell
     * the ranks that are a little late: our caller may exit at once and
     * take the root along. Ranks later than that find no root, and fail
     * at their timeout naming its address. */
    double until = zppClockNow() + 2.0;
    while (zppBootRootsTelling() > 0 && zppClockNow() < until) usleep(1000);
  }
  return res;
}

zppResult_t zppBootstrapInit(const zppUniqueId* id, int rank, int nranks, const char* hostId,
                             double timeoutSec, zppBootstrap_t** out) {
  ZPP_ARGCHECK(id != NULL && out != NULL, "bootstrap: id or output is NULL");
  zppBootstrap_t* bs = NULL; /* the other arguments: Create and Join check them */
  ZPPCHECK(zppBootstrapCreate(rank, nranks, timeoutSec, &bs));
  zppResult_t res = zppBootstrapJoin(bs, id, hostId);
  if (res != zppSuccess) {
    zppBootstrapDestroy(bs);
    return res;
  }
  *out = bs;
  return zppSuccess;
}

/* ------------------------------------------------------------------------
 * Standby root
 * ---------------------------------------------------------------------- */

/* The bootstrap's secret folded with salt: what a standby meeting uses. */
static zppResult_t standbySecret(const zppBootstrap_t* bs, const void* salt, size_t saltLen,
                                 unsigned char* out) {
  unsigned char* buf = NULL;
  ZPP_CALLOC(buf, ZPP_SECRET_BYTES + saltLen);
  memcpy(buf, bs->secret, ZPP_SECRET_BYTES);
  if (saltLen) memcpy(buf + ZPP_SECRET_BYTES, salt, saltLen);
  foldSecret(buf, ZPP_SECRET_BYTES + saltLen, out);
  free(buf);
  return zppSuccess;
}

void zppBootstrapSetJoinTimeout(zppBootstrap_t* bs, double sec) { bs->joinTimeoutSec = sec; }

zppResult_t zppBootstrapStandbyRoot(zppBootstrap_t* bs, const void* salt, size_t saltLen, int nranks,
                                    double timeoutSec, zppUniqueId* id) {
  ZPP_ARGCHECK(nranks >= 1 && nranks <= bs->nranks, "bootstrap: standby root for %d ranks", nranks);
  if (bs->standbyFd < 0)
    ZPP_FAIL(zppInvalidUsage, BOOT,
             "bootstrap: rank %d: its standby root was used already (one meeting per bootstrap)",
             bs->rank);
  unsigned char s[ZPP_SECRET_BYTES];
  ZPPCHECK(standbySecret(bs, salt, saltLen, s));
  ZPPCHECK(zppBootRootStart(bs->standbyFd, &bs->addrs[bs->rank], s, nranks, timeoutSec));
  bs->standbyFd = -1; /* the root's now */
  encodeId(id, &bs->addrs[bs->rank], s);
  char as[ZPP_SOCKADDR_STRLEN];
  ZPP_INFO(BOOT, "bootstrap: rank %d: standby root on %s for %d ranks", bs->rank,
           zppSockAddrStr(&bs->addrs[bs->rank], as), nranks);
  return zppSuccess;
}

zppResult_t zppBootstrapStandbyId(const zppBootstrap_t* bs, int root, const void* salt, size_t saltLen,
                                  zppUniqueId* id) {
  ZPP_ARGCHECK(root >= 0 && root < bs->nranks, "bootstrap: standby root rank %d out of range", root);
  unsigned char s[ZPP_SECRET_BYTES];
  ZPPCHECK(standbySecret(bs, salt, saltLen, s));
  encodeId(id, &bs->addrs[root], s);
  return zppSuccess;
}

int zppBootstrapRank(const zppBootstrap_t* bs) { return bs->rank; }
int zppBootstrapSize(const zppBootstrap_t* bs) { return bs->nranks; }

const char* zppBootstrapHostId(const zppBootstrap_t* bs, int rank) {
  if (bs == NULL || rank < 0 || rank >= bs->nranks) return NULL;
  return bs->hostIds[rank];
}

/* ------------------------------------------------------------------------
 * Ring operations
 * ---------------------------------------------------------------------- */

typedef struct {
  unsigned char hdr[ZPP_MSG_BYTES];
  const unsigned char* data;
  size_t len, done; /* over header + data */
} sendState_t;

typedef struct {
  unsigned char hdr[ZPP_MSG_BYTES];
  unsigned char* data;
  size_t len, done;
  int checked;
} recvState_t;

static void breakRing(zppBootstrap_t* bs) {
  bs->broken = 1;
  if (bs->nextFd >= 0) shutdown(bs->nextFd, SHUT_RDWR);
  if (bs->prevFd >= 0) shutdown(bs->prevFd, SHUT_RDWR);
}

/* Progress one non-blocking send; 1 when done, 0 to wait, -1 on error. */
static int sendSome(int fd, sendState_t* s) {
  while (s->done < ZPP_MSG_BYTES + s->len) {
    const unsigned char* p =
        s->done < ZPP_MSG_BYTES ? s->hdr + s->done : s->data + (s->done - ZPP_MSG_BYTES);
    size_t n = s->done < ZPP_MSG_BYTES ? ZPP_MSG_BYTES - s->done : ZPP_MSG_BYTES + s->len - s->done;
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      s->done += (size_t)k;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return 0;
    } else {
      if (k == 0) errno = EPIPE;
      return -1;
    }
  }
  return 1;
}

/* 1 done, 0 wait, -1 connection error, -2 unexpected header. */
static int recvSome(int fd, recvState_t* r) {
  while (r->done < ZPP_MSG_BYTES + r->len) {
    unsigned char* p = r->done < ZPP_MSG_BYTES ? r->hdr + r->done : r->data + (r->done - ZPP_MSG_BYTES);
    size_t n = r->done < ZPP_MSG_BYTES ? ZPP_MSG_BYTES - r->done : ZPP_MSG_BYTES + r->len - r->done;
    ssize_t k = recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      r->done += (size_t)k;
      if (r->done == ZPP_MSG_BYTES && !r->checked) {
        r->checked = 1;
        return -2; /* caller validates the header, then calls again */
      }
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return 0;
    } else {
      if (k == 0) errno = 0; /* end of file */
      return -1;
    }
  }
  return 1;
}

/* One ring step: send `slen` bytes to the next rank and receive `rlen`
 * from the previous one at the same time (either may be absent, NULL), so
 * that messages larger than a socket buffer cannot deadlock the ring. */
static zppResult_t ringStep(zppBootstrap_t* bs, uint32_t op, const zppSockWait_t* w, const void* sbuf,
                            size_t slen, void* rbuf, size_t rlen) {
  int next = (bs->rank + 1) % bs->nranks, prev = (bs->rank - 1 + bs->nranks) % bs->nranks;
  sendState_t s = {.data = sbuf, .len = slen};
  recvState_t r = {.data = rbuf, .len = rlen};
  int sending = sbuf != NULL, receiving = rbuf != NULL;
  zppPut32(s.hdr, ZPP_MAGIC_MSG);
  zppPut32(s.hdr + 4, op);
  zppPut64(s.hdr + 8, bs->seq);
  zppPut64(s.hdr + 16, slen);
  while (sending || receiving) {
    if (sending) {
      int k = sendSome(bs->nextFd, &s);
      if (k < 0)
        ZPP_FAIL(zppRemoteError, BOOT, "bootstrap %s: rank %d lost its connection to rank %d: %s",
                 opName(op), bs->rank, next, strerror(errno));
      if (k == 1) sending = 0;
    }
    if (receiving) {
      int k = recvSome(bs->prevFd, &r);
      if (k == -2) {
        uint32_t magic = zppGet32(r.hdr), rop = zppGet32(r.hdr + 4);
        uint64_t rseq = zppGet64(r.hdr + 8), rl = zppGet64(r.hdr + 16);
        if (magic != ZPP_MAGIC_MSG || rop != op || rseq != bs->seq || rl != rlen)
          ZPP_FAIL(zppInvalidUsage, BOOT,
                   "bootstrap %s #%llu: rank %d got %s #%llu of %llu bytes from rank %d, expected "
                   "%zu bytes: the ranks are making different bootstrap calls",
                   opName(op), (unsigned long long)bs->seq, bs->rank, opName(rop),
                   (unsigned long long)rseq, (unsigned long long)rl, prev, rlen);
        k = recvSome(bs->prevFd, &r);
      }
      if (k == -1)
        ZPP_FAIL(zppRemoteError, BOOT,
                 "bootstrap %s: rank %d lost its connection to rank %d (%s): did rank %d fail or exit?",
                 opName(op), bs->rank, prev, errno ? strerror(errno) : "end of file", prev);
      if (k == 1) receiving = 0;
    }
    if (!sending && !receiving) break;
    struct pollfd p[3];
    int np = 0;
    if (sending) p[np++] = (struct pollfd){.fd = bs->nextFd, .events = POLLOUT};
    if (receiving) p[np++] = (struct pollfd){.fd = bs->prevFd, .events = POLLIN};
    p[np++] = (struct pollfd){.fd = bs->abortPipe[0], .events = POLLIN};
    int ms = zppSockPollMs(w);
    int rc = poll(p, (nfds_t)np, ms);
    if (rc < 0 && errno != EINTR)
      ZPP_FAIL(zppSystemError, BOOT, "bootstrap %s: poll: %s", opName(op), strerror(errno));
    if (p[np - 1].revents || atomic_load(&bs->aborted))
      ZPP_FAIL(zppRemoteError, BOOT, "bootstrap %s: rank %d aborted", opName(op), bs->rank);
    if (rc == 0 && ms == 0)
      ZPP_FAIL(zppRemoteError, BOOT,
               "bootstrap %s: rank %d timed out after %.1f s (ZPP_TIMEOUT) %s rank %d", opName(op),
               bs->rank, w->timeoutSec, receiving ? "waiting for" : "sending to",
               receiving ? prev : next);
  }
  return zppSuccess;
}

/* Every public operation: count ourselves in (destroy waits for us), fail
 * fast once aborted or broken, and break the ring on failure. */
static zppResult_t opEnter(zppBootstrap_t* bs, uint32_t op) {
  ZPP_ARGCHECK(bs != NULL, "bootstrap %s: NULL bootstrap", opName(op));
  atomic_fetch_add(&bs->busy, 1);
  if (atomic_load(&bs->aborted)) {
    atomic_fetch_sub(&bs->busy, 1);
    ZPP_FAIL(zppRemoteError, BOOT, "bootstrap %s: rank %d was aborted", opName(op), bs->rank);
  }
  if (bs->broken) {
    atomic_fetch_sub(&bs->busy, 1);
    ZPP_FAIL(zppRemoteError, BOOT, "bootstrap %s: rank %d: an earlier bootstrap operation failed",
             opName(op), bs->rank);
  }
  return zppSuccess;
}

static zppResult_t opLeave(zppBootstrap_t* bs, zppResult_t res) {
  if (res != zppSuccess) breakRing(bs);
  bs->seq++;
  atomic_fetch_sub(&bs->busy, 1);
  return res;
}

static zppResult_t allGather(zppBootstrap_t* bs, uint32_t op, void* data, size_t bytesPerRank,
                             const zppSockWait_t* w) {
  unsigned char* d = data;
  int n = bs->nranks;
  /* Step s: pass on the block that came from rank - s. */
  for (int s = 0; s < n - 1; s++) {
    int sendBlock = (bs->rank - s + n) % n, recvBlock = (bs->rank - s - 1 + n) % n;
    ZPPCHECK(ringStep(bs, op, w, d + (size_t)sendBlock * bytesPerRank, bytesPerRank,
                      d + (size_t)recvBlock * bytesPerRank, bytesPerRank));
  }
  return zppSuccess;
}

zppResult_t zppBootstrapAllGather(zppBootstrap_t* bs, void* data, size_t bytesPerRank) {
  ZPPCHECK(opEnter(bs, OP_ALLGATHER));
  zppResult_t res = zppSuccess;
  if (data == NULL && bytesPerRank > 0)
    ZPP_FAILGOTO(zppInvalidArgument, res, out, BOOT, "bootstrap allgather: data is NULL");
  if (bytesPerRank > ((size_t)1 << 40) / (size_t)bs->nranks)
    ZPP_FAILGOTO(zppInvalidArgument, res, out, BOOT,
                 "bootstrap allgather: %zu bytes per rank is too much", bytesPerRank);
  if (bs->nranks > 1 && bytesPerRank > 0) {
    zppSockWait_t w = {zppClockNow() + bs->timeoutSec, bs->timeoutSec, bs->abortPipe[0], 0};
    res = allGather(bs, OP_ALLGATHER, data, bytesPerRank, &w);
  }
out:
  return opLeave(bs, res);
}

zppResult_t zppBootstrapBroadcast(zppBootstrap_t* bs, void* data, size_t bytes, int root) {
  ZPPCHECK(opEnter(bs, OP_BROADCAST));
  zppResult_t res = zppSuccess;
  if (root < 0 || root >= bs->nranks)
    ZPP_FAILGOTO(zppInvalidArgument, res, out, BOOT, "bootstrap broadcast: root %d out of range 0..%d",
                 root, bs->nranks - 1);
  if (data == NULL && bytes > 0)
    ZPP_FAILGOTO(zppInvalidArgument, res, out, BOOT, "bootstrap broadcast: data is NULL");
  if (bs->nranks > 1) {
    zppSockWait_t w = {zppClockNow() + bs->timeoutSec, bs->timeoutSec, bs->abortPipe[0], 0};
    int last = (root - 1 + bs->nranks) % bs->nranks;
    /* Along the ring from the root; a zero-byte message still carries the
     * header, so that mismatched calls are caught. */
    static unsigned char none;
    void* buf = bytes ? data : &none;
    if (bs->rank != root) ZPPCHECKGOTO(ringStep(bs, OP_BROADCAST, &w, NULL, 0, buf, bytes), res, out);
    if (bs->rank != last) ZPPCHECKGOTO(ringStep(bs, OP_BROADCAST, &w, buf, bytes, NULL, 0), res, out);
  }
out:
  return opLeave(bs, res);
}

zppResult_t zppBootstrapBarrier(zppBootstrap_t* bs) {
  ZPPCHECK(opEnter(bs, OP_BARRIER));
  zppResult_t res = zppSuccess;
  if (bs->nranks > 1) {
    /* A rank leaves once it has heard from every other: one byte each. */
    unsigned char* tokens = calloc((size_t)bs->nranks, 1);
    if (tokens == NULL) {
      ZPP_ERR(BOOT, "bootstrap barrier: out of memory");
      res = zppSystemError;
    } else {
      zppSockWait_t w = {zppClockNow() + bs->timeoutSec, bs->timeoutSec, bs->abortPipe[0], 0};
      res = allGather(bs, OP_BARRIER, tokens, 1, &w);
      free(tokens);
    }
  }
  return opLeave(bs, res);
}

void zppBootstrapAbort(zppBootstrap_t* bs) {
  if (bs == NULL) return;
  if (atomic_exchange(&bs->aborted, 1)) return;
  if (bs->abortPipe[1] >= 0) {
    ssize_t n = write(bs->abortPipe[1], "a", 1);
    (void)n;
  }
  /* Also tell the neighbours now, rather than at their timeout. shutdown,
   * not close: the fds may be in use by the thread we are unblocking. Not
   * before the join is done: the joining thread is still setting them (its
   * waits end on the pipe). */
  if (!atomic_load(&bs->joined)) return;
  if (bs->nextFd >= 0) shutdown(bs->nextFd, SHUT_RDWR);
  if (bs->prevFd >= 0) shutdown(bs->prevFd, SHUT_RDWR);
}

void zppBootstrapDestroy(zppBootstrap_t* bs) {
  if (bs == NULL) return;
  if (atomic_load(&bs->busy) > 0) {
    /* Another thread is still inside a call: stop it, and wait for it to
     * leave before freeing what it uses. */
    zppBootstrapAbort(bs);
    double until = zppClockNow() + 10.0;
    while (atomic_load(&bs->busy) > 0 && zppClockNow() < until) sched_yield(), usleep(1000);
    if (atomic_load(&bs->busy) > 0) {
      ZPP_ERR(BOOT,
              "bootstrap: rank %d: a thread is still inside a bootstrap call after abort; "
              "leaking it rather than freeing it under that thread",
              bs->rank);
      return;
    }
  }
  zppSockClose(&bs->nextFd);
  zppSockClose(&bs->prevFd);
  zppSockClose(&bs->standbyFd);
  zppSockClose(&bs->abortPipe[0]);
  zppSockClose(&bs->abortPipe[1]);
  free(bs->addrs);
  free(bs->hostIds);
  free(bs);
}
