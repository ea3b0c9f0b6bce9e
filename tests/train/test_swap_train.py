"""Training under a memory budget on the CPU backend (Trainer(swap=...)): the arena is capped at
the budget, offloaded feature maps live in a host region apart, and the weights after training
are bitwise those of training without swapping."""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.iteration.memory import memory_plan
from strategies_random import random_plan

STEPS = 3


def batch(g, seed=0):
    rng = np.random.default_rng(seed)
    n = g.ops[0].shape[0]
    return rng.standard_normal(g.ops[0].shape).astype(np.float32), rng.integers(0, 10, n)


def train(g, plan, swap=None, opt=None):
    t = sw.Trainer(g, plan, optimizer=opt or sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), swap=swap)
    x, y = batch(g)
    losses = [t.step(x, y) for _ in range(STEPS)]
    return t, losses, t.get_weights()


def assert_bitwise(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def check_swapped_training(g, plan, fraction, opt=None):
    peak = memory_plan(plan).peak_bytes
    budget = int(peak * fraction)
    sp = sw.swap_plan(plan, budget=budget, optimizer_state=(opt.state_buffers if opt else 1))
    assert sp.entries, "the budget should make the plan offload something"
    _, losses0, w0 = train(g, plan, opt=opt)
    t, losses1, w1 = train(g, plan, swap=sp, opt=opt)
    assert losses1 == losses0
    assert_bitwise(w1, w0)
    for d, b in t.memory_per_worker().items():
        assert b <= budget, (d, b, budget)
    for d, hw in t.arena_high_water().items():
        assert hw <= budget, (d, hw, budget)
    return sp


@pytest.fixture(scope="module")
def resnet():
    return sw.models.resnet18_small(batch=8, width=8)


def test_one_worker_under_half_its_peak(resnet):
    check_swapped_training(resnet, sw.Plan.from_dict(resnet, sw.DeviceGraph.cpu(1), {}), 0.5)


def test_adam_under_budget(resnet):
    opt = sw.Adam(lr=1e-3)
    check_swapped_training(resnet, sw.Plan.from_dict(resnet, sw.DeviceGraph.cpu(1), {}), 0.6, opt=opt)


def test_data_parallel_on_two_workers(resnet):
    check_swapped_training(resnet, sw.strategies.data_parallel(resnet, sw.DeviceGraph.cpu(2)), 0.6)


def test_channel_split_plan(resnet):
    """Convolutions split over their output channels: staging regions and copies between workers."""
    spec = {op.name: {"c": 2} for op in resnet.ops if op.kind == "conv2d"}
    check_swapped_training(resnet, sw.Plan.from_dict(resnet, sw.DeviceGraph.cpu(2), spec), 0.7)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_plan(resnet, seed):
    plan = random_plan(resnet, sw.DeviceGraph.cpu(2), np.random.default_rng(seed))
    peak = memory_plan(plan).peak_bytes
    for fraction in (0.6, 0.75, 0.9):   # a random plan's devices differ: take a budget all can reach
        try:
            sw.swap_plan(plan, budget=int(peak * fraction))
        except ValueError:
            continue
        check_swapped_training(resnet, plan, fraction)
        return
    pytest.fail("no budget below the peak fits this random plan")


def test_swap_plan_for_another_plan_or_optimizer_is_refused(resnet):
    plan = sw.Plan.from_dict(resnet, sw.DeviceGraph.cpu(1), {})
    sp = sw.swap_plan(plan, budget=int(memory_plan(plan).peak_bytes * 0.6))
    other = sw.strategies.data_parallel(resnet, sw.DeviceGraph.cpu(2))
    with pytest.raises(ValueError, match="made for plan"):
        sw.Trainer(resnet, other, swap=sp)
    with pytest.raises(ValueError, match="optimizer_state=2"):
        sw.Trainer(resnet, plan, optimizer=sw.Adam(), swap=sp)
    with pytest.raises(TypeError, match="SwapPlan"):
        sw.Trainer(resnet, plan, swap="8GB")
    with pytest.raises(sw.ConfigError, match="fifo"):
        sw.Trainer(resnet, plan, swap=sp, schedule="critical_path")
