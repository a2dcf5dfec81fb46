/*
 * The host collectives' scratch pool (collectives/coll_common.c) keeps its
 * buffers across calls and gives a slot back only after
 * ZPP_TRIM_CALLS (64, core/trim.h) calls in a row needed under a quarter of it.
 * Freeing large buffers after every call made each call fault them in again
 * (qwZ at 256 MiB on 4 ranks lost 4-5% of its wire speed to it).
 */
#include <stdint.h>
#include <stdlib.h>

#include "collectives/coll_common.h"
#include "testutil.h"

enum { TRIM_CALLS = ZPP_TRIM_CALLS };

/* One "call": the requests it makes, then the trim that follows every call. */
static void call(zppScratchPool_t* p, int slot, size_t bytes) {
  if (bytes > 0) REQUIRE(zppScratchPoolGet(p, slot, bytes) != NULL);
  zppScratchPoolTrim(p);
}

int main(void) {
  zppScratchPool_t p = {0};

  /* A loop of large calls keeps its buffer: the same memory every call. */
  REQUIRE(zppScratchPoolGet(&p, 0, (size_t)200 << 20) != NULL);
  void* big = p.buf[0];
  zppScratchPoolTrim(&p);
  for (int i = 0; i < 3 * TRIM_CALLS; i++) {
    CHECK(zppScratchPoolGet(&p, 0, (size_t)150 << 20) == big);
    zppScratchPoolTrim(&p);
  }
  CHECK(p.buf[0] == big && p.bytes[0] == (size_t)200 << 20);

  /* Small calls: kept for 63 of them, given back at the 64th. */
  for (int i = 0; i < TRIM_CALLS - 1; i++) call(&p, 0, 4096);
  CHECK_MSG(p.buf[0] == big, "given back after %d small calls", TRIM_CALLS - 1);
  call(&p, 0, 4096);
  CHECK_MSG(p.buf[0] == NULL && p.bytes[0] == 0, "still held after %d small calls", TRIM_CALLS);

  /* A call that needs a quarter or more restarts the count. */
  call(&p, 1, (size_t)1 << 20);
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < TRIM_CALLS - 1; i++) call(&p, 1, 1000);
    call(&p, 1, (size_t)1 << 18); /* exactly a quarter */
  }
  CHECK_MSG(p.buf[1] != NULL && p.bytes[1] == (size_t)1 << 20,
            "a slot that a large call used every %d calls was given back", TRIM_CALLS);

  /* A call that does not touch a slot counts as small for it. */
  for (int i = 0; i < TRIM_CALLS; i++) call(&p, 2, 0);
  CHECK(p.buf[1] == NULL);

  /* Growing replaces the buffer and restarts the count. */
  call(&p, 3, 1000);
  call(&p, 3, 5000);
  CHECK(p.bytes[3] == 5000);
  CHECK(zppScratchPoolGet(&p, ZPP_SCRATCH_POOL_SLOTS, 16) == NULL);
  CHECK(zppScratchPoolGet(&p, -1, 16) == NULL);

  zppScratchPoolFree(&p);
  for (int i = 0; i < ZPP_SCRATCH_POOL_SLOTS; i++) CHECK(p.buf[i] == NULL && p.bytes[i] == 0);
  return zppTestExit("test_scratch_pool");
}
