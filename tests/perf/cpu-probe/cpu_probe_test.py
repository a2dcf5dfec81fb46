#!/usr/bin/env python3
"""zpp-cpu-probe and the main job's use of it.

  cpu_probe_test.py PROBE SUMMARY

- the probe: one JSON line per sample, one figure per CPU it may use (all of
  them, or the one it is pinned to), the samples --every apart, a stop at
  SIGTERM with exit 0 and every line written, bad arguments refused;
- scripts/main-summary.py: a MISS whose rows ran while the probe saw the CPUs
  slowed says so; a MISS in a quiet stretch and a PASS do not.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pylib"))
from zpptest import Tally  # noqa: E402

_tally = Tally()
check = _tally.check


def lines_of(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def probe_cases(probe):
    allowed = sorted(os.sched_getaffinity(0))
    t0 = time.time()
    p = subprocess.run([probe, "--count", "3", "--every", "0.2", "--work-ms", "5"], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 0, "probe exited %d: %s" % (p.returncode, p.stderr))
    samples = lines_of(p.stdout)
    check(len(samples) == 3, "3 samples asked, %d written" % len(samples))
    for s in samples:
        check(s["tool"] == "zpp-cpu-probe" and s["work_ms"] == 5, "sample fields: %r" % s)
        check(s["cpus"] == allowed, "cpus %r, the process may use %r" % (s["cpus"], allowed))
        check(len(s["gbps"]) == len(allowed) and all(0.01 < g < 1000 for g in s["gbps"]),
              "one plausible figure per CPU: %r" % s["gbps"])
        check(t0 - 1 <= s["t"] <= time.time() + 1, "sample time %r outside the run" % s["t"])
    if len(samples) == 3:
        gaps = [b["t"] - a["t"] for a, b in zip(samples, samples[1:])]
        check(all(0.15 <= g <= 1.0 for g in gaps), "samples --every 0.2 apart: gaps %r" % gaps)

    # Pinned to one CPU: that CPU only.
    one = allowed[-1]
    p = subprocess.run([probe, "--work-ms", "2"], capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: os.sched_setaffinity(0, {one}))
    s = lines_of(p.stdout)
    check(p.returncode == 0 and len(s) == 1 and s[0]["cpus"] == [one],
          "pinned to CPU %d: rc %d, %r" % (one, p.returncode, p.stdout))

    # Until a signal, into a file: SIGTERM ends it with exit 0, lines complete.
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cpu.jsonl")
        p = subprocess.Popen([probe, "--every", "0.2", "--count", "0", "--work-ms", "2", "-o", out],
                             stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
        check(rc == 0, "SIGTERM: exit %d (%s)" % (rc, p.stderr.read()))
        with open(out) as f:
            text = f.read()
        check(text.endswith("\n"), "the last line is cut: %r" % text[-80:])
        check(len(lines_of(text)) >= 3, "1.5 s at --every 0.2 wrote %d samples" % len(lines_of(text)))

    for argv, what in ((["--count", "0"], "needs --every"), (["--every", "0.01"], "bad value"),
                       (["--work-ms", "0"], "bad value"), (["--count", "1.5"], "bad value"),
                       (["--every"], "needs a value"), (["--bogus"], "unknown argument"),
                       (["-o", "/nonexistent-dir/x"], "cannot write")):
        p = subprocess.run([probe] + argv, capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and what in p.stderr and p.stdout == "",
              "%r: rc %d, stderr %r, stdout %r" % (argv, p.returncode, p.stderr, p.stdout))


def rec(op, mode, busbw, inter, t):
    return {"op": op, "mode": mode, "bytes": 64 << 20, "effective_busbw": busbw, "busbw": busbw,
            "wire_bytes_inter": inter, "timed_from": t, "timed_to": t + 2.0}


def summary_cases(summary):
    """2x2 at 1 Gbit/s: qwZ passes (2.0x), qgZ misses (3.0x < 3.4x); the
    probe's samples in and around the qgZ row decide what its MISS says."""
    t = 1795000000.0
    doc = {"header": {"ranks": 4, "nodes": 2},
           "records": [rec("allgather", "plain", 0.1, 100, t), rec("allgather", "qwz", 0.2, 50, t + 10),
                       rec("reducescatter", "plain", 0.1, 100, t + 20),
                       rec("reducescatter", "qgz", 0.3, 20, t + 30)]}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "2x2.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        # The qgZ row is timed from t + 30 to t + 32: slowed throughout; a
        # dip of one CPU in it (the mean stays above 0.8); slowed elsewhere.
        for slow_at, slow, want in ((range(28, 35), [3.4, 3.5], True), (range(30, 33), [3.4, 7.0], False),
                                    (range(50, 57), [3.4, 3.5], False), (range(0, 0), None, False)):
            probe = os.path.join(d, "cpu.jsonl")
            with open(probe, "w") as f:
                for k in range(60):
                    gbps = slow if k in slow_at else [7.0, 6.9]
                    f.write(json.dumps({"tool": "zpp-cpu-probe", "t": t + k, "gbps": gbps}) + "\n")
            p = subprocess.run([sys.executable, summary, "--two-by-two", path, "--cpu-probe", probe],
                               capture_output=True, text=True, timeout=60)
            check(p.returncode == 0, "summary exited %d: %s" % (p.returncode, p.stderr))
            qgz = [ln for ln in p.stdout.splitlines() if "2x2 qgz >=" in ln]
            qwz = [ln for ln in p.stdout.splitlines() if "2x2 qwz >=" in ln]
            check(len(qgz) == 1 and qgz[0].lstrip().startswith("MISS"), "qgZ verdict: %r" % qgz)
            check(len(qwz) == 1 and qwz[0].lstrip().startswith("PASS") and "host" not in qwz[0],
                  "qwZ verdict: %r" % qwz)
            said = len(qgz) == 1 and "the host had slowed" in qgz[0]
            check(said == want, "slow samples at %r: the qgZ MISS %s the host: %r" %
                  (list(slow_at), "should name" if want else "should not name", qgz))
            host = [ln for ln in p.stdout.splitlines() if ln.startswith("host CPU")]
            check(len(host) == 1 and "%d of 60 samples below" % len(slow_at) in host[0],
                  "the host line: %r" % host)


def main():
    probe, summary = sys.argv[1], sys.argv[2]
    probe_cases(probe)
    summary_cases(summary)
    if _tally.failures:
        print("%d failure(s)" % len(_tally.failures))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
