"""Measured costs: every partition the search may choose is measured, cached and checked."""
from __future__ import annotations

import json

import pytest

import shardwise as sw
from shardwise.profile import Profile, ProfileMismatch, _partitions


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(2)
    cache = tmp_path_factory.mktemp("profiles")
    return g, d, cache, sw.profile(g, d, repeats=1, cache_dir=str(cache))


def test_every_partition_is_measured(measured):
    g, d, _, prof = measured
    for op_name, partitions in _partitions(g, d).items():
        for degrees in partitions:
            fwd, bwd = prof.split(op_name, degrees)
            assert fwd >= 0 and bwd >= 0
            if g[op_name].kind in ("conv2d", "linear"):
                assert fwd > 0 and bwd > 0
    assert prof.task_overhead > 0 and prof.copy_bandwidth > 1e8
    assert {"accumulate", "update"} <= set(prof.element_seconds)


def test_search_and_simulation_use_the_measurements(measured):
    g, d, _, prof = measured
    plan = sw.search(g, d, costs=prof)
    assert plan.search_stats["profiled_shards"] > 0
    assert plan.cost == pytest.approx(plan.search_stats["searched_cost"], rel=1e-9)
    conv = {r.op: r for r in plan.layer_costs()}["conv1"]
    assert conv.t_c == pytest.approx(sum(prof.split("conv1", plan["conv1"].degrees)))
    sim = sw.simulate(plan, costs=prof)
    assert sim.iteration_time > 0


def test_cached_profile_is_reused_and_foreign_ones_refused(measured, tmp_path, capsys):
    g, d, cache, prof = measured
    again = sw.profile(g, d, repeats=1, cache_dir=str(cache))
    assert again.times == prof.times                     # loaded, not measured again
    path = next(cache.iterdir())
    data = json.loads(path.read_text())
    data["machine"]["cpu"] = "some other CPU"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(ProfileMismatch, match="another machine"):
        Profile.load(other, g)
    with pytest.raises(ProfileMismatch, match="another graph"):
        Profile.load(path, sw.models.lenet5(batch=16))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ProfileMismatch):
        Profile.load(tmp_path / "bad.json", g)
    path.write_text(json.dumps(data))                    # a stale cache entry is measured again
    fresh = sw.profile(g, d, repeats=1, cache_dir=str(cache))
    assert "measuring again" in capsys.readouterr().err
    assert set(fresh.times) == set(prof.times)
