#!/usr/bin/env python3
"""Tests of the zpp-perf executable, one per ctest entry:

  zpp_perf_test.py args     BIN             bad command lines: message, usage, exit 2
  zpp_perf_test.py schema   BIN SCHEMA DIR  a real run's JSON against perf/zpp-perf.schema.json,
                                            its arithmetic, and the SVG next to it
  zpp_perf_test.py validator SCHEMA         the schema validator rejects broken documents
  zpp_perf_test.py inject   BIN SCHEMA DIR  ZPP_PERF_INJECT_ERROR: exit 3, one wrong element per row
  zpp_perf_test.py e2e      BIN SCHEMA DIR  -N 4 --layout 2x2, every plain collective, -c 1
  zpp_perf_test.py env      BIN SCHEMA DIR  two ranks started torchrun-style (RANK, WORLD_SIZE,
                                            MASTER_ADDR, MASTER_PORT), --layout 2x1
  zpp_perf_test.py mpi      BIN SCHEMA DIR  --baseline mpi under mpirun, one round (baseline shared)
  zpp_perf_test.py mpi_rounds BIN SCHEMA DIR --baseline mpi --rounds 3 under mpirun, and the default
  zpp_perf_test.py rounds_args BIN SCHEMA DIR --rounds: bad values exit 2; without a baseline, 1 round
  zpp_perf_test.py zeropp   BIN SCHEMA DIR  qwz, hpz, qgz beside plain: bounds, volumes, injection

Python's standard library only: the JSON schema is checked by the small
validator below (the keywords the schema uses, and an error for any other),
and additionally by the jsonschema package when it happens to be installed.
Exit 0 pass, 1 fail, 77 skip.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pylib"))
import xml.etree.ElementTree as ET

from zpptest import SKIP, Tally, free_master_port  # noqa: E402

TEST_START = time.time()
_tally = Tally()
failures = _tally.failures
check = _tally.check


def run(argv, env=None, timeout=300):
    e = dict(os.environ)
    e.pop("ZPP_PERF_INJECT_ERROR", None)
    e.setdefault("ZPP_TIMEOUT", "60")
    if env:
        e.update(env)
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                       timeout=timeout, text=True)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------------------
# A small JSON Schema (draft-07) validator for the keywords perf/zpp-perf.schema.json uses.
SUPPORTED = {"$schema", "$id", "title", "description", "type", "properties", "required",
             "additionalProperties", "items", "enum", "const", "minimum", "maximum",
             "minLength", "pattern", "$ref", "definitions", "dependencies"}


def _type_ok(v, t):
    if t == "null":
        return v is None
    if t == "boolean":
        return isinstance(v, bool)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    raise ValueError("validator: unknown type " + t)


def validate(doc, schema, root=None, path="$"):
    """Returns a list of error strings (empty when valid)."""
    root = root if root is not None else schema
    errs = []
    unknown = set(schema) - SUPPORTED
    if unknown:
        raise ValueError("validator: unsupported keywords %s at %s" % (sorted(unknown), path))
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/definitions/"):
            raise ValueError("validator: unsupported $ref " + ref)
        return validate(doc, root["definitions"][ref.split("/")[-1]], root, path)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(doc, t) for t in types):
            return ["%s: %r is not of type %s" % (path, doc, types)]
    if "const" in schema and doc != schema["const"]:
        errs.append("%s: %r is not %r" % (path, doc, schema["const"]))
    if "enum" in schema and not any(doc == e and type(doc) is type(e) for e in schema["enum"]):
        errs.append("%s: %r not in %r" % (path, doc, schema["enum"]))
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in schema and doc < schema["minimum"]:
            errs.append("%s: %r < %r" % (path, doc, schema["minimum"]))
        if "maximum" in schema and doc > schema["maximum"]:
            errs.append("%s: %r > %r" % (path, doc, schema["maximum"]))
    if isinstance(doc, str):
        if "minLength" in schema and len(doc) < schema["minLength"]:
            errs.append("%s: %r too short" % (path, doc))
        if "pattern" in schema and not re.search(schema["pattern"], doc):
            errs.append("%s: %r does not match %s" % (path, doc, schema["pattern"]))
    if isinstance(doc, dict):
        for k in schema.get("required", []):
            if k not in doc:
                errs.append("%s: missing %s" % (path, k))
        props = schema.get("properties", {})
        for k, v in doc.items():
            if k in props:
                errs += validate(v, props[k], root, path + "." + k)
            elif schema.get("additionalProperties", True) is False:
                errs.append("%s: unexpected property %s" % (path, k))
        for k, needed in schema.get("dependencies", {}).items():
            if k in doc:
                for n in needed:
                    if n not in doc:
                        errs.append("%s: %s present without %s" % (path, k, n))
    if isinstance(doc, list) and "items" in schema:
        for i, v in enumerate(doc):
            errs += validate(v, schema["items"], root, "%s[%d]" % (path, i))
    return errs


def schema_errors(doc, schema):
    errs = validate(doc, schema)
    try:
        import jsonschema  # optional cross-check
        v = jsonschema.Draft7Validator(schema)
        errs += ["jsonschema: " + e.message for e in v.iter_errors(doc)]
    except ImportError:
        pass
    return errs


# ---------------------------------------------------------------------------
def bus_factor(op, n):
    if op in ("allgather", "reducescatter", "alltoall", "gather", "scatter", "alltoallv"):
        return (n - 1) / n
    if op == "allreduce":
        return 2 * (n - 1) / n
    return 1.0


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-12


def load_json(path):
    with open(path) as f:
        return json.load(f)


def check_arithmetic(doc):
    """Every record's algbw and busbw follow from its bytes and time (nccl-tests)."""
    for i, r in enumerate(doc["records"]):
        tag = "record %d (%s %s %d B)" % (i, r["op"], r["mode"], r["bytes"])
        check(r["time_us"] > 0, tag + ": time is 0")
        algbw = r["bytes"] / (r["time_us"] * 1e-6) / 1e9
        check(close(r["algbw"], algbw, 1e-5), "%s: algbw %r, bytes/time gives %r" % (tag, r["algbw"], algbw))
        want = r["algbw"] * bus_factor(r["op"], r["ranks"])
        check(close(r["effective_busbw"], want, 1e-5),
              "%s: effective busbw %r, want %r" % (tag, r["effective_busbw"], want))
        if not r["compressed"]:
            check(r["busbw"] == r["effective_busbw"], tag + ": plain busbw differs from effective")
        tsize = {"int8": 1, "uint8": 1, "half": 2, "bfloat16": 2, "int32": 4, "uint32": 4,
                 "float": 4, "int64": 8, "uint64": 8, "double": 8}[r["dtype"]]
        check(r["bytes"] == r["count"] * tsize, tag + ": bytes != count * type size")
        per = r["ranks"] if r["op"] in ("allgather", "reducescatter", "alltoall", "gather", "scatter",
                                        "alltoallv") else 1
        check(r["count"] == r["api_count"] * per, tag + ": count != api_count * ranks")
        check(r["time_us_min"] <= r["time_us"] * (1 + 1e-9), tag + ": min time above the median")
        # Each rank's loop time per call is its mean call time plus the loop's
        # own few instructions, and no rank's mean exceeds the mean of the
        # per-iteration maxima.
        check(0 < r["time_us_steady"] <= r["time_us_mean"] * (1 + 1e-3) + 2.0,
              "%s: steady time %r us, mean of the maxima %r us" % (tag, r["time_us_steady"], r["time_us_mean"]))
        # The timed window (wall clock, ms steps) holds the slowest rank's
        # whole loop, and lies within this test's run.
        span = r["timed_to"] - r["timed_from"]
        loop = r["time_us_steady"] * 1e-6 * doc["header"]["iters"]
        check(span >= loop * (1 - 1e-6) - 2e-3,
              "%s: timed window %.3f s, shorter than the slowest loop %.3f s" % (tag, span, loop))
        check(TEST_START - 1 <= r["timed_from"] and r["timed_to"] <= time.time() + 1,
              "%s: timed window %.3f..%.3f outside this test's run" % (tag, r["timed_from"], r["timed_to"]))


def check_svg(path, nseries):
    check(os.path.exists(path), "no SVG at " + path)
    if not os.path.exists(path):
        return
    try:
        tree = ET.parse(path)
    except ET.ParseError as e:
        check(False, "SVG does not parse: %s" % e)
        return
    ns = "{http://www.w3.org/2000/svg}"
    check(tree.getroot().tag == ns + "svg", "SVG root is not <svg>")
    lines = tree.getroot().findall(ns + "polyline")
    check(len(lines) == nseries, "SVG has %d lines, want %d" % (len(lines), nseries))
    # The bandwidth axis is logarithmic (modes are compared as ratios): every
    # marker's height is one affine function of log10(GB/s), fitted through
    # the lowest and highest marker.
    pts = []
    for c in tree.getroot().iter(ns + "circle"):
        m = re.fullmatch(r"\d+ B: ([0-9.e+-]+) GB/s", c.findtext(ns + "title") or "")
        if m and float(m.group(1)) > 0:
            pts.append((math.log10(float(m.group(1))), float(c.get("cy"))))
    lo, hi = min(pts, default=None), max(pts, default=None)
    if lo and hi and hi[0] - lo[0] > 0.05:
        slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
        check(slope < 0, "SVG: higher bandwidth is not drawn higher")
        for lg, cy in pts:
            # 0.2 px for cy's printed precision (three markers), and the
            # title's 4 significant digits (5e-4 relative: 2.2e-4 decades)
            # for three markers.
            want = lo[1] + slope * (lg - lo[0])
            check(abs(cy - want) <= 0.2 + abs(slope) * 3 * 2.2e-4,
                  "SVG: a marker at %.3f GB/s is at y %.1f, a log axis puts it at %.1f"
                  % (10 ** lg, cy, want))


def series_count(doc):
    """One line per (op, mode, dtype, redop), one per baseline (op, dtype, redop)."""
    keys = set()
    base = set()
    for r in doc["records"]:
        keys.add((r["op"], r["mode"], r["dtype"], r["redop"]))
        if "baseline" in r:
            base.add((r["op"], r["dtype"], r["redop"]))
    return len(keys) + len(base)


# ---------------------------------------------------------------------------
def test_args(bin_):
    rc, out, err = run([bin_, "-h"])
    check(rc == 0 and "usage: zpp-perf" in out, "-h: rc %d" % rc)
    modes_unavailable = "(not available yet)" in out

    bad = [
        (["-t", "allgatherx"], "unknown collective"),
        (["-d", "float17"], "unknown data type"),
        (["-o", "mean"], "unknown reduction op"),
        (["-b", "2M", "-e", "1M"], "-b is larger than -e"),
        (["-b", "0"], "sizes must be > 0"),
        (["-e", "0"], "sizes must be > 0"),
        (["-b", "1x"], "bad size"),
        (["-b", "-5"], "bad size"),
        (["-i", "0", "-b", "1K", "-e", "2K"], "-i must be > 0"),
        (["-f", "0.5"], "bad step factor"),
        (["-n", "0"], "bad iteration count"),
        (["-w", "-1"], "bad warm-up count"),
        (["-c", "2"], "-c takes 0 or 1"),
        (["-r", "-1"], "bad root"),
        (["-r", "rotating"], "bad root"),
        (["-N", "0"], "bad rank count"),
        (["-N", "4", "--layout", "3x3"], "does not multiply out"),
        (["--layout", "2by2"], "bad layout"),
        (["--baseline", "gloo"], "unknown baseline"),
        (["-m", "fast"], "unknown mode"),
        (["-t", "allreduce", "-m", "qgz"], "none of the modes"),
        (["-t", "allgather:qgz"], "no mode 'qgz'"),
        (["--bogus"], "unknown option"),
        (["-b"], "needs a value"),
        (["stray"], "unexpected argument"),
        (["-N", "2", "-r", "2", "-t", "broadcast"], "-r is not a rank"),
        (["--qwz-bits", "6"], "bits must be 4 or 8"),
        (["--qgz-bits", "0"], "bits must be 4 or 8"),
        (["--block", "100"], "--block must be a power of two"),
        (["--block", "8192"], "--block must be a power of two"),
        (["--rounds", "0"], "bad round count"),
        (["--layout", "2x2/blocks"], "bad layout"),
        # Refused with either reason: hpZ is host-only, or no CUDA build.
        (["--device", "-t", "allgather", "-m", "hpz"], "--device"),
        (["--device", "--baseline", "mpi"], "--device"),
    ]
    if modes_unavailable:
        bad.append((["-t", "qwz"], "not available yet"))
    for argv, msg in bad:
        rc, out, err = run([bin_] + argv)
        check(rc == 2, "%s: exit %d, want 2" % (argv, rc))
        check(msg in err, "%s: stderr lacks %r: %s" % (argv, msg, err[:300]))
        check("usage: zpp-perf" in err, "%s: no usage on stderr" % argv)
        check(out == "", "%s: printed on stdout: %s" % (argv, out[:200]))

    rc, out, err = run([bin_, "-N", "1"], env={"ZPP_PERF_INJECT_ERROR": "one:two"})
    check(rc == 2 and "ZPP_PERF_INJECT_ERROR" in err, "bad injection spec: rc %d" % rc)

    # A baseline that cannot run here must fail loudly, never vanish.
    rc, out, err = run([bin_, "-N", "2", "--baseline", "nccl", "-b", "1K", "-e", "1K", "-n", "1",
                        "-w", "0"], timeout=120)
    check(rc != 0, "--baseline nccl without a GPU exited 0")
    check("NCCL" in err or "nccl" in err or "GPU" in err, "--baseline nccl: unclear message: " + err[:300])
    # --device without a GPU (or a CUDA build) fails loudly on every rank;
    # with one it runs and checks its results.
    rc, out, err = run([bin_, "-N", "2", "--device", "-t", "allgather,reducescatter", "-m", "plain,qwz,qgz",
                        "-d", "bfloat16", "-b", "64K", "-e", "64K", "-n", "1", "-w", "0"], timeout=120)
    check(rc == 0 or ("GPU" in err or "CUDA" in err), "--device: rc %d, unclear message: %s" % (rc, err[:300]))
    rc, out, err = run([bin_, "-N", "2", "--baseline", "mpi"])
    check(rc == 2 and "mpi" in err.lower(), "--baseline mpi with -N: rc %d" % rc)


def test_validator(schema_path):
    schema = load_json(schema_path)
    rec = {"op": "allgather", "mode": "plain", "compressed": False, "dtype": "bfloat16",
           "redop": None, "root": None, "ranks": 4, "nodes": 2, "bytes": 1024, "count": 512,
           "api_count": 128, "time_us": 10.0, "time_us_mean": 11.0, "time_us_min": 9.0,
           "time_us_steady": 10.5, "timed_from": 1795000000.5, "timed_to": 1795000000.6,
           "algbw": 0.1024, "busbw": 0.0768, "effective_busbw": 0.0768,
           "wire_bytes_inter": 1536, "wire_bytes_intra": 768, "checked": True, "max_error": 0, "bound": 0, "wrong": 0}
    header = {"tool": "zpp-perf", "version": "1.0", "zpp_version": "0.1.0", "ranks": 4, "nodes": 2,
              "layout": "2x2", "date": "2026-01-02T03:04:05Z", "host": "h", "launcher": "fork",
              "iters": 5, "rounds": 1, "warmup": 1, "check": True, "time_statistic": "median",
              "units": {"time": "us", "bandwidth": "GB/s", "wire_bytes": "B"}, "command": "zpp-perf"}
    good = {"header": header, "records": [rec],
            "summary": {"rows": 1, "wrong": 0, "avg_busbw": 0.0768,
                        "speedups": [{"op": "allgather", "mode": "qwz", "dtype": "bfloat16", "redop": None,
                                      "bytes": 1024, "vs_plain": 1.9, "vs_baseline": None}]}}
    check(schema_errors(good, schema) == [], "a good document is rejected: %s" % schema_errors(good, schema))
    with_base = json.loads(json.dumps(good))
    with_base["records"][0].update({"baseline": "mpi", "baseline_time_us": 12.0,
                                    "baseline_time_us_mean": 12.5, "baseline_algbw": 0.08,
                                    "baseline_busbw": 0.06, "baseline_wrong": 0,
                                    "baseline_max_error": 0, "ratio": 1.28})
    check(schema_errors(with_base, schema) == [], "a baseline record is rejected")

    def broken(mutate, what):
        d = json.loads(json.dumps(good))
        mutate(d)
        check(validate(d, schema) != [], "validator accepts " + what)

    broken(lambda d: d["records"][0].pop("busbw"), "a record without busbw")
    broken(lambda d: d["records"][0].update(wrong=-1), "wrong = -1")
    broken(lambda d: d["records"][0].update(wrong=1.5), "a fractional wrong count")
    broken(lambda d: d["records"][0].update(op="scatterv"), "an unknown op")
    broken(lambda d: d["records"][0].update(dtype="fp8"), "an unknown dtype")
    broken(lambda d: d["records"][0].update(checked=1), "checked = 1 (not a boolean)")
    broken(lambda d: d["records"][0].update(busbw="fast"), "a string busbw")
    broken(lambda d: d["records"][0].update(extra=1), "an unexpected property")
    broken(lambda d: d["records"][0].update(baseline="mpi"), "a baseline without its numbers")
    broken(lambda d: d["header"].update(date="yesterday"), "a bad date")
    broken(lambda d: d["header"].pop("ranks"), "a header without ranks")
    broken(lambda d: d["header"].pop("rounds"), "a header without rounds")
    broken(lambda d: d["header"].update(rounds=0), "rounds = 0")
    broken(lambda d: d.pop("summary"), "a document without summary")
    broken(lambda d: d["summary"]["speedups"][0].pop("vs_plain"), "a speed-up without vs_plain")
    try:
        validate({}, {"oneOf": []})
        check(False, "validator ignores keywords it does not implement")
    except ValueError:
        pass


def run_json(bin_, args, outdir, name, env=None, timeout=300, launcher=None):
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name + ".json")
    for p in (path, path[:-5] + ".svg"):
        if os.path.exists(p):
            os.remove(p)
    argv = (launcher or []) + [bin_] + args + ["-J", path, "-q"]
    rc, out, err = run(argv, env=env, timeout=timeout)
    sys.stdout.write(out)
    sys.stderr.write(err)
    doc = load_json(path) if os.path.exists(path) else None
    return rc, out, err, doc, path


def json_ok(doc, schema, what=""):
    """A JSON report was written and matches the schema (checked, and said)."""
    prefix = what + ": " if what else ""
    if doc is None:
        check(False, prefix + "no JSON written")
        return False
    errs = schema_errors(doc, schema)
    check(errs == [], prefix + "JSON does not match the schema: %s" % errs[:10])
    return True


def test_schema(bin_, schema_path, outdir):
    schema = load_json(schema_path)
    rc, out, err, doc, path = run_json(
        bin_, ["-N", "4", "--layout", "2x2", "-t", "allgather,allreduce,broadcast", "-r", "3",
               "-d", "bfloat16", "-b", "1K", "-e", "64K", "-f", "4", "-n", "3", "-w", "1"],
        outdir, "schema")
    check(rc == 0, "run exited %d" % rc)
    if not json_ok(doc, schema):
        return
    h = doc["header"]
    check(h["ranks"] == 4 and h["nodes"] == 2 and h["layout"] == "2x2" and h["launcher"] == "fork",
          "header: %s" % h)
    check(h["rounds"] == 1, "without a baseline: %r rounds, want 1" % h["rounds"])
    # 3 collectives x 4 sizes (1, 4, 16, 64 KiB)
    check(len(doc["records"]) == 3 * 4, "want 12 records, got %d" % len(doc["records"]))
    check(doc["summary"]["rows"] == len(doc["records"]), "summary rows")
    check(all(r["root"] == 3 for r in doc["records"] if r["op"] == "broadcast"), "broadcast root")
    check_arithmetic(doc)
    check_svg(path[:-5] + ".svg", series_count(doc))
    check("# Avg bus bandwidth" in out and "# Out of bounds values : 0 OK" in out, "table footer")
    # -r rotate: root -1 in the JSON, "rot" in the table, results still checked.
    rc, out, err, doc, path = run_json(
        bin_, ["-N", "3", "-t", "broadcast", "-r", "rotate", "-d", "int32", "-b", "64", "-e", "4K",
               "-f", "8", "-n", "30", "-w", "3", "-c", "1"], outdir, "schema_rotate")
    check(rc == 0, "-r rotate run exited %d" % rc)
    if not json_ok(doc, schema, "-r rotate"):
        return
    check(len(doc["records"]) == 3, "-r rotate: want 3 records, got %d" % len(doc["records"]))
    for r in doc["records"]:
        check(r["root"] == -1 and r["checked"] and r["wrong"] == 0, "-r rotate record: %s" % r)
    rows = [line for line in out.splitlines() if line.strip() and not line.startswith("#")]
    check(rows and all(row.split()[4] == "rot" for row in rows), "-r rotate: table rows %s" % rows)


def test_inject(bin_, schema_path, outdir):
    schema = load_json(schema_path)
    rc, out, err, doc, path = run_json(
        bin_, ["-N", "4", "--layout", "2x2", "-t", "allgather,reducescatter", "-d", "float",
               "-b", "4K", "-e", "64K", "-f", "4", "-n", "2", "-w", "0"],
        outdir, "inject", env={"ZPP_PERF_INJECT_ERROR": "1:3"})
    check(rc == 3, "an injected wrong result exited %d, want 3" % rc)
    if not json_ok(doc, schema):
        return
    check(len(doc["records"]) == 6, "want 6 records, got %d" % len(doc["records"]))
    for r in doc["records"]:
        check(r["wrong"] == 1, "%s %d B: wrong %d, want exactly the injected 1" % (r["op"], r["bytes"], r["wrong"]))
        check(r["max_error"] is not None and r["max_error"] > 0, "max_error not > 0")
    check(doc["summary"]["wrong"] == len(doc["records"]), "summary wrong")
    check("# Out of bounds values : 6 ERROR" in out, "footer does not report the errors")


def test_e2e(bin_, schema_path, outdir):
    schema = load_json(schema_path)
    rc, out, err, doc, path = run_json(
        bin_, ["-N", "4", "--layout", "2x2", "-t", "all", "-d", "float,bfloat16,int32",
               "-o", "sum,max,avg", "-b", "64", "-e", "256K", "-f", "8", "-n", "3", "-w", "1",
               "-c", "1"], outdir, "e2e", timeout=600)
    check(rc == 0, "run exited %d" % rc)
    if not json_ok(doc, schema):
        return
    ops = {r["op"] for r in doc["records"]}
    check(ops == {"allgather", "reducescatter", "allreduce", "alltoall", "broadcast"}, "ops run: %s" % ops)
    # 3 types x (3 plain non-reducing + 2 reducing x 3 ops) sections, 4 sizes each
    # (64 B .. 256 KiB by 8), minus rows too small for one element per rank.
    check(len(doc["records"]) >= 3 * 9 * 3, "only %d records" % len(doc["records"]))
    for r in doc["records"]:
        tag = "%s %s %s %d B" % (r["op"], r["dtype"], r["redop"], r["bytes"])
        check(r["checked"] and r["wrong"] == 0, tag + ": %d wrong" % r["wrong"])
        check(r["wire_bytes_inter"] is not None and r["wire_bytes_inter"] > 0,
              tag + ": no bytes counted across the 2 nodes (%r)" % r["wire_bytes_inter"])
        check(r["wire_bytes_intra"] is not None and r["wire_bytes_intra"] > 0,
              tag + ": no bytes counted inside the nodes (%r)" % r["wire_bytes_intra"])
    check_arithmetic(doc)
    # Point-to-point, only when named: pairs 0<->1 (inside node0), 2 alone (itself).
    rc, out, err, doc, path = run_json(
        bin_, ["-N", "3", "--layout", "2,1", "-t", "sendrecv", "-d", "float,int8", "-b", "8",
               "-e", "1M", "-f", "16", "-n", "3", "-w", "1", "-c", "1"], outdir, "e2e_sendrecv")
    check(rc == 0, "sendrecv run exited %d" % rc)
    if json_ok(doc, schema):
        check({r["op"] for r in doc["records"]} == {"sendrecv"}, "sendrecv: other ops ran")
        check(len(doc["records"]) == 2 * 5, "sendrecv: %d records" % len(doc["records"]))
        for r in doc["records"]:
            check(r["checked"] and r["wrong"] == 0, "sendrecv %s %d B: %d wrong" % (r["dtype"], r["bytes"], r["wrong"]))
        check_arithmetic(doc)
    # Reduce, gather, scatter, uneven all-to-all (issue 26): every op of reduce,
    # a root that is not rank 0, checked exactly; nodes of unequal size.
    rc, out, err, doc, path = run_json(
        bin_, ["-N", "3", "--layout", "2,1", "-t", "reduce,gather,scatter,alltoallv", "-d", "float,int8",
               "-o", "all", "-r", "1", "-b", "64", "-e", "1M", "-f", "64", "-n", "3", "-w", "1", "-c", "1"],
        outdir, "e2e_rooted")
    check(rc == 0, "reduce/gather/scatter/alltoallv run exited %d" % rc)
    if json_ok(doc, schema):
        ops = {r["op"] for r in doc["records"]}
        check(ops == {"reduce", "gather", "scatter", "alltoallv"}, "rooted run: ops %s" % ops)
        for r in doc["records"]:
            check(r["checked"] and r["wrong"] == 0,
                  "%s %s %d B: %d wrong" % (r["op"], r["dtype"], r["bytes"], r["wrong"]))
            if r["op"] != "alltoallv":
                check(r["root"] == 1, "%s: root %r" % (r["op"], r["root"]))
        check(len([r for r in doc["records"] if r["op"] == "reduce"]) == 2 * 5 * 3, "reduce: not every op")
        check_arithmetic(doc)


def test_zeropp(bin_, schema_path, outdir):
    """The compressed modes beside the plain ones: within their bounds, the
    volumes ZeRO++ promises across nodes, and an injected error past a lossy
    bound still caught."""
    rc, out, err = run([bin_, "-h"])
    if "(not available yet)" in out:
        print("skip: this zpp-perf has no ZeRO++ modes yet")
        return SKIP
    schema = load_json(schema_path)
    common = ["-N", "4", "--layout", "2x2", "-t", "allgather,reducescatter", "-m", "plain,qwz,hpz,qgz",
              "-d", "bfloat16,float", "-o", "sum,avg,max", "-b", "4K", "-e", "1M", "-f", "16",
              "-n", "2", "-w", "1"]
    rc, out, err, doc, path = run_json(bin_, common, outdir, "zeropp", timeout=400)
    check(rc == 0, "run exited %d" % rc)
    if not json_ok(doc, schema):
        return 0
    check("qgz, bfloat16, max: skipped" in out, "qgz with max was not skipped with a note")
    modes = {(r["op"], r["mode"]) for r in doc["records"]}
    check(modes == {("allgather", "plain"), ("allgather", "qwz"), ("allgather", "hpz"),
                    ("reducescatter", "plain"), ("reducescatter", "qgz")}, "modes run: %s" % modes)
    for r in doc["records"]:
        tag = "%s %s %s %s %d B" % (r["op"], r["mode"], r["dtype"], r["redop"], r["bytes"])
        check(r["wrong"] == 0, tag + ": %d wrong (max error %r, bound %r)" % (r["wrong"], r["max_error"], r["bound"]))
        if r["compressed"]:
            check(r["bits"] in (4, 8) and r["block"] >= 32, tag + ": bits/block missing")
            check(r["max_error"] <= r["bound"], tag + ": error past the bound but not counted")
    check_arithmetic(doc)

    def inter(op, mode, dtype, redop, size):
        for r in doc["records"]:
            if (r["op"], r["mode"], r["dtype"], r["redop"], r["bytes"]) == (op, mode, dtype, redop, size):
                return r["wire_bytes_inter"]
        return None

    sp = {(x["op"], x["mode"], x["dtype"], x["redop"]): x for x in doc["summary"]["speedups"]}
    for key in (("allgather", "qwz", "bfloat16", None), ("reducescatter", "qgz", "bfloat16", "sum")):
        x = sp.get(key)
        check(x is not None and x["vs_plain"] is not None and x["vs_plain"] > 0,
              "summary lacks the speed-up of %s over plain: %r" % (key, x))
    check("x plain (effective busbw)" in out, "table summary lacks the speed-up lines")
    big = max(r["bytes"] for r in doc["records"])
    ag = inter("allgather", "plain", "bfloat16", None, big)
    rs = inter("reducescatter", "plain", "bfloat16", "sum", big)
    q = inter("allgather", "qwz", "bfloat16", None, big)
    h = inter("allgather", "hpz", "bfloat16", None, big)
    g = inter("reducescatter", "qgz", "bfloat16", "sum", big)
    if None not in (ag, rs, q, h, g) and ag > 0 and rs > 0:
        check(q < 0.55 * ag, "qwz sends %.3f of plain all-gather's bytes across nodes" % (q / ag))
        # Only the stale-weights handshake (24 bytes per rank and other group).
        check(h < 0.001 * ag, "hpz backward gather sent %r bytes across nodes" % h)
        check(g < 0.3 * rs, "qgz sends %.3f of plain reduce-scatter's bytes across nodes" % (g / rs))
    else:
        check(False, "missing rows or counters: %r" % [ag, rs, q, h, g])

    rc, out, err, doc, path = run_json(
        bin_, ["-N", "4", "--layout", "2x2", "-t", "qwz,hpz,qgz", "-d", "bfloat16", "-b", "64K",
               "-e", "64K", "-n", "1", "-w", "0"], outdir, "zeropp-inject",
        env={"ZPP_PERF_INJECT_ERROR": "3:5"})
    check(rc == 3, "injected error in a lossy mode: exit %d, want 3" % rc)
    if doc is not None:
        check(len(doc["records"]) == 3 and all(r["wrong"] == 1 for r in doc["records"]),
              "injected error not counted once per lossy row: %s" % [r["wrong"] for r in doc["records"]])

    # --rotate: the rotated codec, within the tool's (looser) rotated bound,
    # marked rotated in the rows; the injected error is still caught.
    rot = ["-N", "4", "--layout", "2x2", "-t", "qwz,hpz,qgz", "-d", "bfloat16,float", "--qwz-bits", "4",
           "-b", "4K", "-e", "256K", "-f", "8", "-n", "1", "-w", "0", "--rotate"]
    rc, out, err, doc, path = run_json(bin_, rot, outdir, "zeropp-rotate", timeout=300)
    check(rc == 0, "--rotate run exited %d: %s" % (rc, err[-500:]))
    if doc is not None and json_ok(doc, schema):
        check(len(doc["records"]) == 18, "--rotate rows: %d" % len(doc["records"]))
        for r in doc["records"]:
            tag = "--rotate %s %s %s %d B" % (r["op"], r["mode"], r["dtype"], r["bytes"])
            check(r.get("rotated") is True, tag + ": not marked rotated")
            check(r["wrong"] == 0 and r["max_error"] <= r["bound"], tag + ": %d wrong" % r["wrong"])
    check(", rotated" in out, "--rotate: the table headers do not say rotated")
    rc, out, err, doc, path = run_json(bin_, rot[:-11] + ["-b", "64K", "-e", "64K", "-n", "1", "-w", "0",
                                                        "--rotate"],
                                       outdir, "zeropp-rotate-inject", env={"ZPP_PERF_INJECT_ERROR": "3:5"})
    check(rc == 3, "--rotate: injected error in a lossy mode: exit %d, want 3" % rc)

    # --qgz-bits 2 --error-feedback: the ternary codec through a residual
    # handle, rotated or not; the first (checked) call within the plain qgZ
    # bound, the rows marked; an injected error still caught; and the flag
    # without qgz is a usage error.
    for extra in ([], ["--rotate"]):
        ef = ["-N", "4", "--layout", "2x2", "-t", "qgz", "-d", "bfloat16,float", "--qgz-bits", "2",
              "--error-feedback", "-b", "4K", "-e", "256K", "-f", "8", "-n", "3", "-w", "1"] + extra
        tag = "--error-feedback" + "".join(" " + e for e in extra)
        rc, out, err, doc, path = run_json(bin_, ef, outdir, "zeropp-ef%d" % len(extra), timeout=300)
        check(rc == 0, "%s run exited %d: %s" % (tag, rc, err[-500:]))
        if doc is not None and json_ok(doc, schema):
            check(len(doc["records"]) == 6, "%s rows: %d" % (tag, len(doc["records"])))
            for r in doc["records"]:
                what = "%s %s %d B" % (tag, r["dtype"], r["bytes"])
                check(r.get("error_feedback") is True and r["bits"] == 2, what + ": not marked int2 EF")
                check(r["wrong"] == 0 and r["max_error"] <= r["bound"], what + ": %d wrong" % r["wrong"])
        check(", error feedback" in out, tag + ": the table headers do not say error feedback")
    rc, out, err, doc, path = run_json(bin_, ef[:-11] + ["-b", "64K", "-e", "64K", "-n", "1", "-w", "0"],
                                       outdir, "zeropp-ef-inject", env={"ZPP_PERF_INJECT_ERROR": "3:5"})
    check(rc == 3, "--error-feedback: injected error: exit %d, want 3" % rc)
    proc = subprocess.run([bin_, "-N", "2", "-t", "allgather", "--error-feedback"], capture_output=True,
                          text=True, timeout=60)
    check(proc.returncode != 0 and "applies to qgz" in proc.stderr,
          "--error-feedback without qgz: exit %d, %s" % (proc.returncode, proc.stderr[-200:]))
    return 0




def test_env(bin_, schema_path, outdir):
    """torchrun's environment: every rank started by someone else, rank 0 opens
    the rendezvous at MASTER_PORT + 1 (ZPP_MASTER_PORT_OFFSET)."""
    schema = load_json(schema_path)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "env.json")
    if os.path.exists(path):
        os.remove(path)
    port = free_master_port()
    secret = os.urandom(16).hex()  # zppCommInitFromEnv refuses to start without one
    procs = []
    for r in range(2):
        e = dict(os.environ)
        e.pop("ZPP_PERF_INJECT_ERROR", None)
        e.update({"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                  "MASTER_PORT": str(port), "ZPP_TIMEOUT": "60", "ZPP_SECRET": secret})
        procs.append(subprocess.Popen(
            [bin_, "--layout", "2x1", "-t", "allgather,reducescatter", "-d", "half", "-b", "1K",
             "-e", "16K", "-f", "4", "-n", "2", "-w", "1", "-q", "-J", path],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, text=True))
    outs = [p.communicate(timeout=180) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        sys.stderr.write(err)
        check(p.returncode == 0, "rank %d exited %d" % (r, p.returncode))
    check("# Avg bus bandwidth" in outs[0][0], "rank 0 printed no table")
    check(outs[1][0] == "", "rank 1 printed the table too: %s" % outs[1][0][:200])
    if not os.path.exists(path):
        check(False, "no JSON written")
        return
    doc = load_json(path)
    check(schema_errors(doc, schema) == [], "JSON does not match the schema")
    h = doc["header"]
    check(h["launcher"] == "env" and h["ranks"] == 2 and h["nodes"] == 2, "header: %s" % h)
    check(all(r["wrong"] == 0 for r in doc["records"]), "wrong results")
    check(len(doc["records"]) == 2 * 3, "want 6 records, got %d" % len(doc["records"]))


def mpi_env():
    return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def test_mpi(bin_, schema_path, outdir):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("skip: no mpirun")
        return SKIP
    rc, out, err = run([bin_, "-h"])
    # With a compressed mode too when there is one: it shares the plain row's baseline.
    modes = "plain" if "(not available yet)" in out else "plain,qwz"
    env = mpi_env()
    schema = load_json(schema_path)
    # One round: all of ours, then the baseline, which the compressed rows share
    # (mpi_rounds tests the interleaved rounds).
    rc, out, err, doc, path = run_json(
        bin_, ["--baseline", "mpi", "--rounds", "1", "--layout", "2x1",
               "-t", "allgather,reducescatter,allreduce", "-m", modes, "-d", "bfloat16",
               "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1"],
        outdir, "mpi", env=env, launcher=[mpirun, "-np", "2"])
    if rc == 2 and "built without MPI" in err:
        print("skip: zpp-perf built without MPI")
        return SKIP
    check(rc == 0, "mpirun run exited %d" % rc)
    if not json_ok(doc, schema):
        return 1
    check(doc["header"]["launcher"] == "mpirun", "launcher %s" % doc["header"]["launcher"])
    check(doc["header"]["rounds"] == 1, "--rounds 1: header says %r" % doc["header"]["rounds"])
    for r in doc["records"]:
        check(r.get("baseline") == "mpi", "record without the MPI baseline")
        check(r.get("baseline_wrong") == 0, "MPI baseline wrong: %r" % r.get("baseline_wrong"))
        if r.get("baseline_busbw"):
            check(close(r["ratio"], r["effective_busbw"] / r["baseline_busbw"], 1e-5), "ratio is not ours/theirs")
    # The compressed rows carry the very baseline numbers of their plain row.
    plain = {(r["op"], r["bytes"]): r.get("baseline_time_us") for r in doc["records"] if r["mode"] == "plain"}
    for r in doc["records"]:
        if r["mode"] != "plain":
            check(r.get("baseline_time_us") == plain.get((r["op"], r["bytes"])), "baseline not shared")
    check("ratio" in out, "table lacks the baseline columns")
    check_svg(path[:-5] + ".svg", series_count(doc))
    # A rotating broadcast root for the baseline too.
    rc, out, err, doc, path = run_json(
        bin_, ["--baseline", "mpi", "-t", "broadcast", "-r", "rotate", "-d", "int32", "-b", "64",
               "-e", "4K", "-f", "8", "-n", "20", "-w", "2"],
        outdir, "mpi_rotate", env=env, launcher=[mpirun, "-np", "3"])
    check(rc == 0, "mpirun -r rotate run exited %d" % rc)
    for r in (doc or {}).get("records", []):
        check(r["root"] == -1 and r["wrong"] == 0 and r.get("baseline_wrong") == 0,
              "mpi -r rotate record: %s" % r)
    check(doc is not None and len(doc["records"]) == 3, "mpi -r rotate: no or too few records")
    # Point-to-point against MPI_Irecv + MPI_Send + MPI_Wait, pairs and a rank alone.
    rc, out, err, doc, path = run_json(
        bin_, ["--baseline", "mpi", "-t", "sendrecv", "-d", "bfloat16", "-b", "8", "-e", "256K",
               "-f", "32", "-n", "10", "-w", "2"],
        outdir, "mpi_sendrecv", env=env, launcher=[mpirun, "-np", "3"])
    check(rc == 0, "mpirun sendrecv run exited %d" % rc)
    for r in (doc or {}).get("records", []):
        check(r["op"] == "sendrecv" and r["wrong"] == 0 and r.get("baseline_wrong") == 0,
              "mpi sendrecv record: %s" % r)
    check(doc is not None and len(doc["records"]) == 4, "mpi sendrecv: no or too few records")
    # Reduce, gather, scatter and the uneven all-to-all against MPI_Reduce,
    # MPI_Gather, MPI_Scatter and MPI_Alltoallv, root 2 of 3.
    rc, out, err, doc, path = run_json(
        bin_, ["--baseline", "mpi", "-t", "reduce,gather,scatter,alltoallv", "-d", "float", "-o", "avg",
               "-r", "2", "-b", "64", "-e", "64K", "-f", "32", "-n", "10", "-w", "2"],
        outdir, "mpi_rooted", env=env, launcher=[mpirun, "-np", "3"])
    check(rc == 0, "mpirun reduce/gather/scatter/alltoallv run exited %d" % rc)
    for r in (doc or {}).get("records", []):
        check(r["wrong"] == 0 and r.get("baseline_wrong") == 0 and r.get("baseline_busbw", 0) > 0,
              "mpi rooted record: %s" % r)
    check(doc is not None and len(doc["records"]) == 4 * 3, "mpi rooted: no or too few records")
    return 0


def test_mpi_rounds(bin_, schema_path, outdir):
    """--rounds 3: the header records it, every row has ours and the MPI baseline,
    measured and right; the compressed rows measure their own baseline in their
    own rounds instead of reusing the plain row's. Without --rounds the default
    (5) is capped at -n."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("skip: no mpirun")
        return SKIP
    rc, out, err = run([bin_, "-h"])
    modes = "plain" if "(not available yet)" in out else "plain,qwz"
    schema = load_json(schema_path)
    # -n 7 in 3 rounds: 2, 2, 3 iterations, an uneven split.
    rc, out, err, doc, path = run_json(
        bin_, ["--baseline", "mpi", "--rounds", "3", "--layout", "2x1",
               "-t", "allgather,reducescatter,allreduce", "-m", modes, "-d", "float",
               "-b", "1K", "-e", "64K", "-f", "8", "-n", "7", "-w", "1"],
        outdir, "mpi-rounds", env=mpi_env(), launcher=[mpirun, "-np", "2"])
    if rc == 2 and "built without MPI" in err:
        print("skip: zpp-perf built without MPI")
        return SKIP
    check(rc == 0, "mpirun --rounds 3 exited %d" % rc)
    if not json_ok(doc, schema):
        return 1
    h = doc["header"]
    check(h["rounds"] == 3 and h["iters"] == 7, "header: rounds %r, iters %r, want 3 and 7" % (h["rounds"], h["iters"]))
    check("in 3 rounds alternating ours and mpi's" in out, "the table's header line does not say 3 rounds")
    # 3 collectives x 3 sizes (1K, 8K, 64K), and qwz's all-gather rows when it exists.
    want = 3 * 3 + (3 if "qwz" in modes else 0)
    check(len(doc["records"]) == want, "want %d records, got %d" % (want, len(doc["records"])))
    for r in doc["records"]:
        tag = "%s %s %d B" % (r["op"], r["mode"], r["bytes"])
        check(r["time_us"] > 0 and r["busbw"] is not None and r["busbw"] > 0, tag + ": our time/busbw not positive")
        check(r["wrong"] == 0, tag + ": %d of ours wrong" % r["wrong"])
        check(r.get("baseline") == "mpi", tag + ": no MPI baseline")
        bt = r.get("baseline_time_us")
        check(bt is not None and bt > 0, tag + ": baseline time %r not positive" % bt)
        check(r.get("baseline_wrong") == 0, tag + ": MPI baseline wrong: %r" % r.get("baseline_wrong"))
        if r.get("baseline_busbw"):
            check(close(r["ratio"], r["effective_busbw"] / r["baseline_busbw"], 1e-5),
                  tag + ": ratio is not ours/theirs")
    check_arithmetic(doc)
    if "qwz" in modes:
        # Interleaved, each row measures its own baseline: medians of separately
        # timed calls that agree to the last bit at every size would mean the
        # plain row's baseline was reused.
        plain = {r["bytes"]: r.get("baseline_time_us") for r in doc["records"]
                 if r["op"] == "allgather" and r["mode"] == "plain"}
        pairs = [(r.get("baseline_time_us"), plain.get(r["bytes"])) for r in doc["records"]
                 if r["op"] == "allgather" and r["mode"] == "qwz"]
        check(len(pairs) == 3 and any(a != b for a, b in pairs),
              "qwz rows carry the plain rows' baseline times: %r" % pairs)

    # No --rounds: the default 5, capped at -n 3.
    rc, out, err, doc, path = run_json(
        bin_, ["--baseline", "mpi", "--layout", "2x1", "-t", "allreduce", "-d", "float",
               "-b", "4K", "-e", "4K", "-n", "3", "-w", "1"],
        outdir, "mpi-rounds-default", env=mpi_env(), launcher=[mpirun, "-np", "2"])
    check(rc == 0, "mpirun with the default rounds exited %d" % rc)
    if doc is not None:
        check(doc["header"]["rounds"] == 3, "default rounds at -n 3: %r, want 3" % doc["header"]["rounds"])
        check(all(r.get("baseline") == "mpi" and r["baseline_time_us"] > 0 for r in doc["records"]),
              "default rounds: a row without its baseline")
    else:
        check(False, "no JSON written with the default rounds")
    return 0


def test_rounds_args(bin_, schema_path, outdir):
    """--rounds takes a whole number from 1: anything else is a usage error (exit
    2, a message naming the flag, the usage). Without a baseline there is nothing
    to alternate with: the run is one round, and says so."""
    for val in ["0", "-2", "abc", "2.5", "3x", ""]:
        argv = [bin_, "-N", "1", "-b", "1K", "-e", "1K", "-n", "2", "--rounds", val]
        rc, out, err = run(argv)
        check(rc == 2, "--rounds %r: exit %d, want 2" % (val, rc))
        check("bad round count --rounds" in err, "--rounds %r: stderr lacks the reason: %s" % (val, err[:300]))
        check("usage: zpp-perf" in err, "--rounds %r: no usage on stderr" % val)
        check(out == "", "--rounds %r: printed on stdout: %s" % (val, out[:200]))
    rc, out, err = run([bin_, "--rounds"])
    check(rc == 2 and "needs a value" in err, "--rounds without a value: rc %d" % rc)
    rc, out, err = run([bin_, "-h"])
    check("--rounds R" in out, "-h does not document --rounds")

    schema = load_json(schema_path)
    rc, out, err, doc, path = run_json(
        bin_, ["-N", "2", "--rounds", "4", "-t", "allgather", "-b", "1K", "-e", "1K", "-n", "8", "-w", "1"],
        outdir, "rounds-nobase")
    check(rc == 0, "--rounds 4 without a baseline exited %d" % rc)
    if not json_ok(doc, schema):
        return 0
    check(doc["header"]["rounds"] == 1, "without a baseline: rounds %r, want 1" % doc["header"]["rounds"])
    check("in 1 round;" in out, "the table's header line does not say 1 round")
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    what = sys.argv[1]
    try:
        if what == "args":
            test_args(sys.argv[2])
        elif what == "validator":
            test_validator(sys.argv[2])
        elif what in ("schema", "inject", "e2e", "env", "mpi", "zeropp", "mpi_rounds", "rounds_args"):
            fn = {"schema": test_schema, "inject": test_inject, "e2e": test_e2e, "env": test_env,
                  "mpi": test_mpi, "zeropp": test_zeropp, "mpi_rounds": test_mpi_rounds,
                  "rounds_args": test_rounds_args}[what]
            if fn(sys.argv[2], sys.argv[3], sys.argv[4]) == SKIP:
                return SKIP
        else:
            print("unknown test " + what)
            return 2
    except subprocess.TimeoutExpired as e:
        check(False, "timed out: %s" % e)
    if failures:
        print("%s: %d failure(s)" % (what, len(failures)), file=sys.stderr)
        return 1
    print("%s: passed" % what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
