"""Calibration of the simulator against the native runtime on CPU workers.

For LeNet-5, the scaled AlexNet and the scaled ResNet-18 on 1, 2 and 4 CPU
workers: the measured iteration time of the runtime (median of several
steps) beside the simulated one, with measured costs (``sw.profile``: compute
per op partition, bookkeeping per element, copy bandwidth, step overhead),
replayed in the runtime's order (streams, the memory plan's reuse edges,
threads on the shared cores).
The error is taken between the median simulated and the median measured step.
The plans are data parallelism and the plan searched with a first profile.
Each (model, workers) then runs ``--trials`` times: a fresh profile, each plan's
steps timed in between the profile's own steps (``sw.profile(between_steps=...)``)
and a few more right after, then each plan simulated with that profile.  This
virtual machine's speed changes by 10-50% within seconds (two threads side by
side get 0.5-1.0 of a core each, as the host allows), so a profile taken apart
from the measurement carries the change into the error.  The medians and each
trial's error are printed.
Anchor: Table 4 of the layer-wise parallelism paper (Jia et al., ICML 2018) reports estimates
within 10% of measurements on GPUs.

    python benchmarks/simulate_calibration.py [--steps 10] [--trials 5] [--profile-repeats 5] [--models ...] [--workers 1,2,4] [--batch 64] [--tests]

``--tests`` then runs the tests marked ``calibration`` (as ``make calibration`` does).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import shardwise as sw
from shardwise.planning.profile import _random_batch, measured_step_time
from shardwise.train.trainer import Trainer


def warm_up(seconds: float = 3.0) -> None:
    """Run training steps for a while first: the first measurements of a fresh process on this
    virtual machine (allocations faulted in, the CPU's clock ramping up) ran up to 50% slow."""
    g = sw.models.get("lenet5", batch=64)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        measured_step_time(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)), 3)


def trial(g: sw.Graph, d: sw.DeviceGraph, plans: list[sw.Plan], trainers: list[tuple[Trainer, tuple]],
          steps: int, repeats: int) -> list[tuple[str, float, float]]:
    """One fresh profile, the plans' own steps timed in between its steps (one step of each
    plan after every profiling step, plus ``steps`` more of each right after), so that the
    measurement and the profile see this machine in the same seconds; then each plan
    simulated with the profile: (plan, measured median, simulated)."""
    times: list[list[float]] = [[] for _ in trainers]

    def step_each() -> None:
        for (trainer, batch), out in zip(trainers, times):
            t0 = time.perf_counter()
            trainer.step(*batch)
            out.append(time.perf_counter() - t0)

    prof = sw.profile(g, d, repeats=repeats, cache_dir=tempfile.mkdtemp(prefix="shardwise-profile-"),
                      between_steps=step_each)
    for _ in range(steps):
        step_each()
    return [(plan.name, statistics.median(out), sw.simulate(plan, costs=prof, check_memory=False).iteration_time)
            for plan, out in zip(plans, times)]


def plans_and_trainers(g: sw.Graph, d: sw.DeviceGraph, repeats: int):
    """Data parallelism and the plan searched with a first profile, each with a warmed-up trainer."""
    first = sw.profile(g, d, repeats=repeats, cache_dir=tempfile.mkdtemp(prefix="shardwise-profile-"))
    plans = [sw.strategies.data_parallel(g, d), sw.search(g, d, costs=first)]
    trainers = []
    for plan in plans:
        trainer = Trainer(g, plan)
        batch = _random_batch(trainer, 0)
        trainer.step(*batch)
        trainers.append((trainer, batch))
    return plans, trainers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet5,alexnet_small,resnet18_small")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--steps", type=int, default=10, help="measured steps per plan and trial after the profile (besides one after each profiling step)")
    ap.add_argument("--trials", type=int, default=5, help="profile + measure + simulate rounds (medians)")
    ap.add_argument("--profile-repeats", type=int, default=5, help="timed steps per profile round")
    ap.add_argument("--batch", type=int, default=64, help="samples per step (every model)")
    ap.add_argument("--tests", action="store_true",
                    help="afterwards, run the tests marked calibration (timings kept out of the default test run)")
    args = ap.parse_args()
    print(f"# simulated vs measured iteration time; {os.cpu_count()} cores; {args.trials} trials of a fresh "
          f"profile ({args.profile_repeats} steps a round, rounds in turns), each plan's steps timed between the "
          f"profile's steps and {args.steps} after (medians); "
          f"batch {args.batch}; anchor: Jia et al. (ICML 2018) Table 4, within 10%")
    warm_up()
    head = (f"{'model':<16} {'workers':>7} {'plan':<9} {'measured ms':>12} {'simulated ms':>13} {'error':>8} "
            f"{'trial errors':>24}")
    print(head)
    print("-" * len(head))
    for name in args.models.split(","):
        g = sw.models.get(name, batch=args.batch)
        for n in (int(k) for k in args.workers.split(",")):
            d = sw.DeviceGraph.cpu(n)
            plans, trainers = plans_and_trainers(g, d, args.profile_repeats)
            trials = [trial(g, d, plans, trainers, args.steps, args.profile_repeats) for _ in range(args.trials)]
            for k, plan_name in enumerate(r[0] for r in trials[0]):
                measured = statistics.median(t[k][1] for t in trials)
                simulated = statistics.median(t[k][2] for t in trials)
                errors = [(t[k][2] - t[k][1]) / t[k][1] for t in trials]
                spread = " ".join(f"{e:+.0%}" for e in errors)
                # the error between the median simulated and the median measured step
                print(f"{name:<16} {n:>7} {plan_name:<9} {measured * 1e3:12.1f} {simulated * 1e3:13.1f} "
                      f"{(simulated - measured) / measured:+8.1%} {spread:>24}", flush=True)
    if args.tests:
        return calibration_tests()
    return 0


def calibration_tests() -> int:
    """``pytest -m calibration`` from the repository root: the tests that compare times (the
    simulator within 15% of measured steps, search and refusal speeds, GIL release)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    print("# the tests marked calibration (pytest -m calibration)", flush=True)
    return subprocess.call([sys.executable, "-m", "pytest", "-q", "-rs", "-m", "calibration", "tests"], cwd=root)


if __name__ == "__main__":
    sys.exit(main())
