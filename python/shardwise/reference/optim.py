"""NumPy reference of SGD, Adam and AdamW (``torch.optim``), the oracles of the
runtime's update kernels (csrc/cpu/optim.c); re-exported by :mod:`shardwise.reference`.

    state: dict = {}
    adam_step(params, grads, state, lr=1e-3)                         # Adam, in place
    adam_step(params, grads, state, lr=1e-3, weight_decay=0.01, decoupled=True)   # AdamW

It is written from the algorithm of Kingma and Ba as PyTorch documents it, in the
parameters' dtype (float32 for the trainer), with the scalars of a step in Python
floats as PyTorch computes them.  For each parameter p with gradient g at step t:

    Adam:  g = g + weight_decay * p          AdamW:  p = p * (1 - lr * weight_decay)
    m = m + (1 - beta1) * (g - m)            (torch's lerp toward g)
    v = beta2 * v + (1 - beta2) * g * g
    p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

__all__ = ["adam_step", "sgd_step"]


def adam_step(params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray], state: dict[str, Any],
              lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 0.0, decoupled: bool = False) -> None:
    """One step of Adam (``decoupled=False``) or AdamW (``decoupled=True``), in place on
    ``params`` and ``state`` ({name: (step, m, v)}, filled on first use as PyTorch's
    optimizer state: m and v start at zero, the step at 0)."""
    beta1, beta2 = betas
    if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0) or not eps > 0 or lr < 0 or weight_decay < 0:
        raise ValueError(f"Adam needs betas in [0, 1), eps > 0, lr and weight_decay >= 0; got {betas}, {eps}, "
                         f"{lr}, {weight_decay}")
    for name, p in params.items():
        f = p.dtype.type
        g = np.asarray(grads[name], dtype=p.dtype)
        step, m, v = state.get(name) or (0, np.zeros_like(p), np.zeros_like(p))
        step += 1
        if weight_decay != 0:
            if decoupled:
                p *= f(1 - lr * weight_decay)
            else:
                g = g + f(weight_decay) * p
        w = f(1 - beta1)
        m[...] = m + w * (g - m) if w < 0.5 else g - (g - m) * (f(1) - w)
        v[...] = v * f(beta2) + f(1 - beta2) * g * g
        step_size = lr / (1 - beta1 ** step)
        denom = np.sqrt(v) / f(math.sqrt(1 - beta2 ** step)) + f(eps)
        p += f(-step_size) * m / denom
        state[name] = (step, m, v)


def sgd_step(params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray],
             momentum_buffers: dict[str, np.ndarray], lr: float, momentum: float = 0.0,
             weight_decay: float = 0.0, dampening: float = 0.0, nesterov: bool = False) -> None:
    """One step of ``torch.optim.SGD``, in place on ``params`` (and ``momentum_buffers``).

    For each parameter p with gradient g:
        g = g + weight_decay * p
        if momentum: buf = g (first step) else momentum * buf + (1 - dampening) * g
                     g = g + momentum * buf if nesterov else buf
        p -= lr * g
    ``momentum_buffers`` starts empty and is filled on first use, exactly as
    PyTorch's optimizer state (so the first step ignores ``dampening``).
    """
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening (as torch.optim.SGD)")
    for name, p in params.items():
        g = np.asarray(grads[name], dtype=p.dtype)
        if weight_decay != 0:
            g = g + p.dtype.type(weight_decay) * p
        if momentum != 0:
            buf = momentum_buffers.get(name)
            if buf is None:
                buf = g.copy()
                momentum_buffers[name] = buf
            else:
                buf *= p.dtype.type(momentum)
                buf += p.dtype.type(1 - dampening) * g
            g = g + p.dtype.type(momentum) * buf if nesterov else buf
        p -= p.dtype.type(lr) * g
