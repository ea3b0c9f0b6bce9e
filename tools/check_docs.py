#!/usr/bin/env python3
"""check_docs.py -- re-run the commands behind the figures quoted in README.md and docs/*.md and report drift.

Every measured figure the user docs quote (a time, a speed, a ratio, a memory size, an accuracy) has
an entry in the registry, tools/doc_figures.py: the doc, the quoted text around the figure (the
figure itself in [[double brackets]]), the command that produces it, a regular expression that
pulls the figure from that command's output, and whether it is

* ``exact``: deterministic (a simulated or Eq. 1 time, a plan's memory peak, bytes moved, an
  accuracy with a fixed seed): it must equal the measurement rounded to the digits the doc prints
  (``35 GB`` accepts 34.5-35.5; ``2.91 GB`` accepts 2.905-2.915), or lie within an explicit
  relative tolerance;
* ``timing``: machine-dependent (seconds, images/s, speedups): reported with its relative drift and
  a loose tolerance, never a failure (a busy or a faster machine moves it).

Each command runs once however many figures it feeds.  Usage::

    python tools/check_docs.py              # every figure: runs every command (the slow benchmarks too)
    python tools/check_docs.py --quick      # deterministic figures of cheap commands only (about a minute)
    python tools/check_docs.py --only vgg16 # figures whose doc, quote or command matches the pattern
    python tools/check_docs.py --list       # the registry, run nothing
    make check-docs                         # --quick

Exit status: 1 when a deterministic figure drifted or its command failed, 2 when a quoted text is
no longer in its doc (edit the registry with the doc), 0 otherwise.  The package must be importable
(built in place: ``python setup.py build_ext --inplace``).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from doc_figures import COMMANDS, FIGURES, Command, Figure  # noqa: E402

_MARK = re.compile(r"\[\[(.*?)\]\]")
_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^\s*({_NUMBER})\s*[%x]?\s*(?:-|to|–|\.\.)\s*({_NUMBER})\s*$")   # "1.2-3", "96.9% to 99.1", "-2.3..+0.6"


# ----- the doc side: where a quote is, and the figure it marks ------------------------------------

def plain_quote(figure: Figure) -> str:
    """The quote as the doc has it: the [[...]] marks removed."""
    return _MARK.sub(lambda m: m.group(1), figure.quote)


def marked_text(figure: Figure) -> str:
    found = _MARK.findall(figure.quote)
    if len(found) != 1:
        raise ValueError(f"{figure.doc}: quote {figure.quote!r} must mark exactly one figure with [[...]]")
    return found[0]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _decimals(text: str) -> int:
    """Digits after the point ("2.91": 2; "5.12e-06": 8; "1,359": 0)."""
    mantissa, _, exponent = text.strip().lower().partition("e")
    digits = len(mantissa.split(".", 1)[1]) if "." in mantissa else 0
    return digits - int(exponent or 0)


def doc_value(figure: Figure) -> tuple[float, float]:
    """The marked figure as (low, high): equal for a single number, the ends of a range "a-b"."""
    text = marked_text(figure)
    m = _RANGE.match(text)
    if m:
        return _number(m.group(1)), _number(m.group(2))
    if not re.fullmatch(rf"\s*{_NUMBER}\s*", text):
        raise ValueError(f"{figure.doc}: marked figure {text!r} is not a number or a range a-b")
    v = _number(text)
    return v, v


def _squeeze(text: str) -> tuple[str, list[int]]:
    """text with every run of whitespace made one space, and for each of its characters the line (1-based)."""
    out, lines, line, space = [], [], 1, False
    for ch in text:
        if ch.isspace():
            if not space and out:
                out.append(" ")
                lines.append(line)
            space = True
            if ch == "\n":
                line += 1
            continue
        space = False
        out.append(ch)
        lines.append(line)
    return "".join(out), lines


_DOC_CACHE: dict[str, tuple[str, list[int]]] = {}


def find_quote(figure: Figure, root: str = ROOT) -> int | None:
    """The line of the doc where the quote starts (whitespace and line breaks ignored), None when absent."""
    if figure.doc not in _DOC_CACHE:
        with open(os.path.join(root, figure.doc), encoding="utf-8") as f:
            _DOC_CACHE[figure.doc] = _squeeze(f.read())
    text, lines = _DOC_CACHE[figure.doc]
    quote, _ = _squeeze(plain_quote(figure))
    at = text.find(quote.strip())
    return None if at < 0 else lines[at]


# ----- the command side: running, extracting, comparing -------------------------------------------

@dataclass
class Outcome:
    figure: Figure
    line: int | None
    measured: "float | tuple[float, float] | None" = None
    drift: float | None = None          # relative: (measured - nearest doc value) / nearest doc value
    ok: bool = False
    problem: str = ""                   # why there is no measurement (command failed, pattern not found)


def command_argv(command: Command) -> list[str]:
    return [sys.executable if a == "{python}" else a for a in command.argv]


def describe(command: Command, width: int = 110) -> str:
    """The command as one short line (a python -c script by its first line)."""
    text = " ".join(("python" if a == "{python}" else a).replace("\n", "; ") for a in command.argv)
    return text if len(text) <= width else text[: width - 3] + "..."


def _python_path() -> list[str]:
    """PYTHONPATH for the commands: this checkout's python/ when its C core is built in place (else the
    installed package), then whatever PYTHONPATH already holds."""
    here = os.path.join(ROOT, "python")
    package = os.path.join(here, "shardwise")
    built = os.path.isdir(package) and any(n.startswith("_core") and n.endswith((".so", ".pyd"))
                                           for n in os.listdir(package))
    return ([here] if built else []) + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def run_command(command: Command) -> tuple[str, str]:
    """(output, problem): stdout and stderr together, and "" or why the command failed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(_python_path())}
    kept = {}   # the files the command rewrites (a benchmark's results file): put back as they were
    for path in command.rewrites:
        with open(os.path.join(ROOT, path), "rb") as f:
            kept[path] = f.read()
    try:
        done = subprocess.run(command_argv(command), cwd=ROOT, capture_output=True, text=True,
                              timeout=command.timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return "", f"timed out after {command.timeout_s} s"
    finally:
        for path, content in kept.items():
            with open(os.path.join(ROOT, path), "wb") as f:
                f.write(content)
    output = done.stdout + "\n" + done.stderr
    if done.returncode != command.status:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        return output, f"exit status {done.returncode} (expected {command.status}): {tail}"
    return output, ""


Measured = "float | tuple[float, float]"


def extract(figure: Figure, output: str) -> Measured:
    """The figure in the command's output, in the doc's unit: the regex's group (figure.group) or the function's
    value (a number, or (low, high) for a range), times figure.scale."""
    if callable(figure.extract):
        value = figure.extract(output)
    else:
        m = re.search(figure.extract, output, re.MULTILINE)
        if not m:
            raise LookupError(f"pattern {figure.extract!r} not found in the output")
        g = figure.group
        value = (_number(m.group(g[0])), _number(m.group(g[1]))) if isinstance(g, tuple) else _number(m.group(g))
    if isinstance(value, tuple):
        return float(value[0]) * figure.scale, float(value[1]) * figure.scale
    return float(value) * figure.scale


def _precision(figure: Figure) -> int:
    """Digits after the point the doc prints (the finer end of a range)."""
    text = marked_text(figure)
    m = _RANGE.match(text)
    return max(_decimals(m.group(1)), _decimals(m.group(2))) if m else _decimals(text)


def _drift(value: float, low: float, high: float) -> float:
    """Relative distance of value from [low, high] (0 inside)."""
    nearest = low if value < low else high if value > high else value
    if nearest == value:
        return 0.0
    return (value - nearest) / abs(nearest) if nearest else float("inf")


def compare(figure: Figure, measured: Measured) -> tuple[float, bool]:
    """(relative drift, within tolerance) of a measurement against the doc's figure.

    One measured value against a doc range: its distance from the range.  A measured range against
    a doc range: each end against its own end, the larger drift.  Exact figures without a tolerance:
    equal at the doc's precision (each end rounded to the digits the doc prints)."""
    low, high = doc_value(figure)
    if isinstance(measured, tuple):
        pairs = [(measured[0], low), (measured[1], high)]
        drift = max((_drift(m, d, d) for m, d in pairs), key=abs)
    else:
        pairs = [(measured, None)]
        drift = _drift(measured, low, high)
    if figure.tolerance is not None:
        return drift, abs(drift) <= figure.tolerance
    if figure.kind == "timing":
        raise ValueError(f"{figure.doc}: timing figure {figure.quote!r} needs a tolerance")
    half = 0.5 * 10 ** -_precision(figure) * (1 + 1e-9)
    ok = all((low - half <= m <= high + half) if d is None else abs(m - d) <= half for m, d in pairs)
    return drift, ok


def evaluate(figures: Sequence[Figure], outputs: dict[str, tuple[str, str]], root: str = ROOT) -> list[Outcome]:
    """One outcome per figure from the commands' outputs ({command name: (output, problem)})."""
    outcomes = []
    for figure in figures:
        out = Outcome(figure, find_quote(figure, root))
        output, problem = outputs.get(figure.command, ("", "not run"))
        if problem:
            out.problem = problem
        else:
            try:
                out.measured = extract(figure, output)
                out.drift, out.ok = compare(figure, out.measured)
            except Exception as e:   # a pattern that no longer matches, an extractor that breaks on new output
                out.problem = f"{type(e).__name__}: {e}"
        outcomes.append(out)
    return outcomes


# ----- the report ---------------------------------------------------------------------------------

def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, tuple):
        return f"{v[0]:.4g}..{v[1]:.4g}"
    return f"{v:.6g}"


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def verdict(o: Outcome) -> str:
    """ok; DRIFT / NO RUN (a deterministic figure: a failure); drift / no run (a timing: reported); MISSING."""
    if o.line is None:
        return "MISSING"
    if o.problem:
        return "NO RUN" if o.figure.kind == "exact" else "no run"
    if o.ok:
        return "ok"
    return "DRIFT" if o.figure.kind == "exact" else "drift"


def report(outcomes: Sequence[Outcome], stream=sys.stdout) -> int:
    """Print the drift table; return the exit status: 2 when a quote is gone from its doc, else 1 when a
    deterministic figure drifted or could not be measured, else 0."""
    print(f"{'':9} {'where':28} {'kind':6} {'doc':>12} {'measured':>12} {'drift':>8}  quote", file=stream)
    verdicts = [verdict(o) for o in outcomes]
    for o, v in zip(outcomes, verdicts):
        f = o.figure
        drift = "-" if o.drift is None else f"{100 * o.drift:+.1f}%"
        print(f"{v:9} {f.doc + ':' + str(o.line or '?'):28} {f.kind:6} {marked_text(f):>12} {_fmt(o.measured):>12} "
              f"{drift:>8}  {_short(plain_quote(f), 70)}", file=stream)
        if o.line is None:
            print(f"{'':9}   the quote is no longer in {f.doc}: update the entry in tools/doc_figures.py", file=stream)
        if o.problem:
            print(f"{'':9}   {f.command}: {o.problem}", file=stream)
    n = {v: verdicts.count(v) for v in ("ok", "DRIFT", "NO RUN", "drift", "no run", "MISSING")}
    print(f"\n{len(outcomes)} figures: {n['ok']} ok, {n['DRIFT']} deterministic drifted, {n['NO RUN']} deterministic "
          f"not measured, {n['drift']} timings outside their tolerance and {n['no run']} not measured (neither a "
          f"failure), {n['MISSING']} quotes missing from their doc", file=stream)
    if n["MISSING"]:
        return 2
    return 1 if n["DRIFT"] or n["NO RUN"] else 0


def select(figures: Sequence[Figure], only: str | None, quick: bool) -> list[Figure]:
    chosen = []
    for f in figures:
        if quick and not (f.kind == "exact" and COMMANDS[f.command].cheap):
            continue
        if only and not re.search(only, " ".join([f.doc, plain_quote(f), f.command]), re.IGNORECASE):
            continue
        chosen.append(f)
    return chosen


def check_registry(figures: Sequence[Figure] = FIGURES) -> list[str]:
    """Problems with the registry itself: unknown commands, bad marks, timings without a tolerance."""
    problems = []
    for f in figures:
        if f.command not in COMMANDS:
            problems.append(f"{f.doc}: {f.quote!r}: unknown command {f.command!r}")
        if f.kind not in ("exact", "timing"):
            problems.append(f"{f.doc}: {f.quote!r}: kind must be exact or timing, not {f.kind!r}")
        if f.kind == "timing" and f.tolerance is None:
            problems.append(f"{f.doc}: {f.quote!r}: a timing needs a tolerance")
        try:
            doc_value(f)
        except ValueError as e:
            problems.append(str(e))
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", metavar="PATTERN", help="figures whose doc, quote or command name matches (regex)")
    ap.add_argument("--quick", action="store_true", help="deterministic figures of cheap commands only")
    ap.add_argument("--list", action="store_true", help="print the registry and run nothing")
    args = ap.parse_args(argv)

    problems = check_registry()
    if problems:
        print("the registry (tools/doc_figures.py) has problems:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    figures = select(FIGURES, args.only, args.quick)
    if not figures:
        print("no figure matches", file=sys.stderr)
        return 2
    if args.list:
        for f in figures:
            line = find_quote(f)
            c = COMMANDS[f.command]
            print(f"{f.doc}:{line if line else '? (quote missing)'}  [{f.kind}]  {_short(plain_quote(f), 90)}\n"
                  f"    figure {marked_text(f)}  <- {describe(c)}"
                  f"{'' if c.cheap else '  (slow)'}")
        return 0
    outputs: dict[str, tuple[str, str]] = {}
    for name in dict.fromkeys(f.command for f in figures):   # one run per command, in registry order
        c = COMMANDS[name]
        print(f"running {name}: {describe(c)}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        outputs[name] = run_command(c)
        print(f"  {time.perf_counter() - t0:.1f} s{'; ' + outputs[name][1] if outputs[name][1] else ''}",
              file=sys.stderr, flush=True)
    return report(evaluate(figures, outputs))


if __name__ == "__main__":
    sys.exit(main())
