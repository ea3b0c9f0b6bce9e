"""Tofu's partitioning (seed 004 sections 4 and 6.3) on its large models, and against the
elimination search on the zoo.  Writes benchmarks/results/tofu.txt.

1. search time of Tofu on RNN-10-8K and WResNet-152-10 over 8 workers;
2. bytes moved per iteration by Tofu (refined and the paper's single CriticalDP pass),
   AllRow-Greedy and Spartan-style greedy, with and without reduction cuts;
3. every zoo model on 8 devices (2 nodes x 4 P100): Tofu's Plan (reduction cuts become
   partition-n-reduce configurations) beside
   the elimination optimum of Eq. 1: bytes moved, Eq. 1 estimate, search time;
4. RNN-4-8K (batch 512) on 8 K80s with 21 GB/s peer-to-peer (seed 004's testbed) under
   sw.simulate: the communication overhead of Tofu's Plan, beside the 6.3% of Figure 11.

    PYTHONPATH=python python benchmarks/tofu.py [--quick]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import shardwise as sw
from shardwise.planning import tofu

HERE = os.path.dirname(os.path.abspath(__file__))
GB = 1e9


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def large_models(quick: bool) -> dict[str, sw.Graph]:
    if quick:
        return {"RNN-2-1K": sw.models.rnn(layers=2, hidden=1024, steps=4, batch=64),
                "WResNet-50-2": sw.models.wide_resnet(50, 2, batch=8)}
    return {"RNN-10-8K": sw.models.rnn(layers=10, hidden=8192, steps=20, batch=512),
            "WResNet-152-10": sw.models.wide_resnet(152, 10, batch=8)}


def section_search_and_bytes(out: list[str], quick: bool) -> None:
    models = large_models(quick)
    models["RNN-4-8K"] = sw.models.rnn(layers=4, hidden=8192 if not quick else 1024, steps=20 if not quick else 4,
                                       batch=512 if not quick else 64)
    out.append("## 1-2. Tofu on 8 workers: search time and bytes moved per iteration (GB, forward + backward)")
    head = (f"{'model':<16} {'ops':>5} {'nodes':>6} {'algorithm':<26} {'reduce':>6} {'GB moved':>10} "
            f"{'GB/worker':>10} {'red. cuts':>9} {'search s':>9}")
    out += [head, "-" * len(head)]
    for name, g in models.items():
        runs = [("tofu (CriticalDP+refine)", dict(algorithm="criticaldp"), True),
                ("tofu (CriticalDP+refine)", dict(algorithm="criticaldp"), False),
                ("tofu (CriticalDP, 1 pass)", dict(algorithm="criticaldp", refine=False), True),
                ("AllRow-Greedy", dict(algorithm="allrow_greedy"), True),
                ("Spartan greedy", dict(algorithm="spartan"), True)]
        for label, kw, red in runs:
            res, secs = timed(tofu.partition, g, 8, reductions=red, **kw)
            out.append(f"{name:<16} {len(g):>5} {res.stats['coarse_nodes']:>6} {label:<26} {'yes' if red else 'no':>6} "
                       f"{res.bytes_moved / GB:10.3f} {max(res.memory_per_worker) / GB:10.3f} "
                       f"{len(res.reduction_splits):>9} {secs:9.2f}")
            print(out[-1], flush=True)
    out.append("GB/worker: slices of every tensor a worker holds (activations + gradients, weights x3)")
    out.append("")


def section_zoo(out: list[str], quick: bool) -> None:
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="P100")
    batch = 64
    out.append(f"## 3. Zoo on {d.name!r} (8 devices), batch {batch}: Tofu's Plan vs elimination "
               "(+red: with reduction splits)")
    head = (f"{'model':<14} {'tofu GB':>9} {'(own)':>8} {'elim GB':>9} {'+red GB':>9} {'tofu ms':>9} {'elim ms':>9} "
            f"{'+red ms':>9} {'tofu s':>8} {'elim s':>8} {'+red s':>8}")
    out += [head, "-" * len(head)]
    names = ["lenet5", "alexnet", "resnet18"] if quick else sw.models.names()
    for name in names:
        g = sw.models.get(name, batch=batch)
        tplan, tsec = timed(sw.search, g, d, algorithm="tofu")
        eplan, esec = timed(sw.search, g, d)
        rplan, rsec = timed(sw.search, g, d, options=sw.CostOptions(reduction_splits=True))
        out.append(f"{name:<14} {tplan.bytes_moved / GB:9.3f} {tplan.search_stats['tofu_bytes_moved'] / GB:8.3f} "
                   f"{eplan.bytes_moved / GB:9.3f} {rplan.bytes_moved / GB:9.3f} {tplan.cost * 1e3:9.2f} "
                   f"{eplan.cost * 1e3:9.2f} {rplan.cost * 1e3:9.2f} {tsec:8.2f} {esec:8.2f} {rsec:8.2f}")
        print(out[-1], flush=True)
    out.append("tofu GB / elim GB: Plan.bytes_moved (Eq. 1's transfers + parameter-server sync) of each plan;")
    out.append("(own): Tofu's own count for the same partition (tensors partitioned apart from the ops,")
    out.append("weights cut instead of replicated and synchronized); ms: Eq. 1 estimate of each Plan. Elimination")
    out.append("minimizes Eq. 1 exactly over its space, so its ms is the lowest; Tofu minimizes bytes with memory")
    out.append("balanced 1/k per worker, the aim of a memory-bound model, not time.")
    out.append("")


def _no_comm(d: sw.DeviceGraph) -> sw.DeviceGraph:
    """The same devices with links a million times faster: an iteration without communication."""
    fast = sw.DeviceGraph(d.name + " (no communication)")
    for dev in d.devices:
        fast.add_device(dev.name, flops=dev.flops, memory=dev.memory, mem_bandwidth=dev.mem_bandwidth, node=dev.node)
    for i in range(len(d)):
        for j in range(i + 1, len(d)):
            fast.add_link(i, j, bandwidth=1e6 * 21e9)
    return fast


def section_simulate(out: list[str], quick: bool) -> None:
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=8, device="K80", intra_bandwidth=21e9)
    if quick:
        g = sw.models.rnn(layers=2, hidden=1024, steps=4, batch=64)
    else:
        g = sw.models.rnn(layers=4, hidden=8192, steps=20, batch=512)
    out.append(f"## 4. {g.name} (batch {g.ops[0].shape[0]}) on 8 K80 (21 GB/s p2p) under sw.simulate")
    try:
        plan, secs = timed(sw.search, g, d, algorithm="tofu")
        sim, sim_secs = timed(sw.simulate, plan, check_memory=False)
        free = sw.simulate(sw.Plan(g, _no_comm(d), plan.configs, plan.options, name="tofu"), check_memory=False)
    except Exception as exc:   # report why the simulator could not run it
        out.append(f"simulate could not run the graph: {type(exc).__name__}: {exc}")
        out.append("")
        return
    overhead = sim.iteration_time / free.iteration_time - 1.0
    out.append(f"iteration {sim.iteration_time * 1e3:.1f} ms, without communication {free.iteration_time * 1e3:.1f} ms: "
               f"communication overhead {overhead * 100:.1f}% (seed 004 Figure 11: 6.3%); "
               f"simulated bytes moved {sim.bytes_moved / GB:.2f} GB; search {secs:.1f} s, simulation {sim_secs:.1f} s")
    cuts = sum(1 for c in plan.configs.values() if c.reduction is not None)
    out.append(f"The Plan holds {cuts} partition-n-reduce configurations (Tofu's reduction cuts); the simulator")
    out.append("overlaps transfers with compute and computes with the roofline model of a K80, not measured kernels.")
    out.append("")
    print("\n".join(out[-4:]), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small models (a smoke test), not written to results")
    args = parser.parse_args()
    out = [f"# {datetime.date.today()} shardwise {sw.__version__} benchmarks/tofu.py; {platform.machine()}, "
           f"{os.cpu_count()} cores (shared with other jobs), Python {platform.python_version()}",
           "# bytes in GB (1e9); search times are wall-clock seconds of one run", ""]
    section_search_and_bytes(out, args.quick)
    section_zoo(out, args.quick)
    section_simulate(out, args.quick)
    text = "\n".join(out) + "\n"
    if not args.quick:
        with open(os.path.join(HERE, "results", "tofu.txt"), "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
