"""Writing files atomically: a temporary file in the same folder, fsync, rename, fsync the folder.

A reader sees either the old file or the complete new one, never a partial
write, and a failure (or Ctrl-C) leaves the old file as it was.  Used for plan
files, checkpoints, profiles and pictures.

A save killed outright (``kill -9``, a power cut) cannot remove its temporary
file.  Temporary files are therefore named after their target and the writing
process, ``.<name>.<pid>-<random>.tmp`` beside ``<name>``, and every save of a
target first removes that target's stale ones: those whose process is gone (or
whose pid now belongs to a process that started after the file was last
written), and this process's own that no save of this process is writing any
more.  A temporary file another live process is writing is never touched.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading

# Temporary files this process is writing now (absolute paths), so that a save on another
# thread does not take them for stale leftovers of an earlier process with the same pid.
_in_progress: set[str] = set()
_in_progress_lock = threading.Lock()


def _temp_pattern(name: str) -> re.Pattern[str]:
    """``.<name>.<pid>-<mkstemp's random part>.tmp`` for the target file name ``name``."""
    return re.compile(rf"\.{re.escape(name)}\.(\d+)-[A-Za-z0-9_]+\.tmp")


def _process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None where that is unknown
    (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        # fields after the command name, which is in parentheses and may contain anything
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _owner_alive(pid: int, written: float) -> bool:
    """Whether process ``pid`` may still be writing a temporary file last written at ``written``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    except OSError:  # a pid the platform cannot signal: assume it lives
        return True
    started = _process_start_time(pid)
    # The pid was reused: the process now holding it started after the file was last written
    # (a second of slack for the clock-tick rounding of the start time).
    return started is None or started <= written + 1.0


def remove_stale_temporaries(path: str | os.PathLike) -> list[str]:
    """Remove the temporary files that killed saves of ``path`` left behind; returns their paths.

    A temporary file of ``path`` is stale when its process no longer runs (or its pid was
    reused by a process started after the file was written), or when it is this process's
    own and none of this process's saves is writing it.  Files it cannot remove (already
    gone, no permission) are skipped: cleaning up never makes a save fail."""
    path = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(path)
    pattern = _temp_pattern(name)
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    removed = []
    me = os.getpid()
    for entry in entries:
        match = pattern.fullmatch(entry)
        if not match:
            continue
        tmp = os.path.join(directory, entry)
        pid = int(match.group(1))
        try:
            written = os.stat(tmp).st_mtime
        except OSError:
            continue
        if pid == me:
            with _in_progress_lock:
                stale = tmp not in _in_progress
        else:
            stale = not _owner_alive(pid, written)
        if stale:
            try:
                os.unlink(tmp)
                removed.append(tmp)
            except OSError:
                pass
    return removed


def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable.  Platforms and file systems that cannot open or fsync a
    directory (Windows, some network file systems) are skipped: the data is already on disk."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; the file gets the usual 0666 & ~umask mode
    (mkstemp would leave 0600).  Stale temporary files of earlier, killed saves of ``path``
    are removed first (:func:`remove_stale_temporaries`), and the folder is fsynced after
    the rename so that the new file survives a crash."""
    path = os.fspath(path)
    directory, name = os.path.split(os.path.abspath(path))
    remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.{os.getpid()}-", suffix=".tmp", dir=directory)
    with _in_progress_lock:
        _in_progress.add(tmp)
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
    finally:
        with _in_progress_lock:
            _in_progress.discard(tmp)
    _fsync_directory(directory)
