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

import itertools
import re
from dataclasses import dataclass
from typing import Callable, Union

Extract = Union[str, Callable[[str], "float | tuple[float, float]"]]


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]          # "{python}" is the running interpreter; run from the repository root
    cheap: bool                    # part of --quick (about 20 s at most on a 2-core machine)
    timeout_s: int = 600
    status: int = 0                # its exit status when it works (2: a command that reports an error)
    rewrites: tuple[str, ...] = ()  # files it writes (a benchmark's results): check_docs puts them back afterwards


@dataclass(frozen=True)
class Figure:
    doc: str                       # relative to the repository root
    quote: str                     # the doc's text, the figure in [[...]]
    command: str                   # a key of COMMANDS
    extract: Extract               # regex (group 1, commas allowed) or function of the whole output
    kind: str = "exact"            # "exact" or "timing"
    tolerance: float | None = None  # relative; exact figures without one: the doc's rounding
    scale: float = 1.0             # measured x scale = the doc's unit (ms -> s: 1e-3)
    group: int | tuple[int, int] = 1   # the regex's group; two groups: a measured range (low, high)


def figures(doc: str, quote: str, command: str, pattern: str, groups: tuple[int, ...] | None = None,
            **kw) -> list[Figure]:
    """One Figure per [[mark]] of quote (a table row, a list "a / b / c"), the i-th taking the regex's
    group groups[i] (by default i + 1): the row's figures and the output's in one line each."""
    marks = list(re.finditer(r"\[\[(.*?)\]\]", quote))
    groups = groups or tuple(range(1, len(marks) + 1))
    if len(groups) != len(marks):
        raise ValueError(f"{quote!r}: {len(marks)} marks, {len(groups)} groups")
    return [Figure(doc, _keep_mark(quote, i), command, pattern, group=group, **kw) for i, group in enumerate(groups)]


def _keep_mark(quote: str, keep: int) -> str:
    """quote with only its keep-th [[mark]] left (the others unmarked)."""
    seen = itertools.count()
    return re.sub(r"\[\[(.*?)\]\]", lambda m: m.group(0) if next(seen) == keep else m.group(1), quote)


PY = "{python}"


def cli(*args: str, **kw) -> Command:
    """python -m shardwise ARGS."""
    return Command((PY, "-m", "shardwise", *args), **kw)


def bench(script: str, *args: str, **kw) -> Command:
    """python benchmarks/SCRIPT.py ARGS."""
    return Command((PY, f"benchmarks/{script}.py", *args), **kw)


def measure(name: str, **kw) -> Command:
    """python tools/doc_measures.py NAME: a few lines of the API for figures no benchmark prints."""
    return Command((PY, "tools/doc_measures.py", name), **kw)


def results(script: str) -> tuple[str, ...]:
    return (f"benchmarks/results/{script}.txt",)


COMMANDS: dict[str, Command] = {
    # the command line: seconds each, deterministic
    "plan vgg16 4x4": cli("plan", "--model", "vgg16", "--devices", "4x4", cheap=True),
    "plan vgg16 4x4 eq1": cli("plan", "--model", "vgg16", "--devices", "4x4", "--objective", "eq1", cheap=True),
    "plan alexnet 16": cli("plan", "--model", "alexnet", "--devices", "16", cheap=True),
    "plan lenet5 2 json": cli("plan", "--model", "lenet5", "--devices", "2", "--json", "--quiet", cheap=True),
    "plan resnet152 swap 8GB": cli("plan", "--model", "resnet152", "--batch", "32", "--devices", "1", "--device-type",
                                   "P100", "--memory-budget", "8GB", cheap=True),
    "plan inception_v3 4 K80": cli("plan", "--model", "inception_v3", "--devices", "4", "--device-type", "K80",
                                   "--quiet", cheap=True, status=2),        # no plan fits: the message is the figure
    "train lenet5 4 search": cli("train", "--model", "lenet5", "--devices", "4", "--plan", "search", cheap=True),
    "train lenet5 seeds 1-5": Command(("bash", "-c", "for s in 1 2 3 4 5; do \"$0\" -m shardwise train --model lenet5 "
                                       "--devices 4 --plan search --quiet --seed $s; done", PY), cheap=False, timeout_s=900),
    "example train_digits": Command((PY, "examples/train_digits.py"), cheap=True),
    # tools/doc_measures.py
    "llama sizes": measure("llama-sizes", cheap=True),
    "alexnet reduction splits": measure("reduction-splits", cheap=True),
    "resnet50 arenas fifo vs critical_path": measure("resnet50-arenas", cheap=True),
    "memory stall rows": measure("swap-stalls", cheap=False, timeout_s=900),
    "llama-13b no fit": measure("llama13b-no-fit", cheap=False, timeout_s=600),
    "capped marginals": measure("capped-marginals", cheap=False, timeout_s=900),
    "llama memory search": measure("llama-memory-search", cheap=False, timeout_s=1800),
    "populate ahead": measure("populate-ahead", cheap=False, timeout_s=900),
    "footprint gap": measure("footprint-gap", cheap=True, timeout_s=300),
    "fused rings": measure("fused-rings", cheap=True, timeout_s=300),
    "kept memory plan": measure("kept-memory-plan", cheap=False, timeout_s=300),
    "tp recompute": measure("tp-recompute", cheap=True, timeout_s=300),
    "gpt2 recompute": measure("gpt2-recompute", cheap=True, timeout_s=300),
    "recompute greedy 64": measure("recompute-greedy-64", cheap=True, timeout_s=300),
    "llama 1024 recompute": measure("llama-1024-recompute", cheap=False, timeout_s=2400),
    "example train_digits seeds 0-11": measure("digits-seeds", cheap=False, timeout_s=1200),
    # benchmarks whose figures are deterministic (Eq. 1, the simulator with the roofline costs, memory plans)
    "paper_tables": bench("paper_tables", cheap=True, timeout_s=300),
    "gpt_plans": bench("gpt_plans", cheap=True, timeout_s=300),
    "zero_state": bench("zero_state", cheap=True, timeout_s=300),
    "schedule simulated": bench("schedule", "--no-cpu", cheap=True, timeout_s=300, rewrites=results("schedule")),
    "memory_plan": bench("memory_plan", cheap=False, timeout_s=600),
    "memory_search": bench("memory_search", cheap=False, timeout_s=900, rewrites=results("memory_search")),
    "tofu": bench("tofu", cheap=False, timeout_s=900, rewrites=results("tofu")),
    "search_space seeds 0 1": Command(("bash", "-c", "\"$0\" benchmarks/search_space.py --seed 0 && "
                                       "\"$0\" benchmarks/search_space.py --seed 1", PY), cheap=False, timeout_s=1800),
    # benchmarks that time things (minutes; the figures are timings)
    "train_throughput": bench("train_throughput", cheap=False, timeout_s=1800),
    # the same with every library held to AVX2 (what a CPU without AVX-512 runs)
    "train_throughput avx2": Command(("env", "OPENBLAS_CORETYPE=Haswell", "ATEN_CPU_CAPABILITY=avx2",
                                      "ONEDNN_MAX_CPU_ISA=AVX2", PY, "benchmarks/train_throughput.py", "--isa", "avx2"),
                                     cheap=False, timeout_s=1800),
    "step_breakdown": bench("step_breakdown", cheap=False, timeout_s=900),
    "simulate_speed": bench("simulate_speed", cheap=False, timeout_s=900),
    "simulate_calibration": bench("simulate_calibration", "--trials", "3", "--profile-repeats", "3", "--steps", "8",
                                  cheap=False, timeout_s=3600),
    "simulate_ranks mpiexec 2": Command(("bash", "-c", "exec \"$(dirname \"$0\")/mpiexec\" -n 2 \"$0\" "
                                         "benchmarks/simulate_ranks.py", PY), cheap=False, timeout_s=900),
    "search_time first": bench("search_time", "--models", "inception_v3", "--devices", "16", "--first", "10",
                               cheap=False, timeout_s=300),
    "search_time 64 1024": bench("search_time", "--models", "resnet50,inception_v3", "--devices", "64,1024",
                                 cheap=False, timeout_s=900),
    "schedule cpu rows": bench("schedule", "--cpu-only", cheap=False, timeout_s=900),
    "schedule_cpu back to back": bench("schedule_cpu", "--back-to-back", cheap=False, timeout_s=1200,
                                       rewrites=results("schedule_cpu_back_to_back")),
    "gpt_train": bench("gpt_train", cheap=False, timeout_s=900),
    "import": bench("import", "--parts", "import", cheap=False, timeout_s=900),
}


# ----- extraction helpers: parse the benchmarks' tables -------------------------------------------

def _rows(output: str, pattern: str) -> list[re.Match]:
    """The lines of the output that match pattern (one table: the command prints one run)."""
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


def _throughput_vs_torch_of(model: str) -> Callable[[str], float]:
    """One worker against PyTorch with one thread: one model's ratio."""
    return lambda out: next(float(m["vst"]) for m in _rows(out, _THROUGHPUT) if m["w"] == "1" and m["model"] == model)


def runtime_share(out: str) -> tuple[float, float]:
    """The runtime's own time in a step, data-parallel rows: the span."""
    return _span(float(m["rt"]) for m in _rows(out, _THROUGHPUT) if m["plan"] == "data")


_CALIBRATION = (r"^(?P<model>lenet5|alexnet_small|resnet18_small)\s+(?P<w>\d+)\s+(?:data|searched)\s+[\d.]+\s+[\d.]+"
                r"\s+(?P<err>[-+][\d.]+)%(?P<trials>(?:\s+[-+]\d+%)+)")


def calibration_span(model: str) -> Callable[[str], tuple[float, float]]:
    """The span of one model's errors (median simulated against median measured), every worker count."""
    return lambda out: _span(float(m["err"]) for m in _rows(out, _CALIBRATION) if m["model"] == model)


def calibration_trials(model: str, workers: str) -> Callable[[str], tuple[float, float]]:
    """The span of the single trials' errors of one model and worker count."""
    return lambda out: _span(float(t) for m in _rows(out, _CALIBRATION) if m["model"] == model and m["w"] == workers
                             for t in re.findall(r"[-+]\d+", m["trials"]))


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
    Figure(R, "[[97.1% to 99.1]]% with seeds 1-5", "train lenet5 seeds 1-5", accuracies),
    # README, the status paragraph: throughput of the CPU workers (benchmarks/results/train_throughput.txt)
    Figure(R, "two data-parallel workers [[1.56-1.92]]x one worker", "train_throughput", throughput_two_workers,
           kind="timing", tolerance=0.1),
    Figure(R, "one worker at [[1.22-2.34]]x PyTorch's CPU throughput", "train_throughput", throughput_vs_torch,
           kind="timing", tolerance=0.3),
    Figure(R, "the runtime's own time [[0.1-4.4]]% of a step", "train_throughput", runtime_share,
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
    Figure(R, "on 1,024 (64 x 16) in about [[2.8]] s and 0.3 GB", "search_time 64 1024",
           _search_time("resnet50", 1024, 0), kind="timing", tolerance=0.5, scale=1e-3),
    Figure(R, "on 1,024 (64 x 16) in about 2.8 s and [[0.3]] GB", "search_time 64 1024",
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

# ----- docs/paper-reproductions.md: python benchmarks/paper_tables.py (Eq. 1 and simulated: deterministic)

P, PT = "docs/paper-reproductions.md", "paper_tables"
_COSTS = r"\s+\d+ \|\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"      # transfer, compute, update, total


def _cost_row(section: str, config: str) -> str:
    return rf"(?s){section}.*?^{re.escape(config)}{_COSTS}"


def _bytes_row(model: str) -> str:
    """Section 4's row: data, model, owt, searched MB, data/srch, model/srch, owt/srch, min(d,m)/srch."""
    return (rf"(?s)4\. ICML 2018 Figure 8.*?^{model}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x"
            rf"\s+([\d.]+)x\s+([\d.]+)x\s+([\d.]+)x")


def _throughput_row(model: str, gpus: int) -> str:
    """Section 5's row: data, model, owt, searched under Eq. 1 (groups 1-4), simulated (5-8)."""
    return rf"^{model}\s+{gpus} \|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)"


def _scaling_row(model: str, kind: str) -> str:
    """Section 5's gains: gain@16, gain max, scaling of data, model, owt, searched (groups 1-6)."""
    return rf"^{model}\s+{kind}\s+([\d.]+)x\s+([\d.]+)x \|\s+([\d.]+)x\s+([\d.]+)x\s+([\d.]+)x\s+([\d.]+)x"


def _gain_at_16(model: str, simulated: bool) -> Callable[[str], float]:
    """searched / best other at 16 GPUs from the throughputs themselves (the table prints 2 decimals)."""
    def gain(out: str) -> float:
        m = re.search(_throughput_row(model, 16), out, re.MULTILINE)
        data, mp, owt, searched = (float(m[i + (5 if simulated else 1)]) for i in range(4))
        return searched / max(data, mp, owt)
    return gain


def _best_other_scaling(model: str, kind: str) -> Callable[[str], float]:
    def scaling(out: str) -> float:
        m = re.search(_scaling_row(model, kind), out, re.MULTILINE)
        return max(float(m[3]), float(m[4]), float(m[5]))
    return scaling


def _model_vs_searched_bytes(out: str) -> tuple[float, float]:
    return _span(float(re.search(_bytes_row(m), out, re.MULTILINE)[6]) for m in ("alexnet", "vgg16", "inception_v3"))


_K80 = r"(?s)speedups \(time ratios\).*?"
_K80_ROWS = {m: (rf"{_K80}^{m}\s+eq1\s+([\d.]+)x\s+([\d.]+)x\s+([\d.]+)x.*?\n{m}\s+sim\s+([\d.]+)x\s+([\d.]+)x\s+([\d.]+)x")
             for m in ("alexnet", "vgg16", "inception_v3")}     # owt/image, srch/image, srch/owt: eq1 1-3, sim 4-6
_K80_BYTES = {m: rf"^\s+{m}\s+data.*?image/owt\s+([\d.]+)x\s+owt/searched\s+([\d.]+)x" for m in _K80_ROWS}

T2, T3 = r"1\. DeePa Table 2", r"2\. DeePa Table 3"
FIGURES += [
    Figure(P, "(about [[12]] s on a 2-core machine; `--quick` skips the", PT, r"^# ([\d.]+) s$",
           kind="timing", tolerance=1.0),
    # 1. DeePa Table 2
    *figures(P, "| n=16 (image) | [[0]] / [[1.9]] / [[453.0]] / **[[454.9]]** |", PT, _cost_row(T2, "n=16")),
    *figures(P, "| c=16 (OWT) | [[56.6]] / [[1.7]] / [[0]] / **[[58.3]]** |", PT, _cost_row(T2, "c=16")),
    *figures(P, "| c=4 | [[14.2]] / [[6.6]] / [[0]] / **[[20.8]]** |", PT, _cost_row(T2, "c=4")),
    *figures(P, "| c=2 | [[7.1]] / [[13.3]] / [[0]] / **[[20.3]]** |", PT, _cost_row(T2, "c=2")),
    *figures(P, "| c=1 | [[3.5]] / [[26.5]] / [[0]] / **[[30.1]]** |", PT, _cost_row(T2, "c=1")),
    *figures(P, "our model gives **[[134.4]] / [[33.6]] / [[16.8]] / [[8.4]]** ms of transfer and **[[1075.1]]** ms of update",
             PT, r"with 4\.214 GB/s between K80s: n=16 [\d.]+ / ([\d.]+) .*?c=16 ([\d.]+) .*?c=4 ([\d.]+) .*?c=2 ([\d.]+)"
                 r" .*?c=1 ([\d.]+) ", groups=(2, 3, 4, 5, 1)),
    *figures(P, "our totals become [[1077.0]] / [[136.0]] / [[40.2]] / [[30.1]] / [[34.9]] ms", PT,
             r"with 4\.214 GB/s between K80s: n=16 [\d.]+ / [\d.]+ / ([\d.]+), c=16 [\d.]+ / [\d.]+ / ([\d.]+), "
             r"c=4 [\d.]+ / [\d.]+ / ([\d.]+), c=2 [\d.]+ / [\d.]+ / ([\d.]+), c=1 [\d.]+ / [\d.]+ / ([\d.]+) ms"),
    # 2. DeePa Table 3
    *figures(P, "| n=16 | [[0]] / [[61.0]] / [[85.0]] / **[[145.9]]** |", PT, _cost_row(T3, "n=16")),
    *figures(P, "| n=8 | [[38.5]] / [[121.9]] / [[39.6]] / **[[200.1]]** |", PT, _cost_row(T3, "n=8")),
    *figures(P, "| n=4 | [[38.5]] / [[243.8]] / [[17.0]] / **[[299.4]]** |", PT, _cost_row(T3, "n=4")),
    *figures(P, "| h=2 w=2 | [[75.5]] / [[243.8]] / [[17.0]] / **[[336.3]]** |", PT, _cost_row(T3, "h=2 w=2")),
    *figures(P, "| n=2 | [[38.5]] / [[487.7]] / [[5.7]] / **[[531.9]]** |", PT, _cost_row(T3, "n=2")),
    # 3. ICML 2018 Table 5
    Figure(P, "written for our graph, costs [[358.2]] ms against the searched 346.1", PT, r"^\s+paper Table 5\s+([\d.]+) ms"),
    Figure(P, "costs 358.2 ms against the searched [[346.1]] (1.03x)", PT, r"^\s+searched\s+([\d.]+) ms"),
    Figure(P, "against the searched 346.1 ([[1.03]]x)", PT, r"^\s+paper Table 5\s.*?([\d.]+)x the searched"),
    Figure(P, "(1.03x), data [[489.6]], model 1712.4", PT, r"^\s+data\s+([\d.]+) ms/iter"),
    Figure(P, "data 489.6, model [[1712.4]]", PT, r"^\s+model\s+([\d.]+) ms/iter"),
    Figure(P, "OWT costs [[346.5]] ms here", PT, r"^\s+owt\s+([\d.]+) ms/iter"),
    # 4. ICML 2018 Figure 8: bytes
    *figures(P, "| AlexNet | [[7,332]] MB | [[17,102]] MB | [[1,269]] MB | [[405]] MB | [[18.1]]x | [[3.13]]x |", PT,
             _bytes_row("alexnet"), groups=(1, 2, 3, 4, 8, 7)),
    *figures(P, "| VGG-16 | [[16,603]] MB | [[555,313]] MB | [[3,713]] MB | [[2,000]] MB | [[8.3]]x | [[1.86]]x |", PT,
             _bytes_row("vgg16"), groups=(1, 2, 3, 4, 8, 7)),
    *figures(P, "| Inception-v3 | [[2,868]] MB | [[870,951]] MB | [[2,714]] MB | [[2,231]] MB | [[1.29]]x | [[1.22]]x |",
             PT, _bytes_row("inception_v3"), groups=(1, 2, 3, 4, 8, 7)),
    Figure(P, "it moves **[[1.29-18.1]]x** less (paper:", PT,
           r"searched vs the better of data and model: ours ([\d.]+)-([\d.]+)x", group=(1, 2)),
    Figure(P, "against OWT **[[1.22-3.13]]x** less (paper: 1.2-2.5x", PT, r"searched vs OWT:\s+ours ([\d.]+)-([\d.]+)x",
           group=(1, 2)),
    Figure(P, "OWT against the better of data and model moves [[1.06-5.8]]x less", PT,
           r"OWT vs the better of data and model:\s+ours ([\d.]+)-([\d.]+)x", group=(1, 2)),
    Figure(P, "our model parallelism moves [[42-390]]x more than the searched plan", PT, _model_vs_searched_bytes),
    Figure(P, "that is [[871]] GB per step", PT, _bytes_row("inception_v3"), group=2, scale=1e-3),
    # 5. ICML 2018 Figure 7: throughput on 1-16 P100s
    Figure(P, "(AlexNet [[6,583]] vs 6,791 images/s at 4,", PT, _throughput_row("alexnet", 4), group=8),
    Figure(P, "(AlexNet 6,583 vs [[6,791]] images/s at 4,", PT, _throughput_row("alexnet", 4), group=7),
    Figure(P, "Inception-v3 [[1,262]] vs 1,319 at 8 and", PT, _throughput_row("inception_v3", 8), group=8),
    Figure(P, "Inception-v3 1,262 vs [[1,319]] at 8 and", PT, _throughput_row("inception_v3", 8), group=7),
    Figure(P, "at 8 and [[1,983]] vs 1,987 at 16", PT, _throughput_row("inception_v3", 16), group=8),
    Figure(P, "at 8 and 1,983 vs [[1,987]] at 16", PT, _throughput_row("inception_v3", 16), group=7),
    Figure(P, "at 8 AlexNet's is faster, [[9,101]] vs 8,853)", PT, _throughput_row("alexnet", 8), group=8),
    Figure(P, "at 8 AlexNet's is faster, 9,101 vs [[8,853]])", PT, _throughput_row("alexnet", 8), group=7),
    Figure(P, "ties with OWT for Inception-v3 ([[0.998]]x)", PT, _gain_at_16("inception_v3", simulated=True)),
    *figures(P, "One P100 runs AlexNet at [[2,133]] images/s under Eq. 1 ([[1,919]] simulated), VGG-16 at 99 (98)", PT,
             _throughput_row("alexnet", 1), groups=(4, 8)),
    *figures(P, "VGG-16 at [[99]] ([[98]]), Inception-v3", PT, _throughput_row("vgg16", 1), groups=(4, 8)),
    *figures(P, "Inception-v3 at [[223]] ([[216]]).", PT, _throughput_row("inception_v3", 1), groups=(4, 8)),
]
def _throughput_table() -> list[Figure]:
    """Section 5's table at 16 GPUs: per row four throughputs, the gain over the best other, the
    scaling of the searched plan and of the best other."""
    out = []
    for model, name, kind, row in (
            ("alexnet", "AlexNet", "eq1", "[[918]] | [[400]] | [[4,706]] | [[9,890]] | 2.10x | 4.6x, 2.2x"),
            ("alexnet", "AlexNet", "sim", "[[1,146]] | [[555]] | [[6,825]] | [[11,422]] | 1.67x | 6.0x, 3.6x"),
            ("vgg16", "VGG-16", "eq1", "[[330]] | [[12]] | [[856]] | [[1,053]] | 1.23x | 10.6x, 8.7x"),
            ("vgg16", "VGG-16", "sim", "[[377]] | [[19]] | [[1,039]] | [[1,180]] | 1.14x | 12.1x, 10.6x"),
            ("inception_v3", "Inception-v3", "eq1", "[[1,438]] | [[8]] | [[1,486]] | [[1,592]] | 1.07x | 7.2x, 6.7x"),
            ("inception_v3", "Inception-v3", "sim", "[[1,942]] | [[12]] | [[1,987]] | [[1,983]] | 0.998x | 9.2x, 9.2x")):
        head = f"| {name}, {'Eq. 1' if kind == 'eq1' else 'simulated'} | "
        plain = re.sub(r"\[\[(.*?)\]\]", r"\1", row)
        cells = [c.strip() for c in plain.split("|")]
        searched, other = (c.strip().rstrip("x") for c in cells[5].split(","))
        out += figures(P, head + row, PT, _throughput_row(model, 16), groups=(1, 2, 3, 4) if kind == "eq1" else (5, 6, 7, 8))
        out += [
            Figure(P, head + plain.replace(f"| {cells[4]} |", f"| [[{cells[4].rstrip('x')}]]x |"), PT,
                   _gain_at_16(model, simulated=kind == "sim")),
            Figure(P, head + plain.replace(f"| {cells[5]}", f"| [[{searched}]]x, {other}x"), PT,
                   _scaling_row(model, kind), group=6),
            Figure(P, head + plain.replace(f"| {cells[5]}", f"| {searched}x, [[{other}]]x"), PT,
                   _best_other_scaling(model, kind)),
        ]
    return out


FIGURES += _throughput_table()
FIGURES += [
    Figure(P, "simulated (6.0x / 12.1x / [[9.2]]x against 3.6x / 10.6x / 9.2x for the best other)", PT,
           _scaling_row("inception_v3", "sim"), group=6),
    Figure(P, "simulated (6.0x / 12.1x / 9.2x against [[3.6]]x / 10.6x / 9.2x for the best other)", PT,
           _best_other_scaling("alexnet", "sim")),
    Figure(P, "at 16 GPUs the searched plan is [[1.67]]x / 1.14x faster than the best other strategy", PT,
           _gain_at_16("alexnet", simulated=True)),
    Figure(P, "(AlexNet at 4: [[6,583]] vs 6,791 images/s; Inception-v3 at 8: 1,262 vs 1,319)", PT,
           _throughput_row("alexnet", 4), group=8),
    Figure(P, "(AlexNet at 4: 6,583 vs 6,791 images/s; Inception-v3 at 8: [[1,262]] vs 1,319)", PT,
           _throughput_row("inception_v3", 8), group=8),
    # 6. DeePa Figures 7 and 8 on 16 K80s
    *figures(P, "| AlexNet | [[4.81]]x | [[6.56]]x | [[8.46]]x | [[6.07]]x |", PT, _K80_ROWS["alexnet"], groups=(1, 4, 2, 5)),
    *figures(P, "| VGG-16 | [[2.21]]x | [[1.97]]x | [[2.53]]x | [[1.94]]x |", PT, _K80_ROWS["vgg16"], groups=(1, 4, 2, 5)),
    *figures(P, "| Inception-v3 | [[1.03]]x | [[1.03]]x | [[1.04]]x | [[1.01]]x |", PT, _K80_ROWS["inception_v3"],
             groups=(1, 4, 2, 5)),
    *[f for i, m in enumerate(_K80_ROWS) for f in figures(
        P, "Bytes: OWT moves " + "x / ".join(f"[[{v}]]" if j == i else v for j, v in enumerate(("5.78", "4.47", "1.06")))
        + "x less than image parallelism", PT, _K80_BYTES[m])],
    *[f for i, m in enumerate(_K80_ROWS) for f in figures(
        P, "plan " + "x / ".join(f"[[{v}]]" if j == i else v for j, v in enumerate(("3.15", "1.86", "1.22")))
        + "x less than OWT (paper: 1.2-2.7x", PT, _K80_BYTES[m], groups=(2,))],
    Figure(P, "OWT on its K80 machine, ours [[3.15]]x there)", PT, _K80_BYTES["alexnet"], group=2),
    Figure(P, "simulated too (Inception-v3 [[1.03]]x against the paper's 1.07x)", PT, _K80_ROWS["inception_v3"], group=4),
    Figure(P, "under Eq. 1 for all three (AlexNet [[1.76]]x; the paper 2.3x)", PT, _K80_ROWS["alexnet"], group=3),
    Figure(P, "(OWT's simulated gain [[6.56]]x / 1.97x against 1.4x / 1.2x", PT, _K80_ROWS["alexnet"], group=4),
    Figure(P, "(OWT's simulated gain 6.56x / [[1.97]]x against 1.4x / 1.2x", PT, _K80_ROWS["vgg16"], group=4),
    *[f for i, m in enumerate(_K80_ROWS) for f in figures(
        P, "slightly slower than OWT (" + "x / ".join(f"[[{v}]]" if j == i else v for j, v in enumerate(("0.92", "0.99", "0.99")))
        + "x)", PT, _K80_ROWS[m], groups=(6,))],
]

# paper-reproductions.md's prose repeats table figures: each repetition registered too
def _gains_at_16(kind: str) -> Callable[[str], tuple[float, float]]:
    return lambda out: _span(float(re.search(_scaling_row(m, kind), out, re.MULTILINE)[1])
                             for m in ("alexnet", "vgg16", "inception_v3"))


FIGURES += [
    Figure(P, "every other sample split, [[38.5]] ms against the paper's 39.2", PT, _cost_row(T3, "n=8"), group=1),
    Figure(P, "cheapest with all 16 (`n=16`, [[145.9]] ms;", PT, _cost_row(T3, "n=16"), group=4),
    *[f for i, cfg in enumerate(("n=16", "n=8", "n=4", "n=2")) for f in figures(
        P, "replicas other than the server (" + ", ".join(f"[[{v}]]" if j == i else v for j, v in
                                                          enumerate(("85.0", "39.6", "17.0", "5.7"))) + " at 10 GB/s)",
        PT, _cost_row(T3, cfg), groups=(3,))],
    Figure(P, "largest for AlexNet ([[2.10]]x, the paper's 2.2x)", PT, _gain_at_16("alexnet", simulated=False)),
    *[f for i, m in enumerate(("alexnet", "vgg16", "inception_v3")) for f in figures(
        P, "(ours " + " / ".join(f"[[{v}]]x" if j == i else f"{v}x" for j, v in enumerate(("4.6", "10.6", "7.2")))
        + " against the paper's", PT, _scaling_row(m, "eq1"), groups=(6,))],
    Figure(P, "([[1.23]]x and 1.07x for VGG-16 and Inception-v3 here", PT, _gain_at_16("vgg16", simulated=False)),
    Figure(P, "(1.23x and [[1.07]]x for VGG-16 and Inception-v3 here", PT, _gain_at_16("inception_v3", simulated=False)),
    Figure(P, "| holds: [[1.29-18.1]]x and 1.22-3.13x |", PT,
           r"searched vs the better of data and model: ours ([\d.]+)-([\d.]+)x", group=(1, 2)),
    Figure(P, "| holds: 1.29-18.1x and [[1.22-3.13]]x |", PT, r"searched vs OWT:\s+ours ([\d.]+)-([\d.]+)x", group=(1, 2)),
    Figure(P, "holds under Eq. 1 at every count ([[1.07-2.10]]x at 16)", PT, _gains_at_16("eq1")),
    *[f for i, m in enumerate(("alexnet", "vgg16", "inception_v3")) for f in figures(
        P, "holds under Eq. 1 (" + " / ".join(f"[[{v}]]x" if j == i else f"{v}x" for j, v in enumerate(("4.6", "10.6", "7.2")))
        + ")", PT, _scaling_row(m, "eq1"), groups=(6,))],
    *[f for i, m in enumerate(("alexnet", "vgg16", "inception_v3")) for f in figures(
        P, "and simulated (" + " / ".join(f"[[{v}]]x" if j == i else f"{v}x" for j, v in enumerate(("6.0", "12.1", "9.2")))
        + " against", PT, _scaling_row(m, "sim"), groups=(6,))],
]


# ----- docs/simulator.md ---------------------------------------------------------------------------

S = "docs/simulator.md"
_CHAIN = r"^chain of\s+{}\s+devices: simulate\s+([\d.]+) s, peak\s+(\d+) MB"
_CHAIN_BATCH = r"^chain of\s+{0}\s+devices, batch {0}: simulate\s+([\d.]+) s, peak\s+(\d+) MB"
FIGURES += [
    Figure(S, "over a chain of 4,096 devices simulates in [[1.8]] s with a 439 MB peak", "simulate_speed",
           _CHAIN.format(4096), kind="timing", tolerance=1.0),
    Figure(S, "simulates in 1.8 s with a [[439]] MB peak", "simulate_speed", _CHAIN.format(4096), group=2,
           kind="timing", tolerance=0.25),
    Figure(S, "(`benchmarks/simulate_speed.py`; 128 devices: [[0.03]] s)", "simulate_speed", _CHAIN.format(128),
           kind="timing", tolerance=2.0),
    Figure(S, "168 million (task, link) entries in all: [[8-12]] s and a 1.3 GB peak", "simulate_speed",
           _CHAIN_BATCH.format(4096), kind="timing", tolerance=0.5),
    Figure(S, "8-12 s and a [[1.3]] GB peak here", "simulate_speed", _CHAIN_BATCH.format(4096), group=2,
           kind="timing", tolerance=0.25, scale=1e-3),
    Figure(S, "H100s\n  replays [[96,856]] tasks instead of", "fused rings", r"fused: (\d+) tasks"),
    Figure(S, "tasks instead of [[2,662,230]], in", "fused rings", r"chunked: (\d+) tasks"),
    Figure(S, "in [[0.16]] s instead of 3.5 s of processor time", "fused rings", r"fused: .*simulate ([\d.]+) s",
           kind="timing", tolerance=1.0),
    Figure(S, "in 0.16 s instead of [[3.5]] s of processor time", "fused rings", r"chunked: .*simulate ([\d.]+) s",
           kind="timing", tolerance=0.5),
    Figure(S, "1,024 H100s, [[7,752,098]] tasks,", "kept memory plan", r"^(\d+) tasks"),
    Figure(S, "replays in [[1.93]] s of processor time on the kept plan", "kept memory plan",
           r"([\d.]+) s on the kept memory plan", kind="timing", tolerance=0.5),
    Figure(S, "on the kept plan, [[4.58]] s planning its memory first", "kept memory plan",
           r"replay ([\d.]+) s planning memory", kind="timing", tolerance=0.5),
    Figure(S, "2 ranks measured [[5.9-8.2]] GB/s and 18-50 us per message", "simulate_ranks mpiexec 2",
           r"rank link ([\d.]+) GB/s", kind="timing", tolerance=1.0),
    Figure(S, "2 ranks measured 5.9-8.2 GB/s and [[18-50]] us per message", "simulate_ranks mpiexec 2",
           r"rank link [\d.]+ GB/s, ([\d.]+) us per message", kind="timing", tolerance=1.0),
    Figure(S, "LeNet-5 within [[-2.3..+0.6]]%", "simulate_calibration", calibration_span("lenet5"),
           kind="timing", tolerance=3.0),
    Figure(S, "the scaled AlexNet within [[-0.1..+2.9]]%", "simulate_calibration", calibration_span("alexnet_small"),
           kind="timing", tolerance=3.0),
    Figure(S, "the scaled ResNet-18 within [[-0.1..+7.4]]% on 1, 2 and 4", "simulate_calibration",
           calibration_span("resnet18_small"), kind="timing", tolerance=3.0),
    Figure(S, "varies from trial to trial ([[+4..+12]]%)", "simulate_calibration", calibration_trials("resnet18_small", "4"),
           kind="timing", tolerance=3.0),
    Figure(S, "measured medians of [[9.7]] ms for ResNet-18 on 4 devices", "simulate_speed",
           r"^resnet18\s+4\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", kind="timing", tolerance=1.0),
    Figure(S, "and [[172]] ms for Inception-v3 on 16 on 2026-11-28", "simulate_speed",
           r"^inception_v3\s+16\s+\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", kind="timing", tolerance=1.0),
]

# ----- docs/training.md ------------------------------------------------------------------------------

TR = "docs/training.md"
FIGURES += [
    Figure(TR, "Planned arenas are [[1.32-2.69]]x smaller than the sum of all buffers", "memory_plan",
           lambda out: _span(float(v) for v in re.findall(r"^\S+\s+\d+\s+\d+\s+\S+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)x",
                                                          out, re.MULTILINE))),
    Figure(TR, "it reaches [[97.33]]% test accuracy (seed 0;", "train lenet5 4 search", r"test accuracy ([\d.]+)%"),
    Figure(TR, "(seed 0; [[97.1% to 99.1]]% for seeds 1-5)", "train lenet5 seeds 1-5", accuracies),
    Figure(TR, "| test accuracy (seed 0) | **[[98.0]]%** |", "example train_digits", r"test accuracy ([\d.]+)%"),
    Figure(TR, "| test accuracy, seeds 0-11 | [[96.9% to 99.1]]% |", "example train_digits seeds 0-11", accuracies),
    Figure(TR, "2-core machine shared at load 8-9 | [[7.7-15.5]] s |", "example train_digits seeds 0-11",
           lambda out: _span(float(v) for v in re.findall(r"epochs in ([\d.]+) s", out)), kind="timing", tolerance=1.0),
    Figure(TR, "one worker trained at\n[[1.22-2.34]]x PyTorch's throughput", "train_throughput", throughput_vs_torch,
           kind="timing", tolerance=0.3),
    Figure(TR, "two data-parallel workers at [[1.56-1.92]]x one worker", "train_throughput", throughput_two_workers,
           kind="timing", tolerance=0.1),
    Figure(TR, "(LeNet-5 [[2.34]]x, the scaled AlexNet", "train_throughput", _throughput_vs_torch_of("lenet5"),
           kind="timing", tolerance=0.5),
    Figure(TR, "the scaled AlexNet [[1.22]]x, the scaled ResNet-18", "train_throughput",
           _throughput_vs_torch_of("alexnet_small"), kind="timing", tolerance=0.3),
    Figure(TR, "the scaled ResNet-18 [[1.22]]x), and two", "train_throughput",
           _throughput_vs_torch_of("resnet18_small"), kind="timing", tolerance=0.3),
    Figure(TR, "one worker trained at [[1.20-2.41]]x.", "train_throughput avx2", throughput_vs_torch,
           kind="timing", tolerance=0.3),
]
# PyTorch's CPU time over ours, alternating steps (benchmarks/train_cpu_pairs.py), both instruction-set paths
_PAIRS_ROW = r"^{}\s+[\d.]+\s+[\d.]+\s+([\d.]+)x"
FIGURES += figures(TR, "took [[2.95]]x, [[1.21]]x and [[1.20]]x our CPU time", "train_cpu_pairs",
                   r"(?s)" + r".*".join(_PAIRS_ROW.format(m)[1:] for m in ("lenet5", "alexnet_small", "resnet18_small")),
                   kind="timing", tolerance=0.3)
FIGURES += figures(TR, "and [[2.70]]x, [[1.29]]x and [[1.31]]x with the AVX2 ones", "train_cpu_pairs avx2",
                   r"(?s)" + r".*".join(_PAIRS_ROW.format(m)[1:] for m in ("lenet5", "alexnet_small", "resnet18_small")),
                   kind="timing", tolerance=0.3)


# ----- docs/transformers.md ----------------------------------------------------------------------------

TF = "docs/transformers.md"


def _gpt_plan(section: str, devices: int, plan: str) -> str:
    """gpt_plans.py's row: Eq. 1 ms, simulated ms (group 1) of one plan in the wide or narrow section."""
    return rf"(?s)## {section} GPT.*?^\s+{devices}\s+{plan}\s+[\d.]+\s+([\d.]+)"


FIGURES += [
    Figure(TF, "loaded one; about [[200]] ms a step each)", "gpt_train", r"^\s+shardwise\s+([\d.]+) ms/step",
           kind="timing", tolerance=1.0),
    Figure(TF, "([[1.00x-1.12]]x in six runs on a quiet 2-core machine", "gpt_train",
           r"shardwise / PyTorch throughput: ([\d.]+)x", kind="timing", tolerance=0.25),
    Figure(TF, "8 key/value heads ([[5,933,109,248]] parameters: k_proj", "llama sizes", r"^gqa (\d+) parameters"),
    Figure(TF, "`kv_heads=32` is Llama-2-7B itself, [[6,738,415,616]] parameters", "llama sizes", r"^mha (\d+) parameters"),
    Figure(TF, "([[1,029]] ops for 32 layers with GQA)", "llama sizes", r"^gqa \d+ parameters (\d+) ops"),
    Figure(TF, "GPT-2 small imports in [[0.3]] s from torch", "import",
           r"^GPT-2 small \(batch 8, seq 1024\)\s+from_torch\s+([\d.]+) s", kind="timing", tolerance=1.0),
    Figure(TF, "[[0.4 to 0.8]] s from its 623 MiB ONNX file", "import",
           r"^GPT-2 small \(batch 8, seq 1024\)\s+from_onnx\s+([\d.]+) s", kind="timing", tolerance=1.0),
    Figure(TF, "from its [[623]] MiB ONNX file", "import", r"from_onnx.*?the export itself: [\d.]+ s, (\d+) MiB"),
]
def _gpt_plans_table() -> list[Figure]:
    """The table of simulated GPT plans: data parallel, Megatron layout, searched, per model and device count."""
    out = []
    for section, label, table in (
            ("wide", "wide: d_model 4096, 2,048 tokens a step", ((4, "612", "295", "222"), (8, "1115", "285", "196"))),
            ("narrow", "narrow: d_model 1024, 8,192 tokens a step", ((4, "151", "314", "114"), (8, "205", "345", "114")))):
        for i, (devices, *ms) in enumerate(table):
            head = f"| {label} | {devices} | " if i == 0 else f"| | {devices} | "
            for k, plan in enumerate(("data", "megatron", "searched")):
                cells = " | ".join(f"[[{m}]] ms" if j == k else f"{m} ms" for j, m in enumerate(ms))
                out.append(Figure(TF, head + cells + " |", "gpt_plans", _gpt_plan(section, devices, plan)))
    return out


FIGURES += _gpt_plans_table()

# ----- docs/memory.md ----------------------------------------------------------------------------------

M, SWAP = "docs/memory.md", "plan resnet152 swap 8GB"
_SWAP_ROW = r"^\s+0\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$"  # budget, peak, unswapped, offloaded, host, stall
FIGURES += [
    Figure(M, "under 8 GB: [[124]] feature maps, 4.3 GB, offloaded", SWAP, r"swap plan of '\w+': (\d+) feature maps"),
    Figure(M, "124 feature maps, [[4.3]] GB, offloaded", SWAP, _SWAP_ROW, group=4),
    Figure(M, "offloaded; [[7.7]] GB arena;", SWAP, _SWAP_ROW, group=2),
    Figure(M, "GB arena; [[547]] ms against 314 ms simulated", SWAP, r"^swap: simulated iteration ([\d.]+) ms with swapping"),
    Figure(M, "GB arena; 547 ms against [[314]] ms simulated", SWAP, r"with swapping, ([\d.]+) ms without"),
]

# ----- docs/cost-model.md ------------------------------------------------------------------------------

C = "docs/cost-model.md"
FIGURES += [
    # Inception-v3's first Eq. 1 search on 4 x 4 P100s: the median processor time of 10 fresh processes
    Figure(C, "gave medians of [[60-67]] ms of processor time", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "waited [[60.0]] and 51.9 ms on\naverage", "populate ahead", r"inception mean: off ([\d.]+) ms",
           kind="timing", tolerance=0.5),
    Figure(C, "waited 60.0 and [[51.9]] ms on\naverage", "populate ahead", r"inception mean: .* on ([\d.]+) ms",
           kind="timing", tolerance=0.5),
    Figure(C, "[[84.1]] against 48.8 ms in the first pair", "populate ahead", r"^inception off: ([\d.]+) ms",
           kind="timing", tolerance=1.0),
    Figure(C, "84.1 against [[48.8]] ms in the first pair", "populate ahead", r"^inception on: ([\d.]+) ms",
           kind="timing", tolerance=0.5),
    Figure(C, "the peak is [[77]] MB instead of 71", "populate ahead", r"^inception on: .* (\d+) MB peak",
           kind="timing", tolerance=0.2),
    Figure(C, "the peak is 77 MB instead of [[71]]", "populate ahead", r"^inception off: .* (\d+) MB peak",
           kind="timing", tolerance=0.2),
    Figure(C, "a wall-time median of [[56.2]] ms", "search_time first", r"wall time: median ([\d.]+) ms",
           kind="timing", tolerance=0.5),
    Figure(C, "was [[73.2]] ms of wall time", "search_time first", r"wall time: median ([\d.]+) ms",
           kind="timing", tolerance=0.5),
    Figure(C, "wall time (processor [[93.1]] ms; stages", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "gave wall-time\nmedians of [[44.8]] ms", "search_time first", r"wall time: median ([\d.]+) ms",
           kind="timing", tolerance=0.5),
    Figure(C, "medians of 44.8 ms (processor [[61.7]] ms; stages", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "gave wall-time\nmedians of [[37.3]], 38.6 and 41.1 ms", "search_time first", r"wall time: median ([\d.]+) ms",
           kind="timing", tolerance=0.5),
    Figure(C, "(quartiles up to 48.9 ms; processor [[57.8-62.7]] ms)", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "The benchmark then gave wall-time medians of [[40.4]] and 44.7 ms", "search_time first",
           r"wall time: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "(quartiles up to 48.6 ms;\nprocessor [[64.5-72.3]] ms)", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "the benchmark gave a median of [[30.5]] ms", "search_time first",
           r"wall time: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "(quartiles 28.5-33.6 ms; processor [[47.9]] ms)", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "then gave wall-time medians of [[36.5]] and 32.1 ms", "search_time first",
           r"wall time: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "(quartiles up to 43.1 ms; processor [[51.7-59.0]] ms)", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "gave wall-time medians of [[35.2-40.2]] ms in three\nrounds where the probe", "search_time first",
           r"wall time: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "processor time [[67.1]]\nms)", "search_time first",
           r"^inception_v3\s+16\s+first search: median ([\d.]+) ms", kind="timing", tolerance=0.5),
    Figure(C, "GPT-2 small on 1,024 H100s keeps [[404]] of its 206,667 partitions", "capped marginals",
           r"(\d+) within the cap"),
    Figure(C, "keeps 404 of its [[206,667]] partitions", "capped marginals", r"on 1024: (\d+) partitions"),
    Figure(C, "marginals take [[17]] s of processor time uncapped", "capped marginals", r"every one ([\d.]+) s",
           kind="timing", tolerance=0.5),
    Figure(C, "uncapped, [[1.5]] s capped", "capped marginals", r"capped ([\d.]+) s", kind="timing", tolerance=0.5),
    Figure(C, "the AlexNet optimum simulates at [[34.9]] ms and OWT at 32.5 ms", "plan alexnet 16",
           r"eq1 optimum ([\d.]+) ms"),
    Figure(C, "the AlexNet optimum simulates at 34.9 ms and OWT at [[32.5]] ms", "plan alexnet 16",
           r"^simulated: .*?owt ([\d.]+) ms"),
    Figure(C, "finds a plan [[3.8]]% cheaper under Eq. 1", "alexnet reduction splits", r"cheaper by ([\d.]+) %"),
    Figure(C, "with channel parallelism ([[486]] ms against 598 ms for OWT)", "plan vgg16 4x4 eq1",
           r"^estimated iteration: ([\d.]+) ms"),
    Figure(C, "with channel parallelism (486 ms against [[598]] ms for OWT)", "plan vgg16 4x4 eq1", r"^owt\s+([\d.]+)"),
]

# benchmarks/zero_state.py's 8-device rows: simulated ms, GB moved, optimizer state MB, peak GB
_ZERO_ROW = r"(?ms)^## 8 devices.*?^{}\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
_RING_ROW = _ZERO_ROW.format(r"data \(ring\)")
FIGURES += [
    Figure(C, "holds [[1,299.4]] MB of optimizer\nstate per device with `ring`", "zero_state", _RING_ROW, group=3),
    Figure(C, "and [[163.1]] MB with `zero`", "zero_state", _ZERO_ROW.format("zero"), group=3),
    Figure(C, "the largest peak falls\nfrom [[4.93]] to 3.79 GB", "zero_state", _RING_ROW, group=4),
    Figure(C, "from 4.93 to [[3.79]] GB and the simulated", "zero_state", _ZERO_ROW.format("zero"), group=4),
    Figure(C, "iteration from [[119.13]] to 115.98 ms", "zero_state", _RING_ROW, group=1),
    Figure(C, "from 119.13 to [[115.98]] ms", "zero_state", _ZERO_ROW.format("zero"), group=1),
    Figure(C, "with the same [[9.13]] GB\nmoved", "zero_state", _ZERO_ROW.format("zero"), group=2),
]

_MS = r"^{}\s+{}\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+([\d.]+)\s+yes\s+([-\d.]+)%\s+([-\d.]+)%\s+(?:gap ([\d.]+)%|exact)\s+([\d.]+) s"
# free GB, budget, plan GB, Eq.1 lost %, sim lost %, gap %, search s
_MS_LOOSE = (_MS.format("vgg16", "4x4 P100"), _MS.format("vgg16", "4 K80"), _MS.format("inception_v3", "4x4 P100"))


def _memory_search_tight(model: str) -> str:
    """The row of the tighter budget (after the line that announces them)."""
    return r"(?s)tighter budgets.*?" + _MS.format(model, "4x4 P100")


FIGURES += [
    Figure(M, "on 64 GPUs [[2.5]] s (3.1 s of processor)", "llama memory search",
           r"llama on 64: ([\d.]+) s wall", kind="timing", tolerance=0.5),
    Figure(M, "on 64 GPUs 2.5 s ([[3.1]] s of processor)", "llama memory search",
           r"llama on 64: [\d.]+ s wall, ([\d.]+) s processor", kind="timing", tolerance=0.5),
    Figure(M, "(3.1 s of processor)\n  and [[0.34]] GB peak", "llama memory search",
           r"llama on 64: .* ([\d.]+) GB peak", kind="timing", tolerance=0.3),
    Figure(M, "on 256 GPUs [[2.0]] s (2.7 s)", "llama memory search",
           r"llama on 256: ([\d.]+) s wall", kind="timing", tolerance=0.5),
    Figure(M, "on 256 GPUs 2.0 s ([[2.7]] s)", "llama memory search",
           r"llama on 256: [\d.]+ s wall, ([\d.]+) s processor", kind="timing", tolerance=0.5),
    Figure(M, "2.0 s (2.7 s) and [[0.40]] GB peak", "llama memory search",
           r"llama on 256: .* ([\d.]+) GB peak", kind="timing", tolerance=0.3),
    Figure(M, "on 1,024 GPUs [[7.0]] s (10.3 s)", "llama memory search",
           r"llama on 1024: ([\d.]+) s wall", kind="timing", tolerance=0.5),
    Figure(M, "on 1,024 GPUs 7.0 s ([[10.3]] s)", "llama memory search",
           r"llama on 1024: [\d.]+ s wall, ([\d.]+) s processor", kind="timing", tolerance=0.5),
    Figure(M, "7.0 s (10.3 s)\n  and [[1.30]] GB peak", "llama memory search",
           r"llama on 1024: .* ([\d.]+) GB peak", kind="timing", tolerance=0.3),
    Figure(M, "memory new to a process cost [[1.54]] s per GB", "llama memory search",
           r"memory new to a process: ([\d.]+) s per GB", kind="timing", tolerance=2.0),
    Figure(M, "on a day when that search took 8.7-8.9 s, it then took\n  [[8.1-8.2]] s", "llama memory search",
           r"llama on 1024: ([\d.]+) s wall", kind="timing", tolerance=0.5),
    Figure(M, "1,024-GPU search took [[6.5]] s", "llama memory search",
           r"llama on 1024, memory warmed: ([\d.]+) s wall", kind="timing", tolerance=0.5),
    Figure(M, "search took 6.5 s ([[8.9]] s of processor)", "llama memory search",
           r"llama on 1024, memory warmed: [\d.]+ s wall, ([\d.]+) s processor", kind="timing", tolerance=0.5),
    Figure(M, "(a plan of [[21.03]] s under\n  Eq. 1", "llama memory search", r"llama on 1024: .*Eq. 1 ([\d.]+) s"),
    Figure(M, "took [[9.9]] and 10.0 s without", "populate ahead", r"^llama on 1024 off: ([\d.]+) s wall",
           kind="timing", tolerance=0.5),
    Figure(M, "9.9 and 10.0 s without against\n  [[9.1]] and 8.2 s with", "populate ahead",
           r"^llama on 1024 on: ([\d.]+) s wall", kind="timing", tolerance=0.5),
    Figure(M, "only the memory plan is checked: [[0.1]], 0.2 and 0.4 s", "llama memory search",
           r"resnet50 on 64: ([\d.]+) s wall", kind="timing", tolerance=2.0),
    Figure(M, "only the memory plan is checked: 0.1, [[0.2]] and 0.4 s", "llama memory search",
           r"resnet50 on 256: ([\d.]+) s wall", kind="timing", tolerance=1.0),
    Figure(M, "only the memory plan is checked: 0.1, 0.2 and [[0.4]] s", "llama memory search",
           r"resnet50 on 1024: ([\d.]+) s wall", kind="timing", tolerance=1.0),
    Figure(M, "0.4 s, [[69]], 119 and 220 MB peak", "llama memory search", r"resnet50 on 64: .* (\d+) MB peak",
           kind="timing", tolerance=0.3),
    Figure(M, "0.4 s, 69, [[119]] and 220 MB peak", "llama memory search", r"resnet50 on 256: .* (\d+) MB peak",
           kind="timing", tolerance=0.3),
    Figure(M, "0.4 s, 69, 119 and [[220]] MB peak", "llama memory search", r"resnet50 on 1024: .* (\d+) MB peak",
           kind="timing", tolerance=0.3),
]
FIGURES += [
    Figure(M, "the fullest arena is [[25.86]] GB keeping\neverything", "tp recompute",
           r"recompute None: fullest arena ([\d.]+) GB"),
    Figure(M, "everything, [[21.96]] GB recomputing attention", "tp recompute",
           r"recompute attention: fullest arena ([\d.]+) GB"),
    Figure(M, "and [[21.80]] GB recomputing every map", "tp recompute", r"recompute all: fullest arena ([\d.]+) GB"),
    Figure(M, "the searched plan recomputes [[23]] ops", "gpt2 recompute", r"searched: (\d+) ops recomputed"),
    Figure(M, "its arena is [[15.61]] GB on the fullest device", "gpt2 recompute", r"fullest arena ([\d.]+) GB"),
    Figure(M, "([[23.77]] GB keeping everything), and", "gpt2 recompute", r"searched: .*\(([\d.]+) GB keeping"),
    Figure(M, "iteration takes [[0.710]] s against 0.686 s", "gpt2 recompute", r"simulated ([\d.]+) s \("),
    Figure(M, "0.710 s against [[0.686]] s without", "gpt2 recompute", r"\(([\d.]+) s without the recomputes"),
    Figure(M, "alone needs [[14.35]] GB", "gpt2 recompute", r"recompute attention ([\d.]+) GB"),
    Figure(M, "GB ([[24.01]] GB keeping everything).", "gpt2 recompute", r"data parallel: .*\(([\d.]+) GB keeping"),
    Figure(M, "[[415]] ops recomputed, the fullest arena", "recompute greedy 64", r"fits True: (\d+) ops recomputed"),
    Figure(M, "the fullest arena [[74.99]] -> 29.85 GB", "recompute greedy 64", r"fullest arena ([\d.]+) ->"),
    Figure(M, "74.99 -> [[29.85]] GB, 11 memory plans", "recompute greedy 64", r"-> ([\d.]+) GB"),
    Figure(M, "[[11]] memory plans in 5.6 s", "recompute greedy 64", r"(\d+) memory plans"),
    Figure(M, "recomputing [[21]] ops, its fullest arena", "llama 1024 recompute", r"(\d+) ops recomputed"),
    Figure(M, "fullest arena [[79.49]] GB against 80", "llama 1024 recompute", r"fullest arena ([\d.]+) GB"),
    Figure(M, "([[90.76]] GB keeping everything)", "llama 1024 recompute", r"\(([\d.]+) GB keeping"),
    Figure(M, "in [[578]] s of processor time", "llama 1024 recompute", r"(\d+) s processor", kind="timing",
           tolerance=0.5),
    Figure(M, "and [[9.82]] GB peak", "llama 1024 recompute", r"processor, ([\d.]+) GB peak", kind="timing",
           tolerance=0.3),
    Figure(M, "memory plans in [[5.6]] s of processor", "recompute greedy 64", r"([\d.]+) s processor",
           kind="timing", tolerance=0.5),
    Figure(M, "time and [[0.39]] GB peak (87.5 s", "recompute greedy 64", r"processor, ([\d.]+) GB peak",
           kind="timing", tolerance=0.3),
]
FIGURES += [
    Figure(M, "VGG-16 over 4 K80s,\n[[0.28]] GB on a 8.54 GB arena", "footprint gap",
           r"vgg16 on 4 K80s: .* on top ([\d.]+) GB"),
    Figure(M, "0.28 GB on a [[8.54]] GB arena", "footprint gap", r"vgg16 on 4 K80s: arena ([\d.]+) GB"),
    Figure(M, "Inception-v3 over 4 P100s, [[0.13]] GB on 16.98 GB", "footprint gap",
           r"inception_v3 on 4 P100s: .* on top ([\d.]+) GB"),
    Figure(M, "0.13 GB on [[16.98]] GB", "footprint gap", r"inception_v3 on 4 P100s: arena ([\d.]+) GB"),
    Figure(M, "would be [[1.6-2.2]] times the arena", "footprint gap",
           r"buffers added up over the arena: ([\d.]+) to ([\d.]+)", group=(1, 2)),
    Figure(M, "this check costs about [[0.008]] s of processor time at 64 devices", "footprint gap",
           r"resnet50 on 64 P100s: fit check ([\d.]+) s", kind="timing", tolerance=1.0),
]
FIGURES += [
    Figure(M, "the plan closest to fitting needs [[117.36]] GB on a\ndevice of 80 GB", "llama-13b no fit",
           r"llama-13b on 8: nearest miss ([\d.]+) GB"),
    Figure(M, "its nearest miss needing\n[[114.10]] GB on its fullest device", "llama-13b no fit",
           r"llama-13b on 64: nearest miss ([\d.]+) GB"),
]
FIGURES += [
    Figure(M, "unconstrained ([[2.95]] GB per P100 of 4 x 4", "memory_search", _MS_LOOSE[0], group=3),
    Figure(M, "[[8.59]] GB per K80 of 4)", "memory_search", _MS_LOOSE[1], group=3),
    Figure(M, "Inception-v3 fits 4 x 4 P100s ([[4.72]] GB)", "memory_search", _MS_LOOSE[2], group=3),
    Figure(M, "every plan keeps at least [[66.9]] GB of activations", "plan inception_v3 4 K80",
           r"every plan needs at least ([\d.]+) GB in all"),
    Figure(M, "(the search says so in [[0.4]] s)", "memory_search",
           r"^inception_v3\s+4 K80\s.*?no plan fits: .*?\(([\d.]+) s\)", kind="timing", tolerance=2.0),
    Figure(M, "VGG-16 on 4 x 4 P100s at [[2.51]] GB per device", "memory_search", _memory_search_tight("vgg16"), group=2),
    Figure(M, "per device costs [[23]]% more under Eq. 1", "memory_search", _memory_search_tight("vgg16"), group=4),
    Figure(M, "more under Eq. 1 ([[14]]% simulated; the OWT plan)", "memory_search", _memory_search_tight("vgg16"), group=5),
    Figure(M, "Inception-v3 at [[4.48]] GB 7.1%", "memory_search", _memory_search_tight("inception_v3"), group=2),
    Figure(M, "Inception-v3 at 4.48 GB [[7.1]]%", "memory_search", _memory_search_tight("inception_v3"), group=4),
    Figure(M, "7.1% ([[-0.2]]% simulated)", "memory_search", _memory_search_tight("inception_v3"), group=5),
    Figure(M, "(gaps [[23]]% and 7%)", "memory_search", _memory_search_tight("vgg16"), group=6),
    Figure(M, "(gaps 23% and [[7]]%)", "memory_search", _memory_search_tight("inception_v3"), group=6),
    Figure(M, "and those searches take [[13-35]] s.", "memory_search",
           lambda out: _span(float(re.search(_memory_search_tight(m), out, re.MULTILINE)[7])
                             for m in ("vgg16", "inception_v3")),
           kind="timing", tolerance=2.0),
]


def _stall(model: str, budget: int) -> str:
    """benchmarks/memory.py's part 4 row: offloaded, planner model ms, reported ms, simulated ms, iteration ms."""
    return rf"^{model}\s+\d+\s+\S+\s+{budget}%\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"


FIGURES += [
    Figure(M, "because it disagreed with the replay by up to [[15]] times", "memory stall rows",
           lambda out: max(float(m[2]) / float(m[3]) for m in re.finditer(_stall(r"\S+", r"\d+"), out, re.MULTILINE)
                           if float(m[3]) > 0)),
    *figures(M, "32 on a P100 under 90% of its arena: [[95.6]] ms by the model, [[6.4]] ms replayed", "memory stall rows",
             _stall("resnet152", 90), groups=(2, 3)),
    *figures(M, "ResNet-50 under 90%: [[50.2]] against [[23.1]] ms.", "memory stall rows", _stall("resnet50", 90),
             groups=(2, 3)),
    *figures(M, "VGG-16 at batch 128 under 90%, [[102.8]] ms by the model against [[159.0]] ms", "memory stall rows",
             _stall("vgg16", 90), groups=(2, 3)),
    Figure(M, "the replay [[5-35]] ms on a 340 ms iteration", "memory stall rows",
           lambda out: _span(float(m[3]) for m in re.finditer(_stall("resnet18_small", r"\d+"), out, re.MULTILINE)
                             if float(m[3]) > 0)),
    Figure(M, "the replay 5-35 ms on a [[340]] ms iteration", "memory stall rows", _stall("resnet18_small", 90), group=5),
    *figures(M, "(ResNet-152 under 70%: [[292]] against [[303]] ms;", "memory stall rows", _stall("resnet152", 70),
             groups=(2, 3)),
]

# ----- docs/tofu.md ------------------------------------------------------------------------------------

TO = "docs/tofu.md"
_TOFU_ROW = r"^{}\s+(\d+)\s+(\d+)\s+{}\s+yes\s+([\d.]+)"     # model, algorithm -> ops, coarse nodes, GB moved
_TOFU_RNN10 = _TOFU_ROW.replace("{}", "RNN-10-8K", 1)


def _refined_below_allrow(out: str) -> tuple[float, float]:
    """How far (%) Tofu's refined partitions of the unrolled LSTMs move fewer bytes than AllRow-Greedy's."""
    def below(model: str) -> float:
        refined = float(re.search(_TOFU_ROW.format(model, r"tofu \(CriticalDP\+refine\)"), out, re.MULTILINE)[3])
        allrow = float(re.search(_TOFU_ROW.format(model, "AllRow-Greedy"), out, re.MULTILINE)[3])
        return 100 * (1 - refined / allrow)
    return _span(below(m) for m in ("RNN-10-8K", "RNN-4-8K"))


FIGURES += [
    Figure(TO, "edges); refined, it is [[19-20]]% below", "tofu", _refined_below_allrow),
    *figures(TO, "Tofu's search handles RNN-10-8K ([[1464]] ops, [[134]]\ncoarse nodes)", "tofu",
             _TOFU_RNN10.format("AllRow-Greedy"), groups=(1, 2)),
]

# ----- docs/plan-format.md: the example plan file (its estimate, to the last digit) ----------------------

PF, LENET2 = "docs/plan-format.md", "plan lenet5 2 json"
_E = r"([-+\d.eE]+)"
FIGURES += [
    Figure(PF, '"estimate": {"cost": [[2.1216901829719722e-05]],', LENET2, rf'(?s)"estimate": {{\s*"cost": {_E}', tolerance=1e-12),
    Figure(PF, '"compute": [[1.5068101829719724e-05]], "transfer"', LENET2, rf'(?s)"estimate": {{.*?"compute": {_E}', tolerance=1e-12),
    Figure(PF, '"transfer": [[5.12e-06]], "sync"', LENET2, rf'(?s)"estimate": {{.*?"transfer": {_E}', tolerance=1e-12),
    Figure(PF, '"sync": [[1.0288e-06]]}', LENET2, rf'(?s)"estimate": {{.*?"sync": {_E}', tolerance=1e-12),
    Figure(PF, '"bytes_moved": [[122976.0]]}', LENET2, rf'(?s)"estimate": {{.*?"bytes_moved": {_E}'),
]

# ----- docs/scheduling.md (for contributors): benchmarks/schedule.py's simulated rows ---------------------

SC, SCH = "docs/scheduling.md", "schedule simulated"


def _sched(network: str, p100s: int) -> str:
    """schedule.py's row: fifo ms, crit ms, ratio, x0.25, x4, b2b (groups 1-6), ceiling (7, first row only)."""
    return (rf"^{network}\s+\d+\s+{p100s}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
            rf"(?:\s+([\d.]+))?")


_ARENA = r"^{} P100s: receiving device ([\d.]+) -> ([\d.]+) MiB; another replica ([\d.]+) -> ([\d.]+) MiB"
FIGURES += [
    *figures(SC, "ResNet-50 data parallel, [[1,406]] to [[1,519]] MiB on four P100s", "resnet50 arenas fifo vs critical_path",
             _ARENA.format(4), groups=(1, 2)),
    *figures(SC, "[[548]] to [[716]] MiB on sixteen", "resnet50 arenas fifo vs critical_path", _ARENA.format(16),
             groups=(1, 2)),
    *figures(SC, "arenas grow by their gradients ([[1,309]] to [[1,394]] MiB on four)", "resnet50 arenas fifo vs critical_path",
             _ARENA.format(4), groups=(3, 4)),
    *figures(SC, "ResNet-50 (batch 32) [[1.10]], [[1.37]], [[1.04]];", SCH, _sched("resnet50", 1) + r"(?s:.*?)"
             + _sched("resnet50", 4) + r"(?s:.*?)" + _sched("resnet50", 16), groups=(3, 10, 17)),
    *figures(SC, "Inception-v3 (32) [[1.15]], [[1.40]], [[1.06]];", SCH, _sched("inception_v3", 1) + r"(?s:.*?)"
             + _sched("inception_v3", 4) + r"(?s:.*?)" + _sched("inception_v3", 16), groups=(3, 10, 17)),
    *figures(SC, "VGG-16 (100) [[1.00]], [[1.34]], [[1.34]];", SCH, _sched("vgg16", 1) + r"(?s:.*?)"
             + _sched("vgg16", 4) + r"(?s:.*?)" + _sched("vgg16", 16), groups=(3, 10, 17)),
    *figures(SC, "AlexNet (128) [[1.04]], [[1.18]], [[1.01]].", SCH, _sched("alexnet", 1) + r"(?s:.*?)"
             + _sched("alexnet", 4) + r"(?s:.*?)" + _sched("alexnet", 16), groups=(3, 10, 17)),
    *figures(SC, "(now fifo [[120]] ms, critical_path [[109]] ms)", SCH, _sched("resnet50", 1), groups=(1, 2)),
    Figure(SC, "completely would now give [[1.37]]x for ResNet-50", SCH, _sched("resnet50", 1), group=7),
    Figure(SC, "([[1.40]]x Inception-v3, 1.49x VGG-16", SCH, _sched("inception_v3", 1), group=7),
    Figure(SC, "1.40x Inception-v3, [[1.49]]x VGG-16", SCH, _sched("vgg16", 1), group=7),
    Figure(SC, "1.49x VGG-16, [[1.54]]x\n  AlexNet)", SCH, _sched("alexnet", 1), group=7),
    Figure(SC, "the ratios are [[1.32]]\n(ResNet-50) and 1.46 (Inception-v3)", SCH, _sched("resnet50", 1), group=5),
    Figure(SC, "(ResNet-50) and [[1.46]] (Inception-v3); VGG-16's kernels", SCH, _sched("inception_v3", 1), group=5),
    Figure(SC, "VGG-16's kernels fill the device even then ([[1.00]])", SCH, _sched("vgg16", 1), group=5),
    Figure(SC, "so hiding it gives [[1.04]] (ResNet-50) and 1.06 (Inception-v3)", SCH, _sched("resnet50", 16), group=3),
    Figure(SC, "so hiding it gives 1.04 (ResNet-50) and [[1.06]] (Inception-v3)", SCH, _sched("inception_v3", 16), group=3),
    Figure(SC, "on AlexNet on four P100s ([[63.67]] ms:", SCH, _sched("alexnet", 4), group=1),
    Figure(SC, "On sixteen it gives [[1.048]] (ResNet-50) and 1.069", SCH, _sched("resnet50", 16), group=6),
    Figure(SC, "(ResNet-50) and [[1.069]]\n(Inception-v3) against 1.044 and 1.060", SCH, _sched("inception_v3", 16), group=6),
    Figure(SC, "(Inception-v3) against [[1.044]] and 1.060", SCH, _sched("resnet50", 16), group=3),
    Figure(SC, "(Inception-v3) against 1.044 and [[1.060]]", SCH, _sched("inception_v3", 16), group=3),
    Figure(SC, "on AlexNet on four it is lower ([[1.078]] against 1.176:", SCH, _sched("alexnet", 4), group=6),
    Figure(SC, "on AlexNet on four it is lower (1.078 against [[1.176]]:", SCH, _sched("alexnet", 4), group=3),
]

_B2B = (r"^(?:resnet18_small|lenet5)\s+.*?(?:fifo|critical_path)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)"
        r"\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)$")   # measured 1/2, 1/4; simulated 1/2, 1/4


def _b2b_span(first_group: int) -> Callable[[str], tuple[float, float]]:
    return lambda out: _span(float(m[g]) for m in re.finditer(_B2B, out, re.MULTILINE)
                             for g in (first_group, first_group + 1))


FIGURES += [
    Figure(SC, "in flight measured [[0.93x to 1.07]]x on a quiet machine", "schedule_cpu back to back", _b2b_span(1),
           kind="timing", tolerance=0.15),
    Figure(SC, "against [[1.00x to 1.02]]x simulated", "schedule_cpu back to back", _b2b_span(3),
           kind="timing", tolerance=0.1),
    Figure(SC, "the ratios measured ([[1.00-1.01]]) are the shared", "schedule cpu rows",
           lambda out: _span(float(m[1]) for m in re.finditer(r"^\w+_small\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+1\.000$",
                                                              out, re.MULTILINE)), kind="timing", tolerance=0.1),
]

# ----- docs/cpu_kernels.md (for contributors): the kernels' current timings on the machine that runs the check
# (each command prints the CPU, the direct loops' instruction set and the load beside its figures)

CK = "docs/cpu_kernels.md"
COMMANDS.update({
    "conv_layers repeat 5": bench("conv_layers", "--repeat", "5", cheap=False, timeout_s=600),
    "train_cpu_pairs": bench("train_cpu_pairs", cheap=False, timeout_s=600),
    "train_cpu_pairs avx2": Command(("env", "OPENBLAS_CORETYPE=Haswell", "ATEN_CPU_CAPABILITY=avx2",
                                     "ONEDNN_MAX_CPU_ISA=AVX2", PY, "benchmarks/train_cpu_pairs.py", "--isa", "avx2"),
                                    cheap=False, timeout_s=600),
    "conv isa": measure("conv-isa", cheap=True, timeout_s=300),
    "conv wide": measure("conv-wide", cheap=True, timeout_s=300),
    "pool layers": measure("pool-layers", cheap=True, timeout_s=300),
})


def _step(model: str, op: str, kind: str) -> str:
    """step_breakdown.py's line of one (op kind, task kind) in one model's section: ms."""
    return rf"(?s)^{model}: step .*?^\s+{op}\s+{kind}\s+([\d.]+) ms"


def _pairs(model: str) -> str:
    """train_cpu_pairs.py's row: ours ms, PyTorch ms, PyTorch / ours."""
    return rf"^{model}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x"


_CELL = r"([\d.]+) \(\s*(\d+)\)"


def _conv_row(model: str, layer: str) -> str:
    """conv_layers.py's row: im2col ms/GFLOP/s x3 (groups 1-6), direct (7-12), auto (13-18), torch ms x3 (19-21)."""
    three = r"\s+".join([_CELL] * 3)
    return (rf"^{model}\s+{re.escape(layer)}\s+.*?im2col\s+{three}\s+\|\s+direct\s+{three}\s+\|\s+auto\s+{three}"
            r"\s+\|\s+torch\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


_CONV_ROW_MARKS = (1, 3, 5, 7, 8, 9, 10, 11, 12, 19, 20, 21)   # im2col ms, direct ms (GFLOP/s), PyTorch ms
_THIN = ("layer1", "layer2.0.conv1", "layer2", "layer3.0.conv1")    # ResNet's 3x3 layers of 16-32 input channels
_WIDE_ENOUGH = [("resnet", n) for n in ("layer1", "layer2.0.conv1", "layer2", "layer3.0.conv1", "layer3",
                                        "layer4.0.conv1", "layer4")] + [("alexnet", n) for n in ("conv2", "conv3", "conv4")]


def _conv_span(rows, groups) -> Callable[[str], tuple[float, float]]:
    def span(out: str) -> tuple[float, float]:
        return _span(float(re.search(_conv_row(m, n), out, re.MULTILINE)[g]) for m, n in rows for g in groups)
    return span


def _direct_gain(out: str) -> tuple[float, float]:
    """im2col + GEMM's time over the direct loops' on the layers of 16 and more input channels."""
    ratios = []
    for m, n in _WIDE_ENOUGH:
        row = re.search(_conv_row(m, n), out, re.MULTILINE)
        ratios += [float(row[g]) / float(row[g + 6]) for g in (1, 3, 5)]
    return _span(ratios)


def _conv_grads(column: str) -> Callable[[str], float]:
    """The AlexNet's conv2: both gradients, direct (dx + dw) or PyTorch's (one call)."""
    def grads(out: str) -> float:
        row = re.search(_conv_row("alexnet", "conv2"), out, re.MULTILINE)
        return float(row[9]) + float(row[11]) if column == "direct" else float(row[21])
    return grads


def _isa_row(ci: int, h: int) -> str:
    """conv-isa's two lines of one layer: AVX2 fwd / dx / dw GFLOP/s (groups 1-3), AVX-512 (4-6)."""
    one = rf"{ci}->{ci} {h}x{h}: ([\d.]+) / ([\d.]+) / ([\d.]+) GFLOP/s"
    return rf"(?s)^avx2 {one}.*?^avx512 {one}"


def _wide_row(c: int, h: int, n: int) -> str:
    """conv-wide's two lines of one layer: AVX2 direct x3, im2col x3 (groups 1-6), AVX-512 (7-12)."""
    one = rf"{c}->{c} {h}x{h} batch {n}: direct ([\d.]+) / ([\d.]+) / ([\d.]+) against im2col ([\d.]+) / ([\d.]+) / ([\d.]+) ms"
    return rf"(?s)^avx2 {one}.*?^avx512 {one}"


def _pool_row(name: str) -> str:
    """pool-layers' lines of one pool: AVX-512 fwd, bwd (1-2), AVX2 (3-4), PyTorch (5-6)."""
    one = rf"{name} \S+: forward ([\d.]+) ms, backward ([\d.]+) ms"
    return rf"(?s)^avx512 {one}.*?^avx2 {one}.*?^torch {name}: forward with indices ([\d.]+) ms, backward ([\d.]+) ms"


STEP = dict(kind="timing", tolerance=0.5)      # wall clock of the task clock on a shared machine
KERNEL = dict(kind="timing", tolerance=0.3)    # thread or process CPU time
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\d.])")


def _row(row: str, cells: tuple[int, ...] | None = None) -> str:
    """A doc's table row with every number of the given cells (default: all but the first, the label) marked."""
    parts = row.split(" | ")
    for i in cells or range(1, len(parts)):
        parts[i] = _NUMBER.sub(lambda m: f"[[{m[0]}]]", parts[i])
    return " | ".join(parts)


# one worker's step (benchmarks/step_breakdown.py): (the doc's row, ResNet-18's (op, kind) per figure, AlexNet's)
_STEP_ROWS = [
    ("| **step** | **181.6** | | **step** | **261.0** |", [None], [None]),
    ("| conv forward | 48.5 | | conv forward | 80.2 |", [("conv2d", "forward")], [("conv2d", "forward")]),
    ("| conv backward_data | 48.7 | | conv backward_data | 71.5 |", [("conv2d", "backward_data")],
     [("conv2d", "backward_data")]),
    ("| conv backward_weight | 47.6 | | conv backward_weight | 88.3 |", [("conv2d", "backward_weight")],
     [("conv2d", "backward_weight")]),
    ("| batchnorm bn_stats | 4.5 | | pool forward | 3.1 |", [("batchnorm2d", "bn_stats")], [("pool2d", "forward")]),
    ("| batchnorm bn_apply | 3.5 | | pool backward_data | 8.2 |", [("batchnorm2d", "bn_apply")],
     [("pool2d", "backward_data")]),
    ("| batchnorm bn_backward_stats | 4.1 | | pool copy | 1.6 |", [("batchnorm2d", "bn_backward_stats")],
     [("pool2d", "copy")]),
    ("| batchnorm backward_weight | 4.6 | | conv accumulate | 2.6 |", [("batchnorm2d", "backward_weight")],
     [("conv2d", "accumulate")]),
    ("| batchnorm backward_data | 3.4 | | linear forward | 1.1 |", [("batchnorm2d", "backward_data")],
     [("linear", "forward")]),
    ("| relu forward / backward_data | 3.0 / 4.5 | | linear backward_data / weight | 1.0 / 1.0 |",
     [("relu", "forward"), ("relu", "backward_data")], [("linear", "backward_data"), ("linear", "backward_weight")]),
    ("| relu accumulate | 3.0 | | | |", [("relu", "accumulate")], []),
    ("| add forward / backward_data | 2.2 / 1.6 | | | |", [("add", "forward"), ("add", "backward_data")], []),
]


def _step_figures() -> list[Figure]:
    out = []
    for row, res, alex in _STEP_ROWS:
        marked = _row(row, (1, 3)) if alex else _row(row, (1,))   # "| |": the empty cell joins the next
        lines = [("resnet18_small", k) for k in res] + [("alexnet_small", k) for k in alex]
        for i, (model, key) in enumerate(lines):
            pattern = rf"^{model}: step ([\d.]+) ms" if key is None else _step(model, *key)
            out.append(Figure(CK, _keep_mark(marked, i), "step_breakdown", pattern, **STEP))
    return out


FIGURES += _step_figures()
FIGURES += [Figure(CK, "([[4.6]] ms of the ResNet's step above)", "step_breakdown",
                   _step("resnet18_small", "batchnorm2d", "backward_weight"), **STEP)]

# one worker against PyTorch, alternating steps: ours ms / PyTorch ms, ratio; the AVX-512 paths, then the AVX2 ones
_PAIRS_ROWS = [("lenet5", "| LeNet-5 | 3.9 / 12.1 | 3.07x | 4.5 / 11.9 | 2.60x |"),
               ("alexnet_small", "| scaled AlexNet | 257.1 / 308.0 | 1.20x | 279.9 / 349.7 | 1.26x |"),
               ("resnet18_small", "| scaled ResNet-18 | 172.3 / 213.2 | 1.23x | 179.9 / 234.8 | 1.28x |")]
for _model, _r in _PAIRS_ROWS:
    _tol = dict(kind="timing", tolerance=0.5 if _model == "lenet5" else 0.3)   # LeNet-5: steps of a few ms
    FIGURES += figures(CK, _row(_r, (1, 2)), "train_cpu_pairs", _pairs(_model), **_tol)
    FIGURES += figures(CK, _row(_r, (3, 4)), "train_cpu_pairs avx2", _pairs(_model), **_tol)

# the convolution kernels per layer (benchmarks/conv_layers.py), the doc's table row by row: im2col ms, direct ms
# (GFLOP/s), PyTorch ms; the auto column is the rule, not a figure
_CONV_TABLE = [
    ("lenet", "conv1", "| LeNet-5 conv1 1->6 32x32 5x5 | 0.39 / 0.39 / 0.40 | 0.65 (23) / 1.91 (8) / 0.42 (36) | im2col | "
                       "0.63 / 0.48 / 7.34 |"),
    ("lenet", "conv2", "| LeNet-5 conv2 6->16 14x14 5x5 | 0.74 / 0.67 / 0.86 | 0.34 (90) / 0.85 (36) / 0.33 (94) | "
                       "fwd, dw direct | 0.33 / 0.56 / 1.38 |"),
    ("resnet", "conv1", "| ResNet conv1 3->16 32x32 | 1.33 / 1.44 / 2.13 | 1.22 (46) / 2.40 (24) / 0.74 (77) | "
                        "fwd, dw direct | 1.01 / 0.77 / 4.26 |"),
    ("resnet", "layer1", "| ResNet layer1 16->16 32x32 | 5.79 / 5.79 / 6.71 | 3.65 (83) / 3.71 (81) / 3.48 (87) | direct | "
                         "12.05 / 4.81 / 17.88 |"),
    ("resnet", "layer2.0.conv1", "| ResNet layer2.0.conv1 16->32 s2 | 3.30 / 3.20 / 3.59 | 1.98 (76) / 2.14 (71) / "
                                 "1.87 (81) | direct | 2.63 / 2.59 / 14.03 |"),
    ("resnet", "layer2", "| ResNet layer2 32->32 16x16 | 4.76 / 4.63 / 5.42 | 3.09 (98) / 3.02 (100) / 3.08 (98) | direct | "
                         "3.01 / 3.72 / 6.95 |"),
    ("resnet", "layer2.down", "| ResNet layer2 downsample 1x1 s2 | 0.65 / 0.79 / 0.65 | 0.58 (29) / 1.08 (16) / 0.46 (37) "
                              "| im2col | 0.55 / 0.57 / 11.45 |"),
    ("resnet", "layer3.0.conv1", "| ResNet layer3.0.conv1 32->64 s2 | 2.39 / 2.32 / 2.54 | 1.54 (98) / 1.78 (85) / "
                                 "1.54 (98) | direct | 1.53 / 1.80 / 4.49 |"),
    ("resnet", "layer3", "| ResNet layer3 64->64 8x8 | 4.47 / 3.94 / 4.57 | 2.63 (115) / 2.66 (113) / 2.72 (111) | direct | "
                         "2.48 / 3.04 / 5.61 |"),
    ("resnet", "layer4.0.conv1", "| ResNet layer4.0.conv1 64->128 s2 | 2.16 / 2.03 / 2.18 | 1.42 (107) / 1.65 (92) / "
                                 "1.50 (101) | direct | 1.36 / 1.81 / 3.75 |"),
    ("resnet", "layer4", "| ResNet layer4 128->128 4x4 | 4.09 / 3.80 / 4.09 | 2.45 (123) / 2.44 (124) / 2.46 (123) | "
                         "direct | 2.16 / 3.01 / 5.26 |"),
    ("alexnet", "conv1", "| AlexNet conv1 3->64 64x64 5x5 s2 | 10.83 / 10.96 / 12.94 | 9.46 (67) / 28.76 (22) / 7.31 (86) "
                         "| fwd, dw direct | 8.21 / 9.50 / 48.22 |"),
    ("alexnet", "conv2", "| AlexNet conv2 64->128 15x15 5x5 | 67.81 / 66.20 / 66.03 | 47.55 (124) / 48.09 (123) / "
                         "47.49 (124) | direct | 45.54 / 48.35 / 96.02 |"),
    ("alexnet", "conv3", "| AlexNet conv3 128->192 7x7 | 16.46 / 16.35 / 15.91 | 11.28 (123) / 11.74 (118) / 11.76 (118) "
                         "| direct | 11.14 / 15.38 / 25.68 |"),
    ("alexnet", "conv4", "| AlexNet conv4 192->128 7x7 | 17.77 / 17.62 / 17.12 | 11.51 (121) / 11.27 (123) / 11.82 (117) "
                         "| direct | 11.11 / 14.48 / 25.46 |"),
]
FIGURES += [f for model, layer, row in _CONV_TABLE
            for f in figures(CK, _row(row, (1, 2, 4)), "conv_layers repeat 5", _conv_row(model, layer),
                             groups=_CONV_ROW_MARKS, **KERNEL)]
FIGURES += [
    Figure(CK, "the 3x3 layers of 16-32 input channels run at [[42-65]] GFLOP/s", "conv_layers repeat 5",
           _conv_span([("resnet", n) for n in _THIN], (2, 4, 6)), **KERNEL),
    Figure(CK, "With AVX-512 they reach [[71-124]] GFLOP/s", "conv_layers repeat 5", _conv_span(_WIDE_ENOUGH, (8, 10, 12)),
           **KERNEL),
    Figure(CK, "table above (the strided data gradients lowest), [[1.2-1.9]]x im2col + GEMM", "conv_layers repeat 5",
           _direct_gain, **KERNEL),
    Figure(CK, "conv2 [[47.55]] ms against 45.54 forward", "conv_layers repeat 5", _conv_row("alexnet", "conv2"), group=7,
           **KERNEL),
    Figure(CK, "conv2 47.55 ms against [[45.54]] forward", "conv_layers repeat 5", _conv_row("alexnet", "conv2"), group=19,
           **KERNEL),
    Figure(CK, "[[95.58]] against 96.02 for both gradients", "conv_layers repeat 5", _conv_grads("direct"), **KERNEL),
    Figure(CK, "95.58 against [[96.02]] for both gradients", "conv_layers repeat 5", _conv_grads("torch"), **KERNEL),
]

# the instruction sets (tools/doc_measures.py conv-isa), 3x3 at batch 32: AVX2 then AVX-512 GFLOP/s
_ISA_TABLE = [((64, 16), "| 64 -> 64 channels, 16 x 16 | 105.5 / 105.7 / 103.3 | 109.8 / 109.3 / 109.7 |"),
              ((128, 8), "| 128 -> 128 channels, 8 x 8 | 114.1 / 112.7 / 107.1 | 119.2 / 117.9 / 113.3 |"),
              ((16, 32), "| 16 -> 16 channels, 32 x 32 | 79.0 / 83.5 / 100.0 | 78.8 / 83.3 / 98.2 |")]
# direct against im2col + GEMM on wide layers (tools/doc_measures.py conv-wide), ms: AVX2 then AVX-512
_WIDE_TABLE = [
    ((128, 8, 32), "| 128 -> 128 channels, 8 x 8, batch 32 | 5.3 / 5.3 / 5.7 against 7.3 / 7.3 / 7.3 | "
                   "5.2 / 5.2 / 5.3 against 7.4 / 7.0 / 7.4 |"),
    ((192, 7, 64), "| 192 -> 192 channels, 7 x 7, batch 64 | 19.5 / 18.4 / 18.2 against 23.7 / 23.8 / 23.1 | "
                   "17.2 / 17.4 / 17.6 against 25.0 / 24.5 / 23.3 |"),
    ((256, 8, 32), "| 256 -> 256 channels, 8 x 8, batch 32 | 21.8 / 21.8 / 23.5 against 26.3 / 25.8 / 26.8 | "
                   "20.5 / 20.6 / 21.6 against 28.6 / 26.9 / 26.8 |"),
    ((512, 2, 32), "| 512 -> 512 channels, 2 x 2, batch 32 | 7.5 / 9.2 / 9.5 against 7.6 / 7.9 / 8.6 | "
                   "6.5 / 7.7 / 9.4 against 8.7 / 8.3 / 8.7 |"),
]
# max pooling (tools/doc_measures.py pool-layers), forward / backward ms: AVX-512 lanes, AVX2 lanes, PyTorch
_POOL_TABLE = [("pool1", "| pool1, 64 x 31 x 31 -> 15 x 15 | 1.52 / 4.77 | 1.82 / 5.02 | 31.16 / 2.51 |"),
               ("pool2", "| pool2, 128 x 15 x 15 -> 7 x 7 | 1.18 / 2.75 | 1.13 / 2.29 | 13.32 / 0.69 |"),
               ("pool5", "| pool5, 128 x 7 x 7 -> 3 x 3 | 0.38 / 0.94 | 0.38 / 0.76 | 2.61 / 0.09 |")]
FIGURES += [f for shape, row in _ISA_TABLE for f in figures(CK, _row(row), "conv isa", _isa_row(*shape), **KERNEL)]
FIGURES += [f for shape, row in _WIDE_TABLE for f in figures(CK, _row(row), "conv wide", _wide_row(*shape), **KERNEL)]
FIGURES += [f for name, row in _POOL_TABLE for f in figures(CK, _row(row), "pool layers", _pool_row(name), **KERNEL)]
