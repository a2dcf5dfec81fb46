/*
 * zppCommSplit: sub-communicators by (color, key), made over the parent's
 * bootstrap.
 *
 * Every parent rank all-gathers its (color, key); every rank then checks
 * every color (a bad one fails all ranks alike, naming it, instead of
 * leaving the others to wait). The lowest parent rank of each color opens a
 * rendezvous root for its group and its unique id travels to the group in a
 * second all-gather; each group then builds an ordinary communicator
 * (bootstrap, topology, transports) among its members, ranked by key and
 * then by parent rank. Members announce the parent's node identity, so the
 * new topology's nodes are the parent's. Groups are built at the same time
 * and independently: a failure in one group is that group's error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"
#include "lib/comm.h"
#include "lib/comm_internal.h"

typedef struct {
  int32_t color, key;
} splitEntry_t;

zppResult_t zppCommStateChildSettings(const struct zppComm* parent, const zppConfig_t* config,
                                      zppCommSettings_t* s) {
  if (config != NULL) {
    ZPPCHECK(zppCommStateResolveSettings(config, s));
    if (config->hostId == NULL) {
      snprintf(s->hostId, sizeof(s->hostId), "%s", parent->hostId);
      s->hostIdFrom = "parent";
    }
  } else {
    memset(s, 0, sizeof(*s));
    s->timeoutSec = parent->timeoutSec;
    s->timeoutFrom = "parent";
    snprintf(s->hostId, sizeof(s->hostId), "%s", parent->hostId);
    s->hostIdFrom = "parent";
    snprintf(s->name, sizeof(s->name), "%s", parent->name);
    s->compress = parent->compress;
    s->blocking = parent->blocking;
    s->blockingFrom = "parent";
  }
  s->announcedHostIds = 1;
  return zppSuccess;
}

zppResult_t zppCommStateSplit(struct zppComm* parent, int color, int key, const zppConfig_t* config,
                              zppComm_t* out) {
  zppResult_t res = zppSuccess;
  const int n = parent->nranks, me = parent->rank;
  splitEntry_t* all = NULL;
  zppUniqueId* ids = NULL;
  int* members = NULL;
  zppCommSettings_t s;
  /* Resolved before any exchange, but its error only counts after the
   * colors: every rank must take part in the exchanges either way. */
  zppResult_t settingsRes = zppCommStateChildSettings(parent, config, &s);
  ZPP_CALLOCGOTO(all, (size_t)n, res, out);
  ZPP_CALLOCGOTO(ids, (size_t)n, res, out);
  ZPP_CALLOCGOTO(members, (size_t)n, res, out);
  all[me].color = settingsRes == zppSuccess ? color : INT32_MIN; /* tells the others */
  all[me].key = key;
  ZPPCHECKGOTO(zppBootstrapAllGather(parent->bootstrap, all, sizeof(*all)), res, out);
  for (int r = 0; r < n; r++) {
    if (all[r].color == INT32_MIN)
      ZPP_FAILGOTO(r == me ? settingsRes : zppInvalidArgument, res, out, INIT,
                   "comm %s: zppCommSplit: rank %d %s", parent->name, r,
                   r == me ? "has bad settings (config)" : "failed on its config");
    if (all[r].color < 0 && all[r].color != ZPP_SPLIT_NOCOLOR)
      ZPP_FAILGOTO(zppInvalidArgument, res, out, INIT,
                   "comm %s: zppCommSplit: rank %d passed color %d: a color is >= 0, or "
                   "ZPP_SPLIT_NOCOLOR (-1)",
                   parent->name, r, (int)all[r].color);
  }
  /* This rank's group, in key order, ties by parent rank; its leader is
   * the lowest parent rank of the color. */
  int size = 0, leader = -1;
  if (color != ZPP_SPLIT_NOCOLOR) {
    for (int r = 0; r < n; r++)
      if (all[r].color == color) {
        if (leader < 0) leader = r;
        int at = size++;
        while (at > 0 && all[members[at - 1]].key > all[r].key) {
          members[at] = members[at - 1];
          at--;
        }
        members[at] = r;
      }
    if (leader == me &&
        zppBootstrapCreateRoot(&ids[me], NULL, 0, size, NULL, 0, s.timeoutSec) != zppSuccess)
      memset(&ids[me], 0, sizeof(ids[me])); /* logged; the group hears of it below */
  }
  /* Every rank takes part, NOCOLOR ones and leaders that failed included:
   * an id of zeros tells the group its root could not open. */
  ZPPCHECKGOTO(zppBootstrapAllGather(parent->bootstrap, ids, sizeof(*ids)), res, out);
  if (color == ZPP_SPLIT_NOCOLOR) {
    *out = NULL;
    goto out;
  }
  static const zppUniqueId zeroId;
  if (memcmp(&ids[leader], &zeroId, sizeof(zeroId)) == 0)
    ZPP_FAILGOTO(zppSystemError, res, out, INIT,
                 "comm %s: zppCommSplit: rank %d could not open the root of color %d", parent->name,
                 leader, color);
  int newRank = 0;
  while (members[newRank] != me) newRank++;
  ZPP_INFO(INIT, "comm %s rank %d: split color %d key %d: rank %d of %d", parent->name, me, color, key,
           newRank, size);
  res = zppCommStateInitWithSettings(out, size, &ids[leader], newRank, &s);
out:
  free(all);
  free(ids);
  free(members);
  return res;
}
