"""The computation graph a user builds: ops, the tensors between them, their shapes.

    g = Graph("tiny")
    x = g.input("image", (64, 3, 32, 32))
    x = g.conv2d(x, 16, kernel=3, padding=1, activation="relu", name="conv1")

Each builder call validates its inputs, derives the op's description
(:mod:`shardwise.ops.builtin`) and returns a :class:`Tensor` handle carrying the output
shape.  Every op produces exactly one tensor, so op names double as tensor names.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
from dataclasses import dataclass
from math import prod
from typing import Any, Iterator, Sequence

import numpy as np

from shardwise.ops import builtin as ops
from shardwise.errors import GraphError, ShapeError
from shardwise.graph_bcast import BroadcastBuilders, broadcasts
from shardwise.graph_seq import INPUT_DTYPES, SequenceBuilders
from shardwise.shapes import check_shape
from shardwise.ops.desc import DATA, MAX_INDEX_COEF, MAX_INDEX_OFFSET, MAX_INDEX_PERIOD, WEIGHT, OpDesc


@dataclass(frozen=True, eq=False)
class Tensor:
    """A handle on the output of one op of one graph."""

    graph: "Graph"
    op: int
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.graph.ops[self.op].name

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, shape={self.shape})"


@dataclass
class Op:
    """One node of the computation graph."""

    index: int
    name: str
    kind: str
    inputs: tuple[int, ...]            # producer op indices of the DATA inputs, in order
    attrs: dict[str, Any]
    desc: OpDesc

    @property
    def shape(self) -> tuple[int, ...]:
        return self.desc.out_shape

    @property
    def has_weights(self) -> bool:
        return any(i.role == WEIGHT for i in self.desc.inputs)


_ACTIVATIONS = (None, "relu")
SOFTMAX_OUTPUTS = ("logits", "probabilities", "log_probabilities")   # what a model returned (Graph.softmax)
BN_MOMENTUM = 0.1      # batchnorm2d's default momentum of the running statistics, torch.nn.BatchNorm2d's
BN_EPS = ops.BN_EPS    # batchnorm2d's default epsilon, torch.nn.BatchNorm2d's
GROUP_NORM_EPS = 1e-5  # group_norm's default epsilon, torch.nn.GroupNorm's
_FLOAT32_MAX = 3.4028234663852886e38   # the largest float32: a leaky_relu slope reaches C as one
MAX_ITERATIONS = 2**56  # points of one op's iteration space (outputs x reductions): FLOPs stay in int64


def _name_seed(name: str) -> int:
    """A 64-bit seed from an op's name (SHA-256: stable across processes, unlike hash())."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "little")


def _check_derived(desc: OpDesc, what: str) -> None:
    """The bounds of input shapes (:func:`shardwise.shapes.check_shape`), applied to every size a builder
    derives: the output shape, the weights' shapes, the iteration space, and the index
    arithmetic (strides, paddings, offsets) within what the C core decodes.  Without this a
    huge out_channels or padding built fine and failed at search time with OverflowError."""
    check_shape(desc.out_shape, f"{what}: output shape")
    for inp in desc.inputs:
        if inp.role != DATA:  # data inputs are earlier ops' outputs, already checked
            check_shape(inp.shape, f"{what}: {'weight' if inp.role == WEIGHT else 'statistics'} shape")
    points = prod(desc.extents)
    if points > MAX_ITERATIONS:
        raise ShapeError(f"{what}: {points:,} iteration points (outputs x reduction sizes "
                         f"{desc.extents}), more than the {MAX_ITERATIONS:,} supported")
    for inp in desc.inputs:
        for e in inp.exprs:
            if max(abs(c) for c in e.coefs) > MAX_INDEX_COEF:
                raise ShapeError(f"{what}: a stride of {max(abs(c) for c in e.coefs):,} is more than the "
                                 f"{MAX_INDEX_COEF:,} supported")
            if abs(e.offset) > MAX_INDEX_OFFSET:
                raise ShapeError(f"{what}: an index offset (a padding or a concat position) of {abs(e.offset):,} "
                                 f"is more than the {MAX_INDEX_OFFSET:,} supported")
            if e.div > MAX_INDEX_PERIOD or e.mod > MAX_INDEX_PERIOD:
                raise ShapeError(f"{what}: a dimension of {max(e.div, e.mod):,} elements inside a flattened "
                                 f"tensor is more than the {MAX_INDEX_PERIOD:,} supported")


def _check_positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"{what} must be a positive int, got {value!r}")
    return value


class Graph(SequenceBuilders, BroadcastBuilders):
    """A computation graph: a DAG of ops built in topological order (the builders of
    sequence models, layer_norm to attention, are in :mod:`shardwise.graph_seq`)."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.ops: list[Op] = []
        self._by_name: dict[str, int] = {}
        self._counters: dict[str, int] = {}
        self._step: list = []   # [cell name, position] while inside timestep()
        # An imported model's own names for parameters whose key here ("<op>.weight", "<op>.bias")
        # differs from it: nn.MultiheadAttention's packed "<m>.in_proj_weight" is the weight of the
        # linear op "<m>.in_proj".  Key -> the model's name; Trainer.get_weights and set_weights
        # speak the model's names (model_weights, graph_weights).
        self.weight_names: dict[str, str] = {}
        # Other names of one parameter (tied weights: a Hugging Face model's "lm_head.weight" is
        # its "transformer.wte.weight"): alias -> the name get_weights gives it.  set_weights
        # takes either name, or both holding equal arrays.
        self.weight_aliases: dict[str, str] = {}
        # Parallel layouts the model's builder knows, by name: layout(tp, dp) is a spec for
        # Plan.from_dict (tensor parallelism over groups of tp devices, data parallelism over dp
        # groups), as sw.models.llama registers Megatron-LM's.  The search tries them beside its
        # baselines when recomputation is asked for (strategies.layout_baselines).
        self.layouts: dict[str, Any] = {}

    # ----- internals -------------------------------------------------------
    def _tensor(self, t: Any, what: str = "input") -> Tensor:
        if not isinstance(t, Tensor):
            raise GraphError(f"{what} must be a Tensor returned by a builder call, got {type(t).__name__}")
        if t.graph is not self:
            raise GraphError(f"{what} {t.name!r} belongs to graph {t.graph.name!r}, not {self.name!r}")
        return t

    def _name(self, name: str | None, kind: str) -> str:
        if name is None:
            while True:
                k = self._counters.get(kind, 0)
                self._counters[kind] = k + 1
                candidate = f"{kind}_{k}"
                if candidate not in self._by_name:
                    return candidate
        if not isinstance(name, str) or not name:
            raise GraphError(f"op name must be a non-empty string, got {name!r}")
        if name in self._by_name:
            raise GraphError(f"an op named {name!r} already exists in graph {self.name!r}")
        return name

    def _add(self, op_kind: str, inputs: Sequence[Tensor], desc: OpDesc, name: str | None,
             **attrs: Any) -> Tensor:
        desc.validate()
        # before _name: a refused op must not use up an automatic name
        _check_derived(desc, op_kind if name is None else f"{op_kind} {name!r}")
        name = self._name(name, op_kind)
        if self._step:
            # ops built at the same position of every unrolled step are the "same" computation
            attrs["timestep"] = f"{self._step[0]}#{self._step[1]}"
            self._step[1] += 1
        op = Op(len(self.ops), name, op_kind, tuple(t.op for t in inputs), attrs, desc)
        self.ops.append(op)
        self._by_name[op.name] = op.index
        return Tensor(self, op.index, desc.out_shape)

    @staticmethod
    def _check_activation(activation: Any) -> None:
        if not (activation is None or (isinstance(activation, str) and activation in _ACTIVATIONS)):
            hint = ""
            if isinstance(activation, str) and activation in ops.ACTIVATION_FLOPS:
                # only ReLU's gradient comes from the output alone, which is all a fused op keeps
                hint = f" (only relu is fused into the op; apply g.{activation}(y) to its output)"
            raise GraphError(f"unknown activation {activation!r}; expected one of {_ACTIVATIONS}{hint}")

    def _activate(self, t: Tensor, activation: str | None, name: str | None) -> Tensor:
        if activation == "relu":
            # The activation is folded into the op (as cuDNN does): the op's name stays the user's.
            op = self.ops[t.op]
            op.attrs["activation"] = "relu"
        return t

    @contextlib.contextmanager
    def timestep(self, cell: str) -> Iterator[None]:
        """Mark the ops built inside as one unrolled step of the recurrent cell ``cell``.

        The n-th op built in every ``with g.timestep("layer0"):`` block gets the attribute
        ``timestep="layer0#n"``; Tofu's coarsening (:mod:`shardwise.planning.tofu.coarsen`) gives
        all ops with the same key one partition strategy, as they share weights and logic.
        """
        if not isinstance(cell, str) or not cell:
            raise GraphError(f"timestep needs a non-empty cell name, got {cell!r}")
        if self._step:
            raise GraphError(f"timestep({cell!r}) inside timestep({self._step[0]!r}): steps do not nest")
        self._step = [cell, 0]
        try:
            yield
        finally:
            self._step = []

    # ----- builders ----------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Tensor:
        """The graph's input, (N, C, H, W), (N, F) or (N, T, D) float32; N is the minibatch.
        ``dtype="int64"`` makes it integer token ids (N, T) for :meth:`embedding` (any integer
        array is accepted; the runtime carries ids below 2**24 exactly)."""
        if dtype not in INPUT_DTYPES:
            raise GraphError(f"input dtype must be one of {INPUT_DTYPES}, got {dtype!r}")
        dims = check_shape(shape, f"input {name!r} shape")
        # float inputs keep no dtype attribute: their graphs' fingerprints stay as they were
        attrs = {} if dtype == "float32" else {"dtype": dtype}
        return self._add("input", [], ops.input_op(dims), name, **attrs)

    def conv2d(self, x: Tensor, out_channels: int, kernel: int | Sequence[int] = 3,
               stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
               activation: str | None = None, bias: bool = True, name: str | None = None,
               dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
        """2-D convolution, weight (C_out, C_in / groups, kH, kW); optional fused ReLU.

        ``dilation`` spaces the kernel's taps (``torch.nn.Conv2d``'s); ``groups`` splits the
        channels into that many independent convolutions (it must divide C_in and C_out;
        ``groups=C_in`` is a depthwise convolution), as PyTorch's."""
        x = self._tensor(x)
        _check_positive_int(out_channels, "conv2d out_channels")
        self._check_activation(activation)
        desc = ops.conv2d(x.shape, out_channels, kernel, stride, padding, bias, dilation, groups)
        # the defaults are left out of the attributes: graphs built before dilation and groups
        # existed keep their fingerprints (and their saved plans)
        extra: dict[str, Any] = {}
        if ops._pair(dilation, "dilation") != (1, 1):
            extra["dilation"] = dilation
        if groups != 1:
            extra["groups"] = groups
        t = self._add("conv2d", [x], desc, name, out_channels=out_channels, kernel=kernel,
                      stride=stride, padding=padding, bias=bias, activation=None, **extra)
        return self._activate(t, activation, name)

    def pool2d(self, x: Tensor, kernel: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, kind: str = "max", name: str | None = None,
               ceil_mode: bool = False) -> Tensor:
        """Max or average pooling; stride defaults to the kernel.  ``ceil_mode=True`` (max only)
        gives PyTorch's ceil-mode output size: a last, partial window where the input does not
        end on a stride (GoogLeNet's pools)."""
        x = self._tensor(x)
        if kind not in ("max", "avg"):
            raise GraphError(f"unknown pool kind {kind!r}; expected 'max' or 'avg'")
        if not isinstance(ceil_mode, bool) or (ceil_mode and kind != "max"):
            raise GraphError(f"pool2d ceil_mode must be True or False, and True only for max pooling, got "
                             f"{ceil_mode!r} with kind {kind!r}")
        stride = kernel if stride is None else stride
        desc = ops.pool2d(x.shape, kernel, stride, padding, ceil_mode)
        # floor mode keeps no attribute: the fingerprints of graphs built before stay as they were
        extra = {"ceil_mode": True} if ceil_mode and desc.out_shape != ops.pool2d(x.shape, kernel, stride,
                                                                                   padding).out_shape else {}
        return self._add("pool2d", [x], desc, name, kernel=kernel, stride=stride, padding=padding, kind=kind, **extra)

    def relu(self, x: Tensor, name: str | None = None) -> Tensor:
        x = self._tensor(x)
        return self._add("relu", [x], ops.elementwise([x.shape], "relu"), name)

    def sigmoid(self, x: Tensor, name: str | None = None) -> Tensor:
        """1 / (1 + exp(-x)), element-wise, any shape (``torch.sigmoid``)."""
        return self._activation("sigmoid", x, name)

    def tanh(self, x: Tensor, name: str | None = None) -> Tensor:
        """tanh(x), element-wise, any shape (``torch.tanh``)."""
        return self._activation("tanh", x, name)

    def gelu(self, x: Tensor, approximate: str = "none", name: str | None = None) -> Tensor:
        """GELU, element-wise, as ``torch.nn.GELU(approximate=...)``: ``"none"``, the exact form
        x * Phi(x) = x * (1 + erf(x / sqrt 2)) / 2; ``"tanh"``, the approximation
        x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x**3))) / 2 of *Gaussian Error Linear Units
        (GELUs)* (Hendrycks and Gimpel), GPT-2's ``gelu_new``."""
        if approximate not in ("none", "tanh"):
            raise GraphError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
        # the exact form keeps no attribute: graphs built before the tanh form keep their fingerprints
        extra = {"approximate": "tanh"} if approximate == "tanh" else {}
        return self._activation("gelu", x, name, **extra)

    def silu(self, x: Tensor, name: str | None = None) -> Tensor:
        """x * sigmoid(x), element-wise (``torch.nn.SiLU``, also called swish)."""
        return self._activation("silu", x, name)

    def leaky_relu(self, x: Tensor, negative_slope: float = 0.01, name: str | None = None) -> Tensor:
        """x if x > 0 else negative_slope * x, element-wise (``torch.nn.LeakyReLU``); the
        slope is any finite float32 (a negative one too, as PyTorch allows)."""
        if isinstance(negative_slope, bool) or not isinstance(negative_slope, numbers.Real) \
                or not math.isfinite(negative_slope) or abs(negative_slope) > _FLOAT32_MAX:
            raise GraphError(f"leaky_relu negative_slope must be a finite float32, got {negative_slope!r}")
        return self._activation("leaky_relu", x, name, negative_slope=float(negative_slope))

    def clip(self, x: Tensor, lo: float = -1.0, hi: float = 1.0, name: str | None = None) -> Tensor:
        """min(max(x, lo), hi), element-wise (``torch.nn.Hardtanh(lo, hi)``, ``torch.clamp``; ReLU6 is
        ``clip(x, 0, 6)``).  The bounds are float32s with lo <= hi; a bound at +-3.4028235e38 (the
        largest float32) is no bound.  The gradient flows where lo < x < hi (Hardtanh's: none at
        the bounds themselves)."""
        for what, v in (("lo", lo), ("hi", hi)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
                    or abs(v) > _FLOAT32_MAX:
                raise GraphError(f"clip {what} must be a finite float32, got {v!r}")
        if not np.float32(lo) <= np.float32(hi):
            raise GraphError(f"clip needs lo <= hi, got lo={lo!r}, hi={hi!r}")
        return self._activation("clip", x, name, lo=float(lo), hi=float(hi))

    def relu6(self, x: Tensor, name: str | None = None) -> Tensor:
        """min(max(x, 0), 6) (``torch.nn.ReLU6``): a :meth:`clip` to [0, 6]."""
        return self.clip(x, 0.0, 6.0, name=name)

    def hardsigmoid(self, x: Tensor, name: str | None = None) -> Tensor:
        """min(max(x + 3, 0), 6) / 6, element-wise (``torch.nn.Hardsigmoid``)."""
        return self._activation("hardsigmoid", x, name)

    def hardswish(self, x: Tensor, name: str | None = None) -> Tensor:
        """x * min(max(x + 3, 0), 6) / 6, element-wise (``torch.nn.Hardswish``)."""
        return self._activation("hardswish", x, name)

    def dropout(self, x: Tensor, p: float = 0.5, seed: int | None = None, name: str | None = None) -> Tensor:
        """Inverted dropout (``torch.nn.Dropout``): in train mode each element is zeroed with
        probability ``p`` and the others scaled by 1 / (1 - p); in eval mode (``Trainer.eval()``)
        the identity.  The mask is a function of ``seed``, the training step and the element's
        index in the whole tensor only, so every plan draws the same mask (a different one each
        step).  ``seed`` defaults to one derived from the op's name (SHA-256), so two dropouts
        of one graph draw different masks; it is an int in [0, 2**64)."""
        x = self._tensor(x)
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p < 1.0:
            raise GraphError(f"dropout p must be a number in [0, 1), got {p!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                                 or not 0 <= seed < 2**64):
            raise GraphError(f"dropout seed must be an int in [0, 2**64), got {seed!r}")
        if np.float32(p) >= 1.0:   # the kernels read p as a float32
            raise GraphError(f"dropout p={p!r} rounds to 1 in float32")
        t = self._add("dropout", [x], ops.dropout(x.shape), name, p=float(p))
        op = self.ops[t.op]
        op.attrs["seed"] = int(seed) if seed is not None else _name_seed(op.name)
        return t

    def _activation(self, kind: str, x: Tensor, name: str | None, **attrs: Any) -> Tensor:
        """A point-wise activation op (ops.activation): one input, the output of its shape."""
        x = self._tensor(x)
        return self._add(kind, [x], ops.activation(x.shape, kind), name, **attrs)

    def add(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """Element-wise sum of two tensors of the same shape (residual connections), or of
        ``a`` and a ``b`` whose shape is a trailing part of a's, broadcast over a's leading
        dimensions (a position table (T, D) added to (N, T, D) token embeddings); shapes that
        broadcast otherwise ((N, T, D) + (1, T, D)) build a ``broadcast_add`` op."""
        a, b = self._tensor(a, "first input"), self._tensor(b, "second input")
        r, rb = len(a.shape), len(b.shape)
        if a.shape != b.shape and not (rb <= r and a.shape[r - rb:] == b.shape) and broadcasts(a.shape, b.shape):
            return self.broadcast_add(a, b, name=name)   # any other broadcast: graph_bcast
        return self._add("add", [a, b], ops.add(a.shape, b.shape), name)

    def batchnorm2d(self, x: Tensor, name: str | None = None, momentum: float = BN_MOMENTUM,
                    eps: float = BN_EPS) -> Tensor:
        """Batch normalization over (N, H, W) per channel, with weight and bias (``torch.nn.BatchNorm2d``).

        Training normalizes with the minibatch's statistics and updates running statistics,
        ``running = (1 - momentum) * running + momentum * statistic`` (the variance unbiased);
        a Trainer in eval mode normalizes with the running statistics instead.  ``eps`` is added
        to the variance (any positive number; PyTorch's default 1e-5)."""
        x = self._tensor(x)
        if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) or not 0.0 <= momentum <= 1.0:
            raise GraphError(f"batchnorm2d momentum must be a number in [0, 1], got {momentum!r}")
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or not eps > 0:
            raise GraphError(f"batchnorm2d eps must be a positive finite number, got {eps!r}")
        # the defaults are left out of the attributes: graphs built before momentum and eps
        # existed keep their fingerprints (and their saved plans)
        attrs: dict[str, Any] = {} if momentum == BN_MOMENTUM else {"momentum": float(momentum)}
        if eps != BN_EPS:
            attrs["eps"] = float(eps)
        return self._add("batchnorm2d", [x], ops.batchnorm2d(x.shape), name, **attrs)

    def group_norm(self, x: Tensor, groups: int, eps: float = GROUP_NORM_EPS, affine: bool = True,
                   name: str | None = None) -> Tensor:
        """Group normalization of (N, C, H, W) (``torch.nn.GroupNorm(groups, C, eps, affine)``): per
        sample, each group of C / groups consecutive channels is normalized over its channels,
        rows and columns (biased variance, ``eps`` added to it), then scaled and shifted per
        channel by a weight and a bias (``"<name>.weight"``, ``"<name>.bias"``, shape (C,)) when
        ``affine``.  The statistics are the sample's own: no state, the same in train and eval
        mode.  ``groups`` must divide C; groups=1 normalizes each sample as a whole, groups=C each
        channel (instance norm)."""
        x = self._tensor(x)
        if len(x.shape) != 4:
            raise GraphError(f"group_norm takes an (N, C, H, W) input, got shape {x.shape}")
        if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
            raise GraphError(f"group_norm groups must be a positive int, got {groups!r}")
        if x.shape[1] % int(groups):
            raise GraphError(f"group_norm: {groups} groups do not divide the {x.shape[1]} channels of the input "
                             f"{x.shape} (C must be a multiple of groups)")
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or not eps > 0:
            raise GraphError(f"group_norm eps must be a positive finite number, got {eps!r}")
        if not isinstance(affine, (bool, np.bool_)):
            raise GraphError(f"group_norm affine must be a bool, got {affine!r}")
        return self._add("group_norm", [x], ops.group_norm(x.shape, int(groups), bool(affine)), name,
                         groups=int(groups), eps=float(eps), affine=bool(affine))

    def concat(self, xs: Sequence[Tensor], axis: int = 1, name: str | None = None) -> Tensor:
        """Concatenate along ``axis`` (channels by default)."""
        if isinstance(xs, Tensor) or not isinstance(xs, (list, tuple)) or len(xs) == 0:
            raise GraphError("concat takes a non-empty list of tensors")
        ts = [self._tensor(t, f"concat input {k}") for k, t in enumerate(xs)]
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise ShapeError(f"concat axis must be an int, got {axis!r}")
        return self._add("concat", ts, ops.concat([t.shape for t in ts], axis), name, axis=axis)

    def flatten(self, x: Tensor, name: str | None = None) -> Tensor:
        """(N, C, H, W) -> (N, C*H*W), in C order as PyTorch's flatten."""
        x = self._tensor(x)
        return self._add("flatten", [x], ops.flatten(x.shape), name)

    def linear(self, x: Tensor, out_features: int, activation: str | None = None, bias: bool = True,
               name: str | None = None) -> Tensor:
        """Fully-connected layer over the last dimension of (N, in) or (N, T, in), weight
        (out, in) (``torch.nn.Linear``); optional fused ReLU."""
        x = self._tensor(x)
        _check_positive_int(out_features, "linear out_features")
        self._check_activation(activation)
        t = self._add("linear", [x], ops.linear(x.shape, out_features, bias), name,
                      out_features=out_features, bias=bias, activation=None)
        return self._activate(t, activation, name)

    def custom(self, definition: Any, inputs: Sequence[Tensor], name: str | None = None,
               weights: dict[str, Sequence[int]] | None = None) -> Tensor:
        """An op described with ``@sw.op`` (tensor-as-a-lambda).  ``inputs`` are graph tensors
        for the description's non-weight parameters, in order; ``weights`` gives the shapes of
        the parameters that are trainable weights.  Planned like a built-in op (the core
        derives its regions and costs); training it needs kernels, which described ops do not
        have yet."""
        from shardwise.ops.describe import OpDefinition

        if not isinstance(definition, OpDefinition):
            raise GraphError(f"custom needs an operator described with @sw.op, got {type(definition).__name__}")
        weights = dict(weights or {})
        unknown = set(weights) - set(definition.params)
        if unknown:
            raise GraphError(f"{definition.name} has no parameter(s) {sorted(unknown)}")
        data_params = [p for p in definition.params if p not in weights]
        ts = [self._tensor(t, f"{definition.name} input {k}") for k, t in enumerate(inputs)]
        if len(ts) != len(data_params):
            raise GraphError(f"{definition.name} takes {len(data_params)} tensor input(s) {data_params}, "
                             f"got {len(ts)}")
        shapes = {p: t.shape for p, t in zip(data_params, ts)}
        shapes.update({p: check_shape(s, f"{definition.name} weight {p!r} shape") for p, s in weights.items()})
        desc = definition.describe(shapes, weights=list(weights))
        return self._add("custom", ts, desc, name or definition.name, definition=definition.name)

    def parameter(self, shape: Sequence[int], name: str | None = None) -> Tensor:
        """A trainable tensor of ``shape`` that any number of ops may read as a data input
        (weights shared across RNN timesteps).  The op owns the weight; its output is the
        weight's value, and the gradients of all readers are summed into it."""
        dims = check_shape(shape, "parameter shape")
        return self._add("parameter", [], ops.parameter(dims), name)

    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
               name: str | None = None) -> Tensor:
        """Matrix product (.., M, K) @ (.., K, N) -> (.., M, N) of two data tensors over equal
        leading batch dimensions (``torch.matmul``); ``transpose_a`` / ``transpose_b`` read
        an operand as its last two dimensions swapped (attention's q @ k^T)."""
        a, b = self._tensor(a, "first input"), self._tensor(b, "second input")
        for flag, what in ((transpose_a, "transpose_a"), (transpose_b, "transpose_b")):
            if not isinstance(flag, bool):
                raise GraphError(f"matmul {what} must be True or False, got {flag!r}")
        # untransposed products keep no attributes: their graphs' fingerprints stay as they were
        attrs = {k: True for k, v in (("transpose_a", transpose_a), ("transpose_b", transpose_b)) if v}
        return self._add("matmul", [a, b], ops.matmul(a.shape, b.shape, transpose_a, transpose_b), name, **attrs)

    def lstm_cell(self, i: Tensor, f: Tensor, gate: Tensor, c_prev: Tensor, name: str | None = None) -> Tensor:
        """LSTM cell state: sigmoid(f) * c_prev + sigmoid(i) * tanh(gate), all (B, H)."""
        ts = [self._tensor(t, f"lstm_cell input {k}") for k, t in enumerate((i, f, gate, c_prev))]
        return self._add("lstm_cell", ts, ops.lstm_cell([t.shape for t in ts]), name)

    def lstm_hidden(self, o: Tensor, c: Tensor, name: str | None = None) -> Tensor:
        """LSTM hidden state: sigmoid(o) * tanh(c), both (B, H)."""
        ts = [self._tensor(o, "lstm_hidden input 0"), self._tensor(c, "lstm_hidden input 1")]
        return self._add("lstm_hidden", ts, ops.lstm_hidden([t.shape for t in ts]), name)

    def softmax(self, x: Tensor, name: str | None = None, output: str = "logits") -> Tensor:
        """The loss: softmax over the last dimension of (N, C) or (N, T, C) logits, trained with
        cross-entropy against (N) or (N, T) labels (the mean over every label, as
        ``torch.nn.functional.cross_entropy``).  A softmax inside a network is :meth:`softmax_dim`.

        ``output``: what the model itself returned, which ``Trainer.forward`` gives back:
        "logits" (the softmax was appended to a model returning logits; the default),
        "probabilities" or "log_probabilities" (the model's own last op was this softmax, or a
        log-softmax)."""
        x = self._tensor(x)
        if output not in SOFTMAX_OUTPUTS:
            raise GraphError(f"softmax output must be one of {', '.join(map(repr, SOFTMAX_OUTPUTS))}, got {output!r}")
        attrs = {} if output == "logits" else {"output": output}   # the default keeps fingerprints as they were
        return self._add("softmax", [x], ops.softmax(x.shape), name, **attrs)

    # ----- queries -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ops)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __getitem__(self, name: str) -> Op:
        try:
            return self.ops[self._by_name[name]]
        except KeyError:
            raise KeyError(f"no op named {name!r} in graph {self.name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def op_names(self) -> list[str]:
        return [op.name for op in self.ops]

    def model_weights(self, weights: dict[str, Any]) -> dict[str, Any]:
        """``weights`` keyed "<op>.weight" / "<op>.bias" under the model's names where
        :attr:`weight_names` gives one (what Trainer.get_weights returns)."""
        return {self.weight_names.get(k, k): v for k, v in weights.items()}

    def graph_weights(self, weights: Any) -> dict[str, Any]:
        """``weights`` under the model's names (or the keys themselves) keyed "<op>.weight" /
        "<op>.bias" (what Trainer.set_weights takes in).  A tied weight may come under any of its
        names (:attr:`weight_aliases`); under several, the arrays must be equal."""
        key_of = {name: key for key, name in self.weight_names.items()}
        out: dict[str, Any] = {}
        for k, v in weights.items():
            name = self.weight_aliases.get(k, k)
            key = key_of.get(name, name)
            if key in out and not np.array_equal(np.asarray(out[key]), np.asarray(v)):
                others = sorted(n for n in weights if self.weight_aliases.get(n, n) == name)
                raise ShapeError(f"the tied weights {others} are one parameter, but the arrays given differ")
            out[key] = v
        return out

    def num_parameters(self) -> int:
        """Trainable parameters, derived from the op descriptions."""
        return sum(op.desc.num_parameters() for op in self.ops)

    def flops(self) -> int:
        """FLOPs of one forward pass over the minibatch."""
        return sum(op.desc.forward_flops() for op in self.ops)

    def edges(self) -> list[tuple[int, int, int]]:
        """(producer, consumer, input slot) for every tensor use."""
        return [(src, op.index, slot) for op in self.ops for slot, src in enumerate(op.inputs)]

    def consumers(self, index: int) -> list[int]:
        return [op.index for op in self.ops if index in op.inputs]

    def fingerprint(self) -> str:
        """A hash of the structure (names, kinds, attributes, shapes) used to stamp plan files."""
        rows = [[op.name, op.kind, list(op.inputs), list(op.shape),
                 sorted((k, repr(v)) for k, v in op.attrs.items())] for op in self.ops]
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]

    def summary(self) -> str:
        lines = [f"Graph {self.name!r}: {len(self.ops)} ops, {self.num_parameters():,} parameters, "
                 f"{self.flops() / 1e9:.2f} GFLOP forward"]
        for op in self.ops:
            srcs = ", ".join(self.ops[i].name for i in op.inputs)
            lines.append(f"  {op.name:<24} {op.kind:<12} {str(op.shape):<24} <- {srcs}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.ops)} ops)"


def total_elements(shape: Sequence[int]) -> int:
    return prod(shape)
