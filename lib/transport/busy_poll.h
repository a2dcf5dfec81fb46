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
  /* The window just fell to 0: polling kept failing, so the rank waited
   * for most likely shares this core (zppBusyPollLeaveCore). */
  int fellToZero;
  int leaveAttempts;
} zppBusyPoll_t;

/* Starts at the maximum. */
void zppBusyPollInit(zppBusyPoll_t* b, double maxSec);

/* After a wait that idled, with window the window it started with: did
 * polling find the message (yielded 0: the window doubles back up to the
 * maximum), or did it come only once the rank gave its core away (yielded
 * 1: the window halves)? */
void zppBusyPollUpdate(zppBusyPoll_t* b, double window, int yielded);

/* Called by the transport when fellToZero is set (it clears it): on every
 * other attempt, alternating between two ranks by the parity of rank, moves
 * the calling thread to another CPU of its affinity mask and gives the mask
 * back. Why: two ranks that share a core while another idles stay so for
 * the whole run; each yields or wakes the other every few microseconds, so
 * both look cache-hot and the scheduler never moves either, neither on a
 * periodic balance nor on a wake-up (measured on the 2-core VM: half of all
 * 2-rank runs at 2.2 us per 8-byte all-gather instead of 0.7 for the
 * whole run). A thread whose mask allows one CPU is left alone. */
void zppBusyPollLeaveCore(zppBusyPoll_t* b, int rank);

#endif
