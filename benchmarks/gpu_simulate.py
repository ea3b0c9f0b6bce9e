"""The simulator against measured steps on one GPU: a profile timed by CUDA events predicts a
training step of the CUDA backend (the GPU counterpart of simulate_calibration.py).

For each model: ``sw.profile(g, devices, backend="cuda")`` (every op's forward and backward shard
timed on the GPU's clock), ``sw.simulate(plan, costs=profile)``, and the median of measured steps
(``measured_step_time(..., backend="cuda")``: a step copies the batch in and waits for the loss).
Goal: within 10% for ResNet-18 and VGG-16 on one GPU.

    python benchmarks/gpu_simulate.py --quick     # the scaled ResNet-18 and VGG at batch 32
    python benchmarks/gpu_simulate.py             # also ResNet-18 and VGG-16 at 224x224, batch 32
    python benchmarks/gpu_simulate.py --logical 2 # two logical devices on the GPU, data parallel

Prints why and exits with status 2 where no GPU can be used.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import shardwise as sw
from shardwise.planning.profile import measured_step_time

QUICK = [("resnet18_small", 32), ("vgg_small", 32)]
FULL = QUICK + [("resnet18", 32), ("vgg16", 32)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the scaled models only")
    ap.add_argument("--models", help="name:batch,... instead of the default list")
    ap.add_argument("--logical", type=int, default=1, help="logical devices on the GPU (data parallel)")
    ap.add_argument("--steps", type=int, default=10, help="measured steps (median)")
    ap.add_argument("--repeats", type=int, default=5, help="profiled steps per round")
    args = ap.parse_args()
    ok, reason = sw.cuda.status()
    if not ok:
        print(f"gpu_simulate.py: no GPU, nothing measured: {reason}", file=sys.stderr)
        return 2
    os.environ.pop("SHARDWISE_CUDA_TF32", None)
    cases = ([(m.split(":")[0], int(m.split(":")[1])) for m in args.models.split(",")] if args.models
             else QUICK if args.quick else FULL)
    d = sw.DeviceGraph.local_gpus(logical=args.logical)
    print(f"benchmarks/gpu_simulate.py: {sw.cuda.gpus()[0].name}, {args.logical} logical device(s), TF32 off; "
          f"profile of {args.repeats} steps a round, {args.steps} measured steps (median); goal within 10%")
    print(f"{'model':<16} {'batch':>5} {'measured ms':>12} {'simulated ms':>13} {'error':>8}")
    failed = 0
    with tempfile.TemporaryDirectory() as cache:   # a fresh profile each run
        for name, batch in cases:
            g = sw.models.get(name, batch=batch)
            plan = sw.strategies.data_parallel(g, d)
            try:
                prof = sw.profile(g, d, repeats=args.repeats, cache_dir=cache, progress=False, backend="cuda")
                simulated = sw.simulate(plan, costs=prof, check_memory=False).iteration_time
                measured = measured_step_time(g, plan, steps=args.steps, backend="cuda")
            except Exception as exc:   # the next model still runs
                failed += 1
                print(f"{name:<16} {batch:>5} FAILED: {type(exc).__name__}: {exc}", flush=True)
                continue
            err = (simulated - measured) / measured
            print(f"{name:<16} {batch:>5} {measured * 1e3:>12.2f} {simulated * 1e3:>13.2f} {err:>+8.1%}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
