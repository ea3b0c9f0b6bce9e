"""Shared checks of the training tests: the NumPy reference run and the weight comparison."""
from __future__ import annotations

import numpy as np

from shardwise import reference as ref
from shardwise.init import init_params

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
