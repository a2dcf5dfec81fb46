"""FSDP2 weight gathers of differences: 4-bit weights that train like 16-bit ones.

    from torch.distributed.fsdp import fully_shard
    import torch_zpp.fsdp

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    torch_zpp.fsdp.delta_weights(model, bits=4)   # after every fully_shard

A stateless qwZ gather of 4-bit weights puts a rounding error of about a
tenth of each block's largest weight into every forward pass; FSDP2 then
trains about 3% worse than plain at 100 steps (docs/pytorch.md, "Accuracy of
the 4-bit codecs in FSDP2"). Weights move little per step, so this sends
their change instead, as zpp's ZPP_PARAM_DELTA parameters do in C
(docs/zeropp.md, "Delta parameters"):

- every FSDP module's all-gather becomes a DeltaAllGather (FSDP2's
  set_custom_all_gather), which keeps the reference R: the module's gathered
  weights exactly as its last gather returned them, the same on every rank;
- the first gather is the group's plain all_gather_into_tensor (exact while
  the group does not compress all-gathers itself: qwz_bits 0, the default);
- later ones send d = x - R_own (fp32) with qwz_all_gather at `bits` (the
  group's rotate and block settings apply), and set R = round(R + d'), d' the
  decoded differences, which they return.
A gathered weight is then off by the codec's error on the last difference,
not on the weight, and nothing builds up: what one gather rounded away is in
the next difference. The backward pass re-gathers the weights its forward
pass gathered: those gathers return the reference and move nothing. Which
pass gathers comes from FSDP2's state (a forward gather always sends the
difference); where this torch does not expose it (or with ask_group=True),
one small all-reduce per gather asks whether any rank's shard changed since
the last gather.

Cost: R holds the module's full weights on every rank (ZeRO-1/2's weight
memory for the modules it is applied to); an fp32 temporary of the full
size during a gather of fp16 or bf16 weights (fp32 ones decode into FSDP2's
output); the bytes of a qwZ of fp32 shards at `bits` (the packed size does
not depend on the input type) for a forward gather, none for a backward one
(a 4-byte all-reduce per gather when asking the group); and a copy of this
rank's shard, to tell whether it changed.

The group must be a zpp group on the weights' device (a bits-0 qwz_all_gather
call is refused otherwise). Ranks of the group must apply it to the same
modules. Needs FSDPModule.set_custom_all_gather (tested on torch 2.9.1 and 2.15.0).
"""
import torch
import torch.distributed as dist

from . import qwz_all_gather

try:
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGather
except ImportError:  # torch without FSDP2's custom collectives
    _AllGather = object

__all__ = ["DeltaAllGather", "delta_weights"]


class DeltaAllGather(_AllGather):
    """FSDP2's AllGather interface, as gathers of weight differences (see the
    module's docstring). One object per FSDP module: it holds that module's
    reference. in_backward: a callable that says whether FSDP2 is gathering
    for the backward pass (delta_weights passes FSDP2's own state), or None:
    then every gather after the first asks the group whether any shard
    changed."""

    def __init__(self, bits=4, in_backward=None):
        if bits not in (4, 8):
            raise ValueError("DeltaAllGather: bits %r: expected 4 or 8" % (bits,))
        self.bits = bits
        self.in_backward = in_backward
        self.reference = None
        self.shard = None  # this rank's shard as the last gather took it
        self._d = None  # the fp32 difference's buffer
        self.gathers = {"exact": 0, "difference": 0, "reused": 0}  # by kind, for tests and tuning

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def drop_reference(self):
        """The next gather is exact (after a checkpoint load, say). Every rank
        must call it at the same point."""
        self.reference = None
        self.shard = None

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        ref = self.reference
        x = input_tensor.detach().reshape(-1)
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        if ref is None or ref.shape != output_tensor.shape or ref.dtype != output_tensor.dtype:
            dist.all_gather_into_tensor(output_tensor, input_tensor, group=group)
            self.reference = output_tensor.detach().clone()
            self.shard = self.reference.view(world, -1)[rank].clone()  # exact: x itself
            self.gathers["exact"] += 1
            return None
        if self._unchanged(x, group):
            output_tensor.copy_(ref)
            self.gathers["reused"] += 1
            return None
        own = ref.view(world, -1)[rank]
        # FSDP2 copies the shard into its own slot of the output: the input
        # may alias it, so d and the shard's copy are taken before anything
        # is written.
        self.shard.copy_(x)
        if self._d is None or self._d.shape != x.shape:
            self._d = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        d = self._d  # kept: a fresh one would fault its pages in on every gather
        d.copy_(x)
        d.sub_(own.float() if own.dtype != torch.float32 else own)
        if ref.dtype == torch.float32:
            # The output takes the decoded differences, then R + d' (the
            # same bits as d' + R): no full-size temporary, whose fresh pages
            # a CPU allocation would fault in on every gather.
            out = output_tensor.view(-1)
            qwz_all_gather(out, d, bits=self.bits, group=group)
            out.add_(ref.view(-1))
            ref.copy_(output_tensor)
        else:
            decoded = torch.empty(world * d.numel(), dtype=torch.float32, device=d.device)
            qwz_all_gather(decoded, d, bits=self.bits, group=group)
            self.reference = ref = (ref.reshape(-1).float() + decoded).to(ref.dtype).view(ref.shape)
            output_tensor.copy_(ref)
        self.gathers["difference"] += 1
        return None

    def _unchanged(self, x, group):
        """Whether the reference is this gather's result: no rank's shard
        changed since the last gather. The shard is compared with itself as
        that gather took it, not with the reference, which holds its decoded
        (lossy) value. Every rank answers alike."""
        if self.in_backward is None:
            changed = torch.tensor([0 if torch.equal(x, self.shard) else 1], dtype=torch.int32,
                                   device=x.device)
            dist.all_reduce(changed, op=dist.ReduceOp.MAX, group=group)
            return changed.item() == 0
        if not self.in_backward():
            # A forward gather: the optimizer has (usually) written the
            # weights since the last one; a rank whose shard did not change
            # sends zeros, or the last gather's rounding error.
            return False
        # FSDP2 gathers for the backward pass what its forward pass gathered,
        # in the same phase on every rank, with no weight write in between:
        # no rank needs to ask. A shard that changed anyway is an error,
        # rather than a backward pass on other weights than the forward's.
        if not torch.equal(x, self.shard):
            raise RuntimeError("torch_zpp.fsdp.DeltaAllGather: this rank's shard changed between "
                               "the module's forward gather and its backward gather (weights "
                               "written during the step?)")
        return True


def _backward_probe(module):
    """A callable that says whether FSDP2 is gathering `module`'s parameters
    for the backward pass (its parameter group's training state is
    PRE_BACKWARD, for prefetches too), or None where this torch does not
    expose that state as 2.9 to 2.15 do (private attributes)."""
    try:
        from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState

        state = module._get_fsdp_state()
        groups = getattr(state, "_fsdp_param_groups", None)
        if groups is None:
            groups = [state._fsdp_param_group]
    except (ImportError, AttributeError):
        return None
    if len(groups) != 1 or not hasattr(groups[0], "_training_state"):
        return None
    group = groups[0]
    return lambda: group._training_state == TrainingState.PRE_BACKWARD


def delta_weights(model, bits=4, ask_group=False):
    """Gives every FSDP module in `model` (itself included) its own
    DeltaAllGather. Call it after fully_shard on all of them. Returns the
    objects, module name -> DeltaAllGather. ask_group: decide between a
    difference and the reference with one small all-reduce per gather, even
    where FSDP2's state says which pass is gathering."""
    if _AllGather is object:
        raise RuntimeError("torch_zpp.fsdp.delta_weights: this torch (%s) has no FSDP2 custom "
                           "all-gather (FSDPModule.set_custom_all_gather)" % torch.__version__)
    from torch.distributed.fsdp import FSDPModule

    gathers = {}
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            gathers[name] = DeltaAllGather(bits, None if ask_group else _backward_probe(m))
            m.set_custom_all_gather(gathers[name])
    if not gathers:
        raise ValueError("torch_zpp.fsdp.delta_weights: no FSDP module in the model (call "
                         "fully_shard first)")
    return gathers
