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

#include <sched.h>

#include "log.h"

void zppBusyPollInit(zppBusyPoll_t* b, double maxSec) {
  b->maxSec = maxSec > 0.0 ? maxSec : 0.0;
  b->sec = b->maxSec;
  b->probe = 0;
  b->fellToZero = 0;
  b->leaveAttempts = 0;
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
  if (yielded) {
    b->sec = window / 2 < ZPP_BUSY_MIN_SEC ? 0.0 : window / 2;
    if (b->sec == 0.0) b->fellToZero = 1;
  } else
    b->sec = window * 2 > b->maxSec ? b->maxSec : window * 2;
}

void zppBusyPollLeaveCore(zppBusyPoll_t* b, int rank) {
  /* Both ranks of a pair find out at about the same time: were both to
   * move, they could land together again. */
  if ((b->leaveAttempts++ + rank) % 2 != 0) return;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return;
  int cur = sched_getcpu();
  int others = CPU_COUNT(&mask) - (cur >= 0 && CPU_ISSET(cur, &mask) ? 1 : 0);
  if (others <= 0) return;
  /* Another CPU each time, spread by rank: which ones idle is unknown here. */
  int pick = (rank + b->leaveAttempts / 2) % others, target = -1;
  for (int c = 0; c < CPU_SETSIZE && target < 0; c++)
    if (CPU_ISSET(c, &mask) && c != cur && pick-- == 0) target = c;
  if (target < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(target, &one);
  /* Moving there happens at once; the mask given back lets the scheduler
   * place the thread anywhere again, but it has no reason to move it. */
  if (sched_setaffinity(0, sizeof(one), &one) != 0) return;
  if (sched_setaffinity(0, sizeof(mask), &mask) != 0)
    ZPP_WARN(NET, "rank %d: could not give back the CPU affinity after moving to cpu %d", rank, target);
  ZPP_INFO(NET,
           "rank %d: polling kept failing on cpu %d (a rank it waits for runs there?): moved to cpu %d",
           rank, cur, target);
}
