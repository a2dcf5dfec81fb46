/*
 * Destroyed and stale handles (issue 19): a second destroy, an abort after
 * destroy, a call on a destroyed communicator, a parameter used or
 * destroyed after its communicator: each must be an error, never a crash,
 * never a second free. ctest runs it twice: with glibc's malloc and with
 * jemalloc preloaded (test_handles_jemalloc), which leaves a freed block's
 * contents alone: a check that reads the freed object (its magic, whose
 * zeroing before free() the compiler drops as a dead store) passes there,
 * while glibc happens to overwrite it with its free-list pointer.
 *
 *   test_handles [jemalloc]     "jemalloc": skip (77) unless it is loaded
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "perf/common/launch.h"

static zppComm_t newComm(const zppUniqueId* id) {
  zppComm_t comm = NULL;
  REQUIRE(zppCommInitRank(&comm, 1, *id, 0) == zppSuccess);
  return comm;
}

static int body(int rank, int nranks, const zppUniqueId* id, void* arg) {
  float buf[64] = {0};
  /* Destroy twice, abort after destroy, calls on the destroyed handle. */
  zppComm_t c = newComm(id);
  CHECK_EQ_INT(zppCommDestroy(c), zppSuccess);
  CHECK_EQ_INT(zppCommDestroy(c), zppInvalidArgument);
  CHECK_EQ_INT(zppCommAbort(c), zppInvalidArgument);
  CHECK_EQ_INT(zppCommRevoke(c), zppInvalidArgument);
  CHECK_EQ_INT(zppCommRevoke(NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppAllReduce(buf, buf, 64, zppFloat32, zppSum, c, NULL), zppInvalidArgument);
  zppResult_t async = zppSuccess;
  CHECK_EQ_INT(zppCommGetAsyncError(c, &async), zppInvalidArgument);
  int n = -1;
  CHECK_EQ_INT(zppCommCount(c, &n), zppInvalidArgument);
  CHECK(zppGetLastError(c) != NULL);

  /* Abort, then destroy and abort again. */
  zppUniqueId id2;
  REQUIRE(zppGetUniqueId(&id2) == zppSuccess);
  c = newComm(&id2);
  CHECK_EQ_INT(zppCommAbort(c), zppSuccess);
  CHECK_EQ_INT(zppCommDestroy(c), zppInvalidArgument);
  CHECK_EQ_INT(zppCommAbort(c), zppInvalidArgument);

  /* Revoke: calls fail, the handle stays until destroy; revoke, then abort. */
  REQUIRE(zppGetUniqueId(&id2) == zppSuccess);
  c = newComm(&id2);
  CHECK_EQ_INT(zppCommRevoke(c), zppSuccess);
  CHECK_EQ_INT(zppAllReduce(buf, buf, 64, zppFloat32, zppSum, c, NULL), zppRemoteError);
  CHECK(strstr(zppGetLastError(c), "revoked by zppCommRevoke") != NULL);
  CHECK_EQ_INT(zppCommCount(c, &n), zppSuccess);
  CHECK_EQ_INT(zppCommDestroy(c), zppSuccess);
  CHECK_EQ_INT(zppCommRevoke(c), zppInvalidArgument);
  REQUIRE(zppGetUniqueId(&id2) == zppSuccess);
  c = newComm(&id2);
  CHECK_EQ_INT(zppCommRevoke(c), zppSuccess);
  CHECK_EQ_INT(zppCommAbort(c), zppSuccess);

  /* A parameter outliving its communicator, and destroyed twice. */
  REQUIRE(zppGetUniqueId(&id2) == zppSuccess);
  c = newComm(&id2);
  zppParam_t p = NULL;
  REQUIRE(zppParamCreate(c, 64, zppFloat32, 0, &p) == zppSuccess);
  float full[64];
  CHECK_EQ_INT(zppParamGatherForward(p, buf, full, NULL), zppSuccess);
  CHECK_EQ_INT(zppCommDestroy(c), zppSuccess);
  CHECK_EQ_INT(zppParamGatherForward(p, buf, full, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppParamGatherBackward(p, buf, full, NULL), zppInvalidArgument);
  CHECK_EQ_INT(zppParamDestroy(p), zppSuccess);
  CHECK_EQ_INT(zppParamDestroy(p), zppInvalidArgument);
  CHECK_EQ_INT(zppParamInvalidate(p), zppInvalidArgument);

  /* Host streams. */
  zppHostStream_t s = NULL;
  REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
  CHECK_EQ_INT(zppHostStreamDestroy(s), zppSuccess);
  CHECK_EQ_INT(zppHostStreamDestroy(s), zppInvalidArgument);
  return zppTestRankResult();
}

int main(int argc, char** argv) {
  int wantJemalloc = argc > 1 && strcmp(argv[1], "jemalloc") == 0;
  if (wantJemalloc && dlsym(RTLD_DEFAULT, "mallctl") == NULL) {
    printf("jemalloc is not loaded (LD_PRELOAD libjemalloc.so.2; Debian: libjemalloc2): skipped\n");
    return 77;
  }
  zppLaunchOpts_t o = ZPP_LAUNCH_OPTS_INIT;
  o.nranks = 1;
  o.timeoutSec = 60;
  CHECK_EQ_INT(zppLaunch(&o, body, NULL), 0);
  return zppTestExit(wantJemalloc ? "handles (jemalloc)" : "handles (glibc)");
}
