"""torch_zpp.torchft.ProcessGroupZpp: torchft's own process-group tests, and a
replica lost and replaced.

    test_torchft.py suite     torchft's MultiPgBaseTest (torchft/process_group_test.py,
                              shipped in its wheel) with zpp as the backend: three
                              ranks as threads of one process, each collective
                              torchft tests (allreduce and allreduce_coalesced,
                              allgather and its coalesced form, alltoall_base,
                              barrier, broadcast, reduce_scatter and its tensor
                              form, send/recv) on a configured group, then again
                              after a reconfigure with the last rank gone: it
                              shuts its group down, the others' call must fail
                              (at once: zpp's words for it joined to the
                              pattern torchft's test matches), errored() then
                              names an abort, as torchft runs gloo's (6 s)
    test_torchft.py recovery  torchft's own Manager tests (torchft/manager_integ_test.py):
                              test_ddp_healthy, test_ddp_recovery (async and
                              sync quorum) and test_ddp_recovery_multi_rank, two
                              replica groups as threads with an in-process
                              lighthouse, whose train loop's ProcessGroupGloo()
                              becomes ProcessGroupZpp: a replica raises at step
                              2, restarts, heals, and the state dicts agree (1 s)
    test_torchft.py replace   three processes, as a Manager drives them: quorum 1
                              of 3 (allreduce through get_future); process 2
                              dies; the survivors' call raises, errored() says
                              the group broke; they abort and configure quorum 2
                              of 2; a replacement process starts, and quorum 3
                              of 3 takes it: it heals by receiving the state from
                              rank 0 (send/recv), and all three agree

torchft (and parameterized, which its test module imports) come from PyPI,
installed into the torch environment by scripts/setup-torch-extras.sh.
"""
import argparse
import datetime
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHFT_VERSION = "0.2.0"  # scripts/setup-torch-extras.sh installs it


def ensure_torchft():
    """Installs torchft if missing (once per torch environment); None, or why not."""
    try:
        import parameterized  # noqa: F401
        import torchft  # noqa: F401
        return None
    except ImportError:
        pass
    import subprocess

    script = os.path.join(HERE, "..", "..", "scripts", "setup-torch-extras.sh")
    if subprocess.call(["bash", script, sys.executable, "torchft", "parameterized"]) != 0:
        return "torchft %s could not be installed (scripts/setup-torch-extras.sh)" % TORCHFT_VERSION
    return None


# ---- torchft's own tests ---------------------------------------------------------------------

# How torchft's resiliency test's pattern begins, and zpp's errors for a peer
# that left ("rank 2 (host h) left: it aborted its communicator"), failed
# ("rank 2 (host h) failed: ...") or died ("rank 0 lost rank 2 (host h): ...").
PEER_GONE_GLOO = "(Connection closed by peer|"
PEER_GONE_ZPP = r"rank \d+ \(host [^)]*\) (left|failed)|lost rank \d+"

def suite(pattern):
    import unittest

    from torchft import process_group_test as ft

    from torch_zpp.torchft import ProcessGroupZpp

    class ZppMultiPgTest(ft.MultiPgBaseTest):
        BACKEND = "zpp"
        WORLD_SIZE = 3

        @classmethod
        def _create_pg(cls, backend):
            return ProcessGroupZpp(timeout=datetime.timedelta(seconds=10))

        def assertRaisesRegex(self, expected, regex, *args, **kwargs):
            # The resiliency test lists each backend's words for a peer that
            # left ("Connection closed by peer" is gloo's): zpp's join them.
            if isinstance(regex, str) and regex.startswith(PEER_GONE_GLOO):
                regex = "(" + PEER_GONE_ZPP + "|" + regex[1:]
            return super().assertRaisesRegex(expected, regex, *args, **kwargs)

    for name in ft._ALL_COLLECTIVES:
        def plain(self, c=name):
            self._run_parallel(c, device="cpu")

        def resilient(self, c=name):
            self._run_with_resiliency(c, device="cpu")

        tag = name.replace("/", "_")
        setattr(ZppMultiPgTest, "test_collective_" + tag, plain)
        setattr(ZppMultiPgTest, "test_collective_with_resiliency_" + tag, resilient)
    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = ["*%s*" % pattern]
    result = unittest.TextTestRunner(verbosity=2).run(loader.loadTestsFromTestCase(ZppMultiPgTest))
    return 0 if result.wasSuccessful() else 1


def recovery(pattern):
    """torchft's ManagerIntegTest recovery tests, its process groups zpp's."""
    import unittest

    from torchft import manager_integ_test as ft

    from torch_zpp.torchft import ProcessGroupZpp

    # Its train loop makes ProcessGroupGloo() (60 s timeout): the same, on zpp.
    ft.ProcessGroupGloo = lambda: ProcessGroupZpp(timeout=datetime.timedelta(seconds=60))
    names = ["test_ddp_healthy", "test_ddp_recovery_0_async_quorum", "test_ddp_recovery_1_sync_quorum",
             "test_ddp_recovery_multi_rank"]
    if pattern:
        names = [n for n in names if pattern in n]
    tests = unittest.TestSuite(ft.ManagerIntegTest(n) for n in names)
    t0 = time.time()
    result = unittest.TextTestRunner(verbosity=2).run(tests)
    print("torchft recovery tests on zpp: %d run in %.1f s" % (result.testsRun, time.time() - t0))
    return 0 if result.wasSuccessful() else 1


# ---- torchft's Manager: a replica group killed, the other goes on, the group restarts ---------

GROUPS = 2        # replica groups (each its own node: ZPP_HOSTID)
GROUP_RANKS = 2   # ranks per group: rank r of each group is one zpp communicator
KILL_STEP = 5     # group 1 kills its processes in this step, once both groups are in it
ALONE_STEPS = 3   # steps group 0 commits alone before group 1 restarts
STEPS = 20        # training ends in the first step at or past this one that both groups are in
FT_TIMEOUT = 30   # every wait of the Manager and its process group
STEP_S = 0.02     # the model's compute is microseconds: a step's pace, as a real one would have


def member(group, rank, incarnation, env):
    """One rank of one replica group: torchft's Manager and optimizer wrapper
    over ProcessGroupZpp, healing over the same group (PGTransport); it logs
    each step (JSON lines), and saves its state at the end."""
    import json

    import torch
    from torch import nn, optim
    from torchft import Manager
    from torchft.checkpointing.pg_transport import PGTransport
    from torchft.optim import OptimizerWrapper

    from torch_zpp.torchft import ProcessGroupZpp

    out = env["ZPP_FT_OUT"]
    log = open(os.path.join(out, "log_%d_%d_%d.jsonl" % (group, rank, incarnation)), "a")

    def note(**kw):
        kw["t"] = time.time()
        log.write(json.dumps(kw) + "\n")
        log.flush()

    note(event="imported")

    timeout = datetime.timedelta(seconds=FT_TIMEOUT)
    if env.get("ZPP_FT_BACKEND") == "gloo":  # torchft's own, to compare with
        from torchft.process_group import ProcessGroupGloo
        pg = ProcessGroupGloo(timeout=timeout)
    else:
        pg = ProcessGroupZpp(timeout=timeout)
    torch.manual_seed(42 + group)  # replicas start apart: the first quorum syncs them
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    inner = optim.Adam(model.parameters(), lr=0.01)

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["optim"])

    manager = Manager(pg=pg, min_replica_size=1, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=str(group), store_addr="127.0.0.1",
                      store_port=int(env["ZPP_FT_STORE_PORT"]), rank=rank, world_size=GROUP_RANKS,
                      lighthouse_addr=env["ZPP_FT_LIGHTHOUSE"], port=0, timeout=timeout,
                      quorum_timeout=timeout, connect_timeout=timeout,
                      checkpoint_transport=PGTransport(pg, timeout=timeout,
                                                       device=torch.device("cpu")))
    opt = OptimizerWrapper(manager, inner)
    note(event="start")
    while True:
        step = manager.current_step()
        data = torch.Generator().manual_seed(1000 * step + 10 * group + rank)
        x = torch.randn(8, 16, generator=data)
        y = torch.randint(0, 4, (8,), generator=data)
        opt.zero_grad()  # starts the step's quorum
        participants = manager.num_participants()
        if group == 1 and incarnation == 0 and step >= KILL_STEP and participants == GROUPS:
            # The group's node is lost: its processes (one process group,
            # see the driver) die together; group 0 is in this step's
            # all-reduce. The first rank here kills both.
            note(event="kill", step=step)
            os.killpg(os.getpgrp(), signal.SIGKILL)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        # The Manager's fault-tolerant all-reduce (the average over the
        # quorum's replicas): a failed one is reported to the Manager, not
        # raised. Not torchft's DistributedDataParallel: in 0.2.0 its comm
        # hook asserts when the all-reduce fails (gloo's too), and training
        # stops.
        for w in [manager.allreduce(p.grad) for p in model.parameters()]:
            w.wait()
        opt.step()  # commits if every replica's all-reduce went through
        time.sleep(STEP_S)
        now = manager.current_step()
        note(event="step", step=step, now=now, committed=now > step, participants=participants,
             loss=loss.item())
        if now >= STEPS and participants == GROUPS and now > step:
            break
    torch.save(state_dict(), os.path.join(out, "final_%d_%d.pt" % (group, rank)))
    note(event="end", step=manager.current_step())
    log.close()
    os._exit(0)  # not waiting for torchft's servers to wind down


def manager_case():
    """The driver: an in-process lighthouse, as torchft's tests start it, and
    the replica groups' processes; group 1 dies at KILL_STEP, restarts after
    group 0 committed ALONE_STEPS alone, heals, and both finish equal."""
    import json
    import shutil
    import subprocess
    import tempfile

    import torch
    from torch.distributed import TCPStore
    from torchft._torchft import LighthouseServer

    # A replica that stops heartbeating leaves the quorum after 1 s; a
    # quorum waits at most 1 s for a healthy replica that has not joined.
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=1, join_timeout_ms=1000,
                                  heartbeat_timeout_ms=1000)
    out = tempfile.mkdtemp(prefix="zpp_torchft_")
    stores = []

    def start(group, incarnation):
        # A fresh store per incarnation: a Manager reads its group's manager
        # address from it, and a dead incarnation's would still be there.
        store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        stores.append(store)
        procs = []
        for rank in range(GROUP_RANKS):
            env = dict(os.environ, ZPP_FT_OUT=out, ZPP_FT_STORE_PORT=str(store.port),
                       ZPP_FT_LIGHTHOUSE=lighthouse.address(), ZPP_HOSTID="group%d" % group)
            # A group's processes share a process group, as they share a node.
            pgid = procs[0].pid if procs else 0
            procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "manager", "--member",
                 "%d,%d,%d" % (group, rank, incarnation)], env=env,
                process_group=pgid))
        return procs

    def events(group, rank, incarnation):
        path = os.path.join(out, "log_%d_%d_%d.jsonl" % (group, rank, incarnation))
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]

    def fail(msg):
        print("manager: FAIL: %s (logs in %s)" % (msg, out), flush=True)
        for p in everyone:
            if p.poll() is None:
                os.killpg(os.getpgid(p.pid), signal.SIGKILL)
        return 1

    t0 = time.time()
    survivors = start(0, 0)
    victims = start(1, 0)
    everyone = survivors + victims
    deadline = t0 + 240
    # 1. group 1 dies
    while any(p.poll() is None for p in victims):
        if time.time() > deadline or any(p.poll() not in (None, 0) for p in survivors):
            return fail("group 1 did not die at step %d, or group 0 failed" % KILL_STEP)
        time.sleep(0.05)
    if any(p.returncode != -signal.SIGKILL for p in victims):
        return fail("group 1 exited %s, not by its SIGKILL" % [p.returncode for p in victims])
    kills = [e for r in range(GROUP_RANKS) for e in events(1, r, 0) if e["event"] == "kill"]
    if not kills:
        return fail("group 1 died without killing itself")
    killed, kill_step = min(e["t"] for e in kills), kills[0]["step"]
    # 2. group 0 goes on alone
    while True:
        alone = [e for e in events(0, 0, 0) if e["event"] == "step" and e["committed"]
                 and e["participants"] == 1]
        if len(alone) >= ALONE_STEPS:
            break
        if time.time() > deadline or any(p.poll() is not None for p in survivors):
            return fail("group 0 did not go on alone")
        time.sleep(0.05)
    # 3. group 1 restarts, heals and rejoins; all finish
    restarted_at = time.time()
    newcomers = start(1, 1)
    everyone += newcomers
    while any(p.poll() is None for p in survivors + newcomers):
        if time.time() > deadline:
            return fail("training did not end within %d s" % (deadline - t0))
        time.sleep(0.1)
    if any(p.returncode != 0 for p in survivors + newcomers):
        return fail("exit codes %s" % [p.returncode for p in survivors + newcomers])
    # 4. the replicas agree, bit for bit
    for rank in range(GROUP_RANKS):
        a = torch.load(os.path.join(out, "final_0_%d.pt" % rank))
        b = torch.load(os.path.join(out, "final_1_%d.pt" % rank))
        for name in a["model"]:
            if not torch.equal(a["model"][name], b["model"][name]):
                return fail("rank %d: the groups' %s differ" % (rank, name))
        for i, sa in a["optim"]["state"].items():
            for k, va in sa.items():
                if not torch.equal(torch.as_tensor(va), torch.as_tensor(b["optim"]["state"][i][k])):
                    return fail("rank %d: the groups' optimizer %s of parameter %s differ" % (rank, k, i))
    # What the failure cost (group 0's rank 0 is the witness).
    steps = [e for e in events(0, 0, 0) if e["event"] == "step"]
    redone = [e["step"] for e in steps if not e["committed"]]
    after = [e for e in steps if e["committed"] and e["t"] > killed]
    back = [e for e in events(1, 0, 1) if e["event"] == "step" and e["committed"]]
    began = [e["t"] for e in events(1, 0, 1) if e["event"] == "start"]
    end = [e for e in events(0, 0, 0) if e["event"] == "end"][0]
    if not after or not back:
        return fail("no commit after the kill, or none by the restarted group")
    summary = {
        "kill_step": kill_step, "steps_redone": len(redone), "redone": redone,
        "recovery_s": round(after[0]["t"] - killed, 3),
        "alone_steps": sum(1 for e in steps if e["committed"] and e["participants"] == 1),
        "restart_to_commit_s": round(back[0]["t"] - restarted_at, 3),
        "manager_to_commit_s": round(back[0]["t"] - began[0], 3),
        "rejoined_at_step": back[0]["now"] - 1, "final_step": end["step"],
        "total_s": round(time.time() - t0, 1)}
    print("manager: group 1 killed in step %(kill_step)d; group 0 redid %(steps_redone)d step(s) "
          "%(redone)s and committed again %(recovery_s).2f s after the kill; %(alone_steps)d steps "
          "alone; the restarted group committed %(restart_to_commit_s).2f s after its processes "
          "started (%(manager_to_commit_s).2f s after its Manager), healed to step "
          "%(rejoined_at_step)d; both ended at step %(final_step)d with equal weights and "
          "optimizer state (%(total_s).1f s)" % summary, flush=True)
    print("manager: " + json.dumps(summary), flush=True)
    lighthouse.shutdown()
    shutil.rmtree(out, ignore_errors=True)
    return 0


# ---- a replica lost and replaced, in processes -----------------------------------------------

TIMEOUT = 20  # the group's timeout: the death must show well before it
N = 3         # replicas; process N is the replacement


def replace_body(proc):
    import torch
    from torch.distributed import TCPStore
    from torch.distributed.distributed_c10d import AllreduceOptions

    from torch_zpp.torchft import ProcessGroupZpp

    def fail(msg):
        print("process %d: FAIL: %s" % (proc, msg), flush=True)
        os._exit(1)

    port = int(os.environ["MASTER_PORT"])
    # The store torchft's lighthouse would hand out: here process 0's TCPStore.
    store = TCPStore("127.0.0.1", port, is_master=proc == 0, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=60))

    def addr(quorum):
        return "127.0.0.1:%d/torchft/%d" % (port, quorum)

    def allreduce(pg, t):
        fut = pg.allreduce([t], AllreduceOptions()).get_future()  # as torchft's Manager waits
        return fut.wait()[0]

    pg = ProcessGroupZpp(timeout=datetime.timedelta(seconds=TIMEOUT))
    if proc < N:
        pg.configure(addr(1), "replica%d" % proc, proc, N, quorum_id=1)
        got = allreduce(pg, torch.full((1000,), float(proc + 1)))
        if not torch.equal(got, torch.full((1000,), 6.0)) or pg.errored() is not None:
            fail("quorum 1: allreduce %s, errored %r" % (got[:3], pg.errored()))
        state = torch.arange(1000, dtype=torch.float32) * 0.5  # what a new replica must receive
        if proc == N - 1:
            time.sleep(0.3)  # the others hold its last message
            os._exit(3)
        t0 = time.time()
        try:
            allreduce(pg, torch.ones(1000))
            fail("allreduce with a dead replica returned")
        except Exception as e:  # noqa: BLE001
            print("process %d: allreduce raised after %.2f s: %s" % (proc, time.time() - t0,
                                                                     str(e).splitlines()[0][:120]),
                  flush=True)
        err = pg.errored()
        if err is None or "broke" not in str(err):
            fail("errored() after the death: %r" % err)
        pg.abort()
        if "aborted" not in str(pg.errored()):
            fail("errored() after abort(): %r" % pg.errored())
        t0 = time.time()
        pg.configure(addr(2), "replica%d" % proc, proc, N - 1, quorum_id=2)
        got = allreduce(pg, torch.full((1000,), float(proc + 1)))
        print("process %d: quorum 2 of %d configured and reduced in %.2f s" % (proc, N - 1,
                                                                           time.time() - t0),
              flush=True)
        if not torch.equal(got, torch.full((1000,), 3.0)) or pg.errored() is not None:
            fail("quorum 2: allreduce %s, errored %r" % (got[:3], pg.errored()))
        if proc == 0:
            store.set("quorum2_done", "1")
        pg.configure(addr(3), "replica%d" % proc, proc, N, quorum_id=3)
        if proc == 0:  # heals the newcomer, as torchft's checkpoint transport does over the group
            pg.send([state], N - 1, 0).wait()
    else:
        store.wait(["quorum2_done"])  # started while the others ran without it
        pg.configure(addr(3), "replica-new", N - 1, N, quorum_id=3)
        state = torch.zeros(1000)
        pg.recv([state], 0, 0).wait()
        if not torch.equal(state, torch.arange(1000, dtype=torch.float32) * 0.5):
            fail("the healed state differs")
    rank = proc if proc < N else N - 1
    got = allreduce(pg, state * (rank + 1))
    if not torch.equal(got, torch.arange(1000, dtype=torch.float32) * 0.5 * 6):
        fail("quorum 3: the replicas disagree")
    print("process %d: quorum 3 of %d agrees" % (proc, N), flush=True)
    pg.shutdown()
    os._exit(0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["suite", "recovery", "manager", "replace"])
    p.add_argument("--member", help="manager: GROUP,RANK,INCARNATION (started by the driver)")
    p.add_argument("-k", dest="pattern", help="suite: only the tests whose names contain this")
    p.add_argument("--rank", type=int)
    a = p.parse_args()
    if a.rank is not None:
        replace_body(a.rank)
    if a.member is not None:
        member(*(int(x) for x in a.member.split(",")), os.environ)
    why = ensure_torchft()
    if why:
        print("SKIPPED: " + why)
        sys.exit(77)
    if a.case == "suite":
        sys.exit(suite(a.pattern))
    if a.case == "recovery":
        sys.exit(recovery(a.pattern))
    if a.case == "manager":
        sys.exit(manager_case())
    import launch

    sys.exit(launch.spawn(os.path.abspath(__file__), "%dx1" % (N + 1), ["replace"], timeout=TIMEOUT * 3,
                          expect=lambda r: 3 if r == N - 1 else 0))
