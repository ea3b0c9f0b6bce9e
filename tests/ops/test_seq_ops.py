"""The sequence-model ops: NumPy reference against PyTorch and finite differences, and the
C kernels (through one-op graphs trained one SGD step) against the reference on one worker
and on plans splitting samples, features, heads, rows, reductions and the softmax's line.

Gradients of the C kernels are read back as the change of parameters after one step of
SGD with lr 1: every tensor a kernel differentiates is the output of a parameter op.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import reference as ref
from shardwise.reference import seq as rs
from shardwise.errors import GraphError, ShapeError
from shardwise.train.init import init_params

from strategies_random import random_plan

N, T, D, H = 2, 4, 6, 2


# ------------------------------------------------------------------ reference vs PyTorch
def _t(a):
    torch = pytest.importorskip("torch")
    return torch.tensor(a, dtype=torch.float64, requires_grad=True)


def test_layer_norm_reference_equals_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, w, b, dy = (rng.standard_normal(s) for s in ((N, T, D), (D,), (D,), (N, T, D)))
    xt, wt, bt = _t(x), _t(w), _t(b)
    y = torch.nn.functional.layer_norm(xt, (D,), wt, bt, eps=1e-5)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(rs.layer_norm_forward(x, w, b), y.detach().numpy(), rtol=1e-10, atol=1e-12)
    for got, want in zip(rs.layer_norm_backward(x, w, dy), (xt.grad, wt.grad, bt.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dim,causal,scale", [(-1, False, 1.0), (1, False, 1.0), (-1, True, 0.5)])
def test_softmax_dim_reference_equals_torch(dim, causal, scale):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((N, H, T, T)), rng.standard_normal((N, H, T, T))
    xt = _t(x)
    z = scale * xt
    if causal:
        z = z.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = torch.softmax(z, dim)
    y.backward(torch.tensor(dy))
    p = rs.softmax_dim_forward(x, dim, scale, causal)
    np.testing.assert_allclose(p, y.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(rs.softmax_dim_backward(p, dy, dim, scale), xt.grad.numpy(), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_batched_matmul_reference_equals_torch(ta, tb):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    m, k, n = 3, 5, 4
    a = rng.standard_normal((N, H) + ((k, m) if ta else (m, k)))
    b = rng.standard_normal((N, H) + ((n, k) if tb else (k, n)))
    dy = rng.standard_normal((N, H, m, n))
    at, bt = _t(a), _t(b)
    y = (at.transpose(-1, -2) if ta else at) @ (bt.transpose(-1, -2) if tb else bt)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(rs.matmul_forward(a, b, ta, tb), y.detach().numpy(), rtol=1e-12)
    da, db = rs.matmul_backward(a, b, dy, ta, tb)
    np.testing.assert_allclose(da, at.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(db, bt.grad.numpy(), rtol=1e-12)


def test_embedding_and_sequence_cross_entropy_equal_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    vocab = 7
    ids, labels = rng.integers(0, vocab, (N, T)), rng.integers(0, vocab, (N, T))
    w, dy = rng.standard_normal((vocab, D)), rng.standard_normal((N, T, D))
    wt = _t(w)
    y = torch.nn.functional.embedding(torch.tensor(ids), wt)
    y.backward(torch.tensor(dy))
    np.testing.assert_array_equal(rs.embedding_forward(ids, w), y.detach().numpy())
    np.testing.assert_allclose(rs.embedding_backward(ids, w.shape, dy), wt.grad.numpy(), rtol=1e-12)
    logits = rng.standard_normal((N, T, vocab))
    lt = _t(logits)
    loss = torch.nn.functional.cross_entropy(lt.reshape(-1, vocab), torch.tensor(labels).reshape(-1))
    loss.backward()
    p = ref.softmax_forward(logits)
    assert rs.sequence_cross_entropy(p, labels) == pytest.approx(loss.item(), rel=1e-12)
    np.testing.assert_allclose(rs.sequence_cross_entropy_backward(p, labels), lt.grad.numpy(), rtol=1e-10)


# ------------------------------------------------------------------ finite differences
@pytest.mark.parametrize("base", [10000.0, 3.0])
def test_rotary_reference_equals_torch(base):
    """RoPE in the rotate-half layout spelled in torch (float64): the tables from positions and
    frequencies, x * cos + cat(-x2, x1) * sin, and its autograd gradient."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    dh = 6
    x, dy = rng.standard_normal((N, H, T, dh)), rng.standard_normal((N, H, T, dh))
    xt = _t(x)
    freqs = 1.0 / base ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * torch.cat([freqs, freqs])[None, :]
    halves = torch.cat([-xt[..., dh // 2:], xt[..., :dh // 2]], dim=-1)
    y = xt * torch.cos(angles) + halves * torch.sin(angles)
    y.backward(torch.tensor(dy))
    np.testing.assert_allclose(rs.rotary_forward(x, base), y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rs.rotary_backward(dy, base), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def _fd(f, x, eps=1e-6):
    """Central differences of the scalar f at x."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        hi = f()
        x[i] = old - eps
        lo = f()
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


def test_reference_gradients_equal_finite_differences():
    rng = np.random.default_rng(4)
    x, w, b = rng.standard_normal((N, T, D)), rng.standard_normal(D), rng.standard_normal(D)
    c = rng.standard_normal((N, T, D))      # the scalar: sum(c * y)
    dx, dw, db = rs.layer_norm_backward(x, w, c)
    f = lambda: float((c * rs.layer_norm_forward(x, w, b)).sum())
    for got, arg in ((dx, x), (dw, w), (db, b)):
        np.testing.assert_allclose(got, _fd(f, arg), rtol=1e-6, atol=1e-8)
    s, cs = rng.standard_normal((N, H, T, T)), rng.standard_normal((N, H, T, T))
    p = rs.softmax_dim_forward(s, -1, 0.7, True)
    g = _fd(lambda: float((cs * rs.softmax_dim_forward(s, -1, 0.7, True)).sum()), s)
    np.testing.assert_allclose(rs.softmax_dim_backward(p, cs, -1, 0.7), g, rtol=1e-6, atol=1e-8)
    a, bb, cm = rng.standard_normal((N, 3, 5)), rng.standard_normal((N, 4, 5)), rng.standard_normal((N, 3, 4))
    fm = lambda: float((cm * rs.matmul_forward(a, bb, False, True)).sum())
    da, dbb = rs.matmul_backward(a, bb, cm, False, True)
    np.testing.assert_allclose(da, _fd(fm, a), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dbb, _fd(fm, bb), rtol=1e-6, atol=1e-8)
    r, cr = rng.standard_normal((N, H, T, 4)), rng.standard_normal((N, H, T, 4))
    np.testing.assert_allclose(rs.rotary_backward(cr, 7.0), _fd(lambda: float((cr * rs.rotary_forward(r, 7.0)).sum()), r),
                               rtol=1e-6, atol=1e-8)
    logits, labels = rng.standard_normal((N, T, 5)), rng.integers(0, 5, (N, T))
    fl = lambda: rs.sequence_cross_entropy(ref.softmax_forward(logits), labels)
    np.testing.assert_allclose(rs.sequence_cross_entropy_backward(ref.softmax_forward(logits), labels),
                               _fd(fl, logits), rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------ C kernels through graphs
def one_op_graph(kind: str) -> sw.Graph:
    """A graph exercising op `kind` whose differentiated tensors are parameters, ending in the
    sequence loss."""
    g = sw.Graph(kind)
    if kind == "embedding":
        ids = g.input("ids", (N, T), dtype="int64")
        g.softmax(g.linear(g.embedding(ids, 10, D, name="e"), 5, name="head"), name="loss")
        return g
    g.input("x", (N, 1))   # a graph needs an input op; this one feeds nothing that matters
    if kind == "layer_norm":
        y = g.layer_norm(g.parameter((N, T, D), name="p"), eps=1e-3, name="ln")
    elif kind == "softmax_dim":
        y = g.softmax_dim(g.parameter((N, H, T, T), name="p"), -1, scale=0.7, causal=True, name="s")
        y = g.softmax_dim(g.add(y, g.parameter((N, H, T, T), name="q")), 1, name="s1")
    elif kind == "matmul":
        a, b = g.parameter((N, H, T, 3), name="a"), g.parameter((N, H, T, 3), name="b")
        y = g.matmul(g.matmul(a, b, transpose_b=True, name="ab"), g.parameter((N, H, 3, T), name="c"),
                     transpose_a=True, transpose_b=True, name="abc")
    elif kind == "reshape_permute":
        y = g.permute(g.reshape(g.parameter((N, T, D), name="p"), (N, T, H, D // H)), (0, 2, 3, 1))
        y = g.reshape(g.transpose(y, 1, 2), (N, D // H, H * T))
    elif kind == "broadcast_add":
        y = g.add(g.parameter((N, T, D), name="p"), g.parameter((T, D), name="q"))
    elif kind == "rotary":   # queries (N, H, T, Dh), base 10: angles turn a lot over T positions
        y = g.rotary(g.parameter((N, H, T, D), name="p"), base=10.0, name="rot")
    elif kind == "select":   # two steps of one sequence: their gradients add up in p, zero elsewhere
        p = g.parameter((N, T, D), name="p")
        y = g.add(g.select(p, 1, 2, name="sel"), g.select(p, 1, T - 1, name="sel2"))
    else:
        raise ValueError(kind)
    g.softmax(y, name="loss")
    return g


KINDS = ["layer_norm", "softmax_dim", "matmul", "reshape_permute", "broadcast_add", "embedding", "select", "rotary"]


def batch_of(g: sw.Graph, seed: int):
    rng = np.random.default_rng(seed)
    inp = g.ops[0]
    x = rng.integers(0, 10, inp.shape) if inp.attrs.get("dtype") == "int64" else \
        rng.standard_normal(inp.shape).astype(np.float32)
    loss = g["loss"]
    return x, rng.integers(0, loss.shape[-1], loss.shape[:-1])


def kernel_grads(g: sw.Graph, plan: sw.Plan, x, labels):
    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=1.0))
    before = t.get_weights()
    loss = t.step(x, labels)
    after = t.get_weights()
    return loss, {k: before[k] - after[k] for k in before}


def check_against_reference(g: sw.Graph, plan: sw.Plan, seed: int = 0) -> None:
    x, labels = batch_of(g, seed)
    want_loss, want = ref.loss_and_grads(g, init_params(g, 0), x, labels)
    loss, got = kernel_grads(g, plan, x, labels)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert set(got) == set(want)
    for k in want:
        scale = max(float(np.abs(want[k]).max()), 1e-3)
        assert float(np.abs(got[k] - want[k]).max()) <= 1e-5 * scale + 2e-7, k


@pytest.mark.parametrize("kind", KINDS)
def test_kernels_equal_reference_on_one_worker(kind):
    g = one_op_graph(kind)
    check_against_reference(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(4))
def test_kernels_equal_reference_on_random_plans(kind, seed):
    """Any split of any dimension (samples, features, heads, rows, the softmax's own line,
    split reductions) on 2 to 4 workers."""
    g = one_op_graph(kind)
    rng = np.random.default_rng(10 * seed + KINDS.index(kind))
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(2, 5))), rng, reductions=True)
    check_against_reference(g, plan, seed)


@pytest.mark.parametrize("kind,op,spec", [
    ("layer_norm", "ln", {"l": 2}),                       # features: statistics recomputed per worker
    ("softmax_dim", "s", {"w": 2}),                       # the softmax's own line (keys)
    ("softmax_dim", "s1", {"c": 2}),                      # the line of a softmax over dim 1
    ("matmul", "ab", {"c": 2}),                           # heads
    ("matmul", "abc", {"k": 2}),                          # the reduction: partial sums
    ("embedding", "e", {"v": 2}),                         # the vocabulary
    ("embedding", "e", {"l": 2}),                         # the features
    ("broadcast_add", "add_0", {"c": 2, "l": 2}),         # the broadcast operand split too
    ("select", "sel", {"n": 2, "c": 2}),                  # samples and features of one step
    ("rotary", "rot", {"h": 2, "w": 2}),                  # positions (t is global) and Dh (whole rows read)
])
def test_kernels_equal_reference_when_their_own_dims_split(kind, op, spec):
    g = one_op_graph(kind)
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(4), {op: spec}, options=sw.CostOptions(reduction_splits=True))
    check_against_reference(g, plan)


# ------------------------------------------------------------------ descriptions and builders
def test_reshape_maps_split_heads_to_contiguous_blocks_and_merges_with_granules():
    g = sw.Graph("r")
    x = g.input("x", (N, T, 8))
    y = g.reshape(x, (N, T, 2, 4))
    z = g.reshape(y, (N, T, -1))
    assert y.shape == (N, T, 2, 4) and z.shape == (N, T, 8)
    assert g[z.name].desc.split_granules() == (1, 1, 4)       # merged heads split by whole heads
    with pytest.raises(ShapeError, match="two steps"):
        g.reshape(g.input("w", (6, 4)), (4, 6))
    with pytest.raises(ShapeError, match="cannot reshape"):
        g.reshape(x, (N, T, 7))


def test_builders_refuse_bad_arguments():
    g = sw.Graph("b")
    x = g.input("x", (N, T, D))
    with pytest.raises(ShapeError, match="causal"):
        g.softmax_dim(x, dim=1, causal=True)
    with pytest.raises(ShapeError, match="out of range"):
        g.softmax_dim(x, dim=3)
    with pytest.raises(GraphError, match="eps"):
        g.layer_norm(x, eps=0.0)
    with pytest.raises(ShapeError, match="permutation"):
        g.permute(x, (0, 0, 1))
    with pytest.raises(ShapeError, match="inner dimensions"):
        g.matmul(x, x)
    with pytest.raises(ShapeError, match="trailing part"):
        g.add(x, g.input("y", (T, D + 1)))
    with pytest.raises(GraphError, match="dtype"):
        g.input("z", (N, T), dtype="int32")
    with pytest.raises(ShapeError, match="batch dimension"):
        g.select(x, 0, 1)
    with pytest.raises(ShapeError, match="out of range"):
        g.select(x, 1, T)
    with pytest.raises(ShapeError, match="int"):
        g.select(x, 1, 1.5)


def test_flops_follow_the_descriptions():
    g = sw.Graph("f")
    q = g.input("q", (N, H, T, 3))
    s = g.matmul(q, q, transpose_b=True)
    assert g[s.name].desc.forward_flops() == 2 * N * H * T * T * 3
    e = g.embedding(g.input("ids", (N, T), dtype="int64"), 50, D)
    assert g[e.name].desc.forward_flops() == N * T * D          # a copy per output, not the one-hot product


def test_rotary_reads_whole_rows_of_its_positions():
    """A split of heads or positions reads only those rows (no transfer between them); a split
    of Dh reads whole rows (the rotation pairs j with j +- Dh/2).  Builder checks."""
    from shardwise.planning.regions import input_region

    g = sw.Graph("r")
    x = g.input("x", (N, H, T, 6))
    desc = g[g.rotary(x, name="rot").name].desc
    assert input_region(desc, 0, ((0, N), (0, H), (1, 3), (0, 6))) == ((0, N), (0, H), (1, 3), (0, 6))
    assert input_region(desc, 0, ((0, 1), (1, 2), (0, T), (0, 3))) == ((0, 1), (1, 2), (0, T), (0, 6))
    assert desc.num_parameters() == 0 and g["rot"].attrs == {"base": 10000.0}
    with pytest.raises(ShapeError, match="even Dh"):
        g.rotary(g.input("odd", (N, T, 5)))
    with pytest.raises(ShapeError, match=r"\(N, \.\., T, Dh\)"):
        g.rotary(g.input("flat", (N, 6)))
    with pytest.raises(GraphError, match="base must be a finite number > 1"):
        g.rotary(x, base=1.0)
