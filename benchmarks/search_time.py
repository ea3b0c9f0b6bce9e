"""Search time for every zoo model at 4, 8, 16 and 64 devices (issue 2's benchmark).

Prints, per model and device count: ops, configurations (max per op), the
residual graph after Algorithm 1 (K, as seed 003 Table 2) and after leaf
eliminations, the time of each stage (configurations, cost tables, search) and
the total, beside the anchors: seed 003 Table 3 reports 0.4 s for Inception-v3
on 4 GPUs, seed 000 about 100 ms on 16 GPUs; our bar is Inception-v3 on 16
devices under 0.4 s on this 2-core machine (aim: 10 ms).

    python benchmarks/search_time.py [--models a,b] [--devices 4,8,16,64] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import shardwise as sw

ANCHORS = {("inception_v3", 4): "seed 003: 0.4 s", ("inception_v3", 16): "seed 000: ~0.1 s; bar < 0.4 s",
           ("vgg16", 4): "seed 003: 0.1 s", ("alexnet", 4): "seed 003: 0.02 s", ("lenet5", 4): "seed 003: 0.01 s"}


def device_graph(n: int) -> sw.DeviceGraph:
    per = min(4, n)
    return sw.DeviceGraph.cluster(nodes=n // per, devices_per_node=per, device="P100")


def run(model: str, ndev: int, repeat: int) -> dict:
    g = sw.models.get(model)
    d = device_graph(ndev)
    best = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = sw.search(g, d)
        total = time.perf_counter() - t0
        if best is None or total < best[0]:
            best = (total, plan)
    total, plan = best
    s = plan.search_stats
    return {"model": model, "devices": ndev, "ops": len(g.ops), "configs": s["configurations"],
            "max_cfg": s["max_configurations"], "K": s["algorithm1_residual_nodes"], "K_leaf": s["residual_nodes"],
            "timings": s["timings"], "total": total, "cost": plan.cost}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(sw.models.names()))
    ap.add_argument("--devices", default="4,8,16,64")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"# shardwise {sw.__version__} search time; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}")
    head = (f"{'model':<13} {'dev':>4} {'ops':>4} {'configs':>8} {'max/op':>6} {'K':>2} {'K+leaf':>6} "
            f"{'enum ms':>8} {'tables ms':>10} {'search ms':>10} {'total ms':>9}  anchor")
    print(head)
    print("-" * len(head))
    for model in args.models.split(","):
        for n in (int(x) for x in args.devices.split(",")):
            try:
                r = run(model, n, args.repeat)
            except sw.ShardwiseError as exc:
                print(f"{model:<13} {n:>4}  refused: {exc}")
                continue
            t = list(r["timings"].values())
            print(f"{model:<13} {n:>4} {r['ops']:>4} {r['configs']:>8} {r['max_cfg']:>6} {r['K']:>2} "
                  f"{r['K_leaf']:>6} {t[0] * 1e3:8.1f} {t[1] * 1e3:10.1f} {t[-1] * 1e3:10.1f} "
                  f"{r['total'] * 1e3:9.1f}  {ANCHORS.get((model, n), '')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
