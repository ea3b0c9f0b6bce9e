"""torchvision's MaxViT modules as compositions of graph ops: the block (window) and grid
partitions of its multi-axis attention, and its attention with a relative position bias.

* ``WindowPartition(x, p)``: (B, C, H, W) -> (B, (H/p)(W/p), p*p, C), the windows in row-major
  order, their tokens too.  Ranks stay within the runtime's 5: a permute to (B, H, W, C), then
  (B, H/p, p, W/p, p*C) -> permute -> (B, H/p, W/p, p, p*C) -> reshapes.
* ``WindowDepartition(x, p, hp, wp)``: its inverse, back to (B, C, H, W).
* ``SwapAxes`` (``torch.swapaxes``): a ``permute``; the grid partition is a window partition
  with p = H / partition_size whose two middle axes are swapped.
* ``RelativePositionalMultiHeadAttention`` on (B, G, P, D): one ``linear`` for q, k, v (slices
  of it), k times ``feat_dim ** -0.5`` (a ``mul`` by a constant), ``matmul``, + the relative
  position bias (the table gathered as Swin's, :func:`.windows.relative_position_bias`),
  ``softmax_dim``, ``matmul``, and the ``merge`` linear.

Shapes: B samples, C channels (D in the attention), H x W the feature map, p the partition,
G groups (windows), P = p * p tokens per group, nH heads of Dh features.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.graph import Tensor
from shardwise.importers.torch.call import REQUIRED, Call, TorchOp, _dim_attr, record_weights
from shardwise.importers.windows import constant, relative_position_bias, relative_position_index


def _positive(c: Call, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise c.error(f"{what}={value!r} is not supported (a positive int)")
    return value


def _window_partition(c: Call) -> Tensor:
    """WindowPartition: (B, C, H, W) -> (B, (H/p)*(W/p), p*p, C)."""
    g, name = c.graph, c.name
    x = c.tensor(0, rank=4)
    p = _positive(c, c.inputs[1], "p")
    b, ch, h, w = x.shape
    if h % p or w % p:
        raise c.error(f"a {h}x{w} map does not split into {p}x{p} partitions")
    x = g.permute(x, (0, 2, 3, 1), name=f"{name}.hwc")                            # (B, H, W, C)
    x = g.reshape(x, (b, h, w * ch), name=f"{name}.rows")
    x = g.reshape(x, (b, h // p, p, w // p, p * ch), name=f"{name}.grid")           # (B, H/p, p, W/p, p*C)
    x = g.permute(x, (0, 1, 3, 2, 4), name=f"{name}.windows")                      # (B, H/p, W/p, p, p*C)
    x = g.reshape(x, (b, h * w * ch), name=f"{name}.flat")
    return g.reshape(x, (b, (h // p) * (w // p), p * p, ch), name=name)


def _window_departition(c: Call) -> Tensor:
    """WindowDepartition: (B, hp*wp, p*p, C) -> (B, C, hp*p, wp*p)."""
    g, name = c.graph, c.name
    x = c.tensor(0, rank=4)
    p, hp, wp = (_positive(c, v, n) for v, n in zip(c.inputs[1:], ("p", "h_partitions", "w_partitions")))
    b, groups, pp, ch = x.shape
    if groups != hp * wp or pp != p * p:
        raise c.error(f"an input of shape {x.shape} is not {hp}x{wp} partitions of {p}x{p}")
    x = g.reshape(x, (b, groups * pp * ch), name=f"{name}.flat")
    x = g.reshape(x, (b, hp, wp, p, p * ch), name=f"{name}.windows")               # (B, hp, wp, p, p*C)
    x = g.permute(x, (0, 1, 3, 2, 4), name=f"{name}.grid")                         # (B, hp, p, wp, p*C)
    x = g.reshape(x, (b, hp * p, wp * p * ch), name=f"{name}.rows")
    x = g.reshape(x, (b, hp * p, wp * p, ch), name=f"{name}.hwc")
    return g.permute(x, (0, 3, 1, 2), name=name)


def _swapaxes(c: Call) -> Tensor:
    """``torch.swapaxes(x, a, b)`` (``swapdims``): a ``permute``, never of the batch dimension."""
    x = c.tensor(0)
    r = len(x.shape)
    a, b = _dim_attr(c, "axis0", r), _dim_attr(c, "axis1", r)
    if a == b:
        return x
    if 0 in (a, b):
        raise c.error(f"swapping the batch dimension of {x.shape} is not supported")
    perm = list(range(r))
    perm[a], perm[b] = b, a
    return c.graph.permute(x, perm, name=c.name)


def _relative_attention(c: Call) -> Tensor:
    """RelativePositionalMultiHeadAttention on (B, G, P, D), P = size * size tokens."""
    g, m, name = c.graph, c.module, c.name
    x = c.tensor(0, rank=4)
    b, groups, tokens, d = x.shape
    heads, dh, size = m.n_heads, m.head_dim, m.size
    if tokens != size * size or m.max_seq_len != tokens or heads * dh != d:
        raise c.error(f"an input of shape {x.shape} for {heads} heads of {dh} over {size}x{size} tokens")
    index = m.relative_position_index.detach().cpu().numpy().reshape(-1)
    if not np.array_equal(index, relative_position_index(size, size)):
        raise c.error("relative_position_index is not torchvision's; only that index is supported")
    table = m.relative_position_bias_table
    if tuple(table.shape) != ((2 * size - 1) ** 2, heads) or not table.requires_grad:
        raise c.error(f"relative_position_bias_table of shape {tuple(table.shape)} is not supported")
    for lin, what in ((m.to_qkv, "to_qkv"), (m.merge, "merge")):
        if lin.bias is None:
            raise c.error(f"{what} without a bias is not supported")

    qkv = g.linear(x, 3 * d, name=f"{name}.to_qkv")                                 # (B, G, P, 3D)
    q, k, v = (g.permute(g.reshape(g.slice(qkv, 3, i * d, (i + 1) * d, name=f"{name}.{n}"),
                                   (b, groups, tokens, heads, dh), name=f"{name}.{n}.heads"),
                         (0, 1, 3, 2, 4), name=f"{name}.{n}.bhtd")                    # (B, G, nH, P, Dh)
               for i, n in enumerate("qkv"))
    table_op = g.parameter(tuple(table.shape), name=f"{name}.relative_position_bias_table")
    bias = relative_position_bias(g, table_op, size, size, f"{name}.relative_position_bias")   # (1, nH, P, P)
    k = g.mul(k, constant(g, bias, float(m.scale_factor), name), name=f"{name}.k.scaled")
    scores = g.matmul(q, k, transpose_b=True, name=f"{name}.scores")                # (B, G, nH, P, P)
    probs = g.softmax_dim(g.add(scores, bias, name=f"{name}.biased"), -1, name=f"{name}.probs")
    o = g.matmul(probs, v, name=f"{name}.context")                                  # (B, G, nH, P, Dh)
    o = g.permute(o, (0, 1, 3, 2, 4), name=f"{name}.context.bthd")                  # (B, G, P, nH, Dh)
    o = g.reshape(o, (b, groups, tokens, d), name=f"{name}.context.tokens")
    y = g.linear(o, d, name=f"{name}.merge")
    for op, lin in ((f"{name}.to_qkv", m.to_qkv), (f"{name}.merge", m.merge)):
        record_weights(c.weights, op, {"weight": lin.weight, "bias": lin.bias}, c.where)
    record_weights(c.weights, f"{name}.relative_position_bias_table", {"weight": table}, c.where)
    # the parameter op's weight under the module's state_dict name (what get_weights and set_weights use)
    g.weight_names[f"{name}.relative_position_bias_table.weight"] = f"{name}.relative_position_bias_table"
    return y


_MAXVIT = "torchvision.models.maxvit."

TORCH_MAXVIT_OPS: tuple[TorchOp, ...] = (
    TorchOp("window_partition", _window_partition, inputs=2, modules=(_MAXVIT + "WindowPartition",),
            op="`permute`, `reshape`", doc="MaxViT's block partition of `(B, C, H, W)` into `p x p` windows"),
    TorchOp("window_departition", _window_departition, inputs=4, modules=(_MAXVIT + "WindowDepartition",),
            op="`reshape`, `permute`", doc="its inverse, back to `(B, C, H, W)`"),
    TorchOp("swapaxes", _swapaxes, params=(("axis0", REQUIRED), ("axis1", REQUIRED)),
            functions=("torch.swapaxes", "torch.swapdims"), methods=("swapaxes", "swapdims"),
            op="`permute`", doc="two dimensions swapped (as `transpose`), the batch dimension stays first"),
    TorchOp("relative_attention", _relative_attention,
            modules=(_MAXVIT + "RelativePositionalMultiHeadAttention",),
            op="`linear`, `matmul`, `softmax_dim`, `slice`, `concat`, `reshape`, `permute`, `mul`, `add`, `clip`",
            doc="MaxViT's attention with a relative position bias (torchvision's index, checked; the table gathered "
                "as Swin's), an exact composition; weights under the module's `state_dict` names"),
)
"""MaxViT's modules, part of :data:`~shardwise.importers.torch.ops.TORCH_OPS`."""
