"""Plans for today's models on today's clusters: the searched plan beside the usual layouts.

ResNet-50, GPT-2 small and medium, and Llama-shaped 7B and 13B models on 8, 64, 256 and 1,024
H100s (``DeviceGraph.cluster(nodes, 8, device="H100")``: 8 GPUs a node on NVSwitch, an NDR
adapter per GPU).  Per model and machine, four plans, each replayed by the simulator:

* data: data parallelism (every op split by samples), gradients all-reduced by a ring;
* megatron x data: Megatron-LM's tensor parallelism inside a node (``sw.models.megatron_dp_spec``,
  ``sw.models.llama_megatron_dp_spec``) and data parallelism across nodes; the tensor-parallel
  degree is the largest of 8, 4, 2 dividing the heads (GPT-2 small's 12 heads: 4), so a group
  never leaves its node; not for ResNet-50;
* ZeRO: data parallelism with sharded optimizer state (``CostOptions(sync="zero")``), where this
  version of shardwise has that synchronization model; "n/a (not available)" where it does not;
* searched: ``sw.search`` (the simulated objective, under every device's 80 GB, split reductions
  allowed) with a time limit per search, with ring synchronization and, where ``sync="zero"``
  exists, again with it ("searched, zero sync": the search does not choose the sync model);
  where it raises (no plan fits, or the staged search of a large machine does not search under
  memory) the row gives the reason.

Columns: the simulated step time, the largest arena of any device (its memory plan, what the
runtime allocates; "does not fit" above the device's memory) and the search time (the
``sw.search`` call alone; before 2026-11-29 it also held the replay measuring the searched plan).  After each
(model, machine), the check: the faster searched plan's step time is at most every baseline's that fits
(PASS / FAIL; printed, not asserted).  Costs in bf16 mixed precision (2-byte activations,
gradients and messages; float32 master weights and optimizer state).  The memory plan is the
simulator's and the search's: one optimizer state buffer per parameter (SGD with momentum; Adam's
two would add a float32 copy of each device's parameters).  The GPT-2s' vocabulary is padded to
50,304, as Megatron-LM pads it.  Batches: 32 images a GPU for ResNet-50; 8 sequences of 1,024
tokens a GPU for GPT-2 (a global batch of 8 x devices sequences); one sequence of 2,048 tokens a
GPU for Llama (2M tokens a step on 1,024 GPUs, Llama-2 trained with 4M), since nothing here
accumulates gradients over micro-batches and 8 sequences a GPU do not fit a 7B model.  Llama 7B:
32 layers, d_model 4096, 32 heads (multi-head attention, as Llama-2-7B), MLP 11008; 13B: 40 layers,
5120, 40 heads, MLP 13824; vocabulary 32000.

    python benchmarks/cluster_plans.py [--quick] [--only MODEL] [--time-limit SECONDS]
        > benchmarks/results/cluster_plans.txt

``--quick``: 8 and 64 GPUs, ResNet-50 and the GPT-2s only.  Above 16 GPUs the simulator (and the
search's simulated objective) replays each ring all-reduce fused, one task per ring link
(docs/simulator.md, "Large machines"), so ResNet-50's rows on 1,024 GPUs take about a minute on
one core; the Llamas' memory-constrained searches take minutes from 64 GPUs on.  A gradient with
fewer rows than the ring has members in every dimension cannot be cut into ring chunks and is
synchronized by a parameter server (docs/cost-model.md): data parallelism of ResNet-50 on 1,024
GPUs is slow for that reason, in the cost model and in the simulator alike.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import shardwise as sw
from shardwise.errors import ConfigError, SearchError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distributed import cpu_model  # noqa: E402

GPUS_PER_NODE = 8
MACHINES = (8, 64, 256, 1024)
QUICK_MACHINES = (8, 64)


@dataclass(frozen=True)
class Model:
    """A model of the benchmark: its graph for a machine of ``devices`` GPUs (the global batch
    scales with them) and its Megatron x data spec (None: no tensor-parallel layout)."""

    build: Callable[[int], sw.Graph]
    heads: int | None = None                                  # (key/value) heads a TP group splits
    megatron: Callable[[sw.Graph, int, int], dict] | None = None
    small: bool = False                                        # in --quick


MODELS = {
    "resnet50": Model(lambda k: sw.models.resnet50(batch=32 * k), small=True),
    "gpt2-small": Model(lambda k: sw.models.gpt(vocab=50304, batch=8 * k), 12, sw.models.megatron_dp_spec, small=True),
    "gpt2-medium": Model(lambda k: sw.models.gpt(layers=24, d_model=1024, heads=16, vocab=50304,
                                                   batch=8 * k), 16,
                         sw.models.megatron_dp_spec, small=True),
    "llama-7b": Model(lambda k: sw.models.llama(kv_heads=32, ffn=11008, seq=2048, batch=k), 32,
                      sw.models.llama_megatron_dp_spec),
    "llama-13b": Model(lambda k: sw.models.llama(layers=40, d_model=5120, heads=40, kv_heads=40, ffn=13824,
                                                 seq=2048, batch=k), 40, sw.models.llama_megatron_dp_spec),
}


@dataclass
class Row:
    """One plan's line: simulated seconds a step, the largest arena (bytes) and whether it fits;
    ``note`` instead of figures where the plan could not be made; ``search_s`` for the searched."""

    kind: str
    time: float | None = None
    arena: int | None = None
    fits: bool = False
    search_s: float | None = None
    note: str = ""


def zero_available() -> bool:
    """Does this shardwise's cost model know sharded optimizer state (``sync="zero"``)?"""
    try:
        sw.CostOptions(sync="zero")
    except ConfigError:
        return False
    return True


def tensor_parallel_degree(heads: int) -> int:
    """The largest of 8, 4, 2, 1 dividing ``heads``: a group inside one node of 8 GPUs."""
    return next(k for k in (GPUS_PER_NODE, 4, 2, 1) if heads % k == 0)


def measured(kind: str, plan: sw.Plan, cache: dict) -> Row:
    """``plan`` simulated once (step time and every device's arena); plans equal to one already
    simulated (the searched plan is often a baseline) reuse its replay."""
    key = (plan.options, tuple(sorted(plan.configs.items())))
    if key not in cache:
        result = sw.simulate(plan, check_memory=False)
        cache[key] = (result.iteration_time, max(result.memory.values()))
    seconds, arena = cache[key]
    memory = min(dev.memory for dev in plan.devices.devices)
    return Row(kind, seconds, arena, arena <= memory)


def plan_rows(graph: sw.Graph, devices: sw.DeviceGraph, options: sw.CostOptions,
              megatron: Callable[[sw.Graph, int, int], dict] | None, heads: int | None,
              time_limit: float | None, extra: dict[str, sw.Plan] | None = None) -> list[Row]:
    """The rows of one (model, machine): data, megatron x data, ZeRO, any ``extra`` baselines
    (the test's), then searched (and searched under zero synchronization, where it exists)."""
    cache: dict = {}
    rows = [measured("data", sw.strategies.data_parallel(graph, devices, options), cache)]
    if megatron is None:
        rows.append(Row("megatron x data", note="n/a (not a transformer)"))
    else:
        tp = tensor_parallel_degree(heads)
        dp = len(devices) // tp
        try:
            plan = sw.Plan.from_dict(graph, devices, megatron(graph, tp, dp), options=options)
            rows.append(measured(f"megatron {tp} x data {dp}", plan, cache))
        except ConfigError as exc:
            rows.append(Row("megatron x data", note=f"n/a ({exc})"))
    if zero_available():
        zero = dataclasses.replace(options, sync="zero")
        rows.append(measured("ZeRO (data)", sw.strategies.data_parallel(graph, devices, zero), cache))
    else:
        rows.append(Row("ZeRO (data)", note="n/a (not available)"))
    for kind, plan in (extra or {}).items():
        rows.append(measured(kind, plan, cache))
    rows.append(searched("searched", graph, devices, options, time_limit, cache))
    if zero_available():   # the search under sharded optimizer state too: ZeRO is not a choice it makes
        rows.append(searched("searched, zero sync", graph, devices, dataclasses.replace(options, sync="zero"),
                             time_limit, cache))
    return rows


def searched(kind: str, graph: sw.Graph, devices: sw.DeviceGraph, options: sw.CostOptions,
             time_limit: float | None, cache: dict) -> Row:
    """The searched plan's row, or the reason the search gave none.  ``search_s``: the sw.search
    call alone (the replay that measures its plan for the row is not part of the search)."""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan = sw.search(graph, devices, options=options, time_limit=time_limit, progress=False)
    except (SearchError, ValueError) as exc:   # PlanDoesNotFitError is a ValueError
        row = Row(kind, note=f"{type(exc).__name__}: {exc}")
        row.search_s = time.perf_counter() - t0
        return row
    seconds = time.perf_counter() - t0
    row = measured(kind, plan, cache)
    row.search_s = seconds
    return row


def check(rows: list[Row]) -> str:
    """PASS when the fastest searched plan's step time (the search under ring and, where it exists,
    under zero synchronization) is at most every fitting baseline's."""
    found = [r for r in rows if r.kind.startswith("searched") and r.time is not None]
    fitting = [r for r in rows if not r.kind.startswith("searched") and r.time is not None and r.fits]
    if not found:
        if fitting:
            return f"FAIL: no searched plan, but {', '.join(r.kind for r in fitting)} fit"
        return "PASS (vacuous): no searched plan and no baseline fits"
    best_found = min(found, key=lambda r: r.time)
    slower = [r for r in fitting if best_found.time > r.time * (1 + 1e-9)]
    if slower:
        return "FAIL: slower than " + ", ".join(f"{r.kind} ({r.time * 1e3:.2f} ms)" for r in slower)
    if not fitting:
        return "PASS (no baseline fits)"
    best = min(fitting, key=lambda r: r.time)
    return (f"PASS: {best_found.kind} {best_found.time * 1e3:.2f} ms <= fastest fitting baseline {best.kind} "
            f"{best.time * 1e3:.2f} ms")


def format_rows(rows: list[Row]) -> list[str]:
    lines = [f"  {'plan':<22}{'step ms':>12}{'GB/device':>18}{'search s':>10}"]
    for r in rows:
        search = f"{r.search_s:10.1f}" if r.search_s is not None else f"{'':>10}"
        if r.time is None:
            lines.append(f"  {r.kind:<22}{'-':>12}{'-':>18}{search}  {r.note}")
            continue
        memory = f"{r.arena / 1e9:.1f}" if r.fits else f"{r.arena / 1e9:.0f} does not fit"
        lines.append(f"  {r.kind:<22}{r.time * 1e3:>12.2f}{memory:>18}{search}")
    lines.append(f"  check: {check(rows)}")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 and 64 GPUs, ResNet-50 and the GPT-2s only")
    ap.add_argument("--only", choices=sorted(MODELS), help="one model")
    ap.add_argument("--machines", type=int, nargs="*", help="GPU counts (multiples of 8) instead of the default")
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds a search may take (between stages)")
    args = ap.parse_args(argv)
    machines = args.machines or (QUICK_MACHINES if args.quick else MACHINES)
    names = [args.only] if args.only else [n for n, m in MODELS.items() if m.small or not args.quick]
    print(f"# shardwise {sw.__version__}: plans on H100 clusters; {cpu_model()}, {os.cpu_count()} cores, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; roofline costs, bf16, ring sync")
    print(f"# search time limit {args.time_limit:.0f} s; memory: one optimizer state buffer a parameter; ZeRO: "
          f"{'sync=zero' if zero_available() else 'n/a (CostOptions has no sync=zero here)'}")
    options = sw.CostOptions(sync="ring", precision="bf16", reduction_splits=True)
    for name in names:
        model = MODELS[name]
        for k in machines:
            g = model.build(k)
            devices = sw.DeviceGraph.cluster(k // GPUS_PER_NODE, GPUS_PER_NODE, device="H100")
            print(f"\n## {name}, {g.num_parameters() / 1e6:,.0f}M parameters, batch {g.ops[0].shape[0]}, "
                  f"on {k} H100s ({k // GPUS_PER_NODE} nodes)", flush=True)
            t0 = time.perf_counter()
            rows = plan_rows(g, devices, options, model.megatron, model.heads, args.time_limit)
            for line in format_rows(rows):
                print(line)
            print(f"  ({time.perf_counter() - t0:.0f} s for this machine's rows)", flush=True)


if __name__ == "__main__":
    main()
