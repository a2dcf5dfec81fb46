"""dist.shrink_group on zpp (torch 2.15 and later; skipped, saying so, before):
the survivors of a lost rank go on without restarting.

    test_shrink.py [2x2]

Every rank registers two abort hooks and unregisters one. Rank 3 dies after
a first all_reduce. The others' next all_reduce raises, and the kept hook
runs (once: by the time a second failed call raises, not again);
they call dist.shrink_group([3], SHRINK_ABORT) on the default group and
get a 3-rank default group (ranks 0-2 in their order, nodes of 2 and 1),
on which all_reduce, all_gather_into_tensor and reduce_scatter_tensor are
exact; with qgZ configured (ZPP_QGZ_BITS=4) the reduce-scatter runs plain
there, counted in codec_stats()["qgz_plain_fallbacks"]. Then rank 2 leaves
quietly (alive; it destroys its group) and ranks 0 and 1 shrink again with
SHRINK_DEFAULT, down to 2 ranks, where the calls still work.
"""
import argparse
import os
import sys
import time

import launch

TIMEOUT = 20  # ZPP_TIMEOUT: the death must show well before it


def body(rank):
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d  # SHRINK_ABORT is not re-exported

    import torch_zpp

    def fail(msg):
        print("rank %d: FAIL: %s" % (rank, msg), flush=True)
        os._exit(1)

    dist.init_process_group("zpp")
    W = dist.get_world_size()
    # Abort hooks: the kept one runs once, when the group breaks, before the call that met it raises.
    pg = distributed_c10d._get_default_group()
    if pg.supports_abort_hooks is not True:  # a property, though the stubs say a method
        fail("supports_abort_hooks is %r" % pg.supports_abort_hooks)
    ran = []
    pg.register_abort_hook(1, lambda: ran.append(("kept", time.time())))
    pg.register_abort_hook(2, lambda: ran.append(("unregistered", time.time())))
    pg.unregister_abort_hook(2)
    x = torch.ones(1000)
    dist.all_reduce(x)
    if ran:
        fail("abort hooks ran on a healthy group: %s" % ran)
    if rank == W - 1:
        time.sleep(0.3)  # the others hold its last message
        os._exit(3)
    raised = []
    for attempt in range(2):
        t0 = time.time()
        try:
            dist.all_reduce(x)
            fail("all_reduce with a dead peer returned")
        except Exception as e:  # noqa: BLE001
            raised.append(time.time())
            print("rank %d: all_reduce raised after %.2f s: %s" % (rank, raised[-1] - t0, type(e).__name__),
                  flush=True)
    # The hooks run right after the first failed call completes and before the second is served.
    if [name for name, _ in ran] != ["kept"] or ran[0][1] > raised[1]:
        fail("the abort hooks ran %s, the calls raised at %s (want the kept hook once, before the "
             "second call raised)" % (ran, raised))
    print("rank %d: abort hook ran %.3f s after the first call raised" % (rank, ran[0][1] - raised[0]),
          flush=True)
    t0 = time.time()
    dist.shrink_group([W - 1], shrink_flags=distributed_c10d.SHRINK_ABORT)
    print("rank %d: shrink_group took %.2f s" % (rank, time.time() - t0), flush=True)

    def exercise(n, tag):
        if dist.get_world_size() != n or dist.get_rank() != rank:
            fail("%s: rank %d of %d, want %d of %d" % (tag, dist.get_rank(), dist.get_world_size(), rank, n))
        a = torch.full((1000,), float(rank + 1))
        dist.all_reduce(a)
        if not torch.equal(a, torch.full((1000,), float(n * (n + 1) // 2))):
            fail("%s: all_reduce wrong" % tag)
        g = torch.empty(1000 * n)
        dist.all_gather_into_tensor(g, torch.full((1000,), float(rank)))
        if not torch.equal(g, torch.arange(n, dtype=torch.float32).repeat_interleave(1000)):
            fail("%s: all_gather_into_tensor wrong" % tag)
        inp = torch.full((1000 * n,), float(rank + 1))
        out = torch.empty(1000)
        dist.reduce_scatter_tensor(out, inp)
        want = float(n * (n + 1) // 2)
        # int4 qgZ on even nodes (blocks of one value: within 1e-3), plain on uneven ones
        uniform = torch_zpp.topology()["uniform"]
        err = (out - want).abs().max().item()
        if err > (want * 1e-3 if uniform else 0.0):
            fail("%s: reduce_scatter_tensor off by %g (uniform nodes: %d)" % (tag, err, uniform))
        return uniform

    uniform = exercise(W - 1, "after the first shrink")
    fallbacks = torch_zpp.codec_stats()["qgz_plain_fallbacks"]
    if uniform or fallbacks != 1:
        fail("3 ranks on nodes of 2 and 1: uniform %d, qgz_plain_fallbacks %d (want 0, 1)"
             % (uniform, fallbacks))
    if rank == W - 2:
        dist.destroy_process_group()  # leaves quietly
        os._exit(0)
    dist.shrink_group([W - 2])  # SHRINK_DEFAULT
    exercise(W - 2, "after the second shrink")
    t0 = time.time()
    dist.destroy_process_group()
    print("rank %d: done; destroy_process_group took %.2f s" % (rank, time.time() - t0), flush=True)
    os._exit(0)


def skip_reason():
    import torch.distributed as dist

    if not hasattr(dist, "shrink_group"):
        import torch

        return "torch %s has no dist.shrink_group (2.15 added it)" % torch.__version__
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
    n = eval(a.layout.replace("x", "*"))
    sys.exit(launch.spawn(os.path.abspath(__file__), a.layout, [a.layout], timeout=TIMEOUT * 3,
                          env={"ZPP_TIMEOUT": str(TIMEOUT), "ZPP_QGZ_BITS": "4",
                               "ZPP_COMPRESS_MIN_BYTES": "0"},
                          expect=lambda r: 3 if r == n - 1 else 0))
