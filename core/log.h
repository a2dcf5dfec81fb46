/*
 * Leveled logging. ZPP_DEBUG picks the level (NONE, ERROR, WARN, INFO, DEBUG,
 * TRACE; default WARN), ZPP_DEBUG_SUBSYS a comma list of subsystems (ALL by
 * default; a leading ^ excludes), ZPP_DEBUG_FILE a file instead of stderr
 * (%h is replaced by the host name, %p by the pid).
 * Every line carries host, pid and rank so that logs of many ranks can be
 * merged and still be read.
 */
#ifndef ZPP_LOG_H_
#define ZPP_LOG_H_

#include <stdarg.h>

typedef enum {
  ZPP_LOG_NONE = 0,
  ZPP_LOG_ERROR = 1,
  ZPP_LOG_WARN = 2,
  ZPP_LOG_INFO = 3,
  ZPP_LOG_DEBUG = 4,
  ZPP_LOG_TRACE = 5
} zppLogLevel_t;

typedef enum {
  ZPP_SUBSYS_INIT = 1u << 0,
  ZPP_SUBSYS_QUANT = 1u << 1,
  ZPP_SUBSYS_BOOT = 1u << 2,
  ZPP_SUBSYS_TOPO = 1u << 3,
  ZPP_SUBSYS_NET = 1u << 4,
  ZPP_SUBSYS_COLL = 1u << 5,
  ZPP_SUBSYS_CUDA = 1u << 6,
  ZPP_SUBSYS_ENV = 1u << 7,
  ZPP_SUBSYS_PERF = 1u << 8,
  ZPP_SUBSYS_ALL = ~0u
} zppLogSubsys_t;

/* Current level; reads the environment on first use. */
zppLogLevel_t zppLogLevel(void);
int zppLogEnabled(zppLogLevel_t level, zppLogSubsys_t subsys);
/* The rank printed on every line (-1, the default, prints no rank). */
void zppLogSetRank(int rank);
/* The rank log lines show (-1 before any communicator). */
int zppLogGetRank(void);
/* Forces the level (tools' -v flags, tests); overrides ZPP_DEBUG. */
void zppLogSetLevel(zppLogLevel_t level);

/* The last ERROR message logged by the calling thread (kept even when the
 * log level hides it), "" if none: what zppGetLastError(NULL) returns. */
const char* zppLogLastError(void);

void zppLogWrite(zppLogLevel_t level, zppLogSubsys_t subsys, const char* file, int line,
                 const char* fmt, ...) __attribute__((format(printf, 5, 6)));

/* Errors always reach zppLogWrite, even when the level hides them, so that
 * zppLogLastError() has the reason behind a failed call. */
#define ZPP_LOG_(level, subsys, ...)                                   \
  do {                                                                 \
    if ((level) == ZPP_LOG_ERROR || zppLogEnabled((level), (subsys)))  \
      zppLogWrite((level), (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define ZPP_ERR(subsys, ...) ZPP_LOG_(ZPP_LOG_ERROR, ZPP_SUBSYS_##subsys, __VA_ARGS__)
#define ZPP_WARN(subsys, ...) ZPP_LOG_(ZPP_LOG_WARN, ZPP_SUBSYS_##subsys, __VA_ARGS__)
#define ZPP_INFO(subsys, ...) ZPP_LOG_(ZPP_LOG_INFO, ZPP_SUBSYS_##subsys, __VA_ARGS__)
#define ZPP_DBG(subsys, ...) ZPP_LOG_(ZPP_LOG_DEBUG, ZPP_SUBSYS_##subsys, __VA_ARGS__)
#define ZPP_TRACE(subsys, ...) ZPP_LOG_(ZPP_LOG_TRACE, ZPP_SUBSYS_##subsys, __VA_ARGS__)

#endif /* ZPP_LOG_H_ */
