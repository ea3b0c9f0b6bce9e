"""Training a plan: ``Trainer`` runs the task graph of every iteration on a backend.

    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), seed=0)
    loss = t.step(images, labels)
    loss = t.step({"x0": x0, "x1": x1, "h0": h0, "c0": c0}, labels)   # a graph with several input ops

Numerics do not depend on the plan: every plan computes the same network with
the same initialization (a function of the seed and the op names only); only
the order of floating-point sums differs between plans.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union

import numpy as np

from .atomic import write_atomically
from .backend_cpu import CpuExecutor
from .errors import ConfigError, ShapeError, ShardwiseError
from .graph import Graph
from .init import init_params
from .lower import lower
from .plan import Plan

if TYPE_CHECKING:
    from .memory import MemoryPlan


# Op kinds the CPU backend (backend_cpu.py) has kernels for.
CPU_KINDS = frozenset({"input", "conv2d", "pool2d", "relu", "add", "batchnorm2d", "concat", "flatten",
                       "linear", "softmax", "parameter", "matmul", "lstm_cell", "lstm_hidden"})

Batch = Union[np.ndarray, Mapping[str, np.ndarray]]
"""The input of a step: one array for a graph with one input op, or {input op name: array}."""


class TrainingError(ShardwiseError, RuntimeError):
    """Training cannot go on: a diverging loss, non-finite values."""


class CheckpointError(ShardwiseError, ValueError):
    """A checkpoint file that is corrupt or was written for another graph."""


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


@contextlib.contextmanager
def _sigint_at_step_boundary():
    """Hold Ctrl-C until the enclosed step has finished, then raise KeyboardInterrupt,
    so an interrupted run always stops with consistent weights (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _plan_fingerprint(plan: Plan) -> str:
    rows = sorted((n, list(c.degrees), list(c.devices)) for n, c in plan.configs.items())
    return hashlib.sha256(json.dumps([plan.devices.fingerprint(), rows]).encode()).hexdigest()[:16]


class Trainer:
    """Trains ``graph`` with ``plan`` on the CPU backend (every device a worker with its own memory)."""

    def __init__(self, graph: Graph, plan: Plan, optimizer: SGD | None = None, backend: str = "cpu",
                 seed: int = 0) -> None:
        if not isinstance(plan, Plan):
            raise ConfigError(f"Trainer needs a Plan, got {type(plan).__name__}")
        if plan.graph is not graph and plan.graph.fingerprint() != graph.fingerprint():
            raise ConfigError(f"the plan was made for graph {plan.graph.name!r}, not {graph.name!r}")
        if backend != "cpu":
            raise ConfigError(f"unknown backend {backend!r}; available: 'cpu'")
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
        self.executor = CpuExecutor(graph, self.task_graph)
        self.executor.param_index = self.task_graph.params
        self.executor.momentum_started = set()
        self.steps = 0
        self.set_weights(init_params(graph, seed))

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
        for op, data in zip(self.inputs, self._input_dict(images).values()):
            what = "images" if not given_dict else f"input {op.name!r}"
            a = np.asarray(data)
            if a.shape != op.shape:
                raise ShapeError(f"{what} must have shape {op.shape} (the graph's minibatch), got {a.shape}")
            if not np.issubdtype(a.dtype, np.floating):
                raise ShapeError(f"{what} must be floating point, got {a.dtype}")
            a = np.ascontiguousarray(a, dtype=np.float32)
            if not np.isfinite(a).all():
                raise ShapeError(f"{what} contain NaN or infinity")
            checked[op.name] = a
        labels = np.asarray(labels)
        if labels.shape != (self.batch,) or not np.issubdtype(labels.dtype, np.integer):
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
        each exactly once; each array has its op's exact shape."""
        images, labels = self._check_batch(images, labels)
        interrupted = False
        try:
            with _sigint_at_step_boundary():
                loss = self.executor.run(images, labels, optimizer=self.optimizer)
                self.steps += 1
        except KeyboardInterrupt:
            interrupted = True
        if interrupted:
            raise KeyboardInterrupt(f"interrupted after step {self.steps}")
        if not math.isfinite(loss):
            raise TrainingError(f"the loss is {loss} at step {self.steps}: training diverged")
        return float(loss)

    def loss(self, images: Batch, labels: np.ndarray) -> float:
        """The loss of a minibatch without changing any weight."""
        images, labels = self._check_batch(images, labels)
        return float(self.executor.run(images, labels, phases=("forward",)))

    def predict(self, images: Batch) -> np.ndarray:
        """Class probabilities of the last softmax op for a minibatch (an array or a dict as in :meth:`step`)."""
        images, _ = self._check_batch(images, np.zeros(self.batch, np.int64))
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
        """Weights, optimizer state and step count, written atomically (temporary file, fsync, rename)."""
        meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "graph": self.graph.fingerprint(),
                "plan": _plan_fingerprint(self.plan), "steps": self.steps, "seed": self.seed,
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
        A corrupt or foreign file raises CheckpointError and leaves the trainer as it was."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read checkpoint ({exc})") from None
        head, _, rest = raw.partition(b"\n")
        digest, _, payload = rest.partition(b"\n")
        if head != b"SWCKPT1" or hashlib.sha256(payload).hexdigest().encode() != digest:
            raise CheckpointError(f"{path}: not a shardwise checkpoint, or corrupt (checksum mismatch)")
        try:
            with np.load(io.BytesIO(payload), allow_pickle=False) as z:
                meta = json.loads(bytes(z["__meta__"]).decode())
                arrays = {k: z[k] for k in z.files if k != "__meta__"}
        except Exception as exc:  # a checksum-valid file that numpy cannot read is still corrupt
            raise CheckpointError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from None
        if meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(f"{path}: unknown checkpoint format {meta.get('format')!r} {meta.get('version')!r}")
        if meta.get("graph") != self.graph.fingerprint():
            raise CheckpointError(f"{path}: written for another graph")
        if meta.get("plan") != _plan_fingerprint(self.plan):
            raise CheckpointError(f"{path}: written for another plan of this graph")
        weights = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("weight/")}
        try:
            momentum = {int(k.split("/", 1)[1]): v for k, v in arrays.items() if k.startswith("momentum/")}
            steps = int(meta["steps"])
            started = {int(b) for b in meta["momentum_started"]}
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: malformed checkpoint fields ({type(exc).__name__}: {exc})") from None
        expected = {b.id for b in self.task_graph.buffers if b.kind == "momentum"}
        if set(momentum) != expected or not started <= expected or steps < 0:
            raise CheckpointError(f"{path}: optimizer state does not match this plan")
        for bid, v in momentum.items():
            if v.shape != self.executor.persistent[bid].shape or not np.isfinite(v).all():
                raise CheckpointError(f"{path}: optimizer state does not match this plan")
        before = self.get_weights()
        try:
            self.set_weights(weights)  # validates every array before writing any
        except ShardwiseError as exc:
            self.set_weights(before)
            raise CheckpointError(f"{path}: {exc}") from None
        for bid, v in momentum.items():
            self.executor.persistent[bid][...] = v
        self.executor.momentum_started = {id(self.executor.persistent[b]) for b in started}
        self.steps = steps

    def _started_buffers(self) -> set[int]:
        ids = self.executor.momentum_started
        return {bid for bid, arr in self.executor.persistent.items() if id(arr) in ids}

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
        """Bytes each worker (device) held at the end of the last step: parameters, momentum,
        activations kept for the backward pass, staging regions and gradients (measured
        from the arrays the executor allocated; views of another buffer are not counted twice)."""
        return dict(self.executor.peak_bytes)

    @property
    def memory_plan(self) -> "MemoryPlan":
        """The planned memory of this trainer's plan: per device one arena, its peak and the
        offset and lifetime of every buffer (:func:`shardwise.memory_plan`; computed once)."""
        mp = getattr(self, "_memory_plan", None)
        if mp is None:
            from .memory import memory_plan

            mp = self._memory_plan = memory_plan(self.plan)
        return mp

    def planned_memory_per_worker(self) -> dict[int, int]:
        """The planner's estimate of the same: the sizes of the task graph's buffers per device."""
        return self.task_graph.memory_per_device()
