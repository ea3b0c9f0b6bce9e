"""Training throughput of the native runtime on CPU workers.

For LeNet-5 and the scaled AlexNet / ResNet-18, prints images/s with 1 and 2
data-parallel workers (and the searched plan on 2 workers), the convolution
tasks' achieved FLOP/s as a fraction of this machine's OpenBLAS SGEMM peak
(measured in the same run), the runtime's own share of a step (outside its
tasks and waits: entering C, waking the threads, walking the command lists),
and, when PyTorch is installed, PyTorch's CPU training throughput for the same
model with the same number of threads (for one worker against one thread also
as a ratio of CPU time per step, ``cpu vs torch``: the process's CPU time,
which other jobs on a shared machine disturb far less than the wall clock).  The
configurations of one model take their steps in turn (blocks of consecutive
steps, medians over the rounds; see ``interleaved``), so a slower stretch of
this shared machine slows all of them alike instead of skewing their ratios.

Anchors ("Native runtime" issue): one worker >= 1.0x PyTorch; 2 data-parallel
workers >= 1.8x one worker; the runtime's own time < 3% of a step.

    python benchmarks/train_throughput.py [--steps 5] [--models lenet5,alexnet_small,resnet18_small]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections import defaultdict

import numpy as np

import shardwise as sw
from shardwise import _core
from shardwise.train.trainer import SGD, Trainer

BATCH = {"lenet5": 64, "alexnet_small": 64, "resnet18_small": 64, "vgg_small": 64, "inception_small": 32}


def sgemm_peak(n: int = 1024, repeat: int = 5) -> float:
    """FLOP/s of one-thread OpenBLAS SGEMM (through the linear kernel: y = x w^T)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    w = rng.standard_normal((n, n)).astype(np.float32)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        _core.linear_forward(x, (0, 0), w, (0, 0), None, None, (0, 0), (n, n))
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def direct_path() -> str:
    """The direct convolution loops' instruction set in effect (the kernels' own answer)."""
    isa = _core.conv_isa()
    return {"avx512": "AVX-512 direct convolution", "avx2": "AVX2+FMA direct convolution"}.get(
        isa, "no direct convolution (no AVX2+FMA): im2col + GEMM")


def openblas_core() -> str:
    """The kernel set OpenBLAS chose (OPENBLAS_CORETYPE overrides its CPU detection)."""
    import ctypes

    import scipy_openblas32
    lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), f"lib{scipy_openblas32.get_library()}.so"))
    lib.scipy_openblas_get_corename.restype = ctypes.c_char_p
    return lib.scipy_openblas_get_corename().decode()


def batch_for(g: sw.Graph, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = g.ops[0].shape
    classes = [op for op in g.ops if op.kind == "softmax"][-1].shape[1]
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0])


class Ours:
    """A trainer for one plan, with the conv tasks' time (from the runtime's task clock) per
    device and the runtime's own share of every step recorded."""

    def __init__(self, g: sw.Graph, plan: sw.Plan) -> None:
        self.g = g
        self.trainer = Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9, weight_decay=1e-4))
        self.x, self.y = batch_for(g)
        self.trainer.step(self.x, self.y)  # warm-up: first touches, workspaces
        self.conv_seconds: dict[int, float] = defaultdict(float)
        self.runtime_share: list[float] = []
        self.cpu: list[float] = []   # process CPU seconds per step
        self.steps = 0
        tasks = self.trainer.task_graph.tasks
        self.conv_tasks = [(t.id, t.device) for t in tasks if g[t.op].kind == "conv2d"
                           and t.kind in ("forward", "forward_partial", "backward_data", "backward_weight")]

    def step(self) -> float:
        c0, t0 = time.process_time(), time.perf_counter()
        self.trainer.step(self.x, self.y)
        wall = time.perf_counter() - t0
        self.cpu.append(time.process_time() - c0)
        ex = self.trainer.executor
        ns, _, _ = ex.task_times()
        for task, device in self.conv_tasks:
            self.conv_seconds[device] += (ns[task, 1] - ns[task, 0]) * 1e-9
        self.runtime_share.append(ex.runtime_seconds(wall) / wall)
        self.steps += 1
        return wall

    def conv_flops_per_worker(self) -> float:
        """Per worker: its share of the conv FLOPs over its own conv time (the busiest worker)."""
        if not self.conv_seconds:
            return float("nan")
        flops = 3 * sum(op.desc.forward_flops() for op in self.g.ops if op.kind == "conv2d") * self.steps
        return flops / len(self.conv_seconds) / max(self.conv_seconds.values())


class Torch:
    """The same model trained by PyTorch with ``threads`` threads (set before every step).

    PyTorch runs in rounds of its own (``main``): interleaved with ours, its steps left two
    data-parallel LeNet-5 workers at 1.0-1.2x one worker instead of 1.8-1.9x in the blocks that
    followed (its OpenMP threads keep spinning after a step, on the cores our workers need;
    waiting a second after each torch block did not help, passive waiting
    (OMP_WAIT_POLICY=PASSIVE) helped but slowed PyTorch itself by 10-25%)."""

    def __init__(self, g: sw.Graph, threads: int) -> None:
        import torch
        from torch import nn

        self.torch, self.nn, self.threads = torch, nn, threads
        torch.set_num_threads(threads)
        self.model = to_torch(g, nn)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        x, y = batch_for(g)
        self.x, self.y = torch.tensor(x), torch.tensor(y)
        self.cpu: list[float] = []   # process CPU seconds per step
        self.step()  # warm-up

    def step(self) -> float:
        self.torch.set_num_threads(self.threads)
        c0, t0 = time.process_time(), time.perf_counter()
        self.opt.zero_grad()
        loss = self.nn.functional.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        wall = time.perf_counter() - t0
        self.cpu.append(time.process_time() - c0)
        return wall


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def interleaved(runners: dict[str, object], steps: int, block: int = 3) -> dict[str, float]:
    """Median seconds per step of every runner over ``steps`` timed steps, taken in blocks:
    each round runs ``block`` consecutive steps of every runner in turn and times all but
    the first of each block.  Rounds spread a slower stretch of this shared machine over
    every configuration, so their ratios stay meaningful; consecutive steps keep each
    trainer in its steady state (alternating single steps between trainers measured two
    data-parallel AlexNet workers at 1.5x one worker instead of 1.7-1.9x: every switch
    refills caches and the allocator's free lists with the other trainer's buffers)."""
    times: dict[str, list[float]] = {k: [] for k in runners}
    while min(len(v) for v in times.values()) < steps:
        for key, runner in runners.items():
            runner.step()   # the first step after a switch is not timed
            for _ in range(block - 1):
                times[key].append(runner.step())
    return {k: statistics.median(v) for k, v in times.items()}


def to_torch(g: sw.Graph, nn):
    """The same network as a torch module, built from the shardwise graph (logits out)."""
    import torch

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mods = nn.ModuleDict()
            for op in g.ops:
                key = op.name.replace(".", "_")
                a = op.attrs
                if op.kind == "conv2d":
                    cin = g.ops[op.inputs[0]].shape[1]
                    self.mods[key] = nn.Conv2d(cin, a["out_channels"], a["kernel"], a["stride"], a["padding"],
                                               bias=a["bias"])
                elif op.kind == "linear":
                    self.mods[key] = nn.Linear(g.ops[op.inputs[0]].shape[1], a["out_features"], bias=a["bias"])
                elif op.kind == "batchnorm2d":
                    self.mods[key] = nn.BatchNorm2d(op.shape[1])

        def forward(self, x):
            acts = {}
            F = nn.functional
            for op in g.ops:
                key = op.name.replace(".", "_")
                ins = [acts[g.ops[i].name] for i in op.inputs]
                a = op.attrs
                if op.kind == "input":
                    out = x
                elif op.kind in ("conv2d", "linear", "batchnorm2d"):
                    out = self.mods[key](ins[0])
                elif op.kind == "pool2d":
                    fn = F.max_pool2d if a["kind"] == "max" else F.avg_pool2d
                    out = fn(ins[0], a["kernel"], a["stride"], a["padding"])
                elif op.kind == "relu":
                    out = F.relu(ins[0])
                elif op.kind == "add":
                    out = ins[0] + ins[1]
                elif op.kind == "concat":
                    out = torch.cat(ins, dim=a["axis"])
                elif op.kind == "flatten":
                    out = ins[0].flatten(1)
                elif op.kind == "softmax":
                    out = ins[0]  # logits: cross_entropy applies the softmax
                if a.get("activation") == "relu":
                    out = F.relu(out)
                acts[op.name] = out
            return out

    return Net()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet5,alexnet_small,resnet18_small")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--isa", choices=("auto", "avx2", "avx512"), default="auto",
                    help="the direct convolution loops' instruction set; to measure an AVX2 machine's paths on an "
                         "AVX-512 one, also run with OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 "
                         "ONEDNN_MAX_CPU_ISA=AVX2 (OpenBLAS's and PyTorch's kernels)")
    args = ap.parse_args()
    _core.conv_isa(args.isa)
    peak = sgemm_peak()
    print(f"# shardwise {sw.__version__} training throughput; {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; OpenBLAS {openblas_core()} kernels "
          f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}), {direct_path()}, "
          f"SGEMM peak (1 thread, 1024^3): {peak / 1e9:.1f} GFLOP/s; PyTorch's CPU capability "
          f"{os.environ.get('ATEN_CPU_CAPABILITY', 'default')}, oneDNN's {os.environ.get('ONEDNN_MAX_CPU_ISA', 'default')}; "
          f"load average {os.getloadavg()[0]:.2f}")
    head = (f"{'model':<16} {'plan':<10} {'workers':>7} {'images/s':>10} {'vs 1 worker':>12} "
            f"{'conv GFLOP/s/worker':>20} {'of peak':>8} {'runtime':>8} {'torch img/s':>12} {'vs torch':>9} "
            f"{'cpu vs torch':>14}")
    print(head)
    print("-" * len(head))
    configs = ((1, "data"), (2, "data"), (2, "searched"))
    for name in args.models.split(","):
        g = sw.models.get(name, batch=BATCH.get(name, 64))
        n = g.ops[0].shape[0]
        runners: dict[str, object] = {}
        for workers, label in configs:
            d = sw.DeviceGraph.cpu(workers)
            plan = sw.strategies.data_parallel(g, d) if label == "data" else sw.search(g, d)
            runners[f"{label} {workers}"] = Ours(g, plan)
        seconds = interleaved(runners, args.steps)
        cpu_ratio = None
        if torch_available():   # in rounds of their own: PyTorch's threads disturb the next runner
            torches = {f"torch {w}": Torch(g, w) for w in (1, 2)}
            seconds.update(interleaved(torches, args.steps))
            cpu_ratio = statistics.median(torches["torch 1"].cpu[1:]) / statistics.median(runners["data 1"].cpu[1:])
        base = n / seconds["data 1"]
        for workers, label in configs:
            key = f"{label} {workers}"
            rate, conv = n / seconds[key], runners[key].conv_flops_per_worker()
            torch_rate = n / seconds[f"torch {workers}"] if label == "data" and f"torch {workers}" in seconds else None
            vs_torch = f"{rate / torch_rate:8.2f}x" if torch_rate else "       -"
            torch_text = f"{torch_rate:12.1f}" if torch_rate else "   (no torch)" if label == "data" else ""
            cpu_text = f"{cpu_ratio:13.2f}x" if cpu_ratio and key == "data 1" else f"{'-':>14}"
            share = statistics.median(runners[key].runtime_share)
            print(f"{name:<16} {label:<10} {workers:>7} {rate:10.1f} {rate / base:11.2f}x {conv / 1e9:20.1f} "
                  f"{conv / peak:7.0%} {share:7.1%} {torch_text:>12} {vs_torch:>9} {cpu_text}", flush=True)
    print("anchors: one worker >= 1.0x PyTorch with the same threads; 2 data-parallel workers >= 1.8x one worker "
          "(ideal 2.0x); the runtime's own time < 3% of a step.  cpu vs torch: PyTorch's CPU time per step over "
          "one worker's (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
