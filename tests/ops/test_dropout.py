"""Dropout whose mask depends on (seed, step, element index) only:

1. the C kernel (csrc/cpu/dropout.c) equals the NumPy reference (shardwise.reference.dropout)
   bit for bit, on whole tensors and on the boxes of split plans (through the runtime:
   tests/ops/test_conformance.py::test_dropout_output_is_the_reference_bit_for_bit), so the
   statistics below are taken of the reference's masks;
2. the masks' statistics: the kept fraction is 1 - p, the scaled output keeps the mean, masks
   differ between steps, seeds and neighbouring elements;
3. every plan (1-4 workers, any split) draws the same mask, bit for bit, and trains like the
   reference; eval mode is the identity, p = 0 is the identity in both modes;
4. the description splits every dimension; bad probabilities and seeds are refused.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import shardwise as sw
from shardwise.reference import dropout as rd
from shardwise.errors import GraphError
from shardwise.iteration.lower import lower
from shardwise.train.runtime import NativeExecutor
from shardwise.train.trainer import SGD, Trainer
from strategies_random import random_plan
from training_checks import RTOL, assert_close_weights, reference_run
from shared_graphs import dropout_graph


# ------------------------------------------------------------------------------------ 1. the reference's mask
def test_reference_mask_is_the_documented_hash():
    """Element 0 of seed 0, step 0, recomputed from the formula in plain Python integers."""
    m64 = 2**64 - 1

    def mix(z: int) -> int:
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
        return z ^ (z >> 31)

    g = 0x9E3779B97F4A7C15
    for seed, step, i in ((0, 0, 0), (2**64 - 1, 5, 17), (123, 0, 99)):
        stream = mix((seed + g * (step + 1)) & m64)
        u = mix((stream + g * (i + 1)) & m64) >> 40
        mask = rd.dropout_mask((100,), 0.5, seed, step)
        assert mask[i] == (u >= 2**23)


# ------------------------------------------------------------------------------------ 2. statistics
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_kept_fraction_and_mean_scaling(p):
    n = 1 << 20
    ones = np.ones(n, np.float32)
    y = rd.dropout_forward(ones, p, seed=7, step=3)   # the kernel's mask, bit for bit (test_conformance)
    kept = float((y != 0).mean())
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(kept - (1 - p)) < 5 * sigma
    # kept ones are 1 / (1 - p), p read as a float32 (0.9 is 0.89999998: the scale 9.999998)
    assert set(np.unique(y)) == {0.0, np.float32(1 / (1 - float(np.float32(p))))}
    # inverted scaling: the expectation of the output is the input
    assert abs(float(y.astype(np.float64).mean()) - 1.0) < 5 * sigma / (1 - p)


def test_masks_differ_between_steps_seeds_and_neighbours():
    """Two masks of p = 0.5 agree on about half of the elements when independent; neighbouring
    elements of one mask are uncorrelated."""
    n = 1 << 18
    base = rd.dropout_mask((n,), 0.5, seed=1, step=0)
    for other in (rd.dropout_mask((n,), 0.5, seed=1, step=1), rd.dropout_mask((n,), 0.5, seed=2, step=0)):
        assert abs(float((base == other).mean()) - 0.5) < 0.01
    assert abs(float((base[1:] == base[:-1]).mean()) - 0.5) < 0.01
    np.testing.assert_array_equal(base, rd.dropout_mask((n,), 0.5, seed=1, step=0))   # a function, not a stream


# ------------------------------------------------------------------------------------ 3. plans and modes


def batch_of(g: sw.Graph, seed: int):
    rng = np.random.default_rng(seed)
    shape = g.ops[0].shape
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, 5, shape[0])


def output_of(ex: NativeExecutor, op: str) -> np.ndarray:
    """An op's whole output after a run, assembled from its workers' activation buffers."""
    shape = ex.graph[op].shape
    out = np.full(shape, np.nan, np.float32)
    for b in ex.tg.buffers:
        if b.kind == "activation" and b.op == op:
            out[tuple(slice(lo, hi) for lo, hi in b.box)] = ex._rt.buffer(b.id)
    return out


@pytest.mark.parametrize("ndev, spec", [
    (1, {}),
    (2, {"d0": {"n": 2}, "d1": {"c": 2}}),
    (3, {"d0": {"w": 3}, "d1": {"h": 3}, "d2": {"c": 2}}),
    (4, {"d0": {"c": 3}, "d1": {"n": 2, "w": 2}, "d2": {"n": 4}}),
    (4, {"d0": {"h": 2, "w": 2}, "d1": {"c": 4}, "d2": {"c": 4}}),
])
@pytest.mark.parametrize("step", [0, 5])
def test_every_plan_draws_the_same_mask_bitwise(ndev, spec, step):
    """d0's output equals the reference's bit for bit whatever the split (its input is the graph's
    input); d1's zeros (after a conv, whose sums differ between plans in the last bits) are the
    reference's mask exactly."""
    g = dropout_graph()
    x, y = batch_of(g, 0)
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(ndev), spec)
    t = Trainer(g, plan, optimizer=SGD(lr=0.1))
    weights = t.get_weights()
    ex = NativeExecutor(g, plan, lower(plan), reuse=False)
    t.executor = ex
    t.set_weights(weights)
    ex.steps = step
    ex.run(x, y, phases=("forward",))
    a = g["d0"].attrs
    np.testing.assert_array_equal(output_of(ex, "d0"), rd.dropout_forward(x, a["p"], a["seed"], step))
    b = g["d1"].attrs
    mask = rd.dropout_mask(g["d1"].shape, b["p"], b["seed"], step)
    conv = output_of(ex, "c")
    assert (conv > 0).mean() > 0.3
    np.testing.assert_array_equal(output_of(ex, "d1") != 0, mask & (conv != 0))


@pytest.mark.parametrize("seed", range(4))
def test_random_plans_train_like_the_reference(seed):
    """Three steps (three different masks per dropout) of random plans on 1-4 workers."""
    g = dropout_graph()
    x, y = batch_of(g, 10 + seed)
    rng = np.random.default_rng(seed)
    opt = SGD(lr=0.1, momentum=0.9)
    want_losses, want_params = reference_run(g, x, y, 3, opt)
    t = Trainer(g, random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(1, 5))), rng, reductions=True), optimizer=opt)
    np.testing.assert_allclose([t.step(x, y) for _ in range(3)], want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_params)


def test_schedules_and_thread_timing_change_no_bit():
    """fifo against critical_path streams with random pauses before every task: the masks are
    functions of the element, not of the order tasks run in."""
    g = dropout_graph()
    x, y = batch_of(g, 6)
    plan = random_plan(g, sw.DeviceGraph.cpu(3), np.random.default_rng(6))
    runs = []
    for schedule, jitter in (("fifo", 0), ("critical_path", 200)):
        t = Trainer(g, plan, optimizer=SGD(lr=0.1, momentum=0.9), schedule=schedule)
        weights = t.get_weights()
        t.executor = NativeExecutor(g, plan, t.task_graph, threads=3, jitter_us=jitter, schedule=t.schedule)
        t.set_weights(weights)
        runs.append(([t.step(x, y) for _ in range(3)], t.get_weights()))
    assert runs[0][0] == runs[1][0]
    for k, v in runs[0][1].items():
        np.testing.assert_array_equal(v, runs[1][1][k], err_msg=k)


def twin_without_dropout(g: sw.Graph) -> sw.Graph:
    """The same network with every dropout left out (same op names: the same initialization)."""
    h = sw.Graph("twin")
    x = h.input("x", g["x"].shape)
    x = h.conv2d(x, 4, kernel=3, padding=1, activation="relu", name="c")
    x = h.flatten(x, name="fl")
    x = h.linear(x, 16, activation="relu", name="fc1")
    h.softmax(h.linear(x, 5, name="fc2"), name="prob")
    return h


def test_eval_mode_is_the_identity_and_train_mode_is_not():
    g = dropout_graph()
    x, _ = batch_of(g, 3)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    t = Trainer(g, plan)
    twin = Trainer(twin_without_dropout(g), sw.Plan.from_dict(twin_without_dropout(g), sw.DeviceGraph.cpu(1), {}))
    twin.set_weights(t.get_weights())
    want = twin.eval().predict(x)
    np.testing.assert_allclose(t.eval().predict(x), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(t.predict(x[:3]), want[:3], rtol=1e-5, atol=1e-7)   # any sample count
    assert np.abs(t.train().predict(x) - want).max() > 1e-3


def test_p_zero_is_the_identity_in_train_mode():
    """p = 0 keeps every element unscaled: training steps equal the network without dropout's,
    bit for bit."""
    g = dropout_graph(p=0.0)
    g["d2"].attrs["p"] = 0.0
    x, y = batch_of(g, 4)
    plan1 = lambda gr: sw.Plan.from_dict(gr, sw.DeviceGraph.cpu(1), {})  # noqa: E731
    t, twin = Trainer(g, plan1(g)), Trainer(twin_without_dropout(g), plan1(twin_without_dropout(g)))
    twin.set_weights(t.get_weights())
    assert [t.step(x, y) for _ in range(2)] == [twin.step(x, y) for _ in range(2)]


def test_a_checkpointed_step_count_draws_that_steps_masks(tmp_path):
    """Masks follow the trainer's step count, so a trainer restored from a checkpoint continues
    with the masks an uninterrupted one would draw."""
    g = dropout_graph()
    x, y = batch_of(g, 5)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    a = Trainer(g, plan, optimizer=SGD(lr=0.1, momentum=0.9))
    a.step(x, y)
    a.save_checkpoint(tmp_path / "ck.npz")
    b = Trainer(g, plan, optimizer=SGD(lr=0.1, momentum=0.9))
    b.load_checkpoint(tmp_path / "ck.npz")
    assert b.steps == 1
    assert [b.step(x, y) for _ in range(2)] == [a.step(x, y) for _ in range(2)]


# ------------------------------------------------------------------------------------ 4. description, bad input
def test_description_splits_every_dimension_and_reads_its_own_block():
    g = dropout_graph()
    op = g["d1"]
    assert not op.has_weights and op.desc.forward_flops() == 3 * math.prod(op.shape)
    for s in sw.strategies_of(op):
        assert s.valid and s.kind == "output"
        for part in s.regions:
            (box,) = part.values()
            assert box == tuple((0, n) if d != "nchw".index(s.dimension) else box[d] for d, n in enumerate(op.shape))


def test_default_seeds_differ_between_ops_and_are_stable():
    g = dropout_graph()
    assert g["d0"].attrs["seed"] == 11
    assert g["d1"].attrs["seed"] != g["d2"].attrs["seed"]
    assert dropout_graph()["d1"].attrs["seed"] == g["d1"].attrs["seed"]


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan"), True, "0.5", 1 - 1e-9])
def test_bad_probabilities_are_refused(p):
    g = sw.Graph()
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match="dropout p"):
        g.dropout(x, p, name="d")
    assert "d" not in g


@pytest.mark.parametrize("seed", [-1, 2**64, True, 1.5])
def test_bad_seeds_are_refused(seed):
    g = sw.Graph()
    with pytest.raises(GraphError, match="seed"):
        g.dropout(g.input("x", (2, 3)), 0.5, seed=seed)


def test_the_runtime_refuses_a_bad_probability():
    g = dropout_graph()
    g["d1"].attrs["p"] = 1.0   # past the builder's checks: the runtime's own
    with pytest.raises(ValueError, match="dropout"):
        Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}))
