"""NumPy reference of group normalization (``torch.nn.GroupNorm``), from the definition:

    per sample n and group g of cg = C / groups consecutive channels, over its cg * H * W elements
    xhat = (x - mean) / sqrt(var + eps)       (biased variance)
    y[n, c] = xhat[n, c] * w[c] + b[c]        (affine; y = xhat without)

and its gradients, written with the group as the trailing axis of a (N, G, cg * H * W) view:
dx = invstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, dw[c] = sum over n, h, w of
dy * xhat, db[c] = sum of dy.  In the dtype of the inputs (float64 for the tests' reference).
"""
from __future__ import annotations

import numpy as np

__all__ = ["group_norm_forward", "group_norm_backward"]


def _grouped(x: np.ndarray, groups: int) -> np.ndarray:
    return x.reshape(x.shape[0], groups, -1)


def _xhat(x: np.ndarray, groups: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(xhat, invstd) in the (N, G, cg * H * W) view."""
    xg = _grouped(x, groups)
    mean = xg.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((xg - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    return (xg - mean) * inv, inv


def _per_channel(v: np.ndarray) -> np.ndarray:
    return v.reshape(1, -1, 1, 1)


def group_norm_forward(x: np.ndarray, groups: int, eps: float, w: np.ndarray | None = None,
                       b: np.ndarray | None = None) -> np.ndarray:
    xhat = _xhat(x, groups, eps)[0].reshape(x.shape)
    return xhat if w is None else xhat * _per_channel(w) + _per_channel(b)


def group_norm_backward(x: np.ndarray, dy: np.ndarray, groups: int, eps: float, w: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(dx, dw, db); dw and db are None without affine (``w`` None)."""
    xhat, inv = _xhat(x, groups, eps)
    g = _grouped(dy if w is None else dy * _per_channel(w), groups)
    dx = inv * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    if w is None:
        return dx.reshape(x.shape), None, None
    return dx.reshape(x.shape), (dy * xhat.reshape(x.shape)).sum(axis=(0, 2, 3)), dy.sum(axis=(0, 2, 3))
