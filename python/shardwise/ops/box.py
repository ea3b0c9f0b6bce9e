"""Boxes of tensors: a box is a tuple of half-open ``(lo, hi)`` ranges, one per dimension.

Plain values and their set arithmetic only (volume, the intersection of two boxes, the
row-major grid of worker boxes).  The region of an input that a box of an op reads is
interval arithmetic on the op's index expressions, and that lives in the C core alone
(csrc/core/region.c); Python asks it through :mod:`shardwise.planning.regions`.
"""
from __future__ import annotations

from math import prod
from typing import Sequence

Box = tuple[tuple[int, int], ...]  # half-open [lo, hi) per dimension


def volume(box: Box | None) -> int:
    if box is None:
        return 0
    return prod(max(0, hi - lo) for lo, hi in box)


def intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(al, bl), min(ah, bh)) for (al, ah), (bl, bh) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def worker_boxes(shape: Sequence[int], degrees: Sequence[int]) -> list[Box]:
    """Output box of every worker: a row-major grid over the degrees (as csrc/core/region.c's
    sw_worker_box)."""
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
