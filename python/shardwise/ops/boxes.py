"""Boxes of tensors and the interval arithmetic of index expressions, in Python.

A box is a tuple of half-open ``(lo, hi)`` ranges, one per dimension.  The task
graph's buffers and copies carry boxes; :func:`input_region` gives the box of an
input read by an output box (halos included) by interval arithmetic on the op's
description.  The lowering itself runs in C (csrc/region.c does the same
arithmetic there); :func:`input_region` serves Tofu's model of partitions
(tofu_model.py) and tests that check descriptions against each other.
"""
from __future__ import annotations

from math import prod
from typing import Sequence

from shardwise.ops.desc import OpDesc

Box = tuple[tuple[int, int], ...]  # half-open [lo, hi) per dimension

def volume(box: Box | None) -> int:
    if box is None:
        return 0
    return prod(max(0, hi - lo) for lo, hi in box)


def lo_of(box: Box) -> tuple[int, ...]:
    """The box's lower corner (a view's global coordinates of its first element)."""
    return tuple(lo for lo, _ in box)


def shape_of(box: Box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in box)


def intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(al, bl), min(ah, bh)) for (al, ah), (bl, bh) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def worker_boxes(shape: Sequence[int], degrees: Sequence[int]) -> list[Box]:
    """Output box of every worker: a row-major grid over the degrees (as csrc/region.c)."""
    boxes: list[Box] = []

    def rec(d: int, acc: list[tuple[int, int]]) -> None:
        if d == len(shape):
            boxes.append(tuple(acc))
            return
        step = shape[d] // degrees[d]
        for c in range(degrees[d]):
            rec(d + 1, acc + [(c * step, (c + 1) * step)])

    rec(0, [])
    return boxes


_COMPILED: dict[tuple[int, int], tuple] = {}


def _compiled(desc: OpDesc, slot: int) -> tuple:
    """The index expressions of one input in a form cheap to evaluate: per input dimension
    (nonzero (variable, coefficient, variable divisor) triples, offset, div, mod, size).  Cached
    per description."""
    key = (id(desc), slot)
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is desc:
        return hit[1]
    inp = desc.inputs[slot]
    dims = tuple((tuple((v, c, e.vdiv(v)) for v, c in enumerate(e.coefs) if c), e.offset, e.div, e.mod, size)
                 for e, size in zip(inp.exprs, inp.shape))
    _COMPILED[key] = (desc, (dims, inp.window))
    return dims, inp.window


def expr_interval(terms: Sequence[tuple[int, int, int]], offset: int, div: int, mod: int,
                  lo_v: Sequence[int], hi_v: Sequence[int]) -> tuple[int, int]:
    """Inclusive interval of ((sum coef * (v // q) + offset) // div) % mod when each variable v
    ranges over [lo_v[v], hi_v[v]] (inclusive); ``terms`` lists the nonzero (v, coef, q)."""
    a = b = offset
    for v, c, q in terms:
        lo, hi = lo_v[v] // q, hi_v[v] // q   # floor division is monotone: the ends map to the ends
        if c > 0:
            a += c * lo
            b += c * hi
        else:
            a += c * hi
            b += c * lo
    if div != 1:
        a, b = a // div, b // div
    if mod:
        if b - a + 1 >= mod or a // mod != b // mod:
            a, b = 0, mod - 1  # wraps around: the whole period
        else:
            base = (a // mod) * mod
            a, b = a - base, b - base
    return a, b


def input_region(desc: OpDesc, slot: int, out_box: Box,
                 reduction: tuple[int, int, int] | None = None) -> Box | None:
    """The box of input ``slot`` read by the points of ``out_box`` (all reductions in
    full, or reduction variable ``var`` restricted to ``[lo, hi)`` when ``reduction`` is
    ``(var, lo, hi)``), clipped to the input; None when the input is not read (outside its
    window).  Interval arithmetic on the index expressions, exactly as csrc/region.c."""
    dims, window = _compiled(desc, slot)
    out_rank = desc.out_rank
    lo_v, hi_v = [], []
    for v, extent in enumerate(desc.extents):
        if reduction is not None and v == reduction[0]:
            lo, hi = reduction[1], reduction[2]
        elif v < out_rank:
            lo, hi = out_box[v]
            if window is not None:
                wl, wh = window[v]
                lo, hi = (wl if wl > lo else lo), (wh if wh < hi else hi)
            if hi <= lo:
                return None
        else:
            lo, hi = 0, extent
        lo_v.append(lo)
        hi_v.append(hi - 1)  # inclusive
    region = []
    for terms, offset, div, mod, size in dims:
        a, b = expr_interval(terms, offset, div, mod, lo_v, hi_v)
        if a < 0:
            a = 0
        if b > size - 1:
            b = size - 1
        if b < a:
            return None
        region.append((a, b + 1))
    return tuple(region)
