"""The link between ranks (sw.distributed.measure_link) and a profile measured in an MPI job:
the rank side is link_cases.py, launched under mpiexec -n 2 with a hard timeout as
test_comm.py launches its cases (skipped where MPI is absent).  No timing is compared."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import shardwise as sw
from shardwise.distributed.link import fit_link, measure_link

from test_comm import _env, _need_mpi, mpiexec_n, run_hard

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "link_cases.py")


def launch(n: int, case: str, timeout: float = 60.0, **env: str):
    cmd, extra = mpiexec_n(n)
    return run_hard(cmd + [sys.executable, CASES, case], _env(**extra, **env), timeout=timeout)


def test_measure_link_under_mpiexec_gives_a_positive_bandwidth_and_latency():
    _need_mpi()
    rc, out, _ = launch(2, "link")
    assert rc == 0, out
    assert sorted(re.findall(r"\[case ok: rank (\d+)\]", out)) == ["0", "1"], out


def test_profile_in_a_job_measures_the_rank_link_on_rank_0_for_every_rank(tmp_path):
    _need_mpi()
    rc, out, _ = launch(2, "profile", timeout=120.0, PROFILE_CACHE=str(tmp_path))
    assert rc == 0, out
    assert sorted(re.findall(r"\[case ok: rank (\d+)\]", out)) == ["0", "1"], out


# ---------------------------------------------------------------- without MPI


def test_fit_link_recovers_latency_and_bandwidth():
    sizes = np.array([1 << 10, 1 << 14, 1 << 17, 1 << 20, 4 << 20])
    bw, lat = fit_link(sizes, 5e-6 + sizes / 8e9)
    assert bw == pytest.approx(8e9, rel=1e-9) and lat == pytest.approx(5e-6, rel=1e-9)
    # a negative intercept: the line through the origin; one size: its rate
    bw, lat = fit_link([1000, 2000], [1e-6, 3e-6])
    assert bw > 0 and lat == 0.0
    assert fit_link([1000], [1e-6]) == (1e9, 0.0)
    with pytest.raises(sw.ConfigError):
        fit_link([1000, 2000], [1e-6])


class _OneRank:
    rank, size = 0, 1


def test_measure_link_needs_two_ranks():
    with pytest.raises(sw.ConfigError, match="2 or more ranks"):
        measure_link(_OneRank())
