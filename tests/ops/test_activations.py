"""The point-wise activations beside ReLU (sigmoid, tanh, GELU in its exact erf form, SiLU,
leaky ReLU) up the numerics ladder:

1. the NumPy reference (shardwise.reference.activations) against finite differences in
   float64 and against values known in closed form;
2. the C kernels (csrc/cpu/activation.c) against the reference: through the runtime, whole and
   split over workers, bit for bit between splits, by tests/ops/test_conformance.py (the
   *_saturating and *_rank5 cases); here their special values (NaN, infinities, saturation);
3. the C kernels against PyTorch within 1e-5, forward and backward, saturation included;
   a graph using all five trains like PyTorch;
4. plans that split every activation across 2-4 CPU workers train like one worker and
   like the reference;
5. their descriptions: every output dimension splits, each half reads its own block;
6. bad input raises clear errors.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.reference import activations as act
from shardwise.planning.regions import input_region
from shardwise.errors import GraphError, ShapeError
from shardwise.train.trainer import SGD, Trainer
from strategies_random import random_plan
from training_checks import (RTOL, assert_close_weights, assert_plan_trains_like_reference,
                             assert_split_plan_trains_like_one_worker, one_worker_run)

KINDS = ("sigmoid", "tanh", "gelu", "silu", "leaky_relu")
FROM_OUTPUT = {"sigmoid", "tanh"}   # kinds whose gradient the kernels take from y (the others from x)
SLOPE = 0.2
ATTRS = {"negative_slope": SLOPE}


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")


def c_whole(kind: str, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, dx) of the C kernels over the whole tensor."""
    zero, shape = (0,) * x.ndim, x.shape
    y = _core.activation_forward(kind, x, zero, zero, shape, negative_slope=SLOPE)
    src = y if kind in FROM_OUTPUT else x
    return y, _core.activation_backward(kind, src, zero, dy, zero, zero, shape, negative_slope=SLOPE)


def ref_pair(kind: str, x: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(y, dx) of the NumPy reference."""
    y = act.activation_forward(kind, x, ATTRS)
    return y, act.activation_backward(kind, x, y, dy, ATTRS)


def spread(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """float32 values over the saturating range (|x| up to ~16), a few exact zeros among them."""
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[:: 7] = 0.0
    return x


# ------------------------------------------------------------------------------------ 1. the reference
@pytest.mark.parametrize("kind", KINDS)
def test_reference_backward_matches_finite_differences(kind):
    """Central differences of sum(f(x) * dy) in float64; leaky ReLU's inputs stay away from its kink."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 5)) * 3
    if kind == "leaky_relu":
        x = np.where(np.abs(x) < 0.1, 0.5, x)
    dy = rng.standard_normal(x.shape)
    _, dx = ref_pair(kind, x, dy)
    eps = 1e-6
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        numeric[i] = (np.sum(act.activation_forward(kind, hi, ATTRS) * dy)
                      - np.sum(act.activation_forward(kind, lo, ATTRS) * dy)) / (2 * eps)
    np.testing.assert_allclose(dx, numeric, rtol=1e-6, atol=1e-8)


def test_reference_values_in_closed_form():
    """GELU(x) = x Phi(x) with Phi the normal CDF (Phi(1) = 0.841344746..., Phi(2) = 0.977249868...),
    SiLU(1) = 1 / (1 + 1/e), sigmoid(0) = 1/2, leaky ReLU scales negatives only."""
    x = np.array([1.0, -1.0, 2.0, 0.0])
    np.testing.assert_allclose(act.gelu_forward(x), [0.8413447460685429, -0.15865525393145707,
                                                     2 * 0.9772498680518208, 0.0], rtol=1e-14)
    np.testing.assert_allclose(act.silu_forward(x[:1]), [1 / (1 + math.exp(-1))], rtol=1e-14)
    np.testing.assert_allclose(act.sigmoid(x), [1 / (1 + math.exp(-1)), 1 / (1 + math.e), 1 / (1 + math.exp(-2)), 0.5])
    np.testing.assert_array_equal(act.leaky_relu_forward(np.array([-2.0, 3.0, 0.0]), 0.5), [-1.0, 3.0, 0.0])
    # the gradient at 0 is the slope's side, as PyTorch's (x > 0 is false at 0)
    np.testing.assert_array_equal(act.leaky_relu_backward(np.array([0.0]), np.array([4.0]), 0.5), [2.0])


# ------------------------------------------------------------------------------------ 2. C kernels vs the reference
def test_kernels_special_values():
    """Saturation gives the limits, never NaN; NaN propagates; infinities as PyTorch's."""
    x = np.array([-1e4, -100.0, -88.0, 88.0, 100.0, 1e4, np.inf, -np.inf], np.float32)
    dy = np.ones_like(x)
    y, dx = c_whole("sigmoid", x, dy)
    np.testing.assert_array_equal(y, [0, 0, y[2], 1, 1, 1, 1, 0])
    assert 0 < y[2] < 1e-37 and np.all(dx >= 0) and not np.isnan(dx).any()
    y, _ = c_whole("tanh", x, dy)
    np.testing.assert_array_equal(y, [-1, -1, -1, 1, 1, 1, 1, -1])
    y, dx = c_whole("gelu", x[:6], dy[:6])
    np.testing.assert_array_equal(y, [0, 0, 0, 88, 100, 1e4])
    np.testing.assert_array_equal(dx, [0, 0, 0, 1, 1, 1])
    y, dx = c_whole("silu", x[:6], dy[:6])
    np.testing.assert_array_equal(y, [0, 0, y[2], 88, 100, 1e4])
    assert abs(y[2]) < 1e-35 and not np.isnan(dx).any()
    for kind in KINDS:
        y, dx = c_whole(kind, np.array([np.nan, 1.0], np.float32), np.ones(2, np.float32))
        assert np.isnan(y[0]) and not np.isnan(y[1]), kind
        # leaky ReLU's gradient is a select on x > 0, false for NaN: the slope side, as PyTorch's
        assert dx[0] == SLOPE if kind == "leaky_relu" else np.isnan(dx[0]), kind


def test_gelu_is_the_exact_form_not_the_tanh_approximation():
    """At x = 2 the erf form gives 2 Phi(2) = 1.95449974; the tanh approximation 1.95459769."""
    x = np.array([2.0], np.float32)
    y, _ = c_whole("gelu", x, np.ones_like(x))
    approx = 0.5 * 2 * (1 + math.tanh(math.sqrt(2 / math.pi) * (2 + 0.044715 * 8)))
    assert abs(y[0] - 2 * 0.9772498680518208) < 1e-6 < abs(y[0] - approx) / 10


# ------------------------------------------------------------------------------------ 3. PyTorch
def torch_fns(torch):
    F = torch.nn.functional
    return {"sigmoid": torch.nn.Sigmoid(), "tanh": torch.nn.Tanh(), "gelu": torch.nn.GELU(), "silu": torch.nn.SiLU(),
            "leaky_relu": torch.nn.LeakyReLU(SLOPE), "leaky_relu_neg": lambda t: F.leaky_relu(t, -0.7)}


@pytest.mark.parametrize("kind", KINDS)
def test_kernels_match_pytorch(kind):
    torch = torch_or_skip()
    rng = np.random.default_rng(3)
    x = np.concatenate([spread(rng, 5000), np.linspace(-20, 20, 2001, dtype=np.float32)])
    dy = rng.standard_normal(x.shape).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch_fns(torch)[kind](tx)
    ty.backward(torch.tensor(dy))
    y, dx = c_whole(kind, x, dy)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gelu_tanh_matches_pytorch_float64():
    """GELU's tanh approximation (GPT-2's gelu_new): the C kernels (float32) against
    ``F.gelu(x, approximate="tanh")`` in float64, forward and gradient, saturation included; the
    NumPy reference matches PyTorch's float64 to rounding."""
    torch = torch_or_skip()
    rng = np.random.default_rng(5)
    x = np.concatenate([spread(rng, 5000), np.linspace(-20, 20, 2001, dtype=np.float32)])
    dy = rng.standard_normal(x.shape).astype(np.float32)
    tx = torch.tensor(x.astype(np.float64), requires_grad=True)
    ty = torch.nn.functional.gelu(tx, approximate="tanh")
    ty.backward(torch.tensor(dy.astype(np.float64)))
    want_y, want_dx = ty.detach().numpy(), tx.grad.numpy()
    zero = (0,)
    y = _core.activation_forward("gelu_tanh", x, zero, zero, x.shape)
    dx = _core.activation_backward("gelu_tanh", x, zero, dy, zero, zero, x.shape)
    # 1 + tanh(u) cancels in float32 for x < -3 (tanh near -1): absolute errors of a few 1e-7 in y
    # and up to 1e-6 in dx, PyTorch's own float32 kernel's too (1.0e-6 in dx over [-6, -3])
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=2e-6)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    tanh_attrs = {"approximate": "tanh"}
    np.testing.assert_allclose(act.activation_forward("gelu", x64, tanh_attrs), want_y, rtol=1e-13, atol=1e-15)
    y64 = act.activation_forward("gelu", x64, tanh_attrs)
    np.testing.assert_allclose(act.activation_backward("gelu", x64, y64, dy64, tanh_attrs), want_dx,
                               rtol=1e-12, atol=1e-14)
    # not the exact form: at x = 2 the two differ by 1e-4
    assert abs(float(y[np.argmin(abs(x - 2.0))]) - 2 * 0.9772498680518208) > 5e-5


def test_gelu_tanh_graph_trains_like_pytorch():
    """g.gelu(x, approximate="tanh") between two linears on a 2-worker plan: three SGD steps give
    the losses and weights of the same model in PyTorch float64."""
    torch = torch_or_skip()
    F = torch.nn.functional
    g = sw.Graph("gelu_tanh")
    x = g.input("x", (8, 6))
    h = g.gelu(g.linear(x, 12, name="fc1"), approximate="tanh", name="act")
    g.softmax(g.linear(h, 4, name="fc2"), name="loss")
    assert g["act"].attrs == {"approximate": "tanh"}
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((8, 6)).astype(np.float32)
    ys = rng.integers(0, 4, 8)
    plan = random_plan(g, sw.DeviceGraph.cpu(2), np.random.default_rng(1))
    t = Trainer(g, plan, optimizer=SGD(lr=0.5))
    w0 = t.get_weights()
    got = [t.step(xs, ys) for _ in range(3)]
    p = {k: torch.tensor(v.astype(np.float64), requires_grad=True) for k, v in w0.items()}
    opt = torch.optim.SGD(list(p.values()), lr=0.5)
    want = []
    for _ in range(3):
        opt.zero_grad()
        hh = F.gelu(F.linear(torch.tensor(xs.astype(np.float64)), p["fc1.weight"], p["fc1.bias"]), approximate="tanh")
        loss = F.cross_entropy(F.linear(hh, p["fc2.weight"], p["fc2.bias"]), torch.tensor(ys))
        loss.backward()
        opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(t.get_weights(), {k: v.detach().numpy() for k, v in p.items()})


def test_gelu_approximate_must_be_none_or_tanh():
    g = sw.Graph("g")
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match="gelu approximate must be 'none' or 'tanh', got 'fast'"):
        g.gelu(x, approximate="fast")
    assert g.gelu(x).op is not None and "approximate" not in g.ops[-1].attrs   # fingerprints kept


def test_leaky_relu_negative_slope_matches_pytorch():
    """A negative slope (PyTorch allows any): the gradient is taken from x, so it stays right."""
    torch = torch_or_skip()
    rng = np.random.default_rng(4)
    x, dy = spread(rng, 300), rng.standard_normal(300).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    torch_fns(torch)["leaky_relu_neg"](tx).backward(torch.tensor(dy))
    zero = (0,)
    y = _core.activation_forward("leaky_relu", x, zero, zero, x.shape, negative_slope=-0.7)
    dx = _core.activation_backward("leaky_relu", x, zero, dy, zero, zero, x.shape, negative_slope=-0.7)
    np.testing.assert_allclose(y, torch.nn.functional.leaky_relu(torch.tensor(x), -0.7).numpy(), rtol=1e-6)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-6)


def activation_graph(batch: int = 8) -> sw.Graph:
    """Every new activation, on 4-D conv outputs and 2-D linear outputs."""
    g = sw.Graph("activations")
    x = g.input("x", (batch, 3, 6, 6))
    x = g.conv2d(x, 4, kernel=3, padding=1, name="c1")
    x = g.gelu(x, name="gelu")
    x = g.conv2d(x, 4, kernel=3, padding=1, name="c2")
    x = g.silu(x, name="silu")
    x = g.leaky_relu(x, negative_slope=SLOPE, name="lrelu")
    x = g.flatten(x, name="fl")
    x = g.tanh(g.linear(x, 12, name="fc1"), name="tanh")
    x = g.sigmoid(g.linear(x, 8, name="fc2"), name="sig")
    g.softmax(g.linear(x, 5, name="fc3"), name="prob")
    return g


def batch(g: sw.Graph, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = g.ops[0].shape
    return (rng.standard_normal(shape) * 2).astype(np.float32), rng.integers(0, 5, shape[0])


def test_graph_trains_like_pytorch():
    """Predictions within 1e-5 of PyTorch's; three SGD steps of a 4-worker plan give its losses
    and weights (the project's training tolerance, float32 sums in another order)."""
    torch = torch_or_skip()
    F = torch.nn.functional
    g = activation_graph()
    x, y = batch(g, 0)
    opt = SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)
    t = Trainer(g, random_plan(g, sw.DeviceGraph.cpu(4), np.random.default_rng(0)), optimizer=opt)
    p = {k: torch.tensor(v, requires_grad=True) for k, v in t.get_weights().items()}

    def logits(xt):
        h = F.gelu(F.conv2d(xt, p["c1.weight"], p["c1.bias"], padding=1))
        h = F.leaky_relu(F.silu(F.conv2d(h, p["c2.weight"], p["c2.bias"], padding=1)), SLOPE)
        h = torch.tanh(F.linear(h.flatten(1), p["fc1.weight"], p["fc1.bias"]))
        h = torch.sigmoid(F.linear(h, p["fc2.weight"], p["fc2.bias"]))
        return F.linear(h, p["fc3.weight"], p["fc3.bias"])

    xt, yt = torch.tensor(x), torch.tensor(y)
    np.testing.assert_allclose(t.predict(x), F.softmax(logits(xt), 1).detach().numpy(), rtol=1e-5, atol=1e-6)
    topt = torch.optim.SGD(p.values(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    for _ in range(3):
        loss = F.cross_entropy(logits(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=RTOL)
    assert_close_weights(t.get_weights(), {k: v.detach().numpy() for k, v in p.items()})


# ------------------------------------------------------------------------------------ 4. plans
@pytest.mark.parametrize("ndev, spec", [
    (2, {"gelu": {"n": 2}, "silu": {"c": 2}, "lrelu": {"h": 2}, "tanh": {"c": 2}, "sig": {"n": 2}}),
    (3, {"gelu": {"w": 3}, "silu": {"h": 3}, "lrelu": {"c": 2}, "tanh": {"n": 2}, "sig": {"c": 2}}),
    (4, {"gelu": {"n": 2, "c": 2}, "silu": {"h": 2, "w": 2}, "lrelu": {"c": 4}, "tanh": {"c": 4}, "sig": {"n": 4},
         "c1": {"n": 4}, "fc1": {"c": 2}}),
])
def test_split_activations_train_like_one_worker(ndev, spec):
    """Each activation split its own way (its neighbours split otherwise or not at all, so
    regions move between workers in both directions); devices in reverse order."""
    g = activation_graph()
    x, y = batch(g, 1)
    assert_split_plan_trains_like_one_worker(g, x, y, SGD(lr=0.1, momentum=0.9), ndev, spec)


@pytest.mark.parametrize("seed", range(4))
def test_random_plans_match_reference(seed):
    g = activation_graph()
    x, y = batch(g, 10 + seed)
    rng = np.random.default_rng(seed)
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(2, 5))), rng)
    assert_plan_trains_like_reference(g, plan, x, y, SGD(lr=0.1, momentum=0.9, weight_decay=1e-4))


def test_searched_plan_trains_like_one_worker():
    g = activation_graph()
    x, y = batch(g, 2)
    opt = SGD(lr=0.05)
    t = Trainer(g, sw.search(g, sw.DeviceGraph.cpu(4)), optimizer=opt)
    want_losses, want_weights = one_worker_run(g, x, y, opt)
    np.testing.assert_allclose([t.step(x, y) for _ in range(3)], want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_weights)


# ------------------------------------------------------------------------------------ 5. descriptions
def test_descriptions_split_every_dimension_and_read_their_own_block():
    g = activation_graph()
    for kind, name in zip(KINDS, ("sig", "tanh", "gelu", "silu", "lrelu")):
        op = g[name]
        assert op.kind == kind and not op.has_weights and op.desc.num_parameters() == 0
        strategies = sw.strategies_of(op)
        assert [s.kind for s in strategies] == ["output"] * len(op.shape)
        for v, s in enumerate(strategies):
            assert s.valid, (name, s.dimension)
            half = op.shape[v] // 2
            for part, (lo, hi) in enumerate(((0, half), (half, op.shape[v]))):
                box = tuple((lo, hi) if d == v else (0, n) for d, n in enumerate(op.shape))
                assert input_region(op.desc, 0, box) == box
                assert list(s.regions[part].values()) == [box]


def test_flops_scale_with_elements_and_cost_the_transcendentals_more():
    """FLOPs are per output element (doubling the batch doubles them); GELU, sigmoid and SiLU
    count more work than leaky ReLU, leaky ReLU more than ReLU."""
    def flops(kind, n):
        g = sw.Graph()
        x = g.input("x", (n, 16))
        getattr(g, kind)(x, name="a")
        return g["a"].desc.forward_flops()

    for kind in (*KINDS, "relu"):
        assert flops(kind, 8) == 2 * flops(kind, 4) > 0
    assert min(flops(k, 4) for k in ("gelu", "sigmoid", "silu")) > flops("leaky_relu", 4) > flops("relu", 4)


# ------------------------------------------------------------------------------------ 6. bad input
@pytest.mark.parametrize("slope", [float("nan"), float("inf"), 1e39, "0.1", True, None])
def test_bad_negative_slope_is_refused(slope):
    g = sw.Graph()
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match="negative_slope"):
        g.leaky_relu(x, negative_slope=slope)
    assert len(g) == 1   # nothing was added


def test_builders_refuse_foreign_tensors_and_unknown_kinds():
    g, other = sw.Graph("g"), sw.Graph("other")
    x = other.input("x", (2, 3))
    for kind in KINDS:
        with pytest.raises(GraphError, match="belongs to graph"):
            getattr(g, kind)(x)
    with pytest.raises(ShapeError, match="unknown activation"):
        sw.ops.builtin.activation((2, 3), "swish")
    y = g.input("y", (2, 3))
    assert g.leaky_relu(y, negative_slope=np.float32(0.5)).shape == (2, 3)
    with pytest.raises(GraphError, match=r"only relu is fused into the op; apply g\.gelu\(y\)"):
        g.linear(y, 4, activation="gelu")


X = np.zeros((2, 3), np.float32)
Z = (0, 0)


@pytest.mark.parametrize("call, match", [
    (lambda: _core.activation_forward("swish", X, Z, Z, (2, 3)), "unknown activation 'swish'"),
    (lambda: _core.activation_forward("gelu", X, Z, (0, 1), (2, 3)), "does not cover"),
    (lambda: _core.activation_forward("gelu", X, Z, Z, (2,)), "y's shape"),
    (lambda: _core.activation_forward("gelu", X.astype(np.float64), Z, Z, (2, 3)), "float32|x"),
    (lambda: _core.activation_forward("gelu", [1.0], (0,), (0,), (1,)), "x"),
    (lambda: _core.activation_forward("leaky_relu", X, Z, Z, (2, 3), negative_slope=float("nan")), "negative_slope"),
    (lambda: _core.activation_backward("leaky_relu", X, Z, X, Z, Z, (2, 3), negative_slope=1e39), "negative_slope"),
    (lambda: _core.activation_backward("silu", X, Z, X[:1], Z, Z, (2, 3)), "dy does not cover"),
    (lambda: _core.activation_backward("tanh", X, Z, X, (0,), Z, (2, 3)), "dy's lo"),
    (lambda: _core.activation_backward("sigmoid", X, Z, X.reshape(6), (0,), Z, (2, 3)), "dy"),
    (lambda: _core.activation_backward("gelu", X, Z, X, Z, Z, (2, -3)), "dx's shape"),
])
def test_kernel_entry_points_refuse_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
