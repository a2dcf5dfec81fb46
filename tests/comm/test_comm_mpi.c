/*
 * zppCommInitFromEnv under a real mpirun (OpenMPI). Run without arguments,
 * this program is the driver: it picks a free port and runs itself under
 * `mpirun -np 3`; started by mpirun (OMPI_COMM_WORLD_RANK set), it is a
 * rank. The ranks never call MPI: mpirun only launches them, and the
 * rendezvous is ours, at MASTER_ADDR:MASTER_PORT + 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/comm.h"
#include "testutil.h"
#include "perf/common/launch.h"
#include "clock.h"

#ifndef ZPP_MPIRUN
#define ZPP_MPIRUN "mpirun"
#endif

static int envInt(const char* name) {
  const char* v = getenv(name);
  return v ? atoi(v) : -1;
}

static int rankMain(void) {
  int rank = envInt("OMPI_COMM_WORLD_RANK"), size = envInt("OMPI_COMM_WORLD_SIZE");
  int local = envInt("OMPI_COMM_WORLD_LOCAL_RANK");
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitFromEnv(&comm, NULL) == zppSuccess);
  int n = -1, r = -1;
  CHECK(zppCommCount(comm, &n) == zppSuccess && n == size);
  CHECK(zppCommUserRank(comm, &r) == zppSuccess && r == rank);
  zppTopology_t t;
  REQUIRE(zppCommTopology(comm, &t) == zppSuccess);
  /* One machine, one host name: one node, local ranks as mpirun numbers them. */
  CHECK(t.nNodes == 1 && t.localSize == size && t.localRank == local);
  long long* all = calloc((size_t)size, sizeof(long long));
  all[rank] = 1000003LL * (rank + 1);
  CHECK(zppBootstrapAllGather(comm->bootstrap, all, sizeof(long long)) == zppSuccess);
  for (int q = 0; q < size; q++) CHECK_EQ_INT(all[q], 1000003LL * (q + 1));
  free(all);
  CHECK(zppCommDestroy(comm) == zppSuccess);
  char name[64];
  snprintf(name, sizeof(name), "test_comm_mpi rank %d/%d", rank, size);
  return zppTestExit(name);
}

static int isOpenMpi(void) {
  FILE* p = popen(ZPP_MPIRUN " --version 2>&1", "r");
  if (p == NULL) return 0;
  char line[256];
  int yes = 0;
  while (fgets(line, sizeof(line), p))
    if (strstr(line, "Open MPI") || strstr(line, "OpenRTE")) yes = 1;
  pclose(p);
  return yes;
}

static int driverMain(const char* self) {
  if (!isOpenMpi()) {
    printf("test_comm_mpi: %s is not OpenMPI's mpirun: skipped\n", ZPP_MPIRUN);
    return ZPP_TEST_SKIP;
  }
  int port = zppLaunchFreePort(); /* the root's port: MASTER_PORT + 1 */
  REQUIRE(port > 1);
  char masterPort[16];
  snprintf(masterPort, sizeof(masterPort), "%d", port - 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", masterPort, 1);
  setenv("ZPP_TIMEOUT", "30", 1);
  setenv("ZPP_SECRET", "test_comm_mpi-loopback-only", 1); /* the ranks inherit it */
  unsetenv("ZPP_ROOT");
  unsetenv("ZPP_MASTER_PORT_OFFSET");
  /* Containers run tests as root; OpenMPI refuses that unless told. */
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  char* argv[] = {ZPP_MPIRUN, "-np",         "3",  "--oversubscribe", "-x",        "MASTER_ADDR",
                  "-x",       "MASTER_PORT", "-x", "ZPP_TIMEOUT",     (char*)self, NULL};
  fflush(stdout);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execvp(argv[0], argv);
    fprintf(stderr, "test_comm_mpi: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  double t0 = zppClockNow();
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (zppClockNow() - t0 > 90) {
      fprintf(stderr, "test_comm_mpi: mpirun still running after 90 s: killed\n");
      kill(pid, SIGTERM);
      sleep(2);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      CHECK(0);
      return zppTestExit("test_comm_mpi");
    }
    usleep(20000);
  }
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "mpirun status 0x%x", status);
  return zppTestExit("test_comm_mpi");
}

int main(int argc, char** argv) {
  if (getenv("OMPI_COMM_WORLD_RANK")) return rankMain();
  /* mpirun needs a path it can find from its own working directory. */
  static char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return driverMain(argv[0]);
  self[n] = '\0';
  return driverMain(self);
}
