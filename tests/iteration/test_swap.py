"""Swap plans (csrc/graph/swap.c, swap_plan.c, swap_fit.c): budgets, the swap tasks in the one task
graph, their replay by the simulator and the errors of bad input."""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.iteration.memory import memory_plan


def slow_gpu(memory: float = 16e9, host_bandwidth: float = 16e9) -> sw.DeviceGraph:
    """One device whose compute is slow next to its host link: swapping can hide behind it."""
    d = sw.DeviceGraph("slow gpu")
    d.add_device("g", flops=2e11, memory=memory, mem_bandwidth=2e10, host_bandwidth=host_bandwidth)
    return d


@pytest.fixture(scope="module")
def net():
    g = sw.models.resnet18_small(batch=8, width=8)
    plan = sw.Plan.from_dict(g, slow_gpu(), {})
    return g, plan, memory_plan(plan).devices[0].arena_bytes


# ------------------------------------------------------------------------------ budgets
@pytest.mark.parametrize("text, want", [("8GB", 8 * 10**9), ("512MiB", 512 * 2**20), ("1.5 GiB", 3 * 2**29),
                                        ("100", 100), ("2kb", 2000), (" 3 TB ", 3 * 10**12), ("1e3MB", 10**9),
                                        (4096, 4096)])
def test_budget_parses_sizes(text, want):
    assert sw.parse_budget(text) == want


@pytest.mark.parametrize("bad", ["", "GB", "8 GBs", "eight GB", "-1GB", "0", 0, -5, "1..5GB", "8 G B"])
def test_budget_refuses_malformed_or_non_positive(bad):
    with pytest.raises(ValueError, match="budget"):
        sw.parse_budget(bad)


@pytest.mark.parametrize("bad", [True, 1.5e9, None, [8]])
def test_budget_refuses_other_types(bad):
    with pytest.raises(TypeError, match="budget"):
        sw.parse_budget(bad)


# ------------------------------------------------------------------------------ plans
def test_generous_budget_offloads_nothing(net):
    g, plan, peak = net
    sp = sw.swap_plan(plan, budget=peak)
    assert sp.entries == [] and sp.peak_bytes[0] == peak and sp.stall_time[0] == 0
    assert sp.unswapped_peak[0] == peak


@pytest.mark.parametrize("fraction", [0.8, 0.6, 0.5])
def test_swapped_plan_fits_and_replays_without_stall(net, fraction):
    """Under the budget (the arena of the swapped graph, proven safe by memplan_check.c), and
    where the model predicts no stall the simulator replays the swap tasks without losing time."""
    g, plan, peak = net
    budget = int(peak * fraction)
    sp = sw.swap_plan(plan, budget=budget, check=True)
    assert sp.entries and sp.peak_bytes[0] <= budget < peak
    assert sp.offloaded_bytes[0] == sum(e.nbytes for e in sp.entries)
    assert sp.host_bytes[0] >= max(e.nbytes for e in sp.entries)
    assert sp.stall_time[0] == 0.0
    base, swapped = sw.simulate(plan), sw.simulate(plan, swap=sp)
    assert swapped.memory[0] == sp.peak_bytes[0]
    assert swapped.iteration_time == pytest.approx(base.iteration_time, rel=1e-9)
    kinds = [e.kind for e in swapped.events]
    assert kinds.count("swap_out") == kinds.count("swap_in") == len(sp.entries)
    host_rows = {r for e in swapped.events if e.kind.startswith("swap") for r in e.resources}
    assert host_rows == {"host 0 out", "host 0 in"}   # copy engines, not the device's compute


def test_every_prefetch_ends_before_its_first_reader_in_the_replay(net):
    """Eq. 6 checked on the simulator's events (an event loop of its own, not the planner's model)."""
    g, plan, peak = net
    sp = sw.swap_plan(plan, budget=int(peak * 0.5))
    assert sp.stall_time[0] == 0.0
    problem = sw.planning.problem.make_problem(plan.graph, plan.devices, plan.options)
    from shardwise.iteration.lower import plan_arrays
    from shardwise.iteration.sim_costs import _machine
    from shardwise.iteration.sim_costs import host_bandwidths

    m = _machine(plan.devices)
    r = problem.simulate_plan(*plan_arrays(plan), m.route_ptr, m.route_res, m.nres + 2, swap=sp.spec(),
                              host_bw=host_bandwidths(plan), host_res=m.nres)
    kinds = [_core.TASK_KINDS[k] for k in r["kind"]]
    end = r["start"] + r["duration"]
    readers: dict[int, list[int]] = {}
    for t in range(len(kinds)):
        for b in r["io"][r["io_ptr"][t]:r["io_ptr"][t + 1]]:
            readers.setdefault(int(b), []).append(t)
    checked = 0
    for t, kind in enumerate(kinds):
        if kind != "swap_in":
            continue
        copy = int(r["io"][r["io_ptr"][t + 1] - 1])   # the prefetched buffer it writes
        later = [u for u in readers[copy] if u != t]
        assert later and all(r["start"][u] >= end[t] - 1e-15 for u in later)
        checked += 1
    assert checked == len(sp.entries)


def test_slow_host_link_predicts_a_stall_and_the_replay_loses_time(net):
    g, _, peak = net
    plan = sw.Plan.from_dict(g, slow_gpu(host_bandwidth=2e7), {})
    sp = sw.swap_plan(plan, budget=int(peak * 0.5))
    assert sp.stall_time[0] > 0
    assert sw.simulate(plan, swap=sp).iteration_time > sw.simulate(plan).iteration_time


def test_data_parallel_plan_swaps_on_each_device():
    g = sw.models.resnet18_small(batch=8, width=8)
    d = sw.DeviceGraph("two slow gpus")
    for k in range(2):
        d.add_device(f"g{k}", flops=2e11, memory=16e9, mem_bandwidth=2e10)
    d.add_link(0, 1, 1e10)
    plan = sw.strategies.data_parallel(g, d)
    peak = memory_plan(plan).peak_bytes
    sp = sw.swap_plan(plan, budget=int(peak * 0.6), check=True)
    assert all(sp.peak_bytes[k] <= int(peak * 0.6) for k in range(2))
    assert all(sp.offloaded[k] for k in range(2))


def test_pinned_budget_is_respected_by_keeping_maps_on_the_device():
    # batch 16: at batch 8 the arena's placement slack is as large as the offloads a 10% cut
    # needs, so keeping any map on the device leaves no plan (swap_plan then raises, as below)
    g = sw.models.resnet18_small(batch=16, width=8)
    plan = sw.Plan.from_dict(g, slow_gpu(), {})
    peak = memory_plan(plan).devices[0].arena_bytes
    free = sw.swap_plan(plan, budget=int(peak * 0.9))
    limit = int(free.host_bytes[0] * 0.95)
    sp = sw.swap_plan(plan, budget=int(peak * 0.9), pinned_budget=limit)
    assert sp.host_bytes[0] <= limit < free.host_bytes[0] and sp.peak_bytes[0] <= int(peak * 0.9)
    assert sp.kept_for_pinned > 0
    with pytest.raises(ValueError, match="pinned host budget"):
        sw.swap_plan(plan, budget=int(peak * 0.5), pinned_budget=1024)


# ------------------------------------------------------------------------------ bad input
def test_budget_below_a_tasks_working_set_names_the_task(net):
    g, plan, peak = net
    tg = sw.lower(plan)
    persistent = sum(b.nbytes for b in tg.buffers if b.kind in ("param", "momentum", "running_stats"))
    with pytest.raises(ValueError, match=r"below what op '[\w.]+' needs at once \([\w ]+\): [\d.]+ (bytes|KB|MB|GB)"):
        sw.swap_plan(plan, budget=persistent + 1)


def test_budget_between_working_set_and_smallest_footprint_says_so(net):
    g, plan, peak = net
    sp_min = sw.swap_plan(plan, budget=peak).min_peak[0]
    with pytest.raises(ValueError, match="smallest footprint"):
        sw.swap_plan(plan, budget=int(sp_min * 0.9))


@pytest.mark.parametrize("bad", ["-8GB", "lots", 0])
def test_malformed_budget(net, bad):
    with pytest.raises(ValueError, match="budget"):
        sw.swap_plan(net[1], budget=bad)


def test_swap_plan_of_another_plan_is_refused(net):
    g, plan, peak = net
    sp = sw.swap_plan(plan, budget=int(peak * 0.6))
    other = sw.Plan.from_dict(sw.models.resnet18_small(batch=16, width=8), slow_gpu(), {})
    with pytest.raises(ValueError, match="made for plan"):
        sw.simulate(other, swap=sp)
    with pytest.raises(TypeError, match="SwapPlan"):
        sw.simulate(plan, swap="8GB")


def test_per_device_budget_dict_must_name_every_device(net):
    with pytest.raises(ValueError, match="one entry per device"):
        sw.swap_plan(net[1], budget={1: "1GB"})
