"""Routes between devices (csrc/core/routes.c, DeviceGraph.route, the simulator's resource table).

The rule: a transfer takes a widest route (its slowest link as fast as any path's); among those,
one of the fewest links; among those, the one whose device sequence is smallest in number order
(where two links join the same devices, the lowest-numbered one that is wide enough).  The
reference enumerates every simple path of small random machines and picks by that rule; the
bandwidths are checked against Floyd-Warshall on (max, min).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise as sw
from shardwise import _core

from strategies_random import examples


def best_by_enumeration(n: int, links: list[tuple[int, int, float]], a: int, b: int):
    """(width, link ids) of the route a -> b by the rule, from every simple path (None: no path)."""
    best = None

    def walk(u: int, seen: list[int], used: list[int], width: float) -> None:
        nonlocal best
        if u == b:
            key = (-width, len(used), seen, used)
            if best is None or key < best:
                best = (key[0], key[1], list(seen), list(used))
            return
        for k, (s, d, w) in enumerate(links):
            if s == u and d not in seen:
                walk(d, seen + [d], used + [k], min(width, w))

    walk(a, [a], [], float("inf"))
    return None if best is None else (-best[0], best[3])


def floyd_warshall(n: int, links: list[tuple[int, int, float]]) -> np.ndarray:
    bw = np.zeros((n, n))
    for s, d, w in links:
        bw[s, d] = max(bw[s, d], w)
    np.fill_diagonal(bw, np.inf)
    for k in range(n):
        bw = np.maximum(bw, np.minimum(bw[:, k:k + 1], bw[k:k + 1, :]))
    return bw


def as_arrays(links):
    src = np.array([s for s, _, _ in links], np.int32)
    dst = np.array([d for _, d, _ in links], np.int32)
    bw = np.array([w for _, _, w in links], np.float64)
    return src, dst, bw


# few bandwidths, so that ties of width (and of hops) are common
BANDWIDTHS = st.sampled_from([1e9, 2e9, 5e9]) | st.floats(1e8, 1e11)


@st.composite
def link_lists(draw, max_devices: int = 6, max_links: int = 14):
    """(n, links): directed links, two links possibly joining the same devices, any order."""
    n = draw(st.integers(1, max_devices))
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    if not pairs:
        return n, []
    ends = draw(st.lists(st.sampled_from(pairs), max_size=max_links))
    return n, [(i, j, draw(BANDWIDTHS)) for i, j in ends]


# =========================================================================== the C searches

@settings(max_examples=examples(300), deadline=None)
@given(case=link_lists())
def test_routes_are_the_rules_best_path(case):
    n, links = case
    src, dst, bw = as_arrays(links)
    pairs = [(a, b) for a in range(n) for b in range(n)]
    ps = np.array([a for a, _ in pairs], np.int32)
    pd = np.array([b for _, b in pairs], np.int32)
    ptr, got, width = _core.widest_routes(n, src, dst, bw, ps, pd)
    assert ptr.shape == (len(pairs) + 1,) and ptr[0] == 0 and ptr[-1] == len(got)
    for i, (a, b) in enumerate(pairs):
        route = got[ptr[i]:ptr[i + 1]].tolist()
        if a == b:
            assert route == [] and width[i] == np.inf
            continue
        want = best_by_enumeration(n, links, a, b)
        if want is None:
            assert route == [] and width[i] == 0
            continue
        # a path a -> b, as wide and as short as the best, and the rule's one
        assert [links[k][0] for k in route][0] == a and links[route[-1]][1] == b
        assert all(links[k][1] == links[m][0] for k, m in zip(route, route[1:]))
        assert min(links[k][2] for k in route) == width[i] == want[0]
        assert len(route) == len(want[1])
        assert route == want[1]


@settings(max_examples=examples(200), deadline=None)
@given(case=link_lists(max_devices=8, max_links=24))
def test_bandwidths_equal_floyd_warshall(case):
    n, links = case
    src, dst, bw = as_arrays(links)
    got = _core.widest_bandwidths(n, src, dst, bw, np.arange(n, dtype=np.int32))
    np.testing.assert_array_equal(got, floyd_warshall(n, links))
    some = np.array([n - 1, 0, n - 1], np.int32)   # any sources, repeated, in any order
    np.testing.assert_array_equal(_core.widest_bandwidths(n, src, dst, bw, some), got[some])


def test_route_order_of_links_does_not_matter():
    """Shuffling the link list renumbers the links but picks the same devices."""
    rng = np.random.default_rng(7)
    n = 9
    links = [(i, j, float(rng.choice([1.0, 2.0, 3.0]))) for i in range(n) for j in range(n)
             if i != j and rng.random() < 0.4]
    order = rng.permutation(len(links))
    shuffled = [links[k] for k in order]
    ps, pd = (np.array(x, np.int32) for x in zip(*itertools.permutations(range(n), 2)))
    p1, r1, w1 = _core.widest_routes(n, *as_arrays(links), ps, pd)
    p2, r2, w2 = _core.widest_routes(n, *as_arrays(shuffled), ps, pd)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(w1, w2)
    assert [links[k][:2] for k in r1] == [shuffled[k][:2] for k in r2]


def test_fewest_hops_need_not_extend_the_route_to_the_last_device_before():
    """The widest route to device 1 is the long wide one (0 3 4 1, 10 GB/s), but past the
    3 GB/s link 1 -> 2 every route is 3 GB/s wide, and the short one (0 1 2) has fewest links.
    A search that keeps one (width, hops) label per device extends 0 3 4 1 instead."""
    d = sw.DeviceGraph("detour")
    for k in range(5):
        d.add_device(f"d{k}", flops=1e12, memory=1e9)
    d.add_link(0, 3, bandwidth=10e9)
    d.add_link(3, 4, bandwidth=10e9)
    d.add_link(4, 1, bandwidth=10e9)
    d.add_link(0, 1, bandwidth=5e9)
    d.add_link(1, 2, bandwidth=3e9)
    assert d.route(0, 1) == [(0, 3), (3, 4), (4, 1)]
    assert d.route(0, 2) == [(0, 1), (1, 2)]
    assert d.route(2, 0) == [(2, 1), (1, 0)]
    assert d.route("d2", "d4") == [(2, 1), (1, 4)]
    assert d.route_bandwidths()[0, 2] == 3e9


# =========================================================================== DeviceGraph.route

@st.composite
def device_graphs(draw, symmetric: bool):
    n, links = draw(link_lists(max_devices=6, max_links=12))
    d = sw.DeviceGraph("sym" if symmetric else "directed")
    for k in range(n):
        d.add_device(f"d{k}", flops=1e12, memory=1e9)
    for i, j, w in links:
        d.add_link(i, j, bandwidth=w, bidirectional=symmetric)
    return d


@settings(max_examples=examples(150), deadline=None)
@given(d=st.booleans().flatmap(lambda sym: device_graphs(sym)))
def test_device_graph_routes_follow_the_rule(d):
    n = len(d)
    links = [(i, j, w) for (i, j), w in d.links.items()]
    ref = floyd_warshall(n, links)
    if (ref <= 0).any():   # some pair has no route: both calls say which devices
        with pytest.raises(sw.DeviceGraphError, match=r"no route from device 'd\d' to 'd\d'"):
            d.route_bandwidths()
        with pytest.raises(sw.DeviceGraphError, match="no route from device"):
            d.route(0, n - 1)
        return
    np.testing.assert_array_equal(d.route_bandwidths(), ref)
    for a, b in itertools.permutations(range(n), 2):
        want = best_by_enumeration(n, links, a, b)
        assert d.route(a, b) == [links[k][:2] for k in want[1]], (a, b)


def test_route_of_a_device_to_itself_is_empty_and_names_are_checked():
    d = sw.DeviceGraph.cpu(3)
    assert d.route(1, 1) == [] and d.route("cpu0", 2) == [(0, 2)]
    with pytest.raises(sw.DeviceGraphError, match="no device named 'gpu9'"):
        d.route("gpu9", 0)
    with pytest.raises(sw.DeviceGraphError, match="unknown device 7"):
        d.route(0, 7)


def test_routes_follow_links_added_later():
    d = sw.DeviceGraph("chain")
    for k in range(4):
        d.add_device(f"g{k}", flops=1e12, memory=1e9)
    for k in range(3):
        d.add_link(k, k + 1, bandwidth=1e9)
    assert d.route(0, 3) == [(0, 1), (1, 2), (2, 3)]
    d.add_link(0, 3, bandwidth=1e9)
    assert d.route(0, 3) == [(0, 3)]
    d.add_link(0, 2, bandwidth=5e9)
    d.add_link(2, 3, bandwidth=5e9)
    assert d.route(0, 3) == [(0, 2), (2, 3)]


# =========================================================================== the simulator's table

def test_resource_table_lists_each_pairs_route_by_link_number():
    from shardwise.iteration.sim_costs import _routed_machine

    d = sw.DeviceGraph("ring")
    for k in range(5):
        d.add_device(f"g{k}", flops=1e12, memory=1e9)
    for k in range(5):
        d.add_link(k, (k + 1) % 5, bandwidth=(1 + k) * 1e9, bidirectional=False)
    m = _routed_machine(d, 0, np.array([[0, 3], [4, 2], [2, 2]]))
    src, dst, _ = d._link_table()
    assert m.nres == 5 + len(src)   # devices, then every link
    names = lambda a, b: [m.name(int(r)) for r in m.route_res[m.route_ptr[a * 5 + b]:m.route_ptr[a * 5 + b + 1]]]
    assert names(0, 3) == ["link 0->1", "link 1->2", "link 2->3"]
    assert names(4, 2) == ["link 4->0", "link 0->1", "link 1->2"]
    assert all(names(a, b) == [] for a in range(5) for b in range(5) if (a, b) not in ((0, 3), (4, 2)))
    assert [m.name(r) for r in range(5, m.nres)] == [f"link {u}->{v}" for u, v in zip(src, dst)]


def test_resource_table_names_the_unroutable_pair():
    from shardwise.iteration.sim_costs import _routed_machine

    d = sw.DeviceGraph("split")
    for k in range(4):
        d.add_device(f"g{k}", flops=1e12, memory=1e9)
    d.add_link(0, 1, bandwidth=1e9)
    d.add_link(2, 3, bandwidth=1e9)
    assert _routed_machine(d, 0, np.array([[0, 1], [3, 2]])).route_res.size == 2
    with pytest.raises(sw.DeviceGraphError, match="no route from device 'g1' to 'g2'"):
        _routed_machine(d, 0, np.array([[0, 1], [1, 2]]))


def test_cluster_changed_by_hand_keeps_its_adapters():
    """A cluster with a link added by hand is routed pair by pair, but its transfers between
    nodes still hold the nodes' network adapters, not links."""
    from shardwise.iteration.sim_costs import _routed_machine

    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=2)
    d.add_link(0, 1, bandwidth=1e9)   # slower than NVLink: 0 -> 1 now goes through the other node
    m = _routed_machine(d, 0)
    names = lambda a, b: [m.name(int(r)) for r in m.route_res[m.route_ptr[a * 4 + b]:m.route_ptr[a * 4 + b + 1]]]
    assert names(0, 2) == ["nic 0 out", "nic 1 in"] and names(3, 1) == ["nic 1 out", "nic 0 in"]
    assert names(2, 3) == ["link 2->3"]
    assert d.route(0, 1) == [(0, 2), (2, 1)] and names(0, 1) == ["link 0->2", "link 2->1"]


# =========================================================================== bad input

GOOD = (3, np.array([0, 1], np.int32), np.array([1, 2], np.int32), np.array([1.0, 2.0]))


@pytest.mark.parametrize("args,match", [
    ((-1,) + GOOD[1:], "ndev"),
    ((5000,) + GOOD[1:], "ndev"),
    ((3, np.array([0, 1], np.int32), np.array([1], np.int32), GOOD[3]), "one length"),
    ((3, np.array([0, 3], np.int32), GOOD[2], GOOD[3]), "link 1 joins devices 3 and 2"),
    ((3, np.array([0, -1], np.int32), GOOD[2], GOOD[3]), "link 1 joins"),
    ((3, np.array([0, 2], np.int32), GOOD[2], GOOD[3]), "two different devices"),
    ((3, GOOD[1], GOOD[2], np.array([1.0, np.nan])), "bandwidth nan"),
    ((3, GOOD[1], GOOD[2], np.array([1.0, np.inf])), "positive and finite"),
    ((3, GOOD[1], GOOD[2], np.array([0.0, 1.0])), "positive and finite"),
    ((3, GOOD[1], GOOD[2], np.array([-1.0, 1.0])), "positive and finite"),
    ((3, GOOD[1].astype(np.float64), GOOD[2], GOOD[3]), "src must be"),
    ((3, GOOD[1].reshape(2, 1), GOOD[2], GOOD[3]), "src must be"),
    ((3, "links", GOOD[2], GOOD[3]), "src must be"),
])
def test_bad_links_raise(args, match):
    with pytest.raises(ValueError, match=match):
        _core.widest_routes(*args, np.array([0], np.int32), np.array([2], np.int32))
    with pytest.raises(ValueError, match=match):
        _core.widest_bandwidths(*args, np.array([0], np.int32))


@pytest.mark.parametrize("ps,pd,match", [
    ([0, 3], [1, 1], "pair 1 is 3 -> 1"),
    ([0], [-2], "pair 0 is 0 -> -2"),
    ([0, 1], [1], "one length"),
])
def test_bad_pairs_raise(ps, pd, match):
    with pytest.raises(ValueError, match=match):
        _core.widest_routes(*GOOD, np.array(ps, np.int32), np.array(pd, np.int32))


def test_bad_sources_raise():
    with pytest.raises(ValueError, match="source 1 is device 3"):
        _core.widest_bandwidths(*GOOD, np.array([0, 3], np.int32))
    with pytest.raises(TypeError):
        _core.widest_bandwidths(*GOOD)


def test_no_devices_no_links_no_pairs():
    none = np.zeros(0, np.int32)
    ptr, links, width = _core.widest_routes(0, none, none, np.zeros(0), none, none)
    assert ptr.tolist() == [0] and links.size == 0 and width.size == 0
    assert _core.widest_bandwidths(0, none, none, np.zeros(0), none).shape == (0, 0)
    ptr, links, width = _core.widest_routes(2, none, none, np.zeros(0), np.array([0, 1], np.int32),
                                            np.array([1, 1], np.int32))
    assert ptr.tolist() == [0, 0, 0] and width.tolist() == [0.0, np.inf]


# =========================================================================== scale

@pytest.mark.slow
def test_parameter_server_over_a_chain_of_4096_devices():
    """Data parallelism of LeNet-5 over a chain of 4,096 devices synchronizes through a
    parameter server on device 0: every worker's transfers run |k| links, 17 million in all,
    listed for the task graph's pairs only (every pair's would be 22.9 billion)."""
    from shardwise.iteration.lower import lowered
    from shardwise.iteration.sim_costs import _machine, _transfer_pairs

    n = sw.MAX_DEVICES
    d = sw.DeviceGraph("chain")
    for k in range(n):
        d.add_device(f"g{k}", flops=1e12, memory=16e9)
    for k in range(n - 1):
        d.add_link(k, k + 1, bandwidth=1e10)
    plan = sw.strategies.data_parallel(sw.models.lenet5(batch=n), d)
    handle = lowered(plan)
    pairs = _transfer_pairs(handle)
    assert {0} == set(pairs.min(axis=1).tolist())   # every transfer to or from the server
    m = _machine(d, handle)
    assert len(m.route_res) == int(np.abs(pairs[:, 0] - pairs[:, 1]).sum()) > 16_000_000
    assert sw.simulate(plan, check_memory=False).iteration_time > 0
