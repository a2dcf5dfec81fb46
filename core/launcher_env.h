/*
 * Who started this process, read from the launcher's environment: the one
 * table of launchers (torchrun, OpenMPI, MPICH, Slurm's srun) that
 * zppCommInitFromEnv, fault injection and the tools (zpp-perf, zpp-health,
 * zpp-train) read, and where the rendezvous root is.
 *
 * Precedence: the first launcher of the table whose rank variable is set.
 * Slurm comes last: under `srun torchrun ...`, or mpirun inside an
 * allocation, SLURM_* describe the outer step and the inner launcher's
 * variables are the right ones. A Slurm rank is a task srun started, one
 * with SLURM_PROCID and SLURM_STEP_ID: a batch script has SLURM_PROCID=0 and
 * SLURM_NTASKS of the whole job too, but no step id (Slurm 22.05, measured),
 * and is no rank of anything.
 *
 * Nothing here logs: an error comes back as text in err, which the library
 * logs (ZPP_FAIL) and a tool prints.
 */
#ifndef ZPP_LAUNCHER_ENV_H_
#define ZPP_LAUNCHER_ENV_H_

#include <stddef.h>

typedef struct {
  int rank, nranks;
  int localRank;        /* -1: the launcher does not say */
  const char* launcher; /* "torchrun", "OpenMPI", "MPICH", "Slurm" */
  const char* rankVar;  /* the variables it came from, for messages */
  const char* sizeVar;
} zppLauncherEnv_t;

/* 1: a launcher's rank and size, checked (rank in 0..size-1), in *e;
 * 0: no launcher (err says what to set, and why a batch script's
 *    SLURM_PROCID does not count);
 * -1: a variable is set but wrong; err names it and its value. */
int zppLauncherEnvRead(zppLauncherEnv_t* e, char* err, size_t errLen);

/* For the tools' reports: the launcher's rank count (0 without one, -1 when
 * its variables are wrong: zppCommInitFromEnv then says which), and in
 * *command how the ranks were started: "mpirun", "srun", or "env" (torchrun,
 * MPICH, variables set by hand, none). */
int zppLauncherEnvRanks(const char** command);

/* This process's launcher rank, -1 when none (or it does not parse): for
 * the "am I rank 0" decisions made before anything else. The rank variable
 * alone counts here, without its size. */
int zppLauncherEnvRank(void);

typedef struct {
  char host[256];
  int port;
  const char* hostFrom; /* "ZPP_ROOT", "MASTER_ADDR", "SLURM_STEP_NODELIST" */
  const char* portFrom; /* "ZPP_ROOT", "MASTER_PORT", "MASTER_PORT + ZPP_MASTER_PORT_OFFSET",
                           "SLURM_JOB_ID and SLURM_STEP_ID" */
} zppLauncherRoot_t;

/* Where rank 0 opens the rendezvous root: ZPP_ROOT=host:port; else
 * MASTER_ADDR and MASTER_PORT + ZPP_MASTER_PORT_OFFSET (default 1). Under
 * srun (e->launcher "Slurm") what of these is missing comes from Slurm:
 * the host is the first node of SLURM_STEP_NODELIST, where task 0 runs
 * under the block, cyclic and plane distributions (an arbitrary one is
 * refused: name the host), the port zppSlurmPort(SLURM_JOB_ID,
 * SLURM_STEP_ID). Task 0 checks that SLURMD_NODENAME is that node.
 * Without needPort a missing port is no error (r->port 0: the caller has
 * its own). 0, or -1 with err naming the variable. */
int zppLauncherRootRead(const zppLauncherEnv_t* e, int needPort, zppLauncherRoot_t* r, char* err,
                        size_t errLen);

/* This process's node identity as the environment gives it: ZPP_HOSTID,
 * else SLURMD_NODENAME (under Slurm the node's own name: the host name's
 * equal where one slurmd runs per host, and the only thing that tells nodes
 * apart where several slurmd share one, as in slurm.conf's multiple-slurmd
 * setups), else the host name. Returns which ("ZPP_HOSTID",
 * "SLURMD_NODENAME", "host name"), NULL when gethostname fails. As found:
 * the communicator checks and trims it. */
const char* zppLauncherHostId(char* out, size_t len);

/* The first host of a Slurm host list ("gpu[07-09,12],login1" -> "gpu07",
 * "r[1-2]n[3-4]" -> "r1n3"): 0, or -1 when the list is empty, malformed or
 * the name does not fit in outLen. */
int zppSlurmFirstHost(const char* list, char* out, size_t outLen);

/* 20000 + (32-bit FNV-1a of "JOB.STEP") mod 12000: the same on every task
 * of a step, different for the steps of a job and (mostly) for jobs sharing
 * a node, below Linux's ephemeral ports (32768-60999). */
int zppSlurmPort(const char* jobId, const char* stepId);

#endif /* ZPP_LAUNCHER_ENV_H_ */
