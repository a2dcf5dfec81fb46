/*
 * The bootstrap's wire formats (internal to lib/bootstrap/). Every message
 * is fixed-layout, big-endian, written and read field by field (never a
 * struct copied to the wire), and carries a magic so that a stray
 * connection is told apart from a zpp peer.
 */
#ifndef ZPP_BOOTSTRAP_WIRE_H_
#define ZPP_BOOTSTRAP_WIRE_H_

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "bootstrap.h"

#define ZPP_BOOT_PROTO 1u
#define ZPP_SECRET_BYTES 32
/* Bounds what a peer can make us allocate (the rank table is 72 B a rank). */
#define ZPP_BOOT_MAX_RANKS 65536
#define ZPP_BOOT_ERRMSG_MAX 480

#define ZPP_MAGIC_ID 0x7a706964u    /* "zpid": unique id */
#define ZPP_MAGIC_HELLO 0x7a70686cu /* "zphl": rank -> root */
#define ZPP_MAGIC_REPLY 0x7a707270u /* "zprp": root -> rank */
#define ZPP_MAGIC_RING 0x7a707267u  /* "zprg": rank -> next rank, once */
#define ZPP_MAGIC_MSG 0x7a706d73u   /* "zpms": ring message header */

/* Unique id: magic, proto, ipv4, port, secret, flags; the rest zero. */
#define ZPP_ID_OFF_MAGIC 0
#define ZPP_ID_OFF_PROTO 4
#define ZPP_ID_OFF_IP 8
#define ZPP_ID_OFF_PORT 12
#define ZPP_ID_OFF_SECRET 16
#define ZPP_ID_OFF_FLAGS 48
/* The root listened before the id existed, so an address that refuses
 * connections means it has ended: fail at once, do not wait for it to start
 * (zppBootstrapIdMarkRootStarted). */
#define ZPP_ID_FLAG_ROOT_STARTED 0x1u

/* Hello, rank -> root. */
#define ZPP_HELLO_BYTES 120
/* magic 0, proto 4, secret 8, rank 40, nranks 44, ip 48, port 52, seconds the rank will still
 * wait 54 (16 bits; 0 from ranks that predate it), hostId 56 */

/* Reply header, root -> rank: magic, status, nranks, payload length. The
 * payload is the rank table (ZPP_ENTRY_BYTES per rank) on success, the
 * error text otherwise. */
#define ZPP_REPLY_BYTES 16
#define ZPP_ENTRY_BYTES 72 /* ip 0, port 4, hostId 8 */

/* Ring hello: magic, proto, secret, rank, nranks. */
#define ZPP_RING_HELLO_BYTES 48

/* Ring message header: magic, op, seq (u64), payload length (u64). */
#define ZPP_MSG_BYTES 24

static inline void zppPut32(unsigned char* p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static inline uint32_t zppGet32(const unsigned char* p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void zppPut64(unsigned char* p, uint64_t v) {
  zppPut32(p, (uint32_t)(v >> 32));
  zppPut32(p + 4, (uint32_t)v);
}
static inline uint64_t zppGet64(const unsigned char* p) {
  return ((uint64_t)zppGet32(p) << 32) | zppGet32(p + 4);
}
/* Addresses travel as they are kept: network order bytes. */
static inline void zppPutAddr(unsigned char* p, const struct sockaddr_in* a) {
  memcpy(p, &a->sin_addr.s_addr, 4);
  memcpy(p + 4, &a->sin_port, 2);
}
static inline void zppGetAddr(const unsigned char* p, struct sockaddr_in* a) {
  memset(a, 0, sizeof(*a));
  a->sin_family = AF_INET;
  memcpy(&a->sin_addr.s_addr, p, 4);
  memcpy(&a->sin_port, p + 4, 2);
}

/* Constant time, so that a refused peer learns nothing from the timing. */
static inline int zppSecretEqual(const unsigned char* a, const unsigned char* b) {
  unsigned char d = 0;
  for (int i = 0; i < ZPP_SECRET_BYTES; i++) d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

/* A host id field read from the wire: NUL-terminated inside its 64 bytes,
 * not empty. */
static inline int zppHostIdValid(const unsigned char* p) {
  return p[0] != '\0' && memchr(p, '\0', ZPP_HOSTID_MAX) != NULL;
}

/* The root's background thread (bootstrap_root.c). nranks -1: learned from
 * the first rank. */
zppResult_t zppBootRootStart(int listenFd, const struct sockaddr_in* addr, const unsigned char* secret,
                             int nranks, double timeoutSec);

/* How many roots of this process failed and still tell arriving ranks
 * why: a rank that failed waits a little for them before returning,
 * because its process (which hosts the root) may exit as soon as it
 * returns. */
int zppBootRootsTelling(void);

#endif /* ZPP_BOOTSTRAP_WIRE_H_ */
