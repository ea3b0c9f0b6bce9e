"""Training throughput on one GPU: the CUDA backend against PyTorch eager (issue 26, point 4).

For each model and batch: training images/s of shardwise's CUDA backend (one logical device,
SGD with momentum) and of the same network in PyTorch eager on the same GPU
(``cudnn.benchmark=True``), float32 with TF32 off and on, and the memory each holds: ours is
the arena of the plan (one cudaMalloc per logical device, ``Trainer.memory_per_worker``) and
the device memory our trainer took in all (arena, workspaces, cuDNN and cuBLAS handles: the
drop of ``torch.cuda.mem_get_info``'s free bytes while it is built and run), PyTorch's is
``torch.cuda.max_memory_allocated``.  A step of ours copies the batch in from host memory and
waits for the loss; PyTorch's batch stays on the GPU and each timed block ends with
``torch.cuda.synchronize``.

    python benchmarks/gpu_throughput.py --quick          # scaled ResNet-18 and VGG, batch 8 and 64 (< 2 min)
    python benchmarks/gpu_throughput.py                  # also ResNet-50 and VGG-16 at batch 64 (224x224)
    python benchmarks/gpu_throughput.py --models vgg_small --batches 16,32 --steps 20

Where no GPU can be used (the CUDA backend not built, no driver, no GPU) it prints why and
exits with status 2 without measuring anything.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # train_throughput: to_torch, batch_for

import shardwise as sw  # noqa: E402
from shardwise.train.trainer import SGD, Trainer  # noqa: E402
from train_throughput import batch_for, to_torch  # noqa: E402

QUICK = [("resnet18_small", 8), ("resnet18_small", 64), ("vgg_small", 8), ("vgg_small", 64)]
FULL = QUICK + [("resnet50", 64), ("vgg16", 64)]
MiB = 2 ** 20


def torch_gpu():
    """The torch module where it sees a CUDA GPU, else (None, the reason)."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA GPU"
    return torch, ""


def timed(step, steps: int, rounds: int, sync=None) -> float:
    """Median seconds per step over ``rounds`` blocks of ``steps`` steps (one warm-up step first)."""
    step()
    if sync:
        sync()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if sync:
            sync()
        out.append((time.perf_counter() - t0) / steps)
    return statistics.median(out)


def ours(g: sw.Graph, tf32: bool, steps: int, rounds: int, torch) -> dict:
    if tf32:
        os.environ["SHARDWISE_CUDA_TF32"] = "1"     # read when the backend is built
    else:
        os.environ.pop("SHARDWISE_CUDA_TF32", None)
    free0 = torch.cuda.mem_get_info()[0] if torch else None
    # the GPU as the plan's one device: its memory (not a CPU preset's 4 GB) bounds the arena
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.local_gpus(logical=1))
    t = Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9), backend="cuda")
    x, y = batch_for(g)
    sec = timed(lambda: t.step(x, y), steps, rounds)
    used = (free0 - torch.cuda.mem_get_info()[0]) / MiB if torch else float("nan")
    arena = sum(t.memory_per_worker().values()) / MiB
    return {"sec": sec, "arena": arena, "used": used}   # the trainer and its arena go with this frame


def eager(g: sw.Graph, tf32: bool, steps: int, rounds: int, torch) -> dict:
    from torch import nn

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    model = to_torch(g, nn).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = batch_for(g)
    x, y = torch.tensor(x).cuda(), torch.tensor(y).cuda()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    sec = timed(step, steps, rounds, torch.cuda.synchronize)
    return {"sec": sec, "peak": torch.cuda.max_memory_allocated() / MiB}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="scaled ResNet-18 and VGG at batch 8 and 64, few steps")
    ap.add_argument("--models", help="comma-separated model names (sw.models), instead of the default list")
    ap.add_argument("--batches", default="8,64", help="batches for --models (default 8,64)")
    ap.add_argument("--steps", type=int, default=None, help="steps per timed block (default 5 quick, 10)")
    ap.add_argument("--rounds", type=int, default=None, help="timed blocks, median taken (default 3 quick, 5)")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch eager")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()

    ok, reason = sw.cuda.status()
    if not ok:
        print(f"gpu_throughput: no GPU, nothing measured: {reason}", file=sys.stderr)
        return 2
    torch, why = (None, "--no-torch") if args.no_torch else torch_gpu()
    steps = args.steps or (5 if args.quick else 10)
    rounds = args.rounds or (3 if args.quick else 5)
    if args.models:
        cases = [(m, int(b)) for m in args.models.split(",") for b in args.batches.split(",")]
    else:
        cases = QUICK if args.quick else FULL

    gpu = sw.cuda.gpus()[0]
    c = sw.cuda.info()
    out = [f"benchmarks/gpu_throughput.py ({time.strftime('%Y-%m-%d')}): {gpu.name}, driver {c['driver']}, "
           f"CUDA {c['cuda_build']}, cuDNN {c['cudnn']}, cuBLAS {c['cublas']}; "
           f"PyTorch {torch.__version__ if torch else 'not measured: ' + why}",
           f"training images/s, SGD momentum, float32; {steps} steps x {rounds} rounds (median); memory in MiB",
           f"{'model':<15} {'batch':>5} {'tf32':>4} {'ours img/s':>11} {'torch img/s':>11} {'ratio':>6} "
           f"{'our arena':>9} {'our used':>9} {'torch peak':>10}"]
    print("\n".join(out), flush=True)
    failed = 0
    for name, batch in cases:
        g = sw.models.get(name, batch=batch)
        for tf32 in (False, True):
            try:
                o = ours(g, tf32, steps, rounds, torch)
                gc.collect()                 # our trainer's arena freed before PyTorch's run
                e = eager(g, tf32, steps, rounds, torch) if torch else None
                if torch:
                    gc.collect()
                    torch.cuda.empty_cache()
            except Exception as exc:   # one failing case must not hide the others' numbers
                failed += 1
                out.append(f"{name:<15} {batch:>5} {'on' if tf32 else 'off':>4} FAILED: {type(exc).__name__}: {exc}")
                print(out[-1], flush=True)
                continue
            ti = f"{batch / e['sec']:>11.1f}" if e else f"{'-':>11}"
            ratio = f"{e['sec'] / o['sec']:>6.2f}" if e else f"{'-':>6}"
            tp = f"{e['peak']:>10.1f}" if e else f"{'-':>10}"
            out.append(f"{name:<15} {batch:>5} {'on' if tf32 else 'off':>4} {batch / o['sec']:>11.1f} {ti} {ratio} "
                       f"{o['arena']:>9.1f} {o['used']:>9.1f} {tp}")
            print(out[-1], flush=True)
    out.append("ratio: ours over PyTorch eager (images/s); >= 1.0 is the goal (issue 26)")
    print(out[-1])
    if args.out:
        with open(args.out, "w") as fh:
            fh.write("\n".join(out) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
