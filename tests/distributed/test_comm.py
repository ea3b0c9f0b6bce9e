"""The comm layer on loopback: `mpiexec -n 2` and `-n 4` on tests/distributed/mpi_cases.py.

Every launch runs under a hard timeout (LAUNCH_TIMEOUT): on expiry the launcher's whole process
group (mpiexec, its proxies, the ranks) is killed and the test fails, so a lost rank fails a
test instead of hanging CI.  Skipped, with the reason, where shardwise._mpi is not built or no
mpiexec is found -- unless SHARDWISE_REQUIRE_MPI=1 (.ci/run sets it), which fails instead.
The rest of the file (check_world, the build's mpicc parsing, the extras) needs no MPI.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

import shardwise as sw
from shardwise import distributed as dist

from mpi_launch import LAUNCH_TIMEOUT, _env, _mpi_missing, _need_mpi, launch_script, mpiexec_n, run_hard  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_cases.py")


def launch(n: int, case: str, **env: str) -> tuple[int, str, float]:
    return launch_script(n, CASES, case, **env)


@pytest.mark.parametrize("n", [2, 4])
def test_world_round_trips_counters_allgather_timeout(n):
    """rank/size/local_rank; isend/irecv between every pair and around a ring with the byte
    counters equal to the bytes sent; allgather of fingerprints; allreduce; a receive that
    never gets its message times out naming peer and tag; 4 threads per rank sending and receiving
    at once through the one comm thread; the sw_comm_ext capsule read as C would."""
    _need_mpi()
    rc, out, _ = launch(n, "basic", EXPECT_SIZE=str(n))
    assert rc == 0, out
    assert sorted(re.findall(r"\[case ok: rank (\d+)\]", out)) == [str(r) for r in range(n)], out


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_lost_rank_ends_the_job_nonzero(how):
    """Rank 1 raises (the exception hook aborts every rank) or exits with status 3 (the launcher
    tears the job down) while rank 0 waits for its message with a 120 s timeout: the job ends
    non-zero within 30 s, naming the rank."""
    _need_mpi()
    rc, out, took = launch(2, f"lost_{how}")
    assert rc != 0 and took < 30, (rc, took, out)
    assert "rank 0 got a message" not in out
    if how == "raise":
        assert "[rank 1 of 2]" in out and "rank 1 fails on purpose" in out, out
        assert "rank 1 of 2 aborts the job" in out, out


def test_clean_exit_of_a_peer_ends_the_job_instead_of_hanging():
    """Rank 1 calls sys.exit(3) while rank 0 waits for its message (3 s timeout).  Which of two
    things ends the job depends on the MPI build and the machine: rank 1 stops in MPI_Finalize and
    rank 0's receive times out (its exception aborts the job), or the launcher sees status 3 and
    ends the job at once (seen on CI, with no output at all).  Either way the job ends non-zero
    within 30 s, and where rank 0 got to its timeout, the error names peer, tag and size."""
    _need_mpi()
    rc, out, took = launch(2, "lost_sys_exit")
    assert rc != 0 and took < 30, (rc, took, out)
    assert "rank 0 got a message" not in out, out
    if "CommTimeoutError" in out:
        assert "receive from rank 1, tag 7, 8 bytes" in out, out


def test_a_hanging_job_is_killed_whole_and_fails():
    """The hard timeout itself: a job whose ranks never finish (as ranks that wait on each other
    forever would) fails the test after the timeout, and no rank is left running."""
    _need_mpi()
    marker = f"sw-hang-{os.getpid()}-{time.monotonic_ns()}"
    cmd, extra = mpiexec_n(2)
    cmd += [sys.executable, "-c", f"import time; time.sleep(300)  # {marker}"]
    t = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="ran past 3 s"):
        run_hard(cmd, _env(**extra), timeout=3)
    assert time.monotonic() - t < 20
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in ps, "a rank outlived the killed launcher"


def test_one_rank_jobs_are_refused():
    """A build against one MPI started by another MPI's mpiexec runs as N one-rank jobs (each a
    singleton of size 1).  Reproduced cheaply: a singleton (no mpiexec) whose environment carries
    Open MPI's launcher variable saying 2 ranks.  init() refuses it, naming both."""
    _need_mpi()
    rc, out, _ = run_hard([sys.executable, CASES, "singleton"], _env(OMPI_COMM_WORLD_SIZE="2"))
    assert rc != 0 and "not refused" not in out, out
    assert "WorldMismatchError: the launcher and the MPI library differ" in out, out
    assert "says 2 ranks" in out and "started 1" in out, out


@pytest.mark.parametrize("level", ["multiple", "serialized", "funneled"])
def test_adopts_an_mpi_that_mpi4py_initialised(level):
    """mpi4py initialises MPI first: init() adopts it (no second MPI_Init, no MPI_Finalize of its
    own) at MPI_THREAD_MULTIPLE or SERIALIZED and both talk over the same MPI; FUNNELED is refused
    with the reason.  Skipped where mpi4py is not installed (not a dependency)."""
    _need_mpi()
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (not a dependency of shardwise)")
    rc, out, _ = launch(2, f"adopt_{level}")
    assert rc == 0, out
    assert sorted(re.findall(r"\[case ok: rank (\d+)\]", out)) == ["0", "1"], out


# ---------------------------------------------------------------- without MPI


class _FakeComm:
    library = "MPICH Version: 5.0.2"

    def __init__(self, size):
        self.size = size


def test_check_world_compares_launcher_and_plan():
    one = _FakeComm(1)
    with pytest.raises(dist.WorldMismatchError, match="the launcher and the MPI library differ.*PMI_SIZE=4"):
        dist.check_world(None, one, environ={"PMI_SIZE": "4"})
    with pytest.raises(dist.WorldMismatchError, match="one-rank jobs"):
        dist.check_world(4, one, environ={})
    with pytest.raises(dist.WorldMismatchError, match="the plan wants 2: launch it with mpiexec -n 2"):
        dist.check_world(2, _FakeComm(4), environ={"OMPI_COMM_WORLD_SIZE": "4"})
    assert dist.check_world(4, _FakeComm(4), environ={"PMI_SIZE": "4"}).size == 4
    assert dist.launcher_size({}) == (None, "")
    assert dist.launcher_size({"SLURM_NTASKS": "8"}) == (None, "")   # a batch script's own process has it too


def test_init_without_mpi_names_the_install(monkeypatch):
    from shardwise.distributed import comm as comm_module

    monkeypatch.setattr(comm_module, "built", lambda: False)
    monkeypatch.setattr(comm_module, "_comm", None)
    with pytest.raises(dist.MPIUnavailableError, match=r"SHARDWISE_MPI=1 pip install \"\.\[mpi\]\"") as e:
        dist.init()
    assert isinstance(e.value, sw.ShardwiseError)
    assert dist.info()["built"] is False and "SHARDWISE_MPI" in dist.info()["reason"]


def _tool(name):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


def test_build_parses_mpicc_show():
    build_mpi = _tool("build_mpi")
    inc, libdirs, libs, link = build_mpi.parse_show(
        "cc -I/v/include -L/v/lib -Wl,-rpath -Wl,/v/lib -Wl,--enable-new-dtags -lmpi")
    assert (inc, libdirs, libs, link) == (["/v/include"], ["/v/lib"], ["mpi"], [])
    inc, libdirs, libs, link = build_mpi.parse_show(
        "gcc -I/o/include -pthread -L/o/lib -Wl,-rpath,/o/lib -Wl,--enable-new-dtags -lmpi")
    assert (inc, libdirs, libs, link) == (["/o/include"], ["/o/lib"], ["mpi"], ["-pthread"])
    assert build_mpi.find("0").reason == "SHARDWISE_MPI=0"
    with pytest.raises(SystemExit, match="auto, 0 or 1"):
        build_mpi.find("yes")


def test_build_requirement_equals_the_extra():
    import ast
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        extra = ast.literal_eval(re.search(r"^mpi = (\[.*\])$", f.read(), re.M).group(1))
    assert _tool("build_mpi").MPI_WHEELS == extra
    assert _tool("build_backend").MPI_WHEELS == extra


def test_info_names_the_mpi_library_or_why_none():
    from shardwise.cli.info import info_text
    text = info_text()
    line = next(x for x in text.splitlines() if x.startswith("mpi: "))
    if dist.built() and _mpi_missing() is None:
        assert re.match(r"mpi: (MPICH|Open MPI).* \(MPI \d+\.\d+\), built against (MPICH|Open MPI) ", line), text
        assert "launcher: " in text
    else:
        assert "SHARDWISE_MPI" in line or "cannot be loaded" in line, text


def test_required_mpi_missing_fails_the_build_naming_it(monkeypatch):
    """SHARDWISE_MPI=1 with no mpicc anywhere: setup.py's find (strict=False, as pip asks for
    requirements before it installs them) reports, build_ext fails naming what is missing; the
    build backend asks for the mpich wheel only under SHARDWISE_MPI=1."""
    build_mpi = _tool("build_mpi")
    monkeypatch.setattr(build_mpi, "candidates", lambda: [("/nonexistent/bin/mpicc", "SHARDWISE_MPICC")])
    found = build_mpi.find("1", strict=False)
    assert found.required and not found.ok and "/nonexistent/bin/mpicc" in found.reason
    with pytest.raises(SystemExit, match=r"SHARDWISE_MPI=1 but shardwise._mpi cannot be built: no MPI found"):
        build_mpi.find("1")
    assert not build_mpi.find("auto").required
    from setuptools.command.build_ext import build_ext
    from setuptools.dist import Distribution
    cmd = build_mpi.with_mpi(build_ext, found)(Distribution())
    with pytest.raises(SystemExit, match=r"pip install \"\.\[mpi\]\""):
        cmd.run()
    backend = _tool("build_backend")
    monkeypatch.setenv("SHARDWISE_MPI", "1")
    assert "mpich>=4.3" in backend._extra()
    monkeypatch.setenv("SHARDWISE_MPI", "auto")
    assert not any(w.startswith("mpich") for w in backend._extra())
