"""Bad input gets a clear exception of the right class naming the problem (issue point 8).

Every error shardwise raises on purpose is a ShardwiseError subclass: ShapeError,
GraphError, DeviceGraphError, ConfigError, SearchError, PlanFileError.  Never a
crash, a hang, or a stray TypeError/OverflowError/RecursionError from deep inside.
The raw C entry points (shardwise._core) raise ValueError on malformed arrays.

Hypothesis generates convolution / pooling geometry (checked against PyTorch's
output-size formula), plan dicts, plan files, bandwidths, cost tables and
problem blobs.  
"""
from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import shardwise as sw
from shardwise import _core
from shardwise.errors import (ConfigError, DeviceGraphError, GraphError, PlanFileError, SearchError, ShapeError,
                              ShardwiseError)
from shardwise.planning.problem import device_arrays, encode_graph

from strategies_random import examples


def test_error_hierarchy():
    for cls in (ShapeError, GraphError, DeviceGraphError, ConfigError, SearchError, PlanFileError):
        assert issubclass(cls, ShardwiseError)
        assert getattr(sw, cls.__name__) is cls
    # and the built-in class a user would catch
    for cls in (ShapeError, GraphError, DeviceGraphError, ConfigError, PlanFileError):
        assert issubclass(cls, ValueError)
    assert issubclass(SearchError, RuntimeError)


# =========================================================================== fixtures

def small_graph(name: str = "small", batch: int = 4, classes: int = 6) -> sw.Graph:
    g = sw.Graph(name)
    x = g.input("x", (batch, 3, 8, 8))
    x = g.conv2d(x, 4, kernel=3, padding=1, activation="relu", name="conv1")
    x = g.pool2d(x, kernel=2, name="pool1")
    x = g.flatten(x, name="flat")
    x = g.linear(x, classes, name="fc")
    g.softmax(x, name="prob")
    return g


@pytest.fixture
def g() -> sw.Graph:
    return small_graph()


@pytest.fixture
def x(g) -> sw.Tensor:
    return g.input("x2", (4, 3, 8, 8))


@pytest.fixture
def d4() -> sw.DeviceGraph:
    return sw.DeviceGraph.cpu(4)


def names_all(message: str, *words: str) -> None:
    for w in words:
        assert w.lower() in message.lower(), f"{w!r} not in message {message!r}"


# =========================================================================== graph builder: shapes

def test_add_of_different_shapes(g, x):
    y = g.conv2d(x, 5, kernel=1)
    with pytest.raises(ShapeError) as err:
        g.add(x, y)
    names_all(str(err.value), "add", "(4, 3, 8, 8)", "(4, 5, 8, 8)")


def test_concat_mismatch(g, x):
    y = g.pool2d(x, kernel=2)
    with pytest.raises(ShapeError) as err:
        g.concat([x, y], axis=1)
    names_all(str(err.value), "concat", "(4, 3, 8, 8)", "(4, 3, 4, 4)")
    with pytest.raises(ShapeError, match="axis"):
        g.concat([x, x], axis=4)
    with pytest.raises(ShapeError, match="axis"):
        g.concat([x, x], axis=-1)
    with pytest.raises(ShapeError, match="axis"):
        g.concat([x, x], axis=True)
    f = g.flatten(x)
    with pytest.raises(ShapeError, match="concat"):
        g.concat([x, f], axis=1)  # ranks differ
    with pytest.raises(GraphError, match="non-empty list"):
        g.concat([], axis=1)
    with pytest.raises(GraphError, match="list"):
        g.concat(x, axis=1)


def test_ranks(g, x):
    v = g.input("vec", (4,))
    with pytest.raises(ShapeError, match="linear expects a rank >= 2 input .*, got shape \\(4,\\)"):
        g.linear(v, 10)
    assert g.linear(x, 10).shape == (4, 3, 8, 10)   # over the last dimension, as torch.nn.Linear
    f = g.flatten(x)
    for build in (lambda: g.conv2d(f, 4), lambda: g.pool2d(f), lambda: g.batchnorm2d(f)):
        with pytest.raises(ShapeError, match="rank-4"):
            build()
    with pytest.raises(ShapeError, match="softmax expects rank >= 2 logits"):
        g.softmax(v)
    with pytest.raises(ShapeError, match="flatten expects rank >= 2"):
        g.flatten(v)


@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (4, -3, 8, 8), (4, 3, 0, 8), (-1,), (), (4, 3.0, 8, 8),
                                   (4, True, 8, 8), "abc", None, (4, "3", 8, 8)])
def test_input_shapes(shape):
    g = sw.Graph("bad")
    with pytest.raises(ShapeError) as err:
        g.input("x", shape)
    names_all(str(err.value), "input 'x' shape")
    assert len(g) == 0


@pytest.mark.parametrize("value", [0, -1, -8, 2.5, True, None, "8"])
def test_out_channels_and_features(g, x, value):
    with pytest.raises(ShapeError, match="out_channels"):
        g.conv2d(x, value)
    with pytest.raises(ShapeError, match="out_features"):
        g.linear(g.flatten(x), value)


@pytest.mark.parametrize("kw,word", [
    ({"kernel": 0}, "kernel"), ({"kernel": -3}, "kernel"), ({"kernel": (3, 0)}, "kernel"),
    ({"stride": 0}, "stride"), ({"stride": -1}, "stride"), ({"stride": (1, 0)}, "stride"),
    ({"padding": -1}, "padding"), ({"padding": (0, -2)}, "padding"),
    ({"kernel": 2.0}, "kernel"), ({"kernel": (1, 2, 3)}, "kernel"), ({"kernel": "ab"}, "kernel"),
    ({"stride": "2"}, "stride"), ({"padding": True}, "padding"), ({"padding": None}, "padding"),
])
def test_window_parameters(g, x, kw, word):
    with pytest.raises(ShapeError, match=word):
        g.conv2d(x, 4, **kw)
    with pytest.raises(ShapeError, match=word):
        g.pool2d(x, **{"kernel": 2, "stride": 2, **kw})
    with pytest.raises(ShapeError, match="stride"):
        g.conv2d(x, 4, stride=None)  # pool2d's stride defaults to its kernel; conv2d's is 1, not None


def test_negative_pool_kernel_message(g, x):
    with pytest.raises(ShapeError, match="kernel and stride must be positive"):
        g.pool2d(x, kernel=-3, stride=1)


def test_kernel_larger_than_input(g, x):
    with pytest.raises(ShapeError) as err:
        g.conv2d(x, 4, kernel=9)
    names_all(str(err.value), "kernel 9", "larger", "8")
    g.conv2d(x, 4, kernel=9, padding=1)  # fits in the padded input: fine, as in PyTorch
    with pytest.raises(ShapeError, match="larger than the padded input 10"):
        g.conv2d(x, 4, kernel=(3, 11), padding=1)
    with pytest.raises(ShapeError, match="larger"):
        g.pool2d(x, kernel=16)
    with pytest.raises(ShapeError, match="at most half the kernel"):
        g.pool2d(x, kernel=2, padding=2)


def test_unknown_pool_kind_and_activation(g, x):
    with pytest.raises(GraphError, match="unknown pool kind 'min'"):
        g.pool2d(x, kind="min")
    with pytest.raises(GraphError, match="unknown activation 'tanh'"):
        g.conv2d(x, 4, activation="tanh")
    with pytest.raises(GraphError, match="unknown activation 'sigmoid'"):
        g.linear(g.flatten(x), 4, activation="sigmoid")


def test_failed_builder_call_leaves_graph_unchanged(g, x):
    before = g.op_names()
    with pytest.raises(GraphError):
        g.conv2d(x, 4, activation="tanh", name="c_bad")
    with pytest.raises(GraphError):
        g.linear(g.flatten(x, name="f_ok"), 4, activation="gelu", name="l_bad")
    assert g.op_names() == before + ["f_ok"]
    assert "c_bad" not in g and "l_bad" not in g


def test_every_failed_shape_check_leaves_graph_unchanged(g, x):
    before = g.op_names()
    for bad in (lambda: g.conv2d(x, 4, kernel=20, name="a"), lambda: g.add(x, x, name="conv1"),
                lambda: g.pool2d(x, kind="min", name="b"), lambda: g.linear(x, 0, name="c"),
                lambda: g.concat([x, x], axis=7, name="d")):
        with pytest.raises(ShardwiseError):
            bad()
    assert g.op_names() == before


def test_tensors_from_another_graph(g, x):
    other = small_graph("other")
    t = other.input("y", (4, 3, 8, 8))
    for build in (lambda: g.conv2d(t, 4), lambda: g.pool2d(t), lambda: g.relu(t), lambda: g.batchnorm2d(t),
                  lambda: g.flatten(t), lambda: g.add(x, t), lambda: g.add(t, x), lambda: g.concat([x, t])):
        with pytest.raises(GraphError) as err:
            build()
        names_all(str(err.value), "'y'", "belongs to graph 'other'", "'small'")
    for junk in (None, 3, "x", (4, 3, 8, 8), np.zeros((4, 3, 8, 8))):
        with pytest.raises(GraphError, match="must be a Tensor"):
            g.relu(junk)


def test_op_names(g, x):
    with pytest.raises(GraphError, match="already exists"):
        g.relu(x, name="conv1")
    for bad in ("", 3, ("a",)):
        with pytest.raises(GraphError, match="non-empty string"):
            g.relu(x, name=bad)
    with pytest.raises(KeyError, match="no op named 'nope'"):
        g["nope"]


def test_unknown_zoo_model_and_bad_sizes():
    with pytest.raises(GraphError, match="unknown model 'resnet9'"):
        sw.models.get("resnet9")
    with pytest.raises(ShapeError, match="batch must be a positive int, got 0"):
        sw.models.get("vgg16", batch=0)
    with pytest.raises(ShapeError, match="num_classes must be a positive int"):
        sw.models.lenet5(num_classes=-1)


def test_sizes_beyond_int64():
    g = sw.Graph("huge")
    with pytest.raises(ShardwiseError, match="10{20}|size"):
        x = g.input("x", (10**20, 3, 8, 8))
        g.conv2d(x, 4)
        sw.search(g, sw.DeviceGraph.cpu(2))


# Sizes the builder derives get the bounds input shapes get (issue 12): before, these built
# fine and failed at search time with OverflowError (Python int too large to convert to C long)
# or the C core's ValueError about index arithmetic.
def _derived_cases():
    def one_input(shape):
        g = sw.Graph("derived")
        return g, g.input("x", shape)

    def conv_out(g, x):
        return g.conv2d(x, 2**70, kernel=1, name="wide")

    def conv_out_int64(g, x):
        return g.conv2d(x, 2**60, kernel=1, name="wide")

    def linear_out(g, x):
        return g.linear(g.flatten(x), 2**70, name="wide")

    def conv_padding(g, x):
        return g.conv2d(x, 4, kernel=1, padding=2**70, name="wide")

    def conv_stride(g, x):
        return g.conv2d(x, 4, kernel=1, stride=2**30, name="wide")

    def pool_kernel(g, x):
        return g.pool2d(x, kernel=2**34, stride=1, padding=2**33, name="wide")

    def conv_weight(g, x):
        return g.conv2d(g.conv2d(x, 2**20, kernel=1), 2**20, kernel=17, padding=8, name="wide")

    def linear_points(g, x):
        return g.linear(x, 2**10, name="wide")

    def concat_offset(g, x):
        return g.concat([x] * 8, axis=1, name="wide")

    def flatten_period(g, x):
        return g.flatten(x, name="wide")

    small = (4, 3, 8, 8)
    return {
        "conv2d out_channels beyond int64": (small, conv_out, ["conv2d 'wide'", "output shape", "elements"]),
        "conv2d out_channels 2**60": (small, conv_out_int64, ["conv2d 'wide'", "output shape", "elements"]),
        "linear out_features beyond int64": (small, linear_out, ["linear 'wide'", "output shape", "elements"]),
        "conv2d padding beyond int64": (small, conv_padding, ["conv2d", "padding", "at most 1,048,576"]),
        "conv2d stride 2**30": (small, conv_stride, ["conv2d", "stride", "at most 1,048,576"]),
        "pool2d kernel 2**34": (small, pool_kernel, ["pool2d", "kernel", "at most 1,048,576"]),
        "conv2d weight of 2**48+ elements": (small, conv_weight, ["conv2d 'wide'", "weight shape", "elements"]),
        "linear iteration space 2**58": ((2**24, 2**24), linear_points,
                                         ["linear 'wide'", "iteration points", "supported"]),
        "concat offsets beyond 2**40": ((1, 2**42), concat_offset, ["concat 'wide'", "index offset", "supported"]),
        "flatten stride beyond 2**40": ((1, 2, 2**41, 2), flatten_period, ["flatten 'wide'", "flattened",
                                                                          "supported"]),
    }, one_input


_DERIVED, _one_input = _derived_cases()


@pytest.mark.parametrize("case", sorted(_DERIVED))
def test_derived_sizes_are_bounded_when_built(case):
    shape, build, words = _DERIVED[case]
    g, x = _one_input(shape)
    with pytest.raises(ShapeError) as err:
        build(g, x)
    names_all(str(err.value), *words)
    assert "wide" not in g  # the refused op was not added


# ----- hypothesis: conv2d / pool2d geometry against PyTorch's formula

def _torch_out(size, k, s, p):
    """PyTorch's output size (dilation 1, floor mode), or None where PyTorch raises."""
    if k <= 0 or s <= 0 or p < 0 or size + 2 * p < k:
        return None
    return (size + 2 * p - k) // s + 1


ints = st.integers(-3, 14)
pair_or_int = st.one_of(ints, st.tuples(ints, ints))


def _pair(v):
    return (v, v) if isinstance(v, int) else v


@settings(max_examples=examples(300))
@given(n=st.integers(-1, 5), c=st.integers(-1, 5), h=st.integers(-2, 12), w=st.integers(-2, 12),
       oc=st.integers(-2, 6), kernel=pair_or_int, stride=pair_or_int, padding=pair_or_int,
       pool=st.booleans(), kind=st.sampled_from(["max", "avg"]))
def test_window_geometry_matches_pytorch(n, c, h, w, oc, kernel, stride, padding, pool, kind):
    g = sw.Graph("geom")
    try:
        x = g.input("x", (n, c, h, w))
    except ShapeError as exc:
        assert min(n, c, h, w) <= 0 and "positive" in str(exc)
        return
    assert min(n, c, h, w) > 0
    (kh, kw), (sh, sw_), (ph, pw) = _pair(kernel), _pair(stride), _pair(padding)
    oh, ow = _torch_out(h, kh, sh, ph), _torch_out(w, kw, sw_, pw)
    valid = oh is not None and ow is not None
    if pool:
        valid = valid and 2 * ph <= kh and 2 * pw <= kw  # PyTorch: pad at most half the kernel
    else:
        valid = valid and oc > 0
    try:
        if pool:
            y = g.pool2d(x, kernel=kernel, stride=stride, padding=padding, kind=kind)
        else:
            y = g.conv2d(x, oc, kernel=kernel, stride=stride, padding=padding)
    except ShapeError as exc:
        assert not valid, f"valid geometry rejected: {exc}"
        assert str(exc)
        assert len(g) == 1
        return
    assert valid, f"invalid geometry accepted: {y.shape}"
    assert y.shape == (n, c if pool else oc, oh, ow)


# =========================================================================== device graphs

@pytest.mark.parametrize("bandwidth", [0, 0.0, -1, -20e9, math.nan, math.inf, -math.inf, "fast", None, True,
                                       [1e9], "nan"])
def test_add_link_bad_bandwidth(bandwidth):
    d = sw.DeviceGraph()
    a = d.add_device("a", flops=1e12, memory=1e9)
    b = d.add_device("b", flops=1e12, memory=1e9)
    with pytest.raises(DeviceGraphError) as err:
        d.add_link(a, b, bandwidth=bandwidth)
    names_all(str(err.value), "bandwidth of link a-b", "positive")
    assert d.links == {}


@settings(max_examples=examples(150))
@given(bw=st.one_of(st.floats(), st.integers(-2**70, 2**70), st.text(max_size=5), st.none(), st.booleans(),
                    st.decimals(allow_nan=True), st.fractions()))
def test_add_link_random_bandwidth(bw):
    d = sw.DeviceGraph()
    d.add_device("a", flops=1e12, memory=1e9)
    d.add_device("b", flops=1e12, memory=1e9)
    try:
        ok = not isinstance(bw, bool) and math.isfinite(float(bw)) and float(bw) > 0
    except (TypeError, ValueError, OverflowError):
        ok = False
    try:
        d.add_link("a", "b", bandwidth=bw)
    except DeviceGraphError as exc:
        assert not ok, f"{bw!r} rejected: {exc}"
        assert "bandwidth" in str(exc)
        return
    assert ok, f"{bw!r} accepted"
    assert d.route_bandwidths()[0, 1] == float(bw)


def test_add_device_and_link_errors():
    d = sw.DeviceGraph("mine")
    a = d.add_device("a", flops=1e12, memory=1e9)
    for kw, word in (({"flops": 0}, "flops"), ({"flops": math.nan}, "flops"), ({"memory": -1}, "memory"),
                     ({"mem_bandwidth": math.inf}, "mem_bandwidth")):
        with pytest.raises(DeviceGraphError, match=word):
            d.add_device("b", **{"flops": 1e12, "memory": 1e9, **kw})
    with pytest.raises(DeviceGraphError, match="already exists"):
        d.add_device("a", flops=1e12, memory=1e9)
    with pytest.raises(DeviceGraphError, match="non-empty string"):
        d.add_device("", flops=1e12, memory=1e9)
    with pytest.raises(DeviceGraphError, match="two different devices"):
        d.add_link(a, a, bandwidth=1e9)
    with pytest.raises(DeviceGraphError, match="no device named 'zz'"):
        d.add_link(a, "zz", bandwidth=1e9)
    with pytest.raises(DeviceGraphError, match="unknown device 7"):
        d.add_link(a, 7, bandwidth=1e9)
    other = sw.DeviceGraph("theirs")
    other.add_device("a", flops=1e12, memory=1e9)
    foreign = other.add_device("b", flops=1e12, memory=1e9)
    with pytest.raises(DeviceGraphError, match="does not belong to device graph 'mine'"):
        d.add_link(a, foreign, bandwidth=1e9)


@pytest.mark.parametrize("node", ["x", None])
def test_add_device_bad_node(node):
    d = sw.DeviceGraph()
    with pytest.raises(DeviceGraphError, match="node"):
        d.add_device("a", flops=1e12, memory=1e9, node=node)


def test_cluster_preset_of_wrong_type():
    with pytest.raises(DeviceGraphError, match="preset"):
        sw.DeviceGraph.cluster(nodes=1, devices_per_node=2, device=["P100"])


@pytest.mark.parametrize("build,word", [
    (lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=2, device="TPU"), "unknown device preset 'TPU'"),
    (lambda: sw.DeviceGraph.cluster(nodes=0), "nodes must be a positive int"),
    (lambda: sw.DeviceGraph.cluster(devices_per_node=-4), "devices_per_node must be a positive int"),
    (lambda: sw.DeviceGraph.cluster(nodes=2.0), "nodes must be a positive int"),
    (lambda: sw.DeviceGraph.cluster(inter_bandwidth=0), "inter_bandwidth"),
    (lambda: sw.DeviceGraph.cluster(intra_bandwidth=math.nan), "intra_bandwidth"),
    (lambda: sw.DeviceGraph.cpu(0), "workers must be a positive int"),
    (lambda: sw.DeviceGraph.parse("four"), "cannot read device count 'four'"),
    (lambda: sw.DeviceGraph.parse("4x"), "cannot read device count"),
    (lambda: sw.DeviceGraph.parse("1x2x3"), "cannot read device count"),
    (lambda: sw.DeviceGraph.parse("0"), "positive"),
    (lambda: sw.DeviceGraph.parse("2x2", device="cpu"), "one machine"),
    (lambda: sw.DeviceGraph.parse("4", device="B200"), "unknown device preset 'B200'"),
])
def test_device_presets(build, word):
    with pytest.raises(DeviceGraphError) as err:
        build()
    names_all(str(err.value), word)


def test_no_route_between_devices(g):
    d = sw.DeviceGraph("split")
    for k in range(4):
        d.add_device(f"g{k}", flops=1e12, memory=1e9)
    d.add_link("g0", "g1", bandwidth=1e9)
    d.add_link("g2", "g3", bandwidth=1e9)
    with pytest.raises(DeviceGraphError) as err:
        sw.search(g, d)
    names_all(str(err.value), "no route from device 'g")
    with pytest.raises(DeviceGraphError, match="no route"):
        sw.strategies.data_parallel(g, d).cost
    # one-way links only: a reaches b, b never reaches a
    one_way = sw.DeviceGraph("one-way")
    one_way.add_device("a", flops=1e12, memory=1e9)
    one_way.add_device("b", flops=1e12, memory=1e9)
    one_way.add_link("a", "b", bandwidth=1e9, bidirectional=False)
    with pytest.raises(DeviceGraphError, match="no route from device 'b' to 'a'"):
        sw.search(g, one_way)
    # a lone device without links is fine; no devices at all is not
    lone = sw.DeviceGraph("lone")
    lone.add_device("a", flops=1e12, memory=1e9)
    assert sw.search(g, lone).cost > 0
    with pytest.raises(DeviceGraphError, match="no devices"):
        sw.search(g, sw.DeviceGraph("empty"))


# =========================================================================== search arguments

def test_unknown_algorithm(g, d4):
    with pytest.raises(ShardwiseError) as err:
        sw.search(g, d4, algorithm="greedy")
    assert isinstance(err.value, (ConfigError, SearchError))
    names_all(str(err.value), "unknown search algorithm 'greedy'", "elimination", "exhaustive")


def test_bad_search_arguments(g, d4):
    with pytest.raises(ConfigError, match="needs a Graph"):
        sw.search("vgg16", d4)
    with pytest.raises(ConfigError, match="needs a DeviceGraph"):
        sw.search(g, 4)
    with pytest.raises(ConfigError, match="unknown sync model 'gossip'"):
        sw.search(g, d4, sync="gossip")
    with pytest.raises(ConfigError, match="graph 'empty' has no ops"):
        sw.search(sw.Graph("empty"), d4)
    with pytest.raises(ConfigError, match="profile time"):
        sw.ProfileTable({("conv2d", (4, 4, 8, 8)): -1.0})


def test_nan_evaluation_limit_is_rejected(g, d4):
    with pytest.raises(ShardwiseError, match="max_evaluations"):
        sw.search(g, d4, algorithm="exhaustive", max_evaluations=math.nan)


@pytest.mark.parametrize("kw", [{"bytes_per_element": 0.0}, {"bytes_per_element": -4.0},
                                {"backward_factor": math.nan}, {"bytes_per_element": 1e9},
                                {"backward_factor": math.inf}, {"bytes_per_element": "4"},
                                {"backward_factor": True}])
def test_bad_cost_options(g, d4, kw):
    with pytest.raises(ConfigError) as err:
        sw.search(g, d4, options=sw.CostOptions(**kw))
    names_all(str(err.value), *kw, "positive")


def test_exhaustive_refusal_past_double_range_names_its_size():
    """10^361 strategies overflow a double; the refusal still says how many (it said "10^inf")."""
    n, k = 400, 8
    nodes = [np.arange(k, dtype=float) for _ in range(n)]
    edges = [(i, i + 1, np.zeros((k, k))) for i in range(n - 1)]
    with pytest.raises(RuntimeError) as err:
        _core.search_tables(nodes, edges, "exhaustive", 1e6)
    text = str(err.value)
    assert f"10^{n * math.log10(k):.1f} strategies" in text and "400 ops" in text
    assert "max_evaluations=1e+06" in text and "inf" not in text and ".c:" not in text


def refuse_exhaustive_vgg16() -> tuple[str, float]:
    """sw.search(algorithm="exhaustive") on VGG-16 over 16 P100s: (the error's text, seconds to refuse)."""
    g = sw.models.vgg16(batch=16)
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")
    start = time.perf_counter()
    with pytest.raises(SearchError) as err:
        sw.search(g, d, algorithm="exhaustive")
    return str(err.value), time.perf_counter() - start


def test_exhaustive_search_too_large_is_refused():
    text, _ = refuse_exhaustive_vgg16()
    names_all(text, "exhaustive", "strategies", "max_evaluations=2e+07", "elimination")
    assert "inf" not in text and ".c:" not in text


@pytest.mark.calibration
def test_exhaustive_search_too_large_fails_fast():
    _, elapsed = refuse_exhaustive_vgg16()
    assert elapsed < 1.0, f"took {elapsed:.2f} s to refuse"


def test_residual_graph_above_the_bound_warns_with_the_gap():
    """A graph no node/edge/leaf elimination reduces to one node; below what exact variable
    elimination needs, the search returns its best plan, says so, gives the gap and the
    option that lifts the bound."""
    g = sw.Graph("braid")
    x = g.input("x", (4, 4, 4, 4))
    a = g.conv2d(x, 4, kernel=1, name="a")
    b = g.conv2d(x, 4, kernel=1, name="b")
    c = g.add(a, b, name="c")
    g.add(b, c, name="d")
    d8 = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4)
    plan = sw.search(g, d8)
    assert plan.search_stats["residual_nodes"] >= 3 and plan.search_stats["exact"]
    with pytest.warns(sw.SearchWarning) as caught:
        rough = sw.search(g, d8, max_evaluations=10)
    names_all(str(caught[0].message), "max_evaluations=10", "lower bound", "above the optimum")
    assert ".c:" not in str(caught[0].message)
    s = rough.search_stats
    assert not s["exact"] and s["lower_bound"] <= plan.cost * (1 + 1e-12) <= rough.cost * (1 + 1e-12)


# =========================================================================== Plan.from_dict

def test_degree_that_divides_nothing(g, d4):
    with pytest.raises(ConfigError) as err:
        sw.Plan.from_dict(g, d4, {"conv1": {"c": 3}})
    names_all(str(err.value), "'conv1'", "c=3", "does not divide", "size 4")
    with pytest.raises(ConfigError, match="'x': degree n=3 does not divide"):
        sw.Plan.from_dict(g, d4, {"x": {"n": 3}})
    # flatten keeps whole channels together: c=8 of 64 features would cut a channel of 16
    with pytest.raises(ConfigError, match="cut a 16-element group"):
        sw.Plan.from_dict(g, d4, {"flat": {"c": 8}})


@pytest.mark.parametrize("spec,words", [
    ({"conv9": {"n": 2}}, ["no op named 'conv9'"]),
    ({"conv1": {"q": 2}}, ["'conv1'", "unknown dimension 'q'"]),
    ({"fc": {"h": 2}}, ["'fc'", "unknown dimension 'h'", "('n', 'c')"]),
    ({"conv1": {"n": 0}}, ["'conv1'", "positive int"]),
    ({"conv1": {"n": -2}}, ["'conv1'", "positive int"]),
    ({"conv1": {"n": 2.0}}, ["'conv1'", "positive int"]),
    ({"conv1": {"n": True}}, ["'conv1'", "positive int"]),
    ({"conv1": {"n": "2"}}, ["'conv1'", "positive int"]),
    ({"conv1": 4}, ["'conv1'", "mapping"]),
    ({"conv1": {"n": 2, "devices": [0, 0]}}, ["'conv1'", "2 distinct devices"]),
    ({"conv1": {"n": 2, "devices": [0]}}, ["'conv1'", "2 distinct devices"]),
    ({"conv1": {"n": 2, "devices": [0, 9]}}, ["'conv1'", "bad device list", "9"]),
    ({"conv1": {"n": 2, "devices": [0, "gpu7"]}}, ["'conv1'", "bad device list", "gpu7"]),
    ({"conv1": {"n": 2, "devices": 5}}, ["'conv1'", "bad device list"]),
])
def test_from_dict_errors(g, d4, spec, words):
    with pytest.raises(ConfigError) as err:
        sw.Plan.from_dict(g, d4, spec)
    names_all(str(err.value), *words)


def test_from_dict_not_a_mapping(g, d4):
    for spec in (None, [("conv1", {"n": 2})], "conv1"):
        with pytest.raises(ConfigError, match="must map op names"):
            sw.Plan.from_dict(g, d4, spec)


def test_more_workers_than_devices(g, d4):
    with pytest.raises(ConfigError) as err:
        sw.Plan.from_dict(g, d4, {"conv1": {"n": 4, "c": 2}})
    names_all(str(err.value), "'conv1'")
    with pytest.raises(ConfigError, match="8 workers"):
        sw.Plan.from_dict(g, d4, {"conv1": {"n": 2, "c": 4, "devices": [0, 1, 2, 3]}})


def test_more_workers_than_devices_message(g, d4):
    with pytest.raises(ConfigError) as err:
        sw.Plan.from_dict(g, d4, {"conv1": {"n": 4, "c": 2}})
    names_all(str(err.value), "8 workers", "4 devices")


def _json_values():
    return st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.floats(allow_nan=True),
                  st.text(max_size=6), st.sampled_from(["n", "c", "h", "w", "devices", "conv1", "fc"])),
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(st.text(max_size=6) | st.sampled_from(["n", "c", "h", "w",
                                                                                      "devices"]),
                                                inner, max_size=4)),
        max_leaves=12)


OP_NAMES = small_graph().op_names()
_config_specs = st.dictionaries(
    st.sampled_from(["n", "c", "h", "w", "devices", "k"]),
    st.one_of(st.integers(-2, 20), st.lists(st.integers(-1, 5), max_size=9), _json_values()),
    max_size=5)
_plan_specs = st.dictionaries(st.one_of(st.sampled_from(OP_NAMES), st.text(max_size=6)),
                              st.one_of(_config_specs, _json_values()), max_size=5)


@settings(max_examples=examples(300))
@given(spec=st.one_of(_plan_specs, _json_values()))
def test_random_plan_dicts(spec):
    g, d = small_graph(), sw.DeviceGraph.cpu(4)
    try:
        plan = sw.Plan.from_dict(g, d, spec)
    except ConfigError as exc:
        assert str(exc)
        return
    assert math.isfinite(plan.cost) and plan.cost >= 0
    assert set(plan.configs) == set(g.op_names())


# =========================================================================== plan files

@pytest.fixture
def saved(tmp_path, g, d4):
    plan = sw.search(g, d4)
    path = tmp_path / "plan.json"
    plan.save(path)
    return path, plan


@pytest.mark.parametrize("content,words", [
    ("", ["not a plan file", "invalid JSON"]),
    ("{", ["invalid JSON"]),
    ("not json at all", ["invalid JSON"]),
    ("[1, 2, 3]", ["not a shardwise plan"]),
    ("42", ["not a shardwise plan"]),
    ('"shardwise-plan"', ["not a shardwise plan"]),
    ("null", ["not a shardwise plan"]),
    ('{"format": "other"}', ["not a shardwise plan"]),
    ('{"format": "shardwise-plan"}', ["version None"]),
    ('{"format": "shardwise-plan", "version": 99}', ["version 99", "expected 1"]),
    ('{"format": "shardwise-plan", "version": 1}', ["malformed plan file", "KeyError"]),
    ('{"format": "shardwise-plan", "version": 1, "graph": 3, "devices": {}, "ops": {}, "cost_model": {}}',
     ["malformed plan file"]),
    ('{"format": "shardwise-plan", "version": 1, "graph": {"fingerprint": "x"}, '
     '"devices": {"fingerprint": "y"}, "ops": {}, "cost_model": {"sync": "gossip", "bytes_per_element": 4, '
     '"backward_factor": 3}}', ["malformed plan file", "gossip"]),
    ('{"format": "shardwise-plan", "version": 1, "graph": {"fingerprint": "x"}, '
     '"devices": {"fingerprint": "y"}, "ops": {}, "cost_model": {"sync": "ring", "bytes_per_element": "four", '
     '"backward_factor": 3}}', ["malformed plan file"]),
])
def test_malformed_plan_files(tmp_path, g, d4, content, words):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PlanFileError) as err:
        sw.Plan.load(path, g, d4)
    names_all(str(err.value), str(path), *words)


def test_missing_plan_file(tmp_path, g, d4):
    missing = tmp_path / "nope" / "plan.json"
    with pytest.raises((OSError, PlanFileError), match="plan.json"):
        sw.Plan.load(missing, g, d4)


def test_binary_garbage_plan_file(tmp_path, g, d4):
    path = tmp_path / "bad.json"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(PlanFileError, match="not a plan file"):
        sw.Plan.load(path, g, d4)
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(PlanFileError, match="not a plan file"):
        sw.Plan.load(path, g, d4)


@settings(max_examples=examples(40))
@given(cut=st.floats(0.0, 0.999))
def test_truncated_plan_files(tmp_path_factory, cut):
    g, d = small_graph(), sw.DeviceGraph.cpu(4)
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    sw.search(g, d).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(PlanFileError, match="not a plan file"):
        sw.Plan.load(path, g, d)


def test_plan_file_round_trip_and_edits(saved, g, d4):
    path, plan = saved
    again = sw.Plan.load(path, g, d4)
    assert again.configs == plan.configs and again.cost == pytest.approx(plan.cost, rel=1e-12)
    data = json.loads(path.read_text())

    def edited(change):
        doc = json.loads(json.dumps(data))
        change(doc)
        path.write_text(json.dumps(doc))
        with pytest.raises(PlanFileError) as err:
            sw.Plan.load(path, g, d4)
        return str(err.value)

    names_all(edited(lambda doc: doc["ops"].pop("fc")), "ops do not match")
    names_all(edited(lambda doc: doc["ops"].update(extra={"n": 1})), "ops do not match")
    names_all(edited(lambda doc: doc["ops"].update(conv1={"c": 3})), "'conv1'", "does not divide")
    names_all(edited(lambda doc: doc["ops"].update(conv1={"n": 2, "devices": [0, 7]})), "'conv1'", "device")
    names_all(edited(lambda doc: doc["ops"].update(conv1=[1, 2])), "'conv1'", "mapping")
    names_all(edited(lambda doc: doc.update(ops=[])), "ops do not match")
    names_all(edited(lambda doc: doc["cost_model"].pop("sync")), "malformed", "sync")


def test_foreign_plan_files(saved, d4):
    path, _ = saved
    other_graph = small_graph(batch=8)  # same op names, other shapes
    with pytest.raises(PlanFileError) as err:
        sw.Plan.load(path, other_graph, d4)
    names_all(str(err.value), "made for graph 'small'", "fingerprint")
    with pytest.raises(PlanFileError, match="made for graph"):
        sw.Plan.load(path, small_graph(classes=7), d4)  # same names, another fc
    for other_devices in (sw.DeviceGraph.cpu(2), sw.DeviceGraph.cluster(nodes=1, devices_per_node=4),
                          sw.DeviceGraph.cpu(8)):
        with pytest.raises(PlanFileError) as err:
            sw.Plan.load(path, small_graph(), other_devices)
        names_all(str(err.value), "made for device graph 'cpu x4'", "fingerprint")
    slower = sw.DeviceGraph("cpu x4")  # same name, other bandwidth
    for k in range(4):
        slower.add_device(f"cpu{k}", flops=50e9, memory=4e9, mem_bandwidth=10e9)
    for i in range(4):
        for j in range(i + 1, 4):
            slower.add_link(i, j, bandwidth=1e9)
    with pytest.raises(PlanFileError, match="made for device graph"):
        sw.Plan.load(path, small_graph(), slower)


@pytest.mark.parametrize("content", ["1" + "0" * 5000, "[" * 100_000,
                                     '{"format": "shardwise-plan", "version": 1' + "0" * 5000 + "}"],
                         ids=["5000-digit-number", "deep-nesting", "5000-digit-version"])
def test_plan_files_json_limits(tmp_path, g, d4, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PlanFileError):
        sw.Plan.load(path, g, d4)


@pytest.mark.parametrize("field,value", [("bytes_per_element", -4), ("bytes_per_element", 0),
                                         ("backward_factor", "NaN")])
def test_plan_file_with_bad_cost_model(saved, g, d4, field, value):
    path, _ = saved
    doc = json.loads(path.read_text())
    doc["cost_model"][field] = float(value)
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFileError) as err:
        sw.Plan.load(path, g, d4)
    names_all(str(err.value), str(path), "malformed", field)


# Fields of the wrong JSON type with a value that a lenient reader would coerce (issue 12:
# bytes_per_element true loaded as 1.0, "4" as 4.0, version true as 1, a numeric name as a string).
@pytest.mark.parametrize("path,value,words", [
    (("version",), True, ["version True"]),
    (("version",), 1.0, ["version 1.0"]),
    (("cost_model", "bytes_per_element"), True, ["malformed", "bytes_per_element", "True"]),
    (("cost_model", "bytes_per_element"), "4", ["malformed", "bytes_per_element", "'4'"]),
    (("cost_model", "backward_factor"), False, ["malformed", "backward_factor", "False"]),
    (("cost_model", "backward_factor"), "3.0", ["malformed", "backward_factor"]),
    (("cost_model", "bytes_per_element"), 1e400, ["malformed", "bytes_per_element"]),  # Infinity
    (("cost_model",), [], ["malformed", "cost_model must be an object"]),
    (("cost_model", "sync"), ["ring"], ["malformed"]),
    (("name",), 5, ["malformed", "name must be a string"]),
    (("name",), None, ["malformed", "name must be a string"]),
    (("graph", "fingerprint"), 12345, ["malformed", "graph fingerprint must be a string"]),
    (("ops", "conv1", "devices"), "0", ["'conv1'", "bad device list", "expected a list"]),
    (("ops", "conv1", "devices"), {"0": 0}, ["'conv1'", "bad device list", "expected a list"]),
    (("ops", "conv1", "n"), 1.0, ["'conv1'", "positive int"]),
    (("ops", "conv1", "n"), True, ["'conv1'", "positive int"]),
])
def test_plan_file_fields_of_the_wrong_type_are_refused(saved, g, d4, path, value, words):
    file, _ = saved
    doc = json.loads(file.read_text())
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    file.write_text(json.dumps(doc))
    with pytest.raises(PlanFileError) as err:
        sw.Plan.load(file, g, d4)
    names_all(str(err.value), str(file), *words)


def test_from_dict_device_lists_must_be_lists(g):
    """A string of one-letter device names used to be read letter by letter."""
    d = sw.DeviceGraph("letters")
    for name in "abcd":
        d.add_device(name, flops=50e9, memory=4e9, mem_bandwidth=10e9)
    for i in range(4):
        for j in range(i + 1, 4):
            d.add_link(i, j, bandwidth=1e9)
    assert sw.Plan.from_dict(g, d, {"conv1": {"n": 2, "devices": ["a", "b"]}})["conv1"].devices == (0, 1)
    for devices in ("ab", b"ab", {"a": 0, "b": 1}, {"a", "b"}, frozenset("ab")):
        with pytest.raises(ConfigError) as err:
            sw.Plan.from_dict(g, d, {"conv1": {"n": 2, "devices": devices}})
        names_all(str(err.value), "'conv1'", "bad device list", "expected a list")


@settings(max_examples=examples(300))
@given(content=st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode),
                         _json_values().map(lambda v: json.dumps(v).encode())))
def test_random_plan_file_bytes(tmp_path_factory, content):
    g, d = small_graph(), sw.DeviceGraph.cpu(4)
    path = tmp_path_factory.mktemp("plans") / "plan.json"
    path.write_bytes(content)
    with pytest.raises(PlanFileError) as err:
        sw.Plan.load(path, g, d)
    assert str(path) in str(err.value)


def _valid_plan_doc():
    g, d = small_graph(), sw.DeviceGraph.cpu(4)
    return g, d, sw.search(g, d).to_dict()


_GRAPH, _DEVICES, _DOC = _valid_plan_doc()


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for k, v in enumerate(doc):
            yield from _paths(v, prefix + (k,))


_DOC_PATHS = list(_paths(_DOC))[1:]


@settings(max_examples=examples(300))
@given(mutations=st.lists(st.tuples(st.sampled_from(_DOC_PATHS), st.sampled_from(["set", "delete"]),
                                    _json_values()), min_size=1, max_size=3),
       garbage=st.one_of(st.none(), _json_values()))
def test_random_plan_json_dicts(mutations, garbage):
    """Valid plan documents with random fields replaced or deleted, and plain garbage."""
    doc = json.loads(json.dumps(_DOC)) if garbage is None else garbage
    if garbage is None:
        for path, action, value in mutations:
            parent = doc
            try:
                for key in path[:-1]:
                    parent = parent[key]
                if action == "delete" and isinstance(parent, dict):
                    del parent[path[-1]]
                else:
                    parent[path[-1]] = value
            except (KeyError, IndexError, TypeError):
                continue  # an earlier mutation removed this path
    try:
        plan = sw.Plan.from_json_dict(doc, _GRAPH, _DEVICES, "random.json")
    except PlanFileError as exc:
        assert "random.json" in str(exc)
        return
    assert math.isfinite(plan.cost) and plan.cost >= 0


# =========================================================================== raw C entry points

def z(*shape):
    return np.zeros(shape)


@pytest.mark.parametrize("nodes,edges,word", [
    ([], [], "between 1 and"),
    ([z(2), z(3)], [(0, 1, z(3, 2))], "must be 2 x 3"),
    ([z(2), z(3)], [(0, 1, z(2))], "2-D"),
    ([z(2), z(3)], [(1, 0, z(3, 2))], "src < dst"),
    ([z(2), z(3)], [(0, 0, z(2, 2))], "src < dst"),
    ([z(2), z(3)], [(-1, 1, z(2, 3))], "src < dst"),
    ([z(2), z(3)], [(0, 2, z(2, 2))], "src < dst"),
    ([z(2), z(0)], [], "at least one configuration"),
    ([z(2, 2)], [], "1-D"),
    ([np.array(["a", "b"])], [], "float64"),
    ([z(2), z(2)], [(0, 1, "table")], "2-D"),
    ([np.array([0.0, np.nan]), z(2)], [(0, 1, z(2, 2))], "node 0: costs must not be NaN"),
    ([z(2), z(2)], [(0, 1, np.array([[0.0, 1.0], [np.nan, 2.0]]))], "edge 0: costs must not be NaN"),
])
def test_search_tables_bad_arrays(nodes, edges, word):
    for algorithm in ("elimination", "exhaustive"):
        with pytest.raises(ValueError, match=word):
            _core.search_tables(nodes, edges, algorithm)


def test_search_tables_bad_arguments():
    with pytest.raises(ValueError, match="unknown search algorithm 'bfs'"):
        _core.search_tables([z(2)], [], "bfs")
    with pytest.raises(TypeError):
        _core.search_tables(5, [])
    with pytest.raises(TypeError):
        _core.search_tables([z(2), z(2)], [(0, 1)])
    with pytest.raises((ValueError, OverflowError)):
        _core.search_tables([z(2), z(2)], [(0, 2**40, z(2, 2))])


def test_search_tables_edge_as_list():
    with pytest.raises((TypeError, ValueError)):
        _core.search_tables([z(2), z(2)], [[0, 1, z(2, 2)]])


def test_search_tables_nan_and_inf_costs():
    nan = np.array([math.nan, 1.0])
    for algorithm in ("elimination", "exhaustive"):
        for nodes, edges in (
            ([nan, np.array([1.0, math.nan])], [(0, 1, np.full((2, 2), math.nan))]),
            ([nan, nan], [(0, 1, np.array([[0.0, math.nan], [math.inf, 1.0]]))]),
            ([np.array([math.inf, 1.0])], []),
            ([np.array([-math.inf, math.inf])], []),
            ([np.array([math.inf, math.inf]), z(2)], [(0, 1, np.full((2, 2), -math.inf))]),
        ):
            try:
                choice, cost, _ = _core.search_tables(nodes, edges, algorithm)
            except ValueError:
                continue
            assert choice.shape == (len(nodes),)
            assert all(0 <= k < len(c) for k, c in zip(choice, nodes))
            assert isinstance(cost, float)


def test_search_tables_non_contiguous_and_int_arrays():
    big = np.arange(16.0).reshape(4, 4)
    choice, cost, _ = _core.search_tables([np.array([0.0, 1.0]), np.array([0, 2])], [(0, 1, big[::2, ::2])])
    assert cost == 0.0 and list(choice) == [0, 0]


@settings(max_examples=examples(200))
@given(data=st.data())
def test_search_tables_random_shapes(data):
    """Random, often mismatched, shapes: a result or ValueError, nothing else."""
    n = data.draw(st.integers(0, 5))
    elems = st.floats(allow_nan=True, allow_infinity=True, width=64)
    nodes = [data.draw(hnp.arrays(np.float64, st.integers(0, 3), elements=elems)) for _ in range(n)]
    edges = []
    for _ in range(data.draw(st.integers(0, 5))):
        src = data.draw(st.integers(-1, 5))
        dst = data.draw(st.integers(-1, 5))
        shape = data.draw(st.tuples(st.integers(0, 3), st.integers(0, 3)) | st.tuples(st.integers(0, 3)))
        edges.append((src, dst, data.draw(hnp.arrays(np.float64, shape, elements=elems))))
    algorithm = data.draw(st.sampled_from(["elimination", "exhaustive"]))
    try:
        choice, cost, stats = _core.search_tables(nodes, edges, algorithm)
    except ValueError as exc:
        assert str(exc)
        return
    assert choice.shape == (n,) and isinstance(cost, float) and stats["residual_nodes"] <= n


# ----- Problem blobs

_G = sw.models.lenet5(batch=4)
_BLOB, _FLOPS = encode_graph(_G)
_DEV = device_arrays(sw.DeviceGraph.cpu(4))


def test_problem_truncated_and_padded_blobs():
    _core.Problem(_BLOB, _FLOPS, *_DEV)  # the real one decodes
    for cut in (1, 2, 5, len(_BLOB) // 2, len(_BLOB) - 1):
        with pytest.raises(ValueError, match="ends early|outside|must"):
            _core.Problem(_BLOB[:cut], _FLOPS, *_DEV)
    with pytest.raises(ValueError, match="trailing words"):
        _core.Problem(np.concatenate([_BLOB, [0, 0]]), _FLOPS, *_DEV)
    with pytest.raises(ValueError, match="non-empty"):
        _core.Problem(np.zeros(0, dtype=np.int64), _FLOPS, *_DEV)
    with pytest.raises(ValueError, match="one row per op"):
        _core.Problem(_BLOB, _FLOPS[:-1], *_DEV)
    with pytest.raises(ValueError, match="two columns"):
        _core.Problem(_BLOB, np.zeros((len(_G), 3)), *_DEV)
    with pytest.raises(ValueError, match="FLOP counts"):
        _core.Problem(_BLOB, np.full_like(_FLOPS, math.nan), *_DEV)
    flops, membw, bw = _DEV
    with pytest.raises(ValueError, match="disagree"):
        _core.Problem(_BLOB, _FLOPS, flops[:3], membw, bw)
    with pytest.raises(ValueError, match="route"):
        _core.Problem(_BLOB, _FLOPS, flops, membw, np.zeros_like(bw))
    with pytest.raises(ValueError, match="FLOP/s"):
        _core.Problem(_BLOB, _FLOPS, -flops, membw, bw)
    with pytest.raises(ValueError, match="blob"):
        _core.Problem("blob", _FLOPS, *_DEV)


@settings(max_examples=examples(300))
@given(words=hnp.arrays(np.int64, st.integers(1, 60),
                        elements=st.one_of(st.integers(-3, 12), st.sampled_from([2**31, -2**31, 2**62, -2**63,
                                                                                 2**63 - 1, 1 << 20, 1 << 40]))),
       nops=st.integers(1, 3))
def test_problem_random_blobs(words, nops):
    words[0] = nops
    try:
        p = _core.Problem(words, np.ones((nops, 2)), *_DEV)
    except ValueError as exc:
        assert str(exc)
        return
    _exercise(p)


def _exercise(p):
    """A decoded problem must enumerate, cost and search without crashing."""
    try:
        p.enumerate(np.array([1, 2, 4], dtype=np.int32))
        p.build_tables(with_bytes=True)
        p.search("elimination", 1e6)
    except (ValueError, RuntimeError, MemoryError) as exc:
        assert str(exc)


@settings(max_examples=examples(300))
@given(changes=st.lists(st.tuples(st.integers(0, len(_BLOB) - 1),
                                  st.one_of(st.integers(-3, 70), st.sampled_from([2**31, -2**63, 2**62,
                                                                                  1 << 20, 1 << 40]),
                                            st.integers(-2, 2).map(lambda k: ("delta", k)))),
                        min_size=1, max_size=3))
def test_problem_mutated_blobs(changes):
    blob = _BLOB.copy()
    for i, v in changes:
        blob[i] = blob[i] + v[1] if isinstance(v, tuple) else v
    note(f"changes {changes}")
    try:
        p = _core.Problem(blob, _FLOPS, *_DEV)
    except ValueError as exc:
        assert str(exc)
        return
    _exercise(p)


def test_problem_methods_reject_bad_arguments():
    p = _core.Problem(_BLOB, _FLOPS, *_DEV)
    with pytest.raises(RuntimeError, match="build_tables first"):
        p.search()
    with pytest.raises(ValueError, match="no configurations"):
        p.build_tables()
    with pytest.raises(ValueError, match="worker count 0"):
        p.enumerate(np.array([0], dtype=np.int32))
    with pytest.raises(ValueError, match="worker count 5"):
        p.enumerate(np.array([1, 5], dtype=np.int32))
    with pytest.raises(ValueError, match="no worker counts"):
        p.enumerate(np.array([], dtype=np.int32))
    with pytest.raises(IndexError, match="op index"):
        p.configs(99)
    deg = np.ones((1, _core.MAX_RANK), dtype=np.int32)
    with pytest.raises(ValueError, match="distinct devices"):
        p.set_configs(1, deg, np.array([[7]], dtype=np.int32))
    deg[0, 1] = 7
    with pytest.raises(ValueError, match="does not divide"):
        p.set_configs(1, deg, np.array([[0, 1, 2, 3, 4, 5, 6]], dtype=np.int32))
    with pytest.raises(ValueError, match="degrees must be"):
        p.set_configs(1, np.ones((1, 2), dtype=np.int32), np.zeros((1, 1), dtype=np.int32))
    p.enumerate(np.array([1, 2, 4], dtype=np.int32))
    p.build_tables()
    with pytest.raises(ValueError, match="unknown search algorithm"):
        p.search("magic")
    with pytest.raises(IndexError, match="edge index"):
        p.edge_table(10_000)
    with pytest.raises(ValueError, match="finite and non-negative"):
        p.set_compute_times(1, np.full(len(p.configs(1)[0]), math.nan))
    with pytest.raises(ValueError, match="configurations"):
        p.set_compute_times(1, np.zeros(1_000))
    with pytest.raises(ValueError, match="unknown sync model"):
        p.set_options(7)
    with pytest.raises(ValueError, match="positive"):
        p.set_options(0, -1.0, 3.0)


def test_copy_configs_rejects_other_problems_and_rows():
    p = _core.Problem(_BLOB, _FLOPS, *_DEV)
    p.enumerate(np.array([1, 2, 4], dtype=np.int32))
    q = _core.Problem(_BLOB, _FLOPS, *_DEV)
    q.enumerate(np.array([1], dtype=np.int32))
    with pytest.raises(TypeError, match="must be a Problem"):
        q.copy_configs(1, "p", np.array([0]))
    with pytest.raises(IndexError, match="out of range"):
        q.copy_configs(1, p, np.array([len(p.workers(1))]))
    with pytest.raises(ValueError, match="list the configurations"):
        q.copy_configs(1, p, None)
    with pytest.raises(ValueError, match="at least one"):
        q.copy_configs(1, p, np.zeros(0, np.int64))
    with pytest.raises(IndexError, match="op index"):
        q.copy_configs(99, p, np.array([0]))
    fewer = _core.Problem(_BLOB, _FLOPS, *device_arrays(sw.DeviceGraph.cpu(2)))
    with pytest.raises(ValueError, match="one graph and machine"):
        fewer.copy_configs(1, p, np.array([0]))
    rows = np.array([len(p.workers(1)) - 1, 0], np.int64)
    q.copy_configs(1, p, rows)   # the rows as they are there, in this order
    for got, want in zip(q.configs(1), p.configs(1, rows)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(q.reductions(1), p.reductions(1)[rows])
    p.copy_configs(1, p, rows)   # from itself: its own pool grows under the copy
    for got, want in zip(p.configs(1), q.configs(1)):
        np.testing.assert_array_equal(got, want)


# ----- a Problem used from two threads (issue 12): re-initialising it under a running search freed
# the memory the search was reading

def _searching_problem():
    """A problem whose elimination search takes a good fraction of a second (resnet152, 24 devices),
    its tables built, and the arrays to re-initialise another (small) problem with."""
    from shardwise.planning.problem import make_problem, worker_counts

    g, d = sw.models.resnet152(batch=64), sw.DeviceGraph.cpu(24)
    p = make_problem(g, d, sw.CostOptions(threads=1))
    p.enumerate(np.asarray(worker_counts(len(d)), dtype=np.int32))
    p.build_tables()
    return p


def test_problem_refuses_reinitialisation_while_another_thread_searches():
    import threading

    for attempt in range(3):
        p = _searching_problem()
        box: dict = {}

        def search():
            try:
                box["result"] = p.search("elimination", 1e8)
            except BaseException as exc:  # reported by the main thread
                box["error"] = exc

        worker = threading.Thread(target=search)
        worker.start()
        seen_busy = False
        while worker.is_alive() and not seen_busy:
            try:
                p.nops  # refuses while the search holds the problem
            except RuntimeError as exc:
                assert "in use by another thread" in str(exc)
                seen_busy = True
        refused = None
        if seen_busy:
            try:
                p.__init__(_BLOB, _FLOPS, *_DEV)
            except RuntimeError as exc:
                refused = exc
        worker.join()
        assert "error" not in box, box.get("error")
        if refused is None:
            # the search ended before we could see it running, or between our look and __init__
            # (both rare on a search this long): only then may __init__ go through; try again
            continue
        assert "re-initialise" in str(refused) and "another thread" in str(refused)
        choice, cost, stats = box["result"]
        assert p.nops == len(sw.models.resnet152(batch=64).ops)  # still the problem the search used
        want_choice, want_cost, _ = p.search("elimination", 1e8)  # the same search, run alone
        np.testing.assert_array_equal(choice, want_choice)
        assert cost == want_cost
        return
    pytest.fail("never caught the search running in 3 tries")


def test_problem_reinitialisation_when_idle_replaces_or_keeps_it_whole():
    p = _core.Problem(_BLOB, _FLOPS, *_DEV)
    assert p.nops == len(_G.ops)
    small = sw.Graph("one conv")
    small.conv2d(small.input("x", (4, 3, 8, 8)), 4, name="c")
    blob, flops = encode_graph(small)
    p.__init__(blob, flops, *_DEV)  # a second __init__ when nobody uses it: replaces the problem
    assert p.nops == len(small.ops)
    with pytest.raises(ValueError):
        p.__init__(blob[:3], flops, *_DEV)  # a failed re-initialisation keeps the old problem
    assert p.nops == len(small.ops)
    p.enumerate(np.array([1, 2], dtype=np.int32))
    p.build_tables()
    assert math.isfinite(p.search()[1])


def test_problem_argument_conversion_cannot_reinitialise_it():
    """Python code run while a method converts its arguments (here __index__) must not be able
    to replace the problem the method holds pointers into."""
    p = _core.Problem(_BLOB, _FLOPS, *_DEV)
    p.enumerate(np.array([1, 2], dtype=np.int32))
    errors = []

    class Sneaky:
        def __index__(self):
            try:
                p.__init__(_BLOB[:0], _FLOPS, *_DEV)
            except (RuntimeError, ValueError) as exc:
                errors.append(exc)
            return 0

    nvars = _G.ops[1].desc.nvars  # conv1: output dims and reductions
    p.iteration_region(1, 0, [Sneaky()] + [0] * (nvars - 1), [1] * nvars)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
    assert p.nops == len(_G.ops)
