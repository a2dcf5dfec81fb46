#!/usr/bin/env python3
"""perf/zpp-perf/wire-sweep.py on one small point (label netns: exits 77 without root).

The sweep's ratio is wire time / measured time, the wire time computed from
zpp's own byte counters and the link rate. A call cannot beat its wire: a
ratio above 1 (plus the link's burst allowance) means the bytes or the
busiest link are miscounted. Under load the ratio only falls, so the check
holds on a busy machine. Also: every mode that applies has its point, the
one-node layout has no wire limit, and the picture is written. All of it
for both times (the median per call and the steady loop time per call). Run
with --repeats 2: each point carries both runs' times, its time is their
median and its ratio lies within the two runs' ratios.

  wire_sweep_test.py SWEEP ZPP_PERF OUTDIR
"""
import json
import os
import subprocess
import sys


def main():
    sweep, zpp_perf, out = sys.argv[1:4]
    if os.geteuid() != 0:
        print("wire_sweep_test: needs root (network namespaces); skipped")
        return 77
    # 8 MiB at 500 Mbit/s: each node sends 2-4 MiB, the default burst
    # (2 ms of the rate, 125 kB) is at most 6% of it.
    cmd = [sys.executable, sweep, "--rates", "500mbit", "--sizes", "8M:8M", "--dtypes", "bfloat16",
           "--layouts", "2x1,1x2", "--iters", "2", "--repeats", "2", "--check", "--timeout", "240",
           "--zpp-perf", zpp_perf, "--out", out]
    res = subprocess.run(cmd)
    if res.returncode == 77:
        return 77
    fails = []
    if res.returncode != 0:
        fails.append(f"wire-sweep exited {res.returncode}")
    with open(os.path.join(out, "wire-sweep.json")) as f:
        doc = json.load(f)
    pts = doc["points"]
    want = {(layout, op, m) for layout in ("2x1", "1x2") for op, m in
            (("allgather", "plain"), ("allgather", "qwz"), ("reducescatter", "plain"),
             ("reducescatter", "qgz"))}
    got = {(p["layout"], p["op"], p["mode"]) for p in pts}
    if got != want:
        fails.append(f"points {sorted(got)}, want {sorted(want)}")
    for p in pts:
        for time_key, ratio_key, all_key in (("time_us", "ratio", "times_us"),
                                             ("time_us_steady", "ratio_steady", "times_us_steady")):
            tag = f"{p['layout']} {p['op']} {p['mode']} {ratio_key}"
            times = p.get(all_key) or []
            if len(times) != 2 or p[time_key] != (times[0] + times[1]) / 2:
                fails.append(f"{tag}: times {times}, time {p[time_key]}: want two runs and their median")
            if p["layout"] == "1x2":
                if p[ratio_key] is not None or p["wire_time_us"] != 0:
                    fails.append(f"{tag}: one node has no wire limit, got ratio {p[ratio_key]}")
                continue
            r = p[ratio_key]
            if r is None or not 0 < r <= 1.07:
                fails.append(f"{tag}: ratio {r} (wire {p['wire_time_us']:.0f} us, "
                             f"time {p[time_key]:.0f} us): outside (0, 1.07]")
            elif not p[ratio_key + "_min"] <= r <= p[ratio_key + "_max"]:
                fails.append(f"{tag}: ratio {r} outside its runs' "
                             f"{p[ratio_key + '_min']}-{p[ratio_key + '_max']}")
            else:
                print(f"wire_sweep_test: {tag}: {r:.3f} of the wire limit")
    if not os.path.getsize(os.path.join(out, "wire-sweep.svg")):
        fails.append("empty wire-sweep.svg")
    for f in fails:
        print("FAIL: " + f)
    print(f"wire_sweep_test: {len(pts)} points, {'FAILED' if fails else 'passed'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
