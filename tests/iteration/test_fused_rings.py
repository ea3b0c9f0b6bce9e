"""Fused rings (``sw.lower(plan, rings="fused")``): each ring all-reduce as one task per ring link.

A ring of k members lowers, chunked, to 2 k (k - 1) copies and k (k - 1) accumulates a gradient:
ResNet-50 data parallel on 64 GPUs to 2.7 million tasks, on 1,024 GPUs to hundreds of millions.
Fused, each link i -> i + 1 carries every chunk it carries in one ``ring`` task, between two
joins, then each member sums what it received.  Checked here: the tasks and their bytes against
the chunked ring's (the same bytes on the same links), the data flow (no read before its write,
no race), the simulator against its oracle and against the chunked graph (the same iteration
time within 0.4% and the same arenas on the zoo's plans; the same bytes always), the
rank link's latency counted once per chunk, ``rings="auto"`` fusing only above
``FUSED_RINGS_ABOVE`` devices, and the runtime refusing a fused graph.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.iteration.lower import FUSED_RINGS_ABOVE, lower
from shardwise.iteration.simulate import iteration_time
from shardwise.planning.strategies import data_parallel, owt
from shardwise.train.runtime import NativeExecutor, op_attrs

import sim_oracle
from shared_graphs import mixed_graph
from strategies_random import random_plan
from task_checks import check_data_flow

RING, ZERO = sw.CostOptions(sync="ring"), sw.CostOptions(sync="zero")
# the docs' claim (docs/simulator.md, "Large machines"): on the zoo's plans the fused graph
# simulates within 0.4% of the chunked one, with the same arenas
ZOO_REL = 0.004


def chunk_volumes(box, k: int) -> list[int]:
    """The k chunks' volumes of a ring over a gradient box, as the chunked lowering cuts them."""
    return [int(np.prod([hi - lo for lo, hi in c])) for c in _chunks(box, k)]


def _chunks(box, k: int):
    shape = [hi - lo for lo, hi in box]
    dim = next((d for d, n in enumerate(shape) if n % k == 0), None)
    if dim is None:
        dim = next(d for d, n in enumerate(shape) if n >= k)
    n, out = shape[dim], []
    for c in range(k):
        lo, hi = box[dim][0] + n * c // k, box[dim][0] + n * (c + 1) // k
        out.append(tuple((lo, hi) if d == dim else box[d] for d in range(len(box))))
    return out


@pytest.mark.parametrize("options", [RING, ZERO], ids=["ring", "zero"])
@pytest.mark.parametrize("k", [2, 4, 5])
def test_each_link_carries_what_the_chunked_ring_sends_over_it(options, k):
    """Data parallel on k workers: per weight slot one ring task per member (two with zero: the
    reduce-scatter and the allgather of the parameters) from member i to member i + 1, standing
    for k - 1 chunks a half; its bytes are exactly the chunked ring's copies over that link, and
    the graph's bytes the plan's."""
    g = sw.models.lenet5(batch=10 * k)
    plan = data_parallel(g, sw.DeviceGraph.cpu(k), options)
    fused, chunked = lower(plan, rings="fused"), lower(plan, rings="chunked")
    assert fused.rings == "fused" and chunked.rings == "chunked"
    assert fused.bytes_moved() == chunked.bytes_moved() == pytest.approx(plan.bytes_moved, abs=0.5)
    halves = 1 if options is ZERO else 2
    for op in g.ops:
        rings = [t for t in fused.tasks if t.kind == "ring" and t.op == op.name]
        if not rings:
            continue
        slots = {}
        for t in rings:   # a weight's and a bias's ring tasks differ in their box's rank
            slots.setdefault(len(t.box), []).append(t)
        for tasks in slots.values():
            assert len(tasks) == k * (3 - halves)   # ring: one task a link; zero: two
            for t in tasks:
                assert t.slot == halves * (k - 1)
                assert (t.device - t.src_device) % k == 1
                copies = [c for c in chunked.tasks if c.kind == "copy" and c.op == op.name and
                          c.src_device == t.src_device and c.device == t.device and len(c.box) == len(t.box) and
                          c.phase == t.phase]
                assert len(copies) == t.slot
                assert t.nbytes == sum(c.nbytes for c in copies)
                vol = chunk_volumes(t.box, k)
                i = t.src_device
                sent = sum(vol) - vol[(i + 1) % k] if (halves == 2 or t.phase == "sync") else 0
                sent += sum(vol) - vol[(i + 2) % k] if (halves == 2 or t.phase == "update") else 0
                assert t.nbytes == 4 * sent
    assert fused.counts()["join"] >= 2 * len([t for t in fused.tasks if t.kind == "ring"]) // k
    if k > 2:
        assert len(fused.tasks) < len(chunked.tasks)


@pytest.mark.parametrize("options", [RING, ZERO], ids=["ring", "zero"])
def test_fused_graphs_read_after_writes_and_never_race(options):
    """On random plans, every read of a fused graph follows its write and no two unordered tasks
    touch the same bytes (the lowering's contract, as for the chunked graph)."""
    rng = np.random.default_rng(3)
    for n in (4, 6, 8):
        g = mixed_graph(batch=24)
        base = random_plan(g, sw.DeviceGraph.cpu(n), rng)
        tg = lower(sw.Plan(g, base.devices, base.configs, options), rings="fused")
        check_data_flow(tg)
        assert any(t.kind == "ring" for t in tg.tasks) or not any(
            t.kind == "accumulate" and t.phase == "sync" for t in lower(sw.Plan(g, base.devices, base.configs,
                                                                               options)).tasks)


@pytest.mark.parametrize("options", [RING, ZERO], ids=["ring", "zero"])
def test_the_simulator_replays_fused_rings_as_its_oracle_does(options):
    """The C simulator and the test oracle agree on fused graphs, in one process and with ranks
    (a fused link between ranks pays the rank link's latency once per chunk it stands for)."""
    rng = np.random.default_rng(5)
    g = mixed_graph(batch=24)
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=3, device="V100")
    base = random_plan(g, d, rng)
    plan = sw.Plan(g, d, base.configs, options)
    for ranks, link in ((None, (0.0, 0.0)), ([0, 0, 0, 1, 1, 1], (5e9, 20e-6))):
        got = sw.simulate(plan, check_memory=False, rings="fused", ranks=ranks,
                          rank_link=link if ranks else None).iteration_time
        want = sim_oracle.replay(plan, rings="fused", ranks=ranks, rank_link=link).iteration_time
        assert got == pytest.approx(want, rel=1e-9)
    dp = data_parallel(g, d, options)
    link = (5e9, 1e-3)   # a latency far above every transfer's time: counted per chunk, as chunked
    fused = sw.simulate(dp, check_memory=False, rings="fused", ranks=[0, 1, 2, 3, 4, 5], rank_link=link)
    chunked = sw.simulate(dp, check_memory=False, rings="chunked", ranks=[0, 1, 2, 3, 4, 5], rank_link=link)
    assert fused.iteration_time == pytest.approx(chunked.iteration_time, rel=0.05)
    assert fused.rank_bytes == chunked.rank_bytes


def _zoo_plans():
    h100 = sw.DeviceGraph.cluster(nodes=2, devices_per_node=8, device="H100")
    v100 = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="V100")
    bf16 = dict(precision="bf16")
    yield "resnet50 data ring", data_parallel(sw.models.resnet50(batch=256), h100, sw.CostOptions(sync="ring", **bf16))
    yield "resnet50 data zero", data_parallel(sw.models.resnet50(batch=256), h100, sw.CostOptions(sync="zero", **bf16))
    yield "vgg16 owt ring", owt(sw.models.vgg16(batch=256), v100, RING)
    yield "vgg16 owt zero", owt(sw.models.vgg16(batch=256), v100, ZERO)
    yield "gpt2 data ring", data_parallel(sw.models.gpt(vocab=50304, batch=16), h100, sw.CostOptions(sync="ring", **bf16))


@pytest.mark.parametrize("name,plan", list(_zoo_plans()), ids=lambda x: x if isinstance(x, str) else "")
def test_zoo_plans_simulate_alike_fused_and_chunked(name, plan):
    """On the zoo's plans (16 GPUs) the fused graph simulates within 0.4% of the chunked one, moves
    the same bytes and plans the same arenas: a model fit for machines too large to chunk."""
    fused = sw.simulate(plan, check_memory=False, rings="fused")
    chunked = sw.simulate(plan, check_memory=False, rings="chunked")
    assert fused.tasks < chunked.tasks / 2
    assert fused.bytes_moved == chunked.bytes_moved
    assert fused.iteration_time == pytest.approx(chunked.iteration_time, rel=ZOO_REL)
    assert fused.memory == chunked.memory


def test_auto_fuses_only_on_large_machines():
    """rings="auto" (the simulator's and iteration_time's default) lowers chunked up to
    FUSED_RINGS_ABOVE devices and fused above; explicit choices are kept."""
    g = sw.models.lenet5(batch=64)
    small = data_parallel(g, sw.DeviceGraph.cpu(FUSED_RINGS_ABOVE), RING)
    large = data_parallel(g, sw.DeviceGraph.cpu(2 * FUSED_RINGS_ABOVE), RING)
    assert sw.simulate(small, check_memory=False).tasks == len(lower(small).tasks)
    assert sw.simulate(large, check_memory=False).tasks == len(lower(large, rings="fused").tasks)
    assert sw.simulate(large, check_memory=False, rings="chunked").tasks == len(lower(large).tasks)
    assert iteration_time(large)[1] == len(lower(large, rings="fused").tasks)
    assert iteration_time(large, rings="chunked")[1] == len(lower(large).tasks)
    assert len(lower(large, rings="fused").tasks) < len(lower(large).tasks) / 5


def test_bad_ring_choices_and_the_runtime_refuse_fused_graphs():
    g = sw.models.lenet5(batch=8)
    plan = data_parallel(g, sw.DeviceGraph.cpu(2), RING)
    for bad in ("ring", "", None):
        with pytest.raises(sw.ConfigError, match="rings"):
            lower(plan, rings=bad)
        with pytest.raises(sw.ConfigError, match="rings"):
            sw.simulate(plan, rings=bad)
    with pytest.raises(sw.ConfigError, match="fused"):
        lower(plan, rings="fused", ranks=2)
    tg = lower(plan, rings="fused")
    with pytest.raises(sw.ConfigError, match="fused"):
        NativeExecutor(g, plan, tg)
    with pytest.raises(ValueError, match="fused"):
        _core.Runtime(tg.handle, op_attrs(g), 1)
    with pytest.raises(ValueError, match="fused"):
        tg.handle.split_ranks(np.zeros(2, np.int32))
    # the graph still has a memory plan and simulates
    assert sw.memory_plan(tg).devices[0].arena_bytes > 0
    assert sw.simulate(tg, check_memory=False).iteration_time > 0


def test_schedules_and_swap_plans_keep_the_chunked_graph():
    """A critical-path schedule and a swap plan are made on the chunked graph (their ids are its):
    with them "auto" lowers chunked on a large machine too, and "fused" is refused."""
    g = sw.models.lenet5(batch=2 * 2 * FUSED_RINGS_ABOVE)
    plan = data_parallel(g, sw.DeviceGraph.cpu(2 * FUSED_RINGS_ABOVE), RING)
    chunked = len(lower(plan).tasks)
    assert sw.simulate(plan, check_memory=False, schedule="critical_path").tasks == chunked
    with pytest.raises(sw.ConfigError, match="chunked"):
        sw.simulate(plan, check_memory=False, schedule="critical_path", rings="fused")
    sched = sw.schedule(plan)
    assert sw.memory_plan(plan, schedule=sched, rings="auto").devices[0].arena_bytes > 0
    with pytest.raises(sw.ConfigError, match="chunked"):
        sw.memory_plan(plan, schedule=sched, rings="fused")
    # a swap plan (made on the chunked graph) is replayed on it
    big = data_parallel(sw.models.lenet5(batch=64 * 2 * FUSED_RINGS_ABOVE), sw.DeviceGraph.cpu(2 * FUSED_RINGS_ABOVE),
                        RING)
    swap = sw.swap_plan(big, 3_960_000)
    assert sw.simulate(big, swap=swap, check_memory=False).tasks == len(lower(big, swap=swap).tasks)
    with pytest.raises(sw.ConfigError, match="chunked"):
        sw.simulate(big, swap=swap, rings="fused")


def _random_and_data_parallel_plans(options, seed: int):
    """A random plan of the mixed graph and its data parallelism, on 2, 4, 5 and 8 CPUs."""
    rng = np.random.default_rng(seed)
    for n in (2, 4, 5, 8):
        g = mixed_graph(batch=40)
        base = random_plan(g, sw.DeviceGraph.cpu(n), rng)
        yield sw.Plan(g, base.devices, base.configs, options)
        yield data_parallel(g, base.devices, options)


@pytest.mark.parametrize("options", [RING, ZERO, sw.CostOptions()], ids=["ring", "zero", "ps"])
def test_a_fused_graph_adds_up_the_chunked_graphs_buffers(options):
    """buffer_totals(chunked=True) of the fused lowering is the chunked graph's: the same bytes
    per device and k - 1 more receive buffers a ring member (what the search's cheap memory test
    reads without lowering every chunk)."""
    from shardwise.iteration.lower import lowered

    rings = 0
    for plan in _random_and_data_parallel_plans(options, seed=11):
        want = lowered(plan).buffer_totals()
        got = lowered(plan, rings="fused").buffer_totals(chunked=True)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        rings += len([t for t in lower(plan, rings="fused").tasks if t.kind == "ring"])
    assert (rings > 0) == (options.sync != "parameter_server")
    assert lowered(plan).buffer_totals(chunked=True)[1].tolist() == lowered(plan).buffer_totals()[1].tolist()


@pytest.mark.parametrize("options", [RING, ZERO, sw.CostOptions()], ids=["ring", "zero", "ps"])
def test_totals_of_a_lowering_without_tasks_are_the_task_graphs(options):
    """buffer_totals (a lowering that keeps no task, what the search's memory check reads) gives
    each device's bytes and buffers as the task graph of the same lowering counts them, fused or
    chunked, with the chunks of fused rings counted when asked, and the persistent bytes."""
    from shardwise.iteration.lower import buffer_totals, lowered

    rings = 0
    for plan in _random_and_data_parallel_plans(options, seed=12):
        for detail in ("chunked", "fused"):
            handle = lowered(plan, rings=detail)
            for chunked in (False, True):
                got = buffer_totals(plan, rings=detail, chunked=chunked)
                want = handle.buffer_totals(chunked=chunked)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
                np.testing.assert_array_equal(got[2], handle.buffer_totals(persistent=True)[0])
            rings += detail == "fused" and int((handle.arrays()["kind"] == _core.TASK_KINDS.index("ring")).sum())
    assert (rings > 0) == (options.sync != "parameter_server")
    with pytest.raises(sw.ConfigError, match="rings"):
        buffer_totals(plan, rings="auto")


@pytest.mark.parametrize("model", ["inception_v3", "resnet50"])
def test_totals_of_large_lowerings_are_the_task_graphs(model):
    """The memory check's lowering of a large plan makes room for its buffers at once (1 MB and
    more, a guess from the plan's workers) instead of growing it: its totals are still the task
    graph's, for data and model parallelism (1.5 and 2.6 times the buffers of the other)."""
    from shardwise.iteration.lower import buffer_totals, lowered

    g = sw.models.get(model)
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")
    for plan in (sw.strategies.data_parallel(g, d), sw.strategies.model_parallel(g, d)):
        handle = lowered(plan, rings="fused")
        got = buffer_totals(plan, rings="fused", chunked=True)
        np.testing.assert_array_equal(got[0], handle.buffer_totals(chunked=True)[0])
        np.testing.assert_array_equal(got[1], handle.buffer_totals(chunked=True)[1])
        assert int(got[1].sum()) * 60 > 2**20   # (sw_buffer: 60 bytes) large enough for the room made at once


@pytest.mark.parametrize("options", [RING, sw.CostOptions(sync="ring", precision="bf16", reduction_splits=True)],
                         ids=["ring", "bf16-splits"])
def test_totals_of_chosen_configurations_are_the_plans(options):
    """Problem.buffer_totals_chosen (the search's memory check of the plan it found, lowered from
    the problem's own configurations) gives the totals of the plan made from those configurations,
    for random choices among every op's configurations, reduction splits included; a choice out
    of range or of the wrong length is refused."""
    from shardwise.iteration.lower import buffer_totals, op_roles
    from shardwise.planning.problem import make_problem, worker_counts
    from shardwise.planning.search import _chosen_rows, _op_configs

    rng = np.random.default_rng(5)
    g = mixed_graph(batch=40)
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="P100")
    problem = make_problem(g, d, options)
    problem.enumerate(np.asarray(worker_counts(len(d)), dtype=np.int32))
    counts = problem.config_counts()
    splits = 0
    for _ in range(12):
        choice = np.array([rng.integers(0, n) for n in counts], np.int64)
        rows, _ = _chosen_rows(problem, choice)
        plan = sw.Plan(g, d, _op_configs(g, rows), options)
        splits += sum(c.reduction is not None for c in plan.configs.values())
        for fused, chunked in ((True, True), (False, False), (True, False)):
            got = problem.buffer_totals_chosen(op_roles(g), choice, fused_rings=fused, chunked=chunked)
            want = buffer_totals(plan, rings="fused" if fused else "chunked", chunked=chunked, problem=problem)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    assert splits > 0 or not options.reduction_splits
    with pytest.raises(IndexError, match="out of range"):
        problem.buffer_totals_chosen(op_roles(g), np.asarray(counts, np.int64))
    with pytest.raises(ValueError, match="one configuration per op"):
        problem.buffer_totals_chosen(op_roles(g), np.zeros(len(counts) + 1, np.int64))
    with pytest.raises(ValueError, match="kinds needs one entry per op"):
        problem.buffer_totals_chosen(op_roles(g)[:-1], np.zeros(len(counts), np.int64))
