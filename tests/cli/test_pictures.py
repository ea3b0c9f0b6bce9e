"""Pictures and traces (issue 17 point 7): plotting leaves pyplot and the backend alone, the
strategy picture groups chains of ops split alike, and simulated and measured timelines export
to the Chrome trace / Perfetto format with the times they hold."""
from __future__ import annotations

import json

import numpy as np
import pytest

import shardwise as sw
from shardwise.viz import plan_boxes

matplotlib = pytest.importorskip("matplotlib", reason="matplotlib not installed: pip install matplotlib")


def test_plotting_never_switches_the_backend_nor_opens_pyplot_figures(tmp_path):
    import matplotlib.pyplot as plt

    plt.close("all")
    before = matplotlib.get_backend()
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    figs = [plan.plot(str(tmp_path / "p.png")), plan.plot(),
            sw.simulate(plan).plot_timeline(str(tmp_path / "t.png")), sw.simulate(plan).plot_timeline()]
    assert matplotlib.get_backend() == before
    assert plt.get_fignums() == []          # nothing for pyplot (a notebook) to show a second time
    assert all(isinstance(f, matplotlib.figure.Figure) for f in figs)
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def _consumers(graph) -> list[int]:
    out = [0] * len(graph.ops)
    for op in graph.ops:
        for i in op.inputs:
            out[i] += 1
    return out


def _mergeable(plan, consumers, a: int, b: int) -> bool:
    ops = plan.graph.ops
    return (ops[b].inputs == (a,) and consumers[a] == 1
            and str(plan.configs[ops[a].name]) == str(plan.configs[ops[b].name]))


@pytest.mark.parametrize("model,devices", [("inception_v3", 8), ("resnet18", 4), ("vgg16", 4), ("lenet5", 2)])
def test_boxes_are_the_maximal_chains_of_ops_split_alike(model, devices):
    g = getattr(sw.models, model)()
    plan = sw.search(g, sw.DeviceGraph.cluster(1, devices), objective="eq1")
    boxes = plan_boxes(plan)
    assert sorted(i for box in boxes for i in box) == list(range(len(g.ops)))    # a partition
    consumers = _consumers(g)
    for box in boxes:
        assert all(_mergeable(plan, consumers, a, b) for a, b in zip(box, box[1:]))
        first = g.ops[box[0]]
        if len(first.inputs) == 1:   # maximal: the box could not have started earlier
            assert not _mergeable(plan, consumers, first.inputs[0], box[0])
    if model == "inception_v3":
        assert len(boxes) < len(g.ops) / 3   # conv > batch norm > relu chains fold


def test_a_chain_split_alike_is_one_box_and_a_change_of_split_starts_another(tmp_path):
    g = sw.Graph("chain")
    x = g.input("x", (8, 3, 16, 16))
    y = g.relu(g.conv2d(x, 4, 3, padding=1, name="c1"), name="r1")
    y = g.relu(g.conv2d(y, 4, 3, padding=1, name="c2"), name="r2")
    g.softmax(g.linear(g.flatten(y, name="flat"), 10, name="fc"), name="loss")
    d = sw.DeviceGraph.cpu(2)
    spec = {op.name: {"n": 2} for op in g.ops}
    spec["c2"] = spec["r2"] = {"c": 2}
    plan = sw.Plan.from_dict(g, d, spec)
    names = [[g.ops[i].name for i in box] for box in plan_boxes(plan)]
    assert names == [["x", "c1", "r1"], ["c2", "r2"], ["flat", "fc", "loss"]]
    fig = plan.plot(str(tmp_path / "chain.png"))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert len(texts) == 3
    assert texts[1].startswith("c2 .. r2") and "2 ops: conv2d > relu" in texts[1] and "c=2 on 0-1" in texts[1]


def _x_events(doc):
    lanes = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    return lanes, [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_the_simulated_trace_holds_every_task_on_every_resource_it_held(tmp_path):
    g = sw.models.alexnet()
    plan = sw.search(g, sw.DeviceGraph.cluster(1, 4), objective="eq1")
    sim = sw.simulate(plan, check_memory=False)
    path = tmp_path / "sim.json"
    sim.save_trace(str(path))
    lanes, xs = _x_events(json.loads(path.read_text()))
    held = [(e, r) for e in sim.events for r in e.resources]
    assert len(xs) == len(held)
    by_task = {}
    for x in xs:
        by_task.setdefault(x["args"]["task"], set()).add(lanes[x["tid"]])
    for e in sim.events:
        assert by_task.get(e.task, set()) == set(e.resources)
    for x, (e, r) in zip(xs, held):
        assert x["ts"] == pytest.approx(e.start * 1e6) and x["dur"] == pytest.approx((e.end - e.start) * 1e6)
        assert x["cat"] == e.phase and lanes[x["tid"]] == r
    for tid in lanes:   # every resource runs one task at a time: no two events of a lane overlap
        spans = sorted((x["ts"], x["ts"] + x["dur"]) for x in xs if x["tid"] == tid)
        assert all(b0 >= a1 - 1e-6 for (_, a1), (b0, _) in zip(spans, spans[1:]))


def test_the_measured_timeline_is_the_last_step_in_dependency_order(tmp_path):
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    t = sw.Trainer(g, plan)
    with pytest.raises(sw.TrainingError, match="no training step"):
        t.timeline()
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 1, 32, 32), dtype=np.float32), rng.integers(0, 10, 8)
    t.step(x, y)
    t.step(x, y)
    tl = t.timeline()
    tasks = t.task_graph.tasks
    assert len(tl.events) == len(tasks) and tl.name.endswith("step 2")
    start = {e.task: e.start for e in tl.events}
    end = {e.task: e.end for e in tl.events}
    for task in tasks:
        assert 0 <= start[task.id] <= end[task.id] <= tl.step_time
        assert all(start[task.id] >= end[d] for d in task.deps), task   # measured, yet ordered
    for lane in {e.resources[0] for e in tl.events}:   # fifo: a device's tasks one after another
        spans = sorted((e.start, e.end) for e in tl.events if e.resources[0] == lane)
        assert all(b0 >= a1 for (_, a1), (b0, _) in zip(spans, spans[1:]))
    path = tmp_path / "step.json"
    tl.save_trace(path)
    lanes, xs = _x_events(json.loads(path.read_text()))
    assert sorted(lanes.values()) == ["device 0", "device 1"] and len(xs) == len(tasks)


def test_timeline_labels_wide_bars_with_their_op_and_keeps_the_legend_beside_the_lanes():
    g = sw.models.alexnet()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(1, 2))
    sim = sw.simulate(plan, check_memory=False)
    fig = sim.plot_timeline()
    ax = fig.axes[0]
    labels = [t for t in ax.texts if t.get_gid() == "op label"]
    assert labels
    for t in labels:   # each label sits at the middle of a bar of the op it names
        x, _ = t.get_position()
        assert any(e.op == t.get_text() and abs((e.start + e.end) / 2 * 1e3 - x) < 1e-9 for e in sim.events)
    names = {t.get_text() for t in labels}
    assert "conv1" in names or "fc6" in names   # the widest compute is labelled
    fig.canvas.draw()
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes.x1   # off the bars


def test_trace_transfers_carry_their_bytes_and_ends(tmp_path):
    """Every transfer of the simulated trace names its bytes and devices, as the task graph
    has them; their sum over the copy tasks is the simulation's bytes moved."""
    g = sw.models.lenet5(batch=16)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(1, 2))
    sim = sw.simulate(plan, check_memory=False)
    path = tmp_path / "t.json"
    sim.save_trace(str(path))
    tasks = sw.lower(plan).tasks
    seen = {}
    for e in _x_events(json.loads(path.read_text()))[1]:
        t = tasks[e["args"]["task"]]
        if t.kind == "copy":
            assert e["args"]["bytes"] == t.nbytes > 0
            assert (e["args"]["from_device"], e["args"]["to_device"]) == (t.src_device, t.device)
            seen[t.id] = (t.nbytes, t.src_device != t.device)
        else:
            assert "bytes" not in e["args"]
    assert seen and sum(b for b, between in seen.values() if between) == sim.bytes_moved


def test_a_large_timeline_marks_the_critical_path_by_lane_and_labels_what_fits():
    """Inception-v3 on 4 GPUs: one collection of critical-path strips per lane (not one per
    task, which drew for 40 s and blacked the lanes out), strips under the bars."""
    g = sw.models.get("inception_v3", batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(1, 4))
    sim = sw.simulate(plan, schedule=sw.schedule(plan), check_memory=False)
    ax = sim.plot_timeline().axes[0]
    strips = [c for c in ax.collections if c.get_gid() == "critical path"]
    lanes = len(ax.get_yticklabels())
    assert 0 < len(strips) <= lanes
    for c in strips:   # below each lane's bars (y grows downwards: the lane's centre is its row)
        ys = np.concatenate([p.vertices[:, 1] for p in c.get_paths()])
        row = round(ys.min())
        assert ys.min() >= row + 0.29 and ys.max() <= row + 0.43


@pytest.mark.parametrize("model", ["alexnet", "vgg16"])
def test_the_strategy_pictures_title_fits_the_figure(model):
    g = sw.models.get(model)
    fig = sw.search(g, sw.DeviceGraph.cluster(1, 4), progress=False).plot()
    fig.canvas.draw()
    title = fig.axes[0].title.get_window_extent()
    frame = fig.bbox
    assert frame.x0 <= title.x0 and title.x1 <= frame.x1 and title.y1 <= frame.y1
