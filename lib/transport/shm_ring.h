/*
 * Shared-memory rings for small messages between the ranks of one node,
 * beside UCX (which the host transport keeps for everything else).
 *
 * Why our own: a UCX tag message through its System V transport took
 * 0.57-0.65 us one way on the 2-core VM, about what OpenMPI's whole 2-rank
 * all-gather took. A ring slot that the receiver polls is one cache line
 * moving between two cores.
 *
 * Layout: every rank owns an inbox, one POSIX shared-memory segment holding
 * one single-producer single-consumer ring per local rank that may send to
 * it (indexed by the sender's local rank). A ring is a header cache line
 * (the consumer's count of messages taken) and nSlots slots; a slot is a
 * cache line {seq, tag, len} followed by the payload. The producer writes
 * tag, length and payload, then stores seq = (its count + 1) with release
 * order; the consumer polls the seq of its next slot with acquire order, so
 * a message is seen as soon as its first cache line arrives.
 *
 * Sleeping: a consumer that is about to sleep sets the inbox's sleeping
 * flag, then looks at its rings once more; a producer that wrote a message
 * looks at the flag (a full fence between, on both sides, so one of them
 * sees the other) and, when it takes the flag, wakes the consumer by other
 * means (the host transport sends a UCX control message).
 *
 * Pure memory: no UCX, no bootstrap. The host transport (ucx_shm.c) matches
 * messages to receives and exchanges the segment names.
 */
#ifndef ZPP_TRANSPORT_SHM_RING_H_
#define ZPP_TRANSPORT_SHM_RING_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "zpp.h"

#define ZPP_SHM_NAME_LEN 48
#define ZPP_SHM_LINE 64

typedef struct {
  char name[ZPP_SHM_NAME_LEN]; /* shm_open name, "/zpp-..." */
  void* base;
  size_t bytes;
  int owner; /* created by this process: unlinks it */
  int unlinked;
  int lockFd; /* the owner's, flock'ed until the name is unlinked: a name nobody locks is
               * a dead creator's (zppShmInboxCreate sweeps those); -1 or 0: none */
  uint32_t nRings, nSlots, slotBytes, maxPayload;
} zppShmInbox_t;

/* One side of one ring. */
typedef struct {
  _Atomic uint64_t* head; /* in shared memory: messages the consumer took */
  unsigned char* slots;
  uint32_t nSlots;
  uint32_t slotBytes;
  uint32_t maxPayload;
  uint64_t pos;      /* consumer: messages taken; producer: messages written */
  uint64_t headSeen; /* producer: the consumer's count when last read */
} zppShmRing_t;

/* Creates this rank's inbox: nRings rings of messages of up to maxPayload
 * bytes, with as many slots as fit a fixed budget (at least 2, at most 64).
 * The memory is reserved at once (posix_fallocate), so a full /dev/shm is
 * an error here and never a SIGBUS later. */
zppResult_t zppShmInboxCreate(zppShmInbox_t* box, int nRings, size_t maxPayload);
/* Maps another rank's inbox by name and checks its header. */
zppResult_t zppShmInboxOpen(zppShmInbox_t* box, const char* name);
/* Removes the name (the owner, once every peer mapped it); the mapping
 * stays. Idempotent. */
void zppShmInboxUnlink(zppShmInbox_t* box);
/* Unmaps (and unlinks an owner's inbox if not done yet). */
void zppShmInboxClose(zppShmInbox_t* box);

/* The ring for messages from local rank `index`, seen by either side. */
void zppShmRingAttach(zppShmRing_t* ring, const zppShmInbox_t* box, int index);

/* Producer: copies the message into the next slot; 0 when the ring is
 * full (nothing written). len must be at most maxPayload. */
int zppShmRingTryPush(zppShmRing_t* ring, uint64_t tag, const void* buf, size_t len);

/* Consumer: the k-th message not taken yet (0: the next; its payload,
 * valid until it is popped), or NULL when there is none yet. */
static inline const void* zppShmRingPeekAt(const zppShmRing_t* ring, uint32_t k, uint64_t* tag,
                                           size_t* len) {
  uint64_t want = ring->pos + k;
  const unsigned char* slot = ring->slots + (size_t)(want % ring->nSlots) * ring->slotBytes;
  const _Atomic uint64_t* seq = (const _Atomic uint64_t*)(const void*)slot;
  if (k >= ring->nSlots || atomic_load_explicit(seq, memory_order_acquire) != want + 1) return NULL;
  *tag = *(const uint64_t*)(const void*)(slot + 8);
  *len = *(const uint32_t*)(const void*)(slot + 16);
  /* Never past the slot, whatever a broken peer wrote: the receive then
   * fails on the length. */
  if (*len > ring->maxPayload) *len = ring->maxPayload;
  return slot + ZPP_SHM_LINE;
}

static inline const void* zppShmRingPeek(const zppShmRing_t* ring, uint64_t* tag, size_t* len) {
  return zppShmRingPeekAt(ring, 0, tag, len);
}

/* Consumer: gives the slot of the message last peeked back to the producer. */
static inline void zppShmRingPop(zppShmRing_t* ring) {
  ring->pos++;
  atomic_store_explicit(ring->head, ring->pos, memory_order_release);
}

/* The fence pair of the sleeping handshake costs a producer a full fence
 * per message: it waits until the message's stores reached the consumer's
 * cache (16% of a 2-rank 64-byte all-gather, measured with perf). With the
 * kernel's membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) the consumer, which
 * sleeps rarely, forces that fence onto every producer instead, and the
 * producers need none. Registers this process (once); 1 when that works. */
int zppShmAsymFenceRegister(void);

/* Consumer, before it sleeps: marks the inbox's owner asleep, then fences
 * (asymFence: for every registered producer too, see above). Call
 * zppShmRingPeek on every ring afterwards, and do not sleep if any has a
 * message. sleeping 0 after waking. Returns 0 when membarrier failed (a
 * producer that does not fence may then miss the flag). */
int zppShmInboxSetSleeping(const zppShmInbox_t* box, int sleeping, int asymFence);
/* Producer, after a push: 1 when the consumer marked itself asleep (and the
 * flag is now taken: only one producer wakes it). fence 0 only when this
 * process is registered and the consumer sleeps with asymFence. */
int zppShmInboxTakeSleeper(const zppShmInbox_t* box, int fence);

#endif /* ZPP_TRANSPORT_SHM_RING_H_ */
