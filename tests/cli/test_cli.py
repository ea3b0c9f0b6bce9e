"""The command line, and the worked example of docs/cost-model.md.

The first half recomputes every number of the worked example by hand (the
arithmetic of the document, written out) and checks it against what the C core
returns, so the document cannot drift from the code.  The second half runs
``python -m shardwise`` through ``cli.main`` on small models.
"""
import json
import subprocess
import sys

import pytest

import shardwise as sw
from shardwise import cli

# ---------------------------------------------------------------- worked example
# P100 preset: 9.3 TFLOP/s, 732 GB/s memory, 20 GB/s NVLink between the two devices.
FLOPS, MEMBW, LINK = 9.3e12, 732e9, 20e9
B = 4  # bytes per float32 element
BWD = 3  # backward_factor: forward + backward = 3 x forward


def tiny_graph() -> sw.Graph:
    g = sw.Graph("tiny")
    x = g.input("image", (64, 3, 32, 32))
    x = g.conv2d(x, 16, kernel=3, padding=1, activation="relu", name="conv1")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, 10, name="fc")
    g.softmax(x, name="prob")
    return g


def two_p100() -> sw.DeviceGraph:
    return sw.DeviceGraph.cluster(nodes=1, devices_per_node=2, device="P100")


def roofline(flops: float, elements: float) -> float:
    """t_c of one worker: max(FLOPs / FLOP/s, bytes / memory bandwidth) x backward_factor."""
    return max(flops / FLOPS, elements * B / MEMBW) * BWD


DATA = {name: {"n": 2} for name in ("image", "conv1", "flatten", "fc", "prob")}
SPATIAL = dict(DATA, image={"h": 2}, conv1={"h": 2})
CHANNEL_FC = dict(DATA, fc={"c": 2}, prob={})

# conv1 on a half batch (n=2): 32 x 16 x 32 x 32 outputs, each 3*3*3 multiply-adds + bias
CONV_OUT = 32 * 16 * 32 * 32                                   # 524,288
CONV_FLOPS = CONV_OUT * 27 * 2 + CONV_OUT                      # 28,835,840
CONV_W = 16 * 3 * 3 * 3 + 16                                   # 432 weights + 16 biases
TC_CONV_N2 = roofline(CONV_FLOPS, CONV_OUT + 32 * 3 * 32 * 32 + CONV_W)    # memory-bound
TC_CONV_H2 = roofline(CONV_FLOPS, CONV_OUT + 64 * 3 * 17 * 32 + CONV_W)    # 16 rows + 1 halo row
TX_CONV_H2 = 2 * (64 * 3 * 1 * 32 * B / LINK)                  # 2 workers x 1 remote row (no gradient into the input)
TS_CONV_PS = 2 * 432 * B / LINK + 2 * 16 * B / LINK            # 1 non-server replica, push + pull
TC_FLATTEN_N2 = roofline(0, 2 * 32 * 16384)                    # copy: read + write
FC_OUT = 32 * 10
TC_FC_N2 = roofline(FC_OUT * 16384 * 2 + FC_OUT, FC_OUT + 32 * 16384 + 163840 + 10)
TS_FC_PS = 2 * 163840 * B / LINK + 2 * 10 * B / LINK
TS_FC_RING = 2 * (2 - 1) / 2 * (163840 + 10) * B / LINK
TC_PROB_N2 = roofline(32 * 10 * 5, 2 * 32 * 10)
TX_FLATTEN_AFTER_H2 = 2 * (32 * 16 * 16 * 32 * B * 2 / LINK)  # half the rows of its samples are remote
TC_FC_C2 = roofline(64 * 5 * 16384 * 2 + 64 * 5, 64 * 5 + 64 * 16384 + 5 * 16384 + 5)
TX_FC_C2 = 2 * (32 * 16384 * B * 2 / LINK)                     # each fc worker reads the other half batch
TX_PROB_ONE = 64 * 5 * B * 2 / LINK                            # fc's half on device 1, prob on device 0


def rows(plan: sw.Plan) -> dict[str, sw.LayerCost]:
    return {r.op: r for r in plan.layer_costs()}


def test_worked_example_hand_numbers():
    """The literal values printed in docs/cost-model.md."""
    assert TC_CONV_N2 == pytest.approx(10.2138e-6, rel=1e-4)
    assert TC_CONV_H2 == pytest.approx(10.3145e-6, rel=1e-4)
    assert TX_CONV_H2 == pytest.approx(2.4576e-6, rel=1e-9)
    assert TS_CONV_PS == pytest.approx(0.1792e-6, rel=1e-9)
    assert TC_FLATTEN_N2 == pytest.approx(17.1898e-6, rel=1e-4)
    assert TC_FC_N2 == pytest.approx(11.2862e-6, rel=1e-4)
    assert TS_FC_PS == pytest.approx(65.540e-6, rel=1e-9)
    assert TS_FC_RING == pytest.approx(32.770e-6, rel=1e-9)
    assert TX_FLATTEN_AFTER_H2 == pytest.approx(209.7152e-6, rel=1e-9)
    assert TC_FC_C2 == pytest.approx(18.5380e-6, rel=1e-4)
    assert TX_FC_C2 == pytest.approx(419.4304e-6, rel=1e-9)


def test_worked_example_data_parallel():
    g, d = tiny_graph(), two_p100()
    plan = sw.Plan.from_dict(g, d, DATA)
    r = rows(plan)
    assert r["image"].t_c == 0 and r["image"].t_x == 0 and r["image"].t_s == 0
    assert r["conv1"].t_c == pytest.approx(TC_CONV_N2, rel=1e-12)
    assert r["conv1"].t_x == 0                       # each worker already holds its half batch
    assert r["conv1"].t_s == pytest.approx(TS_CONV_PS, rel=1e-12)
    assert r["flatten"].t_c == pytest.approx(TC_FLATTEN_N2, rel=1e-12)
    assert r["fc"].t_c == pytest.approx(TC_FC_N2, rel=1e-12)
    assert r["fc"].t_s == pytest.approx(TS_FC_PS, rel=1e-12)
    assert r["prob"].t_c == pytest.approx(TC_PROB_N2, rel=1e-12)
    compute = TC_CONV_N2 + TC_FLATTEN_N2 + TC_FC_N2 + TC_PROB_N2
    assert plan.breakdown["compute"] == pytest.approx(compute, rel=1e-12)
    assert plan.breakdown["transfer"] == 0
    assert plan.breakdown["sync"] == pytest.approx(TS_CONV_PS + TS_FC_PS, rel=1e-12)
    assert plan.cost == pytest.approx(104.419e-6, rel=1e-5)
    assert plan.bytes_moved == 2 * (432 + 16) * B + 2 * (163840 + 10) * B   # 1,314,384
    # the data-parallel baseline is exactly this plan
    assert sw.strategies.data_parallel(g, d).cost == pytest.approx(plan.cost, rel=1e-12)


def test_worked_example_ring():
    g, d = tiny_graph(), two_p100()
    plan = sw.Plan.from_dict(g, d, DATA, options=sw.CostOptions(sync="ring"))
    r = rows(plan)
    assert r["fc"].t_s == pytest.approx(TS_FC_RING, rel=1e-12)
    assert r["conv1"].t_s == pytest.approx(TS_CONV_PS / 2, rel=1e-12)
    assert r["fc"].bytes_sync == 2 * (163840 + 10) * B    # same bytes as the parameter server for r = 2


def test_worked_example_height_split_halo():
    g, d = tiny_graph(), two_p100()
    plan = sw.Plan.from_dict(g, d, SPATIAL)
    r = rows(plan)
    assert r["conv1"].t_c == pytest.approx(TC_CONV_H2, rel=1e-12)
    assert r["conv1"].t_x == pytest.approx(TX_CONV_H2, rel=1e-12)
    assert r["conv1"].bytes_in == 2 * 64 * 3 * 32 * B          # 49,152: forward only
    assert r["conv1"].t_s == pytest.approx(TS_CONV_PS, rel=1e-12)
    assert r["flatten"].t_x == pytest.approx(TX_FLATTEN_AFTER_H2, rel=1e-12)
    assert plan.cost == pytest.approx(316.6934e-6, rel=1e-5)


def test_worked_example_channel_parallel_fc():
    g, d = tiny_graph(), two_p100()
    plan = sw.Plan.from_dict(g, d, CHANNEL_FC)
    r = rows(plan)
    assert r["fc"].t_c == pytest.approx(TC_FC_C2, rel=1e-12)
    assert r["fc"].t_x == pytest.approx(TX_FC_C2, rel=1e-12)
    assert r["fc"].t_s == 0                          # no replicas: each worker owns half the weights
    assert r["prob"].config.devices == (0,)
    assert r["prob"].t_x == pytest.approx(TX_PROB_ONE, rel=1e-12)
    assert plan.cost == pytest.approx(465.700e-6, rel=1e-5)


def test_worked_example_search_prefers_one_device():
    g, d = tiny_graph(), two_p100()
    plan = sw.search(g, d)
    assert all(c.workers == 1 for _, c in plan)
    expected = (roofline(64 * 16 * 32 * 32 * 55, 64 * 16 * 32 * 32 + 64 * 3 * 32 * 32 + CONV_W)
                + roofline(0, 2 * 64 * 16384)
                + roofline(64 * 10 * 16384 * 2 + 640, 640 + 64 * 16384 + 163840 + 10)
                + roofline(64 * 10 * 5, 2 * 640))
    assert plan.cost == pytest.approx(expected, rel=1e-12)
    assert plan.cost == pytest.approx(74.707e-6, rel=1e-4)
    for base in sw.strategies.baselines(g, d):
        assert plan.cost <= base.cost


# ---------------------------------------------------------------- the command line
def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_strategy_table_and_baselines(capsys):
    code, out, err = run_cli(capsys, "plan", "--model", "lenet5", "--devices", "2")
    assert code == 0
    assert "Plan 'searched' for 'lenet5'" in out
    for op in sw.models.lenet5().op_names():
        assert op in out
    table = out[out.index("strategy"):]
    for name in ("searched", "data", "model", "owt"):
        assert any(line.split()[0] == name for line in table.splitlines()[2:] if line.strip())
    assert "faster than the best baseline" in out
    assert "fewer bytes than data parallelism" in out
    # progress of the search stages goes to stderr
    assert "[shardwise] enumerate configurations" in err
    assert "elimination search" in err
    assert "Traceback" not in err


def test_plan_quiet_has_no_progress(capsys):
    code, out, err = run_cli(capsys, "plan", "--model", "lenet5", "--devices", "2", "--quiet")
    assert code == 0 and err == ""
    assert "owt" in out


def test_plan_json(capsys):
    code, out, err = run_cli(capsys, "plan", "--model", "lenet5", "--devices", "1x4", "--json", "--quiet",
                             "--sync", "ring")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["format"] == "shardwise-plan" and doc["version"] == 1
    assert doc["cost_model"]["sync"] == "ring"
    assert doc["devices"]["count"] == 4
    assert [b["name"] for b in doc["baselines"]] == ["data", "model", "owt"]
    for b in doc["baselines"]:
        assert set(b) == {"name", "cost", "breakdown", "bytes_moved"}
        assert b["cost"] >= doc["estimate"]["cost"] * (1 - 1e-12)
        assert set(b["breakdown"]) == {"compute", "transfer", "sync"}
    assert doc["search_stats"]["algorithm"] == "elimination"
    assert "timings" in doc["search_stats"]
    assert [row["op"] for row in doc["layers"]] == list(doc["ops"])
    assert doc["comparison"]["speedup_vs_best_baseline"] >= 1 - 1e-12
    # the document is a plan file: it loads back onto the same graph and devices
    g = sw.models.lenet5()
    d = sw.DeviceGraph.parse("1x4")
    plan = sw.Plan.from_json_dict(doc, g, d)
    assert plan.cost == pytest.approx(doc["estimate"]["cost"], rel=1e-12)


def test_plan_save_and_load(capsys, tmp_path):
    path = tmp_path / "lenet.json"
    code, out, err = run_cli(capsys, "plan", "--model", "lenet5", "--batch", "32", "--devices", "2",
                             "--device-type", "V100", "--algorithm", "exhaustive", "--save", str(path))
    assert code == 0
    assert f"plan saved to {path}" in err
    g = sw.models.lenet5(batch=32)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=2, device="V100")
    plan = sw.Plan.load(path, g, d)
    assert plan.graph.ops[0].shape[0] == 32
    assert f"{plan.cost * 1e3:.3f} ms" in out
    with pytest.raises(sw.PlanFileError):
        sw.Plan.load(path, sw.models.lenet5(batch=64), d)


@pytest.mark.parametrize("argv, message", [
    (["plan", "--model", "no_such_net"], "unknown model 'no_such_net'"),
    (["plan", "--model", "lenet5", "--devices", "4x"], "cannot read device count"),
    (["plan", "--model", "lenet5", "--devices", "0"], "positive"),
    (["plan", "--model", "lenet5", "--batch", "0"], "batch"),
    (["plan", "--model", "lenet5", "--device-type", "TPU"], "invalid choice"),
    (["plan", "--model", "lenet5", "--algorithm", "greedy"], "invalid choice"),
    (["plan", "--model", "alexnet", "--devices", "2", "--algorithm", "exhaustive"],
     "--algorithm exhaustive would try about 10^"),
    (["plan", "--model", "alexnet", "--devices", "2", "--algorithm", "exhaustive"], "than --max-evaluations=2e+07"),
    (["plan", "--model", "alexnet", "--devices", "2", "--algorithm", "exhaustive", "--max-evaluations", "100"],
     "than --max-evaluations=100; pass a larger --max-evaluations, or use --algorithm elimination"),
    (["plan", "--model", "alexnet", "--max-evaluations", "nan"], "--max-evaluations must be a finite number"),
    (["plan", "--model", "alexnet", "--time-limit", "0"], "--time-limit must be a positive number"),
    (["plan", "--model", "alexnet", "--max-evaluations", "lots"], "invalid float value"),
    (["plan", "--model", "lenet5", "--devices", "2", "--save", "/nonexistent-dir/p.json"], "cannot write"),
    (["frobnicate"], "invalid choice"),
    ([], "COMMAND"),
])
def test_bad_input_exits_2_with_error(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv, "--quiet") if argv[:1] == ["plan"] else run_cli(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    if argv:
        assert "error:" in err


def test_models_lists_zoo_with_parameter_counts(capsys):
    code, out, err = run_cli(capsys, "models")
    assert code == 0
    for name in sw.models.names():
        assert name in out
    assert "138,357,544" in out      # VGG-16
    assert "25,557,032" in out       # ResNet-50
    assert "61,706" in out           # LeNet-5


def test_help_and_version_exit_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "plan" in capsys.readouterr().out
    assert cli.main(["plan", "--help"]) == 0
    assert "--device-type" in capsys.readouterr().out
    assert cli.main(["--version"]) == 0
    assert sw.__version__ in capsys.readouterr().out


def test_python_dash_m_entry_point():
    done = subprocess.run([sys.executable, "-m", "shardwise", "plan", "--model", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown model 'nope'")
    from shardwise.__main__ import main
    assert main(["models"]) == 0


# ---------------------------------------------------------------- the README
def readme_blocks(lang: str) -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    parts = text.split("```")
    return [body[len(lang):].strip() for body in parts[1::2] if body.startswith(lang + "\n")]


def test_readme_quick_start_has_exactly_two_commands():
    blocks = readme_blocks("bash")
    assert blocks == ['pip install . && python -m shardwise plan --model vgg16 --devices 4x4',
                      'pip install ".[test]" && python -m pytest -q']
    from pathlib import Path

    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert 'pip install ".[test]"\npython -m pytest -q\n' in ci


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    (block,) = readme_blocks("python")
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "owt" in out and (tmp_path / "p.json").exists()


def test_readme_vgg16_numbers(capsys):
    """The figures the README quotes for the quick-start command."""
    code, out, err = run_cli(capsys, "plan", "--json", "--quiet")   # defaults: vgg16 on 4x4 P100
    assert code == 0
    doc = json.loads(out)
    costs = {b["name"]: b["cost"] for b in doc["baselines"]}
    assert doc["estimate"]["cost"] == pytest.approx(0.488, abs=0.0005)
    assert costs["owt"] == pytest.approx(0.598, abs=0.0005)
    assert costs["data"] == pytest.approx(1.552, abs=0.0005)
    assert doc["comparison"]["bytes_fewer_than_data_parallel"] == pytest.approx(8.3, abs=0.05)
    assert doc["ops"]["conv1_1"]["n"] == 16 and doc["ops"]["fc6"]["c"] == 2
    simulated = doc["search_stats"]["simulated"]
    assert doc["search_stats"]["simulated_time"] == pytest.approx(0.431, abs=0.0005)
    assert simulated["eq1 optimum"] == pytest.approx(0.434, abs=0.0005)
    assert simulated["owt"] == pytest.approx(0.493, abs=0.0005)
    assert simulated["data"] == pytest.approx(1.359, abs=0.0005)
    peaks = [d["peak_bytes"] for d in doc["memory"]]
    assert max(peaks) == pytest.approx(2.91e9, abs=0.005e9)
    assert sum(peaks) == pytest.approx(35e9, abs=0.5e9)
    assert all(d["peak_bytes"] <= d["memory_bytes"] == 16e9 for d in doc["memory"])


def test_plan_prints_memory_and_refuses_when_nothing_fits(capsys):
    code, out, _ = run_cli(capsys, "plan", "--model", "alexnet", "--devices", "4", "--quiet")
    assert code == 0
    (line,) = [x for x in out.splitlines() if x.startswith("memory")]
    assert line.count("/16 GB") == 4
    # Inception-v3 at batch 512 keeps about 67 GB of activations for the backward pass: 4 K80s have 48 GB
    code, out, err = run_cli(capsys, "plan", "--model", "inception_v3", "--devices", "4", "--device-type", "K80",
                             "--quiet")
    assert code == 2 and out == ""
    assert "no plan fits" in err and "12.00 GB" in err and "swap_plan" in err


def test_plan_objective_eq1_prints_the_eq1_optimum(capsys):
    code, out, _ = run_cli(capsys, "plan", "--model", "alexnet", "--devices", "4", "--objective", "eq1",
                           "--json", "--quiet")
    assert code == 0
    doc = json.loads(out)
    assert doc["search_stats"]["objective"] == "eq1"
    assert doc["estimate"]["cost"] == pytest.approx(doc["search_stats"]["searched_cost"], rel=1e-12)
    assert "simulated" not in doc["search_stats"]
    code, out, _ = run_cli(capsys, "plan", "--model", "alexnet", "--devices", "4", "--quiet")
    simulated_line = [line for line in out.splitlines() if line.startswith("simulated:")]
    assert len(simulated_line) == 1 and "owt" in simulated_line[0] and "roofline" in simulated_line[0]


def test_simulate_prints_plan_and_baselines_and_draws(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png, strategy = tmp_path / "t.png", tmp_path / "s.png"
    code, out, err = run_cli(capsys, "simulate", "--model", "alexnet", "--devices", "2x2", "--png", str(png),
                             "--strategy-png", str(strategy))
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and
            line.split()[0] in ("searched", "data", "model", "owt")}
    assert set(rows) == {"searched", "data", "model", "owt"}
    simulated = {k: float(v[-5] if k == "searched" else v[1]) for k, v in rows.items()}
    # the searched plan simulates faster than data parallelism (seed 003's claim, under overlap)
    assert simulated["searched"] < simulated["data"]
    assert png.stat().st_size > 1000 and strategy.stat().st_size > 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_bad_input_exits_2(capsys, tmp_path):
    code, _, err = run_cli(capsys, "simulate", "--model", "alexnet", "--devices", "4", "--plan", "nonsense")
    assert code == 2 and "unknown plan" in err
    missing = str(tmp_path / "missing.json")
    code, _, err = run_cli(capsys, "simulate", "--model", "lenet5", "--devices", "2", "--quiet", "--plan", missing)
    assert code == 2 and f"the plan file {missing!r} does not exist" in err
    code, _, err = run_cli(capsys, "simulate", "--model", "lenet5", "--devices", "2", "--quiet", "--png",
                           str(tmp_path / "missing" / "dir" / "t.png"))
    assert code == 2 and "error:" in err


def test_plan_time_limit_prints_the_warning_with_flags(capsys, monkeypatch):
    """A search stopped by --time-limit prints the plan and one warning line naming the flag."""
    import importlib

    monkeypatch.setattr(importlib.import_module("shardwise.planning.search"), "SCALE_ABOVE", -1)
    code, out, err = run_cli(capsys, "plan", "--model", "resnet18", "--batch", "32", "--devices", "2x4",
                             "--time-limit", "1e-9", "--quiet")
    assert code == 0 and "estimated iteration" in out
    lines = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(lines) == 1 and "--time-limit" in lines[0] and "time_limit" not in lines[0]
