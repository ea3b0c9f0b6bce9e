"""Launching multi-process tests: `mpiexec -n N` under a hard timeout, skipped (with the reason)
where shardwise._mpi is not built or no mpiexec is found -- unless SHARDWISE_REQUIRE_MPI=1
(.ci/run sets it), which fails instead.  Shared by the tests of tests/distributed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import shardwise as sw
from shardwise import distributed as dist

LAUNCH_TIMEOUT = 60.0   # seconds per launch; the cases take 3-6 s on 2 loaded cores


def _mpi_missing() -> str | None:
    """Why the multi-process tests cannot run here, or None."""
    if not dist.built():
        return "shardwise._mpi is not built (no MPI found at build time: SHARDWISE_MPI=1 pip install \".[mpi]\")"
    try:
        import shardwise._mpi  # noqa: F401  (loads libmpi, so mpiexec() finds the launcher beside it)
    except ImportError as exc:
        return f"shardwise._mpi cannot be loaded: {exc}"
    if not dist.mpiexec():
        return "no mpiexec found (beside the libmpi shardwise._mpi loads, in this environment or on PATH)"
    return None


def _need_mpi() -> None:
    why = _mpi_missing()
    if why is None:
        return
    if os.environ.get("SHARDWISE_REQUIRE_MPI") == "1":
        pytest.fail(f"SHARDWISE_REQUIRE_MPI=1 but {why}")
    pytest.skip(why)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # the ranks import this checkout's shardwise, as the test process does
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(sw.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    for var, _ in dist.LAUNCHER_SIZE_VARS:   # the ranks get the launcher's, not the test process's
        env.pop(var, None)
    env.update(extra)
    return env


def run_hard(cmd: list[str], env: dict[str, str], timeout: float = LAUNCH_TIMEOUT) -> tuple[int, str, float]:
    """(exit status, stdout + stderr, seconds) of `cmd` in its own process group, killed whole
    (SIGTERM, then SIGKILL) and failing the test when it runs past `timeout`."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
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
                continue
        pytest.fail(f"{' '.join(cmd)} ran past {timeout:.0f} s (a lost rank?) and was killed; output:\n{out}")
    return p.returncode, out, time.monotonic() - t


def mpiexec_n(n: int) -> tuple[list[str], dict[str, str]]:
    """The launcher's command for n ranks, and the environment it needs."""
    cmd = [dist.mpiexec(), "-n", str(n)]
    from shardwise import _mpi
    if _mpi.build_version().startswith("Open MPI"):
        # Open MPI refuses root and more ranks than cores without these (docs/distributed.md)
        return cmd + ["--oversubscribe"], {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return cmd, {}


def launch_script(n: int, script: str, *args: str, timeout: float = LAUNCH_TIMEOUT, **env: str) -> tuple[int, str, float]:
    """mpiexec -n n python script args..., under the hard timeout: (status, output, seconds)."""
    cmd, extra = mpiexec_n(n)
    return run_hard(cmd + [sys.executable, script, *args], _env(**extra, **env), timeout)
