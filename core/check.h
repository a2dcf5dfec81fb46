/*
 * The one family of check macros. The function that detects an error logs it
 * once (ZPP_FAIL, SYSCHECK, ...); callers that only pass a failure up add a
 * "file:line -> code" trace at INFO level, so that ZPP_DEBUG=INFO shows the
 * whole unwinding path while the default level shows the cause alone.
 */
#ifndef ZPP_CHECK_H_
#define ZPP_CHECK_H_

#include <errno.h>
#include <string.h>

#include "zpp.h"
#include "log.h"

/* Logs the cause at ERROR level and returns code from the current function. */
#define ZPP_FAIL(code, subsys, ...) \
  do {                              \
    ZPP_ERR(subsys, __VA_ARGS__);   \
    return (code);                  \
  } while (0)

/* Same, but jumps to a cleanup label with res set. */
#define ZPP_FAILGOTO(code, res, label, subsys, ...) \
  do {                                              \
    ZPP_ERR(subsys, __VA_ARGS__);                   \
    (res) = (code);                                 \
    goto label;                                     \
  } while (0)

/* Propagates a failed zppResult_t, adding a trace line. */
#define ZPPCHECK(call)                                                     \
  do {                                                                     \
    zppResult_t zppCheckRes_ = (call);                                     \
    if (zppCheckRes_ != zppSuccess && zppCheckRes_ != zppInProgress) {     \
      ZPP_INFO(ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)zppCheckRes_); \
      return zppCheckRes_;                                                 \
    }                                                                      \
  } while (0)

/* As ZPPCHECK, and zppInProgress returns too: for checks whose
 * zppInProgress means "not ready, nothing done" (a communicator still being
 * created, lib/comm.c), not work under way. */
#define ZPPCHECK_READY(call)                                               \
  do {                                                                     \
    zppResult_t zppCheckRes_ = (call);                                     \
    if (zppCheckRes_ != zppSuccess) {                                      \
      ZPP_INFO(ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)zppCheckRes_); \
      return zppCheckRes_;                                                 \
    }                                                                      \
  } while (0)

#define ZPPCHECKGOTO(call, res, label)                              \
  do {                                                              \
    (res) = (call);                                                 \
    if ((res) != zppSuccess && (res) != zppInProgress) {            \
      ZPP_INFO(ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res)); \
      goto label;                                                   \
    }                                                               \
  } while (0)

/* A system call that returns -1 and sets errno. */
#define SYSCHECK(call, name)                                                   \
  do {                                                                         \
    if ((call) == -1) {                                                        \
      ZPP_FAIL(zppSystemError, ALL, "%s failed: %s", (name), strerror(errno)); \
    }                                                                          \
  } while (0)

#define SYSCHECKGOTO(call, name, res, label)                                                   \
  do {                                                                                         \
    if ((call) == -1) {                                                                        \
      ZPP_FAILGOTO(zppSystemError, res, label, ALL, "%s failed: %s", (name), strerror(errno)); \
    }                                                                                          \
  } while (0)

/* Argument validation: logs the reason and returns zppInvalidArgument. */
#define ZPP_ARGCHECK(cond, ...)                                  \
  do {                                                           \
    if (!(cond)) ZPP_FAIL(zppInvalidArgument, ALL, __VA_ARGS__); \
  } while (0)

/* Usage validation (calls in the wrong state or order). */
#define ZPP_USAGECHECK(cond, ...)                             \
  do {                                                        \
    if (!(cond)) ZPP_FAIL(zppInvalidUsage, ALL, __VA_ARGS__); \
  } while (0)

/* Allocation: logs the size that could not be had. */
#define ZPP_CALLOC(ptr, n)                                                \
  do {                                                                    \
    (ptr) = calloc((n), sizeof(*(ptr)));                                  \
    if ((ptr) == NULL && (n) != 0)                                        \
      ZPP_FAIL(zppSystemError, ALL, "out of memory allocating %zu bytes", \
               (size_t)(n) * sizeof(*(ptr)));                             \
  } while (0)

#define ZPP_CALLOCGOTO(ptr, n, res, label)                                                \
  do {                                                                                    \
    (ptr) = calloc((n), sizeof(*(ptr)));                                                  \
    if ((ptr) == NULL && (n) != 0)                                                        \
      ZPP_FAILGOTO(zppSystemError, res, label, ALL, "out of memory allocating %zu bytes", \
                   (size_t)(n) * sizeof(*(ptr)));                                         \
  } while (0)

#endif /* ZPP_CHECK_H_ */
