/*
 * -N: zpp-perf starts its own ranks, so that a measurement needs no
 * launcher. The parent forks N children and only waits; rank 0 creates the
 * unique id and hands it to the others through pipes made before the fork
 * (no port to pick, no race with another run on the same machine). The
 * parent never holds a communicator: zppGetUniqueId starts a listening
 * thread, and threads do not survive a fork.
 *
 * Never hang: every child dies with the parent (PR_SET_PDEATHSIG), a child
 * whose rank 0 died reads EOF instead of waiting, and once one rank fails
 * the others get a few seconds to report their own view and are then killed
 * rather than left to wait for ZPP_TIMEOUT.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "zpp_perf.h"

#define ZPP_PERF_KILL_GRACE_SEC 5.0

void zppPerfApplyLayout(const zppPerfArgs_t* a, int rank) {
  if (a->layoutNodes <= 0) return;
  char host[32];
  snprintf(host, sizeof host, "node%d", rank / a->layoutPerNode);
  setenv("ZPP_HOSTID", host, 1);
}

int zppPerfRankMain(const zppPerfArgs_t* a, zppPerfEnv_t* env) {
  zppResult_t res = zppCommTopology(env->comm, &env->topo);
  int code;
  if (res != zppSuccess) {
    zppPerfLibError(env, "zppCommTopology", res);
    code = ZPP_PERF_EXIT_ERROR;
  } else {
    code = zppPerfRunAll(a, env);
  }
  /* A rank that failed may leave peers mid-collective: abort rather than
   * destroy, which would wait for operations that will never complete. */
  if (code == ZPP_PERF_EXIT_ERROR) zppCommAbort(env->comm);
  else zppCommDestroy(env->comm);
  env->comm = NULL;
  return code;
}

static int zppPerfWriteAll(int fd, const void* buf, size_t len) {
  const char* p = buf;
  while (len > 0) {
    ssize_t k = write(fd, p, len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

static int zppPerfReadAll(int fd, void* buf, size_t len) {
  char* p = buf;
  while (len > 0) {
    ssize_t k = read(fd, p, len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    len -= (size_t)k;
  }
  return 0;
}

static int zppPerfForkChild(const zppPerfArgs_t* a, int rank, int n, int (*fds)[2]) {
  /* Keep only the pipe ends this rank uses, so that EOF means what it says. */
  for (int r = 1; r < n; r++) {
    close(rank == 0 ? fds[r][0] : fds[r][1]);
    if (rank != 0 && r != rank) close(fds[r][0]);
  }
  zppPerfApplyLayout(a, rank);
  zppPerfEnv_t env;
  memset(&env, 0, sizeof env);
  env.rank = rank;
  env.nranks = n;
  env.launcher = "fork";
  zppUniqueId id;
  zppResult_t res;
  if (rank == 0) {
    res = zppGetUniqueId(&id);
    if (res != zppSuccess) {
      zppPerfLibError(&env, "zppGetUniqueId", res);
      return ZPP_PERF_EXIT_ERROR; /* the pipes close on exit: peers read EOF */
    }
    for (int r = 1; r < n; r++) {
      if (zppPerfWriteAll(fds[r][1], &id, sizeof id) != 0)
        fprintf(stderr, "zpp-perf: rank 0: cannot pass the unique id to rank %d: %s\n", r,
                strerror(errno));
      close(fds[r][1]);
    }
  } else {
    int ok = zppPerfReadAll(fds[rank][0], &id, sizeof id) == 0;
    close(fds[rank][0]);
    if (!ok) {
      fprintf(stderr, "zpp-perf: rank %d: rank 0 exited before sharing the unique id\n", rank);
      return ZPP_PERF_EXIT_ERROR;
    }
  }
  res = zppCommInitRank(&env.comm, n, id, rank);
  if (res != zppSuccess) {
    zppPerfLibError(&env, "zppCommInitRank", res);
    return ZPP_PERF_EXIT_ERROR;
  }
  return zppPerfRankMain(a, &env);
}

/* Which of two exit codes wins: an error, then bad usage, then wrong
 * results, then success. */
static int zppPerfSeverity(int code) {
  switch (code) {
    case ZPP_PERF_EXIT_OK: return 0;
    case ZPP_PERF_EXIT_WRONG: return 1;
    case ZPP_PERF_EXIT_USAGE: return 2;
    default: return 3; /* ZPP_PERF_EXIT_ERROR and anything unexpected */
  }
}

static int zppPerfWorse(int a, int b) {
  int w = zppPerfSeverity(a) >= zppPerfSeverity(b) ? a : b;
  return zppPerfSeverity(w) == 3 ? ZPP_PERF_EXIT_ERROR : w;
}

int zppPerfForkRun(const zppPerfArgs_t* a) {
  int n = a->forkRanks;
  int(*fds)[2] = calloc((size_t)n, sizeof *fds);
  pid_t* pids = calloc((size_t)n, sizeof *pids);
  if (fds == NULL || pids == NULL) {
    fprintf(stderr, "zpp-perf: out of memory\n");
    free(fds);
    free(pids);
    return ZPP_PERF_EXIT_ERROR;
  }
  for (int r = 1; r < n; r++) {
    if (pipe(fds[r]) != 0) {
      fprintf(stderr, "zpp-perf: pipe: %s\n", strerror(errno));
      for (int k = 1; k < r; k++) {
        close(fds[k][0]);
        close(fds[k][1]);
      }
      free(fds);
      free(pids);
      return ZPP_PERF_EXIT_ERROR;
    }
  }
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  int started = 0;
  for (int r = 0; r < n; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "zpp-perf: fork: %s\n", strerror(errno));
      break;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(ZPP_PERF_EXIT_ERROR); /* parent already gone */
      int code = zppPerfForkChild(a, r, n, fds);
      fflush(stdout);
      fflush(stderr);
      _exit(code);
    }
    pids[r] = pid;
    started++;
  }
  for (int r = 1; r < n; r++) {
    close(fds[r][0]);
    close(fds[r][1]);
  }
  int worst = started == n ? ZPP_PERF_EXIT_OK : ZPP_PERF_EXIT_ERROR;
  int alive = started;
  double killAt = started == n ? 0.0 : zppPerfNow();
  while (alive > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, killAt > 0 ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {
      if (zppPerfNow() >= killAt) {
        for (int r = 0; r < n; r++)
          if (pids[r] > 0) kill(pids[r], SIGKILL);
      }
      struct timespec ts = {0, 50 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    int rank = -1;
    for (int r = 0; r < n; r++)
      if (pids[r] == pid) rank = r;
    if (rank < 0) continue;
    pids[rank] = 0;
    alive--;
    int code;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
    } else {
      fprintf(stderr, "zpp-perf: rank %d died: signal %d\n", rank,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
      code = ZPP_PERF_EXIT_ERROR;
    }
    worst = zppPerfWorse(worst, code);
    if (code == ZPP_PERF_EXIT_ERROR && killAt == 0.0) killAt = zppPerfNow() + ZPP_PERF_KILL_GRACE_SEC;
  }
  free(fds);
  free(pids);
  return worst;
}
