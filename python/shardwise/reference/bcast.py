"""NumPy reference of the broadcasting and slicing ops (shardwise.ops.bcast) and of max
pooling in ceil mode: what the CPU kernels must compute, written as plainly as NumPy allows
(broadcasting, slicing, np.repeat), independent of the ops' index maps."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from shardwise.reference.dropout import _scale, dropout_mask

BCAST_KINDS = frozenset({"mul", "broadcast_add", "expand", "slice", "stochastic_depth", "upsample_nearest",
                         "adaptive_avg_pool2d", "upsample_bilinear"})
"""The graph op kinds whose forward and backward this module computes."""


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The gradient of a tensor of ``shape`` broadcast to g's shape: g summed over the
    dimensions it was stretched along."""
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(d for d, s in enumerate(shape) if s == 1 and g.shape[d] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _slices(op: Any, rank: int) -> tuple[slice, ...]:
    a = op.attrs
    return tuple(slice(a["start"], a["stop"], a["step"]) if d == a["dim"] else slice(None) for d in range(rank))


def stochastic_depth_factor(n: int, p: float, seed: int, step: int, row: bool, dtype: Any) -> np.ndarray:
    """Per sample, 0 or 1 / (1 - p): dropout's draws at the sample's index (row mode) or at
    index 0 for all (batch mode)."""
    keep = dropout_mask((n,), p, seed, step) if row else np.repeat(dropout_mask((1,), p, seed, step), n)
    return np.where(keep, _scale(p, dtype), np.dtype(dtype).type(0))


def op_forward(op: Any, ins: list[np.ndarray], step: int = 0, training: bool = True) -> np.ndarray:
    a = op.attrs
    if op.kind == "mul":
        return ins[0] * ins[1]
    if op.kind == "broadcast_add":
        return ins[0] + ins[1]
    if op.kind == "expand":
        return np.ascontiguousarray(np.broadcast_to(ins[0], a["shape"]))
    if op.kind == "slice":
        return np.ascontiguousarray(ins[0][_slices(op, ins[0].ndim)])
    if op.kind == "stochastic_depth":
        x = ins[0]
        if not training:
            return x
        f = stochastic_depth_factor(x.shape[0], a["p"], a["seed"], step, a.get("mode", "row") == "row", x.dtype)
        return x * f.reshape((-1,) + (1,) * (x.ndim - 1))
    if op.kind == "upsample_nearest":
        sh, sw = a["scale"]
        return np.repeat(np.repeat(ins[0], sh, axis=2), sw, axis=3)
    if op.kind == "adaptive_avg_pool2d":
        return adaptive_avg_pool2d_forward(ins[0], a["output_size"])
    if op.kind == "upsample_bilinear":
        my, mx = bilinear_matrix(ins[0].shape[2], a["scale"][0]), bilinear_matrix(ins[0].shape[3], a["scale"][1])
        return np.einsum("yh,nchw,xw->ncyx", my, ins[0], mx)
    raise NotImplementedError(op.kind)


def bilinear_matrix(size: int, scale: int) -> np.ndarray:
    """(size * scale, size): row y holds the weights of PyTorch's align_corners=False bilinear
    interpolation, src = max((y + 1/2) / scale - 1/2, 0) between floor(src) and the next."""
    m = np.zeros((size * scale, size))
    for y in range(size * scale):
        src = max((y + 0.5) / scale - 0.5, 0.0)
        i0 = min(int(np.floor(src)), size - 1)
        i1 = min(i0 + 1, size - 1)
        lam = src - i0
        m[y, i0] += 1.0 - lam
        m[y, i1] += lam
    return m


def _windows(size: int, out: int) -> list[tuple[int, int]]:
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def adaptive_avg_pool2d_forward(x: np.ndarray, out: Sequence[int]) -> np.ndarray:
    """PyTorch's adaptive average pooling, window by window."""
    n, c, h, w = x.shape
    y = np.zeros((n, c, out[0], out[1]), x.dtype)
    for i, (h0, h1) in enumerate(_windows(h, out[0])):
        for j, (w0, w1) in enumerate(_windows(w, out[1])):
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return y


def adaptive_avg_pool2d_backward(dy: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    dx = np.zeros(shape, dy.dtype)
    for i, (h0, h1) in enumerate(_windows(shape[2], dy.shape[2])):
        for j, (w0, w1) in enumerate(_windows(shape[3], dy.shape[3])):
            dx[:, :, h0:h1, w0:w1] += (dy[:, :, i, j] / ((h1 - h0) * (w1 - w0)))[:, :, None, None]
    return dx


def op_backward(op: Any, ins: list[np.ndarray], dy: np.ndarray, step: int = 0) -> list[np.ndarray]:
    """The gradient of each data input."""
    a = op.attrs
    if op.kind == "mul":
        return [unbroadcast(dy * ins[1], ins[0].shape), unbroadcast(dy * ins[0], ins[1].shape)]
    if op.kind == "broadcast_add":
        return [unbroadcast(dy, ins[0].shape), unbroadcast(dy, ins[1].shape)]
    if op.kind == "expand":
        return [unbroadcast(dy, ins[0].shape)]
    if op.kind == "slice":
        dx = np.zeros(ins[0].shape, dy.dtype)
        dx[_slices(op, dx.ndim)] = dy
        return [dx]
    if op.kind == "stochastic_depth":
        return [op_forward(op, [dy], step, training=True)]
    if op.kind == "upsample_nearest":
        sh, sw = a["scale"]
        n, c, h, w = ins[0].shape
        return [dy.reshape(n, c, h, sh, w, sw).sum(axis=(3, 5))]
    if op.kind == "adaptive_avg_pool2d":
        return [adaptive_avg_pool2d_backward(dy, ins[0].shape)]
    if op.kind == "upsample_bilinear":
        my, mx = bilinear_matrix(ins[0].shape[2], a["scale"][0]), bilinear_matrix(ins[0].shape[3], a["scale"][1])
        return [np.einsum("yh,ncyx,xw->nchw", my, dy, mx).astype(dy.dtype)]
    raise NotImplementedError(op.kind)


def _ceil_windows(x: np.ndarray, kernel, stride, padding, out: Sequence[int]) -> tuple[np.ndarray, list]:
    """x padded with -inf (the padding, and the rows and columns the last partial windows reach
    past the input) and, per window offset (i, j) in row-major order, its (N, C, Ho, Wo) view."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    ho, wo = out
    eh = max(0, (ho - 1) * sh + kh - ph - x.shape[2])
    ew = max(0, (wo - 1) * sw + kw - pw - x.shape[3])
    xp = np.pad(x, ((0, 0), (0, 0), (ph, eh), (pw, ew)), constant_values=-np.inf)
    views = [(i, j, xp[:, :, i:i + (ho - 1) * sh + 1:sh, j:j + (wo - 1) * sw + 1:sw])
             for i in range(kh) for j in range(kw)]
    return xp, views


def max_pool_ceil_forward(x: np.ndarray, kernel, stride, padding, out: Sequence[int]) -> np.ndarray:
    """Max pooling with PyTorch's ceil-mode output size ``out``: partial windows take the max
    of what lies inside the input."""
    _, views = _ceil_windows(x, kernel, stride, padding, out)
    y = views[0][2].copy()
    for _, _, v in views[1:]:
        np.maximum(y, v, out=y)
    return y


def max_pool_ceil_backward(x: np.ndarray, dy: np.ndarray, kernel, stride, padding) -> np.ndarray:
    """Each window's gradient to its first maximal element in row-major window order."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    ho, wo = dy.shape[2:]
    y = max_pool_ceil_forward(x, kernel, stride, padding, (ho, wo))
    xp, views = _ceil_windows(x, kernel, stride, padding, (ho, wo))
    dxp = np.zeros(xp.shape, dy.dtype)
    claimed = np.zeros(y.shape, bool)
    for i, j, v in views:
        hit = (v == y) & ~claimed
        dxp[:, :, i:i + (ho - 1) * sh + 1:sh, j:j + (wo - 1) * sw + 1:sw] += np.where(hit, dy, 0)
        claimed |= hit
    return np.ascontiguousarray(dxp[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]])
