"""``python -m shardwise`` and the ``shardwise`` console script (see :mod:`shardwise.cli.main`)."""
from __future__ import annotations

import sys
from typing import Sequence

from shardwise.cli.main import main as _cli_main


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point declared in pyproject.toml; returns the exit status."""
    return _cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
