#!/usr/bin/env python3
"""The layers, checked on what the compiler made: no object library leaves a
symbol undefined that only a layer above it defines.

check-layers.py reads includes; a call can point up without one (a
declaration written by hand, a function pointer's target named in a table).
This reads `nm` of every object of each layer (CMake's object libraries, one
per layer, listed by the build in a file of lines

    LAYER: BELOW1,BELOW2,... | OBJ1;OBJ2;...

) and reports every symbol that a layer uses and only a higher layer, or a
sibling it may not see, defines. Symbols no layer defines (libc, UCX, CUDA)
are not ours to check.

    check-layer-symbols.py LAYERS_FILE
    check-layer-symbols.py --self-test     plants an upward call and must report it
"""
import os
import subprocess
import sys
import tempfile


def read_layers(path):
    layers = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            name, rest = line.split(":", 1)
            below, objs = rest.split("|", 1)
            layers[name.strip()] = ({b for b in below.strip().split(",") if b},
                                    [o for o in objs.strip().split(";") if o])
    return layers


def closure(layers):
    """Every layer each one may use: those it names as below, and theirs."""
    out = {}
    for name in layers:
        seen, todo = set(), list(layers[name][0])
        while todo:
            b = todo.pop()
            if b in seen or b not in layers:
                continue
            seen.add(b)
            todo.extend(layers[b][0])
        out[name] = seen
    return out


def nm(obj):
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"check-layer-symbols: nm {obj}: {r.stderr.strip()}")
    defined, undefined = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(sym)
        elif kind not in ("w", "v"):  # weak references define nothing
            defined.add(sym)
    return defined, undefined


def check(layers):
    allowed = closure(layers)
    defined_by = {}  # symbol -> layers that define it
    uses = {}        # layer -> [(object, symbol)]
    for name, (_, objs) in layers.items():
        for obj in objs:
            d, u = nm(obj)
            for s in d:
                defined_by.setdefault(s, set()).add(name)
            uses.setdefault(name, []).extend((obj, s) for s in sorted(u))
    errors = []
    for name, used in uses.items():
        for obj, sym in used:
            owners = defined_by.get(sym)
            if not owners or name in owners or owners & allowed[name]:
                continue
            errors.append(f"{os.path.basename(obj)} ({name}) uses {sym}, defined only in "
                          f"{', '.join(sorted(owners))}: that points up (or across)")
    return errors


def self_test():
    """Two layers; the lower one calls a function only the upper defines."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as d:
        sources = {
            "low.c": "int upper_only(void);\nint low(void) { return 1; }\n"
                     "int low_calls_up(void) { return upper_only(); }\n",
            "up.c": "int low(void);\nint upper_only(void) { return low() + 1; }\n",
        }
        for f, text in sources.items():
            with open(os.path.join(d, f), "w") as fh:
                fh.write(text)
            subprocess.run([cc, "-c", f, "-o", f + ".o"], cwd=d, check=True)
        layers = {"low": (set(), [os.path.join(d, "low.c.o")]),
                  "up": ({"low"}, [os.path.join(d, "up.c.o")])}
        errors = check(layers)
    for e in errors:
        print("  reported: " + e)
    if len(errors) != 1 or "upper_only" not in errors[0]:
        print("check-layer-symbols self-test: FAILED: the planted upward call was not the one report")
        return 1
    print("check-layer-symbols self-test: the planted upward call is reported, the downward one is not")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    errors = check(read_layers(argv[1]))
    for e in errors:
        print(e)
    if errors:
        print(f"check-layer-symbols: {len(errors)} symbol(s) against the layers (see docs/code-style.md)")
        return 1
    print("check-layer-symbols: every call points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
