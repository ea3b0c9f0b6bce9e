"""Device graphs at scale (issue 16, point 5).

* device counts are refused where a device graph is built, at once and naming the limit;
* the presets' route bandwidths come from their structure (no list of D * (D - 1) links,
  no search over every pair) and equal the widest routes computed by Floyd-Warshall over
  the same links written out by hand;
* hand-made graphs whose links all run both ways get their widest routes by Kruskal's
  merging, equal to Floyd-Warshall on random graphs;
* a preset changed by hand becomes an ordinary graph whose routes see the change.
"""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise as sw

from strategies_random import examples


def widest_floyd_warshall(n: int, links: dict[tuple[int, int], float]) -> np.ndarray:
    """Widest-route bandwidths by Floyd-Warshall on (max, min): a device k joins the routes
    through it when going a -> k -> b beats the best so far, O(D^3)."""
    bw = np.zeros((n, n))
    for (i, j), b in links.items():
        bw[i, j] = max(bw[i, j], b)
    np.fill_diagonal(bw, np.inf)
    for k in range(n):
        bw = np.maximum(bw, np.minimum(bw[:, k:k + 1], bw[k:k + 1, :]))
    return bw


def widest_by_hand(d: sw.DeviceGraph) -> np.ndarray:
    """Floyd-Warshall over every link of ``d``, the reference."""
    return widest_floyd_warshall(len(d), d.links)


# =========================================================================== device counts

TOO_MANY = [
    (lambda: sw.DeviceGraph.cpu(5000), 5000),
    (lambda: sw.DeviceGraph.cpu(10**6), 10**6),
    (lambda: sw.DeviceGraph.cpu(10**18), 10**18),
    (lambda: sw.DeviceGraph.cluster(nodes=65, devices_per_node=64), 4160),
    (lambda: sw.DeviceGraph.cluster(nodes=10**6, devices_per_node=10**6, device="V100"), 10**12),
    (lambda: sw.DeviceGraph.parse("4097"), 4097),
    (lambda: sw.DeviceGraph.parse("1000x1000", device="K80"), 10**6),
]


def refuse(build) -> tuple[str, float]:
    """(the DeviceGraphError's text, seconds to refuse) for building ``build``."""
    start = time.perf_counter()
    with pytest.raises(sw.DeviceGraphError) as err:
        build()
    return str(err.value), time.perf_counter() - start


@pytest.mark.parametrize("build,count", TOO_MANY)
def test_too_many_devices_refused(build, count):
    text, _ = refuse(build)
    assert str(count) in text and str(sw.MAX_DEVICES) in text and "MAX_DEVICES" in text


def test_largest_device_graphs_build():
    assert sw.MAX_DEVICES == sw._core.MAX_DEVICES == 4096
    d = sw.DeviceGraph.cpu(sw.MAX_DEVICES)
    assert len(d) == sw.MAX_DEVICES
    r = d.route_bandwidths()
    assert r.shape == (4096, 4096) and r[0, 4095] == sw.machine.devices.DEVICE_PRESETS["cpu"].intra_bandwidth
    assert d._link_dict == {}, "a preset's 16.8 million links must not be listed to route between them"
    with pytest.raises(sw.DeviceGraphError, match="at most 4096"):
        d.add_device("one-more", flops=1e12, memory=1e9)
    assert len(d) == sw.MAX_DEVICES
    c = sw.DeviceGraph.cluster(nodes=64, devices_per_node=64)
    assert len(c) == 4096 and c.route_bandwidths()[0, 64] == sw.machine.devices.INFINIBAND_EDR


def test_hand_made_graph_limit():
    d = sw.DeviceGraph("many")
    for k in range(sw.MAX_DEVICES):
        d.add_device(f"d{k}", flops=1e12, memory=1e9)
    with pytest.raises(sw.DeviceGraphError) as err:
        d.add_device("last straw", flops=1e12, memory=1e9)
    assert "4097" in str(err.value) and "last straw" in str(err.value)


# =========================================================================== route bandwidths

@pytest.mark.parametrize("build", [
    lambda: sw.DeviceGraph.cluster(nodes=3, devices_per_node=4),
    lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=3, device="K80", inter_bandwidth=1e9),
    lambda: sw.DeviceGraph.cluster(nodes=5, devices_per_node=1, device="V100"),
    lambda: sw.DeviceGraph.cluster(nodes=1, devices_per_node=1),
    lambda: sw.DeviceGraph.cpu(7),
    lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=2, intra_bandwidth=5e9, inter_bandwidth=8e9),
])
def test_preset_routes_equal_floyd_warshall(build):
    d = build()
    fast = d.route_bandwidths()
    assert d._link_dict == {}
    ref = widest_by_hand(d)   # lists the links
    np.testing.assert_array_equal(fast, ref)
    # each pair of devices of a preset is linked; the route is that link unless a detour
    # through another node is wider (links inside a node slower than between nodes)
    for a, b in itertools.permutations(range(len(d)), 2):
        route = d.route(a, b)
        assert min(d.links[link] for link in route) == fast[a, b]
        assert route == [(a, b)] or d.links[(a, b)] < fast[a, b]


def test_preset_changed_by_hand_sees_the_change():
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=2)
    before = d.fingerprint()
    d.route_bandwidths()
    d.add_link(0, 3, bandwidth=99e9)          # a fast link across the nodes
    r = d.route_bandwidths()
    assert r[0, 3] == 99e9 and r[3, 0] == 99e9
    # 1 -> 0 -> 3 -> 2 is wider than the direct 12.5 GB/s link between the nodes
    assert r[1, 2] == 20e9
    np.testing.assert_array_equal(r, widest_by_hand(d))
    assert d.fingerprint() != before
    e = sw.DeviceGraph.cpu(2)
    e.add_device("late", flops=1e12, memory=1e9)
    with pytest.raises(sw.DeviceGraphError, match="no route from device 'cpu0' to 'late'"):
        e.route_bandwidths()
    e.add_link("late", "cpu1", bandwidth=1e9)
    assert e.route_bandwidths()[0, 2] == 1e9


@st.composite
def symmetric_graphs(draw) -> sw.DeviceGraph:
    n = draw(st.integers(1, 9))
    d = sw.DeviceGraph("sym")
    for k in range(n):
        d.add_device(f"d{k}", flops=1e12, memory=1e9)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for i, j in draw(st.lists(st.sampled_from(pairs), max_size=20)) if pairs else []:
        d.add_link(i, j, bandwidth=draw(st.sampled_from([1e9, 2e9, 5e9]) | st.floats(1e8, 1e11)))
    return d


@settings(max_examples=examples(200))
@given(d=symmetric_graphs())
def test_kruskal_routes_equal_floyd_warshall(d):
    ref = widest_by_hand(d)
    if (ref <= 0).any():
        with pytest.raises(sw.DeviceGraphError, match="no route"):
            d.route_bandwidths()
        return
    np.testing.assert_array_equal(d.route_bandwidths(), ref)


@pytest.mark.calibration
@pytest.mark.parametrize("build,count", TOO_MANY)
def test_too_many_devices_refused_at_once(build, count):
    _, seconds = refuse(build)
    assert seconds < 0.5, "the count must be checked before anything is built"


@pytest.mark.calibration
def test_presets_at_1024_devices_are_quick():
    """64 x 16 V100: routes from the nodes (the old Floyd-Warshall over a million links took
    seconds)."""
    start = time.perf_counter()
    sw.DeviceGraph.cluster(nodes=64, devices_per_node=16, device="V100").route_bandwidths()
    assert time.perf_counter() - start < 1.0


def test_presets_at_1024_devices_list_no_links():
    """64 x 16 V100: routes come from the nodes; the million links are never listed."""
    d = sw.DeviceGraph.cluster(nodes=64, devices_per_node=16, device="V100")
    r = d.route_bandwidths()
    assert d._link_dict == {}
    assert r[15, 16] == sw.machine.devices.INFINIBAND_EDR and r[16, 31] == 25e9
    assert "1047552 directed links" in d.summary()
