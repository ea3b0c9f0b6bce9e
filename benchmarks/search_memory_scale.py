"""Plans within memory on large machines of H100s: search time and peak memory.

ResNet-50 (the zoo's, minibatch 64 unless --resnet-batch) and a 32-layer Llama-shaped model
(Llama-2-7B's widths: 4,096 model, 11,008 MLP, 32 heads over 8 key/value heads; sequences of
--seq tokens, --llama-batch of them) on nodes of 8 H100 SXM (80 GB) with 64, 256 and 1,024
devices.  The 7B model does not fit data parallelism there at any minibatch: its float32
parameters, gradients and momentum alone are 84 GB per replica, so the search must shard the
weights.  Each row is a fresh process running ``sw.search(g, d, objective="eq1")`` (memory
checked, the default), so the peak resident memory (``resource.getrusage``) is that search's;
it records the path (plain or staged), whether the memory constraint bound (the Eq. 1 optimum
did not fit), which placements the plan is the optimum of and whether that is proven, the
largest arena of the plan's memory plan against the 80 GB, the search time and the peak
memory, the plan's Eq. 1 seconds per iteration, the lower bound the search proved, and the
Eq. 1 of the first plan found to fit (the pruning threshold; blank when the Eq. 1 optimum
fits).  The aim (not a test): under 10 s and 2 GB each.  The CPU model is printed beside.

    python benchmarks/search_memory_scale.py [--models resnet50,llama] [--devices 64,256,1024]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import resource
import sys
import time
import warnings

import shardwise as sw

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed import cpu_model  # noqa: E402  (the one CPU description of the benchmarks)


def graph(model: str, args: argparse.Namespace) -> sw.Graph:
    if model == "llama":
        return sw.models.llama(layers=32, batch=args.llama_batch, seq=args.seq)
    return sw.models.get(model, batch=args.resnet_batch)


def run(model: str, ndev: int, args: argparse.Namespace, out: "multiprocessing.Queue") -> None:
    from shardwise.planning import search_memory

    g = graph(model, args)
    d = sw.DeviceGraph.cluster(nodes=ndev // 8, devices_per_node=8, device="H100")
    row = {"model": model, "dev": ndev, "ops": len(g.ops)}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plan = sw.search(g, d, objective="eq1", progress=args.progress)
        row["seconds"] = time.perf_counter() - t0
        s, m = plan.search_stats, plan.search_stats["memory"]
        row.update(path="staged" if "scale" in s else "plain", bound=m.get("constrained", False),
                   placements=m.get("placements", "every aligned block" if "scale" not in s else "proven"),
                   exact=s["exact"] and m["exact"], cost=plan.cost,
                   bound_s=s.get("lower_bound", plan.cost), first_fit=m.get("first_fitting_cost"),
                   arena_gb=float(search_memory.arenas(plan).max()) / 1e9,
                   warned=len([w for w in caught if issubclass(w.category, sw.SearchWarning)]))
    except (sw.PlanDoesNotFitError, sw.SearchError) as exc:
        row.update(seconds=time.perf_counter() - t0, error=str(exc))
    row["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.put(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,llama")
    ap.add_argument("--devices", default="64,256,1024")
    ap.add_argument("--llama-batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--resnet-batch", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per search before it is stopped")
    ap.add_argument("--progress", action="store_true", help="print each stage's time (stderr)")
    args = ap.parse_args()
    print(f"# shardwise {sw.__version__}: plans within memory on nodes of 8 H100s; {cpu_model()}, "
          f"{os.cpu_count()} cores (load average {os.getloadavg()[0]:.2f} at start), Python "
          f"{platform.python_version()}; llama: 32 layers, 7B widths, {args.llama_batch} x {args.seq} tokens; "
          f"resnet50: minibatch {args.resnet_batch}")
    head = (f"{'model':9} {'dev':>5} {'ops':>5} {'path':>6} {'bound':>5} {'placements':>20} {'exact':>5} "
            f"{'arena GB':>8} {'Eq.1 s':>8} {'bound s':>8} {'1st fit':>8} {'seconds':>8} {'peak MB':>8}  load")
    print(head)
    print("-" * len(head))
    ctx = multiprocessing.get_context("fork")
    for model in args.models.split(","):
        for ndev in (int(x) for x in args.devices.split(",")):
            q = ctx.Queue()
            p = ctx.Process(target=run, args=(model, ndev, args, q))
            p.start()
            p.join(args.timeout)
            if p.is_alive():
                p.kill()
                p.join()
                print(f"{model:9} {ndev:5d}  stopped after {args.timeout:.0f} s", flush=True)
                continue
            r = q.get()
            load = os.getloadavg()[0]
            if "error" in r:
                print(f"{model:9} {ndev:5d} {r['ops']:5d}  {r['seconds']:.1f} s, {r['peak_mb']:.0f} MB: "
                      f"{r['error']}  load {load:.2f}", flush=True)
                continue
            print(f"{model:9} {ndev:5d} {r['ops']:5d} {r['path']:>6} {'yes' if r['bound'] else 'no':>5} "
                  f"{r['placements']:>20} {'yes' if r['exact'] else 'no':>5} {r['arena_gb']:8.1f} "
                  f"{r['cost']:8.4g} {r['bound_s']:8.4g} {r['first_fit'] or float('nan'):8.4g} "
                  f"{r['seconds']:8.1f} {r['peak_mb']:8.0f}  {load:.2f}", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
