"""Plan.memory(): per device, the arena and the bytes of weights, optimizer state, activations
kept, recomputed and swapped, read from the memory plans of the plan as the simulator lowers it
(with recomputation, tests/iteration/test_recompute.py)."""
from __future__ import annotations

import shardwise as sw
from shardwise.iteration.memory import memory_plan


def _plan():
    g = sw.models.resnet18_small()
    return sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(nodes=1, devices_per_node=2, device="P100"))


def test_memory_of_a_plan_keeping_everything():
    p = _plan()
    m, mp = p.memory(), memory_plan(p, rings="auto").devices
    assert set(m) == set(mp)
    for d, x in m.items():
        assert (x.arena, x.weights, x.optimizer_state, x.activations_kept) == \
            (mp[d].arena_bytes, mp[d].parameters, mp[d].optimizer_state, mp[d].activations_kept)
        assert x.recomputed == x.swapped == 0 and x.budget == p.devices.devices[d].memory
        assert x.weights > 0 and x.activations_kept > 0
    assert m.summary().splitlines()[0].split()[:2] == ["device", "arena"] and len(str(m).splitlines()) == 3


def test_memory_with_a_swap_plan():
    """Swapping spares kept bytes: what it spares is the swapped column, the arena is the swapped
    graph's memory plan."""
    p = _plan()
    full = p.memory()
    sp = sw.swap_plan(p, budget=int(0.8 * full[0].arena))
    m = p.memory(swap=sp)
    swapped = memory_plan(sw.lower(p, swap=sp)).devices
    for d, x in m.items():
        assert x.arena == swapped[d].arena_bytes and x.recomputed == 0
        assert x.swapped == full[d].activations_kept - x.activations_kept
    assert m[0].swapped > 0 and m[0].arena < full[0].arena
