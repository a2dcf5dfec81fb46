"""zpp as a torchft process group: replica groups that survive a lost peer.

    from torch_zpp.torchft import ProcessGroupZpp
    pg = ProcessGroupZpp(timeout=timedelta(seconds=60))
    manager = torchft.Manager(pg=pg, ...)       # instead of ProcessGroupGloo / NCCL

torchft's Manager calls ``configure(store_addr, replica_id, rank, world_size, ...)``
at every quorum change: the old communicator is aborted and a new zpp
communicator is made from a rendezvous in that quorum's store prefix (the
same one torch's TCPStore gives), so survivors go on and a restarted replica
heals by joining the next quorum. ``abort()`` ends the calls in flight from
any thread (they raise); ``errored()`` says whether the communicator broke
(a peer lost, a timeout) or was aborted, and why; ``set_timeout`` bounds the
next communicator's waits. Every collective of torch_zpp is there, with
``get_future()`` on its works, and send/recv for torchft's healing.
docs/pytorch.md ("torchft") says what was tested.
"""
from datetime import timedelta
from typing import Optional

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup

try:
    from torchft.process_group import ProcessGroupWrapper
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("torch_zpp.torchft needs torchft (pip install torchft): %s" % e) from e

import torch_zpp
from torch_zpp import _C

# c10d's ErrorType values that mean the communicator is broken.
_BROKEN = ("TIMEOUT", "COMM_ERROR", "REMOTE_ERROR")


class ProcessGroupZpp(ProcessGroupWrapper):
    """A reconfigurable zpp process group for torchft (see the module).

    timeout: every wait of each communicator made by configure.
    options: torch_zpp.Options for those communicators (compression and the
    like); its timeout_s, if set, replaces `timeout`.
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60),
                 options: Optional[torch_zpp.Options] = None) -> None:
        super().__init__(timeout=timeout)
        self._options = options
        self._aborted: Optional[Exception] = None
        self._configures = 0

    def _create_pg(self, store, rank: int, world_size: int) -> BaseProcessGroup:
        self._aborted = None
        self._configures += 1
        # Waits bounded by this wrapper's timeout; zpp's whole-second timeouts rounded up.
        backend = torch_zpp._new_backend(store, rank, world_size, self._options, self._timeout,
                                         "torchft:%s:%s" % (self._quorum_id, self._configures))
        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        pg._register_backend(torch.device("cpu"), BaseProcessGroup.BackendType.CUSTOM, backend)
        if _C.has_device_path and torch.cuda.is_available():
            pg._register_backend(torch.device("cuda"), BaseProcessGroup.BackendType.CUSTOM, backend)
        return pg

    def _backend(self):
        pg = self._pg
        if pg is None:
            return None
        try:
            return pg._get_backend(torch.device("cpu"))
        except RuntimeError:
            return None

    def abort(self, errored: bool = True) -> None:
        # Set first: errored() must say so once the aborted calls raise.
        self._aborted = RuntimeError("zpp: the process group was aborted")
        super().abort(errored=errored)

    def shutdown(self) -> None:
        # A rank that leaves frees its communicator at once, without the
        # destroy's wait for its peers (they may be mid-call): they see it go.
        backend = self._backend()
        if backend is not None:
            backend.abort()
        super().shutdown()

    def errored(self) -> Optional[Exception]:
        if self._aborted is not None:
            return self._aborted
        backend = self._backend()
        if backend is None:
            return None
        state = backend.get_error().name
        if state in _BROKEN:
            return RuntimeError("zpp: the communicator broke (%s): its calls are aborted until "
                                "configure makes a new one" % state)
        return None

    def getBackendName(self) -> str:
        return "torchft-zpp"
