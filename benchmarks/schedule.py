"""FIFO against critical-path scheduling (issue 14): simulated on P100s, measured on the CPU backend.

Prints, beside TurboDL's figures (Jin et al.: 1.30x on average over Caffe-cuDNN; ResNet 1.35x at
batch 32, VGG-16 1.27x at batch 100, GoogLeNet 1.30x, on one P100):

* simulated iteration time under ``schedule="fifo"`` (one stream per device, program order) and
  ``"critical_path"`` (TurboDL's priorities and streams; a layer's gradient synchronization on
  streams ranked by reuse distance), their ratio, for ResNet-50 (batch 32), VGG-16 (100),
  Inception-v3 (32) and AlexNet (128), data parallel on 1, 4 and 16 P100s.  A P100 runs the
  ready kernels of its streams at once, each filling (output elements / 1.8M) of it at most
  (56 SMs x 2 blocks x a 128 x 128 tile: shardwise.machine.devices.DEVICE_PRESETS); ``x0.25`` and
  ``x4`` columns show the ratio with that fill divided / multiplied by four (kernels filling
  four times more / less of the device); ``b2b``: fifo over critical_path with iterations back
  to back, no barrier between them (``simulate(..., iterations=3)``: the time each iteration
  after the first adds);
* the ceiling of hiding every dW / dB behind the dA chain on one device: the fifo iteration's
  summed task time over the same without the dW and dB tasks;
* measured on the CPU backend: the scaled ResNet-18 and Inception at batch 16, fifo against
  critical_path on one device (one worker thread), with the simulator's prediction (from a
  profile of this machine) beside it.  The CPU backend runs a device on one thread: kernels of
  one device never run side by side, so there is nothing for the priorities to overlap;
* the GPU row (``--backend cuda``, only that row, not written to results/): fifo against
  critical_path measured on the CUDA backend on one GPU (the critical-path schedule's streams
  carry CUDA stream priorities), the scaled ResNet-18 at batch 16 and ResNet-50 at batch 32,
  with PyTorch eager on the same GPU beside them where PyTorch sees it.  Without a usable GPU
  it prints why and exits with status 2.

    python benchmarks/schedule.py [--quick] [--no-cpu]
    python benchmarks/schedule.py --backend cuda [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import shardwise as sw
from shardwise.train.trainer import SGD, Trainer

NETS = [("resnet50", 32), ("vgg16", 100), ("inception_v3", 32), ("alexnet", 128)]
PAPER = {"resnet50": "1.35 (ResNet, b32)", "vgg16": "1.27 (b100)", "inception_v3": "1.30 (GoogLeNet, b32)",
         "alexnet": "1.21 (b128)"}
P100_FILL = sw.machine.devices.DEVICE_PRESETS["P100"].fill_outputs
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "schedule.txt")


def devices(n: int) -> sw.DeviceGraph:
    return sw.DeviceGraph.cluster(nodes=max(1, n // 4), devices_per_node=min(n, 4))


def ceiling(plan: sw.Plan) -> float:
    """Summed task time of the fifo iteration over the same without dW and dB (one device)."""
    sim = sw.simulate(plan, check_memory=False)
    sub = [p.subtask for p in sw.schedule(plan).priorities]
    total = sum(e.end - e.start for e in sim.events)
    hidden = sum(e.end - e.start for e, s in zip(sim.events, sub) if s in ("dW", "dB"))
    return total / (total - hidden)


def simulated(out: list[str], counts: list[int]) -> None:
    out.append("Simulated (roofline model, P100 presets), data parallel; ratio = fifo / critical_path")
    out.append(f"{'network':<13} {'batch':>5} {'P100s':>5} {'fifo ms':>9} {'crit ms':>9} {'ratio':>6} "
               f"{'x0.25':>6} {'x4':>6} {'b2b':>6} {'ceiling':>8}   TurboDL")
    for name, batch in NETS:
        g = sw.models.get(name, batch=batch)
        for n in counts:
            plan = sw.strategies.data_parallel(g, devices(n))
            f = sw.simulate(plan, check_memory=False).iteration_time
            c = sw.simulate(plan, schedule="critical_path", check_memory=False).iteration_time
            lo = f / sw.simulate(plan, schedule="critical_path", check_memory=False,
                                 fill_outputs=P100_FILL / 4).iteration_time
            hi = f / sw.simulate(plan, schedule="critical_path", check_memory=False,
                                 fill_outputs=P100_FILL * 4).iteration_time
            b2b = (sw.simulate(plan, check_memory=False, iterations=3).iteration_time /
                   sw.simulate(plan, schedule="critical_path", check_memory=False, iterations=3).iteration_time)
            ceil = f"{ceiling(plan):>8.3f}" if n == 1 else f"{'':>8}"
            out.append(f"{name:<13} {batch:>5} {n:>5} {f * 1e3:>9.2f} {c * 1e3:>9.2f} {f / c:>6.3f} {lo:>6.3f} "
                       f"{hi:>6.3f} {b2b:>6.3f} {ceil}   {PAPER[name] if n == 1 else ''}")
            print(out[-1], flush=True)


def measured(out: list[str], steps: int, rounds: int) -> None:
    out.append("")
    out.append("Measured on the CPU backend (this machine), batch 16, one device (one worker thread)")
    out.append(f"{'network':<16} {'fifo ms':>9} {'crit ms':>9} {'ratio':>6} {'predicted':>10}")
    for name in ("resnet18_small", "inception_small"):
        g = sw.models.get(name, batch=16)
        plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
        f, c = fifo_and_critical(g, plan, steps, rounds, "cpu")
        prof = sw.profile(g, plan.devices, repeats=3)
        pf = sw.simulate(plan, costs=prof, check_memory=False).iteration_time
        pc = sw.simulate(plan, costs=prof, schedule="critical_path", check_memory=False).iteration_time
        out.append(f"{name:<16} {f * 1e3:>9.2f} {c * 1e3:>9.2f} {f / c:>6.3f} {pf / pc:>10.3f}")
        print(out[-1], flush=True)


def fifo_and_critical(g: sw.Graph, plan: sw.Plan, steps: int, rounds: int, backend: str) -> tuple[float, float]:
    """Median seconds per step under fifo and critical_path, the two schedules' blocks in turn."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, g.ops[-1].shape[1], g.ops[0].shape[0])
    trainers = {s: Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9), schedule=s, backend=backend)
                for s in ("fifo", "critical_path")}
    for t in trainers.values():
        t.step(x, y)
    times: dict[str, list[float]] = {s: [] for s in trainers}
    for _ in range(rounds):   # the two schedules in turn, so a slow stretch slows both
        for s, t in trainers.items():
            t0 = time.perf_counter()
            for _ in range(steps):
                t.step(x, y)
            times[s].append((time.perf_counter() - t0) / steps)
    return statistics.median(times["fifo"]), statistics.median(times["critical_path"])


def measured_gpu(out: list[str], steps: int, rounds: int) -> int:
    """The GPU row: fifo against critical_path on the CUDA backend, one GPU; PyTorch eager beside."""
    ok, reason = sw.cuda.status()
    if not ok:
        print(f"schedule.py --backend cuda: no GPU, nothing measured: {reason}", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpu_throughput

    torch, why = gpu_throughput.torch_gpu()
    out.append(f"Measured on the CUDA backend: {sw.cuda.gpus()[0].name}, one logical device, TF32 off; "
               f"PyTorch eager {'(cudnn.benchmark)' if torch else 'not measured: ' + why}")
    out.append(f"{'network':<16} {'batch':>5} {'fifo ms':>9} {'crit ms':>9} {'ratio':>6} {'torch ms':>9}")
    os.environ.pop("SHARDWISE_CUDA_TF32", None)
    failed = 0
    for name, batch in (("resnet18_small", 16), ("resnet50", 32)):
        g = sw.models.get(name, batch=batch)
        # the GPU as the plan's one device: its memory bounds the arena (a CPU preset's 4 GB does not
        # hold ResNet-50 at batch 32)
        plan = sw.strategies.data_parallel(g, sw.DeviceGraph.local_gpus(logical=1))
        try:
            f, c = fifo_and_critical(g, plan, steps, rounds, "cuda")
            e = gpu_throughput.eager(g, False, steps, rounds, torch)["sec"] if torch else None
        except Exception as exc:   # the next network still runs
            failed += 1
            out.append(f"{name:<16} {batch:>5} FAILED: {type(exc).__name__}: {exc}")
            print(out[-1], flush=True)
            continue
        te = f"{e * 1e3:>9.2f}" if e else f"{'-':>9}"
        out.append(f"{name:<16} {batch:>5} {f * 1e3:>9.2f} {c * 1e3:>9.2f} {f / c:>6.3f} {te}")
        print(out[-1], flush=True)
    out.append("ratio: fifo over critical_path; the critical-path scheduling paper: 1.35x on ResNet b32 "
               "over a single-stream baseline")
    print(out[-1])
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one P100 only, fewer CPU steps")
    ap.add_argument("--no-cpu", action="store_true", help="skip the measured CPU rows")
    ap.add_argument("--cpu-only", action="store_true", help="only the measured CPU rows (not written)")
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: only the GPU row, measured on the CUDA backend (not written)")
    args = ap.parse_args()
    out = [f"benchmarks/schedule.py ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)", ""]
    if args.backend == "cuda":
        return measured_gpu(out, 3 if args.quick else 5, 3 if args.quick else 5)
    if not args.cpu_only:
        simulated(out, [1] if args.quick else [1, 4, 16])
    if not args.no_cpu:
        measured(out, 2 if args.quick else 4, 3 if args.quick else 5)
    out += ["", "GPU row: no GPU on this machine; the CUDA backend has not run (docs/gpu.md).",
            "TurboDL (P100, over Caffe-cuDNN): 1.30x on average; ResNet 1.35x (b32), VGG-16 1.27x (b100), "
            "GoogLeNet 1.30x, AlexNet 1.21x."]
    if not args.quick and not args.cpu_only:
        os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
        with open(RESULTS, "w") as fh:
            fh.write("\n".join(out) + "\n")
        print(f"wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
