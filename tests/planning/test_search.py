"""The elimination search (Algorithm 1 of seed 003) returns the exact optimum of Eq. 1.

* random cost tables: elimination == exhaustive (== brute force in Python on tiny ones),
  and the returned choice really costs the returned cost;
* DAGs built to stall node and edge elimination (crossing skips, dense blocks): variable
  elimination of the residual graph == brute force; above its bound, the mini-bucket
  lower bound <= the optimum <= the returned plan's cost;
* random small shardwise graphs on 1-4 devices: elimination == exhaustive, and the
  plans re-evaluated from their configurations cost what the search said;
* every zoo model at 2, 4, 8 and 16 devices: the searched cost never exceeds data,
  model or OWT parallelism (they lie inside the search space);
* the paper's behaviour on AlexNet and VGG-16 over the 4x4 P100 cluster;
* hand-computed optima where greedy choices are wrong.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import shardwise as sw
from shardwise import _core
from shardwise.planning import strategies as baselines

from strategies_random import (RESIDUAL_KINDS, SERIES_PARALLEL, brute_force, build_graph, components,
                               cost_scale, device_graph_cases, eq1_cost, examples, graph_recipes,
                               random_device_graphs, table_problems)

REL = 1e-9
STATS_KEYS = {"node_eliminations", "reused_products", "reused_sums", "edge_eliminations", "leaf_eliminations", "algorithm1_residual_nodes",
              "residual_nodes", "residual_edges", "residual_combinations", "evaluations", "residual_width",
              "residual_table", "exact", "lower_bound", "marginals_cap"}


def close(a: float, b: float, scale: float = 0.0) -> bool:
    """Equal within REL relative (plus REL * scale absolute, for sums that cancel)."""
    return math.isclose(a, b, rel_tol=REL, abs_tol=REL * scale)


# =========================================================================== random cost tables

def _search(node_costs, edges, algorithm, limit=1e9):
    choice, cost, stats = _core.search_tables(node_costs, edges, algorithm, limit)
    n = len(node_costs)
    assert isinstance(cost, float)
    assert choice.shape == (n,)
    assert np.issubdtype(choice.dtype, np.integer)
    for i, k in enumerate(choice):
        assert 0 <= k < len(node_costs[i]), f"node {i}: choice {k} outside its {len(node_costs[i])} configs"
    assert set(stats) == STATS_KEYS
    assert 0 <= stats["residual_nodes"] <= n
    assert 0 <= stats["residual_edges"] <= len(edges)
    assert stats["evaluations"] >= 1
    if algorithm == "exhaustive":   # elimination counts min-plus steps, not strategies
        assert stats["evaluations"] <= stats["residual_combinations"] * (1 + REL)
    if stats["exact"]:
        assert stats["lower_bound"] == cost
    return choice, cost, stats


def _check_tables(kind, node_costs, edges):
    n = len(node_costs)
    scale = cost_scale(node_costs, edges)
    note(f"{kind}: {n} nodes, configs {[len(c) for c in node_costs]}, edges {[(a, b) for a, b, _ in edges]}")
    e_choice, e_cost, e_stats = _search(node_costs, edges, "elimination")
    x_choice, x_cost, x_stats = _search(node_costs, edges, "exhaustive")
    note(f"elimination {e_cost!r} {list(e_choice)} {e_stats}; exhaustive {x_cost!r} {list(x_choice)}")

    # the same optimum, and each choice achieves the cost returned with it
    assert close(e_cost, x_cost, scale), f"elimination {e_cost!r} != exhaustive {x_cost!r}"
    assert close(eq1_cost(node_costs, edges, e_choice), e_cost, scale)
    assert close(eq1_cost(node_costs, edges, x_choice), x_cost, scale)

    # elimination bookkeeping: every node is either eliminated or left in the residual graph
    eliminated = e_stats["node_eliminations"] + e_stats["leaf_eliminations"]
    assert eliminated + e_stats["residual_nodes"] == n
    assert e_stats["residual_nodes"] <= e_stats["algorithm1_residual_nodes"] <= n
    if kind in SERIES_PARALLEL:  # series-parallel components reduce to one node each
        assert e_stats["residual_nodes"] == components(n, [(a, b) for a, b, _ in edges])
    # the exhaustive search enumerates the whole graph
    assert x_stats["residual_nodes"] == x_stats["algorithm1_residual_nodes"] == n
    assert x_stats["residual_edges"] == len(edges)
    assert x_stats["node_eliminations"] == x_stats["edge_eliminations"] == x_stats["leaf_eliminations"] == 0
    assert close(x_stats["residual_combinations"], float(np.prod([len(c) for c in node_costs])))
    return e_cost


@settings(max_examples=examples(500))
@given(table_problems())
def test_random_tables_elimination_equals_exhaustive(problem):
    kind, node_costs, edges, _ = problem
    _check_tables(kind, node_costs, edges)


@settings(max_examples=examples(150))
@given(table_problems(kinds=("skip", "random", "multi", "diamond", "inception"), max_cfg=3))
def test_random_tables_match_python_brute_force(problem):
    kind, node_costs, edges, _ = problem
    if np.prod([len(c) for c in node_costs]) > 3000:
        node_costs = node_costs[:5]
        edges = [e for e in edges if e[1] < 5]
    cost = _check_tables(kind, node_costs, edges)
    assert close(cost, brute_force(node_costs, edges), cost_scale(node_costs, edges))


@settings(max_examples=examples(100))
@given(table_problems(), st.data())
def test_random_tables_negative_costs(problem, data):
    """Negative entries everywhere (the enumeration must not prune with them)."""
    kind, node_costs, edges, _ = problem
    shift = data.draw(st.floats(1.0, 100.0))
    node_costs = [c - shift for c in node_costs]
    edges = [(a, b, t - shift * (1 + (a + b) % 3)) for a, b, t in edges]
    _check_tables(kind, node_costs, edges)


@settings(max_examples=examples(100))
@given(table_problems(kinds=("chain", "diamond", "residual", "random"), max_cfg=24, max_combinations=40_000))
def test_random_tables_many_configurations(problem):
    """Config counts up to 24: the min-plus product of node elimination works on 8-row blocks,
    so partial blocks and several of them must give the same optimum."""
    kind, node_costs, edges, _ = problem
    _check_tables(kind, node_costs, edges)


@pytest.mark.parametrize("ncfg", [(20, 30, 600), (9, 7, 513), (1, 1030, 1), (600, 5, 17), (8, 1, 512),
                                  (37, 611, 45), (301, 300, 299), (6, 250, 90), (300, 4, 70)])
def test_tables_large_blocks(ncfg):
    """Node elimination on tables wider than one 512-column block and taller than 8 rows, and
    (products above 10^5 steps) on the register-blocked kernel, whose rows and columns do not
    fill its 4 x 8 blocks here."""
    rng = np.random.default_rng(sum(ncfg))
    nodes = [rng.uniform(0, 1, size=k) for k in ncfg]
    nodes[1][rng.integers(ncfg[1])] = -0.5  # a negative entry
    edges = [(0, 1, rng.uniform(0, 1, size=(ncfg[0], ncfg[1]))),
             (1, 2, rng.exponential(1, size=(ncfg[1], ncfg[2])))]
    # the optimum with numpy: min over (a, c) of a + c + min_b (b + e1[a, b] + e2[b, c])
    inner = (nodes[1][None, :, None] + edges[0][2][:, :, None] + edges[1][2][None, :, :]).min(axis=1)
    expected = float((nodes[0][:, None] + inner + nodes[2][None, :]).min())
    for algorithm in ("elimination", "exhaustive"):
        choice, cost, stats = _search(nodes, edges, algorithm)
        assert close(cost, expected), algorithm
        assert close(eq1_cost(nodes, edges, choice), cost)
    # a diamond over the same sizes: both branches eliminated, their edges merged
    edges2 = edges + [(0, 2, rng.uniform(0, 1, size=(ncfg[0], ncfg[2])))]
    e_choice, e_cost, _ = _search(nodes, edges2, "elimination")
    x_choice, x_cost, _ = _search(nodes, edges2, "exhaustive")
    assert close(e_cost, x_cost) and close(eq1_cost(nodes, edges2, e_choice), e_cost)


def _assert_kernels_give_numpys_bits(a, nj, b):
    expected = ((nj[None, :] + a)[:, :, None] + b[None, :, :]).min(axis=1)
    for kernel in range(_core.minplus_kernel() + 1):
        for threads in (1, 2):
            out = _core.minplus(a, nj, b, kernel=kernel, threads=threads)
            assert out.tobytes() == expected.tobytes(), (kernel, threads)


@pytest.mark.parametrize("shape", [(161, 161, 161), (57, 161, 57), (31, 57, 56), (4, 600, 16), (5, 300, 17),
                                   (9, 70, 200), (300, 4, 70), (1, 1030, 1), (33, 40, 9)])
def test_minplus_kernels_give_numpys_bits(shape):
    """Every min-plus kernel (portable, AVX2, AVX-512: the ones this CPU has) gives, bit for bit,
    NumPy's min over cj of (nj[cj] + a[ci][cj]) + b[cj][ck]: the same sums, and a minimum does
    not depend on the order of its terms.  Zeros and ties as in transfer tables (matching
    configurations cost nothing), partial register blocks and panels, one and two threads."""
    ci, cj, ck = shape
    rng = np.random.default_rng(sum(shape))
    a, b = rng.exponential(1e-3, (ci, cj)), rng.exponential(1e-3, (cj, ck))
    a[a < 5e-4] = 0.0
    b[b < 3e-4] = 0.0
    b[:, ck // 2] = b[:, 0]   # tied columns
    nj = rng.uniform(0, 1e-3, cj).round(6)   # and tied node costs
    _assert_kernels_give_numpys_bits(a, nj, b)


def test_minplus_kernels_on_real_transfer_tables():
    """The vector kernels skip the cj whose lower bound is above a block's entries: on
    Inception-v3's tables over 4 x 4 P100s most of them (random tables barely any).  Every chain
    i -> j -> k of one op's tables, and the first two made from those, give NumPy's bits."""
    from shardwise.planning.problem import CostOptions, make_problem, worker_counts
    from shardwise.planning.search import _enumerate

    g, d = sw.models.inception_v3(), sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")
    problem = make_problem(g, d, CostOptions())
    _enumerate(problem, d, worker_counts(len(d)))
    problem.build_tables()
    edges = problem.edges()
    chains = []
    for j in (op.index for op in g.ops if len(op.inputs) == 1):
        into = [e for e, (u, v, _) in enumerate(edges) if v == j]
        out = [e for e, (u, v, _) in enumerate(edges) if u == j]
        if len(into) == 1 and len(out) == 1:
            tc, ts, _ = problem.node_costs(j)
            chains.append((problem.edge_table(into[0])[0], np.asarray(tc) + np.asarray(ts),
                           problem.edge_table(out[0])[0]))
    sizes = {(a.shape[0], a.shape[1], b.shape[1]) for a, _, b in chains}
    assert (161, 161, 161) in sizes and (57, 57, 57) in sizes
    for a, nj, b in chains[::7]:
        _assert_kernels_give_numpys_bits(a, nj, b)
    (a1, n1, b1), (_, n2, b2) = chains[0], chains[1]
    if b1.shape[1] == n2.shape[0]:   # a made table feeding the next product, as eliminations chain them
        made = ((n1[None, :] + a1)[:, :, None] + b1[None, :, :]).min(axis=1)
        _assert_kernels_give_numpys_bits(made, n2, b2)


def test_tables_single_node_and_isolated_nodes():
    choice, cost, stats = _search([np.array([3.0, 1.0, 2.0])], [], "elimination")
    assert list(choice) == [1] and cost == 1.0 and stats["residual_nodes"] == 1
    choice, cost, _ = _search([np.array([3.0, 1.0, 2.0])], [], "exhaustive")
    assert list(choice) == [1] and cost == 1.0
    # three isolated nodes: each picks its own minimum
    nodes = [np.array([2.0, -1.0]), np.array([0.5]), np.array([4.0, 3.0, 7.0])]
    for algorithm in ("elimination", "exhaustive"):
        choice, cost, stats = _search(nodes, [], algorithm)
        assert list(choice) == [1, 0, 1] and cost == pytest.approx(2.5)
        assert stats["residual_nodes"] == 3


def test_tables_parallel_edges_are_summed():
    nodes = [np.zeros(2), np.zeros(2)]
    e1 = np.array([[0.0, 5.0], [5.0, 9.0]])
    e2 = np.array([[7.0, 5.0], [5.0, 0.0]])
    # alone, e1 favours (0, 0) and e2 (1, 1); summed, (0, 1) and (1, 0) cost 10, (0, 0) 7, (1, 1) 9
    for algorithm in ("elimination", "exhaustive"):
        choice, cost, stats = _search(nodes, [(0, 1, e1), (0, 1, e2)], algorithm)
        assert cost == 7.0 and list(choice) == [0, 0]
    assert stats["edge_eliminations"] == 0  # exhaustive
    _, _, stats = _search(nodes, [(0, 1, e1), (0, 1, e2)], "elimination")
    assert stats["edge_eliminations"] == 1 and stats["residual_nodes"] == 1


def test_tables_long_chain_reduces_to_one_node():
    rng = np.random.default_rng(7)
    n = 60
    nodes = [rng.uniform(0, 1, size=6) for _ in range(n)]
    edges = [(i, i + 1, rng.uniform(0, 1, size=(6, 6))) for i in range(n - 1)]
    choice, cost, stats = _search(nodes, edges, "elimination")
    assert stats["residual_nodes"] == 1 and stats["node_eliminations"] + stats["leaf_eliminations"] == n - 1
    assert close(eq1_cost(nodes, edges, choice), cost)
    # the exhaustive search refuses this one (6^60 strategies), quickly and clearly
    with pytest.raises(RuntimeError, match="strategies"):
        _core.search_tables(nodes, edges, "exhaustive")


# =========================================================================== hand-computed optima

def test_hand_computed_chain():
    """A -> B -> C, two configurations each.

    Strategy costs (nodes + edges):
        000: 1+2+5 + 0+0 = 8    001: 1+2+0 + 0+6 = 9    010: 1+2+5 + 4+6 = 18   011: 1+2+0 + 4+0 = 7
        100: 3+2+5 + 4+0 = 14   101: 3+2+0 + 4+6 = 15   110: 3+2+5 + 0+6 = 16   111: 3+2+0 + 0+0 = 5
    The optimum is 111 at 5; the per-node greedy choice (0, 0, 1) costs 9.
    """
    nodes = [np.array([1.0, 3.0]), np.array([2.0, 2.0]), np.array([5.0, 0.0])]
    switch = lambda c: np.array([[0.0, c], [c, 0.0]])  # noqa: E731  (cost c to change configuration)
    edges = [(0, 1, switch(4.0)), (1, 2, switch(6.0))]
    greedy = [int(np.argmin(c)) for c in nodes]
    assert eq1_cost(nodes, edges, greedy) == 9.0
    for algorithm in ("elimination", "exhaustive"):
        choice, cost, stats = _search(nodes, edges, algorithm)
        assert cost == 5.0 and list(choice) == [1, 1, 1], algorithm
    assert brute_force(nodes, edges) == 5.0
    _, _, stats = _search(nodes, edges, "elimination")
    assert stats["node_eliminations"] == 1 and stats["leaf_eliminations"] == 1 and stats["residual_nodes"] == 1


def test_hand_computed_diamond_where_greedy_is_wrong():
    """s -> a -> t, s -> b -> t; every node prefers configuration 0 on its own (cost 0 vs 1),
    but any edge touching a configuration 0 costs 10.  Greedy: all 0, 4 edges * 10 = 40.
    Optimum: all 1, 4 nodes * 1 = 4."""
    nodes = [np.array([0.0, 1.0]) for _ in range(4)]
    e = np.array([[10.0, 10.0], [10.0, 0.0]])
    edges = [(0, 1, e), (0, 2, e), (1, 3, e), (2, 3, e)]
    assert eq1_cost(nodes, edges, [0, 0, 0, 0]) == 40.0
    for algorithm in ("elimination", "exhaustive"):
        choice, cost, _ = _search(nodes, edges, algorithm)
        assert cost == 4.0 and list(choice) == [1, 1, 1, 1], algorithm
    _, _, stats = _search(nodes, edges, "elimination")
    # a and b are node-eliminated, the two new s -> t edges merged, t (or s) leaf-eliminated
    assert stats["node_eliminations"] == 2 and stats["edge_eliminations"] == 1
    assert stats["algorithm1_residual_nodes"] == 2 and stats["residual_nodes"] == 1


def test_hand_computed_diamond_fork_pays_for_both_branches():
    """The fork's configuration 2 costs 3 on its own but saves 2 on each branch:
    s=0 -> 0 + 2 + 2 = 4, s=2 -> 3 + 0 + 0 = 3.  Greedy on s alone picks 0."""
    nodes = [np.array([0.0, 0.0, 3.0]), np.zeros(2), np.zeros(2), np.zeros(1)]
    fork = np.array([[2.0, 2.0], [2.0, 2.0], [0.0, 0.0]])
    join = np.zeros((2, 1))
    edges = [(0, 1, fork), (0, 2, fork), (1, 3, join), (2, 3, join)]
    for algorithm in ("elimination", "exhaustive"):
        choice, cost, _ = _search(nodes, edges, algorithm)
        assert cost == 3.0 and choice[0] == 2, algorithm


def test_non_series_parallel_residual_graph():
    """Edges x->a->c, x->b, b->c, b->d, c->d.  Eliminating a leaves x, b, c, d with
    x->b, x->c, b->c, b->d, c->d: no node has one in- and one out-edge, none is a leaf,
    so four nodes are left to variable elimination (width 2: after x or d goes, the rest
    is a triangle); a tiny limit gives the mini-bucket fallback with a valid bound."""
    rng = np.random.default_rng(3)
    n = 5  # 0 x, 1 a, 2 b, 3 c, 4 d
    pairs = [(0, 1), (1, 3), (0, 2), (2, 3), (2, 4), (3, 4)]
    nodes = [rng.uniform(0, 1, size=4) for _ in range(n)]
    edges = [(a, b, rng.uniform(0, 1, size=(4, 4))) for a, b in pairs]
    choice, cost, stats = _search(nodes, edges, "elimination")
    assert stats["residual_nodes"] == 4 and stats["node_eliminations"] == 1
    assert stats["exact"] and stats["residual_width"] == 2 and stats["residual_table"] == 16
    optimum = brute_force(nodes, edges)
    assert close(cost, optimum)
    choice, cost, stats = _search(nodes, edges, "elimination", limit=10.0)
    assert not stats["exact"]
    assert stats["lower_bound"] <= optimum * (1 + REL) and cost >= optimum * (1 - REL)
    assert close(eq1_cost(nodes, edges, choice), cost)


def test_hand_computed_dense_block():
    """Four ops, every pair joined (a residual graph of treewidth 3), two configurations each.
    Each op costs 1 in configuration 0 and 0 in configuration 1; each of the 6 edges costs 2
    when its ends differ.  All 1: cost 0, the optimum; elimination must find it although
    node 0 alone, with its edges to ops in configuration 0, would rather stay in 0."""
    nodes = [np.array([1.0, 0.0]) for _ in range(4)]
    differ = np.array([[0.0, 2.0], [2.0, 0.0]])
    edges = [(i, j, differ) for i in range(4) for j in range(i + 1, 4)]
    for algorithm in ("elimination", "exhaustive"):
        choice, cost, stats = _search(nodes, edges, algorithm)
        assert cost == 0.0 and list(choice) == [1, 1, 1, 1], algorithm
    _, _, stats = _search(nodes, edges, "elimination")
    assert stats["residual_nodes"] == 4 and stats["residual_width"] == 3 and stats["residual_table"] == 8
    # the all-0 strategy costs 4, one op switched alone costs 1 + 1 + 1 + 3 * 2 = ... > 0
    assert eq1_cost(nodes, edges, [0, 0, 0, 0]) == 4.0 and eq1_cost(nodes, edges, [1, 0, 0, 0]) == 9.0


@settings(max_examples=examples(300))
@given(table_problems(kinds=RESIDUAL_KINDS, max_cfg=4, max_combinations=5000))
def test_residual_graphs_match_python_brute_force(problem):
    """Crossing skips and dense blocks: node and edge elimination leave three or more ops,
    which variable elimination solves exactly (the optimum of a Python brute force)."""
    kind, node_costs, edges, _ = problem
    cost = _check_tables(kind, node_costs, edges)
    assert close(cost, brute_force(node_costs, edges), cost_scale(node_costs, edges))


@settings(max_examples=examples(200))
@given(table_problems(kinds=RESIDUAL_KINDS, max_cfg=5, max_combinations=20_000), st.sampled_from([1.0, 30.0, 300.0]))
def test_residual_fallback_bounds_the_optimum(problem, limit):
    """With a limit below what exact variable elimination needs, the search still answers:
    its lower bound is at most the optimum, its plan costs at least the optimum and exactly
    what it reports, and it says it is not exact."""
    kind, node_costs, edges, _ = problem
    scale = cost_scale(node_costs, edges)
    _, optimum, exact_stats = _search(node_costs, edges, "exhaustive")
    choice, cost, stats = _search(node_costs, edges, "elimination", limit=limit)
    note(f"{kind}: optimum {optimum!r}, fallback {cost!r}, bound {stats['lower_bound']!r}, {stats}")
    assert close(eq1_cost(node_costs, edges, choice), cost, scale)
    assert cost >= optimum - REL * scale
    assert stats["lower_bound"] <= optimum + REL * scale
    if not stats["exact"]:   # cheaper than exact elimination, and a real gap
        assert stats["evaluations"] <= _search(node_costs, edges, "elimination")[2]["evaluations"]
        assert stats["lower_bound"] < cost
    else:                    # the bound met the plan: proven optimal
        assert close(cost, optimum, scale)


def crossing_adds() -> tuple[sw.Graph, sw.DeviceGraph]:
    """Two 1x1 convolutions a, b; c = a + b; d = a + c; e = b + d; f = c + e; then flatten,
    linear, softmax, on cluster(1, 4)."""
    g = sw.Graph("crossing")
    x = g.input("x", (32, 16, 8, 8))
    a, b = g.conv2d(x, 16, kernel=1, name="a"), g.conv2d(x, 16, kernel=1, name="b")
    c = g.add(a, b, name="c")
    d = g.add(a, c, name="d")
    e = g.add(b, d, name="e")
    f = g.add(c, e, name="f")
    g.softmax(g.linear(g.flatten(f), 10), name="prob")
    devices = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4)
    return g, devices


def test_crossing_adds_graph_is_solved_without_refusal():
    """The graph of issue 16: two 1x1 convolutions a, b; c = a + b; d = a + c; e = b + d;
    f = c + e; then flatten, linear, softmax, on cluster(1, 4).  It used to be refused with
    "10^inf strategies"; variable elimination solves it exactly, to the optimum the
    enumeration finds when allowed to try every strategy."""
    g, devices = crossing_adds()
    plan = sw.search(g, devices, objective="eq1")
    s = plan.search_stats
    assert s["exact"] and s["residual_nodes"] >= 5 and s["residual_width"] >= 2
    exhaustive = sw.search(g, devices, algorithm="exhaustive", max_evaluations=1e300)
    assert close(plan.cost, exhaustive.cost)
    assert close(plan.cost, s["searched_cost"]) and s["lower_bound"] == s["searched_cost"]
    # the exhaustive refusal names its limit and the way around it, no "10^inf", no C file
    with pytest.raises(sw.SearchError) as err:
        sw.search(g, devices, algorithm="exhaustive")
    text = str(err.value)
    assert "max_evaluations=2e+07" in text and "algorithm='elimination'" in text
    assert "inf" not in text and ".c:" not in text and "[" not in text


# =========================================================================== random real graphs

DEVICE_CASES = device_graph_cases()
EXHAUSTIVE_LIMIT = 3e5  # strategies; larger random graphs are rebuilt with fewer ops


def _searched_pair(recipe, devices):
    """(elimination plan, exhaustive plan, graph), shrinking the graph until exhaustive fits."""
    for max_ops in range(8, 1, -1):
        g = build_graph(recipe, max_ops=max_ops)
        try:
            exhaustive = sw.search(g, devices, algorithm="exhaustive", max_evaluations=EXHAUSTIVE_LIMIT)
        except sw.SearchError as exc:
            assert "strategies" in str(exc)
            continue
        return sw.search(g, devices, objective="eq1"), exhaustive, g
    raise AssertionError("even a 2-op graph was too large for the exhaustive search")


def _check_real(recipe, devices):
    elim, exh, g = _searched_pair(recipe, devices)
    note(f"{recipe.describe()} -> {len(g)} ops {g.op_names()} on {devices.name} ({len(devices)} devices)")
    e_cost, x_cost = elim.search_stats["searched_cost"], exh.search_stats["searched_cost"]
    note(f"elimination {e_cost!r}, exhaustive {x_cost!r}")
    assert close(e_cost, x_cost), f"elimination {e_cost!r} != exhaustive {x_cost!r}"
    # the plans, re-evaluated from their configurations, cost what the searches said
    assert close(elim.cost, e_cost), f"plan.cost {elim.cost!r} != searched_cost {e_cost!r}"
    assert close(exh.cost, x_cost)
    assert close(sum(elim.breakdown.values()), elim.cost)
    assert elim.search_stats["residual_nodes"] <= len(g)
    for plan in (elim, exh):
        assert len(plan) == len(g)
        for name, cfg in plan:
            op = g[name]
            assert cfg.workers == len(cfg.devices) == len(set(cfg.devices))
            assert all(0 <= dv < len(devices) for dv in cfg.devices)
            assert all(size % k == 0 for size, k in zip(op.shape, cfg.degrees))
    # a user's plan with the same configurations costs the same
    spec = {name: {**cfg.as_dict(), "devices": list(cfg.devices)} for name, cfg in elim}
    assert close(sw.Plan.from_dict(g, devices, spec).cost, elim.cost)
    # the baselines lie inside the search space
    for base in baselines.baselines(g, devices):
        assert e_cost <= base.cost * (1 + REL), f"{base.name} {base.cost!r} beats the search {e_cost!r}"


@pytest.mark.parametrize("devices", list(DEVICE_CASES), ids=list(DEVICE_CASES))
@settings(max_examples=examples(40))
@given(recipe=graph_recipes())
def test_random_graphs_elimination_equals_exhaustive(devices, recipe):
    _check_real(recipe, DEVICE_CASES[devices])


@settings(max_examples=examples(120))
@given(recipe=graph_recipes(), devices=random_device_graphs())
def test_random_graphs_on_random_device_graphs(recipe, devices):
    _check_real(recipe, devices)


@settings(max_examples=examples(30))
@given(recipe=graph_recipes(max_ops=5))
def test_random_graphs_ring_all_reduce(recipe):
    devices = DEVICE_CASES["p100_1x4"]
    g = build_graph(recipe, max_ops=4)
    opts = sw.CostOptions(sync="ring")
    elim = sw.search(g, devices, sync="ring", objective="eq1")
    exh = sw.search(g, devices, algorithm="exhaustive", options=opts, max_evaluations=1e6)
    assert close(elim.search_stats["searched_cost"], exh.search_stats["searched_cost"])
    assert close(elim.cost, elim.search_stats["searched_cost"])
    assert elim.options.sync == "ring"


# =========================================================================== zoo vs baselines

ZOO_BATCH = 16  # divisible by every device count below
DEVICE_COUNTS = (2, 4, 8, 16)
_ZOO_CACHE: dict[str, sw.Graph] = {}


def _zoo(name: str) -> sw.Graph:
    if name not in _ZOO_CACHE:
        _ZOO_CACHE[name] = sw.models.get(name, batch=ZOO_BATCH)
    return _ZOO_CACHE[name]


def _cluster(count: int) -> sw.DeviceGraph:
    per = min(4, count)
    return sw.DeviceGraph.cluster(nodes=count // per, devices_per_node=per, device="P100")


@pytest.mark.parametrize("count", DEVICE_COUNTS)
@pytest.mark.parametrize("name", sw.models.names())
def test_searched_cost_never_exceeds_baselines(name, count):
    """Data, model and OWT parallelism lie inside the search space (issue point 6)."""
    g, d = _zoo(name), _cluster(count)
    assert len(d) == count
    plan = sw.search(g, d, objective="eq1")
    searched = plan.search_stats["searched_cost"]
    assert close(plan.cost, searched)
    for base in baselines.baselines(g, d):
        assert searched <= base.cost * (1 + REL), f"{name} on {count}: {base.name} {base.cost} < {searched}"


ODD_DEVICE_GRAPHS = {
    "cpu3": lambda: sw.DeviceGraph.cpu(3),
    "cpu5": lambda: sw.DeviceGraph.cpu(5),
    "2x3": lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=3),
    "3x4_k80": lambda: sw.DeviceGraph.cluster(nodes=3, devices_per_node=4, device="K80"),
}


@pytest.mark.parametrize("devices", list(ODD_DEVICE_GRAPHS))
@pytest.mark.parametrize("name", ["lenet5", "alexnet", "resnet18", "inception_v3"])
def test_searched_cost_never_exceeds_baselines_any_device_count(name, devices):
    """Device counts that are not powers of two (issue point 2: any count of devices)."""
    g, d = sw.models.get(name, batch=24), ODD_DEVICE_GRAPHS[devices]()
    plan = sw.search(g, d, objective="eq1")
    assert close(plan.cost, plan.search_stats["searched_cost"])
    for base in baselines.baselines(g, d):
        assert plan.cost <= base.cost * (1 + REL), f"{name} on {devices}: {base.name}"


@pytest.mark.parametrize("sync", ["ring"])
@pytest.mark.parametrize("count", (4, 16))
@pytest.mark.parametrize("name", ["lenet5", "alexnet", "resnet18"])
def test_searched_cost_never_exceeds_baselines_ring(name, count, sync):
    g, d = _zoo(name), _cluster(count)
    opts = sw.CostOptions(sync=sync)
    plan = sw.search(g, d, options=opts, objective="eq1")
    for base in baselines.baselines(g, d, opts):
        assert plan.cost <= base.cost * (1 + REL), f"{name} on {count}: {base.name}"


# =========================================================================== the papers' behaviour

@pytest.fixture(scope="module")
def cluster16() -> sw.DeviceGraph:
    return sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")


@pytest.mark.parametrize("name", ["alexnet", "vgg16"])
def test_paper_behaviour_on_16_p100(name, cluster16):
    """Seed 003 section 6.3 / seed 000 section 7.1.1: data-parallel early convolutions on all
    16 devices, fully-connected layers on fewer devices with channel parallelism, cost strictly
    below data, model and OWT, and several times fewer bytes moved than data parallelism."""
    g = sw.models.get(name, batch=512)
    plan = sw.search(g, cluster16, objective="eq1")
    convs = [op.name for op in g if op.kind == "conv2d"]
    fcs = [op.name for op in g if op.kind == "linear"]
    assert len(convs) >= 2 and len(fcs) >= 2
    for conv in convs[:2]:
        cfg = plan[conv]
        assert cfg["n"] == 16 and cfg.workers == 16, f"{conv}: {cfg}"
        assert sorted(cfg.devices) == list(range(16))
    for fc in fcs:
        assert plan[fc].workers < 16, f"{fc}: {plan[fc]}"
    assert plan[fcs[0]]["c"] > 1, f"{fcs[0]}: {plan[fcs[0]]}"
    data = baselines.data_parallel(g, cluster16)
    model = baselines.model_parallel(g, cluster16)
    owt = baselines.owt(g, cluster16)
    for base in (data, model, owt):
        assert plan.cost < base.cost, f"{base.name}: {base.cost} <= searched {plan.cost}"
    assert data.bytes_moved / plan.bytes_moved >= 3.0
    assert close(plan.cost, plan.search_stats["searched_cost"])


@pytest.mark.calibration
def test_crossing_adds_graph_is_solved_within_a_second():
    g, devices = crossing_adds()
    assert sw.search(g, devices, objective="eq1").search_stats["total_seconds"] < 1.0


SMALL_SYMMETRIC = [lambda: sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100"),
                   lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="V100"),
                   lambda: sw.DeviceGraph.cpu(4), lambda: sw.DeviceGraph.cpu(16)]


@pytest.mark.parametrize("machine", SMALL_SYMMETRIC, ids=["4x4_p100", "2x4_v100", "cpu4", "cpu16"])
@pytest.mark.parametrize("name", ["inception_v3", "resnet18", "alexnet"])
def test_small_machines_count_every_block_as_the_first_block_enumeration_does(name, machine):
    """On machines of at most ENUMERATE_FIRST devices the search decides between its plain and
    staged paths on the configurations of every aligned block, enumerated (which the plain path
    then searches), instead of the first-block enumeration's partitions times their blocks:
    both give each op the same count, and the enumeration it keeps is every aligned block's."""
    from shardwise.planning import search as search_module
    from shardwise.planning.problem import CostOptions, make_problem, worker_counts

    g, d = sw.models.get(name), machine()
    counts = worker_counts(len(d))
    assert len(d) <= search_module.ENUMERATE_FIRST
    first = make_problem(g, d, CostOptions(threads=1))
    first.enumerate(np.asarray(counts, dtype=np.int32), first_block_only=True)
    every = make_problem(g, d, CostOptions(threads=1))
    assert search_module._enumerate(every, d, counts)   # the aligned blocks are the search's sets
    assert search_module._configurations(every, g) == search_module._aligned_configurations(first, len(g.ops), len(d))
    for op in g.ops:   # each partition on each of its aligned blocks
        workers = first.workers(op.index)
        assert sorted(every.workers(op.index).tolist()) == sorted(
            k for k in workers.tolist() for _ in range(len(d) // k))


def test_chosen_rows_are_the_rows_of_every_configuration():
    """search._chosen_rows reads only the chosen configuration of every op out of the problem, in
    one call (Problem.chosen): the same degrees (the op's rank of them, then zeros), devices and
    reduction as the op's full listing, and its number of configurations; a choice out of range
    or of the wrong length is refused."""
    from shardwise.planning.problem import CostOptions, make_problem, worker_counts
    from shardwise.planning.search import _chosen_rows, _enumerate

    g, d = sw.models.get("resnet18"), sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="V100")
    p = make_problem(g, d, CostOptions(threads=1, reduction_splits=True))
    _enumerate(p, d, worker_counts(len(d)))
    rng = np.random.default_rng(1)
    for _ in range(3):
        choice = [int(rng.integers(len(p.workers(op.index)))) for op in g.ops]
        rows, ncfg = _chosen_rows(p, np.asarray(choice))
        assert len(rows) == len(ncfg) == len(g.ops)
        for op, k, (deg, dev, red), n in zip(g.ops, choice, rows, ncfg):
            all_deg, all_dev = p.configs(op.index)
            assert n == len(all_deg)
            rank = len(op.shape)
            assert deg[:rank] == tuple(all_deg[k].tolist()) and not any(deg[rank:])
            assert dev == tuple(all_dev[k][all_dev[k] >= 0].tolist())
            assert red == tuple(p.reductions(op.index)[k].tolist())
    with pytest.raises(IndexError, match="out of range"):
        p.chosen(np.asarray([len(p.workers(0))] + choice[1:]))
    with pytest.raises(ValueError, match="one configuration per op"):
        p.chosen(np.asarray(choice[:-1]))


@pytest.mark.parametrize("at", [0, 2047, 2048, 5000, 1024 * 1024 - 1])
def test_search_tables_refuses_a_nan_and_a_negative_under_a_cap_anywhere_in_a_table(at):
    """The input checks read tables in blocks: a NaN (or, under a finite marginals cap, a
    negative entry) at a block's edge or a large table's last entry is found as anywhere."""
    nodes = [np.zeros(1024), np.zeros(1024)]
    t = np.zeros((1024, 1024))
    t.flat[at] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        _core.search_tables(nodes, [(0, 1, t)], "elimination", 1e9)
    t.flat[at] = -1.0
    _core.search_tables(nodes, [(0, 1, t)], "elimination", 1e9)   # negative, no cap: fine
    with pytest.raises(ValueError, match=">= 0"):
        _core.search_tables(nodes, [(0, 1, t)], "elimination", 1e9, True, cap=1.0)


@pytest.mark.parametrize("seed", range(3))
def test_elimination_of_a_chain_of_unequal_ops_is_the_chain_optimum(seed):
    """Chains whose eliminations cost millions of min-plus steps each and differ by orders of
    magnitude (the elimination goes cheapest first there): the optimum and the strategy are
    the chain's, from a dynamic program along it, and the strategy costs what the search says."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice([8, 30, 150, 400], 14)
    nodes = [rng.random(int(s)) for s in sizes]
    edges = [(i, i + 1, rng.random((int(sizes[i]), int(sizes[i + 1])))) for i in range(len(sizes) - 1)]
    best = nodes[0]   # least cost of the chain up to op i, per configuration of op i
    for i, (_, _, t) in enumerate(edges):
        best = (best[:, None] + t).min(axis=0) + nodes[i + 1]
    choice, cost, stats = _core.search_tables(nodes, edges, "elimination", 1e9)
    assert stats["exact"]
    assert cost == pytest.approx(float(best.min()), rel=1e-12)
    walked = sum(n[c] for n, c in zip(nodes, choice)) + sum(t[choice[u], choice[v]] for u, v, t in edges)
    assert walked == pytest.approx(cost, rel=1e-12)


def test_tables_mapped_ahead_leave_the_elimination_as_it_is():
    """The elimination's tables of Inception-v3 on 16 devices (13 MB, from huge-page blocks whose
    pages are mapped ahead on other threads) give the same plan, cost and min-marginals with the
    pages mapped ahead as without."""
    from shardwise.planning.problem import make_problem, worker_counts

    g, d = sw.models.get("inception_v3"), sw.DeviceGraph.cpu(16)
    p = make_problem(g, d, sw.CostOptions(threads=1))
    p.enumerate(np.asarray(worker_counts(len(d)), dtype=np.int32))
    p.build_tables()
    found = []
    for on in (1, 0):
        old = _core.populate_ahead(on)
        try:
            choice, cost, _, marginals = p.search("elimination", marginals=True)
            found.append((list(choice), cost, [np.asarray(m) for m in marginals]))
        finally:
            _core.populate_ahead(old)
    (c1, e1, m1), (c0, e0, m0) = found
    assert c1 == c0 and e1 == e0
    assert all(np.array_equal(a, b) for a, b in zip(m1, m0))


def test_tables_kept_between_searches_give_each_search_what_fresh_memory_gives():
    """With the elimination's large blocks kept between searches (as the memory-constrained search
    keeps them over its Lagrangian steps), a search whose tables are cut from the blocks an other
    search wrote gives the plan, cost and min-marginals it gives on fresh memory; the blocks are
    kept while asked, and let go when the last keeper stops."""
    sizes = [40] + [300, 260] * 8 + [40]   # node eliminations of 300 x 260 x 300: blocks of huge pages

    def tables(seed):
        r = np.random.default_rng(seed)
        nodes = [r.random(s) for s in sizes]
        edges = [(i, i + 1, r.random((sizes[i], sizes[i + 1]))) for i in range(len(sizes) - 1)]
        edges += [(i, i + 2, r.random((sizes[i], sizes[i + 2]))) for i in range(0, len(sizes) - 2, 4)]
        return nodes, edges

    def search(seed):
        choice, cost, _, marginals = _core.search_tables(*tables(seed), "elimination", 1e9, True)
        return list(choice), cost, [np.asarray(m).copy() for m in marginals]

    fresh = {seed: search(seed) for seed in (1, 2)}
    assert _core.keep_search_tables(None) == 0
    _core.keep_search_tables(True)
    _core.keep_search_tables(True)   # nested
    try:
        again = [search(seed) for seed in (1, 2, 1, 2)]
        kept = _core.keep_search_tables(None)
        assert kept >= 4 << 20   # at least one block of huge pages kept
        assert _core.keep_search_tables(False) == kept   # the inner keeper stops: still kept
    finally:
        _core.keep_search_tables(False)
    assert _core.keep_search_tables(None) == 0
    for (c, e, m), seed in zip(again, (1, 2, 1, 2)):
        fc, fe, fm = fresh[seed]
        assert c == fc and e == fe
        assert all(np.array_equal(a, b) for a, b in zip(m, fm))


def test_products_of_a_sweep_made_on_threads_give_the_one_thread_search():
    """A node sweep makes its products together at its end, several at a time on threads and the
    large ones one after another on every thread: modules of four parallel branches (as
    Inception's) give the plan, cost and min-marginals, bit for bit, on one, two and three
    threads."""
    rng = np.random.default_rng(11)
    nodes, edges = [rng.random(30)], []
    for module in range(4):
        start = len(nodes) - 1
        ends = []
        for branch in range(4):
            prev = start
            for step in range(2 + branch % 2):
                size = int(rng.choice([40, 90, 300]))
                nodes.append(rng.random(size))
                edges.append((prev, len(nodes) - 1, rng.exponential(1.0, (len(nodes[prev]), size))))
                prev = len(nodes) - 1
            ends.append(prev)
        nodes.append(rng.random(int(rng.choice([60, 300]))))
        for e in ends:
            edges.append((e, len(nodes) - 1, rng.exponential(1.0, (len(nodes[e]), len(nodes[-1])))))
    found = []
    for threads in (1, 2, 3):
        choice, cost, stats, marginals = _core.search_tables(nodes, edges, "elimination", 1e9, True, threads)
        found.append((list(choice), cost, [np.asarray(m).copy() for m in marginals]))
    assert stats["node_eliminations"] >= 30
    for choice, cost, marginals in found[1:]:
        assert choice == found[0][0] and cost == found[0][1]
        assert all(np.array_equal(a, b) for a, b in zip(marginals, found[0][2]))
    # the cost is the plan's own sum of its node and edge costs
    walked = sum(n[c] for n, c in zip(nodes, found[0][0])) + sum(t[found[0][0][u], found[0][0][v]] for u, v, t in edges)
    assert walked == pytest.approx(found[0][1], rel=1e-12)
