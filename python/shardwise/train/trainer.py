"""Training a plan: ``Trainer`` runs the task graph of every iteration on a backend.

    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), seed=0)
    t = sw.Trainer(g, plan, optimizer=sw.AdamW(lr=sw.lr_schedules.cosine(3e-4, 1000), weight_decay=0.01))
    loss = t.step(images, labels)
    loss = t.step({"x0": x0, "x1": x1, "h0": h0, "c0": c0}, labels)   # a graph with several input ops
    probs = t.eval().predict(x_test)     # eval mode: batch norms use running statistics, no dropout; any sample count
    t.train()                            # back to train mode before further steps

Numerics do not depend on the plan: every plan computes the same network with
the same initialization (a function of the seed and the op names only); only
the order of floating-point sums differs between plans.  Optimizers (SGD, Adam, AdamW)
live in :mod:`shardwise.train.optim`, learning-rate schedules in :mod:`shardwise.train.lr_schedules`,
checkpoints in :mod:`shardwise.train.checkpoint`.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union

import numpy as np

from shardwise import _core
from shardwise.train.checkpoint import CheckpointError, checkpoint_payload, read_checkpoint, write_checkpoint
from shardwise.errors import ConfigError, PrecisionWarning, ShapeError, ShardwiseError
from shardwise.graph import Graph
from shardwise.train.init import init_params
from shardwise.iteration.lower import lower
from shardwise.train.optim import SGD, Adam, AdamW, Optimizer
from shardwise.plan import Plan
from shardwise.train.runtime import NativeExecutor, backends, id_bound, op_attrs
from shardwise.machine import cuda
from shardwise.train.running_stats import RunningStats, check_running, defaults as running_defaults, running_shapes
from shardwise.progress import ProgressReport, check_progress
from shardwise.train import inference

if TYPE_CHECKING:
    from shardwise.iteration.memory import MemoryPlan
    from shardwise.iteration.schedule import Schedule
    from shardwise.iteration.trace import Timeline
    from shardwise.iteration.swap import SwapPlan

# the optimizers and CheckpointError are re-exported: shardwise.train.trainer was their home before
__all__ = ["Trainer", "TrainingError", "TrainerInUseError", "CheckpointError", "Batch", "CPU_KINDS",
           "SGD", "Adam", "AdamW", "Optimizer"]


# Op kinds the CPU backend has kernels for (the op table, csrc/ops.def).
CPU_KINDS = frozenset(_core.CPU_OP_KINDS)

Batch = Union[np.ndarray, Mapping[str, np.ndarray]]
"""The input of a step: one array for a graph with one input op, or {input op name: array}."""


class TrainingError(ShardwiseError, RuntimeError):
    """Training cannot go on: a diverging loss, non-finite values."""


class TrainerInUseError(ShardwiseError, RuntimeError):
    """A Trainer was called while another thread was using it: a Trainer is not thread-safe."""


class Trainer:
    """Trains ``graph`` with ``plan`` on the CPU backend (every device a worker with its own memory),
    or with ``backend="cuda"`` on GPUs (docs/gpu.md).

    Threads: a Trainer's workers share one set of weights, activations and gradients, so one
    thread at a time uses it.  Every public method holds the trainer while it runs.  Those that
    run the model or change it (:meth:`step`, :meth:`fit`, :meth:`loss`, :meth:`forward`,
    :meth:`predict`, :meth:`evaluate`, :meth:`set_weights`, :meth:`train` / :meth:`eval`,
    setting :attr:`steps`, :meth:`save_checkpoint`, :meth:`load_checkpoint`) raise
    :class:`TrainerInUseError` at once when another thread holds it, and change nothing; they
    neither wait nor compute a wrong result.  Those that only read what a step leaves
    (:meth:`get_weights`, :meth:`arena_high_water`, :meth:`memory_per_worker`,
    :meth:`timeline`, :meth:`comm_bytes`) wait for the step in progress to end, so what they
    return is always that of a step boundary (between the steps of :meth:`fit` too).  The rest
    read only what never changes (the plan, the memory plan, :meth:`local_devices`).  Use one
    Trainer per thread to train in parallel.

    ``schedule``: "fifo" (one stream per device, tasks in program order), "critical_path"
    (``sw.schedule(plan)``: TurboDL's prioritized streams, the CPU backend taking the most urgent
    ready task first), a :class:`~shardwise.iteration.schedule.Schedule` of this plan, or "auto"
    (the default): fifo in one process, critical_path for one rank of several, where a rank would
    otherwise hold its gradients' messages back until the other rank's updates come back (measured:
    LeNet-5 on 2 ranks, 9.3-11.2 ms a step under fifo, 6.7-7.3 ms under critical_path).  Weights and
    gradients are bitwise the same under every schedule; fifo stays
    the default until critical_path is measured to help on the CPU (docs/scheduling.md).
    """

    def __init__(self, graph: Graph, plan: Plan, optimizer: Optimizer | None = None, backend: str = "cpu",
                 seed: int = 0, schedule: "str | Schedule" = "auto", workspace_mb: int | None = None,
                 swap: "SwapPlan | None" = None, steps_in_flight: int = 1, comm: Any = None,
                 recompute: Any = None) -> None:
        """``optimizer``: :class:`~shardwise.train.optim.SGD` (the default, lr 0.01),
        :class:`~shardwise.train.optim.Adam` or :class:`~shardwise.train.optim.AdamW`.  Its kind fixes the
        optimizer state every parameter slice keeps (one buffer for SGD, two for Adam), so the
        trainer's task graph is built for it; its settings (lr or schedule, decay) may change
        between steps by assigning another optimizer of the same kind to :attr:`optimizer`.
        ``backend``: "cpu" (threads, one per device) or "cuda" (the plan's devices on this
        machine's GPUs, docs/gpu.md; BackendUnavailableError naming what is missing where it
        cannot run); ``workspace_mb``: each CUDA stream's workspace in MiB (default: twice the largest buffer on a
        device, 64 at least, an eighth of a device's memory at most).
        ``swap``: a :class:`~shardwise.iteration.swap.SwapPlan` of this plan (``sw.swap_plan(plan, budget)``):
        its feature maps go to a host region of their own and back on each device's swap-out and
        swap-in streams, real copies, and each device's arena is the swap plan's, within its budget;
        the numerics are those of training without it (CPU backend, fifo schedule).
        ``recompute``: None, "all" or a set of op names (:func:`shardwise.lower`'s ``recompute``):
        those ops' feature maps are dropped after their forward use and recomputed right before
        the backward pass reads them (docs/memory.md, "Recomputation"), or a RecomputePlan
        (``sw.recompute_plan(plan, budget)``); None: the recomputation ``sw.search(...,
        recompute=True)`` chose for this plan, if any.  The weights are bitwise those of training
        without it (one step at a time, fifo schedule, CPU backend).  With ``swap``: None takes the
        swap plan's own recomputation (a swap plan made on ``sw.lower(plan, recompute=...)``).
        ``steps_in_flight`` (1 .. 8): :meth:`fit` runs that many consecutive steps in one launch
        with no barrier between them: layer j of a step's forward starts as soon as layer j's
        update of the step before is done, while the rest of that step still runs.  Weights and
        losses are bitwise those of the steps one at a time (each parameter's updates and each
        step's sums keep their order); CPU backend, no swap plan (ConfigError otherwise), any
        schedule.  :meth:`step` always runs one step; see :meth:`fit` for what falls back to
        one step at a time.
        ``comm``: the job's communicator (``sw.distributed.init()``) to train as one rank of a
        job of several processes (docs/distributed.md): the plan's devices go to the ranks in
        contiguous blocks (:meth:`local_devices`), each rank runs its devices' tasks and the
        copies between ranks travel as MPI messages; losses and weights are bitwise those of one
        process.  Every rank builds the same Trainer (checked at start-up: WorldMismatchError on
        every rank naming what differs) and calls the same methods in the same order (a step,
        :meth:`get_weights`, :meth:`predict`, checkpoints are collectives).  CPU backend."""
        if optimizer is not None and not isinstance(optimizer, Optimizer):
            raise ConfigError(f"optimizer must be sw.SGD, sw.Adam or sw.AdamW, got {type(optimizer).__name__}")
        if not isinstance(plan, Plan):
            raise ConfigError(f"Trainer needs a Plan, got {type(plan).__name__}")
        if plan.graph is not graph and plan.graph.fingerprint() != graph.fingerprint():
            raise ConfigError(f"the plan was made for graph {plan.graph.name!r}, not {graph.name!r}")
        if backend not in ("cpu", "cuda"):
            raise ConfigError(f"unknown backend {backend!r}; this installation has: "
                              f"{', '.join(map(repr, backends()))}")
        if backend == "cuda" and plan.options.sync == "zero":   # its update kernel takes whole slices
            raise ConfigError("the CUDA backend cannot train a plan with sync='zero' (sharded optimizer state) "
                              "yet; train it on the CPU backend, or with sync='ring' (the same weights)")
        if backend == "cuda":   # built and loadable (else the reason), before its kernels are asked about
            cuda.load()
        for op, attrs in zip(graph.ops, op_attrs(graph)):   # the backend says what it runs (supports_op)
            why = _core.supports_op(backend, attrs, len(op.shape))
            if why is not None:
                raise ConfigError(f"the {backend.upper()} backend {why} (op {op.name!r}); graphs it cannot run "
                                  "can be planned (sw.search, sw.tofu.partition) and trained on another backend")
        if backend == "cuda":
            cuda.require()   # a driver and a GPU, else BackendUnavailableError naming what is missing
        inputs = [op for op in graph.ops if op.kind == "input"]
        losses = [op for op in graph.ops if op.kind == "softmax"]
        if not inputs or not losses:
            raise ConfigError("training needs at least one input op and at least one softmax op")
        batch = {op.shape[0] for op in inputs + losses}
        if len(batch) != 1:
            raise ConfigError("every input and softmax op must have the same minibatch (first dimension), got "
                              + ", ".join(f"{op.name} {op.shape}" for op in inputs + losses))
        if plan.options.precision != "fp32":   # execution is float32 whatever the plan was costed in
            warnings.warn(f"plan {plan.name!r} is costed in {plan.options.precision} (mixed precision); the "
                          f"runtime trains it in float32: the same partitions, float32 arithmetic, about twice "
                          f"the activation and message bytes the plan counts", PrecisionWarning, stacklevel=2)
        self.graph = graph
        self.plan = plan
        self.optimizer = optimizer or SGD()
        self.seed = seed
        self.inputs = inputs            # every input op, in graph order
        self.input = inputs[0]
        self.batch = inputs[0].shape[0]
        self.loss_ops = losses
        nstate = self.optimizer.state_buffers
        if swap is None and getattr(recompute, "swap", None) is not None:   # recompute_plan(..., swap=True)
            swap, recompute = recompute.swap, None   # the swap plan carries the recomputation
        if isinstance(schedule, str) and schedule == "auto":   # critical_path for one rank of several
            schedule = "critical_path" if comm is not None and comm.size > 1 and swap is None and \
                recompute is None and backend == "cpu" else "fifo"
        if swap is not None:
            from shardwise.iteration.swap import SwapPlan

            if not isinstance(swap, SwapPlan):
                raise TypeError(f"swap must be a SwapPlan (sw.swap_plan(plan, budget)) or None, got "
                                f"{type(swap).__name__}")
            swap.check(plan, optimizer_state=nstate)
            if plan.options.precision != "fp32":
                raise ConfigError(f"a swap plan of a plan costed in {plan.options.precision} offloads 2-byte feature "
                                  f"maps, but training runs in float32: swap a float32 plan "
                                  f"(CostOptions(precision='fp32'))")
            if backend != "cpu" or schedule != "fifo":
                raise ConfigError("a swap plan trains on the CPU backend with the fifo schedule so far")
        self.swap = swap
        if isinstance(steps_in_flight, bool) or not isinstance(steps_in_flight, int) or \
                not 1 <= steps_in_flight <= 8:
            raise ConfigError(f"steps_in_flight must be an int in 1 .. 8, got {steps_in_flight!r}")
        if steps_in_flight > 1 and (backend != "cpu" or swap is not None):
            raise ConfigError("steps in flight (steps_in_flight > 1) run on the CPU backend without a swap plan so "
                              "far; use steps_in_flight=1")
        if recompute is None and swap is None:   # a plan searched with recompute=True: the recomputation it fits with
            recompute = (plan.search_stats or {}).get("memory", {}).get("recompute", {}).get("ops") or None
        if recompute is not None and (steps_in_flight > 1 or schedule != "fifo" or backend != "cpu"):
            raise ConfigError("recomputation trains one step at a time (steps_in_flight=1), with the fifo "
                              "schedule, on the CPU backend so far")
        self.steps_in_flight = steps_in_flight
        self._pipelined = False          # the runtime records its steps back to back at the first fit
        if comm is not None:
            from shardwise.distributed import Comm, check_world

            if not isinstance(comm, Comm):
                raise ConfigError(f"comm must be the job's communicator (sw.distributed.init()), got "
                                  f"{type(comm).__name__}")
            if backend != "cpu":
                raise ConfigError("training across processes runs on the CPU backend so far (NCCL for GPU ranks "
                                  "is not wired into the runtime yet)")
            check_world(None, comm)   # the launcher's size is MPI's (N one-rank jobs refused)
            if len(plan.devices) < comm.size:
                raise ConfigError(f"the job has {comm.size} ranks but the plan only {len(plan.devices)} devices: "
                                  f"launch at most {len(plan.devices)} ranks (mpiexec -n {len(plan.devices)})")
        self.comm = comm
        ranks = comm.size if comm is not None and comm.size > 1 else None
        if schedule is None:   # sw.lower takes None for fifo; a Trainer names its schedule
            raise ConfigError("schedule must be one of 'fifo', 'critical_path' or a Schedule (sw.schedule(plan)), "
                              "got None")
        # the plan lowered once: the schedule is made on this graph, the swap plan applied to it, and
        # the runtime (and memory_plan below) take its C handle
        self.task_graph = lower(plan, optimizer_state=nstate, schedule=schedule, swap=swap, ranks=ranks,
                                recompute=recompute)
        self.schedule = self.task_graph.schedule   # None: fifo
        if ranks is not None:   # every rank runs the same thing, or none goes on
            from shardwise.distributed.startup import check_same_job, task_graph_digest
            from shardwise.train.checkpoint import plan_fingerprint
            from shardwise.version import __version__

            check_same_job(comm, {"shardwise version": __version__, "graph": graph.fingerprint(),
                                  "plan": plan_fingerprint(plan), "task graph": task_graph_digest(self.task_graph.handle),
                                  "optimizer": type(self.optimizer).__name__,
                                  "trainer options": (seed, steps_in_flight, backend)})
        self._refuse_arenas_beyond_memory()   # before a byte is allocated
        self.executor = NativeExecutor(graph, plan, self.task_graph, optimizer_state=nstate,
                                       schedule=self.schedule, backend=backend, workspace_mb=workspace_mb,
                                       comm=comm if ranks is not None else None)
        if swap is not None:   # the budget holds for what the runtime allocated, not only for the plan
            over = {d: b for d, b in self.executor.arena_bytes().items() if b > swap.budget[d]}
            if over:
                raise TrainingError(f"the runtime's arenas {over} exceed the swap plan's budgets {swap.budget}")
        self.training = True            # train mode, as a new torch.nn.Module (see train() / eval())
        self._running = RunningStats(graph, self.task_graph)
        self._set_weights({**init_params(graph, seed), **running_defaults(graph)})

    @property
    def steps(self) -> int:
        """Training steps completed.  The runtime counts them as each step returns from C, so
        a Ctrl-C (raised once the step is complete: a step runs in C and Python handles the
        signal after it) never separates the count from the weights."""
        return self.executor.steps

    @steps.setter
    def steps(self, value: int) -> None:
        with self._exclusive("set the step count"):
            self.executor.steps = value

    def _refuse_arenas_beyond_memory(self) -> None:
        """MemoryOverflow, before the runtime allocates anything, when a device's planned arena
        (:attr:`memory_plan`) is larger than the memory its device graph declares."""
        from shardwise.iteration.simulate import MemoryOverflow

        over = [(d, p.arena_bytes, self.plan.devices.devices[d].memory)
                for d, p in sorted(self.memory_plan.devices.items())
                if p.arena_bytes > self.plan.devices.devices[d].memory]
        if over:
            d, need, have = max(over, key=lambda o: o[1] - o[2])
            name = self.plan.devices.devices[d].name
            raise MemoryOverflow(
                f"the plan needs a {need / 1e9:.3f} GB arena on device {d} ({name!r}), which declares "
                f"{have / 1e9:.3f} GB of memory ({len(over)} of {len(self.plan.devices)} devices are over); "
                "nothing was allocated. Use a smaller minibatch, a plan searched within the devices' memory "
                "(sw.search does so by default), a swap plan (sw.swap_plan(plan, budget)), or declare "
                "the memory the devices really have (DeviceGraph.add_device(..., memory=...), a machine file)")

    # ---- modes, as torch.nn.Module's
    def train(self, mode: bool = True) -> "Trainer":
        """Train mode (``mode`` True; a new trainer's mode) or eval mode; returns the trainer.

        In train mode batch norms normalize with the minibatch's statistics, and training
        steps update their running statistics; dropouts zero elements with the masks of the
        current step (:attr:`steps`).  In eval mode batch norms normalize with the running
        statistics, dropouts are the identity, :meth:`predict` and :meth:`evaluate` take any
        number of samples, and :meth:`step` refuses to run (call ``train()`` first).
        TrainerInUseError if another thread is using this trainer."""
        if not isinstance(mode, bool):
            raise ConfigError(f"train() takes True or False, got {mode!r}")
        with self._exclusive("change the mode"):
            self.training = mode
        return self

    def eval(self) -> "Trainer":
        """Eval mode (``train(False)``), as PyTorch's ``model.eval()`` before inference; returns the trainer."""
        return self.train(False)

    # ---- what the last step did
    def timeline(self) -> "Timeline":
        """The last training step as the runtime ran it: every task's start and end (seconds
        from the step's start), one lane per device (per device and stream under a schedule).
        ``timeline().save_trace("step.json")`` writes it for chrome://tracing or Perfetto, beside
        ``sw.simulate(plan).save_trace(...)`` for the simulated one.  Raises TrainingError
        before the first step.  Waits for a step another thread is running to end."""
        from shardwise.iteration.trace import TaskEvent, Timeline

        with self._between_steps():
            ns, t0, t1 = self.executor.task_times()
            steps = self.steps
        if steps == 0 or t1 <= t0:
            raise TrainingError("no training step has run yet: call step() or fit() first")
        stream = self.schedule.stream_arrays()[0].tolist() if self.schedule is not None else None
        events = []
        for t, (start, end) in zip(self.task_graph.tasks, ns.tolist()):
            if not self.executor.runs_device(t.device):   # another rank's task
                continue
            lane = f"device {t.device}" if stream is None else f"device {t.device} stream {stream[t.id]}"
            moves = t.kind in ("copy", "send", "recv", "swap_out", "swap_in")
            events.append(TaskEvent(t.id, t.kind, t.phase, t.op, (lane,), (start - t0) * 1e-9, (end - t0) * 1e-9,
                                    int(t.nbytes) if moves else 0, t.src_device if moves else None, t.device))
        return Timeline(f"{self.plan.name} step {steps}", events, (t1 - t0) * 1e-9)

    # ---- one thread at a time
    def _lock(self) -> threading.Lock:
        """This trainer's lock, made on first use (``__init__`` is left alone); dict.setdefault is
        atomic, so two threads racing to make it end up with the same lock."""
        lock = self.__dict__.get("_in_use")
        return lock if lock is not None else self.__dict__.setdefault("_in_use", threading.Lock())

    @staticmethod
    def _in_use_error(what: str) -> TrainerInUseError:
        return TrainerInUseError(f"cannot {what}: this Trainer is in use by another thread. A Trainer is not "
                                 "thread-safe; use one Trainer per thread")

    @contextlib.contextmanager
    def _between_steps(self):
        """Hold this trainer for a read that must see a step boundary: wait for the step (or
        call) another thread is inside to end.  Internal calls that already hold it use the
        unlocked helpers instead (the lock is not reentrant)."""
        lock = self._lock()
        lock.acquire()   # a read leaves _held_for None: a call that comes meanwhile waits for it (it is short)
        try:
            yield
        finally:
            lock.release()

    def _acquire(self, what: str) -> threading.Lock:
        """The trainer's lock for ``what`` (a call that runs the model or changes it): at once, or
        after a read another thread is doing (reads are short); TrainerInUseError while another
        thread runs or changes the model."""
        lock = self._lock()
        if not lock.acquire(blocking=False):
            # _held_for names what holds the trainer, None for a read; it is None from a release
            # until the next holder names itself, so a race errs towards waiting, never failing a read
            if self.__dict__.get("_held_for") is not None or not lock.acquire(timeout=60):
                raise self._in_use_error(what)
        self._held_for = what
        return lock

    def _release(self, lock: threading.Lock) -> None:
        self._held_for = None
        lock.release()

    @contextlib.contextmanager
    def _exclusive(self, what: str):
        """Hold this trainer for ``what``; raise TrainerInUseError if another thread holds it
        for anything but a read.  The lock is made on first use (``__init__`` is left alone);
        dict.setdefault is atomic, so two threads racing to make it end up with the same lock."""
        lock = self._acquire(what)
        try:
            yield
        finally:
            self._release(lock)

    # ---- inputs
    def _input_dict(self, images: Batch) -> dict[str, Any]:
        """{input op name: data}, from a dict naming every input op exactly, or from one
        array when the graph has a single input op."""
        names = [op.name for op in self.inputs]
        if isinstance(images, Mapping):
            missing = [n for n in names if n not in images]
            unknown = sorted(repr(k) for k in images if k not in names)
            problems = ([f"missing {missing}"] if missing else []) + ([f"unknown {', '.join(unknown)}"]
                                                                     if unknown else [])
            if problems:
                raise ShapeError(f"the graph's inputs are {names}; " + "; ".join(problems))
            return {n: images[n] for n in names}
        if len(names) > 1:
            raise ShapeError(f"the graph has {len(names)} input ops; pass a dict {{name: array}} for {names}, "
                             f"got {type(images).__name__}")
        return {names[0]: images}

    def _check_batch(self, images: Batch, labels: np.ndarray) -> tuple[Batch, np.ndarray]:
        """Validate one minibatch: every input's exact shape, a floating dtype and finite
        values; N integer labels in range.  Returns float32 C-contiguous inputs (one array
        for a one-input graph given an array, else a dict) and int32 labels."""
        given_dict = isinstance(images, Mapping)
        checked: dict[str, np.ndarray] = {}
        # attribute checks and one C pass rather than np.issubdtype / np.isfinite: this runs
        # every step, right after the previous one has left the caches cold
        pairs = ((self.input, images),) if not given_dict and len(self.inputs) == 1 else \
            zip(self.inputs, self._input_dict(images).values())
        for op, data in pairs:
            what = "images" if not given_dict else f"input {op.name!r}"
            a = np.asarray(data)
            if a.shape != op.shape:
                raise ShapeError(f"{what} must have shape {op.shape} (the graph's minibatch), got {a.shape}")
            if op.attrs.get("dtype") == "int64":   # token ids: the runtime converts them after its range check
                bound = id_bound(self.graph, op)
                if a.dtype.kind not in "iu" or (a.size and (a.min() < 0 or a.max() >= bound)):
                    raise ShapeError(f"{what} must be integer token ids in 0..{bound - 1}, got {a.dtype} "
                                     + (f"{a.min()}..{a.max()}" if a.size and a.dtype.kind in "iuf" else ""))
                checked[op.name] = a
                continue
            if a.dtype.kind != "f":
                raise ShapeError(f"{what} must be floating point, got {a.dtype}")
            a = np.ascontiguousarray(a, dtype=np.float32)
            if not _core.all_finite(a):
                raise ShapeError(f"{what} contain NaN or infinity")
            checked[op.name] = a
        labels = np.asarray(labels)
        want = self.loss_ops[-1].shape[:-1]   # (N) for (N, C) logits, (N, T) for (N, T, C)
        if labels.shape != want or labels.dtype.kind not in "iu":
            what = f"{self.batch} integers" if len(want) == 1 else f"integers of shape {want}"
            raise ShapeError(f"labels must be {what}, got {labels.dtype} {labels.shape}")
        classes = self.loss_ops[-1].shape[-1]
        if labels.min() < 0 or labels.max() >= classes:
            raise ShapeError(f"labels must lie in 0..{classes - 1}, got {labels.min()}..{labels.max()}")
        out: Batch = checked if given_dict else checked[self.input.name]
        return out, np.ascontiguousarray(labels, dtype=np.int32)

    def _samples(self, images: Batch) -> tuple[dict[str, np.ndarray], int]:
        """A data set's inputs as {name: array} and its sample count (all inputs must agree)."""
        data = {k: np.asarray(v) for k, v in self._input_dict(images).items()}
        counts = {k: (len(v) if v.ndim else 0) for k, v in data.items()}
        if len(set(counts.values())) != 1:
            raise ShapeError(f"every input needs the same number of samples, got {counts}")
        return data, next(iter(counts.values()))

    def _take(self, data: dict[str, np.ndarray], idx: Any, as_dict: bool) -> Batch:
        """The samples ``idx`` of every input (a dict, or the one array when not ``as_dict``)."""
        out = {k: v[idx] for k, v in data.items()}
        return out if as_dict else out[self.input.name]

    # ---- one rank of several
    def local_devices(self) -> list[int]:
        """The plan's devices this process runs: all of them, but for one rank of several (a
        contiguous block: :func:`shardwise.distributed.ranks.rank_of_device`)."""
        return list(self.executor.local_devices)

    def local_samples(self) -> np.ndarray:
        """The minibatch's sample indices this rank's devices read (sorted): what
        ``step(x_local, y_local, local=True)`` takes, for rank-local data loading; every
        sample for one process."""
        rows: set[int] = set()
        for t in self.task_graph.tasks:
            if t.kind in ("load_input", "loss") and self.executor.runs_device(t.device):
                (lo, hi) = self.task_graph.buffers[t.writes[0]].box[0]
                rows.update(range(lo, hi))
        return np.array(sorted(rows), np.int64)

    def _from_local(self, images: Batch, labels: np.ndarray) -> tuple[Batch, np.ndarray]:
        """The whole minibatch's arrays with this rank's samples in place (the rest zeros: no
        task of this rank reads them), from arrays of the local samples alone."""
        idx = self.local_samples()
        data = self._input_dict(images)
        full: dict[str, np.ndarray] = {}
        for op in self.inputs:
            a = np.asarray(data[op.name])
            if a.shape != (len(idx),) + tuple(op.shape[1:]):
                raise ShapeError(f"local=True: input {op.name!r} must hold this rank's {len(idx)} samples "
                                 f"(local_samples()), shape {(len(idx),) + tuple(op.shape[1:])}, got {a.shape}")
            f = np.zeros(op.shape, a.dtype if a.dtype.kind in "iu" else np.float32)
            f[idx] = a
            full[op.name] = f
        labels = np.asarray(labels)
        want = (len(idx),) + tuple(self.loss_ops[-1].shape[1:-1])
        if labels.shape != want:
            raise ShapeError(f"local=True: labels must hold this rank's samples, shape {want}, got {labels.shape}")
        y = np.zeros(self.loss_ops[-1].shape[:-1], labels.dtype if labels.dtype.kind in "iu" else np.int64)
        y[idx] = labels
        return (full if isinstance(images, Mapping) else full[self.input.name]), y

    def comm_bytes(self) -> dict[str, int]:
        """{"sent": n, "received": n}: bytes this rank's messages carried in the last step
        (or launch of steps back to back), counted by the communicator; zeros for one process.
        Waits for a step another thread is running to end."""
        with self._between_steps():
            last = getattr(self, "_comm_last", None)
        return dict(last) if last is not None else {"sent": 0, "received": 0}

    def _count_bytes(self, before: dict[str, list[int]] | None) -> None:
        if before is None:
            return
        after = self.comm.counters()
        self._comm_last = {k: int(sum(after[k]) - sum(before[k])) for k in ("sent", "received")}

    def _counters(self) -> dict[str, list[int]] | None:
        return self.comm.counters() if self.executor.comm is not None else None

    # ---- training
    def step(self, images: Batch, labels: np.ndarray, local: bool = False) -> float:
        """One iteration: forward, backward, parameter synchronization, update; the mean cross-entropy.

        ``images`` is the minibatch of the input op, or for a graph with several input ops
        (an unrolled RNN: one per timestep, h0, c0) a dict {input op name: array} naming
        each exactly once; each array has its op's exact shape.

        The step runs in C as one call with the interpreter lock released: a Ctrl-C meanwhile
        raises KeyboardInterrupt once it is complete, and :attr:`steps` counts it.
        Raises TrainerInUseError if another thread is using this trainer (see the class).

        ``local`` (one rank of several): ``images`` and ``labels`` hold only the samples this
        rank's devices read, :meth:`local_samples` in that order, for rank-local data loading;
        the step is the same as given the whole minibatch."""
        # A one-input graph given arrays goes straight to C, which checks the minibatch in one
        # pass (shape, dtype, finite values, label range) before any task runs; only when it
        # refuses does _check_batch run, to name what is wrong.  Other forms are checked first.
        if not self.training:
            raise TrainingError("this trainer is in eval mode (Trainer.eval()): call Trainer.train() before "
                                "training steps")
        if local:
            images, labels = self._from_local(images, labels)
        direct = type(images) is np.ndarray and type(labels) is np.ndarray and len(self.inputs) == 1
        if not direct:
            images, labels = self._check_batch(images, labels)
        lock = self._acquire("step")   # as _exclusive, inline: a generator context costs ~25 us a step here
        try:
            # one call into C with the GIL released; a Ctrl-C meanwhile is raised by Python once
            # it returns, the step complete and counted (self.steps)
            before = self._counters()
            loss = self.executor.run(images, labels, optimizer=self.optimizer)
            self._count_bytes(before)
        except ValueError:
            if direct:
                self._check_batch(images, labels)   # raises ShapeError naming the problem
            raise
        finally:
            self._release(lock)
        if not math.isfinite(loss):
            raise TrainingError(f"the loss is {loss} at step {self.steps}: training diverged")
        return loss

    def _steps(self, batches: list[tuple[Batch, np.ndarray]]) -> list[float]:
        """:attr:`steps_in_flight` steps back to back in one call into C, each on its own
        (images, labels); their losses.  Every minibatch is checked before any task runs; when
        one is refused the steps run one at a time instead, so the ones before it are trained
        and the bad one raises ShapeError naming the problem, as :meth:`step` would."""
        if not self.training:
            raise TrainingError("this trainer is in eval mode (Trainer.eval()): call Trainer.train() before "
                                "training steps")
        if len(batches) != self.steps_in_flight or self.steps_in_flight < 2:
            raise ConfigError(f"{len(batches)} steps back to back; this trainer runs {self.steps_in_flight}")
        direct = len(self.inputs) == 1 and all(type(x) is np.ndarray and type(y) is np.ndarray for x, y in batches)
        if not direct:
            try:
                batches = [self._check_batch(x, y) for x, y in batches]
            except ShapeError:
                return [self.step(x, y) for x, y in batches]   # the good ones train, the bad one raises
        with self._exclusive("step"):
            if not self._pipelined:
                self.executor.pipeline(self.steps_in_flight)
                self._pipelined = True
            first = self.steps
            try:
                before = self._counters()
                losses = self.executor.run_steps(batches, self.optimizer)
                self._count_bytes(before)
                refused = False
            except ValueError:
                refused = True   # nothing ran: every minibatch is checked first
        if refused:
            return [self.step(x, y) for x, y in batches]
        for i, loss in enumerate(losses):
            if not math.isfinite(loss):
                raise TrainingError(f"the loss is {loss} at step {first + i}: training diverged (it ran back to back "
                                    f"with steps {first}..{first + len(losses) - 1}; the weights are those after "
                                    f"step {first + len(losses) - 1})")
        return losses

    def loss(self, images: Batch, labels: np.ndarray) -> float:
        """The loss of a minibatch in the current mode, without changing any weight or running
        statistic (TrainerInUseError if another thread is using this trainer)."""
        images, labels = self._check_batch(images, labels)
        with self._exclusive("compute a loss"):
            return float(self.executor.run(images, labels, phases=("forward",), running=not self.training))

    def forward(self, images: Batch) -> np.ndarray:
        """The model's own output for ``images``, as ``model(x)`` gives it for a model imported
        from PyTorch or ONNX: the logits ((samples, [T,] classes), the input of the last softmax
        op, which the importer appended), or, for a model whose own last op was a softmax or a
        log-softmax, its probabilities or log-probabilities (``Graph.softmax(output=...)``).
        Same modes and sample counts as :meth:`predict`, which keeps returning probabilities;
        nothing is updated.  TrainerInUseError if another thread is using this trainer."""
        with self._exclusive("forward"):
            z = inference.probabilities(self, images, what="forward", logits=True)
        output = self.loss_ops[-1].attrs.get("output", "logits")
        if output == "logits":
            return z
        # the model's own last op was the softmax (or a log-softmax): its output, from the logits
        shifted = z.astype(np.float64) - z.max(axis=-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return (logp if output == "log_probabilities" else np.exp(logp)).astype(np.float32)

    def predict(self, images: Batch) -> np.ndarray:
        """Class probabilities (samples, classes) of the last softmax op, in the current mode
        (as a torch module: call :meth:`eval` first for inference).  ``images``: an array, or a
        dict as in :meth:`step`, of any number of samples in eval mode, and in train mode too
        when no op mixes the samples of a minibatch; a graph with batch norm in train mode
        takes exactly the graph's minibatch (ShapeError otherwise).  Nothing is updated, not
        even running statistics.  TrainerInUseError if another thread is using this trainer."""
        with self._exclusive("predict"):
            return inference.probabilities(self, images)

    # ---- epochs
    def fit(self, images: Batch, labels: np.ndarray, epochs: int = 1, progress: bool | str = "auto",
            shuffle_seed: int | None = None, callback: Callable[[int, int, float], None] | None = None) -> list[float]:
        """Train for ``epochs`` passes over a data set in minibatches of the graph's N.

        Samples are shuffled every epoch (deterministically from ``shuffle_seed``,
        default the trainer's seed); a last partial minibatch is dropped.  Returns
        the mean loss of every epoch.  Ctrl-C stops at a step boundary: the
        weights are those after the last complete step, and the epoch losses so
        far are returned.  A graph with several input ops takes a dict
        {input op name: array of samples}, all with the same number of samples.

        With ``steps_in_flight`` k > 1 (see the constructor) the steps run k at a time, back
        to back in one launch (across epoch boundaries too; the last fewer than k one at a
        time), with the same batches, weights and losses as one at a time.  Then: Ctrl-C stops
        at the boundary of such a group; a diverging loss raises TrainingError once its group
        is done (the weights are those after the group); a bad minibatch raises ShapeError
        after the steps before it, as one at a time.  A ``callback`` needs the weights after
        every step, so with one the steps run one at a time.

        ``progress``: "auto" (the default) shows, once training has run a second, a bar over the
        steps with an ETA, the running loss and images/s (terminals, notebooks) and a line per
        epoch (also in logs); True from the start; False nothing.
        """
        as_dict = isinstance(images, Mapping)
        data, count = self._samples(images)
        labels = np.asarray(labels)
        n = self.batch
        if labels.ndim != len(self.loss_ops[-1].shape) - 1 or count != len(labels):
            raise ShapeError(f"{count} samples but labels of shape {labels.shape}")
        if count < n:
            raise ShapeError(f"the data set has {count} samples, fewer than one minibatch of {n}")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ConfigError(f"epochs must be a positive int, got {epochs!r}")
        if callable(progress):
            raise ConfigError(f"progress must be True, False or 'auto', got {progress!r}")
        check_progress(progress)
        rng = np.random.default_rng(self.seed if shuffle_seed is None else shuffle_seed)
        batches = count // n
        k = self.steps_in_flight if callback is None else 1

        def minibatches() -> Any:   # (epoch, index in the epoch, samples), epoch after epoch
            for epoch in range(epochs):
                order = rng.permutation(count)
                for b in range(batches):
                    yield epoch, b, order[b * n:(b + 1) * n]

        history: list[float] = []
        total, start = 0.0, time.perf_counter()
        pending = minibatches()
        report = ProgressReport("fit", progress, unit="step")
        done = 0
        try:
            while True:
                group = list(itertools.islice(pending, k))
                if not group:
                    break
                pairs = [(self._take(data, idx, as_dict), labels[idx]) for _, _, idx in group]
                losses = self._steps(pairs) if len(group) == k > 1 else [self.step(*p) for p in pairs]
                for (epoch, b, _), loss in zip(group, losses):
                    total += loss
                    done += 1
                    if callback:
                        callback(epoch, b, loss)
                    rate = (b + 1) * n / max(time.perf_counter() - start, 1e-9)
                    report.advance(done, epochs * batches, "training",
                                   epoch=f"{epoch + 1}/{epochs}", loss=f"{total / (b + 1):.4f}",
                                   images_per_s=f"{rate:.1f}")
                    if b == batches - 1:
                        history.append(total / batches)
                        report.line(f"epoch {epoch + 1}/{epochs}: loss {history[-1]:.4f}, {rate:.1f} images/s")
                        total, start = 0.0, time.perf_counter()
        except KeyboardInterrupt:
            report.close()
            report.line(f"interrupted after step {self.steps}; the weights are those of that step")
        finally:
            report.close()
        return history

    def evaluate(self, images: Batch, labels: np.ndarray) -> float:
        """Accuracy (fraction of argmax predictions equal to the label) over a data set
        (an array, or a dict of arrays as for :meth:`fit`), in the current mode, in minibatches
        of the graph's N (the last one padded).  A graph with batch norm in train mode
        normalizes each minibatch with its own statistics and needs a multiple of N samples;
        call :meth:`eval` first to use the running statistics and any number."""
        with self._exclusive("evaluate"):
            return inference.accuracy(self, images, labels)

    # ---- checkpoints
    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Weights, optimizer state (SGD's momentum; Adam's moments and step counts) and step
        count, written atomically (temporary file, fsync, rename); the format is described in
        :mod:`shardwise.train.checkpoint`.  TrainerInUseError if another thread is using this trainer."""
        with self._exclusive("save a checkpoint"):
            payload = checkpoint_payload(self)
        if self.executor.comm is None:
            write_checkpoint(path, payload)
            return
        # one rank of several: every rank gathered the same payload; rank 0 writes it, and the
        # others return once it is written (the file then loads on any rank, or in one process)
        if self.comm.rank == 0:
            write_checkpoint(path, payload)
        self.comm.allgather_bytes(b"\0")

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint` for the same graph and plan
        and the same kind of optimizer (a checkpoint of SGD does not load into an Adam trainer).

        A corrupt or foreign file raises CheckpointError and leaves the trainer as it was.
        Everything is checked before anything changes, and the archive's members (names,
        dtypes, shapes, declared sizes) before any of them is decompressed, so a small file
        declaring a huge member is refused at once.  The trainer keeps its optimizer's
        settings (learning rate, schedule); the schedule goes on from the restored step count.
        TrainerInUseError if another thread is using this trainer."""
        ckpt = read_checkpoint(self, path)
        with self._exclusive("load a checkpoint"):
            before, steps_before = self._get_weights(), self.steps
            self.executor.steps = ckpt.steps   # first: num_batches_tracked is kept relative to it
            try:
                self._set_weights(ckpt.weights)  # validates every array before writing any
            except ShardwiseError as exc:
                self.executor.steps = steps_before
                self._set_weights(before)
                raise CheckpointError(f"{path}: {exc}") from None
            for bid, v in ckpt.state.items():
                if bid in self.executor.persistent:   # one rank of several: its own buffers
                    self.executor.persistent[bid][...] = v
            self.executor.set_updates(ckpt.updates)

    def _started_buffers(self) -> set[int]:
        return self.executor.started_buffers()

    # ---- weights
    def get_weights(self) -> dict[str, np.ndarray]:
        """``"op.weight"`` / ``"op.bias"`` -> full arrays in PyTorch layouts, and for every batch
        norm its ``"op.running_mean"``, ``"op.running_var"`` (float32) and ``"op.num_batches_tracked"``
        (an int64 0-d array): the entries of PyTorch's ``state_dict()``.  Waits for a step
        another thread is running to end: the weights are always those of a step boundary."""
        with self._between_steps():
            return self._get_weights()

    def _get_weights(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        persistent = self.executor.gathered()   # one rank of several: every rank's (a collective)
        for (op_name, pname, _), buf in self.task_graph.params.items():
            b = self.task_graph.buffers[buf]
            key = f"{op_name}.{pname}"
            if key not in out:
                op = self.graph[op_name]
                slot = [k for k, i in enumerate(op.desc.inputs) if i.role == 1][("weight", "bias").index(pname)]
                out[key] = np.zeros(op.desc.inputs[slot].shape, np.float32)
            out[key][tuple(slice(lo, hi) for lo, hi in b.box)] = persistent[buf]
        out.update(self._running.get(persistent, self.steps))
        return self.graph.model_weights(out)   # an imported model's own names (nn.MultiheadAttention's)

    def _weight_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {}
        for op in self.graph.ops:
            weights = [i for i in op.desc.inputs if i.role == 1]
            for pname, inp in zip(("weight", "bias"), weights):
                shapes[f"{op.name}.{pname}"] = tuple(inp.shape)
        shapes.update(running_shapes(self.graph))
        return shapes

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load full weight arrays (as :meth:`get_weights` returns them) into every worker's slices.
        Every array is checked (name, exact shape, finite values) before anything changes.
        Batch norms' running statistics and ``num_batches_tracked`` may be left out (they keep
        their values), so a PyTorch ``state_dict()`` loads with or without them.
        TrainerInUseError if another thread is using this trainer."""
        with self._exclusive("set the weights"):
            self._set_weights(weights)

    def _set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        weights = self.graph.graph_weights(weights)   # an imported model's own names, as get_weights gives them
        shapes = self._weight_shapes()
        running = running_shapes(self.graph)
        missing = set(shapes) - set(weights) - set(running)
        if missing:
            raise ShapeError(f"weights are missing {sorted(self.graph.model_weights(dict.fromkeys(missing)))[:5]}")
        unknown = set(weights) - set(shapes)
        if unknown:
            raise ShapeError(f"unknown weights {sorted(unknown)[:5]}")
        arrays = {}
        given_running = {key: check_running(key, weights[key], shape) for key, shape in running.items()
                         if key in weights}
        for key, shape in shapes.items():
            if key in running:
                continue
            try:
                a = np.asarray(weights[key], dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise ShapeError(f"{key}: not a numeric array ({exc})") from None
            if a.shape != shape:
                raise ShapeError(f"{key}: shape {a.shape}, expected {shape}")
            if not np.isfinite(a).all():
                raise ShapeError(f"{key}: contains NaN or infinity")
            arrays[key] = a
        for (op_name, pname, _), buf in self.task_graph.params.items():
            b = self.task_graph.buffers[buf]
            if buf in self.executor.persistent:   # one rank of several: its own slices
                self.executor.persistent[buf][...] = arrays[f"{op_name}.{pname}"][tuple(slice(lo, hi)
                                                                                        for lo, hi in b.box)]
        self._running.set(self.executor.persistent, given_running, self.steps)

    # ---- memory
    def memory_per_worker(self) -> dict[int, int]:
        """Bytes each worker (device) holds: its one arena, allocated when the trainer was
        built (parameters, optimizer state, activations kept for the backward pass, staging regions
        and gradients at their planned offsets: :attr:`memory_plan`).  Waits for a step another
        thread is running to end."""
        with self._between_steps():
            return self.executor.arena_bytes()

    def arena_high_water(self) -> dict[int, int]:
        """{device: bytes} measured by the runtime: the highest byte of each device's arena
        any step has written so far (rounded up to the arena's alignment).  After a step it
        equals the planned arena, :attr:`memory_plan`'s ``arena_bytes`` (with ``swap``, the swap
        plan's ``peak_bytes``: offloaded feature maps live in a host region apart).  Waits for a
        step another thread is running to end."""
        with self._between_steps():
            return self.executor.arena_high_water()

    @property
    def memory_plan(self) -> "MemoryPlan":
        """The planned memory of this trainer's plan: per device one arena, its peak and the
        offset and lifetime of every buffer (:func:`shardwise.memory_plan`; computed once).  For a
        plan costed in bf16 or fp16 these are the plan's figures, at its precision's element sizes;
        the runtime trains in float32 (:meth:`memory_per_worker` gives its arenas)."""
        mp = getattr(self, "_memory_plan", None)
        if mp is None:
            from shardwise.iteration.memory import memory_plan

            mp = self._memory_plan = memory_plan(self.task_graph)   # the runtime's graph, not lowered again
        return mp

    def planned_memory_per_worker(self) -> dict[int, int]:
        """The planner's estimate of the same: the sizes of the task graph's buffers per device."""
        return self.task_graph.memory_per_device()
