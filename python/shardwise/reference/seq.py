"""NumPy reference of the sequence-model ops (transformers): forward and backward passes.

Plain NumPy in the inputs' dtype (float64 for the finite-difference checks), written
from the definitions, with no shardwise code in the loop: the tests hold the C kernels
and whole-graph training against these, and these against PyTorch.

    layer_norm   y = (x - mean) / sqrt(var + eps) * w + b over the last axis (biased var)
    rms_norm     y = x / sqrt(mean(x^2) + eps) * w over the last axis
    embedding    y[..., :] = W[ids[...]]   (W the op's weight, or its second input: a shared parameter op's table)
    softmax_dim  p = softmax(scale * x, dim), causal: key j > query i masked out
    rotary       y = x cos(t f) + rotate_half(x) sin(t f) along the last axis, t the position (axis -2)
    matmul       y = op(a) @ op(b) over leading batch dimensions
    reshape, permute, select: NumPy's, and their inverses for the gradient
    add          a + b, b broadcast over a's leading dimensions
    loss         mean over all N*T rows of -log softmax(logits)[label]
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np


def layer_norm_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def layer_norm_backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray, eps: float = 1e-5
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dw, db) of :func:`layer_norm_forward`."""
    d = x.shape[-1]
    mean = x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * inv
    g = dy * w
    dx = inv * (g - g.sum(axis=-1, keepdims=True) / d - xhat * (g * xhat).sum(axis=-1, keepdims=True) / d)
    lead = tuple(range(x.ndim - 1))
    return dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)


def rms_norm_forward(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def rms_norm_backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dw) of :func:`rms_norm_forward`: dx = inv * (g - xhat * sum(g * xhat) / D), g = dy * w."""
    d = x.shape[-1]
    inv = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    xhat = x * inv
    g = dy * w
    dx = inv * (g - xhat * (g * xhat).sum(axis=-1, keepdims=True) / d)
    return dx, (dy * xhat).sum(axis=tuple(range(x.ndim - 1)))


def rotary_angles(t: int, dh: int, base: float) -> np.ndarray:
    """(T, Dh) angles t f_j with f_j = base^(-2 (j mod Dh/2) / Dh) (RoPE, rotate-half layout)."""
    f = base ** (-2.0 * (np.arange(dh) % (dh // 2)) / dh)
    return np.arange(t)[:, None] * f[None, :]


def rotate_half(x: np.ndarray) -> np.ndarray:
    """(-x2, x1) of the halves (x1, x2) of the last axis."""
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rotary_forward(x: np.ndarray, base: float) -> np.ndarray:
    a = rotary_angles(x.shape[-2], x.shape[-1], base)
    return x * np.cos(a) + rotate_half(x) * np.sin(a)


def rotary_backward(dy: np.ndarray, base: float) -> np.ndarray:
    """dx of :func:`rotary_forward`: the transpose of rotate_half is -rotate_half."""
    a = rotary_angles(dy.shape[-2], dy.shape[-1], base)
    return dy * np.cos(a) - rotate_half(dy * np.sin(a))


def embedding_forward(ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    return w[np.asarray(ids, dtype=np.int64)]


def embedding_backward(ids: np.ndarray, w_shape: tuple[int, ...], dy: np.ndarray) -> np.ndarray:
    """dW: every row of dy added to its id's row."""
    dw = np.zeros(w_shape, dtype=dy.dtype)
    np.add.at(dw, np.asarray(ids, dtype=np.int64).reshape(-1), dy.reshape(-1, w_shape[1]))
    return dw


def _causal_mask(shape: tuple[int, ...]) -> np.ndarray:
    """True where key j > query i over the last two dimensions."""
    tq, tk = shape[-2], shape[-1]
    return np.arange(tk)[None, :] > np.arange(tq)[:, None]


def softmax_dim_forward(x: np.ndarray, dim: int, scale: float = 1.0, causal: bool = False) -> np.ndarray:
    z = scale * x
    if causal:
        z = np.where(_causal_mask(x.shape), -np.inf, z)
    z = z - z.max(axis=dim, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=dim, keepdims=True)


def softmax_dim_backward(p: np.ndarray, dy: np.ndarray, dim: int, scale: float = 1.0) -> np.ndarray:
    """dx = scale * p * (dy - sum(dy * p)) along ``dim`` (masked entries have p = 0)."""
    return scale * p * (dy - (dy * p).sum(axis=dim, keepdims=True))


def _op(a: np.ndarray, transpose: bool) -> np.ndarray:
    return np.swapaxes(a, -1, -2) if transpose else a


def matmul_forward(a: np.ndarray, b: np.ndarray, transpose_a: bool = False, transpose_b: bool = False
                   ) -> np.ndarray:
    return _op(a, transpose_a) @ _op(b, transpose_b)


def matmul_backward(a: np.ndarray, b: np.ndarray, dy: np.ndarray, transpose_a: bool = False,
                    transpose_b: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(da, db) in the operands' own layouts."""
    da = dy @ np.swapaxes(_op(b, transpose_b), -1, -2)
    db = np.swapaxes(_op(a, transpose_a), -1, -2) @ dy
    return _op(da, transpose_a), _op(db, transpose_b)


def add_forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def add_backward(dy: np.ndarray, b_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(da, db): db summed over the leading dimensions b lacks."""
    lead = dy.ndim - len(b_shape)
    return dy, dy.sum(axis=tuple(range(lead))) if lead else dy


def sequence_cross_entropy(p: np.ndarray, labels: np.ndarray) -> float:
    """Mean over every row (N, or N*T) of -log p[row, label]: torch.nn.functional.cross_entropy."""
    c = p.shape[-1]
    rows = p.reshape(-1, c)
    lab = np.asarray(labels, dtype=np.int64).reshape(-1)
    if rows.shape[0] != lab.size or lab.min() < 0 or lab.max() >= c:
        raise ValueError(f"labels {np.shape(labels)} do not fit logits {p.shape}")
    return float(-np.log(rows[np.arange(lab.size), lab]).mean())


def sequence_cross_entropy_backward(p: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """d loss / d logits = (p - onehot) / rows."""
    c = p.shape[-1]
    rows = p.reshape(-1, c).copy()
    lab = np.asarray(labels, dtype=np.int64).reshape(-1)
    rows[np.arange(lab.size), lab] -= 1.0
    return (rows / lab.size).reshape(p.shape)


# ---- whole-graph hooks (reference.py): op kind -> forward(op, inputs, params) and
# backward(op, inputs, output, dy, params) -> (input gradients, {parameter name: gradient})
Params = Mapping[str, np.ndarray]


def _forward(op: Any, ins: list[np.ndarray], param: Callable[[str], np.ndarray]) -> np.ndarray:
    a = op.attrs
    if op.kind == "layer_norm":
        return layer_norm_forward(ins[0], param("weight"), param("bias"), a["eps"])
    if op.kind == "rms_norm":
        return rms_norm_forward(ins[0], param("weight"), a["eps"])
    if op.kind == "embedding":   # the table: a data input (a shared parameter op's) or the op's weight
        return embedding_forward(ins[0], ins[1] if len(ins) > 1 else param("weight"))
    if op.kind == "softmax_dim":
        return softmax_dim_forward(ins[0], a["dim"], a["scale"], a["causal"])
    if op.kind == "reshape":
        if ins[0].shape == tuple(op.desc.inputs[0].shape):   # the graph's own shapes: a parameter's too,
            return ins[0].reshape(a["shape"])                # whose first dimension is no batch
        return ins[0].reshape((ins[0].shape[0],) + tuple(a["shape"][1:]))   # another batch size
    if op.kind == "permute":
        return np.transpose(ins[0], a["dims"])
    if op.kind == "select":
        return np.take(ins[0], a["index"], axis=a["dim"])
    if op.kind == "rotary":
        return rotary_forward(ins[0], a["base"])
    raise NotImplementedError(op.kind)


def _backward(op: Any, ins: list[np.ndarray], y: np.ndarray, dy: np.ndarray, param: Callable[[str], np.ndarray]
              ) -> tuple[list[np.ndarray | None], dict[str, np.ndarray]]:
    a = op.attrs
    if op.kind == "layer_norm":
        dx, dw, db = layer_norm_backward(ins[0], param("weight"), dy, a["eps"])
        return [dx], {"weight": dw, "bias": db}
    if op.kind == "rms_norm":
        dx, dw = rms_norm_backward(ins[0], param("weight"), dy, a["eps"])
        return [dx], {"weight": dw}
    if op.kind == "embedding":
        if len(ins) > 1:   # the table's gradient flows to the parameter op that produced it
            return [None, embedding_backward(ins[0], ins[1].shape, dy)], {}
        return [None], {"weight": embedding_backward(ins[0], param("weight").shape, dy)}
    if op.kind == "softmax_dim":
        return [softmax_dim_backward(y, dy, a["dim"], a["scale"])], {}
    if op.kind == "reshape":
        return [dy.reshape(ins[0].shape)], {}
    if op.kind == "permute":
        return [np.transpose(dy, np.argsort(a["dims"]))], {}
    if op.kind == "select":
        dx = np.zeros(ins[0].shape, dtype=dy.dtype)
        index: list = [slice(None)] * dx.ndim
        index[a["dim"]] = a["index"]
        dx[tuple(index)] = dy
        return [dx], {}
    if op.kind == "rotary":
        return [rotary_backward(dy, a["base"])], {}
    raise NotImplementedError(op.kind)


SEQ_KINDS = frozenset({"layer_norm", "rms_norm", "embedding", "softmax_dim", "reshape", "permute", "select",
                       "rotary"})
"""The graph op kinds whose whole-graph forward and backward this module computes."""


def op_forward(op: Any, ins: list[np.ndarray], params: Params, dtype: np.dtype) -> np.ndarray:
    """The output of graph op ``op`` (a kind in :data:`SEQ_KINDS`) from its inputs."""
    return _forward(op, ins, lambda p: np.asarray(params[f"{op.name}.{p}"], dtype=dtype))


def op_backward(op: Any, ins: list[np.ndarray], y: np.ndarray, dy: np.ndarray, params: Params, dtype: np.dtype
                ) -> tuple[list[np.ndarray | None], dict[str, np.ndarray]]:
    """(gradient per data input (None: none flows), {"<op>.<param>": gradient})."""
    grads, pgrads = _backward(op, ins, y, dy, lambda p: np.asarray(params[f"{op.name}.{p}"], dtype=dtype))
    return grads, {f"{op.name}.{k}": v for k, v in pgrads.items()}
