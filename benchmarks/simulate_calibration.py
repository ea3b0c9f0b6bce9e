"""Calibration of the simulator against the CPU executor (issue 4, point 2).

For LeNet-5, the scaled AlexNet and the scaled ResNet-18 on 1, 2 and 4 CPU
workers: the measured iteration time of the executor (median of several
steps) beside the simulated one, with measured costs (``sw.profile``: compute
per op partition, dispatch per task, bookkeeping per element, copy bandwidth).
Each (model, workers) runs ``--trials`` times: a fresh profile, then each
plan measured and simulated right after it (this virtual machine's speed drifts
by 10-30% over minutes, so a profile taken long before the measurement would
carry the drift into the error); the medians and each trial's error are printed.
Anchor: seed 003 Table 4 reports estimates within 10% of measurements on GPUs.

    python benchmarks/simulate_calibration.py [--steps 5] [--trials 3] [--profile-repeats 5] [--models ...] [--workers 1,2,4]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import shardwise as sw
from shardwise.profile import measured_step_time


def warm_up(seconds: float = 3.0) -> None:
    """Run training steps for a while first: the first measurements of a fresh process on this
    virtual machine (allocations faulted in, the CPU's clock ramping up) ran up to 50% slow."""
    g = sw.models.get("lenet5", batch=64)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        measured_step_time(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)), 3)


def trial(g: sw.Graph, d: sw.DeviceGraph, steps: int, repeats: int) -> list[tuple[str, float, float]]:
    """One fresh profile, then each plan measured and simulated right after it, so that the
    machine's drift between profiling and measuring stays small: (plan, measured, simulated)."""
    prof = sw.profile(g, d, repeats=repeats, cache_dir=tempfile.mkdtemp(prefix="shardwise-profile-"))
    out = []
    for plan in (sw.strategies.data_parallel(g, d), sw.search(g, d, costs=prof)):
        measured = measured_step_time(g, plan, steps)
        simulated = sw.simulate(plan, costs=prof, check_memory=False).iteration_time
        out.append((plan.name, measured, simulated))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet5,alexnet_small,resnet18_small")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--trials", type=int, default=3, help="profile + measure + simulate rounds (medians)")
    ap.add_argument("--profile-repeats", type=int, default=5, help="timed steps per profile round")
    args = ap.parse_args()
    print(f"# simulated vs measured iteration time; {os.cpu_count()} cores; {args.trials} trials of a fresh "
          f"profile ({args.profile_repeats} steps a round) then {args.steps} measured steps per plan (medians); "
          "anchor: seed 003 Table 4, within 10%")
    warm_up()
    head = (f"{'model':<16} {'workers':>7} {'plan':<9} {'measured ms':>12} {'simulated ms':>13} {'error':>8} "
            f"{'trial errors':>24}")
    print(head)
    print("-" * len(head))
    for name in args.models.split(","):
        g = sw.models.get(name, batch=64)
        for n in (int(k) for k in args.workers.split(",")):
            d = sw.DeviceGraph.cpu(n)
            trials = [trial(g, d, args.steps, args.profile_repeats) for _ in range(args.trials)]
            for k, plan_name in enumerate(r[0] for r in trials[0]):
                measured = statistics.median(t[k][1] for t in trials)
                simulated = statistics.median(t[k][2] for t in trials)
                errors = [(t[k][2] - t[k][1]) / t[k][1] for t in trials]
                spread = " ".join(f"{e:+.0%}" for e in errors)
                print(f"{name:<16} {n:>7} {plan_name:<9} {measured * 1e3:12.1f} {simulated * 1e3:13.1f} "
                      f"{statistics.median(errors):+8.1%} {spread:>24}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
