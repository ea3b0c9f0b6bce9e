"""Adam and AdamW: the update kernel, the reference, PyTorch, every plan, the optimizer state.

The ladder: the C update kernel equals the NumPy reference (python/shardwise/reference/optim.py)
bitwise; the reference equals torch.optim within float32 rounding on the same gradients;
training with any plan equals torch.optim within 1e-5 after 10 steps from the same weights
(set with Trainer.set_weights); several workers equal one; the state (exp_avg,
exp_avg_sq, step counts) is sharded like the weights.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise import reference as ref
from shardwise.train.trainer import Trainer
from strategies_random import random_plan
from task_checks import check_data_flow

STEPS = 10
TOL = 1e-5   # PyTorch equality of weights and losses after STEPS steps (the issue's bound)

# the runtime's optimizer kinds (csrc/cpu/optim.h)
SGD_KIND, ADAM_KIND, ADAMW_KIND = 0, 1, 2


def smooth_cnn(batch: int = 8) -> sw.Graph:
    """A small convolutional network with tanh activations and average pooling: no ReLU or
    max-pool decisions that float rounding could flip, so two implementations agree closely."""
    g = sw.Graph("smooth")
    x = g.input("x", (batch, 3, 12, 12))
    x = g.conv2d(x, 8, kernel=3, padding=1, name="conv")
    x = g.tanh(x, name="act1")
    x = g.pool2d(x, kernel=2, kind="avg", name="pool")
    x = g.flatten(x, name="flat")
    x = g.linear(x, 32, name="fc1")
    x = g.tanh(x, name="act2")
    x = g.linear(x, 10, name="fc2")
    g.softmax(x, name="prob")
    return g


def batches(g: sw.Graph, count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape, classes = g.ops[0].shape, g.ops[-1].shape[1]
    return [(rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]))
            for _ in range(count)]


# ----------------------------------------------------------------------------- PyTorch twins
def torch_smooth_cnn(torch):
    """PyTorch's modules for smooth_cnn, with PyTorch's own initialization; (forward, params)."""
    torch.manual_seed(0)
    nn, F = torch.nn, torch.nn.functional
    conv, fc1, fc2 = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 6 * 6, 32), nn.Linear(32, 10)
    params = {"conv.weight": conv.weight, "conv.bias": conv.bias, "fc1.weight": fc1.weight,
              "fc1.bias": fc1.bias, "fc2.weight": fc2.weight, "fc2.bias": fc2.bias}

    def forward(x):
        h = F.avg_pool2d(torch.tanh(conv(x)), 2)
        return fc2(torch.tanh(fc1(h.flatten(1))))
    return forward, params


def torch_lenet5(torch):
    torch.manual_seed(0)
    nn, F = torch.nn, torch.nn.functional
    layers = {"conv1": nn.Conv2d(1, 6, 5), "conv2": nn.Conv2d(6, 16, 5), "fc1": nn.Linear(400, 120),
              "fc2": nn.Linear(120, 84), "fc3": nn.Linear(84, 10)}
    params = {f"{k}.{p}": getattr(m, p) for k, m in layers.items() for p in ("weight", "bias")}

    def forward(x):
        h = F.max_pool2d(F.relu(layers["conv1"](x)), 2)
        h = F.max_pool2d(F.relu(layers["conv2"](h)), 2)
        h = F.relu(layers["fc2"](F.relu(layers["fc1"](h.flatten(1)))))
        return layers["fc3"](h)
    return forward, params


def torch_run(torch, twin, make_opt, data):
    """Losses and final weights of STEPS steps of PyTorch from its own initialization."""
    forward, params = twin(torch)
    start = {k: v.detach().numpy().copy() for k, v in params.items()}
    opt = make_opt(list(params.values()))
    losses = []
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(forward(torch.tensor(x)), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return start, losses, {k: v.detach().numpy() for k, v in params.items()}


def plans(g: sw.Graph) -> dict[str, sw.Plan]:
    return {"data x2": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)),
            "model x4": sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(4)),
            "owt x3": sw.strategies.owt(g, sw.DeviceGraph.cpu(3))}


OPTIMIZERS = {
    "Adam": (lambda: sw.Adam(lr=1e-3, weight_decay=1e-2),
             lambda torch, p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-2)),
    "AdamW": (lambda: sw.AdamW(lr=3e-4, weight_decay=0.01),
              lambda torch, p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.01)),
    "Adam betas": (lambda: sw.Adam(lr=2e-3, betas=(0.5, 0.9), eps=1e-6),
                   lambda torch, p: torch.optim.Adam(p, lr=2e-3, betas=(0.5, 0.9), eps=1e-6)),
}


def assert_equal_to_torch(t: Trainer, data, want_losses, want_weights) -> None:
    losses = [t.step(x, y) for x, y in data]
    np.testing.assert_allclose(losses, want_losses, rtol=TOL)
    got = t.get_weights()
    for k, w in want_weights.items():
        np.testing.assert_allclose(got[k], w, rtol=0, atol=TOL, err_msg=k)


@pytest.mark.parametrize("plan_name", ["data x2", "model x4", "owt x3"])
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
def test_equal_to_torch_after_ten_steps(plan_name, opt_name):
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    g = smooth_cnn()
    data = batches(g, STEPS)
    ours, theirs = OPTIMIZERS[opt_name]
    start, want_losses, want_weights = torch_run(torch, torch_smooth_cnn, lambda p: theirs(torch, p), data)
    t = Trainer(g, plans(g)[plan_name], optimizer=ours())
    t.set_weights(start)
    assert_equal_to_torch(t, data, want_losses, want_weights)
    # the weights moved: the comparison is not of two untouched networks
    assert max(float(np.abs(want_weights[k] - start[k]).max()) for k in start) > 100 * TOL


@pytest.mark.parametrize("plan_name", ["data x2", "model x4"])
def test_lenet_with_the_issues_adamw_equals_torch(plan_name):
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    g = sw.models.lenet5(batch=8)
    data = batches(g, STEPS, seed=1)
    start, want_losses, want_weights = torch_run(
        torch, torch_lenet5, lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.01), data)
    t = Trainer(g, plans(g)[plan_name], optimizer=sw.AdamW(lr=3e-4, weight_decay=0.01))
    t.set_weights(start)
    assert_equal_to_torch(t, data, want_losses, want_weights)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("opt", [sw.Adam(lr=1e-3, weight_decay=1e-3), sw.AdamW(lr=1e-3)], ids=["Adam", "AdamW"])
def test_several_workers_equal_one(seed, opt):
    g = smooth_cnn()
    rng = np.random.default_rng(seed)
    data = batches(g, 5, seed=seed)
    one = Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=opt)
    many = Trainer(g, random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(2, 5))), rng), optimizer=opt)
    np.testing.assert_allclose([many.step(x, y) for x, y in data], [one.step(x, y) for x, y in data], rtol=TOL)
    want = one.get_weights()
    for k, v in many.get_weights().items():
        np.testing.assert_allclose(v, want[k], rtol=0, atol=TOL, err_msg=k)


# ----------------------------------------------------------------------------- optimizer state
def weight_names(t: Trainer) -> dict[tuple[str, int], str]:
    """(op, weight input slot) -> "op.weight" / "op.bias"."""
    tg = t.task_graph
    return {(op, tg.buffers[b].slot): f"{op}.{w}" for (op, w, _), b in tg.params.items()}


def test_adam_state_is_sharded_like_the_weights():
    g = smooth_cnn()
    t = Trainer(g, sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(4)), optimizer=sw.AdamW())
    tg = t.task_graph
    updates = [task for task in tg.tasks if task.kind == "update"]
    assert updates
    sliced = 0
    for u in updates:
        param, grad, m, v = u.reads
        assert u.writes == (param, m, v)
        pb = tg.buffers[param]
        for s in (m, v):   # each moment: the parameter slice's box, on its device
            sb = tg.buffers[s]
            assert (sb.kind, sb.device, sb.box, sb.op, sb.slot) == ("momentum", pb.device, pb.box, pb.op, pb.slot)
        full = t._weight_shapes()[weight_names(t)[(pb.op, pb.slot)]]
        sliced += tuple(hi - lo for lo, hi in pb.box) != tuple(full)
    assert sliced > 0   # model parallelism split some weights, and their moments with them
    # two state buffers per slice, where SGD keeps one: the memory plan counts them
    sgd = Trainer(g, t.plan, optimizer=sw.SGD(momentum=0.9))
    for d, dev in t.memory_plan.devices.items():
        assert dev.optimizer_state == 2 * sgd.memory_plan.devices[d].optimizer_state
        assert dev.arena_bytes == t.memory_per_worker()[d]
    t.memory_plan.validate()


def test_step_counts_and_moments_follow_torch_state():
    """After k steps every parameter slice's count is k (torch's state['step']) and the moments
    assembled from their shards are torch's exp_avg and exp_avg_sq."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    g = smooth_cnn()
    data = batches(g, 4)
    forward, params = torch_smooth_cnn(torch)
    t = Trainer(g, sw.strategies.owt(g, sw.DeviceGraph.cpu(3)), optimizer=sw.Adam(lr=1e-3))
    t.set_weights({k: v.detach().numpy() for k, v in params.items()})
    opt = torch.optim.Adam(list(params.values()), lr=1e-3)
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(forward(torch.tensor(x)), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        t.step(x, y)
    counts = t.executor.updates()
    updates = [task for task in t.task_graph.tasks if task.kind == "update"]
    assert counts == {u.reads[2]: len(data) for u in updates}
    names = weight_names(t)
    for u in updates:
        pb = t.task_graph.buffers[u.reads[0]]
        state = opt.state[params[names[(pb.op, pb.slot)]]]
        assert float(state["step"]) == len(data)
        box = tuple(slice(lo, hi) for lo, hi in pb.box)
        for buf, key in zip(u.reads[2:], ("exp_avg", "exp_avg_sq")):
            want = state[key].numpy()[box]
            # gradients differ in the order of their sums: relative to the moment's scale
            scale = float(np.abs(want).max())
            np.testing.assert_allclose(t.executor.persistent[buf], want, rtol=0, atol=1e-4 * scale, err_msg=key)
            assert scale > 0


@pytest.mark.parametrize("seed", range(4))
def test_adam_lowering_is_sgds_with_a_second_state_buffer(seed):
    """sw.lower(plan, optimizer_state=2): the same tasks as SGD's, each update reading and
    writing one more state buffer of its slice; data flow and memory plan stay safe."""
    g = smooth_cnn()
    rng = np.random.default_rng(seed)
    plan = random_plan(g, sw.DeviceGraph.cpu(int(rng.integers(1, 5))), rng)
    sgd, adam = sw.lower(plan), sw.lower(plan, optimizer_state=2)
    check_data_flow(adam)
    assert [(t.kind, t.device, t.op) for t in adam.tasks] == [(t.kind, t.device, t.op) for t in sgd.tasks]
    updates = [t for t in adam.tasks if t.kind == "update"]
    assert len(adam.buffers) == len(sgd.buffers) + len(updates)
    assert all(len(t.reads) == 4 and len(t.writes) == 3 for t in updates)
    mp = sw.memory_plan(plan, check=True, optimizer_state=2)
    extra = sum(adam.buffers[t.reads[3]].nbytes for t in updates if adam.buffers[t.reads[3]].device == 0)
    assert mp.devices[0].optimizer_state == sw.memory_plan(plan).devices[0].optimizer_state + extra
    for bad in (0, 3, -1):
        with pytest.raises(ValueError, match="optimizer state buffers per parameter must be 1..2"):
            sw.lower(plan, optimizer_state=bad)


# ----------------------------------------------------------------------------- the kernel
KERNEL_CASES = {
    "Adam": (ADAM_KIND, dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
    "Adam L2": (ADAM_KIND, dict(lr=3e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    "Adam small beta1": (ADAM_KIND, dict(lr=1e-2, betas=(0.3, 0.5), eps=1e-3, weight_decay=0.0)),  # lerp's other form
    "Adam zero betas": (ADAM_KIND, dict(lr=1e-2, betas=(0.0, 0.0), eps=1e-8, weight_decay=0.0)),
    "AdamW": (ADAMW_KIND, dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)),
    "AdamW strong decay": (ADAMW_KIND, dict(lr=5e-2, betas=(0.85, 0.99), eps=1e-7, weight_decay=0.5)),
}


def kernel_step(kind, hp, t, p, g, m, v):
    b1, b2 = hp["betas"]
    _core.optimizer_update(kind, hp["lr"], hp["weight_decay"], 0.0, 0.0, False, b1, b2, hp["eps"], t, p, g, m, v)


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_kernel_equals_the_reference_bitwise(case):
    kind, hp = KERNEL_CASES[case]
    rng = np.random.default_rng(3)
    n = 777
    p = rng.standard_normal(n).astype(np.float32)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    want, state = {"w": p.copy()}, {}
    for t in range(1, STEPS + 1):
        g = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 2, n)).astype(np.float32)   # many magnitudes
        g[:5] = 0.0
        kernel_step(kind, hp, t, p, g, m, v)
        ref.adam_step(want, {"w": g}, state, decoupled=kind == ADAMW_KIND, **hp)
        np.testing.assert_array_equal(p, want["w"])
        np.testing.assert_array_equal(m, state["w"][1])
        np.testing.assert_array_equal(v, state["w"][2])


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_kernel_equals_torch_on_the_same_gradients(case):
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    kind, hp = KERNEL_CASES[case]
    rng = np.random.default_rng(4)
    n = 2000
    p = rng.standard_normal(n).astype(np.float32)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    tp = torch.tensor(p.copy(), requires_grad=True)
    cls = torch.optim.AdamW if kind == ADAMW_KIND else torch.optim.Adam
    opt = cls([tp], lr=hp["lr"], betas=hp["betas"], eps=hp["eps"], weight_decay=hp["weight_decay"])
    for t in range(1, STEPS + 1):
        g = rng.standard_normal(n).astype(np.float32)
        kernel_step(kind, hp, t, p, g, m, v)
        tp.grad = torch.tensor(g)
        opt.step()
    # float32 rounding apart (PyTorch's vector kernels fuse some multiply-adds): a few ulps
    np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m, opt.state[tp]["exp_avg"].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(v, opt.state[tp]["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-9)


def test_kernel_sgd_equals_the_reference_bitwise():
    rng = np.random.default_rng(5)
    n = 300
    p = rng.standard_normal(n).astype(np.float32)
    buf = np.zeros(n, np.float32)
    want, bufs = {"w": p.copy()}, {}
    for t in range(1, 6):
        g = rng.standard_normal(n).astype(np.float32)
        _core.optimizer_update(SGD_KIND, 0.1, 1e-3, 0.9, 0.1, False, 0.0, 0.0, 0.0, t, p, g, buf)
        ref.sgd_step(want, {"w": g}, bufs, lr=0.1, momentum=0.9, weight_decay=1e-3, dampening=0.1)
        np.testing.assert_array_equal(p, want["w"])
        np.testing.assert_array_equal(buf, bufs["w"])


@pytest.mark.parametrize("args,match", [
    ((ADAM_KIND, 1e-3, 0.0, 0.0, 0.0, False, 1.0, 0.999, 1e-8), "betas must lie in"),
    ((ADAM_KIND, 1e-3, 0.0, 0.0, 0.0, False, 0.9, -0.1, 1e-8), "betas must lie in"),
    ((ADAMW_KIND, 1e-3, 0.0, 0.0, 0.0, False, 0.9, 0.999, 0.0), "eps be > 0"),
    ((ADAM_KIND, -1e-3, 0.0, 0.0, 0.0, False, 0.9, 0.999, 1e-8), "finite and >= 0"),
    ((5, 1e-3, 0.0, 0.0, 0.0, False, 0.9, 0.999, 1e-8), "unknown optimizer kind"),
])
def test_kernel_refuses_bad_optimizers(args, match):
    p, g, m, v = (np.zeros(4, np.float32) for _ in range(4))
    with pytest.raises(ValueError, match=match):
        _core.optimizer_update(*args, 1, p, g, m, v)
    with pytest.raises(ValueError, match="Adam keeps 2 state buffer"):
        _core.optimizer_update(ADAM_KIND, 1e-3, 0.0, 0.0, 0.0, False, 0.9, 0.999, 1e-8, 1, p, g, m)
    with pytest.raises(ValueError, match="t must be >= 1"):
        _core.optimizer_update(ADAM_KIND, 1e-3, 0.0, 0.0, 0.0, False, 0.9, 0.999, 1e-8, 0, p, g, m, v)
    with pytest.raises(ValueError, match="s1 has 3 elements"):
        _core.optimizer_update(ADAM_KIND, 1e-3, 0.0, 0.0, 0.0, False, 0.9, 0.999, 1e-8, 1, p, g, m, v[:3])
    with pytest.raises(ValueError, match="float32"):
        _core.optimizer_update(ADAM_KIND, 1e-3, 0.0, 0.0, 0.0, False, 0.9, 0.999, 1e-8, 1, p, g, m, v.astype(float))
    assert not p.any() and not m.any() and not v.any()   # refused before anything changed
