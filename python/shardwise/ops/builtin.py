"""The built-in operators, each described once as an :class:`~shardwise.ops.desc.OpDesc`.

A builder takes the input shapes and the op's attributes, validates them and
returns the description.  Shapes are (N, C, H, W) for images, (N, F) for
features and (N, T, D) for sequences (:mod:`shardwise.ops.seq`: the transformer ops); weights use PyTorch's layouts (conv weight (C_out, C_in, kH, kW),
linear weight (out, in)).  Adding an op means adding one builder here and its
kernels (a later issue); the planner needs nothing else.
"""
from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import Callable, Sequence

from shardwise.ops import bcast as ops_bcast
from shardwise.ops import seq as ops_seq
from shardwise.errors import ShapeError
from shardwise.ops.desc import DATA, MAX_INDEX_COEF, STAT, WEIGHT, InputDesc, OpDesc, affine, identity_exprs, var, IndexExpr


def _pair(value: int | Sequence[int], what: str) -> tuple[int, int]:
    if isinstance(value, bool):
        raise ShapeError(f"{what} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, int):
        return (value, value)
    try:
        a, b = value  # type: ignore[misc]
    except (TypeError, ValueError):
        raise ShapeError(f"{what} must be an int or a pair of ints, got {value!r}") from None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (a, b)):
        raise ShapeError(f"{what} must be an int or a pair of ints, got {value!r}")
    return (a, b)


def _require_rank(shape: tuple[int, ...], rank: int, op: str) -> None:
    if len(shape) != rank:
        raise ShapeError(f"{op} expects a rank-{rank} input, got shape {shape}")


# Kernel, stride and padding of a window op: strides are index coefficients, which the C core
# bounds at 2**20 (MAX_INDEX_COEF), and the CPU kernels refuse window parameters beyond 2**24;
# one bound for the three keeps the rule simple and far beyond any real network.
MAX_WINDOW = MAX_INDEX_COEF


def _window_out(size: int, kernel: int, stride: int, pad: int, op: str, axis: str) -> int:
    if kernel <= 0 or stride <= 0 or pad < 0:
        raise ShapeError(f"{op}: kernel and stride must be positive and padding non-negative "
                         f"along {axis} (kernel={kernel}, stride={stride}, padding={pad})")
    if max(kernel, stride, pad) > MAX_WINDOW:
        raise ShapeError(f"{op}: kernel, stride and padding must be at most {MAX_WINDOW:,} along {axis} "
                         f"(kernel={kernel}, stride={stride}, padding={pad})")
    if kernel > size + 2 * pad:
        raise ShapeError(f"{op}: kernel {kernel} is larger than the padded input {size + 2 * pad} along {axis}")
    return (size + 2 * pad - kernel) // stride + 1


def input_op(shape: tuple[int, ...]) -> OpDesc:
    """The graph's input: an iteration space equal to its shape and no inputs."""
    return OpDesc(extents=shape, out_rank=len(shape), inputs=())


def conv2d(x: tuple[int, ...], out_channels: int, kernel, stride, padding, bias: bool, dilation=1,
           groups: int = 1) -> OpDesc:
    """out[n, co, y, x] = Sum(ci, dy, dx) in[n, cig*(co // cog) + ci, y*s + dy*d - p, x*s + dx*d - p]
    * w[co, ci, dy, dx] + b[co], with cig = C_in / groups and cog = C_out / groups input and
    output channels per group (groups=1: a dense convolution, cig = C_in; groups = C_in: depthwise).

    The reduction ``ci`` runs over the cig channels of one group, so the FLOPs are the dense
    convolution's divided by ``groups``; a box of output channels reads the input channels of
    the groups it meets (the variable divisor ``co // cog``), and a box of rows reads its rows'
    dilated windows (the halo is ``d * (k - 1)`` rows)."""
    _require_rank(x, 4, "conv2d")
    n, ci, h, w = x
    if out_channels <= 0:
        raise ShapeError(f"conv2d: out_channels must be positive, got {out_channels}")
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel, "kernel"), _pair(stride, "stride"), _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    if min(dh, dw) < 1 or max(dh, dw) > MAX_WINDOW:
        raise ShapeError(f"conv2d: dilation must be in 1..{MAX_WINDOW:,}, got {(dh, dw)}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"conv2d: groups must be a positive int, got {groups!r}")
    if ci % groups or out_channels % groups:
        raise ShapeError(f"conv2d: groups={groups} must divide the input channels ({ci}) and the output "
                         f"channels ({out_channels})")
    cig, cog = ci // groups, out_channels // groups
    # the window spans d * (k - 1) + 1 input pixels along each axis
    ho = _window_out(h, dh * (kh - 1) + 1, sh, ph, "conv2d", "height (dilated kernel)" if dh > 1 else "height")
    wo = _window_out(w, dw * (kw - 1) + 1, sw, pw, "conv2d", "width (dilated kernel)" if dw > 1 else "width")
    # iteration variables: 0 n, 1 co, 2 y, 3 x | 4 ci (within the group), 5 dy, 6 dx
    nv = 7
    if groups == 1:
        channel = var(nv, 4)
    else:   # cig * (co // cog) + ci: the group's first input channel, then ci
        coefs = [0] * nv
        coefs[1], coefs[4] = cig, 1
        vdivs = [1] * nv
        vdivs[1] = cog
        channel = IndexExpr(tuple(coefs), vdivs=tuple(vdivs) if cog > 1 else ())
    data = InputDesc(DATA, x, (var(nv, 0), channel,
                               affine(nv, {2: sh, 5: dh}, -ph), affine(nv, {3: sw, 6: dw}, -pw)))
    weight = InputDesc(WEIGHT, (out_channels, cig, kh, kw), (var(nv, 1), var(nv, 4), var(nv, 5), var(nv, 6)))
    inputs = [data, weight]
    if bias:
        inputs.append(InputDesc(WEIGHT, (out_channels,), (var(nv, 1),), bias=True))
    # partition-n-reduce over ci only when dense: a worker's part of ci is then one channel
    # range of the input, which its kernels see as the whole (grouped, the parts of several
    # groups are not one range)
    return OpDesc(extents=(n, out_channels, ho, wo, cig, kh, kw), out_rank=4, inputs=tuple(inputs),
                  flops_per_point=2.0, flops_per_output=1.0 if bias else 0.0,
                  reductions=("ci", "dy", "dx"), additive=(4,) if groups == 1 else ())


def pool2d(x: tuple[int, ...], kernel, stride, padding, ceil_mode: bool = False) -> OpDesc:
    """out[n, c, y, x] = Max/Avg(dy, dx) in[n, c, y*s+dy-p, x*s+dx-p].

    ``ceil_mode`` (max pooling): PyTorch's output size, ceil((H + 2p - k) / s) + 1 less a last
    window that would start in the right padding; its partial window reads what lies inside
    the input (the kernels' reads beyond it are padding, -inf)."""
    _require_rank(x, 4, "pool2d")
    n, c, h, w = x
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel, "kernel"), _pair(stride, "stride"), _pair(padding, "padding")
    if min(kh, kw, sh, sw) <= 0 or min(ph, pw) < 0:
        raise ShapeError(f"pool2d: kernel and stride must be positive and padding non-negative "
                         f"(kernel={(kh, kw)}, stride={(sh, sw)}, padding={(ph, pw)})")
    if 2 * ph > kh or 2 * pw > kw:
        raise ShapeError(f"pool2d: padding {(ph, pw)} must be at most half the kernel {(kh, kw)}")
    ho = _window_out(h, kh, sh, ph, "pool2d", "height")
    wo = _window_out(w, kw, sw, pw, "pool2d", "width")
    if ceil_mode:
        ho, wo = ceil_out(h, kh, sh, ph), ceil_out(w, kw, sw, pw)
    nv = 6  # 0 n, 1 c, 2 y, 3 x | 4 dy, 5 dx
    data = InputDesc(DATA, x, (var(nv, 0), var(nv, 1),
                               affine(nv, {2: sh, 4: 1}, -ph), affine(nv, {3: sw, 5: 1}, -pw)))
    return OpDesc(extents=(n, c, ho, wo, kh, kw), out_rank=4, inputs=(data,),
                  flops_per_point=1.0, reductions=("dy", "dx"))


def ceil_out(size: int, kernel: int, stride: int, pad: int) -> int:
    """PyTorch's ceil_mode output size: ceil((size + 2 pad - kernel) / stride) + 1, less one
    when the last window would start in the right padding."""
    out = -(-(size + 2 * pad - kernel) // stride) + 1
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


def elementwise(shapes: Sequence[tuple[int, ...]], op: str) -> OpDesc:
    """out[i] = f(in0[i], in1[i], ...) for relu (one input) and add (several)."""
    first = shapes[0]
    for s in shapes[1:]:
        if s != first:
            raise ShapeError(f"{op}: input shapes differ: {first} vs {s}")
    nv = len(first)
    inputs = tuple(InputDesc(DATA, s, identity_exprs(nv, nv)) for s in shapes)
    return OpDesc(extents=first, out_rank=nv, inputs=inputs, flops_per_output=float(max(1, len(shapes) - 1)))


# The point-wise activations beside relu, with the FLOPs the cost model charges per output
# element: the forward pass's arithmetic, counting an exp, erf or tanh as one operation.
#   sigmoid 1 / (1 + exp(-x)): negate, exp, add, divide          tanh: one
#   gelu x * (1 + erf(x / sqrt 2)) / 2: scale, erf, add, 2 mul    silu x / (1 + exp(-x)): 4
#   leaky_relu x > 0 ? x : a * x: compare, multiply        clip min(max(x, lo), hi): 2 compares
#   hardsigmoid min(max(x + 3, 0), 6) / 6: add, 2 compares, divide    hardswish: and a multiply
ACTIVATION_FLOPS: dict[str, float] = {"sigmoid": 4.0, "tanh": 1.0, "gelu": 5.0, "silu": 4.0, "leaky_relu": 2.0,
                                      "clip": 2.0, "hardsigmoid": 4.0, "hardswish": 5.0}


def activation(x: tuple[int, ...], kind: str) -> OpDesc:
    """out[i] = f(in[i]) for a point-wise activation f (:data:`ACTIVATION_FLOPS`): relu's
    index map (so its splits, regions and transfers), with f's FLOPs per output."""
    if kind not in ACTIVATION_FLOPS:
        raise ShapeError(f"unknown activation {kind!r}; expected one of {sorted(ACTIVATION_FLOPS)}")
    return replace(elementwise([x], kind), flops_per_output=ACTIVATION_FLOPS[kind])


# Dropout's FLOPs per output element: the mask's hash (two splitmix64 rounds, counted as one
# operation, as the activations count an exp as one), the comparison and the scaling.
DROPOUT_FLOPS = 3.0


def dropout(x: tuple[int, ...]) -> OpDesc:
    """out[i] = in[i] * mask(seed, step, i) / (1 - p): relu's index map (any split, each worker
    reads its own block) with the mask's FLOPs per output; the mask is a function of the
    element's global index, so it needs nothing from other workers."""
    return replace(elementwise([x], "dropout"), flops_per_output=DROPOUT_FLOPS)


BN_EPS = 1e-5
"""Batch-normalization epsilon by default (PyTorch's), added to the biased variance; a batchnorm2d
op with another one keeps it as its ``eps`` attribute (Graph.batchnorm2d), which the kernels read."""


def batchnorm2d(x: tuple[int, ...]) -> OpDesc:
    """out[n,c,h,w] = (in[n,c,h,w] - mean[c]) * gamma[c] / std[c] + beta[c].

    The statistics are reduced over the whole minibatch whatever the split:
    workers exchange per-channel partial sums (the STAT input, 2 floats per
    channel), never the activations themselves.
    """
    _require_rank(x, 4, "batchnorm2d")
    c = x[1]
    nv = 5  # 0 n, 1 c, 2 h, 3 w | 4 s: which statistic (sum, sum of squares)
    ch = (var(nv, 1),)
    inputs = (InputDesc(DATA, x, identity_exprs(nv, 4)),
              InputDesc(WEIGHT, (c,), ch), InputDesc(WEIGHT, (c,), ch, bias=True),
              InputDesc(STAT, (2, c), (var(nv, 4), var(nv, 1))))
    return OpDesc(extents=x + (2,), out_rank=4, inputs=inputs, flops_per_output=4.0, reductions=("s",))


GROUP_NORM_FLOPS = 8.0
"""FLOPs per output element group_norm is charged (forward): layer norm's (subtract the mean,
scale by the inverse deviation, the weight and bias, its share of the two sums)."""


def group_norm(x: tuple[int, ...], groups: int, affine: bool = True) -> OpDesc:
    """Group normalization (``torch.nn.GroupNorm(groups, C)``): per sample, the C channels form
    ``groups`` groups of cg = C / groups consecutive channels, normalized over the group's
    cg * H * W elements; then a weight and a bias per channel (``affine``):

        out[n, c, h, w] = (in[n, c, h, w] - mean_g) / std_g * w[c] + b[c],   g = c // cg

    Iteration (n, c, h, w | j, kh, kw): every output reads its group's whole block
    ``in[n, cg * (c // cg) + j, kh, kw]``, as a layer norm's output reads its whole row.  So the
    samples split freely; a split of the channels on group boundaries reads only the worker's
    groups, one inside a group reads the whole group; a split of the rows or columns reads every
    row and column of the groups: each worker recomputes its groups' statistics (in one order,
    the same bits)."""
    _require_rank(x, 4, "group_norm")
    n, c, h, w = x
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"group_norm: groups must be a positive int, got {groups!r}")
    if c % groups:
        raise ShapeError(f"group_norm: {groups} groups must divide the {c} channels of the input {x}")
    cg = c // groups
    nv = 7  # 0 n, 1 c, 2 h, 3 w | 4 j (channel within the group), 5 kh, 6 kw
    if cg == 1:   # a group per channel (instance norm): the channel itself
        channel = var(nv, 1)
    else:         # cg * (c // cg) + j: the group's first channel, then j
        coefs = [0] * nv
        coefs[1], coefs[4] = cg, 1
        vdivs = [1] * nv
        vdivs[1] = cg
        channel = IndexExpr(tuple(coefs), vdivs=tuple(vdivs))
    inputs = [InputDesc(DATA, x, (var(nv, 0), channel, var(nv, 5), var(nv, 6)))]
    if affine:
        inputs += [InputDesc(WEIGHT, (c,), (var(nv, 1),)), InputDesc(WEIGHT, (c,), (var(nv, 1),), bias=True)]
    return OpDesc(extents=x + (cg, h, w), out_rank=4, inputs=tuple(inputs), flops_per_output=GROUP_NORM_FLOPS,
                  reductions=("j", "kh", "kw"))


def concat(shapes: Sequence[tuple[int, ...]], axis: int) -> OpDesc:
    """out = the inputs laid side by side along ``axis``; input k feeds only its own window."""
    first = shapes[0]
    rank = len(first)
    if not 0 <= axis < rank:
        raise ShapeError(f"concat: axis {axis} out of range for rank {rank}")
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for d, (a, b) in enumerate(zip(first, s)) if d != axis):
            raise ShapeError(f"concat: shapes {first} and {s} differ outside axis {axis}")
    total = sum(s[axis] for s in shapes)
    out = tuple(total if d == axis else first[d] for d in range(rank))
    inputs = []
    offset = 0
    for s in shapes:
        exprs = tuple(var(rank, d, 1, -offset if d == axis else 0) for d in range(rank))
        window = tuple((offset, offset + s[axis]) if d == axis else (0, out[d]) for d in range(rank))
        inputs.append(InputDesc(DATA, s, exprs, window))
        offset += s[axis]
    return OpDesc(extents=out, out_rank=rank, inputs=tuple(inputs))


def flatten(x: tuple[int, ...]) -> OpDesc:
    """out[n, f] = in[n, f // (H*W), (f // W) % H, f % W]: quasi-affine, so splits of f
    must keep whole channels together (derived from the description as a granule)."""
    if len(x) < 2:
        raise ShapeError(f"flatten expects rank >= 2, got shape {x}")
    n = x[0]
    inner = x[1:]
    f = prod(inner)
    exprs = [IndexExpr((1, 0))]
    stride = f
    for size in inner:
        stride //= size
        exprs.append(IndexExpr((0, 1), 0, stride, size if stride * size != f else 0))
    return OpDesc(extents=(n, f), out_rank=2, inputs=(InputDesc(DATA, x, tuple(exprs)),))


def linear(x: tuple[int, ...], out_features: int, bias: bool) -> OpDesc:
    """out[.., o] = Sum(i) in[.., i] * w[o, i] + b[o], over the last dimension of (N, I) or
    (N, T, I) inputs (``torch.nn.Linear``): iteration (leading.., o | i)."""
    if len(x) < 2:
        raise ShapeError(f"linear expects a rank >= 2 input (N, ..., features), got shape {x}")
    if out_features <= 0:
        raise ShapeError(f"linear: out_features must be positive, got {out_features}")
    r = len(x)
    fin = x[-1]
    nv = r + 1  # leading.., o (r-1) | i (r)
    lead = tuple(var(nv, d) for d in range(r - 1))
    inputs = [InputDesc(DATA, x, lead + (var(nv, r),)),
              InputDesc(WEIGHT, (out_features, fin), (var(nv, r - 1), var(nv, r)))]
    if bias:
        inputs.append(InputDesc(WEIGHT, (out_features,), (var(nv, r - 1),), bias=True))
    return OpDesc(extents=x[:-1] + (out_features, fin), out_rank=r, inputs=tuple(inputs),
                  flops_per_point=2.0, flops_per_output=1.0 if bias else 0.0, reductions=("i",), additive=(r,))


def softmax(x: tuple[int, ...]) -> OpDesc:
    """The loss op: out[.., c] = exp(in[.., c]) / Sum(k) exp(in[.., k]) over the last dimension
    of (N, C) or (N, T, C) logits; every output reads its whole row (ops_seq.softmax_loss)."""
    return ops_seq.softmax_loss(x)


def parameter(shape: tuple[int, ...]) -> OpDesc:
    """out[i] = w[i]: a trainable tensor exposed as a data tensor that any number of ops
    read (weights shared across the timesteps of an unrolled RNN).  The op owns the
    weight (role WEIGHT), so its replicas are synchronized like any other weight."""
    nv = len(shape)
    return OpDesc(extents=shape, out_rank=nv, inputs=(InputDesc(WEIGHT, shape, identity_exprs(nv, nv)),))


def matmul(a: tuple[int, ...], b: tuple[int, ...], transpose_a: bool = False, transpose_b: bool = False) -> OpDesc:
    """out[.., m, n] = Sum(k) a[.., m, k] * b[.., k, n], both operands data tensors, with
    optional transposes and leading batch dimensions (ops_seq.matmul)."""
    return ops_seq.matmul(a, b, transpose_a, transpose_b)


def add(a: tuple[int, ...], b: tuple[int, ...]) -> OpDesc:
    """a + b: equal shapes (relu's map per input), or b a trailing part of a's shape,
    broadcast over a's leading dimensions (ops_seq.add)."""
    return elementwise([a, b], "add") if a == b else ops_seq.add(a, b)


def lstm_cell(shapes: Sequence[tuple[int, ...]]) -> OpDesc:
    """c[b, h] = sigmoid(f) * c_prev + sigmoid(i) * tanh(g), inputs (i, f, g, c_prev) all (B, H)."""
    if len(shapes) != 4:
        raise ShapeError(f"lstm_cell takes 4 inputs (i, f, g, c_prev), got {len(shapes)}")
    desc = elementwise(shapes, "lstm_cell")
    return replace(desc, flops_per_output=10.0)   # 3 nonlinearities + 3 multiply/adds, roughly


def lstm_hidden(shapes: Sequence[tuple[int, ...]]) -> OpDesc:
    """h[b, j] = sigmoid(o) * tanh(c), inputs (o, c) both (B, H)."""
    if len(shapes) != 2:
        raise ShapeError(f"lstm_hidden takes 2 inputs (o, c), got {len(shapes)}")
    desc = elementwise(shapes, "lstm_hidden")
    return replace(desc, flops_per_output=5.0)


# Op kinds known to the graph builder; used for validation and messages.
KINDS: dict[str, Callable[..., OpDesc]] = {
    "input": input_op, "conv2d": conv2d, "pool2d": pool2d, "relu": elementwise, "add": elementwise,
    "batchnorm2d": batchnorm2d, "group_norm": group_norm, "concat": concat, "flatten": flatten, "linear": linear, "softmax": softmax,
    "parameter": parameter, "matmul": matmul, "lstm_cell": lstm_cell, "lstm_hidden": lstm_hidden,
    **{kind: activation for kind in ACTIVATION_FLOPS}, "dropout": dropout,
    "layer_norm": ops_seq.layer_norm, "rms_norm": ops_seq.rms_norm, "embedding": ops_seq.embedding, "softmax_dim": ops_seq.softmax_dim,
    "reshape": ops_seq.reshape, "permute": ops_seq.permute, "select": ops_seq.select, "rotary": ops_seq.rotary,
    "mul": ops_bcast.mul, "broadcast_add": ops_bcast.broadcast_add, "expand": ops_bcast.expand,
    "slice": ops_bcast.slice_, "stochastic_depth": ops_bcast.stochastic_depth,
    "upsample_nearest": ops_bcast.upsample_nearest, "adaptive_avg_pool2d": ops_bcast.adaptive_avg_pool2d,
    "upsample_bilinear": ops_bcast.upsample_bilinear,
}


def _check_op_table() -> None:
    """The C op table (csrc/ops.def) and these builders name the same op kinds (plus
    "custom", the described ops of :mod:`shardwise.ops.describe`): a kind added on one side
    alone fails at import, not in the middle of a step."""
    from shardwise import _core

    ours = set(KINDS) | {"custom"}
    theirs = set(_core.OP_KINDS)
    if ours != theirs:
        raise ImportError(f"the op table (csrc/ops.def) and ops.KINDS disagree: only in C {sorted(theirs - ours)}, "
                          f"only in Python {sorted(ours - theirs)}")


_check_op_table()
