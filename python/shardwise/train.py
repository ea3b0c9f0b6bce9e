"""Training a plan: ``Trainer`` runs the task graph of every iteration on a backend.

    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), seed=0)
    loss = t.step(images, labels)

Numerics do not depend on the plan: every plan computes the same network with
the same initialization (a function of the seed and the op names only); only
the order of floating-point sums differs between plans.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .backend_cpu import CpuExecutor, shape_of
from .errors import ConfigError, ShapeError, ShardwiseError
from .graph import Graph
from .init import init_params
from .lower import lower
from .plan import Plan


class TrainingError(ShardwiseError, RuntimeError):
    """Training cannot go on: a diverging loss, non-finite values."""


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
        inputs = [op for op in graph.ops if op.kind == "input"]
        losses = [op for op in graph.ops if op.kind == "softmax"]
        if len(inputs) != 1 or not losses:
            raise ConfigError("training needs exactly one input op and at least one softmax op")
        self.graph = graph
        self.plan = plan
        self.optimizer = optimizer or SGD()
        self.seed = seed
        self.input = inputs[0]
        self.loss_ops = losses
        self.task_graph = lower(plan)
        self.executor = CpuExecutor(graph, self.task_graph)
        self.executor.param_index = self.task_graph.params
        self.executor.momentum_started = set()
        self.steps = 0
        self.set_weights(init_params(graph, seed))

    # ---- inputs
    def _check_batch(self, images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        images = np.asarray(images)
        if images.shape != self.input.shape:
            raise ShapeError(f"images must have shape {self.input.shape} (the graph's minibatch), "
                             f"got {images.shape}")
        if not np.issubdtype(images.dtype, np.floating):
            raise ShapeError(f"images must be floating point, got {images.dtype}")
        images = np.ascontiguousarray(images, dtype=np.float32)
        if not np.isfinite(images).all():
            raise ShapeError("images contain NaN or infinity")
        labels = np.asarray(labels)
        if labels.shape != (self.input.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
            raise ShapeError(f"labels must be {self.input.shape[0]} integers, got {labels.dtype} {labels.shape}")
        classes = self.loss_ops[-1].shape[1]
        if labels.min() < 0 or labels.max() >= classes:
            raise ShapeError(f"labels must lie in 0..{classes - 1}, got {labels.min()}..{labels.max()}")
        return images, np.ascontiguousarray(labels, dtype=np.int32)

    # ---- training
    def step(self, images: np.ndarray, labels: np.ndarray) -> float:
        """One iteration: forward, backward, parameter synchronization, update; the mean cross-entropy."""
        images, labels = self._check_batch(images, labels)
        loss = self.executor.run(images, labels, optimizer=self.optimizer)
        self.steps += 1
        if not math.isfinite(loss):
            raise TrainingError(f"the loss is {loss} at step {self.steps}: training diverged")
        return float(loss)

    def loss(self, images: np.ndarray, labels: np.ndarray) -> float:
        """The loss of a minibatch without changing any weight."""
        images, labels = self._check_batch(images, labels)
        return float(self.executor.run(images, labels, phases=("forward",)))

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Class probabilities of the last softmax op for a minibatch."""
        images, _ = self._check_batch(images, np.zeros(self.input.shape[0], np.int64))
        self.executor.run(images, np.zeros(self.input.shape[0], np.int32), phases=("forward",))
        return self.executor.probabilities(self.loss_ops[-1].name)

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

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Load full weight arrays (as :meth:`get_weights` returns them) into every worker's slices."""
        expected = {f"{o}.{p}" for (o, p, _) in self.task_graph.params}
        missing = expected - set(weights)
        if missing:
            raise ShapeError(f"weights are missing {sorted(missing)[:5]}")
        arrays = {}
        for key in expected:
            a = np.asarray(weights[key], dtype=np.float32)
            arrays[key] = a
        for (op_name, pname, _), buf in self.task_graph.params.items():
            b = self.task_graph.buffers[buf]
            full = arrays[f"{op_name}.{pname}"]
            want = tuple(hi for _, hi in b.box)
            if any(w > s for w, s in zip(want, full.shape)) or full.ndim != len(b.box):
                raise ShapeError(f"{op_name}.{pname}: wrong shape {full.shape}")
            self.executor.persistent[buf][...] = full[tuple(slice(lo, hi) for lo, hi in b.box)]
