"""Grouped, depthwise and dilated convolution up the numerics ladder:

1. the NumPy reference (shardwise.reference.conv) against finite differences in float64 and
   against PyTorch in float64;
2. the C kernels (csrc/cpu/conv.c, conv_im2col.c, conv_depthwise.c) against PyTorch within
   1e-5 (of the largest magnitude), forward and both gradients, on every algorithm; and cut
   into random output boxes, each reading exactly the input region the description gives it;
3. the description: FLOPs divided by the groups, the channels and rows a box reads (brute
   force over its iteration points), which splits are valid;
4. plans splitting n, c (whole groups or not), h and w over 2-4 CPU workers train like one
   worker and like the reference; the search plans such graphs;
5. bad input raises clear errors.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.reference import conv as rc
from shardwise.planning.regions import input_region
from shardwise.errors import ShapeError
from shardwise.train.init import init_params
from shardwise.planning.problem import CostOptions, make_problem
from shardwise.train.trainer import SGD, Trainer
from strategies_random import random_plan
from training_checks import (RTOL, assert_close_weights, assert_plan_trains_like_reference,
                             assert_split_plan_trains_like_one_worker, one_worker_run)

# (N, Ci, Co, H, W, kernel, stride, padding, dilation, groups)
CASES = [
    (2, 4, 6, 9, 8, 3, 1, 1, 1, 2),               # grouped
    (2, 4, 8, 9, 8, 3, 2, 1, 2, 4),               # grouped, strided and dilated
    (2, 6, 6, 9, 8, 3, 1, 1, 1, 6),               # depthwise
    (2, 3, 6, 10, 7, 3, 1, 2, 2, 3),              # depthwise with a channel multiplier of 2, dilated
    (2, 8, 8, 6, 6, 1, 1, 0, 1, 2),               # grouped pointwise (1x1)
    (2, 4, 4, 9, 9, 3, 1, 2, 2, 1),               # dense, dilated
    (2, 6, 12, 11, 9, 5, 2, 3, 1, 6),             # depthwise 5x5, strided
    (1, 4, 4, 12, 10, (3, 1), (1, 2), (2, 0), (2, 1), 2),   # asymmetric kernel, stride and dilation
    (3, 6, 9, 7, 7, 3, 3, 0, 3, 3),               # a dilation as large as the input allows
    # narrow planes: the depthwise loops take eight channels at once (and the rest one by one)
    (2, 19, 19, 5, 4, 3, 1, 1, 1, 19),            # depthwise, two blocks of eight and three left over
    (2, 16, 16, 7, 6, 5, 2, 2, 1, 16),            # depthwise 5x5, strided (an EfficientNet stage)
    (2, 10, 20, 4, 4, 3, 1, 2, 2, 10),            # depthwise with a channel multiplier of 2, dilated
]


def case_id(c) -> str:
    n, ci, co, h, w, k, s, p, d, g = c
    return f"ci{ci}-co{co}-k{k}-s{s}-p{p}-d{d}-g{g}".replace(" ", "")


def pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def tensors(c, seed: int, dtype=np.float64):
    """x, w, b and an output gradient dy of case c."""
    n, ci, co, h, w, k, s, p, d, g = c
    (kh, kw), (sh, sw_), (ph, pw), (dh, dw) = pair(k), pair(s), pair(p), pair(d)
    ho, wo = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw_ + 1
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, ci, h, w)).astype(dtype)
    wt = rng.standard_normal((co, ci // g, kh, kw)).astype(dtype)
    b = rng.standard_normal(co).astype(dtype)
    dy = rng.standard_normal((n, co, ho, wo)).astype(dtype)
    return x, wt, b, dy


def assert_close(got, want, what: str, rtol: float) -> None:
    """|got - want| <= rtol * max|want| everywhere."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(float(np.abs(want).max()), 1e-30)
    err = float(np.abs(np.asarray(got, np.float64) - want).max())
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol:g} * {scale:.3g}"


def torch_conv(c, x, w, b, dy):
    """PyTorch's y, dx, dw, db in x's dtype."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    _, _, _, _, _, _, s, p, d, g = c
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    y = torch.nn.functional.conv2d(xt, wt, bt, stride=s, padding=p, dilation=d, groups=g)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def group_co(c) -> int:
    """The kernels' output channels per group (0: dense)."""
    co, g = c[2], c[9]
    return co // g if g > 1 else 0


# ------------------------------------------------------------------------------------ 1. the reference
def test_reference_matches_finite_differences():
    """Central differences of sum(conv(x, w) * dy) in float64, grouped, strided and dilated."""
    c = (1, 4, 4, 7, 6, 3, 2, 2, 2, 2)
    x, w, b, dy = tensors(c, 0)
    _, _, _, _, _, _, s, p, d, g = c
    dx, dw, db = rc.conv2d_backward(x, w, dy, s, p, bias=True, dilation=d, groups=g)

    def f(xv, wv, bv):
        return float(np.sum(rc.conv2d_forward(xv, wv, bv, s, p, d, g) * dy))

    eps = 1e-6
    for arr, grad in ((x, dx), (w, dw), (b, db)):
        numeric = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            keep = arr[i]
            arr[i] = keep + eps
            hi = f(x, w, b)
            arr[i] = keep - eps
            lo = f(x, w, b)
            arr[i] = keep
            numeric[i] = (hi - lo) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_reference_matches_pytorch_in_float64(c):
    x, w, b, dy = tensors(c, 1)
    want = torch_conv(c, x, w, b, dy)
    _, _, _, _, _, _, s, p, d, g = c
    got = (rc.conv2d_forward(x, w, b, s, p, d, g), *rc.conv2d_backward(x, w, dy, s, p, True, d, g))
    for name, a, e in zip(("y", "dx", "dw", "db"), got, want):
        assert_close(a, e, name, 1e-12)


# ------------------------------------------------------------------------------------ 2. C kernels
ALGORITHMS = ["auto", "im2col"]
try:
    _before = _core.conv_algorithm()
    _core.conv_algorithm("direct")
    ALGORITHMS.append("direct")
    _core.conv_algorithm(_before)
except ValueError:   # no AVX2 + FMA: the direct loops cannot run here
    pass


@pytest.fixture(params=ALGORITHMS)
def algorithm(request):
    """Every test with the convolutions on one algorithm (auto: depthwise loops where they apply;
    im2col: GEMMs per group always; direct: the dense direct loops forced, which grouped and
    dilated calls must still refuse), restored after."""
    before = _core.conv_algorithm()
    _core.conv_algorithm(request.param)
    yield request.param
    _core.conv_algorithm(before)


def c_conv(c, x, w, b, dy, relu=False):
    """The C kernels' y, dx, dw, db over whole tensors (float32)."""
    _, _, _, _, _, k, s, p, d, _ = c
    f = lambda a: np.ascontiguousarray(a, np.float32)  # noqa: E731
    gco = group_co(c)
    y = _core.conv2d_forward(f(x), None, f(w), None, f(b), None, None, dy.shape, s, p, relu, d, gco)
    dx = _core.conv2d_backward_data(f(w), None, f(dy), None, None, x.shape, k, s, p, d, gco)
    dw, db = _core.conv2d_backward_weight(f(x), None, f(dy), None, w.shape, s, p, True, d, gco)
    return y, dx, dw, db


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_kernels_match_pytorch(c, algorithm):
    """Within 1e-5 of PyTorch's float32 results, forward (with bias, and with the fused ReLU) and both
    gradients."""
    x, w, b, dy = tensors(c, 2, np.float32)
    want = torch_conv(c, x, w, b, dy)
    got = c_conv(c, x, w, b, dy)
    for name, a, e in zip(("y", "dx", "dw", "db"), got, want):
        assert_close(a, e, name, 1e-5)
    relu = c_conv(c, x, w, b, dy, relu=True)[0]
    assert_close(relu, np.maximum(want[0], 0), "y + relu", 1e-5)


def random_cuts(rng, extent: int) -> list[tuple[int, int]]:
    parts = int(rng.integers(1, min(3, extent) + 1))
    cuts = sorted(int(v) for v in rng.choice(np.arange(1, extent), size=parts - 1, replace=False)) if parts > 1 else []
    edges = [0, *cuts, extent]
    return list(zip(edges[:-1], edges[1:]))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_kernels_on_boxes_with_the_described_regions(c, seed, algorithm):
    """Random output boxes (channel cuts through groups included), each computed from exactly the
    input region the op's description gives it (as the planner hands it to a worker) and its
    weight rows: assembled outputs, summed partial input gradients and weight gradients equal
    the reference's."""
    n, ci, co, h, w, k, s, p, d, g = c
    x, wt, b, dy = tensors(c, 10 + seed)
    desc = _graph_of(c)["c"].desc
    y_ref = rc.conv2d_forward(x, wt, b, s, p, d, g)
    dx_ref, dw_ref, db_ref = rc.conv2d_backward(x, wt, dy, s, p, True, d, g)
    assert desc.out_shape == y_ref.shape
    f = lambda a: np.ascontiguousarray(a, np.float32)  # noqa: E731
    rng = np.random.default_rng(seed)
    grids = [random_cuts(rng, e) for e in y_ref.shape]
    y = np.zeros(y_ref.shape)
    dx = np.zeros(x.shape)
    dw = np.zeros(wt.shape)
    db = np.zeros(b.shape)
    gco = group_co(c)
    for idx in itertools.product(*[range(len(gd)) for gd in grids]):
        box = tuple(grids[dd][i] for dd, i in enumerate(idx))
        region = input_region(desc, 0, box)
        (n0, n1), (c0, c1), (r0, r1), (q0, q1) = box
        sl = tuple(slice(lo, hi) for lo, hi in region)
        x_lo = tuple(lo for lo, _ in region)
        y_lo, y_shape = (n0, c0, r0, q0), (n1 - n0, c1 - c0, r1 - r0, q1 - q0)
        y[n0:n1, c0:c1, r0:r1, q0:q1] = _core.conv2d_forward(
            f(x[sl]), x_lo, f(wt[c0:c1]), (c0, 0, 0, 0), f(b[c0:c1]), (c0,), y_lo, y_shape, s, p, False, d, gco)
        dy_box = f(dy[n0:n1, c0:c1, r0:r1, q0:q1])
        dx[sl] += _core.conv2d_backward_data(f(wt[c0:c1]), (c0, 0, 0, 0), dy_box, y_lo, x_lo, x[sl].shape, k, s, p,
                                             d, gco)
        dwp, dbp = _core.conv2d_backward_weight(f(x[sl]), x_lo, dy_box, y_lo, wt.shape, s, p, True, d, gco)
        dw[c0:c1] += dwp
        db[c0:c1] += dbp
    for name, a, e in (("y", y, y_ref), ("dx", dx, dx_ref), ("dw", dw, dw_ref), ("db", db, db_ref)):
        assert_close(a, e, name, 1e-5)


# ------------------------------------------------------------------------------------ 3. the description
def _graph_of(c) -> sw.Graph:
    n, ci, co, h, w, k, s, p, d, g = c
    gr = sw.Graph()
    gr.conv2d(gr.input("x", (n, ci, h, w)), co, kernel=k, stride=s, padding=p, dilation=d, groups=g, name="c")
    return gr


def conv_op(c):
    return _graph_of(c)["c"]


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_flops_and_parameters_are_the_dense_ones_divided_by_the_groups(c):
    n, ci, co, h, w, k, s, p, d, g = c
    (kh, kw) = pair(k)
    op = conv_op(c)
    _, _, ho, wo = op.shape
    assert op.desc.forward_flops() == 2 * n * co * ho * wo * (ci // g) * kh * kw + n * co * ho * wo
    assert op.desc.num_parameters() == co * (ci // g) * kh * kw + co


def brute_region(c, box) -> list[tuple[int, int]]:
    """The hull of the input indices the iteration points of an output box read, clipped to the
    input (padding reads nothing), enumerating PyTorch's definition point by point."""
    n, ci, co, h, w, k, s, p, d, g = c
    (kh, kw), (sh, sw_), (ph, pw), (dh, dw) = pair(k), pair(s), pair(p), pair(d)
    cig, cog = ci // g, co // g
    (n0, n1), (c0, c1), (r0, r1), (q0, q1) = box
    chans = {cig * (o // cog) + i for o in range(c0, c1) for i in range(cig)}
    rows = {r * sh + y * dh - ph for r in range(r0, r1) for y in range(kh)}
    cols = {q * sw_ + x * dw - pw for q in range(q0, q1) for x in range(kw)}
    return [(n0, n1), (min(chans), max(chans) + 1), (max(min(rows), 0), min(max(rows), h - 1) + 1),
            (max(min(cols), 0), min(max(cols), w - 1) + 1)]


@pytest.mark.parametrize("c", CASES, ids=case_id)
def test_regions_of_output_boxes_equal_brute_force(c):
    """Channel boxes that cut through groups read their groups' whole channels, dilated rows read
    a halo of d * (k - 1): the core's regions (the planner's) equal the enumeration."""
    gr = _graph_of(c)
    op = gr["c"]
    rng = np.random.default_rng(0)
    problem = make_problem(gr, sw.DeviceGraph.cpu(1), CostOptions(threads=1))
    for _ in range(20):
        box = []
        for e in op.shape:
            lo = int(rng.integers(0, e))
            box.append((lo, int(rng.integers(lo + 1, e + 1))))
        want = brute_region(c, box)
        assert list(input_region(op.desc, 0, tuple(box))) == want
        lo = [b[0] for b in box] + [0, 0, 0]
        hi = [b[1] for b in box] + list(op.desc.extents[4:])
        region, _exact = problem.iteration_region(1, 0, lo, hi)
        assert [tuple(r) for r in region] == want


def test_valid_splits():
    """Every output dimension splits; the reduction over a group's input channels splits for a dense
    convolution only (across groups its halves read strided channels)."""
    grouped = sw.strategies_of(_graph_of((4, 8, 12, 8, 8, 3, 1, 2, 2, 4))["c"])
    by_dim = {s.dimension: s for s in grouped}
    assert all(by_dim[v].valid for v in ("n", "c", "h", "w", "dy", "dx"))
    assert not by_dim["ci"].valid and "not a box" in by_dim["ci"].reason
    # halves of c: output channels [0, 6) are groups 0-1, reading input channels [0, 4)
    assert by_dim["c"].regions[0]["input0"] == ((0, 4), (0, 4), (0, 8), (0, 8))
    assert by_dim["c"].regions[1]["input0"] == ((0, 4), (4, 8), (0, 8), (0, 8))
    dense = {s.dimension: s for s in sw.strategies_of(_graph_of((4, 8, 12, 8, 8, 3, 1, 2, 2, 1))["c"])}
    assert dense["ci"].valid
    assert _graph_of((4, 8, 12, 8, 8, 3, 1, 2, 2, 1))["c"].desc.additive == (4,)
    assert _graph_of((4, 8, 12, 8, 8, 3, 1, 2, 2, 4))["c"].desc.additive == ()


def test_initialization_bound_uses_the_channels_of_a_group():
    """PyTorch's default bound 1/sqrt(fan_in) with fan_in = C_in / groups * kh * kw."""
    g = _graph_of((2, 16, 16, 8, 8, 3, 1, 1, 1, 16))
    w = init_params(g, 0)["c.weight"]
    assert w.shape == (16, 1, 3, 3)
    bound = 1 / math.sqrt(9)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound


# ------------------------------------------------------------------------------------ 4. plans
def conv_graph(batch: int = 8) -> sw.Graph:
    """A grouped, a depthwise (dilated), a grouped pointwise and a dense dilated strided conv."""
    g = sw.Graph("convs")
    x = g.input("x", (batch, 4, 8, 8))
    x = g.conv2d(x, 8, kernel=3, padding=1, groups=2, activation="relu", name="g1")
    x = g.conv2d(x, 8, kernel=3, padding=2, dilation=2, groups=8, name="dw")
    x = g.conv2d(x, 12, kernel=1, groups=4, activation="relu", name="pw")
    x = g.conv2d(x, 6, kernel=3, stride=2, padding=2, dilation=2, name="dil")
    x = g.flatten(x, name="fl")
    g.softmax(g.linear(x, 5, name="fc"), name="prob")
    return g


def batch_of(g: sw.Graph, seed: int):
    rng = np.random.default_rng(seed)
    shape = g.ops[0].shape
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, 5, shape[0])


@pytest.mark.parametrize("ndev, spec", [
    (2, {"g1": {"c": 2}, "dw": {"c": 2}, "pw": {"n": 2}, "dil": {"h": 2}}),          # whole groups
    (4, {"g1": {"c": 4}, "dw": {"h": 2, "w": 2}, "pw": {"c": 4}, "dil": {"c": 2}}),  # g1, pw: half groups
    (3, {"g1": {"w": 2}, "dw": {"c": 2}, "pw": {"c": 3}, "dil": {"c": 3}}),          # pw: 4 of 3-channel groups
    (4, {"g1": {"n": 2, "c": 2}, "dw": {"c": 4}, "pw": {"h": 2, "c": 2}, "dil": {"ci": 2, "n": 2}}),
])
def test_split_convolutions_train_like_one_worker(ndev, spec):
    """Each convolution split its own way (channels by whole groups and through groups, rows and
    columns with dilated halos, a dense conv's reduction); devices in reverse order."""
    g = conv_graph()
    x, y = batch_of(g, 1)
    assert_split_plan_trains_like_one_worker(g, x, y, SGD(lr=0.1, momentum=0.9), ndev, spec)


@pytest.mark.parametrize("seed", range(4))
def test_random_plans_match_reference(seed):
    g = conv_graph()
    x, y = batch_of(g, 10 + seed)
    rng = np.random.default_rng(seed)
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(2, 5))), rng, reductions=True)
    assert_plan_trains_like_reference(g, plan, x, y, SGD(lr=0.1, momentum=0.9, weight_decay=1e-4))


def test_searched_plan_trains_like_one_worker():
    g = conv_graph()
    x, y = batch_of(g, 2)
    opt = SGD(lr=0.05)
    plan = sw.search(g, sw.DeviceGraph.cpu(4))
    t = Trainer(g, plan, optimizer=opt)
    want_losses, want_weights = one_worker_run(g, x, y, opt)
    np.testing.assert_allclose([t.step(x, y) for _ in range(3)], want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_weights)


def test_depthwise_channel_split_moves_nothing_and_the_search_beats_it():
    """One sample, 256 channels: a depthwise convolution split by channels after an input split
    the same way reads exactly its own channels (no bytes on its in-edge; a dense one would
    gather every channel), and the search's plan costs no more than that hand-written one."""
    def graph(groups: int) -> sw.Graph:
        g = sw.Graph("wide")
        x = g.input("x", (1, 256, 32, 32))
        x = g.conv2d(x, 256, kernel=3, padding=1, groups=groups, name="dw")
        x = g.conv2d(x, 4, kernel=1, name="pw")
        g.softmax(g.linear(g.flatten(x, name="fl"), 3, name="fc"), name="prob")
        return g

    devices = sw.DeviceGraph.cpu(4)
    spec = {"x": {"c": 4}, "dw": {"c": 4}}
    costs = {}
    for groups in (256, 1):
        g = graph(groups)
        hand = sw.Plan.from_dict(g, devices, spec)
        costs[groups] = {row.op: row for row in hand.layer_costs()}["dw"].bytes_in
        if groups == 256:
            assert sw.search(g, devices).cost <= hand.cost * (1 + 1e-9)
    assert costs[256] == 0
    assert costs[1] == 3 * 256 * 32 * 32 * 4   # each worker gathers the other three quarters


# ------------------------------------------------------------------------------------ 5. bad input
@pytest.mark.parametrize("kwargs, match", [
    ({"groups": 3}, "must divide"),                      # 4 input channels
    ({"groups": 0}, "positive"),
    ({"groups": True}, "positive"),
    ({"groups": 2.0}, "positive"),
    ({"dilation": 0}, "dilation"),
    ({"dilation": (1, -2)}, "dilation"),
    ({"dilation": 9}, "larger than the padded input"),   # a 3x3 kernel spanning 19 pixels of 8
    ({"dilation": "2"}, "dilation"),
])
def test_builder_refuses_bad_groups_and_dilation(kwargs, match):
    g = sw.Graph()
    x = g.input("x", (2, 4, 8, 8))
    with pytest.raises(ShapeError, match=match):
        g.conv2d(x, 8, kernel=3, name="c", **kwargs)
    assert "c" not in g


def test_kernels_refuse_inputs_missing_a_groups_channels():
    x, w, b, dy = tensors((1, 4, 4, 6, 6, 3, 1, 1, 1, 2), 0, np.float32)
    # output channels [2, 4) are group 1: they need input channels [2, 4), x holds [0, 3)
    with pytest.raises(ValueError, match="input channels"):
        _core.conv2d_forward(x[:, :3], None, w[2:], (2, 0, 0, 0), None, None, (0, 2, 0, 0), (1, 2, 6, 6), 1, 1,
                             False, 1, 2)
    with pytest.raises(ValueError, match="input channels"):
        _core.conv2d_backward_data(w[2:], (2, 0, 0, 0), dy[:, 2:], (0, 2, 0, 0), None, (1, 3, 6, 6), 3, 1, 1, 1, 2)
    with pytest.raises(ValueError, match="input channels"):
        _core.conv2d_backward_weight(x[:, :3], None, dy[:, 2:], (0, 2, 0, 0), w.shape, 1, 1, True, 1, 2)
    with pytest.raises(ValueError, match=">= 0"):
        _core.conv2d_forward(x, None, w, None, None, None, None, (1, 4, 6, 6), 1, 1, False, 1, -2)
    with pytest.raises(ValueError, match="dilation"):
        _core.conv2d_forward(x, None, w, None, None, None, None, (1, 4, 6, 6), 1, 1, False, 0, 2)
