"""The configuration spaces of the staged search of large machines: every partition enumerated
once on the first devices (:class:`Configs`), and the same partitions on every aligned block
(:func:`full_space`).  Shared by the staged search (search_scale) and its memory-constrained
stages (search_scale_memory).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from shardwise import _core

# a configuration is dropped when its min-marginal exceeds the plan's cost by more than
# this (relative): marginals and costs are summed in different orders
PRUNE_SLACK = 1e-9
# full aligned-block search of the survivors when the proof fails, up to this many configurations
FULL_SPACE_LIMIT = 60_000


class Configs:
    """The configurations of every op of a problem: degrees, devices (-1 padded), reductions and
    worker counts.

    The devices are read from the problem they were enumerated in only when asked for
    (:meth:`devices`): on 1,024 devices the first-block enumeration holds 10^5 configurations of
    up to 1,024 workers, 0.4 GB as one array per op, of which the search needs the few it keeps."""

    def __init__(self, deg: list[np.ndarray], dev: list[np.ndarray] | None, red: list[np.ndarray],
                 workers: list[np.ndarray], source: Any = None, rows: list[np.ndarray] | None = None):
        self.deg, self.red, self.workers = deg, red, workers
        self._dev = dev                  # per op, (n, width) devices; None: read from `source`
        self._source, self._rows = source, rows   # the problem, and per op the rows of its enumeration

    @classmethod
    def of(cls, problem: Any, nops: int) -> "Configs":
        """Every configuration of the problem's enumeration (its devices left in the problem)."""
        workers = [problem.workers(i) for i in range(nops)]
        deg = [problem.degrees(i) for i in range(nops)]
        return cls(deg, None, [problem.reductions(i) for i in range(nops)], workers, problem,
                   [np.arange(len(w)) for w in workers])

    def devices(self, i: int, which: np.ndarray | None = None) -> np.ndarray:
        """Op i's devices (rows ``which`` of its configurations, or all), -1 padded to the most
        workers among them."""
        if self._dev is not None:
            dev = self._dev[i] if which is None else self._dev[i][which]
            return dev[:, :max(1, int((dev >= 0).sum(axis=1).max(initial=0)))]
        rows = self._rows[i] if which is None else self._rows[i][which]
        return self._source.configs(i, rows)[1]

    def subset(self, keep: Sequence[np.ndarray]) -> "Configs":
        dev = None if self._dev is None else [v[k] for v, k in zip(self._dev, keep)]
        rows = None if self._rows is None else [r[k] for r, k in zip(self._rows, keep)]
        return Configs([d[k] for d, k in zip(self.deg, keep)], dev, [r[k] for r, k in zip(self.red, keep)],
                       [w[k] for w, k in zip(self.workers, keep)], self._source, rows)


def set_configs(problem: Any, configs: Configs) -> None:
    """Make ``configs`` the problem's enumeration: rows of the problem they were enumerated in,
    copied from it in C (no (n, workers) devices array: 10^5 configurations of up to 1,024 workers
    on a large machine), or else their degrees (padded to MAX_RANK), devices and reductions."""
    if configs._dev is None:
        for i, rows in enumerate(configs._rows):
            problem.copy_configs(i, configs._source, rows)
        return
    for i, (deg, red) in enumerate(zip(configs.deg, configs.red)):
        padded = np.ones((len(deg), _core.MAX_RANK), dtype=np.int32)
        padded[:, : deg.shape[1]] = deg
        problem.set_configs(i, padded, np.ascontiguousarray(configs.devices(i)), np.ascontiguousarray(red))


def full_space(canonical: Configs, keep: Sequence[np.ndarray], ndev: int) -> Configs | None:
    """The partitions `keep` on every aligned block of their size, or None above FULL_SPACE_LIMIT."""
    if sum(int((ndev // canonical.workers[i][np.asarray(k, np.int64)]).sum()) for i, k in enumerate(keep)) > FULL_SPACE_LIMIT:
        return None
    rows = [[(c, j) for c in k for j in range(ndev // int(canonical.workers[i][c]))] for i, k in enumerate(keep)]
    deg, dev, red, workers = [], [], [], []
    for i, r in enumerate(rows):
        width = max(1, int(canonical.workers[i].max()))
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
