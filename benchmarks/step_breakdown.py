"""Where one worker's training step goes: the runtime's task clock summed per op kind and task kind.

Trains the model on one CPU worker (batch 64, SGD with momentum and weight decay, as
benchmarks/train_throughput.py) and prints, per (op kind, task kind), the median over the timed
steps of the summed task time, its share of the step, and, with --per-op, every convolution's
forward / backward_data / backward_weight task.  docs/cpu_kernels.md has the figures.

    python benchmarks/step_breakdown.py [--models resnet18_small,alexnet_small] [--steps 9] [--per-op]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict

import shardwise as sw
from shardwise.train.trainer import SGD, Trainer

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from train_throughput import BATCH, batch_for  # noqa: E402


def breakdown(name: str, steps: int) -> tuple[float, dict, dict]:
    """(median step seconds, {(op kind, task kind): median seconds}, {(op name, task kind): median seconds})."""
    g = sw.models.get(name, batch=BATCH.get(name, 64))
    trainer = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)),
                      optimizer=SGD(lr=0.01, momentum=0.9, weight_decay=1e-4))
    x, y = batch_for(g)
    for _ in range(2):   # warm-up: first touches, scratch caches
        trainer.step(x, y)
    tasks = trainer.task_graph.tasks
    walls: list[float] = []
    by_kind: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_op: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step(x, y)
        walls.append(time.perf_counter() - t0)
        ns, _, _ = trainer.executor.task_times()
        kind_sums: dict[tuple[str, str], float] = defaultdict(float)
        op_sums: dict[tuple[str, str], float] = defaultdict(float)
        for t in tasks:
            seconds = (ns[t.id, 1] - ns[t.id, 0]) * 1e-9
            kind_sums[(g[t.op].kind, t.kind)] += seconds
            op_sums[(g[t.op].name, t.kind)] += seconds
        for k, v in kind_sums.items():
            by_kind[k].append(v)
        for k, v in op_sums.items():
            by_op[k].append(v)
    med = statistics.median
    return (med(walls), {k: med(v) for k, v in by_kind.items()},
            {k: med(v) for k, v in by_op.items() if g[k[0]].kind == "conv2d"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18_small,alexnet_small")
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--per-op", action="store_true", help="every convolution's tasks too")
    args = ap.parse_args()
    for name in args.models.split(","):
        wall, by_kind, by_op = breakdown(name, args.steps)
        print(f"{name}: step {wall * 1e3:.1f} ms ({BATCH.get(name, 64) / wall:.1f} images/s), one worker")
        for (op, kind), s in sorted(by_kind.items(), key=lambda kv: -kv[1]):
            if s >= 5e-5:
                print(f"  {op:<12} {kind:<18} {s * 1e3:8.2f} ms {s / wall:6.1%}")
        print(f"  {'(tasks)':<31} {sum(by_kind.values()) * 1e3:8.2f} ms")
        if args.per_op:
            for (op, kind), s in sorted(by_op.items()):
                if kind in ("forward", "backward_data", "backward_weight"):
                    print(f"    {op:<24} {kind:<16} {s * 1e3:7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
