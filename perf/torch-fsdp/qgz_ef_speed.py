"""The cost of error feedback on one qgZ reduce-scatter, through torch_zpp.

4 local ranks as 2 nodes x 2 (loopback: this times the host work, not a link),
one fp32 reduce-scatter of --count output elements per rank (the input is 4
times that), int4 and int2, unrotated and rotated, each without a residual
(torch_zpp.qgz_reduce_scatter(bits=B)) and with one (residual=GradResidual):
the median of --reps calls after one untimed, the slowest rank's. Not a test:
docs/pytorch.md ("Error feedback in FSDP2") quotes its output.

  source build/torch/env.sh
  PYTHONPATH=$ZPP_TORCH_SITE OMP_NUM_THREADS=1 $ZPP_TORCH_PYTHON perf/torch-fsdp/qgz_ef_speed.py
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
import launch  # noqa: E402


def body(rank, args):
    import torch
    import torch.distributed as dist

    import torch_zpp

    dist.init_process_group("zpp")
    W = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    n = args.count
    x = torch.randn(W * n, generator=torch.Generator().manual_seed(rank))
    out = torch.empty(n)
    if rank == 0:
        print("%d ranks, %d output elements per rank (%.0f MB fp32 input), median of %d calls"
              % (W, n, 4 * W * n / 1e6, args.reps))
        print("%-8s %5s %12s %12s %7s" % ("rotate", "bits", "plain ms", "EF ms", "EF/plain"))
    for rotate in (False, True):
        g = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(rotate=rotate))
        for bits in (4, 2):
            r = torch_zpp.GradResidual(n, torch.float32, bits, g)
            row = []
            for residual in (None, r):
                def call():
                    if residual is None:
                        torch_zpp.qgz_reduce_scatter(out, x, bits=bits, group=g)
                    else:
                        torch_zpp.qgz_reduce_scatter(out, x, residual=residual, group=g)

                call()
                ts = []
                for _ in range(args.reps):
                    dist.barrier(group=gloo)
                    t0 = time.perf_counter()
                    call()
                    ts.append(time.perf_counter() - t0)
                t = torch.tensor([statistics.median(ts)])
                dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
                row.append(1e3 * t.item())
            if rank == 0:
                print("%-8s %5d %12.1f %12.1f %6.1fx" % (rotate, bits, row[0], row[1], row[1] / row[0]),
                      flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        body(args.rank, args)
        return 0
    return launch.spawn(os.path.abspath(__file__), "2x2",
                        ["--count", str(args.count), "--reps", str(args.reps)], timeout=600)


if __name__ == "__main__":
    sys.exit(main())
