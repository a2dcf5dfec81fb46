/* Shared-memory rings for small intra-node messages; see shm_ring.h. */
#include "shm_ring.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <linux/membarrier.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define INBOX_MAGIC 0x7a70707368726e67ull /* "zppshrng" */
#define INBOX_VERSION 1
/* An inbox's rings share this much memory; each ring gets 2 to 64 slots.
 * 4 MiB: 8 local ranks sending 8 KiB messages get 63 slots each. */
#define INBOX_BUDGET_BYTES (4u << 20)
#define MIN_SLOTS 2
#define MAX_SLOTS 64

/* A failure here only turns the rings off (the caller says so): a warning,
 * not an error. */
#define RING_FAIL(...)          \
  do {                          \
    ZPP_WARN(NET, __VA_ARGS__); \
    return zppSystemError;      \
  } while (0)

typedef struct {
  _Atomic uint32_t sleeping;
  char pad0[ZPP_SHM_LINE - sizeof(uint32_t)];
  uint64_t magic;
  uint64_t bytes;
  uint32_t version, nRings, nSlots, slotBytes, maxPayload;
  char pad1[ZPP_SHM_LINE - 2 * sizeof(uint64_t) - 5 * sizeof(uint32_t)];
} inboxHeader_t;

_Static_assert(sizeof(inboxHeader_t) == 2 * ZPP_SHM_LINE, "inbox header is two cache lines");

static size_t ringBytes(uint32_t nSlots, uint32_t slotBytes) {
  return ZPP_SHM_LINE + (size_t)nSlots * slotBytes;
}

static size_t inboxBytes(uint32_t nRings, uint32_t nSlots, uint32_t slotBytes) {
  return sizeof(inboxHeader_t) + (size_t)nRings * ringBytes(nSlots, slotBytes);
}

/* "/zpp-<pid>-<64 random bits>": unguessable, and the pid says whose it is
 * when one is left behind by a killed job. */
static void makeName(char* name) {
  uint64_t rnd = 0;
  if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    rnd = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
  }
  snprintf(name, ZPP_SHM_NAME_LEN, "/zpp-%d-%016llx", (int)getpid(), (unsigned long long)rnd);
}

/* An inbox name lives only during creation (it is unlinked as soon as every
 * local rank has mapped it), so one that stays behind belongs to a rank
 * killed while creating. Its creator held an flock on it until the unlink;
 * a name that nobody locks, older than STALE_SEC (a creator locks within
 * microseconds of making it), is removed. Locks, unlike pids, mean the same
 * in every pid namespace that shares /dev/shm. */
#define STALE_SEC 10
static void sweepStale(void) {
  DIR* d = opendir("/dev/shm");
  if (d == NULL) return;
  struct dirent* e;
  time_t now = time(NULL);
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "zpp-", 4) != 0) continue;
    char name[ZPP_SHM_NAME_LEN + 2];
    if (snprintf(name, sizeof(name), "/%s", e->d_name) >= (int)sizeof(name)) continue;
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd < 0) continue; /* another user's, or gone */
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && now - st.st_mtime > STALE_SEC &&
        flock(fd, LOCK_EX | LOCK_NB) == 0) {
      ZPP_INFO(NET, "removing %s, left behind by a rank that died creating its communicator", name);
      shm_unlink(name);
    }
    close(fd);
  }
  closedir(d);
}

zppResult_t zppShmInboxCreate(zppShmInbox_t* box, int nRings, size_t maxPayload) {
  memset(box, 0, sizeof(*box));
  box->lockFd = -1;
  sweepStale();
  uint32_t slotBytes =
      (uint32_t)(ZPP_SHM_LINE + (maxPayload + ZPP_SHM_LINE - 1) / ZPP_SHM_LINE * ZPP_SHM_LINE);
  size_t perSlots = (size_t)nRings * slotBytes;
  size_t nSlots = INBOX_BUDGET_BYTES / (perSlots ? perSlots : 1);
  if (nSlots < MIN_SLOTS) nSlots = MIN_SLOTS;
  if (nSlots > MAX_SLOTS) nSlots = MAX_SLOTS;
  size_t bytes = inboxBytes((uint32_t)nRings, (uint32_t)nSlots, slotBytes);

  makeName(box->name);
  int fd = shm_open(box->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) RING_FAIL("shm_open(%s): %s", box->name, strerror(errno));
  box->owner = 1;
  (void)flock(fd, LOCK_EX | LOCK_NB); /* new and O_EXCL: nobody else holds it */
  /* posix_fallocate returns the error instead of setting errno. */
  int err = ftruncate(fd, (off_t)bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
  if (err != 0) {
    close(fd);
    shm_unlink(box->name);
    box->unlinked = 1;
    RING_FAIL(
        "reserving %zu bytes of shared memory for %s: %s "
        "(is /dev/shm full or small?)",
        bytes, box->name, strerror(err));
  }
  void* base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  err = errno;
  if (base == MAP_FAILED) {
    close(fd);
    shm_unlink(box->name);
    box->unlinked = 1;
    RING_FAIL("mmap of %s (%zu bytes): %s", box->name, bytes, strerror(err));
  }
  box->lockFd = fd; /* kept, with its lock, until the name is unlinked */
  box->base = base;
  box->bytes = bytes;
  box->nRings = (uint32_t)nRings;
  box->nSlots = (uint32_t)nSlots;
  box->slotBytes = slotBytes;
  box->maxPayload = (uint32_t)maxPayload;
  inboxHeader_t* h = base;
  h->magic = INBOX_MAGIC;
  h->version = INBOX_VERSION;
  h->bytes = bytes;
  h->nRings = box->nRings;
  h->nSlots = box->nSlots;
  h->slotBytes = slotBytes;
  h->maxPayload = box->maxPayload;
  return zppSuccess;
}

zppResult_t zppShmInboxOpen(zppShmInbox_t* box, const char* name) {
  memset(box, 0, sizeof(*box));
  box->lockFd = -1;
  snprintf(box->name, sizeof(box->name), "%s", name);
  int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) RING_FAIL("shm_open(%s): %s", name, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(inboxHeader_t)) {
    close(fd);
    RING_FAIL("shared memory %s is not an inbox (size %lld)", name, (long long)st.st_size);
  }
  size_t bytes = (size_t)st.st_size;
  void* base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) RING_FAIL("mmap of %s: %s", name, strerror(err));
  const inboxHeader_t* h = base;
  if (h->magic != INBOX_MAGIC || h->version != INBOX_VERSION || h->bytes != bytes || h->nRings == 0 ||
      h->nSlots == 0 || h->slotBytes < ZPP_SHM_LINE + h->maxPayload ||
      inboxBytes(h->nRings, h->nSlots, h->slotBytes) != bytes) {
    munmap(base, bytes);
    RING_FAIL("shared memory %s: not a zpp inbox of this version", name);
  }
  box->base = base;
  box->bytes = bytes;
  box->nRings = h->nRings;
  box->nSlots = h->nSlots;
  box->slotBytes = h->slotBytes;
  box->maxPayload = h->maxPayload;
  return zppSuccess;
}

void zppShmInboxUnlink(zppShmInbox_t* box) {
  if (!box->owner || box->unlinked || box->name[0] == '\0') return;
  if (shm_unlink(box->name) != 0 && errno != ENOENT)
    ZPP_WARN(NET, "shm_unlink(%s): %s", box->name, strerror(errno));
  box->unlinked = 1;
  if (box->lockFd > 0) close(box->lockFd);
  box->lockFd = -1;
}

void zppShmInboxClose(zppShmInbox_t* box) {
  zppShmInboxUnlink(box);
  if (box->base) munmap(box->base, box->bytes);
  box->base = NULL;
}

void zppShmRingAttach(zppShmRing_t* ring, const zppShmInbox_t* box, int index) {
  memset(ring, 0, sizeof(*ring));
  unsigned char* r = (unsigned char*)box->base + sizeof(inboxHeader_t) +
                     (size_t)index * ringBytes(box->nSlots, box->slotBytes);
  ring->head = (_Atomic uint64_t*)(void*)r;
  ring->slots = r + ZPP_SHM_LINE;
  ring->nSlots = box->nSlots;
  ring->slotBytes = box->slotBytes;
  ring->maxPayload = box->maxPayload;
}

int zppShmRingTryPush(zppShmRing_t* ring, uint64_t tag, const void* buf, size_t len) {
  if (ring->pos - ring->headSeen >= ring->nSlots) {
    ring->headSeen = atomic_load_explicit(ring->head, memory_order_acquire);
    if (ring->pos - ring->headSeen >= ring->nSlots) return 0;
  }
  unsigned char* slot = ring->slots + (size_t)(ring->pos % ring->nSlots) * ring->slotBytes;
  *(uint64_t*)(void*)(slot + 8) = tag;
  *(uint32_t*)(void*)(slot + 16) = (uint32_t)len;
  if (len) memcpy(slot + ZPP_SHM_LINE, buf, len);
  ring->pos++;
  atomic_store_explicit((_Atomic uint64_t*)(void*)slot, ring->pos, memory_order_release);
  return 1;
}

static int membarrier(int cmd) { return (int)syscall(SYS_membarrier, cmd, 0, 0); }

int zppShmAsymFenceRegister(void) {
  static _Atomic int registered = -1; /* per process; a race only registers twice */
  if (registered >= 0) return registered;
  int cmds = membarrier(MEMBARRIER_CMD_QUERY);
  registered = cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
               membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  return registered;
}

int zppShmInboxSetSleeping(const zppShmInbox_t* box, int sleeping, int asymFence) {
  inboxHeader_t* h = box->base;
  atomic_store_explicit(&h->sleeping, (uint32_t)sleeping, memory_order_relaxed);
  if (!sleeping) return 1;
  /* The flag's store before the caller's last look at its rings, and (Dekker)
   * each producer's message stores before its look at the flag: either the
   * producer sees the flag or the consumer sees the message. The fence here
   * alone is only enough against producers that fence themselves. */
  atomic_thread_fence(memory_order_seq_cst);
  return !asymFence || membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0;
}

int zppShmInboxTakeSleeper(const zppShmInbox_t* box, int fence) {
  inboxHeader_t* h = box->base;
  /* The message's seq store before the look at the flag: a fence, or only
   * the compiler's order when the consumer's membarrier fences for us. */
  if (fence)
    atomic_thread_fence(memory_order_seq_cst);
  else
    atomic_signal_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&h->sleeping, memory_order_relaxed) == 0) return 0;
  return atomic_exchange_explicit(&h->sleeping, 0, memory_order_relaxed) != 0;
}
