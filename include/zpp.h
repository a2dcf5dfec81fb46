/*
 * zpp: communication-compressing collectives for ZeRO-style sharded training.
 *
 * The one public header. The calls, result codes, data types and reduction
 * operations mirror NCCL's (same argument order, same numeric values), so that
 * a trainer written against NCCL changes a prefix, not its structure.
 */
#ifndef ZPP_H_
#define ZPP_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ZPP_MAJOR, ZPP_MINOR, ZPP_PATCH: generated from CMake's project version. */
#include "zpp_version.h"
/* Same encoding as NCCL_VERSION_CODE for 2.9+: major*10000 + minor*100 + patch. */
#define ZPP_VERSION(major, minor, patch) ((major)*10000 + (minor)*100 + (patch))
#define ZPP_VERSION_CODE ZPP_VERSION(ZPP_MAJOR, ZPP_MINOR, ZPP_PATCH)

/* The library is built with hidden visibility: what zpp.h marks ZPP_API is
 * all that libzpp.so exports (tests/core checks it with nm -D). */
#if defined(__GNUC__)
#define ZPP_API __attribute__((visibility("default")))
#else
#define ZPP_API
#endif

/* Result codes: numerically identical to ncclResult_t. */
typedef enum {
  zppSuccess = 0,
  zppUnhandledCudaError = 1,
  zppSystemError = 2,
  zppInternalError = 3,
  zppInvalidArgument = 4,
  zppInvalidUsage = 5,
  zppRemoteError = 6,
  zppInProgress = 7,
  zppNumResults = 8
} zppResult_t;

/* Data types: numerically identical to ncclDataType_t. */
typedef enum {
  zppInt8 = 0,
  zppChar = 0,
  zppUint8 = 1,
  zppInt32 = 2,
  zppInt = 2,
  zppUint32 = 3,
  zppInt64 = 4,
  zppUint64 = 5,
  zppFloat16 = 6,
  zppHalf = 6,
  zppFloat32 = 7,
  zppFloat = 7,
  zppFloat64 = 8,
  zppDouble = 8,
  zppBfloat16 = 9,
  zppNumTypes = 10
} zppDataType_t;

/* Reduction operations: numerically identical to ncclRedOp_t. */
typedef enum { zppSum = 0, zppProd = 1, zppMax = 2, zppMin = 3, zppAvg = 4, zppNumOps = 5 } zppRedOp_t;

/* Writes ZPP_VERSION_CODE of the library actually loaded (may differ from
 * the header the caller compiled against). */
ZPP_API zppResult_t zppGetVersion(int* version);

/* A static, human-readable description of a result code; never NULL. */
ZPP_API const char* zppGetErrorString(zppResult_t result);

/* Size in bytes of one element of a data type, 0 for an invalid type. */
ZPP_API size_t zppTypeSize(zppDataType_t datatype);

/* ---------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------- */

#define ZPP_UNIQUE_ID_BYTES 128
/* Carries the rendezvous root's address and a random secret: pass it to every
 * rank (e.g. with MPI_Bcast); a peer that does not present the secret is
 * refused. */
typedef struct {
  char internal[ZPP_UNIQUE_ID_BYTES];
} zppUniqueId;

typedef struct zppComm* zppComm_t;

/* A stream argument: a cudaStream_t for device buffers, NULL (blocking) or a
 * zppHostStream_t for host buffers. void* so that this header needs no CUDA
 * header and a cudaStream_t converts implicitly, as with NCCL's calls. */
typedef void* zppStream_t;

#define ZPP_CONFIG_UNDEF_INT (-2147483647 - 1)
#define ZPP_CONFIG_UNDEF_PTR NULL
#define ZPP_CONFIG_UNDEF_SIZE ((size_t)-1)
#define ZPP_CONFIG_MAGIC 0x7a707063u /* "zppc" */

/* Per-communicator configuration. Initialize with ZPP_CONFIG_INITIALIZER and
 * set only the fields you care about; an UNDEF field falls back to its
 * environment variable, then to the default. size/magic/version let later
 * versions grow the struct while old callers keep working. */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int timeoutSec;       /* every wait (bootstrap, collectives); env ZPP_TIMEOUT; default 300 s */
  const char* hostId;   /* node identity of this rank; env ZPP_HOSTID, else host name */
  const char* commName; /* shown in logs */
  /* ZeRO++ compression applied to the plain calls (explicit calls below
   * choose per call). 0 = off (the default: a renamed NCCL call stays exact
   * until compression is asked for), 8 or 4 (2 for qgZ) = bits per element. */
  int qwzBits;             /* zppAllGather of fp32/fp16/bf16; env ZPP_QWZ_BITS */
  int qgzBits;             /* zppReduceScatter sum/avg of fp32/fp16/bf16; env ZPP_QGZ_BITS;
                              also 2 (ternary: for error feedback, below) */
  int quantBlock;          /* elements per scale; env ZPP_QUANT_BLOCK (0: codec default) */
  int quantRotate;         /* 1: qwZ, hpZ and qgZ rotate their blocks (Hadamard) before
                              quantizing; env ZPP_QUANT_ROTATE; default 0
                              (docs/zeropp.md says why and when to set it) */
  size_t compressMinBytes; /* smaller calls stay plain (latency); env ZPP_COMPRESS_MIN_BYTES */
  int hpzGroupSize;        /* ranks sharing a secondary partition; env ZPP_HPZ_GROUP (0: the node) */
  /* Since 0.2.0. 1 (the default): creation returns when the communicator is
   * ready. 0 (as NCCL's config.blocking): zppCommInitRank(Config),
   * zppCommSplit, zppCommShrink and zppCommGrow return zppInProgress at once
   * with the handle set, and build it in the background; zppCommGetAsyncError
   * says zppInProgress until it is ready (zppSuccess) or failed (the error).
   * Meanwhile calls that need it answer zppInProgress, doing nothing;
   * zppCommCount and zppCommUserRank answer; zppCommAbort or zppCommDestroy
   * end the creation (the other members' creation then fails). A split,
   * shrink or grow with config NULL inherits its parent's. Env
   * ZPP_COMM_BLOCKING. */
  int blocking;
  /* Since 0.3.0. 1: qgZ runs with error feedback (zppGradCreate), and a
   * qgZ call without a residual handle (zppReduceScatter under qgzBits,
   * zppQgzReduceScatter) is zppInvalidUsage rather than run without it;
   * ranks that disagree fail their first qgZ call as a mismatch. 0 (the
   * default): handles are the caller's choice. Env ZPP_QGZ_ERROR_FEEDBACK. */
  int qgzErrorFeedback;
} zppConfig_t;

#define ZPP_CONFIG_INITIALIZER                        \
  {                                                   \
    sizeof(zppConfig_t),       /* size */             \
        ZPP_CONFIG_MAGIC,      /* magic */            \
        ZPP_VERSION_CODE,      /* version */          \
        ZPP_CONFIG_UNDEF_INT,  /* timeoutSec */       \
        ZPP_CONFIG_UNDEF_PTR,  /* hostId */           \
        ZPP_CONFIG_UNDEF_PTR,  /* commName */         \
        ZPP_CONFIG_UNDEF_INT,  /* qwzBits */          \
        ZPP_CONFIG_UNDEF_INT,  /* qgzBits */          \
        ZPP_CONFIG_UNDEF_INT,  /* quantBlock */       \
        ZPP_CONFIG_UNDEF_INT,  /* quantRotate */      \
        ZPP_CONFIG_UNDEF_SIZE, /* compressMinBytes */ \
        ZPP_CONFIG_UNDEF_INT,  /* hpzGroupSize */     \
        ZPP_CONFIG_UNDEF_INT,  /* blocking */         \
        ZPP_CONFIG_UNDEF_INT   /* qgzErrorFeedback */ \
  }

/* Creates a unique id on the rendezvous root (call on one rank only). The
 * root keeps listening in the background until every rank has joined or
 * ZPP_TIMEOUT passes. */
ZPP_API zppResult_t zppGetUniqueId(zppUniqueId* uniqueId);

/* Collective over nranks processes: every rank calls it with the same id;
 * no rank returns before all have joined, or the timeout (unless
 * config.blocking is 0: then it returns zppInProgress at once). config may be
 * NULL (defaults, as with NCCL); a config without ZPP_CONFIG_MAGIC, or whose
 * size does not match its version, is zppInvalidArgument; one from a newer
 * zpp.h than this library is zppInvalidUsage. The reason is logged and
 * zppGetLastError(NULL) returns it. */
ZPP_API zppResult_t zppCommInitRank(zppComm_t* comm, int nranks, zppUniqueId commId, int rank);
ZPP_API zppResult_t zppCommInitRankConfig(zppComm_t* comm, int nranks, zppUniqueId commId, int rank,
                                          zppConfig_t* config);

/* Builds a communicator from the launcher's environment: torchrun's RANK,
 * WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, or OpenMPI's
 * OMPI_COMM_WORLD_RANK/SIZE with MASTER_ADDR/MASTER_PORT (or ZPP_ROOT) naming
 * the rendezvous root, which rank 0 opens. config may be NULL.
 * The root listens on ZPP_ROOT=host:port, else on MASTER_PORT + 1 (torch's
 * own store holds MASTER_PORT under torchrun; ZPP_MASTER_PORT_OFFSET changes
 * the 1). Its secret is ZPP_SECRET (same on every rank); without it the
 * secret is derived from the root address and the launcher's job id, which
 * keeps other jobs out but does not stop anyone who can guess them. A
 * missing or garbled variable is zppInvalidArgument naming it. */
ZPP_API zppResult_t zppCommInitFromEnv(zppComm_t* comm, zppConfig_t* config);

/* Collective over every rank of comm (like ncclCommSplit): the ranks that
 * pass the same color form a new communicator, ordered by key, ties by their
 * rank in comm. color is >= 0, or ZPP_SPLIT_NOCOLOR to join none: then
 * *newcomm is NULL (other negative colors: zppInvalidArgument). The new
 * communicator has its own topology (nodes from the ranks' node identities
 * in comm), its own settings (config NULL: comm's), works with every call
 * and is destroyed on its own, before or after comm. */
#define ZPP_SPLIT_NOCOLOR (-1)
ZPP_API zppResult_t zppCommSplit(zppComm_t comm, int color, int key, zppComm_t* newcomm,
                                 zppConfig_t* config);

/* Frees the communicator after all its operations are done. NULL is a no-op. */
ZPP_API zppResult_t zppCommDestroy(zppComm_t comm);
/* Stops every operation in flight (they return an error) and frees the
 * communicator. Safe to call from another thread than the one blocked in a
 * collective. NULL is a no-op. */
ZPP_API zppResult_t zppCommAbort(zppComm_t comm);
/* Stops comm without freeing anything (like ncclCommRevoke): every operation
 * in flight or queued, on any host stream or none, ends with an error whose
 * reason (zppGetLastError(comm)) says "revoked"; so does every later call,
 * at once. Callable from any thread, also while another is blocked in a call
 * or in zppHostStreamSynchronize; a second revoke is a no-op. Local: the other
 * ranks learn of it as of any peer that stopped talking (their own error or
 * timeout), so each rank that must stop revokes its own. Handles and buffers
 * stay valid: zppCommGetAsyncError, zppCommCount and the like still answer,
 * and the communicator is freed by zppCommDestroy (prompt: no barrier with
 * peers that may be dead) or zppCommAbort. On the device path it aborts the
 * inner NCCL communicator, which zpp creates afresh where it needs one
 * again. NULL is zppInvalidArgument. */
ZPP_API zppResult_t zppCommRevoke(zppComm_t comm);

/* A communicator without the ranks in excludeRanks (like ncclCommShrink),
 * called by every other rank of comm and by those only: the excluded ranks
 * take no part (dead, hung, or still calling on comm). The survivors keep
 * their order (new rank = the number of survivors below); the new
 * communicator has its own topology (nodes from the survivors' node
 * identities, so a lost rank can leave nodes of unequal sizes, where qgZ
 * runs plain: zppQgzReduceScatter), its own
 * settings (config NULL: comm's), works with every call, can be shrunk in
 * turn and is destroyed on its own. comm may be broken or revoked (that is
 * when one shrinks it) and stays to be destroyed. ZPP_SHRINK_ABORT revokes
 * comm first (zppCommRevoke), ending its work in flight; ZPP_SHRINK_DEFAULT
 * leaves it alone. One shrink per communicator. Bad use fails on every
 * survivor, never forms two communicators: an exclude list that names a
 * rank twice, one out of range or every rank is zppInvalidArgument; the
 * calling rank in its own list is zppInvalidUsage; survivors whose lists
 * differ (or an excluded rank that calls anyway) are refused by the
 * meeting, and every survivor's call fails, within twice the timeout.
 * Blocking: it returns when all survivors have joined; the meeting waits
 * twice the timeout from its first member on, since a survivor may learn of
 * the failure only at its own timeout. */
#define ZPP_SHRINK_DEFAULT 0x00
#define ZPP_SHRINK_ABORT 0x01
ZPP_API zppResult_t zppCommShrink(zppComm_t comm, const int* excludeRanks, int excludeCount,
                                  zppComm_t* newcomm, zppConfig_t* config, int shrinkFlags);

/* A communicator of comm's ranks and new processes, nranks in all (like
 * ncclCommGrow). One rank of comm (any) makes the grow id with
 * zppCommGetGrowId and hands it, out of band, to the other ranks of comm and
 * to every joining process. Then every rank of comm calls zppCommGrow with
 * comm, nranks, the id and rank -1 (it keeps its rank, as also its own rank
 * may be passed); each joining process calls it with comm NULL, the same
 * nranks and id, and its new rank, comm's size .. nranks-1. comm must be
 * healthy (shrink a broken one first) and is left as it was. The new
 * communicator has its own topology (nodes from the members' node
 * identities: comm's for its ranks, the config's or the environment's for
 * new ones) and settings (config NULL: comm's for its ranks, the
 * environment's for new ones), works with every call, can be grown or shrunk
 * in turn, and is destroyed on its own. Blocking: it returns when every
 * member has joined, or fails on all of them at the timeout (comm's, which
 * also bounds how long the id waits). The id is good once: its rendezvous
 * closes when the group has formed or the timeout passed, and a later use
 * fails at once with zppInvalidUsage. A joining process that takes a rank of
 * comm, nranks not above comm's size, or members from two communicators
 * fail on every member with zppInvalidUsage. */
ZPP_API zppResult_t zppCommGetGrowId(zppComm_t comm, zppUniqueId* growId);
ZPP_API zppResult_t zppCommGrow(zppComm_t comm, int nranks, const zppUniqueId* growId, int rank,
                                zppComm_t* newcomm, zppConfig_t* config);

ZPP_API zppResult_t zppCommCount(const zppComm_t comm, int* count);
ZPP_API zppResult_t zppCommUserRank(const zppComm_t comm, int* rank);
/* zppSuccess, or the error that broke the communicator (a peer died, a
 * timeout, an abort). */
ZPP_API zppResult_t zppCommGetAsyncError(zppComm_t comm, zppResult_t* asyncError);
/* The last error's reason, for messages (like ncclGetLastError): the error
 * that broke comm, or with comm NULL (or healthy) the last error this
 * thread logged, e.g. why zppCommInitRank failed. Never NULL. */
ZPP_API const char* zppGetLastError(zppComm_t comm);

/* Where this rank sits: nodes are numbered in order of their lowest rank. */
typedef struct {
  int nNodes;    /* nodes in the communicator */
  int node;      /* this rank's node */
  int localRank; /* index of this rank within its node */
  int localSize; /* ranks on this rank's node */
  int uniform;   /* 1 if every node holds the same number of ranks */
} zppTopology_t;
ZPP_API zppResult_t zppCommTopology(const zppComm_t comm, zppTopology_t* topology);

/* ---------------------------------------------------------------------------
 * Host streams: asynchronous collectives on host buffers. A collective on
 * host buffers with stream NULL completes before the call returns; with a
 * host stream it is queued and the call returns at once, so a trainer can
 * start the next layer's gather, compute, and wait. Operations on one
 * communicator run in the order they were issued.
 * ------------------------------------------------------------------------- */
typedef struct zppHostStream* zppHostStream_t;
ZPP_API zppResult_t zppHostStreamCreate(zppHostStream_t* stream);
/* Waits for every operation queued on the stream; returns the first error. */
ZPP_API zppResult_t zppHostStreamSynchronize(zppHostStream_t stream);
/* zppSuccess when all done, zppInProgress while some run, else the error. */
ZPP_API zppResult_t zppHostStreamQuery(zppHostStream_t stream);
/* Waits for the stream, then frees it. NULL is a no-op. */
ZPP_API zppResult_t zppHostStreamDestroy(zppHostStream_t stream);

/* ---------------------------------------------------------------------------
 * Collectives: NCCL's argument order, in-place rules and semantics.
 * Buffers are device memory (NCCL, stream-ordered on the cudaStream_t) or
 * host memory (UCX; see host streams above).
 * ------------------------------------------------------------------------- */
ZPP_API zppResult_t zppAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 zppDataType_t datatype, zppComm_t comm, zppStream_t stream);
ZPP_API zppResult_t zppReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     zppDataType_t datatype, zppRedOp_t op, zppComm_t comm,
                                     zppStream_t stream);
ZPP_API zppResult_t zppAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                 zppDataType_t datatype, zppRedOp_t op, zppComm_t comm,
                                 zppStream_t stream);
/* count elements go to each peer: sendbuff and recvbuff hold count * nranks. */
ZPP_API zppResult_t zppAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                zppDataType_t datatype, zppComm_t comm, zppStream_t stream);
ZPP_API zppResult_t zppBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                 zppDataType_t datatype, int root, zppComm_t comm, zppStream_t stream);
/* recvbuff (count elements) is written on root only, and may be NULL on the
 * other ranks; in place when sendbuff == recvbuff on root. */
ZPP_API zppResult_t zppReduce(const void* sendbuff, void* recvbuff, size_t count,
                              zppDataType_t datatype, zppRedOp_t op, int root, zppComm_t comm,
                              zppStream_t stream);
/* Rank r's sendcount elements land at recvbuff + r * sendcount on root, whose
 * recvbuff holds sendcount * nranks (other ranks: not used, may be NULL); in
 * place when sendbuff == recvbuff + root * sendcount on root. */
ZPP_API zppResult_t zppGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                              zppDataType_t datatype, int root, zppComm_t comm, zppStream_t stream);
/* Root's sendbuff holds recvcount * nranks; rank r receives the recvcount
 * elements at sendbuff + r * recvcount (other ranks' sendbuff: not used, may
 * be NULL); in place when recvbuff == sendbuff + root * recvcount on root. */
ZPP_API zppResult_t zppScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               zppDataType_t datatype, int root, zppComm_t comm, zppStream_t stream);
/* Uneven all-to-all. Counts and displacements are in elements, one per rank:
 * sendcounts[p] elements at sendbuff + sdispls[p] go to rank p, which
 * receives them at recvbuff + rdispls[me] with recvcounts[me] ==
 * sendcounts[p] (a pair that disagrees is zppInvalidUsage on every rank,
 * naming both; no data moved, the communicator stays usable). Every rank
 * calls, also with nothing to move; zero counts are allowed; sendbuff and
 * recvbuff must not overlap (no in-place form). */
ZPP_API zppResult_t zppAllToAllv(const void* sendbuff, const size_t sendcounts[],
                                 const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                                 const size_t rdispls[], zppDataType_t datatype, zppComm_t comm,
                                 zppStream_t stream);

/* ---------------------------------------------------------------------------
 * Accounting: bytes this rank sent, split by whether the peer is on the same
 * node, per kind of operation. Compressed operations count what went on the
 * wire (packed data and scales), so that the volume ZeRO++ promises can be
 * checked from these counters. Host buffers: the bytes the host transport
 * sent. Device buffers (NCCL does not report its traffic), counted when the
 * call is queued: exact for what zpp sends as ncclSend/ncclRecv (qgZ, send,
 * all-to-all(v), gather, scatter); for NCCL's collectives (all-gather and
 * qwZ's packed chunks, reduce-scatter, all-reduce, broadcast, reduce) the
 * logical bytes, what this rank must deliver to each peer in a direct
 * exchange, not NCCL's wire bytes (its ring moves the same total by other
 * routes). The rules: docs/gpu.md, "zpp-perf on device buffers".
 * ------------------------------------------------------------------------- */
typedef enum {
  zppOpAllGather = 0,
  zppOpReduceScatter = 1,
  zppOpAllReduce = 2,
  zppOpAllToAll = 3,
  zppOpBroadcast = 4,
  zppOpQwZ = 5, /* quantized weight all-gather */
  zppOpHpZ = 6, /* hierarchical (secondary-partition) gather */
  zppOpQgZ = 7, /* quantized gradient reduce-scatter */
  zppOpReduce = 8,
  zppOpGather = 9,
  zppOpScatter = 10,
  zppOpAllToAllv = 11,
  zppOpSendRecv = 12, /* zppSend, zppRecv and their tagged forms */
  zppNumOpKinds = 13
} zppOpKind_t;

typedef struct {
  uint64_t calls[zppNumOpKinds];
  uint64_t intraNodeBytes[zppNumOpKinds];
  uint64_t interNodeBytes[zppNumOpKinds];
  /* Compressed calls on host buffers (docs/codecs.md, "Escapes"): finite
   * elements far above the rest of their block that travelled exactly in an
   * escape slot, and blocks whose such elements found no free slot, so that
   * they stayed in the block and set its scale (every element still within
   * the codec's bound; nothing is saturated). Inf and NaN are not counted:
   * each is marked in its own element and decodes to NaN there. */
  uint64_t quantEscapes;
  uint64_t quantEscapeOverflows;
  /* qgZ calls (explicit, or zppReduceScatter under qgzBits) that ran as the
   * plain, exact reduce-scatter because the communicator's nodes hold
   * different numbers of ranks (after a shrink, say): qgZ's hierarchical
   * all-to-all needs equal nodes. Also counted as zppOpReduceScatter. */
  uint64_t qgzPlainFallbacks;
} zppCommStats_t;

ZPP_API zppResult_t zppCommGetStats(const zppComm_t comm, zppCommStats_t* stats);
ZPP_API zppResult_t zppCommResetStats(zppComm_t comm);
/* A short name for an operation kind ("allgather", "qwz", ...). */
ZPP_API const char* zppOpKindName(zppOpKind_t kind);

/* ---------------------------------------------------------------------------
 * ZeRO++ collectives, explicit form. bits: 8 or 4, and 2 for qgZ (0: the
 * communicator's setting, else the default: 8 for qwZ, 4 for qgZ). Types fp32, fp16, bf16.
 * Results are lossy within the codec's documented bound (docs/codecs.md);
 * ranks that call with other settings get an error, never garbage.
 * ------------------------------------------------------------------------- */

/* qwZ: every rank quantizes its shard blockwise; the packed shards (data and
 * scales in one message) are gathered; every rank dequantizes into recvbuff
 * (sendcount * nranks elements of datatype). */
ZPP_API zppResult_t zppQwzAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    zppDataType_t datatype, int bits, zppComm_t comm,
                                    zppStream_t stream);

/* qgZ: quantized reduce-scatter through a hierarchical all-to-all (inside the
 * node, then across nodes among ranks of the same local rank), pipelined.
 * op: zppSum or zppAvg (divides by the world size). On nodes of different
 * sizes it runs as the plain reduce-scatter (exact), counted in
 * zppCommStats_t.qgzPlainFallbacks. */
ZPP_API zppResult_t zppQgzReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        zppDataType_t datatype, zppRedOp_t op, int bits, zppComm_t comm,
                                        zppStream_t stream);

/* qgZ over a bucket of tensors in one call: tensor t has recvcounts[t]
 * elements per rank, sendbuffs[t] holds recvcounts[t] * nranks. */
ZPP_API zppResult_t zppQgzReduceScatterCoalesced(int ntensors, const void* const* sendbuffs,
                                                 void* const* recvbuffs, const size_t* recvcounts,
                                                 zppDataType_t datatype, zppRedOp_t op, int bits,
                                                 zppComm_t comm, zppStream_t stream);

/* hpZ: a partitioned parameter that owns its secondary partition. The
 * forward gather goes across all ranks (qwZ when bits != 0) and keeps, with
 * no extra traffic, this rank's share of the gathered shards for its hpZ
 * group (the node, or hpzGroupSize ranks; kept packed when quantized, so the
 * backward result is bit for bit the forward one); the backward gather
 * assembles the weights from the secondaries inside the group only. Any
 * weight write (optimizer step, checkpoint load, ...) must be followed by
 * zppParamInvalidate on every rank; a backward gather with an invalid
 * secondary falls back to the global gather, never to stale data. A group
 * that disagrees on validity, or a shard that changed since the forward
 * gather without an invalidation, makes the backward gather fail with
 * zppInvalidUsage on that group (no data moved). Host buffers; shard and
 * full must not overlap (the shard is the primary copy of the weights).
 * bits: 8 or 4, or 0 for the communicator's qwzBits (0 there: plain gathers,
 * any data type). Destroy parameters before their communicator. */
typedef struct zppParam* zppParam_t;
ZPP_API zppResult_t zppParamCreate(zppComm_t comm, size_t shardcount, zppDataType_t datatype, int bits,
                                   zppParam_t* param);
ZPP_API zppResult_t zppParamGatherForward(zppParam_t param, const void* shard, void* full,
                                          zppStream_t stream);
ZPP_API zppResult_t zppParamGatherBackward(zppParam_t param, const void* shard, void* full,
                                           zppStream_t stream);
ZPP_API zppResult_t zppParamInvalidate(zppParam_t param);
/* 1 while the secondary partition is valid: filled by a forward gather that
 * completed, with no zppParamInvalidate since. */
ZPP_API zppResult_t zppParamIsValid(zppParam_t param, int* valid);
/* Bytes of secondary partition the object holds (0 when the group size does
 * not divide every node: then every backward gather is global). */
ZPP_API zppResult_t zppParamSecondaryBytes(zppParam_t param, size_t* bytes);
/* Waits for the parameter's queued gathers, then frees. NULL is a no-op. */
ZPP_API zppResult_t zppParamDestroy(zppParam_t param);

/* Delta parameters: qwZ of the weights' change (SDP4Bit's weight
 * differences). zppParamCreateEx with ZPP_PARAM_DELTA (bits 8 or 4, or the
 * communicator's qwzBits, which must then be non-zero) keeps on every rank a
 * reference: the full weights as the last forward gather returned them,
 * bit-identical on every rank. The first gather (and the first after
 * zppParamDropReference) is an exact plain gather; every later one sends
 * each shard's difference to its part of the reference, quantized, and adds
 * the decoded differences to the reference, which it returns. The error of
 * a gathered weight is then the codec's error on the last difference (plus
 * the data type's rounding of the sum), not on the weight: it does not build
 * up, because each difference is taken against the reference, and it is
 * small where weights move little per step. A backward gather at a valid
 * version (see hpZ above) copies the reference: no traffic beyond hpZ's
 * handshake. Invalidation keeps its meaning (call it after every weight
 * write); it does not drop the reference.
 * Cost: the reference holds the full weights (shardcount * nranks elements
 * of datatype) on every rank, reported by zppParamSecondaryBytes: memory of
 * ZeRO-1/2's full weights, not ZeRO-3's. flags: 0 is zppParamCreate. */
#define ZPP_PARAM_DELTA 1u
ZPP_API zppResult_t zppParamCreateEx(zppComm_t comm, size_t shardcount, zppDataType_t datatype,
                                     int bits, unsigned flags, zppParam_t* param);
/* The next gather of a delta parameter (forward or backward) is exact and
 * rebuilds the reference (after a checkpoint load, say: a difference that
 * large would otherwise take several gathers to settle). Ordered with the gathers the
 * caller issued before it; every rank must call it at the same point, else
 * that gather fails on every rank as a mismatched call. */
ZPP_API zppResult_t zppParamDropReference(zppParam_t param);

/* Error feedback for qgZ (docs/zeropp.md, "Error feedback"): a gradient
 * buffer's handle, holding what this rank's qgZ quantizations dropped, which
 * the next call adds back before it quantizes: the sender's (recvcount *
 * nranks residuals, the whole input) and, on several nodes of several
 * ranks, the requantization of the node sums between the hops (recvcount *
 * nodes). Residuals are kept in 8 bits (int8 in blocks of 32 with an fp32
 * scale: 1.125 bytes an element) and double-buffered, 2.25 bytes per input
 * element and 2.25 per node-sum element, on every rank: zppGradStateBytes
 * is about half of that (one copy). bits: 8, 4 or 2, or 0 for the communicator's qgzBits (4
 * when unset). Host buffers only, for now: device buffers are zppInvalidUsage.
 *
 * zppQgzReduceScatterEF is zppQgzReduceScatter with the handle: recvcount,
 * datatype and comm must be the handle's (else zppInvalidArgument naming
 * the difference); ranks that disagree on using it fail the call as a
 * mismatch. Calls on one handle must be issued in order on one stream (a
 * call on another stream while one is pending is zppInvalidUsage). A
 * failed call leaves the residuals as they were. An input element that is
 * not finite travels as its escape and keeps its residual (as stored again
 * in its block's new scale).
 * zppGradUndo: the last call's step was thrown away (say, an overflow
 * check): the residuals go back to what they were before it, once; after a
 * call has completed (synchronize its stream first). Save/Load: this rank's
 * current residuals (zppGradStateBytes bytes, with a header that Load
 * checks: same count, type, bits, ranks and nodes); a handle not loaded
 * starts from zero residuals, which costs one step's quantization error.
 * zppQgzReduceScatterCoalescedEF is zppQgzReduceScatterCoalesced with one
 * handle per tensor (distinct handles of one bit width, each of its
 * tensor's recvcount); every tensor is compensated as a call of its own.
 * On nodes of different sizes qgZ runs plain (zppQgzReduceScatter): exact,
 * and the residuals wait, as they are, for the next quantized call.
 * Destroy handles before their communicator. */
typedef struct zppGrad* zppGrad_t;
ZPP_API zppResult_t zppGradCreate(zppComm_t comm, size_t recvcount, zppDataType_t datatype, int bits,
                                  zppGrad_t* grad);
ZPP_API zppResult_t zppQgzReduceScatterEF(const void* sendbuff, void* recvbuff, size_t recvcount,
                                          zppDataType_t datatype, zppRedOp_t op, zppGrad_t grad,
                                          zppComm_t comm, zppStream_t stream);
ZPP_API zppResult_t zppQgzReduceScatterCoalescedEF(int ntensors, const void* const* sendbuffs,
                                                   void* const* recvbuffs, const size_t* recvcounts,
                                                   zppDataType_t datatype, zppRedOp_t op,
                                                   zppGrad_t const* grads, zppComm_t comm,
                                                   zppStream_t stream);
ZPP_API zppResult_t zppGradUndo(zppGrad_t grad);
ZPP_API zppResult_t zppGradStateBytes(zppGrad_t grad, size_t* bytes);
ZPP_API zppResult_t zppGradSaveState(zppGrad_t grad, void* buf, size_t bytes);
ZPP_API zppResult_t zppGradLoadState(zppGrad_t grad, const void* buf, size_t bytes);
ZPP_API zppResult_t zppGradDestroy(zppGrad_t grad);

/* ---------------------------------------------------------------------------
 * Point-to-point: NCCL's ncclSend / ncclRecv / ncclGroupStart / ncclGroupEnd,
 * same arguments and semantics, on device buffers (NCCL) and host buffers
 * (the communicator's transports: UCX, shared memory).
 *
 * Sends and receives between one pair of ranks match in the order they were
 * issued. count may be 0 (a message all the same: it still matches a
 * receive, whose count must be 0 too). peer may be the caller's own rank
 * inside a group only (outside one, a self-send would wait for a receive
 * that cannot be issued before it returns: zppInvalidUsage).
 * A send matched with a receive of another count or data type fails on both
 * ranks with zppInvalidUsage, the message naming both calls (the sender's
 * call, or its next one if its send had completed already; the receive
 * buffer's content is then undefined); the communicator is then broken, as
 * after a mismatched collective. A dead peer or a missing match is an error
 * after the communicator's timeout, never a hang.
 *
 * Host buffers, stream NULL: the call returns once its transfer completed
 * (a send may wait for the matching receive, as NCCL's does). Host stream:
 * queued after the stream's earlier operations; zppHostStreamSynchronize
 * waits for it.
 * ------------------------------------------------------------------------- */
ZPP_API zppResult_t zppSend(const void* sendbuff, size_t count, zppDataType_t datatype, int peer,
                            zppComm_t comm, zppStream_t stream);
ZPP_API zppResult_t zppRecv(void* recvbuff, size_t count, zppDataType_t datatype, int peer,
                            zppComm_t comm, zppStream_t stream);

/* Groups, per thread and nestable, as NCCL's: between zppGroupStart and the
 * outermost zppGroupEnd, zppSend / zppRecv (and the tagged forms) only check
 * their arguments and are recorded; the outermost zppGroupEnd issues them all
 * at once, so that any set of sends and receives (a ring shift, both
 * directions between a pair, self-sends) completes without deadlock. Host
 * operations of one group must share one communicator and one stream
 * (zppInvalidUsage otherwise); with stream NULL zppGroupEnd returns when all
 * completed, with a host stream they are queued on it as one operation. An
 * error in any operation is returned by zppGroupEnd. Device operations are
 * handed to ncclGroupStart / ncclGroupEnd.
 * Collectives inside a group are not supported: they return zppInvalidUsage
 * naming the call. A call that fails inside a group (a collective, a bad
 * argument) fails the group: the outermost zppGroupEnd returns that error
 * and issues none of the group's calls, on every rank that made the same
 * mistake alike. zppGroupEnd without zppGroupStart: zppInvalidUsage. */
ZPP_API zppResult_t zppGroupStart(void);
ZPP_API zppResult_t zppGroupEnd(void);

/* zpp extension, for torch.distributed's tags and any-source receives. */
#define ZPP_ANY_SOURCE (-1)
/* Like zppSend/zppRecv with a tag (>= 0): a receive matches the oldest send from `peer`
 * (or from any rank with ZPP_ANY_SOURCE) with the same tag and count. *source, when not
 * NULL, is written with the sender's rank once the receive has completed (after the
 * stream synchronizes). Host buffers only (zppInvalidUsage on device buffers).
 * Tagged messages never match the untagged zppSend/zppRecv; a tagged pair
 * with the same tag and count but another data type fails on both ranks
 * with zppInvalidUsage. */
ZPP_API zppResult_t zppSendTagged(const void* sendbuff, size_t count, zppDataType_t datatype, int peer,
                                  int tag, zppComm_t comm, zppStream_t stream);
ZPP_API zppResult_t zppRecvTagged(void* recvbuff, size_t count, zppDataType_t datatype, int peer,
                                  int tag, int* source, zppComm_t comm, zppStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_H_ */
