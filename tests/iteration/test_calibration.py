"""The simulator with measured costs against the native runtime it models.

benchmarks/simulate_calibration.py prints the errors (LeNet-5, the scaled AlexNet and the scaled
ResNet-18 on 1, 2 and 4 workers, every one within 10% on this machine; see
benchmarks/results/simulate_calibration.txt).  These tests hold 15%: the machines tests run on
share their cores with other work and their speed drifts between the profile and the
measurement, so one retry with a fresh profile is allowed too.
"""
from __future__ import annotations

import statistics
import time

import pytest

import shardwise as sw
from shardwise.planning.profile import _random_batch
from shardwise.train.trainer import Trainer

BOUND = 0.15   # the benchmark's bar is 0.10

pytestmark = pytest.mark.calibration   # timings: `make calibration`, never the default run


def relative_error(g: sw.Graph, d: sw.DeviceGraph, tmp_path, steps: int) -> float:
    """Data parallelism's step, timed between the profile's steps (as the benchmark does: the
    machine's speed changes within seconds) and ``steps`` times after, against its simulation."""
    plan = sw.strategies.data_parallel(g, d)
    trainer = Trainer(g, plan)
    batch = _random_batch(trainer, 0)
    trainer.step(*batch)
    times: list[float] = []

    def step() -> None:
        t0 = time.perf_counter()
        trainer.step(*batch)
        times.append(time.perf_counter() - t0)

    prof = sw.profile(g, d, cache_dir=str(tmp_path), repeats=3, between_steps=step)
    for _ in range(steps):
        step()
    measured = statistics.median(times)
    simulated = sw.simulate(plan, costs=prof).iteration_time
    return (simulated - measured) / measured


def assert_calibrated(model: str, workers: int, tmp_path, steps: int) -> None:
    g = sw.models.get(model, batch=64)
    d = sw.DeviceGraph.cpu(workers)
    errors = []
    for attempt in range(2):
        errors.append(relative_error(g, d, tmp_path / f"try{attempt}", steps))
        if abs(errors[-1]) <= BOUND:
            return
    pytest.fail(f"{model} on {workers} workers: simulated vs measured {', '.join(f'{e:+.0%}' for e in errors)}")


@pytest.mark.parametrize("model,workers", [("lenet5", 1), ("lenet5", 2), ("alexnet_small", 1),
                                           ("alexnet_small", 2)])
def test_simulated_step_is_close_to_the_measured_one(model, workers, tmp_path):
    assert_calibrated(model, workers, tmp_path, steps=10 if model == "lenet5" else 4)


@pytest.mark.slow
@pytest.mark.parametrize("model,workers", [("lenet5", 4), ("alexnet_small", 4), ("resnet18_small", 1),
                                           ("resnet18_small", 2), ("resnet18_small", 4)])
def test_more_simulated_steps_are_close_to_the_measured_ones(model, workers, tmp_path):
    assert_calibrated(model, workers, tmp_path, steps=5)
