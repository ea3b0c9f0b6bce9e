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

``--back-to-back``: steps one at a time against k steps back to back in one launch
(``Trainer(..., steps_in_flight=k)``, no barrier between the steps: issue 14, point 3) on
two CPU workers (data parallelism, the searched plan), under both schedules, with the
simulator's prediction beside it: ``sw.simulate(plan, iterations=k)`` gives the time each
step after the first adds back to back, so a step of a group of k is predicted to take
(one step + (k - 1) x that) / k.  Writes benchmarks/results/schedule_cpu_back_to_back.txt.

    python benchmarks/schedule_cpu.py [--steps 4] [--rounds 5] [--models resnet18_small,inception_small]
    python benchmarks/schedule_cpu.py --back-to-back [--models resnet18_small,lenet5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import shardwise as sw
from shardwise.train.trainer import SGD, Trainer

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


IN_FLIGHT = (1, 2, 4)
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "schedule_cpu_back_to_back.txt")


def back_to_back_times(g: sw.Graph, plan: sw.Plan, schedule: str, rounds: int) -> dict[int, float]:
    """Median seconds per step with k steps in flight, for k in IN_FLIGHT: four distinct
    minibatches per block, the trainers' blocks taken in turn (medians over the rounds)."""
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal(g.ops[0].shape).astype(np.float32),
                rng.integers(0, g.ops[-1].shape[1], g.ops[0].shape[0])) for _ in range(max(IN_FLIGHT))]
    trainers = {k: Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9), schedule=schedule, steps_in_flight=k)
                for k in IN_FLIGHT}

    def block(k: int, t: Trainer) -> None:
        for i in range(0, len(batches), k):
            t._steps(batches[i:i + k]) if k > 1 else t.step(*batches[i])

    for k, t in trainers.items():   # warm-up: workspaces grow, the lists are recorded
        block(k, t)
    times: dict[int, list[float]] = {k: [] for k in trainers}
    for _ in range(rounds):
        for k, t in trainers.items():
            t0 = time.perf_counter()
            block(k, t)
            times[k].append((time.perf_counter() - t0) / len(batches))
    return {k: statistics.median(v) for k, v in times.items()}


def simulated(plan: sw.Plan, schedule: str) -> dict[int, float]:
    """Predicted seconds per step of a group of k back to back, for k in IN_FLIGHT."""
    one = sw.simulate(plan, schedule=schedule, check_memory=False).iteration_time
    out = {1: one}
    for k in IN_FLIGHT[1:]:
        more = sw.simulate(plan, schedule=schedule, check_memory=False, iterations=k).iteration_time
        out[k] = (one + (k - 1) * more) / k
    return out


def back_to_back(models: list[str], rounds: int) -> None:
    head = (f"{'model':<16} {'plan':<18} {'schedule':<14}" + "".join(f" {f'k={k} ms':>9}" for k in IN_FLIGHT)
            + "".join(f" {f'1/{k}':>6}" for k in IN_FLIGHT[1:]) + "   simulated:"
            + "".join(f" {f'k={k} ms':>9}" for k in IN_FLIGHT) + "".join(f" {f'1/{k}':>6}" for k in IN_FLIGHT[1:]))
    lines = [f"# {time.strftime('%Y-%m-%d')}: ms per training step with k steps in flight (Trainer(steps_in_flight=k)), "
             f"batch {BATCH}, medians of {rounds} rounds of {max(IN_FLIGHT)} steps; load average "
             f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; command: PYTHONPATH=python python "
             "benchmarks/schedule_cpu.py --back-to-back", head]
    print(head, flush=True)
    for name in models:
        g = sw.models.get(name, batch=BATCH)
        two = sw.DeviceGraph.cpu(2)
        for label, plan in (("data parallel, 2", sw.strategies.data_parallel(g, two)),
                            ("searched, 2", sw.search(g, two))):
            for schedule in ("fifo", "critical_path"):
                t, p = back_to_back_times(g, plan, schedule, rounds), simulated(plan, schedule)
                row = (f"{name:<16} {label:<18} {schedule:<14}" + "".join(f" {t[k] * 1e3:>9.2f}" for k in IN_FLIGHT)
                       + "".join(f" {t[1] / t[k]:>6.3f}" for k in IN_FLIGHT[1:]) + "             "
                       + "".join(f" {p[k] * 1e3:>9.2f}" for k in IN_FLIGHT)
                       + "".join(f" {p[1] / p[k]:>6.3f}" for k in IN_FLIGHT[1:]))
                print(row, flush=True)
                lines.append(row)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default=None, help="default: resnet18_small,inception_small "
                                                   "(--back-to-back: resnet18_small,lenet5)")
    ap.add_argument("--back-to-back", action="store_true", help="steps one at a time vs back to back")
    args = ap.parse_args()
    if args.back_to_back:
        back_to_back((args.models or "resnet18_small,lenet5").split(","), args.rounds)
        return
    args.models = args.models or "resnet18_small,inception_small"
    print(f"{'model':<16} {'plan':<18} {'fifo ms':>9} {'crit. ms':>9} {'fifo/crit':>10}")
    for name in args.models.split(","):
        g = sw.models.get(name, batch=BATCH)
        for label, plan in plans(g).items():
            t = step_times(g, plan, args.steps, args.rounds)
            print(f"{name:<16} {label:<18} {t['fifo'] * 1e3:>9.2f} {t['critical_path'] * 1e3:>9.2f} "
                  f"{t['fifo'] / t['critical_path']:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
