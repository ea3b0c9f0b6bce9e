"""The simulator with measured costs against the CPU executor it models (issue 4, point 2).

benchmarks/simulate_calibration.py prints the exact errors (the scaled AlexNet and ResNet-18
within 10% on 1, 2 and 4 workers on this machine, LeNet-5 on 1 and 4; see
benchmarks/results/simulate_calibration.txt).  These tests hold a looser bound: the machines
tests run on share their cores with other work, and their speed drifts between the profile and
the measurement, so one retry with a fresh profile is allowed.
"""
from __future__ import annotations

import statistics
import time

import pytest

import shardwise as sw
from shardwise.profile import _random_batch
from shardwise.train import Trainer

BOUND = 0.35   # the benchmark's bar is 0.10


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


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_lenet5_simulated_step_is_close_to_the_measured_one(workers, tmp_path):
    assert_calibrated("lenet5", workers, tmp_path, steps=15)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["alexnet_small", "resnet18_small"])
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_scaled_models_simulated_step_is_close_to_the_measured_one(model, workers, tmp_path):
    assert_calibrated(model, workers, tmp_path, steps=5)
