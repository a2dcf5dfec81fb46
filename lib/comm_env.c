/*
 * zppCommInitFromEnv: a communicator from the launcher's environment.
 *
 * Rank and size come from torchrun (RANK, WORLD_SIZE, LOCAL_RANK), OpenMPI
 * (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK) or MPICH (PMI_RANK/SIZE), the first
 * whose rank variable is set. The rendezvous root is ZPP_ROOT=host:port, else
 * MASTER_ADDR and MASTER_PORT + ZPP_MASTER_PORT_OFFSET (default 1: under
 * torchrun, torch's own store already listens on MASTER_PORT). Rank 0 opens
 * the root on every interface at that port; every rank, rank 0 included,
 * connects to it by name, retrying until the timeout, so start order does
 * not matter.
 *
 * The secret: ZPP_SECRET (the same on every rank). Without it there is no
 * secret to hand out: anything derived from the environment (root address,
 * port, job id) can be computed by whoever can reach MASTER_ADDR, and one
 * packet with it failed a job in 0.6 s. So the launch is refused unless the
 * user accepts an unauthenticated rendezvous with
 * ZPP_UNAUTHENTICATED_RENDEZVOUS=1; then the secret is derived from the root
 * address and the launcher's job id (TORCHELASTIC_RUN_ID, PMIX_NAMESPACE,
 * OMPI_MCA_ess_base_jobid, SLURM_JOB_ID), which still keeps a rank of
 * another job or a stale rank of an earlier one out.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/bootstrap/bootstrap.h"
#include "lib/comm.h"
#include "lib/comm_internal.h"
#include "params.h"

/* *found = 0 when unset; set but not an integer is an error naming it. */
static zppResult_t envInt(const char* name, int* value, int* found) {
  const char* text = getenv(name);
  *found = 0;
  if (text == NULL) return zppSuccess;
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (text[0] == '\0' || end == text || *end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX)
    ZPP_FAIL(zppInvalidArgument, ENV, "zppCommInitFromEnv: %s='%s' is not an integer", name, text);
  *value = (int)v;
  *found = 1;
  return zppSuccess;
}

static const struct {
  const char *rank, *size, *localRank, *launcher;
} launchers[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OpenMPI"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPICH"},
};

typedef struct {
  int rank, nranks, localRank; /* localRank -1: not given */
  const char* launcher;
  char host[256];
  int port;
  const char* portFrom;
  const char* jobId;
} envLaunch_t;

static zppResult_t readRanks(envLaunch_t* e) {
  for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
    int found = 0, sizeFound = 0, localFound = 0;
    ZPPCHECK(envInt(launchers[i].rank, &e->rank, &found));
    if (!found) continue;
    ZPPCHECK(envInt(launchers[i].size, &e->nranks, &sizeFound));
    if (!sizeFound)
      ZPP_FAIL(zppInvalidArgument, ENV, "zppCommInitFromEnv: %s is set but %s is not",
               launchers[i].rank, launchers[i].size);
    ZPPCHECK(envInt(launchers[i].localRank, &e->localRank, &localFound));
    if (!localFound) e->localRank = -1;
    e->launcher = launchers[i].launcher;
    ZPP_ARGCHECK(e->nranks >= 1, "zppCommInitFromEnv: %s=%d must be at least 1", launchers[i].size,
                 e->nranks);
    ZPP_ARGCHECK(e->rank >= 0 && e->rank < e->nranks, "zppCommInitFromEnv: %s=%d out of range 0..%d (%s=%d)",
                 launchers[i].rank, e->rank, e->nranks - 1, launchers[i].size, e->nranks);
    return zppSuccess;
  }
  ZPP_FAIL(zppInvalidArgument, ENV,
           "zppCommInitFromEnv: no rank in the environment: set RANK and WORLD_SIZE (as torchrun "
           "does), or run under mpirun (OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE)");
}

static zppResult_t parsePort(const char* name, const char* text, int* port) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (text[0] == '\0' || end == text || *end != '\0' || errno != 0 || v < 1 || v > 65535)
    ZPP_FAIL(zppInvalidArgument, ENV, "zppCommInitFromEnv: %s: port '%s' is not a number in 1..65535",
             name, text);
  *port = (int)v;
  return zppSuccess;
}

static zppResult_t readRoot(envLaunch_t* e) {
  const char* root = zppEnvGetString("ZPP_ROOT");
  if (root[0]) {
    const char* colon = strrchr(root, ':');
    ZPP_ARGCHECK(colon != NULL && colon != root && (size_t)(colon - root) < sizeof(e->host),
                 "zppCommInitFromEnv: ZPP_ROOT='%s' is not host:port", root);
    snprintf(e->host, sizeof(e->host), "%.*s", (int)(colon - root), root);
    ZPPCHECK(parsePort("ZPP_ROOT", colon + 1, &e->port));
    e->portFrom = "ZPP_ROOT";
    return zppSuccess;
  }
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  ZPP_ARGCHECK(addr != NULL && addr[0] != '\0',
               "zppCommInitFromEnv: MASTER_ADDR is not set: torchrun sets it; under mpirun export "
               "MASTER_ADDR and MASTER_PORT, or ZPP_ROOT=host:port");
  ZPP_ARGCHECK(port != NULL && port[0] != '\0',
               "zppCommInitFromEnv: MASTER_PORT is not set (MASTER_ADDR is '%s'); or set "
               "ZPP_ROOT=host:port",
               addr);
  ZPP_ARGCHECK(strlen(addr) < sizeof(e->host), "zppCommInitFromEnv: MASTER_ADDR is too long");
  snprintf(e->host, sizeof(e->host), "%s", addr);
  int base = 0;
  int64_t offset = 0;
  ZPPCHECK(parsePort("MASTER_PORT", port, &base));
  ZPPCHECK(zppEnvGetInt("ZPP_MASTER_PORT_OFFSET", &offset));
  ZPP_ARGCHECK(offset >= 0 && base + offset <= 65535,
               "zppCommInitFromEnv: MASTER_PORT=%d + ZPP_MASTER_PORT_OFFSET=%lld is not a port", base,
               (long long)offset);
  e->port = base + (int)offset;
  e->portFrom = offset ? "MASTER_PORT + ZPP_MASTER_PORT_OFFSET" : "MASTER_PORT";
  return zppSuccess;
}

static void deriveSecret(const envLaunch_t* e, char* buf, size_t len) {
  static const char* jobVars[] = {"TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                                  "SLURM_JOB_ID"};
  const char* job = "";
  for (size_t i = 0; i < sizeof(jobVars) / sizeof(jobVars[0]) && !job[0]; i++) {
    const char* v = getenv(jobVars[i]);
    if (v) job = v;
  }
  /* Not nranks: a rank with another WORLD_SIZE must hear "nranks mismatch",
   * not "wrong secret". */
  snprintf(buf, len, "zpp-env:%s:%d:%s", e->host, e->port, job);
}

zppResult_t zppCommInitFromEnv(zppComm_t* comm, zppConfig_t* config) {
  ZPP_ARGCHECK(comm != NULL, "zppCommInitFromEnv: comm (the output) is NULL");
  envLaunch_t e;
  memset(&e, 0, sizeof(e));
  ZPPCHECK(readRanks(&e));
  ZPPCHECK(readRoot(&e));
  zppCommSettings_t s;
  ZPPCHECK(zppCommStateResolveSettings(config, &s));

  char derived[400];
  const char* secret = zppEnvGetString("ZPP_SECRET");
  if (!secret[0]) {
    int unauthenticated = 0;
    ZPPCHECK(zppEnvGetBool("ZPP_UNAUTHENTICATED_RENDEZVOUS", &unauthenticated));
    ZPP_ARGCHECK(unauthenticated,
                 "zppCommInitFromEnv: ZPP_SECRET is not set: without it anyone who can reach "
                 "%s:%d can join or fail this job. Set ZPP_SECRET to the same random string on "
                 "every rank (e.g. export ZPP_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n') "
                 "before the launcher), or ZPP_UNAUTHENTICATED_RENDEZVOUS=1 to accept that",
                 e.host, e.port);
    deriveSecret(&e, derived, sizeof(derived));
    secret = derived;
    if (e.rank == 0)
      ZPP_WARN(ENV, "zppCommInitFromEnv: no ZPP_SECRET, ZPP_UNAUTHENTICATED_RENDEZVOUS=1: anyone "
                    "who can reach %s:%d can join or fail this job", e.host, e.port);
  }
  ZPP_INFO(ENV, "zppCommInitFromEnv: %s launch, rank %d of %d, local rank %d, root %s:%d (%s)",
           e.launcher, e.rank, e.nranks, e.localRank, e.host, e.port, e.portFrom);

  zppUniqueId id;
  if (e.rank == 0) {
    /* Every interface: MASTER_ADDR may name this host by any of them. The
     * id that CreateRoot writes is not used; every rank builds the same one
     * from the name below. */
    ZPPCHECK(zppBootstrapCreateRoot(&id, "0.0.0.0", e.port, e.nranks, (const unsigned char*)secret,
                                    strlen(secret), s.timeoutSec));
  }
  ZPPCHECK(zppBootstrapMakeId(&id, e.host, e.port, (const unsigned char*)secret, strlen(secret)));
  zppComm_t c = NULL;
  ZPPCHECK(zppCommStateInitWithSettings(&c, e.nranks, &id, e.rank, &s));
  int local = c->topo->localRankOf[e.rank];
  if (e.localRank >= 0 && e.localRank != local)
    ZPP_WARN(ENV,
             "zppCommInitFromEnv: rank %d: the launcher says local rank %d, the host ids say %d "
             "(host id '%s'): the host ids decide; set ZPP_HOSTID if they are wrong",
             e.rank, e.localRank, local, c->hostId);
  *comm = c;
  return zppSuccess;
}
