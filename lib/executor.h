/*
 * Host executor: one thread per communicator runs the host-buffer
 * operations in the order they were issued, one at a time; whoever runs the
 * current job owns every UCX call of the communicator (so UCX needs no
 * locks and two callers never progress each other's transfers).
 *
 * A job issued with stream NULL blocks its caller until it ran (on the
 * caller's own thread when nothing else is queued or running); with a
 * zppHostStream_t it is queued and the caller goes on; the stream counts its
 * jobs and keeps the first error (zppHostStreamSynchronize reports it).
 * The public host stream calls (api/stream_api.c) check their arguments and
 * call the zppExecStream* functions below.
 */
#ifndef ZPP_EXECUTOR_H_
#define ZPP_EXECUTOR_H_

#include <stddef.h>

#include "zpp.h"

struct zppComm;
typedef struct zppExecutor zppExecutor_t;

/* Runs on the executor thread, or inline on a blocking caller's thread,
 * never two at a time; arg points to the job's copy of the arguments given to
 * zppExecutorSubmit (or to them, inline). */
typedef zppResult_t (*zppJobFn_t)(struct zppComm* comm, void* arg);
/* Called instead of the job when it will never run (the communicator was
 * aborted, or is being destroyed), with the job's copy of the arguments, so
 * that what they hold is freed all the same. */
typedef void (*zppJobDropFn_t)(void* arg);

#define ZPP_JOB_ARG_MAX 128

zppResult_t zppExecutorCreate(struct zppComm* comm, zppExecutor_t** out);
/* Jobs after this fail at once (the one running is stopped by the transport
 * abort); thread safe. */
void zppExecutorAbort(zppExecutor_t* exec);
/* Lets queued jobs finish (or fail, after an abort), joins the thread, waits
 * for callers still returning from a blocking submit, frees. NULL ok. */
void zppExecutorDestroy(zppExecutor_t* exec);

/* Issues fn with a copy of argBytes bytes of arg (at most ZPP_JOB_ARG_MAX).
 * stream NULL: returns fn's result once it ran. stream a host stream:
 * returns zppSuccess once queued. Exactly one of fn and drop (when not
 * NULL) runs, whatever happens, also when this returns an error. */
zppResult_t zppExecutorSubmit(zppExecutor_t* exec, zppJobFn_t fn, zppJobDropFn_t drop, const void* arg,
                              size_t argBytes, zppHostStream_t stream);

/* Host streams: made, waited for (the first error since the last
 * synchronize), asked (zppInProgress while jobs are pending) and destroyed
 * (after its jobs ran; zppInvalidArgument when it is not live, so that of
 * two destroys exactly one frees it). */
zppResult_t zppExecStreamCreate(zppHostStream_t* out);
zppResult_t zppExecStreamSynchronize(zppHostStream_t s);
zppResult_t zppExecStreamQuery(zppHostStream_t s);
zppResult_t zppExecStreamDestroy(zppHostStream_t s);

/* 1 if stream is a live host stream made by zppHostStreamCreate. Looks the
 * pointer up in the registry of live handles without touching it (it may be
 * a cudaStream_t), with no lock. */
int zppExecStreamIsValid(const void* stream);

/* A slot for the layer above: state only jobs touch (on the executor
 * thread), freed at destroy by freeFn. */
void* zppExecutorGetState(zppExecutor_t* exec);
void zppExecutorSetState(zppExecutor_t* exec, void* state, void (*freeFn)(void*));
/* A second such slot, point-to-point's (collectives/p2p.c). */
void* zppExecutorGetP2pState(zppExecutor_t* exec);
void zppExecutorSetP2pState(zppExecutor_t* exec, void* state, void (*freeFn)(void*));

#endif /* ZPP_EXECUTOR_H_ */
