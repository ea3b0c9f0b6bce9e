"""Run a command under valgrind memcheck and fail only on errors in shardwise's C core.

CPython itself reports many benign "uninitialised value" and "possibly lost"
records under memcheck; what we must keep clean is every record whose stack
passes through our extension (csrc/**/*.c, the _core shared object).

    python tools/valgrind_check.py python -m pytest -q tests/planning/test_cost_model.py
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile

CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csrc")
# every C file of the core (found, not listed, so a new file cannot be forgotten); a frame names
# its file when built with debug information, the shared object otherwise
OUR_FILES = sorted({os.path.splitext(os.path.basename(f))[0]
                    for f in glob.glob(os.path.join(CSRC, "**", "*.c"), recursive=True)})
OURS = re.compile(r"_core\.cpython|\((" + "|".join(map(re.escape, OUR_FILES)) + r")\.c:\d+\)")
HEADER = re.compile(r"^==\d+==\s+(\S.*)$")


def records(log: str) -> list[list[str]]:
    """Split a memcheck log into records (a header line and its stack)."""
    out: list[list[str]] = []
    cur: list[str] = []
    for line in log.splitlines():
        m = HEADER.match(line)
        if not m or line.strip().endswith("=="):
            if cur:
                out.append(cur)
            cur = []
            continue
        text = m.group(1)
        if text.startswith(("at ", "by ")) and cur:
            cur.append(text)
        else:
            if cur:
                out.append(cur)
            cur = [text]
    if cur:
        out.append(cur)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    with tempfile.NamedTemporaryFile(prefix="memcheck-", suffix=".log", delete=False) as f:
        log_path = f.name
    env = dict(os.environ, PYTHONMALLOC="malloc")
    cmd = ["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite",
           f"--log-file={log_path}", *argv]
    rc = subprocess.call(cmd, env=env)
    log = open(log_path).read()
    bad = [r for r in records(log) if len(r) > 1 and any(OURS.search(frame) for frame in r[1:])]
    for r in bad:
        print("\n".join(r), file=sys.stderr)
        print(file=sys.stderr)
    total = sum(1 for r in records(log) if len(r) > 1)
    print(f"valgrind: {total} records in all, {len(bad)} in shardwise's C core (log: {log_path})")
    if rc != 0:
        print(f"valgrind: the command itself failed with status {rc}", file=sys.stderr)
        return rc
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
