"""Memory budgets: swapping feature maps to host memory (issue "Memory budgets", seed 002).

Printed beside the figures of "AccUDNN: A GPU Memory Efficient Accelerator for Training
Ultra-deep Deep Neural Networks" (ResNet-152 at minibatch 32: more than 24 GB without
swapping, 8.3 GB with its dynamic strategy at no measurable slowdown; Table 1: the
efficiency-optimal minibatch under 12 GB 22-315% above Caffe's largest) and of vDNN
(VGG-16 with 18% loss on a 12 GB GPU):

1. ResNet-50/101/152 and VGG-16 on one P100 and one V100 (the roofline model, the presets'
   PCIe 3.0 x16 host links): the arena without swapping, the smallest budget whose swap plan
   the simulator replays with at most 5% overhead, and the overhead at the smallest budget
   swapping reaches (about every feature map offloaded).  Goal: ResNet-152 at minibatch 32 at
   most 35% of its unswapped arena with at most 5% overhead.
2. ``sw.tune_minibatch`` under 12 GB on one P100 beside Table 1: the largest minibatch whose
   unswapped arena fits (Caffe's column) and the efficiency-optimal one with swapping.
3. Measured on the CPU backend: the scaled ResNet-18 (32x32 images, width 16) trained under a
   budget one third of its unswapped arena, its slowdown beside the simulator's prediction
   (on CPU workers a swap is a memcpy on the worker's own thread, so it cannot overlap).

4. The stall a swap plan reports (SwapPlan.total_stall, the simulator's: the swapped iteration
   minus the unswapped) beside two sw.simulate calls made here and beside the planner's own
   timing model, which only chooses what to offload (it charged every swap-out it could not hide
   to the computation: 95.6 ms where the simulator replays 6.4 ms).

    python benchmarks/memory.py [--quick]     # writes benchmarks/results/memory.txt
    python benchmarks/memory.py --stall       # parts 4 and 2 only, appended to it
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import date

import numpy as np

import shardwise as sw

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "memory.txt")
GB = 1e9


def one(device: str) -> sw.DeviceGraph:
    return sw.DeviceGraph.cluster(1, 1, device)


def overhead(plan: sw.Plan, base: float, budget: int) -> tuple[float, sw.SwapPlan] | None:
    try:
        sp = sw.swap_plan(plan, budget)
    except ValueError:
        return None
    return sw.simulate(plan, swap=sp, check_memory=False).iteration_time / base - 1, sp


def budgets(model: str, batch: int, device: str, steps: int) -> str:
    g = sw.models.get(model, batch=batch)
    plan = sw.Plan.from_dict(g, one(device), {})
    base = sw.simulate(plan, check_memory=False).iteration_time
    peak = sw.memory_plan(plan).peak_bytes
    floor = sw.swap_plan(plan, peak).min_peak[0]
    # the smallest footprint: the lowest budget that still fits, searched up from the model's floor
    lo_fit = None
    for f in np.linspace(floor / peak, 1.0, 41):
        got = overhead(plan, base, int(peak * f) + 1)
        if got is not None:
            lo_fit = (f, got)
            break
    # the smallest budget within 5%: bisection on the fraction of the unswapped arena
    lo, hi = (lo_fit[0] if lo_fit else 1.0), 1.0
    best = (1.0, 0.0)
    for _ in range(steps):
        mid = (lo + hi) / 2
        got = overhead(plan, base, int(peak * mid))
        if got is not None and got[0] <= 0.05:
            hi, best = mid, (mid, got[0])
        else:
            lo = mid
    if lo_fit and lo_fit[1][0] <= 0.05:
        best = (lo_fit[0], lo_fit[1][0])
    all_f, (all_o, all_sp) = lo_fit if lo_fit else (1.0, (0.0, None))
    return (f"{model:<10} {batch:>5} {device:<5} {peak / GB:>9.2f} {best[0] * peak / GB:>9.2f} {best[0]:>6.0%} "
            f"{best[1]:>7.1%} {all_f * peak / GB:>9.2f} {all_f:>6.0%} {all_o:>8.1%} {base * 1e3:>8.1f}")


def largest_unswapped(model: str, budget: float, hi: int) -> int:
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        plan = sw.Plan.from_dict(sw.models.get(model, batch=mid), one("P100"), {})
        if sw.memory_plan(plan).peak_bytes <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


TABLE1 = {"resnet50": (112, 33, 239), "resnet101": (74, 20, 270), "resnet152": (54, 13, 315), "vgg16": (192, 80, 140)}


def tuned(model: str) -> str:
    t0 = time.perf_counter()
    best = sw.tune_minibatch(lambda b: sw.models.get(model, batch=b), one("P100"), budget="12GB", base_batch=32,
                             base_lr=0.1, epochs=90, samples=1_281_167)
    caffe = largest_unswapped(model, 12e9, best.k_max)
    acc, caf, gain = TABLE1[model]
    plain = sw.Plan.from_dict(sw.models.get(model, batch=caffe), one("P100"), {})
    plain_ips = caffe / sw.simulate(plain, check_memory=False).iteration_time
    return (f"{model:<10} {caffe:>7} {plain_ips:>9.1f} {best.k_max:>6} {best.batch:>7} {best.images_per_second:>9.1f} "
            f"{best.batch / caffe - 1:>7.0%} {best.lr:>7.3f}   {caf:>4} -> {acc:>4} (+{gain}%)  "
            f"{'' if best.meets_no_stall else 'no candidate free of stalls; '}{time.perf_counter() - t0:.0f} s")


def measured_cpu(batch: int, steps: int) -> list[str]:
    g = sw.models.resnet18_small(batch=batch)
    d = sw.DeviceGraph.cpu(1)
    plan = sw.Plan.from_dict(g, d, {})
    peak = sw.memory_plan(plan).peak_bytes
    budget = peak // 3
    sp = sw.swap_plan(plan, budget)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, 10, batch)

    trainers = [sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.01, momentum=0.9), swap=swap) for swap in (None, sp)]
    times: list[list[float]] = [[], []]
    for k in range(steps + 2):   # interleaved, so that other load on the machine hits both alike
        for i, t in enumerate(trainers):
            t0 = time.perf_counter()
            t.step(x, y)
            if k >= 2:
                times[i].append(time.perf_counter() - t0)
    plain, swapped = statistics.median(times[0]), statistics.median(times[1])
    t = trainers[1]
    sim0 = sw.simulate(plan).iteration_time
    sim1 = sw.simulate(plan, swap=sp).iteration_time
    return [f"scaled ResNet-18 (width 16, 32x32), batch {batch}, one CPU worker: arena {peak / 1e6:.1f} MB "
            f"unswapped, budget {budget / 1e6:.1f} MB (one third)",
            f"  swap plan: {len(sp.entries)} feature maps offloaded ({sp.offloaded_bytes[0] / 1e6:.1f} MB), arena "
            f"{sp.peak_bytes[0] / 1e6:.1f} MB, measured high water {t.arena_high_water()[0] / 1e6:.1f} MB, "
            f"host region {sp.host_bytes[0] / 1e6:.1f} MB",
            f"  median step: {plain * 1e3:.1f} ms unswapped, {swapped * 1e3:.1f} ms swapped: "
            f"measured slowdown {swapped / plain - 1:+.1%}; simulated {sim0 * 1e3:.1f} -> {sim1 * 1e3:.1f} ms: "
            f"predicted {sim1 / sim0 - 1:+.1%}"]


STALL_CASES = [("resnet152", 32, "P100"), ("resnet50", 32, "P100"), ("vgg16", 128, "P100"),
               ("resnet18_small", 64, "cpu")]


def stall_rows() -> list[str]:
    """Part 4: per model and budget, the planner's model, the reported stall and the simulated overhead."""
    rows = [f"{'model':<15} {'batch':>5} {'dev':<5} {'budget':>6} {'offl.':>5} {'planner model ms':>16} "
            f"{'reported ms':>11} {'simulated ms':>12} {'iter ms':>8}"]
    for model, batch, device in STALL_CASES:
        g = sw.models.get(model, batch=batch)
        plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1) if device == "cpu" else one(device), {})
        peak = sw.memory_plan(plan).peak_bytes
        base = sw.simulate(plan, check_memory=False).iteration_time
        for f in (0.95, 0.9, 0.8, 0.7, 0.5):
            try:
                sp = sw.swap_plan(plan, int(peak * f))
            except ValueError:   # below what swapping reaches
                continue
            simulated = sw.simulate(plan, swap=sp, check_memory=False).iteration_time - base
            model_ms = float(sp.arrays["stall"].max()) * 1e3   # the planner's own estimate (chooses, not reported)
            rows.append(f"{model:<15} {batch:>5} {device:<5} {f:>6.0%} {len(sp.entries):>5} {model_ms:>16.2f} "
                        f"{sp.total_stall * 1e3:>11.2f} {simulated * 1e3:>12.2f} {base * 1e3:>8.1f}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer bisection steps, fewer models")
    ap.add_argument("--stall", action="store_true", help="parts 4 and 2 only, appended to the results")
    args = ap.parse_args()
    if args.stall:
        return stall_main()
    steps = 4 if args.quick else 7
    out = [f"# {date.today().isoformat()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
           "roofline model, host links PCIe 3.0 x16 (16 GB/s each way)", ""]

    def say(line: str = "") -> None:
        print(line, flush=True)
        out.append(line)

    say("1. budgets on one GPU (GB; overhead = simulated iteration with swap tasks / without - 1)")
    say("   AccUDNN: ResNet-152 batch 32 from > 24 GB to 8.3 GB (35%) with no measurable slowdown (M40, Caffe); "
        "vDNN: VGG-16 18% loss on a 12 GB GPU.  Goal: ResNet-152 <= 35% of unswapped at <= 5%")
    head = (f"{'model':<10} {'batch':>5} {'dev':<5} {'unswapped':>9} {'<=5% at':>9} {'share':>6} {'overh.':>7} "
            f"{'smallest':>9} {'share':>6} {'overhead':>8} {'iter ms':>8}")
    say(head)
    cases = [("resnet50", 32), ("resnet101", 32), ("resnet152", 32), ("vgg16", 32), ("vgg16", 128)]
    for model, batch in cases[:3] if args.quick else cases:
        for device in ("P100",) if args.quick else ("P100", "V100"):
            say(budgets(model, batch, device, steps))
    say()
    say("2. tune_minibatch under 12 GB on one P100 (base: batch 32, lr 0.1; images/s simulated) beside Table 1")
    say(f"{'model':<10} {'largest':>7} {'images/s':>9} {'k_max':>6} {'optimal':>7} {'images/s':>9} {'gain':>7} "
        f"{'lr':>7}   Table 1: Caffe -> AccUDNN")
    for model in ("resnet50",) if args.quick else ("resnet50", "resnet101", "resnet152", "vgg16"):
        say(tuned(model))
    say()
    say("3. measured on the CPU backend")
    for line in measured_cpu(64, 5 if args.quick else 15):
        say(line)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    if not args.quick:
        with open(RESULTS, "w") as f:
            f.write("\n".join(out) + "\n")
    return 0


def stall_main() -> int:
    out = ["", f"# {date.today().isoformat()}, {os.cpu_count()} cores (shared with other work: nothing here is "
           f"timed but the tune column of seconds), Python {platform.python_version()}; roofline model", ""]

    def say(line: str = "") -> None:
        print(line, flush=True)
        out.append(line)

    say("4. the stall a swap plan reports (sp.total_stall: the simulator's, swapped iteration minus unswapped)")
    say("   beside sw.simulate with and without the swap tasks, and beside the planner's own timing model")
    say("   (which only chooses what to offload).  Budgets: share of the unswapped arena.")
    for line in stall_rows():
        say(line)
    say()
    say("2'. tune_minibatch again, its no-stall test now on the simulated stall (as part 2)")
    say(f"{'model':<10} {'largest':>7} {'images/s':>9} {'k_max':>6} {'optimal':>7} {'images/s':>9} {'gain':>7} "
        f"{'lr':>7}   Table 1: Caffe -> AccUDNN")
    for model in ("resnet50", "resnet101", "resnet152", "vgg16"):
        say(tuned(model))
    with open(RESULTS, "a") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
