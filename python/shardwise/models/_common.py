"""Argument checks shared by every zoo builder."""
from __future__ import annotations

from typing import Any

from shardwise.errors import ShapeError


def check_args(model: str, batch: Any, num_classes: Any) -> None:
    """``batch`` and ``num_classes`` must be positive ints (not bools)."""
    for what, value in (("batch", batch), ("num_classes", num_classes)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ShapeError(f"{model}: {what} must be a positive int, got {value!r}")


def positive_int(model: str, value: Any, what: str) -> int:
    """``value`` if it is a positive int (not a bool); else a ShapeError naming the model and the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShapeError(f"{model}: {what} must be a positive int, got {value!r}")
    return value
