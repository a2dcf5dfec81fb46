#!/usr/bin/env python3
"""Tests of perf/emucluster/emucluster.sh, the emulated cluster. One case per ctest entry:

    emucluster_test.py SCRIPT CASE [MPI_PROBE]

Exit 0 pass, 1 fail, 77 skipped (not root, no network namespaces, no mpirun).
Every case that builds a cluster also checks that teardown left nothing
behind: no namespace with the run's prefix, no new interface in the host's
namespace, no rank process alive.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOL = 0.10  # the measured rate must land within 10% of the asked one


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "pylib"))
import zpptest  # noqa: E402
from zpptest import SKIP, Fail, check, log  # noqa: E402

# --- environment ------------------------------------------------------------


def need_netns():
    """Skip unless we can really build namespaces (root with CAP_NET_ADMIN)."""
    zpptest.need_netns(tools=("tc", "iperf3"))


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def host_links():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def pid_alive(pid):
    """True for a running process; a zombie counts as gone (our pid 1 may
    never reap orphans, but a zombie holds no namespace and runs nothing)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except FileNotFoundError:
        return False
    return True


class Run:
    """One run of the script, and the checks that it left nothing behind."""

    def __init__(self, script, args, cmd=None, wait=True, timeout=120, env=None):
        self.links_before = host_links()
        argv = [script] + args
        if cmd:
            argv += ["--"] + cmd
        log("$ " + " ".join(argv))
        self.t0 = time.monotonic()
        # A new session: signals we send go to the script alone, as when it
        # is the foreground job of a terminal, and its ranks (own sessions)
        # are the script's job to stop.
        # Output goes to files, not pipes: after a SIGKILL of the script its
        # ranks (and their output filters) may hold a pipe open long after.
        self.fout = tempfile.TemporaryFile(mode="w+")
        self.ferr = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(argv, stdout=self.fout, stderr=self.ferr, env=env,
                                  text=True, start_new_session=True)
        self.prefix = "zpp%d" % self.p.pid
        self.out = self.err = ""
        self.rc = None
        if wait:
            self.wait(timeout)

    def wait(self, timeout=120):
        try:
            self.rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise Fail("script did not finish in %d s:\n%s\n%s" % (timeout, *self.read()))
        # The script waits for its output filters before it exits (bounded),
        # so the files are complete here.
        self.out, self.err = self.read()
        self.seconds = time.monotonic() - self.t0
        sys.stdout.write(self.out)
        sys.stdout.write(self.err)
        log("(exit %d after %.1f s)" % (self.rc, self.seconds))
        return self.rc

    def read(self):
        self.fout.seek(0)
        self.ferr.seek(0)
        return self.fout.read(), self.ferr.read()

    def wait_for_namespaces(self, count, timeout=20):
        """Wait until the cluster is up (count namespaces with our prefix)."""
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            if len(self.mine()) >= count:
                return
            check(self.p.poll() is None, "script exited early with %s" % self.p.returncode)
            time.sleep(0.05)
        raise Fail("the cluster did not come up")

    def mine(self):
        return {n for n in namespaces() if n.startswith(self.prefix + "-")}

    def assert_clean(self, rank_pids=()):
        left = self.mine()
        check(not left, "namespaces left behind: %s" % sorted(left))
        new_links = host_links() - self.links_before
        check(not new_links, "interfaces left in the host namespace: %s" % sorted(new_links))
        # Node namespaces are destroyed asynchronously by the kernel; a rank
        # still alive would keep one (and its veth) around.
        alive = [p for p in rank_pids if pid_alive(p)]
        check(not alive, "rank processes still alive: %s" % alive)
        log("clean: no namespace, interface or rank left")


def rank_lines(text, key):
    """Lines 'key k=v k=v ...' printed by ranks, parsed into dicts."""
    rows = []
    for line in text.splitlines():
        m = re.search(r"\b%s (.*)$" % key, line)
        if m:
            rows.append(dict(kv.split("=", 1) for kv in m.group(1).split()))
    return rows


ENV_PRINT = ("echo ENV rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK lws=$LOCAL_WORLD_SIZE "
             "hostid=$ZPP_HOSTID group=$GROUP_RANK master=$MASTER_ADDR port=$MASTER_PORT "
             "ns=$(ip netns identify) host=$(hostname) node=$EMUCLUSTER_NODE pid=$$")


def check_env(rows, nodes, rpn, prefix, master_ip):
    world = nodes * rpn
    check(len(rows) == world, "expected %d ranks to report, got %d" % (world, len(rows)))
    seen = set()
    for r in rows:
        rank = int(r["rank"])
        k, local = rank // rpn, rank % rpn
        seen.add(rank)
        want = {"world": str(world), "local": str(local), "lws": str(rpn), "hostid": "node%d" % k,
                "group": str(k), "master": master_ip, "ns": "%s-n%d" % (prefix, k),
                "node": str(k)}
        for key, val in want.items():
            check(r.get(key) == val, "rank %d: %s=%r, expected %r" % (rank, key, r.get(key), val))
        check(r["port"].isdigit(), "rank %d: MASTER_PORT=%r" % (rank, r["port"]))
    check(seen == set(range(world)), "ranks reported: %s" % sorted(seen))


# --- cases ------------------------------------------------------------------------


def case_usage(script, _):
    """Bad arguments give a clear message and exit 2, before anything is built
    (runs without root)."""
    bad = [
        (["-r", "1mbps"], "bits per second"),
        (["-n", "2", "--node-rate", "5=200mbit"], "only 2 nodes"),
        (["-n", "0"], "1..200 nodes"),
        (["--link-down", "1"], "NODE@SECONDS"),
        (["--subnet", "10.300.0"], "--subnet"),
        (["--host-queue", "0"], "--host-queue"),
        (["--host-queue", "deep"], "--host-queue"),
        (["--tbf-latency", "5"], "--tbf-latency"),
        (["--bogus"], "unknown option"),
    ]
    for args, msg in bad:
        r = subprocess.run([script] + args + ["--", "true"], capture_output=True, text=True)
        log("%s -> %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()))
        check(r.returncode == 2, "%s: exit %d, expected 2" % (args, r.returncode))
        check(msg in r.stderr, "%s: message %r lacks %r" % (args, r.stderr, msg))
    r = subprocess.run([script, "--help"], capture_output=True, text=True)
    check(r.returncode == 0 and "--node-rate" in r.stdout, "--help")


def case_host(script, _):
    """What the host lacks is named before anything is built, one line each
    with how to get it: here two tools hidden from PATH, and a congestion
    control the kernel does not have (a probe in the hub namespace)."""
    need_netns()
    hidden = {"iperf3", "flock"}
    with tempfile.TemporaryDirectory() as bindir:
        for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
            for name in os.listdir(d) if os.path.isdir(d) else ():
                dst = os.path.join(bindir, name)
                if name not in hidden and not os.path.exists(dst):
                    os.symlink(os.path.join(d, name), dst)
        # Other emucluster tests may run beside this one (ctest -j), so the
        # host's namespace list says nothing: an `ip` that logs its calls does.
        calls = os.path.join(bindir, "ip.calls")
        os.unlink(os.path.join(bindir, "ip"))
        with open(os.path.join(bindir, "ip"), "w") as f:
            f.write('#!/bin/sh\necho "$*" >> %s\nexec %s "$@"\n' % (calls, shutil.which("ip")))
        os.chmod(os.path.join(bindir, "ip"), 0o755)
        run = Run(script, ["-n", "2"], cmd=["true"], env=dict(os.environ, PATH=bindir))
        check(run.rc == 1, "missing tools: exit %d, want 1 (setup)" % run.rc)
        for line in ("missing tool: flock (Debian: util-linux)", "missing tool: iperf3 (Debian: iperf3"):
            check(line in run.err, "no line %r in %r" % (line, run.err))
        made = [c for c in open(calls).read().splitlines() if "netns add" in c] if os.path.exists(calls) else []
        check(not made, "namespaces were created before the check: %s" % made)
        run.assert_clean()
    run = Run(script, ["-n", "2", "--tcp-cc", "nosuchcc"], cmd=["true"])
    lines = [ln for ln in run.err.splitlines() if "error:" in ln]
    check(run.rc == 1 and any("'nosuchcc' is not in this kernel" in ln and "modprobe tcp_nosuchcc" in ln
                              for ln in lines), "unknown congestion control: exit %d, %r" % (run.rc, lines))
    check("iperf3" not in run.err and "starting" not in run.err, "the run went on after the check")
    run.assert_clean()


def as_nobody(argv):
    if os.geteuid() != 0:
        return argv
    if not shutil.which("setpriv"):
        log("skip: setpriv missing, cannot drop root")
        sys.exit(SKIP)
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + argv


def case_nonroot(script, _):
    """Without root it says so plainly, offers the loopback run (exit 77), and
    the loopback run itself works without root."""
    # The unprivileged user must reach the script: a checkout under /root
    # (mode 700) is out of its reach whatever the script's own mode.
    if not os.access(script, os.X_OK) or (
            os.geteuid() == 0 and subprocess.run(as_nobody(["test", "-x", script])).returncode != 0):
        log("skip: the script is not executable by an unprivileged user (its mode or a folder above it)")
        sys.exit(SKIP)
    r = subprocess.run(as_nobody([script, "-n", "2", "-l", "2", "--", "true"]),
                       capture_output=True, text=True)
    log(r.stderr)
    check(r.returncode == SKIP, "exit %d, expected %d" % (r.returncode, SKIP))
    check("needs root" in r.stderr, "message does not say it needs root")
    check("--loopback -n 2 -l 2 -- true" in r.stderr, "message does not offer the loopback run")
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o777)
        r = subprocess.run(as_nobody([script, "--loopback", "-n", "2", "-l", "2", "--no-prefix",
                                      "--", "sh", "-c", ENV_PRINT.replace("$(ip netns identify)",
                                                                          "none")]),
                           capture_output=True, text=True, cwd=d)
    log(r.stdout + r.stderr)
    check(r.returncode == 0, "loopback run failed (%d)" % r.returncode)
    rows = rank_lines(r.stdout, "ENV")
    check(len(rows) == 4, "loopback: %d ranks reported" % len(rows))
    for row in rows:
        rank = int(row["rank"])
        check(row["hostid"] == "node%d" % (rank // 2), "loopback rank %d hostid %s" % (rank, row["hostid"]))
        check(row["master"] == "127.0.0.1", "loopback MASTER_ADDR %s" % row["master"])


def check_rate_json(path, asked):
    with open(path) as f:
        rep = json.load(f)
    links = rep["links"]
    check(len(links) == len(asked), "JSON has %d links, expected %d" % (len(links), len(asked)))
    for link, want in zip(links, asked):
        check(link["asked_bps"] == want, "node %d asked %s, expected %d" % (link["node"], link["asked_bps"], want))
        for d in ("egress", "ingress"):
            got = link[d + "_bps"]
            log("node %d %s: asked %.0f Mbit/s, measured %.1f Mbit/s (%.1f%%)"
                % (link["node"], d, want / 1e6, got / 1e6, 100.0 * got / want))
            check(abs(got / want - 1.0) <= TOL,
                  "node %d %s measured %.1f Mbit/s, not within %d%% of %.0f Mbit/s"
                  % (link["node"], d, got / 1e6, TOL * 100, want / 1e6))
        check(link["ok"] is True, "node %d not ok in the JSON" % link["node"])
    check(rep["all_ok"] is True, "all_ok is not true")
    return rep


def case_rate(script, _):
    """2 nodes shaped to 200 Mbit/s: iperf3 measures both directions of both
    links within 10%; teardown is clean."""
    need_netns()
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "rate.json")
        # Three tries at most: the machine is shared with compilers, and a
        # shaped link can be slowed by a busy CPU but never sped up.
        run = Run(script, ["-n", "2", "-r", "200mbit", "--rate-tries", "3", "--rate-json", js])
        check(run.rc == 0, "exit %d" % run.rc)
        check_rate_json(js, [200_000_000] * 2)
    run.assert_clean()


def case_node_rate(script, _):
    """1 Gbit/s links with node 2 overridden to 200 Mbit/s: each link is
    measured at its own rate."""
    need_netns()
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "rate.json")
        run = Run(script, ["-n", "3", "-r", "1gbit", "--node-rate", "2=200mbit",
                           "--rate-tries", "3", "--rate-json", js])
        check(run.rc == 0, "exit %d" % run.rc)
        rep = check_rate_json(js, [1_000_000_000, 1_000_000_000, 200_000_000])
        slow = rep["links"][2]["egress_bps"]
        fast = rep["links"][0]["egress_bps"]
        check(slow < fast / 3, "node 2 (%.0f) is not clearly slower than node 0 (%.0f)" % (slow, fast))
    run.assert_clean()


def tbf_options(ns, dev):
    out = subprocess.run(["tc", "-j", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True,
                         text=True, check=True).stdout
    q = [x for x in json.loads(out) if x.get("kind") == "tbf"]
    check(len(q) == 1, "%s %s: no tbf qdisc (%s)" % (ns, dev, out.strip()))
    return q[0]["options"] if q else {}


def case_queues(script, _):
    """The two sides of a link get their own queue: the hub's (the switch
    port) --tbf-latency, the node's (the host's NIC queue) --host-queue
    packets of 1514 bytes, or the switch port's with 'switch'. tc reports a
    tbf queue as the wait it allows: (limit - burst) / rate."""
    need_netns()
    rate = 200_000_000
    burst = 50_000  # 2 ms of 200 Mbit/s
    cases = [([], 1000 * 1514, 5000), (["--host-queue", "100", "--tbf-latency", "1ms"], 100 * 1514, 1000),
             (["--host-queue", "switch"], None, 5000)]
    for extra, host_limit, switch_us in cases:
        prefix = "zppq%d" % os.getpid()
        run = Run(script, ["-n", "2", "-r", "200mbit", "--no-check-rate", "--keep", "--prefix", prefix]
                  + extra, cmd=["true"])
        run.prefix = prefix
        try:
            check(run.rc == 0, "%s: exit %d" % (extra, run.rc))
            for k in range(2):
                host = tbf_options("%s-n%d" % (prefix, k), "veth0")
                hub = tbf_options("%s-hub" % prefix, "node%d" % k)
                want_host = switch_us if host_limit is None else (host_limit - burst) / (rate / 8) * 1e6
                log("%s node %d: host queue %s us (want %.0f), switch %s us (want %d)"
                    % (extra, k, host.get("lat"), want_host, hub.get("lat"), switch_us))
                check(abs(host.get("lat", -1) - want_host) <= 0.01 * want_host + 1,
                      "%s: node %d's own queue %s us, want %.0f" % (extra, k, host.get("lat"), want_host))
                check(hub.get("lat") == switch_us,
                      "%s: node %d's switch port queue %s us, want %d" % (extra, k, hub.get("lat"), switch_us))
        finally:
            subprocess.run([script, "--cleanup", "--prefix", prefix], capture_output=True)
        run.assert_clean()


CC_ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
CC_LOCK = "/run/zpp-emucluster-tcp-cc.lock"  # emucluster-host.sh's, so runs side by side agree


def read_allowed_cc():
    """The host-wide list, read under the script's lock: a cluster being built
    beside this test (another test under ctest -j, a benchmark) adds cubic
    for the moment its nodes choose, holding the lock; unlocked, this read
    could see that moment and blame the run under test."""
    import fcntl
    with open(CC_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(CC_ALLOWED) as f:
            return f.read().split()


def write_allowed_cc(names):
    """Sets the host-wide list under the script's own lock, so that a cluster
    being built beside this test never restores over it mid-choice."""
    import fcntl
    with open(CC_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(CC_ALLOWED, "w") as f:
            f.write(" ".join(names) + "\n")


# Each rank prints its namespace's setting, the algorithm a fresh TCP
# connection inside the node really runs, and the host-wide allowed list as
# the rank sees it: the script must have put that back before any rank ran.
SHOW_CC = ["python3", "-c", """
import socket
with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
    cc = f.read().strip()
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); a, _ = l.accept()
conn = {s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\\0").decode() for s in (c, a)}
with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
    allowed = ",".join(f.read().split())
print("cc=%s conn=%s allowed=%s" % (cc, ",".join(sorted(conn)), allowed))
"""]


def ranks_cc(run):
    return [line.split("cc=")[1].split(" allowed=")[0] for line in run.out.splitlines() if "cc=" in line]


def ranks_allowed(run):
    return [line.split(" allowed=")[1] for line in run.out.splitlines() if " allowed=" in line]


def case_tcp_cc(script, _):
    """The nodes' TCP congestion control: cubic unless --tcp-cc says
    otherwise, the host's with 'host', and a clear setup error (nothing
    left behind) for one the kernel does not have. A fresh kernel 6.18 allowed
    namespaces only "reno bbr": the host-wide list is narrowed so here, the
    nodes must still run cubic, and the list must come back as it was."""
    need_netns()
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        host_cc = f.read().strip()
    before = read_allowed_cc()
    narrow = [n for n in before if n != "cubic"] or ["reno"]
    try:
        write_allowed_cc(narrow)
        run = Run(script, ["-q", "-n", "2", "--no-check-rate"], cmd=SHOW_CC)
        check(run.rc == 0 and ranks_cc(run) == ["cubic conn=cubic"] * 2,
              "allowed list %s: exit %d, nodes say %s, want cubic on both, for the namespace and its "
              "connections" % (narrow, run.rc, ranks_cc(run)))
        check("added cubic" in run.err, "the script did not say that it changed the host-wide list")
        check(ranks_allowed(run) == [",".join(narrow)] * 2, "the ranks saw the allowed list %s, want %s: "
              "the script must put it back before they start" % (ranks_allowed(run), narrow))
        check(read_allowed_cc() == narrow, "the allowed list is %s after the run, was %s"
              % (read_allowed_cc(), narrow))
        run.assert_clean()
    finally:
        write_allowed_cc(before)
    check(read_allowed_cc() == before, "could not restore the allowed list %s" % before)
    for extra, want in (([], "cubic"), (["--tcp-cc", "reno"], "reno"), (["--tcp-cc", "host"], host_cc)):
        run = Run(script, ["-q", "-n", "2", "--no-check-rate"] + extra, cmd=SHOW_CC)
        want_line = "%s conn=%s" % (want, want)
        check(run.rc == 0 and ranks_cc(run) == [want_line] * 2, "%s: exit %d, nodes say %s, want %s twice"
              % (extra, run.rc, ranks_cc(run), want_line))
        run.assert_clean()
    # Every rank of a node sees its node's setting, whichever ranks it holds.
    run = Run(script, ["-q", "-n", "2", "-l", "2", "--placement", "cyclic", "--no-check-rate"], cmd=SHOW_CC)
    check(run.rc == 0 and ranks_cc(run) == ["cubic conn=cubic"] * 4,
          "2x2 cyclic: exit %d, ranks say %s" % (run.rc, ranks_cc(run)))
    run.assert_clean()
    run = Run(script, ["-q", "-n", "2", "--no-check-rate", "--tcp-cc", "nosuchcc"], cmd=["true"])
    check(run.rc != 0 and "congestion control 'nosuchcc'" in run.err,
          "an unknown congestion control: exit %d, stderr %r" % (run.rc, run.err[-300:]))
    check(read_allowed_cc() == before, "a failed run changed the allowed list to %s" % read_allowed_cc())
    run.assert_clean()


def case_env(script, _):
    """2 nodes x 2 ranks: each rank runs in its node's namespace with the right
    environment, and MASTER_ADDR:MASTER_PORT reaches rank 0 from other nodes.
    Then 8 x 4, the largest shape we promise."""
    need_netns()
    # Rank 0 listens on MASTER_PORT; every other rank connects to it, which is
    # what a rendezvous does first.
    rendezvous = (
        "import os, socket, sys, time\n"
        "a, p, r = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']), int(os.environ['RANK'])\n"
        "n = int(os.environ['WORLD_SIZE'])\n"
        "if r == 0:\n"
        "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "    s.bind((a, p)); s.listen(n); s.settimeout(20)\n"
        "    for _ in range(n - 1): c, _x = s.accept(); c.recv(16); c.close()\n"
        "    print('RDV rank=0 joined=%d' % (n - 1))\n"
        "else:\n"
        "    for i in range(200):\n"
        "        try:\n"
        "            c = socket.create_connection((a, p), timeout=2); break\n"
        "        except OSError: time.sleep(0.05)\n"
        "    else: sys.exit('rank %d cannot reach %s:%d' % (r, a, p))\n"
        "    c.sendall(b'hi'); c.close(); print('RDV rank=%d joined=1' % r)\n")
    cmd = ["sh", "-c", ENV_PRINT + '; exec python3 -c "$0"', rendezvous]
    run = Run(script, ["-n", "2", "-l", "2", "--no-check-rate", "--timeout", "60"], cmd)
    check(run.rc == 0, "exit %d" % run.rc)
    rows = rank_lines(run.out, "ENV")
    check_env(rows, 2, 2, run.prefix, "10.213.0.1")
    for row in rows:
        check(row["host"] == row["ns"], "rank %s hostname %s" % (row["rank"], row["host"]))
    check(len(rank_lines(run.out, "RDV")) == 4, "not every rank joined the rendezvous")
    # Output is prefixed with the rank and node.
    check(re.search(r"^\[r3 node1\] ENV rank=3 ", run.out, re.M), "rank output is not prefixed")
    run.assert_clean([int(r["pid"]) for r in rows])
    # The largest shape we promise: 8 nodes of 4 ranks.
    run = Run(script, ["-n", "8", "-l", "4", "--no-check-rate", "--no-prefix", "--timeout", "60"],
              ["sh", "-c", ENV_PRINT])
    check(run.rc == 0, "8 x 4: exit %d" % run.rc)
    rows = rank_lines(run.out, "ENV")
    check_env(rows, 8, 4, run.prefix, "10.213.0.1")
    run.assert_clean([int(r["pid"]) for r in rows])


def case_fail(script, _):
    """A failing rank: the script names it, returns its exit code, stops the
    other ranks (fail-fast) and still tears everything down."""
    need_netns()
    with tempfile.TemporaryDirectory() as d:
        cmd = ["sh", "-c", 'echo $$ > %s/pid.$RANK; if [ "$RANK" = 2 ]; then sleep 0.5; exit 7; fi; '
               'exec sleep 60' % d]
        run = Run(script, ["-n", "2", "-l", "2", "--no-check-rate"], cmd, timeout=60)
        pids = [int(open(os.path.join(d, f)).read()) for f in os.listdir(d)]
    check(run.rc == 7, "exit %d, expected the failing rank's 7" % run.rc)
    check("FAILED rank 2 (node1): exit code 7" in run.err, "the failing rank is not named")
    check(run.seconds < 30, "the other ranks were not stopped (%.1f s)" % run.seconds)
    check(len(pids) == 4, "only %d ranks started" % len(pids))
    run.assert_clean(pids)
    # And with a log directory: every rank's output lands in its own file.
    with tempfile.TemporaryDirectory() as d:
        run = Run(script, ["-n", "2", "--no-check-rate", "--log-dir", d],
                  ["sh", "-c", 'echo out-$RANK; echo err-$RANK >&2; exit $RANK'])
        check(run.rc == 1, "exit %d, expected rank 1's 1" % run.rc)
        for r in (0, 1):
            text = open(os.path.join(d, "rank%d.log" % r)).read()
            check("out-%d" % r in text and "err-%d" % r in text, "rank%d.log: %r" % (r, text))
    run.assert_clean()


def signal_case(script, sig, when):
    with tempfile.TemporaryDirectory() as d:
        if when == "ranks":
            run = Run(script, ["-n", "2", "-l", "2", "--no-check-rate"],
                      ["sh", "-c", "echo $$ > %s/pid.$RANK; exec sleep 60" % d], wait=False)
            t_end = time.monotonic() + 20
            while len(os.listdir(d)) < 4 and time.monotonic() < t_end:
                time.sleep(0.05)
            check(len(os.listdir(d)) == 4, "ranks did not start")
        else:  # during the iperf3 rate check: iperf3 runs in the namespaces
            run = Run(script, ["-n", "2", "-r", "100mbit", "--rate-seconds", "3"],
                      ["sh", "-c", "echo $$ > %s/pid.$RANK; exec sleep 60" % d], wait=False)
            run.wait_for_namespaces(3)
            time.sleep(1.5)
        run.p.send_signal(sig)
        rc = run.wait(timeout=30)
        pids = [int(open(os.path.join(d, f)).read()) for f in os.listdir(d)]
    want = 128 + sig
    check(rc == want, "exit %d after signal %d, expected %d" % (rc, sig, want))
    check(run.seconds < 25, "took %.1f s to stop" % run.seconds)
    if when != "ranks":
        check(not pids, "ranks started although the rate check was interrupted")
    run.assert_clean(pids)


def case_signal(script, _):
    """SIGINT (Ctrl-C) and SIGTERM, while ranks run and during the rate check:
    everything is torn down and the exit code tells the signal."""
    need_netns()
    signal_case(script, signal.SIGINT, "ranks")
    signal_case(script, signal.SIGTERM, "ranks")
    signal_case(script, signal.SIGINT, "rate-check")


def case_timeout(script, _):
    """--timeout stops hung ranks and exits 124; teardown is clean."""
    need_netns()
    with tempfile.TemporaryDirectory() as d:
        run = Run(script, ["-n", "2", "--no-check-rate", "--timeout", "2", "--grace", "1"],
                  ["sh", "-c", "echo $$ > %s/pid.$RANK; trap '' TERM; sleep 60" % d], timeout=30)
        pids = [int(open(os.path.join(d, f)).read()) for f in os.listdir(d)]
    check(run.rc == 124, "exit %d, expected 124" % run.rc)
    check(run.seconds < 15, "took %.1f s, a rank that ignores SIGTERM was not killed" % run.seconds)
    run.assert_clean(pids)


def case_link_down(script, _):
    """--link-down 1@1+1.5: node 1 loses its link after 1 s for 1.5 s; TCP to
    node 0 works before, fails during, works after."""
    need_netns()
    probe = (
        "import os, socket, time\n"
        "r = int(os.environ['RANK']); a, p = os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])\n"
        "t0 = time.monotonic()\n"
        "if r == 0:\n"
        "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "    s.bind((a, p)); s.listen(64); s.settimeout(0.2)\n"
        "    while time.monotonic() - t0 < 4.5:\n"
        "        try: c, _ = s.accept(); c.close()\n"
        "        except OSError: pass\n"
        "else:\n"
        "    while time.monotonic() - t0 < 4.0:\n"
        "        t = time.monotonic() - t0\n"
        "        try:\n"
        "            socket.create_connection((a, p), timeout=0.2).close(); ok = 1\n"
        "        except OSError: ok = 0\n"
        "        print('PROBE t=%.2f ok=%d' % (t, ok), flush=True); time.sleep(0.1)\n")
    run = Run(script, ["-n", "2", "--no-check-rate", "--link-down", "1@1+1.5", "--timeout", "30"],
              ["python3", "-c", probe])
    check(run.rc == 0, "exit %d" % run.rc)
    rows = [(float(r["t"]), int(r["ok"])) for r in rank_lines(run.out, "PROBE")]
    check(rows, "no probe output")
    before = [ok for t, ok in rows if 0.3 < t < 0.8]
    during = [ok for t, ok in rows if 1.3 < t < 2.2]
    after = [ok for t, ok in rows if 3.0 < t]
    log("before %s during %s after %s" % (before, during, after))
    # Connection attempts right after start may race rank 0's listen.
    check(before and all(before), "link should be up before 1 s")
    check(during and not any(during), "link should be down between 1 and 2.5 s")
    check(after and any(after), "link should be up again after 2.5 s")
    check("link of node1 DOWN" in run.err and "UP again" in run.err, "no link messages")
    run.assert_clean()


def need_mpi():
    if not shutil.which("mpirun"):
        log("skip: mpirun is not installed")
        sys.exit(SKIP)


def case_mpi(script, _):
    """--mpi: mpirun puts ranks 0,1 in node 0's namespace and 2,3 in node 1's,
    each with the plain launcher's environment."""
    need_netns()
    need_mpi()
    run = Run(script, ["-n", "2", "-l", "2", "--no-check-rate", "--mpi", "--no-prefix", "--timeout", "90"],
              ["sh", "-c", ENV_PRINT])
    check(run.rc == 0, "exit %d" % run.rc)
    rows = rank_lines(run.out, "ENV")
    check_env(rows, 2, 2, run.prefix, "10.213.0.1")
    run.assert_clean([int(r["pid"]) for r in rows])


def case_mpi_link(script, probe):
    """--mpi traffic between nodes crosses the shaped link: OpenMPI's rate
    between nodes stays at 100 Mbit/s (no shared memory across namespaces)."""
    need_netns()
    need_mpi()
    if not probe or not os.access(probe, os.X_OK):
        log("skip: the MPI probe was not built")
        sys.exit(SKIP)
    run = Run(script, ["-n", "2", "-l", "2", "-r", "100mbit", "--no-check-rate", "--mpi",
                       "--no-prefix", "--timeout", "90"], [probe, "3000000", "2"])
    check(run.rc == 0, "exit %d" % run.rc)
    links = {}
    for line in run.out.splitlines():
        m = re.match(r"link 0->(\d+) bytes \d+ seconds [\d.]+ rate_bps (\d+)", line)
        if m:
            links[int(m.group(1))] = int(m.group(2))
    check(set(links) == {1, 2, 3}, "probe output: %s" % links)
    for peer in (2, 3):  # other node: limited by the link
        check(links[peer] <= 100e6 * (1 + TOL), "0->%d at %.1f Mbit/s bypassed the 100 Mbit/s link"
              % (peer, links[peer] / 1e6))
        check(links[peer] >= 100e6 * 0.5, "0->%d at %.1f Mbit/s, far below the link" % (peer, links[peer] / 1e6))
    run.assert_clean()


def case_cleanup(script, _):
    """A run killed with SIGKILL leaves its cluster; --list reports it with a
    dead owner, --cleanup removes it (and the ranks inside)."""
    need_netns()
    with tempfile.TemporaryDirectory() as d:
        run = Run(script, ["-n", "2", "--no-check-rate"],
                  ["sh", "-c", "echo $$ > %s/pid.$RANK; exec sleep 60" % d], wait=False)
        t_end = time.monotonic() + 20
        while len(os.listdir(d)) < 2 and time.monotonic() < t_end:
            time.sleep(0.05)
        run.p.kill()
        run.wait()
        pids = [int(open(os.path.join(d, f)).read()) for f in os.listdir(d)]
    check(len(run.mine()) == 3, "expected 3 leftover namespaces, found %s" % sorted(run.mine()))
    r = subprocess.run([script, "--list"], capture_output=True, text=True)
    log(r.stdout)
    check(re.search(r"^%s owner=\d+ dead" % run.prefix, r.stdout, re.M), "--list does not report the dead run")
    # With --prefix: a bare --cleanup would also remove other people's
    # --keep clusters on this machine; the dead-owner detection is what
    # --list showed above.
    r = subprocess.run([script, "--cleanup", "--prefix", run.prefix], capture_output=True, text=True)
    log(r.stdout + r.stderr)
    check(r.returncode == 0, "--cleanup exit %d" % r.returncode)
    check("removed %s" % run.prefix in r.stdout, "--cleanup did not remove it")
    r = subprocess.run([script, "--list"], capture_output=True, text=True)
    check(run.prefix not in r.stdout, "--list still shows %s" % run.prefix)
    run.assert_clean(pids)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in CASES:
        print("usage: emucluster_test.py SCRIPT CASE [MPI_PROBE]; cases: %s" % " ".join(CASES))
        return 2
    script, case = os.path.abspath(sys.argv[1]), sys.argv[2]
    extra = sys.argv[3] if len(sys.argv) > 3 else None
    try:
        CASES[case](script, extra)
    except Fail as e:
        log("FAIL: %s" % e)
        return 1
    log("PASS: %s" % case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
