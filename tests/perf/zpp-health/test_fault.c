/*
 * The fault hook (lib/fault.c): its grammar, and what each fault does to a
 * message. The hook reads ZPP_FAULT once per process, so the behaviour
 * checks fork a child per configuration.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/fault.h"
#include "testutil.h"
#include "clock.h"

static void testGrammar(void) {
  zppFaultSet_t s;
  char err[200];
  CHECK(zppFaultParse("", &s, err, sizeof err) == 0 && s.n == 0);
  CHECK(zppFaultParse("slow", &s, err, sizeof err) == 0 && s.n == 1);
  CHECK(s.spec[0].kind == ZPP_FAULT_SLOW && s.spec[0].rank == -1 && s.spec[0].rateBps == 100e6);
  CHECK(zppFaultParse("slow:rank=2,rate=200mbit;corrupt:rank=1,after=3;hang:rank=3", &s, err,
                      sizeof err) == 0);
  CHECK(s.n == 3 && s.spec[0].rank == 2 && s.spec[0].rateBps == 200e6);
  CHECK(s.spec[1].kind == ZPP_FAULT_CORRUPT && s.spec[1].rank == 1 && s.spec[1].after == 3);
  CHECK(s.spec[2].kind == ZPP_FAULT_HANG && s.spec[2].rank == 3);
  CHECK(zppFaultParse("slow:delay_us=250", &s, err, sizeof err) == 0 && s.spec[0].delayUs == 250 &&
        s.spec[0].rateBps == 0);
  CHECK(zppFaultParse("slow:rate=1.5gbit,prob=0.25,seed=9", &s, err, sizeof err) == 0 &&
        s.spec[0].rateBps == 1.5e9 && s.spec[0].prob == 0.25 && s.spec[0].seed == 9);
  CHECK(zppFaultParse("die:rank=0", &s, err, sizeof err) == 0 && s.spec[0].kind == ZPP_FAULT_DIE);
  static const struct {
    const char* text;
    const char* says;
  } bad[] = {{"crash", "unknown fault 'crash'"},
             {"slow:rate=200mbps", "rate=200mbps"},
             {"slow:rate", "needs a value"},
             {"slow:rank=-1", "rank=-1"},
             {"corrupt:rate=1g", "unknown option 'rate'"},
             {"hang:prob=0", "prob=0"},
             {"hang:prob=1.5", "prob=1.5"},
             {"hang:after=0", "after=0"},
             {"slow:speed=3", "unknown option 'speed'"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    CHECK(zppFaultParse(bad[i].text, &s, err, sizeof err) == -1);
    if (strstr(err, bad[i].says) == NULL) {
      fprintf(stderr, "ZPP_FAULT='%s': error '%s' lacks '%s'\n", bad[i].text, err, bad[i].says);
      CHECK(0);
    }
  }
}

/* Runs fn in a child with ZPP_FAULT (and RANK) set; returns its exit code,
 * 128 + signal when killed, -1 when still running after `limit` s. */
static int inChild(const char* fault, const char* rank, int (*fn)(void), double limit) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ZPP_FAULT", fault, 1);
    if (rank)
      setenv("RANK", rank, 1);
    else
      unsetenv("RANK");
    setenv("ZPP_DEBUG", "NONE", 1);
    _exit(fn());
  }
  double end = zppClockNow() + limit;
  int st = 0;
  while (zppClockNow() < end) {
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

static int corruptsOneBit(void) {
  unsigned char buf[100];
  memset(buf, 0, sizeof buf);
  zppFaultOnSend(0, buf, sizeof buf, 1);
  int flipped = 0;
  for (int i = 0; i < 100; i++) flipped += __builtin_popcount(buf[i]);
  return flipped == 1 && buf[50] == 0x10 ? 0 : 1;
}

static int untouched(void) {
  unsigned char buf[100];
  memset(buf, 0, sizeof buf);
  double t0 = zppClockNow();
  for (int i = 0; i < 10; i++) zppFaultOnSend(0, buf, sizeof buf, 1);
  for (int i = 0; i < 100; i++)
    if (buf[i]) return 1;
  return zppClockNow() - t0 < 0.05 ? 0 : 2;
}

/* 1 MB at 80 Mbit/s is 0.1 s: ten messages of 100 kB take about that. */
static int slowsToRate(void) {
  static unsigned char buf[100000];
  double t0 = zppClockNow();
  for (int i = 0; i < 10; i++) zppFaultOnSend(0, buf, sizeof buf, (uint32_t)i);
  double dt = zppClockNow() - t0;
  return dt > 0.095 && dt < 0.5 ? 0 : 1;
}

static int afterThird(void) {
  unsigned char buf[10] = {0};
  zppFaultOnSend(0, buf, sizeof buf, 1);
  zppFaultOnSend(0, buf, sizeof buf, 1);
  if (buf[5]) return 1;
  zppFaultOnSend(0, buf, sizeof buf, 1);
  return buf[5] == 0x10 ? 0 : 2;
}

static int hangs(void) {
  unsigned char buf[10] = {0};
  zppFaultOnSend(0, buf, sizeof buf, 1);
  return 0; /* not reached */
}

int main(void) {
  testGrammar();
  /* The launcher rank (RANK) picks the process, whatever its rank in the
   * communicator sending. */
  CHECK(inChild("corrupt:rank=1", "1", corruptsOneBit, 10) == 0);
  CHECK(inChild("corrupt:rank=1", "2", untouched, 10) == 0);
  CHECK(inChild("corrupt:rank=1", NULL, untouched, 10) == 0); /* no RANK: comm rank 0 */
  CHECK(inChild("corrupt", NULL, corruptsOneBit, 10) == 0);   /* no rank=: every rank */
  CHECK(inChild("slow:rate=80mbit", NULL, slowsToRate, 10) == 0);
  CHECK(inChild("slow:rank=3,rate=80mbit;slow:rate=1mbit", "3", slowsToRate, 10) ==
        0); /* first match */
  CHECK(inChild("corrupt:after=3", NULL, afterThird, 10) == 0);
  CHECK(inChild("corrupt:rate", NULL, untouched, 10) == 0); /* garbled: logged, nothing injected */
  CHECK(inChild("", NULL, untouched, 10) == 0);
  CHECK(inChild("hang:rank=0", "0", hangs, 1.0) == -1);
  CHECK(inChild("die:rank=0", "0", hangs, 10) == 128 + 9);
  return zppTestExit("test_fault");
}
