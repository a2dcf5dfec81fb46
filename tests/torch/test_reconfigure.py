"""torch 2.15's reconfigure API on zpp (dist._reconfigure; skipped, saying so, before).

    test_reconfigure.py [2x2]

The group is made with enable_reconfigure=True: it has no communicator, and a collective says so.
Every rank puts its handle (dist._get_reconfigure_handle) into the store. Then:
- ranks 0 and 1 reconfigure to a group of the two of them (a list: ranks by position), while 2
  and 3 wait; all_reduce on 2 ranks;
- all four reconfigure with the handles in reverse order (new rank = 3 - rank): the group grows
  to 4; all_reduce, all_gather_into_tensor, reduce_scatter_tensor exact;
- rank 3 dies; the others' next all_reduce raises; they reconfigure with a set of their three
  handles (ranks in the handles' sorted order), and the calls are exact again;
- a uuid used before, and handles without this process's own, raise naming the problem.
"""
import argparse
import os
import sys
import time

import launch

TIMEOUT = 20  # ZPP_TIMEOUT: the death must show well before it


def body(rank):
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    import torch_zpp  # noqa: F401  (registers "zpp")

    def fail(msg):
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)
        os._exit(1)

    dist.init_process_group("zpp", enable_reconfigure=True)
    store = distributed_c10d._get_default_store()
    if not dist._supports_reconfigure():
        fail("supports_reconfigure is False")
    try:
        dist.all_reduce(torch.ones(4))
        fail("a collective before reconfigure returned")
    except Exception as e:  # noqa: BLE001
        if "reconfigure" not in str(e):
            fail("before reconfigure, the error does not say why: %s" % e)
    mine = dist._get_reconfigure_handle()
    if not mine.startswith("zpp:") or dist._get_reconfigure_handle() != mine:
        fail("handle %r (want a stable zpp: handle)" % mine)
    store.set("handle%d" % rank, mine)
    handles = [store.get("handle%d" % r).decode() for r in range(4)]
    if len(set(handles)) != 4:
        fail("handles not distinct: %s" % handles)

    def exercise(n, me, tag):
        if dist.get_world_size() != n or dist.get_rank() != me:
            fail("%s: rank %d of %d, want %d of %d" % (tag, dist.get_rank(), dist.get_world_size(), me, n))
        a = torch.full((1000,), float(me + 1))
        dist.all_reduce(a)
        if not torch.equal(a, torch.full((1000,), float(n * (n + 1) // 2))):
            fail("%s: all_reduce wrong" % tag)
        g = torch.empty(1000 * n)
        dist.all_gather_into_tensor(g, torch.full((1000,), float(me)))
        if not torch.equal(g, torch.arange(n, dtype=torch.float32).repeat_interleave(1000)):
            fail("%s: all_gather_into_tensor wrong" % tag)
        out = torch.empty(1000)
        dist.reduce_scatter_tensor(out, torch.full((1000 * n,), float(me + 1)))
        if not torch.equal(out, torch.full((1000,), float(n * (n + 1) // 2))):
            fail("%s: reduce_scatter_tensor wrong" % tag)

    timeout = timedelta(seconds=TIMEOUT)
    if rank < 2:
        t0 = time.time()
        dist._reconfigure(uuid=1, handles=handles[:2], timeout=timeout).wait()
        print("rank %d: reconfigure to 2 ranks took %.2f s" % (rank, time.time() - t0), flush=True)
        exercise(2, rank, "2 of 4")
    store.set("pair_done%d" % rank, "1") if rank < 2 else store.wait(["pair_done0", "pair_done1"])
    t0 = time.time()
    dist._reconfigure(uuid=2, handles=list(reversed(handles)), timeout=timeout).wait()
    print("rank %d: reconfigure to 4 ranks took %.2f s" % (rank, time.time() - t0), flush=True)
    exercise(4, 3 - rank, "4, reversed")
    if rank == 3:
        time.sleep(0.3)  # the others hold its last message
        os._exit(3)
    try:
        dist.all_reduce(torch.ones(1000))
        fail("all_reduce with a dead peer returned")
    except Exception:  # noqa: BLE001
        pass
    alive = set(handles[:3])
    t0 = time.time()
    dist._reconfigure(uuid=3, handles=alive, timeout=timeout).wait()
    print("rank %d: reconfigure of the survivors took %.2f s" % (rank, time.time() - t0), flush=True)
    exercise(3, sorted(alive).index(mine), "3 survivors, a set")
    for bad, says in (({"uuid": 3, "handles": sorted(alive)}, "used already"),
                      ({"uuid": 4, "handles": [h for h in handles if h != mine]}, "is not among")):
        try:
            dist._reconfigure(timeout=timeout, **bad)
            fail("reconfigure(%s) returned" % bad)
        except Exception as e:  # noqa: BLE001
            if says not in str(e):
                fail("reconfigure(%s) raised without %r: %s" % (bad, says, e))
    exercise(3, sorted(alive).index(mine), "after the refused calls")
    dist.destroy_process_group()
    print("rank %d: done" % rank, flush=True)
    os._exit(0)


def skip_reason():
    import torch.distributed as dist

    if not hasattr(dist, "_reconfigure"):
        import torch

        return "torch %s has no dist._reconfigure (2.15 added it)" % torch.__version__
    return None


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("layout", nargs="?", default="2x2")
    p.add_argument("--rank", type=int)
    a = p.parse_args()
    if a.rank is not None:
        body(a.rank)
    why = skip_reason()
    if why:
        print("SKIPPED: " + why)
        sys.exit(77)
    sys.exit(launch.spawn(os.path.abspath(__file__), a.layout, [a.layout], timeout=TIMEOUT * 3,
                          env={"ZPP_TIMEOUT": str(TIMEOUT)}, expect=lambda r: 3 if r == 3 else 0))
