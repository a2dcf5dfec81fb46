"""torch_zpp.torchft.ProcessGroupZpp: torchft's own process-group tests, and a
replica lost and replaced.

    test_torchft.py collectives
                              torchft's MultiPgBaseTest, its collective tests only
    test_torchft.py suite     torchft's MultiPgBaseTest (torchft/process_group_test.py,
                              shipped in its wheel) with zpp as the backend: three
                              ranks as threads of one process, each collective
                              torchft tests (allreduce and allreduce_coalesced,
                              allgather and its coalesced form, alltoall_base,
                              barrier, broadcast, reduce_scatter and its tensor
                              form, send/recv) on a configured group, then again
                              after a reconfigure with the last rank gone
                              (the others' call must fail, errored() then names
                              an abort), as torchft runs gloo's. The resiliency
                              half takes 4.6 min: the rank that leaves is a thread
                              whose abort its peers (threads of the same process)
                              only see at their 30 s timeout; the longer suite
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

def suite(pattern, resiliency):
    import unittest

    from torchft import process_group_test as ft

    from torch_zpp.torchft import ProcessGroupZpp

    class ZppMultiPgTest(ft.MultiPgBaseTest):
        BACKEND = "zpp"
        WORLD_SIZE = 3

        @classmethod
        def _create_pg(cls, backend):
            return ProcessGroupZpp(timeout=datetime.timedelta(seconds=10))

    for name in ft._ALL_COLLECTIVES:
        def plain(self, c=name):
            self._run_parallel(c, device="cpu")

        def resilient(self, c=name):
            self._run_with_resiliency(c, device="cpu")

        tag = name.replace("/", "_")
        setattr(ZppMultiPgTest, "test_collective_" + tag, plain)
        if resiliency:
            setattr(ZppMultiPgTest, "test_collective_with_resiliency_" + tag, resilient)
    loader = unittest.TestLoader()
    if pattern:
        loader.testNamePatterns = ["*%s*" % pattern]
    result = unittest.TextTestRunner(verbosity=2).run(loader.loadTestsFromTestCase(ZppMultiPgTest))
    return 0 if result.wasSuccessful() else 1


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
    p.add_argument("case", choices=["collectives", "suite", "replace"])
    p.add_argument("-k", dest="pattern", help="suite: only the tests whose names contain this")
    p.add_argument("--rank", type=int)
    a = p.parse_args()
    if a.rank is not None:
        replace_body(a.rank)
    why = ensure_torchft()
    if why:
        print("SKIPPED: " + why)
        sys.exit(77)
    if a.case != "replace":
        sys.exit(suite(a.pattern, a.case == "suite"))
    import launch

    sys.exit(launch.spawn(os.path.abspath(__file__), "%dx1" % (N + 1), ["replace"], timeout=TIMEOUT * 3,
                          expect=lambda r: 3 if r == N - 1 else 0))
