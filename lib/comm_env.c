/*
 * zppCommInitFromEnv: a communicator from the launcher's environment.
 *
 * Rank and size come from torchrun (RANK, WORLD_SIZE, LOCAL_RANK), OpenMPI
 * (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK), MPICH (PMI_RANK/SIZE) or srun
 * (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with SLURM_STEP_ID), the
 * first whose rank variable is set (core/launcher_env.h, the one table
 * the tools read too). The rendezvous root is ZPP_ROOT=host:port, else
 * MASTER_ADDR and MASTER_PORT + ZPP_MASTER_PORT_OFFSET (default 1: under
 * torchrun, torch's own store already listens on MASTER_PORT); under srun
 * what is missing of these comes from Slurm: the step's first node and a
 * port derived from the job and step ids. Rank 0 opens the root on every
 * interface at that port; every rank, rank 0 included, connects to it by
 * name, retrying until the timeout, so start order does not matter. One
 * rank alone needs no rendezvous, and no secret.
 *
 * The secret: ZPP_SECRET (the same on every rank). Without it there is no
 * secret to hand out: anything derived from the environment (root address,
 * port, job id) can be computed by whoever can reach MASTER_ADDR, and one
 * packet with it failed a job in 0.6 s. So the launch is refused unless the
 * user accepts an unauthenticated rendezvous with
 * ZPP_UNAUTHENTICATED_RENDEZVOUS=1; then the secret is derived from the root
 * address and the launcher's job id (TORCHELASTIC_RUN_ID, PMIX_NAMESPACE,
 * OMPI_MCA_ess_base_jobid, SLURM_JOB_ID), which still keeps a rank of
 * another job or a stale rank of an earlier one out. Slurm has no secret to
 * give either: export ZPP_SECRET before srun, which passes the environment
 * on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "launcher_env.h"
#include "lib/bootstrap/bootstrap.h"
#include "lib/comm.h"
#include "lib/comm_internal.h"
#include "params.h"

typedef struct {
  int rank, nranks, localRank; /* localRank -1: not given */
  const char* launcher;
  zppLauncherRoot_t root;
} envLaunch_t;

static zppResult_t readLaunch(envLaunch_t* e) {
  char err[512];
  zppLauncherEnv_t l;
  int found = zppLauncherEnvRead(&l, err, sizeof(err));
  if (found == 0)
    ZPP_FAIL(zppInvalidArgument, ENV, "zppCommInitFromEnv: no rank in the environment: %s", err);
  if (found < 0) ZPP_FAIL(zppInvalidArgument, ENV, "zppCommInitFromEnv: %s", err);
  e->rank = l.rank;
  e->nranks = l.nranks;
  e->localRank = l.localRank;
  e->launcher = l.launcher;
  if (e->nranks == 1) return zppSuccess; /* no rendezvous: see below */
  if (zppLauncherRootRead(&l, 1, &e->root, err, sizeof(err)) != 0)
    ZPP_FAIL(zppInvalidArgument, ENV, "zppCommInitFromEnv: %s", err);
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
  snprintf(buf, len, "zpp-env:%s:%d:%s", e->root.host, e->root.port, job);
}

zppResult_t zppCommStateInitFromEnv(zppComm_t* comm, const zppConfig_t* config) {
  envLaunch_t e;
  memset(&e, 0, sizeof(e));
  ZPPCHECK(readLaunch(&e));
  zppCommSettings_t s;
  ZPPCHECK(zppCommStateResolveSettings(config, &s));

  zppUniqueId id;
  if (e.nranks == 1) {
    /* Nobody to meet (srun -n 1, an interactive step): a root of our own
     * with a random secret, as zppGetUniqueId makes. */
    ZPP_INFO(ENV, "zppCommInitFromEnv: %s launch, one rank: no rendezvous", e.launcher);
    ZPPCHECK(zppCommStateNewUniqueId(&id));
  } else {
    const zppLauncherRoot_t* r = &e.root;
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
                   r->host, r->port);
      deriveSecret(&e, derived, sizeof(derived));
      secret = derived;
      if (e.rank == 0)
        ZPP_WARN(ENV,
                 "zppCommInitFromEnv: no ZPP_SECRET, ZPP_UNAUTHENTICATED_RENDEZVOUS=1: anyone "
                 "who can reach %s:%d can join or fail this job",
                 r->host, r->port);
    }
    ZPP_INFO(ENV, "zppCommInitFromEnv: %s launch, rank %d of %d, local rank %d, root %s (%s):%d (%s)",
             e.launcher, e.rank, e.nranks, e.localRank, r->host, r->hostFrom, r->port, r->portFrom);
    if (e.rank == 0) {
      /* Every interface: MASTER_ADDR may name this host by any of them. The
       * id that CreateRoot writes is not used; every rank builds the same one
       * from the name below. */
      zppResult_t res =
          zppBootstrapCreateRoot(&id, "0.0.0.0", r->port, e.nranks, (const unsigned char*)secret,
                                 strlen(secret), s.timeoutSec);
      if (res != zppSuccess && strcmp(r->portFrom, "SLURM_JOB_ID and SLURM_STEP_ID") == 0)
        ZPP_WARN(ENV,
                 "zppCommInitFromEnv: port %d was derived from SLURM_JOB_ID and "
                 "SLURM_STEP_ID; if another job holds it, set MASTER_PORT",
                 r->port);
      ZPPCHECK(res);
    }
    ZPPCHECK(zppBootstrapMakeId(&id, r->host, r->port, (const unsigned char*)secret, strlen(secret)));
  }
  zppComm_t c = NULL;
  zppResult_t res = zppCommStateInitWithSettings(&c, e.nranks, &id, e.rank, &s);
  if (res == zppInProgress) { /* blocking = 0: no topology yet to check the launcher's local rank by */
    *comm = c;
    return res;
  }
  ZPPCHECK(res);
  int local = c->topo->localRankOf[e.rank];
  if (e.localRank >= 0 && e.localRank != local)
    ZPP_WARN(ENV,
             "zppCommInitFromEnv: rank %d: the launcher says local rank %d, the host ids say %d "
             "(host id '%s'): the host ids decide; set ZPP_HOSTID if they are wrong",
             e.rank, e.localRank, local, c->hostId);
  *comm = c;
  return zppSuccess;
}
