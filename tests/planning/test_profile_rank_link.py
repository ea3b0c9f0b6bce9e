"""A profile's rank link (rank_bandwidth, rank_latency): saved and loaded with it, read by
sw.simulate(plan, ranks=..., costs=profile).  Measuring it under mpiexec is
tests/distributed/test_link.py's."""
from __future__ import annotations

import json

import pytest

import shardwise as sw
from shardwise.planning.profile import Profile, machine_fingerprint, profile


def graph() -> sw.Graph:
    g = sw.Graph("tiny")
    x = g.input("x", (4, 2, 6, 6))
    x = g.conv2d(x, 4, kernel=3, padding=1, name="c1")
    x = g.linear(g.flatten(x, name="f"), 3, name="fc")
    g.softmax(x, name="prob")
    return g


def test_the_rank_link_round_trips_through_save_and_load(tmp_path):
    g = graph()
    prof = Profile(g.fingerprint(), machine_fingerprint(), {("c1", (1, 1, 1, 1)): (1e-4, 2e-4)}, copy_bandwidth=5e9,
                   rank_bandwidth=2.5e9, rank_latency=3.75e-5)
    path = tmp_path / "p.json"
    prof.save(path)
    back = Profile.load(path, g)
    assert (back.rank_bandwidth, back.rank_latency) == (2.5e9, 3.75e-5)
    assert back == prof
    # a file written before the rank link existed reads as not measured
    data = json.loads(path.read_text())
    del data["rank_bandwidth"], data["rank_latency"]
    path.write_text(json.dumps(data))
    old = Profile.load(path, g)
    assert (old.rank_bandwidth, old.rank_latency) == (0.0, 0.0) and old.times == prof.times


def test_simulate_takes_the_rank_link_from_the_profile():
    g = graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    fp = g.fingerprint()
    plain = Profile(fp, {})
    linked = Profile(fp, {}, rank_bandwidth=1e6, rank_latency=1e-4)
    # one process: the rank link is not used
    assert sw.simulate(plan, costs=linked).iteration_time == sw.simulate(plan, costs=plain).iteration_time
    # two ranks: the profile's link; rank_link= overrides it
    slow = sw.simulate(plan, costs=linked, ranks=2)
    assert slow.iteration_time > sw.simulate(plan, costs=plain, ranks=2).iteration_time
    assert sw.simulate(plan, costs=plain, ranks=2, rank_link=(1e6, 1e-4)).iteration_time == slow.iteration_time


def test_profile_without_a_job_measures_no_link(tmp_path, monkeypatch):
    """Outside mpiexec (no launcher variables) profile() starts no MPI and leaves the link 0."""
    from shardwise import distributed

    for var, _ in distributed.LAUNCHER_SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(distributed, "init", lambda *a, **k: pytest.fail("MPI started outside a job"))
    prof = profile(graph(), sw.DeviceGraph.cpu(1), repeats=1, cache_dir=str(tmp_path))
    assert (prof.rank_bandwidth, prof.rank_latency) == (0.0, 0.0)
