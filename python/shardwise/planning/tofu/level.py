"""One recursion level of Tofu's search as a problem over coarse nodes.

At a level with ``p`` groups, the state of a coarse node is a pair ``(c, t)``: the
iteration variable its ops cut (``c``) and the dimension its output tensors are cut
along (``t``).  The cost of the level (elements moved among its groups, all earlier
levels fixed) is

    sum_n unary[n][s_n] + sum_(a, b) pair[(a, b)][s_a, s_b]

where ``unary`` holds what depends on one node only (placing its own outputs, its
weights, edges between its own members) and ``pair[(a, b)]`` the edges from producers in
node ``a`` to readers in node ``b`` (rows: states of ``a``, columns: states of ``b``; the
entry depends on ``t`` of ``a`` and ``c`` of ``b`` only).  Weights belong to the op that
reads them, so each is cut along the dimension that is cheapest for the op's ``c``
(or, for the AllRow baseline, along its first dimension).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from shardwise.graph import Graph
from shardwise.ops.desc import DATA
from shardwise.planning.tofu.coarsen import Coarse
from shardwise.planning.tofu.model import CommModel, Parts, REPLICATE, op_choices, tensor_choices

State = tuple[int, int]   # (cut iteration variable c, cut output dimension t)


@dataclass
class Partitions:
    """The composite partitions chosen so far: per op (iteration space and output tensor)
    and per weight input ``(op index, slot)``."""

    ops: list[Parts]
    tensors: list[Parts]
    weights: dict[tuple[int, int], Parts]

    @classmethod
    def empty(cls, graph: Graph) -> "Partitions":
        weights = {(op.index, s): () for op in graph.ops for s, i in enumerate(op.desc.inputs) if i.role != DATA}
        return cls([()] * len(graph.ops), [()] * len(graph.ops), weights)


@dataclass
class LevelProblem:
    """Unary and pairwise element counts of one level (see the module docstring)."""

    p: int
    states: list[list[State]]
    unary: list[np.ndarray]
    pair: dict[tuple[int, int], np.ndarray]
    weight_choice: list[dict[tuple[int, int, int], int]]   # per node: (op, slot, c) -> weight dim
    neighbors: list[set[int]] = field(default_factory=list)

    def total(self, assignment: list[int]) -> float:
        """The level's cost of one state index per node."""
        cost = sum(float(self.unary[n][s]) for n, s in enumerate(assignment))
        for (a, b), table in self.pair.items():
            cost += float(table[assignment[a], assignment[b]])
        return cost

    def between(self, a: int, b: int) -> np.ndarray:
        """All edges between nodes a and b in both directions, rows a, columns b."""
        out = np.zeros((len(self.states[a]), len(self.states[b])))
        if (a, b) in self.pair:
            out += self.pair[(a, b)]
        if (b, a) in self.pair:
            out += self.pair[(b, a)].T
        return out


def build_level(graph: Graph, coarse: Coarse, model: CommModel, parts: Partitions, p: int,
                reductions: bool, weights: str = "best") -> LevelProblem:
    """The cost tables of the next level (``p`` groups) given the earlier ``parts``.
    ``weights``: ``"best"`` (each weight cut where cheapest) or ``"first"`` (dimension 0)."""
    states: list[list[State]] = []
    for members in coarse.nodes:
        rep = graph.ops[members[0]]
        cs = op_choices(rep, parts.ops[rep.index], p, reductions)
        ts = tensor_choices(rep.shape, parts.tensors[rep.index], p)
        states.append([(c, t) for c in cs for t in ts])
    unary = [np.zeros(len(s)) for s in states]
    weight_choice: list[dict[tuple[int, int, int], int]] = [{} for _ in states]
    pair: dict[tuple[int, int], np.ndarray] = {}
    for n, members in enumerate(coarse.nodes):
        for m in members:
            op = graph.ops[m]
            _add_own_costs(op, n, model, parts, p, states[n], unary[n], weight_choice[n], weights)
            data_slots = [s for s, i in enumerate(op.desc.inputs) if i.role == DATA]
            for slot, src in zip(data_slots, op.inputs):
                a = coarse.node_of[src]
                table = _edge_table(op, slot, src, model, parts, p, states[a], states[n])
                if a == n:   # both ends share the state: only the diagonal is possible
                    unary[n] += np.diag(table)
                else:
                    pair[(a, n)] = pair.get((a, n), 0) + table
    neighbors: list[set[int]] = [set() for _ in states]
    for a, b in pair:
        neighbors[a].add(b)
        neighbors[b].add(a)
    return LevelProblem(p, states, unary, pair, weight_choice, neighbors)


def _add_own_costs(op, n: int, model: CommModel, parts: Partitions, p: int, states: list[State],
                   unary: np.ndarray, weight_choice: dict, weights: str) -> None:
    """Output placement and weight fetches of ``op`` for every state of its node."""
    cache: dict[int, float] = {}
    for k, (c, t) in enumerate(states):
        op_parts = parts.ops[op.index] + ((c, p),)
        unary[k] += model.output_cost(op, op_parts, parts.tensors[op.index] + ((t, p),))
        if c not in cache:
            cache[c] = 0.0
            for slot, inp in enumerate(op.desc.inputs):
                if inp.role == DATA:
                    continue
                prev = parts.weights[(op.index, slot)]
                dims = tensor_choices(inp.shape, prev, p)
                if weights == "first":
                    dims = dims[:1]
                costs = [model.input_fetch(op, slot, op_parts, prev + ((d, p),)) for d in dims]
                best = int(np.argmin(costs))
                weight_choice[(op.index, slot, c)] = dims[best]
                cache[c] += costs[best]
        unary[k] += cache[c]


def _edge_table(op, slot: int, src: int, model: CommModel, parts: Partitions, p: int,
                src_states: list[State], dst_states: list[State]) -> np.ndarray:
    """Elements moved on one edge for every (producer state, reader state)."""
    small: dict[tuple[int, int], int] = {}
    table = np.zeros((len(src_states), len(dst_states)))
    for i, (_, t) in enumerate(src_states):
        for j, (c, _) in enumerate(dst_states):
            key = (t, c)
            if key not in small:
                small[key] = model.input_fetch(op, slot, parts.ops[op.index] + ((c, p),),
                                               parts.tensors[src] + ((t, p),))
            table[i, j] = small[key]
    return table


def apply_level(graph: Graph, coarse: Coarse, problem: LevelProblem, assignment: list[int],
                parts: Partitions) -> Partitions:
    """The partitions after fixing this level's states."""
    p = problem.p
    ops, tensors, weights = list(parts.ops), list(parts.tensors), dict(parts.weights)
    for n, members in enumerate(coarse.nodes):
        c, t = problem.states[n][assignment[n]]
        for m in members:
            ops[m] = ops[m] + ((c, p),)
            tensors[m] = tensors[m] + ((t, p),)
            for slot, inp in enumerate(graph.ops[m].desc.inputs):
                if inp.role != DATA:
                    weights[(m, slot)] = weights[(m, slot)] + ((problem.weight_choice[n][(m, slot, c)], p),)
    return Partitions(ops, tensors, weights)


def brute_force(problem: LevelProblem, limit: float = 2e6) -> list[int]:
    """The assignment of least cost by trying all of them (tests and tiny graphs)."""
    sizes = [len(s) for s in problem.states]
    count = float(np.prod([float(x) for x in sizes]))
    if count > limit:
        raise ValueError(f"brute force over {count:.3g} assignments exceeds the limit of {limit:.3g}")
    best, best_cost = None, np.inf
    for assignment in itertools.product(*(range(s) for s in sizes)):
        cost = problem.total(list(assignment))
        if cost < best_cost:
            best, best_cost = list(assignment), cost
    return best if best is not None else []


__all__ = ["Partitions", "LevelProblem", "build_level", "apply_level", "brute_force", "REPLICATE"]
