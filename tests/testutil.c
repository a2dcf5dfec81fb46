#include "testutil.h"

#include <math.h>
#include <time.h>
#include <pthread.h>

int zppTestFailures = 0;
long zppTestChecks = 0;

static void resetInChild(void) {
  zppTestFailures = 0;
  zppTestChecks = 0;
}

__attribute__((constructor)) static void registerForkReset(void) {
  pthread_atfork(NULL, NULL, resetInChild);
}

int zppTestRankResult(void) { return zppTestFailures ? 1 : 0; }

int zppTestExit(const char* name) {
  if (zppTestFailures) {
    fprintf(stderr, "%s: %d of %ld checks FAILED\n", name, zppTestFailures, zppTestChecks);
    return 1;
  }
  if (zppTestChecks == 0) {
    fprintf(stderr, "%s: no checks ran: a test that checks nothing cannot pass\n", name);
    return 1;
  }
  printf("%s: %ld checks passed\n", name, zppTestChecks);
  return 0;
}

void zppTestRngSeed(zppTestRng_t* rng, uint64_t seed) { rng->state = seed; }

uint64_t zppTestRngNext(zppTestRng_t* rng) {
  uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double zppTestRngUniform(zppTestRng_t* rng, double lo, double hi) {
  return lo + (hi - lo) * ((double)(zppTestRngNext(rng) >> 11) * 0x1.0p-53);
}

double zppTestRngNormal(zppTestRng_t* rng) {
  double u1 = zppTestRngUniform(rng, 1e-300, 1.0), u2 = zppTestRngUniform(rng, 0.0, 1.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void zppTestSleep(double sec) {
  struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
  nanosleep(&ts, NULL);
}
