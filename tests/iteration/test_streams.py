"""Prioritized streams (issue 14, points 4 and 6): the order, the memory plan and the CPU runtime.

* FIFO gives back the one-stream-per-device order entry for entry: the order built from a
  fifo schedule's streams equals the one built without streams and a rule written here
  (the task before it on its device, its dependencies, the reuse edges into it).
* With a critical-path schedule's streams, every conflicting pair of accesses to a buffer
  and every pair of buffers sharing arena bytes is ordered by the order's transitive
  closure, computed here from the task graph alone; the C validator agrees, and refuses
  the plan without its multi-stream reuse edges.
* The CPU backend honours priorities: one thread running every stream takes, at each
  step, the most urgent stream whose next task may start (a rule replayed here).
* Numerics do not depend on the schedule: fifo and critical_path give bitwise-identical
  losses, weights and momentum (so gradients) on random plans, with random pauses.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.iteration.lower import lower, plan_arrays
from shardwise.iteration.memory import _problem
from shardwise.train.runtime import NativeExecutor, op_attrs
from shardwise.train.trainer import SGD, Trainer

from strategies_random import random_plan
from shared_graphs import mixed_graph
from task_checks import ancestors

OPT = SGD(lr=0.05, momentum=0.9, weight_decay=1e-4)


# --------------------------------------------------------------------------- references written here
def order_of(plan, schedule=None) -> list[set[int]]:
    """What every task runs after on the runtime, from the core (csrc/mem/order.c)."""
    streams = schedule.stream_arrays() if schedule is not None else None
    r = _problem(plan).task_order(*plan_arrays(plan), streams=streams)
    ptr, ids = r["ptr"].tolist(), r["ids"].tolist()
    return [set(ids[ptr[t]:ptr[t + 1]]) for t in range(len(ptr) - 1)]


def one_stream_order(tg, reuse_edges) -> list[set[int]]:
    """The order the lowering was made for: the task before it on its device, its
    dependencies and the memory plan's reuse edges into it."""
    out: list[set[int]] = [set(t.deps) for t in tg.tasks]
    last: dict[int, int] = {}
    for t in tg.tasks:
        if t.device in last:
            out[t.id].add(last[t.device])
        last[t.device] = t.id
    for a, b in reuse_edges:
        out[b].add(a)
    return out


def conflicting_pairs(tg) -> set[tuple[int, int]]:
    """Every pair (x, u), x < u, of distinct tasks touching one buffer where one of them writes it."""
    touches: dict[int, list[tuple[int, bool]]] = {}
    for t in tg.tasks:
        for b in set(t.reads) | set(t.writes):
            touches.setdefault(b, []).append((t.id, b in t.writes))
    pairs = set()
    for acc in touches.values():
        for i, (x, wx) in enumerate(acc):
            for u, wu in acc[i + 1:]:
                if x != u and (wx or wu):
                    pairs.add((x, u))
    return pairs


def sharing_pairs(tg, mp) -> list[tuple[int, int]]:
    """Buffers of one device whose arena bytes overlap."""
    out = []
    for d in range(len(tg.plan.devices)):
        bufs = [b for b in tg.buffers if b.device == d and b.nbytes]
        for i, a in enumerate(bufs):
            lo, hi = mp.offset(a.id), mp.offset(a.id) + a.nbytes
            for b in bufs[i + 1:]:
                if mp.offset(b.id) < hi and lo < mp.offset(b.id) + b.nbytes:
                    out.append((a.id, b.id))
    return out


def assert_order_is_safe(plan, schedule):
    """Everything the runtime must keep in order is, by the order's transitive closure."""
    tg = lower(plan)
    order = order_of(plan, schedule)
    stream = [p.stream for p in schedule.priorities]
    last: dict[int, int] = {}
    for t in tg.tasks:   # the task before it on its stream is in its list
        if stream[t.id] in last:
            assert last[stream[t.id]] in order[t.id]
        last[stream[t.id]] = t.id
    anc = ancestors(order)
    for x, u in conflicting_pairs(tg):
        assert anc[u] >> x & 1, f"tasks {x} and {u} conflict over a buffer but may run in either order"
    mp = sw.memory_plan(plan, schedule=schedule)
    touched: dict[int, list[int]] = {}
    for t in tg.tasks:
        for b in set(t.reads) | set(t.writes):
            touched.setdefault(b, []).append(t.id)
    for a, b in sharing_pairs(tg, mp):
        ta, tb = touched[a], touched[b]
        if ta[0] > tb[0]:
            ta, tb = tb, ta
        for x in ta:
            for u in tb:
                assert anc[u] >> x & 1, f"buffers {a} and {b} share bytes but tasks {x} and {u} are not ordered"
    mp.validate()   # the C validator agrees
    return tg, order, mp


def plans_of(g, n, rng):
    d = sw.DeviceGraph.cpu(n)
    return {"data": sw.strategies.data_parallel(g, d), "model": sw.strategies.model_parallel(g, d),
            "searched": sw.search(g, d), "random": random_plan(g, d, rng, reductions=True)}


# --------------------------------------------------------------------------- the order
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_fifo_gives_back_the_one_stream_order_exactly(n):
    rng = np.random.default_rng(n)
    for g in (mixed_graph(), sw.models.get("resnet18_small", batch=8)):
        for name, plan in plans_of(g, n, rng).items():
            fifo = sw.schedule(plan, policy="fifo")
            assert all(len(s) == 1 for s in fifo.streams.values() if s)
            without = order_of(plan)
            assert order_of(plan, fifo) == without, name
            mp = sw.memory_plan(plan)
            assert sw.memory_plan(plan, schedule=fifo).reuse_edges == mp.reuse_edges
            assert without == one_stream_order(lower(plan), mp.reuse_edges), name


@pytest.mark.parametrize("seed", range(6))
def test_critical_path_orders_keep_every_conflict_and_every_shared_byte(seed):
    rng = np.random.default_rng(seed)
    g = mixed_graph() if seed % 2 else sw.models.get("resnet18_small", batch=4)
    n = 1 + seed % 4
    for name, plan in plans_of(g, n, rng).items():
        for policy in ("fifo", "critical_path"):
            schedule = sw.schedule(plan, policy=policy)
            assert_order_is_safe(plan, schedule)
            if policy == "critical_path":
                assert max(len(s) for s in schedule.streams.values()) > 1, name


def test_an_update_waits_for_the_activation_gradient_that_reads_its_weight():
    """The write after read one stream used to keep: on one device the update of a weight
    (dW stream) must follow the dA task reading that weight (dA stream); the order names it."""
    g = sw.models.get("resnet18_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    schedule = sw.schedule(plan)
    tg, order = lower(plan), order_of(plan, schedule)
    stream = [p.stream for p in schedule.priorities]
    checked = 0
    for u in tg.tasks:
        if u.kind != "update":
            continue
        for x in tg.tasks[:u.id]:
            if x.kind == "backward_data" and set(x.reads) & set(u.writes):
                assert stream[x.id] != stream[u.id]
                assert x.id in order[u.id]
                checked += 1
    assert checked >= 10


def test_the_validator_needs_the_multi_stream_reuse_edges():
    g = sw.models.get("resnet18_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    schedule = sw.schedule(plan)
    mp = sw.memory_plan(plan, schedule=schedule)
    one = sw.memory_plan(plan)
    assert len(mp.reuse_edges) > len(one.reuse_edges)
    a, streams = mp.arrays, schedule.stream_arrays()
    problem = _problem(plan)
    problem.check_memory_plan(*plan_arrays(plan), a["offset"], a["arena"], a["reuse_from"], a["reuse_to"], 64,
                              streams)
    for f, t in ((np.zeros(0, np.int32), np.zeros(0, np.int32)), (one.arrays["reuse_from"], one.arrays["reuse_to"])):
        with pytest.raises(ValueError, match="does not happen before"):
            problem.check_memory_plan(*plan_arrays(plan), a["offset"], a["arena"], f, t, 64, streams)


def test_synchronization_buffers_lie_apart_under_several_streams():
    """Under fifo, placement is by lifetimes over program order.  With several streams per
    device, the buffers synchronization touches (weight gradients and the gradients received
    from other replicas: their last task is in the sync or update phase) get bytes above every
    other buffer of their device, so no reuse edge holds a transfer behind the backward pass
    or the next forward behind an update, and they share bytes only among themselves."""
    g = sw.models.get("inception_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    tg = lower(plan)
    a = sw.memory_plan(plan).arrays
    b = sw.memory_plan(plan, schedule=sw.schedule(plan)).arrays
    last = {}
    for t in tg.tasks:
        for x in t.reads + t.writes:
            last[x] = t
    pooled = {x for x, t in last.items() if t.phase in ("sync", "update") and b["last"][x] < len(tg.tasks)}
    assert {tg.buffers[x].kind for x in pooled} == {"recv", "param_grad"}
    rest = [x.id for x in tg.buffers if x.id not in pooled]
    for d in range(len(plan.devices)):
        mine = [x for x in rest if tg.buffers[x].device == d]
        top = max((int(b["offset"][x] + b["bytes"][x]) for x in mine), default=0)
        pool = [x for x in pooled if tg.buffers[x].device == d]
        assert pool and all(b["offset"][x] >= top for x in pool)
        assert b["arena"][d] >= max(int(b["offset"][x] + b["bytes"][x]) for x in pool)
    assert b["arena"][0] > a["arena"][0]   # the lead replica receives: its arena grows
    lead = [x for x in pooled if tg.buffers[x].device == 0]
    assert b["arena"][0] - a["arena"][0] < sum(int(b["bytes"][x]) for x in lead)   # they share bytes


@pytest.mark.parametrize("ndev", [1, 2])
def test_synchronization_waits_for_its_layer_not_for_the_backward(ndev):
    """Under critical_path, the last layer's synchronization and update run after its own
    dW / dB, not after the rest of the backward pass: none of the first layer's backward
    tasks happens before them.  Under fifo (program order on one stream) all of them do."""
    g = sw.models.get("resnet18_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(ndev))
    tg = lower(plan)
    weighted = [t.op for t in tg.tasks if t.kind == "backward_weight"]
    first_op, last_op = weighted[-1], weighted[0]   # the backward runs the ops in reverse
    first_bwd = [t.id for t in tg.tasks if t.phase == "backward" and t.op == first_op]
    last_sync = [t.id for t in tg.tasks if t.phase in ("sync", "update") and t.op == last_op]
    assert first_bwd and last_sync
    for policy, waits in (("fifo", True), ("critical_path", False)):
        anc = ancestors(order_of(plan, sw.schedule(plan, policy=policy)))
        for u in last_sync:
            assert any(anc[u] >> x & 1 for x in first_bwd) == waits, (policy, tg.tasks[u])


def test_simulated_synchronization_overlaps_the_backward():
    """The simulator replays the same order: under critical_path on GPUs, transfers of
    gradients start while the backward pass of the device receiving them still runs; under
    fifo after it."""
    g = sw.models.get("resnet18_small", batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cluster(nodes=1, devices_per_node=2))
    tg = lower(plan)
    for policy in ("fifo", "critical_path"):
        ev = sw.simulate(plan, schedule=policy, check_memory=False).events
        sync = [e for e in ev if tg.tasks[e.task].phase == "sync"]
        sync_start = min(e.start for e in sync)
        lead = tg.tasks[sync[0].task].device
        bwd_end = max(e.end for e in ev if tg.tasks[e.task].phase == "backward" and tg.tasks[e.task].device == lead)
        assert (sync_start < bwd_end) == (policy == "critical_path")


def test_streams_that_do_not_fit_the_plan_are_refused():
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    stream, device, priority = sw.schedule(plan).stream_arrays()
    problem = _problem(plan)
    bad = {
        "for 3 tasks": (stream[:3], device, priority),
        "runs on stream": (np.full_like(stream, len(device)), device, priority),
        "lies on device": (stream, np.full_like(device, 7), priority),
        "one entry per stream": (stream, device, priority[:-1]),
        "runs on device": (np.zeros_like(stream), device, priority),
    }
    for why, streams in bad.items():
        with pytest.raises(ValueError, match=why):
            problem.task_order(*plan_arrays(plan), streams=streams)
        with pytest.raises(ValueError, match=why):
            _core.Runtime(problem, *plan_arrays(plan), op_attrs(g), 1, streams=streams)
    with pytest.raises(ValueError, match="streams must be"):
        problem.task_order(*plan_arrays(plan), streams=(stream, device))


# --------------------------------------------------------------------------- the CPU backend
def replay_priority_rule(order: list[set[int]], stream: list[int], priority: list[int]) -> list[int]:
    """One thread running every stream: repeatedly the most urgent stream (priority, then the
    task first in program order) whose next task has everything it runs after done."""
    queues: dict[int, list[int]] = {}
    for t, s in enumerate(stream):
        queues.setdefault(s, []).append(t)
    done: set[int] = set()
    out: list[int] = []
    heads = {s: 0 for s in queues}
    while len(out) < len(stream):
        ready = [s for s, q in queues.items() if heads[s] < len(q) and order[q[heads[s]]] <= done]
        assert ready, "the rule never gets stuck: the lowest unfinished task is ready"
        s = min(ready, key=lambda k: (-priority[k], queues[k][heads[k]]))
        t = queues[s][heads[s]]
        heads[s] += 1
        done.add(t)
        out.append(t)
    return out


def test_one_thread_runs_the_most_urgent_ready_task_first():
    g = sw.models.get("resnet18_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    schedule = sw.schedule(plan)
    tg = lower(plan)
    t = Trainer(g, plan, optimizer=OPT, schedule=schedule)
    t.executor = NativeExecutor(g, plan, tg, threads=1, schedule=schedule)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    t.step(x, rng.integers(0, g.ops[-1].shape[1], 4))
    ns, _, _ = t.executor.task_times()
    ran = sorted(range(len(tg.tasks)), key=lambda i: ns[i, 0])
    stream = [p.stream for p in schedule.priorities]
    priority = schedule.arrays["stream_priority"].tolist()
    want = replay_priority_rule(order_of(plan, schedule), stream, priority)
    assert ran == want
    assert ran != sorted(ran), "priorities reorder the tasks: not program order"


def _batch(g, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    return x, rng.integers(0, g.ops[-1].shape[1], g.ops[0].shape[0])


def _run(g, plan, schedule, x, y, threads, jitter_us, steps=3):
    t = Trainer(g, plan, optimizer=OPT, seed=0, schedule=schedule)
    weights = t.get_weights()
    t.executor = NativeExecutor(g, plan, t.task_graph, threads=threads, jitter_us=jitter_us,
                                schedule=t.schedule)
    t.set_weights(weights)
    losses = [t.step(x, y) for _ in range(steps)]
    momentum = {b: v.copy() for b, v in t.executor.persistent.items()}
    return losses, t.get_weights(), momentum


def _assert_identical(a, b, what):
    (la, wa, ma), (lb, wb, mb) = a, b
    assert la == lb, what
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=f"{what}: {k}")
    for k in ma:
        np.testing.assert_array_equal(ma[k], mb[k], err_msg=f"{what}: buffer {k}")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_fifo_and_critical_path_give_the_same_bits(n):
    """Random plans of every kind on n CPU workers, several steps, random pauses before every
    task under critical_path: losses, weights and momentum (the gradients) bit for bit."""
    rng = np.random.default_rng(10 + n)
    g = mixed_graph()
    x, y = _batch(g, n)
    for name, plan in plans_of(g, n, rng).items():
        fifo = _run(g, plan, "fifo", x, y, threads=n, jitter_us=0)
        critical = _run(g, plan, "critical_path", x, y, threads=n, jitter_us=200)
        _assert_identical(fifo, critical, f"{name} on {n}")


def test_adam_and_running_statistics_give_the_same_bits_under_critical_path():
    """Adam keeps two state buffers per slice and batch norm updates running statistics in the
    forward pass: more buffers whose accesses the streams must keep in order."""
    g = mixed_graph()
    x, y = _batch(g, 5)
    plan = random_plan(g, sw.DeviceGraph.cpu(3), np.random.default_rng(5), reductions=True)
    runs = []
    for schedule, jitter in (("fifo", 0), ("critical_path", 200)):
        t = Trainer(g, plan, optimizer=sw.Adam(lr=1e-3), seed=0, schedule=schedule)
        weights = t.get_weights()
        t.executor = NativeExecutor(g, plan, t.task_graph, threads=3, jitter_us=jitter,
                                    optimizer_state=t.optimizer.state_buffers, schedule=t.schedule)
        t.set_weights(weights)
        losses = [t.step(x, y) for _ in range(3)]
        runs.append((losses, t.get_weights(), {b: v.copy() for b, v in t.executor.persistent.items()}))
    _assert_identical(*runs, "adam")


def test_a_deeper_network_gives_the_same_bits_on_two_threads():
    g = sw.models.get("inception_small", batch=4)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    x, y = _batch(g, 1)
    _assert_identical(_run(g, plan, "fifo", x, y, threads=2, jitter_us=0, steps=2),
                      _run(g, plan, "critical_path", x, y, threads=2, jitter_us=100, steps=2), "inception_small")


def test_a_failing_kernel_under_critical_path_stops_the_step_and_the_next_one_runs():
    g = sw.models.lenet5(batch=8)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    t, fresh = (Trainer(g, plan, optimizer=OPT, schedule="critical_path") for _ in range(2))
    x, y = _batch(g, 0)
    with pytest.raises(ValueError, match="label"):
        t.executor.run(x, np.full(8, 99, np.int32), optimizer=OPT)
    assert t.step(x, y) == fresh.step(x, y)


# --------------------------------------------------------------------------- the Trainer's argument
def test_trainer_takes_a_policy_or_a_schedule_of_its_plan():
    g = sw.models.lenet5(batch=8)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    assert Trainer(g, plan).schedule is None
    assert Trainer(g, plan, schedule="critical_path").schedule.policy == "critical_path"
    s = sw.schedule(plan, policy="fifo")
    assert Trainer(g, plan, schedule=s).schedule is s
    other = sw.schedule(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    with pytest.raises(sw.ConfigError, match="configurations"):
        Trainer(g, plan, schedule=other)
    for bad in ("fastest", None, 3):
        with pytest.raises(sw.ConfigError, match="schedule must be"):
            Trainer(g, plan, schedule=bad)
    x, y = _batch(g, 2)
    a, b = Trainer(g, plan, schedule="fifo"), Trainer(g, plan, schedule=s)
    assert [a.step(x, y) for _ in range(2)] == [b.step(x, y) for _ in range(2)]


# --------------------------------------------------------------------------- the simulator (point 5, in part)
def test_simulating_fifo_is_simulating_without_a_schedule():
    g = mixed_graph()
    plan = random_plan(g, sw.DeviceGraph.cpu(3), np.random.default_rng(3), reductions=True)
    base = [(e.start, e.end) for e in sw.simulate(plan).events]
    for schedule in ("fifo", sw.schedule(plan, policy="fifo")):
        assert [(e.start, e.end) for e in sw.simulate(plan, schedule=schedule).events] == base


@pytest.mark.parametrize("case", ["cpu3", "cpu4 on 2 cores", "p100_1x4", "k80_2x2"])
def test_critical_path_simulation_is_the_oracles_event_loop_with_priorities(case):
    """The C replay under a schedule equals tests/sim_oracle.py's event loop fed the runtime's
    multi-stream order and ranking every line by (-stream priority, task id)."""
    import sim_oracle
    from strategies_random import device_graph_cases

    if case == "cpu4 on 2 cores":
        d = sw.DeviceGraph.cpu(4)
        d.shared_cores = 2
    else:
        d = device_graph_cases()[case]
    rng = np.random.default_rng(len(case))
    for g in (mixed_graph(), sw.models.get("resnet18_small", batch=8)):
        for plan in (random_plan(g, d, rng, reductions=True), sw.strategies.model_parallel(g, d)):
            schedule = sw.schedule(plan)
            order = [tuple(sorted(s)) for s in order_of(plan, schedule)]
            priority = schedule.arrays["stream_priority"]
            rank = [(-int(priority[p.stream]), p.task) for p in schedule.priorities]
            want = sim_oracle.replay(plan, order=order, rank=rank)
            # the oracle gives a device to one task at a time: GPUs' shared compute off (fill_outputs=0)
            got = sw.simulate(plan, schedule=schedule, check_memory=False, fill_outputs=0)
            assert got.iteration_time == pytest.approx(want.iteration_time, rel=1e-12, abs=1e-18)
            for e in got.events:
                assert e.start == pytest.approx(want.start[e.task], rel=1e-12, abs=1e-18), e


def test_the_simulator_predicts_the_task_sequence_one_thread_runs():
    """Two devices on one core: the runtime's thread and the simulator follow one rule (the most
    urgent ready task), so the simulated sequence of the thread's tasks is the measured one."""
    g = sw.models.get("resnet18_small", batch=4)
    d = sw.DeviceGraph.cpu(2)
    d.shared_cores = 1
    plan = sw.strategies.model_parallel(g, d)
    schedule = sw.schedule(plan)
    t = Trainer(g, plan, optimizer=OPT, schedule=schedule)
    assert t.executor.threads == 1
    x, y = _batch(g, 0)
    t.step(x, y)
    ns, _, _ = t.executor.task_times()
    sim = sw.simulate(plan, schedule=schedule, check_memory=False)
    on_core = [e for e in sim.events if "core 0" in e.resources]
    predicted = [e.task for e in sorted(on_core, key=lambda e: (e.start, e.task))]
    measured = sorted((e.task for e in on_core), key=lambda i: ns[i, 0])
    assert predicted == measured
    assert predicted != sorted(predicted)
