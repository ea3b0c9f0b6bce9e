"""Simulating an iteration: the runtime's task graph replayed, in the runtime's order, with modelled durations.

    sim = simulate(plan)
    sim.iteration_time, sim.bytes_moved, sim.device_busy, sim.memory
    sim.events                    # built on first access (plot_timeline uses them)
    sim = simulate(plan, ranks=2) # an MPI job: devices in blocks over 2 ranks, sim.rank_bytes

Eq. 1 adds every cost up; a real iteration runs devices in parallel and
overlaps transfers (and gradient synchronization: DeePa, Jia et al. 2018,
section 5) with computation.  The simulator replays the task graph the native runtime runs
(csrc/graph/lower.c, :func:`shardwise.iteration.lower`), in the order the runtime keeps
(csrc/mem/order.c, read by the executor too), so estimate and execution cannot
drift apart:

* each device's tasks run in program order on its stream, copies into it
  included (or on a schedule's streams, ``schedule=``); a task also runs after
  its dependencies and after the memory plan's reuse edges into it (a copy on
  another stream still reading bytes that a buffer the task starts takes over),
  the memory plan being the runtime's (:func:`shardwise.memory_plan`, the
  runtime's alignment);
* on CPU workers sharing a machine's cores (``DeviceGraph.cpu``), the CPU
  backend runs the streams of devices c, c + threads, ... on thread c, one task
  at a time, whenever free the most urgent ready one (the earliest in program
  order under fifo), so the simulator makes core c a resource of their tasks,
  transfers included;
* one queue per link direction; a transfer holds every link of its route
  (:meth:`DeviceGraph.route`) for bytes / (slowest link on the route), so
  transfers that share a link wait for each other (lowest task id first, or
  the higher stream priority under a schedule);
  between the nodes of a cluster, traffic goes through each node's one network
  adapter (send side of the source node, receive side of the destination),
  shared by its devices;
* with ``ranks`` (an MPI job, one process per rank, :mod:`shardwise.distributed.ranks`), a
  copy between devices of different ranks is a message: it takes the rank link's latency +
  bytes / its bandwidth (a profile's ``rank_bandwidth`` and ``rank_latency``, measured
  through the comm layer, or ``rank_link=``; without them, the time of the same copy inside
  one process), holds the route's links as any copy and, on shared cores, the sending
  thread's core as well as the receiving one's (the sender packs into MPI's staging buffer
  while the receiver copies out of it: both memcpys are in the measured rate).  Each rank runs
  its own threads, but on one machine they share its cores: the workers stay queued on core
  d mod cores as in one process;
* compute tasks take the roofline time of their shard (the same model as
  ``t_c``, csrc/cost/cost.c's ``sw_worker_time``: an op's forward is a third of its
  t_c, its backward two thirds, split between the input and weight gradients),
  small bookkeeping tasks (gradient sums, updates, local copies) their memory
  traffic; with a profile (``costs``), the measured times instead.

One call into C does it all without a Python object per task
(``Problem.simulate_plan``: csrc/graph/lower.c, memplan.c, order.c, sim_durations.c,
sim_plan.c, simulate.c).  The tests compare it with an independent Python
event loop over ``sw.lower(plan)`` (tests/sim_oracle.py).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shardwise import _core
from shardwise.errors import ConfigError, ShardwiseError
from shardwise.iteration.lower import (FUSED_RINGS_ABOVE, TaskGraph, handle_of, lowered,  # noqa: F401 (re-exported)
                                       plan_arrays, ring_detail)  # plan_arrays: tests, benchmarks
from shardwise.iteration.recompute import recompute_ops
from shardwise.plan import Plan
from shardwise.iteration.schedule import as_schedule
from shardwise.iteration.sim_costs import (_cost_arrays, _Machine, _machine, _measured, describe_costs, device_fill,
                                          host_bandwidths, resolve_costs)
from shardwise.iteration.trace import TaskEvent, save_trace
from shardwise.distributed.ranks import rank_of_device

SimEvent = TaskEvent   # one task as it ran in the simulation (the name simulations have used)

# plot_timeline draws a lane per stream up to this many streams, a lane per device beyond
MAX_STREAM_LANES = 48


class SimResult:
    """What one simulated iteration looked like.  ``events`` (one :class:`SimEvent` per
    task) is built on first access: searches that only need the time never pay for it."""

    def __init__(self, plan: Plan, iteration_time: float, bytes_moved: int, device_busy: dict[int, float],
                 events: list[SimEvent] | Callable[[], list[SimEvent]] | None = None,
                 memory: dict[int, int] | None = None, tasks: int = 0, costs_used: str = "the roofline model",
                 lanes: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
                 ranks: list[int] | None = None, rank_bytes: dict[str, list[int]] | None = None,
                 task_times: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        self.plan = plan
        # (kind, op, start, duration) per task, the arrays events are made of; None for results
        # made without them
        self._task_times = task_times
        # the rank of every device (None: one process), and the bytes of the copies between
        # devices of different ranks, per rank: {"sent": [...], "received": [...]} (the layout
        # of Comm.counters(); all zero in one process)
        self.ranks = ranks
        self.rank_bytes = rank_bytes if rank_bytes is not None else {"sent": [0], "received": [0]}
        # (stream per task, device per stream, priority per stream, dep_ptr, deps): what
        # plot_timeline and critical_path read; None for results made without them
        self._lanes = lanes
        self.tasks = tasks                        # tasks replayed
        self.costs_used = costs_used              # "the roofline model" or "measured: <what>"
        self.iteration_time = iteration_time
        self.bytes_moved = bytes_moved
        self.device_busy = device_busy            # fraction of the iteration each device computed
        self.memory = memory if memory is not None else {}   # device -> bytes of its arena (the memory plan's)
        self._events = events if events is not None else []

    @property
    def events(self) -> list[SimEvent]:
        if callable(self._events):
            self._events = self._events()
        return self._events

    def seconds_by_op(self, kind: str = "forward") -> dict[str, float]:
        """Per op, the simulated seconds of its tasks of ``kind`` (every worker's) added up in task
        order, as the events' ``end - start`` would add up, without building the events (millions
        of them on large machines).  Results of :func:`simulate` carry the replay's arrays."""
        if self._task_times is None:
            raise ValueError("this SimResult was made without the replay's task arrays (sw.simulate's carry them)")
        kinds, op, start, duration = self._task_times
        mine = kinds == _core.TASK_KINDS.index(kind)
        sums = np.bincount(op[mine], weights=(start[mine] + duration[mine]) - start[mine])
        present = np.bincount(op[mine])
        names = [o.name for o in self.plan.graph.ops]
        return {names[i]: float(sums[i]) for i in np.flatnonzero(present)}

    def __repr__(self) -> str:
        return (f"SimResult({self.plan.name!r}, iteration_time={self.iteration_time!r}, "
                f"bytes_moved={self.bytes_moved!r})")

    @property
    def critical_path(self) -> list[int]:
        """The simulated iteration's critical path, first task first: from the task that ends
        last, back through whichever of its dependencies and the task before it on its stream
        ended last, to a task that waited for neither."""
        if self._lanes is None:
            raise ConfigError("this result was made without the task graph: no critical path")
        stream, _, _, dep_ptr, deps = self._lanes
        ev = self.events
        prev = np.full(len(ev), -1)
        last: dict[int, int] = {}
        for t, s in enumerate(stream.tolist()):   # the task before each on its stream
            prev[t] = last.get(s, -1)
            last[s] = t
        t = max(range(len(ev)), key=lambda i: (ev[i].end, -i)) if ev else -1
        path = []
        while t >= 0:
            path.append(t)
            before = [int(d) for d in deps[dep_ptr[t]:dep_ptr[t + 1]]] + ([int(prev[t])] if prev[t] >= 0 else [])
            t = max(before, key=lambda i: (ev[i].end, i)) if before else -1
        return path[::-1]

    def plot_timeline(self, path: str | None = None, max_tasks: int = 20000):
        """A Gantt chart: one lane per stream (device d's streams most urgent first; without a
        schedule, or with more than MAX_STREAM_LANES streams in all, one per device) and one per
        link direction, forward / backward /
        synchronization / update coloured, the :attr:`critical_path` marked by a black strip
        under its tasks' bars (the collections labelled "critical path"), op names on the bars
        wide enough to hold them.  Saves to ``path`` (atomically) if given
        and returns the matplotlib figure (a plain ``Figure``: pyplot and the backend are left
        alone, so a notebook shows it once).  Needs matplotlib (``pip install matplotlib``)."""
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("plot_timeline needs matplotlib: pip install matplotlib") from None
        colors = {"forward": "tab:blue", "backward": "tab:orange", "sync": "tab:green", "update": "tab:red"}
        if self._lanes is not None:   # compute on its stream's lane, transfers on their links'
            stream, sdev, sprio = self._lanes[:3]
            if len(sdev) <= MAX_STREAM_LANES:
                lane = [f"device {sdev[k]} stream {k} ({sprio[k]})" for k in range(len(sdev))]
            else:   # hundreds of streams (a critical-path schedule of a large net): a lane per device
                count = np.bincount(np.asarray(sdev, dtype=np.int64))
                lane = [f"device {sdev[k]} ({count[sdev[k]]} streams)" for k in range(len(sdev))]
            lane_of = {e.task: [lane[stream[e.task]] if r.startswith(("device", "core")) else r for r in e.resources]
                       for e in self.events}
            lane_of = {t: list(dict.fromkeys(rs)) for t, rs in lane_of.items()}
            # every stream gets a lane, even one whose tasks hold nothing (joins, loads)
            names = set(lane)
        else:
            lane_of = {e.task: list(e.resources) for e in self.events}
            names = set()
        rows = sorted({r for rs in lane_of.values() for r in rs} | names, key=lambda r: (
            r.split()[0] != "device", r.split()[0], [int(x) for x in r.split()[1].split("->") if x.isdigit()],
            int(r.split()[3]) if " stream " in r else -1, r))
        index = {r: k for k, r in enumerate(rows)}
        fig = Figure(figsize=(12, 0.35 * len(rows) + 1.5))   # not pyplot's: the backend is left alone
        ax = fig.subplots()
        shown = sorted(self.events, key=lambda e: e.end - e.start, reverse=True)[:max_tasks]
        from matplotlib.colors import to_rgb

        for phase, color in colors.items():
            # consecutive tasks of a lane alternate between the phase's colour and a darker shade,
            # so that back-to-back ops stay apart where their bars touch
            shades = (to_rgb(color), tuple(0.7 * c for c in to_rgb(color)))
            bars: dict[tuple[int, int], list[tuple[float, float]]] = {}
            for e in shown:
                if e.phase == phase and e.end > e.start:
                    for r in lane_of[e.task]:
                        bars.setdefault((index[r], 0), []).append((e.start * 1e3, (e.end - e.start) * 1e3))
            for row in sorted({row for row, _ in bars}):
                spans = sorted(bars.pop((row, 0)))
                bars[row, 0], bars[row, 1] = spans[0::2], spans[1::2]
            first = min((row for row, _ in bars), default=None)
            for (row, shade), spans in bars.items():
                if spans:   # an edge of the bar's own colour keeps bars thinner than a pixel visible
                    ax.broken_barh(spans, (row - 0.4, 0.7), facecolor=shades[shade], edgecolor=shades[shade],
                                   linewidth=0.3, label=phase if (row, shade) == (first, 0) else None)
        if self._lanes is not None:   # the critical path: a black strip under its tasks' bars, one collection a lane
            strips: dict[int, list[tuple[float, float]]] = {}
            for e in (self.events[t] for t in self.critical_path):
                if e.end > e.start:
                    for r in lane_of[e.task]:
                        strips.setdefault(index[r], []).append((e.start * 1e3, (e.end - e.start) * 1e3))
            for k, (row, spans) in enumerate(sorted(strips.items())):
                ax.broken_barh(spans, (row + 0.3, 0.12), facecolor="black", edgecolor="black", linewidth=0.3,
                               label="critical path" if k == 0 else None, gid="critical path")
        # op names on the bars wide enough to hold them (a 12-inch axis holds ~200 characters of 6 pt)
        span = max(self.iteration_time, 1e-12) * 1e3
        for e in shown:
            width = (e.end - e.start) * 1e3
            if e.op and width / span * 200 >= len(e.op) + 1:
                for r in lane_of[e.task]:
                    ax.text(e.start * 1e3 + width / 2, index[r], e.op, ha="center", va="center", fontsize=6,
                            clip_on=True, gid="op label")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows)
        ax.invert_yaxis()
        ax.set_xlabel("ms")
        ax.set_title(f"{self.plan.name}: simulated iteration {self.iteration_time * 1e3:.2f} ms")
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), borderaxespad=0.0)   # beside the lanes, off the bars
        fig.tight_layout()
        if path is not None:
            from shardwise.viz import save_figure

            save_figure(fig, path)
        return fig

    def save_trace(self, path: str) -> None:
        """The simulated iteration as a Chrome trace / Perfetto JSON file, one lane per device
        and per link or adapter used (:mod:`shardwise.iteration.trace`); written atomically."""
        save_trace(self.events, path, f"{self.plan.name}: simulated")

    def summary(self) -> str:
        busy = ", ".join(f"{d}: {b:.0%}" for d, b in sorted(self.device_busy.items()))
        across = (f" ({sum(self.rank_bytes['sent']) / 1e6:.2f} MB between {len(self.rank_bytes['sent'])} ranks)"
                  if self.ranks is not None and len(self.rank_bytes["sent"]) > 1 else "")
        return (f"simulated iteration {self.iteration_time * 1e3:.3f} ms, {self.bytes_moved / 1e6:.2f} MB moved"
                f"{across}, device busy {busy}")


class MemoryOverflow(ShardwiseError, RuntimeError):
    """The plan needs more memory on some device than it has."""


def simulate(plan: Plan, check_memory: bool = True, engine: str = "c", costs: Any = None,
             schedule: Any = "fifo", fill_outputs: float | None = None, swap: Any = None,
             iterations: int = 1, ranks: Any = None, rank_link: tuple[float, float] | None = None,
             rings: str = "auto") -> SimResult:
    """Replay one training iteration of ``plan`` as the native runtime runs it; raises
    :class:`MemoryOverflow` naming every device whose arena (the memory plan the runtime
    allocates, :func:`shardwise.memory_plan`) exceeds its memory when ``check_memory``.  ``engine``: "c", the one engine (kept as an argument for callers that
    name it).  ``costs``: a :class:`~shardwise.planning.profile.Profile` of measured times (compute,
    bookkeeping rates and copy bandwidth) instead of the roofline model; its per-step overhead
    is added to the iteration time.  By default the costs the plan was searched with
    (``plan.costs``, None for the roofline model); ``costs="roofline"`` forces the model.
    ``SimResult.costs_used`` says which were used.  ``schedule``: "fifo" (one stream per
    device), "critical_path" (``sw.schedule(plan)`` with the same costs) or a Schedule: tasks on
    its streams, and wherever ready tasks wait for one resource (a device, a thread's core, a
    link) the one of the higher stream priority first.  On a GPU (a preset with
    ``fill_outputs``) the ready kernels of its streams run at once, sharing its compute: each
    fills (output elements / ``fill_outputs``) of it at most, handed out by stream priority, and
    runs slower where it gets less; ``fill_outputs`` overrides the presets' (a sensitivity
    knob; 0: every device runs one kernel at a time).  With one stream per device (fifo)
    nothing changes.  CPU workers run one task at a time, as the CPU backend's threads do.
    ``swap``: a :class:`~shardwise.iteration.swap.SwapPlan` of ``plan``: its swap tasks replayed too, each
    holding its device's host copy engine of its direction (a device-to-host and a host-to-device
    one per device) for bytes / ``Device.host_bandwidth``; memory is then checked against the
    swapped arenas.  ``iterations`` (1 .. 8): with more than one, that many iterations also run
    back to back with no barrier between them (layer i of the next forward waits for layer i's
    update and for the bytes it takes over, not for the whole step: docs/scheduling.md), and
    ``iteration_time`` is the time each iteration after the first adds, (makespan of them all -
    one iteration's) / (iterations - 1); the events, the memory and the rest are those of one
    iteration (not combined with ``swap``).

    ``rings``: how the ring all-reduces are lowered: "auto" (the default) fuses them on machines
    of more than ``FUSED_RINGS_ABOVE`` (16) devices, one task per ring link (docs/simulator.md,
    "Large machines"), and keeps every chunk otherwise; "chunked" and "fused" force either.  A
    schedule other than fifo and a swap plan are made on the chunked graph, which they then use.

    ``ranks``: the processes of an MPI job running the plan.  None: one process (as without
    it); an int k: the devices in contiguous blocks over k ranks
    (:func:`shardwise.distributed.rank_of_device`); or a list of one rank per device.  A copy
    between devices of different ranks is then an MPI message, timed by the rank link:
    ``rank_link=(bandwidth bytes/s, latency s)`` if given, else the costs' ``rank_bandwidth``
    and ``rank_latency`` (a profile measured under MPI: ``sw.profile(..., comm=comm)``), else
    the same copy inside one process (the costs' ``copy_bandwidth``, else the route's
    bandwidth: for ``DeviceGraph.cpu``, memory bandwidth) with no latency.  ``SimResult.ranks``
    and ``SimResult.rank_bytes`` ({"sent": [...], "received": [...]}: bytes per rank) report
    them.  ConfigError for ranks that leave a rank without a device."""
    tg = None
    if isinstance(plan, TaskGraph):   # lowered once already: its schedule and swap plan come with it
        if (schedule != "fifo" and schedule is not plan.schedule) or (swap is not None and swap is not plan.swap):
            raise ConfigError("a task graph carries its own schedule and swap plan: lower the plan with them "
                              "(sw.lower(plan, schedule=..., swap=...)) instead of passing them here")
        tg = plan
        handle_of(tg)
        if tg.ranks is not None:   # its sends and receives carry no link time of their own
            raise ConfigError("this task graph is split over ranks (sw.lower(plan, ranks=...)): simulate the plan "
                              "with sw.simulate(plan, ranks=...), which times the copies between ranks on the "
                              "rank link")
        plan, schedule, swap = tg.plan, tg.schedule or "fifo", tg.swap
    if isinstance(iterations, bool) or not isinstance(iterations, int) or not 1 <= iterations <= 8:
        raise ConfigError(f"iterations must be an int in 1 .. 8, got {iterations!r}")
    if iterations > 1 and swap is not None:
        raise ConfigError("iterations back to back are not simulated with a swap plan: pass one of them")
    if engine != "c":
        raise ConfigError(f"unknown simulation engine {engine!r}: the simulator has one engine, 'c' "
                          "(the Python engine was removed with the interpreter models; tests/sim_oracle.py "
                          "holds an independent Python replay for the tests)")
    costs = resolve_costs(plan, costs)
    rank = rank_list(len(plan.devices), ranks)
    extra: dict[str, Any] = _rank_options(rank, costs, rank_link)
    sched = as_schedule(plan, schedule, costs) if tg is None else tg.schedule
    devices = plan.devices
    fill = device_fill(devices)
    if fill_outputs is not None:
        if isinstance(fill_outputs, bool) or not isinstance(fill_outputs, (int, float)) or \
                not (np.isfinite(fill_outputs) and fill_outputs >= 0):
            raise ConfigError(f"fill_outputs must be a number >= 0 (0: one kernel at a time), got {fill_outputs!r}")
        fill = np.where(fill > 0, float(fill_outputs), 0.0)
    state = None
    if swap is not None:

        # a SwapPlan (shardwise.iteration.swap, which uses this module: its class is not imported here)
        if type(swap).__name__ != "SwapPlan" or not callable(getattr(swap, "spec", None)):
            raise TypeError(f"swap must be a SwapPlan (sw.swap_plan(plan, budget)) or None, got {type(swap).__name__}")
        swap.check(plan)
        if sched is not None:
            raise ConfigError("a swap plan runs on one compute stream per device: simulate it with schedule='fifo'")
        state = swap.optimizer_state
    if tg is not None:
        handle = tg.handle
    else:   # lowered once for both replays below
        handle = lowered(plan, state or 1, streams=sched.stream_arrays() if sched is not None else None,
                         swap=swap.spec() if swap is not None else None,
                         recompute=recompute_ops(plan, swap.recompute or None) if swap is not None else None,
                         rings=_rings_with(plan, rings, sched, swap))
    m = _machine(devices, handle)
    if swap is not None:
        extra.update(host_bw=host_bandwidths(plan), host_res=m.nres)
    r = _replay(handle, plan, costs, m, nres=m.nres + 2 * len(devices), dev_fill=fill if fill.any() else None,
                **extra)
    memory = {d: int(x) for d, x in enumerate(r["arena"])}   # the memory plan's arenas: what the runtime allocates
    if check_memory:
        _check_memory(plan, memory)
    total = float(r["iteration_time"]) + _measured(costs, "step_overhead")
    if iterations > 1:
        many = _replay(handle, plan, costs, m, dev_fill=fill if fill.any() else None, iterations=iterations,
                       **_rank_options(rank, costs, rank_link))
        total = (float(many["iteration_time"]) - float(r["iteration_time"])) / (iterations - 1) + \
            _measured(costs, "step_overhead")
    busy = {d: (float(b) / total if total > 0 else 0.0) for d, b in enumerate(r["busy"])}
    if sched is not None:
        stream, sdev, sprio = sched.stream_arrays()
    else:   # one stream per device
        stream = r["device"].astype(np.int32)
        sdev, sprio = np.arange(len(devices), dtype=np.int32), np.zeros(len(devices), np.int32)

    def name(res: int) -> str:   # after the machine's resources: each device's host copy engines
        if res < m.nres:
            return m.name(res)
        d, into = divmod(res - m.nres, 2)
        return f"host {d} {'in' if into else 'out'}"

    return SimResult(plan, total, int(r["bytes_moved"]), busy, lambda: _events_from(plan, r, name), memory,
                     tasks=len(r["kind"]), costs_used=describe_costs(costs),
                     lanes=(stream, sdev, sprio, r["dep_ptr"], r["deps"]), ranks=rank,
                     rank_bytes=_rank_bytes(r, rank), task_times=(r["kind"], r["op"], r["start"], r["duration"]))


def _rings_with(plan: Plan, rings: str, sched: Any, swap: Any) -> str:
    """``rings`` for a replay with a schedule's streams or a swap plan, which were made on the
    chunked graph (their task and buffer ids are its): "auto" is chunked there, and "fused" a
    ConfigError."""
    detail = ring_detail(plan, rings)
    if sched is None and swap is None:
        return detail
    if rings == "fused":
        raise ConfigError("a schedule's streams and a swap plan are made on the graph with its rings chunked: "
                          "simulate them with rings='chunked' (or 'auto'), or without them")
    return "chunked"


def rank_list(ndev: int, ranks: Any) -> list[int] | None:
    """The rank of each of ``ndev`` devices that ``ranks`` says (None: one process, None back;
    an int: contiguous blocks; a sequence: one rank per device, every rank 0 .. max running at
    least one device); ConfigError naming what is wrong."""
    if ranks is None:
        return None
    if isinstance(ranks, (int, np.integer)) and not isinstance(ranks, bool):
        return rank_of_device(ndev, int(ranks))
    if isinstance(ranks, (str, bytes, bool)) or not hasattr(ranks, "__len__"):
        raise ConfigError(f"ranks must be None, an int (devices in contiguous blocks) or one rank per device, "
                          f"got {ranks!r}")
    out = list(ranks)
    if len(out) != ndev:
        raise ConfigError(f"ranks lists {len(out)} ranks for a plan on {ndev} devices: give one rank per device")
    for d, r in enumerate(out):
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
            raise ConfigError(f"ranks[{d}] (device {d}'s rank) must be an int >= 0, got {r!r}")
    out = [int(r) for r in out]
    idle = sorted(set(range(max(out) + 1)) - set(out))
    if idle:
        raise ConfigError(f"rank{'s' if len(idle) > 1 else ''} {', '.join(map(str, idle))} would run no device "
                          f"(ranks {out}): every rank 0 .. {max(out)} needs at least one of the plan's {ndev} devices")
    return out


def _rank_options(rank: list[int] | None, costs: Any, rank_link: tuple[float, float] | None) -> dict[str, Any]:
    """The C engine's arguments for ranks: the rank per device and the rank link (bytes/s,
    0: as in one process; seconds per message)."""
    if rank_link is not None:
        try:
            bw, latency = (float(x) for x in rank_link)
        except (TypeError, ValueError):
            raise ConfigError(f"rank_link must be (bandwidth bytes/s, latency s), got {rank_link!r}") from None
        if not (np.isfinite(bw) and bw > 0 and np.isfinite(latency) and latency >= 0):
            raise ConfigError(f"rank_link needs a finite bandwidth > 0 and latency >= 0, got {rank_link!r}")
    else:
        bw, latency = _measured(costs, "rank_bandwidth"), _measured(costs, "rank_latency")
    if rank is None or len(set(rank)) < 2:
        return {}
    return {"rank": np.asarray(rank, np.int32), "rank_bandwidth": bw, "rank_latency": latency}


def _rank_bytes(r: dict, rank: list[int] | None) -> dict[str, list[int]]:
    """Bytes of the replayed copies between devices of different ranks, per rank."""
    nranks = max(rank) + 1 if rank is not None else 1
    sent, received = [0] * nranks, [0] * nranks
    if rank is not None and nranks > 1:
        rk = np.asarray(rank, np.int64)
        src, dst = r["src_device"].astype(np.int64), r["device"].astype(np.int64)
        copy = np.isin(r["kind"], [_core.TASK_KINDS.index("copy"), _core.TASK_KINDS.index("ring")]) & \
            (src >= 0) & (src != dst)
        src, dst, nbytes = src[copy], dst[copy], r["plan_nbytes"][copy].astype(np.float64)   # the plan's bytes
        cross = rk[src] != rk[dst]
        sent = np.bincount(rk[src[cross]], nbytes[cross], minlength=nranks).tolist()
        received = np.bincount(rk[dst[cross]], nbytes[cross], minlength=nranks).tolist()
    return {"sent": [int(x) for x in sent], "received": [int(x) for x in received]}


def iteration_time(plan: Plan, costs: Any = None, bound: float = float("inf"),
                   rings: str = "auto") -> tuple[float, int, bool]:
    """(seconds, tasks, bounded): the iteration time :func:`simulate` gives ``plan`` (fifo, memory
    unchecked), without building its result.  When a lower bound of the lowered task graph (the
    most seconds any device or link is held, the longest path over the data dependencies) already
    reaches ``bound``, the replay is skipped and (that bound, tasks, True) returned: the plan
    simulates no faster than ``bound``.  A search comparing plans with its best so far needs
    no more.  ``plan`` may be a task graph of one (``sw.lower(plan)``): not lowered again."""
    if isinstance(plan, TaskGraph):
        if plan.ranks is not None:
            raise ConfigError("this task graph is split over ranks: simulate the plan with ranks=... instead")
        handle, plan = handle_of(plan), plan.plan
    else:
        handle = None
    costs = resolve_costs(plan, costs)
    overhead = _measured(costs, "step_overhead")
    handle = handle if handle is not None else lowered(plan, rings=ring_detail(plan, rings))
    r = _replay(handle, plan, costs, _machine(plan.devices, handle), bound=bound - overhead, brief=True)
    return float(r["iteration_time"]) + overhead, int(r["ntasks"]), bool(r["bounded"])


def _replay(handle: Any, plan: Plan, costs: Any, m: "_Machine", nres: int | None = None, **options: Any) -> dict:
    """One replay of the C engine (``TaskGraph.simulate``) on ``plan``'s lowered graph ``handle``
    with ``costs`` (resolved); ``nres``: the resources numbered (the machine's, or more: swap's
    host copy engines)."""
    split, rates, fixed, copy_bw = _cost_arrays(plan, costs)
    return handle.simulate(m.route_ptr, m.route_res, m.nres if nres is None else nres, cores=m.cores, split=split,
                           element_seconds=rates, copy_bandwidth=copy_bw, element_fixed=fixed, **options)


def _check_memory(plan: Plan, memory: dict[int, int]) -> None:
    over = {d: m for d, m in memory.items() if m > plan.devices.devices[d].memory}
    if over:
        text = ", ".join(f"{plan.devices.devices[d].name}: {m / 1e9:.2f} GB > "
                         f"{plan.devices.devices[d].memory / 1e9:.2f} GB" for d, m in sorted(over.items()))
        raise MemoryOverflow(f"plan {plan.name!r} does not fit: {text}")


def _events_from(plan: Plan, r: dict, name: Callable[[int], str]) -> list[SimEvent]:
    """SimEvents of the C engine's arrays (only when someone asks for them)."""
    kinds, phases = _core.TASK_KINDS, _core.PHASES
    op_names = [op.name for op in plan.graph.ops]
    start, end = r["start"].tolist(), (r["start"] + r["duration"]).tolist()
    ptr, res = r["res_ptr"].tolist(), r["res"].tolist()
    kind, phase, op = r["kind"].tolist(), r["phase"].tolist(), r["op"].tolist()
    # bytes as the plan counts them (its precision's; the runtime's are float32)
    nbytes, src, dev = r["plan_nbytes"].tolist(), r["src_device"].tolist(), r["device"].tolist()
    moves = {k for k, name_ in enumerate(kinds) if name_ in _TRANSFER_KINDS}
    return [SimEvent(i, kinds[kind[i]], phases[phase[i]], op_names[op[i]],
                     tuple(name(x) for x in res[ptr[i]:ptr[i + 1]]), start[i], end[i],
                     int(nbytes[i]) if kind[i] in moves else 0, int(src[i]) if kind[i] in moves else None, int(dev[i]))
            for i in range(len(start))]


# the task kinds that move bytes between devices, or between a device and host memory
_TRANSFER_KINDS = frozenset({"copy", "send", "recv", "swap_out", "swap_in", "ring"})
