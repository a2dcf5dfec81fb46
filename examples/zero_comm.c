/* The trainer's NCCL-shaped communication layer: see zero_comm.h. */
#include "zero_comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct zcOp {
  struct zcOp* next;
  zcStream_t owner;
  zppHostStream_t hs; /* this operation's own stream, from the pool */
  double issued;
  zppResult_t issueError; /* a multi-call operation that only half queued */
} zcOp_t;

struct zcStream {
  zcComm_t comm;
  int pending;       /* operations issued and not yet seen finished */
  zppResult_t error; /* first error since the last synchronize */
};

struct zcComm {
  zppComm_t comm;
  zcOptions_t opt;
  int nranks;
  pthread_mutex_t lock;
  pthread_cond_t work; /* the watcher waits for operations */
  pthread_cond_t done; /* synchronizers wait for the watcher */
  pthread_t watcher;
  int watcherStarted;
  int stop;
  zcOp_t* head; /* operations in issue order = the order zpp runs them */
  zcOp_t* tail;
  zppHostStream_t* pool;
  int npool, poolCap;
  double lastDone;
  zcTimes_t times;
  struct zcStream blocking; /* carries the calls made with stream NULL */
};

struct zcGrad {
  zppGrad_t ef; /* ZeRO++ with qgzEF only */
};

struct zcParam {
  zcComm_t comm;
  size_t count;
  zppDataType_t type;
  zppParam_t hpz; /* ZeRO++ with hpZ only */
};

static double zcNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Completion in issue order: one blocking zppHostStreamSynchronize per
 * operation, on the operation's own stream, so that a later operation on
 * the same zcStream never delays the earlier one's finish time. */
static void* zcWatcherMain(void* arg) {
  zcComm_t c = arg;
  pthread_mutex_lock(&c->lock);
  for (;;) {
    while (c->head == NULL && !c->stop) pthread_cond_wait(&c->work, &c->lock);
    zcOp_t* op = c->head;
    if (op == NULL) break;
    pthread_mutex_unlock(&c->lock);
    zppResult_t res = zppHostStreamSynchronize(op->hs);
    double t = zcNow();
    if (op->issueError != zppSuccess) res = op->issueError;
    pthread_mutex_lock(&c->lock);
    double start = op->issued > c->lastDone ? op->issued : c->lastDone;
    if (t > start) c->times.busy += t - start;
    c->lastDone = t;
    c->times.ops++;
    c->head = op->next;
    if (c->head == NULL) c->tail = NULL;
    c->pool[c->npool++] = op->hs; /* room was reserved when it was taken */
    zcStream_t s = op->owner;
    s->pending--;
    if (res != zppSuccess && s->error == zppSuccess) s->error = res;
    pthread_cond_broadcast(&c->done);
    free(op);
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

zppResult_t zcCommInit(zcComm_t* out, zppComm_t comm, const zcOptions_t* options) {
  if (out == NULL || comm == NULL || options == NULL) return zppInvalidArgument;
  zcComm_t c = calloc(1, sizeof *c);
  if (c == NULL) return zppSystemError;
  c->comm = comm;
  c->opt = *options;
  if (c->opt.mode == zcModePlain)
    c->opt.qwzBits = c->opt.qgzBits = c->opt.hpz = c->opt.qwzDelta = c->opt.qgzEF = 0;
  zppCommCount(comm, &c->nranks);
  c->blocking.comm = c;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->work, NULL);
  pthread_cond_init(&c->done, NULL);
  if (pthread_create(&c->watcher, NULL, zcWatcherMain, c) != 0) {
    zcCommDestroy(c);
    return zppSystemError;
  }
  c->watcherStarted = 1;
  *out = c;
  return zppSuccess;
}

zppResult_t zcCommDestroy(zcComm_t c) {
  if (c == NULL) return zppSuccess;
  if (c->watcherStarted) {
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->lock);
    pthread_join(c->watcher, NULL); /* it drains the queue first */
  }
  zppResult_t res = zppSuccess;
  for (int i = 0; i < c->npool; i++) {
    zppResult_t r = zppHostStreamDestroy(c->pool[i]);
    if (res == zppSuccess) res = r;
  }
  free(c->pool);
  pthread_cond_destroy(&c->done);
  pthread_cond_destroy(&c->work);
  pthread_mutex_destroy(&c->lock);
  free(c);
  return res;
}

void zcCommTimes(zcComm_t c, zcTimes_t* t) {
  pthread_mutex_lock(&c->lock);
  *t = c->times;
  pthread_mutex_unlock(&c->lock);
}

void zcCommResetTimes(zcComm_t c) {
  pthread_mutex_lock(&c->lock);
  memset(&c->times, 0, sizeof c->times);
  pthread_mutex_unlock(&c->lock);
}

const zcOptions_t* zcCommOptions(zcComm_t c) { return &c->opt; }

zppResult_t zcStreamCreate(zcComm_t c, zcStream_t* out) {
  if (c == NULL || out == NULL) return zppInvalidArgument;
  zcStream_t s = calloc(1, sizeof *s);
  if (s == NULL) return zppSystemError;
  s->comm = c;
  *out = s;
  return zppSuccess;
}

zppResult_t zcStreamSynchronize(zcStream_t s) {
  zcComm_t c = s->comm;
  double t0 = zcNow();
  pthread_mutex_lock(&c->lock);
  while (s->pending > 0) pthread_cond_wait(&c->done, &c->lock);
  zppResult_t res = s->error;
  s->error = zppSuccess;
  c->times.exposed += zcNow() - t0;
  pthread_mutex_unlock(&c->lock);
  return res;
}

zppResult_t zcStreamDestroy(zcStream_t s) {
  if (s == NULL) return zppSuccess;
  zppResult_t res = zcStreamSynchronize(s);
  free(s);
  return res;
}

/* ---- issuing ------------------------------------------------------------ */

/* A free zppHostStream_t, with room reserved in the pool for its return. */
static zppResult_t zcTakeStream(zcComm_t c, zppHostStream_t* hs) {
  pthread_mutex_lock(&c->lock);
  if (c->npool > 0) {
    *hs = c->pool[--c->npool];
    pthread_mutex_unlock(&c->lock);
    return zppSuccess;
  }
  int cap = c->poolCap + 1;
  zppHostStream_t* grown = realloc(c->pool, (size_t)cap * sizeof *grown);
  if (grown == NULL) {
    pthread_mutex_unlock(&c->lock);
    return zppSystemError;
  }
  c->pool = grown;
  c->poolCap = cap;
  pthread_mutex_unlock(&c->lock);
  zppResult_t res = zppHostStreamCreate(hs);
  if (res != zppSuccess) {
    pthread_mutex_lock(&c->lock);
    c->poolCap--; /* give the reserved slot back */
    pthread_mutex_unlock(&c->lock);
  }
  return res;
}

typedef zppResult_t (*zcCallFn)(const void* args, zppHostStream_t hs, int* queued);

/* Issues one operation (one or more zpp calls on a fresh host stream) and
 * hands it to the watcher; with stream NULL, also waits for it. */
static zppResult_t zcIssue(zcComm_t c, zcStream_t s, zcCallFn fn, const void* args) {
  zcStream_t owner = s != NULL ? s : &c->blocking;
  zppHostStream_t hs;
  zppResult_t res = zcTakeStream(c, &hs);
  if (res != zppSuccess) return res;
  zcOp_t* op = calloc(1, sizeof *op);
  if (op == NULL) {
    pthread_mutex_lock(&c->lock);
    c->pool[c->npool++] = hs;
    pthread_mutex_unlock(&c->lock);
    return zppSystemError;
  }
  op->owner = owner;
  op->hs = hs;
  op->issued = zcNow();
  int queued = 0;
  res = fn(args, hs, &queued);
  double issuedEnd = zcNow();
  op->issueError = res;
  if (res != zppSuccess && !queued) {
    /* Nothing reached zpp: no operation to watch. */
    pthread_mutex_lock(&c->lock);
    c->pool[c->npool++] = hs;
    pthread_mutex_unlock(&c->lock);
    free(op);
    return res;
  }
  pthread_mutex_lock(&c->lock);
  c->times.exposed += issuedEnd - op->issued;
  if (c->tail != NULL)
    c->tail->next = op;
  else
    c->head = op;
  c->tail = op;
  owner->pending++;
  pthread_cond_signal(&c->work);
  pthread_mutex_unlock(&c->lock);
  if (res != zppSuccess) return res;
  return s == NULL ? zcStreamSynchronize(owner) : zppSuccess;
}

typedef struct {
  const void* send;
  void* recv;
  size_t count;
  zppDataType_t type;
  zppRedOp_t op;
  int bits;
  zcComm_t comm;
  zcParam_t param;
} zcArgs_t;

static zppResult_t zcCallAllGather(const void* v, zppHostStream_t hs, int* queued) {
  const zcArgs_t* a = v;
  zppResult_t r = a->bits != 0
                      ? zppQwzAllGather(a->send, a->recv, a->count, a->type, a->bits, a->comm->comm, hs)
                      : zppAllGather(a->send, a->recv, a->count, a->type, a->comm->comm, hs);
  *queued = r == zppSuccess;
  return r;
}

static zppResult_t zcCallAllReduce(const void* v, zppHostStream_t hs, int* queued) {
  const zcArgs_t* a = v;
  zppResult_t r = zppAllReduce(a->send, a->recv, a->count, a->type, a->op, a->comm->comm, hs);
  *queued = r == zppSuccess;
  return r;
}

static zppResult_t zcCallParamForward(const void* v, zppHostStream_t hs, int* queued) {
  const zcArgs_t* a = v;
  zppResult_t r = zppParamGatherForward(a->param->hpz, a->send, a->recv, hs);
  *queued = r == zppSuccess;
  return r;
}

static zppResult_t zcCallParamBackward(const void* v, zppHostStream_t hs, int* queued) {
  const zcArgs_t* a = v;
  zppResult_t r = zppParamGatherBackward(a->param->hpz, a->send, a->recv, hs);
  *queued = r == zppSuccess;
  return r;
}

zppResult_t zcAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, zppDataType_t datatype,
                        zcComm_t comm, zcStream_t stream) {
  zcArgs_t a = {sendbuff, recvbuff, sendcount, datatype, zppSum, 0, comm, NULL};
  return zcIssue(comm, stream, zcCallAllGather, &a);
}

zppResult_t zcAllReduce(const void* sendbuff, void* recvbuff, size_t count, zppDataType_t datatype,
                        zppRedOp_t op, zcComm_t comm, zcStream_t stream) {
  zcArgs_t a = {sendbuff, recvbuff, count, datatype, op, 0, comm, NULL};
  return zcIssue(comm, stream, zcCallAllReduce, &a);
}

typedef struct {
  int n;
  const void* const* send;
  void* const* recv;
  const size_t* counts;
  zppDataType_t type;
  zppRedOp_t op;
  const zcGrad_t* grads;
  zcComm_t comm;
} zcBucketArgs_t;

static zppResult_t zcCallBucket(const void* v, zppHostStream_t hs, int* queued) {
  const zcBucketArgs_t* a = v;
  zcComm_t c = a->comm;
  if (c->opt.qgzBits != 0 && c->opt.qgzEF) {
    zppGrad_t efs[a->n];
    for (int t = 0; t < a->n; t++) efs[t] = a->grads[t]->ef;
    zppResult_t r = zppQgzReduceScatterCoalescedEF(a->n, a->send, a->recv, a->counts, a->type, a->op,
                                                   efs, c->comm, hs);
    *queued = r == zppSuccess;
    return r;
  }
  if (c->opt.qgzBits != 0) {
    zppResult_t r = zppQgzReduceScatterCoalesced(a->n, a->send, a->recv, a->counts, a->type, a->op,
                                                 c->opt.qgzBits, c->comm, hs);
    *queued = r == zppSuccess;
    return r;
  }
  /* NCCL would take these as one group; zpp runs them in order anyway. */
  for (int t = 0; t < a->n; t++) {
    zppResult_t r = zppReduceScatter(a->send[t], a->recv[t], a->counts[t], a->type, a->op, c->comm, hs);
    if (r != zppSuccess) return r;
    *queued = 1;
  }
  return zppSuccess;
}

zppResult_t zcReduceScatterCoalesced(int ntensors, const void* const* sendbuffs, void* const* recvbuffs,
                                     const size_t* recvcounts, zppDataType_t datatype, zppRedOp_t op,
                                     const zcGrad_t* grads, zcComm_t comm, zcStream_t stream) {
  if (comm == NULL || ntensors < 0 || (ntensors > 0 && (!sendbuffs || !recvbuffs || !recvcounts)))
    return zppInvalidArgument;
  if (comm->opt.qgzEF && ntensors > 0 && grads == NULL) return zppInvalidArgument;
  if (ntensors == 0) return zppSuccess;
  zcBucketArgs_t a = {ntensors, sendbuffs, recvbuffs, recvcounts, datatype, op, grads, comm};
  return zcIssue(comm, stream, zcCallBucket, &a);
}

/* ---- gradients ---------------------------------------------------------- */

zppResult_t zcGradCreate(zcComm_t comm, size_t recvcount, zppDataType_t datatype, zcGrad_t* out) {
  if (comm == NULL || out == NULL) return zppInvalidArgument;
  zcGrad_t g = calloc(1, sizeof *g);
  if (g == NULL) return zppSystemError;
  if (comm->opt.qgzBits != 0 && comm->opt.qgzEF) {
    zppResult_t r = zppGradCreate(comm->comm, recvcount, datatype, comm->opt.qgzBits, &g->ef);
    if (r != zppSuccess) {
      free(g);
      return r;
    }
  }
  *out = g;
  return zppSuccess;
}

zppResult_t zcGradDestroy(zcGrad_t g) {
  if (g == NULL) return zppSuccess;
  zppResult_t r = zppGradDestroy(g->ef);
  free(g);
  return r;
}

/* ---- parameters --------------------------------------------------------- */

zppResult_t zcParamCreate(zcComm_t comm, size_t shardcount, zppDataType_t datatype, zcParam_t* out) {
  if (comm == NULL || out == NULL) return zppInvalidArgument;
  zcParam_t p = calloc(1, sizeof *p);
  if (p == NULL) return zppSystemError;
  p->comm = comm;
  p->count = shardcount;
  p->type = datatype;
  if (comm->opt.hpz || comm->opt.qwzDelta) {
    /* bits 0 would mean "the communicator's qwzBits"; the trainer's
     * communicator keeps those at 0, so 0 stays a plain hpZ gather (and
     * --qwz-delta refuses bits 0 before it comes here). */
    zppResult_t r = zppParamCreateEx(comm->comm, shardcount, datatype, comm->opt.qwzBits,
                                     comm->opt.qwzDelta ? ZPP_PARAM_DELTA : 0, &p->hpz);
    if (r != zppSuccess) {
      free(p);
      return r;
    }
  }
  *out = p;
  return zppSuccess;
}

static zppResult_t zcParamGather(zcParam_t p, const void* shard, void* full, zcStream_t stream,
                                 int backward) {
  zcComm_t c = p->comm;
  zcArgs_t a = {shard, full, p->count, p->type, zppSum, c->opt.qwzBits, c, p};
  if (p->hpz != NULL)
    return zcIssue(c, stream, backward ? zcCallParamBackward : zcCallParamForward, &a);
  return zcIssue(c, stream, zcCallAllGather, &a);
}

zppResult_t zcParamGatherForward(zcParam_t p, const void* shard, void* full, zcStream_t stream) {
  return zcParamGather(p, shard, full, stream, 0);
}

zppResult_t zcParamGatherBackward(zcParam_t p, const void* shard, void* full, zcStream_t stream) {
  return zcParamGather(p, shard, full, stream, 1);
}

zppResult_t zcParamInvalidate(zcParam_t p) {
  return p->hpz != NULL ? zppParamInvalidate(p->hpz) : zppSuccess;
}

size_t zcParamSecondaryBytes(zcParam_t p) {
  size_t b = 0;
  if (p->hpz != NULL && zppParamSecondaryBytes(p->hpz, &b) != zppSuccess) b = 0;
  return b;
}

zppResult_t zcParamDestroy(zcParam_t p) {
  if (p == NULL) return zppSuccess;
  zppResult_t r = zppParamDestroy(p->hpz);
  free(p);
  return r;
}
