"""CPU training throughput of a 2-layer GPT block (d_model 256, 8 heads, seq 128, vocab 1024,
batch 8) on one worker beside PyTorch CPU with the same thread count (issue 17's benchmark
goal: at least 1.0x), and where the step's time goes by op kind and task kind.

The two take their steps in turn (rounds of `--steps` steps each, medians over the rounds),
so a slower stretch of this shared machine slows both alike.  Then the time by kind: shardwise's
task times (median over the steps of one more round) beside PyTorch's own per-operator times
(torch.profiler, self time per step), to see which kernels lose.

    python benchmarks/gpt_train.py [--steps 3] [--rounds 3] > benchmarks/results/gpt_train.txt
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter

import numpy as np

import shardwise as sw

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

SIZE = dict(layers=2, d_model=256, heads=8, seq=128, vocab=1024, batch=8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    g = sw.models.gpt(**SIZE)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, SIZE["vocab"], (SIZE["batch"], SIZE["seq"]))
    labels = rng.integers(0, SIZE["vocab"], (SIZE["batch"], SIZE["seq"]))
    t = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=sw.SGD(lr=0.01))
    steps = {"shardwise": lambda: t.step(ids, labels)}
    try:
        import torch
        from torch_gpt import TorchGPT

        torch.set_num_threads(1)
        m = TorchGPT(SIZE["layers"], SIZE["d_model"], SIZE["heads"], SIZE["seq"], SIZE["vocab"])
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        ti, tl = torch.from_numpy(ids), torch.from_numpy(labels)

        def torch_step() -> None:
            opt.zero_grad()
            m.loss(ti, tl).backward()
            opt.step()
        steps["pytorch"] = torch_step
    except ImportError:
        print("PyTorch is not installed: shardwise alone")
    times: dict[str, list[float]] = {k: [] for k in steps}
    for f in steps.values():
        f()   # warm-up: scratch, caches
    for _ in range(args.rounds):
        for name, f in steps.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                f()
            times[name].append((time.perf_counter() - start) / args.steps)
    tokens = SIZE["batch"] * SIZE["seq"]
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"GPT block {SIZE}, one worker / one thread")
    for k, v in med.items():
        print(f"  {k:<10} {v * 1e3:7.1f} ms/step  {tokens / v:9.0f} tokens/s")
    if "pytorch" in med:
        print(f"  shardwise / PyTorch throughput: {med['pytorch'] / med['shardwise']:.2f}x")
    per_step: dict[tuple[str, str], list[float]] = {}
    for _ in range(max(args.steps, 3)):
        t.step(ids, labels)
        ns = t.executor.task_times()[0]
        share: Counter = Counter()
        for task in t.task_graph.tasks:
            share[(g[task.op].kind, task.kind)] += float(ns[task.id, 1] - ns[task.id, 0])
        for k, v in share.items():
            per_step.setdefault(k, []).append(v)
    kinds = sorted(per_step.items(), key=lambda kv: -statistics.median(kv[1]))
    print("  where a shardwise step goes (task time by op and task kind, median of steps):")
    for (kind, task), v in kinds[:14]:
        print(f"    {kind:<12} {task:<16} {statistics.median(v) / 1e6:6.1f} ms")
    if "pytorch" in steps:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                steps["pytorch"]()
        ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        print("  where a PyTorch step goes (operator self time, torch.profiler, mean of steps):")
        for e in ops[:10]:
            print(f"    {e.key[:44]:<44} {e.self_cpu_time_total / 1e3 / args.steps:6.1f} ms")
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
