"""Solvers for one level of Tofu's search: chain DP, CriticalDP and two greedy baselines.

* :func:`chain_dp` — dynamic programming along a sequence of coarse nodes (seed 004
  section 4.1): the least cost of the first ``i`` nodes for each state of node ``i`` is
  the least, over the previous node's states, of that node's value plus the edges
  between the two.  Exact on a chain.
* :func:`critical_dp` — section 4.2.2: repeatedly take the path of the original graph
  carrying the most tensor elements through nodes not yet decided, solve it with
  :func:`chain_dp` (edges to decided nodes are folded into the unary costs; edges to
  undecided nodes off the path are ignored), fix it, and go on until every node is fixed.
* :func:`allrow_greedy` — section 6.3's AllRow-Greedy: every tensor cut along its first
  dimension, each op then picks its cheapest cut.
* :func:`spartan_greedy` — section 6.3's Spartan-style greedy: nodes in decreasing size
  of their largest tensor, each taking the state cheapest against the nodes already
  decided.
"""
from __future__ import annotations

from math import prod

import numpy as np

from shardwise.graph import Graph
from shardwise.ops.desc import DATA
from shardwise.planning.tofu.coarsen import Coarse
from shardwise.planning.tofu.level import LevelProblem


def chain_dp(problem: LevelProblem, path: list[int], fixed: dict[int, int]) -> list[int]:
    """Best states for the nodes of ``path`` given the states of the ``fixed`` nodes;
    returns one state index per path node.  Edges between consecutive path nodes are
    exact; when the last node also feeds the first (the recurrence of coalesced RNN
    timesteps) the cycle is closed exactly by trying every state of the first node;
    other edges between non-consecutive path nodes are not seen."""
    values = []
    for n in path:
        u = problem.unary[n].copy()
        for f in problem.neighbors[n]:
            if f in fixed:
                u += problem.between(n, f)[:, fixed[f]]
        values.append(u)
    edges = [problem.between(path[i - 1], path[i]) for i in range(1, len(path))]
    closing = None
    if len(path) > 2 and path[0] in problem.neighbors[path[-1]]:
        closing = problem.between(path[-1], path[0])          # (states of last, states of first)
    if closing is None:
        return _viterbi(values, edges)[0]
    best_cost, best = np.inf, []
    for s0 in range(len(values[0])):
        first = np.full_like(values[0], np.inf)
        first[s0] = values[0][s0]
        last = values[-1] + closing[:, s0]
        choice, cost = _viterbi([first, *values[1:-1], last], edges)
        if cost < best_cost:
            best_cost, best = cost, choice
    return best


def _viterbi(values: list[np.ndarray], edges: list[np.ndarray]) -> tuple[list[int], float]:
    """Least-cost states of a chain with unary ``values`` and consecutive ``edges``."""
    best = values[0]
    back = []
    for i in range(1, len(values)):
        total = best[:, None] + edges[i - 1]
        arg = np.argmin(total, axis=0)
        back.append(arg)
        best = total[arg, np.arange(total.shape[1])] + values[i]
    choice = [int(np.argmin(best))]
    cost = float(best[choice[0]])
    for arg in reversed(back):
        choice.append(int(arg[choice[-1]]))
    return choice[::-1], cost


def _tensor_elements(graph: Graph) -> list[int]:
    return [prod(op.shape) for op in graph.ops]


def critical_path(graph: Graph, coarse: Coarse, open_nodes: set[int]) -> list[int]:
    """The node sequence of the heaviest path (sum of the elements of the tensors on its
    edges) through ops whose node is still open; consecutive ops of one node count once
    and the path stops before a node it already visited (coalesced timesteps)."""
    size = _tensor_elements(graph)
    weight: dict[int, int] = {}
    prev: dict[int, int] = {}
    for op in graph.ops:                          # ops are in topological order
        if coarse.node_of[op.index] not in open_nodes:
            continue
        weight[op.index] = 0
        for src in op.inputs:
            if src in weight and weight[src] + size[src] > weight[op.index]:
                weight[op.index] = weight[src] + size[src]
                prev[op.index] = src
    end = max(weight, key=lambda o: (weight[o], size[o], -o))
    ops = [end]
    while ops[-1] in prev:
        ops.append(prev[ops[-1]])
    ops.reverse()
    path: list[int] = []
    for o in ops:
        n = coarse.node_of[o]
        if path and path[-1] == n:
            continue
        if n in path:
            break
        path.append(n)
    return path


def critical_dp(graph: Graph, coarse: Coarse, problem: LevelProblem) -> tuple[list[int], list[list[int]]]:
    """CriticalDP over all nodes (one pass, as seed 004): chain DP along successive
    critical paths, each path's edges to nodes not decided yet ignored.  Returns the
    assignment and the paths in the order they were solved."""
    fixed: dict[int, int] = {}
    open_nodes = set(range(len(coarse)))
    paths = []
    while open_nodes:
        path = critical_path(graph, coarse, open_nodes)
        paths.append(path)
        for n, s in zip(path, chain_dp(problem, path, fixed)):
            fixed[n] = s
            open_nodes.discard(n)
    return [fixed[n] for n in range(len(coarse))], paths


def improve(problem: LevelProblem, paths: list[list[int]], start: list[int], sweeps: int = 4) -> list[int]:
    """Local improvement (our addition to CriticalDP): each path is solved again with every
    other node fixed at its current state, and the new states are kept when the level's
    total cost drops; at most ``sweeps`` passes over the paths.  Never increases the cost."""
    current = list(start)
    cost = problem.total(current)
    for _ in range(sweeps):
        improved = False
        for path in paths:
            on_path = set(path)
            others = {n: s for n, s in enumerate(current) if n not in on_path}
            trial = list(current)
            for n, s in zip(path, chain_dp(problem, path, others)):
                trial[n] = s
            trial_cost = problem.total(trial)
            if trial_cost < cost:
                current, cost, improved = trial, trial_cost, True
        if not improved:
            break
    return current


def allrow_greedy(problem: LevelProblem) -> list[int]:
    """Tensors cut along their first cuttable dimension; then each node's cheapest cut of
    its ops, which is exact once every tensor is fixed (an edge's cost depends on the
    producer's tensor cut and the reader's op cut only)."""
    # tensor_choices lists dimensions in increasing order and states are (c, t) c-major,
    # so the first state's t is the node's first cuttable dimension
    rows = [[k for k, (_, t) in enumerate(states) if t == states[0][1]] for states in problem.states]
    incoming: dict[int, list[tuple[int, np.ndarray]]] = {}
    for (a, b), table in problem.pair.items():
        incoming.setdefault(b, []).append((a, table))
    choice = []
    for n, allowed in enumerate(rows):
        costs = []
        for k in allowed:
            cost = float(problem.unary[n][k])
            for a, table in incoming.get(n, []):
                cost += float(table[rows[a][0], k])  # producer rows differ only in c, not t
            costs.append(cost)
        choice.append(allowed[int(np.argmin(costs))])
    return choice


def spartan_greedy(graph: Graph, coarse: Coarse, problem: LevelProblem) -> list[int]:
    """Largest tensors first: nodes in decreasing size of their largest tensor (outputs
    and weights), each taking its cheapest state against the nodes already decided."""
    def largest(n: int) -> int:
        out = 0
        for m in coarse.nodes[n]:
            op = graph.ops[m]
            out = max([out, prod(op.shape)] + [prod(i.shape) for i in op.desc.inputs if i.role != DATA])
        return out

    order = sorted(range(len(coarse)), key=lambda n: (-largest(n), n))
    fixed: dict[int, int] = {}
    for n in order:
        cost = problem.unary[n].copy()
        for f in problem.neighbors[n]:
            if f in fixed:
                cost += problem.between(n, f)[:, fixed[f]]
        fixed[n] = int(np.argmin(cost))
    return [fixed[n] for n in range(len(coarse))]
