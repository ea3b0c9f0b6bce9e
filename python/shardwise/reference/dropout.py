"""Plain NumPy dropout with the counter-based mask of csrc/cpu/dropout.c: part of the numerics
oracle (:mod:`shardwise.reference` dispatches to it).

Element ``i`` (its row-major index in the whole tensor) of a dropout with probability ``p``
and seed ``seed`` is kept at training step ``step`` (the steps completed before it) when

    stream = mix(seed + G * (step + 1))              (all arithmetic mod 2**64)
    u      = mix(stream + G * (i + 1)) >> 40          (24 uniform bits)
    keep   = u >= round(p * 2**24)

with ``G = 0x9E3779B97F4A7C15`` and ``mix`` the splitmix64 finalizer.  Kept values are
scaled by ``1 / (1 - p)`` (inverted dropout, as ``torch.nn.Dropout``), in the dtype of the
input; the gradient goes through the same mask and scale.  In eval mode dropout is the
identity.  The mask is a function of (seed, step, i) alone, which is what lets every plan
draw the same one; it is not PyTorch's random stream, so a model with dropout trains like
PyTorch only in expectation.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["dropout_mask", "dropout_forward", "dropout_backward"]

_G = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on uint64 arrays (NumPy's uint64 products wrap mod 2**64)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def dropout_mask(shape: tuple[int, ...], p: float, seed: int, step: int) -> np.ndarray:
    """The boolean keep-mask of a whole tensor of ``shape`` (True: kept)."""
    with np.errstate(over="ignore"):
        stream = _mix(np.array([seed], np.uint64) + _G * np.uint64(step + 1))
        index = np.arange(1, int(np.prod(shape)) + 1, dtype=np.uint64)
        u = _mix(stream + _G * index) >> np.uint64(40)
    threshold = np.uint64(math.floor(float(np.float32(p)) * 2**24 + 0.5))   # C's llround: halves away from 0
    return (u >= threshold).reshape(shape)


def _scale(p: float, dtype: np.dtype) -> np.generic:
    """1 / (1 - p) as the kernels compute it: p read as a float32, the quotient in double."""
    return np.dtype(dtype).type(1.0 / (1.0 - float(np.float32(p))))


def dropout_forward(x: np.ndarray, p: float, seed: int, step: int, training: bool = True) -> np.ndarray:
    """x * mask / (1 - p) in train mode; x in eval mode."""
    if not training:
        return x
    return np.where(dropout_mask(x.shape, p, seed, step), x * _scale(p, x.dtype), x.dtype.type(0))


def dropout_backward(dy: np.ndarray, p: float, seed: int, step: int) -> np.ndarray:
    """dy through the forward's mask and scale (a training step)."""
    return dropout_forward(dy, p, seed, step, training=True)
