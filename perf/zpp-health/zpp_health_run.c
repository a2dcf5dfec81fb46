/*
 * Rank 0's run from start to verdict: the all-ranks test, then the search
 * (zpp_health_locate.c) or, when data came back wrong, the search for the
 * rank that sends it; the verdict with its one-line reason; the baseline.
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

#include "zpp_health.h"

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
               "rank %d received %u wrong elements of %zu from it alone (test %d); in the all-ranks "
               "all-gather "
               "(test %d) its block was wrong at %d of %d ranks",
               w->ranks[who[1 - k]], cnt[k], t->bytes / sizeof(uint32_t) / 2, t->id, w->id,
               blame[who[k]], n - 1);
      nNamed++;
      if (k == 1) { /* the reference itself is bad: choose a cleared one */
        for (int o = 0; o < n; o++)
          if (cleared[o] && o != ref) {
            ref = o;
            break;
          }
      }
    }
  }
  if (nNamed == 0 && !c->broken) {
    zhSuspect_t* sp = zhAddSuspect(c, ZH_SUS_SET, ZH_PROB_WRONG, -1, -1);
    if (sp) {
      sp->tests[sp->nTests++] = w->id;
      snprintf(sp->evidence, sizeof sp->evidence,
               "the all-ranks test (%d) returned %llu wrong elements but no rank sent wrong data alone "
               "with a "
               "partner: a fault that needs more ranks, or an intermittent one",
               w->id, (unsigned long long)w->wrong);
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
    zhSuspect_t* s =
        zhAddSuspect(c, ZH_SUS_RANK, st == ZH_RANK_HUNG ? ZH_PROB_HUNG : ZH_PROB_DEAD, r, -1);
    if (s && c->ranks[r].lostTest > 0 && s->nTests == 0) s->tests[s->nTests++] = c->ranks[r].lostTest;
    if (s)
      snprintf(s->evidence, sizeof s->evidence, "%s%.340s%s%.239s",
               st == ZH_RANK_MISSING ? "never joined: " : "", c->ranks[r].why,
               c->ranks[r].seen[0] ? "; " : "", c->ranks[r].seen);
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
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " rank %d (%s) sends wrong data;",
                              s->a, c->ranks[s->a].hello.hostId);
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
  /* Without a measured pair the "expectation" would be the all-ranks rate
   * itself, which passes any cluster: no verdict then. */
  int noPairs = c->a->expectFrom == ZH_EXPECT_P2P && c->nUnits > 2 &&
                strcmp(c->expectFrom, "point-to-point") != 0;
  if (!(c->expect > 0) || noPairs) {
    c->verdict = ZPP_HEALTH_EXIT_ERROR;
    snprintf(c->reason, sizeof c->reason, "no expectation: %s",
             c->incomplete ? "the time limit came before any pair of nodes was measured (--time-limit)"
                           : "no pair of nodes could be measured");
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
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " %s%s at %s,",
                              c->unitsAreNodes ? "node " : "", zhUnitName(c, s->a), rate);
      else if (s->kind == ZH_SUS_LINK)
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " link %s-%s at %s,",
                              zhUnitName(c, s->a), zhUnitName(c, s->b), rate);
      else
        o += (size_t)snprintf(c->reason + o, sizeof c->reason - o, " %d nodes together (%s),", s->nSet,
                              "each half passes");
    }
    char loc[48];
    zhFormatRate(c->requiredLocal, loc, sizeof loc);
    if (o < sizeof c->reason)
      snprintf(c->reason + o, sizeof c->reason - o, " below %s (all ranks: %s, healthy at >= %s)", loc,
               got, req);
    return;
  }
  if (w->median[0] < c->required) {
    c->verdict = ZPP_HEALTH_EXIT_SLOW;
    snprintf(c->reason, sizeof c->reason, "slow: all-reduce busbw %s is below %s; %s", got, req,
             !c->a->localize ? "not localized (--no-localize)"
             : c->incomplete
                 ? "not localized before the time limit"
                 : "no node or link is clearly slower than its peers (--localize-threshold)");
    return;
  }
  c->verdict = ZPP_HEALTH_EXIT_OK;
  snprintf(c->reason, sizeof c->reason, "healthy: all-reduce busbw %s >= %s required", got, req);
  if (w->judged && !w->pass)
    zhNote(c,
           "some all-ranks trials fell below the threshold (lowest %.4g GB/s) but no node or link was "
           "confirmed slow",
           w->min[0]);
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
      zhNote(c, "the baseline was made with %d ranks on %d nodes, this run has %d on %d",
             c->baseline.ranks, c->baseline.nodes, c->nranks, c->nNodes);
  }
  if (!missing) {
    c->phase = "all ranks";
    int* all = malloc((size_t)c->nUnits * sizeof(int));
    for (int u = 0; all && u < c->nUnits; u++) all[u] = u;
    zhTest_t* w =
        all ? zhNewTest(c, "world", c->nUnits, all, ZH_COLL_ALLREDUCE | ZH_COLL_ALLGATHER) : NULL;
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
        /* Any test below the threshold starts the search, a pair of the
         * measured expectation too: a node slow only some of the time may
         * have let the all-ranks trials pass. */
        int anyFail = 0;
        for (int i = 0; i < c->nTests; i++) anyFail |= c->tests[i]->judged && !c->tests[i]->pass;
        if (a->localize && !c->broken && anyFail) zhLocalizeSlow(c);
      }
    }
  }
  zhVerdict(c);
  zhSaveBaseline(c);
  return c->verdict;
}
