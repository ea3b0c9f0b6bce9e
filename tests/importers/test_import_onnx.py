"""sw.from_onnx on PyTorch models exported to ONNX, checked against PyTorch and against from_torch.

The models are those of tests/importers/test_import_torch.py (ResNet-18, an Inception block, a VGG, the
activations, functional calls, bare parameters, MobileNet-style depthwise, grouped and dilated
convolutions), exported by both of PyTorch's exporters:

* ``torchscript`` (``dynamo=False``) in training mode, so batch norm stays a
  BatchNormalization node that normalizes with the batch's statistics, as shardwise's does;
* ``dynamo`` (PyTorch's default) without the graph optimizer, which would fold batch norm into
  the convolutions; its batch norm nodes are in inference mode (a warning says so).

Imported forward outputs must equal PyTorch's (float64, training mode) within 1e-5, training
must follow PyTorch's within 1e-4, and the imported graph must be the one from_torch builds
from the same model.  A model exported the usual way (eval mode, default options: batch norm
folded) must predict what PyTorch's eval mode does.
"""
from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import pytest

import shardwise as sw
from training_checks import RTOL, assert_close_weights

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
from test_import_torch import MODELS, make, torch_loss, torch_names, torch_probabilities  # noqa: E402

nn = torch.nn
F = torch.nn.functional

EXPORTERS = ("torchscript", "dynamo")
NAMES = ("resnet18", "inception", "vgg", "functional", "params", "activations", "mobilenet")


def export(model, x: np.ndarray, path: str, exporter: str, **options) -> str:
    """``model`` exported to ``path`` by one of PyTorch's exporters (from a copy: exporting in
    training mode runs batch norm, which updates the running statistics)."""
    model = copy.deepcopy(model)
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript: pip install onnxscript")
        options.setdefault("optimize", False)   # the optimizer folds batch norm into convolutions
    else:
        options.setdefault("training", torch.onnx.TrainingMode.TRAINING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the exporters' deprecation and tracer notes
        torch.onnx.export(model, (torch.tensor(x),), path, dynamo=exporter == "dynamo", verbose=False, **options)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(name, exporter) -> the path of that export, each made once for the module's tests."""
    folder, cache = tmp_path_factory.mktemp("onnx"), {}

    def get(name: str, exporter: str) -> str:
        if (name, exporter) not in cache:
            model, x, _ = make(name)
            cache[name, exporter] = export(model, x, str(folder / f"{name}-{exporter}.onnx"), exporter)
        return cache[name, exporter]
    return get


def load(path: str):
    """from_onnx, refusing any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return sw.from_onnx(path)


def predict(g, weights, x):
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    return t.predict(x)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", NAMES)
def test_forward_equals_pytorch(exported, name, exporter):
    model, x, _ = make(name)
    g, weights = load(exported(name, exporter))
    names = torch_names(model)
    running = {k: v.numpy() for k, v in model.named_buffers() if k.endswith(("running_mean", "running_var"))}
    assert set(weights) == set(names) | set(running)
    for key, torch_key in names.items():
        np.testing.assert_array_equal(weights[key], model.get_parameter(torch_key).detach().numpy())
    if exporter == "dynamo":   # the other exports ran a training-mode forward, which moved the statistics
        for key, value in running.items():
            np.testing.assert_array_equal(weights[key], value)
    got, want = predict(g, weights, x), torch_probabilities(model, x)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.log(got), np.log(want), atol=1e-4, rtol=0)


def structure(g):
    """What makes two graphs the same computation: op kinds, shapes, inputs, attributes, in order
    (an int kernel, stride or padding is the pair of it, as the builders take them)."""
    def pair(k, v):
        return (v, v) if k in ("kernel", "stride", "padding") and isinstance(v, int) else v
    return [(op.kind, op.shape, op.inputs, {k: pair(k, v) for k, v in op.attrs.items()}) for op in g.ops]


# "functional" is left out: its ``b.relu_()`` leaves the convolution ``b`` with two readers in
# PyTorch's trace, so from_torch keeps a separate relu op, while in the export the ReLU alone
# reads the convolution and is fused into it (the same computation with one op less; the
# forward test above checks it).
@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("name", [n for n in NAMES if n != "functional"])
def test_same_graph_as_from_torch(exported, name, exporter):
    model, x, _ = make(name)
    g, weights = load(exported(name, exporter))
    gt, weights_t = sw.from_torch(model, (torch.tensor(x),))
    assert structure(g) == structure(gt)
    weights_t = {k: v for k, v in weights_t.items() if not k.endswith("num_batches_tracked")}   # not in ONNX
    assert sorted(weights) == sorted(weights_t)
    for k in weights_t:
        if exporter != "dynamo" and k.endswith(("running_mean", "running_var")):
            continue   # the training-mode export ran a forward, which moved them
        np.testing.assert_array_equal(weights[k], weights_t[k])
    # the ops with weights and those of torch.nn modules are named as from_torch names them
    assert [op.name for op in g.ops if op.has_weights] == [op.name for op in gt.ops if op.has_weights]
    if exporter == "dynamo":   # its scopes say which ops torch.nn modules make
        module_ops = {n for n, m in model.named_modules() if n and not list(m.children())}
        assert ([op.name for op in g.ops if op.name in module_ops]
                == [op.name for op in gt.ops if op.name in module_ops])


def test_names_follow_the_modules(exported):
    """Spot checks of the naming rules on the dynamo export of ResNet-18."""
    g, weights = load(exported("resnet18", "dynamo"))
    assert {"conv1", "bn1", "relu", "maxpool", "layer1.0.conv1", "layer1.0.add", "layer2.0.downsample.0",
            "fc"} <= set(g.op_names())
    assert g["layer1.0.add"].kind == "add" and g["layer2.0.downsample.1"].kind == "batchnorm2d"
    assert "layer1.0.bn1.weight" in weights and "fc.bias" in weights


@pytest.mark.parametrize("name,plan_kind,exporter", [
    ("resnet18", "data", "torchscript"), ("resnet18", "model", "dynamo"),
    ("activations", "data", "dynamo"), ("params", "model", "torchscript"),
    ("mobilenet", "model", "torchscript"), ("mobilenet", "data", "dynamo"),
])
def test_three_sgd_steps_equal_pytorch(exported, name, plan_kind, exporter):
    model, x, y = make(name)
    g, weights = load(exported(name, exporter))
    d = sw.DeviceGraph.cpu(2)
    plan = {"data": sw.strategies.data_parallel, "model": sw.strategies.model_parallel}[plan_kind](g, d)
    opt = dict(lr=0.05, momentum=0.9, weight_decay=1e-4)
    t = sw.Trainer(g, plan, optimizer=sw.SGD(**opt))
    t.set_weights(weights)
    model = model.double()
    topt = torch.optim.SGD(model.parameters(), **opt)
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y)
    for _ in range(3):
        loss = torch_loss(model, model(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=RTOL)
    want = {k: model.get_parameter(v).detach().float().numpy() for k, v in torch_names(model).items()}
    assert_close_weights(t.get_weights(), want)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_running_statistics_and_momentum_are_imported(tmp_path, exporter):
    """An eval-mode export that keeps its BatchNormalization nodes: the running statistics come
    with the weights (initializers), PyTorch's momentum from the node's, and eval predictions
    equal PyTorch's eval mode."""
    model, x, _ = make("resnet18")
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():   # statistics far from (0, 1), so that using them matters
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)   # distinct initializers:
            m.bias.data.copy_(torch.randn(m.num_features, generator=gen))          # exporters merge equal ones
            m.momentum = 0.25
    model.eval()
    options = {} if exporter == "dynamo" else {"training": torch.onnx.TrainingMode.EVAL, "do_constant_folding": False}
    g, weights = load(export(model, x, str(tmp_path / "eval.onnx"), exporter, **options))
    bns = [op for op in g.ops if op.kind == "batchnorm2d"]
    if not bns:
        pytest.skip(f"the {exporter} exporter folded batch norm into the convolutions")
    for op in bns:
        assert op.attrs["momentum"] == pytest.approx(0.25, abs=1e-6)
    buffers = {k: v.numpy() for k, v in model.named_buffers() if not k.endswith("num_batches_tracked")}
    for key, want in buffers.items():
        np.testing.assert_array_equal(weights[key], want)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    with torch.no_grad():
        want = torch.softmax(copy.deepcopy(model).double()(torch.tensor(x, dtype=torch.float64)), 1).numpy()
    np.testing.assert_allclose(t.eval().predict(x), want, atol=1e-5, rtol=0)


def test_default_export_of_an_eval_model_predicts_like_pytorch_eval(tmp_path):
    """The usual export: eval mode, PyTorch's default exporter and options.  Batch norm is
    folded into the convolutions by the exporter, so the imported graph computes PyTorch's
    eval-mode forward (running statistics included) with convolutions alone."""
    model, x, _ = make("resnet18")
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():   # statistics far from (0, 1), so that using them matters
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
    model.eval()
    path = export(model, x, str(tmp_path / "eval.onnx"), "dynamo", optimize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g, weights = sw.from_onnx(path)
    assert "batchnorm2d" not in [op.kind for op in g.ops]
    assert g["conv1"].attrs["bias"] and g["conv1"].attrs["activation"] == "relu"
    with torch.no_grad():
        want = torch.softmax(copy.deepcopy(model).double()(torch.tensor(x, dtype=torch.float64)), 1).numpy()
    np.testing.assert_allclose(predict(g, weights, x), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_dynamic_batch(tmp_path, exporter):
    """An export with a dynamic batch dimension imports at the batch asked for; the shape
    arithmetic of ``x.view(x.size(0), -1)`` (Shape, Gather, Concat, ...) is folded at it."""
    model, x, _ = make("vgg")
    if exporter == "dynamo":
        options = dict(dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=64)},), optimize=True)
    else:
        options = dict(dynamic_axes={"x": {0: "batch"}}, input_names=["x"])
    path = export(model, x, str(tmp_path / "dyn.onnx"), exporter, **options)
    with pytest.raises(sw.ModelImportError, match="symbolic batch dimension"):
        sw.from_onnx(path)
    g, weights = sw.from_onnx(path, batch=4)
    assert g.ops[0].shape == (4, 3, 16, 16)
    np.testing.assert_allclose(predict(g, weights, x[:4]), torch_probabilities(model, x[:4]), atol=1e-5, rtol=0)


def test_bytes_and_model_proto(exported):
    path = exported("vgg", "torchscript")
    g, weights = sw.from_onnx(path)
    assert g.name == "vgg-torchscript"   # the file's name
    with open(path, "rb") as f:
        data = f.read()
    for source in (data, onnx.load(path)):
        g2, w2 = sw.from_onnx(source, name="again")
        assert g2.name == "again" and structure(g2) == structure(g)
        assert all(np.array_equal(w2[k], weights[k]) for k in weights)


def test_models_cover_the_torch_tests():
    assert set(NAMES) <= set(MODELS)
