"""Constant folding for :func:`shardwise.from_onnx`: the shape arithmetic ONNX exporters write.

An exported model computes more than its layers: ``x.view(x.size(0), -1)`` becomes
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, a convolution without bias may get a
zero bias from ``Constant -> CastLike -> Expand``, reduction axes come from ``Constant ->
Reshape``.  shardwise's shapes are all known during the import, so these nodes are evaluated
here with NumPy and never become ops of the graph.  A node is folded when every input it reads
is a constant (or, for ``Shape``, when it reads the shape of a graph tensor).

Nothing here imports onnx: attributes arrive already decoded (``{name: value}``), and the
element types of ``Cast`` are mapped by :data:`ONNX_DTYPES`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from shardwise.errors import ModelImportError

__all__ = ["Const", "FOLDERS", "ONNX_DTYPES", "fold"]

ONNX_DTYPES: dict[int, Any] = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
                               7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
                               13: np.uint64}
"""ONNX's ``TensorProto.DataType`` codes of the element types shape arithmetic uses."""


@dataclass(frozen=True, eq=False)
class Const:
    """A constant value of the ONNX graph.

    ``source`` is the initializer's name for a tensor stored in the model (a weight the import
    may make trainable) and None for one computed by the graph (folded here).  Identity is by
    object: one initializer is one :class:`Const`, which is how a weight read by two layers is
    recognized (``eq=False``)."""

    value: np.ndarray
    source: str | None = None
    transposed: bool = False   # the initializer ``source`` transposed (a linear layer's (in, out) weight)

    def __repr__(self) -> str:   # messages show where it comes from, not its values
        what = f"initializer {self.source!r}" if self.source else "a computed constant"
        return f"<{what} of shape {tuple(self.value.shape)}>"


class FoldError(ValueError):
    """A constant node whose inputs or attributes this folder cannot evaluate."""


def _int_list(value: Any, what: str) -> list[int]:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise FoldError(f"{what} must be integers, got {arr!r}")
    return [int(v) for v in arr.reshape(-1)]


def _axes(attrs: dict[str, Any], inputs: Sequence[np.ndarray | None], index: int) -> list[int] | None:
    """Axes given as an attribute (older opsets) or as input ``index`` (opset 13 and later)."""
    if "axes" in attrs:
        return _int_list(attrs["axes"], "axes")
    if len(inputs) > index and inputs[index] is not None:
        return _int_list(inputs[index], "axes")
    return None


def _constant(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    raise FoldError(f"a Constant with the attributes {sorted(attrs)} is not supported")


def _shape(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    shape = list(inputs[0])   # the importer passes the shape tuple of the tensor
    start, end = attrs.get_int("start", 0), attrs.get_int("end", len(shape))
    return np.array(shape[start:end], dtype=np.int64)


def _gather(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    return np.take(inputs[0], inputs[1].astype(np.int64), axis=attrs.get_int("axis", 0))


def _unsqueeze(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    axes = _axes(attrs, inputs, 1)
    if axes is None:
        raise FoldError("Unsqueeze without axes")
    out = inputs[0]
    rank = out.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return out


def _squeeze(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    axes = _axes(attrs, inputs, 1)
    x = inputs[0]
    return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(a % x.ndim for a in axes))


def reshape_target(shape: Sequence[int], target: Sequence[int], allowzero: bool = False) -> tuple[int, ...]:
    """ONNX Reshape's output shape: ``0`` copies the input's dimension (unless ``allowzero``),
    one ``-1`` takes what is left.  Raises FoldError when the sizes do not fit."""
    out = [shape[k] if t == 0 and not allowzero and k < len(shape) else t for k, t in enumerate(target)]
    total = int(np.prod(shape, dtype=np.int64))
    known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
    if out.count(-1) > 1 or any(s < -1 for s in out) or (known == 0 and -1 in out):
        raise FoldError(f"cannot reshape {tuple(shape)} to {tuple(target)}")
    if -1 in out:
        if total % known:
            raise FoldError(f"cannot reshape {tuple(shape)} to {tuple(target)}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        raise FoldError(f"cannot reshape {tuple(shape)} to {tuple(target)}")
    return tuple(int(s) for s in out)


def _reshape(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    target = _int_list(inputs[1], "the shape")
    return inputs[0].reshape(reshape_target(inputs[0].shape, target, bool(attrs.get_int("allowzero", 0))))


def _cast(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    to = attrs.get_int("to")
    if to not in ONNX_DTYPES:
        raise FoldError(f"Cast to the ONNX element type {to!r} is not supported")
    return inputs[0].astype(ONNX_DTYPES[to])


def _slice(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    x = inputs[0]
    if "starts" in attrs:   # opset 1-9: attributes
        starts, ends, axes, steps = attrs.get_ints("starts"), attrs.get_ints("ends", []), attrs.get_ints("axes"), None
    else:
        starts, ends = _int_list(inputs[1], "starts"), _int_list(inputs[2], "ends")
        axes = _int_list(inputs[3], "axes") if len(inputs) > 3 and inputs[3] is not None else None
        steps = _int_list(inputs[4], "steps") if len(inputs) > 4 and inputs[4] is not None else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if any(not -x.ndim <= a < x.ndim for a in axes) or 0 in steps:
        raise FoldError(f"Slice of shape {x.shape} along the axes {axes} by steps {steps}")
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a % x.ndim] = slice(s, e, st)
    return x[tuple(index)]


def _div(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    a, b = inputs
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":   # ONNX integer division truncates toward zero
        return (np.trunc(a / b)).astype(np.result_type(a, b))
    return a / b


def _mod(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    a, b = inputs
    if np.any(b == 0):
        raise FoldError("Mod by zero")
    fmod = attrs.get_int("fmod", 0)
    if not fmod and (a.dtype.kind == "f" or b.dtype.kind == "f"):
        raise FoldError("Mod of floats needs fmod=1")
    return np.fmod(a, b) if fmod else np.mod(a, b)   # fmod=0: the sign of the divisor, as Python's %


def _scatter_nd(attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    """ScatterND(data, indices, updates) without reduction: ``data`` with the entries (or
    slices) at ``indices`` (..., k) replaced by ``updates``."""
    data, indices, updates = inputs
    if attrs.get_str("reduction", "none") != "none":
        raise FoldError(f"ScatterND with reduction={attrs.get_str('reduction')!r} is not supported")
    k = indices.shape[-1] if indices.ndim else 0
    if indices.dtype.kind not in "iu" or not 0 < k <= data.ndim or \
            updates.shape != indices.shape[:-1] + data.shape[k:]:
        raise FoldError(f"ScatterND of {data.shape} by indices {indices.shape} and updates {updates.shape}")
    out = np.array(data, copy=True)
    out[tuple(indices[..., i].astype(np.int64) for i in range(k))] = updates
    return out


FOLDERS: dict[str, Callable[[dict[str, Any], Sequence[Any]], np.ndarray]] = {
    "Constant": _constant,
    "Identity": lambda attrs, ins: ins[0],
    "Shape": _shape,
    "Gather": _gather,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": lambda attrs, ins: np.concatenate([np.atleast_1d(v) for v in ins], axis=attrs.get_int("axis", 0)),
    "Reshape": _reshape,
    "Cast": _cast,
    "CastLike": lambda attrs, ins: ins[0].astype(ins[1].dtype),
    "Expand": lambda attrs, ins: ins[0] * np.ones(_int_list(ins[1], "the shape"), dtype=ins[0].dtype),
    "Slice": _slice,
    "Add": lambda attrs, ins: ins[0] + ins[1],
    "Max": lambda attrs, ins: functools.reduce(np.maximum, ins),
    "Min": lambda attrs, ins: functools.reduce(np.minimum, ins),
    "Mod": _mod,
    "Not": lambda attrs, ins: np.logical_not(ins[0]),
    "ScatterND": _scatter_nd,
    "Sub": lambda attrs, ins: ins[0] - ins[1],
    "Mul": lambda attrs, ins: ins[0] * ins[1],
    "Div": _div,
    "Transpose": lambda attrs, ins: np.transpose(ins[0], attrs.get_ints("perm")),
    # the causal mask and the scale of scaled dot-product attention, as the dynamo exporter writes them
    "Range": lambda attrs, ins: np.arange(ins[0], ins[1], ins[2]),
    "Sqrt": lambda attrs, ins: np.sqrt(ins[0]),
    "Trilu": lambda attrs, ins: (np.triu if attrs.get_int("upper", 1) else np.tril)(
        ins[0], int(ins[1]) if len(ins) > 1 and ins[1] is not None else 0),
    "Equal": lambda attrs, ins: np.equal(ins[0], ins[1]),
    "Where": lambda attrs, ins: np.where(ins[0], ins[1], ins[2]),
    # the window indices of adaptive average pooling (:mod:`.adaptive`): torch.div(a, b, rounding_mode="trunc")
    # as Div, Abs, Floor, Sign and Mul; the windows' masks as GreaterOrEqual
    "Abs": lambda attrs, ins: np.abs(ins[0]),
    "Floor": lambda attrs, ins: np.floor(ins[0]),
    "Sign": lambda attrs, ins: np.sign(ins[0]),
    "GreaterOrEqual": lambda attrs, ins: np.greater_equal(ins[0], ins[1]),
    # Tensor.expand(n, -1, -1) as the TorchScript exporter writes it (the -1s through ConstantOfShape)
    "ConstantOfShape": lambda attrs, ins: np.full(_int_list(ins[0], "the shape"),
                                                  np.asarray(attrs.get("value", np.zeros(1, np.float32))).reshape(-1)[0],
                                                  dtype=np.asarray(attrs.get("value", np.zeros(1, np.float32))).dtype),
}
"""ONNX ops evaluated on constants, by op type: ``fold(attrs, input values) -> value``."""


def fold(op_type: str, attrs: dict[str, Any], inputs: Sequence[Any]) -> np.ndarray:
    """The value of a constant node (``inputs``: NumPy arrays, or for Shape the tensor's shape)."""
    try:
        return np.asarray(FOLDERS[op_type](attrs, inputs))
    except (FoldError, ModelImportError):   # ModelImportError: an attribute of the wrong type or range
        raise
    except (ValueError, IndexError, TypeError) as exc:   # NumPy's complaint about the values
        raise FoldError(f"{op_type} on constants failed: {exc}") from None
