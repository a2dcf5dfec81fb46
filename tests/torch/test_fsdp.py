"""FSDP2 (fully_shard) trains a small transformer on the zpp backend, 4 ranks
as 2 nodes x 2, exactly as it does on gloo.

1. zpp plain, the default process group (init_process_group("zpp")): every
   all_gather_into_tensor FSDP2 issues equals gloo's on the same input, bit
   for bit, and every reduce_scatter_tensor is within the bound that
   summation order allows: both results are fp32 sums of the same W terms in
   some order, so each is within gamma_{W-1} * sum|g_r| of the exact sum
   (gamma_k = k u / (1 - k u), u = 2^-24), plus u |v| for AVG's division.
   (The comparison wraps torch.distributed's functions; FSDP2 is unchanged.
   FSDP2 calls all_gather_into_tensor / reduce_scatter_tensor up to some
   torch 2.1x and all_gather_single / reduce_scatter_single, their
   canonical names since, the old ones then forwarding to the new: the
   wrapper takes the new names where torch has them.)
   The first step's loss is the same bits as gloo's.
2. A run on gloo alone and one on zpp alone (no comparison traffic): the
   final losses agree within 0.1 % (Adam over 12 steps amplifies the
   last-bit differences of 1.; measured: ~1e-5).
3. zpp with qwZ (int8) + qgZ (int4) on every all-gather and reduce-scatter
   (torch_zpp.Options, threshold 0): final loss within 2 % of plain, and the
   counters show the compressed calls were made.
4. HSDP: init_device_mesh("cpu", (2, 2)) on the zpp default group (FSDP2
   reduce-scatters inside each node, all-reduces across): the same average
   gradient in another summation order, so the final loss is within 0.1 % of
   gloo's, and the replicate groups' all-reduces crossed nodes.
5. 4-bit weights and gradients, rotated (qwZ int4 + qgZ int4, rotate=True,
   issue 27): final loss within 1 % of plain at step 12 (measured +0.25 %;
   unrotated int4 +0.78 %), and the calls were compressed. This guards the
   rotated codecs inside FSDP2; it is not issue 27's accuracy target, which
   these 12 steps are too short to judge: at 100 steps 4-bit weights end
   about 3 % above plain, rotated or not (docs/pytorch.md, "Accuracy of the
   4-bit codecs in FSDP2").
6. 4-bit weights sent as differences (torch_zpp.fsdp.delta_weights, qwZ int4
   of each gather's change) + qgZ int4, rotated: every module's reference is
   the same on every rank, bit for bit; the losses follow plain's more
   closely than case 5's stateless 4-bit weights (summed |loss - plain| over
   the 12 steps); final loss within 1 % of plain; the gathers went through
   qwZ, differences in forward gathers only (the backward re-gathers reuse
   the reference, knowing the pass from FSDP2's state); with ask_group=True
   (an all-reduce per gather decides instead) the same gathers and losses;
   with FSDP2's bf16 mixed precision, bf16 references, the same gathers and
   the final loss within 1 % of plain bf16's.
"""
import math
import sys

import launch

STEPS = 12


def body(rank):
    import torch
    import torch.distributed as dist

    import fsdp_model
    import torch_zpp

    dist.init_process_group("zpp")
    W = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    zpp = dist.group.WORLD
    u = 2.0 ** -24
    gamma = (W - 1) * u / (1 - (W - 1) * u)
    counts = {"ag": 0, "rs": 0}

    if hasattr(dist, "all_gather_single") and hasattr(dist, "reduce_scatter_single"):
        names = ("all_gather_single", "reduce_scatter_single")
    else:
        names = ("all_gather_into_tensor", "reduce_scatter_tensor")
    orig_ag, orig_rs = getattr(dist, names[0]), getattr(dist, names[1])

    def fail(msg):
        print("rank %d: FAIL %s" % (rank, msg), flush=True)
        sys.exit(1)

    def ag(output_tensor, input_tensor, group=None, async_op=False):
        w = orig_ag(output_tensor, input_tensor, group=group)
        ref = torch.empty_like(output_tensor)
        orig_ag(ref, input_tensor, group=gloo)
        if not torch.equal(ref, output_tensor):
            fail("%s differs from gloo's" % names[0])
        counts["ag"] += 1
        return w if async_op else None

    def rs(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        inp = input.clone()
        w = orig_rs(output, input, op=op, group=group)
        ref = torch.empty_like(output)
        orig_rs(ref, inp.clone(), op=op, group=gloo)
        s = torch.empty_like(output)
        orig_rs(s, inp.abs(), op=dist.ReduceOp.SUM, group=gloo)
        d = W if op == dist.ReduceOp.AVG else 1
        # s itself is a rounded sum of non-negative terms: s >= exact / (1 + gamma).
        each = gamma * s.double() * (1 + gamma) / d
        if d != 1:
            each = each + u * (ref.double().abs() + each) * (1 + 2 * u) + 2.0 ** -150
        err = (output.double() - ref.double()).abs()
        if bool((err > 2 * each).any()):
            i = int((err - 2 * each).argmax())
            fail("%s element %d: |zpp - gloo| = %g > bound %g"
                 % (names[1], i, err[i].item(), 2 * each[i].item()))
        counts["rs"] += 1
        return w if async_op else None

    setattr(dist, names[0], ag)
    setattr(dist, names[1], rs)
    try:
        checked, _ = fsdp_model.train(zpp, STEPS, report_group=gloo)
    finally:
        setattr(dist, names[0], orig_ag)
        setattr(dist, names[1], orig_rs)
    if counts["ag"] < STEPS or counts["rs"] < STEPS:
        fail("FSDP2 did not go through the wrapped collectives %s: %s" % (names, counts))

    ref, _ = fsdp_model.train(gloo, STEPS)
    plain, _ = fsdp_model.train(zpp, STEPS, report_group=gloo)
    zg = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qwz_bits=8, qgz_bits=4, compress_min_bytes=0))
    torch_zpp.reset_stats(zg)
    zeropp, _ = fsdp_model.train(zg, STEPS, report_group=gloo)
    st = torch_zpp.stats(zg)
    zg4 = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qwz_bits=4, qgz_bits=4, rotate=True, compress_min_bytes=0))
    rot4, _ = fsdp_model.train(zg4, STEPS, report_group=gloo)
    st4 = torch_zpp.stats(zg4)
    zgd = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qgz_bits=4, rotate=True, compress_min_bytes=0))
    gathers = {}
    delta4, _ = fsdp_model.train(zgd, STEPS, report_group=gloo, delta_bits=4, delta_out=gathers)
    std = torch_zpp.stats(zgd)
    # The same with every gather asking the group whether a shard changed
    # (the path of a torch whose FSDP2 state is not known): in this loop
    # every forward follows an optimizer step, so the same gathers happen and
    # the losses are the same, bit for bit.
    gathers_ask = {}
    delta4_ask, _ = fsdp_model.train(zgd, STEPS, report_group=gloo, delta_bits=4,
                                     delta_out=gathers_ask, delta_ask_group=True)
    for name, g in sorted(gathers.items()):
        # Two checksums of the bits (int64 arithmetic wraps alike on every rank).
        mine = g.reference.reshape(-1).view(torch.int32).to(torch.int64)
        sums = torch.stack([mine.sum(), (mine * torch.arange(1, mine.numel() + 1)).sum()])
        every = [torch.empty_like(sums) for _ in range(W)]
        dist.all_gather(every, sums, group=gloo)
        if any(not torch.equal(e, every[0]) for e in every):
            fail("module '%s': the delta references differ between ranks" % name)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, W // 2), mesh_dim_names=("replicate", "shard"))
    hsdp, _ = fsdp_model.train(None, STEPS, report_group=gloo, mesh=mesh)
    rep = torch_zpp.stats(mesh.get_group("replicate"))["allreduce"]
    if rank == 0:
        print("params %d" % fsdp_model.nparams())
        for name, losses in (("gloo", ref), ("zpp checked", checked), ("zpp plain", plain),
                             ("zpp qwZ+qgZ", zeropp), ("zpp 4-bit rot", rot4),
                             ("zpp 4-bit delta", delta4),
                             ("zpp HSDP", hsdp)):
            print("%-15s %s" % (name, " ".join("%.4f" % x for x in losses)), flush=True)
        print("stats: qwz calls %d, qgz calls %d, allgather calls %d, reducescatter calls %d"
              % (st["qwz"]["calls"], st["qgz"]["calls"], st["allgather"]["calls"],
                 st["reducescatter"]["calls"]))
    if checked[0] != ref[0]:
        fail("first-step loss %r differs from gloo's %r" % (checked[0], ref[0]))
    if not all(math.isfinite(x) for x in ref + plain + zeropp + rot4 + delta4) or ref[-1] > ref[0] - 0.5:
        fail("training did not make progress: %s" % ref)
    if abs(plain[-1] - ref[-1]) > 1e-3 * abs(ref[-1]):
        fail("zpp plain final loss %.6f vs gloo %.6f" % (plain[-1], ref[-1]))
    if abs(zeropp[-1] - plain[-1]) > 0.02 * abs(plain[-1]):
        fail("zpp qwZ+qgZ final loss %.6f vs plain %.6f: more than 2%%" % (zeropp[-1], plain[-1]))
    if abs(rot4[-1] - plain[-1]) > 0.01 * abs(plain[-1]):
        fail("zpp 4-bit rotated final loss %.6f vs plain %.6f: more than 1%%" % (rot4[-1], plain[-1]))
    if abs(delta4[-1] - plain[-1]) > 0.01 * abs(plain[-1]):
        fail("zpp 4-bit delta final loss %.6f vs plain %.6f: more than 1%%" % (delta4[-1], plain[-1]))
    gap_delta = sum(abs(a - b) for a, b in zip(delta4, plain))
    gap_rot4 = sum(abs(a - b) for a, b in zip(rot4, plain))
    if rank == 0:
        print("summed |loss - plain| over %d steps: 4-bit delta %.5f, 4-bit stateless %.5f"
              % (STEPS, gap_delta, gap_rot4))
    if gap_delta >= gap_rot4:
        fail("4-bit delta weights are not closer to plain than stateless ones: %.5f vs %.5f"
             % (gap_delta, gap_rot4))
    if abs(hsdp[-1] - ref[-1]) > 1e-3 * abs(ref[-1]):
        fail("zpp HSDP final loss %.6f vs gloo %.6f" % (hsdp[-1], ref[-1]))
    if rep["calls"] < STEPS or rep["inter_node_bytes"] == 0:
        fail("HSDP's replicate group did not all-reduce across nodes: %s" % rep)
    if std["qwz"]["calls"] < STEPS or std["qgz"]["calls"] < STEPS:
        fail("the delta gathers did not go through qwZ: %s" % std)
    # Differences only in forward gathers (at most one per module and step
    # after the first); the backward re-gathers reuse the reference.
    kinds = {k: sum(g.gathers[k] for g in gathers.values()) for k in ("exact", "difference", "reused")}
    kinds_ask = {k: sum(g.gathers[k] for g in gathers_ask.values()) for k in kinds}
    if rank == 0:
        print("delta gathers: %s over %d modules; asking the group: %s"
              % (kinds, len(gathers), kinds_ask))
    if (kinds["difference"] != std["qwz"]["calls"] or kinds["reused"] == 0
            or kinds["difference"] > (STEPS - 1) * len(gathers)):
        fail("delta gathers %s (qwZ calls %d, %d modules, %d steps): the backward re-gathers "
             "should reuse the reference" % (kinds, std["qwz"]["calls"], len(gathers), STEPS))
    if any(g.in_backward is None for g in gathers.values()):
        fail("torch_zpp.fsdp could not read FSDP2's training state on torch %s: every gather "
             "would ask the group" % torch.__version__)
    if kinds_ask != kinds or delta4_ask != delta4:
        fail("delta gathers asking the group: %s and losses %s, against %s and %s"
             % (kinds_ask, delta4_ask, kinds, delta4))
    # FSDP2's mixed precision (bf16 gathers, fp32 master weights and
    # gradient reduction): the references are bf16, the differences still
    # fp32; the losses follow plain bf16's within 1 %, and the backward
    # re-gathers reuse the reference (bf16 copies of an unchanged shard).
    # (Batches of 2: bf16 matmuls are slow on CPUs without AVX-512 BF16.)
    plain_bf16, _ = fsdp_model.train(zpp, STEPS, bsz=2, report_group=gloo,
                                     param_dtype=torch.bfloat16)
    gathers_bf16 = {}
    delta_bf16, _ = fsdp_model.train(zgd, STEPS, bsz=2, report_group=gloo, delta_bits=4,
                                     delta_out=gathers_bf16, param_dtype=torch.bfloat16)
    kinds_bf16 = {k: sum(g.gathers[k] for g in gathers_bf16.values()) for k in kinds}
    if rank == 0:
        print("bf16 params: plain %s\nbf16 params: delta %s %s"
              % (" ".join("%.4f" % x for x in plain_bf16), " ".join("%.4f" % x for x in delta_bf16),
                 kinds_bf16), flush=True)
    if any(g.reference.dtype != torch.bfloat16 for g in gathers_bf16.values()):
        fail("bf16 params: the references are not bf16")
    if kinds_bf16 != kinds:
        fail("bf16 params: delta gathers %s, against %s in fp32" % (kinds_bf16, kinds))
    if abs(delta_bf16[-1] - plain_bf16[-1]) > 0.01 * abs(plain_bf16[-1]):
        fail("bf16 params: 4-bit delta final loss %.6f vs plain %.6f: more than 1%%"
             % (delta_bf16[-1], plain_bf16[-1]))
    # Called directly, the pass given: a backward gather of a shard that
    # changed since the forward one is an error (on every rank here, all
    # of whose shards change), not a gather of other weights.
    import torch_zpp.fsdp

    phase = {"backward": False}
    g = torch_zpp.fsdp.DeltaAllGather(4, in_backward=lambda: phase["backward"])
    shard = torch.randn(1000, generator=torch.Generator().manual_seed(rank))
    out = torch.empty(W * 1000)
    g(output_tensor=out, input_tensor=shard, group=zgd)
    phase["backward"] = True
    g(output_tensor=out, input_tensor=shard, group=zgd)
    shard.add_(0.01)
    try:
        g(output_tensor=out, input_tensor=shard, group=zgd)
        fail("a backward gather of a changed shard returned")
    except RuntimeError as e:
        if "changed between the module's forward gather and its backward gather" not in str(e):
            fail("unexpected error: %s" % e)
    phase["backward"] = False
    g(output_tensor=out, input_tensor=shard, group=zgd)
    if g.gathers != {"exact": 1, "difference": 1, "reused": 1}:
        fail("direct DeltaAllGather calls: %s" % g.gathers)
    for cs in (st, st4):
        if cs["qwz"]["calls"] < STEPS or cs["qgz"]["calls"] < STEPS:
            fail("compression was not applied: %s" % cs)
    dist.destroy_process_group()
    print("rank %d: passed" % rank, flush=True)


if __name__ == "__main__":
    sys.exit(launch.main(__file__, body, "2x2", timeout=900))
