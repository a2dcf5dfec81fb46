/*
 * The host executor alone (lib/executor.h), on a communicator that is only
 * a struct: jobs on a host stream run in issue order; a job that will never
 * run (the executor was aborted) has its drop callback called instead, on
 * the queued path and on the inline one, so that what its arguments hold is
 * freed (a qgZ call copies its tensor arrays into a block the job frees);
 * a destroy while a blocking call runs inline returns when the call does;
 * host streams are found in the registry of live handles.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "lib/comm.h"
#include "lib/executor.h"
#include "testutil.h"

static _Atomic int order[16];
static _Atomic int nRan;
static _Atomic int release;
static _Atomic int dropped;

static void sleepMs(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

static zppResult_t recordJob(struct zppComm* comm, void* arg) {
  (void)comm;
  int i = atomic_fetch_add(&nRan, 1);
  if (i < 16) atomic_store(&order[i], *(int*)arg);
  return zppSuccess;
}

/* Holds the executor until the test releases it. */
static zppResult_t holdJob(struct zppComm* comm, void* arg) {
  (void)comm;
  (void)arg;
  while (!atomic_load(&release)) sleepMs(1);
  return zppSuccess;
}

/* Arguments that own memory, as qgZ's do: the job or the drop frees it. */
static zppResult_t ownedJob(struct zppComm* comm, void* arg) {
  (void)comm;
  free(*(void**)arg);
  atomic_fetch_add(&nRan, 1);
  return zppSuccess;
}

static void ownedDrop(void* arg) {
  free(*(void**)arg);
  atomic_fetch_add(&dropped, 1);
}

static void testOrder(struct zppComm* comm) {
  zppExecutor_t* e = NULL;
  zppHostStream_t s = NULL;
  REQUIRE(zppExecutorCreate(comm, &e) == zppSuccess);
  REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
  atomic_store(&nRan, 0);
  for (int i = 0; i < 10; i++)
    CHECK(zppExecutorSubmit(e, recordJob, NULL, &i, sizeof i, s) == zppSuccess);
  CHECK(zppHostStreamSynchronize(s) == zppSuccess);
  CHECK_EQ_INT(atomic_load(&nRan), 10);
  for (int i = 0; i < 10; i++) CHECK_EQ_INT(atomic_load(&order[i]), i);
  CHECK(zppHostStreamDestroy(s) == zppSuccess);
  zppExecutorDestroy(e);
}

static void testDrop(struct zppComm* comm) {
  zppExecutor_t* e = NULL;
  zppHostStream_t s = NULL;
  REQUIRE(zppExecutorCreate(comm, &e) == zppSuccess);
  REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
  atomic_store(&nRan, 0);
  atomic_store(&dropped, 0);
  atomic_store(&release, 0);
  /* One job holds the executor; three queue behind it, then the abort. */
  CHECK(zppExecutorSubmit(e, holdJob, NULL, NULL, 0, s) == zppSuccess);
  for (int i = 0; i < 3; i++) {
    void* owned = malloc(1000);
    CHECK(zppExecutorSubmit(e, ownedJob, ownedDrop, &owned, sizeof owned, s) == zppSuccess);
  }
  zppExecutorAbort(e);
  atomic_store(&release, 1);
  CHECK(zppHostStreamSynchronize(s) != zppSuccess); /* the dropped jobs failed */
  CHECK_EQ_INT(atomic_load(&nRan), 0);
  CHECK_EQ_INT(atomic_load(&dropped), 3);
  /* Blocking, on the caller's thread: dropped too. */
  void* owned = malloc(1000);
  CHECK(zppExecutorSubmit(e, ownedJob, ownedDrop, &owned, sizeof owned, NULL) != zppSuccess);
  CHECK_EQ_INT(atomic_load(&nRan), 0);
  CHECK_EQ_INT(atomic_load(&dropped), 4);
  CHECK(zppHostStreamDestroy(s) == zppSuccess);
  zppExecutorDestroy(e);
}

/* A blocking call runs inline on the caller's thread; a destroy from another
 * thread meanwhile (what zppCommAbort does to a call blocked on a hung peer)
 * must return once that call does. Its wake-up of the executor thread came
 * while the inline call held it busy: the call's end must wake the thread
 * again, or the destroy's join waits for good. */
typedef struct {
  zppExecutor_t* e;
  _Atomic int returned;
} destroyer_t;

static void* destroyer(void* arg) {
  destroyer_t* d = arg;
  zppExecutorDestroy(d->e);
  atomic_store(&d->returned, 1);
  return NULL;
}

static void* inlineCaller(void* arg) {
  zppExecutor_t* e = arg;
  (void)zppExecutorSubmit(e, holdJob, NULL, NULL, 0, NULL);
  return NULL;
}

static void testDestroyDuringInlineCall(struct zppComm* comm) {
  destroyer_t d = {NULL, 0};
  REQUIRE(zppExecutorCreate(comm, &d.e) == zppSuccess);
  atomic_store(&release, 0);
  pthread_t caller, killer;
  REQUIRE(pthread_create(&caller, NULL, inlineCaller, d.e) == 0);
  sleepMs(50); /* the call is running, inline */
  REQUIRE(pthread_create(&killer, NULL, destroyer, &d) == 0);
  sleepMs(50); /* the destroy has asked the thread to stop, and waits */
  CHECK(!atomic_load(&d.returned));
  atomic_store(&release, 1);
  pthread_join(caller, NULL);
  for (int i = 0; i < 2000 && !atomic_load(&d.returned); i++) sleepMs(1);
  CHECK_MSG(atomic_load(&d.returned), "the destroy did not return within 2 s of the inline call");
  if (atomic_load(&d.returned)) pthread_join(killer, NULL);
}

static void testStreamRegistry(void) {
  zppHostStream_t s = NULL, t = NULL;
  REQUIRE(zppHostStreamCreate(&s) == zppSuccess);
  REQUIRE(zppHostStreamCreate(&t) == zppSuccess);
  CHECK(zppExecStreamIsValid(s) && zppExecStreamIsValid(t));
  int notAStream = 0;
  CHECK(!zppExecStreamIsValid(&notAStream));
  CHECK(!zppExecStreamIsValid(NULL));
  CHECK(zppHostStreamDestroy(s) == zppSuccess);
  CHECK(!zppExecStreamIsValid(s));
  CHECK(zppExecStreamIsValid(t));
  CHECK(zppHostStreamDestroy(s) == zppInvalidArgument); /* twice: refused, not freed again */
  CHECK(zppHostStreamSynchronize(s) == zppInvalidArgument);
  CHECK(zppHostStreamDestroy(t) == zppSuccess);
  CHECK(zppHostStreamDestroy(NULL) == zppSuccess);
}

int main(void) {
  struct zppComm comm;
  memset(&comm, 0, sizeof comm);
  atomic_store(&comm.asyncError, zppSuccess);
  testOrder(&comm);
  testDrop(&comm);
  testDestroyDuringInlineCall(&comm);
  testStreamRegistry();
  return zppTestExit("test_executor");
}
