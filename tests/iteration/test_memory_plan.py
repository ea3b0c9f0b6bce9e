"""Planned memory (csrc/mem/memplan.c, memplan_check.c): one arena per device, offsets from lifetimes.

* On random plans the validator proves the offsets safe from the task graph alone, the
  peak agrees with an independent sweep over the task graph written here, and every
  offset is the plain first fit (largest first, one list in offset order) written here.
* The validator is not vacuous: two live buffers on one address, a parameter sharing
  bytes, a missing reuse edge, an offset outside the arena are each refused.
* Memory plans exist for any plan, a 16-device cluster plan too, and are far below the
  sum of every buffer of the iteration.
* Large graphs' devices are planned in runs on several threads: forced onto threads, small
  plans still meet every definition above, and streams, swapping and iterations back to back
  give exactly one thread's arrays.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise as sw
from shardwise import _core
from shardwise.iteration.lower import lower, plan_arrays
from shardwise.iteration.memory import _problem

from strategies_random import build_graph, device_graph_cases, examples, graph_recipes, random_plan

DEVICE_CASES = device_graph_cases()
LIVE_THROUGHOUT = {"param", "momentum", "running_stats"}   # kept across steps


def reference_lifetimes(tg) -> dict[int, tuple[int, int]]:
    """(first, last) task touching each buffer; buffers kept across steps, or read by the
    host after it (loss outputs), live from 0 to the number of tasks."""
    n = len(tg.tasks)
    host = {b for t in tg.tasks if t.kind == "loss" for b in t.writes + t.reads}   # probabilities, logits
    span: dict[int, list[int]] = {}
    for t in tg.tasks:
        for b in t.reads + t.writes:
            span.setdefault(b, [t.id, t.id])[1] = t.id
    out = {}
    for b in tg.buffers:
        if b.kind in LIVE_THROUGHOUT or b.id in host or b.id not in span:
            out[b.id] = (0, n)
        else:
            out[b.id] = tuple(span[b.id])
    return out


def reference_peaks(tg) -> dict[int, int]:
    """Per device, the most bytes live at any task position (a direct sweep)."""
    life = reference_lifetimes(tg)
    n = len(tg.tasks)
    live = {d: np.zeros(n + 2, np.int64) for d in range(len(tg.plan.devices))}
    for b in tg.buffers:
        first, last = life[b.id]
        live[b.device][first] += b.nbytes
        live[b.device][last + 1] -= b.nbytes
    return {d: int(np.cumsum(v).max()) for d, v in live.items()}


def reference_offsets(tg, align: int = 64) -> dict[int, int]:
    """Greedy by size, the rule csrc/mem/memplan_place.c speeds up: per device the buffers largest
    first (ties by id), each at the lowest aligned offset c where no placed buffer live at the
    same time meets [c, c + size), found by one pass over the placed ones in offset order."""
    life = reference_lifetimes(tg)
    out: dict[int, int] = {}
    placed: dict[int, list[tuple[int, int, int, int]]] = {}   # device -> [(lo, hi, first, last)]
    for b in sorted(tg.buffers, key=lambda b: (-b.nbytes, b.id)):
        size = -(-b.nbytes // align) * align
        first, last = life[b.id]
        c = 0
        for lo, hi, f, l in sorted(placed.get(b.device, [])):
            if size == 0 or (f <= last and first <= l and lo >= c + size):
                break
            if f <= last and first <= l:
                c = max(c, hi)
        out[b.id] = c
        if size:
            placed.setdefault(b.device, []).append((c, c + size, first, last))
    return out


def check_memory_plan(plan) -> sw.MemoryPlan:
    mp = sw.memory_plan(plan, check=True)
    tg = lower(plan)
    peaks = reference_peaks(tg)
    sums = tg.memory_per_device()
    for d, dm in mp.devices.items():
        assert dm.peak_bytes == peaks[d]
        assert dm.peak_bytes <= dm.arena_bytes
        assert dm.sum_of_buffers == sums[d]
        assert dm.parameters == sum(b.nbytes for b in tg.buffers if b.device == d and b.kind == "param")
        assert dm.optimizer_state == sum(b.nbytes for b in tg.buffers if b.device == d and b.kind == "momentum")
    assert {b.id: mp.offset(b.id) for b in tg.buffers} == reference_offsets(tg, mp.align)
    for b in tg.buffers:
        assert mp.offset(b.id) % mp.align == 0
        assert mp.offset(b.id) + b.nbytes <= mp.devices[b.device].arena_bytes
    # every reuse edge goes forward and ends at a task on the device whose memory is reused
    for a, b in mp.reuse_edges:
        assert a < b and tg.tasks[a].device != tg.tasks[b].device
    if mp.schedule is None:   # one stream a device: the edges are exactly the ones defined below
        assert sorted(mp.reuse_edges) == reference_reuse_edges(tg, mp)
    return mp


def reference_reuse_edges(tg, mp) -> list[tuple[int, int]]:
    """The reuse edges by their definition, buffer pair by buffer pair: for every non-empty buffer A
    that a task of another device touches and that does not live throughout, the non-empty buffers
    of A's device overlapping A's bytes and first touched after A's last task; the earliest of those
    first tasks gets an edge from each of A's other-device tasks (memory is reused within a device's
    arena, or within its host region)."""
    first, last, offset = mp.arrays["first"], mp.arrays["last"], mp.arrays["offset"]
    ntasks = len(tg.tasks)
    remote: dict[int, set[int]] = {}
    for t in tg.tasks:
        for b in set(t.reads) | set(t.writes):
            if tg.buffers[b].device != t.device:
                remote.setdefault(b, set()).add(t.id)
    edges = set()
    for a in tg.buffers:
        if a.nbytes == 0 or a.id not in remote or (first[a.id] == 0 and last[a.id] == ntasks):
            continue
        lo, hi = offset[a.id], offset[a.id] + a.nbytes
        region = (a.device, a.kind == "host")   # a device's arena, or its host region (swapping)
        after = [first[b.id] for b in tg.buffers if (b.device, b.kind == "host") == region and b.nbytes > 0
                 and first[b.id] > last[a.id] and offset[b.id] < hi and offset[b.id] + b.nbytes > lo]
        if after:
            edges |= {(r, int(min(after))) for r in remote[a.id]}
    return sorted(edges)


@contextlib.contextmanager
def planned_on_threads(threads: int = 3):
    """Every memory plan made meanwhile plans its devices in runs on ``threads`` threads (by
    default only graphs of hundreds of thousands of buffers are)."""
    old = _core.memory_plan_parallel(0, threads)
    try:
        yield
    finally:
        _core.memory_plan_parallel(*old)


@settings(max_examples=examples(60), deadline=None)
@given(recipe=graph_recipes(max_ops=8), case=st.sampled_from(sorted(DEVICE_CASES)), seed=st.integers(0, 2**31),
       reductions=st.booleans())
def test_random_plans_get_safe_memory_plans(recipe, case, seed, reductions):
    g = build_graph(recipe)
    plan = random_plan(g, DEVICE_CASES[case], np.random.default_rng(seed), reductions=reductions)
    check_memory_plan(plan)
    with planned_on_threads():   # devices in runs on three threads, as large graphs' are
        check_memory_plan(plan)


def _same_arrays(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k


@pytest.mark.parametrize("what", ["streams", "swap", "iterations"])
def test_threads_plan_exactly_what_one_thread_plans(what):
    g = sw.models.resnet18_small(batch=8, width=8)
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=2)
    plan = sw.strategies.data_parallel(g, d)

    def made():
        if what == "streams":
            return sw.memory_plan(plan, schedule=sw.schedule(plan), check=True).arrays
        if what == "swap":
            peak = sw.memory_plan(plan).peak_bytes
            sp = sw.swap_plan(plan, budget=int(peak * 0.8))
            assert sp.entries   # host regions to plan
            return sw.memory_plan(sw.lower(plan, swap=sp), check=True).arrays
        # (the iterations' memory plan takes one iteration's offsets: sw_memory_plan_build_at)
        return _problem(plan).task_order(*plan_arrays(plan), streams=sw.schedule(plan).stream_arrays(),
                                         iterations=3, check=True)

    old = _core.memory_plan_parallel(2**30, -1)   # one thread, whatever the size
    try:
        one = made()
    finally:
        _core.memory_plan_parallel(*old)
    with planned_on_threads():
        _same_arrays(one, made())


def test_memory_plan_threads_are_bounded():
    with pytest.raises(ValueError, match="threads"):
        _core.memory_plan_parallel(0, 65)


@pytest.mark.parametrize("model,devices", [("lenet5", 2), ("resnet18", 4), ("inception_v3", 3)])
def test_zoo_plans_get_safe_memory_plans_below_the_sum_of_buffers(model, devices):
    g = sw.models.get(model, batch=16)
    d = sw.DeviceGraph.cpu(devices)
    for plan in (sw.search(g, d), sw.strategies.data_parallel(g, d), sw.strategies.model_parallel(g, d)):
        mp = check_memory_plan(plan)
        for dm in mp.devices.values():   # a device model parallelism leaves idle holds nothing
            assert dm.arena_bytes < dm.sum_of_buffers or dm.arena_bytes == dm.sum_of_buffers == 0


@pytest.mark.parametrize("sync", ["ring", "zero"])
def test_replicas_take_the_reuse_edges_of_the_pattern_they_repeat(sync):
    """Data parallelism over eight devices: every replica repeats one placement pattern, and its
    reuse edges (from the copies other devices run) are read from the first replica's answers:
    they must be the edges the definition gives on every device, on one thread or several."""
    g = sw.models.lenet5(batch=16)
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4)
    plan = sw.strategies.data_parallel(g, d, sw.CostOptions(sync=sync))
    mp = check_memory_plan(plan)
    tg = lower(plan)
    into = {tg.tasks[b].device for _, b in mp.reuse_edges}
    assert len(into) == len(d), "every replica's memory is reused after a copy reads it"
    with planned_on_threads():
        check_memory_plan(plan)


def test_a_sixteen_device_cluster_plan_has_a_memory_plan():
    g = sw.models.get("vgg16", batch=64)
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4)
    mp = sw.memory_plan(sw.search(g, d))
    assert sorted(mp.devices) == list(range(16))
    assert all(0 < dm.peak_bytes <= dm.arena_bytes < dm.sum_of_buffers for dm in mp.devices.values())
    assert mp.peak_bytes == max(dm.arena_bytes for dm in mp.devices.values())


def test_parameters_and_momentum_are_never_shared():
    g = sw.models.lenet5(batch=16)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    mp = sw.memory_plan(plan)
    tg = lower(plan)
    for b in tg.buffers:
        if b.kind not in LIVE_THROUGHOUT:
            continue
        lo, hi = mp.offset(b.id), mp.offset(b.id) + b.nbytes
        for o in tg.buffers:
            if o.id != b.id and o.device == b.device and o.nbytes:
                assert mp.offset(o.id) >= hi or mp.offset(o.id) + o.nbytes <= lo, (b, o)


# --------------------------------------------------------------------------- the validator refuses bad plans
def _check(plan, offset, arena, reuse_from, reuse_to, align=64):
    _problem(plan).check_memory_plan(*plan_arrays(plan), np.asarray(offset, np.int64), np.asarray(arena, np.int64),
                                     np.asarray(reuse_from, np.int32), np.asarray(reuse_to, np.int32), align)


def _searched_plan():
    g = sw.models.lenet5(batch=16)
    return sw.search(g, sw.DeviceGraph.cpu(2))


def test_the_validator_accepts_the_planner_and_refuses_overlapping_live_buffers():
    plan = _searched_plan()
    mp = sw.memory_plan(plan)
    a = mp.arrays
    _check(plan, a["offset"], a["arena"], a["reuse_from"], a["reuse_to"])
    tg = lower(plan)
    life = reference_lifetimes(tg)
    # two buffers of device 0 alive at the same time: put the second onto the first's bytes
    ids = [b.id for b in tg.buffers if b.device == 0 and b.nbytes and b.kind not in LIVE_THROUGHOUT]
    x, y = next((x, y) for x in ids for y in ids if x < y and life[x][0] <= life[y][1] and life[y][0] <= life[x][1])
    offset = a["offset"].copy()
    offset[y] = offset[x]
    arena = np.maximum(a["arena"], offset[y] + tg.buffers[y].nbytes + 64)
    with pytest.raises(ValueError, match="share memory"):
        _check(plan, offset, arena, a["reuse_from"], a["reuse_to"])


def test_the_validator_refuses_a_parameter_sharing_bytes():
    plan = _searched_plan()
    mp = sw.memory_plan(plan)
    tg = lower(plan)
    param = next(b for b in tg.buffers if b.kind == "param" and b.device == 1)
    other = next(b for b in tg.buffers if b.kind == "activation" and b.device == 1 and b.nbytes)
    offset = mp.arrays["offset"].copy()
    offset[other.id] = offset[param.id]
    arena = np.maximum(mp.arrays["arena"], offset[other.id] + other.nbytes + 64)
    with pytest.raises(ValueError, match="lives across steps"):
        _check(plan, offset, arena, mp.arrays["reuse_from"], mp.arrays["reuse_to"])


def test_reuse_edges_are_needed_and_checked():
    """A plan whose devices copy from each other gets reuse edges; without them the
    validator finds a copy on another stream that may still read memory being taken over."""
    plan = _searched_plan()
    mp = sw.memory_plan(plan)
    assert mp.reuse_edges, "this plan copies between devices, so some reuse needs an edge"
    a = mp.arrays
    with pytest.raises(ValueError, match="does not happen before"):
        _check(plan, a["offset"], a["arena"], np.zeros(0, np.int32), np.zeros(0, np.int32))


def test_the_validator_refuses_offsets_outside_the_arena_or_misaligned():
    plan = _searched_plan()
    a = sw.memory_plan(plan).arrays
    with pytest.raises(ValueError, match="outside device"):
        _check(plan, a["offset"], a["arena"] // 2, a["reuse_from"], a["reuse_to"])
    offset = a["offset"].copy()
    offset[np.argmax(a["bytes"])] += 4
    with pytest.raises(ValueError, match="alignment"):
        _check(plan, offset, a["arena"] + 64, a["reuse_from"], a["reuse_to"])
    with pytest.raises(ValueError, match="offset has"):
        _check(plan, a["offset"][:-1], a["arena"], a["reuse_from"], a["reuse_to"])
    with pytest.raises(ValueError, match="must go forward"):
        _check(plan, a["offset"], a["arena"], np.array([5], np.int32), np.array([2], np.int32))


def test_bad_alignment_is_refused():
    plan = _searched_plan()
    for bad in (0, 3, -64, 1.5, True):
        with pytest.raises(ValueError, match="power of two"):
            sw.memory_plan(plan, align=bad)


def test_statistics_count_double_precision():
    """Batchnorm statistics (sums of squares over a minibatch) are float64, everything else float32."""
    g = sw.models.get("resnet18_small", batch=8)
    tg = lower(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    kinds = {b.kind for b in tg.buffers}
    assert "stats" in kinds
    for b in tg.buffers:
        assert b.nbytes == b.elements * (8 if b.kind == "stats" else 4), b


def test_trainer_reports_its_memory_plan():
    g = sw.models.lenet5(batch=16)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    t = sw.Trainer(g, plan)
    assert t.memory_plan is t.memory_plan
    assert {d: m.arena_bytes for d, m in t.memory_plan.devices.items()} == \
        {d: m.arena_bytes for d, m in sw.memory_plan(plan).devices.items()}
