"""Planned memory against the sum of buffers (issue "Native runtime", point 4).

For every zoo model at 4 devices (one node of 4 P100s) and 16 devices (4 nodes x 4), the
searched plan and data parallelism: the largest arena any device gets from the memory plan
(``sw.memory_plan``: buffers placed by lifetime, freed after their last reader) beside the
largest sum of every buffer of one iteration on a device -- what the executor allocated
before it planned memory (its buffers lived until the next step).  Also the peak of live
bytes (the lower bound any placement has), the activations kept for the backward pass, and
how long planning took (lowering included).

    python benchmarks/memory_plan.py [--batch N] [--models lenet5,alexnet,...]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import date

import shardwise as sw

MODELS = ("lenet5", "alexnet", "vgg16", "inception_v3", "resnet18", "resnet34", "resnet50", "resnet101",
          "resnet152")


def row(model: str, batch: int | None, nodes: int, per: int, kind: str) -> str:
    g = sw.models.get(model, batch=batch) if batch else sw.models.get(model)
    d = sw.DeviceGraph.cluster(nodes=nodes, devices_per_node=per)
    # memory=False: the fastest plan whether or not it fits (Inception-v3 and the large ResNets at
    # batch 512 do not fit 4 P100s); this benchmark compares its arena with its sum of buffers
    plan = sw.search(g, d, memory=False) if kind == "searched" else sw.strategies.data_parallel(g, d)
    t0 = time.perf_counter()
    mp = sw.memory_plan(plan)
    ms = (time.perf_counter() - t0) * 1e3
    devs = list(mp.devices.values())
    arena = max(x.arena_bytes for x in devs)
    peak = max(x.peak_bytes for x in devs)
    total = max(x.sum_of_buffers for x in devs)
    kept = max(x.activations_kept for x in devs)
    return (f"{model:<13} {g.ops[0].shape[0]:>5} {nodes * per:>4} {kind:<9} {total / 2**30:>12.3f} "
            f"{arena / 2**30:>10.3f} {peak / 2**30:>9.3f} {total / arena:>7.2f}x {kept / 2**30:>9.3f} {ms:>8.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=None, help="minibatch (default: each model's own)")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    print(f"# {date.today().isoformat()}, {os.cpu_count()} cores, Python {platform.python_version()}; GiB per device, "
          "the largest over the plan's devices; anchor: the planned arena below the sum of buffers")
    head = (f"{'model':<13} {'batch':>5} {'dev':>4} {'plan':<9} {'sum of bufs':>12} {'arena':>10} {'peak':>9} "
            f"{'saving':>8} {'kept fwd':>9} {'plan ms':>8}")
    print(head)
    print("-" * len(head))
    for model in args.models.split(","):
        for nodes, per in ((1, 4), (4, 4)):
            for kind in ("searched", "data"):
                print(row(model, args.batch, nodes, per, kind), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
