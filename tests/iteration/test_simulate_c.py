"""The C simulator (sim_durations.c, order.c, sim_plan.c, simulate.c) against the oracle.

Its durations must be the oracle's (tests/sim_oracle.py), and ``simulate`` must give what
the oracle's replay gives (the task graph of ``sw.lower``, Python durations, the runtime's
order with the memory plan's reuse edges, a Python event loop), task for task, with the
roofline model and with measured costs.  The task graphs of the same random and zoo plans
are checked for their data flow and bytes (tests/iteration/test_lower.py).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise as sw
from shardwise import _core
from shardwise.iteration.lower import lower
from shardwise.plan import reduction_pair
from shardwise.planning.problem import make_problem
from shardwise.planning.profile import Profile
from shardwise.iteration.simulate import plan_arrays, simulate

import sim_oracle
from test_lower import check_task_graph
from strategies_random import build_graph, device_graph_cases, examples, graph_recipes, random_plan

DEVICE_CASES = device_graph_cases()


# --------------------------------------------------------------------------- helpers
def assert_same_simulation(plan, costs=None) -> None:
    a = simulate(plan, check_memory=False, costs=costs)
    b = sim_oracle.replay(plan, costs)
    tg = lower(plan)
    assert a.iteration_time == pytest.approx(b.iteration_time, rel=1e-12, abs=1e-18)
    assert a.bytes_moved == tg.bytes_moved()
    mp = sw.memory_plan(plan)   # the simulation checks the runtime's arenas, not buffers counted apart
    assert a.memory == {d: m.arena_bytes for d, m in mp.devices.items()}
    assert sorted(a.device_busy) == sorted(b.busy)
    for d in a.device_busy:
        assert a.device_busy[d] * a.iteration_time == pytest.approx(b.busy[d], rel=1e-12, abs=1e-15)
    assert len(a.events) == len(tg.tasks)
    for x, t in zip(a.events, tg.tasks):
        assert (x.task, x.kind, x.phase, x.op) == (t.id, t.kind, t.phase, t.op)
        assert x.resources == b.resources[t.id]
        assert x.start == pytest.approx(b.start[t.id], rel=1e-12, abs=1e-18)
        assert x.end == pytest.approx(b.end[t.id], rel=1e-12, abs=1e-18)


def fake_profile(plan, rng: np.random.Generator, coverage: float = 1.0) -> Profile:
    """Measured-looking costs for every op's partition in ``plan`` (a fraction ``coverage`` of
    them: the rest keep the roofline), bookkeeping rates and a copy bandwidth."""
    times = {}
    for op in plan.graph.ops:
        if rng.random() < coverage:
            times[(op.name, plan[op.name].degrees)] = (float(rng.uniform(1e-5, 1e-3)), float(rng.uniform(1e-5, 2e-3)))
    kinds = ("copy", "accumulate", "reduce", "stats_reduce", "update")
    rates = {k: float(rng.uniform(1e-10, 1e-9)) for k in kinds}
    fixed = {k: float(rng.uniform(0, 2e-5)) for k in kinds if rng.random() < 0.7}
    return Profile(plan.graph.fingerprint(), {}, times, float(rng.uniform(1e9, 5e9)), rates,
                   step_overhead=float(rng.uniform(0, 1e-4)), element_fixed=fixed)


# --------------------------------------------------------------------------- random graphs and plans
@settings(max_examples=examples(60), deadline=None)
@given(recipe=graph_recipes(max_ops=8), case=st.sampled_from(sorted(DEVICE_CASES)), seed=st.integers(0, 2**31))
def test_random_plans_lower_and_simulate_the_same_in_c(recipe, case, seed):
    g = build_graph(recipe)
    plan = random_plan(g, DEVICE_CASES[case], np.random.default_rng(seed))
    check_task_graph(plan)
    assert_same_simulation(plan)


@settings(max_examples=examples(60), deadline=None)
@given(recipe=graph_recipes(max_ops=8), case=st.sampled_from(sorted(DEVICE_CASES)), seed=st.integers(0, 2**31))
def test_random_plans_with_reduction_splits_lower_and_simulate_the_same_in_c(recipe, case, seed):
    """Partition-n-reduce: forward_partial / sum_partials / activation_grad tasks, owners holding the
    output blocks, and the reduction-aware worker times, task for task as lower.py."""
    g = build_graph(recipe)
    rng = np.random.default_rng(seed)
    plan = random_plan(g, DEVICE_CASES[case], rng, reductions=True)
    check_task_graph(plan)
    assert_same_simulation(plan)
    assert_same_simulation(plan, costs=fake_profile(plan, rng, 1.0))


@settings(max_examples=examples(25), deadline=None)
@given(recipe=graph_recipes(max_ops=8), case=st.sampled_from(sorted(DEVICE_CASES)), seed=st.integers(0, 2**31),
       coverage=st.sampled_from([0.0, 0.5, 1.0]))
def test_random_plans_with_measured_costs_simulate_the_same_in_c(recipe, case, seed, coverage):
    g = build_graph(recipe)
    rng = np.random.default_rng(seed)
    plan = random_plan(g, DEVICE_CASES[case], rng)
    assert_same_simulation(plan, costs=fake_profile(plan, rng, coverage))


# --------------------------------------------------------------------------- zoo models
@pytest.mark.parametrize("model,nodes,per,device", [("lenet5", 1, 2, "P100"), ("alexnet", 2, 2, "P100"),
                                                     ("resnet18", 1, 4, "P100"), ("inception_v3", 2, 2, "P100"),
                                                     ("vgg16", 1, 4, "P100"), ("alexnet", 2, 2, "H100")])
def test_zoo_plans_lower_and_simulate_the_same_in_c(model, nodes, per, device):
    g = sw.models.get(model, batch=32)
    d = sw.DeviceGraph.cluster(nodes=nodes, devices_per_node=per, device=device)
    for plan in [sw.search(g, d), *sw.strategies.baselines(g, d)]:
        check_task_graph(plan)
        assert_same_simulation(plan)


@pytest.mark.parametrize("model", ["lenet5", "resnet18"])
def test_zoo_plans_on_cpu_workers_with_a_profile(model):
    g = sw.models.get(model, batch=16)
    d = sw.DeviceGraph.cpu(3)
    rng = np.random.default_rng(7)
    for plan in [sw.search(g, d), sw.strategies.data_parallel(g, d)]:
        check_task_graph(plan)
        assert_same_simulation(plan, costs=fake_profile(plan, rng))


def test_durations_are_the_oracles():
    g = sw.models.get("resnet18", batch=32)
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=2)
    plan = sw.search(g, d)
    problem = make_problem(g, d, plan.options)
    r = problem.simulate_plan(*plan_arrays(plan), np.zeros(len(d) ** 2 + 1, np.int32), np.zeros(0, np.int32),
                              len(d), copy_bandwidth=1e9)
    assert r["modelled"].tolist() == pytest.approx(sim_oracle.task_durations(lower(plan)), rel=1e-15, abs=0)


def test_worker_times_add_up_to_t_c():
    """The per-worker roofline is the term of t_c: backward_factor x the slowest worker."""
    g = sw.models.get("alexnet", batch=32)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4)
    plan = sw.search(g, d)
    problem = make_problem(g, d, plan.options)
    for row in plan.layer_costs():
        op, cfg = g[row.op], plan[row.op]
        times = problem.worker_times(op.index, np.asarray(cfg.degrees, np.int32), np.asarray(cfg.devices, np.int32))
        assert len(times) == cfg.workers
        assert max(times) * plan.options.backward_factor == pytest.approx(row.t_c, rel=1e-15, abs=0)


def test_events_are_built_only_when_asked():
    g = sw.models.lenet5(batch=8)
    sim = simulate(sw.search(g, sw.DeviceGraph.cpu(2)))
    assert callable(sim._events)
    first = sim.events
    assert sim.events is first and len(first) > 0
    assert {e.kind for e in first} >= {"forward", "backward_data", "update"}


def test_ring_synchronization_is_simulated():
    """A ring plan's tasks are replayed: its time, and the bytes the ring cost model charges."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    plan = sw.strategies.data_parallel(g, d)
    ring = sw.Plan(g, d, plan.configs, sw.CostOptions(sync="ring"))
    r = simulate(ring)
    assert 0 < r.iteration_time < float("inf")
    assert r.bytes_moved == pytest.approx(ring.bytes_moved, abs=0.5)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("entry", ["lower", "buffer_totals"])
def test_bad_plans_are_refused_with_clear_errors(entry):
    """Problem.lower and Problem.buffer_totals (the lowering without its tasks) refuse a bad
    plan with the same clear errors."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(2)
    plan = sw.strategies.data_parallel(g, d)
    problem = make_problem(g, d, plan.options)
    kinds, degrees, dev_ptr, devs = plan_arrays(plan)
    lower = getattr(problem, entry)
    with pytest.raises(ValueError, match="kinds"):
        lower(kinds[:-1], degrees, dev_ptr, devs)
    with pytest.raises(ValueError, match="dev_ptr"):
        lower(kinds, degrees, dev_ptr, devs[:-1])
    bad = degrees.copy()
    bad[1, 0] = 3                         # does not divide the batch of 8
    with pytest.raises(ValueError, match="degree 3 does not divide"):
        lower(kinds, bad, dev_ptr, devs)
    twice = devs.copy()
    twice[1] = twice[0]                   # op 0's two workers on one device
    with pytest.raises(ValueError, match="distinct devices"):
        lower(kinds, degrees, dev_ptr, twice)
    far = devs.copy()
    far[0] = 7
    with pytest.raises(ValueError, match="distinct devices in 0..1"):
        lower(kinds, degrees, dev_ptr, far)
    wrong = kinds.copy()
    wrong[0] = 9
    with pytest.raises(ValueError, match="unknown op kind"):
        lower(wrong, degrees, dev_ptr, devs)
    with pytest.raises(ValueError, match="int32"):
        lower(kinds.astype(np.float64), degrees, dev_ptr, devs)


def test_bad_machines_and_costs_are_refused_with_clear_errors():
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(2)
    plan = sw.strategies.data_parallel(g, d)
    problem = make_problem(g, d, plan.options)
    arrays = plan_arrays(plan)
    ptr, res = np.zeros(5, np.int32), np.zeros(0, np.int32)
    with pytest.raises(ValueError, match="route_ptr"):
        problem.simulate_plan(*arrays, np.zeros(4, np.int32), res, 2)
    with pytest.raises(ValueError, match="route resource"):
        problem.simulate_plan(*arrays, np.array([0, 0, 1, 1, 1], np.int32), np.array([0], np.int32), 3)
    # the pairs the transfers use (0 -> 1, 1 -> 0) are checked; pair 1 -> 0 runs backwards here
    with pytest.raises(ValueError, match=r"route pointers of pair 1 -> 0 \(2, 1\) must not decrease"):
        problem.simulate_plan(*arrays, np.array([0, 0, 2, 1, 2], np.int32), np.array([2, 2], np.int32), 3)
    with pytest.raises(ValueError, match="route pointers must run from 0"):
        problem.simulate_plan(*arrays, np.array([1, 1, 1, 1, 1], np.int32), np.array([2], np.int32), 3)
    with pytest.raises(ValueError, match="resources"):
        problem.simulate_plan(*arrays, ptr, res, 2, cores=2)
    with pytest.raises(ValueError, match="copy_bandwidth"):
        problem.simulate_plan(*arrays, ptr, res, 2, copy_bandwidth=-1.0)
    with pytest.raises(ValueError, match="copy_bandwidth"):
        problem.simulate_plan(*arrays, ptr, res, 2, copy_bandwidth=float("nan"))
    for gone in ("task_overhead", "wake_latency", "interpreter"):   # the interpreter models are gone
        with pytest.raises(TypeError, match=gone):
            problem.simulate_plan(*arrays, ptr, res, 2, **{gone: 0})
    split = np.full((len(g.ops), 2), np.nan)
    split[0, 0] = -1.0
    with pytest.raises(ValueError, match="measured compute times"):
        problem.simulate_plan(*arrays, ptr, res, 2, split=split)
    with pytest.raises(ValueError, match="one entry per task kind"):
        problem.simulate_plan(*arrays, ptr, res, 2, element_seconds=np.zeros(3))
    with pytest.raises(ValueError, match="element_fixed must have one entry"):
        problem.simulate_plan(*arrays, ptr, res, 2, element_fixed=np.zeros(3))
    with pytest.raises(ValueError, match="fixed seconds per task"):
        problem.simulate_plan(*arrays, ptr, res, 2, element_fixed=np.full(len(_core.TASK_KINDS), -1.0))
    with pytest.raises(ValueError, match="workers need as many devices"):
        problem.worker_times(1, np.array([2], np.int32), np.array([0], np.int32))
    with pytest.raises(IndexError):
        problem.worker_times(len(g.ops), np.array([1], np.int32), np.array([0], np.int32))


def test_worker_times_of_reduction_splits_add_up_to_t_c():
    g = sw.models.get("alexnet", batch=32)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4)
    plan = sw.search(g, d, options=sw.CostOptions(reduction_splits=True))
    assert any(c.reduction for c in plan.configs.values())
    problem = make_problem(g, d, plan.options)
    for row in plan.layer_costs():
        op, cfg = g[row.op], plan[row.op]
        times = problem.worker_times(op.index, np.asarray(cfg.degrees, np.int32), np.asarray(cfg.devices, np.int32),
                                     reduction_pair(op, cfg))
        assert max(times) * plan.options.backward_factor == pytest.approx(row.t_c, rel=1e-15, abs=0)
    with pytest.raises(ValueError, match="partial results add up"):
        problem.worker_times(g["pool1"].index, np.array([1, 1, 1, 1], np.int32), np.array([0, 1], np.int32), (4, 2))


def test_task_and_buffer_kind_names_cover_the_lowering():
    g = sw.models.get("resnet18", batch=8)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=2)
    tg = lower(sw.strategies.data_parallel(g, d))
    assert {t.kind for t in tg.tasks} <= set(_core.TASK_KINDS)
    fc = [op.name for op in g.ops if op.kind == "linear"][0]
    split = lower(sw.Plan.from_dict(g, d, {fc: {"i": 2}}))
    assert {"forward_partial", "sum_partials", "activation_grad"} <= {t.kind for t in split.tasks}
    assert {t.kind for t in split.tasks} <= set(_core.TASK_KINDS)
    assert {b.kind for b in split.buffers} <= set(_core.BUFFER_KINDS)
    assert {b.kind for b in tg.buffers} <= set(_core.BUFFER_KINDS)
    assert {t.phase for t in tg.tasks} == set(_core.PHASES)
    assert math.isfinite(simulate(sw.strategies.data_parallel(g, d)).iteration_time)


@pytest.mark.parametrize("make", [lambda: sw.DeviceGraph.cluster(3, 4), lambda: sw.DeviceGraph.cluster(1, 5),
                                  lambda: sw.DeviceGraph.cpu(4), lambda: sw.DeviceGraph.cluster(2, 1),
                                  lambda: sw.DeviceGraph.cluster(3, 4, device="H100"),
                                  lambda: sw.DeviceGraph.cluster(2, 1, device="A100")])
def test_preset_resources_equal_the_routes_pair_by_pair(make):
    """A preset's resource table, built without listing routes, names the same resources
    for every pair as the general one that searches each route."""
    from shardwise.iteration.sim_costs import _machine, _routed_machine

    d = make()
    fast = _machine(d)
    slow = _routed_machine(d, fast.cores)
    n = len(d)
    # the general table numbers every link of the device graph, those between nodes too, which
    # no route of a cluster uses (its transfers between nodes take the network adapters)
    assert slow.nres - fast.nres == len(d.links) - n * (d._uniform.per - 1)
    for a in range(n):
        for b in range(n):
            k = a * n + b
            got = [fast.name(int(r)) for r in fast.route_res[fast.route_ptr[k]:fast.route_ptr[k + 1]]]
            want = [slow.name(int(r)) for r in slow.route_res[slow.route_ptr[k]:slow.route_ptr[k + 1]]]
            assert got == want, (a, b)
    for m in (fast, slow):
        assert len({m.name(r) for r in range(m.nres)}) == m.nres   # ids name distinct resources


def test_machine_table_follows_changes_to_the_device_graph():
    from shardwise.iteration.sim_costs import _machine

    d = sw.DeviceGraph.cluster(1, 2)
    first = _machine(d)
    assert _machine(d) is first
    d.add_device("extra", flops=1e12, memory=1e9)
    d.add_link(0, 2, bandwidth=1e9)
    second = _machine(d)
    assert len(second.route_ptr) == 3 * 3 + 1


def _chain(n: int) -> sw.DeviceGraph:
    d = sw.DeviceGraph(f"chain of {n}")
    for k in range(n):
        d.add_device(f"g{k}", flops=1e13, memory=16e9)
    for k in range(n - 1):
        d.add_link(k, k + 1, bandwidth=2e10 if k % 2 else 1e10)
    return d


def test_routed_machines_list_only_the_pairs_a_task_graph_uses():
    """On a machine without a preset's structure, the simulator lists the routes of the pairs
    the plan's transfers use, each as the all-pairs table lists it, and no other."""
    from shardwise.iteration.lower import lowered
    from shardwise.iteration.sim_costs import _machine, _routed_machine, _transfer_pairs

    d = _chain(6)
    plan = sw.strategies.data_parallel(sw.models.lenet5(batch=12), d)
    handle = lowered(plan)
    used = {(int(a), int(b)) for a, b in _transfer_pairs(handle).tolist()}
    assert used and used < {(a, b) for a in range(6) for b in range(6) if a != b}   # not every pair
    some, every = _machine(d, handle), _routed_machine(d, 0)
    for a in range(6):
        for b in range(6):
            k = a * 6 + b
            got = [some.name(int(r)) for r in some.route_res[some.route_ptr[k]:some.route_ptr[k + 1]]]
            want = [every.name(int(r)) for r in every.route_res[every.route_ptr[k]:every.route_ptr[k + 1]]]
            assert got == (want if (a, b) in used else []), (a, b)
    assert_same_simulation(plan)


def test_a_chain_of_1024_devices_lists_its_transfers_routes_only():
    """Data parallelism over a chain of 1,024 devices: the routes listed are those of its
    transfers, |a - b| links each (about a million entries, where every pair's would be 358
    million), and the simulation runs."""
    from shardwise.iteration.lower import lowered
    from shardwise.iteration.sim_costs import _machine, _transfer_pairs

    d = _chain(1024)
    plan = sw.strategies.data_parallel(sw.models.lenet5(batch=1024), d)
    handle = lowered(plan)
    pairs = _transfer_pairs(handle)
    m = _machine(d, handle)
    assert len(m.route_res) == sum(abs(a - b) for a, b in pairs) < 2_000_000
    assert sw.simulate(plan, check_memory=False).iteration_time > 0


def test_large_preset_machines_list_only_the_pairs_a_task_graph_uses(monkeypatch):
    """Above UNIFORM_EVERY_PAIR_UP_TO devices a preset machine lists the routes of the task
    graph's transfer pairs only, each as the every-pair table lists it: the same replay."""
    from shardwise.iteration import sim_costs
    from shardwise.iteration.lower import lowered

    d = sw.DeviceGraph.cluster(nodes=3, devices_per_node=4, device="V100")
    plan = sw.strategies.data_parallel(sw.models.lenet5(batch=24), d, sw.CostOptions(sync="ring"))
    every = sw.simulate(plan, check_memory=False).iteration_time
    handle = lowered(plan)
    full = sim_costs._machine(d)
    monkeypatch.setattr(sim_costs, "UNIFORM_EVERY_PAIR_UP_TO", 4)
    d.__dict__.pop("_sim_machine", None)
    some = sim_costs._machine(d, handle)
    used = {(int(a), int(b)) for a, b in sim_costs._transfer_pairs(handle).tolist()}
    assert used and len(used) < 12 * 11
    for a in range(12):
        for b in range(12):
            k = a * 12 + b
            mine = some.route_res[some.route_ptr[k]:some.route_ptr[k + 1]].tolist()
            if (a, b) in used:
                assert mine == full.route_res[full.route_ptr[k]:full.route_ptr[k + 1]].tolist()
            else:
                assert mine == []
    assert sw.simulate(plan, check_memory=False).iteration_time == every


def test_a_large_plans_durations_are_the_same_on_one_thread_and_several():
    """A plan of 65,536 workers or more has its workers' forward times made on the problem's
    threads (sw_task_durations): each op's own entries, so the replay's tasks take the same
    seconds, bit for bit, whatever the threads."""
    from shardwise.iteration.lower import lowered
    from shardwise.iteration.simulate import _machine, _replay, resolve_costs

    g = sw.Graph("wide")
    x = g.input("x", (2048, 8))
    for k in range(16):
        x = g.relu(g.linear(x, 8, name=f"fc{k}"), name=f"act{k}")
    d = sw.DeviceGraph.cpu(2048)
    seen = []
    for threads in (1, 2, 3):
        plan = sw.strategies.data_parallel(g, d, sw.CostOptions(threads=threads))
        assert sum(len(c.devices) for c in plan.configs.values()) >= 65536
        handle = lowered(plan, rings="fused")
        r = _replay(handle, plan, resolve_costs(plan, None), _machine(d, handle))
        seen.append((r["iteration_time"], r["duration"].tobytes()))
    assert seen[0] == seen[1] == seen[2]
