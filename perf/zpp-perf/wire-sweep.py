#!/usr/bin/env python3
"""How close qwZ and qgZ (and the plain collectives beside them) come to their
wire limit, over link rates, sizes, types, layouts and the shaped links' queue.

For every point it runs zpp-perf inside an emulated cluster (perf/emucluster/emucluster.sh,
needs root), one cluster per collective and mode (see sections()), and
computes:

  wire time = bytes the busiest node link carries one way / link rate
  ratio     = wire time / measured time    (1.0: the call runs at its wire limit)

with two measured times from zpp-perf's JSON, so two ratios:

  steady  time_us_steady: the slowest rank's back-to-back loop time per call,
          what a stream of calls costs (a trainer's gathers, one per layer)
  median  time_us: the median over calls of the slowest rank's call time

On a ring the ranks wait for their predecessor only, so one rank held up in
one call (a scheduler hiccup, a TCP retransmit) delays its successor in the
next call, and that one in the call after: the hiccup stretches up to N
consecutive per-call maxima although the loop lost it once. The median ratio
therefore reads low wherever hiccups come every few calls (4 emulated nodes
on 2 cores); the steady ratio is the one the targets are judged by, and the
picture draws it (--plot median draws the other).

The bytes come from zpp-perf's own counters (wire_bytes_inter: every rank's
bytes sent across nodes per call). On the uniform layouts swept here every
node sends the same share, so the busiest link carries wire_bytes_inter / N
each way. Layouts without inter-node bytes (1xL) have no wire limit; their
rows show the time only.

One emulated run can be slow by chance (a TCP timeout costs 200 ms, 5-25% of
a point at these rates): --repeats K runs every point K times and reports the
median time, with the range of the K ratios beside it, so that a single bad
run neither hides nor invents a shortfall.

Writes a table, DIR/wire-sweep.json (every point, with the command that
measured it) and DIR/wire-sweep.svg (the ratio against size, one line per
mode, layout, type and rate). Docs: docs/zpp-perf.md, "Wire sweep".

Example (the issue 17 sweep at 64 MiB and up, bf16, three rates):
  perf/zpp-perf/wire-sweep.py --rates 100mbit,500mbit,1gbit --sizes 64M:256M \\
      --dtypes bfloat16 --layouts 2x2,4x1 --out results/sweep
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EMUCLUSTER = os.path.join(ROOT, "perf", "emucluster", "emucluster.sh")

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text):
    m = re.fullmatch(r"(\d+)([kmgKMG]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 4M)")
    return int(m.group(1)) * UNITS[m.group(2).lower()]


def parse_rate(text):
    m = re.fullmatch(r"([0-9.]+)\s*([kmg]?)bit", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"bad rate '{text}' (e.g. 200mbit, 1gbit)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def parse_layout(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise argparse.ArgumentTypeError(f"bad layout '{text}' (e.g. 2x2)")
    return int(m.group(1)), int(m.group(2))


def sections(wanted):
    """The (op, mode) pairs swept: qwZ beside the plain all-gather, qgZ beside
    the plain reduce-scatter. Each runs in an emulated cluster of its own
    (fresh processes and connections), so that a point measures its own
    collective and not the state the one before left: under bbr, calls
    that followed another section's long transfers stalled for 100-200 ms
    at a time (qwZ 64 MiB after plain 256 MiB all-gathers on 4x1 at
    1 Gbit/s: 0.73 of the wire against 0.945 alone; docs/zpp-perf.md)."""
    return [(op, m) for op, modes in (("allgather", ("plain", "qwz")), ("reducescatter", ("plain", "qgz")))
            for m in modes if m in wanted]


def run_point(args, rate, layout, dtype, sizes, section, json_path, check_rate):
    """One section's emulated run; the links' rates are measured (iperf3,
    into json_path's -links.json) when check_rate says so."""
    nodes, per = layout
    lo, hi = sizes
    op, mode = section
    cmd = ["bash", EMUCLUSTER, "-q", "-n", str(nodes), "-l", str(per), "-r", rate, "--timeout", str(args.timeout)]
    cmd += ["--rate-json", json_path[:-5] + "-links.json"] if check_rate else ["--no-check-rate"]
    if args.burst:
        cmd += ["--tbf-burst", args.burst]
    if args.queue:
        cmd += ["--tbf-latency", args.queue]
    if args.host_queue:
        cmd += ["--host-queue", args.host_queue]
    cmd += ["--", args.zpp_perf, "-q", "-t", op, "-m", mode, "-d", dtype,
            "-b", str(lo), "-e", str(hi), "-f", str(args.factor), "-n", str(args.iters),
            "-w", "1", "-c", "1" if args.check else "0", "-J", json_path]
    print("wire-sweep: " + " ".join(cmd), file=sys.stderr, flush=True)
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if res.returncode != 0:
        print(f"wire-sweep: that run failed (exit {res.returncode}); its points are missing",
              file=sys.stderr)
        return None, cmd
    with open(json_path) as f:
        return json.load(f), cmd


def ratio_of(wire_us, time_us):
    return wire_us / time_us if wire_us > 0 and time_us > 0 else None


def points_of(doc, rate_text, layout, cmd, links):
    nodes, per = layout
    bps = parse_rate(rate_text)
    out = []
    for r in doc["records"]:
        inter = r.get("wire_bytes_inter") or 0
        busiest = inter / nodes if nodes > 1 else 0
        wire_us = busiest * 8 / bps * 1e6
        out.append({
            "rate": rate_text, "rate_bps": bps, "layout": f"{nodes}x{per}", "op": r["op"],
            "mode": r["mode"], "dtype": r["dtype"], "bytes": r["bytes"], "time_us": r["time_us"],
            "time_us_steady": r["time_us_steady"],
            "wire_bytes_busiest_link": busiest, "wire_time_us": wire_us,
            "ratio": ratio_of(wire_us, r["time_us"]),
            "ratio_steady": ratio_of(wire_us, r["time_us_steady"]),
            "effective_busbw": r["effective_busbw"], "wrong": r.get("wrong", 0),
            "links": links, "command": " ".join(cmd),
        })
    return out


def merge_repeats(runs):
    """Points of K identical runs -> one point each: for both times, the
    median (and the ratio from it), the K values and the range of their
    ratios."""
    groups = {}
    for pts in runs:
        for p in pts:
            key = (p["rate"], p["layout"], p["op"], p["mode"], p["dtype"], p["bytes"])
            groups.setdefault(key, []).append(p)
    out = []
    for same in groups.values():
        m = dict(same[0])
        m["wrong"] = sum(p["wrong"] for p in same)
        m["commands"] = [p["command"] for p in same]
        wire = m["wire_time_us"]
        for time_key, ratio_key, all_key in (("time_us", "ratio", "times_us"),
                                             ("time_us_steady", "ratio_steady", "times_us_steady")):
            times = [p[time_key] for p in same]
            m[time_key] = statistics.median(times)
            m[all_key] = times
            ratios = [r for r in (ratio_of(wire, t) for t in times) if r is not None]
            m[ratio_key] = ratio_of(wire, m[time_key])
            m[ratio_key + "_min"] = min(ratios) if ratios else None
            m[ratio_key + "_max"] = max(ratios) if ratios else None
        out.append(m)
    return out


TIME_LABEL = {"ratio_steady": "steady: back-to-back loop time per call",
              "ratio": "median over calls of the slowest rank"}


def svg(points, path, title, ratio_key):
    """The ratio (ratio_key) against size (log), one polyline per series; with
    repeats, a bar from the lowest to the highest run's ratio at each point."""
    series = {}
    for p in points:
        if p[ratio_key] is None:
            continue
        key = (p["op"], p["mode"], p["layout"], p["dtype"], p["rate"])
        series.setdefault(key, []).append((p["bytes"], p[ratio_key], p.get(ratio_key + "_min"),
                                           p.get(ratio_key + "_max")))
    W, H, L, R, T, B = 1000, max(560, 90 + 16 * len(series)), 70, 330, 50, 60
    pw, ph = W - L - R, H - T - B
    sizes = [b for s in series.values() for b, *_ in s] or [1 << 20]
    x0, x1 = math.log2(min(sizes)) - 0.5, math.log2(max(sizes)) + 0.5
    ymax = max([1.1] + [max(r, hi or 0) for s in series.values() for _, r, _, hi in s])

    def px(b):
        return L + (math.log2(b) - x0) / (x1 - x0) * pw

    def py(r):
        return T + ph - r / ymax * ph

    colours = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
               "#17becf", "#7f7f7f", "#bcbd22"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{L}" y="22" font-size="15" font-weight="bold">{title}</text>',
           f'<text x="{L}" y="40" fill="#555">wire time (busiest link, one way, at the asked rate)'
           f' / measured time ({TIME_LABEL[ratio_key]}); 1.0 = at the wire limit</text>',
           f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>']
    for k in range(0, int(ymax * 10) + 1):
        v = k / 10
        y = py(v)
        strong = k in (10, 9, 8, 5)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L + pw}" y2="{y:.1f}" '
                   f'stroke="{"#999" if strong else "#e4e4e4"}"/>')
        if k % 2 == 0 or strong:
            out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for e in range(math.ceil(x0), math.floor(x1) + 1):
        x = px(2 ** e)
        label = f"{2 ** e >> 20} MiB" if e >= 20 else f"{2 ** e >> 10} KiB"
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + ph}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{T + ph + 16}" text-anchor="middle">{label}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 20}" text-anchor="middle">size (log scale)</text>')
    ly = T + 8
    for i, (key, pts) in enumerate(sorted(series.items())):
        c = colours[i % len(colours)]
        pts.sort()
        d = "" if key[1] != "plain" else ' stroke-dasharray="6,4"'
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{d} points="'
                   + " ".join(f"{px(b):.1f},{py(r):.1f}" for b, r, *_ in pts) + '"/>')
        for b, r, lo, hi in pts:
            span = ""
            if lo is not None and hi is not None:
                span = f" (runs {lo:.3f}-{hi:.3f})"
                out.append(f'<line x1="{px(b):.1f}" y1="{py(lo):.1f}" x2="{px(b):.1f}" y2="{py(hi):.1f}" '
                           f'stroke="{c}" stroke-width="1.5"/>')
            out.append(f'<circle cx="{px(b):.1f}" cy="{py(r):.1f}" r="3" fill="{c}">'
                       f'<title>{b} B: {r:.3f}{span}</title></circle>')
        out.append(f'<line x1="{L + pw + 12}" y1="{ly}" x2="{L + pw + 36}" y2="{ly}" stroke="{c}" '
                   f'stroke-width="2"{d}/>')
        out.append(f'<text x="{L + pw + 42}" y="{ly + 4}">{" ".join(key)}</text>')
        ly += 16
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="100mbit,200mbit,500mbit,1gbit",
                    help="link rates (default %(default)s; 10 Gbit/s does not hold on 2 cores)")
    ap.add_argument("--sizes", default="1M:256M", help="LO:HI bytes per call (default %(default)s)")
    ap.add_argument("--factor", type=int, default=4, help="size step factor (default %(default)s)")
    ap.add_argument("--dtypes", default="bfloat16,float16,float32")
    ap.add_argument("--layouts", default="2x2,4x1,2x1", help="NxL, comma separated")
    ap.add_argument("--modes", default="plain,qwz,qgz")
    ap.add_argument("--burst", help="tbf burst of every link, e.g. 64k (emucluster's default: 2 ms of the rate)")
    ap.add_argument("--queue",
                    help="the switch ports' queue as its latency, e.g. 1ms (default 5ms): shallow switch buffers")
    ap.add_argument("--host-queue", help="the nodes' own queue in packets (default 1000), or 'switch' (as --queue)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1,
                    help="emulated runs per point: the median time counts, the ratios' range is shown"
                    " (default %(default)s)")
    ap.add_argument("--plot", choices=("steady", "median"), default="steady",
                    help="which ratio the picture draws (default %(default)s; both are in the table and JSON)")
    ap.add_argument("--check", action="store_true", help="check every result (slower)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per emulated run")
    ap.add_argument("--zpp-perf", default=os.path.join(ROOT, "build", "bin", "zpp-perf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "sweep"))
    args = ap.parse_args()
    lo, hi = (parse_size(s) for s in args.sizes.split(":"))
    args.modes = set(args.modes.split(","))
    rates = args.rates.split(",")
    for r in rates:
        parse_rate(r)
    layouts = [parse_layout(t) for t in args.layouts.split(",")]
    if args.repeats < 1:
        ap.error("--repeats wants 1 or more")
    os.makedirs(args.out, exist_ok=True)
    if os.geteuid() != 0:
        print("wire-sweep: the emulated cluster needs root (network namespaces, tc)", file=sys.stderr)
        return 77

    points = []
    for rate in rates:
        for layout in layouts:
            for dtype in args.dtypes.split(","):
                runs = [[] for _ in range(args.repeats)]
                for k in range(args.repeats):
                    links = None  # measured in the first section's run, shared by the others
                    for i, (op, mode) in enumerate(sections(args.modes)):
                        tag = f"{rate}-{layout[0]}x{layout[1]}-{dtype}-{op}-{mode}" + \
                            (f"-{k + 1}" if args.repeats > 1 else "")
                        path = os.path.join(args.out, f"run-{tag}.json")
                        doc, cmd = run_point(args, rate, layout, dtype, (lo, hi), (op, mode), path, i == 0)
                        if i == 0:
                            try:
                                with open(path[:-5] + "-links.json") as f:
                                    links = json.load(f)
                            except OSError:
                                pass
                        if doc is not None:
                            runs[k] += points_of(doc, rate, layout, cmd, links)
                points += merge_repeats(runs) if args.repeats > 1 else [p for r in runs for p in r]

    def ratio_cells(p, key):
        cell = f"{p[key]:.3f}" if p[key] is not None else "-"
        span = ""
        if args.repeats > 1:
            span = f" {p[key + '_min']:.3f}-{p[key + '_max']:.3f}" if p[key] is not None else f" {'-':>11}"
        return f"{cell:>6}{span}"

    range_head = f" {'range':>11}" if args.repeats > 1 else ""
    print(f"{'rate':>8} {'layout':>6} {'op':>13} {'mode':>5} {'dtype':>8} {'bytes':>10} "
          f"{'wire ms':>9} {'steady ms':>9} {'steady':>6}{range_head} {'median ms':>9} {'median':>6}{range_head}")
    for p in points:
        print(f"{p['rate']:>8} {p['layout']:>6} {p['op']:>13} {p['mode']:>5} {p['dtype']:>8} "
              f"{p['bytes']:>10} {p['wire_time_us'] / 1e3:9.2f} {p['time_us_steady'] / 1e3:9.2f} "
              f"{ratio_cells(p, 'ratio_steady')} {p['time_us'] / 1e3:9.2f} {ratio_cells(p, 'ratio')}")
    bad = [p for p in points if p["wrong"]]
    doc = {"tool": "wire-sweep", "burst": args.burst, "queue": args.queue, "iters": args.iters,
           "repeats": args.repeats, "points": points}
    with open(os.path.join(args.out, "wire-sweep.json"), "w") as f:
        json.dump(doc, f, indent=1)
    plot_key = "ratio_steady" if args.plot == "steady" else "ratio"
    svg(points, os.path.join(args.out, "wire-sweep.svg"),
        "zpp: time against wire time over the sweep"
        + (f" (burst {args.burst})" if args.burst else "") + (f" (queue {args.queue})" if args.queue else ""), plot_key)
    print(f"wire-sweep: {len(points)} points; {args.out}/wire-sweep.json and .svg", file=sys.stderr)
    if bad:
        print(f"wire-sweep: {len(bad)} points with wrong results", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
