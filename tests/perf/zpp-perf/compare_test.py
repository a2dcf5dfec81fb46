#!/usr/bin/env python3
"""perf/zpp-perf/zpp-perf-compare.py on made-up runs: the medians over runs, the
--min-ratio verdict and its exit status, and the errors (exit 2)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pylib"))
from zpptest import Tally  # noqa: E402

_tally = Tally(stream=sys.stdout)
failures = _tally.failures
check = _tally.check


def report(path, rows):
    """rows: (op, bytes, our time, baseline time)."""
    recs = []
    for op, nbytes, ours, base in rows:
        recs.append({"op": op, "mode": "plain", "dtype": "float", "redop": "sum", "bytes": nbytes,
                     "time_us": ours, "baseline": "mpi", "baseline_time_us": base,
                     "ratio": base / ours})
    with open(path, "w") as f:
        json.dump({"header": {"tool": "zpp-perf"}, "records": recs, "summary": {}}, f)


def run(script, args):
    p = subprocess.run([sys.executable, script] + args, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    script = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        runs = []
        # allreduce 64 B: ratios 0.5, 1.0, 2.0 -> median 1.0; allgather 512 B:
        # 0.5, 0.8, 0.9 -> median 0.8 (below 0.833).
        for i, (a, b) in enumerate([(2.0, 1.0), (1.0, 1.0), (1.0, 2.0)]):
            p = os.path.join(d, f"r{i}.json")
            g = [(10.0, 5.0), (10.0, 8.0), (10.0, 9.0)][i]
            report(p, [("allreduce", 64, a, b), ("allgather", 512, g[0], g[1])])
            runs.append(p)
        out_json = os.path.join(d, "sum.json")
        rc, out, err = run(script, ["--json", out_json] + runs)
        check(rc == 0, f"no --min-ratio: exit {rc}, {err}")
        doc = json.load(open(out_json))
        by = {(r["op"], r["bytes"]): r for r in doc["rows"]}
        ar, ag = by[("allreduce", 64)], by[("allgather", 512)]
        check(abs(ar["ratio_median"] - 1.0) < 1e-9, f"allreduce median {ar['ratio_median']}")
        check(abs(ar["ratio_min"] - 0.5) < 1e-9 and abs(ar["ratio_max"] - 2.0) < 1e-9,
              f"allreduce min/max {ar['ratio_min']} {ar['ratio_max']}")
        check(ar["runs"] == 3 and abs(ar["time_us_median"] - 1.0) < 1e-9, f"allreduce {ar}")
        check(abs(ag["ratio_median"] - 0.8) < 1e-9, f"allgather median {ag['ratio_median']}")
        check(abs(ag["baseline_time_us_median"] - 8.0) < 1e-9, f"allgather base {ag}")

        rc, out, err = run(script, ["--min-ratio", "0.833"] + runs)
        check(rc == 1, f"allgather below 0.833: exit {rc}")
        check("BELOW" in out and out.count("BELOW") == 1, f"one row marked below:\n{out}")
        check("1 of 2 rows" in out, f"verdict line:\n{out}")
        rc, out, err = run(script, ["--min-ratio", "0.5"] + runs)
        check(rc == 0, f"all at or above 0.5: exit {rc}\n{out}")

        rc, out, err = run(script, [os.path.join(d, "missing.json")])
        check(rc == 2 and "missing.json" in err, f"missing file: exit {rc}, {err}")
        bad = os.path.join(d, "bad.json")
        with open(bad, "w") as f:
            f.write("[1, 2]")
        rc, out, err = run(script, [bad])
        check(rc == 2 and "not a zpp-perf" in err, f"not a report: exit {rc}, {err}")
        nobase = os.path.join(d, "nobase.json")
        with open(nobase, "w") as f:
            json.dump({"header": {"tool": "zpp-perf"}, "records": [
                {"op": "allreduce", "mode": "plain", "dtype": "float", "redop": "sum", "bytes": 8,
                 "time_us": 1.0, "ratio": None}]}, f)
        rc, out, err = run(script, [nobase])
        check(rc == 2 and "--baseline" in err, f"no baseline: exit {rc}, {err}")
    print("compare: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
