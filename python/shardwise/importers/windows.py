"""Window compositions of graph ops that torchvision's Swin Transformer and MaxViT need, shared
by both importers (:mod:`shardwise.importers.torch.windows`, :mod:`shardwise.importers.torch.maxvit`,
:mod:`shardwise.importers.onnx.windows`): ``torch.roll`` (slices and a concat), zero padding, the
relative position bias (a learned table gathered by a constant index, built of slices of the table
reversed), and the shifted-window mask.

The graph has no constant op, so the constants these need (zeros for padding, the mask's 0 and
-100) are ``clip(t, v, v)`` of a one-element slice of a tensor of the graph: exactly ``v``
whatever ``t`` holds, with no gradient into ``t`` (clip passes none at its bounds).  The
shifted-window mask (1, nW, 1, T, T) is -100 where query and key lie in different regions of the
shifted image (torchvision's values), built as ``100 * (F @ F^T) - 100`` from the one-hot region
label F (1, nW, T, 4) of every token.  Shapes: H x W the feature map (Hp x Wp padded), nH heads,
w the window, nW windows, T = w * w tokens per window.  Nothing here imports torch or onnx.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from shardwise.graph import Graph, Tensor

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


def pad_zeros(g: Graph, x: Tensor, dim: int, before: int, after: int, name: str) -> Tensor:
    """``x`` with ``before`` zeros put in front of it and ``after`` zeros appended along ``dim``
    (ONNX's ``Pad`` in constant mode with value 0): :func:`pad_end`, and a block of zeros made
    the same way concatenated in front."""
    y = pad_end(g, x, dim, after, f"{name}.end" if before else name)
    if before == 0:
        return y
    zeros = g.clip(g.slice(x, dim, 0, 1, name=f"{name}.first") if x.shape[dim] > 1 else x, 0.0, 0.0,
                   name=f"{name}.zero")
    if before > 1:
        shape = list(x.shape)
        shape[dim] = before
        zeros = g.expand(zeros, tuple(shape), name=f"{name}.zeros")
    return g.concat([zeros, y], axis=dim, name=name)


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


def shifted_window_mask_values(hp: int, wp: int, window: tuple[int, int], shift: tuple[int, int]) -> np.ndarray:
    """torchvision's shifted-window mask as numbers, (nW, T, T): 0 where query and key lie in one
    region of the shifted hp x wp map, -100 elsewhere (what :func:`shifted_window_mask` builds)."""
    (wh, ww), (sh, sw) = window, shift
    rows = np.where(np.arange(hp) >= hp - sh, 1, 0) if sh else np.zeros(hp, int)
    cols = np.where(np.arange(wp) >= wp - sw, 1, 0) if sw else np.zeros(wp, int)
    region = rows[:, None] * 2 + cols[None, :]                                  # (hp, wp)
    region = region.reshape(hp // wh, wh, wp // ww, ww).transpose(0, 2, 1, 3).reshape(-1, wh * ww)
    return np.where(region[:, :, None] == region[:, None, :], 0.0, MASK_VALUE)
