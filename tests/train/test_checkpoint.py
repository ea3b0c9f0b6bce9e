"""Checkpoints, interrupted training and leaks.

- resuming from a checkpoint gives exactly the next losses of a run that never stopped;
- checkpoints are written atomically: no temporary file is left behind, and a
  failure while saving leaves the previous file as it was;
- a corrupt or foreign checkpoint raises CheckpointError and leaves the
  trainer as it was (weights, optimizer state, step count, next loss);
- Ctrl-C during fit stops at a step boundary with a consistent state;
- a Trainer used from two threads refuses the second call (TrainerInUseError) and
  never returns a wrong loss;
- many steps do not grow traced memory or the resident set.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

import shardwise as sw
from shardwise.train.trainer import SGD, CheckpointError, Trainer, TrainerInUseError
from shared_graphs import mixed_graph
from test_train import random_plan

OPT = SGD(lr=0.05, momentum=0.9, weight_decay=1e-4)


def batches(g: sw.Graph, count: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape = g.ops[0].shape
    classes = g.ops[-1].shape[1]
    return [(rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]))
            for _ in range(count)]


def lenet_plans() -> list[tuple[str, sw.Graph, sw.Plan]]:
    g = sw.models.lenet5(batch=8)
    return [("one worker", g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})),
            ("data x2", g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))),
            ("model x4", g, sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(4))),
            ("owt x4", g, sw.strategies.owt(g, sw.DeviceGraph.cpu(4))),
            ("searched x4", g, sw.search(g, sw.DeviceGraph.cpu(4)))]


def state_of(t: Trainer) -> dict:
    """Everything a failed load must leave alone: weights, momentum buffers, the step count."""
    return {"weights": t.get_weights(), "persistent": {k: v.copy() for k, v in t.executor.persistent.items()},
            "started": t.executor.updates(), "steps": t.steps}


def assert_same_state(t: Trainer, before: dict) -> None:
    after = state_of(t)
    assert after["steps"] == before["steps"]
    assert after["started"] == before["started"]
    for k, v in before["weights"].items():
        np.testing.assert_array_equal(after["weights"][k], v, err_msg=k)
    for k, v in before["persistent"].items():
        np.testing.assert_array_equal(after["persistent"][k], v, err_msg=str(k))


# ----------------------------------------------------------------------------- resuming
@pytest.mark.parametrize("name,g,plan", lenet_plans(), ids=[p[0] for p in lenet_plans()])
def test_resuming_gives_the_losses_of_not_stopping(tmp_path, name, g, plan):
    data = batches(g, 6)
    straight = Trainer(g, plan, optimizer=OPT, seed=0)
    want = [straight.step(x, y) for x, y in data]

    first = Trainer(g, plan, optimizer=OPT, seed=0)
    for x, y in data[:3]:
        first.step(x, y)
    path = tmp_path / "run.ckpt"
    first.save_checkpoint(path)
    resumed = Trainer(g, plan, optimizer=OPT, seed=1)  # another initialization: the checkpoint must override it
    resumed.load_checkpoint(path)
    assert resumed.steps == 3
    got = [resumed.step(x, y) for x, y in data[3:]]
    assert got == want[3:]  # the same plan runs the same sums in the same order: bitwise equal
    w, v = resumed.get_weights(), straight.get_weights()
    for k in v:
        np.testing.assert_array_equal(w[k], v[k], err_msg=k)


def test_resuming_a_batchnorm_graph_with_a_random_plan(tmp_path):
    g = mixed_graph()
    plan = random_plan(g, sw.DeviceGraph.cpu(3), np.random.default_rng(5))
    data = batches(g, 4, seed=2)
    straight = Trainer(g, plan, optimizer=OPT)
    want = [straight.step(x, y) for x, y in data]
    first = Trainer(g, plan, optimizer=OPT)
    for x, y in data[:2]:
        first.step(x, y)
    first.save_checkpoint(tmp_path / "bn.ckpt")
    resumed = Trainer(g, plan, optimizer=OPT)
    resumed.load_checkpoint(tmp_path / "bn.ckpt")
    assert [resumed.step(x, y) for x, y in data[2:]] == want[2:]


def test_checkpoint_before_the_first_step_restores_unstarted_momentum(tmp_path):
    # momentum buffers start as the first gradient (torch.optim.SGD): that state must survive a checkpoint
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    data = batches(g, 2)
    fresh = Trainer(g, plan, optimizer=OPT)
    fresh.save_checkpoint(tmp_path / "zero.ckpt")
    trained = Trainer(g, plan, optimizer=OPT)
    trained.step(*data[0])
    trained.load_checkpoint(tmp_path / "zero.ckpt")  # back to "no step yet"
    assert trained.steps == 0
    reference = Trainer(g, plan, optimizer=OPT)
    assert [trained.step(x, y) for x, y in data] == [reference.step(x, y) for x, y in data]


# ----------------------------------------------------------------------------- atomic writes
@pytest.fixture
def trained():
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    data = batches(g, 3)
    t = Trainer(g, plan, optimizer=OPT)
    t.step(*data[0])
    return g, plan, t, data


def test_save_leaves_no_temporary_file(tmp_path, trained):
    _, _, t, data = trained
    path = tmp_path / "run.ckpt"
    t.save_checkpoint(path)
    t.step(*data[1])
    t.save_checkpoint(path)  # overwriting an existing checkpoint
    t.save_checkpoint(str(path))
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]
    assert path.read_bytes().startswith(b"SWCKPT1\n")


@pytest.mark.parametrize("failing", ["replace", "fsync", "write"])
def test_a_failed_save_keeps_the_old_checkpoint(tmp_path, trained, monkeypatch, failing):
    g, plan, t, data = trained
    path = tmp_path / "run.ckpt"
    t.save_checkpoint(path)
    old = path.read_bytes()
    t.step(*data[1])

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if failing == "replace":
        monkeypatch.setattr(os, "replace", boom)
    elif failing == "fsync":
        monkeypatch.setattr(os, "fsync", boom)
    else:
        real_fdopen = os.fdopen

        class FailingFile:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()
                return False

            def write(self, data):
                self.f.write(data[: len(data) // 2])  # a partial write, then the disk is full
                raise OSError(28, "No space left on device")

            def __getattr__(self, name):
                return getattr(self.f, name)

        monkeypatch.setattr(os, "fdopen", lambda *a, **k: FailingFile(real_fdopen(*a, **k)))
    with pytest.raises(OSError):
        t.save_checkpoint(path)
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]
    # and the old checkpoint still loads
    other = Trainer(g, plan, optimizer=OPT)
    other.load_checkpoint(path)
    assert other.steps == 1


def test_an_interrupted_save_keeps_the_old_checkpoint(tmp_path, trained, monkeypatch):
    _, _, t, data = trained
    path = tmp_path / "run.ckpt"
    t.save_checkpoint(path)
    old = path.read_bytes()
    t.step(*data[1])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        t.save_checkpoint(path)
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_save_removes_temporaries_that_killed_saves_left(tmp_path, trained):
    """A save killed with -9 cannot remove its temporary file; the next save of the same target
    removes it, but never another live process's, nor another target's."""
    g, plan, t, data = trained
    path = tmp_path / "run.ckpt"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        dead = _dead_pid()
        stale = [tmp_path / f".run.ckpt.{dead}-k1ll3d.tmp",             # its process is gone
                 tmp_path / f".run.ckpt.{os.getpid()}-l3ft0v3r.tmp"]    # this pid, but no save of ours writes it
        kept = [tmp_path / f".run.ckpt.{sleeper.pid}-wr1t1ng.tmp",      # a live process may be writing it
                tmp_path / f".other.ckpt.{dead}-k1ll3d.tmp",            # another target's
                tmp_path / ".run.ckpt.notes.txt"]                       # not a temporary file
        for f in stale + kept:
            f.write_bytes(b"half a checkpoint")
        reused = tmp_path / f".run.ckpt.{sleeper.pid}-r3us3d.tmp"
        reused.write_bytes(b"half a checkpoint")
        hour_ago = time.time() - 3600  # written before the process now holding that pid started
        os.utime(reused, (hour_ago, hour_ago))
        t.step(*data[1])
        t.save_checkpoint(path)
        for f in stale:
            assert not f.exists(), f.name
        for f in kept:
            assert f.read_bytes() == b"half a checkpoint", f.name
        if os.path.exists(f"/proc/{sleeper.pid}/stat"):  # process start times are known (Linux)
            assert not reused.exists()
        other = Trainer(g, plan, optimizer=OPT)
        other.load_checkpoint(path)
        assert other.steps == 2
        assert other.step(*data[2]) == t.step(*data[2])
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_save_fsyncs_the_folder_after_the_rename(tmp_path, trained, monkeypatch):
    """Without an fsync of the folder the rename may not survive a crash."""
    _, _, t, _ = trained
    synced = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        synced.append(("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file", os.fstat(fd).st_ino))
        return real_fsync(fd)

    def replace(src, dst):
        synced.append(("rename", None))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    t.save_checkpoint(tmp_path / "run.ckpt")
    kinds = [k for k, _ in synced]
    assert kinds == ["file", "rename", "dir"]
    assert synced[2][1] == os.stat(tmp_path).st_ino


# ----------------------------------------------------------------------------- bad checkpoints
def corruptions(raw: bytes) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    out = {"empty": b"", "truncated to 5 bytes": raw[:5], "truncated to half": raw[: len(raw) // 2],
           "last byte missing": raw[:-1], "header only": raw[: raw.index(b"\n") + 1],
           "random bytes": rng.integers(0, 256, len(raw), dtype=np.uint8).tobytes(),
           "random bytes after the header": raw[:8] + rng.integers(0, 256, len(raw) - 8, dtype=np.uint8).tobytes(),
           "trailing garbage": raw + b"\x00junk"}
    for where in (0, 3, 10, 40, 80, len(raw) // 3, len(raw) // 2, len(raw) - 30, len(raw) - 1):
        flipped = bytearray(raw)
        flipped[where] ^= 0x01
        out[f"bit flipped at byte {where}"] = bytes(flipped)
    return out


def test_corrupt_checkpoints_are_refused_and_change_nothing(tmp_path, trained):
    g, plan, t, data = trained
    good = tmp_path / "good.ckpt"
    t.save_checkpoint(good)
    t.step(*data[1])  # the trainer now differs from the checkpoint: a load that went wrong would show
    before = state_of(t)
    loss_before = t.loss(*data[2])
    for name, raw in corruptions(good.read_bytes()).items():
        bad = tmp_path / "bad.ckpt"
        bad.write_bytes(raw)
        with pytest.raises(CheckpointError):
            t.load_checkpoint(bad)
        assert_same_state(t, before)
        assert t.loss(*data[2]) == loss_before, name
    # the next step is that of a trainer that never saw a bad file
    reference = Trainer(g, plan, optimizer=OPT)
    reference.step(*data[0])
    reference.step(*data[1])
    assert t.step(*data[2]) == reference.step(*data[2])


def test_missing_and_unreadable_files(tmp_path, trained):
    _, _, t, _ = trained
    before = state_of(t)
    with pytest.raises(CheckpointError, match="cannot read"):
        t.load_checkpoint(tmp_path / "does-not-exist.ckpt")
    with pytest.raises(CheckpointError):
        t.load_checkpoint(tmp_path)  # a directory
    assert_same_state(t, before)


def test_a_plan_file_is_not_a_checkpoint(tmp_path, trained):
    _, plan, t, _ = trained
    plan.save(tmp_path / "plan.json")
    before = state_of(t)
    with pytest.raises(CheckpointError, match="not a shardwise checkpoint"):
        t.load_checkpoint(tmp_path / "plan.json")
    assert_same_state(t, before)


def test_checkpoint_for_another_graph_is_refused(tmp_path, trained):
    _, _, t, data = trained
    before = state_of(t)
    loss_before = t.loss(*data[2])
    for other in (sw.models.lenet5(batch=8, num_classes=5), sw.models.lenet5(batch=16), mixed_graph()):
        foreign = Trainer(other, sw.strategies.data_parallel(other, sw.DeviceGraph.cpu(2)), optimizer=OPT)
        foreign.save_checkpoint(tmp_path / "other.ckpt")
        with pytest.raises(CheckpointError, match="another graph"):
            t.load_checkpoint(tmp_path / "other.ckpt")
        assert_same_state(t, before)
        assert t.loss(*data[2]) == loss_before


def test_checkpoint_for_another_plan_is_refused(tmp_path, trained):
    g, _, t, data = trained
    before = state_of(t)
    loss_before = t.loss(*data[2])
    for plan in (sw.strategies.model_parallel(g, sw.DeviceGraph.cpu(2)),
                 sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4)),
                 sw.search(g, sw.DeviceGraph.cpu(4))):
        foreign = Trainer(g, plan, optimizer=OPT)
        foreign.step(*data[0])
        foreign.save_checkpoint(tmp_path / "other.ckpt")
        with pytest.raises(CheckpointError, match="another plan"):
            t.load_checkpoint(tmp_path / "other.ckpt")
        assert_same_state(t, before)
        assert t.loss(*data[2]) == loss_before


# Checkpoints whose checksum is right but whose content is not (written by a buggy
# or foreign tool): the header and sha256 only catch accidental corruption.
def rewrite(path, edit_meta=None, edit_arrays=None) -> None:
    """Rewrite a checkpoint with a valid header and checksum after ``edit_meta(meta)`` (which may
    return a replacement: any JSON value, ``RawJson`` text such as ``Infinity``, or the raw
    ``__meta__`` array itself) and ``edit_arrays(arrays)``."""
    raw = path.read_bytes()
    payload = raw.split(b"\n", 2)[2]
    with np.load(io.BytesIO(payload)) as z:
        meta = json.loads(bytes(z["__meta__"]).decode())
        arrays = {k: z[k] for k in z.files if k != "__meta__"}
    if edit_meta:
        replaced = edit_meta(meta)
        meta = meta if replaced is None else replaced
    if edit_arrays:
        edit_arrays(arrays)
    if not isinstance(meta, np.ndarray):
        text = meta.text if isinstance(meta, RawJson) else json.dumps(meta)
        meta = np.frombuffer(text.encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, __meta__=meta, **arrays)
    write_checkpoint_payload(path, buf.getvalue())


def write_checkpoint_payload(path, payload: bytes) -> None:
    """A checkpoint file around ``payload`` with the right header and checksum."""
    path.write_bytes(b"SWCKPT1\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)


class RawJson:
    """Meta text written as is (JSON extensions such as Infinity and NaN that json.dumps would not
    write for a field alone, or not JSON at all)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _drop(key):
    return lambda arrays: arrays.pop(key)


def _set(key, value):
    def edit(d):
        d[key] = value
    return edit


def _pop(key):
    def edit(d):
        d.pop(key)
    return edit


def _set_optimizer(key, value):
    def edit(meta):
        meta["optimizer"][key] = value
    return edit


def _raw_field(key, text):
    """The meta document with field ``key`` written as the raw JSON ``text``."""
    def edit(meta):
        meta[key] = "@@"
        return RawJson(json.dumps(meta).replace('"@@"', text))
    return edit


def _first_momentum(arrays):
    return next(k for k in sorted(arrays) if k.startswith("momentum/"))


WELL_FORMED_BUT_WRONG = {
    "unknown format": (_set("format", "something-else"), None),
    "newer version": (_set("version", 99), None),
    "missing weight": (None, _drop("weight/fc1.bias")),
    "smaller weight": (None, _set("weight/conv1.weight", np.zeros((5, 1, 5, 5), np.float32))),
    "weight of another rank": (None, _set("weight/fc3.bias", np.zeros((10, 1), np.float32))),
    "missing momentum": (None, lambda a: a.pop(_first_momentum(a))),
    # fields only another tool would write wrongly, with a valid checksum: every field is
    # checked before the trainer changes
    "larger weight": (None, _set("weight/conv1.weight", np.zeros((7, 1, 5, 5), np.float32))),
    "steps not a number": (_set("steps", "abc"), None),
    "unknown state buffer": (_set("state_steps", [[10 ** 6, 1]]), None),
    "state count 0": (lambda meta: meta["state_steps"][0].__setitem__(1, 0), None),
    "state count beyond the steps": (lambda meta: meta["state_steps"][0].__setitem__(1, meta["steps"] + 1), None),
    "state buffer twice": (lambda meta: meta["state_steps"].append(list(meta["state_steps"][0])), None),
    "momentum_started in version 2": (_set("momentum_started", []), None),
    "optimizer of another kind": (lambda meta: meta["optimizer"].update(name="adam"), None),
    "optimizer unknown": (lambda meta: meta["optimizer"].update(name="lion"), None),
    "optimizer without a name": (lambda meta: _pop("name")(meta["optimizer"]), None),
    # a meta document of the wrong JSON type (issue 12: AttributeError before)
    "meta a JSON list": (lambda meta: [meta], None),
    "meta a JSON string": (lambda meta: "shardwise-checkpoint", None),
    "meta a JSON number": (lambda meta: 42, None),
    "meta Infinity": (lambda meta: RawJson("Infinity"), None),
    "meta null": (lambda meta: RawJson("null"), None),
    "meta not JSON": (lambda meta: RawJson("{'steps': 1"), None),
    "meta not UTF-8": (lambda meta: np.frombuffer(b"\xff\xfe{}", dtype=np.uint8), None),
    "meta of floats": (lambda meta: np.zeros(4), None),
    # fields of the wrong type: refused, never coerced (steps 2.9 loaded as 2 before)
    "steps a float": (_set("steps", 2.9), None),
    "steps an integral float": (_set("steps", 2.0), None),
    "steps a bool": (_set("steps", True), None),
    "steps negative": (_set("steps", -1), None),
    "steps beyond int64": (_set("steps", 2 ** 64), None),
    "steps Infinity": (_raw_field("steps", "Infinity"), None),
    "steps NaN": (_raw_field("steps", "NaN"), None),
    "steps 1e400": (_raw_field("steps", "1e400"), None),
    "steps missing": (_pop("steps"), None),
    "version true": (_set("version", True), None),
    "version 1.0": (_set("version", 1.0), None),
    "seed a string": (_set("seed", "0"), None),
    "graph fingerprint not a string": (_set("graph", 12345), None),
    "unknown meta field": (_set("learning_rate", 0.1), None),
    "optimizer a list": (_set("optimizer", [0.05, 0.9]), None),
    "momentum a string": (_set_optimizer("momentum", "0.9"), None),
    "momentum a bool": (_set_optimizer("momentum", True), None),
    "lr Infinity": (lambda meta: RawJson(json.dumps(meta).replace('"lr": 0.05', '"lr": Infinity')), None),
    "lr negative": (_set_optimizer("lr", -0.05), None),
    "nesterov a string": (_set_optimizer("nesterov", "false"), None),
    "optimizer missing a field": (lambda meta: _pop("dampening")(meta["optimizer"]), None),
    "state_steps a string": (_set("state_steps", "0"), None),
    "state_steps of bools": (_set("state_steps", [[True, 1]]), None),
    "state_steps of floats": (_set("state_steps", [[0.0, 1.0]]), None),
    "state_steps of ids alone": (lambda meta: meta.update(state_steps=[p[0] for p in meta["state_steps"]]), None),
    "state_steps missing": (_pop("state_steps"), None),
    # arrays of the wrong dtype or shape (strings and bools loaded as weights before)
    "weight as strings": (None, lambda a: a.update({"weight/fc3.bias": np.array([str(v) for v in
                                                                                 a["weight/fc3.bias"]])})),
    "weight as bools": (None, lambda a: a.update({"weight/fc3.bias": a["weight/fc3.bias"] > 0})),
    "weight complex": (None, lambda a: a.update({"weight/fc3.bias": a["weight/fc3.bias"] + 1j})),
    "weight of objects": (None, lambda a: a.update({"weight/fc3.bias": a["weight/fc3.bias"].astype(object)})),
    "weight a record": (None, lambda a: a.update({"weight/fc3.bias": np.zeros(10, dtype=[("x", "<f4")])})),
    "weight beyond float32": (None, lambda a: a.update({"weight/fc3.bias": np.full(10, 1e300)})),
    "momentum as strings": (None, lambda a: a.update({_first_momentum(a): a[_first_momentum(a)].astype("U8")})),
    "momentum of another shape": (None, lambda a: a.update({_first_momentum(a): a[_first_momentum(a)][:1]})),
    "unknown member": (None, _set("weight/conv9.weight", np.zeros(3, np.float32))),
}


@pytest.mark.parametrize("case", sorted(WELL_FORMED_BUT_WRONG))
def test_well_formed_but_wrong_checkpoints_are_refused(tmp_path, trained, case):
    _, _, t, data = trained
    path = tmp_path / "run.ckpt"
    t.save_checkpoint(path)
    t.step(*data[1])
    before = state_of(t)
    rewrite(path, *WELL_FORMED_BUT_WRONG[case])
    with pytest.raises(CheckpointError):
        t.load_checkpoint(path)
    assert_same_state(t, before)


def _as_version_1(meta):
    """The meta document as shardwise wrote it before Adam (checkpoint version 1): SGD's fields
    without a name, and the started momentum buffers instead of update counts."""
    meta["version"] = 1
    meta["optimizer"].pop("name")
    meta["momentum_started"] = [b for b, _ in meta.pop("state_steps")]


def test_version_1_checkpoints_still_load(tmp_path, trained):
    g, plan, t, data = trained
    path = tmp_path / "v1.ckpt"
    t.save_checkpoint(path)
    rewrite(path, _as_version_1)
    other = Trainer(g, plan, optimizer=OPT, seed=3)
    other.load_checkpoint(path)
    assert other.steps == 1 and set(other.executor.updates()) == set(t.executor.updates())
    assert [other.step(x, y) for x, y in data[1:]] == [t.step(x, y) for x, y in data[1:]]


@pytest.mark.parametrize("edit", [
    lambda meta: meta["optimizer"].update(name="sgd"),               # a version 2 field in version 1
    lambda meta: meta.update(state_steps=[]),                        # likewise
    lambda meta: meta.update(momentum_started=[10 ** 6]),            # an unknown buffer
    lambda meta: meta.update(momentum_started=[[0, 1]]),             # version 2's pairs
], ids=["named optimizer", "state_steps", "unknown buffer", "pairs"])
def test_malformed_version_1_checkpoints_are_refused(tmp_path, trained, edit):
    _, _, t, data = trained
    path = tmp_path / "v1.ckpt"
    t.save_checkpoint(path)
    t.step(*data[1])
    before = state_of(t)
    rewrite(path, lambda meta: (_as_version_1(meta), edit(meta))[1])
    with pytest.raises(CheckpointError):
        t.load_checkpoint(path)
    assert_same_state(t, before)


def test_weights_stored_as_float64_load(tmp_path, trained):
    """A foreign tool may store the arrays as float64: real numbers float32 can hold are accepted."""
    g, plan, t, data = trained
    path = tmp_path / "run.ckpt"
    t.save_checkpoint(path)
    rewrite(path, edit_arrays=lambda a: a.update({k: v.astype(np.float64) for k, v in a.items()}))
    other = Trainer(g, plan, optimizer=OPT, seed=3)
    other.load_checkpoint(path)
    assert other.steps == 1
    assert other.step(*data[1]) == t.step(*data[1])


def _checkpoint_with_member(good: bytes, member: str, header_shape=None, data_bytes=None) -> bytes:
    """The payload of ``good`` with ``member`` replaced by a deflated .npy member whose header says
    ``header_shape`` (default: the real one) followed by ``data_bytes`` zero bytes (default: the
    real size).  A deflated run of zeros is tiny, so the file stays small whatever it declares."""
    payload = good.split(b"\n", 2)[2]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(payload)) as src, \
            zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as dst:
        for info in src.infolist():
            if info.filename != member:
                dst.writestr(info.filename, src.read(info.filename), compress_type=zipfile.ZIP_STORED)
                continue
            real = np.lib.format.read_array(io.BytesIO(src.read(member)))
            shape = real.shape if header_shape is None else header_shape
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
            size = real.nbytes if data_bytes is None else data_bytes
            with dst.open(member, "w", force_zip64=True) as m:
                m.write(header.getvalue())
                chunk = bytes(min(size, 1 << 22))
                left = size
                while left > 0:
                    m.write(chunk[:left])
                    left -= len(chunk)
    return out.getvalue()


def test_a_small_file_declaring_a_huge_member_is_refused_before_decompressing(tmp_path, trained):
    """A 1 GiB member deflated into a file of a few MB: refused from the zip directory, without
    inflating it (it took 33 s and 2 GB before being refused)."""
    _, _, t, _ = trained
    good = tmp_path / "good.ckpt"
    t.save_checkpoint(good)
    before = state_of(t)
    path = tmp_path / "huge.ckpt"
    write_checkpoint_payload(path, _checkpoint_with_member(good.read_bytes(), "weight/conv1.weight.npy",
                                                          data_bytes=1 << 30))
    assert path.stat().st_size < 8 << 20
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError) as err:
            t.load_checkpoint(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    found = re.search(r"'weight/conv1.weight.npy' declares (\d+) bytes, but its header describes (\d+)", str(err.value))
    assert found, str(err.value)
    declared, described = int(found.group(1)), int(found.group(2))
    assert declared > 1 << 30 and described == declared - (1 << 30) + 6 * 1 * 5 * 5 * 4
    assert peak < 32 << 20, f"{peak >> 20} MB traced while refusing"
    assert_same_state(t, before)


@pytest.mark.parametrize("shape", [(1 << 28,), (6, 1, 5, 5, 1), (6 * 1 << 20, 1, 5, 5)])
def test_a_member_header_declaring_another_shape_is_refused(tmp_path, trained, shape):
    _, _, t, _ = trained
    good = tmp_path / "good.ckpt"
    t.save_checkpoint(good)
    before = state_of(t)
    path = tmp_path / "bad.ckpt"
    write_checkpoint_payload(path, _checkpoint_with_member(good.read_bytes(), "weight/conv1.weight.npy",
                                                          header_shape=shape))
    with pytest.raises(CheckpointError, match=r"has shape .*expected \(6, 1, 5, 5\)"):
        t.load_checkpoint(path)
    assert_same_state(t, before)


def test_a_file_larger_than_any_checkpoint_of_the_trainer_is_not_read_whole(tmp_path, trained):
    _, _, t, _ = trained
    path = tmp_path / "big.ckpt"
    with open(path, "wb") as f:
        f.write(b"SWCKPT1\n")
        f.truncate(8 << 30)  # a sparse 8 GiB file: reading it whole would need 8 GiB of memory
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match="larger than any checkpoint"):
            t.load_checkpoint(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak >> 20} MB traced while refusing"


# ----------------------------------------------------------------------------- Ctrl-C during fit
def replay(g, plan, images, labels, steps: int, shuffle_seed: int, optimizer: SGD = OPT) -> Trainer:
    """A trainer that ran exactly ``steps`` steps on the minibatches fit would have drawn."""
    t = Trainer(g, plan, optimizer=optimizer, seed=0)
    n = g.ops[0].shape[0]
    rng = np.random.default_rng(shuffle_seed)
    done = 0
    while done < steps:
        order = rng.permutation(len(images))
        for b in range(len(images) // n):
            if done == steps:
                break
            idx = order[b * n:(b + 1) * n]
            t.step(images[idx], labels[idx])
            done += 1
    return t


@pytest.mark.parametrize("plan_name", ["data", "searched"])
def test_ctrl_c_during_fit_stops_at_a_step_boundary(plan_name):
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    plan = sw.strategies.data_parallel(g, d) if plan_name == "data" else sw.search(g, d)
    rng = np.random.default_rng(3)
    images = rng.standard_normal((44, 1, 32, 32)).astype(np.float32)  # 5 minibatches, 4 samples dropped
    labels = rng.integers(0, 10, 44)
    seen = []

    def ctrl_c(epoch, batch, loss):
        seen.append(loss)
        if (epoch, batch) == (1, 2):
            raise KeyboardInterrupt

    t = Trainer(g, plan, optimizer=OPT, seed=0)
    history = t.fit(images, labels, epochs=3, shuffle_seed=11, callback=ctrl_c)
    assert t.steps == 5 + 3 == len(seen)
    assert len(history) == 1  # only the first epoch completed
    reference = replay(g, plan, images, labels, 8, shuffle_seed=11)
    w, want = t.get_weights(), reference.get_weights()
    for k in want:
        np.testing.assert_array_equal(w[k], want[k], err_msg=k)
    # and training goes on from there as if nothing happened
    x, y = images[:8], labels[:8]
    assert t.step(x, y) == reference.step(x, y)


def test_real_sigint_during_a_multi_worker_step_leaves_a_consistent_state():
    g = sw.models.lenet5(batch=1024)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    rng = np.random.default_rng(0)
    images = rng.standard_normal((2048, 1, 32, 32)).astype(np.float32)
    labels = rng.integers(0, 10, 2048)
    t = Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9), seed=0)
    start = time.perf_counter()
    t.step(images[:1024], labels[:1024])
    step_time = time.perf_counter() - start
    t = Trainer(g, plan, optimizer=SGD(lr=0.01, momentum=0.9), seed=0)
    timers = []

    def interrupt_the_next_step(epoch, batch, loss):
        if not timers:  # after the first step: SIGINT half-way through the second
            timers.append(threading.Timer(step_time * 0.5, os.kill, (os.getpid(), signal.SIGINT)))
            timers[0].start()

    try:
        t.fit(images, labels, epochs=3, shuffle_seed=0, callback=interrupt_the_next_step)
    finally:
        timers[0].cancel()
    steps, weights = t.steps, t.get_weights()
    time.sleep(step_time * 2)  # nothing may change once fit has returned
    later = t.get_weights()
    assert all(np.array_equal(weights[k], later[k]) for k in weights)
    assert steps >= 1
    want = replay(g, plan, images, labels, steps, shuffle_seed=0, optimizer=SGD(lr=0.01, momentum=0.9)).get_weights()
    assert all(np.array_equal(weights[k], want[k]) for k in want)


# ----------------------------------------------------------------------------- two threads, one trainer
def test_a_trainer_busy_in_another_thread_refuses_every_call(tmp_path, trained):
    """While one thread is inside step (held there by a patched executor), every call from another
    thread raises TrainerInUseError at once and changes nothing; the held step then finishes with
    the loss of a trainer nobody disturbed."""
    g, plan, t, data = trained
    t.save_checkpoint(tmp_path / "before.ckpt")
    inside, release = threading.Event(), threading.Event()
    real_run = t.executor.run

    def held_run(*args, **kwargs):
        if threading.current_thread() is worker:  # only the worker's step is held
            inside.set()
            assert release.wait(60)
        return real_run(*args, **kwargs)

    t.executor.run = held_run
    box = {}
    worker = threading.Thread(target=lambda: box.update(loss=t.step(*data[1])))
    worker.start()
    try:
        assert inside.wait(60)
        before = {k: v.copy() for k, v in t.executor.persistent.items()}
        calls = {"step": lambda: t.step(*data[2]), "loss": lambda: t.loss(*data[2]),
                 "predict": lambda: t.predict(data[2][0]),
                 "evaluate": lambda: t.evaluate(data[2][0], data[2][1]),
                 "fit": lambda: t.fit(data[2][0], data[2][1]),
                 "save_checkpoint": lambda: t.save_checkpoint(tmp_path / "during.ckpt"),
                 "load_checkpoint": lambda: t.load_checkpoint(tmp_path / "before.ckpt")}
        for name, call in calls.items():
            with pytest.raises(TrainerInUseError, match="in use by another thread.*not thread-safe.*one Trainer "
                                                        "per thread") as err:
                call()
            assert isinstance(err.value, RuntimeError) and isinstance(err.value, sw.ShardwiseError), name
        assert not (tmp_path / "during.ckpt").exists()
        for k, v in before.items():
            np.testing.assert_array_equal(t.executor.persistent[k], v, err_msg=str(k))
        assert t.steps == 1
    finally:
        release.set()
        worker.join()
    t.executor.run = real_run
    reference = Trainer(g, plan, optimizer=OPT)
    reference.step(*data[0])
    assert box["loss"] == reference.step(*data[1])
    assert t.steps == 2
    assert t.step(*data[2]) == reference.step(*data[2])  # usable again once the other thread is done


def test_two_threads_hammering_one_trainer_never_get_a_wrong_loss():
    """One thread trains (retrying a refused step), another keeps asking for the loss and the
    predictions of a fixed minibatch.  Every call either raises TrainerInUseError or returns
    exactly what a sequential run gives: the training losses those of a trainer used alone,
    the probe's loss and probabilities those of some state that trainer went through."""
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    data = batches(g, 20, seed=4)
    probe_x, probe_y = batches(g, 1, seed=5)[0]
    alone = Trainer(g, plan, optimizer=OPT)
    want_losses = []
    probe_losses, probe_probs = [alone.loss(probe_x, probe_y)], [alone.predict(probe_x)]
    for x, y in data:
        want_losses.append(alone.step(x, y))
        probe_losses.append(alone.loss(probe_x, probe_y))
        probe_probs.append(alone.predict(probe_x))

    t = Trainer(g, plan, optimizer=OPT)
    losses, seen_losses, seen_probs, refused, unexpected = [], [], [], [], []
    done = threading.Event()

    def train():
        try:
            for x, y in data:
                while True:
                    try:
                        losses.append(t.step(x, y))
                        break
                    except TrainerInUseError as exc:
                        refused.append(exc)
        except BaseException as exc:  # reported below; a wrong answer must not hang the test
            unexpected.append(exc)
        finally:
            done.set()

    def probe():
        try:
            k = 0
            while not done.is_set():
                k += 1
                try:
                    if k % 2:
                        seen_losses.append(t.loss(probe_x, probe_y))
                    else:
                        seen_probs.append(t.predict(probe_x))
                except TrainerInUseError as exc:
                    refused.append(exc)
        except BaseException as exc:
            unexpected.append(exc)

    threads = [threading.Thread(target=train), threading.Thread(target=probe)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not unexpected, unexpected[:3]
    assert losses == want_losses
    assert all(v in probe_losses for v in seen_losses)
    assert all(any(np.array_equal(p, q) for q in probe_probs) for p in seen_probs)
    w, want = t.get_weights(), alone.get_weights()
    for k in want:
        np.testing.assert_array_equal(w[k], want[k], err_msg=k)
    assert all("not thread-safe" in str(e) for e in refused)


# ----------------------------------------------------------------------------- leaks
def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the peak resident set, which can only grow
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_many_steps_do_not_leak():
    g = sw.models.lenet5(batch=16)
    t = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=OPT)
    data = batches(g, 4)
    tracemalloc.start()
    try:
        traced = {}
        rss = {}
        for step in range(1, 201):
            x, y = data[step % len(data)]
            t.step(x, y)
            if step % 5 == 0:
                t.loss(x, y)
                t.predict(x)
            if step in (50, 200):
                traced[step] = tracemalloc.get_traced_memory()[0]
                rss[step] = rss_bytes()
    finally:
        tracemalloc.stop()
    assert traced[200] - traced[50] < 1 << 20, f"traced memory grew by {traced[200] - traced[50]} bytes"
    assert rss[200] - rss[50] < 20 << 20, f"resident set grew by {(rss[200] - rss[50]) >> 20} MB"
