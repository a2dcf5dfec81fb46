"""A small character-level transformer trained with FSDP2 (fully_shard),
shared by the FSDP test and the benchmark (perf/torch-fsdp/torch-fsdp-bench.sh).

The model and the data are deterministic: every rank builds the same initial
weights (seed 0) and draws its own batches (seed rank, step), so runs that
differ only in the process group see the same inputs.
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "data",
                      "corpus.txt")


class CharLM(nn.Module):
    def __init__(self, vocab, d=256, layers=3, heads=4, seq=64):
        super().__init__()
        self.seq = seq
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                       norm_first=True) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq),
                             persistent=False)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for b in self.blocks:
            h = b(h, src_mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


def load_corpus():
    text = open(CORPUS, encoding="utf-8").read()
    chars = sorted(set(text))
    idx = {c: i for i, c in enumerate(chars)}
    return torch.tensor([idx[c] for c in text], dtype=torch.long), len(chars)


def batch(data, rank, step, bsz, seq):
    g = torch.Generator().manual_seed(1000003 * rank + step)
    starts = torch.randint(0, data.numel() - seq - 1, (bsz,), generator=g)
    x = torch.stack([data[s:s + seq] for s in starts])
    y = torch.stack([data[s + 1:s + seq + 1] for s in starts])
    return x, y


def train(group, steps, bsz=8, d=256, layers=3, seq=64, lr=3e-3, report_group=None,
          on_step=None, mesh=None, device="cpu", delta_bits=None, delta_out=None,
          delta_ask_group=False, param_dtype=None, ef_bits=None, ef_out=None, accum=1,
          ef_skip_at=None):
    """FSDP2 over `group` (or HSDP over a 2-D `mesh`, group None) for `steps`
    steps, the model on `device` ("cpu" or "cuda"). delta_bits (4 or 8):
    weight gathers of differences (torch_zpp.fsdp.delta_weights, with
    ask_group=delta_ask_group; their objects go into the dict delta_out when
    given). param_dtype: FSDP2's mixed precision (MixedPrecisionPolicy with
    that param_dtype, fp32 gradient reduction). ef_bits (2, 4 or 8):
    gradients through qgZ with error feedback (torch_zpp.fsdp.error_feedback;
    its objects go into ef_out when given). accum: micro-batches per step,
    the gradients accumulated without communication
    (set_requires_gradient_sync(False) on all but the last). ef_skip_at: at
    that step, first a step that is thrown away (another batch's backward,
    then zero_grad and undo() of every residual), as an overflow check
    would. Returns (losses, step seconds): losses are the mean over all
    ranks (all-reduced on report_group, outside the timed part)."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    data, vocab = load_corpus()
    model = CharLM(vocab, d=d, layers=layers, seq=seq).to(device)
    if mesh is None:
        mesh = DeviceMesh.from_group(group, torch.device(device).type)
    kw = {}
    if param_dtype is not None:
        from torch.distributed.fsdp import MixedPrecisionPolicy

        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for b in model.blocks:
        fully_shard(b, mesh=mesh, **kw)
    fully_shard(model, mesh=mesh, **kw)
    if delta_bits:
        import torch_zpp.fsdp

        gathers = torch_zpp.fsdp.delta_weights(model, bits=delta_bits, ask_group=delta_ask_group)
        if delta_out is not None:
            delta_out.update(gathers)
    efs = {}
    if ef_bits:
        import torch_zpp.fsdp

        efs = torch_zpp.fsdp.error_feedback(model, bits=ef_bits)
        if ef_out is not None:
            ef_out.update(efs)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rank = dist.get_rank(group)  # group None: the global rank
    losses, times = [], []
    for step in range(steps):
        if step == ef_skip_at:
            x, y = batch(data, rank, 1000000 + step, bsz, seq)
            F.cross_entropy(model(x.to(device)).flatten(0, 1).float(), y.to(device).flatten()).backward()
            opt.zero_grad()
            for ef in efs.values():
                ef.undo()
        micro = [batch(data, rank, step * accum + i, bsz, seq) for i in range(accum)]
        t0 = time.perf_counter()
        loss = 0.0
        for i, (x, y) in enumerate(micro):
            x, y = x.to(device), y.to(device)
            part = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
            if accum > 1:
                model.set_requires_gradient_sync(i == accum - 1)
                part = part / accum
            part.backward()
            loss = loss + part.detach()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
        if on_step:
            on_step(step)
        lt = loss.detach().float().clone()
        dist.all_reduce(lt, group=report_group or group)
        losses.append(lt.item() / dist.get_world_size(report_group or group))
    return losses, times


def nparams(d=256, layers=3, seq=64):
    _, vocab = load_corpus()
    return sum(p.numel() for p in CharLM(vocab, d=d, layers=layers, seq=seq).parameters())
