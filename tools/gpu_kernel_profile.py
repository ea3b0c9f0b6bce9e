"""Which GPU kernels a training step of ours spends its time in, beside PyTorch eager's.

CUPTI (through ``torch.profiler``) records every kernel and copy of the process, ours included,
so the same table covers both.  Device runs only; prints the top kernels by GPU time.

    python tools/gpu_kernel_profile.py --model resnet50 --batch 64 [--top 25]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

import shardwise as sw  # noqa: E402
from shardwise.train.trainer import SGD, Trainer  # noqa: E402
import gpu_throughput  # noqa: E402  (PyTorch eager's step, as the throughput benchmark times it)
from train_throughput import batch_for  # noqa: E402


def table(prof, top: int) -> str:
    return prof.key_averages().table(sort_by="self_device_time_total", row_limit=top, max_name_column_width=70)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    g = sw.models.get(args.model, batch=args.batch)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.local_gpus(logical=1))
    t = Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9), backend="cuda")
    x, y = batch_for(g)
    t.step(x, y)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(args.steps):
            t.step(x, y)
    print(f"== ours: {args.model} batch {args.batch}, {args.steps} steps")
    print(table(p, args.top))
    print("== ours, host side (CUDA runtime calls), by CPU time")
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=70))
    del t
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        gpu_throughput.eager(g, False, args.steps, 1, torch)
    print("== PyTorch eager (cudnn.benchmark), the same steps")
    print(table(p, args.top // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
