/* Live-handle registry (handles.h). */
#include "handles.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "check.h"

/* Each address may sit in one of two buckets of 8 slots (one cache line
 * each): a lookup reads at most two lines, and a removal can empty a slot
 * without tombstones or rehashing, so lookups need no lock. 4096 buckets
 * hold far more than any job makes (512 KiB of zeroed BSS, touched only
 * where used). */
enum { BUCKETS = 4096, SLOTS = 8 };
static _Atomic uintptr_t table[BUCKETS][SLOTS];
static pthread_mutex_t writeLock = PTHREAD_MUTEX_INITIALIZER;

/* Handles are malloc'ed: 16-byte aligned, so the kind fits the low bits. */
static uintptr_t entry(const void* h, zppHandleKind_t kind) { return (uintptr_t)h | (uintptr_t)kind; }

static void buckets(const void* h, unsigned* b1, unsigned* b2) {
  uint64_t x = (uint64_t)(uintptr_t)h >> 4;
  x *= 0x9e3779b97f4a7c15ull;
  *b1 = (unsigned)(x >> 52) % BUCKETS;
  *b2 = (unsigned)(x >> 20) % BUCKETS;
}

static _Atomic uintptr_t* find(const void* h, zppHandleKind_t kind) {
  unsigned b[2];
  buckets(h, &b[0], &b[1]);
  uintptr_t want = entry(h, kind);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < SLOTS; i++)
      if (atomic_load_explicit(&table[b[k]][i], memory_order_acquire) == want) return &table[b[k]][i];
  return NULL;
}

zppResult_t zppHandleRegister(const void* h, zppHandleKind_t kind) {
  if (h == NULL || ((uintptr_t)h & 3) != 0)
    ZPP_FAIL(zppInternalError, INIT, "handle %p cannot be registered", h);
  unsigned b[2];
  buckets(h, &b[0], &b[1]);
  pthread_mutex_lock(&writeLock);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < SLOTS; i++)
      if (atomic_load_explicit(&table[b[k]][i], memory_order_relaxed) == 0) {
        atomic_store_explicit(&table[b[k]][i], entry(h, kind), memory_order_release);
        pthread_mutex_unlock(&writeLock);
        return zppSuccess;
      }
  pthread_mutex_unlock(&writeLock);
  ZPP_FAIL(zppSystemError, INIT, "too many live zpp handles (communicators, parameters, streams)");
}

int zppHandleUnregister(const void* h, zppHandleKind_t kind) {
  if (h == NULL) return 0;
  pthread_mutex_lock(&writeLock);
  _Atomic uintptr_t* slot = find(h, kind);
  if (slot != NULL) atomic_store_explicit(slot, 0, memory_order_release);
  pthread_mutex_unlock(&writeLock);
  return slot != NULL;
}

int zppHandleIsLive(const void* h, zppHandleKind_t kind) { return h != NULL && find(h, kind) != NULL; }
