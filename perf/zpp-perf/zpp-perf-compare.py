#!/usr/bin/env python3
"""Summarise several zpp-perf runs (-J files) that had a baseline.

On a small or shared machine one run's ours/baseline ratio depends on the
state the run fell into (which ranks share a core, what else runs), even with
interleaved rounds; the median over several runs does not. For every row
(collective, mode, type, reduction, size) this prints our and the baseline's
median time over the runs, and the median, lowest and highest ratio
(ours / baseline in busbw, i.e. baseline time / our time).

With --min-ratio R the exit status is 1 when a row's median ratio is below R
(e.g. 0.833: our latency within 1.2x of the baseline's), 0 otherwise; rows
below it are marked. A missing or unreadable file, or runs without a
baseline, exit 2.

    perf/zpp-perf/zpp-perf-compare.py [--min-ratio R] [--json OUT] RUN.json [RUN.json ...]
"""
import argparse
import json
import statistics
import sys


def fail(msg):
    print(f"zpp-perf-compare: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(doc, dict) or doc.get("header", {}).get("tool") != "zpp-perf" or "records" not in doc:
        fail(f"{path}: not a zpp-perf JSON report")
    return doc


def row_key(r):
    return (r["op"], r["mode"], r["dtype"], r.get("redop") or "-", r["bytes"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="zpp-perf -J files")
    ap.add_argument("--min-ratio", type=float, default=None,
                    help="fail (exit 1) when a row's median ratio is below this")
    ap.add_argument("--json", default=None, help="write the summary as JSON here")
    a = ap.parse_args()

    rows = {}
    order = []
    for path in a.runs:
        doc = load(path)
        for r in doc["records"]:
            if r.get("ratio") is None or r.get("baseline_time_us") is None:
                continue
            k = row_key(r)
            if k not in rows:
                rows[k] = {"ours": [], "base": [], "ratio": [], "baseline": r.get("baseline")}
                order.append(k)
            rows[k]["ours"].append(r["time_us"])
            rows[k]["base"].append(r["baseline_time_us"])
            rows[k]["ratio"].append(r["ratio"])
    if not rows:
        print("zpp-perf-compare: no row has a baseline (run zpp-perf with --baseline)", file=sys.stderr)
        return 2

    print(f"# {len(a.runs)} runs; times: median over runs of each run's median, us; "
          "ratio: ours/baseline busbw (baseline time / our time)")
    print(f"# {'op':<14}{'mode':<7}{'type':<10}{'redop':<6}{'bytes':>10}{'runs':>6}"
          f"{'ours us':>10}{'base us':>10}{'ratio':>8}{'min':>7}{'max':>7}")
    failed = []
    summary = []
    for k in order:
        v = rows[k]
        med = statistics.median(v["ratio"])
        low = a.min_ratio is not None and med < a.min_ratio
        if low:
            failed.append(k)
        op, mode, dtype, redop, nbytes = k
        print(f"  {op:<14}{mode:<7}{dtype:<10}{redop:<6}{nbytes:>10}{len(v['ratio']):>6}"
              f"{statistics.median(v['ours']):>10.2f}{statistics.median(v['base']):>10.2f}"
              f"{med:>8.2f}{min(v['ratio']):>7.2f}{max(v['ratio']):>7.2f}"
              f"{'  BELOW ' + format(a.min_ratio, 'g') if low else ''}")
        summary.append({"op": op, "mode": mode, "dtype": dtype, "redop": redop, "bytes": nbytes,
                        "baseline": v["baseline"], "runs": len(v["ratio"]),
                        "time_us_median": statistics.median(v["ours"]),
                        "baseline_time_us_median": statistics.median(v["base"]),
                        "ratio_median": med, "ratio_min": min(v["ratio"]),
                        "ratio_max": max(v["ratio"]), "below_min_ratio": low})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": a.runs, "min_ratio": a.min_ratio, "rows": summary}, f, indent=1)
    if a.min_ratio is not None:
        print(f"# {len(order) - len(failed)} of {len(order)} rows at or above a median ratio of "
              f"{a.min_ratio:g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
