/*
 * Topology: which rank is on which node, and the groups the hierarchical
 * algorithms use. Knows nothing of transports.
 *
 * Nodes are numbered in order of their lowest rank; inside a node, ranks are
 * ordered by rank (local rank = index in that order). Nodes may hold
 * different numbers of ranks (`uniform` says whether they all hold the same).
 * The intra-node group of a rank is its node's ranks; its inter-node group is
 * the ranks with the same local rank on every node that has one.
 */
#ifndef ZPP_TOPO_H_
#define ZPP_TOPO_H_

#include "zpp.h"

/* A host id (ZPP_HOSTID, the host name, the topology file) is shorter than
 * this, its terminating zero included; the bootstrap sends it in this many
 * bytes. */
#define ZPP_HOSTID_MAX 64

typedef struct {
  int nranks;
  int nNodes;
  int uniform;      /* every node holds the same number of ranks */
  int* nodeOf;      /* [nranks] rank -> node */
  int* localRankOf; /* [nranks] rank -> local rank */
  int* nodeSize;    /* [nNodes] ranks on the node */
  int** nodeRanks;  /* [nNodes][nodeSize] ranks of the node, in local order */
} zppTopo_t;

/* Groups ranks by host id (strings compared exactly). */
zppResult_t zppTopoCreate(int nranks, const char* const* hostIds, zppTopo_t** out);
void zppTopoDestroy(zppTopo_t* topo);

/* Ranks of `rank`'s node, in local order; n receives the count. The arrays
 * belong to the topology. */
const int* zppTopoIntraGroup(const zppTopo_t* topo, int rank, int* n);
/* Ranks with `rank`'s local rank, one per node that has it, in node order;
 * writes at most nNodes entries into ranks. */
zppResult_t zppTopoInterGroup(const zppTopo_t* topo, int rank, int* ranks, int* n);

/* A text file, one "rank node-name" line per rank, for tests and for
 * ZPP_TOPO_FILE (which overrides host names). */
zppResult_t zppTopoWrite(const zppTopo_t* topo, const char* const* hostIds, const char* path);
/* Reads the host ids back (array of nranks strings, caller frees with
 * zppTopoFreeHostIds). */
zppResult_t zppTopoReadHostIds(const char* path, int nranks, char*** hostIds);
void zppTopoFreeHostIds(char** hostIds, int nranks);

#endif /* ZPP_TOPO_H_ */
