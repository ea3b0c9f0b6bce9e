"""Importing models: import time, and training throughput of an imported model (issue 17).

Prints, for a ResNet-50 (torchvision's layout, written here: batch 32, 224 x 224, 1000 classes)
the time of ``sw.from_torch`` and of ``sw.from_onnx`` on its export (the export itself is not
timed), beside the goal of under 2 s each; then the CPU training throughput (images/s, SGD with
momentum) of an imported scaled ResNet-18 (width 16, 32 x 32 images, batch 64) on one and two
data-parallel CPU workers, beside PyTorch training the same model with as many threads (goal: at
least 1.0x).  The same two import times for GPT-2 small (12 layers, d_model 768, 12 heads,
sequences of 1024 tokens, vocabulary 50257, batch 8: tests/torch_gpt.py's model, 163M parameters
with its own lm_head), exported with PyTorch's default (dynamo) exporter; the export's own time
is printed beside it, untimed in the goal.

torchvision's classification models (the list of tests/importers/test_torchvision_zoo.py, plus
the vision transformers, which print why they are refused): the time of ``sw.from_torch`` on
each at 224 x 224, batch 8, 1000 classes, beside the goal of under 1 s; then the CPU training
throughput (images/s, SGD with momentum, 64 x 64 images, batch 32, 10 classes, no dropout or
stochastic depth) of imported resnet50, mobilenet_v2 and efficientnet_b0 on a one-worker plan
and a 2-worker data-parallel plan, beside PyTorch training the same torchvision model with as
many threads (goal: at least 1.0x), each with the CPU and the kernels that ran.

    python benchmarks/import.py [--steps 8] [--parts import,throughput,torchvision]
                                [--models resnet18,mobilenet_v2]
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import tempfile
import time
import warnings

import sys

import numpy as np

import shardwise as sw

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "importers"))

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - the benchmark needs torch
    raise SystemExit("benchmarks/import.py needs PyTorch: pip install torch")


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None if stride == 1 and cin == out else \
            nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None if stride == 1 and cin == planes else \
            nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, block, layers: list[int], width: int = 64, classes: int = 1000, small: bool = False):
        super().__init__()
        if small:   # 32 x 32 inputs: a 3 x 3 stem, no max pooling
            self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.bn1, self.relu = nn.BatchNorm2d(width), nn.ReLU(inplace=True)
        stages, cin = [], width
        for k, n in enumerate(layers):
            planes = width * 2 ** k
            blocks = []
            for i in range(n):
                blocks.append(block(cin, planes, 2 if i == 0 and k > 0 else 1))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def best_of(f, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def import_times() -> None:
    model = ResNet(Bottleneck, [3, 4, 6, 3])
    x = torch.randn(32, 3, 224, 224)
    t_torch = best_of(lambda: sw.from_torch(model, (x,)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet50.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model.eval(), (x,), path, dynamo=False, training=torch.onnx.TrainingMode.EVAL,
                              do_constant_folding=False)
        t_onnx = best_of(lambda: sw.from_onnx(path))
    print(f"{'ResNet-50 (batch 32, 224x224)':<32} {'from_torch':<11} {t_torch:8.2f} s   goal < 2 s")
    print(f"{'ResNet-50 (batch 32, 224x224)':<32} {'from_onnx':<11} {t_onnx:8.2f} s   goal < 2 s")
    from torch_gpt import TorchGPT

    torch.manual_seed(0)
    gpt = TorchGPT(12, 768, 12, 1024, 50257)
    ids = torch.randint(0, 50257, (8, 1024))
    t_torch = best_of(lambda: sw.from_torch(gpt, (ids,)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gpt2.onnx")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(gpt.eval(), (ids,), path, dynamo=True, optimize=False, verbose=False)
        t_export = time.perf_counter() - t0
        t_onnx = best_of(lambda: sw.from_onnx(path))
        size = os.path.getsize(path) + sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)
                                           if f != "gpt2.onnx")
    print(f"{'GPT-2 small (batch 8, seq 1024)':<32} {'from_torch':<11} {t_torch:8.2f} s   goal < 2 s")
    print(f"{'GPT-2 small (batch 8, seq 1024)':<32} {'from_onnx':<11} {t_onnx:8.2f} s   goal < 2 s   "
          f"(the export itself: {t_export:.0f} s, {size / 2**20:.0f} MiB; not in the goal)")


def throughput(steps: int) -> None:
    torch.manual_seed(0)
    model = ResNet(Basic, [2, 2, 2, 2], width=16, classes=10, small=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    rows = []
    for workers in (1, 2):
        t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(workers)),
                       optimizer=sw.SGD(lr=0.01, momentum=0.9))
        t.set_weights(weights)
        t.step(x, y)   # warm-up
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            t.step(x, y)
            times.append(time.perf_counter() - t0)
        ours = 64 / statistics.median(times)
        torch.set_num_threads(workers)
        m = ResNet(Basic, [2, 2, 2, 2], width=16, classes=10, small=True).train()
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        xt, yt = torch.tensor(x), torch.tensor(y)
        loss_fn = nn.CrossEntropyLoss()

        def torch_step():
            opt.zero_grad()
            loss_fn(m(xt), yt).backward()
            opt.step()

        torch_step()
        ttimes = []
        for _ in range(steps):
            t0 = time.perf_counter()
            torch_step()
            ttimes.append(time.perf_counter() - t0)
        theirs = 64 / statistics.median(ttimes)
        rows.append((workers, ours, theirs))
    for workers, ours, theirs in rows:
        print(f"{'imported ResNet-18 (w16, 32x32)':<32} {workers} worker{'s' if workers > 1 else ' '}  "
              f"{ours:8.1f} img/s  PyTorch {workers} thread{'s' if workers > 1 else ' '} {theirs:8.1f} img/s  "
              f"{ours / theirs:5.2f}x   goal >= 1.0x")


TORCHVISION = ["resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "densenet121", "mobilenet_v2",
               "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s", "googlenet",
               "inception_v3", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "squeezenet1_1", "regnet_x_400mf",
               "regnet_y_400mf", "mnasnet0_5", "convnext_tiny", "alexnet", "vgg11_bn",
               "vit_b_16", "swin_t", "maxvit_t"]
TRAINED = ["resnet50", "mobilenet_v2", "efficientnet_b0"]
NO_DRAWS = {"mobilenet_v2": {"dropout": 0.0}, "efficientnet_b0": {"dropout": 0.0, "stochastic_depth_prob": 0.0}}


def torchvision_models():
    from test_torchvision_norm import _torchvision   # a CUDA torchvision wheel beside a CPU torch

    return _torchvision().models


def kernels() -> str:
    """The CPU and the kernels our workers run: OpenBLAS's kernel set for the GEMMs, and whether
    the direct convolution loops (AVX2 + FMA, chosen at run time) are available."""
    from distributed import cpu_model
    from train_throughput import openblas_core

    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        pass
    direct = ("AVX2+FMA direct convolution (3x3 up to 64 channels)" if {"avx2", "fma"} <= flags
              else "no direct convolution (no AVX2+FMA)")
    return (f"{cpu_model()}; OpenBLAS {openblas_core()} kernels "
            f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}), {direct}")


def torchvision_import_times(names: list[str]) -> None:
    M = torchvision_models()
    x = torch.randn(8, 3, 224, 224)
    for name in names:
        kwargs = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
        torch.manual_seed(0)
        model = getattr(M, name)(weights=None, **kwargs).eval()
        try:
            seconds = best_of(lambda: sw.from_torch(model, (x,)))
        except sw.ModelImportError as e:
            print(f"{name:<38} {'from_torch':<11}  refused: {str(e).splitlines()[0][:150]}")
            continue
        print(f"{name + ' (batch 8, 224x224)':<38} {'from_torch':<11} {seconds:8.2f} s   goal < 1 s")


class TorchvisionTrainer:
    """One of the runners ``interleaved`` takes turns with: ``step()`` returns its seconds."""

    def __init__(self, step) -> None:
        self._step = step

    def step(self) -> float:
        t0 = time.perf_counter()
        self._step()
        return time.perf_counter() - t0


def torchvision_throughput(names: list[str], steps: int) -> None:
    from train_throughput import interleaved

    M = torchvision_models()
    batch, px = 32, 64
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, px, px)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    where = kernels()
    for name in names:
        torch.manual_seed(0)
        model = getattr(M, name)(weights=None, num_classes=10, **NO_DRAWS.get(name, {})).train()
        g, weights = sw.from_torch(model, (torch.tensor(x),))
        ours = {}
        for workers in (1, 2):
            t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(workers)),
                           optimizer=sw.SGD(lr=0.01, momentum=0.9))
            t.set_weights(weights)
            ours[workers] = TorchvisionTrainer(lambda t=t: t.step(x, y))
        seconds = interleaved({f"ours {w}": r for w, r in ours.items()}, steps)
        theirs = {}   # PyTorch in rounds of its own: its spinning threads slow our workers down
        xt, yt = torch.tensor(x), torch.tensor(y)
        for threads in (1, 2):
            m = copy.deepcopy(model)
            opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

            def torch_step(m=m, opt=opt, threads=threads):
                torch.set_num_threads(threads)
                opt.zero_grad()
                nn.functional.cross_entropy(m(xt), yt).backward()
                opt.step()

            theirs[threads] = TorchvisionTrainer(torch_step)
        seconds.update(interleaved({f"torch {w}": r for w, r in theirs.items()}, steps))
        for workers in (1, 2):
            rate, torch_rate = batch / seconds[f"ours {workers}"], batch / seconds[f"torch {workers}"]
            label = f"imported {name} (64x64, b32)"
            print(f"{label:<36} {workers} worker{'s' if workers > 1 else ' '}  {rate:8.1f} img/s  "
                  f"PyTorch {workers} thread{'s' if workers > 1 else ' '} {torch_rate:8.1f} img/s  "
                  f"{rate / torch_rate:5.2f}x   goal >= 1.0x   [{where}]", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--parts", default="import,throughput,torchvision",
                    help="comma-separated: import (ResNet-50, GPT-2), throughput (scaled ResNet-18), "
                         "torchvision (the torchvision list)")
    ap.add_argument("--models", default=",".join(TORCHVISION),
                    help="comma-separated torchvision models for the torchvision part (import times of each; "
                         f"training throughput of those among {', '.join(TRAINED)})")
    args = ap.parse_args()
    parts, names = args.parts.split(","), args.models.split(",")
    unknown = [n for n in names if n not in TORCHVISION] + [p for p in parts if p not in ("import", "throughput",
                                                                                           "torchvision")]
    if unknown:
        raise SystemExit(f"unknown model or part: {', '.join(unknown)}")
    print(f"# shardwise {sw.__version__}, torch {torch.__version__}; {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}")
    if "import" in parts:
        import_times()
    if "throughput" in parts:
        throughput(args.steps)
    if "torchvision" in parts:
        torchvision_import_times(names)
        torchvision_throughput([n for n in TRAINED if n in names], args.steps)


if __name__ == "__main__":
    main()
