"""Step time over gloo, zpp plain, zpp ZeRO++ (qwZ int8 + qgZ int4) and zpp with
4-bit weights and gradients, rotated (qwZ int4 + qgZ int4, ZPP_QUANT_ROTATE), with
the bytes that crossed node links, for FSDP2 and for DeepSpeed ZeRO-3, in one run.
FSDP2 has two more rows: 4-bit weights as differences (torch_zpp.fsdp.delta_weights)
with qgZ int4, and the same weights with 2-bit gradients and error feedback
(torch_zpp.fsdp.error_feedback; FSDP2 only: DeepSpeed has no residual per gradient
buffer, docs/pytorch.md).

Run by perf/torch-fsdp/torch-fsdp-bench.sh inside perf/emucluster/emucluster.sh (one process per
rank, torchrun-style environment). Not a test: it prints a table per framework and writes JSON
(--json). The model is tests/torch/fsdp_model.py's, wider.

FSDP2 takes its backend per process group, so its three runs share this process and alternate
within each round. DeepSpeed takes the default process group's backend, and zpp reads ZeRO++'s
settings from the environment that DeepSpeed's users set: so each DeepSpeed run is a process of
its own per rank (this script with --ds-worker, its own rendezvous port), launched by this one,
the three backends alternating within each round as well.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import fsdp_model  # noqa: E402
import torch_zpp  # noqa: E402

ZEROPP = dict(qwz_bits=8, qgz_bits=4, compress_min_bytes=0)
INT4_ROTATED = dict(qwz_bits=4, qgz_bits=4, compress_min_bytes=0, rotate=True)
# 4-bit weights as differences (torch_zpp.fsdp): the group's own all-gathers stay plain.
DELTA4_ROTATED = dict(qgz_bits=4, compress_min_bytes=0, rotate=True)
# The same weights, 2-bit rotated gradients with error feedback: the group
# refuses a reduce-scatter without a residual, so every one goes through one.
EF2_ROTATED = dict(qgz_bits=2, qgz_error_feedback=True, compress_min_bytes=0, rotate=True)


def zpp_env(opts):
    """The environment that sets what torch_zpp.Options(**opts) sets."""
    names = {"qwz_bits": "ZPP_QWZ_BITS", "qgz_bits": "ZPP_QGZ_BITS",
             "compress_min_bytes": "ZPP_COMPRESS_MIN_BYTES", "rotate": "ZPP_QUANT_ROTATE"}
    return {names[k]: str(int(v)) for k, v in opts.items()}


# DeepSpeed runs: (init_distributed's backend, the environment added). The
# zpp settings are FSDP2's, set the way a DeepSpeed user sets them.
DS_RUNS = {
    "gloo": ("gloo", {}),
    "zpp plain": ("zpp", {}),
    "zpp ZeRO++": ("zpp", zpp_env(ZEROPP)),
    "zpp 4-bit rot": ("zpp", zpp_env(INT4_ROTATED)),
}
DS_RUN_TIMEOUT_S = 900


def link_tx_bytes():
    """Bytes this node's link sent (its namespace's interface): what crossed
    nodes, whatever the backend, headers included."""
    iface = os.environ.get("EMUCLUSTER_IFACE")
    if not iface:
        return 0
    with open("/sys/class/net/%s/statistics/tx_bytes" % iface) as f:
        return int(f.read())


def node_tx_bytes():
    """The node's link counter, read by one rank per node (the others 0), so
    that a sum over ranks counts every node once."""
    return link_tx_bytes() if int(os.environ.get("LOCAL_RANK", "0")) == 0 else 0


def new_result():
    return {"step_s": [], "link_bytes_per_step": [], "zpp_inter_bytes_per_step": [],
            "final_loss": [], "escapes": [], "escape_overflows": []}


def add_run(r, step_s, link_bytes, zpp_inter_bytes, final_loss, steps, codec=(0, 0)):
    """One run of one backend: per-step times of the slowest rank (the first
    step, warm-up, dropped), per-step byte counts summed over ranks, and the
    codecs' escapes and escape overflows of the run summed over ranks
    (docs/codecs.md, "Escapes": an overflowing block keeps its outliers, and
    with them its scale)."""
    r["step_s"] += step_s[1:]
    r["link_bytes_per_step"].append(link_bytes / steps)
    r["zpp_inter_bytes_per_step"].append(zpp_inter_bytes / steps)
    r["final_loss"].append(final_loss)
    r["escapes"].append(codec[0])
    r["escape_overflows"].append(codec[1])


def codec_counts(group=None):
    """This rank's [escapes, escape overflows] since the last reset_stats."""
    c = torch_zpp.codec_stats(group)
    return [float(c["escapes"]), float(c["escape_overflows"])]


def bench_fsdp2(a, ctl):
    """FSDP2 over gloo (the default group), zpp plain and zpp ZeRO++ groups."""
    groups = {
        "gloo": dist.group.WORLD,
        "zpp plain": dist.new_group(backend="zpp"),
        "zpp ZeRO++": dist.new_group(backend="zpp", pg_options=torch_zpp.Options(**ZEROPP)),
        "zpp 4-bit rot": dist.new_group(backend="zpp",
                                        pg_options=torch_zpp.Options(**INT4_ROTATED)),
        "zpp 4-bit delta": dist.new_group(backend="zpp",
                                          pg_options=torch_zpp.Options(**DELTA4_ROTATED)),
        "zpp d4 + 2-bit EF": dist.new_group(backend="zpp",
                                            pg_options=torch_zpp.Options(**EF2_ROTATED)),
    }
    delta_bits = {"zpp 4-bit delta": 4, "zpp d4 + 2-bit EF": 4}
    ef_bits = {"zpp d4 + 2-bit EF": 2}
    res = {k: new_result() for k in groups}
    for rnd in range(a.rounds):
        for name, g in groups.items():
            if name != "gloo":
                torch_zpp.reset_stats(g)
            dist.barrier(group=ctl)
            tx0 = node_tx_bytes()
            losses, times = fsdp_model.train(g, a.steps, bsz=a.bsz, d=a.d, layers=a.layers,
                                             seq=a.seq, report_group=ctl,
                                             delta_bits=delta_bits.get(name),
                                             ef_bits=ef_bits.get(name))
            dist.barrier(group=ctl)
            tx = torch.tensor([float(node_tx_bytes() - tx0)])
            st = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(st, op=dist.ReduceOp.MAX, group=ctl)  # a step lasts as long as its slowest rank
            dist.all_reduce(tx, group=ctl)
            inter, codec = 0.0, [0.0, 0.0]
            if name != "gloo":
                inter = float(sum(v["inter_node_bytes"] for v in torch_zpp.stats(g).values()))
                codec = codec_counts(g)
            it = torch.tensor([inter] + codec, dtype=torch.float64)
            dist.all_reduce(it, group=ctl)
            add_run(res[name], st.tolist(), tx.item(), it[0].item(), losses[-1], a.steps,
                    (int(it[1].item()), int(it[2].item())))
            progress(ctl, "fsdp2", rnd, name, st.tolist(), tx.item() / a.steps)
    for name, g in groups.items():
        if name != "gloo":
            dist.destroy_process_group(g)  # nothing of zpp's left running beside DeepSpeed's runs
    return res


def bench_deepspeed(a, ctl):
    """DeepSpeed ZeRO-3 runs, each a process per rank (ds_worker), their
    results gathered over ctl."""
    rank = dist.get_rank()
    base_port = int(os.environ["MASTER_PORT"])
    res = {k: new_result() for k in DS_RUNS}
    out = tempfile.mkdtemp(prefix="zpp-ds-bench-")
    for rnd in range(a.rounds):
        for i, (name, (_, env)) in enumerate(DS_RUNS.items()):
            # A port per run: a rendezvous never meets a previous run's store.
            port = base_port + 1 + rnd * len(DS_RUNS) + i
            path = os.path.join(out, "run%d.%d.json" % (rnd, i))
            cmd = [sys.executable, os.path.abspath(__file__), "--ds-worker", name, "--ds-out", path,
                   "--steps", str(a.steps), "--d", str(a.d), "--layers", str(a.layers),
                   "--bsz", str(a.bsz), "--seq", str(a.seq)]
            e = dict(os.environ, MASTER_PORT=str(port), DS_ACCELERATOR="cpu", **env)
            dist.barrier(group=ctl)
            try:
                code = subprocess.call(cmd, env=e, timeout=DS_RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = "timed out after %d s" % DS_RUN_TIMEOUT_S
            mine = None
            if code == 0:
                with open(path) as f:
                    mine = json.load(f)
            else:
                print("rank %d: DeepSpeed run %r (round %d) failed: %s" % (rank, name, rnd, code),
                      file=sys.stderr, flush=True)
            every = [None] * dist.get_world_size()
            dist.all_gather_object(every, mine, group=ctl)
            if any(r is None for r in every):
                raise SystemExit("DeepSpeed run %r failed on rank(s) %s; their output is above"
                                 % (name, [i for i, r in enumerate(every) if r is None]))
            steps = len(every[0]["step_s"])
            st = [max(r["step_s"][s] for r in every) for s in range(steps)]
            tx = sum(r["tx_bytes"] for r in every)
            inter = sum(r["zpp_inter_bytes"] for r in every)
            loss = sum(r["final_loss"] for r in every) / len(every)
            codec = (sum(r["escapes"] for r in every), sum(r["escape_overflows"] for r in every))
            add_run(res[name], st, tx, inter, loss, a.steps, codec)
            skipped = [r["skipped"] for r in every]
            if any(skipped):
                raise SystemExit("DeepSpeed run %r skipped steps %s (overflow): its timing is not "
                                 "a training step's" % (name, skipped))
            progress(ctl, "deepspeed", rnd, name, st, tx / a.steps)
    return res


def ds_worker(a):
    """One rank of one DeepSpeed run: times each step, counts the bytes, and
    writes this rank's figures to --ds-out."""
    import deepspeed
    import ds_zero3

    backend = DS_RUNS[a.ds_worker][0]
    deepspeed.init_distributed(dist_backend=backend, timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    engine, data = ds_zero3.make_engine(d=a.d, layers=a.layers, seq=a.seq, micro_batch=a.bsz)
    if backend == "zpp":
        torch_zpp.reset_stats()
    dist.barrier()
    tx0 = node_tx_bytes()
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        loss = ds_zero3.train_step(engine, data, rank, step, a.bsz, a.seq)
        times.append(time.perf_counter() - t0)
    dist.barrier()
    res = {"step_s": times, "tx_bytes": node_tx_bytes() - tx0, "final_loss": loss.item(),
           "skipped": engine.skipped_steps, "zpp_inter_bytes": 0, "escapes": 0,
           "escape_overflows": 0}
    if backend == "zpp":
        res["zpp_inter_bytes"] = sum(v["inter_node_bytes"] for v in torch_zpp.stats().values())
        res["escapes"], res["escape_overflows"] = (int(v) for v in codec_counts())
    with open(a.ds_out, "w") as f:
        json.dump(res, f)
    dist.barrier()
    dist.destroy_process_group()


def progress(ctl, framework, rnd, name, step_s, link_bytes_per_step):
    if dist.get_rank(ctl) == 0:
        print("%-9s round %d %-17s median step %.3f s, link bytes/step %.1f MB" % (
            framework, rnd, name, statistics.median(step_s[1:]), link_bytes_per_step / 1e6),
            flush=True)


def table(title, res, extra):
    """Prints one framework's table; returns its JSON summary."""
    print("\n" + title)
    print("%-17s %10s %10s %16s %16s %12s %12s" % ("backend", "step s", "vs gloo", "link MB/step",
                                                    "zpp inter MB/st", "escapes/run",
                                                    "overflows/run"))
    g = statistics.median(res["gloo"]["step_s"])
    summary = dict(extra, backends={})
    for name, r in res.items():
        m = statistics.median(r["step_s"])
        lb = statistics.median(r["link_bytes_per_step"])
        zb = statistics.median(r["zpp_inter_bytes_per_step"])
        gloo = name == "gloo"
        print("%-17s %10.3f %9.2fx %16.1f %16s %12s %12s" % (
            name, m, g / m, lb / 1e6, "-" if gloo else "%.1f" % (zb / 1e6),
            "-" if gloo else "%d" % statistics.median(r["escapes"]),
            "-" if gloo else "%d" % statistics.median(r["escape_overflows"])))
        summary["backends"][name] = dict(r, median_step_s=m, speedup_vs_gloo=g / m,
                                         median_link_bytes_per_step=lb)
    return summary


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5, help="steps per run; the first is warm-up")
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--bsz", type=int, default=1)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--frameworks", default="fsdp2,deepspeed",
                   help="comma-separated: fsdp2, deepspeed (default both)")
    p.add_argument("--json")
    p.add_argument("--ds-worker", choices=sorted(DS_RUNS), help=argparse.SUPPRESS)
    p.add_argument("--ds-out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.ds_worker:
        ds_worker(a)
        return
    frameworks = a.frameworks.split(",")
    unknown = set(frameworks) - {"fsdp2", "deepspeed"}
    if unknown:
        p.error("--frameworks takes fsdp2 and deepspeed, not %s" % ",".join(sorted(unknown)))
    if a.steps < 2:
        p.error("--steps must be at least 2 (the first step of each run is not timed)")

    dist.init_process_group("gloo")
    ctl = dist.new_group(backend="gloo")  # reports and timing, not measured
    W = dist.get_world_size()
    results = {}
    if "fsdp2" in frameworks:
        results["fsdp2"] = bench_fsdp2(a, ctl)
    if "deepspeed" in frameworks:
        results["deepspeed"] = bench_deepspeed(a, ctl)
    if dist.get_rank() == 0:
        nparams = fsdp_model.nparams(d=a.d, layers=a.layers, seq=a.seq)
        shape = ("%d ranks, %.1fM params fp32, batch %dx%d, %d rounds x %d steps (first of each "
                 "run not timed)" % (W, nparams / 1e6, a.bsz, a.seq, a.rounds, a.steps - 1))
        extra = {"params": nparams, "ranks": W, "args": vars(a)}
        summary = {}
        if "fsdp2" in results:
            summary["fsdp2"] = table("FSDP2, " + shape, results["fsdp2"], extra)
        if "deepspeed" in results:
            summary["deepspeed"] = table("DeepSpeed ZeRO-3, " + shape, results["deepspeed"], extra)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
