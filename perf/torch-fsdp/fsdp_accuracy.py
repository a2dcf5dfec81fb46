"""How far FSDP2 training with each codec setting ends from plain zpp.

Trains tests/torch/fsdp_model.py's character transformer (the FSDP test's
model) with FSDP2 on 4 local ranks as 2 nodes x 2 (loopback: accuracy does
not depend on the links), once on plain zpp and once per codec setting, from
the same seed and batches. Prints, per setting, the mean training loss over
the last 10, 20 and 50 steps against plain's. Not a test: docs/pytorch.md
("Accuracy of the 4-bit codecs in FSDP2") quotes its output.

  source build/torch/env.sh
  PYTHONPATH=$ZPP_TORCH_SITE OMP_NUM_THREADS=1 \\
      $ZPP_TORCH_PYTHON perf/torch-fsdp/fsdp_accuracy.py --steps 100 [--json F]

A setting is NAME=key:value,key:value with torch_zpp.Options' keys, e.g.
q4g4rot=qwz_bits:4,qgz_bits:4,rotate:1 (the defaults are below, --configs),
delta:B for weight gathers of differences at B bits
(torch_zpp.fsdp.delta_weights; the group's qwz_bits stays 0), and ef:B for
gradients through qgZ at B bits with error feedback
(torch_zpp.fsdp.error_feedback; the group's qgz_bits is not used by those
calls), e.g. ef2rot=ef:2,rotate:1.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "torch"))
import launch  # noqa: E402

DEFAULT_CONFIGS = ("q8g4=qwz_bits:8,qgz_bits:4;"
                   "q8g4rot=qwz_bits:8,qgz_bits:4,rotate:1;"
                   "q4g4=qwz_bits:4,qgz_bits:4;"
                   "q4g4rot=qwz_bits:4,qgz_bits:4,rotate:1;"
                   "d4g4=delta:4,qgz_bits:4;"
                   "d4g4rot=delta:4,qgz_bits:4,rotate:1")


def parse_configs(text):
    out = []
    for item in filter(None, (x.strip() for x in text.split(";"))):
        name, _, kv = item.partition("=")
        opts = {}
        for pair in filter(None, kv.split(",")):
            k, _, v = pair.partition(":")
            opts[k] = bool(int(v)) if k == "rotate" else int(v)
        if not name or not opts:
            raise SystemExit("fsdp_accuracy: bad --configs item '%s': expected NAME=key:value,..."
                             % item)
        out.append((name, opts))
    return out


def body(rank, args):
    import torch.distributed as dist

    import fsdp_model
    import torch_zpp

    dist.init_process_group("zpp")
    gloo = dist.new_group(backend="gloo")
    model = dict(d=args.d, layers=args.layers, bsz=args.bsz, seq=args.seq)
    runs = {"plain": fsdp_model.train(dist.group.WORLD, args.steps, report_group=gloo, **model)[0]}
    for name, opts in parse_configs(args.configs):
        opts = dict(opts)
        delta = opts.pop("delta", None)
        ef = opts.pop("ef", None)
        g = dist.new_group(backend="zpp",
                           pg_options=torch_zpp.Options(compress_min_bytes=0, **opts))
        runs[name] = fsdp_model.train(g, args.steps, report_group=gloo, delta_bits=delta,
                                      ef_bits=ef, **model)[0]
    if rank == 0:
        plain = runs["plain"]
        tails = [n for n in (10, 20, 50) if n <= args.steps]
        print("%-10s %s" % ("setting", "   ".join("last %-2d mean  vs plain" % n for n in tails)))
        table = {}
        for name, losses in runs.items():
            cols, table[name] = [], {"losses": losses}
            for n in tails:
                m, p = sum(losses[-n:]) / n, sum(plain[-n:]) / n
                cols.append("%.4f %+7.2f%%" % (m, 100 * (m / p - 1)))
                table[name]["last%d" % n] = m
            print("%-10s %s" % (name, "   ".join(cols)), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"steps": args.steps, "configs": args.configs, "model": model,
                           "runs": table}, f, indent=1)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help="NAME=key:value,...;NAME=... (default: %(default)s)")
    ap.add_argument("--json", help="write the losses and the tail means here")
    # The model (tests/torch/fsdp_model.py's defaults: the FSDP test's model).
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--bsz", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    parse_configs(args.configs)  # a bad setting stops here, not in four ranks
    if args.rank is not None:
        body(args.rank, args)
        return 0
    fwd = ["--steps", str(args.steps), "--configs", args.configs, "--d", str(args.d),
           "--layers", str(args.layers), "--bsz", str(args.bsz), "--seq", str(args.seq)]
    if args.json:
        fwd += ["--json", os.path.abspath(args.json)]
    return launch.spawn(os.path.abspath(__file__), "2x2", fwd, timeout=60 * args.steps + 600)


if __name__ == "__main__":
    sys.exit(main())
