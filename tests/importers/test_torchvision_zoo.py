"""torchvision's classification models train on searched plans: the whole list, imported with
sw.from_torch, planned by sw.search on 2, 4 and 16 CPU workers, and trained with SGD (momentum),
Adam and AdamW against PyTorch.

Every model is built with 10 classes, random weights, no dropout and no stochastic depth (their
draws are shardwise's, not PyTorch's), in train mode (batch norms normalize with the minibatch's
statistics), on a minibatch of 4 random images of 64 px (inception_v3 75 px, its smallest).
At 32 px the deepest batch norms of several of these nets normalize over 4 numbers (1x1 maps)
and float32 runs part from float64 ones by up to the whole gradient (mnasnet0_5: PyTorch's own
float32 gradient was 2.7x its largest entry away from float64's), which no bound can use.

The yardstick is PyTorch itself: a float64 copy of the model is the truth, and shardwise may be
no further from it than three times PyTorch's float32 run is (plus a small absolute slack).

- **One step's gradients** (every model, on the 2- and 4-worker searched plans): SGD with lr 1
  and no momentum makes ``w - w'`` the gradient.  The distance is the largest error of any
  parameter's gradient relative to that gradient's largest entry.  A ReLU whose input lies
  within float32 rounding of 0 after a batch norm takes its gradient in one run and not in
  another (shufflenet_v2_x0_5 at 32 px: one pre-activation 4.2e-4 from 0 in float64, flipped in
  shardwise's run and not in PyTorch's, moved one bias gradient by 4.5% of its largest entry),
  so PyTorch's float32 distance is taken as the largest of four float32 runs: the minibatch as
  given and in reverse order, each in the contiguous and the channels-last layout (the same
  gradient, summed in other orders; mobilenet_v2 at 64 px: 1.1e-3 contiguous, 0.12-0.19
  channels-last, where one ReLU6 flips).
- **Three steps** of each optimizer.  Nets with batch norm: from a random initialization with
  4 images, float32 trajectories part within three steps (the flips above, compounded), so a
  plan's losses and weight updates are compared with the one-worker trainer's (the plans'
  promise, docs/training.md: the same network, not the same bits), no further from them than
  PyTorch's float32 runs (the four above) are from its float64 run (x3), plus 1e-3 of the updates' norm: a flip
  falls in one split and not another (mobilenet_v3_small, SGD: every 2-worker split, data
  parallel included, parts from one worker by 3e-4 at the second step, spread over the early
  layers' gradients, while PyTorch's float32 run is 8e-5 from float64's).  The first step's loss
  (same weights, same minibatch) is within three times float32's own error of the one worker's
  (inception_v3 at 75 px: 1.1e-4 relative apart), and every loss is finite.  Nets without batch norm (alexnet, squeezenet1_1, convnext_tiny): losses and
  weights against PyTorch's float64 trajectory, with the same bound.
- **16 workers**: the searched plan on 16 CPU workers (which must split more than the 4 samples)
  takes a step whose gradient meets the same bound, and so is within twice that bound of the
  one-worker data-parallel step's.

The vision transformers (vit_b_16, swin_t, maxvit_t) are checked for predictions and gradients in
test_torchvision_vit.py and test_torchvision_swin.py, and trained on searched plans with this
yardstick (these helpers) in test_transformers_on_searched_plans.py; here, that they import with
every weight under its state_dict name.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")

from test_torchvision_bcast import _grad_error  # noqa: E402  (after torch's import check)
from test_torchvision_norm import _torchvision  # noqa: E402

try:
    M = _torchvision().models
except ImportError:
    pytest.skip("torchvision not installed: pip install torchvision==0.28.0", allow_module_level=True)

slow = pytest.mark.slow
NO_DROPOUT = {"dropout": 0.0}
NO_DRAWS = {"dropout": 0.0, "stochastic_depth_prob": 0.0}
INCEPTION = {"aux_logits": False, "init_weights": True, "dropout": 0.0}

# name: (constructor arguments beyond weights=None, num_classes=10; image size)
ZOO = {
    "resnet18": ({}, 64),
    "resnet50": ({}, 64),
    "resnext50_32x4d": ({}, 64),
    "wide_resnet50_2": ({}, 64),
    "densenet121": ({}, 64),
    "mobilenet_v2": (NO_DROPOUT, 64),
    "mobilenet_v3_small": (NO_DROPOUT, 64),
    "mobilenet_v3_large": (NO_DROPOUT, 64),
    "efficientnet_b0": (NO_DRAWS, 64),
    "efficientnet_v2_s": (NO_DRAWS, 64),
    "googlenet": (INCEPTION, 64),
    "inception_v3": (INCEPTION, 75),
    "shufflenet_v2_x0_5": ({}, 64),
    "shufflenet_v2_x1_0": ({}, 64),
    "squeezenet1_1": (NO_DROPOUT, 64),
    "regnet_x_400mf": ({}, 64),
    "regnet_y_400mf": ({}, 64),
    "mnasnet0_5": (NO_DROPOUT, 64),
    "convnext_tiny": ({"stochastic_depth_prob": 0.0}, 64),
    "alexnet": (NO_DROPOUT, 64),
    "vgg11_bn": (NO_DROPOUT, 64),
}
# In the default run: two small nets (with and without batch norm), each check of each under
# ~10 s on a 2-core machine (most of it the searches); the rest is marked slow.
QUICK = {"shufflenet_v2_x0_5": ("gradients", "adam", "16"), "squeezenet1_1": ("gradients", "sgd")}


def models(check: str) -> list:
    return [pytest.param(n, id=n, marks=() if check in QUICK.get(n, ()) else slow) for n in ZOO]


BATCH = 4


_SEARCHED: dict = {}   # (model, workers) -> the plan sw.search found


@dataclass
class Net:
    """One model, imported, with its minibatch: images (N, 3, px, px) and classes (N,), or, for a
    language model, token ids (N, T) and labels (N, T) or (N,)."""
    name: str
    model: torch.nn.Module
    x: np.ndarray
    y: np.ndarray
    graph: sw.Graph
    weights: dict
    # weights from_torch imports transposed (Hugging Face's Conv1D stores (in, out))
    transposed: frozenset = frozenset()
    # parameter -> the rows whose gradient is 0 in exact arithmetic (attention's key biases),
    # which Adam moves by up to lr a step on float32's rounding noise alone
    zero_gradients: dict = field(default_factory=dict)

    def plan(self, workers: int) -> sw.Plan:
        """sw.search's plan on ``workers`` CPU workers, searched once per model and session: the
        import names the ops the same way every time, so its configurations fit a new import."""
        key = (self.name, workers)
        if key not in _SEARCHED:
            _SEARCHED[key] = sw.search(self.graph, sw.DeviceGraph.cpu(workers))
        found = _SEARCHED[key]
        return sw.Plan(self.graph, found.devices, found.configs, found.options, found.name)

    def parameters(self) -> list[str]:
        return [k for k, _ in self.model.named_parameters()]

    @property
    def batch_norm(self) -> bool:
        """Whether a batch norm normalizes with the minibatch's statistics (train mode)."""
        return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.model.modules())

    @property
    def float32_runs(self) -> list[tuple[bool, bool]]:
        """FLOAT32_RUNS; token ids have no channels-last layout: the two orders only."""
        return FLOAT32_RUNS if self.x.ndim == 4 else [run for run in FLOAT32_RUNS if not run[1]]

    def imported(self, key: str, value: np.ndarray) -> np.ndarray:
        """A tensor of parameter ``key`` in PyTorch's layout, in from_torch's."""
        return value.T if key in self.transposed else value


def model_and_batch(name: str):
    """ZOO[name]'s model (seeded, train mode) and a random minibatch (x, y) at its image size."""
    kwargs, px = ZOO[name]
    torch.manual_seed(0)
    model = getattr(M, name)(weights=None, num_classes=10, **kwargs).train()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 3, px, px)).astype(np.float32)
    return model, x, rng.integers(0, 10, BATCH)


@pytest.fixture
def net(request) -> Net:
    name = request.param
    model, x, y = model_and_batch(name)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    missing = sorted({k for k, _ in model.named_parameters()} - set(weights))
    assert not missing, f"from_torch's weights lack {len(missing)} of state_dict()'s keys: {missing[:4]}, ..."
    return Net(name, model, x, y, g, weights)


def torch_gradients(net: Net, dtype, reverse: bool = False, channels_last: bool = False) -> dict:
    """PyTorch's gradient of the mean cross-entropy, in ``dtype``; ``reverse``: the minibatch
    in reverse order, ``channels_last``: the model and images in PyTorch's channels-last layout
    (the same gradient, other summation orders)."""
    order = slice(None, None, -1 if reverse else 1)
    model, x = _torch_copy(net, dtype, channels_last, net.x[order])
    torch_loss(model, x, net.y[order]).backward()
    return {k: net.imported(k, p.grad.double().numpy()) for k, p in model.named_parameters()}


def torch_loss(model, x, y: np.ndarray):
    """The mean cross-entropy of the model's logits (N, classes), or of a language model's
    (N, T, vocabulary) over every position."""
    out = model(x)
    logits = out.logits if hasattr(out, "logits") else out   # Hugging Face's output
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(y.copy()).reshape(-1))


def _torch_copy(net: Net, dtype, channels_last: bool, x: np.ndarray):
    """A copy of the model in ``dtype`` and its input (images in ``dtype``, in either memory
    layout; token ids as they are)."""
    model = copy.deepcopy(net.model).to(dtype)
    x = torch.tensor(x.copy(), dtype=dtype if x.dtype.kind == "f" else None)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x


# PyTorch's own float32 runs that differ only in rounding: the minibatch as given or reversed, in
# the contiguous or the channels-last layout.  Float32's distance from float64 is the largest of
# them.  One layout alone understates it where a ReLU's input lies within rounding of its kink:
# mobilenet_v2's contiguous float32 gradient is 1.1e-3 off float64's and its channels-last one
# 0.12-0.19 off (relative L2 over all parameters: 2.1e-5 and 6.5-6.8e-3), one ReLU6 flipped.
FLOAT32_RUNS = [(reverse, channels_last) for reverse in (False, True) for channels_last in (False, True)]


def float32_gradient_error(net: Net, exact: dict) -> float:
    """How far PyTorch's float32 gradient is from ``exact``: the largest over its float32 runs."""
    return max(_grad_error(torch_gradients(net, torch.float32, *run), exact) for run in net.float32_runs)


def shardwise_gradient(net: Net, plan, lr: float = 1.0) -> dict:
    """One step of SGD: the weights' change over ``lr`` is the gradient.  (With lr 1, float32's
    rounding of w - g near w = 1, a norm's weight, is alone 6e-8: more than a small gradient's
    error; a change large beside w rounds at the gradient's own scale.)"""
    t = sw.Trainer(net.graph, plan, optimizer=sw.SGD(lr=lr))
    t.set_weights(net.weights)
    assert np.isfinite(t.step(net.x, net.y))
    after = t.get_weights()
    return {k: (net.weights[k].astype(np.float64) - after[k]) / lr for k in net.parameters()}


@pytest.mark.parametrize("net", models("gradients"), indirect=True)
def test_gradients_as_accurate_as_pytorch_float32(net):
    exact = torch_gradients(net, torch.float64)
    theirs = float32_gradient_error(net, exact)
    for workers in (2, 4):
        ours = _grad_error(shardwise_gradient(net, net.plan(workers)), exact)
        assert ours <= 3 * theirs + 1e-4, \
            f"{workers} workers: gradients {ours:.3g} off PyTorch's float64 ones; its float32 ones {theirs:.3g}"


OPTIMIZERS = {
    "sgd": (sw.SGD, torch.optim.SGD, {"lr": 0.01, "momentum": 0.9}),
    "adam": (sw.Adam, torch.optim.Adam, {"lr": 1e-3}),
    "adamw": (sw.AdamW, torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 0.01}),
}
STEPS = 3


def shardwise_steps(net: Net, plan, optimizer: str) -> tuple[list[float], dict]:
    """The losses of three steps and the weights' change over them."""
    ours, _, kwargs = OPTIMIZERS[optimizer]
    t = sw.Trainer(net.graph, plan, optimizer=ours(**kwargs))
    t.set_weights(net.weights)
    losses = [t.step(net.x, net.y) for _ in range(STEPS)]
    after = t.get_weights()
    return losses, {k: after[k].astype(np.float64) - net.weights[k] for k in net.parameters()}


def torch_steps(net: Net, optimizer: str, dtype, reverse: bool = False,
                channels_last: bool = False) -> tuple[list[float], dict]:
    _, theirs, kwargs = OPTIMIZERS[optimizer]
    order = slice(None, None, -1 if reverse else 1)
    model, x = _torch_copy(net, dtype, channels_last, net.x[order])
    opt = theirs(model.parameters(), **kwargs)
    losses = []
    for _ in range(STEPS):
        loss = torch_loss(model, x, net.y[order])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: net.imported(k, p.detach().double().numpy()) - net.weights[k]
                    for k, p in model.named_parameters()}


def without_zero_gradients(net: Net, run: tuple[list[float], dict]) -> tuple[list[float], dict]:
    """``run`` without the updates of net.zero_gradients' rows."""
    losses, update = run
    return losses, {k: np.delete(u, net.zero_gradients[k], axis=0) if k in net.zero_gradients else u
                    for k, u in update.items()}


def distances(run: tuple[list[float], dict], reference: tuple[list[float], dict]) -> tuple[float, float]:
    """(the largest difference of a step's loss, the weight updates' relative L2 distance over
    all parameters together)."""
    (losses, update), (want_losses, want_update) = run, reference
    loss = float(np.abs(np.subtract(losses, want_losses)).max())
    weights = np.sqrt(sum(((update[k] - want_update[k]) ** 2).sum() for k in want_update)
                      / sum((u ** 2).sum() for u in want_update.values()))
    return loss, float(weights)


@pytest.mark.parametrize("net, optimizer", [pytest.param(n, o, id=f"{n}-{o}", marks=() if o in QUICK.get(n, ()) else slow)
                                            for n in ZOO for o in OPTIMIZERS], indirect=["net"])
def test_three_steps_on_searched_plans(net, optimizer):
    check_three_steps(net, optimizer)


def check_three_steps(net: Net, optimizer: str, workers=(2, 4)) -> dict:
    """Three steps on the searched plans on ``workers`` CPU workers against the reference (the
    one-worker trainer with batch norms, PyTorch's float64 run without), within three times
    PyTorch float32's distance from float64; where the net names rows whose gradient is 0, the
    updates of the rest too, within three times float32's distance over them (no slack: the
    nets that name them are transformers without the batch norms' flips).  The distances, by
    worker count ("float32": PyTorch's), the rest's last."""
    exact = torch_steps(net, optimizer, torch.float64)
    runs32 = [torch_steps(net, optimizer, torch.float32, *run) for run in net.float32_runs]
    loss32, weights32 = (max(d) for d in zip(*(distances(run32, exact) for run32 in runs32)))
    # and without the rows whose gradient is 0 (their noise can swamp the rest's distance under Adam)
    rest32 = max(distances(*(without_zero_gradients(net, r) for r in (run32, exact)))[1] for run32 in runs32)
    first32 = max(abs(run32[0][0] - exact[0][0]) for run32 in runs32)   # the first forward's own float32 error
    if net.batch_norm:
        reference = shardwise_steps(net, sw.strategies.data_parallel(net.graph, sw.DeviceGraph.cpu(1)), optimizer)
        assert np.isfinite(reference[0]).all()
    else:
        reference = exact
    measured = {"float32": (loss32, weights32)}
    for n in workers:
        run = shardwise_steps(net, net.plan(n), optimizer)
        assert np.isfinite(run[0]).all(), f"{n} workers: losses {run[0]}"
        if net.batch_norm:   # the same weights and minibatch: the first loss within float32's error
            assert abs(run[0][0] - reference[0][0]) <= 3 * first32 + 1e-5 * abs(exact[0][0]), \
                f"{n} workers: first loss {run[0][0]} against one worker's {reference[0][0]}; float32's error {first32:.3g}"
        loss, weights = measured[n] = distances(run, reference)
        against = "one worker's" if net.batch_norm else "PyTorch's float64"
        assert loss <= 3 * loss32 + 1e-5 * abs(exact[0][0]), \
            f"{n} workers: losses {run[0]} off {against} {reference[0]} by {loss:.3g}; float32's {loss32:.3g}"
        assert weights <= 3 * weights32 + 1e-3, \
            f"{n} workers: updates {weights:.3g} off {against}; PyTorch float32's off float64's {weights32:.3g}"
        if net.zero_gradients:
            rest = distances(*(without_zero_gradients(net, r) for r in (run, reference)))[1]
            measured[n] += (rest,)
            assert rest <= 3 * rest32, \
                f"{n} workers: updates but the key biases' {rest:.3g} off {against}; PyTorch float32's {rest32:.3g}"
    measured["float32"] += (rest32,) if net.zero_gradients else ()
    return measured


@pytest.mark.parametrize("net", models("16"), indirect=True)
def test_sixteen_worker_plans_train(net):
    """The searched plan on 16 workers (4 samples: it splits more than the batch) takes the
    one-worker step: its gradient as close to PyTorch's float64 one as the 2- and 4-worker plans
    must be, and so within twice that of the one-worker data-parallel trainer's.  (Float32 noise
    of 1.2e-7 on gradients that are 0 in exact arithmetic -- a batch norm's bias feeding another
    batch norm through a linear convolution -- reads as 1.2e-4 against _grad_error's 1e-3 floor:
    mobilenet_v3_small, every split.)"""
    check_sixteen_workers(net)


def check_sixteen_workers(net: Net, lr: float = 1.0, slack: float = 1e-4) -> dict:
    """test_sixteen_worker_plans_train's check, the gradient taken with SGD at ``lr`` and the
    bound three times PyTorch float32's error plus ``slack``; the distances of the 16-worker
    gradient from PyTorch's float64 one ("16") and the one worker's ("one"), PyTorch float32's
    ("float32")."""
    plan = net.plan(16)
    assert len(plan.devices.devices) == 16
    exact = torch_gradients(net, torch.float64)
    theirs = float32_gradient_error(net, exact)
    bound = 3 * theirs + slack
    ours = shardwise_gradient(net, plan, lr)
    assert _grad_error(ours, exact) <= bound, \
        f"16 workers: gradient {_grad_error(ours, exact):.3g} off PyTorch's float64 one; bound {bound:.3g}"
    one = shardwise_gradient(net, sw.strategies.data_parallel(net.graph, sw.DeviceGraph.cpu(1)), lr)
    assert _grad_error(ours, one) <= 2 * bound, \
        f"16 workers: gradient {_grad_error(ours, one):.3g} off one worker's; bound {2 * bound:.3g}"
    return {"float32": theirs, "16": _grad_error(ours, exact), "one": _grad_error(ours, one)}


@pytest.mark.parametrize("name, kwargs, px", [
    ("vit_b_16", {"image_size": 32}, 32),
    ("swin_t", {}, 32),
    pytest.param("maxvit_t", {}, 224, marks=pytest.mark.slow),   # its 7x7 partitions need 224 px
])
def test_vision_transformers_import_with_their_state_dict_names(name, kwargs, px):
    model = getattr(M, name)(weights=None, num_classes=10, **kwargs).eval()
    g, weights = sw.from_torch(model, (torch.zeros(1, 3, px, px),))
    # Swin's relative_position_index buffers are constants the import checks and builds into the graph
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("relative_position_index")}
    assert set(weights) == set(state)
    for key, value in weights.items():
        np.testing.assert_array_equal(value, state[key].numpy())
