"""Recomputation in the task graph (sw.lower(plan, recompute=...), csrc/graph/recompute.c): where
the recompute tasks go, what the memory plan makes of the shorter lifetimes (figures computed by
hand from tensor sizes), and what the simulator charges for them."""
from __future__ import annotations

import pytest

import shardwise as sw
from shardwise.errors import ConfigError, SearchError
from shardwise.iteration.memory import memory_plan

N, F, H, C = 256, 8, 32, 4   # a batch large enough that feature maps, not weights, set the peak
MAP = N * H * 4               # bytes of one hidden feature map (float32)


def chain(n: int = N):
    """x (n, F) -> fc1 -> relu1 -> fc2 -> relu2 -> fc3 -> relu3 -> head (n, C) -> loss."""
    g = sw.Graph("chain")
    h = g.input("x", (n, F))
    for i in (1, 2, 3):
        h = g.relu(g.linear(h, H, name=f"fc{i}"), name=f"relu{i}")
    g.softmax(g.linear(h, C, name="head"), name="loss")
    return g


@pytest.fixture(scope="module")
def plan():
    g = chain()
    return sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})


PARAMS = 4 * (F * H + H + 2 * (H * H + H) + H * C + C)   # every weight and bias, bytes
INPUTS = 4 * N * F                                       # x
OUTPUTS = 2 * 4 * N * C                                   # logits and probabilities (read by the host: kept)
HEAD_GRADS = 4 * (H * C + C)
FC3_GRADS = 4 * (H * H + H)


def test_kept_activations_drop_by_each_recomputed_map(plan):
    """What is live when the backward pass starts: x, the six hidden maps, logits and probabilities;
    each recomputed map is no longer among them."""
    full = INPUTS + 6 * MAP + OUTPUTS
    for chosen, dropped in ((None, 0), ({"relu1"}, 1), ({"relu1", "relu2"}, 2), ({"relu1", "relu2", "relu3"}, 3),
                            ("all", 6)):
        d = memory_plan(sw.lower(plan, recompute=chosen)).devices[0]
        assert d.activations_kept == full - dropped * MAP, chosen


def test_peak_drops_when_the_relus_are_recomputed(plan):
    """Keeping everything, the most bytes are live at relu3's backward: parameters and SGD's
    momentum, x, the six hidden maps, logits and probabilities, the gradients of relu3 and fc3's
    output, and the head's weight gradients.  Recomputing the three relus (from the linear
    outputs, which the backward keeps anyway), the most is at fc3's bias gradient: four maps
    (fc1, fc2, fc3's outputs and relu2's recomputed map), two gradient maps, and the head's and
    fc3's weight gradients."""
    plain = memory_plan(sw.lower(plan)).devices[0]
    assert plain.peak_bytes == 2 * PARAMS + INPUTS + OUTPUTS + 6 * MAP + 2 * MAP + HEAD_GRADS
    tg = sw.lower(plan, recompute={"relu1", "relu2", "relu3"})
    assert tg.recomputed == ("relu1", "relu2", "relu3")
    mp = memory_plan(tg, check=True)
    mp.validate()
    d = mp.devices[0]
    assert d.peak_bytes == 2 * PARAMS + INPUTS + OUTPUTS + 4 * MAP + 2 * MAP + HEAD_GRADS + FC3_GRADS
    assert d.arena_bytes < plain.arena_bytes


def test_recompute_tasks_replace_the_backward_reads(plan):
    base = sw.lower(plan)
    tg = sw.lower(plan, recompute={"relu2"})
    assert tg.counts()["recompute"] == 1 and len(tg.tasks) == len(base.tasks) + 1
    assert len(tg.buffers) == len(base.buffers) + 1
    (rc,) = [t for t in tg.tasks if t.kind == "recompute"]
    fwd = next(t for t in tg.tasks if t.kind == "forward" and t.op == "relu2")
    assert rc.phase == "backward" and rc.reads == fwd.reads and rc.writes != fwd.writes
    (kept,), (again,) = fwd.writes, rc.writes
    assert tg.buffers[again].op == "relu2" and tg.buffers[again].kind == "activation"
    # every task after the forward phase reads the recomputed copy, and the next task is the first
    assert not [t for t in tg.tasks if t.phase != "forward" and kept in t.reads]
    readers = [t for t in tg.tasks if again in t.reads]
    assert readers and readers[0].id == rc.id + 1 and all(rc.id in t.deps for t in readers)
    mp = memory_plan(tg)
    assert tg.tasks[mp.lifetime(kept)[1]].phase == "forward"   # the kept map ends in the forward pass


def test_a_recomputed_input_is_recomputed_first(plan):
    """fc2 and relu2 recomputed: relu2's recompute reads fc2's recomputed map, so fc2's goes first,
    right before it (a segment's forward re-run before its backward)."""
    tg = sw.lower(plan, recompute={"fc2", "relu2"})
    rcs = [t for t in tg.tasks if t.kind == "recompute"]
    assert [t.op for t in rcs] == ["fc2", "relu2"] and rcs[1].id == rcs[0].id + 1
    assert rcs[0].writes[0] in rcs[1].reads and rcs[0].id in rcs[1].deps


def test_batchnorm_and_losses_are_kept():
    g = sw.Graph("bn")
    x = g.input("x", (8, 3, 6, 6))
    h = g.relu(g.batchnorm2d(g.conv2d(x, 4, 3, padding=1, name="conv"), name="bn"), name="relu")
    g.softmax(g.linear(g.flatten(h, name="flat"), 5, name="fc"), name="loss")
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})
    tg = sw.lower(plan, recompute="all")
    assert "bn" not in tg.recomputed and "loss" not in tg.recomputed and "conv" in tg.recomputed
    assert sw.lower(plan, recompute={"bn"}).recomputed == ()


def test_simulator_charges_each_recompute_its_forward_time(plan):
    plain = sw.simulate(sw.lower(plan), check_memory=False)
    tg = sw.lower(plan, recompute={"fc2", "relu2", "relu3"})
    r = sw.simulate(tg, check_memory=False)
    forward = {e.op: e.end - e.start for e in plain.events if e.kind == "forward"}
    extra = [e for e in r.events if e.kind == "recompute"]
    assert sorted(e.op for e in extra) == ["fc2", "relu2", "relu3"]
    for e in extra:
        assert e.end - e.start == pytest.approx(forward[e.op], rel=1e-12) and forward[e.op] > 0
    # one device running one task at a time: the iteration is longer by exactly the recomputes
    assert r.iteration_time - plain.iteration_time == pytest.approx(sum(forward[e.op] for e in extra), rel=1e-9)


def test_recompute_does_not_combine_with_a_schedule_or_swap_plan(plan):
    with pytest.raises(ConfigError, match="one compute stream"):
        sw.lower(plan, recompute="all", schedule="critical_path")
    with pytest.raises(ConfigError, match="does not have"):
        sw.lower(plan, recompute=["relu9"])
    with pytest.raises(ConfigError, match="set of op names"):
        sw.lower(plan, recompute=3)


# ----------------------------------------------------------------------------- the greedy choice


def test_recompute_plan_fits_a_budget_between_the_extremes(plan):
    """A budget between the arena with the three relus recomputed and the full arena: the greedy
    (relus first: their maps are as large as the linear outputs and cost less to recompute)
    fits it with a recomputation, and the memory plan of that graph is what it reports."""
    full = memory_plan(sw.lower(plan)).devices[0].arena_bytes
    budget = full - MAP   # one feature map less than keeping everything
    rp = sw.recompute_plan(plan, budget)
    assert rp.fits and rp.ops and rp.unrecomputed_peak == {0: full}
    assert rp.peak_bytes[0] <= budget
    tg = sw.lower(plan, recompute=rp)
    assert tg.recomputed == rp.ops
    assert memory_plan(tg).devices[0].arena_bytes == rp.peak_bytes[0]
    assert rp.added_time > 0 and "greedy" in rp.method


def test_recompute_plan_keeps_everything_when_the_plan_fits(plan):
    full = memory_plan(sw.lower(plan)).devices[0].arena_bytes
    rp = sw.recompute_plan(plan, full)
    assert rp.fits and rp.ops == () and rp.added_time == 0


def test_recompute_plan_lowers_as_the_simulator_does(monkeypatch):
    """Above FUSED_RINGS_ABOVE devices the greedy's graphs have fused rings, as the simulator's
    and the search's memory check have them (chunked rings on a large machine do not fit in
    memory: k (k - 1) transfers per gradient); up to it, chunked.  What it reports is the memory
    plan of that graph, recomputation included."""
    from shardwise.iteration import lower as module
    from shardwise.iteration.lower import FUSED_RINGS_ABOVE, lowered

    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs.get("rings", "chunked"))
        return lowered(*args, **kwargs)

    monkeypatch.setattr(module, "lowered", recording)
    for ndev, rings in ((1, "chunked"), (2 * FUSED_RINGS_ABOVE, "fused")):
        # N samples a device: feature maps, not the synchronization's buffers, set each peak
        plan = sw.strategies.data_parallel(chain(N * ndev), sw.DeviceGraph.cpu(ndev))
        full = max(d.arena_bytes for d in memory_plan(sw.lower(plan, rings=rings)).devices.values())
        seen.clear()
        rp = sw.recompute_plan(plan, full - MAP)   # one device's feature map less
        assert seen and set(seen) == {rings}, (ndev, seen)
        assert rp.fits and rp.ops
        arenas = memory_plan(sw.lower(plan, recompute=rp.ops, rings=rings)).devices
        assert {d: a.arena_bytes for d, a in arenas.items()} == rp.peak_bytes


def test_recompute_plan_says_when_nothing_fits(plan):
    rp = sw.recompute_plan(plan, 1024)
    assert not rp.fits and rp.peak_bytes[0] > 1024


def test_search_fits_with_recomputation_where_nothing_fits_without():
    """One device, so every plan is the same one: under a budget only recomputation reaches, the
    search without it finds none, and with it returns the plan and its recomputation, which
    the Trainer then trains with."""
    g = chain()
    d = sw.DeviceGraph.cpu(1)
    full = memory_plan(sw.Plan.from_dict(g, d, {})).devices[0].arena_bytes
    budget = full - MAP
    with pytest.raises((sw.PlanDoesNotFitError, SearchError)):
        sw.search(g, d, memory=budget)
    p = sw.search(g, d, memory=budget, recompute=True)
    r = p.search_stats["memory"]["recompute"]
    assert r["ops"] and "greedy" in r["method"] and r["peak_bytes"][0] <= budget
    t = sw.Trainer(g, p)
    assert t.task_graph.recomputed == tuple(r["ops"])
    assert t.memory_plan.devices[0].arena_bytes <= budget


@pytest.mark.parametrize("model,ndev", [("lenet5", 2), ("resnet18_small", 4), ("gpt_tiny", 4)])
def test_the_simulator_equals_the_oracle_with_recompute_tasks(model, ndev):
    """tests/sim_oracle.py replays the recomputed graph independently (a recompute timed as its
    forward task, the memory plan's reuse edges of the recomputed graph)."""
    import sim_oracle

    g = sw.models.get(model, batch=8) if model != "gpt_tiny" else sw.models.gpt_tiny(batch=8)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=ndev)
    for plan in [sw.search(g, d, progress=False), sw.strategies.data_parallel(g, d)]:
        tg = sw.lower(plan, recompute="all")
        assert tg.counts()["recompute"] > 0
        a = sw.simulate(tg, check_memory=False)
        b = sim_oracle.replay(plan, recompute="all")
        assert a.iteration_time == pytest.approx(b.iteration_time, rel=1e-12)
        assert [e.start for e in a.events] == pytest.approx(b.start, rel=1e-12, abs=1e-15)


def test_the_core_refuses_bad_recompute_arrays(plan):
    import numpy as np

    from shardwise.iteration.lower import lowered

    with pytest.raises(ValueError, match="no op 99"):
        lowered(plan, recompute=np.array([99], np.int32))
    with pytest.raises((TypeError, ValueError)):
        lowered(plan, recompute=np.zeros((2, 2), np.int32))
    assert lowered(plan, recompute=np.zeros(0, np.int32)).recomputed == 0


@pytest.mark.parametrize("fraction", [0.95, 0.85])
def test_search_with_recompute_takes_the_faster_of_the_two_ways_to_fit(fraction):
    """A tiny GPT on 4 workers under a budget below the unconstrained optimum's arena: with
    recompute=True the search returns a plan that fits (with its recomputation, if any), and
    never one slower (Eq. 1 plus the recomputes' simulated time) than the constrained optimum."""
    g = sw.models.gpt_tiny(batch=8)
    d = sw.DeviceGraph.cpu(4)
    budget = int(memory_plan(sw.search(g, d, memory=False, progress=False)).peak_bytes * fraction)
    try:
        constrained = sw.search(g, d, memory=budget, progress=False).cost
    except (sw.PlanDoesNotFitError, SearchError):
        constrained = float("inf")
    p = sw.search(g, d, memory=budget, progress=False, recompute=True)
    r = p.search_stats["memory"].get("recompute")
    ops = r["ops"] if r else None
    assert memory_plan(sw.lower(p, recompute=ops)).peak_bytes <= budget
    if r:
        assert p.cost + r["added_seconds"] <= constrained
    else:
        assert p.cost == constrained


def _tp_llama():
    """A 2-layer Llama whose attention and MLP are split over 2 CPU workers (Megatron-style): each
    worker gathers its inputs into staging regions from both workers' shards."""
    g = sw.models.llama(layers=2, d_model=64, heads=4, kv_heads=2, ffn=128, seq=16, vocab=96, batch=4)
    return sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), sw.models.megatron_spec(g, 2),
                             options=sw.CostOptions(reduction_splits=True))


def test_regions_of_recomputed_maps_are_gathered_again():
    """Recomputing attention's probabilities, the regions the next matmul gathers them into are
    copied again in the backward pass (from the recomputed shards, across the workers too) instead
    of staying live from the forward pass: each original region's last touch is then a forward
    task, each copy again writes a new region like it and reads a recomputed shard, and the copies
    of a region gathered from several pieces are joined before its readers."""
    import numpy as np

    plan = _tp_llama()
    plain = sw.lower(plan)
    tg = sw.lower(plan, recompute="attention")
    n = len(plain.buffers)
    origin = np.asarray(tg.handle.origin)
    again = [t for t, o in zip(tg.tasks, origin) if o < 0 and t.kind == "copy"]
    assert again and any(t.src_device != t.device for t in again)
    mp = memory_plan(tg)
    phase = [t.phase for t in tg.tasks]
    recomputed_maps = {w for t in tg.tasks if t.kind == "recompute" for w in t.writes}
    for t in again:
        assert t.phase == "backward"
        (written,), (read,) = t.writes, t.reads
        assert written >= n and tg.buffers[written].kind == "region"
        assert read in recomputed_maps   # the probabilities' recomputed shard
        twin = [b for b in plain.buffers if (b.kind, b.device, b.op, b.box) ==
                (tg.buffers[written].kind, tg.buffers[written].device, tg.buffers[written].op, tg.buffers[written].box)]
        assert len(twin) == 1
        assert phase[mp.lifetime(twin[0].id)[1]] == "forward"
        readers = [u for u in tg.tasks if written in u.reads]
        assert readers and all(u.phase == "backward" and (t.id in u.deps or any(
            tg.tasks[d].kind == "join" and t.id in tg.tasks[d].deps for d in u.deps)) for u in readers)


def test_regions_between_two_recomputed_segments_stay_checkpoints():
    """Recomputing every map, a region whose consumer is recomputed and whose source shard is
    recomputed too is kept (gathering it again would join the two segments into one re-run at
    the start of the backward pass): no region copied again reads a recomputed shard, and the
    arenas are below keeping everything."""
    import numpy as np

    plan = _tp_llama()
    plain = sw.lower(plan)
    tg = sw.lower(plan, recompute="all")
    origin = np.asarray(tg.handle.origin)
    recomputed_maps = {w for t in tg.tasks if t.kind == "recompute" for w in t.writes}
    again = [t for t, o in zip(tg.tasks, origin) if o < 0 and t.kind == "copy"]
    for t in again:
        assert not (set(t.reads) & recomputed_maps) or not any(
            w in recomputed_maps for u in tg.tasks if u.kind == "recompute" and t.writes[0] in u.reads
            for w in u.writes)
    a = memory_plan(tg)
    b = memory_plan(plain)
    assert all(a.devices[d].arena_bytes < b.devices[d].arena_bytes for d in b.devices)


def test_the_staged_search_tries_recomputation_when_nothing_fits(monkeypatch):
    """The staged search of large machines (forced here on 2 workers) searches under memory
    without recomputation; with recompute=True, when nothing fits, it tries recomputation on its
    Eq. 1 plan and the cheapest baselines, as the search of smaller machines does, and its no-fit
    error advises recompute=True only when it was not asked for."""
    from shardwise.planning import search as search_module

    monkeypatch.setattr(search_module, "SCALE_ABOVE", -1)
    g = chain()
    d = sw.DeviceGraph.cpu(2)
    unconstrained = sw.search(g, d, memory=False, progress=False)
    assert "scale" in unconstrained.search_stats   # the staged search
    full = memory_plan(unconstrained).peak_bytes
    budget = full - MAP
    with pytest.raises((sw.PlanDoesNotFitError, SearchError)):
        sw.search(g, d, memory=budget, progress=False)
    p = sw.search(g, d, memory=budget, progress=False, recompute=True)
    r = p.search_stats["memory"]["recompute"]
    assert r["ops"] and max(r["peak_bytes"].values()) <= budget
    t = sw.Trainer(g, p)
    assert t.task_graph.recomputed == tuple(r["ops"])
    assert max(x.arena_bytes for x in t.memory_plan.devices.values()) <= budget
    # plan.memory(): the arenas with that recomputation, and the kept bytes it spares
    m, kept_all = p.memory(), memory_plan(sw.lower(p)).devices
    assert {dev: x.arena for dev, x in m.items()} == {dev: x.arena_bytes for dev, x in t.memory_plan.devices.items()}
    assert all(x.recomputed == kept_all[dev].activations_kept - x.activations_kept for dev, x in m.items())
    assert any(x.recomputed > 0 for x in m.values()) and all(x.swapped == 0 for x in m.values())
    far = full // 2
    with pytest.raises(sw.PlanDoesNotFitError, match=r"recompute=True"):
        sw.search(g, d, memory=far, progress=False)
    with pytest.raises(sw.PlanDoesNotFitError) as err:
        sw.search(g, d, memory=far, progress=False, recompute=True)
    assert "recompute=True" not in str(err.value)


def _megatron_gpt():
    """A 2-layer GPT in Megatron's layout over 2 x 2 devices: workers of several ops per device,
    split reductions, copies between devices."""
    g = sw.models.gpt(layers=2, d_model=64, heads=4, seq=16, vocab=128, batch=8)
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=2, device="P100")
    return sw.Plan.from_dict(g, d, sw.models.megatron_dp_spec(g, 2, 2), options=sw.CostOptions(reduction_splits=True))


@pytest.mark.parametrize("kind", ["forward", "backward_data", "copy"])
def test_seconds_by_op_add_up_the_events(kind):
    """SimResult.seconds_by_op reads the replay's arrays; it equals the events' end - start added
    up per op in task order, bit for bit (the greedy ranks by it)."""
    sim = sw.simulate(_megatron_gpt(), check_memory=False)
    expected = {}
    for e in sim.events:
        if e.kind == kind:
            expected[e.op] = expected.get(e.op, 0.0) + (e.end - e.start)
    assert expected and sim.seconds_by_op(kind) == expected


def test_kept_bytes_from_the_arrays_equal_the_records():
    """The greedy's bytes kept at the start of the backward pass, read from the C graph's arrays,
    equal those added up from sw.lower's Python records (its buffers' kinds, devices and
    lifetimes), per op, on a subset of the devices."""
    from shardwise.iteration import recompute_plan as module
    from shardwise.iteration.lower import lowered_graph

    plan = _megatron_gpt()
    records = sw.lower(plan)
    mp = memory_plan(records)
    start = next(t.id for t in records.tasks if t.phase != "forward")
    over = {0, 3}
    expected = {}
    for b in records.buffers:
        first, last = mp.lifetime(b.id)
        if b.kind == "activation" and b.device in over and first < start <= last:
            expected[b.op] = expected.get(b.op, 0) + b.nbytes
    assert expected and module._kept_bytes(lowered_graph(plan, 1, "chunked"), over) == expected
    assert module._recomputed(lowered_graph(plan, 1, "chunked", recompute="all")) == \
        sw.lower(plan, recompute="all").recomputed


def test_a_staged_no_fit_error_leads_to_recomputation(monkeypatch):
    """When the staged search's memory-constrained steps end in PlanDoesNotFitError (not only in
    a SearchError), sw.search(recompute=True) still tries recomputation, on the Eq. 1 plan first
    (the greedy stubbed here to fit it)."""
    from shardwise.iteration import recompute_plan as module
    from shardwise.planning import search as search_module

    monkeypatch.setattr(search_module, "SCALE_ABOVE", -1)
    g, d = chain(), sw.DeviceGraph.cpu(2)
    far = memory_plan(sw.search(g, d, memory=False, progress=False)).peak_bytes // 2
    with pytest.raises(sw.PlanDoesNotFitError):
        sw.search(g, d, memory=far, progress=False)
    tried = []

    def greedy(plan, budget, costs=None, **kwargs):
        tried.append(plan.name)
        return module.RecomputePlan(plan=plan, budget=budget, ops=("relu1",), fits=True,
                                    peak_bytes=dict.fromkeys(budget, 1), unrecomputed_peak=dict.fromkeys(budget, 2),
                                    iteration_time=1.0, recomputed_iteration_time=1.0, method="stub", evaluations=1)

    monkeypatch.setattr(module, "recompute_plan", greedy)
    p = sw.search(g, d, memory=far, progress=False, recompute=True, objective="eq1")
    assert len(tried) == 1 and p.search_stats["memory"]["recompute"]["ops"] == ["relu1"]
