"""Random problems for the search tests: cost-table DAGs, small real graphs, device graphs.

Two kinds of random input feed ``tests/planning/test_search.py``:

* plain cost tables for ``shardwise._core.search_tables`` (``table_problems``):
  node cost vectors and ``(src, dst, table)`` edges over DAG shapes that
  networks have (chains, diamonds, residual skips, inception-like fork/concat
  blocks, several sources and sinks, parallel edges, isolated nodes) and fully
  random DAGs;
* small shardwise graphs built with the public builder (``graph_recipes`` and
  :func:`build_graph`) and device graphs (:func:`device_graph_cases`,
  ``random_device_graphs``).

Everything is driven by hypothesis so failures shrink to a small example.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from hypothesis import strategies as st

import shardwise as sw
from shardwise.planning.problem import dim_names


def examples(n: int) -> int:
    """Example count for a hypothesis test: ``n``, or 10x under HYPOTHESIS_PROFILE=thorough."""
    return n * 10 if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else n


# --------------------------------------------------------------------------- Eq. 1 in Python


def eq1_cost(node_costs: Sequence[np.ndarray], edges: Sequence[tuple[int, int, np.ndarray]],
             choice: Sequence[int]) -> float:
    """Eq. 1 of one strategy over plain tables, summed in Python."""
    total = 0.0
    for i, costs in enumerate(node_costs):
        total += float(costs[int(choice[i])])
    for src, dst, table in edges:
        total += float(table[int(choice[src]), int(choice[dst])])
    return total


def brute_force(node_costs: Sequence[np.ndarray], edges: Sequence[tuple[int, int, np.ndarray]]) -> float:
    """The optimum of Eq. 1 by trying every strategy (tiny problems only)."""
    best = math.inf
    for choice in itertools.product(*(range(len(c)) for c in node_costs)):
        best = min(best, eq1_cost(node_costs, edges, choice))
    return best


def cost_scale(node_costs: Sequence[np.ndarray], edges: Sequence[tuple[int, int, np.ndarray]]) -> float:
    """An upper bound on |Eq. 1| of any strategy: tolerance for sums that cancel."""
    s = sum(float(np.max(np.abs(c))) for c in node_costs)
    s += sum(float(np.max(np.abs(t))) for _, _, t in edges)
    return max(s, 1.0)


# --------------------------------------------------------------------------- DAG shapes

def _chain(n: int, offset: int = 0) -> list[tuple[int, int]]:
    return [(offset + i, offset + i + 1) for i in range(n - 1)]


@st.composite
def chain_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    n = draw(st.integers(1, 9))
    return n, _chain(n)


def _fork_join_blocks(draw, blocks, branches, depth) -> tuple[int, list[tuple[int, int]], int]:
    """A chain of fork-join blocks from node 0: each block forks into ``branches`` paths of
    ``depth`` nodes that join in a new node (a path of length 0 is a direct, maybe parallel,
    edge).  The three arguments are strategies; returns (node count, edges, last join)."""
    edges: list[tuple[int, int]] = []
    n = 1
    head = 0
    for _ in range(draw(blocks)):
        tails = []
        for _ in range(draw(branches)):
            prev = head
            for _ in range(draw(depth)):
                edges.append((prev, n))
                prev = n
                n += 1
            tails.append(prev)
        join = n
        n += 1
        edges += [(t, join) for t in tails]
        head = join
    return n, edges, head


@st.composite
def diamond_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """A chain of fork-join blocks: s -> (b branches of length 0-2) -> t, repeated."""
    n, edges, _ = _fork_join_blocks(draw, st.integers(1, 3), st.integers(2, 3), st.integers(0, 2))
    return n, edges


@st.composite
def residual_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """ResNet-like: blocks x -> f1 -> (f2) -> add, x -> add, chained; optional stem and head."""
    edges: list[tuple[int, int]] = []
    n = draw(st.integers(1, 2))
    edges += _chain(n)
    head = n - 1
    for _ in range(draw(st.integers(1, 3))):
        prev = head
        for _ in range(draw(st.integers(1, 2))):
            edges.append((prev, n))
            prev = n
            n += 1
        add = n
        n += 1
        edges += [(prev, add), (head, add)]
        head = add
    for _ in range(draw(st.integers(0, 2))):
        edges.append((head, n))
        head = n
        n += 1
    return n, edges


@st.composite
def skip_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """A chain with random (possibly overlapping) long skips: not series-parallel in general."""
    n = draw(st.integers(3, 9))
    edges = _chain(n)
    for _ in range(draw(st.integers(1, 4))):
        a = draw(st.integers(0, n - 3))
        b = draw(st.integers(a + 2, n - 1))
        edges.append((a, b))
    return n, edges


@st.composite
def inception_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """Inception-like blocks: fork into 2-4 towers of depth 1-3, concat, repeat."""
    n, edges, head = _fork_join_blocks(draw, st.integers(1, 2), st.integers(2, 4), st.integers(1, 3))
    if draw(st.booleans()):
        edges.append((head, n))
        n += 1
    return n, edges


@st.composite
def multi_terminal_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """Several sources and sinks: two chains that merge, plus side outputs."""
    a = draw(st.integers(1, 3))
    b = draw(st.integers(1, 3))
    edges = _chain(a) + _chain(b, a)
    n = a + b
    merge = n
    n += 1
    edges += [(a - 1, merge), (a + b - 1, merge)]
    for _ in range(draw(st.integers(0, 2))):  # side sinks hanging off random nodes
        src = draw(st.integers(0, n - 1))
        edges.append((src, n))
        n += 1
    return n, edges


@st.composite
def parallel_edge_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """A chain whose edges are repeated 1-3 times (two inputs reading one tensor)."""
    n = draw(st.integers(2, 6))
    edges = []
    for e in _chain(n):
        edges += [e] * draw(st.integers(1, 3))
    return n, edges


@st.composite
def disconnected_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """Isolated nodes and several components side by side."""
    n = 0
    edges: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 3))
        edges += _chain(size, n)
        n += size
    return n, edges


@st.composite
def random_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """Any DAG on 1-7 nodes (edges i -> j, i < j), parallel edges allowed."""
    n = draw(st.integers(1, 7))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if not pairs:
        return n, []
    edges = draw(st.lists(st.sampled_from(pairs), max_size=12))
    return n, edges


@st.composite
def crossing_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """Adds whose skips cross (c = a + b, d = a + c, e = b + d, ...): node i reads node i-1
    and one of nodes i-4 .. i-2, so no node has one edge in and one out and no edges are
    parallel; node and edge elimination stall and leave a residual graph."""
    n = draw(st.integers(5, 9))
    edges = [(0, 1), (0, 2)]
    for i in range(3, n):
        edges += [(i - 1, i), (draw(st.integers(max(0, i - 4), i - 2)), i)]
    return n, edges


@st.composite
def dense_dag(draw) -> tuple[int, list[tuple[int, int]]]:
    """A dense block (every edge i -> j of 4-6 nodes, some left out) between short chains."""
    before, size, after = draw(st.integers(0, 2)), draw(st.integers(4, 6)), draw(st.integers(0, 2))
    edges = _chain(before + 1) if before else []
    block = [(before + i, before + j) for i in range(size) for j in range(i + 1, size)]
    drop = draw(st.lists(st.sampled_from(block), max_size=2, unique=True))
    edges += [e for e in block if e not in drop]
    last = before + size - 1
    edges += [(last + i, last + i + 1) for i in range(after)]
    return before + size + after, edges


SERIES_PARALLEL = {"chain", "diamond", "residual", "inception", "parallel", "disconnected"}
RESIDUAL_KINDS = ("crossing", "dense")   # built to stall node and edge elimination

DAG_KINDS = {
    "chain": chain_dag(), "diamond": diamond_dag(), "residual": residual_dag(), "skip": skip_dag(),
    "inception": inception_dag(), "multi": multi_terminal_dag(), "parallel": parallel_edge_dag(),
    "disconnected": disconnected_dag(), "random": random_dag(), "crossing": crossing_dag(), "dense": dense_dag(),
}


def dags(kinds: Sequence[str] = tuple(DAG_KINDS)):
    """(kind, n, edges) for the named DAG shapes."""
    return st.sampled_from(list(kinds)).flatmap(lambda k: DAG_KINDS[k].map(lambda ne: (k, *ne)))


def components(n: int, edges: Sequence[tuple[int, int]]) -> int:
    """Weakly connected components."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        parent[find(a)] = find(b)
    return len({find(i) for i in range(n)})


# --------------------------------------------------------------------------- cost tables

def _values(allow_negative: bool):
    nonneg = st.one_of(
        st.floats(0.0, 1e3, allow_nan=False, allow_infinity=False),
        st.integers(0, 5).map(float),          # small integers: many ties
        st.floats(1e-6, 1e-2),                  # seconds, as real tables
    )
    if not allow_negative:
        return nonneg
    return st.one_of(nonneg, st.floats(-1e3, 0.0, allow_nan=False), st.integers(-5, 0).map(float))


MAX_COMBINATIONS = 20_000  # strategies per random table problem: the exhaustive search stays fast


@st.composite
def table_problems(draw, kinds: Sequence[str] = tuple(DAG_KINDS), max_cfg: int = 5,
                   max_combinations: int = MAX_COMBINATIONS):
    """(kind, node_costs, edges, negative) with config counts 1..max_cfg (fewer on big DAGs,
    so that the product stays under ``max_combinations``)."""
    kind, n, edge_pairs = draw(dags(kinds))
    negative = draw(st.booleans()) and draw(st.booleans())  # about a quarter with negative costs
    values = _values(negative)
    ncfg = [draw(st.integers(1, max_cfg)) for _ in range(n)]
    while math.prod(ncfg) > max_combinations:
        big = ncfg.index(max(ncfg))
        ncfg[big] = (ncfg[big] + 1) // 2
    seed = draw(st.integers(0, 2**32 - 1))
    style = draw(st.sampled_from(["drawn", "uniform", "skewed"]))
    cells = sum(ncfg) + sum(ncfg[a] * ncfg[b] for a, b in edge_pairs)
    if style == "drawn" and cells > 80:  # drawing every entry through hypothesis is slow
        style = "uniform"
    rng = np.random.default_rng(seed)

    def arr(shape):
        if style == "drawn":
            flat = [draw(values) for _ in range(int(np.prod(shape)))]
            return np.asarray(flat, dtype=np.float64).reshape(shape)
        if style == "uniform":
            a = rng.uniform(0.0, 10.0, size=shape)
        else:  # a few big entries, as transfer tables with many zeros on the diagonal
            a = rng.exponential(1.0, size=shape) * (rng.random(size=shape) < 0.5)
        if negative:
            a = a - rng.uniform(0.0, 10.0)
        return a

    node_costs = [arr((k,)) for k in ncfg]
    edges = [(a, b, arr((ncfg[a], ncfg[b]))) for a, b in edge_pairs]
    return kind, node_costs, edges, negative


# --------------------------------------------------------------------------- real graphs

STEPS = ("conv", "conv_relu", "pool", "relu", "bn", "add_branch", "concat_branch", "residual",
         "residual_bn", "inception", "side_output", "second_input", "braid")
STEP_OPS = {"conv": 1, "conv_relu": 1, "pool": 1, "relu": 1, "bn": 1, "add_branch": 3, "concat_branch": 3,
            "residual": 2, "residual_bn": 3, "inception": 4, "side_output": 1, "second_input": 2, "braid": 4}
HEAD_OPS = 3  # flatten, linear, softmax


@dataclass(frozen=True)
class GraphRecipe:
    """What to build: an input shape, a list of (step, parameter) and whether to add a head."""

    batch: int
    channels: int
    size: int
    steps: tuple[tuple[str, int], ...]
    head: bool
    classes: int

    def describe(self) -> str:
        return (f"input ({self.batch}, {self.channels}, {self.size}, {self.size}); steps "
                f"{[s for s, _ in self.steps]}; head={self.head}")


@st.composite
def graph_recipes(draw, max_ops: int = 8) -> GraphRecipe:
    return GraphRecipe(
        batch=draw(st.sampled_from([4, 6, 8])),
        channels=draw(st.integers(2, 8)),
        size=draw(st.integers(4, 8)),
        steps=tuple(draw(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 2**16)),
                                  min_size=1, max_size=max_ops))),
        head=draw(st.booleans()),
        classes=draw(st.integers(2, 8)),
    )


def build_graph(recipe: GraphRecipe, max_ops: int = 8) -> sw.Graph:
    """Build ``recipe`` with at most ``max_ops`` ops (steps that do not fit are skipped).

    Every builder call here is valid by construction; channel counts stay in 2-8
    and the spatial size in 1-8.
    """
    g = sw.Graph("random")
    cur = g.input("x", (recipe.batch, recipe.channels, recipe.size, recipe.size))
    budget = max_ops - 1 - (HEAD_OPS if recipe.head else 0)
    if budget < 0:  # no room for a head: drop it
        budget = max_ops - 1
        head = False
    else:
        head = recipe.head
    for step, p in recipe.steps:
        need = STEP_OPS[step]
        if need > budget:
            continue
        n, c, h, w = cur.shape
        oc = 2 + p % 7
        if step in ("conv", "conv_relu"):
            k = (1, 3)[p % 2]
            pad = (p // 2) % 2 if k == 3 else 0
            if k > h + 2 * pad:
                k, pad = 1, 0
            stride = 2 if (p // 4) % 3 == 0 and h >= 4 else 1
            cur = g.conv2d(cur, oc, kernel=k, stride=stride, padding=pad,
                           activation="relu" if step == "conv_relu" else None)
        elif step == "pool":
            if h < 2 or w < 2:
                continue
            kind = ("max", "avg")[p % 2]
            if (p // 2) % 2 and h >= 3:
                cur = g.pool2d(cur, kernel=3, stride=1, padding=1, kind=kind)
            else:
                cur = g.pool2d(cur, kernel=2, stride=2, kind=kind)
        elif step == "relu":
            cur = g.relu(cur)
        elif step == "bn":
            cur = g.batchnorm2d(cur)
        elif step == "add_branch":
            a = g.conv2d(cur, oc, kernel=3 if h >= 1 else 1, padding=1)
            b = g.conv2d(cur, oc, kernel=1)
            cur = g.add(a, b)
        elif step == "concat_branch":
            a = g.conv2d(cur, oc, kernel=1)
            b = g.pool2d(cur, kernel=3, stride=1, padding=1) if h >= 1 else g.relu(cur)
            cur = g.concat([a, b] if p % 2 else [b, a], axis=1)
        elif step == "residual":
            y = g.conv2d(cur, c, kernel=3, padding=1, activation="relu")
            cur = g.add(y, cur) if p % 2 else g.add(cur, y)
        elif step == "residual_bn":
            y = g.conv2d(cur, c, kernel=3, padding=1)
            y = g.batchnorm2d(y)
            cur = g.add(cur, y)
        elif step == "inception":
            a = g.conv2d(cur, 2 + p % 3, kernel=1)
            b = g.conv2d(cur, 2 + (p // 3) % 3, kernel=3, padding=1)
            m = g.pool2d(cur, kernel=3, stride=1, padding=1, kind="avg")
            cur = g.concat([a, b, m], axis=1)
        elif step == "braid":  # adds whose skips cross: leaves a residual graph
            a, b = g.relu(cur), g.conv2d(cur, cur.shape[1], kernel=1)
            c = g.add(a, b)
            cur = g.add(a, c)
        elif step == "side_output":
            g.conv2d(cur, oc, kernel=1)  # a second sink nobody reads
        elif step == "second_input":
            other = g.input(f"x{len(g)}", cur.shape)  # a second source
            cur = g.add(cur, other)
        budget -= need
    if head:
        f = g.flatten(cur)
        f = g.linear(f, recipe.classes)
        g.softmax(f)
    return g


# --------------------------------------------------------------------------- device graphs

def hetero3() -> sw.DeviceGraph:
    """Three devices of different speeds; a and c talk only through b."""
    d = sw.DeviceGraph("hetero3")
    a = d.add_device("a", flops=2e12, memory=8e9, mem_bandwidth=3e11)
    b = d.add_device("b", flops=9e12, memory=16e9)
    c = d.add_device("c", flops=5e11, memory=4e9, mem_bandwidth=5e10)
    d.add_link(a, b, bandwidth=20e9)
    d.add_link(b, c, bandwidth=2e9)
    return d


def one_way_ring4() -> sw.DeviceGraph:
    """Four devices on a one-way ring with different link speeds (asymmetric routes)."""
    d = sw.DeviceGraph("ring4")
    devs = [d.add_device(f"g{k}", flops=(1 + k) * 1e12, memory=16e9) for k in range(4)]
    for k in range(4):
        d.add_link(devs[k], devs[(k + 1) % 4], bandwidth=(k + 1) * 5e9, bidirectional=False)
    return d


def asym2() -> sw.DeviceGraph:
    """Two devices with a fast link one way and a slow one back."""
    d = sw.DeviceGraph("asym2")
    a = d.add_device("a", flops=1e13, memory=16e9)
    b = d.add_device("b", flops=3e12, memory=16e9, mem_bandwidth=1e11)
    d.add_link(a, b, bandwidth=50e9, bidirectional=False)
    d.add_link(b, a, bandwidth=1e9, bidirectional=False)
    return d


def device_graph_cases() -> dict[str, sw.DeviceGraph]:
    """Named device graphs with 1 to 4 devices: presets and hand-made heterogeneous ones."""
    return {
        "cpu1": sw.DeviceGraph.cpu(1),
        "cpu2": sw.DeviceGraph.cpu(2),
        "cpu3": sw.DeviceGraph.cpu(3),
        "p100_1x4": sw.DeviceGraph.cluster(nodes=1, devices_per_node=4, device="P100"),
        "k80_2x2": sw.DeviceGraph.cluster(nodes=2, devices_per_node=2, device="K80"),
        "v100_1x2": sw.DeviceGraph.cluster(nodes=1, devices_per_node=2, device="V100"),
        "hetero3": hetero3(),
        "ring4": one_way_ring4(),
        "asym2": asym2(),
    }


@st.composite
def random_device_graphs(draw) -> sw.DeviceGraph:
    """1-4 devices with random speeds, a random spanning tree plus extra links, random bandwidths."""
    n = draw(st.integers(1, 4))
    d = sw.DeviceGraph("random")
    speeds = st.floats(1e11, 2e13)
    for k in range(n):
        d.add_device(f"d{k}", flops=draw(speeds), memory=16e9,
                     mem_bandwidth=draw(st.one_of(st.none(), st.floats(1e10, 1e12))))
    bw = st.floats(1e8, 1e11)
    for k in range(1, n):
        d.add_link(draw(st.integers(0, k - 1)), k, bandwidth=draw(bw))
    for _ in range(draw(st.integers(0, 3))):
        if n < 2:
            break
        i = draw(st.integers(0, n - 1))
        j = draw(st.integers(0, n - 1).filter(lambda x, i=i: x != i))
        d.add_link(i, j, bandwidth=draw(bw), bidirectional=draw(st.booleans()))
    return d


# ----------------------------------------------------------------------------- random plans
def valid_degrees(op, ndev: int) -> list[tuple[int, ...]]:
    """Every degree vector of ``op`` with at most ``ndev`` workers (degrees divide their
    dimension and keep its granule), as the planner allows them."""
    granules = op.desc.split_granules()
    options = [[k for k in range(1, ndev + 1) if s % k == 0 and (s // k) % q == 0]
               for s, q in zip(op.shape, granules)]
    return [d for d in itertools.product(*options) if math.prod(d) <= ndev]


def random_plan(g: sw.Graph, d: sw.DeviceGraph, rng: np.random.Generator, reductions: bool = False) -> sw.Plan:
    """A plan giving every op a random valid configuration on a random set of devices;
    with ``reductions``, ops with an additive reduction split it half of the time
    (partition-n-reduce) when the devices allow."""
    spec = {}
    for op in g.ops:
        degs = valid_degrees(op, len(d))
        pick = degs[rng.integers(len(degs))]
        conf = dict(zip(dim_names(len(op.shape)), pick))
        workers = math.prod(pick)
        if reductions and op.desc.additive and rng.random() < 0.5:
            var = op.desc.additive[int(rng.integers(len(op.desc.additive)))]
            options = [r for r in range(2, len(d) // workers + 1) if op.desc.extents[var] % r == 0]
            if options:
                r = options[int(rng.integers(len(options)))]
                conf[op.desc.reductions[var - op.desc.out_rank]] = r
                workers *= r
        spec[op.name] = {**conf, "devices": [int(v) for v in rng.permutation(len(d))[:workers]]}
    return sw.Plan.from_dict(g, d, spec)


def assert_other_threads_run(work) -> None:
    """Run ``work()`` on a thread and check this thread keeps running meanwhile: the C
    code it calls releases the GIL (the longest pause here is under half of its run)."""
    import threading
    import time

    done = threading.Event()
    box = {}

    def target():
        t0 = time.perf_counter()
        work()
        box["seconds"] = time.perf_counter() - t0
        done.set()

    worker = threading.Thread(target=target)
    stamps = []
    worker.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
        time.sleep(0.001)
    worker.join()
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert box["seconds"] > 0.02
    assert max(gaps) < box["seconds"] / 2
