"""Simulating an iteration: the executor's task graph replayed with modelled durations.

    sim = simulate(plan)
    sim.iteration_time, sim.bytes_moved, sim.device_busy, sim.memory
    sim.events                    # built on first access (plot_timeline uses them)

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
* on CPU workers sharing a machine's cores (``DeviceGraph.cpu``), the tasks of
  devices c, c + cores, ... run one after another in program order on core c,
  transfers included, as the CPU executor's thread for that core runs them, and
  a task waiting for another thread's tasks starts a measured wake latency
  after them at the earliest;
* compute tasks take the roofline time of their shard (the same model as
  ``t_c``, csrc/cost.c's ``sw_worker_time``: an op's forward is a third of its
  t_c, its backward two thirds, split between the input and weight gradients),
  small bookkeeping tasks (gradient sums, updates, local copies) their memory
  traffic.

``engine="c"`` (default) does it all in C without a Python object per task:
csrc/lower.c builds the task graph, csrc/sim_durations.c the durations,
csrc/sim_plan.c the resources, and csrc/simulate.c replays them -- a few
milliseconds for Inception-v3 on 16 devices.  ``engine="python"`` is the
reference: the same task graph read through :func:`shardwise.lower.lower`,
:func:`task_durations` and the event loop in Python (:func:`_replay_python`);
the tests check both give the same results.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _core
from .devices import DeviceGraph
from .errors import ConfigError, ShardwiseError
from .boxes import volume
from .lower import BYTES_PER_ELEMENT, Task, TaskGraph, lower, plan_arrays
from .plan import Plan, reduction_pair
from .problem import make_problem

COMPUTE_KINDS = {"forward", "loss", "backward_data", "backward_weight", "bn_stats", "bn_apply",
                 "bn_backward_stats", "forward_partial"}


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


class SimResult:
    """What one simulated iteration looked like.  ``events`` (one :class:`SimEvent` per
    task) is built on first access: searches that only need the time never pay for it."""

    def __init__(self, plan: Plan, iteration_time: float, bytes_moved: int, device_busy: dict[int, float],
                 events: list[SimEvent] | Callable[[], list[SimEvent]] | None = None,
                 memory: dict[int, int] | None = None) -> None:
        self.plan = plan
        self.iteration_time = iteration_time
        self.bytes_moved = bytes_moved
        self.device_busy = device_busy            # fraction of the iteration each device computed
        self.memory = memory if memory is not None else {}
        self._events = events if events is not None else []

    @property
    def events(self) -> list[SimEvent]:
        if callable(self._events):
            self._events = self._events()
        return self._events

    def __repr__(self) -> str:
        return (f"SimResult({self.plan.name!r}, iteration_time={self.iteration_time!r}, "
                f"bytes_moved={self.bytes_moved!r})")

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


def _measured_split(plan: Plan, costs, op_name: str) -> tuple[float, float] | None:
    """(forward, backward) seconds of the op's partition from a profile, or None (model)."""
    split = getattr(costs, "split", None) if costs is not None else None
    if split is None or plan.configs[op_name].reduction is not None:
        return None   # partial-sum shards are not profiled: the model
    return split(op_name, plan.configs[op_name].degrees)


def task_durations(tg: TaskGraph, costs=None) -> list[float]:
    """Modelled seconds of every task of ``tg`` (transfers excluded: they depend on queues).

    The reference of csrc/sim_durations.c.  Compute tasks share their worker's forward
    roofline time (x1 forward, x2 backward) from csrc/cost.c's ``sw_worker_time``, the
    per-worker term of t_c.  With ``costs`` (a :class:`~shardwise.profile.Profile`), compute
    tasks take the measured forward / backward times of their op's partition, bookkeeping
    tasks the measured fixed + per-element seconds of their kind, and every task but a
    measured bookkeeping one pays the measured per-task overhead of the executor on top
    (bookkeeping is measured whole, by its thread's CPU time; a compute task by its
    kernels' time alone, without its interpreter time)."""
    plan, graph = tg.plan, tg.plan.graph
    devices = plan.devices.devices
    problem = make_problem(graph, plan.devices, plan.options)
    fwd_times: dict[str, np.ndarray] = {}
    per_op_counts: dict[tuple[str, int, str], int] = {}
    for t in tg.tasks:
        if t.kind in COMPUTE_KINDS:
            key = (t.op, t.worker, "fwd" if t.phase == "forward" else "bwd")
            per_op_counts[key] = per_op_counts.get(key, 0) + 1
    out = []
    overhead = _measured(costs, "task_overhead")
    fixed = getattr(costs, "element_fixed", {}) if costs is not None else {}
    for t in tg.tasks:
        dev = devices[t.device]
        if t.kind in COMPUTE_KINDS:
            share = per_op_counts[(t.op, t.worker, "fwd" if t.phase == "forward" else "bwd")]
            measured = _measured_split(plan, costs, t.op)
            if measured is not None:   # its kernels' time only: the interpreter time comes on top
                out.append((measured[0] if t.phase == "forward" else measured[1]) / share)
            else:
                if t.op not in fwd_times:
                    cfg = plan.configs[t.op]
                    fwd_times[t.op] = problem.worker_times(graph[t.op].index, np.asarray(cfg.degrees, np.int32),
                                                           np.asarray(cfg.devices, np.int32),
                                                           reduction_pair(graph[t.op], cfg))
                total = float(fwd_times[t.op][t.worker]) * (1.0 if t.phase == "forward" else 2.0)
                out.append(total / share)
        elif costs is not None and t.kind in getattr(costs, "element_seconds", {}) and \
                not (t.kind == "copy" and t.src_device != t.device):
            elements = volume(t.box) if t.box is not None else tg.buffers[t.writes[0]].elements
            out.append(fixed.get(t.kind, 0.0) + costs.element_seconds[t.kind] * elements)   # measured here
            continue
        elif t.kind == "copy" and t.src_device == t.device:
            out.append(2 * volume(t.box) * BYTES_PER_ELEMENT / dev.mem_bandwidth)  # a local memcpy
        elif t.kind in ("accumulate", "reduce", "stats_reduce", "sum_partials"):
            elements = volume(t.box) if t.box else tg.buffers[t.writes[0]].elements * len(t.reads)
            out.append(3 * elements * BYTES_PER_ELEMENT / dev.mem_bandwidth)
        elif t.kind == "activation_grad":   # read the gradient and the output, write the result
            out.append(3 * tg.buffers[t.writes[0]].elements * BYTES_PER_ELEMENT / dev.mem_bandwidth)
        elif t.kind == "zero_grad":         # write the gradient
            out.append(tg.buffers[t.writes[0]].elements * BYTES_PER_ELEMENT / dev.mem_bandwidth)
        elif t.kind == "update":
            out.append(5 * tg.buffers[t.reads[0]].elements * BYTES_PER_ELEMENT / dev.mem_bandwidth)
        else:  # load_input, join, and transfers (timed by their links)
            out.append(0.0)
        out[-1] += overhead   # modelled: the executor's interpreter time comes on top
    return out


def simulate(plan: Plan, check_memory: bool = True, engine: str = "c", costs=None) -> SimResult:
    """Replay one training iteration of ``plan``; raises :class:`MemoryOverflow` naming every
    device whose buffers exceed its memory when ``check_memory``.  ``engine``: "c" (default:
    lowering, durations and replay in C) or "python" (the same task graph, and the reference
    implementation of the same rules).  ``costs``: a :class:`~shardwise.profile.Profile` of
    measured times (compute, per-task overhead, bookkeeping rates and copy bandwidth) instead of
    the roofline model; its per-step overhead is added to the iteration time."""
    if engine not in ("c", "python"):
        raise ConfigError(f"unknown simulation engine {engine!r}; expected 'c' or 'python'")
    if plan.options.sync != "parameter_server":
        raise NotImplementedError("lowering ring all-reduce synchronization is not implemented yet; "
                                  "use CostOptions(sync='parameter_server')")
    if engine == "c":
        return _simulate_c(plan, check_memory, costs)
    tg = lower(plan)
    memory = tg.memory_per_device()
    if check_memory:
        _check_memory(plan, memory)
    import gc

    enabled = gc.isenabled()
    gc.disable()  # tens of thousands of events and none forms a cycle (see lower())
    try:
        return _run(tg, plan.devices, memory, "python", costs)
    finally:
        if enabled:
            gc.enable()


def _check_memory(plan: Plan, memory: dict[int, int]) -> None:
    over = {d: m for d, m in memory.items() if m > plan.devices.devices[d].memory}
    if over:
        text = ", ".join(f"{plan.devices.devices[d].name}: {m / 1e9:.2f} GB > "
                         f"{plan.devices.devices[d].memory / 1e9:.2f} GB" for d, m in sorted(over.items()))
        raise MemoryOverflow(f"plan {plan.name!r} does not fit: {text}")


# ----------------------------------------------------------------------------- the C engine
def _machine(devices: DeviceGraph, dispatch: bool) -> tuple[np.ndarray, np.ndarray, list[str], int, int]:
    """Resources as the C engine numbers them: (route_ptr, route_res, names, cores, interpreter).

    Device d is resource d, core c (CPU workers sharing a machine) ndev + c; then the links
    (or network adapters) of every route a -> b, listed per pair as :func:`_resources` does."""
    n = len(devices)
    cores = getattr(devices, "shared_cores", None) or 0
    names = [f"device {d}" for d in range(n)] + [f"core {c}" for c in range(cores)]
    ids: dict[str, int] = {}
    route_ptr = np.zeros(n * n + 1, np.int32)
    route_res: list[int] = []
    for a in range(n):
        for b in range(n):
            if a != b:
                for r in _route_resources(devices, a, b):
                    if r not in ids:
                        ids[r] = len(names)
                        names.append(r)
                    route_res.append(ids[r])
            route_ptr[a * n + b + 1] = len(route_res)
    interpreter = -1
    if dispatch:
        interpreter = len(names)
        names.append("interpreter")
    return route_ptr, np.asarray(route_res, np.int32), names, cores, interpreter


def _cost_arrays(plan: Plan, costs) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, float, float]:
    """(split, element_seconds, element_fixed, task_overhead, copy_bandwidth) of a profile for the C engine."""
    if costs is None:
        return None, None, None, 0.0, 0.0
    split = np.full((len(plan.graph.ops), 2), np.nan)
    for op in plan.graph.ops:
        measured = _measured_split(plan, costs, op.name)
        if measured is not None:
            split[op.index] = measured
    rates = np.full(len(_core.TASK_KINDS), np.nan)
    fixed = np.full(len(_core.TASK_KINDS), np.nan)
    for kind, rate in getattr(costs, "element_seconds", {}).items():
        if kind in _core.TASK_KINDS and kind not in COMPUTE_KINDS:
            rates[_core.TASK_KINDS.index(kind)] = rate
            fixed[_core.TASK_KINDS.index(kind)] = getattr(costs, "element_fixed", {}).get(kind, np.nan)
    return split, rates, fixed, _measured(costs, "task_overhead"), _measured(costs, "copy_bandwidth")


def _measured(costs, name: str) -> float:
    """One of a profile's measured figures (``task_overhead``, ``copy_bandwidth``,
    ``step_overhead``: a step's time outside its tasks, added to the replayed makespan;
    ``wake_latency``), or 0 without costs or that figure."""
    return float(getattr(costs, name, 0.0) or 0.0)


def _simulate_c(plan: Plan, check_memory: bool, costs) -> SimResult:
    devices = plan.devices
    problem = make_problem(plan.graph, devices, plan.options)
    split, rates, fixed, overhead, copy_bw = _cost_arrays(plan, costs)
    route_ptr, route_res, names, cores, interpreter = _machine(devices, overhead > 0)
    r = problem.simulate_plan(*plan_arrays(plan), route_ptr, route_res, len(names), cores=cores,
                              interpreter=interpreter, split=split, element_seconds=rates, task_overhead=overhead,
                              copy_bandwidth=copy_bw, element_fixed=fixed,
                              wake_latency=_measured(costs, "wake_latency") if cores else 0.0)
    memory = {d: int(m) for d, m in enumerate(r["memory"])}
    if check_memory:
        _check_memory(plan, memory)
    total = float(r["iteration_time"]) + _measured(costs, "step_overhead")
    busy = {d: (float(b) / total if total > 0 else 0.0) for d, b in enumerate(r["busy"])}
    return SimResult(plan, total, int(r["bytes_moved"]), busy, lambda: _events_from(plan, r, names), memory)


def _events_from(plan: Plan, r: dict, names: list[str]) -> list[SimEvent]:
    """SimEvents of the C engine's arrays (only when someone asks for them)."""
    kinds, phases = _core.TASK_KINDS, _core.PHASES
    op_names = [op.name for op in plan.graph.ops]
    start, end = r["start"].tolist(), (r["start"] + r["duration"]).tolist()
    ptr, res = r["res_ptr"].tolist(), r["res"].tolist()
    kind, phase, op = r["kind"].tolist(), r["phase"].tolist(), r["op"].tolist()
    return [SimEvent(i, kinds[kind[i]], phases[phase[i]], op_names[op[i]],
                     tuple(names[x] for x in res[ptr[i]:ptr[i + 1]]), start[i], end[i]) for i in range(len(start))]


# ----------------------------------------------------------------------------- the Python reference
def _route_resources(devices: DeviceGraph, a: int, b: int) -> tuple[str, ...]:
    """What a transfer from device a to device b holds: its route's links, or between the
    nodes of a cluster the source node's adapter (send side) and the destination's (receive)."""
    na, nb = devices.devices[a].node, devices.devices[b].node
    if devices.shared_nics and na != nb:
        return (f"nic {na} out", f"nic {nb} in")
    return tuple(f"link {u}->{v}" for u, v in devices.route(a, b))


def _resources(t: Task, devices: DeviceGraph) -> tuple[str, ...]:
    cores = getattr(devices, "shared_cores", None)
    if t.kind == "copy" and t.src_device != t.device:
        route = _route_resources(devices, t.src_device, t.device)
        return route + (f"core {t.device % cores}",) if cores else route   # the receiving thread copies
    if t.kind in ("join", "load_input"):
        return ()
    if cores:  # CPU workers of one machine take turns on its cores
        return (f"device {t.device}", f"core {t.device % cores}")
    return (f"device {t.device}",)


def _thread_order(tasks: list[Task], deps: list[tuple[int, ...]], cores: int | None) -> list[tuple[int, ...]]:
    """On CPU workers sharing ``cores`` cores, the executor's thread c runs the tasks of
    devices c, c + cores, ... in program order (:func:`shardwise.runtime.executor_threads`): each task
    also waits for the one before it on its core."""
    if not cores:
        return deps
    previous: dict[int, int] = {}
    out = []
    for t in tasks:
        core = t.device % cores
        out.append(tuple(deps[t.id]) + ((previous[core],) if core in previous else ()))
        previous[core] = t.id
    return out


def _run(tg: TaskGraph, devices: DeviceGraph, memory: dict[int, int], engine: str = "python",
         costs=None) -> SimResult:
    """Replay a task graph (:func:`~shardwise.lower.lower`); ``engine`` picks the event loop ("c": csrc/simulate.c)."""
    tasks = tg.tasks
    durations = task_durations(tg, costs)
    route_bw = devices.route_bandwidths()
    measured_bw = _measured(costs, "copy_bandwidth")
    for t in tasks:
        if t.kind == "copy" and t.src_device != t.device:
            bw = measured_bw or route_bw[t.src_device, t.device]
            durations[t.id] += t.nbytes / bw
    resources = [_resources(t, devices) for t in tasks]
    cores = getattr(devices, "shared_cores", None)
    deps = _thread_order(tasks, [t.deps for t in tasks], cores)
    overhead = _measured(costs, "task_overhead")
    if overhead > 0:
        deps, durations, resources = _with_dispatch(tasks, deps, durations, resources, overhead)
    wake = _measured(costs, "wake_latency")
    if cores and wake > 0:
        deps, durations, resources = _with_wakes(tasks, deps, durations, resources, cores, wake, dispatch=overhead > 0)
    groups, handoff = None, None
    if overhead > 0 and cores and wake > 0:   # the interpreter lock changes threads at a wake-up's cost
        thread = [t.device % cores for t in tasks]
        groups = [thread[i % len(tasks)] for i in range(len(deps))]
        handoff = {"interpreter": wake}
    replay = _replay_c if engine == "c" else _replay_python
    start = replay(deps, durations, resources, groups, handoff)
    events = [SimEvent(t.id, t.kind, t.phase, t.op, resources[t.id], float(start[t.id]),
                       float(start[t.id] + durations[t.id])) for t in tasks]
    total = max((float(a + b) for a, b in zip(start, durations)), default=0.0) + _measured(costs, "step_overhead")
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


def _with_wakes(tasks, deps, durations, resources, cores: int, latency: float, dispatch: bool):
    """Model the executor's threads waking: a thread that waits on an event for tasks of
    another thread (core) runs again ``latency`` seconds after the last of them ends.  Task
    i (through its dispatch task, if any) depends on a wake task instead of those tasks; the
    wake tasks (ids after all others, like csrc/sim_plan.c's) hold nothing and take
    ``latency``, or nothing for a task that waits for no other thread."""
    n = len(tasks)
    base = len(deps)
    new_deps = list(deps)
    wake_deps = []
    for t in tasks:
        entry = n + t.id if dispatch else t.id
        cross = tuple(d for d in t.deps if tasks[d].device % cores != t.device % cores)
        if cross:
            new_deps[entry] = tuple(d for d in deps[entry] if d not in cross) + (base + t.id,)
        wake_deps.append(cross)
    new_durations = list(durations) + [latency if cross else 0.0 for cross in wake_deps]
    return new_deps + wake_deps, new_durations, list(resources) + [()] * n


def _replay_c(deps: list[tuple[int, ...]], durations: list[float], resources: list[tuple[str, ...]],
              groups: list[int] | None = None, handoff: dict[str, float] | None = None):
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
    extra = ()
    if handoff:
        seconds = np.zeros(len(names), np.float64)
        for name, value in handoff.items():
            if name in names:
                seconds[names[name]] = value
        extra = (np.asarray(groups, np.int32), seconds)
    start, _ = _core.simulate_tasks(np.asarray(durations, np.float64), dep_ptr, np.asarray(flat, np.int32),
                                    res_ptr, np.asarray(res, np.int32), len(names), *extra)
    return start


def _replay_python(deps: list[tuple[int, ...]], durations: list[float], resources: list[tuple[str, ...]],
                   groups: list[int] | None = None, handoff: dict[str, float] | None = None) -> list[float]:
    """The rules of csrc/simulate.c, in Python: a task starts when its dependencies are done
    and it is first in line (lowest id among the ready) on every resource it needs, all of
    them free; tasks that need nothing start when ready; everything that ends at the same
    instant releases its resources before anything new starts.  With ``groups`` (the thread
    of every task) and ``handoff`` (seconds per resource name), a task that waited for a
    resource another thread held last runs that long after the resource is free (it stays
    held meanwhile)."""
    handoff = handoff or {}
    holder: dict[str, int] = {}
    ready_at = [0.0] * len(deps)
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
        ready_at[tid] = now
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
                    delay = 0.0
                    for q in resources[tid]:
                        heapq.heappop(lines[q])
                        busy.add(q)
                        if handoff.get(q, 0.0) > 0 and holder.get(q, groups[tid]) != groups[tid] and ready_at[tid] < now:
                            delay = max(delay, handoff[q])
                        if groups is not None:
                            holder[q] = groups[tid]
                    start[tid] = now + delay
                    heapq.heappush(running, (now + delay + durations[tid], tid))
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
