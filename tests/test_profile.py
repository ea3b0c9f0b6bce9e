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


def test_bookkeeping_costs_fit_every_round_and_the_step_overhead_is_measured(monkeypatch, tmp_path):
    """Bookkeeping seconds = fixed + rate x elements, fitted over the tasks of all rounds: a
    round whose only reduction is a tiny one must not set the rate of the big ones."""
    import sys

    profile_module = sys.modules["shardwise.profile"]   # sw.profile is the function
    fixed, rate = 1e-5, 1e-9
    rounds = iter([({}, {}, 1e-5, {"reduce": [(fixed + rate * 1e6, 10**6)]}, 2e-4),
                   ({}, {}, 3e-5, {"reduce": [(fixed + rate * 100, 100)], "update": [(4e-6, 10)]}, 4e-4),
                   ({}, {}, 2e-5, {"reduce": [(fixed + rate * 2e6, 2 * 10**6)]}, 3e-4)])
    monkeypatch.setattr(profile_module, "_measure_round", lambda *a, **k: next(rounds))
    monkeypatch.setattr(profile_module, "_partitions", lambda g, d: {op.name: [(1,) * len(op.shape)] * 3 for op in g.ops})
    g = sw.models.lenet5(batch=8)
    prof = sw.profile(g, sw.DeviceGraph.cpu(2), cache_dir=str(tmp_path))
    assert prof.element_fixed["reduce"] == pytest.approx(fixed, rel=1e-6)
    assert prof.element_seconds["reduce"] == pytest.approx(rate, rel=1e-6)
    assert (prof.element_fixed["update"], prof.element_seconds["update"]) == (0.0, pytest.approx(4e-7))
    assert prof.task_overhead == pytest.approx(2e-5) and prof.step_overhead == pytest.approx(3e-4)
    again = Profile.load(next(tmp_path.iterdir()), g)
    assert again.step_overhead == prof.step_overhead and again.element_seconds == prof.element_seconds
    assert again.element_fixed == prof.element_fixed


@pytest.mark.parametrize("samples, expected", [
    ([(3.0, 1), (5.0, 2), (7.0, 3)], (1.0, 2.0)),          # exact line
    ([(2.0, 1), (2.0, 1)], (0.0, 2.0)),                     # one size: through the origin
    ([(5.0, 1), (4.0, 2), (3.0, 3)], (4.0, 0.0)),           # falling: a constant
    ([(0.0, 1), (1.0, 3), (2.0, 5)], (0.0, 13 / 35)),       # negative intercept: through the origin
    ([(2.0, 0)], (2.0, 0.0)),
    ([], (0.0, 0.0)),
])
def test_fit_line_is_least_squares_and_never_negative(samples, expected):
    from shardwise.profile import fit_line

    fixed, rate = fit_line(samples)
    assert fixed >= 0 and rate >= 0
    assert (fixed, rate) == (pytest.approx(expected[0]), pytest.approx(expected[1]))


def test_the_step_overhead_of_a_real_profile_is_small_and_positive(measured):
    _, _, _, prof = measured
    assert 0 < prof.step_overhead < 0.05
    assert 0 < prof.wake_latency < 0.01
