"""Measured compute costs that replace the roofline estimate of t_c.

A cost source is anything with ``compute_time(op, shard_shape, device)``
returning seconds (forward + backward) or None to keep the model's estimate.
:class:`ProfileTable` is the simple table form; a later issue measures one
on this machine's kernels (``sw.profile``).
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from shardwise.machine.devices import Device, DeviceGraph
from shardwise.errors import ConfigError
from shardwise.graph import Graph, Op


class ComputeCosts(Protocol):
    """Measured compute times: seconds (forward + backward) of one op shard, or None to keep the model."""

    def compute_time(self, op: Op, shard_shape: tuple[int, ...], device: Device) -> float | None: ...


class ProfileTable:
    """Compute times measured elsewhere, keyed by (op kind, shard output shape).

    ``ProfileTable({("conv2d", (32, 64, 56, 56)): 1.2e-3})``; shards not in the
    table keep the roofline estimate.
    """

    def __init__(self, entries: dict[tuple[str, tuple[int, ...]], float] | None = None) -> None:
        self.entries: dict[tuple[str, tuple[int, ...]], float] = {}
        for key, seconds in (entries or {}).items():
            self.add(key[0], key[1], seconds)

    def add(self, kind: str, shard_shape: Sequence[int], seconds: float) -> None:
        s = float(seconds)
        if not np.isfinite(s) or s < 0:
            raise ConfigError(f"profile time for {kind} {tuple(shard_shape)} must be finite and >= 0, got {seconds!r}")
        self.entries[(kind, tuple(int(x) for x in shard_shape))] = s

    def compute_time(self, op: Op, shard_shape: tuple[int, ...], device: Device) -> float | None:
        return self.entries.get((op.kind, shard_shape))

    def __len__(self) -> int:
        return len(self.entries)


def apply_profile(problem: Any, graph: Graph, devices: DeviceGraph, costs: ComputeCosts) -> int:
    """Replace modelled t_c by measured ones where the profile has them; returns how many."""
    replaced = 0
    for op in graph.ops:
        deg, dev = problem.configs(op.index)
        red = problem.reductions(op.index)
        tc, _, _ = problem.node_costs(op.index)
        changed = False
        for k in range(len(tc)):
            if red[k][1] > 1:
                continue  # partial-sum shards are not profiled: they keep the roofline
            shard = tuple(int(s) // int(g) for s, g in zip(op.shape, deg[k]))
            worst = None
            for d in dev[k]:
                if d < 0:
                    break
                t = costs.compute_time(op, shard, devices.devices[int(d)])
                if t is None:
                    worst = None
                    break
                worst = t if worst is None else max(worst, t)
            if worst is not None:
                tc[k] = worst
                changed = True
                replaced += 1
        if changed:
            problem.set_compute_times(op.index, tc)
    return replaced
