/*
 * zpp-health: main, launch, and the life of a rank (see zpp_health.h for
 * the shape of the program and docs/zpp-health.md for its use).
 *
 * Launch as zpp-perf does: under mpirun or torchrun-style environment every
 * process is one rank; with -N this process forks the ranks itself
 * (perf/common/launch.h), each with the launcher rank in RANK so that ZPP_FAULT's
 * rank= follows the process into every communicator it makes.
 *
 * Rank 0 coordinates over its own TCP port (the control plane); the others
 * connect, then run the tests they are sent until told to quit.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/launcher_env.h"
#include "lib/fault.h"
#include "perf/common/launch.h"
#include "zpp_health.h"

static void zhOwnHostId(char* out, size_t len) {
  /* The library's rule for a rank's node, so that our units are its nodes. */
  if (zppLauncherHostId(out, len) == NULL) snprintf(out, len, "unknown");
}

static void zhHelloOf(zhHello_t* h, int rank, int nranks) {
  memset(h, 0, sizeof *h);
  h->rank = rank;
  h->nranks = nranks;
  h->pid = (int32_t)getpid();
  zhOwnHostId(h->hostId, sizeof h->hostId);
  if (gethostname(h->hostname, sizeof h->hostname) != 0) snprintf(h->hostname, sizeof h->hostname, "?");
  h->hostname[sizeof h->hostname - 1] = '\0';
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (fgets(h->bootId, sizeof h->bootId, f) == NULL) h->bootId[0] = '\0';
    h->bootId[strcspn(h->bootId, "\n")] = '\0';
    fclose(f);
  }
}

/* ---- rank 0 ------------------------------------------------------------------------ */

static int zhBuildUnits(zhCoord_t* c, const zhHello_t* hellos) {
  int n = c->nranks;
  c->ranks = calloc((size_t)n, sizeof(zhRankInfo_t));
  c->units = calloc((size_t)n, sizeof(zhUnit_t));
  int* nodeOf = calloc((size_t)n, sizeof(int));
  if (!c->ranks || !c->units || !nodeOf) {
    free(nodeOf);
    return -1;
  }
  for (int r = 0; r < n; r++) c->ranks[r].hello = hellos[r];
  /* Nodes in order of their lowest rank, as zppCommTopology numbers them. */
  int nNodes = 0;
  for (int r = 0; r < n; r++) {
    nodeOf[r] = -1;
    for (int q = 0; q < r && nodeOf[r] < 0; q++)
      if (strcmp(c->ranks[q].hello.hostId, c->ranks[r].hello.hostId) == 0) nodeOf[r] = nodeOf[q];
    if (nodeOf[r] < 0) nodeOf[r] = nNodes++;
  }
  c->nNodes = nNodes;
  /* One node: its ranks are tested against each other instead. */
  c->unitsAreNodes = nNodes >= 2;
  c->nUnits = c->unitsAreNodes ? nNodes : n;
  for (int u = 0; u < c->nUnits; u++) {
    c->units[u].ranks = malloc((size_t)n * sizeof(int));
    if (c->units[u].ranks == NULL) {
      free(nodeOf);
      return -1;
    }
  }
  for (int r = 0; r < n; r++) {
    int u = c->unitsAreNodes ? nodeOf[r] : r;
    zhUnit_t* un = &c->units[u];
    if (un->nRanks == 0) {
      if (c->unitsAreNodes)
        snprintf(un->name, sizeof un->name, "%s", c->ranks[r].hello.hostId);
      else
        snprintf(un->name, sizeof un->name, "rank %d", r);
    }
    un->ranks[un->nRanks++] = r;
    c->ranks[r].unit = u;
  }
  free(nodeOf);
  return 0;
}

/* ---- the end: one exit code on every rank ------------------------------------------ */

/* A launcher that ends a job at its first non-zero exit (srun with
 * --kill-on-bad-exit=1 or slurm.conf's KillOnBadExit=1, mpirun) sends
 * SIGTERM to the ranks still running, and srun then exits 128+15 whatever
 * the others exited with: a signal outranks every exit code in srun's
 * status. Ranks never exit at the same instant, so a rank that holds the
 * verdict exits with it when told to terminate, and rank 0 ends only after
 * every rank it told holds it. (Before the verdict SIGTERM kills as ever.) */
static volatile sig_atomic_t zhVerdict = ZPP_HEALTH_EXIT_ERROR;

static void zhOnTermWithVerdict(int sig) {
  (void)sig;
  _exit(zhVerdict);
}

static void zhHoldVerdict(zhCtl_t* ctl, int code) {
  fflush(stdout); /* _exit in the handler flushes nothing */
  fflush(stderr);
  zhVerdict = code;
  atomic_store(&ctl->exitCode, code); /* the watchdog's too */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = zhOnTermWithVerdict;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
}

/* Rank 0: every rank sent QUIT acknowledges it (or is gone), within --timeout. */
static void zhAwaitQuitAcks(zhCtl_t* ctl, const unsigned char* told, double deadline) {
  for (int r = 1; r < ctl->nranks; r++) {
    while (told[r]) {
      uint32_t type = 0, len = 0;
      void* p = NULL;
      int got = zhCtlRecv(&ctl->conns[r], deadline, &type, &p, &len);
      if (got < 0) break; /* exited: nothing left to tell it */
      if (got == 0) return;
      free(p);
      if (type == ZH_MSG_QUIT_ACK) break;
    }
  }
}

static int zhCoordinatorMain(const zppHealthArgs_t* a, zhCtl_t* ctl, double t0) {
  int n = ctl->nranks;
  zhHello_t* hellos = calloc((size_t)n, sizeof(zhHello_t));
  if (hellos == NULL) return ZPP_HEALTH_EXIT_ERROR;
  zhHelloOf(&hellos[0], 0, n);
  char err[400];
  int missing = zhCtlAcceptAll(ctl, hellos, zppClockNow() + a->timeoutSec, err, sizeof err);
  if (missing < 0) {
    fprintf(stderr, "zpp-health: rank 0: %s\n", err);
    free(hellos);
    return ZPP_HEALTH_EXIT_ERROR;
  }
  zhCtlStartHeartbeat(ctl);
  zhCoord_t c;
  memset(&c, 0, sizeof c);
  c.a = a;
  c.ctl = ctl;
  c.nranks = n;
  c.t0 = t0;
  for (int r = 1; r < n; r++)
    if (hellos[r].pid == 0) snprintf(hellos[r].hostId, sizeof hellos[r].hostId, "?");
  if (zhBuildUnits(&c, hellos) != 0) {
    free(hellos);
    zhCoordFree(&c);
    return ZPP_HEALTH_EXIT_ERROR;
  }
  for (int r = 0; r < n; r++) {
    c.ranks[r].lastHeard = zppClockNow();
    if (r > 0 && hellos[r].pid == 0) {
      c.ranks[r].state = ZH_RANK_MISSING;
      snprintf(c.ranks[r].why, sizeof c.ranks[r].why,
               "did not connect to rank 0's control port within --timeout %.0f s", a->timeoutSec);
    }
  }
  free(hellos);
  int same = 1;
  for (int r = 1; r < n; r++)
    if (c.ranks[r].hello.pid && strcmp(c.ranks[r].hello.bootId, c.ranks[0].hello.bootId) != 0) same = 0;
  c.oneMachine = same && c.ranks[0].hello.bootId[0] != '\0';
  /* Emulated nodes share this machine's CPUs: tests run at the same time
   * would measure the CPUs, not the links. */
  c.parallel = a->parallel >= 0 ? a->parallel : !c.oneMachine;
  c.progressOn = a->progress == 1 || (a->progress < 0 && !a->quiet && isatty(STDERR_FILENO));
  if (getenv("ZPP_FAULT") && getenv("ZPP_FAULT")[0])
    zhNote(&c, "ZPP_FAULT=%s is set: faults are injected on purpose", getenv("ZPP_FAULT"));
  if (!c.unitsAreNodes) zhNote(&c, "all ranks on one node: ranks are tested against each other");

  int code = zhCoordRun(&c);
  zhProgressClear(&c);
  atomic_store(&ctl->mainDone, 1);
  if (code == ZPP_HEALTH_EXIT_USAGE && c.nTests == 0) {
    fprintf(stderr, "zpp-health: %s\n", c.reason);
  } else {
    zhPrintSummary(&c, stdout);
    if (a->jsonPath && zhWriteJson(&c, a->jsonPath, err, sizeof err) != 0) {
      fprintf(stderr, "zpp-health: %s\n", err);
      if (code == ZPP_HEALTH_EXIT_OK) code = ZPP_HEALTH_EXIT_USAGE;
    }
    if (a->promPath && zhWritePrometheus(&c, a->promPath, err, sizeof err) != 0) {
      fprintf(stderr, "zpp-health: %s\n", err);
      if (code == ZPP_HEALTH_EXIT_OK) code = ZPP_HEALTH_EXIT_USAGE;
    }
  }
  zhHoldVerdict(ctl, code);
  zhQuitMsg_t q;
  memset(&q, 0, sizeof q);
  q.code = code;
  snprintf(q.reason, sizeof q.reason, "%s", c.reason);
  unsigned char* told = calloc((size_t)n, 1);
  for (int r = 1; r < n; r++) {
    if (c.ranks[r].state != ZH_RANK_OK) continue;
    int sent = zhCtlSend(&ctl->conns[r], ZH_MSG_QUIT, &q, sizeof q) == 0;
    if (told) told[r] = (unsigned char)sent;
  }
  if (told) zhAwaitQuitAcks(ctl, told, zppClockNow() + a->timeoutSec);
  free(told);
  zhCoordFree(&c);
  return code;
}

/* ---- the other ranks -------------------------------------------------------------- */

/* Rank 0 is gone or stuck: nobody will write the report, so rank 1 says it. */
static int zhCoordinatorLost(const zppHealthArgs_t* a, int rank, int nranks, const char* problem,
                             const char* why, double t0) {
  if (a->verbose)
    fprintf(stderr, "zpp-health: rank %d: rank 0 (the coordinator) %s: %s\n", rank, problem, why);
  if (rank == 1) {
    printf("zpp-health: hung_or_dead: rank 0 (the coordinator) %s: %s\n", problem, why);
    fflush(stdout);
    if (a->jsonPath && zhWriteFallbackJson(a, nranks, problem, why, zppClockNow() - t0) != 0)
      fprintf(stderr, "zpp-health: cannot write %s\n", a->jsonPath);
    char err[400];
    if (a->promPath && zhWriteFallbackPrometheus(a->promPath, nranks, problem, err, sizeof err) != 0)
      fprintf(stderr, "zpp-health: %s\n", err);
  }
  return ZPP_HEALTH_EXIT_HUNG;
}

static int zhWorkerMain(const zppHealthArgs_t* a, zhCtl_t* ctl, const char* host, int port, double t0) {
  zhHello_t me;
  zhHelloOf(&me, ctl->rank, ctl->nranks);
  char err[400];
  if (zhCtlConnect(ctl, host, port, &me, zppClockNow() + a->timeoutSec, err, sizeof err) != 0) {
    fprintf(stderr, "zpp-health: rank %d: %s\n", ctl->rank, err);
    return ZPP_HEALTH_EXIT_ERROR;
  }
  zhCtlStartHeartbeat(ctl);
  zhConn_t* k = &ctl->conns[0];
  const double stuck = a->timeoutSec + 2.0 + 0.1 * a->timeoutSec;
  const double silence = a->timeoutSec > 10 ? a->timeoutSec : 10.0;
  double lastHeard = zppClockNow();
  char why[300];
  for (;;) {
    uint32_t type = 0, len = 0;
    void* p = NULL;
    int got = zhCtlRecv(k, zppClockNow() + ZH_HB_PERIOD, &type, &p, &len);
    double now = zppClockNow();
    if (got < 0)
      return zhCoordinatorLost(a, ctl->rank, ctl->nranks, "died",
                               "its control connection closed without a verdict (the process exited)",
                               t0);
    if (got == 0) {
      if (now - lastHeard > silence) {
        snprintf(why, sizeof why, "no heartbeat for %.0f s (process stopped, or its network is down)",
                 now - lastHeard);
        return zhCoordinatorLost(a, ctl->rank, ctl->nranks, "stopped answering", why, t0);
      }
      continue;
    }
    lastHeard = now;
    if (type == ZH_MSG_HB && len == sizeof(zhHbMsg_t)) {
      const zhHbMsg_t* hb = p;
      if (hb->testId >= 0 && hb->stalledSec > stuck) {
        snprintf(why, sizeof why, "no progress for %.1f s inside test %d", hb->stalledSec, hb->testId);
        free(p);
        return zhCoordinatorLost(a, ctl->rank, ctl->nranks, "hung", why, t0);
      }
    } else if (type == ZH_MSG_TEST && len == sizeof(zhTestMsg_t)) {
      zhTestMsg_t m;
      memcpy(&m, p, sizeof m);
      if (m.nGroup < 1 || m.nGroup > ctl->nranks || m.groupRank < 0 || m.groupRank >= m.nGroup ||
          m.trials > ZH_MAX_TRIALS) {
        fprintf(stderr, "zpp-health: rank %d: malformed test from rank 0\n", ctl->rank);
        free(p);
        return ZPP_HEALTH_EXIT_ERROR;
      }
      size_t size = sizeof(zhResultMsg_t) + (size_t)m.nGroup * sizeof(uint32_t);
      char* out = calloc(1, size);
      if (out == NULL) {
        free(p);
        return ZPP_HEALTH_EXIT_ERROR;
      }
      zhResultMsg_t* res = (zhResultMsg_t*)out;
      res->rank = ctl->rank;
      zhRunTest(&m, &ctl->progress, res, (uint32_t*)(out + sizeof(zhResultMsg_t)));
      zhCtlSend(k, ZH_MSG_RESULT, out, (uint32_t)size);
      zhProgressEnd(&ctl->progress);
      free(out);
      /* The test took its time; rank 0's heartbeats waited in the socket. */
      lastHeard = zppClockNow();
    } else if (type == ZH_MSG_QUIT && len == sizeof(zhQuitMsg_t)) {
      int code = ((const zhQuitMsg_t*)p)->code;
      free(p);
      if (code < 0 || code > ZPP_HEALTH_EXIT_ERROR) code = ZPP_HEALTH_EXIT_ERROR;
      zhHoldVerdict(ctl, code);
      int32_t me32 = ctl->rank;
      zhCtlSend(k, ZH_MSG_QUIT_ACK, &me32, sizeof me32);
      /* Rank 0 closes the connection once every rank holds the code (or after
       * its --timeout); till then a SIGTERM here exits with the code too. */
      const double until = zppClockNow() + a->timeoutSec + 5.0;
      while (zppClockNow() < until) {
        got = zhCtlRecv(k, until, &type, &p, &len);
        if (got < 0) break;
        if (got > 0) free(p);
      }
      return code;
    }
    free(p);
  }
}

static int zhRankMain(const zppHealthArgs_t* a, int rank, int nranks, const char* host, int port) {
  double t0 = zppClockNow();
  zhCtl_t ctl;
  memset(&ctl, 0, sizeof ctl);
  ctl.rank = rank;
  ctl.nranks = nranks;
  ctl.listenFd = -1;
  pthread_mutex_init(&ctl.progress.mu, NULL);
  ctl.progress.testId = -1;
  /* Past this, whatever happens, the process ends: nothing hangs. */
  ctl.hardDeadline = t0 + a->timeLimitSec + 2 * a->timeoutSec + 15;
  atomic_store(&ctl.exitCode, ZPP_HEALTH_EXIT_HUNG);
  int code;
  if (rank == 0) {
    char err[300];
    if (zhCtlListen(&ctl, port, err, sizeof err) != 0) {
      fprintf(stderr, "zpp-health: rank 0: %s\n", err);
      return ZPP_HEALTH_EXIT_ERROR;
    }
    code = zhCoordinatorMain(a, &ctl, t0);
  } else {
    code = zhWorkerMain(a, &ctl, host, port, t0);
  }
  zhCtlClose(&ctl);
  return code;
}

/* ---- launch ------------------------------------------------------------------------ */

static int zhForkChild(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)id;
  const zppHealthArgs_t* a = arg;
  return zhRankMain(a, rank, nranks, a->ctlHost, a->ctlPort);
}

static int zhForkRun(zppHealthArgs_t* a) {
  if (a->ctlPort == 0) a->ctlPort = zppLaunchFreePort();
  if (a->ctlPort == 0) {
    fprintf(stderr, "zpp-health: no free port for the control connections (--ctl-port)\n");
    return ZPP_HEALTH_EXIT_ERROR;
  }
  snprintf(a->ctlHost, sizeof a->ctlHost, "127.0.0.1");
  char layout[32];
  int status[ZPP_LAUNCH_MAX_RANKS];
  if (a->forkRanks > ZPP_LAUNCH_MAX_RANKS) {
    fprintf(stderr, "zpp-health: -N %d: at most %d ranks on one machine\n", a->forkRanks,
            ZPP_LAUNCH_MAX_RANKS);
    return ZPP_HEALTH_EXIT_USAGE;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = a->forkRanks;
  if (a->layoutNodes > 0) {
    snprintf(layout, sizeof layout, "%dx%d", a->layoutNodes, a->layoutPerNode);
    o.layout = layout;
  }
  /* Each rank bounds itself (the watchdog); this is the last resort. */
  o.timeoutSec = a->timeLimitSec + 2 * a->timeoutSec + 60;
  o.idMode = ZPP_LAUNCH_ID_NONE; /* rank 0 makes an id per test */
  o.torchrunEnv = 1;             /* RANK: what ZPP_FAULT's rank= matches */
  o.statusOut = status;
  o.quiet = 1;
  for (int r = 0; r < a->forkRanks; r++) status[r] = ZPP_HEALTH_EXIT_ERROR;
  int rc = zppLaunch(&o, zhForkChild, a);
  if (rc == 2) return ZPP_HEALTH_EXIT_ERROR;
  if (a->verbose)
    for (int r = 0; r < a->forkRanks; r++)
      if (status[r] != status[0]) fprintf(stderr, "zpp-health: rank %d exited with %d\n", r, status[r]);
  /* Rank 0 knows the verdict; when it died, rank 1 said so. */
  if (status[0] >= 0 && status[0] <= ZPP_HEALTH_EXIT_ERROR) return status[0];
  if (status[0] > 128)
    fprintf(stderr, "zpp-health: rank 0 (the coordinator) was killed by signal %d\n", status[0] - 128);
  return ZPP_HEALTH_EXIT_HUNG;
}

static int zhEnvRun(zppHealthArgs_t* a) {
  char err[600];
  zppLauncherEnv_t l;
  int found = zppLauncherEnvRead(&l, err, sizeof err);
  if (found == 0) {
    fprintf(stderr, "zpp-health: no launcher environment: %s; or fork local ranks with -N RANKS\n",
            err);
    return ZPP_HEALTH_EXIT_USAGE;
  }
  if (found < 0) {
    fprintf(stderr, "zpp-health: %s\n", err);
    return ZPP_HEALTH_EXIT_USAGE;
  }
  int rank = l.rank, nranks = l.nranks;
  if (nranks < 2 || nranks > ZH_MAX_RANKS) {
    fprintf(stderr, "zpp-health: rank %d of %d (%s): needs 2..%d ranks\n", rank, nranks, l.sizeVar,
            ZH_MAX_RANKS);
    return ZPP_HEALTH_EXIT_USAGE;
  }
  if (a->layoutNodes > 0) {
    /* One machine playing several nodes, as -N --layout does. */
    if (a->layoutNodes * a->layoutPerNode != nranks) {
      fprintf(stderr, "zpp-health: --layout %dx%d does not make the %d ranks of the launcher\n",
              a->layoutNodes, a->layoutPerNode, nranks);
      return ZPP_HEALTH_EXIT_USAGE;
    }
    char host[32];
    snprintf(host, sizeof host, "node%d", rank / a->layoutPerNode);
    setenv("ZPP_HOSTID", host, 1);
  }
  /* Rank 0's control port: the rendezvous port zppCommInitFromEnv would
   * open. zpp-health never calls it, so the port is ours. */
  zppLauncherRoot_t root;
  if (zppLauncherRootRead(&l, a->ctlPort == 0, &root, err, sizeof err) != 0) {
    fprintf(stderr, "zpp-health: %s\n", err);
    return ZPP_HEALTH_EXIT_USAGE;
  }
  snprintf(a->ctlHost, sizeof a->ctlHost, "%s", root.host);
  int port = root.port;
  if (a->ctlPort) port = a->ctlPort;
  if (port < 1 || port > 65535) {
    fprintf(stderr, "zpp-health: control port %d out of range (--ctl-port)\n", port);
    return ZPP_HEALTH_EXIT_USAGE;
  }
  return zhRankMain(a, rank, nranks, a->ctlHost, port);
}

int main(int argc, char** argv) {
  zppHealthArgs_t a;
  int exitNow = -1;
  int rc = zppHealthParseArgs(argc, argv, &a, &exitNow);
  if (rc != 0) return rc;
  if (exitNow >= 0) return exitNow;
  char err[400];
  const char* fault = getenv("ZPP_FAULT");
  zppFaultSet_t faults;
  if (fault && zppFaultParse(fault, &faults, err, sizeof err) != 0) {
    fprintf(stderr, "zpp-health: ZPP_FAULT='%s': %s\n", fault, err);
    return ZPP_HEALTH_EXIT_USAGE;
  }
  if (a.timeoutSec == 0) {
    const char* t = getenv("ZPP_TIMEOUT");
    int sec = 30;
    if (t && (sscanf(t, "%d", &sec) != 1 || sec < 1)) {
      fprintf(stderr, "zpp-health: ZPP_TIMEOUT='%s' is not a number of seconds\n", t);
      return ZPP_HEALTH_EXIT_USAGE;
    }
    a.timeoutSec = sec;
  }
  /* Every wait of every communicator, and the rendezvous roots rank 0
   * makes, by the same bound. */
  char tbuf[32];
  snprintf(tbuf, sizeof tbuf, "%d", (int)a.timeoutSec);
  setenv("ZPP_TIMEOUT", tbuf, 1);
  /* The library logs every timeout of every rank; the report says it once. */
  if (!a.verbose && getenv("ZPP_DEBUG") == NULL) setenv("ZPP_DEBUG", "NONE", 1);
  if (a.baselinePath) {
    zppHealthBaseline_t b;
    if (zppHealthLoadBaseline(a.baselinePath, &b, err, sizeof err) != 0 && (a.forkRanks > 0)) {
      /* Refused before any rank starts; under a launcher rank 0 says it. */
      fprintf(stderr, "zpp-health: %s\n", err);
      return ZPP_HEALTH_EXIT_USAGE;
    }
  }
  return a.forkRanks > 0 ? zhForkRun(&a) : zhEnvRun(&a);
}
