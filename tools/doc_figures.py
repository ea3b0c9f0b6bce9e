"""doc_figures.py -- the registry of measured figures that README.md and docs/*.md quote (tools/check_docs.py).

One entry per figure: the doc, the quoted text around it with the figure in [[double brackets]]
(the doc must contain the quote, line breaks aside: tests/tools/test_check_docs.py fails when a doc
edit leaves the registry behind), the command that measures it (COMMANDS, run once however many
figures it feeds), how to pull it from the command's output (a regex whose first group is the
number, or a function of the output), and its kind:

* ``exact``: deterministic (Eq. 1 or simulated times with the roofline costs, a plan's memory,
  bytes moved, an accuracy with a fixed seed): equal to the measurement at the doc's precision;
* ``timing``: depends on the machine and its load: a relative ``tolerance``, reported, never a failure.

A figure marked as a range "a-b" is compared with a measured range (a function returning (low,
high)) end by end, or with one measured value, which then should lie inside it.

Not here, on purpose: specifications and hardware data (a preset's TFLOP/s, a data sheet's
bandwidth), bounds the code promises and the tests check ("within 1e-4"), worked examples the tests
compute (docs/cost-model.md's), and figures of the papers themselves.

Adding a figure: quote enough words that the quote is unique and survives rewording elsewhere;
prefer a cheap command; run ``python tools/check_docs.py --only "<a word of the quote>"``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Union

Extract = Union[str, Callable[[str], "float | tuple[float, float]"]]


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]          # "{python}" is the running interpreter; run from the repository root
    cheap: bool                    # part of --quick (about 20 s at most on a 2-core machine)
    timeout_s: int = 600


@dataclass(frozen=True)
class Figure:
    doc: str                       # relative to the repository root
    quote: str                     # the doc's text, the figure in [[...]]
    command: str                   # a key of COMMANDS
    extract: Extract               # regex (group 1, commas allowed) or function of the whole output
    kind: str = "exact"            # "exact" or "timing"
    tolerance: float | None = None  # relative; exact figures without one: the doc's rounding
    scale: float = 1.0             # measured x scale = the doc's unit (ms -> s: 1e-3)


PY = "{python}"

COMMANDS: dict[str, Command] = {
    "plan vgg16 4x4": Command((PY, "-m", "shardwise", "plan", "--model", "vgg16", "--devices", "4x4"), cheap=True),
    "train lenet5 4 search": Command((PY, "-m", "shardwise", "train", "--model", "lenet5", "--devices", "4",
                                      "--plan", "search"), cheap=True),
    "train lenet5 seeds 1-5": Command(("bash", "-c", "for s in 1 2 3 4 5; do \"$0\" -m shardwise train --model lenet5 "
                                       "--devices 4 --plan search --quiet --seed $s; done", PY), cheap=False, timeout_s=900),
    "paper_tables": Command((PY, "benchmarks/paper_tables.py"), cheap=True, timeout_s=300),
    "train_throughput": Command((PY, "benchmarks/train_throughput.py"), cheap=False, timeout_s=1800),
    "simulate_speed": Command((PY, "benchmarks/simulate_speed.py"), cheap=False, timeout_s=900),
    "simulate_calibration": Command((PY, "benchmarks/simulate_calibration.py", "--trials", "3",
                                     "--profile-repeats", "3", "--steps", "8"), cheap=False, timeout_s=3600),
    "search_space seeds 0 1": Command(("bash", "-c", "\"$0\" benchmarks/search_space.py --seed 0 && "
                                       "\"$0\" benchmarks/search_space.py --seed 1", PY), cheap=False, timeout_s=1800),
    "search_time 64 1024": Command((PY, "benchmarks/search_time.py", "--models", "resnet50,inception_v3",
                                    "--devices", "64,1024"), cheap=False, timeout_s=900),
}


# ----- extraction helpers: parse the benchmarks' tables -------------------------------------------

def _rows(output: str, pattern: str) -> list[re.Match]:
    """The lines of the first table whose line matches pattern (a run prints one table per part)."""
    return [m for m in re.finditer(pattern, output, re.MULTILINE)]


def _span(values) -> tuple[float, float]:
    values = list(values)
    if not values:
        raise LookupError("no row of the table matched")
    return min(values), max(values)


_THROUGHPUT = (r"^(?P<model>lenet5|alexnet_small|resnet18_small)\s+(?P<plan>data|searched)\s+(?P<w>\d+)\s+"
               r"(?P<ips>[\d.]+)\s+(?P<vs1>[\d.]+)x\s+(?P<gf>[\d.]+)\s+(?P<peak>\d+)%\s+(?P<rt>[\d.]+)%"
               r"(?:\s+(?P<torch>[\d.]+)\s+(?P<vst>[\d.]+)x)?")


def throughput_two_workers(out: str) -> tuple[float, float]:
    """Two data-parallel workers against one: the span over the models."""
    return _span(float(m["vs1"]) for m in _rows(out, _THROUGHPUT) if m["plan"] == "data" and m["w"] == "2")


def throughput_vs_torch(out: str) -> tuple[float, float]:
    """One worker against PyTorch with one thread: the span over the models."""
    return _span(float(m["vst"]) for m in _rows(out, _THROUGHPUT) if m["w"] == "1" and m["vst"])


def runtime_share(out: str) -> tuple[float, float]:
    """The runtime's own time in a step, data-parallel rows: the span."""
    return _span(float(m["rt"]) for m in _rows(out, _THROUGHPUT) if m["plan"] == "data")


def calibration_worst(out: str) -> float:
    """The largest |error| of the simulator against the runtime over every row."""
    rows = _rows(out, r"^(?:lenet5|alexnet_small|resnet18_small)\s+\d+\s+(?:data|searched)\s+[\d.]+\s+[\d.]+\s+([-+][\d.]+)%")
    return _span(abs(float(m[1])) for m in rows)[1]


def _space(out: str, space: str) -> list[tuple[int, float]]:
    """(machines beaten, largest gap %) of each model and seed for one search space."""
    rows = _rows(out, rf"^\S+\s+{re.escape(space)}\s+(\d+) of \d+\s+(-|[\d.]+%)")
    return [(int(m[1]), 0.0 if m[2] == "-" else float(m[2].rstrip("%"))) for m in rows]


def plan_memory_total(out: str) -> float:
    """The sum of every device's memory plan in the plan command's memory line (GB)."""
    line = re.search(r"^memory .*$", out, re.MULTILINE)
    if not line:
        raise LookupError("no memory line")
    return sum(float(v) for v in re.findall(r"\d+: ([\d.]+)/", line[0]))


def accuracies(out: str) -> tuple[float, float]:
    return _span(float(v) for v in re.findall(r"test accuracy ([\d.]+)%", out))


def _search_time(model: str, devices: int, column: int) -> str:
    """Regex for search_time.py's row; after "exact yes": total ms (objective eq1), sim-obj ms, gain, peak MB.
    column 0 = total ms, 1 = sim-obj ms, 2 = peak MB."""
    after_yes = [r"([\d.]+)\s+[\d.]+\s+[\d.]+\s+\d+", r"[\d.]+\s+([\d.]+)\s+[\d.]+\s+\d+",
                 r"[\d.]+\s+[\d.]+\s+[\d.]+\s+(\d+)"][column]
    return rf"^{model}\s+{devices}\s.*?\byes\s+" + after_yes


# ----- the figures ----------------------------------------------------------------------------------

R = "README.md"
PLAN = "plan vgg16 4x4"
SIM = r"^simulated: searched plan "

FIGURES: list[Figure] = [
    # README, the quick start's plan of VGG-16 on 4 x 4 P100s (Eq. 1, the simulator, the memory plan)
    Figure(R, "on VGG-16: [[488]] ms against 598 ms for OWT", PLAN, r"^estimated iteration: ([\d.]+) ms"),
    Figure(R, "on VGG-16: 488 ms against [[598]] ms for OWT", PLAN, r"^owt\s+([\d.]+)"),
    Figure(R, "598 ms for OWT and [[1552]] ms for data parallelism", PLAN, r"^data\s+([\d.]+)"),
    Figure(R, "and [[8.3]]x fewer bytes than data parallelism", PLAN, r"moves ([\d.]+)x fewer bytes"),
    Figure(R, "([[431]] ms for the plan", PLAN, SIM + r"([\d.]+) ms"),
    Figure(R, "[[434]] ms for the Eq. 1 optimum", PLAN, r"eq1 optimum ([\d.]+) ms"),
    Figure(R, "[[493]] ms for OWT, 1359 ms for data parallelism)", PLAN, SIM + r".*?owt ([\d.]+) ms"),
    Figure(R, "493 ms for OWT, [[1359]] ms for data parallelism)", PLAN, SIM + r".*?data ([\d.]+) ms"),
    Figure(R, "(at most [[2.91]] GB of a P100's 16 GB", PLAN, r"peak ([\d.]+) GB"),
    Figure(R, "the 16 devices need [[35]] GB together", PLAN, plan_memory_total),
    # README, training LeNet-5 on the digits (the runtime's numbers do not depend on thread timing)
    Figure(R, "test accuracy ([[97.33]]% with the default `--seed 0`", "train lenet5 4 search",
           r"test accuracy ([\d.]+)%"),
    Figure(R, "[[96.9% to 99.1]]% with seeds 1-5", "train lenet5 seeds 1-5", accuracies),
    # README, the status paragraph: throughput of the CPU workers (benchmarks/results/train_throughput.txt)
    Figure(R, "two data-parallel workers [[1.89-1.92]]x one worker", "train_throughput", throughput_two_workers,
           kind="timing", tolerance=0.1),
    Figure(R, "one worker at [[1.14-1.67]]x PyTorch's CPU throughput", "train_throughput", throughput_vs_torch,
           kind="timing", tolerance=0.3),
    Figure(R, "the runtime's own time [[0.1-1.8]]% of a step", "train_throughput", runtime_share,
           kind="timing", tolerance=1.0),
    Figure(R, "one iteration of Inception-v3 on 16 devices in [[0.17-0.32]] s", "simulate_speed",
           r"^inception_v3\s+16\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", kind="timing", tolerance=1.0, scale=1e-3),
    Figure(R, "against the native runtime within [[7.4]]% for LeNet-5", "simulate_calibration", calibration_worst,
           kind="timing", tolerance=1.0),
    # README, the search space on random heterogeneous machines (seeded: deterministic)
    Figure(R, "such plans beat the search on [[0-1]] machines per model", "search_space seeds 0 1",
           lambda out: _span(n for n, _ in _space(out, "blocks + structure"))),
    Figure(R, "machines per model, by at most [[2.7]]%", "search_space seeds 0 1",
           lambda out: max(g for _, g in _space(out, "blocks + structure"))),
    Figure(R, "With aligned blocks alone they beat it on [[13-36]] machines", "search_space seeds 0 1",
           lambda out: _span(n for n, _ in _space(out, "aligned blocks") if n)),
    Figure(R, "on 13-36 machines, by up to [[46]]%", "search_space seeds 0 1",
           lambda out: max(g for _, g in _space(out, "aligned blocks"))),
    # README, search times on 64 and 1,024 V100s (benchmarks/results/search_time.txt)
    Figure(R, "ResNet-50 on 64 V100s (4 nodes x 16) in about [[0.21]] s", "search_time 64 1024",
           _search_time("resnet50", 64, 0), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "on 1,024 (64 x 16) in about [[2.8]] s and 0.8 GB", "search_time 64 1024",
           _search_time("resnet50", 1024, 0), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "on 1,024 (64 x 16) in about 2.8 s and [[0.8]] GB", "search_time 64 1024",
           _search_time("resnet50", 1024, 2), kind="timing", tolerance=0.25, scale=1e-3),
    Figure(R, "Inception-v3 on 64 in [[0.24]] s", "search_time 64 1024",
           _search_time("inception_v3", 64, 0), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "on 1,024 in about [[3.9]] s with `objective=\"eq1\"`", "search_time 64 1024",
           _search_time("inception_v3", 1024, 0), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "[[0.52]] s and 0.73 s on 64 devices", "search_time 64 1024",
           _search_time("resnet50", 64, 1), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "0.52 s and [[0.73]] s on 64 devices", "search_time 64 1024",
           _search_time("inception_v3", 64, 1), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "[[2.6]] s and 3.8 s on 1,024", "search_time 64 1024",
           _search_time("resnet50", 1024, 1), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "2.6 s and [[3.8]] s on 1,024", "search_time 64 1024",
           _search_time("inception_v3", 1024, 1), kind="timing", tolerance=0.5, scale=1e-3),
]
