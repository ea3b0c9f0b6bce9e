"""Ring all-reduce synchronization (``CostOptions(sync="ring")``) lowered, simulated and trained.

A replica group of k > 1 workers is lowered as a ring (csrc/graph/lower_backward.c, sync_ring):
the gradient cut into k chunks, k - 1 rounds of reduce-scatter (copy + accumulate), k - 1 rounds
of allgather (copy, then a local copy into the gradient), and an update on every replica.  Checked
here: the tasks and bytes per group against the ring cost model (2 (k - 1) chunks sent per member,
2 (k - 1) / k of the gradient), the fallback to the parameter server for a gradient too small to
cut, training against the NumPy reference and one worker (SGD, Adam), bitwise reproducibility
across schedules, thread timing and steps in flight, the memory plan and its footprint model, the
simulator, and the command line.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.iteration.lower import lower
from shardwise.train.runtime import NativeExecutor
from shardwise.train.trainer import Trainer

from shared_graphs import mixed_graph
from strategies_random import random_plan
from task_checks import check_data_flow
from training_checks import RTOL, assert_close_weights, one_worker_run, reference_run

RING = sw.CostOptions(sync="ring")
ADAM_TOL = 1e-5   # tests/train/test_optim.py: several workers equal one with Adam this closely


def ring_data_parallel(g: sw.Graph, k: int) -> sw.Plan:
    return sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(k), RING)


def batch_of(g: sw.Graph, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    classes = g.ops[-1].shape[-1]
    return (rng.standard_normal(g.ops[0].shape).astype(np.float32),
            rng.integers(0, classes, g.ops[0].shape[0]))


def sync_tasks(tg, op: str, slot: int) -> list:
    """The sync-phase tasks of one weight slot: those touching its gradient buffers, and the
    copies and accumulates of chunks of its box (an op's weight and bias differ in rank)."""
    grads = [b for b in tg.buffers if b.kind == "param_grad" and b.op == op and b.slot == slot]
    rank = len(grads[0].box)
    ids = {b.id for b in grads}
    return [t for t in tg.tasks if t.phase in ("sync", "update") and t.op == op and
            (ids & set(t.reads + t.writes) or (t.kind in ("copy", "accumulate") and len(t.box) == rank))]


def weight_slots(g: sw.Graph) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(op.name, k, tuple(i.shape)) for op in g.ops for k, i in enumerate(op.desc.inputs) if i.role == 1]


# --------------------------------------------------------------------------- the task graph
@pytest.mark.parametrize("k", [2, 4])
def test_each_member_sends_two_k_minus_one_chunks(k):
    """Data parallel LeNet-5 on k workers: per weight, k (k - 1) accumulates, k (k - 1) local
    copies, 2 k (k - 1) transfers (each member sends 2 (k - 1) chunks, in all 2 (k - 1) / k of its
    gradient when the chunks are equal), an update on every member, no parameters sent back; and
    the graph's bytes are the ring cost model's."""
    g = sw.models.lenet5(batch=8)
    plan = ring_data_parallel(g, k)
    tg = lower(plan)
    check_data_flow(tg)
    assert tg.bytes_moved() == pytest.approx(plan.bytes_moved, abs=0.5)
    assert not [t for t in tg.tasks if t.phase == "update" and t.kind == "copy"]   # nothing sent back
    for op, slot, shape in weight_slots(g):
        grad_bytes = 4 * int(np.prod(shape))
        tasks = sync_tasks(tg, op, slot)
        transfers = [t for t in tasks if t.kind == "copy" and t.src_device != t.device]
        local = [t for t in tasks if t.kind == "copy" and t.src_device == t.device]
        assert len([t for t in tasks if t.kind == "accumulate"]) == k * (k - 1), op
        assert len(local) == k * (k - 1), op
        assert not [t for t in tasks if t.kind == "reduce"], op
        updates = [t for t in tg.tasks if t.kind == "update" and t.op == op
                   and tg.buffers[t.writes[0]].slot == slot]
        assert sorted(t.device for t in updates) == list(range(k)), op
        # the chunks cut the gradient: k of them, disjoint, covering it
        sent_by = {d: [t for t in transfers if t.src_device == d] for d in range(k)}
        assert sum(t.nbytes for t in transfers) == 2 * (k - 1) * grad_bytes, op
        for d in range(k):
            assert len(sent_by[d]) == 2 * (k - 1), (op, d)
            assert all(t.device == (d + 1) % k for t in sent_by[d]), (op, d)   # to the next member
        if shape[0] % k == 0:   # equal chunks along the outermost dimension
            for d in range(k):
                assert sum(t.nbytes for t in sent_by[d]) == 2 * (k - 1) * grad_bytes // k, (op, d)


def test_a_gradient_too_small_to_cut_falls_back_to_the_parameter_server():
    """fc2 of the mixed graph (a 5 x 6 weight, a bias of 5) on 8 replicas: no dimension has 8 rows,
    so its group synchronizes by parameter server (one reduce, parameters sent back); the other
    weights ring.  The bytes are still the cost model's (both move 2 (k - 1) x the gradient)."""
    g = mixed_graph(batch=8)
    plan = ring_data_parallel(g, 8)
    tg = lower(plan)
    check_data_flow(tg)
    assert tg.bytes_moved() == pytest.approx(plan.bytes_moved, abs=0.5)
    for slot in (1, 2):
        kinds = [t.kind for t in sync_tasks(tg, "fc2", slot)]
        assert kinds.count("reduce") == 1 and "accumulate" not in kinds
    assert len([t for t in tg.tasks if t.kind == "update" and t.op == "fc2"]) == 2   # weight, bias: the lead's
    kinds = [t.kind for t in sync_tasks(tg, "fc1", 1)]   # fc1's weight (6, 128): 128 rows cut in 8
    assert kinds.count("accumulate") == 8 * 7 and "reduce" not in kinds
    # Eq. 1 charges what is lowered: fc2 as the parameter server, fc1 as a ring
    ps = {r.op: r.t_s for r in sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(8)).layer_costs()}
    ring = {r.op: r.t_s for r in plan.layer_costs()}
    assert ring["fc2"] == pytest.approx(ps["fc2"], rel=1e-12) and ring["fc2"] > 0
    assert ring["fc1"] < ps["fc1"]


def test_uneven_chunks_cover_the_gradient_once():
    """LeNet-5's conv1 weight (6, 1, 5, 5) on 4 replicas: no dimension divides by 4, so it is cut
    along its 6 output channels into chunks of 1 or 2; the reduce-scatter adds every element
    of every member's gradient into the sum exactly k - 1 times over the group."""
    g = sw.models.lenet5(batch=8)
    tg = lower(ring_data_parallel(g, 4))
    conv = g.ops[1].name
    added = np.zeros((6, 1, 5, 5), int)
    for t in sync_tasks(tg, conv, 1):
        if t.kind == "accumulate":
            added[tuple(slice(lo, hi) for lo, hi in t.box)] += 1
    assert (added == 4 - 1).all()
    sizes = sorted({t.box[0][1] - t.box[0][0] for t in sync_tasks(tg, conv, 1) if t.kind == "accumulate"})
    assert sizes == [1, 2]


# --------------------------------------------------------------------------- training
@pytest.mark.parametrize("k", [2, 4])
def test_ring_training_matches_the_reference_with_sgd(k):
    g = mixed_graph()
    x, y = batch_of(g)
    opt = sw.SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)
    want_losses, want_params = reference_run(g, x, y, 3, opt)
    t = Trainer(g, ring_data_parallel(g, k), optimizer=opt)
    np.testing.assert_allclose([t.step(x, y) for _ in range(3)], want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_params)


@pytest.mark.parametrize("seed", range(6))
def test_random_ring_plans_match_the_reference(seed):
    """Random plans (replica groups of any size on devices in any order, beside split weights)
    synchronized by ring train like the NumPy reference."""
    g = mixed_graph()
    rng = np.random.default_rng(200 + seed)
    x, y = batch_of(g, seed)
    opt = sw.SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)
    want_losses, want_params = reference_run(g, x, y, 3, opt)
    d = sw.DeviceGraph.cpu(int(rng.integers(2, 5)))
    plan = sw.Plan(g, d, random_plan(g, d, rng).configs, RING)
    t = Trainer(g, plan, optimizer=opt)
    np.testing.assert_allclose([t.step(x, y) for _ in range(3)], want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_params)


@pytest.mark.parametrize("k", [2, 4])
def test_ring_training_equals_one_worker_with_adam(k):
    g = sw.models.lenet5(batch=8)
    x, y = batch_of(g, 1)
    opt = sw.Adam(lr=1e-3, weight_decay=1e-3)
    want_losses, want_weights = one_worker_run(g, x, y, opt, steps=4)
    t = Trainer(g, ring_data_parallel(g, k), optimizer=opt)
    np.testing.assert_allclose([t.step(x, y) for _ in range(4)], want_losses, rtol=ADAM_TOL)
    for key, v in t.get_weights().items():
        np.testing.assert_allclose(v, want_weights[key], rtol=0, atol=ADAM_TOL, err_msg=key)


def replicas(t: Trainer) -> dict[tuple[str, str], list[np.ndarray]]:
    """Every worker's copy of every parameter slice, by (op, "weight" / "bias", box)."""
    out: dict = {}
    for (op, name, _), b in t.task_graph.params.items():
        out.setdefault((op, name, t.task_graph.buffers[b].box), []).append(t.executor.persistent[b].copy())
    return out


def test_replicas_stay_bitwise_equal_and_keep_their_own_optimizer_state():
    g = mixed_graph()
    x, y = batch_of(g)
    t = Trainer(g, ring_data_parallel(g, 4), optimizer=sw.Adam(lr=1e-3))
    for _ in range(3):
        t.step(x, y)
    for key, copies in replicas(t).items():
        assert len(copies) == 4, key
        for c in copies[1:]:
            np.testing.assert_array_equal(c, copies[0], err_msg=str(key))
    state = [b for b in t.task_graph.buffers if b.kind == "momentum"]
    ring_ops = {b.op for b in state if b.device != 0}
    assert ring_ops and "fc2" in ring_ops   # every replica of a ringed weight keeps its own moments
    assert set(t.executor.updates().values()) == {3}


def test_a_checkpoint_of_a_ring_trainer_resumes_bitwise(tmp_path):
    """Every replica's optimizer state is saved and restored (Adam's moments and step counts)."""
    g = mixed_graph()
    x, y = batch_of(g)
    plan = ring_data_parallel(g, 4)
    a = Trainer(g, plan, optimizer=sw.Adam(lr=1e-3))
    for _ in range(2):
        a.step(x, y)
    path = tmp_path / "ring.ckpt"
    a.save_checkpoint(path)
    b = Trainer(g, plan, optimizer=sw.Adam(lr=1e-3))
    b.load_checkpoint(path)
    assert [a.step(x, y) for _ in range(2)] == [b.step(x, y) for _ in range(2)]
    wa, wb = a.get_weights(), b.get_weights()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)


def trained(g, plan, opt, batches, schedule="fifo", steps_in_flight=1, jitter_us=0):
    """(losses, weights, every persistent buffer) after the batches."""
    t = Trainer(g, plan, optimizer=opt, seed=0, schedule=schedule, steps_in_flight=steps_in_flight)
    if jitter_us:   # random pauses before every task, one thread per device: shake the timing
        weights = t.get_weights()
        t.executor = NativeExecutor(g, plan, t.task_graph, threads=len(plan.devices), jitter_us=jitter_us,
                                    schedule=t.schedule, optimizer_state=opt.state_buffers)
        t.set_weights(weights)
    if steps_in_flight == 1:
        losses = [t.step(x, y) for x, y in batches]
    else:
        losses = []
        for i in range(0, len(batches), steps_in_flight):
            losses += t._steps(batches[i:i + steps_in_flight])
    return losses, t.get_weights(), {b: v.copy() for b, v in t.executor.persistent.items()}


def assert_identical(a, b, what):
    (la, wa, sa), (lb, wb, sb) = a, b
    assert la == lb, what
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=f"{what}: {k}")
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=f"{what}: buffer {k}")


@pytest.mark.parametrize("opt", [sw.SGD(lr=0.05, momentum=0.9), sw.Adam(lr=1e-3)], ids=["SGD", "Adam"])
def test_ring_is_bitwise_the_same_under_any_schedule_timing_and_steps_in_flight(opt):
    g = mixed_graph()
    plan = ring_data_parallel(g, 4)
    batches = [batch_of(g, s) for s in range(4)]
    want = trained(g, plan, opt, batches)
    assert_identical(want, trained(g, plan, opt, batches, schedule="critical_path"), "critical_path")
    assert_identical(want, trained(g, plan, opt, batches, jitter_us=50), "jittered threads")
    assert_identical(want, trained(g, plan, opt, batches, steps_in_flight=2), "2 steps in flight")
    assert_identical(want, trained(g, plan, opt, batches, schedule="critical_path", steps_in_flight=2),
                     "critical_path, 2 steps in flight")


def test_fit_with_steps_in_flight_is_fit_one_at_a_time_under_ring():
    g = mixed_graph()
    plan = ring_data_parallel(g, 2)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40,) + g.ops[0].shape[1:]).astype(np.float32)
    y = rng.integers(0, 5, 40)
    runs = []
    for k in (1, 2):
        t = Trainer(g, plan, optimizer=sw.Adam(lr=1e-3), steps_in_flight=k)
        runs.append((t.fit(x, y, epochs=2, shuffle_seed=2), t.get_weights()))
    assert runs[0][0] == runs[1][0]
    for key, v in runs[0][1].items():
        np.testing.assert_array_equal(v, runs[1][1][key], err_msg=key)


def test_ring_and_parameter_server_differ_by_rounding_only():
    g = mixed_graph()
    x, y = batch_of(g, 2)
    opt = sw.SGD(lr=0.1, momentum=0.9)
    ps = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4)), optimizer=opt)
    ring = Trainer(g, ring_data_parallel(g, 4), optimizer=opt)
    np.testing.assert_allclose([ring.step(x, y) for _ in range(3)], [ps.step(x, y) for _ in range(3)], rtol=RTOL)
    assert_close_weights(ring.get_weights(), ps.get_weights())


# --------------------------------------------------------------------------- memory, simulation, CLI
def test_memory_plan_holds_optimizer_state_on_every_replica():
    g = sw.models.lenet5(batch=8)
    ps = sw.memory_plan(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    ring = sw.memory_plan(ring_data_parallel(g, 2))
    params = 4 * g.num_parameters()
    assert ps.devices[0].optimizer_state == params and ps.devices[1].optimizer_state == 0
    assert ring.devices[0].optimizer_state == ring.devices[1].optimizer_state == params


def test_footprint_model_follows_the_ring_lowering():
    """The memory-constrained search's footprint (csrc/cost/cost_memory.c) counts the optimizer
    state of every ringed replica, and the parameter server's lead only for a gradient too small
    to cut: equal to what the memory plan keeps, on random plans."""
    import random

    from shardwise.plan import OpConfig, Plan, reduction_config
    from shardwise.planning import search_memory as sm
    from shardwise.planning.problem import dim_names, make_problem, worker_counts

    graph = mixed_graph()
    rng = random.Random(3)
    for spec in ("4", "2x2"):
        devices = sw.DeviceGraph.parse(spec, device="P100")
        problem = make_problem(graph, devices, RING)
        problem.enumerate(np.asarray(worker_counts(len(devices)), np.int32))
        problem.build_tables()
        tables = sm.Tables(problem, graph)
        for _ in range(4):
            choice = [rng.randrange(len(t)) for t in tables.time]
            configs = {}
            for op in graph.ops:
                deg, dev = problem.configs(op.index)
                c = choice[op.index]
                configs[op.name] = OpConfig(dim_names(len(op.shape)), tuple(int(x) for x in deg[c]),
                                            tuple(int(x) for x in dev[c] if x >= 0),
                                            reduction_config(op, problem.reductions(op.index)[c]))
            mp = sw.memory_plan(Plan(graph, devices, configs, RING))
            kept = [mp.devices[d].activations_kept + sum(mp.devices[d].at_peak.get(k, 0) for k in
                                                         ("param", "momentum", "running_stats"))
                    for d in range(len(devices))]
            np.testing.assert_allclose(tables.footprint(choice), kept, rtol=0, atol=0.5)


def test_simulate_replays_the_ring():
    g = sw.models.lenet5(batch=8)
    ring = sw.simulate(ring_data_parallel(g, 4))
    ps = sw.simulate(sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4)))
    assert 0 < ring.iteration_time < float("inf")
    assert ring.bytes_moved == ps.bytes_moved   # 2 (k - 1) x the gradients either way
    tg = lower(ring_data_parallel(g, 4))
    assert sw.simulate(tg).iteration_time == ring.iteration_time   # the lowered graph, not lowered again


def test_search_simulates_and_checks_memory_with_ring():
    g = sw.models.lenet5(batch=8)
    plan = sw.search(g, sw.DeviceGraph.cpu(2), sync="ring")
    assert plan.options.sync == "ring"
    assert plan.search_stats["objective"] == "simulate" and plan.search_stats["simulated_time"] > 0
    assert "memory" in plan.search_stats


def test_cli_plan_with_ring_prints_the_simulation_and_the_memory(capsys):
    from shardwise.cli.main import main

    code = main(["plan", "--model", "lenet5", "--devices", "2", "--device-type", "cpu", "--sync", "ring",
                 "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "simulated: searched plan" in out and " ms per iteration" in out
    assert "memory (each device's memory plan" in out
