"""Transfer tables filled as scaled copies of one another (cost.c, cost_placed.c).

Where every coordinate two tables read (the producer's extents and block lengths, the regions
the consumer's workers read) is the other's times one factor per dimension, their counts of
elements differ by the product of those factors, and the search counts one table and fills the
others from its counts.  The counts are whole numbers, so a copy must be the table counted on
its own, bit for bit: its seconds and its bytes.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.planning.problem import CostOptions, make_problem, worker_counts


def tables_of(g: sw.Graph, devices: sw.DeviceGraph):
    p = make_problem(g, devices, CostOptions(threads=2))
    p.enumerate(np.asarray(worker_counts(len(devices)), dtype=np.int32))
    p.build_tables(with_bytes=True)
    return p


def edge_named(p, g: sw.Graph, producer: str, consumer: str) -> int:
    names = [op.name for op in g.ops]
    for e, (src, dst, _) in enumerate(p.edges()):
        if (names[src], names[dst]) == (producer, consumer):
            return e
    raise KeyError((producer, consumer))


def branches(channels: tuple[int, ...], kernel: int = 1) -> sw.Graph:
    """One input feeding a convolution -> batch norm -> relu branch per channel count."""
    g = sw.Graph("branches")
    x = g.input("x", (32, 8, 16, 16))
    for c in channels:
        g.relu(g.batchnorm2d(g.conv2d(x, c, kernel=kernel, name=f"conv{c}"), name=f"bn{c}"), name=f"relu{c}")
    return g


MACHINE = lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="P100")   # noqa: E731


@pytest.mark.parametrize("kernel", [1, 3])
def test_a_scaled_copy_is_the_table_counted_alone(kernel):
    """64, 96 and 160 channels: the batch norms read their convolutions' outputs alike up to
    the channel count (ratios 3/2 and 5/2, not whole), so their tables are counted once; each
    equals, bit for bit, the table of a graph holding that branch alone."""
    channels = (64, 96, 160)
    g, d = branches(channels, kernel), MACHINE()
    together = tables_of(g, d)
    edges, distinct, counted = together.table_counts()
    assert counted < distinct <= edges   # some tables were filled as copies
    for c in channels:
        alone_graph = branches((c,), kernel)
        alone = tables_of(alone_graph, d)
        for producer, consumer in ((f"conv{c}", f"bn{c}"), (f"bn{c}", f"relu{c}")):
            t_all, b_all = together.edge_table(edge_named(together, g, producer, consumer))
            t_one, b_one = alone.edge_table(edge_named(alone, alone_graph, producer, consumer))
            assert t_all.shape == t_one.shape and t_all.shape[0] > 50
            np.testing.assert_array_equal(t_all, t_one)
            np.testing.assert_array_equal(b_all, b_one)
            assert (t_all > 0).any()


def test_inception_tables_equal_their_entries_counted_pair_by_pair():
    """Inception-v3 on 4 x 4 P100s: a third of its transfer entries lie in scaled copies; every
    table equals, bit for bit, its entries counted one pair of configurations at a time (a
    sample of each: every first row and column, and random entries)."""
    g = sw.models.get("inception_v3")
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")
    p = tables_of(g, d)
    edges, distinct, counted = p.table_counts()
    assert (edges, distinct) == (349, 74) and counted < 50
    rng = np.random.default_rng(7)
    for e in range(edges):
        time, _ = p.edge_table(e)
        ni, nj = time.shape
        cells = [(0, j) for j in range(nj)] + [(i, 0) for i in range(ni)]
        cells += [(int(rng.integers(ni)), int(rng.integers(nj))) for _ in range(40)]
        for ci, cj in cells:
            assert time[ci, cj] == p.placed_transfer(e, ci, cj), (e, ci, cj)
