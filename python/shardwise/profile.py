"""Measuring compute costs on this machine: ``sw.profile(g, d)``.

    prof = sw.profile(g, sw.DeviceGraph.cpu(2))     # measured, cached on disk
    plan = sw.search(g, d, costs=prof)              # t_c from measurements
    sim = sw.simulate(plan, costs=prof)             # task durations from measurements

For every op and every partition (degrees) the search may give it on the
device graph, the forward and backward time of one shard is measured by
running real training steps of the CPU executor, its workers side by side as in
training, each task timed by its thread's CPU clock: in round r every op takes
its r-th partition, so a handful of steps covers all of them.  On CPU workers
the devices are alike, so where a shard runs does not matter.
The profile also measures the executor's interpreter time per task (everything
outside the C kernels, during which a worker holds Python's lock, so workers
take turns at it), the time of a step outside its tasks (checking the batch,
waking the executor's threads), bookkeeping seconds (fixed + per element), the
time a thread blocked on another's task takes to run again, and the bandwidth of
a copy between workers, which the simulator uses.

Profiles are cached as JSON (written atomically) under ``cache_dir`` and are
stamped with the machine (CPU model, core count, OpenBLAS kernels) and the
shardwise version: a profile from another machine or version is refused by
:meth:`Profile.load` and re-measured by :func:`profile` with a message.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .atomic import write_atomically
from .devices import Device, DeviceGraph
from .errors import ShardwiseError
from .graph import Graph, Op
from .plan import OpConfig, Plan
from .problem import CostOptions, dim_names, make_problem, worker_counts

PROFILE_FORMAT = "shardwise-profile"
PROFILE_VERSION = 4
COMPUTE_KINDS = {"forward", "loss", "backward_data", "backward_weight", "bn_stats", "bn_apply",
                 "bn_backward_stats"}


class ProfileMismatch(ShardwiseError, ValueError):
    """A profile measured on another machine, version or graph."""


def machine_fingerprint() -> dict[str, Any]:
    """What a measurement depends on besides the graph."""
    from . import __version__

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "machine": platform.machine(),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "shardwise": __version__}


@dataclass
class Profile:
    """Measured seconds per (op, degrees): forward and backward of one shard (slowest worker)."""

    graph_fingerprint: str
    machine: dict[str, Any]
    times: dict[tuple[str, tuple[int, ...]], tuple[float, float]] = field(default_factory=dict)
    task_overhead: float = 0.0       # seconds the executor spends per task outside kernels
    copy_bandwidth: float = 0.0      # bytes/s of a copy between two workers' buffers
    element_seconds: dict[str, float] = field(default_factory=dict)  # bookkeeping tasks: s per element
    step_overhead: float = 0.0       # seconds of a step outside its tasks (threads woken, batch checked)
    element_fixed: dict[str, float] = field(default_factory=dict)    # bookkeeping tasks: fixed s per task
    wake_latency: float = 0.0        # seconds a thread blocked on an event takes to run once it is set

    # ---- the ComputeCosts protocol (search) and the simulator's split
    def compute_time(self, op: Op, shard_shape: tuple[int, ...], device: Device) -> float | None:
        degrees = tuple(int(s) // int(h) for s, h in zip(op.shape, shard_shape))
        fb = self.times.get((op.name, degrees))
        return None if fb is None else fb[0] + fb[1]

    def split(self, op_name: str, degrees: tuple[int, ...]) -> tuple[float, float] | None:
        return self.times.get((op_name, tuple(degrees)))

    def __len__(self) -> int:
        return len(self.times)

    # ---- files
    def to_dict(self) -> dict[str, Any]:
        return {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "graph": self.graph_fingerprint,
                "machine": self.machine, "task_overhead": self.task_overhead,
                "copy_bandwidth": self.copy_bandwidth, "element_seconds": self.element_seconds,
                "step_overhead": self.step_overhead, "element_fixed": self.element_fixed,
                "wake_latency": self.wake_latency,
                "times": [[name, list(deg), fwd, bwd] for (name, deg), (fwd, bwd) in sorted(self.times.items())]}

    def save(self, path: str | os.PathLike) -> None:
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        write_atomically(path, json.dumps(self.to_dict()).encode())

    @classmethod
    def load(cls, path: str | os.PathLike, graph: Graph) -> "Profile":
        """Read a profile; ProfileMismatch if it was measured for another graph, machine or version."""
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("format") != PROFILE_FORMAT or data.get("version") != PROFILE_VERSION:
                raise ProfileMismatch(f"{path}: not a shardwise profile of version {PROFILE_VERSION}")
            times = {(str(n), tuple(int(x) for x in deg)): (float(fw), float(bw)) for n, deg, fw, bw in data["times"]}
            prof = cls(str(data["graph"]), dict(data["machine"]), times, float(data["task_overhead"]),
                       float(data["copy_bandwidth"]),
                       {str(k): float(v) for k, v in data.get("element_seconds", {}).items()},
                       float(data["step_overhead"]),
                       {str(k): float(v) for k, v in data["element_fixed"].items()}, float(data["wake_latency"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, ProfileMismatch):
                raise
            raise ProfileMismatch(f"{path}: unreadable profile ({type(exc).__name__}: {exc})") from None
        if prof.graph_fingerprint != graph.fingerprint():
            raise ProfileMismatch(f"{path}: measured for another graph")
        here = machine_fingerprint()
        if prof.machine != here:
            diff = {k: (prof.machine.get(k), v) for k, v in here.items() if prof.machine.get(k) != v}
            raise ProfileMismatch(f"{path}: measured on another machine or version: {diff}")
        return prof


def _partitions(graph: Graph, devices: DeviceGraph) -> dict[str, list[tuple[int, ...]]]:
    """The distinct degree vectors the search may give every op (as config.c enumerates them)."""
    problem = make_problem(graph, devices, CostOptions())
    problem.enumerate(np.asarray(worker_counts(len(devices)), dtype=np.int32))
    out: dict[str, list[tuple[int, ...]]] = {}
    for op in graph.ops:
        deg, _ = problem.configs(op.index)
        seen = []
        for row in deg:
            t = tuple(int(x) for x in row)
            if t not in seen:
                seen.append(t)
        out[op.name] = seen
    return out


def _copy_bandwidth(nbytes: int = 64 << 20, repeats: int = 5) -> float:
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def _wake_latency(round_trips: int = 400) -> float:
    """Seconds from setting a ``threading.Event`` to the thread blocked on it running again:
    half the median round trip of two threads waking each other, the way the executor's
    threads wait for each other's tasks."""
    import threading

    ping, pong = threading.Event(), threading.Event()

    def other() -> None:
        for _ in range(round_trips):
            ping.wait()
            ping.clear()
            pong.set()

    thread = threading.Thread(target=other, name="shardwise wake probe", daemon=True)
    thread.start()
    trips = []
    for _ in range(round_trips):
        t0 = time.perf_counter()
        ping.set()
        pong.wait()
        pong.clear()
        trips.append(time.perf_counter() - t0)
    thread.join()
    return statistics.median(trips) / 2


class _KernelClock:
    """Times every call into the C extension while active (the executor's kernels release the
    interpreter lock inside them; everything else a task does holds it)."""

    SKIP = {"simulate_tasks", "search_tables"}

    def __init__(self) -> None:
        from . import _core

        self.core = _core
        self.seconds = 0.0
        self.saved: dict[str, Any] = {}

    def __enter__(self) -> "_KernelClock":
        for name, fn in vars(self.core).items():
            if callable(fn) and not isinstance(fn, type) and not name.startswith("_") and name not in self.SKIP:
                self.saved[name] = fn
                setattr(self.core, name, self._timed(fn))
        return self

    def _timed(self, fn):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
        return call

    def __exit__(self, *exc: Any) -> None:
        for name, fn in self.saved.items():
            setattr(self.core, name, fn)


def _measure_round(graph: Graph, devices: DeviceGraph, configs: dict[str, OpConfig], repeats: int):
    """One plan, measured.  Returns per (op, worker) forward and backward seconds, the
    interpreter time per task, per bookkeeping kind the (seconds, elements) of each of its
    tasks, and the step's time outside its tasks.

    Shards are timed the way training runs them: ``repeats`` real ``Trainer.step`` calls on
    the executor's threads (at most one per core, each running its devices in program
    order), every task by its thread's CPU clock.  The CPU clock leaves out the time a
    thread waits for the interpreter lock or for a core (the simulator's ``interpreter``
    and ``core`` resources count those) but keeps what running side by side costs: on the
    2-core test machine the scaled ResNet-18's kernels took 5-40% more CPU time with the
    workers side by side than one at a time (shared caches and memory bandwidth), and the
    simulator had underestimated 2 and 4 workers by 15-25%.  (Timing the side-by-side
    tasks by the wall clock instead was tried when every worker had its own thread: with
    more workers than cores each task's time then included the others' turns, which the
    simulator's shared cores count again.)

    The interpreter time per task is measured with the tasks run one at a time (no thread
    waits for the lock then): a step's time outside the C kernels over its task count."""
    from .train import SGD, Trainer

    plan = Plan(graph, devices, configs, name="profile")
    trainer = Trainer(graph, plan, optimizer=SGD(lr=0.0))
    ex = trainer.executor
    current: dict[tuple[str, int, str], float] = {}          # (op, worker, fwd/bwd) -> CPU seconds
    per_element: dict[str, list[tuple[float, int]]] = {}     # kind -> (CPU seconds, elements) per task
    spans: list[tuple[float, float]] = []                    # (start, end) wall clock of every task
    for kind in {t.kind for t in ex.tg.tasks}:
        original = getattr(ex, "do_" + kind)

        def timed(task, original=original):
            t0, c0 = time.perf_counter(), time.thread_time()
            original(task)
            seconds = time.thread_time() - c0
            spans.append((t0, time.perf_counter()))
            if task.kind in COMPUTE_KINDS:
                key = (task.op, task.worker, "fwd" if task.phase == "forward" else "bwd")
                current[key] = current.get(key, 0.0) + seconds
            elif task.kind in BOOKKEEPING_KINDS:
                elements = _task_elements(ex.tg, task)
                if elements:
                    per_element.setdefault(task.kind, []).append((seconds, elements))
        setattr(ex, "do_" + kind, timed)
    images, labels = trainer._check_batch(*_random_batch(trainer, 0))
    ex.run(images, labels, optimizer=trainer.optimizer, threads=False)   # warm-up: first-touch allocations
    trainer.step(images, labels)                                          # ... and the worker threads
    dispatch = []
    for _ in range(repeats):
        with _KernelClock() as kernels:
            t0 = time.perf_counter()
            ex.run(images, labels, optimizer=trainer.optimizer, threads=False)
            total = time.perf_counter() - t0
        dispatch.append((total - kernels.seconds) / len(ex.tg.tasks))
    fwd: dict[tuple[str, int], list[float]] = {}
    bwd: dict[tuple[str, int], list[float]] = {}
    per_element.clear()
    outside = []
    for _ in range(repeats):
        current.clear()
        spans.clear()
        t0 = time.perf_counter()
        trainer.step(images, labels)
        total = time.perf_counter() - t0
        # checking the batch, waking the worker threads, collecting them
        outside.append(total - (max(e for _, e in spans) - min(s for s, _ in spans)))
        for (op, worker, which), seconds in current.items():
            (fwd if which == "fwd" else bwd).setdefault((op, worker), []).append(seconds)
    return fwd, bwd, statistics.median(dispatch), per_element, max(0.0, statistics.median(outside))


def _random_batch(trainer, seed: int):
    """Random inputs and labels of the trainer's batch: the one input's array, or for several
    input ops (an unrolled RNN) a dict {name: array}, as ``Trainer.step`` takes them."""
    rng = np.random.default_rng(seed)
    xs = {op.name: rng.standard_normal(op.shape).astype(np.float32) for op in trainer.inputs}
    y = rng.integers(0, trainer.loss_ops[-1].shape[1], trainer.batch)
    return (xs if len(xs) > 1 else xs[trainer.input.name]), y


def fit_line(samples: list[tuple[float, int]]) -> tuple[float, float]:
    """(fixed seconds, seconds per element) of ``seconds = fixed + rate * elements`` over
    (seconds, elements) samples, least squares, neither negative.

    A bookkeeping task costs its interpreter time plus its memory traffic: one rate alone
    (a median of per-task ratios) let the fixed cost of tiny tasks (a bias update) inflate
    the rate of the big ones ~30x, and the per-task dispatch time added on top counted
    the interpreter time twice."""
    seconds = np.array([s for s, _ in samples], np.float64)
    elements = np.array([e for _, e in samples], np.float64)
    if len(samples) == 0 or not elements.any():
        return (float(seconds.mean()) if len(samples) else 0.0), 0.0
    if np.ptp(elements) > 0:
        fixed, rate = np.linalg.lstsq(np.stack([np.ones_like(elements), elements], 1), seconds, rcond=None)[0]
        if fixed >= 0 and rate >= 0:
            return float(fixed), float(rate)
        if rate < 0:
            return float(seconds.mean()), 0.0
    return 0.0, float(seconds @ elements / (elements @ elements))   # through the origin


BOOKKEEPING_KINDS = ("copy", "accumulate", "reduce", "stats_reduce", "update")


def _task_elements(tg, task) -> int:
    """Elements a bookkeeping task moves: its box, or its output buffer's size."""
    from .lower import volume

    if task.box is not None:
        return volume(task.box)
    return tg.buffers[task.writes[0]].elements if task.writes else 0


def profile(graph: Graph, devices: DeviceGraph, repeats: int = 3, cache_dir: str | None = None,
            progress: bool = False) -> Profile:
    """Measure forward and backward times of every op under every partition the search
    may choose on ``devices``, with the CPU kernels of this machine.  Cached in
    ``cache_dir`` (default ``~/.cache/shardwise``); a cached profile from another
    machine or version is measured again, with a message on stderr."""
    cache_dir = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "shardwise")
    path = os.path.join(cache_dir, f"profile-{graph.fingerprint()}-{len(devices)}.json")
    if os.path.exists(path):
        try:
            return Profile.load(path, graph)
        except ProfileMismatch as exc:
            print(f"shardwise: measuring again: {exc}", file=sys.stderr)
    parts = _partitions(graph, devices)
    rounds = max(len(v) for v in parts.values())
    prof = Profile(graph.fingerprint(), machine_fingerprint())
    overheads, step_overheads = [], []
    samples: dict[str, list[tuple[float, int]]] = {}   # bookkeeping kind -> (seconds, elements) of all rounds
    for r in range(rounds):
        configs = {}
        for op in graph.ops:
            options = parts[op.name]
            degrees = options[r % len(options)]
            configs[op.name] = OpConfig(dim_names(len(op.shape)), degrees, tuple(range(int(np.prod(degrees)))))
        fwd, bwd, dispatch, round_samples, outside = _measure_round(graph, devices, configs, repeats)
        overheads.append(dispatch)
        step_overheads.append(outside)
        for kind, pairs in round_samples.items():
            samples.setdefault(kind, []).extend(pairs)
        for op in graph.ops:
            degrees = configs[op.name].degrees
            workers = range(configs[op.name].workers)
            f = max(statistics.median(fwd.get((op.name, w), [0.0])) for w in workers)
            b = max(statistics.median(bwd.get((op.name, w), [0.0])) for w in workers)
            prof.times.setdefault((op.name, degrees), (f, b))
        if progress:
            print(f"\r  [shardwise] profiling round {r + 1}/{rounds}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    prof.task_overhead = statistics.median(overheads)
    prof.step_overhead = statistics.median(step_overheads)
    for kind, pairs in samples.items():
        prof.element_fixed[kind], prof.element_seconds[kind] = fit_line(pairs)
    prof.copy_bandwidth = _copy_bandwidth()
    prof.wake_latency = _wake_latency()
    prof.save(path)
    return prof


def measured_step_time(graph: Graph, plan: Plan, steps: int = 5, seed: int = 0) -> float:
    """Median seconds of ``steps`` training steps of ``plan`` on the CPU executor (random
    data, after one warm-up step): the time ``sw.simulate(plan, costs=profile)`` estimates."""
    from .train import Trainer

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    trainer = Trainer(graph, plan)
    x, y = _random_batch(trainer, seed)
    trainer.step(x, y)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step(x, y)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
