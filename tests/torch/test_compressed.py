"""ZeRO++ through the torch backend: torch_zpp.qwz_all_gather and
qgz_reduce_scatter (explicit), and the plain calls compressed by
configuration (torch_zpp.Options), checked against gloo's exact results
within the bounds docs/zeropp.md derives (codec bound for qwZ; the
three-rounding bound for qgZ, with each rank's decoded input |y_r| bounded by
|x_r| + E(s_r) since the test cannot see y_r). The size threshold keeps
small calls plain and exact.

    test_compressed.py LAYOUT   (2x2, 4x1, ...)
"""
import os
import sys

import launch

U = 2.0 ** -24
UT = {"float32": (0.0, 0.0), "float16": (2.0 ** -11, 2.0 ** -25),
      "bfloat16": (2.0 ** -8, 2.0 ** -134)}
QB = {8: (127, 256), 4: (7, 64)}  # bits: (Q, default block)


def body(rank):
    import torch
    import torch.distributed as dist

    import torch_zpp

    dist.init_process_group("gloo")
    W = dist.get_world_size()
    nodes, L = launch.parse_layout(os.environ["ZPP_TEST_LAYOUT"])
    zg = dist.new_group(backend="zpp")
    cfg = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qwz_bits=8, qgz_bits=4, compress_min_bytes=0))
    thr = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qwz_bits=8, qgz_bits=4, compress_min_bytes=1 << 16))
    gen = torch.Generator().manual_seed(77 + rank)
    checks = [0]

    def gamma(k):
        return k * U / (1 - k * U)

    def blocks(x, B):
        """x (..., n) float64 -> per-element max |x| of its block (blocks from 0)."""
        n = x.shape[-1]
        pad = (-n) % B
        a = torch.nn.functional.pad(x.abs(), (0, pad)).view(*x.shape[:-1], -1, B).amax(-1)
        return a.repeat_interleave(B, dim=-1)[..., :n]

    def E(s, Q):
        return s / 2 + 2.0 ** -21 * Q * s + (Q + 1) * 2.0 ** -150

    def scale(a, Q):
        return (a.float() / Q).double()  # fl32(a / Q), as the codec computes it

    def fail(msg):
        print("rank %d: FAIL %s" % (rank, msg), flush=True)
        sys.exit(1)

    def within(what, got, exact, bound):
        err = (got.double() - exact).abs()
        checks[0] += 1
        if not bool(torch.isfinite(got.double()).all()) or bool((err > bound).any()):
            i = int((err - bound).argmax())
            fail("%s: element %d off by %g, bound %g" % (what, i, err[i], bound[i]))

    def qwz_bound(shards, dtype, bits):
        """shards: (W, n) float64, each quantized on its own."""
        Q, B = QB[bits]
        uT, mT = UT[dtype]
        s = scale(blocks(shards, B), Q)
        return (s / 2 + 2.0 ** -21 * Q * s + uT * (shards.abs() + s) + mT
                + (Q + 1) * 2.0 ** -150).reshape(-1)

    def qgz_bound(parts, dtype, bits, avg):
        """parts: (W, c) float64, rank r's input for this rank's partition."""
        Q, B = QB[bits]
        uT, mT = UT[dtype]
        d = W if avg else 1
        s = scale(blocks(parts, B), Q)
        Es = E(s, Q)
        Y = parts.abs() + Es
        if nodes > 1 and L > 1:
            tot = Es.sum(0)
            R = torch.zeros_like(parts[0])
            for v in range(nodes):
                Yv = Y[v * L:(v + 1) * L].sum(0)
                T = scale(blocks(Yv * (1 + gamma(L - 1)), B), Q) * (1 + 2 * U)
                tot = tot + E(T, Q) + gamma(L - 1) * Yv
                R = R + Yv * (1 + gamma(L - 1)) + E(T, Q)
            tot = tot + gamma(nodes - 1) * R
            V = R * (1 + gamma(nodes - 1)) * (1 + U) / d
        else:
            tot = Es.sum(0) + gamma(W - 1) * Y.sum(0)
            V = Y.sum(0) * (1 + gamma(W - 1)) * (1 + U) / d
        b = tot / d + uT * V + mT
        if avg:
            b = b + U * V * (1 + 2 * U) + 2.0 ** -150
        return b

    def gathered(x):
        out = [torch.empty_like(x) for _ in range(W)]
        dist.all_gather(out, x)
        return torch.stack(out).double()

    for dtype in ("float32", "bfloat16", "float16"):
        dt = getattr(torch, dtype)
        for bits in (8, 4):
            for n in (1, 333, 5000):
                x = (torch.randn(n, generator=gen) * (1 + rank)).to(dt)
                out = torch.empty(W * n, dtype=dt)
                torch_zpp.qwz_all_gather(out, x, bits=bits, group=zg)
                sh = gathered(x)
                within("qwz_all_gather %s int%d n=%d" % (dtype, bits, n), out, sh.reshape(-1),
                       qwz_bound(sh, dtype, bits))
                for avg in (False, True):
                    xs = (torch.randn(W * n, generator=gen) * (1 + rank)).to(dt)
                    out = torch.empty(n, dtype=dt)
                    op = dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM
                    torch_zpp.qgz_reduce_scatter(out, xs, op=op, bits=bits, group=zg)
                    parts = gathered(xs)[:, rank * n:(rank + 1) * n]
                    exact = parts.sum(0) / (W if avg else 1)
                    within("qgz_reduce_scatter %s int%d n=%d avg=%d" % (dtype, bits, n, avg),
                           out, exact, qgz_bound(parts, dtype, bits, avg))
        # configured: the plain calls of a group with qwz_bits=8, qgz_bits=4
        n = 3001
        torch_zpp.reset_stats(cfg)
        x = torch.randn(n, generator=gen).to(dt)
        out = torch.empty(W * n, dtype=dt)
        dist.all_gather_into_tensor(out, x, group=cfg)
        sh = gathered(x)
        within("configured all_gather_into_tensor %s" % dtype, out, sh.reshape(-1),
               qwz_bound(sh, dtype, 8))
        xs = torch.randn(W * n, generator=gen).to(dt)
        out = torch.empty(n, dtype=dt)
        dist.reduce_scatter_tensor(out, xs, op=dist.ReduceOp.AVG, group=cfg)
        parts = gathered(xs)[:, rank * n:(rank + 1) * n]
        within("configured reduce_scatter_tensor AVG %s" % dtype, out, parts.sum(0) / W,
               qgz_bound(parts, dtype, 4, True))
        st = torch_zpp.stats(cfg)
        if st["qwz"]["calls"] != 1 or st["qgz"]["calls"] != 1:
            fail("configured calls were not compressed: %s" % st)
        # integers stay plain and exact under the same settings
        xi = torch.randint(-50, 50, (W * 10,), generator=gen, dtype=torch.int32)
        oz, og = torch.empty(10, dtype=torch.int32), torch.empty(10, dtype=torch.int32)
        dist.reduce_scatter_tensor(oz, xi, group=cfg)
        dist.reduce_scatter_tensor(og, xi)
        checks[0] += 1
        if not torch.equal(oz, og):
            fail("int32 reduce-scatter under qgZ settings is not exact")
        # below the threshold: plain and exact; above: compressed
        torch_zpp.reset_stats(thr)
        small = torch.randn(100, generator=gen).to(dt)
        oz, og = torch.empty(W * 100, dtype=dt), torch.empty(W * 100, dtype=dt)
        dist.all_gather_into_tensor(oz, small, group=thr)
        dist.all_gather_into_tensor(og, small)
        checks[0] += 1
        if not torch.equal(oz, og):
            fail("a call under compress_min_bytes is not exact (%s)" % dtype)
        big = torch.randn(65536 // W, generator=gen).to(dt)
        ob = torch.empty(W * big.numel(), dtype=dt)
        dist.all_gather_into_tensor(ob, big, group=thr)
        st = torch_zpp.stats(thr)
        if st["allgather"]["calls"] != 1 or st["qwz"]["calls"] != 1:
            fail("threshold: expected one plain and one qwZ call: %s" % st)

    # Rotation (Options(rotate=True)): heavy-tailed weights (Student's t, 3
    # degrees of freedom) gathered with int4 by a rotating group and a plain
    # one. The rotated result differs from the plain one (the codec rotated),
    # is within the rotated bound E of zpp_quant.h with the scale bounded by
    # B * M / Q (|w_i| <= sum |x'_j|), and has the smaller RMS error: what
    # rotation is for. qgZ likewise, against the exact sum.
    rot = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qwz_bits=4, qgz_bits=4, compress_min_bytes=0, rotate=True))
    plain4 = dist.new_group(backend="zpp", pg_options=torch_zpp.Options(
        qwz_bits=4, qgz_bits=4, compress_min_bytes=0, rotate=False))
    Q, B = QB[4]
    n = 4096
    chi = sum(torch.randn(n, generator=gen) ** 2 for _ in range(3)) / 3
    x = (torch.randn(n, generator=gen) / chi.sqrt()).float()
    sh = gathered(x)
    ex = sh.reshape(-1)
    got = {}
    for name, g in (("rotated", rot), ("plain", plain4)):
        out = torch.empty(W * n, dtype=torch.float32)
        dist.all_gather_into_tensor(out, x, group=g)
        got[name] = out.double()
    M = blocks(sh, B).reshape(-1)
    smax = B * M / Q * (1 + 2.0 ** -20)
    Erot = smax / 2 + 2.0 ** -21 * Q * smax + 2.0 ** -22 * B * M + 2.0 ** -23 * 6 * Q * smax \
        + (Q + 3) * 2.0 ** -150
    within("rotated all_gather_into_tensor int4", got["rotated"], ex, Erot)
    within("plain all_gather_into_tensor int4", got["plain"], ex, qwz_bound(sh, "float32", 4))
    checks[0] += 1
    if torch.equal(got["rotated"], got["plain"]):
        fail("Options(rotate=True) gathered the same bytes as rotate=False")
    rms = {k: float(((v - ex) ** 2).mean().sqrt()) for k, v in got.items()}
    checks[0] += 1
    if not rms["rotated"] < rms["plain"]:
        fail("rotation did not lower the int4 RMS error on t(3) data: %s" % rms)
    xs = (torch.randn(W * n, generator=gen) / torch.cat([chi.sqrt()] * W)).float()
    parts = gathered(xs)[:, rank * n:(rank + 1) * n]
    exact = parts.sum(0)
    outs = {}
    for name, g in (("rotated", rot), ("plain", plain4)):
        out = torch.empty(n, dtype=torch.float32)
        dist.reduce_scatter_tensor(out, xs, op=dist.ReduceOp.SUM, group=g)
        outs[name] = out.double()
    checks[0] += 1
    if not bool(torch.isfinite(outs["rotated"]).all()) or torch.equal(outs["rotated"], outs["plain"]):
        fail("rotated reduce_scatter_tensor: not finite, or the plain group's bytes")
    rms_rs = {k: float(((v - exact) ** 2).mean().sqrt()) for k, v in outs.items()}
    if rank == 0:
        print("rank 0: int4 t(3) RMS error, all-gather %s, reduce-scatter %s" % (rms, rms_rs),
              flush=True)

    # Compressed types only: an integer qwZ call is refused, naming the call.
    try:
        torch_zpp.qwz_all_gather(torch.empty(W * 4, dtype=torch.int32),
                                 torch.zeros(4, dtype=torch.int32), group=zg)
        fail("qwz_all_gather of int32 did not raise")
    except dist.DistBackendError as e:
        if "qwz_all_gather" not in str(e):
            fail("the error does not name the call: %s" % e)
    dist.destroy_process_group()
    print("rank %d: %d checks passed" % (rank, checks[0]), flush=True)


if __name__ == "__main__":
    sys.exit(launch.main(__file__, body, "2x2", timeout=250))
