#include "launcher_env.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "params.h"

static const struct {
  const char *rank, *size, *localRank, *launcher;
  const char* also; /* must be set too, else the row does not count */
} launchers[] = {
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun", NULL},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OpenMPI", NULL},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPICH", NULL},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm", "SLURM_STEP_ID"},
};

/* 0 unset, 1 parsed, -1 set but not an integer (err says so). */
static int envInt(const char* name, int* value, char* err, size_t errLen) {
  const char* text = getenv(name);
  if (text == NULL) return 0;
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (text[0] == '\0' || end == text || *end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX) {
    snprintf(err, errLen, "%s='%s' is not an integer", name, text);
    return -1;
  }
  *value = (int)v;
  return 1;
}

int zppLauncherEnvRead(zppLauncherEnv_t* e, char* err, size_t errLen) {
  err[0] = '\0';
  for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
    zppLauncherEnv_t t = {0, 0, -1, launchers[i].launcher, launchers[i].rank, launchers[i].size};
    int found = envInt(launchers[i].rank, &t.rank, err, errLen);
    if (found < 0) return -1;
    if (!found) continue;
    if (launchers[i].also && getenv(launchers[i].also) == NULL) continue;
    int sizeFound = envInt(launchers[i].size, &t.nranks, err, errLen);
    if (sizeFound < 0) return -1;
    if (!sizeFound) {
      snprintf(err, errLen, "%s is set but %s is not", launchers[i].rank, launchers[i].size);
      return -1;
    }
    if (envInt(launchers[i].localRank, &t.localRank, err, errLen) < 0) return -1;
    if (t.nranks < 1) {
      snprintf(err, errLen, "%s=%d must be at least 1", launchers[i].size, t.nranks);
      return -1;
    }
    if (t.rank < 0 || t.rank >= t.nranks) {
      snprintf(err, errLen, "%s=%d out of range 0..%d (%s=%d)", launchers[i].rank, t.rank, t.nranks - 1,
               launchers[i].size, t.nranks);
      return -1;
    }
    *e = t;
    return 1;
  }
  int n = snprintf(err, errLen,
                   "set RANK and WORLD_SIZE (as torchrun does), or run under mpirun "
                   "(OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE) or srun (SLURM_PROCID, "
                   "SLURM_NTASKS, SLURM_STEP_ID)");
  if (getenv("SLURM_PROCID") && !getenv("SLURM_STEP_ID") && n > 0 && (size_t)n < errLen)
    snprintf(err + n, errLen - (size_t)n,
             "; SLURM_PROCID is set without SLURM_STEP_ID: a batch script, not a task of srun "
             "(start the ranks with srun)");
  return 0;
}

int zppLauncherEnvRank(void) {
  /* Lenient: the rank alone is enough here (a fault test sets RANK only). */
  for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
    char err[200];
    int rank = -1;
    int found = envInt(launchers[i].rank, &rank, err, sizeof(err));
    if (found == 0 || (launchers[i].also && getenv(launchers[i].also) == NULL)) continue;
    return found == 1 && rank >= 0 ? rank : -1;
  }
  return -1;
}

const char* zppLauncherHostId(char* out, size_t len) {
  const char* id = zppEnvGetString("ZPP_HOSTID");
  const char* node = getenv("SLURMD_NODENAME");
  if (id[0]) {
    snprintf(out, len, "%s", id);
    return "ZPP_HOSTID";
  }
  if (node && node[0]) {
    snprintf(out, len, "%s", node);
    return "SLURMD_NODENAME";
  }
  if (gethostname(out, len) != 0) return NULL;
  out[len - 1] = '\0';
  return "host name";
}

int zppSlurmFirstHost(const char* list, char* out, size_t outLen) {
  size_t n = 0;
  const char* p = list;
  if (p == NULL || outLen == 0) return -1;
  /* The first item ends at the first comma outside brackets; inside a
   * bracket the first range's low bound is the first name's number, kept as
   * written ("[01-04]" -> "01"). */
  while (*p && *p != ',') {
    if (*p == '[') {
      p++;
      const char* lo = p;
      while (isdigit((unsigned char)*p)) p++;
      if (p == lo || (*p != '-' && *p != ',' && *p != ']')) return -1;
      if ((size_t)(p - lo) >= outLen - n) return -1;
      memcpy(out + n, lo, (size_t)(p - lo));
      n += (size_t)(p - lo);
      while (*p && *p != ']') p++;
      if (*p != ']') return -1;
      p++;
      continue;
    }
    if (*p == ']' || isspace((unsigned char)*p)) return -1;
    if (n + 1 >= outLen) return -1;
    out[n++] = *p++;
  }
  if (n == 0) return -1;
  out[n] = '\0';
  return 0;
}

int zppSlurmPort(const char* jobId, const char* stepId) {
  uint32_t h = 2166136261u;
  const char* parts[] = {jobId, ".", stepId};
  for (int i = 0; i < 3; i++)
    for (const char* c = parts[i]; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
  return 20000 + (int)(h % 12000u);
}

static int parsePort(const char* name, const char* text, int* port, char* err, size_t errLen) {
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (text[0] == '\0' || end == text || *end != '\0' || errno != 0 || v < 1 || v > 65535) {
    snprintf(err, errLen, "%s: port '%s' is not a number in 1..65535", name, text);
    return -1;
  }
  *port = (int)v;
  return 0;
}

/* The Slurm host: the first node of the step, if task 0 runs there. */
static int slurmHost(const zppLauncherEnv_t* e, zppLauncherRoot_t* r, char* err, size_t errLen) {
  const char* list = getenv("SLURM_STEP_NODELIST");
  const char* dist = getenv("SLURM_DISTRIBUTION");
  if (list == NULL || list[0] == '\0') {
    snprintf(err, errLen,
             "MASTER_ADDR is not set, nor SLURM_STEP_NODELIST (srun sets it): set "
             "MASTER_ADDR to task 0's host, or ZPP_ROOT=host:port");
    return -1;
  }
  if (dist && strncmp(dist, "arbitrary", 9) == 0) {
    snprintf(err, errLen,
             "SLURM_DISTRIBUTION=%s: task 0 need not run on the first node of "
             "SLURM_STEP_NODELIST; set MASTER_ADDR to its host, or ZPP_ROOT=host:port",
             dist);
    return -1;
  }
  if (zppSlurmFirstHost(list, r->host, sizeof(r->host)) != 0) {
    snprintf(err, errLen, "SLURM_STEP_NODELIST='%s' is not a Slurm host list; set MASTER_ADDR", list);
    return -1;
  }
  r->hostFrom = "SLURM_STEP_NODELIST";
  /* Only task 0 can tell, and a wrong host would leave the others retrying
   * until the timeout: say it at once. */
  const char* node = getenv("SLURMD_NODENAME");
  if (e->rank == 0 && node && node[0] && strcmp(node, r->host) != 0) {
    snprintf(err, errLen,
             "task 0 runs on %s (SLURMD_NODENAME), not on %s, the first node of "
             "SLURM_STEP_NODELIST='%s' (SLURM_DISTRIBUTION=%s): set MASTER_ADDR to "
             "task 0's host, or ZPP_ROOT=host:port",
             node, r->host, list, dist ? dist : "(unset)");
    return -1;
  }
  return 0;
}

int zppLauncherRootRead(const zppLauncherEnv_t* e, int needPort, zppLauncherRoot_t* r, char* err,
                        size_t errLen) {
  memset(r, 0, sizeof(*r));
  err[0] = '\0';
  const char* root = zppEnvGetString("ZPP_ROOT");
  if (root[0]) {
    const char* colon = strrchr(root, ':');
    if (colon == NULL || colon == root || (size_t)(colon - root) >= sizeof(r->host)) {
      snprintf(err, errLen, "ZPP_ROOT='%s' is not host:port", root);
      return -1;
    }
    snprintf(r->host, sizeof(r->host), "%.*s", (int)(colon - root), root);
    if (parsePort("ZPP_ROOT", colon + 1, &r->port, err, errLen) != 0) return -1;
    r->hostFrom = r->portFrom = "ZPP_ROOT";
    return 0;
  }
  int slurm = e && e->launcher && strcmp(e->launcher, "Slurm") == 0;
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (addr && addr[0]) {
    if (strlen(addr) >= sizeof(r->host)) {
      snprintf(err, errLen, "MASTER_ADDR is too long");
      return -1;
    }
    snprintf(r->host, sizeof(r->host), "%s", addr);
    r->hostFrom = "MASTER_ADDR";
  } else if (slurm) {
    if (slurmHost(e, r, err, errLen) != 0) return -1;
  } else {
    snprintf(err, errLen,
             "MASTER_ADDR is not set: torchrun sets it; under mpirun export "
             "MASTER_ADDR and MASTER_PORT, or ZPP_ROOT=host:port");
    return -1;
  }
  if (port && port[0]) {
    int base = 0;
    if (parsePort("MASTER_PORT", port, &base, err, errLen) != 0) return -1;
    const char* off = zppEnvGetString("ZPP_MASTER_PORT_OFFSET");
    char* end = NULL;
    errno = 0;
    long offset = strtol(off, &end, 10);
    if (off[0] == '\0' || *end != '\0' || errno != 0 || offset < 0 || base + offset > 65535) {
      snprintf(err, errLen, "MASTER_PORT=%d + ZPP_MASTER_PORT_OFFSET=%s is not a port", base, off);
      return -1;
    }
    r->port = base + (int)offset;
    r->portFrom = offset ? "MASTER_PORT + ZPP_MASTER_PORT_OFFSET" : "MASTER_PORT";
    return 0;
  }
  if (!needPort) return 0;
  if (!slurm) {
    snprintf(err, errLen, "MASTER_PORT is not set (MASTER_ADDR is '%s'); or set ZPP_ROOT=host:port",
             r->host);
    return -1;
  }
  const char* job = getenv("SLURM_JOB_ID");
  const char* step = getenv("SLURM_STEP_ID");
  if (job == NULL || job[0] == '\0' || step == NULL || step[0] == '\0') {
    snprintf(err, errLen,
             "MASTER_PORT is not set, nor SLURM_JOB_ID and SLURM_STEP_ID to derive "
             "one from: set MASTER_PORT, or ZPP_ROOT=host:port");
    return -1;
  }
  r->port = zppSlurmPort(job, step);
  r->portFrom = "SLURM_JOB_ID and SLURM_STEP_ID";
  return 0;
}

int zppLauncherEnvRanks(const char** command) {
  zppLauncherEnv_t l;
  char err[600];
  int found = zppLauncherEnvRead(&l, err, sizeof err);
  *command = "env";
  if (found == 1 && strcmp(l.launcher, "OpenMPI") == 0) *command = "mpirun";
  if (found == 1 && strcmp(l.launcher, "Slurm") == 0) *command = "srun";
  return found == 1 ? l.nranks : found;
}
