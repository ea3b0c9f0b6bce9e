"""Learning-rate schedules and optimizer arguments.

- every schedule equals its torch.optim.lr_scheduler counterpart step for step;
- a schedule enters each step as a runtime value: training with one equals PyTorch with
  the scheduler, and equals assigning the same rates by hand, with the same task graph;
- bad arguments of optimizers and schedules raise ConfigError naming the argument, and a
  schedule that gives a bad rate stops training before any weight changes.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import shardwise as sw
from shardwise.errors import ConfigError
from shardwise.train.lr_schedules import cosine, step, warmup
from shardwise.train.trainer import Trainer

SCHEDULE_STEPS = 40


def torch_rates(torch, make_scheduler, lr: float, steps: int = SCHEDULE_STEPS) -> list[float]:
    """The learning rate PyTorch uses at each of ``steps`` optimizer steps (scheduler.step()
    after every optimizer step, as its documentation prescribes)."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=lr)
    sched = make_scheduler(torch.optim.lr_scheduler, opt)
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


CASES = {
    "step": (step(0.1, step_size=7, gamma=0.5), 0.1, lambda S, o: S.StepLR(o, step_size=7, gamma=0.5)),
    "step gamma 0.1": (step(0.3, 10), 0.3, lambda S, o: S.StepLR(o, step_size=10)),
    "cosine": (cosine(0.1, total_steps=SCHEDULE_STEPS), 0.1, lambda S, o: S.CosineAnnealingLR(o, SCHEDULE_STEPS)),
    # compared up to total_steps: after it PyTorch's cosine rises again, this one holds min_lr
    "cosine min_lr": (cosine(0.1, 25, min_lr=0.01), 0.1, lambda S, o: S.CosineAnnealingLR(o, 25, eta_min=0.01), 26),
    "warm-up": (warmup(0.1, steps=10, start_factor=0.1), 0.1,
                lambda S, o: S.LinearLR(o, start_factor=0.1, total_iters=10)),
    "warm-up default": (warmup(0.05, steps=4), 0.05, lambda S, o: S.LinearLR(o, total_iters=4)),
    "warm-up then cosine": (warmup(cosine(0.1, SCHEDULE_STEPS), steps=5, start_factor=0.2), 0.1,
                            lambda S, o: S.ChainedScheduler([S.LinearLR(o, start_factor=0.2, total_iters=5),
                                                             S.CosineAnnealingLR(o, SCHEDULE_STEPS)])),
    "warm-up of a step schedule": (warmup(step(0.1, 8, 0.5), steps=6, start_factor=0.5), 0.1,
                                   lambda S, o: S.ChainedScheduler([S.LinearLR(o, start_factor=0.5, total_iters=6),
                                                                    S.StepLR(o, 8, 0.5)])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_schedules_equal_torch_step_for_step(case):
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    schedule, lr, make, *steps = CASES[case]
    n = steps[0] if steps else SCHEDULE_STEPS
    want = torch_rates(torch, make, lr, n)
    got = [schedule(k) for k in range(n)]
    # PyTorch multiplies factors step after step where these take closed forms: rounding apart
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
    assert len(set(np.round(want, 12))) > 2   # the rate really changes over the steps compared


def test_cosine_holds_min_lr_after_total_steps():
    c = cosine(0.2, total_steps=10, min_lr=0.05)
    assert c(0) == 0.2 and c(10) == pytest.approx(0.05) and c(11) == c(500) == pytest.approx(0.05)
    assert c(5) == pytest.approx(0.125)   # halfway: the mean of lr and min_lr


def test_warmup_reaches_the_schedule_after_its_steps():
    inner = step(0.4, 3, 0.5)
    w = warmup(inner, steps=4, start_factor=0.0)
    assert w(0) == 0.0 and w(2) == pytest.approx(0.5 * inner(2))
    assert [w(k) for k in range(4, 12)] == [inner(k) for k in range(4, 12)]


def test_a_schedule_drives_training_like_torch():
    torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
    F = torch.nn.functional
    g = _tiny_mlp()
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal(g.ops[0].shape).astype(np.float32), rng.integers(0, 4, 8)) for _ in range(8)]
    sched = warmup(cosine(5e-3, total_steps=8), steps=3, start_factor=0.1)
    t = Trainer(g, sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(2)),
                optimizer=sw.AdamW(lr=sched, weight_decay=0.05))
    params = {k: torch.tensor(v, requires_grad=True) for k, v in t.get_weights().items()}
    opt = torch.optim.AdamW(list(params.values()), lr=5e-3, weight_decay=0.05)
    S = torch.optim.lr_scheduler
    torch_sched = S.ChainedScheduler([S.LinearLR(opt, start_factor=0.1, total_iters=3), S.CosineAnnealingLR(opt, 8)])
    graph_before = t.task_graph
    for x, y in data:
        h = torch.tanh(F.linear(torch.tensor(x), params["fc1.weight"], params["fc1.bias"]))
        loss = F.cross_entropy(F.linear(h, params["fc2.weight"], params["fc2.bias"]), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_sched.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=1e-5)
    assert t.task_graph is graph_before   # the rate changed every step; the task graph was never rebuilt
    for k, v in params.items():
        np.testing.assert_allclose(t.get_weights()[k], v.detach().numpy(), rtol=0, atol=1e-5, err_msg=k)


def _tiny_mlp() -> sw.Graph:
    g = sw.Graph("tiny")
    x = g.input("x", (8, 12))
    x = g.linear(x, 16, name="fc1")
    x = g.tanh(x, name="act")
    x = g.linear(x, 4, name="fc2")
    g.softmax(x, name="prob")
    return g


@pytest.mark.parametrize("make", [lambda lr: sw.SGD(lr=lr, momentum=0.9), lambda lr: sw.Adam(lr=lr)],
                         ids=["SGD", "Adam"])
def test_a_schedule_equals_setting_each_rate_by_hand(make):
    """A callable lr is read at every step (0, 1, ...): the same as assigning an optimizer with
    that step's rate before it (the rate is a runtime value of the step), bitwise."""
    g = _tiny_mlp()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    rng = np.random.default_rng(1)
    data = [(rng.standard_normal(g.ops[0].shape).astype(np.float32), rng.integers(0, 4, 8)) for _ in range(6)]
    sched = step(0.05, step_size=2, gamma=0.3)
    scheduled = Trainer(g, plan, optimizer=make(sched))
    by_hand = Trainer(g, plan, optimizer=make(0.05))
    constant = Trainer(g, plan, optimizer=make(0.05))
    for k, (x, y) in enumerate(data):
        by_hand.optimizer = make(sched(k))
        assert scheduled.step(x, y) == by_hand.step(x, y)
        constant.step(x, y)
    a, b, c = scheduled.get_weights(), by_hand.get_weights(), constant.get_weights()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert any(not np.array_equal(a[k], c[k]) for k in a)   # the schedule changed the result


def test_a_schedule_giving_a_bad_rate_stops_before_any_change():
    g = _tiny_mlp()
    rates = {0: 0.1, 1: -0.5, 2: math.nan, 3: "0.1"}
    t = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)),
                optimizer=sw.Adam(lr=lambda k: rates[k]))
    x, y = np.ones(g.ops[0].shape, np.float32), np.zeros(8, np.int64)
    t.step(x, y)
    before, counts = t.get_weights(), t.executor.updates()
    for k in (1, 2, 3):
        t.steps = k
        with pytest.raises(ConfigError, match=f"gave .* at step {k}"):
            t.step(x, y)
        assert t.steps == k and t.executor.updates() == counts
        for name, v in t.get_weights().items():
            np.testing.assert_array_equal(v, before[name])


# ----------------------------------------------------------------------------- bad arguments
BAD_OPTIMIZERS = {
    "SGD negative lr": (lambda: sw.SGD(lr=-0.1), "lr must be a finite number >= 0"),
    "SGD lr a string": (lambda: sw.SGD(lr="0.1"), "lr must be"),
    "SGD nesterov without momentum": (lambda: sw.SGD(nesterov=True), "Nesterov"),
    "Adam negative lr": (lambda: sw.Adam(lr=-1e-3), "Adam lr must be a finite number >= 0"),
    "Adam lr infinite": (lambda: sw.Adam(lr=math.inf), "lr must be"),
    "Adam lr a bool": (lambda: sw.Adam(lr=True), "lr must be"),
    "Adam beta1 1": (lambda: sw.Adam(betas=(1.0, 0.999)), r"betas\[0\] must lie in \[0, 1\)"),
    "Adam beta2 1": (lambda: sw.Adam(betas=(0.9, 1.0)), r"betas\[1\] must lie in \[0, 1\)"),
    "Adam beta1 negative": (lambda: sw.Adam(betas=(-0.1, 0.999)), r"betas\[0\]"),
    "Adam beta2 above 1": (lambda: sw.Adam(betas=(0.9, 1.5)), r"betas\[1\]"),
    "Adam beta NaN": (lambda: sw.Adam(betas=(math.nan, 0.9)), r"betas\[0\]"),
    "Adam one beta": (lambda: sw.Adam(betas=(0.9,)), "betas must be a pair"),
    "Adam betas a number": (lambda: sw.Adam(betas=0.9), "betas must be a pair"),
    "Adam eps 0": (lambda: sw.Adam(eps=0.0), "eps must be a finite number > 0"),
    "Adam eps negative": (lambda: sw.Adam(eps=-1e-8), "eps must be"),
    "AdamW eps NaN": (lambda: sw.AdamW(eps=math.nan), "AdamW eps must be"),
    "Adam negative weight decay": (lambda: sw.Adam(weight_decay=-0.01), "weight_decay must be"),
    "AdamW amsgrad": (lambda: sw.AdamW(amsgrad=True), "amsgrad=True.* is not supported"),
    "step schedule negative lr": (lambda: step(-0.1, 5), "lr must be a finite number >= 0"),
    "step schedule step_size 0": (lambda: step(0.1, 0), "step_size must be a positive int"),
    "step schedule float step_size": (lambda: step(0.1, 2.5), "step_size must be a positive int"),
    "cosine total_steps 0": (lambda: cosine(0.1, 0), "total_steps must be a positive int"),
    "cosine min_lr above lr": (lambda: cosine(0.1, 10, min_lr=0.2), "min_lr 0.2 is above lr 0.1"),
    "warm-up steps 0": (lambda: warmup(0.1, 0), "steps must be a positive int"),
    "warm-up start_factor 2": (lambda: warmup(0.1, 5, start_factor=2.0), r"start_factor must be a number in \[0, 1\]"),
    "warm-up of a negative rate": (lambda: warmup(-0.1, 5), "the learning rate must be"),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIMIZERS))
def test_bad_arguments_are_refused(case):
    make, match = BAD_OPTIMIZERS[case]
    with pytest.raises(ConfigError, match=match):
        make()


def test_schedules_refuse_bad_steps():
    for s in (step(0.1, 2), cosine(0.1, 5), warmup(0.1, 3)):
        for bad in (-1, 1.5, True):
            with pytest.raises(ConfigError, match="step must be an int >= 0"):
                s(bad)


def test_trainer_refuses_other_optimizers():
    g = _tiny_mlp()
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    with pytest.raises(ConfigError, match="optimizer must be sw.SGD, sw.Adam or sw.AdamW"):
        Trainer(g, plan, optimizer={"lr": 0.1})
    t = Trainer(g, plan, optimizer=sw.SGD(lr=0.1))
    x, y = np.ones(g.ops[0].shape, np.float32), np.zeros(8, np.int64)
    before = t.get_weights()
    t.optimizer = sw.AdamW()   # Adam keeps two state buffers per parameter; this trainer was built for one
    with pytest.raises(ConfigError, match="AdamW keeps 2 state buffer.*built for an optimizer with 1"):
        t.step(x, y)
    assert t.steps == 0
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(v, before[k])
    t.optimizer = sw.SGD(lr=0.2, momentum=0.5)   # another SGD is fine: the same state
    t.step(x, y)
    assert t.steps == 1


def test_numpy_scalars_are_accepted_as_numbers(tmp_path):
    opt = sw.AdamW(lr=np.float32(3e-4), betas=(np.float32(0.9), 0.99), eps=np.float64(1e-8),
                   weight_decay=np.float32(0.01))
    assert all(type(v) is float for v in (opt.lr, *opt.betas, opt.eps, opt.weight_decay))
    sched = step(np.float32(0.1), np.int64(3))
    assert sched(np.int64(3)) == pytest.approx(0.01)
    g = _tiny_mlp()
    t = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=opt)
    t.save_checkpoint(tmp_path / "np.ckpt")   # the settings are JSON-ready floats
    t.load_checkpoint(tmp_path / "np.ckpt")
