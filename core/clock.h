/*
 * The one clock: seconds since an arbitrary start on CLOCK_MONOTONIC, as a
 * double (nanosecond steps for months of uptime). Deadlines, timeouts and
 * measured intervals all read it, so that they compare with each other.
 * Header only: the tests and tools include it as well as the library.
 */
#ifndef ZPP_CLOCK_H_
#define ZPP_CLOCK_H_

#include <time.h>

static inline double zppClockNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds since the Unix epoch (CLOCK_REALTIME): a timestamp for reports
 * that other programs line up with theirs (zpp-perf's timed windows against
 * zpp-cpu-probe's samples); never for intervals, which the clock above
 * measures (this one steps when the time is set). */
static inline double zppClockEpoch(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif /* ZPP_CLOCK_H_ */
