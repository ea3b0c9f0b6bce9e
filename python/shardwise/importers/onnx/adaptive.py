"""Adaptive average pooling as PyTorch's dynamo exporter spells it, imported by
:func:`shardwise.from_onnx` as the ops :func:`shardwise.from_torch` builds for
``nn.AdaptiveAvgPool2d`` (:func:`shardwise.importers.adaptive.adaptive_pool`).

Where the output size does not divide the input size (alexnet's and vgg's pools to 6x6 and 7x7
on images below 224 px: a 1x1 or 2x2 map upsampled), the exporter writes PyTorch's decomposition
of the pool: constant window indices (``Range``, ``Div``, ``Abs``, ``Floor``, ``Sign``, ... which
the import folds), then on x (N, C, H, W)::

    t = Transpose(x, perm=[2, 3, 0, 1])                   (H, W, N, C)
    v = GatherND(t, index (OH, KH, OW, KW, 2))            (OH, KH, OW, KW, N, C): every window's
    v = Transpose(v, perm=[4, 5, 0, 1, 2, 3])             (N, C, OH, KH, OW, KW)  KH x KW values
    y = ReduceMean(v, axes=[-3, -1], keepdims=0)          (N, C, OH, OW)

where the windows are all KH x KW; where they differ in size, the windows padded to the largest
instead: ``Where(mask, 0, v)`` twice (the padding zeroed), the sum unrolled over (KH, KW)
(``Gather`` of one index of each axis, ``Add``), ``Div`` by the windows' sizes (OH, OW).

Each value on the way is a :class:`Windows`: per channel, a linear map of x's H W positions
(a constant array), carried through those nodes exactly.  The first reader of any other kind
(the flatten after the pool) gets the graph tensor: only where the map is, to float64 rounding,
PyTorch's adaptive average pooling of x to (OH, OW) (each output the mean of its window,
:func:`~shardwise.importers.adaptive.adaptive_avg_weights`), checked, and the value is
(N, C, OH, OW); anything else is refused, naming the node.  Nothing here imports onnx.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from shardwise.errors import ModelImportError
from shardwise.graph import Graph, Tensor
from shardwise.importers.adaptive import adaptive_avg_weights, adaptive_pool
from shardwise.importers.common import Lazy, unique_name
from shardwise.importers.onnx.const import Const
from shardwise.importers.onnx.ops import ONNX_OPS, OnnxCall, _show
from shardwise.importers.onnx.views import View, same_layout

MAX_WEIGHTS = 1 << 24
"""The most entries of a :class:`Windows` map (its values times H W), float64: 128 MiB."""

# the transposes of x (N, C, H, W) whose first two axes GatherND indexes: H and W (either order),
# then N and C (either order); the exporter writes the first
_SPATIAL_FIRST = ((2, 3, 0, 1), (2, 3, 1, 0), (3, 2, 0, 1), (3, 2, 1, 0))


@dataclass(eq=False)
class Windows(Lazy):
    """A value of ``shape`` computed linearly from each channel of ``x`` (N, C, H, W): its
    axis ``batch`` is x's N, its axis ``channel`` x's C, and at the other axes' position ``p``
    (in order) it is ``sum(weights[p, h W + w] * x[n, c, h, w])``; ``name`` the pool's."""

    x: Tensor
    shape: tuple[int, ...]
    batch: int
    channel: int
    weights: np.ndarray    # (the other axes' sizes..., H W), float64
    name: str
    folds_into = ("Transpose", "ReduceMean", "Where", "Gather", "Add", "Div")
    shared = True          # the exporter's masked_fill reads a value twice (a CastLike of its 0, the Where)

    def __repr__(self) -> str:
        return f"adaptive pooling's windows {self.shape} of a tensor of shape {self.x.shape}"

    def others(self) -> list[int]:
        """The value's axes other than the batch and channel, in order (the weights' leading axes)."""
        return [d for d in range(len(self.shape)) if d not in (self.batch, self.channel)]

    def derived(self, shape: tuple[int, ...], batch: int, channel: int, weights: np.ndarray) -> "Windows":
        return Windows(self.x, tuple(shape), batch, channel, weights, self.name)

    def tensor(self, g: Graph, where: str, what: str) -> Tensor:
        """The pool of x to the value's (OH, OW), where the value is that: else refused."""
        n, c, h, w = self.x.shape
        if len(self.shape) != 4 or (self.batch, self.channel) != (0, 1):
            raise ModelImportError(f"{where}: {what} is {self!r}, not an (N, C, OH, OW) result: only the complete "
                                   f"export of adaptive average pooling (nn.AdaptiveAvgPool2d) is supported")
        out = (self.shape[2], self.shape[3])
        want = adaptive_avg_weights((h, w), out)
        if not np.allclose(self.weights, want, rtol=0.0, atol=1e-9):
            raise ModelImportError(f"{where}: {what} is {self!r} whose values are not the means of PyTorch's adaptive "
                                   f"pooling windows of {h}x{w} to {out[0]}x{out[1]}: only the export of adaptive "
                                   f"average pooling (nn.AdaptiveAvgPool2d) is supported")
        y = adaptive_pool(g, self.x, out, "avg", unique_name(g, (), self.name))
        assert y is not None   # average pooling of any sizes has ops
        return y


def _transposed_of(v: View) -> tuple[Tensor, tuple[int, ...]] | None:
    """(x, perm) when ``v`` reads the (N, C, H, W) tensor x transposed by ``perm``, H and W first."""
    if v.index is not None or not isinstance(v.base, Tensor) or len(v.base.shape) != 4:
        return None
    for perm in _SPATIAL_FIRST:
        if same_layout(v.arr, v.origin.transpose(perm)):
            return v.base, perm
    return None


def _gather_nd(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """GatherND of the transpose (H, W, N, C) of x by constant (h, w) pairs: the windows of an
    adaptive pool, the values of x at those pairs; anything of a constant as before (Swin's
    relative position bias)."""
    def convert(c: OnnxCall) -> Any:
        data, index = c.inputs[0], c.inputs[1]
        if isinstance(data, Const) or not isinstance(data, (Tensor, View)):
            return previous(c)
        found = _transposed_of(data) if isinstance(data, View) else None
        ids = np.asarray(index.value) if isinstance(index, Const) else None
        if found is None or ids is None or ids.dtype.kind not in "iu" or ids.ndim < 1 or ids.shape[-1] != 2 or \
                c.attrs.get_int("batch_dims", 0) != 0:
            raise c.error(f"GatherND of {_show(data)} by {_show(index)} is not supported (only the export of adaptive "
                          f"average pooling: (h, w) pairs of constant indices into the (H, W, N, C) transpose of an "
                          f"(N, C, H, W) tensor)")
        x, perm = found
        sizes = (x.shape[perm[0]], x.shape[perm[1]])
        h, w = x.shape[2], x.shape[3]
        lead = ids.shape[:-1]
        if int(np.prod(lead, dtype=np.int64)) * h * w > MAX_WEIGHTS:
            raise c.error(f"GatherND by {_show(index)} of a {h}x{w} map: more than {MAX_WEIGHTS:,} window weights")
        for k in (0, 1):
            if np.any(ids[..., k] < -sizes[k]) or np.any(ids[..., k] >= sizes[k]):
                raise c.error(f"GatherND's indices along axis {k} lie outside [-{sizes[k]}, {sizes[k]})")
        pairs = [ids[..., k].astype(np.int64) % sizes[k] for k in (0, 1)]
        rows, cols = (pairs[0], pairs[1]) if perm[0] == 2 else (pairs[1], pairs[0])
        weights = np.zeros((int(np.prod(lead, dtype=np.int64)), h * w))
        weights[np.arange(weights.shape[0]), (rows * w + cols).reshape(-1)] = 1.0
        tail = perm[2:]   # x's N and C, in the order the value holds them
        return Windows(x, tuple(lead) + tuple(data.shape[2:]), len(lead) + tail.index(0), len(lead) + tail.index(1),
                       weights.reshape(tuple(lead) + (h * w,)), c.name)
    return convert


def _transpose(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    def convert(c: OnnxCall) -> Any:
        v = c.inputs[0]
        if not isinstance(v, Windows):
            return previous(c)
        r = len(v.shape)
        perm = c.attrs.get_ints("perm", list(range(r))[::-1])
        if sorted(perm) != list(range(r)):
            raise c.error(f"perm={perm} is not a permutation of the {r} dimensions of {_show(v)}")
        old, new = v.others(), [p for p in perm if p not in (v.batch, v.channel)]
        weights = v.weights.transpose([old.index(p) for p in new] + [len(old)])
        return v.derived(tuple(v.shape[p] for p in perm), perm.index(v.batch), perm.index(v.channel), weights)
    return convert


def _after_removing(v: Windows, axes: list[int]) -> tuple[tuple[int, ...], int, int]:
    """(shape, batch, channel) of ``v`` without ``axes`` (none of them the batch's or channel's)."""
    keep = [d for d in range(len(v.shape)) if d not in axes]
    return tuple(v.shape[d] for d in keep), keep.index(v.batch), keep.index(v.channel)


def _reduce_mean(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """ReduceMean of windows over axes other than the batch and channel: the mean of their maps."""
    def convert(c: OnnxCall) -> Any:
        v = c.inputs[0]
        if not isinstance(v, Windows):
            return previous(c)
        axes = c.axes("axes", 1, len(v.shape))
        if axes is None or not axes or v.batch in axes or v.channel in axes:
            raise c.error(f"ReduceMean of {_show(v)} over axes {axes} is not supported (only over the windows' axes, "
                          f"not the batch's or the channels')")
        axes = sorted(set(axes))
        others = v.others()
        weights = v.weights.mean(axis=tuple(others.index(a) for a in axes), keepdims=bool(c.attrs.get_int("keepdims", 1)))
        if c.attrs.get_int("keepdims", 1):
            return v.derived(tuple(1 if d in axes else s for d, s in enumerate(v.shape)), v.batch, v.channel, weights)
        return v.derived(*_after_removing(v, axes), weights)
    return convert


def _over_windows(c: OnnxCall, v: Windows, k: Any, what: str) -> np.ndarray:
    """The constant ``k``, which broadcasts to ``v``'s shape and is the same for every sample and
    channel, as an array of the weights' leading shape."""
    value = np.asarray(k.value) if isinstance(k, Const) else None
    r = len(v.shape)
    padded = None if value is None or value.ndim > r else (1,) * (r - value.ndim) + value.shape
    if padded is None or padded[v.batch] != 1 or padded[v.channel] != 1 or \
            any(p not in (1, s) for p, s in zip(padded, v.shape)):
        raise c.error(f"{c.op_type} of {_show(v)} with {what} {_show(k)} is not supported (only a constant that "
                      f"broadcasts to it and is the same for every sample and channel)")
    return np.broadcast_to(value.reshape([padded[d] for d in v.others()]), v.weights.shape[:-1])


def _where(c: OnnxCall) -> Any:
    """Where(mask, 0, windows) or Where(mask, windows, 0) with a constant mask: the windows with
    the masked (unmasked) positions zeroed, as the exporter pads uneven windows."""
    cond, a, b = (c.inputs + [None, None, None])[:3]
    v, zero, keep = (b, a, False) if isinstance(b, Windows) else (a, b, True)
    if not isinstance(v, Windows) or not isinstance(zero, Const) or np.asarray(zero.value).size != 1 or \
            np.asarray(zero.value).reshape(-1)[0] != 0:
        raise c.error(f"the ONNX op Where is not supported here (only the mask of adaptive average pooling's windows, "
                      f"a constant, choosing between them and 0); the supported ops are listed in docs/importing.md")
    mask = _over_windows(c, v, cond, "the condition")
    if mask.dtype != np.bool_:
        raise c.error(f"Where's condition is {mask.dtype}, not bool")
    zeroed = ~mask if keep else mask
    return v.derived(v.shape, v.batch, v.channel, np.where(zeroed[..., None], 0.0, v.weights))


def _gather(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Gather of one constant index of a windows' axis (the unrolled sum's picks); else as before."""
    def convert(c: OnnxCall) -> Any:
        v = c.inputs[0]
        if not isinstance(v, Windows):
            return previous(c)
        index = np.asarray(c.inputs[1].value) if len(c.inputs) > 1 and isinstance(c.inputs[1], Const) else None
        axis = c.attrs.get_int("axis", 0)
        if index is None or index.ndim != 0 or index.dtype.kind not in "iu" or not -len(v.shape) <= axis < len(v.shape):
            raise c.error(f"Gather(axis={axis}) of {_show(v)} by {_show(c.inputs[1])} is not supported (only one "
                          f"constant index of a windows' axis)")
        axis %= len(v.shape)
        i = int(index)
        if axis in (v.batch, v.channel) or not -v.shape[axis] <= i < v.shape[axis]:
            raise c.error(f"Gather(axis={axis}) by the index {i} of {_show(v)} is not supported (one index of a "
                          f"windows' axis, not the batch's or the channels')")
        weights = np.take(v.weights, i % v.shape[axis], axis=v.others().index(axis))
        return v.derived(*_after_removing(v, [axis]), weights)
    return convert


def _add(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Add of two windows of the same tensor, laid out alike: the sum of their maps; else as before."""
    def convert(c: OnnxCall) -> Any:
        a, b = (c.inputs + [None, None])[:2]
        if not isinstance(a, Windows) and not isinstance(b, Windows):
            return previous(c)
        if not (isinstance(a, Windows) and isinstance(b, Windows) and a.x.graph is b.x.graph and a.x.op == b.x.op
                and (a.shape, a.batch, a.channel) == (b.shape, b.batch, b.channel)):
            raise c.error(f"Add of {_show(a)} and {_show(b)} is not supported (only of two sums of adaptive average "
                          f"pooling's windows of one tensor, of one shape)")
        return a.derived(a.shape, a.batch, a.channel, a.weights + b.weights)
    return convert


def _div(c: OnnxCall) -> Any:
    """Div of windows by a constant that is the same for every sample and channel (the windows' sizes)."""
    v, k = (c.inputs + [None, None])[:2]
    if not isinstance(v, Windows):
        raise c.error(f"the ONNX op Div is not supported here (only adaptive average pooling's sum of windows "
                      f"divided by a constant); the supported ops are listed in docs/importing.md")
    divisor = _over_windows(c, v, k, "the divisor")
    if divisor.dtype.kind not in "fiu" or np.any(divisor == 0) or not np.all(np.isfinite(divisor)):
        raise c.error(f"Div of {_show(v)} by {_show(k)}: the divisor must be finite numbers other than 0")
    return v.derived(v.shape, v.batch, v.channel, v.weights / divisor.astype(np.float64)[..., None])


def register() -> None:
    """Add Where and Div (of windows only) to :data:`~shardwise.importers.onnx.ops.ONNX_OPS` and
    wrap GatherND, Transpose, ReduceMean, Gather and Add, which keep their other uses."""
    if "Div" in ONNX_OPS:
        return
    ONNX_OPS.update({
        "GatherND": _gather_nd(ONNX_OPS["GatherND"]),
        "Transpose": _transpose(ONNX_OPS["Transpose"]),
        "ReduceMean": _reduce_mean(ONNX_OPS["ReduceMean"]),
        "Where": _where,
        "Gather": _gather(ONNX_OPS["Gather"]),
        "Add": _add(ONNX_OPS["Add"]),
        "Div": _div,
    })


register()
