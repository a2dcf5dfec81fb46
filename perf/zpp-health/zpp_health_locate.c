/*
 * Rank 0's search: the expectation, and when the cluster falls short, where.
 *
 * Bisection over node sets. A failing set is split in halves and both halves
 * are tested, each as its own communicator (so a half measures only its own
 * links), recursing into every half that fails: several slow nodes are all
 * followed. Sets of at most three nodes cannot be split into testable halves
 * (one node alone has no link to test) and go to the pair stage with every
 * node that failed a pair against a reference: each candidate is tested
 * against reference nodes until it fails twice (named slow) or passes
 * (cleared). A failing set whose nodes all clear is searched pair by pair for
 * a slow link. Any trial below the threshold fails a test, so a node that is
 * only sometimes slow is still caught; the second failure keeps one noisy
 * trial from naming a healthy node.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_math.h"
#include "zpp_health.h"

#define ZH_CONFIRM 2 /* failures against references that name a node */
#define ZH_MAX_PAIR_TESTS 4

const char* zhUnitName(const zhCoord_t* c, int unit) {
  return unit >= 0 && unit < c->nUnits ? c->units[unit].name : "?";
}

/* Room left for a test, with the estimate of its duration. */
static int zhHaveTime(zhCoord_t* c, double need) {
  if (zhRemaining(c) >= need) return 1;
  if (!c->incomplete)
    zhNote(c, "time limit: stopped the search with %.0f s left (next step needs about %.0f s)",
           zhRemaining(c) > 0 ? zhRemaining(c) : 0, need);
  c->incomplete = 1;
  return 0;
}

/* Runs tests one batch if parallel (their ranks are disjoint), else one by one. */
void zhRunAll(zhCoord_t* c, int n, zhTest_t** t) {
  double need = 0;
  for (int i = 0; i < n; i++) need += zhEstimate(c, t[i]);
  if (c->parallel) {
    if (zhHaveTime(c, need / n)) zhRunBatch(c, n, t); /* at once: about one test's time */
    return;
  }
  for (int i = 0; i < n && !c->broken; i++)
    if (zhHaveTime(c, zhEstimate(c, t[i]))) zhRunBatch(c, 1, &t[i]);
}

/* Circle method: round r of a round-robin over n items (n even after a bye). */
static int zhRound(int n, int r, int* a, int* b) {
  int m = n + (n & 1), np = 0;
  int* arr = malloc((size_t)m * sizeof(int));
  if (arr == NULL) return 0;
  arr[0] = 0;
  for (int i = 1; i < m; i++) arr[i] = 1 + (i - 1 + r) % (m - 1);
  for (int i = 0; i < m / 2; i++) {
    int x = arr[i], y = arr[m - 1 - i];
    if (x >= n || y >= n) continue; /* the bye */
    a[np] = x;
    b[np++] = y;
  }
  free(arr);
  return np;
}

/* ---- expectation ------------------------------------------------------------------ */

void zhMeasureExpectation(zhCoord_t* c) {
  const zppHealthArgs_t* a = c->a;
  const zhTest_t* w = c->tests[c->worldTest - 1];
  if (a->expectFrom == ZH_EXPECT_CMDLINE) {
    c->expect = a->expectGBps;
    c->expectFrom = "command line";
  } else if (a->expectFrom == ZH_EXPECT_BASELINE) {
    c->expect = c->baseline.allreduceBusbw;
    c->expectFrom = "baseline";
  } else if (c->nUnits == 2) {
    c->expect = w->median[0];
    c->expectFrom = "point-to-point";
    zhNote(c,
           "two %s only: the measured expectation is the pair itself, which cannot be slow against "
           "itself; give --expect-busbw or --baseline",
           c->unitsAreNodes ? "nodes" : "ranks");
  } else {
    c->phase = "expectation";
    int rounds = c->nUnits - 1 + (c->nUnits & 1);
    if (rounds > a->p2pRounds) rounds = a->p2pRounds;
    int* pa = malloc((size_t)c->nUnits * sizeof(int));
    int* pb = malloc((size_t)c->nUnits * sizeof(int));
    zhTest_t** t = malloc((size_t)c->nUnits * sizeof(zhTest_t*));
    for (int r = 0; pa && pb && t && r < rounds && !c->broken && !c->incomplete; r++) {
      int np = zhRound(c->nUnits, r, pa, pb);
      for (int i = 0; i < np; i++) {
        int u[2] = {pa[i], pb[i]};
        t[i] = zhNewTest(c, "p2p", 2, u, ZH_COLL_ALLREDUCE);
      }
      zhRunAll(c, np, t);
    }
    free(pa);
    free(pb);
    free(t);
    /* The best pair is what every link should give; the median would
     * follow the slow nodes when they are many. */
    double best = 0;
    for (int i = 0; i < c->nTests; i++)
      if (strcmp(c->tests[i]->kind, "p2p") == 0 && !c->tests[i]->failed &&
          c->tests[i]->median[0] > best)
        best = c->tests[i]->median[0];
    c->expect = best > 0 ? best : w->median[0];
    c->expectFrom = best > 0 ? "point-to-point" : "all ranks (no pair could be measured)";
  }
  c->required = a->threshold * c->expect;
  c->requiredLocal = a->localizeThreshold * c->expect;
  for (int i = 0; i < c->nTests; i++) zhJudge(c, c->tests[i]);
}

/* ---- evidence per node --------------------------------------------------------------
 * Candidates are the nodes of the failing leaves and the nodes that earlier
 * pairs blame: a failing pair blames the node that fails more often in its
 * other tests (equal fractions blame both). Each candidate is then tested
 * against reference nodes, the ones with the fewest failures: two failures
 * against two references name it slow, a pass with no failure (or two
 * passes) clears it. A node slow only some of the time fails most tests of
 * three trials and is still named; one low trial of a healthy pair is not
 * enough. */

static int zhOther(const zhTest_t* t, int u) {
  if (t->nUnits != 2) return -1;
  return t->units[0] == u ? t->units[1] : t->units[1] == u ? t->units[0] : -1;
}

static int zhUsable(const zhTest_t* t) { return t->judged && !t->failed && t->nUnits >= 2; }

/* Failure fraction of u over its pair tests other than `excl`; *n of them. */
static double zhFailFrac(const zhCoord_t* c, int u, const zhTest_t* excl, int* n) {
  int tests = 0, fails = 0;
  for (int i = 0; i < c->nTests; i++) {
    const zhTest_t* t = c->tests[i];
    if (t == excl || !zhUsable(t) || zhOther(t, u) < 0) continue;
    tests++;
    fails += !t->pass;
  }
  if (n) *n = tests;
  return tests ? (double)fails / tests : 0.0;
}

/* Whom a failing pair blames: a unit, or -1 when it cannot tell. */
static int zhBlamed(const zhCoord_t* c, const zhTest_t* t) {
  double fu = zhFailFrac(c, t->units[0], t, NULL), fv = zhFailFrac(c, t->units[1], t, NULL);
  return fu > fv ? t->units[0] : fv > fu ? t->units[1] : -1;
}

static int zhPasses(const zhCoord_t* c, int u) {
  int n = 0;
  for (int i = 0; i < c->nTests; i++) {
    const zhTest_t* t = c->tests[i];
    if (!zhUsable(t) || !t->pass) continue;
    for (int k = 0; k < t->nUnits; k++) n += t->units[k] == u;
  }
  return n;
}

/* The record of a candidate: failures (and their distinct references) of
 * the pair tests that had it as the subject, or of earlier pairs whose
 * partner passed everything else; passes of pair-stage tests, as subject or
 * as somebody's reference. */
/* 1 when the failing pair t accuses u: u was its subject, or (an earlier
 * pair) its partner passed every other test it took part in. */
static int zhAccuses(const zhCoord_t* c, const zhTest_t* t, int u) {
  int v = zhOther(t, u), others = 0;
  if (v < 0 || !zhUsable(t) || t->pass) return 0;
  if (t->subject >= 0) return t->subject == u;
  return zhFailFrac(c, v, t, &others) == 0 && others > 0;
}

static void zhStageStats(const zhCoord_t* c, int u, int* fails, int* refs, int* passes, int* direct) {
  *fails = *refs = *passes = *direct = 0;
  int seen[ZH_MAX_PAIR_TESTS * 4];
  for (int i = 0; i < c->nTests; i++) {
    const zhTest_t* t = c->tests[i];
    int v = zhOther(t, u);
    if (v < 0 || !zhUsable(t)) continue;
    if (t->pass) {
      *passes += t->subject >= 0;
    } else if (zhAccuses(c, t, u)) {
      *direct += t->subject == u;
      int dup = 0;
      for (int k = 0; k < *refs && k < ZH_MAX_PAIR_TESTS * 4; k++) dup |= seen[k] == v;
      if (!dup && *refs < ZH_MAX_PAIR_TESTS * 4) seen[(*refs)++] = v;
      (*fails)++;
    }
  }
}

/* The best partner for u: passed a test, fewest failures, not a candidate
 * still open if any other will do, not yet paired with u if possible. */
static int zhPickReference(const zhCoord_t* c, int u, const char* named, const char* isCand,
                           const int* busy, int round) {
  int best = -1;
  double bestScore = 1e9;
  for (int v = 0; v < c->nUnits; v++) {
    if (v == u || busy[v] == round || named[v] == 1 || zhPasses(c, v) == 0) continue;
    double score = zhFailFrac(c, v, NULL, NULL);
    if (isCand[v] && named[v] != 2) score += 10; /* an open candidate only as a last resort */
    for (int i = 0; i < c->nTests; i++)
      if (zhOther(c->tests[i], u) == v && c->tests[i]->subject >= 0) score += 1; /* another witness */
    if (score < bestScore) best = v, bestScore = score;
  }
  return best;
}

static void zhNameSlowNode(zhCoord_t* c, int u, int stageOnly, const char* how) {
  zhSuspect_t* s = zhAddSuspect(c, ZH_SUS_NODE, ZH_PROB_SLOW, u, -1);
  if (s == NULL) return;
  double mins[64];
  int nm = 0;
  size_t o = (size_t)snprintf(s->evidence, sizeof s->evidence, "%s", how);
  for (int i = 0; i < c->nTests && nm < 64; i++) {
    const zhTest_t* t = c->tests[i];
    int v = zhOther(t, u);
    if (v < 0 || !zhUsable(t) || t->pass || (stageOnly && !zhAccuses(c, t, u))) continue;
    mins[nm++] = t->min[0];
    if (s->nTests < 16) s->tests[s->nTests++] = t->id;
    if (o < sizeof s->evidence)
      o += (size_t)snprintf(s->evidence + o, sizeof s->evidence - o,
                            "%s%.4g GB/s with %s (test %d, median %.4g)", nm == 1 ? "" : "; ",
                            t->min[0], zhUnitName(c, v), t->id, t->median[0]);
  }
  /* The rate it falls to when slow: the median of its worst trials. */
  s->busbw = nm ? zppPerfMedian(mins, (size_t)nm) : 0;
}

static int zhAnyPass(const zhCoord_t* c) {
  for (int i = 0; i < c->nTests; i++)
    if (zhUsable(c->tests[i]) && c->tests[i]->pass) return 1;
  return 0;
}

/* No test has passed yet: pairs of the candidates in round-robin order
 * until one passes; when every pair was tested already, the best one again. */
static void zhFindReference(zhCoord_t* c, const int* cand, int nc) {
  zhTest_t** t = malloc((size_t)(nc + 1) * sizeof(zhTest_t*));
  int* pa = malloc((size_t)(nc + 1) * sizeof(int));
  int* pb = malloc((size_t)(nc + 1) * sizeof(int));
  for (int r = 0; t && pa && pb && r < nc - 1 + (nc & 1) && !c->broken && !c->incomplete; r++) {
    int np = zhRound(nc, r, pa, pb), n = 0;
    for (int i = 0; i < np; i++) {
      int tested = 0;
      for (int k = 0; k < c->nTests && !tested; k++)
        tested = zhOther(c->tests[k], cand[pa[i]]) == cand[pb[i]];
      if (tested) continue;
      int u[2] = {cand[pa[i]], cand[pb[i]]};
      t[n++] = zhNewTest(c, "pair", 2, u, ZH_COLL_ALLREDUCE);
    }
    zhRunAll(c, n, t);
    if (zhAnyPass(c)) goto out;
  }
  const zhTest_t* best = NULL;
  for (int i = 0; i < c->nTests; i++)
    if (zhUsable(c->tests[i]) && c->tests[i]->nUnits == 2 &&
        (best == NULL || c->tests[i]->median[0] > best->median[0]))
      best = c->tests[i];
  if (t && best && !c->broken && !c->incomplete) {
    int u[2] = {best->units[0], best->units[1]};
    t[0] = zhNewTest(c, "pair", 2, u, ZH_COLL_ALLREDUCE);
    zhRunAll(c, 1, t);
  }
out:
  free(t);
  free(pa);
  free(pb);
}

/* Candidates against references until each is named or cleared. named[u]:
 * 0 open, 1 slow, 2 cleared. */
static void zhPairStage(zhCoord_t* c, const char* isCand, char* named) {
  int U = c->nUnits, nc = 0, nRefs = 0;
  int* busy = calloc((size_t)U, sizeof(int));
  int* tries = calloc((size_t)U, sizeof(int));
  int* cand = malloc((size_t)U * sizeof(int));
  zhTest_t** t = malloc((size_t)U * sizeof(zhTest_t*));
  if (!busy || !tries || !cand || !t) goto out;
  for (int u = 0; u < U; u++)
    if (isCand[u]) cand[nc++] = u;
  if (!zhAnyPass(c) && nc >= 2) zhFindReference(c, cand, nc);
  if (!zhAnyPass(c)) {
    if (c->broken || c->incomplete) goto out;
    for (int i = 0; i < nc; i++) {
      named[cand[i]] = 1;
      zhNameSlowNode(c, cand[i], 0,
                     "no pair of these nodes reaches the expectation (every node is slow, or "
                     "the expectation is too high): ");
    }
    goto out;
  }
  for (int u = 0; u < U; u++) nRefs += zhPasses(c, u) > 0;
  for (int round = 1; round <= (ZH_MAX_PAIR_TESTS + 2) * (nc + 1) && !c->broken && !c->incomplete;
       round++) {
    int n = 0;
    for (int i = 0; i < nc; i++) {
      int u = cand[i], fails, refs, passes, direct;
      if (named[u]) continue;
      zhStageStats(c, u, &fails, &refs, &passes, &direct);
      /* Two failures, against two references when there are two, one of
       * them a test of its own here (earlier pairs only point). */
      if (fails >= ZH_CONFIRM && direct >= 1 && (refs >= 2 || nRefs < 3)) {
        named[u] = 1;
        continue;
      }
      if (passes >= 2 || (passes >= 1 && fails == 0)) {
        named[u] = 2;
        continue;
      }
      if (tries[u] >= ZH_MAX_PAIR_TESTS) {
        named[u] = 2;
        zhNote(c, "%s: %d failure%s and %d pass%s against references: not named", zhUnitName(c, u),
               fails, fails == 1 ? "" : "s", passes, passes == 1 ? "" : "es");
        continue;
      }
      if ((!c->parallel && n > 0) || busy[u] == round) continue;
      int ref = zhPickReference(c, u, named, isCand, busy, round);
      if (ref < 0) continue;
      busy[ref] = busy[u] = round;
      tries[u]++;
      int pair[2] = {u, ref};
      t[n] = zhNewTest(c, "pair", 2, pair, ZH_COLL_ALLREDUCE);
      t[n++]->subject = u;
    }
    if (n == 0) break; /* all decided (or nobody left to test with) */
    zhRunAll(c, n, t);
  }
  for (int u = 0; u < U; u++)
    if (named[u] == 1) zhNameSlowNode(c, u, 1, "");
out:
  free(busy);
  free(tries);
  free(cand);
  free(t);
}

/* A failing set whose nodes all cleared: look for the slow link. */
static void zhTestLinks(zhCoord_t* c, const int* set, int ns) {
  for (int i = 0; i < ns && !c->broken && !c->incomplete; i++) {
    for (int j = i + 1; j < ns && !c->broken && !c->incomplete; j++) {
      int pair[2] = {set[i], set[j]};
      zhTest_t* t = zhNewTest(c, "link", 2, pair, ZH_COLL_ALLREDUCE);
      zhRunAll(c, 1, &t);
      if (t->failed || !t->judged || t->pass) continue;
      zhTest_t* again = zhNewTest(c, "link", 2, pair, ZH_COLL_ALLREDUCE);
      zhRunAll(c, 1, &again);
      if (again->failed || !again->judged || again->pass) continue;
      /* A link is slow when both ends are fine with everyone else; an end
       * that also failed with another partner is a node slow only some of
       * the time (it passed its own tests by luck). */
      int end = -1;
      for (int k = 0; k < 2 && end < 0; k++)
        for (int x = 0; x < c->nTests && end < 0; x++) {
          const zhTest_t* o = c->tests[x];
          int v = zhOther(o, pair[k]);
          if (v >= 0 && v != pair[1 - k] && zhUsable(o) && !o->pass) end = pair[k];
        }
      if (end >= 0) {
        zhNameSlowNode(c, end, 0, "slow only some of the time: ");
        continue;
      }
      zhSuspect_t* s = zhAddSuspect(c, ZH_SUS_LINK, ZH_PROB_SLOW, set[i], set[j]);
      if (s == NULL) continue;
      double m[2] = {t->median[0], again->median[0]};
      s->busbw = zppPerfMedian(m, 2);
      s->tests[s->nTests++] = t->id;
      s->tests[s->nTests++] = again->id;
      snprintf(s->evidence, sizeof s->evidence,
               "%.4g and %.4g GB/s between them (tests %d, %d) while each passes with other nodes",
               t->median[0], again->median[0], t->id, again->id);
    }
  }
}

/* ---- bisection -------------------------------------------------------------------- */

typedef struct {
  int start, len;
  int whole; /* 1: halves passed but the set failed again: its nodes are candidates together */
} zhLeaf_t;

void zhLocalizeSlow(zhCoord_t* c) {
  int U = c->nUnits, nLeaves = 0, top = 0;
  char* isCand = calloc((size_t)U, 1);
  char* named = calloc((size_t)U, 1);
  int* stack = malloc((size_t)U * 2 * sizeof(int)); /* (start, length) into order[] */
  int* order = malloc((size_t)U * sizeof(int));
  zhLeaf_t* leaves = malloc((size_t)U * sizeof(zhLeaf_t));
  double* wholeRate = calloc((size_t)U, sizeof(double));
  int* wholeTest = calloc((size_t)U, sizeof(int));
  if (!isCand || !named || !stack || !order || !leaves || !wholeRate || !wholeTest) goto out;
  c->phase = "bisection";
  for (int u = 0; u < U; u++) order[u] = u;
  stack[top++] = 0;
  stack[top++] = U;
  while (top > 0 && !c->broken && !c->incomplete) {
    int len = stack[--top], start = stack[--top];
    if (len <= 3) { /* one node alone has no link to test: pairs decide */
      leaves[nLeaves++] = (zhLeaf_t){start, len, 0};
      continue;
    }
    int h = (len + 1) / 2;
    zhTest_t* t[2] = {zhNewTest(c, "half", h, order + start, ZH_COLL_ALLREDUCE),
                      zhNewTest(c, "half", len - h, order + start + h, ZH_COLL_ALLREDUCE)};
    zhRunAll(c, 2, t);
    int fails = 0;
    for (int k = 0; k < 2; k++) {
      if (t[k]->judged && !t[k]->pass) {
        stack[top++] = k == 0 ? start : start + h;
        stack[top++] = k == 0 ? h : len - h;
        fails++;
      }
    }
    if (fails == 0 && t[0]->judged && t[1]->judged) {
      /* Each half passes: the set again before suspecting it as a whole
       * (one low trial, or a node slow only some of the time). */
      zhTest_t* again = zhNewTest(c, "set", len, order + start, ZH_COLL_ALLREDUCE);
      zhRunAll(c, 1, &again);
      if (again->judged && !again->pass) {
        wholeRate[nLeaves] = again->median[0];
        wholeTest[nLeaves] = again->id;
        leaves[nLeaves++] = (zhLeaf_t){start, len, 1};
      } else if (again->judged) {
        zhNote(c, "%d %s failed together once but passed again and in halves: not named", len,
               c->unitsAreNodes ? "nodes" : "ranks");
      }
    }
  }
  for (int l = 0; l < nLeaves; l++)
    for (int i = 0; i < leaves[l].len; i++) isCand[order[leaves[l].start + i]] = 1;
  /* A node that an earlier pair blames is a candidate wherever the
   * bisection put it. */
  for (int i = 0; i < c->nTests; i++) {
    const zhTest_t* t = c->tests[i];
    if (!zhUsable(t) || t->pass || t->nUnits != 2) continue;
    int b = zhBlamed(c, t);
    if (b >= 0)
      isCand[b] = 1;
    else
      isCand[t->units[0]] = isCand[t->units[1]] = 1;
  }
  c->phase = "pairs";
  zhPairStage(c, isCand, named);
  /* Leaves that failed although every node in them cleared: links, or (a
   * set whose halves pass) a shared bottleneck. */
  for (int l = 0; l < nLeaves && !c->broken && !c->incomplete; l++) {
    const zhLeaf_t* lf = &leaves[l];
    int bad = 0;
    for (int i = 0; i < lf->len; i++) bad |= named[order[lf->start + i]] == 1;
    if (bad) continue;
    if (!lf->whole && lf->len >= 2) {
      c->phase = "links";
      zhTestLinks(c, order + lf->start, lf->len);
    } else if (lf->whole && wholeRate[l] < c->requiredLocal) {
      zhSuspect_t* s = zhAddSuspect(c, ZH_SUS_SET, ZH_PROB_SLOW, lf->start, lf->len);
      if (s && (s->set = malloc((size_t)lf->len * sizeof(int)))) {
        memcpy(s->set, order + lf->start, (size_t)lf->len * sizeof(int));
        s->nSet = lf->len;
        s->busbw = wholeRate[l];
        s->tests[s->nTests++] = wholeTest[l];
        snprintf(
            s->evidence, sizeof s->evidence,
            "slow together (test %d: %.4g GB/s) while each half and every node passes alone: a shared "
            "bottleneck (switch, uplink)",
            wholeTest[l], wholeRate[l]);
      }
    }
  }
out:
  free(isCand);
  free(named);
  free(stack);
  free(order);
  free(leaves);
  free(wholeRate);
  free(wholeTest);
}
