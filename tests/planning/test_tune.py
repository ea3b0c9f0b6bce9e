"""tune_minibatch (AccUDNN's Algorithm 2) and the learning-rate rule of its Eq. 9."""
from __future__ import annotations

import math

import pytest

import shardwise as sw


# ------------------------------------------------------------------------------ Eq. 9
@pytest.mark.parametrize("base_lr, base_batch, batch, c, want", [
    (0.1, 32, 64, 1.0, 0.19),                        # 1 - 0.9^2
    (0.1, 32, 32, 1.0, 0.1),                         # q = 1: unchanged
    (0.1, 10, 30, 0.5, (1 - 0.95 ** 3) / 0.5),       # 0.28525
    (0.2, 8, 4, 1.0, 1 - math.sqrt(0.8)),            # q = 1/2: a smaller step for a smaller batch
    (0.1, 256, 592, 1.0, 0.216235),                  # the paper's ResNet-101: "0.22 for minibatch 592"
])
def test_eq9_by_hand(base_lr, base_batch, batch, c, want):
    assert sw.adapted_lr(base_lr, base_batch, batch, c) == pytest.approx(want, rel=1e-4)


def test_eq9_tends_to_linear_scaling_for_small_c():
    assert sw.adapted_lr(0.1, 32, 96, c=1e-9) == pytest.approx(0.3, rel=1e-6)


@pytest.mark.parametrize("args", [(0, 32, 64), (0.1, 0, 64), (0.1, 32, 0), (0.1, 32, 64.0), (2.0, 32, 64)])
def test_eq9_bad_input(args):
    with pytest.raises(ValueError):
        sw.adapted_lr(*args)


# ------------------------------------------------------------------------------ Algorithm 2
def slow_gpu() -> sw.DeviceGraph:
    d = sw.DeviceGraph("slow gpu")
    d.add_device("g", flops=2e11, memory=16e9, mem_bandwidth=2e10)
    return d


def builder(batch: int) -> sw.Graph:
    return sw.models.resnet18_small(batch=batch, width=8)


BUDGET = 12 * 10**6


@pytest.fixture(scope="module")
def tuned():
    return sw.tune_minibatch(builder, slow_gpu(), budget="12MB", base_batch=8, base_lr=0.1, epochs=90,
                             samples=50_000, step=3)


def independent(batch: int) -> tuple[bool, float, float]:
    """(fits with no stall, predicted stall, images/s) of one minibatch, evaluated from scratch."""
    plan = sw.Plan.from_dict(builder(batch), slow_gpu(), {})
    try:
        sp = sw.swap_plan(plan, BUDGET)
    except ValueError:
        return False, 0.0, 0.0
    t = sw.simulate(plan, swap=sp, check_memory=False).iteration_time
    return sp.stall_time[0] == 0.0, sp.stall_time[0], batch / t


def test_k_max_is_the_largest_trainable_minibatch(tuned):
    assert tuned.candidates[0].batch == tuned.k_max
    plan = sw.Plan.from_dict(builder(tuned.k_max), slow_gpu(), {})
    assert sw.swap_plan(plan, BUDGET).peak_bytes[0] <= BUDGET
    with pytest.raises(ValueError):
        sw.swap_plan(sw.Plan.from_dict(builder(tuned.k_max + 1), slow_gpu(), {}), BUDGET)
    # and swapping is what makes it trainable: without it the arena is over the budget
    assert sw.memory_plan(plan).peak_bytes > BUDGET


def test_chosen_batch_is_the_most_efficient_candidate(tuned):
    seen = {}
    for c in tuned.candidates:
        free, stall, ips = independent(c.batch)
        assert c.fits and c.no_stall == free
        assert c.images_per_second == pytest.approx(ips, rel=1e-9)
        seen[c.batch] = (free, ips)
    best = max((ips, k) for k, (free, ips) in seen.items() if free)[1]
    assert tuned.meets_no_stall and tuned.batch == best
    assert tuned.images_per_second == pytest.approx(seen[best][1], rel=1e-9)
    assert tuned.lr == pytest.approx((1 - 0.9 ** (best / 8)) / 1.0, rel=1e-12)
    assert tuned.swap_plan.peak_bytes[0] <= BUDGET
    assert tuned.training_time == pytest.approx(90 * 50_000 / tuned.images_per_second)
    assert str(tuned.batch) in tuned.report()


def test_candidates_run_down_from_k_max_to_the_base_batch(tuned):
    batches = [c.batch for c in tuned.candidates]
    assert batches == sorted(batches, reverse=True) and batches[0] == tuned.k_max and batches[-1] == 8
    assert all(a - b <= 3 for a, b in zip(batches, batches[1:]))
    # the largest stall-free minibatch is found exactly: the one above it stalls or does not fit
    top = max(c.batch for c in tuned.candidates if c.no_stall)
    assert top == tuned.k_max or not independent(top + 1)[0]


def test_budget_too_small_for_any_minibatch():
    with pytest.raises(ValueError, match="budget"):
        sw.tune_minibatch(builder, slow_gpu(), budget="1MB", base_batch=8, base_lr=0.1, epochs=1, samples=10)


@pytest.mark.parametrize("kwargs, error", [
    ({"budget": "-1GB"}, ValueError), ({"base_batch": 0}, ValueError), ({"base_lr": 0.0}, ValueError),
    ({"epochs": 1.5}, ValueError), ({"samples": -3}, ValueError), ({"step": 0}, ValueError),
])
def test_bad_input(kwargs, error):
    args = dict(budget="12MB", base_batch=8, base_lr=0.1, epochs=1, samples=10)
    args.update(kwargs)
    with pytest.raises(error):
        sw.tune_minibatch(builder, slow_gpu(), **args)


def test_builder_must_be_callable():
    with pytest.raises(TypeError, match="g_builder"):
        sw.tune_minibatch(builder(8), slow_gpu(), budget="12MB", base_batch=8, base_lr=0.1, epochs=1, samples=10)
