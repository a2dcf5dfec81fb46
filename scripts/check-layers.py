#!/usr/bin/env python3
"""Fails on an #include that points up the library's layers.

    scripts/check-layers.py [ROOT]     check the tree (default: this checkout)
    scripts/check-layers.py --self-test   show that an upward include fails

The layers, top to bottom (docs/code-style.md draws them):

    api/            public entry points of the collectives
    collectives/    algorithms
    lib/            runtime: communicator state, executor, stats, faults
    lib/transport/  transports (collectives see only p2p.h, the interface)
    lib/bootstrap/  rendezvous
    topology/       who is on which node
    quant_kernels/  codecs (beside the runtime: no communication inside)
    core/       logging, check macros, parameter table
    include/        zpp.h, the public header

A layer includes itself and what LAYERS lists for it, nothing else. Tests,
tools and examples sit above everything and are not checked. Headers that
CMake generates (zpp_build_config.h, zpp_version.h) are allowed everywhere.
"""
import os
import re
import sys
import tempfile

# Longest prefix first: a file belongs to the first layer whose folder holds it.
FOLDERS = [
    ("include/", "public"),
    ("core/", "core"),
    ("lib/bootstrap/", "bootstrap"),
    ("lib/transport/", "transport"),
    ("lib/", "runtime"),
    ("topology/", "topology"),
    ("quant_kernels/", "quant"),
    ("collectives/", "collectives"),
    ("api/", "api"),
]

LAYERS = {
    "public": set(),
    "core": {"public"},
    "quant": {"public", "core"},
    "topology": {"public", "core"},
    "bootstrap": {"public", "core", "topology"},
    # The transports read the communicator's state (timeout, topology,
    # bootstrap): one runtime layer, with the two above as its parts.
    "transport": {"public", "core", "topology", "bootstrap", "runtime"},
    "runtime": {"public", "core", "quant", "topology", "bootstrap", "transport"},
    "collectives": {"public", "core", "quant", "topology", "bootstrap", "transport", "runtime"},
    "api": {"public", "core", "quant", "topology", "bootstrap", "transport", "runtime",
            "collectives"},
}

# A transport's own headers: its type and internals. Above the runtime only
# the interface (lib/transport/p2p.h, transports.h) may be seen.
TRANSPORT_PRIVATE = re.compile(r"^lib/transport/(ucx|ucx_internal|shm_ring|busy_poll)\.h$")
PRIVATE_VISIBLE_TO = {"transport", "runtime"}

GENERATED = {"zpp_build_config.h", "zpp_version.h"}
SEARCH = ["", "core/", "include/"]  # after the including file's own folder
SOURCES = (".c", ".h", ".cu", ".cpp", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    for prefix, layer in FOLDERS:
        if rel.startswith(prefix):
            return layer
    return None


def resolve(root, rel, name):
    for base in [os.path.dirname(rel)] + SEARCH:
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None


def check(root):
    errors = []
    for prefix, _ in FOLDERS:
        top = os.path.join(root, prefix)
        for dirpath, _, files in os.walk(top):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                mine = layer_of(rel)
                if not rel.startswith(prefix) or mine != dict(FOLDERS)[prefix]:
                    continue  # reached through a shorter prefix; checked under its own
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        name = m.group(1)
                        if os.path.basename(name) in GENERATED:
                            continue
                        target = resolve(root, rel, name)
                        if target is None:
                            errors.append(f"{rel}:{lineno}: #include \"{name}\": not found in the tree")
                            continue
                        theirs = layer_of(target)
                        if theirs is None:
                            errors.append(f"{rel}:{lineno}: #include \"{name}\": {target} is outside "
                                          f"the library (tests, tools, examples sit above it)")
                        elif theirs != mine and theirs not in LAYERS[mine]:
                            errors.append(f"{rel}:{lineno}: #include \"{name}\": {mine} may not "
                                          f"include {theirs} ({target}): that points up")
                        elif TRANSPORT_PRIVATE.match(target) and mine not in PRIVATE_VISIBLE_TO:
                            errors.append(f"{rel}:{lineno}: #include \"{name}\": {mine} sees the "
                                          f"host transport through lib/transport/p2p.h, not {target}")
    return errors


def self_test():
    """A small tree with one upward include per rule: each must be reported."""
    bad = {
        "topology/t.c": '#include "lib/bootstrap/bootstrap.h"\n',
        "collectives/c.c": '#include "lib/transport/ucx.h"\n',
        "lib/comm.c": '#include "collectives/coll.h"\n',
        "quant_kernels/q.c": '#include "lib/comm.h"\n',
    }
    good = {"lib/bootstrap/bootstrap.h": "", "lib/transport/ucx.h": "", "lib/comm.h": "",
            "collectives/coll.h": '#include "lib/transport/p2p.h"\n#include "lib/comm.h"\n',
            "lib/transport/p2p.h": '#include "zpp.h"\n', "include/zpp.h": ""}
    with tempfile.TemporaryDirectory() as root:
        for rel, text in {**good, **bad}.items():
            os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as fh:
                fh.write(text)
        errors = check(root)
    for e in errors:
        print("  reported: " + e)
    missed = [rel for rel in bad if not any(e.startswith(rel + ":") for e in errors)]
    extra = [e for e in errors if e.split(":")[0] not in bad]
    if missed or extra:
        print(f"check-layers self-test: FAILED (missed {missed}, wrongly reported {extra})")
        return 1
    print(f"check-layers self-test: all {len(bad)} upward includes reported")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} include(s) against the layers (see docs/code-style.md)")
        return 1
    print("check-layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
