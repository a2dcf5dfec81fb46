/*
 * Communicator construction and destruction, for the public calls in
 * api/comm_api.c (internal; the collectives use lib/comm.h).
 */
#ifndef ZPP_COMM_INTERNAL_H_
#define ZPP_COMM_INTERNAL_H_

#include "zpp.h"
#include "lib/bootstrap/bootstrap.h"
#include "lib/compress_settings.h"

/* What a communicator runs with, and where each value came from (for the
 * INFO line that says what was applied). */
typedef struct {
  double timeoutSec;
  char hostId[ZPP_HOSTID_MAX];
  char name[64];
  const char* timeoutFrom;        /* "config", "ZPP_TIMEOUT" or "default" */
  const char* hostIdFrom;         /* "config", "ZPP_HOSTID", "SLURMD_NODENAME" or "host name" */
  zppCompressSettings_t compress; /* ZeRO++ compression, with where each value came from */
  /* 1 for a split: the topology comes from the host ids the ranks announce
   * (their parent's node identities), never from ZPP_TOPO_FILE, whose table
   * lists the ranks of a whole job. */
  int announcedHostIds;
  int blocking;             /* 0: created in the background (config.blocking) */
  const char* blockingFrom; /* "config", "ZPP_COMM_BLOCKING", "parent" or "default" */
  /* A zppCommGrow member: the members check who is old and who is new
   * (zppCommStateGrowCheck) once the bootstrap stands. growFromSize: the
   * size of the communicator this member comes from, 0 for a newcomer. */
  int grow;
  int growFromSize;
  /* A zppCommShrink member: how long the survivors' meeting waits for all
   * of them (0: timeoutSec). */
  double meetSec;
} zppCommSettings_t;

/* Validates config (NULL: defaults) and resolves every setting: explicit
 * config beats the environment, which beats the defaults. */
zppResult_t zppCommStateResolveSettings(const zppConfig_t* config, zppCommSettings_t* s);

/* Bootstrap, topology and transports for arguments already checked.
 * s->blocking 0: *out is set at once and the rest is built in the
 * background; returns zppInProgress then (see zppConfig_t.blocking). */
zppResult_t zppCommStateInitWithSettings(zppComm_t* out, int nranks, const zppUniqueId* id, int rank,
                                         const zppCommSettings_t* s);

/* The settings of a communicator made from parent (split, shrink): the
 * parent's, or the config's with the parent's node identity unless the config
 * names one; members announce their node identities. */
zppResult_t zppCommStateChildSettings(const struct zppComm* parent, const zppConfig_t* config,
                                      zppCommSettings_t* s);
/* zppCommShrink (comm_shrink.c): the survivors only; see zpp.h. */
zppResult_t zppCommStateShrink(struct zppComm* parent, const int* exclude, int nExclude,
                               const zppConfig_t* config, int flags, zppComm_t* out);
/* zppCommGetGrowId and zppCommGrow (comm_grow.c); see zpp.h. parent is
 * NULL in a joining process, whose rank is given; a parent's rank keeps its
 * rank. */
zppResult_t zppCommStateGetGrowId(struct zppComm* comm, zppUniqueId* id);
/* The members' check of a grow, over the new bootstrap (part of creation). */
zppResult_t zppCommStateGrowCheck(struct zppComm* grown, int fromSize);
zppResult_t zppCommStateGrow(struct zppComm* parent, int nranks, const zppUniqueId* id, int rank,
                             const zppConfig_t* config, zppComm_t* out);
/* zppCommSplit (comm_split.c): collective over parent's ranks. config
 * NULL: the parent's settings; else the config's, with the parent's node
 * identity unless config names one. *out NULL for ZPP_SPLIT_NOCOLOR. */
zppResult_t zppCommStateSplit(struct zppComm* parent, int color, int key, const zppConfig_t* config,
                              zppComm_t* out);

/* A launch from the launcher's environment (comm_env.c). */
zppResult_t zppCommStateInitFromEnv(zppComm_t* out, const zppConfig_t* config);

/* A unique id with a root of its own, as zppGetUniqueId makes. */
zppResult_t zppCommStateNewUniqueId(zppUniqueId* id);

/* Not NULL, and alive (looked up in the live-handle registry, never read
 * from the object); call names the public call in the message. */
zppResult_t zppCommStateCheckLive(const struct zppComm* comm, const char* call);
/* Live and built: zppInProgress while a background creation works, its
 * error if it failed. For the calls that read the topology or transports
 * even on a broken communicator (topology, stats, shrink). */
zppResult_t zppCommStateCheckBuilt(const struct zppComm* comm, const char* call);
/* What zppCommGetAsyncError says: zppInProgress while a background
 * creation works (unless something broke it already). */
zppResult_t zppCommStateAsyncError(const struct zppComm* comm);
/* Take the handle out of the registry (of two calls on one handle exactly
 * one gets it), then free it; abort first stops every wait. */
zppResult_t zppCommStateDestroy(struct zppComm* comm);
zppResult_t zppCommStateAbort(struct zppComm* comm);
/* What abort, revoke and shrink's ZPP_SHRINK_ABORT share: the communicator
 * is broken with `reason` (unless something broke it first, whose reason
 * stays), and every wait stops: the executor fails what is queued, the
 * bootstrap and the transports end what is in flight. Nothing is freed; only
 * the first call acts. Any thread. */
void zppCommStateStop(struct zppComm* comm, const char* reason);
/* Abort without the free: see zppCommRevoke in zpp.h. */
zppResult_t zppCommStateRevoke(struct zppComm* comm);

#endif /* ZPP_COMM_INTERNAL_H_ */
