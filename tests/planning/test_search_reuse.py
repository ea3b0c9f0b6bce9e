"""The search's shortcuts for repeated structure keep the optimum.

* Node eliminations whose two tables are the same arrays and whose node costs are equal
  reuse an earlier product, and edge eliminations of the same two arrays an earlier sum
  (csrc/search/search_elim.c): on graphs of repeated blocks the
  elimination still finds the exhaustive optimum, also when one block's node cost differs
  (which must not reuse), and the min-marginals of its reverse pass equal brute force;
* edges whose transfer tables are a function of the same data share one table, and the
  placements of two partitions on a machine of uniform nodes are counted once per class
  (csrc/cost/cost.c, cost_placed.c): every entry of the search's tables, at random
  strategies, sums to the Eq. 1 of the plan costed on its own (one configuration per op);
* on a real graph of identical blocks sw.search (which reuses products there) finds the
  exhaustive optimum.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.planning.problem import CostOptions, make_problem, worker_counts
from shardwise.planning.search import _enumerate, _plan_of

REL = 1e-9


def repeated_blocks(rng, blocks: int, ncfg: int, perturb: bool, crossing: bool):
    """Node costs and edges of `blocks` identical diamonds x_b -> m1 -> m2 -> x_{b+1} plus a skip
    x_b -> x_{b+1}, the repeated tables being the same arrays; `perturb`: the last block's m1
    cost differs by 0.25 in one entry; `crossing`: an edge x_0 -> x_2 that leaves a residual graph."""
    def table():
        return rng.uniform(0.0, 1.0, (ncfg, ncfg))

    t1, t2, t3, skip = table(), table(), table(), table()
    c1, c2 = rng.uniform(0.0, 1.0, ncfg), rng.uniform(0.0, 1.0, ncfg)
    nodes, edges = [rng.uniform(0.0, 1.0, ncfg)], []
    for b in range(blocks):
        x = len(nodes) - 1
        m1 = c1.copy()
        if perturb and b == blocks - 1:
            m1[rng.integers(ncfg)] += 0.25
        nodes += [m1, c2.copy(), rng.uniform(0.0, 1.0, ncfg)]
        i1, i2, xn = len(nodes) - 3, len(nodes) - 2, len(nodes) - 1
        edges += [(x, i1, t1), (i1, i2, t2), (i2, xn, t3), (x, xn, skip)]
    if crossing:
        edges.append((0, 6, table()))
    return nodes, edges


def eq1(nodes, edges, choice) -> float:
    return sum(float(n[c]) for n, c in zip(nodes, choice)) + sum(float(t[choice[a], choice[b]]) for a, b, t in edges)


@pytest.mark.parametrize("seed", range(24))
def test_reused_products_keep_the_exhaustive_optimum(seed):
    rng = np.random.default_rng(seed)
    perturb, crossing = seed % 3 == 1, seed % 2 == 1
    nodes, edges = repeated_blocks(rng, blocks=3, ncfg=int(rng.integers(2, 5)), perturb=perturb, crossing=crossing)
    e_choice, e_cost, e_stats = _core.search_tables(nodes, edges, "elimination", 1e9)
    x_choice, x_cost, _ = _core.search_tables(nodes, edges, "exhaustive", 1e9)
    assert math.isclose(e_cost, x_cost, rel_tol=REL), (e_cost, x_cost, e_stats)
    assert math.isclose(eq1(nodes, edges, e_choice), e_cost, rel_tol=REL)
    # the first block's product of t1, c1, t2 is reused by the second (and the third unless perturbed)
    assert e_stats["reused_products"] >= (1 if perturb else 2)
    assert e_stats["exact"]


@pytest.mark.parametrize("seed", range(12))
def test_reused_sums_keep_the_exhaustive_optimum(seed):
    """Each block's chain product meets the skip beside it; the first block's sum of the two is
    reused by the others (same arrays), unless a perturbed block made a product of its own."""
    rng = np.random.default_rng(200 + seed)
    perturb = seed % 2 == 1
    nodes, edges = repeated_blocks(rng, blocks=3, ncfg=int(rng.integers(2, 5)), perturb=perturb, crossing=False)
    e_choice, e_cost, e_stats = _core.search_tables(nodes, edges, "elimination", 1e9)
    x_choice, x_cost, _ = _core.search_tables(nodes, edges, "exhaustive", 1e9)
    assert math.isclose(e_cost, x_cost, rel_tol=REL), (e_cost, x_cost, e_stats)
    assert math.isclose(eq1(nodes, edges, e_choice), e_cost, rel_tol=REL)
    assert e_stats["reused_sums"] == (1 if perturb else 2), e_stats
    copied = [(a, b, t.copy()) for a, b, t in edges]   # equal contents, other arrays: nothing reused
    c_choice, c_cost, c_stats = _core.search_tables(nodes, copied, "elimination", 1e9)
    assert c_stats["reused_sums"] == 0 and c_stats["reused_products"] == 0
    assert list(c_choice) == list(e_choice) and c_cost == e_cost


@pytest.mark.parametrize("seed", range(4))
def test_min_marginals_with_reused_products_equal_brute_force(seed):
    """The reverse pass (search_marginals.c) reads a reused product like any made table."""
    rng = np.random.default_rng(100 + seed)
    nodes, edges = repeated_blocks(rng, blocks=2, ncfg=3, perturb=False, crossing=False)
    choice, cost, stats, marg = _core.search_tables(nodes, edges, "elimination", 1e9, True)
    assert stats["reused_products"] >= 1 and stats["residual_nodes"] == 1
    best = [np.full(len(n), np.inf) for n in nodes]
    for ch in itertools.product(*(range(len(n)) for n in nodes)):
        v = eq1(nodes, edges, ch)
        for i, c in enumerate(ch):
            best[i][c] = min(best[i][c], v)
    for m, b in zip(marg, best):
        np.testing.assert_allclose(m, b, rtol=REL)


def test_a_perturbed_node_cost_is_not_reused():
    """Two chains of the same tables but for one node cost: the second chain's product must be
    computed afresh, or the search picks the root's configuration from a wrong table."""
    t = np.array([[0.0, 5.0], [5.0, 0.0]])
    a, b = np.array([0.0, 3.0]), np.array([3.0, 0.0])   # the middle node prefers config 0, or 1
    # 0 -> 1 -> 2 and 0 -> 3 -> 4 (leaves 2 and 4): with b the root's config 1 is best (3, not
    # 1 + 0 + 3); reusing chain 1's product for chain 2 would pick config 0 (true cost 4)
    for mid2, want in ((a, 1.0), (b, 3.0)):
        nodes = [np.array([1.0, 0.0]), a.copy(), np.zeros(2), mid2.copy(), np.zeros(2)]
        edges = [(0, 1, t), (1, 2, t), (0, 3, t), (3, 4, t)]
        _, cost, stats = _core.search_tables(nodes, edges, "elimination", 1e9)
        _, brute, _ = _core.search_tables(nodes, edges, "exhaustive", 1e9)
        assert cost == brute == want


@pytest.mark.parametrize("name,machine", [
    ("inception_v3", lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=2, device="P100")),
    ("resnet18", lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="V100")),
])
def test_shared_tables_equal_each_plan_costed_alone(name, machine):
    g, d = sw.models.get(name, batch=32), machine()
    options = CostOptions()
    p = make_problem(g, d, options)
    _enumerate(p, d, worker_counts(len(d)))
    p.build_tables()
    node = [sum(p.node_costs(i)[:2]) for i in range(len(g.ops))]
    tables = [(src, dst, p.edge_table(e)[0]) for e, (src, dst, _) in enumerate(p.edges())]
    rng = np.random.default_rng(0)
    choice, cost, stats = p.search("elimination", 1e9)
    strategies = [choice] + [[int(rng.integers(len(n))) for n in node] for _ in range(4)]
    for ch in strategies:
        alone = _plan_of(p, g, d, options, None, ch, {}).cost   # a problem of one configuration per op
        assert math.isclose(eq1(node, tables, ch), alone, rel_tol=REL)
    assert math.isclose(cost, eq1(node, tables, choice), rel_tol=REL)
    assert stats["reused_products"] > 0


def identical_blocks(blocks: int = 3) -> sw.Graph:
    """Identical linear -> relu blocks with a skip add around each: repeated tables."""
    g = sw.Graph("identical_blocks")
    x = g.input("x", (8, 16))
    for b in range(blocks):
        h = g.relu(g.linear(x, 16, name=f"fc{b}"), name=f"act{b}")
        x = g.add(x, h, name=f"sum{b}")
    return g


def test_identical_blocks_search_equals_exhaustive():
    g, d = identical_blocks(), sw.DeviceGraph.cpu(2)
    plan = sw.search(g, d, objective="eq1")
    brute = sw.search(g, d, algorithm="exhaustive", max_evaluations=1e7)
    assert plan.search_stats["reused_products"] > 0
    assert math.isclose(plan.cost, brute.cost, rel_tol=REL)
    assert math.isclose(plan.search_stats["searched_cost"], brute.search_stats["searched_cost"], rel_tol=REL)
