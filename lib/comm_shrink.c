/*
 * zppCommShrink: a communicator of the survivors, made by the survivors
 * alone.
 *
 * The parent's bootstrap ring cannot help: it runs through the excluded
 * ranks, which may be dead, hung, or still calling. Instead the survivors
 * meet at the parent's standby root (lib/bootstrap/bootstrap.h): the lowest
 * survivor opens a root on the listening socket it kept from the parent's
 * init, whose address every rank knows, and the others join it with the
 * parent's secret folded with the exclude list. A survivor whose list differs
 * presents another secret and is refused, and the meeting then fails on
 * every member (no second group can form: there is one root, and it takes
 * exactly the agreed number of members). The new communicator is then
 * built as any other (bootstrap, topology from the members' node
 * identities, transports), survivors ranked in their parent order.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"
#include "lib/comm.h"
#include "lib/comm_internal.h"

/* The exclude list as the salt of the meeting: sorted, little-endian 32-bit
 * ranks, after the parent's size (so that lists from two parents differ). */
static void shrinkSalt(int nranks, const unsigned char* excluded, unsigned char* salt, size_t* len) {
  size_t n = 0;
  for (int b = 0; b < 4; b++) salt[n++] = (unsigned char)((uint32_t)nranks >> (8 * b));
  for (int r = 0; r < nranks; r++)
    if (excluded[r])
      for (int b = 0; b < 4; b++) salt[n++] = (unsigned char)((uint32_t)r >> (8 * b));
  *len = n;
}

zppResult_t zppCommStateShrink(struct zppComm* parent, const int* exclude, int nExclude,
                               const zppConfig_t* config, int flags, zppComm_t* out) {
  zppResult_t res = zppSuccess;
  const int n = parent->nranks, me = parent->rank;
  unsigned char* excluded = NULL;
  unsigned char* salt = NULL;
  ZPP_ARGCHECK(flags == ZPP_SHRINK_DEFAULT || flags == ZPP_SHRINK_ABORT,
               "zppCommShrink: flags %d (ZPP_SHRINK_DEFAULT or ZPP_SHRINK_ABORT)", flags);
  ZPP_ARGCHECK(nExclude >= 0 && (nExclude == 0 || exclude != NULL),
               "zppCommShrink: %d ranks to exclude from a NULL list", nExclude);
  ZPP_CALLOC(excluded, (size_t)n);
  for (int i = 0; i < nExclude; i++) {
    int r = exclude[i];
    if (r < 0 || r >= n)
      ZPP_FAILGOTO(zppInvalidArgument, res, out, INIT,
                   "comm %s: zppCommShrink: excluded rank %d is not a rank of this %d-rank "
                   "communicator",
                   parent->name, r, n);
    if (excluded[r])
      ZPP_FAILGOTO(zppInvalidArgument, res, out, INIT,
                   "comm %s: zppCommShrink: rank %d is in the exclude list twice", parent->name, r);
    excluded[r] = 1;
  }
  if (nExclude >= n)
    ZPP_FAILGOTO(zppInvalidArgument, res, out, INIT,
                 "comm %s: zppCommShrink: the exclude list names all %d ranks: nobody is left",
                 parent->name, n);
  if (excluded[me])
    ZPP_FAILGOTO(zppInvalidUsage, res, out, INIT,
                 "comm %s: zppCommShrink: rank %d is in its own exclude list: only the survivors "
                 "call zppCommShrink",
                 parent->name, me);
  zppCommSettings_t s;
  ZPPCHECKGOTO(zppCommStateChildSettings(parent, config, &s), res, out);
  if (flags == ZPP_SHRINK_ABORT) zppCommStateStop(parent, "revoked by zppCommShrink(ZPP_SHRINK_ABORT)");

  int leader = -1, newRank = 0, size = 0;
  for (int r = 0; r < n; r++) {
    if (excluded[r]) continue;
    if (leader < 0) leader = r;
    if (r == me) newRank = size;
    size++;
  }
  size_t saltLen = 0;
  ZPP_CALLOCGOTO(salt, 4 + 4 * (size_t)n, res, out);
  shrinkSalt(n, excluded, salt, &saltLen);
  /* Survivors learn of a failure at different times: one at once (its peer's
   * connection broke), another only at its own timeout (it waited on a peer
   * that is alive but will not send). So the meeting waits twice the
   * timeout from its first member on, and every survivor that calls shrink
   * after a failed call still finds it open. */
  s.meetSec = 2 * s.timeoutSec;
  zppUniqueId id;
  if (me == leader)
    ZPPCHECKGOTO(zppBootstrapStandbyRoot(parent->bootstrap, salt, saltLen, size, s.meetSec, &id), res,
                 out);
  else
    ZPPCHECKGOTO(zppBootstrapStandbyId(parent->bootstrap, leader, salt, saltLen, &id), res, out);
  ZPP_INFO(INIT, "comm %s rank %d: shrink without %d rank(s): rank %d of %d, meeting at rank %d",
           parent->name, me, nExclude, newRank, size, leader);
  res = zppCommStateInitWithSettings(out, size, &id, newRank, &s);
  if (res != zppSuccess && res != zppInProgress) {
    char why[512];
    snprintf(why, sizeof(why), "%s", zppLogLastError()); /* the log rewrites it below */
    ZPP_ERR(INIT,
            "comm %s rank %d: zppCommShrink failed: %s (every survivor must call it, with the same "
            "exclude list)",
            parent->name, me, why);
  }
out:
  free(excluded);
  free(salt);
  return res;
}
