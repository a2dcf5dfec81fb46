/* Host executor and host streams; see executor.h. */
#include "executor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "handles.h"
#include "lib/comm.h"

struct zppHostStream {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int pending;       /* jobs queued or running */
  zppResult_t error; /* first error since the last synchronize */
};

typedef struct job {
  struct job* next;
  zppJobFn_t fn;
  zppJobDropFn_t drop;
  zppHostStream_t stream;
  struct waiter* waiter; /* blocking caller, or NULL */
  _Alignas(16) unsigned char arg[ZPP_JOB_ARG_MAX];
} job_t;

typedef struct waiter {
  int done;
  zppResult_t result;
} waiter_t;

struct zppExecutor {
  struct zppComm* comm;
  pthread_t thread;
  int threadStarted;
  pthread_mutex_t lock;
  pthread_cond_t workCond; /* the thread waits for jobs */
  pthread_cond_t doneCond; /* blocking callers wait for their job */
  job_t* head;
  job_t* tail;
  int busy; /* a job runs (on the thread, or inline on a blocking caller) */
  int stopping;
  int callers; /* threads inside a blocking submit */
  _Atomic int aborted;
  void* state;
  void (*stateFree)(void*);
  void* p2pState;
  void (*p2pStateFree)(void*);
};

/* ---- host streams ---------------------------------------------------------- */

/* Live streams are found in the one registry of live handles
 * (core/handles.h): a lookup takes no lock, and every host collective makes
 * one. */
int zppExecStreamIsValid(const void* stream) { return zppHandleIsLive(stream, ZPP_HANDLE_STREAM); }

zppResult_t zppExecStreamCreate(zppHostStream_t* out) {
  zppHostStream_t s = NULL;
  ZPP_CALLOC(s, 1);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  s->error = zppSuccess;
  zppResult_t res = zppHandleRegister(s, ZPP_HANDLE_STREAM);
  if (res != zppSuccess) {
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return res;
  }
  *out = s;
  return zppSuccess;
}

zppResult_t zppExecStreamSynchronize(zppHostStream_t s) {
  pthread_mutex_lock(&s->lock);
  while (s->pending > 0) pthread_cond_wait(&s->cond, &s->lock);
  zppResult_t res = s->error;
  s->error = zppSuccess;
  pthread_mutex_unlock(&s->lock);
  return res;
}

zppResult_t zppExecStreamQuery(zppHostStream_t s) {
  pthread_mutex_lock(&s->lock);
  zppResult_t res = s->pending > 0 ? zppInProgress : s->error;
  pthread_mutex_unlock(&s->lock);
  return res;
}

zppResult_t zppExecStreamDestroy(zppHostStream_t s) {
  pthread_mutex_lock(&s->lock);
  while (s->pending > 0) pthread_cond_wait(&s->cond, &s->lock);
  pthread_mutex_unlock(&s->lock);
  /* Two destroys racing: only the one that unregisters it frees it. */
  ZPP_ARGCHECK(zppHandleUnregister(s, ZPP_HANDLE_STREAM),
               "zppHostStreamDestroy: %p is not a live host stream", (void*)s);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
  return zppSuccess;
}

/* ---- the executor thread ------------------------------------------------ */

static void finishJob(zppExecutor_t* e, job_t* j, zppResult_t res) {
  if (j->stream) {
    zppHostStream_t s = j->stream;
    pthread_mutex_lock(&s->lock);
    if (res != zppSuccess && s->error == zppSuccess) s->error = res;
    s->pending--;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
  }
  pthread_mutex_lock(&e->lock);
  if (j->waiter) {
    j->waiter->result = res;
    j->waiter->done = 1;
    pthread_cond_broadcast(&e->doneCond);
  }
  pthread_mutex_unlock(&e->lock);
  free(j);
}

static zppResult_t abortedResult(zppExecutor_t* e) {
  int err = atomic_load(&e->comm->asyncError);
  return err != zppSuccess ? (zppResult_t)err : zppInvalidUsage;
}

static void* executorMain(void* arg) {
  zppExecutor_t* e = arg;
  pthread_mutex_lock(&e->lock);
  for (;;) {
    while ((e->head == NULL && !e->stopping) || e->busy) pthread_cond_wait(&e->workCond, &e->lock);
    job_t* j = e->head;
    if (j == NULL) break; /* stopping and drained */
    e->head = j->next;
    if (e->head == NULL) e->tail = NULL;
    e->busy = 1;
    pthread_mutex_unlock(&e->lock);
    zppResult_t res = zppSuccess;
    if (atomic_load(&e->aborted)) {
      res = abortedResult(e);
      if (j->drop) j->drop(j->arg);
    } else {
      res = j->fn(e->comm, j->arg);
    }
    finishJob(e, j, res);
    pthread_mutex_lock(&e->lock);
    e->busy = 0;
  }
  pthread_mutex_unlock(&e->lock);
  return NULL;
}

zppResult_t zppExecutorCreate(struct zppComm* comm, zppExecutor_t** out) {
  zppResult_t res = zppSuccess;
  zppExecutor_t* e = NULL;
  ZPP_CALLOC(e, 1);
  e->comm = comm;
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->workCond, NULL);
  pthread_cond_init(&e->doneCond, NULL);
  int rc = pthread_create(&e->thread, NULL, executorMain, e);
  if (rc != 0)
    ZPP_FAILGOTO(zppSystemError, res, fail, ALL, "creating the host executor thread: %s", strerror(rc));
  e->threadStarted = 1;
  *out = e;
  return zppSuccess;
fail:
  zppExecutorDestroy(e);
  return res;
}

/* The job will never run: its arguments' owner frees them. */
static void dropArgs(zppJobDropFn_t drop, const void* arg) {
  if (drop) drop((void*)arg);
}

zppResult_t zppExecutorSubmit(zppExecutor_t* e, zppJobFn_t fn, zppJobDropFn_t drop, const void* arg,
                              size_t argBytes, zppHostStream_t stream) {
  if (argBytes > ZPP_JOB_ARG_MAX) {
    dropArgs(drop, arg);
    ZPP_FAIL(zppInternalError, ALL, "job arguments of %zu bytes exceed %d", argBytes, ZPP_JOB_ARG_MAX);
  }
  if (stream == NULL) {
    /* Nothing queued or running: run it right here. Handing it to the
     * thread would cost two thread switches, a good part of a small
     * collective's latency when ranks outnumber cores. */
    pthread_mutex_lock(&e->lock);
    if (e->head == NULL && !e->busy && !e->stopping) {
      e->busy = 1;
      e->callers++;
      pthread_mutex_unlock(&e->lock);
      zppResult_t res = zppSuccess;
      if (atomic_load(&e->aborted)) {
        res = abortedResult(e);
        dropArgs(drop, arg);
      } else {
        res = fn(e->comm, (void*)arg);
      }
      pthread_mutex_lock(&e->lock);
      e->busy = 0;
      /* Wake the thread only for jobs queued meanwhile or a destroy that
       * came while busy (its wake-up found the thread waiting on busy: it
       * would wait for good, and the destroy's join with it; seen as an
       * abort from another thread that hung, torch_errors_abort), and the
       * destroyer only if there is one: a wake-up is a thread switch. */
      if (e->head || e->stopping) pthread_cond_signal(&e->workCond);
      e->callers--;
      if (e->callers == 0 && e->stopping) pthread_cond_broadcast(&e->doneCond);
      pthread_mutex_unlock(&e->lock);
      return res;
    }
    pthread_mutex_unlock(&e->lock);
  }
  job_t* j = calloc(1, sizeof(*j));
  if (j == NULL) {
    dropArgs(drop, arg);
    ZPP_FAIL(zppSystemError, ALL, "out of memory queueing a host operation");
  }
  j->fn = fn;
  j->drop = drop;
  if (argBytes) memcpy(j->arg, arg, argBytes);
  waiter_t w = {0, zppSuccess};
  if (stream) {
    j->stream = stream;
    pthread_mutex_lock(&stream->lock);
    stream->pending++;
    pthread_mutex_unlock(&stream->lock);
  } else {
    j->waiter = &w;
  }
  pthread_mutex_lock(&e->lock);
  if (e->stopping) {
    pthread_mutex_unlock(&e->lock);
    j->waiter = NULL;
    if (j->drop) j->drop(j->arg);
    finishJob(e, j, zppInvalidUsage);
    ZPP_FAIL(zppInvalidUsage, ALL, "operation issued on a communicator being destroyed");
  }
  if (e->tail)
    e->tail->next = j;
  else
    e->head = j;
  e->tail = j;
  pthread_cond_signal(&e->workCond);
  if (stream) {
    pthread_mutex_unlock(&e->lock);
    return zppSuccess;
  }
  e->callers++;
  while (!w.done) pthread_cond_wait(&e->doneCond, &e->lock);
  /* After this the executor may be freed: touch nothing of it. */
  e->callers--;
  if (e->callers == 0 && e->stopping) pthread_cond_broadcast(&e->doneCond);
  pthread_mutex_unlock(&e->lock);
  return w.result;
}

void zppExecutorAbort(zppExecutor_t* e) {
  if (e == NULL) return;
  atomic_store(&e->aborted, 1);
}

void zppExecutorDestroy(zppExecutor_t* e) {
  if (e == NULL) return;
  if (e->threadStarted) {
    pthread_mutex_lock(&e->lock);
    e->stopping = 1;
    pthread_cond_signal(&e->workCond);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
  }
  pthread_mutex_lock(&e->lock);
  while (e->callers > 0) pthread_cond_wait(&e->doneCond, &e->lock);
  pthread_mutex_unlock(&e->lock);
  if (e->state && e->stateFree) e->stateFree(e->state);
  if (e->p2pState && e->p2pStateFree) e->p2pStateFree(e->p2pState);
  pthread_cond_destroy(&e->workCond);
  pthread_cond_destroy(&e->doneCond);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

void* zppExecutorGetState(zppExecutor_t* e) { return e->state; }

void zppExecutorSetState(zppExecutor_t* e, void* state, void (*freeFn)(void*)) {
  e->state = state;
  e->stateFree = freeFn;
}

void* zppExecutorGetP2pState(zppExecutor_t* e) { return e->p2pState; }

void zppExecutorSetP2pState(zppExecutor_t* e, void* state, void (*freeFn)(void*)) {
  e->p2pState = state;
  e->p2pStateFree = freeFn;
}
