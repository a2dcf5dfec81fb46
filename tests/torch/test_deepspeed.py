"""DeepSpeed ZeRO-3 (from PyPI, CPU accelerator) trains the FSDP test's small
transformer on 4 ranks as 2 nodes x 2, through gloo and through zpp:

  gloo       deepspeed.init_distributed(dist_backend="gloo"), the reference;
  plain      dist_backend="zpp" (after `import torch_zpp`), nothing else changed;
  zeropp     the same with ZPP_QWZ_BITS=8 ZPP_QGZ_BITS=4 in the environment: zpp
             runs DeepSpeed's weight all-gathers as qwZ and its gradient
             reduce-scatters as qgZ;
  hpz        plain zpp with DeepSpeed's own hpZ ("zero_hpz_partition_size": 2,
             one secondary partition per node).

fp32 (this CPU has no fp16 for DeepSpeed; its stage 3 checks overflow in fp16
only), set up by ds_zero3.py (shared with the benchmark in perf/torch-fsdp).
Checked:
  - every run: losses and gradient norms finite at every step, no skipped step
    (engine.skipped_steps, and no "OVERFLOW" in DeepSpeed's output);
  - plain against gloo: the first-step loss is the same bits (the forward uses
    gathered weights, exact copies), every later step's loss within the
    summation-order tolerance (1e-4 relative: the reduce-scatters are fp32
    sums of the same 4 terms in another order, amplified a little by Adam);
  - zeropp: final loss within 1 % of plain, and zpp's counters show qwZ and qgZ
    calls on the world group (compression engaged);
  - hpz: every step's loss within 1e-4 of plain (hpZ moves exact copies), and
    DeepSpeed's secondary-partition group (ranks of one node) gathered inside
    the node only.

    test_deepspeed.py [LAYOUT] [--steps N]
"""
import argparse
import importlib.metadata
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import launch

HERE = os.path.dirname(os.path.abspath(__file__))
DEEPSPEED_VERSION = "0.19.8"  # scripts/setup-torch-extras.sh installs it

RUNS = {
    "gloo": ("gloo", {}, {}),
    "plain": ("zpp", {}, {}),
    "zeropp": ("zpp", {"ZPP_QWZ_BITS": "8", "ZPP_QGZ_BITS": "4"}, {}),
    "hpz": ("zpp", {}, {"zero_hpz_partition_size": 2}),
}


def body(rank, run, steps, out):
    import deepspeed
    import ds_zero3
    import torch.distributed as dist

    import torch_zpp

    backend, _, zero_extra = RUNS[run]
    deepspeed.init_distributed(dist_backend=backend)
    W = dist.get_world_size()
    engine, data = ds_zero3.make_engine(zero_extra, d=256, layers=2, seq=64, micro_batch=8)
    if backend == "zpp":
        torch_zpp.reset_stats()
    losses, norms = [], []
    for step in range(steps):
        loss = ds_zero3.train_step(engine, data, rank, step, 8, 64)
        losses.append(loss.item())
        norms.append(float(engine.get_global_grad_norm()))
    res = {"rank": rank, "world": W, "losses": losses, "norms": norms,
           "skipped": engine.skipped_steps, "global_steps": engine.global_steps}
    if backend == "zpp":
        res["stats"] = torch_zpp.stats()
        if "zero_hpz_partition_size" in zero_extra:
            from deepspeed.utils import groups
            res["hpz_stats"] = torch_zpp.stats(groups._get_zero_param_intra_parallel_group())
            res["hpz_topology"] = torch_zpp.topology(groups._get_zero_param_intra_parallel_group())
    with open(os.path.join(out, "%s.%d.json" % (run, rank)), "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()


def launch_run(run, layout, steps, out):
    """All ranks of one run; returns (status, DeepSpeed's output)."""
    env = dict(RUNS[run][1], DS_ACCELERATOR="cpu")
    log = os.path.join(out, run + ".log")
    cmd = [sys.executable, os.path.abspath(__file__), layout, "--steps", str(steps), "--out", out,
           "--run", run, "--spawn"]
    e = dict(os.environ, **env)
    with open(log, "w") as f:
        status = subprocess.call(cmd, env=e, stdout=f, stderr=subprocess.STDOUT)
    with open(log) as f:
        text = f.read()
    return status, text


def mean_over_ranks(out, run, key, world):
    per = [json.load(open(os.path.join(out, "%s.%d.json" % (run, r))))[key] for r in range(world)]
    return [sum(v[i] for v in per) / world for i in range(len(per[0]))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("layout", nargs="?", default="2x2")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rank", type=int)
    p.add_argument("--run", choices=sorted(RUNS))
    p.add_argument("--out")
    p.add_argument("--spawn", action="store_true")
    a = p.parse_args()
    if a.rank is not None:
        body(a.rank, a.run, a.steps, a.out)
        return 0
    if a.spawn:
        return launch.spawn(os.path.abspath(__file__), a.layout,
                            ["--run", a.run, "--steps", str(a.steps), "--out", a.out], timeout=600)
    script = os.path.join(HERE, "..", "..", "scripts", "setup-torch-extras.sh")
    if subprocess.call(["bash", script, sys.executable, "deepspeed"]) != 0:
        print("SKIPPED: DeepSpeed %s is not installed in this torch environment and could not be "
              "(scripts/setup-torch-extras.sh)" % DEEPSPEED_VERSION)
        return 77
    version = importlib.metadata.version("deepspeed")
    if version != DEEPSPEED_VERSION:
        print("note: DeepSpeed %s, tested with %s" % (version, DEEPSPEED_VERSION))
    nodes, per = (int(x) for x in a.layout.split("x"))
    world = nodes * per
    out = tempfile.mkdtemp(prefix="zpp-deepspeed-")
    failures = []
    res = {}
    for run in RUNS:
        status, text = launch_run(run, a.layout, a.steps, out)
        if status != 0:
            print(text[-6000:])
            failures.append("%s: the ranks failed (exit %d); output above" % (run, status))
            continue
        if "OVERFLOW" in text:
            failures.append("%s: DeepSpeed reported an overflow (skipped step)" % run)
        ranks = [json.load(open(os.path.join(out, "%s.%d.json" % (run, r)))) for r in range(world)]
        res[run] = {"losses": mean_over_ranks(out, run, "losses", world),
                    "norms": ranks[0]["norms"], "ranks": ranks}
        skipped = [r["skipped"] for r in ranks]
        if any(skipped):
            failures.append("%s: skipped steps per rank %s" % (run, skipped))
        for key in ("losses", "norms"):
            bad = [i for i, v in enumerate(res[run][key]) if not math.isfinite(v)]
            if bad:
                failures.append("%s: %s not finite at steps %s: %s" % (run, key, bad, res[run][key]))
        print("%-7s loss %s" % (run, " ".join("%.6f" % v for v in res[run]["losses"])))
        print("%-7s grad norm %s" % (run, " ".join("%.4f" % v for v in res[run]["norms"])), flush=True)

    def rel(x, y):
        return abs(x - y) / abs(y)

    if "gloo" in res and "plain" in res:
        g, z = res["gloo"]["losses"], res["plain"]["losses"]
        if g[0] != z[0]:
            failures.append("plain: first-step loss %r is not gloo's %r" % (z[0], g[0]))
        worst = max(rel(x, y) for x, y in zip(z, g))
        print("plain vs gloo: largest relative loss difference %.2e" % worst)
        if worst > 1e-4:
            failures.append("plain: loss differs from gloo's by %.2e relative (> 1e-4)" % worst)
        if g[-1] > g[0] - 0.3:
            failures.append("gloo: training made no progress: %s" % g)
    if "zeropp" in res and "plain" in res:
        d = rel(res["zeropp"]["losses"][-1], res["plain"]["losses"][-1])
        print("zeropp vs plain: final loss %.6f vs %.6f, %.3f %%"
              % (res["zeropp"]["losses"][-1], res["plain"]["losses"][-1], 100 * d))
        if d > 0.01:
            failures.append("zeropp: final loss more than 1 %% from plain's (%.3f %%)" % (100 * d))
        for r in res["zeropp"]["ranks"]:
            st = r["stats"]
            if st["qwz"]["calls"] == 0 or st["qgz"]["calls"] == 0:
                failures.append("zeropp: rank %d made no qwZ or qgZ call: %s" % (r["rank"], st))
        tot = {k: {f: sum(r["stats"][k][f] for r in res["zeropp"]["ranks"]) for f in st}
               for k, st in res["zeropp"]["ranks"][0]["stats"].items()}
        print("zeropp, all ranks: qwZ %d calls, qgZ %d calls, plain all-gather %d, reduce-scatter %d;"
              " inter-node MB qwZ %.2f qgZ %.2f plain all-gather %.2f"
              % (tot["qwz"]["calls"], tot["qgz"]["calls"], tot["allgather"]["calls"],
                 tot["reducescatter"]["calls"], tot["qwz"]["inter_node_bytes"] / 1e6,
                 tot["qgz"]["inter_node_bytes"] / 1e6, tot["allgather"]["inter_node_bytes"] / 1e6))
    if "hpz" in res and "plain" in res:
        worst = max(rel(x, y) for x, y in zip(res["hpz"]["losses"], res["plain"]["losses"]))
        print("hpz vs plain: largest relative loss difference %.2e" % worst)
        if worst > 1e-4:
            failures.append("hpz: loss differs from plain's by %.2e relative (> 1e-4)" % worst)
        for r in res["hpz"]["ranks"]:
            ag = r["hpz_stats"]["allgather"]
            if r["hpz_topology"]["nodes"] != 1 or ag["calls"] == 0 or ag["inter_node_bytes"] != 0:
                failures.append("hpz: rank %d's secondary group is not one node gathering inside it:"
                                " %s %s" % (r["rank"], r["hpz_topology"], ag))
        print("hpz rank 0: secondary group all-gathers %d calls, %.1f MB intra-node"
              % (res["hpz"]["ranks"][0]["hpz_stats"]["allgather"]["calls"],
                 res["hpz"]["ranks"][0]["hpz_stats"]["allgather"]["intra_node_bytes"] / 1e6))
    for f in failures:
        print("FAIL " + f)
    print("deepspeed %s: %s" % (version, "FAILED" if failures else "passed"))
    if not failures:
        shutil.rmtree(out, ignore_errors=True)  # kept, with each run's log, when something failed
    else:
        print("outputs and logs: %s" % out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
