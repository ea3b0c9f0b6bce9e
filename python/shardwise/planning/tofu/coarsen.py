"""Coarsening the graph for Tofu's search (seed 004 section 4.2.1).

Our graph holds forward ops only; each op stands for its forward and backward
computation and each tensor for itself and its gradient (the communication model
charges both passes), so grouping forward with backward is built in.  What is left:

* *timesteps*: ops built at the same position of every ``g.timestep(cell)`` block (same
  ``timestep`` attribute and the same description) become one node, one strategy;
* *element-wise chains*: an element-wise op whose first input comes from another
  element-wise op that has no other reader joins that op's node (their tensors would
  be partitioned alike anyway).

A node's members share one state (how the op is cut and how its output is cut).
"""
from __future__ import annotations

from dataclasses import dataclass

from shardwise.graph import Graph, Op
from shardwise.ops.desc import DATA


@dataclass
class Coarse:
    """The coarsened graph: ``nodes[n]`` lists member op indices (topological order),
    ``node_of[op]`` is the node holding an op."""

    nodes: list[list[int]]
    node_of: list[int]

    def __len__(self) -> int:
        return len(self.nodes)


def is_elementwise(op: Op) -> bool:
    """No reductions, no weights, every input read at the output's own index, same shape."""
    d = op.desc
    if op.kind == "input" or d.nvars != d.out_rank or not d.inputs:
        return False
    for inp in d.inputs:
        if inp.role != DATA or inp.shape != d.out_shape or inp.window is not None:
            return False
        for axis, e in enumerate(inp.exprs):
            if e.offset or not e.affine or [c for c in e.coefs] != [int(v == axis) for v in range(d.nvars)]:
                return False
    return True


def coarsen(graph: Graph, merge_timesteps: bool = True, merge_elementwise: bool = True) -> Coarse:
    """Group the ops of ``graph`` into nodes that share one partition strategy."""
    parent = list(range(len(graph.ops)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    if merge_timesteps:
        first: dict[tuple, int] = {}
        for op in graph.ops:
            key = op.attrs.get("timestep")
            if key is not None:
                union(first.setdefault((key, op.kind, op.desc), op.index), op.index)
    if merge_elementwise:
        readers = [0] * len(graph.ops)
        for op in graph.ops:
            for src in op.inputs:
                readers[src] += 1
        for op in graph.ops:
            if not is_elementwise(op) or "timestep" in op.attrs:
                continue
            src = graph.ops[op.inputs[0]]
            if is_elementwise(src) and readers[src.index] == 1 and "timestep" not in src.attrs:
                union(src.index, op.index)
    groups: dict[int, list[int]] = {}
    for op in graph.ops:
        groups.setdefault(find(op.index), []).append(op.index)
    nodes = [groups[r] for r in sorted(groups)]
    node_of = [0] * len(graph.ops)
    for n, members in enumerate(nodes):
        for m in members:
            node_of[m] = n
    return Coarse(nodes, node_of)
