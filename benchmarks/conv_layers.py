"""The convolution kernels on the benchmark models' layer shapes, per algorithm, against PyTorch.

For every distinct convolution of LeNet-5 and the scaled ResNet-18 and AlexNet (batch 64), the median time
of the forward, data-gradient and weight-gradient kernels with each of shardwise's algorithms
(``_core.conv_algorithm``: 'im2col' = im2col + OpenBLAS SGEMM, 'direct' = the AVX2 or AVX-512
loops of csrc/cpu/conv_direct.c, 'auto' = what training uses), in ms and GFLOP/s, and PyTorch's (one
thread; its weight gradient alone and both gradients in one call, as its autograd runs them)
when it is installed.  Times are the calling thread's CPU time (every kernel here runs on it:
the machine is shared, and other jobs stretch the wall clock).  docs/cpu_kernels.md has the figures.

    python benchmarks/conv_layers.py [--models lenet,resnet,alexnet] [--repeat 11] [--isa avx2]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from shardwise import _core

# (name, Ci, Co, H = W, kernel, stride, padding)
LAYERS = {
    "resnet": [("conv1", 3, 16, 32, 3, 1, 1), ("layer1", 16, 16, 32, 3, 1, 1), ("layer2.0.conv1", 16, 32, 32, 3, 2, 1),
               ("layer2", 32, 32, 16, 3, 1, 1), ("layer2.down", 16, 32, 32, 1, 2, 0),
               ("layer3.0.conv1", 32, 64, 16, 3, 2, 1), ("layer3", 64, 64, 8, 3, 1, 1),
               ("layer3.down", 32, 64, 16, 1, 2, 0), ("layer4.0.conv1", 64, 128, 8, 3, 2, 1),
               ("layer4", 128, 128, 4, 3, 1, 1), ("layer4.down", 64, 128, 8, 1, 2, 0)],
    "lenet": [("conv1", 1, 6, 32, 5, 1, 0), ("conv2", 6, 16, 14, 5, 1, 0)],
    "alexnet": [("conv1", 3, 64, 64, 5, 2, 2), ("conv2", 64, 128, 15, 5, 1, 2), ("conv3", 128, 192, 7, 3, 1, 1),
                ("conv4", 192, 128, 7, 3, 1, 1)],
}
N = 64


def median_ms(fn, repeat: int) -> float:
    """Median thread CPU time of fn in ms (after one untimed call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return statistics.median(times) * 1e3


def ours(layer, algorithm: str, repeat: int) -> tuple[float, float, float]:
    _, ci, co, h, k, s, p = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, ci, h, h), dtype=np.float32)
    w = rng.standard_normal((co, ci, k, k), dtype=np.float32)
    ho = (h + 2 * p - k) // s + 1
    dy = rng.standard_normal((N, co, ho, ho), dtype=np.float32)
    before = _core.conv_algorithm()
    _core.conv_algorithm(algorithm)
    try:
        return (median_ms(lambda: _core.conv2d_forward(x, None, w, None, None, None, None, dy.shape, s, p), repeat),
                median_ms(lambda: _core.conv2d_backward_data(w, None, dy, None, None, x.shape, k, s, p), repeat),
                median_ms(lambda: _core.conv2d_backward_weight(x, None, dy, None, w.shape, s, p, False), repeat))
    finally:
        _core.conv_algorithm(before)


def theirs(layer, repeat: int) -> tuple[float, float, float] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    _, ci, co, h, k, s, p = layer
    x, w = torch.randn(N, ci, h, h), torch.randn(co, ci, k, k)
    dy = torch.randn_like(torch.nn.functional.conv2d(x, w, None, s, p))

    def backward(mask):
        return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, (s, s), (p, p), (1, 1), False, (0, 0), 1,
                                                           mask)
    return (median_ms(lambda: torch.nn.functional.conv2d(x, w, None, s, p), repeat),
            median_ms(backward((False, True, False)), repeat), median_ms(backward((True, True, False)), repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet,resnet,alexnet")
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--isa", choices=("auto", "avx2", "avx512"), default="auto",
                    help="the direct loops' instruction set (on an AVX-512 CPU, with OPENBLAS_CORETYPE=Haswell "
                         "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 for the other libraries: an AVX2 machine's paths)")
    args = ap.parse_args()
    _core.conv_isa(args.isa)
    try:
        _core.conv_algorithm("direct")
        algorithms = ("im2col", "direct", "auto")
    except ValueError:
        algorithms = ("im2col",)
    finally:
        _core.conv_algorithm("auto")
    print(f"thread CPU ms (GFLOP/s) per kernel, batch {N}, one thread, direct loops: {_core.conv_isa()}; "
          f"fwd / dx / dw; torch: fwd / dw / dx+dw")
    for model in args.models.split(","):
        for layer in LAYERS[model]:
            name, ci, co, h, k, s, p = layer
            ho = (h + 2 * p - k) // s + 1
            gflop = 2 * N * co * ci * k * k * ho * ho / 1e9
            cells = []
            for a in algorithms:
                times = ours(layer, a, args.repeat)
                cells.append(f"{a} " + " ".join(f"{t:6.2f} ({gflop / t * 1e3:4.0f})" for t in times))
            t = theirs(layer, args.repeat)
            if t:
                cells.append("torch " + " ".join(f"{v:6.2f}" for v in t))
            print(f"{model:<8} {name:<15} {ci:>3}->{co:<3} {h:>2}x{h:<2} k{k} s{s}  " + "  |  ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
