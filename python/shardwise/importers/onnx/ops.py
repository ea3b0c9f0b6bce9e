"""The table of ONNX ops :func:`shardwise.from_onnx` imports: op type -> converter.

A converter gets one :class:`OnnxCall` (the node's input values, its decoded attributes, the
name of the op it builds) and returns the value of the node's first output: a graph
:class:`~shardwise.graph.Tensor` built with the builders, or an input passed through
(``Identity``, a reshape to the same shape).  Weights are read from the model's initializers
and recorded in PyTorch's layouts (convolution ``(C_out, C_in, kH, kW)``, linear ``(out, in)``)
under ``"<op>.weight"`` and ``"<op>.bias"``, as :func:`shardwise.from_torch` does.

The ops are those :func:`~shardwise.from_torch` imports, in their ONNX spelling (docs/importing.md
lists them in a table generated from :data:`ONNX_DOC_ROWS` by tools/ops_docs.py).  Shape
arithmetic on constants never reaches this table: the importer folds it
(:mod:`shardwise.importers.onnx.const`).  Nothing here imports onnx.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import numpy as np

from shardwise.errors import ModelImportError, ShapeError
from shardwise.graph import Graph, Tensor
from shardwise.importers.onnx.attrs import INT_LIMIT, Attrs
from shardwise.importers.onnx.const import Const, FoldError, reshape_target
from shardwise.importers.common import check_ceil_mode, linear_layer
from shardwise.importers.onnx.views import View, linear_of_view, materialize


Weight = tuple[Const, np.ndarray]
"""A weight of an op: the initializer it comes from and its values in PyTorch's layout."""


@dataclass(frozen=True)
class SiluOf:
    """The output of a ``Sigmoid`` whose every reader is ``Mul(x, Sigmoid(x))``: exporters write
    SiLU that way (ONNX has no SiLU op), and the ``Mul`` builds one silu op from it."""

    x: Tensor


@dataclass
class OnnxCall:
    """One ONNX node, as its converter sees it."""

    graph: Graph
    name: str                                  # the name of the op the converter builds
    where: str                                 # the node, for messages
    op_type: str
    inputs: list[Any]                          # Tensor, Const, SiluOf, or None for an omitted optional input
    attrs: Attrs                               # read by type: attrs.get_int(...), get_ints, ...
    activation: str | None = None              # "relu": the ReLU reading this op's output is fused into it
    is_output: bool = False                    # the node's output is the model's output
    bias_add: Const | None = None              # MatMul: the bias of the Add that reads it, fused into a linear op
    weights: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)   # op name -> {param: values}
    owners: dict[str | None, tuple[str, str]] = field(default_factory=dict)   # initializer -> (op, param)
    parameter_op: Callable[[Const, str], Tensor] | None = None        # a weight read as data (MatMul operand)
    state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)   # op -> batch norm's running statistics

    def error(self, message: str) -> ModelImportError:
        return ModelImportError(f"{self.where}: {message}")

    def tensor(self, index: int, rank: int | None = None) -> Tensor:
        """Input ``index`` as a graph tensor (of ``rank`` dimensions when given)."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if isinstance(value, SiluOf):   # a Sigmoid read by something other than its SiLU Mul
            raise self.error("internal error: a SiLU sigmoid read elsewhere")
        if isinstance(value, View):   # reshapes and transposes that moved the batch: built as ops
            value = materialize(self.graph, value, f"{self.name}.in{index}", self.where)
        if not isinstance(value, Tensor):
            raise self.error(f"expects a tensor computed by the model as input {index}, got {_show(value)} "
                             f"(operations on constants are not supported)")
        if rank is not None and len(value.shape) != rank:
            raise self.error(f"expects a rank-{rank} tensor as input {index}, got shape {value.shape}")
        src = self.graph.ops[value.op]
        if src.kind == "input" and src.attrs.get("dtype") == "int64":
            raise self.error(f"reads the integer input {src.name!r} (token ids, INT64 or INT32) as input {index}; only "
                             f"a Gather of a table (an embedding) may read integer inputs, the others must be float32")
        return value

    def weight(self, index: int, what: str, rank: int | None = None) -> Const:
        """Input ``index``, a tensor stored in the model (an initializer): a trainable weight."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if not isinstance(value, Const) or value.source is None:
            raise self.error(f"expects an initializer of the model as its {what}, got {_show(value)} "
                             f"(computed weights are not supported)")
        if rank is not None and value.value.ndim != rank:
            raise self.error(f"expects a rank-{rank} {what}, got initializer {value.source!r} of shape "
                             f"{tuple(value.value.shape)}")
        return value

    def const(self, index: int, what: str) -> np.ndarray | None:
        """Input ``index`` as a constant's value (None when the optional input is omitted)."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if value is None:
            return None
        if not isinstance(value, Const):
            raise self.error(f"expects a constant as its {what}, got {_show(value)}")
        return value.value

    def const_ints(self, index: int, what: str) -> list[int] | None:
        """Input ``index`` as a constant list of integers (a scalar or a 1-D integer tensor: axes,
        a shape), None when the optional input is omitted."""
        value = self.const(index, what)
        if value is None:
            return None
        arr = np.asarray(value)
        if arr.dtype.kind not in "iu" or arr.ndim > 1 or np.any(np.abs(arr) > INT_LIMIT):
            raise self.error(f"expects integers as its {what}, got {arr.dtype} values of shape {arr.shape}")
        return [int(v) for v in arr.reshape(-1)]

    def axes(self, key: str, index: int, rank: int) -> list[int] | None:
        """Axes of a tensor of ``rank`` dimensions, from the attribute ``key`` (older opsets) or
        input ``index``, each in [-rank, rank) and returned in [0, rank); None when not given."""
        axes = self.attrs.get_ints(key) if key in self.attrs else \
            self.const_ints(index, key) if len(self.inputs) > index else None
        if axes is not None and any(not -rank <= a < rank for a in axes):
            raise self.error(f"{key}={axes} is out of range for a tensor of rank {rank}")
        return None if axes is None else [a % rank for a in axes]

    def set_weights(self, shared_ok: bool = False, **params: Weight | None) -> None:
        """Record the op's parameters, each an initializer and its values in PyTorch's layout.

        Every shardwise op owns its weights: an initializer another op already took (tied
        weights) is refused, as :func:`~shardwise.from_torch` refuses a parameter read by two
        layers, since the two copies would drift apart in training.  ``shared_ok``: the op takes
        its own copy of an initializer others read too (batch norm's: exporters merge equal
        constant tensors, such as a fresh model's scales of ones, into one initializer)."""
        for pname, (init, _) in ((k, v) for k, v in params.items() if v is not None and not shared_ok):
            owner = self.owners.get(init.source)
            if owner is not None:
                raise self.error(f"its {pname} is the initializer {init.source!r}, which is also the {owner[1]} of op "
                                 f"{owner[0]!r}; shared (tied) weights are not supported")
            self.owners[init.source] = (self.name, pname)
        self.weights[self.name] = {k: v[1] for k, v in params.items() if v is not None}
        for pname, (init, value) in ((k, v) for k, v in params.items() if v is not None and not shared_ok):
            # the model's own name for a weight the op takes as it is (F.conv2d(x, self.w1) exports
            # "w1"); not for one the exporter named ("onnx::Conv_12") or one in another layout
            # (a MatMul's (in, out) initializer becomes a linear's (out, in) weight)
            source = getattr(init, "source", None)
            # a Linear's weight transposed for a MatMul: the initializer is its transpose
            stored = init.value.T if getattr(init, "transposed", False) else init.value
            if source and "::" not in source and source != f"{self.name}.{pname}" and \
                    np.shape(stored) == np.shape(value) and np.array_equal(stored, value):
                self.graph.weight_names[f"{self.name}.{pname}"] = source


class Outputs(tuple):
    """What a converter of an op with several outputs read by the model returns (an LSTM's
    ``Y``, ``Y_h``, ``Y_c``): the value of each output, in the node's order."""


def _show(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a tensor of shape {value.shape}"
    if isinstance(value, Const):
        return repr(value)
    return "nothing" if value is None else repr(value)


def _pads(c: OnnxCall, kernel: tuple[int, int], stride: tuple[int, int]) -> tuple[int, int]:
    """ONNX padding (``pads`` = [top, left, bottom, right] or ``auto_pad``) as shardwise's
    symmetric (ph, pw); uneven padding has no shardwise equivalent."""
    auto = c.attrs.get_str("auto_pad", "NOTSET")
    if auto == "VALID":
        return (0, 0)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if stride != (1, 1) or any(k % 2 == 0 for k in kernel):
            raise c.error(f"auto_pad={auto} with kernel {kernel} and stride {stride} pads unevenly; it is not "
                          f"supported")
        return (kernel[0] // 2, kernel[1] // 2)
    if auto != "NOTSET":
        raise c.error(f"auto_pad={auto!r} is not supported")
    pads = c.attrs.get_ints("pads", [0, 0, 0, 0], lo=0)
    if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
        raise c.error(f"pads={pads} is not supported (equal padding on both sides of each spatial dimension)")
    return (pads[0], pads[1])


def _pair_attr(c: OnnxCall, key: str, default: tuple[int, int]) -> tuple[int, int]:
    value = c.attrs.get_ints(key, None, lo=1)   # strides, dilations and kernels of at least 1
    if value is None:
        return default
    if len(value) != 2:
        raise c.error(f"{key}={value} is not supported (2-D ops only)")
    return (value[0], value[1])


def _no_bias_or(c: OnnxCall, index: int, out: int) -> Weight | None:
    """The optional bias input ``index``: an initializer of ``out`` values, or None when omitted
    or a computed all-zero constant (what exporters write for a layer without bias)."""
    value = c.inputs[index] if index < len(c.inputs) else None
    if value is None:
        return None
    if isinstance(value, Const) and value.source is None and not np.any(value.value):
        return None
    bias = c.weight(index, "bias")
    if bias.value.size != out or bias.value.ndim > 2:
        raise ShapeError(f"{c.where}: bias of shape {tuple(bias.value.shape)} for {out} outputs")
    return bias, bias.value.reshape(out)


# ----------------------------------------------------------------------------- converters
def _conv(c: OnnxCall) -> Tensor:
    x = c.tensor(0)
    w = c.weight(1, "weight")
    if w.value.ndim != 4 or len(x.shape) != 4:
        raise c.error(f"a {w.value.ndim - 2}-D convolution (weight {tuple(w.value.shape)}) is not supported; "
                      f"only 2-D")
    groups = c.attrs.get_int("group", 1, lo=1)
    dilation = _pair_attr(c, "dilations", (1, 1))
    kernel = (int(w.value.shape[2]), int(w.value.shape[3]))
    if _pair_attr(c, "kernel_shape", kernel) != kernel:
        raise c.error(f"kernel_shape={list(c.attrs['kernel_shape'])} differs from the weight's {kernel}")
    stride = _pair_attr(c, "strides", (1, 1))
    if x.shape[1] != w.value.shape[1] * groups:
        per_group = f" per group x {groups} groups" if groups > 1 else ""
        raise ShapeError(f"{c.where}: the weight {tuple(w.value.shape)} takes {w.value.shape[1]} input channels"
                         f"{per_group} but the input has shape {x.shape}")
    bias = _no_bias_or(c, 2, int(w.value.shape[0]))
    # a dilated kernel spans d * (k - 1) + 1 pixels: that is the window SAME padding centres
    span = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))
    y = c.graph.conv2d(x, int(w.value.shape[0]), kernel=kernel, stride=stride, padding=_pads(c, span, stride),
                       bias=bias is not None, activation=c.activation, name=c.name, dilation=dilation,
                       groups=groups)
    c.set_weights(weight=(w, w.value), bias=bias)
    return y


def _linear(c: OnnxCall, x: Any, weight: Weight, bias: Weight | None) -> Any:
    """y = x W^T + b, ``weight`` in PyTorch's layout (out, in)."""
    def layer(t: Tensor) -> Tensor:
        return linear_layer(c, t, tuple(weight[1].shape), bias is not None, weight_text="(out, in) = ",
                            unsupported_rank="a matrix product of a rank-{rank} tensor {shape} with a weight")
    # on a view that moved the batch (attention spelled sequence-first): on its rows, the same view of the result
    y = linear_of_view(c.graph, x, c.name, c.where, layer) if isinstance(x, View) else layer(x)
    c.set_weights(weight=weight, bias=bias)
    return y


def _rows(c: OnnxCall, index: int) -> Any:
    """A linear layer's input: a graph tensor, or a view whose rows it reads (:func:`_linear`)."""
    value = c.inputs[index] if index < len(c.inputs) else None
    return value if isinstance(value, View) else c.tensor(index)


def _gemm(c: OnnxCall) -> Tensor:
    """Gemm(A, B, C) = alpha A' B' + beta C: a linear layer when B is an initializer."""
    a = c.attrs
    trans_a, trans_b = a.get_int("transA", 0, lo=0, hi=1), a.get_int("transB", 0, lo=0, hi=1)
    alpha, beta = a.get_float("alpha", 1.0), a.get_float("beta", 1.0)
    if trans_a or alpha != 1.0 or (len(c.inputs) > 2 and c.inputs[2] is not None and beta != 1.0):
        raise c.error(f"Gemm with transA={trans_a}, alpha={alpha}, beta={beta} is not supported (transA=0, "
                      f"alpha=beta=1: a linear layer)")
    w = c.weight(1, "weight", rank=2)
    weight = (w, w.value if trans_b else w.value.T)   # PyTorch's (out, in)
    return _linear(c, _rows(c, 0), weight, _no_bias_or(c, 2, int(weight[1].shape[0])))


def _matmul(c: OnnxCall) -> Tensor:
    """MatMul(x, W): a linear layer when an Add of a bias initializer reads it (``bias_add``),
    else a matrix product; an initializer operand is then a ``parameter`` op, as
    ``x @ self.w`` is in :func:`~shardwise.from_torch`."""
    if c.bias_add is not None:
        w, b = c.weight(1, "weight", rank=2), c.bias_add
        if b.value.size != w.value.shape[1]:
            raise ShapeError(f"{c.where}: bias of shape {tuple(b.value.shape)} for {w.value.shape[1]} outputs")
        return _linear(c, _rows(c, 0), (w, w.value.T), (b, b.value.reshape(-1)))
    ab = []
    for k in range(2):
        v = c.inputs[k]
        if isinstance(v, Const):
            c.weight(k, f"operand {k}", rank=2)
            assert c.parameter_op is not None
            v = c.parameter_op(v, c.where)
            c.inputs[k] = v
        ab.append(c.tensor(k, rank=2))
    return c.graph.matmul(ab[0], ab[1], name=c.name)


def _batchnorm(c: OnnxCall) -> Tensor:
    x = c.tensor(0, rank=4)
    scale, bias = c.weight(1, "scale", rank=1), c.weight(2, "bias", rank=1)
    mean, var = c.weight(3, "running mean", rank=1), c.weight(4, "running variance", rank=1)
    # epsilon is a float32 attribute: 1e-3 arrives as 0.0010000000475; its shortest float32
    # spelling gives back the model's value (the graph from_torch builds)
    eps = float(str(np.float32(c.attrs.get_float("epsilon", 1e-5))))
    if not eps > 0:
        raise c.error(f"epsilon={eps:g} is not supported (a positive number)")
    for what, w in (("scale", scale), ("bias", bias), ("running mean", mean), ("running variance", var)):
        if w.value.shape != (x.shape[1],):
            raise ShapeError(f"{c.where}: {what} of shape {tuple(w.value.shape)} for input {x.shape}")
    # ONNX keeps running = momentum * running + (1 - momentum) * statistic: PyTorch's momentum is 1 - it
    # (six decimals: the attribute is a float32, and 1 - float32(0.9) is 0.10000002)
    momentum = round(1.0 - c.attrs.get_float("momentum", 0.9), 6)
    if not 0.0 <= momentum <= 1.0:
        raise c.error(f"momentum={c.attrs.get('momentum')!r} is outside [0, 1]")
    y = c.graph.batchnorm2d(x, name=c.name, momentum=momentum, eps=eps)
    c.set_weights(shared_ok=True, weight=(scale, scale.value.copy()), bias=(bias, bias.value.copy()))
    c.state[c.name] = {"running_mean": mean.value, "running_var": var.value}
    return y


def _activation(kind: str) -> Callable[[OnnxCall], Tensor]:
    def convert(c: OnnxCall) -> Tensor:
        return getattr(c.graph, kind)(c.tensor(0), name=c.name)
    return convert


def _gelu(c: OnnxCall) -> Tensor:
    approximate = c.attrs.get_str("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise c.error(f"approximate={approximate!r} is not a GELU form; ONNX's are 'none' and 'tanh'")
    return c.graph.gelu(c.tensor(0), approximate=approximate, name=c.name)


def _leaky_relu(c: OnnxCall) -> Tensor:
    # ONNX stores alpha as float32: 0.2 arrives as 0.20000000298...; its shortest float32
    # spelling gives back the slope the model was written with (the kernels compute in
    # float32, so either value gives the same results)
    alpha = float(str(np.float32(c.attrs.get_float("alpha", 0.01))))
    return c.graph.leaky_relu(c.tensor(0), negative_slope=alpha, name=c.name)


def _mul(c: OnnxCall) -> Tensor:
    """Mul(x, Sigmoid(x)): SiLU.  Any other product is refused."""
    a, b = c.inputs[0], c.inputs[1]
    for s, other in ((a, b), (b, a)):
        if isinstance(s, SiluOf) and other is s.x:
            return c.graph.silu(s.x, name=c.name)
    raise c.error(f"the ONNX op Mul is not supported here (x * Sigmoid(x) is SiLU; otherwise it takes two tensors "
                  f"or initializers that broadcast); it multiplies {_show(a)} by {_show(b)}")


def _add(c: OnnxCall) -> Tensor:
    a, b = c.inputs[0], c.inputs[1]
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        other = b if isinstance(a, Tensor) else a
        raise c.error(f"adding {_show(other)} is not supported (Add takes two tensors, or a tensor and an "
                      f"initializer, that broadcast; a bias is supported after a MatMul with an initializer)")
    if a.shape != b.shape:
        raise c.error(f"adding shapes {a.shape} and {b.shape} is not supported: they do not broadcast")
    return c.graph.add(a, b, name=c.name)


def _concat(c: OnnxCall) -> Tensor:
    ts = [c.tensor(k) for k in range(len(c.inputs))]
    rank = len(ts[0].shape)
    axis = c.attrs.get_int("axis")
    if axis is None or not -rank <= axis < rank:
        raise c.error(f"axis={axis!r} is out of range for rank {rank}")
    if axis % rank == 0:
        raise c.error("concatenating along the batch dimension (axis=0) is not supported")
    return c.graph.concat(ts, axis=axis % rank, name=c.name)


def _to_2d(c: OnnxCall, x: Tensor, shape: tuple[int, ...], what: str) -> Tensor:
    """``x`` reshaped to ``shape``: itself, or a flatten to (N, features)."""
    if tuple(shape) == x.shape:
        return x
    if len(shape) == 2 and len(x.shape) > 2 and shape[0] == x.shape[0]:
        return c.graph.flatten(x, name=c.name)
    raise c.error(f"{what} from {x.shape} to {tuple(shape)} is not supported; only flattening to (N, features) is")


def _flatten(c: OnnxCall) -> Tensor:
    x = c.tensor(0)
    axis = c.attrs.get_int("axis", 1)
    if axis % max(len(x.shape), 1) != 1:
        raise c.error(f"Flatten(axis={axis}) of shape {x.shape} is not supported; only axis=1 (everything after "
                      f"the batch dimension)")
    return _to_2d(c, x, (x.shape[0], int(np.prod(x.shape[1:]))), "flattening")


def _reshape(c: OnnxCall) -> Tensor:
    x = c.tensor(0)
    target = c.const_ints(1, "shape")
    if target is None:
        raise c.error("expects a constant as its shape, got nothing")
    try:
        shape = reshape_target(x.shape, target,
                               bool(c.attrs.get("allowzero", 0)))
    except FoldError as exc:
        raise c.error(str(exc)) from None
    return _to_2d(c, x, shape, "reshaping")


def _squeeze(c: OnnxCall) -> Tensor:
    x = c.tensor(0)
    axes = c.axes("axes", 1, len(x.shape))
    drop = {d for d, s in enumerate(x.shape) if s == 1} if axes is None else set(axes)
    if any(x.shape[d] != 1 for d in drop):
        raise c.error(f"cannot squeeze the axes {sorted(drop)} of shape {x.shape} (of size other than 1)")
    if 0 in drop:
        raise c.error("squeezing the batch dimension is not supported")
    return _to_2d(c, x, tuple(s for d, s in enumerate(x.shape) if d not in drop), "squeezing")


def _pool(kind: str) -> Callable[[OnnxCall], Tensor]:
    def convert(c: OnnxCall) -> Tensor:
        x = c.tensor(0, rank=4)
        kernel = _pair_attr(c, "kernel_shape", (0, 0))
        if kernel == (0, 0):
            raise c.error("kernel_shape is missing")
        stride = _pair_attr(c, "strides", (1, 1))   # ONNX's default stride is 1, not the kernel
        if _pair_attr(c, "dilations", (1, 1)) != (1, 1):
            raise c.error(f"dilations={list(c.attrs['dilations'])} is not supported")
        padding = _pads(c, kernel, stride)
        if kind == "avg" and padding != (0, 0) and not c.attrs.get_int("count_include_pad", 0):
            raise c.error("count_include_pad=0 with padding is not supported (padded zeros count in the divisor)")
        ceil = bool(c.attrs.get_int("ceil_mode", 0, lo=0, hi=1))
        if ceil and kind != "max":   # a partial window of an average pool: not supported
            check_ceil_mode(c, x.shape, kernel, stride, padding)
        return c.graph.pool2d(x, kernel=kernel, stride=stride, padding=padding, kind=kind, name=c.name,
                              ceil_mode=ceil and kind == "max")
    return convert


def _global_pool(kind: str) -> Callable[[OnnxCall], Tensor]:
    def convert(c: OnnxCall) -> Tensor:
        x = c.tensor(0, rank=4)
        if x.shape[2:] == (1, 1):   # pooling one value is the identity (from_torch's adaptive pooling skips it too)
            return x
        return c.graph.pool2d(x, kernel=x.shape[2:], stride=x.shape[2:], kind=kind, name=c.name)
    return convert


def _reduce_mean(c: OnnxCall) -> Tensor:
    """The mean over (H, W) of an (N, C, H, W) tensor: global average pooling (then a flatten
    unless ``keepdims``)."""
    x = c.tensor(0)
    axes = c.axes("axes", 1, len(x.shape))
    axes = None if axes is None else sorted(axes)
    if len(x.shape) != 4 or axes != [2, 3]:
        raise c.error(f"ReduceMean over axes {axes} of shape {x.shape} is not supported; only over (H, W) of an "
                      f"(N, C, H, W) tensor (global average pooling)")
    if x.shape[2:] == (1, 1):   # the mean of one value: no pool (PyTorch exports AdaptiveAvgPool2d(1) this way)
        return x if c.attrs.get_int("keepdims", 1) else c.graph.flatten(x, name=c.name)
    y = c.graph.pool2d(x, kernel=x.shape[2:], stride=x.shape[2:], kind="avg", name=c.name)
    return y if c.attrs.get_int("keepdims", 1) else c.graph.flatten(y, name=f"{c.name}.flatten")


def _softmax(c: OnnxCall) -> Tensor:
    x = c.tensor(0, rank=2)
    if not c.is_output:
        raise c.error(f"{c.op_type} is supported only as the model's output, where it becomes shardwise's softmax "
                      f"cross-entropy loss")
    if c.attrs.get_int("axis", -1) not in (1, -1):
        raise c.error(f"{c.op_type}(axis={c.attrs['axis']}) is not supported; only over the classes (axis=1)")
    return c.graph.softmax(x, name=c.name,
                           output="log_probabilities" if c.op_type == "LogSoftmax" else "probabilities")


def _identity(c: OnnxCall) -> Any:
    return c.tensor(0)


def _dropout(c: OnnxCall) -> Any:
    """Dropout at inference (no ``training_mode``, or a false one) is the identity in ONNX; in
    training mode it drops with probability ``ratio`` (0.5 when absent): shardwise's dropout op,
    whose masks are a function of the seed, the step and the element's index (not the
    exporter's random stream), the identity in the Trainer's eval mode."""
    training = c.const(2, "training_mode") if len(c.inputs) > 2 else None
    if training is None or not bool(np.asarray(training).reshape(-1)[0]):
        return c.tensor(0)
    ratio = c.const(1, "ratio") if len(c.inputs) > 1 and c.inputs[1] is not None else None
    # the float32 ratio as its shortest decimal (0.3, not 0.30000001): the same float32, and the
    # probability PyTorch's module had, so the graph is the one from_torch builds
    p = 0.5 if ratio is None else float(str(np.asarray(ratio, np.float32).reshape(-1)[0]))
    if not 0.0 <= p < 1.0:
        raise c.error(f"Dropout ratio={p} is not supported (a number in [0, 1))")
    if p == 0.0:
        return c.tensor(0)
    return c.graph.dropout(c.tensor(0), p, name=c.name)


_FLOAT32_MAX = float(np.finfo(np.float32).max)   # an absent bound of Clip: clip's bound at the largest float32


def _shortest(v: Any) -> float:
    """A float32 value as its shortest decimal spelling (6.0, -0.5, 0.1): the number the model was
    written with, so the graph is the one from_torch builds."""
    return float(str(np.float32(v)))


def _clip(c: OnnxCall) -> Tensor:
    """Clip(x, min, max) with constant bounds (inputs since opset 11, attributes before; either
    may be absent): ReLU6, Hardtanh and torch.clamp as PyTorch exports them."""
    x = c.tensor(0)
    bounds = []
    for k, key, none in ((1, "min", -_FLOAT32_MAX), (2, "max", _FLOAT32_MAX)):
        if key in c.attrs:
            bounds.append(_shortest(c.attrs.get_float(key, none)))
            continue
        v = c.const(k, key) if len(c.inputs) > k else None
        if v is None:
            bounds.append(none)
            continue
        arr = np.asarray(v)
        if arr.size != 1 or arr.dtype.kind != "f" or not np.isfinite(arr).all():
            raise c.error(f"Clip {key} must be one finite number, got {arr.dtype} values of shape {arr.shape}")
        bounds.append(min(max(_shortest(arr.reshape(-1)[0]), -_FLOAT32_MAX), _FLOAT32_MAX))
    if bounds[0] > bounds[1]:
        raise c.error(f"Clip with min {bounds[0]} > max {bounds[1]} is not supported")
    return c.graph.clip(x, bounds[0], bounds[1], name=c.name)


def _bound(kind: str) -> Callable[[OnnxCall], Tensor]:
    """Max (or Min) of a tensor and one constant number: a clip from below (above), as PyTorch's
    dynamo export writes ``torch.clamp(x, min=a)``."""
    def convert(c: OnnxCall) -> Tensor:
        if len(c.inputs) != 2:
            raise c.error(f"{kind} of {len(c.inputs)} inputs is not supported (a tensor and a constant)")
        k = 1 if isinstance(c.inputs[1], Const) else 0
        arr = np.asarray(c.const(k, "bound"))
        if arr.size != 1 or arr.dtype.kind != "f" or not np.isfinite(arr).all():
            raise c.error(f"{kind} with {_show(c.inputs[k])} is not supported (a tensor and one finite number)")
        x = c.tensor(1 - k)
        v = _shortest(arr.reshape(-1)[0])
        lo, hi = (v, _FLOAT32_MAX) if kind == "Max" else (-_FLOAT32_MAX, v)
        return c.graph.clip(x, lo, hi, name=c.name)
    return convert


def _hard_sigmoid(c: OnnxCall) -> Tensor:
    """HardSigmoid with PyTorch's alpha = 1/6, beta = 1/2 (nn.Hardsigmoid's export; ONNX's default
    alpha = 0.2 is another function)."""
    alpha, beta = c.attrs.get_float("alpha", 0.2), c.attrs.get_float("beta", 0.5)
    if np.float32(alpha) != np.float32(1.0 / 6.0) or np.float32(beta) != np.float32(0.5):
        raise c.error(f"HardSigmoid(alpha={alpha:g}, beta={beta:g}) is not supported (PyTorch's alpha=1/6, beta=0.5)")
    return c.graph.hardsigmoid(c.tensor(0), name=c.name)


ONNX_OPS: dict[str, Callable[[OnnxCall], Any]] = {
    "Conv": _conv,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "BatchNormalization": _batchnorm,
    "Relu": _activation("relu"),
    "Sigmoid": _activation("sigmoid"),
    "Tanh": _activation("tanh"),
    "Gelu": _gelu,
    "LeakyRelu": _leaky_relu,
    "Mul": _mul,
    "Add": _add,
    "Concat": _concat,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Squeeze": _squeeze,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"),
    "ReduceMean": _reduce_mean,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "Identity": _identity,
    "Dropout": _dropout,
    "Clip": _clip,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _activation("hardswish"),
    "Max": _bound("Max"),
    "Min": _bound("Min"),
}
"""Every ONNX op :func:`shardwise.from_onnx` imports (beside the constant ones it folds)."""


class OnnxDocRow(NamedTuple):
    """A row of the table of ONNX ops in docs/importing.md (markdown; tools/ops_docs.py writes it)."""

    op: str     # the shardwise op(s) built: "`conv2d`", "`pool2d` (avg) (+ `flatten`)"
    onnx: str   # the ONNX op types, each in backquotes, or the pattern of them: "`MatMul` + `Add`"
    doc: str    # the conditions


ONNX_DOC_ROWS: tuple[OnnxDocRow, ...] = (
    OnnxDocRow("`conv2d`", "`Conv`",
               "2-D, any `group` (grouped and depthwise) and `dilations`; padding equal on both sides (or "
               "`auto_pad` `VALID`, or `SAME_*` with stride 1 and an odd dilated kernel span "
               "`dilation * (kernel - 1) + 1`); weight and bias initializers (a computed all-zero bias is no bias)"),
    OnnxDocRow("`linear`", "`Gemm`",
               "`transA=0`, `alpha=beta=1`, `B` an initializer (`transB` either), `C` an initializer"),
    OnnxDocRow("`linear`", "`MatMul` + `Add`",
               "a `MatMul` by a rank-2 initializer read only by an `Add` of a bias initializer"),
    OnnxDocRow("`linear`", "`Transpose` + `MatMul` (+ `Add`)",
               "PyTorch's dynamo export of `nn.Linear`: a `MatMul` of `(N, in)` or `(N, T, in)` by a transposed "
               "rank-2 initializer (and the `Add` of its bias initializer); without the `Add`, a linear layer "
               "without bias"),
    OnnxDocRow("`matmul` (+ `parameter`)", "`MatMul`",
               "rank-2 operands (an initializer operand becomes a `parameter` op), or two computed tensors of one "
               "rank (attention)"),
    OnnxDocRow("`embedding`", "`Gather`",
               "of a float initializer table by an integer input of the model (token ids); by the constant indices "
               "`0..rows-1` (learned positions): the whole table as a `parameter` op"),
    OnnxDocRow("`layer_norm` (+ `reshape`)", "`LayerNormalization`",
               "over the last axis, or any `axis` but the batch's (a `reshape` merging the axes from it, the norm, a "
               "`reshape` back); scale and bias initializers (one shared by several norms, as exporters merge "
               "equal constants, is copied for each); any `epsilon`"),
    OnnxDocRow("`reshape`, `permute`", "`Reshape`, `Transpose`",
               "of computed tensors, the batch dimension kept; the reshapes and transposes around `k` that "
               "PyTorch's export of attention writes (`(N, H, T, Dh) -> (N H, T, Dh)`, transposed, reshaped back) "
               "are followed as views and read by the `MatMul` as `transpose_b`"),
    OnnxDocRow("`reshape`, `slice`, `permute` (+ `linear`)",
               "`Reshape`, `Transpose`, `Unsqueeze`, `Squeeze`, `Gather`",
               "reshapes, transposes and constant indices that move the batch dimension (`nn.MultiheadAttention` "
               "spelled sequence-first: `(T, N, D)`, the batch merged with the heads `(T, N H, Dh)`) are followed "
               "as views of a tensor; a reader gets the view built as a `reshape` of the tensor, `slice`s, a "
               "`permute` and a `reshape` where it keeps the batch in dimension 0 and reads each element once "
               "(else it is refused); a linear layer (`MatMul`, `Gemm`) on a view runs on its rows gathered "
               "batch-first; `Gather` of a computed tensor by constant indices (an `as_strided`) is such a view"),
    OnnxDocRow("attention: `matmul`, `softmax_dim`, `matmul`", "`Mul`, `MatMul`, `Add`, `Softmax`, `MatMul`",
               "`Mul` of q and of k's transpose by positive constants, their `MatMul`, the `Add` of a constant "
               "causal mask (0 on and below the diagonal, -inf or <= -1e9 above), `Softmax(axis=-1)`: `softmax_dim` "
               "with the product of the constants (1/sqrt(Dh) when it equals that within float32 precision) and "
               "`causal=True`"),
    OnnxDocRow("`add` (broadcast)", "`Add`", "`(N, T, D) + (T, D)`"),
    OnnxDocRow("`matmul`", "`Einsum`",
               "a batched matrix product `...ik,...kj->...ij`, either operand's last two letters swapped (MaxViT's "
               "`q k^T`): a `matmul` with `transpose_b`"),
    OnnxDocRow("relative position bias: `parameter`, `slice`, `concat`, `reshape`, `permute`",
               "`GatherND`, `Gather`",
               "of a table initializer `((2 wh - 1)(2 ww - 1), H)` by torchvision's relative position index (Swin "
               "Transformer, MaxViT; checked): the bias `(1, H, T, T)` built of slices of the table, as from_torch "
               "builds it, an exact composition"),
    OnnxDocRow("`mul`, `add` (+ `clip`)", "`Add`",
               "attention scores plus a bias of the model `(1, H, T, T)` (the scores' scale a `mul` by a constant); "
               "scores `(N, nW, H, T, T)` plus torchvision's shifted-window mask, a constant `(1, nW, 1, T, T)` of 0 "
               "and -100 (its geometry found and checked), built of `clip`ped constants, `matmul` and `add` as "
               "from_torch builds it"),
    OnnxDocRow("`concat` (+ `clip`, `expand`)", "`Pad`",
               "constant mode with zeros, never the batch dimension (Swin's padding to whole windows): zeros made "
               "by `clip` of a slice, concatenated"),
    OnnxDocRow("`softmax_dim`", "`Softmax`", "inside the network, over any axis"),
    OnnxDocRow("`batchnorm2d`", "`BatchNormalization`",
               "any `epsilon`; scale, bias, running mean and variance initializers (one shared by several batch "
               "norms, as exporters merge equal constants, is copied for each); `momentum`"),
    OnnxDocRow("`group_norm`", "`Reshape` + `InstanceNormalization` + `Reshape` + `Mul` + `Add`",
               "PyTorch's TorchScript export of `nn.GroupNorm` (any opset): the reshape of `(N, C, H, W)` to "
               "`(N, G, C/G * H * W)`, its instance norm with scale 1 and bias 0 (any `epsilon`), the reshape back, "
               "the `Mul` by the weight and the `Add` of the bias (initializers `(C, 1, 1)`; constants 1 and 0 "
               "without affine), each read by the next alone: one op, named for the module, its weights "
               "`<module>.weight`, `.bias`"),
    OnnxDocRow("`group_norm`", "`InstanceNormalization`",
               "of an `(N, C, H, W)` tensor (`nn.InstanceNorm2d`): a group per channel; scale and bias initializers, "
               "or constants 1 and 0 (no affine); any `epsilon`"),
    OnnxDocRow("`relu`", "`Relu`", "fused into a convolution or linear layer it alone reads"),
    OnnxDocRow("`sigmoid`, `tanh`", "`Sigmoid`, `Tanh`", "element-wise, any shape"),
    OnnxDocRow("`gelu`", "`Gelu`",
               '`approximate="none"` and `"tanh"` (opset 20; before it, GELU is spelled with `Erf` or `Tanh` '
               'and `Pow`, which is refused)'),
    OnnxDocRow("`silu`", "`Mul`", "only `Mul(x, Sigmoid(x))`, the way exporters write SiLU"),
    OnnxDocRow("`leaky_relu`", "`LeakyRelu`", "any finite `alpha`"),
    OnnxDocRow("`add`", "`Add`", "two computed tensors of one shape"),
    OnnxDocRow("`concat`", "`Concat`", "any axis but the batch"),
    OnnxDocRow("`flatten`", "`Flatten`, `Reshape`, `Squeeze`",
               "to `(N, features)` (`Flatten` with `axis=1`); a reshape to the same shape is no op"),
    OnnxDocRow("`pool2d`", "`MaxPool`, `AveragePool`",
               "`dilations` 1, padding as for `Conv`, `count_include_pad=1` when padded, no indices output read; "
               "`ceil_mode` (`MaxPool`: any, a partial last window; `AveragePool`: where it adds no window)"),
    OnnxDocRow("`pool2d`", "`GlobalAveragePool`, `GlobalMaxPool`", "no op on a 1x1 input"),
    OnnxDocRow("`pool2d` (avg) (+ `flatten`)", "`ReduceMean`", "over axes (2, 3) of an `(N, C, H, W)` tensor"),
    OnnxDocRow("`pool2d` (avg), `expand`, `adaptive_avg_pool2d`",
               "`Transpose`, `GatherND`, `ReduceMean`, `Where`, `Gather`, `Add`, `Div`",
               "PyTorch's dynamo export of `nn.AdaptiveAvgPool2d` where the output size does not divide the input "
               "size (alexnet and vgg below 224 px): the `GatherND` of constant window indices from the `(H, W, N, C)` "
               "transpose of `(N, C, H, W)`, then the mean over each window, or the padding of uneven windows zeroed "
               "(`Where` of a constant mask), the sum unrolled (`Gather`, `Add`) and the `Div` by the windows' sizes; "
               "followed as one linear map of each channel's `H x W` values and checked against PyTorch's windows "
               "when the pooled `(N, C, OH, OW)` is read: the ops `from_torch` builds (`expand` of a `1x1` input, "
               "else `adaptive_avg_pool2d`)"),
    OnnxDocRow("`softmax` (the loss)", "`Softmax`, `LogSoftmax`",
               "as the model's output, over the classes of `(N, C)` or `(N, T, C)` (`LogSoftmax` only there)"),
    OnnxDocRow("`dropout`", "`Dropout`",
               "in training mode (`training_mode` true), `ratio` in [0, 1) (0.5 when absent; none for 0); masks as "
               "for `nn.Dropout` above"),
    OnnxDocRow("none (identity)", "`Identity`, `Dropout`",
               "`Dropout` in inference mode (no `training_mode`, or false)"),
    OnnxDocRow("unrolled LSTM (above)", "`LSTM`",
               "one forward layer from zero states, `layout` 0 (input the transpose of a batch-first tensor) or 1; "
               'see "LSTMs" above'),
    OnnxDocRow("`mul`, `broadcast_add`", "`Mul`, `Add`",
               "two tensors that broadcast (squeeze-and-excitation's scale; a learned table): an initializer operand "
               "becomes a `parameter` op; computed constants are refused"),
    OnnxDocRow("`expand`", "`Expand`", "of a computed tensor or an initializer (a class token), constant shape"),
    OnnxDocRow("`slice`", "`Slice`, `Split`",
               "constant starts, ends, positive steps and split sizes (or `num_outputs`), never the batch axis"),
    OnnxDocRow("`slice`", "`SplitToSequence` + `SequenceAt`",
               "PyTorch's dynamo export of `x.chunk(n, dim)`: a constant `split` (a size, or sizes), never the "
               "batch axis, each piece read by a `SequenceAt` of a constant position"),
    OnnxDocRow("`upsample_nearest`, `upsample_bilinear`", "`Resize`",
               "integer scales (or sizes) of H and W; `mode=\"nearest\"` (half-pixel, or asymmetric with `floor`), or "
               "`\"linear\"` with half-pixel coordinates (`align_corners=False`)"),
    OnnxDocRow("`clip`", "`Clip`",
               "constant `min` and `max` (inputs, or attributes before opset 11; either may be absent): ReLU6, "
               "Hardtanh, `torch.clamp`; no gradient at the bounds themselves"),
    OnnxDocRow("`clip`", "`Max`, `Min`", "of a tensor and one constant number (`torch.clamp(x, min=a)` in PyTorch's "
               "dynamo export)"),
    OnnxDocRow("`hardsigmoid`", "`HardSigmoid`", "PyTorch's `alpha=1/6`, `beta=0.5`"),
    OnnxDocRow("`hardswish`", "`HardSwish`", "element-wise, any shape"),
    OnnxDocRow("`rms_norm` (+ `reshape`)", "`RMSNormalization`",
               "over the last axis or any `axis` but the batch's, as for `LayerNormalization`; a scale initializer"),
)
"""The table of supported ONNX ops in docs/importing.md, row by row (``make docs-ops`` regenerates
it).  Every op type :data:`ONNX_OPS` holds, with the sequence and LSTM ops that
:mod:`~shardwise.importers.onnx.seq` and :mod:`~shardwise.importers.onnx.rnn` add, must be
named (in backquotes) in the ``onnx`` column of some row: a test checks.  A new op: a row
here (or its op type in an existing row), then ``make docs-ops``."""

HINTS: dict[str, str] = {
    "Erf": "GELU exported before opset 20 is spelled with Erf, Div, Mul and Add; export with opset_version=20 or "
           "later, where it is one Gelu node",
    "Pow": "GELU's tanh approximation exported before opset 20 is spelled with Pow, Mul, Add and Tanh; export with "
           "opset_version=20 or later, where it is one Gelu node (approximate='tanh')",
}
"""What to say about an unsupported op a model commonly has for a supported reason."""

KIND_NAMES: dict[str, str] = {
    "Conv": "conv", "Gemm": "linear", "MatMul": "matmul", "BatchNormalization": "bn", "Relu": "relu",
    "Sigmoid": "sigmoid", "Tanh": "tanh", "Gelu": "gelu", "LeakyRelu": "leaky_relu", "Mul": "silu", "Add": "add",
    "Concat": "cat", "Flatten": "flatten", "Reshape": "reshape", "Squeeze": "squeeze", "MaxPool": "maxpool",
    "AveragePool": "avgpool", "GlobalAveragePool": "avgpool", "GlobalMaxPool": "maxpool", "ReduceMean": "mean",
    "Softmax": "softmax", "LogSoftmax": "softmax", "Gather": "embedding", "LayerNormalization": "layer_norm",
    "Transpose": "transpose", "Clip": "clip", "HardSigmoid": "hardsigmoid", "HardSwish": "hardswish",
    "RMSNormalization": "rms_norm", "Max": "clamp", "Min": "clamp", "InstanceNormalization": "group_norm",
}
"""The operation's name in op names made from a scope (``"layer1.0.add"``): from_torch's names."""

MULTI_OUTPUT: set[str] = set()
"""Ops whose converters return :class:`Outputs`: every output may be read (of other ops, only
the first)."""

LAZY_READERS: set[str] = set()
"""Ops whose converters take lazy values (an LSTM's steps or states) as they are; for the
others the importer builds them as one tensor first."""

FUSES_RELU = ("Conv", "Gemm", "MatMul")
"""Ops a Relu that is the only reader of their output is fused into (a MatMul only as a linear layer)."""
