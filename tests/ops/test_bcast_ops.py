"""The broadcasting and slicing ops (shardwise.ops.bcast): their builders' refusals, their
descriptions (shapes, what a box reads) and stochastic depth's draws.  Numerics, gradients and
plans: the conformance harness (tests/ops/conformance.py)."""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.errors import GraphError, ShapeError
from shardwise.ops import bcast
from shardwise.reference.bcast import stochastic_depth_factor


def test_broadcast_shapes():
    assert bcast.broadcast_shape((8, 3, 1, 1), (8, 3, 5, 5), "mul") == (8, 3, 5, 5)
    assert bcast.broadcast_shape((4, 7, 16), (1, 7, 16), "add") == (4, 7, 16)
    assert bcast.broadcast_shape((4, 7, 16), (16,), "add") == (4, 7, 16)
    with pytest.raises(ShapeError, match="do not broadcast"):
        bcast.broadcast_shape((4, 3), (4, 2), "mul")


def test_builders_refuse_bad_arguments():
    g = sw.Graph()
    x = g.input("x", (4, 6, 5))
    with pytest.raises(ShapeError, match="do not broadcast"):
        g.mul(x, g.input("y", (4, 5, 5)))
    with pytest.raises(ShapeError, match="trailing part"):   # add's own message where nothing broadcasts
        g.add(x, g.input("z", (4, 6, 4)))
    with pytest.raises(ShapeError, match="cannot become"):
        g.expand(x, (4, 7, 5))
    with pytest.raises(ShapeError, match="lower rank"):
        g.expand(x, (6, 5))
    with pytest.raises(ShapeError, match="batch dimension"):
        g.slice(x, 0, 1, 3)
    with pytest.raises(ShapeError, match="empty"):
        g.slice(x, 1, 4, 2)
    with pytest.raises(ShapeError, match="step"):
        g.slice(x, 1, 0, 4, 0)
    with pytest.raises(ShapeError, match="add up"):
        g.split(x, [2, 2], 1)
    with pytest.raises(GraphError, match="p must"):
        g.stochastic_depth(x, 1.0)
    with pytest.raises(GraphError, match="mode"):
        g.stochastic_depth(x, 0.1, mode="col")
    img = g.input("img", (2, 3, 6, 6))
    with pytest.raises(ShapeError, match="positive"):
        g.upsample_nearest(img, 0)
    with pytest.raises(GraphError, match="ceil_mode"):
        g.pool2d(img, 3, 2, kind="avg", ceil_mode=True)
    with pytest.raises(ShapeError, match="N, C, H, W"):
        g.adaptive_avg_pool2d(x, 3)


def test_shapes_and_regions():
    g = sw.Graph()
    x = g.input("x", (4, 6, 5))
    assert g.slice(x, 1, -2).shape == (4, 2, 5)                # Python's negative bounds
    assert g.slice(x, 2, 0, 5, 2).shape == (4, 6, 3)
    assert g.slice(x, 1, 0) is x                                 # the whole dimension: no op
    assert [t.shape[1] for t in g.chunk(x, 4, dim=1)] == [2, 2, 2]   # PyTorch's chunk sizes
    assert [t.shape[2] for t in g.split(x, 2, dim=2)] == [2, 2, 1]
    t = g.expand(g.parameter((1, 1, 5), name="tok"), (4, -1, -1))
    assert t.shape == (4, 1, 5)
    img = g.input("img", (2, 3, 8, 8))
    assert g.pool2d(img, 3, 2, kind="max", ceil_mode=True).shape == (2, 3, 4, 4)   # floor: 3
    assert g.pool2d(img, 2, 2, kind="max", ceil_mode=True).shape == (2, 3, 4, 4)   # no partial window
    assert g.adaptive_avg_pool2d(g.input("small", (2, 3, 2, 2)), 7).shape == (2, 3, 7, 7)
    assert g.upsample_bilinear(img, 2).shape == (2, 3, 16, 16)
    # what a box reads: a slice's channels are shifted by its start; a broadcast dimension is index 0
    d = bcast.slice_(x.shape, 1, 2, 6)
    assert [e.offset for e in d.inputs[0].exprs] == [0, 2, 0]
    d = bcast.mul((4, 3, 1, 1), (4, 3, 5, 5))
    assert d.inputs[0].exprs[2].coefs == (0, 0, 0, 0) and d.inputs[1].exprs[2].coefs == (0, 0, 1, 0)
    assert d.forward_flops() == 4 * 3 * 5 * 5


def test_stochastic_depth_draws_are_the_plans_and_the_steps():
    """Row mode drops whole samples, the same ones on one worker and on a plan splitting the
    samples; the draws change with the step; eval mode is the identity."""
    n, p, seed = 16, 0.5, 99
    g = sw.Graph("sd")
    x = g.input("x", (n, 3, 4))
    y = g.stochastic_depth(g.add(x, g.parameter((n, 3, 4), name="w"), name="xw"), p, seed=seed, name="op")
    g.softmax(g.linear(g.flatten(y), 3, name="fc"), name="loss")
    data = np.random.default_rng(0).standard_normal((n, 3, 4)).astype(np.float32)
    outs = []
    for plan in (sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}),
                 sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), {"op": {"n": 2}})):
        t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.0))
        weights = {k: np.zeros_like(v) if k == "w.weight" else v for k, v in t.get_weights().items()}
        t.set_weights(weights)
        t.train(True)
        got = t.forward(data)
        want = sw.reference.forward(g, weights, data.astype(np.float64), step=t.steps)
        np.testing.assert_allclose(got, want["fc"], atol=1e-5, rtol=1e-5)
        outs.append((got, want["op"]))
        t.train(False)
        np.testing.assert_allclose(t.forward(data), sw.reference.forward(g, weights, data, training=False)["fc"],
                                   atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    outs = [o[1] for o in outs]
    f = stochastic_depth_factor(n, p, seed, 0, True, np.float64)
    assert set(np.unique(f)) <= {0.0, 2.0} and 0 < np.count_nonzero(f) < n
    np.testing.assert_allclose(outs[0], data * f[:, None, None])
    assert not np.array_equal(f, stochastic_depth_factor(n, p, seed, 1, True, np.float64))
    batch = stochastic_depth_factor(n, p, seed, 0, False, np.float64)
    assert len(set(batch)) == 1
