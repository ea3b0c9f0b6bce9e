"""Plain NumPy forward and backward of the point-wise activations beside ReLU: part of the
numerics oracle (:mod:`shardwise.reference` dispatches to it and re-exports it).

PyTorch's definitions, element-wise on any shape, in the dtype of the inputs:

* sigmoid     y = 1 / (1 + exp(-x))              dx = dy * y * (1 - y)        (from the output)
* tanh        y = tanh(x)                        dx = dy * (1 - y**2)          (from the output)
* gelu        y = x * Phi(x)                     dx = dy * (Phi(x) + x * phi(x))
* gelu (approximate="tanh")  y = x (1 + tanh(u)) / 2, u = sqrt(2 / pi) (x + 0.044715 x**3)
* silu        y = x * sigmoid(x)                 dx = dy * s * (1 + x * (1 - s)), s = sigmoid(x)
* leaky_relu  y = x if x > 0 else slope * x      dx = dy if x > 0 else slope * dy
* clip        y = min(max(x, lo), hi)            dx = dy where lo < x < hi, else 0
* hardsigmoid y = min(max(x + 3, 0), 6) / 6      dx = dy / 6 where -3 < x < 3, else 0
* hardswish   y = x * hardsigmoid(x)             dx = 0 (x <= -3), dy (x / 3 + 1/2) (x < 3), dy

with Phi the standard normal CDF, (1 + erf(x / sqrt 2)) / 2, the exact form of
``torch.nn.GELU()``, and phi its density.  NumPy has no erf, so Phi is ``math.erf`` per
element: slow, and obviously right.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["ACTIVATION_KINDS", "sigmoid", "sigmoid_backward", "tanh_forward", "tanh_backward", "gelu_forward",
           "gelu_backward", "gelu_tanh_forward", "gelu_tanh_backward", "silu_forward", "silu_backward", "leaky_relu_forward", "leaky_relu_backward",
           "clip_forward", "clip_backward", "hardsigmoid_forward", "hardsigmoid_backward", "hardswish_forward",
           "hardswish_backward",
           "activation_forward", "activation_backward"]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) without overflow warnings: exp of a non-positive number only."""
    e = np.exp(-np.abs(x))
    one = x.dtype.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e))


def sigmoid_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy * y * (1 - y), from the sigmoid's OUTPUT y."""
    return dy * y * (y.dtype.type(1) - y)


def tanh_forward(x: np.ndarray) -> np.ndarray:
    return np.tanh(x)


def tanh_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy * (1 - y**2), from the tanh's OUTPUT y."""
    return dy * (y.dtype.type(1) - y * y)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, computed in float64, returned in x's dtype."""
    return (0.5 * (1.0 + _erf(x.astype(np.float64) / math.sqrt(2.0)))).astype(x.dtype)


def gelu_forward(x: np.ndarray) -> np.ndarray:
    """x * Phi(x): GELU's exact (erf) form."""
    return x * _normal_cdf(x)


def gelu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy * (Phi(x) + x * phi(x)), phi(x) = exp(-x**2 / 2) / sqrt(2 pi), from the INPUT x."""
    pdf = (np.exp(-0.5 * x.astype(np.float64) ** 2) / math.sqrt(2.0 * math.pi)).astype(x.dtype)
    return dy * (_normal_cdf(x) + x * pdf)


_GELU_TANH_B = math.sqrt(2.0 / math.pi)
_GELU_TANH_K = 0.044715


def gelu_tanh_forward(x: np.ndarray) -> np.ndarray:
    """x * (1 + tanh(u)) / 2 with u = sqrt(2 / pi) * (x + 0.044715 x**3): GELU's tanh
    approximation (``approximate="tanh"``), computed in float64, returned in x's dtype."""
    v = x.astype(np.float64)
    return (0.5 * v * (1.0 + np.tanh(_GELU_TANH_B * (v + _GELU_TANH_K * v ** 3)))).astype(x.dtype)


def gelu_tanh_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy * ((1 + t) / 2 + x (1 - t**2) u' / 2), t = tanh(u), u' = sqrt(2 / pi) (1 + 3 * 0.044715 x**2),
    from the INPUT x (float64 inside)."""
    v = x.astype(np.float64)
    t = np.tanh(_GELU_TANH_B * (v + _GELU_TANH_K * v ** 3))
    slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * _GELU_TANH_B * (1.0 + 3.0 * _GELU_TANH_K * v * v)
    return (dy.astype(np.float64) * slope).astype(dy.dtype)


def silu_forward(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    return x * sigmoid(x)


def silu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy * s * (1 + x * (1 - s)) with s = sigmoid(x), from the INPUT x."""
    s = sigmoid(x)
    one = x.dtype.type(1)
    return dy * s * (one + x * (one - s))


def leaky_relu_forward(x: np.ndarray, negative_slope: float = 0.01) -> np.ndarray:
    """x where x > 0, else negative_slope * x."""
    return np.where(x > 0, x, x * x.dtype.type(negative_slope))


def leaky_relu_backward(x: np.ndarray, dy: np.ndarray, negative_slope: float = 0.01) -> np.ndarray:
    """dx = dy where x > 0, else negative_slope * dy, from the INPUT x."""
    return np.where(x > 0, dy, dy * dy.dtype.type(negative_slope))


def clip_forward(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """min(max(x, lo), hi) (torch.nn.Hardtanh, torch.clamp)."""
    t = x.dtype.type
    return np.minimum(np.maximum(x, t(np.float32(lo))), t(np.float32(hi)))


def clip_backward(x: np.ndarray, dy: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """dx = dy where lo < x < hi, else 0 (Hardtanh's gradient: none at the bounds)."""
    t = x.dtype.type
    return np.where((x > t(np.float32(lo))) & (x < t(np.float32(hi))), dy, dy.dtype.type(0))


def hardsigmoid_forward(x: np.ndarray) -> np.ndarray:
    """min(max(x + 3, 0), 6) / 6 (torch.nn.Hardsigmoid)."""
    t = x.dtype.type
    return np.minimum(np.maximum(x + t(3), t(0)), t(6)) / t(6)


def hardsigmoid_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = dy / 6 where -3 < x < 3, else 0."""
    t = x.dtype.type
    return np.where((x > t(-3)) & (x < t(3)), dy / t(6), dy.dtype.type(0))


def hardswish_forward(x: np.ndarray) -> np.ndarray:
    """x * min(max(x + 3, 0), 6) / 6 (torch.nn.Hardswish)."""
    return x * hardsigmoid_forward(x)


def hardswish_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dx = 0 for x <= -3, dy (x / 3 + 1/2) for -3 < x < 3, dy from 3 on (PyTorch's)."""
    t = x.dtype.type
    return np.where(x <= t(-3), dy.dtype.type(0), np.where(x < t(3), dy * (x / t(3) + t(0.5)), dy))


# kind -> (forward(x, attrs), backward(x, y, dy, attrs)); attrs are the graph op's attributes
_TABLE: dict[str, tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]] = {
    "sigmoid": (lambda x, a: sigmoid(x), lambda x, y, dy, a: sigmoid_backward(y, dy)),
    "tanh": (lambda x, a: tanh_forward(x), lambda x, y, dy, a: tanh_backward(y, dy)),
    "gelu": (lambda x, a: gelu_tanh_forward(x) if a.get("approximate") == "tanh" else gelu_forward(x),
             lambda x, y, dy, a: gelu_tanh_backward(x, dy) if a.get("approximate") == "tanh" else gelu_backward(x, dy)),
    "silu": (lambda x, a: silu_forward(x), lambda x, y, dy, a: silu_backward(x, dy)),
    "leaky_relu": (lambda x, a: leaky_relu_forward(x, a.get("negative_slope", 0.01)),
                   lambda x, y, dy, a: leaky_relu_backward(x, dy, a.get("negative_slope", 0.01))),
    "clip": (lambda x, a: clip_forward(x, a["lo"], a["hi"]),
             lambda x, y, dy, a: clip_backward(x, dy, a["lo"], a["hi"])),
    "hardsigmoid": (lambda x, a: hardsigmoid_forward(x), lambda x, y, dy, a: hardsigmoid_backward(x, dy)),
    "hardswish": (lambda x, a: hardswish_forward(x), lambda x, y, dy, a: hardswish_backward(x, dy)),
}
ACTIVATION_KINDS = frozenset(_TABLE)
"""The graph op kinds this module computes."""


def activation_forward(kind: str, x: np.ndarray, attrs: Mapping[str, Any] | None = None) -> np.ndarray:
    """y = f(x) for the activation op ``kind`` with the graph op's ``attrs`` (leaky_relu's slope)."""
    return _TABLE[kind][0](x, attrs or {})


def activation_backward(kind: str, x: np.ndarray, y: np.ndarray, dy: np.ndarray,
                        attrs: Mapping[str, Any] | None = None) -> np.ndarray:
    """dx from the forward input x, output y and the output's gradient dy."""
    return _TABLE[kind][1](x, y, dy, attrs or {})
