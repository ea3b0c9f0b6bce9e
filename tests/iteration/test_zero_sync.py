"""ZeRO-style sharded optimizer state (``CostOptions(sync="zero")``) lowered, planned, simulated
and trained.

A replica group of k > 1 workers whose weight box cuts into k chunks is lowered as the ring's
reduce-scatter, then member i alone updates the chunk it holds summed ((i + 1) mod k), with
optimizer state of that chunk only, then an allgather of the updated weight chunks
(csrc/graph/lower_backward.c, sync_ring).  Checked here: the task graph against the ring's
(the same tasks and bytes, updates and state cut k ways, nothing changed for split weights),
training bitwise equal to the ring's (SGD with momentum, Adam, AdamW; 2 and 4 workers; data
parallel, random and searched plans) and close to the NumPy reference, the optimizer state per
device against hand-computed figures, the footprint model against the memory plan, the
simulator against the ring's, and the command line.
"""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

import shardwise as sw
from shardwise.iteration.lower import lower
from shardwise.train.trainer import Trainer

from shared_graphs import mixed_graph
from strategies_random import random_plan
from training_checks import RTOL, assert_close_weights, reference_run

RING = sw.CostOptions(sync="ring")
ZERO = sw.CostOptions(sync="zero")
OPTIMIZERS = [sw.SGD(lr=0.1, momentum=0.9, weight_decay=1e-4), sw.Adam(lr=1e-3, weight_decay=1e-3),
              sw.AdamW(lr=1e-3, weight_decay=1e-2)]
OPT_IDS = ["SGD-momentum", "Adam", "AdamW"]


def batch_of(g: sw.Graph, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(g.ops[0].shape).astype(np.float32),
            rng.integers(0, g.ops[-1].shape[-1], g.ops[0].shape[0]))


def with_sync(plan: sw.Plan, options: sw.CostOptions) -> sw.Plan:
    return sw.Plan(plan.graph, plan.devices, plan.configs, options)


def volume(box) -> int:
    return int(np.prod([hi - lo for lo, hi in box]))


def small_mlp(batch: int = 8) -> sw.Graph:
    """x (8, 8) -> linear 6 (ReLU) -> linear 4 -> softmax: weights of 48, 6, 24 and 4 elements."""
    g = sw.Graph("mlp")
    x = g.input("x", (batch, 8))
    x = g.linear(x, 6, activation="relu", name="fc1")
    x = g.linear(x, 4, name="fc2")
    g.softmax(x, name="prob")
    return g


# --------------------------------------------------------------------------- the task graph
@pytest.mark.parametrize("k", [2, 4])
def test_zero_is_the_ring_with_each_chunk_updated_by_one_member(k):
    """Data parallel mixed graph on k workers: the same tasks of each kind as the ring and the same
    bytes between devices (the allgather moves weight chunks instead of gradient chunks); per
    weight, k updates whose boxes cut the weight into disjoint chunks covering it once, each on its
    own member, its state buffers that chunk; the allgather writes the parameters."""
    g = mixed_graph()
    ring_tg = lower(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(k), RING))
    zero_tg = lower(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(k), ZERO))
    assert Counter(t.kind for t in zero_tg.tasks) == Counter(t.kind for t in ring_tg.tasks)
    assert zero_tg.bytes_moved() == ring_tg.bytes_moved()
    shapes = {(op.name, s): tuple(i.shape) for op in g.ops for s, i in enumerate(op.desc.inputs) if i.role == 1}
    for (op, slot), shape in shapes.items():
        updates = [t for t in zero_tg.tasks if t.kind == "update" and t.op == op
                   and zero_tg.buffers[t.writes[0]].slot == slot]
        assert sorted(t.device for t in updates) == list(range(k)), op
        covered = np.zeros(shape, int)
        for t in updates:
            covered[tuple(slice(lo, hi) for lo, hi in t.box)] += 1
            param, state = zero_tg.buffers[t.reads[0]], [zero_tg.buffers[b] for b in t.reads[2:]]
            assert param.kind == "param" and param.box != t.box, op   # a chunk of the whole weight
            assert [b.kind for b in state] == ["momentum"] and all(b.box == t.box for b in state), op
        assert (covered == 1).all(), op
        # the allgather's local copies land in the parameters (the ring's, in the gradients)
        params = {b.id for b in zero_tg.buffers if b.kind == "param" and b.op == op and b.slot == slot}
        filled = [t for t in zero_tg.tasks if t.kind == "copy" and t.src_device == t.device and params & set(t.writes)]
        assert len(filled) == k * (k - 1), op


def test_split_weights_are_synchronized_as_the_ring_does():
    """A weight split by model parallelism (no replicas) has one update of its whole slice under
    zero as under the ring; replicated ones are cut.  Random plans on 2 to 4 devices."""
    g = mixed_graph()
    rng = np.random.default_rng(11)
    seen_whole = seen_cut = 0
    for _ in range(6):
        d = sw.DeviceGraph.cpu(int(rng.integers(2, 5)))
        configs = random_plan(g, d, rng).configs
        ring_tg, zero_tg = lower(sw.Plan(g, d, configs, RING)), lower(sw.Plan(g, d, configs, ZERO))
        assert zero_tg.bytes_moved() == ring_tg.bytes_moved()
        ring_up = sorted((t.op, ring_tg.buffers[t.reads[0]].slot, t.device, ring_tg.buffers[t.reads[0]].box)
                         for t in ring_tg.tasks if t.kind == "update")
        zero_up = sorted((t.op, zero_tg.buffers[t.reads[0]].slot, t.device, zero_tg.buffers[t.reads[0]].box)
                         for t in zero_tg.tasks if t.kind == "update")
        assert ring_up == zero_up   # the same slices updated on the same devices
        for t in zero_tg.tasks:
            if t.kind != "update":
                continue
            param = zero_tg.buffers[t.reads[0]]
            replicas = [b for b in zero_tg.buffers if b.kind == "param" and b.op == param.op and
                        b.slot == param.slot and b.box == param.box]
            state = zero_tg.buffers[t.reads[2]]
            if len(replicas) == 1:
                assert state.box == param.box and t.box is None
                seen_whole += 1
            elif state.box != param.box:   # a chunk: a 1/r share, rows rounded
                assert volume(state.box) <= -(-volume(param.box) // len(replicas)) * 2
                seen_cut += 1
    assert seen_whole and seen_cut


# --------------------------------------------------------------------------- training
def chunk_updates(plan) -> int:
    """How many update tasks of plan's lowering step a chunk of their slice (zero's cut state)."""
    tg = lower(plan)
    return sum(t.kind == "update" and tg.buffers[t.reads[2]].box != tg.buffers[t.reads[0]].box for t in tg.tasks)


def train(g, plan, opt, x, y, steps=3):
    t = Trainer(g, plan, optimizer=opt)
    return [t.step(x, y) for _ in range(steps)], t.get_weights(), t


def assert_bitwise(a, b, what):
    assert a[0] == b[0], what
    for key in a[1]:
        np.testing.assert_array_equal(a[1][key], b[1][key], err_msg=f"{what}: {key}")


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=OPT_IDS)
@pytest.mark.parametrize("k", [2, 4])
def test_zero_trains_bitwise_as_the_ring_data_parallel(k, opt):
    """The chunks are summed in the ring's order and the optimizers work element by element, so
    updating a chunk on its owner and gathering weights gives the ring's weights bit for bit;
    every replica's copy is the same."""
    g = mixed_graph()
    x, y = batch_of(g)
    d = sw.DeviceGraph.cpu(k)
    ring = train(g, sw.strategies.data_parallel(g, d, RING), opt, x, y)
    zero = train(g, sw.strategies.data_parallel(g, d, ZERO), opt, x, y)
    assert_bitwise(zero, ring, f"data parallel on {k}")
    t = zero[2]
    for (op, name, _), b in t.task_graph.params.items():   # every replica holds the gathered weight
        box = t.task_graph.buffers[b].box
        copies = [t.executor.persistent[c] for (o, n, _), c in t.task_graph.params.items()
                  if (o, n) == (op, name) and t.task_graph.buffers[c].box == box]
        for c in copies[1:]:
            np.testing.assert_array_equal(c, copies[0], err_msg=f"{op}.{name}")


@pytest.mark.parametrize("k", [2, 4])
def test_zero_matches_the_numpy_reference(k):
    g = mixed_graph()
    x, y = batch_of(g, 1)
    opt = OPTIMIZERS[0]
    want_losses, want_params = reference_run(g, x, y, 3, opt)
    losses, weights, _ = train(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(k), ZERO), opt, x, y)
    np.testing.assert_allclose(losses, want_losses, rtol=RTOL)
    assert_close_weights(weights, want_params)


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=OPT_IDS)
@pytest.mark.parametrize("seed", range(3))
def test_random_plans_under_zero_train_bitwise_as_the_ring(seed, opt):
    g = mixed_graph()
    rng = np.random.default_rng(300 + seed)
    x, y = batch_of(g, seed)
    d = sw.DeviceGraph.cpu(int(rng.integers(2, 5)))
    configs = random_plan(g, d, rng).configs
    assert chunk_updates(sw.Plan(g, d, configs, ZERO)) > 0
    assert_bitwise(train(g, sw.Plan(g, d, configs, ZERO), opt, x, y),
                   train(g, sw.Plan(g, d, configs, RING), opt, x, y), f"random plan {seed}")


@pytest.mark.parametrize("k", [2, 4])
def test_a_searched_zero_plan_trains_bitwise_as_the_ring(k):
    g = sw.models.lenet5(batch=8)
    x, y = batch_of(g, 3)
    plan = sw.search(g, sw.DeviceGraph.cpu(k), sync="zero", progress=False)
    assert plan.options.sync == "zero" and chunk_updates(plan) > 0
    for opt in OPTIMIZERS[:2]:
        assert_bitwise(train(g, plan, opt, x, y), train(g, with_sync(plan, RING), opt, x, y), f"searched on {k}")


def test_a_checkpoint_of_a_zero_trainer_resumes_bitwise(tmp_path):
    g = mixed_graph()
    x, y = batch_of(g)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4), ZERO)
    a = Trainer(g, plan, optimizer=sw.Adam(lr=1e-3))
    for _ in range(2):
        a.step(x, y)
    a.save_checkpoint(tmp_path / "zero.ckpt")
    b = Trainer(g, plan, optimizer=sw.Adam(lr=1e-3))
    b.load_checkpoint(tmp_path / "zero.ckpt")
    assert [a.step(x, y) for _ in range(2)] == [b.step(x, y) for _ in range(2)]
    wa, wb = a.get_weights(), b.get_weights()
    for key in wa:
        np.testing.assert_array_equal(wa[key], wb[key], err_msg=key)


# --------------------------------------------------------------------------- memory
@pytest.mark.parametrize("opt", ["SGD", "Adam"])
def test_optimizer_state_per_device_by_hand(opt):
    """The small MLP data parallel on 4 workers: 82 parameters, fc1's weight (48: a dimension of 8
    cuts into 4 equal chunks of 12), fc1's bias (6 rows cut 0-1, 1-3, 3-4, 4-6: 1, 2, 1, 2), fc2's
    weight (24: 4 rows, chunks of 6) and bias (4: 1 each).  Member i owns chunk (i + 1) mod 4, so
    it keeps 12 + b + 6 + 1 elements per state buffer, b = 2, 1, 2, 1: 21, 20, 21, 20; the ring
    keeps all 82 on every member; the parameter server all 82 on the first.  Bytes: x 4 x the
    state buffers (SGD 1, Adam 2)."""
    g = small_mlp()
    nstate = 1 if opt == "SGD" else 2
    d = sw.DeviceGraph.cpu(4)
    mem = {s: sw.memory_plan(sw.strategies.data_parallel(g, d, sw.CostOptions(sync=s)), optimizer_state=nstate)
           for s in ("parameter_server", "ring", "zero")}
    per_device = {s: [mem[s].devices[i].optimizer_state for i in range(4)] for s in mem}
    assert per_device["zero"] == [4 * nstate * e for e in (21, 20, 21, 20)]
    assert per_device["ring"] == [4 * nstate * 82] * 4
    assert per_device["parameter_server"] == [4 * nstate * 82, 0, 0, 0]
    two = sw.memory_plan(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2), ZERO), optimizer_state=nstate)
    assert [two.devices[i].optimizer_state for i in range(2)] == [4 * nstate * 41] * 2   # every weight halves


def footprint_tables(graph, devices, options):
    from shardwise.planning import search_memory as sm
    from shardwise.planning.problem import make_problem, worker_counts

    problem = make_problem(graph, devices, options)
    problem.enumerate(np.asarray(worker_counts(len(devices)), np.int32))
    problem.build_tables()
    return problem, sm.Tables(problem, graph)


def op_config(problem, op, c):
    """Configuration c of op, as a plan holds it."""
    from shardwise.plan import OpConfig, reduction_config
    from shardwise.planning.problem import dim_names

    deg, dev = problem.configs(op.index)
    return OpConfig(dim_names(len(op.shape)), tuple(int(x) for x in deg[c]), tuple(int(x) for x in dev[c] if x >= 0),
                    reduction_config(op, problem.reductions(op.index)[c]))


def configs_of(graph, problem, choice):
    return {op.name: op_config(problem, op, choice[op.index]) for op in graph.ops}


def kept_bytes(plan, nstate=1):
    mp = sw.memory_plan(plan, optimizer_state=nstate)
    return [mp.devices[d].activations_kept + sum(mp.devices[d].at_peak.get(k, 0) for k in
                                                 ("param", "momentum", "running_stats"))
            for d in range(len(plan.devices))]


@pytest.mark.parametrize("spec", ["4", "2x2"])
def test_footprint_model_follows_the_zero_lowering(spec):
    """The memory-constrained search's footprint (csrc/cost/cost_memory.c) counts each member's
    own chunk of optimizer state: equal to what the memory plan keeps, on random plans and on
    data parallelism (every weight's state cut, fc1's bias into uneven chunks)."""
    graph = mixed_graph()
    rng = random.Random(5)
    devices = sw.DeviceGraph.parse(spec, device="P100")
    problem, tables = footprint_tables(graph, devices, ZERO)
    choices = [[rng.randrange(len(t)) for t in tables.time] for _ in range(6)]
    data = sw.strategies.data_parallel(graph, devices, ZERO)
    dp = []
    for op in graph.ops:   # the index of data parallelism's configuration of every op
        found = [c for c in range(len(tables.time[op.index])) if op_config(problem, op, c) == data.configs[op.name]]
        assert found, op.name
        dp.append(found[0])
    for choice in choices + [dp]:
        plan = sw.Plan(graph, devices, configs_of(graph, problem, choice), ZERO)
        np.testing.assert_allclose(tables.footprint(choice), kept_bytes(plan), rtol=0, atol=0.5)
    ring_problem, ring_tables = footprint_tables(graph, devices, RING)
    assert (tables.footprint(dp) < ring_tables.footprint(dp)).all()   # the state cut 4 ways on every device


# --------------------------------------------------------------------------- simulation, CLI
@pytest.mark.parametrize("k", [2, 4])
def test_simulated_zero_is_the_ring_less_part_of_the_update(k):
    """Zero moves the same bytes as the ring (the allgather carries weight chunks instead of
    gradient chunks) over the same links, so the two iterations differ only by the updates: a
    member updates 1/k of each weight, before the allgather instead of after it.  The
    simulated time is then no longer than the ring's, and shorter by at most the update time
    the ring spends beyond zero's (summed over every device, a bound of the critical path's
    share)."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(k)
    ring = sw.simulate(sw.strategies.data_parallel(g, d, RING))
    zero = sw.simulate(sw.strategies.data_parallel(g, d, ZERO))
    assert zero.bytes_moved == ring.bytes_moved > 0
    assert sum(e.nbytes for e in zero.events) == sum(e.nbytes for e in ring.events)

    def update_time(r):
        return sum(e.end - e.start for e in r.events if e.kind == "update")

    saved = update_time(ring) - update_time(zero)
    assert saved > 0
    assert zero.iteration_time <= ring.iteration_time + 1e-12
    assert ring.iteration_time - zero.iteration_time <= saved + 1e-12


def test_eq1_charges_zero_as_the_ring():
    g = mixed_graph()
    d = sw.DeviceGraph.cpu(4)
    ring, zero = sw.strategies.data_parallel(g, d, RING), sw.strategies.data_parallel(g, d, ZERO)
    assert zero.bytes_moved == ring.bytes_moved
    assert [r.t_s for r in zero.layer_costs()] == [r.t_s for r in ring.layer_costs()]


def test_cli_plan_with_zero(capsys):
    from shardwise.cli.main import main

    code = main(["plan", "--model", "lenet5", "--devices", "2", "--device-type", "cpu", "--sync", "zero",
                 "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "simulated: searched plan" in out and "memory (each device's memory plan" in out


def test_unknown_sync_is_refused():
    with pytest.raises(sw.ConfigError, match="zero"):
        sw.CostOptions(sync="zero3")


def test_the_cuda_backend_refuses_zero():
    g = mixed_graph()
    with pytest.raises(sw.ConfigError, match="sync='zero'"):
        Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2), ZERO), backend="cuda")


@pytest.mark.parametrize("opt", OPTIMIZERS[:2], ids=OPT_IDS[:2])
def test_zero_is_bitwise_the_same_under_any_schedule_and_steps_in_flight(opt):
    """Prioritized streams (hazard edges order the allgather's writes into a weight after the
    reads of it on other streams) and two steps in flight (the next forward reads the gathered
    weight) leave every loss, weight and state buffer as the fifo run's."""
    g = mixed_graph()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4), ZERO)
    batches = [batch_of(g, s) for s in range(4)]

    def run(schedule, flight):
        t = Trainer(g, plan, optimizer=opt, seed=0, schedule=schedule, steps_in_flight=flight)
        losses = [t.step(x, y) for x, y in batches] if flight == 1 else t._steps(batches[:2]) + t._steps(batches[2:])
        return losses, t.get_weights(), {b: v.copy() for b, v in t.executor.persistent.items()}

    want = run("fifo", 1)
    for schedule, flight in (("critical_path", 1), ("fifo", 2), ("critical_path", 2)):
        got = run(schedule, flight)
        assert got[0] == want[0], (schedule, flight)
        for key in want[1]:
            np.testing.assert_array_equal(got[1][key], want[1][key], err_msg=f"{schedule}, {flight}: {key}")
        for b in want[2]:
            np.testing.assert_array_equal(got[2][b], want[2][b], err_msg=f"{schedule}, {flight}: buffer {b}")
