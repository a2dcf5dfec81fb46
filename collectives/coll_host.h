/*
 * Host-buffer collectives as the API layer issues them: one call becomes a
 * job on the communicator's host executor, which picks the algorithm
 * (size thresholds from the environment, see params.c) and runs it through
 * the collective context (coll.h).
 */
#ifndef ZPP_COLL_HOST_H_
#define ZPP_COLL_HOST_H_

#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

struct zppComm;

typedef struct {
  zppOpKind_t kind; /* zppOpAllGather ... zppOpBroadcast, zppOpReduce ... zppOpAllToAllv */
  const void* sendbuff;
  void* recvbuff;
  size_t count; /* as the API call's count argument (all-to-all-v: 0) */
  zppDataType_t type;
  zppRedOp_t op; /* reductions only */
  int root;      /* broadcast, reduce, gather, scatter */
  /* All-to-all-v only: the caller's arrays, nranks each, in elements
   * (zppHostCollIssue copies them; they need not outlive the call). */
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls;
} zppHostColl_t;

/* Arguments already validated. stream: NULL (blocks) or a host stream. */
zppResult_t zppHostCollIssue(struct zppComm* comm, const zppHostColl_t* coll, zppHostStream_t stream);
/* All-to-all-v's count comparison alone, blocking, over the host transport
 * (the device path's check before NCCL moves the data; without a host
 * transport nothing is checked). */
zppResult_t zppHostCollCheckCounts(struct zppComm* comm, const zppHostColl_t* coll);

#endif /* ZPP_COLL_HOST_H_ */
