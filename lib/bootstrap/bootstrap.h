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
#include "topology/topo.h" /* ZPP_HOSTID_MAX: the bootstrap carries host ids */

typedef struct zppBootstrap zppBootstrap_t;

/* Starts a root listening on bindAddr:port (NULL / 0: the address from
 * ZPP_SOCKET_IFNAME or the first non-loopback interface, any port;
 * "0.0.0.0": every interface, the id then carries the chosen interface's
 * address) for nranks ranks (-1 if the count is learned from the first
 * rank), and writes the id. The root runs in a background thread and ends
 * when all ranks joined, or after telling every rank why not, or after
 * timeoutSec. secret may be NULL (random, from getrandom); a secret of
 * another length than 32 bytes is folded into 32. */
zppResult_t zppBootstrapCreateRoot(zppUniqueId* id, const char* bindAddr, int port, int nranks,
                                   const unsigned char* secret, size_t secretLen, double timeoutSec);

/* Writes the id of a root that someone else opens at host:port with this
 * secret (folded as above): how the ranks of an environment launch find
 * the root that rank 0 opens. Resolves host; does not connect. */
zppResult_t zppBootstrapMakeId(zppUniqueId* id, const char* host, int port, const unsigned char* secret,
                               size_t secretLen);

/* Marks an id whose root was listening before the id was made (as
 * zppBootstrapCreateRoot's are): a rank that finds the address refusing
 * connections then fails at once with zppInvalidUsage, since that root has
 * ended (every rank joined, or its timeout passed), rather than retrying as
 * for a root that has not started yet. How zppCommGrow's id is used once. */
void zppBootstrapIdMarkRootStarted(zppUniqueId* id);

/* Joins the rendezvous as `rank`: connects to the root (retrying until the
 * timeout, since the root may start after us), then to the neighbours in a
 * ring. hostId names the node this rank is on. Any error (wrong secret,
 * nranks mismatch between ranks, a rank missing at the timeout) comes back
 * to every rank, with its reason logged. */
zppResult_t zppBootstrapInit(const zppUniqueId* id, int rank, int nranks, const char* hostId,
                             double timeoutSec, zppBootstrap_t** out);
/* The same in two steps, for a join that another thread may need to abort
 * (a communicator created in the background): Create allocates (no waits),
 * Join does the waiting; zppBootstrapAbort from any thread ends a Join in
 * progress. After a failed Join the bootstrap is broken; destroy it. */
zppResult_t zppBootstrapCreate(int rank, int nranks, double timeoutSec, zppBootstrap_t** out);
zppResult_t zppBootstrapJoin(zppBootstrap_t* bs, const zppUniqueId* id, const char* hostId);
/* Before the join: it waits up to sec for the root and the other ranks there
 * (when longer than the bootstrap's timeout, which bounds everything else). */
void zppBootstrapSetJoinTimeout(zppBootstrap_t* bs, double sec);

int zppBootstrapRank(const zppBootstrap_t* bs);
int zppBootstrapSize(const zppBootstrap_t* bs);
/* The host id each rank announced (valid until destroy). */
const char* zppBootstrapHostId(const zppBootstrap_t* bs, int rank);

/* Ring operations among the ranks: every rank makes the same calls in the
 * same order with the same sizes (a mismatch is detected and is an error on
 * both sides). Each call is bounded by the timeout as a whole. After an
 * error the bootstrap is broken: later calls fail at once, and the failure
 * reaches the other ranks through closed connections rather than timeouts.
 * One call at a time per bootstrap (not thread safe, except Abort). */
/* In-place all-gather: rank r's bytesPerRank bytes are at data + r*bytesPerRank. */
zppResult_t zppBootstrapAllGather(zppBootstrap_t* bs, void* data, size_t bytesPerRank);
zppResult_t zppBootstrapBroadcast(zppBootstrap_t* bs, void* data, size_t bytes, int root);
zppResult_t zppBootstrapBarrier(zppBootstrap_t* bs);

/* The standby root: a rendezvous prepared at init for later, when the ring
 * may be broken (a rank died, or the bootstrap was aborted) and some of the
 * ranks must meet without the others: how zppCommShrink's survivors find
 * each other. Every rank keeps its ring listening socket, whose address every
 * rank knows from the table. Rank `root` of the meeting starts a root on its
 * socket for nranks ranks (zppBootstrapStandbyRoot); the others make the id
 * of that root (zppBootstrapStandbyId); all then join it with
 * zppBootstrapInit. The secret is the bootstrap's folded with salt: ranks
 * that pass different salts (for a shrink: different exclude lists) are
 * refused by the root, and their meeting fails, never forms two groups. One
 * meeting per bootstrap; both work after an abort. The root waits timeoutSec
 * for the members (a meeting may need longer than the bootstrap's timeout:
 * zppCommShrink's). */
zppResult_t zppBootstrapStandbyRoot(zppBootstrap_t* bs, const void* salt, size_t saltLen, int nranks,
                                    double timeoutSec, zppUniqueId* id);
zppResult_t zppBootstrapStandbyId(const zppBootstrap_t* bs, int root, const void* salt, size_t saltLen,
                                  zppUniqueId* id);

/* Makes every bootstrap wait in progress or to come fail at once (thread safe). */
void zppBootstrapAbort(zppBootstrap_t* bs);
/* NULL and half-built objects are accepted. */
void zppBootstrapDestroy(zppBootstrap_t* bs);

#endif /* ZPP_BOOTSTRAP_H_ */
