"""The broadcasting and slicing ONNX ops :func:`shardwise.from_onnx` imports: ``Mul`` and ``Add``
of tensors that broadcast (an initializer operand becomes a ``parameter`` op: a learned table),
``Expand`` (ViT's class token), ``Slice`` and ``Split`` (ShuffleNet's channel split) and
``Resize`` in nearest mode by integer scales.  They wrap the converters of :mod:`.ops` (SiLU's
``Mul``, the attention patterns of :mod:`.seq`), which keep their uses."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from shardwise.graph import Tensor
from shardwise.importers.onnx.const import Const
from shardwise.importers.onnx.views import View, materialize
from shardwise.importers.onnx.ops import MULTI_OUTPUT, ONNX_OPS, OnnxCall, Outputs, _show


def operand(c: OnnxCall, v: Any, what: str) -> Tensor:
    """A computed tensor, or an initializer of the model as a trainable ``parameter`` op."""
    if isinstance(v, Const) and v.source is not None and not v.transposed and c.parameter_op is not None \
            and np.asarray(v.value).dtype.kind == "f" and np.ndim(v.value) > 0:
        return c.parameter_op(v, c.where)
    if isinstance(v, View):   # reshapes and transposes that moved the batch: built as ops where they can be
        v = materialize(c.graph, v, c.name, c.where)
    if not isinstance(v, Tensor):
        raise c.error(f"expects a tensor or an initializer as {what}, got {_show(v)} (computed constants are not "
                      f"supported)")
    return v


def _operands(c: OnnxCall) -> tuple[Tensor, Tensor] | None:
    """Both operands as tensors when each is a computed tensor or an initializer (and one is
    computed); None otherwise (the wrapped converter decides)."""
    a, b = c.inputs[0], c.inputs[1]
    ok = [isinstance(v, (Tensor, View)) or (isinstance(v, Const) and v.source is not None and np.ndim(v.value) > 0)
          for v in (a, b)]
    if not all(ok) or not any(isinstance(v, (Tensor, View)) for v in (a, b)):
        return None
    return operand(c, a, "operand 0"), operand(c, b, "operand 1")


def _binary(kind: str, previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    def convert(c: OnnxCall) -> Any:
        try:
            return previous(c)   # SiLU, attention scales and masks, a MatMul's bias, equal shapes
        except Exception as exc:
            ab = _operands(c)
            if ab is None:
                raise
            a, b = ab
            try:
                return c.graph.mul(a, b, name=c.name) if kind == "mul" else c.graph.add(a, b, name=c.name)
            except Exception:
                raise exc from None
    return convert


def _expand(c: OnnxCall) -> Tensor:
    x = operand(c, c.inputs[0], "the tensor expanded")
    shape = c.const_ints(1, "shape")
    if shape is None:
        raise c.error("Expand needs a constant shape")
    r = max(len(shape), len(x.shape))
    shape = [1] * (r - len(shape)) + list(shape)
    xs = (1,) * (r - len(x.shape)) + x.shape
    out = tuple(max(s, t) for s, t in zip(shape, xs))   # ONNX's Expand broadcasts both ways
    return x if out == x.shape else c.graph.expand(x, out, name=c.name)


def _slice(c: OnnxCall) -> Tensor:
    x = operand(c, c.inputs[0], "the tensor sliced")
    r = len(x.shape)
    starts, ends = _bounds(c, 1, "starts"), _bounds(c, 2, "ends")
    if starts is None or ends is None:
        raise c.error("Slice needs constant starts and ends")
    axes = c.axes("axes", 3, r) or list(range(len(starts)))
    steps = c.const_ints(4, "steps") if len(c.inputs) > 4 else None
    steps = steps or [1] * len(starts)
    y = x
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st < 1:
            raise c.error(f"steps={steps} is not supported (positive steps only)")
        lo, hi, _ = slice(s, e, st).indices(x.shape[a])
        if (lo, hi, st) == (0, x.shape[a], 1):
            continue
        if a == 0:
            raise c.error("slicing the batch dimension is not supported")
        y = c.graph.slice(y, a, lo, hi, st, name=c.name if y is x else None)
    return y


def _bounds(c: OnnxCall, index: int, what: str) -> list[int] | None:
    """Slice's starts or ends: integers, INT64_MAX (to the end) and INT64_MIN clipped."""
    value = c.const(index, what)
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" or arr.ndim > 1:
        raise c.error(f"expects integers as its {what}, got {arr.dtype} values of shape {arr.shape}")
    return [int(v) for v in np.clip(arr.reshape(-1), -2**62, 2**62)]


def _split(c: OnnxCall) -> Outputs:
    x = c.tensor(0)
    r = len(x.shape)
    axis = c.attrs.get_int("axis", 0)
    if not -r <= axis < r or axis % r == 0:
        raise c.error(f"axis={axis} is not supported (any axis but the batch)")
    axis %= r
    sizes = c.const_ints(1, "split") if len(c.inputs) > 1 and c.inputs[1] is not None else None
    if sizes is None and "split" in c.attrs:
        sizes = list(c.attrs.get_ints("split"))
    if sizes is None:
        n = c.attrs.get_int("num_outputs", 0) or c.attrs.get_int("_outputs", 0)
        if not n:
            raise c.error("Split needs split sizes or num_outputs")
        size = -(-x.shape[axis] // n)
        sizes = [min(size, x.shape[axis] - s) for s in range(0, x.shape[axis], size)]
    return Outputs(tuple(c.graph.split(x, sizes, axis, name=c.name)))


class Pieces(tuple):
    """The output of ``SplitToSequence`` (PyTorch's dynamo export of ``x.chunk(n, dim)``): its
    pieces, each a ``slice`` op of the split, read one by one by ``SequenceAt``."""


def _split_to_sequence(c: OnnxCall) -> Pieces:
    """SplitToSequence(x, split): pieces of a constant size (a scalar ``split``; the last one
    smaller), of constant sizes (a 1-D ``split``), or of size 1 (no ``split``, ``keepdims`` 1)."""
    x = c.tensor(0)
    r = len(x.shape)
    axis = c.attrs.get_int("axis", 0)
    if not -r <= axis < r or axis % r == 0:
        raise c.error(f"axis={axis} is not supported (any axis but the batch)")
    axis %= r
    n = x.shape[axis]
    split = c.const(1, "split") if len(c.inputs) > 1 else None
    if split is None:
        if not c.attrs.get_int("keepdims", 1, lo=0, hi=1):
            raise c.error("SplitToSequence without split and with keepdims=0 is not supported")
        sizes = [1] * n
    elif np.ndim(split) == 0:
        size = c.const_ints(1, "split")[0]
        if size < 1:
            raise c.error(f"split={size} is not a positive size")
        sizes = [min(size, n - s) for s in range(0, n, size)]
    else:
        sizes = c.const_ints(1, "split")
    return Pieces(c.graph.split(x, sizes, axis, name=c.name))


def _sequence_at(c: OnnxCall) -> Tensor:
    """SequenceAt(pieces, position) of a SplitToSequence by a constant position."""
    pieces = c.inputs[0]
    if not isinstance(pieces, Pieces):
        raise c.error(f"SequenceAt of {_show(pieces)} is not supported (only of a SplitToSequence)")
    position = c.const_ints(1, "position")
    if position is None or len(position) != 1 or not -len(pieces) <= position[0] < len(pieces):
        raise c.error(f"position {position} is not one of the {len(pieces)} pieces")
    return pieces[position[0]]


def _resize(c: OnnxCall) -> Tensor:
    x = c.tensor(0, rank=4)
    mode = c.attrs.get_str("mode", "nearest")
    coords = c.attrs.get_str("coordinate_transformation_mode", "half_pixel")
    if mode not in ("nearest", "linear"):
        raise c.error(f"mode={mode!r} is not supported (nearest, or linear: bilinear)")
    if mode == "linear" and coords not in ("half_pixel", "pytorch_half_pixel"):
        raise c.error(f"linear with coordinate_transformation_mode={coords!r} is not supported (half_pixel: "
                      f"align_corners=False)")
    if mode == "nearest" and (coords not in ("half_pixel", "pytorch_half_pixel", "asymmetric") or (
            coords == "asymmetric" and c.attrs.get_str("nearest_mode", "round_prefer_floor") != "floor")):
        raise c.error(f"nearest with coordinate_transformation_mode={coords!r} is not supported (asymmetric with "
                      f"nearest_mode floor, or half_pixel: at integer scales both read y // s)")
    scales = c.const(2, "scales") if len(c.inputs) > 2 else None
    sizes = c.const(3, "sizes") if len(c.inputs) > 3 else None
    if sizes is not None and np.size(sizes):
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        scale = [s // t for s, t in zip(sizes[2:], x.shape[2:])]
        ok = all(s % t == 0 for s, t in zip(sizes[2:], x.shape[2:])) and sizes[:2] == list(x.shape[:2])
    elif scales is not None and np.size(scales):
        sc = [float(s) for s in np.asarray(scales).reshape(-1)]
        scale = [int(s) for s in sc[2:]]
        ok = sc[:2] == [1.0, 1.0] and all(s == int(s) and s >= 1 for s in sc[2:])
    else:
        raise c.error("Resize needs scales or sizes")
    if not ok:
        raise c.error("only integer upsampling factors of H and W are supported")
    if mode == "linear":
        return c.graph.upsample_bilinear(x, tuple(scale), name=c.name)
    return c.graph.upsample_nearest(x, tuple(scale), name=c.name)


def register() -> None:
    """Add the broadcasting ops to :data:`~shardwise.importers.onnx.ops.ONNX_OPS`."""
    if "Expand" in ONNX_OPS:
        return
    ONNX_OPS.update({
        "Mul": _binary("mul", ONNX_OPS["Mul"]),
        "Add": _binary("add", ONNX_OPS["Add"]),
        "Expand": _expand,
        "Slice": _slice,
        "Split": _split,
        "SplitToSequence": _split_to_sequence,
        "SequenceAt": _sequence_at,
        "Resize": _resize,
    })
    MULTI_OUTPUT.add("Split")


register()
