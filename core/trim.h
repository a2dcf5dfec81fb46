/*
 * When a buffer kept from call to call goes back: once ZPP_TRIM_CALLS calls
 * in a row needed under a quarter of it. A one-off large call then does not
 * pin its memory for the rest of the job, while a loop of large calls, or
 * sizes that alternate, keep theirs and never reallocate. The host scratch
 * pool (collectives/coll_common.c) and the device scratch
 * (lib/transport/nccl.c) both follow it.
 * Header only: both layers above include it.
 */
#ifndef ZPP_TRIM_H_
#define ZPP_TRIM_H_

#include <stddef.h>

#define ZPP_TRIM_CALLS 64

typedef struct {
  int smallCalls;  /* calls in a row that needed under a quarter */
  size_t smallMax; /* the largest of them */
} zppTrimRule_t;

/* Records a call that needed `used` bytes of a buffer of `held`. Returns 1
 * when the buffer should now shrink, to *keep bytes (the largest need of
 * those small calls; 0 when they needed none). */
static inline int zppTrimAfterUse(zppTrimRule_t* t, size_t held, size_t used, size_t* keep) {
  if (used >= held / 4) {
    t->smallCalls = 0;
    t->smallMax = 0;
    return 0;
  }
  if (used > t->smallMax) t->smallMax = used;
  if (++t->smallCalls < ZPP_TRIM_CALLS) return 0;
  *keep = t->smallMax;
  t->smallCalls = 0;
  t->smallMax = 0;
  return 1;
}

#endif /* ZPP_TRIM_H_ */
