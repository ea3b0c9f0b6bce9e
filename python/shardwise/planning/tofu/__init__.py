"""Tofu's partitioning search (seed 004 section 4) and the baselines of its section 6.3.

    res = sw.tofu.partition(g, 8)                      # recursive CriticalDP, reduction splits on
    res.bytes_moved, res.memory_per_worker             # per iteration, per worker
    res = sw.tofu.partition(g, 8, algorithm="allrow_greedy")   # or "spartan", "exhaustive"
    plan = sw.search(g, d, algorithm="tofu")           # a Plan over all of d's devices

``workers`` is factorized into primes ``p_1 <= p_2 <= ...`` (6 = 2 x 3).  Level ``i``
splits every tensor and every op among ``p_i`` groups inside each group of the level
before (recursive partitioning, section 4.4); the graph is coarsened once
(:mod:`shardwise.planning.tofu.coarsen`), each level's costs come from
:mod:`shardwise.planning.tofu.model` and are minimized by the chosen solver
(:mod:`shardwise.planning.tofu.solve`) with the earlier levels fixed.  The objective of a level
is the number of elements each of its groups fetches from outside itself, summed over
groups; at the last level that is the traffic among the ``workers`` workers, reported
as :attr:`TofuResult.bytes_moved`.  Memory is balanced by construction: every tensor is
cut into ``workers`` equal slices (a tensor none of whose dimensions divides is kept
whole in its group and listed in :attr:`TofuResult.replicated`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from math import prod
from typing import Any

from shardwise.errors import ConfigError
from shardwise.graph import Graph
from shardwise.ops.box import volume
from shardwise.ops.desc import DATA, WEIGHT
from shardwise.planning.tofu.coarsen import coarsen
from shardwise.planning.tofu.level import LevelProblem, Partitions, apply_level, brute_force, build_level
from shardwise.planning.tofu.model import REPLICATE, CommModel, Parts, level_groups, nested_box
from shardwise.planning.tofu.solve import allrow_greedy, critical_dp, improve, spartan_greedy

ALGORITHMS = ("criticaldp", "allrow_greedy", "spartan", "exhaustive")
BYTES_PER_ELEMENT = 4


def prime_factors(n: int) -> list[int]:
    """Prime factors of ``n`` in increasing order (``[]`` for 1)."""
    out, f = [], 2
    while f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    if n > 1:
        out.append(n)
    return out


@dataclass
class TofuResult:
    """A partition of ``graph`` among ``workers`` and what it costs per training iteration."""

    graph: Graph
    workers: int
    levels: list[int]                          # groups per recursion level (prime factors)
    algorithm: str
    reductions: bool                           # were reduction (partition-n-reduce) cuts allowed?
    op_parts: dict[str, Parts]                 # op -> ((iteration variable, parts), ...) per level
    tensor_parts: dict[str, Parts]             # op output -> ((dimension, parts), ...) per level
    weight_parts: dict[tuple[str, int], Parts]  # (op, input slot) -> cuts of that weight
    bytes_moved: float                         # among all workers, forward + backward
    level_bytes: list[float]                   # objective of each level after it was solved
    memory_per_worker: list[float]             # bytes of tensor slices each worker holds
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def reduction_splits(self) -> list[str]:
        """Ops that cut a reduction variable at some level (partial outputs, then a sum)."""
        out = []
        for op in self.graph.ops:
            if any(v >= op.desc.out_rank for v, _ in self.op_parts[op.name]):
                out.append(op.name)
        return out

    @property
    def replicated(self) -> list[str]:
        """Ops, tensors or weights left whole in their group at some level (no dimension divided)."""
        names = [n for n, parts in self.op_parts.items() if any(v == REPLICATE for v, _ in parts)]
        names += [f"{n} (tensor)" for n, parts in self.tensor_parts.items() if any(d == REPLICATE for d, _ in parts)]
        names += [f"{n} (weight {slot})" for (n, slot), parts in self.weight_parts.items()
                  if any(d == REPLICATE for d, _ in parts)]
        return names

    def degrees(self, op_name: str) -> tuple[int, ...]:
        """Total cut of each iteration variable of the op (output dimensions, then reductions)."""
        op = self.graph[op_name]
        deg = [1] * op.desc.nvars
        for v, p in self.op_parts[op_name]:
            if v != REPLICATE:
                deg[v] *= p
        return tuple(deg)

    def summary(self, limit: int = 40) -> str:
        """Totals and the cut of the first ``limit`` ops."""
        mem = max(self.memory_per_worker) if self.memory_per_worker else 0.0
        lines = [f"Tofu ({self.algorithm}) for {self.graph.name!r} on {self.workers} workers "
                 f"(levels {self.levels}, reduction cuts {'on' if self.reductions else 'off'}): "
                 f"{self.bytes_moved / 1e9:.3f} GB moved per iteration, {mem / 1e9:.3f} GB per worker, "
                 f"{len(self.reduction_splits)} reduction cuts, searched in {self.seconds:.2f} s"]
        for op in self.graph.ops[:limit]:
            lines.append(f"  {op.name:<28} {op.kind:<12} iteration cuts {self.degrees(op.name)}")
        if len(self.graph.ops) > limit:
            lines.append(f"  ... {len(self.graph.ops) - limit} more ops")
        return "\n".join(lines)

    def to_plan(self, devices, options=None):
        """The partition as a :class:`~shardwise.plan.Plan` on ``devices`` (one device per
        worker): each op's degrees per output dimension and, for reduction cuts, its split
        reduction (partition-n-reduce: ``OpConfig.reduction``, the product of the cuts of that
        variable); worker ``(j_1, ..., j_m)`` (level order, first most significant) runs on
        device ``sum j_i * p_(i+1) * ... * p_m``.  An op whose levels cut two different
        reduction variables cannot be held by a Plan (ConfigError)."""
        from shardwise.plan import OpConfig, Plan
        from shardwise.planning.problem import dim_names

        if len(devices) != self.workers:
            raise ConfigError(f"the partition is for {self.workers} workers, the device graph has "
                              f"{len(devices)} devices")
        configs = {op.name: _op_config(op, self.op_parts[op.name], self.levels, OpConfig, dim_names)
                   for op in self.graph.ops}
        stats = {"algorithm": "tofu", "tofu_solver": self.algorithm, "tofu_bytes_moved": self.bytes_moved,
                 "tofu_levels": self.levels, "total_seconds": self.seconds,
                 "tofu_memory_per_worker": max(self.memory_per_worker, default=0.0)}
        return Plan(self.graph, devices, configs, options, name="tofu", search_stats=stats)


def _op_config(op, parts: Parts, levels: list[int], OpConfig, dim_names):
    """The OpConfig of one op: degrees per output dimension, the split reduction if any, and
    the device of each worker (output blocks row-major, reduction parts fastest)."""
    rank = op.desc.out_rank
    degrees = [1] * rank
    rvars = {v for v, _ in parts if v >= rank}
    if len(rvars) > 1:
        names = sorted(op.desc.reductions[v - rank] for v in rvars)
        raise ConfigError(f"{op.name!r} cuts reductions {names} at different levels; a Plan splits one")
    rdeg = 1
    for v, p in parts:
        if 0 <= v < rank:
            degrees[v] *= p
        elif v >= rank:
            rdeg *= p
    devices = [0] * (prod(degrees) * rdeg)
    for w, group in enumerate(level_groups(levels)):
        if any(j and v == REPLICATE for (v, _), j in zip(parts, group)):
            continue                   # a duplicate of the worker with j = 0 at this level
        coord, part = [0] * rank, 0
        for (v, p), j in zip(parts, group):
            if 0 <= v < rank:
                coord[v] = coord[v] * p + j
            elif v >= rank:
                part = part * p + j
        cell = 0
        for v in range(rank):
            cell = cell * degrees[v] + coord[v]
        devices[cell * rdeg + part] = w
    reduction = (op.desc.reductions[rvars.pop() - rank], rdeg) if rvars else None
    return OpConfig(dim_names(rank), tuple(degrees), tuple(devices), reduction)


def _check(graph: Graph, workers: int, algorithm: str, reductions: bool) -> None:
    if not isinstance(graph, Graph):
        raise ConfigError(f"tofu partitioning needs a Graph, got {type(graph).__name__}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an int >= 1, got {workers!r}")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown tofu algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if not isinstance(reductions, bool):
        raise ConfigError(f"reductions must be True or False, got {reductions!r}")
    if not graph.ops:
        raise ConfigError(f"graph {graph.name!r} has no ops")


def _solve(algorithm: str, graph: Graph, coarse, problem: LevelProblem, refine: bool) -> list[int]:
    if algorithm == "allrow_greedy":
        return allrow_greedy(problem)
    if algorithm == "spartan":
        return spartan_greedy(graph, coarse, problem)
    if algorithm == "exhaustive":
        return brute_force(problem)
    assignment, paths = critical_dp(graph, coarse, problem)
    if not refine:
        return assignment
    starts = [assignment, allrow_greedy(problem), spartan_greedy(graph, coarse, problem)]
    return min((improve(problem, paths, s) for s in starts), key=problem.total)


def partition(graph: Graph, workers: int, algorithm: str = "criticaldp", *, reductions: bool = True,
              coarsening: bool = True, refine: bool = True) -> TofuResult:
    """Partition ``graph`` among ``workers`` by Tofu's recursive search.

    ``algorithm``: ``"criticaldp"`` (Tofu), ``"allrow_greedy"`` or ``"spartan"`` (the
    greedy baselines of the Tofu paper, section 6.3), ``"exhaustive"`` (every level solved by
    brute force: tiny graphs, for tests).  ``reductions``: allow partition-n-reduce cuts
    of reduction variables.  ``coarsening``: group timesteps and element-wise chains
    (section 4.2.1); without it every op decides alone.  ``refine`` (criticaldp only):
    after the single CriticalDP pass of the paper, improve the level by re-solving each
    critical path with all other nodes fixed, starting from the CriticalDP assignment and
    from both greedy ones, and keep the cheapest; ``refine=False`` is the paper's one pass.
    On unrolled RNNs the single pass can end above AllRow-Greedy: it fixes the first paths
    before it sees the recurrent edges of the others.
    """
    _check(graph, workers, algorithm, reductions)
    if not isinstance(refine, bool):
        raise ConfigError(f"refine must be True or False, got {refine!r}")
    start = time.perf_counter()
    coarse = coarsen(graph, merge_timesteps=coarsening, merge_elementwise=coarsening)
    model = CommModel(graph)
    parts = Partitions.empty(graph)
    levels = prime_factors(workers)
    level_bytes = []
    for p in levels:
        problem = build_level(graph, coarse, model, parts, p, reductions,
                              weights="first" if algorithm == "allrow_greedy" else "best")
        assignment = _solve(algorithm, graph, coarse, problem, refine)
        level_bytes.append(problem.total(assignment) * BYTES_PER_ELEMENT)
        parts = apply_level(graph, coarse, problem, assignment, parts)
    moved = communication(graph, parts, model) * BYTES_PER_ELEMENT
    names = [op.name for op in graph.ops]
    return TofuResult(
        graph, workers, levels, algorithm, reductions,
        op_parts=dict(zip(names, parts.ops)), tensor_parts=dict(zip(names, parts.tensors)),
        weight_parts={(graph.ops[o].name, s): v for (o, s), v in parts.weights.items()},
        bytes_moved=moved, level_bytes=level_bytes,
        memory_per_worker=memory_per_worker(graph, parts, levels),
        seconds=time.perf_counter() - start,
        stats={"coarse_nodes": len(coarse), "ops": len(graph.ops), "refine": refine})


def communication(graph: Graph, parts: Partitions, model: CommModel | None = None) -> int:
    """Elements moved among the workers of ``parts``' last level, recomputed op by op
    (the search's objective at its last level must equal this)."""
    model = model or CommModel(graph)
    total = 0
    for op in graph.ops:
        op_parts = parts.ops[op.index]
        total += model.output_cost(op, op_parts, parts.tensors[op.index])
        data = iter(op.inputs)
        for slot, inp in enumerate(op.desc.inputs):
            held = parts.tensors[next(data)] if inp.role == DATA else parts.weights[(op.index, slot)]
            total += model.input_fetch(op, slot, op_parts, held)
    return total


def memory_per_worker(graph: Graph, parts: Partitions, levels: list[int]) -> list[float]:
    """Bytes of tensor slices each worker holds: every op output and its gradient (graph
    inputs without one), every weight with its gradient and optimizer state (x3, as seed
    004 Table 1 counts), statistics once; fetched regions are transient and not counted."""
    out = []
    for group in level_groups(levels):
        elements = 0
        for op in graph.ops:
            own = volume(nested_box(op.shape, parts.tensors[op.index], group))
            elements += own * (1 if op.kind == "input" else 2)
            for slot, inp in enumerate(op.desc.inputs):
                if inp.role != DATA:
                    w = volume(nested_box(inp.shape, parts.weights[(op.index, slot)], group))
                    elements += w * (3 if inp.role == WEIGHT else 1)
        out.append(float(elements * BYTES_PER_ELEMENT))
    return out
