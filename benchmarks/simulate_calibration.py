"""Calibration of the simulator against the CPU executor (issue 4, point 2).

For LeNet-5, the scaled AlexNet and the scaled ResNet-18 on 1, 2 and 4 CPU
workers: the measured iteration time of the executor (median of several
steps) beside the simulated one, with measured costs (``sw.profile``: compute
per op partition, dispatch per task, bookkeeping per element, copy bandwidth).
Anchor: seed 003 Table 4 reports estimates within 10% of measurements on GPUs.

    python benchmarks/simulate_calibration.py [--steps 5] [--models ...] [--workers 1,2,4]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import shardwise as sw
from shardwise.train import Trainer


def measure(g: sw.Graph, plan: sw.Plan, steps: int) -> float:
    t = Trainer(g, plan)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, 10, g.ops[0].shape[0])
    t.step(x, y)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        t.step(x, y)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet5,alexnet_small,resnet18_small")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="shardwise-profile-")
    print(f"# simulated vs measured iteration time; {os.cpu_count()} cores; anchor: seed 003 Table 4, within 10%")
    head = f"{'model':<16} {'workers':>7} {'plan':<9} {'measured ms':>12} {'simulated ms':>13} {'error':>8}"
    print(head)
    print("-" * len(head))
    for name in args.models.split(","):
        g = sw.models.get(name, batch=64)
        for n in (int(k) for k in args.workers.split(",")):
            d = sw.DeviceGraph.cpu(n)
            prof = sw.profile(g, d, cache_dir=cache)
            for plan in (sw.strategies.data_parallel(g, d), sw.search(g, d, costs=prof)):
                measured = measure(g, plan, args.steps)
                simulated = sw.simulate(plan, costs=prof, check_memory=False).iteration_time
                print(f"{name:<16} {n:>7} {plan.name:<9} {measured * 1e3:12.1f} {simulated * 1e3:13.1f} "
                      f"{(simulated - measured) / measured:+8.1%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
