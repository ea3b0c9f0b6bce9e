"""sw.from_onnx on ONNX graphs written here with onnx.helper (no PyTorch needed): what it
refuses and how it says so, its rules (fusions, names, folding, pruning), and the results of
models no PyTorch exporter writes (MatMul + Add layers, Gemm with transB=0, auto_pad, SiLU
spelled Sigmoid + Mul), checked against onnx's own reference evaluator.

Every refusal must be a ModelImportError naming the node and its op type.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import shardwise as sw

onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "importing.md")
RNG = np.random.default_rng(0)


def rand(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(nodes, inputs, inits=None, outputs=("out",), opset=20, elem=TensorProto.FLOAT):
    """An ONNX model of ``nodes``; ``inputs`` is {name: shape} (a str in a shape is symbolic)."""
    graph = helper.make_graph(
        nodes, "test", [helper.make_tensor_value_info(n, elem, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op, inputs, outputs, name=None, **attrs):
    return helper.make_node(op, inputs, outputs, name=name or f"{op.lower()}_node", **attrs)


def vec(*body, inits=None, **kw):
    """x (2, 4) -> body (writes "h", (2, 4)) -> Gemm "fc" -> out."""
    fc = {"fc.weight": rand(3, 4), "fc.bias": rand(3)}
    return model([*body, node("Gemm", ["h", "fc.weight", "fc.bias"], ["out"], "fc", transB=1)],
                 {"x": [2, 4]}, {**(inits or {}), **fc}, **kw)


def img(*body, inits=None, features=64):
    """x (2, 4, 4, 4) -> body (writes "h") -> Flatten -> Gemm "fc" -> out."""
    fc = {"fc.weight": rand(3, features), "fc.bias": rand(3)}
    return model([*body, node("Flatten", ["h"], ["f"], axis=1), node("Gemm", ["f", "fc.weight", "fc.bias"], ["out"],
                                                                    "fc", transB=1)],
                 {"x": [2, 4, 4, 4]}, {**(inits or {}), **fc})


def const(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name], name=f"const_{name}",
                            value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))


W3 = {"w": rand(4, 4, 3, 3)}

# (id, model, fragments the message must contain)
REFUSED = [
    ("unsupported op", lambda: vec(node("Exp", ["x"], ["h"], "my_exp")), ["ONNX op Exp", "'my_exp'", "importing.md"]),
    ("custom domain", lambda: vec(helper.make_node("Swoosh", ["x"], ["h"], name="sw1", domain="com.acme")),
     ["com.acme.Swoosh", "'sw1'"]),
    ("erf has a hint", lambda: vec(node("Erf", ["x"], ["h"], "erf1")), ["Erf", "'erf1'", "opset_version=20"]),
    ("pow has a hint", lambda: vec(const("three", 3.0, np.float32), node("Pow", ["x", "three"], ["h"], "pow1")),
     ["Pow", "'pow1'", "opset_version=20", "approximate='tanh'"]),
    ("dilated SAME with a stride", lambda: img(node("Conv", ["x", "w"], ["h"], "dc", dilations=[2, 2], strides=[2, 2],
                                                    auto_pad="SAME_UPPER"), inits=W3, features=16),
     ["auto_pad=SAME_UPPER", "(5, 5)", "'dc'"]),
    ("uneven pads", lambda: img(node("Conv", ["x", "w"], ["h"], "uc", pads=[0, 0, 2, 2]), inits=W3, features=64),
     ["pads=[0, 0, 2, 2]", "'uc'"]),
    ("1-D conv", lambda: model([node("Conv", ["x", "w"], ["out"], "c1")], {"x": [2, 4, 8]}, {"w": rand(4, 4, 3)}),
     ["1-D convolution", "'c1'"]),
    ("computed conv weight", lambda: img(const("w", rand(4, 4, 3, 3), np.float32),
                                         node("Conv", ["x", "w"], ["h"], "cw", pads=[1, 1, 1, 1])),
     ["computed weights", "'cw'"]),
    ("gemm alpha", lambda: model([node("Gemm", ["x", "w"], ["out"], "g2", alpha=2.0, transB=1)], {"x": [2, 4]},
                                 {"w": rand(3, 4)}), ["alpha=2.0", "'g2'", "Gemm"]),
    # an initializer that broadcasts is a learned table (a parameter op): one that does not is refused
    ("add a constant", lambda: vec(node("Add", ["x", "c"], ["h"], "addc"), inits={"c": rand(3)}),
     ["adding <initializer 'c'", "'addc'"]),
    ("broadcasting add", lambda: model([node("Add", ["x", "z"], ["h"], "badd"),
                                        node("Gemm", ["h", "w"], ["out"], "fc", transB=1)],
                                       {"x": [2, 4], "z": [2, 3]}, {"w": rand(3, 4)}), ["broadcast", "'badd'"]),
    ("a product", lambda: vec(node("Mul", ["x", "c"], ["h"], "sq"), inits={"c": rand(3)}), ["Mul", "SiLU", "'sq'"]),
    ("unknown GELU form", lambda: vec(node("Gelu", ["x"], ["h"], "tg", approximate="fast")),
     ["approximate='fast'", "'none' and 'tanh'", "'tg'"]),
    ("log-softmax inside", lambda: vec(node("LogSoftmax", ["x"], ["h"], "sm", axis=1)),
     ["only as the model's output", "'sm'"]),
    ("reshape of the batch", lambda: model([const("s", [4, 2]), node("Reshape", ["x", "s"], ["h"], "rs"),
                                            node("Flatten", ["h"], ["out"], "fl", axis=1)], {"x": [2, 4]}),
     ["(2, 4) as (4, 2)", "'rs'", "moves the batch dimension", "'fl'"]),
    ("batch norm eps", lambda: img(node("BatchNormalization", ["x", "s", "b", "m", "v"], ["h"], "bn", epsilon=0.0),
                                   inits={"s": rand(4), "b": rand(4), "m": rand(4), "v": np.ones(4, np.float32)}),
     ["epsilon=0", "'bn'", "a positive number"]),
    ("training dropout ratio 1", lambda: vec(const("r", 1.0, np.float32), const("t", True, np.bool_),
                                             node("Dropout", ["x", "r", "t"], ["h"], "dr")), ["ratio=1.0", "'dr'"]),
    ("tied weights", lambda: model([node("Gemm", ["x", "W"], ["h"], "g1", transB=1),
                                    node("Gemm", ["h", "W"], ["out"], "g2", transB=1)], {"x": [2, 4]},
                                   {"W": rand(4, 4)}), ["tied", "'W'", "'g2'"]),
    ("mean over channels", lambda: img(const("ax", [1]), node("ReduceMean", ["x", "ax"], ["h"], "rm"), features=16),
     ["ReduceMean over axes [1]", "'rm'"]),
    ("concat batch", lambda: model([node("Concat", ["x", "x"], ["h"], "cat0", axis=0),
                                    node("Gemm", ["h", "w"], ["out"], "fc", transB=1)], {"x": [2, 4]},
                                   {"w": rand(3, 4)}), ["axis=0", "'cat0'"]),
    ("max pool indices", lambda: img(node("MaxPool", ["x"], ["h", "idx"], "mp", kernel_shape=[2, 2], strides=[2, 2]),
                                     node("Cast", ["idx"], ["idxf"], "castidx", to=1),
                                     node("Add", ["h", "idxf"], ["h2"], "mix"), features=16),
     ["reading its output 1", "'mp'"]),
    ("undefined input", lambda: vec(node("Relu", ["ghost"], ["h"], "r0")), ["'ghost'", "'r0'"]),
    ("symbolic feature", lambda: model([node("Gemm", ["x", "w"], ["out"], "fc", transB=1)], {"x": [2, "F"]},
                                       {"w": rand(3, 4)}), ["symbolic dimension 'F'"]),
    ("integer input", lambda: model([node("Gemm", ["x", "w"], ["out"], "fc", transB=1)], {"x": [2, 4]},
                                    {"w": rand(3, 4)}, elem=TensorProto.INT64), ["INT64", "float32"]),
    ("two outputs", lambda: model([node("Gemm", ["x", "w"], ["out"], "fc", transB=1), node("Relu", ["x"], ["r"])],
                                  {"x": [2, 4]}, {"w": rand(3, 4)}, outputs=("out", "r")), ["2 outputs"]),
    ("image output", lambda: model([node("Relu", ["x"], ["out"])], {"x": [2, 4, 4, 4]}), ["shape (2, 4, 4, 4)"]),
]


@pytest.mark.parametrize("make_model,fragments", [pytest.param(*c[1:], id=c[0]) for c in REFUSED])
def test_refused_with_the_node_and_op(make_model, fragments):
    m = make_model()
    with pytest.raises(sw.ModelImportError) as info:
        sw.from_onnx(m)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in: {info.value}"


def test_the_file_forms(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(vec(node("Relu", ["x"], ["h"])), str(path))
    g, _ = sw.from_onnx(str(path))
    assert g.name == "m" and sw.from_onnx(path)[0].name == "m"   # str or PathLike
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\x00 this is not protobuf \x12\x99")
    with pytest.raises(sw.ModelImportError, match="not an ONNX model"):
        sw.from_onnx(str(bad))
    with pytest.raises(sw.ModelImportError, match="cannot read the ONNX file .*missing.onnx"):
        sw.from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(sw.ModelImportError, match="takes the path of an .onnx file"):
        sw.from_onnx(42)


def test_batch_sizes():
    m = model([node("Gemm", ["x", "w"], ["out"], "fc", transB=1)], {"x": ["N", 4]}, {"w": rand(3, 4)})
    with pytest.raises(sw.ModelImportError, match="symbolic batch dimension 'N'.*batch=N"):
        sw.from_onnx(m)
    assert sw.from_onnx(m, batch=3)[0].ops[0].shape == (3, 4)
    fixed = model([node("Gemm", ["x", "w"], ["out"], "fc", transB=1)], {"x": [2, 4]}, {"w": rand(3, 4)})
    assert sw.from_onnx(fixed, batch=2)[0].ops[0].shape == (2, 4)
    with pytest.raises(sw.ModelImportError, match="exported with batch 2, not 5"):
        sw.from_onnx(fixed, batch=5)
    with pytest.raises(sw.ModelImportError, match="positive int"):
        sw.from_onnx(fixed, batch=0)


# ----------------------------------------------------------------------------- against onnx's evaluator
def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def assert_predicts_like_onnx(m, inputs: dict[str, np.ndarray], softmax_output: bool):
    from onnx.reference import ReferenceEvaluator

    (out,) = ReferenceEvaluator(m).run(None, inputs)
    want = out if softmax_output else softmax(out.astype(np.float64))
    g, weights = sw.from_onnx(m)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    got = t.predict(inputs if len(inputs) > 1 else next(iter(inputs.values())))
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    return g, weights


def test_layers_other_exporters_write():
    """Conv with auto_pad=SAME_UPPER, a padded AveragePool counting the padding, LeakyRelu,
    GlobalAveragePool, a reshape computed from Shape (x.view(x.size(0), -1) in a trace),
    MatMul + Add (a linear layer with W (in, out)), Gemm with transB=0, a Softmax output."""
    inits = {"W1": rand(5, 3, 3, 3), "B1": rand(5), "W2": rand(5, 6, scale=1.5), "b2": rand(6),
             "W3": rand(6, 4, scale=2.0), "b3": rand(4), "zero": np.array([0], np.int64), "minus1": np.array([-1])}
    nodes = [
        node("Conv", ["x", "W1", "B1"], ["c"], "conv_a", auto_pad="SAME_UPPER"),
        node("Relu", ["c"], ["r"], "relu_a"),
        node("AveragePool", ["r"], ["p"], "pool_a", kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
             count_include_pad=1),
        node("LeakyRelu", ["p"], ["l"], "leaky", alpha=0.3),
        node("GlobalAveragePool", ["l"], ["gp"], "gap"),
        node("Shape", ["gp"], ["shp"], "shape"),
        node("Gather", ["shp", "zero"], ["n"], "gather", axis=0),
        node("Concat", ["n", "minus1"], ["target"], "target", axis=0),
        node("Reshape", ["gp", "target"], ["f"], "view"),
        node("MatMul", ["f", "W2"], ["mm"], "mm"),
        node("Add", ["mm", "b2"], ["lin"], "bias"),
        node("Tanh", ["lin"], ["t"], "tanh"),
        node("Gemm", ["t", "W3", "b3"], ["logits"], "head", transB=0),
        node("Softmax", ["logits"], ["out"], "prob", axis=1),
    ]
    m = model(nodes, {"x": [4, 3, 9, 9]}, inits)
    g, weights = assert_predicts_like_onnx(m, {"x": rand(4, 3, 9, 9, scale=1.0)}, softmax_output=True)
    assert [(op.name, op.kind) for op in g.ops] == [
        ("x", "input"), ("W1", "conv2d"), ("pool_a", "pool2d"), ("leaky", "leaky_relu"), ("gap", "pool2d"),
        ("view", "flatten"), ("W2", "linear"), ("tanh", "tanh"), ("W3", "linear"), ("prob", "softmax")]
    assert g["W1"].attrs["activation"] == "relu" and g["W1"].attrs["padding"] == (1, 1)
    assert g["leaky"].attrs["negative_slope"] == 0.3   # not float32's 0.30000001192...
    np.testing.assert_array_equal(weights["W2.weight"], inits["W2"].T)   # PyTorch's (out, in)
    np.testing.assert_array_equal(weights["W3.weight"], inits["W3"].T)
    np.testing.assert_array_equal(weights["B1"], inits["B1"])   # taken as they are: the initializers' names
    np.testing.assert_array_equal(weights["W1"], inits["W1"])
    assert set(weights) == {"W1", "B1", "W2.weight", "b2", "W3.weight", "b3"}


def test_silu_parameters_and_identities():
    """Mul(m, Sigmoid(m)) is one silu op, and the sigmoid read elsewhere too is one sigmoid op;
    a MatMul by an initializer without a bias is a parameter op (as ``x @ self.w`` in from_torch);
    inference-mode Dropout, Identity and a reshape to the same shape are no ops."""
    inits = {"P": rand(6, 6, scale=1.0), "fc.weight": rand(3, 12, scale=1.0), "same": np.array([0, -1], np.int64)}
    nodes = [
        node("MatMul", ["x", "P"], ["m"], "mm"),
        node("Sigmoid", ["m"], ["s"], "sig"),
        node("Mul", ["m", "s"], ["silu"], "swish"),
        node("Concat", ["silu", "s"], ["c"], "cat", axis=1),
        node("Dropout", ["c"], ["d"], "drop"),
        node("Identity", ["d"], ["i"], "ident"),
        node("Reshape", ["i", "same"], ["r"], "noop"),
        node("Gemm", ["r", "fc.weight"], ["out"], "fc", transB=1),
    ]
    m = model(nodes, {"x": [4, 6]}, inits)
    g, weights = assert_predicts_like_onnx(m, {"x": rand(4, 6, scale=2.0)}, softmax_output=False)
    assert [(op.name, op.kind) for op in g.ops] == [
        ("x", "input"), ("P", "parameter"), ("mm", "matmul"), ("sig", "sigmoid"), ("swish", "silu"),
        ("cat", "concat"), ("fc", "linear"), ("softmax", "softmax")]
    assert g["swish"].inputs == (g["mm"].index,)
    np.testing.assert_array_equal(weights["P"], inits["P"])
    assert set(weights) == {"P", "fc.weight"}


def test_pools_and_squeeze():
    """MaxPool with ceil_mode where it adds no window, GlobalMaxPool, a mean over (H, W) with
    keepdims=0 (axes as an input, opset 18 and later), Squeeze of the 1x1 dimensions."""
    inits = {"ax": np.array([2, 3], np.int64), "sq": np.array([2, 3], np.int64), "fc.weight": rand(3, 8, scale=2.0)}
    nodes = [
        node("MaxPool", ["x"], ["p"], "mp", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        node("GlobalMaxPool", ["p"], ["gm"], "gmp"),
        node("Squeeze", ["gm", "sq"], ["s"], "squeeze"),
        node("ReduceMean", ["p", "ax"], ["mean"], "mean", keepdims=0),
        node("Concat", ["s", "mean"], ["c"], "cat", axis=1),
        node("Gemm", ["c", "fc.weight"], ["out"], "fc", transB=1),
    ]
    m = model(nodes, {"x": [4, 4, 9, 9]}, inits)
    g, _ = assert_predicts_like_onnx(m, {"x": rand(4, 4, 9, 9, scale=1.0)}, softmax_output=False)
    assert [op.kind for op in g.ops] == ["input", "pool2d", "pool2d", "flatten", "pool2d", "flatten", "concat",
                                         "linear", "softmax"]
    assert g["gmp"].attrs["kind"] == "max" and g["mean"].attrs["kind"] == "avg"


def test_silu_alone_builds_no_sigmoid():
    m = vec(node("Sigmoid", ["x"], ["s"], "sig"), node("Mul", ["s", "x"], ["h"], "swish"))
    g, _ = sw.from_onnx(m)
    assert [op.kind for op in g.ops] == ["input", "silu", "linear", "softmax"]


def test_relu_fused_only_into_its_single_reader():
    """A Relu alone reading a Conv or Gemm is the op's activation; a Conv read twice keeps its Relu."""
    m = model([node("Gemm", ["x", "w1"], ["a"], "g1", transB=1), node("Relu", ["a"], ["r"], "r1"),
               node("Gemm", ["r", "w2"], ["b"], "g2", transB=1), node("Relu", ["b"], ["r2"], "r2"),
               node("Add", ["b", "r2"], ["h"], "sum"), node("Gemm", ["h", "w3"], ["out"], "g3", transB=1)],
              {"x": [2, 4]}, {"w1": rand(4, 4), "w2": rand(4, 4), "w3": rand(3, 4)})
    g, _ = sw.from_onnx(m)
    assert [op.kind for op in g.ops] == ["input", "linear", "linear", "relu", "add", "linear", "softmax"]
    assert g["w1"].attrs["activation"] == "relu" and g["w2"].attrs["activation"] is None


def test_names():
    """Weighted ops take their weight's owner name; nodes with TorchScript scope names
    (``/block/Add``) take ``<path>.<op>``, or the scope's name when it is a leaf module's only
    op; other nodes keep their own names; clashes get ``_1``."""
    m = model([node("Conv", ["x", "enc.conv.weight"], ["c"], "/enc/conv/Conv"),
               node("Relu", ["x"], ["rx"], "/enc/act/Relu"),
               node("Add", ["c", "rx"], ["a"], "/enc/Add"),
               node("Add", ["a", "rx"], ["b"], "/enc/Add_1"),
               node("Relu", ["b"], ["h"], "tail"),
               node("Flatten", ["h"], ["f"], "tail_1", axis=1),
               node("Gemm", ["f", "onnx::Gemm_7"], ["out"], "/head/Gemm", transB=1)],
              {"x": [2, 4, 4, 4]}, {"enc.conv.weight": rand(4, 4, 1, 1), "onnx::Gemm_7": rand(3, 64)})
    g, weights = sw.from_onnx(m)
    assert g.op_names() == ["x", "enc.conv", "enc.act", "enc.add", "enc.add_1", "tail", "tail_1", "head",
                            "softmax"]
    assert set(weights) == {"enc.conv.weight", "head.weight"}


def test_unused_results_are_left_out():
    m = vec(node("Conv", ["x4", "w"], ["dead"], "side"), node("Relu", ["x"], ["h"]), inits={"w": rand(2, 4, 1, 1)})
    m.graph.input.append(helper.make_tensor_value_info("x4", TensorProto.FLOAT, [2, 4, 1, 1]))
    g, weights = sw.from_onnx(m)
    assert [op.kind for op in g.ops] == ["input", "relu", "linear", "softmax"]
    assert "w.weight" not in weights


def test_batch_norm_brings_its_running_statistics_and_momentum():
    mean, var = rand(4), np.full(4, 2.0, np.float32)
    bn = node("BatchNormalization", ["x", "s", "b", "m", "v"], ["h"], "bn")
    bn.attribute.append(helper.make_attribute("momentum", 0.7))
    m = img(bn, inits={"s": rand(4), "b": rand(4), "m": mean, "v": var})
    g, weights = sw.from_onnx(m)
    assert g["s"].kind == "batchnorm2d" and g["s"].attrs["momentum"] == pytest.approx(0.3, abs=1e-6)
    assert set(weights) == {"s.weight", "s.bias", "s.running_mean", "s.running_var", "fc.weight", "fc.bias"}
    np.testing.assert_array_equal(weights["s.running_mean"], mean)
    np.testing.assert_array_equal(weights["s.running_var"], var)


def test_batch_norms_sharing_initializers_get_their_own_copies():
    """Exporters merge equal constants (a fresh model's batch norm scales of ones) into one
    initializer: each batch norm takes a copy, and they train apart as PyTorch's would."""
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    m = img(node("BatchNormalization", ["x", "one", "zero", "zero", "one"], ["h1"], "bn1"),
            node("Relu", ["h1"], ["r"]),
            node("BatchNormalization", ["r", "one", "zero", "zero", "one"], ["h"], "bn2"),
            inits={"one": ones, "zero": zeros})
    g, weights = sw.from_onnx(m)
    bns = [op.name for op in g.ops if op.kind == "batchnorm2d"]
    assert len(bns) == 2
    for name in bns:
        np.testing.assert_array_equal(weights[f"{name}.weight"], ones)
        np.testing.assert_array_equal(weights[f"{name}.bias"], zeros)
    weights[f"{bns[0]}.weight"][:] = 5.0   # copies, not one array
    assert weights[f"{bns[1]}.weight"][0] == 1.0


def test_importing_shardwise_does_not_import_onnx():
    code = "import sys, shardwise; assert 'onnx' not in sys.modules, 'onnx imported'; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_missing_onnx_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match="pip install onnx"):
        sw.from_onnx("model.onnx")


def test_the_documentation_lists_every_op():
    from shardwise.importers.onnx.ops import ONNX_OPS

    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    missing = [op for op in ONNX_OPS if f"`{op}`" not in doc]
    assert not missing, f"docs/importing.md does not list the ONNX ops {missing}"
