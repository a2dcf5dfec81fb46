"""Runs one test body on N local ranks, torchrun-style, with a node layout.

layout "2x2" = 2 nodes of 2 ranks (ZPP_HOSTID=node0, node0, node1, node1),
"1x3" = one node of 3, "4x1" = 4 nodes of 1. Every rank is a process of its
own (python SCRIPT --rank R ...); the launcher kills them all at the timeout
(printing a hung rank's stacks first, where gdb is installed) and reports
each rank that failed, so a hung collective fails the test instead of
hanging it.
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from zpptest import free_master_port  # noqa: E402


def parse_layout(layout):
    nodes, per = (int(x) for x in layout.split("x"))
    return nodes, per


def print_stacks(rank, pid):
    """A hung rank's threads, as gdb sees them, before it is killed: where it
    waits (frames only; at most 400 lines). Nothing where gdb is missing."""
    if shutil.which("gdb") is None:
        print("launch: rank %d: no stacks (gdb is not installed)" % rank, flush=True)
        return
    try:
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 25"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=120).stdout
    except subprocess.TimeoutExpired:
        print("launch: rank %d: gdb took over 120 s; no stacks" % rank, flush=True)
        return
    lines = [ln for ln in out.splitlines() if ln.startswith(("Thread ", "#"))]
    print("launch: rank %d's threads (gdb -p %d):\n%s" % (rank, pid, "\n".join(lines[:400])), flush=True)


def spawn(script, layout, args=(), timeout=300, env=None, expect=None):
    """Returns 0 if every rank exited 0 (or as `expect[rank]` says), else 1."""
    nodes, per = parse_layout(layout)
    n = nodes * per
    port = free_master_port()
    procs = []
    for r in range(n):
        e = dict(os.environ)
        e.update(env or {})
        e.update(RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r % per),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 ZPP_HOSTID="node%d" % (r // per), ZPP_TEST_LAYOUT=layout)
        procs.append(subprocess.Popen([sys.executable, script, "--rank", str(r)] + list(args),
                                      env=e, start_new_session=True))
    deadline = time.time() + timeout
    codes = [None] * n
    while time.time() < deadline and any(c is None for c in codes):
        for i, p in enumerate(procs):
            if codes[i] is None:
                codes[i] = p.poll()
        time.sleep(0.1)
    status = 0
    for i, p in enumerate(procs):
        if codes[i] is None:
            print("launch: rank %d still running after %d s: killed" % (i, timeout), flush=True)
            print_stacks(i, p.pid)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            status = 1
            continue
        want = 0 if expect is None else expect(i)
        if want is not None and codes[i] != want:
            print("launch: rank %d exited %d (expected %d)" % (i, codes[i], want), flush=True)
            status = 1
    return status


def main(script, body, default_layout, timeout):
    """The entry point of a test script: `SCRIPT [LAYOUT]` spawns the ranks,
    each of which runs `SCRIPT LAYOUT --rank R`, i.e. body(R)."""
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("layout", nargs="?", default=default_layout)
    p.add_argument("--rank", type=int)
    a = p.parse_args()
    if a.rank is not None:
        body(a.rank)
        return 0
    return spawn(os.path.abspath(script), a.layout, [a.layout], timeout=timeout)
