"""A Trainer used from several threads, its arenas against the devices' memory.

* mutators (set_weights, train/eval, the step count, steps) raise TrainerInUseError at once
  while another thread holds the trainer, and change nothing;
* readers (get_weights, arena_high_water, memory_per_worker, timeline, comm_bytes) wait for
  the step in progress to end: every snapshot a watching thread takes during fit() is the
  weights of one step boundary;
* a plan whose arena is larger than a device's declared memory is refused before anything is
  allocated."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import shardwise as sw
from shardwise.iteration.simulate import MemoryOverflow
from shardwise.train.trainer import Trainer, TrainerInUseError


def _lenet_trainer(workers: int = 2, optimizer=None) -> tuple[Trainer, np.ndarray, np.ndarray]:
    g = sw.models.lenet5(batch=16)
    t = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(workers)),
                optimizer=optimizer or sw.SGD(lr=0.05))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16 * 12, 1, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 16 * 12)
    return t, x, y


class _Holder:
    """Another thread holding the trainer (as a step does) until release()."""

    def __init__(self, t: Trainer) -> None:
        self.t, self.held, self.go = t, threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        assert self.held.wait(10)

    def _run(self) -> None:
        with self.t._exclusive("test"):
            self.held.set()
            self.go.wait(10)

    def release(self) -> None:
        self.go.set()
        self.thread.join(10)


def test_mutators_refuse_while_another_thread_holds_the_trainer():
    t, x, y = _lenet_trainer()
    t.step(x[:16], y[:16])
    before = t.get_weights()
    holder = _Holder(t)
    try:
        calls = {
            "set_weights": lambda: t.set_weights({k: v + 1 for k, v in before.items()}),
            "eval": t.eval,
            "train": lambda: t.train(True),
            "steps": lambda: setattr(t, "steps", 0),
            "step": lambda: t.step(x[:16], y[:16]),
            "predict": lambda: t.predict(x[:16]),
            "forward": lambda: t.forward(x[:16]),
            "loss": lambda: t.loss(x[:16], y[:16]),
        }
        for what, call in calls.items():
            with pytest.raises(TrainerInUseError, match="in use by another thread"):
                call()
    finally:
        holder.release()
    assert t.training and t.steps == 1
    after = t.get_weights()
    assert all(np.array_equal(after[k], before[k]) for k in before)


def test_readers_wait_for_the_holder_then_read():
    t, x, y = _lenet_trainer()
    t.step(x[:16], y[:16])
    holder = _Holder(t)
    got: dict[str, object] = {}

    def read() -> None:
        got["weights"] = t.get_weights()
        got["high water"] = t.arena_high_water()
        got["arenas"] = t.memory_per_worker()
        got["at"] = time.monotonic()

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.3)
    assert "weights" not in got            # still waiting: the holder has the trainer
    released = time.monotonic()
    holder.release()
    reader.join(10)
    assert got["at"] >= released
    assert got["arenas"] == t.memory_per_worker() and got["high water"] == t.arena_high_water()


def test_weights_read_during_fit_are_those_of_a_step_boundary():
    """A thread reads get_weights as fast as it can while another runs fit(): every snapshot
    is bitwise the weights after some step (recorded by fit's callback, which runs between
    steps), never a mixture of two steps, and fit's steps wait for the reads instead of failing."""
    t, x, y = _lenet_trainer()
    boundaries = [t.get_weights()]
    snapshots = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            snapshots.append(t.get_weights())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        t.fit(x, y, epochs=2, callback=lambda e, b, loss: boundaries.append(t.get_weights()))
    finally:
        done.set()
        watcher.join(30)
    assert len(boundaries) == 1 + 2 * 12 and len(snapshots) >= 3
    keys = sorted(boundaries[0])
    known = {b"".join(b[k].tobytes() for k in keys) for b in boundaries}
    for snap in snapshots:
        assert b"".join(snap[k].tobytes() for k in keys) in known


def test_an_arena_beyond_the_declared_memory_is_refused_before_allocating(monkeypatch):
    g = sw.models.lenet5(batch=64)
    d = sw.DeviceGraph("small")
    for k in range(2):
        d.add_device(f"w{k}", flops=50e9, memory=1e6)   # 1 MB: LeNet-5's arena needs more
    d.add_link(0, 1, bandwidth=5e9)
    plan = sw.strategies.data_parallel(g, d)
    from shardwise.train import trainer as trainer_module

    def no_allocation(*args, **kwargs):
        raise AssertionError("the runtime was built: its arenas allocated")

    monkeypatch.setattr(trainer_module, "NativeExecutor", no_allocation)
    with pytest.raises(MemoryOverflow, match=r"arena on device \d \('w\d'\), which declares 0.001 GB") as err:
        Trainer(g, plan)
    need = sw.memory_plan(plan).devices
    assert f"{max(p.arena_bytes for p in need.values()) / 1e9:.3f} GB" in str(err.value)
    assert "2 of 2 devices are over" in str(err.value)
    assert "nothing was allocated" in str(err.value)


def test_a_checkpoint_cannot_be_saved_with_the_step_count_set_below_its_updates(tmp_path):
    """Adam counts its updates per parameter slice (bias correction); a checkpoint whose counts
    exceed its steps is refused on load, so one is never written."""
    t, x, y = _lenet_trainer(optimizer=sw.Adam(lr=1e-3))
    t.step(x[:16], y[:16])
    t.step(x[16:32], y[16:32])
    t.steps = 1
    with pytest.raises(sw.CheckpointError,
                       match="below the 2 updates"):
        t.save_checkpoint(tmp_path / "c.ckpt")
    assert not (tmp_path / "c.ckpt").exists()
    t.steps = 2
    t.save_checkpoint(tmp_path / "c.ckpt")
    t.load_checkpoint(tmp_path / "c.ckpt")
