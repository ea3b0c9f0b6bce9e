"""Predictions for any number of samples, in the trainer's mode (``Trainer.predict`` / ``evaluate``).

A graph has one minibatch size N (the first dimension of its input ops), and its task
graph computes exactly N samples.  Predicting S samples runs ceil(S / N) forward passes
of N: the samples in order, the last chunk padded with zero samples whose outputs are
dropped.  That is exact whenever no op mixes samples: every op's output for sample n
then depends on sample n alone.  Eval mode makes that true of batch norm (it normalizes
with its running statistics); in train mode a batch norm normalizes with the statistics
of the whole minibatch, so padding, or splitting S samples into chunks, would change
the outputs.  There predict takes exactly N samples and evaluate a multiple of N
(each minibatch normalized with its own statistics, as when training); anything else
raises ShapeError naming the op and suggesting ``trainer.eval()``.

Which ops mix samples is read from the op descriptions (idea 1 of the design): an op
whose sample-carrying inputs are read at a sample index other than its own output's,
or that reduces statistics over the minibatch (a STAT input: batch norm in train mode).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from shardwise.errors import ShapeError
from shardwise.graph import Graph
from shardwise.ops.desc import DATA, STAT, IndexExpr

if TYPE_CHECKING:
    from shardwise.train.trainer import Batch, Trainer


def _is_sample_index(e: IndexExpr) -> bool:
    """The expression is exactly iteration variable 0 (the output's sample index)."""
    return e.coefs[:1] == (1,) and not any(e.coefs[1:]) and e.offset == 0 and e.affine


def sample_mixing_ops(graph: Graph, training: bool) -> list[str]:
    """Names of the ops whose output for one sample depends on other samples of the minibatch:
    in train mode the ops with minibatch statistics (batch norm), in both modes any op reading
    a sample-carrying input at another sample index (e.g. a matmul over the batch dimension).
    An op carries samples in its first dimension if an input op's output reaches it."""
    carries = [False] * len(graph.ops)
    mixing: list[str] = []
    for op in graph.ops:
        if op.kind == "input":
            carries[op.index] = True
            continue
        data = [d for d in op.desc.inputs if d.role == DATA]
        fed = [d for producer, d in zip(op.inputs, data) if carries[producer]]
        if not fed:
            continue   # a parameter, or an op of parameters only: the same for every sample
        carries[op.index] = True
        with_stats = any(d.role == STAT for d in op.desc.inputs)
        # sample n must read sample n of each such input, and the sample index nothing else
        crosses = any(not _is_sample_index(d.exprs[0]) or any(e.coefs[0] for e in d.exprs[1:]) for d in fed)
        if (training and with_stats) or crosses:
            mixing.append(op.name)
    return mixing


def _samples(t: "Trainer", images: "Batch") -> tuple[dict[str, np.ndarray], int]:
    """{input op name: array} and the sample count: every input holds the same number of
    samples, each of the shape of its input op's samples (ShapeError naming the input)."""
    data = {k: np.asarray(v) for k, v in t._input_dict(images).items()}
    count = None
    for op in t.inputs:
        a = data[op.name]
        what = "images" if len(t.inputs) == 1 else f"input {op.name!r}"
        if a.ndim != len(op.shape) or a.shape[1:] != op.shape[1:] or (count is not None and len(a) != count):
            samples = "samples" if count is None else str(count)
            raise ShapeError(f"{what} must have shape ({samples}, {', '.join(map(str, op.shape[1:]))})"
                             + (" like the other inputs" if count is not None else "") + f", got {a.shape}")
        count = len(a)
    return data, int(count or 0)


def _check_count(t: "Trainer", count: int, what: str, multiple: bool) -> None:
    """In train mode with sample-mixing ops: exactly N samples (predict) or a multiple of N
    (evaluate, ``multiple``); in any mode at least one sample."""
    if count < 1:
        raise ShapeError(f"{what} needs at least one sample, got {count}")
    n = t.batch
    if (count % n == 0) if multiple else count == n:
        return
    mixing = sample_mixing_ops(t.graph, t.training)
    if not mixing:
        return
    kind = t.graph[mixing[0]].kind
    wanted = f"a multiple of the graph's minibatch of {n} samples" if multiple else f"exactly {n} samples"
    if t.training and kind == "batchnorm2d":
        raise ShapeError(f"{what} got {count} samples, but in train mode {kind} {mixing[0]!r} normalizes with "
                         f"the statistics of the whole minibatch, so {what} takes {wanted}. Call "
                         f"trainer.eval() first to normalize with the running statistics (as PyTorch's "
                         f"model.eval()) and take any number of samples")
    raise ShapeError(f"{what} got {count} samples, but op {mixing[0]!r} ({kind}) mixes the samples of a "
                     f"minibatch, so {what} takes {wanted}")


def probabilities(t: "Trainer", images: "Batch", what: str = "predict", multiple: bool = False,
                  logits: bool = False) -> np.ndarray:
    """(samples, [T,] classes) probabilities of the trainer's last softmax op for any number of
    samples, in graph-sized chunks (the last one padded with zeros), in the trainer's mode;
    with ``logits``, that softmax's input (``Trainer.forward``).
    The caller holds the trainer (``Trainer._exclusive``)."""
    data, count = _samples(t, images)
    as_dict = isinstance(images, Mapping)
    _check_count(t, count, what, multiple)
    n = t.batch
    labels = np.zeros(t.loss_ops[-1].shape[:-1], np.int32)   # (N) or (N, T): any valid labels
    out: list[np.ndarray] = []
    for start in range(0, count, n):
        real = min(n, count - start)
        chunk: dict[str, Any] = {}
        for name, a in data.items():
            part = a[start:start + real]
            if real < n:   # zero samples: exact, as no op mixes samples here (_check_count)
                part = np.concatenate([part, np.zeros((n - real,) + part.shape[1:], part.dtype)])
            chunk[name] = part
        batch, _ = t._check_batch(chunk if as_dict else chunk[t.input.name], labels)
        t.executor.run(batch, labels, phases=("forward",), running=not t.training)
        out.append(t.executor.probabilities(t.loss_ops[-1].name, logits)[:real])
    return out[0] if len(out) == 1 else np.concatenate(out)


def accuracy(t: "Trainer", images: "Batch", labels: np.ndarray) -> float:
    """Fraction of the labels equal to the most probable class (``Trainer.evaluate``): one label
    per sample, or per position (N, T) of a sequence loss."""
    _, count = _samples(t, images)
    labels = np.asarray(labels)
    want = (count,) + tuple(t.loss_ops[-1].shape[1:-1])
    if labels.shape != want or count == 0:
        raise ShapeError(f"need as many labels as samples (and at least one): labels of shape {want}, one per "
                         f"sample{' and position' if len(want) > 1 else ''}, got {labels.shape}")
    pred = probabilities(t, images, "evaluate", multiple=True).argmax(axis=-1)
    return int((pred == labels).sum()) / labels.size
