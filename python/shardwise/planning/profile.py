"""Measuring compute costs on this machine: ``sw.profile(g, d)``.

    prof = sw.profile(g, sw.DeviceGraph.cpu(2))     # measured, cached on disk
    plan = sw.search(g, d, costs=prof)              # t_c from measurements
    sim = sw.simulate(plan, costs=prof)             # task durations from measurements

    # under mpiexec -n 2 (or with comm=): also the link between ranks, for sw.simulate(..., ranks=)
    prof = sw.profile(g, sw.DeviceGraph.cpu(2), comm=sw.distributed.init())
    prof.rank_bandwidth, prof.rank_latency

For every op and every partition (degrees) the search may give it on the
device graph, the forward and backward time of one shard is measured by
running real training steps of the native runtime, its workers side by side as in
training, each task timed by the runtime: in round r every op
takes its r-th partition, so a handful of plans covers all of them, and the plans
take turns step by step.  On CPU workers
the devices are alike, so where a shard runs does not matter.
The profile also measures the time of a step outside its tasks (checking the
batch, waking the runtime's threads), bookkeeping seconds (fixed + per element)
and the bandwidth of a copy between workers, which the simulator uses.  In an MPI job
(``comm=``, or run under mpiexec with 2 or more ranks) rank 0 measures the compute while the
other ranks wait, ranks 0 and 1 measure the link between them by a ping-pong through the comm
layer (:func:`shardwise.distributed.measure_link`: ``rank_bandwidth``, ``rank_latency``), and
every rank returns rank 0's profile.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.atomic import write_atomically
from shardwise.machine.devices import Device, DeviceGraph
from shardwise.errors import ProfileMismatch
from shardwise.version import __version__
from shardwise.graph import Graph, Op
from shardwise.plan import OpConfig, Plan
from shardwise.planning.problem import CostOptions, dim_names, make_problem, worker_counts
from shardwise.progress import ProgressReport, check_progress

PROFILE_FORMAT = "shardwise-profile"
# 7: no per-task overhead or wake latency (the simulator's interpreter models are gone; version 6
# files carried both, measured as 0 by the native runtime).  Other versions are refused.
PROFILE_VERSION = 7
COMPUTE_KINDS = {"forward", "loss", "backward_data", "backward_weight", "bn_stats", "bn_apply",
                 "bn_backward_stats"}


def machine_fingerprint(backend: str = "cpu") -> dict[str, Any]:
    """What a measurement depends on besides the graph: the CPU (and for the CUDA backend the GPU,
    its driver and cuDNN, and whether TF32 is allowed)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    out = {"cpu": model, "cores": os.cpu_count(), "machine": platform.machine(),
           "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "shardwise": __version__}
    if backend == "cuda":
        from shardwise.machine import cuda

        info = cuda.info()
        gpus = cuda.gpus()
        out.update({"backend": "cuda", "gpu": gpus[0].name if gpus else "", "driver": info.get("driver") or "",
                    "cudnn": info.get("cudnn") or "", "tf32": os.environ.get("SHARDWISE_CUDA_TF32", "") == "1"})
    return out


@dataclass
class Profile:
    """Measured seconds per (op, degrees): forward and backward of one shard (slowest worker)."""

    graph_fingerprint: str
    machine: dict[str, Any]
    times: dict[tuple[str, tuple[int, ...]], tuple[float, float]] = field(default_factory=dict)
    copy_bandwidth: float = 0.0      # bytes/s of a copy between two workers' buffers
    element_seconds: dict[str, float] = field(default_factory=dict)  # bookkeeping tasks: s per element
    step_overhead: float = 0.0       # seconds of a step outside its tasks (threads woken, batch checked)
    element_fixed: dict[str, float] = field(default_factory=dict)    # bookkeeping tasks: fixed s per task
    # the link between two ranks of an MPI job, measured through the comm layer (0: not measured):
    # bytes/s and seconds per message of a copy between devices of different ranks (sw.simulate(ranks=))
    rank_bandwidth: float = 0.0
    rank_latency: float = 0.0

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
                "machine": self.machine, "copy_bandwidth": self.copy_bandwidth,
                "element_seconds": self.element_seconds, "step_overhead": self.step_overhead,
                "element_fixed": self.element_fixed,
                "rank_bandwidth": self.rank_bandwidth, "rank_latency": self.rank_latency,
                "times": [[name, list(deg), fwd, bwd] for (name, deg), (fwd, bwd) in sorted(self.times.items())]}

    def save(self, path: str | os.PathLike) -> None:
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        write_atomically(path, json.dumps(self.to_dict()).encode())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Profile":
        """The profile of :meth:`to_dict`'s dict (the format and version unchecked: :meth:`load`
        checks them, and the graph and machine).  A file without the rank link (written before
        it was measured) reads as not measured (0)."""
        times = {(str(n), tuple(int(x) for x in deg)): (float(fw), float(bw)) for n, deg, fw, bw in data["times"]}
        return cls(str(data["graph"]), dict(data["machine"]), times, float(data["copy_bandwidth"]),
                   {str(k): float(v) for k, v in data.get("element_seconds", {}).items()},
                   float(data["step_overhead"]),
                   {str(k): float(v) for k, v in data["element_fixed"].items()},
                   float(data.get("rank_bandwidth", 0.0)), float(data.get("rank_latency", 0.0)))

    @classmethod
    def load(cls, path: str | os.PathLike, graph: Graph, backend: str = "cpu") -> "Profile":
        """Read a profile; ProfileMismatch if it was measured for another graph, machine or version
        (a file of another format version is refused, not converted: :func:`profile` measures
        again; version 6 files held a per-task overhead and a wake latency for simulator models
        that are gone)."""
        try:
            with open(path) as f:
                data = json.load(f)
            if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
                raise ProfileMismatch(f"{path}: not a shardwise profile")
            if data.get("version") != PROFILE_VERSION:
                raise ProfileMismatch(f"{path}: a shardwise profile of version {data.get('version')!r}; this "
                                      f"shardwise reads version {PROFILE_VERSION} only (measure again with sw.profile)")
            prof = cls.from_dict(data)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, ProfileMismatch):
                raise
            raise ProfileMismatch(f"{path}: unreadable profile ({type(exc).__name__}: {exc})") from None
        if prof.graph_fingerprint != graph.fingerprint():
            raise ProfileMismatch(f"{path}: measured for another graph")
        here = machine_fingerprint(backend)
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


def _gpu_copy_bandwidth(prof: Profile, devices: DeviceGraph) -> float:
    """Bytes/s of a copy between two logical devices' buffers on the GPUs: from the timed copy
    tasks (float32 elements), else (one device: no copies) the device graph's first link."""
    rate = prof.element_seconds.get("copy", 0.0)
    if rate > 0:
        return 4.0 / rate
    return float(devices.bandwidth(0, 1)) if len(devices) > 1 else float(devices.devices[0].mem_bandwidth) / 2


class _RoundProbe:
    """One profiling plan (round), set up once and sampled step by step.

    :func:`_measure_rounds` takes the rounds' samples in turns, one step each, so that every
    round is measured across the whole profiling time: on the 2-core test machine the speed
    of two threads side by side changes for seconds at a time, and a round measured in one
    block of steps took that moment's speed with it.

    Shards are timed the way training runs them: real ``Trainer.step`` calls on the native
    runtime, whose worker threads record every task's start and end (``Runtime.task_times``).
    A task's time keeps what running side by side costs (shared caches and memory bandwidth)
    and what the machine takes from a core.  Per op and step the slowest worker's shard is
    kept (a step waits for the slowest)."""

    def __init__(self, graph: Graph, devices: DeviceGraph, configs: dict[str, OpConfig],
                 backend: str = "cpu") -> None:
        from shardwise.train.trainer import SGD, Trainer

        plan = Plan(graph, devices, configs, name="profile")
        self.trainer = Trainer(graph, plan, optimizer=SGD(lr=0.0), backend=backend)
        self.trainer.executor.time_tasks(True)   # GPUs: two timing events per task; CPU: always timed
        self.tg = self.trainer.task_graph
        self.fwd: dict[str, list[float]] = {}       # op -> seconds of its slowest shard, per step
        self.bwd: dict[str, list[float]] = {}
        self.per_element: dict[str, list[tuple[float, int]]] = {}   # kind -> (seconds, elements) per task
        self.outside: list[float] = []                           # seconds of a step outside its tasks
        self.images, self.labels = self.trainer._check_batch(*_random_batch(self.trainer, 0))
        self.trainer.step(self.images, self.labels)     # warm-up: first touches, workspaces

    def sample_step(self) -> None:
        """One training step, every task timed by the runtime."""
        t0 = time.perf_counter()
        self.trainer.step(self.images, self.labels)
        total = time.perf_counter() - t0
        self._record_step(self.trainer.executor.task_times()[0], total)

    def _record_step(self, ns: np.ndarray, total: float) -> None:
        """File the samples of a step of ``total`` seconds whose tasks started and ended at
        ``ns`` (ntasks, 2) nanoseconds."""
        seconds = (ns[:, 1] - ns[:, 0]) * 1e-9
        # checking the batch, waking the worker threads, collecting them
        self.outside.append(max(0.0, total - (ns[:, 1].max() - ns[:, 0].min()) * 1e-9))
        current: dict[tuple[str, int, str], float] = {}
        for task, sec in zip(self.tg.tasks, seconds.tolist()):
            if task.kind in COMPUTE_KINDS:
                key = (task.op, task.worker, "fwd" if task.phase == "forward" else "bwd")
                current[key] = current.get(key, 0.0) + sec
            elif task.kind in BOOKKEEPING_KINDS:
                elements = _task_elements(self.tg, task)
                if elements:
                    self.per_element.setdefault(task.kind, []).append((sec, elements))
        # per op the slowest worker of this step: shards of one op are meant to take equally
        # long, and a step waits for the slowest
        slowest: dict[tuple[str, str], float] = {}
        for (op, _worker, which), sec in current.items():
            slowest[(op, which)] = max(slowest.get((op, which), 0.0), sec)
        for (op, which), sec in slowest.items():
            (self.fwd if which == "fwd" else self.bwd).setdefault(op, []).append(sec)

    def result(self):
        """(fwd, bwd, bookkeeping samples, step overhead)."""
        return self.fwd, self.bwd, self.per_element, max(0.0, statistics.median(self.outside))


def _measure_rounds(graph: Graph, devices: DeviceGraph, rounds: list[dict[str, OpConfig]], repeats: int,
                    progress: bool | str = False, between_steps: Callable[[], None] | None = None,
                    backend: str = "cpu") -> list[tuple]:
    """Measure every round's plan ``repeats`` times, the rounds taking turns step by step
    (:class:`_RoundProbe`), calling ``between_steps`` after every timed step; per round the
    tuple of :meth:`_RoundProbe.result`."""
    with ProgressReport("profile", progress, unit="step") as report:
        t = time.perf_counter()
        probes = []
        for r, configs in enumerate(rounds):
            probes.append(_RoundProbe(graph, devices, configs, backend))
            report.advance(r + 1, len(rounds), "profiling: setting up the plans")
        t = report.stage_since(f"set up {len(rounds)} profiling plans", t)
        for k in range(repeats):
            for r, probe in enumerate(probes):
                probe.sample_step()
                if between_steps is not None:
                    between_steps()
                report.advance(k * len(probes) + r + 1, repeats * len(probes), "profiling: timed steps")
        report.stage_since(f"{repeats} timed steps of each plan", t)
    return [probe.result() for probe in probes]


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

    A bookkeeping task costs a fixed time (the runtime's dispatch, the kernel's setup) plus
    its memory traffic: one rate alone (a median of per-task ratios) let the fixed cost of
    tiny tasks (a bias update) inflate the rate of the big ones ~30x."""
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
    from shardwise.ops.box import volume

    if task.box is not None:
        return volume(task.box)
    return tg.buffers[task.writes[0]].elements if task.writes else 0


def profile(graph: Graph, devices: DeviceGraph, repeats: int = 3, cache_dir: str | None = None,
            progress: bool | str = "auto", between_steps: Callable[[], None] | None = None,
            comm: Any = None, backend: str = "cpu") -> Profile:
    """Measure forward and backward times of every op under every partition the search
    may choose on ``devices``, with the kernels of ``backend``: "cpu" (this machine's CPU
    kernels, timed by the worker threads) or "cuda" (the GPUs of this machine, each task timed
    by CUDA events on its stream: ``devices`` is then a ``DeviceGraph.local_gpus`` graph, or
    any graph whose devices the GPUs can hold).  Cached in
    ``cache_dir`` (default ``~/.cache/shardwise``); a cached profile from another
    machine or version is measured again, with a message on stderr.

    ``repeats``: timed steps of every profiling plan (the plans take turns, step by step).
    ``progress``: "auto" (the default) shows, once profiling has run a second, a bar with an
    ETA (terminals, notebooks) and a line per stage (also in logs); True from the start; False
    nothing.
    ``between_steps``: called after every timed step while measuring (not for a cached
    profile): the calibration benchmark times the executor's own steps there, so that they
    and the profile see this machine in the same seconds.

    ``comm``: the job's communicator (:func:`shardwise.distributed.init`); None: the job's when
    this process was started by mpiexec with 2 or more ranks, else none.  With 2 or more ranks,
    ranks 0 and 1 measure the link between them (:func:`shardwise.distributed.measure_link`,
    every time: it takes a fraction of a second) into ``rank_bandwidth`` and ``rank_latency``;
    rank 0 measures (or reads from its cache) the rest and saves the whole, while the other
    ranks wait for it without a time limit (an exception on rank 0 ends the job through
    sw.distributed.init's hook); every rank returns rank 0's profile."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend must be 'cpu' or 'cuda', got {backend!r}")
    check_progress(progress)
    cache_dir = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "shardwise")
    suffix = "" if backend == "cpu" else f"-{backend}"
    path = os.path.join(cache_dir, f"profile-{graph.fingerprint()}-{len(devices)}{suffix}.json")
    comm = _job_comm(comm)
    if comm is not None and comm.size > 1:
        if backend != "cpu":
            raise ValueError("sw.profile(backend='cuda') measures in one process; call it outside an MPI job")
        return _profile_in_job(comm, path, graph, devices, repeats, progress, between_steps)
    return _profile_here(path, graph, devices, repeats, progress, between_steps, backend)


def _job_comm(comm: Any) -> Any:
    """``comm``, or the job's communicator when a launcher started this process among 2 or more
    ranks (its environment says so: sw.distributed.launcher_size), or None."""
    if comm is not None:
        return comm
    from shardwise import distributed

    said, _ = distributed.launcher_size()
    return distributed.init() if said is not None and said > 1 else None


PROFILE_TAG = 31010   # rank 0's profile to the other ranks: its length (TAG), then its JSON (TAG + 1)


def _profile_in_job(comm: Any, path: str, graph: Graph, devices: DeviceGraph, repeats: int, progress: bool,
                    between_steps: Callable[[], None] | None) -> Profile:
    """profile() on every rank of a job: the link first (ranks 0 and 1, while every rank is
    idle), then rank 0 alone measures the rest and sends the profile to the others."""
    from shardwise.distributed.link import measure_link

    bandwidth, latency = measure_link(comm)
    if comm.rank == 0:
        prof = _profile_here(path, graph, devices, repeats, progress, between_steps)
        prof.rank_bandwidth, prof.rank_latency = bandwidth, latency
        prof.save(path)
        payload = np.frombuffer(json.dumps(prof.to_dict()).encode(), np.uint8)
        for r in range(1, comm.size):
            comm.send_bytes(np.array([payload.size], np.int64), r, PROFILE_TAG)
            comm.send_bytes(payload, r, PROFILE_TAG + 1)
        return prof
    n = np.zeros(1, np.int64)
    comm.recv_bytes(n, 0, PROFILE_TAG, timeout=-1)   # as long as rank 0 measures
    data = comm.recv_bytes(int(n[0]), 0, PROFILE_TAG + 1)
    return Profile.from_dict(json.loads(bytes(data)))


def _profile_here(path: str, graph: Graph, devices: DeviceGraph, repeats: int, progress: bool,
                  between_steps: Callable[[], None] | None, backend: str = "cpu") -> Profile:
    """profile() in this process: the cached profile at ``path``, or measured and saved there."""
    if os.path.exists(path):
        try:
            return Profile.load(path, graph, backend)
        except ProfileMismatch as exc:
            print(f"shardwise: measuring again: {exc}", file=sys.stderr)
    parts = _partitions(graph, devices)
    rounds = max(len(v) for v in parts.values())
    prof = Profile(graph.fingerprint(), machine_fingerprint(backend))
    step_overheads = []
    samples: dict[str, list[tuple[float, int]]] = {}   # bookkeeping kind -> (seconds, elements) of all rounds
    plans = []
    for r in range(rounds):
        configs = {}
        for op in graph.ops:
            options = parts[op.name]
            degrees = options[r % len(options)]
            configs[op.name] = OpConfig(dim_names(len(op.shape)), degrees, tuple(range(int(np.prod(degrees)))))
        plans.append(configs)
    for configs, (fwd, bwd, round_samples, outside) in zip(
            plans, _measure_rounds(graph, devices, plans, repeats, progress, between_steps, backend)):
        step_overheads.append(outside)
        for kind, pairs in round_samples.items():
            samples.setdefault(kind, []).extend(pairs)
        for op in graph.ops:
            degrees = configs[op.name].degrees
            f = statistics.median(fwd.get(op.name, [0.0]))
            b = statistics.median(bwd.get(op.name, [0.0]))
            prof.times.setdefault((op.name, degrees), (f, b))
    prof.step_overhead = statistics.median(step_overheads)
    for kind, pairs in samples.items():
        prof.element_fixed[kind], prof.element_seconds[kind] = fit_line(pairs)
    prof.copy_bandwidth = _copy_bandwidth() if backend == "cpu" else _gpu_copy_bandwidth(prof, devices)
    prof.save(path)
    return prof


def measured_step_time(graph: Graph, plan: Plan, steps: int = 5, seed: int = 0, backend: str = "cpu") -> float:
    """Median seconds of ``steps`` training steps of ``plan`` on ``backend`` ("cpu" or "cuda";
    random data, after one warm-up step): the time ``sw.simulate(plan, costs=profile)``
    estimates with a profile measured on the same backend."""
    from shardwise.train.trainer import Trainer

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    trainer = Trainer(graph, plan, backend=backend)
    x, y = _random_batch(trainer, seed)
    trainer.step(x, y)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        trainer.step(x, y)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
