"""Failures reach Python as exceptions on the surviving ranks, within
ZPP_TIMEOUT, never as a hang, and the backend's get_error() says what broke it.

    test_errors.py die        rank W-1 exits in the middle of training-like
                              traffic; the others' next collectives raise
    test_errors.py mismatch   rank 0 calls all_gather while the others call
                              all_reduce; every rank raises
    test_errors.py async      as `die`, with the error seen through an
                              async work's wait() and its future
    test_errors.py hang       rank W-1 stays alive but stops calling; the
                              others raise at ZPP_TIMEOUT (8 s here), not later, and
                              the message says the timeout was ZPP_TIMEOUT's
    test_errors.py abort      rank W-1 dies, rank W-2 hangs in a group of all but
                              W-1; another thread's abort() of that group ends a
                              wait() blocked on it, which raises (or, on a rank
                              whose timer fires later, the notice of another
                              rank's abort does); then
                              destroy_process_group() returns at once although
                              the world group has a dead and a hung peer
    test_errors.py timeout    as `hang`, in a barrier, with the timeout
                              given to init_process_group (3 s, over
                              ZPP_TIMEOUT's 20): the others raise after 3 s,
                              with gloo's " Timed out " and naming
                              init_process_group's timeout as the cause
"""
import argparse
import os
import sys
import time

import launch

TIMEOUT = 20  # ZPP_TIMEOUT for these runs: every failure must show well before
HANG_TIMEOUT = 8  # ZPP_TIMEOUT of the `hang` case, where the timeout is the failure
INIT_TIMEOUT = 3  # init_process_group(timeout=) of the `timeout` case


ABORT_AT = 1.0  # the `abort` case: seconds into the blocked wait


def abort_body(rank):
    import threading

    import torch
    import torch.distributed as dist

    import torch_zpp  # noqa: F401

    def fail(msg):
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)
        os._exit(1)

    dist.init_process_group("zpp")
    W = dist.get_world_size()
    x = torch.ones(1000)
    dist.all_reduce(x)
    group = dist.new_group(list(range(W - 1)))  # every rank calls new_group
    if rank == W - 1:
        os._exit(3)  # dead, a member of the world group only
    if rank == W - 2:
        # Alive and silent while the others abort and destroy (by ABORT_AT + 3 s):
        # only the abort can end their wait.
        time.sleep(ABORT_AT + 8)
        os._exit(3)
    backend = group._get_backend(torch.device("cpu"))
    work = dist.all_reduce(x, group=group, async_op=True)
    threading.Timer(ABORT_AT, backend.abort).start()
    t0 = time.time()
    try:
        work.wait()
        fail("wait() returned after the abort")
    except Exception as e:  # noqa: BLE001
        err = str(e)
        dt = time.time() - t0
        print("rank %d: wait() raised after %.2f s: %s: %s" % (rank, dt, type(e).__name__, e), flush=True)
        if not ABORT_AT - 0.1 <= dt <= ABORT_AT + 2.0:
            fail("the abort did not end the wait at %.1f s" % ABORT_AT)
    # Each survivor aborts on its own timer: one whose timer fires a little
    # later may see another's abort first, as a remote error naming it (seen
    # once in a CI run: rank 0 got "rank 1 (host node0) left: it aborted its
    # communicator" at 1.01 s). Either way an abort, and nothing else, ended it.
    ErrorType = torch._C._distributed_c10d.ErrorType
    got = backend.get_error()
    peer_abort = "left: it aborted its communicator" in err
    if got != ErrorType.COMM_ERROR and not (got == ErrorType.REMOTE_ERROR and peer_abort):
        fail("get_error() after the abort is %s (%s)" % (got, err))
    t0 = time.time()
    dist.destroy_process_group()  # the world group's peers: one dead, one hung
    dt = time.time() - t0
    print("rank %d: destroy_process_group() took %.2f s" % (rank, dt), flush=True)
    if dt > 3.0:
        fail("destroy_process_group() took %.1f s with dead peers" % dt)
    os._exit(0)


def body(rank, case):
    import torch
    import torch.distributed as dist

    import torch_zpp  # noqa: F401

    if case == "abort":
        abort_body(rank)
    if case == "timeout":
        import datetime
        dist.init_process_group("zpp", timeout=datetime.timedelta(seconds=INIT_TIMEOUT))
    else:
        dist.init_process_group("zpp")
    W = dist.get_world_size()
    x = torch.ones(100000)
    dist.all_reduce(x)
    assert x[0].item() == W
    # getError(): healthy now; after the failure, what broke it (checked below).
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    ErrorType = torch._C._distributed_c10d.ErrorType
    if backend.get_error() != ErrorType.SUCCESS:
        print("rank %d: FAIL: get_error() is %s on a healthy group" % (rank, backend.get_error()), flush=True)
        os._exit(1)
    timeout = HANG_TIMEOUT if case == "hang" else TIMEOUT
    t0 = time.time()
    try:
        if case == "hang":
            if rank == W - 1:
                time.sleep(timeout + 5)  # the others raise at `timeout`
                os._exit(3)
            dist.all_reduce(x)
        elif case == "timeout":
            if rank == W - 1:
                time.sleep(INIT_TIMEOUT + 5)
                os._exit(3)
            dist.barrier()
        elif case in ("die", "async"):
            if rank == W - 1:
                # Not at once: the first all_reduce returning here does not
                # mean the others have this rank's last message yet, and an
                # exit drops what is still in flight (seen: ranks 0 and 1
                # failed that all_reduce, 1 run in 20).
                time.sleep(0.3)
                os._exit(3)
            time.sleep(0.5)
            for _ in range(5):
                if case == "async":
                    w = dist.all_reduce(x, async_op=True)
                    fut = w.get_future()
                    try:
                        fut.wait()
                    except Exception as e:  # noqa: BLE001
                        print("rank %d: future raised: %s" % (rank, e), flush=True)
                    w.wait()
                else:
                    dist.all_reduce(x)
                    dist.all_gather_into_tensor(torch.empty(W * 1000), torch.ones(1000))
        else:
            if rank == 0:
                dist.all_gather_into_tensor(torch.empty(W * 1000), torch.ones(1000))
            else:
                dist.all_reduce(torch.ones(1000))
            dist.all_reduce(x)
    except Exception as e:  # noqa: BLE001
        dt = time.time() - t0
        msg = str(e)
        print("rank %d: %s after %.1f s: %s" % (rank, type(e).__name__, dt, msg), flush=True)
        if "zpp" not in msg or not isinstance(e, dist.DistBackendError):
            print("rank %d: FAIL: not a zpp DistBackendError" % rank, flush=True)
            os._exit(1)
        if dt > timeout + 5 or (case == "hang" and dt < timeout - 1):
            print("rank %d: FAIL: took longer than ZPP_TIMEOUT" % rank, flush=True)
            os._exit(1)
        # Where the timeout came from, and gloo's words for it (PyTorch's own
        # barrier timeout test matches " (Timed out|closed|timeout) ").
        words = {"hang": [" Timed out ", "after %d s" % timeout, "set by ZPP_TIMEOUT=%d" % timeout],
                 "timeout": [" Timed out ", "zpp barrier", "after %d s" % INIT_TIMEOUT,
                             "set by init_process_group/new_group(timeout=0:00:0%d)" % INIT_TIMEOUT]}
        missing = [w for w in words.get(case, []) if w not in msg]
        if missing:
            print("rank %d: FAIL: the message lacks %s" % (rank, missing), flush=True)
            os._exit(1)
        if case == "timeout" and not INIT_TIMEOUT - 0.1 <= dt <= INIT_TIMEOUT + 3:
            print("rank %d: FAIL: timed out after %.1f s, not at init_process_group's %d s"
                  % (rank, dt, INIT_TIMEOUT), flush=True)
            os._exit(1)
        # TIMEOUT for a wait that timed out; a lost or failing peer otherwise.
        want = [ErrorType.TIMEOUT] if case in ("hang", "timeout") else [ErrorType.REMOTE_ERROR,
                                                                        ErrorType.COMM_ERROR]
        got = backend.get_error()
        if got not in want:
            print("rank %d: FAIL: get_error() is %s, not one of %s" % (rank, got, want), flush=True)
            os._exit(1)
        print("rank %d: get_error() %s" % (rank, got), flush=True)
        # A later call on the broken group raises too, at once.
        try:
            dist.all_reduce(torch.ones(1))
            print("rank %d: FAIL: the broken group accepted another call" % rank, flush=True)
            os._exit(1)
        except Exception as e2:  # noqa: BLE001
            print("rank %d: then: %s" % (rank, e2), flush=True)
        os._exit(0)
    print("rank %d: FAIL: no exception" % rank, flush=True)
    os._exit(1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["die", "mismatch", "async", "hang", "timeout", "abort"])
    p.add_argument("layout", nargs="?", default="2x2")
    p.add_argument("--rank", type=int)
    a = p.parse_args()
    if a.rank is not None:
        body(a.rank, a.case)
    else:
        n = eval(a.layout.replace("x", "*"))
        if a.case == "mismatch":
            expect = None
        elif a.case == "abort":
            expect = lambda r: 3 if r >= n - 2 else 0  # noqa: E731
        else:
            expect = lambda r: 3 if r == n - 1 else 0  # noqa: E731
        sys.exit(launch.spawn(os.path.abspath(__file__), a.layout, [a.case, a.layout],
                              timeout=TIMEOUT * 3,
                              env={"ZPP_TIMEOUT": str(HANG_TIMEOUT if a.case == "hang" else TIMEOUT)},
                              expect=expect))
