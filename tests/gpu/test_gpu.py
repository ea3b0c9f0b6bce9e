"""The CUDA backend on a real GPU, against the CPU backend (marked gpu; skipped, with the reason,
where no GPU can be used: the backend not built, its libraries, the driver, a GPU).

They pass on an NVIDIA H200 (docs/gpu.md records every run on a real GPU).  What they require:

1. every op kind, forward and backward: a small graph around it trains two steps on one GPU
   like on the CPU backend, losses and weights within 1e-4 (TF32 off);
2. random plans on 1-4 logical devices sharing the GPUs present (reduction splits too) train
   like the CPU backend within 1e-4;
3. the same plan twice: bitwise the same losses and weights;
4. LeNet-5 on the digits with a searched plan on 4 logical devices: at least 95% test accuracy;
5. the machine's GPUs as a device graph (local_gpus) train a plan made for them.

Run them with `python -m pytest -m gpu tests/gpu/test_gpu.py` on a machine with a GPU and the
CUDA backend built (SHARDWISE_CUDA=1 pip install ".[cuda]").
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.train.trainer import SGD, Trainer
from strategies_random import random_plan
from training_checks import RTOL, assert_close_weights

OK, REASON = sw.cuda.status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not OK, reason=f"no usable GPU: {REASON}")]


@pytest.fixture(autouse=True)
def no_tf32(monkeypatch):
    """TF32 would round products to 10-bit mantissas: 1e-4 needs full float32."""
    monkeypatch.delenv("SHARDWISE_CUDA_TF32", raising=False)


def one_device(g: sw.Graph) -> sw.Plan:
    return sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})


def image_graph(kind: str, batch: int = 4) -> sw.Graph:
    """x (batch, 3, 8, 8) -> the op under test -> flatten -> linear(5) -> softmax."""
    g = sw.Graph(f"one_{kind}")
    x = g.input("x", (batch, 3, 8, 8))
    if kind == "conv2d":
        x = g.conv2d(x, 4, kernel=3, padding=1, activation="relu", name="op")
        x = g.conv2d(x, 4, kernel=3, stride=2, padding=1, bias=False, name="op2")
    elif kind == "pool2d_max":
        x = g.pool2d(x, kernel=3, stride=2, padding=1, kind="max", name="op")
    elif kind == "pool2d_avg":
        x = g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name="op")
    elif kind == "add":
        x = g.add(g.conv2d(x, 3, kernel=1, name="a"), x, name="op")
    elif kind == "concat":
        x = g.concat([g.conv2d(x, 2, kernel=1, name="a"), x], axis=1, name="op")
    elif kind == "batchnorm2d":
        x = g.batchnorm2d(g.conv2d(x, 4, kernel=3, padding=1, name="a"), name="op")
    elif kind == "leaky_relu":
        x = g.leaky_relu(g.conv2d(x, 4, kernel=1, name="a"), negative_slope=0.2, name="op")
    else:   # relu and the point-wise activations, after a conv so that their gradient reaches a weight
        x = getattr(g, kind)(g.conv2d(x, 4, kernel=1, name="a"), name="op")
    x = g.flatten(x, name="fl")
    x = g.linear(x, 5, name="fc")
    g.softmax(x, name="prob")
    return g


def matmul_graph(batch: int = 4) -> sw.Graph:
    g = sw.Graph("one_matmul")
    x = g.input("x", (batch, 6))
    w = g.parameter((6, 5), name="w")
    g.softmax(g.matmul(x, w, name="op"), name="prob")
    return g


def data_for(g: sw.Graph, rng: np.random.Generator) -> tuple[dict, np.ndarray]:
    inputs = {op.name: rng.standard_normal(op.shape).astype(np.float32) for op in g.ops if op.kind == "input"}
    classes = [op for op in g.ops if op.kind == "softmax"][-1].shape[1]
    n = next(iter(inputs.values())).shape[0]
    return inputs, rng.integers(0, classes, n)


def train_both(g: sw.Graph, plan: sw.Plan, steps: int, seed: int):
    """(cpu losses, cpu trainer, cuda losses, cuda trainer) after `steps` SGD steps."""
    rng = np.random.default_rng(seed)
    x, y = data_for(g, rng)
    opt = SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)
    cpu = Trainer(g, plan, optimizer=opt, seed=0)
    gpu = Trainer(g, plan, optimizer=opt, seed=0, backend="cuda")
    return [cpu.step(x, y) for _ in range(steps)], cpu, [gpu.step(x, y) for _ in range(steps)], gpu


KINDS = ["conv2d", "pool2d_max", "pool2d_avg", "relu", "add", "concat", "batchnorm2d", "sigmoid", "tanh", "gelu",
         "silu", "leaky_relu"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_op_forward_and_backward_matches_the_cpu_backend(kind):
    g = image_graph(kind)
    want, cpu, got, gpu = train_both(g, one_device(g), steps=2, seed=1)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(gpu.get_weights(), cpu.get_weights())
    x, _ = data_for(g, np.random.default_rng(2))
    np.testing.assert_allclose(gpu.predict(x), cpu.predict(x), rtol=RTOL, atol=1e-6)


def test_matmul_and_parameter_match_the_cpu_backend():
    g = matmul_graph()
    want, cpu, got, gpu = train_both(g, one_device(g), steps=2, seed=3)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(gpu.get_weights(), cpu.get_weights())


def test_batched_matmul_with_transposes_matches_the_cpu_backend():
    g = sw.Graph("bmm")
    x = g.input("x", (4, 3, 6))
    w = g.parameter((4, 5, 6), name="w")
    y = g.matmul(x, w, transpose_b=True, name="op")              # (4, 3, 5) = x @ w^T per sample
    z = g.matmul(y, g.parameter((4, 3, 2), name="v"), transpose_a=True, name="op2")   # (4, 5, 2)
    g.softmax(g.linear(g.flatten(z, name="fl"), 5, name="fc"), name="prob")
    want, cpu, got, gpu = train_both(g, one_device(g), steps=2, seed=6)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(gpu.get_weights(), cpu.get_weights())


def test_lstm_cells_match_the_cpu_backend():
    g = sw.models.rnn(layers=1, hidden=8, steps=2, batch=4, input_size=6, num_classes=5)
    want, cpu, got, gpu = train_both(g, one_device(g), steps=2, seed=4)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(gpu.get_weights(), cpu.get_weights())


@pytest.mark.parametrize("seed", range(8))
def test_random_plans_on_1_to_4_logical_devices_match_the_cpu_backend(seed):
    from shared_graphs import mixed_graph

    g = mixed_graph()
    rng = np.random.default_rng(300 + seed)
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(1, 5))), rng, reductions=seed % 2 == 1)
    want, cpu, got, gpu = train_both(g, plan, steps=3, seed=seed)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(gpu.get_weights(), cpu.get_weights())


def test_the_same_plan_twice_is_bitwise_identical():
    from shared_graphs import mixed_graph

    g = mixed_graph()
    rng = np.random.default_rng(9)
    plan = random_plan(g, sw.DeviceGraph.cpu(4), rng)
    x, y = data_for(g, rng)
    runs = []
    for _ in range(2):
        t = Trainer(g, plan, optimizer=SGD(lr=0.1, momentum=0.9), seed=0, backend="cuda")
        runs.append(([t.step(x, y) for _ in range(3)], t.get_weights()))
    assert runs[0][0] == runs[1][0]
    for k, v in runs[0][1].items():
        np.testing.assert_array_equal(v, runs[1][1][k], err_msg=k)


def test_lenet5_learns_the_digits_on_4_logical_devices():
    pytest.importorskip("sklearn", reason="scikit-learn not installed (it bundles the digits): pip install scikit-learn")
    from shardwise.train.data import load_digits

    x_train, y_train, x_test, y_test = load_digits()
    g = sw.models.lenet5(batch=64)
    plan = sw.search(g, sw.DeviceGraph.cpu(4))
    # the command line's settings: 98.0% on the CPU backend with this plan
    t = Trainer(g, plan, optimizer=SGD(lr=0.02, momentum=0.9, weight_decay=1e-4), seed=0, backend="cuda")
    t.fit(x_train, y_train, epochs=20)
    assert t.evaluate(x_test, y_test) >= 0.95


def test_local_gpus_describe_this_machine_and_train_a_plan_made_for_them():
    d = sw.DeviceGraph.local_gpus(logical=4)
    gpus = sw.cuda.gpus()
    assert len(d) == 4 and d.gpu_of == sw.cuda.gpu_map(4, len(gpus))
    assert all(dev.flops > 1e12 and dev.memory > 1e9 for dev in d.devices)
    g = sw.models.lenet5(batch=16)
    plan = sw.search(g, d)
    want, cpu, got, gpu = train_both(g, plan, steps=2, seed=5)
    np.testing.assert_allclose(got, want, rtol=RTOL)


def big_map_graph(batch: int = 8) -> sw.Graph:
    """Feature maps large enough that the GPU sums a batch norm's channel in several slices:
    (8, 4, 64, 64) is 32,768 elements per channel, 4 slices on one device."""
    g = sw.Graph("big_maps")
    x = g.input("x", (batch, 3, 64, 64))
    x = g.batchnorm2d(g.conv2d(x, 4, kernel=3, padding=1, name="conv"), name="bn")
    x = g.pool2d(g.relu(x, name="relu"), kernel=4, stride=4, kind="max", name="pool")
    x = g.flatten(x, name="fl")
    g.softmax(g.linear(x, 5, name="fc"), name="prob")
    return g


@pytest.mark.parametrize("devices", [1, 2, 3])
def test_batch_norm_summed_in_slices_matches_the_cpu_backend(devices):
    g = big_map_graph()
    plan = one_device(g) if devices == 1 else random_plan(g, sw.DeviceGraph.cpu(devices),
                                                           np.random.default_rng(40 + devices))
    want, cpu, got, gpu = train_both(g, plan, steps=2, seed=devices)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(gpu.get_weights(), cpu.get_weights())


def test_profile_times_every_task_on_the_gpu_clock(tmp_path):
    """sw.profile(backend="cuda"): every op's shard timed by CUDA events; the task times of a
    timed step lie inside the step as the host measured it, and their sum cannot exceed it
    (one logical device: one stream, tasks one after another)."""
    import time

    g = big_map_graph()
    d = sw.DeviceGraph.local_gpus(logical=1)
    prof = sw.profile(g, d, repeats=2, cache_dir=str(tmp_path), progress=False, backend="cuda")
    assert prof.machine["backend"] == "cuda" and prof.machine["gpu"] == sw.cuda.gpus()[0].name
    for op in g.ops:
        if op.kind in ("conv2d", "batchnorm2d", "linear", "pool2d"):
            fwd, bwd = prof.split(op.name, (1,) * len(op.shape))
            assert 0 < fwd < 0.1 and 0 < bwd < 0.1, (op.name, fwd, bwd)
    t = Trainer(g, sw.strategies.data_parallel(g, d), backend="cuda")
    t.executor.time_tasks(True)
    x, y = data_for(g, np.random.default_rng(0))
    t.step(x, y)
    t0 = time.monotonic_ns()
    t.step(x, y)
    t1 = time.monotonic_ns()
    ns, _, _ = t.executor.task_times()
    ran = ns[:, 1] > 0
    assert ran.sum() >= len(g.ops)
    assert (ns[ran, 1] >= ns[ran, 0]).all()
    assert ns[ran, 0].min() >= t0 - 1_000_000 and ns[ran, 1].max() <= t1 + 1_000_000
    assert (ns[ran, 1] - ns[ran, 0]).sum() <= t1 - t0
