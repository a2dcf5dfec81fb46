/*
 * Rank 0's search: the expectation, the verdict, and when the cluster falls
 * short, where.
 *
 * Slow: bisection over node sets. A failing set is split in halves and both
 * halves are tested, each as its own communicator (so a half measures only
 * its own links), recursing into every half that fails: several slow nodes
 * are all followed. Sets of at most three nodes cannot be split into
 * testable halves (one node alone has no link to test) and go to the pair
 * stage: each suspect is tested against a reference node, one that passed a
 * test, until it fails twice (named slow) or passes (cleared). A failing set
 * whose nodes all clear is searched pair by pair for a slow link. Any trial
 * below the threshold fails a test, so a node that is only sometimes slow is
 * still caught; the second failure keeps one noisy trial from naming a
 * healthy node.
 *
 * Wrong data: every receiver of the all-ranks all-gather says whose blocks
 * were wrong (each rank's data is recognizable). A bad sender's own block is
 * wrong everywhere; blocks it forwarded are wrong downstream of it. Each
 * suspect is then tested alone with a reference rank, where nothing is
 * forwarded: wrong data in that pair comes from the suspect.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf_math.h"
#include "zpp_health.h"

#define ZH_CONFIRM 2     /* failures against references that name a node */
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
static void zhRunAll(zhCoord_t* c, int n, zhTest_t** t) {
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
    zhNote(c, "two %s only: the measured expectation is the pair itself, which cannot be slow against "
           "itself; give --expect-busbw or --baseline", c->unitsAreNodes ? "nodes" : "ranks");
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
      if (strcmp(c->tests[i]->kind, "p2p") == 0 && !c->tests[i]->failed && c->tests[i]->median[0] > best)
        best = c->tests[i]->median[0];
    c->expect = best > 0 ? best : w->median[0];
    c->expectFrom = best > 0 ? "point-to-point" : "all ranks (no pair could be measured)";
  }
  c->required = a->threshold * c->expect;
  for (int i = 0; i < c->nTests; i++) zhJudge(c, c->tests[i]);
}

/* ---- pairs ---------------------------------------------------------------------- */

static int zhOther(const zhTest_t* t, int u) {
  if (t->nUnits != 2) return -1;
  return t->units[0] == u ? t->units[1] : t->units[1] == u ? t->units[0] : -1;
}

static int zhIsPairTest(const zhTest_t* t) {
  return t->nUnits == 2 && t->judged && !t->failed &&
         (strcmp(t->kind, "p2p") == 0 || strcmp(t->kind, "pair") == 0 || strcmp(t->kind, "half") == 0 ||
          strcmp(t->kind, "link") == 0);
}

/* A passing pair clears a node at that moment; a failing pair accuses it
 * only when its partner is known good. */
static void zhPairStats(const zhCoord_t* c, int u, const char* isRef, int* fails, int* passes, int* tested) {
  *fails = *passes = *tested = 0;
  for (int i = 0; i < c->nTests; i++) {
    const zhTest_t* t = c->tests[i];
    int v = zhOther(t, u);
    if (v < 0 || !zhIsPairTest(t)) continue;
    (*tested)++;
    if (t->pass) (*passes)++;
    else if (isRef[v]) (*fails)++;
  }
}

static int zhPairTested(const zhCoord_t* c, int u, int v) {
  for (int i = 0; i < c->nTests; i++)
    if (zhOther(c->tests[i], u) == v && !c->tests[i]->failed) return 1;
  return 0;
}

static void zhNameSlowNode(zhCoord_t* c, int u, const char* isRef, const char* how) {
  zhSuspect_t* s = zhAddSuspect(c, ZH_SUS_NODE, ZH_PROB_SLOW, u, -1);
  if (s == NULL) return;
  double meds[64];
  int nm = 0;
  size_t o = (size_t)snprintf(s->evidence, sizeof s->evidence, "%s", how);
  for (int i = 0; i < c->nTests && nm < 64; i++) {
    const zhTest_t* t = c->tests[i];
    int v = zhOther(t, u);
    if (v < 0 || !zhIsPairTest(t) || t->pass || !(isRef == NULL || isRef[v])) continue;
    meds[nm++] = t->median[0];
    if (s->nTests < 16) s->tests[s->nTests++] = t->id;
    if (o < sizeof s->evidence)
      o += (size_t)snprintf(s->evidence + o, sizeof s->evidence - o, "%s%.4g GB/s with %s (test %d, min %.4g)",
                            nm == 1 ? "" : "; ", t->median[0], zhUnitName(c, v), t->id, t->min[0]);
  }
  s->busbw = nm ? zppPerfMedian(meds, (size_t)nm) : 0;
}

/* A pair whose median reaches the expectation is a healthy pair: one noisy
 * trial must not cost the search its references. Returns 1 if found. */
static int zhRefsFromPairs(zhCoord_t* c, char* isRef) {
  int found = 0;
  for (int i = 0; i < c->nTests; i++)
    if (zhIsPairTest(c->tests[i]) && c->tests[i]->medianOk)
      isRef[c->tests[i]->units[0]] = isRef[c->tests[i]->units[1]] = 1, found = 1;
  return found;
}

/* Finds a reference among the suspects when no test has passed yet: pairs
 * of suspects in round-robin order until one passes; when every pair was
 * tested already, the best one again. */
static void zhFindReference(zhCoord_t* c, const int* sus, int ns, char* isRef) {
  zhTest_t* t[ZH_MAX_RANKS / 2];
  if (zhRefsFromPairs(c, isRef)) return;
  for (int r = 0; r < ns - 1 + (ns & 1) && !c->broken && !c->incomplete; r++) {
    int pa[ZH_MAX_RANKS / 2], pb[ZH_MAX_RANKS / 2], n = 0;
    int np = zhRound(ns, r, pa, pb);
    for (int i = 0; i < np && n < ZH_MAX_RANKS / 2; i++) {
      if (zhPairTested(c, sus[pa[i]], sus[pb[i]])) continue;
      int u[2] = {sus[pa[i]], sus[pb[i]]};
      t[n++] = zhNewTest(c, "pair", 2, u, ZH_COLL_ALLREDUCE);
    }
    zhRunAll(c, n, t);
    if (zhRefsFromPairs(c, isRef)) return;
  }
  const zhTest_t* best = NULL;
  for (int i = 0; i < c->nTests; i++)
    if (zhIsPairTest(c->tests[i]) && (best == NULL || c->tests[i]->median[0] > best->median[0]))
      best = c->tests[i];
  if (best && !c->broken && !c->incomplete) {
    int u[2] = {best->units[0], best->units[1]};
    t[0] = zhNewTest(c, "pair", 2, u, ZH_COLL_ALLREDUCE);
    zhRunAll(c, 1, t);
    zhRefsFromPairs(c, isRef);
  }
}

/* Suspects against references until each is named or cleared. */
static void zhTestSuspects(zhCoord_t* c, const int* sus, int ns, char* isRef, char* named) {
  int* busy = calloc((size_t)c->nUnits, sizeof(int));
  zhTest_t** t = malloc((size_t)(ns > 0 ? ns : 1) * sizeof(zhTest_t*));
  /* Bounded even if tests keep failing for another reason (then nothing is
   * decided by them): each suspect gets a few tries. */
  int maxRounds = (ZH_MAX_PAIR_TESTS + 2) * (ns + 1);
  for (int round = 1; busy && t && round <= maxRounds && !c->broken && !c->incomplete; round++) {
    int n = 0;
    for (int i = 0; i < ns; i++) {
      int u = sus[i], fails, passes, tested;
      if (isRef[u] || named[u]) continue;
      zhPairStats(c, u, isRef, &fails, &passes, &tested);
      if (fails >= ZH_CONFIRM) {
        named[u] = 1;
        continue;
      }
      if ((passes >= 1 && fails == 0) || passes >= 2 || tested >= ZH_MAX_PAIR_TESTS) {
        isRef[u] = fails == 0 || passes >= 2; /* cleared: a partner for the others */
        if (!isRef[u]) zhNote(c, "%s: failed once and passed once against references: not named",
                             zhUnitName(c, u));
        named[u] = 2;
        continue;
      }
      if (!c->parallel && n > 0) continue;
      /* A reference not yet paired with u (another witness), else any. */
      int ref = -1;
      for (int pass = 0; pass < 2 && ref < 0; pass++)
        for (int v = 0; v < c->nUnits && ref < 0; v++)
          if (isRef[v] && v != u && busy[v] != round && (pass || !zhPairTested(c, u, v))) ref = v;
      if (ref < 0) continue;
      busy[ref] = round;
      int pair[2] = {u, ref};
      t[n++] = zhNewTest(c, "pair", 2, pair, ZH_COLL_ALLREDUCE);
    }
    if (n == 0) {
      int open = 0;
      for (int i = 0; i < ns; i++) open |= !isRef[sus[i]] && !named[sus[i]];
      if (!open) break;
      continue; /* decisions made above; look again */
    }
    zhRunAll(c, n, t);
  }
  free(busy);
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

void zhLocalizeSlow(zhCoord_t* c) {
  int U = c->nUnits;
  char* isRef = calloc((size_t)U, 1);
  char* isSus = calloc((size_t)U, 1);
  char* named = calloc((size_t)U, 1);
  int* leafOf = malloc((size_t)U * sizeof(int));
  int* stack = malloc((size_t)U * 2 * sizeof(int)); /* (start, length) into order[] */
  int* order = malloc((size_t)U * sizeof(int));
  if (!isRef || !isSus || !named || !leafOf || !stack || !order) goto out;
  c->phase = "bisection";
  for (int u = 0; u < U; u++) order[u] = u, leafOf[u] = -1;
  int top = 0, nLeaves = 0;
  stack[top++] = 0;
  stack[top++] = U;
  while (top > 0 && !c->broken && !c->incomplete) {
    int len = stack[--top], start = stack[--top];
    if (len <= 3) {
      for (int i = 0; i < len; i++) isSus[order[start + i]] = 1, leafOf[order[start + i]] = nLeaves;
      nLeaves++;
      continue;
    }
    int h = (len + 1) / 2;
    zhTest_t* t[2] = {zhNewTest(c, "half", h, order + start, ZH_COLL_ALLREDUCE),
                      zhNewTest(c, "half", len - h, order + start + h, ZH_COLL_ALLREDUCE)};
    zhRunAll(c, 2, t);
    int fails = 0;
    for (int k = 0; k < 2; k++) {
      if (!t[k]->judged) continue;
      int s0 = k == 0 ? start : start + h, l0 = k == 0 ? h : len - h;
      if (!t[k]->pass) {
        stack[top++] = s0;
        stack[top++] = l0;
        fails++;
      } else {
        for (int i = 0; i < l0; i++) isRef[order[s0 + i]] = 1;
      }
    }
    if (fails == 0 && t[0]->judged && t[1]->judged) {
      /* Each half passes: the set again, before blaming it as a whole (a
       * dip of one trial, or a node slow only some of the time). */
      zhTest_t* again = zhNewTest(c, "set", len, order + start, ZH_COLL_ALLREDUCE);
      zhRunAll(c, 1, &again);
      zhSuspect_t* s = again->judged && !again->medianOk
                           ? zhAddSuspect(c, ZH_SUS_SET, ZH_PROB_SLOW, start, len) : NULL;
      if (s && (s->set = malloc((size_t)len * sizeof(int)))) {
        memcpy(s->set, order + start, (size_t)len * sizeof(int));
        s->nSet = len;
        s->busbw = again->median[0];
        s->tests[s->nTests++] = again->id;
        snprintf(s->evidence, sizeof s->evidence,
                 "slow together (test %d: %.4g GB/s), but each half passes (tests %d: %.4g, %d: %.4g GB/s): a "
                 "shared bottleneck (switch, uplink)", again->id, again->median[0], t[0]->id,
                 t[0]->median[0], t[1]->id, t[1]->median[0]);
      } else if (again->judged) {
        zhNote(c, "%d %s failed together once but passed again and in halves: not named", len,
               c->unitsAreNodes ? "nodes" : "ranks");
      }
    }
  }
  /* Every test that passed vouches for its nodes. */
  for (int i = 0; i < c->nTests; i++) {
    const zhTest_t* t = c->tests[i];
    if (t->judged && t->pass && t->nUnits >= 2)
      for (int k = 0; k < t->nUnits; k++) isRef[t->units[k]] = 1;
  }
  int ns = 0;
  int* sus = malloc((size_t)U * sizeof(int));
  if (sus == NULL) goto out;
  for (int u = 0; u < U; u++)
    if (isSus[u] && !isRef[u]) sus[ns++] = u;
  c->phase = "pairs";
  int anyRef = 0;
  for (int u = 0; u < U; u++) anyRef |= isRef[u];
  if (!anyRef && ns >= 2) zhFindReference(c, sus, ns, isRef);
  anyRef = 0;
  for (int u = 0; u < U; u++) anyRef |= isRef[u];
  if (!anyRef && !c->broken && !c->incomplete) {
    for (int i = 0; i < ns; i++) {
      named[sus[i]] = 1;
      zhNameSlowNode(c, sus[i], NULL, "no pair of the suspects reaches the expectation (every node is slow, or "
                     "the expectation is too high): ");
    }
  } else {
    zhTestSuspects(c, sus, ns, isRef, named);
    for (int i = 0; i < ns; i++)
      if (named[sus[i]] == 1) zhNameSlowNode(c, sus[i], isRef, "");
  }
  /* Leaves that failed although every node in them cleared: a link. */
  for (int l = 0; l < nLeaves && !c->broken && !c->incomplete; l++) {
    int set[3], n = 0, bad = 0;
    for (int u = 0; u < U; u++) {
      if (leafOf[u] != l) continue;
      if (n < 3) set[n++] = u;
      bad |= named[u] == 1;
    }
    if (!bad && n >= 2) {
      c->phase = "links";
      zhTestLinks(c, set, n);
    }
  }
  free(sus);
out:
  free(isRef);
  free(isSus);
  free(named);
  free(leafOf);
  free(stack);
  free(order);
}

/* ---- wrong data ---------------------------------------------------------------- */

void zhLocalizeWrong(zhCoord_t* c) {
  const zhTest_t* w = c->tests[c->worldTest - 1];
  int n = w->nRanks;
  int* blame = calloc((size_t)n, sizeof(int));
  int* cand = malloc((size_t)n * sizeof(int));
  char* cleared = calloc((size_t)n, 1);
  if (!blame || !cand || !cleared || !w->wrongFrom) goto out;
  c->phase = "wrong data";
  for (int x = 0; x < n; x++)
    for (int o = 0; o < n; o++)
      if (o != x && w->wrongFrom[(size_t)x * n + o]) blame[o]++;
  int nc = 0, ref = 0;
  for (int o = 0; o < n; o++) {
    if (blame[o] < blame[ref]) ref = o;
    cand[nc++] = o;
  }
  /* Most blamed first: the bad sender's own block is wrong at every receiver. */
  for (int i = 1; i < nc; i++)
    for (int j = i; j > 0 && blame[cand[j]] > blame[cand[j - 1]]; j--) {
      int tmp = cand[j];
      cand[j] = cand[j - 1];
      cand[j - 1] = tmp;
    }
  size_t small = c->bytes < ((size_t)1 << 20) ? c->bytes : ((size_t)1 << 20);
  int nNamed = 0;
  for (int i = 0; i < nc && !c->broken && !c->incomplete; i++) {
    int s = cand[i];
    if (s == ref || cleared[s]) continue;
    if (blame[s] == 0 && nNamed > 0) break; /* the blamed are explained */
    int pair[2] = {w->ranks[s], w->ranks[ref]};
    zhTest_t* t = zhNewRankTest(c, "data", 2, pair, ZH_COLL_ALLREDUCE | ZH_COLL_ALLGATHER);
    if (t == NULL) break;
    t->bytes = small;
    zhRunAll(c, 1, &t);
    if (t->failed || t->wrongFrom == NULL) continue;
    int ss = t->ranks[0] == w->ranks[s] ? 0 : 1, sr = 1 - ss;
    uint32_t fromS = t->wrongFrom[(size_t)sr * 2 + ss], fromR = t->wrongFrom[(size_t)ss * 2 + sr];
    int bad[2] = {fromS > 0, fromR > 0};
    int who[2] = {s, ref};
    uint32_t cnt[2] = {fromS, fromR};
    for (int k = 0; k < 2; k++) {
      if (!bad[k]) {
        if (k == 0) cleared[s] = 1;
        continue;
      }
      zhSuspect_t* sp = zhAddSuspect(c, ZH_SUS_RANK, ZH_PROB_WRONG, w->ranks[who[k]], -1);
      if (sp == NULL || sp->nTests > 0) continue;
      sp->tests[sp->nTests++] = w->id;
      sp->tests[sp->nTests++] = t->id;
      snprintf(sp->evidence, sizeof sp->evidence,
               "rank %d received %u wrong elements of %zu from it alone (test %d); in the all-ranks all-gather "
               "(test %d) its block was wrong at %d of %d ranks", w->ranks[who[1 - k]], cnt[k],
               t->bytes / sizeof(uint32_t) / 2, t->id, w->id, blame[who[k]], n - 1);
      nNamed++;
      if (k == 1) { /* the reference itself is bad: choose a cleared one */
        for (int o = 0; o < n; o++)
          if (cleared[o] && o != ref) { ref = o; break; }
      }
    }
  }
  if (nNamed == 0 && !c->broken) {
    zhSuspect_t* sp = zhAddSuspect(c, ZH_SUS_SET, ZH_PROB_WRONG, -1, -1);
    if (sp) {
      sp->tests[sp->nTests++] = w->id;
      snprintf(sp->evidence, sizeof sp->evidence,
               "the all-ranks test (%d) returned %llu wrong elements but no rank sent wrong data alone with a "
               "partner: a fault that needs more ranks, or an intermittent one", w->id,
               (unsigned long long)w->wrong);
    }
  }
out:
  free(blame);
  free(cand);
  free(cleared);
}

/* ---- the run and its verdict -------------------------------------------------------- */

static void zhRankList(const zhCoord_t* c, zhRankState_t st, char* buf, size_t len, int* count) {
  size_t o = 0;
  *count = 0;
  buf[0] = '\0';
  for (int r = 0; r < c->nranks; r++) {
    const zhRankInfo_t* ri = &c->ranks[r];
    if (ri->state != st) continue;
    if (++*count > 4) continue;
    if (o < len)
      o += (size_t)snprintf(buf + o, len - o, "%srank %d (%s): %s", *count > 1 ? "; " : "", r,
                            ri->hello.hostId, ri->why);
  }
  if (*count > 4 && o < len) snprintf(buf + o, len - o, "; and %d more", *count - 4);
}

static void zhVerdict(zhCoord_t* c) {
  char list[3][180];
  int nh = 0, nd = 0, nm = 0;
  zhRankList(c, ZH_RANK_HUNG, list[0], sizeof list[0], &nh);
  zhRankList(c, ZH_RANK_DEAD, list[1], sizeof list[1], &nd);
  zhRankList(c, ZH_RANK_MISSING, list[2], sizeof list[2], &nm);
  for (int r = 0; r < c->nranks; r++) {
    zhRankState_t st = c->ranks[r].state;
    if (st == ZH_RANK_OK) continue;
    zhSuspect_t* s = zhAddSuspect(c, ZH_SUS_RANK, st == ZH_RANK_HUNG ? ZH_PROB_HUNG : ZH_PROB_DEAD, r, -1);
    if (s) snprintf(s->evidence, sizeof s->evidence, "%s%s", st == ZH_RANK_MISSING ? "never joined: " : "",
                    c->ranks[r].why);
  }
  if (nh || nd || nm) {
    c->verdict = ZPP_HEALTH_EXIT_HUNG;
    snprintf(c->reason, sizeof c->reason, "%s%s%s%s%s%s%s%s%s", nh ? "hung: " : "", list[0],
             nh && (nd || nm) ? "; " : "", nd ? "died: " : "", list[1], nd && nm ? "; " : "",
             nm ? "never joined: " : "", list[2], "");
    return;
  }
  const zhTest_t* w = c->worldTest > 0 ? c->tests[c->worldTest - 1] : NULL;
  int slowNamed = 0, wrongNamed = 0;
  for (int i = 0; i < c->nSus; i++) {
    slowNamed += c->sus[i].problem == ZH_PROB_SLOW;
    wrongNamed += c->sus[i].problem == ZH_PROB_WRONG;
  }
  if (wrongNamed || c->wrongSeen) {
    c->verdict = ZPP_HEALTH_EXIT_WRONG;
    size_t o = (size_t)snprintf(c->reason, sizeof c->reason, "wrong data:");
    for (int i = 0; i < c->nSus && o < sizeof c->reason; i++) {
      const zhSuspect_t* s = &c->sus[i];
      if (s->problem != ZH_PROB_WRONG) continue;
      if (s->kind == ZH_SUS_RANK)
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " rank %d (%s) sends wrong data;", s->a,
                              c->ranks[s->a].hello.hostId);
      else
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " %s;", s->evidence);
    }
    if (o > 0 && o < sizeof c->reason && c->reason[o - 1] == ';') c->reason[o - 1] = '\0';
    return;
  }
  if (w == NULL || w->failed || w->trials[0] == 0) {
    c->verdict = ZPP_HEALTH_EXIT_ERROR;
    snprintf(c->reason, sizeof c->reason, "the all-ranks test did not complete: %s",
             w && w->error[0] ? w->error : "time limit");
    return;
  }
  char req[48], got[48];
  zhFormatRate(c->required, req, sizeof req);
  zhFormatRate(w->median[0], got, sizeof got);
  if (slowNamed) {
    c->verdict = ZPP_HEALTH_EXIT_SLOW;
    size_t o = (size_t)snprintf(c->reason, sizeof c->reason, "slow:");
    for (int i = 0; i < c->nSus && o < sizeof c->reason; i++) {
      const zhSuspect_t* s = &c->sus[i];
      char rate[48];
      zhFormatRate(s->busbw, rate, sizeof rate);
      if (s->problem != ZH_PROB_SLOW) continue;
      if (s->kind == ZH_SUS_NODE)
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " %s %s at %s,",
                              c->unitsAreNodes ? "node" : "rank", zhUnitName(c, s->a), rate);
      else if (s->kind == ZH_SUS_LINK)
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " link %s-%s at %s,", zhUnitName(c, s->a),
                              zhUnitName(c, s->b), rate);
      else
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " %d nodes together (%s),", s->nSet,
                              "each half passes");
    }
    if (o < sizeof c->reason)
      snprintf(c->reason + o, sizeof c->reason - o, " expected >= %s busbw (all ranks: %s)", req, got);
    return;
  }
  if (w->median[0] < c->required) {
    c->verdict = ZPP_HEALTH_EXIT_SLOW;
    snprintf(c->reason, sizeof c->reason, "slow: all-reduce busbw %s is below %s; %s", got, req,
             !c->a->localize ? "not localized (--no-localize)"
             : c->incomplete ? "not localized before the time limit"
                             : "no single node or link found to blame");
    return;
  }
  c->verdict = ZPP_HEALTH_EXIT_OK;
  snprintf(c->reason, sizeof c->reason, "healthy: all-reduce busbw %s >= %s required", got, req);
  if (w->judged && !w->pass)
    zhNote(c, "some all-ranks trials fell below the threshold (lowest %.4g GB/s) but no node or link was "
           "confirmed slow", w->min[0]);
}

static void zhSaveBaseline(zhCoord_t* c) {
  const zppHealthArgs_t* a = c->a;
  if (!a->saveBaselinePath) return;
  if (c->verdict != ZPP_HEALTH_EXIT_OK) {
    zhNote(c, "baseline not saved: only a healthy run makes a baseline");
    return;
  }
  const zhTest_t* w = c->tests[c->worldTest - 1];
  zppHealthBaseline_t b;
  memset(&b, 0, sizeof b);
  b.ranks = c->nranks;
  b.nodes = c->nNodes;
  b.bytes = w->bytes;
  b.allreduceBusbw = w->median[0];
  b.allgatherBusbw = w->median[1];
  if (strcmp(c->expectFrom, "point-to-point") == 0) b.p2pBusbw = c->expect;
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(b.created, sizeof b.created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char err[300];
  if (zppHealthSaveBaseline(a->saveBaselinePath, &b, err, sizeof err) != 0) {
    fprintf(stderr, "zpp-health: %s\n", err);
    c->verdict = ZPP_HEALTH_EXIT_USAGE;
    snprintf(c->reason, sizeof c->reason, "usage: %s", err);
  } else {
    zhNote(c, "baseline saved to %s", a->saveBaselinePath);
  }
}

int zhCoordRun(zhCoord_t* c) {
  const zppHealthArgs_t* a = c->a;
  c->limitAt = c->t0 + a->timeLimitSec;
  c->expectFrom = "";
  int missing = 0;
  for (int r = 0; r < c->nranks; r++) missing += c->ranks[r].state == ZH_RANK_MISSING;
  if (a->expectFrom == ZH_EXPECT_BASELINE) {
    char err[400];
    if (zppHealthLoadBaseline(a->baselinePath, &c->baseline, err, sizeof err) != 0) {
      c->verdict = ZPP_HEALTH_EXIT_USAGE;
      snprintf(c->reason, sizeof c->reason, "usage: %s", err);
      return c->verdict;
    }
    c->haveBaseline = 1;
    if (c->baseline.ranks != c->nranks || c->baseline.nodes != c->nNodes)
      zhNote(c, "the baseline was made with %d ranks on %d nodes, this run has %d on %d", c->baseline.ranks,
             c->baseline.nodes, c->nranks, c->nNodes);
  }
  if (!missing) {
    c->phase = "all ranks";
    int* all = malloc((size_t)c->nUnits * sizeof(int));
    for (int u = 0; all && u < c->nUnits; u++) all[u] = u;
    zhTest_t* w = all ? zhNewTest(c, "world", c->nUnits, all, ZH_COLL_ALLREDUCE | ZH_COLL_ALLGATHER) : NULL;
    free(all);
    if (w) {
      w->bytes = a->sizeBytes ? a->sizeBytes : c->haveBaseline ? c->baseline.bytes : 0;
      if (!a->sizeBytes && c->haveBaseline) zhNote(c, "size %zu B from the baseline", w->bytes);
      c->worldTest = w->id;
      zhRunBatch(c, 1, &w);
      c->bytes = w->bytes;
      if (!c->broken && c->wrongSeen && a->localize) zhLocalizeWrong(c);
      if (!c->broken && !c->wrongSeen && !w->failed) {
        zhMeasureExpectation(c);
        if (a->localize && !c->broken && w->judged && !w->pass) zhLocalizeSlow(c);
      }
    }
  }
  zhVerdict(c);
  zhSaveBaseline(c);
  return c->verdict;
}
