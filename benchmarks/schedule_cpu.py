"""FIFO against critical-path scheduling on the CPU backend (issue 14, point 4).

For the scaled ResNet-18 and Inception at a small batch, prints the median step time of
one plan under ``schedule="fifo"`` (one stream per device, program order) and under
``schedule="critical_path"`` (TurboDL's prioritized streams: each worker thread takes the
most urgent task that may start), and their ratio.  Plans: one device (one thread: the
order changes, the work does not), data parallelism on two devices and the searched plan
on two devices (two threads: a device reaching its dA chain's next task sooner can unblock
the other).  The two schedules of a plan take their steps in turn, in blocks, so a slower
stretch of this shared machine slows both alike (medians over the rounds).

The anchor: ``Trainer``'s default stays "fifo" unless critical_path is faster here.

    python benchmarks/schedule_cpu.py [--steps 4] [--rounds 5] [--models resnet18_small,inception_small]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import shardwise as sw
from shardwise.train import SGD, Trainer

BATCH = 16


def plans(g: sw.Graph) -> dict[str, sw.Plan]:
    two = sw.DeviceGraph.cpu(2)
    return {"1 device": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)),
            "data parallel, 2": sw.strategies.data_parallel(g, two),
            "searched, 2": sw.search(g, two)}


def step_times(g: sw.Graph, plan: sw.Plan, steps: int, rounds: int) -> dict[str, float]:
    """Median seconds per step of each schedule, their blocks of steps taken in turn."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, g.ops[-1].shape[1], g.ops[0].shape[0])
    trainers = {s: Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9), schedule=s)
                for s in ("fifo", "critical_path")}
    for t in trainers.values():   # warm-up: workspaces grow in the first steps
        t.step(x, y)
    times: dict[str, list[float]] = {s: [] for s in trainers}
    for _ in range(rounds):
        for s, t in trainers.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                t.step(x, y)
            times[s].append((time.perf_counter() - t0) / steps)
    return {s: statistics.median(v) for s, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="resnet18_small,inception_small")
    args = ap.parse_args()
    print(f"{'model':<16} {'plan':<18} {'fifo ms':>9} {'crit. ms':>9} {'fifo/crit':>10}")
    for name in args.models.split(","):
        g = sw.models.get(name, batch=BATCH)
        for label, plan in plans(g).items():
            t = step_times(g, plan, args.steps, args.rounds)
            print(f"{name:<16} {label:<18} {t['fifo'] * 1e3:>9.2f} {t['critical_path'] * 1e3:>9.2f} "
                  f"{t['fifo'] / t['critical_path']:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
