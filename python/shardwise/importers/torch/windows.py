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

The graph has no constant op, so the constants these need (zeros for padding, q's scale
(C / H) ** -0.5, the mask's 0 and -100) are ``clip(t, v, v)`` of a one-element slice of a
tensor of the graph: exactly ``v`` whatever ``t`` holds, with no gradient into ``t`` (clip
passes none at its bounds).  The shifted-window mask (1, nW, 1, T, T) is -100 where query and
key lie in different regions of the shifted image (torchvision's values), built as
``100 * (F @ F^T) - 100`` from the one-hot region label F (1, nW, T, 4) of every token.

Ranks stay within the runtime's 5: (B, Hp, Wp, C) windows are partitioned through (B, nWr,
w, nWc, w*C).  Shapes: B samples, H x W the feature map (Hp x Wp padded), C channels, nH heads,
Dh = C / nH, w the window, nW = nWr * nWc windows, T = w * w tokens per window.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from shardwise.graph import Graph, Tensor
from shardwise.importers.torch.call import Attr, Call, TorchOp, record_weights, is_torch_tensor, _show

MASK_VALUE = -100.0
"""torchvision's value for query, key pairs of different regions of a shifted window."""

# per graph: the one-element source of constants and the constants made from it, the masks
_constants: "weakref.WeakKeyDictionary[Graph, dict[Any, Tensor]]" = weakref.WeakKeyDictionary()


# ----------------------------------------------------------------------------- building blocks
def constant(g: Graph, source: Tensor, value: float, name: str) -> Tensor:
    """A (1, 1, 1) tensor holding ``value``: ``clip`` of a one-element slice of ``source`` (a
    tensor with a leading dimension of 1, rank >= 3) to [value, value].  Made once per graph
    and value."""
    cache = _constants.setdefault(g, {})
    if "unit" not in cache:
        t = source
        for d in range(1, len(t.shape)):
            t = g.slice(t, d, 0, 1, name=f"{name}.unit{d}") if t.shape[d] > 1 else t
        cache["unit"] = g.reshape(t, (1, 1, 1), name=f"{name}.unit") if t.shape != (1, 1, 1) else t
    key = ("value", float(np.float32(value)))
    if key not in cache:
        cache[key] = g.clip(cache["unit"], value, value, name=f"{name}.const{len(cache)}")
    return cache[key]


def roll(g: Graph, x: Tensor, shift: int, dim: int, name: str) -> Tensor:
    """``torch.roll(x, shift, dim)``: y[i] = x[(i - shift) mod n] along ``dim``, the last
    ``shift`` entries (mod n) moved to the front: ``concat(x[n - s:], x[:n - s])``."""
    n = x.shape[dim]
    s = shift % n
    if s == 0:
        return x
    tail = g.slice(x, dim, n - s, n, name=f"{name}.tail")
    head = g.slice(x, dim, 0, n - s, name=f"{name}.head")
    return g.concat([tail, head], axis=dim, name=name)


def pad_end(g: Graph, x: Tensor, dim: int, pad: int, name: str) -> Tensor:
    """``x`` with ``pad`` zeros appended along ``dim`` (``F.pad``'s trailing zero padding): the
    zeros are ``clip(x[.., 0:1, ..], 0, 0)`` expanded to the block, then concatenated."""
    if pad == 0:
        return x
    zeros = g.clip(g.slice(x, dim, 0, 1, name=f"{name}.first") if x.shape[dim] > 1 else x, 0.0, 0.0,
                   name=f"{name}.zero")
    if pad > 1:
        shape = list(x.shape)
        shape[dim] = pad
        zeros = g.expand(zeros, tuple(shape), name=f"{name}.zeros")
    return g.concat([x, zeros], axis=dim, name=name)


def reverse(g: Graph, x: Tensor, dim: int, name: str) -> Tensor:
    """``x`` flipped along ``dim`` (``torch.flip``): one-entry slices concatenated backwards."""
    n = x.shape[dim]
    if n == 1:
        return x
    parts = [g.slice(x, dim, i, i + 1, name=f"{name}.{i}") for i in range(n - 1, -1, -1)]
    return g.concat(parts, axis=dim, name=name)


def toeplitz_rows(g: Graph, x: Tensor, dim: int, w: int, name: str) -> Tensor:
    """From ``x`` with 2w - 1 entries along ``dim``, the w * w entries x[i - j + w - 1] in the
    order (i, j) (row-major) along ``dim``: x reversed, then for each i its w entries from
    w - 1 - i (reversed index w - 1 - i + j is x's i - j + w - 1)."""
    rev = reverse(g, x, dim, f"{name}.rev")
    rows = [g.slice(rev, dim, w - 1 - i, 2 * w - 1 - i, name=f"{name}.q{i}") for i in range(w)]
    return g.concat(rows, axis=dim, name=name) if len(rows) > 1 else rows[0]


def relative_position_index(wh: int, ww: int) -> np.ndarray:
    """torchvision's index of the relative position table for a wh x ww window, (T * T,):
    (hi - hj + wh - 1) * (2 ww - 1) + (wi - wj + ww - 1) for query (hi, wi), key (hj, wj)."""
    hi, wi = np.divmod(np.arange(wh * ww), ww)
    return ((hi[:, None] - hi[None, :] + wh - 1) * (2 * ww - 1) + (wi[:, None] - wi[None, :] + ww - 1)).reshape(-1)


def relative_position_bias(g: Graph, table: Tensor, wh: int, ww: int, name: str) -> Tensor:
    """The table (L_h * L_w, nH) gathered by :func:`relative_position_index` as (1, nH, T, T)."""
    lw, heads = 2 * ww - 1, table.shape[1]
    t = g.reshape(table, (1, (2 * wh - 1) * lw * heads), name=f"{name}.table.flat")
    t = g.reshape(t, (1, 2 * wh - 1, lw * heads), name=f"{name}.table")         # (1, a, (b, h))
    t = toeplitz_rows(g, t, 1, wh, f"{name}.rows")                               # (1, (hi, hj), (b, h))
    t = g.reshape(t, (1, wh, wh, lw, heads), name=f"{name}.split")               # (1, hi, hj, b, h)
    rev = reverse(g, t, 3, f"{name}.cols.rev")
    cols = [g.slice(rev, 3, ww - 1 - i, 2 * ww - 1 - i, name=f"{name}.cols.q{i}") for i in range(ww)]
    t = g.concat(cols, axis=2, name=f"{name}.cols") if ww > 1 else cols[0]       # (1, hi, (wi, hj), wj, h)
    t = g.permute(t, (0, 4, 1, 2, 3), name=f"{name}.heads")                      # (1, h, hi, (wi, hj), wj)
    t = g.reshape(t, (1, heads, wh * ww * wh * ww), name=f"{name}.flat")         # row-major (hi, wi, hj, wj)
    return g.reshape(t, (1, heads, wh * ww, wh * ww), name=name)                 # (1, h, T, T)


def shifted_window_mask(g: Graph, source: Tensor, hp: int, wp: int, window: tuple[int, int], shift: tuple[int, int],
                        name: str) -> Tensor:
    """torchvision's mask of shifted windows (1, nW, 1, T, T): 0 where query and key lie in one
    region of the shifted, padded hp x wp map, -100 elsewhere.  Along rows, the last ``shift``
    rows are one region and the rest another (the last window row holds both; the others one):
    a token's label per axis is one-hot (1, 0) in the last ``shift`` rows (columns), else (0, 1),
    its region's label F the product of both (4 entries), and E = F @ F^T is 1 for pairs of one
    region: the mask is 100 E - 100.  Made once per graph and geometry."""
    (wh, ww), (sh, sw) = window, shift
    cache = _constants.setdefault(g, {})
    key = ("mask", hp, wp, wh, ww, sh, sw)
    if key in cache:
        return cache[key]
    c0, c1 = constant(g, source, 0.0, name), constant(g, source, 1.0, name)
    c01 = g.concat([c0, c1], axis=2, name=f"{name}.mask.c01")             # (1, 1, 2): not in the last rows
    c10 = g.concat([c1, c0], axis=2, name=f"{name}.mask.c10")             # (1, 1, 2): in the last rows

    def labels(n: int, s: int, axis: str) -> Tensor:                       # (1, n, 2)
        rest = g.expand(c01, (1, n - s, 2), name=f"{name}.mask.{axis}.rest")
        if s == 0:
            return rest
        last = g.expand(c10, (1, s, 2), name=f"{name}.mask.{axis}.last") if s > 1 else c10
        return g.concat([rest, last], axis=1, name=f"{name}.mask.{axis}")

    nwr, nwc, t = hp // wh, wp // ww, wh * ww
    rows = g.reshape(g.reshape(labels(hp, sh, "rows"), (1, hp * 2), name=f"{name}.mask.rows.flat"),
                     (1, nwr, 1, wh * 2, 1), name=f"{name}.mask.rows5")    # (1, wr, ., (hi, kr), .)
    cols = g.reshape(g.reshape(labels(wp, sw, "cols"), (1, wp * 2), name=f"{name}.mask.cols.flat"),
                     (1, 1, nwc, 1, ww * 2), name=f"{name}.mask.cols5")    # (1, ., wc, ., (wi, kc))
    f = g.mul(rows, cols, name=f"{name}.mask.outer")                       # (1, wr, wc, (hi, kr), (wi, kc))
    f = g.reshape(f, (1, nwr * nwc * wh * 2 * ww * 2), name=f"{name}.mask.flat")
    f = g.reshape(f, (1, nwr * nwc * wh, 2, ww, 2), name=f"{name}.mask.split")   # (1, (w, hi), kr, wi, kc)
    f = g.permute(f, (0, 1, 3, 2, 4), name=f"{name}.mask.order")           # (1, (w, hi), wi, kr, kc)
    f = g.reshape(f, (1, nwr * nwc * t * 4), name=f"{name}.mask.flat2")
    f = g.reshape(f, (1, nwr * nwc, t, 4), name=f"{name}.mask.labels")     # (1, nW, T, 4): one-hot region
    same = g.matmul(f, f, transpose_b=True, name=f"{name}.mask.same")      # (1, nW, T, T): 1 in one region
    mask = g.add(g.mul(same, constant(g, source, -MASK_VALUE, name), name=f"{name}.mask.scaled"),
                 constant(g, source, MASK_VALUE, name), name=f"{name}.mask.values")
    cache[key] = g.reshape(mask, (1, nwr * nwc, 1, t, t), name=f"{name}.mask")
    return cache[key]


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
