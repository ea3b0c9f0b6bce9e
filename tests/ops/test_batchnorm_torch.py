"""Batch norm's running statistics and eval mode against torch.nn.BatchNorm2d itself.

A small conv + batch norm network is written twice, in PyTorch and with the graph builder,
under the same names, so that PyTorch's ``state_dict()`` and ``Trainer.get_weights()`` share
their keys.  PyTorch runs in float64 from the same float32 weights (the exact answer: the
tolerances measure shardwise's float32 rounding alone), and trains with the same SGD steps.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.train.trainer import SGD, Trainer

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
nn = torch.nn
F = torch.nn.functional

N, CIN, SIZE, WIDTH, CLASSES = 8, 3, 6, 8, 5
TOL = 1e-5
LR = 0.05


class Net(nn.Module):
    """bn0 on the input, then two conv -> bn -> relu, flatten, fc."""

    def __init__(self, momentum: float = 0.1) -> None:
        super().__init__()
        self.bn0 = nn.BatchNorm2d(CIN, momentum=momentum)
        self.conv1 = nn.Conv2d(CIN, WIDTH, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTH, momentum=momentum)
        self.conv2 = nn.Conv2d(WIDTH, WIDTH, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(WIDTH, momentum=momentum)
        self.fc = nn.Linear(WIDTH * SIZE * SIZE, CLASSES)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(self.bn0(x))))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def graph(momentum: float = 0.1) -> sw.Graph:
    g = sw.Graph("conv_bn")
    x = g.input("x", (N, CIN, SIZE, SIZE))
    x = g.batchnorm2d(x, name="bn0", momentum=momentum)
    x = g.conv2d(x, WIDTH, kernel=3, padding=1, bias=False, name="conv1")
    x = g.relu(g.batchnorm2d(x, name="bn1", momentum=momentum), name="relu1")
    x = g.conv2d(x, WIDTH, kernel=3, padding=1, bias=False, name="conv2")
    x = g.relu(g.batchnorm2d(x, name="bn2", momentum=momentum), name="relu2")
    x = g.linear(g.flatten(x, name="flat"), CLASSES, name="fc")
    g.softmax(x, name="prob")
    return g


def plans(g: sw.Graph) -> dict[str, sw.Plan]:
    return {
        "one worker": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)),
        "data x4": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4)),
        "channels x2": sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(2)),
        "channels x4": sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(4)),
        "mixed x3": sw.Plan.from_dict(g, sw.DeviceGraph.cpu(3), {
            "bn0": {"c": 3}, "conv1": {"n": 2}, "bn1": {"n": 2, "h": 1}, "conv2": {"c": 2},
            "bn2": {"h": 3}, "relu2": {"c": 2}, "fc": {"n": 2}}),
        "samples x channels x4": sw.Plan.from_dict(g, sw.DeviceGraph.cpu(4), {
            "bn1": {"n": 2, "c": 2}, "bn2": {"c": 2, "w": 2}, "conv2": {"n": 4}}),
    }


def numpy_state(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def minibatches(count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shift = np.array([-1.0, 0.5, 2.0], np.float32).reshape(1, CIN, 1, 1)
    return [((rng.standard_normal((N, CIN, SIZE, SIZE)) * 1.5 + shift).astype(np.float32),
             rng.integers(0, CLASSES, N)) for _ in range(count)]


def torch_pair(momentum: float = 0.1, seed: int = 0) -> nn.Module:
    """PyTorch's model with random (float32) weights, in float64."""
    torch.manual_seed(seed)
    return Net(momentum).double()


def train_both(name: str, steps: int = 4, momentum: float = 0.1) -> tuple[Trainer, nn.Module]:
    """The same SGD steps in PyTorch (float64) and shardwise (float32) from the same weights."""
    model = torch_pair(momentum)
    g = graph(momentum)
    t = Trainer(g, plans(g)[name], optimizer=SGD(lr=LR))
    t.set_weights(numpy_state(model))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model.train()
    for x, y in minibatches(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(torch.from_numpy(x).double()), torch.from_numpy(y))
        loss.backward()
        opt.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=1e-4)
    return t, model


def torch_eval(model: nn.Module, x: np.ndarray) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        return F.softmax(model(torch.from_numpy(x).double()), dim=1).numpy()


@pytest.mark.parametrize("name", list(plans(graph())))
def test_running_statistics_equal_pytorchs_after_training(name):
    t, model = train_both(name)
    got, want = t.get_weights(), numpy_state(model)
    for bn in ("bn0", "bn1", "bn2"):
        for stat in ("running_mean", "running_var"):
            key = f"{bn}.{stat}"
            np.testing.assert_allclose(got[key], want[key], rtol=TOL, atol=TOL, err_msg=key)
        assert int(got[f"{bn}.num_batches_tracked"]) == int(want[f"{bn}.num_batches_tracked"]) == 4


@pytest.mark.parametrize("name", ["data x4", "channels x4", "mixed x3"])
def test_eval_outputs_equal_pytorchs_for_any_batch_size(name):
    t, model = train_both(name, steps=3)
    t.eval()
    rng = np.random.default_rng(1)
    for count in (1, N - 1, N, N + 3, 3 * N):
        x = (rng.standard_normal((count, CIN, SIZE, SIZE)) * 1.5).astype(np.float32)
        got = t.predict(x)
        assert got.shape == (count, CLASSES)
        np.testing.assert_allclose(got, torch_eval(model, x), rtol=0, atol=TOL, err_msg=f"{count} samples")
    x, y = minibatches(1, seed=2)[0]
    with torch.no_grad():
        want = F.cross_entropy(model(torch.from_numpy(x).double()), torch.from_numpy(y)).item()
    assert t.loss(x, y) == pytest.approx(want, rel=TOL)


def test_a_state_dict_with_running_statistics_predicts_as_pytorch():
    """Running statistics set in PyTorch (as a trained model has them) load with the rest of
    ``state_dict()``; eval-mode predictions then equal PyTorch's, and evaluate agrees."""
    model = torch_pair(seed=3)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for bn in (model.bn0, model.bn1, model.bn2):
            bn.running_mean.copy_(torch.rand(bn.num_features, generator=gen, dtype=torch.float64) * 2 - 1)
            bn.running_var.copy_(torch.rand(bn.num_features, generator=gen, dtype=torch.float64) * 2 + 0.1)
            bn.num_batches_tracked.fill_(17)
            bn.weight.copy_(torch.rand(bn.num_features, generator=gen, dtype=torch.float64) + 0.5)
    state = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in numpy_state(model).items()}
    g = graph()
    t = Trainer(g, plans(g)["samples x channels x4"])
    t.set_weights(state)
    assert int(t.get_weights()["bn2.num_batches_tracked"]) == 17
    x = np.random.default_rng(5).standard_normal((2 * N + 5, CIN, SIZE, SIZE)).astype(np.float32)
    want = torch_eval(model, x)
    np.testing.assert_allclose(t.eval().predict(x), want, rtol=0, atol=TOL)
    labels = np.random.default_rng(6).integers(0, CLASSES, len(x))
    assert t.evaluate(x, labels) == pytest.approx(float((want.argmax(1) == labels).mean()))
    # and back: shardwise's state loads into PyTorch unchanged
    back = Net().double()
    back.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in t.get_weights().items()})
    np.testing.assert_allclose(torch_eval(back, x), want, rtol=0, atol=TOL)


def test_train_mode_predict_equals_pytorchs_training_forward():
    """In train mode predict normalizes with the minibatch's statistics, as PyTorch's training
    forward does (which also updates PyTorch's running statistics; predict leaves them)."""
    model = torch_pair(seed=8)
    g = graph()
    t = Trainer(g, plans(g)["mixed x3"])
    t.set_weights(numpy_state(model))
    x = minibatches(1, seed=9)[0][0]
    model.train()
    with torch.no_grad():
        want = F.softmax(model(torch.from_numpy(x).double()), dim=1).numpy()
    np.testing.assert_allclose(t.predict(x), want, rtol=0, atol=TOL)
    np.testing.assert_array_equal(t.get_weights()["bn1.running_var"], np.ones(WIDTH, np.float32))


def test_checkpoint_round_trip_then_eval_equals_pytorch(tmp_path):
    t, model = train_both("channels x2", steps=3)
    t.save_checkpoint(tmp_path / "net.ckpt")
    g = t.graph
    u = Trainer(g, t.plan, optimizer=SGD(lr=LR))
    u.load_checkpoint(tmp_path / "net.ckpt")
    x = np.random.default_rng(12).standard_normal((N + 1, CIN, SIZE, SIZE)).astype(np.float32)
    np.testing.assert_allclose(u.eval().predict(x), torch_eval(model, x), rtol=0, atol=TOL)
    assert int(u.get_weights()["bn0.num_batches_tracked"]) == 3
