"""--model of plan, simulate and train: a zoo name, an ONNX file, or module:function; and
`python -m shardwise models`, which must list exactly what --model accepts.

Each form is run through ``cli.main`` with real files (ONNX files written with onnx.helper,
Python modules written to a temporary folder), and each failure must be one ``error:`` line
and exit status 2.
"""
from __future__ import annotations

import itertools
import json
import sys
import textwrap

import numpy as np
import pytest

import shardwise as sw
from shardwise import cli
from shardwise.models.spec import load_model

_COUNTER = itertools.count()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]


def need_sklearn():
    pytest.importorskip("sklearn", reason="training from the command line uses scikit-learn's digits")


# ----------------------------------------------------------------------------- the listing
def listed_names(out: str) -> list[str]:
    """The model names of the `models` table: rows whose second column is a parameter count."""
    names = []
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 2 and cols[1].replace(",", "").isdigit():
            names.append(cols[0])
    return names


def test_models_lists_exactly_what_model_accepts(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0
    names = listed_names(out)
    # every builder the zoo has, and nothing else
    assert sorted(names) == sorted(set(sw.models.ZOO) | set(sw.models.SMALL) | set(sw.models.LARGE))
    for name in names:   # each one is accepted by --model (it builds)
        assert load_model(name).graph.num_parameters() > 0
    assert "PATH.onnx" in out and "module:function" in out
    code, _, err = run(capsys, "plan", "--model", "lenet7", "--quiet")
    line = one_error_line(code, err)
    assert "unknown model 'lenet7'" in line and ".onnx" in line and "module:function" in line


def test_a_listed_small_model_plans(capsys):
    code, out, err = run(capsys, "plan", "--model", "vgg_small", "--devices", "2", "--quiet", "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["name"] == "vgg_small"


# ----------------------------------------------------------------------------- ONNX files
def digits_onnx(path, batch="N", channels: int = 1, unsupported: bool = False) -> dict[str, np.ndarray]:
    """A small digits classifier (x (batch, channels, 32, 32) -> conv -> relu -> pool -> fc 10)
    written with onnx.helper; returns its initializers."""
    onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = {"conv.weight": (rng.standard_normal((4, channels, 3, 3)) * 0.3).astype(np.float32),
             "conv.bias": (rng.standard_normal(4) * 0.1).astype(np.float32),
             "fc.weight": (rng.standard_normal((10, 4 * 16 * 16)) * 0.05).astype(np.float32),
             "fc.bias": np.zeros(10, np.float32)}
    act = helper.make_node("Exp" if unsupported else "Relu", ["c"], ["r"], name="act")
    nodes = [helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], name="conv", pads=[1, 1, 1, 1]), act,
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flat", axis=1),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["out"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "digits", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [batch, channels, 32, 32])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    return inits


def test_plan_an_onnx_file(capsys, tmp_path):
    path = tmp_path / "digits.onnx"
    digits_onnx(path)
    code, out, err = run(capsys, "plan", "--model", str(path), "--batch", "16", "--devices", "2",
                         "--device-type", "cpu", "--quiet", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"]["batch"] == 16 and doc["model"]["parameters"] == 4 * 9 + 4 + 10 * 1024 + 10
    assert set(doc["ops"]) == {"x", "conv", "pool", "flat", "fc", "softmax"}
    code, _, err = run(capsys, "plan", "--model", str(path), "--quiet")   # no --batch for its symbolic batch
    line = one_error_line(code, err)
    assert "symbolic batch dimension 'N'" in line and "--batch" in line


def test_simulate_an_onnx_file(capsys, tmp_path):
    path = tmp_path / "digits.onnx"
    digits_onnx(path, batch=8)
    code, out, err = run(capsys, "simulate", "--model", str(path), "--devices", "2", "--device-type", "cpu",
                         "--quiet")
    assert code == 0, err
    assert "(the plan)" in out and "data" in out


def test_train_an_onnx_file_starts_from_its_weights(capsys, tmp_path):
    """With a learning rate of 0 the checkpoint holds exactly the file's initializers: the
    command trained from them, not from a fresh initialization."""
    need_sklearn()
    path, ckpt = tmp_path / "digits.onnx", tmp_path / "run.ckpt"
    inits = digits_onnx(path)
    code, out, err = run(capsys, "train", "--model", str(path), "--devices", "1", "--epochs", "1", "--batch", "32",
                         "--plan", "data", "--lr", "0", "--momentum", "0", "--weight-decay", "0", "--checkpoint",
                         str(ckpt), "--quiet")
    assert code == 0, err
    assert "test accuracy" in out
    g, _ = sw.from_onnx(str(path), batch=32)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)))
    t.load_checkpoint(ckpt)
    got = t.get_weights()
    assert set(got) == set(inits)
    for k, v in inits.items():
        np.testing.assert_array_equal(got[k], v)


@pytest.mark.parametrize("command", ["plan", "simulate", "train"])
def test_onnx_errors(capsys, tmp_path, command):
    extra = ["--quiet"] + (["--devices", "1", "--epochs", "1"] if command == "train" else [])
    code, _, err = run(capsys, command, "--model", str(tmp_path / "missing.onnx"), *extra)
    assert "cannot read the ONNX file" in one_error_line(code, err)
    bad = tmp_path / "bad.onnx"
    digits_onnx(bad, batch=64, unsupported=True)
    code, _, err = run(capsys, command, "--model", str(bad), *extra)
    line = one_error_line(code, err)
    assert "ONNX op Exp" in line and "'act'" in line and "bad.onnx" in line


def test_train_refuses_a_model_that_is_not_for_the_digits(capsys, tmp_path):
    path = tmp_path / "rgb.onnx"
    digits_onnx(path, channels=3)
    code, _, err = run(capsys, "train", "--model", str(path), "--devices", "1", "--quiet")
    line = one_error_line(code, err)
    assert "cannot be trained on the digits" in line and "(64, 3, 32, 32)" in line
    code, _, err = run(capsys, "train", "--model", "resnet18")
    assert "only lenet5" in one_error_line(code, err)


def test_a_file_not_named_onnx(capsys, tmp_path):
    path = tmp_path / "model.pb"
    path.write_bytes(b"whatever")
    code, _, err = run(capsys, "plan", "--model", str(path), "--quiet")
    assert "not named *.onnx" in one_error_line(code, err)


# ----------------------------------------------------------------------------- module:function
MODULE = '''
import numpy as np
import shardwise as sw

def tiny(batch=32):
    g = sw.Graph("tiny")
    x = g.input("image", (batch, 1, 32, 32))
    x = g.conv2d(x, 4, kernel=3, padding=1, activation="relu", name="conv")
    x = g.pool2d(x, kernel=4, stride=4, kind="max")
    g.softmax(g.linear(g.flatten(x), 10, name="fc"), name="prob")
    return g

def with_weights(batch=32):
    g = tiny(batch)
    rng = np.random.default_rng(7)
    shapes = {"conv.weight": (4, 1, 3, 3), "conv.bias": (4,), "fc.weight": (10, 256), "fc.bias": (10,)}
    return g, {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in shapes.items()}

def no_batch():
    return tiny(16)

def boom(batch=32):
    raise ValueError("boom")

def wrong_type(batch=32):
    return 42

def ignores_batch(batch=32):
    return tiny(16)

NOT_CALLABLE = 3
'''


@pytest.fixture
def module(tmp_path, monkeypatch):
    """A fresh module (a new name each test: imports are cached) in the current directory."""
    name = f"mynets_{next(_COUNTER)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_plan_a_function(capsys, module):
    code, out, err = run(capsys, "plan", "--model", f"{module}:tiny", "--devices", "2", "--device-type", "cpu",
                         "--quiet", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"]["batch"] == 32 and set(doc["ops"]) == {"image", "conv", "pool2d_0", "flatten_0", "fc", "prob"}
    code, out, err = run(capsys, "plan", "--model", f"{module}:tiny", "--batch", "8", "--devices", "2",
                         "--device-type", "cpu", "--quiet", "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["batch"] == 8   # called as tiny(batch=8)


def test_simulate_a_function_without_a_batch_argument(capsys, module):
    code, out, err = run(capsys, "simulate", "--model", f"{module}:no_batch", "--devices", "2", "--device-type",
                         "cpu", "--quiet")
    assert code == 0, err
    assert "(the plan)" in out


def test_train_a_function_with_weights(capsys, module, tmp_path):
    need_sklearn()
    ckpt = tmp_path / "f.ckpt"
    code, out, err = run(capsys, "train", "--model", f"{module}:with_weights", "--devices", "2", "--epochs", "1",
                         "--batch", "32", "--plan", "data", "--lr", "0", "--momentum", "0", "--weight-decay", "0",
                         "--checkpoint", str(ckpt), "--quiet")
    assert code == 0, err
    g, weights = sys.modules[module].with_weights(32)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.load_checkpoint(ckpt)
    for k, v in weights.items():
        np.testing.assert_array_equal(t.get_weights()[k], v)


def test_the_current_directory_is_searched_without_python_dash_m(module, monkeypatch, tmp_path):
    """The `shardwise` console script does not put the current directory on sys.path."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    loaded = load_model(f"{module}:tiny", batch=4)
    assert loaded.graph.ops[0].shape == (4, 1, 32, 32) and loaded.weights is None
    assert str(tmp_path) not in sys.path   # put back as it was


@pytest.mark.parametrize("spec,batch,fragments", [
    ("nosuchmodule_xyz:f", None, ["cannot import the module 'nosuchmodule_xyz'", "current directory"]),
    ("{m}:missing", None, ["has no attribute 'missing'", ".py"]),
    ("{m}:NOT_CALLABLE", None, ["is a int, not a function"]),
    ("{m}:boom", None, ["{m}:boom() raised ValueError: boom (at {m}.py:"]),
    ("{m}:wrong_type", None, ["returned int", "Graph or (graph, weights)"]),
    ("{m}:no_batch", "8", ["cannot be called as no_batch(batch=8)", "leave out --batch"]),
    ("{m}:ignores_batch", "8", ["ignores_batch(batch=8) returned a graph", "{{'image': 16}}"]),
    ("not a module:f", None, ["is not module:function"]),
])
def test_function_errors(capsys, module, spec, batch, fragments):
    spec = spec.format(m=module)
    argv = ["plan", "--model", spec, "--quiet"] + (["--batch", batch] if batch else [])
    line = one_error_line(*run(capsys, *argv)[::2])
    for fragment in fragments:
        assert fragment.format(m=module) in line, line


def test_a_module_that_fails_to_import(capsys, tmp_path, monkeypatch):
    (tmp_path / "broken_mod.py").write_text("import nosuchdependency_xyz\n")
    (tmp_path / "raising_mod.py").write_text("x = 1\nraise RuntimeError('bad config')\n")
    monkeypatch.chdir(tmp_path)
    try:
        line = one_error_line(*run(capsys, "plan", "--model", "broken_mod:f", "--quiet")[::2])
        assert "importing the module 'broken_mod' failed" in line and "nosuchdependency_xyz" in line
        line = one_error_line(*run(capsys, "plan", "--model", "raising_mod:f", "--quiet")[::2])
        assert "RuntimeError: bad config (at raising_mod.py:2)" in line
    finally:
        sys.modules.pop("broken_mod", None)
        sys.modules.pop("raising_mod", None)
