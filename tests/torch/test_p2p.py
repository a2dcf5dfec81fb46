"""Point-to-point on the zpp backend: send / recv with tags, receives from any
source, isend / irecv, batch_isend_irecv (a ring, both directions of every
pair, many messages in flight), each against gloo on the same data.

    test_p2p.py LAYOUT      (2x1, 2x2, ...: at least 2 ranks)

Sizes go from 0 elements to 1 M (4 MB: past UCX's eager limit, so a send
waits for its receive and a wrong grouping would deadlock). Every exchange is
repeated, so that a race between the ranks' queues shows.
"""
import sys

import launch

SIZES = [0, 1, 1000, 1 << 20]
REPEAT = 5


def body(rank):
    import torch
    import torch.distributed as dist

    import torch_zpp  # noqa: F401

    dist.init_process_group("gloo")
    W = dist.get_world_size()
    assert W >= 2, "test_p2p needs at least 2 ranks"
    zg = dist.new_group(backend="zpp")
    gg = dist.group.WORLD
    checks = [0]

    def check(what, got, want):
        checks[0] += 1
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            print("rank %d: FAIL %s: got %s, want %s" % (rank, what, got.flatten()[:4].tolist(),
                                                         want.flatten()[:4].tolist()), flush=True)
            sys.exit(1)

    def data(src, dst, n, k=0, dtype=torch.float32):
        """What src sends dst: distinct per pair, size and round."""
        return (torch.arange(n, dtype=torch.float64) * 3 + 1000 * src + 10 * dst + k).to(dtype)

    # ---- send / recv: every ordered pair, in turn, with the sender's rank as tag
    for n in SIZES:
        for dtype in (torch.float32, torch.int64, torch.bfloat16):
            for src in range(W):
                for dst in range(W):
                    if src == dst or rank not in (src, dst):
                        continue
                    if rank == src:
                        for g in (zg, gg):
                            dist.send(data(src, dst, n, dtype=dtype), dst=dst, group=g, tag=src)
                    else:
                        got = [torch.empty(n, dtype=dtype) for _ in range(2)]
                        for g, t in zip((zg, gg), got):
                            dist.recv(t, src=src, group=g, tag=src)
                        check("send/recv %d->%d n=%d %s" % (src, dst, n, dtype), got[0], got[1])
                        check("send/recv %d->%d n=%d %s (value)" % (src, dst, n, dtype), got[0],
                              data(src, dst, n, dtype=dtype))

    # ---- tags keep messages apart: two sends to the same peer, their receives
    # posted the other way round in one group --------------------------------------
    peer = rank ^ 1
    if peer < W:
        for n in SIZES:
            for _ in range(REPEAT):
                a, b = torch.empty(n), torch.empty(n)
                ops = [dist.P2POp(dist.isend, data(rank, peer, n, 1), peer, zg, tag=1),
                       dist.P2POp(dist.isend, data(rank, peer, n, 2), peer, zg, tag=2),
                       dist.P2POp(dist.irecv, b, peer, zg, tag=2),
                       dist.P2POp(dist.irecv, a, peer, zg, tag=1)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                check("tag 1 n=%d" % n, a, data(peer, rank, n, 1))
                check("tag 2 n=%d" % n, b, data(peer, rank, n, 2))

    # ---- recv from any source: rank 0 takes every other rank's message, in the
    # order they come; each says who sent it (a tag per round: a fast sender's
    # next round must not be taken for a slow one's) --------------------------------
    for n in (1, 1000):
        for k in range(REPEAT):
            if rank == 0:
                seen = set()
                for _ in range(W - 1):
                    t = torch.empty(n)
                    src = dist.recv(t, group=zg, tag=20 + k)
                    check("any-source from %d n=%d" % (src, n), t, data(src, 0, n, k))
                    seen.add(src)
                assert seen == set(range(1, W)), seen
                t = torch.empty(n)
                w = zg.recv_anysource([t], 40 + k)
                w.wait()
                check("recv_anysource work's source", t, data(w._source_rank(), 0, n, k + 100))
                checks[0] += 1
            else:
                dist.send(data(rank, 0, n, k), dst=0, group=zg, tag=20 + k)
                if rank == 1:
                    dist.send(data(rank, 0, n, k + 100), dst=0, group=zg, tag=40 + k)

    # ---- isend / irecv: works that complete, with futures -----------------------------
    for n in SIZES:
        if rank == 0:
            works = [dist.isend(data(0, p, n), dst=p, group=zg, tag=3) for p in range(1, W)]
            for w in works:
                w.wait()
                assert w.is_completed() and w.is_success()
        else:
            t = torch.empty(n)
            w = dist.irecv(t, src=0, group=zg, tag=3)
            w.get_future().wait()
            w.wait()
            check("isend/irecv n=%d" % n, t, data(0, rank, n))

    # ---- batch_isend_irecv: a ring shift and both directions of every pair --------------
    for n in SIZES:
        for k in range(REPEAT):
            nxt, prv = (rank + 1) % W, (rank - 1) % W
            rz, rg = torch.empty(n), torch.empty(n)
            for g, t in ((zg, rz), (gg, rg)):
                ops = [dist.P2POp(dist.irecv, t, prv, g), dist.P2POp(dist.isend, data(rank, nxt, n, k), nxt, g)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
            check("ring n=%d round %d" % (n, k), rz, rg)
            check("ring n=%d round %d (value)" % (n, k), rz, data(prv, rank, n, k))
            # every pair at once, sends first: only a group makes this safe
            ops, got = [], {}
            for p in range(W):
                if p != rank:
                    ops.append(dist.P2POp(dist.isend, data(rank, p, n, k), p, zg, tag=5))
            for p in range(W):
                if p != rank:
                    got[p] = torch.empty(n)
                    ops.append(dist.P2POp(dist.irecv, got[p], p, zg, tag=5))
            works = dist.batch_isend_irecv(ops)
            for w in works:
                w.wait()
            for p, t in got.items():
                check("all pairs from %d n=%d round %d" % (p, n, k), t, data(p, rank, n, k))

    # ---- point-to-point and collectives interleave in one order ----------------------
    x = torch.full((1000,), float(rank))
    if rank == 0:
        dist.send(x, dst=1, group=zg)
    elif rank == 1:
        t = torch.empty(1000)
        dist.recv(t, src=0, group=zg)
        check("send then collective", t, torch.zeros(1000))
    dist.all_reduce(x, group=zg)
    check("all_reduce after p2p", x, torch.full((1000,), float(sum(range(W)))))

    # ---- arguments zpp refuses, named ------------------------------------------------
    def raises(what, fn, words):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            if all(w in str(e) for w in words):
                checks[0] += 1
                return
            print("rank %d: FAIL %s raised without %s: %s" % (rank, what, words, e), flush=True)
            sys.exit(1)
        print("rank %d: FAIL %s did not raise" % (rank, what), flush=True)
        sys.exit(1)

    zb = zg._get_backend(torch.device("cpu"))
    raises("send to a rank outside the group", lambda: zb.send([torch.zeros(1)], W, 0),
           ["zpp", "send", "peer %d" % W])
    raises("negative tag", lambda: zb.recv([torch.zeros(1)], peer % W, -2), ["zpp", "recv", "tag"])
    sp = torch.sparse_coo_tensor([[0]], [1.0], (2,))
    raises("sparse send", lambda: zb.send([sp], (rank + 1) % W, 0), ["zpp", "send", "Sparse"])

    dist.barrier(group=zg)
    dist.destroy_process_group()
    print("rank %d: %d checks passed" % (rank, checks[0]), flush=True)


if __name__ == "__main__":
    sys.exit(launch.main(__file__, body, "2x1", timeout=280))
