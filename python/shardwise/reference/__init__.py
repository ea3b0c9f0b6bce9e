"""Plain NumPy forward and backward of every op: the numerics oracle.

This module is the bottom rung of the numerics ladder.  The CPU kernels, the
executor (any plan, any number of workers) and, when installed, PyTorch are
all compared against it, and it is itself checked by finite differences.  It
is therefore written to be *obviously right* rather than fast: every kernel is
a few lines of array arithmetic with its shapes in a comment, convolution and
pooling loop over the kernel window offsets (never over pixels), and nothing is
fused except what the graph fuses (a ReLU after conv2d/linear).

Everything computes in the dtype of its inputs (float32 or float64); no
function upcasts behind the caller's back, so a float32 comparison against the
C kernels sees float32 rounding on both sides.

Semantics other parts of the project must reproduce:

* conv2d / linear: PyTorch layouts, weight (C_out, C_in / groups, kH, kW) / (O, I); conv2d's
  dilation and groups as PyTorch's, in :mod:`shardwise.reference.conv` (re-exported here).
* pool2d max: padding is -inf; the gradient of a window goes entirely to the
  FIRST maximal element in row-major (dy, dx) window order (ties never split).
  pool2d avg: padded zeros count in the divisor, always kH * kW
  (PyTorch's ``count_include_pad=True``).
* batchnorm2d: training mode only, statistics over (N, H, W) of the whole
  minibatch, biased variance, ``eps = 1e-5``; no running statistics.
* group_norm: per sample and group of C / groups channels, over the group's channels, rows and
  columns (biased variance, the op's ``eps``), then the per-channel weight and bias when affine,
  in :mod:`shardwise.reference.groupnorm`.
* softmax: over axis 1, max-subtracted.  The loss of a graph is the sum over
  its softmax ops of the mean over the N rows of ``-log p[n, label[n]]``.
* sgd_step: exactly ``torch.optim.SGD``; adam_step (:mod:`shardwise.reference.optim`):
  ``torch.optim.Adam`` and ``AdamW``.
* parameter: its output is its weight ``"<op>.weight"`` (any shape); the gradients
  of all its readers are summed into that weight.
* matmul: (M, K) @ (K, N), both operands data tensors (gradients flow to both).
* lstm_cell: c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g); lstm_hidden:
  h = sigmoid(o) * tanh(c), all (B, H) (the gate order of ``torch.nn.LSTM``'s equations).
* sigmoid, tanh, gelu (exact erf form, or the tanh approximation), silu, leaky_relu: PyTorch's definitions, in
  :mod:`shardwise.reference.activations` (re-exported here).
* dropout: inverted dropout with the counter-based mask of :mod:`shardwise.reference.dropout`
  (a function of the op's seed, the training step and the element's index); the identity in
  eval mode.

Whole graphs: :func:`forward` runs a :class:`~shardwise.graph.Graph` op by op
in its (topological) order, :func:`loss_and_grads` adds the backward pass in
reverse order, and :func:`sgd_step` updates a parameter dict in place.
Parameters are named ``"<op>.weight"`` and ``"<op>.bias"`` (see
:mod:`shardwise.train.init`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from shardwise.reference import activations as _act
from shardwise.reference import bcast as _bcast
from shardwise.reference import dropout as _drop
from shardwise.reference import seq as _seq
from shardwise.reference.activations import (gelu_backward, gelu_forward, leaky_relu_backward, leaky_relu_forward, sigmoid,
                                    sigmoid_backward, silu_backward, silu_forward, tanh_backward, tanh_forward)
from shardwise.reference.groupnorm import group_norm_backward, group_norm_forward
from shardwise.reference.conv import _out_size, _pad, _pair, _unpad, _window, conv2d_backward, conv2d_forward
from shardwise.reference.inputs import check_inputs as _check_inputs, compute_dtype as _dtype
from shardwise.reference.optim import adam_step, sgd_step
from shardwise.reference.seq import matmul_backward, matmul_forward
from shardwise.ops.builtin import BN_EPS

__all__ = [
    "conv2d_forward", "conv2d_backward", "pool2d_forward", "pool2d_backward",
    "relu_forward", "relu_backward", "add_forward", "add_backward",
    "batchnorm2d_forward", "batchnorm2d_backward", "concat_forward", "concat_backward",
    "flatten_forward", "flatten_backward", "linear_forward", "linear_backward",
    "softmax_forward", "softmax_backward", "cross_entropy", "softmax_cross_entropy_backward",
    "matmul_forward", "matmul_backward", "sigmoid", "lstm_cell_forward", "lstm_cell_backward",
    "lstm_hidden_forward", "lstm_hidden_backward",
    "sigmoid_backward", "tanh_forward", "tanh_backward", "gelu_forward", "gelu_backward", "silu_forward",
    "silu_backward", "leaky_relu_forward", "leaky_relu_backward",
    "forward", "loss_and_grads", "sgd_step", "adam_step", "BN_EPS",
]

# BN_EPS: the batch-normalization epsilon of the op (shardwise.ops.builtin), imported above


# ----------------------------------------------------------------------------------------------
# pool2d
# ----------------------------------------------------------------------------------------------
def pool2d_forward(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int],
                   padding: Sequence[int], kind: str) -> np.ndarray:
    """Max or average pooling, (N, C, H, W) -> (N, C, Ho, Wo).

    max: padding is -inf (never selected while a window holds a real pixel).
    avg: padding is 0 and the divisor is always kh * kw (count_include_pad=True).
    """
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel), _pair(stride), _pair(padding)
    n, c, h, wd = x.shape
    ho, wo = _out_size(h, kh, sh, ph), _out_size(wd, kw, sw, pw)
    if kind == "max":
        xp = _pad(x, ph, pw, -np.inf)
        y = np.full((n, c, ho, wo), -np.inf, dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                np.maximum(y, _window(xp, i, j, ho, wo, sh, sw), out=y)
        return y
    if kind == "avg":
        xp = _pad(x, ph, pw, 0.0)
        y = np.zeros((n, c, ho, wo), dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                y += _window(xp, i, j, ho, wo, sh, sw)
        return y / x.dtype.type(kh * kw)
    raise ValueError(f"unknown pool kind {kind!r}; expected 'max' or 'avg'")


def pool2d_backward(x: np.ndarray, dy: np.ndarray, kernel: Sequence[int], stride: Sequence[int],
                    padding: Sequence[int], kind: str) -> np.ndarray:
    """Gradient of pool2d with respect to x, (N, C, H, W).

    max: each window's gradient goes to its FIRST maximal element in row-major
    (i, j) order, found by visiting the offsets in that order and claiming a
    window the first time its maximum is met.
    avg: every element of a window gets dy / (kh * kw).
    """
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel), _pair(stride), _pair(padding)
    ho, wo = dy.shape[2], dy.shape[3]
    if kind == "max":
        y = pool2d_forward(x, kernel, stride, padding, "max")
        xp = _pad(x, ph, pw, -np.inf)
        dxp = np.zeros(xp.shape, dtype=dy.dtype)
        claimed = np.zeros(y.shape, dtype=bool)          # (N, C, Ho, Wo): window already routed
        for i in range(kh):
            for j in range(kw):
                hit = (_window(xp, i, j, ho, wo, sh, sw) == y) & ~claimed
                _window(dxp, i, j, ho, wo, sh, sw)[...] += np.where(hit, dy, 0)
                claimed |= hit
        return np.ascontiguousarray(_unpad(dxp, ph, pw))
    if kind == "avg":
        xp_shape = (x.shape[0], x.shape[1], x.shape[2] + 2 * ph, x.shape[3] + 2 * pw)
        dxp = np.zeros(xp_shape, dtype=dy.dtype)
        share = dy / dy.dtype.type(kh * kw)
        for i in range(kh):
            for j in range(kw):
                _window(dxp, i, j, ho, wo, sh, sw)[...] += share
        return np.ascontiguousarray(_unpad(dxp, ph, pw))
    raise ValueError(f"unknown pool kind {kind!r}; expected 'max' or 'avg'")


# ----------------------------------------------------------------------------------------------
# element-wise
# ----------------------------------------------------------------------------------------------
def relu_forward(x: np.ndarray) -> np.ndarray:
    """max(x, 0), any shape."""
    return np.maximum(x, x.dtype.type(0))


def relu_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy * (y > 0), from the ReLU's OUTPUT y (what a fused kernel keeps)."""
    return np.where(y > 0, dy, dy.dtype.type(0))


def add_forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b, same shapes (no broadcasting)."""
    assert a.shape == b.shape, f"add: shapes differ: {a.shape} vs {b.shape}"
    return a + b


def add_backward(dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both summands receive the whole gradient (copies, so callers may accumulate in place)."""
    return dy.copy(), dy.copy()


# ----------------------------------------------------------------------------------------------
# batchnorm2d (training mode)
# ----------------------------------------------------------------------------------------------
def batchnorm2d_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = BN_EPS
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training-mode batch normalization of (N, C, H, W) with batch statistics.

    mean[c] and the biased variance var[c] are taken over (N, H, W);
    y = (x - mean) * invstd * gamma + beta with invstd = 1 / sqrt(var + eps).
    Returns (y, mean (C,), invstd (C,)), the last two being what backward needs.
    """
    c = x.shape[1]
    mean = x.mean(axis=(0, 2, 3))
    xc = x - mean.reshape(1, c, 1, 1)
    var = (xc * xc).mean(axis=(0, 2, 3))
    invstd = x.dtype.type(1) / np.sqrt(var + x.dtype.type(eps))
    y = xc * (invstd * gamma).reshape(1, c, 1, 1) + beta.reshape(1, c, 1, 1)
    return y, mean, invstd


def batchnorm2d_backward(x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, mean: np.ndarray,
                         invstd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of training-mode batchnorm: dx (N, C, H, W), dgamma (C,), dbeta (C,).

    With xhat = (x - mean) * invstd and M = N*H*W elements per channel:
    dbeta = sum dy, dgamma = sum dy * xhat,
    dx = gamma * invstd / M * (M * dy - dbeta - xhat * dgamma)
    (the mean and variance depend on every x, hence the two correction terms).
    """
    n, c, h, w = x.shape
    m = x.dtype.type(n * h * w)
    xhat = (x - mean.reshape(1, c, 1, 1)) * invstd.reshape(1, c, 1, 1)
    dbeta = dy.sum(axis=(0, 2, 3))
    dgamma = (dy * xhat).sum(axis=(0, 2, 3))
    scale = (gamma * invstd / m).reshape(1, c, 1, 1)
    dx = scale * (m * dy - dbeta.reshape(1, c, 1, 1) - xhat * dgamma.reshape(1, c, 1, 1))
    return dx, dgamma, dbeta


# ----------------------------------------------------------------------------------------------
# shape ops
# ----------------------------------------------------------------------------------------------
def concat_forward(xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
    """The inputs side by side along ``axis``."""
    return np.concatenate(list(xs), axis=axis)


def concat_backward(dy: np.ndarray, sizes: Sequence[int], axis: int) -> list[np.ndarray]:
    """Split dy along ``axis`` into pieces of ``sizes`` (each input's extent on that axis)."""
    bounds = np.cumsum(list(sizes))[:-1]
    return [np.ascontiguousarray(part) for part in np.split(dy, bounds, axis=axis)]


def flatten_forward(x: np.ndarray) -> np.ndarray:
    """(N, ...) -> (N, prod(...)) in C order, as torch.flatten(x, 1)."""
    return x.reshape(x.shape[0], -1)


def flatten_backward(dy: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """(N, F) -> the input's shape."""
    return dy.reshape(tuple(shape))


# ----------------------------------------------------------------------------------------------
# linear
# ----------------------------------------------------------------------------------------------
def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """y = x @ w.T + b: x (N, I), w (O, I), b (O,) or None -> y (N, O)."""
    y = x @ w.T
    if b is not None:
        y = y + b
    return y


def linear_backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray, bias: bool = True
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """dx = dy @ w (N, I), dw = dy.T @ x (O, I), db = sum_n dy (O,) or None; (N, T, I) inputs
    flatten their leading dimensions into rows."""
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return dy @ w, dy2.T @ x2, (dy2.sum(axis=0) if bias else None)


# ----------------------------------------------------------------------------------------------
# softmax and cross-entropy
# ----------------------------------------------------------------------------------------------
def softmax_forward(x: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (N, C) (or (N, T, C)) over the last axis; the row max is subtracted first."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_backward(p: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """Gradient through softmax for an arbitrary upstream dp: p * (dp - sum_c dp * p).

    Only needed when a softmax output feeds other ops; the loss itself uses
    :func:`softmax_cross_entropy_backward`.
    """
    return p * (dp - (dp * p).sum(axis=1, keepdims=True))


def _check_labels(labels: Any, n: int, c: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be {n} integers, got shape {labels.shape} dtype {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= c):
        raise ValueError(f"labels must lie in [0, {c}), got values in [{labels.min()}, {labels.max()}]")
    return labels


def cross_entropy(p: np.ndarray, labels: np.ndarray) -> float:
    """Mean over the N rows of -log p[n, labels[n]], from probabilities p (N, C).

    Computed from p (what the softmax op outputs), not from the logits: the two
    agree to rounding unless a probability underflows, which training at sane
    learning rates never reaches.
    """
    n, c = p.shape
    labels = _check_labels(labels, n, c)
    return float(-np.log(p[np.arange(n), labels]).mean())


def softmax_cross_entropy_backward(p: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Gradient of the mean cross-entropy with respect to the softmax's LOGITS: (p - onehot) / N."""
    n, c = p.shape
    labels = _check_labels(labels, n, c)
    dx = p.copy()
    dx[np.arange(n), labels] -= 1
    return dx / p.dtype.type(n)


# ----------------------------------------------------------------------------------------------
# the LSTM element-wise ops (matmul, batched and with transposes: reference_seq)
# ----------------------------------------------------------------------------------------------
def lstm_cell_forward(i: np.ndarray, f: np.ndarray, g: np.ndarray, c_prev: np.ndarray) -> np.ndarray:
    """c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g), all (B, H)."""
    assert i.shape == f.shape == g.shape == c_prev.shape, "lstm_cell: input shapes differ"
    return sigmoid(f) * c_prev + sigmoid(i) * np.tanh(g)


def lstm_cell_backward(i: np.ndarray, f: np.ndarray, g: np.ndarray, c_prev: np.ndarray, dc: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (di, df, dg, dc_prev), all (B, H), from the inputs and dc.

    With s' = s (1 - s) for a sigmoid s and t' = 1 - t^2 for a tanh t:
    di = dc tanh(g) si', df = dc c_prev sf', dg = dc si (1 - tanh(g)^2), dc_prev = dc sf.
    """
    one = dc.dtype.type(1)
    si, sf, tg = sigmoid(i), sigmoid(f), np.tanh(g)
    return dc * tg * si * (one - si), dc * c_prev * sf * (one - sf), dc * si * (one - tg * tg), dc * sf


def lstm_hidden_forward(o: np.ndarray, c: np.ndarray) -> np.ndarray:
    """h = sigmoid(o) * tanh(c), both (B, H)."""
    assert o.shape == c.shape, "lstm_hidden: input shapes differ"
    return sigmoid(o) * np.tanh(c)


def lstm_hidden_backward(o: np.ndarray, c: np.ndarray, dh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradients (do, dc), both (B, H): do = dh tanh(c) so', dc = dh so (1 - tanh(c)^2)."""
    one = dh.dtype.type(1)
    so, tc = sigmoid(o), np.tanh(c)
    return dh * tc * so * (one - so), dh * so * (one - tc * tc)


# ----------------------------------------------------------------------------------------------
# whole graphs
# ----------------------------------------------------------------------------------------------
def _param(params: Mapping[str, np.ndarray], name: str, dtype: np.dtype) -> np.ndarray:
    try:
        p = params[name]
    except KeyError:
        raise KeyError(f"missing parameter {name!r}") from None
    return np.asarray(p, dtype=dtype)


def _has_bias(op: Any) -> bool:
    return bool(op.attrs.get("bias", True))


def _fused_relu(op: Any) -> bool:
    return op.attrs.get("activation") == "relu"


def _forward(graph: Any, params: Mapping[str, np.ndarray], x: np.ndarray, step: int = 0, training: bool = True
             ) -> tuple[dict[str, np.ndarray], dict[str, tuple]]:
    """Run the graph; returns the activations and, per batchnorm op, (mean, invstd).  Dropout
    draws the masks of training step ``step`` in train mode and is the identity otherwise."""
    xs = _check_inputs(graph, x)
    dtype = _dtype(graph, xs)
    acts: dict[str, np.ndarray] = {}
    saved: dict[str, tuple] = {}
    for op in graph.ops:
        ins = [acts[graph.ops[i].name] for i in op.inputs]
        a = op.attrs
        if op.kind == "input":
            y = xs[op.name]
        elif op.kind == "parameter":
            y = _param(params, f"{op.name}.weight", dtype)      # the weight itself, any shape
        elif op.kind == "matmul":
            y = _seq.matmul_forward(ins[0], ins[1], a.get("transpose_a", False), a.get("transpose_b", False))
        elif op.kind in _seq.SEQ_KINDS:
            y = _seq.op_forward(op, ins, params, dtype)
        elif op.kind == "lstm_cell":
            y = lstm_cell_forward(*ins)
        elif op.kind == "lstm_hidden":
            y = lstm_hidden_forward(*ins)
        elif op.kind == "conv2d":
            b = _param(params, f"{op.name}.bias", dtype) if _has_bias(op) else None
            y = conv2d_forward(ins[0], _param(params, f"{op.name}.weight", dtype), b, _pair(a["stride"]),
                               _pair(a["padding"]), a.get("dilation", 1), a.get("groups", 1))
        elif op.kind == "pool2d" and a.get("ceil_mode"):
            y = _bcast.max_pool_ceil_forward(ins[0], _pair(a["kernel"]), _pair(a["stride"]), _pair(a["padding"]),
                                             op.shape[2:])
        elif op.kind == "pool2d":
            y = pool2d_forward(ins[0], _pair(a["kernel"]), _pair(a["stride"]), _pair(a["padding"]), a["kind"])
        elif op.kind == "relu":
            y = relu_forward(ins[0])
        elif op.kind == "add":
            y = ins[0] + ins[1]   # the second may be broadcast over the first's leading dimensions
        elif op.kind == "batchnorm2d":
            y, mean, invstd = batchnorm2d_forward(ins[0], _param(params, f"{op.name}.weight", dtype),
                                                  _param(params, f"{op.name}.bias", dtype), a.get("eps", BN_EPS))
            saved[op.name] = (mean, invstd)
        elif op.kind == "group_norm":
            affine = a.get("affine", True)
            y = group_norm_forward(ins[0], a["groups"], a["eps"],
                                   _param(params, f"{op.name}.weight", dtype) if affine else None,
                                   _param(params, f"{op.name}.bias", dtype) if affine else None)
        elif op.kind == "concat":
            y = concat_forward(ins, a.get("axis", 1))
        elif op.kind == "flatten":
            y = flatten_forward(ins[0])
        elif op.kind == "linear":
            b = _param(params, f"{op.name}.bias", dtype) if _has_bias(op) else None
            y = linear_forward(ins[0], _param(params, f"{op.name}.weight", dtype), b)
        elif op.kind == "softmax":
            y = softmax_forward(ins[0])
        elif op.kind in _act.ACTIVATION_KINDS:
            y = _act.activation_forward(op.kind, ins[0], a)
        elif op.kind == "dropout":
            y = _drop.dropout_forward(ins[0], a["p"], a["seed"], step, training)
        elif op.kind in _bcast.BCAST_KINDS:
            y = _bcast.op_forward(op, ins, step, training)
        else:
            raise NotImplementedError(f"reference: no kernel for op kind {op.kind!r} (op {op.name!r})")
        if _fused_relu(op):
            y = relu_forward(y)
        acts[op.name] = y
    return acts, saved


def forward(graph: Any, params: Mapping[str, np.ndarray], x: Any, step: int = 0, training: bool = True
            ) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``x``: op name -> output activation (after a fused ReLU).

    A graph with one input op takes an array ``x``; any graph takes a dict
    {input op name: array} naming every input.  The batch size may differ from
    the graph's N.  Computation is in the inputs' dtype (parameters are cast to it).  Dropout
    uses the masks of step ``step`` when ``training``, else is the identity.
    """
    return _forward(graph, params, x, step, training)[0]


def loss_and_grads(graph: Any, params: Mapping[str, np.ndarray], x: Any, labels: np.ndarray, step: int = 0
                   ) -> tuple[float, dict[str, np.ndarray]]:
    """Loss and parameter gradients of one minibatch.

    loss = sum over every softmax op of the mean (over N) cross-entropy against
    ``labels``; grads has the keys and shapes of ``params`` (each in its
    parameter's dtype; zeros for a parameter the loss does not depend on).
    ``x`` is as for :func:`forward`; inputs get no gradient.  ``step``: the training step
    (steps completed before it), whose masks every dropout draws.
    """
    acts, saved = _forward(graph, params, x, step)
    dtype = _dtype(graph, {op.name: acts[op.name] for op in graph.ops if op.kind == "input"})
    names = {op.index: op.name for op in graph.ops}
    loss = 0.0
    grads = {k: np.zeros(np.shape(v), dtype=dtype) for k, v in params.items()}
    dacts: dict[str, np.ndarray] = {}   # op name -> gradient of the loss w.r.t. its output

    def send(index: int, g: np.ndarray) -> None:
        name = names[index]
        dacts[name] = dacts[name] + g if name in dacts else g

    def grad_param(name: str, g: np.ndarray | None) -> None:
        if g is not None:
            grads[name] = grads[name] + g

    for op in reversed(graph.ops):
        y = acts[op.name]
        dy = dacts.pop(op.name, None)
        if op.kind == "softmax":
            # The loss term of this softmax, plus whatever its consumers sent back (normally nothing).
            if y.ndim > 2:   # (N, T, C) logits: the mean over every (N, T) label
                loss += _seq.sequence_cross_entropy(y, labels)
                dx = _seq.sequence_cross_entropy_backward(y, labels)
            else:
                loss += cross_entropy(y, labels)
                dx = softmax_cross_entropy_backward(y, labels)
            if dy is not None:
                dx = dx + softmax_backward(y, dy)
            send(op.inputs[0], dx)
            continue
        if dy is None or op.kind == "input":
            continue   # does not reach a loss (or nothing left to do)
        if _fused_relu(op):
            dy = relu_backward(y, dy)
        ins = [acts[names[i]] for i in op.inputs]
        a = op.attrs
        if op.kind == "conv2d":
            dx, dw, db = conv2d_backward(ins[0], _param(params, f"{op.name}.weight", dtype), dy,
                                         _pair(a["stride"]), _pair(a["padding"]), bias=_has_bias(op),
                                         dilation=a.get("dilation", 1), groups=a.get("groups", 1))
            grad_param(f"{op.name}.weight", dw)
            grad_param(f"{op.name}.bias", db)
            send(op.inputs[0], dx)
        elif op.kind == "pool2d" and a.get("ceil_mode"):
            send(op.inputs[0], _bcast.max_pool_ceil_backward(ins[0], dy, _pair(a["kernel"]), _pair(a["stride"]),
                                                             _pair(a["padding"])))
        elif op.kind == "pool2d":
            send(op.inputs[0], pool2d_backward(ins[0], dy, _pair(a["kernel"]), _pair(a["stride"]),
                                               _pair(a["padding"]), a["kind"]))
        elif op.kind == "relu":
            send(op.inputs[0], relu_backward(y, dy))
        elif op.kind in _act.ACTIVATION_KINDS:
            send(op.inputs[0], _act.activation_backward(op.kind, ins[0], y, dy, a))
        elif op.kind == "dropout":
            send(op.inputs[0], _drop.dropout_backward(dy, a["p"], a["seed"], step))
        elif op.kind in _bcast.BCAST_KINDS:
            for src, g in zip(op.inputs, _bcast.op_backward(op, ins, dy, step)):
                send(src, g)
        elif op.kind == "add":
            da, db_ = _seq.add_backward(dy, ins[1].shape)
            send(op.inputs[0], da)
            send(op.inputs[1], db_)
        elif op.kind in _seq.SEQ_KINDS:
            dins, pgrads = _seq.op_backward(op, ins, y, dy, params, dtype)
            for src, g in zip(op.inputs, dins):
                if g is not None:
                    send(src, g)
            for k, g in pgrads.items():
                grad_param(k, g)
        elif op.kind == "batchnorm2d":
            mean, invstd = saved[op.name]
            dx, dgamma, dbeta = batchnorm2d_backward(ins[0], _param(params, f"{op.name}.weight", dtype),
                                                     dy, mean, invstd)
            grad_param(f"{op.name}.weight", dgamma)
            grad_param(f"{op.name}.bias", dbeta)
            send(op.inputs[0], dx)
        elif op.kind == "group_norm":
            affine = a.get("affine", True)
            dx, dw, db = group_norm_backward(ins[0], dy, a["groups"], a["eps"],
                                             _param(params, f"{op.name}.weight", dtype) if affine else None)
            if affine:
                grad_param(f"{op.name}.weight", dw)
                grad_param(f"{op.name}.bias", db)
            send(op.inputs[0], dx)
        elif op.kind == "concat":
            axis = a.get("axis", 1)
            for src, part in zip(op.inputs, concat_backward(dy, [t.shape[axis] for t in ins], axis)):
                send(src, part)
        elif op.kind == "flatten":
            send(op.inputs[0], flatten_backward(dy, ins[0].shape))
        elif op.kind == "linear":
            dx, dw, db = linear_backward(ins[0], _param(params, f"{op.name}.weight", dtype), dy,
                                         bias=_has_bias(op))
            grad_param(f"{op.name}.weight", dw)
            grad_param(f"{op.name}.bias", db)
            send(op.inputs[0], dx)
        elif op.kind == "parameter":
            grad_param(f"{op.name}.weight", dy)   # the sum over all its readers, gathered by send()
        elif op.kind == "matmul":
            for src, g in zip(op.inputs, _seq.matmul_backward(ins[0], ins[1], dy, a.get("transpose_a", False),
                                                              a.get("transpose_b", False))):
                send(src, g)
        elif op.kind in ("lstm_cell", "lstm_hidden"):
            back = lstm_cell_backward if op.kind == "lstm_cell" else lstm_hidden_backward
            for src, g in zip(op.inputs, back(*ins, dy)):
                send(src, g)
        else:
            raise NotImplementedError(f"reference: no backward for op kind {op.kind!r} (op {op.name!r})")
    grads = {k: np.asarray(g, dtype=np.asarray(params[k]).dtype) for k, g in grads.items()}
    return loss, grads
