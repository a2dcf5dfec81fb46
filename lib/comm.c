/*
 * Communicator lifecycle: settings (explicit config, then environment, then
 * defaults), bootstrap, topology, transports; destroy, abort, errors. The
 * public calls that reach these are in api/comm_api.c; the launch from a
 * launcher's environment is in comm_env.c.
 */
#include "lib/comm.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "handles.h"
#include "launcher_env.h"
#include "lib/comm_internal.h"
#include "lib/transport/transport.h"
#include "params.h"

/* Layouts of zppConfig_t so far: the size each version's header declared.
 * A new field makes a new row; older callers keep their smaller size. */
static const struct {
  unsigned version;
  size_t size;
} configLayouts[] = {
    {ZPP_VERSION(0, 1, 0), offsetof(zppConfig_t, blocking)},
    {ZPP_VERSION(0, 2, 0), offsetof(zppConfig_t, qgzErrorFeedback)},
    {ZPP_VERSION(0, 3, 0), sizeof(zppConfig_t)},
};

static zppResult_t checkConfig(const zppConfig_t* c) {
  if (c == NULL) return zppSuccess;
  ZPP_ARGCHECK(c->magic == ZPP_CONFIG_MAGIC,
               "config: magic 0x%08x is not ZPP_CONFIG_MAGIC: initialize the config with "
               "ZPP_CONFIG_INITIALIZER",
               c->magic);
  ZPP_ARGCHECK(c->version >= configLayouts[0].version,
               "config: version %u is not a zpp version code (initialize the config with "
               "ZPP_CONFIG_INITIALIZER)",
               c->version);
  if (c->version > ZPP_VERSION_CODE)
    ZPP_FAIL(zppInvalidUsage, INIT,
             "config: version %u is newer than this library (%d): the program was compiled "
             "against a newer zpp.h than the libzpp it runs with",
             c->version, ZPP_VERSION_CODE);
  size_t want = 0;
  for (size_t i = 0; i < sizeof(configLayouts) / sizeof(configLayouts[0]); i++)
    if (configLayouts[i].version <= c->version) want = configLayouts[i].size;
  ZPP_ARGCHECK(c->size == want,
               "config: size %zu does not match %zu, the size of zppConfig_t in version %u "
               "(initialize the config with ZPP_CONFIG_INITIALIZER)",
               c->size, want, c->version);
  return zppSuccess;
}

static zppResult_t checkHostId(const char* id, const char* from) {
  size_t len = strlen(id);
  ZPP_ARGCHECK(len >= 1 && len < ZPP_HOSTID_MAX, "%s: host id '%s' must be 1..%d characters", from, id,
               ZPP_HOSTID_MAX - 1);
  for (size_t i = 0; i < len; i++)
    ZPP_ARGCHECK(isgraph((unsigned char)id[i]), "%s: host id '%s' must be printable, without spaces",
                 from, id);
  return zppSuccess;
}

zppResult_t zppCommStateResolveSettings(const zppConfig_t* config, zppCommSettings_t* s) {
  zppCommSettings_t t;
  memset(&t, 0, sizeof(t));
  ZPPCHECK(checkConfig(config));

  if (config && config->timeoutSec != ZPP_CONFIG_UNDEF_INT) {
    ZPP_ARGCHECK(config->timeoutSec > 0, "config: timeoutSec=%d must be positive", config->timeoutSec);
    t.timeoutSec = config->timeoutSec;
    t.timeoutFrom = "config";
  } else {
    int64_t v = 0;
    ZPPCHECK(zppEnvGetInt("ZPP_TIMEOUT", &v));
    ZPP_ARGCHECK(v > 0 && v <= 100000000, "ZPP_TIMEOUT=%lld must be a positive number of seconds",
                 (long long)v);
    t.timeoutSec = (double)v;
    t.timeoutFrom = zppEnvIsSet("ZPP_TIMEOUT") ? "ZPP_TIMEOUT" : "default";
  }

  if (config && config->hostId) {
    ZPPCHECK(checkHostId(config->hostId, "config"));
    snprintf(t.hostId, sizeof(t.hostId), "%s", config->hostId);
    t.hostIdFrom = "config";
  } else {
    char host[256];
    t.hostIdFrom = zppLauncherHostId(host, sizeof(host));
    SYSCHECK(t.hostIdFrom == NULL ? -1 : 0, "gethostname");
    if (strcmp(t.hostIdFrom, "ZPP_HOSTID") == 0) ZPPCHECK(checkHostId(host, "ZPP_HOSTID"));
    /* A host name longer than a host id: its head is still unique enough in
     * practice, and a node identity must never fail a launch. */
    snprintf(t.hostId, sizeof(t.hostId), "%.*s", ZPP_HOSTID_MAX - 1, host);
    for (char* p = t.hostId; *p; p++)
      if (!isgraph((unsigned char)*p)) *p = '_';
  }

  if (config && ZPP_CONFIG_HAS(config, blocking) && config->blocking != ZPP_CONFIG_UNDEF_INT) {
    ZPP_ARGCHECK(config->blocking == 0 || config->blocking == 1, "config: blocking=%d must be 0 or 1",
                 config->blocking);
    t.blocking = config->blocking;
    t.blockingFrom = "config";
  } else {
    int64_t v = 1;
    ZPPCHECK(zppEnvGetInt("ZPP_COMM_BLOCKING", &v));
    ZPP_ARGCHECK(v == 0 || v == 1, "ZPP_COMM_BLOCKING=%lld must be 0 or 1", (long long)v);
    t.blocking = (int)v;
    t.blockingFrom = zppEnvIsSet("ZPP_COMM_BLOCKING") ? "ZPP_COMM_BLOCKING" : "default";
  }

  snprintf(t.name, sizeof(t.name), "%s", config && config->commName ? config->commName : "zpp");
  ZPPCHECK(zppCompressResolve(config, &t.compress));
  *s = t;
  return zppSuccess;
}

/* A 64-bit FNV-1a of the host-id table, to compare it across ranks. */
static uint64_t hashHostIds(const char* const* ids, int n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int r = 0; r < n; r++)
    for (const char* p = ids[r];; p++) {
      h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
      if (*p == '\0') break;
    }
  return h;
}

/* The host ids the topology is built from: the ones the ranks announced,
 * unless ZPP_TOPO_FILE replaces them. Every rank must end up with the same
 * table, or the groups would disagree: checked with an all-gather. */
static zppResult_t buildTopology(struct zppComm* comm, int announcedHostIds) {
  zppResult_t res = zppSuccess;
  const char* path = announcedHostIds ? "" : zppEnvGetString("ZPP_TOPO_FILE");
  char** fileIds = NULL;
  uint64_t* hashes = NULL;
  const char** ids = NULL;
  ZPP_CALLOCGOTO(ids, comm->nranks, res, out);
  if (path[0]) {
    ZPPCHECKGOTO(zppTopoReadHostIds(path, comm->nranks, &fileIds), res, out);
    for (int r = 0; r < comm->nranks; r++) ids[r] = fileIds[r];
    ZPP_INFO(TOPO, "comm %s rank %d: host ids from ZPP_TOPO_FILE=%s (this rank: '%s')", comm->name,
             comm->rank, path, ids[comm->rank]);
  } else {
    for (int r = 0; r < comm->nranks; r++) ids[r] = zppBootstrapHostId(comm->bootstrap, r);
  }
  ZPP_CALLOCGOTO(hashes, comm->nranks, res, out);
  hashes[comm->rank] = hashHostIds(ids, comm->nranks) ^ (path[0] ? 1 : 0);
  ZPPCHECKGOTO(zppBootstrapAllGather(comm->bootstrap, hashes, sizeof(uint64_t)), res, out);
  for (int r = 0; r < comm->nranks; r++)
    if (hashes[r] != hashes[comm->rank])
      ZPP_FAILGOTO(zppInvalidUsage, res, out, TOPO,
                   "comm %s: ranks %d and %d see different host-id tables: set ZPP_TOPO_FILE to "
                   "the same file on every rank, or on none",
                   comm->name, comm->rank, r);
  ZPPCHECKGOTO(zppTopoCreate(comm->nranks, ids, &comm->topo), res, out);
  snprintf(comm->hostId, sizeof(comm->hostId), "%s", ids[comm->rank]);
  ZPP_INFO(TOPO, "comm %s rank %d: node %d of %d, local rank %d of %d%s", comm->name, comm->rank,
           comm->topo->nodeOf[comm->rank], comm->topo->nNodes, comm->topo->localRankOf[comm->rank],
           comm->topo->nodeSize[comm->topo->nodeOf[comm->rank]],
           comm->topo->uniform ? "" : " (nodes hold different numbers of ranks)");
out:
  free(hashes);
  free(ids);
  zppTopoFreeHostIds(fileIds, comm->nranks);
  return res;
}

/* Frees what exists; accepts a half-built communicator, and one still
 * being built in the background (its creation is stopped first). */
static void commFree(struct zppComm* comm) {
  if (comm == NULL) return;
  if (comm->hasCreator) {
    if (atomic_load(&comm->creating)) { /* destroyed while being built: stop, quietly */
      atomic_store(&comm->aborted, 1);
      zppBootstrapAbort(comm->bootstrap);
    }
    pthread_join(comm->creator, NULL);
  }
  zppTransportsDestroy(comm);
  zppTopoDestroy(comm->topo);
  zppBootstrapDestroy(comm->bootstrap);
  pthread_mutex_destroy(&comm->errorLock);
  zppHandleUnregister(comm, ZPP_HANDLE_COMM); /* a half-built one: not yet unregistered */
  free(comm);
}

/* The waiting part of creation, in the caller's thread or the creator's. */
static zppResult_t build(struct zppComm* comm, const zppUniqueId* id, const zppCommSettings_t* s) {
  ZPPCHECK(zppBootstrapJoin(comm->bootstrap, id, s->hostId));
  if (s->grow) ZPPCHECK(zppCommStateGrowCheck(comm, s->growFromSize));
  ZPPCHECK(buildTopology(comm, s->announcedHostIds));
  ZPPCHECK(zppTransportsInit(comm));
  atomic_store(&comm->built, 1);
  ZPP_INFO(INIT, "comm %s rank %d/%d ready", comm->name, comm->rank, comm->nranks);
  return zppSuccess;
}

typedef struct {
  struct zppComm* comm;
  zppUniqueId id;
  zppCommSettings_t s;
} creation_t;

static void* creatorMain(void* arg) {
  creation_t* c = arg;
  struct zppComm* comm = c->comm;
  zppResult_t res = build(comm, &c->id, &c->s);
  /* An abort, revoke or destroy meanwhile is no error to log (and the first
   * two keep their own reason). */
  if (res != zppSuccess && !atomic_load(&comm->aborted))
    zppCommStateSetError(comm, res, "comm %s rank %d: creation failed: %s", comm->name, comm->rank,
                         zppLogLastError());
  atomic_store(&comm->creating, 0);
  free(c);
  return NULL;
}

zppResult_t zppCommStateInitWithSettings(zppComm_t* out, int nranks, const zppUniqueId* id, int rank,
                                         const zppCommSettings_t* s) {
  zppResult_t res = zppSuccess;
  struct zppComm* comm = NULL;
  ZPP_CALLOC(comm, 1);
  if (pthread_mutex_init(&comm->errorLock, NULL) != 0) {
    free(comm);
    ZPP_FAIL(zppSystemError, INIT, "pthread_mutex_init failed");
  }
  ZPPCHECKGOTO(zppHandleRegister(comm, ZPP_HANDLE_COMM), res, err_free);
  comm->rank = rank;
  comm->nranks = nranks;
  comm->timeoutSec = s->timeoutSec;
  comm->blocking = s->blocking;
  snprintf(comm->hostId, sizeof(comm->hostId), "%s", s->hostId);
  snprintf(comm->name, sizeof(comm->name), "%s", s->name);
  /* Log lines show the rank of the process's own communicator: a split,
   * shrink or grow of it does not change what they show. */
  if (!s->announcedHostIds || zppLogGetRank() < 0) zppLogSetRank(rank);
  ZPP_INFO(INIT, "comm %s rank %d/%d: timeout %.0f s (%s), host id '%s' (%s)%s", comm->name, rank,
           nranks, s->timeoutSec, s->timeoutFrom, s->hostId, s->hostIdFrom,
           s->blocking ? "" : ", created in the background (blocking = 0)");
  zppCompressApply(comm, &s->compress);
  ZPPCHECKGOTO(zppBootstrapCreate(rank, nranks, s->timeoutSec, &comm->bootstrap), res, err_free);
  if (s->meetSec > 0) zppBootstrapSetJoinTimeout(comm->bootstrap, s->meetSec);
  if (s->blocking) {
    ZPPCHECKGOTO(build(comm, id, s), res, err_free);
    *out = comm;
    return zppSuccess;
  }
  creation_t* c = NULL;
  ZPP_CALLOCGOTO(c, 1, res, err_free);
  c->comm = comm;
  c->id = *id;
  c->s = *s;
  atomic_store(&comm->creating, 1);
  int rc = pthread_create(&comm->creator, NULL, creatorMain, c);
  if (rc != 0) {
    free(c);
    atomic_store(&comm->creating, 0);
    errno = rc;
    SYSCHECKGOTO(-1, "pthread_create (communicator creation)", res, err_free);
  }
  comm->hasCreator = 1;
  *out = comm;
  return zppInProgress;
err_free:
  commFree(comm);
  return res;
}

zppResult_t zppCommStateNewUniqueId(zppUniqueId* id) {
  zppCommSettings_t s;
  ZPPCHECK(zppCommStateResolveSettings(NULL, &s));
  return zppBootstrapCreateRoot(id, NULL, 0, -1, NULL, 0, s.timeoutSec);
}

zppResult_t zppCommStateCheckLive(const struct zppComm* comm, const char* call) {
  ZPP_ARGCHECK(comm != NULL, "%s: comm is NULL", call);
  /* Looked up, not read from the object: it may have been freed. */
  ZPP_ARGCHECK(zppHandleIsLive(comm, ZPP_HANDLE_COMM),
               "%s: not a live communicator (destroyed, or not made by zppCommInitRank)", call);
  return zppSuccess;
}

/* Why a communicator whose creation has not succeeded cannot serve a call. */
static zppResult_t notBuilt(const struct zppComm* comm, const char* call) {
  if (atomic_load(&comm->creating)) {
    ZPP_INFO(INIT,
             "%s: comm %s rank %d is still being created (blocking = 0): wait until "
             "zppCommGetAsyncError says zppSuccess",
             call, comm->name, comm->rank);
    return zppInProgress;
  }
  zppResult_t e = (zppResult_t)atomic_load(&comm->asyncError);
  ZPP_INFO(INIT, "%s: comm %s rank %d was never built: %s", call, comm->name, comm->rank,
           comm->lastError);
  return e != zppSuccess ? e : zppInternalError;
}

zppResult_t zppCommStateCheckBuilt(const struct zppComm* comm, const char* call) {
  ZPPCHECK(zppCommStateCheckLive(comm, call));
  return atomic_load(&comm->built) ? zppSuccess : notBuilt(comm, call);
}

zppResult_t zppCommStateAsyncError(const struct zppComm* comm) {
  zppResult_t e = (zppResult_t)atomic_load(&comm->asyncError);
  if (e == zppSuccess && !atomic_load(&comm->built) && atomic_load(&comm->creating))
    return zppInProgress;
  return e;
}

/* Destroy and abort take the handle out of the registry first, in one step
 * under its lock: of two calls on one handle (twice, or from two threads)
 * exactly one frees it. */
static zppResult_t takeHandle(struct zppComm* comm, const char* call) {
  ZPP_ARGCHECK(zppHandleUnregister(comm, ZPP_HANDLE_COMM),
               "%s: not a live communicator (destroyed, or not made by zppCommInitRank)", call);
  return zppSuccess;
}

zppResult_t zppCommStateDestroy(struct zppComm* comm) {
  ZPPCHECK(takeHandle(comm, "zppCommDestroy"));
  ZPP_INFO(INIT, "comm %s rank %d/%d destroyed", comm->name, comm->rank, comm->nranks);
  commFree(comm);
  return zppSuccess;
}

void zppCommStateStop(struct zppComm* comm, const char* reason) {
  if (atomic_exchange(&comm->aborted, 1)) return;
  /* Not through zppCommStateSetError: this is asked for, not an error to log. */
  pthread_mutex_lock(&comm->errorLock);
  if (atomic_load(&comm->asyncError) == zppSuccess) {
    snprintf(comm->lastError, sizeof(comm->lastError), "comm %s rank %d: %s", comm->name, comm->rank,
             reason);
    atomic_store(&comm->asyncError, (int)zppRemoteError);
  }
  pthread_mutex_unlock(&comm->errorLock);
  ZPP_INFO(INIT, "comm %s rank %d/%d: %s", comm->name, comm->rank, comm->nranks, reason);
  zppBootstrapAbort(comm->bootstrap);
  /* A creation still at work is ended by the bootstrap's abort (its waits
   * are there); its transports, still being made, are not touched, and no
   * call can have used them yet. */
  if (!atomic_load(&comm->creating)) zppTransportsAbort(comm);
}

zppResult_t zppCommStateAbort(struct zppComm* comm) {
  ZPPCHECK(takeHandle(comm, "zppCommAbort"));
  /* Not after a revoke or an error: the peers' calls end by those already. */
  comm->farewell = atomic_load(&comm->built) && !atomic_load(&comm->aborted) &&
                   atomic_load(&comm->asyncError) == zppSuccess;
  zppCommStateStop(comm, "aborted by zppCommAbort");
  /* The frees wait for the threads stopped above to leave. */
  commFree(comm);
  return zppSuccess;
}

zppResult_t zppCommStateRevoke(struct zppComm* comm) {
  ZPPCHECK(zppCommStateCheckLive(comm, "zppCommRevoke"));
  zppCommStateStop(comm, "revoked by zppCommRevoke");
  return zppSuccess;
}

const char* zppCommStateLastError(const struct zppComm* comm) {
  if (zppHandleIsLive(comm, ZPP_HANDLE_COMM) && atomic_load(&comm->asyncError) != zppSuccess)
    return comm->lastError;
  return zppLogLastError();
}

void zppCommStateSetError(struct zppComm* comm, zppResult_t error, const char* fmt, ...) {
  if (comm == NULL || error == zppSuccess || error == zppInProgress) return;
  pthread_mutex_lock(&comm->errorLock);
  if (atomic_load(&comm->asyncError) == zppSuccess) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(comm->lastError, sizeof(comm->lastError), fmt, ap);
    va_end(ap);
    atomic_store(&comm->asyncError, (int)error);
    ZPP_ERR(INIT, "%s", comm->lastError);
  }
  pthread_mutex_unlock(&comm->errorLock);
}

zppResult_t zppCommStateCheckUsable(const struct zppComm* comm) {
  ZPP_ARGCHECK(comm != NULL, "communicator is NULL");
  ZPP_ARGCHECK(zppHandleIsLive(comm, ZPP_HANDLE_COMM),
               "not a live communicator (destroyed, or not made by zppCommInitRank)");
  if (!atomic_load(&comm->built)) return notBuilt(comm, "the call");
  int e = atomic_load(&comm->asyncError);
  if (e != zppSuccess) {
    /* Logged at ERROR when it happened; here only the trace. */
    ZPP_INFO(INIT, "comm %s rank %d is broken: %s", comm->name, comm->rank, comm->lastError);
    return (zppResult_t)e;
  }
  return zppSuccess;
}
