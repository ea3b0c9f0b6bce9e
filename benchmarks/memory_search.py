"""The search with memory (issue 15, the benchmark's last bullet).

VGG-16 and Inception-v3 (batch 512, the zoo's) on 4 x 4 P100s (16 GB each) and on 4 K80s
(12 GB each, one GK210 per device): per case, the unconstrained Eq. 1 optimum's memory
plan (the largest arena of any device, beside the device's memory), the plan the search
returns by default (which must fit every device) or why none fits, and the time lost
against the unconstrained plan (Eq. 1 and simulated).  Tighter budgets follow (a fraction
of the unconstrained plan's largest arena on every device), where the constraint binds:
there the time lost, whether the result is proven optimal (else the gap to the bound),
and the search time.  Anchors: vDNN reports VGG-16 at batch 256 needing 28 GB on a 12 GB
GPU; AccUDNN ResNet-152 at batch 32 over 24 GB.

    python benchmarks/memory_search.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

import shardwise as sw
from shardwise.planning import search_memory as sm

CASES = [("vgg16", "4x4", "P100"), ("vgg16", "4", "K80"), ("inception_v3", "4x4", "P100"),
         ("inception_v3", "4", "K80")]
TIGHT = [("vgg16", "4x4", "P100", 0.85), ("vgg16", "4", "K80", 0.9), ("inception_v3", "4x4", "P100", 0.95)]


def gb(x: float) -> str:
    return f"{x / 1e9:7.2f}"


def simulated(plan) -> float:
    return sw.simulate(plan, check_memory=False).iteration_time


def row(model: str, spec: str, kind: str, budget_fraction: float | None) -> str:
    g = sw.models.get(model)
    d = sw.DeviceGraph.parse(spec, device=kind)
    free = sw.search(g, d, objective="eq1", memory=False)
    arena = sm.arenas(free)
    memory = float(d.devices[0].memory)
    budget = memory if budget_fraction is None else budget_fraction * float(arena.max())
    head = (f"{model:<13} {spec + ' ' + kind:<9} {gb(arena.max())} {gb(memory)} {gb(budget)}")
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = sw.search(g, d, objective="eq1", memory=True if budget_fraction is None else budget)
        seconds = time.perf_counter() - t0
    except sm.PlanDoesNotFitError as exc:
        return (f"{head}   no plan fits: {exc.needed / 1e9:.2f} GB needed on device {exc.device}, "
                f"{exc.available / 1e9:.2f} GB there ({time.perf_counter() - t0:.1f} s)")
    except sw.SearchError as exc:
        return f"{head}   not found: {str(exc)[:90]}"
    got = sm.arenas(plan)
    info = plan.search_stats["memory"]
    fits = "yes" if (got <= budget).all() else "NO"
    lost = plan.cost / free.cost - 1
    sim_lost = simulated(plan) / simulated(free) - 1 if info.get("constrained") else 0.0
    proof = "exact" if info["exact"] else f"gap {100 * (plan.cost / info['lower_bound'] - 1):.1f}%"
    return (f"{head} {gb(got.max())} {fits:>4} {100 * lost:8.2f}% {100 * sim_lost:8.2f}%  {proof:<10} "
            f"{seconds:7.2f} s{'  (warned)' if caught else ''}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the four device-memory cases only")
    args = ap.parse_args()
    lines = ["The search with memory: every device within its memory (memory plan arenas), time lost against "
             "the unconstrained Eq. 1 optimum",
             "anchors: vDNN: VGG-16 (batch 256) needs 28 GB, more than a 12 GB GPU; AccUDNN: ResNet-152 (batch 32) "
             "over 24 GB without swapping",
             f"{'model':<13} {'machine':<9} {'free GB':>7} {'dev GB':>7} {'budget':>7} {'plan GB':>7} {'fits':>4} "
             f"{'Eq.1 lost':>9} {'sim lost':>9}  {'optimal':<10} {'search':>9}"]
    print("\n".join(lines), flush=True)
    for case in CASES:
        lines.append(row(*case, None))
        print(lines[-1], flush=True)
    if not args.quick:
        lines.append("tighter budgets (a fraction of the unconstrained plan's largest arena, on every device):")
        print(lines[-1], flush=True)
        for model, spec, kind, f in TIGHT:
            lines.append(row(model, spec, kind, f))
            print(lines[-1], flush=True)
    lines.append(f"(host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; Python {sys.version.split()[0]})")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "memory_search.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
