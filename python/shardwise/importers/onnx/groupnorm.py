"""Group normalization as ONNX spells it: :func:`shardwise.from_onnx` imports one ``group_norm`` op
(``torch.nn.GroupNorm``'s, with its weights as ``"<module>.weight"``, ``".bias"``) from what
PyTorch's TorchScript exporter writes (opsets 17, 18 and later alike: it never writes ONNX's
``GroupNormalization``)::

    h = Reshape(x, (0, G, -1))                      x (N, C, H, W) -> (N, G, C/G * H * W)
    h = InstanceNormalization(h, ones(G), zeros(G), epsilon)
    h = Reshape(h, Shape(x))                        back to (N, C, H, W)
    y = Add(Mul(h, weight (C, 1, 1)), bias (C, 1, 1))

without affine, ``Mul`` by a constant 1 and ``Add`` of a constant 0.  An ``InstanceNormalization``
of an (N, C, H, W) tensor (``torch.nn.InstanceNorm2d``) is a group norm with a group per channel.

The values on the way are lazy (:class:`Grouped`, :class:`Normalized`), as attention's are in
:mod:`.seq`: each is taken as it is only by the next node of the pattern reading it alone
(:attr:`~shardwise.importers.common.Lazy.folds_into`); any other reader gets the graph tensor it
stands for (a group_norm without affine, reshaped where the value is the grouped view).
Nothing here imports onnx.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from shardwise.errors import ModelImportError
from shardwise.graph import Graph, Tensor
from shardwise.importers.common import Lazy, unique_name
from shardwise.importers.onnx.const import Const, FoldError, reshape_target
from shardwise.importers.onnx.ops import ONNX_OPS, OnnxCall, Weight, _show
from shardwise.importers.onnx.seq import View, same_layout


@dataclass(eq=False)
class Grouped(Lazy):
    """InstanceNormalization's output on the grouped view (N, G, L) of ``x`` (N, C, H, W): the
    normalized ``x`` not yet reshaped back; ``name`` the group norm's (the module's)."""

    x: Tensor
    groups: int
    eps: float
    name: str
    folds_into = ("Reshape",)

    @property
    def shape(self) -> tuple[int, ...]:
        n, c, h, w = self.x.shape
        return (n, self.groups, c // self.groups * h * w)

    def tensor(self, g: Graph, where: str, what: str) -> Tensor:
        y = g.group_norm(self.x, self.groups, eps=self.eps, affine=False, name=self.name)
        return g.reshape(y, self.shape, name=unique_name(g, (), f"{self.name}.grouped"))


@dataclass(eq=False)
class Normalized(Lazy):
    """``x`` group-normalized, (N, C, H, W), times ``scale`` (a weight initializer) when a Mul
    gave one, waiting for the Add of the bias."""

    x: Tensor
    groups: int
    eps: float
    name: str
    scale: Weight | None = None
    folds_into = ("Mul", "Add")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.x.shape

    def tensor(self, g: Graph, where: str, what: str) -> Tensor:
        if self.scale is not None:
            raise ModelImportError(f"{where}: reads a group norm's output scaled by {self.scale[0]!r} without its "
                                   f"bias; only the whole pattern (scale and bias) is supported")
        return g.group_norm(self.x, self.groups, eps=self.eps, affine=False, name=self.name)


def _channel_values(v: Any, channels: int) -> np.ndarray | None:
    """The (C,) values of a float constant of shape (C, 1, 1), (1, C, 1, 1) or (C,), or of a single
    number (broadcast over the channels); None for any other value."""
    if not isinstance(v, Const) or np.asarray(v.value).dtype.kind != "f":
        return None
    a = np.asarray(v.value)
    if a.size == 1:
        return np.full(channels, float(a.reshape(-1)[0]), dtype=np.float32)
    if a.shape in ((channels,), (channels, 1, 1), (1, channels, 1, 1)):
        return a.reshape(-1).astype(np.float32)
    return None


def _epsilon(c: OnnxCall) -> float:
    # a float32 attribute: 1e-5 arrives as 9.99999974e-06; its shortest float32 spelling gives back
    # the model's value (the graph from_torch builds)
    return float(str(np.float32(c.attrs.get_float("epsilon", 1e-5))))


def _grouped_view(c: OnnxCall, v: Any) -> tuple[Tensor, int] | None:
    """(x, G) when ``v`` is the reshape of an (N, C, H, W) tensor x to (N, G, C/G * H * W): a
    reshape op of x, or a view of it (a reshape the builder leaves lazy, :class:`.seq.View`)."""
    if isinstance(v, View) and isinstance(v.base, Tensor):
        x, shape = v.base, v.shape
        if not same_layout(v.arr, v.origin.reshape(shape)):
            return None
    elif isinstance(v, Tensor) and c.graph.ops[v.op].kind == "reshape":
        src = c.graph.ops[v.op].inputs[0]
        x, shape = Tensor(c.graph, src, c.graph.ops[src].shape), v.shape
    else:
        return None
    if len(x.shape) != 4 or len(shape) != 3:
        return None
    n, ch, h, w = x.shape
    groups = shape[1]
    return (x, groups) if ch % groups == 0 and shape == (n, groups, ch // groups * h * w) else None


def _instance_norm(c: OnnxCall) -> Any:
    """InstanceNormalization of the grouped view of an (N, C, H, W) tensor with unit scale and
    zero bias (the exporter's group norm), or of an (N, C, H, W) tensor (an instance norm: a
    group per channel, its scale and bias initializers the weights, or constants 1 and 0)."""
    grouped = _grouped_view(c, c.inputs[0])
    eps = _epsilon(c)
    scale, bias = c.const(1, "scale"), c.const(2, "bias")
    if grouped is None and len(c.tensor(0).shape) == 4:
        x = c.tensor(0)
        ch = x.shape[1]
        if scale is not None and np.all(np.asarray(scale) == 1) and bias is not None and \
                np.all(np.asarray(bias) == 0) and c.inputs[1].source is None and c.inputs[2].source is None:
            return c.graph.group_norm(x, ch, eps=eps, affine=False, name=c.name)
        w, b = c.weight(1, "scale", rank=1), c.weight(2, "bias", rank=1)
        for what, t in (("scale", w), ("bias", b)):
            if t.value.shape != (ch,):
                raise c.error(f"its {what} has shape {tuple(t.value.shape)}, not ({ch},) for the input {x.shape}")
        y = c.graph.group_norm(x, ch, eps=eps, affine=True, name=c.name)
        c.set_weights(shared_ok=True, weight=(w, w.value.copy()), bias=(b, b.value.copy()))
        return y
    if grouped is None:
        raise c.error(f"InstanceNormalization of {_show(c.inputs[0])} is not supported (an (N, C, H, W) tensor, or "
                      f"its grouped view (N, G, C/G * H * W), the export of a group norm)")
    x4, groups = grouped
    if scale is None or bias is None or np.any(np.asarray(scale) != 1) or np.any(np.asarray(bias) != 0):
        raise c.error("InstanceNormalization of the grouped view of a tensor is supported with scale 1 and bias 0 "
                      "(the export of a group norm, whose weights follow as Mul and Add)")
    return Grouped(x4, groups, eps, c.name)


def _is_grouping(c: OnnxCall, x: Tensor) -> bool:
    """Is the Reshape of x (N, C, H, W) one to (N, G, C/G * H * W) for some G dividing C?"""
    try:
        target = c.const_ints(1, "shape") if len(c.inputs) > 1 and isinstance(c.inputs[1], Const) else None
        shape = None if target is None else reshape_target(x.shape, target, bool(c.attrs.get_int("allowzero", 0)))
    except (FoldError, ModelImportError):
        return False   # the wrapped converter says what is wrong
    n, ch, h, w = x.shape
    return shape is not None and len(shape) == 3 and shape[0] == n and shape[1] >= 1 and ch % shape[1] == 0 \
        and shape[2] == ch // shape[1] * h * w


def _reshape(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Reshape of a :class:`Grouped` value back to its (N, C, H, W): the normalized tensor.  The
    reshape to the grouped view (N, G, L) of an (N, C, H, W) tensor, as before, but its op (when
    it builds one, which the group norm then leaves dead) is ``<name>.grouped``: the group norm
    built next takes the module's name."""
    def convert(c: OnnxCall) -> Any:
        v = c.inputs[0]
        if isinstance(v, Tensor) and len(v.shape) == 4 and _is_grouping(c, v):
            return previous(dataclasses.replace(c, name=unique_name(c.graph, (), f"{c.name}.grouped")))
        if isinstance(v, Grouped):
            try:
                target = c.const_ints(1, "shape")
                allowzero = bool(c.attrs.get_int("allowzero", 0))
                shape = None if target is None else reshape_target(v.shape, target, allowzero)
            except FoldError as exc:
                raise c.error(str(exc)) from None
            if shape == v.x.shape:
                return Normalized(v.x, v.groups, v.eps, v.name)
            c.inputs[0] = v.tensor(c.graph, c.where, "its input 0")
        return previous(c)
    return convert


def _operands(c: OnnxCall) -> tuple[Normalized, Any] | None:
    for k in (0, 1):
        if isinstance(c.inputs[k], Normalized):
            return c.inputs[k], c.inputs[1 - k]
    return None


def _materialize(c: OnnxCall) -> None:
    for k, v in enumerate(c.inputs):
        if isinstance(v, (Grouped, Normalized)):
            c.inputs[k] = v.tensor(c.graph, c.where, f"its input {k}")


def _mul(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Mul of a :class:`Normalized` value by the weight (an initializer (C, 1, 1)), or by the
    constant 1 of a group norm without affine."""
    def convert(c: OnnxCall) -> Any:
        found = _operands(c)
        if found is not None and found[0].scale is None:
            v, k = found
            values = _channel_values(k, v.x.shape[1])
            if values is not None and k.source is not None:
                return dataclasses.replace(v, scale=(k, values))
            if values is not None and np.all(values == 1):
                return v
        _materialize(c)
        return previous(c)
    return convert


def _add(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Add of the bias (an initializer (C, 1, 1)) to a :class:`Normalized` value scaled by its
    weight: the group norm with affine; of the constant 0 to an unscaled one: without."""
    def convert(c: OnnxCall) -> Any:
        found = _operands(c)
        if found is not None:
            v, k = found
            values = _channel_values(k, v.x.shape[1])
            if values is not None and v.scale is not None and k.source is not None:
                y = c.graph.group_norm(v.x, v.groups, eps=v.eps, affine=True, name=v.name)
                dataclasses.replace(c, name=v.name).set_weights(shared_ok=True, weight=v.scale, bias=(k, values))
                return y
            if values is not None and v.scale is None and np.all(values == 0):
                return v.tensor(c.graph, c.where, "its input")
        _materialize(c)
        return previous(c)
    return convert


def register() -> None:
    """Add InstanceNormalization to :data:`~shardwise.importers.onnx.ops.ONNX_OPS` and wrap the
    converters of Reshape, Mul and Add (which keep their other uses)."""
    if "InstanceNormalization" in ONNX_OPS:
        return
    ONNX_OPS.update({
        "InstanceNormalization": _instance_norm,
        "Reshape": _reshape(ONNX_OPS["Reshape"]),
        "Mul": _mul(ONNX_OPS["Mul"]),
        "Add": _add(ONNX_OPS["Add"]),
    })


register()
