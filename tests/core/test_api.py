"""The public API of issue 2, called exactly as the issue spells it out."""
from __future__ import annotations

import json

import pytest

import shardwise as sw


def tiny_graph() -> sw.Graph:
    g = sw.Graph("tiny")
    x = g.input("image", (64, 3, 32, 32))
    x = g.conv2d(x, 16, kernel=3, stride=1, padding=1, activation="relu", name="conv1")
    x = g.pool2d(x, kernel=2, stride=2, kind="max")
    a = g.conv2d(x, 8, kernel=1)
    b = g.conv2d(x, 8, kernel=3, padding=1)
    x = g.concat([a, b], axis=1)
    x = g.relu(g.batchnorm2d(x))
    x = g.linear(g.flatten(x), 10, name="fc")
    g.softmax(x, name="prob")
    return g


def test_graph_builder_contract():
    g = tiny_graph()
    assert g["conv1"].shape == (64, 16, 32, 32)
    assert g["fc"].shape == (64, 10)
    names = g.op_names()
    assert names[0] == "image" and names[-1] == "prob" and len(set(names)) == len(names)
    # conv1 16*3*9+16, conv 8*16+8, conv 8*16*9+8, bn 2*16, fc 16*16*16*10+10
    assert g.num_parameters() == (16 * 27 + 16) + (8 * 16 + 8) + (8 * 16 * 9 + 8) + 32 + (4096 * 10 + 10)
    assert g.flops() > 2 * 64 * 16 * 32 * 32 * 27
    x = g.ops[0]
    assert x.kind == "input"


def test_devices_contract():
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")
    assert len(d) == 16
    r = d.route_bandwidths()
    assert r[0, 1] == 20e9 and r[0, 4] == 12.5e9
    assert len(sw.DeviceGraph.cpu(4)) == 4
    d = sw.DeviceGraph()
    a = d.add_device("gpu0", flops=9.3e12, memory=16e9)
    b = d.add_device("gpu1", flops=9.3e12, memory=16e9)
    d.add_link(a, b, bandwidth=20e9)
    assert d.route_bandwidths()[1, 0] == 20e9


def test_search_plan_contract(tmp_path):
    g = tiny_graph()
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4, device="P100")
    plan = sw.search(g, d, objective="eq1")
    dp = sw.strategies.data_parallel(g, d)
    mp = sw.strategies.model_parallel(g, d)
    owt = sw.strategies.owt(g, d)
    for baseline in (dp, mp, owt):
        assert plan.cost <= baseline.cost * (1 + 1e-12)
    assert set(plan.breakdown) == {"compute", "transfer", "sync"}
    assert sum(plan.breakdown.values()) == pytest.approx(plan.cost)
    assert plan.bytes_moved >= 0
    cfg = plan["conv1"]
    assert cfg.workers == len(cfg.devices) and set(cfg.as_dict()) == {"n", "c", "h", "w"}
    rows = plan.layer_costs()
    assert [r.op for r in rows] == g.op_names()
    text = plan.summary()
    assert "conv1" in text and "estimated iteration" in text
    path = tmp_path / "p.json"
    plan.save(path)
    again = sw.Plan.load(path, g, d)
    assert again.configs == plan.configs and again.cost == pytest.approx(plan.cost)
    data = json.loads(path.read_text())
    assert data["format"] == "shardwise-plan" and data["version"] == 1


def test_user_plan_contract():
    g = tiny_graph()
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4, device="P100")
    own = sw.Plan.from_dict(g, d, {"conv1": {"n": 4}, "fc": {"c": 2}})
    assert own["conv1"].as_dict() == {"n": 4, "c": 1, "h": 1, "w": 1}
    assert own["conv1"].devices == (0, 1, 2, 3)
    assert own["fc"].as_dict() == {"n": 1, "c": 2} and own["fc"].devices == (0, 1)
    assert own["prob"].workers == 1 and own["prob"].devices == (0,)   # not listed: one worker
    assert own.cost >= sw.search(g, d, objective="eq1").cost * (1 - 1e-12)


def test_elimination_equals_exhaustive_on_tiny_graph():
    g = sw.Graph("chain")
    x = g.input("x", (8, 4, 8, 8))
    x = g.conv2d(x, 4, kernel=3, padding=1, name="c1")
    x = g.pool2d(x, kernel=2, name="p")
    g.conv2d(x, 4, kernel=3, padding=1, name="c2")
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=2)
    a = sw.search(g, d, objective="eq1")
    b = sw.search(g, d, algorithm="exhaustive")
    assert a.cost == pytest.approx(b.cost, rel=1e-12)


@pytest.mark.calibration   # compares this thread's pauses with the work's time
def test_search_releases_the_gil():
    """While the C core builds tables and searches, other Python threads run."""
    from strategies_random import assert_other_threads_run

    g = sw.models.inception_v3(batch=512)
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4)
    sw.search(g, d, objective="eq1")  # warm up
    assert_other_threads_run(lambda: sw.search(g, d, options=sw.CostOptions(threads=1), objective="eq1"))


def test_search_stats_report_residual_graph():
    g = sw.models.inception_v3(batch=64)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4)
    plan = sw.search(g, d, objective="eq1")
    s = plan.search_stats
    assert s["algorithm1_residual_nodes"] == 2   # seed 003 Table 3: K = 2 for Inception-v3
    assert s["residual_nodes"] == 1
    assert plan.cost == pytest.approx(s["searched_cost"], rel=1e-12)


def test_the_package_never_imports_torch():
    """PyTorch is installed for the tests (an oracle) but is no dependency: importing every
    module of the package, and training a step, must not load it."""
    import subprocess
    import sys

    code = (
        "import pkgutil, importlib, sys, numpy as np\n"
        "import shardwise as sw\n"
        "for m in pkgutil.walk_packages(sw.__path__, 'shardwise.'):\n"
        "    if m.name != 'shardwise.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "g = sw.models.lenet5(batch=2)\n"
        "t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))\n"
        "t.step(np.zeros((2, 1, 32, 32), np.float32), np.zeros(2, np.int64))\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_summary_says_when_devices_stay_idle():
    """A plan that leaves devices without work says which, in the summary; one that uses
    every device says nothing of it."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cluster(1, 8)
    dp = sw.strategies.data_parallel(g, d)
    assert dp.idle_devices() == [] and "get no work" not in dp.summary()
    half = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(1, 4))
    lopsided = sw.Plan(g, d, {name: c for name, c in half.configs.items()}, name="on 4 of 8")
    assert lopsided.idle_devices() == [4, 5, 6, 7]
    assert "note: 4 of 8 devices get no work from this plan (devices 4-7)" in lopsided.summary()


def test_sizes_for_people():
    from shardwise.sizes import format_bytes

    assert [format_bytes(n) for n in (0, 1, 2, 999, 1000, 2_004_048, 1.5e9, 2.91e12)] == [
        "0 bytes", "1 byte", "2 bytes", "999 bytes", "1.00 KB", "2.00 MB", "1.50 GB", "2.91 TB"]
