"""The NumPy reference's inputs: a graph's minibatch checked and named (:mod:`shardwise.reference`).

Float inputs share one dtype (float32 or float64, the computation's) and one batch size;
integer token-id inputs (``g.input(..., dtype="int64")``) are kept apart as int64.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

__all__ = ["check_inputs", "compute_dtype"]


def check_inputs(graph: Any, x: Any) -> dict[str, np.ndarray]:
    """The graph's inputs as {input op name: array}, checked.

    ``x`` is one array for a graph with a single input op, or a mapping from
    every input op's name to its array (any number of inputs).  All arrays share
    one dtype (float32 or float64) and one batch size N, which may differ from
    the graph's; their other dimensions are the graph's.
    """
    inputs = [op for op in graph.ops if op.kind == "input"]
    if not inputs:
        raise ValueError(f"graph {graph.name!r} has no input op")
    if isinstance(x, Mapping):
        names = [op.name for op in inputs]
        missing = [n for n in names if n not in x]
        extra = sorted(set(x) - set(names), key=str)
        if missing or extra:
            raise ValueError(f"graph {graph.name!r} has inputs {names}; missing {missing}, unknown {extra}")
        given = dict(x)
    elif len(inputs) == 1:
        given = {inputs[0].name: x}
    else:
        raise ValueError(f"graph {graph.name!r} has {len(inputs)} input ops; pass a dict "
                         f"{{input name: array}} for {[op.name for op in inputs]}")
    out: dict[str, np.ndarray] = {}
    ids: dict[str, np.ndarray] = {}
    for op in inputs:
        a = np.asarray(given[op.name])
        if op.attrs.get("dtype") == "int64":   # token ids: any integer dtype, kept apart from the float inputs
            if a.dtype.kind not in "iu" or a.ndim != len(op.shape) or a.shape[1:] != tuple(op.shape[1:]):
                raise TypeError(f"input {op.name!r} must be integer ids of shape (N, "
                                f"{', '.join(map(str, op.shape[1:]))}), got {a.dtype} {a.shape}")
            ids[op.name] = a.astype(np.int64)
            continue
        if a.dtype not in (np.float32, np.float64):
            raise TypeError(f"input {op.name!r} must be float32 or float64, got {a.dtype}")
        want = op.shape
        if a.ndim != len(want) or a.shape[1:] != tuple(want[1:]):
            raise ValueError(f"input {op.name!r} must have shape (N, {', '.join(map(str, want[1:]))}), "
                             f"got {a.shape}")
        out[op.name] = a
    first = next(iter(out.values()), None)
    if first is not None and any(a.dtype != first.dtype or a.shape[0] != first.shape[0] for a in out.values()):
        raise ValueError("all inputs must share one dtype and one batch size, got "
                         + ", ".join(f"{k}: {a.dtype} {a.shape}" for k, a in out.items()))
    return {**out, **ids}


def compute_dtype(graph: Any, xs: Mapping[str, np.ndarray]) -> np.dtype:
    """The computation's dtype: the float inputs' (float32 when every input is token ids)."""
    floats = [a.dtype for a in xs.values() if a.dtype.kind == "f"]
    return floats[0] if floats else np.dtype(np.float32)
