#include "topology/topo.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

zppResult_t zppTopoCreate(int nranks, const char* const* hostIds, zppTopo_t** out) {
  zppResult_t res = zppSuccess;
  ZPP_ARGCHECK(out != NULL, "topology: output is NULL");
  ZPP_ARGCHECK(nranks >= 1, "topology: nranks=%d must be at least 1", nranks);
  ZPP_ARGCHECK(hostIds != NULL, "topology: host ids are NULL");
  for (int r = 0; r < nranks; r++)
    ZPP_ARGCHECK(hostIds[r] != NULL && hostIds[r][0] != '\0', "topology: rank %d has no host id", r);

  zppTopo_t* t = NULL;
  int* firstRankOfNode = NULL;
  ZPP_CALLOC(t, 1);
  t->nranks = nranks;
  ZPP_CALLOCGOTO(t->nodeOf, nranks, res, err_free);
  ZPP_CALLOCGOTO(t->localRankOf, nranks, res, err_free);
  ZPP_CALLOCGOTO(firstRankOfNode, nranks, res, err_free);
  /* Nodes in order of their lowest rank: scanning ranks in order, a host id
   * not seen before opens the next node. Quadratic in the node count only. */
  for (int r = 0; r < nranks; r++) {
    int node = -1;
    for (int n = 0; n < t->nNodes && node < 0; n++)
      if (strcmp(hostIds[firstRankOfNode[n]], hostIds[r]) == 0) node = n;
    if (node < 0) {
      node = t->nNodes++;
      firstRankOfNode[node] = r;
    }
    t->nodeOf[r] = node;
  }
  ZPP_CALLOCGOTO(t->nodeSize, t->nNodes, res, err_free);
  ZPP_CALLOCGOTO(t->nodeRanks, t->nNodes, res, err_free);
  for (int r = 0; r < nranks; r++) t->localRankOf[r] = t->nodeSize[t->nodeOf[r]]++;
  for (int n = 0; n < t->nNodes; n++) {
    ZPP_CALLOCGOTO(t->nodeRanks[n], t->nodeSize[n], res, err_free);
  }
  for (int r = 0; r < nranks; r++) t->nodeRanks[t->nodeOf[r]][t->localRankOf[r]] = r;
  t->uniform = 1;
  for (int n = 1; n < t->nNodes; n++)
    if (t->nodeSize[n] != t->nodeSize[0]) t->uniform = 0;
  free(firstRankOfNode);
  *out = t;
  return zppSuccess;
err_free:
  free(firstRankOfNode);
  zppTopoDestroy(t);
  return res;
}

void zppTopoDestroy(zppTopo_t* topo) {
  if (topo == NULL) return;
  if (topo->nodeRanks)
    for (int n = 0; n < topo->nNodes; n++) free(topo->nodeRanks[n]);
  free(topo->nodeRanks);
  free(topo->nodeSize);
  free(topo->localRankOf);
  free(topo->nodeOf);
  free(topo);
}

const int* zppTopoIntraGroup(const zppTopo_t* topo, int rank, int* n) {
  if (topo == NULL || rank < 0 || rank >= topo->nranks) {
    if (n) *n = 0;
    return NULL;
  }
  int node = topo->nodeOf[rank];
  if (n) *n = topo->nodeSize[node];
  return topo->nodeRanks[node];
}

zppResult_t zppTopoInterGroup(const zppTopo_t* topo, int rank, int* ranks, int* n) {
  ZPP_ARGCHECK(topo != NULL && ranks != NULL && n != NULL, "topology: NULL argument");
  ZPP_ARGCHECK(rank >= 0 && rank < topo->nranks, "topology: rank %d out of range 0..%d", rank,
               topo->nranks - 1);
  int local = topo->localRankOf[rank], k = 0;
  for (int node = 0; node < topo->nNodes; node++)
    if (topo->nodeSize[node] > local) ranks[k++] = topo->nodeRanks[node][local];
  *n = k;
  return zppSuccess;
}

/* Host ids are written as one whitespace-free token per line. */
static int hostIdWritable(const char* s) {
  if (s == NULL || s[0] == '\0' || strlen(s) >= ZPP_HOSTID_MAX || s[0] == '#') return 0;
  for (const char* p = s; *p; p++)
    if (isspace((unsigned char)*p) || !isprint((unsigned char)*p)) return 0;
  return 1;
}

zppResult_t zppTopoWrite(const zppTopo_t* topo, const char* const* hostIds, const char* path) {
  ZPP_ARGCHECK(topo != NULL && hostIds != NULL && path != NULL, "topology: NULL argument");
  for (int r = 0; r < topo->nranks; r++)
    ZPP_ARGCHECK(hostIdWritable(hostIds[r]),
                 "topology: rank %d's host id '%s' cannot be written (empty, too long, or has "
                 "spaces or a leading #)",
                 r, hostIds[r] ? hostIds[r] : "(null)");
  FILE* f = fopen(path, "w");
  if (f == NULL) ZPP_FAIL(zppSystemError, TOPO, "topology: cannot write %s: %s", path, strerror(errno));
  fprintf(f, "# zpp topology: %d ranks on %d nodes; one \"rank host-id\" line per rank\n", topo->nranks,
          topo->nNodes);
  for (int r = 0; r < topo->nranks; r++) fprintf(f, "%d %s\n", r, hostIds[r]);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    ZPP_FAIL(zppSystemError, TOPO, "topology: error writing %s: %s", path, strerror(errno));
  return zppSuccess;
}

void zppTopoFreeHostIds(char** hostIds, int nranks) {
  if (hostIds == NULL) return;
  for (int r = 0; r < nranks; r++) free(hostIds[r]);
  free(hostIds);
}

zppResult_t zppTopoReadHostIds(const char* path, int nranks, char*** hostIds) {
  zppResult_t res = zppSuccess;
  ZPP_ARGCHECK(path != NULL && hostIds != NULL, "topology: NULL argument");
  ZPP_ARGCHECK(nranks >= 1, "topology: nranks=%d must be at least 1", nranks);
  char** ids = NULL;
  char line[512];
  int lineNo = 0, found = 0;
  FILE* f = fopen(path, "r");
  if (f == NULL)
    ZPP_FAIL(zppInvalidArgument, TOPO, "topology: cannot read %s: %s", path, strerror(errno));
  ZPP_CALLOCGOTO(ids, nranks, res, out);
  while (fgets(line, sizeof(line), f)) {
    lineNo++;
    size_t len = strlen(line);
    if (len == sizeof(line) - 1 && line[len - 1] != '\n')
      ZPP_FAILGOTO(zppInvalidArgument, res, out, TOPO, "topology: %s:%d: line too long", path, lineNo);
    char* p = line;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '\0' || *p == '#') continue;
    char* end = NULL;
    errno = 0;
    long rank = strtol(p, &end, 10);
    if (end == p || errno != 0 || !isspace((unsigned char)*end))
      ZPP_FAILGOTO(zppInvalidArgument, res, out, TOPO,
                   "topology: %s:%d: expected \"rank host-id\", got '%.*s'", path, lineNo,
                   (int)strcspn(line, "\n"), line);
    if (rank < 0 || rank >= nranks)
      ZPP_FAILGOTO(zppInvalidArgument, res, out, TOPO,
                   "topology: %s:%d: rank %ld out of range 0..%d (the communicator has %d ranks)", path,
                   lineNo, rank, nranks - 1, nranks);
    p = end;
    while (isspace((unsigned char)*p) && *p != '\n') p++;
    size_t n = strcspn(p, " \t\r\n");
    char* rest = p + n;
    while (*rest && isspace((unsigned char)*rest)) rest++;
    if (n == 0 || n >= ZPP_HOSTID_MAX || (*rest != '\0' && *rest != '#'))
      ZPP_FAILGOTO(zppInvalidArgument, res, out, TOPO,
                   "topology: %s:%d: host id must be one token of 1..%d characters", path, lineNo,
                   ZPP_HOSTID_MAX - 1);
    if (ids[rank] != NULL)
      ZPP_FAILGOTO(zppInvalidArgument, res, out, TOPO, "topology: %s:%d: rank %ld listed twice", path,
                   lineNo, rank);
    ids[rank] = strndup(p, n);
    if (ids[rank] == NULL) ZPP_FAILGOTO(zppSystemError, res, out, TOPO, "topology: out of memory");
    found++;
  }
  if (ferror(f)) ZPP_FAILGOTO(zppSystemError, res, out, TOPO, "topology: error reading %s", path);
  if (found != nranks) {
    int missing = 0;
    while (missing < nranks && ids[missing]) missing++;
    ZPP_FAILGOTO(zppInvalidArgument, res, out, TOPO,
                 "topology: %s lists %d of %d ranks (rank %d is missing)", path, found, nranks,
                 missing);
  }
  *hostIds = ids;
  ids = NULL;
out:
  fclose(f);
  zppTopoFreeHostIds(ids, nranks);
  return res;
}
