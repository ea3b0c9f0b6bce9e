"""The task graph of an iteration: well formed, complete, and consistent with Eq. 1.

The cost model and the lowering are written separately (table sums in cost.c,
task construction in lower.c); the bytes the task graph copies between devices
must equal the bytes the cost model charges, for any plan.  Its data flow is
checked too: every read sees a write the reader depends on, and no two tasks
touching a buffer (one of them writing) can run in either order.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise as sw
from shardwise.ops.box import intersect, volume, worker_boxes
from shardwise.planning.regions import input_region
from shardwise.iteration.lower import lower

from strategies_random import build_graph, examples, graph_recipes, random_plan
from task_checks import check_data_flow


# buffers that carry values from one iteration to the next: read before the iteration writes them


def check_task_graph(plan):
    tg = lower(plan)
    check_data_flow(tg)
    # 1. the bytes crossing devices are exactly what Eq. 1 charges
    assert tg.bytes_moved() == pytest.approx(plan.bytes_moved, rel=1e-12, abs=0.5)
    # 2. dependencies point backwards (the list is a topological order)
    for t in tg.tasks:
        assert all(dep < t.id for dep in t.deps), t
        assert 0 <= t.device < len(plan.devices)
    # 3. copies move data between the devices they claim, and only cross-device copies cost bytes
    buffers = tg.buffers
    for t in tg.tasks:
        if t.kind == "copy":
            (src,), (dst,) = t.reads, t.writes
            assert buffers[src].device == t.src_device and buffers[dst].device == t.device
            assert t.nbytes == (volume(t.box) * 4 if t.src_device != t.device else 0)
            assert intersect(buffers[src].box, t.box) == t.box and intersect(buffers[dst].box, t.box) == t.box
    # 4. staging regions are covered exactly once by their copies
    pieces = {}
    for t in tg.tasks:
        if t.kind == "copy" and buffers[t.writes[0]].kind == "region":
            pieces.setdefault(t.writes[0], []).append(t.box)
    for buf, boxes in pieces.items():
        assert sum(volume(b) for b in boxes) == volume(buffers[buf].box)
        for a, b in itertools.combinations(boxes, 2):
            assert intersect(a, b) is None
    # 5. every accumulate adds a piece of a partial gradient into the owner's gradient shard (or,
    #    in a ring all-reduce, a received chunk into a replica's weight gradient); a
    #    backward_data writes a partial gradient, or the first term of a gradient shard on its own
    #    device in place (then every later writer of that shard is an accumulate)
    grad_writers: dict[int, list] = {}
    for t in tg.tasks:
        if t.kind == "accumulate":
            (src,), (dst,) = t.reads, t.writes
            ring = plan.options.sync == "ring" and t.phase == "sync"
            assert buffers[dst].kind == ("param_grad" if ring else "grad") and buffers[dst].device == t.device
            assert intersect(buffers[dst].box, t.box) == t.box
        if t.kind == "backward_data":
            (dst,) = t.writes
            assert buffers[dst].kind in ("partial_grad", "grad"), t
            assert buffers[dst].device == t.device
        for b in t.writes:
            if buffers[b].kind == "grad":
                grad_writers.setdefault(b, []).append(t)
    for b, ws in grad_writers.items():
        kinds = [t.kind for t in ws]
        assert kinds.count("backward_data") <= 1 and "backward_data" not in kinds[1:], (buffers[b], kinds)
        assert kinds == ["zero_grad"] or set(kinds[1:]) <= {"accumulate"}, (buffers[b], kinds)
    return tg


@settings(max_examples=examples(60), deadline=None)
@given(recipe=graph_recipes(max_ops=8), ndev=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_random_plans_lower_consistently(recipe, ndev, seed):
    g = build_graph(recipe)
    d = sw.DeviceGraph.cpu(ndev)
    rng = np.random.default_rng(seed)
    check_task_graph(random_plan(g, d, rng))


@settings(max_examples=examples(60), deadline=None)
@given(recipe=graph_recipes(max_ops=8), ndev=st.integers(2, 4), seed=st.integers(0, 2**31))
def test_random_plans_with_reduction_splits_lower_consistently(recipe, ndev, seed):
    """Partition-n-reduce: partial outputs copied to the owners and the pre-activation gradient
    copied back move exactly the bytes Eq. 1 charges for the reduction; consumers read owners."""
    g = build_graph(recipe)
    d = sw.DeviceGraph.cpu(ndev)
    rng = np.random.default_rng(seed)
    plan = random_plan(g, d, rng, reductions=True)
    tg = check_task_graph(plan)
    for name, cfg in plan.configs.items():
        if cfg.reduction is None:
            continue
        r = cfg.reduction_degree
        kinds = [t.kind for t in tg.tasks if t.op == name]
        assert kinds.count("forward_partial") == cfg.workers
        assert kinds.count("sum_partials") == kinds.count("activation_grad") == cfg.workers // r
        for t in tg.tasks:
            if t.op == name and t.kind == "sum_partials":
                assert len(t.reads) == r and t.device in cfg.devices[::r]


@pytest.mark.parametrize("model,ndev", [("lenet5", 4), ("alexnet", 4), ("resnet18", 8), ("inception_v3", 4)])
def test_zoo_plans_and_baselines_lower_consistently(model, ndev):
    g = sw.models.get(model, batch=32)
    d = sw.DeviceGraph.cluster(nodes=max(1, ndev // 4), devices_per_node=min(4, ndev))
    plans = [sw.search(g, d), *sw.strategies.baselines(g, d)]
    if model in ("lenet5", "alexnet"):
        plans.append(sw.search(g, d, options=sw.CostOptions(reduction_splits=True)))
    for plan in plans:
        check_task_graph(plan)


def test_gradient_pieces_cover_every_read():
    """Each element of a producer's output receives one gradient piece per consumer
    worker that read it: the accumulate boxes and the shards a backward_data writes
    in place, counted per element, equal the number of consumer regions covering
    that element."""
    g = sw.Graph("fan")
    x = g.input("x", (4, 2, 6, 6))
    a = g.relu(x, name="a")
    g.conv2d(a, 2, kernel=3, padding=1, name="b")
    g.pool2d(a, kernel=2, name="c")
    d = sw.DeviceGraph.cpu(3)
    plan = sw.Plan.from_dict(g, d, {"a": {"h": 3}, "b": {"w": 3, "devices": [2, 0, 1]}, "c": {"n": 2}})
    tg = lower(plan)
    counts = np.zeros(g["a"].shape, int)
    for t in tg.tasks:
        if t.kind == "accumulate" and t.op == "a":
            counts[tuple(slice(lo, hi) for lo, hi in t.box)] += 1
        if t.kind == "backward_data" and tg.buffers[t.writes[0]].kind == "grad":
            assert tg.buffers[t.writes[0]].op == "a"
            counts[tuple(slice(lo, hi) for lo, hi in tg.buffers[t.writes[0]].box)] += 1
    expected = np.zeros(g["a"].shape, int)
    for consumer in ("b", "c"):
        op = g[consumer]
        for box in worker_boxes(op.shape, plan[consumer].degrees):
            r = input_region(op.desc, 0, box)
            expected[tuple(slice(lo, hi) for lo, hi in r)] += 1
    assert (counts == expected).all()


def _gradient_terms(g) -> dict[str, int]:
    """Per op with a gradient (not a graph input): how many (consumer, data slot) pairs read it,
    from the graph alone -- the terms its gradient sums."""
    terms = {op.name: 0 for op in g.ops if op.kind != "input"}
    for op in g.ops:
        for producer in op.inputs:
            if g.ops[producer].kind != "input":
                terms[g.ops[producer].name] += 1
    return terms


@pytest.mark.parametrize("model,ndev", [("gpt", 1), ("lenet5", 1), ("lenet5", 2), ("resnet18", 2)])
def test_first_gradient_term_is_written_in_place(model, ndev):
    """Unsplit on one device, or data parallel (every op's worker w on device w reads the batch
    slice its producer's worker w owns): every consumer's region of a gradient shard is the whole
    shard on its device, so the first term is written by backward_data in place and only the
    other terms are accumulated -- per worker, one accumulate fewer than the op's consumers."""
    g = (sw.models.gpt(layers=1, d_model=32, heads=2, seq=8, vocab=16, batch=2) if model == "gpt"
         else sw.models.get(model, batch=4))
    d = sw.DeviceGraph.cpu(ndev)
    plan = sw.Plan.from_dict(g, d, {}) if ndev == 1 else sw.strategies.data_parallel(g, d)
    tg = check_task_graph(plan)
    terms = {name: n for name, n in _gradient_terms(g).items() if n > 0}
    accumulates, in_place = {}, {}
    for t in tg.tasks:
        if t.kind == "accumulate":
            accumulates[t.op] = accumulates.get(t.op, 0) + 1
        if t.kind == "backward_data" and tg.buffers[t.writes[0]].kind == "grad":
            name = tg.buffers[t.writes[0]].op
            in_place[name] = in_place.get(name, 0) + 1
    assert in_place == {name: ndev for name in terms}
    assert accumulates == {name: ndev * (n - 1) for name, n in terms.items() if n > 1}


@pytest.mark.parametrize("devices,direct", [([0, 1], True), ([1, 0], False)])
def test_gradient_on_another_device_is_still_sent_and_accumulated(devices, direct):
    """b reads a's shards whole; in place only where b's worker sits on the shard's device."""
    g = sw.Graph("chain")
    x = g.input("x", (4, 3, 4, 4))
    a = g.relu(x, name="a")
    b = g.relu(a, name="b")
    g.conv2d(b, 2, kernel=1, name="c")
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), {"a": {"n": 2}, "b": {"n": 2, "devices": devices},
                                                       "c": {"n": 2, "devices": devices}})
    tg = check_task_graph(plan)
    to_a = [t for t in tg.tasks if t.op == "b" and t.kind == "backward_data"]
    assert len(to_a) == 2
    assert all((tg.buffers[t.writes[0]].kind == "grad") == direct for t in to_a)
    kinds = [t.kind for t in tg.tasks if t.op == "a" and t.phase == "backward"]
    assert kinds.count("accumulate") == (0 if direct else 2)
    copies = [t for t in tg.tasks if t.kind == "copy" and t.phase == "backward" and t.op == "b"]
    assert len(copies) == (0 if direct else 2)


def test_region_matches_core_halo():
    g = sw.Graph("h")
    x = g.input("x", (2, 3, 8, 8))
    g.conv2d(x, 4, kernel=3, stride=2, padding=1, name="conv")
    op = g["conv"]
    assert op.shape == (2, 4, 4, 4)
    # output rows 2..3 read input rows 3..7 (2*2-1 .. 3*2+1), clipped to the image
    assert input_region(op.desc, 0, ((0, 2), (0, 4), (2, 4), (0, 4))) == ((0, 2), (0, 3), (3, 8), (0, 8))


def test_memory_per_device_counts_every_buffer():
    g = sw.models.lenet5(batch=16)
    d = sw.DeviceGraph.cpu(2)
    tg = lower(sw.strategies.data_parallel(g, d))
    mem = tg.memory_per_device()
    assert sum(mem.values()) == sum(b.nbytes for b in tg.buffers)
    # data parallelism: both workers hold every parameter
    params = g.num_parameters() * 4
    for dev in (0, 1):
        held = sum(b.nbytes for b in tg.buffers if b.device == dev and b.kind == "param")
        assert held == params
    assert "tasks" in tg.summary()


def test_buffer_totals_add_up_the_buffers_of_each_device():
    """The memory check's per-device totals (TaskGraph.buffer_totals) are the buffers' bytes and
    counts, device by device, as the Python records list them."""
    from shardwise.iteration.lower import lowered

    g = sw.models.lenet5(batch=16)
    d = sw.DeviceGraph.cpu(4)
    plan = sw.strategies.owt(g, d)   # data-parallel convolutions, model-parallel classifier: devices differ
    tg = lower(plan)
    memory, buffers = lowered(plan).buffer_totals()
    for dev in range(len(d)):
        mine = [b for b in tg.buffers if b.device == dev]
        assert buffers[dev] == len(mine)
        assert memory[dev] == sum(b.nbytes for b in mine)
    assert buffers.sum() == len(tg.buffers) and len(set(b.device for b in tg.buffers)) > 1


@settings(max_examples=examples(40), deadline=None)
@given(recipe=graph_recipes(max_ops=8), ndev=st.integers(2, 4), seed=st.integers(0, 2**31))
def test_random_ring_plans_lower_consistently(recipe, ndev, seed):
    """Ring all-reduce (any replica groups a random plan makes, on devices in any order) moves
    exactly the bytes the ring cost model charges, with a data flow every timing agrees on."""
    g = build_graph(recipe)
    d = sw.DeviceGraph.cpu(ndev)
    plan = random_plan(g, d, np.random.default_rng(seed))
    check_task_graph(sw.Plan(g, d, plan.configs, sw.CostOptions(sync="ring")))


def test_data_flow_check_catches_a_missing_dependency():
    """The data-flow check is not vacuous: dropping the dependencies of a task that reads
    what a task of another device writes is caught (as a read before a write, or a race)."""
    import dataclasses

    g = sw.models.lenet5(batch=8)
    tg = lower(sw.search(g, sw.DeviceGraph.cpu(2)))
    check_data_flow(tg)
    crossing = {}   # a copy of each phase that waits for a task of another device
    for t in tg.tasks:
        if any(tg.tasks[d].device != t.device for d in t.deps):
            assert t.kind == "copy"   # devices meet only through copies onto the destination
            crossing.setdefault(t.phase, t)
    assert set(crossing) == {"forward", "backward", "sync", "update"}
    for t in crossing.values():
        broken = dataclasses.replace(tg, tasks=[dataclasses.replace(x, deps=()) if x.id == t.id else x
                                                for x in tg.tasks])
        with pytest.raises(AssertionError):
            check_data_flow(broken)


@pytest.mark.parametrize("model,ndev", [("lenet5", 2), ("resnet18_small", 2), ("alexnet_small", 4)])
def test_weight_and_bias_gradients_are_separate_sub_tasks(model, ndev):
    """TurboDL's split of a layer's backward: dA (backward_data), dW and dB are separate tasks.
    Every worker holding a slice of a weight has exactly one backward_weight task writing that
    slice's gradient and nothing else; a bias's (a conv's or linear's bias, a batchnorm's beta)
    reads only the output's gradient (and the output, for a fused ReLU), never the input, and
    depends on nothing but what produced that gradient."""
    g = sw.models.get(model, batch=8)
    for plan in (sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(ndev)),
                 sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(ndev))):
        tg = lower(plan)
        grads = {}
        for t in tg.tasks:
            if t.kind != "backward_weight":
                continue
            assert len(t.writes) == 1, t
            out = tg.buffers[t.writes[0]]
            assert out.kind == "param_grad" and out.slot == t.slot and out.op == t.op, t
            assert (t.op, t.worker, t.slot) not in grads, t
            grads[(t.op, t.worker, t.slot)] = t
            read_kinds = [tg.buffers[b].kind for b in t.reads]
            is_bias = g[t.op].desc.inputs[t.slot].bias
            if is_bias:
                assert set(read_kinds) <= {"grad", "grad_pre", "activation"}, (t, read_kinds)
                assert all(tg.buffers[b].op == t.op for b in t.reads), t
                for d in t.deps:   # what it waits for writes what it reads
                    assert set(tg.tasks[d].writes) & set(t.reads), (t, tg.tasks[d])
            else:
                assert "region" in read_kinds or any(tg.buffers[b].op != t.op for b in t.reads), t
        # every weight slot of every op with weights has its gradient task on the workers reading it
        for (op, name, worker), b in tg.params.items():
            assert (op, worker, tg.buffers[b].slot) in grads, (op, name, worker)
        biases = [k for k in grads if g[k[0]].desc.inputs[k[2]].bias]
        assert biases and len(biases) < len(grads)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("sync", ["ring", "zero"])
def test_persistent_buffer_totals_bound_every_arena(sync, precision):
    """buffer_totals(persistent=True): the planned bytes of the buffers kept across steps
    (parameters, optimizer state, running statistics), device by device, which the memory plan
    keeps live at once, so no device's arena is smaller (the search's memory check rejects a plan
    on them without making its memory plan)."""
    from shardwise import _core
    from shardwise.iteration.lower import lowered
    from shardwise.planning.problem import CostOptions

    g = sw.models.resnet18_small(batch=8)   # batch norm: running statistics persist too
    d = sw.DeviceGraph.cpu(4)
    options = CostOptions(sync=sync, precision=precision)
    kinds = [_core.BUFFER_KINDS.index(k) for k in ("param", "momentum", "running_stats")]
    for plan in sw.strategies.baselines(g, d, options):
        handle = lowered(plan)
        a = handle.arrays()
        keep = np.isin(a["buffer_kind"], kinds)
        want = np.bincount(a["buffer_device"][keep], weights=a["buffer_plan_bytes"][keep], minlength=len(d))
        got, count = handle.buffer_totals(persistent=True)
        assert got.tolist() == want.astype(np.int64).tolist() and (got > 0).all()
        assert count.tolist() == np.bincount(a["buffer_device"][keep], minlength=len(d)).tolist()
        assert (got <= handle.memory_plan(align=256)["arena"]).all()


def test_task_graph_boxes_hold_int32_coordinates_and_refuse_wider_ones():
    """A task graph stores its boxes with int32 coordinates: a dimension of 2^31 - 1 elements
    keeps its exact extent (tasks' and buffers' boxes come back as int64), one beyond is refused
    with a clear ValueError rather than truncated, by the lowering and by what lowers (simulate)."""
    def plan_of(rows):
        g = sw.Graph()
        g.relu(g.input("x", (rows, 2)), name="y")
        return sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))

    a = lower(plan_of(2**31 - 1)).arrays
    assert a["buffer_box"].dtype == np.int64 and a["box"].dtype == np.int64
    assert a["buffer_box"][:, 0].tolist() == [2] * len(a["buffer_box"])               # rank
    assert a["buffer_box"][:, 1 + sw._core.MAX_RANK].tolist() == [2**31 - 1] * len(a["buffer_box"])   # hi[0]
    wide = plan_of(2**31 + 8)
    with pytest.raises(ValueError, match="dimension too large for a task graph.*2147483656"):
        lower(wide)
    with pytest.raises(ValueError, match="dimension too large for a task graph"):
        sw.simulate(wide, check_memory=False)
