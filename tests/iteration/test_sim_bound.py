"""The replay's lower bound (``sw.simulate.iteration_time(plan, bound=...)``) and what the
simulated objective does with it: a plan whose bound reaches the best time so far is not
replayed.  The bound must never exceed the replayed time, and using it must never change the
plan the search returns (only how long it takes)."""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.planning import objective
from shardwise.iteration.simulate import iteration_time
from strategies_random import device_graph_cases, random_plan

MACHINES = {"cpu3": lambda: sw.DeviceGraph.cpu(3), "p100x8": lambda: sw.DeviceGraph.cluster(2, 4),
            "v100x32": lambda: sw.DeviceGraph.cluster(4, 8, device="V100"),
            **{name: (lambda d=d: d) for name, d in device_graph_cases().items()}}


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("model", ["lenet5", "alexnet", "resnet18"])
def test_the_lower_bound_never_exceeds_the_replayed_time(model, machine):
    g, d = getattr(sw.models, model)(), MACHINES[machine]()
    rng = np.random.default_rng(hash((model, machine)) % 2**32)
    plans = [random_plan(g, d, rng) for _ in range(3)] + sw.strategies.baselines(g, d)
    for plan in plans:
        replayed = sw.simulate(plan, check_memory=False).iteration_time
        t, tasks, bounded = iteration_time(plan)
        assert not bounded and t == pytest.approx(replayed, rel=1e-12)
        assert tasks == sw.simulate(plan, check_memory=False).tasks
        # asked for a bound at the replayed time, the bound alone must not claim more than it
        lower, _, bounded = iteration_time(plan, bound=replayed)
        if bounded:
            assert lower <= replayed * (1 + 1e-12)
        else:
            assert lower == pytest.approx(replayed, rel=1e-12)
        # a bound no plan can reach (0 s) always stops the replay, with the bound's value
        lower, _, bounded = iteration_time(plan, bound=0.0)
        assert bounded and 0 < lower <= replayed * (1 + 1e-12)


def test_a_bound_just_above_the_replayed_time_replays():
    g, d = sw.models.alexnet(), sw.DeviceGraph.cluster(1, 4)
    plan = sw.strategies.data_parallel(g, d)
    replayed = sw.simulate(plan, check_memory=False).iteration_time
    t, _, bounded = iteration_time(plan, bound=replayed * 1.0001)
    assert not bounded and t == pytest.approx(replayed, rel=1e-12)


@pytest.mark.parametrize("model,machine,prunes", [("resnet18", lambda: sw.DeviceGraph.cluster(4, 8), True),
                                                  ("alexnet", lambda: sw.DeviceGraph.cluster(2, 16, device="V100"), True),
                                                  ("vgg16", lambda: sw.DeviceGraph.cluster(1, 8), True),
                                                  ("inception_v3", lambda: sw.DeviceGraph.cluster(4, 8), False)])
def test_bounding_changes_the_time_taken_never_the_plan(model, machine, prunes, monkeypatch):
    g, d = getattr(sw.models, model)(), machine()
    with_bound = sw.search(g, d)
    replay_all = objective.simulated_time
    monkeypatch.setattr(objective, "simulated_time", lambda plan, costs, bound=None: replay_all(plan, costs))
    without = sw.search(g, d)
    assert with_bound.configs == without.configs
    a, b = with_bound.search_stats, without.search_stats
    assert a["simulated_time"] == b["simulated_time"]
    assert (a["local_search_tried"], a["local_search_tasks"]) == (b["local_search_tried"], b["local_search_tasks"])
    assert b["local_search_bounded"] == 0 and not b["bounded_baselines"]
    if prunes:   # the bound is not idle: some replays were skipped
        assert a["local_search_bounded"] > 0
    # what was bounded really was no faster: its replay (in `without`) is at least the bound
    for name, lower in a["bounded_baselines"].items():
        assert b["simulated"][name] >= lower * (1 - 1e-12)
