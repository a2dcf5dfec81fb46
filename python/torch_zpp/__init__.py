"""zpp as a torch.distributed backend.

    import torch_zpp                       # registers the backend "zpp" (cpu, cuda)
    dist.init_process_group("zpp")         # or "cpu:zpp,cuda:nccl", new_group(backend="zpp")

ZeRO++ compression of the plain calls is switched on by configuration:
ZPP_QWZ_BITS / ZPP_QGZ_BITS in the environment, or ``torch_zpp.Options`` as
``pg_options``. ``qwz_all_gather`` and ``qgz_reduce_scatter`` choose per call.
See docs/pytorch.md.
"""
import dataclasses
import datetime
import json
import math
import os
from typing import Optional

import torch
import torch.distributed as dist

# The base class c10d.Backend must be known to pybind11 before our subclass.
import torch.distributed.distributed_c10d  # noqa: F401


def _read_build_info():
    """What setup.py recorded (python/setup.py, BuildZppExtension): {} where it recorded nothing."""
    try:
        with open(os.path.join(os.path.dirname(__file__), "_build_info.json")) as f:
            return json.load(f)
    except OSError:
        return {}


_BUILD_INFO = _read_build_info()
# _C is compiled against one torch's C++ ABI: under another it fails to load with an
# undefined symbol, or loads and misbehaves. Say so before trying.
if _BUILD_INFO.get("torch") not in (None, torch.__version__):
    raise ImportError(
        "torch_zpp was built for torch %s but this is torch %s: rebuild it against this torch "
        "(pip install --no-build-isolation --force-reinstall <zpp checkout>/python)"
        % (_BUILD_INFO["torch"], torch.__version__))

from . import _C  # noqa: E402

__all__ = ["Options", "GradResidual", "qwz_all_gather", "qgz_reduce_scatter", "stats",
           "reset_stats", "topology", "backend", "build_info"]

_UNDEF = _C.UNDEF_INT
# torch's default process group timeout: a timeout equal to it was most
# likely not chosen by the caller, so zpp's own (ZPP_TIMEOUT, 300 s) applies.
_TORCH_DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)


@dataclasses.dataclass
class Options:
    """Per-group settings (``pg_options=`` of init_process_group / new_group).

    None leaves a setting to the environment (ZPP_*), then to zpp's default.
    qwz_bits: all-gathers of fp32/fp16/bf16 as qwZ (8 or 4; 0 off).
    qgz_bits: reduce-scatters (sum, avg, premul-sum) as qgZ (4 or 8; 0 off).
    compress_min_bytes: smaller calls stay plain and exact (count x size x ranks).
    quant_block: elements per scale. hpz_group_size: see zpp.h.
    rotate: qwZ, hpZ and qgZ rotate each block before quantizing
    (ZPP_QUANT_ROTATE; off by default: docs/zeropp.md says when to turn it on).
    timeout_s: every wait of this group, seconds.
    host_id: this rank's node identity (ZPP_HOSTID).
    qgz_error_feedback: True (ZPP_QGZ_ERROR_FEEDBACK=1): a qgZ reduce-scatter
    without a residual (a plain reduce_scatter_tensor under qgz_bits, or
    qgz_reduce_scatter without residual=) fails, naming the setting, rather
    than run without error feedback (torch_zpp.fsdp.error_feedback gives
    FSDP2 its residuals). Every rank of the group must agree.
    """
    qwz_bits: Optional[int] = None
    qgz_bits: Optional[int] = None
    compress_min_bytes: Optional[int] = None
    quant_block: Optional[int] = None
    hpz_group_size: Optional[int] = None
    rotate: Optional[bool] = None
    timeout_s: Optional[int] = None
    host_id: Optional[str] = None
    qgz_error_feedback: Optional[bool] = None


def _int(v):
    return _UNDEF if v is None else int(v)


def _timeout(options, torch_timeout):
    """Explicit beats environment beats default, as everywhere in zpp:
    Options.timeout_s, then a timeout given to init_process_group/new_group,
    then ZPP_TIMEOUT, then zpp's 300 s. Returns (the config's timeoutSec,
    UNDEF to leave it to zpp; the seconds in effect; where they came from,
    for the message of a call that times out)."""
    if options.timeout_s is not None:
        t = int(options.timeout_s)
        return t, t, "torch_zpp.Options(timeout_s=%d)" % t
    if torch_timeout is not None and torch_timeout != _TORCH_DEFAULT_TIMEOUT:
        # Rounded up: zpp counts whole seconds, and must not give up early.
        t = max(1, math.ceil(torch_timeout.total_seconds()))
        return t, t, "init_process_group/new_group(timeout=%s)" % torch_timeout
    env = os.environ.get("ZPP_TIMEOUT")
    if env:
        try:
            t = int(env)
        except ValueError:
            t = 0  # zpp refuses it, naming it, when the group is made
        return _UNDEF, t, "ZPP_TIMEOUT=%s" % env
    return _UNDEF, 300, "zpp's default (ZPP_TIMEOUT unset)"


def _create(dist_opts, pg_options):
    # enable_reconfigure (torch 2.15): the communicator waits for dist._reconfigure.
    return _new_backend(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, pg_options,
                        dist_opts.timeout, "torch:" + str(dist_opts.group_id),
                        deferred=bool(getattr(dist_opts, "enable_reconfigure", False)))


def _new_backend(store, rank, size, options, torch_timeout, comm_name, deferred=False):
    """A ZppBackend over a rendezvous in `store` (torch's, or torchft's for
    a quorum): options a torch_zpp.Options or None."""
    options = options if options is not None else Options()
    if not isinstance(options, Options):
        raise TypeError("zpp: pg_options must be a torch_zpp.Options, not %s"
                        % type(options).__name__)
    timeout_s, in_effect, source = _timeout(options, torch_timeout)
    return _C.ZppBackend(
        store, rank, size,
        timeout_s=timeout_s,
        qwz_bits=_int(options.qwz_bits), qgz_bits=_int(options.qgz_bits),
        quant_block=_int(options.quant_block),
        compress_min_bytes=-1 if options.compress_min_bytes is None
        else int(options.compress_min_bytes),
        hpz_group_size=_int(options.hpz_group_size),
        quant_rotate=_int(options.rotate),
        qgz_error_feedback=_int(options.qgz_error_feedback),
        host_id=options.host_id or "",
        comm_name=comm_name,
        timeout_in_effect=in_effect, timeout_from=source, deferred=deferred)


dist.Backend.register_backend("zpp", _create, extended_api=True, devices=["cpu", "cuda"])


def backend(group=None, device="cpu"):
    """The zpp backend object of a group (the default group if None)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    be = pg._get_backend(torch.device(device))
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every backend in a checking one.
    be = getattr(be, "wrapped_pg", be)
    if not isinstance(be, _C.ZppBackend):
        raise RuntimeError("the group's %s backend is %s, not zpp" % (device, type(be).__name__))
    return be


def _run(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def qwz_all_gather(output, input, bits=8, group=None, async_op=False):
    """all_gather_into_tensor as qwZ: blockwise int8/int4 quantization of
    every shard, gathered and decoded on every rank (lossy within the codec's
    documented bound, docs/codecs.md). fp32, fp16, bf16. bits 0 = the group's
    setting, else 8."""
    return _run(backend(group, output.device.type).qwz_all_gather(output, input, bits), async_op)


class GradResidual:
    """Error feedback for qgZ: what this rank's quantizations of ONE gradient
    buffer dropped, added back before the next step's quantization
    (docs/zeropp.md, "Error feedback for qgZ"). Pass it to
    qgz_reduce_scatter(..., residual=r) once per step, always with the same
    buffer layout: recvcount output elements of dtype, on `group` (the
    default group if None), at `bits` (8, 4 or 2; 2 is the ternary codec it
    is meant for). The group's rotate and quant_block settings apply.

    Memory: fp32 residuals, double-buffered so that one step can be undone:
    8 bytes per element of the reduce-scatter's input (recvcount x ranks)
    and, on several nodes of several ranks, 8 per node-sum element
    (recvcount x nodes), on every rank. Host (CPU) tensors only.

    undo(): the last step was thrown away (an overflow check, say): the
    residuals go back to what they were before its call, once.
    state() / load_state(t): this rank's residuals as a CPU uint8 tensor, for
    a checkpoint (a residual not loaded starts from zeros: one step's
    quantization error is lost, nothing else). These wait for the calls
    issued with the residual first. The residual keeps its group's backend
    alive; after the group is destroyed, aborted or reconfigured its methods
    raise.
    """

    def __init__(self, recvcount, dtype, bits, group=None):
        self._r = _C.GradResidual(backend(group, "cpu"), int(recvcount), dtype, int(bits))
        self.group = group

    recvcount = property(lambda self: self._r.recvcount)
    dtype = property(lambda self: self._r.dtype)
    bits = property(lambda self: self._r.bits)

    def undo(self):
        self._r.undo()

    def state(self):
        return self._r.state()

    def load_state(self, state):
        self._r.load_state(state)

    def state_bytes(self):
        """Bytes of state(): a header and one copy of the residuals (fp32)."""
        return self._r.state_bytes()

    def __repr__(self):
        return "torch_zpp.GradResidual(recvcount=%d, dtype=%s, bits=%d, group %s)" % (
            self.recvcount, self.dtype, self.bits, self._r.group_name)


def qgz_reduce_scatter(output, input, op=dist.ReduceOp.AVG, bits=None, group=None, async_op=False,
                       residual=None):
    """reduce_scatter_tensor as qgZ: quantized hierarchical all-to-all (inside
    the node, then across nodes). op: SUM, AVG (divides by the group size) or
    a PREMUL_SUM. Nodes must hold equal numbers of ranks. bits 0 = the
    group's setting, None = 4.

    residual: a GradResidual (error feedback): its bits and its group (the
    default group if group is None) apply, and its residuals are added to
    the input before quantizing and updated after. A PREMUL_SUM's factor
    scales the input before that, so keep it the same from step to step."""
    if not isinstance(op, dist.ReduceOp):
        op = dist.ReduceOp(op)
    if residual is None:
        be = backend(group, output.device.type)
        return _run(be.qgz_reduce_scatter(output, input, op, 4 if bits is None else bits), async_op)
    if not isinstance(residual, GradResidual):
        raise TypeError("qgz_reduce_scatter: residual must be a torch_zpp.GradResidual, not %s"
                        % type(residual).__name__)
    if bits is not None and bits != residual.bits:
        raise ValueError("qgz_reduce_scatter: bits=%r, but the residual is int%d (its bits apply)"
                         % (bits, residual.bits))
    be = backend(group if group is not None else residual.group, output.device.type)
    return _run(be.qgz_reduce_scatter_ef(output, input, op, residual._r), async_op)


def stats(group=None):
    """Bytes this rank sent, split intra/inter node, per kind of operation:
    {"allgather": {"calls", "intra_node_bytes", "inter_node_bytes"}, "qwz": ...}."""
    return backend(group).stats()


def codec_stats(group=None):
    """The compressed calls' outliers since the last reset_stats: {"escapes": elements that travelled
    exactly beside their block (far above it), "escape_overflows": blocks with more such elements than
    free slots (docs/codecs.md, "Escapes"), "qgz_plain_fallbacks": qgZ reduce-scatters that ran plain
    because the group's nodes hold different numbers of ranks (docs/zeropp.md)}."""
    return backend(group).codec_stats()


def reset_stats(group=None):
    backend(group).reset_stats()


def topology(group=None):
    """{"nodes", "node", "local_rank", "local_size", "uniform"} of this rank."""
    return backend(group).topology()


def build_info():
    """How this torch_zpp was built: where libzpp came from ("bundled": the package's own copy, or
    a developer's build directory), the torch it was built for, the device path or why not; and
    "libzpp": the file this process actually loaded."""
    info = dict(_BUILD_INFO) or {"device_path": _C.has_device_path}
    try:
        with open("/proc/self/maps") as f:
            info["libzpp"] = next((line.split()[-1] for line in f if "/libzpp.so" in line), None)
    except OSError:
        info["libzpp"] = None
    return info
