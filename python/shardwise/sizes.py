"""Sizes in bytes written by hand: ``8GB``, ``512MiB``, ``1.5 GiB``, ``1e3MB`` or a number.

One reader for every place that takes a memory size: swap budgets (:func:`shardwise.parse_budget`,
whole bytes) and the search's memory budget (``sw.search(..., memory="8GB")``, which also takes
a float).  Decimal units are powers of 10 (``KB`` = 10^3), binary ones powers of 2 (``KiB`` =
2^10); case does not matter and a bare number is bytes.
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def read_bytes(value: Any, what: str, floats: bool = False) -> int | float:
    """Bytes from ``value``: an int (bytes), a float when ``floats`` (bytes, returned as a float),
    or a string with a unit ("8GB", "512MiB", "1.5 GiB"; an int of bytes, or a float when ``floats``).

    Raises ValueError naming ``what`` for a malformed string or a size that is zero, negative or
    not finite, TypeError for any other type (bools included)."""
    kinds = "a number" if floats else "an int"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float, np.floating, str)) or (
            not floats and isinstance(value, (float, np.floating))):
        shown = repr(value) if isinstance(value, bool) else type(value).__name__
        raise TypeError(f"{what} must be bytes ({kinds}) or a string like '8GB' or '512MiB', got {shown}")
    if isinstance(value, str):
        m = _SIZE.match(value)
        unit = m.group(2).lower() if m else None
        if not m or unit not in UNITS:
            raise ValueError(f"{what} {value!r} is not a size: give bytes or a number with a unit "
                             f"(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), as '8GB' or '512MiB'")
        size: int | float = float(m.group(1)) * UNITS[unit]
    else:
        size = float(value) if isinstance(value, (float, np.floating)) else int(value)
    if isinstance(size, float) and math.isfinite(size) and not floats:
        size = int(size)   # whole bytes: "1.5KB" is 1500, "0.5" is 0 (refused below)
    if not size > 0 or (isinstance(size, float) and not math.isfinite(size)):
        raise ValueError(f"{what} must be a positive, finite number of bytes, got {value!r}")
    return size


def format_bytes(n: float) -> str:
    """A size for people: "1 byte", "512 bytes", "2.00 MB", "1.50 GB" (decimal units, as the
    devices' memories are given), never "0.00 GB" for a size that is not zero."""
    n = float(n)
    if abs(n) < 1000:
        whole = int(round(n))
        return f"{whole} byte" + ("" if whole == 1 else "s")
    for unit, size in (("KB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if abs(n) < size * 1000:
            return f"{n / size:.2f} {unit}"
    return f"{n / 1e12:.2f} TB"
