"""Measured costs: every partition the search may choose is measured, cached and checked."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

import shardwise as sw
from shardwise.planning.profile import Profile, ProfileMismatch, _partitions


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
    assert prof.copy_bandwidth > 1e8
    assert not hasattr(prof, "task_overhead") and not hasattr(prof, "wake_latency")   # no interpreter models
    assert {"accumulate", "update"} <= set(prof.element_seconds)


def test_search_and_simulation_use_the_measurements(measured):
    g, d, _, prof = measured
    plan = sw.search(g, d, costs=prof, objective="eq1")
    assert plan.search_stats["profiled_shards"] > 0
    assert plan.cost == pytest.approx(plan.search_stats["searched_cost"], rel=1e-9)
    conv = {r.op: r for r in plan.layer_costs()}["conv1"]
    assert conv.t_c == pytest.approx(sum(prof.split("conv1", plan["conv1"].degrees)))
    sim = sw.simulate(plan, costs=prof)
    assert sim.iteration_time > 0


def test_a_plan_remembers_the_costs_it_was_searched_with(measured):
    """Issue 16 point 6: simulate, compare and the simulated objective use the plan's costs."""
    g, d, _, prof = measured
    plan = sw.search(g, d, costs=prof)
    assert plan.costs is prof
    by_default, explicit = sw.simulate(plan), sw.simulate(plan, costs=prof)
    roofline = sw.simulate(plan, costs="roofline")
    assert by_default.iteration_time == explicit.iteration_time
    assert by_default.iteration_time != roofline.iteration_time   # the measured times are not the model's
    assert by_default.costs_used.startswith("measured") and roofline.costs_used == "the roofline model"
    # the search's simulated time of its plan is the one simulate gives with the plan's costs
    assert plan.search_stats["simulated_time"] == pytest.approx(by_default.iteration_time, rel=1e-12)
    c = plan.compare()
    assert c.costs_used == by_default.costs_used
    assert c.plan.simulated == pytest.approx(by_default.iteration_time, rel=1e-12)
    with pytest.raises(sw.ConfigError, match="roofline"):
        sw.simulate(plan, costs="measured")


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
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ProfileMismatch, match="not a shardwise profile"):
        Profile.load(tmp_path / "list.json", g)
    path.write_text(json.dumps(data))                    # a stale cache entry is measured again
    fresh = sw.profile(g, d, repeats=1, cache_dir=str(cache))
    assert "measuring again" in capsys.readouterr().err
    assert set(fresh.times) == set(prof.times)


def test_bookkeeping_costs_fit_every_round_and_the_step_overhead_is_measured(monkeypatch, tmp_path):
    """Bookkeeping seconds = fixed + rate x elements, fitted over the tasks of all rounds: a
    round whose only reduction is a tiny one must not set the rate of the big ones."""
    import sys

    profile_module = sys.modules["shardwise.planning.profile"]   # sw.profile is the function
    fixed, rate = 1e-5, 1e-9
    rounds = [({}, {}, {"reduce": [(fixed + rate * 1e6, 10**6)]}, 2e-4),
              ({}, {}, {"reduce": [(fixed + rate * 100, 100)], "update": [(4e-6, 10)]}, 4e-4),
              ({}, {}, {"reduce": [(fixed + rate * 2e6, 2 * 10**6)]}, 3e-4)]
    monkeypatch.setattr(profile_module, "_measure_rounds", lambda g, d, plans, *a, **k: rounds[:len(plans)])
    monkeypatch.setattr(profile_module, "_partitions", lambda g, d: {op.name: [(1,) * len(op.shape)] * 3 for op in g.ops})
    g = sw.models.lenet5(batch=8)
    prof = sw.profile(g, sw.DeviceGraph.cpu(2), cache_dir=str(tmp_path))
    assert prof.element_fixed["reduce"] == pytest.approx(fixed, rel=1e-6)
    assert prof.element_seconds["reduce"] == pytest.approx(rate, rel=1e-6)
    assert (prof.element_fixed["update"], prof.element_seconds["update"]) == (0.0, pytest.approx(4e-7))
    assert prof.step_overhead == pytest.approx(3e-4)
    again = Profile.load(next(tmp_path.iterdir()), g)
    assert again.step_overhead == prof.step_overhead and again.element_seconds == prof.element_seconds
    assert again.element_fixed == prof.element_fixed


def test_a_version_6_profile_is_refused_and_measured_again(measured, tmp_path, capsys):
    """Version 6 files carried a per-task overhead and a wake latency for the simulator's
    interpreter models, which are gone: such a file is refused by name of its version, and
    ``sw.profile`` measures again instead of reading it."""
    g, d, cache, prof = measured
    data = prof.to_dict()
    assert data["version"] == 7 and "task_overhead" not in data and "wake_latency" not in data
    old = dict(data, version=6, task_overhead=0.0, wake_latency=0.0)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.raises(ProfileMismatch, match="version 6; this shardwise reads version 7 only"):
        Profile.load(path, g)
    stale = tmp_path / "cache"
    stale.mkdir()
    (stale / next(cache.iterdir()).name).write_text(json.dumps(old))
    fresh = sw.profile(g, d, repeats=1, cache_dir=str(stale))
    assert "measuring again" in capsys.readouterr().err and set(fresh.times) == set(prof.times)
    assert json.loads(next(stale.iterdir()).read_text())["version"] == 7


@pytest.mark.parametrize("samples, expected", [
    ([(3.0, 1), (5.0, 2), (7.0, 3)], (1.0, 2.0)),          # exact line
    ([(2.0, 1), (2.0, 1)], (0.0, 2.0)),                     # one size: through the origin
    ([(5.0, 1), (4.0, 2), (3.0, 3)], (4.0, 0.0)),           # falling: a constant
    ([(0.0, 1), (1.0, 3), (2.0, 5)], (0.0, 13 / 35)),       # negative intercept: through the origin
    ([(2.0, 0)], (2.0, 0.0)),
    ([], (0.0, 0.0)),
])
def test_fit_line_is_least_squares_and_never_negative(samples, expected):
    from shardwise.planning.profile import fit_line

    fixed, rate = fit_line(samples)
    assert fixed >= 0 and rate >= 0
    assert (fixed, rate) == (pytest.approx(expected[0]), pytest.approx(expected[1]))


def test_the_step_overhead_of_a_real_profile_is_small_and_positive(measured):
    _, _, _, prof = measured
    assert 0 < prof.step_overhead < 0.05


def test_the_rounds_are_sampled_in_turns(monkeypatch):
    """Every round's steps are spread over the whole profiling time (round 0, 1, 2, 0, 1, 2, ...),
    not taken in one block each, so that no round alone catches a slow stretch of the machine."""
    import sys

    profile_module = sys.modules["shardwise.planning.profile"]
    order: list[tuple[str, int]] = []

    class FakeProbe:
        def __init__(self, graph, devices, configs, backend="cpu"):
            self.k = configs["k"]

        def sample_step(self):
            order.append(("step", self.k))

        def result(self):
            return self.k

    monkeypatch.setattr(profile_module, "_RoundProbe", FakeProbe)
    out = profile_module._measure_rounds(None, None, [{"k": 0}, {"k": 1}, {"k": 2}], repeats=2)
    assert out == [0, 1, 2]
    steps = [k for what, k in order if what == "step"]
    assert steps == [0, 1, 2, 0, 1, 2]


def test_a_shard_time_is_the_slowest_worker_of_each_step(tmp_path):
    """Per step the slowest shard of an op, then the median over steps: a core slow in every
    step, but not always the same one, still shows."""
    g, d = sw.models.lenet5(batch=8), sw.DeviceGraph.cpu(2)
    from shardwise.planning.profile import _RoundProbe
    from shardwise.plan import OpConfig
    from shardwise.planning.problem import dim_names

    configs = {op.name: OpConfig(dim_names(len(op.shape)), (2,) + (1,) * (len(op.shape) - 1), (0, 1))
               for op in g.ops}
    probe = _RoundProbe(g, d, configs)
    probe.fwd.clear()
    tasks = probe.tg.tasks
    conv1 = {t.worker: t.id for t in tasks if t.op == "conv1" and t.kind == "forward"}
    # three steps' seconds of conv1's forward on workers 0 and 1: the slow one alternates
    for w0, w1 in ((1.0, 3.0), (3.0, 1.0), (1.0, 3.0)):
        ns = np.zeros((len(tasks), 2), np.int64)
        ns[conv1[0]] = (0, int(w0 * 1e9))
        ns[conv1[1]] = (0, int(w1 * 1e9))
        probe._record_step(ns, total=4.0)
    assert probe.fwd["conv1"] == [3.0, 3.0, 3.0]
    assert probe.outside == [1.0, 1.0, 1.0]


def test_kernel_seconds_counts_the_calling_threads_kernels_only():
    """``_core.kernel_seconds`` is per thread: a kernel run on another thread leaves this
    thread's total alone, and a thread starts from zero."""
    import threading

    import numpy as np

    from shardwise import _core

    x = np.ones((16, 3, 32, 32), np.float32)
    w = np.ones((8, 3, 5, 5), np.float32)

    def conv():
        _core.conv2d_forward(x, (0, 0, 0, 0), w, (0, 0, 0, 0), None, None, (0, 0, 0, 0), (16, 8, 28, 28),
                             (1, 1), (0, 0), False)

    before = _core.kernel_seconds()
    seen = []

    def other():
        seen.append(_core.kernel_seconds())
        for _ in range(5):
            conv()
        seen.append(_core.kernel_seconds())

    th = threading.Thread(target=other)
    th.start()
    th.join()
    assert seen[0] == 0.0 and seen[1] > 0
    assert _core.kernel_seconds() == before
    t0 = time.perf_counter()
    conv()
    wall = time.perf_counter() - t0
    spent = _core.kernel_seconds() - before
    assert 0 < spent <= wall


def test_between_steps_runs_after_every_timed_step(tmp_path):
    g, d = sw.models.lenet5(batch=8), sw.DeviceGraph.cpu(2)
    calls = []
    sw.profile(g, d, repeats=2, cache_dir=str(tmp_path), between_steps=lambda: calls.append(1))
    assert len(calls) == 2 * max(len(v) for v in _partitions(g, d).values())
    sw.profile(g, d, repeats=2, cache_dir=str(tmp_path), between_steps=lambda: calls.append(1))   # cached
    assert len(calls) == 2 * max(len(v) for v in _partitions(g, d).values())
    with pytest.raises(ValueError, match="repeats"):
        sw.profile(g, d, repeats=0, cache_dir=str(tmp_path / "other"))


def test_measured_step_time_is_the_median_of_real_steps():
    from shardwise.planning.profile import measured_step_time

    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    t0 = time.perf_counter()
    seconds = measured_step_time(g, plan, steps=3)
    assert 0 < seconds < time.perf_counter() - t0
    with pytest.raises(ValueError, match="steps"):
        measured_step_time(g, plan, steps=0)


def test_profile_names_its_backends(tmp_path):
    """backend= takes 'cpu' or 'cuda'; anything else is a ValueError before anything is measured,
    and 'cuda' without a usable GPU says what is missing (the CUDA backend's own error)."""
    g = sw.models.lenet5(batch=4)
    d = sw.DeviceGraph.cpu(1)
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        sw.profile(g, d, backend="tpu", cache_dir=str(tmp_path), progress=False)
    if not sw.cuda.status()[0]:
        with pytest.raises(sw.ConfigError, match="CUDA|cuda|GPU"):
            sw.profile(g, d, backend="cuda", cache_dir=str(tmp_path), progress=False)
    assert not list(tmp_path.iterdir())   # nothing measured, nothing cached
