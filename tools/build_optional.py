"""What SHARDWISE_CUDA / SHARDWISE_MPI mean, once for both optional extensions: auto builds the
extension when its libraries are found and otherwise says why it skipped it, 0 never builds it,
1 requires it (the build stops naming what is missing)."""
from __future__ import annotations

from typing import Callable, TypeVar

MODES = ("auto", "0", "1")

F = TypeVar("F")


def find(variable: str, mode: str | None, strict: bool, search: Callable[[], F], skipped: Callable[[str], F],
         missing_message: Callable[[F], str]) -> F:
    """The result of ``search()`` for ``variable=mode`` (``skipped(reason)`` for mode 0), with
    ``.required`` set for mode 1.  Mode 1 with something missing stops (SystemExit) at once when
    ``strict``, else when build_ext runs (pip runs setup.py for build requirements and metadata
    before it installs the wheels the build needs)."""
    mode = (mode or "auto").strip().lower()
    if mode not in MODES:
        raise SystemExit(f"shardwise: {variable} must be auto, 0 or 1, not {mode!r}")
    if mode == "0":
        return skipped(f"{variable}=0")
    found = search()
    found.required = mode == "1"
    if not found.ok and found.required and strict:
        raise SystemExit(missing_message(found))
    return found
