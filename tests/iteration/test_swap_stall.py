"""The stall a swap plan reports is the simulator's: SwapPlan.stall_time and total_stall against
sw.simulate run on the plan with and without its swap tasks (the planner's own timing model only
chooses what to offload)."""
from __future__ import annotations

import pytest

import shardwise as sw
from shardwise.iteration.memory import memory_plan


def slow_gpu(host_bandwidth: float = 16e9) -> sw.DeviceGraph:
    """Compute slow next to its host link (copies can hide), or a slow link (they cannot)."""
    d = sw.DeviceGraph("slow gpu")
    d.add_device("g", flops=2e11, memory=16e9, mem_bandwidth=2e10, host_bandwidth=host_bandwidth)
    return d


def overhead(plan: sw.Plan, sp: sw.SwapPlan, **kw) -> float:
    """What the swap tasks add to the simulated iteration, from two independent sw.simulate calls."""
    plain = sw.simulate(plan, check_memory=False, **kw).iteration_time
    return max(0.0, sw.simulate(plan, check_memory=False, swap=sp, **kw).iteration_time - plain)


def check_one_estimate(plan: sw.Plan, sp: sw.SwapPlan, **kw) -> float:
    lost = overhead(plan, sp, **kw)
    assert sp.total_stall == pytest.approx(lost, rel=1e-9, abs=1e-12)
    assert sp.swapped_iteration_time == sw.simulate(plan, check_memory=False, swap=sp, **kw).iteration_time
    # one device: it runs every task, so its own delay is the iteration's
    assert list(sp.stall_time) == [0] and sp.stall_time[0] == pytest.approx(lost, rel=1e-9, abs=1e-12)
    return lost


@pytest.mark.parametrize("devices, fractions, stalls", [
    (slow_gpu(), (0.95, 0.8, 0.6), False),          # copies hide behind slow compute: no stall
    (slow_gpu(host_bandwidth=2e7), (0.8, 0.6), True),  # a slow host link: every prefetch late
    (sw.DeviceGraph.cpu(1), (0.9, 0.7, 0.5), True),    # a CPU worker copies on its own thread
    (sw.DeviceGraph.cluster(1, 1, "P100"), (0.95, 0.8, 0.6), None),
])
def test_reported_stall_is_the_simulated_overhead(devices, fractions, stalls):
    g = sw.models.resnet18_small(batch=16, width=8)
    plan = sw.Plan.from_dict(g, devices, {})
    peak = memory_plan(plan).peak_bytes
    for f in fractions:
        sp = sw.swap_plan(plan, int(peak * f))
        assert sp.entries
        lost = check_one_estimate(plan, sp)
        if stalls is not None:
            assert (lost > 0) == stalls


def test_stall_with_adam_state_compares_like_with_like():
    """optimizer_state=2: both replays lower the plan with two state buffers per parameter."""
    g = sw.models.resnet18_small(batch=16, width=8)
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})
    peak = memory_plan(plan).peak_bytes
    sp = sw.swap_plan(plan, int(peak * 0.7), optimizer_state=2)
    plain = sw.simulate(sw.lower(plan, optimizer_state=2), check_memory=False).iteration_time
    swapped = sw.simulate(plan, check_memory=False, swap=sp).iteration_time
    assert swapped > plain
    assert sp.iteration_time == plain and sp.total_stall == pytest.approx(swapped - plain, rel=1e-9)


def test_data_parallel_stall_per_device_and_in_total():
    g = sw.models.resnet18_small(batch=16, width=8)
    d = sw.DeviceGraph.cpu(2)
    plan = sw.strategies.data_parallel(g, d)
    peak = memory_plan(plan).peak_bytes
    sp = sw.swap_plan(plan, int(peak * 0.7))
    lost = overhead(plan, sp)
    assert lost > 0 and sp.total_stall == pytest.approx(lost, rel=1e-9)
    assert sorted(sp.stall_time) == [0, 1] and all(s > 0 for s in sp.stall_time.values())
    # the device that ends the swapped iteration is delayed by at least what the iteration is
    assert max(sp.stall_time.values()) >= lost * (1 - 1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("model, batch", [("resnet152", 32), ("resnet50", 32), ("vgg16", 128)])
def test_zoo_models_on_a_p100_report_the_simulated_stall(model, batch):
    """The disagreement this replaced: ResNet-152 at batch 32 under 90% of its arena, the
    planner's model said 95.6 ms, the simulator replays 6.4 ms.  (VGG-16 at batch 128: at 32 its
    weights leave swapping nothing below 95%.)"""
    plan = sw.Plan.from_dict(sw.models.get(model, batch=batch), sw.DeviceGraph.cluster(1, 1, "P100"), {})
    peak = memory_plan(plan).peak_bytes
    seen = []
    for f in (0.95, 0.9, 0.8, 0.7):
        try:
            sp = sw.swap_plan(plan, int(peak * f))
        except ValueError:   # below what swapping reaches for this model
            continue
        seen.append(check_one_estimate(plan, sp))
    assert len(seen) >= 2 and max(seen) > 0


def test_a_graph_split_over_ranks_is_refused_with_a_clear_error():
    g = sw.models.resnet18_small(batch=8, width=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    with pytest.raises(ValueError, match="split over ranks"):
        sw.swap_plan(sw.lower(plan, ranks=2), int(memory_plan(plan).peak_bytes * 0.7))
