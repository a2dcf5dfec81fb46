"""Every collective of the zpp backend against gloo, on one layout.

    test_collectives.py LAYOUT      (1x1, 1x3, 2x2, 4x1, ...)

Plain calls must be exact. Float data is integer-valued where a reduction
adds or multiplies, so that every summation order gives the same bits and
gloo's result is the reference; data movement (broadcast, gathers,
all-to-all, min/max) uses random floats, so any wrong byte shows.
"""
import os
import sys

import launch

FLOATS = ["float32", "bfloat16", "float16", "float64"]
INTS = ["int32", "int64", "int8", "uint8"]
SIZES = [0, 1, 7, 1000, 70001]


def body(rank):
    import torch
    import torch.distributed as dist

    import torch_zpp

    dist.init_process_group("gloo")
    W = dist.get_world_size()
    zg = dist.new_group(backend="zpp")
    gg = dist.group.WORLD
    checks = [0]
    gen = torch.Generator().manual_seed(1234 + rank)

    def check(what, got, want):
        checks[0] += 1
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            diff = (got.double() - want.double()).abs()
            print("rank %d: FAIL %s: max diff %g at %d" % (rank, what, diff.max().item(),
                                                          diff.argmax().item()), flush=True)
            sys.exit(1)

    def ints(n, dtype, lo=-8, hi=8):
        dt = getattr(torch, dtype)
        if dtype in ("uint8",):
            lo = 0
        return torch.randint(lo, hi, (n,), generator=gen).to(dt)

    def rand(n, dtype):
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            return torch.randn(n, generator=gen).to(dt)
        return ints(n, dtype, -100, 100)

    def both(fn, *tensors):
        """fn(group, *copies) on zpp and on gloo; returns both sets."""
        a = [t.clone() for t in tensors]
        b = [t.clone() for t in tensors]
        fn(zg, *a)
        fn(gg, *b)
        return a, b

    # ---- all_reduce ----------------------------------------------------------
    for dtype in FLOATS + INTS:
        for n in SIZES:
            for op in ("SUM", "MIN", "MAX", "PRODUCT"):
                if op == "PRODUCT":
                    x = torch.tensor([-2, -1, 1, 2])[torch.randint(0, 4, (n,), generator=gen)]
                    x = x.abs() if dtype == "uint8" else x
                    x = x.to(getattr(torch, dtype))
                elif op == "SUM":
                    x = ints(n, dtype)
                else:
                    x = rand(n, dtype)
                a, b = both(lambda g, t: dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=g), x)
                check("all_reduce %s %s n=%d" % (op, dtype, n), a[0], b[0])
        for n in SIZES:
            if dtype not in FLOATS:
                continue
            x = ints(n, dtype)
            # gloo has no AVG or PREMUL_SUM: the reference is its exact sum,
            # divided (scaled) in the tensor's type, as zpp documents.
            a, b = both(lambda g, t: dist.all_reduce(t, op=dist.ReduceOp.SUM, group=g), x)
            z = x.clone()
            dist.all_reduce(z, op=dist.ReduceOp.AVG, group=zg)
            check("all_reduce AVG %s n=%d" % (dtype, n), z, (b[0].float() / W).to(x.dtype)
                  if dtype != "float64" else b[0] / W)
            z = x.clone()
            dist.all_reduce(z, op=dist._make_nccl_premul_sum(0.5), group=zg)
            check("all_reduce PREMUL_SUM %s n=%d" % (dtype, n), z, b[0] * 0.5)

    # ---- broadcast, every root; a non-contiguous tensor ---------------------
    for dtype in FLOATS + INTS:
        for n in SIZES:
            for root in range(W):
                x = rand(n, dtype)
                a, b = both(lambda g, t: dist.broadcast(t, src=root, group=g), x)
                check("broadcast %s n=%d root=%d" % (dtype, n, root), a[0], b[0])
    x = rand(6 * 5, "float32").view(6, 5).t()
    a, b = both(lambda g, t: dist.broadcast(t, src=W - 1, group=g), x)
    check("broadcast non-contiguous", a[0], b[0])
    x = ints(6 * 5, "int32").view(6, 5).t()
    a, b = both(lambda g, t: dist.all_reduce(t, group=g), x)
    check("all_reduce non-contiguous", a[0], b[0])

    # ---- gathers ---------------------------------------------------------------
    for dtype in FLOATS + INTS:
        for n in SIZES:
            x = rand(n, dtype)
            outs_z = [torch.empty_like(x) for _ in range(W)]
            outs_g = [torch.empty_like(x) for _ in range(W)]
            dist.all_gather(outs_z, x, group=zg)
            dist.all_gather(outs_g, x, group=gg)
            for r in range(W):
                check("all_gather %s n=%d from %d" % (dtype, n, r), outs_z[r], outs_g[r])
            out_z = torch.empty(W * n, dtype=x.dtype)
            out_g = torch.empty(W * n, dtype=x.dtype)
            dist.all_gather_into_tensor(out_z, x, group=zg)
            dist.all_gather_into_tensor(out_g, x, group=gg)
            check("all_gather_into_tensor %s n=%d" % (dtype, n), out_z, out_g)
            # in place: the input is this rank's slice of the output
            inplace = torch.empty(W * n, dtype=x.dtype)
            inplace[rank * n:(rank + 1) * n] = x
            dist.all_gather_into_tensor(inplace, inplace[rank * n:(rank + 1) * n], group=zg)
            check("all_gather_into_tensor in place %s n=%d" % (dtype, n), inplace, out_g)
    # 2-D output (FSDP's layout), shards along dim 0
    x = rand(3 * 5, "bfloat16").view(3, 5)
    out_z, out_g = torch.empty(3 * W, 5, dtype=x.dtype), torch.empty(3 * W, 5, dtype=x.dtype)
    dist.all_gather_into_tensor(out_z, x, group=zg)
    dist.all_gather_into_tensor(out_g, x, group=gg)
    check("all_gather_into_tensor 2-D", out_z, out_g)

    # ---- reduce-scatters --------------------------------------------------------
    for dtype in FLOATS + INTS:
        for n in SIZES:
            for op in ("SUM", "MAX"):
                x = ints(n * W, dtype) if op == "SUM" else rand(n * W, dtype)
                rop = getattr(dist.ReduceOp, op)
                out_z, out_g = torch.empty(n, dtype=x.dtype), torch.empty(n, dtype=x.dtype)
                dist.reduce_scatter_tensor(out_z, x, op=rop, group=zg)
                dist.reduce_scatter_tensor(out_g, x, op=rop, group=gg)
                check("reduce_scatter_tensor %s %s n=%d" % (op, dtype, n), out_z, out_g)
                lz, lg = torch.empty(n, dtype=x.dtype), torch.empty(n, dtype=x.dtype)
                dist.reduce_scatter(lz, list(x.chunk(W)), op=rop, group=zg)
                dist.reduce_scatter(lg, list(x.chunk(W)), op=rop, group=gg)
                check("reduce_scatter %s %s n=%d" % (op, dtype, n), lz, lg)
                if op == "SUM" and dtype in FLOATS:
                    z = torch.empty(n, dtype=x.dtype)
                    dist.reduce_scatter_tensor(z, x, op=dist.ReduceOp.AVG, group=zg)
                    ref = (out_g.float() / W).to(x.dtype) if dtype != "float64" else out_g / W
                    check("reduce_scatter_tensor AVG %s n=%d" % (dtype, n), z, ref)
                    dist.reduce_scatter_tensor(z, x, op=dist._make_nccl_premul_sum(0.25),
                                               group=zg)
                    check("reduce_scatter_tensor PREMUL_SUM %s n=%d" % (dtype, n), z, out_g * 0.25)

    # ---- reduce, gather, scatter: every root -------------------------------------
    for dtype in ["float32", "bfloat16", "float64", "int32", "int64", "uint8"]:
        for n in SIZES:
            for root in range(W):
                for op in ("SUM", "MIN", "MAX", "PRODUCT"):
                    if op == "PRODUCT" and n > 1000:
                        continue
                    if op == "PRODUCT":
                        x = torch.tensor([1, 2, -1])[torch.randint(0, 3, (n,), generator=gen)]
                        x = x.abs().to(getattr(torch, dtype)) if dtype == "uint8" else x.to(getattr(torch, dtype))
                    else:
                        x = ints(n, dtype) if op == "SUM" else rand(n, dtype)
                    rop = getattr(dist.ReduceOp, op)
                    a, b = both(lambda g, t: dist.reduce(t, dst=root, op=rop, group=g), x)
                    # Only the root's result is defined: zpp leaves the others' tensors as
                    # they were, as NCCL does.
                    check("reduce %s %s n=%d root=%d" % (op, dtype, n, root), a[0],
                          b[0] if rank == root else x)
                x = rand(n, dtype)
                lz = [torch.empty_like(x) for _ in range(W)] if rank == root else None
                lg = [torch.empty_like(x) for _ in range(W)] if rank == root else None
                dist.gather(x, lz, dst=root, group=zg)
                dist.gather(x, lg, dst=root, group=gg)
                for r in range(W if rank == root else 0):
                    check("gather %s n=%d root=%d from %d" % (dtype, n, root, r), lz[r], lg[r])
                if hasattr(dist, "gather_single"):  # torch 2.15: into one tensor on the root
                    flat = torch.empty(W * n, dtype=x.dtype) if rank == root else None
                    dist.gather_single(x, flat, dst=root, group=zg)
                    if rank == root:
                        check("gather_single %s n=%d root=%d" % (dtype, n, root), flat, torch.cat(lg))
                parts = [rand(n, dtype) for _ in range(W)] if rank == root else None
                oz, og = torch.empty(n, dtype=x.dtype), torch.empty(n, dtype=x.dtype)
                dist.scatter(oz, parts, src=root, group=zg)
                dist.scatter(og, parts, src=root, group=gg)
                check("scatter %s n=%d root=%d" % (dtype, n, root), oz, og)
    for root in range(W):
        x = ints(1001, "float32")
        a, b = both(lambda g, t: dist.reduce(t, dst=root, op=dist.ReduceOp.SUM, group=g), x)
        z = x.clone()
        dist.reduce(z, dst=root, op=dist.ReduceOp.AVG, group=zg)
        check("reduce AVG root=%d" % root, z, b[0] / W if rank == root else x)
        z = x.clone()
        dist.reduce(z, dst=root, op=dist._make_nccl_premul_sum(0.5), group=zg)
        check("reduce PREMUL_SUM root=%d" % root, z, b[0] * 0.5 if rank == root else x)
        # non-contiguous root tensor and gather outputs
        x = ints(6 * 5, "int32").view(6, 5).t()
        a, b = both(lambda g, t: dist.reduce(t, dst=root, group=g), x)
        check("reduce non-contiguous root=%d" % root, a[0], b[0] if rank == root else x)
        x = rand(6 * 5, "float32").view(6, 5).t()
        lz = [torch.empty(6, 5).t() for _ in range(W)] if rank == root else None
        dist.gather(x, lz, dst=root, group=zg)
        lg = [torch.empty(5, 6) for _ in range(W)] if rank == root else None
        dist.gather(x.contiguous(), lg, dst=root, group=gg)
        for r in range(W if rank == root else 0):
            check("gather non-contiguous root=%d from %d" % (root, r), lz[r], lg[r])

    # ---- coalesced forms ------------------------------------------------------
    xs = [ints(n, "float32") for n in (5, 1, 333)]
    a, b = both(lambda g, *ts: dist.all_reduce_coalesced(list(ts), group=g), *xs)
    for i in range(len(xs)):
        check("all_reduce_coalesced %d" % i, a[i], b[i])
    ins = [rand(n, "bfloat16") for n in (5, 1, 333)]
    outs_z = [torch.empty(W * t.numel(), dtype=t.dtype) for t in ins]
    with dist._coalescing_manager(group=zg, async_ops=True) as cm:
        for o, i in zip(outs_z, ins):
            dist.all_gather_into_tensor(o, i, group=zg)
    cm.wait()
    for o, i in zip(outs_z, ins):
        ref = torch.empty_like(o)
        dist.all_gather_into_tensor(ref, i, group=gg)
        check("all_gather_into_tensor coalesced n=%d" % i.numel(), o, ref)
    ins = [ints(W * n, "float32") for n in (5, 1, 333)]
    outs_z = [torch.empty(t.numel() // W, dtype=t.dtype) for t in ins]
    with dist._coalescing_manager(group=zg, async_ops=True) as cm:
        for o, i in zip(outs_z, ins):
            dist.reduce_scatter_tensor(o, i, group=zg)
    cm.wait()
    for o, i in zip(outs_z, ins):
        ref = torch.empty_like(o)
        dist.reduce_scatter_tensor(ref, i, group=gg)
        check("reduce_scatter_tensor coalesced n=%d" % o.numel(), o, ref)
    zb = zg._get_backend(torch.device("cpu"))
    ins = [rand(n, "float32") for n in (4, 9)]
    outs = [[torch.empty_like(t) for t in ins] for _ in range(W)]
    zb.allgather_coalesced(outs, ins).wait()
    for j, t in enumerate(ins):
        ref = [torch.empty_like(t) for _ in range(W)]
        dist.all_gather(ref, t, group=gg)
        for r in range(W):
            check("allgather_coalesced input %d rank %d" % (j, r), outs[r][j], ref[r])

    # ---- all-to-all (equal splits) --------------------------------------------
    for dtype in FLOATS + INTS:
        for n in (1, 7, 1000):
            x = rand(n * W, dtype)
            out_z, out_g = torch.empty_like(x), torch.empty_like(x)
            dist.all_to_all_single(out_z, x, group=zg)
            dist.all_to_all_single(out_g, x, group=gg)
            check("all_to_all_single %s n=%d" % (dtype, n), out_z, out_g)
            dist.all_to_all_single(out_z, x, [n] * W, [n] * W, group=zg)
            check("all_to_all_single explicit equal splits %s n=%d" % (dtype, n), out_z, out_g)

    # ---- all-to-all, uneven splits (experts): rank r sends 1 + (r + 2 p) % 3 rows
    # of 3 elements to rank p; gloo serves the same splits --------------------------
    def rows(src, dst, k):
        return (src + 2 * dst + k) % 4

    for dtype in ["float32", "bfloat16", "int64", "uint8", "complex64"]:
        for k in range(3):
            ins = [rows(rank, p, k) for p in range(W)]
            outs = [rows(p, rank, k) for p in range(W)]
            x = rand(sum(ins) * 3, "float32" if dtype == "complex64" else dtype).view(-1, 3)
            if dtype == "complex64":
                x = torch.complex(x, -x)
            out_z = torch.full((sum(outs), 3), 7, dtype=x.dtype)
            out_g = out_z.clone()
            dist.all_to_all_single(out_z, x, outs, ins, group=zg)
            if dtype == "complex64":
                ref_g = torch.view_as_real(out_g).clone()
                dist.all_to_all_single(ref_g, torch.view_as_real(x).contiguous(), outs, ins, group=gg)
                out_g = torch.view_as_complex(ref_g)
            else:
                dist.all_to_all_single(out_g, x, outs, ins, group=gg)
            check("all_to_all_single uneven %s k=%d" % (dtype, k), out_z, out_g)
    # only the input's splits given, or only the output's: the other is even
    x = rand(W * 2, "float32")
    out_g = torch.empty(W * 2)
    dist.all_to_all_single(out_g, x, group=gg)
    out_z = torch.empty(W * 2)
    dist.all_to_all_single(out_z, x, None, [2] * W, group=zg)
    check("all_to_all_single input splits only", out_z, out_g)
    # all_to_all of tensor lists: tensor p goes to rank p, any sizes
    for dtype in ["float32", "int32", "float16"]:
        ins = [torch.full((rank + 2 * p + 1,), float(100 * rank + p)).to(getattr(torch, dtype))
               for p in range(W)]
        outs = [torch.empty(p + 2 * rank + 1, dtype=getattr(torch, dtype)) for p in range(W)]
        dist.all_to_all(outs, ins, group=zg)
        for p in range(W):
            check("all_to_all list %s from %d" % (dtype, p), outs[p],
                  torch.full((p + 2 * rank + 1,), float(100 * p + rank)).to(getattr(torch, dtype)))
    outs = [torch.empty(2, 3).t() for _ in range(W)]
    ins = [torch.arange(6.).view(3, 2) + 10 * rank + p for p in range(W)]
    dist.all_to_all(outs, ins, group=zg)
    for p in range(W):
        check("all_to_all list non-contiguous from %d" % p, outs[p], torch.arange(6.).view(3, 2) + 10 * p + rank)

    # ---- asynchronous work objects ----------------------------------------------
    x = ints(100000, "float32")
    ref = x.clone()
    dist.all_reduce(ref, group=gg)
    work = dist.all_reduce(x, group=zg, async_op=True)
    fut = work.get_future()
    got = fut.wait()
    # (Work.exception() is not reachable from Python in torch 2.9: pybind
    # cannot convert an exception_ptr; errors reach Python through wait().)
    assert work.is_completed() and work.is_success()
    work.wait()
    check("async all_reduce (future's value)", got[0], ref)
    check("async all_reduce (tensor)", x, ref)
    chained = dist.all_reduce(ints(10, "int64"), group=zg, async_op=True).get_future().then(
        lambda f: f.value()[0] * 2)
    chained.wait()
    works = [dist.broadcast(torch.full((1000,), float(rank)), src=r, group=zg, async_op=True)
             for r in range(W)]
    for r, w in enumerate(works):
        w.wait()
        check("async broadcasts in flight together, root %d" % r, w.result()[0],
              torch.full((1000,), float(r)))
    dist.barrier(group=zg)

    # ---- what zpp cannot do raises, naming the call ------------------------------
    def raises(what, fn, words):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            if all(w in msg for w in words):
                checks[0] += 1
                return
            print("rank %d: FAIL %s raised without %s: %s" % (rank, what, words, msg), flush=True)
            sys.exit(1)
        print("rank %d: FAIL %s did not raise" % (rank, what), flush=True)
        sys.exit(1)

    # c10d's canonical names where this torch has them (compat.hpp)
    single = "ZPP_C10D_SINGLE_NAMES" in torch_zpp.build_info().get("c10d_features", [])
    a2a = "all_to_all_single" if single else "alltoall_base"
    if W > 1:
        splits = [2] + [1] * (W - 1)
        raises("all_to_all_single splits that do not add up",
               lambda: dist.all_to_all_single(torch.empty(W + 1), torch.empty(W + 1),
                                              splits, [1] * W, group=zg),
               ["zpp", a2a, "input_split_sizes", "add up to %d rows" % W])
        raises("all_to_all_single rows that do not split evenly",
               lambda: dist.all_to_all_single(torch.empty(W + 1), torch.empty(W + 1), group=zg),
               ["zpp", a2a, "cannot share evenly"])
        opts = dist.GatherOptions()
        opts.rootRank = (rank + 1) % W
        raises("gather outputs on a non-root", lambda: zg._get_backend(torch.device("cpu")).gather(
            [[torch.zeros(1)] * W], [torch.zeros(1)], opts), ["zpp", "gather", "only the root"])
    raises("BAND", lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int32),
                                           op=dist.ReduceOp.BAND, group=zg), ["allreduce", "BAND"])
    raises("reduce BXOR", lambda: dist.reduce(torch.zeros(1, dtype=torch.int32), dst=0,
                                              op=dist.ReduceOp.BXOR, group=zg), ["zpp", "reduce", "BXOR"])
    # A sparse tensor: an error naming zpp and the call, not torch's own
    # "unsupported memory format" from a contiguous() made too early.
    sp = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))
    raises("sparse all_reduce", lambda: dist.all_reduce(sp, group=zg), ["zpp", "allreduce", "Sparse"])
    # Collectives cannot join a coalesced group of sends and receives.
    cpu = torch.device("cpu")
    zg._start_coalescing(cpu)
    raises("broadcast inside a coalescing group", lambda: dist.broadcast(torch.zeros(1), src=0, group=zg),
           ["zpp", "broadcast", "coalesced"])
    zg._end_coalescing(cpu).wait()

    topo = torch_zpp.topology(zg)
    nodes, per = launch.parse_layout(os.environ["ZPP_TEST_LAYOUT"])
    assert topo["nodes"] == nodes and topo["local_size"] == per, topo
    dist.barrier(group=zg)
    dist.destroy_process_group()
    print("rank %d: %d checks passed" % (rank, checks[0]), flush=True)


if __name__ == "__main__":
    sys.exit(launch.main(__file__, body, None, timeout=400))
