/*
 * Bootstrap: our own small TCP rendezvous and out-of-band exchange.
 *
 * The unique id (zppUniqueId, 128 bytes) carries the root's socket address
 * and a random secret. The root (started by zppGetUniqueId, or by rank 0 of
 * an environment launch) accepts one connection per rank, refuses any that
 * does not present the secret, gathers every rank's listening address and
 * host id, and sends the whole table back. After that the ranks talk to each
 * other directly (a ring) for the small exchanges the transports need
 * (UCX worker addresses, the NCCL unique id). Every wait is bounded by the
 * timeout; an unreachable root is an error naming its address.
 */
#ifndef ZPP_BOOTSTRAP_H_
#define ZPP_BOOTSTRAP_H_

#include <stddef.h>

#include "zpp.h"

typedef struct zppBootstrap zppBootstrap_t;

#define ZPP_HOSTID_MAX 64

/* Starts a root listening on bindAddr:port (NULL / 0: the address from
 * ZPP_SOCKET_IFNAME or the first non-loopback interface, any port) for
 * nranks ranks (-1 if the count is learned from the first rank), and
 * writes the id. The root runs in a background thread and ends when all ranks
 * joined, on error, or after timeoutSec. secret may be NULL (random). */
zppResult_t zppBootstrapCreateRoot(zppUniqueId* id, const char* bindAddr, int port,
                                   const unsigned char* secret, size_t secretLen,
                                   double timeoutSec);

/* Joins the rendezvous as `rank`. hostId names the node this rank is on. */
zppResult_t zppBootstrapInit(const zppUniqueId* id, int rank, int nranks, const char* hostId,
                             double timeoutSec, zppBootstrap_t** out);

int zppBootstrapRank(const zppBootstrap_t* bs);
int zppBootstrapSize(const zppBootstrap_t* bs);
/* The host id each rank announced (valid until destroy). */
const char* zppBootstrapHostId(const zppBootstrap_t* bs, int rank);

/* In-place all-gather: rank r's bytesPerRank bytes are at data + r*bytesPerRank. */
zppResult_t zppBootstrapAllGather(zppBootstrap_t* bs, void* data, size_t bytesPerRank);
zppResult_t zppBootstrapBroadcast(zppBootstrap_t* bs, void* data, size_t bytes, int root);
zppResult_t zppBootstrapBarrier(zppBootstrap_t* bs);

/* Makes every bootstrap wait in progress or to come fail at once (thread safe). */
void zppBootstrapAbort(zppBootstrap_t* bs);
/* NULL and half-built objects are accepted. */
void zppBootstrapDestroy(zppBootstrap_t* bs);

#endif /* ZPP_BOOTSTRAP_H_ */
