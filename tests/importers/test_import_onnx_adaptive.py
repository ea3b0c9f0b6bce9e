"""Adaptive average pooling through ONNX: ``nn.AdaptiveAvgPool2d`` whose output size does not
divide the input size, which PyTorch's dynamo exporter spells as index arithmetic, a ``GatherND``
of the windows and their mean (or, for windows of uneven sizes, masks, an unrolled sum and a
division), imported by sw.from_onnx as the ops sw.from_torch builds.

- Small models exported by PyTorch (a 1x1 convolution, the pool, a linear layer), marked slow
  (an export takes 3 s, the session's first 10): a 3x2 map pooled to 7x5 (uneven windows along
  H, upsampling along W), 1x1 to 3x3 (an ``expand``), 2x2 to 7x7 (vgg11_bn at 64 px) and 5x5 to
  3x3 (overlapping windows, downsampling).  Each imports as from_torch's graph (op kinds, shapes
  and the pool's name), predicts as PyTorch's float64 run within 1e-5 and takes one SGD step
  whose gradient is within 1e-4 (relative) of float64's.
- Graphs written here with onnx.helper in the exporter's two shapes (Transpose, GatherND by
  constant indices, Transpose, then ReduceMean; or, for windows of uneven sizes, Where of
  constant masks, the sum unrolled with Gather and Add, and Div by the windows' sizes), in the
  default run: PyTorch's windows import (against onnx's reference evaluator); every variation that is not adaptive
  average pooling is refused with a ModelImportError naming the node and why.
"""
from __future__ import annotations

import copy
import io
import warnings

import numpy as np
import pytest

import shardwise as sw

onnx = pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

from test_import_onnx_rules import const, model, node, rand  # noqa: E402

POOL_KINDS = ("expand", "adaptive_avg_pool2d", "pool2d")


# ----- exported by PyTorch

def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript: pip install onnxscript")
    return torch


@pytest.mark.slow   # an export takes 3 s, the session's first 10
@pytest.mark.parametrize("size, out", [
    ((3, 2), (7, 5)),
    ((1, 1), (3, 3)),
    ((2, 2), (7, 7)),
    ((5, 5), (3, 3)),
], ids=lambda v: "x".join(map(str, v)))
def test_exported_adaptive_pool_imports_as_from_torch(size, out):
    torch = _torch()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.AdaptiveAvgPool2d(out), torch.nn.Flatten(),
                              torch.nn.Linear(4 * out[0] * out[1], 5)).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, *size)).astype(np.float32)
    y = rng.integers(0, 5, 2)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the exporter's notes
        torch.onnx.export(copy.deepcopy(net), (torch.tensor(x),), f, dynamo=True, optimize=False, verbose=False)
    g, weights = sw.from_onnx(f.getvalue())
    gt, _ = sw.from_torch(net, (torch.tensor(x),))
    assert [(op.kind, op.shape) for op in g.ops] == [(op.kind, op.shape) for op in gt.ops]
    pools = [op.name for op in g.ops if op.kind in POOL_KINDS]
    assert pools == [op.name for op in gt.ops if op.kind in POOL_KINDS] == ["1"]   # the Sequential's index

    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=sw.SGD(lr=1.0))
    t.set_weights(weights)
    exact = copy.deepcopy(net).double()
    xt = torch.tensor(x, dtype=torch.float64)
    with torch.no_grad():
        want = exact(xt).numpy()
    t.eval()
    np.testing.assert_allclose(t.forward(x), want, rtol=0, atol=1e-5 * max(1.0, float(np.abs(want).max())))
    torch.nn.functional.cross_entropy(exact(xt), torch.tensor(y)).backward()
    t.train()
    t.step(x, y)
    after = t.get_weights()
    for key, p in exact.named_parameters():
        grad = weights[key].astype(np.float64) - after[key]   # lr 1, no momentum: the change is the gradient
        scale = max(float(p.grad.abs().max()), 1e-3)
        assert float(np.abs(grad - p.grad.numpy()).max()) <= 1e-4 * scale, key


# ----- written here in the exporter's shape

N, C = 2, 3


def _windows(size: int, out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Along one axis, PyTorch's windows padded to the largest, k, as its decomposition reads
    them: the (out, k) row indices (clamped to the map), the (out, k) mask of the padding, the
    (out,) windows' sizes."""
    bounds = [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]
    k = max(b - a for a, b in bounds)
    rows = np.array([[min(a + j, size - 1) for j in range(k)] for a, _ in bounds])
    padding = np.array([[j >= b - a for j in range(k)] for a, b in bounds])
    return rows, padding, np.array([b - a for a, b in bounds])


def pooled(size, out, pairs=None, mean_axes=(-3, -1), tail=(), gather_from="t", transpose=(2, 3, 0, 1),
           sizes=None):
    """x (N, C, H, W) -> Transpose -> GatherND of the windows' (h, w) pairs (OH, KH, OW, KW, 2)
    -> Transpose -> their mean (ReduceMean; where windows differ in size, Where of the padding,
    Gather and Add of every (KH, KW) pick, Div by the sizes) -> ``tail`` nodes (read "mean",
    write "h") -> Flatten -> Gemm "fc"."""
    (rows, pad_h, len_h), (cols, pad_w, len_w) = _windows(size[0], out[0]), _windows(size[1], out[1])
    if pairs is None:
        h = np.broadcast_to(rows[:, :, None, None], rows.shape + cols.shape)
        w = np.broadcast_to(cols[None, None], rows.shape + cols.shape)
        pairs = np.stack([h, w], axis=-1).astype(np.int64)
    nodes = [node("Transpose", ["x"], ["t"], "avgpool_t", perm=list(transpose)),
             const("pairs", pairs),
             node("GatherND", [gather_from, "pairs"], ["v"], "avgpool_gather"),
             node("Transpose", ["v"], ["vt"], "avgpool_vt", perm=[4, 5, 0, 1, 2, 3])]   # (N, C, OH, KH, OW, KW)
    if not (pad_h.any() or pad_w.any()):
        nodes += [const("axes", list(mean_axes)),
                  node("ReduceMean", ["vt", "axes"], ["mean"], "avgpool_mean", keepdims=0)]
    else:
        nodes += [const("zero", 0.0, np.float32),
                  const("pad_h", pad_h[:, :, None, None], np.bool_), const("pad_w", pad_w, np.bool_),
                  node("Where", ["pad_h", "zero", "vt"], ["vh"], "avgpool_where_h"),
                  node("Where", ["pad_w", "zero", "vh"], ["vhw"], "avgpool_where_w")]
        total = None
        for i in range(rows.shape[1]):
            for j in range(cols.shape[1]):
                nodes += [const(f"i{i}", i), const(f"j{i}_{j}", j),
                          node("Gather", ["vhw", f"i{i}"], [f"p{i}"], f"avgpool_pick{i}", axis=3),
                          node("Gather", [f"p{i}", f"j{i}_{j}"], [f"p{i}_{j}"], f"avgpool_pick{i}_{j}", axis=4)]
                if total is not None:
                    nodes.append(node("Add", [total, f"p{i}_{j}"], [f"s{i}_{j}"], f"avgpool_add{i}_{j}"))
                total = f"p{i}_{j}" if total is None else f"s{i}_{j}"
        sizes = len_h[:, None] * len_w[None, :] if sizes is None else sizes
        nodes += [const("sizes", sizes, np.float32),
                  node("Div", [total, "sizes"], ["mean"], "avgpool_div")]
    nodes += [*(tail or [node("Identity", ["mean"], ["h"], "same")]),
              node("Flatten", ["h"], ["f"], "flat", axis=1),
              node("Gemm", ["f", "fc.weight", "fc.bias"], ["out"], "fc", transB=1)]
    features = C * out[0] * out[1]
    return model(nodes, {"x": [N, C, *size]}, {"fc.weight": rand(5, features), "fc.bias": rand(5)})


@pytest.mark.parametrize("size, out, kind", [((2, 2), (4, 4), "adaptive_avg_pool2d"),
                                             ((3, 3), (2, 2), "adaptive_avg_pool2d"),   # overlapping windows
                                             ((4, 6), (2, 3), "pool2d"),
                                             ((1, 1), (2, 3), "expand"),
                                             ((2, 2), (7, 7), "adaptive_avg_pool2d"),   # uneven: masks, sum
                                             ((3, 2), (7, 5), "adaptive_avg_pool2d"),
                                             ((5, 4), (3, 3), "adaptive_avg_pool2d")])
def test_the_exporters_shape_imports(size, out, kind):
    m = pooled(size, out)
    g, weights = sw.from_onnx(m)
    assert [op.kind for op in g.ops if op.kind in POOL_KINDS] == [kind]
    x = rand(N, C, *size)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)))
    t.set_weights(weights)
    t.eval()
    np.testing.assert_allclose(t.forward(x), want, rtol=1e-5, atol=1e-5)


def _per_channel():
    return [const("by", np.full((1, C, 1, 1), 2.0), np.float32), node("Div", ["mean", "by"], ["h"], "div_by")]


REFUSED = [
    ("other indices", lambda: pooled((2, 2), (4, 4), pairs=np.zeros((4, 1, 4, 1, 2), np.int64)),
     ["'flat'", "not the means of PyTorch's adaptive pooling windows of 2x2 to 4x4"]),
    ("other windows' sizes", lambda: pooled((2, 2), (7, 7), sizes=np.ones((7, 7))),
     ["'flat'", "not the means of PyTorch's adaptive pooling windows of 2x2 to 7x7"]),
    ("a sum with another tensor", lambda: pooled((2, 2), (2, 2), tail=[node("Add", ["mean", "x"], ["h"], "add_x")]),
     ["'add_x'", "Add of adaptive pooling's windows (2, 3, 2, 2)"]),
    ("a mean over one window axis", lambda: pooled((2, 2), (4, 4), mean_axes=(-1,)),
     ["'flat'", "not an (N, C, OH, OW) result"]),
    ("a mean over the channels", lambda: pooled((2, 2), (4, 4), mean_axes=(1,)),
     ["'avgpool_mean'", "ReduceMean", "not the batch's or the channels'"]),
    ("GatherND of the tensor itself", lambda: pooled((2, 2), (4, 4), gather_from="x"),
     ["'avgpool_gather'", "GatherND of a tensor of shape (2, 3, 2, 2)", "adaptive average pooling"]),
    ("GatherND of the channels", lambda: pooled((2, 2), (1, 1), pairs=np.zeros((1, 1, 1, 1, 2), np.int64),
                                                transpose=(1, 0, 2, 3)),
     ["'avgpool_gather'", "GatherND", "(H, W, N, C) transpose"]),
    ("a divisor per channel", lambda: pooled((2, 2), (4, 4), tail=_per_channel()),
     ["'div_by'", "Div", "the same for every sample and channel"]),
    ("Div of a tensor", lambda: model([const("two", 2.0, np.float32), node("Div", ["x", "two"], ["out"], "d")],
                                      {"x": [2, 4]}), ["'d'", "the ONNX op Div is not supported"]),
    ("Where of a tensor", lambda: model([const("m", [True, False, True, False], np.bool_),
                                         const("zero", 0.0, np.float32),
                                         node("Where", ["m", "zero", "x"], ["out"], "wh")], {"x": [2, 4]}),
     ["'wh'", "the ONNX op Where is not supported"]),
]


@pytest.mark.parametrize("build, fragments", [(b, f) for _, b, f in REFUSED], ids=[i for i, _, _ in REFUSED])
def test_other_index_arithmetic_is_refused(build, fragments):
    with pytest.raises(sw.ModelImportError) as info:
        sw.from_onnx(build())
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
