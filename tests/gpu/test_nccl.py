"""NCCL between GPU ranks (cuda/comm_nccl.c, sw.distributed.nccl_comm; docs/gpu.md, "NCCL").

On a GPU (marked gpu; skipped with the reason where no GPU can be used or shardwise._cuda has no
NCCL), each in a subprocess under a hard timeout, so that a hung NCCL kernel fails its test
instead of hanging the run (tests/gpu/nccl_cases.py is the rank side):
1. a one-rank communicator without MPI: allreduce and allgather of device buffers against NumPy,
   sends and receives to itself, test(), byte counters, the capsule read as C would; a receive
   no one sends times out naming it, and close() aborts the communicator;
2. the same bootstrapped over MPI under `mpiexec -n 1` (rank 0's ncclGetUniqueId through the MPI
   allgather, then ncclCommInitRank);
3. `mpiexec -n 2`: on one GPU NCCL refuses two ranks on it, and both ranks must say so and end
   (no hang); on two GPUs, the ring between the ranks.
Without a GPU (not marked): comm_nccl.c's logic against a stub of CUDA and NCCL (nccl_stub/);
the bootstrap fails naming the missing GPU, alone and through an MPI bootstrap of two ranks (no
rank waits for the other), nccl_comm raises NCCLUnavailableError; and the build's switch:
SW_HAVE_NCCL=1 links libnccl.so.2 by its path, 0 compiles without nccl.h.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig

import pytest

import shardwise as sw
from shardwise import distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nccl_cases.py")
WHEELS = os.path.abspath(os.environ.get("SHARDWISE_CUDA_WHEELS") or os.path.join(ROOT, "build", "cuda-wheels"))
LAUNCH_TIMEOUT = 90.0   # under the device check's pytest-timeout (120 s a test), which would end the run

GPU_OK, GPU_REASON = sw.cuda.status()
NCCL_OK = dist.nccl_built()


def _gpu_skip() -> None:
    if not NCCL_OK:
        pytest.skip(f"no NCCL communicator: {dist.nccl_info()['reason']}")
    if not GPU_OK:
        pytest.skip(f"no usable GPU: {GPU_REASON}")


def _mpi_missing() -> str | None:
    if not dist.built():
        return "shardwise._mpi is not built (no MPI found at build time: SHARDWISE_MPI=1 pip install \".[mpi]\")"
    try:
        import shardwise._mpi  # noqa: F401  (loads libmpi, so mpiexec() finds the launcher beside it)
    except ImportError as exc:
        return f"shardwise._mpi cannot be loaded: {exc}"
    if not dist.mpiexec():
        return "no mpiexec found"
    return None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(sw.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    for var, _ in dist.LAUNCHER_SIZE_VARS:
        env.pop(var, None)
    return env


def run_hard(cmd: list[str], env: dict[str, str] | None = None, timeout: float = LAUNCH_TIMEOUT) -> tuple[int, str]:
    """(exit status, output) of `cmd` in its own process group, killed whole and failing the
    test when it runs past `timeout`."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env or _env(),
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, _ = p.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                out = ""
        pytest.fail(f"{' '.join(cmd)} ran past {timeout:.0f} s (a hung NCCL call?) and was killed; output:\n{out}")
    return p.returncode, out


def mpiexec_n(n: int) -> tuple[list[str], dict[str, str]]:
    cmd = [dist.mpiexec(), "-n", str(n)]
    from shardwise import _mpi
    if _mpi.build_version().startswith("Open MPI"):
        return cmd + ["--oversubscribe"], {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return cmd, {}


# ---------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_one_rank_without_mpi_allreduce_allgather_send_to_self_timeout():
    _gpu_skip()
    rc, out = run_hard([sys.executable, CASES, "alone"])
    assert rc == 0 and "[nccl ok: rank 0]" in out, out


@pytest.mark.gpu
def test_one_rank_bootstrapped_over_mpi():
    _gpu_skip()
    why = _mpi_missing()
    if why:
        pytest.skip(why)
    cmd, extra = mpiexec_n(1)
    rc, out = run_hard(cmd + [sys.executable, CASES, "mpi"], {**_env(), **extra})
    assert rc == 0 and "[nccl ok: rank 0]" in out, out


@pytest.mark.gpu
def test_two_ranks_over_mpi_run_or_are_refused_together():
    """Two ranks: on two GPUs the ring runs; on one GPU (device = local_rank % 1 = 0 for both)
    NCCL refuses two ranks on one GPU, and both ranks must report it and end."""
    _gpu_skip()
    why = _mpi_missing()
    if why:
        pytest.skip(why)
    cmd, extra = mpiexec_n(2)
    rc, out = run_hard(cmd + [sys.executable, CASES, "mpi"], {**_env(), **extra})
    assert rc == 0, out
    ends = sorted(re.findall(r"\[nccl (ok|refused): rank (\d)", out))
    assert [r for _, r in ends] == ["0", "1"], out
    if len(sw.cuda.gpus()) >= 2:
        assert all(kind == "ok" for kind, _ in ends), out


# ---------------------------------------------------------------- without a GPU

def _no_gpu_nccl() -> None:
    if not NCCL_OK:
        pytest.skip(f"no NCCL communicator: {dist.nccl_info()['reason']}")
    if GPU_OK:
        pytest.skip("a GPU is usable here: the GPU tests above run instead")


def test_without_a_gpu_the_bootstrap_names_what_is_missing():
    _no_gpu_nccl()
    from shardwise import _cuda
    assert _cuda.HAVE_NCCL and _cuda.nccl_version() >= 22700
    with pytest.raises(RuntimeError, match=r"nccl bootstrap: rank 0: no usable GPU"):
        _cuda.NcclComm(None, 0, 5.0)
    with pytest.raises(dist.NCCLUnavailableError, match="NCCL needs a GPU"):
        dist.nccl_comm(None)
    with pytest.raises(ValueError):   # not a "shardwise.comm" capsule
        _cuda.NcclComm(object(), 0)
    info = dist.nccl_info()
    assert info["built"] and re.fullmatch(r"2\.\d+\.\d+", info["version"]), info


def test_without_a_gpu_an_mpi_bootstrap_of_two_ranks_fails_on_both():
    """Through the MPI allgather each rank learns the others' state: both fail at once, naming
    the missing GPU, instead of one waiting for the other."""
    _no_gpu_nccl()
    why = _mpi_missing()
    if why:
        pytest.skip(why)
    code = ("import shardwise as sw\n"
            "c = sw.distributed.init(abort_on_exception=False)\n"
            "try:\n    sw.distributed.nccl_comm(c, timeout=20)\n"
            "except sw.distributed.NCCLUnavailableError as e:\n    print(f'[failed: rank {c.rank}: {e}]', flush=True)\n")
    cmd, extra = mpiexec_n(2)
    rc, out = run_hard(cmd + [sys.executable, "-c", code], {**_env(), **extra}, timeout=60)
    assert rc == 0, out
    for r in (0, 1):
        assert f"[failed: rank {r}: NCCL cannot start: nccl bootstrap: rank {r}: no usable GPU" in out, out


def _build_cuda():
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import build_cuda
    finally:
        sys.path.pop(0)
    return build_cuda


def test_the_build_links_nccl_where_found_and_leaves_it_out_otherwise():
    build_cuda = _build_cuda()
    base = dict(ok=True, nvcc="nvcc", toolkit="/cuda", include_dirs=["/cuda/include"],
                libraries={"cudnn": "/w/nvidia/cudnn/lib/libcudnn.so.9", "cublas": "/w/nvidia/cu13/lib/libcublas.so.13",
                           "cudart_static": "/cuda/lib64/libcudart_static.a"})
    ext = build_cuda.extension(build_cuda.Found(**base, nccl_code=23203, nccl_include="/w/nvidia/nccl/include",
                                                nccl_lib="/w/nvidia/nccl/lib/libnccl.so.2"), [], [], "/np")
    assert ("SW_HAVE_NCCL", "1") in ext.define_macros
    assert "/w/nvidia/nccl/lib/libnccl.so.2" in ext.extra_link_args and "/w/nvidia/nccl/include" in ext.include_dirs
    assert "-Wl,-rpath,$ORIGIN/../nvidia/nccl/lib" in ext.extra_link_args
    assert "-Wl,-rpath,/w/nvidia/nccl/lib" in ext.extra_link_args
    assert "cuda/comm_nccl.c" in ext.sources and "cuda/nccl_module.c" in ext.sources
    ext = build_cuda.extension(build_cuda.Found(**base), [], [], "/np")   # no NCCL found
    assert ("SW_HAVE_NCCL", "0") in ext.define_macros
    assert not any("nccl" in a for a in ext.extra_link_args + ext.include_dirs)


def _found():
    """What the build finds (nvcc's toolkit, the nvidia wheels of WHEELS), or a skip."""
    build_cuda = _build_cuda()
    old = os.environ.get("SHARDWISE_CUDA_WHEELS")
    os.environ["SHARDWISE_CUDA_WHEELS"] = WHEELS
    try:
        found = build_cuda.find("auto")
    finally:
        if old is None:
            os.environ.pop("SHARDWISE_CUDA_WHEELS")
        else:
            os.environ["SHARDWISE_CUDA_WHEELS"] = old
    if not found.ok:
        pytest.skip(f"the CUDA backend's headers are not here: {found.reason}")
    return found


def test_comm_nccl_against_a_stub_of_cuda_and_nccl(tmp_path):
    """cuda/comm_nccl.c's logic without a GPU: compiled with the real cuda_runtime_api.h and nccl.h
    but linked to tests/gpu/nccl_stub/stub.c (one rank, host memory, a non-blocking communicator
    that answers ncclInProgress every second call) and run by nccl_stub/driver.c: the bootstrap's
    checks, sends and receives to itself grouped, the table growing, collectives, counters, stale
    handles, a refused group, a lone receive timing out by name, free with and without requests
    left.  Under AddressSanitizer and UBSan where gcc has them."""
    found = _found()
    if not found.nccl_include:
        pytest.skip("no nccl.h and libnccl.so.2 found: the NCCL communicator is not built here")
    exe = str(tmp_path / "nccl_stub")
    base = ["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers",
            "-DSW_HAVE_NCCL=1", "-Icsrc", "-Icuda", f"-I{os.path.join(found.toolkit, 'include')}",
            f"-I{found.nccl_include}", "cuda/comm_nccl.c", "tests/gpu/nccl_stub/stub.c",
            "tests/gpu/nccl_stub/driver.c", "-lpthread", "-o", exe]
    sanitize = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
    r = subprocess.run(base + sanitize, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and "sanitize" in r.stderr:   # no libasan here: without the sanitizers
        r = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    r = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("all ok"), r.stdout + r.stderr[-4000:]


def test_without_nccl_the_sources_compile_without_nccl_h():
    """SW_HAVE_NCCL=0: comm_nccl.c and nccl_module.c compile against the CUDA, cuDNN and cuBLAS
    headers alone (gcc -fsyntax-only; nccl.h is on no include path)."""
    found = _found()
    import numpy
    includes = ["csrc", "cuda", numpy.get_include(), sysconfig.get_paths()["include"]] + found.include_dirs
    assert not any(os.path.isfile(os.path.join(d, "nccl.h")) for d in includes), includes
    for src in ("cuda/comm_nccl.c", "cuda/nccl_module.c", "cuda/module.c"):
        r = subprocess.run(["gcc", "-std=c11", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                            "-Wno-missing-field-initializers", "-DSW_HAVE_NCCL=0"] + [f"-I{d}" for d in includes]
                           + [src], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{src}:\n{r.stderr[-3000:]}"
