"""FSDP2 step time over gloo, zpp plain and zpp ZeRO++ (qwZ int8 + qgZ int4),
interleaved in rounds in one run, with the bytes that crossed node links.

Run by perf/torch-fsdp/torch-fsdp-bench.sh inside perf/emucluster/emucluster.sh (one process per
rank, torchrun-style environment). Not a test: it prints a table and writes
JSON (--json); the model is tests/torch/fsdp_model.py's, wider.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "torch"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import fsdp_model  # noqa: E402
import torch_zpp  # noqa: E402


def link_tx_bytes():
    """Bytes this node's link sent (its namespace's interface): what crossed
    nodes, whatever the backend, headers included."""
    iface = os.environ.get("EMUCLUSTER_IFACE")
    if not iface:
        return 0
    with open("/sys/class/net/%s/statistics/tx_bytes" % iface) as f:
        return int(f.read())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5, help="steps per run; the first is warm-up")
    p.add_argument("--d", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--bsz", type=int, default=1)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--json")
    a = p.parse_args()

    dist.init_process_group("gloo")
    ctl = dist.new_group(backend="gloo")  # reports and timing, not measured
    rank, W = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    groups = {
        "gloo": dist.group.WORLD,
        "zpp plain": dist.new_group(backend="zpp"),
        "zpp ZeRO++": dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
            qwz_bits=8, qgz_bits=4, compress_min_bytes=0)),
    }
    res = {k: {"step_s": [], "link_bytes_per_step": [], "zpp_inter_bytes_per_step": [],
               "final_loss": []} for k in groups}
    for rnd in range(a.rounds):
        for name, g in groups.items():
            if name != "gloo":
                torch_zpp.reset_stats(g)
            dist.barrier(group=ctl)
            tx0 = link_tx_bytes() if local == 0 else 0
            losses, times = fsdp_model.train(g, a.steps, bsz=a.bsz, d=a.d, layers=a.layers,
                                             seq=a.seq, report_group=ctl)
            dist.barrier(group=ctl)
            tx = torch.tensor([float(link_tx_bytes() - tx0 if local == 0 else 0)])
            # a step lasts as long as its slowest rank
            st = torch.tensor(times, dtype=torch.float64)
            dist.all_reduce(st, op=dist.ReduceOp.MAX, group=ctl)
            dist.all_reduce(tx, group=ctl)
            inter = 0.0
            if name != "gloo":
                s = torch_zpp.stats(g)
                inter = float(sum(v["inter_node_bytes"] for v in s.values()))
            it = torch.tensor([inter])
            dist.all_reduce(it, group=ctl)
            r = res[name]
            r["step_s"] += st[1:].tolist()
            r["link_bytes_per_step"].append(tx.item() / a.steps)
            r["zpp_inter_bytes_per_step"].append(it.item() / a.steps)
            r["final_loss"].append(losses[-1])
            if rank == 0:
                print("round %d %-11s median step %.3f s, link bytes/step %.1f MB" % (
                    rnd, name, statistics.median(st[1:].tolist()), tx.item() / a.steps / 1e6),
                    flush=True)
    if rank == 0:
        nparams = fsdp_model.nparams(d=a.d, layers=a.layers, seq=a.seq)
        print("\nFSDP2, %d ranks, %.1fM params fp32, batch %dx%d, %d rounds x %d steps (first "
              "of each run not timed)" % (W, nparams / 1e6, a.bsz, a.seq, a.rounds, a.steps - 1))
        print("%-11s %10s %10s %16s %16s" % ("backend", "step s", "vs gloo", "link MB/step",
                                              "zpp inter MB/st"))
        g = statistics.median(res["gloo"]["step_s"])
        summary = {"params": nparams, "ranks": W, "args": vars(a), "backends": {}}
        for name, r in res.items():
            m = statistics.median(r["step_s"])
            lb = statistics.median(r["link_bytes_per_step"])
            zb = statistics.median(r["zpp_inter_bytes_per_step"])
            print("%-11s %10.3f %9.2fx %16.1f %16s" % (name, m, g / m, lb / 1e6,
                                                      "-" if name == "gloo" else "%.1f" % (zb / 1e6)))
            summary["backends"][name] = dict(r, median_step_s=m, speedup_vs_gloo=g / m,
                                             median_link_bytes_per_step=lb)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(summary, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
