/*
 * Per-communicator accounting, for zppCommGetStats / zppCommResetStats
 * (api/stats_api.c): calls per kind, and bytes inside and across nodes per
 * kind: the host transport's as it sends, the device path's through
 * zppStatsCountDevice.
 */
#ifndef ZPP_STATS_H_
#define ZPP_STATS_H_

#include <stdint.h>

#include "zpp.h"

struct zppComm;

void zppStatsRead(const struct zppComm* comm, zppCommStats_t* stats);
void zppStatsReset(struct zppComm* comm);

/*
 * The device path's bytes. NCCL does not say what it sends, so every device
 * issue point (collectives/coll_device.c, zeropp_device.c, p2p_device.c)
 * counts here, once its work is queued, the bytes this rank hands over for
 * each peer; a peer on another node (the host transport's rule:
 * topo->nodeOf) makes them inter-node bytes. The rules, one place (W ranks,
 * s the type size, me this rank; docs/gpu.md repeats them):
 *
 * Exact (grouped ncclSend/ncclRecv: what goes to each peer):
 *   qgZ        every packed segment run of its two all-to-alls: N * P(chunk)
 *              to each other rank of the node, P(chunk) to the same local
 *              rank on each other node, per pipeline chunk
 *   send/recv  zppSend: count * s to the peer; zppRecv: nothing
 *   alltoall   count * s to each other rank; alltoallv: sendcounts[p] * s
 *   gather     sendcount * s to the root (the root: nothing)
 *   scatter    the root: recvcount * s to each other rank
 * Logical (an NCCL collective: the payload this rank must deliver to each
 * peer in a direct exchange; NCCL's ring or tree moves the same total along
 * other routes, so these are not its wire bytes, and the intra/inter split
 * is the direct exchange's):
 *   allgather      sendcount * s to each other rank
 *   qwZ            per chunk, the packed chunk (header, data, scales,
 *                  escapes) to each other rank: the all-gather's rule on
 *                  what its ncclAllGather moves, so qwZ / plain is P / (n s)
 *   reducescatter  recvcount * s to each other rank (its block of my input)
 *   allreduce      a reduce-scatter then an all-gather of W blocks (block b
 *                  holds count / W elements, one more for b < count % W):
 *                  (block(p) + block(me)) * s to peer p
 *   broadcast      the root: count * s to each other rank
 *   reduce         count * s to the root (the root: nothing)
 * So plain reduce-scatter sends (W - L) * rc * s across nodes per rank (L
 * ranks per node) and qgZ (N - 1) * P(rc): a ratio of P(rc) / (L rc s).
 */
#define ZPP_STATS_EVERY_PEER (-1)
/* bytes for `peer` (nothing for me), or for each other rank with
 * ZPP_STATS_EVERY_PEER, counted under kind. Any thread. */
void zppStatsCountDevice(struct zppComm* comm, zppOpKind_t kind, int peer, uint64_t bytes);

#endif /* ZPP_STATS_H_ */
