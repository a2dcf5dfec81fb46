#!/usr/bin/env python3
"""libzpp.so exports exactly the calls zpp.h declares ZPP_API, nothing else.

    scripts/check-exports.py LIBZPP.so include/zpp.h [LIBZPP_STATIC.a]

With the static archive, also checks that no internal function is named like
a public call with a suffix (zppAllGatherRing next to zppAllGather): a reader
must tell the public API from the inside by name alone.

Reads the dynamic symbol table with `nm -D --defined-only`: an internal
function that leaks (a missing hidden-visibility flag, a new layer built
without it) or a public call that went missing fails the check.
"""
import re
import subprocess
import sys


def public_calls(header):
    text = open(header, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    # ZPP_API <return type> name(  -- the return type may span words and '*'.
    return set(re.findall(r"\bZPP_API\b[^;(]*?\b(zpp\w+)\s*\(", text))


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                         text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] not in ("A",):  # A: version nodes, not symbols
            syms.add(parts[2].split("@")[0])
    return syms


def internal_lookalikes(archive, public):
    out = subprocess.run(["nm", "--defined-only", archive], check=True, capture_output=True,
                         text=True).stdout
    bad = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBR" and parts[2] not in public:
            if any(parts[2].startswith(p) for p in public):
                bad.add(parts[2])
    return sorted(bad)


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__)
        return 2
    want, have = public_calls(argv[2]), exported(argv[1])
    extra, missing = sorted(have - want), sorted(want - have)
    lookalikes = internal_lookalikes(argv[3], want) if len(argv) == 4 else []
    for s in extra:
        print(f"exported but not in zpp.h: {s}")
    for s in missing:
        print(f"in zpp.h but not exported: {s}")
    for s in lookalikes:
        print(f"internal, but named like a public call: {s}")
    if extra or missing or lookalikes:
        print(f"check-exports: FAILED ({len(extra)} extra, {len(missing)} missing, "
              f"{len(lookalikes)} internal look-alikes)")
        return 1
    print(f"check-exports: libzpp.so exports the {len(want)} calls of zpp.h and nothing else"
          + ("; no internal name extends a public one" if len(argv) == 4 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
