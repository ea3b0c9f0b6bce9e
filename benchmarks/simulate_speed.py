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

    python benchmarks/simulate_speed.py [--repeat 5] [--chains 128 512 4096]
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
    ap.add_argument("--chains", type=int, nargs="*", default=[128, 512, 4096],
                    help="device counts of the many-hop chains to simulate (none: skip)")
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
    if args.chains:
        print()
        print("machines of many hops: LeNet-5's data parallelism over a chain of D devices (a machine file's "
              "graph, routes listed for the transfers only), first simulation, peak memory of a fresh process")
        for n in args.chains:
            print(chain_row(n), flush=True)
        # the longest chain once more with every device a worker: the parameter server on device 0
        # sends and receives over routes of up to n - 1 links (n x n-1 (task, link) entries)
        n = max(args.chains)
        print(chain_row(n, batch=n), flush=True)
    return 0


def chain_row(n: int, batch: int = 64) -> str:
    """A fresh process simulates LeNet-5's data parallelism (minibatch ``batch``) over a chain of
    ``n`` devices."""
    import subprocess

    code = f"""
import resource, time, shardwise as sw
d = sw.DeviceGraph("chain")
for k in range({n}):
    d.add_device(f"g{{k}}", flops=1e13, memory=16e9)
for k in range({n} - 1):
    d.add_link(k, k + 1, bandwidth=2e10)
plan = sw.strategies.data_parallel(sw.models.lenet5(batch={batch}), d)
t = time.perf_counter()
sw.simulate(plan)
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    what = f"chain of {n:>5} devices" + (f", batch {batch}" if batch != 64 else "")
    return f"{what}: simulate {float(out[0]):7.2f} s, peak {float(out[1]):7.0f} MB  (anchor: seconds)"


if __name__ == "__main__":
    sys.exit(main())
