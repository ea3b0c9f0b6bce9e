"""Dropout from PyTorch and ONNX: a ``dropout`` op with the model's probability.

shardwise's masks are a function of (seed, step, element index) so that every plan draws the
same one; they cannot be PyTorch's random stream.  So: eval-mode predictions equal PyTorch's
eval mode within 1e-5; training equals PyTorch's step for step when PyTorch is handed the same
masks (computed by shardwise.reference.dropout), within 1e-4; the ONNX exports import the same.
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import shardwise as sw
from shardwise.reference import dropout as rd
from training_checks import RTOL, assert_close_weights

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
nn = torch.nn
F = torch.nn.functional


class Net(nn.Module):
    """nn.Dropout after a convolution, F.dropout(x, p, self.training) after a linear layer, and an
    F.dropout with training=False, which is no op."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.drop = nn.Dropout(0.3)
        self.fc1, self.fc2 = nn.Linear(4 * 6 * 6, 16), nn.Linear(16, 5)

    def forward(self, x):
        h = torch.flatten(self.drop(F.relu(self.conv(x))), 1)
        h = F.dropout(F.relu(self.fc1(h)), 0.5, self.training)
        return self.fc2(F.dropout(h, 0.9, training=False))


def make(seed: int = 0):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    return Net(), rng.standard_normal((8, 3, 6, 6)).astype(np.float32), rng.integers(0, 5, 8)


def test_dropout_ops_are_imported_with_their_probabilities():
    model, x, _ = make()
    g, _ = sw.from_torch(model, (torch.tensor(x),))
    drops = [op for op in g.ops if op.kind == "dropout"]
    assert [(op.name, op.attrs["p"]) for op in drops] == [("drop", 0.3), ("dropout", 0.5)]
    assert drops[0].attrs["seed"] != drops[1].attrs["seed"]


def test_eval_mode_predicts_like_pytorch_eval():
    model, x, _ = make()
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    with torch.no_grad():
        want = torch.softmax(copy.deepcopy(model).eval().double()(torch.tensor(x, dtype=torch.float64)), 1).numpy()
    np.testing.assert_allclose(t.eval().predict(x), want, atol=1e-5, rtol=0)
    assert np.abs(t.train().predict(x) - want).max() > 1e-3   # train mode drops


def masked_forward(model, xt, masks):
    """The model's forward with its two dropouts replaced by the given (mask, p) pairs."""
    h = F.relu(model.conv(xt))
    (m1, p1), (m2, p2) = masks
    h = torch.flatten(h * m1 / (1 - p1), 1)
    h = F.relu(model.fc1(h)) * m2 / (1 - p2)
    return model.fc2(h)


@pytest.mark.parametrize("plan_kind", ["data", "model"])
def test_training_equals_pytorch_given_the_same_masks(plan_kind):
    model, x, y = make(1)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    d = sw.DeviceGraph.cpu(2)
    plan = {"data": sw.strategies.data_parallel, "model": sw.strategies.model_parallel}[plan_kind](g, d)
    opt = dict(lr=0.05, momentum=0.9)
    t = sw.Trainer(g, plan, optimizer=sw.SGD(**opt))
    t.set_weights(weights)
    model = model.double()
    topt = torch.optim.SGD(model.parameters(), **opt)
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y)
    drops = [g[name] for name in ("drop", "dropout")]
    for step in range(3):
        masks = [(torch.tensor(rd.dropout_mask(op.shape, op.attrs["p"], op.attrs["seed"], step), dtype=torch.float64),
                  float(np.float32(op.attrs["p"]))) for op in drops]
        loss = F.cross_entropy(masked_forward(model, xt, masks), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=RTOL)
    want = {k: v.detach().float().numpy() for k, v in model.named_parameters()}
    assert_close_weights(t.get_weights(), want)


def test_p_zero_and_functional_eval_dropouts_are_left_out():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.0), nn.Linear(4, 3))
    g, _ = sw.from_torch(model, (torch.zeros(2, 4),))
    assert [op.kind for op in g.ops] == ["input", "linear", "linear", "softmax"]


# ------------------------------------------------------------------------------------ ONNX
onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def dropout_model(*extra_inputs, ratio=None, training=None):
    """x (2, 4) -> Dropout (inputs: x, then optional ratio and training_mode constants) -> Gemm."""
    nodes, names = [], ["x"]
    for name, value, dtype in (("r", ratio, np.float32), ("t", training, np.bool_)):
        if value is not None:
            nodes.append(helper.make_node("Constant", [], [name], name=f"c_{name}",
                                          value=numpy_helper.from_array(np.asarray(value, dtype))))
            names.append(name)
        elif name == "r" and training is not None:
            names.append("")   # ratio omitted, training_mode given
    nodes.append(helper.make_node("Dropout", names, ["h"], name="drop"))
    nodes.append(helper.make_node("Gemm", ["h", "w"], ["out"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.ones((3, 4), np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("ratio, training, want", [
    (0.25, True, 0.25), (None, True, 0.5),          # ONNX's default ratio
    (0.25, False, None), (0.25, None, None),        # inference mode: the identity
    (0.0, True, None),
])
def test_onnx_dropout_in_training_mode(ratio, training, want):
    g, _ = sw.from_onnx(dropout_model(ratio=ratio, training=training))
    drops = [op for op in g.ops if op.kind == "dropout"]
    assert [op.attrs["p"] for op in drops] == ([want] if want is not None else [])


def test_torch_export_in_training_mode_imports_the_same_graph(tmp_path):
    model, x, _ = make()
    path = str(tmp_path / "net.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(model), (torch.tensor(x),), path, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING)
    g, _ = sw.from_onnx(path)
    gt, _ = sw.from_torch(model, (torch.tensor(x),))
    assert [(op.kind, op.shape, op.attrs.get("p")) for op in g.ops] == \
        [(op.kind, op.shape, op.attrs.get("p")) for op in gt.ops]
