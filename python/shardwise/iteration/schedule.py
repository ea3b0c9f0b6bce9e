"""Critical-path schedules: priorities and streams as annotations on the task graph.

    sched = sw.schedule(plan, policy="critical_path")   # or "fifo": the baseline
    sched.priorities[i]     # task i: layer path, path priority, sub-task, priority, stream
    sched.streams[d]        # device d's streams, most urgent first (one per priority class)
    sched.paths, sched.blocks, sched.levels
    print(sched.summary())

The analysis of TurboDL (Jin et al., "TurboDL: Improving the CNN Training on GPU
With Fine-Grained Multi-Streaming Scheduling", section 2.4 and Algorithm 1), done
in C over the one task graph of :func:`shardwise.iteration.lower` (csrc/graph/schedule_paths.c,
csrc/graph/schedule.c): the network is cut into layer blocks from a fork layer to a
merge layer; the layer paths inside a block are ranked by their distance, the
summed dA (``backward_data``) time of their layers from the cost model (the
roofline, or a profile's measured times with ``costs=``), the longest first;
every task gets its layer path's priority (``-rank``: 0 on the critical path)
less ``alpha`` for a weight's gradient (dW) or ``beta`` for a bias's (dB); a
layer's gradient synchronization and update rank below all of them by reuse
distance (the layer the next forward needs first goes first); a device gets one
stream per distinct priority of its tasks.
docs/scheduling.md describes how it maps onto the task graph and how the
runtime reads it (``sw.Trainer(g, plan, schedule=...)``: every task on its
stream, the CPU backend taking the most urgent ready stream first).  Higher
priorities run first.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardwise import _core
from shardwise.errors import ConfigError, ProfileMismatch
from shardwise.iteration.sim_costs import _measured_split
from shardwise.graph import Graph
from shardwise.iteration.lower import SCHEDULE_PASSES, TaskGraph, handle_of, lowered
from shardwise.plan import Plan
from shardwise.planning.problem import make_problem

POLICIES = tuple(_core.SCHED_POLICIES)    # ("fifo", "critical_path")
SUBTASKS = tuple(_core.SUBTASKS)          # ("forward", "dA", "dW", "dB", "sync")


@dataclass(frozen=True)
class TaskPriority:
    """The schedule's annotation of one task."""

    task: int
    layer_path: int        # LayerPath id of the task's op; -1 for sources (inputs, parameters)
    path_priority: int     # its layer path's priority: -rank (0: a longest path); 0 under fifo
    subtask: str           # "forward", "dA", "dW", "dB" (Algorithm 1's sub-task type) or "sync"
    priority: int          # path priority less alpha (dW) or beta (dB); sync: sync_floor - reuse rank;
                           # higher runs first
    stream: int            # Stream id (Schedule.streams)


@dataclass(frozen=True)
class Stream:
    """One stream of a device: the tasks of one priority, run in task-id order."""

    id: int
    device: int
    priority: int
    tasks: int             # how many tasks it runs


@dataclass(frozen=True)
class LayerPath:
    """Layers of one path of a block (path 0: the network's critical path, through every block)."""

    id: int
    block: int             # -1 for path 0
    rank: int              # distinct longer distances in its block (0: a longest path)
    distance: float        # seconds of dA: fork to merge through this path (path 0: first layer to last)
    ops: tuple[str, ...]   # the layers that took this path's priority (each layer is on one path)

    @property
    def priority(self) -> int:
        return -self.rank


@dataclass(frozen=True)
class LayerBlock:
    """The layers between a fork and a merge layer (None: the start / end of the graph)."""

    id: int
    fork: str | None
    merge: str | None
    ops: tuple[str, ...]     # the layers inside, fork and merge excluded
    paths: tuple[int, ...]   # LayerPath ids: 0 (its longest path's layers are on path 0), then the rest
    distance: float          # its longest path's dA seconds, fork and merge included


def _layers(graph: Graph, r: dict[str, np.ndarray]) -> tuple[list[LayerBlock], list[LayerPath]]:
    """Blocks and paths of the C analysis's arrays."""
    names = [op.name for op in graph.ops]
    op_path, op_block = r["op_path"].tolist(), r["op_block"].tolist()
    paths = [LayerPath(p, int(b), int(k), float(dist), tuple(n for n, q in zip(names, op_path) if q == p))
             for p, (b, k, dist) in enumerate(zip(r["path_block"], r["path_rank"], r["path_distance"]))]
    blocks = []
    for b, (fork, merge, dist) in enumerate(zip(r["block_fork"].tolist(), r["block_merge"].tolist(),
                                                r["block_distance"].tolist())):
        ops = tuple(n for n, q in zip(names, op_block) if q == b)
        own = tuple(p.id for p in paths if p.block == b)
        blocks.append(LayerBlock(b, names[fork] if fork >= 0 else None, names[merge] if merge >= 0 else None, ops,
                                 (0,) + own, dist))
    return blocks, paths


@dataclass
class Schedule:
    """Priorities and streams of every task of one training iteration of ``plan``."""

    plan: Plan
    policy: str
    alpha: int               # the offsets used (0 under fifo)
    beta: int
    levels: int              # path priority levels: 1 + the highest rank of any path
    sync_floor: int          # sync priority of the first layer with weights (layer k's: sync_floor - k)
    priorities: list[TaskPriority]
    streams: dict[int, list[Stream]]
    paths: list[LayerPath]
    blocks: list[LayerBlock]
    dA: dict[str, float]     # dA seconds of every op (its slowest worker's backward_data sum)
    arrays: dict[str, np.ndarray] = field(repr=False)   # the C arrays, one entry per task / stream / op

    def check(self, plan: Plan) -> None:
        """ConfigError unless this schedule was made for ``plan`` (same graph, devices and configurations)."""
        if plan is self.plan:
            return
        if not isinstance(plan, Plan):
            raise ConfigError(f"a schedule is checked against a Plan, got {type(plan).__name__}")
        if plan.graph.fingerprint() != self.plan.graph.fingerprint():
            raise ConfigError(f"the schedule was made for a plan of graph {self.plan.graph.name!r}, "
                              f"not of {plan.graph.name!r}")
        if plan.devices.fingerprint() != self.plan.devices.fingerprint():
            raise ConfigError(f"the schedule was made for devices {self.plan.devices.name!r}, "
                              f"not {plan.devices.name!r}")
        differ = [n for n, c in plan.configs.items() if self.plan.configs[n] != c]
        if differ:
            raise ConfigError(f"the schedule was made for plan {self.plan.name!r}, whose configurations of "
                              f"{differ[:3]} differ from plan {plan.name!r}'s")

    def stream_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(stream per task, device per stream, priority per stream) as int32 arrays: what the
        runtime, its order and its memory plan take (``streams=`` of the core's bindings)."""
        a = self.arrays
        return tuple(np.ascontiguousarray(a[k], np.int32) for k in ("stream", "stream_device", "stream_priority"))

    def summary(self) -> str:
        """Blocks, paths and streams in a few lines."""
        lines = [f"{self.policy} schedule of {self.plan.name!r}: {len(self.priorities)} tasks, "
                 f"{len(self.blocks)} blocks, {len(self.paths)} layer paths, {self.levels} path levels, "
                 f"alpha {self.alpha}, beta {self.beta}",
                 f"critical path: {len(self.paths[0].ops)} layers, {self.paths[0].distance * 1e3:.3f} ms of dA"]
        for dev, streams in sorted(self.streams.items()):
            text = ", ".join(f"{s.priority} ({s.tasks} tasks)" for s in streams)
            lines.append(f"device {dev}: {len(streams)} streams, priorities {text}")
        return "\n".join(lines)


def _split(plan: Plan, costs: object) -> np.ndarray | None:
    """The measured (forward, backward) seconds per op of a profile, NaN where not measured."""
    if costs is None:
        return None
    fingerprint = getattr(costs, "graph_fingerprint", None)
    if fingerprint is not None and fingerprint != plan.graph.fingerprint():
        raise ProfileMismatch(f"the costs were measured for another graph, not {plan.graph.name!r}")
    if not callable(getattr(costs, "split", None)):
        raise ConfigError(f"costs must be a Profile (measured times), got {type(costs).__name__}")
    split = np.full((len(plan.graph.ops), 2), np.nan)
    for op in plan.graph.ops:
        measured = _measured_split(plan, costs, op.name)
        if measured is not None:
            split[op.index] = measured
    return split


def _offset(value: object, name: str) -> int:
    """Algorithm 1's offset as the core takes it: -1 for the default, else an int >= 0."""
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0 (or None: the default), got {value!r}")
    return int(value)


def schedule(plan: Plan, policy: str = "critical_path", costs: object = None, alpha: int | None = None,
             beta: int | None = None) -> Schedule:
    """Priorities and streams of every task of one training iteration of ``plan``.

    ``plan``: a Plan (lowered once here), or a task graph of one (``sw.lower(plan)``, without a
    swap plan), whose C handle is scheduled without lowering again.  ``policy``:
    "critical_path" (TurboDL's analysis) or "fifo" (the baseline: priority 0
    and one stream per device, tasks in program order).  ``costs``: a
    :class:`~shardwise.planning.profile.Profile` whose measured backward times give the dA
    durations instead of the roofline.  ``alpha`` / ``beta``: Algorithm 1's offsets of dW
    and dB below their path's priority; by default ``levels`` and ``2 * levels``, so every
    parameter gradient ranks below every dA and dB below dW.  A layer's gradient
    synchronization and update ("sync" sub-tasks) rank below all of them, by reuse distance:
    the k-th layer with weights in the forward pass at ``sync_floor - k``, each layer on a
    stream of its own, so it starts once that layer's dW / dB is done."""
    handle = None
    if isinstance(plan, TaskGraph):
        handle, plan = handle_of(plan), plan.plan
    if not isinstance(plan, Plan):
        raise TypeError(f"schedule needs a Plan, got {type(plan).__name__}")
    if policy not in POLICIES:
        raise ConfigError(f"unknown scheduling policy {policy!r}; expected one of {', '.join(map(repr, POLICIES))}")
    a, b = _offset(alpha, "alpha"), _offset(beta, "beta")
    split = _split(plan, costs)
    return _annotate(plan, handle if handle is not None else lowered(plan), policy, a, b, split)


def schedule_on(plan: Plan, handle: object, policy: str, costs: object = None) -> Schedule:
    """The schedule of ``plan`` made on its C task graph ``handle`` (``lowered(plan)``), default offsets."""
    return _annotate(plan, handle, policy, -1, -1, _split(plan, costs))


SCHEDULE_PASSES["critical_path"] = schedule_on   # sw.lower(plan, schedule="critical_path")


def _annotate(plan: Plan, handle: object, policy: str, a: int, b: int, split: np.ndarray | None) -> Schedule:
    """The C schedule pass on ``handle`` as a Schedule."""
    r = handle.schedule(POLICIES.index(policy), a, b, split)
    graph = plan.graph
    priorities = [TaskPriority(i, lp, pp, SUBTASKS[sub], pr, st) for i, (lp, pp, sub, pr, st) in enumerate(zip(
        r["layer_path"].tolist(), r["path_priority"].tolist(), r["subtask"].tolist(), r["priority"].tolist(),
        r["stream"].tolist()))]
    counts = np.bincount(r["stream"], minlength=len(r["stream_device"])).tolist()
    streams: dict[int, list[Stream]] = {d: [] for d in range(len(plan.devices))}
    for s, (dev, prio) in enumerate(zip(r["stream_device"].tolist(), r["stream_priority"].tolist())):
        streams[dev].append(Stream(s, dev, prio, counts[s]))
    blocks, paths = _layers(graph, r)
    dA = {op.name: float(t) for op, t in zip(graph.ops, r["op_da"].tolist())}
    return Schedule(plan, policy, int(r["alpha"]), int(r["beta"]), int(r["levels"]), int(r["sync_floor"]),
                    priorities, streams, paths, blocks, dA, r)


def as_schedule(plan: Plan, value: object, costs: object = None) -> Schedule | None:
    """What a ``schedule=`` argument (of the Trainer, the simulator) means for ``plan``: None for
    "fifo" (one stream per device, program order), ``schedule(plan, costs=costs)`` for
    "critical_path", a Schedule itself once :meth:`Schedule.check` accepts it."""
    if isinstance(value, Schedule):
        value.check(plan)
        return value
    if isinstance(value, str) and value in POLICIES:
        return None if value == "fifo" else schedule(plan, policy=value, costs=costs)
    raise ConfigError(f"schedule must be one of {', '.join(map(repr, POLICIES))} or a Schedule "
                      f"(sw.schedule(plan)), got {value!r}")


def layer_paths(graph: Graph, dA: dict[str, float]) -> tuple[list[LayerBlock], list[LayerPath]]:
    """The path analysis alone, on given dA seconds per op (ops left out: 0): blocks and paths.

    :func:`schedule` runs it on the cost model's dA times; this entry lets a test or a
    what-if study choose them."""
    unknown = [n for n in dA if n not in graph]
    if unknown:
        raise ConfigError(f"no ops named {unknown[:3]} in graph {graph.name!r}")
    from shardwise.machine.devices import DeviceGraph
    from shardwise.planning.problem import CostOptions

    problem = make_problem(graph, DeviceGraph.cpu(1), CostOptions())
    op_da = np.array([float(dA.get(op.name, 0.0)) for op in graph.ops], np.float64)
    return _layers(graph, problem.layer_paths(op_da))
