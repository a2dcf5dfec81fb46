/*
 * The launchers' environment (core/launcher_env.h) without launching
 * anything: Slurm host lists, the derived port, which launcher wins when
 * several are set (srun torchrun, mpirun inside an allocation), the batch
 * script that is no rank, and where the rendezvous root is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/launcher_env.h"
#include "testutil.h"

static const char* allVars[] = {"RANK",
                                "WORLD_SIZE",
                                "LOCAL_RANK",
                                "MASTER_ADDR",
                                "MASTER_PORT",
                                "OMPI_COMM_WORLD_RANK",
                                "OMPI_COMM_WORLD_SIZE",
                                "OMPI_COMM_WORLD_LOCAL_RANK",
                                "PMI_RANK",
                                "PMI_SIZE",
                                "MPI_LOCALRANKID",
                                "ZPP_ROOT",
                                "ZPP_MASTER_PORT_OFFSET",
                                "SLURM_PROCID",
                                "SLURM_NTASKS",
                                "SLURM_LOCALID",
                                "SLURM_STEP_ID",
                                "SLURM_JOB_ID",
                                "SLURM_STEP_NODELIST",
                                "SLURM_DISTRIBUTION",
                                "SLURMD_NODENAME",
                                NULL};

/* Replaces every launcher variable with "NAME=value ..." */
static void setEnv(const char* settings) {
  for (const char** v = allVars; *v; v++) unsetenv(*v);
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", settings);
  char* save = NULL;
  for (char* kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
    char* eq = strchr(kv, '=');
    *eq = '\0';
    setenv(kv, eq + 1, 1);
  }
}

static void testHostList(void) {
  static const struct {
    const char *list, *first;
  } good[] = {
      {"node[01-04,07],gpu1", "node01"},
      {"gpu1,node[2-3]", "gpu1"},
      {"a", "a"},
      {"r[1-2]n[3-4]", "r1n3"},
      {"127.0.0.[2-3]", "127.0.0.2"},
      {"node[007]", "node007"},
      {"n[5,1-3]", "n5"},
      {"n[1-4]-ib", "n1-ib"},
      {"host.example.com", "host.example.com"},
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    char out[64] = "unset";
    int rc = zppSlurmFirstHost(good[i].list, out, sizeof(out));
    CHECK_MSG(rc == 0 && strcmp(out, good[i].first) == 0, "'%s' -> %d '%s', want '%s'", good[i].list,
              rc, out, good[i].first);
  }
  static const char* const bad[] = {"",         ",node1", "node[",  "node[]", "node[a-b]",
                                    "node[1-2", "node]1", "node 1", "[-3]"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char out[64];
    CHECK_MSG(zppSlurmFirstHost(bad[i], out, sizeof(out)) == -1, "'%s' was accepted", bad[i]);
  }
  char small[6];
  CHECK(zppSlurmFirstHost("node[01-02]", small, sizeof(small)) == -1); /* "node01" needs 7 */
  CHECK(zppSlurmFirstHost("node1", small, sizeof(small)) == 0 && strcmp(small, "node1") == 0);
  CHECK(zppSlurmFirstHost("nodes1", small, sizeof(small)) == -1);
}

static void testPort(void) {
  int p = zppSlurmPort("4242", "0");
  CHECK_MSG(p >= 20000 && p < 32000, "port %d", p);
  CHECK_EQ_INT(zppSlurmPort("4242", "0"), p);
  CHECK(zppSlurmPort("4242", "1") != p);
  CHECK(zppSlurmPort("4243", "0") != p);
  /* Spread: 1000 consecutive jobs take many ports, not a handful. */
  static unsigned char seen[12000];
  int distinct = 0;
  for (int j = 0; j < 1000; j++) {
    char id[16];
    snprintf(id, sizeof(id), "%d", 100000 + j);
    int q = zppSlurmPort(id, "0") - 20000;
    REQUIRE(q >= 0 && q < 12000);
    distinct += !seen[q];
    seen[q] = 1;
  }
  CHECK_MSG(distinct > 900, "%d distinct ports for 1000 jobs", distinct);
}

static int readEnv(const char* settings, zppLauncherEnv_t* e, char* err, size_t len) {
  setEnv(settings);
  memset(e, 0, sizeof(*e));
  return zppLauncherEnvRead(e, err, len);
}

static const char* srunVars =
    "SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_LOCALID=1 SLURM_STEP_ID=0 "
    "SLURM_JOB_ID=77 SLURM_STEP_NODELIST=n[1-2]";

static void testPrecedence(void) {
  zppLauncherEnv_t e;
  char err[600], s[512];
  CHECK(readEnv(srunVars, &e, err, sizeof(err)) == 1);
  CHECK_MSG(strcmp(e.launcher, "Slurm") == 0 && e.rank == 3 && e.nranks == 4 && e.localRank == 1,
            "%s %d/%d local %d", e.launcher, e.rank, e.nranks, e.localRank);
  CHECK_EQ_INT(zppLauncherEnvRank(), 3);

  /* srun torchrun: torchrun's ranks are the ones (4 per task here). */
  snprintf(s, sizeof(s), "%s RANK=13 WORLD_SIZE=16 LOCAL_RANK=5", srunVars);
  CHECK(readEnv(s, &e, err, sizeof(err)) == 1);
  CHECK_MSG(strcmp(e.launcher, "torchrun") == 0 && e.rank == 13 && e.nranks == 16 && e.localRank == 5,
            "%s %d/%d", e.launcher, e.rank, e.nranks);
  CHECK_EQ_INT(zppLauncherEnvRank(), 13);
  /* mpirun inside an allocation: OpenMPI's. */
  snprintf(s, sizeof(s), "%s OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=8", srunVars);
  CHECK(readEnv(s, &e, err, sizeof(err)) == 1);
  CHECK(strcmp(e.launcher, "OpenMPI") == 0 && e.rank == 0 && e.nranks == 8 && e.localRank == -1);
  /* MPICH's PMI beside Slurm's. */
  snprintf(s, sizeof(s), "%s PMI_RANK=2 PMI_SIZE=3", srunVars);
  CHECK(readEnv(s, &e, err, sizeof(err)) == 1);
  CHECK(strcmp(e.launcher, "MPICH") == 0 && e.rank == 2 && e.nranks == 3);

  /* A batch script: SLURM_PROCID=0 and the job's SLURM_NTASKS, no step. */
  CHECK(readEnv("SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0 SLURM_JOB_ID=77", &e, err,
                sizeof(err)) == 0);
  CHECK_MSG(strstr(err, "SLURM_STEP_ID") && strstr(err, "batch script"), "%s", err);
  CHECK_EQ_INT(zppLauncherEnvRank(), -1);
  CHECK(readEnv("", &e, err, sizeof(err)) == 0);
  CHECK_MSG(strstr(err, "RANK") && !strstr(err, "batch"), "%s", err);

  /* Wrong values name the variable. */
  static const struct {
    const char *env, *named;
  } bad[] = {
      {"SLURM_PROCID=x SLURM_NTASKS=4 SLURM_STEP_ID=0", "SLURM_PROCID='x'"},
      {"SLURM_PROCID=1 SLURM_STEP_ID=0", "SLURM_NTASKS"},
      {"SLURM_PROCID=4 SLURM_NTASKS=4 SLURM_STEP_ID=0", "SLURM_PROCID=4"},
      {"SLURM_PROCID=0 SLURM_NTASKS=0 SLURM_STEP_ID=0", "SLURM_NTASKS=0"},
      {"SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=one SLURM_STEP_ID=0", "SLURM_LOCALID='one'"},
      {"RANK=0 WORLD_SIZE=2 LOCAL_RANK=x", "LOCAL_RANK='x'"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    CHECK_MSG(readEnv(bad[i].env, &e, err, sizeof(err)) == -1, "[%s] accepted", bad[i].env);
    CHECK_MSG(strstr(err, bad[i].named) != NULL, "[%s]: '%s' lacks %s", bad[i].env, err, bad[i].named);
  }
}

static int readRoot(const char* settings, int needPort, zppLauncherRoot_t* r, char* err, size_t len) {
  zppLauncherEnv_t e;
  if (readEnv(settings, &e, err, len) != 1) return -2;
  return zppLauncherRootRead(&e, needPort, r, err, len);
}

static void testRoot(void) {
  zppLauncherRoot_t r;
  char err[600], s[512];
  /* srun alone: the step's first node, the port from the job and step. */
  CHECK(readRoot(srunVars, 1, &r, err, sizeof(err)) == 0);
  CHECK_MSG(strcmp(r.host, "n1") == 0 && r.port == zppSlurmPort("77", "0") &&
                strcmp(r.hostFrom, "SLURM_STEP_NODELIST") == 0 &&
                strcmp(r.portFrom, "SLURM_JOB_ID and SLURM_STEP_ID") == 0,
            "%s (%s):%d (%s)", r.host, r.hostFrom, r.port, r.portFrom);
  /* What the user names wins, part by part. */
  snprintf(s, sizeof(s), "%s MASTER_ADDR=head", srunVars);
  CHECK(readRoot(s, 1, &r, err, sizeof(err)) == 0);
  CHECK(strcmp(r.host, "head") == 0 && r.port == zppSlurmPort("77", "0"));
  snprintf(s, sizeof(s), "%s MASTER_PORT=29500", srunVars);
  CHECK(readRoot(s, 1, &r, err, sizeof(err)) == 0);
  CHECK(strcmp(r.host, "n1") == 0 && r.port == 29501);
  snprintf(s, sizeof(s), "%s MASTER_PORT=29500 ZPP_MASTER_PORT_OFFSET=0", srunVars);
  CHECK(readRoot(s, 1, &r, err, sizeof(err)) == 0);
  CHECK(r.port == 29500 && strcmp(r.portFrom, "MASTER_PORT") == 0);
  snprintf(s, sizeof(s), "%s ZPP_ROOT=10.0.0.1:4000", srunVars);
  CHECK(readRoot(s, 1, &r, err, sizeof(err)) == 0);
  CHECK(strcmp(r.host, "10.0.0.1") == 0 && r.port == 4000);
  /* Cyclic and plane put task 0 on the first node too; task 0 itself. */
  snprintf(s, sizeof(s), "%s SLURM_DISTRIBUTION=cyclic:block", srunVars);
  CHECK(readRoot(s, 1, &r, err, sizeof(err)) == 0 && strcmp(r.host, "n1") == 0);
  CHECK(readRoot("SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_STEP_ID=3 SLURM_JOB_ID=9 "
                 "SLURM_STEP_NODELIST=gpu[07-08] SLURMD_NODENAME=gpu07 SLURM_DISTRIBUTION=plane=2",
                 1, &r, err, sizeof(err)) == 0);
  CHECK(strcmp(r.host, "gpu07") == 0 && r.port == zppSlurmPort("9", "3"));
  /* torchrun's ranks under srun: no Slurm guesses, MASTER_* are torchrun's. */
  snprintf(s, sizeof(s), "%s RANK=1 WORLD_SIZE=8", srunVars);
  CHECK(readRoot(s, 1, &r, err, sizeof(err)) == -1);
  CHECK_MSG(strstr(err, "MASTER_ADDR") != NULL, "%s", err);
  /* --ctl-port style: a host without a port. */
  CHECK(readRoot("RANK=1 WORLD_SIZE=2 MASTER_ADDR=h", 0, &r, err, sizeof(err)) == 0);
  CHECK(strcmp(r.host, "h") == 0 && r.port == 0);

  static const struct {
    const char *env, *named;
  } bad[] = {
      {"SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=5", "SLURM_STEP_NODELIST"},
      {"SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=5 SLURM_STEP_NODELIST=n[1-",
       "SLURM_STEP_NODELIST='n[1-'"},
      {"SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_STEP_NODELIST=n1", "SLURM_JOB_ID"},
      {"SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=5 SLURM_STEP_NODELIST=n[1-2] "
       "SLURM_DISTRIBUTION=arbitrary",
       "SLURM_DISTRIBUTION=arbitrary"},
      /* Task 0 is not where the list says: it says so at once. */
      {"SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=5 SLURM_STEP_NODELIST=n[1-2] "
       "SLURMD_NODENAME=n2",
       "SLURMD_NODENAME"},
      {"SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID=5 SLURM_STEP_NODELIST=n1 "
       "MASTER_PORT=http",
       "MASTER_PORT"},
      {"RANK=1 WORLD_SIZE=2 MASTER_ADDR=h", "MASTER_PORT"},
      {"RANK=1 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=65535", "ZPP_MASTER_PORT_OFFSET"},
      {"RANK=1 WORLD_SIZE=2 ZPP_ROOT=h", "ZPP_ROOT"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    CHECK_MSG(readRoot(bad[i].env, 1, &r, err, sizeof(err)) == -1, "[%s] accepted: %s:%d", bad[i].env,
              r.host, r.port);
    CHECK_MSG(strstr(err, bad[i].named) != NULL, "[%s]: '%s' lacks %s", bad[i].env, err, bad[i].named);
  }
}

int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : NULL;
#define RUN(name, fn) ZPP_TEST_RUN(only, name, fn)
  RUN("hostlist", testHostList);
  RUN("port", testPort);
  RUN("precedence", testPrecedence);
  RUN("root", testRoot);
  return zppTestExit("test_launcher_env");
}
