"""The Python test helpers, shared by every Python test driver under tests/.

A driver puts this folder on sys.path and imports what it needs:

    sys.path.insert(0, os.path.join(<path to tests>, "pylib"))
    from zpptest import SKIP, Fail, check, log, need_netns, free_master_port

Conventions: exit 0 pass, 1 fail, SKIP (77) skipped (ctest SKIP_RETURN_CODE);
check() raises Fail at the first broken condition; a driver that wants every
failure of a run reported uses a Tally instead.
"""
import os
import random
import shutil
import socket
import subprocess
import sys

SKIP = 77


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


class Tally:
    """Soft checks: each failure is printed and counted, the run goes on."""

    def __init__(self, stream=sys.stderr):
        self.failures = []
        self.stream = stream

    def check(self, cond, msg):
        if not cond:
            self.failures.append(msg)
            print("FAIL: " + msg, file=self.stream)


def log(msg):
    print(msg, flush=True)


def skip(msg):
    log("skip: " + msg)
    sys.exit(SKIP)


def need_netns(tools=("tc",), probe="zpptestprobe"):
    """Skips (exit 77) unless network namespaces can really be made here
    (root with CAP_NET_ADMIN) and the tools are installed."""
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    name = "%s%d" % (probe, os.getpid())
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        skip("'ip netns add' fails here: " + r.stderr.strip())
    subprocess.run(["ip", "netns", "del", name])
    for tool in tools:
        if not shutil.which(tool):
            skip("%s is not installed" % tool)


# --- a MASTER_PORT for tests that launch ranks from the environment ----------
# zpp's environment launch listens on MASTER_PORT + 1 (ZPP_MASTER_PORT_OFFSET)
# and the tools may use MASTER_PORT itself. Both are picked below the kernel's
# ephemeral port range: a port inside it can be handed to any client socket
# (UCX, another test's bootstrap) between the check and the listen, which made
# tests fail now and then with "Address already in use" under ctest -j.


def _bindable(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_master_port():
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    if lo > 12000:
        for _ in range(200):
            port = rng.randrange(10000, lo - 2)
            if _bindable(port) and _bindable(port + 1):
                return port
    raise RuntimeError("no free pair of ports below the ephemeral range %d" % lo)
