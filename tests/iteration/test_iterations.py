"""Iterations back to back with no barrier between them (issue 14, point 3; csrc/mem/iterations.c).

* The order of two (three) iterations concatenated is proved safe by the C validator on random
  plans under both policies, and independently here from the task graph alone: every buffer
  that lives across steps has its conflicting accesses ordered across iterations, and every
  buffer of iteration 0 is done before any buffer of iteration 1 over the same bytes starts.
* The order repeats: iteration 2's waits are iteration 1's shifted by one iteration.
* Under critical_path on one device, the next forward's first layer waits for its own update,
  but not for the last layer's; under fifo it waits for everything of the step before.
* The simulator replays it: the time an iteration adds back to back is at most one iteration.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.iteration.lower import lower, plan_arrays
from shardwise.iteration.memory import _problem

from strategies_random import random_plan
from task_checks import ancestors
from shared_graphs import mixed_graph

PERSISTENT = {"param", "momentum", "running"}


def order_of(plan, schedule, iterations, check=False) -> list[set[int]]:
    r = _problem(plan).task_order(*plan_arrays(plan), streams=schedule.stream_arrays(), iterations=iterations,
                                  check=check)
    ptr, ids = r["ptr"].tolist(), r["ids"].tolist()
    return [set(ids[ptr[t]:ptr[t + 1]]) for t in range(len(ptr) - 1)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("policy", ["fifo", "critical_path"])
def test_the_validator_proves_random_plans_back_to_back(seed, policy):
    rng = np.random.default_rng(seed)
    g = mixed_graph() if seed % 2 else sw.models.get("resnet18_small", batch=4)
    plan = random_plan(g, sw.DeviceGraph.cpu(1 + seed % 3), rng, reductions=True)
    for iterations in (2, 3):
        order_of(plan, sw.schedule(plan, policy=policy), iterations, check=True)   # raises when unsafe


@pytest.mark.parametrize("policy", ["fifo", "critical_path"])
def test_two_iterations_are_ordered_where_they_share_memory(policy):
    """From the task graph alone: with iteration 1's task t numbered n + t, (1) every pair of
    accesses to a parameter, momentum, running statistic or loss output, one of them a write,
    one in each iteration, is ordered; (2) every buffer of iteration 0 and every buffer of
    iteration 1 whose arena bytes overlap (the same buffer included) have all their tasks
    ordered, iteration 0's first."""
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    schedule = sw.schedule(plan, policy=policy)
    tg, mp = lower(plan), sw.memory_plan(plan, schedule=schedule)
    n = len(tg.tasks)
    anc = ancestors(order_of(plan, schedule, 2))
    host = {b for t in tg.tasks if t.kind == "loss" for b in t.writes + t.reads}   # probabilities, logits
    touches: dict[int, list[tuple[int, bool]]] = {}
    for t in tg.tasks:
        for b in set(t.reads) | set(t.writes):
            touches.setdefault(b, []).append((t.id, b in t.writes))
    shared = [b.id for b in tg.buffers if b.kind in PERSISTENT or b.id in host]
    checked = 0
    for b in shared:
        for x, wx in touches.get(b, []):
            for u, wu in touches.get(b, []):
                if wx or wu:
                    assert anc[n + u] >> x & 1, f"buffer {b}: task {x} and the next iteration's {u} unordered"
                    checked += 1
    assert checked > 50
    pairs = 0
    for a in tg.buffers:
        if a.id in shared or not a.nbytes or a.id not in touches:
            continue
        lo, hi = mp.offset(a.id), mp.offset(a.id) + a.nbytes
        for b in tg.buffers:
            if b.device != a.device or b.id in shared or not b.nbytes or b.id not in touches:
                continue
            if mp.offset(b.id) < hi and lo < mp.offset(b.id) + b.nbytes:
                for x, _ in touches[a.id]:
                    for u, _ in touches[b.id]:
                        assert anc[n + u] >> x & 1, f"buffers {a.id} and {b.id}: tasks {x}, {n + u} unordered"
                pairs += 1
    assert pairs > len(tg.buffers) - len(shared)   # each buffer with itself, and the ones reusing its bytes


def test_the_order_repeats_after_the_first_iteration():
    g = sw.models.get("resnet18_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    order = order_of(plan, sw.schedule(plan), 3)
    n = len(order) // 3
    for t in range(n):
        assert {x + n for x in order[n + t]} == order[2 * n + t]
        assert all(x >= 0 for x in order[n + t])
    assert any(x < n for t in range(n) for x in order[n + t])   # waits across the iterations


@pytest.mark.parametrize("policy, waits_for_the_last_layer", [("fifo", True), ("critical_path", False)])
def test_the_next_forward_waits_for_its_own_layer_update(policy, waits_for_the_last_layer):
    g = sw.models.get("resnet18_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    tg = lower(plan)
    n = len(tg.tasks)
    weighted = [t.op for t in tg.tasks if t.kind == "backward_weight"]
    first_op, last_op = weighted[-1], weighted[0]
    anc = ancestors(order_of(plan, sw.schedule(plan, policy=policy), 2))
    forward = [n + t.id for t in tg.tasks if t.kind == "forward" and t.op == first_op]
    own = [t.id for t in tg.tasks if t.kind == "update" and t.op == first_op]
    last = [t.id for t in tg.tasks if t.kind == "update" and t.op == last_op]
    assert forward and own and last
    for u in forward:
        assert all(anc[u] >> x & 1 for x in own)
        assert any(anc[u] >> x & 1 for x in last) == waits_for_the_last_layer


def test_simulated_back_to_back():
    g = sw.models.get("resnet18_small", batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(nodes=1, devices_per_node=2))
    for policy in ("fifo", "critical_path"):
        one = sw.simulate(plan, schedule=policy, check_memory=False).iteration_time
        more = sw.simulate(plan, schedule=policy, check_memory=False, iterations=3).iteration_time
        assert 0 < more < 2 * one   # no barrier: never a whole extra iteration of waiting
    with pytest.raises(sw.ConfigError, match="iterations"):
        sw.simulate(plan, iterations=0)
