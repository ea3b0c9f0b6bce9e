"""sw.from_onnx on the ONNX LSTM node.

* Models written here with onnx.helper (no PyTorch): their predictions equal onnx's reference
  evaluator's within 1e-5 (its LSTM is ONNX's definition, gates in the order i, o, f, c), the
  weights are the gate blocks in PyTorch's order i, f, g, o, layout=1 imports as layout=0, and
  every refusal (bidirectional, sequence_lens, nonzero initial states, peepholes, clip, other
  activations, a time-major input) is a ModelImportError naming the node and what it does not
  support.
* PyTorch's LSTMs of tests/importers/test_import_seq.py (1 and 2 layers, with and without biases, a linear
  head on the last step, every step or h_n[-1]) exported by both of PyTorch's exporters: the
  graph from_torch builds (op kinds, shapes, inputs, attributes; the same weights under the same
  names), PyTorch's forward within 1e-5, and three SGD steps under one worker, data parallelism
  and a random plan equal PyTorch's within 1e-4.  The TorchScript exports take a fraction of a
  second; the dynamo ones 2 to 10 s each (marked slow, as the GPT's dynamo test is).
* nn.LSTMs the import refuses, as PyTorch exports them: batch_first=False, bidirectional, a
  learned initial state, proj_size (dynamo only: the TorchScript exporter refuses it itself).
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import shardwise as sw

onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

N, T, E, H, C = 2, 4, 3, 5, 3
RNG = np.random.default_rng(0)


def rand(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def ints(name: str, values) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=f"const_{name}",
                            value=numpy_helper.from_array(np.asarray(values, dtype=np.int64)))


def weights(layer: int, inputs: int, bias: bool = True) -> dict[str, np.ndarray]:
    out = {f"W{layer}": rand(1, 4 * H, inputs), f"R{layer}": rand(1, 4 * H, H)}
    if bias:
        out[f"B{layer}"] = rand(1, 8 * H)
    return out


def lstm_model(layers: int = 1, bias: bool = True, head: str = "last", layout: int = 0,
               lstm_inputs: dict[int, np.ndarray] | None = None, **attrs) -> onnx.ModelProto:
    """x (N, T, E) -> LSTM layers (nodes 'lstm0', 'lstm1', ...) -> a linear head 'fc' -> out.

    ``layout`` 0 as PyTorch's exporters write batch_first=True (X transposed to (T, N, E), Y
    transposed back); 1 reads x directly.  ``head``: "last" (the last step of Y, PyTorch's
    out[:, -1]), "every" (every step: MatMul + Add, (N, T, C) logits), "state" (the last
    layer's Y_h; h_n[-1] of the layers' Y_h concatenated).  ``lstm_inputs`` {index: value}
    sets optional inputs of the first node (sequence_lens, initial states, P) as initializers."""
    nodes, inits = [], {}
    seq = "x"
    if layout == 0:
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], name="to_time_major", perm=[1, 0, 2]))
        seq = "xt"
    states = []
    for layer in range(layers):
        inits.update(weights(layer, E if layer == 0 else H, bias))
        ins = [seq, f"W{layer}", f"R{layer}", f"B{layer}" if bias else ""]
        for k, v in sorted((lstm_inputs or {}).items()) if layer == 0 else ():
            ins += [""] * (k - len(ins)) + [f"in{k}"]
            inits[f"in{k}"] = v
        y, yh = f"Y{layer}", f"Yh{layer}"
        nodes.append(helper.make_node("LSTM", ins, [y, yh], name=f"lstm{layer}", hidden_size=H, layout=layout,
                                      **attrs))
        states.append(yh)
        if layout == 0:   # (T, 1, N, H) -> (T, N, H), as PyTorch's exporters write it
            nodes += [helper.make_node("Transpose", [y], [f"{y}p"], name=f"perm{layer}", perm=[0, 2, 1, 3]),
                      ints(f"shape{layer}", [T, N, H]),
                      helper.make_node("Reshape", [f"{y}p", f"shape{layer}"], [f"{y}s"], name=f"squeeze{layer}")]
            seq = f"{y}s"
        else:             # (N, T, 1, H) -> (N, T, H)
            nodes += [ints(f"axis{layer}", [2]), helper.make_node("Squeeze", [y, f"axis{layer}"], [f"{y}s"],
                                                                  name=f"squeeze{layer}")]
            seq = f"{y}s"
    if layout == 0:
        nodes.append(helper.make_node("Transpose", [seq], ["seq"], name="to_batch_first", perm=[1, 0, 2]))
    else:
        nodes.append(helper.make_node("Identity", [seq], ["seq"], name="seq"))
    inits.update({"fc.weight": rand(C, H), "fc.bias": rand(C)})
    if head == "every":
        inits["fc.wt"] = inits.pop("fc.weight").T.copy()
        nodes += [helper.make_node("MatMul", ["seq", "fc.wt"], ["mm"], name="fc"),
                  helper.make_node("Add", ["mm", "fc.bias"], ["out"], name="fc_bias")]
    else:
        if head == "last":
            nodes += [ints("last", -1), helper.make_node("Gather", ["seq", "last"], ["h"], name="step", axis=1)]
        else:
            nodes += [helper.make_node("Concat", states, ["h_n"], name="h_n", axis=0 if layout == 0 else 1),
                      ints("last", -1), helper.make_node("Gather", ["h_n", "last"], ["h"], name="top",
                                                         axis=0 if layout == 0 else 1)]
        nodes.append(helper.make_node("Gemm", ["h", "fc.weight", "fc.bias"], ["out"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, T, E])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def reference(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    (out,) = ReferenceEvaluator(m).run(None, {"x": x})
    return softmax(out.astype(np.float64))


def predict(g, w, x: np.ndarray) -> np.ndarray:
    t = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}))
    t.set_weights(w)
    return t.predict(x)


X = rand(N, T, E, scale=1.0)


@pytest.mark.parametrize("layers,bias,head", [(1, True, "last"), (2, False, "last"), (1, True, "every"),
                                              (2, True, "state")])
def test_predicts_like_onnxs_reference_evaluator(layers, bias, head):
    m = lstm_model(layers, bias, head)
    g, w = sw.from_onnx(m)
    np.testing.assert_allclose(predict(g, w, X), reference(m, X), atol=1e-5, rtol=0)
    kinds = [op.kind for op in g.ops]
    assert kinds.count("lstm_cell") == layers * (T - 1) and kinds.count("lstm_hidden") == layers * T


def test_weights_are_pytorchs_gate_blocks():
    """ONNX's W, R and B halves hold the gates i, o, f, c; the imported ops are PyTorch's i, f, g, o."""
    m = lstm_model(1, True)
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    _, w = sw.from_onnx(m)
    block = {"i": 0, "o": 1, "f": 2, "g": 3}   # the ONNX block of each PyTorch gate
    for gate, q in block.items():
        rows = slice(q * H, (q + 1) * H)
        np.testing.assert_array_equal(w[f"lstm0.l0.{gate}.ih.weight"], init["W0"][0, rows])
        np.testing.assert_array_equal(w[f"lstm0.l0.{gate}.hh.weight"], init["R0"][0, rows])
        np.testing.assert_array_equal(w[f"lstm0.l0.{gate}.ih.bias"], init["B0"][0, rows])
        np.testing.assert_array_equal(w[f"lstm0.l0.{gate}.hh_bias.weight"], init["B0"][0, 4 * H:][rows])


@pytest.mark.parametrize("head", ["last", "state"])
def test_layout_1_is_layout_0(head):
    """layout=1 (batch first, no transposes) computes what layout=0 does with the same weights
    (onnx's reference evaluator has only layout 0): the same graph, the same predictions."""
    rng_state = RNG.bit_generator.state
    m0 = lstm_model(2, True, head, layout=0)
    RNG.bit_generator.state = rng_state
    m1 = lstm_model(2, True, head, layout=1)
    g0, w0 = sw.from_onnx(m0)
    g1, w1 = sw.from_onnx(m1)
    assert [(o.kind, o.shape, o.inputs, o.attrs) for o in g1.ops] == [(o.kind, o.shape, o.inputs, o.attrs)
                                                                       for o in g0.ops]
    assert sorted(w1) == sorted(w0)
    np.testing.assert_allclose(predict(g1, w1, X), reference(m0, X), atol=1e-5, rtol=0)


def test_zero_initial_states_are_accepted():
    zeros = np.zeros((1, N, H), np.float32)
    m = lstm_model(1, True, lstm_inputs={5: zeros, 6: zeros})
    g, w = sw.from_onnx(m)
    np.testing.assert_allclose(predict(g, w, X), reference(m, X), atol=1e-5, rtol=0)


def _time_major_input() -> onnx.ModelProto:
    m = lstm_model(1, True)
    m.graph.node[1].input[0] = "x"   # X read without the transpose: (N, T, E) taken for (T, N, E)
    return m


# (id, model, fragments the message must contain besides the node)
REFUSED = [
    ("bidirectional", lambda: lstm_model(direction="bidirectional"), ["direction='bidirectional'"]),
    ("reverse", lambda: lstm_model(direction="reverse"), ["direction='reverse'"]),
    ("sequence_lens", lambda: lstm_model(lstm_inputs={4: np.full(N, T, np.int32)}), ["sequence_lens"]),
    ("nonzero initial_h", lambda: lstm_model(lstm_inputs={5: np.ones((1, N, H), np.float32)}),
     ["nonzero initial_h"]),
    ("nonzero initial_c", lambda: lstm_model(lstm_inputs={5: np.zeros((1, N, H), np.float32),
                                                          6: np.full((1, N, H), 0.5, np.float32)}),
     ["nonzero initial_c"]),
    ("peepholes", lambda: lstm_model(lstm_inputs={7: np.zeros((1, 3 * H), np.float32)}), ["P (peephole"]),
    ("clip", lambda: lstm_model(clip=3.0), ["clip=3.0"]),
    ("activations", lambda: lstm_model(activations=["Sigmoid", "Relu", "Tanh"]), ["activations=", "Relu"]),
    ("input_forget", lambda: lstm_model(input_forget=1), ["input_forget=1"]),
    ("time-major input", _time_major_input, ["batch_first=True"]),
]


@pytest.mark.parametrize("make_model,fragments", [pytest.param(*c[1:], id=c[0]) for c in REFUSED])
def test_refused_with_the_node_and_what(make_model, fragments):
    with pytest.raises(sw.ModelImportError) as info:
        sw.from_onnx(make_model())
    for fragment in ["node 'lstm0' (LSTM", *fragments]:
        assert fragment in str(info.value), f"{fragment!r} not in: {info.value}"


def test_reading_all_layers_states_whole_is_refused():
    """h_n (layers, N, H) is read only one layer at a time (its first dimension is not the batch)."""
    m = lstm_model(2, True, "state")
    top = next(n for n in m.graph.node if n.name == "top")
    m.graph.node.remove(top)
    m.graph.node.insert(len(m.graph.node) - 1, helper.make_node("Flatten", ["h_n"], ["h"], name="flat", axis=1))
    with pytest.raises(sw.ModelImportError, match="node 'flat' \\(Flatten.*only one layer"):
        sw.from_onnx(m)


# ----------------------------------------------------------------------------- PyTorch's exports
def export(model, x, path: str, exporter: str) -> str:
    """``model`` exported to ``path`` by one of PyTorch's exporters, as tests/importers/test_import_seq.py
    exports the GPT (dynamo, without the graph optimizer) and tests/importers/test_import_onnx.py the CNNs."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    options = {"dynamo": exporter == "dynamo"}
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")
        options["optimize"] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(model), (x,), path, verbose=False, **options)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(name, exporter) -> (model, x, labels, path): each model of tests/importers/test_import_seq.py
    exported once per module."""
    cache: dict[tuple[str, str], tuple] = {}

    def get(name: str, exporter: str) -> tuple:
        if (name, exporter) not in cache:
            pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
            from test_import_seq import make

            model, x, y = make(name)
            path = str(tmp_path_factory.mktemp("lstm") / f"{name}-{exporter}.onnx")
            cache[name, exporter] = (model, x, y, export(model, x, path, exporter))
        return cache[name, exporter]
    return get


def check_export(exported, name: str, exporter: str) -> None:
    """The export imports as from_torch's graph (op kinds, shapes, inputs, attributes; the same
    weights under the same names) and predicts PyTorch's forward within 1e-5."""
    from test_import_seq import assert_imports_alike, torch_forward

    model, x, _, path = exported(name, exporter)
    g, w = sw.from_onnx(path)
    gt, wt = sw.from_torch(model, (x,))
    assert_imports_alike(g, w, gt, wt)
    if exporter == "dynamo":   # the TorchScript exporter names the input after its own counter ("input.1")
        assert [op.name for op in g.ops] == [op.name for op in gt.ops]
    np.testing.assert_allclose(predict(g, w, x.numpy()), torch_forward(model, x), atol=1e-5, rtol=0)


def check_training(exported, name: str, exporter: str, plan: str) -> None:
    """Three SGD steps (momentum, weight decay) of the imported graph under a plan: PyTorch's
    losses and weights within 1e-4 (the LSTM's through its PyTorch tensors)."""
    from test_import_seq import assert_trains_like_pytorch

    model, x, y, path = exported(name, exporter)
    g, w = sw.from_onnx(path)
    assert_trains_like_pytorch(g, w, plan, copy.deepcopy(model), x, y)   # the cached model stays untrained


# lstm: 2 layers with biases, the head on the last step; lstm_every: 1 layer, the head on every
# step; lstm_nobias: 2 layers without biases; lstm_state: 2 layers, the head on h_n[-1]
LSTMS = ["lstm", "lstm_every", "lstm_nobias", "lstm_state"]


@pytest.mark.parametrize("name", LSTMS)
def test_torchscript_export_is_from_torchs_graph(exported, name):
    check_export(exported, name, "torchscript")


@pytest.mark.parametrize("plan", ["one", "data", "random"])
@pytest.mark.parametrize("name", ["lstm", "lstm_every", "lstm_state"])
def test_three_steps_of_the_torchscript_import_equal_pytorch(exported, name, plan):
    check_training(exported, name, "torchscript", plan)


@pytest.mark.slow   # each dynamo export takes 3 to 13 s
@pytest.mark.parametrize("name", LSTMS)
def test_dynamo_export_is_from_torchs_graph(exported, name):
    check_export(exported, name, "dynamo")
    check_training(exported, name, "dynamo", "random")


class TorchLSTM:
    """nn.LSTM(3, 7, **kw) and a linear head on the last step, as PyTorch's exporters export it;
    ``h0``: a learned (nonzero) initial hidden state."""

    @staticmethod
    def make(h0: bool = False, **kw):
        torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
        nn = torch.nn

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = nn.LSTM(3, 7, **kw)
                out = kw.get("proj_size") or 7 * (2 if kw.get("bidirectional") else 1)
                self.fc = nn.Linear(out, 4)
                self.h0 = nn.Parameter(torch.randn(1, N, 7)) if h0 else None

            def forward(self, x):
                out, _ = self.lstm(x) if self.h0 is None else self.lstm(x, (self.h0, torch.zeros_like(self.h0)))
                return self.fc(out[:, -1] if kw.get("batch_first") else out[-1])

        torch.manual_seed(0)
        x = torch.randn(N, T, E) if kw.get("batch_first") else torch.randn(T, N, E)
        return Net(), x


# nn.LSTM's options, the exporter, fragments the message must contain besides the node
TORCH_REFUSED = [
    pytest.param({}, "torchscript", ["time-major", "batch_first=False"], id="batch_first=False"),
    pytest.param({"batch_first": True, "bidirectional": True}, "torchscript", ["direction='bidirectional'"],
                 id="bidirectional"),
    pytest.param({"batch_first": True, "h0": True}, "torchscript", ["nonzero initial_h"], id="initial state"),
    # the TorchScript exporter refuses proj_size; the dynamo one writes an LSTM whose initial_c is wider
    pytest.param({"batch_first": True, "proj_size": 2}, "dynamo", ["proj_size"], id="proj_size",
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("options,exporter,fragments", TORCH_REFUSED)
def test_pytorchs_unsupported_lstms_are_refused(options, exporter, fragments, tmp_path):
    model, x = TorchLSTM.make(**options)
    path = export(model, x, str(tmp_path / "m.onnx"), exporter)
    with pytest.raises(sw.ModelImportError) as info:
        sw.from_onnx(path)
    msg = str(info.value)
    assert "(LSTM, module 'lstm'" in msg, msg
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in: {msg}"
