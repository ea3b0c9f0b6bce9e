"""tools/check_docs.py and its registry tools/doc_figures.py: every registered figure is still quoted
in its doc (so a doc edit that leaves the registry behind fails here), the drift logic flags what it
should on made-up command outputs, and one cheap deterministic command re-run against the README
(the quick start's plan of VGG-16 on 4 x 4 P100s) shows no drift.
"""
from __future__ import annotations

import importlib.util
import io
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOOL = os.path.join(ROOT, "tools", "check_docs.py")


def load_tool():
    spec = importlib.util.spec_from_file_location("check_docs", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_docs"] = module      # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


cd = load_tool()
Figure = cd.Figure


def test_registry_is_well_formed():
    assert cd.check_registry() == []


@pytest.mark.parametrize("figure", cd.FIGURES, ids=lambda f: f"{f.doc}:{cd.plain_quote(f)[:40]}")
def test_every_quote_is_in_its_doc(figure):
    assert cd.find_quote(figure) is not None, (
        f"{figure.doc} no longer contains {cd.plain_quote(figure)!r}: update tools/doc_figures.py with the doc")


def test_quotes_are_found_across_line_breaks(tmp_path):
    (tmp_path / "doc.md").write_text("intro\nthe plan takes 431\n   ms per\niteration\n")
    f = Figure("doc.md", "takes [[431]] ms per iteration", "x", r"(\d+)")
    assert cd.find_quote(f, root=str(tmp_path)) == 2
    g = Figure("doc.md", "takes [[432]] ms per iteration", "x", r"(\d+)")
    assert cd.find_quote(g, root=str(tmp_path)) is None


def test_exact_figures_compare_at_the_docs_precision():
    f = Figure("d.md", "peak [[2.91]] GB", "x", r"peak ([\d.]+)")
    assert cd.compare(f, 2.914)[1] and cd.compare(f, 2.906)[1]
    assert not cd.compare(f, 2.916)[1] and not cd.compare(f, 2.90)[1]
    whole = Figure("d.md", "[[35]] GB", "x", r"(\d+)")
    assert cd.compare(whole, 35.16)[1] and not cd.compare(whole, 35.6)[1]
    drift, ok = cd.compare(whole, 42.0)
    assert not ok and drift == pytest.approx(0.2)


def test_ranges_compare_end_by_end():
    f = Figure("d.md", "[[96.9% to 99.1]]%", "x", r"(\d+)")
    assert cd.doc_value(f) == (96.9, 99.1)
    assert cd.compare(f, (96.94, 99.08))[1]
    drift, ok = cd.compare(f, (96.9, 99.4))
    assert not ok and drift == pytest.approx(0.3 / 99.1)
    t = Figure("d.md", "in [[0.17-0.32]] s", "x", r"(\S+)", kind="timing", tolerance=0.5)
    assert cd.compare(t, 0.25) == (0.0, True)           # one value inside the range
    drift, ok = cd.compare(t, 0.64)
    assert drift == pytest.approx(1.0) and not ok


def test_report_flags_drift_of_made_up_outputs():
    exact = Figure("README.md", "(at most [[2.91]] GB of a P100's 16 GB", "fake", r"peak ([\d.]+) GB")
    timing = Figure("README.md", "one iteration of Inception-v3 on 16 devices in [[0.17-0.32]] s", "slow",
                    r"took ([\d.]+) ms", kind="timing", tolerance=0.5, scale=1e-3)
    good = cd.evaluate([exact, timing], {"fake": ("memory ...: peak 2.91 GB; 0: 2.91/16 GB", ""),
                                         "slow": ("took 250.0 ms", "")})
    assert [o.ok for o in good] == [True, True]
    assert cd.report(good, stream=io.StringIO()) == 0

    drifted = cd.evaluate([exact, timing], {"fake": ("peak 3.40 GB", ""), "slow": ("took 900 ms", "")})
    out = io.StringIO()
    assert cd.report(drifted, stream=out) == 1            # the deterministic figure fails the run
    lines = out.getvalue().splitlines()
    assert any(line.startswith("DRIFT") and "2.91" in line and "3.4" in line and "+16.8%" in line for line in lines)
    assert any(line.startswith("drift ") and "0.9" in line for line in lines)   # reported, lower case

    timing_only = cd.evaluate([timing], {"slow": ("took 900 ms", "")})
    assert cd.report(timing_only, stream=io.StringIO()) == 0   # a slow machine is not a failure

    broken = cd.evaluate([exact], {"fake": ("", "exit status 1: boom")})
    out = io.StringIO()
    assert cd.report(broken, stream=out) == 1 and "boom" in out.getvalue()

    unparsable = cd.evaluate([exact], {"fake": ("no memory line here", "")})
    assert unparsable[0].problem and cd.report(unparsable, stream=io.StringIO()) == 1

    gone = Figure("README.md", "a sentence no doc has: [[1]] ms", "fake", r"(\d)")
    assert cd.report(cd.evaluate([gone], {"fake": ("1", "")}), stream=io.StringIO()) == 2


def test_quick_selects_cheap_deterministic_figures_only():
    quick = cd.select(cd.FIGURES, None, quick=True)
    assert quick and all(f.kind == "exact" and cd.COMMANDS[f.command].cheap for f in quick)
    assert len(quick) < len(cd.FIGURES)
    only = cd.select(cd.FIGURES, "P100's 16 GB", quick=False)
    assert [cd.marked_text(f) for f in only] == ["2.91"]


def test_readme_plan_of_vgg16_has_no_drift():
    """One real run: python -m shardwise plan --model vgg16 --devices 4x4 (about 2 s) against the
    README's 488 / 598 / 1552 ms, 8.3x, 431 / 434 / 493 / 1359 ms, 2.91 GB and 35 GB."""
    figures = [f for f in cd.FIGURES if f.command == "plan vgg16 4x4"]
    assert {cd.marked_text(f) for f in figures} >= {"431", "434", "493", "1359", "2.91"}
    outputs = {"plan vgg16 4x4": cd.run_command(cd.COMMANDS["plan vgg16 4x4"])}
    assert outputs["plan vgg16 4x4"][1] == ""
    outcomes = cd.evaluate(figures, outputs)
    bad = [(cd.plain_quote(o.figure), o.measured, o.problem) for o in outcomes if not o.ok]
    assert not bad, bad


def test_list_prints_the_registry_and_runs_nothing(capsys, monkeypatch):
    monkeypatch.setattr(cd, "run_command", lambda command: pytest.fail("--list ran a command"))
    assert cd.main(["--list", "--only", "P100's 16 GB"]) == 0
    out = capsys.readouterr().out
    assert "README.md:" in out and "figure 2.91" in out and "python -m shardwise plan --model vgg16" in out


def test_commands_that_rewrite_results_files_put_them_back(tmp_path, monkeypatch):
    results = tmp_path / "results.txt"
    results.write_text("recorded\n")
    monkeypatch.setattr(cd, "ROOT", str(tmp_path))
    command = cd.Command(("bash", "-c", "echo overwritten > results.txt; echo measured 42"), cheap=True,
                         rewrites=("results.txt",))
    output, problem = cd.run_command(command)
    assert problem == "" and "measured 42" in output
    assert results.read_text() == "recorded\n"
