"""Adam's and AdamW's state in checkpoints.

- a run saved and resumed (into a trainer with another initialization) continues bitwise
  as the run that never stopped: weights, exp_avg, exp_avg_sq, step counts, schedule;
- a checkpoint of one optimizer kind is refused by a trainer with another, naming both,
  and leaves the trainer as it was;
- malformed Adam settings or step counts are refused.
"""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

import shardwise as sw
from shardwise.train.checkpoint import CheckpointError
from shardwise.train.trainer import Trainer
from test_checkpoint import assert_same_state, rewrite, state_of
from test_optim import batches, smooth_cnn

SCHEDULE = sw.lr_schedules.warmup(sw.lr_schedules.cosine(2e-3, total_steps=8), steps=3)


def plans(g: sw.Graph) -> dict[str, sw.Plan]:
    return {"data x2": sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)),
            "model x4": sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(4))}


OPTS = {"Adam": lambda: sw.Adam(lr=1e-3, weight_decay=1e-3),
        "AdamW": lambda: sw.AdamW(lr=3e-4, weight_decay=0.01),
        "AdamW scheduled": lambda: sw.AdamW(lr=SCHEDULE, weight_decay=0.01)}


def snapshot(t: Trainer) -> dict:
    return {"weights": t.get_weights(), "state": {k: v.copy() for k, v in t.executor.persistent.items()},
            "updates": t.executor.updates(), "steps": t.steps}


@pytest.mark.parametrize("plan_name", ["data x2", "model x4"])
@pytest.mark.parametrize("opt_name", sorted(OPTS))
def test_resuming_continues_bitwise(tmp_path, plan_name, opt_name):
    g = smooth_cnn()
    plan = plans(g)[plan_name]
    data = batches(g, 8)
    straight = Trainer(g, plan, optimizer=OPTS[opt_name]())
    want = [straight.step(x, y) for x, y in data]

    first = Trainer(g, plan, optimizer=OPTS[opt_name]())
    for x, y in data[:4]:
        first.step(x, y)
    first.save_checkpoint(tmp_path / "run.ckpt")
    resumed = Trainer(g, plan, optimizer=OPTS[opt_name](), seed=7)   # another initialization, overridden
    resumed.load_checkpoint(tmp_path / "run.ckpt")
    assert resumed.steps == 4 and set(resumed.executor.updates().values()) == {4}
    assert [resumed.step(x, y) for x, y in data[4:]] == want[4:]
    got, ref = snapshot(resumed), snapshot(straight)
    assert got["updates"] == ref["updates"] and got["steps"] == ref["steps"] == 8
    for k, v in ref["weights"].items():
        np.testing.assert_array_equal(got["weights"][k], v, err_msg=k)
    for k, v in ref["state"].items():   # parameters, exp_avg and exp_avg_sq of every slice
        np.testing.assert_array_equal(got["state"][k], v, err_msg=str(k))


def test_a_checkpoint_before_the_first_step_restores_fresh_moments(tmp_path):
    g = smooth_cnn()
    plan = plans(g)["data x2"]
    data = batches(g, 3)
    fresh = Trainer(g, plan, optimizer=sw.Adam())
    fresh.save_checkpoint(tmp_path / "zero.ckpt")
    trained = Trainer(g, plan, optimizer=sw.Adam())
    trained.step(*data[0])
    trained.load_checkpoint(tmp_path / "zero.ckpt")   # moments back to zero, step counts to none
    assert trained.steps == 0 and trained.executor.updates() == {}
    reference = Trainer(g, plan, optimizer=sw.Adam())
    assert [trained.step(x, y) for x, y in data] == [reference.step(x, y) for x, y in data]


def test_the_trainer_keeps_its_own_settings(tmp_path):
    """The checkpoint restores state; a trainer built with another lr goes on with its own."""
    g = smooth_cnn()
    plan = plans(g)["data x2"]
    data = batches(g, 4)
    t = Trainer(g, plan, optimizer=sw.AdamW(lr=1e-3))
    for x, y in data[:2]:
        t.step(x, y)
    t.save_checkpoint(tmp_path / "run.ckpt")
    slower = Trainer(g, plan, optimizer=sw.AdamW(lr=1e-4))
    slower.load_checkpoint(tmp_path / "run.ckpt")
    t.optimizer = sw.AdamW(lr=1e-4)
    assert [slower.step(x, y) for x, y in data[2:]] == [t.step(x, y) for x, y in data[2:]]


KINDS = {"SGD": lambda: sw.SGD(lr=0.05, momentum=0.9), "Adam": lambda: sw.Adam(), "AdamW": lambda: sw.AdamW()}


@pytest.mark.parametrize("saved,loading", [("SGD", "Adam"), ("Adam", "SGD"), ("Adam", "AdamW"), ("AdamW", "Adam"),
                                           ("SGD", "AdamW")])
def test_a_checkpoint_of_another_optimizer_is_refused(tmp_path, saved, loading):
    g = smooth_cnn()
    plan = plans(g)["model x4"]
    data = batches(g, 2)
    src = Trainer(g, plan, optimizer=KINDS[saved]())
    src.step(*data[0])
    src.save_checkpoint(tmp_path / "run.ckpt")
    t = Trainer(g, plan, optimizer=KINDS[loading]())
    t.step(*data[1])
    before = state_of(t)
    with pytest.raises(CheckpointError, match=f"optimizer {saved}, but this trainer's is {loading}"):
        t.load_checkpoint(tmp_path / "run.ckpt")
    assert_same_state(t, before)


def _second_moment_counted(meta):
    """A count on an exp_avg_sq buffer: the runtime counts each slice's first state buffer only."""
    b, n = meta["state_steps"][0]
    meta["state_steps"].append([b + 1, n])


BAD_ADAM_META = {
    "beta 1": lambda meta: meta["optimizer"].update(betas=[1.0, 0.999]),
    "three betas": lambda meta: meta["optimizer"].update(betas=[0.9, 0.99, 0.999]),
    "betas a string": lambda meta: meta["optimizer"].update(betas="0.9,0.999"),
    "eps 0": lambda meta: meta["optimizer"].update(eps=0.0),
    "amsgrad": lambda meta: meta["optimizer"].update(amsgrad=True),
    "amsgrad a number": lambda meta: meta["optimizer"].update(amsgrad=0),
    "SGD's fields": lambda meta: meta["optimizer"].update(momentum=0.9),
    "lr a list": lambda meta: meta["optimizer"].update(lr=[0.001]),
    "second moment counted": _second_moment_counted,
    "count not an int": lambda meta: meta["state_steps"][0].__setitem__(1, 2.0),
}


@pytest.mark.parametrize("case", sorted(BAD_ADAM_META))
def test_malformed_adam_checkpoints_are_refused(tmp_path, case):
    g = smooth_cnn()
    plan = plans(g)["data x2"]
    data = batches(g, 2)
    t = Trainer(g, plan, optimizer=sw.AdamW())
    t.step(*data[0])
    t.save_checkpoint(tmp_path / "run.ckpt")
    t.step(*data[1])
    before = state_of(t)
    rewrite(tmp_path / "run.ckpt", BAD_ADAM_META[case])
    with pytest.raises(CheckpointError):
        t.load_checkpoint(tmp_path / "run.ckpt")
    assert_same_state(t, before)


def test_a_scheduled_lr_is_recorded_by_name(tmp_path):
    g = smooth_cnn()
    t = Trainer(g, plans(g)["data x2"], optimizer=sw.AdamW(lr=SCHEDULE))
    t.save_checkpoint(tmp_path / "run.ckpt")
    payload = (tmp_path / "run.ckpt").read_bytes().split(b"\n", 2)[2]
    with np.load(io.BytesIO(payload)) as z:
        meta = json.loads(bytes(z["__meta__"]).decode())
    assert meta["optimizer"] == {"name": "adamw", "lr": repr(SCHEDULE), "betas": [0.9, 0.999], "eps": 1e-8,
                                 "weight_decay": 0.01, "amsgrad": False}
    assert "CosineDecay" in meta["optimizer"]["lr"] and "LinearWarmup" in meta["optimizer"]["lr"]
