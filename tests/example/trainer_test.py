#!/usr/bin/env python3
"""Tests of the example ZeRO-3 trainer, zpp-train (label example).

    trainer_test.py ZPP_TRAIN CASE [EMUCLUSTER_SH]

One case per ctest entry, each a few seconds on 2 shared cores:

  single     plain collectives: N ranks follow the one-rank loss curve within a
             tolerance derived from float summation order (below); reruns are
             bit for bit identical
  zeropp     qwZ + hpZ + qgZ against plain on 2 nodes of 2 ranks: final loss
             within 2%, no divergence, the ZeRO++ volumes, determinism
  wlayout    --weight-layout in-out and out-in compute the same model: plain
             losses agree within a summation-order tolerance (below)
  delta      --qwz-delta (4-bit weight differences) against plain and against
             stateless 4-bit weights: closer to plain, no weights across nodes
             in the backward gathers
  outputs    the JSON and the SVG exist and parse, with both curves
  args       bad arguments: exit 2 and a message that names the problem
  launch     ranks from RANK/WORLD_SIZE/MASTER_* and from mpirun
  emucluster the trainer across perf/emucluster/emucluster.sh's namespaces (needs root,
             else skipped)

Exit 0 pass, 1 fail, 77 skipped.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pylib"))
import tempfile
import xml.etree.ElementTree as ET

from zpptest import SKIP, check, free_master_port  # noqa: E402
from zpptest import Fail as Failure  # noqa: E402

# A small model: about 45 thousand parameters, milliseconds per step.
SMALL = ["--hidden", "128", "--embed", "16", "--context", "8", "--batch", "64"]


def run(cmd, expect=0, timeout=120, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env)
    if expect is not None and p.returncode != expect:
        raise Failure("%s\nexit %d, expected %d\nstdout:\n%s\nstderr:\n%s" %
                      (" ".join(cmd), p.returncode, expect, p.stdout[-3000:], p.stderr[-3000:]))
    return p


def train(exe, tmp, name, args, **kw):
    path = os.path.join(tmp, name + ".json")
    run([exe] + args + ["-q", "--json", path], **kw)
    with open(path) as f:
        return json.load(f)


def losses(doc, i=0):
    return [s["loss"] for s in doc["runs"][i]["steps"]]


# ---------------------------------------------------------------------------

def case_single(exe, tmp):
    """Plain collectives, fp32 on the wire: N ranks against one.

    Tolerance, from float summation order (u = 2^-24 for fp32, 2^-53 for
    double; gamma_n = n u / (1 - n u), Higham's bound for a sum of n+1 terms
    in ANY order: |fl(sum) - sum| <= gamma_n * sum |terms|):

    1. What differs. Every per-sample quantity (activations, deltas, the
       sample's loss) depends only on the sample and the weights, computed in
       a fixed order (examples/model.h), so it is bit for bit the same on any
       rank count while the weights are. The plain all-gather moves fp32
       weights unchanged, and Adam works elementwise. The ONLY arithmetic
       that differs is the order of the sums over samples: one rank sums the
       B per-sample gradient contributions in one pass; N ranks sum B/N each
       and the reduce-scatter adds the N partial sums in its own order, then
       divides by N (a power of two here, exact; each rank scales its
       contributions by 1/(B/N) = N/B, which differs from 1/B by the same
       power of two, also exact).

    2. Step 1 (same weights, same per-sample losses). The reported loss is
       (1/B) sum_b loss_b, summed in double; both runs sum the same B
       non-negative values in different trees, so
           |L_N - L_1| <= 2 gamma_{B-1}(double) L_1  (= 1.4e-14 L_1 for B = 64).

    3. Later steps. Each gradient element g = (1/B) sum_b t_b is, in both
       runs, within gamma_{B-1}(fp32) sum_b |t_b| / B of the exact value, so
       the two runs' gradients differ by at most
           rho = 2 gamma_{B-1}(fp32) = 7.5e-6  (B = 64)
       relative to the element's absolute mass. Adam's step m/sqrt(v) does
       not depend on the scale of the gradient (epsilon aside: elements whose
       gradient is below epsilon = 1e-8 move the loss only to second order),
       so each update, and to first order each step's change of the loss,
       is perturbed by at most rho relative. Accumulated linearly over the
       steps (first order, no amplification over a short run):
           |L_N(k) - L_1(k)| <= (k - 1) rho L_1(k)      for step k >= 2.
       At k = 40 that is 2.9e-4 relative. A bug in sharding, padding or
       averaging (a wrong divisor, a shard off by one, a stale weight) moves
       the loss by 1e-3 or more within a few steps, far outside it.
       (Measured on this machine: at most about 2e-8 over 40 steps.)
    """
    steps = 40
    B = 64
    args = ["--plain", "--dtype", "fp32", "--steps", str(steps), "--seed", "7"] + SMALL
    one = losses(train(exe, tmp, "one", args))
    check(len(one) == steps, "one rank: %d steps in the JSON" % len(one))

    def gamma(n, u):
        return n * u / (1 - n * u)

    step1 = 2 * gamma(B - 1, 2.0 ** -53)
    rho = 2 * gamma(B - 1, 2.0 ** -24)
    for layout in ["2x2", "1x2", "4x1"]:
        doc = train(exe, tmp, "n" + layout, ["--layout", layout] + args)
        n = doc["ranks"]
        cur = losses(doc)
        worst = 0.0
        for k, (a, b) in enumerate(zip(one, cur), start=1):
            check(all(math.isfinite(x) for x in (a, b)), "layout %s step %d: loss %r / %r" % (layout, k, a, b))
            rel = abs(b - a) / a
            tol = step1 if k == 1 else (k - 1) * rho
            check(rel <= tol, "layout %s (%d ranks) step %d: loss %.17g against one rank's %.17g: "
                  "relative difference %.3g > tolerance %.3g" % (layout, n, k, b, a, rel, tol))
            worst = max(worst, rel)
        print("single: %s, %d ranks: largest relative difference to one rank %.3g over %d steps "
              "(tolerance at step %d: %.3g)" % (layout, n, worst, steps, steps, (steps - 1) * rho))
    again = losses(train(exe, tmp, "again", ["--layout", "2x2"] + args))
    check(again == losses(json.load(open(os.path.join(tmp, "n2x2.json")))),
          "two runs with the same seed on 2x2 differ: not deterministic")
    print("single: 2x2 rerun identical bit for bit")


def case_zeropp(exe, tmp):
    """qwZ + hpZ + qgZ against plain, 2 nodes of 2 ranks, bf16 on the wire."""
    steps = 200
    args = ["--layout", "2x2", "--compare", "--steps", str(steps), "--seed", "3"] + SMALL
    doc = train(exe, tmp, "cmp", args)
    plain, zpp = doc["runs"]
    check(plain["mode"] == "plain" and zpp["mode"] == "zeropp", "runs: %s, %s" % (plain["mode"], zpp["mode"]))
    check(zpp["qwz_bits"] == 8 and zpp["qgz_bits"] == 4 and zpp["hpz"], "ZeRO++ settings: %r" % zpp)
    for r in (plain, zpp):
        ls = losses({"runs": [r]})
        check(len(ls) == steps, "%s: %d steps" % (r["mode"], len(ls)))
        check(all(x is not None and math.isfinite(x) for x in ls), "%s: non-finite loss" % r["mode"])
        # From log(75) = 4.32 (a uniform guess); a model that learned nothing
        # stays there, one that diverged goes up or to NaN.
        last = sum(ls[-10:]) / 10
        check(last < 0.7 * ls[0], "%s: loss %.4f -> %.4f (mean of the last 10): did not decrease "
              "substantially" % (r["mode"], ls[0], last))
        check(r["final_val_loss"] is not None and r["final_val_loss"] < 0.75 * ls[0],
              "%s: held-out loss %r" % (r["mode"], r["final_val_loss"]))
        check(0 <= r["hidden_share"] <= 1 and r["comm_busy_s_per_step"] >= 0 and
              r["comm_exposed_s_per_step"] >= 0, "%s: overlap numbers %r" % (r["mode"], r))
    # "Final loss": the mean of the last 10 training losses (one batch is
    # noisy) and the held-out loss (1024 fixed windows), both within 2%.
    lp, lz = sum(losses(doc, 0)[-10:]) / 10, sum(losses(doc, 1)[-10:]) / 10
    vp, vz = plain["final_val_loss"], zpp["final_val_loss"]
    check(abs(lz - lp) / lp <= 0.02, "final training loss: ZeRO++ %.5f against plain %.5f (%+.2f%%)"
          % (lz, lp, 100 * (lz - lp) / lp))
    check(abs(vz - vp) / vp <= 0.02, "held-out loss: ZeRO++ %.5f against plain %.5f (%+.2f%%)"
          % (vz, vp, 100 * (vz - vp) / vp))
    print("zeropp: last-10 training loss %.5f plain, %.5f ZeRO++ (%+.2f%%); held-out %.5f / %.5f (%+.2f%%)"
          % (lp, lz, 100 * (lz - lp) / lp, vp, vz, 100 * (vz - vp) / vp))
    # The ZeRO++ path really ran: quantized bytes, nothing across nodes in
    # the backward gathers, far fewer bytes across nodes than plain.
    bp, bz = plain["bytes_per_step"], zpp["bytes_per_step"]
    ops = bz["by_op"]
    check(set(ops) >= {"qwz", "hpz", "qgz"}, "ZeRO++ byte counters: %r" % ops)
    # Across nodes only the stale-weights handshake (24 bytes per rank and
    # other group per gather), no weights.
    check(ops["hpz"]["inter_node"] < 0.02 * ops["hpz"]["intra_node"] and ops["hpz"]["intra_node"] > 0,
          "hpZ backward gathers crossed nodes: %r" % ops["hpz"])
    check(bz["inter_node"] < 0.35 * bp["inter_node"],
          "ZeRO++ moved %.0f bytes across nodes per step, plain %.0f" % (bz["inter_node"], bp["inter_node"]))
    check("qwz" not in bp["by_op"] and "qgz" not in bp["by_op"], "plain run used compression: %r" % bp)
    print("zeropp: bytes across nodes per step %.0f plain, %.0f ZeRO++ (%.2f)"
          % (bp["inter_node"], bz["inter_node"], bz["inter_node"] / bp["inter_node"]))
    again = train(exe, tmp, "again", ["--layout", "2x2", "--zeropp", "--steps", "30", "--seed", "3"] + SMALL)
    check(losses(again) == losses(doc, 1)[:30], "ZeRO++ rerun with the same seed differs: not deterministic")
    print("zeropp: rerun identical bit for bit")



def case_wlayout(exe, tmp):
    """--weight-layout in-out against out-in: the same model, two storage orders.

    Plain collectives, fp32 on the wire, on one rank and on 2x2. Both layouts
    draw the initial weights in [out][in] order (in-out stores them
    transposed), and in both every per-sample quantity is computed from the
    sample and the weights; what differs is the ORDER of the sums inside each
    sample's products: a layer's output o sums its in products and the bias
    (out-in: a dot product of eight partial sums; in-out: one running sum over
    i), and the delta flowing back sums out products. With u = 2^-24 and
    gamma_n = n u / (1 - n u), each such sum is within gamma_n of the exact
    one relative to its absolute mass in either order, so the layouts differ
    by at most rho = 2 gamma_n, n = the longest sum (129 terms for this
    model: C E = 128 inputs and the bias; H = 128). The sums over samples
    (the weight gradients) run in the same order in both.

    First order, as in case single: the forward passes three such layers in
    series (tanh and the softmax's log-sum-exp are 1-Lipschitz), so the loss
    of step 1 differs by at most 3 rho relative; each later step adds the
    perturbation of three layers forward and three backward to the update
    (Adam's m/sqrt(v) does not depend on the gradient's scale), accumulated
    linearly over a short run:
        |L_io(k) - L_oi(k)| <= (3 + 6 (k - 1)) rho L_oi(k).
    At k = 30 that is 2.8e-3 relative, at k = 1 4.6e-5. Weights left in the
    wrong order anywhere change the model, far outside it: with the initial
    draw not transposed, step 1 differed by 6.0e-3 (tolerance 4.6e-5); with
    in-out's weight gradient written in the other order, step 2 by 4.2e-3
    (tolerance 1.4e-4). (Measured on this machine: at most 3.3e-8 over 30
    steps, one rank and 2x2.)
    """
    steps = 30
    args = ["--plain", "--dtype", "fp32", "--steps", str(steps), "--seed", "7"] + SMALL
    n = 129
    u = 2.0 ** -24
    rho = 2 * n * u / (1 - n * u)
    for ranks in [[], ["--layout", "2x2"]]:
        where = "2x2" if ranks else "one rank"
        docs = {}
        for layout in ["out-in", "in-out"]:
            docs[layout] = train(exe, tmp, "wl" + layout + str(len(ranks)),
                                 ranks + args + ["--weight-layout", layout])
            got = docs[layout]["model"].get("weight_layout")
            check(got == layout, "%s, --weight-layout %s: the JSON says %r" % (where, layout, got))
        oi, io = losses(docs["out-in"]), losses(docs["in-out"])
        check(len(oi) == steps and len(io) == steps, "%s: %d / %d steps" % (where, len(oi), len(io)))
        worst = 0.0
        for k, (a, b) in enumerate(zip(oi, io), start=1):
            check(math.isfinite(a) and math.isfinite(b), "%s step %d: loss %r / %r" % (where, k, a, b))
            rel = abs(b - a) / a
            tol = (3 + 6 * (k - 1)) * rho
            check(rel <= tol, "%s step %d: in-out loss %.17g against out-in's %.17g: relative "
                  "difference %.3g > tolerance %.3g" % (where, k, b, a, rel, tol))
            worst = max(worst, rel)
        va = docs["out-in"]["runs"][0]["final_val_loss"]
        vb = docs["in-out"]["runs"][0]["final_val_loss"]
        tol = (3 + 6 * steps) * rho
        check(abs(vb - va) <= tol * va, "%s: held-out loss in-out %.17g against out-in %.17g (tolerance "
              "%.3g relative)" % (where, vb, va, tol))
        print("wlayout: %s, in-out against out-in: largest relative difference %.3g over %d steps "
              "(tolerance at step %d: %.3g); held-out %.3g" %
              (where, worst, steps, steps, (3 + 6 * (steps - 1)) * rho, abs(vb - va) / va))
    for bad in ["inout", "IN-OUT", ""]:
        p = run([exe, "--weight-layout", bad], expect=2, timeout=60)
        msg = "--weight-layout '%s': expected out-in" % bad
        check(msg in p.stderr, "--weight-layout %r: stderr lacks %r:\n%s" % (bad, msg, p.stderr))
        check(p.stdout == "", "--weight-layout %r printed on stdout: %s" % (bad, p.stdout))
    print("wlayout: 3 bad --weight-layout values refused with exit 2 and a reason")


def case_outputs(exe, tmp):
    jpath = os.path.join(tmp, "out.json")
    run([exe, "-N", "2", "--compare", "--steps", "12", "--eval-every", "5", "-q", "--json", jpath] + SMALL)
    svg = os.path.join(tmp, "out.svg")
    check(os.path.exists(jpath) and os.path.exists(svg), "missing %s or its picture %s" % (jpath, svg))
    doc = json.load(open(jpath))
    for key in ("tool", "ranks", "nodes", "model", "train", "runs", "comparison"):
        check(key in doc, "JSON without %r" % key)
    check(doc["tool"] == "zpp-train" and doc["ranks"] == 2 and len(doc["runs"]) == 2, "JSON head: %r" %
          {k: doc[k] for k in ("tool", "ranks")})
    for r in doc["runs"]:
        check(len(r["steps"]) == 12 and [s["step"] for s in r["steps"]] == list(range(1, 13)),
              "%s: steps %r" % (r["mode"], [s["step"] for s in r["steps"]]))
        for s in r["steps"]:
            for k in ("loss", "time_s", "comm_busy_s", "comm_exposed_s", "compute_s"):
                check(isinstance(s[k], (int, float)) and s[k] >= 0,
                      "%s step %d: %s = %r" % (r["mode"], s["step"], k, s[k]))
        check([e["step"] for e in r["evals"]] == [5, 10, 12], "%s: evals at %r" % (r["mode"], r["evals"]))
    check(doc["comparison"]["speedup"] > 0, "comparison: %r" % doc["comparison"])
    root = ET.parse(svg).getroot()
    check(root.tag.endswith("svg"), "SVG root is %s" % root.tag)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(".//%spolyline" % ns)
    classes = sorted(pl.get("class") for pl in lines)
    check(classes == ["loss"] * 2 + ["loss-mean"] * 2 + ["time"] * 2,
          "SVG curves %r: expected loss, its running mean and time, for plain and ZeRO++" % classes)
    for pl in lines:
        pts = pl.get("points").split()
        check(len(pts) == 12, "SVG curve with %d points" % len(pts))
        for p in pts:
            x, y = (float(v) for v in p.split(","))
            check(math.isfinite(x) and math.isfinite(y), "SVG point %s" % p)
    text = " ".join(t.text or "" for t in root.iter("%stext" % ns))
    check("plain" in text and "ZeRO++" in text, "SVG legend lacks the two runs: %s" % text[:300])
    # Four runs: plain and ZeRO++, with and without overlap. Overlap changes
    # when bytes move, never what is computed: the same losses bit for bit.
    jpath4 = os.path.join(tmp, "four.json")
    run([exe, "-N", "2", "--compare-overlap", "--steps", "6", "-q", "--json", jpath4] + SMALL)
    four = json.load(open(jpath4))
    check([(r["mode"], r["overlap"]) for r in four["runs"]] ==
          [("plain", True), ("zeropp", True), ("plain", False), ("zeropp", False)],
          "--compare-overlap runs: %r" % [(r["mode"], r["overlap"]) for r in four["runs"]])
    check(losses(four, 2) == losses(four, 0) and losses(four, 3) == losses(four, 1),
          "losses with and without overlap differ")
    for k in ("speedup_no_overlap", "overlap_gain_plain", "overlap_gain_zeropp"):
        check(four["comparison"].get(k, 0) > 0, "comparison without %s: %r" % (k, four["comparison"]))
    check(len(ET.parse(os.path.join(tmp, "four.svg")).getroot().findall(".//%spolyline" % ns)) == 12,
          "four runs: 12 curves")
    # An explicit --svg path, one run.
    other = os.path.join(tmp, "pic.svg")
    run([exe, "--plain", "--steps", "3", "-q", "--svg", other] + SMALL)
    check(len(ET.parse(other).getroot().findall(".//%spolyline" % ns)) == 3, "one run: 3 curves")
    # An output that cannot be written: an error, after the training.
    p = run([exe, "--plain", "--steps", "2", "-q", "--json", os.path.join(tmp, "no", "such", "dir.json")] + SMALL,
            expect=1)
    check("cannot write" in p.stderr, "unwritable JSON: %s" % p.stderr)
    print("outputs: JSON and SVG parse, 2 runs x 12 steps, 6 curves; 4 runs with and without "
          "overlap, same losses")


def case_args(exe, tmp):
    p = run([exe, "--help"])
    check("Usage: zpp-train" in p.stdout, "--help: %s" % p.stdout[:200])
    bad = [
        (["--steps", "0"], "--steps '0'"),
        (["--steps", "ten"], "--steps 'ten'"),
        (["--lr", "-1"], "--lr '-1'"),
        (["--dtype", "fp16"], "--dtype 'fp16'"),
        (["--qwz-bits", "6"], "bits are 8, 4 or 0"),
        (["--plain", "--qgz-bits", "4"], "make no sense with --plain"),
        (["--plain", "--compare"], "exclude each other"),
        (["--compare-overlap", "--no-overlap"], "drop --no-overlap"),
        (["--interleave", "-1"], "--interleave '-1'"),
        (["--layout", "2x"], "--layout '2x'"),
        (["--layout", "0x2"], "--layout '0x2'"),
        (["-N", "3", "--layout", "2x2"], "does not match --layout"),
        (["-N", "0"], "-N '0'"),
        (["-N", "300"], "-N '300'"),
        (["--frobnicate"], "unknown option '--frobnicate'"),
        (["--steps"], "--steps needs a value"),
        (["extra"], "unexpected argument 'extra'"),
        (["--data", os.path.join(tmp, "missing.txt")], "cannot open the corpus"),
        (["-N", "3", "--batch", "64", "--steps", "1"], "does not divide by 3 ranks"),
        (["--prefetch", "9"], "--prefetch '9'"),
        (["--weight-layout", "io"], "--weight-layout 'io'"),
        (["--qwz-delta", "--qwz-bits", "0"], "it needs --qwz-bits 8 or 4"),
        (["--plain", "--qwz-delta"], "make no sense with --plain"),
    ]
    tiny = os.path.join(tmp, "tiny.txt")
    with open(tiny, "w") as f:
        f.write("too short\n")
    bad.append((["--data", tiny], "too short"))
    for args, msg in bad:
        p = run([exe] + args, expect=2, timeout=60)
        check(msg in p.stderr, "zpp-train %s: stderr lacks %r:\n%s" % (" ".join(args), msg, p.stderr))
        check(p.stdout == "", "zpp-train %s printed on stdout: %s" % (" ".join(args), p.stdout))
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    p = run([exe, "-N", "2"], expect=2, env=env)
    check("do not combine it with mpirun" in p.stderr, "-N under a launcher: %s" % p.stderr)
    print("args: %d bad invocations refused with exit 2 and a reason" % (len(bad) + 1))



def case_delta(exe, tmp):
    """qwZ int4 of weight differences against plain and against stateless qwZ int4.

    The differences are small, so their rounding is: the delta run's loss
    curve follows plain's more closely than the stateless run's (summed
    absolute difference of the training losses), and ends within 1% of it.
    Its backward gathers copy the reference: only hpZ's handshake crosses
    nodes, and only the forward gathers carry weights.
    """
    steps = 120
    base = ["--layout", "2x2", "--compare", "--steps", str(steps), "--seed", "5", "--qwz-bits", "4",
            "--interleave", "0"] + SMALL
    stateless = train(exe, tmp, "stateless", base)
    delta = train(exe, tmp, "delta", base + ["--qwz-delta"])
    plain, dz = delta["runs"]
    check(dz["qwz_delta"] is True and stateless["runs"][1]["qwz_delta"] is False,
          "qwz_delta in the JSON: %r / %r" % (dz.get("qwz_delta"), stateless["runs"][1].get("qwz_delta")))
    check(losses(stateless, 0) == losses(delta, 0), "the plain runs differ")
    lp = losses(delta, 0)
    gap_delta = sum(abs(a - b) for a, b in zip(losses(delta, 1), lp))
    gap_stateless = sum(abs(a - b) for a, b in zip(losses(stateless, 1), lp))
    check(gap_delta < gap_stateless, "delta's losses are farther from plain (%.4f summed) than stateless "
          "qwZ int4's (%.4f)" % (gap_delta, gap_stateless))
    vp, vd = plain["final_val_loss"], dz["final_val_loss"]
    check(abs(vd - vp) / vp <= 0.01, "held-out loss: delta %.5f against plain %.5f (%+.2f%%)"
          % (vd, vp, 100 * (vd - vp) / vp))
    ops = dz["bytes_per_step"]["by_op"]
    check(ops["hpz"]["inter_node"] < 0.02 * ops["qwz"]["inter_node"],
          "delta backward gathers crossed nodes: %r" % ops)
    print("delta: summed |loss - plain| over %d steps: %.4f delta, %.4f stateless int4; held-out %+.2f%%"
          % (steps, gap_delta, gap_stateless, 100 * (vd - vp) / vp))


def case_elastic(exe, tmp):
    """--elastic: a node's ranks SIGKILLed during a step; training goes on, the same.

    The survivors shrink, go back to the last step every rank committed, grow back with
    replacement processes, and put the optimizer state together from the shards and the buddies'
    copies. The state comes back exactly and the batches come from the seed, so "the same
    training" is strict here: every step's loss and the held-out loss equal, bit for bit, those of
    the uninterrupted run. On 2x2 the lost node is node 1, then node 0 (which held rank 0: the
    ranks are renumbered); on 3x2 in plain mode, the middle node.
    """
    steps = 30
    for layout, mode, batch, kills in (("2x2", "--zeropp", "64", (("1", "11"), ("0", "23"))),
                                       ("3x2", "--plain", "60", (("1", "7"),))):
        base = ["--layout", layout, mode, "--elastic", "--steps", str(steps), "--seed", "3"] + SMALL[:-1] + [batch]
        whole = train(exe, tmp, "whole-" + layout, base)["runs"][0]
        check(whole["recoveries"] == 0, "recoveries without a kill: %r" % whole["recoveries"])
        for node, step in kills:
            out = run([exe] + base + ["--kill-node", node, "--kill-step", step, "--json",
                                      os.path.join(tmp, "kill.json")]).stdout
            # In that step, or (steps shorter than the one before them, on a busy machine) soon after.
            m = re.search(r"lost in step (\d+); shrink to \d+ ranks .*back to step", out)
            check(m and int(step) <= int(m.group(1)) <= int(step) + 3,
                  "no recovery line for node %s in steps %s-%d:\n%s" % (node, step, int(step) + 3, out))
            with open(os.path.join(tmp, "kill.json")) as f:
                hit = json.load(f)["runs"][0]
            check(hit["recoveries"] == 1 and 1 <= hit["steps_redone"] <= 2,
                  "recoveries %r, steps redone %r" % (hit["recoveries"], hit["steps_redone"]))
            check([s["loss"] for s in hit["steps"]] == [s["loss"] for s in whole["steps"]],
                  "%s, node %s lost in step %s: the losses differ from the uninterrupted run's" % (layout, node, step))
            check(hit["final_val_loss"] == whole["final_val_loss"], "held-out loss %r, uninterrupted %r"
                  % (hit["final_val_loss"], whole["final_val_loss"]))
            print("elastic %s %s: node %s lost in step %s, recovered in %.2f s (%d step(s) done again); "
                  "losses equal to the uninterrupted run's" % (layout, mode, node, step, hit["recovery_s"],
                                                               hit["steps_redone"]))
    # Bad use: a clear usage error.
    for bad, says in ((["--layout", "2x2", "--kill-node", "1", "--kill-step", "3"], "add it"),
                      (["--layout", "2x2", "--elastic", "--compare"], "one mode"),
                      (["-N", "4", "--elastic"], "two nodes or more"),
                      (["--layout", "2x2", "--elastic", "--kill-node", "2", "--kill-step", "3"], "no such node"),
                      (["--layout", "2x2", "--elastic", "--kill-step", "3"], "go together")):
        out = run([exe] + bad, expect=2).stderr
        check(says in out, "%r: no %r in:\n%s" % (bad, says, out))


def case_launch(exe, tmp):
    # torchrun-style environment: two processes started here.
    port = free_master_port()
    path = os.path.join(tmp, "env.json")
    secret = os.urandom(16).hex()  # zppCommInitFromEnv refuses to start without one
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), ZPP_TIMEOUT="60", ZPP_SECRET=secret)
        procs.append(subprocess.Popen([exe, "--zeropp", "--steps", "5", "-q", "--json", path] + SMALL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    for r, p in enumerate(procs):
        out, err = p.communicate(timeout=90)
        check(p.returncode == 0, "env launch rank %d: exit %d\n%s%s" % (r, p.returncode, out, err))
    doc = json.load(open(path))
    check(doc["launcher"] == "env" and doc["ranks"] == 2, "env launch: %r" % {k: doc[k] for k in ("launcher", "ranks")})
    print("launch: RANK/WORLD_SIZE: 2 ranks")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("launch: no mpirun, that part skipped")
        return
    path = os.path.join(tmp, "mpi.json")
    cmd = [mpirun, "-np", "2", "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    run(cmd + [exe, "--plain", "--steps", "5", "-q", "--json", path] + SMALL, timeout=90)
    doc = json.load(open(path))
    check(doc["launcher"] == "mpirun" and doc["ranks"] == 2, "mpirun: %r" % {k: doc[k] for k in ("launcher", "ranks")})
    print("launch: mpirun: 2 ranks")


def case_emucluster(exe, tmp, script):
    if os.geteuid() != 0:
        print("emucluster: needs root (network namespaces): skipped")
        return SKIP
    path = os.path.join(tmp, "emu.json")
    p = run([script, "-q", "-n", "2", "-l", "2", "-r", "1gbit", "--no-check-rate", "--timeout", "100", "--",
             exe, "--compare", "--steps", "10", "-q", "--json", path] + SMALL, expect=None, timeout=150)
    if p.returncode == SKIP:
        print("emucluster: cannot build namespaces here: skipped\n" + p.stderr[-500:])
        return SKIP
    check(p.returncode == 0, "emucluster run: exit %d\n%s\n%s" % (p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    doc = json.load(open(path))
    check(doc["ranks"] == 4 and doc["nodes"] == 2 and doc["launcher"] == "env", "emucluster: %r" %
          {k: doc[k] for k in ("ranks", "nodes", "launcher")})
    plain, zpp = doc["runs"]
    hpz = zpp["bytes_per_step"]["by_op"]["hpz"]
    check(hpz["inter_node"] < 0.02 * hpz["intra_node"], "hpZ crossed nodes: %r" % hpz)
    check(zpp["bytes_per_step"]["inter_node"] < 0.35 * plain["bytes_per_step"]["inter_node"],
          "ZeRO++ bytes across nodes %r against %r" % (zpp["bytes_per_step"], plain["bytes_per_step"]))
    print("emucluster: 2 nodes x 2 ranks, speed-up %.2fx, loss %+.2f%%" %
          (doc["comparison"]["speedup"], 100 * doc["comparison"]["final_loss_rel_diff"]))


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    exe, case = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="zpp-train-test-")
    try:
        if case == "emucluster":
            rc = case_emucluster(exe, tmp, sys.argv[3])
        else:
            rc = {"single": case_single, "zeropp": case_zeropp, "outputs": case_outputs,
                  "args": case_args, "launch": case_launch,
                  "wlayout": case_wlayout, "delta": case_delta, "elastic": case_elastic}[case](exe, tmp)
        return rc or 0
    except Failure as e:
        print("FAIL %s: %s" % (case, e))
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
