"""The CUDA backend's install path without a GPU (issue 26): a broken CUDA build fails CI.

* The requirement hook: pip asks tools/build_backend.py for the build requirements before it
  installs them, so with SHARDWISE_CUDA=1 and no CUDA found the hook must answer (with the
  nvidia wheels) instead of failing; build_ext then fails naming what is missing.  Runs anywhere.
* The build: `bash tools/gpu_check.sh --build-only` (the device check's own build step:
  SHARDWISE_CUDA=1 pip install --no-build-isolation --no-deps, sm_90 only, into a --target
  folder, so the environment is not changed) in a copy of the sources, against the nvidia
  wheels (cuDNN, cuBLAS, NCCL: headers and libraries) in the folder SHARDWISE_CUDA_WHEELS (default
  build/cuda-wheels), which .ci/run fills with `pip install --target`; then the built module loads
  and `shardwise info` names the versions it was built with, and the NCCL communicator is in it
  (SW_HAVE_NCCL=1, libnccl.so.2 needed, NCCL's calls imported, ncclGetVersion answers).  Skipped,
  with the reason, where nvcc or that folder is absent; SHARDWISE_REQUIRE_CUDA_BUILD=1 (.ci/run
  where nvcc is present) makes a missing folder a failure.  About a minute and a half on CI's 2 cores.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WHEELS = os.path.abspath(os.environ.get("SHARDWISE_CUDA_WHEELS") or os.path.join(ROOT, "build", "cuda-wheels"))
SKIP_COPY = shutil.ignore_patterns(".git", "build", "dist", "gpu_out", "*.so", "*.o", "__pycache__", "*.egg-info",
                                   ".venv", ".hypothesis", ".pytest_cache", "notebooks", "examples")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the sources, so that the builds leave the checkout alone."""
    dst = tmp_path_factory.mktemp("src") / "shardwise"
    shutil.copytree(ROOT, dst, ignore=SKIP_COPY)
    return dst


def test_cuda_extra_and_build_requirements_are_equal():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import build_backend
    finally:
        sys.path.pop(0)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["cuda"]
    assert extra == build_backend.CUDA_WHEELS
    assert any(w.startswith("nvidia-nccl-cu13") for w in extra)


def test_requirement_hook_needs_no_cuda_and_build_ext_names_what_is_missing(tree, tmp_path):
    # nothing on PATH: no nvcc, so CUDA cannot be found whatever this machine has
    env = {**os.environ, "SHARDWISE_CUDA": "1", "PATH": str(tmp_path)}
    for k in ("CUDA_HOME", "CUDA_PATH", "SHARDWISE_CUDA_WHEELS"):
        env.pop(k, None)
    code = "import sys; sys.path.insert(0, 'tools'); import build_backend; print(build_backend.get_requires_for_build_wheel())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "nvidia-cudnn-cu13" in out.stdout and "nvidia-nccl-cu13" in out.stdout
    assert "not found (yet)" in out.stderr
    out = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path / "lib"),
                          "--build-temp", str(tmp_path / "tmp")], cwd=tree, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode != 0
    assert "SHARDWISE_CUDA=1 but the CUDA backend cannot be built: nvcc not found" in out.stderr
    assert not list((tmp_path / "tmp").rglob("*.o")), "build_ext compiled before it checked for CUDA"


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
        return os.path.join(home, "bin", "nvcc")
    return shutil.which("nvcc")


def test_cuda_backend_builds_with_nvcc(tree, tmp_path):
    if not _nvcc():
        pytest.skip("nvcc not found (neither $CUDA_HOME/bin/nvcc nor nvcc on PATH): the CUDA build is not checked here")
    if not os.path.isfile(os.path.join(WHEELS, "nvidia", "cudnn", "include", "cudnn.h")):
        msg = (f"no nvidia wheels in {WHEELS}: pip install --target {WHEELS} nvidia-cudnn-cu13 nvidia-cublas "
               "nvidia-nccl-cu13 (as .ci/run does), or set SHARDWISE_CUDA_WHEELS")
        if os.environ.get("SHARDWISE_REQUIRE_CUDA_BUILD") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    out_dir = tmp_path / "out"
    env = {**os.environ, "OUT": str(out_dir), "PYTHON": sys.executable, "SHARDWISE_CUDA_WHEELS": WHEELS,
           "SHARDWISE_CUDA_ARCH": "90"}
    env.pop("PYTHONPATH", None)
    r = subprocess.run(["bash", "tools/gpu_check.sh", "--build-only"], cwd=tree, env=env, capture_output=True,
                       text=True, timeout=900)
    log = (out_dir / "build.log").read_text() if (out_dir / "build.log").exists() else r.stdout + r.stderr
    assert r.returncode == 0, f"the CUDA build failed:\n{r.stdout}\n{log[-6000:]}"
    site = tree / "build" / "gpu_check" / "site"
    assert list((site / "shardwise").glob("_cuda*.so")), "no shardwise._cuda in the build"
    assert "-gencode=arch=compute_90,code=sm_90" in log and "compute_80" not in log

    # the module loads without a GPU and names what it was built with
    env = {**os.environ, "PYTHONPATH": str(site)}
    info = subprocess.run([sys.executable, "-m", "shardwise", "info"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert "backends built: cpu, cuda" in info.stdout
    m = re.search(r"built with CUDA (\d+\.\d+), cuDNN (9\.\d+\.\d+), cuBLAS (\d+\.\d+\.\d+), NCCL (\d+\.\d+\.\d+)",
                  info.stdout)
    assert m, info.stdout
    assert f"cuDNN {m.group(2)}" in log and f"NCCL {m.group(4)}" in log   # as the build found them

    # the NCCL communicator (cuda/comm_nccl.c) is compiled in and libnccl.so.2 linked: the module
    # needs it by its soname, imports NCCL's calls, and loads it (ncclGetVersion) without a GPU
    assert "-DSW_HAVE_NCCL=1" in log and "cuda/comm_nccl.c" in log and "cuda/nccl_module.c" in log
    so = str(next((site / "shardwise").glob("_cuda*.so")))
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, timeout=60).stdout
    assert "[libnccl.so.2]" in needed and "nvidia/nccl/lib" in needed, needed
    undefined = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True, text=True,
                               timeout=60).stdout.split()
    for sym in ("ncclGetUniqueId", "ncclCommInitRankConfig", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
                "ncclAllReduce", "ncclAllGather", "ncclCommAbort", "ncclCommGetAsyncError", "ncclGetVersion"):
        assert sym in undefined, f"{sym} is not imported by shardwise._cuda"
    assert f"NCCL: {m.group(4)} linked (ncclGetVersion): the NCCL communicator is built" in info.stdout, info.stdout
    check = ("from shardwise import _cuda; assert _cuda.HAVE_NCCL; print(_cuda.nccl_version()); "
             "print(_cuda.NcclComm.__doc__)")
    r = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    major, minor, patch = (int(x) for x in m.group(4).split("."))
    assert r.stdout.split()[0] == str(major * 10000 + minor * 100 + patch)
