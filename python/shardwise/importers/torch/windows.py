"""Window attention of torchvision's Swin Transformer as compositions of graph ops.

torchvision marks three functions of ``torchvision.models.swin_transformer`` with
``torch.fx.wrap``, so a trace shows each as one call; :func:`shardwise.from_torch` rebuilds
each from ops the planner sees one by one (``slice``, ``concat``, ``reshape``, ``permute``,
``linear``, ``matmul``, ``softmax_dim``, ``mul``, ``broadcast_add``, ``expand``, ``clip``):

* ``_get_relative_position_bias(table, index, window_size)``: the learned table (L*L, H), L =
  2 w - 1, gathered by the constant index (w*w * w*w) of every query, key pair to (1, H, T, T),
  T = w*w tokens.  The index of query (hi, wi) and key (hj, wj) is (hi - hj + w - 1) * L +
  (wi - wj + w - 1): per axis a Toeplitz pattern, which slices build: the table's axis reversed
  (L one-row slices, a concat), then for query row hi the w rows starting at w - 1 - hi.
* ``shifted_window_attention``: zero padding to whole windows (a concat with zeros),
  ``torch.roll`` (two slices and a concat per axis), the window partition (reshapes and a
  permute), q, k, v (one linear, slices), scores + bias + the shifted-window mask,
  ``softmax_dim``, the projection, and back.
* ``_patch_merging_pad``: padding to even sizes and the four strided slices
  ``x[..., 0::2, 0::2, :]`` ... (slice ops with step 2), concatenated.

The building blocks (roll, zero padding, the relative position bias, the shifted-window mask,
constants as ``clip`` of a tensor of the graph) are :mod:`shardwise.importers.windows`'s, which
the ONNX importer shares; q's scale (C / H) ** -0.5 is such a constant.

Ranks stay within the runtime's 5: (B, Hp, Wp, C) windows are partitioned through (B, nWr,
w, nWc, w*C).  Shapes: B samples, H x W the feature map (Hp x Wp padded), C channels, nH heads,
Dh = C / nH, w the window, nW = nWr * nWc windows, T = w * w tokens per window.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.graph import Tensor
from shardwise.importers.windows import (constant, pad_end, relative_position_bias, relative_position_index, roll,
                                         shifted_window_mask)
from shardwise.importers.torch.call import Attr, Call, TorchOp, record_weights, is_torch_tensor, _show

# ----------------------------------------------------------------------------- converters
def _ints(c: Call, value: Any, what: str, n: int = 2) -> tuple[int, ...]:
    if (not isinstance(value, (tuple, list)) or len(value) != n
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
        raise c.error(f"{what}={value!r} is not supported ({n} non-negative ints)")
    return tuple(int(v) for v in value)


def _get_relative_position_bias(c: Call) -> Tensor:
    """``_get_relative_position_bias(table, index, window_size)``: the table, a parameter op,
    gathered by torchvision's index (checked: another index is refused) as (1, nH, T, T)."""
    table, index = c.inputs[0], c.inputs[1]
    wh, ww = _ints(c, c.attrs["window_size"], "window_size")
    if min(wh, ww) < 1:
        raise c.error(f"window_size={c.attrs['window_size']!r} is not supported (positive sizes)")
    if not isinstance(table, Attr) or tuple(table.value.shape)[:1] != ((2 * wh - 1) * (2 * ww - 1),) \
            or table.value.dim() != 2:
        raise c.error(f"the relative position table must be a parameter of the model of shape "
                      f"({(2 * wh - 1) * (2 * ww - 1)}, heads), got {_show(table)}")
    if isinstance(index, Attr):
        index = index.value
    want = relative_position_index(wh, ww)
    if not is_torch_tensor(index) or tuple(index.shape) != want.shape \
            or not np.array_equal(index.detach().cpu().numpy(), want):
        raise c.error(f"the relative position index {_show(index)} is not torchvision's for a {wh}x{ww} window; "
                      f"only that index is supported")
    if c.parameter_op is None or not getattr(table.value, "requires_grad", False):
        raise c.error(f"the relative position table {table.target!r} must be a trainable parameter")
    return relative_position_bias(c.graph, c.parameter_op(table, c.where), wh, ww, c.name)


def _linear_weights(c: Call, weight: Any, bias: Any, what: str) -> tuple[str, Any, Any]:
    """The op name (the weight's owner: ``features.1.0.attn.qkv``) and the torch tensors of a
    linear layer whose weight and bias are passed to the function."""
    w = c.parameter(weight, f"{what}_weight", rank=2)
    b = None if bias is None else c.parameter(bias, f"{what}_bias", rank=1)
    name = weight.target[:-len(".weight")] if weight.target.endswith(".weight") else weight.target
    if name in c.graph:
        raise c.error(f"the {what} weight {weight.target!r} is read by two attention calls; shared weights are "
                      f"not supported")
    return name, w, b


def _dropout(c: Call, x: Tensor, p: Any, what: str, name: str) -> Tensor:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise c.error(f"{what}={p!r} is not supported (a number in [0, 1))")
    return c.graph.dropout(x, float(p), name=name) if p > 0 and c.attrs["training"] else x


def _shifted_window_attention(c: Call) -> Tensor:
    """torchvision's ``shifted_window_attention`` (Swin Transformer V1) on (B, H, W, C)."""
    g, a, base = c.graph, c.attrs, c.name
    x = c.tensor(0, rank=4)
    bias = c.tensor(3, rank=4)
    if a["logit_scale"] is not None:
        raise c.error("cosine attention (logit_scale, Swin Transformer V2) is not supported")
    (wh, ww), (sh, sw) = _ints(c, a["window_size"], "window_size"), _ints(c, a["shift_size"], "shift_size")
    heads = a["num_heads"]
    b, h, w, ch = x.shape
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or ch % heads:
        raise c.error(f"num_heads={heads!r} does not divide the {ch} channels")
    t, dh = wh * ww, ch // heads
    if bias.shape != (1, heads, t, t):
        raise c.error(f"the relative position bias has shape {bias.shape}; expected {(1, heads, t, t)}")
    qkv_name, qkv_w, qkv_b = _linear_weights(c, c.inputs[1], a["qkv_bias"], "qkv")
    proj_name, proj_w, proj_b = _linear_weights(c, c.inputs[2], a["proj_bias"], "proj")
    if tuple(qkv_w.shape) != (3 * ch, ch) or tuple(proj_w.shape) != (ch, ch):
        raise c.error(f"qkv and proj weights of shapes {tuple(qkv_w.shape)}, {tuple(proj_w.shape)} for {ch} channels")

    # pad to whole windows; no shift along an axis that one window covers (torchvision's rule)
    x = pad_end(g, x, 2, (ww - w % ww) % ww, f"{base}.pad_w")
    x = pad_end(g, x, 1, (wh - h % wh) % wh, f"{base}.pad_h")
    hp, wp = x.shape[1], x.shape[2]
    sh, sw = (0 if wh >= hp else sh), (0 if ww >= wp else sw)
    shifted = sh + sw > 0
    x = roll(g, roll(g, x, -sh, 1, f"{base}.roll_h"), -sw, 2, f"{base}.roll_w")
    nwr, nwc = hp // wh, wp // ww
    nw = nwr * nwc

    # windows: (B, Hp, Wp, C) -> (B, nWr, wh, nWc, ww*C) -> (B, nWr, nWc, wh, ww*C) -> (B, nW*T, C)
    x = g.reshape(x, (b, hp, wp * ch), name=f"{base}.rows")
    x = g.reshape(x, (b, nwr, wh, nwc, ww * ch), name=f"{base}.grid")
    x = g.permute(x, (0, 1, 3, 2, 4), name=f"{base}.windows")
    x = g.reshape(x, (b, nw * t * ch), name=f"{base}.flat")
    x = g.reshape(x, (b, nw * t, ch), name=f"{base}.tokens")

    qkv = g.linear(x, 3 * ch, bias=qkv_b is not None, name=qkv_name)                    # (B, nW*T, 3C)
    record_weights(c.weights, qkv_name, {k: v for k, v in (("weight", qkv_w), ("bias", qkv_b)) if v is not None},
                   c.where)
    qkv = g.reshape(qkv, (b, nw, t, 3 * ch), name=f"{base}.qkv4")
    q, k, v = (g.permute(g.reshape(g.slice(qkv, 3, i * ch, (i + 1) * ch, name=f"{base}.{n}"),
                                   (b, nw, t, heads, dh), name=f"{base}.{n}.heads"),
                         (0, 1, 3, 2, 4), name=f"{base}.{n}.bhtd")                      # (B, nW, nH, T, Dh)
               for i, n in enumerate("qkv"))
    q = g.mul(q, constant(g, bias, dh ** -0.5, base), name=f"{base}.q.scaled")
    scores = g.matmul(q, k, transpose_b=True, name=f"{base}.scores")                    # (B, nW, nH, T, T)
    scores = g.add(scores, bias, name=f"{base}.biased")
    if shifted:
        mask = shifted_window_mask(g, bias, hp, wp, (wh, ww), (sh, sw), base)           # (1, nW, 1, T, T)
        scores = g.add(scores, mask, name=f"{base}.masked")
    probs = g.softmax_dim(scores, -1, name=f"{base}.probs")
    probs = _dropout(c, probs, a["attention_dropout"], "attention_dropout", f"{base}.attn_drop")
    o = g.matmul(probs, v, name=f"{base}.context")                                      # (B, nW, nH, T, Dh)
    o = g.reshape(g.permute(o, (0, 1, 3, 2, 4), name=f"{base}.context.bthd"), (b, nw * t, ch),
                  name=f"{base}.context.tokens")
    o = g.linear(o, ch, bias=proj_b is not None, name=proj_name)
    record_weights(c.weights, proj_name, {k: v for k, v in (("weight", proj_w), ("bias", proj_b)) if v is not None},
                   c.where)
    o = _dropout(c, o, a["dropout"], "dropout", f"{base}.drop")

    # windows back: (B, nW*T, C) -> (B, nWr, nWc, wh, ww*C) -> (B, nWr, wh, nWc, ww*C) -> (B, Hp, Wp, C)
    o = g.reshape(o, (b, nw * t * ch), name=f"{base}.out.flat")
    o = g.reshape(o, (b, nwr, nwc, wh, ww * ch), name=f"{base}.out.windows")
    o = g.permute(o, (0, 1, 3, 2, 4), name=f"{base}.out.grid")
    o = g.reshape(o, (b, hp, wp * ch), name=f"{base}.out.rows")
    o = g.reshape(o, (b, hp, wp, ch), name=f"{base}.out.map")
    o = roll(g, roll(g, o, sh, 1, f"{base}.unroll_h"), sw, 2, f"{base}.unroll_w")
    if hp != h:
        o = g.slice(o, 1, 0, h, name=f"{base}.unpad_h")
    if wp != w:
        o = g.slice(o, 2, 0, w, name=f"{base}.unpad_w")
    return o


def _patch_merging_pad(c: Call) -> Tensor:
    """``_patch_merging_pad(x)`` of (B, H, W, C): padded to even H and W, then
    ``cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)``."""
    g, base = c.graph, c.name
    x = c.tensor(0, rank=4)
    x = pad_end(g, pad_end(g, x, 2, x.shape[2] % 2, f"{base}.pad_w"), 1, x.shape[1] % 2, f"{base}.pad_h")
    hp, wp = x.shape[1], x.shape[2]
    parts = [g.slice(g.slice(x, 1, dh, hp, 2, name=f"{base}.{dh}{dw}.rows"), 2, dw, wp, 2, name=f"{base}.{dh}{dw}")
             for dh, dw in ((0, 0), (1, 0), (0, 1), (1, 1))]
    return g.concat(parts, axis=3, name=base)


_SWIN = "torchvision.models.swin_transformer."

TORCH_WINDOW_OPS: tuple[TorchOp, ...] = (
    TorchOp("relative_position_bias", _get_relative_position_bias, inputs=2, params=(("window_size", None),),
            functions=(_SWIN + "_get_relative_position_bias",),
            op="`parameter`, `slice`, `concat`, `reshape`, `permute`",
            doc="torchvision's relative position index (checked): the table's rows gathered by slices of the table "
                "reversed (a Toeplitz pattern per axis), an exact composition"),
    TorchOp("window_attention", _shifted_window_attention, inputs=4,
            params=(("window_size", None), ("num_heads", None), ("shift_size", None), ("attention_dropout", 0.0),
                    ("dropout", 0.0), ("qkv_bias", None), ("proj_bias", None), ("logit_scale", None),
                    ("training", True)),
            functions=(_SWIN + "shifted_window_attention",),
            op="`linear`, `matmul`, `softmax_dim`, `slice`, `concat`, `reshape`, `permute`, `mul`, `add`, `clip`",
            doc="Swin Transformer V1 (no `logit_scale`): padding, `torch.roll` (slices and a concat), the window "
                "partition, the shifted-window mask (built from constants: `clip` of a parameter to one value) and "
                "attention, each an exact composition of graph ops"),
    TorchOp("patch_merging", _patch_merging_pad, functions=(_SWIN + "_patch_merging_pad",),
            op="`slice` (step 2), `concat`", doc="padding to even sizes (a concat with zeros), four strided slices"),
)
"""Swin Transformer's wrapped functions, part of :data:`~shardwise.importers.torch.ops.TORCH_OPS`."""
