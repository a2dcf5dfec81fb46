"""torch_zpp on CUDA tensors (labels torch, gpu): skips (77) without a GPU or
where torch_zpp was built without the device path.

    test_cuda.py [LAYOUT]      (default 2x2)

The default group is "cpu:gloo,cuda:zpp" (CUDA tensors on zpp's NCCL path);
torch's own NCCL backend, in a group of its own, is the reference.
1. Plain collectives on CUDA tensors, zpp against NCCL, bit for bit: data is
   integer-valued where a reduction adds, so every summation order gives the
   same bits; random floats where data only moves or is compared (min, max).
   Every root of the rooted calls; a call on a side stream; async works.
2. qwz_all_gather and qgz_reduce_scatter on CUDA tensors equal the same calls
   on copies in host memory, bit for bit: the CUDA codecs are bit-identical
   to the CPU ones and both paths sum in the same order (docs/gpu.md).
3. FSDP2 trains the shared small transformer on the GPU over the default
   group: the first step's loss is the same bits as over NCCL, the final loss
   (12 steps) within 0.1 % of NCCL's; with qwZ int8 + qgZ int4 (threshold 0)
   within 2 % of plain, and the counters show the compressed calls.

Several ranks on one GPU: NCCL before 2.30 refuses them as one host's, so each
rank is a host of its own to NCCL (NCCL_HOSTID), which then connects them
through its network transport; NCCL 2.30+ takes NCCL_MULTI_RANK_GPU_ENABLE=1.
"""
import os
import sys

import launch

SKIP = 77
STEPS = 12


def body(rank):
    import torch
    import torch.distributed as dist

    import fsdp_model
    import torch_zpp

    ndev = torch.cuda.device_count()
    W = int(os.environ["WORLD_SIZE"])
    if ndev < W:
        if torch.cuda.nccl.version() >= (2, 30, 0):
            os.environ["NCCL_MULTI_RANK_GPU_ENABLE"] = "1"
        else:
            os.environ["NCCL_HOSTID"] = "zpp-torch-rank%d" % rank
    dev = torch.device("cuda", rank % ndev)
    torch.cuda.set_device(dev)

    dist.init_process_group("cpu:gloo,cuda:zpp")
    zpp = dist.group.WORLD
    nccl = dist.new_group(backend="nccl")
    both_zpp = dist.new_group(backend="zpp")  # zpp for host tensors too
    checks = [0]
    gen = torch.Generator().manual_seed(4321 + rank)

    def fail(msg):
        print("rank %d: FAIL %s" % (rank, msg), flush=True)
        sys.exit(1)

    def check(what, got, want):
        checks[0] += 1
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            diff = (got.double().cpu() - want.double().cpu()).abs()
            fail("%s: max diff %g" % (what, diff.max().item() if diff.numel() else 0.0))

    def ints(n, dtype, lo=-8, hi=8):
        lo = 0 if dtype == "uint8" else lo
        return torch.randint(lo, hi, (n,), generator=gen).to(getattr(torch, dtype)).to(dev)

    def rand(n, dtype):
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            return torch.randn(n, generator=gen).to(dt).to(dev)
        return ints(n, dtype, -100, 100)

    def both(fn, x):
        """fn(group, tensor) on a copy of x for each group: (zpp's, NCCL's)."""
        a, b = x.clone(), x.clone()
        fn(zpp, a)
        fn(nccl, b)
        return a, b

    # ---- 1. plain collectives ---------------------------------------------------
    types = ["float32", "bfloat16", "float16", "int32", "int64", "int8", "uint8"]
    sizes = [0, 1, 7, 1000, 70001]
    for dtype in types:
        for n in sizes:
            for op in ("SUM", "MIN", "MAX", "AVG"):
                if op == "AVG" and not getattr(torch, dtype).is_floating_point:
                    continue
                x = ints(n, dtype) if op in ("SUM", "AVG") else rand(n, dtype)
                rop = getattr(dist.ReduceOp, op)
                a, b = both(lambda g, t: dist.all_reduce(t, op=rop, group=g), x)
                check("all_reduce %s %s n=%d" % (op, dtype, n), a, b)
            for root in range(W):
                x = rand(n, dtype)
                a, b = both(lambda g, t: dist.broadcast(t, src=root, group=g), x)
                check("broadcast %s n=%d root=%d" % (dtype, n, root), a, b)
                x = ints(n, dtype)
                a, b = both(lambda g, t: dist.reduce(t, dst=root, group=g), x)
                if rank == root:
                    check("reduce %s n=%d root=%d" % (dtype, n, root), a, b)
            x = rand(n, dtype)
            oz = torch.empty(W * n, dtype=x.dtype, device=dev)
            on = torch.empty_like(oz)
            dist.all_gather_into_tensor(oz, x, group=zpp)
            dist.all_gather_into_tensor(on, x, group=nccl)
            check("all_gather_into_tensor %s n=%d" % (dtype, n), oz, on)
            lz = [torch.empty_like(x) for _ in range(W)]
            dist.all_gather(lz, x, group=zpp)
            check("all_gather %s n=%d" % (dtype, n), torch.cat(lz), on)
            for op in ("SUM", "MAX"):
                x = ints(W * n, dtype) if op == "SUM" else rand(W * n, dtype)
                rop = getattr(dist.ReduceOp, op)
                oz, on = (torch.empty(n, dtype=x.dtype, device=dev) for _ in range(2))
                dist.reduce_scatter_tensor(oz, x, op=rop, group=zpp)
                dist.reduce_scatter_tensor(on, x, op=rop, group=nccl)
                check("reduce_scatter_tensor %s %s n=%d" % (op, dtype, n), oz, on)
            x = rand(W * n, dtype)
            oz, on = torch.empty_like(x), torch.empty_like(x)
            dist.all_to_all_single(oz, x, group=zpp)
            dist.all_to_all_single(on, x, group=nccl)
            check("all_to_all_single %s n=%d" % (dtype, n), oz, on)
    # uneven all-to-all: rank r sends (r + 2p) % 4 rows of 3 to rank p
    for dtype in ["float32", "bfloat16", "int64"]:
        ins = [(rank + 2 * p) % 4 for p in range(W)]
        outs = [(p + 2 * rank) % 4 for p in range(W)]
        x = rand(sum(ins) * 3, dtype).view(-1, 3)
        oz = torch.zeros(sum(outs), 3, dtype=x.dtype, device=dev)
        on = oz.clone()
        dist.all_to_all_single(oz, x, outs, ins, group=zpp)
        dist.all_to_all_single(on, x, outs, ins, group=nccl)
        check("all_to_all_single uneven %s" % dtype, oz, on)
    # gather and scatter, every root (torch's NCCL backend serves both)
    for root in range(W):
        x = rand(1001, "float32")
        gz = [torch.empty_like(x) for _ in range(W)] if rank == root else None
        gn = [torch.empty_like(x) for _ in range(W)] if rank == root else None
        dist.gather(x, gz, dst=root, group=zpp)
        dist.gather(x, gn, dst=root, group=nccl)
        if rank == root:
            check("gather root=%d" % root, torch.cat(gz), torch.cat(gn))
        parts = [rand(1001, "bfloat16") for _ in range(W)] if rank == root else None
        sz = torch.empty(1001, dtype=torch.bfloat16, device=dev)
        sn = torch.empty_like(sz)
        dist.scatter(sz, parts, src=root, group=zpp)
        dist.scatter(sn, parts, src=root, group=nccl)
        check("scatter root=%d" % root, sz, sn)
    # a side stream: the call is ordered on the current stream, as NCCL's are
    x = ints(1 << 20, "float32")
    ref = x.clone()
    dist.all_reduce(ref, group=nccl)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 1  # made on the side stream, then reduced there
        dist.all_reduce(y, group=zpp)
    side.synchronize()
    check("all_reduce on a side stream", y, ref)
    # async works, several in flight, waited in turn
    works, outs = [], []
    for r in range(W):
        t = torch.full((100000,), float(r + rank), device=dev)
        works.append(dist.all_reduce(t, group=zpp, async_op=True))
        outs.append(t)
    for r, (w, t) in enumerate(zip(works, outs)):
        w.wait()
        check("async all_reduce %d" % r, t,
              torch.full((100000,), float(W * r + W * (W - 1) // 2), device=dev))
    torch.cuda.synchronize()

    # ---- 2. compressed calls: device against host, bit for bit -----------------
    for dtype in ["float32", "bfloat16", "float16"]:
        for bits in (8, 4):
            for n in (1, 4097, 300000):
                x = rand(n, dtype) * 3
                oz = torch.empty(W * n, dtype=x.dtype, device=dev)
                torch_zpp.qwz_all_gather(oz, x, bits=bits, group=both_zpp)
                oh = torch.empty(W * n, dtype=x.dtype)
                torch_zpp.qwz_all_gather(oh, x.cpu(), bits=bits, group=both_zpp)
                check("qwz_all_gather %s int%d n=%d, device vs host" % (dtype, bits, n), oz.cpu(), oh)
                x = rand(W * n, dtype)
                for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
                    oz = torch.empty(n, dtype=x.dtype, device=dev)
                    torch_zpp.qgz_reduce_scatter(oz, x, op=op, bits=bits, group=both_zpp)
                    oh = torch.empty(n, dtype=x.dtype)
                    torch_zpp.qgz_reduce_scatter(oh, x.cpu(), op=op, bits=bits, group=both_zpp)
                    check("qgz_reduce_scatter %s %s int%d n=%d, device vs host" % (op, dtype, bits, n),
                          oz.cpu(), oh)

    # ---- 3. FSDP2 on the GPU ---------------------------------------------------
    ref, _ = fsdp_model.train(nccl, STEPS, report_group=nccl, device="cuda")
    plain, _ = fsdp_model.train(zpp, STEPS, report_group=nccl, device="cuda")
    zc = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qwz_bits=8, qgz_bits=4, compress_min_bytes=0))
    torch_zpp.reset_stats(zc)
    zeropp, _ = fsdp_model.train(zc, STEPS, report_group=nccl, device="cuda")
    st = torch_zpp.stats(zc)
    if rank == 0:
        for name, losses in (("nccl", ref), ("zpp plain", plain), ("zpp qwZ+qgZ", zeropp)):
            print("%-12s %s" % (name, " ".join("%.4f" % v for v in losses)), flush=True)
        print("stats: qwz calls %d, qgz calls %d" % (st["qwz"]["calls"], st["qgz"]["calls"]))
    if plain[0] != ref[0]:
        fail("FSDP2 first-step loss %r differs from NCCL's %r" % (plain[0], ref[0]))
    if ref[-1] > ref[0] - 0.5:
        fail("FSDP2 over NCCL did not make progress: %s" % ref)
    if abs(plain[-1] - ref[-1]) > 1e-3 * abs(ref[-1]):
        fail("FSDP2 zpp final loss %.6f vs NCCL %.6f" % (plain[-1], ref[-1]))
    if abs(zeropp[-1] - plain[-1]) > 0.02 * abs(plain[-1]):
        fail("FSDP2 qwZ+qgZ final loss %.6f vs plain %.6f: more than 2%%" % (zeropp[-1], plain[-1]))
    if st["qwz"]["calls"] < STEPS or st["qgz"]["calls"] < STEPS:
        fail("compression was not applied: %s" % st)
    dist.destroy_process_group()
    print("rank %d: passed, %d checks" % (rank, checks[0]), flush=True)


def skip_reason():
    import torch

    import torch_zpp
    if not torch.cuda.is_available():
        return "no CUDA device"
    if not torch_zpp.build_info().get("device_path"):
        return "torch_zpp has no device path (%s)" % torch_zpp.build_info().get("no_device_reason")
    return None


if __name__ == "__main__":
    if "--rank" not in sys.argv:
        why = skip_reason()
        if why:
            print("test_cuda: skipped: " + why, flush=True)
            sys.exit(SKIP)
    sys.exit(launch.main(__file__, body, "2x2", timeout=900))
