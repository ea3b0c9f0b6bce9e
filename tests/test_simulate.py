"""The simulator against closed-form cases, and against Eq. 1 (which never overlaps)."""
from __future__ import annotations

from collections import Counter

import pytest

import shardwise as sw
from shardwise.boxes import volume
from shardwise.lower import lower
from shardwise.simulate import COMPUTE_KINDS, MemoryOverflow, simulate, task_durations


def chain() -> sw.Graph:
    g = sw.Graph("chain")
    x = g.input("x", (8, 4, 8, 8))
    x = g.conv2d(x, 8, kernel=3, padding=1, name="c1")
    x = g.relu(x, name="r")
    x = g.conv2d(x, 8, kernel=3, padding=1, name="c2")
    x = g.linear(g.flatten(x, name="f"), 10, name="fc")
    g.softmax(x, name="prob")
    return g


def devices(n: int, bw: float = 1e9) -> sw.DeviceGraph:
    d = sw.DeviceGraph("t")
    for k in range(n):
        d.add_device(f"d{k}", flops=1e10, memory=1e9, mem_bandwidth=1e10)
    for a in range(n):
        for b in range(a + 1, n):
            d.add_link(a, b, bandwidth=bw)
    return d


def test_one_device_is_the_sum_of_its_tasks():
    g = chain()
    plan = sw.Plan.from_dict(g, devices(1), {})
    sim = simulate(plan)
    assert sim.iteration_time == pytest.approx(sum(task_durations(lower(plan))))
    assert sim.bytes_moved == 0
    assert sim.device_busy[0] == pytest.approx(1.0)


def test_compute_matches_eq1_compute_on_one_device():
    """Forward + backward of every op is t_c; the bookkeeping tasks come on top."""
    g = chain()
    plan = sw.Plan.from_dict(g, devices(1), {})
    tg = lower(plan)
    durations = task_durations(tg)
    compute = sum(dur for t, dur in zip(tg.tasks, durations)
                  if t.kind in ("forward", "loss", "backward_data", "backward_weight"))
    # ops without weights have no weight-gradient task: their backward is still 2 forwards
    assert compute == pytest.approx(plan.breakdown["compute"], rel=1e-9)


def test_transfers_sharing_a_link_wait_for_each_other():
    """Two model-parallel halves on devices 1 and 2 both read from device 0 through a hub:
    routes through a shared link serialize, disjoint routes do not."""
    g = sw.Graph("fan")
    x = g.input("x", (4, 4, 16, 16))
    g.relu(x, name="r")
    star = sw.DeviceGraph("star")
    for k in range(3):
        star.add_device(f"d{k}", flops=1e12, memory=1e9, mem_bandwidth=1e12)
    star.add_link(0, 1, bandwidth=1e9)
    star.add_link(1, 2, bandwidth=1e9)  # device 2 is reached from 0 through 1
    plan = sw.Plan.from_dict(g, star, {"x": {}, "r": {"c": 2, "devices": [1, 2]}})
    sim = simulate(plan)
    copies = [e for e in sim.events if e.kind == "copy"]
    assert len(copies) == 2
    half = 4 * 2 * 16 * 16 * 4 / 1e9
    first, second = sorted(copies, key=lambda e: e.start)
    assert "link 0->1" in first.resources and "link 0->1" in second.resources
    assert second.start >= first.end - 1e-15          # serialized on link 0->1
    assert sim.iteration_time >= 2 * half
    full = sw.DeviceGraph("full")
    for k in range(3):
        full.add_device(f"d{k}", flops=1e12, memory=1e9, mem_bandwidth=1e12)
    for a, b in ((0, 1), (1, 2), (0, 2)):
        full.add_link(a, b, bandwidth=1e9)
    sim2 = simulate(sw.Plan.from_dict(g, full, {"x": {}, "r": {"c": 2, "devices": [1, 2]}}))
    c1, c2 = [e for e in sim2.events if e.kind == "copy"]
    assert c1.start == c2.start == 0.0                # disjoint links: in parallel
    assert sim2.iteration_time < sim.iteration_time


def test_data_parallel_halves_the_compute():
    g = chain()
    one = simulate(sw.Plan.from_dict(g, devices(1), {}))
    two = simulate(sw.strategies.data_parallel(g, devices(2, bw=1e15)))
    assert two.iteration_time < 0.7 * one.iteration_time


@pytest.mark.parametrize("model,ndev", [("lenet5", 4), ("alexnet", 8), ("resnet18", 4), ("inception_v3", 4)])
def test_simulation_stays_within_eq1(model, ndev):
    """Eq. 1 sums every transfer and every op's slowest worker; the replay overlaps them,
    and adds only the bookkeeping Eq. 1 leaves out (gradient sums, updates, local copies)."""
    g = sw.models.get(model, batch=32)
    d = sw.DeviceGraph.cluster(nodes=max(1, ndev // 4), devices_per_node=min(4, ndev))
    for plan in [sw.search(g, d), *sw.strategies.baselines(g, d)]:
        sim = simulate(plan, check_memory=False)
        tg = lower(plan)
        bookkeeping = sum(dur for t, dur in zip(tg.tasks, task_durations(tg))
                          if t.kind in ("accumulate", "reduce", "stats_reduce", "update", "copy"))
        assert 0 < sim.iteration_time <= (plan.cost + bookkeeping) * (1 + 1e-9)
        assert sim.bytes_moved == pytest.approx(plan.bytes_moved)
        assert all(0 <= b <= 1 + 1e-9 for b in sim.device_busy.values())


def test_memory_overflow_is_reported_per_device():
    g = sw.models.vgg16(batch=64)
    small = sw.DeviceGraph("small")
    for k in range(2):
        small.add_device(f"tiny{k}", flops=1e12, memory=1e6)
    small.add_link(0, 1, bandwidth=1e9)
    with pytest.raises(MemoryOverflow, match="tiny0.*GB >"):
        simulate(sw.strategies.data_parallel(g, small))


def test_plot_timeline_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed: pip install matplotlib")
    g = sw.models.lenet5(batch=16)
    sim = simulate(sw.search(g, sw.DeviceGraph.cpu(2)))
    path = tmp_path / "t.png"
    fig = sim.plot_timeline(str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.png"]   # no temporary file left behind
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert "device 0" in labels and "device 1" in labels


@pytest.mark.parametrize("model,ndev", [("lenet5", 2), ("resnet18", 4), ("inception_v3", 4), ("alexnet", 16)])
def test_c_engine_equals_python_reference(model, ndev):
    g = sw.models.get(model, batch=32)
    d = sw.DeviceGraph.cluster(nodes=max(1, ndev // 4), devices_per_node=min(4, ndev))
    for plan in [sw.search(g, d), sw.strategies.data_parallel(g, d)]:
        a = simulate(plan, check_memory=False, engine="c")
        b = simulate(plan, check_memory=False, engine="python")
        assert a.iteration_time == pytest.approx(b.iteration_time, rel=1e-12)
        assert [e.start for e in a.events] == pytest.approx([e.start for e in b.events], rel=1e-12, abs=1e-15)


def test_bad_task_arrays_are_refused():
    import numpy as np
    from shardwise import _core
    z = np.zeros(2, np.int32)
    with pytest.raises(ValueError, match="cycle"):
        _core.simulate_tasks(np.ones(2), np.array([0, 1, 2], np.int32), np.array([1, 0], np.int32),
                             np.zeros(3, np.int32), np.zeros(0, np.int32), 0)
    with pytest.raises(ValueError, match="resource"):
        _core.simulate_tasks(np.ones(1), np.zeros(2, np.int32), np.zeros(0, np.int32),
                             np.array([0, 1], np.int32), np.array([5], np.int32), 1)
    with pytest.raises(ValueError, match="duration"):
        _core.simulate_tasks(np.array([np.nan]), np.zeros(2, np.int32), np.zeros(0, np.int32),
                             np.zeros(2, np.int32), np.zeros(0, np.int32), 0)
    with pytest.raises(ValueError, match="pointer"):
        _core.simulate_tasks(np.ones(2), z, z, z, z, 0)
    with pytest.raises(sw.ConfigError):
        simulate(sw.Plan.from_dict(chain(), devices(1), {}), engine="fortran")


@pytest.mark.parametrize("model,ndev", [("lenet5", 4), ("alexnet", 4)])
def test_refine_under_the_simulator_never_loses(model, ndev):
    g = sw.models.get(model, batch=32)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=ndev)
    seed = sw.search(g, d)
    refined = sw.search(g, d, refine="simulate", refine_steps=60, refine_seed=1)
    s = refined.search_stats
    assert s["simulated_seed"] == pytest.approx(simulate(seed, check_memory=False).iteration_time)
    assert s["simulated_refined"] <= s["simulated_seed"]
    assert simulate(refined, check_memory=False).iteration_time == pytest.approx(s["simulated_refined"])
    assert s["refine_gain"] >= 1.0


def test_refine_arguments_are_checked():
    g = sw.models.lenet5(batch=8)
    with pytest.raises(sw.ConfigError):
        sw.search(g, sw.DeviceGraph.cpu(2), refine="anneal")
    with pytest.raises(sw.ConfigError):
        sw.search(g, sw.DeviceGraph.cpu(2), refine="simulate", refine_steps=-1)


def test_plan_plot_draws_every_op(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed: pip install matplotlib")
    g = sw.models.get("inception_small", batch=16)
    plan = sw.search(g, sw.DeviceGraph.cpu(4))
    path = tmp_path / "p.png"
    fig = plan.plot(str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert len(texts) == len(g.ops)
    assert all(plan[op.name].split_dims() in text for op, text in zip(g.ops, texts))


@pytest.mark.parametrize("engine", ["c", "python"])
def test_cpu_workers_on_shared_cores_run_each_cores_tasks_in_program_order(engine):
    """The executor's thread c runs devices c, c + cores, ... in program order, transfers too."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    d.shared_cores = 2
    for plan in (sw.strategies.data_parallel(g, d), sw.search(g, d)):
        sim = simulate(plan, engine=engine)
        tasks = lower(plan).tasks
        for core in range(2):
            mine = [e for e in sim.events if tasks[e.task].device % 2 == core]
            assert [e.task for e in mine] == sorted(e.task for e in mine)
            for before, after in zip(mine, mine[1:]):
                assert after.start >= before.end - 1e-15, (before, after)
            transfers = [e for e in mine if e.kind == "copy" and tasks[e.task].src_device != tasks[e.task].device]
            assert all(f"core {core}" in e.resources for e in transfers)
        assert any(e.kind == "copy" for e in sim.events)


def test_a_profiles_step_overhead_is_added_to_the_iteration():
    from shardwise.profile import Profile

    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(2)
    plan = sw.strategies.data_parallel(g, d)
    times = {(op.name, plan[op.name].degrees): (1e-4, 2e-4) for op in g.ops}
    quiet = Profile(g.fingerprint(), {}, times, 1e-5, 1e9, {"update": 1e-9})
    busy = Profile(g.fingerprint(), {}, times, 1e-5, 1e9, {"update": 1e-9}, step_overhead=3e-4)
    for engine in ("c", "python"):
        a, b = simulate(plan, engine=engine, costs=quiet), simulate(plan, engine=engine, costs=busy)
        assert b.iteration_time == pytest.approx(a.iteration_time + 3e-4, rel=1e-12)
        assert [e.end for e in b.events] == [e.end for e in a.events]


def test_measured_compute_pays_the_interpreter_time_and_measured_bookkeeping_does_not():
    """The profile times a compute task by its kernels alone and a bookkeeping task whole (its
    thread's CPU time), so the per-task interpreter time comes on top of the first only: on one
    worker the step is every kernel + every bookkeeping time + the interpreter time of every
    task that is not measured bookkeeping."""
    from shardwise.profile import Profile

    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    tg = lower(plan)
    times = {(op.name, plan[op.name].degrees): (1e-4, 2e-4) for op in g.ops}
    rate, fixed, overhead = 1e-9, 2e-5, 1e-5   # a measured task takes at least its interpreter time
    prof = Profile(g.fingerprint(), {}, times, overhead, 1e9, {"update": rate, "accumulate": rate},
                   element_fixed={"update": fixed, "accumulate": fixed})
    durations = task_durations(tg, prof)
    computes = Counter((t.op, t.phase == "forward") for t in tg.tasks if t.kind in COMPUTE_KINDS)
    for t, dur in zip(tg.tasks, durations):
        if t.kind in COMPUTE_KINDS:
            fwd, bwd = times[(t.op, plan[t.op].degrees)]
            kernels = (fwd if t.phase == "forward" else bwd) / computes[(t.op, t.phase == "forward")]
            assert dur == pytest.approx(kernels + overhead, rel=1e-12)
        elif t.kind in ("update", "accumulate"):
            elements = volume(t.box) if t.box else tg.buffers[t.writes[0]].elements
            assert dur == pytest.approx(fixed + rate * elements, rel=1e-12)
    for engine in ("c", "python"):
        assert simulate(plan, engine=engine, costs=prof).iteration_time == pytest.approx(sum(durations), rel=1e-9)


@pytest.mark.parametrize("engine", ["c", "python"])
def test_a_thread_waiting_for_another_resumes_a_wake_latency_later(engine):
    """With a profile's wake latency w, a task that depends on another thread's tasks starts at
    least w after the last of them ends."""
    from shardwise.profile import Profile

    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    d.shared_cores = 2
    plan = sw.strategies.data_parallel(g, d)
    tasks = lower(plan).tasks
    times = {(op.name, plan[op.name].degrees): (1e-4, 2e-4) for op in g.ops}
    for wake in (0.0, 1e-5, 1e-4, 1e-3):
        prof = Profile(g.fingerprint(), {}, times, 1e-5, 1e9, {"update": 1e-9}, wake_latency=wake)
        sim = simulate(plan, engine=engine, costs=prof)
        end = {e.task: e.end for e in sim.events}
        waited = 0
        for e in sim.events:
            cross = [x for x in tasks[e.task].deps if tasks[x].device % 2 != tasks[e.task].device % 2]
            if cross:
                waited += 1
                assert e.start >= max(end[x] for x in cross) + wake - 1e-12
        assert waited > 0
    assert sim.iteration_time > simulate(plan, engine=engine, costs=Profile(g.fingerprint(), {}, times, 1e-5, 1e9,
                                                                 {"update": 1e-9})).iteration_time


@pytest.mark.parametrize("engine", ["c", "python"])
def test_a_task_that_waited_for_another_threads_lock_starts_a_handoff_later(engine):
    """Four tasks on one lock R (hand-off 0.5 s), threads 0 and 1: task 1 waited while thread 0
    held R, so it runs 0.5 after R is free; task 2 follows its own thread's task (no hand-off,
    though it was ready only when R fell free); task 3 waited behind thread 1: 0.5 again."""
    import numpy as np

    from shardwise.simulate import _replay_c, _replay_python

    replay = _replay_c if engine == "c" else _replay_python
    deps = [(), (), (1,), (0,)]
    durations = [1.0, 1.0, 1.0, 1.0]
    resources = [("R",), ("R",), ("R",), ("R",)]
    groups = [0, 1, 1, 0]
    assert list(replay(deps, durations, resources)) == [0.0, 1.0, 2.0, 3.0]
    assert list(replay(deps, durations, resources, groups, {"R": 0.5})) == [0.0, 1.5, 2.5, 4.0]
    # a resource without a hand-off time, or one thread only: as before
    assert list(replay(deps, durations, resources, groups, {"S": 0.5})) == [0.0, 1.0, 2.0, 3.0]
    assert list(replay(deps, durations, resources, [0, 0, 0, 0], {"R": 0.5})) == [0.0, 1.0, 2.0, 3.0]
    assert np.allclose(_replay_c(deps, durations, resources, groups, {"R": 0.5}),
                       _replay_python(deps, durations, resources, groups, {"R": 0.5}))


def test_bad_handoff_arrays_are_refused():
    import numpy as np
    from shardwise import _core

    args = (np.ones(2), np.zeros(3, np.int32), np.zeros(0, np.int32), np.array([0, 1, 2], np.int32),
            np.zeros(2, np.int32), 1)
    start, _ = _core.simulate_tasks(*args, np.array([0, 1], np.int32), np.array([0.5]))
    assert list(start) == [0.0, 1.5]
    with pytest.raises(ValueError, match="together"):
        _core.simulate_tasks(*args, np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match="one entry per task"):
        _core.simulate_tasks(*args, np.array([0], np.int32), np.array([0.5]))
    with pytest.raises(ValueError, match="one per resource"):
        _core.simulate_tasks(*args, np.array([0, 1], np.int32), np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="hand-off"):
        _core.simulate_tasks(*args, np.array([0, 1], np.int32), np.array([-1.0]))


@pytest.mark.parametrize("engine", ["c", "python"])
def test_the_interpreter_changes_threads_at_the_wake_latencys_cost(engine):
    """CPU workers on two shared cores: with a wake latency, some dispatch waits for the
    interpreter held by the other thread and the step takes longer than without hand-offs;
    on one core (one thread) nothing changes hands."""
    from shardwise.profile import Profile

    g = sw.models.lenet5(batch=8)
    for cores, expect_longer in ((2, True), (1, False)):
        d = sw.DeviceGraph.cpu(2)
        d.shared_cores = cores
        plan = sw.strategies.data_parallel(g, d)
        times = {(op.name, plan[op.name].degrees): (1e-4, 2e-4) for op in g.ops}
        base = Profile(g.fingerprint(), {}, times, 2e-5, 1e9, {"update": 1e-9})
        slow = Profile(g.fingerprint(), {}, times, 2e-5, 1e9, {"update": 1e-9}, wake_latency=1e-4)
        a = simulate(plan, engine=engine, costs=base).iteration_time
        b = simulate(plan, engine=engine, costs=slow).iteration_time
        if expect_longer:
            assert b > a + 1e-4
        else:
            assert b == pytest.approx(a)
