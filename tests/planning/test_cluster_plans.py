"""benchmarks/cluster_plans.py's row builder and check on a tiny GPT and one 8-GPU node.

The rows (data, Megatron x data, ZeRO, searched) come out with their columns, the searched plan
is never slower than the data-parallel baseline it is compared with, and the check line says
PASS beside a fake slower baseline and FAIL beside a fake faster one that fits (not beside one
that does not fit, nor when no searched plan exists and nothing fits).  Not timed.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

import shardwise as sw

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, os.pardir, os.pardir, "benchmarks", "cluster_plans.py")


@pytest.fixture(scope="module")
def cp():
    spec = importlib.util.spec_from_file_location("cluster_plans", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_plans"] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(cp):
    # 4 heads: tensor parallel over 4, data over 2; large enough for steps of tenths of a ms
    g = sw.models.gpt(layers=1, d_model=256, heads=4, seq=256, vocab=1024, batch=16)
    devices = sw.DeviceGraph.cluster(1, 8, device="H100")
    options = sw.CostOptions(sync="ring", precision="bf16", reduction_splits=True)
    return cp.plan_rows(g, devices, options, sw.models.megatron_dp_spec, 4, time_limit=60)


def searched_row(rows):
    return next(r for r in rows if r.kind == "searched")


def test_rows_have_every_plan_kind_and_their_columns(cp, rows):
    kinds = [r.kind for r in rows]
    zero = cp.zero_available()
    also_zero = ["searched, zero sync"] if zero else []
    assert kinds == ["data", "megatron 4 x data 2", "ZeRO (data)", "searched", *also_zero]
    if zero:
        assert rows[2].time > 0 and rows[-1].time > 0
    else:
        assert rows[2].time is None and rows[2].note == "n/a (not available)"
    found = searched_row(rows)
    for r in (rows[0], rows[1], found):
        assert r.time > 0 and 0 < r.arena < 80e9 and r.fits
    assert found.search_s is not None and rows[0].search_s is None
    lines = cp.format_rows(rows)
    assert lines[0].split() == ["plan", "step", "ms", "GB/device", "search", "s"]
    assert len(lines) == len(rows) + 2 and lines[-1].startswith("  check: ")
    line = lines[1 + kinds.index("searched")].split()
    assert line[0] == "searched" and float(line[1]) == pytest.approx(found.time * 1e3, abs=0.01)
    assert found.time <= rows[0].time     # the search replays data parallelism and keeps the faster
    # the verdict follows the figures: PASS exactly when no fitting baseline beats the faster search
    best = min(r.time for r in rows if r.kind.startswith("searched") and r.time is not None)
    beaten = [r.kind for r in rows if not r.kind.startswith("searched") and r.time is not None and r.fits
              and r.time < best]
    assert lines[-1].startswith("  check: FAIL" if beaten else "  check: PASS")
    assert all(kind in lines[-1] for kind in beaten)


def test_check_passes_beside_a_slower_baseline_and_fails_beside_a_faster_one(cp, rows):
    data, searched = rows[0], searched_row(rows)        # searched <= data (above)
    slower = cp.Row("fake slow", searched.time * 2, arena=1, fits=True)
    assert cp.check([data, slower, searched]).startswith("PASS")
    faster = cp.Row("fake quick", searched.time / 2, arena=1, fits=True)
    verdict = cp.check([data, slower, faster, searched])
    assert verdict.startswith("FAIL") and "fake quick" in verdict and "fake slow" not in verdict
    too_big = cp.Row("fake quick, too big", searched.time / 2, arena=int(200e9), fits=False)
    assert cp.check([data, too_big, searched]).startswith("PASS")
    assert "200 does not fit" in cp.format_rows([too_big, searched])[1]


def test_check_without_a_searched_plan(cp, rows):
    failed = cp.Row("searched", note="SearchError: no plan fits", search_s=1.0)
    baselines = [r for r in rows if not r.kind.startswith("searched")]
    assert cp.check([*baselines, failed]).startswith("FAIL: no searched plan")
    nothing_fits = [cp.Row("data", 1.0, arena=int(1e12), fits=False), failed]
    assert cp.check(nothing_fits).startswith("PASS (vacuous)")
    assert "SearchError: no plan fits" in cp.format_rows(nothing_fits)[2]


def test_tensor_parallel_degree_stays_inside_a_node(cp):
    assert [cp.tensor_parallel_degree(h) for h in (12, 16, 32, 40, 25)] == [4, 8, 8, 8, 1]
