"""Which rank runs which device: a plan's devices in contiguous blocks over the job's ranks.

    rank_of_device(4, 2)     # [0, 0, 1, 1]: devices 0-1 on rank 0, 2-3 on rank 1
    rank_of_device(3, 2)     # [0, 0, 1]
    devices_of_rank(4, 2, 1) # [2, 3]

Contiguous blocks keep the devices of one rank together, as a cluster's devices are numbered
node by node (``DeviceGraph.cluster``): the fast links of a node stay inside one process.
"""
from __future__ import annotations

from shardwise.errors import ConfigError

__all__ = ["rank_of_device", "devices_of_rank"]


def rank_of_device(ndev: int, ranks: int) -> list[int]:
    """The rank of each of ``ndev`` devices over ``ranks`` ranks: device d on rank
    d * ranks // ndev, so every rank gets ndev // ranks or one more devices, in order.
    ConfigError when a rank would get none (more ranks than devices)."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ConfigError(f"ranks must be a positive int, got {ranks!r}")
    if ndev < ranks:
        raise ConfigError(f"{ranks} ranks for a plan on {ndev} devices: every rank needs at least one device "
                          f"(launch at most {ndev} ranks)")
    return [d * ranks // ndev for d in range(ndev)]


def devices_of_rank(ndev: int, ranks: int, rank: int) -> list[int]:
    """The devices rank ``rank`` runs (a contiguous block of rank_of_device)."""
    if not 0 <= rank < ranks:
        raise ConfigError(f"rank {rank} is outside 0 .. {ranks - 1}")
    return [d for d, r in enumerate(rank_of_device(ndev, ranks)) if r == rank]
