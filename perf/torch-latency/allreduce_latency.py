"""Latency of a small all_reduce through zpp and through gloo, in one run.

Every world size (--ranks) is one launch of that many local processes
(loopback). Each rank makes the default group with gloo and a second group
with zpp, then, for every size, times --iters blocking all_reduce calls (fp32
SUM) per backend, after --warmup untimed ones; the backends alternate which
goes first from round to round. A row shows the median call time of the
slowest rank, in microseconds, over all rounds, and zpp / gloo (below 1:
zpp is faster).

    perf/torch-latency/torch-latency.sh [-b BUILD_DIR] -- [--ranks 2 4] [--iters 400]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "pylib"))
from zpptest import free_master_port  # noqa: E402

SIZES = [8 * 4**k for k in range(7)] + [64 * 1024]  # 8 B .. 64 KiB


def body(rank, world, a):
    import torch
    import torch.distributed as dist

    import torch_zpp  # noqa: F401

    dist.init_process_group("gloo", rank=rank, world_size=world)
    groups = {"gloo": dist.new_group(backend="gloo"), "zpp": dist.new_group(backend="zpp")}
    times = {}
    for rnd in range(a.rounds):
        order = ["gloo", "zpp"] if rnd % 2 == 0 else ["zpp", "gloo"]
        for size in a.sizes:
            x = torch.zeros(size // 4)
            for name in order:
                g = groups[name]
                for _ in range(a.warmup):
                    dist.all_reduce(x, group=g)
                dist.barrier()
                ts = times.setdefault((name, size), [])
                for _ in range(a.iters):
                    t0 = time.perf_counter_ns()
                    dist.all_reduce(x, group=g)
                    ts.append(time.perf_counter_ns() - t0)
    medians = {k: statistics.median(v) / 1000.0 for k, v in times.items()}
    every = [None] * world
    dist.all_gather_object(every, medians)
    if rank == 0:
        for size in a.sizes:
            gloo = max(m[("gloo", size)] for m in every)
            zpp = max(m[("zpp", size)] for m in every)
            print("%5d %8d %10.1f %10.1f %8.2f" % (world, size, gloo, zpp, zpp / gloo), flush=True)
    dist.destroy_process_group()


def launch(world, a):
    port = free_master_port()
    args = [sys.executable, os.path.abspath(__file__), "--world", str(world),
            "--iters", str(a.iters), "--warmup", str(a.warmup), "--rounds", str(a.rounds),
            "--sizes"] + [str(s) for s in a.sizes]
    procs = []
    for r in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        # Rank 0 prints the rows; gloo's connection notices go to stdout too.
        out = subprocess.PIPE if r == 0 else subprocess.DEVNULL
        procs.append(subprocess.Popen(args + ["--rank", str(r)], env=env, stdout=out, text=True))
    for line in procs[0].stdout:
        if not line.startswith("[Gloo]"):
            print(line, end="", flush=True)
    codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit("allreduce_latency: ranks exited %s" % codes)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="world sizes, one launch each")
    p.add_argument("--iters", type=int, default=400, help="timed calls per size, backend and round")
    p.add_argument("--warmup", type=int, default=40, help="untimed calls before those")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="bytes (multiples of 4)")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.rank is not None:
        body(a.rank, a.world, a)
        return
    load = os.getloadavg()
    print("# all_reduce fp32 SUM, blocking; median us of the slowest rank; %d rounds x %d calls"
          % (a.rounds, a.iters))
    print("# %s, %d cores, load average before %.1f %.1f %.1f"
          % (os.uname().nodename, os.cpu_count(), *load))
    print("%5s %8s %10s %10s %8s" % ("ranks", "bytes", "gloo_us", "zpp_us", "zpp/gloo"), flush=True)
    for world in a.ranks:
        launch(world, a)
    print("# load average after %.1f %.1f %.1f" % os.getloadavg())


if __name__ == "__main__":
    main()
