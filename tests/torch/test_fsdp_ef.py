"""Error feedback for qgZ in FSDP2 (torch_zpp.fsdp.error_feedback), 4 ranks as
2 nodes x 2 (so that both residuals exist: the sender's and the node sums').

1. The residuals carry over: the same input reduce-scattered 32 times with
   a residual sums to within 4 times one call's error of t x the exact
   result after every call t (measured: ~2.3 times), where calls without
   one repeat the same error 32 times (2-bit rotated, as below).
2. FSDP2 on the FSDP test's model (tests/torch/fsdp_model.py; batches of
   4), 12 steps:
   plain zpp, 2-bit rotated gradients with error feedback (a custom
   reduce-scatter per FSDP module; weights gathered plain) and 2-bit
   rotated gradients without (the group's qgz_bits=2 under FSDP2's own
   reduce-scatter, printed beside: no claim is made about it). Error
   feedback's final loss is no worse than plain's by more than 1 %, the
   issue's target as it defines "within" (a run that trains better passes).
   At 12 steps this guards the path, not the accuracy, which 12 steps cannot
   judge (docs/pytorch.md, "Error feedback in FSDP2", has 100): measured
   -2.9 % (without error feedback -3.2 %); the check can fail, a smaller
   model (d 128, 2 layers, batches of 8 x 32) ends +5.4 % above plain.
   Every module's reduce-scatter went through its residual once per step.
3. Gradient accumulation (set_requires_gradient_sync(False) on the first of
   two micro-batches, a smaller model): FSDP2 reduce-scatters once per
   step, so each residual serves one layout once per step; and a step
   thrown away (another batch's backward, zero_grad, undo() of every
   residual) leaves the run as it was without it, bit for bit.
4. Checkpoint: a module's state_dict() loaded into a fresh object (before
   its first call, applied when its residual is made) gives the same next
   output, byte for byte, as the original; a fresh one without it another.
   undo() after a call restores the state exactly, once only.
5. Errors: on a group with qgz_error_feedback, a reduce_scatter_tensor (and
   qgz_reduce_scatter) without a residual fails with zpp's message; a
   residual used with another size, dtype or group raises naming it, as do
   an op other than SUM, AVG and PREMUL_SUM, bad bits, a state of another
   layout and a changed FSDP buffer.
"""
import math
import sys

import launch

STEPS = 12
# The FSDP test's model (2.4M parameters) on batches of 4, for CI's time.
MODEL = dict(bsz=4)
# Smaller, for the checks that count calls or compare two runs bit for bit.
SMALL = dict(d=128, layers=2, bsz=4, seq=32)


def body(rank):
    import torch
    import torch.distributed as dist

    import fsdp_model
    import torch_zpp
    import torch_zpp.fsdp

    def fail(msg):
        print("rank %d: FAIL %s" % (rank, msg), flush=True)
        sys.exit(1)

    def expect_error(fn, words, kinds=(RuntimeError, ValueError)):
        try:
            fn()
        except kinds as e:
            if not all(w in str(e) for w in words):
                fail("error %r does not say %s" % (str(e), words))
            return str(e)
        fail("no error; expected one saying %s" % (words,))

    dist.init_process_group("zpp")
    W = dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    # Gradients only: the weights are gathered plain (qwz_bits 0) on both groups.
    ef_group = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qgz_bits=2, rotate=True, compress_min_bytes=0, qgz_error_feedback=True))
    no_ef_group = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qgz_bits=2, rotate=True, compress_min_bytes=0))

    # 1. The residuals carry over from call to call.
    T, n = 32, 4096
    x = torch.randn(W * n, generator=torch.Generator().manual_seed(rank))
    exact = torch.empty(n)
    dist.reduce_scatter_tensor(exact, x.clone(), op=dist.ReduceOp.AVG, group=gloo)
    res = torch_zpp.GradResidual(n, torch.float32, 2, ef_group)
    sum_ef, sum_no, out, worst_ef = torch.zeros(n), torch.zeros(n), torch.empty(n), 0.0
    for t in range(1, T + 1):
        torch_zpp.qgz_reduce_scatter(out, x.clone(), residual=res, group=ef_group)
        sum_ef += out
        worst_ef = max(worst_ef, (sum_ef - t * exact).norm().item())
        torch_zpp.qgz_reduce_scatter(out, x.clone(), bits=2, group=no_ef_group)
        if t == 1:
            one = (out - exact).norm().item()  # one call's error, repeated by every later call
        sum_no += out
    err_no = (sum_no - T * exact).norm().item()
    if rank == 0:
        print("%d calls of one input: |sum of t outputs - t x exact| with error feedback at most "
              "%.4g, without %.4g at t = %d (one call's error %.4g)" % (T, worst_ef, err_no, T, one),
              flush=True)
    if not (one > 0 and worst_ef <= 4 * one and err_no >= T / 2 * one):
        fail("the residuals did not carry over: summed error up to %.4g with error feedback, "
             "%.4g without, one call's %.4g" % (worst_ef, err_no, one))

    # 2. FSDP2 training.
    plain, _ = fsdp_model.train(dist.group.WORLD, STEPS, report_group=gloo, **MODEL)
    efs = {}
    torch_zpp.reset_stats(ef_group)
    ef, _ = fsdp_model.train(ef_group, STEPS, report_group=gloo, ef_bits=2, ef_out=efs, **MODEL)
    st = torch_zpp.stats(ef_group)
    torch_zpp.reset_stats(no_ef_group)
    no_ef, _ = fsdp_model.train(no_ef_group, STEPS, report_group=gloo, **MODEL)
    st_no = torch_zpp.stats(no_ef_group)
    if rank == 0:
        print("params %d, %d FSDP modules" % (fsdp_model.nparams(), len(efs)))
        for name, losses in (("zpp plain", plain), ("2-bit rot EF", ef), ("2-bit rot no EF", no_ef)):
            print("%-16s %s" % (name, " ".join("%.4f" % x for x in losses)), flush=True)
        print("final loss against plain: error feedback %+.2f %%, without %+.2f %%"
              % (100 * (ef[-1] / plain[-1] - 1), 100 * (no_ef[-1] / plain[-1] - 1)), flush=True)
    if not all(math.isfinite(v) for v in plain + ef + no_ef) or plain[-1] > plain[0] - 0.5:
        fail("training did not make progress: %s" % plain)
    if ef[-1] > 1.01 * plain[-1]:
        fail("2-bit with error feedback: final loss %.6f, more than 1%% above plain's %.6f"
             % (ef[-1], plain[-1]))
    if any(e.calls != STEPS for e in efs.values()) or st["qgz"]["calls"] != STEPS * len(efs):
        fail("expected one error-feedback reduce-scatter per module and step: %s, qgZ calls %d"
             % ({k: e.calls for k, e in efs.items()}, st["qgz"]["calls"]))
    if st["reducescatter"]["calls"] != 0 or st_no["qgz"]["calls"] != STEPS * len(efs):
        fail("the runs did not reduce as meant: with error feedback %s, without %s" % (st, st_no))

    # 3. Accumulation over two micro-batches, without and with a step thrown away.
    acc, acc_skip = {}, {}
    acc_losses, _ = fsdp_model.train(ef_group, 3, report_group=gloo, ef_bits=2, ef_out=acc,
                                     accum=2, **SMALL)
    skip_losses, _ = fsdp_model.train(ef_group, 3, report_group=gloo, ef_bits=2, ef_out=acc_skip,
                                      accum=2, ef_skip_at=1, **SMALL)
    if rank == 0:
        print("2 micro-batches a step: losses %s; with a step thrown away and undone: %s"
              % (acc_losses, skip_losses), flush=True)
    if any(e.calls != 3 for e in acc.values()) or any(e.calls != 4 for e in acc_skip.values()):
        fail("gradient accumulation: reduce-scatters per module %s over 3 steps of 2 micro-batches "
             "(%s with a step thrown away)" % ({k: e.calls for k, e in acc.items()},
                                               {k: e.calls for k, e in acc_skip.items()}))
    if skip_losses != acc_losses:
        fail("a thrown-away step, undone, changed the run: %s vs %s" % (skip_losses, acc_losses))

    # 4. Checkpoint and undo, on the root module's object after training.
    e = efs[""]
    n = e.residual.recvcount
    avg = dist.ReduceOp.AVG
    g = torch.Generator().manual_seed(100 + rank)
    inp = torch.randn(W * n, generator=g)
    restored = torch_zpp.fsdp.ErrorFeedbackReduceScatter(2)
    restored.load_state_dict(e.state_dict())
    fresh = torch_zpp.fsdp.ErrorFeedbackReduceScatter(2)
    outs = [torch.empty(n) for _ in range(3)]
    for obj, out in zip((e, restored, fresh), outs):
        obj(out, inp.clone(), ef_group, avg)
    if not torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32)):
        fail("a residual loaded from state_dict() gave another output than the original")
    if torch.equal(outs[0], outs[2]):
        fail("a fresh residual gave the same output as a trained one: the state is not exercised")
    if not torch.equal(e.state_dict()["residual"], restored.state_dict()["residual"]):
        fail("the loaded residual's next state differs from the original's")
    before = e.residual.state()
    if before.numel() != e.residual.state_bytes():
        fail("state() has %d bytes, state_bytes() says %d" % (before.numel(), e.residual.state_bytes()))
    inp2 = torch.randn(W * n, generator=g)
    first, again = torch.empty(n), torch.empty(n)
    e(first, inp2.clone(), ef_group, avg)
    if torch.equal(e.residual.state(), before):
        fail("a call did not change the residual")
    e.undo()
    if not torch.equal(e.residual.state(), before):
        fail("undo() did not restore the residuals")
    expect_error(e.undo, ["nothing to undo"])
    e(again, inp2.clone(), ef_group, avg)
    if not torch.equal(first.view(torch.int32), again.view(torch.int32)):
        fail("the call after undo() gave another output than the undone one")
    # A state of another layout is refused by zpp, naming both (by their
    # sizes, or, where the 8-bit residuals' rounding to blocks of 32 makes
    # those equal, by their recvcounts).
    other = torch_zpp.GradResidual(n + W, torch.float32, 2, ef_group)
    expect_error(lambda: other.load_state(before), ["GradResidual.load_state", "this handle"])

    # 5. Errors.
    out, big = torch.empty(n), torch.randn(W * n)
    msg = expect_error(lambda: dist.reduce_scatter_tensor(out, big, group=ef_group),
                       ["without a residual handle", "error feedback is on"])
    expect_error(lambda: torch_zpp.qgz_reduce_scatter(out, big, group=ef_group),
                 ["without a residual handle"])
    r = e.residual
    expect_error(lambda: torch_zpp.qgz_reduce_scatter(torch.empty(n + 1), torch.randn(W * (n + 1)),
                                                      group=ef_group, residual=r),
                 ["has %d elements, the residual was made for %d" % (n + 1, n)])
    expect_error(lambda: torch_zpp.qgz_reduce_scatter(out.bfloat16(), big.bfloat16(), group=ef_group,
                                                      residual=r),
                 ["output is BFloat16, the residual was made for Float"])
    expect_error(lambda: torch_zpp.qgz_reduce_scatter(out, big, group=no_ef_group, residual=r),
                 ["the residual belongs to group", "this call is on group"])
    expect_error(lambda: torch_zpp.qgz_reduce_scatter(out, big, bits=4, group=ef_group, residual=r),
                 ["the residual is int2"])
    expect_error(lambda: torch_zpp.qgz_reduce_scatter(out, big, op=dist.ReduceOp.MAX, group=ef_group,
                                                      residual=r),
                 ["ReduceOp.MAX: qgZ reduces with SUM, AVG or PREMUL_SUM"])
    expect_error(lambda: torch_zpp.GradResidual(n, torch.float32, 3, ef_group), ["bits 3"])
    expect_error(lambda: torch_zpp.GradResidual(n, torch.int32, 2, ef_group), ["Int gradients"])
    expect_error(lambda: e(torch.empty(n + 1), torch.randn(W * (n + 1)), ef_group, avg),
                 ["layout changed"])
    expect_error(lambda: e(out, big, no_ef_group, avg), ["its residual belongs to group"])
    # The refused calls moved nothing: the group still reduces with residuals.
    e(out, big, ef_group, avg)
    if rank == 0:
        print("plain reduce_scatter_tensor on the error-feedback group: %s" % msg, flush=True)
    dist.destroy_process_group()
    print("rank %d: passed" % rank, flush=True)


if __name__ == "__main__":
    sys.exit(launch.main(__file__, body, "2x2", timeout=300))
