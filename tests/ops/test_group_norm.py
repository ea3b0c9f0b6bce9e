"""group_norm (``torch.nn.GroupNorm``) against PyTorch and the NumPy reference:

* random plans over 1-4 workers train a graph of group norms (groups of several channels, one
  group, a group per channel) as the reference does (the op's own splits are the conformance
  cases, tests/ops/conformance.py);
* a small conv net with GroupNorm(4, 16) (eps 1e-5, affine) and GroupNorm(1, 8) (eps 1e-3, no
  affine), imported by ``sw.from_torch`` and by ``sw.from_onnx`` from PyTorch's TorchScript export
  at opsets 17 and 18, predicts within 1e-5 of PyTorch's float64 run and trains as it does (3 SGD
  steps, 3 Adam steps) on a searched 2-worker plan;
* ``F.group_norm`` and ONNX's InstanceNormalization of (N, C, H, W) (an instance norm);
* bad arguments are refused with clear errors.
"""
from __future__ import annotations

import copy
import io
import warnings

import numpy as np
import pytest

import shardwise as sw
from shardwise.errors import GraphError, ModelImportError
from shardwise.train.optim import SGD, Adam
from strategies_random import random_plan
from training_checks import RTOL, assert_close_weights, assert_plan_trains_like_reference

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
nn = torch.nn
F = torch.nn.functional


# ------------------------------------------------------------------------------ the reference
def norms_graph() -> sw.Graph:
    g = sw.Graph("group_norms")
    x = g.input("x", (6, 3, 4, 4))
    h = g.conv2d(x, 8, 3, padding=1, name="conv")
    h = g.relu(g.group_norm(h, 4, name="gn4"))
    h = g.group_norm(h, 1, eps=1e-3, affine=False, name="gn1")
    h = g.group_norm(g.conv2d(h, 4, 1, name="pw"), 4, eps=0.5, name="gn_inst")
    g.softmax(g.linear(g.flatten(h), 3, name="fc"), name="loss")
    return g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_plans_train_like_the_reference(seed):
    """Three SGD steps of a random plan (every op split its own way over 1-4 workers) are the
    NumPy reference's (losses and weights within 1e-4)."""
    g = norms_graph()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 3, 4, 4)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(2, 5))), rng)
    assert_plan_trains_like_reference(g, plan, x, y, SGD(lr=0.1, momentum=0.9))


# ------------------------------------------------------------------------------ a model
class Net(nn.Module):
    """A conv net with GroupNorm(4, 16) (eps 1e-5, affine) and GroupNorm(1, 8) (eps 1e-3, no affine)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.gn1 = nn.GroupNorm(4, 16)
        self.conv2 = nn.Conv2d(16, 8, 3, padding=1)
        self.gn2 = nn.GroupNorm(1, 8, eps=1e-3, affine=False)
        self.fc = nn.Linear(8 * 5 * 5, 4)
        with torch.no_grad():   # weights other than the fresh ones and zeros, so that mixing them up shows
            self.gn1.weight.uniform_(0.5, 1.5)
            self.gn1.bias.normal_(0.0, 0.3)

    def forward(self, x):
        h = F.relu(self.gn1(self.conv1(x)))
        h = F.relu(self.gn2(self.conv2(h)))
        return self.fc(torch.flatten(h, 1))


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 3, 5, 5)).astype(np.float32), rng.integers(0, 4, 4)


def export(m: nn.Module, x: np.ndarray, opset: int) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(m), (torch.tensor(x),), buf, opset_version=opset, dynamo=False)
    return buf.getvalue()


def imported(source: str, m: nn.Module, x: np.ndarray) -> tuple[sw.Graph, dict[str, np.ndarray]]:
    if source == "torch":
        return sw.from_torch(m, example_inputs=(torch.tensor(x),))
    pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
    return sw.from_onnx(export(m, x, int(source[len("onnx"):])))


SOURCES = ["torch", "onnx17", "onnx18"]


@pytest.mark.parametrize("source", SOURCES)
def test_model_imports_one_op_per_group_norm(source):
    torch.manual_seed(0)
    m, (x, _) = Net(), data()
    g, w = imported(source, m, x)
    norms = [op for op in g.ops if op.kind == "group_norm"]
    assert [(op.name, op.attrs) for op in norms] == [
        ("gn1", {"groups": 4, "eps": 1e-5, "affine": True}), ("gn2", {"groups": 1, "eps": 1e-3, "affine": False})]
    assert not any(op.kind in ("reshape", "mul", "broadcast_add", "parameter") for op in g.ops)
    want = {k: v.numpy() for k, v in m.state_dict().items()}
    assert set(w) == set(want)   # PyTorch's names: gn1.weight, gn1.bias; nothing for gn2
    for k in w:
        np.testing.assert_array_equal(w[k], want[k])


@pytest.mark.parametrize("source", SOURCES)
def test_model_predicts_as_pytorch(source):
    """Trainer.forward on a searched 2-worker plan is PyTorch's float64 output within 1e-5."""
    torch.manual_seed(0)
    m, (x, _) = Net(), data()
    g, w = imported(source, m, x)
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(w)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(t.forward(x), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_model_trains_as_pytorch(source, optimizer):
    """Three steps on a searched 2-worker plan: the losses within 1e-4 of PyTorch's float64
    training, and the weights after."""
    torch.manual_seed(0)
    m, (x, y) = Net(), data()
    g, w = imported(source, m, x)
    if optimizer == "sgd":
        opt, make = SGD(lr=0.05, momentum=0.9), (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))
    else:
        opt, make = Adam(lr=0.01), (lambda p: torch.optim.Adam(p, lr=0.01))
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(2)), optimizer=opt)
    t.set_weights(w)
    tm = copy.deepcopy(m).double().train()
    topt = make(tm.parameters())
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y)
    for _ in range(3):
        loss = F.cross_entropy(tm(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=RTOL)
    want = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    assert_close_weights(t.get_weights(), want)


def test_functional_group_norm_predicts_as_pytorch():
    """F.group_norm with the model's weight and bias, and without (no affine)."""
    class Fn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 6, 1)
            self.w, self.b = nn.Parameter(torch.rand(6) + 0.5), nn.Parameter(torch.randn(6))
            self.fc = nn.Linear(6 * 25, 3)

        def forward(self, x):
            h = F.group_norm(self.conv(x), 3, self.w, self.b, 1e-3)
            return self.fc(torch.flatten(F.group_norm(h, 2), 1))

    torch.manual_seed(0)
    m, (x, _) = Fn(), data()
    g, w = sw.from_torch(m, example_inputs=(torch.tensor(x),))
    assert [op.attrs["affine"] for op in g.ops if op.kind == "group_norm"] == [True, False]
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(w)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(t.forward(x), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("affine", [True, False])
def test_onnx_instance_norm_is_a_group_per_channel(affine):
    """InstanceNorm2d's export: one InstanceNormalization of (N, C, H, W), a group per channel."""
    pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.InstanceNorm2d(4, eps=1e-3, affine=affine), nn.Flatten(),
                      nn.Linear(4 * 25, 3))
    if affine:
        with torch.no_grad():
            m[1].weight.uniform_(0.5, 1.5)
            m[1].bias.normal_()
    x, _ = data()
    g, w = sw.from_onnx(export(m, x, 17))
    (op,) = [op for op in g.ops if op.kind == "group_norm"]
    assert op.attrs == {"groups": 4, "eps": 1e-3, "affine": affine}
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(w)
    with torch.no_grad():
        want = copy.deepcopy(m).double()(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(t.forward(x), want, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------ bad arguments
@pytest.mark.parametrize("call, match", [
    (lambda g, x: g.group_norm(x, 3), "do not divide the 8 channels"),
    (lambda g, x: g.group_norm(x, 0), "positive int"),
    (lambda g, x: g.group_norm(x, 2.0), "positive int"),
    (lambda g, x: g.group_norm(x, 2, eps=0.0), "eps"),
    (lambda g, x: g.group_norm(x, 2, eps=float("inf")), "eps"),
    (lambda g, x: g.group_norm(x, 2, affine="yes"), "affine"),
    (lambda g, x: g.group_norm(g.flatten(x), 2), r"\(N, C, H, W\)"),
])
def test_bad_arguments_are_refused(call, match):
    g = sw.Graph("bad")
    x = g.input("x", (2, 8, 3, 3))
    with pytest.raises(GraphError, match=match):
        call(g, x)


def test_importers_refuse_what_they_cannot_build():
    class HalfAffine(nn.Module):   # a weight and no bias
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))

        def forward(self, x):
            return torch.flatten(F.group_norm(x, 2, self.w), 1)

    with pytest.raises(ModelImportError, match="weight and no bias"):
        sw.from_torch(HalfAffine(), example_inputs=(torch.randn(2, 4, 3, 3),))

    class NotDividing(nn.Module):
        def forward(self, x):
            return torch.flatten(F.group_norm(x, 3), 1)

    with pytest.raises((ModelImportError, RuntimeError), match="3"):
        sw.from_torch(NotDividing(), example_inputs=(torch.randn(2, 4, 3, 3),))


def test_the_runtime_checks_attributes():
    g = sw.Graph("gn")
    x = g.input("x", (2, 4, 3, 3))
    g.softmax(g.linear(g.flatten(g.group_norm(x, 2, name="op")), 3), name="loss")
    g["op"].attrs["eps"] = -1.0   # behind the builder's back
    with pytest.raises(ValueError, match="group_norm's eps"):
        sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)))


def _grouped_instance_norm_model(scale: np.ndarray, after: str):
    """x (2, 4, 3, 3) -> Reshape (2, 2, 18) -> InstanceNormalization(scale, zeros) -> Reshape back
    -> ``after`` ("Relu": no Mul, no Add) -> Flatten -> Gemm; written with onnx.helper."""
    onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(np.array([0, 2, -1], np.int64), "grouped"),
             numpy_helper.from_array(np.array([2, 4, 3, 3], np.int64), "back"),
             numpy_helper.from_array(scale.astype(np.float32), "scale"),
             numpy_helper.from_array(np.zeros(2, np.float32), "zero"),
             numpy_helper.from_array(rng.standard_normal((3, 36)).astype(np.float32), "fc.weight"),
             numpy_helper.from_array(np.zeros(3, np.float32), "fc.bias")]
    nodes = [helper.make_node("Reshape", ["x", "grouped"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "scale", "zero"], ["n"], epsilon=0.25),
             helper.make_node("Reshape", ["n", "back"], ["r"]),
             helper.make_node(after, ["r"], ["a"]),
             helper.make_node("Flatten", ["a"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "gn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model, numpy_helper.to_array(inits[4]).astype(np.float64)


def test_onnx_group_norm_without_its_scale_and_bias():
    """The pattern cut short (a Relu reads the reshape back): a group norm without affine."""
    model, fc = _grouped_instance_norm_model(np.ones(2), "Relu")
    g, _ = sw.from_onnx(model)
    assert [op.kind for op in g.ops if op.kind not in ("input", "softmax")] == ["group_norm", "relu", "flatten",
                                                                                 "linear"]
    assert g.ops[1].attrs == {"groups": 2, "eps": 0.25, "affine": False}
    x = np.random.default_rng(4).standard_normal((2, 4, 3, 3)).astype(np.float32)
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(2)))
    t.set_weights({"fc.weight": fc.astype(np.float32), "fc.bias": np.zeros(3, np.float32)})
    with torch.no_grad():
        h = F.relu(F.group_norm(torch.tensor(x, dtype=torch.float64), 2, eps=0.25)).flatten(1)
        want = (h @ torch.tensor(fc).T).numpy()
    np.testing.assert_allclose(t.forward(x), want, atol=1e-5, rtol=1e-5)


def test_onnx_instance_norm_of_groups_with_a_scale_is_refused():
    model, _ = _grouped_instance_norm_model(np.array([1.0, 2.0]), "Relu")
    with pytest.raises(ModelImportError, match="scale 1 and bias 0"):
        sw.from_onnx(model)
