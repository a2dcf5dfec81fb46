#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "params.h"
#include "clock.h"

static pthread_once_t logOnce = PTHREAD_ONCE_INIT;
static zppLogLevel_t logLevel = ZPP_LOG_WARN;
static int logLevelForced = 0;
static unsigned logSubsysMask = ZPP_SUBSYS_ALL;
static FILE* logFile = NULL;
/* Set by the communicator's thread while a bootstrap root thread logs. */
static _Atomic int logRank = -1;
static char logHost[64] = "?";
static double logEpoch;
static pthread_mutex_t logWriteLock = PTHREAD_MUTEX_INITIALIZER;

static const struct {
  const char* name;
  zppLogSubsys_t bit;
} subsysNames[] = {
    {"INIT", ZPP_SUBSYS_INIT}, {"QUANT", ZPP_SUBSYS_QUANT}, {"BOOT", ZPP_SUBSYS_BOOT},
    {"TOPO", ZPP_SUBSYS_TOPO}, {"NET", ZPP_SUBSYS_NET},     {"COLL", ZPP_SUBSYS_COLL},
    {"CUDA", ZPP_SUBSYS_CUDA}, {"ENV", ZPP_SUBSYS_ENV},     {"PERF", ZPP_SUBSYS_PERF},
};

static const char* levelNames[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

static const char* subsysName(zppLogSubsys_t subsys) {
  for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++)
    if (subsysNames[i].bit == subsys) return subsysNames[i].name;
  return "ALL";
}

static unsigned parseSubsys(const char* spec) {
  /* "^A,B" means everything except A and B. */
  int invert = spec[0] == '^';
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", spec + invert);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (strcasecmp(tok, "ALL") == 0) mask = ZPP_SUBSYS_ALL;
    for (size_t i = 0; i < sizeof(subsysNames) / sizeof(subsysNames[0]); i++)
      if (strcasecmp(tok, subsysNames[i].name) == 0) mask |= subsysNames[i].bit;
  }
  return invert ? ~mask : mask;
}

static void openLogFile(const char* pattern) {
  char path[512];
  size_t o = 0;
  for (const char* p = pattern; *p && o + 32 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') {
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%s", logHost);
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)getpid());
      p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  logFile = fopen(path, "a");
  if (logFile == NULL) {
    fprintf(stderr, "zpp: cannot open ZPP_DEBUG_FILE '%s', logging to stderr\n", path);
  } else {
    setvbuf(logFile, NULL, _IOLBF, 0);
  }
}

static void logInit(void) {
  logEpoch = zppClockNow();
  if (gethostname(logHost, sizeof(logHost)) != 0) snprintf(logHost, sizeof(logHost), "?");
  logHost[sizeof(logHost) - 1] = '\0';
  char* dot = strchr(logHost, '.');
  if (dot) *dot = '\0';

  const char* level = zppEnvGetString("ZPP_DEBUG");
  if (!logLevelForced && level && level[0]) {
    int found = 0;
    for (int i = 0; i <= ZPP_LOG_TRACE; i++) {
      if (strcasecmp(level, levelNames[i]) == 0) {
        logLevel = (zppLogLevel_t)i;
        found = 1;
      }
    }
    if (!found) {
      char* end = NULL;
      long v = strtol(level, &end, 10);
      if (end != level && *end == '\0' && v >= 0 && v <= ZPP_LOG_TRACE) {
        logLevel = (zppLogLevel_t)v;
      } else {
        fprintf(stderr,
                "zpp: ZPP_DEBUG='%s' is not one of NONE ERROR WARN INFO DEBUG TRACE; using WARN\n",
                level);
      }
    }
  }
  const char* subsys = zppEnvGetString("ZPP_DEBUG_SUBSYS");
  if (subsys && subsys[0]) logSubsysMask = parseSubsys(subsys);
  const char* file = zppEnvGetString("ZPP_DEBUG_FILE");
  if (file && file[0]) openLogFile(file);
}

zppLogLevel_t zppLogLevel(void) {
  pthread_once(&logOnce, logInit);
  return logLevel;
}

int zppLogEnabled(zppLogLevel_t level, zppLogSubsys_t subsys) {
  pthread_once(&logOnce, logInit);
  return level <= logLevel && (subsys & logSubsysMask) != 0;
}

void zppLogSetRank(int rank) { atomic_store_explicit(&logRank, rank, memory_order_relaxed); }
int zppLogGetRank(void) { return atomic_load_explicit(&logRank, memory_order_relaxed); }

void zppLogSetLevel(zppLogLevel_t level) {
  pthread_once(&logOnce, logInit);
  logLevel = level;
  logLevelForced = 1;
}

static _Thread_local char lastError[512];

const char* zppLogLastError(void) { return lastError; }

void zppLogWrite(zppLogLevel_t level, zppLogSubsys_t subsys, const char* file, int line,
                 const char* fmt, ...) {
  pthread_once(&logOnce, logInit);
  if (level == ZPP_LOG_ERROR) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(lastError, sizeof(lastError), fmt, ap);
    va_end(ap);
    if (!zppLogEnabled(level, subsys)) return;
  }
  double t = zppClockNow() - logEpoch;
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;

  char msg[1024];
  int n;
  int rank = atomic_load_explicit(&logRank, memory_order_relaxed);
  if (rank >= 0) {
    n = snprintf(msg, sizeof(msg), "%s:%d:%ld [%d] %.6f ZPP %s %s %s:%d ", logHost, (int)getpid(),
                 (long)syscall(SYS_gettid), rank, t, levelNames[level], subsysName(subsys), base, line);
  } else {
    n = snprintf(msg, sizeof(msg), "%s:%d:%ld %.6f ZPP %s %s %s:%d ", logHost, (int)getpid(),
                 (long)syscall(SYS_gettid), t, levelNames[level], subsysName(subsys), base, line);
  }
  if (n < 0) return;
  if ((size_t)n < sizeof(msg)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
  }
  FILE* out = logFile ? logFile : stderr;
  pthread_mutex_lock(&logWriteLock);
  fprintf(out, "%s\n", msg);
  fflush(out);
  pthread_mutex_unlock(&logWriteLock);
}
