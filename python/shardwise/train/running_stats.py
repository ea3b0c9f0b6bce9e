"""Batch norm's running statistics as a Trainer keeps them, under PyTorch's state_dict names.

    stats = RunningStats(graph, task_graph)
    stats.get(executor.persistent, steps)   # {"bn1.running_mean": (C,) float32, "bn1.running_var": (C,)
                                            #  float32, "bn1.num_batches_tracked": () int64, ...}
    stats.set(executor.persistent, {"bn1.running_var": v}, steps)   # any subset of those keys, checked

The values live in the runtime: every worker of a batchnorm op holds a ``running_stats``
buffer (2, C_w) for its channels C_w (row 0 the running mean, row 1 the running variance),
updated by its ``bn_apply`` task in every training step from the reduced minibatch sums
(csrc/cpu/batchnorm.c, ``sw_bn_running_update``).  Workers holding the same channels are
replicas and compute identical bits, so reading any one of them gives the whole array and
writing sets all of them.

``num_batches_tracked`` is PyTorch's count of training batches an op has seen.  Every
training step runs every batch norm once, so it is kept as an offset from the trainer's
step count: ``tracked = offset + steps``, with no work per step.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from shardwise.errors import ShapeError

STAT_NAMES = ("running_mean", "running_var")     # rows 0 and 1 of a running_stats buffer
COUNT_NAME = "num_batches_tracked"


def running_shapes(graph: Any) -> dict[str, tuple[int, ...]]:
    """``"<op>.running_mean"``, ``"<op>.running_var"`` (C,) and ``"<op>.num_batches_tracked"``
    () for every batchnorm op, in graph order."""
    shapes: dict[str, tuple[int, ...]] = {}
    for op in graph.ops:
        if op.kind == "batchnorm2d":
            c = int(op.shape[1])
            shapes[f"{op.name}.running_mean"] = (c,)
            shapes[f"{op.name}.running_var"] = (c,)
            shapes[f"{op.name}.{COUNT_NAME}"] = ()
    return shapes


def defaults(graph: Any) -> dict[str, np.ndarray]:
    """PyTorch's initial state: running mean 0, running variance 1, no batch tracked."""
    out: dict[str, np.ndarray] = {}
    for key, shape in running_shapes(graph).items():
        if key.endswith(COUNT_NAME):
            out[key] = np.array(0, np.int64)
        else:
            out[key] = np.full(shape, 1.0 if key.endswith("running_var") else 0.0, np.float32)
    return out


def check_running(key: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as the array stored under ``key`` (ShapeError naming the key if it cannot be):
    a running mean (finite) or variance (finite, >= 0) of ``shape`` as float32, or a
    ``num_batches_tracked`` count (an integer >= 0, of shape () or (1,)) as an int64 0-d array."""
    try:
        a = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{key}: not a numeric array ({exc})") from None
    if a.dtype.kind not in "fiub" or a.dtype.kind == "b":
        raise ShapeError(f"{key}: dtype {a.dtype} is not a real number type")
    if key.endswith(COUNT_NAME):
        if a.shape not in ((), (1,)):
            raise ShapeError(f"{key}: shape {a.shape}, expected () (a count)")
        v = a.reshape(()).item()
        if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
            raise ShapeError(f"{key}: must be a whole number of batches, got {v!r}")
        if int(v) < 0:
            raise ShapeError(f"{key}: must be >= 0, got {int(v)}")
        return np.array(int(v), np.int64)
    with np.errstate(over="ignore", invalid="ignore"):   # float64 beyond float32 becomes inf: refused below
        f = a.astype(np.float32)
    if f.shape != shape:
        raise ShapeError(f"{key}: shape {f.shape}, expected {shape} (one value per channel)")
    if not np.isfinite(f).all():
        raise ShapeError(f"{key}: contains NaN or infinity (or values beyond float32)")
    if key.endswith("running_var") and (f < 0).any():
        raise ShapeError(f"{key}: a variance cannot be negative, got {float(f.min())}")
    return f


class RunningStats:
    """The running statistics of every batchnorm op of a trainer, read from and written to the
    runtime's ``running_stats`` buffers (``persistent``: buffer id -> its array in the arena,
    passed to every call: the trainer's executor may be replaced)."""

    def __init__(self, graph: Any, task_graph: Any) -> None:
        self._channels = {op.name: int(op.shape[1]) for op in graph.ops if op.kind == "batchnorm2d"}
        # op name -> [(buffer id, first channel, end channel)], one per worker: buffers (2, C_w)
        self._pieces: dict[str, list[tuple[int, int, int]]] = {name: [] for name in self._channels}
        for b in task_graph.buffers:
            if b.kind == "running_stats":
                (_, _), (lo, hi) = b.box
                self._pieces[b.op].append((b.id, lo, hi))
        self._offset = {name: 0 for name in self._channels}   # num_batches_tracked - steps

    def get(self, persistent: Mapping[int, np.ndarray], steps: int) -> dict[str, np.ndarray]:
        """Every op's running mean and variance (full (C,) float32 arrays) and its
        num_batches_tracked (an int64 0-d array) after ``steps`` training steps."""
        out: dict[str, np.ndarray] = {}
        for name, c in self._channels.items():
            stats = np.zeros((2, c), np.float32)
            for b, lo, hi in self._pieces[name]:
                stats[:, lo:hi] = persistent[b]   # replicas hold the same bits: any of them will do
            out[f"{name}.running_mean"], out[f"{name}.running_var"] = stats[0], stats[1]
            out[f"{name}.{COUNT_NAME}"] = np.array(self._offset[name] + steps, np.int64)
        return out

    def set(self, persistent: Mapping[int, np.ndarray], arrays: Mapping[str, np.ndarray], steps: int) -> None:
        """Write the given entries (checked by :func:`check_running`; any subset of
        :func:`running_shapes`' keys) into every worker holding them, at ``steps`` steps."""
        for key, a in arrays.items():
            name, stat = key.rsplit(".", 1)
            if stat == COUNT_NAME:
                self._offset[name] = int(a) - steps
                continue
            row = STAT_NAMES.index(stat)
            for b, lo, hi in self._pieces[name]:
                if b in persistent:   # one rank of several holds its own workers' pieces
                    persistent[b][row] = a[lo:hi]
