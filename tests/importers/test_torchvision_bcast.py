"""torchvision models through from_torch: the broadcasting and slicing ops (mul, broadcast_add,
expand, slice, stochastic_depth, upsample_nearest, max pooling in ceil mode) in real networks.

Each model (random initialization, small images, a batch of 2) is imported, and
``Trainer.forward`` (the model's own output) in eval mode is compared with PyTorch's float64
run within 1e-5.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch")


from torchvision_compat import import_torchvision  # noqa: E402  (after torch's check)

try:
    tv = import_torchvision()
except ImportError:
    pytest.skip("torchvision is not installed", allow_module_level=True)


def _check_eval_forward(model, size: int, batch: int = 2, workers: int = 1, seed: int = 0):
    torch.manual_seed(seed)
    model = model.eval()
    x = np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)
    g, weights = sw.from_torch(model, example_inputs=(torch.tensor(x),))
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(workers)))
    t.set_weights(weights)
    t.train(False)
    ref = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        want = ref(torch.tensor(x, dtype=torch.float64)).numpy()
    got = t.forward(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    return g


def test_squeeze_excitation_and_chunk_shuffle():
    """torchvision's SqueezeExcitation (scale * input) and ShuffleNet's channel split + shuffle."""
    from torchvision.ops import SqueezeExcitation

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.se = SqueezeExcitation(8, 4)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x):
            x = self.se(self.conv(x))
            a, b = x.chunk(2, dim=1)
            x = torch.cat((a, torch.relu(b)), dim=1)
            n, c, h, w = x.size()
            x = x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
            return self.fc(x.mean((2, 3)))

    g = _check_eval_forward(Net(), 8, workers=2)
    kinds = {op.kind for op in g.ops}
    assert {"mul", "slice"} <= kinds


def test_vit_class_token_and_positions():
    """ViT's input: the class token expanded over the batch, concatenated, plus a learned
    (1, T, D) position table (broadcast_add), a slice of it, then x[:, 0]."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Conv2d(3, 16, 4, stride=4)
            self.class_token = torch.nn.Parameter(torch.randn(1, 1, 16))
            self.pos = torch.nn.Parameter(torch.randn(1, 20, 16))
            self.ln = torch.nn.LayerNorm(16)
            self.head = torch.nn.Linear(16, 5)

        def forward(self, x):
            x = self.proj(x)
            n = x.shape[0]
            x = x.reshape(n, 16, -1).permute(0, 2, 1)
            x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
            x = x + self.pos[:, :x.shape[1]]
            return self.head(self.ln(x)[:, 0])

    g = _check_eval_forward(Net(), 16, workers=2)
    assert {"expand", "broadcast_add", "slice"} <= {op.kind for op in g.ops}


def test_stochastic_depth_and_upsample():
    from torchvision.ops import StochasticDepth

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.sd = StochasticDepth(0.3, "row")
            self.up = torch.nn.Upsample(scale_factor=2)
            self.bilinear = torch.nn.Upsample(scale_factor=3, mode="bilinear", align_corners=False)
            self.pool = torch.nn.MaxPool2d(3, 2, ceil_mode=True)
            self.fc = torch.nn.Linear(4 * 24 * 24, 5)

        def forward(self, x):
            y = self.conv(x)
            y = self.pool(self.up(y + self.sd(y)))
            return self.fc(self.bilinear(y).flatten(1))

    g = _check_eval_forward(Net(), 8)
    assert {"stochastic_depth", "upsample_nearest", "upsample_bilinear"} <= {op.kind for op in g.ops}
    assert any(op.attrs.get("ceil_mode") for op in g.ops if op.kind == "pool2d")


@pytest.mark.parametrize("name,size", [("shufflenet_v2_x0_5", 32), ("regnet_y_400mf", 32), ("alexnet", 64),
                                       pytest.param("vgg11_bn", 32, marks=pytest.mark.slow),
                                       pytest.param("vgg11_bn", 64, marks=pytest.mark.slow),   # 2x2 -> 7x7
                                       pytest.param("efficientnet_b0", 32, marks=pytest.mark.slow)])
def test_torchvision_eval_forward(name, size):
    model = getattr(tv.models, name)(weights=None, num_classes=10)
    _check_eval_forward(model, size)


def test_vit_imports():
    """torchvision's Vision Transformer, once refused for its nn.MultiheadAttention, imports: the
    attention as its composition (test_torchvision_vit.py checks its outputs and training)."""
    model = tv.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                        mlp_dim=64, num_classes=10)
    g, weights = sw.from_torch(model.eval(), example_inputs=(torch.zeros(2, 3, 32, 32),))
    assert sum(op.kind == "softmax_dim" for op in g.ops) == 2
    assert "encoder.layers.encoder_layer_1.self_attention.in_proj_weight" in weights


def test_onnx_broadcast_ops():
    """The same ops through torch.onnx.export: Mul and Add that broadcast (an initializer as a
    parameter op), Split, Slice, Expand of a class token (ConstantOfShape folded)."""
    import io

    pytest.importorskip("onnx")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Conv2d(8, 8, 1)
            self.table = torch.nn.Parameter(torch.randn(1, 8, 1, 1))
            self.cls = torch.nn.Parameter(torch.randn(1, 1, 16))
            self.lin = torch.nn.Linear(8 * 8 * 8, 5)
            self.lin2 = torch.nn.Linear(16, 5)
            self.lin3 = torch.nn.Linear(8 * 8 * 8, 5)

        def forward(self, x):
            y = self.conv(x)
            y = torch.sigmoid(self.fc(y.mean((2, 3), keepdim=True))) * y + self.table
            a, b = y.chunk(2, dim=1)
            y = torch.cat([b, a], 1)
            z = y.reshape(y.shape[0], 8, 64)[:, :, :16]
            z = torch.cat([self.cls.expand(y.shape[0], -1, -1), z], 1)
            up = torch.nn.functional.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
            return self.lin(y.flatten(1)) + self.lin2(z[:, 0]) + self.lin3(up[:, :, ::2, 1::2].flatten(1))

    model = Net().eval()
    x = torch.randn(2, 3, 8, 8)
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, dynamo=False, opset_version=17)
    g, weights = sw.from_onnx(f.getvalue())
    assert {"mul", "broadcast_add", "slice", "expand", "upsample_bilinear"} <= {op.kind for op in g.ops}
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    t.train(False)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x.double()).numpy()
    np.testing.assert_allclose(t.forward(x.numpy()), want, atol=1e-5, rtol=1e-5)


class _SEToken(torch.nn.Module):
    """Squeeze-and-excitation, a channel split and shuffle, a class token and a sliced learned
    position table: every op of this file but stochastic depth (whose draws are not PyTorch's)."""

    def __init__(self):
        super().__init__()
        from torchvision.ops import SqueezeExcitation

        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.se = SqueezeExcitation(8, 4)
        self.pool = torch.nn.MaxPool2d(3, 2, ceil_mode=True)
        self.class_token = torch.nn.Parameter(0.1 * torch.randn(1, 1, 16))
        self.pos = torch.nn.Parameter(0.1 * torch.randn(1, 10, 16))
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        x = self.se(torch.relu(self.bn(self.conv(x))))
        a, b = x.chunk(2, dim=1)
        x = torch.cat((b, a), dim=1)
        x = self.pool(x)                                       # (N, 8, 4, 4) from 8x8: a partial window
        n = x.shape[0]
        x = x.reshape(n, 8, 16)                                # (N, 8, 16): 8 tokens (the channels) of 16
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)   # (N, 9, 16)
        x = x + self.pos[:, :x.shape[1]]
        return self.head(x[:, 0] + x[:, 1])


@pytest.mark.parametrize("plan_kind", ["data", "search"])
def test_three_sgd_steps_equal_pytorch(plan_kind):
    """Training (batch norm in train mode, SGD with momentum) takes the steps PyTorch takes in
    float64: the losses of three steps and the eval output after them."""
    torch.manual_seed(0)
    model = _SEToken()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    y = rng.integers(0, 5, 4)
    g, weights = sw.from_torch(model.train(), (torch.tensor(x),))
    d = sw.DeviceGraph.cpu(2)
    plan = sw.strategies.data_parallel(g, d) if plan_kind == "data" else sw.search(g, d)
    opt = dict(lr=0.05, momentum=0.9)
    t = sw.Trainer(g, plan, optimizer=sw.SGD(**opt))
    t.set_weights(weights)
    ref = copy.deepcopy(model).double().train()
    topt = torch.optim.SGD(ref.parameters(), **opt)
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y)
    got, want = [], []
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(ref(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        want.append(loss.item())
        got.append(t.step(x, y))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    t.train(False)
    with torch.no_grad():
        after = ref.eval()(xt).numpy()
    np.testing.assert_allclose(t.forward(x), after, atol=1e-4, rtol=1e-4)


def _grad_error(grads: dict, want: dict) -> float:
    """The largest error of any parameter's gradient, relative to that gradient's largest entry."""
    return max(float(np.abs(grads[k] - want[k]).max()) / max(float(np.abs(want[k]).max()), 1e-3) for k in want)


@pytest.mark.slow
@pytest.mark.parametrize("name,size", [("shufflenet_v2_x0_5", 64), ("efficientnet_b0", 64)])
def test_training_gradients_as_accurate_as_pytorch_float32(name, size):
    """A training step's gradients (batch norm in train mode, a plan over 2 workers) against
    PyTorch's float64 ones, no further off than PyTorch's own float32 gradients (times 3).  Several
    steps of these networks from a random initialization with a batch of 4 are too sensitive to
    compare trajectories: PyTorch's float32 and float64 runs part within a few steps themselves."""
    torch.manual_seed(0)
    # without dropout and stochastic depth, whose draws are not PyTorch's
    kw = {"dropout": 0.0, "stochastic_depth_prob": 0.0} if name == "efficientnet_b0" else {}
    model = getattr(tv.models, name)(weights=None, num_classes=5, **kw).train()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, size, size)).astype(np.float32)
    y = rng.integers(0, 5, 4)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=sw.SGD(lr=1.0))
    t.set_weights(weights)
    t.step(x, y)
    after = t.get_weights()
    names = [k for k, _ in model.named_parameters()]
    got = {k: weights[k].astype(np.float64) - after[k] for k in names}   # lr 1: w - w' is the gradient
    grads = {}
    for dtype in (torch.float64, torch.float32):
        ref = copy.deepcopy(model).to(dtype)
        torch.nn.functional.cross_entropy(ref(torch.tensor(x, dtype=dtype)), torch.tensor(y)).backward()
        grads[dtype] = {k: p.grad.double().numpy() for k, p in ref.named_parameters()}
    ours, theirs = _grad_error(got, grads[torch.float64]), _grad_error(grads[torch.float32], grads[torch.float64])
    assert ours <= 3 * theirs + 1e-4, f"gradients {ours:.3g} off PyTorch's float64 ones; its float32 ones {theirs:.3g}"


@pytest.mark.parametrize("name", ["shufflenet_v2_x0_5", "regnet_y_400mf",
                                  pytest.param("efficientnet_b0", marks=pytest.mark.slow)])
def test_torchvision_through_onnx(name):
    """The models through torch.onnx.export (TorchScript, opset 17, batch norms kept: no constant
    folding into the convolutions) and from_onnx, in eval mode, against PyTorch's float64 run."""
    import io

    pytest.importorskip("onnx")
    torch.manual_seed(0)
    model = getattr(tv.models, name)(weights=None, num_classes=10).eval()
    with torch.no_grad():   # exporters merge equal initializers (efficientnet's zero biases), which
        for k, p in model.named_parameters():   # shardwise refuses as tied weights: make them differ
            if k.endswith("bias"):
                p.add_(0.01 * torch.randn(p.shape))
    x = torch.randn(2, 3, 32, 32)
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, dynamo=False, opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE)
    g, weights = sw.from_onnx(f.getvalue())
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    t.train(False)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(x.double()).numpy()
    np.testing.assert_allclose(t.forward(x.numpy()), want, atol=1e-5, rtol=1e-5)
