"""The simulator against closed-form cases, against Eq. 1 (which never overlaps), and against
the runtime's order (program order per stream, reuse edges, threads on shared cores)."""
from __future__ import annotations

import math
from collections import Counter

import pytest

import shardwise as sw
from shardwise.ops.box import volume
from shardwise.iteration.lower import lower, plan_arrays
from shardwise.iteration.memory import _problem
from shardwise.iteration.simulate import MemoryOverflow, simulate
from shardwise.iteration.sim_costs import COMPUTE_KINDS

import sim_oracle


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
    assert sim.iteration_time == pytest.approx(sum(sim_oracle.task_durations(lower(plan))))
    assert sim.iteration_time == pytest.approx(sum(e.end - e.start for e in sim.events))
    assert sim.bytes_moved == 0
    assert sim.device_busy[0] == pytest.approx(1.0)


def test_compute_matches_eq1_compute_on_one_device():
    """Forward + backward of every op is t_c; the bookkeeping tasks come on top."""
    g = chain()
    plan = sw.Plan.from_dict(g, devices(1), {})
    compute = sum(e.end - e.start for e in simulate(plan).events
                  if e.kind in ("forward", "loss", "backward_data", "backward_weight"))
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
        bookkeeping = sum(e.end - e.start for e in sim.events
                          if e.kind in ("accumulate", "reduce", "stats_reduce", "update")
                          or (e.kind == "copy" and not any(r.startswith(("link", "nic")) for r in e.resources)))
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
    assert "device 0 stream 0 (0)" in labels and "device 1 stream 1 (0)" in labels   # fifo: a stream per device


@pytest.mark.parametrize("model,ndev", [("lenet5", 2), ("resnet18", 4), ("inception_v3", 4), ("alexnet", 16)])
def test_the_simulator_equals_the_oracle(model, ndev):
    g = sw.models.get(model, batch=32)
    d = sw.DeviceGraph.cluster(nodes=max(1, ndev // 4), devices_per_node=min(4, ndev))
    for plan in [sw.search(g, d), sw.strategies.data_parallel(g, d)]:
        a = simulate(plan, check_memory=False)
        b = sim_oracle.replay(plan)
        assert a.iteration_time == pytest.approx(b.iteration_time, rel=1e-12)
        assert [e.start for e in a.events] == pytest.approx(b.start, rel=1e-12, abs=1e-15)


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
    plan = sw.Plan.from_dict(chain(), devices(1), {})
    with pytest.raises(sw.ConfigError, match="one engine, 'c'"):
        simulate(plan, engine="fortran")
    with pytest.raises(sw.ConfigError, match="Python engine was removed"):
        simulate(plan, engine="python")
    assert simulate(plan, engine="c").iteration_time == simulate(plan).iteration_time


def test_the_event_loop_closed_form():
    """One resource R, unit durations: tasks 0 and 1 are ready at once and 0 goes first (lowest
    id); task 3, ready when 0 ends, waits behind 1 and then behind 2 (ready later, but a lower
    id); task 4 holds nothing and starts when 0 ends.  The oracle's loop agrees."""
    import numpy as np
    from shardwise import _core

    deps = [(), (), (1,), (0,), (0,)]
    resources = [("R",), ("R",), ("R",), ("R",), ()]
    flat = [d for ds in deps for d in ds]
    dep_ptr = np.cumsum([0] + [len(d) for d in deps]).astype(np.int32)
    res_ptr = np.cumsum([0] + [len(r) for r in resources]).astype(np.int32)
    res = np.zeros(int(res_ptr[-1]), np.int32)
    start, makespan = _core.simulate_tasks(np.ones(5), dep_ptr, np.asarray(flat, np.int32), res_ptr, res, 1)
    assert list(start) == [0.0, 1.0, 2.0, 3.0, 1.0] and makespan == 4.0
    assert sim_oracle.event_loop(deps, [1.0] * 5, resources) == list(start)


def test_lines_served_by_id_when_ready_out_of_order():
    """Task 0 holds R for 10 s; tasks 3, 2, 1 (in that order) become ready behind it at 1, 2
    and 3 s, and go in id order once R is free: 1 at 10, 2 at 11, 3 at 12.  Then 7 and 8 queue
    in order behind 3 (ready at 12.5 and 12.75), and 9, routed over R and S, waits for both;
    10 uses S alone and goes at once.  Both event loops (exclusive and shared compute) and
    the oracle agree."""
    import numpy as np
    from shardwise import _core

    deps = [(), (6,), (5,), (4,), (), (), (), (11,), (12,), (13,), (), (), (), ()]
    resources = [("R",), ("R",), ("R",), ("R",), (), (), (), ("R",), ("R",), ("R", "S"), ("S",), (), (), ()]
    duration = [10.0, 1, 1, 1, 1, 2, 3, 1, 1, 1, 1, 12.5, 12.75, 12.875]
    flat = [d for ds in deps for d in ds]
    dep_ptr = np.cumsum([0] + [len(d) for d in deps]).astype(np.int32)
    res_ptr = np.cumsum([0] + [len(r) for r in resources]).astype(np.int32)
    res = np.array([{"R": 0, "S": 1}[r] for rs in resources for r in rs], np.int32)
    args = (np.array(duration), dep_ptr, np.asarray(flat, np.int32), res_ptr, res, 2)
    start, makespan = _core.simulate_tasks(*args)
    assert list(start[:4]) == [0.0, 10.0, 11.0, 12.0]
    assert list(start[7:11]) == [13.0, 14.0, 15.0, 0.0] and makespan == 16.0
    shared_start, _, shared_makespan = _core.simulate_shared(*args, np.full(14, -1, np.int32), np.ones(14), 0)
    assert list(shared_start) == list(start) and shared_makespan == makespan
    assert sim_oracle.event_loop(deps, duration, resources) == list(start)


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
    from shardwise.viz import plan_boxes

    boxes = plan_boxes(plan)   # one box per chain of ops split alike (tests/cli/test_pictures.py)
    assert len(texts) == len(boxes)
    for box, text in zip(boxes, texts):
        assert all(f"{plan[g.ops[i].name].split_dims()} on {plan[g.ops[i].name].device_text()}" in text for i in box)


def test_cpu_workers_on_shared_cores_run_one_task_at_a_time_earliest_ready_first():
    """The CPU backend's thread c runs the streams of devices c, c + cores, ...: one task at a time
    (transfers into them too), and whenever it is free the earliest ready task in program order,
    never blocking on one device's stream while another's task could start."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    d.shared_cores = 2
    overtaken = 0
    for plan in (sw.strategies.data_parallel(g, d), sw.search(g, d), sw.strategies.model_parallel(g, d)):
        sim = simulate(plan)
        tasks = lower(plan).tasks
        r = _problem(plan).task_order(*plan_arrays(plan))
        after = [r["ids"][r["ptr"][t]:r["ptr"][t + 1]].tolist() for t in range(len(tasks))]
        by_task = {e.task: e for e in sim.events}
        for core in range(2):
            mine = sorted((e for e in sim.events if tasks[e.task].device % 2 == core and e.resources),
                          key=lambda e: (e.start, e.task))
            for before, nxt in zip(mine, mine[1:]):
                assert nxt.start >= before.end - 1e-15, (before, nxt)
                overtaken += nxt.task < before.task   # a later task went first: the earlier was not ready
            transfers = [e for e in mine if e.kind == "copy" and tasks[e.task].src_device != tasks[e.task].device]
            assert all(f"core {core}" in e.resources for e in transfers)
            for e in mine:   # no earlier compute task of this core was ready and left waiting
                for u in mine:
                    if u.task < e.task and u.start > e.start and u.resources == (f"device {tasks[u.task].device}",
                                                                                 f"core {core}"):
                        ready = max((by_task[p].end for p in after[u.task]), default=0.0)
                        assert ready > e.start + 1e-15, (u, e)
        assert any(e.kind == "copy" for e in sim.events)
    assert overtaken > 0, "model parallelism leaves a thread's earlier task waiting for another device"


@pytest.mark.parametrize("model,nodes,per", [("lenet5", 1, 4), ("alexnet", 2, 2)])
def test_each_devices_tasks_run_in_program_order_on_its_stream(model, nodes, per):
    """One stream per device, as the runtime records them: a device's tasks (copies into it
    included) start in task id order, each after the one before it ends, even where a later
    task's inputs are there first (GPUs in a cluster: no shared cores, nothing else orders them)."""
    g = sw.models.get(model, batch=32)
    d = sw.DeviceGraph.cluster(nodes=nodes, devices_per_node=per)
    for plan in (sw.search(g, d), sw.strategies.model_parallel(g, d)):
        sim = simulate(plan, check_memory=False)
        tasks = lower(plan).tasks
        for dev in range(len(d)):
            mine = sorted((e for e in sim.events if tasks[e.task].device == dev), key=lambda e: e.task)
            for before, after in zip(mine, mine[1:]):
                assert after.start >= before.end, (before, after)


def test_a_reuse_edge_holds_back_the_task_that_takes_over_the_memory():
    """The memory plan puts a buffer B of device 1 over bytes of an earlier buffer A that a copy
    on device 0's stream reads; the runtime makes B's first task wait for that copy (a reuse
    edge).  Here the copy ends after the stream of device 1 reaches B's first task, so the edge
    holds that task back: the simulator starts it when the copy ends, as the oracle does, and
    an oracle that leaves the reuse edges out starts it earlier."""
    g = sw.models.lenet5(batch=32)
    plan = sw.search(g, sw.DeviceGraph.cluster(nodes=1, devices_per_node=2))
    edges = sw.memory_plan(plan).reuse_edges
    sim = simulate(plan)
    with_edges, without = sim_oracle.replay(plan), sim_oracle.replay(plan, reuse_edges=())
    assert [e.start for e in sim.events] == pytest.approx(with_edges.start, rel=1e-12, abs=1e-18)
    start, end = [e.start for e in sim.events], [e.end for e in sim.events]
    assert all(start[b] >= end[a] for a, b in edges)
    held = [(a, b) for a, b in edges if without.start[b] < end[a]]
    assert held, "no reuse edge holds a task back in this plan"
    for a, b in held:
        assert start[b] == pytest.approx(max(end[x] for x, y in edges if y == b), rel=1e-12)


def test_a_profiles_step_overhead_is_added_to_the_iteration():
    from shardwise.planning.profile import Profile

    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(2)
    plan = sw.strategies.data_parallel(g, d)
    times = {(op.name, plan[op.name].degrees): (1e-4, 2e-4) for op in g.ops}
    quiet = Profile(g.fingerprint(), {}, times, 1e9, {"update": 1e-9})
    busy = Profile(g.fingerprint(), {}, times, 1e9, {"update": 1e-9}, step_overhead=3e-4)
    a, b = simulate(plan, costs=quiet), simulate(plan, costs=busy)
    assert b.iteration_time == pytest.approx(a.iteration_time + 3e-4, rel=1e-12)
    assert [e.end for e in b.events] == [e.end for e in a.events]


def test_measured_tasks_take_their_measured_time_and_nothing_on_top():
    """The runtime times every task whole in C: a compute task takes its op's measured forward
    or backward time (shared among its worker's tasks of that phase), a bookkeeping task its
    fitted fixed + per-element time, and on one worker the step is the sum of them all."""
    from shardwise.planning.profile import Profile

    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    tg = lower(plan)
    times = {(op.name, plan[op.name].degrees): (1e-4, 2e-4) for op in g.ops}
    rate, fixed = 1e-9, 2e-5
    prof = Profile(g.fingerprint(), {}, times, 1e9, {"update": rate, "accumulate": rate},
                   element_fixed={"update": fixed, "accumulate": fixed})
    sim = simulate(plan, costs=prof)

    def flops_share(t) -> float:
        """A task's part in forward-FLOP units.  LeNet-5's convolutions and linear layers do
        2 K + 1 FLOPs per output (K products and the bias); a bias gradient, 1 per output."""
        desc = g[t.op].desc
        if t.kind == "backward_weight" and desc.inputs[t.slot].bias:
            return 1 / (2 * math.prod(desc.extents[desc.out_rank:]) + 1)
        return 1.0

    computes = Counter()
    for t in tg.tasks:
        if t.kind in COMPUTE_KINDS:
            computes[(t.op, t.phase == "forward")] += flops_share(t)
    assert sum(t.kind == "backward_weight" and g[t.op].desc.inputs[t.slot].bias for t in tg.tasks) == 5
    for t, e in zip(tg.tasks, sim.events):
        if t.kind in COMPUTE_KINDS:
            fwd, bwd = times[(t.op, plan[t.op].degrees)]
            kernels = (fwd if t.phase == "forward" else bwd) * flops_share(t) / computes[(t.op, t.phase == "forward")]
            assert e.end - e.start == pytest.approx(kernels, rel=1e-9)
        elif t.kind in ("update", "accumulate"):
            elements = volume(t.box) if t.box else tg.buffers[t.writes[0]].elements
            assert e.end - e.start == pytest.approx(fixed + rate * elements, rel=1e-9)
    assert sim.iteration_time == pytest.approx(sum(e.end - e.start for e in sim.events), rel=1e-9)
    assert sim.iteration_time == pytest.approx(sum(sim_oracle.task_durations(tg, prof)), rel=1e-9)
