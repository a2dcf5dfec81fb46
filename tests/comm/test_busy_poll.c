/*
 * The host transport's adaptive busy-poll window (lib/transport/busy_poll.h).
 *
 *   test_busy_poll logic        the window's rules, exactly
 *   test_busy_poll shared_core  2 ranks pinned to one core with a 20 us
 *                               window forced: small all-reduces must not
 *                               pay the window on every wait (label timing)
 *   test_busy_poll leave_core   2 ranks held on core 0 for a while, then
 *                               free to run anywhere: after some small
 *                               all-reduces they run on different cores
 *                               (zppBusyPollLeaveCore; label timing)
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_testlib.h"
#include "lib/transport/busy_poll.h"
#include "testutil.h"
#include "perf/common/launch.h"

static int near(double a, double b) { return a - b < 1e-12 && b - a < 1e-12; }

static int logic(void) {
  zppBusyPoll_t b;
  zppBusyPollInit(&b, 20e-6);
  CHECK(near(b.sec, 20e-6));
  /* Found while polling: stays at the maximum. */
  zppBusyPollUpdate(&b, b.sec, 0);
  CHECK(near(b.sec, 20e-6));
  /* Had to yield: halves, down to the floor, then 0. */
  double expect = 20e-6;
  int steps = 0;
  while (b.sec > 0.0 && steps < 100) {
    zppBusyPollUpdate(&b, b.sec, 1);
    expect = expect / 2 < ZPP_BUSY_MIN_SEC ? 0.0 : expect / 2;
    CHECK_MSG(near(b.sec, expect), "step %d: window %g, expected %g", steps, b.sec, expect);
    steps++;
  }
  CHECK_MSG(steps == 6, "20 us fell to 0 in %d halvings, expected 6", steps);
  /* At 0: a probe every ZPP_BUSY_PROBE_WAITS waits, none before. */
  for (int i = 1; i < ZPP_BUSY_PROBE_WAITS; i++) {
    zppBusyPollUpdate(&b, 0.0, 1);
    CHECK_MSG(b.sec == 0.0, "wait %d at 0: window %g", i, b.sec);
  }
  zppBusyPollUpdate(&b, 0.0, 1);
  CHECK(near(b.sec, ZPP_BUSY_PROBE_SEC));
  /* A probe that finds the message doubles back up to the maximum. */
  zppBusyPollUpdate(&b, b.sec, 0);
  CHECK(near(b.sec, 2 * ZPP_BUSY_PROBE_SEC));
  for (int i = 0; i < 10; i++) zppBusyPollUpdate(&b, b.sec, 0);
  CHECK(near(b.sec, 20e-6));
  /* A failed probe goes back to 0 at once when half of it is below the floor. */
  zppBusyPoll_t small;
  zppBusyPollInit(&small, 0.8e-6);
  zppBusyPollUpdate(&small, small.sec, 1);
  CHECK(small.sec == 0.0);
  CHECK_MSG(small.fellToZero == 1, "falling to 0 must ask to leave the core");
  /* Only the fall from a window to 0 asks, not the waits at 0. */
  small.fellToZero = 0;
  zppBusyPollUpdate(&small, 0.0, 1);
  CHECK(small.fellToZero == 0);
  /* Maximum 0 (ranks outnumber cores, or ZPP_UCX_BUSY_POLL_US=0): never polls. */
  zppBusyPoll_t off;
  zppBusyPollInit(&off, 0.0);
  for (int i = 0; i < 3 * ZPP_BUSY_PROBE_WAITS; i++) {
    zppBusyPollUpdate(&off, 0.0, i & 1);
    CHECK(off.sec == 0.0);
  }
  zppBusyPollInit(&off, -5.0);
  CHECK(off.sec == 0.0 && off.maxSec == 0.0);
  printf("logic: %s\n", zppTestFailures ? "FAILED" : "passed");
  return zppTestFailures ? 1 : 0;
}

/* Mean time of small all-reduces on a communicator made with the given
 * window maximum. */
static double timeAllReduces(int rank, int nranks, const zppUniqueId* id, int iters) {
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  float v[2] = {1.0f, 2.0f};
  for (int i = 0; i < 200; i++)
    REQUIRE(zppAllReduce(v, v, 2, zppFloat32, zppMax, comm, NULL) == zppSuccess);
  double t0 = zppClockNow();
  for (int i = 0; i < iters; i++)
    REQUIRE(zppAllReduce(v, v, 2, zppFloat32, zppMax, comm, NULL) == zppSuccess);
  double t = (zppClockNow() - t0) / iters;
  CHECK(v[0] == 1.0f && v[1] == 2.0f);
  REQUIRE(zppCommDestroy(comm) == zppSuccess);
  return t;
}

static int sharedCoreBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  const char* out = arg;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  double t = timeAllReduces(rank, nranks, id, 3000);
  if (rank == 0) {
    FILE* f = fopen(out, "w");
    REQUIRE(f != NULL);
    fprintf(f, "%.9f\n", t);
    fclose(f);
  }
  return zppTestFailures ? 1 : 0;
}

/* Both ranks on core 0, the window maximum forced (the automatic one would
 * see 2 ranks on 1 core and never poll). */
static double sharedCoreRun(const char* windowEnv, const char* out) {
  const char* env[] = {windowEnv, NULL};
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.timeoutSec = 60;
  o.env = env;
  if (zppLaunch(&o, sharedCoreBody, (void*)out) != 0) return -1.0;
  FILE* f = fopen(out, "r");
  double t = -1.0;
  if (f == NULL || fscanf(f, "%lf", &t) != 1) t = -1.0;
  if (f) fclose(f);
  return t;
}

static int sharedCore(void) {
  char out[] = "/tmp/zpp-busy-poll-XXXXXX";
  int fd = mkstemp(out);
  REQUIRE(fd >= 0);
  close(fd);
  double off = sharedCoreRun("ZPP_UCX_BUSY_POLL_US=0", out);
  double on = sharedCoreRun("ZPP_UCX_BUSY_POLL_US=20", out);
  unlink(out);
  REQUIRE(off > 0 && on > 0);
  /* A fixed 20 us window costs about twice the window per all-reduce here
   * (each rank polls it out before the other may run): 10x or more. */
  printf(
      "shared_core: 8-byte all-reduce, 2 ranks on one core: %.2f us with a 20 us window, %.2f us "
      "without; ratio %.2f (must stay below 2)\n",
      on * 1e6, off * 1e6, on / off);
  CHECK_MSG(on < 2.0 * off, "the busy-poll window did not adapt: %.2f us against %.2f us", on * 1e6,
            off * 1e6);
  return zppTestFailures ? 1 : 0;
}

static int leaveCoreBody(int rank, int nranks, const zppUniqueId* id, void* arg) {
  (void)arg;
  cpu_set_t all, one;
  REQUIRE(sched_getaffinity(0, sizeof(all), &all) == 0);
  zppComm_t comm;
  REQUIRE(zppCommInitRank(&comm, nranks, *id, rank) == zppSuccess);
  /* Both onto core 0, busy there for a while, then free again: each yields
   * to the other every few microseconds, both stay cache-hot, and the
   * scheduler keeps them together (checked: without zppBusyPollLeaveCore
   * they stay on one core). */
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  float v[2] = {1.0f, 2.0f};
  for (int i = 0; i < 2000; i++)
    REQUIRE(zppAllReduce(v, v, 2, zppFloat32, zppMax, comm, NULL) == zppSuccess);
  REQUIRE(sched_setaffinity(0, sizeof(all), &all) == 0);
  double t0 = zppClockNow();
  for (int i = 0; i < 5000; i++)
    REQUIRE(zppAllReduce(v, v, 2, zppFloat32, zppMax, comm, NULL) == zppSuccess);
  double t = (zppClockNow() - t0) / 5000;
  int cpus[2] = {-1, -1};
  int mine = sched_getcpu();
  REQUIRE(zppAllGather(&mine, cpus, 1, zppInt32, comm, NULL) == zppSuccess);
  if (rank == 0)
    printf(
        "leave_core: after 5000 8-byte all-reduces (%.2f us each) rank 0 runs on cpu %d, rank 1 on "
        "cpu %d\n",
        t * 1e6, cpus[0], cpus[1]);
  CHECK_MSG(cpus[0] != cpus[1], "both ranks still share cpu %d", cpus[0]);
  REQUIRE(zppCommDestroy(comm) == zppSuccess);
  return zppTestFailures ? 1 : 0;
}

static int leaveCore(void) {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof(all), &all) == 0);
  if (CPU_COUNT(&all) < 2 || !CPU_ISSET(0, &all)) {
    printf("leave_core: needs cpu 0 and another cpu (skipped)\n");
    return 77;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 2;
  o.timeoutSec = 60;
  return zppLaunch(&o, leaveCoreBody, NULL);
}

int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "logic";
  if (strcmp(which, "logic") == 0) return logic();
  if (strcmp(which, "shared_core") == 0) return sharedCore();
  if (strcmp(which, "leave_core") == 0) return leaveCore();
  fprintf(stderr, "usage: %s logic|shared_core|leave_core\n", argv[0]);
  return 2;
}
