"""One worker against PyTorch with one thread, by CPU time, in alternating steps.

For each model, one step of shardwise's single worker and one step of PyTorch's one-thread training
alternate in one process, each timed by the process's CPU time; prints both medians and the median
of the per-pair ratios (PyTorch's CPU time over ours: above 1.0 shardwise is faster).  On a shared
machine whose speed drifts over minutes this is the steadiest comparison: the two steps of a pair
see the same moment, and CPU time leaves out the time other jobs hold the core.  (The blocks of
benchmarks/train_throughput.py measure throughput; this measures the kernels' cost.)

    python benchmarks/train_cpu_pairs.py [--models lenet5,alexnet_small,resnet18_small] [--pairs 10] [--isa avx2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import shardwise as sw
from shardwise import _core

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from train_throughput import BATCH, Ours, Torch  # noqa: E402


def cpu_seconds(step) -> float:
    c0 = time.process_time()
    step()
    return time.process_time() - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet5,alexnet_small,resnet18_small")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--isa", choices=("auto", "avx2", "avx512"), default="auto",
                    help="the direct loops' instruction set (see benchmarks/train_throughput.py --isa)")
    args = ap.parse_args()
    _core.conv_isa(args.isa)
    print(f"# one worker against PyTorch with one thread, process CPU time of alternating steps; direct loops: "
          f"{_core.conv_isa()}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}, PyTorch's CPU "
          f"capability {os.environ.get('ATEN_CPU_CAPABILITY', 'default')}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'model':<16} {'ours ms':>9} {'torch ms':>9} {'torch / ours':>13}")
    import torch
    torch.set_num_threads(1)
    for name in args.models.split(","):
        g = sw.models.get(name, batch=BATCH.get(name, 64))
        ours, theirs = Ours(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))), Torch(g, 1)
        a, b = [], []
        for _ in range(args.pairs):
            a.append(cpu_seconds(ours.step))
            b.append(cpu_seconds(theirs.step))
        ratio = statistics.median(y / x for x, y in zip(a, b))
        print(f"{name:<16} {statistics.median(a) * 1e3:9.1f} {statistics.median(b) * 1e3:9.1f} {ratio:12.2f}x",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
