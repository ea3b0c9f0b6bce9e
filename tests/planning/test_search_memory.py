"""Memory in the search (shardwise.planning.search_memory, csrc/cost/cost_memory.c).

* the footprint tables add up, for random plans of small zoo models (reduction splits
  included), to what the memory plan holds live when the backward pass starts (its
  ``activations_kept`` plus parameters, optimizer state and running statistics), and never
  exceed the memory plan's peak;
* the branch and bound returns the brute-force optimum of Eq. 1 under tight per-device
  budgets, and None exactly when brute force finds no strategy within them (random tables
  and small real graphs);
* sw.search respects each device's memory, raises PlanDoesNotFitError when nothing fits,
  keeps the unconstrained optimum when it fits, and pareto=True returns a front of plans.
"""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import shardwise as sw
from shardwise.planning import search_memory as sm
from shardwise.machine.devices import DeviceGraph
from shardwise.iteration.lower import op_roles, plan_arrays
from shardwise.models.spec import load_model
from shardwise.plan import OpConfig, Plan, reduction_config
from shardwise.planning.problem import CostOptions, dim_names, make_problem, worker_counts


def _problem(graph, devices, options, counts=None):
    problem = make_problem(graph, devices, options)
    problem.enumerate(np.asarray(counts or worker_counts(len(devices)), np.int32))
    problem.build_tables()
    return problem


def _plan(problem, graph, devices, options, choice):
    configs = {}
    for op in graph.ops:
        deg, dev = problem.configs(op.index)
        k = choice[op.index]
        configs[op.name] = OpConfig(dim_names(len(op.shape)), tuple(int(x) for x in deg[k]),
                                    tuple(int(x) for x in dev[k] if x >= 0),
                                    reduction_config(op, problem.reductions(op.index)[k]))
    return Plan(graph, devices, configs, options)


@pytest.mark.parametrize("sync", ["parameter_server", "ring", "zero"])
@pytest.mark.parametrize("model", ["vgg_small", "resnet18_small", "inception_small", "gpt_tiny"])
def test_footprint_is_what_the_memory_plan_keeps_for_the_backward_pass(model, sync):
    """sync zero: each ring member keeps the optimizer state of its own chunk alone."""
    rng = random.Random(model)
    graph = load_model(model, None).graph
    for spec in ("3", "2x2"):
        devices = DeviceGraph.parse(spec, device="P100")
        options = CostOptions(reduction_splits=model != "gpt_tiny", sync=sync)
        problem = _problem(graph, devices, options)
        tables = sm.Tables(problem, graph)
        for _ in range(3):
            choice = [rng.randrange(len(t)) for t in tables.time]
            plan = _plan(problem, graph, devices, options, choice)
            mp = sw.memory_plan(plan)
            kept = [mp.devices[d].activations_kept + sum(mp.devices[d].at_peak.get(k, 0) for k in
                                                          ("param", "momentum", "running_stats"))
                    for d in range(len(devices))]
            got = tables.footprint(choice)
            np.testing.assert_allclose(got, kept, rtol=0, atol=0.5)
            assert (got <= [mp.devices[d].peak_bytes for d in range(len(devices))]).all()
            assert tables.eq1(choice) == pytest.approx(plan.cost, rel=1e-9)


@pytest.mark.parametrize("sync", ["parameter_server", "zero"])
def test_footprint_counts_adam_state_twice(sync):
    graph = load_model("vgg_small", None).graph
    devices = DeviceGraph.parse("2", device="P100")
    options = CostOptions(sync=sync)
    problem = _problem(graph, devices, options)
    one = sm.Tables(problem, graph)
    problem.set_optimizer_state(2)
    two = sm.Tables(problem, graph)
    rng = random.Random(sync)
    for choice in ([0] * len(graph.ops), [rng.randrange(len(t)) for t in one.time]):
        extra = two.footprint(choice) - one.footprint(choice)
        plan = _plan(problem, graph, devices, options, choice)
        mp, adam = sw.memory_plan(plan), sw.memory_plan(plan, optimizer_state=2)
        assert extra.sum() == pytest.approx(sum(d.optimizer_state for d in mp.devices.values()))
        np.testing.assert_allclose(extra, [adam.devices[d].optimizer_state - mp.devices[d].optimizer_state
                                           for d in range(len(devices))], rtol=0, atol=0.5)


# ------------------------------------------------------------------ the branch and bound vs brute force

def _random_tables(rng: np.random.Generator, n: int, ndev: int) -> sm.Tables:
    """Tables of a random DAG (each op reads one or two earlier ones) with random Eq. 1 and footprints."""
    t = sm.Tables.__new__(sm.Tables)
    t.n, t.ndev = n, ndev
    ncfg = [int(rng.integers(1, 5)) for _ in range(n)]
    t.time = [rng.uniform(0, 10, c) for c in ncfg]
    rows = [rng.integers(0, 10, (c, ndev)).astype(float) for c in ncfg]   # every row its own (few repeat)
    t.edges, t.medges = [], []
    for v in range(1, n):
        for u in sorted(set(rng.integers(0, v, int(rng.integers(1, 3))).tolist())):
            t.edges.append((u, v, 0, rng.uniform(0, 5, (ncfg[u], ncfg[v]))))
            base = rng.integers(0, 6, (ncfg[v], ndev)).astype(float)
            idx, nbytes = [], []
            for ci in range(ncfg[u]):
                for cj in range(ncfg[v]):
                    d = int(rng.integers(0, ndev))
                    if base[cj, d] > 0 and rng.random() < 0.3:
                        idx.append((ci, cj, d))
                        nbytes.append(float(rng.integers(1, base[cj, d] + 1)))
            t.medges.append((u, v, 0, sum(len(r) for r in rows) + np.arange(ncfg[v]),
                             np.array(idx, np.int32).reshape(-1, 3), np.array(nbytes)))
            rows.append(base)
    t.rows = np.concatenate(rows)
    starts = np.cumsum([0] + ncfg)
    t.node_ids = [np.arange(starts[v], starts[v + 1]) for v in range(n)]
    return t


def _brute(t: sm.Tables, limit: np.ndarray):
    best = None
    for x in itertools.product(*[range(len(c)) for c in t.time]):
        if (t.footprint(x) <= limit).all():
            c = t.eq1(x)
            if best is None or c < best[0]:
                best = (c, x)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_branch_and_bound_equals_brute_force_under_tight_budgets(seed):
    rng = np.random.default_rng(seed)
    t = _random_tables(rng, int(rng.integers(2, 6)), int(rng.integers(1, 4)))
    everything = [t.footprint(x) for x in itertools.product(*[range(len(c)) for c in t.time])]
    peaks = np.array(everything)
    # budgets from "only the leanest strategy fits" to "most fit", and one nothing meets
    for q in (0.0, 0.1, 0.3, 0.6):
        limit = np.quantile(peaks, q, axis=0)
        want = _brute(t, limit)
        got = sm.solve(t, limit, max_solves=10_000)
        if want is None:
            assert got is None
            continue
        assert got is not None and got.exact
        assert (t.footprint(got.choice) <= limit).all()
        assert got.cost == pytest.approx(want[0], rel=1e-9, abs=1e-9)
        assert got.lower_bound <= got.cost * (1 + 1e-9)
    assert sm.solve(t, peaks.min(axis=0) - 1, max_solves=10_000) is None or \
        _brute(t, peaks.min(axis=0) - 1) is not None


@pytest.mark.parametrize("model", ["resnet18_small", "gpt_tiny"])
def test_weighted_tables_price_every_strategy_at_its_eq1_plus_priced_footprint(model):
    """The weighted tables the Lagrangian bounds search, summed along any strategy, equal
    wtime * Eq. 1 + lam . footprint of that strategy (the tables are built in one flat buffer;
    this is what each entry must add up to), and forbidden configurations cost BIG."""
    rng = np.random.default_rng(7)
    graph = load_model(model, None).graph
    devices = DeviceGraph.parse("2x2", device="P100")
    problem = _problem(graph, devices, CostOptions(reduction_splits=True))
    t = sm.Tables(problem, graph)
    for _ in range(3):
        lam = rng.random(len(devices)) * 1e-9
        wtime = float(rng.choice([1.0, 0.5]))
        allowed = [np.ones(len(c), bool) for c in t.time]
        nodes, edges = t.weighted(lam, wtime, allowed)
        for _ in range(5):
            x = [int(rng.integers(len(c))) for c in t.time]
            total = sum(n[x[v]] for v, n in enumerate(nodes)) + sum(m[x[u], x[v]] for u, v, m in edges)
            want = wtime * t.eq1(x) + float(lam @ t.footprint(x))
            assert total == pytest.approx(want, rel=1e-9, abs=1e-12)
    allowed[0][:] = False
    allowed[0][0] = True
    nodes, _ = t.weighted(lam, 1.0, allowed)
    assert (nodes[0][1:] == sm.BIG).all() and nodes[0][0] < sm.BIG


def test_weighted_tables_price_each_configuration_bit_for_bit_and_again_after_other_prices():
    """A configuration's weighted node cost is wtime * its time + the price of its node row plus
    its memory edges' base rows, added in edge order (summed once per distinct combination of
    rows: the same bits); and the freed-bytes tables, one buffer rewritten by every call, hold
    the second call's prices as a fresh Tables' first call does."""
    rng = np.random.default_rng(3)
    graph = sw.models.gpt(layers=3, d_model=32, heads=2, seq=16, vocab=64, batch=4)
    devices = DeviceGraph.parse("2x2", device="P100")
    problem = _problem(graph, devices, CostOptions(reduction_splits=True))
    t = sm.Tables(problem, graph)
    assert any(len(idx) for *_, idx, _ in t.medges)   # freed bytes: their tables are tested here
    allowed = [np.ones(len(c), bool) for c in t.time]
    first = rng.random(len(devices)) * 1e-9
    lam = rng.random(len(devices)) * 1e-9
    t.weighted(first, 1.0, allowed)
    nodes, edges = t.weighted(lam, 1.0, allowed)
    row_lam = t.rows @ lam
    for v in range(t.n):
        into = [base for _, w, _, base, _, _ in t.medges if w == v]
        for c in range(len(t.time[v])):
            based = 0.0
            for base in into:
                based += row_lam[base[c]]
            assert nodes[v][c] == t.time[v][c] + (row_lam[t.node_ids[v][c]] + based)
    fresh_nodes, fresh_edges = sm.Tables(problem, graph).weighted(lam, 1.0, allowed)
    assert len(edges) == len(fresh_edges)
    for (u, v, a), (fu, fv, b) in zip(edges, fresh_edges):
        assert (u, v) == (fu, fv)
        np.testing.assert_array_equal(a, b)


def test_edge_times_are_the_edge_tables_with_shared_tables_as_one_array():
    graph = sw.models.gpt(layers=3, d_model=32, heads=2, seq=16, vocab=64, batch=4)
    problem = _problem(graph, DeviceGraph.parse("2x2", device="P100"), CostOptions())
    times = problem.edge_times()
    assert len(times) == len(problem.edges())
    for e, t in enumerate(times):
        np.testing.assert_array_equal(t, problem.edge_table(e)[0])
    assert len({id(t) for t in times}) < len(times) // 2


def test_repeated_layers_share_tables_and_price_strategies_exactly():
    """A transformer's layers have equal tables: Tables shares them as one array (so the
    elimination reuses its products and sums), and one weighted table serves every edge that
    frees the same bytes.  Shared or not, strategies price the same: the footprint equals the
    memory edges summed one by one, and the search over copies of every table (nothing shared)
    returns the same strategy and cost."""
    rng = np.random.default_rng(11)
    graph = sw.models.gpt(layers=4, d_model=32, heads=2, seq=16, vocab=64, batch=4)
    devices = DeviceGraph.parse("2x2", device="P100")
    t = sm.Tables(_problem(graph, devices, CostOptions(reduction_splits=True)), graph)
    lam = rng.random(len(devices)) * 1e-9
    allowed = [np.ones(len(c), bool) for c in t.time]
    nodes, edges = t.weighted(lam, 1.0, allowed)
    assert len({id(e) for *_, e in edges}) < len(edges) // 2
    # groups of freed bytes with equal entries are summed once, to the bits of every entry's sum
    p = t._packed()
    assert 0 < len(p["distinct_starts"]) < len(p["group_distinct"])
    order = p["order"]
    each = np.add.reduceat(p["nbytes"][order] * lam[p["dev"][order]], p["group_start"])
    assert np.array_equal(p["freed_buffer"][p["group_flat"]], -each)
    # each distinct row of bytes per device is stored once, and configurations share them
    assert len(np.unique(t.rows, axis=0)) == len(t.rows) < sum(len(i) for i in t.node_ids) // 2
    choice, cost, _ = sm._core.search_tables(nodes, edges, "elimination", 1e9)
    copied = [(u, v, np.array(e)) for u, v, e in edges]
    c_choice, c_cost, stats = sm._core.search_tables(nodes, copied, "elimination", 1e9)
    assert list(c_choice) == list(choice) and c_cost == pytest.approx(cost, rel=1e-12)
    assert stats["reused_products"] == 0
    strategies = [list(choice)] + [[int(rng.integers(len(c))) for c in t.time] for _ in range(20)]
    freed_hits = 0
    for x in strategies:
        direct = sum(m[xi] for m, xi in zip(t.mem, x))
        for u, v, _, base, idx, nbytes in t.medges:
            idx = np.asarray(idx).reshape(-1, 3)
            hit = (idx[:, 0] == x[u]) & (idx[:, 1] == x[v])
            freed_hits += int(hit.any())
            direct = direct + t.rows[base[x[v]]] - np.bincount(idx[hit, 2], weights=np.asarray(nbytes)[hit],
                                                                  minlength=t.ndev)
        np.testing.assert_array_equal(t.footprint(x), direct)   # whole bytes: exact in any order
        total = sum(n[x[v]] for v, n in enumerate(nodes)) + sum(m[x[u], x[v]] for u, v, m in edges)
        assert total == pytest.approx(t.eq1(x) + float(lam @ direct), rel=1e-9)
    assert freed_hits > 0   # the strategies met freed bytes, so the shared freed tables were read


@pytest.mark.parametrize("sync", ["ring", "zero"])
def test_repeated_layers_footprint_of_baselines_is_what_the_memory_plan_keeps(sync):
    """The memory tables of twin ops (every layer of a transformer after the first) are copied
    from the first layer's: the plans that share most regions with their producers (data and
    model parallelism, every op split alike) keep what the footprint says."""
    graph = sw.models.gpt(layers=4, d_model=32, heads=2, seq=16, vocab=64, batch=4)
    devices = DeviceGraph.parse("2x2", device="P100")
    options = CostOptions(sync=sync)
    problem = _problem(graph, devices, options)
    tables = sm.Tables(problem, graph)
    for base in (sw.strategies.data_parallel(graph, devices, options=options),
                 sw.strategies.model_parallel(graph, devices, options=options)):
        choice = []
        for op in graph.ops:
            deg, dev = problem.configs(op.index)
            cfg = base.configs[op.name]
            want = list(cfg.degrees) + [1] * (deg.shape[1] - len(cfg.degrees))
            hits = [k for k in range(len(deg)) if list(deg[k]) == want
                    and tuple(int(x) for x in dev[k] if x >= 0) == tuple(cfg.devices)
                    and reduction_config(op, problem.reductions(op.index)[k]) == cfg.reduction]
            choice.append(hits[0])
        mp = sw.memory_plan(_plan(problem, graph, devices, options, choice))
        kept = [mp.devices[d].activations_kept + sum(mp.devices[d].at_peak.get(k, 0) for k in
                                                      ("param", "momentum", "running_stats"))
                for d in range(len(devices))]
        np.testing.assert_allclose(tables.footprint(choice), kept, rtol=0, atol=0.5)


def test_a_subset_of_the_tables_prices_strategies_as_the_whole():
    """Tables.subset(keep): every strategy over the kept configurations has the Eq. 1 and the
    footprint it has in the whole tables (node rows, edge blocks and the freed bytes remapped)."""
    rng = np.random.default_rng(3)
    graph = load_model("resnet18_small", None).graph
    devices = DeviceGraph.parse("2x2", device="P100")
    whole = sm.Tables(_problem(graph, devices, CostOptions(reduction_splits=True, sync="zero")), graph)
    keep = [np.sort(rng.choice(len(t), size=max(1, len(t) // 2), replace=False)) for t in whole.time]
    part = whole.subset(keep)
    assert [len(t) for t in part.time] == [len(k) for k in keep]
    lam = rng.random(len(devices)) * 1e-9
    nodes, edges = part.weighted(lam, 1.0, [np.ones(len(k), bool) for k in keep])
    for _ in range(20):
        x = [int(rng.integers(len(k))) for k in keep]
        y = [int(k[i]) for k, i in zip(keep, x)]
        assert part.eq1(x) == whole.eq1(y)
        np.testing.assert_array_equal(part.footprint(x), whole.footprint(y))
        total = sum(n[x[v]] for v, n in enumerate(nodes)) + sum(m[x[u], x[v]] for u, v, m in edges)
        assert total == pytest.approx(whole.eq1(y) + float(lam @ whole.footprint(y)), rel=1e-9)


def test_branch_and_bound_on_a_real_graph_equals_brute_force():
    graph = sw.Graph("chain")
    x = graph.input("x", (8, 4, 4, 4))
    y = graph.conv2d(x, 8, 3, padding=1)
    y = graph.flatten(y)
    y = graph.linear(y, 10)
    graph.softmax(y)
    devices = DeviceGraph.parse("2", device="P100")
    options = CostOptions()
    problem = _problem(graph, devices, options)
    t = sm.Tables(problem, graph)
    peaks = np.array([t.footprint(x) for x in itertools.product(*[range(len(c)) for c in t.time])])
    for q in (0.05, 0.2, 0.5):
        limit = np.quantile(peaks.max(axis=1), q) * np.ones(len(devices))
        want = _brute(t, limit)
        got = sm.solve(t, limit, max_solves=10_000)
        assert (want is None) == (got is None)
        if want is not None:
            assert got.exact and got.cost == pytest.approx(want[0], rel=1e-9)



def test_memory_tables_list_freed_bytes_by_place_in_the_edge_table():
    """The C memory tables give each edge's freed bytes ordered by (producer configuration,
    consumer configuration, device), copies of a twin edge included: the search groups them
    by place without sorting."""
    graph = sw.models.gpt(layers=3, d_model=32, heads=2, seq=16, vocab=64, batch=4)
    devices = DeviceGraph.parse("2x2", device="P100")
    t = sm.Tables(_problem(graph, devices, CostOptions(reduction_splits=True)), graph)
    entries = 0
    for *_, idx, _ in t.medges:
        idx = np.asarray(idx, np.int64).reshape(-1, 3)
        entries += len(idx)
        order = np.lexsort((idx[:, 2], idx[:, 1], idx[:, 0]))
        np.testing.assert_array_equal(order, np.arange(len(idx)))
    assert entries > 0


@pytest.mark.parametrize("model", ["gpt", "inception_v3"])
def test_memory_tables_made_on_threads_are_one_threads(model):
    """The memory tables' terms are made on the problem's threads and merged in op and edge
    order: every row, row id and freed entry is the one a single thread makes (twin layers
    and ops without twins both)."""
    graph = (sw.models.gpt(layers=3, d_model=32, heads=2, seq=16, vocab=64, batch=4) if model == "gpt"
             else sw.models.get("inception_v3", batch=8))
    devices = DeviceGraph.parse("2x4", device="P100")
    made = []
    for threads in (1, 3):
        problem = _problem(graph, devices, CostOptions(reduction_splits=True, threads=threads))
        made.append(problem.memory_tables(op_roles(graph)))
    (rows1, node1, edges1), (rows3, node3, edges3) = made
    np.testing.assert_array_equal(rows1, rows3)
    assert len(rows1) > 1
    for a, b in zip(node1, node3):
        np.testing.assert_array_equal(a, b)
    assert len(edges1) == len(edges3) > 0
    freed = 0
    for a, b in zip(edges1, edges3):
        assert a[:3] == b[:3]
        for x, y in zip(a[3:], b[3:]):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        freed += len(np.asarray(a[5]))
    assert freed > 0


@pytest.mark.parametrize("seed", range(4))
def test_footprint_and_weighting_do_not_depend_on_the_order_of_freed_entries(seed):
    """Tables given freed bytes in any order (not the C tables' sorted one) group them by place
    all the same: footprints and weighted tables equal those of the sorted entries."""
    rng = np.random.default_rng(100 + seed)
    t = _random_tables(rng, 5, 3)
    while sum(len(m[4]) for m in t.medges) < 6:   # enough freed entries for their order to matter
        t = _random_tables(rng, 5, 3)
    shuffled = sm.Tables.__new__(sm.Tables)
    shuffled.__dict__.update({k: v for k, v in t.__dict__.items() if k != "_packed_cache"})
    shuffled.medges = []
    for u, v, slot, base, idx, nbytes in t.medges:
        perm = rng.permutation(len(idx))[::-1]
        shuffled.medges.append((u, v, slot, base, np.asarray(idx)[perm], np.asarray(nbytes)[perm]))
    lam = rng.random(3)
    allowed = [np.ones(len(c), bool) for c in t.time]
    a_nodes, a_edges = t.weighted(lam, 1.0, allowed)
    b_nodes, b_edges = shuffled.weighted(lam, 1.0, allowed)
    for x in itertools.product(*[range(len(c)) for c in t.time]):
        np.testing.assert_allclose(shuffled.footprint(x), t.footprint(x), rtol=1e-12)
        a = sum(n[x[v]] for v, n in enumerate(a_nodes)) + sum(m[x[u], x[v]] for u, v, m in a_edges)
        b = sum(n[x[v]] for v, n in enumerate(b_nodes)) + sum(m[x[u], x[v]] for u, v, m in b_edges)
        assert b == pytest.approx(a, rel=1e-12)


def test_nothing_fits_on_the_devices_the_configurations_use_is_proven_at_once(monkeypatch):
    """Configurations that put bytes on the first two of twenty devices only (the staged search
    of a large machine restricted to small partitions): when their least footprint there
    exceeds those two devices' budgets, the search says none fits after two eliminations,
    although the twenty devices' budgets together would hold it (above 16 devices there is
    no certificate per device)."""
    rng = np.random.default_rng(7)
    t = _random_tables(rng, 4, 20)
    t.rows = t.rows.copy()
    t.rows[:, 2:] = 0.0
    t.__dict__.pop("_packed_cache", None)
    least = min(float(t.footprint(x)[:2].sum()) for x in itertools.product(*[range(len(c)) for c in t.time]))
    limit = np.array([least * 0.45] * 2 + [1e9] * 18)   # the two used ones hold 90% of the least
    assert _brute(t, limit) is None
    assert least <= limit.sum()   # the certificate over every device proves nothing here
    solves = []
    real = sm._Solver.solve_tables
    monkeypatch.setattr(sm._Solver, "solve_tables", lambda self, *a: solves.append(1) or real(self, *a))
    assert sm.solve(t, limit, max_solves=50) is None
    assert len(solves) == 2   # the bound over every device, then over the two used: no branch and bound
    # the same configurations as a subset of tables whose other configurations use every device
    # (the subset shares their rows): the devices in use are still the two
    whole = sm.Tables.__new__(sm.Tables)
    whole.__dict__.update({k: v for k, v in t.__dict__.items() if k != "_packed_cache"})
    extra = np.full((1, 20), 1.0)   # one more configuration of op 0, on every device
    whole.rows = np.concatenate([t.rows, extra])
    whole.node_ids = [np.append(t.node_ids[0], len(t.rows))] + list(t.node_ids[1:])
    whole.time = [np.append(t.time[0], 0.0)] + list(t.time[1:])
    whole.edges = [(u, v, slot, np.vstack([tab, tab[:1]]) if u == 0 else tab) for u, v, slot, tab in t.edges]
    whole.medges = [(u, v, slot, base, idx, nb) for u, v, slot, base, idx, nb in t.medges]
    part = whole.subset([np.arange(len(i)) for i in t.node_ids])
    solves.clear()
    assert sm.solve(part, limit, max_solves=50) is None
    assert len(solves) == 2


def test_the_staged_memory_stage_plans_the_memory_of_a_plan_once(monkeypatch):
    """Steps of the staged memory search that end on the same plan read its arenas from the
    first memory plan made (equal configurations, other Plan objects), and the simulator
    replays the task graph that memory plan was made on: the same seconds as lowering again."""
    from shardwise.iteration.simulate import iteration_time
    from shardwise.planning.search_scale_memory import MemoryStage

    graph, devices = _small()
    options = CostOptions()
    made = []
    real = sm.arenas_lowered
    monkeypatch.setattr(sm, "arenas_lowered", lambda plan: made.append(plan) or real(plan))
    stage = MemoryStage(graph, devices, options, None, sm.budgets(devices, True), 1e9)
    a = sw.strategies.data_parallel(graph, devices, options=options)
    b = Plan(graph, devices, dict(a.configs), options)
    c = sw.strategies.model_parallel(graph, devices, options=options)
    assert stage.task_graph(b) is None   # not planned yet
    np.testing.assert_array_equal(stage.arenas(a), real(a)[0])
    np.testing.assert_array_equal(stage.arenas(b), stage.arenas(a))
    assert len(made) == 1
    stage.arenas(c)
    assert len(made) == 2
    tg = stage.task_graph(b)
    assert tg.plan is b and tg.handle is stage.task_graph(a).handle
    assert iteration_time(tg) == iteration_time(b)


# ------------------------------------------------------------------ sw.search with memory

def _small():
    graph = load_model("vgg_small", None).graph
    return graph, DeviceGraph.parse("4", device="P100")


def test_search_keeps_the_unconstrained_optimum_when_it_fits():
    graph, devices = _small()
    free = sw.search(graph, devices, objective="eq1", memory=False)
    plan = sw.search(graph, devices, objective="eq1")
    assert plan.configs == free.configs
    assert plan.search_stats["memory"]["constrained"] is False


def test_search_under_a_budget_fits_and_costs_at_least_the_unconstrained():
    graph, devices = _small()
    free = sw.search(graph, devices, objective="eq1", memory=False)
    arena = sm.arenas(free)
    budget = 0.95 * float(arena.max())   # below the Eq. 1 optimum, above OWT parallelism
    plan = sw.search(graph, devices, objective="eq1", memory=budget)
    assert (sm.arenas(plan) <= budget).all()
    assert plan.cost >= free.cost * (1 - 1e-9)
    info = plan.search_stats["memory"]
    assert info["constrained"] and info["lower_bound"] <= plan.cost * (1 + 1e-9)
    simulated = sw.search(graph, devices, memory=budget)   # the default objective keeps it too
    assert (sm.arenas(simulated) <= budget).all()


def test_search_raises_when_nothing_fits():
    graph, devices = _small()
    with pytest.raises(sm.PlanDoesNotFitError, match="no plan fits.*device.*swap_plan") as err:
        sw.search(graph, devices, memory=1e5)
    assert isinstance(err.value, ValueError)
    assert err.value.needed > err.value.available == 1e5
    assert err.value.proven


def test_search_that_stops_unproven_names_its_nearest_miss(monkeypatch):
    """The branch and bound out of eliminations with no plan that fits and no proof: the error
    is a PlanDoesNotFitError all the same (``proven`` False, said in words), naming the nearest
    miss and what would help."""
    graph, devices = _small()

    def unproven(*args, **kwargs):
        raise sm.UnprovenError("found none (could not prove)", 5)

    monkeypatch.setattr(sm, "fitting", unproven)
    with pytest.raises(sm.PlanDoesNotFitError) as err:
        sw.search(graph, devices, memory=1e5)
    e = err.value
    assert not e.proven and e.needed > e.available == 1e5
    assert "within 5 elimination searches (and could not prove that none does)" in str(e)
    assert "swap_plan" in str(e) and "recompute=True" in str(e)


@pytest.mark.parametrize("bad", ["lots", -1, 0, "12 parsecs", [1]])
def test_search_rejects_malformed_budgets(bad):
    graph, devices = _small()
    with pytest.raises(ValueError, match="memory"):
        sw.search(graph, devices, memory=bad)


def test_parse_bytes():
    assert sm.parse_bytes("12GB") == 12e9
    assert sm.parse_bytes("8 GiB") == 8 * 2**30
    assert sm.parse_bytes(1.5e9) == 1.5e9


def test_pareto_front_is_non_dominated_and_each_plan_fits_its_peak():
    graph, devices = _small()
    front = sw.search(graph, devices, pareto=True)
    assert len(front) >= 1
    free = sw.search(graph, devices, objective="eq1", memory=False)
    assert front[0].time == pytest.approx(free.cost, rel=1e-9)
    for a, b in zip(front, front[1:]):
        assert b.time >= a.time * (1 - 1e-9) and b.peak_bytes < a.peak_bytes
    for p in front:
        assert p.peak_bytes == max(d.arena_bytes for d in p.memory.devices.values())
        assert p.time == pytest.approx(p.plan.cost, rel=1e-9)


def test_a_passed_deadline_stops_the_branch_and_bound_once_a_plan_fits(monkeypatch):
    """solve(..., deadline=) in the past: the search returns the first plan that fits (not proven
    unless it is), never more elimination searches than without it, and None exactly when no
    strategy fits; on some tables it stops early."""
    import time

    monkeypatch.setattr(sm, "MAX_SOLVES", 3000)
    stopped_early = 0
    for seed in range(40):
        rng = np.random.default_rng(500 + seed)
        t = _random_tables(rng, int(rng.integers(3, 7)), int(rng.integers(1, 4)))
        peaks = np.array([t.footprint(x) for x in itertools.product(*[range(len(c)) for c in t.time])])
        limit = np.quantile(peaks, 0.2, axis=0)
        full = sm.solve(t, limit)
        quick = sm.solve(t, limit, deadline=time.perf_counter() - 1.0)
        assert (quick is None) == (full is None)
        if full is None:
            continue
        assert (t.footprint(quick.choice) <= limit).all()
        assert quick.cost >= full.cost * (1 - 1e-9) and quick.solves <= full.solves
        assert quick.lower_bound <= full.cost * (1 + 1e-9)
        if quick.exact:
            assert quick.cost == pytest.approx(full.cost, rel=1e-9)
        stopped_early += quick.solves < full.solves
    assert stopped_early >= 3
