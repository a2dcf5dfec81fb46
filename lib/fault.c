/* Fault injection (ZPP_FAULT); see fault.h for the grammar and the meaning
 * of each fault. */
#include "fault.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "launcher_env.h"
#include "log.h"
#include "params.h"
#include "clock.h"

static const char* const kindNames[ZPP_FAULT_NUM_KINDS] = {"slow", "corrupt", "hang", "die"};

/* ---- parsing -------------------------------------------------------------- */

/* Bits per second, with the units of perf/emucluster/emucluster.sh so that a slow rank
 * and a slow link are written alike. Byte units are refused: "mbps" means
 * megabits to some and megabytes to tc. */
static int parseRate(const char* s, double* bps) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || errno != 0 || !(v > 0) || !isfinite(v)) return -1;
  static const struct {
    const char* unit;
    double mult;
  } units[] = {{"", 1},       {"bit", 1}, {"k", 1e3},    {"kbit", 1e3}, {"m", 1e6},
               {"mbit", 1e6}, {"g", 1e9}, {"gbit", 1e9}, {"t", 1e12},   {"tbit", 1e12}};
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    if (strcasecmp(end, units[i].unit) == 0) {
      *bps = v * units[i].mult;
      return 0;
    }
  }
  return -1;
}

static int parseDouble(const char* s, double* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno != 0 || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static int parseUnsigned(const char* s, uint64_t* out) {
  if (*s < '0' || *s > '9') return -1;
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end != '\0' || errno != 0) return -1;
  *out = (uint64_t)v;
  return 0;
}

/* One KIND[:OPT,...] of length len at text. */
static int parseSpec(const char* text, size_t len, zppFaultSpec_t* sp, char* err, size_t errLen) {
  char buf[256];
  if (len >= sizeof(buf)) {
    snprintf(err, errLen, "'%.*s...' is too long", 32, text);
    return -1;
  }
  memcpy(buf, text, len);
  buf[len] = '\0';
  char* opts = strchr(buf, ':');
  if (opts) *opts++ = '\0';
  memset(sp, 0, sizeof(*sp));
  sp->rank = -1;
  sp->prob = 1.0;
  sp->after = 1;
  int k = 0;
  while (k < ZPP_FAULT_NUM_KINDS && strcmp(buf, kindNames[k]) != 0) k++;
  if (k == ZPP_FAULT_NUM_KINDS) {
    snprintf(err, errLen, "unknown fault '%s' (slow, corrupt, hang or die)", buf);
    return -1;
  }
  sp->kind = (zppFaultKind_t)k;
  int haveRate = 0, haveDelay = 0;
  for (char *save = NULL, *opt = opts ? strtok_r(opts, ",", &save) : NULL; opt;
       opt = strtok_r(NULL, ",", &save)) {
    char* val = strchr(opt, '=');
    if (val == NULL) {
      snprintf(err, errLen, "%s: option '%s' needs a value (NAME=VALUE)", kindNames[k], opt);
      return -1;
    }
    *val++ = '\0';
    uint64_t u = 0;
    int bad = 0;
    if (strcmp(opt, "rank") == 0) {
      bad = parseUnsigned(val, &u) != 0 || u > 1u << 20;
      sp->rank = (int)u;
    } else if (strcmp(opt, "after") == 0) {
      bad = parseUnsigned(val, &u) != 0 || u < 1;
      sp->after = u;
    } else if (strcmp(opt, "seed") == 0) {
      bad = parseUnsigned(val, &sp->seed) != 0 || sp->seed == 0;
    } else if (strcmp(opt, "prob") == 0) {
      bad = parseDouble(val, &sp->prob) != 0 || !(sp->prob > 0 && sp->prob <= 1);
    } else if (strcmp(opt, "rate") == 0 && sp->kind == ZPP_FAULT_SLOW) {
      bad = parseRate(val, &sp->rateBps) != 0;
      haveRate = 1;
    } else if (strcmp(opt, "delay_us") == 0 && sp->kind == ZPP_FAULT_SLOW) {
      bad = parseDouble(val, &sp->delayUs) != 0 || sp->delayUs < 0;
      haveDelay = 1;
    } else {
      snprintf(err, errLen, "%s: unknown option '%s' (rank, after, prob, seed%s)", kindNames[k], opt,
               sp->kind == ZPP_FAULT_SLOW ? ", rate, delay_us" : "");
      return -1;
    }
    if (bad) {
      snprintf(err, errLen, "%s: bad value %s=%s", kindNames[k], opt, val);
      return -1;
    }
  }
  if (sp->kind == ZPP_FAULT_SLOW && !haveRate && !haveDelay) sp->rateBps = 100e6;
  return 0;
}

int zppFaultParse(const char* text, zppFaultSet_t* out, char* err, size_t errLen) {
  zppFaultSet_t set;
  memset(&set, 0, sizeof(set));
  const char* p = text ? text : "";
  while (*p) {
    const char* end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > 0) {
      if (set.n == ZPP_FAULT_MAX_SPECS) {
        snprintf(err, errLen, "more than %d faults", ZPP_FAULT_MAX_SPECS);
        return -1;
      }
      if (parseSpec(p, len, &set.spec[set.n], err, errLen) != 0) return -1;
      set.n++;
    }
    p = end ? end + 1 : p + len;
  }
  *out = set;
  return 0;
}

/* ---- state ---------------------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int enabled; /* read on every message */
static zppFaultSet_t faults;
static int launcherRank = -1;     /* RANK & co. (launcher_env.h), -1 when none is set */
static atomic_uint_fast64_t sent; /* messages this process has sent */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static double bucketFree; /* slow: when the token bucket is next free */
static uint32_t drawnSeq[ZPP_FAULT_NUM_KINDS];
static int drawnHit[ZPP_FAULT_NUM_KINDS], drawnAny[ZPP_FAULT_NUM_KINDS];
static uint64_t rng;
static atomic_int announced[ZPP_FAULT_NUM_KINDS];

static void readEnv(void) {
  const char* text = zppEnvGetString("ZPP_FAULT");
  if (text[0] == '\0') return;
  char err[200];
  if (zppFaultParse(text, &faults, err, sizeof(err)) != 0) {
    ZPP_ERR(ENV, "ZPP_FAULT='%s': %s; no fault is injected", text, err);
    return;
  }
  launcherRank = zppLauncherEnvRank();
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  rng = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < faults.n; i++)
    if (faults.spec[i].seed) rng = faults.spec[i].seed * 0x9e3779b97f4a7c15ull | 1;
  atomic_store(&enabled, faults.n > 0);
}

int zppFaultEnabled(void) {
  pthread_once(&once, readEnv);
  return atomic_load(&enabled);
}

static void sleepSec(double s) {
  if (!(s > 0)) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static const zppFaultSpec_t* match(zppFaultKind_t kind, int rank) {
  for (int i = 0; i < faults.n; i++) {
    const zppFaultSpec_t* s = &faults.spec[i];
    if (s->kind == kind && (s->rank < 0 || s->rank == rank)) return s;
  }
  return NULL;
}

/* prob < 1: one draw per collective (sequence number), so that a whole
 * collective is slow or not, as a node that is sometimes slow would be. */
static int drawn(const zppFaultSpec_t* s, uint32_t seq) {
  if (s->prob >= 1.0) return 1;
  pthread_mutex_lock(&lock);
  int k = (int)s->kind;
  if (!drawnAny[k] || drawnSeq[k] != seq) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    drawnHit[k] = (double)(rng >> 11) * 0x1.0p-53 < s->prob;
    drawnSeq[k] = seq;
    drawnAny[k] = 1;
  }
  int hit = drawnHit[k];
  pthread_mutex_unlock(&lock);
  return hit;
}

static void announce(zppFaultKind_t kind, int rank) {
  if (atomic_exchange(&announced[kind], 1)) return;
  ZPP_WARN(NET, "ZPP_FAULT: rank %d %s on purpose (fault injection)", rank,
           kind == ZPP_FAULT_SLOW      ? "sends slowly"
           : kind == ZPP_FAULT_CORRUPT ? "corrupts the data it sends"
           : kind == ZPP_FAULT_HANG    ? "hangs now"
                                       : "dies now");
}

/* A link of `rate` without burst: a message occupies it for bytes/rate
 * after the messages before it, and is handed on when it would have
 * arrived, so a rank never sends faster than `rate` however its messages
 * are spread over threads and communicators (the transport itself then
 * adds its own, much shorter, time). */
static void slowDown(const zppFaultSpec_t* s, size_t bytes) {
  double wait = s->delayUs * 1e-6;
  if (s->rateBps > 0) {
    pthread_mutex_lock(&lock);
    double now = zppClockNow();
    double start = bucketFree > now ? bucketFree : now;
    bucketFree = start + (double)bytes * 8.0 / s->rateBps;
    double until = bucketFree;
    pthread_mutex_unlock(&lock);
    wait += until - now;
  }
  sleepSec(wait);
}

void zppFaultOnSend(int commRank, const void* buf, size_t bytes, uint32_t seq) {
  pthread_once(&once, readEnv);
  if (!atomic_load_explicit(&enabled, memory_order_relaxed)) return;
  int rank = launcherRank >= 0 ? launcherRank : commRank;
  uint64_t nth = atomic_fetch_add(&sent, 1) + 1;
  const zppFaultSpec_t* s;

  if ((s = match(ZPP_FAULT_DIE, rank)) && nth >= s->after && drawn(s, seq)) {
    announce(ZPP_FAULT_DIE, rank);
    raise(SIGKILL);
  }
  if ((s = match(ZPP_FAULT_HANG, rank)) && nth >= s->after && drawn(s, seq)) {
    announce(ZPP_FAULT_HANG, rank);
    for (;;) sleepSec(1.0); /* never returns: the point of the fault */
  }
  if ((s = match(ZPP_FAULT_SLOW, rank)) && nth >= s->after && drawn(s, seq)) {
    announce(ZPP_FAULT_SLOW, rank);
    slowDown(s, bytes);
  }
  if ((s = match(ZPP_FAULT_CORRUPT, rank)) && nth >= s->after && bytes > 0 && drawn(s, seq)) {
    announce(ZPP_FAULT_CORRUPT, rank);
    /* The transport sends from the caller's memory (zero copy), so the bit
     * is flipped there: what the peer receives is what a bad sender makes. */
    ((unsigned char*)(uintptr_t)buf)[bytes / 2] ^= 0x10;
  }
}
