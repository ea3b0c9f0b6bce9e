"""Batch norm's running statistics and the trainer's modes, checked without PyTorch.

A batch norm fed by the input op sees the raw minibatches, whatever the weights: its running
statistics after k steps are a closed form of the inputs alone (torch.nn.BatchNorm2d's rule,
written out here in float64), and an eval-mode forward pass through it is a closed form of
the running statistics and the weights.  PyTorch's own numbers: test_batchnorm_torch.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.errors import ConfigError, GraphError, ShapeError
from shardwise.train.inference import sample_mixing_ops
from shardwise.iteration.lower import lower, plan_arrays
from shardwise.planning.problem import make_problem
from shardwise.reference import BN_EPS
from shardwise.train.runtime import NativeExecutor, op_attrs
from shardwise.train.trainer import SGD, Trainer, TrainingError

N, C, H, W, CLASSES = 8, 4, 3, 3, 5


def input_bn_graph(momentum: float = 0.1) -> sw.Graph:
    """input (8, 4, 3, 3) -> batch norm -> flatten -> linear -> softmax."""
    g = sw.Graph("input_bn")
    x = g.input("x", (N, C, H, W))
    x = g.batchnorm2d(x, name="bn", momentum=momentum)
    x = g.linear(g.flatten(x, name="flat"), CLASSES, name="fc")
    g.softmax(x, name="prob")
    return g


def plans(g: sw.Graph) -> dict[str, sw.Plan]:
    """One worker, data parallelism, channels split, and samples x channels (replica groups)."""
    return {
        "one worker": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)),
        "data x4": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4)),
        "channels x2": sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), {"bn": {"c": 2}}),
        "samples x channels x4": sw.Plan.from_dict(g, sw.DeviceGraph.cpu(4), {"bn": {"n": 2, "c": 2},
                                                                          "fc": {"n": 2, "c": 1}}),
        "c4 x4": sw.Plan.from_dict(g, sw.DeviceGraph.cpu(4), {"x": {"n": 2}, "bn": {"c": 4}}),
    }


def batches(count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Minibatches with per-channel offsets and scales, so that means and variances differ."""
    rng = np.random.default_rng(seed)
    scale = np.array([0.5, 1.0, 2.0, 3.0], np.float32).reshape(1, C, 1, 1)
    shift = np.array([-1.0, 0.0, 0.5, 2.0], np.float32).reshape(1, C, 1, 1)
    return [((rng.standard_normal((N, C, H, W)) * scale + shift).astype(np.float32),
             rng.integers(0, CLASSES, N)) for _ in range(count)]


def expected_running(xs: list[np.ndarray], momentum: float) -> tuple[np.ndarray, np.ndarray]:
    """torch.nn.BatchNorm2d's rule in float64: from mean 0 and variance 1, per minibatch
    running = (1 - momentum) * running + momentum * statistic, the variance unbiased."""
    mean, var = np.zeros(C), np.ones(C)
    for x in xs:
        x64 = x.astype(np.float64)
        mean = (1 - momentum) * mean + momentum * x64.mean(axis=(0, 2, 3))
        var = (1 - momentum) * var + momentum * x64.var(axis=(0, 2, 3), ddof=1)
    return mean, var


def eval_probabilities(weights: dict, x: np.ndarray) -> np.ndarray:
    """The eval-mode forward pass of input_bn_graph in float64."""
    f = lambda k: weights[k].astype(np.float64)   # noqa: E731
    c = (slice(None), None, None)
    y = (x - f("bn.running_mean")[c]) / np.sqrt(f("bn.running_var")[c] + BN_EPS) * f("bn.weight")[c] \
        + f("bn.bias")[c]
    logits = y.reshape(len(x), -1) @ f("fc.weight").T + f("fc.bias")
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("name", list(plans(input_bn_graph())))
@pytest.mark.parametrize("momentum", [0.1, 0.3])
def test_running_statistics_follow_pytorchs_rule(name, momentum):
    g = input_bn_graph(momentum)
    t = Trainer(g, plans(g)[name], optimizer=SGD(lr=0.05))
    data = batches(4)
    for x, y in data:
        t.step(x, y)
    w = t.get_weights()
    mean, var = expected_running([x for x, _ in data], momentum)
    np.testing.assert_allclose(w["bn.running_mean"], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w["bn.running_var"], var, rtol=1e-5, atol=1e-6)
    assert w["bn.num_batches_tracked"] == 4 and w["bn.num_batches_tracked"].dtype == np.int64


def test_momentum_zero_keeps_and_one_replaces_the_running_statistics():
    data = batches(2, seed=3)
    frozen, last = (Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
                    for g in (input_bn_graph(0.0), input_bn_graph(1.0)))
    for x, y in data:
        frozen.step(x, y)
        last.step(x, y)
    np.testing.assert_array_equal(frozen.get_weights()["bn.running_mean"], np.zeros(C, np.float32))
    np.testing.assert_array_equal(frozen.get_weights()["bn.running_var"], np.ones(C, np.float32))
    mean, var = expected_running([data[-1][0]], 1.0)
    np.testing.assert_allclose(last.get_weights()["bn.running_mean"], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(last.get_weights()["bn.running_var"], var, rtol=1e-5)


def test_every_plan_and_every_replica_holds_the_same_bits():
    """The batch norm reads the raw minibatch, so every plan sees the same statistics: the
    running statistics agree bit for bit between plans, and between the replicas of a plan."""
    g = input_bn_graph()
    data = batches(3, seed=7)
    got = {}
    for name, plan in plans(g).items():
        t = Trainer(g, plan, optimizer=SGD(lr=0.05))
        for x, y in data:
            t.step(x, y)
        got[name] = t.get_weights()
        copies: dict = {}
        for b in t.task_graph.buffers:
            if b.kind == "running_stats":
                copies.setdefault(b.box, []).append(t.executor.persistent[b.id].copy())
        assert sum(len(v) for v in copies.values()) == plan.configs["bn"].workers
        for box, arrays in copies.items():
            for a in arrays[1:]:
                np.testing.assert_array_equal(a, arrays[0], err_msg=f"{name}: replicas of channels {box[1]}")
    first = got["one worker"]
    for name, w in got.items():
        for key in ("bn.running_mean", "bn.running_var"):
            np.testing.assert_array_equal(w[key], first[key], err_msg=f"{name}: {key}")


def test_eval_mode_normalizes_with_the_running_statistics():
    g = input_bn_graph()
    t = Trainer(g, plans(g)["samples x channels x4"], optimizer=SGD(lr=0.05))
    for x, y in batches(3):
        t.step(x, y)
    probe, labels = batches(1, seed=11)[0]
    w = t.get_weights()
    assert t.eval() is t and not t.training
    want = eval_probabilities(w, probe.astype(np.float64))
    np.testing.assert_allclose(t.predict(probe), want, rtol=1e-5, atol=1e-6)
    ce = -np.log(want[np.arange(N), labels]).mean()
    assert t.loss(probe, labels) == pytest.approx(ce, rel=1e-5)
    # train mode: the minibatch's statistics (the probe's own), which differ
    assert t.train() is t and t.training
    assert np.abs(t.predict(probe) - want).max() > 1e-3


@pytest.mark.parametrize("count", [1, N - 1, N, N + 3, 3 * N])
def test_eval_predict_takes_any_number_of_samples(count):
    g = input_bn_graph()
    t = Trainer(g, plans(g)["data x4"], optimizer=SGD(lr=0.05))
    for x, y in batches(2):
        t.step(x, y)
    rng = np.random.default_rng(count)
    probe = rng.standard_normal((count, C, H, W)).astype(np.float32)
    t.eval()
    got = t.predict(probe)
    assert got.shape == (count, CLASSES)
    np.testing.assert_allclose(got, eval_probabilities(t.get_weights(), probe.astype(np.float64)),
                               rtol=1e-5, atol=1e-6)
    assert t.predict({"x": probe}).tolist() == got.tolist()
    labels = rng.integers(0, CLASSES, count)
    assert t.evaluate(probe, labels) == pytest.approx(float((got.argmax(1) == labels).mean()))


def test_forward_passes_never_update_the_running_statistics():
    g = input_bn_graph()
    t = Trainer(g, plans(g)["channels x2"], optimizer=SGD(lr=0.05))
    (x, y), (probe, labels) = batches(2, seed=5)
    t.step(x, y)
    before = t.get_weights()
    for mode in (True, False):
        t.train(mode)
        t.predict(probe)
        t.loss(probe, labels)
        t.evaluate(probe, labels)
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def test_train_mode_with_batch_norm_takes_whole_minibatches_only():
    g = input_bn_graph()
    t = Trainer(g, plans(g)["one worker"])
    x, y = batches(1)[0]
    more = np.concatenate([x, x])
    with pytest.raises(ShapeError, match=r"train mode batchnorm2d 'bn'.*exactly 8 samples.*trainer\.eval\(\)"):
        t.predict(x[:5])
    with pytest.raises(ShapeError, match="exactly 8 samples"):
        t.predict(more)
    with pytest.raises(ShapeError, match="a multiple of the graph's minibatch of 8"):
        t.evaluate(x[:5], y[:5])
    assert t.predict(x).shape == (N, CLASSES)
    assert 0.0 <= t.evaluate(more, np.concatenate([y, y])) <= 1.0
    t.eval()
    assert t.predict(more).shape == (2 * N, CLASSES)


def test_graphs_without_sample_mixing_predict_any_count_in_train_mode():
    g = sw.models.lenet5(batch=4)
    t = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    x = np.random.default_rng(0).standard_normal((7,) + g.ops[0].shape[1:]).astype(np.float32)
    whole = np.concatenate([t.predict(x[:4]), t.predict(np.concatenate([x[4:], x[:1]]))[:3]])
    np.testing.assert_allclose(t.predict(x), whole, rtol=1e-6, atol=1e-7)


def test_sample_mixing_is_read_from_the_op_descriptions():
    assert sample_mixing_ops(input_bn_graph(), training=True) == ["bn"]
    assert sample_mixing_ops(input_bn_graph(), training=False) == []
    assert sample_mixing_ops(sw.models.lenet5(batch=4), training=True) == []
    g = sw.Graph("gram")   # x @ x: sample n's output reads every sample (the second operand's rows)
    x = g.input("x", (4, 4))
    g.softmax(g.matmul(x, x, name="xx"), name="prob")
    assert sample_mixing_ops(g, training=False) == ["xx"]
    t = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))).eval()
    with pytest.raises(ShapeError, match=r"op 'xx' \(matmul\) mixes the samples"):
        t.predict(np.ones((3, 4), np.float32))


def test_steps_in_eval_mode_are_refused():
    g = input_bn_graph()
    t = Trainer(g, plans(g)["one worker"]).eval()
    x, y = batches(1)[0]
    before = t.get_weights()
    with pytest.raises(TrainingError, match=r"eval mode.*Trainer\.train\(\)"):
        t.step(x, y)
    with pytest.raises(TrainingError, match="eval mode"):
        t.fit(np.concatenate([x, x]), np.concatenate([y, y]))
    assert t.steps == 0
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(v, before[k])
    t.train()
    t.step(x, y)
    assert t.steps == 1


@pytest.mark.parametrize("momentum", [-0.1, 1.5, float("nan"), True, "0.1", None])
def test_bad_momentum_is_refused(momentum):
    g = sw.Graph("bad")
    x = g.input("x", (2, 3, 4, 4))
    with pytest.raises(GraphError, match="momentum must be a number in"):
        g.batchnorm2d(x, momentum=momentum)
    assert [op.name for op in g.ops] == ["x"]


@pytest.mark.parametrize("mode", ["eval", 1, None])
def test_train_takes_a_bool(mode):
    g = input_bn_graph()
    with pytest.raises(ConfigError, match="train\\(\\) takes True or False"):
        Trainer(g, plans(g)["one worker"]).train(mode)


BAD_RUNNING = {
    "mean too short": ("bn.running_mean", np.zeros(C - 1), "running_mean: shape \\(3,\\), expected \\(4,\\)"),
    "var 2-D": ("bn.running_var", np.ones((1, C)), "running_var: shape \\(1, 4\\), expected \\(4,\\)"),
    "negative var": ("bn.running_var", np.array([1.0, -0.5, 1.0, 1.0]), "variance cannot be negative"),
    "NaN mean": ("bn.running_mean", np.array([0.0, np.nan, 0.0, 0.0]), "NaN or infinity"),
    "huge mean": ("bn.running_mean", np.full(C, 1e300), "beyond float32"),
    "text": ("bn.running_mean", np.array(["a"] * C), "not a real number type"),
    "negative count": ("bn.num_batches_tracked", np.array(-1), "must be >= 0"),
    "fractional count": ("bn.num_batches_tracked", np.array(2.5), "whole number"),
    "count of shape (2,)": ("bn.num_batches_tracked", np.array([1, 2]), "expected \\(\\)"),
}


@pytest.mark.parametrize("case", sorted(BAD_RUNNING))
def test_bad_running_statistics_are_refused_before_anything_changes(case):
    g = input_bn_graph()
    t = Trainer(g, plans(g)["channels x2"], optimizer=SGD(lr=0.05))
    x, y = batches(1)[0]
    t.step(x, y)
    before = t.get_weights()
    key, value, match = BAD_RUNNING[case]
    new = {k: v + 1 if v.dtype.kind == "f" else v for k, v in before.items()}
    new[key] = value
    with pytest.raises(ShapeError, match=match):
        t.set_weights(new)
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)


def test_set_weights_without_running_statistics_keeps_them():
    g = input_bn_graph()
    t = Trainer(g, plans(g)["data x4"], optimizer=SGD(lr=0.05))
    x, y = batches(1)[0]
    t.step(x, y)
    before = t.get_weights()
    params = {k: v * 2 for k, v in before.items() if k.endswith((".weight", ".bias"))}
    t.set_weights(params)
    after = t.get_weights()
    for k in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
        np.testing.assert_array_equal(after[k], before[k])
    np.testing.assert_array_equal(after["fc.weight"], before["fc.weight"] * 2)
    t.set_weights({"bn.num_batches_tracked": np.array(41), **params})
    t.step(x, y)
    assert t.get_weights()["bn.num_batches_tracked"] == 42


def test_checkpoints_keep_the_running_statistics(tmp_path):
    g = input_bn_graph()
    plan = plans(g)["samples x channels x4"]
    t = Trainer(g, plan, optimizer=SGD(lr=0.05, momentum=0.9))
    data = batches(4, seed=9)
    for x, y in data[:3]:
        t.step(x, y)
    t.save_checkpoint(tmp_path / "bn.ckpt")
    saved = t.get_weights()
    u = Trainer(g, plan, optimizer=SGD(lr=0.05, momentum=0.9))
    u.step(*data[3])   # different state, replaced by the checkpoint's
    u.load_checkpoint(tmp_path / "bn.ckpt")
    restored = u.get_weights()
    assert restored.keys() == saved.keys()
    for k in saved:
        np.testing.assert_array_equal(restored[k], saved[k], err_msg=k)
    assert restored["bn.num_batches_tracked"] == 3
    probe = batches(1, seed=10)[0][0]
    assert u.eval().predict(probe).tolist() == t.eval().predict(probe).tolist()
    t.train().step(*data[3])
    u.train().step(*data[3])
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(u.get_weights()[k], v, err_msg=k)


def test_the_runtime_refuses_a_bad_momentum_and_training_on_running_statistics():
    """Below the Trainer: the native runtime checks the momentum it is given (NaN too), and a
    training step cannot normalize with the running statistics (its backward pass needs the
    minibatch's)."""
    g = input_bn_graph()
    plan = plans(g)["one worker"]
    problem = make_problem(g, plan.devices, plan.options)
    for bad in (1.5, -0.25, float("nan")):
        attrs = op_attrs(g)
        attrs[g["bn"].index]["momentum"] = bad
        with pytest.raises(ValueError, match=r"batchnorm2d's momentum .* is not in \[0, 1\]"):
            _core.Runtime(problem, *plan_arrays(plan), attrs, 1)
    ex = NativeExecutor(g, plan, lower(plan))
    x, y = batches(1)[0]
    with pytest.raises(ValueError, match="minibatch's statistics, not the running ones"):
        ex.run(x, y.astype(np.int32), optimizer=SGD(), running=True)
