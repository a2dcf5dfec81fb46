/*
 * A minimal test harness: every test is its own executable (ctest runs each
 * in its own process with a timeout). A failed check prints file:line and
 * the values, counts as a failure, and the test goes on so that one run shows
 * every failure; zppTestExit() returns 1 if any check failed.
 * Exit code 77 means "skipped" (ctest SKIP_RETURN_CODE).
 */
#ifndef ZPP_TESTUTIL_H_
#define ZPP_TESTUTIL_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

#ifdef __cplusplus
extern "C" { /* the CUDA tests (.cu) are C++ */
#endif

#define ZPP_TEST_SKIP 77

/* Sleeps for sec seconds (fractions too). */
void zppTestSleep(double sec);

extern int zppTestFailures;
extern long zppTestChecks;

#define CHECK(cond)                                                            \
  do {                                                                         \
    zppTestChecks++;                                                           \
    if (!(cond)) {                                                             \
      zppTestFailures++;                                                       \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    zppTestChecks++;                                                           \
    if (!(cond)) {                                                             \
      zppTestFailures++;                                                       \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
  } while (0)

#define CHECK_EQ_INT(a, b)                                       \
  do {                                                           \
    long long a_ = (long long)(a), b_ = (long long)(b);          \
    CHECK_MSG(a_ == b_, "%s = %lld, %s = %lld", #a, a_, #b, b_); \
  } while (0)

/* Stops at the first failure of a precondition the rest depends on. */
#define REQUIRE(cond)                                                            \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* Runs case fn when no case was named on the command line (only == NULL)
 * or this one was, and prints its wall time. */
#define ZPP_TEST_RUN(only, name, fn)                        \
  do {                                                      \
    if (!(only) || strcmp((only), (name)) == 0) {           \
      double t0_ = zppClockNow();                           \
      fn();                                                 \
      printf("[%s] %.2f s\n", (name), zppClockNow() - t0_); \
    }                                                       \
  } while (0)

/* Prints a summary; returns the process exit code. */
int zppTestExit(const char* name);

/* For a rank forked by perf/common/launch.h: 0 if no check failed in this
 * process, else 1. A forked child starts with its counts at zero (reset at
 * fork), so a failure in the parent before the launch is not counted again. */
int zppTestRankResult(void);

/* Deterministic pseudo-random numbers (splitmix64), so failures reproduce. */
typedef struct {
  uint64_t state;
} zppTestRng_t;
void zppTestRngSeed(zppTestRng_t* rng, uint64_t seed);
uint64_t zppTestRngNext(zppTestRng_t* rng);
/* Uniform in [lo, hi). */
double zppTestRngUniform(zppTestRng_t* rng, double lo, double hi);
/* Standard normal. */
double zppTestRngNormal(zppTestRng_t* rng);

#ifdef __cplusplus
}
#endif

#endif /* ZPP_TESTUTIL_H_ */
