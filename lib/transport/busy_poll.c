/* The adaptive busy-poll window; see busy_poll.h.
 *
 * A wait that outlasts its window either waited for a slow peer, where the
 * polling was wasted, or for a peer that shares this core and could not run
 * until this rank let go, where the polling delayed the very message it
 * waited for (measured: two ranks pulled onto one core took 46 us per 8-byte
 * all-gather with a fixed 20 us window). Either way a shorter window loses
 * nothing, so failures halve it; successes double it back. Like an adaptive
 * mutex's spin count, only cheaper to be wrong about. */
#include "busy_poll.h"

void zppBusyPollInit(zppBusyPoll_t* b, double maxSec) {
  b->maxSec = maxSec > 0.0 ? maxSec : 0.0;
  b->sec = b->maxSec;
  b->probe = 0;
}

void zppBusyPollUpdate(zppBusyPoll_t* b, double window, int yielded) {
  if (b->maxSec <= 0.0) return;
  if (window <= 0.0) {
    /* Fallen to 0: try a short window now and then, in case the ranks got
     * cores of their own again. */
    if (++b->probe >= ZPP_BUSY_PROBE_WAITS) {
      b->probe = 0;
      b->sec = ZPP_BUSY_PROBE_SEC < b->maxSec ? ZPP_BUSY_PROBE_SEC : b->maxSec;
    }
    return;
  }
  b->probe = 0;
  if (yielded)
    b->sec = window / 2 < ZPP_BUSY_MIN_SEC ? 0.0 : window / 2;
  else
    b->sec = window * 2 > b->maxSec ? b->maxSec : window * 2;
}
