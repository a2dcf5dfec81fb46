/*
 * Topology: grouping by host id (uneven nodes, nodes in order of their
 * lowest rank), intra- and inter-node groups, the topology file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "topology/topo.h"

static void checkArray(const int* got, const int* want, int n, const char* what) {
  for (int i = 0; i < n; i++)
    CHECK_MSG(got[i] == want[i], "%s[%d] = %d, want %d", what, i, got[i], want[i]);
}

static void testUneven(void) {
  const char* ids[] = {"a", "b", "a", "c", "b", "a"};
  zppTopo_t* t = NULL;
  REQUIRE(zppTopoCreate(6, ids, &t) == zppSuccess);
  CHECK_EQ_INT(t->nranks, 6);
  CHECK_EQ_INT(t->nNodes, 3);
  CHECK_EQ_INT(t->uniform, 0);
  checkArray(t->nodeOf, (int[]){0, 1, 0, 2, 1, 0}, 6, "nodeOf");
  checkArray(t->localRankOf, (int[]){0, 0, 1, 0, 1, 2}, 6, "localRankOf");
  checkArray(t->nodeSize, (int[]){3, 2, 1}, 3, "nodeSize");
  checkArray(t->nodeRanks[0], (int[]){0, 2, 5}, 3, "node 0");
  checkArray(t->nodeRanks[1], (int[]){1, 4}, 2, "node 1");
  checkArray(t->nodeRanks[2], (int[]){3}, 1, "node 2");

  int n = -1;
  const int* g = zppTopoIntraGroup(t, 4, &n);
  CHECK_EQ_INT(n, 2);
  REQUIRE(g != NULL);
  checkArray(g, (int[]){1, 4}, 2, "intra(4)");
  g = zppTopoIntraGroup(t, 3, &n);
  CHECK_EQ_INT(n, 1);
  CHECK(g && g[0] == 3);
  CHECK(zppTopoIntraGroup(t, 6, &n) == NULL && n == 0);

  int inter[3];
  CHECK(zppTopoInterGroup(t, 0, inter, &n) == zppSuccess);
  CHECK_EQ_INT(n, 3);
  checkArray(inter, (int[]){0, 1, 3}, 3, "inter(0)");
  CHECK(zppTopoInterGroup(t, 4, inter, &n) == zppSuccess); /* local rank 1: nodes a and b */
  CHECK_EQ_INT(n, 2);
  checkArray(inter, (int[]){2, 4}, 2, "inter(4)");
  CHECK(zppTopoInterGroup(t, 5, inter, &n) == zppSuccess); /* local rank 2: only node a */
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(inter[0], 5);
  CHECK_EQ_INT(zppTopoInterGroup(t, 6, inter, &n), zppInvalidArgument);
  CHECK_EQ_INT(zppTopoInterGroup(t, 0, NULL, &n), zppInvalidArgument);
  zppTopoDestroy(t);
}

static void testUniform(void) {
  /* 2 nodes x 3 ranks, interleaved: rank order decides local order. */
  const char* ids[] = {"n1", "n0", "n1", "n0", "n1", "n0"};
  zppTopo_t* t = NULL;
  REQUIRE(zppTopoCreate(6, ids, &t) == zppSuccess);
  CHECK_EQ_INT(t->nNodes, 2);
  CHECK_EQ_INT(t->uniform, 1);
  checkArray(t->nodeOf, (int[]){0, 1, 0, 1, 0, 1}, 6, "nodeOf"); /* n1 holds rank 0: node 0 */
  checkArray(t->nodeRanks[1], (int[]){1, 3, 5}, 3, "node 1");
  int inter[2], n = 0;
  CHECK(zppTopoInterGroup(t, 3, inter, &n) == zppSuccess);
  CHECK_EQ_INT(n, 2);
  checkArray(inter, (int[]){2, 3}, 2, "inter(3)");
  zppTopoDestroy(t);

  const char* one[] = {"solo"};
  REQUIRE(zppTopoCreate(1, one, &t) == zppSuccess);
  CHECK(t->nNodes == 1 && t->uniform == 1 && t->nodeSize[0] == 1 && t->localRankOf[0] == 0);
  zppTopoDestroy(t);
}

static void testArgs(void) {
  zppTopo_t* t = (zppTopo_t*)0x1;
  const char* ids[] = {"a", NULL};
  const char* empty[] = {"a", ""};
  CHECK_EQ_INT(zppTopoCreate(2, ids, &t), zppInvalidArgument);
  CHECK_EQ_INT(zppTopoCreate(2, empty, &t), zppInvalidArgument);
  CHECK_EQ_INT(zppTopoCreate(0, ids, &t), zppInvalidArgument);
  CHECK_EQ_INT(zppTopoCreate(2, NULL, &t), zppInvalidArgument);
  CHECK(t == (zppTopo_t*)0x1);
  zppTopoDestroy(NULL);
  zppTopoFreeHostIds(NULL, 3);
}

static void writeFile(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  REQUIRE(f != NULL);
  fputs(text, f);
  fclose(f);
}

static void testFile(void) {
  char path[] = "/tmp/zpp_topo_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);

  const char* ids[] = {"node-a", "node-b", "node-a", "node-c.example.org", "node-b"};
  zppTopo_t* t = NULL;
  REQUIRE(zppTopoCreate(5, ids, &t) == zppSuccess);
  CHECK(zppTopoWrite(t, ids, path) == zppSuccess);
  char** back = NULL;
  REQUIRE(zppTopoReadHostIds(path, 5, &back) == zppSuccess);
  for (int r = 0; r < 5; r++) CHECK_MSG(strcmp(back[r], ids[r]) == 0, "rank %d: '%s'", r, back[r]);
  zppTopo_t* t2 = NULL;
  REQUIRE(zppTopoCreate(5, (const char* const*)back, &t2) == zppSuccess);
  CHECK_EQ_INT(t2->nNodes, t->nNodes);
  checkArray(t2->nodeOf, t->nodeOf, 5, "nodeOf after the round trip");
  checkArray(t2->localRankOf, t->localRankOf, 5, "localRankOf after the round trip");
  zppTopoDestroy(t2);
  zppTopoFreeHostIds(back, 5);

  /* A host id the format cannot hold is refused, not written wrong. */
  const char* spaced[] = {"node a", "b", "c", "d", "e"};
  CHECK_EQ_INT(zppTopoWrite(t, spaced, path), zppInvalidArgument);
  zppTopoDestroy(t);

  /* Hand-written: comments, blank lines, any order, trailing comments. */
  writeFile(path, "# two nodes\n\n2 x  # a comment\n0 y\n  1 x\n3\ty\n");
  REQUIRE(zppTopoReadHostIds(path, 4, &back) == zppSuccess);
  CHECK(strcmp(back[0], "y") == 0 && strcmp(back[1], "x") == 0 && strcmp(back[2], "x") == 0 &&
        strcmp(back[3], "y") == 0);
  zppTopoFreeHostIds(back, 4);

  static const struct {
    const char* text;
    int nranks;
    const char* why;
  } bad[] = {
      {"0 a\n1 b\n", 3, "a rank missing"},
      {"0 a\n1 b\n1 c\n", 2, "a rank twice"},
      {"0 a\n2 b\n", 2, "rank out of range"},
      {"0 a\n-1 b\n", 2, "negative rank"},
      {"0 a\nb 1\n", 2, "garbage"},
      {"0 a\n1\n", 2, "no host id"},
      {"0 a\n1 b c\n", 2, "two host ids"},
      {"0 a\n1 bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n", 2,
       "host id too long"},
      {"", 1, "empty file"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    writeFile(path, bad[i].text);
    back = (char**)0x1;
    CHECK_MSG(zppTopoReadHostIds(path, bad[i].nranks, &back) == zppInvalidArgument, "%s", bad[i].why);
    CHECK_MSG(back == (char**)0x1, "%s: output written on failure", bad[i].why);
  }
  unlink(path);
  CHECK_EQ_INT(zppTopoReadHostIds(path, 2, &back), zppInvalidArgument); /* no such file */
}

int main(void) {
  testUneven();
  testUniform();
  testArgs();
  testFile();
  return zppTestExit("test_topo");
}
