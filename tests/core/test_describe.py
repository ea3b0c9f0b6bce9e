"""Operators described with tensor-as-a-lambda (seed 004 section 3), and their analysis."""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.ops import builtin as ops
from shardwise.ops.describe import DescriptionError
from shardwise.ops.box import worker_boxes
from shardwise.planning.regions import input_region


@sw.op
def conv1d(data, filters):
    return lambda b, co, x: sw.Sum(lambda ci, dx: data[b, ci, x + dx] * filters[ci, co, dx])


@sw.op
def batch_cholesky(batch_mat):
    cholesky = sw.Opaque("cholesky")
    return lambda b, i, j: cholesky(batch_mat[b, :, :])[i, j]


@sw.op
def shift_two(A):
    return lambda i: A[i + 2]


def by_dim(strategies):
    return {s.dimension: s for s in strategies}


def test_conv1d_paper_example():
    shapes = dict(data=(32, 512, 30), filters=(512, 256, 3))
    desc = conv1d.describe(shapes)
    assert desc.out_shape == (32, 256, 28)
    assert desc.forward_flops() == 32 * 256 * 28 * 512 * 3 * 2
    s = by_dim(sw.strategies_of(conv1d, **shapes))
    assert s["b"].valid and s["b"].regions[0]["data"] == ((0, 16), (0, 512), (0, 30))
    assert s["b"].regions[0]["filters"] == ((0, 512), (0, 256), (0, 3))        # Figure 2(a): all filters
    assert s["ci"].kind == "reduction" and s["ci"].valid                       # Figure 2(b): partition-n-reduce
    assert s["ci"].regions[1]["data"] == ((0, 32), (256, 512), (0, 30))
    assert s["ci"].regions[1]["filters"] == ((256, 512), (0, 256), (0, 3))
    assert s["x"].valid and s["x"].regions[1]["data"] == ((0, 32), (0, 512), (14, 30))   # halo of 2


def test_tofu_analysis_refuses_x_plus_dx():
    """Seed 004 section 3.2: symbolic intervals cannot add x and dx, so x and dx are refused."""
    s = by_dim(sw.strategies_of(conv1d, analysis="tofu", data=(32, 512, 30), filters=(512, 256, 3)))
    assert s["b"].valid and s["co"].valid and s["ci"].valid
    assert not s["x"].valid and "x + dx" in s["x"].reason
    assert not s["dx"].valid


def test_batch_cholesky_splits_only_the_batch():
    s = by_dim(sw.strategies_of(batch_cholesky, batch_mat=(8, 4, 4)))
    assert s["b"].valid and s["b"].regions[1]["batch_mat"] == ((4, 8), (0, 4), (0, 4))
    assert not s["i"].valid and not s["j"].valid
    assert not any(v.valid for k, v in s.items() if ":" in k)
    assert batch_cholesky.describe({"batch_mat": (8, 4, 4)}).split_granules() == (1, 4, 4)


def test_shift():
    s = sw.strategies_of(shift_two, A=(10,))
    assert s[0].regions == ({"A": ((2, 6),)}, {"A": ((6, 10),)})


@sw.op
def conv2d_described(data, weight):
    return lambda n, co, y, x: sw.Sum(
        lambda ci, dy, dx: data[n, ci, 2 * y + dy - 1, 2 * x + dx - 1] * weight[co, ci, dy, dx])


@sw.op
def maxpool_described(data):
    return lambda n, c, y, x: sw.Max(lambda dy, dx: data[n, c, 2 * y + dy, 2 * x + dx], dy=2, dx=2)


@sw.op
def linear_described(x, w):
    return lambda n, o: sw.Sum(lambda i: x[n, i] * w[o, i])


@sw.op
def add_described(a, b):
    return lambda n, c, y, x: a[n, c, y, x] + b[n, c, y, x]


@sw.op
def matmul_described(a, b):
    return lambda m, n: sw.Sum(lambda k: a[m, k] * b[k, n])


@pytest.mark.parametrize("described,builtin,shapes", [
    (conv2d_described, ops.conv2d((4, 3, 9, 9), 6, 3, 2, 1, False), dict(data=(4, 3, 9, 9), weight=(6, 3, 3, 3))),
    (add_described, ops.elementwise([(4, 3, 6, 6), (4, 3, 6, 6)], "add"), dict(a=(4, 3, 6, 6), b=(4, 3, 6, 6))),
    (matmul_described, ops.matmul((4, 6), (6, 8)), dict(a=(4, 6), b=(6, 8))),
    (maxpool_described, ops.pool2d((4, 3, 8, 8), 2, 2, 0), dict(data=(4, 3, 8, 8))),
    (linear_described, ops.linear((4, 12), 5, False), dict(x=(4, 12), w=(5, 12))),
])
def test_described_builtins_equal_the_core_descriptions(described, builtin, shapes):
    """One mechanism: a built-in op written in the language gives the same iteration space,
    FLOPs and input regions for every worker box of every 2- and 4-way split."""
    desc = described.describe(shapes)
    assert desc.out_shape == builtin.out_shape
    assert desc.forward_flops() == builtin.forward_flops()
    rng = np.random.default_rng(0)
    for _ in range(30):
        degrees = tuple(int(rng.choice([k for k in (1, 2, 4) if s % k == 0])) for s in desc.out_shape)
        for box in worker_boxes(desc.out_shape, degrees):
            for slot in range(len(desc.inputs)):
                assert input_region(desc, slot, box) == input_region(builtin, slot, box)


def test_custom_ops_are_planned_like_builtins():
    g1 = sw.Graph("a")
    x = g1.input("x", (8, 3, 9, 9))
    g1.custom(conv2d_described, [x], weights={"weight": (6, 3, 3, 3)}, name="conv")
    g2 = sw.Graph("a")
    x = g2.input("x", (8, 3, 9, 9))
    g2.conv2d(x, 6, kernel=3, stride=2, padding=1, bias=False, name="conv")
    assert g1.num_parameters() == g2.num_parameters() == 6 * 3 * 9
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4)
    assert sw.search(g1, d).cost == pytest.approx(sw.search(g2, d).cost, rel=1e-12)
    spec = {"x": {"n": 2}, "conv": {"n": 2, "c": 2}}
    assert sw.Plan.from_dict(g1, d, spec).cost == pytest.approx(sw.Plan.from_dict(g2, d, spec).cost, rel=1e-12)


def test_bad_descriptions_name_the_expression():
    @sw.op
    def bilinear(a):
        return lambda i, j: a[i * j]
    with pytest.raises(DescriptionError, match=r"non-affine index expression.*i.*j"):
        bilinear.describe({"a": (16,)})

    @sw.op
    def undefined(a):
        k = sw.ops.describe.Var("k")
        return lambda i: a[i + k]
    with pytest.raises(DescriptionError, match="'k'"):
        undefined.describe({"a": (16,)})

    @sw.op
    def wrong_rank(a):
        return lambda i: a[i, i]
    with pytest.raises(DescriptionError, match="2 indices for a rank-1"):
        wrong_rank.describe({"a": (16,)})

    @sw.op
    def reduce_nothing(a):
        return lambda i: sw.Sum(lambda: a[i])
    with pytest.raises(DescriptionError, match="reduces over nothing"):
        reduce_nothing.describe({"a": (16,)})

    @sw.op
    def unread(a, b):
        return lambda i: a[i] * 2
    with pytest.raises(DescriptionError, match="'b' is never read"):
        unread.describe({"a": (16,), "b": (3,)})

    @sw.op
    def no_range(a):
        return lambda i, j: a[2 * i + j]
    with pytest.raises(DescriptionError, match="cannot infer the range"):
        no_range.describe({"a": (16,)})

    with pytest.raises(DescriptionError, match="no shape"):
        conv1d.describe({"data": (1, 2, 3)})
    g = sw.Graph("g")
    x = g.input("x", (2, 4, 8))
    with pytest.raises(sw.GraphError, match="takes 1 tensor"):
        g.custom(conv1d, [x, x], weights={"filters": (4, 2, 3)})
    with pytest.raises(sw.GraphError, match="@sw.op"):
        g.custom(lambda a: a, [x])


def _brute_force_region(desc, slot, lo, hi):
    """Every index each input dimension takes over the iteration box [lo, hi), by enumeration."""
    import itertools

    inp = desc.inputs[slot]
    seen = [set() for _ in inp.shape]
    for point in itertools.product(*(range(a, b) for a, b in zip(lo, hi))):
        if inp.window is not None and any(not (wl <= point[v] < wh) for v, (wl, wh) in enumerate(inp.window)):
            continue
        for d, e in enumerate(inp.exprs):
            ix = (sum(c * (p // e.vdiv(v)) for v, (c, p) in enumerate(zip(e.coefs, point))) + e.offset) // e.div
            if e.mod:
                ix %= e.mod
            if 0 <= ix < inp.shape[d]:
                seen[d].add(ix)
    return seen


@pytest.mark.parametrize("builtin", [
    ops.conv2d((2, 4, 7, 7), 3, 3, 2, 1, False), ops.conv2d((2, 4, 6, 6), 2, 3, 1, 1, True),
    ops.pool2d((2, 3, 8, 8), 2, 2, 0), ops.linear((4, 12), 5, True), ops.flatten((2, 3, 2, 2)),
    ops.group_norm((2, 6, 2, 3), 2), ops.group_norm((2, 4, 3, 2), 1, affine=False), ops.group_norm((1, 3, 2, 2), 3),
])
def test_core_iteration_regions_match_brute_force(builtin):
    """sw_iteration_region (C) on random boxes of the whole iteration space, reductions split
    too: the box holds every index read (clipping a strided image to the input may leave an
    unread index at its end), and where 'exact' is claimed every index of the box is read.
    With the reductions whole it equals the lowering's input_region."""
    g = sw.Graph("one")
    xs = [g.input(f"x{k}", inp.shape) for k, inp in enumerate(builtin.inputs) if inp.role == 0]
    op = g._add("probe", xs, builtin, "probe")
    from shardwise.planning.problem import CostOptions, make_problem
    problem = make_problem(g, sw.DeviceGraph.cpu(1), CostOptions(threads=1))
    rng = np.random.default_rng(1)
    boxes = []
    for _ in range(25):
        lo, hi = [], []
        for extent in builtin.extents:
            a = int(rng.integers(0, extent))
            lo.append(a)
            hi.append(int(rng.integers(a + 1, extent + 1)))
        for slot in range(len(builtin.inputs)):
            box, exact = problem.iteration_region(op.op, slot, lo, hi)
            seen = _brute_force_region(builtin, slot, lo, hi)
            for d, indices in enumerate(seen):
                if not indices:
                    continue
                assert box[d][0] <= min(indices) and max(indices) < box[d][1]
                if exact[d]:   # every index of the box is read: the box is the hull, no holes
                    assert box[d] == (min(indices), max(indices) + 1)
                    assert len(indices) == box[d][1] - box[d][0]
        if all(h - l == e for l, h, e in zip(lo[builtin.out_rank:], hi[builtin.out_rank:],
                                              builtin.extents[builtin.out_rank:])):
            out_box = tuple(zip(lo[: builtin.out_rank], hi[: builtin.out_rank]))
            for slot in range(len(builtin.inputs)):
                expected = input_region(builtin, slot, out_box)
                if expected is not None:
                    assert problem.iteration_region(op.op, slot, lo, hi)[0] == expected
        boxes.append((lo, hi))
    # many boxes in one call (Tofu's model asks so): the same regions as one at a time
    los, his = (np.array([b[k] for b in boxes], dtype=np.int64) for k in (0, 1))
    for slot in range(len(builtin.inputs)):
        rlo, rhi, used = problem.iteration_regions(op.op, slot, los, his)
        for (lo, hi), a, b, u in zip(boxes, rlo, rhi, used):
            box, _ = problem.iteration_region(op.op, slot, lo, hi)
            assert bool(u) == all(h > l for l, h in box)
            if u:
                assert tuple(zip(a.tolist(), b.tolist())) == box


def test_iteration_region_rejects_bad_boxes():
    g = sw.Graph("one")
    x = g.input("x", (4, 12))
    y = g.linear(x, 5, name="fc")
    from shardwise.planning.problem import CostOptions, make_problem
    problem = make_problem(g, sw.DeviceGraph.cpu(1), CostOptions(threads=1))
    with pytest.raises(ValueError, match="needs 3 values"):
        problem.iteration_region(y.op, 0, [0, 0], [4, 5])
    with pytest.raises(ValueError, match="non-empty range"):
        problem.iteration_region(y.op, 0, [0, 0, 6], [4, 5, 6])
    with pytest.raises(IndexError):
        problem.iteration_region(y.op, 7, [0, 0, 0], [4, 5, 12])
    good = np.array([[0, 0, 0]]), np.array([[4, 5, 12]])
    assert [a.tolist() for a in problem.iteration_regions(y.op, 0, *good)] == [[[0, 0]], [[4, 12]], [True]]
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        problem.iteration_regions(y.op, 0, np.zeros((1, 2), np.int64), np.ones((1, 2), np.int64))
    with pytest.raises(ValueError, match="box 1, variable 2"):
        problem.iteration_regions(y.op, 0, np.array([[0, 0, 0], [0, 0, 6]]), np.array([[4, 5, 12], [4, 5, 6]]))
    with pytest.raises(ValueError, match="2-D array"):
        problem.iteration_regions(y.op, 0, [0, 0, 0], [4, 5, 12])
    with pytest.raises(IndexError):
        problem.iteration_regions(y.op, 7, *good)


def test_top_level_sums_are_additive():
    """Partition-n-reduce applies where partial results add up: a top-level Sum (plus terms
    that do not depend on it), not a Max, not a Sum inside a product."""
    shapes = dict(data=(32, 512, 30), filters=(512, 256, 3))
    desc = conv1d.describe(shapes)
    names = dict(zip(desc.reductions, range(desc.out_rank, desc.nvars)))
    assert set(desc.additive) == {names["ci"], names["dx"]}
    assert maxpool_described.describe(dict(data=(4, 3, 8, 8))).additive == ()

    @sw.op
    def scaled(x, w, s):
        return lambda n, o: sw.Sum(lambda i: x[n, i] * w[o, i]) * s[n]

    assert scaled.describe(dict(x=(4, 12), w=(5, 12), s=(4,))).additive == ()
    linear = linear_described.describe(dict(x=(4, 12), w=(5, 12)))
    assert linear.additive == (2,) == ops.linear((4, 12), 5, False).additive
    conv = conv2d_described.describe(dict(data=(4, 3, 9, 9), weight=(6, 3, 3, 3)))
    assert 4 in conv.additive   # ci, as the built-in conv2d


def test_custom_ops_with_reduction_splits_plan_like_builtins():
    g1 = sw.Graph("a")
    x = g1.input("x", (8, 12))
    g1.custom(linear_described, [g1.relu(x, name="r")], weights={"w": (6, 12)}, name="fc")
    g2 = sw.Graph("a")
    x = g2.input("x", (8, 12))
    g2.linear(g2.relu(x, name="r"), 6, bias=False, name="fc")
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4)
    spec = {"r": {"c": 2}, "fc": {"i": 2, "n": 2}}
    assert sw.Plan.from_dict(g1, d, spec).cost == pytest.approx(sw.Plan.from_dict(g2, d, spec).cost, rel=1e-12)


def test_strategies_of_every_builtin_op_use_the_cores_regions():
    """strategies_of on graph ops of every built-in kind: each valid split of an output
    dimension gives every input the region the lowering and the cost model use for that
    half (input_region, csrc/core/region.c), and ops that split their output somewhere do."""
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1]))
    from shared_graphs import mixed_graph

    graphs = [mixed_graph(), sw.models.rnn(layers=1, hidden=4, steps=2, batch=4, input_size=3, num_classes=3)]
    kinds, checked = set(), 0
    for g in graphs:
        for op in g.ops:
            if op.kind == "input":
                continue
            kinds.add(op.kind)
            strategies = sw.strategies_of(op)
            assert len(strategies) == op.desc.nvars
            outputs = [s for s in strategies if s.kind == "output"]
            assert any(s.valid for s in outputs), op.name
            for v, s in enumerate(outputs):
                if not s.valid:
                    continue
                half = op.shape[v] // 2
                for part, (lo, hi) in enumerate(((0, half), (half, op.shape[v]))):
                    box = tuple((lo, hi) if d == v else (0, n) for d, n in enumerate(op.shape))
                    for slot, got in enumerate(s.regions[part].values()):
                        want = input_region(op.desc, slot, box)
                        assert got == (want if want is not None else got), (op.name, s.dimension, slot)
                        checked += 1
    assert kinds >= {"conv2d", "pool2d", "concat", "batchnorm2d", "relu", "add", "flatten", "linear", "softmax",
                     "parameter", "matmul", "lstm_cell", "lstm_hidden"}
    assert checked > 100
    with pytest.raises(DescriptionError, match="no shapes"):
        sw.strategies_of(graphs[0]["c1"], x=(1, 2))
    with pytest.raises(DescriptionError, match="needs an @sw.op"):
        sw.strategies_of("conv")
