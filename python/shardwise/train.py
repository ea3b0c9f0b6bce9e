"""Training a plan: ``Trainer`` runs the task graph of every iteration on a backend.

    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), seed=0)
    loss = t.step(images, labels)
    loss = t.step({"x0": x0, "x1": x1, "h0": h0, "c0": c0}, labels)   # a graph with several input ops

Numerics do not depend on the plan: every plan computes the same network with
the same initialization (a function of the seed and the op names only); only
the order of floating-point sums differs between plans.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import sys
import threading
import time
import zipfile
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union

import numpy as np

from .atomic import write_atomically
from .errors import ConfigError, ShapeError, ShardwiseError
from .graph import Graph
from .init import init_params
from .lower import lower
from .plan import Plan
from .runtime import NativeExecutor
from .schedule import as_schedule
from . import _core

if TYPE_CHECKING:
    from .memory import MemoryPlan
    from .schedule import Schedule


# Op kinds the CPU backend has kernels for (the op table, csrc/ops.def).
CPU_KINDS = frozenset(_core.CPU_OP_KINDS)

Batch = Union[np.ndarray, Mapping[str, np.ndarray]]
"""The input of a step: one array for a graph with one input op, or {input op name: array}."""


class TrainingError(ShardwiseError, RuntimeError):
    """Training cannot go on: a diverging loss, non-finite values."""


class CheckpointError(ShardwiseError, ValueError):
    """A checkpoint file that is corrupt or was written for another graph."""


class TrainerInUseError(ShardwiseError, RuntimeError):
    """A Trainer was called while another thread was using it: a Trainer is not thread-safe."""


CHECKPOINT_FORMAT = "shardwise-checkpoint"
CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class SGD:
    """Stochastic gradient descent with momentum and weight decay, exactly as torch.optim.SGD."""

    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        for name in ("lr", "momentum", "weight_decay", "dampening"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"SGD {name} must be a finite number >= 0, got {v!r}")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ConfigError("Nesterov momentum needs momentum > 0 and dampening 0")

    def apply(self, param: np.ndarray, grad: np.ndarray, buf: np.ndarray, started: set[int]) -> None:
        """One update of ``param`` in place; ``buf`` is its momentum buffer."""
        g = grad + self.weight_decay * param if self.weight_decay else grad
        if self.momentum:
            key = id(buf)
            if key not in started:
                buf[...] = g
                started.add(key)
            else:
                buf *= self.momentum
                buf += (1.0 - self.dampening) * g
            g = g + self.momentum * buf if self.nesterov else buf
        param -= np.float32(self.lr) * g


def _plan_fingerprint(plan: Plan) -> str:
    rows = sorted((n, list(c.degrees), list(c.devices)) for n, c in plan.configs.items())
    return hashlib.sha256(json.dumps([plan.devices.fingerprint(), rows]).encode()).hexdigest()[:16]


class Trainer:
    """Trains ``graph`` with ``plan`` on the CPU backend (every device a worker with its own memory).

    A Trainer is not thread-safe: its workers share one set of weights, activations and
    gradients.  A call of :meth:`step`, :meth:`loss`, :meth:`predict` (so also :meth:`fit`,
    :meth:`evaluate`), :meth:`save_checkpoint` or :meth:`load_checkpoint` while another
    thread is inside one of them raises :class:`TrainerInUseError` at once and changes
    nothing; it neither waits nor computes a wrong result.  Use one Trainer per thread.

    ``schedule``: "fifo" (the default: one stream per device, tasks in program order),
    "critical_path" (``sw.schedule(plan)``: TurboDL's prioritized streams, the CPU backend
    taking the most urgent ready task first), or a :class:`~shardwise.schedule.Schedule` of
    this plan.  Weights and gradients are bitwise the same under every schedule; fifo stays
    the default until critical_path is measured to help on the CPU (docs/scheduling.md).
    """

    def __init__(self, graph: Graph, plan: Plan, optimizer: SGD | None = None, backend: str = "cpu",
                 seed: int = 0, schedule: "str | Schedule" = "fifo") -> None:
        if not isinstance(plan, Plan):
            raise ConfigError(f"Trainer needs a Plan, got {type(plan).__name__}")
        if plan.graph is not graph and plan.graph.fingerprint() != graph.fingerprint():
            raise ConfigError(f"the plan was made for graph {plan.graph.name!r}, not {graph.name!r}")
        if backend not in _core.BACKENDS:
            raise ConfigError(f"unknown backend {backend!r}; available: {', '.join(map(repr, _core.BACKENDS))}")
        for op in graph.ops:
            if op.kind not in CPU_KINDS:
                raise ConfigError(f"the CPU backend has no kernels for op kind {op.kind!r} (op {op.name!r}); "
                                  f"it trains {sorted(CPU_KINDS)}. Graphs with other ops can be planned "
                                  "(sw.search, sw.tofu.partition) but not trained yet")
        inputs = [op for op in graph.ops if op.kind == "input"]
        losses = [op for op in graph.ops if op.kind == "softmax"]
        if not inputs or not losses:
            raise ConfigError("training needs at least one input op and at least one softmax op")
        batch = {op.shape[0] for op in inputs + losses}
        if len(batch) != 1:
            raise ConfigError("every input and softmax op must have the same minibatch (first dimension), got "
                              + ", ".join(f"{op.name} {op.shape}" for op in inputs + losses))
        self.graph = graph
        self.plan = plan
        self.optimizer = optimizer or SGD()
        self.seed = seed
        self.inputs = inputs            # every input op, in graph order
        self.input = inputs[0]
        self.batch = inputs[0].shape[0]
        self.loss_ops = losses
        self.task_graph = lower(plan)
        self.schedule = as_schedule(plan, schedule)   # None: fifo
        self.executor = NativeExecutor(graph, plan, self.task_graph, schedule=self.schedule)
        self.set_weights(init_params(graph, seed))

    @property
    def steps(self) -> int:
        """Training steps completed.  The runtime counts them as each step returns from C, so
        a Ctrl-C (raised once the step is complete: a step runs in C and Python handles the
        signal after it) never separates the count from the weights."""
        return self.executor.steps

    @steps.setter
    def steps(self, value: int) -> None:
        self.executor.steps = value

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
    def _exclusive(self, what: str):
        """Hold this trainer for ``what``; raise TrainerInUseError if another thread holds it.
        The lock is made on first use (``__init__`` is left alone); dict.setdefault is atomic,
        so two threads racing to make it end up with the same lock."""
        lock = self._lock()
        if not lock.acquire(blocking=False):
            raise self._in_use_error(what)
        try:
            yield
        finally:
            lock.release()

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
            if a.dtype.kind != "f":
                raise ShapeError(f"{what} must be floating point, got {a.dtype}")
            a = np.ascontiguousarray(a, dtype=np.float32)
            if not _core.all_finite(a):
                raise ShapeError(f"{what} contain NaN or infinity")
            checked[op.name] = a
        labels = np.asarray(labels)
        if labels.shape != (self.batch,) or labels.dtype.kind not in "iu":
            raise ShapeError(f"labels must be {self.batch} integers, got {labels.dtype} {labels.shape}")
        classes = self.loss_ops[-1].shape[1]
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

    # ---- training
    def step(self, images: Batch, labels: np.ndarray) -> float:
        """One iteration: forward, backward, parameter synchronization, update; the mean cross-entropy.

        ``images`` is the minibatch of the input op, or for a graph with several input ops
        (an unrolled RNN: one per timestep, h0, c0) a dict {input op name: array} naming
        each exactly once; each array has its op's exact shape.

        The step runs in C as one call with the interpreter lock released: a Ctrl-C meanwhile
        raises KeyboardInterrupt once it is complete, and :attr:`steps` counts it.
        Raises TrainerInUseError if another thread is using this trainer (see the class)."""
        # A one-input graph given arrays goes straight to C, which checks the minibatch in one
        # pass (shape, dtype, finite values, label range) before any task runs; only when it
        # refuses does _check_batch run, to name what is wrong.  Other forms are checked first.
        direct = type(images) is np.ndarray and type(labels) is np.ndarray and len(self.inputs) == 1
        if not direct:
            images, labels = self._check_batch(images, labels)
        lock = self._lock()   # as _exclusive, inline: a generator context costs ~25 us a step here
        if not lock.acquire(blocking=False):
            raise self._in_use_error("step")
        try:
            # one call into C with the GIL released; a Ctrl-C meanwhile is raised by Python once
            # it returns, the step complete and counted (self.steps)
            loss = self.executor.run(images, labels, optimizer=self.optimizer)
        except ValueError:
            if direct:
                self._check_batch(images, labels)   # raises ShapeError naming the problem
            raise
        finally:
            lock.release()
        if not math.isfinite(loss):
            raise TrainingError(f"the loss is {loss} at step {self.steps}: training diverged")
        return loss

    def loss(self, images: Batch, labels: np.ndarray) -> float:
        """The loss of a minibatch without changing any weight (TrainerInUseError if another
        thread is using this trainer)."""
        images, labels = self._check_batch(images, labels)
        with self._exclusive("compute a loss"):
            return float(self.executor.run(images, labels, phases=("forward",)))

    def predict(self, images: Batch) -> np.ndarray:
        """Class probabilities of the last softmax op for a minibatch (an array or a dict as in
        :meth:`step`); TrainerInUseError if another thread is using this trainer."""
        images, _ = self._check_batch(images, np.zeros(self.batch, np.int64))
        with self._exclusive("predict"):
            self.executor.run(images, np.zeros(self.batch, np.int32), phases=("forward",))
            return self.executor.probabilities(self.loss_ops[-1].name)

    # ---- epochs
    def fit(self, images: Batch, labels: np.ndarray, epochs: int = 1, progress: bool = False,
            shuffle_seed: int | None = None, callback: Callable[[int, int, float], None] | None = None) -> list[float]:
        """Train for ``epochs`` passes over a data set in minibatches of the graph's N.

        Samples are shuffled every epoch (deterministically from ``shuffle_seed``,
        default the trainer's seed); a last partial minibatch is dropped.  Returns
        the mean loss of every epoch.  Ctrl-C stops at a step boundary: the
        weights are those after the last complete step, and the epoch losses so
        far are returned.  A graph with several input ops takes a dict
        {input op name: array of samples}, all with the same number of samples.
        """
        as_dict = isinstance(images, Mapping)
        data, count = self._samples(images)
        labels = np.asarray(labels)
        n = self.batch
        if labels.ndim != 1 or count != len(labels):
            raise ShapeError(f"{count} samples but labels of shape {labels.shape}")
        if count < n:
            raise ShapeError(f"the data set has {count} samples, fewer than one minibatch of {n}")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ConfigError(f"epochs must be a positive int, got {epochs!r}")
        rng = np.random.default_rng(self.seed if shuffle_seed is None else shuffle_seed)
        batches = count // n
        history: list[float] = []
        try:
            for epoch in range(epochs):
                order = rng.permutation(count)
                total, start = 0.0, time.perf_counter()
                for b in range(batches):
                    idx = order[b * n:(b + 1) * n]
                    loss = self.step(self._take(data, idx, as_dict), labels[idx])
                    total += loss
                    if callback:
                        callback(epoch, b, loss)
                    if progress:
                        rate = (b + 1) * n / max(time.perf_counter() - start, 1e-9)
                        print(f"\repoch {epoch + 1}/{epochs} [{b + 1}/{batches}] loss {total / (b + 1):.4f} "
                              f"{rate:8.1f} images/s", end="", file=sys.stderr, flush=True)
                history.append(total / batches)
                if progress:
                    print(file=sys.stderr)
        except KeyboardInterrupt:
            if progress:
                print(f"\ninterrupted after step {self.steps}; weights are those of that step", file=sys.stderr)
        return history

    def evaluate(self, images: Batch, labels: np.ndarray) -> float:
        """Accuracy (fraction of argmax predictions equal to the label) over a data set
        (an array, or a dict of arrays as for :meth:`fit`).  The last partial minibatch is
        padded with the first samples (repeated if the data set is smaller), not counted."""
        as_dict = isinstance(images, Mapping)
        data, count = self._samples(images)
        labels = np.asarray(labels)
        if labels.ndim != 1 or count != len(labels) or count == 0:
            raise ShapeError(f"need as many labels as samples (and at least one), got {count}, {labels.shape}")
        n = self.batch
        correct = 0
        for start in range(0, count, n):
            real = min(n, count - start)
            idx = np.concatenate([np.arange(start, start + real), np.arange(n - real) % count])
            pred = self.predict(self._take(data, idx, as_dict))[:real].argmax(axis=1)
            correct += int((pred == labels[start:start + real]).sum())
        return correct / count

    # ---- checkpoints
    def _state(self) -> dict[str, np.ndarray]:
        state = {f"weight/{k}": v for k, v in self.get_weights().items()}
        for b in self.task_graph.buffers:
            if b.kind == "momentum":
                state[f"momentum/{b.id}"] = self.executor.persistent[b.id]
        return state

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Weights, optimizer state and step count, written atomically (temporary file, fsync, rename).
        TrainerInUseError if another thread is using this trainer."""
        with self._exclusive("save a checkpoint"):
            meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "graph": self.graph.fingerprint(),
                    "plan": _plan_fingerprint(self.plan), "steps": self.steps, "seed": int(self.seed),
                    "optimizer": asdict(self.optimizer),
                    "momentum_started": sorted(self._started_buffers())}
            arrays = self._state()
            buf = io.BytesIO()
            np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
        payload = buf.getvalue()
        digest = hashlib.sha256(payload).hexdigest().encode()
        write_atomically(path, b"SWCKPT1\n" + digest + b"\n" + payload)

    def load_checkpoint(self, path: str | os.PathLike) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint` for the same graph and plan.

        A corrupt or foreign file raises CheckpointError and leaves the trainer as it was.
        Everything is checked before anything changes, and the archive's members (names,
        dtypes, shapes, declared sizes) before any of them is decompressed, so a small file
        declaring a huge member is refused at once.  TrainerInUseError if another thread is
        using this trainer."""
        steps, started, weights, momentum = _read_checkpoint(self, path)
        with self._exclusive("load a checkpoint"):
            before = self.get_weights()
            try:
                self.set_weights(weights)  # validates every array before writing any
            except ShardwiseError as exc:
                self.set_weights(before)
                raise CheckpointError(f"{path}: {exc}") from None
            for bid, v in momentum.items():
                self.executor.persistent[bid][...] = v
            self.executor.set_started(set(started))
            self.steps = steps

    def _started_buffers(self) -> set[int]:
        return self.executor.started_buffers()

    # ---- weights
    def get_weights(self) -> dict[str, np.ndarray]:
        """``"op.weight"`` / ``"op.bias"`` -> full arrays in PyTorch layouts."""
        out: dict[str, np.ndarray] = {}
        for (op_name, pname, _), buf in self.task_graph.params.items():
            b = self.task_graph.buffers[buf]
            key = f"{op_name}.{pname}"
            if key not in out:
                op = self.graph[op_name]
                slot = [k for k, i in enumerate(op.desc.inputs) if i.role == 1][("weight", "bias").index(pname)]
                out[key] = np.zeros(op.desc.inputs[slot].shape, np.float32)
            out[key][tuple(slice(lo, hi) for lo, hi in b.box)] = self.executor.persistent[buf]
        return out

    def _weight_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {}
        for op in self.graph.ops:
            weights = [i for i in op.desc.inputs if i.role == 1]
            for pname, inp in zip(("weight", "bias"), weights):
                shapes[f"{op.name}.{pname}"] = tuple(inp.shape)
        return shapes

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load full weight arrays (as :meth:`get_weights` returns them) into every worker's slices.
        Every array is checked (name, exact shape, finite values) before anything changes."""
        shapes = self._weight_shapes()
        missing = set(shapes) - set(weights)
        if missing:
            raise ShapeError(f"weights are missing {sorted(missing)[:5]}")
        unknown = set(weights) - set(shapes)
        if unknown:
            raise ShapeError(f"unknown weights {sorted(unknown)[:5]}")
        arrays = {}
        for key, shape in shapes.items():
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
            self.executor.persistent[buf][...] = arrays[f"{op_name}.{pname}"][tuple(slice(lo, hi) for lo, hi in b.box)]

    # ---- memory
    def memory_per_worker(self) -> dict[int, int]:
        """Bytes each worker (device) holds: its one arena, allocated when the trainer was
        built (parameters, momentum, activations kept for the backward pass, staging regions
        and gradients at their planned offsets: :attr:`memory_plan`)."""
        return self.executor.arena_bytes()

    def arena_high_water(self) -> dict[int, int]:
        """{device: bytes} measured by the runtime: the highest byte of each device's arena
        any step has written so far (rounded up to the arena's alignment).  After a step it
        equals the planned arena, :attr:`memory_plan`'s ``arena_bytes``."""
        return self.executor.arena_high_water()

    @property
    def memory_plan(self) -> "MemoryPlan":
        """The planned memory of this trainer's plan: per device one arena, its peak and the
        offset and lifetime of every buffer (:func:`shardwise.memory_plan`; computed once)."""
        mp = getattr(self, "_memory_plan", None)
        if mp is None:
            from .memory import memory_plan

            mp = self._memory_plan = memory_plan(self.plan, schedule=self.schedule)
        return mp

    def planned_memory_per_worker(self) -> dict[int, int]:
        """The planner's estimate of the same: the sizes of the task graph's buffers per device."""
        return self.task_graph.memory_per_device()


# ---------------------------------------------------------------------------------------------
# reading checkpoints
# ---------------------------------------------------------------------------------------------
_META_MEMBER = "__meta__"
_META_LIMIT = 1 << 20          # bytes of the JSON meta document
_MEMBER_SLACK = 1 << 18        # bytes per archive member for zip and .npy headers, names, comments
_NPY_HEADER_LIMIT = 10000      # numpy's own default limit on .npy header sizes
_META_KEYS = frozenset({"format", "version", "graph", "plan", "steps", "seed", "optimizer", "momentum_started"})


def _strict_int(value: Any, lo: int = 0, hi: int = 2 ** 63 - 1) -> bool:
    """An int (not a bool, not a float with an integral value) in [lo, hi]."""
    return type(value) is int and lo <= value <= hi


def _strict_number(value: Any) -> bool:
    """A finite int or float (not a bool), as JSON numbers load."""
    return type(value) in (int, float) and math.isfinite(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _checkpoint_layout(t: "Trainer") -> dict[str, tuple[int, ...] | None]:
    """Archive member name -> the exact array shape a checkpoint of ``t`` holds there
    (None for the meta document, a 1-D uint8 array of at most _META_LIMIT bytes)."""
    layout: dict[str, tuple[int, ...] | None] = {_META_MEMBER + ".npy": None}
    for key, shape in t._weight_shapes().items():
        layout[f"weight/{key}.npy"] = tuple(shape)
    for b in t.task_graph.buffers:
        if b.kind == "momentum":
            layout[f"momentum/{b.id}.npy"] = tuple(t.executor.persistent[b.id].shape)
    return layout


def _dtype_problem(dtype: np.dtype) -> str | None:
    """Why an array of ``dtype`` cannot hold weights or momentum (None if it can): only real
    numbers that float32 can take (floats of at most 64 bits, integers), not bools, strings,
    complex numbers, objects or records."""
    if dtype.names is not None or dtype.subdtype is not None or dtype.hasobject:
        return f"dtype {dtype} is not a plain numeric type"
    if dtype.kind not in "fiu" or dtype.itemsize > 8:
        return f"dtype {dtype} is not a real number type (float or integer)"
    return None


def _member_header(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, header bytes) of a .npy member, reading only its header."""
    with zf.open(info) as m:
        version = np.lib.format.read_magic(m)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(m, max_header_size=_NPY_HEADER_LIMIT)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(m, max_header_size=_NPY_HEADER_LIMIT)
        else:
            raise CheckpointError(f"member {info.filename!r}: .npy format version {version} is not supported")
        return tuple(shape), dtype, m.tell()


def _check_names(zf: zipfile.ZipFile, layout: Mapping[str, tuple[int, ...] | None], where: str) -> None:
    """Every member of ``layout`` exactly once and nothing else (from the zip directory)."""
    counts = collections.Counter(i.filename for i in zf.infolist())
    duplicated = sorted(n for n, k in counts.items() if k > 1)
    unknown = sorted(set(counts) - set(layout))
    missing = sorted(set(layout) - set(counts))
    if duplicated or unknown or missing:
        parts = ([f"duplicated members {duplicated[:5]}"] if duplicated else []) + \
                ([f"unknown members {unknown[:5]}"] if unknown else []) + \
                ([f"missing {[m[:-4] for m in missing][:5]}"] if missing else [])
        raise CheckpointError(f"{where}: does not match this trainer's graph and plan: " + "; ".join(parts))


def _check_member(zf: zipfile.ZipFile, name: str, want: tuple[int, ...] | None, where: str) -> None:
    """The dtype, shape and declared size of one .npy member against what this trainer expects
    (``want``; None for the meta document), from the zip directory and the member's .npy header
    alone: nothing past the header (at most _NPY_HEADER_LIMIT bytes) is decompressed."""
    info = zf.getinfo(name)
    if info.flag_bits & 0x1:
        raise CheckpointError(f"{where}: member {name!r} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise CheckpointError(f"{where}: member {name!r} uses an unsupported compression")
    try:
        shape, dtype, header = _member_header(zf, info)
    except CheckpointError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    if want is None:
        if dtype != np.uint8 or len(shape) != 1 or shape[0] > _META_LIMIT:
            raise CheckpointError(f"{where}: the meta document must be at most {_META_LIMIT} bytes (uint8), "
                                  f"got {dtype} {shape}")
    else:
        problem = _dtype_problem(dtype)
        if problem:
            raise CheckpointError(f"{where}: member {name!r}: {problem}")
        if shape != want:
            raise CheckpointError(f"{where}: member {name!r} has shape {shape}, expected {want}")
    # the size the zip directory declares must be exactly what the header describes: reading
    # the member then inflates no more than the arrays this trainer has
    expected_size = header + math.prod(shape) * dtype.itemsize
    if info.file_size != expected_size:
        raise CheckpointError(f"{where}: member {name!r} declares {info.file_size} bytes, but its header "
                              f"describes {expected_size}")


def _read_member(zf: zipfile.ZipFile, name: str) -> np.ndarray:
    with zf.open(name) as m:
        return np.lib.format.read_array(m, allow_pickle=False, max_header_size=_NPY_HEADER_LIMIT)


def _check_meta(meta: Any, t: "Trainer", momentum_ids: set[int], where: str) -> tuple[int, set[int]]:
    """Every field of the meta document, strictly typed; returns (steps, started momentum buffers)."""
    if not isinstance(meta, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
                type(None): "null"}.get(type(meta), type(meta).__name__)
        raise CheckpointError(f"{where}: malformed checkpoint: the meta document is a JSON {kind}, not an object")
    if meta.get("format") != CHECKPOINT_FORMAT or not _strict_int(meta.get("version")) \
            or meta["version"] != CHECKPOINT_VERSION:
        raise CheckpointError(f"{where}: unknown checkpoint format {meta.get('format')!r} {meta.get('version')!r}")
    missing, unknown = sorted(_META_KEYS - set(meta)), sorted(set(meta) - _META_KEYS)
    if missing or unknown:
        raise CheckpointError(f"{where}: malformed checkpoint fields: "
                              + "; ".join(([f"missing {missing}"] if missing else [])
                                          + ([f"unknown {unknown}"] if unknown else [])))
    if meta["graph"] != t.graph.fingerprint():
        raise CheckpointError(f"{where}: written for another graph")
    if meta["plan"] != _plan_fingerprint(t.plan):
        raise CheckpointError(f"{where}: written for another plan of this graph")

    def bad(field: str, want: str) -> CheckpointError:
        return CheckpointError(f"{where}: malformed checkpoint field {field!r}: expected {want}, "
                               f"got {meta[field]!r}"[:500])

    if not _strict_int(meta["steps"]):
        raise bad("steps", "an int >= 0")
    if not _strict_int(meta["seed"]):
        raise bad("seed", "an int >= 0")
    opt = meta["optimizer"]
    fields = {f.name for f in dataclasses.fields(SGD)}
    if not isinstance(opt, dict) or set(opt) != fields:
        raise bad("optimizer", f"an object with exactly the fields {sorted(fields)}")
    for k in sorted(fields):
        ok = type(opt[k]) is bool if k == "nesterov" else _strict_number(opt[k]) and opt[k] >= 0
        if not ok:
            raise CheckpointError(f"{where}: malformed checkpoint field 'optimizer': {k} must be "
                                  + ("true or false" if k == "nesterov" else "a finite number >= 0")
                                  + f", got {opt[k]!r}"[:200])
    try:
        SGD(**opt)
    except ConfigError as exc:
        raise CheckpointError(f"{where}: malformed checkpoint field 'optimizer': {exc}") from None
    started = meta["momentum_started"]
    if not isinstance(started, list) or not all(_strict_int(b) for b in started):
        raise bad("momentum_started", "a list of momentum buffer ids")
    if not set(started) <= momentum_ids:
        raise CheckpointError(f"{where}: optimizer state does not match this plan (unknown momentum buffers "
                              f"{sorted(set(started) - momentum_ids)[:5]})")
    return meta["steps"], set(started)


def _read_checkpoint(t: "Trainer", path: str | os.PathLike
                     ) -> tuple[int, set[int], dict[str, np.ndarray], dict[int, np.ndarray]]:
    """(steps, started momentum buffers, weights, momentum) of a checkpoint for trainer ``t``,
    every part checked; CheckpointError otherwise.  Reads at most the size a checkpoint of
    ``t`` can have, and decompresses nothing but the meta document (at most _META_LIMIT
    bytes, checked first so that a foreign graph or plan is named as such) until every
    member's name, declared size, dtype and shape have passed."""
    layout = _checkpoint_layout(t)
    arrays_max = sum(math.prod(s) * 8 for s in layout.values() if s is not None)
    size_limit = arrays_max + _META_LIMIT + (len(layout) + 1) * _MEMBER_SLACK
    try:
        with open(path, "rb") as f:
            raw = f.read(size_limit + 1)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read checkpoint ({exc})") from None
    if len(raw) > size_limit:
        raise CheckpointError(f"{path}: larger than any checkpoint of this trainer can be ({size_limit} bytes)")
    head, _, rest = raw.partition(b"\n")
    digest, _, payload = rest.partition(b"\n")
    if head != b"SWCKPT1" or hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CheckpointError(f"{path}: not a shardwise checkpoint, or corrupt (checksum mismatch)")
    momentum_ids = {b.id for b in t.task_graph.buffers if b.kind == "momentum"}
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as zf:
            # the meta document first, so that a checkpoint of another graph or plan says so
            meta_name = _META_MEMBER + ".npy"
            if sum(i.filename == meta_name for i in zf.infolist()) != 1:
                raise CheckpointError(f"{path}: malformed checkpoint: it needs exactly one {_META_MEMBER} member")
            _check_member(zf, meta_name, None, str(path))
            text = bytes(_read_member(zf, meta_name)).decode("utf-8")
            meta = json.loads(text, parse_constant=_reject_constant)
            steps, started = _check_meta(meta, t, momentum_ids, str(path))
            _check_names(zf, layout, str(path))
            for name, want in layout.items():
                _check_member(zf, name, want, str(path))
            arrays = {name[:-4]: _read_member(zf, name) for name in layout if layout[name] is not None}
    except CheckpointError:
        raise
    except Exception as exc:  # a checksum-valid file that zipfile, numpy or json cannot read is still corrupt
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {str(exc)[:300]})") from None
    weights: dict[str, np.ndarray] = {}
    momentum: dict[int, np.ndarray] = {}
    with np.errstate(over="ignore", invalid="ignore"):  # float64 beyond float32 becomes inf: refused below
        for key, a in arrays.items():
            kind, name = key.split("/", 1)
            a = np.asarray(a, dtype=np.float32)
            if not np.isfinite(a).all():
                raise CheckpointError(f"{path}: {key} contains NaN or infinity (or values beyond float32)")
            if kind == "weight":
                weights[name] = a
            else:
                momentum[int(name)] = a
    return steps, started, weights, momentum
