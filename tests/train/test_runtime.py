"""The native runtime (csrc/exec/, csrc/cpu/backend_cpu.c): determinism, memory, faults, bad input.

* The same plan run twice from the same seed gives bitwise-identical weights whatever the
  thread timing: random pauses before every task (a test-only switch of the CPU backend)
  change nothing, nor does running every device on one thread, nor giving every buffer
  its own memory instead of the planned reuse.
* A failing kernel raises a clear exception and leaves the weights of the last completed
  step; the next step runs as if nothing happened.
* The op table in C names the same kinds as the graph builder; an op kind without CPU
  kernels is refused when the trainer is built.
* Bad arguments to the runtime raise ValueError/TypeError, a runtime in use by another
  thread raises RuntimeError.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.iteration.lower import plan_arrays
from shardwise.ops.builtin import KINDS
from shardwise.planning.problem import make_problem
from shardwise.train.runtime import NativeExecutor, op_attrs
from shardwise.train.trainer import SGD, Trainer

from strategies_random import random_plan
from shared_graphs import mixed_graph

OPT = SGD(lr=0.05, momentum=0.9, weight_decay=1e-4)
SGD_ARGS = OPT.runtime_args(0)   # (kind, lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps)


def _batch(g, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, g.ops[-1].shape[1], g.ops[0].shape[0])
    return x, y


def _trainer(g, plan, **executor):
    """A trainer whose executor is built with the given options (same initial weights)."""
    t = Trainer(g, plan, optimizer=OPT, seed=0)
    if executor:
        weights = t.get_weights()
        t.executor = NativeExecutor(g, plan, t.task_graph, **executor)
        t.set_weights(weights)
    return t


def _run(t, x, y, steps=3):
    return [t.step(x, y) for _ in range(steps)], t.get_weights()


def _assert_identical(a, b):
    (la, wa), (lb, wb) = a, b
    assert la == lb
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)


@pytest.mark.parametrize("seed", range(3))
def test_thread_timing_changes_nothing_bit_for_bit(seed):
    """Random plans (reduction splits, batchnorm, concat) on 4 devices: with random pauses of up
    to 300 us before every task, the losses and weights equal an undisturbed run's exactly."""
    g = mixed_graph()
    x, y = _batch(g, seed)
    plan = random_plan(g, sw.DeviceGraph.cpu(4), np.random.default_rng(seed), reductions=True)
    calm = _run(_trainer(g, plan, threads=4), x, y)
    shaken = _run(_trainer(g, plan, threads=4, jitter_us=300), x, y)
    _assert_identical(calm, shaken)


def test_one_thread_and_no_memory_reuse_give_the_same_bits():
    g = sw.models.get("resnet18_small", batch=8)
    x, y = _batch(g)
    plan = sw.search(g, sw.DeviceGraph.cpu(3))
    planned = _run(_trainer(g, plan), x, y, steps=2)
    _assert_identical(planned, _run(_trainer(g, plan, threads=1), x, y, steps=2))
    _assert_identical(planned, _run(_trainer(g, plan, reuse=False), x, y, steps=2))


def test_memory_reuse_makes_the_arenas_smaller_than_separate_buffers():
    g = sw.models.get("resnet18_small", batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    t = Trainer(g, plan)
    separate = NativeExecutor(g, plan, t.task_graph, reuse=False)
    reused = t.executor.arena_bytes()
    alone = separate.arena_bytes()
    # Activations stay live until the backward pass reads them, so what reuse saves is the
    # gradients, staging regions and the partial gradients of fan-outs (a gradient's first
    # term is written in place, not staged): a quarter of the separate buffers at least.
    for d in reused:
        assert reused[d] < alone[d] * 3 / 4
        assert alone[d] >= t.memory_plan.devices[d].sum_of_buffers


def test_a_failing_kernel_leaves_the_last_completed_step():
    """Labels out of range reach the loss kernel only when the trainer's checks are bypassed:
    the kernel refuses them, the step raises, the weights stay those of the last step, and the
    next step runs as a fresh trainer's would."""
    g = sw.models.lenet5(batch=8)
    x, y = _batch(g)
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    t, fresh = _trainer(g, plan), _trainer(g, plan)
    before = t.get_weights()
    with pytest.raises(ValueError, match="label"):
        t.executor.run(x, np.full(8, 99, np.int32), optimizer=OPT)
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    assert t.step(x, y) == fresh.step(x, y)
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(v, fresh.get_weights()[k], err_msg=k)


def test_backends_lists_the_cpu_backend_and_unknown_ones_are_refused():
    assert sw.backends()[0] == "cpu" and set(sw.backends()) <= {"cpu", "cuda"}   # cuda where built (test_gpu_plan)
    g = sw.models.lenet5(batch=8)
    with pytest.raises(sw.ConfigError, match="unknown backend 'tpu'; this installation has: 'cpu'"):
        Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)), backend="tpu")


def test_the_op_table_names_the_builders_kinds():
    assert set(_core.OP_KINDS) == set(KINDS) | {"custom"}
    assert set(_core.CPU_OP_KINDS) == set(KINDS)     # every built-in kind trains on the CPU
    assert len(_core.OP_ROLES) == len(_core.OP_KINDS)


def test_an_op_without_cpu_kernels_is_refused_when_the_trainer_is_built():
    @sw.op
    def shift(x):
        return lambda n, c: x[n, c]

    g = sw.Graph("custom")
    x = g.input("x", (4, 6))
    h = g.custom(shift, [x], name="s")
    g.softmax(g.linear(h, 3), name="prob")
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    with pytest.raises(sw.ConfigError, match="no kernels for op kind 'custom'"):
        Trainer(g, plan)
    # the runtime asks the backend too (a caller may build one directly)
    with pytest.raises(ValueError, match=r"op 1 \(custom\): the cpu backend has no kernels for op kind 'custom'"):
        _core.Runtime(*_runtime_args(g, plan), 1)


def test_backends_say_which_ops_they_run():
    """supports_op: the backend's own answer (sw_backend_i.supports_op), which the Trainer asks."""
    conv = {"kind": "conv2d", "name": "c", "kernel": (3, 3), "stride": (1, 1), "padding": (1, 1),
            "dilation": (2, 2), "group_out_channels": 4, "relu": False}
    assert _core.supports_op("cpu", conv, 4) is None           # grouped and dilated: the CPU runs it
    assert _core.supports_op("cpu", {"kind": "custom", "name": "s"}, 2) == "has no kernels for op kind 'custom'"
    assert _core.supports_op("record", {"kind": "custom", "name": "s"}, 2) is None   # records anything
    with pytest.raises(ValueError, match=r"op 0 'c' \(conv2d\): attribute 'padding' is missing"):
        _core.supports_op("cpu", {k: v for k, v in conv.items() if k != "padding"}, 4)
    with pytest.raises(ValueError, match="unknown backend tpu"):
        _core.supports_op("tpu", conv, 4)
    if "cuda" in sw.backends():   # its answer comes from the module, without a GPU
        assert "grouped or dilated" in _core.supports_op("cuda", conv, 4)
        assert "(N, C) logits" in _core.supports_op("cuda", {"kind": "softmax", "name": "p"}, 3)
        assert _core.supports_op("cuda", {"kind": "layer_norm", "name": "ln", "eps": 1e-5}, 3) == \
            "has no kernels for op kind 'layer_norm'"


# --------------------------------------------------------------------------- bad input
def _runtime_args(g, plan):
    return make_problem(g, plan.devices, plan.options), *plan_arrays(plan), op_attrs(g)


def test_bad_runtime_arguments_are_refused():
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    problem, kinds, degrees, dev_ptr, devs, attrs = _runtime_args(g, plan)
    with pytest.raises(TypeError, match="Problem"):
        _core.Runtime(object(), kinds, degrees, dev_ptr, devs, attrs, 2)
    with pytest.raises(ValueError, match="attrs must be"):
        _core.Runtime(problem, kinds, degrees, dev_ptr, devs, attrs[:-1], 2)
    # attributes travel by name, one typed record per op kind (csrc/exec/op_attrs.h): a wrong one
    # is an error naming the op and the attribute
    conv = 1
    assert attrs[conv]["kind"] == "conv2d"
    for change, message in (({"kind": "conv3d"}, "unknown op kind 'conv3d'"),
                            ({"kernel": (0, 5)}, r"\(conv2d\): attribute 'kernel' must be a pair of integers in "
                                                 r"\[1, 16777216\]"),
                            ({"stride": 2.5}, "attribute 'stride' must be a pair"),
                            ({"groups": 2}, r"unknown attribute 'groups' \(conv2d takes kernel, stride, padding, "
                                            r"dilation, group_out_channels, relu\)")):
        bad = [dict(a) for a in attrs]
        bad[conv].update(change)
        with pytest.raises(ValueError, match=message):
            _core.Runtime(problem, kinds, degrees, dev_ptr, devs, bad, 2)
    bad = [dict(a) for a in attrs]
    del bad[conv]["relu"]
    with pytest.raises(ValueError, match=f"op {conv} '{g.ops[conv].name}' \\(conv2d\\): attribute 'relu' is missing"):
        _core.Runtime(problem, kinds, degrees, dev_ptr, devs, bad, 2)
    for threads, jitter in ((0, 0), (2, -1), (2, 10 ** 6)):
        with pytest.raises(ValueError, match="CPU backend"):
            _core.Runtime(problem, kinds, degrees, dev_ptr, devs, attrs, threads, jitter_us=jitter)
    rt = _core.Runtime(problem, kinds, degrees, dev_ptr, devs, attrs, 2)
    x, y = _batch(g)
    inputs = [x] + [None] * (len(g.ops) - 1)
    labels = y.astype(np.int32)
    with pytest.raises(ValueError, match="one per op"):
        rt.forward(inputs[:-1], labels)
    with pytest.raises(ValueError, match="has no data"):
        rt.forward([None] * len(g.ops), labels)
    with pytest.raises(ValueError, match="dimension 0"):
        rt.forward([x[:4]] + inputs[1:], labels)
    with pytest.raises(ValueError, match="1-D integer array of 8"):
        rt.forward(inputs, labels[:3])
    with pytest.raises(ValueError, match="1-D integer array"):
        rt.forward(inputs, labels.astype(np.float32))
    with pytest.raises(ValueError, match="floating-point"):
        rt.forward([x.astype(np.int32)] + inputs[1:], labels)
    with pytest.raises(ValueError, match="not an input op"):
        rt.forward(inputs[:-1] + [x], labels)
    nan = x.copy()
    nan[-1, 0, 0, 0] = np.nan          # the last element: the whole array is scanned
    with pytest.raises(ValueError, match="NaN or infinity"):
        rt.forward([nan] + inputs[1:], labels)
    classes = g.ops[-1].shape[1]
    for wrong in (-1, classes):
        out = labels.copy()
        out[-1] = wrong
        with pytest.raises(ValueError, match=f"labels must lie in 0..{classes - 1}"):
            rt.step(inputs, out, *SGD_ARGS)
    huge = labels.astype(np.uint64)
    huge[0] = 2 ** 63                  # wraps negative in int64: refused, not taken as a class
    with pytest.raises(ValueError, match="labels must lie"):
        rt.forward(inputs, huge)
    # other float and integer dtypes, and non-contiguous arrays, are converted
    wide = np.asfortranarray(x.astype(np.float64))
    assert rt.forward([wide] + inputs[1:], labels.astype(np.uint8)) == pytest.approx(rt.forward(inputs, labels),
                                                                                     rel=1e-6)
    with pytest.raises(IndexError, match="no buffer"):
        rt.buffer(10 ** 6)
    with pytest.raises(ValueError, match="not an optimizer state buffer"):
        rt.set_updates([(0, 1)])
    with pytest.raises(TypeError, match="pairs"):
        rt.set_updates([0])
    # the optimizer: its kind must match the state the runtime was lowered with (one buffer
    # per slice here: SGD), its numbers lie in torch.optim's ranges; nothing runs otherwise
    before = [rt.buffer(b).copy() for b in range(4)]
    for kind, lr, wd, mom, damp, b1, b2, eps, match in (
            (1, 1e-3, 0.0, 0.0, 0.0, 0.9, 0.999, 1e-8, "Adam keeps 2 state buffer"),
            (7, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "unknown optimizer kind 7"),
            (0, -0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "finite and >= 0"),
            (0, float("nan"), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "finite and >= 0"),
            (0, 0.1, 0.0, float("inf"), 0.0, 0.0, 0.0, 0.0, "finite and >= 0")):
        with pytest.raises(ValueError, match=match):
            rt.step(inputs, labels, kind, lr, wd, mom, damp, False, b1, b2, eps)
    assert all(np.array_equal(rt.buffer(b), v) for b, v in enumerate(before))
    assert np.isfinite(rt.forward(inputs, labels))


def test_a_runtime_used_by_two_threads_at_once_refuses_the_second():
    g = sw.models.get("alexnet_small", batch=16)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    problem, kinds, degrees, dev_ptr, devs, attrs = _runtime_args(g, plan)
    rt = _core.Runtime(problem, kinds, degrees, dev_ptr, devs, attrs, 1, jitter_us=2000)   # slow steps
    x, y = _batch(g)
    inputs, labels = [x] + [None] * (len(g.ops) - 1), y.astype(np.int32)
    errors: list[BaseException] = []
    started = threading.Event()

    def other():
        started.set()
        for _ in range(3):
            rt.step(inputs, labels, *sw.SGD(lr=0.0).runtime_args(0))

    th = threading.Thread(target=other)
    th.start()
    started.wait()
    refused = 0
    while th.is_alive():
        try:
            rt.forward(inputs, labels)
        except RuntimeError as exc:
            errors.append(exc)
            refused += 1
    th.join()
    assert refused > 0
    assert all("in use by another thread" in str(e) for e in errors)


def test_a_gradient_block_no_consumer_reads_is_zeros():
    """A stride-2 1x1 convolution over 4 rows reads rows 0 and 2 (the region [0, 3)): split over
    4 workers by rows, the producer's last worker gets no gradient piece, and its gradient
    (which its weight gradient reads) must be zeros, not whatever the arena held (a zero_grad
    task writes them)."""
    from training_checks import RTOL, assert_close_weights, reference_run

    g = sw.Graph("skip")
    x = g.input("x", (4, 2, 4, 4))
    h = g.conv2d(x, 2, kernel=1, name="c1")
    h = g.conv2d(h, 2, kernel=1, stride=2, name="c2")
    g.softmax(g.linear(g.flatten(h), 3, name="fc"), name="prob")
    d = sw.DeviceGraph.cpu(4)
    plan = sw.Plan.from_dict(g, d, {"c1": {"h": 4}})
    tg = sw.lower(plan)
    assert any(t.kind == "zero_grad" and t.op == "c1" for t in tg.tasks)
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((4, 2, 4, 4)).astype(np.float32)
    ys = rng.integers(0, 3, 4)
    want_losses, want_params = reference_run(g, xs, ys, 3, OPT)
    t = Trainer(g, plan, optimizer=OPT, seed=0)
    losses = [t.step(xs, ys) for _ in range(3)]
    np.testing.assert_allclose(losses, want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_params)
