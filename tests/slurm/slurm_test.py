#!/usr/bin/env python3
"""zpp-health and zpp-perf under a real Slurm: srun's environment alone.

    slurm_test.py BIN_DIR DRAIN_SCRIPT [--repeat N]

(--repeat N: only the corrupting-rank run, N times on one cluster, every
other try with the second node's tasks started 0.25 s late, counting the
tries that fail; for an exit code that is right most of the time.)

Starts a private Slurm in a temporary folder: munged with its own key and
socket, slurmctld, and two slurmd on this one machine (slurm.conf's
multiple-slurmd setup: NodeName=127.0.0.1 and NodeName=127.0.0.2, each with
its own port, both at NodeAddr 127.0.0.1), on ports of their own, so that a
system Slurm is never touched. Then, with nothing but ZPP_SECRET exported
(no MASTER_ADDR, MASTER_PORT, ZPP_ROOT or ZPP_HOSTID):

  srun -N 2 -n 4 --ntasks-per-node=2 zpp-health   healthy, exit 0, 4 ranks
                                                   on 2 nodes named by Slurm
  the same with ZPP_FAULT=corrupt:rank=3           exit 3, node 127.0.0.2's
                                                   rank 3 named (the drain
                                                   mapping of docs/zpp-health.md);
                                                   again with node 2's tasks
                                                   started 0.25 s late: still
                                                   3 (srun --kill-on-bad-exit=1
                                                   terminates the step at the
                                                   first rank's exit 3)
  srun -N 2 -n 4 --ntasks-per-node=2 zpp-perf      layout 2x2, launcher srun
  srun -N 2 -n 4 -m cyclic zpp-perf                layout 2x2 with ranks taken
                                                   in turn, task 0 still first
  srun -n 1 zpp-perf, without ZPP_SECRET           one rank, no rendezvous
  srun -N 2 -n 4 zpp-train                         3 steps, 4 ranks on 2 nodes
  zpp-health-slurm-drain.sh on node 2              healthy: left idle; with a
                                                   rank corrupting: drained,
                                                   reason "zpp-health exit 3
                                                   (wrong data): rank 1 ..."

The rendezvous host is the step's first node (127.0.0.1, the name of the
first slurmd; the second's name never resolves anywhere and need not), the
port is derived from the job and step ids, node identities come from
SLURMD_NODENAME.

Every daemon runs in a session of its own and is stopped at the end, pass or
fail (SIGTERM to its process group, then SIGKILL), with any process that
still carries this Slurm's SLURM_CONF (slurmstepd, tasks); the folder is
removed. Every wait is bounded. Exit 77 (skip) with the reason where Slurm
cannot run here: not root, a package missing, a daemon that does not start.
"""
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from zpptest import SKIP, Fail, check, log  # noqa: E402

NODES = ["127.0.0.1", "127.0.0.2"]
TOOLS = ["munged", "slurmctld", "slurmd", "srun", "sinfo", "scancel", "scontrol"]


def skip(msg):
    log("skip: " + msg)
    sys.exit(SKIP)


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Cluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="zpp-slurm-")
        # munged wants every folder above its socket searchable by all.
        os.chmod(self.dir, 0o755)
        self.procs = []  # (name, Popen), each the leader of its own session
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        # Only what srun gives, and the secret a user exports before it.
        for k in list(self.env):
            if (k.startswith("SLURM") and k != "SLURM_CONF") or k in (
                    "MASTER_ADDR", "MASTER_PORT", "ZPP_ROOT", "ZPP_HOSTID", "ZPP_FAULT", "RANK",
                    "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK"):
                del self.env[k]
        self.env["ZPP_SECRET"] = os.urandom(16).hex()

    def path(self, *p):
        return os.path.join(self.dir, *p)

    def tail(self, name, n=3):
        try:
            with open(self.path("log", name)) as f:
                return " | ".join(line.strip() for line in f.read().splitlines()[-n:])
        except OSError:
            return "(no log)"

    def spawn(self, name, argv):
        out = open(self.path("log", name + ".out"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                             start_new_session=True, cwd=self.dir)
        self.procs.append((name, p))
        return p

    def start(self):
        os.makedirs(self.path("log"))
        os.makedirs(self.path("state"))
        os.makedirs(self.path("spool"))
        key = self.path("key")
        os.makedirs(key, mode=0o700)
        with open(self.path("key", "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("key", "munge.key"), stat.S_IRUSR)
        os.makedirs(self.path("munge"), mode=0o755)
        sock = self.path("munge", "munge.socket")
        self.spawn("munged", ["munged", "-F", "--socket=" + sock,
                              "--key-file=" + self.path("key", "munge.key"),
                              "--pid-file=" + self.path("munge", "munged.pid"),
                              "--seed-file=" + self.path("key", "seed"),
                              "--log-file=" + self.path("log", "munged.log")])
        deadline = time.time() + 15
        while not os.path.exists(sock):
            if self.procs[0][1].poll() is not None or time.time() > deadline:
                skip("munged did not start: " + self.tail("munged.out"))
            time.sleep(0.1)

        ctld, d1, d2 = free_ports(3)
        host = socket.gethostname().split(".")[0]
        nodes = "\n".join(
            "NodeName=%s NodeAddr=127.0.0.1 Port=%d CPUs=2 State=UNKNOWN" % (n, p)
            for n, p in zip(NODES, (d1, d2)))
        with open(self.conf, "w") as f:
            f.write("""# zpp's test Slurm: one machine, two slurmd
ClusterName=zpptest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={d1}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool/%n
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd-%n.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdLogFile={dir}/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Two emulated nodes of 2 CPUs on whatever this machine has.
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=2
{nodes}
PartitionName=zpp Nodes={nodelist} Default=YES MaxTime=10 State=UP
""".format(host=host, ctld=ctld, d1=d1, sock=sock, dir=self.dir, nodes=nodes,
           nodelist=",".join(NODES)))
        self.spawn("slurmctld", ["slurmctld", "-D", "-f", self.conf])
        for n in NODES:
            self.spawn("slurmd-" + n, ["slurmd", "-D", "-N", n, "-f", self.conf])
        deadline = time.time() + 60
        states = ""
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    skip("%s could not start (exit %s): %s" % (name, p.returncode, self.tail(name + ".out")))
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env,
                               capture_output=True, text=True, timeout=20)
            states = r.stdout.strip().replace("\n", ", ")
            idle = [line.split()[0] for line in r.stdout.splitlines() if line.split()[1:] == ["idle"]]
            if sorted(idle) == sorted(NODES):
                log("slurm up: %s (slurmctld port %d, slurmd %d and %d)" % (states, ctld, d1, d2))
                return
            time.sleep(0.5)
        skip("the two slurmd did not become idle in 60 s (sinfo: %r): slurmctld: %s; slurmd: %s" %
             (states or r.stderr.strip(), self.tail("slurmctld.out"), self.tail("slurmd-%s.out" % NODES[1])))

    def srun(self, args, env=None, timeout=120):
        e = dict(self.env)
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        argv = ["srun", "--time=2", "--kill-on-bad-exit=1"] + args
        log("$ " + " ".join(argv))
        try:
            r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=timeout, cwd=self.dir)
        except subprocess.TimeoutExpired:
            raise Fail("%s: no end after %d s" % (" ".join(argv), timeout))
        return r

    def stop(self):
        if os.path.exists(self.conf):
            subprocess.run(["scancel", "--full", "--quiet", "--partition=zpp"], env=self.env,
                           capture_output=True, timeout=20)
        for name, p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for name, p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)
        # slurmstepd and tasks leave the daemons' sessions; they carry our SLURM_CONF.
        mark = ("SLURM_CONF=" + self.conf).encode() + b"\0"
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if mark in f.read() + b"\0":
                        os.kill(int(pid), signal.SIGKILL)
                        log("killed leftover pid %s" % pid)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run_health(c, bindir):
    report = c.path("health.json")
    base = health_base(c, bindir)
    r = c.srun(base)
    log(r.stdout.strip())
    check(r.returncode == 0, "zpp-health under srun: exit %d, want 0 (healthy): %s" %
          (r.returncode, r.stderr.strip()[-2000:]))
    with open(report) as f:
        doc = json.load(f)
    check(doc["verdict"] == "healthy" and doc["exit_code"] == 0, "verdict %r" % doc["verdict"])
    check(doc["ranks"] == 4 and doc["nodes"] == 2, "%d ranks on %d nodes, want 4 on 2" %
          (doc["ranks"], doc["nodes"]))
    # Block distribution: tasks 0-1 on the first node, 2-3 on the second.
    units = {u["name"]: sorted(u["ranks"]) for u in doc["node_list"]}
    check(units == {NODES[0]: [0, 1], NODES[1]: [2, 3]}, "nodes %r, want %s: 0,1 and %s: 2,3" %
          (units, NODES[0], NODES[1]))

    run_health_corrupt(c, base, report)
    run_health_corrupt(c, base, report, skew="0.25")


def run_health_corrupt(c, base, report, skew=None):
    """Wrong data from rank 3 (task 1 of the second node): exit 3, rank and
    node named. srun's own messages (stderr) go into the failure: they say
    which task ended how ("Exited with exit code", "Terminated").

    srun runs with --kill-on-bad-exit=1: the first task to exit 3 has the
    others sent SIGTERM, and one task killed makes srun exit 143. With skew,
    the second node's tasks start that many seconds late (sh sleeps, then
    execs zpp-health), as tasks of real nodes do: their ranks then end at
    other moments than the first node's (each rank's exit waits for its
    heartbeat thread's next tick), which is when the kill used to land."""
    if os.path.exists(report):
        os.unlink(report)
    if skew:
        k = next(i for i, a in enumerate(base) if a.endswith("/zpp-health"))
        base = base[:k] + ["sh", "-c", 'if [ "$SLURM_NODEID" = 1 ]; then sleep %s; fi; exec "$@"' % skew,
                           "sh"] + base[k:]
    r = c.srun(base, env={"ZPP_FAULT": "corrupt:rank=3"})
    log(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "(no output)")
    check(r.returncode == 3, "zpp-health with rank 3 corrupting%s: exit %d, want 3; stdout: %s; srun's stderr: %s" %
          (" (second node %s s late)" % skew if skew else "", r.returncode, r.stdout.strip()[-1500:],
           r.stderr.strip()[-2000:]))
    with open(report) as f:
        doc = json.load(f)
    named = [s for s in doc.get("suspects", []) if s.get("problem") == "wrong_data"]
    check(any(s.get("rank") == 3 or 3 in s.get("ranks", []) for s in named),
          "suspects %r do not name rank 3" % doc.get("suspects"))
    check(NODES[1] in json.dumps(named), "suspects %r do not name node %s" % (named, NODES[1]))


def health_base(c, bindir):
    return ["-N", "2", "-n", "4", "--ntasks-per-node=2", os.path.join(bindir, "zpp-health"),
            "-s", "256K", "--trials", "2", "--expect-busbw", "0.001", "--timeout", "20",
            "--time-limit", "60", "--no-progress", "-J", c.path("health.json")]


def repeat_corrupt(c, bindir, n):
    """--repeat N: the corrupting-rank run N times on one cluster, every
    outcome counted; for a flaky exit code, without a cluster start per try."""
    fails = []
    for i in range(n):
        try:
            run_health_corrupt(c, health_base(c, bindir), c.path("health.json"),
                               skew="0.25" if i % 2 else None)
        except (Fail, OSError, KeyError, ValueError) as e:
            fails.append(i)
            print("FAIL (try %d of %d): %s" % (i + 1, n, e), file=sys.stderr)
    log("corrupting rank 3 under srun: %d of %d tries failed" % (len(fails), n))
    check(not fails, "%d of %d tries failed (tries %s)" % (len(fails), n, ", ".join(str(i + 1) for i in fails)))


def run_perf(c, bindir, extra, want_launcher, secret=True):
    out = c.path("perf.json")
    if os.path.exists(out):
        os.unlink(out)
    env = {} if secret else {"ZPP_SECRET": None}
    r = c.srun(extra + [os.path.join(bindir, "zpp-perf"), "-b", "64K", "-e", "64K", "-n", "3", "-w",
                        "1", "-t", "allgather,allreduce", "--timeout", "20", "-q", "-J", out], env=env)
    log(r.stdout.strip())
    check(r.returncode == 0, "zpp-perf %s: exit %d: %s" % (extra, r.returncode, r.stderr.strip()[-2000:]))
    with open(out) as f:
        doc = json.load(f)
    h = doc["header"]
    check(h["launcher"] == want_launcher, "launcher %r, want %r" % (h["launcher"], want_launcher))
    check(all(rec.get("check", True) is not False for rec in doc["records"]), "a check failed")
    return h


def run_train(c, bindir):
    out = c.path("train.json")
    r = c.srun(["-N", "2", "-n", "4", "--ntasks-per-node=2", os.path.join(bindir, "zpp-train"),
                "--steps", "3", "--hidden", "128", "--embed", "16", "--context", "8", "--batch", "64",
                "-q", "--json", out])
    check(r.returncode == 0, "zpp-train under srun: exit %d: %s" % (r.returncode, r.stderr.strip()[-2000:]))
    with open(out) as f:
        doc = json.load(f)
    check(doc["launcher"] == "srun" and doc["ranks"] == 4 and doc["nodes"] == 2,
          "zpp-train: %r" % {k: doc.get(k) for k in ("launcher", "ranks", "nodes")})


def run_drain(c, bindir, script):
    """The HealthCheckProgram/Prolog wrapper on node 2: healthy leaves it be,
    wrong data drains it with the reason, as docs/zpp-health.md maps them."""
    args = ["-N", "2", "-s", "256K", "--trials", "1", "--expect-busbw", "0.001", "--timeout", "20", "-q"]
    env = dict(c.env, SLURMD_NODENAME=NODES[1], ZPP_HEALTH=os.path.join(bindir, "zpp-health"),
               ZPP_HEALTH_LIMIT="60")

    def node_state():
        r = subprocess.run(["sinfo", "-h", "-n", NODES[1], "-o", "%T|%E"], env=c.env,
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip()

    r = subprocess.run(["bash", script] + args, env=env, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and node_state().startswith("idle"),
          "drain script, healthy: exit %d, node %r: %s" % (r.returncode, node_state(), r.stderr))
    env["ZPP_FAULT"] = "corrupt:rank=1"
    r = subprocess.run(["bash", script] + args, env=env, capture_output=True, text=True, timeout=120)
    state = node_state()
    log("drain script, rank 1 corrupting: exit %d, node %s" % (r.returncode, state))
    check(r.returncode == 1 and state.startswith("drain") and
          "zpp-health exit 3 (wrong data): rank 1" in state,
          "drain script, wrong data: exit %d, node %r: %s" % (r.returncode, state, r.stderr))
    subprocess.run(["scontrol", "update", "nodename=" + NODES[1], "state=resume"], env=c.env,
                   capture_output=True, timeout=20)


def main():
    args = sys.argv[1:]
    repeat = 0
    if len(args) == 4 and args[2] == "--repeat" and args[3].isdigit() and int(args[3]) > 0:
        repeat = int(args[3])
        args = args[:2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    bindir = os.path.abspath(args[0])
    drain_script = os.path.abspath(args[1])
    if os.geteuid() != 0:
        skip("needs root: the test's slurmd run tasks as root and its munged keeps a root-owned key")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        skip("not installed: %s (Debian: slurm-wlm and munge; scripts/setup-deps.sh installs them)" %
             " ".join(missing))
    helptext = subprocess.run(["slurmd", "-h"], capture_output=True, text=True, timeout=20)
    if "-N node" not in helptext.stdout + helptext.stderr:
        skip("this slurmd has no -N: built without multiple-slurmd support, so one machine cannot "
             "play two Slurm nodes")
    c = Cluster()
    try:
        c.start()
        if repeat:
            repeat_corrupt(c, bindir, repeat)
            log("slurm_test: pass")
            return 0
        run_health(c, bindir)
        h = run_perf(c, bindir, ["-N", "2", "-n", "4", "--ntasks-per-node=2"], "srun")
        check(h["ranks"] == 4 and h["nodes"] == 2 and h["layout"] == "2x2",
              "zpp-perf: %d ranks, %d nodes, layout %r, want 4, 2, 2x2" % (h["ranks"], h["nodes"], h["layout"]))
        h = run_perf(c, bindir, ["-N", "2", "-n", "4", "-m", "cyclic"], "srun")
        check(h["ranks"] == 4 and h["nodes"] == 2 and h["layout"] == "2x2/cyclic",
              "zpp-perf cyclic: %d ranks, %d nodes, layout %r" % (h["ranks"], h["nodes"], h["layout"]))
        log("cyclic layout: %s" % h["layout"])
        h = run_perf(c, bindir, ["-n", "1"], "srun", secret=False)
        check(h["ranks"] == 1, "srun -n 1: %d ranks" % h["ranks"])
        run_train(c, bindir)
        run_drain(c, bindir, drain_script)
    except (Fail, OSError, KeyError, ValueError, TypeError) as e:
        print("FAIL: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        for name, _ in c.procs:
            print("  %s: %s" % (name, c.tail(name + ".out")), file=sys.stderr)
        return 1
    finally:
        c.stop()
    log("slurm_test: pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
