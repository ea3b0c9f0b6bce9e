"""Critical-path schedules (TurboDL's analysis, csrc/graph/schedule_paths.c and csrc/graph/schedule.c).

Expected blocks, paths, distances, ranks and task priorities are worked out by hand
in each test from the dA times it chooses; a property test checks the analysis on
random graphs against a brute-force enumeration of every path.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise as sw
from shardwise import _core
from shardwise.errors import ConfigError
from shardwise.planning.profile import Profile, ProfileMismatch
from shardwise.planning.problem import make_problem
from shardwise.iteration.schedule import layer_paths

from strategies_random import build_graph, examples, graph_recipes


# ----------------------------------------------------------------------------- hand-made graphs
def residual_graph() -> sw.Graph:
    """stem -> (a1 -> r -> a2 | s) -> add -> out -> flatten -> fc -> prob."""
    g = sw.Graph("residual")
    x = g.input("x", (2, 4, 6, 6))
    stem = g.conv2d(x, 4, kernel=1, name="stem")
    a = g.conv2d(stem, 4, kernel=3, padding=1, name="a1")
    a = g.relu(a, name="r")
    a = g.conv2d(a, 4, kernel=3, padding=1, name="a2")
    s = g.conv2d(stem, 4, kernel=1, name="s")
    y = g.relu(g.add(a, s, name="add"), name="out")
    g.softmax(g.linear(g.flatten(y, name="flatten"), 3, name="fc"), name="prob")
    return g


def inception_graph() -> sw.Graph:
    """stem -> four branches, the third split in two -> concat -> flatten -> fc -> prob."""
    g = sw.Graph("inception")
    x = g.input("x", (2, 4, 6, 6))
    stem = g.conv2d(x, 4, kernel=1, name="stem")
    b1 = g.conv2d(stem, 2, kernel=1, name="b1")
    b2 = g.conv2d(g.conv2d(stem, 2, kernel=1, name="b2a"), 2, kernel=3, padding=1, name="b2b")
    b3 = g.conv2d(g.conv2d(stem, 2, kernel=1, name="b3a"), 2, kernel=3, padding=1, name="b3b")
    b3c = g.conv2d(b3, 2, kernel=1, name="b3c")
    b3d = g.conv2d(b3, 2, kernel=1, name="b3d")
    b4 = g.conv2d(g.pool2d(stem, kernel=3, stride=1, padding=1, name="b4pool"), 2, kernel=1, name="b4")
    cat = g.concat([b1, b2, b3c, b3d, b4], name="cat")
    g.softmax(g.linear(g.flatten(cat, name="flatten"), 3, name="fc"), name="prob")
    return g


def chain_graph() -> sw.Graph:
    g = sw.Graph("chain")
    x = g.input("x", (2, 3, 6, 6))
    x = g.relu(g.conv2d(x, 4, kernel=3, padding=1, name="conv1"), name="relu1")
    x = g.conv2d(x, 4, kernel=3, padding=1, bias=False, name="conv2")
    g.softmax(g.linear(g.flatten(x, name="flatten"), 3, name="fc"), name="prob")
    return g


def by_id(paths):
    return {p.id: p for p in paths}


# ----------------------------------------------------------------------------- the analysis alone
def test_residual_block_longest_path_by_dA_time():
    g = residual_graph()
    dA = {"stem": 1, "a1": 3, "r": 1, "a2": 3, "s": 2, "add": 1, "out": 1, "flatten": 0.5, "fc": 2, "prob": 1}
    blocks, paths = layer_paths(g, dA)
    # sync layers: stem, add, out, flatten, fc, prob; one block stem -> add
    assert [(b.fork, b.merge, set(b.ops)) for b in blocks] == [("stem", "add", {"a1", "r", "a2", "s"})]
    # through a: 1 + 3 + 1 + 3 + 1 = 9; through s: 1 + 2 + 1 = 4
    assert blocks[0].distance == 9 and blocks[0].paths == (0, 1)
    p0, p1 = paths
    assert set(p0.ops) == {"stem", "a1", "r", "a2", "add", "out", "flatten", "fc", "prob"}
    assert p0.distance == 1 + 3 + 1 + 3 + 1 + 1 + 0.5 + 2 + 1 and p0.rank == 0 and p0.block == -1
    assert (p1.ops, p1.block, p1.rank, p1.distance, p1.priority) == (("s",), 0, 1, 4, -1)

    # a slow shortcut (dA 10: 1 + 10 + 1 = 12 > 9) takes the critical path over, though it has fewer layers
    blocks, paths = layer_paths(g, {**dA, "s": 10})
    assert blocks[0].distance == 12
    assert "s" in paths[0].ops and set(paths[1].ops) == {"a1", "r", "a2"}
    assert (paths[1].rank, paths[1].distance) == (1, 9)
    assert paths[0].distance == 1 + 10 + 1 + 1 + 0.5 + 2 + 1


def test_inception_block_ranks_branches_and_a_split_branch_keeps_its_best_path():
    g = inception_graph()
    dA = {"stem": 1, "b1": 2, "b2a": 1, "b2b": 4, "b3a": 1, "b3b": 2, "b3c": 3, "b3d": 1, "b4pool": 0.5, "b4": 1.5,
          "cat": 1, "flatten": 0, "fc": 1, "prob": 1}
    blocks, paths = layer_paths(g, dA)
    inside = {"b1", "b2a", "b2b", "b3a", "b3b", "b3c", "b3d", "b4pool", "b4"}
    assert [(b.fork, b.merge, set(b.ops)) for b in blocks] == [("stem", "cat", inside)]
    # fork -> merge distances (stem 1 and cat 1 included):
    #   b3a b3b b3c: 1+1+2+3+1 = 8   b2a b2b: 1+1+4+1 = 7   b3a b3b b3d: 1+1+2+1+1 = 6
    #   b1: 1+2+1 = 4                b4pool b4: 1+0.5+1.5+1 = 4 (ties with b1: same rank)
    assert blocks[0].distance == 8
    got = [(p.ops, p.rank, p.distance) for p in paths[1:]]
    assert got == [(("b2a", "b2b"), 1, 7), (("b3d",), 2, 6), (("b1",), 3, 4), (("b4pool", "b4"), 3, 4)]
    # b3a and b3b lie on the 8 and the 6 path: they keep the critical one
    assert set(paths[0].ops) == {"stem", "b3a", "b3b", "b3c", "cat", "flatten", "fc", "prob"}
    assert paths[0].distance == 1 + 1 + 2 + 3 + 1 + 0 + 1 + 1


def test_chain_is_one_critical_path_without_blocks():
    g = chain_graph()
    blocks, paths = layer_paths(g, {"conv1": 2, "relu1": 1, "conv2": 3, "flatten": 1, "fc": 2, "prob": 1})
    assert blocks == []
    assert len(paths) == 1 and paths[0].ops == ("conv1", "relu1", "conv2", "flatten", "fc", "prob")
    assert paths[0].distance == 10


def test_branches_from_the_start_of_the_graph_fork_at_none():
    g = sw.Graph("two_inputs")
    a = g.relu(g.conv2d(g.input("x1", (2, 3, 4, 4)), 4, kernel=1, name="a1"), name="a2")
    b = g.conv2d(g.input("x2", (2, 3, 4, 4)), 4, kernel=1, name="b1")
    g.softmax(g.linear(g.flatten(g.add(a, b, name="sum"), name="flatten"), 3, name="fc"), name="prob")
    blocks, paths = layer_paths(g, {"a1": 1, "a2": 1, "b1": 3, "sum": 1, "flatten": 1, "fc": 1, "prob": 1})
    # S -> a1 -> a2 -> sum: 1 + 1 + 1 = 3; S -> b1 -> sum: 3 + 1 = 4
    assert [(b.fork, b.merge, set(b.ops), b.distance) for b in blocks] == [(None, "sum", {"a1", "a2", "b1"}, 4)]
    assert set(paths[0].ops) == {"b1", "sum", "flatten", "fc", "prob"}
    assert (paths[1].ops, paths[1].rank, paths[1].distance) == (("a1", "a2"), 1, 3)


def test_ranks_start_again_in_every_block():
    """Two blocks in series, a residual block with two paths, then an inception-like one with
    three: ranks count within a block, so rank 1 of both blocks shares a priority."""
    g = sw.Graph("two_blocks")
    x = g.conv2d(g.input("x", (2, 4, 4, 4)), 4, kernel=1, name="stem")
    x = g.add(g.conv2d(x, 4, kernel=1, name="r1"), g.conv2d(x, 4, kernel=1, name="r2"), name="add")
    x = g.concat([g.conv2d(x, 2, kernel=1, name=f"i{k}") for k in range(3)], name="cat")
    g.softmax(g.linear(g.flatten(x, name="flatten"), 3, name="fc"), name="prob")
    dA = {"stem": 0, "r1": 5, "r2": 1, "add": 1, "i0": 1, "i1": 3, "i2": 2, "cat": 1, "flatten": 0, "fc": 0,
          "prob": 0}
    blocks, paths = layer_paths(g, dA)
    assert [(b.fork, b.merge) for b in blocks] == [("stem", "add"), ("add", "cat")]
    assert blocks[0].distance == 0 + 5 + 1 and blocks[1].distance == 1 + 3 + 1
    rest = [(p.block, p.ops, p.rank, p.distance) for p in paths[1:]]
    assert rest == [(0, ("r2",), 1, 2), (1, ("i2",), 1, 4), (1, ("i0",), 2, 3)]
    assert set(paths[0].ops) == {"stem", "r1", "add", "i1", "cat", "flatten", "fc", "prob"}


# ----------------------------------------------------------------------------- priorities of tasks
def profile(g: sw.Graph, plan: sw.Plan, backward: dict[str, float]) -> Profile:
    """A profile whose backward seconds of every op are given (forward 1 ms each)."""
    times = {(op.name, plan[op.name].degrees): (1e-3, backward.get(op.name, 1e-3)) for op in g.ops}
    return Profile(g.fingerprint(), {}, times)


def weight_slot_kind(tg, t) -> set[str]:
    """'weight' / 'bias' for the parameters (or their gradients, momentum) a task touches."""
    names = {}
    for (op, name, _), b in tg.params.items():
        names[(op, tg.buffers[b].slot)] = name
    out = set()
    for b in t.reads + t.writes:
        buf = tg.buffers[b]
        if buf.kind in ("param", "param_grad", "momentum") and buf.slot is not None:
            out.add(names[(buf.op, buf.slot)])
    return out


def bias_share(g: sw.Graph, name: str) -> float:
    """A bias gradient's part of its op's backward in forward-FLOP units: it sums one element
    per output, where the forward of a conv or linear layer does 2 K + 1 FLOPs per output (K
    products and the bias add; K = input channels x kernel area, or input features)."""
    desc = g[name].desc
    return 1 / (2 * math.prod(desc.extents[desc.out_rank:]) + 1)


def test_residual_priorities_of_every_task_from_a_profile():
    """One device, measured backward times.  A worker's backward time is shared by its
    backward compute tasks (backward_data per data input, backward_weight per weight slot) in
    proportion to their FLOPs: each counts the forward's, a bias gradient b = 1 / (2 K + 1) of it,
    so: dA(stem) = 0 (its input is the graph's: no backward_data), dA(conv) = bwd / (2 + b),
    dA(relu, flatten, softmax) = bwd, dA(add) = bwd (two backward_data), dA(fc) = bwd / (2 + b)."""
    g = residual_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    bwd = {"stem": 1e-3, "a1": 6e-3, "r": 1e-3, "a2": 6e-3, "s": 4e-3, "add": 1e-3, "out": 1e-3, "flatten": 1e-3,
           "fc": 4e-3, "prob": 1e-3}
    # measured backward = dA x (2 + b) for the layers with a weight and a bias
    for n, dA in (("a1", 3e-3), ("a2", 3e-3), ("s", 2e-3), ("fc", 2e-3)):
        bwd[n] = dA * (2 + bias_share(g, n))
    sched = sw.schedule(plan, costs=profile(g, plan, bwd))
    expected_dA = {"x": 0, "stem": 0, "a1": 3e-3, "r": 1e-3, "a2": 3e-3, "s": 2e-3, "add": 1e-3, "out": 1e-3,
                   "flatten": 1e-3, "fc": 2e-3, "prob": 1e-3}
    assert sched.dA == pytest.approx(expected_dA, rel=1e-12)
    # through a: 0 + 3 + 1 + 3 + 1 = 8 ms; through s: 0 + 2 + 1 = 3 ms
    assert sched.paths[1].ops == ("s",) and sched.paths[1].distance == pytest.approx(3e-3, rel=1e-12)
    assert sched.blocks[0].distance == pytest.approx(8e-3, rel=1e-12)
    assert (sched.levels, sched.alpha, sched.beta) == (2, 2, 4)
    tg = sw.lower(plan)
    path = {n: (1 if n == "s" else -1 if n == "x" else 0) for n in expected_dA}
    prio = {n: (-1 if n == "s" else 0) for n in expected_dA}
    for t, a in zip(tg.tasks, sched.priorities):
        if t.phase == "forward" or t.kind == "backward_data":
            want = (prio[t.op], "forward" if t.phase == "forward" else "dA")
        elif t.kind == "backward_weight":   # dW or dB: a task per weight slot
            kind = weight_slot_kind(tg, t)
            want = (prio[t.op] - 2, "dW") if kind == {"weight"} else (prio[t.op] - 4, "dB")
        elif t.kind == "update":   # by reuse distance below every compute class: -(2 + 4) - k
            want = (-6 - {"stem": 0, "a1": 1, "a2": 2, "s": 3, "fc": 4}[t.op], "sync")
        elif t.kind == "accumulate":         # a gradient summed in: for its op's dA, but the stem has none
            want = (-2, "dW") if t.op == "stem" else (prio[t.op], "dA")
        else:
            raise AssertionError(f"unexpected task {t}")
        assert (a.priority, a.subtask) == want, t
        assert a.layer_path == path[t.op] and a.path_priority == prio[t.op], t
    # one device, one stream per priority: 0, -1 (s), -2 / -3 (dW), -4 / -5 (dB), -6 .. -10 (sync)
    assert sched.sync_floor == -6
    assert [s.priority for s in sched.streams[0]] == list(range(0, -11, -1))
    assert sum(s.tasks for s in sched.streams[0]) == len(tg.tasks)

    # a slow shortcut (its dA 12 ms: 13 > 8) turns the priorities round
    slow = sw.schedule(plan, costs=profile(g, plan, {**bwd, "s": 24e-3}))
    assert slow.paths[0].ops[:2] == ("stem", "s") and set(slow.paths[1].ops) == {"a1", "r", "a2"}
    for t, a in zip(tg.tasks, slow.priorities):
        if t.kind == "backward_data":
            assert a.priority == (-1 if t.op in ("a1", "r", "a2") else 0), t


def test_chain_priorities_give_three_streams_like_vgg():
    """A chain has one path level: dA (and forward) at 0, dW at -1, dB at -2 -- TurboDL's three
    streams for VGG-16 -- with the default offsets alpha = 1, beta = 2."""
    g = chain_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    sched = sw.schedule(plan)
    assert (sched.levels, sched.alpha, sched.beta) == (1, 1, 2)
    tg = sw.lower(plan)
    for t, a in zip(tg.tasks, sched.priorities):
        if t.kind == "backward_weight":
            want = -1 if weight_slot_kind(tg, t) == {"weight"} else -2
        elif t.kind == "update":   # sync_floor -(1 + 2), less the layer's place among conv1, conv2, fc
            want = -3 - {"conv1": 0, "conv2": 1, "fc": 2}[t.op]
        elif t.kind == "accumulate" and t.op == "conv1":   # read by conv1's dW (most urgent) and dB alone
            want = -1
        else:
            want = 0
        assert a.priority == want, t
    assert [s.priority for s in sched.streams[0]] == [0, -1, -2, -3, -4, -5]
    # custom offsets: dW and dB on one stream with the dA
    flat = sw.schedule(plan, alpha=0, beta=0)
    assert {a.priority for a in flat.priorities if a.subtask != "sync"} == {0}
    assert [s.priority for s in flat.streams[0]] == [0, -1, -2, -3]


def test_inception_offsets_and_streams_from_hand_made_ranks():
    """Path levels 4 (ranks 0..3): default alpha 4, beta 8; with alpha=1, beta=5 a dW of the
    critical path (0 - 1) ranks with the dA of rank-1 paths (-1), as Algorithm 1 allows."""
    g = inception_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    # backward seconds so the dA times are those of the analysis test (conv: bwd / 2, pool: bwd)
    dA = {"stem": 1, "b1": 2, "b2a": 1, "b2b": 4, "b3a": 1, "b3b": 2, "b3c": 3, "b3d": 1, "b4pool": 0.5, "b4": 1.5,
          "cat": 1, "flatten": 0.25, "fc": 1, "prob": 1}
    # concat: five backward_data share its time; pool, flatten, softmax: one; convs, fc: dA, dW
    # and the bias's dB (bias_share)
    share = {"cat": 1, "b4pool": 1, "flatten": 1, "prob": 1}
    bwd = {n: v * 1e-3 * share.get(n, 2 + bias_share(g, n)) for n, v in dA.items()}
    sched = sw.schedule(plan, costs=profile(g, plan, bwd))
    rank = {"b2a": 1, "b2b": 1, "b3d": 2, "b1": 3, "b4pool": 3, "b4": 3}
    assert {n: -p.rank for p in sched.paths for n in p.ops} == {n: -rank.get(n, 0) for n in dA if n != "stem"} | \
        {"stem": 0}
    assert (sched.levels, sched.alpha, sched.beta) == (4, 4, 8)
    custom = sw.schedule(plan, costs=profile(g, plan, bwd), alpha=1, beta=5)
    tg = sw.lower(plan)
    for t, a, c in zip(tg.tasks, sched.priorities, custom.priorities):
        if t.kind == "backward_weight" and weight_slot_kind(tg, t) == {"weight"}:
            assert (a.priority, c.priority) == (-rank.get(t.op, 0) - 4, -rank.get(t.op, 0) - 1), t
        elif t.kind == "backward_weight":
            assert weight_slot_kind(tg, t) == {"bias"}
            assert (a.priority, c.priority) == (-rank.get(t.op, 0) - 8, -rank.get(t.op, 0) - 5), t
        if t.kind == "backward_data":
            assert a.priority == c.priority == -rank.get(t.op, 0), t
    # streams: dA 0..-3; dW -4..-7; dB (conv biases) -8..-11; sync -12 - k for the k-th layer with weights
    weighted = ["stem", "b1", "b2a", "b2b", "b3a", "b3b", "b3c", "b3d", "b4", "fc"]
    for t, a, c in zip(tg.tasks, sched.priorities, custom.priorities):
        if t.kind == "update":
            assert (a.priority, c.priority) == (-12 - weighted.index(t.op), -9 - weighted.index(t.op)), t
    assert [s.priority for s in sched.streams[0]] == list(range(0, -12 - len(weighted), -1))
    assert [s.priority for s in custom.streams[0]] == sorted({a.priority for a in custom.priorities}, reverse=True)


def test_fifo_is_one_stream_per_device_at_one_priority():
    g = residual_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    fifo = sw.schedule(plan, policy="fifo")
    tg = sw.lower(plan)
    assert (fifo.policy, fifo.alpha, fifo.beta) == ("fifo", 0, 0)
    assert {(a.priority, a.path_priority) for a in fifo.priorities} == {(0, 0)}
    assert {d: [(s.id, s.priority) for s in ss] for d, ss in fifo.streams.items()} == {0: [(0, 0)], 1: [(1, 0)]}
    assert [a.stream for a in fifo.priorities] == [t.device for t in tg.tasks]
    # the analysis itself does not depend on the policy
    cp = sw.schedule(plan)
    assert fifo.paths == cp.paths and fifo.blocks == cp.blocks
    assert [a.subtask for a in fifo.priorities] == [a.subtask for a in cp.priorities]


def test_streams_belong_to_their_devices_in_priority_order():
    g = sw.models.resnet18_small(batch=4, width=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    sched = sw.schedule(plan)
    tg = sw.lower(plan)
    ids = [s for ss in sched.streams.values() for s in ss]
    assert [s.id for s in ids] == list(range(len(ids)))
    for dev, streams in sched.streams.items():
        prios = [s.priority for s in streams]
        assert prios == sorted(set(prios), reverse=True)
        assert prios == sorted({a.priority for t, a in zip(tg.tasks, sched.priorities) if t.device == dev},
                               reverse=True)
    for t, a in zip(tg.tasks, sched.priorities):
        assert ids[a.stream].device == t.device and ids[a.stream].priority == a.priority


def test_an_ops_dA_time_is_its_slowest_workers():
    """Data parallelism on two devices of different speeds: each worker's backward is twice its
    roofline forward (sw_worker_time), shared by its backward compute tasks by FLOPs; the op's dA time
    is the slower worker's."""
    d = sw.DeviceGraph("two_speeds")
    d.add_device("fast", flops=4e12, memory=8e9)
    d.add_device("slow", flops=1e12, memory=8e9)
    d.add_link(0, 1, bandwidth=10e9)
    g = chain_graph()
    plan = sw.strategies.data_parallel(g, d)
    problem = make_problem(g, d, plan.options)
    sched = sw.schedule(plan)
    dA_tasks = {"conv1": 0, "relu1": 1, "conv2": 1, "flatten": 1, "fc": 1, "prob": 1}   # backward_data per worker
    backward_tasks = {"conv1": 1, "relu1": 1, "conv2": 2, "flatten": 1, "fc": 2, "prob": 1}   # dA and dW
    for name in backward_tasks:   # and a bias's dB, by its FLOPs
        if any(i.bias for i in g[name].desc.inputs):
            backward_tasks[name] += bias_share(g, name)
    for op in g.ops:
        if op.kind == "input":
            continue
        cfg = plan[op.name]
        fwd = problem.worker_times(op.index, np.asarray(cfg.degrees, np.int32), np.asarray(cfg.devices, np.int32))
        per_worker = [2 * f * dA_tasks[op.name] / backward_tasks[op.name] for f in fwd]
        assert per_worker[1] > per_worker[0] or dA_tasks[op.name] == 0
        assert sched.dA[op.name] == pytest.approx(max(per_worker), rel=1e-12), op.name


# ----------------------------------------------------------------------------- random graphs vs brute force
def brute_force_analysis(g: sw.Graph, dA: dict[str, float]):
    """Sync layers, blocks and the longest fork -> merge path through every layer, by listing
    every path from the virtual start to the virtual end."""
    layers = [op.index for op in g.ops if any(inp.role == 0 for inp in op.desc.inputs)]
    is_layer = set(layers)
    succ = {v: sorted({c for c in layers if v in g.ops[c].inputs}) for v in layers}
    roots = [v for v in layers if not any(u in is_layer for u in g.ops[v].inputs)]
    full = []

    def walk(path):
        nxt = succ[path[-1]]
        if not nxt:
            full.append(path)
        for c in nxt:
            walk(path + [c])

    for r in roots:
        walk([r])
    sync = [v for v in layers if all(v in p for p in full)]
    bounds = [None] + sync + [None]
    blocks = []
    for fork, merge in zip(bounds, bounds[1:]):
        lo = -1 if fork is None else fork
        hi = len(g.ops) if merge is None else merge
        inside = [v for v in layers if lo < v < hi]
        if not inside:
            continue
        segments = set()
        for p in full:
            a = p.index(fork) if fork is not None else 0
            b = p.index(merge) + 1 if merge is not None else len(p)
            segments.add(tuple(p[a:b]))
        through = {v: max(sum(dA[g.ops[u].name] for u in s) for s in segments if v in s) for v in inside}
        blocks.append((fork, merge, inside, max(sum(dA[g.ops[u].name] for u in s) for s in segments), through))
    critical = max(sum(dA[g.ops[u].name] for u in p) for p in full)
    return blocks, critical


@settings(max_examples=examples(40), deadline=None)
@given(recipe=graph_recipes(max_ops=12), data=st.data())
def test_random_graphs_match_brute_force(recipe, data):
    g = build_graph(recipe, max_ops=12)
    # small integer dA times: sums are exact, so ties are ties
    dA = {op.name: float(data.draw(st.integers(0, 4))) for op in g.ops}
    blocks, paths = layer_paths(g, dA)
    want_blocks, critical = brute_force_analysis(g, dA)
    names = [op.name for op in g.ops]
    assert [(b.fork, b.merge, b.ops) for b in blocks] == \
        [(None if f is None else names[f], None if m is None else names[m], tuple(names[v] for v in inside))
         for f, m, inside, _, _ in want_blocks]
    assert paths[0].distance == critical
    path_of = {n: p for p in paths for n in p.ops}
    for b, (_, _, inside, longest, through) in zip(blocks, want_blocks):
        assert b.distance == longest
        # every layer is on the longest path through it; ranks count the longer distances
        for v in inside:
            p = path_of[names[v]]
            assert (b.distance if p.id == 0 else p.distance) == through[v]
        distances = [b.distance] + [paths[i].distance for i in b.paths[1:]]
        for i, dist in zip(b.paths, distances):
            assert paths[i].rank == len({x for x in distances if x > dist})
    layers = {op.name for op in g.ops if any(inp.role == 0 for inp in op.desc.inputs)}
    assert set(path_of) == layers


# ----------------------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def small_plan():
    g = residual_graph()
    return sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))


def test_unknown_policy_and_bad_offsets_are_refused(small_plan):
    with pytest.raises(ConfigError, match=r"unknown scheduling policy 'lifo'.*'fifo', 'critical_path'"):
        sw.schedule(small_plan, policy="lifo")
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ConfigError, match="alpha must be an integer >= 0"):
            sw.schedule(small_plan, alpha=bad)
    with pytest.raises(ConfigError, match="beta must be an integer >= 0"):
        sw.schedule(small_plan, beta=-3)
    with pytest.raises(TypeError, match="schedule needs a Plan, got str"):
        sw.schedule("plan")


def test_costs_of_another_graph_are_refused(small_plan):
    other = chain_graph()
    with pytest.raises(ProfileMismatch, match="measured for another graph"):
        sw.schedule(small_plan, costs=Profile(other.fingerprint(), {}, {}))
    with pytest.raises(ConfigError, match="costs must be a Profile"):
        sw.schedule(small_plan, costs=object())


def test_a_schedule_checks_the_plan_it_is_used_with(small_plan):
    sched = sw.schedule(small_plan)
    sched.check(small_plan)
    g = small_plan.graph
    sched.check(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))    # an equal plan
    with pytest.raises(ConfigError, match="plan of graph 'residual', not of 'chain'"):
        sched.check(sw.strategies.data_parallel(chain_graph(), sw.DeviceGraph.cpu(2)))
    with pytest.raises(ConfigError, match="made for devices"):
        sched.check(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(3)))
    with pytest.raises(ConfigError, match="configurations of"):
        sched.check(sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(2)))
    with pytest.raises(ConfigError, match="checked against a Plan"):
        sched.check(g)


def test_ring_synchronization_is_scheduled():
    g = chain_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2), sw.CostOptions(sync="ring"))
    s = sw.schedule(plan)
    assert len(s.priorities) == len(sw.lower(plan).tasks)


def test_the_core_refuses_bad_arrays(small_plan):
    from shardwise.iteration.lower import plan_arrays

    g = small_plan.graph
    problem = make_problem(g, small_plan.devices, small_plan.options)
    arrays = plan_arrays(small_plan)
    with pytest.raises(ValueError, match="unknown scheduling policy 7"):
        problem.schedule(*arrays, 7)
    with pytest.raises(ValueError, match=r"split must be \(11, 2\)"):
        problem.schedule(*arrays, 1, -1, -1, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="op 2's measured time must be NaN"):
        problem.schedule(*arrays, 1, -1, -1, np.where(np.arange(22).reshape(11, 2) == 4, -1.0, 0.0))
    with pytest.raises(ValueError, match="alpha and beta must be >= 0"):
        problem.schedule(*arrays, 1, -2, 0)
    other = chain_graph()   # a plan of another graph: its arrays do not fit this problem
    with pytest.raises(ValueError, match="a plan of 11 ops"):
        problem.schedule(*plan_arrays(sw.strategies.data_parallel(other, sw.DeviceGraph.cpu(2))), 1)
    with pytest.raises(ValueError, match=r"one dA time per op \(11\), got 2"):
        problem.layer_paths(np.zeros(2))
    with pytest.raises(ValueError, match="op 3: dA time nan"):
        problem.layer_paths(np.where(np.arange(11) == 3, np.nan, 1.0))
    with pytest.raises(ValueError, match="op 5: dA time -1"):
        problem.layer_paths(np.where(np.arange(11) == 5, -1.0, 1.0))
    with pytest.raises(ConfigError, match=r"no ops named \['nope'\]"):
        layer_paths(g, {"nope": 1.0})


def test_every_zoo_network_gets_few_streams():
    """Compute streams per device stay few: 2 x levels + levels (dA, dW, dB classes) at most; sync
    streams are one per layer with weights."""
    for g in (sw.models.vgg_small(batch=4), sw.models.resnet18_small(batch=4, width=4)):
        sched = sw.schedule(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)))
        weighted = sum(op.has_weights for op in g.ops)
        assert len([s for s in sched.streams[0] if s.priority > sched.sync_floor]) <= 3 * sched.levels
        assert len([s for s in sched.streams[0] if s.priority <= sched.sync_floor]) == weighted
    vgg = sw.schedule(sw.strategies.data_parallel(sw.models.vgg_small(batch=4), sw.DeviceGraph.cpu(1)))
    assert vgg.blocks == [] and [s.priority for s in vgg.streams[0]][:3] == [0, -1, -2]


# ----------------------------------------------------------------------------- gradient synchronization (point 3)
def _weight_slot_of(tg, t) -> int:
    """The weight slot a sync / update task works on: the slot of the parameter (gradient) it touches."""
    slots = {tg.buffers[b].slot for b in t.reads + t.writes
             if tg.buffers[b].kind in ("param", "param_grad", "momentum", "recv") and tg.buffers[b].slot is not None}
    assert len(slots) <= 1, t
    return slots.pop() if slots else None


@pytest.mark.parametrize("ndev", [2, 4])
def test_sync_tasks_depend_only_on_their_layers_weight_gradients(ndev):
    """Every task of the sync and update phases waits, through other sync tasks of its weight,
    for nothing but that weight's backward_weight tasks (one per replica): a layer's
    synchronization can start as soon as its dW is done, whatever the rest of the backward."""
    g = chain_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(ndev))
    tg = sw.lower(plan)
    tasks = tg.tasks
    slot_of = {}
    for t in tasks:   # the weight slot of every sync task: from its buffers, else from what it waits for
        if t.phase in ("sync", "update"):
            slot = _weight_slot_of(tg, t)
            slot_of[t.id] = slot if slot is not None else next(slot_of[d] for d in t.deps if d in slot_of)
    checked = 0
    for t in tasks:
        if t.phase not in ("sync", "update"):
            continue
        outside, stack, seen = set(), list(t.deps), set()
        while stack:
            d = stack.pop()
            if d in seen:
                continue
            seen.add(d)
            if tasks[d].phase in ("sync", "update"):
                assert tasks[d].op == t.op and slot_of[d] == slot_of[t.id], (t, tasks[d])
                stack.extend(tasks[d].deps)
            else:
                outside.add(d)
        want = {u.id for u in tasks if u.kind == "backward_weight" and u.op == t.op and u.slot == slot_of[t.id]}
        assert outside and outside <= want, t
        if t.kind == "update":   # the update waits for every replica's gradient
            assert outside == want and len(want) > 1, t
        checked += 1
    assert checked > 0


def test_sync_priorities_follow_reuse_distance_on_a_chain():
    """On a chain the next forward needs conv1 first, then conv2, then fc: their sync tasks rank
    in that order (hand-computed: sync_floor = -(levels + beta) = -3, then -4, -5), below every
    compute class, each layer on a stream of its own on every device; fifo keeps one stream."""
    g = chain_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    sched = sw.schedule(plan)
    tg = sw.lower(plan)
    want = {"conv1": -3, "conv2": -4, "fc": -5}
    compute = [a.priority for a in sched.priorities if a.subtask != "sync"]
    streams_of = {}
    for t, a in zip(tg.tasks, sched.priorities):
        if t.phase in ("sync", "update"):
            assert (a.subtask, a.priority) == ("sync", want[t.op]), t
            assert a.priority < min(compute)
            streams_of.setdefault(a.stream, set()).add(t.op)
    assert all(len(ops) == 1 for ops in streams_of.values())
    assert sorted(want, key=want.get, reverse=True) == ["conv1", "conv2", "fc"]
    fifo = sw.schedule(plan, policy="fifo")
    assert {a.priority for a in fifo.priorities} == {0} and all(len(s) == 1 for s in fifo.streams.values())



# ----------------------------------------------------------------------------- the simulator (point 5)
def _shared(durations, share, deps=None):
    """sw_simulate_shared on tasks that all share pool 0 and hold nothing else."""
    n = len(durations)
    deps = deps or [[] for _ in range(n)]
    dep_ptr = np.cumsum([0] + [len(d) for d in deps]).astype(np.int32)
    flat = np.array([x for d in deps for x in d], np.int32)
    start, end, makespan = _core.simulate_shared(np.array(durations, float), dep_ptr, flat, np.zeros(n + 1, np.int32),
                                                 np.zeros(0, np.int32), 0, np.zeros(n, np.int32),
                                                 np.array(share, float), 1)
    return start.tolist(), end.tolist(), makespan


def test_shared_compute_on_hand_made_kernels():
    """Two kernels each filling half the device run in the time of one; two full ones take twice
    as long (the first in rank order first); 3/4 + 1/2: the second runs at (1/4)/(1/2) of its speed
    until the first ends at 1, then alone: 1 + 0.5 = 1.5; a dependency still waits."""
    assert _shared([1, 1], [0.5, 0.5]) == ([0, 0], [1, 1], 1)
    assert _shared([1, 1], [1, 1]) == ([0, 1], [1, 2], 2)
    assert _shared([1, 1], [0.75, 0.5]) == ([0, 0], [1, 1.5], 1.5)
    assert _shared([1, 2, 1], [0.5, 0.5, 0.5], deps=[[], [], [0]]) == ([0, 0, 1], [1, 2, 2], 2)
    # three half kernels: the third waits for room (no share left at 0), then shares
    assert _shared([1, 1, 1], [0.5, 0.5, 0.5]) == ([0, 0, 1], [1, 1, 2], 2)
    with pytest.raises(ValueError, match="share"):
        _shared([1], [0.0])


def test_fifo_replay_is_unchanged_by_shared_compute_and_critical_path_gains():
    """With one stream per device nothing runs side by side, so a GPU's shared compute changes no
    time; under critical_path, kernels too small to fill the device overlap (dW beside dA)."""
    g = sw.models.resnet18_small(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(nodes=1, devices_per_node=1))
    small = sw.simulate(plan, check_memory=False, fill_outputs=1.0)   # every kernel fills the device
    for fill in (1e3, 1e6, 1e9):
        fifo = sw.simulate(plan, check_memory=False, fill_outputs=fill)
        assert fifo.iteration_time == pytest.approx(small.iteration_time, rel=1e-12)
    full = sw.simulate(plan, schedule="critical_path", check_memory=False, fill_outputs=1.0)
    shared = sw.simulate(plan, schedule="critical_path", check_memory=False, fill_outputs=1e9)
    assert shared.iteration_time < full.iteration_time


def _critical_path_by_hand(plan, sched, events) -> list[int]:
    """From the last task to end back through the latest-ending of its dependencies and the task
    before it on its stream (from sw.lower and the schedule, not the simulator's arrays)."""
    tg = sw.lower(plan)
    stream = [a.stream for a in sched.priorities]
    before = {}
    for t in range(len(tg.tasks)):
        prev = [u for u in range(t) if stream[u] == stream[t]]
        before[t] = list(tg.tasks[t].deps) + ([prev[-1]] if prev else [])
    end = {e.task: e.end for e in events}
    t = max(end, key=lambda i: (end[i], -i))
    path = [t]
    while before[t]:
        t = max(before[t], key=lambda i: (end[i], i))
        path.append(t)
    return path[::-1]


def test_plot_timeline_has_a_lane_per_stream_and_outlines_the_critical_path(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    g = chain_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(nodes=1, devices_per_node=2))
    sched = sw.schedule(plan)
    sim = sw.simulate(plan, schedule=sched, check_memory=False)
    assert sim.critical_path == _critical_path_by_hand(plan, sched, sim.events)
    fig = sim.plot_timeline(str(tmp_path / "t.png"))
    assert (tmp_path / "t.png").stat().st_size > 0
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    nstreams = sum(len(s) for s in sched.streams.values())
    assert len([x for x in labels if " stream " in x]) == nstreams
    assert all(x.startswith("link") for x in labels if " stream " not in x)
    # the outlined bars are exactly the critical path's tasks of nonzero length, in their lanes
    outlined = sorted((round(p.vertices[:, 0].min(), 9), round(np.ptp(p.vertices[:, 0]), 9))
                      for c in ax.collections if c.get_gid() == "critical path" for p in c.get_paths())
    want = []
    for t in sim.critical_path:
        e = sim.events[t]
        if e.end > e.start:
            lanes = {r if r.startswith("link") else "stream" for r in e.resources}
            want += [(round(e.start * 1e3, 9), round((e.end - e.start) * 1e3, 9))] * len(lanes)
    assert outlined == sorted(want) and want
