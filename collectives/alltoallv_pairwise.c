/* All-to-all-v: uneven parts, pairwise exchange (alltoall_pairwise.c's
 * steps, n-1 of them, each rank sending and receiving its parts once).
 *
 * Before any data moves, every pair compares counts: each rank sends each
 * peer what it will send it and what it expects from it (two words, all
 * peers at once), so both ranks of a pair that disagree see it. A
 * dissemination round (zppCollAgree) then spreads the first bad pair to
 * every rank, and all of them fail with the same message: ranks outside the
 * bad pair would otherwise wait for data that never comes. Cost: one
 * all-pairs round of 16-byte messages and ceil(log2 n) rounds of 32 bytes,
 * which is the price of never moving data on counts that do not match. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"

#include "check.h"
#include "lib/comm.h"

/* The first bad pair, by (sender, receiver): min is idempotent, so the
 * dissemination folds it correctly. sender UINT64_MAX: none. */
typedef struct {
  uint64_t sender, receiver, sent, expected;
} badPair_t;

static void mergeBad(void* word, const void* theirs) {
  badPair_t* a = word;
  badPair_t b;
  memcpy(&b, theirs, sizeof(b));
  if (b.sender < a->sender || (b.sender == a->sender && b.receiver < a->receiver)) *a = b;
}

static void noteBad(badPair_t* bad, int sender, int receiver, size_t sent, size_t expected) {
  badPair_t b = {(uint64_t)sender, (uint64_t)receiver, sent, expected};
  mergeBad(bad, &b);
}

static zppResult_t compareCounts(zppCollCtx_t* c, const zppCollLayout_t* send,
                                 const zppCollLayout_t* recv, badPair_t* bad) {
  const int n = c->nranks, r = c->rank;
  zppResult_t res = zppSuccess;
  uint64_t* words = calloc(4 * (size_t)n, sizeof(*words)); /* [2p]: mine to p, [2n + 2p]: p's */
  zppP2pReq_t** reqs = calloc(2 * (size_t)n, sizeof(*reqs));
  if (words == NULL || reqs == NULL)
    ZPP_FAILGOTO(zppSystemError, res, out, COLL, "out of memory for all-to-all-v counts");
  zppMsgId_t id = zppCollMsg(c, 254);
  for (int i = 1; i < n; i++) {
    int p = (r + i) % n;
    words[2 * p] = zppCollPartBytes(send, p);
    words[2 * p + 1] = zppCollPartBytes(recv, p);
    ZPPCHECKGOTO(zppP2pIsend(c->p2p, p, &words[2 * p], 2 * sizeof(uint64_t), &id, &reqs[2 * p + 1]),
                 res, out);
  }
  for (int i = 1; i < n; i++) {
    int p = (r - i + n) % n;
    ZPPCHECKGOTO(zppP2pIrecv(c->p2p, p, &words[2 * n + 2 * p], 2 * sizeof(uint64_t), &id, &reqs[2 * p]),
                 res, out);
  }
  ZPPCHECKGOTO(zppP2pWaitAll(c->p2p, reqs, 2 * n), res, out);
  if (zppCollPartBytes(send, r) != zppCollPartBytes(recv, r))
    noteBad(bad, r, r, zppCollPartBytes(send, r), zppCollPartBytes(recv, r));
  for (int p = 0; p < n; p++) {
    if (p == r) continue;
    uint64_t theirSend = words[2 * n + 2 * p], theirExpect = words[2 * n + 2 * p + 1];
    if (theirExpect != zppCollPartBytes(send, p))
      noteBad(bad, r, p, zppCollPartBytes(send, p), theirExpect);
    if (theirSend != zppCollPartBytes(recv, p))
      noteBad(bad, p, r, theirSend, zppCollPartBytes(recv, p));
  }
out:
  zppCollStepFailed(c, res); /* before words goes */
  free(words);
  free(reqs);
  return res;
}

zppResult_t zppCollAllToAllvCheck(zppCollCtx_t* c, const zppCollLayout_t* send,
                                  const zppCollLayout_t* recv, size_t elemBytes, int* agreed) {
  *agreed = 0;
  badPair_t bad = {UINT64_MAX, UINT64_MAX, 0, 0};
  ZPPCHECK(compareCounts(c, send, recv, &bad));
  ZPPCHECK(zppCollAgree(c, &bad, sizeof(bad), mergeBad));
  if (bad.sender != UINT64_MAX) {
    *agreed = 1;
    ZPP_FAIL(zppInvalidUsage, COLL,
             "%s: rank %d: zppAllToAllv: rank %d sends %llu elements to rank %d, which expects %llu "
             "(sendcounts[%d] on rank %d, recvcounts[%d] on rank %d differ); no data moved",
             c->comm->name, c->rank, (int)bad.sender, (unsigned long long)(bad.sent / elemBytes),
             (int)bad.receiver, (unsigned long long)(bad.expected / elemBytes), (int)bad.receiver,
             (int)bad.sender, (int)bad.sender, (int)bad.receiver);
  }
  return zppSuccess;
}

zppResult_t zppCollAllToAllvPairwise(zppCollCtx_t* c, const void* in, const zppCollLayout_t* send,
                                     void* out, const zppCollLayout_t* recv, size_t elemBytes,
                                     int* agreed) {
  ZPPCHECK(zppCollAllToAllvCheck(c, send, recv, elemBytes, agreed));
  return zppCollPairwiseExchange(c, in, send, out, recv);
}
