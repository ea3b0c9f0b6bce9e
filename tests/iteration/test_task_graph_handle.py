"""One task graph per iteration, physically: sw.lower builds the C task graph once (a
_core.TaskGraph), and the memory plan, the order, the simulator, the schedule and swap passes and
the runtime take that handle instead of lowering the plan again.  _core.lowerings() counts every
sw_lower the core has run in this process."""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.iteration.lower import lowered_graph, plan_arrays
from shardwise.iteration.memory import memory_plan
from shardwise.iteration.simulate import iteration_time
from shardwise.planning.problem import make_problem
from shardwise.train.runtime import NativeExecutor, op_attrs


@pytest.fixture(scope="module")
def lenet():
    g = sw.models.lenet5(batch=8)
    return g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))


@pytest.fixture(scope="module")
def resnet():
    """A plan whose feature maps a swap plan can offload: one worker, half its peak as the budget."""
    g = sw.models.resnet18_small(batch=8, width=8)
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})
    return g, plan, int(memory_plan(plan).peak_bytes * 0.5)


def lowerings_of(f):
    """(f's result, how many times the core lowered a plan while f ran)."""
    before = _core.lowerings()
    out = f()
    return out, _core.lowerings() - before


def test_a_trainer_lowers_its_plan_once(lenet):
    g, plan = lenet
    for schedule in ("fifo", "critical_path"):
        t, n = lowerings_of(lambda: sw.Trainer(g, plan, schedule=schedule))
        assert n == 1, schedule
        _, n = lowerings_of(lambda: t.memory_plan)   # planned on the trainer's own graph
        assert n == 0
        assert t.memory_plan.devices[0].arena_bytes == t.memory_per_worker()[0]


def test_a_trainer_with_a_swap_plan_lowers_once(resnet):
    g, plan, budget = resnet
    sp, n = lowerings_of(lambda: sw.swap_plan(plan, budget=budget))
    # the timeline, the swap pass, the entries and the unswapped replay read one graph; the
    # swapped graph is lowered once more for the replay whose stall the swap plan reports
    assert n == 2 and sp.entries
    t, n = lowerings_of(lambda: sw.Trainer(g, plan, swap=sp))
    assert n == 1
    assert {"swap_out", "swap_in"} <= {task.kind for task in t.task_graph.tasks}   # the graph that runs
    # its memory plan is the runtime's: the swapped graph's, within the budget
    assert {d: m.arena_bytes for d, m in t.memory_plan.devices.items()} == t.memory_per_worker()
    assert max(t.memory_per_worker().values()) <= budget


def test_passes_given_a_task_graph_do_not_lower_again(lenet):
    _, plan = lenet
    tg, n = lowerings_of(lambda: sw.lower(plan))
    assert n == 1 and tg.handle.ntasks == len(tg.tasks)
    sim, n = lowerings_of(lambda: sw.simulate(tg))
    assert n == 0 and sim.iteration_time == sw.simulate(plan).iteration_time
    mp, n = lowerings_of(lambda: memory_plan(tg, check=True))
    assert n == 0
    ref = memory_plan(plan)
    for k in ("offset", "arena", "reuse_from", "reuse_to", "first", "last"):
        assert np.array_equal(mp.arrays[k], ref.arrays[k]), k
    _, n = lowerings_of(mp.validate)
    assert n == 0
    sched, n = lowerings_of(lambda: sw.schedule(tg))
    assert n == 0 and sched.priorities == sw.schedule(plan).priorities
    t, n = lowerings_of(lambda: iteration_time(tg))
    assert n == 0 and t == iteration_time(plan)


def test_swap_passes_given_a_task_graph_do_not_lower_again(resnet):
    _, plan, budget = resnet
    tg = sw.lower(plan)
    sp, n = lowerings_of(lambda: sw.swap_plan(tg, budget=budget))
    assert n == 1 and sp.entries == sw.swap_plan(plan, budget=budget).entries   # 1: the swapped replay
    swapped, n = lowerings_of(lambda: sw.lower(plan, swap=sp))
    assert n == 1 and swapped.handle.swapped
    assert len(swapped.tasks) == len(tg.tasks) + 2 * len(sp.entries)
    sim, n = lowerings_of(lambda: sw.simulate(swapped))
    assert n == 0 and sim.iteration_time == sw.simulate(plan, swap=sp).iteration_time
    with pytest.raises(ValueError, match="swap plan"):
        sw.schedule(swapped)


def test_annotations_travel_with_the_graph(lenet):
    _, plan = lenet
    sched = sw.schedule(plan)
    tg = sw.lower(plan, schedule=sched)
    assert tg.schedule is sched and tg.handle.has_streams
    assert [np.array_equal(a, b) for a, b in zip(tg.handle.streams, sched.stream_arrays())] == [True] * 3
    assert sw.simulate(tg).iteration_time == sw.simulate(plan, schedule=sched).iteration_time
    ref = memory_plan(plan, schedule=sched)
    assert np.array_equal(memory_plan(tg).arrays["offset"], ref.arrays["offset"])
    # made on the graph itself, its streams put on it without lowering again
    cp, n = lowerings_of(lambda: sw.lower(plan, schedule="critical_path"))
    assert n == 1 and cp.schedule.priorities == sched.priorities


def test_a_task_graph_refuses_what_it_was_not_made_for(lenet):
    g, plan = lenet
    tg = sw.lower(plan)
    other = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), {})
    with pytest.raises(sw.ConfigError, match="lowered from plan"):
        NativeExecutor(g, other, tg)
    with pytest.raises(sw.ConfigError, match="optimizer state"):
        NativeExecutor(g, plan, tg, optimizer_state=2)
    with pytest.raises(sw.ConfigError, match="carries its own"):
        memory_plan(tg, schedule=sw.schedule(plan))
    with pytest.raises(sw.ConfigError, match="carries its own"):
        sw.simulate(tg, schedule="critical_path")
    with pytest.raises(ValueError, match="attrs"):
        _core.Runtime(tg.handle, op_attrs(g)[:-1], 1)
    with pytest.raises(TypeError, match="Problem"):
        _core.TaskGraph(object(), *plan_arrays(plan))
    # a problem changed after lowering: the graph is no longer its graph
    problem = make_problem(g, plan.devices, plan.options)
    handle = _core.TaskGraph(problem, *plan_arrays(plan))
    problem.set_optimizer_state(2)
    with pytest.raises(RuntimeError, match="has changed"):
        handle.memory_plan()
    with pytest.raises(RuntimeError, match="has changed"):
        _core.Runtime(handle, op_attrs(g), 1)


def test_the_runtime_of_a_task_graph_trains_as_before(lenet):
    g, plan = lenet
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, 10, g.ops[0].shape[0])
    problem = make_problem(g, plan.devices, plan.options)
    by_arrays = _core.Runtime(problem, *plan_arrays(plan), op_attrs(g), 1)
    by_handle = _core.Runtime(sw.lower(plan).handle, op_attrs(g), 1)
    for rt in (by_arrays, by_handle):
        for b in range(sw.lower(plan).handle.nbuffers):
            a = rt.buffer(b)
            if a.size:
                a[...] = np.linspace(-0.1, 0.1, a.size, dtype=np.float32).reshape(a.shape)
    args = (0, 0.05, 0.0, 0.9, 0.0, False, 0.9, 0.999, 1e-8)
    assert [by_arrays.step([x] + [None] * (len(g.ops) - 1), y, *args) for _ in range(2)] == \
        [by_handle.step([x] + [None] * (len(g.ops) - 1), y, *args) for _ in range(2)]


def test_threads_share_a_plans_problem(lenet):
    """A plan keeps one problem; lowerings and passes only read it, so threads simulating the same
    plan at once do not find it "in use" (each used to build its own)."""
    _, plan = lenet
    expected = sw.simulate(plan).iteration_time
    assert _on_threads(lambda: sw.simulate(plan).iteration_time) == [expected] * 20


def _on_threads(run, threads: int = 4, times: int = 5) -> list:
    """run() `times` times on each of `threads` threads at once: every result (an exception on
    any thread fails the test, naming it)."""
    import threading

    results, errors = [], []

    def work():
        try:
            for _ in range(times):
                results.append(run())
        except Exception as exc:   # collected: the assert below names it
            errors.append(exc)

    started = [threading.Thread(target=work) for _ in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    assert not errors, errors
    return results


def _plan_arrays_of(handle) -> dict:
    d = handle.memory_plan()
    return {k: np.asarray(d[k]).copy() for k in ("offset", "arena", "reuse_from", "reuse_to", "first", "last")}


def _same_plan(a: dict, b: dict) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


def test_a_task_graph_keeps_its_memory_plan_for_the_next_pass():
    """The memory plan at the runtime's alignment is made once per task graph and read by the
    passes after it (a search checks a plan's arenas, then replays it): each pass gives what it
    gives on a graph lowered afresh, whichever pass made the plan; another alignment is planned
    on its own; new streams or a split over ranks drop the kept plan."""
    from shardwise.iteration.lower import lowered

    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4))
    ref_plan = _plan_arrays_of(lowered(plan))
    ref_time = iteration_time(plan)
    ref_order = lowered(plan).task_order()

    # memory plan first: the replay and the order read it, and agree with fresh graphs
    h = lowered(plan)
    assert not h.memory_planned
    assert _same_plan(_plan_arrays_of(h), ref_plan) and h.memory_planned
    assert iteration_time(sw.TaskGraph(plan=plan, handle=h, rings="chunked")) == ref_time
    order = h.task_order()
    assert all(np.array_equal(order[k], ref_order[k]) for k in ("ptr", "ids"))
    assert _same_plan(_plan_arrays_of(h), ref_plan)   # read again, unchanged

    # the replay first: the plan it made is kept, and is the fresh one
    h = lowered(plan)
    assert iteration_time(sw.TaskGraph(plan=plan, handle=h, rings="chunked")) == ref_time
    assert h.memory_planned and _same_plan(_plan_arrays_of(h), ref_plan)

    # another alignment: planned apart, the kept plan untouched
    wide = h.memory_plan(align=4096)
    assert all(a % 4096 == 0 for a in np.asarray(wide["arena"]))
    assert _same_plan(_plan_arrays_of(h), ref_plan)

    # new streams: the plan kept for the old ones is dropped, the new one is the streams' own
    sched = sw.schedule(plan, policy="critical_path")
    h.set_streams(sched.stream_arrays())
    assert not h.memory_planned
    fresh = _plan_arrays_of(lowered(plan, streams=sched.stream_arrays()))
    assert not _same_plan(fresh, ref_plan)   # (the plan kept before would be caught)
    assert _same_plan(_plan_arrays_of(h), fresh)


def test_a_split_over_ranks_drops_the_kept_memory_plan():
    from shardwise.iteration.lower import lowered

    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    ranks = np.array([0, 1], np.int32)
    h = lowered(plan)
    h.memory_plan()
    assert h.memory_planned
    h.split_ranks(ranks)
    assert not h.memory_planned
    fresh = lowered(plan)
    fresh.split_ranks(ranks)
    assert _same_plan(_plan_arrays_of(h), _plan_arrays_of(fresh))


def test_threads_replaying_one_task_graph_share_its_memory_plan():
    """Replays of one task graph on several threads at once: each may make the memory plan while
    none is kept; one is kept, the others freed, and every replay gives the one time."""
    from shardwise.iteration.lower import lowered

    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4))
    expected = iteration_time(plan)
    tg = sw.TaskGraph(plan=plan, handle=lowered(plan), rings="chunked")
    assert _on_threads(lambda: iteration_time(tg)[0]) == [expected[0]] * 20 and tg.handle.memory_planned


def test_pages_mapped_ahead_leave_the_graph_as_it_is():
    """A graph whose tasks and buffers outgrow 16 MB (ResNet-50 data parallel on 256 GPUs: 304k
    tasks) has its pages mapped ahead of the writes on other threads, and its arrays cut to their
    items once lowered and once recomputed: the tasks, buffers, memory plan and simulated time
    are those of a lowering with neither."""
    g = sw.models.get("resnet50", batch=256)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(nodes=32, devices_per_node=8))

    def made(on: int):
        old = _core.populate_ahead(on)
        try:
            tg = lowered_graph(plan, recompute="all")   # (the handle alone: no Python records)
            assert len(tg.handle.arrays()["kind"]) > 190_000   # 88-byte tasks: past 16 MB
            mp = tg.handle.memory_plan(align=256)
            return tg.handle.arrays(), mp, iteration_time(tg)
        finally:
            _core.populate_ahead(old)

    (a, ma, ta), (b, mb, tb) = made(1), made(0)
    for arrays_a, arrays_b in ((a, b), (ma, mb)):
        assert sorted(arrays_a) == sorted(arrays_b)
        for k in arrays_a:
            assert np.array_equal(np.asarray(arrays_a[k]), np.asarray(arrays_b[k])), k
    assert ta == tb
    assert _core.populate_ahead() is True   # (the default, restored)
