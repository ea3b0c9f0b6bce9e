"""Parameter initialization that depends on the seed and the names only.

    params = init_params(g, seed=0)          # {"conv1.weight": (6, 1, 5, 5) float32, ...}

The distributions are PyTorch's defaults, so a model trained here starts like
the same model in PyTorch:

* conv2d and linear weights: ``kaiming_uniform_(a=sqrt(5))``, which works out
  to U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = C_in * kH * kW (conv) or
  the input features I (linear); their biases: the same bound.
* batchnorm2d, layer_norm, rms_norm and group_norm: weight (gamma) 1, bias (beta) 0.
* embedding: N(0, 1), as ``torch.nn.Embedding``.
* parameter (shape (..., H)): U(-1/sqrt(H), 1/sqrt(H)) with H its last dimension,
  as ``torch.nn.LSTM`` initializes its weights with its hidden size (the models
  read a parameter (E + H, H) as ``z @ W``, so H is the number of gate units).

Why a generator per parameter: the executor may run any plan on any number of
workers, visiting ops in any order, and a plan must never change the model.
Drawing every tensor from one shared stream would make the values depend on
the order of the draws.  Instead each parameter gets its own generator seeded
from ``(seed, hash(op name), hash(parameter name))``, where the hashes are
SHA-256 digests (stable across processes and platforms, unlike Python's
salted ``hash()``).  Renaming an op changes its initial values; adding,
removing or reordering other ops does not.
"""
from __future__ import annotations

import hashlib
from math import sqrt
from typing import Any

import numpy as np

from shardwise.ops.desc import WEIGHT

__all__ = ["init_params", "parameter_shapes", "parameter_rng"]

# Which parameter each WEIGHT input of an op kind is, in the op description's input order.
_PARAM_NAMES = {
    "conv2d": ("weight", "bias"),
    "linear": ("weight", "bias"),
    "batchnorm2d": ("weight", "bias"),
    "parameter": ("weight",),
    "layer_norm": ("weight", "bias"),
    "embedding": ("weight",),
    "rms_norm": ("weight",),
    "group_norm": ("weight", "bias"),   # with affine=True; none without
}


def _name_words(name: str) -> list[int]:
    """Two stable 32-bit words from the SHA-256 digest of ``name`` (64 bits: no collisions in practice)."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return [int.from_bytes(digest[0:4], "little"), int.from_bytes(digest[4:8], "little")]


def parameter_rng(seed: int, op_name: str, param_name: str) -> np.random.Generator:
    """The generator for parameter ``param_name`` ("weight"/"bias") of op ``op_name``.

    Its stream depends only on the three arguments (see the module docstring).
    """
    return np.random.default_rng([seed, *_name_words(op_name), *_name_words(param_name)])


def parameter_shapes(graph: Any) -> dict[str, tuple[int, ...]]:
    """``"<op>.weight"`` / ``"<op>.bias"`` -> shape, in PyTorch layouts, in graph order.

    The shapes come from the op descriptions' WEIGHT inputs (conv2d: weight
    (Co, Ci, kH, kW) and, with bias, (Co,); linear: (O, I) and (O,);
    batchnorm2d: gamma (C,) and beta (C,); parameter: its own shape as "<op>.weight").
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for op in graph.ops:
        weights = [inp.shape for inp in op.desc.inputs if inp.role == WEIGHT]
        if not weights:
            continue
        names = _PARAM_NAMES.get(op.kind)
        if names is None or len(weights) > len(names):
            raise NotImplementedError(f"init: no parameter naming for op kind {op.kind!r} (op {op.name!r})")
        for pname, shape in zip(names, weights):
            shapes[f"{op.name}.{pname}"] = tuple(int(s) for s in shape)
    return shapes


def init_params(graph: Any, seed: int = 0, dtype: Any = np.float32) -> dict[str, np.ndarray]:
    """Fresh parameters of ``graph`` with PyTorch's default initialization.

    Values depend only on ``(seed, op name, parameter name)``: never on the plan,
    the op order or the number of workers.  Uniform draws are made in float64
    and rounded to ``dtype`` (float32 or float64), so the float32 values are the
    float64 ones rounded.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    params: dict[str, np.ndarray] = {}
    fan_in: dict[str, int] = {}   # op name -> fan_in of its weight
    for name, shape in parameter_shapes(graph).items():
        op_name, pname = name.rsplit(".", 1)
        kind = graph[op_name].kind
        if kind in ("batchnorm2d", "layer_norm", "rms_norm", "group_norm"):
            params[name] = np.full(shape, 1.0 if pname == "weight" else 0.0, dtype=dtype)
            continue
        if kind == "embedding":   # torch.nn.Embedding: N(0, 1)
            params[name] = parameter_rng(int(seed), op_name, pname).standard_normal(shape).astype(dtype)
            continue
        if kind == "parameter":
            fan_in[op_name] = int(shape[-1])   # nn.LSTM's 1/sqrt(hidden): see the module docstring
        elif pname == "weight":
            # conv (Co, Ci, kH, kW) -> Ci*kH*kW; linear (O, I) -> I
            fan_in[op_name] = int(np.prod(shape[1:]))
        bound = 1.0 / sqrt(fan_in[op_name])
        values = parameter_rng(int(seed), op_name, pname).uniform(-bound, bound, size=shape)
        params[name] = values.astype(dtype)
    return params
