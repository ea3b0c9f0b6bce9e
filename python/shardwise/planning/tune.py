"""The efficiency-optimal minibatch under a memory budget, and its learning rate.

    best = sw.tune_minibatch(lambda b: sw.models.resnet50(batch=b), d, budget="12GB",
                             base_batch=32, base_lr=0.1, epochs=90, samples=1_281_167)
    best.batch, best.lr, best.swap_plan, best.images_per_second
    print(best.report())              # every candidate: fits, stall, predicted images/s

The hyperparameter tuner of "AccUDNN: A GPU Memory Efficient Accelerator for Training
Ultra-deep Deep Neural Networks" (section 4).  Algorithm 2: the largest trainable minibatch
k_max comes from the smallest footprint swapping reaches at the base minibatch (parameters and
optimizer state stay; the feature maps in the peak's working set grow with the minibatch), made
exact by asking the swap planner; from there down, each candidate minibatch gets its swap plan
(constraint (4): every arena within the budget) and its simulated iteration with the swap tasks
(constraint (6): no prefetch late, read as the simulator losing no time to them), and the
candidate minimizing the whole training time of Eq. 3, epochs x samples / images per second,
among those meeting both constraints is chosen.  Eq. 9 then adapts the learning rate to it.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardwise.machine.devices import DeviceGraph
from shardwise.graph import Graph
from shardwise.plan import Plan
from shardwise.errors import ConfigError
from shardwise.iteration.swap import SwapPlan, parse_budget, swap_plan
from shardwise.progress import ProgressReport, check_progress


def adapted_lr(base_lr: float, base_batch: int, batch: int, c: float = 1.0) -> float:
    """Eq. 9: the learning rate for ``batch`` that keeps the convergence rate of ``base_lr`` at
    ``base_batch``: (1 - (1 - base_lr c)^q) / c with q = batch / base_batch; ``c`` the convexity
    constant of the objective (1 by default, which gives the paper's 0.22 for ResNet-101 at 592
    from 0.1 at 256).  Needs 0 < base_lr c < 1."""
    for value, what in ((base_lr, "base_lr"), (c, "c")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{what} must be a positive number, got {value!r}")
    for value, what in ((base_batch, "base_batch"), (batch, "batch")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{what} must be a positive int, got {value!r}")
    if not base_lr * c < 1:
        raise ValueError(f"Eq. 9 needs base_lr * c < 1, got {base_lr} * {c}")
    q = batch / base_batch
    return (1.0 - (1.0 - base_lr * c) ** q) / c


@dataclass(frozen=True)
class Candidate:
    """One minibatch Algorithm 2 looked at."""

    batch: int
    fits: bool                       # constraint (4): a swap plan whose arenas are within the budget
    stall_time: float                # simulated: what the swap tasks add to the iteration (0: no prefetch late)
    iteration_time: float            # simulated, swap tasks included (inf when it does not fit)
    images_per_second: float         # batch / iteration_time (0 when it does not fit)
    peak_bytes: int                  # the largest arena of the swap plan (0 when it does not fit)
    offloaded_bytes: int
    reason: str = ""                 # why it does not fit

    @property
    def no_stall(self) -> bool:
        return self.fits and self.stall_time == 0.0


@dataclass
class TuneResult:
    """The efficiency-optimal minibatch, its learning rate, swap plan and every candidate."""

    batch: int
    lr: float
    swap_plan: SwapPlan
    images_per_second: float
    plan: Plan
    k_max: int                       # the largest trainable minibatch under the budget
    budget: int
    base_batch: int
    base_lr: float
    epochs: int
    samples: int
    candidates: list[Candidate] = field(default_factory=list)
    meets_no_stall: bool = True      # False: no candidate met Eq. 6; the fastest fitting one was taken

    @property
    def training_time(self) -> float:
        """Eq. 3: seconds to train ``epochs`` over ``samples`` at the predicted rate."""
        return self.epochs * self.samples / self.images_per_second

    def report(self) -> str:
        rows = [f"minibatch under {self.budget / 1e9:.2f} GB per device: largest trainable {self.k_max}, "
                f"efficiency-optimal {self.batch} ({self.images_per_second:.1f} images/s, "
                f"{self.training_time / 3600:.1f} h for {self.epochs} epochs), lr {self.lr:.4g} "
                f"(base {self.base_lr} at {self.base_batch})",
                f"{'batch':>6} {'fits':>5} {'stall ms':>9} {'iter ms':>9} {'images/s':>9} {'peak GB':>8} {'offl. GB':>9}"]
        for c in self.candidates:
            if c.fits:
                rows.append(f"{c.batch:>6} {'yes':>5} {c.stall_time * 1e3:>9.2f} {c.iteration_time * 1e3:>9.2f} "
                            f"{c.images_per_second:>9.1f} {c.peak_bytes / 1e9:>8.2f} {c.offloaded_bytes / 1e9:>9.2f}")
            else:
                rows.append(f"{c.batch:>6} {'no':>5}  {c.reason}")
        return "\n".join(rows)


def _default_plan(g: Graph, d: DeviceGraph) -> Plan:
    from shardwise.planning import strategies

    return Plan.from_dict(g, d, {}) if len(d) == 1 else strategies.data_parallel(g, d)


class _Evaluator:
    """Builds, plans, swaps and simulates one minibatch at a time, each once."""

    def __init__(self, g_builder, d, budget, plan_fn, pinned_budget, costs) -> None:
        self.g_builder, self.d, self.budget = g_builder, d, budget
        self.plan_fn, self.pinned_budget, self.costs = plan_fn, pinned_budget, costs
        self.seen: dict[int, tuple[Candidate, SwapPlan | None, Plan | None]] = {}

    def plan(self, batch: int) -> Plan:
        g = self.g_builder(batch)
        if not isinstance(g, Graph):
            raise TypeError(f"g_builder must return a Graph for batch {batch}, got {type(g).__name__}")
        return self.plan_fn(g, self.d)

    def __call__(self, batch: int) -> tuple[Candidate, SwapPlan | None, Plan | None]:
        if batch in self.seen:
            return self.seen[batch]
        try:
            plan = self.plan(batch)
            sp = swap_plan(plan, self.budget, pinned_budget=self.pinned_budget, costs=self.costs)
        except ValueError as e:   # over the budget, or a minibatch the graph or plan cannot take
            out = (Candidate(batch, False, 0.0, float("inf"), 0.0, 0, 0, str(e).split(";")[0]), None, None)
        else:
            t = sp.swapped_iteration_time   # sw.simulate(plan, swap=sp, costs=...) as the swap plan ran it
            out = (Candidate(batch, True, sp.total_stall, t, batch / t, max(sp.peak_bytes.values()),
                             sum(sp.offloaded_bytes.values())), sp, plan)
        self.seen[batch] = out
        return out


def _k_max(ev: _Evaluator, base_batch: int) -> int:
    """Algorithm 2's k_max = k_base (M_budget - M_others - M_para) / M_FM(k_base), from the smallest
    footprint at the base minibatch, then moved to the largest minibatch that really fits."""
    plan = ev.plan(base_batch)
    sp = swap_plan(plan, 10**18, costs=ev.costs)   # no budget: the smallest footprint, M_FM at k_base
    from shardwise.iteration.lower import lower

    tg = lower(plan)
    fixed = {d: 0 for d in range(len(ev.d))}
    for b in tg.buffers:
        if b.kind in ("param", "momentum", "running_stats"):
            fixed[b.device] += b.plan_bytes
    k = min(int(base_batch * (ev.budget - fixed[d]) / max(sp.min_peak[d] - fixed[d], 1)) for d in fixed)
    k = max(k, 1)
    if ev(k)[0].fits:
        while ev(k + 1)[0].fits:   # the estimate is linear; placement and alignment are not
            k += 1
        return k
    while k > 1 and not ev(k)[0].fits:
        k -= 1
    if not ev(k)[0].fits:
        raise ValueError(f"no minibatch fits a budget of {ev.budget:,} bytes per device: "
                         f"{ev(k)[0].reason}")
    return k


def tune_minibatch(g_builder: Callable[[int], Graph], d: DeviceGraph, budget: Any, base_batch: int, base_lr: float,
                   epochs: int, samples: int, *, c: float = 1.0, smallest: int | None = None,
                   step: int | None = None, plan_fn: Callable[[Graph, DeviceGraph], Plan] | None = None,
                   pinned_budget: Any = None, costs: Any = None, progress: bool | str = "auto") -> TuneResult:
    """The efficiency-optimal minibatch under ``budget`` per device (AccUDNN's Algorithm 2) and
    its learning rate (Eq. 9).

    ``g_builder(batch)`` builds the graph at a minibatch (the zoo's models take ``batch=``);
    ``plan_fn(graph, d)`` its plan (default: the one-device plan, or data parallelism over
    ``d``).  Candidates run from the largest trainable minibatch down to ``smallest`` (default:
    ``base_batch`` or k_max, the smaller) in steps of ``step`` (default: about 16 candidates),
    then one at a time (bisection) between the largest stall-free candidate and the one above
    it, as Algorithm 2 steps down by one; each is swap-planned and simulated with its swap tasks.  Among those that fit with no stall
    the one with the most images/s (the least training time, Eq. 3) wins; when none is free of
    stalls, the fastest that fits (``meets_no_stall`` False).  ``c``: Eq. 9's convexity constant.
    ``epochs`` and ``samples`` give :attr:`TuneResult.training_time`.  ``progress``: "auto" (the
    default) shows, once tuning has run a second, a bar over the candidates with an ETA
    (terminals, notebooks) and a line per stage (also in logs); True from the start; False nothing."""
    if not callable(g_builder):
        raise TypeError(f"g_builder must be a callable batch -> Graph, got {type(g_builder).__name__}")
    if not isinstance(d, DeviceGraph):
        raise TypeError(f"d must be a DeviceGraph, got {type(d).__name__}")
    for value, what in ((base_batch, "base_batch"), (epochs, "epochs"), (samples, "samples")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{what} must be a positive int, got {value!r}")
    for value, what in ((smallest, "smallest"), (step, "step")):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{what} must be a positive int or None, got {value!r}")
    adapted_lr(base_lr, base_batch, base_batch, c)   # checks base_lr and c before any work
    check_progress(progress)
    if callable(progress):
        raise ConfigError(f"progress must be True, False or 'auto', got {progress!r}")
    budget_bytes = parse_budget(budget)
    ev = _Evaluator(g_builder, d, budget_bytes, plan_fn or _default_plan, pinned_budget, costs)
    with ProgressReport("tune_minibatch", progress, unit="candidate") as report:
        t = time.perf_counter()
        k_max = _k_max(ev, base_batch)
        t = report.stage_since(f"largest trainable minibatch: {k_max}", t)
        low = min(smallest or base_batch, k_max)
        stride = step or max(1, (k_max - low) // 16)
        batches = sorted(set(range(k_max, low - 1, -stride)) | {low}, reverse=True)
        scanned = []
        for i, k in enumerate(batches):
            scanned.append(ev(k)[0])
            report.advance(i + 1, len(batches), "tuning the minibatch: candidates", batch=k)
        t = report.stage_since(f"{len(batches)} candidates swap-planned and simulated", t)
        good = [c_ for c_ in scanned if c_.no_stall]
        if good:   # Algorithm 2 steps down by one: find the largest stall-free minibatch between two candidates
            ok = max(c_.batch for c_ in good)
            bad = min((c_.batch for c_ in scanned if c_.batch > ok), default=ok + 1)
            tried = 0
            while bad - ok > 1:
                mid = (ok + bad) // 2
                ok, bad = (mid, bad) if ev(mid)[0].no_stall else (ok, mid)
                tried += 1
            report.stage_since(f"bisection between candidates ({tried} more)", t)
    candidates = sorted((ev.seen[k][0] for k in ev.seen if low <= k <= k_max), key=lambda c_: -c_.batch)
    fitting = [c_ for c_ in candidates if c_.fits]
    free = [c_ for c_ in fitting if c_.no_stall]
    pool = free or fitting
    best = max(pool, key=lambda c_: (c_.images_per_second, c_.batch))
    _, sp, plan = ev(best.batch)
    return TuneResult(batch=best.batch, lr=adapted_lr(base_lr, base_batch, best.batch, c), swap_plan=sp,
                      images_per_second=best.images_per_second, plan=plan, k_max=k_max, budget=budget_bytes,
                      base_batch=base_batch, base_lr=base_lr, epochs=epochs, samples=samples, candidates=candidates,
                      meets_no_stall=bool(free))
