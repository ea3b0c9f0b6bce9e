"""Simulating an iteration: the executor's task graph replayed with modelled durations.

    sim = simulate(plan)
    sim.iteration_time, sim.bytes_moved, sim.device_busy, sim.events

Eq. 1 adds every cost up; a real iteration runs devices in parallel and
overlaps transfers (and gradient synchronization, seed 000 section 5) with
computation.  The simulator replays exactly the task graph the CPU executor
runs (:func:`shardwise.lower.lower`), so estimate and execution cannot drift
apart:

* one compute queue per device, tasks in program order as their inputs arrive;
* one queue per link direction; a transfer holds every link of its route
  (:meth:`DeviceGraph.route`) for bytes / (slowest link on the route), so
  transfers that share a link wait for each other; between the nodes of a
  cluster, traffic goes through each node's one network adapter (send side of
  the source node, receive side of the destination), shared by its devices;
* compute tasks take the roofline time of their shard (the same model as
  ``t_c``: an op's forward is a third of its t_c, its backward two thirds,
  split between the input and weight gradients), small bookkeeping tasks
  (gradient sums, updates, local copies) their memory traffic.

The event loop runs in C (csrc/simulate.c); ``engine="python"`` runs the same
rules in Python, the reference the tests compare it with.  The lowering and the
durations are still computed in Python, which dominates the time on large
graphs (0.65 s for Inception-v3 on 16 devices, 0.26 s of it lowering).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from math import prod

from .devices import DeviceGraph
from .errors import ConfigError, ShardwiseError
from .graph import Op
from .lower import BYTES_PER_ELEMENT, Box, Task, TaskGraph, input_region, lower, volume
from .plan import Plan

COMPUTE_KINDS = {"forward", "loss", "backward_data", "backward_weight", "bn_stats", "bn_apply",
                 "bn_backward_stats"}


@dataclass(frozen=True)
class SimEvent:
    """One task as it ran in the simulation."""

    task: int
    kind: str
    phase: str
    op: str | None
    resources: tuple[str, ...]   # "device 3" or "link 0->1"
    start: float
    end: float


@dataclass
class SimResult:
    """What one simulated iteration looked like."""

    plan: Plan
    iteration_time: float
    bytes_moved: int
    device_busy: dict[int, float]          # fraction of the iteration each device computed
    events: list[SimEvent] = field(default_factory=list)
    memory: dict[int, int] = field(default_factory=dict)

    def plot_timeline(self, path: str | None = None, max_tasks: int = 20000):
        """A Gantt chart: one row per device and per link direction, forward / backward /
        synchronization / update coloured.  Saves to ``path`` (atomically) if given and
        returns the matplotlib figure.  Needs matplotlib (``pip install matplotlib``)."""
        try:
            import matplotlib
            if path is not None:
                matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("plot_timeline needs matplotlib: pip install matplotlib") from None
        colors = {"forward": "tab:blue", "backward": "tab:orange", "sync": "tab:green", "update": "tab:red"}
        rows = sorted({r for e in self.events for r in e.resources},
                      key=lambda r: (r.split()[0] != "device", r.split()[0], [int(x) for x in r.split()[1].split("->")], r))
        index = {r: k for k, r in enumerate(rows)}
        fig, ax = plt.subplots(figsize=(12, 0.35 * len(rows) + 1.5))
        shown = sorted(self.events, key=lambda e: e.end - e.start, reverse=True)[:max_tasks]
        for phase, color in colors.items():
            bars: dict[int, list[tuple[float, float]]] = {}
            for e in shown:
                if e.phase == phase and e.end > e.start:
                    for r in e.resources:
                        bars.setdefault(index[r], []).append((e.start * 1e3, (e.end - e.start) * 1e3))
            for row, spans in bars.items():
                ax.broken_barh(spans, (row - 0.4, 0.8), color=color, label=phase if row == min(bars) else None)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.invert_yaxis()
        ax.set_xlabel("ms")
        ax.set_title(f"{self.plan.name}: simulated iteration {self.iteration_time * 1e3:.2f} ms")
        ax.legend(loc="upper right")
        fig.tight_layout()
        if path is not None:
            from .viz import save_figure

            save_figure(fig, path)
        return fig

    def summary(self) -> str:
        busy = ", ".join(f"{d}: {b:.0%}" for d, b in sorted(self.device_busy.items()))
        return (f"simulated iteration {self.iteration_time * 1e3:.3f} ms, {self.bytes_moved / 1e6:.2f} MB moved, "
                f"device busy {busy}")


class MemoryOverflow(ShardwiseError, RuntimeError):
    """The plan needs more memory on some device than it has."""


def _roofline(flops: float, elements: float, device) -> float:
    return max(flops / device.flops, elements * BYTES_PER_ELEMENT / device.mem_bandwidth)


def _forward_time(op: Op, box: Box, device) -> float:
    """Roofline time of one forward pass over ``box`` (the model of csrc/cost.c, one pass)."""
    if not op.desc.inputs:
        return 0.0
    outputs = volume(box)
    red = prod(op.desc.extents[op.desc.out_rank:])
    flops = outputs * red * op.desc.flops_per_point + outputs * op.desc.flops_per_output
    elements = outputs + sum(volume(input_region(op.desc, k, box)) for k in range(len(op.desc.inputs)))
    return _roofline(flops, elements, device)


def task_durations(tg: TaskGraph, costs=None) -> list[float]:
    """Modelled seconds of every task of ``tg`` (transfers excluded: they depend on queues).

    With ``costs`` (a :class:`~shardwise.profile.Profile`), compute tasks take the
    measured forward / backward times of their op's partition and every task pays
    the measured per-task overhead of the executor."""
    plan, graph = tg.plan, tg.plan.graph
    devices = plan.devices.devices
    fwd_cache: dict[tuple[str, int], float] = {}
    per_op_counts: dict[tuple[str, int, str], int] = {}
    for t in tg.tasks:
        if t.kind in COMPUTE_KINDS:
            key = (t.op, t.worker, "fwd" if t.phase == "forward" else "bwd")
            per_op_counts[key] = per_op_counts.get(key, 0) + 1
    activation = {(b.tensor, b.device): b.box for b in tg.buffers if b.kind == "activation"}
    out = []
    for t in tg.tasks:
        dev = devices[t.device]
        if t.kind in COMPUTE_KINDS:
            op = graph[t.op]
            key = (t.op, t.worker)
            share = per_op_counts[(t.op, t.worker, "fwd" if t.phase == "forward" else "bwd")]
            measured = costs.split(t.op, plan.configs[t.op].degrees) if costs is not None else None
            if measured is not None:
                out.append((measured[0] if t.phase == "forward" else measured[1]) / share)
                continue
            if key not in fwd_cache:
                fwd_cache[key] = _forward_time(op, activation[(t.op, t.device)], dev)
            total = fwd_cache[key] * (1.0 if t.phase == "forward" else 2.0)
            out.append(total / share)
        elif costs is not None and t.kind in getattr(costs, "element_seconds", {}) and \
                not (t.kind == "copy" and t.src_device != t.device):
            elements = volume(t.box) if t.box is not None else tg.buffers[t.writes[0]].elements
            out.append(costs.element_seconds[t.kind] * elements)   # measured on this machine
        elif t.kind == "copy" and t.src_device == t.device:
            out.append(2 * volume(t.box) * BYTES_PER_ELEMENT / dev.mem_bandwidth)  # a local memcpy
        elif t.kind in ("accumulate", "reduce", "stats_reduce"):
            elements = volume(t.box) if t.box else tg.buffers[t.writes[0]].elements * len(t.reads)
            out.append(3 * elements * BYTES_PER_ELEMENT / dev.mem_bandwidth)
        elif t.kind == "update":
            out.append(5 * tg.buffers[t.reads[0]].elements * BYTES_PER_ELEMENT / dev.mem_bandwidth)
        else:  # load_input, join, and transfers (timed by their links)
            out.append(0.0)
    if costs is not None and getattr(costs, "task_overhead", 0.0):
        out = [d + costs.task_overhead for d in out]
    return out


def simulate(plan: Plan, check_memory: bool = True, engine: str = "c", costs=None) -> SimResult:
    """Replay one training iteration of ``plan``; raises :class:`MemoryOverflow` naming every
    device whose buffers exceed its memory when ``check_memory``.  ``engine``: "c" (default)
    or "python" (the reference implementation of the same rules).  ``costs``: a
    :class:`~shardwise.profile.Profile` of measured times (compute, per-task overhead and
    copy bandwidth) instead of the roofline model."""
    if engine not in ("c", "python"):
        raise ConfigError(f"unknown simulation engine {engine!r}; expected 'c' or 'python'")
    tg = lower(plan)
    memory = tg.memory_per_device()
    if check_memory:
        over = {d: m for d, m in memory.items() if m > plan.devices.devices[d].memory}
        if over:
            text = ", ".join(f"{plan.devices.devices[d].name}: {m / 1e9:.2f} GB > "
                             f"{plan.devices.devices[d].memory / 1e9:.2f} GB" for d, m in sorted(over.items()))
            raise MemoryOverflow(f"plan {plan.name!r} does not fit: {text}")
    import gc

    enabled = gc.isenabled()
    gc.disable()  # tens of thousands of events and none forms a cycle (see lower())
    try:
        return _run(tg, plan.devices, memory, engine, costs)
    finally:
        if enabled:
            gc.enable()


def _resources(t: Task, devices: DeviceGraph) -> tuple[str, ...]:
    if t.kind == "copy" and t.src_device != t.device:
        a, b = devices.devices[t.src_device].node, devices.devices[t.device].node
        if devices.shared_nics and a != b:  # leaves node a and enters node b through their adapters
            return (f"nic {a} out", f"nic {b} in")
        return tuple(f"link {u}->{v}" for u, v in devices.route(t.src_device, t.device))
    if t.kind in ("join", "load_input"):
        return ()
    cores = getattr(devices, "shared_cores", None)
    if cores:  # CPU workers of one machine take turns on its cores
        return (f"device {t.device}", f"core {t.device % cores}")
    return (f"device {t.device}",)


def _run(tg: TaskGraph, devices: DeviceGraph, memory: dict[int, int], engine: str = "c", costs=None) -> SimResult:
    tasks = tg.tasks
    durations = task_durations(tg, costs)
    route_bw = devices.route_bandwidths()
    measured_bw = getattr(costs, "copy_bandwidth", 0.0) if costs is not None else 0.0
    for t in tasks:
        if t.kind == "copy" and t.src_device != t.device:
            bw = measured_bw or route_bw[t.src_device, t.device]
            durations[t.id] += t.nbytes / bw
    resources = [_resources(t, devices) for t in tasks]
    deps = [t.deps for t in tasks]
    overhead = getattr(costs, "task_overhead", 0.0) if costs is not None else 0.0
    if overhead > 0:
        deps, durations, resources = _with_dispatch(tasks, deps, durations, resources, overhead)
    replay = _replay_c if engine == "c" else _replay_python
    start = replay(deps, durations, resources)
    events = [SimEvent(t.id, t.kind, t.phase, t.op, resources[t.id], float(start[t.id]),
                       float(start[t.id] + durations[t.id])) for t in tasks]
    total = max((float(a + b) for a, b in zip(start, durations)), default=0.0)
    busy: dict[int, float] = {d: 0.0 for d in range(len(devices))}
    for e, t in zip(events, tasks):
        if e.resources and e.resources[0].startswith("device"):
            busy[t.device] += e.end - e.start
    device_busy = {d: (b / total if total > 0 else 0.0) for d, b in busy.items()}
    return SimResult(tg.plan, total, tg.bytes_moved(), device_busy, events, memory)


def _with_dispatch(tasks, deps, durations, resources, overhead):
    """Model the CPU executor's interpreter: before each task its worker thread spends
    ``overhead`` seconds dispatching it while holding the one GIL, so dispatch is serial
    across workers while kernels run in parallel.  Adds one dispatch task per task
    (ids n .. 2n-1, after the real ones so that events keep their ids)."""
    n = len(tasks)
    new_deps = [(n + t.id,) for t in tasks] + [tuple(d) for d in deps]
    new_durations = [d - overhead if d >= overhead else d for d in durations] + [overhead] * n
    new_resources = list(resources) + [("interpreter", f"device {t.device}") for t in tasks]
    return new_deps, new_durations, new_resources


def _replay_c(deps: list[tuple[int, ...]], durations: list[float], resources: list[tuple[str, ...]]):
    import numpy as np

    from . import _core

    names: dict[str, int] = {}
    n = len(deps)
    res_ptr = np.zeros(n + 1, np.int32)
    dep_ptr = np.zeros(n + 1, np.int32)
    res: list[int] = []
    flat: list[int] = []
    for i in range(n):
        res.extend(names.setdefault(r, len(names)) for r in resources[i])
        flat.extend(deps[i])
        res_ptr[i + 1] = len(res)
        dep_ptr[i + 1] = len(flat)
    start, _ = _core.simulate_tasks(np.asarray(durations, np.float64), dep_ptr, np.asarray(flat, np.int32),
                                    res_ptr, np.asarray(res, np.int32), len(names))
    return start


def _replay_python(deps: list[tuple[int, ...]], durations: list[float],
                   resources: list[tuple[str, ...]]) -> list[float]:
    """The rules of csrc/simulate.c, in Python: a task starts when its dependencies are done
    and it is first in line (lowest id among the ready) on every resource it needs, all of
    them free; tasks that need nothing start when ready; everything that ends at the same
    instant releases its resources before anything new starts."""
    n = len(deps)
    dependents: list[list[int]] = [[] for _ in range(n)]
    missing = [len(d) for d in deps]
    for i in range(n):
        for d in deps[i]:
            dependents[d].append(i)
    busy: set[str] = set()
    lines: dict[str, list[int]] = {}
    running: list[tuple[float, int]] = []
    start = [0.0] * n
    now = 0.0

    def ready(tid: int) -> None:
        if not resources[tid]:
            start[tid] = now
            heapq.heappush(running, (now + durations[tid], tid))
            return
        for r in resources[tid]:
            heapq.heappush(lines.setdefault(r, []), tid)

    def start_what_can() -> None:
        progress = True
        while progress:
            progress = False
            for r, line in lines.items():
                if r in busy or not line:
                    continue
                tid = line[0]
                if all(q not in busy and lines[q][0] == tid for q in resources[tid]):
                    for q in resources[tid]:
                        heapq.heappop(lines[q])
                        busy.add(q)
                    start[tid] = now
                    heapq.heappush(running, (now + durations[tid], tid))
                    progress = True

    for i in range(n):
        if missing[i] == 0:
            ready(i)
    start_what_can()
    finished = 0
    while running:
        end, tid = heapq.heappop(running)
        now = end
        finished += 1
        busy.difference_update(resources[tid])
        for dep in dependents[tid]:
            missing[dep] -= 1
            if missing[dep] == 0:
                ready(dep)
        if running and running[0][0] == now:
            continue
        start_what_can()
    if finished != n:
        raise RuntimeError(f"simulation stopped with {n - finished} tasks never ready (a cycle?)")
    return start
