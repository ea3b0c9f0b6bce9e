"""Steps back to back in one launch: ``Trainer(..., steps_in_flight=k)`` (issue 14, point 3;
csrc/exec/pipeline.c).

* Bitwise: k steps back to back give the losses, weights, optimizer state (SGD momentum, Adam
  moments and step counts with a learning-rate schedule), running statistics and dropout
  masks of the same steps one at a time, on one worker, data parallel on 2, a channel split,
  random plans, fifo and critical_path, with random delays before every task.
* fit with steps in flight trains on the same minibatches as one at a time (groups across
  epoch boundaries, the remainder one at a time); a callback makes it one at a time.
* Bad input in the middle of a group: the steps before it train, the bad one raises ShapeError,
  exactly as one at a time; configurations it cannot run are refused with ConfigError.
* What the runtime runs (the recorded list, on the record backend): every task of the second
  iteration after its own dependencies and after the first iteration's conflicting accesses to
  what they share, computed here from the task graph alone; and no barrier: the next forward's
  first layer does not wait for all of the step before.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.errors import ConfigError, ShapeError
from shardwise.iteration.lower import lower, plan_arrays
from shardwise.planning.problem import make_problem
from shardwise.train.runtime import NativeExecutor, op_attrs
from shardwise.train.trainer import Trainer, TrainingError

from strategies_random import random_plan
from shared_graphs import dropout_graph
from task_checks import ancestors
from shared_graphs import mixed_graph

RUN, WAIT, RECORD = 0, 1, 2
PERSISTENT = {"param", "momentum", "running"}


def batches_of(g: sw.Graph, count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``count`` different minibatches (each step must see its own)."""
    rng = np.random.default_rng(seed)
    classes = g.ops[-1].shape[-1]
    return [(rng.standard_normal(g.ops[0].shape).astype(np.float32), rng.integers(0, classes, g.ops[0].shape[0]))
            for _ in range(count)]


def trained(g, plan, opt, batches, k, schedule="fifo", jitter_us=0):
    """(losses, weights, every persistent buffer, update counts) after the batches, k at a time."""
    t = Trainer(g, plan, optimizer=opt, seed=0, schedule=schedule, steps_in_flight=k)
    if jitter_us:   # random pauses before every task, one thread per device: shake the timing
        weights = t.get_weights()
        t.executor = NativeExecutor(g, plan, t.task_graph, threads=len(plan.devices), jitter_us=jitter_us,
                                    schedule=t.schedule, optimizer_state=opt.state_buffers)
        t.set_weights(weights)
    losses: list[float] = []
    if k == 1:
        losses = [t.step(x, y) for x, y in batches]
    else:
        for i in range(0, len(batches), k):
            losses += t._steps(batches[i:i + k])
    assert t.steps == len(batches)
    state = {b: v.copy() for b, v in t.executor.persistent.items()}
    return losses, t.get_weights(), state, t.executor.updates()


def assert_identical(a, b, what):
    (la, wa, sa, ua), (lb, wb, sb, ub) = a, b
    assert la == lb, what
    assert wa.keys() == wb.keys() and sa.keys() == sb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=f"{what}: {k}")
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=f"{what}: buffer {k}")
    assert ua == ub, what


OPTIMIZERS = {
    "sgd": lambda: sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adam": lambda: sw.Adam(lr=sw.lr_schedules.warmup(sw.lr_schedules.cosine(3e-3, 6), 2), weight_decay=1e-4),
    "adamw": lambda: sw.AdamW(lr=sw.lr_schedules.step(3e-3, 1, gamma=0.5), weight_decay=0.01),
}


def plans(g):
    return {"one worker": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)),
            "data parallel 2": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)),
            "channel split 2": sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(2))}


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("which", ["one worker", "data parallel 2", "channel split 2"])
def test_back_to_back_is_bitwise_one_at_a_time(which, opt):
    g = mixed_graph()
    plan = plans(g)[which]
    batches = batches_of(g, 6)
    want = trained(g, plan, OPTIMIZERS[opt](), batches, 1)
    assert len(set(want[0])) == 6   # each step its own loss: its own minibatch and weights
    for k in (2, 3):
        assert_identical(want, trained(g, plan, OPTIMIZERS[opt](), batches, k, jitter_us=100 if k == 3 else 0),
                         f"{which}, {opt}, {k} in flight")


@pytest.mark.parametrize("seed", range(4))
def test_random_plans_back_to_back(seed):
    rng = np.random.default_rng(seed)
    g = mixed_graph()
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(2, 5))), rng, reductions=seed % 2 == 1)
    batches = batches_of(g, 4, seed)
    opt = OPTIMIZERS[("sgd", "adamw")[seed % 2]]
    policy = ("fifo", "critical_path")[seed // 2]
    want = trained(g, plan, opt(), batches, 1, schedule=policy)
    assert_identical(want, trained(g, plan, opt(), batches, 2, schedule=policy, jitter_us=150),
                     f"seed {seed}, {policy}")


def test_dropout_masks_follow_each_step():
    """Dropout's masks are a function of the step count: step i of a group uses step i's."""
    g = dropout_graph()
    plan = random_plan(g, sw.DeviceGraph.cpu(2), np.random.default_rng(1))
    batches = batches_of(g, 4, 3)
    want = trained(g, plan, OPTIMIZERS["sgd"](), batches, 1)
    assert_identical(want, trained(g, plan, OPTIMIZERS["sgd"](), batches, 4, schedule="critical_path"), "dropout")


def test_fit_with_steps_in_flight_is_fit_one_at_a_time():
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((44,) + g.ops[0].shape[1:]).astype(np.float32)   # 5 minibatches of 8, 4 dropped
    y = rng.integers(0, 5, 44)
    runs = []
    for k in (1, 3):   # 15 steps over 3 epochs: groups cross epoch boundaries
        t = Trainer(g, plan, optimizer=OPTIMIZERS["adam"](), steps_in_flight=k)
        runs.append((t.fit(x, y, epochs=3, shuffle_seed=2), t.get_weights(), t.steps))
    assert runs[0][0] == runs[1][0] and len(runs[0][0]) == 3
    assert runs[0][2] == runs[1][2] == 15
    for key, v in runs[0][1].items():
        np.testing.assert_array_equal(v, runs[1][1][key], err_msg=key)


def test_a_callback_sees_every_step():
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    x, y = np.concatenate([b[0] for b in batches_of(g, 3)]), np.concatenate([b[1] for b in batches_of(g, 3)])
    seen = {}
    for k in (1, 2):
        t = Trainer(g, plan, steps_in_flight=k)
        calls = []
        t.fit(x, y, epochs=2, callback=lambda e, b, loss: calls.append((e, b, loss, t.steps)))
        seen[k] = calls
    assert seen[1] == seen[2]
    assert [c[3] for c in seen[2]] == list(range(1, 7))   # called after each step, one at a time


def test_bad_input_in_a_group_trains_the_steps_before_it():
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    batches = batches_of(g, 3)
    for bad, match in ((batches[1][0].copy(), "NaN"), (None, "labels")):
        group = list(batches)
        if bad is not None:
            bad[0, 0, 0, 0] = np.nan
            group[1] = (bad, batches[1][1])
        else:
            group[1] = (batches[1][0], np.full(8, 99))
        t = Trainer(g, plan, steps_in_flight=3)
        with pytest.raises(ShapeError, match=match):
            t._steps(group)
        assert t.steps == 1   # the first step trained, the bad one raised, the third never ran
        one = Trainer(g, plan)
        one.step(*batches[0])
        for key, v in one.get_weights().items():
            np.testing.assert_array_equal(v, t.get_weights()[key], err_msg=key)
        assert t._steps(batches) == [one.step(*b) for b in batches]   # and it goes on as one at a time


def test_fit_stops_at_the_first_bad_minibatch():
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((48,) + g.ops[0].shape[1:]).astype(np.float32)
    y = rng.integers(0, 5, 48)
    x[17, 1, 2, 3] = np.inf
    order = np.random.default_rng(4).permutation(48)   # fit's shuffle of the first epoch
    first_bad = int(np.flatnonzero(order == 17)[0]) // 8
    t = Trainer(g, plan, steps_in_flight=4)
    with pytest.raises(ShapeError, match="NaN or infinity"):
        t.fit(x, y, shuffle_seed=4)
    assert t.steps == first_bad


def test_refused_configurations():
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    for k in (0, 9, True, 2.0, "2"):
        with pytest.raises(ConfigError, match="steps_in_flight"):
            Trainer(g, plan, steps_in_flight=k)
    swap = sw.swap_plan(plan, {d: 10 ** 9 for d in range(2)}) if hasattr(sw, "swap_plan") else None
    if swap is not None:
        with pytest.raises(ConfigError, match="swap"):
            Trainer(g, plan, swap=swap, steps_in_flight=2)
    t = Trainer(g, plan, steps_in_flight=2)
    t.eval()
    with pytest.raises(TrainingError, match="eval mode"):
        t.fit(*[np.concatenate(a) for a in zip(*batches_of(g, 2))])
    t.train()
    with pytest.raises(ConfigError, match="3 steps back to back"):
        t._steps(batches_of(g, 3))
    rt = t.executor._rt
    t.fit(*[np.concatenate(a) for a in zip(*batches_of(g, 2))])
    with pytest.raises(ValueError, match="runs 2 steps back to back already"):
        rt.pipeline(3)
    with pytest.raises(ValueError, match="runs 2 steps back to back, got 1"):
        rt.steps_back_to_back([()])
    with pytest.raises(TypeError, match="tuple"):
        rt.steps_back_to_back([1, 2])


# ---------------------------------------------------------------- what the runtime runs
def recorded_order(g, plan, schedule, k):
    """Per task of the k iterations, what it runs after in the list the runtime recorded (the
    record backend keeps it): the task before it on its stream and the tasks it waits for."""
    problem = make_problem(g, plan.devices, plan.options)
    streams = schedule.stream_arrays() if schedule is not None else None
    rt = _core.Runtime(problem, *plan_arrays(plan), op_attrs(g), 1, backend="record", streams=streams)
    rt.pipeline(k)
    ops, stream, ids, _, _ = rt.recorded(2)
    n = len(lower(plan).tasks)
    preds: list[set[int]] = [set() for _ in range(k * n)]
    last: dict[int, int] = {}
    waits: dict[int, set[int]] = {}
    ran = []
    for op, s, i in zip(ops, stream, ids):
        if op == WAIT:
            waits.setdefault(s, set()).add(i)
        elif op == RUN:
            preds[i] = waits.pop(s, set()) | ({last[s]} if s in last else set())
            last[s] = i
            ran.append(i)
    assert sorted(ran) == list(range(k * n))   # every task of every iteration once
    return preds, n


@pytest.mark.parametrize("policy", ["fifo", "critical_path"])
def test_the_recorded_list_orders_what_iterations_share(policy):
    g = mixed_graph()
    plan = random_plan(g, sw.DeviceGraph.cpu(3), np.random.default_rng(2), reductions=True)
    schedule = sw.schedule(plan, policy=policy)
    preds, n = recorded_order(g, plan, schedule, 2)
    anc = ancestors(preds)
    tg = lower(plan)
    for t in tg.tasks:   # each iteration's own data flow
        for d in t.deps:
            assert anc[t.id] >> d & 1 and anc[n + t.id] >> (n + d) & 1
    host = {b for t in tg.tasks if t.kind == "loss" for b in t.writes}
    touches: dict[int, list[tuple[int, bool]]] = {}
    for t in tg.tasks:
        for b in set(t.reads) | set(t.writes):
            touches.setdefault(b, []).append((t.id, b in t.writes))
    checked = 0
    for b in tg.buffers:
        if b.kind in PERSISTENT or b.id in host:
            for x, wx in touches.get(b.id, []):
                for u, wu in touches.get(b.id, []):
                    if wx or wu:
                        assert anc[n + u] >> x & 1, f"buffer {b.id}: task {x}, the next iteration's {u} unordered"
                        checked += 1
    assert checked > 50


@pytest.mark.parametrize("policy", ["fifo", "critical_path"])
def test_no_barrier_between_the_iterations(policy):
    """Data parallel on 2 workers: the second step's first forward task on worker 0 runs after
    its own layer's update, but not after all of the first step (a barrier would put every task
    of it before); under critical_path not even after worker 0's updates of the later layers."""
    g = sw.models.get("resnet18_small", batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    tg = lower(plan)
    preds, n = recorded_order(g, plan, sw.schedule(plan, policy=policy), 2)
    anc = ancestors(preds)
    first = min(t.id for t in tg.tasks if t.kind == "forward" and t.device == 0)
    op = tg.tasks[first].op
    own = [t.id for t in tg.tasks if t.kind == "update" and t.op == op and t.device == 0]
    assert own and all(anc[n + first] >> u & 1 for u in own)
    free = [tg.tasks[t] for t in range(n) if not anc[n + first] >> t & 1]
    assert len(free) > 10   # tasks of the first step the second's forward does not wait for
    later_updates = [t for t in free if t.kind == "update" and t.device == 0]
    assert bool(later_updates) == (policy == "critical_path")
