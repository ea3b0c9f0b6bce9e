"""The configuration spaces of the staged search of large machines: every partition enumerated
once on the first devices (:class:`Configs`), and the same partitions on every aligned block
(:func:`full_space`).  Shared by the staged search (search_scale) and its memory-constrained
stages (search_scale_memory).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from shardwise import _core

# a configuration is dropped when its min-marginal exceeds the plan's cost by more than
# this (relative): marginals and costs are summed in different orders
PRUNE_SLACK = 1e-9
# full aligned-block search of the survivors when the proof fails, up to this many configurations
FULL_SPACE_LIMIT = 60_000


@dataclass
class Configs:
    """The configurations of every op of a problem: degrees, devices (-1 padded), reductions."""

    deg: list[np.ndarray]
    dev: list[np.ndarray]
    red: list[np.ndarray]
    workers: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of(cls, problem: Any, nops: int) -> "Configs":
        deg, dev, red = [], [], []
        for i in range(nops):
            d, v = problem.configs(i)
            deg.append(d)
            dev.append(v)
            red.append(problem.reductions(i))
        return cls(deg, dev, red, [(v >= 0).sum(axis=1) for v in dev])

    def subset(self, keep: Sequence[np.ndarray]) -> "Configs":
        return Configs([d[k] for d, k in zip(self.deg, keep)], [v[k] for v, k in zip(self.dev, keep)],
                       [r[k] for r, k in zip(self.red, keep)], [w[k] for w, k in zip(self.workers, keep)])


def set_configs(problem: Any, configs: Configs) -> None:
    """Make ``configs`` the problem's enumeration (degrees padded to MAX_RANK, devices to the widest)."""
    for i, (deg, dev, red) in enumerate(zip(configs.deg, configs.dev, configs.red)):
        padded = np.ones((len(deg), _core.MAX_RANK), dtype=np.int32)
        padded[:, : deg.shape[1]] = deg
        maxk = max(1, int((dev >= 0).sum(axis=1).max()))
        problem.set_configs(i, padded, np.ascontiguousarray(dev[:, :maxk]), np.ascontiguousarray(red))


def full_space(canonical: Configs, keep: Sequence[np.ndarray], ndev: int) -> Configs | None:
    """The partitions `keep` on every aligned block of their size, or None above FULL_SPACE_LIMIT."""
    if sum(int((ndev // canonical.workers[i][np.asarray(k, np.int64)]).sum()) for i, k in enumerate(keep)) > FULL_SPACE_LIMIT:
        return None
    rows = [[(c, j) for c in k for j in range(ndev // int(canonical.workers[i][c]))] for i, k in enumerate(keep)]
    deg, dev, red, workers = [], [], [], []
    for i, r in enumerate(rows):
        width = canonical.dev[i].shape[1]
        block = np.full((len(r), width), -1, dtype=np.int32)
        for q, (c, j) in enumerate(r):
            k = int(canonical.workers[i][c])
            block[q, :k] = np.arange(j * k, (j + 1) * k)
        idx = np.array([c for c, _ in r])
        deg.append(canonical.deg[i][idx])
        red.append(canonical.red[i][idx])
        workers.append(canonical.workers[i][idx])
        dev.append(block)
    return Configs(deg, dev, red, workers)
