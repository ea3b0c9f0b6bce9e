"""The C core compiles for aarch64 (tools/portable_build.sh): x86-64 code stays behind its guards;
and, built for aarch64, it passes the convolution kernels' tests under emulation (tools/arm_test.sh).

Runs where Debian's cross compiler is installed (apt-get install gcc-aarch64-linux-gnu), and for
the emulated run qemu-user-static and the aarch64 Python of ``tools/arm_test.sh --setup``, else
skips saying so; 30 s to a few minutes, so marked slow."""
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


ARM_ROOT = os.environ.get("ARM_ROOT", "/opt/arm64")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(CC) is None or shutil.which("qemu-aarch64-static") is None
                    or not os.path.exists(os.path.join(ARM_ROOT, "root", "usr", "bin", "python3.11")),
                    reason="no aarch64 toolchain, qemu or sysroot (bash tools/arm_test.sh --setup)")
def test_convolution_kernels_pass_on_aarch64():
    # the kernel tests compare every convolution path with the float64 reference: on aarch64 the
    # direct loops are absent, so im2col + OpenBLAS's ARM kernels carry every case
    out = subprocess.run(["bash", os.path.join(ROOT, "tools", "arm_test.sh"), "tests/ops/test_kernels_conv.py"],
                         capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "on aarch64" in out.stdout and "direct convolution: none" in out.stdout, out.stdout[:500]
    summary = out.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
