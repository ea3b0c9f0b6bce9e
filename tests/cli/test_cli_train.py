"""``python -m shardwise train``: short runs, checkpoints and resuming, bad input (exit 2)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from shardwise import cli
from shardwise.train.trainer import Trainer

SKLEARN_MISSING = "scikit-learn not installed (it bundles the digits data set): pip install scikit-learn"


def need_sklearn() -> None:
    pytest.importorskip("sklearn", reason=SKLEARN_MISSING)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def accuracy_of(out: str) -> float:
    m = re.search(r"test accuracy ([0-9.]+)% \((\d+)/(\d+)\)", out)
    assert m, out
    return float(m.group(1)) / 100


def epoch_lines(out: str) -> list[str]:
    """The epoch lines without their images/s (a timing)."""
    return [re.sub(r"\s+[0-9.]+ images/s", "", line) for line in out.splitlines() if line.startswith("epoch ")]


SHORT = ("train", "--epochs", "1", "--batch", "32", "--quiet")


def test_a_short_run_prints_epochs_and_an_accuracy(capsys):
    need_sklearn()
    code, out, err = run(capsys, *SHORT, "--devices", "2", "--plan", "data")
    assert code == 0, err
    assert err == ""  # --quiet
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 1 and re.search(r"epoch 1/1\s+loss [0-9.]+\s+[0-9.]+ images/s$", lines[0])
    assert 0.0 <= accuracy_of(out) <= 1.0
    assert "after 42 steps" in out  # 1347 training digits // 32


def test_the_searched_plan_on_4_workers_learns(capsys):
    need_sklearn()
    code, out, err = run(capsys, "train", "--devices", "4", "--plan", "search", "--epochs", "5")
    assert code == 0, err
    assert "searched plan on cpu x4" in err and "elimination search" in err
    losses = [float(line.split("loss ")[1].split()[0]) for line in epoch_lines(out)]
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert accuracy_of(out) > 0.8


@pytest.mark.parametrize("plan", ["model", "owt"])
def test_baseline_plans(capsys, plan):
    need_sklearn()
    code, out, err = run(capsys, *SHORT, "--devices", "2", "--plan", plan)
    assert code == 0, err
    accuracy_of(out)


def test_a_plan_file(capsys, tmp_path):
    need_sklearn()
    path = str(tmp_path / "plan.json")
    code, _, err = run(capsys, "plan", "--model", "lenet5", "--batch", "32", "--devices", "2",
                       "--device-type", "cpu", "--save", path, "--quiet")
    assert code == 0, err
    code, out, err = run(capsys, *SHORT, "--devices", "2", "--plan", path)
    assert code == 0, err
    accuracy_of(out)
    # the same file on another number of workers is another device graph
    code, out, err = run(capsys, *SHORT, "--devices", "4", "--plan", path)
    assert code == 2 and err.startswith("error: ") and "device graph" in err


def test_a_plan_file_with_ring_synchronization_trains(capsys, tmp_path):
    need_sklearn()
    path = str(tmp_path / "ring.json")
    code, _, err = run(capsys, "plan", "--model", "lenet5", "--batch", "32", "--devices", "2",
                       "--device-type", "cpu", "--sync", "ring", "--save", path, "--quiet")
    assert code == 0, err
    code, out, err = run(capsys, *SHORT, "--devices", "2", "--plan", path)
    assert code == 0, err
    accuracy_of(out)


def test_resuming_gives_the_run_that_never_stopped(capsys, tmp_path):
    need_sklearn()
    common = ("train", "--batch", "64", "--devices", "2", "--plan", "search", "--quiet")
    code, straight, err = run(capsys, *common, "--epochs", "3")
    assert code == 0, err
    ckpt = str(tmp_path / "run.ckpt")
    code, first, err = run(capsys, *common, "--epochs", "1", "--checkpoint", ckpt)
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]
    code, second, err = run(capsys, *common, "--epochs", "3", "--checkpoint", ckpt, "--resume")
    assert code == 0, err
    want = epoch_lines(straight)
    assert epoch_lines(first) == [want[0].replace("/3", "/1")]
    assert epoch_lines(second) == want[1:]
    assert accuracy_of(second) == accuracy_of(straight)
    # resuming a finished run does nothing more
    code, again, err = run(capsys, *common, "--epochs", "3", "--checkpoint", ckpt, "--resume")
    assert code == 0 and "nothing to do" in again and accuracy_of(again) == accuracy_of(straight)


def test_ctrl_c_stops_at_a_step_boundary_saves_and_resumes(capsys, tmp_path, monkeypatch):
    need_sklearn()
    common = ("train", "--batch", "64", "--devices", "2", "--plan", "data", "--quiet", "--epochs", "1")
    code, straight, err = run(capsys, *common)
    assert code == 0, err

    real_step = Trainer.step
    calls = []

    def step_then_ctrl_c(self, images, labels):
        calls.append(1)
        if len(calls) == 5:
            os.kill(os.getpid(), signal.SIGINT)  # arrives during step 5: training stops after it
        return real_step(self, images, labels)

    monkeypatch.setattr(Trainer, "step", step_then_ctrl_c)
    ckpt = str(tmp_path / "run.ckpt")
    code, out, err = run(capsys, *common, "--checkpoint", ckpt)
    assert code == 130
    assert "interrupted after step 5" in err
    assert "(5 of 21 steps)" in out and "test accuracy" not in out
    monkeypatch.undo()
    code, resumed, err = run(capsys, *common, "--checkpoint", ckpt, "--resume")
    assert code == 0, err
    assert "(16 of 21 steps)" in resumed
    assert accuracy_of(resumed) == accuracy_of(straight)


def test_ctrl_c_raised_as_a_step_returns_still_saves_the_checkpoint(capsys, tmp_path, monkeypatch):
    """A step runs in C with the interpreter lock released; a Ctrl-C meanwhile is raised by
    Python as KeyboardInterrupt once the C call returns, so the exception can surface *after*
    the weights changed but before any Python line of Trainer.step ran.  The step count is kept
    by the runtime (counted as the C call returns), so the command saves the weights of step 5
    as step 5 and the resumed run equals the one that never stopped (a count kept in Python
    after the call would say step 4, and the resumed run would train one step too many)."""
    need_sklearn()
    from shardwise.train.runtime import NativeExecutor

    common = ("train", "--batch", "64", "--devices", "2", "--plan", "data", "--quiet", "--epochs", "1")
    code, straight, err = run(capsys, *common)
    assert code == 0, err
    real_run = NativeExecutor.run
    calls = []

    def run_then_interrupt(self, *args, **kwargs):
        loss = real_run(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt   # where Python would raise a Ctrl-C that came during the step
        return loss

    monkeypatch.setattr(NativeExecutor, "run", run_then_interrupt)
    ckpt = tmp_path / "run.ckpt"
    code, out, err = run(capsys, *common, "--checkpoint", str(ckpt))
    assert code == 130, err
    assert "interrupted after step 5; the weights are those of that step, saved to" in err
    assert "error:" not in err and "(5 of 21 steps)" in out and "test accuracy" not in out
    monkeypatch.undo()
    code, resumed, err = run(capsys, *common, "--checkpoint", str(ckpt), "--resume")
    assert code == 0, err
    assert "(16 of 21 steps)" in resumed
    assert accuracy_of(resumed) == accuracy_of(straight)


BAD = {
    "unknown plan name": ["--plan", "fastest"],
    "untrainable model": ["--model", "vgg16"],
    "unknown model": ["--model", "lenet7"],
    "devices not a number": ["--devices", "four"],
    "no devices": ["--devices", "0"],
    "cluster spec": ["--devices", "2x2"],
    "no epochs": ["--epochs", "0"],
    "negative learning rate": ["--lr", "-0.1"],
    "NaN momentum": ["--momentum", "nan"],
    "zero batch": ["--batch", "0"],
    "resume without checkpoint": ["--resume"],
    "checkpoint in a missing folder": ["--checkpoint", "/nonexistent-folder/run.ckpt"],
    "epochs not a number": ["--epochs", "many"],
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_error_line_and_exit_2(capsys, case):
    code, out, err = run(capsys, "train", *BAD[case])
    assert code == 2
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error: ")]


def test_untrainable_model_says_only_lenet5(capsys):
    code, _, err = run(capsys, "train", "--model", "resnet18")
    assert code == 2 and "only lenet5" in err


def test_batch_larger_than_the_data(capsys):
    need_sklearn()
    code, _, err = run(capsys, "train", "--batch", "2000", "--devices", "1")
    assert code == 2 and "larger than the 1347 training samples" in err


def test_bad_checkpoints_exit_2(capsys, tmp_path):
    need_sklearn()
    ckpt = tmp_path / "run.ckpt"
    ckpt.write_bytes(b"SWCKPT1\nnot a checkpoint")
    code, _, err = run(capsys, *SHORT, "--devices", "2", "--checkpoint", str(ckpt), "--resume")
    assert code == 2 and err.startswith("error: ") and "corrupt" in err
    assert ckpt.read_bytes() == b"SWCKPT1\nnot a checkpoint"  # a failed resume does not overwrite it
    # a checkpoint of another plan
    code, _, err = run(capsys, *SHORT, "--devices", "2", "--plan", "data", "--checkpoint", str(ckpt))
    assert code == 0, err
    code, _, err = run(capsys, *SHORT, "--devices", "2", "--plan", "model", "--checkpoint", str(ckpt), "--resume")
    assert code == 2 and "another plan" in err


def test_resume_without_a_checkpoint_file_starts_fresh(capsys, tmp_path):
    need_sklearn()
    ckpt = tmp_path / "new.ckpt"
    code, out, err = run(capsys, "train", "--epochs", "1", "--batch", "32", "--devices", "2", "--plan", "data",
                         "--checkpoint", str(ckpt), "--resume")
    assert code == 0, err
    assert "starting from scratch" in err and ckpt.exists()


def test_missing_scikit_learn_is_an_error_with_the_install_command(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    code, _, err = run(capsys, "train", "--devices", "1", "--plan", "data")
    assert code == 2 and "pip install scikit-learn" in err


def test_python_dash_m_shardwise_train():
    need_sklearn()
    proc = subprocess.run([sys.executable, "-m", "shardwise", "train", "--epochs", "1", "--devices", "2",
                           "--plan", "data", "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "test accuracy" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "shardwise", "train", "--plan", "nope"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown plan 'nope'")


def test_train_help_lists_the_options(capsys):
    code, out, _ = run(capsys, "train", "--help")
    assert code == 0
    for option in ("--plan", "--epochs", "--lr", "--momentum", "--weight-decay", "--batch", "--seed",
                   "--checkpoint", "--resume", "--quiet", "--devices", "--model"):
        assert option in out


def test_a_real_ctrl_c_during_training_saves_the_checkpoint_and_exits_130(tmp_path):
    """SIGINT sent to ``python -m shardwise train --checkpoint`` while it trains: most land
    inside a step, which runs in C and completes; the command's handler stops training at the
    next step boundary.  The command must still save the weights of the last complete step
    and exit with status 130 (it used to exit without saving)."""
    need_sklearn()
    ckpt = tmp_path / "run.ckpt"
    proc = subprocess.Popen([sys.executable, "-m", "shardwise", "train", "--batch", "1024", "--devices", "2",
                             "--plan", "data", "--epochs", "1000", "--checkpoint", str(ckpt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in proc.stderr:  # the notes before training; the last one says training starts
            seen.append(line)
            if line.startswith("shardwise: training"):
                break
        assert seen and seen[-1].startswith("shardwise: training"), "".join(seen)
        for line in proc.stdout:  # two epochs of one step each done: training is under way
            if line.startswith("epoch 2/1000"):
                break
        # A pause of about half a step so that the signal usually lands inside the next step's
        # C kernels (the case that lost the checkpoint) rather than in the few milliseconds of
        # Python between steps; the assertions hold wherever it lands.
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    m = re.search(r"interrupted after step (\d+); the weights are those of that step, saved to (.+)$", err, re.M)
    assert m, err
    assert m.group(2) == str(ckpt) and "error:" not in err
    assert sorted(os.listdir(tmp_path)) == ["run.ckpt"]
    import shardwise as sw
    g = sw.models.lenet5(batch=1024)
    t = Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.load_checkpoint(ckpt)
    assert t.steps == int(m.group(1)) >= 2  # at least the first two epochs (one step each)
