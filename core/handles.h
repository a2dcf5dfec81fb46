/*
 * Live-handle registry: which communicators, parameters and host streams
 * exist right now. A destroyed handle is found by looking its address up
 * here, never by reading the freed object: a "magic = 0" store right before
 * free() is a dead store the compiler may drop (it did), and what a freed
 * block holds afterwards is the allocator's business (jemalloc kept the old
 * magic, so a second destroy "succeeded" and freed twice).
 *
 * Lookups take no lock (every collective call makes one); register and
 * unregister serialize on a mutex. Limitation: once an address is freed,
 * a new handle of the same kind may get the same address, and the stale
 * handle then names the new object (as with any pointer handle).
 */
#ifndef ZPP_CORE_HANDLES_H_
#define ZPP_CORE_HANDLES_H_

#include "zpp.h"

typedef enum {
  ZPP_HANDLE_COMM = 1,
  ZPP_HANDLE_PARAM = 2,
  ZPP_HANDLE_STREAM = 3,
  ZPP_HANDLE_GRAD = 4
} zppHandleKind_t;

/* zppSystemError when the registry is full (some 30,000 live handles). */
zppResult_t zppHandleRegister(const void* h, zppHandleKind_t kind);
/* 1 if h was live as kind (it is not any more), 0 if it was not. */
int zppHandleUnregister(const void* h, zppHandleKind_t kind);
/* 1 if h is a live handle of that kind. NULL is never live. */
int zppHandleIsLive(const void* h, zppHandleKind_t kind);

#endif /* ZPP_CORE_HANDLES_H_ */
