/* The example trainer's data: see train_data.h. */
#include "train_data.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

static void tdErr(char* err, size_t len, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

int tdLoad(const char* path, size_t minTokens, tdCorpus_t* c, char* err, size_t errlen) {
  memset(c, 0, sizeof *c);
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    tdErr(err, errlen, "cannot open the corpus %s: %s", path, strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  unsigned char* buf = malloc(cap);
  while (buf != NULL) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    unsigned char* grown = realloc(buf, cap * 2);
    if (grown == NULL) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = grown;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (buf == NULL || bad) {
    free(buf);
    tdErr(err, errlen, "cannot read the corpus %s%s", path, bad ? "" : ": out of memory");
    return -1;
  }
  size_t ntrain = n / 10 * 9;
  if (n - ntrain < minTokens || ntrain < minTokens) {
    free(buf);
    tdErr(err, errlen,
          "the corpus %s has %zu bytes: too short for a context of this size "
          "(each of its 90%% / 10%% parts needs at least %zu)",
          path, n, minTokens);
    return -1;
  }
  int seen[256] = {0};
  for (size_t i = 0; i < n; i++) seen[buf[i]] = 1;
  for (int b = 0; b < 256; b++) {
    c->id[b] = seen[b] ? c->vocab : -1;
    if (seen[b]) c->chars[c->vocab++] = (unsigned char)b;
  }
  c->tokens = malloc(n * sizeof(int));
  if (c->tokens == NULL) {
    free(buf);
    tdErr(err, errlen, "out of memory for the corpus");
    return -1;
  }
  for (size_t i = 0; i < n; i++) c->tokens[i] = c->id[buf[i]];
  free(buf);
  c->n = n;
  c->ntrain = ntrain;
  return 0;
}

void tdFree(tdCorpus_t* c) {
  free(c->tokens);
  memset(c, 0, sizeof *c);
}

static void tdWindow(const tdCorpus_t* c, int context, size_t pos, int* ctx, int* tgt) {
  for (int k = 0; k < context; k++) ctx[k] = c->tokens[pos + (size_t)k];
  *tgt = c->tokens[pos + (size_t)context];
}

void tdTrainBatch(const tdCorpus_t* c, int context, uint64_t seed, long step, int first, int count,
                  int* ctx, int* tgt) {
  /* A fresh generator per step: a batch depends on (seed, step) only. The
   * global batch is drawn in order and this rank keeps its slice. */
  uint64_t st = seed ^ ((uint64_t)step * 0xd1b54a32d192ed03ull) ^ 0x5851f42d4c957f2dull;
  size_t span = c->ntrain - (size_t)context;
  for (int i = 0; i < first + count; i++) {
    size_t pos = (size_t)(mlpRand64(&st) % span);
    if (i >= first) tdWindow(c, context, pos, ctx + (size_t)(i - first) * context, tgt + (i - first));
  }
}

void tdEvalBatch(const tdCorpus_t* c, int context, int total, int first, int count, int* ctx,
                 int* tgt) {
  size_t span = c->n - c->ntrain - (size_t)context;
  for (int i = 0; i < count; i++) {
    size_t w = (size_t)(first + i);
    size_t pos = c->ntrain + (total > 1 ? w * (span - 1) / (size_t)(total - 1) : 0);
    tdWindow(c, context, pos, ctx + (size_t)i * context, tgt + i);
  }
}
