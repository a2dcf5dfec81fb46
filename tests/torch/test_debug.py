"""TORCH_DISTRIBUTED_DEBUG=DETAIL on the zpp backend.

In that mode torch wraps every backend in a checking one that asks it for
sequence numbers (setSequenceNumberForGroup, getSequenceNumberForGroup) and,
before each collective, compares every rank's (sequence number, op, shapes)
through a gloo helper. Here: init_process_group("zpp") works, collectives and
point-to-point give the right results through the wrapper, the sequence
number counts the collectives alike on every rank (and not the sends and
receives), torch_zpp's own calls find the backend inside the wrapper, and a
mismatched collective is caught by the wrapper, naming both ranks' calls.

    test_debug.py LAYOUT     (2x2 by default)
"""
import os
import sys

import launch


def body(rank):
    import torch
    import torch.distributed as dist

    import torch_zpp

    assert os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL"
    dist.init_process_group("zpp")
    W = dist.get_world_size()
    cpu = torch.device("cpu")
    be = dist.group.WORLD._get_backend(cpu)
    if type(be).__name__ != "_ProcessGroupWrapper":
        print("rank %d: FAIL the backend is %s, not torch's debug wrapper" % (rank, type(be).__name__))
        sys.exit(1)

    def fail(msg):
        print("rank %d: FAIL %s" % (rank, msg), flush=True)
        sys.exit(1)

    seq0 = be._get_sequence_number_for_group()
    x = torch.arange(10.0) + rank
    dist.all_reduce(x)
    if not torch.equal(x, torch.arange(10.0) * W + sum(range(W))):
        fail("all_reduce through the wrapper: %s" % x)
    out = torch.empty(W * 3)
    dist.all_gather_into_tensor(out, torch.full((3,), float(rank)))
    if not torch.equal(out, torch.arange(W).float().repeat_interleave(3)):
        fail("all_gather_into_tensor through the wrapper: %s" % out)
    t = torch.empty(4)
    if rank == 0:
        dist.send(torch.ones(4), dst=1)
    elif rank == 1:
        dist.recv(t, src=0)
        if not torch.equal(t, torch.ones(4)):
            fail("recv through the wrapper: %s" % t)
    dist.barrier()
    seq = be._get_sequence_number_for_group()
    # all_reduce, all_gather_into_tensor, barrier: three collectives; the
    # point-to-point calls do not count.
    if seq - seq0 != 3:
        fail("sequence number went from %d to %d over 3 collectives" % (seq0, seq))
    seqs = [None] * W
    dist.all_gather_object(seqs, seq)
    if len(set(seqs)) != 1:
        fail("sequence numbers differ between ranks: %s" % seqs)
    torch_zpp.reset_stats()
    dist.all_reduce(torch.ones(100))
    if torch_zpp.stats()["allreduce"]["calls"] < 1:
        fail("torch_zpp.stats() did not see the all_reduce: %s" % torch_zpp.stats())

    # A mismatch: the wrapper's check catches it before zpp is called.
    try:
        dist.all_reduce(torch.ones(5 if rank == 0 else 6))
        fail("a mismatched all_reduce passed the debug wrapper")
    except RuntimeError as e:
        if "Detected mismatch between collectives" not in str(e):
            fail("mismatch error without the wrapper's words: %s" % e)
    dist.all_reduce(x)  # the group still works: nothing reached zpp
    dist.destroy_process_group()
    print("rank %d: passed, sequence number %d" % (rank, seq), flush=True)


if __name__ == "__main__":
    if "--rank" not in sys.argv:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    sys.exit(launch.main(__file__, body, "2x2", timeout=240))
