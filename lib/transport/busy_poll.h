/*
 * How long an idle wait of the host transport polls without yielding its
 * core, adapted wait by wait (the policy is documented in
 * docs/transports.md, "Waits"). Pure logic, no clocks: the transport feeds it
 * each wait's outcome.
 */
#ifndef ZPP_TRANSPORT_BUSY_POLL_H_
#define ZPP_TRANSPORT_BUSY_POLL_H_

/* Below this a window is not worth keeping: it drops to 0, and every
 * ZPP_BUSY_PROBE_WAITS waits one wait tries ZPP_BUSY_PROBE_SEC again. */
#define ZPP_BUSY_MIN_SEC 0.5e-6
#define ZPP_BUSY_PROBE_SEC 2e-6
#define ZPP_BUSY_PROBE_WAITS 64

typedef struct {
  double maxSec; /* the most a window may be; 0: never poll without yielding */
  double sec;    /* the window the next wait uses */
  int probe;     /* waits since the window fell to 0 */
} zppBusyPoll_t;

/* Starts at the maximum. */
void zppBusyPollInit(zppBusyPoll_t* b, double maxSec);

/* After a wait that idled, with window the window it started with: did
 * polling find the message (yielded 0: the window doubles back up to the
 * maximum), or did it come only once the rank gave its core away (yielded
 * 1: the window halves)? */
void zppBusyPollUpdate(zppBusyPoll_t* b, double window, int yielded);

#endif
