/*
 * Host-buffer collectives as the API layer issues them: one call becomes a
 * job on the communicator's host executor, which picks the algorithm
 * (size thresholds from the environment, see params.c) and runs it.
 */
#ifndef ZPP_COLL_HOST_H_
#define ZPP_COLL_HOST_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

struct zppComm;

typedef struct {
  zppOpKind_t kind; /* zppOpAllGather ... zppOpBroadcast */
  const void* sendbuff;
  void* recvbuff;
  size_t count; /* as the API call's count argument */
  zppDataType_t type;
  zppRedOp_t op; /* reductions only */
  int root;      /* broadcast only */
} zppHostColl_t;

/* Arguments already validated. stream: NULL (blocks) or a host stream. */
zppResult_t zppHostCollIssue(struct zppComm* comm, const zppHostColl_t* coll, zppHostStream_t stream);

/* For the ZeRO++ jobs (collectives/zeropp_host.c), which run on the same
 * executor: one sequence space for every operation (the transport finds
 * mismatches by comparing the signatures of messages with one sequence
 * number), and the same checks before and after. Begin: the health and
 * leftover checks, then the next sequence number. End: remembered as the
 * last operation, whose leftovers the next one checks. Host transport only. */
zppResult_t zppHostCollBeginOp(struct zppComm* comm, uint32_t* seq);
void zppHostCollEndOp(struct zppComm* comm, uint32_t seq, uint32_t sig);

/* "AllReduce(float32, max; #1a3) while this rank called AllReduce(float32,
 * sum; #1a3)": what two message signatures say, for the transport's
 * mismatch errors (a zppSigFormatter_t). */
void zppHostCollDescribeMismatch(uint32_t theirs, uint32_t mine, char* buf, size_t len);

#endif /* ZPP_COLL_HOST_H_ */
