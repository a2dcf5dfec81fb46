/* zpp-perf's bandwidth arithmetic; see perf_math.h for the conventions. */
#include "perf_math.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int zppPerfCounts(zppPerfColl_t coll, size_t sizeBytes, size_t typeSize, int nranks,
                  zppPerfCounts_t* out) {
  if (typeSize == 0 || nranks < 1 || out == NULL) return -1;
  size_t n = (size_t)nranks;
  memset(out, 0, sizeof *out);
  switch (coll) {
    case ZPP_PERF_ALLGATHER:
    case ZPP_PERF_REDUCESCATTER:
    case ZPP_PERF_ALLTOALL:
    case ZPP_PERF_GATHER:
    case ZPP_PERF_SCATTER:
    case ZPP_PERF_ALLTOALLV: {
      /* The size names the whole buffer of n blocks, so each rank's block is
       * a whole number of elements: round the total down to n blocks. */
      size_t c = sizeBytes / typeSize / n;
      out->apiCount = c;
      out->totalCount = c * n;
      out->bytes = c * n * typeSize;
      out->sendCount = coll == ZPP_PERF_ALLGATHER || coll == ZPP_PERF_GATHER ? c : c * n;
      out->recvCount = coll == ZPP_PERF_REDUCESCATTER || coll == ZPP_PERF_SCATTER ? c : c * n;
      return 0;
    }
    case ZPP_PERF_ALLREDUCE:
    case ZPP_PERF_BROADCAST:
    case ZPP_PERF_SENDRECV:
    case ZPP_PERF_REDUCE: {
      size_t c = sizeBytes / typeSize;
      out->apiCount = c;
      out->totalCount = c;
      out->bytes = c * typeSize;
      out->sendCount = c;
      out->recvCount = c;
      return 0;
    }
    default: return -1;
  }
}

double zppPerfBusFactor(zppPerfColl_t coll, int nranks) {
  if (nranks < 1) return 0.0;
  double n = (double)nranks;
  switch (coll) {
    case ZPP_PERF_ALLGATHER:
    case ZPP_PERF_REDUCESCATTER:
    case ZPP_PERF_ALLTOALL:
    case ZPP_PERF_GATHER:
    case ZPP_PERF_SCATTER:
    case ZPP_PERF_ALLTOALLV: return (n - 1.0) / n;
    case ZPP_PERF_ALLREDUCE: return 2.0 * (n - 1.0) / n;
    case ZPP_PERF_BROADCAST:
    case ZPP_PERF_SENDRECV:
    case ZPP_PERF_REDUCE: return 1.0;
    default: return 0.0;
  }
}

double zppPerfAlgBw(size_t bytes, double seconds) {
  if (!(seconds > 0.0)) return 0.0;
  return (double)bytes / 1.0e9 / seconds;
}

double zppPerfBusBw(zppPerfColl_t coll, int nranks, size_t bytes, double seconds) {
  return zppPerfAlgBw(bytes, seconds) * zppPerfBusFactor(coll, nranks);
}

long zppPerfSizeSeq(size_t minBytes, size_t maxBytes, size_t stepBytes, double stepFactor, size_t* out,
                    long cap) {
  if (minBytes == 0 || minBytes > maxBytes) return -1;
  int multiply = stepFactor > 1.0;
  if (!multiply && stepBytes == 0) return -1;
  long n = 0;
  size_t s = minBytes;
  for (;;) {
    if (out != NULL && n < cap) out[n] = s;
    n++;
    size_t next;
    if (multiply) {
      double d = (double)s * stepFactor;
      /* A factor close to 1 may not move a small size: step at least 1 byte
       * so that the sequence always ends. */
      if (d >= (double)SIZE_MAX) break;
      next = (size_t)d;
      if (next <= s) next = s + 1;
    } else {
      if (s > SIZE_MAX - stepBytes) break;
      next = s + stepBytes;
    }
    if (next > maxBytes) break;
    s = next;
  }
  return n;
}

int zppPerfParseSize(const char* text, size_t* bytes) {
  if (text == NULL || bytes == NULL) return -1;
  const char* p = text;
  while (isspace((unsigned char)*p)) p++;
  /* strtoull accepts "-1" and wraps it: refuse signs ourselves. */
  if (!isdigit((unsigned char)*p)) return -1;
  errno = 0;
  char* end = NULL;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno != 0 || end == p) return -1;
  unsigned long long mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K':
      mult = 1ull << 10;
      end++;
      break;
    case 'M':
      mult = 1ull << 20;
      end++;
      break;
    case 'G':
      mult = 1ull << 30;
      end++;
      break;
    case 'T':
      mult = 1ull << 40;
      end++;
      break;
    default: break;
  }
  if (mult > 1 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return -1;
  if (v > (unsigned long long)SIZE_MAX / mult) return -1;
  *bytes = (size_t)(v * mult);
  return 0;
}

static int zppPerfCmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

double zppPerfMedian(double* v, size_t n) {
  if (n == 0) return 0.0;
  qsort(v, n, sizeof *v, zppPerfCmpDouble);
  if (n % 2 == 1) return v[n / 2];
  return 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double zppPerfMean(const double* v, size_t n) {
  if (n == 0) return 0.0;
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += v[i];
  return s / (double)n;
}

void zppPerfFormatSize(size_t bytes, char* buf, size_t len) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = (double)bytes;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0 || v != (double)(long long)v)
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  else
    snprintf(buf, len, "%.0f %s", v, units[u]);
}
