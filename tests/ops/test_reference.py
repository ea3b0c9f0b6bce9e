"""The numerics oracle (shardwise.reference) and the initializer (shardwise.train.init).

The oracle is the bottom rung of the numerics ladder, so it is checked three ways:
1. finite differences (float64, central differences) for every op's backward,
   the scalar being a fixed random projection of the op's output;
2. finite differences of loss_and_grads on small whole graphs;
3. PyTorch, when installed: per-op forward/backward and whole models (LeNet-5,
   a small ResNet and a small Inception with an auxiliary head) trained for 3
   SGD steps with momentum and weight decay, in float32, within 1e-4.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import shardwise as sw
from shardwise import reference as R
from shardwise.train.init import init_params, parameter_shapes

FD_EPS = 1e-6


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def numeric_grad(scalar: Callable[[], float], x: np.ndarray, eps: float = FD_EPS) -> np.ndarray:
    """Central differences of ``scalar()`` with respect to every element of ``x`` (mutated in place)."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        fp = scalar()
        x[idx] = old - eps
        fm = scalar()
        x[idx] = old
        g[idx] = (fp - fm) / (2 * eps)
    return g


def check_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str, atol: float = 0.0) -> None:
    """Max-norm relative check; on failure prints the first few (got, want) pairs and the worst one."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    diff = np.abs(got - want)
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-12)
    worst = float(diff.max(initial=0.0))
    if worst <= rtol * scale + atol:
        return
    flat_g, flat_w = got.ravel(), want.ravel()
    first = ", ".join(f"({a:.7g}, {b:.7g})" for a, b in zip(flat_g[:5], flat_w[:5]))
    k = int(diff.argmax())
    pytest.fail(f"{what}: worst |diff| {worst:.3g} at {np.unravel_index(k, got.shape)} "
                f"(got {flat_g[k]:.7g}, want {flat_w[k]:.7g}), relative {worst / scale:.3g} > {rtol}; "
                f"first pairs (got, want): {first}")


def fd_check(forward: Callable[..., np.ndarray], backward: Callable[[np.ndarray], tuple],
             inputs: list[np.ndarray], seed: int = 0, rtol: float = 1e-6) -> None:
    """FD-check ``backward(dy)`` (one gradient per input, None to skip) against ``forward(*inputs)``.

    The scalar is sum(proj * forward(*inputs)) for a fixed random ``proj``; ``dy = proj``.
    """
    y = forward(*inputs)
    proj = np.random.default_rng(seed + 1000).standard_normal(y.shape)
    analytic = backward(proj)
    assert len(analytic) == len(inputs)

    def scalar() -> float:
        return float((forward(*inputs) * proj).sum())

    for k, (x, g) in enumerate(zip(inputs, analytic)):
        if g is None:
            continue
        check_close(g, numeric_grad(scalar, x), rtol, f"input {k}", atol=1e-8)


def distinct_values(shape: tuple[int, ...], seed: int, spacing: float = 0.05) -> np.ndarray:
    """Values with no ties (pairwise at least ``spacing`` apart), signs mixed, in random order."""
    n = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    return (rng.permutation(n) - n / 2 + 0.5).reshape(shape) * spacing


def away_from_zero(shape: tuple[int, ...], seed: int, margin: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(margin, 1.0, size=shape)


# ----------------------------------------------------------------------------------------------
# naive loops: an independent forward for conv and pool
# ----------------------------------------------------------------------------------------------
def naive_conv2d(x, w, b, stride, padding):
    (sh, sw_), (ph, pw) = stride, padding
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    ho, wo = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw_ + 1
    y = np.zeros((n, co, ho, wo))
    for a in range(n):
        for o in range(co):
            for yy in range(ho):
                for xx in range(wo):
                    s = 0.0 if b is None else b[o]
                    for c in range(ci):
                        for i in range(kh):
                            for j in range(kw):
                                r, q = yy * sh + i - ph, xx * sw_ + j - pw
                                if 0 <= r < h and 0 <= q < wd:
                                    s += x[a, c, r, q] * w[o, c, i, j]
                    y[a, o, yy, xx] = s
    return y


def naive_pool(x, kernel, stride, padding, kind):
    (kh, kw), (sh, sw_), (ph, pw) = kernel, stride, padding
    n, c, h, wd = x.shape
    ho, wo = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw_ + 1
    y = np.zeros((n, c, ho, wo))
    for idx in np.ndindex(n, c, ho, wo):
        a, ch, yy, xx = idx
        vals = []
        for i in range(kh):
            for j in range(kw):
                r, q = yy * sh + i - ph, xx * sw_ + j - pw
                inside = 0 <= r < h and 0 <= q < wd
                vals.append(x[a, ch, r, q] if inside else (-np.inf if kind == "max" else 0.0))
        y[idx] = max(vals) if kind == "max" else sum(vals) / (kh * kw)
    return y


# ----------------------------------------------------------------------------------------------
# 1. per-op finite-difference checks (float64)
# ----------------------------------------------------------------------------------------------
CONV_CASES = [
    # (N, Ci, H, W, Co, kernel, stride, padding, bias)
    (2, 3, 6, 7, 4, (3, 3), (1, 1), (0, 0), True),
    (2, 3, 6, 7, 4, (3, 3), (2, 2), (1, 1), True),
    (2, 2, 5, 9, 3, (1, 7), (1, 1), (0, 3), False),
    (2, 2, 9, 5, 3, (7, 1), (1, 1), (3, 0), True),
    (1, 3, 7, 6, 2, (2, 3), (2, 1), (1, 0), True),
    (2, 4, 6, 6, 3, (1, 1), (2, 2), (0, 0), False),
    (1, 2, 5, 5, 2, (5, 5), (3, 3), (2, 2), True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"k{c[5]}s{c[6]}p{c[7]}b{int(c[8])}")
def test_conv2d_forward_matches_loops_and_backward_matches_fd(case):
    n, ci, h, w_, co, kernel, stride, padding, bias = case
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, ci, h, w_))
    w = rng.standard_normal((co, ci) + kernel)
    b = rng.standard_normal(co) if bias else None
    check_close(R.conv2d_forward(x, w, b, stride, padding), naive_conv2d(x, w, b, stride, padding),
                1e-12, "conv2d forward")
    inputs = [x, w] + ([b] if bias else [])
    fd_check(lambda x, w, *b: R.conv2d_forward(x, w, b[0] if b else None, stride, padding),
             lambda dy: R.conv2d_backward(x, w, dy, stride, padding, bias=bias)[: len(inputs)],
             inputs)
    if not bias:
        y = R.conv2d_forward(x, w, None, stride, padding)
        assert R.conv2d_backward(x, w, np.ones_like(y), stride, padding, bias=False)[2] is None


POOL_CASES = [
    # (kernel, stride, padding)
    ((2, 2), (2, 2), (0, 0)),
    ((3, 3), (2, 2), (1, 1)),
    ((3, 3), (1, 1), (1, 1)),
    ((3, 2), (2, 1), (1, 0)),
    ((5, 5), (3, 3), (0, 0)),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("kernel,stride,padding", POOL_CASES)
def test_pool2d_forward_matches_loops_and_backward_matches_fd(kernel, stride, padding, kind):
    # Distinct values: no ties, so the max's gradient is well defined and FD-stable.  Negative
    # values next to the padding check that max pooling never picks the padding.
    x = distinct_values((2, 2, 7, 8), seed=3) - 1.0
    check_close(R.pool2d_forward(x, kernel, stride, padding, kind), naive_pool(x, kernel, stride, padding, kind),
                1e-12, f"{kind} pool forward")
    fd_check(lambda x: R.pool2d_forward(x, kernel, stride, padding, kind),
             lambda dy: (R.pool2d_backward(x, dy, kernel, stride, padding, kind),), [x])


def test_max_pool_backward_routes_ties_to_the_first_maximum():
    # One 3x3 window holding the maximum 5 three times, in row-major positions (0,1), (1,0), (2,2).
    x = np.array([[1, 5, 2],
                  [5, 0, 3],
                  [4, 1, 5]], dtype=np.float64).reshape(1, 1, 3, 3)
    dx = R.pool2d_backward(x, np.array([[[[7.0]]]]), (3, 3), (1, 1), (0, 0), "max")
    want = np.zeros((3, 3))
    want[0, 1] = 7.0
    np.testing.assert_array_equal(dx[0, 0], want)
    # Overlapping windows (stride 1) each route their own gradient to their own first maximum.
    x = np.zeros((1, 1, 2, 3))
    dx = R.pool2d_backward(x, np.array([[[[1.0, 10.0]]]]), (2, 2), (1, 1), (0, 0), "max")
    np.testing.assert_array_equal(dx[0, 0], [[1.0, 10.0, 0.0], [0.0, 0.0, 0.0]])


def test_avg_pool_counts_padding_in_the_divisor():
    x = np.ones((1, 1, 2, 2))
    y = R.pool2d_forward(x, (3, 3), (1, 1), (1, 1), "avg")
    np.testing.assert_allclose(y[0, 0], np.full((2, 2), 4 / 9))


def test_relu_and_add():
    x = away_from_zero((3, 4, 5), seed=4)
    y = R.relu_forward(x)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    fd_check(R.relu_forward, lambda dy: (R.relu_backward(y, dy),), [x])
    a, b = np.random.default_rng(5).standard_normal((2, 3, 4, 2))
    fd_check(R.add_forward, R.add_backward, [a, b])


def test_batchnorm2d():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4, 3, 5)) * 2 + 1
    gamma, beta = rng.standard_normal(4), rng.standard_normal(4)
    y, mean, invstd = R.batchnorm2d_forward(x, gamma, beta)
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)))
    np.testing.assert_allclose(invstd, 1 / np.sqrt(x.var(axis=(0, 2, 3)) + 1e-5))   # biased variance
    xhat = (y - beta.reshape(1, 4, 1, 1)) / gamma.reshape(1, 4, 1, 1)
    np.testing.assert_allclose(xhat.mean(axis=(0, 2, 3)), 0, atol=1e-12)

    def fwd(x, gamma, beta):
        return R.batchnorm2d_forward(x, gamma, beta)[0]

    def bwd(dy):
        _, m, s = R.batchnorm2d_forward(x, gamma, beta)
        return R.batchnorm2d_backward(x, gamma, dy, m, s)

    fd_check(fwd, bwd, [x, gamma, beta])


@pytest.mark.parametrize("axis", [1, 0])
def test_concat(axis):
    rng = np.random.default_rng(7)
    shapes = [(2, 3, 4, 4), (2, 1, 4, 4), (2, 2, 4, 4)] if axis == 1 else [(2, 3, 4), (1, 3, 4)]
    xs = [rng.standard_normal(s) for s in shapes]
    sizes = [s[axis] for s in shapes]
    fd_check(lambda *xs: R.concat_forward(xs, axis), lambda dy: tuple(R.concat_backward(dy, sizes, axis)), xs)


def test_flatten():
    x = np.random.default_rng(8).standard_normal((3, 2, 3, 4))
    y = R.flatten_forward(x)
    assert y.shape == (3, 24)
    np.testing.assert_array_equal(y[1], x[1].ravel())   # C order, as torch.flatten(x, 1)
    fd_check(R.flatten_forward, lambda dy: (R.flatten_backward(dy, x.shape),), [x])


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((4, 6)), rng.standard_normal((5, 6))
    b = rng.standard_normal(5) if bias else None
    inputs = [x, w] + ([b] if bias else [])
    fd_check(lambda x, w, *b: R.linear_forward(x, w, b[0] if b else None),
             lambda dy: R.linear_backward(x, w, dy, bias=bias)[: len(inputs)], inputs)
    assert (R.linear_backward(x, w, np.ones((4, 5)), bias=bias)[2] is None) == (not bias)


def test_softmax_and_cross_entropy():
    rng = np.random.default_rng(10)
    logits = rng.standard_normal((4, 6)) * 3
    labels = np.array([0, 5, 2, 2])
    p = R.softmax_forward(logits)
    np.testing.assert_allclose(p.sum(axis=1), 1)
    # numerically stable: huge logits give the same probabilities as shifted ones
    np.testing.assert_allclose(R.softmax_forward(logits + 1000.0), p, rtol=1e-12)
    assert R.cross_entropy(p, labels) == pytest.approx(-np.mean(np.log(p[np.arange(4), labels])))

    def loss() -> float:
        return R.cross_entropy(R.softmax_forward(logits), labels)

    check_close(R.softmax_cross_entropy_backward(p, labels), numeric_grad(loss, logits), 1e-6, "CE grad")
    fd_check(R.softmax_forward, lambda dy: (R.softmax_backward(R.softmax_forward(logits), dy),), [logits])
    with pytest.raises(ValueError, match="labels"):
        R.cross_entropy(p, np.array([0, 6, 1, 1]))


def test_matmul():
    rng = np.random.default_rng(20)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    np.testing.assert_allclose(R.matmul_forward(a, b), np.einsum("mk,kn->mn", a, b), rtol=1e-12)
    fd_check(R.matmul_forward, lambda dy: R.matmul_backward(a, b, dy), [a, b])


def test_lstm_cell():
    rng = np.random.default_rng(21)
    xs = [2 * rng.standard_normal((3, 4)) for _ in range(4)]     # i, f, g, c_prev; sigmoids off their middle
    i, f, g, c = xs
    np.testing.assert_allclose(R.lstm_cell_forward(*xs), c / (1 + np.exp(-f)) + np.tanh(g) / (1 + np.exp(-i)),
                               rtol=1e-12)
    fd_check(R.lstm_cell_forward, lambda dy: R.lstm_cell_backward(*xs, dy), xs)


def test_lstm_hidden():
    rng = np.random.default_rng(22)
    o, c = 2 * rng.standard_normal((3, 4)), 2 * rng.standard_normal((3, 4))
    np.testing.assert_allclose(R.lstm_hidden_forward(o, c), np.tanh(c) / (1 + np.exp(-o)), rtol=1e-12)
    fd_check(R.lstm_hidden_forward, lambda dy: R.lstm_hidden_backward(o, c, dy), [o, c])


def test_sigmoid_saturates_without_overflow():
    x = np.array([-1e30, -800.0, -20.0, 0.0, 20.0, 800.0, 1e30])
    with np.errstate(over="raise", invalid="raise", divide="raise"):   # underflow to 0 is the right answer
        s = R.sigmoid(x)
    np.testing.assert_allclose(s, [0.0, 0.0, 1 / (1 + np.exp(20.0)), 0.5, 1 / (1 + np.exp(-20.0)), 1.0, 1.0],
                               rtol=1e-12, atol=0)
    assert R.sigmoid(x.astype(np.float32)).dtype == np.float32


def test_float32_in_float32_out():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    y = R.conv2d_forward(x, w, b, (1, 1), (1, 1))
    assert y.dtype == np.float32
    assert all(g.dtype == np.float32 for g in R.conv2d_backward(x, w, y, (1, 1), (1, 1)))
    for kind in ("max", "avg"):
        p = R.pool2d_forward(x, (3, 3), (2, 2), (1, 1), kind)
        assert p.dtype == np.float32
        assert R.pool2d_backward(x, p, (3, 3), (2, 2), (1, 1), kind).dtype == np.float32
    yb, m, s = R.batchnorm2d_forward(x, b[:3], b[:3])
    assert yb.dtype == m.dtype == s.dtype == np.float32
    assert all(g.dtype == np.float32 for g in R.batchnorm2d_backward(x, b[:3], yb, m, s))
    p = R.softmax_forward(x.reshape(2, -1))
    assert p.dtype == R.softmax_cross_entropy_backward(p, np.array([0, 1])).dtype == np.float32


# ----------------------------------------------------------------------------------------------
# 2. whole-graph finite-difference checks (float64)
# ----------------------------------------------------------------------------------------------
def mixed_graph(two_heads: bool = False) -> sw.Graph:
    """conv/bn/relu/add/max+avg pool/concat/flatten/linear/softmax on (3, 2, 6, 6)."""
    g = sw.Graph("mixed")
    x = g.input("x", (3, 2, 6, 6))
    a = g.conv2d(x, 3, kernel=3, padding=1, activation="relu", name="c1")
    a = g.batchnorm2d(a, name="bn1")
    a = g.relu(a, name="r1")
    b = g.conv2d(x, 3, kernel=(1, 3), padding=(0, 1), bias=False, name="c2")
    s = g.add(a, b, name="add")
    m = g.pool2d(s, kernel=3, stride=2, padding=1, kind="max", name="mp")        # 3x3
    v = g.pool2d(s, kernel=2, stride=2, kind="avg", name="ap")                   # 3x3
    w = g.conv2d(s, 2, kernel=(3, 1), stride=2, padding=(1, 0), name="c3")       # 3x3
    c = g.concat([m, v, w], axis=1, name="cat")                                   # 8x3x3
    f = g.flatten(c, name="flat")
    h = g.linear(f, 5, activation="relu", name="fc1")
    o = g.linear(h, 4, name="fc2")
    g.softmax(o, name="prob")
    if two_heads:
        q = g.pool2d(a, kernel=6, stride=1, kind="avg", name="aux.pool")
        q = g.flatten(q, name="aux.flat")
        q = g.linear(q, 4, name="aux.fc")
        g.softmax(q, name="aux.prob")
    return g


@pytest.mark.parametrize("two_heads", [False, True], ids=["one_softmax", "two_softmaxes"])
def test_loss_and_grads_match_finite_differences(two_heads):
    g = mixed_graph(two_heads)
    params = init_params(g, seed=3, dtype=np.float64)
    rng = np.random.default_rng(12)
    for k in params:   # move batchnorm off its (1, 0) initialization so gamma/beta matter
        params[k] = params[k] + 0.3 * rng.standard_normal(params[k].shape)
    x = rng.standard_normal((3, 2, 6, 6))
    labels = np.array([1, 3, 0])
    loss, grads = R.loss_and_grads(g, params, x, labels)
    assert set(grads) == set(params)
    assert all(grads[k].shape == params[k].shape and grads[k].dtype == np.float64 for k in params)

    # the loss is the sum over the softmax ops of their mean cross-entropy
    acts = R.forward(g, params, x)
    heads = [op.name for op in g.ops if op.kind == "softmax"]
    assert len(heads) == (2 if two_heads else 1)
    assert loss == pytest.approx(sum(R.cross_entropy(acts[h], labels) for h in heads), rel=1e-12)

    def scalar() -> float:
        return R.loss_and_grads(g, params, x, labels)[0]

    for name in params:
        check_close(grads[name], numeric_grad(scalar, params[name]), 1e-5, name, atol=1e-8)


def test_rnn_loss_and_grads_match_finite_differences():
    """Weights shared across timesteps (each parameter read by one matmul per step) get the sum
    of their readers' gradients; several input ops are passed as a dict."""
    g = sw.models.rnn(layers=2, hidden=3, steps=3, batch=2, input_size=2, num_classes=3)
    params = init_params(g, seed=4, dtype=np.float64)
    assert set(params) == {f"layer{l}.W_{k}.weight" for l in range(2) for k in "ifgo"} | {"fc.weight", "fc.bias"}
    rng = np.random.default_rng(14)
    inputs = {op.name: rng.standard_normal(op.shape) for op in g.ops if op.kind == "input"}
    labels = np.array([2, 0])
    loss, grads = R.loss_and_grads(g, params, inputs, labels)
    assert all(np.abs(grads[k]).max() > 0 for k in grads)

    def scalar() -> float:
        return R.loss_and_grads(g, params, inputs, labels)[0]

    for name in params:
        check_close(grads[name], numeric_grad(scalar, params[name]), 1e-5, name, atol=1e-8)
    # the weight is shared: every timestep's gate matmul reads the same parameter
    acts = R.forward(g, params, inputs)
    w = params["layer0.W_i.weight"]
    z = [acts[f"layer0.t{t}.concat"] for t in range(3)]
    assert all(np.allclose(acts[f"layer0.t{t}.i"], z[t] @ w) for t in range(3))


def test_reference_multi_input_errors():
    g = sw.models.rnn(layers=1, hidden=3, steps=2, batch=2, input_size=2, num_classes=3)
    params = init_params(g, seed=0)
    good = {op.name: np.zeros(op.shape, np.float32) for op in g.ops if op.kind == "input"}
    with pytest.raises(ValueError, match="pass a dict"):
        R.forward(g, params, good["x0"])
    with pytest.raises(ValueError, match=r"missing \['h0'\]"):
        R.forward(g, params, {k: v for k, v in good.items() if k != "h0"})
    with pytest.raises(ValueError, match="unknown"):
        R.forward(g, params, {**good, "x9": good["x0"]})
    with pytest.raises(ValueError, match="'c0'"):
        R.forward(g, params, {**good, "c0": np.zeros((2, 4), np.float32)})
    with pytest.raises(ValueError, match="one dtype and one batch size"):
        R.forward(g, params, {**good, "c0": np.zeros((3, 3), np.float32)})
    with pytest.raises(TypeError, match="'x1'"):
        R.forward(g, params, {**good, "x1": np.zeros((2, 2), np.int32)})


def test_forward_outputs_every_op_post_fused_relu():
    g = mixed_graph()
    params = init_params(g, seed=0, dtype=np.float64)
    x = np.random.default_rng(13).standard_normal((3, 2, 6, 6))
    acts = R.forward(g, params, x)
    assert list(acts) == g.op_names()
    for op in g.ops:
        assert acts[op.name].shape == op.shape, op.name
    assert (acts["c1"] >= 0).all() and (acts["fc1"] >= 0).all()
    pre = R.conv2d_forward(x, params["c1.weight"], params["c1.bias"], (1, 1), (1, 1))
    np.testing.assert_array_equal(acts["c1"], np.maximum(pre, 0))
    assert (pre < 0).any()
    # another batch size runs too (the ops do not depend on N); other dimensions must match
    assert R.forward(g, params, x[:2])["prob"].shape == (2, 4)
    with pytest.raises(ValueError, match="shape"):
        R.forward(g, params, np.zeros((3, 2, 5, 6)))


# ----------------------------------------------------------------------------------------------
# sgd_step
# ----------------------------------------------------------------------------------------------
def test_sgd_step_rule_by_hand():
    p = {"w": np.array([1.0, -2.0])}
    bufs: dict[str, np.ndarray] = {}
    g = {"w": np.array([0.5, 0.25])}
    R.sgd_step(p, g, bufs, lr=0.1, momentum=0.9, weight_decay=0.01, dampening=0.5)
    d1 = g["w"] + 0.01 * np.array([1.0, -2.0])              # first step: buf = d (no dampening)
    np.testing.assert_allclose(bufs["w"], d1)
    p1 = np.array([1.0, -2.0]) - 0.1 * d1
    np.testing.assert_allclose(p["w"], p1)
    R.sgd_step(p, g, bufs, lr=0.1, momentum=0.9, weight_decay=0.01, dampening=0.5)
    buf2 = 0.9 * d1 + 0.5 * (g["w"] + 0.01 * p1)
    np.testing.assert_allclose(bufs["w"], buf2)
    np.testing.assert_allclose(p["w"], p1 - 0.1 * buf2)
    # plain SGD keeps no buffers
    bufs = {}
    R.sgd_step(p, g, bufs, lr=1.0)
    assert bufs == {}
    np.testing.assert_allclose(p["w"], p1 - 0.1 * buf2 - g["w"])


# ----------------------------------------------------------------------------------------------
# 4. init_params
# ----------------------------------------------------------------------------------------------
def test_init_params_deterministic_and_seeded():
    g = sw.models.lenet5(batch=2)
    a, b, c = init_params(g, seed=0), init_params(g, seed=0), init_params(g, seed=1)
    assert list(a) == list(parameter_shapes(g))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert not np.array_equal(a[k], c[k]), k
    assert not np.array_equal(a["conv1.bias"][:6], a["conv1.weight"].ravel()[:6])


def test_init_params_depend_only_on_names():
    def build(order):
        g = sw.Graph("g")
        x = g.input("x", (2, 3, 8, 8))
        outs = {}
        for name in order:
            outs[name] = g.conv2d(x, 4, kernel=3, name=name)
        if order[0] == "b":   # a different graph around the same names: extra ops before and after
            g.batchnorm2d(outs["a"], name="extra_bn")
        cat = g.concat([outs["a"], outs["b"]], name="cat")
        g.softmax(g.linear(g.flatten(cat), 10, name="fc"))
        return g

    p1, p2 = init_params(build(["a", "b"]), seed=5), init_params(build(["b", "a"]), seed=5)
    for k in ("a.weight", "a.bias", "b.weight", "b.bias", "fc.weight", "fc.bias"):
        np.testing.assert_array_equal(p1[k], p2[k])
    assert not np.array_equal(p1["a.weight"], p1["b.weight"])
    assert "extra_bn.weight" in p2 and "extra_bn.weight" not in p1


def test_init_params_bounds_and_dtypes():
    g = sw.Graph("g")
    x = g.input("x", (2, 16, 8, 8))
    y = g.conv2d(x, 32, kernel=(3, 5), padding=1, bias=True, name="conv")
    y = g.conv2d(y, 8, kernel=1, bias=False, name="conv_nobias")
    y = g.batchnorm2d(y, name="bn")
    g.softmax(g.linear(g.flatten(y), 50, name="fc"), name="prob")
    p32 = init_params(g, seed=7)
    p64 = init_params(g, seed=7, dtype=np.float64)
    assert set(p32) == {"conv.weight", "conv.bias", "conv_nobias.weight", "bn.weight", "bn.bias",
                        "fc.weight", "fc.bias"}
    assert all(v.dtype == np.float32 for v in p32.values())
    assert all(v.dtype == np.float64 for v in p64.values())
    for k in p32:   # float32 values are the float64 ones rounded
        np.testing.assert_array_equal(p32[k], p64[k].astype(np.float32))
    assert p32["conv.weight"].shape == (32, 16, 3, 5) and p32["fc.weight"].shape == (50, 8 * 8 * 6)
    for op, fan_in in (("conv", 16 * 3 * 5), ("conv_nobias", 32), ("fc", 8 * 6 * 8)):
        bound = 1 / np.sqrt(fan_in)
        for k in (f"{op}.weight", f"{op}.bias"):
            if k not in p64:
                continue
            v = p64[k]
            assert np.abs(v).max() <= bound, k
            if v.size >= 1000:   # fills the interval uniformly: std of U(-b, b) is b / sqrt(3)
                assert np.abs(v).max() > 0.995 * bound
                assert v.std() == pytest.approx(bound / np.sqrt(3), rel=0.05)
                assert abs(v.mean()) < 0.05 * bound
    np.testing.assert_array_equal(p32["bn.weight"], np.ones(8, np.float32))
    # a parameter (E + H, H): nn.LSTM's U(-1/sqrt(H), 1/sqrt(H)), H its last dimension
    r = sw.Graph("r")
    r.parameter((40, 30), name="W")
    w = init_params(r, seed=7, dtype=np.float64)["W.weight"]
    assert w.shape == (40, 30) and np.abs(w).max() <= 1 / np.sqrt(30) and np.abs(w).max() > 0.99 / np.sqrt(30)
    np.testing.assert_array_equal(p32["bn.bias"], np.zeros(8, np.float32))
    with pytest.raises(ValueError):
        init_params(g, seed=-1)
    with pytest.raises(TypeError):
        init_params(g, dtype=np.int32)


# ----------------------------------------------------------------------------------------------
# 3. PyTorch comparisons (float32, 1e-4)
# ----------------------------------------------------------------------------------------------
def _torch():
    return pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")


TORCH_RTOL = 1e-4


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"k{c[5]}s{c[6]}p{c[7]}b{int(c[8])}")
def test_torch_conv2d(case):
    torch = _torch()
    F = torch.nn.functional
    n, ci, h, w_, co, kernel, stride, padding, bias = case
    rng = np.random.default_rng(20)
    x = rng.standard_normal((n, ci, h, w_)).astype(np.float32)
    w = rng.standard_normal((co, ci) + kernel).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32) if bias else None
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True) if bias else None
    ty = F.conv2d(tx, tw, tb, stride=stride, padding=padding)
    y = R.conv2d_forward(x, w, b, stride, padding)
    check_close(y, ty.detach().numpy(), TORCH_RTOL, "conv2d forward")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    ty.backward(torch.tensor(dy))
    dx, dw, db = R.conv2d_backward(x, w, dy, stride, padding, bias=bias)
    check_close(dx, tx.grad.numpy(), TORCH_RTOL, "conv2d dx")
    check_close(dw, tw.grad.numpy(), TORCH_RTOL, "conv2d dw")
    if bias:
        check_close(db, tb.grad.numpy(), TORCH_RTOL, "conv2d db")


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("kernel,stride,padding", POOL_CASES)
def test_torch_pool2d(kernel, stride, padding, kind):
    torch = _torch()
    F = torch.nn.functional
    rng = np.random.default_rng(21)
    # Rounded values make ties common: PyTorch's CPU max pool also routes a tie to the first maximum.
    x = np.round(rng.standard_normal((2, 3, 7, 8)) * 2).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    if kind == "max":
        ty = F.max_pool2d(tx, kernel, stride, padding)
    else:
        ty = F.avg_pool2d(tx, kernel, stride, padding, count_include_pad=True)
    y = R.pool2d_forward(x, kernel, stride, padding, kind)
    check_close(y, ty.detach().numpy(), TORCH_RTOL, f"{kind} pool forward")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    ty.backward(torch.tensor(dy))
    check_close(R.pool2d_backward(x, dy, kernel, stride, padding, kind), tx.grad.numpy(), TORCH_RTOL,
                f"{kind} pool backward")


def test_torch_batchnorm_linear_softmax_cross_entropy():
    torch = _torch()
    F = torch.nn.functional
    rng = np.random.default_rng(22)
    x = (rng.standard_normal((4, 5, 3, 3)) * 3 + 2).astype(np.float32)
    gamma, beta = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    tx, tg, tb = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
    ty = F.batch_norm(tx, None, None, tg, tb, training=True, eps=1e-5)
    y, mean, invstd = R.batchnorm2d_forward(x, gamma, beta)
    check_close(y, ty.detach().numpy(), TORCH_RTOL, "batchnorm forward")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    ty.backward(torch.tensor(dy))
    for got, want, what in zip(R.batchnorm2d_backward(x, gamma, dy, mean, invstd), (tx.grad, tg.grad, tb.grad),
                               ("dx", "dgamma", "dbeta")):
        check_close(got, want.numpy(), TORCH_RTOL, f"batchnorm {what}")

    h = rng.standard_normal((6, 7)).astype(np.float32)
    w, b = rng.standard_normal((4, 7)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    th, tw, tbias = (torch.tensor(a, requires_grad=True) for a in (h, w, b))
    tz = F.linear(th, tw, tbias)
    z = R.linear_forward(h, w, b)
    check_close(z, tz.detach().numpy(), TORCH_RTOL, "linear forward")
    labels = np.array([0, 3, 1, 1, 2, 3])
    tloss = F.cross_entropy(tz, torch.tensor(labels))
    tloss.backward()
    p = R.softmax_forward(z)
    check_close(p, F.softmax(tz, dim=1).detach().numpy(), TORCH_RTOL, "softmax")
    assert R.cross_entropy(p, labels) == pytest.approx(tloss.item(), rel=TORCH_RTOL)
    dz = R.softmax_cross_entropy_backward(p, labels)
    for got, want, what in zip(R.linear_backward(h, w, dz), (th.grad, tw.grad, tbias.grad), ("dx", "dw", "db")):
        check_close(got, want.numpy(), TORCH_RTOL, f"linear {what}")


@pytest.mark.parametrize("nesterov,dampening", [(False, 0.0), (False, 0.3), (True, 0.0)])
def test_torch_sgd_step(nesterov, dampening):
    torch = _torch()
    rng = np.random.default_rng(23)
    p = {"a": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal(5).astype(np.float32)}
    tp = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in p.items()}
    opt = torch.optim.SGD(list(tp.values()), lr=0.05, momentum=0.9, weight_decay=1e-4,
                          dampening=dampening, nesterov=nesterov)
    bufs: dict[str, np.ndarray] = {}
    for _ in range(3):
        grads = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in p.items()}
        for k in tp:
            tp[k].grad = torch.tensor(grads[k])
        opt.step()
        R.sgd_step(p, grads, bufs, lr=0.05, momentum=0.9, weight_decay=1e-4, dampening=dampening,
                   nesterov=nesterov)
    for k in p:
        check_close(p[k], tp[k].detach().numpy(), 1e-6, f"param {k}")


def _torch_graph_forward(torch, graph: sw.Graph, tparams: dict, x):
    """A second, independent interpreter of a Graph with torch.nn.functional: op name -> logits of each softmax."""
    F = torch.nn.functional
    acts, logits = {}, {}
    for op in graph.ops:
        ins = [acts[graph.ops[i].name] for i in op.inputs]
        a = op.attrs
        if op.kind == "input":
            y = x
        elif op.kind == "conv2d":
            y = F.conv2d(ins[0], tparams[f"{op.name}.weight"], tparams.get(f"{op.name}.bias"),
                         stride=a["stride"], padding=a["padding"])
        elif op.kind == "pool2d" and a["kind"] == "max":
            y = F.max_pool2d(ins[0], a["kernel"], a["stride"], a["padding"])
        elif op.kind == "pool2d":
            y = F.avg_pool2d(ins[0], a["kernel"], a["stride"], a["padding"], count_include_pad=True)
        elif op.kind == "relu":
            y = F.relu(ins[0])
        elif op.kind == "add":
            y = ins[0] + ins[1]
        elif op.kind == "batchnorm2d":
            y = F.batch_norm(ins[0], None, None, tparams[f"{op.name}.weight"], tparams[f"{op.name}.bias"],
                             training=True, eps=1e-5)
        elif op.kind == "concat":
            y = torch.cat(ins, dim=a["axis"])
        elif op.kind == "flatten":
            y = torch.flatten(ins[0], 1)
        elif op.kind == "linear":
            y = F.linear(ins[0], tparams[f"{op.name}.weight"], tparams.get(f"{op.name}.bias"))
        elif op.kind == "softmax":
            logits[op.name] = ins[0]
            y = F.softmax(ins[0], dim=1)
        else:
            raise NotImplementedError(op.kind)
        if a.get("activation") == "relu":
            y = F.relu(y)
        acts[op.name] = y
    return logits


def small_resnet(batch: int = 4) -> sw.Graph:
    """ResNet-18's structure scaled down: stem, an identity block, a strided block with downsample."""
    g = sw.Graph("small_resnet")
    x = g.input("data", (batch, 3, 16, 16))
    x = g.conv2d(x, 8, kernel=3, padding=1, bias=False, name="conv1")
    x = g.batchnorm2d(x, name="bn1")
    x = g.relu(x, name="relu")
    x = g.pool2d(x, kernel=3, stride=2, padding=1, kind="max", name="maxpool")          # 8x8
    for prefix, planes, stride in (("layer1.0", 8, 1), ("layer2.0", 16, 2)):
        identity = x
        if stride != 1:
            identity = g.conv2d(x, planes, kernel=1, stride=stride, bias=False, name=f"{prefix}.downsample.0")
            identity = g.batchnorm2d(identity, name=f"{prefix}.downsample.1")
        y = g.conv2d(x, planes, kernel=3, stride=stride, padding=1, bias=False, name=f"{prefix}.conv1")
        y = g.relu(g.batchnorm2d(y, name=f"{prefix}.bn1"), name=f"{prefix}.relu1")
        y = g.conv2d(y, planes, kernel=3, padding=1, bias=False, name=f"{prefix}.conv2")
        y = g.batchnorm2d(y, name=f"{prefix}.bn2")
        x = g.relu(g.add(y, identity, name=f"{prefix}.add"), name=f"{prefix}.relu")
    x = g.pool2d(x, kernel=4, stride=1, kind="avg", name="avgpool")
    x = g.linear(g.flatten(x, name="flatten"), 10, name="fc")
    g.softmax(x, name="softmax")
    return g


def small_inception(batch: int = 4) -> sw.Graph:
    """Inception-v3's ingredients scaled down: BasicConv2d, 1x3/3x1 branches, avg-pool branch,
    a reduction block and an auxiliary head (two softmaxes, losses summed)."""
    g = sw.Graph("small_inception")

    def basic(x, c, name, **kw):
        x = g.conv2d(x, c, bias=False, name=f"{name}.conv", **kw)
        return g.relu(g.batchnorm2d(x, name=f"{name}.bn"), name=f"{name}.relu")

    x = g.input("data", (batch, 3, 13, 13))
    x = basic(x, 8, "Conv2d_1a_3x3", kernel=3, stride=1)                                # 11x11
    b1 = basic(x, 4, "Mixed.branch1x1", kernel=1)
    b7 = basic(x, 4, "Mixed.branch7x7_1", kernel=1)
    b7 = basic(b7, 4, "Mixed.branch7x7_2", kernel=(1, 3), padding=(0, 1))
    b7 = basic(b7, 6, "Mixed.branch7x7_3", kernel=(3, 1), padding=(1, 0))
    bp = g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name="Mixed.avgpool")
    bp = basic(bp, 4, "Mixed.branch_pool", kernel=1)
    x = g.concat([b1, b7, bp], axis=1, name="Mixed.concat")                            # 14x11x11
    aux = g.pool2d(x, kernel=5, stride=3, kind="avg", name="AuxLogits.avgpool")         # 3x3
    aux = basic(aux, 6, "AuxLogits.conv0", kernel=1)
    aux = g.linear(g.flatten(aux, name="AuxLogits.flatten"), 5, name="AuxLogits.fc")
    g.softmax(aux, name="AuxLogits.softmax")
    r3 = basic(x, 8, "Reduce.branch3x3", kernel=3, stride=2)                             # 5x5
    rp = g.pool2d(x, kernel=3, stride=2, kind="max", name="Reduce.maxpool")              # 5x5
    x = g.concat([r3, rp], axis=1, name="Reduce.concat")                                # 22x5x5
    x = g.pool2d(x, kernel=5, stride=1, kind="avg", name="avgpool")
    x = g.linear(g.flatten(x, name="flatten"), 5, name="fc")
    g.softmax(x, name="softmax")
    return g


def _compare_training(torch, graph, forward_torch, tparams, x_batches, label_batches):
    """3 SGD steps (momentum 0.9, weight decay 1e-4) here and in torch: losses, grads, parameters."""
    params = {k: v.detach().numpy().copy() for k, v in tparams.items()}
    opt = torch.optim.SGD(list(tparams.values()), lr=0.05, momentum=0.9, weight_decay=1e-4)
    bufs: dict[str, np.ndarray] = {}
    for step, (x, labels) in enumerate(zip(x_batches, label_batches)):
        loss, grads = R.loss_and_grads(graph, params, x, labels)
        opt.zero_grad()
        logits = forward_torch(torch.tensor(x))
        tloss = sum(torch.nn.functional.cross_entropy(z, torch.tensor(labels)) for z in logits)
        tloss.backward()
        assert loss == pytest.approx(tloss.item(), rel=TORCH_RTOL), f"loss at step {step}"
        assert all(grads[k].dtype == np.float32 for k in grads)
        for k in params:
            check_close(grads[k], tparams[k].grad.numpy(), TORCH_RTOL, f"step {step} grad {k}")
        opt.step()
        R.sgd_step(params, grads, bufs, lr=0.05, momentum=0.9, weight_decay=1e-4)
    for k in params:
        check_close(params[k], tparams[k].detach().numpy(), TORCH_RTOL, f"param {k} after 3 steps")


def _batches(graph, seed, steps=3):
    shape = graph.ops[0].shape
    classes = [op.shape[1] for op in graph.ops if op.kind == "softmax"][0]
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(steps)]
    ys = [rng.integers(0, classes, size=shape[0]) for _ in range(steps)]
    return xs, ys


def test_torch_lenet5_training_matches():
    torch = _torch()
    nn = torch.nn

    class LeNet5(nn.Module):   # written by hand: checks the graph's layout as well as the numerics
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

        def forward(self, x):
            F = nn.functional
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = torch.flatten(x, 1)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    g = sw.models.lenet5(batch=8)
    model = LeNet5()
    params = init_params(g, seed=0)
    state = model.state_dict()
    assert set(state) == set(params)
    model.load_state_dict({k: torch.tensor(v) for k, v in params.items()})
    tparams = dict(model.named_parameters())
    xs, ys = _batches(g, seed=30)
    _compare_training(torch, g, lambda x: [model(x)], tparams, xs, ys)


@pytest.mark.parametrize("build", [small_resnet, small_inception], ids=["resnet", "inception_aux"])
def test_torch_small_models_training_match(build):
    torch = _torch()
    g = build()
    params = init_params(g, seed=1)
    tparams = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    xs, ys = _batches(g, seed=31)
    _compare_training(torch, g, lambda x: list(_torch_graph_forward(torch, g, tparams, x).values()),
                      tparams, xs, ys)
