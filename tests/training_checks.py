"""Shared checks of the training tests: the NumPy reference run, the weight comparison, and
plans trained against one worker and against the reference."""
from __future__ import annotations

import math

import numpy as np

import shardwise as sw
from shardwise import reference as ref
from shardwise.train.init import init_params
from shardwise.train.trainer import Trainer

RTOL = 1e-4   # losses and weights of any plan match one worker and the reference this closely


def reference_run(g, inputs, labels, steps, opt):
    """Losses and parameters after ``steps`` SGD steps of the NumPy reference, from the same
    seed-0 initialization the trainer uses (step k draws dropout's masks of step k, as a new
    trainer's k-th step does)."""
    params = init_params(g, 0)
    buffers: dict = {}
    losses = []
    for step in range(steps):
        loss, grads = ref.loss_and_grads(g, params, inputs, labels, step=step)
        losses.append(loss)
        ref.sgd_step(params, grads, buffers, lr=opt.lr, momentum=opt.momentum, weight_decay=opt.weight_decay)
    return losses, params


RUNNING_SUFFIXES = (".running_mean", ".running_var", ".num_batches_tracked")


def assert_close_weights(got, want, rtol=RTOL):
    """Same weight names, each within ``rtol`` of the largest magnitude of the wanted one.
    Batch norms' running statistics (which Trainer.get_weights returns beside the parameters)
    are compared only where ``want`` has them."""
    got = {k: v for k, v in got.items() if k in want or not k.endswith(RUNNING_SUFFIXES)}
    assert set(got) == set(want)
    for k in want:
        scale = max(float(np.abs(want[k]).max()), 1e-3)
        err = float(np.abs(got[k] - want[k]).max())
        assert err <= rtol * scale, f"{k}: |diff| {err:.3g} > {rtol} * {scale:.3g}"


def one_worker_run(g, x, y, opt, steps: int = 3):
    """Losses and weights after ``steps`` steps on one CPU worker."""
    t = Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=opt)
    return [t.step(x, y) for _ in range(steps)], t.get_weights()


def assert_split_plan_trains_like_one_worker(g, x, y, opt, ndev: int, spec: dict, steps: int = 3) -> None:
    """``spec`` (op -> degrees) on ``ndev`` CPU workers, each op on the first workers of the
    devices in reverse order, trains like one worker."""
    spec = {k: {**v, "devices": list(range(ndev))[::-1][: math.prod(v.values())]} for k, v in spec.items()}
    t = Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(ndev), spec), optimizer=opt)
    losses = [t.step(x, y) for _ in range(steps)]
    want_losses, want_weights = one_worker_run(g, x, y, opt, steps)
    np.testing.assert_allclose(losses, want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_weights)


def assert_plan_trains_like_reference(g, plan, x, y, opt, steps: int = 3) -> None:
    """``plan`` trains ``steps`` steps like the NumPy reference: losses and weights."""
    want_losses, want_params = reference_run(g, x, y, steps, opt)
    t = Trainer(g, plan, optimizer=opt)
    np.testing.assert_allclose([t.step(x, y) for _ in range(steps)], want_losses, rtol=RTOL)
    assert_close_weights(t.get_weights(), want_params)
