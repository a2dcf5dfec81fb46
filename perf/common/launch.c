#include "perf/common/launch.h"
#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/random.h>
#endif

/* The placement suffix of "NxL/...": ranks r of a block layout moved to
 * other nodes, node sizes unchanged. Returns 0, or -1 for an unknown one. */
static int placeLayout(const char* how, int* nodeOf, long nodes, long per) {
  long n = nodes * per;
  if (strcmp(how, "cyclic") == 0) {
    /* Hosts taken in turn: mpirun --map-by node, Slurm's cyclic. */
    for (long r = 0; r < n; r++) nodeOf[r] = (int)(r % nodes);
    return 0;
  }
  if (strncmp(how, "shuffle:", 8) == 0) {
    char* end = NULL;
    unsigned long seed = strtoul(how + 8, &end, 10);
    if (end == how + 8 || *end != '\0') return -1;
    /* Fisher-Yates with a 64-bit LCG: the same permutation for a seed on
     * every machine, so a failing test names a layout that can be rerun. */
    uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (long r = n - 1; r > 0; r--) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      long k = (long)((x >> 33) % (uint64_t)(r + 1));
      int t = nodeOf[r];
      nodeOf[r] = nodeOf[k];
      nodeOf[k] = t;
    }
    return 0;
  }
  return -1;
}

int zppLaunchParseLayout(const char* layout, int* nodeOf, int maxRanks) {
  if (layout == NULL || layout[0] == '\0') return -1;
  int n = 0;
  if (layout[0] == '@') {
    /* Explicit: the node of every rank, e.g. "@0,1,0,1". */
    const char* p = layout + 1;
    for (;;) {
      char* end = NULL;
      long node = strtol(p, &end, 10);
      if (end == p || node < 0 || node >= maxRanks || n >= maxRanks) return -1;
      nodeOf[n++] = (int)node;
      if (*end == '\0') break;
      if (*end != ',') return -1;
      p = end + 1;
    }
    return n;
  }
  const char* x = strchr(layout, 'x');
  if (x) {
    char* end = NULL;
    long nodes = strtol(layout, &end, 10);
    if (end != x) return -1;
    long per = strtol(x + 1, &end, 10);
    if ((*end != '\0' && *end != '/') || nodes < 1 || per < 1 || nodes * per > maxRanks) return -1;
    for (long i = 0; i < nodes * per; i++) nodeOf[n++] = (int)(i / per);
    if (*end == '/' && placeLayout(end + 1, nodeOf, nodes, per) != 0) return -1;
    return n;
  }
  const char* p = layout;
  for (int node = 0;; node++) {
    char* end = NULL;
    long c = strtol(p, &end, 10);
    if (end == p || c < 1 || n + c > maxRanks) return -1;
    for (long i = 0; i < c; i++) nodeOf[n++] = node;
    if (*end == '\0') break;
    if (*end != ',') return -1;
    p = end + 1;
  }
  return n;
}

/* 1 if port (0: any) can be bound on 127.0.0.1 now; *got receives it. */
static int tryBind(int port, int* got) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  socklen_t len = sizeof(a);
  int ok =
      bind(s, (struct sockaddr*)&a, sizeof(a)) == 0 && getsockname(s, (struct sockaddr*)&a, &len) == 0;
  close(s);
  if (ok) *got = ntohs(a.sin_port);
  return ok;
}

int zppLaunchFreePort(void) {
  /* Below the kernel's ephemeral range when it leaves room: a port there is
   * never handed to a client socket, which could otherwise take it between
   * this call and the listen. */
  int lo = 32768, hi = 60999;
  FILE* f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  if (f) {
    if (fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768;
    fclose(f);
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
  int port = 0;
  for (int i = 0; i < 64 && lo > 12000; i++) {
    seed = seed * 1103515245u + 12345u;
    int p = 10000 + (int)((seed >> 8) % (unsigned)(lo - 1 - 10000)); /* p - 1 is usable too */
    if (tryBind(p, &port)) return port;
  }
  return tryBind(0, &port) ? port : 0;
}

/* The torchrun-style ranks' ZPP_SECRET: made before the fork, the same in
 * every rank of one launch. */
static char launchSecret[33];

static void makeLaunchSecret(void) {
  unsigned char b[16];
  if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    srand((unsigned)(ts.tv_nsec ^ getpid()));
    for (size_t i = 0; i < sizeof(b); i++) b[i] = (unsigned char)rand();
  }
  for (size_t i = 0; i < sizeof(b); i++) snprintf(launchSecret + 2 * i, 3, "%02x", b[i]);
}

static void setEnvInt(const char* name, int v) {
  char buf[16];
  snprintf(buf, sizeof(buf), "%d", v);
  setenv(name, buf, 1);
}

/* In the child: the environment the options ask for. */
static void setupChild(const zppLaunchOpts_t* o, int rank, int nranks, const int* nodeOf,
                       int haveLayout, int masterPort, void* arg) {
  int local = rank, localSize = nranks;
  if (haveLayout) {
    char id[32];
    snprintf(id, sizeof(id), "node%d", nodeOf[rank]);
    setenv("ZPP_HOSTID", id, 1);
    local = 0;
    localSize = 0;
    for (int r = 0; r < nranks; r++) {
      if (nodeOf[r] != nodeOf[rank]) continue;
      if (r < rank) local++;
      localSize++;
    }
  }
  /* Several ranks on one GPU under any NCCL: to NCCL, ranks with different
   * NCCL_HOSTIDs are on different hosts, which it connects through its
   * network transport instead of refusing the shared GPU (before 2.30). */
  const char* perRank = getenv("ZPP_LAUNCH_NCCL_HOST_PER_RANK");
  if (perRank != NULL && strcmp(perRank, "1") == 0) {
    char id[64];
    snprintf(id, sizeof(id), "zpp-launch-rank%d", rank);
    setenv("NCCL_HOSTID", id, 1);
  }
  if (o->torchrunEnv) {
    setEnvInt("RANK", rank);
    setEnvInt("WORLD_SIZE", nranks);
    setEnvInt("LOCAL_RANK", local);
    setEnvInt("LOCAL_WORLD_SIZE", localSize);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setEnvInt("MASTER_PORT", masterPort);
    /* zppCommInitFromEnv wants a secret; the caller's own wins. */
    if (getenv("ZPP_SECRET") == NULL) setenv("ZPP_SECRET", launchSecret, 1);
  }
  for (const char* const* e = o->env; e && *e; e++) {
    const char* eq = strchr(*e, '=');
    if (eq == NULL) continue;
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)(eq - *e), *e);
    setenv(name, eq + 1, 1);
  }
  if (o->setupRank) o->setupRank(rank, nranks, arg);
}

/* Rank 0 makes the id and writes one copy per other rank; each write is
 * atomic (128 bytes < PIPE_BUF), so every reader gets a whole id. */
static int childGetId(int rank, int nranks, int fds[2], double timeoutSec, zppUniqueId* id) {
  memset(id, 0, sizeof(*id));
  if (rank == 0) {
    close(fds[0]);
    int ok = zppGetUniqueId(id) == zppSuccess;
    if (!ok) fprintf(stderr, "zpp_launch: rank 0: zppGetUniqueId failed\n");
    for (int r = 1; r < nranks; r++)
      if (write(fds[1], id, sizeof(*id)) != (ssize_t)sizeof(*id)) ok = 0;
    close(fds[1]);
    return ok;
  }
  close(fds[1]);
  struct pollfd p = {.fd = fds[0], .events = POLLIN};
  int got =
      poll(&p, 1, (int)(timeoutSec * 1e3)) > 0 && read(fds[0], id, sizeof(*id)) == (ssize_t)sizeof(*id);
  close(fds[0]);
  if (!got) fprintf(stderr, "zpp_launch: rank %d: no unique id from rank 0\n", rank);
  return got;
}

static void report(int rank, int status, double timeoutSec) {
  if (status == -1)
    fprintf(stderr, "zpp_launch: rank %d still running after %.0f s: killed\n", rank, timeoutSec);
  else if (status > 128)
    fprintf(stderr, "zpp_launch: rank %d killed by signal %d (%s)\n", rank, status - 128,
            strsignal(status - 128));
  else
    fprintf(stderr, "zpp_launch: rank %d exited with %d\n", rank, status);
}

int zppLaunchSpawn(int node, zppLaunchSpawnFn fn, void* arg) {
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid != 0) return (int)pid;
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
#endif
  if (node >= 0) {
    char id[32];
    snprintf(id, sizeof(id), "node%d", node);
    setenv("ZPP_HOSTID", id, 1);
  }
  int rc = fn(arg);
  fflush(NULL);
  _exit(rc & 0xff);
}

int zppLaunch(const zppLaunchOpts_t* opts, zppLaunchFn fn, void* arg) {
  zppLaunchOpts_t o = opts ? *opts : (zppLaunchOpts_t)ZPP_LAUNCH_OPTS_INIT;
  int nodeOf[ZPP_LAUNCH_MAX_RANKS];
  int nranks = o.nranks, haveLayout = o.layout != NULL;
  if (fn == NULL) {
    fprintf(stderr, "zpp_launch: no function to run\n");
    return 2;
  }
  if (haveLayout) {
    int n = zppLaunchParseLayout(o.layout, nodeOf, ZPP_LAUNCH_MAX_RANKS);
    if (n < 0 || (nranks && n != nranks)) {
      fprintf(stderr,
              "zpp_launch: bad layout '%s' for %d ranks (NxL, NxL/cyclic, NxL/shuffle:SEED, a,b,c or "
              "@n0,n1,...)\n",
              o.layout, nranks);
      return 2;
    }
    nranks = n;
  }
  if (nranks < 1 || nranks > ZPP_LAUNCH_MAX_RANKS) {
    fprintf(stderr, "zpp_launch: nranks %d out of range 1..%d\n", nranks, ZPP_LAUNCH_MAX_RANKS);
    return 2;
  }
  double timeoutSec = o.timeoutSec > 0 ? o.timeoutSec : 120.0;
  int masterPort = 0;
  if (o.torchrunEnv) {
    const char* off = getenv("ZPP_MASTER_PORT_OFFSET");
    int offset = off ? atoi(off) : 1;
    int port = zppLaunchFreePort();
    if (port - offset < 1) {
      fprintf(stderr, "zpp_launch: no free port for MASTER_PORT\n");
      return 2;
    }
    masterPort = port - offset;
    makeLaunchSecret();
  }
  int fds[2] = {-1, -1};
  if (o.idMode == ZPP_LAUNCH_ID_RANK0 && pipe(fds) != 0) {
    fprintf(stderr, "zpp_launch: pipe: %s\n", strerror(errno));
    return 2;
  }
  pid_t pids[ZPP_LAUNCH_MAX_RANKS];
  int status[ZPP_LAUNCH_MAX_RANKS];
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  int started = 0;
  for (int r = 0; r < nranks; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "zpp_launch: fork for rank %d: %s\n", r, strerror(errno));
      break;
    }
    if (pid == 0) {
#ifdef __linux__
      /* A test killed at its ctest timeout takes its ranks along. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
#endif
      setupChild(&o, r, nranks, nodeOf, haveLayout, masterPort, arg);
      zppUniqueId id;
      memset(&id, 0, sizeof(id));
      int rc = 1;
      if (o.idMode == ZPP_LAUNCH_ID_NONE || childGetId(r, nranks, fds, timeoutSec, &id))
        rc = fn(r, nranks, &id, arg);
      fflush(NULL);
      _exit(rc & 0xff);
    }
    pids[started++] = pid;
  }
  if (fds[0] >= 0) close(fds[0]);
  if (fds[1] >= 0) close(fds[1]);
  (void)parent;

  int left = started;
  for (int r = 0; r < started; r++) status[r] = -2;
  double deadline = zppClockNow() + timeoutSec, nap = 0.0005;
  while (left > 0) {
    for (int r = 0; r < started; r++) {
      if (status[r] != -2) continue;
      int st = 0;
      pid_t w = waitpid(pids[r], &st, WNOHANG);
      if (w == pids[r]) {
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        left--;
      } else if (w < 0 && errno != EINTR) {
        status[r] = 1;
        left--;
      }
    }
    if (left == 0) break;
    if (zppClockNow() >= deadline) {
      for (int r = 0; r < started; r++) {
        if (status[r] != -2) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], NULL, 0);
        status[r] = -1;
      }
      break;
    }
    struct timespec ts = {0, (long)(nap * 1e9)};
    nanosleep(&ts, NULL);
    if (nap < 0.01) nap *= 2;
  }

  int failed = started < nranks, skipped = 0;
  for (int r = 0; r < started; r++) {
    if (o.statusOut) o.statusOut[r] = status[r];
    if (status[r] == 77) {
      skipped = 1;
    } else if (status[r] != 0) {
      failed = 1;
      if (!o.quiet) report(r, status[r], timeoutSec);
    }
  }
  if (failed) return 1;
  return skipped ? 77 : 0;
}
