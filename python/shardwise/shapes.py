"""The bounds every tensor shape of a graph keeps: rank, positive int sizes, element count."""
from __future__ import annotations

from math import prod
from typing import Sequence

from shardwise.errors import ShapeError

MAX_RANK = 5
MAX_ELEMENTS = 2**48   # keeps every derived size and FLOP count far inside int64


def check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    """``shape`` as a tuple of ints, or ShapeError naming ``what`` and the bound it breaks."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise ShapeError(f"{what} must be a sequence of ints, got {shape!r}") from None
    if not dims:
        raise ShapeError(f"{what} must have at least one dimension")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise ShapeError(f"{what} must contain ints, got {dims}")
        if d <= 0:
            raise ShapeError(f"{what} must have positive sizes, got {dims}")
    if len(dims) > MAX_RANK:
        raise ShapeError(f"{what} has rank {len(dims)}; at most {MAX_RANK} dimensions are supported")
    if prod(dims) > MAX_ELEMENTS:
        raise ShapeError(f"{what} {dims} has {prod(dims):,} elements, more than the {MAX_ELEMENTS:,} supported")
    return dims
