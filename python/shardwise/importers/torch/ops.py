"""The table of PyTorch operations :func:`shardwise.from_torch` imports, one entry per operation.

Each :class:`TorchOp` lists every spelling of one operation (the ``torch.nn`` module class, the
functions, the ``Tensor`` methods) and one converter that builds the shardwise op.  The
arguments of the functional form (after the data inputs) have the same names as the
attributes of the module form (``F.max_pool2d(x, kernel_size, stride, ...)`` and
``nn.MaxPool2d.kernel_size``, ``.stride``, ...), so a converter reads ``call.attrs`` whatever
the spelling.  Adding an operation is one entry of :data:`TORCH_OPS`, whose ``op=`` (the
shardwise op it builds) and ``doc=`` (its conditions) are its row of the table in
docs/importing.md; the sigmoid, for example, is::

    TorchOp("sigmoid", _activation("sigmoid"), modules=("Sigmoid",),
            functions=("torch.sigmoid", "torch.sigmoid_", "torch.nn.functional.sigmoid", ...),
            methods=("sigmoid", "sigmoid_"), op="`sigmoid`", doc="element-wise, any shape"),

then ``make docs-ops`` (tools/ops_docs.py) rewrites the table; a test fails while the page
differs, or an entry has no ``op`` or ``doc``.  A function written as Python syntax
(``operator.add``) shows its form from :data:`DOC_FORMS`.

Nothing here imports torch: module classes and functions are named by strings, resolved when
a model is imported (:func:`shardwise.importers.torch.convert.resolve`); converters only read attributes
of torch objects.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from shardwise.errors import ShapeError
from shardwise.graph import Graph, Tensor

from shardwise.importers.adaptive import adaptive_pool
from shardwise.importers.common import Lazy, check_ceil_mode, linear_layer
from shardwise.importers.torch.call import REQUIRED, Attr, Call, TorchOp, _dim, _dim_attr, _pair, _show


# ----------------------------------------------------------------------------- converters
def _conv(c: Call, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: int,
          padding_mode: str = "zeros") -> Tensor:
    """A convolution of weight (C_out, C_in / groups, kH, kW), from nn.Conv2d or F.conv2d;
    grouped, depthwise and dilated ones included."""
    x = c.tensor(0, rank=4)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise c.error(f"groups={groups!r} is not supported (a positive int)")
    dilation = _pair(c, dilation, "dilation")
    if padding_mode != "zeros":
        raise c.error(f"padding_mode={padding_mode!r} is not supported (zero padding only)")
    kernel = (int(weight.shape[2]), int(weight.shape[3]))
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        # PyTorch pads d * (k - 1) in all, the odd one at the end: symmetric only when even
        total = tuple(d * (k - 1) for d, k in zip(dilation, kernel))
        if any(t % 2 for t in total):
            raise c.error(f"padding='same' with kernel {kernel} and dilation {dilation} pads unevenly; it is not "
                          f"supported")
        padding = (total[0] // 2, total[1] // 2)
    else:
        padding = _pair(c, padding, "padding")
    if x.shape[1] != weight.shape[1] * groups:
        per_group = f" per group x {groups} groups" if groups > 1 else ""
        raise ShapeError(f"{c.where}: the weight {tuple(weight.shape)} takes {weight.shape[1]} input channels"
                         f"{per_group} but the input has shape {x.shape}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ShapeError(f"{c.where}: bias of shape {tuple(bias.shape)} for {weight.shape[0]} output channels")
    y = c.graph.conv2d(x, int(weight.shape[0]), kernel=kernel, stride=_pair(c, stride, "stride"), padding=padding,
                       bias=bias is not None, activation=c.activation, name=c.name, dilation=dilation,
                       groups=groups)
    c.set_weights(weight=weight, bias=bias)
    return y


def _conv2d(c: Call) -> Tensor:
    m = c.module
    return _conv(c, m.weight, m.bias, tuple(m.stride), m.padding if isinstance(m.padding, str) else tuple(m.padding),
                 tuple(m.dilation), m.groups, m.padding_mode)


def _conv2d_fn(c: Call) -> Tensor:
    a = c.attrs
    bias = None if a["bias"] is None else c.parameter(a["bias"], "bias", rank=1)
    return _conv(c, c.parameter(c.inputs[1], "weight", rank=4), bias, a["stride"], a["padding"], a["dilation"],
                 a["groups"])


def _linear_with(c: Call, weight: Any, bias: Any) -> Tensor:
    """y = x W^T + b with W (out, in), from nn.Linear or F.linear, on (N, in) or (N, T, in)."""
    y = linear_layer(c, c.tensor(0), tuple(weight.shape), bias is not None,
                     unsupported_rank="Linear on a rank-{rank} input {shape}",
                     bias_shape=None if bias is None else tuple(bias.shape))
    c.set_weights(weight=weight, bias=bias)
    return y


def _linear(c: Call) -> Tensor:
    return _linear_with(c, c.module.weight, c.module.bias)


def _linear_fn(c: Call) -> Tensor:
    bias = None if c.attrs["bias"] is None else c.parameter(c.attrs["bias"], "bias", rank=1)
    return _linear_with(c, c.parameter(c.inputs[1], "weight", rank=2), bias)


def _batchnorm2d(c: Call) -> Tensor:
    m = c.module
    x = c.tensor(0, rank=4)
    if not m.affine:
        raise c.error("affine=False is not supported (shardwise's batch norm has a weight and a bias)")
    if isinstance(m.eps, bool) or not isinstance(m.eps, (int, float)) or not m.eps > 0:
        raise c.error(f"eps={m.eps!r} is not supported (a positive number)")
    if x.shape[1] != m.num_features:
        raise ShapeError(f"{c.where}: num_features={m.num_features} but the input has shape {x.shape}")
    if m.track_running_stats and m.momentum is None:
        raise c.error("momentum=None (a cumulative average of the statistics) is not supported; give a momentum")
    momentum = m.momentum if m.track_running_stats else 0.0   # no running statistics: never updated
    y = c.graph.batchnorm2d(x, name=c.name, momentum=float(momentum), eps=float(m.eps))
    c.set_weights(weight=m.weight, bias=m.bias)
    if m.track_running_stats:   # the model's running statistics, as its state_dict holds them
        c.state[c.name] = {"running_mean": m.running_mean, "running_var": m.running_var,
                           "num_batches_tracked": m.num_batches_tracked}
    return y


def _group_norm_with(c: Call, groups: Any, eps: Any, weight: Any, bias: Any) -> Tensor:
    """A group_norm op of the call's (N, C, H, W) input; weight and bias (C,) both or neither."""
    x = c.tensor(0, rank=4)
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise c.error(f"num_groups={groups!r} is not supported (a positive int)")
    if x.shape[1] % groups:
        raise c.error(f"num_groups={groups} does not divide the {x.shape[1]} channels of the input {x.shape}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or not eps > 0:
        raise c.error(f"eps={eps!r} is not supported (a positive number)")
    if (weight is None) != (bias is None):
        raise c.error("a group norm with a weight and no bias (or a bias and no weight) is not supported")
    for what, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (x.shape[1],):
            raise ShapeError(f"{c.where}: the {what} of shape {tuple(t.shape)} does not fit the {x.shape[1]} channels "
                             f"of the input {x.shape}")
    y = c.graph.group_norm(x, groups, eps=float(eps), affine=weight is not None, name=c.name)
    c.set_weights(weight=weight, bias=bias)
    return y


def _group_norm(c: Call) -> Tensor:
    m = c.module
    if m.affine and (m.weight is None or m.bias is None):
        raise c.error("a group norm with affine=True but no weight or bias is not supported")
    if c.tensor(0).shape[1:2] != (m.num_channels,):
        raise ShapeError(f"{c.where}: num_channels={m.num_channels} but the input has shape {c.tensor(0).shape}")
    return _group_norm_with(c, m.num_groups, m.eps, m.weight if m.affine else None, m.bias if m.affine else None)


def _group_norm_fn(c: Call) -> Tensor:
    """F.group_norm(x, num_groups, weight, bias, eps): weight and bias parameters of the model (or
    neither: no affine)."""
    a = c.attrs
    weight = None if a["weight"] is None else c.parameter(a["weight"], "weight", rank=1)
    bias = None if a["bias"] is None else c.parameter(a["bias"], "bias", rank=1)
    return _group_norm_with(c, a["num_groups"], a["eps"], weight, bias)


def _relu(c: Call) -> Tensor:
    return c.graph.relu(c.tensor(0), name=c.name)


def _activation(kind: str) -> Callable[[Call], Tensor]:
    """A point-wise activation without arguments of its own (sigmoid, tanh, SiLU): the builder
    ``g.<kind>``; ``inplace`` needs nothing here (the importer routes in-place writes)."""
    def convert(c: Call) -> Tensor:
        return getattr(c.graph, kind)(c.tensor(0), name=c.name)
    return convert


def _gelu(c: Call) -> Tensor:
    """GELU in its exact (erf) form or its tanh approximation, as ``approximate`` says."""
    approximate = c.attrs["approximate"]
    if approximate not in ("none", "tanh"):
        raise c.error(f"approximate={approximate!r} is not a GELU form; PyTorch's are 'none' and 'tanh'")
    return c.graph.gelu(c.tensor(0), approximate=approximate, name=c.name)


def _leaky_relu(c: Call) -> Tensor:
    slope = c.attrs["negative_slope"]
    if isinstance(slope, bool) or not isinstance(slope, (int, float)):
        raise c.error(f"negative_slope={slope!r} is not supported (a number)")
    return c.graph.leaky_relu(c.tensor(0), negative_slope=float(slope), name=c.name)


def _add(c: Call) -> Tensor:
    """a + b of two tensors, either a trainable parameter of the model (``x + self.pos``): equal
    shapes, ``(N, T, D) + (T, D)`` (a position table broadcast over the samples), or any shapes
    that broadcast as PyTorch's do (a ``broadcast_add`` op)."""
    from shardwise.importers.torch.operands import operand

    if c.attrs["alpha"] != 1:
        raise c.error(f"alpha={c.attrs['alpha']!r} is not supported")
    for v in c.inputs[:2]:
        if not isinstance(v, (Tensor, Lazy, Attr)):
            raise c.error(f"adding {_show(v)} is not supported (add takes two tensors, computed by the model or its "
                          f"trainable parameters; constants are not supported)")
    a, b = (operand(c, v, f"operand {k}") for k, v in enumerate(c.inputs[:2]))
    if a.shape != b.shape and len(b.shape) > len(a.shape) and b.shape[len(b.shape) - len(a.shape):] == a.shape:
        a, b = b, a   # the table second: add's broadcast over the leading dimensions
    return c.graph.add(a, b, name=c.name)


def _concat(c: Call) -> Tensor:
    xs = c.inputs[0]
    if not isinstance(xs, (list, tuple)) or not xs:
        raise c.error(f"expects a list of tensors, got {xs!r}")
    ts = [c.as_tensor(t, f"tensor {k} of the list") for k, t in enumerate(xs)]
    axis = _dim_attr(c, "dim", len(ts[0].shape))
    if axis == 0:
        raise c.error("concatenating along the batch dimension (dim=0) is not supported")
    return c.graph.concat(ts, axis=axis, name=c.name)


def _flatten_to_2d(c: Call, x: Tensor, shape: tuple[int, ...], what: str) -> Tensor:
    """``x`` reshaped to ``shape``: itself, a flatten to (N, features), or (the batch
    dimension kept) a reshape op that splits or merges the other dimensions ((N, T, D) <->
    (N, T, H, Dh): attention's heads)."""
    if tuple(shape) == x.shape:
        return x
    if len(shape) == 2 and len(x.shape) > 2 and shape[0] == x.shape[0]:
        return c.graph.flatten(x, name=c.name)
    if len(shape) >= 2 and shape[0] == x.shape[0]:
        try:
            return c.graph.reshape(x, tuple(shape), name=c.name)
        except ShapeError as exc:
            raise c.error(f"{what} from {x.shape} to {tuple(shape)} is not supported ({exc})") from None
    raise c.error(f"{what} from {x.shape} to {tuple(shape)} is not supported; only reshapes that keep the batch "
                  f"dimension (flattening to (N, features), splitting or merging the others)")


def _flatten(c: Call) -> Tensor:
    x = c.tensor(0)
    rank = len(x.shape)
    start, end = _dim_attr(c, "start_dim", rank), _dim_attr(c, "end_dim", rank)
    if start == end:
        return x
    if start != 1 or end != rank - 1:
        raise c.error(f"flatten(start_dim={c.attrs['start_dim']}, end_dim={c.attrs['end_dim']}) of shape {x.shape} "
                      f"is not supported; only start_dim=1, end_dim=-1 (everything after the batch dimension)")
    return c.graph.flatten(x, name=c.name)


def _reshape(c: Call) -> Tensor:
    x = c.tensor(0)
    shape = c.attrs["shape"]
    if not isinstance(shape, (tuple, list)) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                        for s in shape):
        raise c.error(f"a shape of ints is needed, got {shape!r}")
    total = math.prod(x.shape)
    known = math.prod(s for s in shape if s != -1)
    if list(shape).count(-1) > 1 or known <= 0 or (-1 not in shape and known != total) or total % known:
        raise c.error(f"cannot view shape {x.shape} as {tuple(shape)}")
    shape = tuple(total // known if s == -1 else s for s in shape)
    return _flatten_to_2d(c, x, shape, "reshaping")


def _squeeze(c: Call) -> Tensor:
    x = c.tensor(0)
    dims = c.attrs["dim"]
    if dims is None:
        dims = tuple(d for d, s in enumerate(x.shape) if s == 1)
    elif isinstance(dims, int):
        dims = (dims,)
    drop = {_dim(c, d, len(x.shape)) for d in dims}
    if 0 in drop and x.shape[0] == 1:
        raise c.error("squeezing the batch dimension is not supported")
    return _flatten_to_2d(c, x, tuple(s for d, s in enumerate(x.shape) if d not in drop or s != 1), "squeeze")


def _pool(c: Call, kind: str, kernel_size: Any, stride: Any, padding: Any) -> Tensor:
    x = c.tensor(0, rank=4)
    kernel = _pair(c, kernel_size, "kernel_size")
    stride = kernel if stride is None or stride == [] or stride == () else _pair(c, stride, "stride")
    padding = _pair(c, padding, "padding")
    ceil = bool(c.attrs.get("ceil_mode"))
    if ceil and kind != "max":
        check_ceil_mode(c, x.shape, kernel, stride, padding)
    return c.graph.pool2d(x, kernel=kernel, stride=stride, padding=padding, kind=kind, name=c.name,
                          ceil_mode=ceil and kind == "max")


def _max_pool2d(c: Call) -> Tensor:
    a = c.attrs
    if a["return_indices"]:
        raise c.error("return_indices=True is not supported")
    if _pair(c, a["dilation"], "dilation") != (1, 1):
        raise c.error(f"dilation={a['dilation']!r} is not supported")
    return _pool(c, "max", a["kernel_size"], a["stride"], a["padding"])


def _avg_pool2d(c: Call) -> Tensor:
    a = c.attrs
    if a["divisor_override"] is not None:
        raise c.error(f"divisor_override={a['divisor_override']!r} is not supported")
    if not a["count_include_pad"] and _pair(c, a["padding"], "padding") != (0, 0):
        raise c.error("count_include_pad=False with padding is not supported (padded zeros count in the divisor)")
    return _pool(c, "avg", a["kernel_size"], a["stride"], a["padding"])


def _adaptive_pool(kind: str) -> Callable[[Call], Tensor]:
    """Adaptive pooling: the ops :func:`shardwise.importers.adaptive.adaptive_pool` builds."""
    def convert(c: Call) -> Tensor:
        if c.attrs.get("return_indices"):
            raise c.error("return_indices=True is not supported")
        x = c.tensor(0, rank=4)
        size = c.attrs["output_size"]
        size = (size, size) if isinstance(size, int) else tuple(size)
        if len(size) != 2:
            raise c.error(f"output_size={c.attrs['output_size']!r} is not supported")
        out = tuple(x.shape[2 + d] if s is None else s for d, s in enumerate(size))
        y = adaptive_pool(c.graph, x, out, kind, c.name) if all(isinstance(s, int) and s > 0 for s in out) else None
        if y is None:
            raise c.error(f"adaptive pooling of a {x.shape[2]}x{x.shape[3]} input to {out} is not supported; "
                          f"the output size must divide the input size (then it is a {kind} pool)")
        return y
    return convert


def _mean(c: Call) -> Tensor:
    """x.mean((2, 3)): global average pooling (then a flatten unless keepdim)."""
    x = c.tensor(0)
    dims = c.attrs["dim"]
    dims = (dims,) if isinstance(dims, int) else dims
    if (len(x.shape) != 4 or not isinstance(dims, (tuple, list)) or c.attrs["dtype"] is not None
            or sorted(_dim(c, d, 4) for d in dims) != [2, 3]):
        raise c.error(f"mean(dim={c.attrs['dim']!r}) of shape {x.shape} is not supported; only the mean over "
                      f"(H, W) of an (N, C, H, W) tensor (global average pooling)")
    kernel = x.shape[2:]
    if c.attrs["keepdim"]:
        return c.graph.pool2d(x, kernel=kernel, stride=kernel, kind="avg", name=c.name)
    y = c.graph.pool2d(x, kernel=kernel, stride=kernel, kind="avg", name=c.name)
    return c.graph.flatten(y, name=f"{c.name}.flatten")


def _matmul(c: Call) -> Tensor:
    """a @ b: of two rank-2 operands, each a tensor or a parameter of the model (``x @ self.w``);
    or a batched product of two computed tensors of one rank (attention's ``q @ k.transpose(-2,
    -1)``: an operand that is a transpose of its last two dimensions is read transposed, so the
    transpose builds no op)."""
    ab = []
    for k in range(2):
        v = c.inputs[k]
        if isinstance(v, Attr):
            c.parameter(v, f"operand {k}", rank=2)   # a trainable rank-2 parameter, or a message saying where
            if c.parameter_op is None:
                raise c.error(f"cannot read {v.target!r}")
            v = c.parameter_op(v, c.where)
        ab.append(c.as_tensor(v, f"operand {k}"))
    a, b = ab
    if len(a.shape) == 2 and len(b.shape) == 2:
        return c.graph.matmul(a, b, name=c.name)
    if len(a.shape) != len(b.shape) or len(a.shape) < 3:
        raise c.error(f"a matrix product of shapes {a.shape} and {b.shape} is not supported (two rank-2 operands, "
                      f"or two of one rank with equal batch dimensions)")
    (a, ta), (b, tb) = _untransposed(c.graph, a), _untransposed(c.graph, b)
    return c.graph.matmul(a, b, transpose_a=ta, transpose_b=tb, name=c.name)


def _untransposed(g: Graph, t: Tensor) -> tuple[Tensor, bool]:
    """(x, True) when ``t`` is a permute op swapping x's last two dimensions, else (t, False)."""
    op = g.ops[t.op]
    r = len(t.shape)
    if op.kind == "permute" and tuple(op.attrs["dims"]) == tuple(range(r - 2)) + (r - 1, r - 2):
        src = g.ops[op.inputs[0]]
        return Tensor(g, src.index, src.shape), True
    return t, False


def _softmax(c: Call) -> Tensor:
    """softmax over the classes as the model's last op: the loss op; anywhere else a
    ``softmax_dim`` op over ``dim`` (attention scores with their scale and causal mask:
    :mod:`shardwise.importers.torch.seq`)."""
    from shardwise.importers.torch.seq import Scores

    x = c.inputs[0]
    if c.attrs["dtype"] is not None:
        raise c.error(f"softmax(dtype={c.attrs['dtype']!r}) is not supported")
    dim = c.attrs["dim"]
    if isinstance(x, Scores):
        return x.softmax(c, dim)
    x = c.tensor(0)
    if c.is_output and len(x.shape) in (2, 3) and dim in (None, -1, len(x.shape) - 1):
        return c.graph.softmax(x, name=c.name, output="probabilities")
    if dim is None:
        raise c.error("softmax without dim is not supported; give the dimension")
    return c.graph.softmax_dim(x, _dim(c, dim, len(x.shape)), name=c.name)


def _log_softmax(c: Call) -> Tensor:
    """log_softmax over the classes as the model's last op: the loss op (with ``F.nll_loss``,
    PyTorch's loss is the same); shardwise has no log-softmax inside a network."""
    x = c.tensor(0)
    if not c.is_output:
        raise c.error("log_softmax is supported only as the model's output, where it becomes shardwise's "
                      "softmax cross-entropy loss")
    if c.attrs["dim"] not in (None, -1, len(x.shape) - 1) or c.attrs["dtype"] is not None or len(x.shape) not in (2, 3):
        raise c.error(f"log_softmax(dim={c.attrs['dim']!r}, dtype={c.attrs['dtype']!r}) of shape {x.shape} is not "
                      f"supported; only over the classes (the last dimension of (N, C) or (N, T, C) logits)")
    return c.graph.softmax(x, name=c.name, output="log_probabilities")


def _identity(c: Call) -> Any:
    return c.tensor(0)


def _dropout(c: Call) -> Any:
    """nn.Dropout / F.dropout: shardwise's dropout op (the identity in eval mode), or nothing
    when it never drops (p=0, or F.dropout's training=False).  Its masks are a function of the
    seed, the step and the element's index, not PyTorch's random stream: training equals
    PyTorch's in expectation, eval mode exactly."""
    p = c.attrs["p"]
    if c.module is None and c.attrs["training"] is False:
        return c.tensor(0)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise c.error(f"dropout with p={p!r} is not supported (a number in [0, 1))")
    if p == 0:
        return c.tensor(0)
    return c.graph.dropout(c.tensor(0), float(p), name=c.name)


def _size(c: Call) -> Any:
    shape = c.tensor(0, ids_ok=True).shape
    d = c.attrs["dim"]
    return tuple(shape) if d is None else shape[_dim(c, d, len(shape))]


def _ndim(c: Call) -> int:
    return len(c.tensor(0, ids_ok=True).shape)


def _getattr(c: Call) -> Any:
    name = c.attrs["attr"]
    x = c.tensor(0, ids_ok=True)
    if name == "shape":
        return tuple(x.shape)
    if name == "ndim":
        return len(x.shape)
    if name == "device":   # torch.arange(T, device=x.device): the constants are evaluated on the CPU
        import torch
        return torch.device("cpu")
    raise c.error(f"reading the tensor attribute {name!r} is not supported")


_FLOAT32_MAX = 3.4028234663852886e38   # a clamp without one of its bounds: clip's bound at the largest float32


def _clip_with(c: Call, lo: Any, hi: Any, names: tuple[str, str] = ("min", "max")) -> Tensor:
    """min(max(x, lo), hi) with constant bounds (None: no bound) as a ``clip`` op."""
    bounds = []
    for what, v, none in ((names[0], lo, -_FLOAT32_MAX), (names[1], hi, _FLOAT32_MAX)):
        if v is None:
            bounds.append(none)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise c.error(f"{what}={_show(v)} is not supported (a finite constant number, or None)")
        bounds.append(min(max(float(v), -_FLOAT32_MAX), _FLOAT32_MAX))
    if lo is None and hi is None:
        raise c.error("a clamp without min and max is not supported")
    if bounds[0] > bounds[1]:
        raise c.error(f"{names[0]}={lo} > {names[1]}={hi} is not supported")
    return c.graph.clip(c.tensor(0), bounds[0], bounds[1], name=c.name)


def _clamp(c: Call) -> Tensor:
    return _clip_with(c, c.attrs["min"], c.attrs["max"])


def _hardtanh(c: Call) -> Tensor:
    return _clip_with(c, c.attrs["min_val"], c.attrs["max_val"], ("min_val", "max_val"))


def _relu6(c: Call) -> Tensor:
    return c.graph.relu6(c.tensor(0), name=c.name)


def _layer_norm_fn(c: Call) -> Tensor:
    """F.layer_norm(x, normalized_shape, self.weight, self.bias, eps): ConvNeXt's LayerNorm2d (a
    permute to channels-last, this, and a permute back)."""
    x = c.tensor(0)
    a = c.attrs
    if a["weight"] is None or a["bias"] is None:
        raise c.error("F.layer_norm without weight or bias is not supported")
    k = _normalized_dims(c, x, a["normalized_shape"])
    weight, bias = c.parameter(a["weight"], "weight", rank=k), c.parameter(a["bias"], "bias", rank=k)
    return _norm(c, x, a["normalized_shape"], weight, bias, a["eps"], rms=False)


def _rms_eps(eps: Any) -> float:
    return 1.1920928955078125e-07 if eps is None else float(eps)   # None: torch.finfo(torch.float32).eps


def _rms_norm(c: Call) -> Tensor:
    m = c.module
    if not m.elementwise_affine or m.weight is None:
        raise c.error("an RMS norm without weight is not supported (elementwise_affine=True)")
    return _norm(c, c.tensor(0), m.normalized_shape, m.weight, None, _rms_eps(m.eps), rms=True)


def _rms_norm_fn(c: Call) -> Tensor:
    x = c.tensor(0)
    a = c.attrs
    if a["weight"] is None:
        raise c.error("F.rms_norm without weight is not supported")
    k = _normalized_dims(c, x, a["normalized_shape"])
    weight = c.parameter(a["weight"], "weight", rank=k)
    return _norm(c, x, a["normalized_shape"], weight, None, _rms_eps(a["eps"]), rms=True)


_F = "torch.nn.functional."

# Each entry's op= and doc= are its row of the table in docs/importing.md (tools/ops_docs.py,
# `make docs-ops`); entries next to each other with the same op= and doc= share a row.
_CONV_DOC = ("any `groups` (grouped and depthwise) and `dilation`; `padding_mode=\"zeros\"`; padding an int, a pair, "
             "`\"valid\"` or `\"same\"` (where `dilation * (kernel - 1)` is even); the function's weight and bias must "
             "be parameters of the model")
_LINEAR_DOC = ("a `(N, features)` or `(N, T, features)` input; the function's weight and bias must be parameters of "
               "the model")
_CONSTANTS_DOC = "shapes are fixed by the example inputs"
_GROUP_NORM_DOC = ("of an `(N, C, H, W)` input, `num_groups` dividing C, any `eps`; `affine` (the function: weight and "
                   "bias parameters of the model) or not (neither)")

TORCH_OPS: tuple[TorchOp, ...] = (
    TorchOp("conv", _conv2d, modules=("Conv2d",), fuses_relu=True, op="`conv2d`", doc=_CONV_DOC),
    TorchOp("conv", _conv2d_fn, inputs=2, params=(("bias", None), ("stride", 1), ("padding", 0), ("dilation", 1),
                                                  ("groups", 1)),
            functions=(_F + "conv2d", "torch.conv2d"), fuses_relu=True, weight_arg=1, op="`conv2d`", doc=_CONV_DOC),
    TorchOp("linear", _linear, modules=("Linear",), fuses_relu=True, op="`linear`", doc=_LINEAR_DOC),
    TorchOp("linear", _linear_fn, inputs=2, params=(("bias", None),), functions=(_F + "linear",), fuses_relu=True,
            weight_arg=1, op="`linear`", doc=_LINEAR_DOC),
    TorchOp("bn", _batchnorm2d, modules=("BatchNorm2d",), op="`batchnorm2d`",
            doc="`affine=True`, any `eps`, a numeric `momentum`; running statistics imported"),
    TorchOp("relu", _relu, params=(("inplace", False),), modules=("ReLU",),
            functions=("torch.relu", "torch.relu_", _F + "relu", _F + "relu_"), methods=("relu", "relu_"),
            op="`relu`", doc="fused into a convolution or linear layer it alone reads"),
    TorchOp("sigmoid", _activation("sigmoid"), modules=("Sigmoid",),
            functions=("torch.sigmoid", "torch.sigmoid_", _F + "sigmoid", "torch.special.expit"),
            methods=("sigmoid", "sigmoid_"), op="`sigmoid`", doc="element-wise, any shape"),
    TorchOp("tanh", _activation("tanh"), modules=("Tanh",), functions=("torch.tanh", "torch.tanh_", _F + "tanh"),
            methods=("tanh", "tanh_"), op="`tanh`", doc="element-wise, any shape"),
    TorchOp("gelu", _gelu, params=(("approximate", "none"),), modules=("GELU",), functions=(_F + "gelu",),
            op="`gelu`", doc="`approximate=\"none\"` (the exact erf form) and `approximate=\"tanh\"`"),
    TorchOp("silu", _activation("silu"), params=(("inplace", False),), modules=("SiLU",), functions=(_F + "silu",),
            op="`silu`", doc="element-wise, any shape"),
    TorchOp("leaky_relu", _leaky_relu, params=(("negative_slope", 0.01), ("inplace", False)),
            modules=("LeakyReLU",), functions=(_F + "leaky_relu", _F + "leaky_relu_"),
            op="`leaky_relu`", doc="any finite `negative_slope`"),
    TorchOp("add", _add, inputs=2, params=(("alpha", 1),), functions=("operator.add", "operator.iadd", "torch.add"),
            methods=("add", "add_"), op="`add`, `broadcast_add`",
            doc="two tensors of one shape, or `(N, T, D) + (T, D)` (a position table, broadcast over the "
                "samples); other shapes that broadcast: `broadcast_add`; either operand may be a trainable parameter of "
                "the model (`x + self.pos`: a `parameter` op); no constants, `alpha=1`"),
    TorchOp("cat", _concat, params=(("dim", 0),), functions=("torch.cat", "torch.concat", "torch.concatenate"),
            op="`concat`", doc="any dimension but the batch"),
    TorchOp("flatten", _flatten, params=(("start_dim", 0), ("end_dim", -1)), modules=("Flatten",),
            functions=("torch.flatten",), methods=("flatten",),
            op="`flatten`", doc="everything after the batch dimension (`start_dim=1`, `end_dim=-1`)"),
    TorchOp("reshape", _reshape, params=(("shape", REQUIRED),), functions=("torch.reshape",),
            methods=("view", "reshape"), variadic=True, op="`flatten`, `reshape`",
            doc="the batch dimension kept: to `(N, features)` a `flatten`; otherwise a `reshape` that splits or merges "
                "the other dimensions (`(N, T, D)` <-> `(N, T, H, Dh)`); a reshape to the same shape is no op"),
    TorchOp("squeeze", _squeeze, params=(("dim", None),), functions=("torch.squeeze",), methods=("squeeze",),
            op="`flatten`", doc="to `(N, features)`, never the batch dimension"),
    TorchOp("maxpool", _max_pool2d, params=(("kernel_size", REQUIRED), ("stride", None), ("padding", 0),
                                            ("dilation", 1), ("ceil_mode", False), ("return_indices", False)),
            modules=("MaxPool2d",), functions=(_F + "max_pool2d", "torch.max_pool2d"),
            op="`pool2d` (max)", doc="`dilation=1`, no `return_indices`; any `ceil_mode` (a partial last window)"),
    TorchOp("avgpool", _avg_pool2d, params=(("kernel_size", REQUIRED), ("stride", None), ("padding", 0),
                                            ("ceil_mode", False), ("count_include_pad", True),
                                            ("divisor_override", None)),
            modules=("AvgPool2d",), functions=(_F + "avg_pool2d", "torch.avg_pool2d"),
            op="`pool2d` (avg)",
            doc="`count_include_pad=True` when padded, no `divisor_override`; `ceil_mode=True` where it adds no window"),
    TorchOp("avgpool", _adaptive_pool("avg"), params=(("output_size", REQUIRED),), modules=("AdaptiveAvgPool2d",),
            functions=(_F + "adaptive_avg_pool2d", "torch.adaptive_avg_pool2d"),
            op="`pool2d` (avg), `expand`, `adaptive_avg_pool2d`",
            doc="any sizes: a `pool2d` where the output size divides the input size (`(1, 1)`: global pooling), an "
                "`expand` of a `1x1` input, else `adaptive_avg_pool2d` (PyTorch's windows, upsampling too)"),
    TorchOp("maxpool", _adaptive_pool("max"), params=(("output_size", REQUIRED), ("return_indices", False)),
            modules=("AdaptiveMaxPool2d",), functions=(_F + "adaptive_max_pool2d",),
            op="`pool2d` (max), `expand`",
            doc="the output size divides the input size (`(1, 1)`: global pooling), or the input is `1x1` (an "
                "`expand` to the output size)"),
    TorchOp("mean", _mean, params=(("dim", None), ("keepdim", False), ("dtype", None)), functions=("torch.mean",),
            methods=("mean",), op="`pool2d` (avg) + `flatten`",
            doc="over `(2, 3)` of an `(N, C, H, W)` tensor (global average pooling)"),
    TorchOp("matmul", _matmul, inputs=2, functions=("operator.matmul", "torch.matmul", "torch.mm"),
            methods=("matmul", "mm"), op="`matmul`",
            doc="rank-2 operands (a parameter of the model becomes a `parameter` op), or two computed tensors of one "
                "rank with equal batch dimensions; an operand that is `y.transpose(-2, -1)` is read transposed "
                "(`transpose_b`)"),
    TorchOp("softmax", _softmax, params=(("dim", None), ("_stacklevel", 3), ("dtype", None)),
            modules=("Softmax",), functions=("torch.softmax", _F + "softmax"), methods=("softmax",),
            op="`softmax` (the loss), `softmax_dim`",
            doc="as the model's output over the classes: the loss; anywhere else a `softmax_dim` over `dim` (of "
                "attention scores: with their scale and causal mask, below)"),
    TorchOp("softmax", _log_softmax, params=(("dim", None), ("_stacklevel", 3), ("dtype", None)),
            modules=("LogSoftmax",), functions=("torch.log_softmax", _F + "log_softmax"), methods=("log_softmax",),
            op="`softmax` (the loss)", doc="only as the model's output, over the classes"),
    TorchOp("dropout", _dropout, params=(("p", 0.5), ("training", True), ("inplace", False)),
            modules=("Dropout",), functions=(_F + "dropout",), op="`dropout`",
            doc="`0 <= p < 1`; none for `p=0` or `F.dropout(..., training=False)`; masks are shardwise's, not "
                "PyTorch's random stream (below)"),
    TorchOp("identity", _identity, params=(("memory_format", None),), modules=("Identity",), methods=("contiguous",),
            op="none (identity)",
            doc="builds no op: the result is the input under another name (an in-place op on either writes both)"),
    # shape queries: constants, since every shape is fixed by the example inputs
    TorchOp("size", _size, params=(("dim", None),), methods=("size",), op="none (constants)", doc=_CONSTANTS_DOC),
    TorchOp("ndim", _ndim, methods=("dim", "ndimension"), op="none (constants)", doc=_CONSTANTS_DOC),
    TorchOp("getattr", _getattr, params=(("attr", REQUIRED),), functions=("builtins.getattr",),
            op="none (constants)", doc=_CONSTANTS_DOC),
    TorchOp("relu6", _relu6, params=(("inplace", False),), modules=("ReLU6",), functions=(_F + "relu6",),
            op="`clip`", doc="`clip(x, 0, 6)`; no gradient at the bounds themselves (as PyTorch's)"),
    TorchOp("hardtanh", _hardtanh, params=(("min_val", -1.0), ("max_val", 1.0), ("inplace", False)),
            modules=("Hardtanh",), functions=(_F + "hardtanh", _F + "hardtanh_"),
            op="`clip`", doc="constant `min_val <= max_val`; no gradient at the bounds themselves"),
    TorchOp("clamp", _clamp, params=(("min", None), ("max", None)),
            functions=("torch.clamp", "torch.clip", "torch.clamp_", "torch.clip_"),
            methods=("clamp", "clip", "clamp_", "clip_"), op="`clip`",
            doc="constant numbers `min`, `max` (either may be None); no gradient at the bounds themselves (PyTorch's "
                "`clamp` passes it there)"),
    TorchOp("hardsigmoid", _activation("hardsigmoid"), params=(("inplace", False),), modules=("Hardsigmoid",),
            functions=(_F + "hardsigmoid",), op="`hardsigmoid`", doc="element-wise, any shape"),
    TorchOp("hardswish", _activation("hardswish"), params=(("inplace", False),), modules=("Hardswish",),
            functions=(_F + "hardswish",), op="`hardswish`", doc="element-wise, any shape"),
    TorchOp("layer_norm", _layer_norm_fn, params=(("normalized_shape", REQUIRED), ("weight", None), ("bias", None),
                                                  ("eps", 1e-5)),
            functions=(_F + "layer_norm",), op="`layer_norm` (+ `reshape`)",
            doc="over the last dimensions (`normalized_shape`; several: a `reshape` merging them, the norm, a "
                "`reshape` back), weight and bias parameters of the model; any `eps`"),
    TorchOp("group_norm", _group_norm, modules=("GroupNorm",), op="`group_norm`", doc=_GROUP_NORM_DOC),
    TorchOp("group_norm", _group_norm_fn, params=(("num_groups", REQUIRED), ("weight", None), ("bias", None),
                                                  ("eps", 1e-5)),
            functions=(_F + "group_norm",), op="`group_norm`", doc=_GROUP_NORM_DOC),
    TorchOp("rms_norm", _rms_norm, modules=("RMSNorm",), op="`rms_norm` (+ `reshape`)",
            doc="over the last dimensions as for `layer_norm`, with a weight; any `eps` (None: float32's epsilon)"),
    TorchOp("rms_norm", _rms_norm_fn, params=(("normalized_shape", REQUIRED), ("weight", None), ("eps", None)),
            functions=(_F + "rms_norm",), op="`rms_norm` (+ `reshape`)",
            doc="over the last dimensions as for `layer_norm`, with a weight; any `eps` (None: float32's epsilon)"),
)
"""Every PyTorch operation :func:`shardwise.from_torch` imports (the sequence-model ones, from
:mod:`shardwise.importers.torch.seq`, appended below)."""

DOC_FORMS: dict[str, str] = {
    "operator.add": "`a + b`", "operator.iadd": "`a += b`", "operator.matmul": "`a @ b`",
    "operator.mul": "`s * c`", "operator.truediv": "`s / c`", "operator.getitem": "`x[:, t]`",
    "builtins.getattr": "`x.shape`, `x.ndim`, `x.device`",
}
"""How the table in docs/importing.md shows a function a user writes as Python syntax:
``operator.add (`a + b`)`` (tools/ops_docs.py)."""


# it builds on the helpers above; its norm helpers serve the functional forms above
from shardwise.importers.torch.seq import TORCH_SEQ_OPS, _norm, _normalized_dims  # noqa: E402

TORCH_OPS = TORCH_OPS + TORCH_SEQ_OPS

from shardwise.importers.torch.bcast import TORCH_BCAST_OPS  # noqa: E402  (appended: broadcasting, slicing)

TORCH_OPS = TORCH_OPS + TORCH_BCAST_OPS

from shardwise.importers.torch.attention import TORCH_ATTENTION_OPS  # noqa: E402  (nn.MultiheadAttention)

TORCH_OPS = TORCH_OPS + TORCH_ATTENTION_OPS

from shardwise.importers.torch.windows import TORCH_WINDOW_OPS  # noqa: E402  (appended: Swin's window attention)

TORCH_OPS = TORCH_OPS + TORCH_WINDOW_OPS

from shardwise.importers.torch.maxvit import TORCH_MAXVIT_OPS  # noqa: E402  (appended: MaxViT's partitions)

TORCH_OPS = TORCH_OPS + TORCH_MAXVIT_OPS

VIEW_OPS = ("flatten", "reshape", "squeeze")
"""Operations whose result is a view of their input in PyTorch (an in-place op on the result
writes the input too); shardwise builds a flatten, a copy."""
