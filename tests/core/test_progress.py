"""Progress of long calls (shardwise.progress): "auto" shows nothing for a call that ends
within a second and appears after it; True shows from the start; False never; a terminal or a
notebook gets a tqdm bar with an ETA, a log one line per stage."""
from __future__ import annotations

import io
import re
import time

import numpy as np
import pytest

import shardwise as sw
from shardwise import progress as progress_module
from shardwise.progress import ProgressReport


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_auto_is_silent_for_a_short_call_and_shows_the_held_stages_after_a_second(monkeypatch):
    log = io.StringIO()
    report = ProgressReport("search", "auto", stream=log)
    report.stage("enumerate configurations", 0.01)
    report.advance(5, 10, "elimination search")        # a log draws no bar
    assert log.getvalue() == ""
    monkeypatch.setattr(progress_module, "SHOW_AFTER", 0.0)   # the call has now run "a second"
    report.stage("elimination search", 0.02)
    lines = log.getvalue().splitlines()
    assert [line.split()[1:3] for line in lines] == [["enumerate", "configurations"], ["elimination", "search"]]
    assert "\r" not in log.getvalue()   # a log gets whole lines, never in-place updates


def test_true_shows_from_the_start_and_false_never():
    log = io.StringIO()
    ProgressReport("fit", True, stream=log).stage("set up", 0.5)
    assert re.fullmatch(r"  \[shardwise\] set up +500\.0 ms\n", log.getvalue())
    quiet = Terminal()
    with ProgressReport("fit", False, stream=quiet) as report:
        report.stage("set up", 0.5)
        report.advance(1, 2, "training")
        report.line("epoch 1/1")
    assert quiet.getvalue() == ""


def test_a_terminal_gets_a_bar_with_an_eta():
    term = Terminal()
    with ProgressReport("fit", True, stream=term, unit="step") as report:
        for k in range(1, 5):
            time.sleep(0.12)          # tqdm redraws at most every 0.1 s
            report.advance(k, 8, "training", loss="0.5000")
    out = term.getvalue()
    assert "[shardwise] training" in out and "4/8" in out
    assert re.search(r"\d\d:\d\d<\d\d:\d\d", out), out    # elapsed<remaining: the ETA
    assert "loss=0.5000" in out and "step" in out


def test_a_callable_gets_every_stage_and_draws_nothing():
    seen = []
    term = Terminal()
    report = ProgressReport("search", lambda name, s: seen.append(name), stream=term)
    report.stage("a", 0.0)
    report.advance(1, 2, "b")
    assert seen == ["a"] and term.getvalue() == ""


def test_search_progress(capsys):
    g, d = sw.models.lenet5(), sw.DeviceGraph.cpu(2)
    sw.search(g, d)                        # "auto", and it takes well under a second
    assert capsys.readouterr().err == ""
    sw.search(g, d, progress=True)
    err = capsys.readouterr().err
    assert "[shardwise] enumerate configurations" in err and "elimination search" in err
    with pytest.raises(sw.ConfigError, match="progress must be True, False or 'auto'"):
        sw.search(g, d, progress="yes")


def test_fit_progress_lines_in_a_log_and_a_bar_in_a_terminal(capsys, monkeypatch):
    g = sw.models.lenet5(batch=8)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((32, 1, 32, 32)).astype(np.float32), rng.integers(0, 10, 32)
    history = t.fit(x, y, epochs=2, progress=True)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "epoch" in line]
    assert len(lines) == 2 and "epoch 2/2: loss" in lines[1]
    assert f"{history[1]:.4f}" in lines[1]
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    t.fit(x, y, epochs=1, progress=True, callback=lambda *a: time.sleep(0.12))   # tqdm redraws every 0.1 s
    assert "[shardwise] training" in term.getvalue() and re.search(r"[1-4]/4 \[\d\d:\d\d<\d\d:\d\d", term.getvalue())
    with pytest.raises(sw.ConfigError, match="progress must be True, False or 'auto'"):
        t.fit(x, y, progress=print)
