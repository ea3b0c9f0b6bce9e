"""The ops torchvision's mobile and modern models need beside the others, against PyTorch:

* clip (ReLU6, Hardtanh, torch.clamp with constant bounds), hardsigmoid and hardswish: the C
  kernels (csrc/cpu/activation.c) against PyTorch forward and backward, at their kinks too,
  and against the NumPy reference (conformance: tests/ops/conformance.py's cases);
* batchnorm2d with any eps (the op's attribute), rms_norm, and layer_norm over several trailing
  dimensions (a reshape, the norm, a reshape back), in a model imported by ``sw.from_torch``
  that predicts and trains as PyTorch does;
* the attributes: defaults leave fingerprints alone, bad values are refused.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.errors import GraphError
from shardwise.reference import activations as act
from shardwise.train.trainer import SGD
from training_checks import RTOL, assert_close_weights

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
nn = torch.nn
F = torch.nn.functional

# kind -> (torch function, the kernel's attributes)
ACTS = {
    "relu6": (F.relu6, {"lo": 0.0, "hi": 6.0}),
    "hardtanh": (lambda t: F.hardtanh(t, -0.5, 2.0), {"lo": -0.5, "hi": 2.0}),
    "hardsigmoid": (F.hardsigmoid, {}),
    "hardswish": (F.hardswish, {}),
}


def kernel(name: str, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, dx) of the C kernels over the whole tensor."""
    attrs = ACTS[name][1]
    kind = "clip" if attrs else name
    zero, shape = (0,) * x.ndim, x.shape
    y = _core.activation_forward(kind, x, zero, zero, shape, **attrs)
    return y, _core.activation_backward(kind, x, zero, dy, zero, zero, shape, **attrs)


def values() -> np.ndarray:
    """Spread values and every kink of the four functions exactly (-3, -0.5, 0, 2, 3, 6)."""
    rng = np.random.default_rng(0)
    kinks = np.array([-3.0, -0.5, 0.0, 2.0, 3.0, 6.0], np.float32)
    return np.concatenate([(rng.standard_normal(3000) * 4).astype(np.float32), kinks, -kinks,
                           np.linspace(-8, 8, 1601, dtype=np.float32)])


@pytest.mark.parametrize("name", ACTS)
def test_kernels_are_pytorchs_bits(name):
    """Forward and backward equal PyTorch's CPU kernels bit for bit (their formulas and order of
    operations), at the kinks too (the gradient at a bound of Hardtanh is 0, as PyTorch's)."""
    x = values()
    dy = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = ACTS[name][0](tx)
    ty.backward(torch.tensor(dy))
    y, dx = kernel(name, x, dy)
    np.testing.assert_array_equal(y, ty.detach().numpy())
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", ACTS)
def test_reference_is_pytorch_in_float64(name):
    """Within 1e-7: PyTorch's float64 hard sigmoid and swish round a constant to float32."""
    x = values().astype(np.float64)
    dy = np.random.default_rng(2).standard_normal(x.shape)
    kind, attrs = ("clip" if ACTS[name][1] else name), ACTS[name][1]
    tx = torch.tensor(x, requires_grad=True)
    ACTS[name][0](tx).backward(torch.tensor(dy))
    y = act.activation_forward(kind, x, attrs)
    np.testing.assert_allclose(y, ACTS[name][0](torch.tensor(x)).numpy(), rtol=1e-7, atol=1e-15)
    np.testing.assert_allclose(act.activation_backward(kind, x, y, dy, attrs), tx.grad.numpy(), rtol=1e-7,
                               atol=1e-15)


def test_nan_passes_through():
    for name in ACTS:
        y, _ = kernel(name, np.array([np.nan, 1.0], np.float32), np.ones(2, np.float32))
        assert np.isnan(y[0]) and not np.isnan(y[1]), name


# ------------------------------------------------------------------------------------ a model
class Mobile(nn.Module):
    """The new ops in one model: a batch norm with MobileNet's eps, ReLU6, hard swish and hard
    sigmoid, Hardtanh and clamps, a LayerNorm over (C, H, W), ConvNeXt's channels-last layer
    norm (F.layer_norm between permutes) and an RMSNorm."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, eps=1e-3, momentum=0.01)
        self.r6 = nn.ReLU6(inplace=True)
        self.hs, self.hsig, self.ht = nn.Hardswish(), nn.Hardsigmoid(), nn.Hardtanh(-0.5, 2.0)
        self.ln = nn.LayerNorm([8, 6, 6], eps=1e-6)
        self.lnw, self.lnb = nn.Parameter(torch.randn(8)), nn.Parameter(torch.randn(8))
        self.rms = nn.RMSNorm(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        h = self.r6(self.bn(self.c1(x)))
        h = self.hs(h) + self.hsig(h)
        h = self.ht(h) + F.relu6(h) + torch.clamp(h, min=0.1) + h.clamp(-1, 1) + F.hardswish(h) + F.hardsigmoid(h)
        h = self.ln(h).permute(0, 2, 3, 1)
        h = self.rms(F.layer_norm(h, (8,), self.lnw, self.lnb, 1e-6))
        return self.fc(h).permute(0, 3, 1, 2).mean((2, 3))   # a linear over channels-last (N, H, W, C)


def mobile() -> tuple[nn.Module, np.ndarray, np.ndarray]:
    torch.manual_seed(0)
    m = Mobile()
    with torch.no_grad():
        m.bn.running_mean.normal_()
        m.bn.running_var.uniform_(0.5, 2.0)
        m.rms.weight.normal_()
        m.ln.weight.normal_()
    rng = np.random.default_rng(0)
    return m, rng.standard_normal((4, 3, 6, 6)).astype(np.float32), rng.integers(0, 5, 4)


def test_import_builds_the_new_ops():
    m, x, _ = mobile()
    m.fc = nn.Identity()
    m.forward = lambda t: Mobile.forward(m, t).flatten(1)
    g, w = sw.from_torch(m, example_inputs=(torch.tensor(x),))
    kinds = [op.kind for op in g.ops]
    assert kinds.count("clip") == 5 and kinds.count("hardswish") == 2 and kinds.count("hardsigmoid") == 2
    assert g["bn"].attrs["eps"] == 1e-3 and g["bn"].attrs["momentum"] == 0.01
    assert g["r6"].attrs == {"lo": 0.0, "hi": 6.0} and g["ht"].attrs == {"lo": -0.5, "hi": 2.0}
    assert g["clamp"].attrs["lo"] == 0.1 and g["clamp"].attrs["hi"] == np.finfo(np.float32).max
    assert [g[n].kind for n in ("ln.merge", "ln", "ln.split")] == ["reshape", "layer_norm", "reshape"]
    assert g["ln"].shape == (4, 288) and w["ln.weight"].shape == (288,)
    np.testing.assert_array_equal(w["ln.weight"], m.ln.weight.detach().numpy().reshape(-1))
    assert g["rms"].kind == "rms_norm" and g["rms"].attrs["eps"] == float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_model_predicts_as_pytorch(mode):
    """Trainer.forward is model(x) within 1e-5 of PyTorch's float64 run, in eval mode (running
    statistics with eps 1e-3) and in train mode (the minibatch's), under a 3-worker plan."""
    m, x, _ = mobile()
    g, w = sw.from_torch(m, example_inputs=(torch.tensor(x),))
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(3)))
    t.set_weights(w)
    t.train(mode == "train")
    ref = copy.deepcopy(m).double().train(mode == "train")
    with torch.no_grad():
        want = ref(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(t.forward(x), want, atol=1e-5, rtol=1e-5)


def test_model_trains_as_pytorch():
    """Three SGD steps: the losses, the weights and the batch norm's running statistics (momentum
    0.01) are PyTorch's (the weights of the LayerNorm over (C, H, W) flattened)."""
    m, x, y = mobile()
    g, w = sw.from_torch(m, example_inputs=(torch.tensor(x),))
    opt = SGD(lr=0.05, momentum=0.9)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=opt)
    t.set_weights(w)
    tm = copy.deepcopy(m).train()
    topt = torch.optim.SGD(tm.parameters(), lr=0.05, momentum=0.9)
    xt, yt = torch.tensor(x), torch.tensor(y)
    for _ in range(3):
        loss = F.cross_entropy(tm(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=RTOL)
    want = {k: v.detach().numpy().reshape(w[k].shape) for k, v in tm.state_dict().items() if k in w}
    got = t.get_weights()
    assert_close_weights({k: got[k] for k in want}, want)


# ------------------------------------------------------------------------------------ the builders
def test_defaults_keep_fingerprints():
    """eps 1e-5 is not stored (graphs built before it keep their fingerprints and plans)."""
    def build(**kw):
        g = sw.Graph("bn")
        g.batchnorm2d(g.input("x", (2, 3, 4, 4)), name="bn", **kw)
        return g
    assert build().fingerprint() == build(eps=1e-5).fingerprint() != build(eps=1e-3).fingerprint()
    assert "eps" not in build().ops[1].attrs


@pytest.mark.parametrize("call, match", [
    (lambda g, x: g.batchnorm2d(x, eps=0.0), "eps"),
    (lambda g, x: g.batchnorm2d(x, eps=float("nan")), "eps"),
    (lambda g, x: g.clip(x, 1.0, 0.0), "lo <= hi"),
    (lambda g, x: g.clip(x, float("-inf"), 0.0), "finite"),
    (lambda g, x: g.clip(x, 0, 1e39), "finite float32"),
    (lambda g, x: g.rms_norm(x, eps=-1.0), "eps"),
])
def test_bad_attributes_are_refused(call, match):
    g = sw.Graph("bad")
    x = g.input("x", (2, 3, 4, 4))
    with pytest.raises(GraphError, match=match):
        call(g, x)


def test_the_runtime_checks_attributes():
    g = sw.Graph("c")
    x = g.input("x", (2, 4))
    y = g.clip(x, 0.0, 1.0, name="op")
    g.softmax(g.linear(y, 3), name="loss")
    g["op"].attrs["lo"] = 2.0   # behind the builder's back
    with pytest.raises(ValueError, match="clip's bounds"):
        sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)))
