"""Writing files atomically: a temporary file in the same folder, fsync, then rename.

A reader sees either the old file or the complete new one, never a partial
write, and a failure (or Ctrl-C) leaves the old file as it was.  Used for plan
files, checkpoints, profiles and pictures.
"""
from __future__ import annotations

import os
import tempfile


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; the file gets the usual 0666 & ~umask mode
    (mkstemp would leave 0600)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".shardwise-", suffix=".tmp", dir=directory)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
