"""Processes of one training job: the MPI communicator (docs/distributed.md).

    mpiexec -n 4 python train.py

    import shardwise as sw
    comm = sw.distributed.init()       # MPI_Init_thread through shardwise._mpi, or adopts mpi4py's MPI
    comm.rank, comm.size, comm.local_rank, comm.library
    sw.distributed.check_world(4)      # refuses N one-rank jobs (a launcher of another MPI)
    comm.allgather_bytes(b"fingerprint")           # [rank 0's, rank 1's, ...]
    comm.send_bytes(np.arange(8, dtype=np.float32), peer=1, tag=3)
    x = comm.recv_bytes(np.empty(8, np.float32), peer=0, tag=3, timeout=30)
    comm.counters()                    # {"sent": [bytes per peer], "received": [...]}

Training across processes: ``sw.Trainer(g, plan, comm=comm)`` runs this rank's devices of the
plan (contiguous blocks: :func:`rank_of_device`), the copies between ranks split into sends and
receives over this communicator (``sw.lower(plan, ranks=...)``), bitwise the numbers of one
process; :func:`planned_bytes` says what a step sends.  docs/distributed.md tells the whole story.

The communicator is the extension module ``shardwise._mpi``, built only where the build found
MPI (`SHARDWISE_MPI=1 pip install ".[mpi]"` puts the mpich wheel in the environment and builds
against it); `import shardwise` never loads it, and nothing here starts MPI before `init()`.
"""
from __future__ import annotations

from typing import Any

from shardwise.distributed.link import measure_link
from shardwise.distributed.nccl import NCCLUnavailableError, NcclComm, nccl_built, nccl_comm, nccl_info
from shardwise.distributed.ranks import devices_of_rank, rank_of_device
from shardwise.distributed.comm import (DEFAULT_TIMEOUT, INSTALL_HINT, LAUNCHER_SIZE_VARS, THREAD_LEVELS, Comm,
                                        CommTimeoutError, MPIUnavailableError, WorldMismatchError, _timeout, built,
                                        check_world, info, init, launcher_size, library_name, mpiexec)

__all__ = ["MPIUnavailableError", "WorldMismatchError", "CommTimeoutError", "Comm", "init", "built", "info",
           "check_world", "launcher_size", "mpiexec", "DEFAULT_TIMEOUT", "planned_bytes", "rank_of_device",
           "devices_of_rank", "measure_link", "NCCLUnavailableError", "NcclComm", "nccl_built", "nccl_comm",
           "nccl_info"]


def planned_bytes(plan: Any, ranks: "int | list[int]", schedule: Any = None, swap: Any = None,
                  optimizer_state: int = 1) -> list[dict[str, int]]:
    """What the task graph of ``plan`` split over ``ranks`` (an int: contiguous blocks of devices;
    or one rank per device) sends between ranks per training step: ``[{"sent": n, "received": n}]``
    per rank, the bytes of its messages (float32 elements; batch norms' statistics as float64).
    A multi-process Trainer's :meth:`~shardwise.Trainer.comm_bytes` after a step equals its rank's
    entry; with every device its own rank, the sum of "sent" is the task graph's
    ``bytes_moved()``.  Nothing is started: this only lowers the plan."""
    from shardwise.iteration.lower import lower

    return lower(plan, optimizer_state=optimizer_state, schedule=schedule, swap=swap, ranks=ranks).rank_bytes()


