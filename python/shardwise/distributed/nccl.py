"""NCCL between GPU ranks, bootstrapped over MPI (docs/gpu.md, "NCCL").

    mpiexec -n 2 python train.py

    import shardwise as sw
    comm = sw.distributed.init()                      # MPI (shardwise._mpi)
    nc = sw.distributed.nccl_comm(comm)               # NCCL on GPU comm.local_rank % GPUs
    nc.rank, nc.size, nc.device
    x = nc.to_device(np.ones(1024, np.float32))       # a DeviceBuffer on nc's GPU
    nc.allreduce_sum(x)                               # ncclAllReduce, in place
    nc.from_device(x, np.float32)                     # back as a NumPy array

One process per GPU: a rank drives one GPU, and the logical devices a plan puts on that GPU stay
in its process.  The communicator is shardwise._cuda's NcclComm (cuda/comm_nccl.c), built where
the CUDA backend's build found nccl.h and libnccl.so.2 (the nvidia-nccl-cu13 wheel of the [cuda]
extra).  Its bootstrap goes through the MPI communicator's table (csrc/exec/comm.h): rank 0's
ncclGetUniqueId reaches every rank by the MPI allgather, then ncclCommInitRank; neither the core
nor shardwise._cuda links MPI.  ``nccl_comm(None)`` makes a one-rank communicator without MPI.
The runtime does not use it yet (as it does not use the MPI communicator yet).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.distributed.comm import Comm, CommTimeoutError, MPIUnavailableError, _timeout
from shardwise.machine import cuda
from shardwise.machine.cuda import BackendUnavailableError

__all__ = ["NCCLUnavailableError", "NcclComm", "nccl_comm", "nccl_built", "nccl_info"]


class NCCLUnavailableError(BackendUnavailableError):
    """NCCL cannot be used here: the CUDA backend is not built or cannot be loaded, its build had no
    NCCL (nccl.h and libnccl.so.2 of nvidia-nccl-cu13), or there is no GPU; the message says which."""


def nccl_built() -> bool:
    """Whether shardwise._cuda is built with the NCCL communicator (loads shardwise._cuda)."""
    if not cuda.built():
        return False
    try:
        return bool(getattr(cuda.load(), "HAVE_NCCL", False))
    except BackendUnavailableError:
        return False


def _version_text(code: int) -> str:
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def nccl_info() -> dict[str, Any]:
    """{"built": bool, "version": "2.32.3" (ncclGetVersion of the libnccl linked) | "reason": why not}."""
    if not cuda.built():
        return {"built": False, "reason": "the CUDA backend is not built"}
    try:
        module = cuda.load()
    except BackendUnavailableError as exc:
        return {"built": False, "reason": str(exc)}
    if not getattr(module, "HAVE_NCCL", False):
        return {"built": False, "reason": "shardwise._cuda was built without NCCL (its build found no nccl.h and "
                "libnccl.so.2: pip install nvidia-nccl-cu13, then rebuild)"}
    return {"built": True, "version": _version_text(module.nccl_version())}


def _load() -> Any:
    try:
        module = cuda.load()
    except BackendUnavailableError as exc:
        raise NCCLUnavailableError(f"NCCL needs the CUDA backend: {exc}") from None
    if not getattr(module, "HAVE_NCCL", False):
        raise NCCLUnavailableError(nccl_info()["reason"])
    return module


class NcclComm:
    """NCCL over the ranks of the bootstrap communicator, one GPU per rank: rank, size,
    local_rank, device, and the helpers the tests use.  Buffers are DeviceBuffers on `device`
    (:meth:`to_device`, :meth:`empty`).  Sends and receives between two ranks match in the
    order they are started (NCCL has no tags; a tag only names the request); those started
    before one wait are handed to NCCL as one group, so a pair may start its send and its
    receive in either order, and a rank may send to itself."""

    def __init__(self, impl: Any, module: Any, bootstrap: Comm | None):
        self._impl = impl
        self._module = module
        self._bootstrap = bootstrap     # kept alive: abort() goes through it, and the capsule is its
        self.rank: int = impl.rank
        self.size: int = impl.size
        self.local_rank: int = impl.local_rank
        self.device: int = impl.device

    def __repr__(self) -> str:
        return f"NcclComm(rank={self.rank}, size={self.size}, device={self.device})"

    # ---- device buffers
    def empty(self, nbytes: int) -> Any:
        """A DeviceBuffer of `nbytes` bytes on this communicator's GPU (not initialised)."""
        return self._module.DeviceBuffer(int(nbytes), self.device)

    def to_device(self, array: Any) -> Any:
        """A DeviceBuffer holding a copy of the C-contiguous `array`."""
        data = np.ascontiguousarray(array)
        buf = self.empty(data.nbytes)
        buf.upload(data)
        return buf

    @staticmethod
    def from_device(buf: Any, dtype: Any = np.uint8, shape: Any = None) -> np.ndarray:
        """The DeviceBuffer's bytes as a NumPy array of `dtype` (and `shape`)."""
        out = np.empty(buf.nbytes // np.dtype(dtype).itemsize, dtype)
        buf.download(out)
        return out.reshape(shape) if shape is not None else out

    # ---- point to point
    def isend(self, buf: Any, peer: int, tag: int = 0) -> int:
        return self._impl.isend(buf, int(peer), int(tag))

    def irecv(self, buf: Any, peer: int, tag: int = 0) -> int:
        return self._impl.irecv(buf, int(peer), int(tag))

    def test(self, request: int) -> bool:
        return self._impl.test(request)

    def wait(self, request: int, timeout: float | None = None) -> None:
        """Until the request completes; CommTimeoutError naming it after `timeout` seconds (None:
        SHARDWISE_COMM_TIMEOUT or DEFAULT_TIMEOUT; < 0: no limit)."""
        try:
            self._impl.wait(request, _timeout(timeout))
        except TimeoutError as exc:
            raise CommTimeoutError(str(exc)) from None

    # ---- collectives
    def allreduce_sum(self, buf: Any, timeout: float | None = None) -> Any:
        """In place: the float32 sum of the DeviceBuffer over the ranks (ncclAllReduce)."""
        try:
            self._impl.allreduce_f32(buf, _timeout(timeout))
        except TimeoutError as exc:
            raise CommTimeoutError(str(exc)) from None
        return buf

    def allgather(self, buf: Any, timeout: float | None = None) -> Any:
        """A new DeviceBuffer of size * buf.nbytes: every rank's `buf`, in rank order (ncclAllGather)."""
        out = self.empty(buf.nbytes * self.size)
        try:
            self._impl.allgather(buf, out, _timeout(timeout))
        except TimeoutError as exc:
            raise CommTimeoutError(str(exc)) from None
        return out

    # ---- bytes and the end
    def counters(self) -> dict[str, list[int]]:
        sent, received = self._impl.counters()
        return {"sent": sent, "received": received}

    def reset_counters(self) -> None:
        self._impl.reset_counters()

    def abort(self, code: int = 1, why: str = "aborted") -> None:
        """ncclCommAbort, then the bootstrap's abort (MPI_Abort: every rank)."""
        self._impl.abort(int(code), str(why))

    def close(self) -> int:
        """Free the communicator (ncclCommAbort where requests are left: their count is returned)."""
        return self._impl.close()

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def _capsule(self) -> Any:
        """The sw_comm_ext (csrc/exec/comm.h): the table "nccl" and this communicator."""
        return self._impl._capsule()


def nccl_comm(comm: Comm | None, device: int | None = None, timeout: float | None = None) -> NcclComm:
    """An NCCL communicator over `comm`'s ranks (every rank calls it together), on GPU `device`
    (default: comm.local_rank % the GPUs this process sees).  `comm`: the MPI communicator of
    :func:`shardwise.distributed.init`, which carries rank 0's NCCL id to the others, or None for
    a one-rank communicator without MPI.  NCCLUnavailableError (a BackendUnavailableError) where the
    CUDA backend, its NCCL or a GPU is missing (with several ranks, on every rank where any rank
    lacks its GPU: the bootstrap tells them all); MPIUnavailableError for a closed `comm`;
    CommTimeoutError where a rank does not join within `timeout` seconds."""
    module = _load()
    if comm is not None and comm.closed:
        raise MPIUnavailableError("the MPI communicator was closed: it cannot bootstrap NCCL")
    try:
        ngpus, why = len(cuda.gpus()), ""
    except BackendUnavailableError as exc:
        ngpus, why = 0, str(exc)
    alone = comm is None or comm.size == 1
    # with several ranks, a rank without a GPU (or given a GPU it lacks) must still join the
    # bootstrap, which tells every rank at once; raising here would leave the others waiting
    if alone and why:
        raise NCCLUnavailableError(f"NCCL needs a GPU: {why}")
    if device is None:
        device = (comm.local_rank if comm is not None else 0) % ngpus if ngpus else 0
    if alone and not 0 <= int(device) < ngpus:
        raise ValueError(f"GPU {device} does not exist: this process sees {ngpus} GPU(s)")
    capsule = comm._capsule() if comm is not None else None
    try:
        impl = module.NcclComm(capsule, int(device), _timeout(timeout))
    except TimeoutError as exc:
        raise CommTimeoutError(str(exc)) from None
    except RuntimeError as exc:
        raise NCCLUnavailableError(f"NCCL cannot start: {exc}") from None
    return NcclComm(impl, module, comm)
