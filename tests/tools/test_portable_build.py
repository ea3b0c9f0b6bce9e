"""The C core compiles for aarch64 (tools/portable_build.sh): x86-64 code stays behind its guards.

Runs where Debian's cross compiler is installed (apt-get install gcc-aarch64-linux-gnu), else
skips saying so; about 30 s, so marked slow."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CC = "aarch64-linux-gnu-gcc"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no {CC} (apt-get install gcc-aarch64-linux-gnu)")
def test_every_c_file_compiles_for_aarch64():
    out = subprocess.run(["bash", os.path.join(ROOT, "tools", "portable_build.sh"), CC], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert out.returncode == 0, out.stdout + out.stderr
    assert ", 0 failed" in out.stdout and "aarch64" in out.stdout
