/*
 * TCP helpers for the bootstrap (internal). IPv4 only: the rendezvous runs on
 * cluster-internal networks where IPv4 is always present.
 *
 * Every wait goes through one zppSockWait_t: an absolute deadline (the
 * caller's timeout, not reset per call, so a sequence of waits is bounded
 * as a whole) and an abort fd that, once readable, makes every wait fail at
 * once. The helpers log the failure they detect, naming the peer, once.
 */
#ifndef ZPP_BOOTSTRAP_SOCKET_H_
#define ZPP_BOOTSTRAP_SOCKET_H_

#include <netinet/in.h>
#include <stddef.h>

#include "zpp.h"
#include "clock.h"

#define ZPP_SOCKADDR_STRLEN 32

typedef struct {
  double deadline;   /* zppClockNow() clock */
  double timeoutSec; /* what the deadline came from, for messages */
  int abortFd;       /* -1: not abortable */
  /* 1: a refused connection is final (the peer has ended) rather than a peer
   * that has not started yet; zppSockConnect then fails at once. */
  int refusalFinal;
} zppSockWait_t;

/* Monotonic seconds. */

/* "a.b.c.d:port" into buf (at least ZPP_SOCKADDR_STRLEN); returns buf. */
const char* zppSockAddrStr(const struct sockaddr_in* addr, char* buf);

/* Resolves a host name or dotted address (IPv4). port 0..65535. */
zppResult_t zppSockResolve(const char* host, int port, struct sockaddr_in* out);

/* The address other hosts reach us on: the interface ZPP_SOCKET_IFNAME names
 * (exact name, else the first whose name starts with it), else the first
 * IPv4 interface that is up and not loopback (preferring running ones that
 * are not docker / virbr bridges), else loopback. Port 0.
 * ifName (may be NULL) receives the interface name. */
zppResult_t zppSockFindInterface(struct sockaddr_in* out, char* ifName, size_t ifNameLen);

/* A non-blocking listening socket bound to addr (port 0: any free port);
 * bound receives the actual address. reuseAddr lets a well-known port be
 * reused right after a previous job (TIME_WAIT). */
zppResult_t zppSockListen(const struct sockaddr_in* addr, int reuseAddr, int* fd,
                          struct sockaddr_in* bound);

/* Connects to `to`, retrying refused or unreachable attempts until the
 * deadline: a peer may not be listening yet when we start. peerDesc names
 * the peer in the error. The socket returned is non-blocking. */
zppResult_t zppSockConnect(const struct sockaddr_in* to, const zppSockWait_t* w, const char* peerDesc,
                           int* fd);

/* Accepts one connection (non-blocking socket out). */
zppResult_t zppSockAccept(int listenFd, const zppSockWait_t* w, const char* doing, int* fd,
                          struct sockaddr_in* from);

/* Sends / receives exactly len bytes on a non-blocking socket. doing says
 * what for ("receiving the rank table from the root at a.b.c.d:p"). */
zppResult_t zppSockSendAll(int fd, const void* buf, size_t len, const zppSockWait_t* w,
                           const char* doing);
zppResult_t zppSockRecvAll(int fd, void* buf, size_t len, const zppSockWait_t* w, const char* doing);

/* Waits for events on fd (or the abort fd, or the deadline). Logs and
 * returns zppRemoteError on timeout or abort. */
zppResult_t zppSockWaitFd(int fd, short events, const zppSockWait_t* w, const char* doing);

/* Milliseconds to the deadline for poll(), at least 0, rounded up. */
int zppSockPollMs(const zppSockWait_t* w);

/* 1 if the abort fd has been signalled. */
int zppSockAborted(const zppSockWait_t* w);

void zppSockSetNoDelay(int fd);
void zppSockClose(int* fd);

#endif /* ZPP_BOOTSTRAP_SOCKET_H_ */
