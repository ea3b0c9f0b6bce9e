"""Training the unrolled LSTM (``sw.models.rnn``) on the CPU executor.

The model exercises the four RNN op kinds (``parameter`` shared across
timesteps, ``matmul`` of two data tensors with a splittable k, ``lstm_cell``,
``lstm_hidden``) and a graph with several input ops (one per timestep, h0, c0)
fed as a dict.  Any plan -- random configurations with reduction splits, Tofu's
search -- must train like one worker and like the NumPy reference
(shardwise.reference, checked by finite differences in test_reference.py), and
the reference like the same LSTM written with PyTorch operations.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import reference as ref
from shardwise.errors import ShapeError
from shardwise.train.init import init_params
from shardwise.train.runtime import NativeExecutor
from shardwise.train.trainer import SGD, Trainer
from strategies_random import random_plan
from training_checks import RTOL, assert_close_weights, reference_run
OPT = SGD(lr=0.5, momentum=0.9, weight_decay=1e-4)   # a large step, so 3 steps move the weights visibly


def tiny_rnn() -> sw.Graph:
    return sw.models.rnn(layers=2, hidden=8, steps=3, batch=4, input_size=5, num_classes=3)


def rnn_batch(g: sw.Graph, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """{input name: array} for every input op (h0 and c0 nonzero, so the first step's h and
    c_prev paths matter) and labels."""
    rng = np.random.default_rng(seed)
    inputs = {op.name: rng.standard_normal(op.shape).astype(np.float32) for op in g.ops if op.kind == "input"}
    inputs["h0"] *= 0.5
    inputs["c0"] *= 0.5
    classes = g["softmax"].shape[1]
    return inputs, rng.integers(0, classes, g["softmax"].shape[0])


def one_worker(g, opt=OPT) -> Trainer:
    return Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=opt)


@pytest.fixture(scope="module")
def expected():
    """The one-worker run and the reference for the tiny RNN's batch: losses and weights."""
    g = tiny_rnn()
    inputs, labels = rnn_batch(g, 0)
    t = one_worker(g)
    losses = [t.step(inputs, labels) for _ in range(3)]
    want_losses, want_params = reference_run(g, inputs, labels, 3, OPT)
    np.testing.assert_allclose(losses, want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_params)
    assert losses[-1] < losses[0]
    initial = init_params(g, 0)
    assert all(np.abs(want_params[k] - initial[k]).max() > 1e-3 for k in initial)   # every weight trained
    return inputs, labels, losses, t.get_weights(), want_losses, want_params


# --------------------------------------------------------------------------- any plan, any worker count

@pytest.mark.parametrize("seed", range(16))
def test_random_plans_match_one_worker_and_reference(seed, expected):
    inputs, labels, one_losses, one_weights, want_losses, want_params = expected
    g = tiny_rnn()
    rng = np.random.default_rng(200 + seed)
    d = sw.DeviceGraph.cpu(int(rng.integers(1, 5)))
    plan = random_plan(g, d, rng, reductions=True)
    t = Trainer(g, plan, optimizer=OPT)
    losses = [t.step(inputs, labels) for _ in range(3)]
    np.testing.assert_allclose(losses, one_losses, rtol=RTOL)
    np.testing.assert_allclose(losses, want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), one_weights)
    assert_close_weights(t.get_weights(), want_params)


@pytest.mark.parametrize("seed", range(8))
def test_random_plans_gradients_match_reference(seed):
    """Each weight's gradient itself, read off one plain SGD step with lr 1 (w0 - w1): a check far
    more sensitive than weights after 3 small steps (the weights are ~0.3, their ulp ~3e-8)."""
    g = tiny_rnn()
    inputs, labels = rnn_batch(g, 7)
    params = init_params(g, 0)
    _, want = ref.loss_and_grads(g, params, inputs, labels)
    rng = np.random.default_rng(300 + seed)
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(2, 5))), rng, reductions=True)
    t = Trainer(g, plan, optimizer=SGD(lr=1.0))
    t.step(inputs, labels)
    got = {k: params[k] - v for k, v in t.get_weights().items()}
    for k in want:
        scale = float(np.abs(want[k]).max())
        assert scale > 1e-4, k
        err = float(np.abs(got[k] - want[k]).max())
        assert err <= RTOL * scale + 1e-7, f"{k}: |diff| {err:.3g}, gradient scale {scale:.3g}"


def test_random_plans_cover_the_new_ops_splits():
    """The seeds above split every new op kind over several workers, and matmul's k among
    2-4 workers (partition-n-reduce) in some plans: the test cannot pass by running serially."""
    g = tiny_rnn()
    seen: set[tuple[str, str]] = set()
    for seed in range(16):
        rng = np.random.default_rng(200 + seed)
        d = sw.DeviceGraph.cpu(int(rng.integers(1, 5)))
        for name, cfg in random_plan(g, d, rng, reductions=True).configs.items():
            kind = g[name].kind
            if cfg.workers > 1:
                seen.add((kind, "split"))
            if cfg.reduction is not None:
                seen.add((kind, "reduction"))
            if len(set(cfg.devices)) > 1 and cfg.reduction is not None and max(cfg.degrees) > 1:
                seen.add((kind, "reduction and output split"))
    for kind in ("parameter", "matmul", "lstm_cell", "lstm_hidden"):
        assert (kind, "split") in seen, kind
    assert ("matmul", "reduction") in seen
    assert ("matmul", "reduction and output split") in seen


@pytest.mark.parametrize("spec", [
    # k split with m (batch) split: every worker holds half of k for half of the rows
    {"matmul": {"n": 2, "k": 2}, "other": {"n": 2}},
    # k split with n (gate units) split, the parameters split by rows and columns
    {"matmul": {"c": 2, "k": 2}, "parameter": {"n": 2, "c": 2}, "other": {"c": 4}},
    # k among 4 workers; the LSTM ops split over both dimensions
    {"matmul": {"k": 4}, "other": {"n": 2, "c": 2}},
], ids=["k2xm2", "k2xn2", "k4"])
def test_hand_made_plans_with_matmul_reduction_splits(spec, expected):
    inputs, labels, one_losses, one_weights, _, _ = expected
    g = tiny_rnn()
    d = sw.DeviceGraph.cpu(4)
    plan_spec = {}
    for k, op in enumerate(g.ops):
        conf = dict(spec.get(op.kind, spec["other"] if op.kind in ("lstm_cell", "lstm_hidden") else {}))
        sizes = {**dict(zip(("n", "c"), op.shape)), "k": op.desc.extents[-1]}
        # layer 0 reads 5 + 8 = 13 features: its k (and its parameters' rows) stay whole
        conf = {dim: deg for dim, deg in conf.items() if sizes[dim] % deg == 0}
        workers = int(np.prod(list(conf.values()))) if conf else 1
        conf["devices"] = [(k + j) % 4 for j in range(workers)]   # rotate, so groups straddle devices
        plan_spec[op.name] = conf
    plan = sw.Plan.from_dict(g, d, plan_spec)
    assert all(plan.configs[op.name].reduction is not None for op in g.ops
               if op.kind == "matmul" and op.name.startswith("layer1"))
    t = Trainer(g, plan, optimizer=OPT)
    np.testing.assert_allclose([t.step(inputs, labels) for _ in range(3)], one_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), one_weights)


@pytest.mark.parametrize("ndev", [2, 4])
def test_tofu_plans_train_like_one_worker(ndev, expected):
    inputs, labels, one_losses, one_weights, _, _ = expected
    g = tiny_rnn()
    plan = sw.search(g, sw.DeviceGraph.cpu(ndev), algorithm="tofu")
    assert len({dev for c in plan.configs.values() for dev in c.devices}) == ndev   # the plan uses every worker
    assert any(c.reduction is not None for n, c in plan.configs.items() if g[n].kind == "matmul")
    t = Trainer(g, plan, optimizer=OPT)
    np.testing.assert_allclose([t.step(inputs, labels) for _ in range(3)], one_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), one_weights)


def test_threads_and_serial_runs_agree_exactly():
    """Gradient sums are chained in a fixed order: threads change nothing, bit for bit."""
    g = tiny_rnn()
    inputs, labels = rnn_batch(g, 3)
    plan = random_plan(g, sw.DeviceGraph.cpu(4), np.random.default_rng(9), reductions=True)
    a, b = Trainer(g, plan, optimizer=OPT), Trainer(g, plan, optimizer=OPT)
    b.executor = NativeExecutor(g, plan, b.task_graph, threads=1)   # every device on one thread
    b.set_weights(a.get_weights())
    assert a.executor.threads > 1
    for _ in range(2):
        assert a.step(inputs, labels) == b.step(inputs, labels)
    for k, v in a.get_weights().items():
        np.testing.assert_array_equal(v, b.get_weights()[k])


# --------------------------------------------------------------------------- PyTorch

def test_torch_lstm_matches():
    """The same LSTM written with torch operations (the nn.LSTM equations, explicit weights (E+H, H)
    per gate, weights shared across steps): loss and gradients of the reference within 1e-4 for 3
    SGD steps, and the executor on a 3-worker plan with reduction splits gives torch's losses and
    weights."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed")
    g = tiny_rnn()
    layers, steps = 2, 3
    inputs, labels = rnn_batch(g, 1)
    params = init_params(g, seed=0)
    tparams = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}

    def torch_loss():
        h0, c0 = torch.tensor(inputs["h0"]), torch.tensor(inputs["c0"])
        state = [(h0, c0)] * layers
        x = None
        for t in range(steps):
            x = torch.tensor(inputs[f"x{t}"])
            for layer in range(layers):
                h, c = state[layer]
                z = torch.cat([x, h], dim=1)
                w = {k: tparams[f"layer{layer}.W_{k}.weight"] for k in "ifgo"}
                c = torch.sigmoid(z @ w["f"]) * c + torch.sigmoid(z @ w["i"]) * torch.tanh(z @ w["g"])
                h = torch.sigmoid(z @ w["o"]) * torch.tanh(c)
                state[layer] = (h, c)
                x = h
        logits = torch.nn.functional.linear(x, tparams["fc.weight"], tparams["fc.bias"])
        return torch.nn.functional.cross_entropy(logits, torch.tensor(labels))

    opt = torch.optim.SGD(list(tparams.values()), lr=OPT.lr, momentum=OPT.momentum, weight_decay=OPT.weight_decay)
    bufs: dict = {}
    torch_losses = []
    for step in range(3):
        loss, grads = ref.loss_and_grads(g, params, inputs, labels)
        opt.zero_grad()
        tl = torch_loss()
        tl.backward()
        torch_losses.append(tl.item())
        assert loss == pytest.approx(tl.item(), rel=RTOL), f"loss at step {step}"
        for k in params:
            tg = tparams[k].grad.numpy()
            scale = max(float(np.abs(tg).max()), 1e-6)
            assert np.abs(grads[k] - tg).max() <= RTOL * scale, f"step {step} grad {k}"
        opt.step()
        ref.sgd_step(params, grads, bufs, lr=OPT.lr, momentum=OPT.momentum, weight_decay=OPT.weight_decay)
    torch_weights = {k: v.detach().numpy() for k, v in tparams.items()}
    assert_close_weights(params, torch_weights)

    plan = random_plan(g, sw.DeviceGraph.cpu(3), np.random.default_rng(4), reductions=True)
    t = Trainer(g, plan, optimizer=OPT)
    np.testing.assert_allclose([t.step(inputs, labels) for _ in range(3)], torch_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), torch_weights)


# --------------------------------------------------------------------------- the multi-input API

@pytest.fixture(scope="module")
def rnn_trainer():
    g = tiny_rnn()
    return Trainer(g, random_plan(g, sw.DeviceGraph.cpu(2), np.random.default_rng(1)), optimizer=OPT)


def _replace(inputs, name, value):
    out = dict(inputs)
    out[name] = value
    return out


BAD_STEPS = {
    "one array for several inputs": (lambda i: i["x0"], r"4 input ops|5 input ops|pass a dict"),
    "missing h0": (lambda i: {k: v for k, v in i.items() if k != "h0"}, r"missing \['h0'\]"),
    "unknown name": (lambda i: {**i, "x7": i["x0"]}, r"unknown 'x7'"),
    "wrong shape": (lambda i: _replace(i, "x1", np.zeros((4, 6), np.float32)), r"input 'x1' must have shape \(4, 5\)"),
    "wrong batch": (lambda i: _replace(i, "c0", np.zeros((3, 8), np.float32)), r"input 'c0' must have shape"),
    "integer dtype": (lambda i: _replace(i, "x2", np.zeros((4, 5), np.int64)), r"input 'x2' must be floating"),
    "NaN": (lambda i: _replace(i, "h0", np.full((4, 8), np.nan, np.float32)), r"input 'h0' contain NaN"),
    "inf": (lambda i: _replace(i, "x0", np.full((4, 5), np.inf, np.float32)), r"input 'x0' contain NaN or inf"),
}


@pytest.mark.parametrize("case", sorted(BAD_STEPS))
def test_bad_multi_input_steps_are_refused(case, rnn_trainer):
    g = rnn_trainer.graph
    inputs, labels = rnn_batch(g, 2)
    before = rnn_trainer.get_weights()
    steps = rnn_trainer.steps
    make, match = BAD_STEPS[case]
    with pytest.raises(ShapeError, match=match):
        rnn_trainer.step(make(inputs), labels)
    with pytest.raises(ShapeError, match=match):
        rnn_trainer.predict(make(inputs))
    assert rnn_trainer.steps == steps
    for k, v in rnn_trainer.get_weights().items():
        np.testing.assert_array_equal(v, before[k])


def test_bad_labels_for_a_multi_input_step(rnn_trainer):
    inputs, labels = rnn_batch(rnn_trainer.graph, 2)
    with pytest.raises(ShapeError, match="labels must be 4 integers"):
        rnn_trainer.step(inputs, labels[:3])
    with pytest.raises(ShapeError, match="labels must lie in 0..2"):
        rnn_trainer.step(inputs, labels + 3)


def test_single_input_graphs_take_an_array_or_a_dict():
    g = sw.models.lenet5(batch=4)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.ops[0].shape).astype(np.float32)
    y = rng.integers(0, 10, 4)
    a, b = one_worker(g), one_worker(g)
    assert a.step(x, y) == b.step({g.ops[0].name: x}, y)
    with pytest.raises(ShapeError, match="unknown 'image'"):
        a.step({g.ops[0].name: x, "image": x}, y)


def test_predict_fit_and_evaluate_with_a_dict():
    g = tiny_rnn()
    rng = np.random.default_rng(5)
    count = 10   # two minibatches of 4 and 2 samples left over
    data = {op.name: rng.standard_normal((count,) + op.shape[1:]).astype(np.float32)
            for op in g.ops if op.kind == "input"}
    labels = rng.integers(0, 3, count)
    plan = random_plan(g, sw.DeviceGraph.cpu(3), np.random.default_rng(6), reductions=True)

    # predict: the reference's softmax output
    t = Trainer(g, plan, optimizer=OPT)
    first = {k: v[:4] for k, v in data.items()}
    probs = t.predict(first)
    want = ref.forward(g, t.get_weights(), first)["softmax"]
    np.testing.assert_allclose(probs, want, rtol=RTOL, atol=1e-6)

    # evaluate: argmax accuracy over all 10 samples (the last chunk padded with the first ones)
    p2 = ref.forward(g, t.get_weights(), data)["softmax"]
    assert t.evaluate(data, labels) == pytest.approx(float((p2.argmax(1) == labels).mean()))

    # fit: the same steps as stepping by hand through the same shuffled minibatches
    history = t.fit(data, labels, epochs=2, shuffle_seed=11)
    manual = one_worker(g)
    order_rng = np.random.default_rng(11)
    want_history = []
    for _ in range(2):
        order = order_rng.permutation(count)
        losses = [manual.step({k: v[order[b * 4:(b + 1) * 4]] for k, v in data.items()},
                              labels[order[b * 4:(b + 1) * 4]]) for b in range(2)]
        want_history.append(sum(losses) / 2)
    np.testing.assert_allclose(history, want_history, rtol=RTOL)
    assert_close_weights(t.get_weights(), manual.get_weights())

    with pytest.raises(ShapeError, match="same number of samples"):
        t.fit({**data, "x1": data["x1"][:9]}, labels)
    with pytest.raises(ShapeError, match="10 samples but labels"):
        t.fit(data, labels[:9])
    with pytest.raises(ShapeError, match="fewer than one minibatch"):
        t.fit({k: v[:3] for k, v in data.items()}, labels[:3])
    with pytest.raises(ShapeError, match="as many labels as samples"):
        t.evaluate(data, labels[:4])


def test_inputs_with_different_minibatches_are_refused():
    g = sw.Graph("two_batches")
    a = g.input("a", (4, 3))
    b = g.input("b", (2, 3))
    g.softmax(g.add(g.matmul(a, g.parameter((3, 3), name="W")), g.matmul(a, g.parameter((3, 3)))), name="p")
    g.softmax(g.matmul(b, g.parameter((3, 2))), name="q")
    with pytest.raises(sw.ConfigError, match="same minibatch"):
        one_worker(g)


def test_profile_measures_the_rnn_ops(tmp_path):
    """sw.profile runs an RNN's partitions (several input ops, fed with a dict) on the CPU kernels."""
    from shardwise.planning.profile import _partitions

    g = sw.models.rnn(layers=1, hidden=8, steps=2, batch=4, input_size=8, num_classes=3)
    d = sw.DeviceGraph.cpu(2)
    prof = sw.profile(g, d, repeats=1, cache_dir=str(tmp_path))
    for op_name, partitions in _partitions(g, d).items():
        for degrees in partitions:
            fwd, bwd = prof.split(op_name, degrees)
            if g[op_name].kind in ("matmul", "lstm_cell", "lstm_hidden"):
                assert fwd > 0 and bwd > 0, (op_name, degrees)
