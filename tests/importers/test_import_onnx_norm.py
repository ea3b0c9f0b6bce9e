"""sw.from_onnx of the normalizations and hard activations of mobile and modern models:
BatchNormalization with any epsilon, Clip (and Max / Min by a constant), HardSigmoid,
HardSwish, LayerNormalization over any axis after the batch's (its scale shared with other
nodes, as exporters merge equal initializers), RMSNormalization.

PyTorch's two exporters (torchscript at opset 17, dynamo at opset 23, the first with
RMSNormalization) against PyTorch's float64 run; graphs written with onnx.helper for the forms
no exporter writes here (Clip's attributes before opset 11, shared scales, refusals).
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import shardwise as sw

onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

nn = torch.nn
F = torch.nn.functional


class Mobile(nn.Module):
    """Batch norm with eps 1e-3, ReLU6, hard swish and sigmoid, Hardtanh, clamps, a LayerNorm
    over (C, H, W), ConvNeXt's channels-last F.layer_norm, an RMSNorm (``rms``)."""

    def __init__(self, rms: bool):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, eps=1e-3)
        self.r6, self.hs, self.hsig, self.ht = nn.ReLU6(), nn.Hardswish(), nn.Hardsigmoid(), nn.Hardtanh(-0.5, 2.0)
        self.ln = nn.LayerNorm([8, 6, 6], eps=1e-6)
        self.lnw, self.lnb = nn.Parameter(torch.randn(8)), nn.Parameter(torch.randn(8))
        self.rms = nn.RMSNorm(8, eps=1e-5) if rms else nn.Identity()
        self.fc = nn.Linear(8 * 36, 5)

    def forward(self, x):
        h = self.r6(self.bn(self.c1(x)))
        h = self.hs(h) + self.hsig(h)
        h = self.ht(h) + torch.clamp(h, min=0.1) + h.clamp(-1, 1)
        h = self.ln(h).permute(0, 2, 3, 1)
        h = self.rms(F.layer_norm(h, (8,), self.lnw, self.lnb, 1e-6)).permute(0, 3, 1, 2)
        return self.fc(h.flatten(1))


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_exports_predict_as_pytorch(tmp_path, exporter):
    torch.manual_seed(0)
    m = Mobile(rms=exporter == "dynamo")
    with torch.no_grad():
        m.bn.running_mean.normal_()
        m.bn.running_var.uniform_(0.5, 2.0)
    m.eval()
    x = np.random.default_rng(0).standard_normal((4, 3, 6, 6)).astype(np.float32)
    path = str(tmp_path / "m.onnx")
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript")
        options = {"dynamo": True, "optimize": False, "opset_version": 23}
    else:
        options = {"dynamo": False, "opset_version": 17}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(m), (torch.tensor(x),), path, verbose=False, **options)
    g, weights = sw.from_onnx(path)
    kinds = {op.kind for op in g.ops}
    assert {"clip", "hardswish", "hardsigmoid", "layer_norm"} <= kinds
    assert ("rms_norm" in kinds) == (exporter == "dynamo")
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    t.eval()
    with torch.no_grad():
        want = copy.deepcopy(m).double()(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(t.forward(x), want, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- written with onnx.helper
def model(nodes, inits, x_shape=(2, 4, 3, 3), opset=20):
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def head(src, features):
    rng = np.random.default_rng(1)
    return ([helper.make_node("Flatten", [src], ["f"], name="fl", axis=1),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["out"], name="fc", transB=1)],
            {"fc.weight": rng.standard_normal((3, features)).astype(np.float32), "fc.bias": np.zeros(3, np.float32)})


def predict_like_onnx(m, x):
    from onnx.reference import ReferenceEvaluator

    (out,) = ReferenceEvaluator(m).run(None, {"x": x})
    g, weights = sw.from_onnx(m)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    np.testing.assert_allclose(t.forward(x), out, atol=1e-5, rtol=1e-5)
    return g, weights


def test_clip_forms():
    """Clip with attributes (opset 6), with inputs and one omitted (opset 13), Max and Min by a constant."""
    x = (np.random.default_rng(0).standard_normal((2, 4, 3, 3)) * 3).astype(np.float32)
    nodes, inits = head("h", 36)
    m6 = model([helper.make_node("Clip", ["x"], ["h"], name="c6", min=0.0, max=6.0), *nodes], inits, opset=10)
    g, _ = predict_like_onnx(m6, x)
    assert g["c6"].attrs == {"lo": 0.0, "hi": 6.0}
    body = [helper.make_node("Clip", ["x", "", "hi"], ["a"], name="c13"),
            helper.make_node("Max", ["a", "lo"], ["b"], name="mx"),
            helper.make_node("Min", ["b", "top"], ["h"], name="mn"), *nodes]
    consts = {"hi": np.float32(2.5), "lo": np.float32(-0.75), "top": np.float32(1.5), **inits}
    g, _ = predict_like_onnx(model(body, consts, opset=13), x)
    top = float(np.finfo(np.float32).max)
    assert [g[n].attrs for n in ("c13", "mx", "mn")] == [{"lo": -top, "hi": 2.5}, {"lo": -0.75, "hi": top},
                                                          {"lo": -top, "hi": 1.5}]


def test_hard_sigmoid_and_swish():
    x = (np.random.default_rng(0).standard_normal((2, 4, 3, 3)) * 4).astype(np.float32)
    nodes, inits = head("h", 36)
    body = [helper.make_node("HardSigmoid", ["x"], ["a"], name="hsig", alpha=1.0 / 6.0, beta=0.5),
            helper.make_node("HardSwish", ["a"], ["h"], name="hs"), *nodes]
    g, _ = predict_like_onnx(model(body, inits), x)
    assert g["hsig"].kind == "hardsigmoid" and g["hs"].kind == "hardswish"
    onnx_default = model([helper.make_node("HardSigmoid", ["x"], ["h"], name="hsig"), *nodes], inits)
    with pytest.raises(sw.ModelImportError, match="'hsig'.*alpha=0.2.*alpha=1/6"):
        sw.from_onnx(onnx_default)


def test_layer_norms_sharing_a_scale_get_their_own_copies():
    """Two LayerNormalization nodes reading one scale and bias (exporters merge a fresh model's
    ones and zeros): each norm takes a copy; one over (C, H, W) (axis 1) is reshape, norm,
    reshape back, with the scale flattened; an RMSNormalization over the last axis."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    nodes, inits = head("h", 36)
    body = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["a"], name="ln1", axis=1, epsilon=1e-3),
            helper.make_node("LayerNormalization", ["a", "s", "b"], ["c"], name="ln2", axis=1),
            helper.make_node("RMSNormalization", ["c", "r"], ["h"], name="rms", axis=-1, epsilon=1e-4), *nodes]
    scale = rng.standard_normal((4, 3, 3)).astype(np.float32)
    consts = {"s": scale, "b": rng.standard_normal((4, 3, 3)).astype(np.float32),
              "r": rng.standard_normal(3).astype(np.float32), **inits}
    g, weights = predict_like_onnx(model(body, consts, opset=23), x)
    ln1, ln2 = [op.name for op in g.ops if op.kind == "layer_norm"]   # named after their scale: "s", "s_1"
    assert [g[n].kind for n in (f"{ln1}.merge", ln1, f"{ln1}.split")] == ["reshape", "layer_norm", "reshape"]
    assert g[ln1].shape == (2, 36) and g[f"{ln1}.split"].shape == (2, 4, 3, 3)
    assert g[ln1].attrs["eps"] == 1e-3 and g[ln2].attrs["eps"] == 1e-5 and g["rms"].attrs["eps"] == 1e-4
    np.testing.assert_array_equal(weights[f"{ln1}.weight"], scale.reshape(-1))
    weights[f"{ln1}.weight"][:] = 5.0   # copies, not one array
    np.testing.assert_array_equal(weights[f"{ln2}.weight"], scale.reshape(-1))


@pytest.mark.parametrize("node, fragments", [
    (helper.make_node("LayerNormalization", ["x", "s", "b"], ["h"], name="ln0", axis=0), ["axis=0", "'ln0'"]),
    (helper.make_node("Clip", ["x", "lo"], ["h"], name="cx"), ["'cx'"]),
    (helper.make_node("BatchNormalization", ["x", "v", "v", "v", "v"], ["h"], name="bn", epsilon=-1.0),
     ["'bn'", "a positive number"]),
])
def test_refused(node, fragments):
    nodes, inits = head("h", 36)
    consts = {"s": np.ones((2, 4, 3, 3), np.float32), "b": np.zeros((2, 4, 3, 3), np.float32),
              "v": np.ones(4, np.float32), **inits}
    if node.name == "cx":   # a computed bound
        nodes = [helper.make_node("Relu", ["x"], ["lo"], name="r"), *nodes]
    with pytest.raises(sw.ModelImportError) as info:
        sw.from_onnx(model([node, *nodes], consts))
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in: {info.value}"
