"""The rank side of tests/distributed/test_training.py: `mpiexec -n N python train_cases.py CASE`.

Every rank builds the multi-process Trainer and, in the same process, the one-process Trainer of
the same plan (the reference: same seed, same batches), and checks that losses and weights are
bitwise the same, and that the bytes its messages carried are the ones the task graph plans.
Each case prints "[case ok: rank R]" when its checks passed; a failed check raises, and the
exception hook of sw.distributed.init ends every rank.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests/: shared_graphs

import shardwise as sw  # noqa: E402
from shared_graphs import mixed_graph  # noqa: E402
from strategies_random import random_plan  # noqa: E402


def _batches(g, steps, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((steps,) + g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, g.ops[-1].shape[-1], (steps, g.ops[0].shape[0]))
    return x, y


def _same_weights(a, b, what):
    assert a.keys() == b.keys(), what
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), f"{what}: {k} differs"


def _optimizer(kind):
    return sw.SGD(lr=0.05, momentum=0.9) if kind == "sgd" else sw.Adam(lr=0.01)


def random_plans(comm):
    """Random plans (random configurations on random device subsets, partition-n-reduce too) of
    LeNet-5 and a graph with every op kind (batch norm: float64 statistics cross ranks), on 4
    and 3 devices; SGD and Adam, parameter server and ring all-reduce; one step at a time and
    two in flight (fit); fifo and critical-path schedules: losses and weights bitwise those of one process, and each step's
    bytes on the wire exactly the task graph's planned bytes of this rank."""
    rng = np.random.default_rng(int(os.environ.get("SEED", "0")))
    cases = 0
    for model in ("lenet5", "mixed"):
        g = sw.models.lenet5(batch=8) if model == "lenet5" else mixed_graph(8)
        for ndev in (4, 3):
            if ndev < comm.size:
                continue
            d = sw.DeviceGraph.cpu(ndev)
            for opt, sync in (("sgd", "parameter_server"), ("adam", "parameter_server"), ("sgd", "ring")):
                plan = random_plan(g, d, rng, reductions=bool(rng.integers(2)) and sync != "ring")
                if sync == "ring":   # the ring all-reduce's chunk copies cross ranks like any copy
                    plan = sw.Plan(g, d, plan.configs, sw.CostOptions(sync="ring"))
                flight = int(rng.integers(1, 3))
                schedule = "critical_path" if rng.integers(2) else "fifo"
                kw = dict(optimizer=_optimizer(opt), seed=3, steps_in_flight=flight, schedule=schedule)
                t = sw.Trainer(g, plan, comm=comm, **kw)
                ref = sw.Trainer(g, plan, **kw)
                x, y = _batches(g, 4, 7)
                what = f"{model} on {ndev} devices, {opt}, {sync}, steps_in_flight {flight}, {schedule}"
                if flight == 1:
                    planned = sw.distributed.planned_bytes(plan, comm.size, optimizer_state=t.optimizer.state_buffers)
                    for i in range(4):
                        a, b = t.step(x[i], y[i]), ref.step(x[i], y[i])
                        assert a == b, f"{what}: step {i} loss {a} != {b}"
                        assert t.comm_bytes() == planned[comm.rank], (what, t.comm_bytes(), planned[comm.rank])
                else:
                    a, b = t.fit(x.reshape((-1,) + x.shape[2:]), y.reshape(-1), epochs=1), \
                        ref.fit(x.reshape((-1,) + x.shape[2:]), y.reshape(-1), epochs=1)
                    assert a == b, f"{what}: epoch losses {a} != {b}"
                    assert t.steps == ref.steps == 4
                _same_weights(t.get_weights(), ref.get_weights(), what)
                assert t.executor.updates() == ref.executor.updates(), what
                cases += 1
    assert cases >= 4
    print(f"[case ok: rank {comm.rank}] {cases} plans", flush=True)


def zero_plans(comm):
    """Sharded optimizer state (sync zero) on 4 devices: data parallel with Adam, a random plan with
    SGD and momentum; the allgather's weight chunks cross ranks as copies: losses, weights and update
    counts bitwise those of one process, each step's bytes the rank's planned bytes."""
    g, d = mixed_graph(8), sw.DeviceGraph.cpu(4)
    zero = sw.CostOptions(sync="zero")
    rng = np.random.default_rng(4)
    for plan, opt in ((sw.strategies.data_parallel(g, d, zero), "adam"),
                      (sw.Plan(g, d, random_plan(g, d, rng).configs, zero), "sgd")):
        t = sw.Trainer(g, plan, comm=comm, optimizer=_optimizer(opt), seed=3)
        ref = sw.Trainer(g, plan, optimizer=_optimizer(opt), seed=3)
        x, y = _batches(g, 3, 5)
        planned = sw.distributed.planned_bytes(plan, comm.size, optimizer_state=t.optimizer.state_buffers)
        for i in range(3):
            a, b = t.step(x[i], y[i]), ref.step(x[i], y[i])
            assert a == b, f"zero, {opt}: step {i} loss {a} != {b}"
            assert t.comm_bytes() == planned[comm.rank], (opt, t.comm_bytes(), planned[comm.rank])
        _same_weights(t.get_weights(), ref.get_weights(), f"zero, {opt}")
        assert t.executor.updates() == ref.executor.updates(), opt
    print(f"[case ok: rank {comm.rank}]", flush=True)


def swapped(comm):
    """A swap plan (feature maps to host memory and back on their own streams): the same numbers
    as one process with the same swap plan."""
    g = mixed_graph(16)
    d = sw.DeviceGraph.cpu(4)
    plan = sw.strategies.data_parallel(g, d)
    peak = sw.memory_plan(plan).peak_bytes
    swap = None
    for fraction in (0.95, 0.9):   # the tightest budget the plan can reach
        try:
            swap = sw.swap_plan(plan, budget=int(peak * fraction))
        except ValueError:
            break
    assert swap is not None and swap.entries, "the budget should make the plan swap"
    t = sw.Trainer(g, plan, optimizer=_optimizer("sgd"), swap=swap, comm=comm)
    ref = sw.Trainer(g, plan, optimizer=_optimizer("sgd"), swap=swap)
    x, y = _batches(g, 3, 1)
    for i in range(3):
        a, b = t.step(x[i], y[i]), ref.step(x[i], y[i])
        assert a == b, (i, a, b)
    _same_weights(t.get_weights(), ref.get_weights(), "swap")
    print(f"[case ok: rank {comm.rank}]", flush=True)


def local_data_and_checkpoints(comm):
    """step(x_local, y_local, local=True) with only local_samples() equals the whole minibatch;
    predict gathers every rank's probabilities; a checkpoint written by the job loads into a
    one-process trainer and back, with the same weights and optimizer state."""
    g = mixed_graph(8)
    d = sw.DeviceGraph.cpu(4)
    plan = sw.strategies.data_parallel(g, d)   # each rank reads its block of samples
    t = sw.Trainer(g, plan, optimizer=_optimizer("adam"), comm=comm)
    ref = sw.Trainer(g, plan, optimizer=_optimizer("adam"))
    x, y = _batches(g, 3, 2)
    idx = t.local_samples()
    assert t.local_devices() == sw.distributed.devices_of_rank(4, comm.size, comm.rank)
    assert len(idx) < 8 or comm.size == 1, idx
    for i in range(3):
        a = t.step(x[i][idx], y[i][idx], local=True)
        b = ref.step(x[i], y[i])
        assert a == b, (i, a, b)
    assert np.array_equal(t.predict(x[0]), ref.predict(x[0]))
    path = os.environ["CKPT"]
    t.save_checkpoint(path)
    one = sw.Trainer(g, plan, optimizer=_optimizer("adam"))
    one.load_checkpoint(path)
    _same_weights(one.get_weights(), ref.get_weights(), "checkpoint into one process")
    a, b = one.step(x[0], y[0]), ref.step(x[0], y[0])
    assert a == b
    # and back: the one-process trainer's checkpoint into the job
    if comm.rank == 0:
        ref.save_checkpoint(path + ".one")
    comm.allgather_bytes(b"\0")
    t.load_checkpoint(path + ".one")
    assert t.steps == ref.steps
    a, b = t.step(x[1], y[1]), ref.step(x[1], y[1])
    assert a == b, (a, b)
    _same_weights(t.get_weights(), ref.get_weights(), "checkpoint into the job")
    print(f"[case ok: rank {comm.rank}]", flush=True)


def plan_mismatch(comm):
    """The last rank builds another plan: every rank stops at start-up, naming the plan and the rank."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    plan = sw.strategies.data_parallel(g, d) if comm.rank < comm.size - 1 else sw.strategies.model_parallel(g, d)
    sw.Trainer(g, plan, comm=comm)
    print(f"rank {comm.rank} went on with a plan its peers do not run", flush=True)


def lost_peer(comm):
    """The last rank never takes its first step (it sleeps): the others' steps fail after the
    message timeout (SHARDWISE_COMM_TIMEOUT), naming the message and the rank it waits for."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    plan = sw.strategies.data_parallel(g, d)
    t = sw.Trainer(g, plan, comm=comm)
    x, y = _batches(g, 1, 0)
    if comm.rank == comm.size - 1:
        time.sleep(120)
    t.step(x[0], y[0])
    print(f"rank {comm.rank} finished a step without its peer", flush=True)


def dies_in_step(comm):
    """The last rank raises between two steps: the job ends non-zero, naming it."""
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, d), comm=comm)
    x, y = _batches(g, 2, 0)
    t.step(x[0], y[0])
    if comm.rank == comm.size - 1:
        raise RuntimeError(f"rank {comm.rank} fails on purpose")
    t.step(x[1], y[1])
    print(f"rank {comm.rank} finished a step without its peer", flush=True)


if __name__ == "__main__":
    comm = sw.distributed.init()
    globals()[sys.argv[1]](comm)
