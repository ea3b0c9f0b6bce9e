"""torchvision's classification models through ``torch.onnx.export`` and sw.from_onnx: the list of
test_torchvision_zoo.py and the vision transformers (vit_b_16 and a small VisionTransformer,
swin_t, maxvit_t), each exported in eval mode (random weights, 10 classes, no dropout), imported,
and ``Trainer.forward`` (the logits, eval mode) compared with PyTorch's float64 run.

The exporter: PyTorch's default one (``dynamo=True``) without its graph optimizer
(``optimize=False``), as tests/importers/test_import_onnx.py exports.  The optimizer rewrites the
model's parameters: it folds batch norms into the convolutions and turns ViT's class token,
expanded to the batch, into a new (N, 1, D) initializer that is no parameter of the model any
more.  The TorchScript exporter (``dynamo=False``) spells GELU with ``Erf`` before opset 20, and
at opset 20 the attention's shapes with ``Mod``, which from_onnx does not import.

The batch norms' running statistics are those of 16 random images first (``calibrated``, as in
test_torchvision_norm.py): torchvision's fresh statistics (0, 1) leave the logits of several
nets within 1e-15 of 0, where any error passes.  torchvision's ViT head starts at zero (every
logit 0), so it gets random weights.  alexnet and vgg11_bn at 64 px (and vgg11_bn at 32 px) check
the exporter's spelling of their upsampling adaptive average pools (tests/importers/test_import_onnx_adaptive.py
checks it on small models, and its refusals).  The bound is test_torchvision_norm.py's: 1e-5 of the
logits' scale (max(1, max |logit|)), or, where PyTorch's own float32 run is further than that
from float64 (deep nets at random initialization, tiny images), twice PyTorch's float32 error.

Quick: squeezenet1_1 and the small VisionTransformer (attention spelled sequence-first: the
batch merged with the heads); the rest is marked slow (an export takes 5 to 60 s here).
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript: pip install onnxscript")

from test_torchvision_norm import M, calibrated  # noqa: E402  (skips the module without torchvision)
from test_torchvision_zoo import ZOO  # noqa: E402

# below 224 px the adaptive average pools of alexnet and vgg11_bn (to 6x6 and 7x7) upsample: at 64 px
# a 1x1 and a 2x2 map (uneven windows: masks, an unrolled sum), at 32 px vgg11_bn's 1x1 map (alexnet's
# features need more than 32 px); the exporter spells them with index arithmetic and GatherND
SMALLER = {"vgg11_bn-32px": ("vgg11_bn", 32)}
TRANSFORMERS = {
    "vit_b_16": ({"image_size": 32, "dropout": 0.0}, 32),
    "swin_t": ({"dropout": 0.0}, 64),
    "maxvit_t": ({}, 224),   # its 7x7 partitions need 224 px (maxvit_t sets its own stochastic depth: eval mode)
}
QUICK = {"squeezenet1_1", "small_vit"}


def small_vit():
    return M.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                               num_classes=10)


def make(name: str):
    """(the model in eval mode, random weights and calibrated statistics, a batch of 2 images)."""
    torch.manual_seed(0)
    if name == "small_vit":
        model, px = small_vit(), 32
    else:
        name, px = SMALLER.get(name, (name, None))
        kwargs, default_px = {**ZOO, **TRANSFORMERS}[name]
        px = px or default_px
        model = getattr(M, name)(weights=None, num_classes=10, **kwargs)
    heads = getattr(model, "heads", None)
    if heads is not None:   # torchvision's zero ViT head would make every logit 0
        with torch.no_grad():
            heads.head.weight.normal_(0.0, 0.2)
            heads.head.bias.normal_(0.0, 0.2)
    model = calibrated(model, px)
    x = np.random.default_rng(0).standard_normal((2, 3, px, px)).astype(np.float32)
    return model, x


def export(model, x: np.ndarray, path: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the exporter's notes
        torch.onnx.export(copy.deepcopy(model), (torch.tensor(x),), path, dynamo=True, optimize=False, verbose=False)
    return path


@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=() if n in QUICK else pytest.mark.slow)
                                  for n in ["small_vit", *ZOO, *SMALLER, *TRANSFORMERS]])
def test_onnx_export_predicts_as_pytorch(tmp_path, name):
    model, x = make(name)
    g, weights = sw.from_onnx(export(model, x, str(tmp_path / f"{name}.onnx")))
    # every parameter and running statistic under its state_dict name (Swin's index buffers are constants)
    state = {k: v.numpy() for k, v in model.state_dict().items()
             if not k.endswith(("num_batches_tracked", "relative_position_index"))}
    assert set(weights) == set(state)
    for key, value in weights.items():
        np.testing.assert_array_equal(value, state[key])
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    t.eval()
    with torch.no_grad():
        want = copy.deepcopy(model).double()(torch.tensor(x, dtype=torch.float64)).numpy()
        torch32 = model(torch.tensor(x)).numpy()
    got = t.forward(x)
    assert got.shape == want.shape == (2, 10)
    scale = max(1.0, float(np.abs(want).max()))
    bound = max(1e-5 * scale, 2 * float(np.abs(torch32 - want).max()))
    err = float(np.abs(got - want).max())
    print(f"{name}: {err / scale:.2g} of the logits' scale {scale:.3g} (PyTorch float32: "
          f"{float(np.abs(torch32 - want).max()) / scale:.2g})")
    assert err <= bound, f"{err / scale:.3g} of the logits' scale {scale:.3g}; PyTorch's float32 run " \
                         f"{float(np.abs(torch32 - want).max()) / scale:.3g}"
