"""Choosing what to recompute so that a plan fits a memory budget: a greedy, not an optimum.

    rp = sw.recompute_plan(plan, budget="16GB")
    rp.ops, rp.fits, rp.peak_bytes, rp.unrecomputed_peak    # what it chose, and the arenas
    rp.added_time                                            # simulated seconds the recomputes add
    sw.Trainer(g, plan, recompute=rp)                        # trains on that graph
    rp = sw.recompute_plan(plan, budget="16GB", swap=True)   # keep, recompute or swap: rp.swap

"Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization" (Jain et al.)
solves the choice (keep or recompute every tensor) as an integer program.  This is the first
step short of it: feature maps are ranked by the bytes they keep live when the backward pass
starts on the devices over budget, per second of recomputing them (their forward tasks'
simulated time), best first; an op joins the choice unless it would make a chain of recomputed
ops (a producer and its consumer, both recomputed: a segment re-run as one) longer than
``max_segment`` (a recomputed input is recomputed once, right before its consumer's recompute,
and stays live through that segment's backward, so long segments save little).  The shortest
prefix of that ranking whose memory plan fits every device's budget is found by bisection on
lowered graphs (each evaluation: a lowering and a memory plan).  Neither the ranking nor the
bisection is optimal: ``method`` says so, and so does ``sw.search``'s ``search_stats``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise import _core
from shardwise.iteration.lower import TaskGraph, lower, lowered_graph, ring_detail
from shardwise.iteration.memory import memory_plan
from shardwise.iteration.swap import _per_device, swap_plan
from shardwise.plan import Plan

METHOD = "greedy: feature maps by bytes kept per recompute second, segments of at most {} ops, shortest fitting prefix"


@dataclass
class RecomputePlan:
    """Which ops' feature maps a plan recomputes under a budget, and what that costs.

    Per device: ``budget``, ``peak_bytes`` (the arena of the recomputed graph's memory plan) and
    ``unrecomputed_peak`` (without recomputation).  ``ops``: the ops chosen (graph order);
    ``fits``: every arena within its budget (else ``ops`` is every op ranked and ``peak_bytes``
    the least the greedy reached).  ``iteration_time`` and ``recomputed_iteration_time``: the
    iteration as ``sw.simulate`` replays it without and with the recompute tasks (the same
    costs; with ``swap``, its swap tasks too); ``added_time`` their difference.  ``method`` names
    the greedy; ``evaluations`` the memory plans (and swap plans) it made; ``swap``: the SwapPlan
    taken by ``recompute_plan(..., swap=True)``, or None."""

    plan: Plan
    budget: dict[int, int]
    ops: tuple[str, ...]
    fits: bool
    peak_bytes: dict[int, int]
    unrecomputed_peak: dict[int, int]
    iteration_time: float
    recomputed_iteration_time: float
    method: str
    evaluations: int
    optimizer_state: int = 1
    ranked: tuple[str, ...] = field(default=(), repr=False)   # every candidate, best first
    swap: Any = field(default=None, repr=False)   # recompute_plan(swap=True): the SwapPlan taken (carries ``ops``)

    @property
    def added_time(self) -> float:
        """Seconds the recompute tasks add to the simulated iteration."""
        return max(self.recomputed_iteration_time - self.iteration_time, 0.0)

    def summary(self) -> str:
        rows = [f"recompute plan of {self.plan.name!r}: {len(self.ops)} ops recomputed "
                f"({'fits' if self.fits else 'does not fit'}; +{self.added_time * 1e3:.3f} ms simulated; "
                f"{self.method})",
                f"{'device':>6} {'budget GB':>10} {'peak GB':>9} {'kept-all GB':>12}"]
        for d in sorted(self.peak_bytes):
            rows.append(f"{d:>6} {self.budget[d] / 1e9:>10.3f} {self.peak_bytes[d] / 1e9:>9.3f} "
                        f"{self.unrecomputed_peak[d] / 1e9:>12.3f}")
        return "\n".join(rows)


def _arenas(tg: TaskGraph) -> dict[int, int]:
    mp = memory_plan(tg)
    return {d: m.arena_bytes for d, m in mp.devices.items()}


def _recomputed(tg: TaskGraph) -> tuple[str, ...]:
    """The ops that got recompute tasks in ``tg`` (graph order): ``sw.lower``'s ``recomputed``."""
    if not tg.handle.recomputed:
        return ()
    r = tg.handle.arrays()
    ops = np.unique(r["op"][r["kind"] == _core.TASK_KINDS.index("recompute")])
    return tuple(tg.plan.graph.ops[int(i)].name for i in ops)


def _kept_bytes(tg: TaskGraph, over: set[int]) -> dict[str, int]:
    """Per op, the bytes of its feature maps live when the backward pass starts, on the devices in
    ``over``."""
    mp = memory_plan(tg)
    r = tg.handle.arrays()
    later = np.flatnonzero(r["phase"] != _core.PHASES.index("forward"))
    start = int(later[0]) if len(later) else len(r["phase"])
    first, last = mp.arrays["first"], mp.arrays["last"]
    mine = ((r["buffer_kind"] == _core.BUFFER_KINDS.index("activation")) & np.isin(r["buffer_device"], sorted(over))
            & (first < start) & (start <= last))
    sums = np.bincount(r["buffer_op"][mine], weights=r["buffer_bytes"][mine].astype(np.float64))
    names = [op.name for op in tg.plan.graph.ops]
    return {names[i]: int(round(sums[i])) for i in np.flatnonzero(np.bincount(r["buffer_op"][mine]))}


def _forward_seconds(tg: TaskGraph, costs: Any) -> dict[str, float]:
    """Per op, the simulated seconds of its forward tasks (every worker)."""
    from shardwise.iteration.simulate import simulate

    return simulate(tg, check_memory=False, costs=costs).seconds_by_op("forward")


def _ranked(plan: Plan, candidates: tuple[str, ...], kept: dict[str, int], seconds: dict[str, float],
            max_segment: int) -> list[str]:
    """Candidates by kept bytes per recompute second (best first), skipping those that would make
    a chain of recomputed ops longer than ``max_segment``."""
    g = plan.graph
    score = {n: kept.get(n, 0) / max(seconds.get(n, 0.0), 1e-12) for n in candidates if kept.get(n, 0) > 0}
    order = sorted(score, key=lambda n: (-score[n], -kept[n], g[n].index))
    segment: dict[str, set[str]] = {}   # chosen op -> the chosen ops of its chain (shared set)
    chosen: list[str] = []
    for name in order:
        op = g[name]
        near = {g.ops[i].name for i in op.inputs} | {g.ops[c].name for c in g.consumers(op.index)}
        joined = {name}
        for other in near:
            joined |= segment.get(other, set())
        if len(joined) > max_segment:
            continue
        for member in joined:
            segment[member] = joined
        chosen.append(name)
    return chosen


def recompute_plan(plan: Plan, budget: Any, costs: Any = None, optimizer_state: int = 1,
                   max_segment: int = 2, swap: bool = False) -> RecomputePlan:
    """Recompute feature maps of ``plan`` so that every device's arena fits ``budget`` (bytes, a
    size string such as "16GB", or a dict {device: budget}), greedily (the module's docstring).
    ``costs``: the computation model, as :func:`shardwise.simulate` takes it; ``optimizer_state``:
    as the trainer will lower the plan (1 SGD, 2 Adam); ``max_segment``: the longest chain of
    recomputed ops.  ``fits`` is False when even every candidate does not fit.

    ``swap=True``: keep, recompute or swap per feature map.  Besides recomputation alone (the
    shortest fitting prefix k of the ranking), swap plans (:func:`shardwise.swap_plan`) are made
    on the graphs recomputing none, half and all of that prefix (or of the whole ranking, when
    recomputation alone does not fit), and the one of these that fits with the least simulated
    iteration is taken: ``swap`` holds its SwapPlan (None: recomputation alone), which carries
    the recomputation (``sw.Trainer(g, plan, swap=rp.swap)``).  Still a greedy over a few
    candidates, not an optimum.

    The graphs it plans are lowered as :func:`shardwise.simulate` lowers them: on machines of
    more than ``FUSED_RINGS_ABOVE`` devices with fused ring all-reduces (the same arenas as the
    chunked rings the runtime runs, on the zoo's plans), as the search's memory check does."""
    if not isinstance(plan, Plan):
        raise TypeError(f"recompute_plan needs a Plan, got {type(plan).__name__}")
    if isinstance(max_segment, bool) or not isinstance(max_segment, int) or max_segment < 1:
        raise ValueError(f"max_segment must be an int >= 1, got {max_segment!r}")
    ndev = len(plan.devices)
    budgets = dict(enumerate(_per_device(budget, ndev, "budget")))
    # rings as the simulator and the search's memory check lower them: fused on large machines,
    # where the chunked ring's k (k - 1) transfers per gradient do not fit in memory (on 1,024
    # devices hundreds of millions of tasks); the same arenas as the chunked graph on the zoo's plans.
    # Each graph stays in the C core (lowered_graph): the greedy reads its arrays, memory plans and
    # replays, never a Python record per task (on a 32-layer Llama over 64 GPUs those records took
    # seven of every eight seconds)
    rings = ring_detail(plan, "auto")
    plain = lowered_graph(plan, optimizer_state, rings)
    before = _arenas(plain)
    evaluations = 1
    over = {d for d in range(ndev) if before[d] > budgets[d]}
    ranked: list[str] = []
    best, best_arena = (), before
    if over:
        candidates = _recomputed(lowered_graph(plan, optimizer_state, rings, recompute="all"))
        ranked = _ranked(plan, candidates, _kept_bytes(plain, over), _forward_seconds(plain, costs), max_segment)

        def arena_of(k: int) -> dict[int, int]:
            return _arenas(lowered_graph(plan, optimizer_state, rings, recompute=ranked[:k]))

        lo, hi = 0, len(ranked)          # fits with ranked[:hi] (checked first), not with ranked[:lo]
        best_arena = arena_of(hi) if hi else before
        evaluations += 1 if hi else 0
        if all(best_arena[d] <= budgets[d] for d in range(ndev)):
            while hi - lo > 1:
                mid = (lo + hi) // 2
                arena = arena_of(mid)
                evaluations += 1
                if all(arena[d] <= budgets[d] for d in range(ndev)):
                    hi, best_arena = mid, arena
                else:
                    lo = mid
        best = tuple(ranked[:hi])
    fits = all(best_arena[d] <= budgets[d] for d in range(ndev))
    index = {op.name: op.index for op in plan.graph.ops}
    ops = tuple(sorted(best, key=index.__getitem__))
    from shardwise.iteration.simulate import simulate

    base_time = simulate(plain, check_memory=False, costs=costs).iteration_time
    time = simulate(lowered_graph(plan, optimizer_state, rings, recompute=ops), check_memory=False,
                    costs=costs).iteration_time \
        if ops else base_time
    method, chosen_swap = METHOD.format(max_segment), None
    if swap and over:
        prefix = len(best) if fits else len(ranked)
        options = [(time, ops, None, best_arena)] if fits else []
        for k in sorted({0, prefix // 2, prefix} - ({prefix} if fits else set())):
            ops_k = tuple(sorted(ranked[:k], key=index.__getitem__))
            try:
                sp = swap_plan(lower(plan, optimizer_state, recompute=ops_k or None), budgets, costs=costs)
            except ValueError:   # below what swapping reaches on this graph
                continue
            evaluations += 1
            options.append((sp.swapped_iteration_time, ops_k, sp, sp.peak_bytes))
        if options:
            time, ops, chosen_swap, best_arena = min(options, key=lambda o: (o[0], len(o[1])))
            fits = True
        method += (f"; then swapping on {len(options) - (chosen_swap is None and fits)} recomputed graphs "
                   "(none, half, all of that prefix), the fastest simulated that fits")
    return RecomputePlan(plan=plan, budget=budgets, ops=ops, fits=fits, peak_bytes=best_arena,
                         unrecomputed_peak=before, iteration_time=base_time, recomputed_iteration_time=time,
                         method=method, evaluations=evaluations, optimizer_state=optimizer_state,
                         ranked=tuple(ranked), swap=chosen_swap)
