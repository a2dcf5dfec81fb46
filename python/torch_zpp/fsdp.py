"""FSDP2 with zpp's stateful codecs: weight gathers of differences (4-bit
weights that train like 16-bit ones) and error feedback for quantized
gradients (what each step's quantization dropped is added to the next
step's gradient before it is quantized).

Error feedback (error_feedback, at the end of this file):

    torch_zpp.fsdp.error_feedback(model, bits=2)  # after every fully_shard

gives every FSDP module a reduce-scatter of its own with a residual
(torch_zpp.GradResidual) for its gradient buffer; docs/pytorch.md, "Error
feedback in FSDP2".

Weight differences:

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

from . import GradResidual, qgz_reduce_scatter, qwz_all_gather

try:
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather as _AllGather
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatter
except ImportError:  # torch without FSDP2's custom collectives
    _AllGather = _ReduceScatter = object

__all__ = ["DeltaAllGather", "delta_weights", "ErrorFeedbackReduceScatter", "error_feedback"]


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


class ErrorFeedbackReduceScatter(_ReduceScatter):
    """FSDP2's ReduceScatter interface, as qgZ with error feedback: one
    object per FSDP module, holding the residual of that module's gradient
    buffer (torch_zpp.GradResidual at `bits`).

    FSDP2 reduce-scatters each module's gradients once per step, all of them
    copied into one flat buffer whose layout is fixed by the module (with
    set_requires_gradient_sync(False) on the accumulation steps it still
    reduces once, on the last). The residual is made at the first call, for
    that call's output size, dtype and group; a later call with another size
    (a parameter without a gradient in one step changes the buffer), dtype
    or group raises, naming the difference, since its residuals would be
    added to other gradients' elements.

    undo(): the step was thrown away (after the backward's reduce-scatter).
    state_dict() / load_state_dict(): this rank's residuals for a checkpoint
    (every rank saves and loads its own); a state loaded before the first
    call is applied when the residual is made. Without one a restored run
    starts from zero residuals: one step's quantization error is lost.
    """

    def __init__(self, bits=2):
        if bits not in (2, 4, 8):
            raise ValueError("ErrorFeedbackReduceScatter: bits %r: expected 2, 4 or 8" % (bits,))
        self.bits = bits
        self.residual = None
        self.calls = 0  # reduce-scatters made, for tests and checks
        self._group = None
        self._pending = None  # a state loaded before the residual existed

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        r = self.residual
        if r is None:
            r = GradResidual(output_tensor.numel(), output_tensor.dtype, self.bits, group)
            if self._pending is not None:
                r.load_state(self._pending)  # zpp checks that it was saved for this layout
                self._pending = None
            self.residual, self._group = r, group
        elif _group_name(group) != _group_name(self._group):
            raise ValueError("torch_zpp.fsdp.ErrorFeedbackReduceScatter: called on group %s, its "
                             "residual belongs to group %s: one object per module and group"
                             % (_group_name(group), _group_name(self._group)))
        elif output_tensor.numel() != r.recvcount or output_tensor.dtype != r.dtype:
            raise ValueError("torch_zpp.fsdp.ErrorFeedbackReduceScatter: a gradient buffer of %d "
                             "elements of %s, its residual holds %d of %s: the module's gradient "
                             "layout changed (a parameter without a gradient this step?)"
                             % (output_tensor.numel(), output_tensor.dtype, r.recvcount, r.dtype))
        work = qgz_reduce_scatter(output_tensor, input_tensor, op=op, group=group, residual=r,
                                  async_op=async_op)
        self.calls += 1
        return work

    def undo(self):
        """The step was thrown away: the residuals as before its reduce-scatter (once)."""
        if self.residual is None:
            raise RuntimeError("torch_zpp.fsdp.ErrorFeedbackReduceScatter.undo: nothing to undo "
                               "(no reduce-scatter yet)")
        self.residual.undo()

    def state_dict(self):
        """{"bits", "residual": a CPU uint8 tensor} (no "residual" before the
        first reduce-scatter, or the state loaded then)."""
        if self.residual is not None:
            return {"bits": self.bits, "residual": self.residual.state()}
        if self._pending is not None:
            return {"bits": self.bits, "residual": self._pending.clone()}
        return {"bits": self.bits}

    def load_state_dict(self, state):
        if state.get("bits", self.bits) != self.bits:
            raise ValueError("torch_zpp.fsdp.ErrorFeedbackReduceScatter.load_state_dict: saved at "
                             "%r bits, this one is %d" % (state["bits"], self.bits))
        saved = state.get("residual")
        if saved is None:
            return
        if self.residual is not None:
            self.residual.load_state(saved)
        else:
            self._pending = saved.detach().cpu().clone()


def _group_name(group):
    # FSDP2 resolves its group by name on every call: compare names, not objects.
    return getattr(group, "group_name", None) or repr(group)


def error_feedback(model, bits=2):
    """Gives every FSDP module in `model` (itself included) its own
    ErrorFeedbackReduceScatter (FSDPModule.set_custom_reduce_scatter). Call
    it after fully_shard on all of them; the group must be zpp's (its rotate
    and quant_block apply; its qgz_bits does not: these calls are quantized
    at `bits` whatever the group's settings). Returns module name ->
    ErrorFeedbackReduceScatter (undo, state_dict, load_state_dict)."""
    if _ReduceScatter is object:
        raise RuntimeError("torch_zpp.fsdp.error_feedback: this torch (%s) has no FSDP2 custom "
                           "reduce-scatter (FSDPModule.set_custom_reduce_scatter)" % torch.__version__)
    from torch.distributed.fsdp import FSDPModule

    comms = {}
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            comms[name] = ErrorFeedbackReduceScatter(bits)
            m.set_custom_reduce_scatter(comms[name])
    if not comms:
        raise ValueError("torch_zpp.fsdp.error_feedback: no FSDP module in the model (call "
                         "fully_shard first)")
    return comms
