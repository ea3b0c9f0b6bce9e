"""How fast one iteration is simulated (issue 4's benchmark).

Anchor: simulating one iteration of Inception-v3 on 16 devices must take under
50 ms, so that simulator-guided search can afford thousands of evaluations.
Prints, per model, the time of each stage (lowering the plan to its task
graph, task durations and array building, the C event loop) and the
evaluations per second.

    python benchmarks/simulate_speed.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import shardwise as sw
from shardwise.simulate import _replay_c, _resources, task_durations


def stages(plan: sw.Plan) -> tuple[float, float, float, int]:
    t0 = time.perf_counter()
    tg = sw.lower(plan)
    t1 = time.perf_counter()
    durations = task_durations(tg)
    resources = [_resources(t, plan.devices) for t in tg.tasks]
    deps = [t.deps for t in tg.tasks]
    t2 = time.perf_counter()
    _replay_c(deps, durations, resources)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, len(tg.tasks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    head = (f"{'model':<14} {'dev':>4} {'tasks':>7} {'lower ms':>9} {'durations ms':>13} {'event loop ms':>14} "
            f"{'total ms':>9} {'evals/s':>8}  anchor")
    print(head)
    print("-" * len(head))
    for name, nodes, per in (("resnet18", 1, 4), ("vgg16", 4, 4), ("resnet50", 4, 4), ("inception_v3", 4, 4)):
        g = sw.models.get(name)
        d = sw.DeviceGraph.cluster(nodes=nodes, devices_per_node=per)
        plan = sw.search(g, d)
        runs = [stages(plan) for _ in range(args.repeat)]
        lo, du, ev, n = (float(np.median([r[k] for r in runs])) for k in range(4))
        total = lo + du + ev
        anchor = "bar: < 50 ms" if name == "inception_v3" else ""
        print(f"{name:<14} {nodes * per:>4} {int(n):>7} {lo * 1e3:9.1f} {du * 1e3:13.1f} {ev * 1e3:14.1f} "
              f"{total * 1e3:9.1f} {1 / total:8.1f}  {anchor}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
