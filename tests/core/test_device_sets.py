"""Device sets the search places workers on: aligned blocks, and on heterogeneous machines the
groups their structure makes distinct (nodes, device kinds, link speeds) and blocks within them."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import shardwise as sw
from shardwise.machine.device_sets import aligned_blocks, device_sets, structure_groups
from shardwise.plan import OpConfig, Plan
from shardwise.planning.problem import dim_names, make_problem, worker_counts


def fast_pair_inside() -> sw.DeviceGraph:
    """Slow, fast, fast, slow: the fast pair (1, 2) is no aligned block, and only it has a
    fast link."""
    d = sw.DeviceGraph("fast pair inside")
    for i, flops in enumerate((1e12, 20e12, 20e12, 1e12)):
        d.add_device(f"d{i}", flops=flops, memory=16e9, mem_bandwidth=900e9)
    d.add_link(1, 2, bandwidth=50e9)
    for a, b in ((0, 1), (2, 3), (0, 3)):
        d.add_link(a, b, bandwidth=1e9)
    return d


def test_interchangeable_machines_keep_the_aligned_blocks():
    for d in (sw.DeviceGraph.cpu(4), sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="P100"),
              sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="V100")):
        counts = worker_counts(len(d))
        assert set(device_sets(d, counts)) == set(aligned_blocks(len(d), counts))


def test_structure_groups_of_a_heterogeneous_machine():
    d = fast_pair_inside()
    groups = set(structure_groups(d))
    assert (1, 2) in groups            # the fast kind, and the devices linked at 50 GB/s
    assert (0, 3) in groups            # the slow kind
    assert (0, 1, 2, 3) in groups
    sets = device_sets(d, worker_counts(4))
    assert sets[:len(aligned_blocks(4, worker_counts(4)))] == aligned_blocks(4, worker_counts(4))
    assert len(sets) == len(set(sets))
    assert {(1, 2), (0, 3)} <= set(sets) - set(aligned_blocks(4, worker_counts(4)))
    for s in sets:   # index order, or the best-connected device first and the rest in index order
        assert len(set(s)) == len(s) and list(s[1:]) == sorted(s[1:]) and all(0 <= i < 4 for i in s)
    # the first worker hosts a replicated weight's parameter server: each set also comes with its
    # best-connected device first (1 and 2 tie on route bandwidth to the rest: the lower index)
    assert (1, 0, 2, 3) in sets and (0, 1, 2, 3) in sets
    assert (0, 1, 2) in sets and (1, 0, 2) in sets   # the three fastest, and hub first


def link_classes_brute_force(d: sw.DeviceGraph, level: float) -> set[tuple[int, ...]]:
    """Classes of 'a route at least `level` fast' by closing pairs transitively."""
    bw = d.route_bandwidths()
    n = len(d)
    cls = [{i} for i in range(n)]
    for a, b in itertools.product(range(n), repeat=2):
        if a != b and bw[a, b] >= level:
            merged = cls[a] | cls[b]
            for i in merged:
                cls[i] = merged
    return {tuple(sorted(c)) for c in cls}


@pytest.mark.parametrize("seed", range(8))
def test_link_classes_match_a_transitive_closure(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 8))
    d = sw.DeviceGraph(f"random {seed}")
    for i in range(n):
        d.add_device(f"d{i}", flops=1e12, memory=8e9)
    for i in range(1, n):   # a spanning tree, then a few more links
        d.add_link(i, int(rng.integers(0, i)), bandwidth=float(rng.choice([1e9, 5e9, 25e9])))
    for _ in range(n // 2):
        a, b = (int(v) for v in rng.choice(n, 2, replace=False))
        try:
            d.add_link(a, b, bandwidth=float(rng.choice([1e9, 5e9, 25e9])))
        except sw.DeviceGraphError:
            pass   # already linked
    groups = set(structure_groups(d))
    bw = d.route_bandwidths()
    for level in np.unique(bw[np.isfinite(bw) & ~np.eye(n, dtype=bool)]):
        assert link_classes_brute_force(d, level) <= groups


def test_the_search_uses_a_group_that_is_no_aligned_block():
    """On slow-fast-fast-slow the best plan runs (nearly) everything on the fast pair; with
    aligned blocks alone the search could not place anything on (1, 2).  The search is exact
    over the sets: it equals brute force, and beats the best plan on aligned blocks."""
    g = sw.Graph("convs")   # compute-heavy, few parameters: splitting over a fast pair pays
    x = g.input("x", (64, 16, 16, 16))
    h = g.conv2d(x, 8, 3, padding=1, activation="relu", name="conv1")
    g.softmax(g.linear(g.flatten(h, name="flat"), 10, name="fc"), name="prob")
    d = fast_pair_inside()
    plan = sw.search(g, d, objective="eq1")
    brute = sw.search(g, d, algorithm="exhaustive", max_evaluations=1e8)
    assert plan.cost == pytest.approx(brute.cost, rel=1e-12)
    on_pair = Plan(g, d, {op.name: OpConfig(dim_names(len(op.shape)),
                                            (2,) + (1,) * (len(op.shape) - 1) if op.shape[0] % 2 == 0 else
                                            (1,) * len(op.shape), (1, 2) if op.shape[0] % 2 == 0 else (1,))
                          for op in g.ops})
    assert plan.cost <= on_pair.cost * (1 + 1e-12)
    # the best plan over aligned blocks alone, by the same exact search on the core
    problem = make_problem(g, d, plan.options)
    problem.enumerate(np.asarray(worker_counts(4), dtype=np.int32))
    problem.build_tables()
    _, blocks_only, _ = problem.search("elimination", 1e9)
    assert plan.cost < blocks_only * (1 - 1e-3)
    assert any(set(c.devices) & {1, 2} and not set(c.devices) & {0, 3} and len(c.devices) == 2 for _, c in plan)


def test_bad_device_sets_are_refused():
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    problem = make_problem(g, d, sw.CostOptions())
    for sets, match in (([], "at least one"), ([[0, 0]], "repeated"), ([[0, 4]], "out of range"),
                        ([[0, 1], [0, 1]], "the same"), ([[0, 1, 2, 3, 0]], "more devices")):
        with pytest.raises(ValueError, match=match):
            problem.enumerate_sets([np.asarray(s, dtype=np.int32) for s in sets])
    problem.enumerate_sets([np.asarray(s, dtype=np.int32) for s in ([0], [2, 1])])
    degrees, devices = problem.configs(0)[:2]
    assert len(degrees) > 0
