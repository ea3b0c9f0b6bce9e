"""sw.simulate(plan, ranks=...): the devices of a plan over the processes of an MPI job, copies
between ranks timed by the rank link.  Against the task graph (sw.lower) only: no timing of
this machine is compared."""
from __future__ import annotations

import pytest

import shardwise as sw
from shardwise.distributed.ranks import rank_of_device
from shardwise.iteration.lower import lower
from shardwise.iteration.simulate import simulate


def chain() -> sw.Graph:
    g = sw.Graph("chain")
    x = g.input("x", (8, 4, 8, 8))
    x = g.conv2d(x, 8, kernel=3, padding=1, name="c1")
    x = g.relu(x, name="r")
    x = g.conv2d(x, 8, kernel=3, padding=1, name="c2")
    x = g.linear(g.flatten(x, name="f"), 10, name="fc")
    g.softmax(x, name="prob")
    return g


def cross_rank_bytes(plan, rank):
    """(sent, received) per rank: bytes of the task graph's copies between devices of different ranks."""
    n = max(rank) + 1
    sent, received = [0] * n, [0] * n
    for t in lower(plan).tasks:
        if t.kind == "copy" and t.src_device is not None and rank[t.src_device] != rank[t.device]:
            sent[rank[t.src_device]] += t.nbytes
            received[rank[t.device]] += t.nbytes
    return sent, received


@pytest.mark.parametrize("devices", [sw.DeviceGraph.cpu(2), sw.DeviceGraph.cpu(4), sw.DeviceGraph.cluster(2, 2)])
def test_one_rank_is_one_process(devices):
    g = chain()
    for plan in (sw.strategies.data_parallel(g, devices), sw.search(g, devices)):
        one, none = simulate(plan, ranks=1), simulate(plan)
        assert one.iteration_time == none.iteration_time
        spans = [(e.start, e.end, e.resources) for e in none.events]
        assert [(e.start, e.end, e.resources) for e in one.events] == spans
        assert one.rank_bytes == none.rank_bytes == {"sent": [0], "received": [0]}
        assert none.ranks is None and one.ranks == [0] * len(devices)


def test_a_slow_rank_link_adds_the_cross_rank_bytes_over_its_bandwidth():
    """Data parallel on 2 CPU workers in 2 ranks: the parameters go out to device 1 before its
    forward and the gradients come back after its backward, one after the other, so a rank link
    slow enough to dwarf everything else adds about all the cross-rank bytes / its bandwidth."""
    g = chain()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    base = simulate(plan, ranks=2)
    assert base.iteration_time >= simulate(plan).iteration_time   # the same link; the sender's core held too
    sent, received = cross_rank_bytes(plan, [0, 1])
    assert base.rank_bytes == {"sent": sent, "received": received}
    total = sum(sent)
    assert total > 0 and sent == received[::-1]
    bw, latency = 1e5, 1e-3
    copies = sum(1 for t in lower(plan).tasks if t.kind == "copy" and t.src_device not in (None, t.device))
    slow = simulate(plan, ranks=2, rank_link=(bw, latency))
    added = slow.iteration_time - base.iteration_time
    expected = total / bw + copies * latency
    assert added == pytest.approx(expected, rel=0.05), (added, expected)
    assert added > max(sent) / bw
    # the rank link comes from the costs too: a profile's rank_bandwidth and rank_latency
    prof = sw.Profile(g.fingerprint(), {}, rank_bandwidth=bw, rank_latency=latency)
    assert simulate(plan, ranks=2, costs=prof).iteration_time == pytest.approx(
        simulate(plan, ranks=2, costs=sw.Profile(g.fingerprint(), {})).iteration_time + added, rel=1e-6)
    # and ranks=None leaves the copies in one process, whatever the link
    assert simulate(plan, rank_link=(bw, latency)).iteration_time == simulate(plan).iteration_time


def test_ranks_as_a_list_equal_ranks_as_the_int_that_gives_it():
    g = chain()
    d = sw.DeviceGraph.cpu(4)
    for plan in (sw.strategies.data_parallel(g, d), sw.search(g, d)):
        for k in (2, 3, 4):
            a = simulate(plan, ranks=k, rank_link=(1e8, 2e-5))
            b = simulate(plan, ranks=rank_of_device(4, k), rank_link=(1e8, 2e-5))
            assert a.iteration_time == b.iteration_time and a.rank_bytes == b.rank_bytes
            assert a.ranks == b.ranks == rank_of_device(4, k)
            sent, received = cross_rank_bytes(plan, a.ranks)
            assert a.rank_bytes == {"sent": sent, "received": received}
    # any assignment, not only blocks: devices 0 and 2 on rank 0, 1 and 3 on rank 1
    plan = sw.strategies.data_parallel(g, d)
    r = simulate(plan, ranks=[0, 1, 0, 1], rank_link=(1e8, 2e-5))
    assert r.rank_bytes == dict(zip(("sent", "received"), cross_rank_bytes(plan, [0, 1, 0, 1])))


def test_bad_ranks_are_refused_naming_what_is_wrong():
    g = chain()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    with pytest.raises(sw.ConfigError, match="3 ranks for a plan on 2 devices"):
        simulate(plan, ranks=3)
    with pytest.raises(sw.ConfigError, match="lists 3 ranks for a plan on 2 devices"):
        simulate(plan, ranks=[0, 1, 1])
    with pytest.raises(sw.ConfigError, match="rank 1 would run no device"):
        simulate(plan, ranks=[0, 2])
    with pytest.raises(sw.ConfigError, match=r"ranks\[1\]"):
        simulate(plan, ranks=[0, -1])
    with pytest.raises(sw.ConfigError, match="positive int"):
        simulate(plan, ranks=0)
    with pytest.raises(sw.ConfigError, match="ranks must be None, an int"):
        simulate(plan, ranks="2")
    with pytest.raises(sw.ConfigError, match="rank_link"):
        simulate(plan, ranks=2, rank_link=(0.0, 1e-6))
    with pytest.raises(sw.ConfigError, match="rank_link"):
        simulate(plan, ranks=2, rank_link=5.0)


def test_back_to_back_iterations_and_the_summary_see_the_ranks():
    g = chain()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    slow = simulate(plan, ranks=2, rank_link=(1e6, 0.0), iterations=2)
    assert slow.iteration_time > simulate(plan, iterations=2).iteration_time
    assert "between 2 ranks" in simulate(plan, ranks=2).summary()
    assert "ranks" not in simulate(plan).summary()


def test_the_c_engine_checks_its_rank_arguments():
    import numpy as np

    from shardwise.iteration.lower import handle_of
    from shardwise.iteration.sim_costs import _machine

    plan = sw.strategies.data_parallel(chain(), sw.DeviceGraph.cpu(2))
    h, m = handle_of(lower(plan)), _machine(plan.devices)

    def run(**kw):
        return h.simulate(m.route_ptr, m.route_res, m.nres, cores=m.cores, **kw)

    assert run(rank=np.array([0, 1], np.int32), rank_bandwidth=1e9, rank_latency=1e-5)["iteration_time"] > 0
    with pytest.raises(ValueError, match="one entry per device"):
        run(rank=np.array([0, 1, 1], np.int32))
    with pytest.raises(ValueError, match="rank -1 must be >= 0"):
        run(rank=np.array([0, -1], np.int32))
    with pytest.raises(ValueError, match="finite and >= 0"):
        run(rank=np.array([0, 1], np.int32), rank_bandwidth=float("nan"))
    with pytest.raises(ValueError, match="finite and >= 0"):
        run(rank_latency=-1.0)


@pytest.mark.parametrize("devices", [sw.DeviceGraph.cpu(4), sw.DeviceGraph.cluster(2, 2)])
def test_the_simulator_equals_the_oracle_across_ranks(devices):
    """tests/sim_oracle.py's independent replay with the same ranks and rank link: every task's
    start, its resources (the sending core too) and the iteration."""
    import sim_oracle

    g = chain()
    link = (3e8, 2e-5)
    for plan in (sw.strategies.data_parallel(g, devices), sw.search(g, devices)):
        for ranks in (2, [0, 1, 0, 1], [0, 1, 2, 3]):
            rank = ranks if isinstance(ranks, list) else rank_of_device(len(devices), ranks)
            a = simulate(plan, ranks=ranks, rank_link=link, check_memory=False)
            b = sim_oracle.replay(plan, ranks=rank, rank_link=link)
            assert a.iteration_time == pytest.approx(b.iteration_time, rel=1e-12)
            assert [e.start for e in a.events] == pytest.approx(b.start, rel=1e-12, abs=1e-15)
            assert [sorted(e.resources) for e in a.events] == [sorted(r) for r in b.resources]
