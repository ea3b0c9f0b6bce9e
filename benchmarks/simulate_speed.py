"""How fast one iteration is simulated (issue 4's benchmark).

Anchor: simulating one iteration of Inception-v3 on 16 devices must take under
50 ms, so that simulator-guided search can afford thousands of evaluations.
Prints, per model, ``sw.simulate(plan)`` end to end (memory check included, as
by default) and its stages: preparing the arguments in Python (the C problem,
plan and route arrays), the C core (lowering, durations, event loop in one
call), the rest (memory check, result).  The C core lowers the plan, plans its
memory as the runtime does (the reuse edges are part of the runtime's order),
orders the tasks (csrc/mem/order.c), times and replays them.  A plan that does not
fit in device memory is simulated all the same and then raises MemoryOverflow
(marked).

    python benchmarks/simulate_speed.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import date

import numpy as np
import shardwise as sw
from shardwise.planning.problem import make_problem
from shardwise.iteration.simulate import MemoryOverflow, plan_arrays
from shardwise.iteration.sim_costs import _machine


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def evaluate(plan: sw.Plan) -> bool:
    """sw.simulate as a search calls it; False when the plan does not fit (the full
    simulation still ran: the C engine checks memory after the replay)."""
    try:
        sw.simulate(plan)
        return True
    except MemoryOverflow:
        return False


def row(name: str, nodes: int, per: int, repeat: int) -> str:
    g = sw.models.get(name)
    d = sw.DeviceGraph.cluster(nodes=nodes, devices_per_node=per)
    plan = sw.search(g, d, objective="eq1")
    fits = evaluate(plan)  # also warms the routes cached on the device graph
    problem = make_problem(g, d, plan.options)
    arrays = plan_arrays(plan)
    m = _machine(d)

    def prepare():
        make_problem(g, d, plan.options)
        plan_arrays(plan)
        _machine(d)

    def core():
        return problem.simulate_plan(*arrays, m.route_ptr, m.route_res, m.nres, cores=m.cores)

    tasks = len(core()["kind"])
    prep = median_ms(prepare, repeat)
    c = median_ms(core, repeat)
    total = median_ms(lambda: evaluate(plan), repeat)
    anchor = ("bar: < 50 ms" if name == "inception_v3" else "") + ("" if fits else "(MemoryOverflow raised)")
    return f"{name:<14} {nodes * per:>4} {tasks:>7} {prep:11.1f} {c:10.1f} {total:12.1f} {1e3 / total:8.1f}  {anchor}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# {date.today().isoformat()}, {os.cpu_count()} cores shared (load average {load}), Python "
          f"{platform.python_version()}; median of {args.repeat} runs; sw.simulate(plan) with the memory check on")
    head = (f"{'model':<14} {'dev':>4} {'tasks':>7} {'prepare ms':>11} {'C core ms':>10} {'simulate ms':>12} "
            f"{'evals/s':>8}  anchor")
    print(head)
    print("-" * len(head))
    for name, nodes, per in (("resnet18", 1, 4), ("vgg16", 4, 4), ("resnet50", 4, 4), ("inception_v3", 4, 4)):
        print(row(name, nodes, per, args.repeat), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
