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

    python benchmarks/import.py [--steps 8]
"""
from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    print(f"# shardwise {sw.__version__}, torch {torch.__version__}; {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}")
    import_times()
    throughput(args.steps)


if __name__ == "__main__":
    main()
